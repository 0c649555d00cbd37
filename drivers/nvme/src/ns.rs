//! nvme ns: an NVMe namespace with its own I/O queue pair, as a [`blockdev::BlockDevice`].
//!
//! Requests are checked (range, length, buffer size, alignment, supported op) before an
//! SQE is written; `submit` only queues, `poll` rings the SQ doorbell once for everything
//! queued since the last poll, then reaps completions. An I/O queue that makes no progress
//! for `io_timeout_ns` means the controller stopped answering: it is stopped
//! ([`Controller::fail_stop`]: CC.EN = 0, so no late DMA into buffers handed back), the
//! outstanding commands of every namespace on it complete with `Timeout` and later submits
//! are refused with `Timeout`.
//!
//! Namespaces with metadata: separate metadata without protection information is served
//! with two per-namespace metadata buffers sized for the largest transfer, allocated once:
//! writes store zeros as metadata (MPTR at a zeroed buffer the device only reads), reads
//! deliver metadata into a discard buffer (shared by all commands: its contents are never
//! looked at). Protection information (types 1-3) is served with PRACT = 1: the controller
//! generates the PI on writes (reference tag = LBA for types 1/2), checks the guard on reads
//! and strips it: with 8-byte PI-only metadata (extended or separate) nothing but data
//! is transferred; PI inside larger separate metadata uses the buffers above as well.
//! Extended LBA other than 8-byte PI (metadata interleaved in the caller's data buffer) is
//! refused by [`NvmeNamespace::new`] with [`Error::MetadataUnsupported`].
//!
//! I/O handles (`BlockDevice::io_handle`, one per poller, SPDK's io_channel): a handle is
//! another `NvmeNamespace` on the same namespace with an I/O queue pair of its own, made on
//! the slow path (Create I/O CQ + SQ through the shared controller) with its own PRP pages,
//! metadata buffers, Flush joining and counters; pollers share nothing per I/O. Bounded by
//! the queues the controller granted: with none left the answer is `Unsupported` (that
//! poller stays on the store). A namespace or handle that is dropped gives its queue pair
//! back ([`Controller::delete_io_queue_pair`]). A stopped controller fails every handle.

use blockdev::{check_io_limits, BlockDevice, BlockDone, BlockError, BlockIo, BlockOp, DevCounters, NsIdentity, OpLimits};
use hal::{DmaRegion, Hal, Mmio};
use zerocopy::IntoBytes;

use crate::ctrl::{Controller, MetadataLayout, NamespaceInfo};
use crate::flush::FlushJoin;
use crate::prp::PrpError;
use crate::queue::{QueueError, QueuePair, QueueStats};
use crate::spec::{io_op, oncs, rw_cdw12, DataPointer, DsmRange, Sqe};
use crate::Error;

/// How many empty polls between two looks at the clock.
const TIMEOUT_CHECK_EVERY: u32 = 64;

/// How a namespace's metadata is handled on Read / Write / Write Zeroes.
struct Meta<D> {
    /// PRINFO.PRACT = 1: the controller generates the protection information on writes
    /// and strips (8-byte metadata) or passes it (larger metadata) on reads.
    pract: bool,
    /// Separate metadata buffers: MPTR at the first (zeros) for writes, at the second
    /// (discard) for reads. None when no metadata is transferred.
    bufs: Option<(D, D)>,
}

/// One namespace, one queue pair.
pub struct NvmeNamespace<'c, H: Hal, M: Mmio> {
    ctrl: &'c Controller<H, M>,
    info: NamespaceInfo,
    q: QueuePair<H::Dma>,
    meta: Meta<H::Dma>,
    max_blocks: u32,
    oncs: u16,
    dead: bool,
    empty_polls: u32,
    last_progress_ns: u64,
    /// I/Os refused by argument checks (never reached the device).
    pub refused: u64,
    /// I/Os that completed with an NVMe error status.
    pub device_errors: u64,
    /// Flushes sharing one drive Flush.
    flush: FlushJoin,
}

impl<'c, H: Hal, M: Mmio> NvmeNamespace<'c, H, M> {
    /// Wrap a namespace and a queue pair created on `ctrl` (the namespace owns it from now
    /// on: it is given back when the namespace is dropped, or at once on a refusal). Refuses
    /// metadata formats this driver cannot serve (see the module notes) with
    /// [`Error::MetadataUnsupported`].
    pub fn new(ctrl: &'c Controller<H, M>, info: NamespaceInfo, q: QueuePair<H::Dma>) -> Result<Self, Error> {
        match Self::meta_for(ctrl, &info, &q) {
            Ok((meta, max_blocks)) => Ok(NvmeNamespace {
                ctrl,
                info,
                q,
                meta,
                max_blocks,
                oncs: ctrl.info().oncs,
                dead: false,
                empty_polls: 0,
                last_progress_ns: 0,
                refused: 0,
                device_errors: 0,
                flush: FlushJoin::default(),
            }),
            Err(e) => {
                let _ = ctrl.delete_io_queue_pair(&q);
                Err(e)
            }
        }
    }

    /// The metadata handling and largest transfer (blocks) of namespace `info` on queue `q`.
    fn meta_for(ctrl: &Controller<H, M>, info: &NamespaceInfo, q: &QueuePair<H::Dma>) -> Result<(Meta<H::Dma>, u32), Error> {
        // The queue's list pages bound the transfer (sized from the controller's maximum);
        // NLB is 16 bits, 0's based: at most 65536 blocks per command.
        let max_bytes = core::cmp::min(ctrl.max_transfer_bytes(), q.max_transfer_bytes());
        let max_blocks = core::cmp::min(max_bytes / info.block_size as usize, 1 << 16) as u32;
        let ms = info.metadata_size;
        let refuse = Error::MetadataUnsupported { nsid: info.nsid, ms, layout: info.metadata, pi_type: info.pi_type };
        let (pract, separate) = match (ms, info.pi_type, info.metadata) {
            (0, 0, _) => (false, false),
            // PI-only metadata: with PRACT nothing but data is transferred (either layout).
            (8, 1..=3, _) => (true, false),
            (1.., 0, MetadataLayout::Separate) => (false, true),
            // PI inside larger separate metadata: PRACT, and the metadata buffers.
            (9.., 1..=3, MetadataLayout::Separate) => (true, true),
            _ => return Err(refuse),
        };
        let bufs = if separate {
            let len = max_blocks as usize * ms as usize;
            let zeros = ctrl.hal.dma_alloc(len, 4096)?;
            zeros.fill(0, len, 0);
            Some((zeros, ctrl.hal.dma_alloc(len, 4096)?))
        } else {
            None
        };
        Ok((Meta { pract, bufs }, max_blocks))
    }

    pub fn info(&self) -> &NamespaceInfo {
        &self.info
    }
    pub fn queue_stats(&self) -> QueueStats {
        self.q.stats
    }
    /// Commands at the drive plus Flushes waiting on another's drive Flush.
    pub fn outstanding(&self) -> usize {
        self.q.outstanding() + self.flush.pending()
    }
    /// Write Zeroes: the drive's WZSL (2^WZSL 4 KiB pages; not bound by MDTS), else what
    /// one command's 16-bit NLB holds. Deallocate (one range per command): the smaller of
    /// the drive's DMRSL and DMSL, else what a range's 32-bit NLB holds.
    pub fn op_limits(&self) -> OpLimits {
        let l = self.ctrl.info().nvm_limits;
        let bs = self.info.block_size as u64;
        let nlb16 = 1u64 << 16;
        let wz = if l.wzsl == 0 { nlb16 } else { ((4096u64 << l.wzsl.min(40)) / bs).clamp(1, nlb16) };
        let mut dealloc = u32::MAX as u64;
        if l.dmrsl != 0 {
            dealloc = dealloc.min(l.dmrsl as u64);
        }
        if l.dmsl != 0 {
            dealloc = dealloc.min(l.dmsl);
        }
        OpLimits { write_zeroes_blocks: wz as u32, deallocate_blocks: dealloc as u32 }
    }

    pub fn supports(&self, op: BlockOp) -> bool {
        match op {
            BlockOp::WriteZeroes => self.oncs & oncs::WRITE_ZEROES != 0,
            BlockOp::Deallocate => self.oncs & oncs::DSM != 0,
            // Served on formats without metadata only (the drive would compare the
            // driver's placeholder metadata or PI too).
            BlockOp::Compare => self.oncs & oncs::COMPARE != 0 && !self.meta.pract && self.meta.bufs.is_none(),
            _ => true,
        }
    }

    /// CDW14 (ILBRT) for PI the controller generates: PI types 1 and 2 carry the low 32 bits
    /// of the LBA as reference tag (NVM Command Set spec, end-to-end data protection), so another host reading with
    /// reference-tag checks finds them right. Type 3 has no reference tag. Reads ask the
    /// controller to check the guard only: the reference tag of a block never written need
    /// not match its LBA (an all-zero block with all-zero PI has a valid guard).
    fn initial_ref_tag(&self, slba: u64) -> u32 {
        if matches!(self.info.pi_type, 1 | 2) {
            slba as u32
        } else {
            0
        }
    }

    fn build(&mut self, io: &BlockIo) -> Result<(), BlockError> {
        if self.dead || self.ctrl.is_failed() {
            return Err(BlockError::Timeout);
        }
        check_io_limits(io, self.info.block_size, self.info.blocks, self.max_blocks, self.op_limits())?;
        if !self.supports(io.op) {
            return Err(BlockError::Unsupported);
        }
        let nsid = self.info.nsid.into();
        let slba = io.lba;
        let nlb0 = io.blocks.wrapping_sub(1) & 0xFFFF;
        let mut sqe = Sqe { nsid, ..Default::default() };
        let mut data = None;
        match io.op {
            BlockOp::Read | BlockOp::Write | BlockOp::Compare => {
                sqe.opcode = match io.op {
                    BlockOp::Read => io_op::READ,
                    BlockOp::Write => io_op::WRITE,
                    _ => io_op::COMPARE,
                };
                sqe.cdw10 = (slba as u32).into();
                sqe.cdw11 = ((slba >> 32) as u32).into();
                let fua = if io.fua { rw_cdw12::FUA } else { 0 };
                sqe.cdw12 = (nlb0 | fua).into();
                // check_io: the buffer spans at least this; the PRPs describe exactly that.
                data = Some(io.buf.prefix(io.blocks as usize * self.info.block_size as usize));
                if self.meta.pract {
                    // Reads have the controller check the guard before it strips the PI.
                    let chk = if io.op == BlockOp::Read { rw_cdw12::PRCHK_GUARD } else { 0 };
                    sqe.cdw12 = (nlb0 | fua | rw_cdw12::PRACT | chk).into();
                    sqe.cdw14 = self.initial_ref_tag(slba).into();
                }
                if let Some((zeros, discard)) = &self.meta.bufs {
                    let m = if io.op == BlockOp::Read { discard } else { zeros };
                    sqe.mptr = m.paddr().into();
                }
            }
            BlockOp::Flush => sqe.opcode = io_op::FLUSH,
            BlockOp::WriteZeroes => {
                sqe.opcode = io_op::WRITE_ZEROES;
                sqe.cdw10 = (slba as u32).into();
                sqe.cdw11 = ((slba >> 32) as u32).into();
                if self.meta.pract {
                    sqe.cdw12 = (nlb0 | rw_cdw12::PRACT).into();
                    sqe.cdw14 = self.initial_ref_tag(slba).into();
                } else {
                    sqe.cdw12 = nlb0.into();
                }
            }
            BlockOp::Deallocate => {
                let cid = self.q.peek_cid().ok_or(BlockError::QueueFull)?;
                let range = DsmRange { cattr: 0.into(), nlb: io.blocks.into(), slba: slba.into() };
                self.q.write_slot_page(cid, range.as_bytes());
                sqe.opcode = io_op::DSM;
                sqe.dptr = DataPointer::prp(self.q.slot_page(cid).0, sqe.dptr.prp2());
                sqe.cdw10 = 0.into(); // NR = 0: one range
                sqe.cdw11 = (1u32 << 2).into(); // AD: deallocate
            }
        }
        if self.q.outstanding() == 0 {
            self.last_progress_ns = self.ctrl.hal.now_ns();
        }
        match self.q.push(&mut sqe, io.tag, data) {
            Ok(_) => Ok(()),
            Err(QueueError::Full) => Err(BlockError::QueueFull),
            Err(QueueError::Prp(PrpError::TooManyPages { .. })) => {
                Err(BlockError::TooLarge { blocks: io.blocks, max: self.max_blocks })
            }
            Err(QueueError::Prp(_)) => Err(BlockError::Unsupported),
        }
    }
}

/// The queue pair goes back to the controller (Delete I/O SQ and CQ).
impl<H: Hal, M: Mmio> Drop for NvmeNamespace<'_, H, M> {
    fn drop(&mut self) {
        if let Err(e) = self.ctrl.delete_io_queue_pair(&self.q) {
            log::warn!("nvme: nsid {} queue {}: not deleted ({e}); its queue ID stays in use", self.info.nsid, self.q.qid);
        }
    }
}

impl<H: Hal, M: Mmio> BlockDevice for NvmeNamespace<'_, H, M> {
    fn block_size(&self) -> u32 {
        self.info.block_size
    }
    fn num_blocks(&self) -> u64 {
        self.info.blocks
    }
    fn max_transfer_blocks(&self) -> u32 {
        self.max_blocks
    }

    /// The drive's cache is volatile when present and enabled (Identify Controller VWC,
    /// Get Features Volatile Write Cache).
    fn volatile_write_cache(&self) -> bool {
        let i = self.ctrl.info();
        i.vwc && i.wce
    }

    /// The drive's Identify Namespace values; an all-zero NGUID is replaced by one derived
    /// from the drive's model, serial and the NSID (stable across boots).
    fn identity(&self) -> Option<NsIdentity> {
        let mut id = self.info.identity;
        if id.nguid == [0; 16] {
            let c = self.ctrl.info();
            let mut name = [0u8; 61];
            let (m, s) = (c.model().as_bytes(), c.serial().as_bytes());
            name[..m.len()].copy_from_slice(m);
            name[m.len() + 1..m.len() + 1 + s.len()].copy_from_slice(s);
            id.nguid = blockdev::derive_guid(&name[..m.len() + 1 + s.len()], self.info.nsid);
        }
        Some(id)
    }

    fn supports(&self, op: BlockOp) -> bool {
        NvmeNamespace::supports(self, op)
    }

    fn op_limits(&self) -> OpLimits {
        NvmeNamespace::op_limits(self)
    }

    /// The controller stopped answering and was stopped ([`Controller::fail_stop`]).
    fn failed(&self) -> bool {
        self.dead || self.ctrl.is_failed()
    }

    /// Another value on this namespace with a queue pair of its own, as deep as this one's
    /// (see the module notes): `Unsupported` when the controller has no I/O queue left,
    /// `Timeout` when it was stopped, `Device` when it refused the queue.
    fn io_handle(&mut self) -> Result<Self, BlockError> {
        if BlockDevice::failed(self) {
            return Err(BlockError::Timeout);
        }
        let q = self.ctrl.create_io_queue_pair(self.q.depth()).map_err(|e| {
            log::warn!("nvme: nsid {}: no I/O queue pair for another handle ({e}): that poller stays on the namespace's queue", self.info.nsid);
            match e {
                Error::Status { status, .. } => BlockError::Device { sct: status.sct, sc: status.sc, dnr: status.dnr },
                Error::Timeout { .. } => BlockError::Timeout,
                _ => BlockError::Unsupported,
            }
        })?;
        NvmeNamespace::new(self.ctrl, self.info, q).map_err(|_| BlockError::Unsupported)
    }

    /// This value's own I/O queue pair's queue ID.
    fn device_queue(&self) -> Option<u16> {
        Some(self.q.qid)
    }

    fn counters(&self) -> DevCounters {
        let q = self.q.stats;
        DevCounters {
            flushes_issued: q.flushes_submitted,
            flushes_completed: q.flushes_completed,
            flushes_joined: self.flush.joined,
            device_errors: self.device_errors,
            ..DevCounters::default()
        }
    }

    fn submit(&mut self, io: &BlockIo) -> Result<(), BlockError> {
        let flush = io.op == BlockOp::Flush;
        if flush && !self.dead && !self.ctrl.is_failed() && self.flush.try_join(io.tag) {
            return Ok(());
        }
        let r = self.build(io);
        match r {
            Ok(()) if flush => self.flush.queued(io.tag),
            Ok(()) => {}
            Err(_) => self.refused += 1,
        }
        r
    }

    fn poll(&mut self, out: &mut [BlockDone]) -> usize {
        // Joined Flushes completed earlier first; then the doorbell (the open Flush is the
        // drive's from here: nothing joins it any more), then the drive's completions.
        let mut n = self.flush.drain(out);
        self.q.ring(&self.ctrl.mmio);
        self.flush.rung();
        let mut errs = 0;
        let flush = &mut self.flush;
        let reaped_from = n;
        self.q.reap(&self.ctrl.mmio, out.len() - n, |tag, _dw0, st| {
            let result = match st {
                None => Ok(()),
                Some(s) => {
                    errs += 1;
                    Err(BlockError::Device { sct: s.sct, sc: s.sc, dnr: s.dnr })
                }
            };
            out[n] = BlockDone { tag, result };
            flush.completed(tag, result);
            n += 1;
        });
        self.device_errors += errs;
        let reaped = n - reaped_from;
        n += self.flush.drain(&mut out[n..]);
        if reaped > 0 {
            self.empty_polls = 0;
            if self.q.outstanding() > 0 {
                self.last_progress_ns = self.ctrl.hal.now_ns();
            }
            return n;
        }
        if self.q.outstanding() == 0 {
            return n;
        }
        self.empty_polls += 1;
        if self.ctrl.is_failed() {
            // Another queue found the controller dead and stopped it: nothing will complete.
            self.dead = true;
        } else if self.empty_polls % TIMEOUT_CHECK_EVERY == 0
            && self.ctrl.hal.now_ns().wrapping_sub(self.last_progress_ns) > self.ctrl.cfg.io_timeout_ns
        {
            log::error!("nvme: nsid {} queue {}: no completion for {} ms, controller not answering; stopping it, failing I/O",
                self.info.nsid, self.q.qid, self.ctrl.cfg.io_timeout_ns / 1_000_000);
            self.ctrl.fail_stop();
            self.dead = true;
        }
        if self.dead {
            let flush = &mut self.flush;
            self.q.abandon(out.len() - n, |tag| {
                out[n] = BlockDone { tag, result: Err(BlockError::Timeout) };
                flush.completed(tag, Err(BlockError::Timeout));
                n += 1;
            });
            n += self.flush.drain(&mut out[n..]);
        }
        n
    }
}
