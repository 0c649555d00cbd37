//! The initiator's surroundings over the IB CM (`rdma::cm`): [`CmHostEnv`] implements
//! [`HostEnv`] by connecting the initiator's queues (app-owned QPs) to one target address,
//! poll-driven in the caller's loop. The target's side of the CM is `crate::nvmet::service`.
//!
//! Rules followed (Linux nvme-rdma behaviour, NVMe-oF RDMA transport spec §3.2): the REQ
//! carries the 32-byte NVMe-RDMA private data; a REP's private data gives crqsize; a REJ with
//! reason 28 (consumer defined) carries the 4-byte NVMe-RDMA status; a DREQ from the target
//! fails the queue (its QP is moved to error so outstanding work flushes). When the local
//! device failed, [`HostEnv::recover_device`] forgets the connections, brings the device up
//! again and makes a new CM on it.

use alloc::collections::BTreeMap;

use rdma::cm::{Cm, CmEvent, ConnId, ConnectParams};
use rdma::cm_wire::rej_reason;
use rdma::{Access, Cqn, Qpn, Verbs};

use super::{ConnectPoll, HostEnv};
use crate::nvmet::service::TARGET_READ_DEPTH;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum HState {
    Pending,
    Connected { crqsize: u16 },
    Rejected(u16),
    Failed,
}

/// The initiator's surroundings over the IB CM: connects its queues to one target address.
/// `clock` gives monotonic nanoseconds; `device_poll` runs whatever else must make progress
/// while the initiator waits (the adapter, other apps).
pub struct CmHostEnv<V: Verbs, C: FnMut() -> u64, P: FnMut(&mut V)> {
    pub cm: Cm<V>,
    clock: C,
    device_poll: P,
    dest_ip: [u8; 4],
    dest_port: u16,
    /// CM id → (our QP, state).
    conns: BTreeMap<u32, (Qpn, HState)>,
    /// Device recoveries this env took part in (each made a new CM).
    pub recoveries: u64,
}

impl<V: Verbs, C: FnMut() -> u64, P: FnMut(&mut V)> CmHostEnv<V, C, P> {
    pub fn new(cm: Cm<V>, dest_ip: [u8; 4], dest_port: u16, clock: C, device_poll: P) -> Self {
        CmHostEnv { cm, clock, device_poll, dest_ip, dest_port, conns: BTreeMap::new(), recoveries: 0 }
    }

    /// Point later connects at another target (discovery referrals, reconnect elsewhere).
    pub fn set_target(&mut self, ip: [u8; 4], port: u16) {
        self.dest_ip = ip;
        self.dest_port = port;
    }

    /// Connections the env tracks (leak checks).
    pub fn tracked(&self) -> usize {
        self.conns.len()
    }

    fn pump(&mut self, verbs: &mut V) {
        let now = (self.clock)();
        while let Some(ev) = self.cm.poll(verbs, now) {
            match ev {
                CmEvent::Established { id, private_data, .. } => {
                    if let Some(c) = self.conns.get_mut(&id.0) {
                        let crqsize = u16::from_le_bytes([private_data[2], private_data[3]]);
                        c.1 = HState::Connected { crqsize };
                    }
                }
                CmEvent::Rejected { id, reason, private_data } => {
                    if let Some(c) = self.conns.get_mut(&id.0) {
                        let sts = if reason == rej_reason::CONSUMER_DEFINED { u16::from_le_bytes([private_data[2], private_data[3]]) } else { 0 };
                        log::warn!("nvmeof: host: connect rejected (CM reason {reason}, NVMe-RDMA status {sts})");
                        c.1 = HState::Rejected(sts);
                    }
                }
                CmEvent::Unreachable { id } => {
                    if let Some(c) = self.conns.get_mut(&id.0) {
                        log::warn!("nvmeof: host: target unreachable");
                        c.1 = HState::Failed;
                    }
                }
                CmEvent::Disconnected { id } => {
                    if let Some(c) = self.conns.get_mut(&id.0) {
                        // The target closed the queue: flush our QP so the initiator sees it.
                        if matches!(c.1, HState::Connected { .. }) {
                            let _ = verbs.qp_to_error(c.0);
                        }
                        c.1 = HState::Failed;
                    }
                }
                CmEvent::ConnectRequest(r) => {
                    let _ = self.cm.reject(verbs, r.id, rej_reason::INVALID_SERVICE_ID, &[]);
                }
            }
        }
    }
}

impl<V: Verbs, C: FnMut() -> u64, P: FnMut(&mut V)> HostEnv<V> for CmHostEnv<V, C, P> {
    fn now_ns(&mut self) -> u64 {
        (self.clock)()
    }

    fn idle(&mut self, verbs: &mut V) {
        (self.device_poll)(verbs);
        self.pump(verbs);
    }

    fn cm_connect(&mut self, verbs: &mut V, qp: Qpn, private: &[u8; 32]) -> Result<u32, ()> {
        let p = ConnectParams {
            dest_ip: self.dest_ip,
            dest_port: self.dest_port,
            src_port: 0,
            send_cq: Cqn(0),
            recv_cq: Cqn(0),
            sq_size: 0,
            rq_size: 0,
            recv_wrs: &[],
            private_data: private,
            // The target RDMA READs our write data and RDMA WRITEs read data: the QP accepts
            // both; what it may touch is bounded by the per-I/O key (one I/O's buffer, one
            // direction, invalidated at completion). We issue no READs.
            responder_resources: TARGET_READ_DEPTH,
            initiator_depth: 0,
            access: Access { local_write: true, remote_read: true, remote_write: true },
        };
        match self.cm.connect_app_qp(verbs, qp, &p) {
            Ok(id) => {
                self.conns.insert(id.0, (qp, HState::Pending));
                Ok(id.0)
            }
            Err(e) => {
                log::warn!("nvmeof: host: connect: {e:?}");
                Err(())
            }
        }
    }

    fn cm_poll(&mut self, verbs: &mut V, handle: u32) -> ConnectPoll {
        self.pump(verbs);
        match self.conns.get(&handle).map(|c| c.1) {
            Some(HState::Pending) => ConnectPoll::Pending,
            Some(HState::Connected { crqsize }) => ConnectPoll::Connected { crqsize },
            Some(HState::Rejected(s)) => {
                self.conns.remove(&handle);
                ConnectPoll::Rejected(s)
            }
            Some(HState::Failed) | None => {
                self.conns.remove(&handle);
                ConnectPoll::Failed
            }
        }
    }

    fn select_target(&mut self, addr: super::controllers::TargetAddr) {
        self.set_target(addr.ip, addr.port);
    }

    fn cm_lost(&mut self, handle: u32) -> bool {
        matches!(self.conns.get(&handle).map(|c| c.1), Some(HState::Failed))
    }

    fn cm_disconnect(&mut self, verbs: &mut V, handle: u32) {
        if self.conns.remove(&handle).is_some() {
            let _ = self.cm.disconnect(verbs, ConnId(handle));
        }
    }

    fn recover_device(&mut self, verbs: &mut V) -> bool {
        // The connections died with the device; the CM's QP and buffers went with it too.
        self.conns.clear();
        if !verbs.recover_device() {
            return false;
        }
        let mut cfg = self.cm.config();
        self.recoveries += 1;
        // Another seed for the new CM: its IDs must not repeat the old one's.
        cfg.seed ^= self.recoveries.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        match Cm::new(verbs, cfg) {
            Ok(cm) => {
                self.cm = cm;
                log::info!("nvmeof: host: device recovered; new CM");
                true
            }
            Err(e) => {
                log::error!("nvmeof: host: CM after the device recovered: {e:?}");
                false
            }
        }
    }
}
