//! The platform seam: the only way drivers reach the machine (DMA memory, MMIO, time).
//!
//! Modelled on rcore-os/virtio-drivers' `Hal`: a driver is generic over [`Hal`] and never
//! holds a raw pointer. The same driver code then runs
//! - on bare metal (`kernel` implements the traits with volatile accesses to identity-mapped
//!   memory and uncached BAR mappings),
//! - in host tests and the host runner (`emu-connectx` implements them over an arena of
//!   "physical" memory that the emulated adapter also reads and writes, and a BAR whose
//!   accesses are calls into the adapter model).
//!
//! Conventions:
//! - `Mmio::read32/write32` move the 4 bytes at `offset` as a little-endian CPU load/store
//!   would on x86. Devices with big-endian registers (mlx5) use the `_be` helpers.
//! - `DmaRegion` offsets are bytes from the region's start; out-of-range offsets are a
//!   driver bug and implementations panic on them (they never come from outside input:
//!   drivers check every device- or network-provided index before using it).
#![no_std]
#![forbid(unsafe_code)]

/// A physical (bus) address as the device sees it.
pub type PhysAddr = u64;

/// A bounded piece of DMA memory: where it starts (as the device must be told) and how many
/// bytes it spans. The only ways to make one are from a region ([`DmaSlice::new`],
/// [`DmaSlice::whole`]) or from another slice ([`DmaSlice::sub`]), each checking bounds, so
/// a slice never names memory past the buffer it came from. `Copy` and two words: it travels
/// through the block and NVMe-oF seams where a bare address used to (as Asterinas OSTD's
/// `DmaStreamSlice`, without its borrow: an I/O outlives the call that made its slice, so
/// the owner of the region keeps it alive until the I/O completes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DmaSlice {
    paddr: PhysAddr,
    len: usize,
}

impl DmaSlice {
    /// No memory: the buffer of an I/O that moves no data (Flush, Write Zeroes, Deallocate).
    pub const EMPTY: DmaSlice = DmaSlice { paddr: 0, len: 0 };

    /// `len` bytes at `offset` of `region`; `None` if they are not all inside it.
    #[inline]
    pub fn new<R: DmaRegion + ?Sized>(region: &R, offset: usize, len: usize) -> Option<Self> {
        let end = offset.checked_add(len)?;
        (end <= region.len()).then(|| DmaSlice { paddr: region.paddr() + offset as u64, len })
    }

    /// All of `region`.
    #[inline]
    pub fn whole<R: DmaRegion + ?Sized>(region: &R) -> Self {
        DmaSlice { paddr: region.paddr(), len: region.len() }
    }

    /// `len` bytes at `offset` of this slice; `None` if they are not all inside it.
    #[inline]
    pub fn sub(&self, offset: usize, len: usize) -> Option<Self> {
        let end = offset.checked_add(len)?;
        (end <= self.len).then(|| DmaSlice { paddr: self.paddr + offset as u64, len })
    }

    /// The first `len` bytes of this slice, or all of it if it is shorter (never more than
    /// the slice: a user checks the length it needs, as `blockdev::check_io` does).
    #[inline]
    pub fn prefix(&self, len: usize) -> Self {
        DmaSlice { paddr: self.paddr, len: if len < self.len { len } else { self.len } }
    }

    /// Physical address of the first byte.
    #[inline]
    pub fn paddr(&self) -> PhysAddr {
        self.paddr
    }

    /// Length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the slice spans no bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Physical address one past the last byte.
    #[inline]
    pub fn end(&self) -> PhysAddr {
        self.paddr + self.len as u64
    }

    /// The slice as two words (address, length), to carry it to another thread over a ring
    /// of words (a poll group's I/O sent to the owner of a namespace's store, `nvmeof`); the
    /// receiver takes it back with [`DmaSlice::from_words`].
    #[inline]
    pub fn to_words(self) -> [u64; 2] {
        [self.paddr, self.len as u64]
    }

    /// The slice [`DmaSlice::to_words`] gave `w` of, on the receiving end of a ring of words:
    /// only words that came from a slice (the memory it names is its sender's, kept alive by
    /// the sender until the I/O completes, as for any slice).
    #[inline]
    pub fn from_words(w: [u64; 2]) -> Self {
        DmaSlice { paddr: w[0], len: w[1] as usize }
    }

    /// Where `inner` starts in this slice, if all of it lies inside.
    #[inline]
    pub fn offset_of(&self, inner: &DmaSlice) -> Option<usize> {
        (inner.paddr >= self.paddr && inner.end() <= self.end()).then(|| (inner.paddr - self.paddr) as usize)
    }
}

/// Why a platform request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HalError {
    /// No physically contiguous block of that size and alignment is free.
    OutOfMemory { size: usize, align: usize },
    /// Alignment is zero or not a power of two.
    BadAlignment(usize),
}

impl core::fmt::Display for HalError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            HalError::OutOfMemory { size, align } => {
                write!(f, "out of DMA memory ({size} bytes, align {align})")
            }
            HalError::BadAlignment(a) => write!(f, "bad DMA alignment {a}"),
        }
    }
}

/// A physically contiguous, zero-initialised, device-visible memory region.
///
/// Dropping the region returns it to the platform.
pub trait DmaRegion {
    /// Physical address of byte 0, as the device must be told.
    fn paddr(&self) -> PhysAddr;
    /// Length in bytes.
    fn len(&self) -> usize;
    /// Whether the region is empty (never, for regions from `dma_alloc`).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copy `buf.len()` bytes starting at `offset` out of the region (volatile).
    fn read(&self, offset: usize, buf: &mut [u8]);
    /// Copy `data` into the region at `offset` (volatile).
    fn write(&self, offset: usize, data: &[u8]);
    /// Fill `len` bytes at `offset` with `byte`.
    fn fill(&self, offset: usize, len: usize, byte: u8) {
        let chunk = [byte; 64];
        let mut done = 0;
        while done < len {
            let n = core::cmp::min(64, len - done);
            self.write(offset + done, &chunk[..n]);
            done += n;
        }
    }

    fn read_u8(&self, offset: usize) -> u8 {
        let mut b = [0u8; 1];
        self.read(offset, &mut b);
        b[0]
    }
    fn write_u8(&self, offset: usize, v: u8) {
        self.write(offset, &[v]);
    }
    fn read_be16(&self, offset: usize) -> u16 {
        let mut b = [0u8; 2];
        self.read(offset, &mut b);
        u16::from_be_bytes(b)
    }
    fn write_be16(&self, offset: usize, v: u16) {
        self.write(offset, &v.to_be_bytes());
    }
    fn read_be32(&self, offset: usize) -> u32 {
        let mut b = [0u8; 4];
        self.read(offset, &mut b);
        u32::from_be_bytes(b)
    }
    fn write_be32(&self, offset: usize, v: u32) {
        self.write(offset, &v.to_be_bytes());
    }
    fn read_be64(&self, offset: usize) -> u64 {
        let mut b = [0u8; 8];
        self.read(offset, &mut b);
        u64::from_be_bytes(b)
    }
    fn write_be64(&self, offset: usize, v: u64) {
        self.write(offset, &v.to_be_bytes());
    }
    fn read_le16(&self, offset: usize) -> u16 {
        let mut b = [0u8; 2];
        self.read(offset, &mut b);
        u16::from_le_bytes(b)
    }
    fn write_le16(&self, offset: usize, v: u16) {
        self.write(offset, &v.to_le_bytes());
    }
    fn read_le32(&self, offset: usize) -> u32 {
        let mut b = [0u8; 4];
        self.read(offset, &mut b);
        u32::from_le_bytes(b)
    }
    fn write_le32(&self, offset: usize, v: u32) {
        self.write(offset, &v.to_le_bytes());
    }
    fn read_le64(&self, offset: usize) -> u64 {
        let mut b = [0u8; 8];
        self.read(offset, &mut b);
        u64::from_le_bytes(b)
    }
    fn write_le64(&self, offset: usize, v: u64) {
        self.write(offset, &v.to_le_bytes());
    }
}

/// A device register window (a PCI BAR), mapped uncached.
pub trait Mmio {
    /// Size of the window in bytes.
    fn size(&self) -> usize;
    /// Reset the PCI function this window belongs to by a PCIe Function Level Reset (PCIe
    /// base spec §6.6.2): the device loses every internal state, stops DMA at once, and the
    /// platform restores the function's config header (BARs, command register) afterwards, so
    /// the window stays valid. Returns false, doing nothing, when the platform cannot: no
    /// config-space access for this window (the default) or a function without the FLR
    /// capability; the driver then uses the device's own reset.
    fn function_level_reset(&self) -> bool {
        false
    }
    /// 32-bit load of the bytes at `offset` in CPU (little-endian) order.
    fn read32(&self, offset: usize) -> u32;
    /// 32-bit store in CPU (little-endian) order.
    fn write32(&self, offset: usize, value: u32);
    /// 64-bit load in CPU (little-endian) order.
    fn read64(&self, offset: usize) -> u64 {
        (self.read32(offset) as u64) | ((self.read32(offset + 4) as u64) << 32)
    }
    /// 64-bit store as one access, CPU (little-endian) order.
    fn write64(&self, offset: usize, value: u64);

    /// Big-endian register read: the value whose most significant byte is at `offset`.
    fn read32_be(&self, offset: usize) -> u32 {
        u32::from_be(self.read32(offset))
    }
    /// Big-endian register write.
    fn write32_be(&self, offset: usize, value: u32) {
        self.write32(offset, value.to_be())
    }
    /// Big-endian 64-bit register write (one access), e.g. an mlx5 UAR doorbell.
    fn write64_be(&self, offset: usize, value: u64) {
        self.write64(offset, value.to_be())
    }
}

/// The platform a driver runs on.
pub trait Hal {
    /// A DMA region owned by the driver.
    type Dma: DmaRegion;
    /// Allocate `size` bytes of zeroed, physically contiguous DMA memory aligned to `align`
    /// (a power of two; at least 4096 is always honoured).
    fn dma_alloc(&self, size: usize, align: usize) -> Result<Self::Dma, HalError>;
    /// Monotonic time in nanoseconds since an arbitrary origin.
    fn now_ns(&self) -> u64;
    /// Copy all of `src` to the start of `dst` (they may overlap). Returns false, copying
    /// nothing, if `dst` is shorter than `src`, the platform cannot (the default), or either
    /// slice is not (any longer) DMA memory this platform handed out. Used by memory-backed
    /// block devices to move data between an I/O buffer and their backing store.
    fn copy_dma(&self, dst: DmaSlice, src: DmaSlice) -> bool {
        let _ = (dst, src);
        false
    }
    /// Called in every busy-wait iteration (a `pause` on hardware; the host model may use
    /// it to advance simulated time or run the device).
    fn relax(&self) {}
}

/// Busy-wait until `done()` is true or `timeout_ns` passes. Returns whether it became true.
pub fn poll_until<H: Hal + ?Sized>(hal: &H, timeout_ns: u64, mut done: impl FnMut() -> bool) -> bool {
    let start = hal.now_ns();
    loop {
        if done() {
            return true;
        }
        if hal.now_ns().wrapping_sub(start) >= timeout_ns {
            return done();
        }
        hal.relax();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Region(PhysAddr, usize);
    impl DmaRegion for Region {
        fn paddr(&self) -> PhysAddr {
            self.0
        }
        fn len(&self) -> usize {
            self.1
        }
        fn read(&self, _: usize, _: &mut [u8]) {}
        fn write(&self, _: usize, _: &[u8]) {}
    }

    #[test]
    fn slices_stay_inside_their_region() {
        let r = Region(0x10_000, 8192);
        let s = DmaSlice::new(&r, 4096, 4096).unwrap();
        assert_eq!((s.paddr(), s.len(), s.end()), (0x11_000, 4096, 0x12_000));
        assert_eq!(DmaSlice::new(&r, 4097, 4096), None, "one byte past the end");
        assert_eq!(DmaSlice::new(&r, usize::MAX, 2), None, "offset + len overflows");
        assert_eq!(DmaSlice::new(&r, 8192, 0).map(|s| s.len()), Some(0));
        assert_eq!(s.sub(512, 3584).map(|t| t.paddr()), Some(0x11_200));
        assert_eq!(s.sub(512, 3585), None);
        assert_eq!((s.prefix(100).paddr(), s.prefix(100).len(), s.prefix(5000).len()), (0x11_000, 100, 4096));
        assert_eq!(DmaSlice::whole(&r).offset_of(&s), Some(4096));
        assert_eq!(s.offset_of(&DmaSlice::whole(&r)), None);
        assert!(DmaSlice::EMPTY.is_empty());
    }
}
