//! nvme regs: controller registers (NVMe Base Specification 2.0, §3.1.4 "Controller
//! Properties", Figure 33 onwards) as bitfield types, plus the doorbell layout (§3.1.4.20-21).
//!
//! Every field is declared once here; the driver reads a register into its type and uses
//! the named accessors, never shifts.

use bitfield_struct::bitfield;

/// Register offsets in BAR0 (§3.1.4, Figure 33).
pub mod off {
    use nvme_spec::prop;
    /// Controller Capabilities (64 bit); the offsets shared with Fabrics properties are
    /// declared in `nvme_spec::prop`.
    pub const CAP: usize = prop::CAP as usize;
    /// Version.
    pub const VS: usize = prop::VS as usize;
    /// Interrupt Mask Set.
    pub const INTMS: usize = prop::INTMS as usize;
    /// Controller Configuration.
    pub const CC: usize = prop::CC as usize;
    /// Controller Status.
    pub const CSTS: usize = prop::CSTS as usize;
    /// Admin Queue Attributes.
    pub const AQA: usize = 0x24;
    /// Admin Submission Queue base address (64 bit).
    pub const ASQ: usize = 0x28;
    /// Admin Completion Queue base address (64 bit).
    pub const ACQ: usize = 0x30;
    /// First doorbell (SQ 0 tail), §3.1.4.20.
    pub const DOORBELL_BASE: usize = 0x1000;
}

/// CAP, Controller Capabilities (§3.1.4.1, Figure 36).
#[bitfield(u64)]
#[derive(PartialEq, Eq)]
pub struct Cap {
    /// Maximum Queue Entries Supported, 0's based.
    #[bits(16)]
    pub mqes: u16,
    /// Contiguous Queues Required.
    pub cqr: bool,
    /// Arbitration Mechanism Supported.
    #[bits(2)]
    pub ams: u8,
    #[bits(5)]
    __: u8,
    /// Timeout: worst-case time to RDY transition, in 500 ms units.
    #[bits(8)]
    pub to: u8,
    /// Doorbell Stride: doorbells are 2^(2+DSTRD) bytes apart.
    #[bits(4)]
    pub dstrd: u8,
    /// NVM Subsystem Reset Supported.
    pub nssrs: bool,
    /// Command Sets Supported (bit 0: NVM command set).
    #[bits(8)]
    pub css: u8,
    /// Boot Partition Support.
    pub bps: bool,
    /// Controller Power Scope.
    #[bits(2)]
    pub cps: u8,
    /// Memory Page Size Minimum: 2^(12+MPSMIN).
    #[bits(4)]
    pub mpsmin: u8,
    /// Memory Page Size Maximum: 2^(12+MPSMAX).
    #[bits(4)]
    pub mpsmax: u8,
    /// Persistent Memory Region Supported.
    pub pmrs: bool,
    /// Controller Memory Buffer Supported.
    pub cmbs: bool,
    /// NVM Subsystem Shutdown Supported.
    pub nsss: bool,
    /// Controller Ready Modes Supported.
    #[bits(2)]
    pub crms: u8,
    #[bits(3)]
    __: u8,
}

impl Cap {
    /// Ready timeout in nanoseconds (CAP.TO × 500 ms; at least 500 ms).
    pub fn ready_timeout_ns(&self) -> u64 {
        core::cmp::max(self.to() as u64, 1) * 500_000_000
    }
    /// Bytes between two doorbells.
    pub fn doorbell_stride(&self) -> usize {
        4usize << self.dstrd()
    }
}

/// VS, Version (§3.1.4.2, Figure 37).
#[bitfield(u32)]
#[derive(PartialEq, Eq)]
pub struct Vs {
    #[bits(8)]
    pub tertiary: u8,
    #[bits(8)]
    pub minor: u8,
    #[bits(16)]
    pub major: u16,
}

/// CC, Controller Configuration (§3.1.4.5, Figure 41).
#[bitfield(u32)]
#[derive(PartialEq, Eq)]
pub struct Cc {
    /// Enable.
    pub en: bool,
    #[bits(3)]
    __: u8,
    /// I/O Command Set Selected (0: NVM command set).
    #[bits(3)]
    pub css: u8,
    /// Memory Page Size: 2^(12+MPS).
    #[bits(4)]
    pub mps: u8,
    /// Arbitration Mechanism Selected (0: round robin).
    #[bits(3)]
    pub ams: u8,
    /// Shutdown Notification.
    #[bits(2)]
    pub shn: u8,
    /// I/O Submission Queue Entry Size, 2^n bytes (6 → 64).
    #[bits(4)]
    pub iosqes: u8,
    /// I/O Completion Queue Entry Size, 2^n bytes (4 → 16).
    #[bits(4)]
    pub iocqes: u8,
    /// Controller Ready Independent of Media Enable.
    pub crime: bool,
    #[bits(7)]
    __: u8,
}

/// CSTS, Controller Status (§3.1.4.6, Figure 42).
#[bitfield(u32)]
#[derive(PartialEq, Eq)]
pub struct Csts {
    /// Ready.
    pub rdy: bool,
    /// Controller Fatal Status.
    pub cfs: bool,
    /// Shutdown Status.
    #[bits(2)]
    pub shst: u8,
    /// NVM Subsystem Reset Occurred.
    pub nssro: bool,
    /// Processing Paused.
    pub pp: bool,
    /// Shutdown Type.
    pub st: bool,
    #[bits(25)]
    __: u32,
}

/// AQA, Admin Queue Attributes (§3.1.4.8, Figure 45). Sizes are 0's based.
#[bitfield(u32)]
#[derive(PartialEq, Eq)]
pub struct Aqa {
    /// Admin Submission Queue Size.
    #[bits(12)]
    pub asqs: u16,
    #[bits(4)]
    __: u8,
    /// Admin Completion Queue Size.
    #[bits(12)]
    pub acqs: u16,
    #[bits(4)]
    __: u8,
}

/// Offset in BAR0 of a queue's doorbell (§3.1.4.20/21): SQ y tail at
/// 0x1000 + (2y)·stride, CQ y head at 0x1000 + (2y+1)·stride.
pub fn doorbell_offset(qid: u16, completion: bool, stride: usize) -> usize {
    off::DOORBELL_BASE + (2 * qid as usize + completion as usize) * stride
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_positions_match_spec() {
        // CAP.TO is bits 31:24, DSTRD 35:32, MPSMIN 51:48 (Figure 36).
        assert_eq!(Cap::TO_OFFSET, 24);
        assert_eq!(Cap::DSTRD_OFFSET, 32);
        assert_eq!(Cap::CSS_OFFSET, 37);
        assert_eq!(Cap::MPSMIN_OFFSET, 48);
        assert_eq!(Cap::MPSMAX_OFFSET, 52);
        // CC: CSS 6:4, MPS 10:7, SHN 15:14, IOSQES 19:16, IOCQES 23:20 (Figure 41).
        assert_eq!(Cc::CSS_OFFSET, 4);
        assert_eq!(Cc::MPS_OFFSET, 7);
        assert_eq!(Cc::SHN_OFFSET, 14);
        assert_eq!(Cc::IOSQES_OFFSET, 16);
        assert_eq!(Cc::IOCQES_OFFSET, 20);
        assert_eq!(Aqa::ACQS_OFFSET, 16);
        let cc = Cc::new().with_en(true).with_iosqes(6).with_iocqes(4);
        assert_eq!(cc.into_bits(), 0x0046_0001);
    }

    #[test]
    fn doorbells_follow_stride() {
        assert_eq!(doorbell_offset(0, false, 4), 0x1000);
        assert_eq!(doorbell_offset(0, true, 4), 0x1004);
        assert_eq!(doorbell_offset(1, false, 4), 0x1008);
        let cap = Cap::from_bits(0).with_dstrd(2);
        assert_eq!(doorbell_offset(3, true, cap.doorbell_stride()), 0x1000 + 7 * 16);
    }
}
