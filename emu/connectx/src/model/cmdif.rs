//! The command interface transport: command-queue doorbell, command entries and mailbox chains
//! read from memory and checked the way the adapter checks them (type, token, block numbers,
//! pointers, lengths → delivery status), output written back, ownership returned, and the
//! command-completion EQE. What a command does is `exec`'s business.

use log::{debug, warn};

use super::{Device, MAILBOX_ALIGN, MAX_CMD_LEN};
use crate::consts::{delivery, event, op, status as st, synd};
use mlx5_ifc::ifc as l;
use mlx5_ifc::layout::{get, set};

impl Device {
    fn cmdq_pa(&self) -> u64 {
        ((self.cmdq_h as u64) << 32) | self.cmdq_l as u64
    }

    pub(super) fn ring_cmd(&mut self, mask: u32) {
        let n = 1u32 << self.cfg.profile.log_cmdq_size;
        if self.cmdq_pa() == 0 || self.initializing() || !self.commands_on() {
            self.ctr.stray_doorbells += 1;
            return;
        }
        for slot in 0..n.min(32) {
            if mask & (1 << slot) != 0 {
                self.run_slot(slot, true);
            }
        }
        self.resume_parked();
        self.maybe_request_pages();
    }

    /// Execute the command in `slot` now (a parked command resuming).
    pub(crate) fn run_slot_now(&mut self, slot: u32) {
        self.run_slot(slot, false)
    }

    fn run_slot(&mut self, slot: u32, may_park: bool) {
        let ea = self.cmdq_pa() + ((slot as u64) << self.cfg.profile.log_cmdq_stride);
        let mut e = [0u8; 64];
        if self.mem.dma_read(ea, &mut e).is_err() {
            self.ctr.dma_faults += 1;
            warn!("cx: command entry {slot} at {ea:#x} is not in memory");
            return;
        }
        if get(&e, l::cmd_layout::ownership) == 0 {
            self.ctr.stray_doorbells += 1;
            return;
        }
        let opcode = get(&e, l::mbox_in::opcode.at(l::cmd_layout::r#in)) as u16;
        if self.faults.hang_all || self.faults.hang_opcodes.contains(&opcode) || self.health_synd != 0 {
            self.ctr.hung_commands += 1;
            debug!("cx: {} (slot {slot}) will never complete", op::name(opcode).unwrap_or("UNKNOWN"));
            return;
        }
        if may_park && self.parked == Some(slot) {
            // Already executing (waiting for pages): a second doorbell changes nothing.
            self.ctr.stray_doorbells += 1;
            return;
        }
        if may_park && self.park_for_pages(slot, opcode) {
            debug!("cx: {} (slot {slot}) waits for pages", op::name(opcode).unwrap_or("UNKNOWN"));
            return;
        }
        self.ctr.commands += 1;
        let dstat = self.deliver(&mut e, slot);
        if dstat != delivery::OK {
            self.ctr.delivery_failures += 1;
            debug!("cx: slot {slot} delivery status {dstat:#x}");
        }
        set(&mut e, l::cmd_layout::status, dstat as u64);
        set(&mut e, l::cmd_layout::ownership, 0);
        // Output bytes first, then the status/ownership byte.
        let _ = self.mem.dma_write(ea + 0x20, &e[0x20..0x30]);
        if self.mem.dma_write(ea + 0x3f, &e[0x3f..0x40]).is_err() {
            self.ctr.dma_faults += 1;
        }
        let mut data = [0u8; 28];
        data[0..4].copy_from_slice(&(1u32 << slot).to_be_bytes());
        self.raise_event(event::CMD, 0, &data);
    }

    /// Walk a mailbox chain of `nblocks`, checking pointer, block number and token.
    fn walk_mailboxes(&mut self, first: u64, nblocks: usize, token: u8, bad_ptr: u8) -> Result<Vec<(u64, [u8; 0x240])>, u8> {
        let mut v = Vec::with_capacity(nblocks);
        let mut ptr = first;
        for i in 0..nblocks {
            if ptr == 0 || !ptr.is_multiple_of(MAILBOX_ALIGN) {
                return Err(bad_ptr);
            }
            let mut b = [0u8; 0x240];
            if self.mem.dma_read(ptr, &mut b).is_err() {
                self.ctr.dma_faults += 1;
                return Err(bad_ptr);
            }
            if get(&b, l::cmd_prot_block::block_num) != i as u64 {
                return Err(delivery::BAD_BLOCK_NUMBER);
            }
            if get(&b, l::cmd_prot_block::token) != token as u64 {
                return Err(delivery::TOKEN_ERR);
            }
            let next = get(&b, l::cmd_prot_block::next);
            v.push((ptr, b));
            ptr = next;
        }
        Ok(v)
    }

    /// Deliver one command; returns the delivery status. Output goes into `e` and mailboxes.
    fn deliver(&mut self, e: &mut [u8; 64], _slot: u32) -> u8 {
        use l::cmd_layout as c;
        if get(e, c::r#type) != 7 {
            return delivery::BAD_COMMAND_TYPE;
        }
        let inlen = get(e, c::ilen) as u32;
        let outlen = get(e, c::olen) as u32;
        let token = get(e, c::token) as u8;
        if !(8..=MAX_CMD_LEN).contains(&inlen) {
            return delivery::INPUT_LEN_ERR;
        }
        if !(8..=MAX_CMD_LEN).contains(&outlen) {
            return delivery::OUTPUT_LEN_ERR;
        }
        let mut input = e[0x10..0x20].to_vec();
        if inlen > 16 {
            let nb = (inlen as usize - 16).div_ceil(512);
            match self.walk_mailboxes(get(e, c::iptr), nb, token, delivery::BAD_INPUT_POINTER) {
                Ok(blocks) => {
                    for (_, b) in &blocks {
                        input.extend_from_slice(&b[..512]);
                    }
                }
                Err(d) => return d,
            }
        }
        input.truncate(inlen as usize);
        let out_blocks = if outlen > 16 {
            let nb = (outlen as usize - 16).div_ceil(512);
            match self.walk_mailboxes(get(e, c::optr), nb, token, delivery::BAD_OUTPUT_POINTER) {
                Ok(b) => b,
                Err(d) => return d,
            }
        } else {
            Vec::new()
        };
        let opcode = get(&input, l::mbox_in::opcode) as u16;
        let op_mod = get(&input, l::mbox_in::op_mod) as u16;
        let forced = match (self.faults.forced.get(&opcode), self.faults.forced_after.get_mut(&opcode)) {
            (Some(_), Some(n)) if *n > 0 => {
                *n -= 1;
                None
            }
            (f, _) => f.copied(),
        };
        let res = match forced {
            Some((s, y)) => Err((s, y)),
            None => self.exec(opcode, op_mod, &input),
        };
        let mut outb = vec![0u8; outlen as usize];
        match res {
            Ok(o) if o.len() > outlen as usize => {
                set(&mut outb, l::mbox_out::status, st::BAD_OUTP_LEN as u64);
                set(&mut outb, l::mbox_out::syndrome, synd::OUTPUT_TOO_SHORT as u64);
                self.ctr.cmd_failures += 1;
            }
            Ok(o) => outb[..o.len()].copy_from_slice(&o),
            Err((s, y)) => {
                debug!("cx: {}({opcode:#x}) op_mod {op_mod:#x} failed: status {s:#x} syndrome {y:#x}", op::name(opcode).unwrap_or("UNKNOWN"));
                set(&mut outb, l::mbox_out::status, s as u64);
                set(&mut outb, l::mbox_out::syndrome, y as u64);
                self.ctr.cmd_failures += 1;
            }
        }
        e[0x20..0x30].copy_from_slice(&outb[..16]);
        for (i, (pa, _)) in out_blocks.iter().enumerate() {
            let from = 16 + i * 512;
            let to = (from + 512).min(outb.len());
            if self.mem.dma_write(*pa, &outb[from..to]).is_err() {
                self.ctr.dma_faults += 1;
                return delivery::BAD_OUTPUT_POINTER;
            }
        }
        delivery::OK
    }
}
