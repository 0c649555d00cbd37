//! blockdev backing: the one namespace-backing type a target serves (memory, null, or a local
//! store such as an NVMe namespace) and the one description of a backing to build.
//!
//! Enum dispatch (no allocation or indirect call per I/O). The memory and null stores are
//! boxed: a RAM namespace carries an 8 KiB completion ring and these values move through
//! set-up code on small boot stacks; a pointer keeps every move small.

use alloc::boxed::Box;

use hal::{DmaSlice, Hal, HalError};

use crate::{BlockDevice, BlockDone, BlockError, BlockIo, BlockOp, DevCounters, NsIdentity, NullNamespace, RamNamespace};

/// A backing to build, as a command line or configuration file names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NsSpec {
    /// `bytes` of DMA memory as blocks of `block_size`.
    Ram { bytes: u64, block_size: u32 },
    /// `bytes / block_size` blocks that hold no data (reads return zeros).
    Null { bytes: u64, block_size: u32 },
    /// A local NVMe namespace: namespace `nsid` of controller `ctrl` (in PCI order), or of
    /// the first controller that has one not yet in use when `ctrl` is `None`.
    Nvme { ctrl: Option<usize>, nsid: u32 },
}

/// A store that does not exist: the `L` of [`Backing`] where no local drive can be served
/// (host runners).
#[derive(Debug)]
pub enum NoLocal {}

/// A namespace's backing store: memory, null, or a local store `L`.
pub enum Backing<H: Hal, L> {
    Ram(Box<RamNamespace<H>>),
    Null(Box<NullNamespace>),
    Local(Box<L>),
}

impl<H: Hal, L> Backing<H, L> {
    /// Build a memory or null backing from `spec`; a local one comes from `local(ctrl, nsid)`
    /// (the embedding knows its drives).
    pub fn build(spec: &NsSpec, hal: H, local: impl FnOnce(Option<usize>, u32) -> Result<Box<L>, &'static str>) -> Result<Self, &'static str> {
        match *spec {
            NsSpec::Ram { bytes, block_size } => RamNamespace::new(hal, bytes, block_size)
                .map(|r| Backing::Ram(Box::new(r)))
                .map_err(|e: HalError| {
                    log::error!("blockdev: RAM namespace of {bytes} B (block size {block_size}): {e}");
                    "RAM namespace: not enough DMA memory"
                }),
            NsSpec::Null { bytes, block_size } => Ok(Backing::Null(Box::new(NullNamespace::new(bytes / block_size as u64, block_size)))),
            NsSpec::Nvme { ctrl, nsid } => local(ctrl, nsid).map(Backing::Local),
        }
    }

    /// The local store, if this is one.
    pub fn local(&self) -> Option<&L> {
        match self {
            Backing::Local(l) => Some(&**l),
            _ => None,
        }
    }
}

impl<H: Hal, L: BlockDevice> Backing<H, L> {
    /// The store behind the enum.
    pub fn as_dev(&self) -> &dyn BlockDevice {
        match self {
            Backing::Ram(r) => &**r,
            Backing::Null(n) => &**n,
            Backing::Local(l) => &**l,
        }
    }
}

/// `$body` with `$d` bound to the store behind `$self`, one arm per variant (a jump on the
/// tag and a direct call, no vtable).
macro_rules! on_store {
    ($self:expr, $d:ident => $body:expr) => {
        match $self {
            Backing::Ram($d) => $body,
            Backing::Null($d) => $body,
            Backing::Local($d) => $body,
        }
    };
}

/// Every method forwarded to the store. A method added to [`BlockDevice`] must be added
/// here too, or the store's answer is replaced by the default.
impl<H: Hal, L: BlockDevice> BlockDevice for Backing<H, L> {
    fn block_size(&self) -> u32 {
        on_store!(self, d => d.block_size())
    }
    fn num_blocks(&self) -> u64 {
        on_store!(self, d => d.num_blocks())
    }
    fn max_transfer_blocks(&self) -> u32 {
        on_store!(self, d => d.max_transfer_blocks())
    }
    fn submit(&mut self, io: &BlockIo) -> Result<(), BlockError> {
        on_store!(self, d => d.submit(io))
    }
    fn execute_direct(&mut self, io: &BlockIo) -> Option<Result<(), BlockError>> {
        on_store!(self, d => d.execute_direct(io))
    }
    fn poll(&mut self, out: &mut [BlockDone]) -> usize {
        on_store!(self, d => d.poll(out))
    }
    fn direct(&self, lba: u64, blocks: u32) -> Option<DmaSlice> {
        on_store!(self, d => d.direct(lba, blocks))
    }
    fn direct_region(&self) -> Option<DmaSlice> {
        on_store!(self, d => d.direct_region())
    }
    fn volatile_write_cache(&self) -> bool {
        on_store!(self, d => d.volatile_write_cache())
    }
    fn identity(&self) -> Option<NsIdentity> {
        on_store!(self, d => d.identity())
    }
    fn supports(&self, op: BlockOp) -> bool {
        on_store!(self, d => d.supports(op))
    }
    fn op_limits(&self) -> crate::OpLimits {
        on_store!(self, d => d.op_limits())
    }
    fn failed(&self) -> bool {
        on_store!(self, d => d.failed())
    }
    fn counters(&self) -> DevCounters {
        on_store!(self, d => d.counters())
    }
    /// A handle of the same kind: memory and null handles as their stores make them, a local
    /// store's as it answers (a local NVMe namespace: one with an I/O queue pair of its own).
    fn io_handle(&mut self) -> Result<Self, BlockError> {
        Ok(match self {
            Backing::Ram(r) => Backing::Ram(Box::new(r.io_handle()?)),
            Backing::Null(n) => Backing::Null(Box::new(n.io_handle()?)),
            Backing::Local(l) => Backing::Local(Box::new(l.io_handle()?)),
        })
    }
    fn device_queue(&self) -> Option<u16> {
        on_store!(self, d => d.device_queue())
    }
}

/// Never called: a [`NoLocal`] value cannot exist.
impl BlockDevice for NoLocal {
    fn block_size(&self) -> u32 {
        match *self {}
    }
    fn num_blocks(&self) -> u64 {
        match *self {}
    }
    fn max_transfer_blocks(&self) -> u32 {
        match *self {}
    }
    fn submit(&mut self, _: &BlockIo) -> Result<(), BlockError> {
        match *self {}
    }
    fn poll(&mut self, _: &mut [BlockDone]) -> usize {
        match *self {}
    }
}
