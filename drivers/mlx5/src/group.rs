//! A queue group: the data path of one poll group as an object of its own (issue #13).
//!
//! A [`QueueGroup`] owns the rings one poller drives: one CQ that the send and receive
//! completions of all its QPs go to, one SRQ whose receives they share, the SQ state of each of
//! its QPs, and a UAR page of its own (ALLOC_UAR per group), so two groups never write the same
//! doorbell register, as rdma-core gives each thread context its own UAR. It implements
//! [`rdma::DataPath`] by itself and holds no reference to the [`Mlx5`](crate::Mlx5) that
//! created it: it can live on another thread (it is `Send` when the DMA and MMIO types are).
//!
//! The device (the control part) creates it ([`Mlx5::create_group`](crate::Mlx5::create_group)),
//! creates, connects and destroys QPs in it (each call takes the group) and learns device
//! events for it, which it publishes in the group's `GroupSignals` (shared by the device's
//! record of the group and the group): a device failure (or reset), a CQ error, an SRQ
//! catastrophic error, SRQ limit events. The group reads them itself, without the device, once
//! per turn ([`QueueGroup::sync`]: one load when nothing happened, not per I/O), wherever it is
//! polled; a failed group is flushed (its outstanding work completes with flush errors) and
//! released without commands (the reset dropped its objects on the adapter).
//!
//! QP creation is split from attaching it, so the control part can make and destroy a group's
//! QPs while the group is polled on another thread: [`Mlx5::make_group_qp`](crate::Mlx5::make_group_qp)
//! makes a [`GroupQp`] by firmware command from the group's [`GroupHandle`] (a `Copy` record of
//! its numbers, no access to its rings) and may connect it
//! ([`Mlx5::connect_made_qp`](crate::Mlx5::connect_made_qp)); the group's owner hands it over
//! (the app's hand-off ring) and the group takes it into its index
//! ([`QueueGroup::attach_qp`]). Back the same way: the control part destroys the QP by QPN
//! ([`Mlx5::destroy_handed_qp`](crate::Mlx5::destroy_handed_qp)), then the group lets it go
//! ([`QueueGroup::detach_qp`]: its CQEs still in the CQ are taken out and the receives they had
//! taken go back to the SRQ) and the QP's memory is dropped wherever the app likes. A QP must be
//! in its group before the peer can send to it (the passive side sends its CM REP once the
//! group has it).
//!
//! Per I/O: a QP is reached from its QPN (in the WR's call or the CQE) through the group's
//! direct-mapped index (one load and one compare); the rings' mechanics are the crate's one
//! home for them (`datapath`, `recovery`'s flush).

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::datapath::{decode_cqe, poll_ring, ring_sq, write_send, write_send_pair};
use crate::device::{Cq, Qp, Srq};
use crate::error::Error;
use crate::layout::get;
use crate::objindex::ObjIndex;
use hal::{DmaRegion, Mmio};
use rdma::{Completion, Cqn, DataPath, Qpn, RecvWr, SendWr, Srqn, VerbsError};

/// Counters of one group's data path (the device's [`Stats`](crate::Stats) do not include
/// them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupStats {
    /// Doorbells written to the group's UAR page, and send WQEs written (a doorbell may
    /// announce several).
    pub sq_doorbells: u64,
    pub send_wqes: u64,
    /// CQEs naming no QP of the group or no outstanding work (dropped, not reported).
    pub bad_cqes: u64,
    /// CQEs of destroyed QPs taken out of the CQ at destroy.
    pub cqes_cleaned: u64,
    /// Work requests completed with a flush error because the device or the CQ failed.
    pub flushed_on_failure: u64,
    /// Completions polled from the group's CQ and reported (flushes not included).
    pub completions: u64,
}

impl GroupStats {
    /// Field-wise sum (slow path: a group's counts added to those of groups released before).
    pub fn plus(self, o: GroupStats) -> GroupStats {
        GroupStats {
            sq_doorbells: self.sq_doorbells + o.sq_doorbells,
            send_wqes: self.send_wqes + o.send_wqes,
            bad_cqes: self.bad_cqes + o.bad_cqes,
            cqes_cleaned: self.cqes_cleaned + o.cqes_cleaned,
            flushed_on_failure: self.flushed_on_failure + o.flushed_on_failure,
            completions: self.completions + o.completions,
        }
    }
}

/// What the device tells one group without being called (see the module doc): written by the
/// device on its slow path (a failure, an EQ event), read by the group with plain loads
/// (acquire/release; no read-modify-write on the group's side). Bits are never cleared: a
/// group that saw one is broken for good.
#[derive(Debug, Default)]
pub(crate) struct GroupSignals {
    /// [`GroupSignals::FAILED`] | [`GroupSignals::CQ_ERROR`] | [`GroupSignals::SRQ_FAILED`].
    flags: AtomicU32,
    /// SRQ limit events for the group's SRQ so far.
    limit_events: AtomicU64,
}

impl GroupSignals {
    /// The device failed (or was reset) since the group was made.
    pub(crate) const FAILED: u32 = 1;
    /// The adapter reported the group's CQ in error (an overrun).
    pub(crate) const CQ_ERROR: u32 = 2;
    /// The adapter reported the group's SRQ failed (catastrophic error).
    pub(crate) const SRQ_FAILED: u32 = 4;

    /// The device's side (slow path; the device is the one writer).
    pub(crate) fn raise(&self, bit: u32) {
        self.flags.fetch_or(bit, Ordering::Release);
    }
    pub(crate) fn limit_event(&self) {
        self.limit_events.fetch_add(1, Ordering::Release);
    }
}

/// The rings of one poll group (see the module doc). `D`: the platform's DMA region, `M` its
/// BAR0 window (a handle to the same BAR the device holds).
pub struct QueueGroup<D, M> {
    /// Slot in the device's group list, and the device generation the group was made in.
    pub(crate) id: usize,
    pub(crate) generation: u32,
    pub(crate) uar: u32,
    pub(crate) bar: M,
    pub(crate) cq: Cq<D>,
    pub(crate) srq: Srq<D>,
    pub(crate) qps: Vec<Qp<D>>,
    pub(crate) qp_pos: ObjIndex,
    /// The device failed since the group was made (learnt by [`QueueGroup::sync`]).
    pub(crate) failed: bool,
    pub(crate) stats: GroupStats,
    /// What the device signals to the group, and the flags the group has taken in.
    pub(crate) signals: Arc<GroupSignals>,
    pub(crate) seen: u32,
}

/// A group's numbers, all the control part needs to make and destroy QPs for it and arm its
/// SRQ limit while the group itself is driven elsewhere (see the module doc). `Copy` and `Send`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupHandle {
    pub(crate) id: usize,
    pub(crate) generation: u32,
    pub(crate) uar: u32,
    pub(crate) cqn: Cqn,
    pub(crate) rmpn: u32,
    /// Receives the group's SRQ holds (the most its limit may be armed at).
    pub(crate) srq_capacity: usize,
}

impl GroupHandle {
    /// The group's CQ.
    pub fn cqn(&self) -> Cqn {
        self.cqn
    }
}

/// A QP made for a group and not in it (not yet attached, or detached): its rings and state.
/// `Send` when the DMA type is; dropping it frees its memory (the adapter's QP must be gone
/// or never have been handed to a peer).
pub struct GroupQp<D> {
    /// The group it was made for: its slot and device generation.
    pub(crate) group: (usize, u32),
    pub(crate) qp: Qp<D>,
}

impl<D> GroupQp<D> {
    pub fn qpn(&self) -> Qpn {
        self.qp.qpn
    }
    pub fn state(&self) -> crate::QpState {
        self.qp.state
    }
}

impl<D: DmaRegion, M: Mmio> QueueGroup<D, M> {
    /// The group's numbers for the control part ([`GroupHandle`]).
    pub fn handle(&self) -> GroupHandle {
        GroupHandle { id: self.id, generation: self.generation, uar: self.uar, cqn: self.cq.cqn, rmpn: self.srq.rmpn, srq_capacity: self.srq.capacity() }
    }

    /// Take QP `q` (made for this group by [`Mlx5::make_group_qp`](crate::Mlx5::make_group_qp))
    /// into the group: from now on its posts go through the group and its CQEs are reported.
    /// Slow path (rebuilds the QP index). A QP made for another group, or before a device
    /// reset, is refused and given back.
    pub fn attach_qp(&mut self, q: GroupQp<D>) -> Result<Qpn, (Error, GroupQp<D>)> {
        if q.group != (self.id, self.generation) {
            return Err((Error::InvalidArgument("a QP made for another group"), q));
        }
        if self.index(q.qp.qpn).is_some() {
            return Err((Error::InvalidArgument("QP already in the group"), q));
        }
        let qpn = q.qp.qpn;
        self.qps.push(q.qp);
        self.reindex();
        Ok(qpn)
    }

    /// Let QP `qpn` go, once the control part destroyed it on the adapter
    /// ([`Mlx5::destroy_handed_qp`](crate::Mlx5::destroy_handed_qp)): its CQEs still in the
    /// group's CQ are taken out and the SRQ receives they had taken posted again (as Linux
    /// cleans the CQ), then it leaves the index. Slow path. The QP object comes back (drop it
    /// to free its memory).
    pub fn detach_qp(&mut self, qpn: Qpn) -> Result<GroupQp<D>, Error> {
        let i = self.index(qpn).ok_or(Error::NoSuchObject { kind: "QP", id: qpn.0 })?;
        if !self.failed && !self.cq.broken {
            let (freed, bad) = crate::device::cq_clean::clean_ring(&mut self.cq, qpn, true, Some(&mut self.srq));
            self.stats.cqes_cleaned += freed;
            self.stats.bad_cqes += bad;
        }
        let qp = self.qps.remove(i);
        self.reindex();
        Ok(GroupQp { group: (self.id, self.generation), qp })
    }

    /// The group's CQ (every QP of the group completes to it).
    pub fn cqn(&self) -> Cqn {
        self.cq.cqn
    }
    /// The group's SRQ, by its RMP number.
    pub fn srqn(&self) -> Srqn {
        Srqn(self.srq.rmpn)
    }
    /// The group's own UAR page.
    pub fn uar(&self) -> u32 {
        self.uar
    }
    pub fn stats(&self) -> GroupStats {
        self.stats
    }
    /// The group's slot in the device's group list (its number in
    /// [`Mlx5::group_stats`](crate::Mlx5::group_stats)).
    pub fn slot(&self) -> usize {
        self.id
    }
    pub fn live_qps(&self) -> usize {
        self.qps.len()
    }
    pub fn qp(&self, qpn: Qpn) -> Option<&Qp<D>> {
        self.index(qpn).map(|i| &self.qps[i])
    }
    pub fn srq(&self) -> &Srq<D> {
        &self.srq
    }
    /// Whether the group learnt that its device failed (see the module doc).
    pub fn failed(&self) -> bool {
        self.failed
    }
    /// Whether the group can no longer work (learnt by [`QueueGroup::sync`]): its device
    /// failed, or the adapter reported its CQ in error or its SRQ failed.
    pub fn broken(&self) -> bool {
        self.failed || self.cq.broken || self.srq.failed
    }

    /// Once per turn of the group, before its CQ is polled (`rdma::GroupVerbs::check_group`;
    /// not per I/O), without the device: take in what the device signalled since the last
    /// look (one load when nothing did). A device failure or reset marks the group failed, a
    /// CQ error its CQ broken (either way its QPs go to ERROR, so its CQ flushes what is
    /// outstanding), an SRQ catastrophic error its SRQ failed. Returns whether the device
    /// failed.
    #[inline]
    pub fn sync(&mut self) -> bool {
        let f = self.signals.flags.load(Ordering::Acquire);
        if f != self.seen {
            self.take_signals(f);
        }
        self.failed
    }

    #[cold]
    fn take_signals(&mut self, f: u32) {
        self.seen = f;
        self.failed |= f & GroupSignals::FAILED != 0;
        self.cq.broken |= f & GroupSignals::CQ_ERROR != 0;
        self.srq.failed |= f & GroupSignals::SRQ_FAILED != 0;
        if self.failed || self.cq.broken {
            for q in &mut self.qps {
                q.state = crate::QpState::Error;
            }
        }
    }

    /// Whether the SRQ limit armed on the group's SRQ was reached since the last call (slow
    /// path, without the device; syncs the group first).
    pub fn take_srq_limit(&mut self) -> bool {
        self.sync();
        self.srq.limit_events = self.signals.limit_events.load(Ordering::Acquire);
        self.srq.take_limit()
    }

    #[inline(always)]
    pub(crate) fn index(&self, qpn: Qpn) -> Option<usize> {
        self.qp_pos.find(&self.qps, qpn.0, |q| q.qpn.0)
    }

    pub(crate) fn reindex(&mut self) {
        self.qp_pos.rebuild(self.qps.iter().map(|q| q.qpn.0));
    }

    #[inline(always)]
    fn qp_at(&self, qpn: Qpn) -> Result<usize, Error> {
        if self.failed {
            return Err(Error::DeviceFailed);
        }
        self.index(qpn).ok_or(Error::NoSuchObject { kind: "QP", id: qpn.0 })
    }

    #[inline(always)]
    fn ring(&mut self, i: usize) {
        if ring_sq(&mut self.qps[i], &self.bar, self.uar as usize * crate::device::PAGE) {
            self.stats.sq_doorbells += 1;
        }
    }

    /// Every work request outstanding on the group's QPs and SRQ as flush errors (the device
    /// failed or the CQ is broken), up to `out.len()`.
    fn flush(&mut self, out: &mut [Completion]) -> usize {
        let mut n = 0;
        for q in self.qps.iter_mut() {
            crate::device::flush_sq(q, out, &mut n);
        }
        if let Some(q) = self.qps.first() {
            crate::device::flush_srq(&mut self.srq, q.qpn, out, &mut n);
        }
        self.stats.flushed_on_failure += n as u64;
        n
    }
}

impl<D, M> VerbsError for QueueGroup<D, M> {
    type Error = Error;
}

impl<D: DmaRegion, M: Mmio> DataPath for QueueGroup<D, M> {
    fn post_send(&mut self, qp: Qpn, wr: &SendWr) -> Result<(), Error> {
        let i = self.qp_at(qp)?;
        write_send(&mut self.qps[i], wr, None)?;
        self.stats.send_wqes += 1;
        self.ring(i);
        Ok(())
    }
    fn post_send_deferred(&mut self, qp: Qpn, wr: &SendWr) -> Result<(), Error> {
        let i = self.qp_at(qp)?;
        write_send(&mut self.qps[i], wr, None)?;
        self.stats.send_wqes += 1;
        Ok(())
    }
    fn post_send_deferred_pair(&mut self, qp: Qpn, first: &SendWr, second: &SendWr) -> Result<(), Error> {
        let i = self.qp_at(qp)?;
        let (n, r) = write_send_pair(&mut self.qps[i], first, second);
        self.stats.send_wqes += n as u64;
        r
    }
    // Inlined into the caller's turn, as before the ring type (out of line it cost the
    // NVMe-oF target ~48 instructions per I/O at QD1: scripts/bench-nvmeof).
    #[inline(always)]
    fn ring_send(&mut self, qp: Qpn) -> Result<(), Error> {
        // A failed device's doorbell page is not rung (its work is flushed instead).
        let i = self.qp_at(qp)?;
        self.ring(i);
        Ok(())
    }
    fn post_recv(&mut self, _qp: Qpn, _wr: &RecvWr) -> Result<(), Error> {
        Err(Error::InvalidArgument("a group's QPs take their receives from its SRQ"))
    }
    fn post_srq_recv(&mut self, srq: Srqn, wr: &RecvWr) -> Result<(), Error> {
        self.post_srq_recv_batch(srq, core::slice::from_ref(wr))
    }
    fn post_srq_recv_batch(&mut self, srq: Srqn, wrs: &[RecvWr]) -> Result<(), Error> {
        if srq != self.srqn() {
            return Err(Error::NoSuchObject { kind: "SRQ", id: srq.0 });
        }
        if self.failed {
            return Err(Error::DeviceFailed);
        }
        self.srq.post_batch(wrs)
    }
    fn poll_cq(&mut self, cq: Cqn, out: &mut [Completion]) -> usize {
        if cq != self.cq.cqn {
            return 0;
        }
        if self.failed || self.cq.broken {
            return self.flush(out);
        }
        let (qps, pos, srq) = (&mut self.qps, &self.qp_pos, &mut self.srq);
        let mut bad = 0u64;
        let n = poll_ring(&mut self.cq, out, |e, wc| {
            let qpn = Qpn(get(e, crate::ifc::cqe64::qpn) as u32);
            let Some(i) = pos.find(qps, qpn.0, |q| q.qpn.0) else {
                bad += 1;
                return false;
            };
            let reported = decode_cqe(e, &mut qps[i], Some(&mut *srq), wc);
            bad += u64::from(!reported);
            reported
        });
        self.stats.bad_cqes += bad;
        self.stats.completions += n as u64;
        n
    }
}
