//! nvme ring: submission/completion queue index arithmetic (Base §3.3.1 "Circular queues"),
//! kept pure so it is tested on its own.
//!
//! A queue of `size` entries is full when `tail + 1 == head` (mod size): it holds at most
//! `size - 1` commands. Completion queue entries are new when their phase tag equals the
//! expected phase, which starts at 1 and flips every time the head wraps.

/// Producer side of a submission queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqRing {
    size: u16,
    tail: u16,
    head: u16,
}

impl SqRing {
    /// A queue of `size` (≥ 2) entries.
    pub fn new(size: u16) -> Self {
        assert!(size >= 2);
        SqRing { size, tail: 0, head: 0 }
    }
    pub fn size(&self) -> u16 {
        self.size
    }
    pub fn tail(&self) -> u16 {
        self.tail
    }
    pub fn head(&self) -> u16 {
        self.head
    }
    /// Entries the device has not consumed yet.
    pub fn used(&self) -> u16 {
        (self.tail + self.size - self.head) % self.size
    }
    /// Entries that can still be queued.
    pub fn free(&self) -> u16 {
        self.size - 1 - self.used()
    }
    pub fn is_full(&self) -> bool {
        self.free() == 0
    }
    /// Claim the slot at the tail; returns its index, or `None` when full.
    pub fn push(&mut self) -> Option<u16> {
        if self.is_full() {
            return None;
        }
        let at = self.tail;
        self.tail = if at + 1 == self.size { 0 } else { at + 1 };
        Some(at)
    }
    /// Record the device's SQ head (CQE.SQHD). Values outside the queue are ignored
    /// (returns false): they come from the device and are not trusted.
    pub fn set_head(&mut self, head: u16) -> bool {
        if head >= self.size {
            return false;
        }
        // The head may only move within the range of queued entries.
        let advance = (head + self.size - self.head) % self.size;
        if advance > self.used() {
            return false;
        }
        self.head = head;
        true
    }
}

/// Consumer side of a completion queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqRing {
    size: u16,
    head: u16,
    phase: bool,
}

impl CqRing {
    pub fn new(size: u16) -> Self {
        assert!(size >= 2);
        CqRing { size, head: 0, phase: true }
    }
    pub fn head(&self) -> u16 {
        self.head
    }
    /// The phase tag a new entry at `head` carries.
    pub fn phase(&self) -> bool {
        self.phase
    }
    /// Consume the entry at the head.
    pub fn advance(&mut self) {
        self.head += 1;
        if self.head == self.size {
            self.head = 0;
            self.phase = !self.phase;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn full_queue_holds_size_minus_one() {
        let mut sq = SqRing::new(4);
        assert_eq!(sq.push(), Some(0));
        assert_eq!(sq.push(), Some(1));
        assert_eq!(sq.push(), Some(2));
        assert!(sq.is_full());
        assert_eq!(sq.push(), None);
        assert!(sq.set_head(2));
        assert_eq!(sq.free(), 2);
        assert_eq!(sq.push(), Some(3));
        assert_eq!(sq.push(), Some(0)); // wrapped
        assert_eq!(sq.push(), None);
        // A head beyond what was queued is refused.
        assert!(!sq.set_head(2 + 3));
        assert!(sq.set_head(1)); // everything consumed: head == tail
        assert_eq!(sq.used(), 0);
        assert!(!sq.set_head(2)); // a head past the tail is refused
    }

    #[test]
    fn cq_phase_flips_on_wrap() {
        let mut cq = CqRing::new(3);
        assert!(cq.phase());
        cq.advance();
        cq.advance();
        assert!(cq.phase());
        cq.advance();
        assert_eq!(cq.head(), 0);
        assert!(!cq.phase());
    }

    proptest! {
        /// Any interleaving of pushes and device consumption keeps the invariants:
        /// never more than size-1 in flight, indices in range, and slots handed out in
        /// circular order.
        #[test]
        fn sq_model(size in 2u16..300, ops in proptest::collection::vec((any::<bool>(), 0u16..400), 1..600)) {
            let mut sq = SqRing::new(size);
            let mut model_in_flight: u32 = 0;
            let mut expect_next: u16 = 0;
            for (push, n) in ops {
                if push {
                    match sq.push() {
                        Some(i) => {
                            prop_assert_eq!(i, expect_next);
                            expect_next = (expect_next + 1) % size;
                            model_in_flight += 1;
                        }
                        None => prop_assert_eq!(model_in_flight, size as u32 - 1),
                    }
                } else {
                    // Device consumes k = n mod (in_flight+1) entries.
                    let k = (n as u32 % (model_in_flight + 1)) as u16;
                    let new_head = (sq.head() + k) % size;
                    prop_assert!(sq.set_head(new_head));
                    model_in_flight -= k as u32;
                }
                prop_assert!(sq.tail() < size && sq.head() < size);
                prop_assert_eq!(sq.used() as u32, model_in_flight);
                prop_assert!(model_in_flight < size as u32);
            }
        }

        /// After k advances the head is k mod size and the phase has flipped k / size times.
        #[test]
        fn cq_model(size in 2u16..1000, k in 0u32..10_000) {
            let mut cq = CqRing::new(size);
            for _ in 0..k { cq.advance(); }
            prop_assert_eq!(cq.head() as u32, k % size as u32);
            prop_assert_eq!(cq.phase(), (k / size as u32) % 2 == 0);
        }
    }
}
