//! A queue a poll group's turn closed, as it reaches the device's owner: a record of its
//! identity and last counts on the group's ring of closed queues, which the owner hands to
//! `Core::queue_gone` when it drains the ring (an admin queue's frees its controller) (README, "NVMe-oF target poll groups on their
//! own CPUs").

use super::handoff::{Record, MAX_WORDS};
use crate::nvmet::{auth::Gate, CtrlSlot, QueueCounters, QueueState};

/// What `Core::queue_gone` reads of a closed queue: its QID, controller (ID and slot),
/// authentication gate and its counts not yet folded into the controller. Eight words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct GoneQueue {
    pub(super) qid: u16,
    pub(super) cntlid: Option<u16>,
    pub(super) ctrl_slot: CtrlSlot,
    pub(super) auth: Gate,
    pub(super) io: QueueCounters,
}

impl GoneQueue {
    /// The record of queue `q`.
    pub(super) fn of(q: &QueueState) -> GoneQueue {
        GoneQueue { qid: q.qid, cntlid: q.cntlid, ctrl_slot: q.ctrl_slot, auth: q.auth, io: q.io }
    }

    /// The queue as `Core::queue_gone` reads it (its other fields are not looked at).
    pub(super) fn queue(&self) -> QueueState {
        QueueState { qid: self.qid, cntlid: self.cntlid, ctrl_slot: self.ctrl_slot, auth: self.auth, io: self.io, ..QueueState::default() }
    }
}

impl Record for GoneQueue {
    const WORDS: usize = 8;
    fn to_words(self) -> [u64; MAX_WORDS] {
        let id = ((self.qid as u64) << 48) | ((self.cntlid.is_some() as u64) << 47) | ((self.cntlid.unwrap_or(0) as u64) << 16) | self.ctrl_slot.0 as u64;
        let auth = gate_word(self.auth);
        let c = self.io;
        [id, auth, c.last_seen_ns, c.commands, c.host_reads, c.host_writes, c.blocks_read_512, c.blocks_written_512]
    }
    fn from_words(w: &[u64; MAX_WORDS]) -> Self {
        let auth = word_gate(w[1]);
        let io = QueueCounters { last_seen_ns: w[2], commands: w[3], host_reads: w[4], host_writes: w[5], blocks_read_512: w[6], blocks_written_512: w[7] };
        GoneQueue { qid: (w[0] >> 48) as u16, cntlid: (w[0] >> 47 & 1 == 1).then_some((w[0] >> 16) as u16), ctrl_slot: CtrlSlot(w[0] as u16), auth, io }
    }
}

/// Authentication gate `g` in bits 0..40 and 62..64 of a word (bits 40..62 left 0 for the
/// caller's use; [`word_gate`] ignores them).
pub(super) fn gate_word(g: Gate) -> u64 {
    match g {
        Gate::Open => 0,
        Gate::Pending { slot, policy, steps } => (1 << 62) | ((slot as u64) << 24) | ((policy as u64) << 8) | steps as u64,
        Gate::Failed => 2 << 62,
    }
}

/// The gate [`gate_word`] put in `w`.
pub(super) fn word_gate(w: u64) -> Gate {
    match w >> 62 {
        0 => Gate::Open,
        1 => Gate::Pending { slot: (w >> 24) as u16, policy: (w >> 8) as u16, steps: w as u8 },
        _ => Gate::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gone_queue_travels_whole() {
        let io = QueueCounters { last_seen_ns: u64::MAX, commands: 1, host_reads: 2, host_writes: 3, blocks_read_512: 4, blocks_written_512: u64::MAX - 1 };
        for (cntlid, auth) in [(None, Gate::Open), (Some(0xFFEF), Gate::Pending { slot: 0xFFFF, policy: 7, steps: 255 }), (Some(0), Gate::Failed)] {
            let m = GoneQueue { qid: 0xFFFF, cntlid, ctrl_slot: CtrlSlot(4095), auth, io };
            assert_eq!(GoneQueue::from_words(&m.to_words()), m);
        }
    }

    /// Eight-word records on a ring of room 2: whole, in order, full at its room, across the wrap.
    #[test]
    fn gone_queues_fill_a_ring_whole_and_in_order() {
        let (mut p, mut c) = super::super::handoff::ring::<GoneQueue>(2).expect("ring");
        let q = |n: u64| GoneQueue { qid: n as u16, cntlid: Some(1), ctrl_slot: CtrlSlot(0), auth: Gate::Open, io: QueueCounters { commands: n, blocks_written_512: n << 32, ..QueueCounters::default() } };
        let mut next = 0;
        for round in 0..3 {
            assert_eq!((p.push(q(2 * round)), p.push(q(2 * round + 1))), (Ok(()), Ok(())));
            assert_eq!(p.push(q(99)), Err(q(99)), "full at its room");
            assert_eq!(c.len(), 2);
            while let Some(m) = c.pop() {
                assert_eq!(m, q(next));
                next += 1;
            }
        }
        assert_eq!(next, 6);
    }
}
