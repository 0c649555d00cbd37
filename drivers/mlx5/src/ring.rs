//! The ring mechanics every mlx5 queue shares, as two types: [`WorkRing`] (a ring software
//! posts to: the RC/UD QP's SQ and RQ, the SRQ's RMP, the raw Ethernet SQ and RQ) and
//! [`CompletionRing`] (a ring the adapter writes: every CQ).
//!
//! A ring is its place and shape in its queue's memory (byte offset, 2^n entries of 2^m bytes,
//! the doorbell record word it announces through) and its counters; the memory itself (the
//! DMA buffer and the doorbell record page) stays with the queue that allocated it and is
//! passed in, because one allocation can hold two rings: CREATE_QP takes one buffer (RQ at 0,
//! SQ after it) and one doorbell record for both (DBR[0] = RQ, DBR[1] = SQ), as rdma-core's
//! `mlx5_wq` and Linux mlx5_ib's `mlx5_ib_wq` keep an offset into their QP's buffer. What goes
//! into a WQE and what a completion means are each queue kind's own.

use hal::{DmaRegion, Mmio};
use mlx5_ifc::cqe_op;
use mlx5_ifc::ifc::cqe64;
use mlx5_ifc::layout::get;
use mlx5_ifc::queue::WQEBB;
use rdma::Completion;

/// Offset of doorbell register 0 (the BlueFlame register's first 8 bytes) in a UAR page.
const UAR_BF_OFFSET: usize = mlx5_ifc::uar::BF;

/// A work queue ring (see the module doc): 2^`log_size` entries of 2^`log_stride` bytes at byte
/// `base` of its queue's buffer, announced through the doorbell record word at byte `dbr_at`
/// of its queue's doorbell page. Counters in entries (WQEBBs for a send ring), wrapping at
/// 2^16 as the adapter's do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkRing {
    base: usize,
    log_size: u8,
    log_stride: u8,
    dbr_at: usize,
    /// Producer counter: entries posted (ctrl.wqe_index of the next send WQE; what the
    /// doorbell record carries).
    pi: u16,
    /// Consumer counter: entries known completed.
    ci: u16,
}

impl WorkRing {
    /// A ring of 2^`log_size` entries of 2^`log_stride` bytes at byte `base` of its buffer,
    /// with its doorbell record word at byte `dbr_at` of the doorbell page; counters at 0.
    pub const fn new(base: usize, log_size: u8, log_stride: u8, dbr_at: usize) -> WorkRing {
        WorkRing { base, log_size, log_stride, dbr_at, pi: 0, ci: 0 }
    }
    /// A send ring: 2^`log_size` WQEBBs at byte `base`, announced through DBR[1] of the record
    /// at byte `dbr` (its DBR[0] is the paired receive ring's).
    pub const fn send(base: usize, log_size: u8, dbr: usize) -> WorkRing {
        WorkRing::new(base, log_size, WQEBB.trailing_zeros() as u8, dbr + 4)
    }
    /// A receive ring: 2^`log_size` WQEs of 2^`log_stride` bytes at byte `base`, announced
    /// through DBR[0] of the record at byte `dbr`.
    pub const fn receive(base: usize, log_size: u8, log_stride: u8, dbr: usize) -> WorkRing {
        WorkRing::new(base, log_size, log_stride, dbr)
    }

    /// Entries.
    #[inline(always)]
    pub fn size(&self) -> usize {
        1usize << self.log_size
    }
    /// Bytes of one entry.
    #[inline(always)]
    pub fn stride(&self) -> usize {
        1usize << self.log_stride
    }
    /// Producer counter.
    #[inline(always)]
    pub fn pi(&self) -> u16 {
        self.pi
    }
    /// Consumer counter.
    #[inline(always)]
    pub fn ci(&self) -> u16 {
        self.ci
    }
    /// The slot (entry index) counter `c` names.
    #[inline(always)]
    pub fn slot(&self, c: u16) -> usize {
        c as usize & (self.size() - 1)
    }
    /// Byte offset in the buffer of the entry counter `c` names.
    #[inline(always)]
    pub fn offset(&self, c: u16) -> usize {
        self.base + (self.slot(c) << self.log_stride)
    }
    /// Room for `n` more entries.
    #[inline(always)]
    pub fn has_room(&self, n: usize) -> bool {
        self.pi.wrapping_sub(self.ci) as usize + n <= self.size()
    }
    /// Whether every posted entry is known completed.
    #[inline(always)]
    pub fn is_idle(&self) -> bool {
        self.pi == self.ci
    }
    /// Whether counter `c` names an entry posted and not known completed: in [ci, pi).
    #[inline(always)]
    pub fn outstanding(&self, c: u16) -> bool {
        c.wrapping_sub(self.ci) < self.pi.wrapping_sub(self.ci)
    }

    /// Copy `data` (at most one entry) into the entry the producer counter names; not posted
    /// until [`advance`](Self::advance).
    #[inline(always)]
    pub fn put<D: DmaRegion>(&self, buf: &D, data: &[u8]) {
        buf.write(self.offset(self.pi), data);
    }
    /// Copy the WQE's `nbb` WQEBBs from `w` into a send ring from counter `c` on (the producer
    /// counter, or past it for a batch's later WQEs), WQEBB by WQEBB so a WQE at the ring's end
    /// wraps to its start; not posted until [`advance`](Self::advance). Returns the WQE's first
    /// 8 bytes (what the doorbell write carries). `w` is the caller's fixed-size WQE array, so
    /// its bounds are known here.
    #[inline(always)]
    pub fn put_wqe<D: DmaRegion, const N: usize>(&self, buf: &D, c: u16, w: &[u8; N], nbb: usize) -> u64 {
        let mask = self.size() - 1;
        for b in 0..nbb {
            let slot = (c as usize + b) & mask;
            buf.write(self.base + slot * WQEBB, &w[b * WQEBB..(b + 1) * WQEBB]);
        }
        u64::from_be_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]])
    }
    /// Post `n` entries written since the last advance (the device learns of them by the
    /// doorbell record).
    #[inline(always)]
    pub fn advance(&mut self, n: u16) {
        self.pi = self.pi.wrapping_add(n);
    }
    /// Entries up to (not including) counter `c` are completed.
    #[inline(always)]
    pub fn complete_to(&mut self, c: u16) {
        self.ci = c;
    }
    /// Both counters back to 0 (the queue was reset; its doorbell record is the queue's to
    /// clear).
    pub fn reset(&mut self) {
        (self.pi, self.ci) = (0, 0);
    }

    /// Announce the posted entries: the doorbell record word = producer counter, a memory
    /// write the adapter reads (all a receive ring needs).
    #[inline(always)]
    pub fn write_record<D: DmaRegion>(&self, dbr: &D) {
        core::sync::atomic::fence(core::sync::atomic::Ordering::Release);
        dbr.write_be32(self.dbr_at, self.pi as u32);
    }
    /// Announce a send ring: its doorbell record, then the doorbell register of the UAR page at
    /// byte `uar` of the BAR with the newest WQE's first 8 bytes; the device runs the SQ up to
    /// the record.
    #[inline(always)]
    pub fn ring_doorbell<D: DmaRegion, M: Mmio>(&self, dbr: &D, bar: &M, uar: usize, first8: u64) {
        self.write_record(dbr);
        core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
        bar.write64_be(uar + UAR_BF_OFFSET, first8);
    }
}

/// A completion ring (see the module doc): 2^`log_size` 64-byte CQEs from byte 0 of the CQ's
/// buffer, its consumer counter, the CQ doorbell record (word 0 = consumer index, word 1 = arm).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletionRing {
    log_size: u8,
    /// 2^`log_size` - 1: a counter's CQE index (kept, not shifted out per poll).
    mask: u32,
    /// Consumer counter (CQEs taken); bit `log_size` is the owner value software expects.
    ci: u32,
    /// The CQE being decoded: each CQE taken is copied here whole before it is decoded (kept
    /// with the ring, so a poll clears no buffer of its own).
    cqe: [u8; cqe64::LAYOUT.size],
}

// `CompletionRing::poll` reads a CQE as its ownership byte, then the bytes before it: the
// byte is the CQE's last, so the two reads cover all of it.
const _: () = assert!(cqe64::op_own.byte() + 1 == cqe64::LAYOUT.size);

/// Arm word of the doorbell record of a CQ software polls: arm sequence number 2 in bits 31:28,
/// no command, so the adapter's doorbell recovery leaves the CQ alone (Linux
/// `steering/dr_send.c` dr_create_cq writes `2 << 28`).
pub const CQ_DB_POLLING_ARM: u32 = 2 << 28;

impl CompletionRing {
    /// A ring of 2^`log_size` CQEs; its memory is made ready by [`init`](Self::init).
    pub const fn new(log_size: u8) -> CompletionRing {
        CompletionRing { log_size, mask: (1u32 << log_size) - 1, ci: 0, cqe: [0; cqe64::LAYOUT.size] }
    }
    /// Every CQE invalid and owned by the adapter (opcode INVALID, owner 0), the doorbell
    /// record at consumer index 0 and armed for polling only ([`CQ_DB_POLLING_ARM`]).
    pub fn init<D: DmaRegion>(&self, buf: &D, dbr: &D) {
        for i in 0..self.size() {
            buf.write_u8(self.offset(i) + cqe64::op_own.byte(), cqe_op::INVALID << 4);
        }
        dbr.write_be32(0, 0);
        dbr.write_be32(4, CQ_DB_POLLING_ARM);
    }

    /// CQEs.
    #[inline(always)]
    pub fn size(&self) -> u32 {
        self.mask + 1
    }
    /// Bytes the ring takes.
    pub fn bytes(&self) -> usize {
        (self.size() as usize) * cqe64::LAYOUT.size
    }
    /// Consumer counter.
    pub fn ci(&self) -> u32 {
        self.ci
    }
    /// Byte offset of the CQE counter `c` names.
    #[inline(always)]
    pub fn offset(&self, c: u32) -> usize {
        ((c & self.mask) as usize) * cqe64::LAYOUT.size
    }
    /// Whether the CQE counter `c` names is software's (valid, owner bit of `c`'s pass).
    #[inline(always)]
    pub fn sw_owned<D: DmaRegion>(&self, buf: &D, c: u32) -> bool {
        let op_own = buf.read_u8(self.offset(c) + cqe64::op_own.byte());
        (op_own >> 4) != cqe_op::INVALID && u32::from(op_own & 1) == (c >> self.log_size) & 1
    }
    /// `n` more CQEs taken: the consumer counter moves and the doorbell record says so.
    pub fn consume<D: DmaRegion>(&mut self, dbr: &D, n: u32) {
        self.ci = self.ci.wrapping_add(n);
        core::sync::atomic::fence(core::sync::atomic::Ordering::Release);
        self.write_record(dbr);
    }
    #[inline(always)]
    fn write_record<D: DmaRegion>(&self, dbr: &D) {
        dbr.write_be32(0, self.ci & 0xff_ffff);
    }

    /// Take CQEs into `out` until the ring is empty or `out` full; `decode` writes each one's
    /// completion into its place in `out` (false: not reported, e.g. a CQE naming no
    /// outstanding work). The consumer index record moves once, when CQEs were taken.
    #[inline]
    pub fn poll<D: DmaRegion>(&mut self, buf: &D, dbr: &D, out: &mut [Completion], mut decode: impl FnMut(&[u8; 64], &mut Completion) -> bool) -> usize {
        let mut n = 0;
        let mut consumed = false;
        // The index mask once, outside the loop (an empty poll is the common case at low depth).
        let mask = self.mask;
        let own = cqe64::op_own.byte();
        let e = &mut self.cqe;
        while n < out.len() {
            let at = ((self.ci & mask) as usize) * cqe64::LAYOUT.size;
            // Ownership first (the op_own byte): an empty CQ costs one small load, not a
            // 64-byte copy; the rest of the CQE is read once it is ours.
            buf.read(at + own, &mut e[own..own + 1]);
            let op = get(&e[..], cqe64::opcode) as u8;
            let owner = get(&e[..], cqe64::owner) as u32;
            if op == cqe_op::INVALID || owner != (self.ci >> self.log_size) & 1 {
                break;
            }
            core::sync::atomic::fence(core::sync::atomic::Ordering::Acquire);
            buf.read(at, &mut e[..own]);
            self.ci = self.ci.wrapping_add(1);
            consumed = true;
            // Decoded straight into its place in `out` (no completion copied); kept if reported.
            n += usize::from(decode(e, &mut out[n]));
        }
        if consumed {
            self.write_record(dbr);
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_and_outstanding_wrap_at_the_counter_width() {
        let mut r = WorkRing::send(4096, 3, 0);
        assert_eq!((r.size(), r.stride(), r.offset(9)), (8, 64, 4096 + 64));
        assert!(r.has_room(8) && !r.has_room(9));
        r.advance(6);
        assert!(r.has_room(2) && !r.has_room(3));
        assert!(r.outstanding(0) && r.outstanding(5) && !r.outstanding(6));
        r.complete_to(6);
        assert!(r.is_idle());
        // Counters wrap at 2^16: the window still reads right across the wrap.
        let mut r = WorkRing::receive(0, 2, 4, 0);
        r.advance(u16::MAX);
        r.complete_to(u16::MAX - 1);
        r.advance(2);
        assert!(r.outstanding(u16::MAX - 1) && r.outstanding(0) && !r.outstanding(1));
        assert_eq!((r.slot(1), r.offset(1)), (1, 16));
        assert!(r.has_room(1) && !r.has_room(2));
    }
}
