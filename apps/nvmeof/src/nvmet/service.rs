//! The listening target service: the IB CM (`rdma::cm`) listener tied to [`RdmaTarget`],
//! poll-driven in the caller's loop; the transport owns its queues' QPs (the CM's app-owned QP
//! mode), the CM only talks. The initiator's side of the CM is `crate::host::cm_env`.
//!
//! Rules followed (Linux nvmet-rdma behaviour, NVMe-oF RDMA transport spec §3.2): a REQ for
//! the NVMe port carries the 32-byte NVMe-RDMA private data after rdma_cm's header;
//! accepted → REP with crqsize, refused → REJ reason 28 (consumer defined) with the 4-byte
//! NVMe-RDMA status. A DREQ (or REP timeout, REJ) closes that queue on the target; a queue the
//! target closes itself (keep-alive expiry, Fabrics Disconnect, transport error) gets a DREQ.
//! A queue the transport accepted is handed to a poll group whose turn takes it in: the REP
//! (or, refused, a REJ) leaves only with the group's answer ([`RdmaTarget::take_answer`]); until
//! then the service keeps the CM ID, the QPN and the REP private data, and the CM answers a
//! retransmitted REQ for that ID with nothing.
//!
//! The service listens on `listen_port` and on the service ID of every port of the
//! configuration (`TargetConfig::ports`, nvmet's `ports/P`); a REQ names the port it came in on
//! by its service ID, and the queue is admitted only to that port's subsystems
//! ([`RdmaTarget::accept_on`]).
//!
//! When the adapter fails ([`rdma::Control::device_failed`]: the driver reset it), every queue is
//! closed (its work flushed), the namespace keys released, and once the block I/O of those
//! queues is over the device is brought up again and the service listens anew (a new CM on the
//! new GSI QP); hosts find their connections dead and reconnect.

use alloc::collections::BTreeMap;

use blockdev::BlockDevice;
use rdma::cm::{Cm, CmConfig, CmError, CmEvent, ConnId};
use rdma::cm_wire::rej_reason;
use rdma::{Access, Qpn, GroupVerbs};
use zerocopy::IntoBytes;

use super::rdma::{QueueAnswer, RdmaTarget};
use crate::wire::RdmaCmRep;
use super::Core;
use crate::Error;

/// RDMA READs the target keeps outstanding per queue at most (what it asks for in the REP's
/// Initiator Depth; the host's Responder Resources cap it).
pub const TARGET_READ_DEPTH: u8 = 16;

/// Service counters (slow path).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServiceStats {
    pub requests: u64,
    pub accepted: u64,
    /// Refused by the NVMe-RDMA checks (REJ 28 with a status).
    pub rejected: u64,
    /// The CM refused to send our REP/REJ (state or device error).
    pub cm_errors: u64,
    pub established: u64,
    /// Queues the host (or the CM) closed.
    pub closed_by_peer: u64,
    /// Queues the target closed (DREQ sent).
    pub closed_by_target: u64,
    /// Queues closed because the device failed.
    pub closed_by_device_failure: u64,
    /// Times the device was brought up again after a failure and the service listened anew.
    pub device_recoveries: u64,
}

/// A listening NVMe-oF target: the CM on `port` and the RDMA transport.
pub struct TargetService<V: GroupVerbs, B: BlockDevice> {
    pub cm: Cm<V>,
    pub target: RdmaTarget<V, B>,
    port: u16,
    /// Live connections: CM id → the target's QP.
    live: BTreeMap<u32, Qpn>,
    /// Queues handed to a poll group and not answered yet: the target's QPN → what the REP
    /// needs ([`Pending`]).
    pending: BTreeMap<u32, Pending>,
    /// The CM's settings (a new CM after a device recovery).
    cm_cfg: CmConfig,
    pub stats: ServiceStats,
}

impl<V: GroupVerbs, B: BlockDevice> TargetService<V, B> {
    /// Listen on `listen_port` (4420 for NVMe-oF) and serve `core` on at most `max_queues`
    /// RDMA queues (admin + I/O, all controllers).
    pub fn new(verbs: &mut V, core: Core<B>, max_queues: usize, listen_port: u16) -> Result<Self, Error<V::Error>> {
        Self::with_cm_config(verbs, core, max_queues, listen_port, CmConfig::default())
    }

    /// As [`TargetService::new`] with CM settings (timers, seed).
    pub fn with_cm_config(verbs: &mut V, core: Core<B>, max_queues: usize, listen_port: u16, cfg: CmConfig) -> Result<Self, Error<V::Error>> {
        let mut cm = Cm::new(verbs, cfg).map_err(cm_err)?;
        for port in listen_ports(&core, listen_port) {
            cm.listen(port).map_err(cm_err)?;
            log::info!("nvmeof: service: listening on {}.{}.{}.{} port {port}", verbs.local_ip()[0], verbs.local_ip()[1], verbs.local_ip()[2], verbs.local_ip()[3]);
        }
        Ok(TargetService { cm, target: RdmaTarget::new(core, max_queues), port: listen_port, live: BTreeMap::new(), pending: BTreeMap::new(), cm_cfg: cfg, stats: ServiceStats::default() })
    }

    /// Connections with a live queue.
    pub fn connections(&self) -> usize {
        self.live.len()
    }

    /// The earliest time [`TargetService::poll`] has timer work (the transport's and the CM's;
    /// see [`RdmaTarget::next_timer`]); `None`: none.
    pub fn next_timer(&self) -> Option<u64> {
        [self.target.next_timer(), self.cm.next_timer()].into_iter().flatten().min()
    }

    /// One turn: transport completions and block I/O, then CM events, then queues the
    /// target closed. Returns the number of things done (0 = idle).
    pub fn poll(&mut self, verbs: &mut V, now_ns: u64) -> usize {
        if verbs.device_failed() {
            return self.recover(verbs, now_ns);
        }
        let mut n = self.target.poll(verbs, now_ns);
        n += self.answer_pending(verbs);
        while let Some(ev) = self.cm.poll(verbs, now_ns) {
            n += 1;
            self.on_event(verbs, ev);
        }
        while let Some(qpn) = self.target.take_closed() {
            n += 1;
            let id = self.live.iter().find(|(_, q)| **q == qpn).map(|(id, _)| *id);
            if let Some(id) = id {
                self.live.remove(&id);
                self.stats.closed_by_target += 1;
                if let Err(e) = self.cm.disconnect(verbs, ConnId(id)) {
                    log::debug!("nvmeof: service: disconnect {id:#x}: {e:?}");
                }
            }
        }
        n
    }

    fn on_event(&mut self, verbs: &mut V, ev: CmEvent) {
        match ev {
            CmEvent::ConnectRequest(r) => {
                self.stats.requests += 1;
                let port = match self.target.core.port_for_service(r.port) {
                    Some(i) => i,
                    None if r.port == self.port => 0,
                    None => {
                        let _ = self.cm.reject(verbs, r.id, rej_reason::INVALID_SERVICE_ID, &[]);
                        return;
                    }
                };
                // The target only issues READ/WRITE towards the host; it grants no remote access.
                let local = Access { local_write: true, remote_read: false, remote_write: false };
                let attrs = match self.cm.accept_attrs(r.id, 0, TARGET_READ_DEPTH, local) {
                    Ok(a) => a,
                    Err(e) => {
                        self.stats.cm_errors += 1;
                        log::warn!("nvmeof: service: request {:?}: {e:?}", r.id);
                        return;
                    }
                };
                match self.target.accept_on(verbs, port, &r.private_data, &attrs) {
                    // REP once its poll group has it (`answer_pending`).
                    Ok(p) => {
                        self.pending.insert(p.qpn.0, Pending { id: r.id, rep: p.rep, abandoned: false });
                    }
                    Err(rej) => {
                        self.stats.rejected += 1;
                        if self.cm.reject(verbs, r.id, rej_reason::CONSUMER_DEFINED, rej.as_bytes()).is_err() {
                            self.stats.cm_errors += 1;
                        }
                    }
                }
            }
            CmEvent::Established { .. } => self.stats.established += 1,
            CmEvent::Rejected { id, .. } | CmEvent::Unreachable { id } | CmEvent::Disconnected { id } => {
                if let Some(qpn) = self.live.remove(&id.0) {
                    self.stats.closed_by_peer += 1;
                    self.target.disconnected(verbs, qpn);
                } else if let Some(p) = self.pending.values_mut().find(|p| p.id == id) {
                    p.abandoned = true;
                }
            }
        }
    }

    /// The poll groups' answers to the queues handed to them: REP for a queue its group took
    /// in, REJ for a refused one (its QP already destroyed); a queue whose connection was given
    /// up meanwhile is closed. Returns how many answers.
    fn answer_pending(&mut self, verbs: &mut V) -> usize {
        let mut n = 0;
        while let Some(a) = self.target.take_answer() {
            n += 1;
            let qpn = match a {
                QueueAnswer::Attached(q) | QueueAnswer::Refused(q, _) => q,
            };
            let Some(p) = self.pending.remove(&qpn.0) else { continue };
            match a {
                QueueAnswer::Attached(_) if p.abandoned => self.target.disconnected(verbs, qpn),
                QueueAnswer::Attached(_) => match self.cm.accept_app_qp(verbs, p.id, qpn, p.rep.as_bytes()) {
                    Ok(()) => {
                        self.stats.accepted += 1;
                        self.live.insert(p.id.0, qpn);
                    }
                    Err(e) => {
                        self.stats.cm_errors += 1;
                        log::warn!("nvmeof: service: REP for {qpn}: {e:?}");
                        self.target.disconnected(verbs, qpn);
                    }
                },
                QueueAnswer::Refused(_, rej) => {
                    self.stats.rejected += 1;
                    if !p.abandoned && self.cm.reject(verbs, p.id, rej_reason::CONSUMER_DEFINED, rej.as_bytes()).is_err() {
                        self.stats.cm_errors += 1;
                    }
                }
            }
        }
        n
    }

    /// The device failed: close every queue, let their block I/O finish, release the
    /// namespace keys, then bring the device up and listen again (slow path, once per turn).
    fn recover(&mut self, verbs: &mut V, now_ns: u64) -> usize {
        let mut n = 0;
        while let Some((id, qpn)) = self.live.pop_first() {
            log::warn!("nvmeof: service: device failed: closing connection {id:#x} ({qpn})");
            self.stats.closed_by_device_failure += 1;
            self.target.disconnected(verbs, qpn);
            n += 1;
        }
        while self.target.take_closed().is_some() {}
        // Queues still waiting for their group: closed as soon as it answers.
        for p in self.pending.values_mut() {
            p.abandoned = true;
        }
        // Queues whose commands are still in the block device free their keys when it answers.
        n += self.target.poll(verbs, now_ns);
        n += self.answer_pending(verbs);
        if self.target.block_inflight() {
            return n.max(1);
        }
        self.target.release_namespaces(verbs);
        if !verbs.recover_device() {
            return n;
        }
        // Another seed for the new CM: its IDs must not repeat the old one's.
        let mut cfg = self.cm_cfg;
        cfg.seed ^= (self.stats.device_recoveries + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let ports = listen_ports(&self.target.core, self.port);
        match Cm::new(verbs, cfg).and_then(|mut cm| ports.iter().try_for_each(|p| cm.listen(*p)).map(|()| cm)) {
            Ok(cm) => self.cm = cm,
            Err(e) => {
                log::error!("nvmeof: service: listening again after the device recovered: {e:?}");
                return n;
            }
        }
        self.target.register_namespaces(verbs);
        self.stats.device_recoveries += 1;
        log::info!("nvmeof: service: device recovered; listening on port(s) {ports:?} again");
        n + 1
    }

    /// Log the slow-path counters (service, CM, transport, core).
    pub fn report(&self) {
        log::info!("nvmeof: service: {:?}", self.stats);
        log::info!("nvmeof: service: cm {:?}", self.cm.stats());
        log::info!("nvmeof: service: transport {:?}", self.target.stats());
        log::info!("nvmeof: service: core {:?}", self.target.core_stats());
        log::info!("nvmeof: service: bounds {:?}, queues {:?}", self.target.core.bound_stats(), self.target.pinned());
    }

    /// Close every connection (DREQ) and stop listening; keep polling to let them finish.
    pub fn close_all(&mut self, verbs: &mut V) {
        for port in listen_ports(&self.target.core, self.port) {
            self.cm.unlisten(port);
        }
        // Queues still waiting for their group: REJ now, closed when it answers.
        for p in self.pending.values_mut() {
            if !p.abandoned {
                p.abandoned = true;
                let _ = self.cm.reject(verbs, p.id, rej_reason::CONSUMER_DEFINED, &[]);
            }
        }
        let ids: alloc::vec::Vec<(u32, Qpn)> = self.live.iter().map(|(a, b)| (*a, *b)).collect();
        for (id, qpn) in ids {
            self.live.remove(&id);
            self.target.disconnected(verbs, qpn);
            let _ = self.cm.disconnect(verbs, ConnId(id));
        }
    }
}

/// A connection whose queue waits for its poll group's answer.
#[derive(Debug, Clone, Copy)]
struct Pending {
    id: ConnId,
    rep: RdmaCmRep,
    /// The CM gave the connection up (or the service is closing) meanwhile: an attached
    /// queue is closed at once, nothing is sent.
    abandoned: bool,
}

fn cm_err<E>(e: CmError<E>) -> Error<E> {
    match e {
        CmError::Verbs(e) => Error::Verbs(e),
        _ => Error::CmFailed,
    }
}

/// The service IDs (TCP port space) the service listens on: `listen_port`, then every other
/// port's of the configuration, each once.
fn listen_ports<B: BlockDevice>(core: &Core<B>, listen_port: u16) -> alloc::vec::Vec<u16> {
    let mut ports = alloc::vec![listen_port];
    for p in &core.config().ports {
        if !ports.contains(&p.trsvcid) {
            ports.push(p.trsvcid);
        }
    }
    ports
}
