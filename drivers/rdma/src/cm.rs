//! cm: IB connection manager over QP1, speaking Linux rdma_cm's dialect (TCP port space, RoCEv2).
//!
//! Poll-driven and generic over [`Verbs`]: the [`Cm`] owns no device; every call takes
//! `&mut V`. It owns a MAD buffer (receive and send slots on QP1) and the connections.
//!
//! Passive side: [`Cm::listen`] a port; a REQ for it becomes [`CmEvent::ConnectRequest`];
//! the app answers with [`Cm::accept`] (QP created, receives posted, QP to RTS, REP sent) or
//! [`Cm::reject`]. RTU (or [`Cm::notify_comm_est`] when the app sees the first receive)
//! → [`CmEvent::Established`].
//! Active side: [`Cm::connect`] (QP created, receives posted, REQ sent) → REP → QP to RTS,
//! RTU → [`CmEvent::Established`]; REJ → [`CmEvent::Rejected`]; timeouts → [`CmEvent::Unreachable`].
//! Either side: [`Cm::disconnect`] (DREQ → DREP) or a peer DREQ → [`CmEvent::Disconnected`].
//!
//! The CM owns every QP it creates: it destroys it on reject, timeout, failure and
//! disconnect (after moving it to ERROR so the app's CQ gets the flushed WRs). After
//! `Disconnected`/`Rejected`/`Unreachable` the QPN is gone.
//!
//! Wire rules mirrored from Linux (cm.c / cma.c; see shared/reference/wire.md §2):
//! - MADs are UD SENDs on QP1 to remote QPN 1 with Q_Key 0x80010000; receives carry the
//!   40-byte GRH area first, whose IPv4 source address addresses the reply.
//! - TIDs: REQ and DREQ carry `hi << 32 | local_comm_id.swap_bytes()` (Linux `cm_form_tid`
//!   on a little-endian host); REP/REJ/MRA/RTU reuse the REQ's TID; DREP reuses the DREQ's.
//! - Retransmission: REQ every `2 × packet lifetime + remote CM response timeout`, REP every
//!   `2 × packet lifetime + REQ's local CM response timeout`, DREQ like REQ; up to
//!   Max CM Retries (ours for REQ/DREQ, the REQ's for REP). MRA extends the wait by its
//!   service timeout. Timeouts are 4.096 µs × 2^v (IBA), not Linux's rounded ms.
//! - Duplicate REQ: resend what we last sent for it (MRA, REP or REJ); a REQ from a
//!   (remote QPN, CA GUID) we hold in timewait or still connected under another comm ID →
//!   REJ STALE_CONN (and the old connection is disconnected).
//! - DREQ whose Remote QPN is not ours is ignored; DREQ for unknown IDs gets a DREP anyway.
//!
//! Hostile peers (see `cm_limits`, `cm_table`):
//! - The table is bounded (`CmLimits::max_conns`, timewait included) and allocated at
//!   [`Cm::new`]; a REQ is admitted only within its source's token bucket and entry share,
//!   else REJ NO_RESOURCES, counted in [`CmStats`] and logged at most once per interval.
//! - Lookups are indexed: by Local Comm ID (slot + random tag), by (peer address, peer comm
//!   ID) for duplicate REQs, by (peer address, peer QPN) for stale connections.
//! - The source address (RoCEv2: the GRH/IPv4 source, the peer's GID) is checked before a
//!   REQ, REP, REJ, RTU, MRA, DREQ or DREP touches a connection; a REQ's Primary Local Port
//!   GID must be its source; a REJ's comm ID 0 is no wildcard once the peer's ID is known.
//! - Peer-chosen timers and retry counts are clamped where the REQ/REP/MRA enters (`PeerClamps`).
//! - A new REQ from a source whose MAC is not known yet (ARP asked) is held until it is, up
//!   to `CmLimits::unrouted_reqs` REQs for `CmLimits::unrouted_wait_ns` each, then handled as
//!   if it had just arrived: a host the target never had to ask for is answered after one
//!   ARP round trip, not after its REQ retransmission interval (seconds).

use alloc::collections::{BTreeSet, VecDeque};
use alloc::vec::Vec;

use hal::DmaRegion;
use log::{debug, warn};

mod api;
mod recv;

pub use api::*;

use crate::cm_limits::{CmLimits, PeerClamps, Refusal, SourceLimiter};
use crate::cm_table::{key, HashIndex, SlotTable};
use crate::cm_wire::*;
use crate::verbs::*;

/// Q_Key of QP1 (IBA; Linux `IB_QP1_QKEY`).
pub const GSI_QKEY: u32 = 0x8001_0000;
/// Bytes in front of every UD receive (GRH area; IPv4 header in its last 20 bytes).
pub const GRH_LEN: usize = 40;
/// UDP source port Linux rxe used for QP1 traffic (any value works; receivers don't check).
pub const GSI_UDP_SPORT: u16 = 0xD872;
/// Most private data a REQ can carry after the 36-byte rdma_cm header.
pub const REQ_PRIVATE_DATA_MAX: usize = req_f::PRIVATE_DATA_LEN - cma_f::LEN;

const SLOT: usize = 512;
const TIMER_SCAN_NS: u64 = 100_000;
const SEND_TAG: u64 = 1 << 63;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Active: waiting for the peer's MAC.
    Resolving,
    ReqSent,
    MraReqRcvd,
    /// Passive: waiting for the app.
    ReqRcvd,
    MraReqSent,
    RepSent,
    Established,
    DreqSent,
    /// Closed; remembered to answer duplicates (DREQ → DREP, REQ → REJ stale/REJ).
    TimeWait,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Active,
    Passive,
}

struct Conn {
    id: u32,
    role: Role,
    state: State,
    remote_id: u32,
    remote_guid: u64,
    remote_qpn: u32,
    peer_ip: Ipv4,
    peer_mac: Mac,
    qpn: Option<Qpn>,
    port: u16,
    /// TID of the REQ (ours or the peer's).
    req_tid: u64,
    /// What to resend on timer / duplicate (REQ, REP, MRA, REJ, DREQ, DREP).
    last: Option<[u8; MAD_LEN]>,
    deadline: Option<u64>,
    timeout_ns: u64,
    retries_left: u8,
    /// Connection parameters.
    my_psn: u32,
    flow_label: u32,
    mtu: u32,
    req: Option<Req>,
    active: Option<ActiveSaved>,
    /// A QP was connected for it (stale-connection matching considers only these).
    connected: bool,
    /// The app created the QP and owns it: the CM never moves it to ERROR nor destroys it.
    app_qp: bool,
    /// Passive, app-owned QP: the attributes handed out by [`Cm::accept_attrs`].
    offered: Option<RcConnectAttrs>,
    /// Passive: counted against its source in the limiter until forgotten.
    admitted: bool,
}

#[derive(Clone, Copy)]
struct ActiveSaved {
    responder_resources: u8,
    initiator_depth: u8,
    access: Access,
    src_port: u16,
    dest_port: u16,
    private_data: [u8; REQ_PRIVATE_DATA_MAX],
    resolve_deadline: u64,
}

/// The connection manager.
pub struct Cm<V: Verbs> {
    cfg: CmConfig,
    buf: V::Buf,
    lkey: Lkey,
    recv_slots: usize,
    send_next: usize,
    /// Send slots whose completion has not come back; `send_inflight` of them are true.
    send_busy: Vec<bool>,
    send_inflight: usize,
    listeners: BTreeSet<u16>,
    conns: SlotTable<Conn>,
    /// Passive connections by (peer address, peer's comm ID): duplicate REQs.
    by_req: HashIndex<u32>,
    /// Connected (not timewait) connections by (peer address, peer's QPN): stale connections.
    by_qpn: HashIndex<u32>,
    limiter: SourceLimiter,
    /// Refusal counts at the last log line, and when the next may be written.
    refusals_logged: u64,
    next_log: u64,
    /// Next time the limiter forgets idle sources.
    next_sweep: u64,
    events: VecDeque<CmEvent>,
    rng: u64,
    now: u64,
    next_timer_scan: u64,
    guid: u64,
    stats: CmStats,
    /// New REQs waiting for their source's MAC (bounded by `CmLimits::unrouted_reqs`,
    /// allocated at [`Cm::new`]); replayed by the timer scan once ARP has answered.
    unrouted: Vec<Unrouted>,
}

/// A REQ held for the ARP answer: its source, TID and (clamped) fields, and until when.
#[derive(Clone, Copy)]
struct Unrouted {
    src_ip: Ipv4,
    tid: u64,
    req: Req,
    until: u64,
}

/// TID of a REQ/DREQ we send: `hi << 32 | comm ID byte-swapped` (Linux `cm_form_tid`).
fn form_tid(hi: u32, id: u32) -> u64 {
    ((hi as u64) << 32) | id.swap_bytes() as u64
}

fn xorshift(s: &mut u64) -> u64 {
    let mut x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    x
}

impl<V: Verbs> Cm<V> {
    /// Set up: allocate and register the MAD buffer, post QP1 receives.
    pub fn new(v: &mut V, cfg: CmConfig) -> Result<Self, CmError<V::Error>> {
        let slots = cfg.recv_slots.max(1) + cfg.send_slots.max(1);
        let max = cfg.limits.max_conns.max(1);
        let conns = SlotTable::new(max).map_err(|_| CmError::NoMemory)?;
        let by_req = HashIndex::new(max, cfg.seed ^ 0x7265_71).map_err(|_| CmError::NoMemory)?;
        let by_qpn = HashIndex::new(max, cfg.seed ^ 0x7170_6e).map_err(|_| CmError::NoMemory)?;
        let limiter = SourceLimiter::new(cfg.limits, cfg.seed ^ 0x7372_63).map_err(|_| CmError::NoMemory)?;
        let mut send_busy = Vec::new();
        send_busy.try_reserve_exact(cfg.send_slots.max(1)).map_err(|_| CmError::NoMemory)?;
        send_busy.resize(cfg.send_slots.max(1), false);
        let mut events = VecDeque::new();
        // Every event belongs to a connection; a poll turn adds at most a few per MAD received.
        events.try_reserve(cfg.recv_slots.max(1) * 2 + 64).map_err(|_| CmError::NoMemory)?;
        let mut unrouted = Vec::new();
        unrouted.try_reserve_exact(cfg.limits.unrouted_reqs).map_err(|_| CmError::NoMemory)?;
        let buf = v.alloc_buf(slots * SLOT).map_err(CmError::Verbs)?;
        let access = Access { local_write: true, remote_read: false, remote_write: false };
        let (lkey, _) = v.reg_mr(buf.paddr(), buf.len() as u64, access).map_err(CmError::Verbs)?;
        let mut cm = Cm {
            cfg,
            buf,
            lkey,
            recv_slots: cfg.recv_slots.max(1),
            send_next: 0,
            send_busy,
            send_inflight: 0,
            listeners: BTreeSet::new(),
            conns,
            by_req,
            by_qpn,
            limiter,
            refusals_logged: 0,
            next_log: 0,
            next_sweep: 0,
            events,
            rng: cfg.seed | 1,
            now: 0,
            next_timer_scan: 0,
            guid: guid_from_mac(v.local_mac()),
            stats: CmStats::default(),
            unrouted,
        };
        for i in 0..cm.recv_slots {
            cm.post_slot(v, i).map_err(CmError::Verbs)?;
        }
        Ok(cm)
    }

    /// The settings this CM was made with.
    pub fn config(&self) -> CmConfig {
        self.cfg
    }

    /// Release the MAD buffer registration and destroy every QP still held.
    pub fn shutdown(mut self, v: &mut V) {
        for i in 0..self.conns.scan_end() {
            if let Some(id) = self.conns.id_at(i) {
                self.drop_qp(v, id);
            }
        }
        let _ = v.dereg_mr(self.lkey);
    }

    pub fn stats(&self) -> CmStats {
        self.stats
    }

    /// Connections not yet forgotten (including timewait), for leak checks.
    pub fn conn_count(&self) -> usize {
        self.conns.len()
    }

    /// Source addresses the REQ limiter remembers (holding entries or still refilling).
    pub fn sources_tracked(&self) -> usize {
        self.limiter.sources()
    }

    /// QPs the CM currently owns.
    pub fn qp_count(&self) -> usize {
        self.conns.values().filter(|c| c.qpn.is_some()).count()
    }

    /// The port a connection was made to (listener port / destination port).
    pub fn port(&self, id: ConnId) -> Option<u16> {
        self.conns.get(id.0).map(|c| c.port)
    }

    /// The QP of a connection (once accepted / connect called).
    pub fn qpn(&self, id: ConnId) -> Option<Qpn> {
        self.conns.get(id.0).and_then(|c| c.qpn)
    }

    pub fn listen(&mut self, port: u16) -> Result<(), CmError<V::Error>> {
        if !self.listeners.insert(port) {
            return Err(CmError::PortInUse(port));
        }
        Ok(())
    }

    pub fn unlisten(&mut self, port: u16) {
        self.listeners.remove(&port);
    }

    fn post_slot(&mut self, v: &mut V, i: usize) -> Result<(), V::Error> {
        let wr = RecvWr { wr_id: i as u64, sge: Sge { addr: self.buf.paddr() + (i * SLOT) as u64, len: (GRH_LEN + MAD_LEN) as u32, lkey: self.lkey } };
        v.post_recv(v.gsi_qp(), &wr)
    }

    fn rand(&mut self) -> u64 {
        xorshift(&mut self.rng)
    }

    /// Store a new connection (`make` gets its Local Comm ID); `None` when the table is full.
    fn insert_conn(&mut self, make: impl FnOnce(u32) -> Conn) -> Option<u32> {
        let r = self.rand() as u32;
        self.conns.insert_with(r, make)
    }

    /// Forget connection `id`: out of the table, its indexes and its source's count.
    fn forget(&mut self, id: u32) {
        let Some(c) = self.conns.remove(id) else { return };
        self.by_req.remove_if(key(c.peer_ip, c.remote_id), |v| *v == id);
        self.by_qpn.remove_if(key(c.peer_ip, c.remote_qpn), |v| *v == id);
        if c.admitted {
            self.limiter.release(c.peer_ip);
        }
    }

    /// Count a refused REQ; log the refusals at most once per interval.
    fn refused(&mut self, why: Refusal) {
        let s = &mut self.stats;
        match why {
            Refusal::Rate => s.refused_rate += 1,
            Refusal::PerSource => s.refused_per_source += 1,
            Refusal::TableFull => s.refused_table_full += 1,
        }
        let total = s.refused_rate + s.refused_per_source + s.refused_table_full;
        if self.now >= self.next_log {
            warn!(
                "cm: refused {} REQs since the last report (total: rate {}, per source {}, table full {}; {} connections held)",
                total - self.refusals_logged,
                s.refused_rate,
                s.refused_per_source,
                s.refused_table_full,
                self.conns.len()
            );
            self.refusals_logged = total;
            self.next_log = self.now.saturating_add(self.cfg.limits.log_interval_ns);
        }
    }

    fn tid_for(&self, id: u32) -> u64 {
        form_tid(self.cfg.tid_hi, id)
    }

    fn send_mad(&mut self, v: &mut V, ip: Ipv4, mac: Mac, mad: &[u8; MAD_LEN]) {
        let n = self.send_busy.len();
        if self.send_inflight >= n {
            self.stats.send_ring_full += 1;
            return;
        }
        while self.send_busy.get(self.send_next).copied().unwrap_or(false) {
            self.send_next = (self.send_next + 1) % n;
        }
        let s = self.send_next;
        self.send_next = (self.send_next + 1) % n;
        let off = (self.recv_slots + s) * SLOT;
        self.buf.write(off, mad);
        let wr = SendWr {
            wr_id: SEND_TAG | s as u64,
            op: SendOp::Send,
            sge: Sge { addr: self.buf.paddr() + off as u64, len: MAD_LEN as u32, lkey: self.lkey },
            signaled: true,
            fence: false,
            ud: Some(UdDest { remote_qpn: Qpn(1), qkey: GSI_QKEY, dest_ip: ip, dest_mac: mac, udp_sport: GSI_UDP_SPORT }),
        };
        let qp1 = v.gsi_qp();
        match v.post_send(qp1, &wr) {
            Ok(()) => {
                if let Some(b) = self.send_busy.get_mut(s) {
                    *b = true;
                    self.send_inflight += 1;
                }
                self.stats.mads_tx += 1;
            }
            Err(e) => warn!("cm: QP1 send failed: {e:?}"),
        }
    }

    /// Send `mad` for conn `id`, remember it for resends and arm the timer (if `timeout_ns`).
    fn send_for(&mut self, v: &mut V, id: u32, mad: [u8; MAD_LEN], timer: Option<(u64, u8)>) {
        let Some(c) = self.conns.get_mut(id) else { return };
        c.last = Some(mad);
        match timer {
            Some((t, retries)) => {
                c.timeout_ns = t;
                c.retries_left = retries;
                c.deadline = Some(self.now.saturating_add(t));
            }
            None => c.deadline = None,
        }
        let (ip, mac) = (c.peer_ip, c.peer_mac);
        self.send_mad(v, ip, mac, &mad);
    }

    fn req_timeout_ns(&self, remote_cm_response_timeout: u8) -> u64 {
        2 * cm_time_ns(self.cfg.packet_life_time) + cm_time_ns(remote_cm_response_timeout)
    }

    /// Start an active connection: create the QP, post `recv_wrs`, send the REQ.
    pub fn connect(&mut self, v: &mut V, p: &ConnectParams<'_>) -> Result<ConnId, CmError<V::Error>> {
        if p.private_data.len() > REQ_PRIVATE_DATA_MAX {
            return Err(CmError::PrivateDataTooLong { max: REQ_PRIVATE_DATA_MAX, got: p.private_data.len() });
        }
        let qpn = v.create_rc_qp(p.send_cq, p.recv_cq, p.sq_size, p.rq_size).map_err(CmError::Verbs)?;
        for wr in p.recv_wrs {
            if let Err(e) = v.post_recv(qpn, wr) {
                let _ = v.destroy_qp(qpn);
                return Err(CmError::Verbs(e));
            }
        }
        match self.start_active(v, qpn, false, p) {
            Some(id) => Ok(id),
            None => {
                let _ = v.destroy_qp(qpn);
                Err(CmError::TableFull)
            }
        }
    }

    /// Start an active connection on a QP the app created and keeps owning (RESET, its
    /// receives already posted). `p.send_cq`, `recv_cq`, `sq_size`, `rq_size` and `recv_wrs`
    /// are not used. On the REP the CM brings the QP to RTS; it never moves it to ERROR nor
    /// destroys it: after `Rejected`, `Unreachable` or `Disconnected` that is the app's job.
    pub fn connect_app_qp(&mut self, v: &mut V, qpn: Qpn, p: &ConnectParams<'_>) -> Result<ConnId, CmError<V::Error>> {
        if p.private_data.len() > REQ_PRIVATE_DATA_MAX {
            return Err(CmError::PrivateDataTooLong { max: REQ_PRIVATE_DATA_MAX, got: p.private_data.len() });
        }
        self.start_active(v, qpn, true, p).ok_or(CmError::TableFull)
    }

    fn start_active(&mut self, v: &mut V, qpn: Qpn, app_qp: bool, p: &ConnectParams<'_>) -> Option<ConnId> {
        let src_port = if p.src_port != 0 { p.src_port } else { 0x8000 | (self.rand() as u16 & 0x7fff) };
        let my_psn = self.rand() as u32 & 0xFF_FFFF;
        let resolve_deadline = self.now.saturating_add(self.req_timeout_ns(self.cfg.cm_response_timeout));
        let mtu = self.cfg.mtu;
        let tid_hi = self.cfg.tid_hi;
        let id = self.insert_conn(|id| Conn {
            id,
            role: Role::Active,
            state: State::Resolving,
            remote_id: 0,
            remote_guid: 0,
            remote_qpn: 0,
            peer_ip: p.dest_ip,
            peer_mac: [0; 6],
            qpn: Some(qpn),
            port: p.dest_port,
            req_tid: form_tid(tid_hi, id),
            last: None,
            deadline: None,
            timeout_ns: 0,
            retries_left: 0,
            my_psn,
            flow_label: rdma_cm_flow_label(src_port, p.dest_port),
            mtu,
            req: None,
            connected: false,
            app_qp,
            offered: None,
            active: Some(ActiveSaved {
                responder_resources: p.responder_resources,
                initiator_depth: p.initiator_depth,
                access: p.access,
                src_port,
                dest_port: p.dest_port,
                private_data: pad(p.private_data),
                resolve_deadline,
            }),
            admitted: false,
        })?;
        self.try_send_req(v, id);
        Some(ConnId(id))
    }

    /// Resolving → ReqSent once the peer MAC is known.
    fn try_send_req(&mut self, v: &mut V, id: u32) {
        let Some(c) = self.conns.get(id) else { return };
        if c.state != State::Resolving {
            return;
        }
        let Some(mac) = v.resolve_mac(c.peer_ip) else { return };
        let a = c.active.expect("active conn");
        let mut pd = [0u8; req_f::PRIVATE_DATA_LEN];
        CmaHdr { src_port: a.src_port, src_ip: v.local_ip(), dst_ip: c.peer_ip }.write(&mut pd);
        pd[cma_f::LEN..].copy_from_slice(&a.private_data);
        let cfg = self.cfg;
        let req = Req {
            local_comm_id: id,
            service_id: service_id_tcp(a.dest_port),
            local_ca_guid: self.guid,
            local_qkey: 0,
            local_qpn: c.qpn.map_or(0, |q| q.0),
            responder_resources: a.responder_resources,
            local_eecn: 0,
            initiator_depth: a.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: cfg.cm_response_timeout,
            transport_service_type: 0,
            end_to_end_flow_control: true,
            starting_psn: c.my_psn,
            local_cm_response_timeout: cfg.cm_response_timeout,
            retry_count: cfg.retry_count,
            pkey: 0xffff,
            path_mtu: mtu_bytes_to_enum(cfg.mtu).unwrap_or(3),
            rdc_exists: false,
            rnr_retry_count: cfg.rnr_retry_count,
            max_cm_retries: cfg.max_cm_retries,
            srq: false,
            extended_transport_type: 0,
            primary: Path {
                local_lid: 0xffff,
                remote_lid: 0xffff,
                local_gid: gid_from_ipv4(v.local_ip()),
                remote_gid: gid_from_ipv4(c.peer_ip),
                flow_label: c.flow_label,
                packet_rate: 0,
                traffic_class: 0,
                hop_limit: 64,
                sl: 0,
                subnet_local: false,
                local_ack_timeout: cfg.local_ack_timeout,
            },
            alternate: Path::default(),
            sap_supported: false,
            private_data: pd,
        };
        let tid = c.req_tid;
        let c = self.conns.get_mut(id).expect("present");
        c.peer_mac = mac;
        c.state = State::ReqSent;
        c.req = Some(req);
        let t = self.req_timeout_ns(cfg.cm_response_timeout);
        self.send_for(v, id, CmMsg::Req(req).encode(tid), Some((t, cfg.max_cm_retries)));
    }

    /// Accept a [`CmEvent::ConnectRequest`]: create the QP, post `recv_wrs`, bring it to RTS
    /// with the REQ's parameters, send the REP. Returns the QPN. The CM owns that QP.
    pub fn accept(&mut self, v: &mut V, id: ConnId, p: &AcceptParams<'_>) -> Result<Qpn, CmError<V::Error>> {
        if p.private_data.len() > rep_f::PRIVATE_DATA_LEN {
            return Err(CmError::PrivateDataTooLong { max: rep_f::PRIVATE_DATA_LEN, got: p.private_data.len() });
        }
        let attrs = self.accept_attrs(id, p.responder_resources, p.initiator_depth, p.access)?;
        let qpn = match v.create_rc_qp(p.send_cq, p.recv_cq, p.sq_size, p.rq_size) {
            Ok(q) => q,
            Err(e) => {
                self.reject_inner(v, id.0, rej_reason::NO_QP, &[]);
                return Err(CmError::Verbs(e));
            }
        };
        let setup = (|| {
            for wr in p.recv_wrs {
                v.post_recv(qpn, wr)?;
            }
            v.connect_rc_qp(qpn, &attrs)
        })();
        if let Err(e) = setup {
            let _ = v.destroy_qp(qpn);
            self.reject_inner(v, id.0, rej_reason::NO_RESOURCES, &[]);
            return Err(CmError::Verbs(e));
        }
        self.send_rep(v, id, qpn, false, p.private_data);
        Ok(qpn)
    }

    /// Passive side with an app-owned QP, step 1: the RC attributes a QP for the pending
    /// REQ `id` must be connected with (`Control::connect_rc_qp`). `responder_resources` /
    /// `initiator_depth` are what we offer (capped by the REQ's); `max_rd_atomic` in the
    /// result is how many RDMA READs the app may have outstanding at the peer. Step 2 is
    /// [`Cm::accept_app_qp`] (or [`Cm::reject`]).
    pub fn accept_attrs(&mut self, id: ConnId, responder_resources: u8, initiator_depth: u8, access: Access) -> Result<RcConnectAttrs, CmError<V::Error>> {
        let c = self.conns.get(id.0).ok_or(CmError::UnknownConn(id))?;
        if !matches!(c.state, State::ReqRcvd | State::MraReqSent) {
            return Err(CmError::BadState(id));
        }
        let req = c.req.expect("passive conn has its REQ");
        let (peer_ip, peer_mac) = (c.peer_ip, c.peer_mac);
        let mtu = mtu_enum_to_bytes(req.path_mtu).unwrap_or(1024).min(self.cfg.mtu);
        let max_rd_atomic = initiator_depth.min(req.responder_resources);
        let max_dest_rd_atomic = responder_resources.min(req.initiator_depth);
        let my_psn = self.rand() as u32 & 0xFF_FFFF;
        let mut access = access;
        // Linux cm_init_qp_init_attr: REMOTE_READ only with responder resources.
        access.remote_read &= max_dest_rd_atomic > 0;
        let attrs = RcConnectAttrs {
            remote_qpn: Qpn(req.local_qpn),
            remote_ip: peer_ip,
            remote_mac: peer_mac,
            // Linux cm.c: a REQ/REP's Starting PSN is the sender's receive PSN (rq_psn),
            // so it is the PSN the other side sends with.
            rq_psn: my_psn,
            sq_psn: req.starting_psn,
            mtu,
            udp_sport: flow_label_to_udp_sport(req.primary.flow_label),
            retry_cnt: req.retry_count,
            rnr_retry: req.rnr_retry_count,
            timeout: req.primary.local_ack_timeout,
            min_rnr_timer: self.cfg.min_rnr_timer,
            max_rd_atomic,
            max_dest_rd_atomic,
            access,
        };
        self.conns.get_mut(id.0).expect("checked").offered = Some(attrs);
        Ok(attrs)
    }

    /// Passive side with an app-owned QP, step 2: `qpn` was created by the app, its
    /// receives posted and connected with the attributes of [`Cm::accept_attrs`]; send the
    /// REP with `private_data` (at most 196 bytes). The CM never moves that QP to ERROR nor
    /// destroys it: after `Rejected`, `Unreachable` or `Disconnected` the app does.
    pub fn accept_app_qp(&mut self, v: &mut V, id: ConnId, qpn: Qpn, private_data: &[u8]) -> Result<(), CmError<V::Error>> {
        if private_data.len() > rep_f::PRIVATE_DATA_LEN {
            return Err(CmError::PrivateDataTooLong { max: rep_f::PRIVATE_DATA_LEN, got: private_data.len() });
        }
        let c = self.conns.get(id.0).ok_or(CmError::UnknownConn(id))?;
        if !matches!(c.state, State::ReqRcvd | State::MraReqSent) || c.offered.is_none() {
            return Err(CmError::BadState(id));
        }
        self.send_rep(v, id, qpn, true, private_data);
        Ok(())
    }

    /// REP for passive conn `id` (state checked, `offered` set) on `qpn`.
    fn send_rep(&mut self, v: &mut V, id: ConnId, qpn: Qpn, app_qp: bool, private_data: &[u8]) {
        let c = self.conns.get_mut(id.0).expect("checked by the caller");
        let req = c.req.expect("passive conn has its REQ");
        let a = c.offered.expect("attributes offered");
        let rep = Rep {
            local_comm_id: id.0,
            remote_comm_id: req.local_comm_id,
            local_qkey: 0,
            local_qpn: qpn.0,
            local_eecn: 0,
            starting_psn: a.rq_psn,
            responder_resources: a.max_dest_rd_atomic,
            initiator_depth: a.max_rd_atomic,
            target_ack_delay: self.cfg.target_ack_delay,
            failover_accepted: 0,
            end_to_end_flow_control: true,
            rnr_retry_count: self.cfg.rnr_retry_count,
            srq: false,
            local_ca_guid: self.guid,
            private_data: pad(private_data),
        };
        c.qpn = Some(qpn);
        c.app_qp = app_qp;
        c.connected = true;
        let k = key(c.peer_ip, c.remote_qpn);
        c.my_psn = a.rq_psn;
        c.mtu = a.mtu;
        c.state = State::RepSent;
        let tid = c.req_tid;
        let t = 2 * cm_time_ns(self.cfg.packet_life_time) + cm_time_ns(req.local_cm_response_timeout);
        self.by_qpn.insert(k, id.0);
        self.send_for(v, id.0, CmMsg::Rep(rep).encode(tid), Some((t, req.max_cm_retries)));
    }

    /// Reject a pending REQ with `reason` (use [`rej_reason::CONSUMER_DEFINED`] for app
    /// decisions) and up to 148 bytes of private data.
    pub fn reject(&mut self, v: &mut V, id: ConnId, reason: u16, private_data: &[u8]) -> Result<(), CmError<V::Error>> {
        if private_data.len() > rej_f::PRIVATE_DATA_LEN {
            return Err(CmError::PrivateDataTooLong { max: rej_f::PRIVATE_DATA_LEN, got: private_data.len() });
        }
        let c = self.conns.get(id.0).ok_or(CmError::UnknownConn(id))?;
        if !matches!(c.state, State::ReqRcvd | State::MraReqSent) {
            return Err(CmError::BadState(id));
        }
        self.reject_inner(v, id.0, reason, private_data);
        Ok(())
    }

    /// Send REJ for the REQ of passive conn `id` and keep it in timewait (duplicates get the REJ again).
    fn reject_inner(&mut self, v: &mut V, id: u32, reason: u16, private_data: &[u8]) {
        let Some(c) = self.conns.get(id) else { return };
        let rej = Rej {
            local_comm_id: id,
            remote_comm_id: c.remote_id,
            message_rejected: msg_code::REQ,
            reject_info_length: 0,
            reason,
            ari: [0; rej_f::ARI_LEN],
            private_data: pad(private_data),
        };
        let tid = c.req_tid;
        self.send_for(v, id, CmMsg::Rej(rej).encode(tid), None);
        self.drop_qp(v, id);
        self.enter_timewait(id);
    }

    /// Tell the peer we need more time before deciding on its REQ (MRA, Message MRAed = REQ).
    pub fn delay(&mut self, v: &mut V, id: ConnId, service_timeout: u8) -> Result<(), CmError<V::Error>> {
        let c = self.conns.get_mut(id.0).ok_or(CmError::UnknownConn(id))?;
        if c.state != State::ReqRcvd {
            return Err(CmError::BadState(id));
        }
        c.state = State::MraReqSent;
        let mra = Mra { local_comm_id: id.0, remote_comm_id: c.remote_id, message_mraed: msg_code::REQ, service_timeout, private_data: [0; mra_f::PRIVATE_DATA_LEN] };
        let tid = c.req_tid;
        let retries = c.req.map_or(0, |r| r.max_cm_retries) as u64;
        let wait = (retries + 1) * (cm_time_ns(service_timeout) + 2 * cm_time_ns(self.cfg.packet_life_time));
        self.send_for(v, id.0, CmMsg::Mra(mra).encode(tid), None);
        if let Some(c) = self.conns.get_mut(id.0) {
            c.deadline = Some(self.now.saturating_add(wait));
        }
        Ok(())
    }

    /// Passive side: the app saw traffic on the QP before the RTU (Linux COMM_EST).
    pub fn notify_comm_est(&mut self, id: ConnId) {
        if self.conns.get(id.0).is_some_and(|c| c.state == State::RepSent) {
            self.establish(id.0, [0; rep_f::PRIVATE_DATA_LEN]);
        }
    }

    fn establish(&mut self, id: u32, private_data: [u8; rep_f::PRIVATE_DATA_LEN]) {
        let Some(c) = self.conns.get_mut(id) else { return };
        c.state = State::Established;
        c.deadline = None;
        let qpn = c.qpn.unwrap_or_default();
        self.events.push_back(CmEvent::Established { id: ConnId(id), qpn, private_data });
    }

    /// Start a disconnect: QP to ERROR, DREQ sent; `Disconnected` follows on DREP or timeout.
    pub fn disconnect(&mut self, v: &mut V, id: ConnId) -> Result<(), CmError<V::Error>> {
        let c = self.conns.get(id.0).ok_or(CmError::UnknownConn(id))?;
        match c.state {
            State::Established | State::RepSent => {}
            State::Resolving | State::ReqSent | State::MraReqRcvd => {
                // Not connected yet: abandon (REJ TIMEOUT tells the peer, as Linux does on destroy).
                self.abandon_active(v, id.0);
                self.events.push_back(CmEvent::Disconnected { id });
                return Ok(());
            }
            _ => return Err(CmError::BadState(id)),
        }
        if let (Some(q), false) = (c.qpn, c.app_qp) {
            let _ = v.qp_to_error(q);
        }
        let dreq = Dreq { local_comm_id: id.0, remote_comm_id: c.remote_id, remote_qpn: c.remote_qpn, private_data: [0; short_f::DREQ_PRIVATE_DATA_LEN] };
        let tid = self.tid_for(id.0);
        let t = self.req_timeout_ns(self.cfg.cm_response_timeout);
        let retries = self.cfg.max_cm_retries;
        self.conns.get_mut(id.0).expect("checked").state = State::DreqSent;
        self.send_for(v, id.0, CmMsg::Dreq(dreq).encode(tid), Some((t, retries)));
        Ok(())
    }

    fn abandon_active(&mut self, v: &mut V, id: u32) {
        let Some(c) = self.conns.get(id) else { return };
        if c.state != State::Resolving {
            let mut ari = [0u8; rej_f::ARI_LEN];
            ari[..8].copy_from_slice(&self.guid.to_be_bytes());
            let rej = Rej { local_comm_id: id, remote_comm_id: c.remote_id, message_rejected: msg_code::REQ, reject_info_length: 8, reason: rej_reason::TIMEOUT, ari, private_data: [0; rej_f::PRIVATE_DATA_LEN] };
            let (ip, mac, tid) = (c.peer_ip, c.peer_mac, c.req_tid);
            self.send_mad(v, ip, mac, &CmMsg::Rej(rej).encode(tid));
        }
        self.drop_qp(v, id);
        self.forget(id);
    }

    /// Forget conn `id`'s QP; a CM-owned one is moved to ERROR and destroyed.
    fn drop_qp(&mut self, v: &mut V, id: u32) {
        let Some(c) = self.conns.get_mut(id) else { return };
        if c.app_qp {
            c.qpn = None;
            return;
        }
        if let Some(q) = c.qpn.take() {
            let _ = v.qp_to_error(q);
            if let Err(e) = v.destroy_qp(q) {
                warn!("cm: destroy {q} failed: {e:?}");
            }
        }
    }

    fn enter_timewait(&mut self, id: u32) {
        if let Some(c) = self.conns.get_mut(id) {
            c.state = State::TimeWait;
            c.deadline = Some(self.now.saturating_add(self.cfg.timewait_ns));
            c.retries_left = 0;
            // Its remote QPN is free for a new connection (Linux cm_enter_timewait).
            let k = key(c.peer_ip, c.remote_qpn);
            self.by_qpn.remove_if(k, |v| *v == id);
        }
    }

    /// Close conn `id` locally: QP destroyed, timewait, `Disconnected` event.
    fn close(&mut self, v: &mut V, id: u32) {
        self.drop_qp(v, id);
        self.enter_timewait(id);
        self.events.push_back(CmEvent::Disconnected { id: ConnId(id) });
    }

    /// Do CM work: reap QP1 completions, handle MADs, run timers. Returns the next event.
    /// `now_ns` is a monotonic clock; all CM timers use it.
    pub fn poll(&mut self, v: &mut V, now_ns: u64) -> Option<CmEvent> {
        self.now = now_ns;
        let cq = v.gsi_cq();
        let mut wcs = [Completion::default(); 16];
        loop {
            let n = v.poll_cq(cq, &mut wcs);
            for wc in &wcs[..n] {
                if wc.wr_id & SEND_TAG != 0 {
                    if let Some(b) = self.send_busy.get_mut((wc.wr_id & !SEND_TAG) as usize) {
                        if core::mem::take(b) {
                            self.send_inflight -= 1;
                        }
                    }
                    continue;
                }
                let slot = wc.wr_id as usize;
                if slot >= self.recv_slots {
                    continue;
                }
                if wc.status == WcStatus::Success && wc.byte_len as usize >= GRH_LEN + MAD_LEN {
                    let mut m = [0u8; GRH_LEN + MAD_LEN];
                    self.buf.read(slot * SLOT, &mut m);
                    self.handle_mad(v, &m);
                } else if wc.status == WcStatus::Success {
                    self.stats.bad_mads += 1;
                }
                if wc.status != WcStatus::WrFlushed {
                    if let Err(e) = self.post_slot(v, slot) {
                        warn!("cm: QP1 re-post failed: {e:?}");
                    }
                }
            }
            if n < wcs.len() {
                break;
            }
        }
        // CM timers are milliseconds and up; scanning the table every 100 µs is plenty and
        // keeps a tight app poll loop cheap.
        if now_ns >= self.next_timer_scan {
            self.next_timer_scan = now_ns.saturating_add(TIMER_SCAN_NS);
            self.run_timers(v);
        }
        self.events.pop_front()
    }

    /// The earliest time a [`Cm::poll`] has work without a MAD arriving: an event still queued
    /// (`now` of the last poll), a resend or give-up deadline, the end of a timewait, a REQ
    /// waiting for its peer's address (ours, or a peer's held one: looked at every timer scan), the limiter's sweep. Timers
    /// run on scans [`TIMER_SCAN_NS`] apart, so this is never before the next scan. For
    /// event-driven loops that jump a virtual clock over idle time; `None`: no timer.
    pub fn next_timer(&self) -> Option<u64> {
        if !self.events.is_empty() {
            return Some(self.now);
        }
        let mut t = if self.limiter.sources() > 0 { self.next_sweep } else { u64::MAX };
        if !self.unrouted.is_empty() {
            // A held REQ is looked at on every scan (its address may have resolved).
            t = t.min(self.next_timer_scan);
        }
        for i in 0..self.conns.scan_end() {
            let Some(c) = self.conns.id_at(i).and_then(|id| self.conns.get(id)) else { continue };
            if c.state == State::Resolving {
                t = t.min(self.next_timer_scan);
            } else if let Some(d) = c.deadline {
                t = t.min(d);
            }
        }
        (t != u64::MAX).then(|| t.max(self.next_timer_scan))
    }

    fn run_timers(&mut self, v: &mut V) {
        let now = self.now;
        if now >= self.next_sweep {
            self.limiter.sweep(now);
            self.next_sweep = now.saturating_add(self.cfg.limits.log_interval_ns);
        }
        self.replay_unrouted(v);
        for i in 0..self.conns.scan_end() {
            let Some(id) = self.conns.id_at(i) else { continue };
            if self.conns.get(id).is_some_and(|c| c.state == State::Resolving) {
                self.try_send_req(v, id);
                if let Some(c) = self.conns.get(id) {
                    if c.state == State::Resolving && c.active.is_some_and(|a| now >= a.resolve_deadline) {
                        self.drop_qp(v, id);
                        self.forget(id);
                        self.events.push_back(CmEvent::Unreachable { id: ConnId(id) });
                    }
                }
                continue;
            }
            let Some(c) = self.conns.get_mut(id) else { continue };
            if !c.deadline.is_some_and(|d| now >= d) {
                continue;
            }
            if c.state == State::TimeWait {
                self.forget(id);
                continue;
            }
            if c.retries_left > 0 {
                c.retries_left -= 1;
                c.deadline = Some(now.saturating_add(c.timeout_ns));
                if let Some(m) = c.last {
                    let (ip, mac) = (c.peer_ip, c.peer_mac);
                    self.stats.resends += 1;
                    debug!("cm: resend attr {:#x} for {id:#x}", u16::from_be_bytes([m[16], m[17]]));
                    self.send_mad(v, ip, mac, &m);
                }
                continue;
            }
            match c.state {
                State::ReqSent | State::MraReqRcvd => {
                    self.abandon_active(v, id);
                    self.events.push_back(CmEvent::Unreachable { id: ConnId(id) });
                }
                State::RepSent => {
                    // No RTU: tell the peer (REJ TIMEOUT), drop the QP.
                    let mut ari = [0u8; rej_f::ARI_LEN];
                    ari[..8].copy_from_slice(&self.guid.to_be_bytes());
                    let rej = Rej { local_comm_id: id, remote_comm_id: c.remote_id, message_rejected: msg_code::REP, reject_info_length: 8, reason: rej_reason::TIMEOUT, ari, private_data: [0; rej_f::PRIVATE_DATA_LEN] };
                    let (ip, mac, tid) = (c.peer_ip, c.peer_mac, c.req_tid);
                    self.send_mad(v, ip, mac, &CmMsg::Rej(rej).encode(tid));
                    self.drop_qp(v, id);
                    self.enter_timewait(id);
                    self.events.push_back(CmEvent::Unreachable { id: ConnId(id) });
                }
                State::DreqSent => self.close(v, id),
                State::ReqRcvd | State::MraReqSent => {
                    // The app never decided; the peer has given up by now.
                    self.enter_timewait(id);
                    self.events.push_back(CmEvent::Unreachable { id: ConnId(id) });
                }
                _ => c.deadline = None,
            }
        }
    }
}
