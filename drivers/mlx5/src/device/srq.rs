//! Shared receive queues: an RMP (the object ISSI-1 firmware offers for an SRQ, as Linux
//! mlx5_ib `srq_cmd.c` uses it) whose receive WQEs any number of RC QPs take from, so receive
//! memory grows with poll groups, not connections.
//!
//! Facts [Linux mlx5_ifc.h rmpc/wq/*_rmp_*, qp.h mlx5_wqe_srq_next_seg, ibv_modify_srq(3)]:
//! WQEs of 2^log_wq_stride bytes form a linked list through `next_wqe_index` (a 16-byte next
//! segment, then the data segments); the adapter takes them along the list and software counts
//! the WQEs it posted in doorbell record dword 0. A receive CQE of a QP on the RMP names the
//! WQE in `wqe_counter`; software links that WQE back after the list's tail. One WQE is always
//! held back (software never posts the tail), so an RMP of 2^n WQEs holds 2^n - 1 receives.
//! The adapter reads only posted WQEs, so a link is kept in the driver's record when it is made
//! and reaches the buffer with the WQE's data when the WQE is posted (one write per receive:
//! next segment and data segment together), before the doorbell record counts it.
//! MODIFY_RMP with `bitmask.lwm` arms the limit: the adapter raises SRQ_RQ_LIMIT once when fewer
//! than `lwm` receives remain, then the limit reads 0 until armed again.

use super::*;
use mlx5_ifc::{rmp_state, wq_type};
use rdma::RecvWr;

/// log2 of a WQE: the next segment and one data segment.
const LOG_STRIDE: u8 = 5;
const STRIDE: usize = 1 << LOG_STRIDE;
/// Where `next_wqe_index` sits in a WQE (`wqe_srq_next_seg`).
const NEXT: Field = wqe_srq_next_seg::next_wqe_index;
const _: () = assert!(wqe_srq_next_seg::LAYOUT.size + wqe_data_seg::LAYOUT.size == STRIDE);

/// A shared receive queue of this device, by slot (no search on the data path).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SrqId(pub u32);

/// The driver's record of one SRQ WQE.
#[derive(Debug, Clone, Copy, Default)]
struct SrqWqe {
    /// The posted wr_id.
    wr_id: u64,
    /// Its successor in the list (written into the buffer when the WQE is posted).
    next: u16,
    /// Posted and not yet completed.
    busy: bool,
}

/// One RMP and the driver's view of its list.
pub struct Srq<D> {
    /// The firmware's RMP number (what SRQ events name).
    pub rmpn: u32,
    buf: D,
    dbr: D,
    /// The WQEs' ring: its counter (producer counter = WQEs posted, doorbell record dword 0)
    /// and doorbell record. Which WQE comes next is the list's, not the counter's: a WQE is
    /// addressed by its list index (`index * STRIDE`).
    ring: WorkRing,
    /// Next WQE to post; the list's last WQE.
    head: u16,
    tail: u16,
    /// Per WQE, by list index (one entry, one bounds check per WQE touched).
    wqes: Vec<SrqWqe>,
    /// WQEs posted and not completed.
    posted: usize,
    /// SRQ_RQ_LIMIT events seen for this RMP.
    pub limit_events: u64,
    /// Limit events already reported by [`Mlx5::take_srq_limit`].
    limit_reported: u64,
    /// The RMP went to error (SRQ_CATAS_ERROR).
    pub failed: bool,
}

impl<D: DmaRegion> Srq<D> {
    /// Post receives in order with one doorbell-record update for all of them. On an error
    /// (full) the ones before it are posted.
    pub(crate) fn post_batch(&mut self, wrs: &[RecvWr]) -> Result<(), Error> {
        let mut r = Ok(());
        let before = self.ring.pi();
        for wr in wrs {
            if self.head == self.tail {
                r = Err(Error::InvalidArgument("SRQ full"));
                break;
            }
            let mut d = [0u8; wqe_data_seg::LAYOUT.size];
            set(&mut d, wqe_data_seg::byte_count, wr.sge.len as u64);
            set(&mut d, wqe_data_seg::lkey, wr.sge.lkey.0 as u64);
            set(&mut d, wqe_data_seg::addr, wr.sge.addr);
            self.post_at_head(wr.wr_id, &d);
        }
        if self.ring.pi() != before {
            self.ring.write_record(&self.dbr);
        }
        r
    }

    /// Receives that can still be posted.
    pub fn free_slots(&self) -> usize {
        self.capacity().saturating_sub(self.posted)
    }
    /// Capacity in receives (one WQE stays back).
    pub fn capacity(&self) -> usize {
        self.ring.size() - 1
    }
    /// Write the head WQE whole (its link from the driver's record, data segment `d`) and take
    /// it into the posted count (announced by the caller's doorbell record write).
    #[inline(always)]
    fn post_at_head(&mut self, wr_id: u64, d: &[u8; wqe_data_seg::LAYOUT.size]) {
        let h = self.head as usize;
        let w = &mut self.wqes[h];
        let mut wqe = [0u8; STRIDE];
        set(&mut wqe, NEXT, w.next as u64);
        wqe[wqe_srq_next_seg::LAYOUT.size..].copy_from_slice(d);
        self.buf.write(h * STRIDE, &wqe);
        (w.wr_id, w.busy) = (wr_id, true);
        self.head = w.next;
        self.posted += 1;
        self.ring.advance(1);
    }

    /// A receive CQE named WQE `counter`: its wr_id, and the WQE goes back after the tail.
    /// None if that WQE was not posted (a CQE the driver cannot trust). Inlined into the CQE
    /// decode (out of line it cost a call per receive CQE: scripts/bench-nvmeof).
    #[inline]
    pub(crate) fn complete(&mut self, counter: u16) -> Option<u64> {
        let w = self.wqes.get_mut(counter as usize).filter(|w| w.busy)?;
        w.busy = false;
        let wr_id = w.wr_id;
        self.posted = self.posted.saturating_sub(1);
        // Linked in the record only: the tail is never posted, and its link reaches the buffer
        // when it is (see the module doc).
        self.wqes[self.tail as usize].next = counter;
        self.tail = counter;
        Some(wr_id)
    }
}

impl<D: DmaRegion> Srq<D> {
    /// Whether a limit event arrived since the last call.
    pub(crate) fn take_limit(&mut self) -> bool {
        let new = self.limit_events > self.limit_reported;
        self.limit_reported = self.limit_events;
        new
    }

    /// WQE `counter`, consumed by a receive CQE that was cleaned away, posted again with the
    /// same `wr_id` and data segment (its buffer stays with the SRQ). False if it was not posted.
    pub(crate) fn repost(&mut self, counter: u16) -> bool {
        let i = counter as usize;
        let mut d = [0u8; wqe_data_seg::LAYOUT.size];
        if !self.wqes.get(i).is_some_and(|w| w.busy) {
            return false;
        }
        self.buf.read(i * STRIDE + wqe_srq_next_seg::LAYOUT.size, &mut d);
        let Some(wr_id) = self.complete(counter) else { return false };
        // `complete` linked one WQE back, so the list has room at its head.
        self.post_at_head(wr_id, &d);
        self.ring.write_record(&self.dbr);
        true
    }

    /// The device failed: one posted WQE's wr_id, forgotten (flushed), if any is left.
    pub(crate) fn flush_one(&mut self) -> Option<u64> {
        let w = self.wqes.iter_mut().find(|w| w.busy)?;
        w.busy = false;
        self.posted = self.posted.saturating_sub(1);
        Some(w.wr_id)
    }
}

impl<H: Hal, M: Mmio> Mlx5<H, M> {
    /// CREATE_RMP of 2^log_size WQEs of one scatter entry each (2^log_size - 1 receives), limit
    /// `lwm` armed at once when non-zero.
    pub fn create_srq(&mut self, log_size: u8, lwm: u16) -> Result<SrqId, Error> {
        let srq = self.new_srq(log_size, lwm)?;
        let slot = match self.srqs.iter().position(|s| s.is_none()) {
            Some(i) => {
                self.srqs[i] = Some(srq);
                i
            }
            None => {
                self.srqs.push(Some(srq));
                self.srqs.len() - 1
            }
        };
        Ok(SrqId(slot as u32))
    }

    /// CREATE_RMP of 2^log_size receive WQEs (limit `lwm`, 0 = none); the ring is the caller's
    /// to keep (the device's list or a [`crate::QueueGroup`]).
    pub(crate) fn new_srq(&mut self, log_size: u8, lwm: u16) -> Result<Srq<H::Dma>, Error> {
        self.alive()?;
        let pd = self.pd.ok_or(Error::InvalidArgument("no PD"))?;
        if !(1..=15).contains(&log_size) || log_size > self.caps.log_max_srq_sz {
            return Err(Error::InvalidArgument("SRQ size"));
        }
        if u32::from(lwm) >= 1u32 << log_size {
            return Err(Error::InvalidArgument("SRQ limit"));
        }
        let size = 1usize << log_size;
        let npages = (size * STRIDE).div_ceil(PAGE);
        let in_len = create_rmp_in::LAYOUT.size + 8 * npages;
        if in_len > MAX_MSG {
            return Err(Error::InvalidArgument("SRQ too large"));
        }
        let buf = self.hal.dma_alloc(npages * PAGE, PAGE)?;
        let dbr = self.hal.dma_alloc(64, 64)?;
        dbr.write_be32(0, 0);
        let mut srq = Srq {
            rmpn: 0,
            buf,
            dbr,
            ring: WorkRing::receive(0, log_size, LOG_STRIDE, 0),
            head: 0,
            tail: (size - 1) as u16,
            wqes: alloc::vec![SrqWqe::default(); size],
            posted: 0,
            limit_events: 0,
            limit_reported: 0,
            failed: false,
        };
        for (i, w) in srq.wqes.iter_mut().enumerate() {
            w.next = ((i + 1) % size) as u16;
        }
        self.begin(op::CREATE_RMP, 0, in_len);
        let c = create_rmp_in::ctx;
        let w = |f: Field| f.at(rmpc::wq).at(c);
        set(&mut self.inb, rmpc::state.at(c), rmp_state::RDY as u64);
        set(&mut self.inb, w(wq::wq_type), wq_type::LINKED_LIST as u64);
        set(&mut self.inb, w(wq::pd), pd.0 as u64);
        set(&mut self.inb, w(wq::dbr_addr), srq.dbr.paddr());
        set(&mut self.inb, w(wq::log_wq_stride), LOG_STRIDE as u64);
        set(&mut self.inb, w(wq::log_wq_pg_sz), 0);
        set(&mut self.inb, w(wq::log_wq_sz), log_size as u64);
        set(&mut self.inb, w(wq::lwm), lwm as u64);
        for i in 0..npages {
            let f = Field { off: (8 * (create_rmp_in::LAYOUT.size + 8 * i)) as u32, width: 64 };
            set(&mut self.inb, f, srq.buf.paddr() + (i * PAGE) as u64);
        }
        self.run(in_len, create_rmp_out::LAYOUT.size)?;
        srq.rmpn = self.out(create_rmp_out::rmpn) as u32;
        Ok(srq)
    }

    pub fn srq(&self, id: SrqId) -> Option<&Srq<H::Dma>> {
        self.srqs.get(id.0 as usize).and_then(|s| s.as_ref())
    }

    /// Post one receive on the SRQ (one scatter entry): written at the list's head, announced by
    /// the doorbell record (no MMIO). Fails when every receive is posted.
    pub fn post_srq_recv(&mut self, id: SrqId, wr: &RecvWr) -> Result<(), Error> {
        self.post_srq_recv_batch(id, core::slice::from_ref(wr))
    }

    /// Post receives in order with one doorbell-record update for all of them. On an error (SRQ
    /// full) the ones before it are posted.
    pub fn post_srq_recv_batch(&mut self, id: SrqId, wrs: &[RecvWr]) -> Result<(), Error> {
        if self.failed.is_some() {
            return Err(Error::DeviceFailed);
        }
        let s = self.srqs.get_mut(id.0 as usize).and_then(|s| s.as_mut()).ok_or(Error::NoSuchObject { kind: "SRQ", id: id.0 })?;
        s.post_batch(wrs)
    }

    /// Arm the SRQ limit: one SRQ_RQ_LIMIT event when fewer than `lwm` receives remain.
    pub fn arm_srq(&mut self, id: SrqId, lwm: u16) -> Result<(), Error> {
        let s = self.srq(id).ok_or(Error::NoSuchObject { kind: "SRQ", id: id.0 })?;
        if lwm == 0 || usize::from(lwm) >= s.ring.size() {
            return Err(Error::InvalidArgument("SRQ limit"));
        }
        let rmpn = s.rmpn;
        self.modify_rmp_lwm(rmpn, lwm)
    }

    /// MODIFY_RMP setting RMP `rmpn`'s limit (arming its limit event).
    pub(super) fn modify_rmp_lwm(&mut self, rmpn: u32, lwm: u16) -> Result<(), Error> {
        let len = modify_rmp_in::LAYOUT.size;
        self.begin(op::MODIFY_RMP, 0, len);
        set(&mut self.inb, modify_rmp_in::rmpn, rmpn as u64);
        set(&mut self.inb, modify_rmp_in::rmp_state, rmp_state::RDY as u64);
        set(&mut self.inb, rmpc::state.at(modify_rmp_in::ctx), rmp_state::RDY as u64);
        set(&mut self.inb, rmp_bitmask::lwm.at(modify_rmp_in::bitmask), 1);
        set(&mut self.inb, wq::lwm.at(rmpc::wq).at(modify_rmp_in::ctx), lwm as u64);
        self.run(len, 16)
    }

    /// DESTROY_RMP; refused while a QP takes its receives from it.
    pub fn destroy_srq(&mut self, id: SrqId) -> Result<(), Error> {
        let s = self.srq(id).ok_or(Error::NoSuchObject { kind: "SRQ", id: id.0 })?;
        if self.qps.iter().any(|q| q.srq == Some(id)) {
            return Err(Error::InvalidArgument("SRQ still used by a QP"));
        }
        let rmpn = s.rmpn;
        self.simple(op::DESTROY_RMP, 0, destroy_rmp_in::LAYOUT.size, &[(destroy_rmp_in::rmpn, rmpn as u64)])?;
        self.srqs[id.0 as usize] = None;
        Ok(())
    }

    /// Whether a limit event arrived since the last call (slow path).
    pub fn take_srq_limit(&mut self, id: SrqId) -> bool {
        self.srqs.get_mut(id.0 as usize).and_then(|s| s.as_mut()).is_some_and(|s| s.take_limit())
    }

    /// Live SRQs (leak checks).
    pub fn live_srqs(&self) -> usize {
        self.srqs.iter().filter(|s| s.is_some()).count() + self.live_groups()
    }

    /// An SRQ event from the EQ (slow path): count it on the RMP it names.
    pub(super) fn srq_event(&mut self, ty: u8, rmpn: u32) {
        if self.group_event(ty, rmpn) {
            return;
        }
        if let Some(s) = self.srqs.iter_mut().flatten().find(|s| s.rmpn == rmpn) {
            match ty {
                event::SRQ_RQ_LIMIT => s.limit_events += 1,
                _ => s.failed = true,
            }
        }
    }
}
