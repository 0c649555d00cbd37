//! A poll group's I/O on a namespace it has no handle of (its store makes none: a local NVMe
//! namespace whose drive granted fewer I/O queues than namespaces × groups, or a store of a
//! kind that serves through itself alone): the group decodes and checks the command as on a
//! handle of its own ([`exec_ns`](super::io::exec_ns) over an [`OwnerStore`]), and each block
//! I/O goes to the controller owner as a record ([`IoRequest`]: the namespace, the I/O, its
//! buffer a typed DMA slice of the group's memory or the namespace's) on a ring of the group's
//! own; the owner submits it to the core's store ([`Core::take_via_owner`]) and answers its
//! completion on a ring back ([`IoAnswer`]: tag and status, [`Core::answer_via_owner`]), which
//! the group takes in its turn with its handles' completions ([`ViaOwner::poll`]). Room for
//! [`VIA_OWNER_ROOM`] records each way, reserved when the group is made; a command that finds
//! it taken is held by the transport and executed again ([`Action::Busy`]), so the ring back
//! never overflows. Nothing of the core is read or written by the group.

use blockdev::{BlockDevice, BlockDone, BlockError, BlockIo, BlockOp, OpLimits};
use hal::DmaSlice;

use super::io::NsAt;
use super::rdma::handoff::{self, Consumer, Producer, Record, MAX_WORDS};
use super::*;

/// Block I/Os a group may have at the owner at once (sent and not answered): the room of
/// each of its two rings. At least a Dataset Management command's most ranges (256, each its
/// own Deallocate), so any command goes once the group's earlier I/Os are answered.
pub(super) const VIA_OWNER_ROOM: usize = 512;

/// One block I/O a group sends the owner for namespace `ns` of subsystem `subsys`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct IoRequest {
    subsys: u16,
    ns: u16,
    io: BlockIo,
}

fn op_code(op: BlockOp) -> u64 {
    match op {
        BlockOp::Read => 0,
        BlockOp::Write => 1,
        BlockOp::Flush => 2,
        BlockOp::WriteZeroes => 3,
        BlockOp::Deallocate => 4,
        BlockOp::Compare => 5,
    }
}

fn code_op(c: u64) -> BlockOp {
    match c {
        0 => BlockOp::Read,
        1 => BlockOp::Write,
        2 => BlockOp::Flush,
        3 => BlockOp::WriteZeroes,
        4 => BlockOp::Deallocate,
        _ => BlockOp::Compare,
    }
}

impl Record for IoRequest {
    const WORDS: usize = 6;
    fn to_words(self) -> [u64; MAX_WORDS] {
        let io = self.io;
        let head = self.subsys as u64 | (self.ns as u64) << 16 | op_code(io.op) << 32 | (io.fua as u64) << 40;
        let [paddr, len] = io.buf.to_words();
        [head, io.lba, io.blocks as u64, paddr, len, io.tag, 0, 0]
    }
    fn from_words(w: &[u64; MAX_WORDS]) -> Self {
        let io = BlockIo { op: code_op(w[0] >> 32 & 0xFF), lba: w[1], blocks: w[2] as u32, buf: DmaSlice::from_words([w[3], w[4]]), tag: w[5], fua: w[0] >> 40 & 1 == 1 };
        IoRequest { subsys: w[0] as u16, ns: (w[0] >> 16) as u16, io }
    }
}

/// The owner's answer to an [`IoRequest`]: the I/O's tag and the status its completion (or
/// the store's refusal) maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct IoAnswer {
    tag: u64,
    status: Status,
}

impl Record for IoAnswer {
    const WORDS: usize = 2;
    fn to_words(self) -> [u64; MAX_WORDS] {
        [self.tag, self.status.to_field() as u64, 0, 0, 0, 0, 0, 0]
    }
    fn from_words(w: &[u64; MAX_WORDS]) -> Self {
        IoAnswer { tag: w[0], status: Status::from_field(w[1] as u16) }
    }
}

/// What a group keeps of a namespace it has no handle of, copied from the store when the
/// group is made: its geometry and limits, whether it deallocates, and its direct memory
/// (the store's own, so zero-copy transfers and their claims work as on the store).
#[derive(Debug, Clone, Copy)]
pub(super) struct NsShape {
    block_size: u32,
    num_blocks: u64,
    max_transfer_blocks: u32,
    limits: OpLimits,
    deallocates: bool,
    region: Option<DmaSlice>,
}

impl NsShape {
    pub(super) fn of<D: BlockDevice>(dev: &D) -> NsShape {
        NsShape {
            block_size: dev.block_size(),
            num_blocks: dev.num_blocks(),
            max_transfer_blocks: dev.max_transfer_blocks(),
            limits: dev.op_limits(),
            deallocates: dev.supports(BlockOp::Deallocate),
            region: dev.direct_region(),
        }
    }
}

/// A group's ends of its two rings to and from the owner, and its I/Os at the owner now.
pub(super) struct ViaOwner {
    tx: Producer<IoRequest>,
    rx: Consumer<IoAnswer>,
    out: usize,
}

/// The owner's ends of one group's rings ([`Core::take_via_owner`], [`Core::answer_via_owner`]),
/// named by the group table they were made with (`id`).
pub(super) struct OwnerIo {
    id: u64,
    rx: Consumer<IoRequest>,
    tx: Producer<IoAnswer>,
}

impl ViaOwner {
    /// A group's ends and the owner's, room for [`VIA_OWNER_ROOM`] records each way; `Err` if
    /// the memory is not there. Slow path.
    pub(super) fn rings(id: u64) -> Result<(ViaOwner, OwnerIo), ()> {
        let (tx, owner_rx) = handoff::ring(VIA_OWNER_ROOM)?;
        let (owner_tx, rx) = handoff::ring(VIA_OWNER_ROOM)?;
        Ok((ViaOwner { tx, rx, out: 0 }, OwnerIo { id, rx: owner_rx, tx: owner_tx }))
    }

    /// Room for `need` more block I/Os at the owner.
    #[inline]
    pub(super) fn has_room(&self, need: usize) -> bool {
        self.out + need <= VIA_OWNER_ROOM
    }

    /// Block I/Os at the owner now (sent, not answered).
    pub(super) fn outstanding(&self) -> usize {
        self.out
    }

    /// The owner's answers: `f(tag, status)` per answer, at most `max`. Returns how many.
    pub(super) fn poll(&mut self, max: usize, f: &mut impl FnMut(u64, Status)) -> usize {
        let mut k = 0;
        while k < max {
            let Some(a) = self.rx.pop() else { break };
            self.out = self.out.saturating_sub(1);
            f(a.tag, a.status);
            k += 1;
        }
        k
    }
}

/// Namespace `at` of a group that has no handle of it, as the store [`exec_ns`](super::io::exec_ns)
/// and [`submit_fetched`](super::io::submit_fetched) run on: its shape, and a submission that
/// is a record to the owner (`ends`; `None`: only asked where its memory is, for
/// [`modified_direct`](super::io::modified_direct)). Its completions come by [`ViaOwner::poll`].
pub(super) struct OwnerStore<'a> {
    pub(super) shape: &'a NsShape,
    pub(super) at: NsAt,
    pub(super) ends: Option<&'a mut ViaOwner>,
}

impl BlockDevice for OwnerStore<'_> {
    fn block_size(&self) -> u32 {
        self.shape.block_size
    }
    fn num_blocks(&self) -> u64 {
        self.shape.num_blocks
    }
    fn max_transfer_blocks(&self) -> u32 {
        self.shape.max_transfer_blocks
    }
    fn op_limits(&self) -> OpLimits {
        self.shape.limits
    }
    fn supports(&self, op: BlockOp) -> bool {
        op != BlockOp::Deallocate || self.shape.deallocates
    }
    /// A record to the owner; a Deallocate the store does not do is refused here, as the store
    /// would (Dataset Management skips it); full cannot happen (the caller checked the room,
    /// [`ViaOwner::has_room`]).
    fn submit(&mut self, io: &BlockIo) -> Result<(), BlockError> {
        if !self.supports(io.op) {
            return Err(BlockError::Unsupported);
        }
        let ends = self.ends.as_deref_mut().ok_or(BlockError::Unsupported)?;
        if !ends.has_room(1) {
            return Err(BlockError::QueueFull);
        }
        ends.tx.push(IoRequest { subsys: self.at.subsys, ns: self.at.ns, io: *io }).map_err(|_| BlockError::QueueFull)?;
        ends.out += 1;
        Ok(())
    }
    /// The answers of all the group's namespaces come by [`ViaOwner::poll`], none here.
    fn poll(&mut self, _out: &mut [BlockDone]) -> usize {
        0
    }
    fn direct(&self, lba: u64, blocks: u32) -> Option<DmaSlice> {
        if blocks == 0 || lba >= self.shape.num_blocks {
            return None;
        }
        let bs = self.shape.block_size as usize;
        self.shape.region?.sub(lba as usize * bs, blocks as usize * bs)
    }
    fn direct_region(&self) -> Option<DmaSlice> {
        self.shape.region
    }
}

impl<B: BlockDevice> Core<B> {
    /// The owner's ends for group table `id` of poll group `group` (replacing a released or
    /// broken group's of that number). Slow path.
    pub(super) fn keep_owner_io(&mut self, group: usize, ends: OwnerIo) {
        if self.via_owner.len() <= group {
            self.via_owner.resize_with(group + 1, || None);
        }
        self.via_owner[group] = Some(ends);
    }

    /// Drop the owner's ends of group table `id` of poll group `group` (the group goes), unless
    /// a newer table of that number holds them. Slow path.
    pub(super) fn drop_owner_io(&mut self, group: usize, id: u64) {
        if let Some(e) = self.via_owner.get_mut(group).filter(|e| e.as_ref().is_some_and(|o| o.id == id)) {
            *e = None;
        }
    }

    /// The owner's look at poll group `group`'s block I/O for namespaces it has no handle of:
    /// each submitted to the namespace's store (counted in the core's in-flight I/O, timed by
    /// the namespace's device latency, its completion answered by [`Core::answer_via_owner`]),
    /// one the store refuses answered at once with its status. Returns how many.
    pub fn take_via_owner(&mut self, group: usize) -> usize {
        let Some(Some(o)) = self.via_owner.get_mut(group) else { return 0 };
        let mut n = 0;
        while let Some(r) = o.rx.pop() {
            n += 1;
            let store = self.subsystems.get_mut(r.subsys as usize).and_then(|s| {
                let lat = s.ns_lat.get_mut(r.ns as usize)?;
                Some((&mut s.cfg.namespaces.get_mut(r.ns as usize)?.dev, lat))
            });
            let res = match store {
                Some((dev, lat)) => devlat::submit(dev, lat.as_mut(), &r.io),
                None => Err(BlockError::Unsupported),
            };
            match res {
                Ok(()) => self.inflight += 1,
                // Room for every I/O the group has out (it sends no more than that).
                Err(e) => {
                    let answered = o.tx.push(IoAnswer { tag: r.io.tag, status: blk_status(e) }).is_ok();
                    debug_assert!(answered, "via-owner ring back to group {group} full");
                }
            }
        }
        n
    }

    /// Block completion `tag` (status `st`) of an I/O poll group `group` sent
    /// ([`Core::take_via_owner`]), answered on its ring back; false when the group has no ring
    /// (gone) or it is full (cannot happen: room for every I/O the group has out).
    pub fn answer_via_owner(&mut self, group: usize, tag: u64, st: Status) -> bool {
        match self.via_owner.get_mut(group) {
            Some(Some(o)) => o.tx.push(IoAnswer { tag, status: st }).is_ok(),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use crate::nvmet::{NamespaceConfig, SubsystemConfig, TargetConfig};
    use alloc::vec::Vec;
    use blockdev::NullNamespace;

    /// A null namespace that makes no I/O handle (a store that serves through itself alone).
    struct OwnOnly(NullNamespace);

    impl BlockDevice for OwnOnly {
        fn block_size(&self) -> u32 {
            self.0.block_size()
        }
        fn num_blocks(&self) -> u64 {
            self.0.num_blocks()
        }
        fn max_transfer_blocks(&self) -> u32 {
            self.0.max_transfer_blocks()
        }
        fn submit(&mut self, io: &BlockIo) -> Result<(), BlockError> {
            self.0.submit(io)
        }
        fn poll(&mut self, out: &mut [BlockDone]) -> usize {
            self.0.poll(out)
        }
    }

    fn flush(cid: u16) -> Sqe {
        let mut s = Sqe::zeroed();
        s.opcode = io_op::FLUSH;
        s.nsid = U32::new(1);
        s.cid = U16::new(cid);
        s
    }

    /// A poll group without a handle of the namespace sends its I/O to the owner: room's worth
    /// of Flushes go as records (the core's store sees none until the owner takes them), one
    /// more is `Busy` (nothing sent, not counted); the owner submits them to the store and its
    /// completions come back on the group's ring, each with its tag, after which the group has
    /// room again.
    #[test]
    fn a_groups_io_beyond_its_room_at_the_owner_is_busy_until_the_answers_come_back() {
        let ns = NamespaceConfig { nsid: 1, dev: OwnOnly(NullNamespace::new(2048, 512)), nguid: [1; 16] };
        let subs = alloc::vec![SubsystemConfig { nqn: "nqn.t".into(), serial: "s".into(), model: "m".into(), hosts: alloc::vec![], allow_any_host: true, namespaces: alloc::vec![ns] }];
        let mut core = Core::new(TargetConfig::default(), subs).expect("core");
        let mut g = core.group_io(0);
        assert_eq!(g.handles(), 0, "no handle of its own");
        let mut counts = core.io_counts();
        let mut q = QueueState { qid: 1, cntlid: Some(1), enabled: true, ..QueueState::default() };
        let data = |tag| DataIn { bytes: &[], buf: DmaSlice::EMPTY, sgl_len: 0, tag, fetched: true };
        let mut due = false;
        for i in 0..VIA_OWNER_ROOM {
            assert_eq!(g.execute(&mut q, &flush(i as u16), &data(i as u64), 0, &mut counts, &mut due), Action::Submitted { count: 1 }, "Flush {i}");
        }
        assert!(due, "the owner is asked to take the records");
        assert_eq!(g.execute(&mut q, &flush(999), &data(999), 0, &mut counts, &mut due), Action::Busy);
        assert!(!core.block_inflight(), "nothing at the store before the owner takes the records");
        assert_eq!(core.take_via_owner(0), VIA_OWNER_ROOM);
        // The null store takes what its queue holds; the owner answers the rest at once with
        // the store's refusal (full), as the core's own path answers it.
        let at_store = core.block_inflight_count();
        assert!(at_store > 0 && at_store <= VIA_OWNER_ROOM as u64, "{at_store}");
        assert_eq!(g.inflight_count(), 0, "the group's own handles have none");
        let mut done = Vec::new();
        while core.poll_block(32, |t, s| done.push((t, s))) > 0 {}
        for &(t, s) in &done {
            assert!(core.answer_via_owner(0, t, s));
        }
        let mut got = Vec::new();
        assert_eq!(g.poll(2 * VIA_OWNER_ROOM, |t, s| got.push((t, s))), VIA_OWNER_ROOM);
        got.sort_by_key(|g| g.0);
        assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), (0..VIA_OWNER_ROOM as u64).collect::<Vec<_>>(), "each tag answered once");
        let full = blk_status(BlockError::QueueFull);
        assert_eq!(got.iter().filter(|g| g.1 == Status::SUCCESS).count() as u64, at_store, "the store's completions");
        assert!(got.iter().all(|g| g.1 == Status::SUCCESS || g.1 == full), "the rest the store's refusal");
        assert!(!g.inflight());
        assert_eq!(g.execute(&mut q, &flush(999), &data(999), 0, &mut counts, &mut due), Action::Submitted { count: 1 }, "room again");
        assert_eq!((counts.ns[0].via_owner, counts.ns[0].flushes_forwarded), (VIA_OWNER_ROOM as u64 + 1, VIA_OWNER_ROOM as u64 + 1));
    }
}
