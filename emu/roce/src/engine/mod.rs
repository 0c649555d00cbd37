//! The RoCEv2 transport engine of one port: RC requester and responder, UD (QP1/GSI), ARP,
//! and the raw-frame path. Driven by `poll(now_ns, link, mem, keys)`; deterministic for a
//! given sequence of calls. Behaviour follows Linux rxe (rxe_req.c, rxe_resp.c, rxe_comp.c,
//! rxe_recv.c) as summarised in wire.md §1.5; deviations are noted where they are made.
//!
//! This module holds the port-level API, receive demultiplexing and the poll loop; the work
//! per QP lives in one module per job, as rxe splits it: `req` (requester, rxe_req.c),
//! `comp` (completer, rxe_comp.c), `resp` (responder, rxe_resp.c), `ud` (UD send and
//! receive), with the shared QP state in `qp` and key-checked memory access in `dma`.

mod comp;
mod dma;
mod qp;
mod req;
mod resp;
mod srq;
mod ud;

use std::collections::{BTreeMap, VecDeque};

use crate::link::Link;
use crate::types::*;
use crate::wire::{self, Frame, RocePacket};
use dma::NoMem;
use qp::{flushed, npkts, qp_error, wc_opcode_of, Ctx, Qp, SqEntry, TxOut};
pub use srq::SrqInfo;
use srq::Srq;

/// Requester window: at most this many PSNs unacknowledged (rxe RXE_MAX_UNACKED_PSNS).
pub const MAX_UNACKED_PSNS: i32 = 128;
/// AckReq on every this-many packets of a long message (rxe RXE_MAX_PKT_PER_ACK).
pub const MAX_PKT_PER_ACK: u32 = 64;
/// Largest RC message (RETH length limit in rxe).
pub const MAX_MSG_LEN: u64 = 1 << 31;
/// Frames taken from the link per `poll`.
const RX_BUDGET: usize = 256;
/// Packets one QP may emit per `poll` (requests + responses), for fairness.
const TX_BUDGET: usize = 128;
/// Raw (non-RoCE) frames kept for the model before dropping.
const RAW_QUEUE_MAX: usize = 1024;

/// RNR NAK timer code → nanoseconds (IBA Table 45; rxe `rnrnak_usec`, 25 → 61.44 ms).
pub const RNR_TIMER_NS: [u64; 32] = {
    const US: [u64; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840, 5_120,
        7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840, 245_760, 327_680,
        491_520,
    ];
    let mut ns = [0u64; 32];
    let mut i = 0;
    while i < 32 {
        ns[i] = US[i] * 1000;
        i += 1;
    }
    ns
};

/// Local ACK timeout in ns for exponent `t` (4.096 µs × 2^t); `None` for 0 (disabled).
pub fn ack_timeout_ns(t: u8) -> Option<u64> {
    if t == 0 {
        None
    } else {
        Some(4096u64 << u32::from(t.min(31)))
    }
}

/// Engine counters (no log line per packet; read these instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counters {
    pub rx_frames: u64,
    pub tx_frames: u64,
    /// Frames that failed to parse (bad IP/UDP/BTH/ICRC...).
    pub rx_malformed: u64,
    pub rx_bad_icrc: u64,
    /// Not addressed to our MAC / IP.
    pub rx_not_ours: u64,
    /// Destination QP unknown or in a state that does not accept the packet.
    pub rx_no_qp: u64,
    /// Packet from an address that is not the QP's peer, or wrong P_Key, or wrong QP type.
    pub rx_bad_peer: u64,
    pub raw_rx: u64,
    pub raw_dropped: u64,
    pub arp_replies: u64,
    pub req_sent: u64,
    pub retransmits: u64,
    pub timeouts: u64,
    pub acks_sent: u64,
    pub acks_rcvd: u64,
    pub nak_seq_sent: u64,
    pub nak_seq_rcvd: u64,
    pub rnr_nak_sent: u64,
    pub rnr_nak_rcvd: u64,
    pub nak_err_sent: u64,
    pub nak_err_rcvd: u64,
    pub dup_requests: u64,
    /// Duplicate READ requests not answered because their key was invalidated since (see resp.rs).
    pub stale_read_replays_dropped: u64,
    pub out_of_seq_dropped: u64,
    pub read_resp_sent: u64,
    pub read_resp_rcvd: u64,
    /// Transmit passes that stopped at a fenced WQE because an earlier READ was incomplete.
    pub fence_waits: u64,
    pub ud_sent: u64,
    pub ud_rcvd: u64,
    pub ud_dropped: u64,
    pub completions: u64,
}

/// What one QP saw, under the names ConnectX's queue counters give them (`mlx5_ifc.h`
/// `query_q_counter_out`; meanings as Linux mlx5_ib's `hw_counters` documents them). Kept per QP for
/// the QP's life; the adapter model sums them into the counter set the QP names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpEvents {
    /// Responder: RDMA WRITE requests received (first packet of each).
    pub rx_write_requests: u64,
    /// Responder: RDMA READ requests received.
    pub rx_read_requests: u64,
    /// Responder: requests dropped for want of a receive WQE (RNR NAK sent).
    pub out_of_buffer: u64,
    /// Responder: packets with a PSN ahead of the expected one.
    pub out_of_sequence: u64,
    /// Responder: duplicate requests (PSN behind the expected one).
    pub duplicate_request: u64,
    /// Requester: RNR NAKs received (retry limit not yet exceeded).
    pub rnr_nak_retry_err: u64,
    /// Requester: NAK-sequence-error packets received.
    pub packet_seq_err: u64,
    /// Requester: local ACK timer expiries.
    pub local_ack_timeout_err: u64,
    /// Requester: RNR retries exhausted.
    pub req_rnr_retries_exceeded: u64,
    /// Requester: transport retries exhausted.
    pub req_transport_retries_exceeded: u64,
    /// Requester: NAK remote access error received.
    pub req_remote_access_errors: u64,
    /// Requester: NAK invalid request received.
    pub req_remote_invalid_request: u64,
    /// Responder: requests refused for a remote access error (NAK sent).
    pub resp_remote_access_errors: u64,
}

/// Snapshot of a QP for the model (query) and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInfo {
    pub qpn: Qpn,
    pub ty: QpType,
    pub state: QpState,
    pub attrs: QpAttrs,
    /// Next PSN the requester assigns / expected PSN at the responder.
    pub sq_psn: u32,
    pub rq_psn: u32,
    pub sq_outstanding: usize,
    pub rq_posted: usize,
}

/// One port's RoCEv2 engine.
pub struct Engine {
    sh: Shared,
    qps: BTreeMap<u32, Qp>,
    raw_rx: VecDeque<Vec<u8>>,
    ip_id: u16,
    txbuf: Vec<u8>,
}

/// The engine state every QP handler works with, kept apart from `qps` so that one QP and
/// this can be borrowed together.
struct Shared {
    cfg: PortConfig,
    completions: VecDeque<Completion>,
    counters: Counters,
    scratch: Vec<u8>,
    /// Shared receive queues by number (QPs attached with [`Engine::attach_srq`] take from them).
    srqs: BTreeMap<u32, Srq>,
    /// QPs moved to ERROR since [`Engine::take_errored`] last took them.
    errored: Vec<u32>,
}

impl Shared {
    /// The handlers' context for one call at time `now`.
    fn ctx<'a>(&'a mut self, now: u64, mem: &'a mut dyn Memory, keys: &'a mut dyn Keys) -> Ctx<'a> {
        Ctx {
            cfg: &self.cfg,
            now,
            completions: &mut self.completions,
            c: &mut self.counters,
            mem,
            keys,
            scratch: &mut self.scratch,
            srqs: &mut self.srqs,
            errored: &mut self.errored,
        }
    }
}

impl Engine {
    pub fn new(cfg: PortConfig) -> Self {
        Engine {
            sh: Shared { cfg, completions: VecDeque::new(), counters: Counters::default(), scratch: Vec::with_capacity(4096), srqs: BTreeMap::new(), errored: Vec::new() },
            qps: BTreeMap::new(),
            raw_rx: VecDeque::new(),
            ip_id: 1,
            txbuf: Vec::with_capacity(wire::ETH_LEN + 4200),
        }
    }

    pub fn config(&self) -> &PortConfig {
        &self.sh.cfg
    }
    /// Change the port's addresses (e.g. a new RoCE GID) without dropping QPs. Connected QPs keep
    /// their peers; packets to the old IPv4 address are no longer accepted.
    pub fn set_config(&mut self, cfg: PortConfig) {
        self.sh.cfg = cfg;
    }
    pub fn counters(&self) -> Counters {
        self.sh.counters
    }

    /// The QPs moved to ERROR (by the engine or [`Engine::modify_qp`]) since the last call, in
    /// the order they went (a QP may be listed more than once). A model that reacts to QPs
    /// going to ERROR looks at these instead of querying every QP each pass.
    pub fn take_errored(&mut self) -> Vec<u32> {
        core::mem::take(&mut self.sh.errored)
    }

    /// Create a QP in RESET. QPN 1 is the GSI QP (must be `QpType::Ud`).
    pub fn create_qp(&mut self, qpn: Qpn, ty: QpType) -> Result<(), EngineError> {
        if qpn.0 == 0 || qpn.0 > wire::MASK24 || (qpn.0 == 1 && ty != QpType::Ud) {
            return Err(EngineError::BadQpn(qpn));
        }
        if self.qps.contains_key(&qpn.0) {
            return Err(EngineError::QpExists(qpn));
        }
        self.qps.insert(qpn.0, Qp::new(qpn, ty));
        Ok(())
    }

    /// Destroy a QP; outstanding work is dropped without completions (as after destroy in verbs).
    /// What QP `qpn` saw since it was created ([`QpEvents`]).
    pub fn qp_events(&self, qpn: Qpn) -> Option<QpEvents> {
        self.qps.get(&qpn.0).map(|q| q.ev)
    }

    pub fn destroy_qp(&mut self, qpn: Qpn) -> Result<(), EngineError> {
        self.qps.remove(&qpn.0).map(|_| ()).ok_or(EngineError::NoSuchQp(qpn))
    }

    /// Number of QPs (for leak checks).
    pub fn qp_count(&self) -> usize {
        self.qps.len()
    }

    pub fn query_qp(&self, qpn: Qpn) -> Option<QpInfo> {
        self.qps.get(&qpn.0).map(|q| QpInfo {
            qpn,
            ty: q.ty,
            state: q.state,
            attrs: q.attrs,
            sq_psn: q.next_psn,
            rq_psn: q.epsn,
            sq_outstanding: q.sq.len(),
            rq_posted: q.rq.len(),
        })
    }

    /// Move a QP to `to`, taking the attributes that transition defines (see [`QpAttrs`]).
    /// Allowed: RESET→INIT, INIT→INIT, INIT→RTR, RTR→RTS, RTS→RTS, any→ERROR, any→RESET.
    pub fn modify_qp(&mut self, qpn: Qpn, to: QpState, a: &QpAttrs) -> Result<(), EngineError> {
        let qp = self.qps.get_mut(&qpn.0).ok_or(EngineError::NoSuchQp(qpn))?;
        let from = qp.state;
        use QpState::*;
        let ok = matches!((from, to), (Reset, Init) | (Init, Init) | (Init, Rtr) | (Rtr, Rts) | (Rts, Rts) | (_, Error) | (_, Reset));
        if !ok {
            return Err(EngineError::BadTransition { from, to });
        }
        match to {
            Reset => {
                qp.reset();
                return Ok(());
            }
            Error => {
                let (mut mem, mut keys) = (NoMem, NoMem);
                qp_error(qp, &mut self.sh.ctx(0, &mut mem, &mut keys));
                return Ok(());
            }
            Init => {
                qp.attrs.access = a.access;
                qp.attrs.qkey = if qpn.0 == 1 { wire::GSI_QKEY } else { a.qkey };
                qp.attrs.pkey = a.pkey;
            }
            Rtr => {
                if qp.ty == QpType::Rc && !matches!(a.pmtu, 256 | 512 | 1024 | 2048 | 4096) {
                    return Err(EngineError::BadAttr("pmtu"));
                }
                if qp.ty == QpType::Rc && a.remote_qpn.0 > wire::MASK24 {
                    return Err(EngineError::BadAttr("remote_qpn"));
                }
                qp.attrs.remote_qpn = a.remote_qpn;
                qp.attrs.remote_ip = a.remote_ip;
                qp.attrs.remote_mac = a.remote_mac;
                qp.attrs.udp_sport = a.udp_sport;
                qp.attrs.rq_psn = a.rq_psn & wire::MASK24;
                qp.attrs.pmtu = if qp.ty == QpType::Rc { a.pmtu } else { self.sh.cfg.ud_mtu };
                qp.attrs.max_dest_rd_atomic = a.max_dest_rd_atomic;
                qp.attrs.min_rnr_timer = a.min_rnr_timer & 0x1F;
                qp.epsn = qp.attrs.rq_psn;
                qp.msn = 0;
            }
            Rts => {
                if a.retry_cnt > 7 || a.rnr_retry > 7 {
                    return Err(EngineError::BadAttr("retry count"));
                }
                qp.attrs.timeout = a.timeout.min(31);
                qp.attrs.retry_cnt = a.retry_cnt;
                qp.attrs.rnr_retry = a.rnr_retry;
                qp.attrs.max_rd_atomic = a.max_rd_atomic;
                if from == Rtr {
                    qp.attrs.sq_psn = a.sq_psn & wire::MASK24;
                    qp.next_psn = qp.attrs.sq_psn;
                    qp.una_psn = qp.attrs.sq_psn;
                    qp.sent_end = qp.attrs.sq_psn;
                }
                qp.retry_left = qp.attrs.retry_cnt;
                qp.rnr_left = qp.attrs.rnr_retry;
            }
        }
        qp.state = to;
        Ok(())
    }

    /// Queue a send work request. In ERROR it completes at once with WrFlushed (as verbs do).
    pub fn post_send(&mut self, qpn: Qpn, wr: SendWr) -> Result<(), EngineError> {
        let qp = self.qps.get_mut(&qpn.0).ok_or(EngineError::NoSuchQp(qpn))?;
        if qp.state == QpState::Error {
            self.sh.counters.completions += 1;
            self.sh.completions.push_back(flushed(qpn, WorkQueue::Send, wr.wr_id, wc_opcode_of(&wr.op)));
            return Ok(());
        }
        if qp.state != QpState::Rts {
            return Err(EngineError::BadState(qp.state));
        }
        let len = wr.data.len();
        match qp.ty {
            QpType::Ud => {
                if !matches!(wr.op, SendOp::Send | SendOp::SendWithImm(_)) || wr.ud.is_none() {
                    return Err(EngineError::BadOp);
                }
                if len > u64::from(self.sh.cfg.ud_mtu) {
                    return Err(EngineError::TooLong(len));
                }
            }
            QpType::Rc => {
                if len > MAX_MSG_LEN {
                    return Err(EngineError::TooLong(len));
                }
                if matches!(wr.op, SendOp::RdmaRead { .. }) && matches!(wr.data, Gather::Inline(_)) {
                    return Err(EngineError::BadOp);
                }
            }
        }
        let n = npkts(len, qp.attrs.pmtu);
        qp.sq.push_back(SqEntry { wr, len, npkts: n, first_psn: None, rcvd: 0, done: false });
        Ok(())
    }

    /// Queue a receive work request (any state but RESET; in ERROR it is flushed at once). A QP
    /// attached to an SRQ has no receive queue of its own: `BadOp`.
    pub fn post_recv(&mut self, qpn: Qpn, wr: RecvWr) -> Result<(), EngineError> {
        let qp = self.qps.get_mut(&qpn.0).ok_or(EngineError::NoSuchQp(qpn))?;
        if qp.srq.is_some() {
            return Err(EngineError::BadOp);
        }
        match qp.state {
            QpState::Reset => Err(EngineError::BadState(QpState::Reset)),
            QpState::Error => {
                self.sh.counters.completions += 1;
                self.sh.completions.push_back(flushed(qpn, WorkQueue::Recv, wr.wr_id, WcOpcode::Recv));
                Ok(())
            }
            _ => {
                qp.rq.push_back(wr);
                Ok(())
            }
        }
    }

    /// Next completion, in the order they happened.
    pub fn pop_completion(&mut self) -> Option<Completion> {
        self.sh.completions.pop_front()
    }

    /// Next non-RoCE frame for the raw Ethernet path (ARP, IPv6, other UDP/TCP...).
    pub fn pop_raw_frame(&mut self) -> Option<Vec<u8>> {
        self.raw_rx.pop_front()
    }

    /// Transmit a frame from the raw Ethernet path unchanged.
    pub fn send_raw(&mut self, link: &mut dyn Link, frame: &[u8]) {
        self.sh.counters.tx_frames += 1;
        link.send(frame);
    }

    /// Earliest time at which a timer (retransmit, RNR) fires, for event-driven loops.
    pub fn next_timer(&self) -> Option<u64> {
        self.qps.values().flat_map(|q| [q.timer, q.rnr_until]).flatten().min()
    }

    /// Whether any QP has something to transmit right now (responses or unsent requests).
    pub fn has_tx_work(&self) -> bool {
        self.qps.values().any(|q| {
            q.state == QpState::Rts && (!q.out.is_empty() || (q.sq_next < q.sq.len() && q.rnr_until.is_none()))
                || (q.state == QpState::Rtr && !q.out.is_empty())
        })
    }

    /// One step: take up to a budget of frames from `link`, run timers, transmit.
    /// Returns the number of frames received plus sent.
    pub fn poll(&mut self, now_ns: u64, link: &mut dyn Link, mem: &mut dyn Memory, keys: &mut dyn Keys) -> usize {
        let mut work = 0;
        for _ in 0..RX_BUDGET {
            let Some(f) = link.poll() else { break };
            self.receive(now_ns, &f, link, mem, keys);
            work += 1;
        }
        self.run_timers(now_ns, mem, keys);
        work + self.transmit(now_ns, link, mem, keys)
    }

    /// Handle one received frame (for models that read the link themselves).
    pub fn receive(&mut self, now_ns: u64, frame: &[u8], link: &mut dyn Link, mem: &mut dyn Memory, keys: &mut dyn Keys) {
        self.sh.counters.rx_frames += 1;
        match wire::parse_frame(frame) {
            Err(wire::WireError::BadIcrc { .. }) => {
                self.sh.counters.rx_bad_icrc += 1;
            }
            Err(_) => self.sh.counters.rx_malformed += 1,
            Ok(Frame::Arp(eth, arp)) => {
                if self.sh.cfg.answer_arp && arp.oper.get() == wire::ARP_REQUEST && arp.tpa == self.sh.cfg.ip && arp.htype.get() == 1 && arp.ptype.get() == wire::ETHERTYPE_IPV4 {
                    let mut out = Vec::new();
                    wire::build_arp(wire::ARP_REPLY, self.sh.cfg.mac, self.sh.cfg.ip, arp.sha, arp.spa, eth.src, &mut out);
                    self.sh.counters.arp_replies += 1;
                    self.sh.counters.tx_frames += 1;
                    link.send(&out);
                }
                self.push_raw(frame);
            }
            Ok(Frame::Other(_)) => self.push_raw(frame),
            Ok(Frame::Roce(pkt)) => {
                if (pkt.eth.dst != self.sh.cfg.mac && pkt.eth.dst != [0xFF; 6]) || pkt.ip.dst != self.sh.cfg.ip {
                    self.sh.counters.rx_not_ours += 1;
                    return;
                }
                self.on_roce(now_ns, &pkt, mem, keys);
            }
        }
    }

    fn push_raw(&mut self, frame: &[u8]) {
        if self.raw_rx.len() >= RAW_QUEUE_MAX {
            self.sh.counters.raw_dropped += 1;
        } else {
            self.sh.counters.raw_rx += 1;
            self.raw_rx.push_back(frame.to_vec());
        }
    }

    fn on_roce(&mut self, now: u64, pkt: &RocePacket<'_>, mem: &mut dyn Memory, keys: &mut dyn Keys) {
        let dqpn = pkt.bth.dest_qp();
        let Some(qp) = self.qps.get_mut(&dqpn) else {
            self.sh.counters.rx_no_qp += 1;
            return;
        };
        let mut ctx = self.sh.ctx(now, mem, keys);
        // P_Key must match in the low 15 bits with a full member on one side (rxe pkey_match).
        let pk = pkt.bth.pkey.get();
        if pk & 0x7FFF != qp.attrs.pkey & 0x7FFF || (pk & 0x8000 == 0 && qp.attrs.pkey & 0x8000 == 0) {
            ctx.c.rx_bad_peer += 1;
            return;
        }
        match qp.ty {
            QpType::Ud => {
                if pkt.op.deth && matches!(qp.state, QpState::Rtr | QpState::Rts) {
                    ud::receive(qp, &mut ctx, pkt);
                } else {
                    ctx.c.rx_no_qp += 1;
                }
            }
            QpType::Rc => {
                if pkt.op.deth || pkt.op.opcode >= 0x20 {
                    ctx.c.rx_bad_peer += 1;
                    return;
                }
                if pkt.ip.src != qp.attrs.remote_ip {
                    ctx.c.rx_bad_peer += 1;
                    return;
                }
                if pkt.op.is_request() {
                    if matches!(qp.state, QpState::Rtr | QpState::Rts) {
                        resp::receive(qp, &mut ctx, pkt);
                    } else {
                        ctx.c.rx_no_qp += 1;
                    }
                } else if qp.state == QpState::Rts {
                    comp::receive(qp, &mut ctx, pkt);
                } else {
                    ctx.c.rx_no_qp += 1;
                }
            }
        }
    }

    fn run_timers(&mut self, now: u64, mem: &mut dyn Memory, keys: &mut dyn Keys) {
        let mut ctx = self.sh.ctx(now, mem, keys);
        for qp in self.qps.values_mut().filter(|q| q.state == QpState::Rts) {
            comp::run_timers(qp, &mut ctx);
        }
    }

    fn transmit(&mut self, now: u64, link: &mut dyn Link, mem: &mut dyn Memory, keys: &mut dyn Keys) -> usize {
        let mut sent = 0;
        let mut tx = TxOut { link, buf: &mut self.txbuf, ip_id: &mut self.ip_id, budget: 0 };
        let mut ctx = self.sh.ctx(now, mem, keys);
        for qp in self.qps.values_mut() {
            tx.budget = TX_BUDGET;
            sent += resp::transmit(qp, &mut ctx, &mut tx);
            if qp.state == QpState::Rts {
                sent += match qp.ty {
                    QpType::Ud => ud::transmit(qp, &mut ctx, &mut tx),
                    QpType::Rc => req::transmit(qp, &mut ctx, &mut tx),
                };
            }
        }
        sent
    }
}
