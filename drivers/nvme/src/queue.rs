//! nvme queue: one submission/completion queue pair in DMA memory, with preallocated PRP
//! list pages per command slot (enough chained pages for the queue's largest transfer, so
//! nothing is allocated per I/O). Commands are written to the SQ without touching the device; `ring` writes
//! the tail doorbell once for everything queued since; `reap` consumes completions by phase
//! tag and writes the CQ head doorbell once.

use hal::{DmaRegion, DmaSlice, Hal, HalError, Mmio};
use zerocopy::IntoBytes;

use crate::prp::{self, PrpError};
use crate::regs::doorbell_offset;
use crate::ring::{CqRing, SqRing};
use crate::spec::{io_op, Cqe, DataPointer, Sqe, CQE_STATUS_OFFSET};
use crate::status::{Status, StatusField};

/// Most commands one queue pair tracks.
pub const MAX_DEPTH: usize = 256;
const SQE_SIZE: usize = 64;
const CQE_SIZE: usize = 16;

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    tag: u64,
    busy: bool,
    /// An NVM Flush (counted in [`QueueStats`] when it completes).
    flush: bool,
}

/// Why a command could not be queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueError {
    Full,
    Prp(PrpError),
}

/// Per-queue counters (no logging on the data path).
#[derive(Debug, Clone, Copy, Default)]
pub struct QueueStats {
    pub submitted: u64,
    pub completed: u64,
    pub sq_doorbells: u64,
    pub cq_doorbells: u64,
    /// Completions naming a command that is not outstanding (dropped).
    pub bogus_completions: u64,
    /// NVM Flush commands queued and completed (I/O queues only).
    pub flushes_submitted: u64,
    pub flushes_completed: u64,
}

/// A queue pair.
pub struct QueuePair<D: DmaRegion> {
    pub(crate) qid: u16,
    sq: D,
    cq: D,
    prp_lists: D,
    page: usize,
    /// List pages reserved per command slot (≥ 1; slot `cid` owns pages
    /// `cid × list_pages .. (cid+1) × list_pages`).
    list_pages: usize,
    sqr: SqRing,
    cqr: CqRing,
    slots: [Slot; MAX_DEPTH],
    free: [u16; MAX_DEPTH],
    nfree: usize,
    depth: u16,
    pending: bool,
    stride: usize,
    pub stats: QueueStats,
}

impl<D: DmaRegion> QueuePair<D> {
    /// Allocate a pair of `depth` entries (2..=MAX_DEPTH) for queue `qid`, with PRP list
    /// pages for transfers of up to `max_transfer` bytes per command (see
    /// [`prp::list_pages_for_transfer`]; at least one page per slot).
    pub fn new<H: Hal<Dma = D>>(
        hal: &H,
        qid: u16,
        depth: u16,
        page: usize,
        stride: usize,
        max_transfer: usize,
    ) -> Result<Self, HalError> {
        let depth = depth.clamp(2, MAX_DEPTH as u16);
        let list_pages = prp::list_pages_for_transfer(max_transfer, page);
        let sq = hal.dma_alloc(depth as usize * SQE_SIZE, page)?;
        let cq = hal.dma_alloc(depth as usize * CQE_SIZE, page)?;
        let prp_lists = hal.dma_alloc(depth as usize * list_pages * page, page)?;
        let mut free = [0u16; MAX_DEPTH];
        for (i, f) in free.iter_mut().enumerate().take(depth as usize) {
            *f = depth - 1 - i as u16;
        }
        Ok(QueuePair {
            qid,
            sq,
            cq,
            prp_lists,
            page,
            list_pages,
            sqr: SqRing::new(depth),
            cqr: CqRing::new(depth),
            slots: [Slot::default(); MAX_DEPTH],
            free,
            nfree: depth as usize,
            depth,
            pending: false,
            stride,
            stats: QueueStats::default(),
        })
    }

    pub fn depth(&self) -> u16 {
        self.depth
    }
    pub fn sq_paddr(&self) -> u64 {
        self.sq.paddr()
    }
    pub fn cq_paddr(&self) -> u64 {
        self.cq.paddr()
    }
    /// Commands queued or in flight.
    pub fn outstanding(&self) -> usize {
        self.depth as usize - self.nfree
    }
    /// Whether another command can be queued now.
    pub fn can_submit(&self) -> bool {
        self.nfree > 1 && !self.sqr.is_full()
    }

    /// Largest transfer (bytes) one command's list pages can describe at any buffer offset.
    pub fn max_transfer_bytes(&self) -> usize {
        prp::max_transfer_bytes(self.page, self.list_pages)
    }

    /// The first PRP-list page of a slot (used by Dataset Management for its range too):
    /// (physical address, offset in `prp_lists`).
    pub(crate) fn slot_page(&self, cid: u16) -> (u64, usize) {
        let off = cid as usize * self.list_pages * self.page;
        (self.prp_lists.paddr() + off as u64, off)
    }

    /// Next command id that `push` will use, if any.
    pub(crate) fn peek_cid(&self) -> Option<u16> {
        if self.can_submit() {
            Some(self.free[self.nfree - 1])
        } else {
            None
        }
    }

    /// Write slot `cid`'s page (e.g. a DSM range) before pushing.
    pub(crate) fn write_slot_page(&self, cid: u16, data: &[u8]) {
        let (_, off) = self.slot_page(cid);
        self.prp_lists.write(off, data);
    }

    /// Queue a command; `data` is the contiguous buffer to describe by PRPs (all of it).
    /// The device is not told until [`ring`](Self::ring).
    pub fn push(&mut self, sqe: &mut Sqe, tag: u64, data: Option<DmaSlice>) -> Result<u16, QueueError> {
        if !self.can_submit() {
            return Err(QueueError::Full);
        }
        let cid = self.free[self.nfree - 1];
        if let Some(buf) = data {
            let (list_paddr, list_off) = self.slot_page(cid);
            let p = prp::plan(buf.paddr(), buf.len(), self.page, list_paddr, self.list_pages).map_err(QueueError::Prp)?;
            for j in 0..p.list_pages {
                self.write_list_page(list_off + j * self.page, &p.list_page(j, self.page));
            }
            sqe.dptr = DataPointer::prp(p.prp1, p.prp2);
        }
        sqe.cid = cid.into();
        let at = self.sqr.push().ok_or(QueueError::Full)?;
        self.nfree -= 1;
        let flush = self.qid != 0 && sqe.opcode == io_op::FLUSH;
        self.slots[cid as usize] = Slot { tag, busy: true, flush };
        self.stats.flushes_submitted += flush as u64;
        self.sq.write(at as usize * SQE_SIZE, sqe.as_bytes());
        self.pending = true;
        self.stats.submitted += 1;
        Ok(cid)
    }

    /// Write one list page at `off` in `prp_lists`: its data entries, then the chain pointer
    /// in the last entry when another page follows.
    fn write_list_page(&self, off: usize, lp: &prp::ListPage) {
        let mut chunk = [0u8; 512];
        let mut i = 0;
        while i < lp.count {
            let k = core::cmp::min(chunk.len() / prp::ENTRY_BYTES, lp.count - i);
            for j in 0..k {
                let v = lp.first + ((i + j) * self.page) as u64;
                chunk[j * 8..j * 8 + 8].copy_from_slice(&v.to_le_bytes());
            }
            self.prp_lists.write(off + i * prp::ENTRY_BYTES, &chunk[..k * prp::ENTRY_BYTES]);
            i += k;
        }
        if let Some(next) = lp.chain {
            let last = (prp::entries_per_page(self.page) - 1) * prp::ENTRY_BYTES;
            self.prp_lists.write(off + last, &next.to_le_bytes());
        }
    }

    /// Tell the device about everything queued since the last ring: one doorbell write.
    pub fn ring<M: Mmio>(&mut self, mmio: &M) {
        if self.pending {
            mmio.write32(doorbell_offset(self.qid, false, self.stride), self.sqr.tail() as u32);
            self.pending = false;
            self.stats.sq_doorbells += 1;
        }
    }

    /// Consume up to `max` completions, calling `f(tag, dw0, status)` for each; writes the
    /// CQ head doorbell once if any were consumed. Returns how many.
    pub fn reap<M: Mmio>(&mut self, mmio: &M, max: usize, mut f: impl FnMut(u64, u32, Option<Status>)) -> usize {
        let mut n = 0;
        let mut consumed = false;
        while n < max {
            let off = self.cqr.head() as usize * CQE_SIZE;
            let sf = StatusField::from_bits(self.cq.read_le16(off + CQE_STATUS_OFFSET));
            if sf.phase() != self.cqr.phase() {
                break;
            }
            let mut raw = [0u8; CQE_SIZE];
            self.cq.read(off, &mut raw);
            let cqe: Cqe = zerocopy::transmute!(raw);
            self.cqr.advance();
            consumed = true;
            self.sqr.set_head(cqe.sqhd.get());
            let cid = cqe.cid.get() as usize;
            if cid >= self.depth as usize || !self.slots[cid].busy {
                self.stats.bogus_completions += 1;
                continue;
            }
            self.slots[cid].busy = false;
            self.free[self.nfree] = cid as u16;
            self.nfree += 1;
            self.stats.completed += 1;
            self.stats.flushes_completed += self.slots[cid].flush as u64;
            f(self.slots[cid].tag, cqe.dw0.get(), sf.status());
            n += 1;
        }
        if consumed {
            mmio.write32(doorbell_offset(self.qid, true, self.stride), self.cqr.head() as u32);
            self.stats.cq_doorbells += 1;
        }
        n
    }

    /// Give up on up to `max` outstanding commands (after a timeout), freeing their slots
    /// and calling `f(tag)` for each. Returns how many.
    pub fn abandon(&mut self, max: usize, mut f: impl FnMut(u64)) -> usize {
        let mut n = 0;
        for cid in 0..self.depth as usize {
            if n == max {
                break;
            }
            if self.slots[cid].busy {
                n += 1;
                self.slots[cid].busy = false;
                self.free[self.nfree] = cid as u16;
                self.nfree += 1;
                f(self.slots[cid].tag);
            }
        }
        n
    }
}
