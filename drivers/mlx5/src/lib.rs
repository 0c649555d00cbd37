//! ConnectX-4/5/6/7 (mlx5) driver: layouts as data, firmware command interface, bring-up, data path.
//!
//! Everything goes through `hal` (DMA regions, BAR0 as `Mmio`, time); there is no `unsafe`.
//! - [`ifc`] / [`layout`] / [`op`]: the interface facts, from the `mlx5-ifc` crate (layouts with
//!   `mlx5_ifc.h` names, opcodes, statuses), shared with the emulated adapter.
//! - [`cmd`]: command queue (inline + chained mailboxes, tokens, ownership, typed errors).
//! - [`trace`]: the firmware command trace (`mlx5_cmd` tracepoint lines, hex dumps).
//! - [`health`]: init segment, `initializing` wait, health buffer/counter.
//! - [`device`]: the device layer: [`Mlx5::bring_up`] in firmware order, EQ polling (page requests, errors),
//!   PD/TD/UAR/MKeys/CQs/QPs, SRQs (RMP: `create_srq`, `post_srq_recv`, `arm_srq`, QPs on them by
//!   `create_qp_srq`, many QPs per CQ), QP state transitions, [`Mlx5::shutdown`] reclaiming every page.
//! - [`teardown`]: the TEARDOWN_HCA ladder (graceful, fast teardown, force close).
//! - [`ring`]: the one ring type of every work queue ([`ring::WorkRing`]: QP SQ/RQ, SRQ, raw
//!   Ethernet SQ/RQ) and of every CQ ([`ring::CompletionRing`]): room, slot, WQE copy, doorbell
//!   record and UAR doorbell, CQE ownership and consumer index.
//! - [`datapath`]: `post_send`/`post_recv`/`poll_cq` straight on the rings.
//! - [`group`]: [`QueueGroup`], the rings of one poll group (CQ, SRQ, its QPs' send queues, its
//!   own UAR page) as an object of its own that implements `rdma::DataPath` without the device.
//! - [`fastreg`]: UMR WQEs: per-I/O key registration and invalidation through the send queue.
//! - [`verbs`]: [`Mlx5Verbs`], the `rdma::Verbs` implementation apps use
//!   ([`Mlx5Verbs::bring_up`] reaches "ready", [`Mlx5Verbs::shutdown`] releases it); [`arp`]: the ARP
//!   frames it feeds its neighbour table (`rdma::neigh`) with; [`mgmt_tap`]: the bounded queue of
//!   other raw frames for a management network stack.
//! - [`selftest`]: RC traffic between two QPs over the port's local loopback, verified.
//! - [`vport`]: the NIC vport context (MTU, local loopback) for the validation kit.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod arp;
pub mod bar;
pub mod cmd;
pub mod datapath;
pub mod device;
pub mod error;
pub mod fastreg;
pub mod group;
pub mod health;
pub mod mgmt_tap;
mod objindex;
pub mod pages;
pub mod raw;
pub mod ring;
pub mod selftest;
pub mod teardown;
pub mod trace;
pub mod verbs;
pub mod vport;

pub use cmd::Timeouts;
/// The interface facts this driver is written against (shared with the emulated adapter).
pub use mlx5_ifc::{ifc, layout, op};
pub use device::{AsyncEvent, Caps, Config, Mkey, Mlx5, QpKind, QpState, Srq, SrqId, Stats};
pub use error::Error;
pub use health::{FwVersion, HealthReport};
pub use trace::TraceMode;
pub use raw::{RawStats, MAX_FRAME, MAX_INLINE_FRAME};
pub use verbs::Mlx5Verbs;
pub use group::{GroupHandle, GroupQp, GroupStats, QueueGroup};
pub use vport::VportInfo;

/// PCI vendor ID of Mellanox/NVIDIA.
pub const PCI_VENDOR: u16 = 0x15b3;
/// One entry of the mlx5 PCI ID table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PciId {
    pub device: u16,
    pub name: &'static str,
    /// A virtual function (`MLX5_PCI_DEV_IS_VF` in Linux's table).
    pub vf: bool,
}

const fn pf(device: u16, name: &'static str) -> PciId {
    PciId { device, name, vf: false }
}
const fn vf(device: u16, name: &'static str) -> PciId {
    PciId { device, name, vf: true }
}

/// Every device ID of vendor 0x15b3 that Linux binds mlx5_core to: exactly the entries of
/// `mlx5_core_pci_table` (drivers/net/ethernet/mellanox/mlx5/core/main.c, as of the
/// ConnectX-10 NVLink-C2C addition), VF flags included. Not every "PF + 1" is a VF: 0x1020,
/// 0x1022, 0x1024, 0x1026 are not in the table, and the newer parts list no VF ID at all.
pub const PCI_IDS: &[PciId] = &[
    pf(0x1011, "Connect-IB"),
    vf(0x1012, "Connect-IB VF"),
    pf(0x1013, "ConnectX-4"),
    vf(0x1014, "ConnectX-4 VF"),
    pf(0x1015, "ConnectX-4 Lx"),
    vf(0x1016, "ConnectX-4 Lx VF"),
    pf(0x1017, "ConnectX-5"),
    vf(0x1018, "ConnectX-5 VF"),
    pf(0x1019, "ConnectX-5 Ex"),
    vf(0x101a, "ConnectX-5 Ex VF"),
    pf(0x101b, "ConnectX-6"),
    vf(0x101c, "ConnectX-6 VF"),
    pf(0x101d, "ConnectX-6 Dx"),
    vf(0x101e, "ConnectX VF"),
    pf(0x101f, "ConnectX-6 Lx"),
    pf(0x1021, "ConnectX-7"),
    pf(0x1023, "ConnectX-8"),
    pf(0x1025, "ConnectX-9"),
    pf(0x1027, "ConnectX-10"),
    pf(0x2101, "ConnectX-10 NVLink-C2C"),
    pf(0xa2d2, "BlueField ConnectX-5"),
    vf(0xa2d3, "BlueField ConnectX-5 VF"),
    pf(0xa2d6, "BlueField-2 ConnectX-6 Dx"),
    pf(0xa2dc, "BlueField-3 ConnectX-7"),
    pf(0xa2df, "BlueField-4 ConnectX-8"),
];

/// The table entry of a PCI function, if this driver handles it (vendor and device exactly
/// as in [`PCI_IDS`]).
pub fn pci_id(vendor: u16, device: u16) -> Option<&'static PciId> {
    if vendor != PCI_VENDOR {
        return None;
    }
    PCI_IDS.iter().find(|i| i.device == device)
}

/// Whether a PCI function is one this driver handles (in [`PCI_IDS`]).
pub fn pci_match(vendor: u16, device: u16) -> bool {
    pci_id(vendor, device).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_ids_are_linux_mlx5_core_pci_table() {
        // (device, VF) pairs of Linux mlx5_core_pci_table, written out independently.
        let linux: [(u16, bool); 25] = [
            (0x1011, false), (0x1012, true), (0x1013, false), (0x1014, true), (0x1015, false),
            (0x1016, true), (0x1017, false), (0x1018, true), (0x1019, false), (0x101a, true),
            (0x101b, false), (0x101c, true), (0x101d, false), (0x101e, true), (0x101f, false),
            (0x1021, false), (0x1023, false), (0x1025, false), (0x1027, false), (0x2101, false),
            (0xa2d2, false), (0xa2d3, true), (0xa2d6, false), (0xa2dc, false), (0xa2df, false),
        ];
        assert_eq!(PCI_IDS.len(), linux.len());
        for (d, is_vf) in linux {
            assert_eq!(pci_id(0x15b3, d).map(|i| i.vf), Some(is_vf), "{d:#x}");
        }
        // Every other ID of the mlx5 ranges is refused, the "PF + 1" gaps included.
        for d in (0x1000..=0x10ffu16).chain(0x2100..=0x21ff).chain(0xa2d0..=0xa2ff) {
            assert_eq!(pci_match(0x15b3, d), linux.iter().any(|(l, _)| *l == d), "{d:#x}");
        }
        for d in [0x1020, 0x1022, 0x1024, 0x1026, 0x1028] {
            assert!(!pci_match(0x15b3, d), "{d:#x}");
        }
        assert!(!pci_match(0x8086, 0x1017));
        assert!(!pci_match(0x15b3, 0x1003), "ConnectX-3 is mlx4");
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
