//! Device latency per namespace: the core hands a namespace's store tags of its own (a slot
//! in a fixed table holding the caller's tag and the submit time), so each I/O's time from
//! submit to completion is measured with no search or allocation per I/O.
//!
//! On only when the embedding gives the core a clock ([`super::Core::set_device_clock`]);
//! then every I/O to every namespace goes through its table. A table with no free slot
//! refuses the I/O as the store would when its queue is full ([`BlockError::QueueFull`]).

use alloc::boxed::Box;
use alloc::vec::Vec;

use blockdev::{BlockDevice, BlockDone, BlockError, BlockIo};

use crate::bench::Histogram;

/// I/Os one namespace may have at its store at once while timed (more than any store's
/// queue here holds: an NVMe I/O queue of 1,024 entries, the memory stores' done rings).
pub const SLOTS: usize = 1024;
/// A free slot's submit time.
const FREE: u64 = u64::MAX;

/// One namespace's timing table and histogram (nanoseconds, of the core's clock).
pub struct DevLatency {
    clock: fn() -> u64,
    /// Per slot: the caller's tag and the submit time ([`FREE`] when free).
    slots: Box<[(u64, u64)]>,
    free: Vec<u16>,
    pub hist: Box<Histogram>,
    /// Completions naming a tag that is not outstanding (a store echoing a tag twice or one
    /// never given): dropped, counted.
    pub stray: u64,
}

impl DevLatency {
    pub fn new(clock: fn() -> u64) -> DevLatency {
        DevLatency {
            clock,
            slots: alloc::vec![(0, FREE); SLOTS].into_boxed_slice(),
            free: (0..SLOTS as u16).rev().collect(),
            hist: Box::new(Histogram::new()),
            stray: 0,
        }
    }

    /// Submit `io` to `dev` under a slot of this table (the store sees the slot as its tag).
    #[inline]
    pub fn submit<B: BlockDevice>(&mut self, dev: &mut B, io: &BlockIo) -> Result<(), BlockError> {
        let Some(i) = self.free.pop() else { return Err(BlockError::QueueFull) };
        self.slots[i as usize] = (io.tag, (self.clock)());
        let r = dev.submit(&BlockIo { tag: i as u64, ..*io });
        if r.is_err() {
            self.slots[i as usize].1 = FREE;
            self.free.push(i);
        }
        r
    }

    /// The caller's tag for the store's completion of slot `tag`, its latency recorded;
    /// `None` (counted in `stray`) for a tag that is not outstanding.
    #[inline]
    pub fn complete(&mut self, tag: u64) -> Option<u64> {
        let s = match usize::try_from(tag).ok().and_then(|i| self.slots.get_mut(i)) {
            Some(s) if s.1 != FREE => s,
            _ => {
                self.stray += 1;
                return None;
            }
        };
        let (caller, t0) = *s;
        s.1 = FREE;
        self.free.push(tag as u16);
        self.hist.record((self.clock)().saturating_sub(t0));
        Some(caller)
    }

    /// I/Os at the store now.
    pub fn outstanding(&self) -> usize {
        SLOTS - self.free.len()
    }
}

/// Submit `io` to `dev`, timed when the namespace has a table.
#[inline]
pub fn submit<B: BlockDevice>(dev: &mut B, lat: Option<&mut DevLatency>, io: &BlockIo) -> Result<(), BlockError> {
    match lat {
        Some(l) => l.submit(dev, io),
        None => dev.submit(io),
    }
}

/// Poll `dev` into `done` (at most its length), each completion's tag mapped back through the
/// namespace's table when it has one (a stray dropped), handed to `f` with its status.
/// Returns how many the store reported.
#[inline(always)]
pub(super) fn poll<B: BlockDevice>(dev: &mut B, mut lat: Option<&mut DevLatency>, done: &mut [BlockDone], f: &mut impl FnMut(u64, crate::wire::Status)) -> usize {
    let k = dev.poll(done).min(done.len());
    for d in &done[..k] {
        let tag = match lat.as_deref_mut() {
            Some(l) => match l.complete(d.tag) {
                Some(t) => t,
                None => continue,
            },
            None => d.tag,
        };
        f(tag, super::block_result_status(d.result));
    }
    k
}

#[cfg(test)]
mod tests {
    use super::*;
    use blockdev::{BlockDone, BlockOp, NullNamespace};
    use hal::{DmaSlice, Hal};

    fn tick() -> u64 {
        use core::sync::atomic::{AtomicU64, Ordering};
        static T: AtomicU64 = AtomicU64::new(0);
        T.fetch_add(1000, Ordering::Relaxed)
    }

    #[test]
    fn tags_map_back_latency_is_recorded_and_strays_are_dropped() {
        let mut dev = NullNamespace::new(1024, 512);
        let mut l = DevLatency::new(tick);
        let hal = testbed::SimHal::new(testbed::PhysMem::new(), testbed::SimClock::new());
        let page = hal.dma_alloc(4096, 4096).unwrap();
        let buf = DmaSlice::new(&page, 0, 512).unwrap();
        for tag in [0xAAAA_0000_0000_0001u64, 7, u64::MAX] {
            let io = BlockIo { op: BlockOp::Read, lba: 1, blocks: 1, buf, tag, fua: false };
            submit(&mut dev, Some(&mut l), &io).unwrap();
        }
        assert_eq!(l.outstanding(), 3);
        let mut done = [BlockDone { tag: 0, result: Ok(()) }; 8];
        let k = dev.poll(&mut done);
        let back: Vec<u64> = done[..k].iter().filter_map(|d| l.complete(d.tag)).collect();
        assert_eq!(back, [0xAAAA_0000_0000_0001, 7, u64::MAX]);
        assert_eq!((l.outstanding(), l.hist.count(), l.stray), (0, 3, 0));
        assert!(l.hist.min() >= 1000, "each I/O spans at least one tick");
        // A store echoing a finished tag, or one never given: dropped and counted.
        assert_eq!(l.complete(done[0].tag), None);
        assert_eq!(l.complete(SLOTS as u64 + 5), None);
        assert_eq!((l.stray, l.hist.count(), l.outstanding()), (2, 3, 0));
        // A refused submit gives its slot back.
        let bad = BlockIo { op: BlockOp::Read, lba: 5000, blocks: 1, buf, tag: 1, fua: false };
        assert!(submit(&mut dev, Some(&mut l), &bad).is_err());
        assert_eq!(l.outstanding(), 0);
    }

    /// A store that takes everything and never completes.
    struct Sink;
    impl BlockDevice for Sink {
        fn block_size(&self) -> u32 {
            512
        }
        fn num_blocks(&self) -> u64 {
            1 << 20
        }
        fn max_transfer_blocks(&self) -> u32 {
            256
        }
        fn submit(&mut self, _io: &BlockIo) -> Result<(), BlockError> {
            Ok(())
        }
        fn poll(&mut self, _out: &mut [BlockDone]) -> usize {
            0
        }
    }

    #[test]
    fn a_full_table_refuses_as_a_full_queue() {
        let mut l = DevLatency::new(tick);
        let io = BlockIo { op: BlockOp::Flush, lba: 0, blocks: 0, buf: DmaSlice::EMPTY, tag: 1, fua: false };
        for _ in 0..SLOTS {
            submit(&mut Sink, Some(&mut l), &io).unwrap();
        }
        assert_eq!(submit(&mut Sink, Some(&mut l), &io), Err(BlockError::QueueFull));
        assert_eq!(l.complete(17), Some(1));
        submit(&mut Sink, Some(&mut l), &io).unwrap();
        assert_eq!(l.outstanding(), SLOTS);
    }
}
