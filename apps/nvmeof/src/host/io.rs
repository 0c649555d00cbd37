//! An I/O queue of the initiator: its own poll group (made, given its QP once the CM connected
//! it, released by the device: the owner's slow path), the per-I/O path every command of it
//! takes (submit, reap: through the group alone, never the device object), and [`IoLane`], an
//! I/O queue lent out of its host to be driven by a thread of its own while the owner keeps the
//! admin queue (SPDK perf's one queue per core).

use alloc::sync::Arc;
use core::sync::atomic::{AtomicU8, Ordering::Relaxed};

use super::*;

/// An I/O queue: its queue state and its own poll group ([`GroupVerbs::create_group`]: a CQ
/// for the QP's sends and receives, an SRQ holding this queue's response buffers, and the
/// group's data path). Every post and poll of its commands goes through the group, not the
/// device; the device makes and releases it (firmware commands, the owner's slow path).
pub(super) struct IoQueue<V: GroupVerbs> {
    pub(super) q: HQueue<V>,
    pub(super) group: V::Group,
    gref: V::GroupRef,
    /// The QP is in the group (its CM connect finished). Until then it is parked with the
    /// device ([`GroupVerbs::park_made_qp`]), which connects it when the CM asks.
    attached: bool,
}

impl<V: GroupVerbs> IoQueue<V> {
    /// Queue `qid`: its group, a QP made for it (parked with the device for the CM to connect)
    /// and its buffers, the responses posted to the group's SRQ.
    pub(super) fn create(verbs: &mut V, qid: u16, depth: u16, capsule: usize, xfer: usize, per_io: bool) -> Result<Self, Error<V::Error>> {
        let nrecv = recv_count(depth);
        let group = verbs.create_group(cq_entries(depth), nrecv as u32).map_err(Error::Verbs)?;
        let (gref, cq, srq) = (verbs.group_ref(&group), verbs.group_cq(&group), verbs.group_srq(&group));
        let qpn = match verbs.make_group_qp(&gref, sq_room(depth)) {
            Ok(made) => verbs.park_made_qp(made),
            Err(e) => {
                let _ = verbs.destroy_group(group);
                return Err(Error::Verbs(e));
            }
        };
        let mut io = match HQueue::with_qp(verbs, qid, qpn, cq, Some(srq), depth, capsule, xfer, per_io) {
            Ok(q) => IoQueue { q, group, gref, attached: false },
            Err(e) => {
                if let Some(made) = verbs.take_parked_qp(qpn) {
                    let _ = verbs.destroy_made_qp(made);
                }
                let _ = verbs.destroy_group(group);
                return Err(e);
            }
        };
        for i in 0..nrecv {
            if let Err(e) = io.q.post_recv(&mut io.group, i) {
                io.destroy(verbs);
                return Err(e);
            }
        }
        Ok(io)
    }

    /// Once its CM connect finished (the device connected the parked QP): the QP goes into the
    /// group, whose data path drives it from now on.
    pub(super) fn attach(&mut self, verbs: &mut V) -> Result<(), Error<V::Error>> {
        let made = verbs.take_parked_qp(self.q.qpn).ok_or(Error::Protocol("I/O queue QP not parked"))?;
        match V::attach_group_qp(&mut self.group, made) {
            Ok(_) => {
                self.attached = true;
                Ok(())
            }
            Err((e, made)) => {
                // Parked again: `destroy` finds it there.
                verbs.park_made_qp(made);
                Err(Error::Verbs(e))
            }
        }
    }

    /// Release the QP (from the group, or parked), the buffers' keys and the group.
    pub(super) fn destroy(self, verbs: &mut V) {
        let IoQueue { q, mut group, gref, attached } = self;
        if attached {
            let _ = verbs.destroy_handed_qp(&gref, q.qpn);
            let _ = V::detach_group_qp(&mut group, q.qpn);
        } else if let Some(made) = verbs.take_parked_qp(q.qpn) {
            let _ = verbs.destroy_made_qp(made);
        }
        q.release_keys(verbs);
        let _ = verbs.destroy_group(group);
    }
}


impl<V: GroupVerbs> IoQueue<V> {
    /// Submit I/O from allocated slot `slot` (its data, for a write, already in the slot's
    /// buffer) on namespace `nsid` of `block_size`-byte blocks; `inline_ok`: small writes go
    /// in the capsule; `invalidate`: the target is asked to invalidate the per-I/O key.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(super) fn submit(&mut self, stats: &mut HostStats, block_size: u32, inline_ok: bool, invalidate: bool, slot: u16, kind: IoKind, nsid: u32, lba: u64, blocks: u32, now: u64) -> Result<(), Error<V::Error>> {
        let IoQueue { q, group, .. } = self;
        if q.slots.get(slot as usize).is_none_or(|s| s.busy) {
            return Err(Error::Config("slot not allocated or in flight"));
        }
        if blocks == 0 || blocks > 0x1_0000 {
            return Err(Error::Config("blocks out of range"));
        }
        let bytes = blocks as u64 * block_size as u64;
        let mut sqe = match kind {
            IoKind::Read => cmd(io_op::READ),
            IoKind::Write => cmd(io_op::WRITE),
            IoKind::Flush => cmd(io_op::FLUSH),
            IoKind::WriteZeroes => cmd(io_op::WRITE_ZEROES),
            IoKind::Deallocate => cmd(io_op::DSM),
        };
        sqe.nsid = U32::new(nsid);
        let mut inline = 0;
        if matches!(kind, IoKind::Read | IoKind::Write | IoKind::WriteZeroes) {
            sqe.cdw10 = U32::new(lba as u32);
            sqe.cdw11 = U32::new((lba >> 32) as u32);
            sqe.cdw12 = U32::new(blocks - 1);
        }
        let bytes = if kind == IoKind::Deallocate {
            // One range (Number of Ranges 0's based), written where a Write's data would be.
            sqe.cdw11 = U32::new(DSM_ATTR_DEALLOCATE);
            let r = DsmRange { cattr: U32::new(0), nlb: U32::new(blocks), slba: U64::new(lba) };
            q.data.write(slot as usize * q.xfer, r.as_bytes());
            DsmRange::SIZE as u64
        } else {
            bytes
        };
        if matches!(kind, IoKind::Read | IoKind::Write | IoKind::Deallocate) {
            if bytes > q.xfer as u64 {
                return Err(Error::Config("I/O larger than the slot buffer"));
            }
            if kind != IoKind::Read && inline_ok && bytes as usize <= q.capsule - 64 {
                // In-capsule: the CPU copies the data into the capsule (host side only).
                let mut chunk = [0u8; 512];
                let mut done = 0usize;
                while done < bytes as usize {
                    let n = core::cmp::min(chunk.len(), bytes as usize - done);
                    q.data.read(slot as usize * q.xfer + done, &mut chunk[..n]);
                    q.cmd.write(slot as usize * q.capsule + 64 + done, &chunk[..n]);
                    done += n;
                }
                stats.inline_copy_bytes += bytes;
                inline = bytes as usize;
                sqe.dptr = Sgl::Inline { offset: 0, len: bytes as u32 }.encode();
            } else {
                sqe.dptr = q.keyed(group, slot, bytes as u32, kind == IoKind::Read, invalidate)?;
            }
        }
        stats.commands += 1;
        stats.registrations += q.slots[slot as usize].inv_key.is_some() as u64;
        q.send(group, slot, &sqe, inline, now)
    }

    /// Reap this queue's finished I/O into `out` (no more than it holds: a CQE finishes at most
    /// one command, the rest stay in the CQ); returns how many. The group first takes in what
    /// the device published for it (a failure: its CQ then flushes).
    #[inline]
    pub(super) fn reap(&mut self, stats: &mut HostStats, wc: &mut [Completion], now: u64, out: &mut [IoDone]) -> Result<usize, Error<V::Error>> {
        let IoQueue { q, group, .. } = self;
        let qid = q.qid;
        let mut n = 0;
        let (mut remote_inv, mut local_inv) = (0, 0);
        V::check_group(group);
        q.poll(group, wc, out.len(), |q, idx| {
            let s = &mut q.slots[idx as usize];
            s.busy = false;
            if s.inv_key.take().is_some() {
                if s.invalidated {
                    remote_inv += 1;
                } else {
                    local_inv += 1;
                }
            }
            if n < out.len() {
                out[n] = IoDone { queue: qid, slot: idx, status: Status::from_field(s.cqe_status), dw0: s.dw0, latency_ns: now.saturating_sub(s.t_submit) };
                n += 1;
            }
            q.free.push(idx);
        })?;
        stats.invalidated += remote_inv;
        stats.local_invalidations += local_inv;
        stats.completions += n as u64;
        stats.errors += out[..n].iter().filter(|d| !d.status.is_success()).count() as u64;
        Ok(n)
    }
}

/// An I/O queue lent out of its host ([`Host::lend_io_queues`]) to be driven by a thread of its
/// own: its submit and poll go through the queue's own poll group alone, without the host or
/// the device, so each lane of a host can run on its own thread (or core) while the owner keeps
/// the admin queue (keep-alive, AENs) and the device. `Send` where the platform's memory and
/// the device's groups are. Give it back ([`Host::return_io_queues`]) before the host
/// reconnects, disconnects or is dropped: only the host releases its queues.
pub struct IoLane<V: GroupVerbs> {
    io: IoQueue<V>,
    /// Raised by the owner: [`QP_ERROR`] when the adapter moved this queue's QP to error
    /// ([`Host::fail_qp`]), [`CTRL_FAILED`] when it stops the queue because its controller
    /// failed ([`Host::stop_lent`]); read once per [`IoLane::poll`] (a load, no
    /// read-modify-write).
    flags: Arc<AtomicU8>,
    wc: [Completion; 32],
    namespaces: Vec<NsInfo>,
    inline_ok: bool,
    invalidate: bool,
    /// The lane's counts since it was lent (added to the host's when it comes back).
    pub stats: HostStats,
}

impl<V: GroupVerbs> IoLane<V> {
    /// The queue's QID (1-based).
    pub fn qid(&self) -> u16 {
        self.io.q.qid
    }

    /// The queue's QP (the one the adapter's QP error events name).
    pub fn qpn(&self) -> Qpn {
        self.io.q.qpn
    }

    /// The queue's depth (its command slots).
    pub fn depth(&self) -> u16 {
        self.io.q.depth
    }

    /// A free slot, if any.
    pub fn alloc_slot(&mut self) -> Option<u16> {
        self.io.q.free.pop()
    }

    /// The data buffer of a slot: (region, offset, length).
    pub fn slot_buf(&self, slot: u16) -> (&V::Buf, usize, usize) {
        let q = &self.io.q;
        (&q.data, slot as usize * q.xfer, q.xfer)
    }

    /// As [`Host::submit`], on this queue.
    #[allow(clippy::too_many_arguments)]
    pub fn submit(&mut self, slot: u16, kind: IoKind, nsid: u32, lba: u64, blocks: u32, now: u64) -> Result<(), Error<V::Error>> {
        let bs = self.namespaces.iter().find(|n| n.nsid == nsid).map_or(512, |n| n.block_size);
        self.io.submit(&mut self.stats, bs, self.inline_ok, self.invalidate, slot, kind, nsid, lba, blocks, now)
    }

    /// As [`Host::poll`], on this queue: its finished I/O into `out`; the queue's failure once
    /// nothing more is finished. Once the owner heard that the adapter moved the queue's QP to
    /// error, [`Error::QpError`] at once, and once it stopped the queue because its controller
    /// failed, [`Error::ControllerFailed`]: with its receives in an SRQ nothing would be
    /// flushed, and the commands in flight will not be answered.
    pub fn poll(&mut self, now: u64, out: &mut [IoDone]) -> Result<usize, Error<V::Error>> {
        let flags = self.flags.load(Relaxed);
        if flags != 0 {
            self.io.q.failed = true;
            return Err(if flags & QP_ERROR != 0 { Error::QpError { qid: self.io.q.qid } } else { Error::ControllerFailed });
        }
        let n = self.io.reap(&mut self.stats, &mut self.wc, now, out)?;
        if n == 0 && self.io.q.failed {
            return Err(self.io.q.failure());
        }
        Ok(n)
    }

    /// Whether the queue saw a transport error (the host must reconnect once it is back).
    pub fn failed(&self) -> bool {
        self.io.q.failed
    }
}

/// What a run on lent queues gave: the merged result of the lanes that finished, each finished
/// lane's result, and each failed lane's error (e.g. [`Error::QpError`]: the adapter moved its
/// QP to error; the others ran to the end), by QID.
#[derive(Debug, Clone)]
pub struct LanesResult<R, E> {
    pub merged: R,
    pub per_lane: Vec<(u16, R)>,
    pub failed: Vec<(u16, Error<E>)>,
}

impl<R: Default, E> LanesResult<R, E> {
    /// The lanes' `ends` (by QID; lane `qid`'s state is `states[qid - 1]`): a finished lane's
    /// result (`result` of its state) and their `merge`, a stopped or failed lane's error.
    pub(crate) fn gather<S>(ends: Vec<(u16, Result<LaneEnd<E>, Error<E>>)>, states: &[S], result: impl Fn(&S) -> R, merge: impl Fn(&mut R, &R)) -> Self {
        let (mut per_lane, mut failed) = (Vec::new(), Vec::new());
        for (qid, end) in ends {
            match end {
                Ok(LaneEnd::Finished) => per_lane.push((qid, result(&states[qid as usize - 1]))),
                Ok(LaneEnd::Stopped(e)) | Err(e) => failed.push((qid, e)),
            }
        }
        let mut merged = R::default();
        for (_, r) in &per_lane {
            merge(&mut merged, r);
        }
        LanesResult { merged, per_lane, failed }
    }
}

/// Work made of a lent I/O queue (a bench lane, a verified-I/O lane) to run on a thread or CPU
/// of its own; its outcome gives the queue back.
pub trait LaneWork {
    type Outcome;
    /// The lent queue's QID.
    fn qid(&self) -> u16;
    /// Run it to the end; `clock`: nanoseconds (one clock for every lane and the owner);
    /// `idle`: called when a poll found nothing (e.g. yield the thread).
    fn run(self, clock: &dyn Fn() -> u64, idle: &dyn Fn()) -> Self::Outcome;
}

/// The work on one lent queue, whose state outlives a run of it (a bench lane's run, a
/// verified-I/O lane's model): driven from a thread of its own through [`Lent`], and after its
/// queue failed resumed on the controller's next connection
/// ([`super::lent::reconnecting`]).
pub trait LaneDrive<V: GroupVerbs> {
    /// Drive `lane` until the work is done ([`LaneEnd::Finished`]), the queue fails
    /// ([`LaneEnd::Stopped`]: what was in flight counted lost, the state ready to resume) or
    /// the work itself fails (`Err`). `clock` and `idle` as in [`LaneWork::run`].
    fn drive(&mut self, lane: &mut IoLane<V>, clock: &dyn Fn() -> u64, idle: &dyn Fn()) -> Result<LaneEnd<V::Error>, Error<V::Error>>;
    /// The controller is live again after a loss (before the next `drive`).
    fn reconnected(&mut self) {}
    /// The controller is down at `now` (the owner's clock, which is the one `drive` is given):
    /// whether the work is over anyway (its duration or count reached), its result then taken
    /// at `now`. Work that only ends by being done on a live queue says no.
    fn over_while_down(&mut self, _now: u64) -> bool {
        false
    }
}

/// A lent queue and the state of the work on it, to run on a thread or CPU of its own.
pub struct Lent<'a, S, V: GroupVerbs> {
    lane: IoLane<V>,
    state: &'a mut S,
}

impl<'a, S, V: GroupVerbs> Lent<'a, S, V> {
    pub(crate) fn new(lane: IoLane<V>, state: &'a mut S) -> Self {
        Lent { lane, state }
    }

    /// The lent queue's QP.
    pub fn qpn(&self) -> Qpn {
        self.lane.qpn()
    }
}

impl<S: LaneDrive<V>, V: GroupVerbs> LaneWork for Lent<'_, S, V> {
    type Outcome = LentOutcome<V>;
    fn qid(&self) -> u16 {
        self.lane.qid()
    }
    fn run(self, clock: &dyn Fn() -> u64, idle: &dyn Fn()) -> LentOutcome<V> {
        let Lent { mut lane, state } = self;
        let end = state.drive(&mut lane, clock, idle);
        (lane, end)
    }
}

/// A lent queue's flag bit: the adapter moved its QP to error.
const QP_ERROR: u8 = 1;
/// A lent queue's flag bit: its controller failed, the owner stopped it.
const CTRL_FAILED: u8 = 2;

/// How a lane's run ended without an error of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LaneEnd<E> {
    /// Its work is done.
    Finished,
    /// Its queue failed (the error it saw): what was in flight is counted lost and the work's
    /// state kept, to resume on the controller's next connection.
    Stopped(Error<E>),
}

/// What a run of lent work gave back: the queue and how the run ended (`Err`: the work itself
/// failed, e.g. a completion of nothing in flight).
pub type LentOutcome<V> = (IoLane<V>, Result<LaneEnd<<V as rdma::VerbsError>::Error>, Error<<V as rdma::VerbsError>::Error>>);

/// The owner's note of a lent queue: its QP, its connection and the flags its lane reads.
pub(super) struct LentQueue {
    qid: u16,
    pub(super) qpn: Qpn,
    pub(super) cm: u32,
    flags: Arc<AtomicU8>,
}

impl LentQueue {
    /// The adapter moved the queue's QP to error: its lane stops at its next poll.
    pub(super) fn raise(&self) {
        if self.flags.fetch_or(QP_ERROR, Relaxed) & QP_ERROR == 0 {
            log::warn!("nvmeof: host: lent I/O queue {} ({}): the adapter moved its QP to error; its lane stops", self.qid, self.qpn);
        }
    }

    /// Its controller failed: its lane stops at its next poll.
    pub(super) fn stop(&self) {
        self.flags.fetch_or(CTRL_FAILED, Relaxed);
    }

    /// Whether its lane was told to stop (either flag).
    pub(super) fn raised(&self) -> bool {
        self.flags.load(Relaxed) != 0
    }
}

impl HostStats {
    /// Add the I/O counts of `o` (a lane's) to these.
    fn add_io(&mut self, o: &HostStats) {
        self.commands += o.commands;
        self.completions += o.completions;
        self.errors += o.errors;
        self.invalidated += o.invalidated;
        self.local_invalidations += o.local_invalidations;
        self.registrations += o.registrations;
        self.inline_copy_bytes += o.inline_copy_bytes;
    }
}

impl<V: GroupVerbs> Host<V> {
    /// Whether small writes go in the capsule (configured, and the target takes offsets).
    pub(super) fn inline_ok(&self) -> bool {
        self.cfg.inline_writes && self.ctrl.as_ref().is_some_and(|c| c.sgls & sgls::OFFSET != 0)
    }

    /// Lend every I/O queue out, one [`IoLane`] each in QID order, to be driven elsewhere; until
    /// they come back the host's own [`Host::submit`] / [`Host::poll`] see no I/O queue, while
    /// [`Host::tick`] (admin queue, keep-alive) goes on.
    pub fn lend_io_queues(&mut self) -> Vec<IoLane<V>> {
        let (inline_ok, invalidate) = (self.inline_ok(), self.cfg.invalidate);
        let namespaces = self.namespaces.clone();
        let mut lanes = Vec::with_capacity(self.io.len());
        for io in self.io.drain(..) {
            let flags = Arc::new(AtomicU8::new(0));
            self.lent.push(LentQueue { qid: io.q.qid, qpn: io.q.qpn, cm: io.q.cm, flags: flags.clone() });
            lanes.push(IoLane { io, flags, wc: [Completion::default(); 32], namespaces: namespaces.clone(), inline_ok, invalidate, stats: HostStats::default() });
        }
        lanes
    }

    /// Run `jobs` made of this host's lent queues ([`Host::lend_io_queues`]) on a host alone on
    /// its device, without reconnects: `spawn` runs each on a thread (or CPU) of its own and,
    /// until they all finished, calls the owner's turn it is given from its own thread: the
    /// device and CM (`env.idle`), the adapter's QP error events ([`Host::take_qp_errors`]: the
    /// lane whose queue it names stops at its next poll), the queues' connections
    /// ([`Host::check_connections`]), the admin queue and keep-alive ([`Host::tick`]; on its
    /// failure every lane is stopped, [`Error::ControllerFailed`], and no more turns are
    /// taken). Every queue is given back before this returns. Returns each job's end, by QID;
    /// the admin queue's error if it failed.
    #[allow(clippy::type_complexity)]
    pub(crate) fn run_lent<J, E: HostEnv<V>>(
        &mut self,
        verbs: &mut V,
        env: &mut E,
        jobs: Vec<J>,
        spawn: impl FnOnce(Vec<J>, &mut dyn FnMut()) -> Vec<LentOutcome<V>>,
    ) -> Result<Vec<(u16, Result<LaneEnd<V::Error>, Error<V::Error>>)>, Error<V::Error>> {
        let mut admin = Ok(());
        let outcomes = {
            let mut turn = || {
                if admin.is_err() {
                    return;
                }
                env.idle(verbs);
                self.take_qp_errors(verbs);
                self.check_connections(env);
                let now = env.now_ns();
                if let Err(e) = self.tick(verbs, now) {
                    admin = Err(e);
                    self.stop_lent();
                }
            };
            spawn(jobs, &mut turn)
        };
        let ends = self.give_back(outcomes);
        admin?;
        Ok(ends)
    }

    /// Take the lanes of `outcomes` back ([`Host::return_io_queues`]); their ends by QID.
    #[allow(clippy::type_complexity)]
    pub(super) fn give_back(&mut self, outcomes: Vec<LentOutcome<V>>) -> Vec<(u16, Result<LaneEnd<V::Error>, Error<V::Error>>)> {
        let (mut lanes, mut ends) = (Vec::with_capacity(outcomes.len()), Vec::with_capacity(outcomes.len()));
        for (lane, end) in outcomes {
            ends.push((lane.qid(), end));
            lanes.push(lane);
        }
        self.return_io_queues(lanes);
        ends.sort_by_key(|e| e.0);
        ends
    }

    /// Stop every lent queue's lane at its next poll ([`Error::ControllerFailed`]): the
    /// controller failed. Slow path.
    pub(crate) fn stop_lent(&self) {
        for l in &self.lent {
            l.stop();
        }
    }

    /// Whether some of its I/O queues are lent out.
    pub fn lending(&self) -> bool {
        !self.lent.is_empty()
    }

    /// Take lent queues back (their counts added to the host's; a queue whose QP the adapter
    /// moved to error meanwhile comes back failed).
    pub fn return_io_queues(&mut self, lanes: Vec<IoLane<V>>) {
        for mut l in lanes {
            self.lent.retain(|q| q.qid != l.io.q.qid);
            if l.flags.load(Relaxed) != 0 {
                l.io.q.failed = true;
            }
            self.stats.add_io(&l.stats);
            self.io.push(l.io);
        }
        self.io.sort_by_key(|io| io.q.qid);
    }
}
