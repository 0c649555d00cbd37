//! Every integration test file of this crate as one test binary (one build and link instead of
//! one per file): each `tests/NAME.rs` is module `NAME`, so `cargo test -p PKG --test it NAME::`
//! runs one file's tests. Files that must run in a process of their own (a counting global
//! allocator, a resident-set measurement) stay separate targets in Cargo.toml; testbed's
//! `test_targets` test checks that every file is one or the other.

mod common;
mod emu_pair;

mod auth;
mod bounds;
mod connect_failures;
mod controllers;
mod durable;
mod group_io;
mod host_threads;
mod hostile;
mod loopback;
mod malformed;
mod mlx5_emu;
mod nvme_emu;
mod nvme_groups;
mod nvmetcli;
mod poll_groups;
mod serve_cm;
