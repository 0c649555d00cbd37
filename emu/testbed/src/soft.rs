//! soft: an in-memory `rdma::Verbs` test double: devices joined by a fabric queue.
//!
//! This is NOT the product's RDMA engine (that is the emulated ConnectX + its RoCE engine).
//! It models verbs *semantics* at message granularity, enough to test CM and apps:
//!
//! - RC QPs: SEND (with immediate / with invalidate), RDMA WRITE (with immediate), RDMA READ.
//!   Remote key, access-right and bounds checks end in a NAK: the requester gets an error
//!   completion (`RemoteAccess`, `RemoteInvalidRequest`, `RemoteOperation`) and its QP goes
//!   to ERROR (later WRs flushed); the responder QP keeps serving. A request to a QP that
//!   does not exist / is not connected to the sender completes with `RetryExceeded` (what a
//!   real requester sees after its retries). A SEND with no posted receive waits until one
//!   is posted (infinite RNR retry). Send completions come only after the responder
//!   processed the request (i.e. after the "ACK"). A fenced WR (`SendWr::fence`) and the WRs
//!   after it are held until no RDMA READ of the QP is waiting for its response.
//! - UD on QP1 (GSI): 256-byte-ish MADs, Q_Key must be 0x80010000, receive buffers get the
//!   40-byte GRH area first (20 zero bytes + an IPv4 header with the source/dest address),
//!   as rxe delivers them. No receive posted → the datagram is dropped (counted).
//! - A fabric-wide UD filter lets tests drop chosen datagrams (lost MAD tests).
//!
//! Nothing moves until a device is polled: `poll()` or `poll_cq()` processes that device's
//! inbox. The fabric, every buffer and each device's state sit behind a lock each
//! (`Arc<Mutex<..>>`, as the emulated ConnectX's stand-in hardware is), so devices, their poll
//! groups' data paths ([`SoftPath`]) and buffers are `Send`.
//!
//! Usage (the same code runs in tests/soft_verbs.rs):
//! ```text
//! use testbed::soft::SoftFabric;
//! use rdma::Verbs;
//! let fabric = SoftFabric::new();
//! let mut a = fabric.add_device([10, 0, 0, 1]);
//! let mut b = fabric.add_device([10, 0, 0, 2]);
//! let cq = a.create_cq(64).unwrap();
//! let qp = a.create_rc_qp(cq, cq, 16, 16).unwrap();
//! assert_eq!(a.resolve_mac([10, 0, 0, 2]), Some(b.local_mac()));
//! ```
//! Leak checks: [`SoftDevice::resources`] counts live QPs (besides QP1), CQs, MRs and buffers.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};

use crate::locked;

use hal::{DmaRegion, PhysAddr};
use rdma::*;

mod device;
mod srq;
mod verbs;
pub use device::{SoftDevice, SoftPath};
use srq::SoftSrq;

/// Q_Key of the GSI QP (IBA; rxe `GSI_QKEY`).
pub const GSI_QKEY: u32 = 0x8001_0000;
/// Size of the GRH area in front of every UD receive.
pub const GRH_LEN: usize = 40;

/// Errors of the soft device (the `VerbsError::Error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SoftError {
    NoSuchQp(Qpn),
    NoSuchCq(Cqn),
    NoSuchKey(u32),
    /// The operation is not allowed in the QP's state or type.
    BadState(Qpn),
    /// Work queue full.
    QueueFull(Qpn),
    /// A local SGE is outside its registration or the key is wrong.
    LocalProtection,
    /// The CQ still has QPs attached.
    Busy,
    InvalidArgument,
}

/// A predicate over UD datagrams in flight: `(src_ip, dst_ip, payload) -> deliver?`.
pub type UdFilter = Box<dyn FnMut(Ipv4, Ipv4, &[u8]) -> bool + Send>;

/// Fabric counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FabricStats {
    pub ud_sent: u64,
    pub ud_filtered: u64,
    pub rc_packets: u64,
}

enum RcOp {
    Send { data: Vec<u8>, imm: Option<u32>, inv: Option<Rkey> },
    Write { addr: u64, rkey: Rkey, data: Vec<u8>, imm: Option<u32> },
    Read { addr: u64, rkey: Rkey, len: u32 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Nak {
    InvalidRequest,
    RemoteAccess,
    RemoteOperation,
    /// No such QP / wrong peer: the requester would time out.
    NoResponder,
}

enum Packet {
    Ud { src_ip: Ipv4, src_qpn: Qpn, dst_qpn: Qpn, qkey: u32, data: Vec<u8> },
    RcReq { src_ip: Ipv4, src_qpn: Qpn, dst_qpn: Qpn, id: u64, op: RcOp },
    RcResp { dst_qpn: Qpn, id: u64, result: Result<Vec<u8>, Nak> },
}

struct FabricInner {
    nodes: Vec<(Ipv4, Mac)>,
    /// Addresses whose next lookups fail as if ARP had not answered yet (lookups left).
    unresolved: Vec<(Ipv4, u32)>,
    inbox: BTreeMap<Ipv4, VecDeque<Packet>>,
    filter: Option<UdFilter>,
    stats: FabricStats,
}

/// The "network": a set of soft devices addressed by IPv4.
#[derive(Clone)]
pub struct SoftFabric {
    inner: Arc<Mutex<FabricInner>>,
}

impl Default for SoftFabric {
    fn default() -> Self {
        Self::new()
    }
}

impl SoftFabric {
    pub fn new() -> Self {
        SoftFabric {
            inner: Arc::new(Mutex::new(FabricInner {
                nodes: Vec::new(),
                unresolved: Vec::new(),
                inbox: BTreeMap::new(),
                filter: None,
                stats: FabricStats::default(),
            })),
        }
    }

    /// Attach a new device with address `ip` (MAC 02:00:ip). QP1 and its CQ exist already.
    pub fn add_device(&self, ip: Ipv4) -> SoftDevice {
        let mac = [0x02, 0x00, ip[0], ip[1], ip[2], ip[3]];
        {
            let mut f = locked(&self.inner);
            f.nodes.push((ip, mac));
            f.inbox.entry(ip).or_default();
        }
        let mut d = SoftState {
            fabric: self.clone(),
            ip,
            mac,
            mem: BTreeMap::new(),
            next_paddr: 0x10_0000,
            mrs: BTreeMap::new(),
            next_mr: 1,
            next_variant: 0,
            cqs: BTreeMap::new(),
            next_cqn: 1,
            qps: BTreeMap::new(),
            next_qpn: 0x11,
            gsi_cq: Cqn(0),
            ud_dropped: 0,
            doorbells: 0,
            srqs: BTreeMap::new(),
            next_srqn: 1,
        };
        let cq = d.create_cq(1024).expect("fresh device");
        d.gsi_cq = cq;
        d.qps.insert(1, Qp::new(QpKind::Ud, cq, cq, 1024, 1024));
        d.qps.get_mut(&1).expect("just inserted").state = QpState::Rts;
        SoftDevice::new(d)
    }

    /// The next `lookups` resolutions of `ip` (by any device) fail, as on a fabric where
    /// the neighbour is not in the table yet and its ARP answer is still on the way.
    pub fn delay_resolution(&self, ip: Ipv4, lookups: u32) {
        let mut f = locked(&self.inner);
        f.unresolved.retain(|(i, _)| *i != ip);
        f.unresolved.push((ip, lookups));
    }

    /// The MAC of `ip` if it is a device on the fabric and not held back by
    /// [`SoftFabric::delay_resolution`].
    pub(crate) fn resolve(&self, ip: Ipv4) -> Option<Mac> {
        let mut f = locked(&self.inner);
        if let Some((_, left)) = f.unresolved.iter_mut().find(|(i, n)| *i == ip && *n > 0) {
            *left -= 1;
            return None;
        }
        f.nodes.iter().find(|(i, _)| *i == ip).map(|(_, m)| *m)
    }

    /// Install (or clear) the UD filter; datagrams it returns `false` for are lost.
    pub fn set_ud_filter(&self, f: Option<UdFilter>) {
        locked(&self.inner).filter = f;
    }

    /// Put a hand-made UD datagram on the wire (e.g. a MAD captured from Linux), as if
    /// `src_ip`/`src_qpn` had sent it. Delivered when `dst_ip` polls.
    pub fn inject_ud(&self, src_ip: Ipv4, src_qpn: Qpn, dst_ip: Ipv4, dst_qpn: Qpn, qkey: u32, payload: &[u8]) -> bool {
        self.push(dst_ip, Packet::Ud { src_ip, src_qpn, dst_qpn, qkey, data: payload.to_vec() })
    }

    pub fn stats(&self) -> FabricStats {
        locked(&self.inner).stats
    }

    fn push(&self, dst: Ipv4, p: Packet) -> bool {
        let mut f = locked(&self.inner);
        match f.inbox.get_mut(&dst) {
            Some(q) => {
                q.push_back(p);
                true
            }
            None => false,
        }
    }
}

/// A DMA buffer of a soft device.
pub struct SoftBuf {
    paddr: PhysAddr,
    data: Arc<Mutex<Vec<u8>>>,
}

impl DmaRegion for SoftBuf {
    fn paddr(&self) -> PhysAddr {
        self.paddr
    }
    fn len(&self) -> usize {
        locked(&self.data).len()
    }
    fn read(&self, offset: usize, buf: &mut [u8]) {
        buf.copy_from_slice(&locked(&self.data)[offset..offset + buf.len()]);
    }
    fn write(&self, offset: usize, data: &[u8]) {
        locked(&self.data)[offset..offset + data.len()].copy_from_slice(data);
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum QpKind {
    Rc,
    Ud,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum QpState {
    Reset,
    Rts,
    Error,
}

struct Outstanding {
    id: u64,
    wr_id: u64,
    signaled: bool,
    opcode: WcOpcode,
    /// READ: where the response data lands.
    local: Sge,
    len: u32,
}

struct Qp {
    kind: QpKind,
    state: QpState,
    send_cq: Cqn,
    recv_cq: Cqn,
    sq_cap: u32,
    rq_cap: u32,
    rq: VecDeque<RecvWr>,
    outstanding: VecDeque<Outstanding>,
    attrs: RcConnectAttrs,
    next_id: u64,
    /// Incoming requests waiting for a receive WR (RNR), in order.
    parked: VecDeque<Packet>,
    /// Send WRs written with `post_send_deferred`, not yet rung.
    deferred: VecDeque<SendWr>,
    /// Rung send WRs held behind a fenced one (the first) while a READ is outstanding, in order.
    fenced: VecDeque<SendWr>,
    /// The SRQ this QP takes its receives from instead of `rq`.
    srq: Option<u32>,
}

impl Qp {
    /// Whether an RDMA READ of this QP is waiting for its response (what a fence waits for).
    fn read_outstanding(&self) -> bool {
        self.outstanding.iter().any(|o| o.opcode == WcOpcode::RdmaRead)
    }

    fn new(kind: QpKind, send_cq: Cqn, recv_cq: Cqn, sq: u32, rq: u32) -> Self {
        Qp {
            kind,
            state: QpState::Reset,
            send_cq,
            recv_cq,
            sq_cap: sq,
            rq_cap: rq,
            rq: VecDeque::new(),
            outstanding: VecDeque::new(),
            attrs: RcConnectAttrs::default(),
            next_id: 0,
            parked: VecDeque::new(),
            deferred: VecDeque::new(),
            fenced: VecDeque::new(),
            srq: None,
        }
    }
}

/// A registration, stored under its index (key >> 8); the key's low byte is its variant.
struct Mr {
    key: u32,
    addr: u64,
    len: u64,
    access: Access,
    /// Cleared by SEND WITH INVALIDATE / LOCAL_INV: no access afterwards (until a fast
    /// registration validates the key again).
    remote_valid: bool,
    /// Fast-registration keys: the largest range `RegMr` may give them.
    fast_max: Option<u64>,
}

struct Cq {
    cap: u32,
    entries: VecDeque<Completion>,
    overruns: u64,
}

/// Live resources of a device (leak checks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Resources {
    /// RC QPs (QP1 not counted).
    pub qps: usize,
    /// CQs (the GSI CQ not counted).
    pub cqs: usize,
    pub mrs: usize,
    /// DMA buffers not yet dropped.
    pub bufs: usize,
}

/// The state of one soft RDMA device (port) on a [`SoftFabric`], behind the lock its
/// [`SoftDevice`] and [`SoftPath`] handles share.
struct SoftState {
    fabric: SoftFabric,
    ip: Ipv4,
    mac: Mac,
    mem: BTreeMap<PhysAddr, Weak<Mutex<Vec<u8>>>>,
    next_paddr: PhysAddr,
    /// Registrations by index (key >> 8).
    mrs: BTreeMap<u32, Mr>,
    next_mr: u32,
    next_variant: u8,
    cqs: BTreeMap<u32, Cq>,
    next_cqn: u32,
    qps: BTreeMap<u32, Qp>,
    next_qpn: u32,
    gsi_cq: Cqn,
    ud_dropped: u64,
    doorbells: u64,
    /// Shared receive queues ([`SrqVerbs`]).
    srqs: BTreeMap<u32, SoftSrq>,
    next_srqn: u32,
}

impl SoftState {
    /// Live resources, for leak checks.
    pub fn resources(&mut self) -> Resources {
        self.mem.retain(|_, w| w.strong_count() > 0);
        Resources {
            qps: self.qps.len() - 1,
            cqs: self.cqs.len() - 1,
            mrs: self.mrs.len(),
            bufs: self.mem.len(),
        }
    }

    /// The attributes an RC QP was connected with (`None` before `connect_rc_qp` / unknown QP).
    pub fn qp_attrs(&self, qp: Qpn) -> Option<RcConnectAttrs> {
        self.qps.get(&qp.0).filter(|q| q.kind == QpKind::Rc && q.state != QpState::Reset).map(|q| q.attrs)
    }

    /// UD datagrams dropped at this device (no receive posted, bad Q_Key, short buffer).
    pub fn ud_dropped(&self) -> u64 {
        self.ud_dropped
    }

    /// Send doorbells rung: one per `post_send`, one per `ring_send` with WRs pending
    /// (what an adapter would see as MMIO doorbell writes).
    pub fn doorbells(&self) -> u64 {
        self.doorbells
    }

    /// Run the deferred send WRs of `qpn` (the doorbell was counted by the caller).
    fn run_deferred(&mut self, qpn: Qpn) -> Result<(), SoftError> {
        let mut r = Ok(());
        loop {
            let Some(q) = self.qps.get_mut(&qpn.0) else { break };
            let Some(wr) = q.deferred.pop_front() else { break };
            if !q.fenced.is_empty() || (wr.fence && q.read_outstanding()) {
                // Fenced behind a READ, or behind a WR that is (send-queue order).
                q.fenced.push_back(wr);
                continue;
            }
            let x = self.exec_send(qpn, &wr);
            if r.is_ok() {
                r = x;
            }
        }
        r
    }

    /// Start the WRs held behind a fence once no READ of `qpn` is outstanding.
    fn run_fenced(&mut self, qpn: Qpn) {
        loop {
            let Some(q) = self.qps.get_mut(&qpn.0) else { return };
            if q.state != QpState::Rts || q.fenced.front().is_none_or(|w| w.fence && q.read_outstanding()) {
                return;
            }
            let wr = q.fenced.pop_front().expect("checked above");
            let _ = self.exec_send(qpn, &wr);
        }
    }

    /// Completions lost because a CQ was full.
    pub fn cq_overruns(&self) -> u64 {
        self.cqs.values().map(|c| c.overruns).sum()
    }

    fn mem_find(&self, addr: u64, len: u64) -> Option<(Arc<Mutex<Vec<u8>>>, usize)> {
        let (base, w) = self.mem.range(..=addr).next_back()?;
        let buf = w.upgrade()?;
        let off = (addr - base) as usize;
        let end = off.checked_add(len as usize)?;
        if end > locked(&buf).len() {
            return None;
        }
        Some((buf, off))
    }

    fn mem_read(&self, addr: u64, len: u32) -> Option<Vec<u8>> {
        if len == 0 {
            return Some(Vec::new());
        }
        let (buf, off) = self.mem_find(addr, len as u64)?;
        let b = locked(&buf);
        Some(b[off..off + len as usize].to_vec())
    }

    fn mem_write(&self, addr: u64, data: &[u8]) -> bool {
        if data.is_empty() {
            return true;
        }
        match self.mem_find(addr, data.len() as u64) {
            Some((buf, off)) => {
                locked(&buf)[off..off + data.len()].copy_from_slice(data);
                true
            }
            None => false,
        }
    }

    /// The valid registration `key` names (index and variant both match).
    fn mr(&self, key: u32) -> Option<&Mr> {
        self.mrs.get(&(key >> 8)).filter(|m| m.key == key && (m.remote_valid || m.fast_max.is_none()))
    }

    /// A new key: fresh index, next variant.
    fn new_key(&mut self) -> u32 {
        let index = self.next_mr;
        self.next_mr = (self.next_mr + 1) & 0xff_ffff;
        self.next_variant = self.next_variant.wrapping_add(1);
        (index << 8) | self.next_variant as u32
    }

    /// Apply a fast registration or local invalidation (a send-queue WR the device runs itself).
    fn local_key_op(&mut self, op: SendOp) -> bool {
        match op {
            SendOp::RegMr { key, addr, len, access } => {
                let known = self.mem_find(addr, len as u64).is_some();
                let Some(m) = self.mrs.get_mut(&(key.0 >> 8)) else { return false };
                let Some(max) = m.fast_max else { return false };
                if len == 0 || len as u64 > max || !known {
                    return false;
                }
                *m = Mr { key: key.0, addr, len: len as u64, access, remote_valid: true, fast_max: Some(max) };
                true
            }
            SendOp::LocalInvalidate(key) => match self.mrs.get_mut(&(key.0 >> 8)) {
                Some(m) if m.key == key.0 => {
                    m.remote_valid = false;
                    true
                }
                _ => false,
            },
            _ => false,
        }
    }

    /// Local SGE check: key exists, range inside the registration (and in memory).
    fn check_local(&self, sge: &Sge, need_write: bool) -> bool {
        if sge.len == 0 {
            return true;
        }
        let Some(mr) = self.mr(sge.lkey.0) else { return false };
        if need_write && !mr.access.local_write {
            return false;
        }
        in_range(mr.addr, mr.len, sge.addr, sge.len as u64) && self.mem_find(sge.addr, sge.len as u64).is_some()
    }

    fn check_remote(&self, rkey: Rkey, addr: u64, len: u32, write: bool) -> Result<(), Nak> {
        let Some(mr) = self.mr(rkey.0) else { return Err(Nak::RemoteAccess) };
        let ok_access = if write { mr.access.remote_write } else { mr.access.remote_read };
        if !mr.remote_valid || !ok_access || !in_range(mr.addr, mr.len, addr, len as u64) {
            return Err(Nak::RemoteAccess);
        }
        Ok(())
    }

    fn complete(&mut self, cq: Cqn, c: Completion) {
        if let Some(q) = self.cqs.get_mut(&cq.0) {
            if q.entries.len() as u32 >= q.cap {
                q.overruns += 1;
            } else {
                q.entries.push_back(c);
            }
        }
    }

    /// Move `qpn` to ERROR and flush everything outstanding.
    fn error_qp(&mut self, qpn: u32) {
        let Some(qp) = self.qps.get_mut(&qpn) else { return };
        qp.state = QpState::Error;
        let outs: Vec<Outstanding> = qp.outstanding.drain(..).collect();
        let unrung: Vec<SendWr> = qp.fenced.drain(..).chain(qp.deferred.drain(..)).collect();
        let rqs: Vec<RecvWr> = qp.rq.drain(..).collect();
        qp.parked.clear();
        let (scq, rcq) = (qp.send_cq, qp.recv_cq);
        for o in outs {
            self.complete(scq, Completion { wr_id: o.wr_id, status: WcStatus::WrFlushed, opcode: o.opcode, qpn: Qpn(qpn), ..Default::default() });
        }
        for w in unrung {
            self.complete(scq, Completion { wr_id: w.wr_id, status: WcStatus::WrFlushed, opcode: opcode_of(&w.op), qpn: Qpn(qpn), ..Default::default() });
        }
        for r in rqs {
            self.complete(rcq, Completion { wr_id: r.wr_id, status: WcStatus::WrFlushed, opcode: WcOpcode::Recv, qpn: Qpn(qpn), ..Default::default() });
        }
    }

    /// Process everything in this device's inbox.
    fn pump(&mut self) {
        loop {
            let p = {
                let mut f = locked(&self.fabric.inner);
                match f.inbox.get_mut(&self.ip).and_then(|q| q.pop_front()) {
                    Some(p) => p,
                    None => break,
                }
            };
            self.handle(p);
        }
    }

    fn handle(&mut self, p: Packet) {
        match p {
            Packet::Ud { src_ip, src_qpn, dst_qpn, qkey, data } => self.handle_ud(src_ip, src_qpn, dst_qpn, qkey, &data),
            Packet::RcResp { dst_qpn, id, result } => self.handle_resp(dst_qpn, id, result),
            Packet::RcReq { src_ip, src_qpn, dst_qpn, id, op } => {
                let Some(qp) = self.qps.get_mut(&dst_qpn.0) else {
                    self.nak(src_ip, src_qpn, id, Nak::NoResponder);
                    return;
                };
                if qp.kind != QpKind::Rc || qp.state != QpState::Rts || qp.attrs.remote_qpn != src_qpn || qp.attrs.remote_ip != src_ip {
                    self.nak(src_ip, src_qpn, id, Nak::NoResponder);
                    return;
                }
                if !qp.parked.is_empty() {
                    qp.parked.push_back(Packet::RcReq { src_ip, src_qpn, dst_qpn, id, op });
                    return;
                }
                if let Some(back) = self.handle_req(src_ip, src_qpn, dst_qpn, id, op) {
                    if let Some(qp) = self.qps.get_mut(&dst_qpn.0) {
                        qp.parked.push_back(back);
                    }
                }
            }
        }
    }

    fn nak(&self, to: Ipv4, qpn: Qpn, id: u64, n: Nak) {
        self.fabric.push(to, Packet::RcResp { dst_qpn: qpn, id, result: Err(n) });
    }

    /// Execute one RC request. Returns the packet back when it must wait for a receive WR.
    fn handle_req(&mut self, src_ip: Ipv4, src_qpn: Qpn, dst_qpn: Qpn, id: u64, op: RcOp) -> Option<Packet> {
        let q = dst_qpn.0;
        let needs_recv = matches!(op, RcOp::Send { .. } | RcOp::Write { imm: Some(_), .. });
        if needs_recv && !self.has_recv(q) {
            return Some(Packet::RcReq { src_ip, src_qpn, dst_qpn, id, op });
        }
        let rcq = self.qps.get(&q).map(|qp| qp.recv_cq).unwrap_or_default();
        let result: Result<Vec<u8>, Nak> = match op {
            RcOp::Send { data, imm, inv } => {
                let r = self.take_recv(q).expect("checked non-empty");
                if data.len() as u64 > r.sge.len as u64 || !self.check_local(&r.sge, true) {
                    self.complete(rcq, Completion { wr_id: r.wr_id, status: WcStatus::LocalLength, opcode: WcOpcode::Recv, qpn: dst_qpn, ..Default::default() });
                    self.error_qp(q);
                    Err(Nak::InvalidRequest)
                } else {
                    let mut inv_ok = true;
                    if let Some(k) = inv {
                        match self.mrs.get_mut(&(k.0 >> 8)) {
                            Some(mr) if mr.key == k.0 && mr.remote_valid => mr.remote_valid = false,
                            _ => inv_ok = false,
                        }
                    }
                    if !inv_ok {
                        self.complete(rcq, Completion { wr_id: r.wr_id, status: WcStatus::RemoteInvalidRequest, opcode: WcOpcode::Recv, qpn: dst_qpn, ..Default::default() });
                        self.error_qp(q);
                        Err(Nak::InvalidRequest)
                    } else {
                        self.mem_write(r.sge.addr, &data);
                        let opcode = if imm.is_some() { WcOpcode::RecvWithImm } else { WcOpcode::Recv };
                        self.complete(rcq, Completion { wr_id: r.wr_id, opcode, qpn: dst_qpn, byte_len: data.len() as u32, imm, invalidated_rkey: inv, src_qp: src_qpn, ..Default::default() });
                        Ok(Vec::new())
                    }
                }
            }
            RcOp::Write { addr, rkey, data, imm } => {
                let access_ok = self.qps.get(&q).is_some_and(|qp| qp.attrs.access.remote_write);
                let chk = if access_ok { self.check_remote(rkey, addr, data.len() as u32, true) } else { Err(Nak::RemoteAccess) };
                match chk {
                    Err(n) => Err(n),
                    Ok(()) => {
                        if !self.mem_write(addr, &data) {
                            Err(Nak::RemoteOperation)
                        } else {
                            if imm.is_some() {
                                let r = self.take_recv(q).expect("checked non-empty");
                                self.complete(rcq, Completion { wr_id: r.wr_id, opcode: WcOpcode::RecvRdmaWithImm, qpn: dst_qpn, byte_len: data.len() as u32, imm, src_qp: src_qpn, ..Default::default() });
                            }
                            Ok(Vec::new())
                        }
                    }
                }
            }
            RcOp::Read { addr, rkey, len } => {
                let access_ok = self.qps.get(&q).is_some_and(|qp| qp.attrs.access.remote_read && qp.attrs.max_dest_rd_atomic > 0);
                if !access_ok {
                    Err(Nak::InvalidRequest)
                } else {
                    match self.check_remote(rkey, addr, len, false) {
                        Err(n) => Err(n),
                        Ok(()) => self.mem_read(addr, len).ok_or(Nak::RemoteOperation),
                    }
                }
            }
        };
        locked(&self.fabric.inner).stats.rc_packets += 1;
        self.fabric.push(src_ip, Packet::RcResp { dst_qpn: src_qpn, id, result });
        None
    }

    fn handle_resp(&mut self, qpn: Qpn, id: u64, result: Result<Vec<u8>, Nak>) {
        let Some(qp) = self.qps.get_mut(&qpn.0) else { return };
        if qp.state != QpState::Rts {
            return;
        }
        let Some(pos) = qp.outstanding.iter().position(|o| o.id == id) else { return };
        let o = qp.outstanding.remove(pos).expect("position valid");
        let scq = qp.send_cq;
        match result {
            Ok(data) => {
                let mut status = WcStatus::Success;
                if o.opcode == WcOpcode::RdmaRead && (!self.check_local(&o.local, true) || !self.mem_write(o.local.addr, &data)) {
                    status = WcStatus::LocalProtection;
                }
                if o.signaled || status != WcStatus::Success {
                    self.complete(scq, Completion { wr_id: o.wr_id, status, opcode: o.opcode, qpn, byte_len: o.len, ..Default::default() });
                }
                if status != WcStatus::Success {
                    self.error_qp(qpn.0);
                } else {
                    self.run_fenced(qpn);
                }
            }
            Err(n) => {
                let status = match n {
                    Nak::InvalidRequest => WcStatus::RemoteInvalidRequest,
                    Nak::RemoteAccess => WcStatus::RemoteAccess,
                    Nak::RemoteOperation => WcStatus::RemoteOperation,
                    Nak::NoResponder => WcStatus::RetryExceeded,
                };
                self.complete(scq, Completion { wr_id: o.wr_id, status, opcode: o.opcode, qpn, ..Default::default() });
                self.error_qp(qpn.0);
            }
        }
    }

    fn handle_ud(&mut self, src_ip: Ipv4, src_qpn: Qpn, dst_qpn: Qpn, qkey: u32, data: &[u8]) {
        let Some(qp) = self.qps.get_mut(&dst_qpn.0) else {
            self.ud_dropped += 1;
            return;
        };
        if qp.kind != QpKind::Ud || qp.state != QpState::Rts || (dst_qpn.0 == 1 && qkey != GSI_QKEY) {
            self.ud_dropped += 1;
            return;
        }
        let Some(r) = qp.rq.pop_front() else {
            self.ud_dropped += 1;
            return;
        };
        let rcq = qp.recv_cq;
        let total = GRH_LEN + data.len();
        if (r.sge.len as usize) < total || !self.check_local(&r.sge, true) {
            self.ud_dropped += 1;
            self.complete(rcq, Completion { wr_id: r.wr_id, status: WcStatus::LocalLength, opcode: WcOpcode::Recv, qpn: dst_qpn, ..Default::default() });
            return;
        }
        let mut grh = [0u8; GRH_LEN];
        grh[20..40].copy_from_slice(&ipv4_header(src_ip, self.ip, data.len()));
        self.mem_write(r.sge.addr, &grh);
        self.mem_write(r.sge.addr + GRH_LEN as u64, data);
        self.complete(rcq, Completion { wr_id: r.wr_id, opcode: WcOpcode::Recv, qpn: dst_qpn, byte_len: total as u32, src_qp: src_qpn, ..Default::default() });
    }

    /// Re-run parked (RNR) requests of `qpn` after a receive was posted.
    fn unpark(&mut self, qpn: u32) {
        loop {
            let Some(qp) = self.qps.get_mut(&qpn) else { return };
            if qp.state != QpState::Rts || !self.has_recv(qpn) {
                return;
            }
            let Some(qp) = self.qps.get_mut(&qpn) else { return };
            let Some(Packet::RcReq { src_ip, src_qpn, dst_qpn, id, op }) = qp.parked.pop_front() else { return };
            if let Some(back) = self.handle_req(src_ip, src_qpn, dst_qpn, id, op) {
                if let Some(qp) = self.qps.get_mut(&qpn) {
                    qp.parked.push_front(back);
                }
                return;
            }
        }
    }
}

fn in_range(base: u64, len: u64, addr: u64, n: u64) -> bool {
    addr >= base && addr.checked_add(n).is_some_and(|e| e <= base.saturating_add(len))
}

/// IPv4 header as the GRH area of a RoCEv2 UD receive carries it (rxe: the received header).
fn ipv4_header(src: Ipv4, dst: Ipv4, payload: usize) -> [u8; 20] {
    let total = (20 + 8 + 12 + 8 + payload + 4) as u16;
    let mut h = [0u8; 20];
    h[0] = 0x45;
    h[2..4].copy_from_slice(&total.to_be_bytes());
    h[6] = 0x40; // DF
    h[8] = 64;
    h[9] = 17;
    h[12..16].copy_from_slice(&src);
    h[16..20].copy_from_slice(&dst);
    let mut sum: u32 = 0;
    for c in h.chunks(2) {
        sum += u16::from_be_bytes([c[0], c[1]]) as u32;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    h
}

impl SoftState {
    /// Execute one send WR now (the doorbell was rung).
    fn exec_send(&mut self, qpn: Qpn, wr: &SendWr) -> Result<(), SoftError> {
        let q = self.qps.get(&qpn.0).ok_or(SoftError::NoSuchQp(qpn))?;
        if q.state != QpState::Rts {
            return Err(SoftError::BadState(qpn));
        }
        let kind = q.kind;
        let attrs = q.attrs;
        let scq = q.send_cq;
        if kind == QpKind::Rc && q.outstanding.len() as u32 >= q.sq_cap {
            return Err(SoftError::QueueFull(qpn));
        }
        if matches!(wr.op, SendOp::RegMr { .. } | SendOp::LocalInvalidate(_)) {
            // Runs in the device, no packet: a bad key is a local protection error.
            if !self.local_key_op(wr.op) {
                self.complete(scq, Completion { wr_id: wr.wr_id, status: WcStatus::LocalProtection, opcode: opcode_of(&wr.op), qpn, ..Default::default() });
                self.error_qp(qpn.0);
            } else if wr.signaled {
                self.complete(scq, Completion { wr_id: wr.wr_id, opcode: opcode_of(&wr.op), qpn, ..Default::default() });
            }
            return Ok(());
        }
        let reads_local = !matches!(wr.op, SendOp::RdmaRead { .. });
        if !self.check_local(&wr.sge, !reads_local) {
            // Local protection error: completes in error, QP to ERROR (as hardware does).
            self.complete(scq, Completion { wr_id: wr.wr_id, status: WcStatus::LocalProtection, opcode: opcode_of(&wr.op), qpn, ..Default::default() });
            self.error_qp(qpn.0);
            return Ok(());
        }
        if kind == QpKind::Ud {
            let Some(dest) = wr.ud else { return Err(SoftError::InvalidArgument) };
            if !matches!(wr.op, SendOp::Send) {
                return Err(SoftError::InvalidArgument);
            }
            let data = self.mem_read(wr.sge.addr, wr.sge.len).ok_or(SoftError::LocalProtection)?;
            let deliver = {
                let mut f = locked(&self.fabric.inner);
                f.stats.ud_sent += 1;
                let keep = match f.filter.as_mut() {
                    Some(filt) => filt(self.ip, dest.dest_ip, &data),
                    None => true,
                };
                if !keep {
                    f.stats.ud_filtered += 1;
                }
                keep
            };
            if deliver {
                self.fabric.push(dest.dest_ip, Packet::Ud { src_ip: self.ip, src_qpn: qpn, dst_qpn: dest.remote_qpn, qkey: dest.qkey, data });
            }
            if wr.signaled {
                self.complete(scq, Completion { wr_id: wr.wr_id, opcode: WcOpcode::Send, qpn, byte_len: wr.sge.len, ..Default::default() });
            }
            return Ok(());
        }
        let (op, opcode, local) = match wr.op {
            SendOp::Send | SendOp::SendWithImm(_) | SendOp::SendWithInvalidate(_) => {
                let data = self.mem_read(wr.sge.addr, wr.sge.len).ok_or(SoftError::LocalProtection)?;
                let imm = if let SendOp::SendWithImm(i) = wr.op { Some(i) } else { None };
                let inv = if let SendOp::SendWithInvalidate(k) = wr.op { Some(k) } else { None };
                (RcOp::Send { data, imm, inv }, WcOpcode::Send, Sge::default())
            }
            SendOp::RdmaWrite { remote_addr, rkey } | SendOp::RdmaWriteWithImm { remote_addr, rkey, .. } => {
                let data = self.mem_read(wr.sge.addr, wr.sge.len).ok_or(SoftError::LocalProtection)?;
                let imm = if let SendOp::RdmaWriteWithImm { imm, .. } = wr.op { Some(imm) } else { None };
                (RcOp::Write { addr: remote_addr, rkey, data, imm }, WcOpcode::RdmaWrite, Sge::default())
            }
            SendOp::RdmaRead { remote_addr, rkey } => {
                (RcOp::Read { addr: remote_addr, rkey, len: wr.sge.len }, WcOpcode::RdmaRead, wr.sge)
            }
            SendOp::RegMr { .. } | SendOp::LocalInvalidate(_) => return Err(SoftError::InvalidArgument),
        };
        let q = self.qps.get_mut(&qpn.0).expect("checked above");
        let id = q.next_id;
        q.next_id += 1;
        q.outstanding.push_back(Outstanding { id, wr_id: wr.wr_id, signaled: wr.signaled, opcode, local, len: wr.sge.len });
        let pkt = Packet::RcReq { src_ip: self.ip, src_qpn: qpn, dst_qpn: attrs.remote_qpn, id, op };
        if !self.fabric.push(attrs.remote_ip, pkt) {
            // Nobody at that address: the requester's retries run out.
            self.fabric.push(self.ip, Packet::RcResp { dst_qpn: qpn, id, result: Err(Nak::NoResponder) });
        }
        Ok(())
    }

    fn post_recv_one(&mut self, qpn: Qpn, wr: &RecvWr) -> Result<(), SoftError> {
        let q = self.qps.get_mut(&qpn.0).ok_or(SoftError::NoSuchQp(qpn))?;
        if q.state == QpState::Error || q.srq.is_some() {
            return Err(SoftError::BadState(qpn));
        }
        if q.rq.len() as u32 >= q.rq_cap {
            return Err(SoftError::QueueFull(qpn));
        }
        q.rq.push_back(*wr);
        self.unpark(qpn.0);
        Ok(())
    }

    fn poll_cq_inner(&mut self, cq: Cqn, out: &mut [Completion]) -> usize {
        self.pump();
        let Some(q) = self.cqs.get_mut(&cq.0) else { return 0 };
        let mut n = 0;
        while n < out.len() {
            match q.entries.pop_front() {
                Some(c) => {
                    out[n] = c;
                    n += 1;
                }
                None => break,
            }
        }
        n
    }
}

fn opcode_of(op: &SendOp) -> WcOpcode {
    match op {
        SendOp::Send | SendOp::SendWithImm(_) | SendOp::SendWithInvalidate(_) => WcOpcode::Send,
        SendOp::RdmaWrite { .. } | SendOp::RdmaWriteWithImm { .. } => WcOpcode::RdmaWrite,
        SendOp::RdmaRead { .. } => WcOpcode::RdmaRead,
        SendOp::RegMr { .. } => WcOpcode::RegMr,
        SendOp::LocalInvalidate(_) => WcOpcode::LocalInvalidate,
    }
}
