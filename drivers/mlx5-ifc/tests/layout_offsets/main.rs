//! Holds the shared layout tables (driver and emulated adapter) against bit offsets taken from the public headers.
//!
//! The numbers in this folder's tables were computed by walking the `_bits` pseudo-structs (one array element per
//! bit) of:
//!   A. rdma-core `providers/mlx5/mlx5_ifc.h` @ 691953d8d502f54088f776c5ba2aeed0a5ac945d
//!      (linux-rdma/rdma-core, 2026-08-20), preferred where it defines the struct;
//!   B. Linux `include/linux/mlx5/mlx5_ifc.h` as carried in gpudirect/mlnx-ofa_kernel
//!      @ 2ce4cd07d208ab03d2e61be1a2037ff43c25b5b9 (2017), for structs A lacks (cqc,
//!      create_cq_in, query_special_contexts, set_roce_address, 2err/2rst, disable_hca, ...).
//!   C. C struct byte offsets of `struct mlx5_init_seg`, `health_buffer`, `mlx5_cmd_layout`,
//!      `mlx5_cmd_block`, `mlx5_eqe` (rdma-core providers/mlx5/mlx5_vfio.h @691953d8) and
//!      `mlx5_cqe64`, `mlx5_wqe_*_seg`, `mlx5_av` (rdma-core providers/mlx5/mlx5dv.h), ×8.
//! They are facts copied as numbers; nothing here is derived from the driver's declarations.
//! Format: (dotted name, bit offset from the start of the outermost struct, bit width).

use mlx5_ifc::{ifc, layout};

mod c_structs;
mod linux_2017;
mod raw_eth;
mod rdma_core;

use c_structs::{FROM_C_STRUCTS, Q_COUNTERS};
use linux_2017::{FROM_LINUX_2017, RMP};
use raw_eth::RAW_ETH;
use rdma_core::FROM_RDMA_CORE;

#[test]
fn rmp_structs_match_public_headers() {
    let bad = check(RMP);
    assert!(bad.is_empty(), "{} mismatches:\n{}", bad.len(), bad.join("\n"));
}

fn check(table: &[(&str, u32, u32)]) -> Vec<String> {
    let mut bad = Vec::new();
    for &(name, off, width) in table {
        match layout::lookup(ifc::ALL, name) {
            None => bad.push(format!("{name}: not declared")),
            Some(f) if f.off != off || f.width != width => {
                bad.push(format!("{name}: declared ({} {}), header ({off} {width})", f.off, f.width))
            }
            Some(_) => {}
        }
    }
    bad
}

#[test]
fn ifc_fields_match_public_headers() {
    let total = FROM_RDMA_CORE.len() + FROM_LINUX_2017.len();
    assert!(total >= 150, "only {total} mlx5_ifc fields checked");
    let mut bad = check(FROM_RDMA_CORE);
    bad.extend(check(FROM_LINUX_2017));
    assert!(bad.is_empty(), "{} mismatches:\n{}", bad.len(), bad.join("\n"));
}

#[test]
fn raw_ethernet_structs_match_public_headers() {
    assert!(RAW_ETH.len() > 50);
    let bad = check(RAW_ETH);
    assert!(bad.is_empty(), "{} mismatches:\n{}", bad.len(), bad.join("\n"));
}

#[test]
fn queue_counter_structs_match_public_headers() {
    let bad = check(Q_COUNTERS);
    assert!(bad.is_empty(), "{} mismatches:\n{}", bad.len(), bad.join("\n"));
    assert_eq!(ifc::query_q_counter_out::SIZE * 8, 0x800, "query_q_counter_out ends with reserved_at_620[0x1e0]");
}

#[test]
fn device_structs_match_public_headers() {
    let bad = check(FROM_C_STRUCTS);
    assert!(bad.is_empty(), "{} mismatches:\n{}", bad.len(), bad.join("\n"));
}

#[test]
fn every_command_the_bringup_uses_is_declared() {
    for s in [
        "enable_hca_in", "disable_hca_in", "query_issi_out", "set_issi_in", "query_pages_out",
        "manage_pages_in", "manage_pages_out", "query_hca_cap_in", "set_hca_cap_in", "cmd_hca_cap",
        "roce_cap", "init_hca_in", "teardown_hca_in", "access_register_in", "alloc_uar_out",
        "dealloc_uar_in", "create_eq_in", "destroy_eq_in", "eqc", "alloc_pd_out", "dealloc_pd_in",
        "alloc_transport_domain_out", "dealloc_transport_domain_in", "query_special_contexts_out",
        "create_mkey_in", "destroy_mkey_in", "mkc", "query_nic_vport_context_out",
        "modify_nic_vport_context_in", "set_roce_address_in", "roce_addr_layout", "create_cq_in",
        "destroy_cq_in", "cqc", "create_qp_in", "destroy_qp_in", "qpc", "ads", "rst2init_qp_in",
        "init2rtr_qp_in", "rtr2rts_qp_in", "qp_2err_in", "qp_2rst_in", "init_seg", "cmd_layout",
        "cmd_prot_block", "eqe", "cqe64", "wqe_ctrl_seg", "wqe_data_seg", "wqe_av",
    ] {
        assert!(ifc::ALL.iter().any(|l| l.name == s), "{s} missing");
    }
}

#[test]
fn lookup_rejects_unknown_names() {
    assert!(layout::lookup(ifc::ALL, "create_cq_in.cq_context.no_such").is_none());
    assert!(layout::lookup(ifc::ALL, "qpc.pd.extra").is_none());
    assert!(layout::lookup(ifc::ALL, "nonexistent.x").is_none());
}
