//! testbed: the one home of the host-only test equipment every crate's tests share.
//!
//! - [`soft`]: an in-memory `rdma::Verbs` double (devices on a message-level fabric) for CM
//!   and app tests that do not need the adapter;
//! - [`alloc_count`]: a global allocator that counts the live heap of the threads that opt
//!   in (leak and footprint checks).
//!
//! A dev-dependency only: nothing in the appliance links it.
#![deny(unsafe_code)]

pub mod alloc_count;
pub mod soft;
