//! NVMe over Fabrics on RDMA: wire layouts, a transport-independent target core, the RDMA
//! transport for it, an initiator with a latency benchmark. Generic over `rdma::Verbs` and
//! `blockdev::BlockDevice`; no allocation, lock or log line per I/O on the data paths.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod bench;
pub mod cmdline;
pub mod host;
pub mod target;
pub mod wire;

pub use wire::Status;

/// Errors of this crate (setup paths). Data-path problems become NVMe statuses instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error<E> {
    /// The RDMA device refused a request (raw device error).
    Verbs(E),
    /// A command completed with an NVMe status.
    Nvme(Status),
    /// The target rejected the CM connection (NVMe-RDMA CM status, 0 if none).
    CmRejected(u16),
    /// The connection manager failed (timeout, unreachable).
    CmFailed,
    /// Waited longer than the deadline.
    Timeout,
    /// A transfer failed on the wire (completion status).
    Transport(rdma::WcStatus),
    /// The peer's answer made no sense (what was wrong).
    Protocol(&'static str),
    /// No free slot / resource.
    NoResources,
    /// A configuration value is out of range.
    Config(&'static str),
}

impl<E> From<Status> for Error<E> {
    fn from(s: Status) -> Self {
        Error::Nvme(s)
    }
}
