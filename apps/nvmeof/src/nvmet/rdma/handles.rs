//! The poll groups' own I/O handles as the target drives them (`nvmet::GroupIo`, one per
//! group): each group's turn polls its own handles' completions in its own batch (its
//! commands only, never the owner's poll over the core's stores), and the owner copies the
//! namespaces' changing facts into every group's table and takes a failed handle's namespace
//! out of service for all of them.

use super::*;

impl<V: GroupVerbs, B: BlockDevice> RdmaTarget<V, B> {
    /// Copy the namespaces' changing facts (out of service, direct memory) into every poll
    /// group's table (`Core::refresh_group_io`). Slow path.
    pub(super) fn refresh_group_io(&mut self) {
        for g in self.groups.iter_mut() {
            self.core.refresh_group_io(&mut g.nsio);
        }
    }

    /// Group `gi` noted a handle failed: the owner takes its namespace out of service
    /// (announced once) and tells every group.
    #[cold]
    #[inline(never)]
    pub(super) fn take_group_failures(&mut self, gi: usize) {
        let Some(g) = self.groups.get_mut(gi) else { return };
        if self.core.take_group_failures(&mut g.nsio) > 0 {
            self.refresh_group_io();
        }
    }

    /// Group `gi`'s completions from its own handles (`GroupIo::poll`), in its batch, until
    /// its handles have none; a handle that failed goes to the owner
    /// ([`RdmaTarget::take_group_failures`]).
    pub(super) fn drain_group_io(&mut self, verbs: &mut V, gi: usize) -> usize {
        let mut work = 0;
        loop {
            let Some(g) = self.groups.get_mut(gi) else { return work };
            let mut k = 0;
            let n = g.nsio.poll(BLOCK_BATCH, into_batch(&mut g.block_done, &mut k));
            work += self.end_block_batch(verbs, gi, n, k);
            if self.groups.get(gi).is_some_and(|g| g.nsio.failed_note()) {
                self.take_group_failures(gi);
            }
            if n < BLOCK_BATCH {
                return work;
            }
        }
    }
}
