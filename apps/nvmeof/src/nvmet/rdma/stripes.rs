//! The poll groups' order for transfers of the same namespace memory: each group counts, per
//! 64 KiB stripe of namespace memory, its own transfers going there (and the writes among them)
//! in a row of counters only it writes and every group may read. A group claims a transfer's
//! stripes just before the transfer goes: it adds to its own counts, one store→load fence,
//! then reads the other groups' counts of those stripes (Dekker's mutual exclusion: of two
//! groups claiming at once, at least one sees the other's count); a write conflicts with any
//! transfer, a read with writes. On a conflict the higher-numbered group takes its counts back
//! and holds its command, the lower one keeps them and holds it, so of two racing groups one
//! always goes and a chain of waits ends at a transfer under way.
//!
//! Memory order, for groups on threads of their own (today one thread drives every group, and
//! the same code runs): a count is only ever written by its group, so an update is a relaxed
//! load of its own counter and a store (no read-modify-write). The store that adds, the
//! `fence(SeqCst)` after it and the loads of the others' counts after that are Dekker's
//! protocol: two groups' fences are ordered one before the other, and the later one's loads see
//! the earlier one's add. Stores are `Release` and loads `Acquire`, so a group that finds a
//! count back at zero also sees everything its owner did before taking it back (a staged
//! Write's copy into namespace memory by the CPU). On x86 the stores and loads are plain moves
//! and the fence one locked `or` of zero into the thread's own stack (what `fence(SeqCst)`
//! compiles to: no shared line is written).
//!
//! A row is direct-mapped by the stripe number's low bits ([`STRIPES`] counters, 256 MiB of
//! namespace memory before two stripes share one): conservative, as the group's own table
//! (`ranges.rs`) is. One counter holds both counts (transfers in the low 16 bits, writes in the
//! high 16), so a check is one load per stripe per other group; a group has fewer than 2^16
//! ranges, so neither count overflows into the other. With one group nothing is kept.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{fence, AtomicU32, Ordering};

/// Stripe size (64 KiB) of the cross-group counts.
pub(super) const STRIPE_SHIFT: u32 = 16;
/// Counters per group (a power of two), reached by the stripe number's low bits.
pub(super) const STRIPES: usize = 1 << 12;
/// One write in a counter (its high half); one transfer is `1` (the low half).
const WRITE: u32 = 1 << 16;

/// One group's counters, fixed-size (a counter reached by a masked index has no bounds check).
type Row = [AtomicU32; STRIPES];

/// Every group's row of counters; none with one group.
pub(super) struct Rows {
    rows: Arc<[Row]>,
    groups: usize,
}

impl Rows {
    /// Rows for `groups` poll groups (made with the first group: no allocation on the I/O path).
    pub(super) fn new(groups: usize) -> Rows {
        let mut rows: Vec<Row> = Vec::new();
        rows.resize_with(if groups > 1 { groups } else { 0 }, || [const { AtomicU32::new(0) }; STRIPES]);
        Rows { rows: rows.into(), groups }
    }

    /// How many groups' rows.
    pub(super) fn groups(&self) -> usize {
        self.groups
    }

    /// Group `me`'s counts and its look at the others'.
    pub(super) fn of(&self, me: usize) -> GroupStripes {
        GroupStripes { rows: self.rows.clone(), me, alone: self.groups < 2 }
    }

    /// Group `g`'s row back at zero: the group is released and none of its transfers moves
    /// data any more (slow path; its successor starts from zero).
    pub(super) fn clear(&self, g: usize) {
        if let Some(row) = self.rows.get(g) {
            for c in row {
                c.store(0, Ordering::Release);
            }
        }
    }
}

/// What a claim found in the other groups' counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Claim {
    /// Nothing of another group's in the way: the transfer goes.
    Clear,
    /// Only higher-numbered groups' transfers in the way: keep the counts, hold the command.
    Keep,
    /// A lower-numbered group's is: take the counts back, hold the command.
    Yield,
}

/// One group's counts and its look at the others'.
pub(super) struct GroupStripes {
    rows: Arc<[Row]>,
    me: usize,
    /// One group only: nothing kept, every claim clear.
    alone: bool,
}

/// The counter of stripe `first + k` within a row.
#[inline(always)]
fn counter(first: u64, k: u32) -> usize {
    (first.wrapping_add(k as u64) as usize) & (STRIPES - 1)
}

/// What one transfer adds to a counter: one transfer, and one write if it is one.
#[inline(always)]
fn delta(write: bool) -> u32 {
    if write {
        WRITE + 1
    } else {
        1
    }
}

impl GroupStripes {
    /// Whether there are no other groups to order against.
    #[inline(always)]
    pub(super) fn alone(&self) -> bool {
        self.alone
    }

    /// Every group's row.
    #[inline(always)]
    fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// Take back the counts of a transfer (`write` or not) over stripes `(first, count)` that
    /// a claim added and kept ([`Self::claim`]).
    #[cold]
    #[inline(never)]
    pub(super) fn sub(&self, first: u64, count: u32, write: bool) {
        self.add_each(first, count, delta(write).wrapping_neg());
    }

    /// Take back the counts of a one-stripe transfer (`write` or not) at counter `idx` that
    /// [`Self::claim_one`] added and kept: its own counter's relaxed load and a release store.
    #[inline(always)]
    pub(super) fn sub_one(&self, idx: usize, write: bool) {
        if let Some(row) = self.rows().get(self.me) {
            let c = &row[idx & (STRIPES - 1)];
            c.store(c.load(Ordering::Relaxed).wrapping_sub(delta(write)), Ordering::Release);
        }
    }

    /// `d` (wrapping) added to the group's own count of each stripe in `(first, count)`: its
    /// own counter's relaxed load and a release store (no other group writes it).
    #[inline(always)]
    fn add_each(&self, first: u64, count: u32, d: u32) {
        let Some(row) = self.rows().get(self.me) else { return };
        for k in 0..count {
            let c = &row[counter(first, k)];
            c.store(c.load(Ordering::Relaxed).wrapping_add(d), Ordering::Release);
        }
    }

    /// Claim a transfer (`write` or not) over stripes `(first, count)`: added to the group's
    /// own counts (unless `added` by a claim that kept them), the fence, the other groups'
    /// counts of those stripes ([`Self::check`]); taken back when it yields. (A one-stripe
    /// transfer, a 4 KiB I/O's, is [`Self::claim_one`]'s.)
    #[cold]
    #[inline(never)]
    pub(super) fn claim(&self, first: u64, count: u32, write: bool, added: bool) -> Claim {
        let d = delta(write);
        if !added {
            self.add_each(first, count, d);
        }
        let claim = self.check(first, count, write);
        if claim == Claim::Yield {
            self.add_each(first, count, d.wrapping_neg());
        }
        claim
    }

    /// [`Self::claim`] of the one stripe at counter `idx` (a 4 KiB I/O's): its own counter, the
    /// fence, then that counter in each other row in group order, in one pass. No call inside
    /// (inlined into its one caller, `InFlight::claim`'s out-of-line part).
    #[inline(always)]
    pub(super) fn claim_one(&self, idx: usize, write: bool, added: bool) -> Claim {
        let idx = idx & (STRIPES - 1);
        let d = delta(write);
        let Some((lower, rest)) = self.rows().split_at_checked(self.me) else { return Claim::Clear };
        let Some((own_row, higher)) = rest.split_first() else { return Claim::Clear };
        let own = &own_row[idx];
        if !added {
            own.store(own.load(Ordering::Relaxed).wrapping_add(d), Ordering::Release);
        }
        if cfg!(feature = "sim-mutation-cross-group") {
            return Claim::Clear;
        }
        fence(Ordering::SeqCst);
        let mask = if write { u32::MAX } else { !(WRITE - 1) };
        if lower.iter().any(|row| row[idx].load(Ordering::Acquire) & mask != 0) {
            own.store(own.load(Ordering::Relaxed).wrapping_sub(d), Ordering::Release);
            return Claim::Yield;
        }
        if higher.iter().any(|row| row[idx].load(Ordering::Acquire) & mask != 0) {
            return Claim::Keep;
        }
        Claim::Clear
    }

    /// Once a transfer over `(first, count)` is in the group's counts: the fence, then the
    /// other groups' counts of those stripes (a write is in the way of any transfer, a read of
    /// writes only), the lower groups first. The test-only mutation `sim-mutation-cross-group`
    /// looks at no other group, to show the simulator catches a missing cross-group order.
    fn check(&self, first: u64, count: u32, write: bool) -> Claim {
        if cfg!(feature = "sim-mutation-cross-group") {
            return Claim::Clear;
        }
        fence(Ordering::SeqCst);
        let mask = if write { u32::MAX } else { !(WRITE - 1) };
        let rows = self.rows();
        let (lower, higher) = (rows.get(..self.me).unwrap_or(&[]), rows.get(self.me + 1..).unwrap_or(&[]));
        let busy = |others: &[Row]| (0..count).any(|k| others.iter().any(|row| row[counter(first, k)].load(Ordering::Acquire) & mask != 0));
        if busy(lower) {
            Claim::Yield
        } else if busy(higher) {
            Claim::Keep
        } else {
            Claim::Clear
        }
    }

    /// Whether the group's own counts are all zero (nothing of it claimed).
    #[cfg(test)]
    pub(super) fn own_is_clear(&self) -> bool {
        self.alone || self.rows()[self.me].iter().all(|c| c.load(Ordering::Acquire) == 0)
    }
}

#[cfg(all(test, not(feature = "sim-mutation-cross-group")))]
mod tests {
    extern crate std;

    use super::*;

    /// A write is in the way of another group's read or write of the stripe, a read only of a
    /// write; the lower group keeps its claim, the higher yields (its counts taken back); one
    /// group alone keeps none; a released group's row is cleared.
    #[test]
    fn the_lower_group_keeps_the_higher_yields() {
        let rows = Rows::new(3);
        let (a, b, c) = (rows.of(0), rows.of(1), rows.of(2));
        // Stripes 3 and 4 (e.g. a transfer of [3 × 64 KiB + 100, 4 × 64 KiB + 1)).
        let (f, n) = (3, 2);
        assert_eq!(b.claim(f, n, false, false), Claim::Clear);
        assert_eq!(a.claim_one(3, false, false), Claim::Clear, "reads of two groups");
        assert_eq!(c.claim_one(4, true, false), Claim::Yield, "a write over group 1's read: group 2 yields");
        assert!(c.own_is_clear(), "and takes its counts back");
        assert_eq!(a.claim_one(4, true, false), Claim::Keep, "group 0 keeps against group 1");
        assert_eq!(b.claim(f, n, false, true), Claim::Yield, "group 1's read waits for group 0's write");
        assert!(b.own_is_clear());
        assert_eq!(c.claim_one(5, true, false), Claim::Clear, "another stripe");
        c.sub_one(5, true);
        assert_eq!(c.claim_one(4 + STRIPES, true, false), Claim::Yield, "same counter");
        a.sub_one(4, true);
        a.sub_one(3, false);
        assert_eq!(b.claim(f, n, false, false), Claim::Clear, "group 0's write is done");
        assert_eq!(c.claim_one(4, true, false), Claim::Yield, "group 1's read is there");
        rows.clear(1);
        assert_eq!(c.claim_one(4, true, false), Claim::Clear, "group 1 released");
        c.sub_one(4, true);
        assert!(a.own_is_clear() && b.own_is_clear() && c.own_is_clear());
        let one = Rows::new(1).of(0);
        assert!(one.alone() && one.own_is_clear());
    }

    /// Two threads claim the same stripe over and over, each going only on a clear claim,
    /// keeping or taking back its counts as its group number says: never both in at once, and
    /// both get in every time. (It passes without the fence too on this machine's runs: it
    /// shows the protocol between threads, not that the fence is needed.)
    #[test]
    fn two_threads_never_transfer_the_same_stripe_at_once() {
        use core::sync::atomic::AtomicBool;
        let rows = Rows::new(2);
        let inside = Arc::new(AtomicBool::new(false));
        let run = |g: GroupStripes, inside: Arc<AtomicBool>| {
            move || {
                let mut went = 0u32;
                for _ in 0..20_000 {
                    let mut added = false;
                    loop {
                        match g.claim_one(9, true, added) {
                            Claim::Clear => break,
                            Claim::Keep => added = true,
                            Claim::Yield => added = false,
                        }
                        core::hint::spin_loop();
                    }
                    assert!(!inside.swap(true, Ordering::SeqCst), "both groups in the stripe");
                    went += 1;
                    inside.store(false, Ordering::SeqCst);
                    g.sub_one(9, true);
                }
                went
            }
        };
        let t0 = std::thread::spawn(run(rows.of(0), inside.clone()));
        let t1 = std::thread::spawn(run(rows.of(1), inside.clone()));
        assert_eq!((t0.join().unwrap(), t1.join().unwrap()), (20_000, 20_000));
        assert!(rows.of(0).own_is_clear() && rows.of(1).own_is_clear());
    }
}
