//! nvme flush: Flushes that share one drive Flush. A Flush asks the drive to make durable what
//! it completed before the Flush was submitted; so one drive Flush not yet handed to the drive
//! (its SQE written, the doorbell not yet rung) serves every Flush of the same namespace that
//! arrives before the doorbell: they join it, and complete with its result when it completes.
//! A Flush arriving after the doorbell needs a command of its own. Fixed tables, no allocation;
//! the completion path looks here only while a group is in flight.

use blockdev::{BlockDone, BlockError};

/// Flushes that may join one drive Flush (beyond it, a new command is issued).
pub const JOIN_MAX: usize = 16;
/// Drive Flushes with joined Flushes in flight at once.
const GROUPS: usize = 4;
const READY: usize = GROUPS * JOIN_MAX;

#[derive(Debug, Clone, Copy, Default)]
struct Group {
    /// Tag of the drive Flush (the first host Flush).
    leader: u64,
    joined: [u64; JOIN_MAX],
    n: usize,
    used: bool,
}

/// The joinable Flush, the groups in flight and the joined completions not yet reported.
pub struct FlushJoin {
    groups: [Group; GROUPS],
    /// Groups in flight (0: completions need no look here).
    active: usize,
    /// The group whose Flush is queued and not yet rung: later Flushes may join it.
    open: Option<usize>,
    ready: [BlockDone; READY],
    head: usize,
    len: usize,
    /// Flushes answered by another Flush's drive command.
    pub joined: u64,
}

impl Default for FlushJoin {
    fn default() -> Self {
        FlushJoin {
            groups: [Group::default(); GROUPS],
            active: 0,
            open: None,
            ready: [BlockDone { tag: 0, result: Ok(()) }; READY],
            head: 0,
            len: 0,
            joined: 0,
        }
    }
}

impl FlushJoin {
    /// A Flush for `tag` arrives: true when it joined the open group (no command needed).
    pub fn try_join(&mut self, tag: u64) -> bool {
        let Some(g) = self.open.map(|i| &mut self.groups[i]) else { return false };
        if g.n == JOIN_MAX {
            return false;
        }
        g.joined[g.n] = tag;
        g.n += 1;
        self.joined += 1;
        true
    }

    /// A drive Flush for `tag` was queued (not yet rung): later Flushes may join it while a
    /// group is free.
    pub fn queued(&mut self, tag: u64) {
        if let Some(i) = self.groups.iter().position(|g| !g.used) {
            self.groups[i] = Group { leader: tag, used: true, ..Group::default() };
            self.active += 1;
            self.open = Some(i);
        } else {
            self.open = None;
        }
    }

    /// The doorbell was rung: the queued Flush is the drive's now; nothing joins it any more.
    #[inline]
    pub fn rung(&mut self) {
        self.open = None;
    }

    /// Command `tag` completed with `result`; when it is a drive Flush with joined Flushes,
    /// their completions (the same result) wait in [`drain`](Self::drain).
    #[inline]
    pub fn completed(&mut self, tag: u64, result: Result<(), BlockError>) {
        if self.active == 0 {
            return;
        }
        let Some(i) = self.groups.iter().position(|g| g.used && g.leader == tag) else { return };
        let g = self.groups[i];
        for &t in &g.joined[..g.n] {
            // Room for every joined Flush of every group: never full.
            self.ready[(self.head + self.len) % READY] = BlockDone { tag: t, result };
            self.len += 1;
        }
        self.groups[i].used = false;
        self.active -= 1;
        if self.open == Some(i) {
            self.open = None;
        }
    }

    /// Report joined completions into `out`; returns how many.
    #[inline]
    pub fn drain(&mut self, out: &mut [BlockDone]) -> usize {
        let n = core::cmp::min(out.len(), self.len);
        for o in out.iter_mut().take(n) {
            *o = self.ready[self.head];
            self.head = (self.head + 1) % READY;
        }
        self.len -= n;
        n
    }

    /// Joined Flushes not yet reported (waiting for their drive Flush or in `ready`).
    pub fn pending(&self) -> usize {
        self.len + self.groups.iter().filter(|g| g.used).map(|g| g.n).sum::<usize>()
    }
}
