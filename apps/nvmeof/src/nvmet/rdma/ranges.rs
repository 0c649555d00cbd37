//! A poll group's namespace memory the adapter is moving data through right now: zero-copy
//! reads whose RDMA WRITE is being sent from it and zero-copy writes whose RDMA READ is landing
//! in it (and writes a store may place at any time until it completes: staged and in-capsule
//! Writes, Write Zeroes, DSM). The group's commands that touch the same bytes are ordered by
//! it: a write waits for every range it overlaps except zero-copy writes of its own queue
//! (their RDMA READs, on the same QP, place their data in the order they were posted, the
//! InfiniBand ordering rules for one QP, so the later one lands last), a read waits for
//! overlapping writes. Each group has its own table, written by its turn only; the other
//! groups' transfers are ordered by the counts every group keeps per 64 KiB stripe
//! (`stripes.rs`): a range's transfer goes only once its claim ([`InFlight::claim`]) finds no
//! other group's in the way, and its counts stay from that claim until the range ends.
//!
//! Overlap is told by stripe: namespace memory is cut into 4 KiB stripes ([`STRIPE_SHIFT`]),
//! and a fixed table of counters, reached by the stripe number's low bits, counts the ranges
//! (and the writes among them) that touch each stripe. A check reads the counters of the
//! stripes its range touches (one for an aligned 4 KiB I/O): no search over what is in
//! flight. A stripe also keeps the queue of its first write and how many of its writes are
//! that queue's (the count is exact while that queue is kept, which changes only when the
//! stripe has no write left), so "only this queue's writes here" is one compare per stripe. It is conservative: ranges that share a stripe, or whose stripes share a counter
//! (64 MiB apart, [`STRIPES`] stripes), are ordered as if they overlapped, which is never
//! wrong, only a wait that exact bounds would not make. Entries live in a slab (stable ids,
//! carried in the work request that ends them); insert and remove are O(stripes touched).

use alloc::boxed::Box;
use alloc::vec::Vec;

use super::stripes::{self, Claim, GroupStripes};
use super::QueueAt;

/// Stripe size (4 KiB): ranges are told apart by the stripes they touch.
const STRIPE_SHIFT: u32 = 12;
/// Stripe counters (a power of two), direct-mapped by the stripe number's low bits.
const STRIPES: usize = 1 << 14;

/// A range's slab index (`NONE`: no range).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RangeId(u16);

impl RangeId {
    pub(super) const NONE: RangeId = RangeId(u16::MAX);
    #[inline(always)]
    pub(super) fn raw(self) -> u16 {
        self.0
    }
    #[inline(always)]
    pub(super) fn from_raw(v: u16) -> RangeId {
        RangeId(v)
    }
    #[inline(always)]
    pub(super) fn is_none(self) -> bool {
        self == RangeId::NONE
    }
}

#[derive(Debug, Clone, Copy)]
struct Range {
    /// The stripes it touches: the first stripe number and how many (see [`span`]).
    first: u64,
    count: u32,
    write: bool,
    live: bool,
    /// Where its counts are in the group's cross-group row (`stripes.rs`): added by its claim,
    /// taken back when the claim yields to a lower group ([`InFlight::claim`]) or the range
    /// ends. [`NO_COUNTS`], the counter of its one 64 KiB stripe (a 4 KiB I/O's case, kept at
    /// the claim so the removal does not work it out again), or [`SPAN_COUNTS`] (those of
    /// [`Range::cross_span`]).
    counts: u16,
    /// Owner queue: a stale id from a gone queue removes nothing.
    owner: Owner,
}

/// [`Range::counts`]: none held.
const NO_COUNTS: u16 = u16::MAX;
/// [`Range::counts`]: held over every stripe of [`Range::cross_span`].
const SPAN_COUNTS: u16 = u16::MAX - 1;
const _: () = assert!(stripes::STRIPES < SPAN_COUNTS as usize);

impl Range {
    /// The cross-group stripes (64 KiB, `stripes.rs`) a range over 4 KiB stripes `(first,
    /// count)` touches; every counter when it touches every 4 KiB counter (its count was cut
    /// there).
    #[inline(always)]
    fn cross_span(first: u64, count: u32) -> (u64, u32) {
        if count == 0 || count as usize == STRIPES {
            return (0, if count == 0 { 0 } else { stripes::STRIPES as u32 });
        }
        let shift = stripes::STRIPE_SHIFT - STRIPE_SHIFT;
        let n = ((first + count as u64 - 1) >> shift) - (first >> shift) + 1;
        (first >> shift, n.min(stripes::STRIPES as u64) as u32)
    }
}

/// Ranges touching one stripe counter: all of them, the writes among them, and how many of
/// those are queue `writer`'s (the queue of the write that found the stripe without one). A
/// range counts at most once per counter (it visits at most [`STRIPES`] of them), and there
/// are fewer than 2^16 ranges, so no count overflows.
#[derive(Debug, Clone, Copy, Default)]
struct Stripe {
    all: u16,
    writes: u16,
    own: u16,
    writer: Owner,
}

/// A queue as the stripes name it: poll group, index in it, generation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Owner {
    group: u16,
    conn: u16,
    gen: u16,
}

impl Owner {
    #[inline(always)]
    fn of(q: QueueAt, gen: u16) -> Owner {
        Owner { group: q.g as u16, conn: q.i as u16, gen }
    }
}

/// The stripes `[start, end)` touches, as (first stripe number, how many): none for an empty
/// range, at most [`STRIPES`] (a longer range touches every counter once).
#[inline(always)]
fn span(start: u64, end: u64) -> (u64, u32) {
    let first = start >> STRIPE_SHIFT;
    let n = if end > start { ((end - 1) >> STRIPE_SHIFT) - first + 1 } else { 0 };
    (first, n.min(STRIPES as u64) as u32)
}

/// The counter of stripe number `first + k`.
#[inline(always)]
fn counter(first: u64, k: u32) -> usize {
    (first.wrapping_add(k as u64) as usize) & (STRIPES - 1)
}

/// A group's ranges in flight.
pub(super) struct InFlight {
    slab: Vec<Range>,
    free: Vec<u16>,
    /// Indexed by a masked stripe number: no bounds check per access.
    stripes: Box<[Stripe; STRIPES]>,
    live: u32,
    writes: u32,
    /// The group's counts for the other groups, and its look at theirs.
    cross: GroupStripes,
}

impl InFlight {
    /// Room for `n` ranges (at most `u16::MAX - 1`), reserved now: no allocation later; the
    /// group's cross-group counts in `cross`.
    pub(super) fn with_capacity(n: usize, cross: GroupStripes) -> InFlight {
        let n = n.min(u16::MAX as usize - 1);
        let free_range = Range { first: 0, count: 0, write: false, live: false, counts: NO_COUNTS, owner: Owner::default() };
        let stripes: Box<[Stripe]> = alloc::vec![Stripe::default(); STRIPES].into_boxed_slice();
        InFlight {
            slab: alloc::vec![free_range; n],
            free: (0..n as u16).rev().collect(),
            stripes: stripes.try_into().expect("STRIPES counters"),
            live: 0,
            writes: 0,
            cross,
        }
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Whether `[start, end)` may overlap one of the group's ranges in flight (only writes'
    /// when `writes_only`): whether a stripe it touches is counted (see the module doc).
    #[inline]
    pub(super) fn overlaps(&self, start: u64, end: u64, writes_only: bool) -> bool {
        if self.live == 0 || (writes_only && self.writes == 0) {
            return false;
        }
        let (first, count) = span(start, end);
        (0..count).any(|k| {
            let s = self.stripes[counter(first, k)];
            (if writes_only { s.writes } else { s.all }) != 0
        })
    }

    /// Whether a zero-copy Write of queue (`q`, `gen`) to `[start, end)` must wait for the
    /// group's ranges: whether a stripe it touches is counted for anything but that queue's
    /// own zero-copy writes (a read being sent, another queue's write). Those it may follow on
    /// its QP: their data is placed first.
    #[inline]
    pub(super) fn write_waits(&self, start: u64, end: u64, q: QueueAt, gen: u16) -> bool {
        if self.live == 0 {
            return false;
        }
        let me = Owner::of(q, gen);
        let (first, count) = span(start, end);
        (0..count).any(|k| {
            let s = self.stripes[counter(first, k)];
            s.all != 0 && !(s.all == s.own && s.writer == me)
        })
    }

    /// Whether range `id`'s transfer may go as far as the other poll groups are concerned
    /// (called just before it goes, once the group's own ranges let it): its counts added to
    /// the group's row (unless a claim that kept them did already), then the other groups'
    /// counts of its stripes read after the fence (`stripes.rs`). False: the caller holds the
    /// command and claims again on a later turn; its counts stay while only higher-numbered
    /// groups are in the way and are taken back when a lower one is. Always true with one
    /// group, where the one test is all it costs.
    #[inline(always)]
    pub(super) fn claim(&mut self, id: RangeId) -> bool {
        self.cross.alone() || self.claim_cross(id)
    }

    /// Whether there are no other poll groups (nothing to claim against).
    #[inline(always)]
    pub(super) fn alone(&self) -> bool {
        self.cross.alone()
    }

    /// With other groups, a zero-copy Read's claim of its range `id` just before it is sent,
    /// as [`Self::claim`]; one that waits for the group's own writes (the caller's
    /// [`Self::overlaps`] then holds it) has its counts taken back and gets true. Called before
    /// the caller reads what it sends, so nothing of the caller's is kept across the call.
    #[inline(never)]
    pub(super) fn claim_send(&mut self, id: RangeId) -> bool {
        let Some(r) = self.slab.get_mut(id.0 as usize).filter(|r| r.live && r.count == 1) else { return self.claim_send_span(id) };
        if self.writes != 0 && self.stripes[counter(r.first, 0)].writes != 0 {
            return self.unclaim_held(id);
        }
        Self::claim_one(&self.cross, r)
    }

    /// [`Self::claim`] with other groups.
    #[inline(never)]
    fn claim_cross(&mut self, id: RangeId) -> bool {
        let Some(r) = self.slab.get_mut(id.0 as usize).filter(|r| r.live && r.count == 1) else { return self.claim_span(id) };
        Self::claim_one(&self.cross, r)
    }

    /// The claim of live range `r` over one 4 KiB stripe, so one cross-group stripe (a 4 KiB
    /// I/O's case), with no call (no registers to save).
    #[inline(always)]
    fn claim_one(cross: &GroupStripes, r: &mut Range) -> bool {
        let idx = (r.first >> (stripes::STRIPE_SHIFT - STRIPE_SHIFT)) as usize & (stripes::STRIPES - 1);
        let claim = cross.claim_one(idx, r.write, r.counts != NO_COUNTS);
        // Its counts stay unless it yielded (taken back then).
        r.counts = if claim == Claim::Yield { NO_COUNTS } else { idx as u16 };
        claim == Claim::Clear
    }

    /// [`Self::claim_send`] of a range over more (or no) 4 KiB stripes.
    #[cold]
    #[inline(never)]
    fn claim_send_span(&mut self, id: RangeId) -> bool {
        let Some(&Range { first, count, .. }) = self.slab.get(id.0 as usize).filter(|r| r.live) else { return true };
        if self.writes != 0 && (0..count).any(|k| self.stripes[counter(first, k)].writes != 0) {
            return self.unclaim_held(id);
        }
        self.claim_span(id)
    }

    /// Range `id`'s counts taken back: the group's own writes hold its command.
    #[cold]
    #[inline(never)]
    fn unclaim_held(&mut self, id: RangeId) -> bool {
        self.unclaim_cross(id);
        true
    }

    /// [`Self::claim_cross`] of a range over more (or no) 4 KiB stripes.
    #[cold]
    #[inline(never)]
    fn claim_span(&mut self, id: RangeId) -> bool {
        let Some(r) = self.slab.get_mut(id.0 as usize).filter(|r| r.live) else { return true };
        let (first, count) = Range::cross_span(r.first, r.count);
        let claim = self.cross.claim(first, count, r.write, r.counts != NO_COUNTS);
        r.counts = if claim == Claim::Yield { NO_COUNTS } else { SPAN_COUNTS };
        claim == Claim::Clear
    }

    /// Take range `id`'s counts back (a claim that kept them found the group's own ranges in
    /// the way again: a command held by its own group's table holds no counts).
    #[cold]
    fn unclaim_cross(&mut self, id: RangeId) {
        if let Some(r) = self.slab.get_mut(id.0 as usize).filter(|r| r.live && r.counts != NO_COUNTS) {
            Self::unshare(&self.cross, r.counts, r.write, r.first, r.count);
            r.counts = NO_COUNTS;
        }
    }

    /// Take a range's counts (`counts`, not [`NO_COUNTS`]) out of the group's cross-group row;
    /// the range's `write`, `first` and `count` as [`Range`]'s.
    #[inline(never)]
    fn unshare(cross: &GroupStripes, counts: u16, write: bool, first: u64, count: u32) {
        if counts != SPAN_COUNTS {
            cross.sub_one(counts as usize, write);
        } else {
            let (first, count) = Range::cross_span(first, count);
            cross.sub(first, count, write);
        }
    }

    /// Track `[start, end)`; `None` when full (cannot happen with the capacity the target reserves).
    /// Inlined: on every zero-copy command's path.
    #[inline(always)]
    pub(super) fn insert(&mut self, start: u64, end: u64, write: bool, q: QueueAt, gen: u16) -> Option<RangeId> {
        let i = self.free.pop()?;
        let (first, count) = span(start, end);
        let owner = Owner::of(q, gen);
        self.slab[i as usize] = Range { first, count, write, live: true, counts: NO_COUNTS, owner };
        for k in 0..count {
            let s = &mut self.stripes[counter(first, k)];
            s.all += 1;
            if write {
                if s.writes == 0 {
                    s.writer = owner;
                }
                s.writes += 1;
                s.own += (s.writer == owner) as u16;
            }
        }
        self.live += 1;
        self.writes += write as u32;
        Some(RangeId(i))
    }

    /// Stop tracking `id` if queue (`q`, `gen`) still owns it. Inlined: on every zero-copy
    /// command's path, from the turn's generic code in the crate that instantiates it.
    #[inline(always)]
    pub(super) fn remove(&mut self, id: RangeId, q: QueueAt, gen: u16) {
        let Some(r) = self.slab.get_mut(id.0 as usize) else { return };
        if !r.live || r.owner != Owner::of(q, gen) {
            return;
        }
        r.live = false;
        // Its counts for the other groups: one call, only when it holds some (never with one
        // group).
        if r.counts != NO_COUNTS {
            Self::unshare(&self.cross, r.counts, r.write, r.first, r.count);
        }
        let (first, count, write, owner) = (r.first, r.count, r.write, r.owner);
        for k in 0..count {
            let s = &mut self.stripes[counter(first, k)];
            s.all -= 1;
            if write {
                s.writes -= 1;
                s.own -= (s.writer == owner) as u16;
            }
        }
        self.live -= 1;
        self.writes -= write as u32;
        self.free.push(id.0);
    }

    /// Forget every range of queue (`q`, `gen`) but those `keep` names (its QP is gone; slow
    /// path: a pass over the slab).
    pub(super) fn remove_queue(&mut self, q: QueueAt, gen: u16, keep: impl Fn(RangeId) -> bool) {
        for i in 0..self.slab.len() {
            if !keep(RangeId(i as u16)) {
                self.remove(RangeId(i as u16), q, gen);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = 1 << STRIPE_SHIFT;

    /// The cross-group counts of a target with one poll group (none kept).
    fn one() -> GroupStripes {
        stripes::Rows::new(1).of(0)
    }

    #[test]
    fn insert_remove_overlap() {
        let mut f = InFlight::with_capacity(4, one());
        let (q1, q2, q0) = (QueueAt { g: 0, i: 1 }, QueueAt { g: 1, i: 1 }, QueueAt { g: 0, i: 0 });
        let a = f.insert(0, P, false, q1, 7).unwrap();
        let b = f.insert(2 * P, 3 * P, true, q1, 7).unwrap();
        let c = f.insert(4 * P, 5 * P, false, q2, 7).unwrap();
        assert!(f.overlaps(50, 60, false) && !f.overlaps(50, 60, true));
        assert!(f.overlaps(2 * P + 50, 2 * P + 60, true) && !f.overlaps(P, 2 * P, false));
        f.remove(a, q1, 8); // wrong generation: stays
        f.remove(a, q2, 7); // same index and generation in another group: stays
        assert!(f.overlaps(50, 60, false));
        f.remove(a, q1, 7);
        assert!(!f.overlaps(50, 60, false) && f.overlaps(4 * P + 1, 4 * P + 2, false));
        f.remove_queue(q1, 7, |_| false);
        assert!(!f.overlaps(0, 1000 * P, true) && f.overlaps(0, 1000 * P, false));
        f.remove(b, q1, 7); // already gone
        f.remove(c, q2, 7);
        assert!(f.is_empty() && !f.overlaps(0, u64::MAX, false));
        let ids: Vec<_> = (0..4).map(|k| f.insert(k * P, k * P + 1, false, q0, 0)).collect();
        assert!(ids.iter().all(|i| i.is_some()) && f.insert(9 * P, 10 * P, false, q0, 0).is_none());
    }

    /// The check is by stripe: ranges sharing a 4 KiB stripe, or a counter (a multiple of
    /// `STRIPES` stripes apart), count as overlapping; a range longer than the table touches
    /// every counter once and leaves none behind.
    #[test]
    fn stripes_are_conservative_and_balanced() {
        let q0 = QueueAt { g: 0, i: 0 };
        let mut f = InFlight::with_capacity(4, one());
        let a = f.insert(P, P + 512, true, q0, 0).unwrap();
        assert!(f.overlaps(P + 3584, 2 * P, true), "same stripe");
        assert!(f.overlaps(P + (STRIPES as u64) * P, P + (STRIPES as u64) * P + 1, true), "same counter");
        assert!(!f.overlaps(0, P, false) && !f.overlaps(2 * P, 3 * P, false) && !f.overlaps(P, P, false));
        let big = f.insert(0, (STRIPES as u64 + 3) * P, false, q0, 0).unwrap();
        assert!(f.overlaps(7 * P, 7 * P + 1, false) && !f.overlaps(7 * P, 7 * P + 1, true));
        f.remove(big, q0, 0);
        f.remove(a, q0, 0);
        assert!(f.is_empty() && f.stripes.iter().all(|s| s.all == 0 && s.writes == 0 && s.own == 0));
    }

    /// A Write may follow only its own queue's writes: not a read, not another queue's write
    /// (nor a gone generation's), and once the stripe's first writer is gone, a later queue's
    /// lone write is told correctly again only when the stripe has no write left.
    #[test]
    fn a_write_follows_only_its_own_queues_writes() {
        let (a, b) = (QueueAt { g: 0, i: 1 }, QueueAt { g: 1, i: 1 });
        let mut f = InFlight::with_capacity(8, one());
        assert!(!f.write_waits(0, P, a, 3));
        let w1 = f.insert(0, P, true, a, 3).unwrap();
        let w2 = f.insert(0, P, true, a, 3).unwrap();
        assert!(!f.write_waits(0, P, a, 3), "own writes only");
        assert!(f.write_waits(0, P, a, 4) && f.write_waits(0, P, b, 3), "another generation, another queue");
        assert!(!f.write_waits(0, 2 * P, a, 3) && f.write_waits(P / 2, 3 * P, b, 3));
        let r = f.insert(0, 1, false, a, 3).unwrap();
        assert!(f.write_waits(0, P, a, 3), "a read being sent");
        f.remove(r, a, 3);
        let wb = f.insert(0, P, true, b, 3).unwrap();
        assert!(f.write_waits(0, P, a, 3) && f.write_waits(0, P, b, 3), "writes of two queues");
        f.remove(w1, a, 3);
        f.remove(w2, a, 3);
        assert!(f.write_waits(0, P, b, 3), "conservative: b's lone write, a was the stripe's writer");
        f.remove(wb, b, 3);
        let wb = f.insert(0, P, true, b, 3).unwrap();
        assert!(!f.write_waits(0, P, b, 3) && f.write_waits(0, P, a, 3));
        f.remove_queue(b, 3, |_| false);
        assert!(f.is_empty() && f.stripes.iter().all(|s| s.all == 0 && s.writes == 0 && s.own == 0));
        let _ = wb;
    }

    /// Over two groups: a range's counts come with its claim and go with it; a claim of a
    /// write over the other group's claimed read yields in group 1 (counts taken back, the
    /// range kept) and keeps in group 0; a range not claimed is in no other group's way; a
    /// read held by its own group's write holds no counts; the claim goes once the other
    /// group's range is gone, and nothing is left behind.
    #[cfg(not(feature = "sim-mutation-cross-group"))]
    #[test]
    fn claims_over_two_groups() {
        let rows = stripes::Rows::new(2);
        let (mut g0, mut g1) = (InFlight::with_capacity(4, rows.of(0)), InFlight::with_capacity(4, rows.of(1)));
        let (q0, q1) = (QueueAt { g: 0, i: 0 }, QueueAt { g: 1, i: 0 });
        let r = g0.insert(16 * P, 17 * P, false, q0, 1).unwrap();
        let w = g1.insert(16 * P + 512, 16 * P + 1024, true, q1, 1).unwrap();
        assert!(rows.of(0).own_is_clear() && rows.of(1).own_is_clear(), "no counts before a claim");
        assert!(g0.claim(r), "nothing of group 1 claimed");
        assert!(!g1.claim(w) && !g1.claim(w), "group 1 yields to group 0's read");
        assert!(rows.of(1).own_is_clear(), "group 1 took its counts back");
        g0.remove(r, q0, 1);
        assert!(rows.of(0).own_is_clear());
        assert!(g1.claim(w), "group 0's read is done");
        let r2 = g0.insert(31 * P, 32 * P, false, q0, 1).unwrap();
        assert!(!g0.claim_send(r2), "same 64 KiB stripe as group 1's write: group 0 keeps and waits");
        assert!(!rows.of(0).own_is_clear(), "kept");
        // Group 0's own write of the stripe is in the way now: the read's counts go back (its
        // group's table holds it).
        let own = g0.insert(31 * P, 32 * P, true, QueueAt { g: 0, i: 1 }, 1).unwrap();
        assert!(g0.claim_send(r2) && rows.of(0).own_is_clear(), "taken back");
        g0.remove(own, QueueAt { g: 0, i: 1 }, 1);
        assert!(!g0.claim_send(r2));
        g1.remove(w, q1, 1);
        assert!(g0.claim_send(r2) && !rows.of(0).own_is_clear());
        let span = g0.insert(40 * P + 7, 41 * P + 7, false, q0, 1).unwrap();
        assert!(g0.claim_send(span), "over two 4 KiB stripes");
        g0.remove_queue(q0, 1, |_| false);
        assert!(g0.is_empty() && g1.is_empty() && rows.of(0).own_is_clear() && rows.of(1).own_is_clear());
    }
}
