//! shared: a file mapped MAP_SHARED (QEMU's guest RAM or ivshmem BAR file) and the only
//! `unsafe` of this crate: bounds-checked raw-pointer byte copies and atomic word views.
//!
//! The other side (the guest, through QEMU) writes the same pages concurrently. Word
//! registers (doorbells, init-segment dwords) are accessed atomically, and so is a DMA read or
//! write of one naturally aligned 1-, 4- or 8-byte word (a doorbell record, a CQE's ownership
//! byte): the guest's driver reads and writes those words while the adapter does, and a byte
//! copy could see a counter half old, half new (0xff -> 0x100 read as 0x1ff). Other byte
//! ranges (DMA) are copied through raw pointers without ever forming a Rust reference to the
//! shared bytes, and like a real adapter's DMA they are only meaningful when the driver does
//! not touch the buffer meanwhile. A read is ordered before what follows it (acquire), a write
//! after what came before it (release), as PCIe orders an adapter's posted writes.
#![deny(clippy::undocumented_unsafe_blocks)]
use std::fs::OpenOptions;
use std::io;
use std::path::Path;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicU8, Ordering};

use memmap2::MmapRaw;

/// A shared read-write mapping of a whole file.
pub struct SharedMap {
    map: MmapRaw,
    len: usize,
}

impl SharedMap {
    /// Map `path` (created and sized to `len` bytes if missing or shorter; tmpfs files stay
    /// sparse). An existing longer file is mapped only up to `len`.
    pub fn open(path: &Path, len: usize) -> io::Result<Self> {
        let f = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
        if f.metadata()?.len() < len as u64 {
            f.set_len(len as u64)?;
        }
        let map = memmap2::MmapOptions::new().len(len).map_raw(&f)?;
        Ok(SharedMap { map, len })
    }

    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn in_range(&self, off: u64, n: usize) -> Option<usize> {
        let off = usize::try_from(off).ok()?;
        (off.checked_add(n)? <= self.len).then_some(off)
    }

    /// Copy bytes at `off` into `buf`; false if out of range. One aligned 1-, 4- or 8-byte
    /// word is read with one atomic load (never torn); the read is ordered before later ones.
    pub fn read(&self, off: u64, buf: &mut [u8]) -> bool {
        let Some(o) = self.in_range(off, buf.len()) else { return false };
        match buf.len() {
            1 => buf[0] = self.byte(o).load(Ordering::Acquire),
            4 if o % 4 == 0 => buf.copy_from_slice(&self.word32(o).load(Ordering::Acquire).to_ne_bytes()),
            8 if o % 8 == 0 => buf.copy_from_slice(&self.word64(o).load(Ordering::Acquire).to_ne_bytes()),
            _ => {
                // SAFETY: [o, o+len) lies inside the live mapping (checked); `buf` is a distinct
                // private buffer, so the ranges cannot overlap; no reference to shared bytes is
                // formed.
                unsafe { std::ptr::copy_nonoverlapping(self.map.as_ptr().add(o), buf.as_mut_ptr(), buf.len()) };
                fence(Ordering::Acquire);
            }
        }
        true
    }

    /// Copy `data` to `off`; false (nothing written) if out of range. One aligned 1-, 4- or
    /// 8-byte word is written with one atomic store; every write is ordered after earlier ones
    /// (a CQE's body is visible before its ownership byte, written last).
    pub fn write(&self, off: u64, data: &[u8]) -> bool {
        let Some(o) = self.in_range(off, data.len()) else { return false };
        match *data {
            [b] => self.byte(o).store(b, Ordering::Release),
            [a, b, c, d] if o % 4 == 0 => self.word32(o).store(u32::from_ne_bytes([a, b, c, d]), Ordering::Release),
            _ if data.len() == 8 && o % 8 == 0 => {
                let w: [u8; 8] = data.try_into().expect("8 bytes");
                self.word64(o).store(u64::from_ne_bytes(w), Ordering::Release);
            }
            _ => {
                fence(Ordering::Release);
                // SAFETY: as in `read`, with the mapping writable (opened read-write, MAP_SHARED).
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.map.as_mut_ptr().add(o), data.len()) };
            }
        }
        true
    }

    /// The byte at `off` (in range; panics otherwise: a shim bug).
    fn byte(&self, off: usize) -> &AtomicU8 {
        assert!(off < self.len, "byte at {off:#x}");
        // SAFETY: inside the mapping, which lives as long as `&self`; every byte is aligned
        // for `AtomicU8`; shim accesses to it through this view are atomic.
        unsafe { AtomicU8::from_ptr(self.map.as_mut_ptr().add(off)) }
    }

    /// The 32-bit word at `off` (4-aligned, in range; panics otherwise: a shim bug).
    pub fn word32(&self, off: usize) -> &AtomicU32 {
        assert!(off % 4 == 0 && off + 4 <= self.len, "word32 at {off:#x}");
        // SAFETY: aligned and inside the mapping, which lives as long as `&self`; all shim
        // accesses to this word are atomic (the guest's are single aligned stores/loads).
        unsafe { AtomicU32::from_ptr(self.map.as_mut_ptr().add(off).cast()) }
    }

    /// The 64-bit word at `off` (8-aligned, in range; panics otherwise).
    pub fn word64(&self, off: usize) -> &AtomicU64 {
        assert!(off % 8 == 0 && off + 8 <= self.len, "word64 at {off:#x}");
        // SAFETY: as in `word32`.
        unsafe { AtomicU64::from_ptr(self.map.as_mut_ptr().add(off).cast()) }
    }
}

/// Guest RAM as the model's physical memory: guest physical address = file offset (a q35
/// guest with at most 2 GiB of RAM has all of it at [0, size)).
pub struct GuestRam(pub SharedMap);

impl emu_connectx::ExternalMem for GuestRam {
    fn len(&self) -> u64 {
        self.0.len() as u64
    }
    fn read(&self, pa: u64, buf: &mut [u8]) -> bool {
        self.0.read(pa, buf)
    }
    fn write(&self, pa: u64, data: &[u8]) -> bool {
        self.0.write(pa, data)
    }
}
