//! Poll groups of the RDMA transport (SPDK's poller model): each group owns one CQ that the
//! send and receive completions of all its QPs go to, and one SRQ whose receive buffers all its
//! QPs share, so receive memory grows with groups, not connections. Buffers come back to the
//! group as their commands are answered and are re-posted in one batch per turn; the SRQ limit
//! is armed at a low-water mark and its events counted (below it, and with the SRQ empty the
//! host's adapter is sent RNR NAKs and retries). A receive completion names its buffer; the
//! queue is found from the completion's QPN through the group's QPN table (one hash probe, no
//! search over queues). The group's CQ, SRQ and QPs are made through `rdma::GroupVerbs`: on mlx5
//! the group holds its own data path object (`mlx5::QueueGroup`: rings and a doorbell page of its
//! own), which every post and poll of the group goes through.

use alloc::collections::VecDeque;
use alloc::vec::Vec;

use blockdev::BlockDevice;
use hal::DmaRegion;
use rdma::{Completion, Cqn, DataPath, GroupVerbs, Lkey, Qpn, RecvWr, Sge, Srqn};

use super::forward::{self, GroupForwarding, OwnerForwarding};
use super::gone_queue::GoneQueue;
pub(super) use super::group_msgs::{AerDone, Attach, ToGroup, ToOwner};
use super::handoff::{self, Bell, Consumer, Producer};
use super::ranges::{InFlight, RangeId};
use super::stripes::GroupStripes;
use super::wr_id::{Kind, WrId};
use super::{Conn, QueueAnswer, QueueAt, SlotState, TransportStats, BLOCK_BATCH};
use crate::bench::Histogram;
use crate::nvmet::{Core, GroupIo, IoCounts, QueueState};
use crate::wire::{cm_rej, RdmaCmRej, Status};
use zerocopy::byteorder::little_endian::U16;

/// Per-group counters (cumulative over the group's lives: a group released with its last
/// queue adds its counts to the target's totals for that group number).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupStats {
    /// Queues handed to this group, and those of them live now.
    pub queues_assigned: u64,
    pub queues_live: u64,
    /// Completions polled from the group's CQ, and capsules received through its SRQ.
    pub completions: u64,
    pub capsules: u64,
    /// Receive buffers re-posted to the SRQ, and the batches they went in.
    pub srq_reposts: u64,
    pub srq_batches: u64,
    /// Times the SRQ ran below its armed low-water mark (`SRQ limit reached` events).
    pub srq_limit_events: u64,
    /// Capsules that arrived on a queue with every slot busy (the host overran its queue
    /// depth; the queue is closed).
    pub slot_overruns: u64,
}

impl GroupStats {
    /// `self` with `o`'s counts added (`queues_live` is `o`'s: a gauge).
    pub fn plus(self, o: GroupStats) -> GroupStats {
        GroupStats {
            queues_assigned: self.queues_assigned + o.queues_assigned,
            queues_live: o.queues_live,
            completions: self.completions + o.completions,
            capsules: self.capsules + o.capsules,
            srq_reposts: self.srq_reposts + o.srq_reposts,
            srq_batches: self.srq_batches + o.srq_batches,
            srq_limit_events: self.srq_limit_events + o.srq_limit_events,
            slot_overruns: self.slot_overruns + o.slot_overruns,
        }
    }
}

/// QPN → queue index, open addressing with linear probing and backward-shift deletion; sized
/// at twice the group's queue bound, so a lookup is one probe on average.
pub(super) struct QpTable {
    keys: Vec<u32>,
    vals: Vec<u16>,
    mask: usize,
}

/// An empty table entry (QPN 0 is the SMI QP, never an RC QP).
const EMPTY: u32 = 0;

/// Bytes of a group's buffer for small host→controller payloads (`PollGroup::scratch_in`).
const SCRATCH_IN: usize = 4096;

impl QpTable {
    fn new(queues: usize) -> QpTable {
        let n = (2 * queues.max(1)).next_power_of_two();
        QpTable { keys: alloc::vec![EMPTY; n], vals: alloc::vec![0; n], mask: n - 1 }
    }
    #[inline(always)]
    fn home(&self, qpn: u32) -> usize {
        (qpn.wrapping_mul(0x9E37_79B1) >> 8) as usize & self.mask
    }
    #[inline(always)]
    pub(super) fn get(&self, qpn: Qpn) -> Option<u16> {
        let mut i = self.home(qpn.0);
        for _ in 0..=self.mask {
            match self.keys[i] {
                EMPTY => return None,
                k if k == qpn.0 => return Some(self.vals[i]),
                _ => i = (i + 1) & self.mask,
            }
        }
        None
    }
    /// False when full (cannot happen: the table has room for twice the group's queues).
    pub(super) fn insert(&mut self, qpn: Qpn, ci: u16) -> bool {
        let mut i = self.home(qpn.0);
        for _ in 0..=self.mask {
            if self.keys[i] == EMPTY || self.keys[i] == qpn.0 {
                self.keys[i] = qpn.0;
                self.vals[i] = ci;
                return true;
            }
            i = (i + 1) & self.mask;
        }
        false
    }
    pub(super) fn remove(&mut self, qpn: Qpn) {
        let mut i = self.home(qpn.0);
        let mut found = false;
        for _ in 0..=self.mask {
            match self.keys[i] {
                EMPTY => return,
                k if k == qpn.0 => {
                    found = true;
                    break;
                }
                _ => i = (i + 1) & self.mask,
            }
        }
        if !found {
            return;
        }
        // Shift later members of the probe run back so lookups never stop early.
        let mut j = i;
        for _ in 0..self.mask {
            j = (j + 1) & self.mask;
            let k = self.keys[j];
            if k == EMPTY {
                break;
            }
            let h = self.home(k);
            let stays = if i <= j { i < h && h <= j } else { i < h || h <= j };
            if !stays {
                self.keys[i] = k;
                self.vals[i] = self.vals[j];
                i = j;
            }
        }
        self.keys[i] = EMPTY;
    }
}

/// A new queue the owner built for a group and has not handed over yet: its `Conn` and its
/// QP, made and connected on the device but not in the group (`GroupVerbs::GroupQp`). Kept
/// in the group by the index the queue will have in `conns` (as freed memory is parked),
/// named by an [`Attach`] record.
pub(super) struct Staged<V: GroupVerbs> {
    pub(super) conn: Conn<V>,
    pub(super) qp: V::GroupQp,
}

/// A freed queue's response and data buffers (and a payload buffer it held before Connect),
/// and a refused queue's QP object, kept by its group until the owner says no key names the
/// memory and the QP is destroyed ([`ToGroup::Drop`]).
pub(super) struct Parked<V: GroupVerbs> {
    /// The queue's QP and generation: ranges of it kept past its close end when the owner
    /// has destroyed the QP ([`ToGroup::Detach`]).
    qpn: Qpn,
    gen: u16,
    rsp: V::Buf,
    data: V::Buf,
    pre_data: Option<V::Buf>,
    qp: Option<V::GroupQp>,
}

/// One poll group: its CQ, SRQ and the SRQ's receive buffers, and what one turn of the group
/// keeps (its held commands, the queues it must ring, its share of the transport's counters),
/// so that a turn of the group writes nothing another group's turn writes (see the design in
/// README's poll groups row: the step toward each group on its own CPU). Named outside the
/// crate only so that an embedding can assert it `Send` for its own verbs and stores (a group
/// value moves to the thread or CPU that drives it): emu-runner's `nvmf.rs` and the image's
/// `appliance::nvmf` do, at compile time.
pub struct PollGroup<V: GroupVerbs, B> {
    /// The group's rings as the device hands them out: its data path (`V::Group` is one).
    pub(super) rings: V::Group,
    pub(super) cq: Cqn,
    pub(super) srq: Srqn,
    /// The completions of the group's turn, polled from its CQ (its own: a group polled on
    /// another thread shares no completion array).
    pub(super) wc: [Completion; 32],
    /// `bufs` receive buffers of `buf_len` bytes each (one capsule).
    pub(super) recv: V::Buf,
    recv_lkey: Lkey,
    pub(super) buf_len: usize,
    bufs: u16,
    /// Buffers given back this turn, posted to the SRQ in one batch at its end.
    repost: Vec<RecvWr>,
    pub(super) qps: QpTable,
    /// The queues handed to this group (live or draining), reached by index (`QueueAt::i`,
    /// the index a `WrId` names): room for the most it takes (its CQ is sized for them).
    pub(super) conns: Vec<Option<Conn<V>>>,
    /// One past the highest index in use in `conns`.
    pub(super) hi: usize,
    /// Live queues (not draining) in `conns`.
    pub(super) live: usize,
    /// The group learned from its device's signals that it can no longer work
    /// ([`PollGroup::check_broken`]): its queues are closed, it takes no new ones, buffers
    /// given back are not re-posted, and it is replaced once no queue refers to it (the owner
    /// learns it from a [`ToOwner::Broken`] record).
    pub(super) broken: bool,
    pub(super) stats: GroupStats,
    /// This group's share of the transport's counters (`RdmaTarget::stats` adds the groups'
    /// shares; a released group's share goes to the target's own).
    pub(super) io: TransportStats,
    /// This group's per-command counts for the core (`Core::execute_counted`), sized by the
    /// owner for the core's namespaces; added on read, folded into the core when the group goes.
    pub(super) counts: IoCounts,
    /// This group's own I/O handles of the core's namespaces (made by the owner with the
    /// group, `Core::group_io`): its Reads and Writes execute and complete on them, its block
    /// completions are polled from them in its turn.
    pub(super) nsio: GroupIo<B>,
    /// Namespace memory this group's zero-copy transfers are using (`ranges.rs`), with its
    /// counts per stripe for the other groups (`stripes.rs`).
    pub(super) inflight: InFlight,
    /// Commands of this group's queues held until overlapping zero-copy transfers are done:
    /// (queue index in `conns`, generation, slot); room for every slot of the queues the group takes.
    pub(super) blocked: VecDeque<(usize, u16, u16)>,
    /// This group's queues (indices in `conns`) with sends written this turn, to ring at its end (overflow: the
    /// group's queues are all looked at).
    pub(super) unrung: heapless::Vec<u16, 64>,
    pub(super) unrung_overflow: bool,
    /// A queue listed in `unrung` has zero-copy Writes to answer at the end of this turn.
    pub(super) has_turn_writes: bool,
    /// A turn call left work to the owner (`RdmaTarget::owner_step`, when the call returns): a
    /// command on its forwarding ring, controllers in `closed_ctrls`.
    pub(super) owner_due: bool,
    /// The group's ends of its forwarding rings (admin-queue and Fabrics commands to the owner,
    /// its answers back, `forward.rs`) and the Connect data buffers the owner staged.
    pub(super) fwd: GroupForwarding<V>,
    /// Controllers whose admin queue the turn closed: their queues in other groups are the
    /// owner's to close. Room for one per queue of the group.
    pub(super) closed_ctrls: Vec<u16>,
    /// The block completions of the batch the group's turn is handling
    /// (`RdmaTarget::drain_block`).
    pub(super) block_done: [(u64, Status); BLOCK_BATCH],
    /// Small host→controller payloads of the group's commands (Connect data, DSM ranges),
    /// copied here for the core to parse.
    pub(super) scratch_in: alloc::boxed::Box<[u8]>,
    /// Receive CQE seen → response SEND posted for the group's commands, in clock units (with
    /// a turnaround clock); `RdmaTarget::turnaround` adds the groups' histograms.
    pub(super) turnaround: alloc::boxed::Box<Histogram>,
    /// Rung when the group puts something on its ring to the owner ([`PollGroup::tell_owner`]);
    /// the one bell of every group of the target (`RdmaTarget::gone_bell`), which the owner
    /// looks at once per `poll`, not at each group.
    owner_bell: Bell,
    /// Queues this group's turns closed or freed, for the device's owner to finish
    /// ([`PollGroup::drain_gone`]), and its answers to new queues: the group's end of its
    /// single-producer ring to the owner (`handoff.rs`), room for its bound reserved at
    /// creation: between two drains a queue index yields at most one `Attached`/`Refused`,
    /// one `Dreq`, one `Qp`, three `Key`s and one `Mem` (the owner stages at an index again only after
    /// draining its `Mem`, [`OwnerEnds::take_index`]), and the group one `Broken` in its life and one `ArmSrq`
    /// (its limit fires once per arming). A push never allocates.
    pub(super) gone: Producer<ToOwner>,
    /// The queues this group's turns closed, for the owner's `Core::queue_gone`
    /// ([`OwnerEnds::take_gone_queues`]): the group's end of its ring of [`GoneQueue`] records,
    /// room for one per queue index (one per queue that joined a controller; an index is staged again only after the owner drained
    /// its `Mem`, and it drains this ring first).
    gone_queues: Producer<GoneQueue>,
    /// The group's end of the ring back from the owner ([`ToGroup`]; the owner's ends are
    /// its [`OwnerEnds`]).
    back_rx: Consumer<ToGroup>,
    /// Freed queues' memory by index in `conns`, until the owner has deregistered its keys.
    pub(super) parked: Vec<Option<Parked<V>>>,
    /// New queues by the index they will have in `conns`, from the owner's staging them
    /// ([`PollGroup::stage`]) until the group takes them in or refuses them
    /// ([`PollGroup::take_new`]; a refused one is parked, its QP destroyed by the owner).
    staged: Vec<Option<Staged<V>>>,
    /// The group's end of the ring of new queues ([`Attach`], room for one per index), looked
    /// at once per turn of the group.
    attach_rx: Consumer<Attach>,
    /// The group's end of the ring of AER completions from the owner ([`AerDone`], room for
    /// every AER its queues may hold: `MAX_AERS` per queue, each completed once).
    pub(super) aer_rx: Consumer<AerDone>,
}

/// The owner's lists that the records of the groups' rings end in ([`PollGroup::drain_gone`]),
/// room for every queue in each, reserved at start.
pub(super) struct Inbox {
    /// The groups' answers to new queues, for `RdmaTarget::take_answer`.
    pub(super) answers: VecDeque<QueueAnswer>,
    /// The QPs of queues the groups' turns closed whose hosts the CM must tell (DREQ), for
    /// `RdmaTarget::take_closed`.
    pub(super) closed: VecDeque<Qpn>,
    /// [`ToOwner::Dreq`] records that found `closed` full (must stay 0; reported as
    /// `TransportStats::closed_overflow`).
    pub(super) closed_overflow: u64,
    /// Closed queues' QPs tried again after the device would not destroy them ([`QpRetry`];
    /// `TransportStats::qp_destroy_retries`), and those still not destroyed after the last
    /// try (`TransportStats::qp_destroy_failed`).
    pub(super) qp_destroy_retries: u64,
    pub(super) qp_destroy_failed: u64,
}

impl Inbox {
    pub(super) fn with_capacity(queues: usize) -> Inbox {
        Inbox { answers: VecDeque::with_capacity(queues), closed: VecDeque::with_capacity(queues), closed_overflow: 0, qp_destroy_retries: 0, qp_destroy_failed: 0 }
    }
}

/// The device owner's ends of one group's rings, held by the owner, not in the group value:
/// the consuming end of the group's ring to the owner ([`ToOwner`]), and the producing ends
/// of the rings to the group ([`ToGroup`], [`Attach`]); with them the group's numbers
/// (`GroupVerbs::GroupRef`), by which the owner's firmware commands name the group.
pub(super) struct OwnerEnds<V: GroupVerbs> {
    group: V::GroupRef,
    /// The SRQ limit the group is armed at (again after each [`ToOwner::ArmSrq`]).
    srq_limit: u32,
    gone_rx: Consumer<ToOwner>,
    gone_queues_rx: Consumer<GoneQueue>,
    back: Producer<ToGroup>,
    attach: Producer<Attach>,
    aer: Producer<AerDone>,
    /// The owner's ends of the group's forwarding rings (`forward.rs`).
    pub(super) fwd: OwnerForwarding,
    /// The group said it is broken ([`ToOwner::Broken`]): the owner's own record of it.
    pub(super) broken: bool,
    /// Queues the owner handed to the group ([`PollGroup::stage`]) that the group has not given
    /// back yet (each freed or refused queue ends with its [`ToOwner::Mem`]): at 0 the group
    /// holds none and the owner may take the whole group value back ([`PollGroup::destroy`]).
    pub(super) queues: usize,
    /// The owner's own record of the group's indices: taken when it stages a queue there,
    /// given back when the queue's [`ToOwner::Mem`] arrives (the owner answers
    /// [`ToGroup::Drop`]); `queues` of them are taken.
    taken: Vec<bool>,
    /// What the owner keeps of each queue it staged, by index, until the group answers for it
    /// ([`ToOwner::Attached`] or [`ToOwner::Refused`]): what admission and `pinned` count of a
    /// queue the group has not taken in yet.
    handed: Vec<Option<Handed>>,
    /// Closed or refused queues' QPs the device would not destroy, by queue index, tried
    /// again on later drains ([`PollGroup::drain_gone`]); the index stays taken until the
    /// entry ends.
    retry: Vec<Option<QpRetry>>,
    /// Refused queues' QPs given up on after the last try: never attached to the group, so
    /// its release would not find them; tried once more there ([`PollGroup::destroy`]). Room
    /// for one per queue index, reserved at creation.
    left: Vec<Qpn>,
    /// Entries in `retry`: while any, the owner drains on every turn.
    pub(super) retrying: usize,
    /// The owner's drains of this group's ring so far (the clock `retry` is due by).
    drains: u64,
}

/// How many times the owner tries to destroy a closed queue's QP (the first at the drain of
/// its [`ToOwner::Qp`], the others spaced 2, 4, 8 drains apart) before it leaves the QP to the
/// group's release.
const QP_DESTROY_TRIES: u8 = 4;

/// A closed queue's QP the device would not destroy (QP to ERROR or DESTROY_QP failed,
/// `GroupVerbs::destroy_handed_qp`, which moves it to ERROR again): tried again on later
/// drains; the queue's keys and parked memory are held back until it is gone, so no key of a
/// QP that may still move data is deregistered before it.
#[derive(Clone, Copy)]
struct QpRetry {
    qpn: Qpn,
    /// Tries so far.
    tries: u8,
    /// The drain ([`OwnerEnds::drains`]) of the next try.
    due: u64,
    /// The queue's keys, held back.
    keys: [Option<Lkey>; 3],
    /// The queue's [`ToOwner::Mem`] came: its answer ([`ToGroup::Drop`]) is held back.
    mem: bool,
    /// A refused queue's QP ([`ToOwner::Refused`]): never attached to the group, so no
    /// [`ToGroup::Detach`] once it is destroyed.
    refused: bool,
}

/// The owner's figures for a queue staged in a group and not answered yet.
#[derive(Clone, Copy)]
pub(super) struct Handed {
    qpn: Qpn,
    pub(super) source: rdma::Ipv4,
    /// DMA and heap bytes it holds ([`Conn::held`]).
    pub(super) held: (u64, u64),
}

impl<V: GroupVerbs> OwnerEnds<V> {
    /// Whether the group has an index free for a new queue (by the owner's own record).
    pub(super) fn has_room(&self) -> bool {
        self.queues < self.taken.len()
    }

    /// The lowest index free for a new queue, now taken (none: the group holds all it takes).
    /// Its memory may still be parked in the group, the owner's [`ToGroup::Drop`] not yet
    /// seen: the group empties that ring before taking a queue in ([`PollGroup::take_new`]).
    pub(super) fn take_index(&mut self) -> Option<usize> {
        let i = self.taken.iter().position(|t| !t)?;
        self.taken[i] = true;
        self.queues += 1;
        Some(i)
    }

    /// The queues the group's turns closed since the last call, each handed to
    /// `core.queue_gone` (its last counts into its controller, its I/O queue slot and
    /// authentication session freed; an admin queue's controller freed); how many. The owner's, before anything that reads those
    /// (its other records of the group, a forwarded command, the keep-alive check, a fold).
    pub(super) fn take_gone_queues<B: BlockDevice>(&mut self, core: &mut Core<B>) -> usize {
        let mut n = 0;
        while let Some(m) = self.gone_queues_rx.pop() {
            core.queue_gone(&m.queue());
            n += 1;
        }
        n
    }

    /// Send the group AER completion `m` (answered in its turn, [`TurnShared::take_aers`]);
    /// false if its ring is full (cannot happen: room for every AER its queues hold).
    pub(super) fn send_aer(&mut self, m: AerDone) -> bool {
        self.aer.push(m).is_ok()
    }

    /// The queues staged in the group and not answered yet (slow path).
    pub(super) fn handed(&self) -> impl Iterator<Item = &Handed> + '_ {
        self.handed.iter().flatten()
    }

    /// The group is done with the queue at `i` (its [`ToOwner::Mem`]): the index is free again;
    /// the group's answer.
    fn free_index(&mut self, i: u16) -> ToGroup {
        if let Some(t) = self.taken.get_mut(i as usize).filter(|t| **t) {
            *t = false;
            self.queues -= 1;
        }
        ToGroup::Drop(i)
    }

    /// End the retry entry at index `i` ([`QpRetry`]): its held keys deregistered and, if its
    /// memory's record came, the index freed and the group told to drop the memory.
    fn settle(&mut self, i: usize, verbs: &mut V) {
        let Some(r) = self.retry.get_mut(i).and_then(Option::take) else { return };
        self.retrying -= 1;
        for k in r.keys.into_iter().flatten() {
            let _ = verbs.dereg_mr(k);
        }
        if r.mem {
            let back = self.free_index(i as u16);
            // Room for two answers per queue index, reserved (see `PollGroup::gone`).
            let answered = self.back.push(back).is_ok();
            debug_assert!(answered, "ring back to a group full");
        }
    }

    /// Queue index `i`'s QP (`refused`: a refused queue's) the device would not destroy: tried
    /// again on later drains, its keys and memory held back until then; a second entry at
    /// one index (cannot happen: an index is not staged again before its `Mem`) given up on.
    #[cold]
    fn try_later(&mut self, inbox: &mut Inbox, qpn: Qpn, i: u16, refused: bool) {
        match self.retry.get_mut(i as usize).filter(|r| r.is_none()) {
            Some(r) => {
                *r = Some(QpRetry { qpn, tries: 1, due: self.drains + 2, keys: [None; 3], mem: false, refused });
                self.retrying += 1;
            }
            None => self.give_up(inbox, qpn, refused),
        }
    }

    /// A closed or refused queue's QP the device would not destroy, given up on: counted and
    /// logged once; a closed queue's stays in the group until the group is released, a refused
    /// queue's (never attached, so the release would not find it) is kept for one more try
    /// there (room reserved: one per index).
    #[cold]
    fn give_up(&mut self, inbox: &mut Inbox, qpn: Qpn, refused: bool) {
        inbox.qp_destroy_failed += 1;
        let what = if refused { "refused" } else { "closed" };
        log::warn!("nvmeof: rdma: {qpn:?} of a {what} queue not destroyed after {QP_DESTROY_TRIES} tries: left until its poll group is released");
        if refused && self.left.len() < self.left.capacity() {
            self.left.push(qpn);
        }
    }

    /// The group answered for the queue of `qpn` (slow path: one look per answer).
    fn answered(&mut self, qpn: Qpn) {
        if let Some(h) = self.handed.iter_mut().find(|h| h.is_some_and(|h| h.qpn == qpn)) {
            *h = None;
        }
    }
}

impl<V: GroupVerbs, B: BlockDevice> PollGroup<V, B> {
    /// Clear [`crate::nvmet::QueueState::enabled`] of each of the group's I/O queues (draining ones too: a
    /// fetched Write may still come to execute) whose controller is gone or no longer enabled
    /// ([`Core::refresh_queue`]). Slow path.
    #[cold]
    pub(super) fn refresh_enabled(&mut self, core: &crate::nvmet::Core<B>) {
        for c in self.conns[..self.hi].iter_mut().flatten() {
            core.refresh_queue(&mut c.q);
        }
    }

    /// Group `gi`, for up to `max_queues` queues of up to `sq` send WRs and `depth` slots
    /// each, with `bufs` receive buffers of `buf_len` bytes, all posted; the SRQ limit armed
    /// at `limit`; its zero-copy ranges ordered against the other groups' by `cross`.
    #[allow(clippy::too_many_arguments)]
    /// With the group comes the owner's ends of its rings.
    pub(super) fn new(verbs: &mut V, gi: usize, max_queues: usize, sq: u32, depth: u16, bufs: u16, buf_len: usize, limit: u32, owner_bell: Bell, cross: GroupStripes) -> Result<(Self, OwnerEnds<V>), ()> {
        let (gone, gone_rx) = handoff::ring(7 * max_queues + 2)?;
        let (gone_queues, gone_queues_rx) = handoff::ring(max_queues)?;
        let (attach, attach_rx) = handoff::ring(max_queues)?;
        let mut staged = Vec::new();
        staged.try_reserve_exact(max_queues).map_err(|_| ())?;
        staged.resize_with(max_queues, || None);
        let (back, back_rx) = handoff::ring(2 * max_queues)?;
        let (aer, aer_rx) = handoff::ring(crate::nvmet::MAX_AERS * max_queues)?;
        let (fwd, owner_fwd) = forward::forwarding(max_queues)?;
        let mut taken = Vec::new();
        taken.try_reserve_exact(max_queues).map_err(|_| ())?;
        taken.resize(max_queues, false);
        let mut handed = Vec::new();
        handed.try_reserve_exact(max_queues).map_err(|_| ())?;
        handed.resize(max_queues, None);
        let mut parked = Vec::new();
        parked.try_reserve_exact(max_queues).map_err(|_| ())?;
        parked.resize_with(max_queues, || None);
        let mut repost = Vec::new();
        repost.try_reserve_exact(bufs as usize).map_err(|_| ())?;
        let mut blocked = VecDeque::new();
        blocked.try_reserve_exact(max_queues * depth as usize).map_err(|_| ())?;
        let mut conns = Vec::new();
        conns.try_reserve_exact(max_queues).map_err(|_| ())?;
        conns.resize_with(max_queues, || None);
        let mut closed_ctrls = Vec::new();
        closed_ctrls.try_reserve_exact(max_queues).map_err(|_| ())?;
        let mut scratch_in = Vec::new();
        scratch_in.try_reserve_exact(SCRATCH_IN).map_err(|_| ())?;
        scratch_in.resize(SCRATCH_IN, 0u8);
        // Every slot of every queue, twice (a slot may take its next read before the previous
        // response's completion is seen): no allocation on the I/O path.
        let inflight = InFlight::with_capacity(2 * max_queues * depth as usize, cross);
        let cq_entries = max_queues as u32 * sq + bufs as u32;
        let rings = verbs.create_group(cq_entries, bufs as u32).map_err(|_| ())?;
        let (cq, srq) = (verbs.group_cq(&rings), verbs.group_srq(&rings));
        let local = rdma::Access { local_write: true, remote_read: false, remote_write: false };
        let mem = verbs.alloc_buf(bufs as usize * buf_len).and_then(|b| verbs.reg_mr(b.paddr(), b.len() as u64, local).map(|(k, _)| (b, k)));
        let (recv, recv_lkey) = match mem {
            Ok(x) => x,
            Err(_) => {
                let _ = verbs.destroy_group(rings);
                return Err(());
            }
        };
        let mut g = PollGroup {
            rings,
            cq,
            srq,
            wc: [Completion::default(); 32],
            recv,
            recv_lkey,
            buf_len,
            bufs,
            repost,
            qps: QpTable::new(max_queues),
            conns,
            hi: 0,
            live: 0,
            broken: false,
            stats: GroupStats::default(),
            io: TransportStats::default(),
            counts: IoCounts::default(),
            nsio: GroupIo::empty(),
            inflight,
            blocked,
            unrung: heapless::Vec::new(),
            unrung_overflow: false,
            has_turn_writes: false,
            owner_due: false,
            fwd,
            closed_ctrls,
            block_done: [(0, Status::SUCCESS); BLOCK_BATCH],
            scratch_in: scratch_in.into_boxed_slice(),
            turnaround: Histogram::boxed(),
            owner_bell,
            gone,
            gone_queues,
            back_rx,
            parked,
            staged,
            attach_rx,
            aer_rx,
        };
        let mut retry = Vec::new();
        retry.try_reserve_exact(max_queues).map_err(|_| ())?;
        retry.resize(max_queues, None);
        let mut left = Vec::new();
        left.try_reserve_exact(max_queues).map_err(|_| ())?;
        let ends = OwnerEnds { group: verbs.group_ref(&g.rings), srq_limit: limit, gone_rx, gone_queues_rx, back, attach, aer, fwd: owner_fwd, broken: false, queues: 0, taken, handed, retry, left, retrying: 0, drains: 0 };
        for b in 0..bufs {
            g.give_back(gi, b);
        }
        if g.flush().is_err() || verbs.arm_group_srq(&ends.group, limit).is_err() {
            // Nothing staged yet: no answer comes of it.
            g.destroy(ends, verbs, &mut Inbox::with_capacity(0));
            return Err(());
        }
        Ok((g, ends))
    }

    /// Buffer `b` of group `gi` is free again (re-posted at the end of the turn).
    #[inline(always)]
    pub(super) fn give_back(&mut self, gi: usize, b: u16) {
        let wr = RecvWr {
            wr_id: WrId::new(gi, 0, Kind::Recv, b, RangeId::NONE).raw(),
            sge: Sge { addr: self.recv.paddr() + (b as usize * self.buf_len) as u64, len: self.buf_len as u32, lkey: self.recv_lkey },
        };
        // Room for every buffer, reserved at creation; each is given back once per use.
        if self.repost.len() < self.repost.capacity() {
            self.repost.push(wr);
        }
    }

    /// Post the buffers given back this turn (one batch). Returns how many.
    pub(super) fn flush(&mut self) -> Result<usize, V::Error> {
        let n = self.repost.len();
        if n == 0 || self.broken {
            // A broken group's SRQ takes nothing more; its buffers die with it.
            self.repost.clear();
            return Ok(0);
        }
        let r = self.rings.post_srq_recv_batch(self.srq, &self.repost);
        self.repost.clear();
        self.stats.srq_reposts += n as u64;
        self.stats.srq_batches += 1;
        r.map(|_| n)
    }

    /// The owner's side of handing a new queue over: `s` staged at index `i` (taken by
    /// [`OwnerEnds::take_index`]) and the group told on its ring ([`Attach`]); it takes the
    /// queue in on its next turn ([`PollGroup::take_new`]).
    pub(super) fn stage(&mut self, ends: &mut OwnerEnds<V>, i: usize, s: Staged<V>) {
        debug_assert!(ends.taken[i] && self.staged[i].is_none());
        ends.handed[i] = Some(Handed { qpn: s.conn.qpn, source: s.conn.source, held: s.conn.held() });
        self.staged[i] = Some(s);
        // Room for one record per index, and an index is staged once until answered.
        let listed = ends.attach.push(Attach(i as u16)).is_ok();
        debug_assert!(listed, "ring of new queues full");
    }

    /// The group's look at its device's signals on its slow turn (`GroupVerbs::group_broken`,
    /// no device): true the first time they say it is broken for good, then it is marked and
    /// tells the owner ([`ToOwner::Broken`]); its caller closes its queues.
    pub(super) fn check_broken(&mut self) -> bool {
        if self.broken || !V::group_broken(&mut self.rings) {
            return false;
        }
        self.broken = true;
        self.tell_owner(ToOwner::Broken);
        true
    }

    /// The group's look at its SRQ's limit event on its slow turn
    /// (`GroupVerbs::group_srq_limit_reached`, no device): counted, and the owner asked to arm
    /// the limit again ([`ToOwner::ArmSrq`]). True when there was one.
    pub(super) fn check_srq_limit(&mut self) -> bool {
        if !V::group_srq_limit_reached(&mut self.rings) {
            return false;
        }
        self.stats.srq_limit_events += 1;
        // The limit fires once per arming.
        self.tell_owner(ToOwner::ArmSrq);
        true
    }

    /// The group's look at the new queues the owner staged for it, at the top of its turn
    /// (before its CQ is polled, so a capsule of the queue finds it): each taken into `conns`
    /// with its QP attached to the group (`GroupVerbs::attach_group_qp`) and found by its QPN,
    /// answered [`ToOwner::Attached`]; in a broken group, or when the device's side of the
    /// group will not take the QP, answered [`ToOwner::Refused`] and parked as a freed queue is
    /// (the owner destroys its QP and deregisters its keys; no staged entry is read by the
    /// owner). An index whose last queue's memory is still parked has the owner's
    /// [`ToGroup::Drop`] for it waiting (the owner answers before it stages there again): the
    /// group takes its answers first ([`PollGroup::take_back`]). Returns how many answers it
    /// put on the ring to the owner.
    pub(super) fn take_new(&mut self, gi: usize) -> usize {
        let mut n = 0;
        while let Some(Attach(i)) = self.attach_rx.pop() {
            let i = i as usize;
            if self.parked.get(i).is_some_and(Option::is_some) {
                self.take_back(gi);
                debug_assert!(self.parked[i].is_none(), "queue {i} staged over parked memory");
            }
            let Some(Staged { conn, qp }) = self.staged.get_mut(i).and_then(Option::take) else {
                debug_assert!(false, "attach of index {i}, nothing staged");
                continue;
            };
            n += 1;
            let qpn = V::made_qpn(&qp);
            // A group whose signals say broken refuses (its slow turn marks it and closes the rest).
            let broken = self.broken || V::group_broken(&mut self.rings);
            // The QPN table first: it has room for twice the group's queues.
            let refused = if broken || !self.qps.insert(qpn, i as u16) {
                Some(qp)
            } else {
                match V::attach_group_qp(&mut self.rings, qp) {
                    Ok(_) => None,
                    Err((_, qp)) => {
                        self.qps.remove(qpn);
                        Some(qp)
                    }
                }
            };
            // Room reserved (see `gone`).
            match refused {
                None => {
                    self.conns[i] = Some(conn);
                    self.hi = self.hi.max(i + 1);
                    self.live += 1;
                    self.stats.queues_assigned += 1;
                    self.stats.queues_live = self.live as u64;
                    self.tell_owner(ToOwner::Attached(qpn));
                }
                Some(qp) => {
                    self.tell_owner(ToOwner::Refused(qpn, i as u16));
                    self.park(i, conn, Some(qp));
                }
            }
        }
        n
    }

    /// Park queue `i`'s memory (and a refused queue's QP object) until the owner is done with
    /// it: its keys go on the ring to the owner, then [`ToOwner::Mem`]; the owner deregisters
    /// them and answers [`ToGroup::Drop`] (the index is not reused before). Room reserved for
    /// the records (see `gone`).
    pub(super) fn park(&mut self, i: usize, c: Conn<V>, qp: Option<V::GroupQp>) {
        let keys = [Some(c.rsp_lkey), Some(c.data_lkey), c.pre_data.as_ref().map(|p| p.1)];
        self.parked[i] = Some(Parked { qpn: c.qpn, gen: c.gen, rsp: c.rsp, data: c.data, pre_data: c.pre_data.map(|p| p.0), qp });
        for m in keys.into_iter().flatten().map(|k| ToOwner::Key(i as u16, k)).chain([ToOwner::Mem(i as u16)]) {
            self.tell_owner(m);
        }
    }

    /// Put `m` on the group's ring to the owner ([`PollGroup::gone`]; room reserved for every
    /// record a turn may list) and note that the owner has something to drain.
    pub(super) fn tell_owner(&mut self, m: ToOwner) {
        let listed = self.gone.push(m).is_ok();
        debug_assert!(listed, "gone ring full");
        self.owner_bell.ring();
    }

    /// Put closed queue `q` on the group's ring of closed queues for the owner's
    /// `Core::queue_gone` ([`PollGroup::gone_queues`]; room reserved). A queue that joined no
    /// controller (its Connect unanswered or refused) leaves the core nothing to do: no record.
    pub(super) fn tell_queue_gone(&mut self, q: &QueueState) {
        if q.cntlid.is_none() {
            return;
        }
        let listed = self.gone_queues.push(GoneQueue::of(q)).is_ok();
        debug_assert!(listed, "ring of closed queues full");
        self.owner_bell.ring();
    }

    /// The owner's half of a new queue staged and never taken in (the group is released): its
    /// QP destroyed, its keys deregistered, its memory freed. Returns its QPN.
    fn destroy_staged(verbs: &mut V, s: Staged<V>) -> Qpn {
        let qpn = V::made_qpn(&s.qp);
        let _ = verbs.destroy_made_qp(s.qp);
        let c = s.conn;
        for k in [Some(c.rsp_lkey), Some(c.data_lkey), c.pre_data.as_ref().map(|p| p.1)].into_iter().flatten() {
            let _ = verbs.dereg_mr(k);
        }
        // The memory returns to the platform as `c` drops.
        qpn
    }

    /// Whether `b` names one of this group's buffers.
    #[inline(always)]
    pub(super) fn has_buf(&self, b: u16) -> bool {
        b < self.bufs
    }

    /// The owner's half of the teardowns this group's turns did: each closed queue's QP
    /// destroyed and its memory's keys deregistered, each answered on the ring back to the
    /// group ([`PollGroup::take_back`]); the group's answers to new queues and the QPs whose
    /// hosts the CM must tell go to the owner's `inbox`
    /// (a refused queue destroyed first); a group that said it is broken is marked so in
    /// `ends`. A QP the device would not destroy is tried again on later drains, its queue's
    /// keys and memory held back until it is gone ([`QpRetry`]). Returns how many records and
    /// retried QPs settled.
    pub(super) fn drain_gone(&mut self, ends: &mut OwnerEnds<V>, verbs: &mut V, inbox: &mut Inbox) -> usize {
        ends.drains += 1;
        let mut n = 0;
        while let Some(m) = ends.gone_rx.pop() {
            n += 1;
            let back = match m {
                ToOwner::Attached(qpn) => {
                    ends.answered(qpn);
                    inbox.answers.push_back(QueueAnswer::Attached(qpn));
                    continue;
                }
                ToOwner::Refused(qpn, i) => {
                    ends.answered(qpn);
                    // Its keys and memory follow as a freed queue's (held back while its QP
                    // is tried again); the host gets its REJ now either way.
                    if verbs.destroy_handed_qp(&ends.group, qpn).is_err() {
                        ends.try_later(inbox, qpn, i, true);
                    }
                    let rej = RdmaCmRej { recfmt: U16::new(0), sts: U16::new(cm_rej::NO_RESOURCES) };
                    inbox.answers.push_back(QueueAnswer::Refused(qpn, rej));
                    continue;
                }
                ToOwner::Dreq(qpn) => {
                    if inbox.closed.len() < inbox.closed.capacity() {
                        inbox.closed.push_back(qpn);
                    } else {
                        // Cannot happen (one entry per queue); counted, the host's DREQ or
                        // timeout frees it.
                        inbox.closed_overflow += 1;
                    }
                    continue;
                }
                ToOwner::Qp(qpn, i) => {
                    if verbs.destroy_handed_qp(&ends.group, qpn).is_err() {
                        ends.try_later(inbox, qpn, i, false);
                        continue;
                    }
                    ToGroup::Detach(qpn)
                }
                ToOwner::Key(i, k) => {
                    match ends.retry.get_mut(i as usize).and_then(Option::as_mut).and_then(|r| r.keys.iter_mut().find(|k| k.is_none())) {
                        Some(held) => *held = Some(k),
                        None => {
                            let _ = verbs.dereg_mr(k);
                        }
                    }
                    continue;
                }
                ToOwner::Mem(i) => {
                    if let Some(r) = ends.retry.get_mut(i as usize).and_then(Option::as_mut) {
                        r.mem = true;
                        continue;
                    }
                    ends.free_index(i)
                }
                ToOwner::Broken => {
                    ends.broken = true;
                    continue;
                }
                ToOwner::ArmSrq => {
                    // A failure (device gone, group broken) is the group's slow turn's to learn.
                    let _ = verbs.arm_group_srq(&ends.group, ends.srq_limit);
                    continue;
                }
            };
            // Room for two answers per queue index, reserved (see `PollGroup::gone`).
            let answered = ends.back.push(back).is_ok();
            debug_assert!(answered, "ring back to a group full");
        }
        if ends.retrying > 0 {
            n += Self::retry_qps(ends, verbs, inbox);
        }
        n
    }

    /// The owner's next tries at the closed queues' QPs the device would not destroy
    /// ([`QpRetry`]) whose turn it is: one destroyed, or at its last try, is settled (its
    /// held keys deregistered, its held memory answered); after the last try it is logged and
    /// left to the group's release ([`PollGroup::destroy`]). Slow path. Returns how many
    /// settled.
    #[cold]
    fn retry_qps(ends: &mut OwnerEnds<V>, verbs: &mut V, inbox: &mut Inbox) -> usize {
        let mut settled = 0;
        for i in 0..ends.retry.len() {
            let Some(r) = ends.retry[i].as_mut().filter(|r| r.due <= ends.drains) else { continue };
            r.tries += 1;
            inbox.qp_destroy_retries += 1;
            let destroyed = verbs.destroy_handed_qp(&ends.group, r.qpn).is_ok();
            if !destroyed && r.tries < QP_DESTROY_TRIES {
                r.due = ends.drains + (1 << r.tries);
                continue;
            }
            let (qpn, refused) = (r.qpn, r.refused);
            if destroyed && !refused {
                // Room for two answers per queue index (its Detach was never sent).
                let answered = ends.back.push(ToGroup::Detach(qpn)).is_ok();
                debug_assert!(answered, "ring back to a group full");
            } else if !destroyed {
                ends.give_up(inbox, qpn, refused);
            }
            ends.settle(i, verbs);
            settled += 1;
        }
        settled
    }


    /// The group's (number `gi`) look at the owner's answers: destroyed QPs forgotten, and
    /// the zero-copy ranges their closed queues kept ended (no data lands or leaves through
    /// the QP any more) but those of commands still at the store; memory no key names dropped
    /// (it returns to the platform).
    pub(super) fn take_back(&mut self, gi: usize) {
        self.take_answers(Some(gi));
    }

    /// [`PollGroup::take_back`] of group `gi`; without ending ranges (`None`) when the group
    /// goes, its range table with it (the owner clears its cross-group counts,
    /// `stripes::Rows::clear`).
    fn take_answers(&mut self, gi: Option<usize>) {
        while let Some(m) = self.back_rx.pop() {
            match m {
                ToGroup::Detach(qpn) => {
                    let _ = V::detach_group_qp(&mut self.rings, qpn);
                    if let Some(gi) = gi {
                        self.end_closed_ranges(gi, qpn);
                    }
                }
                ToGroup::Drop(i) => {
                    let Some(Parked { rsp, data, pre_data, qp, .. }) = self.parked.get_mut(i as usize).and_then(Option::take) else {
                        debug_assert!(false, "queue {i}'s memory dropped but not parked");
                        continue;
                    };
                    // The memory (and a refused queue's destroyed QP object) returns to the platform.
                    drop((rsp, data, pre_data, qp));
                }
            }
        }
    }

    /// The ranges closed queue `qpn` (of group `gi`; closing, or freed and parked) kept for
    /// its work requests, ended: the owner destroyed its QP. A closing queue's commands at the
    /// store keep theirs (their completions end them). Every closed queue of that QPN (an
    /// earlier one's QPN may have been reused; its QP is gone too). Slow path: a pass over the
    /// group's queues and the range table.
    #[cold]
    fn end_closed_ranges(&mut self, gi: usize, qpn: Qpn) {
        let inflight = &mut self.inflight;
        for (i, c) in self.conns.iter().enumerate().filter_map(|(i, c)| c.as_ref().filter(|c| c.draining && c.qpn == qpn).map(|c| (i, c))) {
            let slots = &c.slots;
            inflight.remove_queue(QueueAt { g: gi, i }, c.gen, |r| slots.iter().any(|s| s.state == SlotState::Executing && s.range == r));
        }
        for (i, p) in self.parked.iter().enumerate().filter_map(|(i, p)| p.as_ref().filter(|p| p.qpn == qpn).map(|p| (i, p))) {
            inflight.remove_queue(QueueAt { g: gi, i }, p.gen, |_| false);
        }
    }

    /// The owner takes the group value back and releases everything (as joining the group's
    /// thread would; no QP may use the SRQ or CQ any more). Queues staged and never taken in
    /// are destroyed too, answered as refused in `inbox`. Its zero-copy ranges go with it; its
    /// cross-group counts are the caller's to clear (`stripes::Rows::clear`): no QP of it moves
    /// data any more.
    pub(super) fn destroy(mut self, mut ends: OwnerEnds<V>, verbs: &mut V, inbox: &mut Inbox) {
        self.drain_gone(&mut ends, verbs, inbox);
        // QPs still tried again go with the group's rings; their keys and memory with them.
        for i in 0..ends.retry.len() {
            if let Some(r) = ends.retry[i].filter(|r| r.refused) {
                // Never attached: the group's release would not find it.
                let _ = verbs.destroy_handed_qp(&ends.group, r.qpn);
            }
            ends.settle(i, verbs);
        }
        for qpn in core::mem::take(&mut ends.left) {
            let _ = verbs.destroy_handed_qp(&ends.group, qpn);
        }
        self.take_answers(None);
        for s in self.staged.iter_mut().filter_map(Option::take) {
            let qpn = Self::destroy_staged(verbs, s);
            inbox.answers.push_back(QueueAnswer::Refused(qpn, RdmaCmRej { recfmt: U16::new(0), sts: U16::new(cm_rej::NO_RESOURCES) }));
        }
        let _ = verbs.destroy_group(self.rings);
        let _ = verbs.dereg_mr(self.recv_lkey);
        // The buffer memory drops here.
    }

    /// DMA memory the group holds (its receive buffers).
    pub(super) fn dma_bytes(&self) -> u64 {
        self.recv.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qp_table_insert_get_remove() {
        // Room for 4 queues (8 entries); QPNs chosen to share probe runs.
        let mut t = QpTable::new(4);
        let qpns: Vec<u32> = (0..4).map(|i| 0x100 + i * 8).chain([0x100 + 8 * 8, 0x100 + 16 * 8]).collect();
        for (i, q) in qpns.iter().enumerate() {
            assert!(t.insert(Qpn(*q), i as u16));
        }
        for (i, q) in qpns.iter().enumerate() {
            assert_eq!(t.get(Qpn(*q)), Some(i as u16));
        }
        for q in qpns.iter().step_by(2) {
            t.remove(Qpn(*q));
        }
        t.remove(Qpn(0x999));
        for (i, q) in qpns.iter().enumerate() {
            assert_eq!(t.get(Qpn(*q)), if i % 2 == 0 { None } else { Some(i as u16) });
        }
        assert_eq!(t.get(Qpn(0x999)), None);
    }
}
