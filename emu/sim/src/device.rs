//! device: the target's namespace in the simulation, a `blockdev::RamNamespace` behind a
//! device latency drawn from the seed on the virtual clock. Data moves when the I/O completes
//! (a write is placed then, a read copied then), so a write acknowledged before its data is
//! placed, or a buffer reused while the device still reads it, is visible to the model.
//! Its I/O handles (a poll group's, `BlockDevice::io_handle`) share its blocks, each with its
//! own pending I/Os and latency draws from a seed of its own (the store's seed and the
//! handle's number), as a RAM namespace's handles share its memory.

use blockdev::{BlockDevice, BlockDone, BlockError, BlockIo, RamNamespace};
use emu_roce::link::SplitMix64;
use hal::DmaSlice;
use testbed::{SimClock, SimHal};

/// I/Os the device holds at once (more are refused with QueueFull, as a full ring).
const DEPTH: usize = 128;

pub struct SimRam {
    inner: RamNamespace<SimHal>,
    hal: SimHal,
    clock: SimClock,
    rng: SplitMix64,
    max_latency_ns: u64,
    /// (due time, submission order, I/O).
    pending: Vec<(u64, u64, BlockIo)>,
    order: u64,
    /// The seed this value's latencies are drawn from, and the handles made of it so far (a
    /// handle's seed is derived from both).
    seed: u64,
    handles: u64,
}

impl SimRam {
    pub fn new(hal: SimHal, clock: SimClock, bytes: u64, block_size: u32, seed: u64, max_latency_ns: u64) -> Option<Self> {
        let inner = RamNamespace::new(hal.clone(), bytes, block_size).ok()?;
        Some(SimRam { inner, hal, clock, rng: SplitMix64::new(seed), max_latency_ns, pending: Vec::new(), order: 0, seed, handles: 0 })
    }

    /// The namespace's bytes (what survives a crash that keeps it).
    pub fn contents(&self) -> Vec<u8> {
        let r = self.inner.direct_region().expect("RAM namespace memory");
        let mut v = vec![0u8; r.len()];
        self.hal.mem().read(r.paddr(), &mut v);
        v
    }

    /// Put saved bytes back (after the node restarted).
    pub fn restore(&mut self, bytes: &[u8]) {
        let r = self.inner.direct_region().expect("RAM namespace memory");
        self.hal.mem().write(r.paddr(), &bytes[..r.len()]);
    }

    /// When the next accepted I/O completes (`None`: none pending).
    pub fn next_due(&self) -> Option<u64> {
        self.pending.iter().map(|p| p.0).min()
    }

    /// I/Os accepted and not completed yet.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

impl BlockDevice for SimRam {
    fn block_size(&self) -> u32 {
        self.inner.block_size()
    }
    fn num_blocks(&self) -> u64 {
        self.inner.num_blocks()
    }
    fn max_transfer_blocks(&self) -> u32 {
        self.inner.max_transfer_blocks()
    }
    fn submit(&mut self, io: &BlockIo) -> Result<(), BlockError> {
        if self.pending.len() >= DEPTH {
            return Err(BlockError::QueueFull);
        }
        blockdev::check_io(io, self.block_size(), self.num_blocks(), self.max_transfer_blocks())?;
        let due = self.clock.now_ns() + self.rng.below(self.max_latency_ns + 1);
        self.order += 1;
        self.pending.push((due, self.order, *io));
        Ok(())
    }
    fn poll(&mut self, out: &mut [BlockDone]) -> usize {
        let now = self.clock.now_ns();
        let mut n = 0;
        while n < out.len() {
            let Some(i) = (0..self.pending.len()).filter(|&i| self.pending[i].0 <= now).min_by_key(|&i| (self.pending[i].0, self.pending[i].1)) else { break };
            let (_, _, io) = self.pending.remove(i);
            out[n] = match self.inner.submit(&io) {
                Ok(()) => {
                    let mut d = [BlockDone { tag: io.tag, result: Ok(()) }];
                    self.inner.poll(&mut d);
                    d[0]
                }
                Err(e) => BlockDone { tag: io.tag, result: Err(e) },
            };
            n += 1;
        }
        n
    }
    fn direct(&self, lba: u64, blocks: u32) -> Option<DmaSlice> {
        self.inner.direct(lba, blocks)
    }
    fn direct_region(&self) -> Option<DmaSlice> {
        self.inner.direct_region()
    }
    /// The RAM namespace's copy counters (its zero-copy and copied I/Os): what this value
    /// (the store, or one handle) moved.
    fn counters(&self) -> blockdev::DevCounters {
        self.inner.counters()
    }
    /// A handle on the same blocks (the RAM namespace's handle: its memory) with its own
    /// pending I/Os, drawing its latencies from the `handles`-th seed derived from this
    /// value's (deterministic: handles are made in the order the target makes its groups).
    fn io_handle(&mut self) -> Result<Self, BlockError> {
        self.handles += 1;
        let seed = self.seed ^ self.handles.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let inner = self.inner.io_handle()?;
        Ok(SimRam { inner, hal: self.hal.clone(), clock: self.clock.clone(), rng: SplitMix64::new(seed), max_latency_ns: self.max_latency_ns, pending: Vec::new(), order: 0, seed, handles: 0 })
    }
}
