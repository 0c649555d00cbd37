//! nvme-spec props: the controller properties both transports use (CAP, VS, CC, CSTS; Base
//! 2.0 §3.1.4, Figures 36-42) as bitfield types; offsets in [`crate::prop`]. On PCIe they are
//! BAR0 registers, on Fabrics Property Get/Set values.

use bitfield_struct::bitfield;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_positions_match_spec() {
        // CAP: MQES 15:0, TO 31:24, DSTRD 35:32, CSS 44:37, MPSMIN 51:48 (Figure 36).
        assert_eq!(Cap::TO_OFFSET, 24);
        assert_eq!(Cap::DSTRD_OFFSET, 32);
        assert_eq!(Cap::CSS_OFFSET, 37);
        assert_eq!(Cap::MPSMIN_OFFSET, 48);
        assert_eq!(Cap::MPSMAX_OFFSET, 52);
        // Linux NVME_CAP_CSS_NVM is CAP bit 37; TO in bits 31:24.
        let cap = Cap::new().with_mqes(127).with_to(15).with_css(1).into_bits();
        assert_eq!(cap, 127 | (15 << 24) | (1 << 37));
        assert_eq!(Cap::from_bits(cap).ready_timeout_ns(), 7_500_000_000);
        // CC: EN 0, CSS 6:4, MPS 10:7, AMS 13:11, SHN 15:14, IOSQES 19:16, IOCQES 23:20 (Figure 41).
        assert_eq!(Cc::CSS_OFFSET, 4);
        assert_eq!(Cc::MPS_OFFSET, 7);
        assert_eq!(Cc::AMS_OFFSET, 11);
        assert_eq!(Cc::IOSQES_OFFSET, 16);
        assert_eq!(Cc::SHN_OFFSET, 14);
        assert_eq!(Cc::IOCQES_OFFSET, 20);
        // Linux nvme_enable_ctrl with 64/16-byte entries: 0x00460001; with SHN normal 0x00464001.
        let cc = Cc::new().with_en(true).with_iosqes(6).with_iocqes(4);
        assert_eq!(cc.into_bits(), 0x0046_0001);
        assert_eq!(cc.with_shn(1).into_bits(), 0x0046_4001);
        // CSTS: RDY 0, CFS 1, SHST 3:2 (Figure 42).
        assert_eq!(Csts::new().with_cfs(true).into_bits(), 2);
        assert_eq!(Csts::new().with_shst(2).into_bits(), 8);
        // VS 1.3.0 = 0x00010300.
        assert_eq!(Vs::new().with_major(1).with_minor(3).into_bits(), 0x0001_0300);
    }
}
