//! The block interface: poll-first, zero-copy (the I/O buffer is a DMA buffer, by physical address).
//!
//! A backing store (local NVMe namespace, RAM, null) implements [`BlockDevice`]. `submit`
//! validates and queues an I/O and returns at once; `poll` reports finished I/Os. Requests
//! that are wrong (beyond the end, zero length, buffer too small) are refused by `submit`
//! with a [`BlockError`] and never reach the device.
#![no_std]
#![forbid(unsafe_code)]

mod mem;
pub use mem::{NullNamespace, RamNamespace, MEM_MAX_TRANSFER};

use hal::PhysAddr;

/// What an I/O does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockOp {
    Read,
    Write,
    Flush,
    WriteZeroes,
    /// Deallocate (TRIM) the range.
    Deallocate,
}

/// One I/O. `buf`/`buf_len` describe a physically contiguous DMA buffer (unused by
/// Flush / WriteZeroes / Deallocate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockIo {
    pub op: BlockOp,
    pub lba: u64,
    pub blocks: u32,
    pub buf: PhysAddr,
    pub buf_len: usize,
    /// Caller's tag, echoed in the completion.
    pub tag: u64,
}

/// A finished I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockDone {
    pub tag: u64,
    pub result: Result<(), BlockError>,
}

/// Why an I/O was refused or failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockError {
    /// lba + blocks is past the end of the namespace.
    OutOfRange { lba: u64, blocks: u32, capacity: u64 },
    /// blocks == 0.
    ZeroLength,
    /// The buffer is smaller than blocks × block size.
    BufferTooSmall { need: usize, have: usize },
    /// More than the device's maximum transfer.
    TooLarge { blocks: u32, max: u32 },
    /// No free slot: poll and retry.
    QueueFull,
    /// The operation is not supported by this backing store.
    Unsupported,
    /// The device reported an NVMe status (status code type, status code).
    Device { sct: u8, sc: u8 },
    /// The device stopped answering.
    Timeout,
}

/// A namespace's backing store.
pub trait BlockDevice {
    /// Logical block size in bytes.
    fn block_size(&self) -> u32;
    /// Capacity in logical blocks.
    fn num_blocks(&self) -> u64;
    /// Largest I/O in blocks.
    fn max_transfer_blocks(&self) -> u32;
    /// Queue an I/O. Never blocks.
    fn submit(&mut self, io: &BlockIo) -> Result<(), BlockError>;
    /// Report up to `out.len()` finished I/Os; returns how many.
    fn poll(&mut self, out: &mut [BlockDone]) -> usize;
    /// Where blocks `[lba, lba+blocks)` sit in physically contiguous memory that an adapter
    /// may DMA directly (RDMA straight from/to the namespace), if this store is memory and
    /// the range is inside it. An I/O whose buffer is exactly this address moves no data.
    /// Default: `None` (the store needs a buffer).
    fn direct(&self, lba: u64, blocks: u32) -> Option<PhysAddr> {
        let _ = (lba, blocks);
        None
    }
    /// The whole directly addressable region (physical address, bytes), for registering it
    /// with an RDMA adapter once. Default: `None`.
    fn direct_region(&self) -> Option<(PhysAddr, u64)> {
        None
    }
}

/// Common argument checks every backing store applies before touching a device.
pub fn check_io(io: &BlockIo, block_size: u32, capacity: u64, max_blocks: u32) -> Result<(), BlockError> {
    match io.op {
        BlockOp::Flush => return Ok(()),
        _ if io.blocks == 0 => return Err(BlockError::ZeroLength),
        _ => {}
    }
    let end = io.lba.checked_add(io.blocks as u64);
    if end.map_or(true, |e| e > capacity) {
        return Err(BlockError::OutOfRange { lba: io.lba, blocks: io.blocks, capacity });
    }
    if io.blocks > max_blocks {
        return Err(BlockError::TooLarge { blocks: io.blocks, max: max_blocks });
    }
    if matches!(io.op, BlockOp::Read | BlockOp::Write) {
        let need = io.blocks as usize * block_size as usize;
        if io.buf_len < need {
            return Err(BlockError::BufferTooSmall { need, have: io.buf_len });
        }
    }
    Ok(())
}
