//! The NVMe-RDMA transport of the target, over `rdma::GroupVerbs`: one RC QP per NVMe queue,
//! queues handed round-robin to poll groups (`group`: one CQ and one SRQ each, SPDK's poller
//! model), receive buffers sized from IOCCSZ, in-capsule data, keyed SGLs served by RDMA
//! READ/WRITE, SEND WITH INVALIDATE for 0x4F keys, receive buffers re-posted (in one batch per
//! turn) before the turn's response SENDs are rung.
//!
//! Each queue has `depth` slots; a capsule takes the oldest free slot, which holds its SRQ
//! buffer until the command is answered; slot `i` owns response buffer `i` and data buffer
//! `i` (all DMA memory registered once). I/O data moves between the namespace and
//! the host only by DMA: with namespace memory registered, keyed-SGL Reads are RDMA WRITTEN
//! from it and Writes RDMA READ into it (zero copy; overlapping commands ordered by
//! `ranges`); otherwise through the slot's data buffer (block device ↔ data buffer ↔ RDMA).
//! The CPU copies only the 64-byte SQE, the 16-byte CQE, and admin payloads. One state
//! machine per command (`Slot` + `SlotState`), driven by the core's `Action`s; completions
//! reach queue and slot by index (`WrId`; a receive by its QPN in the group's table). Facts:
//! Linux drivers/nvme/target/rdma.c behaviour, include/linux/nvme-rdma.h,
//! shared/reference/wire.md §3.

use alloc::collections::VecDeque;
use alloc::vec::Vec;

use blockdev::BlockDevice;
use hal::{DmaRegion, DmaSlice};
use rdma::{Access, Lkey, Qpn, RcConnectAttrs, Rkey, SendOp, SendWr, Sge, GroupVerbs, DataPath, WcOpcode, WcStatus};
use zerocopy::byteorder::little_endian::{U16, U32};
use zerocopy::{FromBytes, IntoBytes};

use super::limits::Bound;
use super::{host_to_ctrl, Action, Core, CoreStats, DataIn, Fetch, IoCounts, NsReport, PendingWrite, QueueState, SubsysStats, ADMIN_MAX_XFER, ADMIN_QUEUE_DEPTH, MAX_AERS};
use admit::Ip;
use rdma::cm_wire::gid_from_ipv4;
use crate::bench::Histogram;
use crate::wire::*;

mod admit;
mod data;
mod dispatch;
mod forward;
mod gone_queue;
mod group;
pub mod group_cell;
mod group_msgs;
mod handles;
pub(super) mod handoff;
mod lifecycle;
mod ranges;
mod stripes;
mod turn;
mod wr_id;
pub use admit::Pinned;
pub use group::GroupStats;
pub use group::PollGroup;
use group::{Inbox, OwnerEnds, Staged, ToOwner};
use group_cell::GroupCells;
use handoff::Bell;
use ranges::RangeId;
use turn::TurnShared;
use wr_id::{Kind, WrId};

/// Receive buffers in each poll group's SRQ unless set (`set_srq_bufs`).
pub const DEFAULT_SRQ_BUFS: u16 = 512;

/// Block completions handled per batch (the core is asked for no more than this at once).
const BLOCK_BATCH: usize = 64;

/// `wr_id` of work request `kind` for slot `slot` of queue `ci` (generation `gen`): the
/// queue's index in its group (the group is the CQ's that delivers the completion).
#[inline(always)]
fn wr_id(ci: QueueAt, gen: u16, kind: Kind, slot: u16) -> u64 {
    WrId::new(ci.i, gen, kind, slot, RangeId::NONE).raw()
}

/// The tag of block I/O (or an AER) of slot (or CID) `slot` of queue `ci`: the core hands it
/// back outside any group's CQ, so it names the group too ([`WrId::tag`]).
#[inline(always)]
fn block_tag(ci: QueueAt, gen: u16, kind: Kind, slot: u16) -> u64 {
    WrId::tag(ci.g, ci.i, gen, kind, slot).raw()
}

/// Where a queue lives: poll group `g`, index `i` in the group's queues (`PollGroup::conns`).
/// A completion names `i` in its `wr_id` and comes from group `g`'s CQ; a block or AER tag
/// names both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct QueueAt {
    pub(super) g: usize,
    pub(super) i: usize,
}

/// A queue [`RdmaTarget::accept`] built and handed to a poll group, whose answer comes later
/// ([`RdmaTarget::take_answer`], after the group's turn took it in or refused it): until
/// then the caller keeps the CM ID, this QPN and this REP private data, and sends nothing.
#[derive(Debug, Clone, Copy)]
pub struct PendingQueue {
    pub qpn: Qpn,
    pub rep: RdmaCmRep,
}

/// A poll group's answer to a new queue ([`PendingQueue`]).
#[derive(Debug, Clone, Copy)]
pub enum QueueAnswer {
    /// The queue is in its group: send the REP.
    Attached(Qpn),
    /// The group refused it (broken); its QP is destroyed and its memory freed: send
    /// this REJ.
    Refused(Qpn, RdmaCmRej),
}

/// Transport counters (never reset).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransportStats {
    /// Queues closed because the device reported their QP in error on its own.
    pub qp_errors: u64,
    pub conns_accepted: u64,
    pub conns_rejected: u64,
    pub conns_closed: u64,
    pub capsules: u64,
    pub bad_capsules: u64,
    pub responses: u64,
    pub error_responses: u64,
    pub rdma_reads: u64,
    pub rdma_writes: u64,
    pub send_invalidate: u64,
    pub inline_writes: u64,
    /// Bytes the CPU copied on admin paths (Identify, logs, Connect data).
    pub admin_copy_bytes: u64,
    /// Bytes the CPU copied on I/O paths (only DSM range lists; reads and writes copy 0).
    pub io_copy_bytes: u64,
    pub wc_errors: u64,
    pub post_errors: u64,
    /// Work requests posted (receives and sends).
    pub posts: u64,
    /// Commands changing namespace memory held until overlapping zero-copy transfers
    /// (reads being sent, writes landing) were done.
    pub held_writes: u64,
    /// Zero-copy reads held until an overlapping zero-copy write had landed.
    pub held_reads: u64,
    /// Commands held because their group's block I/Os at the owner (namespaces it has no
    /// handle of) left no room for theirs (`Action::Busy`), executed again later.
    pub held_via_owner: u64,
    /// RDMA READs into slot buffers held for the queue's next doorbell because another READ
    /// was outstanding on the queue (`post_read`).
    pub held_slot_reads: u64,
    /// Keyed-SGL writes whose data the adapter placed straight into namespace memory.
    pub direct_writes: u64,
    /// Keyed-SGL writes to memory the adapter could have written directly, fetched into the
    /// slot buffer and copied instead, because a block is larger than the queue's path MTU:
    /// RDMA READ responses land packet by packet, so a transfer cut mid-way (QP error, adapter
    /// failure) would leave a block torn, half new data, against the one-block atomicity
    /// Identify reports (AWUN/AWUPF 0: one block, also under an error condition).
    pub staged_writes: u64,
    /// Of those, the ones answered in the turn their RDMA READ was posted, by a SEND fenced
    /// behind it (READ and response on one doorbell).
    pub fenced_responses: u64,
    /// Zero-copy transfers that did not fit the range table (must stay 0; failed INTERNAL).
    pub range_overflow: u64,
    /// Send doorbells asked of the device: sends are written with `post_send_deferred` and
    /// each QP is rung at most once per `poll` turn.
    pub send_doorbells: u64,
    /// Of those, the doorbells of queues that only retried held commands in their turn
    /// (`run_blocked`: a command held behind an overlapping zero-copy transfer, run once it
    /// ended), counted when the retries list the queue (a queue torn down before the turn's
    /// end is counted and not rung): a doorbell a turn with new commands would otherwise have
    /// shared. The rest rang for what the turn received (new commands, block completions).
    pub held_retry_doorbells: u64,
    /// Block completions reported beyond the batch asked for, or of a poll group gone (must
    /// stay 0: the core keeps what does not fit for the next batch; a queue closing waits for
    /// its I/O).
    pub block_done_lost: u64,
    /// Queues closed by the target that did not fit the list for the CM (must stay 0).
    pub closed_overflow: u64,
    /// AER completions that found their group's ring full (must stay 0: room for every AER).
    pub aers_lost: u64,
    /// Answers to new queues nobody took ([`RdmaTarget::take_answer`]) and that made room
    /// for newer ones (a caller that never asks; the service asks every turn).
    pub answers_dropped: u64,
    /// Commands found unanswered for longer than [`STUCK_NS`] by the once-a-second check
    /// (each counted once; logged with their state, a few per check).
    pub stuck_commands: u64,
    /// Poll groups the device reported broken (CQ in error, SRQ failed), and those replaced
    /// by a new group once none of their queues was left.
    pub groups_broken: u64,
    pub groups_replaced: u64,
    /// Closed queues' QPs the owner tried to destroy again after the device would not (QP to
    /// ERROR or DESTROY_QP failed; a few tries spaced over its turns, the queue's keys and
    /// memory held back meanwhile), and those still there after the last try (logged, left
    /// until their poll group is released).
    pub qp_destroy_retries: u64,
    pub qp_destroy_failed: u64,
}

impl TransportStats {
    /// `self` with `o`'s counts added (slow path: a poll group's share folded in).
    pub fn plus(self, o: TransportStats) -> TransportStats {
        TransportStats {
            qp_errors: self.qp_errors + o.qp_errors,
            conns_accepted: self.conns_accepted + o.conns_accepted,
            conns_rejected: self.conns_rejected + o.conns_rejected,
            conns_closed: self.conns_closed + o.conns_closed,
            capsules: self.capsules + o.capsules,
            bad_capsules: self.bad_capsules + o.bad_capsules,
            responses: self.responses + o.responses,
            error_responses: self.error_responses + o.error_responses,
            rdma_reads: self.rdma_reads + o.rdma_reads,
            rdma_writes: self.rdma_writes + o.rdma_writes,
            send_invalidate: self.send_invalidate + o.send_invalidate,
            inline_writes: self.inline_writes + o.inline_writes,
            admin_copy_bytes: self.admin_copy_bytes + o.admin_copy_bytes,
            io_copy_bytes: self.io_copy_bytes + o.io_copy_bytes,
            wc_errors: self.wc_errors + o.wc_errors,
            post_errors: self.post_errors + o.post_errors,
            posts: self.posts + o.posts,
            held_writes: self.held_writes + o.held_writes,
            held_reads: self.held_reads + o.held_reads,
            held_via_owner: self.held_via_owner + o.held_via_owner,
            held_slot_reads: self.held_slot_reads + o.held_slot_reads,
            direct_writes: self.direct_writes + o.direct_writes,
            staged_writes: self.staged_writes + o.staged_writes,
            fenced_responses: self.fenced_responses + o.fenced_responses,
            range_overflow: self.range_overflow + o.range_overflow,
            send_doorbells: self.send_doorbells + o.send_doorbells,
            held_retry_doorbells: self.held_retry_doorbells + o.held_retry_doorbells,
            block_done_lost: self.block_done_lost + o.block_done_lost,
            closed_overflow: self.closed_overflow + o.closed_overflow,
            aers_lost: self.aers_lost + o.aers_lost,
            answers_dropped: self.answers_dropped + o.answers_dropped,
            stuck_commands: self.stuck_commands + o.stuck_commands,
            groups_broken: self.groups_broken + o.groups_broken,
            groups_replaced: self.groups_replaced + o.groups_replaced,
            qp_destroy_retries: self.qp_destroy_retries + o.qp_destroy_retries,
            qp_destroy_failed: self.qp_destroy_failed + o.qp_destroy_failed,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    /// Free: on the queue's free list, waiting for a capsule.
    Idle,
    /// RDMA READ of host data in flight.
    Reading,
    /// Block I/O in flight.
    Executing,
    /// Held: it overlaps namespace memory a zero-copy transfer is still using; `Slot::resume`
    /// says what it does once free.
    Blocked,
}

/// What a held slot does when nothing overlaps it any more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resume {
    /// Execute the command (in-capsule Write, Write Zeroes, DSM).
    Execute,
    /// RDMA READ a Write's data into namespace memory.
    Fetch,
    /// RDMA WRITE a zero-copy Read's data and respond.
    Send,
    /// Copy a staged Write's data (in the slot buffer) into namespace memory.
    Place,
}

#[derive(Clone, Copy)]
struct Slot {
    state: SlotState,
    sqe: Sqe,
    sgl: Option<Sgl>,
    /// Capsule bytes received.
    byte_len: u32,
    pending: u16,
    status: Status,
    t0: u64,
    /// Zero-copy Read (Write): namespace memory the data is sent from (lands in); 0 = the
    /// slot's data buffer.
    direct_addr: u64,
    direct_lkey: Lkey,
    /// Host data is in the slot's buffer (a fetched payload).
    fetched: bool,
    /// A decoded Write waiting for (or placing) its data.
    write: Option<PendingWrite>,
    /// The zero-copy range this command holds (carried in the response's `wr_id`, whose
    /// completion ends the range even after the slot took its next capsule; a Write's
    /// response is fenced behind its unsignaled READ, so its completion follows the data).
    range: RangeId,
    resume: Resume,
    /// The group's SRQ buffer holding this command's capsule (`NO_BUF`: none).
    rbuf: u16,
}

/// One open queue as the metrics endpoint reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueReport {
    /// The controller it joined (`None` until its Connect is admitted).
    pub cntlid: Option<u16>,
    pub qid: u16,
    /// The poll group it is in.
    pub group: u16,
    /// Slots (commands it may have outstanding), and those holding a command now.
    pub depth: u16,
    pub busy: u16,
    /// Capsules received on it.
    pub capsules: u64,
    /// Data bytes of its Reads and Writes answered with success; its error responses.
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub errors: u64,
}

/// `Slot::rbuf` of a slot holding no receive buffer.
const NO_BUF: u16 = u16::MAX;

struct Conn<V: GroupVerbs> {
    gen: u16,
    /// Capsules received on this queue (per-queue metrics).
    capsules: u64,
    /// Data bytes of the Reads and Writes answered with success, and error responses.
    bytes_read: u64,
    bytes_written: u64,
    errors: u64,
    qpn: Qpn,
    q: QueueState,
    depth: u16,
    capsule: usize,
    /// Largest data transfer a command may describe now (Connect data until admitted).
    xfer: usize,
    /// Bytes of `data` per slot: 0 until admitted (every slot shares the Connect buffer).
    stride: usize,
    /// The per-slot transfer size granted once Connect admitted the queue.
    full_xfer: usize,
    rsp: V::Buf,
    rsp_lkey: Lkey,
    data: V::Buf,
    /// All of `data`, made once with it: the per-I/O slices are cut from it (no region call).
    data_dma: DmaSlice,
    data_lkey: Lkey,
    /// The Connect buffer, kept (it is small) once `data` is the admitted queue's buffer: an
    /// RDMA READ a host issued before its Connect completed may still land in it.
    pre_data: Option<(V::Buf, Lkey)>,
    /// When the CM accepted the queue (the Connect deadline runs from here) and the
    /// peer's address (unadmitted queues are bounded per source).
    accepted_ns: u64,
    source: rdma::Ipv4,
    slots: Vec<Slot>,
    /// Free slots, oldest first: a slot is taken again only after the others (its last
    /// response's SEND, written in its response buffer, is on the wire by then).
    free: VecDeque<u16>,
    aer_rsp_next: u16,
    /// Torn down: QP gone, waiting for block I/O to drain before freeing buffers.
    draining: bool,
    /// Respond, then close (Fabrics Disconnect).
    close_after_send: bool,
    /// Send WRs written this turn and not yet rung.
    unrung: bool,
    /// This turn's zero-copy Writes, whose RDMA READs and fenced responses are written at its
    /// end (`answer_turn_writes`); room for every slot, reserved at accept.
    turn_writes: Vec<u16>,
    /// Slots whose RDMA READ into the slot buffer waits for the queue's next doorbell, which
    /// an earlier READ's completion brings (`post_read`); room for every slot, reserved at
    /// accept.
    held_reads: Vec<u16>,
    /// RDMA READs into slot buffers posted and not yet completed.
    reads_posted: u16,
    /// The QP's path MTU in bytes, the unit RDMA READ responses land in (`u32::MAX` when the
    /// verbs place a message whole, as the soft verbs do, their attributes' MTU 0): a zero-copy
    /// Write goes straight into namespace memory only when no block spans two packets
    /// (`len <= pmtu * blocks`: a block is at most `pmtu` bytes).
    pmtu: u32,
}

impl<V: GroupVerbs> Conn<V> {
    /// Offset of slot `s`'s data in `data`.
    #[inline(always)]
    fn data_off(&self, s: u16) -> usize {
        s as usize * self.stride
    }
}

/// One namespace region registered for zero-copy reads, as `lkeys.len()` registrations:
/// registration `i` starts at `base + i * chunk` and runs `chunk + max_io_bytes` (clipped to
/// the region), so any I/O that starts in chunk `i` lies inside it. One registration when
/// the device takes the whole region at once.
struct NsMr {
    base: u64,
    len: u64,
    chunk: u64,
    lkeys: Vec<Lkey>,
}

/// A command unanswered this long is reported as stuck (turnaround clock units: ns in the
/// image and emu-runner).
pub const STUCK_NS: u64 = 2_000_000_000;

/// How often [`RdmaTarget::poll`]'s slow path runs (keep-alive, Connect deadlines, device
/// state: QP errors, broken groups, SRQ limits, failed stores).
const SLOW_POLL_NS: u64 = 1_000_000;

/// The SRQ low-water mark armed for a group of `bufs` buffers (an eighth).
fn srq_limit(bufs: u16) -> u32 {
    (bufs as u32 / 8).max(1)
}

/// Chunk sizes tried when a device refuses to register a whole namespace at once (an mlx5
/// MTT list fits about 18 MiB of 4 KiB pages in one command).
const NS_CHUNKS: [u64; 4] = [16 << 20, 4 << 20, 1 << 20, 256 << 10];

/// The RDMA target: the core plus its queues.
pub struct RdmaTarget<V: GroupVerbs, B: BlockDevice> {
    pub core: Core<B>,
    /// Most queues (live or draining) over all groups; each group holds up to its share
    /// (`PollGroup::conns`).
    max_queues: usize,
    gen: u16,
    /// Where the groups' records end for the CM: their answers to new queues
    /// ([`RdmaTarget::take_answer`]) and the QPs they closed ([`RdmaTarget::take_closed`]).
    inbox: Inbox,
    /// A new queue was staged in a group since the last turn (one test per group turn
    /// instead of a look at the group's ring).
    attach_pending: bool,
    next_ka_check_ns: u64,
    next_stuck_check_ns: u64,
    /// The time of the last `poll` (accept has no clock of its own).
    now_ns: u64,
    ns_registered: bool,
    /// What the groups' turns share (namespace registrations, the clock), handed to each
    /// turn call with the core and the one group it works on.
    shared: TurnShared,
    /// Every group's row of cross-group stripe counts (`stripes.rs`), for as many groups as
    /// were made last (`new_group` makes them again when that changed); a group is made with
    /// its view of them.
    stripes: stripes::Rows,
    /// Poll groups (created with the first queue, released with the last), each value in
    /// its cell (home with the owner, or away with a thread: `group_cell.rs`); how many, the
    /// group the next queue goes to, and each group's SRQ size.
    groups: GroupCells<PollGroup<V, B>>,
    /// The owner's ends of each group's rings (`ends[g]` for `groups[g]`), held apart from the
    /// group values.
    ends: Vec<OwnerEnds<V>>,
    /// Inside `poll`'s completion handling: releasing the groups waits for the end of the
    /// turn (`release_pending`), so a completion later in the batch still finds its group.
    in_poll: bool,
    release_pending: bool,
    /// [`Core::ctrl_epoch`] when the queues' [`super::QueueState::enabled`] were last refreshed
    /// ([`RdmaTarget::refresh_enabled`]).
    ctrl_epoch: u32,
    /// Rung by a group that put something on its ring to the owner (every group holds a
    /// clone); lowered by [`RdmaTarget::drain_gone`]: one look per `poll`, not one per group.
    gone_bell: Bell,
    /// A group's owner ends hold a closed queue's QP to try to destroy again
    /// (`OwnerEnds::retrying`): the owner drains on every `poll` until none is left.
    qp_retrying: bool,
    /// A broken poll group waits to be replaced (`replace_broken_groups`, at the end of a
    /// turn that ran the slow-path checks).
    replace_pending: bool,
    /// Counts of groups released so far, by group number (see [`GroupStats`]).
    group_totals: Vec<GroupStats>,
    n_groups: usize,
    next_group: usize,
    srq_bufs: u16,
    /// The turnaround histograms of the groups released so far (the live groups keep their
    /// own, `PollGroup::turnaround`, added by [`RdmaTarget::turnaround`]).
    turnaround: alloc::boxed::Box<Histogram>,
    /// The slow path's counters and the shares of the groups released so far; the live
    /// groups keep their own (`PollGroup::io`), added by [`RdmaTarget::stats`].
    stats: TransportStats,
}

impl<V: GroupVerbs, B: BlockDevice> RdmaTarget<V, B> {
    /// A target serving `core` on at most `max_queues` RDMA queues, in one poll group.
    pub fn new(core: Core<B>, max_queues: usize) -> Self {
        Self::with_poll_groups(core, max_queues, 1)
    }

    /// A target serving `core` on at most `max_queues` RDMA queues spread round-robin over
    /// `groups` poll groups (at least 1), each with an SRQ of [`DEFAULT_SRQ_BUFS`] buffers.
    pub fn with_poll_groups(core: Core<B>, max_queues: usize, groups: usize) -> Self {
        // A work request names its queue in 12 bits.
        let max_queues = max_queues.min(wr_id::MAX_QUEUES);
        RdmaTarget {
            core,
            max_queues,
            gen: 1,
            inbox: Inbox::with_capacity(max_queues),
            attach_pending: false,
            next_ka_check_ns: 0,
            next_stuck_check_ns: 0,
            now_ns: 0,
            ns_registered: false,
            shared: TurnShared::new(),
            stripes: stripes::Rows::new(0),
            groups: GroupCells::new(),
            ends: Vec::new(),
            in_poll: false,
            release_pending: false,
            ctrl_epoch: 0,
            gone_bell: Bell::new(),
            qp_retrying: false,
            replace_pending: false,
            group_totals: Vec::new(),
            n_groups: groups.clamp(1, max_queues.max(1)),
            next_group: 0,
            srq_bufs: DEFAULT_SRQ_BUFS,
            turnaround: Histogram::boxed(),
            stats: TransportStats::default(),
        }
    }

    /// Receive buffers per poll group's SRQ (at least 2; takes effect when the groups are
    /// next created, i.e. with no queue open).
    pub fn set_srq_bufs(&mut self, bufs: u16) {
        self.srq_bufs = bufs.clamp(2, NO_BUF - 1);
    }

    /// Spread queues over `groups` poll groups (at least 1; takes effect when the groups are
    /// next created, i.e. with no queue open).
    pub fn set_poll_groups(&mut self, groups: usize) {
        self.n_groups = groups.clamp(1, self.max_queues.max(1));
    }

    /// Poll groups configured.
    pub fn poll_groups(&self) -> usize {
        self.n_groups
    }

    /// The live poll groups' device objects (`V::Group`; slow path: a metrics page reads
    /// the device's own per-group counters from them).
    pub fn group_objects(&self) -> impl Iterator<Item = &V::Group> + '_ {
        self.groups.iter().map(|g| &g.rings)
    }

    /// Transport counters: the target's own plus every live poll group's share (slow path).
    pub fn stats(&self) -> TransportStats {
        let t = self.groups.iter().fold(self.stats, |t, g| t.plus(g.io));
        let i = &self.inbox;
        TransportStats { closed_overflow: t.closed_overflow + i.closed_overflow, qp_destroy_retries: t.qp_destroy_retries + i.qp_destroy_retries, qp_destroy_failed: t.qp_destroy_failed + i.qp_destroy_failed, ..t }
    }

    /// The core's counters with every live poll group's per-command counts added (slow path;
    /// a released group's are folded into the core).
    pub fn core_stats(&self) -> CoreStats {
        self.core.stats_plus(&self.group_counts())
    }
    /// Each subsystem's counters with every live group's counts added, with its NQN (slow path).
    pub fn subsystem_stats(&self) -> alloc::vec::IntoIter<(&str, SubsysStats)> {
        self.core.subsystem_stats_plus(&self.group_counts()).into_iter()
    }
    /// Every namespace with its counters, every live group's counts added (slow path).
    pub fn namespace_stats(&self) -> alloc::vec::IntoIter<NsReport<'_>> {
        let ios: Vec<&super::GroupIo<B>> = self.groups.iter().map(|g| &g.nsio).collect();
        self.core.namespace_stats_plus(&self.group_counts(), &ios).into_iter()
    }

    /// The live poll groups' I/O handles of namespace `nsid` of subsystem `nqn` (slow path:
    /// reports and tests reading a store's own counters, which each handle keeps for itself).
    pub fn namespace_handles(&self, nqn: &str, nsid: u32) -> impl Iterator<Item = &B> + '_ {
        let k = self.core.ns_slot(nqn, nsid);
        self.groups.iter().filter_map(move |g| g.nsio.handle(k?))
    }

    /// Whether block I/O is outstanding anywhere: at the core's stores or at a poll group's
    /// own handles.
    pub fn block_inflight(&self) -> bool {
        self.core.block_inflight() || self.groups.iter().any(|g| g.nsio.inflight())
    }

    /// Block I/Os outstanding at the core's stores and at the poll groups' handles (slow path:
    /// reports).
    pub fn block_inflight_count(&self) -> u64 {
        self.groups.iter().fold(self.core.block_inflight_count(), |n, g| n + g.nsio.inflight_count())
    }

    fn group_counts(&self) -> Vec<&IoCounts> {
        self.groups.iter().map(|g| &g.counts).collect()
    }

    /// Counters of poll group `g` (zero before the groups exist).
    pub fn group_stats(&self, g: usize) -> GroupStats {
        let done = self.group_totals.get(g).copied().unwrap_or_default();
        done.plus(self.groups.get(g).map_or(GroupStats::default(), |p| p.stats))
    }

    /// Measure per-command turnaround with `clock` (e.g. the TSC).
    pub fn set_turnaround_clock(&mut self, clock: fn() -> u64) {
        self.shared.clock = Some(clock);
    }

    /// Receive CQE seen → response SEND posted, in clock units (with a clock set): every live
    /// poll group's histogram added to those of the groups released so far (slow path).
    #[inline(never)]
    pub fn turnaround(&self) -> alloc::boxed::Box<Histogram> {
        let mut h = Histogram::boxed();
        h.merge(&self.turnaround);
        for g in self.groups.iter() {
            h.merge(&g.turnaround);
        }
        h
    }

    /// Forget the turnaround samples taken so far (the target's and every live group's).
    pub fn clear_turnaround(&mut self) {
        self.turnaround = Histogram::boxed();
        for g in self.groups.iter_mut() {
            g.turnaround = Histogram::boxed();
        }
    }

    /// Register the namespaces' direct memory ([`Core::direct_regions`]) with `verbs` once,
    /// so Reads are sent to the host straight from the namespace and keyed-SGL Writes land
    /// straight in it (no copy through a slot buffer). Done by the first `accept`; if a registration fails, reads keep using the
    /// slot buffers. Returns whether zero-copy reads are on.
    pub fn register_namespaces(&mut self, verbs: &mut V) -> bool {
        if self.ns_registered {
            return !self.shared.ns_mrs.is_empty();
        }
        self.ns_registered = true;
        let regions = self.core.direct_regions();
        let overlap = self.core.config().max_io_bytes as u64;
        for (base, len) in regions.iter().map(|r| (r.paddr(), r.len() as u64)) {
            let mut done = false;
            for chunk in core::iter::once(len).chain(NS_CHUNKS.iter().copied().filter(|&c| c < len)) {
                if let Some(lkeys) = Self::reg_chunks(verbs, base, len, chunk, overlap) {
                    self.shared.ns_mrs.push(NsMr { base, len, chunk, lkeys });
                    done = true;
                    break;
                }
            }
            if !done {
                log::warn!("nvmeof: rdma: namespace memory at {base:#x} ({len} B) not registered: reads copy");
                self.release_namespaces(verbs);
                self.ns_registered = true;
                return false;
            }
        }
        let on = !self.shared.ns_mrs.is_empty();
        self.core.set_direct(on);
        self.refresh_group_io();
        on
    }

    /// Register `[base, base+len)` as chunks of `chunk` bytes (+ `overlap`); all or none.
    fn reg_chunks(verbs: &mut V, base: u64, len: u64, chunk: u64, overlap: u64) -> Option<Vec<Lkey>> {
        // Local write: keyed-SGL Writes RDMA READ host data straight into namespace memory.
        // No remote access: the host never gets a key to it.
        let access = Access { local_write: true, remote_read: false, remote_write: false };
        let mut lkeys = Vec::new();
        let mut off = 0;
        while off < len {
            let n = core::cmp::min(chunk.saturating_add(overlap), len - off);
            match verbs.reg_mr(base + off, n, access) {
                Ok((lkey, _)) => lkeys.push(lkey),
                Err(_) => {
                    for k in lkeys {
                        let _ = verbs.dereg_mr(k);
                    }
                    return None;
                }
            }
            off += chunk;
        }
        Some(lkeys)
    }

    /// Deregister the namespace memory (shutdown, leak checks); reads go back to copying and
    /// the next `accept` registers again.
    pub fn release_namespaces(&mut self, verbs: &mut V) {
        self.core.set_direct(false);
        self.refresh_group_io();
        for m in self.shared.ns_mrs.drain(..) {
            for k in m.lkeys {
                let _ = verbs.dereg_mr(k);
            }
        }
        self.ns_registered = false;
    }

    /// Every queue (live or draining) with its place (slow path).
    fn all_conns(&self) -> impl Iterator<Item = (QueueAt, &Conn<V>)> + '_ {
        self.groups.iter_at().flat_map(|(g, p)| p.conns[..p.hi].iter().enumerate().filter_map(move |(i, c)| Some((QueueAt { g, i }, c.as_ref()?))))
    }

    /// The first live queue (not draining) `f` picks (slow path: a search over the groups).
    fn find_conn(&self, f: impl Fn(&Conn<V>) -> bool) -> Option<QueueAt> {
        self.find_conn_from(QueueAt { g: 0, i: 0 }, &f)
    }

    /// The first live queue `f` picks at `from` or after it (group, then index order), so a
    /// pass that closes what it finds goes over the queues once.
    fn find_conn_from(&self, from: QueueAt, f: &impl Fn(&Conn<V>) -> bool) -> Option<QueueAt> {
        for (g, p) in self.groups.iter_at().skip_while(|&(g, _)| g < from.g) {
            let start = if g == from.g { from.i } else { 0 };
            for i in start..p.hi {
                if p.conns[i].as_ref().is_some_and(|c| !c.draining && f(c)) {
                    return Some(QueueAt { g, i });
                }
            }
        }
        None
    }

    /// Queue `ci` if it is there (live or draining).
    #[inline(always)]
    fn conn(&self, ci: QueueAt) -> Option<&Conn<V>> {
        self.groups.get(ci.g)?.conns.get(ci.i)?.as_ref()
    }

    /// Live queues.
    pub fn queues(&self) -> usize {
        self.all_conns().filter(|(_, c)| !c.draining).count()
    }

    /// Every open queue (slow path: the metrics endpoint).
    pub fn queue_reports(&self) -> impl Iterator<Item = QueueReport> + '_ {
        self.all_conns().filter(|(_, c)| !c.draining).map(|(ci, c)| QueueReport {
            cntlid: c.q.cntlid,
            qid: c.q.qid,
            group: ci.g as u16,
            depth: c.depth,
            busy: c.depth.saturating_sub(c.free.len() as u16),
            capsules: c.capsules,
            bytes_read: c.bytes_read,
            bytes_written: c.bytes_written,
            errors: c.errors,
        })
    }

    /// The data path of the poll group that serves QP `qpn` (slow path: a search; for tests that
    /// make the target misbehave on one of its own QPs).
    pub fn queue_data_path(&mut self, qpn: Qpn) -> Option<&mut V::Group> {
        let gi = self.all_conns().find(|(_, c)| c.qpn == qpn)?.0.g;
        Some(&mut self.groups.get_mut(gi)?.rings)
    }

    /// A controller stopped being enabled since the last look ([`Core::ctrl_epoch`] moved):
    /// clear the flag of its I/O queues, in every group, before any of them executes another
    /// command. Slow path: the owner calls it after whatever may disable a controller (an
    /// admin or Fabrics command, a queue closed, a controller deleted).
    pub(super) fn refresh_enabled(&mut self) {
        let epoch = self.core.ctrl_epoch();
        if epoch == self.ctrl_epoch {
            return;
        }
        self.ctrl_epoch = epoch;
        for g in self.groups.iter_mut() {
            g.refresh_enabled(&self.core);
        }
    }

    /// Hand the I/O queues the groups' turns closed to the core (their last counts with them),
    /// then fold every live I/O queue's counters ([`super::QueueCounters`]: keep-alive time,
    /// commands, reads, writes) into its controller, and every group's error notes into their
    /// controllers' error logs. Slow path: done with the keep-alive check
    /// (once per millisecond of `poll`) and before every admin command; a caller that reads
    /// the controllers' counters between two polls calls it first.
    pub fn fold_queues(&mut self) {
        // Those the turns closed first, their last counts with them.
        self.take_gone_queues();
        for g in self.groups.iter_mut() {
            if g.nsio.has_notes() {
                self.core.take_error_notes(&mut g.nsio);
            }
            for c in g.conns[..g.hi].iter_mut().flatten() {
                if c.q.qid != 0 && !c.draining {
                    self.core.fold_queue(&mut c.q);
                }
            }
        }
    }

    /// QPs the target closed on its own (keep-alive expiry, errors, Disconnect): the CM
    /// should send DREQ for them.
    pub fn take_closed(&mut self) -> Option<Qpn> {
        self.inbox.closed.pop_front()
    }

    /// The earliest time [`RdmaTarget::poll`]'s slow path (run at most once a millisecond)
    /// has timer work: a controller's keep-alive running out, a queue's Connect deadline, a
    /// broken group still to replace, the stuck-command check (with a turnaround clock). For
    /// loops that jump a virtual clock over idle time; `None`: no timer. The device state the
    /// slow path also looks at (QP errors, broken CQs, SRQ limits, failed stores) changes only
    /// when something else happens: after that, poll again by [`RdmaTarget::next_slow_poll`].
    pub fn next_timer(&self) -> Option<u64> {
        if self.attach_pending || !self.inbox.answers.is_empty() {
            // A new queue to hand to its group, or a group's answer to give: the next poll.
            return Some(self.now_ns);
        }
        let mut t = self.core.next_ka_expiry().unwrap_or(u64::MAX).min(self.next_connect_deadline().unwrap_or(u64::MAX));
        if self.replace_pending {
            t = t.min(self.next_ka_check_ns);
        }
        if self.shared.clock.is_some() {
            t = t.min(self.next_stuck_check_ns);
        }
        (t != u64::MAX).then(|| t.max(self.next_ka_check_ns))
    }

    /// When [`RdmaTarget::poll`] next runs its slow path (device state included), if it has
    /// not run since `changed_ns` (when something last happened that may have changed that
    /// state: a completion, an event, a fault); `None` if it has.
    pub fn next_slow_poll(&self, changed_ns: u64) -> Option<u64> {
        (self.next_ka_check_ns.saturating_sub(SLOW_POLL_NS) <= changed_ns).then_some(self.next_ka_check_ns)
    }

    /// The next poll group's answer to a queue [`RdmaTarget::accept`] handed over (in the
    /// order the groups' turns gave them).
    pub fn take_answer(&mut self) -> Option<QueueAnswer> {
        self.inbox.answers.pop_front()
    }

    /// Run the target: completions, block I/O, async events, keep-alive. `now_ns` is a
    /// monotonic clock. Returns the number of events handled.
    pub fn poll(&mut self, verbs: &mut V, now_ns: u64) -> usize {
        self.now_ns = now_ns;
        self.in_poll = true;
        let mut work = 0;
        // Each group's look at the new queues the owner staged, before any CQ is polled (a
        // capsule of theirs finds them); one test per turn while none is staged.
        if self.attach_pending {
            self.attach_pending = false;
            for (gi, g) in self.groups.iter_at_mut() {
                work += g.take_new(gi);
            }
        }
        for gi in 0..self.groups.len() {
            // The group's value reached once for its turn (one home check), then borrowed
            // apart from what the turns share; again only after an owner step.
            let Some(mut g) = self.groups.get_mut(gi) else { continue };
            V::check_group(&mut g.rings);
            let n = g.rings.poll_cq(g.cq, &mut g.wc);
            work += n;
            g.stats.completions += n as u64;
            // The group's completions, handed the group; what a call leaves to the owner
            // (`PollGroup::owner_due`) is done before the next.
            let mut k = 0;
            while k < n {
                let sh = &mut self.shared;
                while k < n && !g.owner_due {
                    sh.on_completion(g, gi, k, now_ns);
                    k += 1;
                }
                if g.owner_due {
                    self.owner_step(verbs, gi, now_ns);
                    g = &mut self.groups[gi];
                }
            }
            // The group's own handles' completions, in its own batch (its commands only).
            if g.nsio.inflight() {
                work += self.drain_group_io(verbs, gi);
            }
            // Report what this group's capsules finished at the core's stores before the next
            // group submits more (keeps the devices' completion rings short).
            if n > 0 {
                work += self.drain_block(verbs, gi);
            }
        }
        // What the stores finished after the groups' turns, in the first group's batch (one
        // `Core::poll_block` over every store, whichever group's command each ends).
        work += self.drain_block(verbs, 0);
        // Events for armed AERs (rare): each to its AER's group, answered in the group's turn.
        if self.core.has_aen() {
            work += self.send_aers(verbs, now_ns);
        }
        // Keep-alive timers have 100 ms granularity (KAS); look at them once per millisecond.
        let slow = now_ns >= self.next_ka_check_ns;
        if slow {
            self.next_ka_check_ns = now_ns.saturating_add(SLOW_POLL_NS);
            work += self.check_keep_alive(verbs, now_ns);
            let failed = self.core.check_stores();
            if failed > 0 {
                self.refresh_group_io();
            }
            work += failed;
            work += self.check_qp_errors(verbs);
            work += self.check_broken_groups();
            work += self.expire_unadmitted(verbs, now_ns);
            self.check_srq_limits();
            if now_ns >= self.next_stuck_check_ns {
                self.next_stuck_check_ns = now_ns.saturating_add(1_000_000_000);
                self.check_stuck();
            }
        }
        // Each group's end of turn: held writes whose overlapping reads have been sent (or
        // whose queues went away); a lone zero-copy Write's READ (and, if the queue is still
        // otherwise idle, its fenced response); then receive buffers go back before the
        // responses are rung (the host's next capsules find them).
        for gi in 0..self.groups.len() {
            let (sh, g) = self.turn_parts(gi);
            sh.end_group_turn(g, gi, now_ns);
            if g.owner_due {
                self.owner_step(verbs, gi, now_ns);
            }
        }
        self.in_poll = false;
        // The owner's half of the queues the groups' turns closed: QPs destroyed, memory
        // deregistered (and, with none left, the groups released).
        if self.gone_bell.rung() || self.qp_retrying {
            self.drain_gone(verbs);
        }
        if self.release_pending {
            self.release_pending = false;
            self.release_idle_groups(verbs);
        }
        // Tried once per millisecond (a device that cannot make a group now is not asked
        // every turn).
        if slow && self.replace_pending {
            self.replace_broken_groups(verbs);
        }
        work
    }

    /// The controllers' events for armed AERs (`Core::take_aen`) go to the AERs' groups as
    /// messages ([`group::AerDone`] on each group's ring from the owner), each group answering
    /// its own in its turn ([`TurnShared::take_aers`], before any group's end of turn). Returns
    /// how many events.
    #[cold]
    #[inline(never)]
    fn send_aers(&mut self, verbs: &mut V, now_ns: u64) -> usize {
        let mut work = 0;
        let mut aers_sent = false;
        while let Some((tag, dw0)) = self.core.take_aen() {
            work += 1;
            let id = WrId::from_raw(tag);
            let Some(e) = self.ends.get_mut(id.group()) else { continue };
            if e.send_aer(group::AerDone::of(id, dw0)) {
                aers_sent = true;
            } else {
                self.stats.aers_lost += 1;
            }
        }
        if aers_sent {
            for gi in 0..self.groups.len() {
                let (sh, g) = self.turn_parts(gi);
                sh.take_aers(g, gi);
                if g.owner_due {
                    self.owner_step(verbs, gi, now_ns);
                }
            }
        }
        work
    }

    /// Commands that have waited longer than [`STUCK_NS`] for their response (slow path: once a
    /// second; only with a turnaround clock, whose stamps the slots carry): each is counted
    /// once, when it crosses the bound, and the first few of a check are logged with where
    /// they wait, so an operator sees a stuck queue before the host's I/O timeout does.
    fn check_stuck(&mut self) {
        let Some(clock) = self.shared.clock else { return };
        let now = clock();
        let mut logged = 0;
        for (ci, c) in self.groups.iter_at().flat_map(|(g, p)| p.conns.iter().enumerate().map(move |(i, c)| (QueueAt { g, i }, c))) {
            let Some(c) = c.as_ref().filter(|c| !c.draining) else { continue };
            for (s, slot) in c.slots.iter().enumerate() {
                if slot.state == SlotState::Idle || slot.t0 == 0 {
                    continue;
                }
                let age = now.saturating_sub(slot.t0);
                // Counted in the one check after it crossed the bound.
                if age < STUCK_NS || age >= STUCK_NS + 1_000_000_000 {
                    continue;
                }
                self.stats.stuck_commands += 1;
                if logged < 4 {
                    logged += 1;
                    log::warn!(
                        "nvmeof: rdma: queue {} (qid {}, {:?}, poll group {}) slot {s}: command cid {} opcode {:#04x} unanswered for {} ms, {:?} (pending {}, {} free slots)",
                        ci.i,
                        c.q.qid,
                        c.qpn,
                        ci.g,
                        slot.sqe.cid.get(),
                        slot.sqe.opcode,
                        age / 1_000_000,
                        slot.state,
                        slot.pending,
                        c.free.len()
                    );
                }
            }
        }
    }

    /// Each group's look at its SRQ limit event on its slow turn (once per millisecond):
    /// counted by the group, re-armed by the owner's drain at the end of `poll`.
    fn check_srq_limits(&mut self) {
        for g in self.groups.iter_mut() {
            g.check_srq_limit();
        }
    }

    /// Block completions, in group `gi`'s batch: taken in batches no larger than the batch
    /// (the core leaves the rest in the devices), until the devices have none. The check for
    /// none in flight is inlined into the turn (a turn calls this up to once per group and once
    /// more; as a call it cost ~30 instructions even when nothing was in flight).
    #[inline(always)]
    fn drain_block(&mut self, verbs: &mut V, gi: usize) -> usize {
        if !self.core.block_inflight() {
            return 0;
        }
        self.drain_block_batches(verbs, gi)
    }

    /// The `k` block completions group `gi`'s batch holds (of `n` its handles reported), each
    /// handed to its command's group (the tag names it). Returns `k`.
    #[inline(always)]
    fn end_block_batch(&mut self, verbs: &mut V, gi: usize, n: usize, k: usize) -> usize {
        let Some(mut g) = self.groups.get_mut(gi) else { return 0 };
        // The pollers honour the budget; a count beyond it would be a lost completion.
        g.io.block_done_lost += n.saturating_sub(k) as u64;
        for i in 0..k {
            let (tag, st) = g.block_done[i];
            let gt = WrId::from_raw(tag).group();
            // Group `gi`'s own commands on the borrow the batch came in; group `gi` reached
            // again only after an owner step or another group's command.
            if gt == gi {
                self.shared.on_block_done(g, tag, st);
                if !g.owner_due {
                    continue;
                }
                self.owner_step(verbs, gi, self.now_ns);
            } else if let Some(o) = self.groups.get_mut(gt) {
                self.shared.on_block_done(o, tag, st);
                if o.owner_due {
                    self.owner_step(verbs, gt, self.now_ns);
                }
            }
            g = &mut self.groups[gi];
        }
        k
    }

    fn drain_block_batches(&mut self, verbs: &mut V, gi: usize) -> usize {
        let mut work = 0;
        loop {
            let mut k = 0;
            let Some(g) = self.groups.get_mut(gi) else {
                // No group (all released): no queue for these to end, taken so the stores empty.
                let n = self.core.poll_block(BLOCK_BATCH, |_, _| {});
                work += n;
                if n < BLOCK_BATCH {
                    return work;
                }
                continue;
            };
            let n = self.core.poll_block(BLOCK_BATCH, into_batch(&mut g.block_done, &mut k));
            work += self.answer_block_batch(verbs, gi, n, k);
            if n < BLOCK_BATCH {
                return work;
            }
        }
    }

    /// The `k` completions of the core's stores group `gi`'s batch holds (of `n` reported):
    /// each the answer to a block I/O a group sent the owner for a namespace it has no handle
    /// of, put on that group's ring back (the tag names the group: `Core::answer_via_owner`),
    /// then each group that got answers takes them in its batch, as its handles' completions
    /// (`drain_group_io`). Returns `k`.
    #[cold]
    #[inline(never)]
    fn answer_block_batch(&mut self, verbs: &mut V, gi: usize, n: usize, k: usize) -> usize {
        let Some(g) = self.groups.get_mut(gi) else { return 0 };
        g.io.block_done_lost += n.saturating_sub(k) as u64;
        // Groups are at most 64 (`nvmet.poll_groups`).
        let mut answered = 0u64;
        for i in 0..k {
            let (tag, st) = self.groups[gi].block_done[i];
            let gt = WrId::from_raw(tag).group();
            if self.core.answer_via_owner(gt, tag, st) {
                answered |= 1 << (gt % 64);
            } else if let Some(g) = self.groups.get_mut(gi) {
                // No group of that number any more (its queues waited for their I/O).
                g.io.block_done_lost += 1;
            }
        }
        while answered != 0 {
            let gt = answered.trailing_zeros() as usize;
            answered &= answered - 1;
            self.drain_group_io(verbs, gt);
        }
        k
    }
}

/// A poller's callback that puts each block completion into a group's batch `done` (`k` of
/// them so far), dropping any beyond its room (counted by the caller: `end_block_batch`).
#[inline(always)]
fn into_batch<'a>(done: &'a mut [(u64, Status)], k: &'a mut usize) -> impl FnMut(u64, Status) + 'a {
    move |tag, st| {
        if let Some(d) = done.get_mut(*k) {
            *d = (tag, st);
            *k += 1;
        }
    }
}
