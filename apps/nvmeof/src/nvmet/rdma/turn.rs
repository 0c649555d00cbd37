//! A poll group's turn and what it shares: the per-I/O code (`dispatch.rs`, `data.rs`) is
//! methods of [`TurnShared`] handed the one group it works on (`&mut PollGroup`), never the
//! core or the whole target, so a group's turn reaches no other group. What the turn cannot do
//! with its group alone it leaves on the group for the owner ([`PollGroup::owner_due`]), who
//! does it when the turn's call returns: a command the owner executes (every admin-queue and
//! Fabrics command, forwarded as a record, `forward.rs`: counts of every queue folded first,
//! Connect's admission with device memory, a reset's I/O queues closed) and the other groups'
//! queues of a controller whose admin queue the turn closed.

use super::*;

/// What the poll groups' turns share with one another and with the owner (handed to each turn
/// call beside the group): namespace memory registered for zero-copy transfers and the
/// turnaround clock, both only read by the turns. (Each group keeps its own zero-copy
/// ranges, `PollGroup::inflight`, ordered against the other groups' by their stripe counts.)
pub(super) struct TurnShared {
    /// Namespace memory registered for zero-copy reads and writes.
    pub(super) ns_mrs: Vec<NsMr>,
    pub(super) clock: Option<fn() -> u64>,
}

impl TurnShared {
    pub(super) fn new() -> TurnShared {
        TurnShared { ns_mrs: Vec::new(), clock: None }
    }

    /// The key of the registration holding an I/O (at most `max_io_bytes`) that starts at `addr`.
    /// (`#[inline]`: on every zero-copy command's path, called from generic code.)
    #[inline]
    pub(super) fn ns_lkey(&self, addr: u64) -> Option<Lkey> {
        let m = self.ns_mrs.iter().find(|m| addr >= m.base && addr - m.base < m.len)?;
        m.lkeys.get(((addr - m.base) / m.chunk) as usize).copied()
    }
}

impl<V: GroupVerbs, B: BlockDevice> PollGroup<V, B> {
    /// The turn closed the admin queue of controller `cntlid` (and its queues in this group):
    /// the group's queues of it execute no more I/O, the owner closes its queues in the other
    /// groups.
    #[cold]
    pub(super) fn closed_ctrl(&mut self, cntlid: u16) {
        self.ctrl_gone(cntlid);
        // Room for one per queue of the group, reserved at creation; a queue is closed once.
        if self.closed_ctrls.len() < self.closed_ctrls.capacity() {
            self.closed_ctrls.push(cntlid);
        }
        self.owner_due = true;
    }

    /// Controller `cntlid` is going (its admin queue closed; the core frees it when the owner
    /// drains the queue's record): clear [`crate::nvmet::QueueState::enabled`] of the group's
    /// I/O queues of it, draining ones too (a fetched Write may still come to execute).
    #[cold]
    pub(super) fn ctrl_gone(&mut self, cntlid: u16) {
        for c in self.conns[..self.hi].iter_mut().flatten() {
            if c.q.qid != 0 && c.q.cntlid == Some(cntlid) {
                c.q.enabled = false;
            }
        }
    }
}

impl<V: GroupVerbs, B: BlockDevice> RdmaTarget<V, B> {
    /// Group `gi`'s turn state and what the turns share, borrowed apart (a turn takes no
    /// part of the core).
    #[inline(always)]
    pub(super) fn turn_parts(&mut self, gi: usize) -> (&mut TurnShared, &mut PollGroup<V, B>) {
        (&mut self.shared, &mut self.groups[gi])
    }

    /// What group `gi`'s turn call left to the owner ([`PollGroup::owner_due`]): its closed
    /// controllers' queues in the other groups, then the commands it forwarded.
    #[cold]
    #[inline(never)]
    pub(super) fn owner_step(&mut self, verbs: &mut V, gi: usize, now_ns: u64) {
        loop {
            // The block I/O the turn sent for namespaces the group has no handle of, to their
            // stores (`Core::take_via_owner`; answered from the owner's block drain).
            self.core.take_via_owner(gi);
            // The queues the turn closed into the core first (an admin queue's controller freed).
            self.take_gone_queues();
            // The group's failed commands into their controllers' error logs.
            if let Some(g) = self.groups.get_mut(gi).filter(|g| g.nsio.has_notes()) {
                self.core.take_error_notes(&mut g.nsio);
            }
            self.close_ctrls_elsewhere(gi);
            // The turn may have freed a controller (its admin queue closed).
            self.refresh_enabled();
            let Some(g) = self.groups.get_mut(gi) else { return };
            g.owner_due = false;
            if !self.execute_forwarded(verbs, gi, now_ns) {
                return;
            }
        }
    }

    /// The queues of the controllers whose admin queue group `gi` closed, in the other groups
    /// (group, then index order).
    pub(super) fn close_ctrls_elsewhere(&mut self, gi: usize) {
        while let Some(id) = self.groups.get_mut(gi).and_then(|g| g.closed_ctrls.pop()) {
            for g in self.groups.iter_mut() {
                g.ctrl_gone(id);
            }
            let mut at = QueueAt { g: 0, i: 0 };
            while let Some(j) = self.find_conn_from(at, &|o| o.q.cntlid == Some(id)) {
                if j.g != gi {
                    self.close_queue(j, true);
                }
                at = QueueAt { g: j.g, i: j.i + 1 };
            }
        }
    }
}
