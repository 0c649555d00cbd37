//! The mlx5 (ConnectX) programming interface as facts, declared once for the driver
//! (`drivers/mlx5`) and the emulated adapter (`emu/connectx`), which keep independent behaviour.
//!
//! Like Linux `mlx5_ifc.h`, rdma-core `providers/mlx5/mlx5_ifc.h` + `mlx5dv.h` and DPDK
//! `mlx5_prm.h`, this crate holds numbers and layouts only, no behaviour:
//! - [`layout`]: the one layout engine (big-endian bit fields, get/set, walk, lookup);
//! - [`ifc`]: every structure as a field table with the headers' names; `tests/` holds the
//!   tables against offsets taken from the public headers, `scripts/mlx5-layouts` prints them;
//! - [`cmd`]: command opcodes, command and delivery statuses, register ids, with their names,
//!   and the commands' `op_mod` values;
//! - [`queue`]: event types, QP types/states, SQ/RQ states, WQE and CQE opcodes, fence modes, CQE syndromes,
//!   UMR masks, UAR register offsets, NIC receive steering numbers.
#![no_std]
#![forbid(unsafe_code)]

pub mod cmd;
pub mod ifc;
pub mod layout;
pub mod queue;

pub use cmd::{
    access_reg, cap_type, delivery, health_synd, nic_interface, op, pages_op, reg, status, teardown, ts_format, vport_state,
};
pub use queue::{ctrl_flags, cqe_op, cqe_synd, event, fence_mode, flow, qp, rmp_state, rq_type, uar, umr, wq_state, wq_type, wqe_op};
