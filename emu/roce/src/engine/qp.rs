//! Shared per-QP state of the engine: the QP record (requester, responder and UD halves),
//! the per-call context handed to the handlers, frame output, and the helpers every half uses
//! (completions, the move to ERROR, packet header defaults). As rxe's `rxe_qp.c`/`rxe_loc.h`.

use std::collections::VecDeque;

use super::Counters;
use crate::link::Link;
use crate::types::*;
use crate::wire::{self, PacketSpec, Seg};

#[derive(Debug)]
pub(super) struct SqEntry {
    pub(super) wr: SendWr,
    pub(super) len: u64,
    pub(super) npkts: u32,
    pub(super) first_psn: Option<u32>,
    /// READ: response packets received so far.
    pub(super) rcvd: u32,
    pub(super) done: bool,
}
impl SqEntry {
    pub(super) fn is_read(&self) -> bool {
        matches!(self.wr.op, SendOp::RdmaRead { .. })
    }
    pub(super) fn last_psn(&self) -> Option<u32> {
        self.first_psn.map(|f| wire::psn_add(f, self.npkts - 1))
    }
}

#[derive(Debug)]
pub(super) enum InMsg {
    Send { wr: RecvWr, offset: u64 },
    Write { va: u64, rkey: Rkey, remaining: u64, total: u64 },
}

#[derive(Debug, Clone, Copy)]
pub(super) struct ReadRes {
    pub(super) first_psn: u32,
    pub(super) npkts: u32,
    pub(super) va: u64,
    pub(super) rkey: Rkey,
    pub(super) len: u64,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum RespItem {
    /// ACK or NAK: syndrome, PSN.
    Ack { syndrome: u8, psn: u32 },
    /// READ response packets still to send; `replay` when answering a duplicate READ request.
    Read { res_psn: u32, psn: u32, va: u64, rkey: Rkey, remaining: u64, first: bool, replay: bool },
}

#[derive(Debug)]
pub(super) struct Qp {
    pub(super) qpn: Qpn,
    pub(super) ty: QpType,
    pub(super) state: QpState,
    pub(super) attrs: QpAttrs,
    // requester
    pub(super) sq: VecDeque<SqEntry>,
    pub(super) sq_next: usize,
    pub(super) sq_pkt: u32,
    pub(super) next_psn: u32,
    pub(super) una_psn: u32,
    /// One past the highest PSN ever transmitted (to count retransmissions).
    pub(super) sent_end: u32,
    pub(super) retry_left: u8,
    pub(super) rnr_left: u8,
    pub(super) timer: Option<u64>,
    pub(super) rnr_until: Option<u64>,
    pub(super) read_retry_at: Option<u32>,
    // responder
    pub(super) rq: VecDeque<RecvWr>,
    /// The SRQ this QP takes its receives from instead of `rq`.
    pub(super) srq: Option<Srqn>,
    pub(super) epsn: u32,
    pub(super) msn: u32,
    pub(super) nak_sent: bool,
    pub(super) cur: Option<InMsg>,
    pub(super) reads: VecDeque<ReadRes>,
    pub(super) out: VecDeque<RespItem>,
    pub(super) ud_psn: u32,
    /// What this QP saw (queue-counter events).
    pub(super) ev: super::QpEvents,
}

impl Qp {
    pub(super) fn new(qpn: Qpn, ty: QpType) -> Self {
        Qp {
            qpn,
            ty,
            state: QpState::Reset,
            attrs: QpAttrs::default(),
            sq: VecDeque::new(),
            sq_next: 0,
            sq_pkt: 0,
            next_psn: 0,
            una_psn: 0,
            sent_end: 0,
            retry_left: 7,
            rnr_left: 7,
            timer: None,
            rnr_until: None,
            read_retry_at: None,
            rq: VecDeque::new(),
            srq: None,
            epsn: 0,
            msn: 0,
            nak_sent: false,
            cur: None,
            reads: VecDeque::new(),
            out: VecDeque::new(),
            ud_psn: 0,
            ev: super::QpEvents::default(),
        }
    }
    pub(super) fn reset(&mut self) {
        let (qpn, ty, srq) = (self.qpn, self.ty, self.srq);
        *self = Qp::new(qpn, ty);
        self.srq = srq;
    }
}

/// Per-call context shared by the QP handlers (split from `Engine` for the borrow checker).
pub(super) struct Ctx<'a> {
    pub(super) cfg: &'a PortConfig,
    pub(super) now: u64,
    pub(super) completions: &'a mut VecDeque<Completion>,
    pub(super) c: &'a mut Counters,
    pub(super) mem: &'a mut dyn Memory,
    pub(super) keys: &'a mut dyn Keys,
    pub(super) scratch: &'a mut Vec<u8>,
    pub(super) srqs: &'a mut std::collections::BTreeMap<u32, super::srq::Srq>,
    /// QPs moved to ERROR ([`super::Engine::take_errored`]).
    pub(super) errored: &'a mut Vec<u32>,
}

pub(super) fn npkts(len: u64, pmtu: u32) -> u32 {
    if len == 0 {
        1
    } else {
        len.div_ceil(u64::from(pmtu)) as u32
    }
}

pub(super) fn push_completion(ctx: &mut Ctx<'_>, c: Completion) {
    ctx.c.completions += 1;
    ctx.completions.push_back(c);
}

/// The completion of a work request flushed without running (QP in ERROR).
pub(super) fn flushed(qpn: Qpn, queue: WorkQueue, wr_id: u64, opcode: WcOpcode) -> Completion {
    Completion { qpn, queue, wr_id, status: WcStatus::WrFlushed, opcode, ..Default::default() }
}

/// Move a QP to ERROR: flush outstanding work with WrFlushed.
pub(super) fn qp_error(qp: &mut Qp, ctx: &mut Ctx<'_>) {
    if qp.state == QpState::Error {
        return;
    }
    log::debug!("roce: {} -> ERROR", qp.qpn);
    qp.state = QpState::Error;
    ctx.errored.push(qp.qpn.0);
    while let Some(e) = qp.sq.pop_front() {
        push_completion(ctx, flushed(qp.qpn, WorkQueue::Send, e.wr.wr_id, wc_opcode_of(&e.wr.op)));
    }
    if let Some(InMsg::Send { wr, .. }) = qp.cur.take() {
        qp.rq.push_front(wr);
    }
    while let Some(r) = qp.rq.pop_front() {
        push_completion(ctx, flushed(qp.qpn, WorkQueue::Recv, r.wr_id, WcOpcode::Recv));
    }
    qp.sq_next = 0;
    qp.sq_pkt = 0;
    qp.timer = None;
    qp.rnr_until = None;
    qp.out.clear();
    qp.reads.clear();
}

pub(super) fn wc_opcode_of(op: &SendOp) -> WcOpcode {
    match op {
        SendOp::Send | SendOp::SendWithImm(_) | SendOp::SendWithInvalidate(_) => WcOpcode::Send,
        SendOp::RdmaWrite { .. } | SendOp::RdmaWriteWithImm { .. } => WcOpcode::RdmaWrite,
        SendOp::RdmaRead { .. } => WcOpcode::RdmaRead,
    }
}

/// Frame output of one QP's transmit step.
pub(super) struct TxOut<'a> {
    pub(super) link: &'a mut dyn Link,
    pub(super) buf: &'a mut Vec<u8>,
    pub(super) ip_id: &'a mut u16,
    pub(super) budget: usize,
}

impl TxOut<'_> {
    pub(super) fn emit(&mut self, ctx: &mut Ctx<'_>, spec: &mut PacketSpec, payload: &[u8]) {
        spec.src_mac = ctx.cfg.mac;
        spec.src_ip = ctx.cfg.ip;
        spec.ttl = ctx.cfg.ttl;
        spec.ip_id = *self.ip_id;
        *self.ip_id = self.ip_id.wrapping_add(1);
        match wire::build_frame(spec, payload, self.buf) {
            Ok(()) => {
                self.link.send(self.buf);
                ctx.c.tx_frames += 1;
            }
            Err(e) => log::error!("roce: cannot build opcode {:#x}: {:?}", spec.opcode, e),
        }
        self.budget = self.budget.saturating_sub(1);
    }
}

pub(super) fn rc_spec(qp: &Qp, opcode: u8, psn: u32) -> PacketSpec {
    PacketSpec {
        dst_mac: qp.attrs.remote_mac,
        dst_ip: qp.attrs.remote_ip,
        udp_sport: qp.attrs.udp_sport,
        opcode,
        pkey: qp.attrs.pkey,
        dest_qp: qp.attrs.remote_qpn.0,
        psn,
        ..Default::default()
    }
}

pub(super) fn pick(seg: Seg, ops: [u8; 4]) -> u8 {
    match seg {
        Seg::First => ops[0],
        Seg::Middle => ops[1],
        Seg::Last => ops[2],
        Seg::Only => ops[3],
    }
}
