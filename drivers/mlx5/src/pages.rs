//! Firmware pages: QUERY_PAGES, MANAGE_PAGES give/take on the reserved page slot, page requests.
//!
//! Page commands have their own command slot, mailboxes and staging buffers, so a page request
//! the firmware raises while it executes another command (and on which that command waits) is
//! answered from inside the wait (see `Mlx5::run`). The function ID is the one the firmware
//! names: QUERY_PAGES' output and the page-request event's `function_id` (Linux
//! `pagealloc.c` gives pages to the function the request names; a VF is not function 0).

use alloc::vec::Vec;

use crate::cmd::{op, Slot};
use crate::device::Mlx5;
use crate::error::Error;
use crate::ifc::*;
use crate::layout::{get, set};
use hal::{DmaRegion, Hal, Mmio};

const PAGE: usize = 4096;
/// Pages per MANAGE_PAGES command (16 + 8 * 512 bytes: the page slot's mailboxes).
pub(crate) const PAGES_PER_CMD: usize = 512;
/// Staging buffer size for page commands (the page slot's largest message).
pub(crate) const PAGE_MSG: usize = crate::cmd::PAGE_SLOT_MSG;
const _: () = assert!(0x10 + 8 * PAGES_PER_CMD <= PAGE_MSG);

pub(crate) use mlx5_ifc::pages_op;

impl<H: Hal, M: Mmio> Mlx5<H, M> {
    /// QUERY_PAGES(op_mod) and give (or take) what the firmware asks for, to the function it names.
    pub(crate) fn satisfy_pages(&mut self, which: u16) -> Result<(), Error> {
        self.begin(op::QUERY_PAGES, which, query_pages_in::LAYOUT.size);
        set(&mut self.inb, query_pages_in::function_id, 0);
        self.run(query_pages_in::LAYOUT.size, query_pages_out::LAYOUT.size)?;
        let func = self.out(query_pages_out::function_id) as u16;
        let n = self.out(query_pages_out::num_pages) as u32 as i32;
        self.page_func = func;
        self.page_request(func, n)
    }

    /// Answer a page request for function `func`: give `n` pages (n > 0) or take `-n` back.
    pub(crate) fn page_request(&mut self, func: u16, n: i32) -> Result<(), Error> {
        if n > 0 {
            self.give_pages(func, n as usize)
        } else if n < 0 {
            self.take_pages(func, n.unsigned_abs() as usize).map(|_| ())
        } else {
            Ok(())
        }
    }

    /// Run the MANAGE_PAGES in `page_in[..in_len]` on the reserved slot.
    fn page_cmd(&mut self, in_len: usize, out_len: usize) -> Result<(), Error> {
        self.page_out[..out_len].iter_mut().for_each(|b| *b = 0);
        let r = self.cmd.exec(&self.hal, &self.bar, Slot::Pages, &self.page_in[..in_len], &mut self.page_out[..out_len]);
        self.stats.commands = self.cmd.issued;
        r
    }

    fn begin_page_cmd(&mut self, op_mod: u16, func: u16, entries: usize, in_len: usize) {
        self.page_in[..in_len].iter_mut().for_each(|b| *b = 0);
        set(&mut self.page_in, mbox_in::opcode, op::MANAGE_PAGES as u64);
        set(&mut self.page_in, mbox_in::op_mod, op_mod as u64);
        set(&mut self.page_in, manage_pages_in::function_id, func as u64);
        set(&mut self.page_in, manage_pages_in::input_num_entries, entries as u64);
    }

    /// Tell the firmware its page request cannot be met.
    fn refuse_pages(&mut self, func: u16) -> Result<(), Error> {
        let len = manage_pages_in::LAYOUT.size;
        self.begin_page_cmd(pages_op::CANT_GIVE, func, 0, len);
        self.page_cmd(len, manage_pages_out::LAYOUT.size)
    }

    fn give_pages(&mut self, func: u16, mut n: usize) -> Result<(), Error> {
        if self.pages.len().saturating_add(n) > self.cfg.max_fw_pages {
            log::error!("mlx5: firmware asks for {n} more pages, over the budget of {}", self.cfg.max_fw_pages);
            self.refuse_pages(func)?;
            return Err(Error::Unsupported("firmware page demand over Config::max_fw_pages"));
        }
        while n > 0 {
            let k = core::cmp::min(n, PAGES_PER_CMD);
            let mut batch: Vec<H::Dma> = Vec::with_capacity(k);
            for _ in 0..k {
                match self.hal.dma_alloc(PAGE, PAGE) {
                    Ok(p) => batch.push(p),
                    Err(e) => {
                        drop(batch);
                        self.refuse_pages(func)?;
                        return Err(e.into());
                    }
                }
            }
            let in_len = manage_pages_in::LAYOUT.size + 8 * k;
            self.begin_page_cmd(pages_op::GIVE, func, k, in_len);
            for (i, p) in batch.iter().enumerate() {
                set(&mut self.page_in, manage_pages_in::pas.index(i as u32), p.paddr());
            }
            self.page_cmd(in_len, manage_pages_out::LAYOUT.size)?;
            for p in batch {
                self.pages.insert(p.paddr(), p);
            }
            self.stats.pages_given += k as u64;
            n -= k;
        }
        Ok(())
    }

    /// Ask function `func`'s firmware for up to `n` pages back; returns how many came back.
    pub(crate) fn take_pages(&mut self, func: u16, n: usize) -> Result<usize, Error> {
        let mut got = 0;
        let mut left = n;
        while left > 0 {
            let k = core::cmp::min(left, PAGES_PER_CMD);
            let in_len = manage_pages_in::LAYOUT.size;
            self.begin_page_cmd(pages_op::TAKE, func, k, in_len);
            let out_len = manage_pages_out::LAYOUT.size + 8 * k;
            self.page_cmd(in_len, out_len)?;
            let returned = get(&self.page_out, manage_pages_out::output_num_entries) as usize;
            if returned > k {
                return Err(Error::BadOutput { opcode: op::MANAGE_PAGES, what: "more pages returned than asked" });
            }
            for i in 0..returned {
                let pa = get(&self.page_out, manage_pages_out::pas.index(i as u32));
                match self.pages.remove(&pa) {
                    Some(region) => drop(region),
                    None => {
                        return Err(Error::BadOutput { opcode: op::MANAGE_PAGES, what: "returned a page it was never given" })
                    }
                }
            }
            self.stats.pages_reclaimed += returned as u64;
            got += returned;
            if returned < k {
                break;
            }
            left -= k;
        }
        Ok(got)
    }
}
