//! The NVMe-oF target core, independent of the transport: subsystems, namespaces, controllers,
//! Fabrics/Admin/I/O command execution, discovery, keep-alive and async events.
//!
//! A transport owns the queues; for each received command it calls [`Core::execute`] with the
//! queue's [`QueueState`], the SQE and where the command's host→controller data is. The core
//! answers with an [`Action`]: respond now (controller→host data, if any, is in
//! [`Core::out`]), I/O submitted to a namespace (completion later via [`Core::poll_block`]),
//! or hold (Asynchronous Event Request). Facts: NVMe Base 2.0, NVMe-oF 1.1, Linux
//! drivers/nvme/target/{core,admin-cmd,fabrics-cmd,discovery,io-cmd-bdev}.c behaviour.

mod admin;
mod cntlid;
mod connect;
mod counts;
pub mod devlat;
mod fabrics;
mod group_io;
mod identify;
mod io;
mod ports;
mod via_owner;
pub mod limits;
pub mod auth;
pub mod rdma;
pub mod service;

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::string::String;
use alloc::vec::Vec;

use blockdev::{BlockDevice, BlockDone, BlockError, BlockIo, BlockOp};
use hal::{DmaSlice, PhysAddr};
use zerocopy::byteorder::little_endian::{U16, U32, U64, U128};

use crate::wire::*;
use cntlid::CntlidGen;
pub use counts::IoCounts;
pub use group_io::GroupIo;
pub use limits::{Bound, BoundStats, Limits};
use limits::BoundLog;

/// Largest admin data transfer the core produces in one command.
pub const ADMIN_MAX_XFER: usize = 8192;
/// Outstanding Asynchronous Event Requests per controller (AERL + 1).
pub const MAX_AERS: usize = 4;
/// Error log entries kept per controller (ELPE + 1).
pub const ERROR_LOG_ENTRIES: usize = 16;
/// Admin queue size limit (NVME_AQ_DEPTH).
pub const ADMIN_QUEUE_DEPTH: u16 = 32;
/// Largest NSID a namespace may have (nvmetcli's limit, nvme.py `Namespace.MAX_NSID`): a
/// subsystem finds a command's namespace in a table indexed by NSID, at most this long; a
/// command naming an NSID beyond it (or none configured) is aborted with Invalid Namespace.
pub const MAX_NSID: u32 = 8192;
/// A [`Subsystem::ns_index`] entry with no namespace.
const NO_NS: u16 = u16::MAX;

/// A port (Linux nvmet's configfs `ports/P`): where the target listens, published in the
/// discovery log, and the subsystems linked to it ([`ports`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortConfig {
    pub portid: u16,
    pub traddr: [u8; 4],
    pub trsvcid: u16,
    /// The subsystems linked to the port (`ports/P/subsystems/NQN`); `None`: every subsystem
    /// (the command line's one port).
    pub subsystems: Option<Vec<String>>,
}

/// One namespace of a subsystem.
pub struct NamespaceConfig<B> {
    pub nsid: u32,
    pub dev: B,
    /// Globally unique identifier (non-zero); also reported as UUID descriptor.
    pub nguid: [u8; 16],
}

/// One NVM subsystem.
pub struct SubsystemConfig<B> {
    pub nqn: String,
    pub serial: String,
    pub model: String,
    /// Host NQNs allowed to connect (ignored when `allow_any_host`).
    pub hosts: Vec<String>,
    pub allow_any_host: bool,
    pub namespaces: Vec<NamespaceConfig<B>>,
}

/// Target-wide limits.
#[derive(Debug, Clone)]
pub struct TargetConfig {
    pub ports: Vec<PortConfig>,
    /// In-capsule data bytes accepted on I/O queues (IOCCSZ = (64 + this) / 16).
    pub inline_data_size: u32,
    /// Largest I/O in bytes (a power of two ≥ 4096; MDTS derives from it).
    pub max_io_bytes: u32,
    /// I/O queue entries (CAP.MQES + 1, MAXCMD).
    pub io_queue_depth: u16,
    /// I/O queues granted per controller at most.
    pub max_io_queues: u16,
    /// Controllers alive at once.
    pub max_ctrls: usize,
    /// Admission bounds, keep-alive range, Connect deadline.
    pub limits: Limits,
    /// Hosts that must pass DH-HMAC-CHAP before their queues carry commands.
    pub host_auth: Vec<auth::HostAuthConfig>,
}

impl Default for TargetConfig {
    fn default() -> Self {
        TargetConfig {
            ports: Vec::new(),
            inline_data_size: 4096,
            max_io_bytes: 128 * 1024,
            io_queue_depth: 128,
            max_io_queues: 4,
            max_ctrls: 16,
            limits: Limits::default(),
            host_auth: Vec::new(),
        }
    }
}

/// Per-queue protocol state, owned by the transport, updated by the core.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueState {
    /// Queue ID announced at the transport level (CM private data); Connect must match it.
    pub qid: u16,
    /// Controller this queue belongs to, once Connect succeeded.
    pub cntlid: Option<u16>,
    /// 0-based SQ size from Connect.
    pub sqsize: u16,
    /// Current SQ head reported in CQEs (0xFFFF when SQ flow control is disabled).
    pub sqhd: u16,
    pub sq_flow_disabled: bool,
    /// Where the queue's connection comes from (set by the transport at accept): the
    /// peer's source GID and QPN. An I/O queue joins a controller only from the GID of its
    /// admin queue.
    pub peer_gid: [u8; 16],
    pub peer_qpn: u32,
    /// In-band authentication: open, pending a DH-HMAC-CHAP transaction, or failed.
    pub auth: auth::Gate,
    /// Where the controller sits in the core's table (set by Connect with `cntlid`): the slow
    /// path reaches it by index, checked against `cntlid`.
    pub ctrl_slot: CtrlSlot,
    /// An I/O queue's controller is enabled (CC.EN = 1, CSTS.RDY = 1): set by its Connect
    /// (which needs it enabled), cleared by the queue's owner once the controller stops being
    /// enabled (reset, shutdown, freed, keep-alive expiry: [`Core::ctrl_epoch`] moves, the
    /// owner calls [`Core::refresh_queue`]) and never set again: the queue executes no I/O
    /// for a controller no longer enabled, and the I/O path reads nothing of the controller
    /// table. (Unused on an admin queue, whose commands look the controller up.)
    pub enabled: bool,
    /// An I/O queue's subsystem, by index in the core's table (set by its Connect).
    pub subsys: u16,
    /// What commands on an I/O queue count for their controller, kept here (owned with the
    /// queue, e.g. by its poll group) instead of written into the controller per command; the
    /// transport hands them to the core on the slow path ([`Core::fold_queue`]).
    pub io: QueueCounters,
    /// The port the queue's connection came in on: its index in [`TargetConfig::ports`] (set
    /// by the transport at accept; 0 when the target has one port or none).
    pub port: u8,
}

/// An I/O queue's counts for its controller since they were last folded into it
/// ([`Core::fold_queue`]), and the time of its last command (traffic-based keep-alive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueCounters {
    /// When the queue last carried a command that keeps the controller alive (0: none yet).
    pub last_seen_ns: u64,
    pub commands: u64,
    pub host_reads: u64,
    pub host_writes: u64,
    pub blocks_read_512: u64,
    pub blocks_written_512: u64,
}

/// A controller's slot in the core's controller table (opaque; set by Connect).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CtrlSlot(u16);

impl QueueState {
    pub fn new(qid: u16) -> Self {
        QueueState { qid, ..Default::default() }
    }
    /// Advance and return SQHD for the next CQE: it wraps to 0 after `sqsize` (0-based), by
    /// a compare and reset (no division per response).
    #[inline]
    pub fn next_sqhd(&mut self) -> u16 {
        if self.sq_flow_disabled {
            return 0xFFFF;
        }
        self.sqhd = if self.sqhd >= self.sqsize { 0 } else { self.sqhd + 1 };
        self.sqhd
    }
}

/// Where a command's data is, as the transport has it.
#[derive(Debug, Clone, Copy)]
pub struct DataIn<'a> {
    /// Small host→controller payloads (Connect data, DSM ranges) copied for parsing.
    pub bytes: &'a [u8],
    /// The DMA buffer for namespace I/O (Write: holds the data; Read: to be filled), a
    /// slice of the transport's buffer; [`DmaSlice::EMPTY`] when the command has none.
    pub buf: DmaSlice,
    /// Data length the SGL describes.
    pub sgl_len: u32,
    /// Tag echoed in block completions (the transport's slot identity).
    pub tag: u64,
    /// The command's host→controller data is in `bytes`/`buf` (in-capsule, or already moved
    /// by the transport). `false` for a keyed SGL not read yet: the core answers
    /// [`Action::Fetch`] for commands that carry host data.
    pub fetched: bool,
}

/// The core's answer to a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Respond now; `out_len` bytes of controller→host data are in [`Core::out`].
    Respond { status: Status, dw0: u32, dw1: u32, out_len: u32 },
    /// `count` block I/Os were submitted with the command's tag; respond when all completed.
    Submitted { count: u16 },
    /// Hold the command (AER) until an event completes it via [`Core::take_aen`].
    Hold,
    /// The way to the namespace's store is full now (a poll group's block I/Os at the owner,
    /// [`GroupIo`]): nothing was submitted; hold the command and execute it (a Write whose data
    /// is in: submit it) again later.
    Busy,
    /// A Read was submitted with the namespace's own memory `buf` as its buffer (see
    /// [`Core::set_direct`]): the device moves no data; when it completes, the transport
    /// sends the data to the host straight from `buf`.
    SubmittedDirect { buf: DmaSlice },
    /// A Read from the namespace's own memory `buf` that the store carried out at once
    /// ([`blockdev::BlockDevice::execute_direct`]: a RAM namespace moves no data for it): the
    /// transport sends the data to the host straight from `buf` now; no block completion
    /// follows.
    ReadyDirect { buf: DmaSlice },
    /// The command carries host data that is not here yet ([`DataIn::fetched`] false): move
    /// it in (RDMA READ) as [`Fetch`] says, then go on.
    Fetch(Fetch),
}

/// Where a command's host data goes before it can go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fetch {
    /// A payload the core parses (Connect data, DSM ranges, admin data): into the
    /// transport's buffer, then [`Core::execute`] again with the data fetched.
    Payload,
    /// A Write, decoded, checked and counted: move its data to [`PendingWrite::direct_buf`]
    /// (namespace memory, zero copy: once it is there the write is done, the device would
    /// move nothing) or else the transport's buffer, then [`Core::write_fetched`] submits it.
    Write(PendingWrite),
}

/// A decoded Write (or Compare) waiting for its data ([`Fetch::Write`]): the transport moves
/// the host's data into the slot buffer (never namespace memory for a Compare) and hands it
/// to [`Core::write_fetched`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingWrite {
    subsys: u16,
    ns: u16,
    io: BlockIo,
    direct: bool,
}

impl PendingWrite {
    /// Namespace memory the data goes straight into (`None`: the transport's buffer).
    #[inline]
    pub fn direct_buf(&self) -> Option<DmaSlice> {
        self.direct.then_some(self.io.buf)
    }
    /// Bytes of data.
    #[inline]
    pub fn len(&self) -> usize {
        self.io.buf.len()
    }
    /// Logical blocks it writes.
    #[inline]
    pub fn blocks(&self) -> u32 {
        self.io.blocks
    }
}

/// Whether the command carries host→controller data (Fabrics Connect / Auth Send, or a
/// command whose opcode's data-transfer bits say host to controller).
#[inline]
pub fn host_to_ctrl(sqe: &Sqe) -> bool {
    if sqe.opcode == FABRICS_OPCODE {
        let t = sqe.fctype();
        return t == fctype::CONNECT || t == fctype::AUTH_SEND;
    }
    sqe.opcode & 3 == 1
}

impl Action {
    fn status(s: Status) -> Action {
        Action::Respond { status: s, dw0: 0, dw1: 0, out_len: 0 }
    }
    fn ok(dw0: u32, out_len: u32) -> Action {
        Action::Respond { status: Status::SUCCESS, dw0, dw1: 0, out_len }
    }
}

/// Counters (never reset).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CoreStats {
    pub commands: u64,
    pub errors: u64,
    pub connects_refused: u64,
    pub ctrls_created: u64,
    pub ctrls_freed: u64,
    pub ka_expired: u64,
    pub reads: u64,
    pub writes: u64,
    /// AEN completions or controller resets that did not fit their lists (must stay 0).
    pub aen_overflow: u64,
    pub reset_overflow: u64,
    /// Failed commands by status (SCT, SC), for the metrics endpoint.
    pub by_status: StatusCounts,
}

/// How many commands failed with each status: the first [`StatusCounts::SLOTS`] distinct
/// (SCT, SC) pairs seen, then one overflow count. Updated on the error path only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatusCounts {
    pub slots: [(u8, u8, u64); StatusCounts::SLOTS],
    pub used: usize,
    pub other: u64,
}

impl StatusCounts {
    pub const SLOTS: usize = 16;
    fn add(&mut self, st: Status) {
        let used = self.used.min(Self::SLOTS);
        if let Some(e) = self.slots[..used].iter_mut().find(|e| (e.0, e.1) == (st.sct, st.sc)) {
            e.2 += 1;
        } else if used < Self::SLOTS {
            self.slots[used] = (st.sct, st.sc, 1);
            self.used = used + 1;
        } else {
            self.other += 1;
        }
    }
    /// (SCT, SC, count) of every status seen.
    pub fn iter(&self) -> impl Iterator<Item = (u8, u8, u64)> + '_ {
        self.slots[..self.used.min(Self::SLOTS)].iter().copied()
    }
}

/// A subsystem's cumulative counters (they outlive its controllers).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SubsysStats {
    pub reads: u64,
    pub writes: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub errors: u64,
    /// The errors by NVMe status.
    pub by_status: StatusCounts,
}

/// One live controller as the metrics endpoint reports it.
#[derive(Debug, Clone, Copy)]
pub struct CtrlReport<'a> {
    pub cntlid: u16,
    /// `None` for a discovery controller.
    pub subnqn: Option<&'a str>,
    pub hostnqn: &'a str,
    pub commands: u64,
    pub reads: u64,
    pub writes: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub errors: u64,
    pub io_queues: u16,
}

struct Subsystem<B> {
    cfg: SubsystemConfig<B>,
    /// The largest transfer one command may carry (MDTS): the target's limit lowered to the
    /// smallest of its namespaces' stores; larger Reads/Writes are refused, not split.
    max_io_bytes: u32,
    stats: SubsysStats,
    /// NSID -> index into `cfg.namespaces` ([`NO_NS`]: none), as long as the largest NSID + 1
    /// (≤ [`MAX_NSID`] + 1): a command finds its namespace without a search.
    ns_index: Vec<u16>,
    /// Per namespace, in `cfg.namespaces` order: whether it failed, and the per-command
    /// counts folded in from [`IoCounts`].
    ns_stats: Vec<NsStats>,
    /// The slot of this subsystem's first namespace in the core's namespace table
    /// (an [`IoCounts`] indexes namespaces by it).
    ns_base: usize,
    /// Per namespace: its device-latency table, when the core has a clock ([`devlat`]).
    ns_lat: Vec<Option<devlat::DevLatency>>,
    /// Per namespace: what released poll groups' handles of its store counted
    /// ([`Core::fold_group_io`]; the report adds the store's and the live handles').
    ns_dev_released: Vec<blockdev::DevCounters>,
    /// The ports it is linked to, bit `i` for `TargetConfig::ports[i]` (nvmet configfs:
    /// `ports/P/subsystems/NQN` present; bit 0 alone when the target has no port): through a
    /// port it is not linked to, a subsystem is neither served nor listed ([`ports`]).
    links: u64,
}

/// A namespace's counters kept by the core (cumulative).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NsStats {
    /// Reads and Writes executed on the namespace, and their bytes.
    pub reads: u64,
    pub writes: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Host Flush commands forwarded to the namespace's store.
    pub flushes_forwarded: u64,
    /// Reads / writes the host sent with FUA set.
    pub fua_reads: u64,
    pub fua_writes: u64,
    /// I/O commands poll groups without a handle of the namespace ran on its store through the
    /// controller owner (`via_owner.rs`: a local NVMe namespace whose drive granted fewer I/O
    /// queues than namespaces × groups, or a store that makes no handles).
    pub via_owner: u64,
    /// Out of service since its store failed: inactive to hosts (gone from the active
    /// namespace list, Identify Namespace all zero, I/O refused with Invalid Namespace),
    /// announced by a Namespace Attribute Changed event.
    pub failed: bool,
}

/// One namespace as the metrics endpoint reports it.
#[derive(Debug, Clone)]
pub struct NsReport<'a> {
    pub subnqn: &'a str,
    pub nsid: u32,
    /// Whether the store has a volatile write cache (VWC reported for its subsystem).
    pub volatile_write_cache: bool,
    pub stats: NsStats,
    /// The store's own counters (flushes the drive was given and completed, a memory store's
    /// copies), with those of its poll groups' handles, live and released: cumulative.
    pub dev: blockdev::DevCounters,
    /// Submit-to-completion time of the I/O the store and the poll groups' handles of it
    /// were given (nanoseconds of the clock given to [`Core::set_device_clock`]; the groups'
    /// histograms merged in); `None` without one.
    pub device_latency: Option<Box<crate::bench::Histogram>>,
    /// I/Os at the store and its handles now (known while timed; `None` without a clock).
    pub in_flight: Option<usize>,
}

/// CC register fields (the layout is `nvme_spec::props::Cc`).
mod cc {
    use nvme_spec::props::Cc;
    pub fn en(v: u32) -> bool {
        Cc::from_bits(v).en()
    }
    pub fn shn(v: u32) -> u8 {
        Cc::from_bits(v).shn()
    }
    /// NVM command set, 4 KiB pages, round robin, 64-byte SQEs, 16-byte CQEs.
    pub fn valid_for_enable(v: u32) -> bool {
        let c = Cc::from_bits(v);
        c.css() == 0 && c.mps() == 0 && c.ams() == 0 && c.iosqes() == 6 && c.iocqes() == 4
    }
}
/// CSTS values (the layout is `nvme_spec::props::Csts`).
mod csts {
    use nvme_spec::props::Csts;
    pub const RDY: u32 = Csts::new().with_rdy(true).into_bits();
    pub const CFS: u32 = Csts::new().with_cfs(true).into_bits();
    /// SHST = 10b, shutdown processing complete.
    pub const SHST_COMPLETE: u32 = Csts::new().with_shst(2).into_bits();
}

struct Ctrl {
    cntlid: u16,
    /// The port its admin queue came in on (index in `TargetConfig::ports`).
    port: u8,
    /// Subsystem index; `None` for the discovery controller.
    subsys: Option<usize>,
    hostnqn: String,
    hostid: [u8; 16],
    /// Source GID of the admin queue's connection.
    source_gid: [u8; 16],
    cc: u32,
    csts: u32,
    kato_ms: u32,
    last_seen_ns: u64,
    io_queues: u16,
    io_connected: Vec<bool>,
    aec: u32,
    aers: heapless::Vec<u64, MAX_AERS>,
    aen_masked: bool,
    changed: heapless::Vec<u32, 64>,
    changed_overflow: bool,
    errors: [ErrorLogEntry; ERROR_LOG_ENTRIES],
    error_count: u64,
    err_head: usize,
    /// Commands executed on this controller's queues.
    commands: u64,
    host_reads: u64,
    host_writes: u64,
    blocks_read_512: u64,
    blocks_written_512: u64,
}

impl Ctrl {
    fn enabled(&self) -> bool {
        cc::en(self.cc) && self.csts & csts::RDY != 0
    }
}

/// The target core. `B` is the namespace backing type (an enum when mixing kinds).
pub struct Core<B: BlockDevice> {
    cfg: TargetConfig,
    subsystems: Vec<Subsystem<B>>,
    ctrls: Vec<Option<Ctrl>>,
    cntlids: CntlidGen,
    /// Refusals at the admission bounds (counted, logged once per interval).
    bounds: BoundLog,
    /// The time of the command being executed.
    now_ns: u64,
    genctr: u64,
    out: Box<[u8; ADMIN_MAX_XFER]>,
    /// Completed AERs for the transport; room for every AER of every controller.
    aen_ready: VecDeque<(u64, u32)>,
    done_buf: [BlockDone; 32],
    /// Reads may use the namespaces' direct memory (the transport registered it).
    direct: bool,
    /// Block I/Os submitted and not yet reported by `poll_block` (0: nothing to poll); a poll
    /// group's I/O on its own handles is counted in its [`GroupIo`], not here.
    inflight: u64,
    /// The device clock of [`Core::set_device_clock`] (the groups' handles are timed with it).
    dev_clock: Option<fn() -> u64>,
    /// Controllers reset by the host (CC.EN 1 -> 0) whose I/O queues the transport must drop.
    resets: VecDeque<u16>,
    /// Moves each time a controller stops being enabled (reset, shutdown, freed):
    /// [`Core::ctrl_epoch`].
    ctrl_epoch: u32,
    /// The core's counters; the per-command ones as folded so far (see [`IoCounts`]).
    stats: CoreStats,
    /// The counts of commands given to [`Core::execute`] (folded after each).
    own_io: IoCounts,
    /// In-band authentication (hosts, per-queue transactions, counters).
    pub auth: auth::Auth,
    /// The owner's ends of each poll group's rings for the namespaces it has no handle of, by
    /// group number ([`Core::take_via_owner`]), and the group tables made so far (their ids).
    via_owner: Vec<Option<via_owner::OwnerIo>>,
    group_ios: u64,
}

fn blk_status(e: BlockError) -> Status {
    match e {
        BlockError::OutOfRange { .. } => Status::LBA_RANGE,
        BlockError::ZeroLength | BlockError::BufferTooSmall { .. } => Status::SGL_INVALID_DATA,
        BlockError::TooLarge { .. } => Status::INVALID_FIELD,
        BlockError::QueueFull => Status { sct: 0, sc: 0x82, dnr: false },
        BlockError::Unsupported => Status::INVALID_OPCODE,
        // The drive's status as it is, Do Not Retry included: a host does not retry what
        // the drive says will fail again (media errors), and retries what it may not.
        BlockError::Device { sct, sc, dnr } => Status { sct, sc, dnr },
        BlockError::Timeout => Status::DATA_XFER_ERROR,
    }
}

/// The NSID -> namespace index table of `namespaces` (NSIDs checked: 1..=[`MAX_NSID`], unique).
fn ns_index<B>(namespaces: &[NamespaceConfig<B>]) -> Vec<u16> {
    let len = namespaces.iter().map(|n| n.nsid as usize + 1).max().unwrap_or(0);
    let mut t = alloc::vec![NO_NS; len];
    for (i, n) in namespaces.iter().enumerate() {
        t[n.nsid as usize] = i as u16;
    }
    t
}

impl<B> Subsystem<B> {
    /// The index in `cfg.namespaces` of namespace `nsid`, by table (no search).
    #[inline(always)]
    fn ns(&self, nsid: u32) -> Option<usize> {
        match self.ns_index.get(nsid as usize) {
            Some(&i) if i != NO_NS => Some(i as usize),
            _ => None,
        }
    }
}

/// The largest transfer a command to `namespaces` may carry: `target_max`, lowered to the
/// smallest of the stores' limits (a power of two, at least 4 KiB).
fn max_io_bytes<B: BlockDevice>(target_max: u32, namespaces: &[NamespaceConfig<B>]) -> u32 {
    let mut max = target_max;
    for n in namespaces {
        let dev = n.dev.max_transfer_blocks() as u64 * n.dev.block_size() as u64;
        if dev < max as u64 {
            max = 1 << (63 - dev.max(4096).leading_zeros());
        }
    }
    max
}

/// The status a block completion maps to.
pub fn block_result_status(r: Result<(), BlockError>) -> Status {
    match r {
        Ok(()) => Status::SUCCESS,
        Err(e) => blk_status(e),
    }
}

impl<B: BlockDevice> Core<B> {
    /// Build a core. Fails on a configuration the wire cannot express.
    pub fn new(cfg: TargetConfig, subsystems: Vec<SubsystemConfig<B>>) -> Result<Self, &'static str> {
        if !cfg.max_io_bytes.is_power_of_two() || cfg.max_io_bytes < 4096 {
            return Err("max_io_bytes must be a power of two >= 4096");
        }
        if cfg.inline_data_size % 16 != 0 {
            return Err("inline_data_size must be a multiple of 16");
        }
        if cfg.io_queue_depth < 2 || cfg.max_io_queues == 0 || cfg.max_ctrls == 0 {
            return Err("queue depth >= 2, queues >= 1, controllers >= 1");
        }
        cfg.limits.check()?;
        if cfg.host_auth.iter().any(|h| !subsystems.iter().any(|s| s.nqn == h.subnqn)) {
            return Err("DH-HMAC-CHAP secret for a host of an unknown subsystem");
        }
        let auth = auth::Auth::new(cfg.host_auth.clone());
        for s in &subsystems {
            if s.nqn.len() > 223 || s.nqn == DISCOVERY_NQN {
                return Err("bad subsystem NQN");
            }
            for n in &s.namespaces {
                if n.nsid == 0 || n.nsid > MAX_NSID || n.dev.block_size() < 512 || !n.dev.block_size().is_power_of_two() {
                    return Err("bad namespace id or block size");
                }
                if s.namespaces.iter().filter(|m| m.nsid == n.nsid).count() != 1 {
                    return Err("duplicate NSID");
                }
            }
        }
        let max_ctrls = cfg.max_ctrls;
        let seed = cfg.limits.cntlid_seed;
        let mut ctrls = Vec::with_capacity(cfg.max_ctrls);
        ctrls.resize_with(cfg.max_ctrls, || None);
        let mut ns_base = 0;
        let mut core = Core {
            subsystems: subsystems
                .into_iter()
                .map(|s| Subsystem {
                    ns_base: {
                        ns_base += s.namespaces.len();
                        ns_base - s.namespaces.len()
                    },
                    ns_index: ns_index(&s.namespaces),
                    ns_stats: alloc::vec![NsStats::default(); s.namespaces.len()],
                    ns_lat: s.namespaces.iter().map(|_| None).collect(),
                    ns_dev_released: alloc::vec![blockdev::DevCounters::default(); s.namespaces.len()],
                    max_io_bytes: max_io_bytes(cfg.max_io_bytes, &s.namespaces),
                    cfg: s,
                    stats: SubsysStats::default(),
                    links: 0,
                })
                .collect(),
            cfg,
            ctrls,
            cntlids: CntlidGen::new(seed),
            bounds: BoundLog::default(),
            now_ns: 0,
            genctr: 1,
            out: Box::new([0; ADMIN_MAX_XFER]),
            aen_ready: VecDeque::with_capacity(max_ctrls.saturating_mul(MAX_AERS)),
            done_buf: [BlockDone { tag: 0, result: Ok(()) }; 32],
            direct: false,
            resets: VecDeque::with_capacity(max_ctrls),
            ctrl_epoch: 0,
            inflight: 0,
            dev_clock: None,
            stats: CoreStats::default(),
            own_io: IoCounts::default(),
            auth,
            via_owner: Vec::new(),
            group_ios: 0,
        };
        core.own_io = core.io_counts();
        core.init_links()?;
        Ok(core)
    }

    pub fn config(&self) -> &TargetConfig {
        &self.cfg
    }
    /// Refusals at the admission bounds so far.
    pub fn bound_stats(&self) -> BoundStats {
        self.bounds.stats
    }
    /// Count (and rate-limit the log line of) an event at a bound the transport enforces.
    pub fn bound_hit(&mut self, b: Bound, now_ns: u64, who: &dyn core::fmt::Display) {
        self.bounds.hit(b, now_ns, who);
    }
    /// Controller→host data of the last `Respond`.
    pub fn out(&self) -> &[u8] {
        &self.out[..]
    }
    /// Number of live controllers.
    pub fn live_ctrls(&self) -> usize {
        self.ctrls.iter().filter(|c| c.is_some()).count()
    }
    /// Capsule size accepted on I/O queues, bytes.
    pub fn io_capsule_size(&self) -> usize {
        64 + self.cfg.inline_data_size as usize
    }
    /// Regions of namespace memory a transport may register for direct RDMA
    /// ([`BlockDevice::direct_region`]), one per namespace that has one.
    pub fn direct_regions(&self) -> Vec<DmaSlice> {
        self.subsystems.iter().flat_map(|s| s.cfg.namespaces.iter()).filter_map(|n| n.dev.direct_region()).collect()
    }

    /// Let Reads use the namespaces' direct memory (answer [`Action::SubmittedDirect`] or
    /// [`Action::ReadyDirect`]); a
    /// transport turns this on once it registered every [`Core::direct_regions`] entry.
    pub fn set_direct(&mut self, on: bool) {
        self.direct = on;
    }

    /// Access a namespace's device (setup/test paths).
    pub fn namespace_dev(&mut self, subsys_nqn: &str, nsid: u32) -> Option<&mut B> {
        let s = self.subsystems.iter_mut().find(|s| s.cfg.nqn == subsys_nqn)?;
        let ni = s.ns(nsid)?;
        Some(&mut s.cfg.namespaces[ni].dev)
    }

    /// The controller of queue `q`, by the slot Connect recorded (no search).
    #[inline]
    fn q_ctrl(&self, q: &QueueState) -> Option<&Ctrl> {
        let id = q.cntlid?;
        self.ctrls.get(q.ctrl_slot.0 as usize)?.as_ref().filter(|c| c.cntlid == id)
    }
    #[inline]
    fn q_ctrl_mut(&mut self, q: &QueueState) -> Option<&mut Ctrl> {
        let id = q.cntlid?;
        self.ctrls.get_mut(q.ctrl_slot.0 as usize)?.as_mut().filter(|c| c.cntlid == id)
    }

    fn ctrl_mut(&mut self, cntlid: u16) -> Option<&mut Ctrl> {
        self.ctrls.iter_mut().flatten().find(|c| c.cntlid == cntlid)
    }
    fn ctrl(&self, cntlid: u16) -> Option<&Ctrl> {
        self.ctrls.iter().flatten().find(|c| c.cntlid == cntlid)
    }

    /// Moves (wrapping) each time a controller stops being enabled: a Property Set resets it
    /// (CC.EN 1 -> 0) or shuts it down (CC.SHN), or it is freed (its admin queue gone,
    /// keep-alive expiry, its subsystem unlinked). A transport owning queues compares it with
    /// the value it last saw on its slow path, after anything that may have changed it, and
    /// when it moved calls [`Core::refresh_queue`] on each I/O queue before any of them
    /// executes another command.
    pub fn ctrl_epoch(&self) -> u32 {
        self.ctrl_epoch
    }

    /// Clear I/O queue `q`'s [`QueueState::enabled`] if its controller is gone or not enabled
    /// (never sets it). Slow path: a controller table lookup.
    pub fn refresh_queue(&self, q: &mut QueueState) {
        if q.qid != 0 && q.enabled && !self.q_ctrl(q).is_some_and(|c| c.enabled()) {
            q.enabled = false;
        }
    }

    /// Free a controller (its queues are the transport's to tear down).
    pub fn remove_ctrl(&mut self, cntlid: u16) {
        for c in self.ctrls.iter_mut() {
            if c.as_ref().is_some_and(|c| c.cntlid == cntlid) {
                *c = None;
                self.ctrl_epoch = self.ctrl_epoch.wrapping_add(1);
                self.stats.ctrls_freed += 1;
                log::info!("nvmeof: target: controller {cntlid} freed");
            }
        }
    }

    /// Fold an I/O queue's counts into its controller (the keep-alive time, commands, reads,
    /// writes) and start them again. Slow path: the transport calls it for every queue before
    /// the keep-alive check and before an admin command (which may report them), and a queue
    /// going away is folded by [`Core::queue_gone`].
    pub fn fold_queue(&mut self, q: &mut QueueState) {
        let io = q.io;
        if io == QueueCounters::default() {
            return;
        }
        q.io = QueueCounters { last_seen_ns: io.last_seen_ns, ..QueueCounters::default() };
        let Some(c) = self.q_ctrl_mut(q) else { return };
        c.last_seen_ns = c.last_seen_ns.max(io.last_seen_ns);
        c.commands += io.commands;
        c.host_reads += io.host_reads;
        c.host_writes += io.host_writes;
        c.blocks_read_512 += io.blocks_read_512;
        c.blocks_written_512 += io.blocks_written_512;
    }

    /// A queue went away: forget its I/O queue slot (the admin queue takes the controller with it).
    pub fn queue_gone(&mut self, q: &QueueState) {
        let mut last = *q;
        self.fold_queue(&mut last);
        self.auth.end(q.auth);
        let Some(cntlid) = q.cntlid else { return };
        if q.qid == 0 {
            self.remove_ctrl(cntlid);
        } else if let Some(c) = self.ctrl_mut(cntlid) {
            if let Some(slot) = c.io_connected.get_mut(q.qid as usize - 1) {
                *slot = false;
            }
        }
    }

    /// The earliest time [`Core::expired_ctrl`] finds a controller expired, from the last
    /// command each controller's admin queue saw (its I/O queues' later ones, folded in by the
    /// transport, only move it later); `None`: no controller with a keep-alive timer.
    pub fn next_ka_expiry(&self) -> Option<u64> {
        self.ctrls.iter().flatten().filter(|c| c.kato_ms != 0).map(|c| c.last_seen_ns.saturating_add(c.kato_ms as u64 * 1_000_000 + 1)).min()
    }

    /// A controller whose keep-alive timer ran out, if any (call until `None`).
    pub fn expired_ctrl(&mut self, now_ns: u64) -> Option<u16> {
        for c in self.ctrls.iter().flatten() {
            if c.kato_ms != 0 && now_ns.saturating_sub(c.last_seen_ns) > c.kato_ms as u64 * 1_000_000 {
                self.stats.ka_expired += 1;
                log::warn!("nvmeof: target: controller {} keep-alive expired ({} ms)", c.cntlid, c.kato_ms);
                return Some(c.cntlid);
            }
        }
        None
    }

    /// Report a namespace change in `subsys_nqn` (attach/resize/detach): changed-NS log + AEN.
    pub fn notify_ns_changed(&mut self, subsys_nqn: &str, nsid: u32) {
        let Some(si) = self.subsystems.iter().position(|s| s.cfg.nqn == subsys_nqn) else { return };
        self.ns_changed_at(si, nsid);
    }

    /// Namespace `nsid` of subsystem index `si` changed: into each controller's Changed
    /// Namespace List, and an AEN where one is armed.
    fn ns_changed_at(&mut self, si: usize, nsid: u32) {
        for c in self.ctrls.iter_mut().flatten().filter(|c| c.subsys == Some(si)) {
            if !c.changed.contains(&nsid) && c.changed.push(nsid).is_err() {
                c.changed_overflow = true;
            }
            if c.aec & AEC_NS_ATTR != 0 && !c.aen_masked {
                if self.aen_ready.len() >= self.aen_ready.capacity() {
                    // Cannot happen (room for every AER); the AER stays outstanding and the
                    // change stays in the log for the next event.
                    self.stats.aen_overflow += 1;
                } else if let Some(tag) = c.aers.pop() {
                    c.aen_masked = true;
                    self.aen_ready.push_back((tag, AEN_NS_CHANGED));
                }
            }
        }
    }

    /// A controller the host reset (CC.EN 1 -> 0): the transport must tear down its I/O
    /// queues (call until `None`, after answering the Property Set).
    pub fn take_reset(&mut self) -> Option<u16> {
        self.resets.pop_front()
    }

    /// Whether completed AERs wait for [`Core::take_aen`].
    #[inline(always)]
    pub fn has_aen(&self) -> bool {
        !self.aen_ready.is_empty()
    }

    /// Completed AERs: (tag, DW0).
    pub fn take_aen(&mut self) -> Option<(u64, u32)> {
        self.aen_ready.pop_front()
    }

    /// Time every namespace's I/O at its store with `clock` (nanoseconds), from now on
    /// ([`devlat`]; the metrics' device latency). Refused (false) while I/O is outstanding:
    /// its completions carry the caller's tags, not the table's.
    pub fn set_device_clock(&mut self, clock: fn() -> u64) -> bool {
        if self.inflight != 0 {
            return false;
        }
        for s in &mut self.subsystems {
            for l in &mut s.ns_lat {
                *l = Some(devlat::DevLatency::new(clock));
            }
        }
        self.dev_clock = Some(clock);
        true
    }

    /// Whether block I/O was submitted and not yet reported by [`Core::poll_block`].
    #[inline]
    pub fn block_inflight(&self) -> bool {
        self.inflight != 0
    }

    /// Block I/Os submitted and not yet reported (for reports).
    pub fn block_inflight_count(&self) -> u64 {
        self.inflight
    }

    /// The subsystems as configured (for reports: NQN, hosts, namespaces).
    pub fn subsystems(&self) -> impl Iterator<Item = &SubsystemConfig<B>> {
        self.subsystems.iter().map(|s| &s.cfg)
    }
    /// The live controllers (slow path: the metrics endpoint).
    pub fn controllers(&self) -> impl Iterator<Item = CtrlReport<'_>> {
        self.ctrls.iter().flatten().map(|c| CtrlReport {
            cntlid: c.cntlid,
            subnqn: c.subsys.and_then(|i| self.subsystems.get(i)).map(|s| s.cfg.nqn.as_str()),
            hostnqn: c.hostnqn.as_str(),
            commands: c.commands,
            reads: c.host_reads,
            writes: c.host_writes,
            bytes_read: c.blocks_read_512 * 512,
            bytes_written: c.blocks_written_512 * 512,
            errors: c.error_count,
            io_queues: c.io_queues,
        })
    }

    /// Poll the namespaces for finished I/O; `f(tag, status)` per completion, at most `max`
    /// of them: the devices keep the rest for the next call (nothing is taken that the
    /// caller has no room for). Returns how many were reported; fewer than `max` means every
    /// namespace was drained.
    pub fn poll_block(&mut self, max: usize, mut f: impl FnMut(u64, Status)) -> usize {
        // Nothing submitted, nothing to report: skip walking the namespaces (idle turns).
        if self.inflight == 0 {
            return 0;
        }
        let mut total = 0;
        // Namespaces whose store failed during this call: announced once, after the walk.
        let mut newly_failed: heapless::Vec<(usize, u32), 8> = heapless::Vec::new();
        'walk: for (si, s) in self.subsystems.iter_mut().enumerate() {
            for ((n, st), lat) in s.cfg.namespaces.iter_mut().zip(s.ns_stats.iter_mut()).zip(s.ns_lat.iter_mut()) {
                loop {
                    let room = core::cmp::min(self.done_buf.len(), max - total);
                    if room == 0 {
                        break 'walk;
                    }
                    let k = devlat::poll(&mut n.dev, lat.as_mut(), &mut self.done_buf[..room], &mut f);
                    total += k;
                    self.inflight = self.inflight.saturating_sub(k as u64);
                    if k > 0 && !st.failed && n.dev.failed() && newly_failed.push((si, n.nsid)).is_ok() {
                        st.failed = true;
                    }
                    if k < room {
                        break;
                    }
                }
            }
        }
        // Nearly always empty: no call (and no copy of the list) then.
        if !newly_failed.is_empty() {
            self.announce_failed(newly_failed);
        }
        total
    }

    /// Slow path (the transport calls it with its keep-alive checks): take out of service
    /// every namespace whose store reports failed while still in service. A store can fail
    /// with nothing in flight (a drive removed from its slot, or refusing submissions), so
    /// [`Core::poll_block`] would not see it. Returns how many were taken out.
    pub fn check_stores(&mut self) -> usize {
        let mut newly_failed: heapless::Vec<(usize, u32), 8> = heapless::Vec::new();
        for (si, s) in self.subsystems.iter_mut().enumerate() {
            for (n, st) in s.cfg.namespaces.iter().zip(s.ns_stats.iter_mut()) {
                if !st.failed && n.dev.failed() && newly_failed.push((si, n.nsid)).is_ok() {
                    st.failed = true;
                }
            }
        }
        let n = newly_failed.len();
        self.announce_failed(newly_failed);
        n
    }

    /// Log and announce (Namespace Attribute Changed) namespaces just taken out of service.
    fn announce_failed(&mut self, newly_failed: heapless::Vec<(usize, u32), 8>) {
        for (si, nsid) in newly_failed {
            log::error!("nvmeof: nvmet: {} nsid {nsid}: its store failed; namespace out of service, hosts told (Namespace Attribute Changed)", self.subsystems[si].cfg.nqn);
            self.ns_changed_at(si, nsid);
        }
    }

    /// Record a failed command in its controller's error log (transports call this for
    /// errors they detect themselves, e.g. a bad SGL).
    pub fn record_error(&mut self, q: &QueueState, cid: u16, status: Status, nsid: u32) {
        self.stats.errors += 1;
        self.stats.by_status.add(status);
        let Some(c) = self.q_ctrl_mut(q) else { return };
        c.error_count += 1;
        let subsys = c.subsys;
        if let Some(s) = subsys.and_then(|i| self.subsystems.get_mut(i)) {
            s.stats.errors += 1;
            s.stats.by_status.add(status);
        }
        let Some(c) = self.q_ctrl_mut(q) else { return };
        let mut e = ErrorLogEntry::zeroed();
        e.error_count = U64::new(c.error_count);
        e.sqid = U16::new(q.qid);
        e.cmdid = U16::new(cid);
        e.status_field = U16::new(status.to_field());
        e.param_error_location = U16::new(0xFFFF);
        e.nsid = U32::new(nsid);
        e.trtype = disc::TRTYPE_RDMA;
        c.err_head = (c.err_head + ERROR_LOG_ENTRIES - 1) % ERROR_LOG_ENTRIES;
        c.errors[c.err_head] = e;
    }

    /// Execute one command received on queue `q`, its counts folded into the core's figures
    /// at once (a caller with its own [`IoCounts`] uses [`Core::execute_counted`]). For a
    /// caller holding this one queue at a time: `q`'s [`QueueState::enabled`] is refreshed
    /// first ([`Core::refresh_queue`]; a transport owning its queues refreshes them when
    /// [`Core::ctrl_epoch`] moves instead).
    pub fn execute(&mut self, q: &mut QueueState, sqe: &Sqe, data: &DataIn<'_>, now_ns: u64) -> Action {
        self.refresh_queue(q);
        let mut own = core::mem::take(&mut self.own_io);
        let a = self.execute_counted(q, sqe, data, now_ns, &mut own);
        self.fold_io(&mut own);
        self.own_io = own;
        a
    }

    /// Execute one command received on queue `q`, counted in `counts` (the executor's own,
    /// made by [`Core::io_counts`]; no counter the core shares is written for an I/O command).
    pub fn execute_counted(&mut self, q: &mut QueueState, sqe: &Sqe, data: &DataIn<'_>, now_ns: u64, counts: &mut IoCounts) -> Action {
        // Host data still at the host: payloads the core parses come in first (the command is
        // executed again then); I/O Writes are decoded now and their data placed after.
        if !data.fetched && data.sgl_len > 0 && host_to_ctrl(sqe) && !(q.qid != 0 && matches!(sqe.opcode, io_op::WRITE | io_op::COMPARE)) {
            return Action::Fetch(Fetch::Payload);
        }
        counts.commands += 1;
        self.now_ns = now_ns;
        let auth_cmd = sqe.opcode == FABRICS_OPCODE && matches!(sqe.fctype(), fctype::AUTH_SEND | fctype::AUTH_RECV);
        // Traffic-based keep-alive (CTRATT.TBKAS): any command counts once authenticated, a
        // bounded number of authentication steps before (auth::Gate::keeps_alive). An I/O
        // queue keeps it in its own counters (no write to the controller per I/O).
        let alive = q.auth.keeps_alive(auth_cmd);
        if q.qid != 0 && q.cntlid.is_some() {
            if alive {
                q.io.last_seen_ns = now_ns;
            }
            q.io.commands += 1;
        } else if let Some(c) = self.q_ctrl_mut(q) {
            if alive {
                c.last_seen_ns = now_ns;
            }
            c.commands += 1;
        }
        let a = if q.auth != auth::Gate::Open && !auth_cmd {
            // Until DH-HMAC-CHAP succeeds only Authentication Send/Receive pass (nvmet does the same).
            self.auth.stats.refused_cmds += 1;
            Action::status(Status::AUTH_REQUIRED)
        } else if sqe.opcode == FABRICS_OPCODE {
            self.exec_fabrics(q, sqe, data, now_ns)
        } else if q.cntlid.is_none() {
            // Nothing but Connect before Connect.
            Action::status(Status::CMD_SEQ_ERROR)
        } else if q.qid != 0 {
            // An I/O command: the queue carries its controller's state and subsystem (no
            // controller table lookup); refused as `io::io_queue_refusal` says.
            self.exec_io(q, sqe, data, q.subsys as usize, counts)
        } else if self.q_ctrl(q).is_some_and(|c| c.enabled()) {
            self.exec_admin(q, sqe, data)
        } else {
            Action::status(Status::CMD_SEQ_ERROR)
        };
        if let Action::Respond { status, .. } = a {
            if !status.is_success() {
                self.record_error(q, sqe.cid.get(), status, sqe.nsid.get());
            }
        }
        a
    }
}
