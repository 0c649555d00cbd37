//! The mlx5 (ConnectX) programming interface as facts, declared once for the driver
//! (`drivers/mlx5`) and the emulated adapter (`emu/connectx`), which keep independent behaviour.
//!
//! Like Linux `mlx5_ifc.h`, rdma-core `providers/mlx5/mlx5_ifc.h` + `mlx5dv.h` and DPDK
//! `mlx5_prm.h`, this crate holds numbers and layouts only, no behaviour:
//! - [`layout`]: the one layout engine (big-endian bit fields, get/set, walk, lookup);
//! - [`ifc`]: every structure as a field table with the headers' names; `tests/` holds the
//!   tables against offsets taken from the public headers, `scripts/mlx5-layouts` prints them;
//! - [`cmd`]: command opcodes, command and delivery statuses, register ids, with their names;
//! - [`queue`]: event types, QP types/states, WQE and CQE opcodes, CQE syndromes, UMR masks.
#![no_std]
#![forbid(unsafe_code)]

pub mod cmd;
pub mod ifc;
pub mod layout;
pub mod queue;

pub use cmd::{cap_type, delivery, nic_interface, op, reg, status, teardown};
pub use queue::{cqe_op, cqe_synd, event, qp, rmp_state, rq_type, umr, wq_type, wqe_op};
