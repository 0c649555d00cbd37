//! Physical memory: the free-frame ranges built from the loader's memory map (RAM above
//! 1 MiB minus the image), the kernel heap (linked_list_allocator) and the DMA pool from
//! which [`crate::hal::KernelHal`] hands out physically contiguous, identity-mapped regions.
use core::alloc::{GlobalAlloc, Layout};
use core::ptr::NonNull;

use linked_list_allocator::Heap;

use crate::bootinfo::{Region, MEM_TYPE_RAM};

/// Frame size.
pub const PAGE: u64 = 4096;
/// Memory below this is left to firmware (real-mode IVT, BDA, EBDA, option ROMs).
pub const LOW_FLOOR: u64 = 1 << 20;
/// Most free ranges tracked.
pub const MAX_RANGES: usize = 64;

/// Free physical ranges `[start, end)`, page aligned, sorted by start.
#[derive(Debug, Clone, Default)]
pub struct FrameRanges {
    free: heapless::Vec<(u64, u64), MAX_RANGES>,
}

fn align_up(x: u64, a: u64) -> u64 {
    (x + a - 1) & !(a - 1)
}

impl FrameRanges {
    /// Usable RAM from the memory map, above [`LOW_FLOOR`], minus `reserved` (the image).
    pub fn from_regions(regions: &[Region], reserved: (u64, u64)) -> Self {
        let mut r = Self::default();
        let mut sorted: heapless::Vec<Region, MAX_RANGES> = regions.iter().copied().filter(|x| x.kind == MEM_TYPE_RAM).collect();
        sorted.sort_unstable_by_key(|x| x.start);
        for reg in sorted {
            let s = align_up(reg.start.max(LOW_FLOOR), PAGE);
            let e = reg.end() & !(PAGE - 1);
            // cut the reserved range out
            let (rs, re) = (reserved.0 & !(PAGE - 1), align_up(reserved.1, PAGE));
            for (a, b) in [(s, e.min(rs)), (s.max(re), e)] {
                if a < b {
                    let _ = r.free.push((a, b));
                }
            }
        }
        r
    }

    /// Total free bytes.
    pub fn free_bytes(&self) -> u64 {
        self.free.iter().map(|(s, e)| e - s).sum()
    }

    /// The free ranges.
    pub fn ranges(&self) -> &[(u64, u64)] {
        &self.free
    }

    /// First-fit allocation of `size` bytes aligned to `align` (a power of two ≥ 4096), ending
    /// at or below `limit`. The alignment gap stays free.
    pub fn alloc(&mut self, size: u64, align: u64, limit: u64) -> Option<u64> {
        let size = align_up(size.max(1), PAGE);
        let align = align.max(PAGE);
        if !align.is_power_of_two() {
            return None;
        }
        for i in 0..self.free.len() {
            let (s, e) = self.free[i];
            let a = align_up(s, align);
            let end = a.checked_add(size)?;
            if end <= e && end <= limit {
                if a > s {
                    self.free[i] = (s, a);
                    if end < e {
                        self.free.insert(i + 1, (end, e)).ok()?;
                    }
                } else if end < e {
                    self.free[i] = (end, e);
                } else {
                    self.free.remove(i);
                }
                return Some(a);
            }
        }
        None
    }

    /// Take the whole largest free range, keeping `keep` bytes of it free.
    pub fn take_largest(&mut self, keep: u64) -> Option<(u64, u64)> {
        let (i, &(s, e)) = self.free.iter().enumerate().max_by_key(|(_, (s, e))| e - s)?;
        let keep = align_up(keep, PAGE);
        if e - s <= keep {
            return None;
        }
        self.free[i] = (s, s + keep);
        Some((s + keep, e))
    }
}

/// Lowest page a start-up IPI can name that is not page 0 (real-mode IVT and BIOS data area).
const LOW_PAGE_MIN: u64 = 0x1000;
/// End of conventional memory: the EBDA, VGA memory and ROMs sit above (PC/AT layout).
const LOW_PAGE_END: u64 = 0xa_0000;

/// A page of usable RAM below 1 MiB for the application processors' start-up trampoline: the
/// highest page the memory map marks as RAM in [4 KiB, 640 KiB). None if the map lists none.
pub fn low_page_in(regions: &[Region]) -> Option<u64> {
    regions
        .iter()
        .filter(|r| r.kind == MEM_TYPE_RAM)
        .filter_map(|r| {
            let s = align_up(r.start.max(LOW_PAGE_MIN), PAGE);
            let e = r.end().min(LOW_PAGE_END) & !(PAGE - 1);
            (s < e).then(|| e - PAGE)
        })
        .max()
}

static LOW_PAGE: spin::Once<Option<u64>> = spin::Once::new();

/// The trampoline page chosen at start-up (see [`low_page_in`]).
pub fn low_page() -> Option<u64> {
    LOW_PAGE.get().copied().flatten()
}

/// Free frames after start-up (page tables for BAR mappings come from here).
pub static FRAMES: spin::Mutex<FrameRanges> = spin::Mutex::new(FrameRanges { free: heapless::Vec::new() });

/// The DMA pool: identity-mapped RAM, so an address is both the CPU and the device address.
pub static DMA_POOL: spin::Mutex<Heap> = spin::Mutex::new(Heap::empty());

/// The kernel heap behind `alloc`.
pub struct KernelHeap(spin::Mutex<Heap>);

// SAFETY: allocation is delegated to linked_list_allocator under a lock; the heap memory is
// RAM reserved for it at start-up and never handed out otherwise.
unsafe impl GlobalAlloc for KernelHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.0.lock().allocate_first_fit(layout).map_or(core::ptr::null_mut(), |p| p.as_ptr())
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if let Some(p) = NonNull::new(ptr) {
            // SAFETY: `ptr` came from `alloc` with this layout (GlobalAlloc contract).
            unsafe { self.0.lock().deallocate(p, layout) }
        }
    }
}

#[cfg(all(target_os = "none", not(test)))]
#[global_allocator]
static HEAP: KernelHeap = KernelHeap(spin::Mutex::new(Heap::empty()));

/// Build the frame ranges, switch to the full page tables, carve the heap and the DMA pool.
#[cfg(target_os = "none")]
pub fn init(boot: &crate::bootinfo::BootData) {
    let image = boot::image_range();
    LOW_PAGE.call_once(|| low_page_in(&boot.regions));
    let mut frames = FrameRanges::from_regions(&boot.regions, image);
    let ram: u64 = boot.regions.iter().filter(|r| r.kind == MEM_TYPE_RAM).map(|r| r.len).sum();
    crate::STATS.lock().ram_bytes = ram;
    for r in boot.regions.iter() {
        log::debug!("memory: {:#014x}-{:#014x} type {}", r.start, r.end(), r.kind);
    }
    crate::paging::init(&boot.regions, &mut frames);
    let heap_size = (ram / 16).clamp(4 << 20, 64 << 20);
    let Some(heap) = frames.alloc(heap_size, PAGE, u64::MAX) else {
        log::error!("memory: no {heap_size} bytes for the heap");
        crate::exit::fail();
    };
    #[cfg(not(test))]
    // SAFETY: [heap, heap+size) is free RAM taken out of the frame ranges, identity-mapped.
    unsafe {
        HEAP.0.lock().init(heap as *mut u8, heap_size as usize)
    };
    // Keep 8 MiB of frames for page tables and later needs; the rest of the largest range is DMA memory.
    let dma = frames.take_largest(8 << 20);
    if let Some((s, e)) = dma {
        // SAFETY: [s, e) is free RAM taken out of the frame ranges, identity-mapped.
        unsafe { DMA_POOL.lock().init(s as *mut u8, (e - s) as usize) };
    }
    let (ds, de) = dma.unwrap_or((0, 0));
    log::info!(
        "memory: {} MiB RAM, image {:#x}-{:#x}, heap {} MiB at {heap:#x}, DMA pool {} MiB at {ds:#x}, {} MiB frames free",
        ram >> 20,
        image.0,
        image.1,
        heap_size >> 20,
        (de - ds) >> 20,
        frames.free_bytes() >> 20
    );
    *FRAMES.lock() = frames;
}

#[cfg(not(target_os = "none"))]
pub fn init(_boot: &crate::bootinfo::BootData) {}

/// Bytes in use and free: (heap used, heap free, DMA pool used, DMA pool free), for reports.
pub fn usage() -> (u64, u64, u64, u64) {
    #[cfg(all(target_os = "none", not(test)))]
    let (hu, hf) = {
        let h = HEAP.0.lock();
        (h.used() as u64, h.free() as u64)
    };
    #[cfg(not(all(target_os = "none", not(test))))]
    let (hu, hf) = (0, 0);
    let d = DMA_POOL.lock();
    (hu, hf, d.used() as u64, d.free() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ram(start: u64, len: u64) -> Region {
        Region { start, len, kind: MEM_TYPE_RAM }
    }

    #[test]
    fn ranges_skip_low_memory_reserved_and_image() {
        let regs = [ram(0, 0x9fc00), Region { start: 0xf0000, len: 0x10000, kind: 2 }, ram(0x100000, 0x7f00000)];
        let f = FrameRanges::from_regions(&regs, (0x100000, 0x180123));
        assert_eq!(f.ranges(), &[(0x181000, 0x8000000)]);
    }

    #[test]
    fn alloc_aligns_and_keeps_gap() {
        let mut f = FrameRanges::from_regions(&[ram(0x101000, 0x1000000)], (0, 0));
        let a = f.alloc(0x3000, 0x10000, u64::MAX).unwrap();
        assert_eq!(a, 0x110000);
        assert_eq!(f.ranges(), &[(0x101000, 0x110000), (0x113000, 0x1101000)]);
        let b = f.alloc(0x1000, 0x1000, u64::MAX).unwrap();
        assert_eq!(b, 0x101000);
        assert!(f.alloc(0x2000_0000, 0x1000, u64::MAX).is_none());
        assert!(f.alloc(0x1000, 0x1000, 0x101000).is_none());
        assert!(f.alloc(0x1000, 0x3000, u64::MAX).is_none(), "non power of two");
    }

    #[test]
    fn low_page_is_below_640k_in_ram_and_not_page_0() {
        let regs = [ram(0, 0x9fc00), Region { start: 0x9fc00, len: 0x400, kind: 2 }, ram(0x100000, 0x7f00000)];
        assert_eq!(low_page_in(&regs), Some(0x9e000));
        assert_eq!(low_page_in(&[ram(0, 0x1000), ram(0x100000, 0x100000)]), None);
        assert_eq!(low_page_in(&[ram(0x800, 0x1800)]), Some(0x1000));
        assert_eq!(low_page_in(&[Region { start: 0, len: 0xa0000, kind: 2 }]), None);
    }

    #[test]
    fn take_largest_keeps_reserve() {
        let mut f = FrameRanges::from_regions(&[ram(0x100000, 0x100000), ram(0x1000000, 0x4000000)], (0, 0));
        let (s, e) = f.take_largest(0x800000).unwrap();
        assert_eq!((s, e), (0x1800000, 0x5000000));
        assert_eq!(f.free_bytes(), 0x100000 + 0x800000);
    }
}
