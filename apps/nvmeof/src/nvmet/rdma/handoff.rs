//! The bounded single-producer single-consumer ring a poll group and the device's owner talk
//! over (README, "NVMe-oF target poll groups on their own CPUs"): room fixed when the group is
//! made, messages `Copy` and a fixed number of 64-bit words each (most one, [`Word`]; a wider
//! [`Record`] is put and taken whole), no allocation per message, and only loads
//! and stores between the two ends (acquire/release on the two counters, no read-modify-write,
//! no lock), so either end may run on another thread.
//!
//! Why not `heapless::spsc` (already a dependency): its room is a compile-time constant held
//! inline, and a group's bound is a run-time figure (a few records per queue the group takes,
//! for up to 4,096 queues); a ring of words in safe atomics also keeps this `forbid(unsafe_code)` crate
//! free of a cell of its own.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::marker::PhantomData;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// A message that travels as one word.
pub(super) trait Word: Copy {
    fn to_word(self) -> u64;
    fn from_word(w: u64) -> Self;
}

/// The most words a [`Record`] takes.
pub(in crate::nvmet) const MAX_WORDS: usize = 8;

/// A message that travels as `WORDS` words (at most [`MAX_WORDS`]), put and taken whole: the
/// producer publishes its end once all its words are stored.
pub(in crate::nvmet) trait Record: Copy {
    const WORDS: usize;
    /// Its words, the first `WORDS` of them used.
    fn to_words(self) -> [u64; MAX_WORDS];
    fn from_words(w: &[u64; MAX_WORDS]) -> Self;
}

impl<M: Word> Record for M {
    const WORDS: usize = 1;
    #[inline(always)]
    fn to_words(self) -> [u64; MAX_WORDS] {
        let mut w = [0; MAX_WORDS];
        w[0] = self.to_word();
        w
    }
    #[inline(always)]
    fn from_words(w: &[u64; MAX_WORDS]) -> Self {
        M::from_word(w[0])
    }
}

/// The shared part: the words and the two free-running counters (each written by one end).
struct Ring {
    words: Vec<AtomicU64>,
    /// Messages taken so far (written by the consumer only).
    head: AtomicUsize,
    /// Messages put so far (written by the producer only).
    tail: AtomicUsize,
}

/// The producing end (one per ring: not `Clone`).
pub(in crate::nvmet) struct Producer<M> {
    ring: Arc<Ring>,
    tail: usize,
    _m: PhantomData<fn(M)>,
}

/// The consuming end (one per ring: not `Clone`).
pub(in crate::nvmet) struct Consumer<M> {
    ring: Arc<Ring>,
    head: usize,
    _m: PhantomData<fn() -> M>,
}

/// A word of bytes: a ring of `u64` carries byte strings ([`Producer::push_bytes`]).
impl Word for u64 {
    fn to_word(self) -> u64 {
        self
    }
    fn from_word(w: u64) -> Self {
        w
    }
}

/// Words that hold `n` bytes.
pub(super) const fn words_for(n: usize) -> usize {
    n.div_ceil(8)
}

/// A flag the producers of several rings raise and their one consumer lowers: "some ring has
/// messages", one load per turn for the consumer instead of a look at each ring. A producer
/// raises it with a store after its push; the consumer lowers it with a swap before it
/// drains the rings, so a message pushed during a drain raises it again (seen next turn).
#[derive(Clone)]
pub(super) struct Bell(Arc<AtomicBool>);

impl Bell {
    /// A bell not rung.
    pub(super) fn new() -> Bell {
        Bell(Arc::new(AtomicBool::new(false)))
    }

    /// The producer's side, after its push: the consumer has something to drain.
    pub(super) fn ring(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// The consumer's look: rung since it was last lowered (a load, no write).
    #[inline(always)]
    pub(super) fn rung(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// The consumer's side, before it drains the rings: lowered; whether it was rung.
    pub(super) fn lower(&self) -> bool {
        self.0.swap(false, Ordering::Acquire)
    }
}

/// A ring with room for `room` messages (at least one); `Err` if the memory is not there.
pub(in crate::nvmet) fn ring<M: Record>(room: usize) -> Result<(Producer<M>, Consumer<M>), ()> {
    let room = room.max(1) * M::WORDS;
    let mut words = Vec::new();
    words.try_reserve_exact(room).map_err(|_| ())?;
    words.resize_with(room, || AtomicU64::new(0));
    let ring = Arc::new(Ring { words, head: AtomicUsize::new(0), tail: AtomicUsize::new(0) });
    Ok((Producer { ring: ring.clone(), tail: 0, _m: PhantomData }, Consumer { ring, head: 0, _m: PhantomData }))
}

impl<M: Record> Producer<M> {
    /// Put `m` at the end; `Err(m)` when the ring is full.
    pub(in crate::nvmet) fn push(&mut self, m: M) -> Result<(), M> {
        let r = &*self.ring;
        if self.tail.wrapping_sub(r.head.load(Ordering::Acquire)) == r.words.len() {
            return Err(m);
        }
        // The room is a whole number of records and records are put and taken whole.
        let w = m.to_words();
        for (k, w) in w.iter().enumerate().take(M::WORDS) {
            r.words[self.tail.wrapping_add(k) % r.words.len()].store(*w, Ordering::Relaxed);
        }
        self.tail = self.tail.wrapping_add(M::WORDS);
        r.tail.store(self.tail, Ordering::Release);
        Ok(())
    }
}

impl<M: Record> Producer<M> {
    /// Messages that fit now (the consumer may make more room at any time).
    pub(in crate::nvmet) fn room(&self) -> usize {
        let r = &*self.ring;
        (r.words.len() - self.tail.wrapping_sub(r.head.load(Ordering::Acquire))) / M::WORDS
    }
}

impl Producer<u64> {
    /// Put the bytes of `b` as [`words_for`]`(b.len())` words (the last one zero-padded), all
    /// published at once; `Err` (nothing put) when they do not fit. The consumer takes them
    /// with [`Consumer::pop_bytes`] of the same length, which the producer tells it in a record
    /// it puts on another ring after these (that ring's release publishes these words too).
    pub(super) fn push_bytes(&mut self, b: &[u8]) -> Result<(), ()> {
        let n = words_for(b.len());
        if self.room() < n {
            return Err(());
        }
        let r = &*self.ring;
        for (k, chunk) in b.chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            r.words[self.tail.wrapping_add(k) % r.words.len()].store(u64::from_le_bytes(w), Ordering::Relaxed);
        }
        self.tail = self.tail.wrapping_add(n);
        r.tail.store(self.tail, Ordering::Release);
        Ok(())
    }
}

impl Consumer<u64> {
    /// Take the [`words_for`]`(out.len())` words of a byte string [`Producer::push_bytes`] put
    /// into `out`; false (nothing taken) if they are not all there.
    pub(super) fn pop_bytes(&mut self, out: &mut [u8]) -> bool {
        let r = &*self.ring;
        let n = words_for(out.len());
        if r.tail.load(Ordering::Acquire).wrapping_sub(self.head) < n {
            return false;
        }
        for (k, chunk) in out.chunks_mut(8).enumerate() {
            let w = r.words[self.head.wrapping_add(k) % r.words.len()].load(Ordering::Relaxed).to_le_bytes();
            chunk.copy_from_slice(&w[..chunk.len()]);
        }
        self.head = self.head.wrapping_add(n);
        r.head.store(self.head, Ordering::Release);
        true
    }
}

impl<M: Record> Consumer<M> {
    /// No message waiting now.
    pub(in crate::nvmet) fn is_empty(&self) -> bool {
        self.head == self.ring.tail.load(Ordering::Acquire)
    }

    /// Take the oldest message, if any.
    pub(in crate::nvmet) fn pop(&mut self) -> Option<M> {
        let r = &*self.ring;
        if self.head == r.tail.load(Ordering::Acquire) {
            return None;
        }
        let mut w = [0; MAX_WORDS];
        for (k, w) in w.iter_mut().enumerate().take(M::WORDS) {
            *w = r.words[self.head.wrapping_add(k) % r.words.len()].load(Ordering::Relaxed);
        }
        self.head = self.head.wrapping_add(M::WORDS);
        r.head.store(self.head, Ordering::Release);
        Some(M::from_words(&w))
    }

    /// Messages waiting now (at most the ring's room).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.ring.tail.load(Ordering::Acquire).wrapping_sub(self.head) / M::WORDS
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;

    impl Word for u32 {
        fn to_word(self) -> u64 {
            self as u64
        }
        fn from_word(w: u64) -> Self {
            w as u32
        }
    }

    #[test]
    fn full_at_its_room_and_in_order_across_the_wrap() {
        let (mut p, mut c) = ring::<u32>(3).expect("ring");
        let mut next = 0;
        for round in 0..5u32 {
            for k in 0..3 {
                assert_eq!(p.push(round * 3 + k), Ok(()));
            }
            assert_eq!(p.push(99), Err(99), "full at its room");
            assert_eq!(c.len(), 3);
            for _ in 0..3 {
                assert_eq!(c.pop(), Some(next));
                next += 1;
            }
            assert_eq!(c.pop(), None);
        }
    }

    /// Byte strings of odd lengths as words: whole, in order, refused whole when they do not
    /// fit, across the wrap.
    #[test]
    fn byte_strings_travel_whole_across_the_wrap() {
        let (mut p, mut c) = ring::<u64>(5).expect("ring");
        for round in 0..4u8 {
            let a: Vec<u8> = (0..13).map(|k| k ^ round).collect();
            let b = [round; 3];
            assert_eq!((p.push_bytes(&a), p.push_bytes(&b)), (Ok(()), Ok(())));
            assert_eq!(p.room(), 2);
            assert_eq!(p.push_bytes(&[0; 17]), Err(()), "3 words do not fit in 2");
            let (mut a2, mut b2) = ([0u8; 13], [0u8; 3]);
            assert!(c.pop_bytes(&mut a2) && c.pop_bytes(&mut b2));
            assert_eq!((&a2[..], b2), (&a[..], b));
            assert!(c.is_empty() && !c.pop_bytes(&mut [0u8; 1]));
        }
    }

    #[test]
    fn two_threads_lose_nothing_keep_order_and_stay_bounded() {
        const N: u32 = 100_000;
        let (mut p, mut c) = ring::<u32>(7).expect("ring");
        let producer = std::thread::spawn(move || {
            let mut full = 0u64;
            for i in 0..N {
                let mut m = i;
                while let Err(back) = p.push(m) {
                    m = back;
                    full += 1;
                    std::thread::yield_now();
                }
            }
            full
        });
        let mut next = 0;
        while next < N {
            let waiting = c.len();
            assert!(waiting <= 7, "{waiting} messages in a ring of 7");
            match c.pop() {
                Some(m) => {
                    assert_eq!(m, next, "lost or out of order");
                    next += 1;
                }
                None => std::thread::yield_now(),
            }
        }
        producer.join().expect("producer");
        assert_eq!(c.pop(), None);
    }
}
