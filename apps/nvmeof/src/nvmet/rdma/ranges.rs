//! Namespace memory the adapter is moving data through right now: zero-copy reads whose
//! RDMA WRITE is being sent from it and zero-copy writes whose RDMA READ is landing in it.
//! Commands that touch the same bytes are ordered by it: a write waits for every range it
//! overlaps, a read waits for overlapping writes. Entries live in a slab (stable ids, carried
//! in the work request that ends them) with a dense list of live ids for the overlap scan;
//! insert and remove are O(1), the scan is over what is in flight only.

use alloc::vec::Vec;

use super::QueueAt;

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
    start: u64,
    end: u64,
    write: bool,
    /// Owner queue (group, index in it, generation): a stale id from a gone queue removes
    /// nothing.
    group: u16,
    conn: u16,
    gen: u16,
    /// Position in `live`; `u16::MAX` when free.
    pos: u16,
}

impl Range {
    #[inline(always)]
    fn owned_by(&self, q: QueueAt, gen: u16) -> bool {
        self.conn == q.i as u16 && self.group == q.g as u16 && self.gen == gen
    }
}

/// The ranges in flight.
pub(super) struct InFlight {
    slab: Vec<Range>,
    free: Vec<u16>,
    live: Vec<u16>,
    writes: u32,
}

impl InFlight {
    /// Room for `n` ranges (at most `u16::MAX - 1`), reserved now: no allocation later.
    pub(super) fn with_capacity(n: usize) -> InFlight {
        let n = n.min(u16::MAX as usize - 1);
        let free_range = Range { start: 0, end: 0, write: false, group: 0, conn: 0, gen: 0, pos: u16::MAX };
        InFlight { slab: alloc::vec![free_range; n], free: (0..n as u16).rev().collect(), live: Vec::with_capacity(n), writes: 0 }
    }

    #[inline(always)]
    pub(super) fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// Whether `[start, end)` overlaps a range in flight (only writes' when `writes_only`).
    #[inline]
    pub(super) fn overlaps(&self, start: u64, end: u64, writes_only: bool) -> bool {
        if self.live.is_empty() || (writes_only && self.writes == 0) {
            return false;
        }
        self.live.iter().any(|&i| {
            let r = &self.slab[i as usize];
            (r.write || !writes_only) && r.start < end && start < r.end
        })
    }

    /// Track `[start, end)`; `None` when full (cannot happen with the capacity the target reserves).
    #[inline]
    pub(super) fn insert(&mut self, start: u64, end: u64, write: bool, q: QueueAt, gen: u16) -> Option<RangeId> {
        let i = self.free.pop()?;
        self.slab[i as usize] = Range { start, end, write, group: q.g as u16, conn: q.i as u16, gen, pos: self.live.len() as u16 };
        self.live.push(i);
        self.writes += write as u32;
        Some(RangeId(i))
    }

    /// Stop tracking `id` if queue (`q`, `gen`) still owns it.
    #[inline]
    pub(super) fn remove(&mut self, id: RangeId, q: QueueAt, gen: u16) {
        let Some(r) = self.slab.get(id.0 as usize).copied() else { return };
        if r.pos == u16::MAX || !r.owned_by(q, gen) {
            return;
        }
        self.live.swap_remove(r.pos as usize);
        if let Some(&moved) = self.live.get(r.pos as usize) {
            self.slab[moved as usize].pos = r.pos;
        }
        self.slab[id.0 as usize].pos = u16::MAX;
        self.writes -= r.write as u32;
        self.free.push(id.0);
    }

    /// Forget every range of queue (`q`, `gen`) (its QP is gone; slow path).
    pub(super) fn remove_queue(&mut self, q: QueueAt, gen: u16) {
        let mine: Vec<u16> = self.live.iter().copied().filter(|&i| self.slab[i as usize].owned_by(q, gen)).collect();
        for i in mine {
            self.remove(RangeId(i), q, gen);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_remove_overlap() {
        let mut f = InFlight::with_capacity(4);
        let (q1, q2) = (QueueAt { g: 0, i: 1 }, QueueAt { g: 1, i: 1 });
        let a = f.insert(0, 100, false, q1, 7).unwrap();
        let b = f.insert(200, 300, true, q1, 7).unwrap();
        let c = f.insert(400, 500, false, q2, 7).unwrap();
        assert!(f.overlaps(50, 60, false) && !f.overlaps(50, 60, true));
        assert!(f.overlaps(250, 260, true) && !f.overlaps(100, 200, false));
        f.remove(a, q1, 8); // wrong generation: stays
        f.remove(a, q2, 7); // same index and generation in another group: stays
        assert!(f.overlaps(50, 60, false));
        f.remove(a, q1, 7);
        assert!(!f.overlaps(50, 60, false) && f.overlaps(450, 451, false));
        f.remove_queue(q1, 7);
        assert!(!f.overlaps(0, 1000, true) && f.overlaps(0, 1000, false));
        f.remove(b, q1, 7); // already gone
        f.remove(c, q2, 7);
        assert!(f.is_empty());
        let ids: Vec<_> = (0..4).map(|k| f.insert(k, k + 1, false, q1, 0)).collect();
        assert!(ids.iter().all(|i| i.is_some()) && f.insert(9, 10, false, q1, 0).is_none());
    }
}
