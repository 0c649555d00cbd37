//! The NVMe-RDMA transport of the target, over `rdma::Verbs`: one RC QP and CQ per NVMe queue,
//! receive buffers sized from IOCCSZ, in-capsule data, keyed SGLs served by RDMA READ/WRITE,
//! SEND WITH INVALIDATE for 0x4F keys, receive re-posted before the response SEND.
//!
//! Each queue has `depth` slots; slot `i` owns receive buffer `i`, response buffer `i` and
//! data buffer `i` (all DMA memory registered once). I/O data moves between the namespace and
//! the host only by DMA: with namespace memory registered, keyed-SGL Reads are RDMA WRITTEN
//! from it and Writes RDMA READ into it (zero copy; overlapping commands ordered by
//! `ranges`); otherwise through the slot's data buffer (block device ↔ data buffer ↔ RDMA).
//! The CPU copies only the 64-byte SQE, the 16-byte CQE, and admin payloads. One state
//! machine per command (`Slot` + `SlotState`), driven by the core's `Action`s; completions
//! reach queue and slot by index (`WrId`). Facts: Linux drivers/nvme/target/rdma.c
//! behaviour, include/linux/nvme-rdma.h, shared/reference/wire.md §3.

use alloc::collections::VecDeque;
use alloc::vec::Vec;

use blockdev::BlockDevice;
use hal::DmaRegion;
use rdma::{Access, Completion, Cqn, Lkey, Qpn, RcConnectAttrs, RecvWr, Rkey, SendOp, SendWr, Sge, Verbs, WcOpcode, WcStatus};
use zerocopy::byteorder::little_endian::{U16, U32};
use zerocopy::{FromBytes, IntoBytes};

use super::limits::Bound;
use super::{host_to_ctrl, Action, Core, DataIn, Fetch, PendingWrite, QueueState, ADMIN_MAX_XFER, ADMIN_QUEUE_DEPTH, MAX_AERS};
use admit::Ip;
use rdma::cm_wire::gid_from_ipv4;
use crate::bench::Histogram;
use crate::wire::*;

mod admit;
mod ranges;
mod wr_id;
pub use admit::Pinned;
use ranges::{InFlight, RangeId};
use wr_id::{Kind, WrId};

/// Block completions handled per batch (the core is asked for no more than this at once).
const BLOCK_BATCH: usize = 64;

/// `wr_id` of work request `kind` for slot `slot` of queue `conn` (generation `gen`).
#[inline(always)]
fn wr_id(conn: usize, gen: u16, kind: Kind, slot: u16) -> u64 {
    WrId::new(conn, gen, kind, slot, RangeId::NONE).raw()
}

/// Transport counters (never reset).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransportStats {
    pub conns_accepted: u64,
    pub conns_rejected: u64,
    pub conns_closed: u64,
    pub capsules: u64,
    pub bad_capsules: u64,
    pub responses: u64,
    pub error_responses: u64,
    pub rdma_reads: u64,
    pub rdma_writes: u64,
    pub send_invalidate: u64,
    pub inline_writes: u64,
    /// Bytes the CPU copied on admin paths (Identify, logs, Connect data).
    pub admin_copy_bytes: u64,
    /// Bytes the CPU copied on I/O paths (only DSM range lists; reads and writes copy 0).
    pub io_copy_bytes: u64,
    pub wc_errors: u64,
    pub post_errors: u64,
    /// Work requests posted (receives and sends).
    pub posts: u64,
    /// Commands changing namespace memory held until overlapping zero-copy transfers
    /// (reads being sent, writes landing) were done.
    pub held_writes: u64,
    /// Zero-copy reads held until an overlapping zero-copy write had landed.
    pub held_reads: u64,
    /// Keyed-SGL writes whose data the adapter placed straight into namespace memory.
    pub direct_writes: u64,
    /// Zero-copy transfers that did not fit the range table (must stay 0; failed INTERNAL).
    pub range_overflow: u64,
    /// Send doorbells asked of the device: sends are written with `post_send_deferred` and
    /// each QP is rung at most once per `poll` turn.
    pub send_doorbells: u64,
    /// Block completions reported beyond the batch asked for (must stay 0: the core keeps
    /// what does not fit for the next batch).
    pub block_done_lost: u64,
    /// Queues closed by the target that did not fit the list for the CM (must stay 0).
    pub closed_overflow: u64,
    /// Commands that did not fit a queue's RDMA READ wait list (must stay 0).
    pub read_wait_overflow: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    /// Receive buffer posted, waiting for a capsule.
    Posted,
    /// Waiting for an RDMA READ slot (outstanding READ limit).
    ReadWait,
    /// RDMA READ of host data in flight.
    Reading,
    /// Block I/O in flight.
    Executing,
    /// Held: it overlaps namespace memory a zero-copy transfer is still using; `Slot::resume`
    /// says what it does once free.
    Blocked,
}

/// What a held slot does when nothing overlaps it any more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resume {
    /// Execute the command (in-capsule Write, Write Zeroes, DSM).
    Execute,
    /// RDMA READ a Write's data into namespace memory.
    Fetch,
    /// RDMA WRITE a zero-copy Read's data and respond.
    Send,
}

#[derive(Clone, Copy)]
struct Slot {
    state: SlotState,
    sqe: Sqe,
    sgl: Option<Sgl>,
    /// Capsule bytes received.
    byte_len: u32,
    pending: u16,
    status: Status,
    t0: u64,
    /// Zero-copy Read (Write): namespace memory the data is sent from (lands in); 0 = the
    /// slot's data buffer.
    direct_addr: u64,
    direct_lkey: Lkey,
    /// Host data is in the slot's buffer (a fetched payload).
    fetched: bool,
    /// A decoded Write waiting for (or placing) its data.
    write: Option<PendingWrite>,
    /// The zero-copy range this command holds (carried in the response's `wr_id`, whose
    /// completion ends a Read's range even after the slot took its next capsule).
    range: RangeId,
    resume: Resume,
}

struct Conn<V: Verbs> {
    gen: u16,
    qpn: Qpn,
    cq: Cqn,
    q: QueueState,
    depth: u16,
    capsule: usize,
    /// Largest data transfer a command may describe now (Connect data until admitted).
    xfer: usize,
    /// Bytes of `data` per slot: 0 until admitted (every slot shares the Connect buffer).
    stride: usize,
    /// The per-slot transfer size granted once Connect admitted the queue.
    full_xfer: usize,
    recv: V::Buf,
    recv_lkey: Lkey,
    rsp: V::Buf,
    rsp_lkey: Lkey,
    data: V::Buf,
    data_lkey: Lkey,
    /// The Connect buffer, kept (it is small) once `data` is the admitted queue's buffer: an
    /// RDMA READ a host issued before its Connect completed may still land in it.
    pre_data: Option<(V::Buf, Lkey)>,
    /// When the CM accepted the queue (the Connect deadline runs from here) and the
    /// peer's address (unadmitted queues are bounded per source).
    accepted_ns: u64,
    source: rdma::Ipv4,
    slots: Vec<Slot>,
    /// Slots waiting for an RDMA READ slot; room for every slot, reserved at accept.
    read_wait: VecDeque<u16>,
    reads_in_flight: u8,
    max_reads: u8,
    aer_rsp_next: u16,
    /// Torn down: QP gone, waiting for block I/O to drain before freeing buffers.
    draining: bool,
    /// Respond, then close (Fabrics Disconnect).
    close_after_send: bool,
    /// Send WRs written this turn and not yet rung.
    unrung: bool,
}

impl<V: Verbs> Conn<V> {
    /// Offset of slot `s`'s data in `data`.
    #[inline(always)]
    fn data_off(&self, s: u16) -> usize {
        s as usize * self.stride
    }
}

/// One namespace region registered for zero-copy reads, as `lkeys.len()` registrations:
/// registration `i` starts at `base + i * chunk` and runs `chunk + max_io_bytes` (clipped to
/// the region), so any I/O that starts in chunk `i` lies inside it. One registration when
/// the device takes the whole region at once.
struct NsMr {
    base: u64,
    len: u64,
    chunk: u64,
    lkeys: Vec<Lkey>,
}

/// Chunk sizes tried when a device refuses to register a whole namespace at once (an mlx5
/// MTT list fits about 18 MiB of 4 KiB pages in one command).
const NS_CHUNKS: [u64; 4] = [16 << 20, 4 << 20, 1 << 20, 256 << 10];

/// The RDMA target: the core plus its queues.
pub struct RdmaTarget<V: Verbs, B: BlockDevice> {
    pub core: Core<B>,
    conns: Vec<Option<Conn<V>>>,
    gen: u16,
    wc: [Completion; 32],
    /// Block completions of the current batch.
    block_done: [(u64, Status); BLOCK_BATCH],
    /// Room for every queue (each is listed at most once per teardown), reserved at start.
    closed: VecDeque<Qpn>,
    turnaround_clock: Option<fn() -> u64>,
    /// Small host→controller payloads (Connect data, DSM ranges) copied here for parsing.
    scratch_in: alloc::boxed::Box<[u8; 4096]>,
    next_ka_check_ns: u64,
    /// The time of the last `poll` (accept has no clock of its own).
    now_ns: u64,
    /// Namespace memory registered for zero-copy reads.
    ns_mrs: Vec<NsMr>,
    ns_registered: bool,
    /// Namespace memory zero-copy transfers are using.
    inflight: InFlight,
    /// Commands held until overlapping zero-copy transfers are done: (conn, gen, slot).
    blocked: alloc::collections::VecDeque<(usize, u16, u16)>,
    /// Queues with sends written this turn, to ring at its end (overflow: scan them all).
    unrung: heapless::Vec<u16, 64>,
    unrung_overflow: bool,
    /// One past the highest live queue index.
    hi: usize,
    /// Receive CQE seen → response SEND posted, in clock units (when a clock is set).
    pub turnaround: Histogram,
    pub stats: TransportStats,
}

impl<V: Verbs, B: BlockDevice> RdmaTarget<V, B> {
    /// A target serving `core` on at most `max_queues` RDMA queues.
    pub fn new(core: Core<B>, max_queues: usize) -> Self {
        // A work request names its queue in 12 bits.
        let max_queues = max_queues.min(wr_id::MAX_QUEUES);
        let mut conns = Vec::with_capacity(max_queues);
        conns.resize_with(max_queues, || None);
        // Every slot of every queue, twice (a slot may take its next read before the previous
        // response's completion is seen): no allocation on the I/O path.
        let slots = max_queues * core.config().io_queue_depth as usize;
        RdmaTarget {
            core,
            conns,
            gen: 1,
            wc: [Completion::default(); 32],
            block_done: [(0, Status::SUCCESS); BLOCK_BATCH],
            closed: VecDeque::with_capacity(max_queues),
            turnaround_clock: None,
            scratch_in: alloc::boxed::Box::new([0; 4096]),
            next_ka_check_ns: 0,
            now_ns: 0,
            ns_mrs: Vec::new(),
            ns_registered: false,
            inflight: InFlight::with_capacity(2 * slots),
            blocked: alloc::collections::VecDeque::with_capacity(slots),
            unrung: heapless::Vec::new(),
            unrung_overflow: false,
            hi: 0,
            turnaround: Histogram::new(),
            stats: TransportStats::default(),
        }
    }

    /// Measure per-command turnaround with `clock` (e.g. the TSC).
    pub fn set_turnaround_clock(&mut self, clock: fn() -> u64) {
        self.turnaround_clock = Some(clock);
    }

    /// Register the namespaces' direct memory ([`Core::direct_regions`]) with `verbs` once,
    /// so Reads are sent to the host straight from the namespace and keyed-SGL Writes land
    /// straight in it (no copy through a slot buffer). Done by the first `accept`; if a registration fails, reads keep using the
    /// slot buffers. Returns whether zero-copy reads are on.
    pub fn register_namespaces(&mut self, verbs: &mut V) -> bool {
        if self.ns_registered {
            return !self.ns_mrs.is_empty();
        }
        self.ns_registered = true;
        let regions = self.core.direct_regions();
        let overlap = self.core.config().max_io_bytes as u64;
        for (base, len) in regions.iter().copied() {
            let mut done = false;
            for chunk in core::iter::once(len).chain(NS_CHUNKS.iter().copied().filter(|&c| c < len)) {
                if let Some(lkeys) = Self::reg_chunks(verbs, base, len, chunk, overlap) {
                    self.ns_mrs.push(NsMr { base, len, chunk, lkeys });
                    done = true;
                    break;
                }
            }
            if !done {
                log::warn!("nvmeof: rdma: namespace memory at {base:#x} ({len} B) not registered: reads copy");
                self.release_namespaces(verbs);
                self.ns_registered = true;
                return false;
            }
        }
        let on = !self.ns_mrs.is_empty();
        self.core.set_direct(on);
        on
    }

    /// Register `[base, base+len)` as chunks of `chunk` bytes (+ `overlap`); all or none.
    fn reg_chunks(verbs: &mut V, base: u64, len: u64, chunk: u64, overlap: u64) -> Option<Vec<Lkey>> {
        // Local write: keyed-SGL Writes RDMA READ host data straight into namespace memory.
        // No remote access: the host never gets a key to it.
        let access = Access { local_write: true, remote_read: false, remote_write: false };
        let mut lkeys = Vec::new();
        let mut off = 0;
        while off < len {
            let n = core::cmp::min(chunk.saturating_add(overlap), len - off);
            match verbs.reg_mr(base + off, n, access) {
                Ok((lkey, _)) => lkeys.push(lkey),
                Err(_) => {
                    for k in lkeys {
                        let _ = verbs.dereg_mr(k);
                    }
                    return None;
                }
            }
            off += chunk;
        }
        Some(lkeys)
    }

    /// Deregister the namespace memory (shutdown, leak checks); reads go back to copying and
    /// the next `accept` registers again.
    pub fn release_namespaces(&mut self, verbs: &mut V) {
        self.core.set_direct(false);
        for m in self.ns_mrs.drain(..) {
            for k in m.lkeys {
                let _ = verbs.dereg_mr(k);
            }
        }
        self.ns_registered = false;
    }

    /// The key of the registration holding an I/O (at most `max_io_bytes`) that starts at `addr`.
    fn ns_lkey(&self, addr: u64) -> Option<Lkey> {
        let m = self.ns_mrs.iter().find(|m| addr >= m.base && addr - m.base < m.len)?;
        m.lkeys.get(((addr - m.base) / m.chunk) as usize).copied()
    }

    /// Live queues.
    pub fn queues(&self) -> usize {
        self.conns.iter().flatten().filter(|c| !c.draining).count()
    }

    /// QPs the target closed on its own (keep-alive expiry, errors, Disconnect): the CM
    /// should send DREQ for them.
    pub fn take_closed(&mut self) -> Option<Qpn> {
        self.closed.pop_front()
    }

    /// A CM connect request arrived. `private` is the NVMe-RDMA REQ private data (after
    /// rdma_cm's header); `attrs` are the RC attributes the CM derived from the REQ. On success
    /// the QP is in RTS with its receives posted; the CM sends a REP with the returned private
    /// data and our QPN. On failure the CM sends REJ (reason 28) with the returned private data.
    pub fn accept(&mut self, verbs: &mut V, private: &[u8], attrs: &RcConnectAttrs) -> Result<(Qpn, RdmaCmRep), RdmaCmRej> {
        let rej = |sts: u16| RdmaCmRej { recfmt: U16::new(0), sts: U16::new(sts) };
        let r = self.accept_inner(verbs, private, attrs);
        match r {
            Ok(x) => {
                self.stats.conns_accepted += 1;
                Ok(x)
            }
            Err(sts) => {
                self.stats.conns_rejected += 1;
                log::warn!("nvmeof: rdma: connect request rejected (nvme-rdma status {sts})");
                Err(rej(sts))
            }
        }
    }

    fn accept_inner(&mut self, verbs: &mut V, private: &[u8], attrs: &RcConnectAttrs) -> Result<(Qpn, RdmaCmRep), u16> {
        if private.len() < RdmaCmReq::SIZE {
            return Err(cm_rej::INVALID_LEN);
        }
        let req = RdmaCmReq::read_from_bytes(&private[..RdmaCmReq::SIZE]).map_err(|_| cm_rej::INVALID_LEN)?;
        if req.recfmt.get() != 0 {
            return Err(cm_rej::INVALID_RECFMT);
        }
        let qid = req.qid.get();
        if qid != 0 && !self.ns_registered {
            self.register_namespaces(verbs);
        }
        self.admission_room(attrs.remote_ip)?;
        let cfg = self.core.config();
        if qid > cfg.max_io_queues {
            return Err(cm_rej::INVALID_QID);
        }
        let depth = req.hsqsize.get() as u32 + 1;
        let max = if qid == 0 { ADMIN_QUEUE_DEPTH as u32 } else { cfg.io_queue_depth as u32 };
        if depth < 2 || depth > max {
            return Err(cm_rej::INVALID_HSQSIZE);
        }
        if req.hrqsize.get() == 0 {
            return Err(cm_rej::INVALID_HRQSIZE);
        }
        let Some(idx) = self.conns.iter().position(|c| c.is_none()) else {
            self.core.bound_hit(Bound::Queues, self.now_ns, &Ip(attrs.remote_ip));
            return Err(cm_rej::NO_RESOURCES);
        };
        let depth = depth as u16;
        let capsule = if qid == 0 { 64 } else { self.core.io_capsule_size() };
        let xfer = if qid == 0 { ADMIN_MAX_XFER } else { cfg.max_io_bytes as usize };
        let Ok(conn) = self.build_conn(verbs, qid, depth, capsule, xfer, attrs) else {
            self.core.bound_hit(Bound::Memory, self.now_ns, &Ip(attrs.remote_ip));
            return Err(cm_rej::NO_RESOURCES);
        };
        let qpn = conn.qpn;
        self.conns[idx] = Some(conn);
        self.hi = self.hi.max(idx + 1);
        // Post every receive buffer before the REP goes out (one batch).
        let mut wrs = Vec::new();
        if wrs.try_reserve_exact(depth as usize).is_err() {
            self.teardown(verbs, idx, false);
            return Err(cm_rej::NO_RESOURCES);
        }
        let c = self.conns[idx].as_ref().expect("just stored");
        wrs.extend((0..depth).map(|s| RecvWr {
            wr_id: wr_id(idx, c.gen, Kind::Recv, s),
            sge: Sge { addr: c.recv.paddr() + (s as usize * c.capsule) as u64, len: c.capsule as u32, lkey: c.recv_lkey },
        }));
        self.stats.posts += depth as u64;
        if verbs.post_recv_batch(qpn, &wrs).is_err() {
            self.teardown(verbs, idx, false);
            return Err(cm_rej::NO_RESOURCES);
        }
        log::info!("nvmeof: rdma: queue {qid} accepted on {qpn}, depth {depth}");
        let rep = RdmaCmRep { recfmt: U16::new(0), crqsize: U16::new(depth), rsvd: [0; 28] };
        Ok((qpn, rep))
    }

    fn build_conn(&mut self, verbs: &mut V, qid: u16, depth: u16, capsule: usize, xfer: usize, attrs: &RcConnectAttrs) -> Result<Conn<V>, ()> {
        // Heap first (fallible: an exhausted heap is a refusal, not a panic), then the device.
        let mut slots = Vec::new();
        slots.try_reserve_exact(depth as usize).map_err(|_| ())?;
        let mut read_wait = VecDeque::new();
        read_wait.try_reserve_exact(depth as usize).map_err(|_| ())?;
        let d = depth as u32;
        let cq = verbs.create_cq(4 * d + 2 * MAX_AERS as u32 + 4).map_err(|_| ())?;
        let qpn = match verbs.create_rc_qp(cq, cq, 3 * d + MAX_AERS as u32 + 1, d) {
            Ok(q) => q,
            Err(_) => {
                let _ = verbs.destroy_cq(cq);
                return Err(());
            }
        };
        let res = (|| {
            verbs.connect_rc_qp(qpn, attrs)?;
            let local = Access { local_write: true, remote_read: false, remote_write: false };
            let recv = verbs.alloc_buf(depth as usize * capsule)?;
            let (recv_lkey, _) = verbs.reg_mr(recv.paddr(), recv.len() as u64, local)?;
            let rsp = verbs.alloc_buf((depth as usize + MAX_AERS) * Cqe::SIZE)?;
            let (rsp_lkey, _) = verbs.reg_mr(rsp.paddr(), rsp.len() as u64, local)?;
            // Until Connect admits the queue, only the Connect data buffer (see `admit`).
            let data = verbs.alloc_buf(ConnectData::SIZE)?;
            let (data_lkey, _) = verbs.reg_mr(data.paddr(), data.len() as u64, local)?;
            Ok::<_, V::Error>((recv, recv_lkey, rsp, rsp_lkey, data, data_lkey))
        })();
        let (recv, recv_lkey, rsp, rsp_lkey, data, data_lkey) = match res {
            Ok(x) => x,
            Err(_) => {
                let _ = verbs.destroy_qp(qpn);
                let _ = verbs.destroy_cq(cq);
                return Err(());
            }
        };
        // 12 bits of generation in a `WrId`.
        self.gen = ((self.gen + 1) & 0xFFF).max(1);
        let slot = Slot {
            state: SlotState::Posted,
            sqe: Sqe::zeroed(),
            sgl: None,
            byte_len: 0,
            pending: 0,
            status: Status::SUCCESS,
            t0: 0,
            direct_addr: 0,
            direct_lkey: Lkey(0),
            fetched: false,
            write: None,
            range: RangeId::NONE,
            resume: Resume::Execute,
        };
        slots.resize(depth as usize, slot);
        Ok(Conn {
            gen: self.gen,
            qpn,
            cq,
            q: QueueState { peer_gid: gid_from_ipv4(attrs.remote_ip), peer_qpn: attrs.remote_qpn.0, ..QueueState::new(qid) },
            depth,
            capsule,
            xfer: ConnectData::SIZE,
            stride: 0,
            full_xfer: xfer,
            recv,
            recv_lkey,
            rsp,
            rsp_lkey,
            data,
            data_lkey,
            pre_data: None,
            accepted_ns: self.now_ns,
            source: attrs.remote_ip,
            slots,
            read_wait,
            reads_in_flight: 0,
            max_reads: attrs.max_rd_atomic.clamp(1, 16),
            aer_rsp_next: 0,
            draining: false,
            close_after_send: false,
            unrung: false,
        })
    }

    /// The host (or the CM) closed the connection of `qpn`.
    pub fn disconnected(&mut self, verbs: &mut V, qpn: Qpn) {
        if let Some(i) = self.conns.iter().position(|c| c.as_ref().is_some_and(|c| c.qpn == qpn && !c.draining)) {
            self.teardown(verbs, i, false);
        }
    }

    fn post_recv(&mut self, verbs: &mut V, ci: usize, s: u16) -> Result<(), V::Error> {
        let c = self.conns[ci].as_mut().expect("live conn");
        let wr = RecvWr {
            wr_id: wr_id(ci, c.gen, Kind::Recv, s),
            sge: Sge { addr: c.recv.paddr() + (s as usize * c.capsule) as u64, len: c.capsule as u32, lkey: c.recv_lkey },
        };
        c.slots[s as usize].state = SlotState::Posted;
        self.stats.posts += 1;
        verbs.post_recv(c.qpn, &wr)
    }

    /// Controller `cntlid` was reset (CC.EN 1 -> 0): tear down its I/O queues (the CM sends
    /// DREQ for each, `take_closed`); its admin queue stays.
    fn reset_io_queues(&mut self, verbs: &mut V, cntlid: u16) {
        for j in 0..self.hi {
            let io = self.conns[j].as_ref().is_some_and(|o| !o.draining && o.q.qid != 0 && o.q.cntlid == Some(cntlid));
            if io {
                self.teardown(verbs, j, true);
            }
        }
    }

    /// Tear a queue down (and, for an admin queue, every queue of its controller).
    fn teardown(&mut self, verbs: &mut V, ci: usize, notify_cm: bool) {
        let Some(c) = self.conns[ci].as_mut() else { return };
        if c.draining {
            return;
        }
        c.draining = true;
        let gen = c.gen;
        // Its QP is gone with everything in flight: forget its zero-copy ranges and held commands.
        self.inflight.remove_queue(ci, gen);
        self.blocked.retain(|b| b.0 != ci || b.1 != gen);
        let c = self.conns[ci].as_mut().expect("live");
        let _ = verbs.qp_to_error(c.qpn);
        let _ = verbs.destroy_qp(c.qpn);
        let _ = verbs.destroy_cq(c.cq);
        if notify_cm {
            if self.closed.len() < self.closed.capacity() {
                self.closed.push_back(c.qpn);
            } else {
                // Cannot happen (one entry per queue); counted, the host's DREQ/timeout frees it.
                self.stats.closed_overflow += 1;
            }
        }
        let q = c.q;
        self.stats.conns_closed += 1;
        log::info!("nvmeof: rdma: queue {} on {} closed", q.qid, c.qpn);
        self.core.queue_gone(&q);
        self.maybe_free(verbs, ci);
        if q.qid == 0 {
            if let Some(id) = q.cntlid {
                for j in 0..self.conns.len() {
                    let same = self.conns[j].as_ref().is_some_and(|o| !o.draining && o.q.cntlid == Some(id));
                    if same {
                        // The target closes these itself, whoever closed the admin queue: the
                        // CM must say so to the host (DREQ) and forget them, or its record and
                        // the service's CM-ID -> QPN entry outlive the QP, and once the QPN is
                        // reused a late event for the old connection closes another host's
                        // queue (emu/sim seed 23 with 4 initiators).
                        self.teardown(verbs, j, true);
                    }
                }
            }
        }
    }

    fn maybe_free(&mut self, verbs: &mut V, ci: usize) {
        let Some(c) = self.conns[ci].as_ref() else { return };
        if c.draining && c.slots.iter().all(|s| s.state != SlotState::Executing) {
            let c = self.conns[ci].take().expect("checked");
            self.hi = self.conns.iter().rposition(|c| c.is_some()).map_or(0, |i| i + 1);
            let _ = verbs.dereg_mr(c.recv_lkey);
            let _ = verbs.dereg_mr(c.rsp_lkey);
            let _ = verbs.dereg_mr(c.data_lkey);
            if let Some((_, k)) = c.pre_data {
                let _ = verbs.dereg_mr(k);
            }
            // Buffers drop here: memory returns to the platform.
        }
    }

    /// Run the target: completions, block I/O, async events, keep-alive. `now_ns` is a
    /// monotonic clock. Returns the number of events handled.
    pub fn poll(&mut self, verbs: &mut V, now_ns: u64) -> usize {
        self.now_ns = now_ns;
        let mut work = 0;
        for ci in 0..self.hi {
            let Some(c) = self.conns[ci].as_ref() else { continue };
            if c.draining {
                continue;
            }
            let cq = c.cq;
            let n = verbs.poll_cq(cq, &mut self.wc);
            work += n;
            for k in 0..n {
                let wc = self.wc[k];
                self.on_completion(verbs, &wc, now_ns);
            }
            // Report what this queue's capsules finished before the next queue submits more
            // (keeps the devices' completion rings short).
            if n > 0 {
                work += self.drain_block(verbs);
            }
        }
        work += self.drain_block(verbs);
        while let Some((tag, dw0)) = self.core.take_aen() {
            work += 1;
            self.complete_aer(verbs, tag, dw0);
        }
        // Keep-alive timers have 100 ms granularity (KAS); look at them once per millisecond.
        if now_ns >= self.next_ka_check_ns {
            self.next_ka_check_ns = now_ns.saturating_add(1_000_000);
            work += self.check_keep_alive(verbs, now_ns);
            work += self.expire_unadmitted(verbs, now_ns);
        }
        // Held writes whose overlapping reads have been sent (or whose queues went away).
        if !self.blocked.is_empty() {
            self.run_blocked(verbs, now_ns);
        }
        self.ring_doorbells(verbs);
        work
    }

    /// Block completions: taken in batches no larger than the list they go to (the core
    /// leaves the rest in the devices), until the devices have none.
    #[inline]
    fn drain_block(&mut self, verbs: &mut V) -> usize {
        if !self.core.block_inflight() {
            return 0;
        }
        let mut work = 0;
        loop {
            let mut k = 0;
            let done = &mut self.block_done;
            let n = self.core.poll_block(BLOCK_BATCH, |tag, st| {
                if let Some(d) = done.get_mut(k) {
                    *d = (tag, st);
                    k += 1;
                }
            });
            // `poll_block` honours the budget; a count beyond it would be a lost completion.
            self.stats.block_done_lost += n.saturating_sub(k) as u64;
            work += k;
            for i in 0..k {
                let (tag, st) = self.block_done[i];
                self.on_block_done(verbs, tag, st);
            }
            if n < BLOCK_BATCH {
                return work;
            }
        }
    }

    /// One send doorbell per QP that had WRs written this turn.
    fn ring_doorbells(&mut self, verbs: &mut V) {
        if self.unrung_overflow {
            self.unrung_overflow = false;
            self.unrung.clear();
            for ci in 0..self.hi {
                self.ring_one(verbs, ci);
            }
            return;
        }
        while let Some(ci) = self.unrung.pop() {
            self.ring_one(verbs, ci as usize);
        }
    }

    fn ring_one(&mut self, verbs: &mut V, ci: usize) {
        let Some(c) = self.conns[ci].as_mut() else { return };
        if !c.unrung {
            return;
        }
        c.unrung = false;
        if c.draining {
            return;
        }
        self.stats.send_doorbells += 1;
        if verbs.ring_send(c.qpn).is_err() {
            self.stats.post_errors += 1;
            self.teardown(verbs, ci, true);
        }
    }

    fn check_keep_alive(&mut self, verbs: &mut V, now_ns: u64) -> usize {
        let mut work = 0;
        while let Some(id) = self.core.expired_ctrl(now_ns) {
            work += 1;
            let admin = self.conns.iter().position(|c| c.as_ref().is_some_and(|c| !c.draining && c.q.qid == 0 && c.q.cntlid == Some(id)));
            match admin {
                // Tearing down the admin queue frees the controller (Core::queue_gone).
                Some(ci) => self.teardown(verbs, ci, true),
                None => self.core.remove_ctrl(id),
            }
        }
        work
    }

    fn on_completion(&mut self, verbs: &mut V, wc: &Completion, now_ns: u64) {
        let id = WrId::from_raw(wc.wr_id);
        let (ci, gen, s) = (id.conn(), id.gen(), id.slot());
        let Some(c) = self.conns.get(ci).and_then(|c| c.as_ref()) else { return };
        if c.gen != gen || c.draining {
            return;
        }
        let kind = id.kind();
        if wc.status != WcStatus::Success {
            if wc.status != WcStatus::WrFlushed {
                self.stats.wc_errors += 1;
                log::warn!("nvmeof: rdma: {} completion error {:?} ({kind:?})", c.qpn, wc.status);
            }
            // A failed RDMA READ of a zero-copy Write leaves the command unanswered with its
            // queue: the host never sees success for data that may have landed in part.
            self.teardown(verbs, ci, true);
            return;
        }
        if s >= c.depth && kind != Some(Kind::Aer) {
            return;
        }
        match kind {
            Some(Kind::Recv) if wc.opcode == WcOpcode::Recv || wc.opcode == WcOpcode::RecvWithImm => self.on_capsule(verbs, ci, s, wc.byte_len, now_ns),
            Some(Kind::Read) => {
                let c = self.conns[ci].as_mut().expect("live");
                c.reads_in_flight = c.reads_in_flight.saturating_sub(1);
                if let Some(next) = c.read_wait.pop_front() {
                    self.post_read(verbs, ci, next);
                }
                if self.conns[ci].as_ref().is_some_and(|c| c.slots[s as usize].state == SlotState::Reading) {
                    self.data_in(verbs, ci, s, now_ns);
                }
            }
            Some(Kind::Send) => {
                // The response went out, so did the RDMA WRITE before it (RC order): the
                // namespace memory a zero-copy Read sent from may change now.
                let r = id.range();
                if !r.is_none() {
                    self.inflight.remove(r, ci, gen);
                }
                if self.conns[ci].as_ref().is_some_and(|c| c.close_after_send) {
                    self.teardown(verbs, ci, true);
                }
            }
            _ => {}
        }
    }

    /// Slot `s`'s RDMA READ completed: a zero-copy Write's data is in namespace memory
    /// (respond), a Write's data in the slot buffer (submit it), or a payload in the slot
    /// buffer (execute the command with it).
    fn data_in(&mut self, verbs: &mut V, ci: usize, s: u16, now_ns: u64) {
        let c = self.conns[ci].as_mut().expect("live");
        let gen = c.gen;
        let buf = c.data.paddr() + c.data_off(s) as u64;
        let slot = &mut c.slots[s as usize];
        let Some(w) = slot.write else {
            slot.fetched = true;
            self.execute(verbs, ci, s, now_ns);
            return;
        };
        if w.direct_addr().is_some() {
            // The data has landed in the namespace's own memory: the write is done (the device
            // would move nothing, `BlockDevice::direct`), overlapping commands may go on.
            let (r, t0) = (core::mem::replace(&mut slot.range, RangeId::NONE), slot.t0);
            self.inflight.remove(r, ci, gen);
            self.respond(verbs, ci, s, Status::SUCCESS, 0, 0, t0);
            return;
        }
        let action = self.core.write_fetched(&w, buf, wr_id(ci, gen, Kind::Block, s));
        self.on_action(verbs, ci, s, action);
    }

    fn on_capsule(&mut self, verbs: &mut V, ci: usize, s: u16, byte_len: u32, now_ns: u64) {
        self.stats.capsules += 1;
        let t0 = self.turnaround_clock.map_or(0, |f| f());
        let c = self.conns[ci].as_mut().expect("live");
        let base = s as usize * c.capsule;
        let n = core::cmp::min(byte_len as usize, 64).min(c.capsule);
        let slot = &mut c.slots[s as usize];
        if n < Sqe::SIZE {
            slot.sqe = Sqe::zeroed();
        }
        // The SQE goes straight from the receive buffer into the slot (one 64-byte copy).
        c.recv.read(base, &mut slot.sqe.as_mut_bytes()[..n]);
        slot.byte_len = byte_len;
        slot.sgl = None;
        slot.pending = 0;
        slot.status = Status::SUCCESS;
        slot.t0 = t0;
        slot.direct_addr = 0;
        slot.fetched = false;
        slot.write = None;
        slot.range = RangeId::NONE;
        match self.check_capsule(ci, s, byte_len) {
            Err(st) => {
                self.stats.bad_capsules += 1;
                let c = self.conns[ci].as_ref().expect("live");
                let q = c.q;
                let sqe = &c.slots[s as usize].sqe;
                let (cid, nsid) = (sqe.cid.get(), sqe.nsid.get());
                self.core.record_error(&q, cid, st, nsid);
                self.respond(verbs, ci, s, st, 0, 0, 0);
            }
            Ok(()) => self.execute(verbs, ci, s, now_ns),
        }
    }

    /// Validate the capsule's framing and SGL (the slot keeps the decoded SGL).
    fn check_capsule(&mut self, ci: usize, s: u16, byte_len: u32) -> Result<(), Status> {
        let c = self.conns[ci].as_mut().expect("live");
        let sqe = &c.slots[s as usize].sqe;
        if (byte_len as usize) < Sqe::SIZE || byte_len as usize > c.capsule {
            return Err(Status::INVALID_FIELD);
        }
        if sqe.flags & 0xC0 != PSDT_SGL || sqe.flags & 0x03 != 0 {
            // PRPs or fused commands are not supported on fabrics.
            return Err(Status::INVALID_FIELD);
        }
        if c.q.cntlid.is_none() && !(sqe.opcode == FABRICS_OPCODE && sqe.fctype() == fctype::CONNECT) {
            // Nothing but Connect before Connect (and no data moved for anything else).
            return Err(Status::CMD_SEQ_ERROR);
        }
        let sgl = Sgl::decode(&sqe.dptr)?;
        match sgl {
            Sgl::Inline { offset, len } if len > 0 => {
                // In-capsule data only flows host to controller, on I/O queues.
                if !host_to_ctrl(sqe) || c.q.qid == 0 {
                    return Err(Status::INVALID_FIELD);
                }
                let room = (byte_len as u64).saturating_sub(Sqe::SIZE as u64);
                if offset > room || len as u64 > room - offset {
                    return Err(Status::SGL_INVALID_OFFSET);
                }
            }
            Sgl::Keyed { len, .. } if len > 0 => {
                if len as usize > c.xfer {
                    return Err(Status::SGL_INVALID_DATA);
                }
                if byte_len as usize != Sqe::SIZE && c.q.qid == 0 {
                    return Err(Status::INVALID_FIELD);
                }
            }
            _ => {}
        }
        c.slots[s as usize].sgl = Some(sgl);
        Ok(())
    }

    /// RDMA READ slot `s`'s host data: into namespace memory (a zero-copy Write) or the
    /// slot's buffer; queued while the QP has its most READs outstanding.
    fn post_read(&mut self, verbs: &mut V, ci: usize, s: u16) {
        let c = self.conns[ci].as_mut().expect("live");
        let slot = &c.slots[s as usize];
        let Some(Sgl::Keyed { addr, len, key, .. }) = slot.sgl else { return };
        if c.reads_in_flight >= c.max_reads {
            if c.read_wait.len() >= c.read_wait.capacity() {
                // Cannot happen (a slot waits at most once); counted, and the queue is failed
                // rather than leaving the command without an answer.
                self.stats.read_wait_overflow += 1;
                self.teardown(verbs, ci, true);
                return;
            }
            c.slots[s as usize].state = SlotState::ReadWait;
            c.read_wait.push_back(s);
            return;
        }
        let sge = if slot.direct_addr != 0 {
            Sge { addr: slot.direct_addr, len, lkey: slot.direct_lkey }
        } else {
            Sge { addr: c.data.paddr() + c.data_off(s) as u64, len, lkey: c.data_lkey }
        };
        c.slots[s as usize].state = SlotState::Reading;
        c.reads_in_flight += 1;
        let wr = SendWr { wr_id: wr_id(ci, c.gen, Kind::Read, s), op: SendOp::RdmaRead { remote_addr: addr, rkey: Rkey(key) }, sge, signaled: true, ud: None };
        self.stats.rdma_reads += 1;
        self.defer_send(verbs, ci, &wr);
    }

    /// Hold slot `s` until nothing in flight overlaps it; `resume` is what it does then.
    fn hold(&mut self, ci: usize, s: u16, resume: Resume) {
        let c = self.conns[ci].as_mut().expect("live");
        let slot = &mut c.slots[s as usize];
        if slot.state != SlotState::Blocked {
            slot.state = SlotState::Blocked;
            slot.resume = resume;
            if resume == Resume::Send {
                self.stats.held_reads += 1;
            } else {
                self.stats.held_writes += 1;
            }
        }
        self.blocked.push_back((ci, c.gen, s));
    }

    /// Retry held commands (each may be held again).
    fn run_blocked(&mut self, verbs: &mut V, now_ns: u64) {
        for _ in 0..self.blocked.len() {
            let Some((ci, gen, s)) = self.blocked.pop_front() else { break };
            let Some(c) = self.conns.get(ci).and_then(|c| c.as_ref()) else { continue };
            let slot = &c.slots[s as usize];
            if c.gen != gen || c.draining || slot.state != SlotState::Blocked {
                continue;
            }
            let resume = slot.resume;
            match resume {
                Resume::Execute => self.execute(verbs, ci, s, now_ns),
                Resume::Fetch => self.fetch_direct(verbs, ci, s),
                Resume::Send => self.send_read(verbs, ci, s),
            }
        }
    }

    fn execute(&mut self, verbs: &mut V, ci: usize, s: u16, now_ns: u64) {
        let c = self.conns[ci].as_mut().expect("live");
        let slot = c.slots[s as usize];
        let sqe = slot.sqe;
        let sgl = slot.sgl.unwrap_or(Sgl::Inline { offset: 0, len: 0 });
        // A keyed SGL's data is at the host until fetched (the core says when it wants it).
        let fetched = slot.fetched || !matches!(sgl, Sgl::Keyed { len, .. } if len > 0);
        if fetched && !self.inflight.is_empty() {
            // An in-capsule Write, Write Zeroes or DSM changes memory zero-copy transfers may
            // be using: it waits for them.
            if let Some((a, n)) = self.core.modifies_direct(&c.q, &sqe) {
                if self.inflight.overlaps(a, a.saturating_add(n), false) {
                    self.hold(ci, s, Resume::Execute);
                    return;
                }
            }
        }
        let c = self.conns[ci].as_mut().expect("live");
        // AERs are completed by CID later (their slot is reused at once); others by slot.
        let tag = if sqe.opcode == admin_op::ASYNC_EVENT && c.q.qid == 0 {
            wr_id(ci, c.gen, Kind::Aer, sqe.cid.get())
        } else {
            wr_id(ci, c.gen, Kind::Block, s)
        };
        let data_pa = c.data.paddr() + c.data_off(s) as u64;
        let (buf, buf_len) = match sgl {
            Sgl::Inline { offset, len } => (c.recv.paddr() + (s as usize * c.capsule) as u64 + 64 + offset, len as usize),
            Sgl::Keyed { .. } => (data_pa, c.xfer),
        };
        // Small host→controller payloads that the core parses (not namespace data).
        let small = &mut self.scratch_in;
        let mut small_len = 0;
        if fetched && sqe.opcode != io_op::WRITE && sgl.len() > 0 && host_to_ctrl(&sqe) {
            small_len = core::cmp::min(sgl.len() as usize, small.len());
            match sgl {
                Sgl::Inline { offset, .. } => c.recv.read(s as usize * c.capsule + 64 + offset as usize, &mut small[..small_len]),
                Sgl::Keyed { .. } => c.data.read(c.data_off(s), &mut small[..small_len]),
            }
            if c.q.qid == 0 || sqe.opcode == FABRICS_OPCODE {
                self.stats.admin_copy_bytes += small_len as u64;
            } else {
                self.stats.io_copy_bytes += small_len as u64;
            }
        }
        if matches!(sgl, Sgl::Inline { len, .. } if len > 0) {
            self.stats.inline_writes += 1;
        }
        let data = DataIn { bytes: &small[..small_len], buf, buf_len, sgl_len: sgl.len(), tag, fetched };
        let action = self.core.execute(&mut c.q, &sqe, &data, now_ns);
        self.on_action(verbs, ci, s, action);
    }

    /// Carry out the core's answer for slot `s`.
    fn on_action(&mut self, verbs: &mut V, ci: usize, s: u16, action: Action) {
        match action {
            Action::Respond { status, dw0, dw1, out_len } => {
                let c = self.conns[ci].as_ref().expect("live");
                let slot = &c.slots[s as usize];
                let (sqe, t0, fetched_write) = (slot.sqe, slot.t0, slot.write.is_some());
                let sgl = slot.sgl.unwrap_or(Sgl::Inline { offset: 0, len: 0 });
                let connect = sqe.opcode == FABRICS_OPCODE && sqe.fctype() == fctype::CONNECT;
                // Admitted: now the queue gets its data buffers (refused if there are none).
                let (status, dw0) = if connect && status.is_success() && !self.admit(verbs, ci) { (Status::CONNECT_CTRL_BUSY, 0) } else { (status, dw0) };
                let c = self.conns[ci].as_mut().expect("live");
                if status.is_success() && sqe.opcode == FABRICS_OPCODE && sqe.fctype() == fctype::DISCONNECT {
                    c.close_after_send = true;
                }
                if fetched_write && !status.is_success() {
                    // `write_fetched` failed: the core leaves recording to its caller.
                    let q = c.q;
                    self.core.record_error(&q, sqe.cid.get(), status, sqe.nsid.get());
                }
                if status.is_success() && out_len > 0 {
                    let c = self.conns[ci].as_mut().expect("live");
                    let n = core::cmp::min(out_len as usize, sgl.len() as usize);
                    if let Sgl::Keyed { .. } = sgl {
                        c.data.write(c.data_off(s), &self.core.out()[..n]);
                        self.stats.admin_copy_bytes += n as u64;
                        let c = self.conns[ci].as_ref().expect("live");
                        let src = Sge { addr: c.data.paddr() + c.data_off(s) as u64, len: n as u32, lkey: c.data_lkey };
                        if !self.post_write(verbs, ci, s, src) {
                            return;
                        }
                    }
                }
                self.respond(verbs, ci, s, status, dw0, dw1, t0);
                if sqe.opcode == FABRICS_OPCODE {
                    // A Property Set may have reset the controller: drop its I/O queues.
                    while let Some(id) = self.core.take_reset() {
                        self.reset_io_queues(verbs, id);
                    }
                }
            }
            Action::Submitted { count } => {
                let c = self.conns[ci].as_mut().expect("live");
                c.slots[s as usize].state = SlotState::Executing;
                c.slots[s as usize].pending = count;
            }
            Action::SubmittedDirect { addr } => {
                let lkey = self.ns_lkey(addr);
                let c = self.conns[ci].as_mut().expect("live");
                let gen = c.gen;
                let slot = &mut c.slots[s as usize];
                slot.state = SlotState::Executing;
                slot.pending = 1;
                slot.direct_addr = addr;
                let len = slot.sgl.map_or(0, |g| g.len()) as u64;
                // From now until the response's completion, the adapter will read this
                // namespace memory: writes to it wait.
                match lkey.map(|k| (k, self.inflight.insert(addr, addr + len, false, ci, gen))) {
                    Some((k, Some(r))) => {
                        slot.direct_lkey = k;
                        slot.range = r;
                    }
                    // Cannot happen (direct is on only with every region registered, the
                    // range table has room for every slot twice); fail the command rather
                    // than send stale slot memory.
                    other => {
                        if matches!(other, Some((_, None))) {
                            self.stats.range_overflow += 1;
                        }
                        slot.status = Status::INTERNAL;
                    }
                }
            }
            Action::Fetch(Fetch::Payload) => self.post_read(verbs, ci, s),
            Action::Fetch(Fetch::Write(w)) => {
                let c = self.conns[ci].as_mut().expect("live");
                c.slots[s as usize].write = Some(w);
                match w.direct_addr() {
                    Some(addr) => {
                        self.stats.direct_writes += 1;
                        c.slots[s as usize].direct_addr = addr;
                        self.fetch_direct(verbs, ci, s);
                    }
                    None => self.post_read(verbs, ci, s),
                }
            }
            Action::Hold => {
                // The AER keeps only its CID; the receive buffer goes straight back.
                if self.post_recv(verbs, ci, s).is_err() {
                    self.stats.post_errors += 1;
                    self.teardown(verbs, ci, true);
                }
            }
        }
    }

    /// A zero-copy Write: once nothing in flight overlaps its blocks, claim them and RDMA
    /// READ the host's data straight into namespace memory.
    fn fetch_direct(&mut self, verbs: &mut V, ci: usize, s: u16) {
        let c = self.conns[ci].as_ref().expect("live");
        let slot = &c.slots[s as usize];
        let (addr, len) = (slot.direct_addr, slot.write.map_or(0, |w| w.len()) as u64);
        if self.inflight.overlaps(addr, addr + len, false) {
            self.hold(ci, s, Resume::Fetch);
            return;
        }
        let gen = c.gen;
        let lkey = self.ns_lkey(addr);
        let range = self.inflight.insert(addr, addr + len, true, ci, gen);
        let c = self.conns[ci].as_mut().expect("live");
        let slot = &mut c.slots[s as usize];
        match (lkey, range) {
            (Some(k), Some(r)) => {
                slot.direct_lkey = k;
                slot.range = r;
                self.post_read(verbs, ci, s);
            }
            _ => {
                // Cannot happen (see `SubmittedDirect`): the command fails, memory untouched.
                if let Some(r) = range {
                    self.inflight.remove(r, ci, gen);
                }
                self.stats.range_overflow += range.is_none() as u64;
                let (q, cid, nsid, t0) = (c.q, slot.sqe.cid.get(), slot.sqe.nsid.get(), slot.t0);
                self.core.record_error(&q, cid, Status::INTERNAL, nsid);
                self.respond(verbs, ci, s, Status::INTERNAL, 0, 0, t0);
            }
        }
    }

    /// RDMA WRITE `src` to the host buffer of slot `s`'s keyed SGL.
    fn post_write(&mut self, verbs: &mut V, ci: usize, s: u16, src: Sge) -> bool {
        let c = self.conns[ci].as_mut().expect("live");
        let Some(Sgl::Keyed { addr, key, .. }) = c.slots[s as usize].sgl else { return true };
        let wr = SendWr {
            wr_id: wr_id(ci, c.gen, Kind::Write, s),
            op: SendOp::RdmaWrite { remote_addr: addr, rkey: Rkey(key) },
            sge: src,
            signaled: false,
            ud: None,
        };
        self.stats.rdma_writes += 1;
        self.defer_send(verbs, ci, &wr)
    }

    /// Write `wr` on queue `ci` without ringing and list the queue for this turn's one
    /// doorbell (rung at the end of `poll`). A device error tears the queue down (false).
    /// Inlined: it is on every command's path (the call would cost ~45 instructions per I/O).
    #[inline(always)]
    fn defer_send(&mut self, verbs: &mut V, ci: usize, wr: &SendWr) -> bool {
        let c = self.conns[ci].as_mut().expect("live");
        self.stats.posts += 1;
        if !c.unrung {
            c.unrung = true;
            if self.unrung.push(ci as u16).is_err() {
                self.unrung_overflow = true;
            }
        }
        if verbs.post_send_deferred(c.qpn, wr).is_err() {
            self.stats.post_errors += 1;
            self.teardown(verbs, ci, true);
            return false;
        }
        true
    }

    fn on_block_done(&mut self, verbs: &mut V, tag: u64, st: Status) {
        let id = WrId::from_raw(tag);
        let (ci, gen, s) = (id.conn(), id.gen(), id.slot());
        let Some(c) = self.conns.get_mut(ci).and_then(|c| c.as_mut()) else { return };
        if c.gen != gen || s >= c.depth {
            return;
        }
        let slot = &mut c.slots[s as usize];
        if slot.state != SlotState::Executing {
            return;
        }
        if slot.status.is_success() && !st.is_success() {
            slot.status = st;
        }
        slot.pending = slot.pending.saturating_sub(1);
        if slot.pending > 0 {
            return;
        }
        let slot = *slot;
        if c.draining {
            c.slots[s as usize].state = SlotState::Posted;
            self.maybe_free(verbs, ci);
            return;
        }
        if !slot.status.is_success() {
            let q = c.q;
            self.core.record_error(&q, slot.sqe.cid.get(), slot.status, slot.sqe.nsid.get());
        } else if slot.sqe.opcode == io_op::READ {
            self.send_read(verbs, ci, s);
            return;
        }
        self.respond(verbs, ci, s, slot.status, 0, 0, slot.t0);
    }

    /// A Read's data is ready: RDMA WRITE it to the host and respond. A zero-copy Read waits
    /// while a zero-copy Write is still landing in its blocks.
    fn send_read(&mut self, verbs: &mut V, ci: usize, s: u16) {
        let c = self.conns[ci].as_ref().expect("live");
        let slot = c.slots[s as usize];
        let len = slot.sgl.map_or(0, |g| g.len());
        let src = if slot.direct_addr != 0 {
            if self.inflight.overlaps(slot.direct_addr, slot.direct_addr + len as u64, true) {
                self.hold(ci, s, Resume::Send);
                return;
            }
            Sge { addr: slot.direct_addr, len, lkey: slot.direct_lkey }
        } else {
            Sge { addr: c.data.paddr() + c.data_off(s) as u64, len, lkey: c.data_lkey }
        };
        if !self.post_write(verbs, ci, s, src) {
            return;
        }
        self.respond(verbs, ci, s, slot.status, 0, 0, slot.t0);
    }

    fn complete_aer(&mut self, verbs: &mut V, tag: u64, dw0: u32) {
        let id = WrId::from_raw(tag);
        let (ci, gen, cid) = (id.conn(), id.gen(), id.slot());
        let Some(c) = self.conns.get_mut(ci).and_then(|c| c.as_mut()) else { return };
        if c.gen != gen || c.draining {
            return;
        }
        let idx = c.depth + c.aer_rsp_next;
        c.aer_rsp_next = (c.aer_rsp_next + 1) % MAX_AERS as u16;
        let cqe = Cqe {
            dw0: U32::new(dw0),
            dw1: U32::new(0),
            sqhd: U16::new(c.q.next_sqhd()),
            sqid: U16::new(c.q.qid),
            cid: U16::new(cid),
            status: U16::new(0),
        };
        c.rsp.write(idx as usize * Cqe::SIZE, cqe.as_bytes());
        let wr = SendWr {
            wr_id: wr_id(ci, c.gen, Kind::Aer, idx),
            op: SendOp::Send,
            sge: Sge { addr: c.rsp.paddr() + (idx as usize * Cqe::SIZE) as u64, len: Cqe::SIZE as u32, lkey: c.rsp_lkey },
            signaled: true,
            ud: None,
        };
        self.stats.responses += 1;
        self.defer_send(verbs, ci, &wr);
    }

    #[allow(clippy::too_many_arguments)]
    fn respond(&mut self, verbs: &mut V, ci: usize, s: u16, status: Status, dw0: u32, dw1: u32, t0: u64) {
        let c = self.conns[ci].as_mut().expect("live");
        let (cid, sgl, range) = {
            let sl = &c.slots[s as usize];
            (sl.sqe.cid, sl.sgl, sl.range)
        };
        let cqe = Cqe {
            dw0: U32::new(dw0),
            dw1: U32::new(dw1),
            sqhd: U16::new(c.q.next_sqhd()),
            sqid: U16::new(c.q.qid),
            cid,
            status: U16::new(status.to_field()),
        };
        c.rsp.write(s as usize * Cqe::SIZE, cqe.as_bytes());
        let op = match sgl {
            Some(Sgl::Keyed { key, invalidate: true, .. }) => {
                self.stats.send_invalidate += 1;
                SendOp::SendWithInvalidate(Rkey(key))
            }
            _ => SendOp::Send,
        };
        let wr = SendWr {
            // A zero-copy Read's range ends with this completion.
            wr_id: WrId::new(ci, c.gen, Kind::Send, s, range).raw(),
            op,
            sge: Sge { addr: c.rsp.paddr() + (s as usize * Cqe::SIZE) as u64, len: Cqe::SIZE as u32, lkey: c.rsp_lkey },
            signaled: true,
            ud: None,
        };
        self.stats.responses += 1;
        if !status.is_success() {
            self.stats.error_responses += 1;
        }
        // Re-post the receive buffer before the response so the host's next capsule finds it
        // (receives need no doorbell); the SEND is rung with the rest of this turn's sends.
        if self.post_recv(verbs, ci, s).is_err() {
            self.stats.post_errors += 1;
            self.teardown(verbs, ci, true);
            return;
        }
        if !self.defer_send(verbs, ci, &wr) {
            return;
        }
        if let Some(f) = self.turnaround_clock {
            self.turnaround.record(f().wrapping_sub(t0));
        }
    }
}
