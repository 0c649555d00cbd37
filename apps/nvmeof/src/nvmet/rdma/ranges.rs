//! Namespace memory the adapter is moving data through right now: zero-copy reads whose
//! RDMA WRITE is being sent from it and zero-copy writes whose RDMA READ is landing in it.
//! Commands that touch the same bytes are ordered by it: a write waits for every range it
//! overlaps except zero-copy writes of its own queue (their RDMA READs, on the same QP, place
//! their data in the order they were posted, the InfiniBand ordering rules for one QP, so the
//! later one lands last), a read waits for overlapping writes.
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
    /// Owner queue: a stale id from a gone queue removes nothing.
    owner: Owner,
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

/// The ranges in flight.
pub(super) struct InFlight {
    slab: Vec<Range>,
    free: Vec<u16>,
    /// Indexed by a masked stripe number: no bounds check per access.
    stripes: Box<[Stripe; STRIPES]>,
    live: u32,
    writes: u32,
}

impl InFlight {
    /// Room for `n` ranges (at most `u16::MAX - 1`), reserved now: no allocation later.
    pub(super) fn with_capacity(n: usize) -> InFlight {
        let n = n.min(u16::MAX as usize - 1);
        let free_range = Range { first: 0, count: 0, write: false, live: false, owner: Owner::default() };
        let stripes: Box<[Stripe]> = alloc::vec![Stripe::default(); STRIPES].into_boxed_slice();
        InFlight {
            slab: alloc::vec![free_range; n],
            free: (0..n as u16).rev().collect(),
            stripes: stripes.try_into().expect("STRIPES counters"),
            live: 0,
            writes: 0,
        }
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Whether `[start, end)` may overlap a range in flight (only writes' when
    /// `writes_only`): whether a stripe it touches is counted (see the module doc). `group`
    /// is the asking command's poll group: every group's ranges count (the test-only mutation
    /// `sim-mutation-cross-group` looks at that group's own only, to show the simulator
    /// catches a missing cross-group order).
    #[inline]
    pub(super) fn overlaps(&self, start: u64, end: u64, writes_only: bool, group: usize) -> bool {
        if self.live == 0 || (writes_only && self.writes == 0) {
            return false;
        }
        if cfg!(feature = "sim-mutation-cross-group") {
            return self.overlaps_in_group(start, end, writes_only, group);
        }
        let (first, count) = span(start, end);
        (0..count).any(|k| {
            let s = self.stripes[counter(first, k)];
            (if writes_only { s.writes } else { s.all }) != 0
        })
    }

    /// Whether a zero-copy Write of queue (`q`, `gen`) to `[start, end)` must wait: whether a
    /// stripe it touches is counted for anything but that queue's own zero-copy writes (a
    /// read being sent, another queue's write). Those it may follow on its QP: their data is
    /// placed first. Under the test-only mutation, as [`Self::overlaps`] (any range).
    #[inline]
    pub(super) fn write_waits(&self, start: u64, end: u64, q: QueueAt, gen: u16) -> bool {
        if self.live == 0 {
            return false;
        }
        if cfg!(feature = "sim-mutation-cross-group") {
            return self.overlaps_in_group(start, end, false, q.g);
        }
        let me = Owner::of(q, gen);
        let (first, count) = span(start, end);
        (0..count).any(|k| {
            let s = self.stripes[counter(first, k)];
            s.all != 0 && !(s.all == s.own && s.writer == me)
        })
    }

    /// The test-only mutation's check (feature `sim-mutation-cross-group`; compiled away
    /// without it): group `group`'s own ranges only, by a pass over the slab.
    #[cold]
    fn overlaps_in_group(&self, start: u64, end: u64, writes_only: bool, group: usize) -> bool {
        let (first, count) = span(start, end);
        self.slab.iter().any(|r| r.live && r.owner.group as usize == group && (r.write || !writes_only) && r.count > 0 && count > 0 && r.first < first + count as u64 && first < r.first + r.count as u64)
    }

    /// Track `[start, end)`; `None` when full (cannot happen with the capacity the target reserves).
    #[inline]
    pub(super) fn insert(&mut self, start: u64, end: u64, write: bool, q: QueueAt, gen: u16) -> Option<RangeId> {
        let i = self.free.pop()?;
        let (first, count) = span(start, end);
        let owner = Owner::of(q, gen);
        self.slab[i as usize] = Range { first, count, write, live: true, owner };
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

    /// Forget every range of poll group `group`'s queues (the group is destroyed: none of its
    /// QPs moves data any more; slow path: a pass over the slab).
    pub(super) fn remove_group(&mut self, group: usize) {
        for i in 0..self.slab.len() {
            let r = self.slab[i];
            if r.live && r.owner.group as usize == group {
                let q = QueueAt { g: group, i: r.owner.conn as usize };
                self.remove(RangeId(i as u16), q, r.owner.gen);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = 1 << STRIPE_SHIFT;

    #[test]
    fn insert_remove_overlap() {
        let mut f = InFlight::with_capacity(4);
        let (q1, q2, q0) = (QueueAt { g: 0, i: 1 }, QueueAt { g: 1, i: 1 }, QueueAt { g: 0, i: 0 });
        let a = f.insert(0, P, false, q1, 7).unwrap();
        let b = f.insert(2 * P, 3 * P, true, q1, 7).unwrap();
        let c = f.insert(4 * P, 5 * P, false, q2, 7).unwrap();
        assert!(f.overlaps(50, 60, false, 0) && !f.overlaps(50, 60, true, 0));
        assert!(f.overlaps(2 * P + 50, 2 * P + 60, true, 0) && !f.overlaps(P, 2 * P, false, 0));
        f.remove(a, q1, 8); // wrong generation: stays
        f.remove(a, q2, 7); // same index and generation in another group: stays
        assert!(f.overlaps(50, 60, false, 0));
        f.remove(a, q1, 7);
        assert!(!f.overlaps(50, 60, false, 0) && f.overlaps(4 * P + 1, 4 * P + 2, false, 0));
        f.remove_queue(q1, 7, |_| false);
        assert!(!f.overlaps(0, 1000 * P, true, 0) && f.overlaps(0, 1000 * P, false, 0));
        f.remove(b, q1, 7); // already gone
        f.remove(c, q2, 7);
        assert!(f.is_empty() && !f.overlaps(0, u64::MAX, false, 0));
        let ids: Vec<_> = (0..4).map(|k| f.insert(k * P, k * P + 1, false, q0, 0)).collect();
        assert!(ids.iter().all(|i| i.is_some()) && f.insert(9 * P, 10 * P, false, q0, 0).is_none());
    }

    /// The check is by stripe: ranges sharing a 4 KiB stripe, or a counter (a multiple of
    /// `STRIPES` stripes apart), count as overlapping; a range longer than the table touches
    /// every counter once and leaves none behind.
    #[test]
    fn stripes_are_conservative_and_balanced() {
        let q0 = QueueAt { g: 0, i: 0 };
        let mut f = InFlight::with_capacity(4);
        let a = f.insert(P, P + 512, true, q0, 0).unwrap();
        assert!(f.overlaps(P + 3584, 2 * P, true, 0), "same stripe");
        assert!(f.overlaps(P + (STRIPES as u64) * P, P + (STRIPES as u64) * P + 1, true, 0), "same counter");
        assert!(!f.overlaps(0, P, false, 0) && !f.overlaps(2 * P, 3 * P, false, 0) && !f.overlaps(P, P, false, 0));
        let big = f.insert(0, (STRIPES as u64 + 3) * P, false, q0, 0).unwrap();
        assert!(f.overlaps(7 * P, 7 * P + 1, false, 0) && !f.overlaps(7 * P, 7 * P + 1, true, 0));
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
        let mut f = InFlight::with_capacity(8);
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
}
