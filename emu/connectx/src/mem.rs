//! Simulated physical memory and the `hal::Hal` the driver runs on in host tests.
//!
//! `PhysMem` hands out ranges with physical addresses starting above 4 GiB (so a 32-bit
//! truncation of an address lands in unmapped space and is caught), separated by unmapped
//! guard gaps (so DMA that runs past a buffer is caught too). The adapter model reaches it
//! only through `dma_read`/`dma_write`, which fail on unmapped addresses the way a DMA to
//! nowhere fails on a real bus (the model turns that into the adapter's own error report).
//! The driver side reaches it through `SimDma` regions (`hal::DmaRegion`), freed on drop.
//!
//! All of it is shareable across threads, as the hardware it stands in for is (issue #13: the
//! queue groups of one adapter driven from several threads): memory is one mutex taken once
//! per access (a whole range, never per byte), the clock an atomic counter, the `SimHal`'s
//! knobs atomics. Single-threaded runs (the simulator) stay deterministic: nothing here
//! depends on scheduling.
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use hal::{DmaRegion, DmaSlice, Hal, HalError, PhysAddr};

/// Default first physical address handed out: 4 GiB.
pub const DEFAULT_BASE: PhysAddr = 0x1_0000_0000;
/// Unmapped gap left after every region.
pub const GUARD: u64 = 0x1000;

/// A device access to memory that is not allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DmaFault {
    pub addr: PhysAddr,
    pub len: usize,
    pub write: bool,
}

/// Allocation statistics (for leak checks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemStats {
    /// Regions currently allocated.
    pub regions: usize,
    /// Bytes currently allocated.
    pub bytes: usize,
    /// Highest `bytes` seen.
    pub peak_bytes: usize,
    pub allocs: u64,
    pub frees: u64,
    /// Device accesses that hit unmapped memory.
    pub dma_faults: u64,
}

/// Physical memory the model reaches that `PhysMem` does not own: e.g. a QEMU guest's RAM
/// file shared with the host (`emu/pci-shim`), where the guest's driver allocates and the
/// model only DMAs. Addresses are physical, `[0, len)`; an access outside fails (false).
pub trait ExternalMem: Send + Sync {
    /// Bytes of physical address space, from 0.
    fn len(&self) -> u64;
    /// Copy `buf.len()` bytes at `pa` into `buf`; false if out of range.
    fn read(&self, pa: PhysAddr, buf: &mut [u8]) -> bool;
    /// Copy `data` to `pa`; false (nothing written) if out of range.
    fn write(&self, pa: PhysAddr, data: &[u8]) -> bool;
}

struct MemInner {
    base: PhysAddr,
    /// When set, every access goes here instead of `regions` (which stay empty).
    ext: Option<Arc<dyn ExternalMem>>,
    /// Allocated regions by start address, sorted (a binary search per access; the simulator
    /// makes millions of them, a tree's pointer chase was a tenth of its run).
    regions: Vec<(PhysAddr, Vec<u8>)>,
    /// Index of the region the last access hit (accesses come in runs on one queue or buffer).
    last: usize,
    stats: MemStats,
    last_fault: Option<DmaFault>,
    /// What the driver reads through its regions passes through this ([`SimHal::set_dma_read_filter`]).
    read_filter: Option<DmaReadFilter>,
}

/// Shared simulated physical memory (a handle; clones share it, across threads too).
#[derive(Clone)]
pub struct PhysMem(Arc<Mutex<MemInner>>);

impl Default for PhysMem {
    fn default() -> Self {
        Self::new()
    }
}

impl PhysMem {
    pub fn new() -> Self {
        Self::with_base(DEFAULT_BASE)
    }
    /// Memory whose first region starts at `base` (rounded up to 4 KiB).
    pub fn with_base(base: PhysAddr) -> Self {
        PhysMem(Arc::new(Mutex::new(MemInner {
            base: (base + 0xFFF) & !0xFFF,
            ext: None,
            regions: Vec::new(),
            last: 0,
            stats: MemStats::default(),
            last_fault: None,
            read_filter: None,
        })))
    }

    /// Memory backed entirely by `ext` (someone else allocates in it; `alloc` is refused).
    pub fn external(ext: Arc<dyn ExternalMem>) -> Self {
        let m = Self::with_base(0);
        m.lock().ext = Some(ext);
        m
    }

    /// The memory's state, for one whole access. A thread that panicked holding it (a failed
    /// assertion in a test) left it consistent: every update under it is complete before any
    /// check that can panic, so the poison is ignored.
    fn lock(&self) -> MutexGuard<'_, MemInner> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Allocate `size` zeroed bytes aligned to `align` (at least 4 KiB).
    pub fn alloc(&self, size: usize, align: usize) -> Result<PhysAddr, HalError> {
        if self.lock().ext.is_some() {
            return Err(HalError::OutOfMemory { size, align });
        }
        if align == 0 || !align.is_power_of_two() {
            return Err(HalError::BadAlignment(align));
        }
        if size == 0 || size > (1 << 32) {
            return Err(HalError::OutOfMemory { size, align });
        }
        let align = align.max(4096) as u64;
        let mut m = self.lock();
        let mut cand = align_up(m.base, align);
        let mut at = m.regions.len();
        for (i, (start, v)) in m.regions.iter().enumerate() {
            if cand + size as u64 + GUARD <= *start {
                at = i;
                break;
            }
            let end = start + v.len() as u64 + GUARD;
            if end > cand {
                cand = align_up(end, align);
            }
        }
        m.regions.insert(at, (cand, vec![0u8; size]));
        m.stats.regions += 1;
        m.stats.bytes += size;
        m.stats.peak_bytes = m.stats.peak_bytes.max(m.stats.bytes);
        m.stats.allocs += 1;
        Ok(cand)
    }

    /// Free every region at once (the end of a run whose driver leaked some, as a driver does
    /// with pages a broken adapter never gave back): a region dropped later frees nothing, and
    /// a leaked region keeps no simulated memory alive.
    pub fn free_all(&self) {
        let mut m = self.lock();
        let n = m.regions.len();
        m.regions.clear();
        m.stats.regions = 0;
        m.stats.bytes = 0;
        m.stats.frees += n as u64;
    }

    /// Free the region starting at `pa`. Returns whether there was one.
    pub fn free(&self, pa: PhysAddr) -> bool {
        let mut m = self.lock();
        match m.regions.binary_search_by_key(&pa, |r| r.0) {
            Ok(i) => {
                let (_, v) = m.regions.remove(i);
                m.stats.regions -= 1;
                m.stats.bytes -= v.len();
                m.stats.frees += 1;
                true
            }
            Err(_) => false,
        }
    }

    pub fn stats(&self) -> MemStats {
        self.lock().stats
    }
    /// The most recent device access to unmapped memory.
    pub fn last_fault(&self) -> Option<DmaFault> {
        self.lock().last_fault
    }

    /// Whether `[pa, pa+len)` lies inside one allocated region.
    pub fn is_mapped(&self, pa: PhysAddr, len: usize) -> bool {
        let mut m = self.lock();
        match &m.ext {
            Some(e) => pa.checked_add(len as u64).is_some_and(|end| end <= e.len()),
            None => m.locate(pa, len).is_some(),
        }
    }

    /// Device read (DMA). Fails on any byte outside an allocated region.
    pub fn dma_read(&self, pa: PhysAddr, buf: &mut [u8]) -> Result<(), DmaFault> {
        let mut m = self.lock();
        let at = if m.ext.is_none() { m.locate(pa, buf.len()) } else { None };
        match (&m.ext, at) {
            (Some(e), _) if e.read(pa, buf) => Ok(()),
            (None, Some((i, off))) => {
                buf.copy_from_slice(&m.regions[i].1[off..off + buf.len()]);
                Ok(())
            }
            _ => {
                let f = DmaFault { addr: pa, len: buf.len(), write: false };
                m.stats.dma_faults += 1;
                m.last_fault = Some(f);
                Err(f)
            }
        }
    }

    /// Device write (DMA). Fails (writing nothing) on any byte outside an allocated region.
    pub fn dma_write(&self, pa: PhysAddr, data: &[u8]) -> Result<(), DmaFault> {
        let mut m = self.lock();
        let at = if m.ext.is_none() { m.locate(pa, data.len()) } else { None };
        match (&m.ext, at) {
            (Some(e), _) if e.write(pa, data) => Ok(()),
            (None, Some((i, off))) => {
                m.regions[i].1[off..off + data.len()].copy_from_slice(data);
                Ok(())
            }
            _ => {
                let f = DmaFault { addr: pa, len: data.len(), write: true };
                m.stats.dma_faults += 1;
                m.last_fault = Some(f);
                Err(f)
            }
        }
    }

    pub fn dma_read_be32(&self, pa: PhysAddr) -> Result<u32, DmaFault> {
        let mut b = [0u8; 4];
        self.dma_read(pa, &mut b)?;
        Ok(u32::from_be_bytes(b))
    }
    pub fn dma_read_be64(&self, pa: PhysAddr) -> Result<u64, DmaFault> {
        let mut b = [0u8; 8];
        self.dma_read(pa, &mut b)?;
        Ok(u64::from_be_bytes(b))
    }

    /// Host-side (test/driver) access; panics outside allocated memory like a wild pointer.
    pub fn read(&self, pa: PhysAddr, buf: &mut [u8]) {
        self.read_host(pa, buf);
    }

    /// [`PhysMem::read`], returning the driver's read filter under the same lock.
    fn read_host(&self, pa: PhysAddr, buf: &mut [u8]) -> Option<DmaReadFilter> {
        let mut m = self.lock();
        if let Some(e) = &m.ext {
            assert!(e.read(pa, buf), "host read of unmapped {pa:#x}+{}", buf.len());
            return m.read_filter.clone();
        }
        let (i, off) = m.locate(pa, buf.len()).unwrap_or_else(|| panic!("host read of unmapped {pa:#x}+{}", buf.len()));
        buf.copy_from_slice(&m.regions[i].1[off..off + buf.len()]);
        m.read_filter.clone()
    }
    /// Host-side write; panics outside allocated memory.
    pub fn write(&self, pa: PhysAddr, data: &[u8]) {
        let mut m = self.lock();
        if let Some(e) = &m.ext {
            assert!(e.write(pa, data), "host write of unmapped {pa:#x}+{}", data.len());
            return;
        }
        let (i, off) = m.locate(pa, data.len()).unwrap_or_else(|| panic!("host write of unmapped {pa:#x}+{}", data.len()));
        m.regions[i].1[off..off + data.len()].copy_from_slice(data);
    }
}

fn align_up(v: u64, a: u64) -> u64 {
    (v + a - 1) & !(a - 1)
}

impl MemInner {
    /// The region holding all of `[pa, pa+len)`: its index and `pa`'s offset in it.
    fn locate(&mut self, pa: PhysAddr, len: usize) -> Option<(usize, usize)> {
        let inside = |(start, v): &(PhysAddr, Vec<u8>)| pa >= *start && ((pa - start) as usize).checked_add(len).is_some_and(|end| end <= v.len());
        if self.regions.get(self.last).is_some_and(inside) {
            return Some((self.last, (pa - self.regions[self.last].0) as usize));
        }
        let i = self.regions.partition_point(|r| r.0 <= pa).checked_sub(1)?;
        if !inside(&self.regions[i]) {
            return None;
        }
        self.last = i;
        Some((i, (pa - self.regions[i].0) as usize))
    }
}

/// A monotonic clock shared by the `SimHal` and the adapter model. Virtual by default (moves
/// only with `advance`, i.e. `SimHal::relax`); `realtime()` also follows the host's monotonic
/// clock, for runs against a real peer (e.g. a Linux guest on a datagram link).
#[derive(Clone, Default)]
pub struct SimClock(Arc<AtomicU64>, Option<std::time::Instant>);

impl SimClock {
    pub fn new() -> Self {
        Self::default()
    }
    /// A clock that advances with wall time (plus any explicit `advance`).
    pub fn realtime() -> Self {
        SimClock(Arc::default(), Some(std::time::Instant::now()))
    }
    pub fn now_ns(&self) -> u64 {
        let wall = self.1.map(|t| t.elapsed().as_nanos() as u64).unwrap_or(0);
        self.0.load(Ordering::Relaxed).wrapping_add(wall)
    }
    pub fn advance(&self, ns: u64) {
        self.0.fetch_add(ns, Ordering::Relaxed);
    }
}

/// What the driver reads from DMA memory passes through this first ([`SimHal::set_dma_read_filter`]).
pub type DmaReadFilter = Arc<dyn Fn(&mut [u8]) + Send + Sync>;

/// A DMA region of `PhysMem`, returned to it on drop.
pub struct SimDma {
    mem: PhysMem,
    pa: PhysAddr,
    len: usize,
}

impl DmaRegion for SimDma {
    fn paddr(&self) -> PhysAddr {
        self.pa
    }
    fn len(&self) -> usize {
        self.len
    }
    fn read(&self, offset: usize, buf: &mut [u8]) {
        assert!(offset + buf.len() <= self.len, "DmaRegion read out of range");
        if let Some(f) = self.mem.read_host(self.pa + offset as u64, buf) {
            f(buf);
        }
    }
    fn write(&self, offset: usize, data: &[u8]) {
        assert!(offset + data.len() <= self.len, "DmaRegion write out of range");
        self.mem.write(self.pa + offset as u64, data)
    }
}

impl Drop for SimDma {
    fn drop(&mut self) {
        self.mem.free(self.pa);
    }
}

/// The host-test platform: DMA from `PhysMem`, time from a `SimClock` that only `relax()`
/// (and explicit `advance`) moves, so timeouts run fast and deterministically.
/// Cloning shares everything (memory, clock, relax step and hook, copy switch, read filter).
#[derive(Clone)]
pub struct SimHal(Arc<SimHalInner>);

/// What a `SimHal` runs in every `relax()`.
pub type RelaxHook = Box<dyn FnMut() + Send>;

struct SimHalInner {
    mem: PhysMem,
    clock: SimClock,
    step_ns: AtomicU64,
    hook: Mutex<Option<RelaxHook>>,
    /// Whether `copy_dma` is offered (as the image's platform does).
    copy_dma: AtomicBool,
}

impl SimHal {
    /// Default `relax()` step: 100 µs of virtual time.
    pub const DEFAULT_STEP_NS: u64 = 100_000;

    pub fn new(mem: PhysMem, clock: SimClock) -> Self {
        SimHal(Arc::new(SimHalInner {
            mem,
            clock,
            step_ns: AtomicU64::new(Self::DEFAULT_STEP_NS),
            hook: Mutex::new(None),
            copy_dma: AtomicBool::new(true),
        }))
    }
    /// Virtual nanoseconds each `relax()` adds.
    pub fn set_relax_step(&self, ns: u64) {
        self.0.step_ns.store(ns, Ordering::Relaxed);
    }
    /// Whether the platform offers `copy_dma` (on by default; off: a platform that cannot
    /// copy between DMA slices, whose users must fall back on their own).
    pub fn set_copy_dma(&self, on: bool) {
        self.0.copy_dma.store(on, Ordering::Relaxed);
    }
    /// Pass everything the driver reads from its DMA regions through `f` (a broken or hostile
    /// adapter, which may write anything into memory it was given); the adapter model's own
    /// DMA is not filtered.
    pub fn set_dma_read_filter(&self, f: DmaReadFilter) {
        self.0.mem.lock().read_filter = Some(f);
    }
    /// Something to run in every `relax()` (e.g. `ConnectX::poll`), after time advances. A
    /// `relax()` while the hook runs (in it, or on another thread) skips it.
    pub fn set_relax_hook(&self, f: RelaxHook) {
        *self.0.hook.lock().unwrap_or_else(|p| p.into_inner()) = Some(f);
    }
    pub fn mem(&self) -> &PhysMem {
        &self.0.mem
    }
    pub fn clock(&self) -> &SimClock {
        &self.0.clock
    }
}

impl Hal for SimHal {
    type Dma = SimDma;
    fn dma_alloc(&self, size: usize, align: usize) -> Result<SimDma, HalError> {
        let pa = self.0.mem.alloc(size, align)?;
        Ok(SimDma { mem: self.0.mem.clone(), pa, len: size })
    }
    fn now_ns(&self) -> u64 {
        self.0.clock.now_ns()
    }
    /// Memory-to-memory copy inside simulated physical memory (RAM namespaces' "DMA").
    /// Counted as DMA traffic; a range outside allocated memory is refused (false).
    fn copy_dma(&self, dst: DmaSlice, src: DmaSlice) -> bool {
        let (dst_len, dst, src, len) = (dst.len(), dst.paddr(), src.paddr(), src.len());
        if !self.0.copy_dma.load(Ordering::Relaxed) || dst_len < len || !self.0.mem.is_mapped(src, len) || !self.0.mem.is_mapped(dst, len) {
            return false;
        }
        let mut tmp = vec![0u8; len];
        self.0.mem.dma_read(src, &mut tmp).is_ok() && self.0.mem.dma_write(dst, &tmp).is_ok()
    }
    fn relax(&self) {
        self.0.clock.advance(self.0.step_ns.load(Ordering::Relaxed));
        let mut hook = match self.0.hook.try_lock() {
            Ok(h) => h,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        };
        if let Some(f) = hook.as_mut() {
            f();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_above_4g_with_guards_and_free() {
        let m = PhysMem::new();
        let a = m.alloc(100, 4096).unwrap();
        let b = m.alloc(8192, 8192).unwrap();
        assert!(a >= DEFAULT_BASE && b > a + 100 + GUARD - 1);
        assert_eq!(b % 8192, 0);
        assert!(m.is_mapped(a, 100) && !m.is_mapped(a, 101));
        assert!(m.dma_read(a + 100, &mut [0u8; 4]).is_err());
        assert!(m.dma_read(a & 0xFFFF_FFFF, &mut [0u8; 4]).is_err(), "32-bit truncation");
        assert_eq!(m.stats().dma_faults, 2);
        assert!(m.free(a));
        let c = m.alloc(50, 4096).unwrap();
        assert_eq!(c, a, "first fit reuses the hole");
        m.free(b);
        m.free(c);
        assert_eq!(m.stats().regions, 0);
        assert_eq!(m.stats().bytes, 0);
    }

    #[test]
    fn simhal_region_drop_and_clock() {
        let hal = SimHal::new(PhysMem::new(), SimClock::new());
        {
            let r = hal.dma_alloc(4096, 4096).unwrap();
            r.write_be32(8, 0xdead_beef);
            assert_eq!(hal.mem().dma_read_be32(r.paddr() + 8).unwrap(), 0xdead_beef);
            assert_eq!(hal.mem().stats().regions, 1);
        }
        assert_eq!(hal.mem().stats().regions, 0);
        hal.set_relax_step(1000);
        assert!(!hal::poll_until(&hal, 1_000_000, || false));
        assert!(hal.now_ns() >= 1_000_000);
    }

    #[test]
    fn simhal_copy_switch_read_filter_and_free_all() {
        let hal = SimHal::new(PhysMem::new(), SimClock::new());
        let (a, b) = (hal.dma_alloc(4096, 4096).unwrap(), hal.dma_alloc(4096, 4096).unwrap());
        a.write(0, &[7; 16]);
        let (sa, sb) = (DmaSlice::new(&a, 0, 16).unwrap(), DmaSlice::whole(&b));
        assert!(!hal.copy_dma(sa, sb), "destination shorter than the source");
        assert!(hal.copy_dma(sb, sa));
        assert_eq!(b.read_u8(15), 7);
        hal.set_copy_dma(false);
        assert!(!hal.copy_dma(sb, sa), "a platform without copy_dma");
        // The driver's reads pass the filter; the adapter's DMA does not.
        hal.set_dma_read_filter(Arc::new(|buf: &mut [u8]| buf[0] ^= 0xFF));
        assert_eq!(b.read_u8(0), 0xF8);
        assert_eq!(hal.mem().dma_read_be32(b.paddr()).unwrap() >> 24, 7);
        // A region leaked by the driver keeps no memory once the run frees everything.
        std::mem::forget(a);
        hal.mem().free_all();
        assert_eq!((hal.mem().stats().regions, hal.mem().stats().bytes), (0, 0));
        drop(b); // frees nothing more
        assert_eq!(hal.mem().stats().regions, 0);
    }

    /// A flat byte array standing in for a guest's RAM file.
    struct Flat(Mutex<Vec<u8>>);
    impl ExternalMem for Flat {
        fn len(&self) -> u64 {
            self.0.lock().unwrap().len() as u64
        }
        fn read(&self, pa: PhysAddr, buf: &mut [u8]) -> bool {
            let v = self.0.lock().unwrap();
            let Some(src) = (pa as usize).checked_add(buf.len()).and_then(|end| v.get(pa as usize..end)) else { return false };
            buf.copy_from_slice(src);
            true
        }
        fn write(&self, pa: PhysAddr, data: &[u8]) -> bool {
            let mut v = self.0.lock().unwrap();
            let Some(dst) = (pa as usize).checked_add(data.len()).and_then(|end| v.get_mut(pa as usize..end)) else { return false };
            dst.copy_from_slice(data);
            true
        }
    }

    #[test]
    fn external_backing_routes_dma_and_faults_past_its_end() {
        let flat = Arc::new(Flat(Mutex::new(vec![0u8; 0x3000])));
        let m = PhysMem::external(flat.clone());
        assert!(m.alloc(4096, 4096).is_err(), "the guest allocates, not the model");
        m.dma_write(0x1ffe, &[1, 2, 3, 4]).unwrap();
        assert_eq!(&flat.0.lock().unwrap()[0x1ffe..0x2002], &[1, 2, 3, 4]);
        assert_eq!(m.dma_read_be32(0x1ffe).unwrap(), 0x0102_0304);
        assert!(m.is_mapped(0, 0x3000) && !m.is_mapped(0x2fff, 2));
        assert!(m.dma_read(0x2ffe, &mut [0u8; 4]).is_err());
        assert!(m.dma_write(u64::MAX - 1, &[0u8; 4]).is_err());
        assert_eq!(m.stats().dma_faults, 2);
        assert_eq!(m.last_fault(), Some(DmaFault { addr: u64::MAX - 1, len: 4, write: true }));
    }

    #[test]
    fn realtime_clock_moves_by_itself() {
        let c = SimClock::realtime();
        let a = c.now_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(c.now_ns() >= a + 1_000_000);
        c.advance(5);
        assert!(c.now_ns() >= a + 1_000_005);
    }
}
