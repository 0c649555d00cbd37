//! A poll group's own I/O handles on the core's namespaces (SPDK's io_channel per poller): per
//! namespace of the core's table, the group's own [`BlockDevice::io_handle`] (or none: that
//! namespace's I/O goes to the core's store through the owner, `via_owner.rs`) with the namespace's facts copied in ([`NsAt`],
//! failed) and its own device-latency table, so a group executes and completes Reads and
//! Writes on its handles reading nothing of [`Core`]; its block completions come back to it
//! from its own handles, not from the owner's poll over the core's stores.
//!
//! Made by the owner when the group is made ([`Core::group_io`]); the facts that change (a
//! namespace failed, direct memory registered or released) are copied in again by the owner
//! on the slow path ([`Core::refresh_group_io`]). A handle that fails is marked failed in its
//! group at once and noted for the owner ([`GroupIo::failed_note`]), who takes the namespace
//! out of service for every group ([`Core::take_group_failures`]). A command the group answers
//! with an error is noted for the owner ([`GroupIo::note_error`], a bounded list), who writes
//! it into its controller's error log on the slow path ([`Core::take_error_notes`]): the turn
//! writes nothing of the controller.

use alloc::boxed::Box;
use alloc::vec::Vec;

use blockdev::{BlockDevice, BlockDone};

use super::io::{exec_ns, io_queue_refusal, modified_direct, submit_fetched, NsAt};
use super::via_owner::{NsShape, OwnerStore, ViaOwner};
use super::*;
use crate::bench::Histogram;

/// A group's view of one subsystem: its NSID table (a copy of the core's) and the slot of its
/// first namespace in the core's namespace table.
struct SubIo {
    ns_index: Vec<u16>,
    ns_base: usize,
}

/// One namespace as a group has it: its own handle (`None`: the store made none, e.g. a local
/// NVMe namespace whose drive has no I/O queue left; its I/O goes to the core's store through
/// the owner, `owner` its shape), the namespace's facts, and the handle's device-latency table
/// (with the core's clock).
struct NsIo<B> {
    dev: Option<B>,
    owner: Option<NsShape>,
    at: NsAt,
    failed: bool,
    lat: Option<devlat::DevLatency>,
}

/// A failed command as a poll group notes it for its controller's error log (what
/// [`Core::record_error`] needs of its queue and command).
#[derive(Debug, Clone, Copy)]
struct ErrorNote {
    cntlid: Option<u16>,
    ctrl_slot: CtrlSlot,
    qid: u16,
    cid: u16,
    status: Status,
    nsid: u32,
}

/// Error notes a group keeps between two looks of the owner (who looks when the turn call that
/// noted one returns).
const NOTES: usize = 32;

/// A poll group's I/O handles, by the core's namespace table (the `ns_base + ni` slot its
/// [`IoCounts`] use), and its own block completion state.
pub struct GroupIo<B> {
    subs: Vec<SubIo>,
    ns: Vec<NsIo<B>>,
    /// Block I/Os submitted to this group's handles and not yet polled back.
    inflight: u64,
    done: [BlockDone; 32],
    /// A handle failed since the owner last looked ([`Core::take_group_failures`]).
    failed_note: bool,
    /// The slots of `ns` that have a handle (made with the table): what `poll` walks.
    with_handle: Vec<u16>,
    /// Failed commands for their controllers' error logs, in the order answered, and those
    /// that found the list full (counted as errors, no log entry).
    notes: heapless::Vec<ErrorNote, NOTES>,
    notes_lost: u64,
    /// The group's ends of its rings to the owner, for the namespaces it has no handle of
    /// (`via_owner.rs`; made with the table when it has any), the group's number and the
    /// table's (the owner keeps its ends by them).
    via: Option<ViaOwner>,
    group: usize,
    id: u64,
    /// Commands of unauthenticated queues this group refused since the owner last looked
    /// (the core's `auth.stats.refused_cmds` takes them with the error notes).
    auth_refused: u64,
}

impl<B> GroupIo<B> {
    /// No namespace: every I/O goes to the core's stores (a group before the owner made its
    /// table).
    pub fn empty() -> GroupIo<B> {
        GroupIo { subs: Vec::new(), ns: Vec::new(), inflight: 0, done: [BlockDone { tag: 0, result: Ok(()) }; 32], failed_note: false, with_handle: Vec::new(), notes: heapless::Vec::new(), notes_lost: 0, via: None, group: 0, id: 0, auth_refused: 0 }
    }

    /// Whether I/O submitted to this group's handles is still to be polled back.
    #[inline(always)]
    pub fn inflight(&self) -> bool {
        self.inflight != 0
    }

    /// Block I/Os at this group's own handles now (those it sent the owner are at the core's
    /// stores, counted there).
    pub fn inflight_count(&self) -> u64 {
        self.inflight.saturating_sub(self.via.as_ref().map_or(0, |v| v.outstanding() as u64))
    }

    /// Namespaces (by slot) this group has a handle of.
    pub fn handles(&self) -> usize {
        self.with_handle.len()
    }

    /// A handle of this group failed since the owner last took the failures.
    #[inline(always)]
    pub fn failed_note(&self) -> bool {
        self.failed_note
    }

    /// Namespace slot `k`'s handle: its device-latency histogram and I/Os outstanding, when
    /// timed (slow path: reports).
    pub(super) fn latency(&self, k: usize) -> Option<(&Histogram, usize)> {
        let l = self.ns.get(k)?.lat.as_ref()?;
        Some((&l.hist, l.outstanding()))
    }

    /// Note command `cid` (namespace `nsid`) of queue `q`, answered with `status`, for its
    /// controller's error log (the owner writes it when the turn call returns,
    /// [`Core::take_error_notes`]; the caller asks it, `PollGroup::owner_due`). Error path only.
    #[cold]
    pub fn note_error(&mut self, q: &QueueState, cid: u16, status: Status, nsid: u32) {
        let n = ErrorNote { cntlid: q.cntlid, ctrl_slot: q.ctrl_slot, qid: q.qid, cid, status, nsid };
        if self.notes.push(n).is_err() {
            self.notes_lost += 1;
        }
    }

    /// Error notes wait for the owner.
    #[inline(always)]
    pub fn has_notes(&self) -> bool {
        !self.notes.is_empty() || self.notes_lost != 0 || self.auth_refused != 0
    }

    /// Namespace slot `k`'s handle in this group, if it has one (slow path: reports, tests).
    pub fn handle(&self, k: usize) -> Option<&B> {
        self.ns.get(k)?.dev.as_ref()
    }

    /// The slot of namespace `nsid` of subsystem `si` in the core's namespace table (the
    /// group's handle, if any, is there).
    #[inline(always)]
    fn slot(&self, si: usize, nsid: u32) -> Option<usize> {
        let sub = self.subs.get(si)?;
        match sub.ns_index.get(nsid as usize) {
            Some(&i) if i != NO_NS => Some(sub.ns_base + i as usize),
            _ => None,
        }
    }
}

impl<B: BlockDevice> GroupIo<B> {
    /// Execute command `sqe` of I/O queue `q` (admin-queue and Fabrics commands go to the
    /// owner, never here), counted in `counts`, with one decode: an I/O command on an open,
    /// enabled I/O queue whose namespace exists is checked here once and goes to this group's
    /// handle of the namespace, or, when the group has none (its store makes no handle, e.g. a
    /// local NVMe namespace whose drive has no I/O queue left), to the core's store through
    /// the owner ([`GroupIo::execute_via_owner`]); any other is refused here
    /// ([`GroupIo::refuse`]). A failed answer is noted for its controller's error log and
    /// `owner_due` set. Reads and writes nothing of the core.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub fn execute(&mut self, q: &mut QueueState, sqe: &Sqe, data: &DataIn<'_>, now_ns: u64, counts: &mut IoCounts, owner_due: &mut bool) -> Action {
        let k = match (io_queue_refusal(q, sqe.opcode), self.slot(q.subsys as usize, sqe.nsid.get())) {
            (None, Some(k)) => k,
            (refusal, _) => return self.refuse(refusal.unwrap_or(Status::INVALID_NS), q, sqe, now_ns, counts, owner_due),
        };
        // Host data the core parses (DSM ranges) comes in first; Writes are decoded now.
        if !data.fetched && data.sgl_len > 0 && host_to_ctrl(sqe) && !matches!(sqe.opcode, io_op::WRITE | io_op::COMPARE) {
            return Action::Fetch(Fetch::Payload);
        }
        counts.commands += 1;
        q.io.last_seen_ns = now_ns;
        q.io.commands += 1;
        let n = &mut self.ns[k];
        let Some(dev) = n.dev.as_mut() else {
            return self.execute_via_owner(k, q, sqe, data, counts, owner_due);
        };
        let a = if n.failed { Action::status(Status::INVALID_NS) } else { exec_ns(n.at, dev, n.lat.as_mut(), q, sqe, data, &mut counts.ns[k], &mut self.inflight) };
        if let Action::Respond { status, .. } = a {
            if !status.is_success() {
                self.note_error(q, sqe.cid.get(), status, sqe.nsid.get());
                *owner_due = true;
            }
        }
        a
    }

    /// Execute command `sqe` of I/O queue `q` on namespace slot `k`, which this group has no
    /// handle of, as on a handle ([`exec_ns`]) whose submissions are records to the owner
    /// ([`OwnerStore`], counted in the namespace's [`NsStats::via_owner`]); [`Action::Busy`]
    /// when the block I/Os it may submit (a Dataset Management command's ranges, one for any
    /// other) do not fit beside those the group has at the owner now. `owner_due` set: the
    /// owner takes the records when the turn call returns.
    #[cold]
    #[inline(never)]
    fn execute_via_owner(&mut self, k: usize, q: &mut QueueState, sqe: &Sqe, data: &DataIn<'_>, counts: &mut IoCounts, owner_due: &mut bool) -> Action {
        let n = &mut self.ns[k];
        let (Some(shape), Some(via)) = (n.owner.as_ref(), self.via.as_mut()) else {
            // Cannot happen: a namespace without a handle has its shape and the group its rings.
            return Action::status(Status::INTERNAL);
        };
        let need = if sqe.opcode == io_op::DSM { (sqe.cdw10.get() & 0xFF) as usize + 1 } else { 1 };
        let a = if n.failed {
            Action::status(Status::INVALID_NS)
        } else if !via.has_room(need) {
            return Action::Busy;
        } else {
            let st = &mut counts.ns[k];
            st.via_owner += 1;
            *owner_due = true;
            exec_ns(n.at, &mut OwnerStore { shape, at: n.at, ends: Some(via) }, None, q, sqe, data, st, &mut self.inflight)
        };
        if let Action::Respond { status, .. } = a {
            if !status.is_success() {
                self.note_error(q, sqe.cid.get(), status, sqe.nsid.get());
                *owner_due = true;
            }
        }
        a
    }

    /// Answer command `sqe` of I/O queue `q` with `status`, the refusal [`io_queue_refusal`]
    /// gave (or Invalid Namespace: no such namespace in the queue's subsystem): counted as
    /// the core counts a command it refuses (the queue's traffic and commands once it has a
    /// controller, a refused unauthenticated command in [`GroupIo::auth_refused`]) and noted
    /// for its controller's error log (`owner_due` set). Error path only.
    #[cold]
    #[inline(never)]
    fn refuse(&mut self, status: Status, q: &mut QueueState, sqe: &Sqe, now_ns: u64, counts: &mut IoCounts, owner_due: &mut bool) -> Action {
        counts.commands += 1;
        if q.cntlid.is_some() {
            if q.auth.keeps_alive(false) {
                q.io.last_seen_ns = now_ns;
            }
            q.io.commands += 1;
        }
        if status == Status::AUTH_REQUIRED {
            self.auth_refused += 1;
        }
        self.note_error(q, sqe.cid.get(), status, sqe.nsid.get());
        *owner_due = true;
        Action::status(status)
    }

    /// The namespace memory command `sqe` of queue `q` would change, as (direct address,
    /// bytes), when it is a Write, Write Zeroes or Dataset Management on an enabled I/O queue
    /// and its namespace's direct memory is in use ([`modified_direct`]): asked of this group's
    /// handle of the namespace (a RAM handle shares the namespace's memory), or, when the group
    /// has none, of the store's shape the group keeps (the store's own memory, which the
    /// command will change through the owner).
    #[inline(always)]
    pub fn modifies_direct(&self, q: &QueueState, sqe: &Sqe, dsm: &[u8]) -> Option<(PhysAddr, u64)> {
        if !matches!(sqe.opcode, io_op::WRITE | io_op::WRITE_ZEROES | io_op::DSM) || q.qid == 0 || !q.enabled {
            return None;
        }
        let n = &self.ns[self.slot(q.subsys as usize, sqe.nsid.get())?];
        if !n.at.direct {
            return None;
        }
        match (n.dev.as_ref(), n.owner.as_ref()) {
            (Some(dev), _) => modified_direct(dev, sqe, dsm),
            (None, Some(shape)) => modified_direct(&OwnerStore { shape, at: n.at, ends: None }, sqe, dsm),
            (None, None) => None,
        }
    }

    /// Submit Write `w`, whose data the transport moved in, to this group's handle of its
    /// namespace, or, when the group has none, to the core's store through the owner
    /// ([`OwnerStore`]; `owner_due` set; [`Action::Busy`] while the group's I/Os at the owner
    /// leave no room).
    #[inline(always)]
    pub fn write_fetched(&mut self, w: &PendingWrite, buf: DmaSlice, tag: u64, owner_due: &mut bool) -> Action {
        let n = self.subs.get(w.subsys as usize).and_then(|sub| self.ns.get_mut(sub.ns_base + w.ns as usize));
        match n {
            Some(NsIo { dev: Some(dev), lat, .. }) => submit_fetched(dev, lat.as_mut(), w, buf, tag, &mut self.inflight),
            Some(NsIo { dev: None, owner: Some(shape), at, .. }) => match self.via.as_mut() {
                Some(via) if via.has_room(1) => {
                    *owner_due = true;
                    submit_fetched(&mut OwnerStore { shape, at: *at, ends: Some(via) }, None, w, buf, tag, &mut self.inflight)
                }
                Some(_) => Action::Busy,
                None => Action::status(Status::INTERNAL),
            },
            _ => Action::status(Status::INTERNAL),
        }
    }

    /// Poll this group's handles for finished I/O: `f(tag, status)` per completion, at most
    /// `max` (the handles keep the rest). A handle that reports failed is marked so here and
    /// noted for the owner. Returns how many were reported.
    pub fn poll(&mut self, max: usize, mut f: impl FnMut(u64, Status)) -> usize {
        let mut total = 0;
        'walk: for &k in self.with_handle.iter() {
            let n = &mut self.ns[k as usize];
            let Some(dev) = n.dev.as_mut() else { continue };
            loop {
                let room = core::cmp::min(self.done.len(), max - total);
                if room == 0 {
                    break 'walk;
                }
                let k = devlat::poll(dev, n.lat.as_mut(), &mut self.done[..room], &mut f);
                total += k;
                self.inflight = self.inflight.saturating_sub(k as u64);
                if k > 0 && !n.failed && dev.failed() {
                    n.failed = true;
                    self.failed_note = true;
                }
                if k < room {
                    break;
                }
            }
        }
        // The owner's answers for the namespaces the group has no handle of.
        if let Some(via) = self.via.as_mut().filter(|_| total < max) {
            let k = via.poll(max - total, &mut f);
            total += k;
            self.inflight = self.inflight.saturating_sub(k as u64);
        }
        total
    }
}

impl<B: BlockDevice> Core<B> {
    /// Namespace `nsid` of subsystem `nqn`'s slot in the core's namespace table (slow path).
    pub fn ns_slot(&self, nqn: &str, nsid: u32) -> Option<usize> {
        let s = self.subsystems.iter().find(|s| s.cfg.nqn == nqn)?;
        Some(s.ns_base + s.ns(nsid)?)
    }

    /// A poll group's namespace table: a handle of each namespace whose store makes one
    /// ([`BlockDevice::io_handle`]), timed when the core has a device clock. Slow path: made by
    /// the owner with the group (allocates). Logs one line per namespace for poll group
    /// `group`: the handle made and its device queue, or why it has none (a drive that
    /// granted fewer I/O queues than its namespaces x groups): that namespace's I/O in this
    /// group goes to the core's store through the owner (`via_owner.rs`; the group's rings made
    /// here, the owner's ends kept by the core for group `group`; without their memory the
    /// group's I/O on such a namespace fails).
    pub fn group_io(&mut self, group: usize) -> GroupIo<B> {
        let mut g = GroupIo::empty();
        self.group_ios += 1;
        (g.group, g.id) = (group, self.group_ios);
        let (direct, clock) = (self.direct, self.dev_clock);
        for (si, s) in self.subsystems.iter_mut().enumerate() {
            g.subs.push(SubIo { ns_index: s.ns_index.clone(), ns_base: s.ns_base });
            for (ni, (n, st)) in s.cfg.namespaces.iter_mut().zip(&s.ns_stats).enumerate() {
                let dev = match n.dev.io_handle() {
                    Ok(d) => {
                        match d.device_queue() {
                            Some(q) => log::info!("nvmeof: poll group {group}: nsid {} of {}: own handle on drive queue {q}", n.nsid, s.cfg.nqn),
                            None => log::info!("nvmeof: poll group {group}: nsid {} of {}: own handle", n.nsid, s.cfg.nqn),
                        }
                        Some(d)
                    }
                    Err(BlockError::Unsupported) if n.dev.device_queue().is_none() => None,
                    Err(e) => {
                        log::warn!("nvmeof: poll group {group}: nsid {} of {}: no handle of its own ({e:?}): its I/O goes to the namespace's store through the owner", n.nsid, s.cfg.nqn);
                        None
                    }
                };
                let owner = dev.is_none().then(|| NsShape::of(&n.dev));
                let lat = dev.as_ref().and(clock).map(devlat::DevLatency::new);
                let at = NsAt { subsys: si as u16, ns: ni as u16, max_io_bytes: s.max_io_bytes, direct };
                if dev.is_some() {
                    g.with_handle.push(g.ns.len() as u16);
                }
                g.ns.push(NsIo { dev, owner, at, failed: st.failed, lat });
            }
        }
        if g.ns.iter().any(|n| n.owner.is_some()) {
            match ViaOwner::rings(g.id) {
                Ok((via, ends)) => {
                    g.via = Some(via);
                    self.keep_owner_io(group, ends);
                }
                Err(()) => log::warn!("nvmeof: poll group {group}: no memory for its rings to the owner: its I/O on namespaces without a handle fails"),
            }
        }
        g
    }

    /// Copy the facts that change into group table `g`: each namespace out of service or not,
    /// and whether direct memory may be used ([`Core::set_direct`]). Slow path.
    pub fn refresh_group_io(&self, g: &mut GroupIo<B>) {
        for s in &self.subsystems {
            for (i, st) in s.ns_stats.iter().enumerate() {
                if let Some(n) = g.ns.get_mut(s.ns_base + i) {
                    n.failed = st.failed;
                    n.at.direct = self.direct;
                }
            }
        }
    }

    /// The owner's look at group table `g`'s failed handles ([`GroupIo::failed_note`]): each
    /// namespace whose handle failed is taken out of service and announced (as a failed store
    /// of the core's is, once). Returns how many were taken out; the caller copies the change
    /// into every group ([`Core::refresh_group_io`]). Slow path.
    pub fn take_group_failures(&mut self, g: &mut GroupIo<B>) -> usize {
        g.failed_note = false;
        let mut newly_failed: heapless::Vec<(usize, u32), 8> = heapless::Vec::new();
        for (si, s) in self.subsystems.iter_mut().enumerate() {
            for (i, (st, n)) in s.ns_stats.iter_mut().zip(&s.cfg.namespaces).enumerate() {
                if !st.failed && g.ns.get(s.ns_base + i).is_some_and(|h| h.failed) && newly_failed.push((si, n.nsid)).is_ok() {
                    st.failed = true;
                }
            }
        }
        let k = newly_failed.len();
        if k > 0 {
            self.announce_failed(newly_failed);
        }
        k
    }

    /// Write group table `g`'s error notes into their controllers' error logs and the error
    /// counts, in the order the group answered them (as [`Core::record_error`] at once would
    /// have; a note that found the list full is counted in the errors, with no entry), and its
    /// refused unauthenticated commands into the authentication counters. Slow path.
    pub fn take_error_notes(&mut self, g: &mut GroupIo<B>) {
        for n in core::mem::take(&mut g.notes) {
            let q = QueueState { qid: n.qid, cntlid: n.cntlid, ctrl_slot: n.ctrl_slot, ..QueueState::default() };
            self.record_error(&q, n.cid, n.status, n.nsid);
        }
        self.stats.errors += core::mem::take(&mut g.notes_lost);
        self.auth.stats.refused_cmds += core::mem::take(&mut g.auth_refused);
    }

    /// Fold group table `g`'s device latency, handle counters and error notes into the core's
    /// tables (the group goes: its handles' samples and counts stay in the namespaces'
    /// figures; its handles are dropped). Slow path.
    pub fn fold_group_io(&mut self, g: &mut GroupIo<B>) {
        self.take_error_notes(g);
        self.drop_owner_io(g.group, g.id);
        g.via = None;
        g.with_handle.clear();
        for s in &mut self.subsystems {
            for (i, released) in s.ns_dev_released.iter_mut().enumerate() {
                if let Some(h) = g.ns.get_mut(s.ns_base + i).and_then(|n| n.dev.take()) {
                    *released = released.plus(h.counters());
                }
            }
            for (i, lat) in s.ns_lat.iter_mut().enumerate() {
                if let (Some(l), Some(h)) = (lat.as_mut(), g.ns.get_mut(s.ns_base + i).and_then(|n| n.lat.as_mut())) {
                    l.hist.merge(&h.hist);
                    h.hist = Histogram::boxed();
                }
            }
        }
    }

    /// Namespace slot `k`'s store counters `own` with the released groups' handles'
    /// (`released`) and the live groups' (`extra`) added.
    pub(super) fn folded_dev(own: blockdev::DevCounters, released: blockdev::DevCounters, extra: &[&GroupIo<B>], k: usize) -> blockdev::DevCounters {
        extra.iter().filter_map(|g| g.handle(k)).fold(own.plus(released), |c, h| c.plus(h.counters()))
    }

    /// Namespace slot `k`'s device latency: the core's table's histogram with the groups'
    /// handles' (`extra`) merged in, and the I/Os outstanding at all of them; `None` untimed.
    pub(super) fn folded_latency(own: Option<&devlat::DevLatency>, extra: &[&GroupIo<B>], k: usize) -> (Option<Box<Histogram>>, Option<usize>) {
        let mut h: Option<Box<Histogram>> = None;
        let mut out: Option<usize> = None;
        let parts = own.map(|l| (&*l.hist, l.outstanding())).into_iter().chain(extra.iter().filter_map(|g| g.latency(k)));
        for (hist, n) in parts {
            h.get_or_insert_with(Histogram::boxed).merge(hist);
            *out.get_or_insert(0) += n;
        }
        (h, out)
    }
}
