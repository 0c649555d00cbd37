//! Device profiles: what one ConnectX generation (or its virtual function) reports and enforces.
//!
//! A profile is data: the PCI identity, firmware version, ISSI, the capability values the model
//! answers QUERY_HCA_CAP with, the firmware's page demand, and the behaviours in which real
//! parts differ (clock/timestamp rules, doorbell recovery, page requests during commands,
//! VF restrictions). Every value carries its source next to it. Sources:
//! - [DPDK-ids] DPDK `drivers/common/mlx5/mlx5_common.h` `PCI_DEVICE_ID_MELLANOX_*`
//!   (same IDs in Linux `mlx5/core/main.c` `mlx5_core_pci_table`).
//! - [ifc-ts] Linux/rdma-core `mlx5_ifc.h` `MLX5_{QP,SQ,RQ}_TIMESTAMP_FORMAT_CAP_*` (0 free
//!   running only, 1 real time only, 2 both) and the `roce_cap.qp_ts_format`,
//!   `cmd_hca_cap.sq_ts_format / rq_ts_format` fields (added 2021, "net/mlx5: Add new timestamp
//!   mode bits"); ConnectX-4 Lx/5 have no real-time clock (the real-time clock registers at init
//!   segment 0x1040 are "newer firmware", ConnectX-6 Dx on).
//! - [fw-rn] NVIDIA firmware release notes: the firmware major number names the family
//!   (14 = ConnectX-4 Lx, 16 = ConnectX-5, 22 = ConnectX-6 Dx, 28 = ConnectX-7); the minor and
//!   subminor here are one public release of each, not a requirement.
//! - [devinfo] `ibv_devinfo -v` of those adapters as published in vendor and user reports:
//!   max_qp 262144 (log 18), max_qp_wr 32768 (log 15), max_cqe 4194303 (log 22),
//!   max_qp_rd_atom / max_qp_init_rd_atom 16 (log 4), max_mr_size / max_msg 2^30 / 2^31,
//!   phys_port_cnt 1 per PCI function in Ethernet mode.
//! - [ifc] Linux `mlx5_ifc.h` field widths and meanings (e.g. `log_max_eq` 4 bits).
//! - "representative": a plausible value with no public source fixing it for that part; the
//!   model uses it so that tests exercise the rule, not because a card is known to report it.
//!   Page counts are representative and scaled down (real parts ask for thousands of pages) so
//!   1,000 bring-up/teardown cycles stay quick.

/// PCI vendor ID of Mellanox/NVIDIA [DPDK-ids].
pub const PCI_VENDOR_MELLANOX: u16 = 0x15b3;

/// What `{roce_cap.qp_ts_format, cmd_hca_cap.sq_ts_format, rq_ts_format}` say [ifc-ts].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TsCap {
    /// 0: free-running clock only (contexts must say FREE_RUNNING (0) or DEFAULT (1)).
    FreeRunning = 0,
    /// 1: real-time clock only: a context with ts_format FREE_RUNNING (0) is refused.
    RealTime = 1,
    /// 2: both clocks.
    Both = 2,
}

/// Firmware version as the initialization segment reports it (fw_rev major.minor.subminor).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FwVersion {
    pub major: u16,
    pub minor: u16,
    pub subminor: u16,
}

/// Capability values the model reports (QUERY_HCA_CAP general and RoCE, max = current unless
/// noted in the model). Names are the `mlx5_ifc.h` field names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caps {
    pub log_max_qp: u8,
    pub log_max_qp_sz: u8,
    pub log_max_cq: u8,
    pub log_max_cq_sz: u8,
    pub log_max_eq: u8,
    pub log_max_eq_sz: u8,
    pub log_max_mkey: u8,
    pub log_max_pd: u8,
    pub log_max_srq: u8,
    pub log_max_srq_sz: u8,
    pub log_max_ra_req_qp: u8,
    pub log_max_ra_res_qp: u8,
    pub log_max_msg: u8,
    pub num_ports: u8,
    pub log_bf_reg_size: u8,
    pub num_of_uars_per_page: u32,
    /// UARs the function may allocate (ALLOC_UAR refuses beyond).
    pub max_uars: u32,
    /// Queue counter sets the function may allocate (`max_qp_cnt`; ALLOC_Q_COUNTER refuses beyond;
    /// 0: no queue counters, as a driver must then not ask for any).
    pub max_qp_cnt: u16,
    pub max_wqe_sz_sq: u16,
    pub max_wqe_sz_rq: u16,
    pub device_frequency_mhz: u32,
    pub fast_teardown: bool,
    pub force_teardown: bool,
    pub qp_ts_format: TsCap,
    pub sq_ts_format: TsCap,
    pub rq_ts_format: TsCap,
    /// Largest port MTU in bytes (PMTU max_mtu; the vport MTU may not exceed it).
    pub max_mtu: u16,
}

/// Pages the firmware wants: at boot (QUERY_PAGES op_mod 1), for init (op_mod 2), after
/// INIT_HCA (op_mod 3 / page-request events), and while executing some commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageDemand {
    pub boot: u32,
    pub init: u32,
    pub regular: u32,
    /// Extra pages per live QP, asked for with page-request events after CREATE_QP completes.
    pub per_qp: u32,
    /// Pages asked for *while* executing one of `mid_command_opcodes`: the firmware raises a
    /// page-request event and does not complete the command until MANAGE_PAGES gives them
    /// (Linux reserves its last command slot for that MANAGE_PAGES; rdma-core `mlx5_vfio.c`
    /// services page requests inside the command wait). 0 = never.
    pub mid_command: u32,
    pub mid_command_opcodes: &'static [u16],
}

/// Rules in which generations differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Behaviour {
    /// A virtual function: ACCESS_REGISTER HOST_ENDIANNESS is refused (Linux `mlx5_core` writes it
    /// only when `mlx5_core_is_pf`), page-request events name the VF's function ID.
    pub vf: bool,
    /// Function ID of this function (0 for a PF; VFs are numbered from 1).
    pub function_id: u16,
    /// Doorbell recovery runs on CQs: a polled CQ's doorbell record arm word must carry the
    /// "polling" sequence number (`2 << 28`, Linux `dr_send.c` dr_create_cq) or recovery
    /// re-rings it; the model counts a CQE written to a CQ whose arm word is 0 as a
    /// db-recovery fault. Representative: which parts run recovery is not public.
    pub db_recovery: bool,
}

/// One device profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    pub name: &'static str,
    pub description: &'static str,
    pub pci_vendor_id: u16,
    pub pci_device_id: u16,
    pub fw: FwVersion,
    /// Command interface revision (init segment 0x04 [31:16]); 5 on every mlx5 part
    /// (Linux `cmd.c` and `mlx5_vfio.c` refuse others).
    pub cmdif_rev: u16,
    /// log2 of command slots and of the slot stride (init segment 0x14); 5 / 6 on every part
    /// Linux has met (`cmd.c` checks `log_sz + log_stride <= 12` and 32 slots at most).
    pub log_cmdq_size: u8,
    pub log_cmdq_stride: u8,
    /// QUERY_ISSI supported_issi_dw0 (bit n = ISSI n). ISSI 1 on every mlx5 part Linux supports
    /// (`mlx5_core_set_issi` selects 1 when bit 1 is set) [ifc].
    pub supported_issi: u32,
    pub caps: Caps,
    pub pages: PageDemand,
    pub behaviour: Behaviour,
}

use crate::consts::op;

/// Names accepted by [`Profile::by_name`], in generation order.
pub const NAMES: &[&str] = &["connectx4lx", "connectx5", "connectx6dx", "connectx7", "connectx7-vf"];

/// The profile used when none is named.
pub const DEFAULT: &str = "connectx5";

fn base_caps() -> Caps {
    Caps {
        log_max_qp: 18,     // [devinfo] max_qp 262144
        log_max_qp_sz: 15,  // [devinfo] max_qp_wr 32768
        log_max_cq: 16,     // representative (devinfo max_cq 16M = log 24; the model keeps ids small)
        log_max_cq_sz: 22,  // [devinfo] max_cqe 4194303
        log_max_eq: 5,      // representative (field is 4 bits [ifc]; 32 EQs)
        log_max_eq_sz: 22,  // representative (Linux sizes its async EQ far below this)
        log_max_mkey: 20,   // representative (devinfo max_mr 16M = log 24)
        log_max_pd: 20,     // representative (devinfo max_pd 16M = log 24)
        log_max_srq: 16,    // representative
        log_max_srq_sz: 15, // [devinfo] max_srq_wr 32767
        log_max_ra_req_qp: 4, // [devinfo] max_qp_init_rd_atom 16
        log_max_ra_res_qp: 4, // [devinfo] max_qp_rd_atom 16
        log_max_msg: 30,    // [devinfo] max_msg_sz 0x40000000
        num_ports: 1,       // [devinfo] phys_port_cnt 1 (each Ethernet port is its own PCI function)
        log_bf_reg_size: 9, // representative: 512 B BlueFlame register (two 256 B halves; rdma-core mlx5 uses bf_reg_size/2)
        num_of_uars_per_page: 1, // 4 KiB UAR pages (uar_4k); one UAR per system page of 4 KiB
        max_uars: 64,       // representative (the model's BAR has room for this many)
        max_qp_cnt: 64,     // representative (the field is 10 bits [ifc]; Linux keeps sets for the netdev and hands mlx5_ib the rest)
        max_wqe_sz_sq: 1024, // representative
        max_wqe_sz_rq: 512,  // representative
        device_frequency_mhz: 1000, // representative (free-running clock tick)
        fast_teardown: true,  // representative
        force_teardown: true, // representative
        qp_ts_format: TsCap::FreeRunning,
        sq_ts_format: TsCap::FreeRunning,
        rq_ts_format: TsCap::FreeRunning,
        max_mtu: 9978, // representative: PMTU max_mtu on ConnectX Ethernet ports
    }
}

fn base_pages() -> PageDemand {
    PageDemand {
        boot: 8,     // representative, scaled down
        init: 16,    // representative, scaled down
        regular: 8,  // representative, scaled down
        per_qp: 0,
        mid_command: 0,
        mid_command_opcodes: &[],
    }
}

impl Profile {
    /// The profile named `name` (see [`NAMES`]); None for an unknown name.
    pub fn by_name(name: &str) -> Option<Profile> {
        match name {
            "connectx4lx" => Some(Self::connectx4lx()),
            "connectx5" => Some(Self::connectx5()),
            "connectx6dx" => Some(Self::connectx6dx()),
            "connectx7" => Some(Self::connectx7()),
            "connectx7-vf" => Some(Self::connectx7_vf()),
            _ => None,
        }
    }

    /// Every profile, in [`NAMES`] order.
    pub fn all() -> Vec<Profile> {
        NAMES.iter().filter_map(|n| Self::by_name(n)).collect()
    }

    /// ConnectX-4 Lx (PF).
    pub fn connectx4lx() -> Profile {
        Profile {
            name: "connectx4lx",
            description: "ConnectX-4 Lx, PF",
            pci_vendor_id: PCI_VENDOR_MELLANOX,
            pci_device_id: 0x1015, // [DPDK-ids] CONNECTX4LX
            fw: FwVersion { major: 14, minor: 32, subminor: 1010 }, // [fw-rn] 14.x = ConnectX-4 Lx
            cmdif_rev: 5,
            log_cmdq_size: 5,
            log_cmdq_stride: 6,
            supported_issi: 0b11, // ISSI 0 and 1 [ifc]
            caps: Caps {
                fast_teardown: false, // representative: fast teardown arrived with later parts
                log_max_eq: 4,        // representative
                ..base_caps()
            },
            pages: base_pages(),
            behaviour: Behaviour { vf: false, function_id: 0, db_recovery: false },
        }
    }

    /// ConnectX-5 (PF); the default profile.
    pub fn connectx5() -> Profile {
        Profile {
            name: "connectx5",
            description: "ConnectX-5, PF",
            pci_vendor_id: PCI_VENDOR_MELLANOX,
            pci_device_id: 0x1017, // [DPDK-ids] CONNECTX5
            fw: FwVersion { major: 16, minor: 35, subminor: 2000 }, // [fw-rn] 16.x = ConnectX-5
            cmdif_rev: 5,
            log_cmdq_size: 5,
            log_cmdq_stride: 6,
            supported_issi: 0b11,
            caps: base_caps(),
            pages: base_pages(),
            behaviour: Behaviour { vf: false, function_id: 0, db_recovery: false },
        }
    }

    /// ConnectX-6 Dx (PF): both clocks; asks for pages while creating QPs and CQs.
    pub fn connectx6dx() -> Profile {
        Profile {
            name: "connectx6dx",
            description: "ConnectX-6 Dx, PF",
            pci_vendor_id: PCI_VENDOR_MELLANOX,
            pci_device_id: 0x101d, // [DPDK-ids] CONNECTX6DX
            fw: FwVersion { major: 22, minor: 36, subminor: 1010 }, // [fw-rn] 22.x = ConnectX-6 Dx
            cmdif_rev: 5,
            log_cmdq_size: 5,
            log_cmdq_stride: 6,
            supported_issi: 0b10, // representative: ISSI 1 only
            caps: Caps {
                qp_ts_format: TsCap::Both, // [ifc-ts] real-time clock from ConnectX-6 Dx on
                sq_ts_format: TsCap::Both,
                rq_ts_format: TsCap::Both,
                ..base_caps()
            },
            pages: PageDemand {
                mid_command: 2, // representative: firmware grows context memory on demand
                mid_command_opcodes: &[op::CREATE_QP, op::CREATE_CQ],
                ..base_pages()
            },
            behaviour: Behaviour { vf: false, function_id: 0, db_recovery: true },
        }
    }

    /// ConnectX-7 (PF) configured with the real-time clock only (REAL_TIME_CLOCK_ENABLE set):
    /// free-running timestamps are refused.
    pub fn connectx7() -> Profile {
        Profile {
            name: "connectx7",
            description: "ConnectX-7, PF, real-time clock only",
            pci_vendor_id: PCI_VENDOR_MELLANOX,
            pci_device_id: 0x1021, // [DPDK-ids] CONNECTX7
            fw: FwVersion { major: 28, minor: 39, subminor: 1002 }, // [fw-rn] 28.x = ConnectX-7
            cmdif_rev: 5,
            log_cmdq_size: 5,
            log_cmdq_stride: 6,
            supported_issi: 0b10, // representative: ISSI 1 only
            caps: Caps {
                qp_ts_format: TsCap::RealTime, // [ifc-ts] cap value 1; configuration-dependent, representative
                sq_ts_format: TsCap::RealTime,
                rq_ts_format: TsCap::RealTime,
                log_max_ra_req_qp: 5, // representative: deeper than the driver's default asks, to test the clamp the other way
                log_max_ra_res_qp: 5,
                ..base_caps()
            },
            pages: PageDemand {
                mid_command: 4, // representative
                mid_command_opcodes: &[op::CREATE_QP, op::CREATE_CQ, op::CREATE_MKEY],
                ..base_pages()
            },
            behaviour: Behaviour { vf: false, function_id: 0, db_recovery: true },
        }
    }

    /// A ConnectX-7 virtual function: the generic mlx5 VF device ID, no HOST_ENDIANNESS access,
    /// its own function ID in page requests.
    pub fn connectx7_vf() -> Profile {
        Profile {
            name: "connectx7-vf",
            description: "ConnectX-7, virtual function 1",
            pci_device_id: 0x101e, // [DPDK-ids] CONNECTXVF ("ConnectX family mlx5Gen VF", used by 6 Dx and 7)
            caps: Caps {
                max_uars: 16,      // representative: VFs get fewer UARs
                max_qp_cnt: 8,     // representative: VFs get fewer counter sets
                max_mtu: 1500,     // representative: the PF administrator left the VF at the Ethernet default (path MTU 1024 at most)
                log_max_ra_req_qp: 4,
                log_max_ra_res_qp: 4,
                ..Self::connectx7().caps
            },
            behaviour: Behaviour { vf: true, function_id: 1, db_recovery: true },
            ..Self::connectx7()
        }
    }
}

impl Default for Caps {
    fn default() -> Self {
        base_caps()
    }
}

impl Default for PageDemand {
    fn default() -> Self {
        base_pages()
    }
}

impl Default for Profile {
    fn default() -> Self {
        Self::connectx5()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_resolves_and_round_trips() {
        for n in NAMES {
            let p = Profile::by_name(n).expect(n);
            assert_eq!(p.name, *n);
            assert_eq!(p.pci_vendor_id, PCI_VENDOR_MELLANOX);
        }
        assert!(Profile::by_name("connectx3").is_none());
        assert_eq!(Profile::default().name, DEFAULT);
    }

    #[test]
    fn families_differ_where_real_parts_do() {
        let ids: Vec<u16> = Profile::all().iter().map(|p| p.pci_device_id).collect();
        assert_eq!(ids, vec![0x1015, 0x1017, 0x101d, 0x1021, 0x101e]);
        let majors: Vec<u16> = Profile::all().iter().map(|p| p.fw.major).collect();
        assert_eq!(majors, vec![14, 16, 22, 28, 28]);
        assert_eq!(Profile::connectx5().caps.qp_ts_format, TsCap::FreeRunning);
        assert_eq!(Profile::connectx7().caps.qp_ts_format, TsCap::RealTime);
        assert!(Profile::connectx7_vf().behaviour.vf && Profile::connectx7_vf().behaviour.function_id != 0);
    }
}
