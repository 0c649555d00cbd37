//! blockdev mem: the RAM namespace (backed by one DMA region, so the NVMe-oF target can RDMA
//! straight to and from its blocks) and the null namespace (no data, completes at once).
//!
//! Zero-copy: [`RamNamespace::dma_range`] gives a block range as a slice of the namespace's
//! own region. An I/O whose buffer *is* that range moves no bytes (the RDMA already put the
//! data there or will take it from there). Any other buffer is copied with [`Hal::copy_dma`];
//! on a platform that cannot copy between DMA slices such I/Os are refused with
//! `Unsupported`, and callers that hold the buffer's region can use [`RamNamespace::copy_with`].
//!
//! I/O handles ([`BlockDevice::io_handle`]): a RAM namespace's handle is another `RamNamespace`
//! on the same memory and platform handle (shared through an `Arc`, taken once when the handle
//! is made, never per I/O) with its own completion ring and counters. The handles are the only writers of the blocks; commands
//! touching the same bytes through two handles are ordered by their caller, as the NVMe-oF
//! target already orders zero-copy transfers.

use alloc::sync::Arc;

use hal::{DmaRegion, DmaSlice, Hal, HalError, PhysAddr};

use crate::{check_io, BlockDevice, BlockDone, BlockError, BlockIo, BlockOp, DevCounters};

/// Completions not yet reported (fixed size: no allocation per I/O).
const RING: usize = 256;

struct DoneRing {
    items: [BlockDone; RING],
    head: usize,
    len: usize,
}

impl DoneRing {
    fn new() -> Self {
        DoneRing { items: [BlockDone { tag: 0, result: Ok(()) }; RING], head: 0, len: 0 }
    }
    fn push(&mut self, d: BlockDone) -> Result<(), BlockError> {
        if self.len == RING {
            return Err(BlockError::QueueFull);
        }
        self.items[(self.head + self.len) % RING] = d;
        self.len += 1;
        Ok(())
    }
    fn drain(&mut self, out: &mut [BlockDone]) -> usize {
        let n = core::cmp::min(out.len(), self.len);
        for o in out.iter_mut().take(n) {
            *o = self.items[self.head];
            self.head = (self.head + 1) % RING;
        }
        self.len -= n;
        n
    }
}

/// Largest I/O the memory namespaces accept, in bytes.
pub const MEM_MAX_TRANSFER: usize = 1 << 20;

/// What a RAM namespace's handles share: the platform (its DMA copy) and the blocks.
struct Shared<H: Hal> {
    hal: H,
    mem: H::Dma,
}

/// A namespace in DMA memory (or one I/O handle of it: see [`BlockDevice::io_handle`]).
pub struct RamNamespace<H: Hal> {
    /// The platform and the blocks, shared with the namespace's other handles.
    shared: Arc<Shared<H>>,
    /// All of `mem`, made once with it: block ranges are cut from it (no region call per I/O).
    whole: DmaSlice,
    block_size: u32,
    blocks: u64,
    done: DoneRing,
    /// I/Os served without moving data (buffer was the block range itself).
    pub zero_copy: u64,
    /// I/Os that copied data.
    pub copied: u64,
    /// Bytes the CPU copied between the blocks and I/O buffers (a RAM "device" has no DMA
    /// engine: its transfers are CPU copies).
    pub copied_bytes: u64,
}

impl<H: Hal> RamNamespace<H> {
    /// `bytes` of zeroed DMA memory as `bytes / block_size` blocks.
    pub fn new(hal: H, bytes: u64, block_size: u32) -> Result<Self, HalError> {
        let blocks = bytes / block_size as u64;
        let mem = hal.dma_alloc((blocks * block_size as u64) as usize, 4096)?;
        let whole = DmaSlice::whole(&mem);
        Ok(RamNamespace { shared: Arc::new(Shared { hal, mem }), whole, block_size, blocks, done: DoneRing::new(), zero_copy: 0, copied: 0, copied_bytes: 0 })
    }

    /// Physical address of block `lba` (no range check: see [`dma_range`](Self::dma_range)).
    pub fn paddr_of(&self, lba: u64) -> PhysAddr {
        self.whole.paddr() + lba * self.block_size as u64
    }

    /// Blocks `[lba, lba+blocks)` as a slice of the namespace's region, for RDMA straight to
    /// or from the namespace; `None` if the range is empty or not inside it.
    #[inline]
    pub fn dma_range(&self, lba: u64, blocks: u32) -> Option<DmaSlice> {
        if blocks == 0 || lba >= self.blocks {
            return None;
        }
        // lba < blocks: lba × block size is inside the region, so it fits a usize.
        let bs = self.block_size as usize;
        self.whole.sub(lba as usize * bs, blocks as usize * bs)
    }

    /// The backing region (e.g. to register it for RDMA once).
    pub fn region(&self) -> &H::Dma {
        &self.shared.mem
    }

    /// Handles on this namespace's memory alive now, this one included.
    pub fn handles(&self) -> usize {
        Arc::strong_count(&self.shared)
    }

    fn copy_in_region(&self, dst: usize, src: usize, len: usize) {
        let mut chunk = [0u8; 512];
        let mut done = 0;
        while done < len {
            let n = core::cmp::min(512, len - done);
            self.shared.mem.read(src + done, &mut chunk[..n]);
            self.shared.mem.write(dst + done, &chunk[..n]);
            done += n;
        }
    }

    /// Synchronous transfer between blocks and `buf[off..]` of a region the caller holds.
    pub fn copy_with(&mut self, op: BlockOp, lba: u64, blocks: u32, buf: &impl DmaRegion, off: usize) -> Result<(), BlockError> {
        let whole = DmaSlice::new(buf, off, buf.len().saturating_sub(off)).unwrap_or(DmaSlice::EMPTY);
        let io = BlockIo { op, lba, blocks, buf: whole, tag: 0, fua: false };
        check_io(&io, self.block_size, self.blocks, self.max_transfer_blocks())?;
        let base = (lba * self.block_size as u64) as usize;
        let len = blocks as usize * self.block_size as usize;
        let mut chunk = [0u8; 512];
        let mut done = 0;
        while done < len {
            let n = core::cmp::min(512, len - done);
            match op {
                BlockOp::Read => {
                    self.shared.mem.read(base + done, &mut chunk[..n]);
                    buf.write(off + done, &chunk[..n]);
                }
                BlockOp::Write => {
                    buf.read(off + done, &mut chunk[..n]);
                    self.shared.mem.write(base + done, &chunk[..n]);
                }
                _ => return Err(BlockError::Unsupported),
            }
            done += n;
        }
        self.copied += 1;
        self.copied_bytes += len as u64;
        Ok(())
    }

    fn execute(&mut self, io: &BlockIo) -> Result<(), BlockError> {
        check_io(io, self.block_size, self.blocks, self.max_transfer_blocks())?;
        let base = (io.lba * self.block_size as u64) as usize;
        let len = io.blocks as usize * self.block_size as usize;
        match io.op {
            BlockOp::Flush => {}
            BlockOp::Compare => return Err(BlockError::Unsupported),
            BlockOp::WriteZeroes | BlockOp::Deallocate => self.shared.mem.fill(base, len, 0),
            BlockOp::Read | BlockOp::Write => {
                // The buffer is the blocks themselves (check_io: it spans at least `len`).
                if io.buf.paddr() == self.paddr_of(io.lba) {
                    self.zero_copy += 1;
                    return Ok(());
                }
                let blocks = self.whole.sub(base, len).ok_or(BlockError::OutOfRange { lba: io.lba, blocks: io.blocks, capacity: self.blocks })?;
                let buf = io.buf.prefix(len); // check_io: the buffer spans at least `len`
                let (dst, src) = if io.op == BlockOp::Read { (buf, blocks) } else { (blocks, buf) };
                if self.shared.hal.copy_dma(dst, src) {
                    self.copied += 1;
                    self.copied_bytes += len as u64;
                    return Ok(());
                }
                // No platform copy: a buffer inside the namespace's own region still works.
                if let Some(b) = self.whole.offset_of(&buf) {
                    if io.op == BlockOp::Read {
                        self.copy_in_region(b, base, len);
                    } else {
                        self.copy_in_region(base, b, len);
                    }
                    self.copied += 1;
                    self.copied_bytes += len as u64;
                } else {
                    return Err(BlockError::Unsupported);
                }
            }
        }
        Ok(())
    }
}

impl<H: Hal> BlockDevice for RamNamespace<H> {
    fn block_size(&self) -> u32 {
        self.block_size
    }
    fn num_blocks(&self) -> u64 {
        self.blocks
    }
    fn max_transfer_blocks(&self) -> u32 {
        (MEM_MAX_TRANSFER / self.block_size as usize) as u32
    }
    fn submit(&mut self, io: &BlockIo) -> Result<(), BlockError> {
        if self.done.len == RING {
            return Err(BlockError::QueueFull);
        }
        self.execute(io)?;
        self.done.push(BlockDone { tag: io.tag, result: Ok(()) })
    }
    fn poll(&mut self, out: &mut [BlockDone]) -> usize {
        self.done.drain(out)
    }
    /// Any I/O of a RAM namespace is done when `execute` returns; one whose buffer is the
    /// blocks themselves moves nothing.
    #[inline]
    fn execute_direct(&mut self, io: &BlockIo) -> Option<Result<(), BlockError>> {
        Some(self.execute(io))
    }
    fn direct(&self, lba: u64, blocks: u32) -> Option<DmaSlice> {
        self.dma_range(lba, blocks)
    }
    fn direct_region(&self) -> Option<DmaSlice> {
        Some(self.whole)
    }
    /// This store's (or handle's) own copy counters.
    fn counters(&self) -> DevCounters {
        DevCounters { zero_copy: self.zero_copy, copied: self.copied, copied_bytes: self.copied_bytes, ..DevCounters::default() }
    }
    /// A `RamNamespace` on the same blocks and platform with its own completion ring and
    /// counters.
    fn io_handle(&mut self) -> Result<Self, BlockError> {
        Ok(RamNamespace {
            shared: Arc::clone(&self.shared),
            whole: self.whole,
            block_size: self.block_size,
            blocks: self.blocks,
            done: DoneRing::new(),
            zero_copy: 0,
            copied: 0,
            copied_bytes: 0,
        })
    }
}

/// A namespace with no data: every valid I/O completes at once (reads leave the buffer as
/// it was). For latency work on the network path.
pub struct NullNamespace {
    block_size: u32,
    blocks: u64,
    done: DoneRing,
}

impl NullNamespace {
    pub fn new(blocks: u64, block_size: u32) -> Self {
        NullNamespace { block_size, blocks, done: DoneRing::new() }
    }
}

impl BlockDevice for NullNamespace {
    fn block_size(&self) -> u32 {
        self.block_size
    }
    fn num_blocks(&self) -> u64 {
        self.blocks
    }
    fn max_transfer_blocks(&self) -> u32 {
        (MEM_MAX_TRANSFER / self.block_size as usize) as u32
    }
    fn submit(&mut self, io: &BlockIo) -> Result<(), BlockError> {
        check_io(io, self.block_size, self.blocks, self.max_transfer_blocks())?;
        if io.op == BlockOp::Compare {
            return Err(BlockError::Unsupported); // no data to compare with
        }
        self.done.push(BlockDone { tag: io.tag, result: Ok(()) })
    }
    fn poll(&mut self, out: &mut [BlockDone]) -> usize {
        self.done.drain(out)
    }
    /// Another null namespace of the same size (no data to share).
    fn io_handle(&mut self) -> Result<Self, BlockError> {
        Ok(NullNamespace::new(self.blocks, self.block_size))
    }
}
