//! ConnectX-4/5/6/7 (mlx5) driver: layouts as data, firmware command interface, bring-up, data path.
//!
//! Everything goes through `hal` (DMA regions, BAR0 as `Mmio`, time); there is no `unsafe`.
//! - [`ifc`] / [`layout`]: every hardware layout as a field table with `mlx5_ifc.h` names;
//!   `scripts/mlx5-layouts` prints them.
//! - [`cmd`]: command queue (inline + chained mailboxes, tokens, ownership, typed errors).
//! - [`health`]: init segment, `initializing` wait, health buffer/counter.
//! - [`device`]: [`Mlx5::bring_up`] in firmware order, EQ polling (page requests, errors),
//!   PD/TD/UAR/MKeys/CQs/QPs, QP state transitions, [`Mlx5::shutdown`] reclaiming every page.
//! - [`datapath`]: `post_send`/`post_recv`/`poll_cq` straight on the rings.
//! - [`verbs`]: [`Mlx5Verbs`], the `rdma::Verbs` implementation apps use.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod cmd;
pub mod datapath;
pub mod device;
pub mod error;
pub mod health;
pub mod ifc;
pub mod layout;
pub mod raw;
pub mod verbs;

pub use cmd::{op, Timeouts};
pub use device::{AsyncEvent, Caps, Config, Mkey, Mlx5, QpKind, QpState, Stats};
pub use error::Error;
pub use health::{FwVersion, HealthReport};
pub use verbs::Mlx5Verbs;

/// PCI vendor ID of Mellanox/NVIDIA.
pub const PCI_VENDOR: u16 = 0x15b3;
/// ConnectX-4 .. ConnectX-7 physical-function device IDs (DPDK mlx5_common.h); each VF is PF + 1.
pub const PCI_PF_IDS: [u16; 8] = [0x1013, 0x1015, 0x1017, 0x1019, 0x101b, 0x101d, 0x101f, 0x1021];

/// Whether a PCI function is a ConnectX-4/5/6/7 PF or VF this driver handles.
pub fn pci_match(vendor: u16, device: u16) -> bool {
    vendor == PCI_VENDOR && PCI_PF_IDS.iter().any(|&pf| device == pf || device == pf + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_ids() {
        assert!(pci_match(0x15b3, 0x1017)); // ConnectX-5 PF
        assert!(pci_match(0x15b3, 0x1018)); // its VF
        assert!(pci_match(0x15b3, 0x1022)); // ConnectX-7 VF
        assert!(!pci_match(0x15b3, 0x1011));
        assert!(!pci_match(0x8086, 0x1017));
    }

    #[test]
    fn errors_name_the_command_and_status() {
        extern crate alloc;
        use alloc::string::ToString;
        let e = Error::Command { opcode: op::CREATE_QP, op_mod: 0, status: 0x10, syndrome: 0xabc };
        let s = e.to_string();
        assert!(s.contains("CREATE_QP") && s.contains("BAD_QP_STATE") && s.contains("0x00000abc"), "{s}");
        let d = Error::Delivery { opcode: op::INIT_HCA, op_mod: 0, status: 2 }.to_string();
        assert!(d.contains("INIT_HCA") && d.contains("TOKEN_ERR"), "{d}");
    }
}
