//! The block interface: poll-first, zero-copy (the I/O buffer is a bounded DMA slice, `hal::DmaSlice`).
//!
//! A backing store (local NVMe namespace, RAM, null) implements [`BlockDevice`]. `submit`
//! validates and queues an I/O and returns at once; `poll` reports finished I/Os. Requests
//! that are wrong (beyond the end, zero length, buffer too small) are refused by `submit`
//! with a [`BlockError`] and never reach the device.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

mod backing;
mod mem;
pub use backing::{Backing, NoLocal, NsSpec};
pub use mem::{NullNamespace, RamNamespace, MEM_MAX_TRANSFER};

use hal::DmaSlice;

/// What an I/O does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockOp {
    Read,
    Write,
    Flush,
    WriteZeroes,
    /// Deallocate (TRIM) the range.
    Deallocate,
    /// Compare the blocks with the buffer (the host's data): a mismatch completes with the
    /// store's Compare Failure status. Only stores that say so ([`BlockDevice::supports`]).
    Compare,
}

/// One I/O. `buf` is a physically contiguous DMA buffer (unused by Flush / WriteZeroes /
/// Deallocate, which pass [`DmaSlice::EMPTY`]; Compare reads it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockIo {
    pub op: BlockOp,
    pub lba: u64,
    pub blocks: u32,
    pub buf: DmaSlice,
    /// Caller's tag, echoed in the completion.
    pub tag: u64,
    /// Force Unit Access (Read / Write): the write is on non-volatile media before it
    /// completes; a read is served from non-volatile media. Stores without a volatile
    /// cache ignore it.
    pub fua: bool,
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
    /// The device reported an NVMe status (status code type, status code, Do Not Retry).
    Device { sct: u8, sc: u8, dnr: bool },
    /// The device stopped answering.
    Timeout,
}

/// What a namespace's store says about itself beyond size and block size, for Identify
/// Namespace (fields as the NVM Command Set's Identify Namespace names them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NsIdentity {
    /// Namespace Globally Unique Identifier; all zero when the store has none.
    pub nguid: [u8; 16],
    /// IEEE Extended Unique Identifier; all zero when the store has none.
    pub eui64: [u8; 8],
    /// Namespace Capacity and Utilization in blocks (thin provisioning).
    pub ncap: u64,
    pub nuse: u64,
    /// NSFEAT bits passed through: bit 0 thin provisioning, bit 4 NPWG..NOWS valid.
    pub nsfeat: u8,
    /// DLFEAT bits 2:0: what a deallocated block reads as (0 not reported, 1 zeros, 2 ones).
    pub dlfeat: u8,
    /// Optimal I/O boundary, preferred write granularity/alignment, preferred deallocate
    /// granularity/alignment, optimal write size (blocks, 0's based where the spec says so;
    /// passed through unchanged).
    pub noiob: u16,
    pub npwg: u16,
    pub npwa: u16,
    pub npdg: u16,
    pub npda: u16,
    pub nows: u16,
}

/// The most blocks one Write Zeroes and one Deallocate may cover on a store (a drive's NVM
/// command set limits: WZSL, and the smaller of DMRSL and DMSL for a one-range Dataset
/// Management; Read and Write are bound by [`BlockDevice::max_transfer_blocks`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpLimits {
    pub write_zeroes_blocks: u32,
    pub deallocate_blocks: u32,
}

/// Counters of a store's own work (slow path: reports and metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DevCounters {
    /// Flush commands issued to the device (its volatile cache written to media).
    pub flushes_issued: u64,
    /// Flush commands the device completed (successfully or not).
    pub flushes_completed: u64,
    /// Flushes answered by another Flush's device command (they arrived before it was
    /// handed to the device, so it covers them).
    pub flushes_joined: u64,
    /// I/Os that completed with a device error status.
    pub device_errors: u64,
    /// I/Os a memory store served without moving data (the buffer was the blocks themselves).
    /// Only what reached the store: a zero-copy keyed Write the adapter placed straight into
    /// namespace memory is answered by the NVMe-oF transport without a store call.
    pub zero_copy: u64,
    /// I/Os a memory store served by a CPU copy.
    pub copied: u64,
    /// Bytes a memory store's CPU copies moved.
    pub copied_bytes: u64,
}

impl DevCounters {
    /// These counts and `o`'s, summed (a store's with its I/O handles').
    pub fn plus(self, o: DevCounters) -> DevCounters {
        DevCounters {
            flushes_issued: self.flushes_issued + o.flushes_issued,
            flushes_completed: self.flushes_completed + o.flushes_completed,
            flushes_joined: self.flushes_joined + o.flushes_joined,
            device_errors: self.device_errors + o.device_errors,
            zero_copy: self.zero_copy + o.zero_copy,
            copied: self.copied + o.copied,
            copied_bytes: self.copied_bytes + o.copied_bytes,
        }
    }
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
    /// Carry out `io`, whose buffer is the store's own memory ([`direct`](Self::direct)), before
    /// returning, if the store can: `Some` with its result, and nothing for [`poll`](Self::poll)
    /// to report (a memory store moves no data for it, so there is nothing to wait for).
    /// `None`: the store did nothing; [`submit`](Self::submit) it. Default: `None`.
    fn execute_direct(&mut self, io: &BlockIo) -> Option<Result<(), BlockError>> {
        let _ = io;
        None
    }
    /// Where blocks `[lba, lba+blocks)` sit in physically contiguous memory that an adapter
    /// may DMA directly (RDMA straight from/to the namespace), if this store is memory and
    /// the range is inside it: a slice of the store's own region. An I/O whose buffer is
    /// exactly this slice moves no data. Default: `None` (the store needs a buffer).
    fn direct(&self, lba: u64, blocks: u32) -> Option<DmaSlice> {
        let _ = (lba, blocks);
        None
    }
    /// The whole directly addressable region, for registering it with an RDMA adapter once.
    /// Default: `None`.
    fn direct_region(&self) -> Option<DmaSlice> {
        None
    }
    /// Whether completed writes may sit in a volatile cache (lost at power failure until a
    /// Flush completes). Default: `false` (RAM, null: nothing survives power loss anyway,
    /// and Flush is a no-op).
    fn volatile_write_cache(&self) -> bool {
        false
    }
    /// Identity and layout hints from the device (a drive's Identify Namespace). Default:
    /// `None` (the target derives what it reports).
    fn identity(&self) -> Option<NsIdentity> {
        None
    }
    /// Whether the store carries out `op` (a drive may lack Write Zeroes or Dataset
    /// Management). Default: every op but Compare.
    fn supports(&self, op: BlockOp) -> bool {
        op != BlockOp::Compare
    }
    /// Limits on Write Zeroes and Deallocate. Default: the maximum transfer.
    fn op_limits(&self) -> OpLimits {
        let m = self.max_transfer_blocks();
        OpLimits { write_zeroes_blocks: m, deallocate_blocks: m }
    }
    /// Whether the store stopped working for good (its drive stopped answering and was
    /// stopped): every I/O fails from now on. Default: `false`.
    fn failed(&self) -> bool {
        false
    }
    /// The store's counters. Default: all zero.
    fn counters(&self) -> DevCounters {
        DevCounters::default()
    }
    /// A new I/O handle on the store's blocks for another poller (SPDK's io_channel), or why
    /// not: a value of the store's own type with its own submission and completion state and
    /// counters, on the same blocks as the store and its other handles, so pollers on
    /// different CPUs submit and reap without sharing anything per I/O (a handle is `Send`
    /// when the store's platform types are; the callers that move one to another CPU check).
    /// Made on the slow path (a poll group's creation), never per I/O. Default:
    /// `Err(Unsupported)`, the store serves through itself alone.
    ///
    /// A method of every store with a default answer, not a trait of its own that a user
    /// would have to require: a target generic over any `BlockDevice` asks each of its
    /// namespaces and keeps those that answer with an error on their one store. A local NVMe
    /// namespace (`nvme::NvmeNamespace`) makes a handle with an NVMe I/O queue pair of its
    /// own (Create I/O CQ + SQ through its shared controller, deleted when the handle drops),
    /// as many as the drive granted (Set Features Number of Queues); with none left it
    /// answers `Unsupported` (`cargo test -p nvme --test handles`).
    fn io_handle(&mut self) -> Result<Self, BlockError>
    where
        Self: Sized,
    {
        Err(BlockError::Unsupported)
    }

    /// The device queue this value submits on, for the log (slow path): a local NVMe
    /// namespace's I/O queue ID; `None` for a store without one (the default).
    fn device_queue(&self) -> Option<u16> {
        None
    }
}

/// A 128-bit identifier derived from a name and a number (stable across boots, never
/// zero): two FNV-1a 64 hashes of the name's bytes then the number's little-endian bytes,
/// with different offsets. For namespaces whose store reports no NGUID.
pub fn derive_guid(name: &[u8], id: u32) -> [u8; 16] {
    let h = |seed: u64| {
        let mut x = seed;
        for b in name.iter().copied().chain(id.to_le_bytes()) {
            x ^= b as u64;
            x = x.wrapping_mul(0x0000_0100_0000_01B3);
        }
        x
    };
    let mut g = [0u8; 16];
    g[..8].copy_from_slice(&h(0xcbf2_9ce4_8422_2325).to_be_bytes());
    g[8..].copy_from_slice(&h(0x6c62_272e_07bb_0142).to_be_bytes());
    if g == [0; 16] {
        g[15] = 1;
    }
    g
}

/// Common argument checks every backing store applies before touching a device; Write
/// Zeroes and Deallocate are bound by `max_blocks` too (see [`check_io_limits`]).
pub fn check_io(io: &BlockIo, block_size: u32, capacity: u64, max_blocks: u32) -> Result<(), BlockError> {
    check_io_limits(io, block_size, capacity, max_blocks, OpLimits { write_zeroes_blocks: max_blocks, deallocate_blocks: max_blocks })
}

/// [`check_io`] with Write Zeroes and Deallocate bound by `limits` instead of `max_blocks`.
pub fn check_io_limits(io: &BlockIo, block_size: u32, capacity: u64, max_blocks: u32, limits: OpLimits) -> Result<(), BlockError> {
    match io.op {
        BlockOp::Flush => return Ok(()),
        _ if io.blocks == 0 => return Err(BlockError::ZeroLength),
        _ => {}
    }
    let end = io.lba.checked_add(io.blocks as u64);
    if end.map_or(true, |e| e > capacity) {
        return Err(BlockError::OutOfRange { lba: io.lba, blocks: io.blocks, capacity });
    }
    let max = match io.op {
        BlockOp::WriteZeroes => limits.write_zeroes_blocks,
        BlockOp::Deallocate => limits.deallocate_blocks,
        _ => max_blocks,
    };
    if io.blocks > max {
        return Err(BlockError::TooLarge { blocks: io.blocks, max });
    }
    if matches!(io.op, BlockOp::Read | BlockOp::Write | BlockOp::Compare) {
        let need = io.blocks as usize * block_size as usize;
        if io.buf.len() < need {
            return Err(BlockError::BufferTooSmall { need, have: io.buf.len() });
        }
    }
    Ok(())
}
