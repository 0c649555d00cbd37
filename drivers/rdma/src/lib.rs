//! Transport-neutral RDMA: the verbs interface the apps are generic over, and IB CM.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod verbs;
pub mod cm;
pub mod cm_wire;
pub mod cm_limits;
pub mod cm_table;
pub mod neigh;

pub use verbs::*;
