//! Transport-neutral RDMA: the verbs interface the apps are generic over, and IB CM.
#![no_std]
#![forbid(unsafe_code)]

pub mod verbs;

pub use verbs::*;
