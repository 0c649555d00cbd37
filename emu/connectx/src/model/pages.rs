//! Firmware pages: how many the function wants in each state, QUERY_PAGES, MANAGE_PAGES
//! (give, take, cannot-give), page-request EQEs, and the fill pattern check on returned pages.

use log::warn;

use super::{fail, need, out, CmdResult, Device, FuncState, FW_PAGE_FILL, MAX_CMD_LEN, PAGE};
use crate::consts::{event, pages_op, status as st, synd};
use mlx5_ifc::ifc as l;
use mlx5_ifc::layout::{get, set};

impl Device {
    /// QUERY_PAGES: boot (op_mod 1), init (2) or regular (3) pages still wanted; negative to give back.
    pub(super) fn query_pages(&self, op_mod: u16) -> CmdResult {
        let held = self.pages.len() as i64;
        let b = self.cfg.profile.pages.boot as i64;
        let i = self.cfg.profile.pages.init as i64;
        let n = match (self.func, op_mod) {
            (FuncState::TornDown, _) => -held,
            (_, pages_op::BOOT) => (b - held).max(0),
            (_, pages_op::INIT) => (b + i - held).max(0),
            (FuncState::Initialized, _) => self.page_target() - held,
            _ => 0,
        };
        let mut o = out(16);
        set(&mut o, l::query_pages_out::function_id, self.function_id() as u64);
        set(&mut o, l::query_pages_out::num_pages, n as i32 as u32 as u64);
        Ok(o)
    }

    pub(super) fn manage_pages(&mut self, op_mod: u16, inp: &[u8]) -> CmdResult {
        let n = get(inp, l::manage_pages_in::input_num_entries) as usize;
        self.check_page_function(get(inp, l::manage_pages_in::function_id))?;
        match op_mod {
            pages_op::CANT_GIVE => {
                // The driver could not allocate what was asked for.
                self.page_req_outstanding = u32::MAX; // do not ask again until asked to
                Ok(out(16))
            }
            pages_op::GIVE => {
                if self.faults.refuse_pages {
                    return fail(st::NO_RES, synd::PAGES_REFUSED);
                }
                need(inp, 16 + 8 * n)?;
                let mut new = Vec::with_capacity(n);
                for i in 0..n {
                    let pa = get(inp, l::manage_pages_in::pas.at_byte(8 * i));
                    if !pa.is_multiple_of(PAGE) || !self.mem.is_mapped(pa, PAGE as usize) {
                        if pa.is_multiple_of(PAGE) {
                            self.ctr.dma_faults += 1;
                        }
                        return fail(st::BAD_PARAM, synd::BAD_PAGE_ADDRESS);
                    }
                    if self.pages.contains(&pa) || new.contains(&pa) {
                        return fail(st::BAD_PARAM, synd::DUPLICATE_PAGE);
                    }
                    new.push(pa);
                }
                let fill = [FW_PAGE_FILL; PAGE as usize];
                for pa in new {
                    let _ = self.mem.dma_write(pa, &fill);
                    self.pages.insert(pa);
                }
                if self.page_req_outstanding != u32::MAX {
                    self.page_req_outstanding = self.page_req_outstanding.saturating_sub(n as u32);
                }
                Ok(out(16))
            }
            _ => {
                if n > MAX_CMD_LEN as usize / 8 {
                    // More entries than any output could hold.
                    return fail(st::BAD_OUTP_LEN, synd::OUTPUT_TOO_SHORT);
                }
                let o_len = 16 + 8 * n;
                let surplus = (self.pages.len() as i64 - self.page_target()).max(0) as usize;
                let give = if self.faults.withhold_pages { 0 } else { n.min(surplus) };
                let mut o = out(o_len);
                let taken: Vec<u64> = self.pages.iter().rev().take(give).copied().collect();
                let mut buf = vec![0u8; PAGE as usize];
                for (i, pa) in taken.iter().enumerate() {
                    self.pages.remove(pa);
                    if self.mem.dma_read(*pa, &mut buf).is_err() || buf.iter().any(|&b| b != FW_PAGE_FILL) {
                        self.ctr.fw_page_corruptions += 1;
                        warn!("cx: firmware page {pa:#x} was modified by the host while firmware owned it");
                    }
                    set(&mut o, l::manage_pages_out::pas.at_byte(8 * i), *pa);
                }
                set(&mut o, l::manage_pages_out::output_num_entries, give as u64);
                if self.page_req_outstanding == u32::MAX {
                    self.page_req_outstanding = 0;
                }
                Ok(o)
            }
        }
    }

    pub(crate) fn page_target(&self) -> i64 {
        let b = self.cfg.profile.pages.boot as i64;
        let i = self.cfg.profile.pages.init as i64;
        let r = (self.cfg.profile.pages.regular as i64 + self.extra_regular).max(0);
        match self.func {
            FuncState::Disabled | FuncState::TornDown => 0,
            FuncState::Enabled => b + i,
            FuncState::Initialized => b + i + r + (self.qps.len() as i64) * self.cfg.profile.pages.per_qp as i64,
        }
    }

    pub(super) fn maybe_request_pages(&mut self) {
        if self.func != FuncState::Initialized || self.page_req_outstanding != 0 {
            return;
        }
        let deficit = self.page_target() - self.pages.len() as i64;
        if deficit > 0 && self.request_pages_eqe(deficit as i32) {
            self.page_req_outstanding = deficit as u32;
        }
    }

    pub(crate) fn request_pages_eqe(&mut self, n: i32) -> bool {
        let mut d = [0u8; 28];
        d[2..4].copy_from_slice(&self.function_id().to_be_bytes());
        d[4..8].copy_from_slice(&n.to_be_bytes());
        let ok = self.raise_event(event::PAGE_REQUEST, 0, &d);
        if ok {
            self.ctr.page_requests += 1;
        }
        ok
    }

    /// Test knob: firmware wants `n` more pages (n > 0) or wants to return `-n` (n < 0);
    /// posts a page-request EQE. Returns whether an EQ took it.
    pub fn request_pages(&mut self, n: i32) -> bool {
        self.extra_regular += n as i64;
        if n > 0 {
            self.page_req_outstanding = 0;
            let before = self.ctr.page_requests;
            self.maybe_request_pages();
            self.ctr.page_requests > before
        } else {
            self.request_pages_eqe(n)
        }
    }
}
