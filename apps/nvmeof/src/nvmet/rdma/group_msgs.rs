//! The one-word records a poll group and the controller owner exchange on the group's rings
//! (`handoff`): what a group's turn leaves to the owner, the owner's answers, new queues handed
//! in and AER completions, each with its word layout.

use rdma::{Lkey, Qpn};

use super::handoff::Word;
use super::wr_id::WrId;

/// What a group's turn leaves to the owner of the device, one word each on the group's
/// single-producer ring to the owner ([`PollGroup::gone`]): the owner's half of a teardown (the
/// group's half needs no device; the firmware commands run when the owner drains the ring on
/// its slow path, in order: a queue's QP is destroyed before the keys its sends used are
/// deregistered), and the group's answers to the new queues the owner staged in it
/// ([`Attach`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ToOwner {
    /// The group's turn closed the queue of this QP on its own (an error, a Disconnect, its
    /// controller gone): the owner's CM tells the host (DREQ, `RdmaTarget::take_closed`).
    /// Listed before the queue's [`ToOwner::Qp`].
    Dreq(Qpn),
    /// The QP of the queue at this index in `conns`: destroy it on the device, then tell the
    /// group to forget it ([`ToGroup::Detach`]; its completions still in the CQ go). A QP the
    /// device would not destroy is tried again on later drains ([`QpRetry`]).
    Qp(Qpn, u16),
    /// A key of the memory of the freed queue at this index: deregister it (once the queue's
    /// QP is gone, [`QpRetry`]).
    Key(u16, Lkey),
    /// The queue at this index in `conns` is freed and its keys (listed before) deregistered:
    /// tell the group to drop its memory, parked in [`PollGroup::parked`] at that index
    /// ([`ToGroup::Drop`]).
    Mem(u16),
    /// The queue staged at the index [`Attach`] named is in the group now, its QP attached
    /// (`GroupVerbs::attach_group_qp`) and found by this QPN: the CM may send its REP.
    Attached(Qpn),
    /// The new queue of this QP, staged at this index, was refused (the group is broken, or
    /// the device's side of the group would not take its QP): destroy the QP
    /// (`GroupVerbs::destroy_handed_qp`, by the group's numbers; tried again on later drains
    /// as a closed queue's, [`QpRetry`]); the CM sends REJ. The group parked the queue's memory
    /// and QP object as a freed queue's ([`PollGroup::park`]): its keys and [`ToOwner::Mem`]
    /// follow.
    Refused(Qpn, u16),
    /// The group learned on its own turn that it is broken for good (`GroupVerbs::group_broken`)
    /// and closed its queues: the owner gives it no new queue and replaces it once it holds none.
    Broken,
    /// The group's SRQ ran below its armed limit (the group read the event and counted it):
    /// arm it again (a firmware command, the owner's: `GroupVerbs::arm_group_srq`).
    ArmSrq,
}

/// The owner's answers to [`ToOwner`] records, on the group's ring from the owner. One word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ToGroup {
    /// The QP is destroyed: the group forgets it (`GroupVerbs::detach_group_qp`).
    Detach(Qpn),
    /// No key names the memory parked at this index any more: the group drops it.
    Drop(u16),
}

const TAG: u32 = 48;

impl Word for ToOwner {
    fn to_word(self) -> u64 {
        match self {
            ToOwner::Qp(q, i) => ((i as u64) << 32) | q.0 as u64,
            ToOwner::Key(i, k) => (1 << TAG) | ((i as u64) << 32) | k.0 as u64,
            ToOwner::Mem(i) => (2 << TAG) | i as u64,
            ToOwner::Attached(q) => (3 << TAG) | q.0 as u64,
            ToOwner::Refused(q, i) => (4 << TAG) | ((i as u64) << 32) | q.0 as u64,
            ToOwner::Broken => 5 << TAG,
            ToOwner::ArmSrq => 6 << TAG,
            ToOwner::Dreq(q) => (7 << TAG) | q.0 as u64,
        }
    }
    fn from_word(w: u64) -> Self {
        match w >> TAG {
            0 => ToOwner::Qp(Qpn(w as u32), (w >> 32) as u16),
            1 => ToOwner::Key((w >> 32) as u16, Lkey(w as u32)),
            2 => ToOwner::Mem(w as u16),
            3 => ToOwner::Attached(Qpn(w as u32)),
            4 => ToOwner::Refused(Qpn(w as u32), (w >> 32) as u16),
            5 => ToOwner::Broken,
            6 => ToOwner::ArmSrq,
            _ => ToOwner::Dreq(Qpn(w as u32)),
        }
    }
}

/// The owner's record on a group's ring of new queues: "take in the queue staged at this
/// index in [`PollGroup::staged`]" (its QP made and connected by the device's owner, its
/// `Conn` built). One word; the group answers [`ToOwner::Attached`] or [`ToOwner::Refused`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Attach(pub(super) u16);

impl Word for Attach {
    fn to_word(self) -> u64 {
        self.0 as u64
    }
    fn from_word(w: u64) -> Self {
        Attach(w as u16)
    }
}

impl Word for ToGroup {
    fn to_word(self) -> u64 {
        match self {
            ToGroup::Detach(q) => q.0 as u64,
            ToGroup::Drop(i) => (1 << TAG) | i as u64,
        }
    }
    fn from_word(w: u64) -> Self {
        match w >> TAG {
            0 => ToGroup::Detach(Qpn(w as u32)),
            _ => ToGroup::Drop(w as u16),
        }
    }
}

/// An AER of one of the group's queues to complete, sent by the owner when the core has an
/// event for it (`Core::take_aen`) and answered in the group's turn
/// ([`TurnShared::take_aers`]): the queue's index in `conns` and generation, the AER's CID and
/// the completion's DW0, whose bits 31:24 are reserved in an AER's completion (NVMe base
/// spec: event type 2:0, information 15:8, log page 23:16), so one word carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct AerDone {
    pub(super) conn: u16,
    pub(super) gen: u16,
    pub(super) cid: u16,
    pub(super) dw0: u32,
}

impl AerDone {
    /// The AER of block tag `tag` (`WrId::tag`, kind AER: the CID in the slot) with `dw0`.
    pub(super) fn of(tag: WrId, dw0: u32) -> AerDone {
        debug_assert!(dw0 >> 24 == 0, "AER DW0 bits 31:24 are reserved: {dw0:#x}");
        AerDone { conn: tag.conn() as u16, gen: tag.gen(), cid: tag.slot(), dw0 }
    }
}

impl Word for AerDone {
    fn to_word(self) -> u64 {
        ((self.conn as u64 & 0xFFF) << 52) | ((self.gen as u64 & 0xFFF) << 40) | ((self.cid as u64) << 24) | (self.dw0 as u64 & 0xFF_FFFF)
    }
    fn from_word(w: u64) -> Self {
        AerDone { conn: (w >> 52) as u16, gen: ((w >> 40) & 0xFFF) as u16, cid: (w >> 24) as u16, dw0: (w & 0xFF_FFFF) as u32 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gone_records_travel_as_one_word() {
        for m in [ToOwner::Qp(Qpn(0), 0), ToOwner::Qp(Qpn(0xff_ffff), 4095), ToOwner::Key(0, Lkey(0)), ToOwner::Key(4095, Lkey(u32::MAX)), ToOwner::Mem(0), ToOwner::Mem(4095), ToOwner::Attached(Qpn(0xff_ffff)), ToOwner::Refused(Qpn(0xff_ffff), 4095), ToOwner::Broken, ToOwner::ArmSrq, ToOwner::Dreq(Qpn(0)), ToOwner::Dreq(Qpn(0xff_ffff))] {
            assert_eq!(ToOwner::from_word(m.to_word()), m);
        }
        for m in [ToGroup::Detach(Qpn(0)), ToGroup::Detach(Qpn(0xff_ffff)), ToGroup::Drop(0), ToGroup::Drop(4095)] {
            assert_eq!(ToGroup::from_word(m.to_word()), m);
        }
        for m in [AerDone { conn: 0, gen: 0, cid: 0, dw0: 0 }, AerDone { conn: 4095, gen: 4095, cid: 0xFFFF, dw0: 0xFF_FFFF }, AerDone { conn: 7, gen: 1, cid: 3, dw0: crate::wire::AEN_NS_CHANGED }] {
            assert_eq!(AerDone::from_word(m.to_word()), m);
        }
        assert_eq!(Attach::from_word(Attach(4095).to_word()), Attach(4095));
    }
}
