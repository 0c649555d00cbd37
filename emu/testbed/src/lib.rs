//! testbed: the one home of the host-only test equipment every crate's tests share.
//!
//! - [`soft`]: an in-memory `rdma::Verbs` double (devices on a message-level fabric) for CM
//!   and app tests that do not need the adapter;
//! - [`alloc_count`]: a global allocator that counts the live heap of the threads that opt
//!   in (leak and footprint checks);
//! - [`node`]: the two-node harness, a node being the mlx5 driver over an emulated ConnectX
//!   on the simulated platform, joined to another by a [`Clocked`] in-process link
//!   (`emu-runner` runs its apps on the same [`Node`]);
//! - [`nvme_drive`]: the emulated NVMe drive (registers, queues, Identify, NVM I/O through a
//!   volatile write cache that power loss empties, injectable faults, a hostile-completion
//!   hook for fuzzing) the local NVMe driver's tests and fuzz target run against.
//!
//! The simulated platform itself (physical memory arena with guard gaps, virtual clock,
//! `hal::Hal`) is the emulated adapter's bus, `emu_connectx::{PhysMem, SimClock, SimHal}`;
//! it is re-exported here so tests name one place.
//!
//! Nothing in the appliance image links it (a dev-dependency, and emu-runner's).
#![deny(unsafe_code)]

pub mod alloc_count;
pub mod node;
pub mod nvme_drive;
pub mod soft;

pub use emu_connectx::{Bar0, ConnectX, DmaReadFilter, PhysMem, SimClock, SimDma, SimHal};
pub use node::{Clocked, Node, Options, Verbs};

/// A piece of test equipment's shared state for one access (the soft fabric and buffers, the
/// NVMe drive). A thread that panicked holding it (a failed assertion in a test) poisons it;
/// it is still the equipment's state, so later accesses proceed.
pub(crate) fn locked<T: ?Sized>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
