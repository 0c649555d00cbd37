//! Page tables: every RAM region identity-mapped write-back with 2 MiB pages; the rest of
//! the first 4 GiB (the PCI hole: ECAM, 32-bit BARs, APICs, flash) uncached; device memory
//! above 4 GiB (64-bit BARs, ECAM) mapped uncached on demand by [`map_mmio`].
use x86_64::registers::control::{Cr3, Cr3Flags};
use x86_64::structures::paging::{
    FrameAllocator, Mapper, OffsetPageTable, Page, PageSize, PageTable, PageTableFlags as F, PhysFrame,
    Size2MiB, Size4KiB, Translate,
};
use x86_64::{PhysAddr, VirtAddr};

use crate::bootinfo::{Region, MEM_TYPE_ACPI, MEM_TYPE_RAM};
use crate::memory::FrameRanges;

const TWO_MIB: u64 = Size2MiB::SIZE;
const FOUR_GIB: u64 = 4 << 30;
/// Page-table frames must be reachable through the boot tables while building (first 4 GiB).
const TABLE_LIMIT: u64 = FOUR_GIB;

/// Why a mapping failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PagingError {
    /// No free frame for a page table.
    OutOfFrames,
    /// The range is RAM (mapped write-back) or already mapped differently.
    Conflict(u64),
}

static PML4: spin::Mutex<u64> = spin::Mutex::new(0);

struct Frames<'a>(&'a mut FrameRanges);

// SAFETY: returns unused, page-aligned RAM frames taken out of the free ranges.
unsafe impl FrameAllocator<Size4KiB> for Frames<'_> {
    fn allocate_frame(&mut self) -> Option<PhysFrame<Size4KiB>> {
        let pa = self.0.alloc(4096, 4096, TABLE_LIMIT)?;
        PhysFrame::from_start_address(PhysAddr::new(pa)).ok()
    }
}

fn mapper(pml4: u64) -> OffsetPageTable<'static> {
    // SAFETY: `pml4` is a page-table frame we own, identity-mapped (offset 0); callers hold the PML4 lock.
    unsafe { OffsetPageTable::new(&mut *(pml4 as *mut PageTable), VirtAddr::new(0)) }
}

fn map_2m(m: &mut OffsetPageTable, pa: u64, flags: F, frames: &mut FrameRanges) -> Result<bool, PagingError> {
    let page = Page::<Size2MiB>::containing_address(VirtAddr::new(pa));
    if m.translate_addr(page.start_address()).is_some() {
        return Ok(false);
    }
    let frame = PhysFrame::<Size2MiB>::containing_address(PhysAddr::new(pa));
    // SAFETY: identity mapping of a physical range to itself; nothing else uses this virtual range.
    unsafe { m.map_to(page, frame, flags, &mut Frames(frames)) }
        .map_err(|_| PagingError::OutOfFrames)?
        .ignore();
    Ok(true)
}

fn is_ram(r: &Region) -> bool {
    r.kind == MEM_TYPE_RAM || r.kind == MEM_TYPE_ACPI
}

const WB: F = F::PRESENT.union(F::WRITABLE);
const UC: F = F::PRESENT.union(F::WRITABLE).union(F::NO_CACHE).union(F::WRITE_THROUGH);

/// Build the tables and switch CR3 to them.
pub fn init(regions: &[Region], frames: &mut FrameRanges) {
    let Some(pml4) = frames.alloc(4096, 4096, TABLE_LIMIT) else {
        log::error!("paging: no frame for the PML4");
        crate::exit::fail();
    };
    // SAFETY: a fresh frame below 4 GiB, identity-mapped by the boot tables.
    unsafe { core::ptr::write_bytes(pml4 as *mut u8, 0, 4096) };
    let mut m = mapper(pml4);
    let mut mapped = 0u64;
    let mut uc = 0u64;
    let mut pa = 0;
    while pa < FOUR_GIB {
        let ram = regions.iter().any(|r| is_ram(r) && r.start < pa + TWO_MIB && r.end() > pa);
        if map_2m(&mut m, pa, if ram { WB } else { UC }, frames).is_err() {
            log::error!("paging: out of frames for page tables");
            crate::exit::fail();
        }
        mapped += 1;
        uc += u64::from(!ram);
        pa += TWO_MIB;
    }
    for r in regions.iter().filter(|r| is_ram(r) && r.end() > FOUR_GIB) {
        let mut pa = r.start.max(FOUR_GIB) & !(TWO_MIB - 1);
        while pa < r.end() {
            match map_2m(&mut m, pa, WB, frames) {
                Ok(true) => mapped += 1,
                Ok(false) => {}
                Err(_) => {
                    log::error!("paging: out of frames for page tables");
                    crate::exit::fail();
                }
            }
            pa += TWO_MIB;
        }
    }
    let frame = PhysFrame::containing_address(PhysAddr::new(pml4));
    // SAFETY: the new tables identity-map all RAM (image, stacks, heap) exactly as the boot tables did.
    unsafe { Cr3::write(frame, Cr3Flags::empty()) };
    *PML4.lock() = pml4;
    crate::STATS.lock().pages_2m_mapped = mapped;
    log::info!("paging: {mapped} x 2 MiB pages identity-mapped ({uc} uncached in the first 4 GiB)");
}

/// Make `[pa, pa+len)` accessible uncached (identity). Pages already mapped are left as they
/// are (below 4 GiB everything not RAM is already uncached).
pub fn map_mmio(pa: u64, len: u64) -> Result<(), PagingError> {
    let pml4 = PML4.lock();
    if *pml4 == 0 {
        return Ok(()); // boot tables: identity 4 GiB
    }
    let mut m = mapper(*pml4);
    let mut frames = crate::memory::FRAMES.lock();
    let mut p = pa & !(TWO_MIB - 1);
    let mut added = 0;
    while p < pa.saturating_add(len) {
        if map_2m(&mut m, p, UC, &mut frames)? {
            x86_64::instructions::tlb::flush(VirtAddr::new(p));
            added += 1;
        }
        p += TWO_MIB;
    }
    crate::STATS.lock().pages_2m_mapped += added;
    Ok(())
}
