//! nvme regs: controller registers (NVMe Base Specification 2.0, §3.1.4 "Controller
//! Properties", Figure 33 onwards) as bitfield types, plus the doorbell layout (§3.1.4.20-21).
//! CAP, VS, CC and CSTS are properties Fabrics has too: declared once in `nvme_spec::props`
//! and re-exported here; AQA and the doorbells are PCIe-only and declared here.
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

pub use nvme_spec::props::{Cap, Cc, Csts, Vs};

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
        // CAP/CC field positions are tested in nvme-spec (props); AQA.ACQS is 27:16 (Figure 45).
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
