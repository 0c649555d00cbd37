//! sim: the deterministic whole-stack simulator behind `scripts/simulate` (issue #15).
//!
//! One process, one thread, one virtual clock: a target node and N initiator nodes, each the
//! real mlx5 driver over the emulated ConnectX with the real IB CM and NVMe-oF code, on a
//! simulated switch ([`fabric`]); faults drawn from the seed ([`faults`]); random verified
//! reads and writes checked against a per-block model ([`model`]) and protocol invariants
//! ([`world`]). The same seed replays the same run, bit for bit.
#![forbid(unsafe_code)]

pub mod device;
pub mod fabric;
pub mod faults;
pub mod model;
pub mod world;

pub use world::{run, Config, Outcome};
