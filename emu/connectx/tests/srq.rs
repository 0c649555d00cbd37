//! Shared receive queues (RMP) and many QPs on one CQ, driven through commands and doorbells:
//! RC QPs of the adapter take their receives from one RMP with fewer WQEs than connections ×
//! messages (the peer retries on RNR NAK while the owner reposts), the limit event fires once
//! per arming, an RMP in error reports itself and its QPs, and a CQ too small for the QPs that
//! share it raises the CQ error event. The peer is a bare RoCE engine on the other end of the link.
use crate::common;
use common::*;
use emu_connectx::consts::{event, op, qp, rmp_state, rq_type};
use emu_connectx::datapath::cqe_op;
use emu_connectx::*;
use emu_roce::{
    Access, Engine, Extent, Gather, KeyError, KeyRef, Keys, MemError, Memory, MemLink, PortConfig, QpAttrs, QpState,
    QpType, Qpn, Rkey, SendOp, SendWr, WcStatus,
};
use hal::{DmaRegion, Hal};
use mlx5_ifc::ifc as l;
use mlx5_ifc::layout::{get, set};

const MAC_A: [u8; 6] = [0x02, 0x00, 0x5e, 0x10, 0x00, 0x01];
const MAC_PEER: [u8; 6] = [0x02, 0x00, 0x5e, 0x10, 0x00, 0x02];
const IP_PEER: [u8; 4] = [10, 0, 0, 2];
/// Log2 of the RMP WQE size: next segment + one data segment.
const LOG_STRIDE: u8 = 5;
/// Receive buffer per WQE.
const SLOT: u64 = 256;

/// The peer moves only inline SENDs: no memory, no keys.
struct NoMem;
impl Memory for NoMem {
    fn read(&mut self, pa: u64, _: &mut [u8]) -> Result<(), MemError> {
        Err(MemError { pa, len: 0 })
    }
    fn write(&mut self, pa: u64, _: &[u8]) -> Result<(), MemError> {
        Err(MemError { pa, len: 0 })
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

/// The RMP as software keeps it (the way Linux mlx5_ib does): WQEs linked in a ring, `head` the
/// next free WQE to post, `tail` the last; software never posts the tail, so one WQE stays back.
struct Rmp {
    rmpn: u32,
    buf: SimDma,
    dbr: SimDma,
    size: u16,
    head: u16,
    tail: u16,
    counter: u16,
}

impl Rmp {
    fn next_of(&self, i: u16) -> u16 {
        let mut b = [0u8; 2];
        self.buf.read(((i as usize) << LOG_STRIDE) + 2, &mut b);
        u16::from_be_bytes(b)
    }
    fn set_next(&self, i: u16, next: u16) {
        self.buf.write(((i as usize) << LOG_STRIDE) + 2, &next.to_be_bytes());
    }
    /// Post one receive of `len` bytes at `addr`; false when every WQE is posted.
    fn post(&mut self, lkey: u32, addr: u64, len: u32) -> bool {
        if self.head == self.tail {
            return false;
        }
        let off = ((self.head as usize) << LOG_STRIDE) + 16;
        self.buf.write_be32(off, len);
        self.buf.write_be32(off + 4, lkey);
        self.buf.write_be64(off + 8, addr);
        self.head = self.next_of(self.head);
        self.counter = self.counter.wrapping_add(1);
        self.dbr.write_be32(0, self.counter as u32);
        true
    }
    /// WQE `i` completed: link it after the tail.
    fn free(&mut self, i: u16) {
        self.set_next(self.tail, i);
        self.tail = i;
    }
}

fn create_rmp(r: &mut Rig, pd: u32, log: u8, lwm: u16) -> Result<Rmp, (u8, u32)> {
    let bytes = (1usize << log) << LOG_STRIDE;
    let buf = r.hal.dma_alloc(bytes.max(4096), 4096).unwrap();
    let dbr = r.hal.dma_alloc(64, 64).unwrap();
    // u32: the oversize case (log 16) must not overflow here; the adapter refuses it.
    let size = 1u32 << log;
    let mut rmp = Rmp { rmpn: 0, buf, dbr, size: size.min(u16::MAX as u32) as u16, head: 0, tail: (size - 1) as u16, counter: 0 };
    for i in 0..size {
        rmp.set_next(i as u16, ((i + 1) % size) as u16);
    }
    let np = bytes.div_ceil(4096);
    let mut i = inp(op::CREATE_RMP, 0, l::create_rmp_in::SIZE + 8 * np);
    let c = l::create_rmp_in::ctx;
    let w = |f: mlx5_ifc::layout::Field| f.at(l::rmpc::wq).at(c);
    set(&mut i, l::rmpc::state.at(c), rmp_state::RDY as u64);
    set(&mut i, w(l::wq::pd), pd as u64);
    set(&mut i, w(l::wq::dbr_addr), rmp.dbr.paddr());
    set(&mut i, w(l::wq::log_wq_stride), LOG_STRIDE as u64);
    set(&mut i, w(l::wq::log_wq_sz), log as u64);
    set(&mut i, w(l::wq::lwm), lwm as u64);
    for k in 0..np {
        let at = l::create_rmp_in::SIZE + 8 * k;
        i[at..at + 8].copy_from_slice(&(rmp.buf.paddr() + 4096 * k as u64).to_be_bytes());
    }
    let d = r.cmd(&i, 16);
    if d.status != 0 {
        return Err((d.status, d.syndrome));
    }
    rmp.rmpn = get(&d.out, l::create_rmp_out::rmpn) as u32;
    Ok(rmp)
}

fn modify_rmp(r: &mut Rig, rmpn: u32, cur: u8, to: u8, lwm: Option<u16>) -> Done {
    let mut i = inp(op::MODIFY_RMP, 0, l::modify_rmp_in::SIZE);
    set(&mut i, l::modify_rmp_in::rmpn, rmpn as u64);
    set(&mut i, l::modify_rmp_in::rmp_state, cur as u64);
    set(&mut i, l::rmpc::state.at(l::modify_rmp_in::ctx), to as u64);
    if let Some(v) = lwm {
        set(&mut i, l::rmp_bitmask::lwm.at(l::modify_rmp_in::bitmask), 1);
        set(&mut i, l::wq::lwm.at(l::rmpc::wq).at(l::modify_rmp_in::ctx), v as u64);
    }
    r.cmd(&i, 16)
}

fn query_rmp(r: &mut Rig, rmpn: u32) -> (u8, u16) {
    let mut i = inp(op::QUERY_RMP, 0, 16);
    set(&mut i, l::query_rmp_in::rmpn, rmpn as u64);
    let o = r.ok(&i, l::query_rmp_out::SIZE);
    let c = l::query_rmp_out::rmp_context;
    (get(&o, l::rmpc::state.at(c)) as u8, get(&o, l::wq::lwm.at(l::rmpc::wq).at(c)) as u16)
}

/// CREATE_QP for an RC QP whose receives come from `rmpn` (no RQ of its own; SQ of 64 WQEBBs).
fn create_srq_qp(r: &mut Rig, u: &Up, cq: u32, rmpn: u32, bufs: &mut Vec<SimDma>) -> Done {
    let buf = r.hal.dma_alloc(4096, 4096).unwrap();
    let dbr = r.hal.dma_alloc(64, 64).unwrap();
    let mut i = inp(op::CREATE_QP, 0, 0x110 + 8);
    let c = &mut i[0x18..0x18 + l::qpc::SIZE];
    set(c, l::qpc::st, qp::ST_RC as u64);
    set(c, l::qpc::pm_state, 3);
    set(c, l::qpc::pd, u.pd as u64);
    set(c, l::qpc::uar_page, u.uar as u64);
    set(c, l::qpc::rq_type, rq_type::SRQ as u64);
    set(c, l::qpc::srqn_rmpn_xrqn, rmpn as u64);
    set(c, l::qpc::log_sq_size, 6);
    set(c, l::qpc::cqn_snd, cq as u64);
    set(c, l::qpc::cqn_rcv, cq as u64);
    set(c, l::qpc::dbr_addr, dbr.paddr());
    set(&mut i, l::create_qp_in::pas, buf.paddr());
    bufs.push(buf);
    bufs.push(dbr);
    r.cmd(&i, 16)
}

/// RST -> INIT -> RTR -> RTS towards the peer's QP `peer_qpn`, PSNs 0, RNR timer code 1 (10 µs).
fn connect(r: &mut Rig, qpn: u32, peer_qpn: u32) {
    let d = modify(r, op::RST2INIT_QP, qpn, |c| {
        set(c, l::qpc::rwe, 1);
        set(c, path(l::ads::vhca_port_num), 1);
    });
    assert_eq!(d.status, 0, "{d:?}");
    let d = modify(r, op::INIT2RTR_QP, qpn, |c| {
        set(c, l::qpc::mtu, 3);
        set(c, l::qpc::log_msg_max, 30);
        set(c, l::qpc::remote_qpn, peer_qpn as u64);
        set(c, l::qpc::min_rnr_nak, 1);
        let rg = path(l::ads::rgid_rip).byte();
        c[rg + 10] = 0xff;
        c[rg + 11] = 0xff;
        c[rg + 12..rg + 16].copy_from_slice(&IP_PEER);
        set(c, path(l::ads::hop_limit), 64);
        set(c, path(l::ads::udp_sport), 0xc001);
        set(c, path(l::ads::rmac_47_32), u16::from_be_bytes([MAC_PEER[0], MAC_PEER[1]]) as u64);
        set(c, path(l::ads::rmac_31_0), u32::from_be_bytes([MAC_PEER[2], MAC_PEER[3], MAC_PEER[4], MAC_PEER[5]]) as u64);
    });
    assert_eq!(d.status, 0, "{d:?}");
    let d = modify(r, op::RTR2RTS_QP, qpn, |c| {
        set(c, l::qpc::retry_count, 7);
        set(c, l::qpc::rnr_retry, 7);
        set(c, path(l::ads::ack_timeout), 14);
    });
    assert_eq!(d.status, 0, "{d:?}");
}

/// The peer: one RC QP per adapter QP, retrying RNR NAKs forever.
struct PeerEngine {
    eng: Engine,
    link: MemLink,
}

impl PeerEngine {
    fn new(link: MemLink, pairs: &[(u32, u32)]) -> Self {
        let mut eng = Engine::new(PortConfig { mac: MAC_PEER, ip: IP_PEER, ..PortConfig::default() });
        for &(mine, theirs) in pairs {
            let q = Qpn(mine);
            eng.create_qp(q, QpType::Rc).unwrap();
            let a = QpAttrs {
                access: Access::ALL,
                remote_qpn: Qpn(theirs),
                remote_ip: [10, 0, 0, 1],
                remote_mac: MAC_A,
                rnr_retry: 7,
                retry_cnt: 7,
                ..QpAttrs::default()
            };
            eng.modify_qp(q, QpState::Init, &a).unwrap();
            eng.modify_qp(q, QpState::Rtr, &a).unwrap();
            eng.modify_qp(q, QpState::Rts, &a).unwrap();
        }
        PeerEngine { eng, link }
    }
    fn send(&mut self, qpn: u32, wr_id: u64, payload: Vec<u8>) {
        let wr = SendWr { wr_id, op: SendOp::Send, data: Gather::Inline(payload), signaled: true, solicited: false, fence: false, ud: None };
        self.eng.post_send(Qpn(qpn), wr).unwrap();
    }
    fn poll(&mut self, now: u64) -> Vec<emu_roce::Completion> {
        self.eng.poll(now, &mut self.link, &mut NoMem, &mut NoMem);
        let mut v = Vec::new();
        while let Some(c) = self.eng.pop_completion() {
            v.push(c);
        }
        v
    }
}

/// CQ consumer over a buffer from `create_cq` (owner bit per pass).
struct CqReader {
    buf: SimDma,
    dbr: SimDma,
    log: u8,
    ci: u32,
}

impl CqReader {
    fn next(&mut self) -> Option<[u8; 64]> {
        let n = 1u32 << self.log;
        let mut c = [0u8; 64];
        self.buf.read((self.ci & (n - 1)) as usize * 64, &mut c);
        let op_own = c[0x3f];
        if op_own >> 4 == 0xf || (op_own & 1) as u32 != (self.ci >> self.log) & 1 {
            return None;
        }
        self.ci += 1;
        self.dbr.write_be32(0, self.ci & 0xff_ffff);
        Some(c)
    }
}

/// EQ consumer over a buffer from `create_eq`: (type, qp_srq_n or cqn) of each new EQE.
struct EqReader {
    buf: SimDma,
    log: u8,
    ci: u32,
}

impl EqReader {
    fn drain(&mut self) -> Vec<(u8, u32)> {
        let mut v = Vec::new();
        loop {
            let n = 1u32 << self.log;
            let mut e = [0u8; 64];
            self.buf.read((self.ci & (n - 1)) as usize * 64, &mut e);
            if (e[0x3f] & 1) as u32 != (self.ci >> self.log) & 1 {
                return v;
            }
            self.ci += 1;
            let ty = get(&e, l::eqe::r#type) as u8;
            let id = match ty {
                event::CQ_ERROR => get(&e, l::eqe_cq_err::cqn.at(l::eqe::cq_err)),
                _ => get(&e, l::eqe_qp_srq::qp_srq_n.at(l::eqe::qp_srq)),
            };
            v.push((ty, id as u32));
        }
    }
}

fn be32(c: &[u8], o: usize) -> u32 {
    u32::from_be_bytes(c[o..o + 4].try_into().unwrap())
}

/// The adapter under test with an EQ for the SRQ events, one CQ for all its QPs, an RMP and
/// `nqp` RC QPs on it, each connected to a peer QP.
struct Bench {
    r: Rig,
    u: Up,
    srq_eq: EqReader,
    cq: u32,
    cqr: CqReader,
    rmp: Rmp,
    qps: Vec<u32>,
    peer: PeerEngine,
    rx: SimDma,
    lkey: u32,
    _bufs: Vec<SimDma>,
}

const PEER_QPN0: u32 = 0x500;

fn bench(nqp: usize, log_rmp: u8, log_cq: u8) -> Bench {
    let mut r = Rig::new();
    let u = bring_up(&mut r);
    let mask = (1u64 << event::SRQ_RQ_LIMIT) | (1 << event::SRQ_CATAS_ERROR) | (1 << event::SRQ_LAST_WQE);
    let (_eqn, eq_buf) = create_eq(&mut r, u.uar, mask, 5);
    let (cq, cq_buf, cq_dbr) = create_cq(&mut r, u.uar, u.eqn, log_cq);
    let rmp = create_rmp(&mut r, u.pd, log_rmp, 0).expect("CREATE_RMP");
    let mut bufs = Vec::new();
    let mut qps = Vec::new();
    for k in 0..nqp {
        let d = create_srq_qp(&mut r, &u, cq, rmp.rmpn, &mut bufs);
        assert_eq!(d.status, 0, "{d:?}");
        let qpn = get(&d.out, l::create_qp_out::qpn) as u32;
        connect(&mut r, qpn, PEER_QPN0 + k as u32);
        qps.push(qpn);
    }
    let (la, lb) = MemLink::pair(Default::default(), 3);
    r.cx.attach_link(Box::new(la));
    let pairs: Vec<(u32, u32)> = qps.iter().enumerate().map(|(k, &q)| (PEER_QPN0 + k as u32, q)).collect();
    let peer = PeerEngine::new(lb, &pairs);
    let rx = r.hal.dma_alloc(SLOT as usize * rmp.size as usize, 4096).unwrap();
    let lkey = (u.mkey_pa << 8) | 0x42;
    Bench {
        r,
        u,
        srq_eq: EqReader { buf: eq_buf, log: 5, ci: 0 },
        cq,
        cqr: CqReader { buf: cq_buf, dbr: cq_dbr, log: log_cq, ci: 0 },
        rmp,
        qps,
        peer,
        rx,
        lkey,
        _bufs: bufs,
    }
}

impl Bench {
    /// Post one receive into WQE slot `head` (its buffer is slot-indexed).
    fn post(&mut self) -> bool {
        let addr = self.rx.paddr() + SLOT * self.rmp.head as u64;
        self.rmp.post(self.lkey, addr, SLOT as u32)
    }
    fn fill(&mut self, n: usize) {
        for _ in 0..n {
            assert!(self.post());
        }
    }
    fn now(&self) -> u64 {
        self.r.cx.device().clock.now_ns()
    }
    fn step(&mut self) -> Vec<emu_roce::Completion> {
        self.r.hal.relax();
        self.r.cx.poll();
        let now = self.now();
        self.peer.poll(now)
    }
    fn rnr_naks(&self) -> u64 {
        self.r.cx.device().engine.as_ref().unwrap().counters().rnr_nak_sent
    }
}

#[test]
fn rmp_commands_check_their_inputs_and_objects() {
    let mut r = Rig::new();
    let u = bring_up(&mut r);
    // Size over the cap, lwm not below the size, unknown PD.
    assert_eq!(create_rmp(&mut r, u.pd, 16, 0).err().map(|e| e.0), Some(0x03));
    assert_eq!(create_rmp(&mut r, u.pd, 3, 8).err().map(|e| e.0), Some(0x03));
    assert_eq!(create_rmp(&mut r, u.pd + 77, 3, 0).err().map(|e| e.0), Some(0x05));
    let rmp = create_rmp(&mut r, u.pd, 3, 2).expect("CREATE_RMP");
    assert_eq!(r.cx.counters().rmps, 1);
    assert_eq!(query_rmp(&mut r, rmp.rmpn), (rmp_state::RDY, 2));
    // MODIFY_RMP: wrong current state, lwm too large, then a good re-arm.
    assert_eq!(modify_rmp(&mut r, rmp.rmpn, rmp_state::ERR, rmp_state::RDY, Some(1)).status, 0x09);
    assert_eq!(modify_rmp(&mut r, rmp.rmpn, rmp_state::RDY, rmp_state::RDY, Some(8)).status, 0x03);
    assert_eq!(modify_rmp(&mut r, rmp.rmpn, rmp_state::RDY, rmp_state::RDY, Some(5)).status, 0);
    assert_eq!(query_rmp(&mut r, rmp.rmpn), (rmp_state::RDY, 5));
    // A QP on an RMP that does not exist; one on ours; the RMP is busy while it lives.
    let mut bufs = Vec::new();
    assert_eq!(create_srq_qp(&mut r, &u, u.cq, rmp.rmpn + 100, &mut bufs).status, 0x05);
    let d = create_srq_qp(&mut r, &u, u.cq, rmp.rmpn, &mut bufs);
    assert_eq!(d.status, 0, "{d:?}");
    let qpn = get(&d.out, l::create_qp_out::qpn) as u32;
    let mut i = inp(op::DESTROY_RMP, 0, 16);
    set(&mut i, l::destroy_rmp_in::rmpn, rmp.rmpn as u64);
    assert_eq!(r.cmd(&i, 16).status, 0x06, "RMP in use");
    destroy(&mut r, op::DESTROY_QP, qpn);
    r.ok(&i, 16);
    assert_eq!(r.cmd(&i, 16).status, 0x05, "already gone");
    assert_eq!(r.cx.counters().rmps, 0);
    tear_down(&mut r, u);
    assert_eq!(r.cx.counters().objects_abandoned, 0);
}

/// 6 connections, 8-WQE RMP (7 postable), 4 messages each = 24 receives: the peers are held back
/// by RNR NAKs until the owner reposts; every receive completes on the one CQ, named by its QP,
/// with the WQE index that took it and the right bytes.
#[test]
fn more_connections_than_rmp_buffers_complete_through_rnr_retry_and_reposts() {
    let (nqp, per) = (6usize, 4usize);
    let mut b = bench(nqp, 3, 6);
    b.fill(3); // fewer than the connections
    for k in 0..nqp {
        for m in 0..per {
            b.peer.send(PEER_QPN0 + k as u32, m as u64, vec![(k * 16 + m) as u8; 100 + k]);
        }
    }
    let mut got: Vec<Vec<u8>> = vec![Vec::new(); nqp];
    let mut sent_ok = 0;
    for _ in 0..200_000 {
        for c in b.step() {
            assert_eq!(c.status, WcStatus::Success, "{c:?}");
            sent_ok += 1;
        }
        while let Some(c) = b.cqr.next() {
            assert_eq!(c[0x3f] >> 4, cqe_op::RESP_SEND, "receive CQE");
            let qpn = be32(&c, 0x38) & 0xff_ffff;
            let k = b.qps.iter().position(|&q| q == qpn).expect("CQE names one of the QPs");
            let wqe = u16::from_be_bytes([c[0x3c], c[0x3d]]);
            assert!(wqe < b.rmp.size);
            let len = be32(&c, 0x2c) as usize;
            assert_eq!(len, 100 + k);
            let mut data = vec![0u8; len];
            b.rx.read(SLOT as usize * wqe as usize, &mut data);
            let m = got[k].len();
            assert!(data.iter().all(|&x| x == (k * 16 + m) as u8), "QP {k} message {m} in order");
            got[k].push(m as u8);
            b.rmp.free(wqe);
            assert!(b.post());
        }
        if sent_ok == nqp * per && got.iter().all(|g| g.len() == per) {
            break;
        }
    }
    assert_eq!(sent_ok, nqp * per, "every peer SEND acknowledged");
    assert!(got.iter().all(|g| g.len() == per), "{got:?}");
    assert!(b.rnr_naks() > 0, "the RMP ran dry and the adapter answered RNR NAK");
    let ctr = b.r.cx.counters();
    assert_eq!(ctr.cq_overruns, 0);
    assert!(ctr.recv_wqes >= (nqp * per) as u64);
}

/// Limit 3 on an RMP holding 7: no event while 3 or more remain, one event when fewer do, none
/// after (disarmed, QUERY_RMP reads lwm 0), one more after re-arming.
#[test]
fn limit_event_fires_once_per_arming() {
    let mut b = bench(2, 3, 6);
    b.fill(7);
    assert_eq!(modify_rmp(&mut b.r, b.rmp.rmpn, rmp_state::RDY, rmp_state::RDY, Some(3)).status, 0);
    let mut received = 0;
    let mut deliver = |b: &mut Bench, n: usize| {
        for _ in 0..n {
            b.peer.send(PEER_QPN0 + (received % 2) as u32, received as u64, vec![7; 32]);
            received += 1;
        }
        let want = received;
        let mut seen = 0;
        for _ in 0..10_000 {
            b.step();
            while b.cqr.next().is_some() {
                seen += 1;
            }
            if b.cqr.ci as usize == want {
                break;
            }
        }
        let _ = seen;
        assert_eq!(b.cqr.ci as usize, want, "receives completed");
        b.srq_eq.drain()
    };
    assert!(deliver(&mut b, 4).is_empty(), "3 left: not below the limit");
    assert_eq!(deliver(&mut b, 1), vec![(event::SRQ_RQ_LIMIT, b.rmp.rmpn)], "2 left: one event");
    assert_eq!(query_rmp(&mut b.r, b.rmp.rmpn).1, 0, "disarmed");
    assert!(deliver(&mut b, 1).is_empty(), "disarmed: no second event");
    // Re-arm at 1 with 1 left: the next receive takes it below.
    assert_eq!(modify_rmp(&mut b.r, b.rmp.rmpn, rmp_state::RDY, rmp_state::RDY, Some(1)).status, 0);
    assert!(b.srq_eq.drain().is_empty(), "arming alone raises nothing");
    assert_eq!(deliver(&mut b, 1), vec![(event::SRQ_RQ_LIMIT, b.rmp.rmpn)]);
    assert_eq!(b.r.cx.counters().srq_limit_events, 2);
}

/// A WQE whose next_wqe_index leaves the queue puts the RMP in error: SRQ_CATAS_ERROR names it,
/// every QP on it goes to ERROR with SRQ_LAST_WQE, and QUERY_RMP reads ERR.
#[test]
fn broken_wqe_list_puts_the_rmp_and_its_qps_in_error() {
    let mut b = bench(3, 3, 6);
    b.rmp.set_next(0, 0x7777);
    b.fill(1);
    b.step();
    let ev = b.srq_eq.drain();
    assert_eq!(ev[0], (event::SRQ_CATAS_ERROR, b.rmp.rmpn), "{ev:?}");
    let last: Vec<u32> = ev.iter().filter(|e| e.0 == event::SRQ_LAST_WQE).map(|e| e.1).collect();
    assert_eq!(last, b.qps, "SRQ_LAST_WQE for every attached QP");
    assert_eq!(query_rmp(&mut b.r, b.rmp.rmpn).0, rmp_state::ERR);
    for &q in &b.qps {
        let mut i = inp(op::QUERY_QP, 0, 16);
        set(&mut i, l::query_qp_in::qpn, q as u64);
        let o = b.r.ok(&i, 0x110);
        assert_eq!(get(&o[0x18..], l::qpc::state) as u8, qp::ERR);
    }
    assert_eq!(b.r.cx.counters().srq_errors, 1);
    // An RMP in error stays there.
    assert_eq!(modify_rmp(&mut b.r, b.rmp.rmpn, rmp_state::ERR, rmp_state::RDY, None).status, 0x09);
}

/// Four QPs completing to one 4-entry CQ that nobody drains: the fifth CQE overruns it and the
/// CQ error event (syndrome overrun) names the CQ.
#[test]
fn shared_cq_overrun_raises_the_cq_error_event() {
    let mut b = bench(4, 3, 2);
    b.fill(7);
    for k in 0..4u32 {
        b.peer.send(PEER_QPN0 + k, 0, vec![1; 8]);
        b.peer.send(PEER_QPN0 + k, 1, vec![2; 8]);
    }
    for _ in 0..2_000 {
        b.step();
        if b.r.cx.counters().cq_overruns > 0 {
            break;
        }
    }
    assert_eq!(b.r.cx.counters().cq_overruns, 1);
    let cq = b.cq;
    let mut main_eq = EqReader { buf: b.u.eq_buf, log: LOG_EQ, ci: 0 };
    let ev = main_eq.drain();
    assert!(ev.contains(&(event::CQ_ERROR, cq)), "{ev:?}");
}

/// A QP on an RMP moved to ERROR by command gets SRQ_LAST_WQE once (not again while it stays in
/// ERROR; again after RESET and a new error); the other QPs on the RMP are untouched.
#[test]
fn qp_on_an_rmp_moved_to_error_gets_last_wqe_reached_once() {
    let mut b = bench(2, 3, 6);
    let (q0, q1) = (b.qps[0], b.qps[1]);
    assert_eq!(modify(&mut b.r, op::QP_2ERR, q0, |_| {}).status, 0);
    assert_eq!(b.srq_eq.drain(), vec![(event::SRQ_LAST_WQE, q0)]);
    assert_eq!(modify(&mut b.r, op::QP_2ERR, q0, |_| {}).status, 0);
    b.step();
    assert!(b.srq_eq.drain().is_empty(), "once per error");
    assert_eq!(modify(&mut b.r, op::QP_2RST, q0, |_| {}).status, 0);
    assert_eq!(modify(&mut b.r, op::QP_2ERR, q0, |_| {}).status, 0);
    assert_eq!(b.srq_eq.drain(), vec![(event::SRQ_LAST_WQE, q0)]);
    // The other connection still receives from the RMP.
    b.fill(1);
    b.peer.send(PEER_QPN0 + 1, 0, vec![3; 8]);
    for _ in 0..1_000 {
        b.step();
        if let Some(c) = b.cqr.next() {
            assert_eq!(be32(&c, 0x38) & 0xff_ffff, q1);
            assert_eq!(c[0x3f] >> 4, cqe_op::RESP_SEND);
            return;
        }
    }
    panic!("no receive on the QP that stayed up");
}
