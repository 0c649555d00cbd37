//! Every integration test file of this crate as one test binary (one build and link instead of
//! one per file): each `tests/NAME.rs` is module `NAME`, so `cargo test -p PKG --test it NAME::`
//! runs one file's tests. Files that must run in a process of their own (a counting global
//! allocator, a resident-set measurement) stay separate targets in Cargo.toml; testbed's
//! `test_targets` test checks that every file is one or the other.

mod common;

mod arp_hostile;
mod bench_datapath;
mod cm_over_mlx5;
mod datapath;
mod e2e;
mod failures;
mod fence;
mod firmware_rules;
mod footprint;
mod group_threads;
mod loopback;
mod mgmt_frames;
mod port_mtu;
mod queue_group;
mod recovery;
mod srq;
mod teardown;
