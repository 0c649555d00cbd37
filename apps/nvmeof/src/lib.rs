//! NVMe over Fabrics on RDMA: wire layouts, a transport-independent target core, the RDMA
//! transport for it, an initiator with a latency benchmark. Generic over `rdma::Verbs` and
//! `blockdev::BlockDevice`; no allocation, lock or log line per I/O on the data paths.
//!
//! Wiring (appliance):
//! - Target: build a [`nvmet::Core`] from a [`nvmet::TargetConfig`] (ports, inline size,
//!   MDTS, queue depth) and [`nvmet::SubsystemConfig`]s (NQN, allowed hosts, namespaces as
//!   `BlockDevice`s; use an enum to mix NVMe/RAM/null), wrap it in
//!   [`nvmet::rdma::RdmaTarget::new`]. The CM calls `accept(verbs, nvme_private, attrs)` on
//!   a REQ (REP with the returned QPN/private data, or REJ 28 with the returned status),
//!   `disconnected(verbs, qpn)` on DREQ, and sends DREQ for each `take_closed()` QPN.
//!   The main loop calls `poll(verbs, now_ns)`.
//! - Initiator: implement [`host::HostEnv`] (clock, idle hook, CM connect/poll/disconnect),
//!   then [`host::Host::discover`] / [`host::Host::connect`]; I/O with `alloc_slot`,
//!   `slot_buf`, `submit`, `poll`; `tick` for keep-alive/AEN; `reconnect` after `failed()`
//!   (several controllers on one device: [`host::controllers::Controllers`], which owns
//!   their reconnects and the failed-device rule);
//!   `bench` for the latency instrument ([`bench::BenchResult::write`] prints the report,
//!   [`fio_json::write_marked`] the result as fio's JSON). [`cmdline::parse`] reads the kernel
//!   command line words.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod bench;
pub mod cmdline;
pub mod fio_json;
pub mod host;
pub mod verify;
pub mod nvmet;
pub mod nvmetcli;
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
    /// The target sent a value the initiator refuses (which, and the value); the
    /// connection is failed.
    Target(host::TargetFault),
    /// No free slot / resource.
    NoResources,
    /// A configuration value is out of range.
    Config(&'static str),
    /// In-band authentication (DH-HMAC-CHAP) failed or was refused.
    Auth(nvme_auth::Error),
    /// The local RDMA device failed and is not back yet (`rdma::Control::device_failed`).
    DeviceFailed,
    /// The adapter moved I/O queue `qid`'s QP to error on its own (its asynchronous event,
    /// `rdma::Control::take_qp_error`), seen by a lane driving the queue while it was lent.
    QpError { qid: u16 },
    /// The controller of a lent I/O queue failed while the queue was lent (its admin queue,
    /// another of its queues, the CM saw a connection lost, the device failed): the owner
    /// stopped the lane, whose commands in flight will not be answered.
    ControllerFailed,
}

impl<E> From<host::TargetFault> for Error<E> {
    fn from(f: host::TargetFault) -> Self {
        Error::Target(f)
    }
}

impl<E> From<Status> for Error<E> {
    fn from(s: Status) -> Self {
        Error::Nvme(s)
    }
}
