//! The RoCEv2 transport engine of one port: RC requester and responder, UD (QP1/GSI), ARP,
//! and the raw-frame path. Driven by `poll(now_ns, link, mem, keys)`; deterministic for a
//! given sequence of calls. Behaviour follows Linux rxe (rxe_req.c, rxe_resp.c, rxe_comp.c,
//! rxe_recv.c) as summarised in wire.md §1.5; deviations are noted where they are made.

use std::collections::{BTreeMap, VecDeque};

use crate::link::Link;
use crate::types::*;
use crate::wire::{self, opcode as opc, Aeth, Deth, Frame, OpKind, PacketSpec, Reth, RocePacket, Seg};

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
    pub out_of_seq_dropped: u64,
    pub read_resp_sent: u64,
    pub read_resp_rcvd: u64,
    pub ud_sent: u64,
    pub ud_rcvd: u64,
    pub ud_dropped: u64,
    pub completions: u64,
}

#[derive(Debug)]
struct SqEntry {
    wr: SendWr,
    len: u64,
    npkts: u32,
    first_psn: Option<u32>,
    /// READ: response packets received so far.
    rcvd: u32,
    done: bool,
}
impl SqEntry {
    fn is_read(&self) -> bool {
        matches!(self.wr.op, SendOp::RdmaRead { .. })
    }
    fn last_psn(&self) -> Option<u32> {
        self.first_psn.map(|f| wire::psn_add(f, self.npkts - 1))
    }
}

#[derive(Debug)]
enum InMsg {
    Send { wr: RecvWr, offset: u64 },
    Write { va: u64, rkey: Rkey, remaining: u64, total: u64 },
}

#[derive(Debug, Clone, Copy)]
struct ReadRes {
    first_psn: u32,
    npkts: u32,
    va: u64,
    rkey: Rkey,
    len: u64,
}

#[derive(Debug, Clone, Copy)]
enum RespItem {
    /// ACK or NAK: syndrome, PSN.
    Ack { syndrome: u8, psn: u32 },
    /// READ response packets still to send.
    Read { res_psn: u32, psn: u32, va: u64, rkey: Rkey, remaining: u64, first: bool },
}

#[derive(Debug)]
struct Qp {
    qpn: Qpn,
    ty: QpType,
    state: QpState,
    attrs: QpAttrs,
    // requester
    sq: VecDeque<SqEntry>,
    sq_next: usize,
    sq_pkt: u32,
    next_psn: u32,
    una_psn: u32,
    /// One past the highest PSN ever transmitted (to count retransmissions).
    sent_end: u32,
    retry_left: u8,
    rnr_left: u8,
    timer: Option<u64>,
    rnr_until: Option<u64>,
    read_retry_at: Option<u32>,
    // responder
    rq: VecDeque<RecvWr>,
    epsn: u32,
    msn: u32,
    nak_sent: bool,
    cur: Option<InMsg>,
    reads: VecDeque<ReadRes>,
    out: VecDeque<RespItem>,
    ud_psn: u32,
}

impl Qp {
    fn new(qpn: Qpn, ty: QpType) -> Self {
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
            epsn: 0,
            msn: 0,
            nak_sent: false,
            cur: None,
            reads: VecDeque::new(),
            out: VecDeque::new(),
            ud_psn: 0,
        }
    }
    fn reset(&mut self) {
        let (qpn, ty) = (self.qpn, self.ty);
        *self = Qp::new(qpn, ty);
    }
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

/// Per-call context shared by the QP handlers (split from `Engine` for the borrow checker).
struct Ctx<'a> {
    cfg: &'a PortConfig,
    now: u64,
    completions: &'a mut VecDeque<Completion>,
    c: &'a mut Counters,
    mem: &'a mut dyn Memory,
    keys: &'a mut dyn Keys,
    scratch: &'a mut Vec<u8>,
}

/// One port's RoCEv2 engine.
pub struct Engine {
    cfg: PortConfig,
    qps: BTreeMap<u32, Qp>,
    completions: VecDeque<Completion>,
    raw_rx: VecDeque<Vec<u8>>,
    counters: Counters,
    ip_id: u16,
    txbuf: Vec<u8>,
    scratch: Vec<u8>,
}

enum DmaErr {
    Key,
    Length,
}

/// Copy `buf.len()` bytes from (key, va) into `buf`.
fn dma_read(mem: &mut dyn Memory, keys: &mut dyn Keys, qpn: Qpn, key: KeyRef, va: u64, need: Access, buf: &mut [u8]) -> Result<(), DmaErr> {
    let mut done = 0usize;
    while done < buf.len() {
        let want = (buf.len() - done) as u64;
        let e = keys.translate(qpn, key, va.wrapping_add(done as u64), want, need).map_err(|_| DmaErr::Key)?;
        let n = e.len.min(want) as usize;
        if n == 0 {
            return Err(DmaErr::Key);
        }
        mem.read(e.pa, &mut buf[done..done + n]).map_err(|_| DmaErr::Key)?;
        done += n;
    }
    Ok(())
}

/// Copy `data` to (key, va).
fn dma_write(mem: &mut dyn Memory, keys: &mut dyn Keys, qpn: Qpn, key: KeyRef, va: u64, need: Access, data: &[u8]) -> Result<(), DmaErr> {
    let mut done = 0usize;
    while done < data.len() {
        let want = (data.len() - done) as u64;
        let e = keys.translate(qpn, key, va.wrapping_add(done as u64), want, need).map_err(|_| DmaErr::Key)?;
        let n = e.len.min(want) as usize;
        if n == 0 {
            return Err(DmaErr::Key);
        }
        mem.write(e.pa, &data[done..done + n]).map_err(|_| DmaErr::Key)?;
        done += n;
    }
    Ok(())
}

/// Read `len` bytes at message offset `off` of a send's gather list into `out`.
fn gather(ctx: &mut Ctx<'_>, qpn: Qpn, data: &Gather, off: u64, len: usize, out: &mut Vec<u8>) -> Result<(), DmaErr> {
    out.clear();
    out.resize(len, 0);
    match data {
        Gather::Inline(b) => {
            let s = usize::try_from(off).map_err(|_| DmaErr::Length)?;
            let src = b.get(s..s + len).ok_or(DmaErr::Length)?;
            out.copy_from_slice(src);
            Ok(())
        }
        Gather::Sges(sges) => walk_sges(sges, off, len, |sge, sge_off, range| {
            dma_read(ctx.mem, ctx.keys, qpn, KeyRef::Local(sge.lkey), sge.addr.wrapping_add(sge_off), Access::NONE, &mut out[range])
        }),
    }
}

/// Write `data` at message offset `off` into a scatter list.
fn scatter(ctx: &mut Ctx<'_>, qpn: Qpn, sges: &[Sge], off: u64, data: &[u8]) -> Result<(), DmaErr> {
    walk_sges(sges, off, data.len(), |sge, sge_off, range| {
        dma_write(ctx.mem, ctx.keys, qpn, KeyRef::Local(sge.lkey), sge.addr.wrapping_add(sge_off), Access::LOCAL_WRITE, &data[range])
    })
}

/// Call `f(sge, offset_in_sge, range_in_buffer)` for the pieces of `[off, off+len)`.
fn walk_sges(
    sges: &[Sge],
    off: u64,
    len: usize,
    mut f: impl FnMut(&Sge, u64, core::ops::Range<usize>) -> Result<(), DmaErr>,
) -> Result<(), DmaErr> {
    let mut skip = off;
    let mut pos = 0usize;
    for sge in sges {
        if pos == len {
            break;
        }
        let l = u64::from(sge.len);
        if skip >= l {
            skip -= l;
            continue;
        }
        let n = ((l - skip) as usize).min(len - pos);
        f(sge, skip, pos..pos + n)?;
        pos += n;
        skip = 0;
    }
    if pos == len {
        Ok(())
    } else {
        Err(DmaErr::Length)
    }
}

fn npkts(len: u64, pmtu: u32) -> u32 {
    if len == 0 {
        1
    } else {
        len.div_ceil(u64::from(pmtu)) as u32
    }
}

fn push_completion(ctx: &mut Ctx<'_>, c: Completion) {
    ctx.c.completions += 1;
    ctx.completions.push_back(c);
}

/// Move a QP to ERROR: flush outstanding work with WrFlushed.
fn qp_error(qp: &mut Qp, ctx: &mut Ctx<'_>) {
    if qp.state == QpState::Error {
        return;
    }
    log::debug!("roce: {} -> ERROR", qp.qpn);
    qp.state = QpState::Error;
    while let Some(e) = qp.sq.pop_front() {
        let opcode = wc_opcode_of(&e.wr.op);
        push_completion(ctx, Completion { qpn: qp.qpn, queue: WorkQueue::Send, wr_id: e.wr.wr_id, status: WcStatus::WrFlushed, opcode, ..Default::default() });
    }
    if let Some(InMsg::Send { wr, .. }) = qp.cur.take() {
        qp.rq.push_front(wr);
    }
    while let Some(r) = qp.rq.pop_front() {
        push_completion(ctx, Completion { qpn: qp.qpn, queue: WorkQueue::Recv, wr_id: r.wr_id, status: WcStatus::WrFlushed, opcode: WcOpcode::Recv, ..Default::default() });
    }
    qp.sq_next = 0;
    qp.sq_pkt = 0;
    qp.timer = None;
    qp.rnr_until = None;
    qp.out.clear();
    qp.reads.clear();
}

fn wc_opcode_of(op: &SendOp) -> WcOpcode {
    match op {
        SendOp::Send | SendOp::SendWithImm(_) | SendOp::SendWithInvalidate(_) => WcOpcode::Send,
        SendOp::RdmaWrite { .. } | SendOp::RdmaWriteWithImm { .. } => WcOpcode::RdmaWrite,
        SendOp::RdmaRead { .. } => WcOpcode::RdmaRead,
    }
}

/// Complete the head send WQE with an error, then move the QP to ERROR.
fn requester_error(qp: &mut Qp, ctx: &mut Ctx<'_>, status: WcStatus, vendor: u8) {
    if let Some(e) = qp.sq.pop_front() {
        push_completion(ctx, Completion {
            qpn: qp.qpn,
            queue: WorkQueue::Send,
            wr_id: e.wr.wr_id,
            status,
            opcode: wc_opcode_of(&e.wr.op),
            vendor_err: vendor,
            ..Default::default()
        });
    }
    qp_error(qp, ctx);
}

/// Pop finished WQEs from the head of the SQ, completing them in order.
fn retire(qp: &mut Qp, ctx: &mut Ctx<'_>) {
    while qp.sq.front().is_some_and(|e| e.done) {
        let e = qp.sq.pop_front().expect("front exists");
        if qp.sq_next == 0 {
            // The WQE being (re)transmitted finished (a late ACK): continue with the next one.
            qp.sq_pkt = 0;
        } else {
            qp.sq_next -= 1;
        }
        if e.wr.signaled {
            push_completion(ctx, Completion {
                qpn: qp.qpn,
                queue: WorkQueue::Send,
                wr_id: e.wr.wr_id,
                status: WcStatus::Success,
                opcode: wc_opcode_of(&e.wr.op),
                byte_len: e.len as u32,
                ..Default::default()
            });
        }
    }
    // Skip packets of the head WQE that are already acknowledged.
    if qp.sq_next == 0 {
        if let Some(e) = qp.sq.front() {
            if let (false, Some(f)) = (e.is_read(), e.first_psn) {
                let acked = wire::psn_diff(qp.una_psn, f).clamp(0, e.npkts as i32 - 1) as u32;
                qp.sq_pkt = qp.sq_pkt.max(acked);
            }
        }
    }
    // Nothing in flight: stop the retransmit timer.
    if wire::psn_diff(qp.next_psn, qp.una_psn) <= 0 {
        qp.timer = None;
    }
}

/// Restart transmission from the oldest unacknowledged packet (go-back-N, as rxe `req_retry`).
fn go_back(qp: &mut Qp) {
    qp.sq_next = 0;
    qp.sq_pkt = match qp.sq.front() {
        Some(e) if !e.is_read() => e.first_psn.map_or(0, |f| wire::psn_diff(qp.una_psn, f).max(0) as u32),
        _ => 0,
    };
}

/// Progress was made: re-arm the retransmit timer and refill the retry budget.
fn progress(qp: &mut Qp, now: u64) {
    qp.retry_left = qp.attrs.retry_cnt;
    qp.rnr_left = qp.attrs.rnr_retry;
    qp.read_retry_at = None;
    qp.timer = ack_timeout_ns(qp.attrs.timeout).map(|t| now + t);
}

/// Cumulative ACK up to and including `a`. Returns false if a READ was skipped (lost response).
fn ack_upto(qp: &mut Qp, a: u32) -> bool {
    let mut ok = true;
    for e in qp.sq.iter_mut() {
        if e.done {
            continue;
        }
        let (Some(first), Some(last)) = (e.first_psn, e.last_psn()) else { break };
        if wire::psn_diff(a, first) < 0 {
            break;
        }
        if e.is_read() {
            // An ACK past an incomplete READ means its response was lost (rxe_comp.c check_ack).
            ok = false;
            break;
        }
        if wire::psn_diff(last, a) <= 0 {
            e.done = true;
            qp.una_psn = wire::psn_add(last, 1);
        } else {
            let una = wire::psn_add(a, 1);
            if wire::psn_diff(una, qp.una_psn) > 0 {
                qp.una_psn = una;
                }
            break;
        }
    }
    ok
}

impl Engine {
    pub fn new(cfg: PortConfig) -> Self {
        Engine {
            cfg,
            qps: BTreeMap::new(),
            completions: VecDeque::new(),
            raw_rx: VecDeque::new(),
            counters: Counters::default(),
            ip_id: 1,
            txbuf: Vec::with_capacity(wire::ETH_LEN + 4200),
            scratch: Vec::with_capacity(4096),
        }
    }

    pub fn config(&self) -> &PortConfig {
        &self.cfg
    }
    /// Change the port's addresses (e.g. a new RoCE GID) without dropping QPs. Connected QPs keep
    /// their peers; packets to the old IPv4 address are no longer accepted.
    pub fn set_config(&mut self, cfg: PortConfig) {
        self.cfg = cfg;
    }
    pub fn counters(&self) -> Counters {
        self.counters
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
                let mut ctx = Ctx {
                    cfg: &self.cfg,
                    now: 0,
                    completions: &mut self.completions,
                    c: &mut self.counters,
                    mem: &mut NoMem,
                    keys: &mut NoMem,
                    scratch: &mut self.scratch,
                };
                qp_error(qp, &mut ctx);
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
                qp.attrs.pmtu = if qp.ty == QpType::Rc { a.pmtu } else { self.cfg.ud_mtu };
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
            self.counters.completions += 1;
            self.completions.push_back(Completion {
                qpn,
                queue: WorkQueue::Send,
                wr_id: wr.wr_id,
                status: WcStatus::WrFlushed,
                opcode: wc_opcode_of(&wr.op),
                ..Default::default()
            });
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
                if len > u64::from(self.cfg.ud_mtu) {
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

    /// Queue a receive work request (any state but RESET; in ERROR it is flushed at once).
    pub fn post_recv(&mut self, qpn: Qpn, wr: RecvWr) -> Result<(), EngineError> {
        let qp = self.qps.get_mut(&qpn.0).ok_or(EngineError::NoSuchQp(qpn))?;
        match qp.state {
            QpState::Reset => Err(EngineError::BadState(QpState::Reset)),
            QpState::Error => {
                self.counters.completions += 1;
                self.completions.push_back(Completion {
                    qpn,
                    queue: WorkQueue::Recv,
                    wr_id: wr.wr_id,
                    status: WcStatus::WrFlushed,
                    opcode: WcOpcode::Recv,
                    ..Default::default()
                });
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
        self.completions.pop_front()
    }

    /// Next non-RoCE frame for the raw Ethernet path (ARP, IPv6, other UDP/TCP...).
    pub fn pop_raw_frame(&mut self) -> Option<Vec<u8>> {
        self.raw_rx.pop_front()
    }

    /// Transmit a frame from the raw Ethernet path unchanged.
    pub fn send_raw(&mut self, link: &mut dyn Link, frame: &[u8]) {
        self.counters.tx_frames += 1;
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
        self.counters.rx_frames += 1;
        match wire::parse_frame(frame) {
            Err(wire::WireError::BadIcrc { .. }) => {
                self.counters.rx_bad_icrc += 1;
            }
            Err(_) => self.counters.rx_malformed += 1,
            Ok(Frame::Arp(eth, arp)) => {
                if self.cfg.answer_arp && arp.oper.get() == wire::ARP_REQUEST && arp.tpa == self.cfg.ip && arp.htype.get() == 1 && arp.ptype.get() == wire::ETHERTYPE_IPV4 {
                    let mut out = Vec::new();
                    wire::build_arp(wire::ARP_REPLY, self.cfg.mac, self.cfg.ip, arp.sha, arp.spa, eth.src, &mut out);
                    self.counters.arp_replies += 1;
                    self.counters.tx_frames += 1;
                    link.send(&out);
                }
                self.push_raw(frame);
            }
            Ok(Frame::Other(_)) => self.push_raw(frame),
            Ok(Frame::Roce(pkt)) => {
                if (pkt.eth.dst != self.cfg.mac && pkt.eth.dst != [0xFF; 6]) || pkt.ip.dst != self.cfg.ip {
                    self.counters.rx_not_ours += 1;
                    return;
                }
                self.on_roce(now_ns, &pkt, mem, keys);
            }
        }
    }

    fn push_raw(&mut self, frame: &[u8]) {
        if self.raw_rx.len() >= RAW_QUEUE_MAX {
            self.counters.raw_dropped += 1;
        } else {
            self.counters.raw_rx += 1;
            self.raw_rx.push_back(frame.to_vec());
        }
    }

    fn on_roce(&mut self, now: u64, pkt: &RocePacket<'_>, mem: &mut dyn Memory, keys: &mut dyn Keys) {
        let dqpn = pkt.bth.dest_qp();
        let Some(qp) = self.qps.get_mut(&dqpn) else {
            self.counters.rx_no_qp += 1;
            return;
        };
        let mut ctx = Ctx {
            cfg: &self.cfg,
            now,
            completions: &mut self.completions,
            c: &mut self.counters,
            mem,
            keys,
            scratch: &mut self.scratch,
        };
        // P_Key must match in the low 15 bits with a full member on one side (rxe pkey_match).
        let pk = pkt.bth.pkey.get();
        if pk & 0x7FFF != qp.attrs.pkey & 0x7FFF || (pk & 0x8000 == 0 && qp.attrs.pkey & 0x8000 == 0) {
            ctx.c.rx_bad_peer += 1;
            return;
        }
        match qp.ty {
            QpType::Ud => {
                if pkt.op.deth && matches!(qp.state, QpState::Rtr | QpState::Rts) {
                    ud_receive(qp, &mut ctx, pkt);
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
                        responder(qp, &mut ctx, pkt);
                    } else {
                        ctx.c.rx_no_qp += 1;
                    }
                } else if qp.state == QpState::Rts {
                    requester_rx(qp, &mut ctx, pkt);
                } else {
                    ctx.c.rx_no_qp += 1;
                }
            }
        }
    }

    fn run_timers(&mut self, now: u64, mem: &mut dyn Memory, keys: &mut dyn Keys) {
        for qp in self.qps.values_mut() {
            if qp.state != QpState::Rts {
                continue;
            }
            if qp.rnr_until.is_some_and(|t| now >= t) {
                qp.rnr_until = None;
                progress_timer_only(qp, now);
            }
            if qp.timer.is_some_and(|t| now >= t) {
                self.counters.timeouts += 1;
                let mut ctx = Ctx {
                    cfg: &self.cfg,
                    now,
                    completions: &mut self.completions,
                    c: &mut self.counters,
                    mem,
                    keys,
                    scratch: &mut self.scratch,
                };
                if qp.retry_left == 0 {
                    requester_error(qp, &mut ctx, WcStatus::RetryExceeded, 0);
                    continue;
                }
                if qp.attrs.retry_cnt != 7 {
                    qp.retry_left -= 1;
                }
                go_back(qp);
                qp.timer = ack_timeout_ns(qp.attrs.timeout).map(|t| now + t);
            }
        }
    }

    fn transmit(&mut self, now: u64, link: &mut dyn Link, mem: &mut dyn Memory, keys: &mut dyn Keys) -> usize {
        let mut sent = 0;
        let mut tx = TxOut { link, buf: &mut self.txbuf, ip_id: &mut self.ip_id, budget: 0 };
        let mut ctx = Ctx {
            cfg: &self.cfg,
            now,
            completions: &mut self.completions,
            c: &mut self.counters,
            mem,
            keys,
            scratch: &mut self.scratch,
        };
        for qp in self.qps.values_mut() {
            tx.budget = TX_BUDGET;
            sent += responder_tx(qp, &mut ctx, &mut tx);
            if qp.state == QpState::Rts {
                sent += requester_tx(qp, &mut ctx, &mut tx);
            }
        }
        sent
    }
}

fn progress_timer_only(qp: &mut Qp, now: u64) {
    if qp.timer.is_none() && wire::psn_diff(qp.next_psn, qp.una_psn) > 0 {
        qp.timer = ack_timeout_ns(qp.attrs.timeout).map(|t| now + t);
    }
}

/// Placeholder memory for control paths that never touch memory.
struct NoMem;
impl Memory for NoMem {
    fn read(&mut self, pa: u64, buf: &mut [u8]) -> Result<(), MemError> {
        Err(MemError { pa, len: buf.len() as u64 })
    }
    fn write(&mut self, pa: u64, data: &[u8]) -> Result<(), MemError> {
        Err(MemError { pa, len: data.len() as u64 })
    }
}
impl Keys for NoMem {
    fn translate(&mut self, _: Qpn, _: KeyRef, _: u64, _: u64, _: Access) -> Result<Extent, KeyError> {
        Err(KeyError::InvalidKey)
    }
    fn invalidate(&mut self, _: Qpn, _: Rkey) -> Result<(), KeyError> {
        Err(KeyError::InvalidKey)
    }
}

/// Frame output of one QP's transmit step.
struct TxOut<'a> {
    link: &'a mut dyn Link,
    buf: &'a mut Vec<u8>,
    ip_id: &'a mut u16,
    budget: usize,
}

impl TxOut<'_> {
    fn emit(&mut self, ctx: &mut Ctx<'_>, spec: &mut PacketSpec, payload: &[u8]) {
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

fn rc_spec(qp: &Qp, opcode: u8, psn: u32) -> PacketSpec {
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

// ------------------------------------------------------------------------------------------
// Requester
// ------------------------------------------------------------------------------------------

fn outstanding_reads(qp: &Qp) -> usize {
    qp.sq.iter().filter(|e| e.is_read() && !e.done && e.first_psn.is_some()).count()
}

fn requester_tx(qp: &mut Qp, ctx: &mut Ctx<'_>, tx: &mut TxOut<'_>) -> usize {
    if qp.ty == QpType::Ud {
        return ud_tx(qp, ctx, tx);
    }
    let mut sent = 0;
    let pmtu = u64::from(qp.attrs.pmtu);
    while tx.budget > 0 && qp.state == QpState::Rts {
        if qp.rnr_until.is_some() || qp.sq_next >= qp.sq.len() {
            break;
        }
        let idx = qp.sq_next;
        if qp.sq[idx].first_psn.is_none() {
            if qp.sq[idx].is_read() && outstanding_reads(qp) >= usize::from(qp.attrs.max_rd_atomic.max(1)) {
                break;
            }
            // Window on the PSN this WQE would start at.
            if wire::psn_diff(qp.next_psn, qp.una_psn) >= MAX_UNACKED_PSNS {
                break;
            }
            let n = qp.sq[idx].npkts;
            qp.sq[idx].first_psn = Some(qp.next_psn);
            qp.next_psn = wire::psn_add(qp.next_psn, n);
        }
        let e = &qp.sq[idx];
        let first = e.first_psn.expect("assigned above");
        let is_retx;
        if e.is_read() {
            let SendOp::RdmaRead { remote_va, rkey } = e.wr.op else { unreachable!() };
            let psn = wire::psn_add(first, e.rcvd);
            if wire::psn_diff(psn, qp.una_psn) >= MAX_UNACKED_PSNS {
                break;
            }
            is_retx = wire::psn_diff(psn, qp.sent_end) < 0;
            let end = wire::psn_add(first, e.npkts);
            let off = u64::from(e.rcvd) * pmtu;
            let mut spec = rc_spec(qp, opc::RC_READ_REQUEST, psn);
            spec.ack_req = true;
            spec.reth = Some(Reth { va: remote_va.wrapping_add(off).into(), rkey: rkey.0.into(), len: ((e.len - off.min(e.len)) as u32).into() });
            tx.emit(ctx, &mut spec, &[]);
            if wire::psn_diff(end, qp.sent_end) > 0 {
                qp.sent_end = end;
            }
            qp.sq_next += 1;
            qp.sq_pkt = 0;
        } else {
            let i = qp.sq_pkt;
            let psn = wire::psn_add(first, i);
            if wire::psn_diff(psn, qp.una_psn) >= MAX_UNACKED_PSNS {
                break;
            }
            is_retx = wire::psn_diff(psn, qp.sent_end) < 0;
            let n = e.npkts;
            let off = u64::from(i) * pmtu;
            let plen = (e.len - off).min(pmtu) as usize;
            let seg = match (n, i) {
                (1, _) => Seg::Only,
                (_, 0) => Seg::First,
                (n, i) if i + 1 == n => Seg::Last,
                _ => Seg::Middle,
            };
            let last = matches!(seg, Seg::Last | Seg::Only);
            let (opcode, reth, imm, ieth) = match e.wr.op {
                SendOp::Send => (pick(seg, [opc::RC_SEND_FIRST, opc::RC_SEND_MIDDLE, opc::RC_SEND_LAST, opc::RC_SEND_ONLY]), None, None, None),
                SendOp::SendWithImm(v) => (pick(seg, [opc::RC_SEND_FIRST, opc::RC_SEND_MIDDLE, opc::RC_SEND_LAST_IMM, opc::RC_SEND_ONLY_IMM]), None, last.then_some(v), None),
                SendOp::SendWithInvalidate(r) => (pick(seg, [opc::RC_SEND_FIRST, opc::RC_SEND_MIDDLE, opc::RC_SEND_LAST_INV, opc::RC_SEND_ONLY_INV]), None, None, last.then_some(r.0)),
                SendOp::RdmaWrite { remote_va, rkey } => (
                    pick(seg, [opc::RC_WRITE_FIRST, opc::RC_WRITE_MIDDLE, opc::RC_WRITE_LAST, opc::RC_WRITE_ONLY]),
                    Some((remote_va, rkey)),
                    None,
                    None,
                ),
                SendOp::RdmaWriteWithImm { remote_va, rkey, imm } => (
                    pick(seg, [opc::RC_WRITE_FIRST, opc::RC_WRITE_MIDDLE, opc::RC_WRITE_LAST_IMM, opc::RC_WRITE_ONLY_IMM]),
                    Some((remote_va, rkey)),
                    last.then_some(imm),
                    None,
                ),
                SendOp::RdmaRead { .. } => unreachable!(),
            };
            let mut spec = rc_spec(qp, opcode, psn);
            if matches!(seg, Seg::First | Seg::Only) {
                if let Some((va, rkey)) = reth {
                    spec.reth = Some(Reth { va: va.into(), rkey: rkey.0.into(), len: (e.len as u32).into() });
                }
            }
            spec.imm = imm;
            spec.ieth = ieth;
            spec.solicited = last && e.wr.solicited;
            spec.ack_req = last || (i + 1) % MAX_PKT_PER_ACK == 0;
            let mut payload = std::mem::take(ctx.scratch);
            let r = gather(ctx, qp.qpn, &e.wr.data, off, plen, &mut payload);
            if r.is_err() {
                *ctx.scratch = payload;
                requester_error(qp, ctx, WcStatus::LocalProtection, 0);
                break;
            }
            tx.emit(ctx, &mut spec, &payload);
            *ctx.scratch = payload;
            if wire::psn_diff(wire::psn_add(psn, 1), qp.sent_end) > 0 {
                qp.sent_end = wire::psn_add(psn, 1);
            }
            if i + 1 == n {
                qp.sq_next += 1;
                qp.sq_pkt = 0;
            } else {
                qp.sq_pkt = i + 1;
            }
        }
        if is_retx {
            ctx.c.retransmits += 1;
        }
        ctx.c.req_sent += 1;
        sent += 1;
        if qp.timer.is_none() {
            qp.timer = ack_timeout_ns(qp.attrs.timeout).map(|t| ctx.now + t);
        }
    }
    sent
}

fn pick(seg: Seg, ops: [u8; 4]) -> u8 {
    match seg {
        Seg::First => ops[0],
        Seg::Middle => ops[1],
        Seg::Last => ops[2],
        Seg::Only => ops[3],
    }
}

fn requester_rx(qp: &mut Qp, ctx: &mut Ctx<'_>, pkt: &RocePacket<'_>) {
    let psn = pkt.bth.psn();
    // Ignore responses to PSNs we never sent.
    if wire::psn_diff(psn, qp.next_psn) >= 0 {
        ctx.c.rx_bad_peer += 1;
        return;
    }
    match pkt.op.kind {
        OpKind::Ack => {
            let Some(aeth) = pkt.aeth else { return };
            ctx.c.acks_rcvd += 1;
            let syn = aeth.syndrome;
            match syn & wire::AETH_TYPE_MASK {
                wire::AETH_TYPE_ACK => {
                    let before = qp.una_psn;
                    let ok = ack_upto(qp, psn);
                    if wire::psn_diff(qp.una_psn, before) > 0 {
                        progress(qp, ctx.now);
                    }
                    retire(qp, ctx);
                    if !ok && qp.read_retry_at != Some(qp.una_psn) {
                        qp.read_retry_at = Some(qp.una_psn);
                        go_back(qp);
                    }
                }
                wire::AETH_TYPE_RNR => {
                    ctx.c.rnr_nak_rcvd += 1;
                    ack_upto(qp, wire::psn_add(psn, wire::MASK24)); // psn - 1
                    retire(qp, ctx);
                    if qp.rnr_left == 0 {
                        requester_error(qp, ctx, WcStatus::RnrRetryExceeded, syn);
                        return;
                    }
                    if qp.attrs.rnr_retry != 7 {
                        qp.rnr_left -= 1;
                    }
                    qp.rnr_until = Some(ctx.now + RNR_TIMER_NS[usize::from(syn & 0x1F)]);
                    qp.timer = None;
                    go_back(qp);
                }
                wire::AETH_TYPE_NAK => {
                    ack_upto(qp, wire::psn_add(psn, wire::MASK24));
                    retire(qp, ctx);
                    if syn == wire::AETH_NAK_PSN_SEQ {
                        ctx.c.nak_seq_rcvd += 1;
                        if qp.retry_left == 0 {
                            requester_error(qp, ctx, WcStatus::RetryExceeded, syn);
                            return;
                        }
                        if qp.attrs.retry_cnt != 7 {
                            qp.retry_left -= 1;
                        }
                        go_back(qp);
                    } else {
                        ctx.c.nak_err_rcvd += 1;
                        let st = match syn {
                            wire::AETH_NAK_INVALID_REQ => WcStatus::RemoteInvalidRequest,
                            wire::AETH_NAK_REM_ACCESS => WcStatus::RemoteAccess,
                            _ => WcStatus::RemoteOperation,
                        };
                        requester_error(qp, ctx, st, syn);
                    }
                }
                _ => ctx.c.rx_malformed += 1,
            }
        }
        OpKind::ReadResponse => {
            ctx.c.read_resp_rcvd += 1;
            // A READ response implicitly acknowledges earlier SEND/WRITEs.
            if wire::psn_diff(psn, qp.una_psn) > 0 {
                let mut a = qp.una_psn;
                for e in qp.sq.iter() {
                    if e.done {
                        continue;
                    }
                    if e.is_read() {
                        break;
                    }
                    match e.last_psn() {
                        Some(l) if wire::psn_diff(l, psn) < 0 => a = l,
                        _ => break,
                    }
                }
                if a != qp.una_psn {
                    ack_upto(qp, a);
                    retire(qp, ctx);
                }
            }
            let Some(e) = qp.sq.iter_mut().find(|e| !e.done) else { return };
            if !e.is_read() || e.first_psn.is_none() {
                return;
            }
            let first = e.first_psn.expect("checked");
            let expect = wire::psn_add(first, e.rcvd);
            let d = wire::psn_diff(psn, expect);
            if d < 0 {
                return; // duplicate response
            }
            if d > 0 {
                // Lost response packet: re-request from the gap once (timer covers the rest).
                if wire::psn_diff(psn, wire::psn_add(first, e.npkts - 1)) <= 0 && qp.read_retry_at != Some(expect) {
                    qp.read_retry_at = Some(expect);
                    go_back(qp);
                }
                return;
            }
            let pmtu = u64::from(qp.attrs.pmtu);
            let off = u64::from(e.rcvd) * pmtu;
            let remaining = e.len - off.min(e.len);
            let want_seg = match (e.npkts, e.rcvd) {
                (1, _) => Seg::Only,
                (_, 0) => Seg::First,
                (n, r) if r + 1 == n => Seg::Last,
                _ => Seg::Middle,
            };
            // After a retried READ the responder restarts with FIRST/ONLY at our PSN.
            let seg_ok = pkt.op.seg == want_seg
                || (e.rcvd > 0 && matches!((pkt.op.seg, want_seg), (Seg::First, Seg::Middle) | (Seg::Only, Seg::Last)));
            let want_len = remaining.min(pmtu) as usize;
            let ok_syn = pkt.aeth.is_none_or(|a| a.syndrome & wire::AETH_TYPE_MASK == wire::AETH_TYPE_ACK);
            if !seg_ok || pkt.payload.len() != want_len || !ok_syn {
                requester_error(qp, ctx, WcStatus::BadResponse, 0);
                return;
            }
            let last = e.rcvd + 1 == e.npkts;
            let Gather::Sges(sges) = &e.wr.data else { return };
            if scatter(ctx, qp.qpn, sges, off, pkt.payload).is_err() {
                requester_error(qp, ctx, WcStatus::LocalProtection, 0);
                return;
            }
            let e = qp.sq.iter_mut().find(|e| !e.done).expect("still there");
            e.rcvd += 1;
            qp.una_psn = wire::psn_add(psn, 1);
            if last {
                e.done = true;
            }
            progress(qp, ctx.now);
            retire(qp, ctx);
        }
        _ => ctx.c.rx_malformed += 1,
    }
}

fn ud_tx(qp: &mut Qp, ctx: &mut Ctx<'_>, tx: &mut TxOut<'_>) -> usize {
    let mut sent = 0;
    while tx.budget > 0 {
        let Some(e) = qp.sq.pop_front() else { break };
        let Some(ud) = e.wr.ud else { continue };
        let imm = match e.wr.op {
            SendOp::SendWithImm(v) => Some(v),
            _ => None,
        };
        // QP1 always sends the GSI Q_Key; elsewhere a WR Q_Key with the high bit set means
        // "use the QP's Q_Key" (IBA 10.2.5).
        let qkey = if qp.qpn.0 == 1 {
            wire::GSI_QKEY
        } else if ud.qkey & 0x8000_0000 != 0 {
            qp.attrs.qkey
        } else {
            ud.qkey
        };
        let mut spec = PacketSpec {
            dst_mac: ud.dest_mac,
            dst_ip: ud.dest_ip,
            udp_sport: ud.udp_sport,
            opcode: if imm.is_some() { opc::UD_SEND_ONLY_IMM } else { opc::UD_SEND_ONLY },
            pkey: qp.attrs.pkey,
            dest_qp: ud.remote_qpn.0,
            psn: qp.ud_psn,
            ack_req: true,
            solicited: e.wr.solicited,
            deth: Some(Deth::new(qkey, qp.qpn.0)),
            imm,
            ..Default::default()
        };
        qp.ud_psn = wire::psn_add(qp.ud_psn, 1);
        let mut payload = std::mem::take(ctx.scratch);
        let r = gather(ctx, qp.qpn, &e.wr.data, 0, e.len as usize, &mut payload);
        let status = if r.is_ok() {
            tx.emit(ctx, &mut spec, &payload);
            ctx.c.ud_sent += 1;
            sent += 1;
            WcStatus::Success
        } else {
            WcStatus::LocalProtection
        };
        *ctx.scratch = payload;
        if e.wr.signaled || status != WcStatus::Success {
            push_completion(ctx, Completion {
                qpn: qp.qpn,
                queue: WorkQueue::Send,
                wr_id: e.wr.wr_id,
                status,
                opcode: WcOpcode::Send,
                byte_len: e.len as u32,
                ..Default::default()
            });
        }
    }
    sent
}

fn ud_receive(qp: &mut Qp, ctx: &mut Ctx<'_>, pkt: &RocePacket<'_>) {
    let Some(deth) = pkt.deth else { return };
    if deth.qkey.get() != qp.attrs.qkey {
        ctx.c.ud_dropped += 1;
        return;
    }
    let Some(wr) = qp.rq.pop_front() else {
        ctx.c.ud_dropped += 1;
        return;
    };
    // GRH area: IPv4 case = 20 zero bytes + the IPv4 header (rxe behaviour, wire.md §1.7).
    let mut grh = [0u8; wire::GRH_LEN];
    grh[20..].copy_from_slice(zerocopy::IntoBytes::as_bytes(&pkt.ip));
    let total = wire::GRH_LEN + pkt.payload.len();
    let cap: u64 = wr.sges.iter().map(|s| u64::from(s.len)).sum();
    let mut c = Completion {
        qpn: qp.qpn,
        queue: WorkQueue::Recv,
        wr_id: wr.wr_id,
        opcode: if pkt.imm.is_some() { WcOpcode::RecvWithImm } else { WcOpcode::Recv },
        byte_len: total as u32,
        imm: pkt.imm,
        src_qp: Qpn(deth.src_qp()),
        src_ip: pkt.ip.src,
        grh: true,
        solicited: pkt.bth.solicited(),
        ..Default::default()
    };
    if (total as u64) > cap {
        c.status = WcStatus::LocalLength;
    } else if scatter(ctx, qp.qpn, &wr.sges, 0, &grh).is_err()
        || scatter(ctx, qp.qpn, &wr.sges, wire::GRH_LEN as u64, pkt.payload).is_err()
    {
        c.status = WcStatus::LocalProtection;
    }
    ctx.c.ud_rcvd += 1;
    push_completion(ctx, c);
}

// ------------------------------------------------------------------------------------------
// Responder
// ------------------------------------------------------------------------------------------

/// Queue an ACK/NAK, coalescing with a plain ACK at the tail of the response queue.
fn queue_ack(qp: &mut Qp, syndrome: u8, psn: u32) {
    if syndrome == wire::AETH_ACK_UNLIMITED {
        if let Some(RespItem::Ack { syndrome: s, psn: p }) = qp.out.back_mut() {
            if *s == wire::AETH_ACK_UNLIMITED {
                *p = psn;
                return;
            }
        }
    }
    qp.out.push_back(RespItem::Ack { syndrome, psn });
}

/// Class C error at the responder: NAK and move the QP to ERROR once the NAK is out.
fn responder_fatal(qp: &mut Qp, ctx: &mut Ctx<'_>, syndrome: u8, psn: u32, tx_now: &mut Vec<RespItem>) {
    ctx.c.nak_err_sent += 1;
    tx_now.push(RespItem::Ack { syndrome, psn });
    qp_error(qp, ctx);
}

fn responder(qp: &mut Qp, ctx: &mut Ctx<'_>, pkt: &RocePacket<'_>) {
    let mut fatal: Vec<RespItem> = Vec::new();
    responder_inner(qp, ctx, pkt, &mut fatal);
    if !fatal.is_empty() {
        // The QP is in ERROR now; the NAK still goes out (queued after the flush).
        qp.out.extend(fatal);
    }
}

fn responder_inner(qp: &mut Qp, ctx: &mut Ctx<'_>, pkt: &RocePacket<'_>, fatal: &mut Vec<RespItem>) {
    let psn = pkt.bth.psn();
    let op = pkt.op;
    let d = wire::psn_diff(psn, qp.epsn);
    if d > 0 {
        if !qp.nak_sent {
            qp.nak_sent = true;
            ctx.c.nak_seq_sent += 1;
            queue_ack_nak(qp, wire::AETH_NAK_PSN_SEQ, qp.epsn);
        } else {
            ctx.c.out_of_seq_dropped += 1;
        }
        return;
    }
    if d < 0 {
        ctx.c.dup_requests += 1;
        duplicate(qp, pkt);
        return;
    }
    qp.nak_sent = false;
    let pmtu = qp.attrs.pmtu as usize;
    // Opcode sequence (rxe check_op_seq).
    let continuing = match (&qp.cur, op.kind) {
        (Some(InMsg::Send { .. }), OpKind::Send) | (Some(InMsg::Write { .. }), OpKind::Write) => true,
        (Some(_), _) => {
            return responder_fatal(qp, ctx, wire::AETH_NAK_INVALID_REQ, psn, fatal);
        }
        (None, _) => false,
    };
    if continuing != matches!(op.seg, Seg::Middle | Seg::Last) {
        return responder_fatal(qp, ctx, wire::AETH_NAK_INVALID_REQ, psn, fatal);
    }
    // Access (rxe check_op_valid) and lengths (check_length).
    let acc = qp.attrs.access;
    let bad_access = match op.kind {
        OpKind::Write => !acc.remote_write,
        OpKind::ReadRequest => !acc.remote_read || qp.attrs.max_dest_rd_atomic == 0,
        OpKind::Atomic => true, // atomics are not modelled
        _ => false,
    };
    if bad_access {
        return responder_fatal(qp, ctx, wire::AETH_NAK_INVALID_REQ, psn, fatal);
    }
    let plen = pkt.payload.len();
    let len_ok = match op.seg {
        Seg::First | Seg::Middle => plen == pmtu,
        Seg::Last => plen >= 1 && plen <= pmtu,
        Seg::Only => plen <= pmtu,
    };
    if op.payload && !len_ok {
        return responder_fatal(qp, ctx, wire::AETH_NAK_INVALID_REQ, psn, fatal);
    }
    match op.kind {
        OpKind::Send => {
            if op.is_first() {
                let Some(wr) = qp.rq.pop_front() else {
                    // Class B: RNR NAK, drop until the retry (one NAK only).
                    ctx.c.rnr_nak_sent += 1;
                    qp.nak_sent = true;
                    queue_ack_nak(qp, wire::AETH_TYPE_RNR | qp.attrs.min_rnr_timer, psn);
                    return;
                };
                qp.cur = Some(InMsg::Send { wr, offset: 0 });
            }
            let Some(InMsg::Send { wr, offset }) = qp.cur.take() else { return };
            let cap: u64 = wr.sges.iter().map(|s| u64::from(s.len)).sum();
            if offset + plen as u64 > cap {
                push_completion(ctx, Completion { qpn: qp.qpn, queue: WorkQueue::Recv, wr_id: wr.wr_id, status: WcStatus::LocalLength, opcode: WcOpcode::Recv, ..Default::default() });
                return responder_fatal(qp, ctx, wire::AETH_NAK_INVALID_REQ, psn, fatal);
            }
            if scatter(ctx, qp.qpn, &wr.sges, offset, pkt.payload).is_err() {
                push_completion(ctx, Completion { qpn: qp.qpn, queue: WorkQueue::Recv, wr_id: wr.wr_id, status: WcStatus::LocalProtection, opcode: WcOpcode::Recv, ..Default::default() });
                return responder_fatal(qp, ctx, wire::AETH_NAK_REM_OP, psn, fatal);
            }
            qp.cur = Some(InMsg::Send { wr, offset: offset + plen as u64 });
            if op.is_last() {
                let Some(InMsg::Send { wr, offset }) = qp.cur.take() else { return };
                let mut c = Completion {
                    qpn: qp.qpn,
                    queue: WorkQueue::Recv,
                    wr_id: wr.wr_id,
                    opcode: if pkt.imm.is_some() { WcOpcode::RecvWithImm } else { WcOpcode::Recv },
                    byte_len: offset as u32,
                    imm: pkt.imm,
                    src_qp: qp.attrs.remote_qpn,
                    solicited: pkt.bth.solicited(),
                    ..Default::default()
                };
                if let Some(rkey) = pkt.ieth {
                    if ctx.keys.invalidate(qp.qpn, Rkey(rkey)).is_err() {
                        // rxe class J: the receive completes in error and the QP goes to ERROR.
                        // Deviation: we also NAK (invalid request) so the requester learns at once.
                        c.status = WcStatus::RemoteInvalidRequest;
                        push_completion(ctx, c);
                        return responder_fatal(qp, ctx, wire::AETH_NAK_INVALID_REQ, psn, fatal);
                    }
                    c.invalidated_rkey = Some(Rkey(rkey));
                }
                push_completion(ctx, c);
                qp.msn = wire::psn_add(qp.msn, 1);
            }
        }
        OpKind::Write => {
            if op.is_first() {
                let Some(reth) = pkt.reth else { return };
                let (va, rkey, total) = (reth.va.get(), Rkey(reth.rkey.get()), u64::from(reth.len.get()));
                if total > MAX_MSG_LEN || (op.seg == Seg::Only && total != plen as u64) || (op.seg == Seg::First && total <= pmtu as u64) {
                    return responder_fatal(qp, ctx, wire::AETH_NAK_INVALID_REQ, psn, fatal);
                }
                if total > 0 && check_range(ctx, qp.qpn, rkey, va, total, Access::REMOTE_WRITE).is_err() {
                    return responder_fatal(qp, ctx, wire::AETH_NAK_REM_ACCESS, psn, fatal);
                }
                qp.cur = Some(InMsg::Write { va, rkey, remaining: total, total });
            }
            let Some(InMsg::Write { va, rkey, remaining, total }) = qp.cur.as_ref().map(|m| match m {
                InMsg::Write { va, rkey, remaining, total } => InMsg::Write { va: *va, rkey: *rkey, remaining: *remaining, total: *total },
                InMsg::Send { .. } => unreachable!("sequence checked"),
            }) else {
                return;
            };
            let p = plen as u64;
            if p > remaining || (op.is_last() && p != remaining) || (!op.is_last() && p == remaining && remaining > 0) {
                return responder_fatal(qp, ctx, wire::AETH_NAK_INVALID_REQ, psn, fatal);
            }
            // WRITE with immediate consumes a receive WQE: check before touching memory (rxe CHK_RESOURCE).
            if op.imm && op.is_last() && qp.rq.is_empty() {
                if op.seg == Seg::Only {
                    qp.cur = None;
                }
                ctx.c.rnr_nak_sent += 1;
                qp.nak_sent = true;
                queue_ack_nak(qp, wire::AETH_TYPE_RNR | qp.attrs.min_rnr_timer, psn);
                return;
            }
            if p > 0 && dma_write(ctx.mem, ctx.keys, qp.qpn, KeyRef::Remote(rkey), va, Access::REMOTE_WRITE, pkt.payload).is_err() {
                return responder_fatal(qp, ctx, wire::AETH_NAK_REM_ACCESS, psn, fatal);
            }
            if op.is_last() {
                qp.cur = None;
                if let Some(imm) = pkt.imm {
                    let wr = qp.rq.pop_front().expect("checked above");
                    push_completion(ctx, Completion {
                        qpn: qp.qpn,
                        queue: WorkQueue::Recv,
                        wr_id: wr.wr_id,
                        opcode: WcOpcode::RecvRdmaWithImm,
                        byte_len: total as u32,
                        imm: Some(imm),
                        src_qp: qp.attrs.remote_qpn,
                        solicited: pkt.bth.solicited(),
                        ..Default::default()
                    });
                }
                qp.msn = wire::psn_add(qp.msn, 1);
            } else {
                qp.cur = Some(InMsg::Write { va: va + p, rkey, remaining: remaining - p, total });
            }
        }
        OpKind::ReadRequest => {
            let Some(reth) = pkt.reth else { return };
            let (va, rkey, len) = (reth.va.get(), Rkey(reth.rkey.get()), u64::from(reth.len.get()));
            if len > MAX_MSG_LEN {
                return responder_fatal(qp, ctx, wire::AETH_NAK_INVALID_REQ, psn, fatal);
            }
            if len > 0 && check_range(ctx, qp.qpn, rkey, va, len, Access::REMOTE_READ).is_err() {
                return responder_fatal(qp, ctx, wire::AETH_NAK_REM_ACCESS, psn, fatal);
            }
            let n = npkts(len, qp.attrs.pmtu);
            let cap = usize::from(qp.attrs.max_dest_rd_atomic.max(1));
            while qp.reads.len() >= cap {
                qp.reads.pop_front();
            }
            qp.reads.push_back(ReadRes { first_psn: psn, npkts: n, va, rkey, len });
            qp.out.push_back(RespItem::Read { res_psn: psn, psn, va, rkey, remaining: len, first: true });
            qp.epsn = wire::psn_add(psn, n);
            qp.msn = wire::psn_add(qp.msn, 1);
            return;
        }
        _ => return,
    }
    qp.epsn = wire::psn_add(psn, 1);
    if pkt.bth.ack_req() {
        queue_ack(qp, wire::AETH_ACK_UNLIMITED, psn);
    }
}

fn queue_ack_nak(qp: &mut Qp, syndrome: u8, psn: u32) {
    qp.out.push_back(RespItem::Ack { syndrome, psn });
}

fn check_range(ctx: &mut Ctx<'_>, qpn: Qpn, rkey: Rkey, va: u64, len: u64, need: Access) -> Result<(), KeyError> {
    // Validates the whole range; walking extents also proves every byte translates.
    let mut done = 0u64;
    while done < len {
        let e = ctx.keys.translate(qpn, KeyRef::Remote(rkey), va.wrapping_add(done), len - done, need)?;
        if e.len == 0 {
            return Err(KeyError::OutOfBounds);
        }
        done += e.len.min(len - done);
    }
    Ok(())
}

/// A request PSN older than expected: re-ACK, or replay a READ response; never re-execute.
fn duplicate(qp: &mut Qp, pkt: &RocePacket<'_>) {
    let psn = pkt.bth.psn();
    if pkt.op.kind == OpKind::ReadRequest {
        let Some(reth) = pkt.reth else { return };
        let (va, rkey, len) = (reth.va.get(), Rkey(reth.rkey.get()), u64::from(reth.len.get()));
        let pmtu = u64::from(qp.attrs.pmtu);
        // Find the saved READ this PSN belongs to; the retried request must be its tail.
        let Some(res) = qp.reads.iter().copied().find(|r| {
            let d = wire::psn_diff(psn, r.first_psn);
            d >= 0 && (d as u32) < r.npkts
        }) else {
            return;
        };
        let off = u64::from(wire::psn_diff(psn, res.first_psn) as u32) * pmtu;
        if rkey != res.rkey || va != res.va.wrapping_add(off) || len != res.len - off.min(res.len) {
            return;
        }
        // Replace any queued reply of the same READ by the replay.
        qp.out.retain(|it| !matches!(it, RespItem::Read { res_psn, .. } if *res_psn == res.first_psn));
        qp.out.push_back(RespItem::Read { res_psn: res.first_psn, psn, va, rkey, remaining: len, first: true });
        return;
    }
    queue_ack(qp, wire::AETH_ACK_UNLIMITED, wire::psn_add(qp.epsn, wire::MASK24));
}

fn responder_tx(qp: &mut Qp, ctx: &mut Ctx<'_>, tx: &mut TxOut<'_>) -> usize {
    let mut sent = 0;
    let pmtu = u64::from(qp.attrs.pmtu);
    while tx.budget > 0 {
        let Some(item) = qp.out.front_mut() else { break };
        match *item {
            RespItem::Ack { syndrome, psn } => {
                qp.out.pop_front();
                let mut spec = rc_spec(qp, opc::RC_ACK, psn);
                spec.aeth = Some(Aeth::new(syndrome, qp.msn));
                tx.emit(ctx, &mut spec, &[]);
                ctx.c.acks_sent += 1;
                sent += 1;
            }
            RespItem::Read { psn, va, rkey, remaining, first, .. } => {
                let n = remaining.min(pmtu);
                let last = remaining <= pmtu;
                let seg = match (first, last) {
                    (true, true) => Seg::Only,
                    (true, false) => Seg::First,
                    (false, true) => Seg::Last,
                    (false, false) => Seg::Middle,
                };
                let opcode = pick(seg, [opc::RC_READ_RESP_FIRST, opc::RC_READ_RESP_MIDDLE, opc::RC_READ_RESP_LAST, opc::RC_READ_RESP_ONLY]);
                let mut payload = std::mem::take(ctx.scratch);
                payload.clear();
                payload.resize(n as usize, 0);
                let r = if n > 0 {
                    dma_read(ctx.mem, ctx.keys, qp.qpn, KeyRef::Remote(rkey), va, Access::REMOTE_READ, &mut payload)
                } else {
                    Ok(())
                };
                if r.is_err() {
                    // The key went away between request and reply: NAK and error, as at request time.
                    *ctx.scratch = payload;
                    let mut f = Vec::new();
                    responder_fatal(qp, ctx, wire::AETH_NAK_REM_ACCESS, psn, &mut f);
                    qp.out.extend(f);
                    continue;
                }
                let mut spec = rc_spec(qp, opcode, psn);
                if seg != Seg::Middle {
                    spec.aeth = Some(Aeth::new(wire::AETH_ACK_UNLIMITED, qp.msn));
                }
                tx.emit(ctx, &mut spec, &payload);
                *ctx.scratch = payload;
                ctx.c.read_resp_sent += 1;
                sent += 1;
                if last {
                    qp.out.pop_front();
                } else if let Some(RespItem::Read { psn: p, va: v, remaining: r, first: f, .. }) = qp.out.front_mut() {
                    *p = wire::psn_add(*p, 1);
                    *v = v.wrapping_add(n);
                    *r -= n;
                    *f = false;
                }
            }
        }
    }
    sent
}
