//! BAR0 as the CPU sees it: the initialization segment (firmware version, command queue
//! address, `initializing`, health buffer, internal timer) and the UAR pages' doorbell
//! registers (EQ, CQ arm, send queue), decoded and handed to the object they name.

use super::{Device, FuncState, FIRST_UAR};
use crate::consts::uar as uar_reg;

impl Device {
    pub(super) fn initializing(&self) -> bool {
        self.faults.stuck_initializing
            || self.clock.now_ns().wrapping_sub(self.created_ns) < self.cfg.init_delay_ns
    }

    fn health_counter(&mut self) -> u32 {
        let live = ((self.clock.now_ns() / self.cfg.health_tick_ns.max(1)) & 0xFF_FFFF) as u32;
        if self.faults.health_stopped {
            *self.health_frozen_at.get_or_insert(live)
        } else {
            self.health_frozen_at = None;
            live
        }
    }

    /// Big-endian value of the 32-bit init-segment register at `off` (4-aligned).
    fn init_reg(&mut self, off: usize) -> u32 {
        match off {
            0x000 => ((self.cfg.profile.fw.minor as u32) << 16) | self.cfg.profile.fw.major as u32,
            0x004 => ((self.cfg.profile.cmdif_rev as u32) << 16) | self.cfg.profile.fw.subminor as u32,
            0x010 => self.cmdq_h,
            0x014 => {
                (self.cmdq_l & 0xFFFF_F000)
                    | ((self.nic_interface() as u32) << 8)
                    | ((self.cfg.profile.log_cmdq_size as u32) << 4)
                    | self.cfg.profile.log_cmdq_stride as u32
            }
            0x1fc => (self.initializing() as u32) << 31,
            0x230 => ((self.cfg.profile.fw.major as u32) << 16) | self.cfg.profile.fw.minor as u32,
            0x234 => 0x0000_020b,
            // irisc_index @0x23C, synd @0x23D, ext_synd @0x23E [device.h health_buffer].
            0x23c => (self.health_synd as u32) << 16,
            0x1000 => (self.clock.now_ns() >> 32) as u32,
            0x1004 => self.clock.now_ns() as u32,
            0x1010 => self.health_counter(),
            _ => 0,
        }
    }

    pub fn bar_read32(&mut self, off: usize) -> u32 {
        self.ctr.mmio_reads += 1;
        if off & 3 == 0 && off < 0x3000 {
            let v = self.init_reg(off);
            return u32::from_le_bytes(v.to_be_bytes());
        }
        // Unaligned or beyond the init segment: assemble bytes (UAR registers read as 0).
        let mut b = [0u8; 4];
        for (i, byte) in b.iter_mut().enumerate() {
            let o = off + i;
            if o < 0x3000 {
                *byte = self.init_reg(o & !3).to_be_bytes()[o & 3];
            }
        }
        u32::from_le_bytes(b)
    }

    pub fn bar_write32(&mut self, off: usize, v: u32) {
        self.ctr.mmio_writes += 1;
        self.bar_store32(off, v)
    }

    fn bar_store32(&mut self, off: usize, v: u32) {
        let be = u32::from_be_bytes(v.to_le_bytes());
        match off {
            0x010 => self.cmdq_h = be,
            0x014 => {
                self.cmdq_l = be & 0xFFFF_F000;
                self.nic_interface_write(((be >> 8) & 7) as u8);
            }
            0x018 => self.ring_cmd(be),
            _ if off >= FIRST_UAR as usize * 0x1000 => self.uar_write(off, &be.to_be_bytes()),
            _ => self.ctr.stray_doorbells += 1,
        }
    }

    pub fn bar_write64(&mut self, off: usize, v: u64) {
        self.ctr.mmio_writes += 1;
        let bytes = v.to_le_bytes();
        if off < FIRST_UAR as usize * 0x1000 {
            self.bar_store32(off, u32::from_le_bytes(bytes[0..4].try_into().unwrap()));
            self.bar_store32(off + 4, u32::from_le_bytes(bytes[4..8].try_into().unwrap()));
        } else {
            self.uar_write(off, &bytes);
        }
    }

    fn uar_write(&mut self, off: usize, bytes: &[u8]) {
        let uar = (off / 0x1000) as u32;
        let reg = off % 0x1000;
        if !self.uars.contains(&uar) || self.func != FuncState::Initialized {
            self.ctr.stray_doorbells += 1;
            return;
        }
        match (reg, bytes.len()) {
            (uar_reg::EQ_ARM | uar_reg::EQ_NOARM, _) => {
                self.ctr.eq_doorbells += 1;
                let v = u32::from_be_bytes(bytes[0..4].try_into().unwrap());
                self.eq_doorbell(uar, v, reg == uar_reg::EQ_ARM);
            }
            (uar_reg::CQ_DOORBELL, 8) => {
                self.ctr.cq_arm_doorbells += 1;
                let v = u64::from_be_bytes(bytes.try_into().unwrap());
                self.cq_arm(uar, v);
            }
            (uar_reg::BF..=0xFFF, 8) => {
                let v = u64::from_be_bytes(bytes.try_into().unwrap());
                let qpn = ((v & 0xFFFF_FFFF) >> 8) as u32;
                let ok = match self.qps.get(&qpn) {
                    Some(q) => q.uar == uar,
                    None => self.raw.sqs.get(&qpn).is_some_and(|s| s.uar == uar),
                };
                if ok {
                    self.ctr.sq_doorbells += 1;
                    // One pending entry per queue: the SQ runs up to the doorbell record anyway.
                    if !self.sq_doorbells.iter().any(|d| d.0 == qpn) {
                        self.sq_doorbells.push((qpn, v));
                    }
                } else {
                    self.ctr.stray_doorbells += 1;
                }
            }
            _ => self.ctr.stray_doorbells += 1,
        }
    }
}
