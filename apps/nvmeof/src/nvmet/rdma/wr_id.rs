//! The transport's work-request identity: which queue (its index in its poll group +
//! generation), which slot, what kind of work, and the zero-copy range it holds, packed into
//! the 64-bit `wr_id` so a completion (from its group's CQ) reaches its queue and slot by
//! index, never by a search; a block I/O or AER tag, which the core hands back outside the
//! group's CQ, carries the group in place of the range.

use super::ranges::RangeId;

/// What a work request (or block I/O) was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Kind {
    /// A block I/O tag (not a work request).
    Block = 0,
    Recv = 1,
    /// A response capsule (SEND or SEND WITH INVALIDATE).
    Send = 2,
    /// An RDMA READ of host data.
    Read = 3,
    /// An RDMA WRITE of data to the host (unsignaled).
    Write = 4,
    /// An AER: its block tag carries the CID, its response the AER response buffer.
    Aer = 5,
    /// The RDMA READ of a zero-copy Write answered by a SEND fenced behind it: its completion
    /// ends the Write's range and gives back the READ credit, and never touches the slot
    /// (answered already, it may hold its next command).
    AnsweredRead = 6,
}

/// Bits: slot 0..16, range (a tag: the poll group) 16..32, kind 32..36, generation 36..52,
/// queue index in its group 52..64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct WrId(u64);

/// Queues of a group a `WrId` can name (12 bits).
pub(super) const MAX_QUEUES: usize = 1 << 12;

impl WrId {
    #[inline(always)]
    pub(super) fn new(conn: usize, gen: u16, kind: Kind, slot: u16, range: RangeId) -> WrId {
        debug_assert!(conn < MAX_QUEUES && gen < 1 << 12);
        WrId(((conn as u64) << 52) | ((gen as u64 & 0xFFF) << 36) | ((kind as u64) << 32) | ((range.raw() as u64) << 16) | slot as u64)
    }
    /// A block I/O or AER tag: slot (or CID) `slot` of queue `conn` of poll group `group`.
    #[inline(always)]
    pub(super) fn tag(group: usize, conn: usize, gen: u16, kind: Kind, slot: u16) -> WrId {
        debug_assert!(group < 1 << 16 && matches!(kind, Kind::Block | Kind::Aer));
        WrId::new(conn, gen, kind, slot, RangeId::from_raw(group as u16))
    }
    /// The poll group a tag ([`WrId::tag`]) names.
    #[inline(always)]
    pub(super) fn group(self) -> usize {
        ((self.0 >> 16) & 0xFFFF) as usize
    }
    #[inline(always)]
    pub(super) fn from_raw(v: u64) -> WrId {
        WrId(v)
    }
    #[inline(always)]
    pub(super) fn raw(self) -> u64 {
        self.0
    }
    #[inline(always)]
    pub(super) fn conn(self) -> usize {
        (self.0 >> 52) as usize
    }
    #[inline(always)]
    pub(super) fn gen(self) -> u16 {
        ((self.0 >> 36) & 0xFFF) as u16
    }
    /// `None` for a value no `WrId::new` produced (a corrupted completion).
    #[inline(always)]
    pub(super) fn kind(self) -> Option<Kind> {
        Some(match (self.0 >> 32) & 0xF {
            0 => Kind::Block,
            1 => Kind::Recv,
            2 => Kind::Send,
            3 => Kind::Read,
            4 => Kind::Write,
            5 => Kind::Aer,
            6 => Kind::AnsweredRead,
            _ => return None,
        })
    }
    #[inline(always)]
    pub(super) fn slot(self) -> u16 {
        self.0 as u16
    }
    #[inline(always)]
    pub(super) fn range(self) -> RangeId {
        RangeId::from_raw((self.0 >> 16) as u16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip() {
        let r = RangeId::from_raw(0x1234);
        let w = WrId::new(4095, 0xABC, Kind::Aer, 0xFFFE, r);
        assert_eq!((w.conn(), w.gen(), w.kind(), w.slot(), w.range()), (4095, 0xABC, Some(Kind::Aer), 0xFFFE, r));
        assert_eq!(WrId::from_raw(w.raw()), w);
        assert_eq!(WrId::from_raw(0xF << 32).kind(), None);
        let t = WrId::tag(63, 4095, 0xABC, Kind::Block, 7);
        assert_eq!((t.group(), t.conn(), t.gen(), t.kind(), t.slot()), (63, 4095, 0xABC, Some(Kind::Block), 7));
    }
}
