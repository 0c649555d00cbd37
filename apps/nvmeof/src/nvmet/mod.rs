//! The NVMe-oF target core, independent of the transport: subsystems, namespaces, controllers,
//! Fabrics/Admin/I/O command execution, discovery, keep-alive and async events.
//!
//! A transport owns the queues; for each received command it calls [`Core::execute`] with the
//! queue's [`QueueState`], the SQE and where the command's host→controller data is. The core
//! answers with an [`Action`]: respond now (controller→host data, if any, is in
//! [`Core::out`]), I/O submitted to a namespace (completion later via [`Core::poll_block`]),
//! or hold (Asynchronous Event Request). Facts: NVMe Base 2.0, NVMe-oF 1.1, Linux
//! drivers/nvme/target/{core,admin-cmd,fabrics-cmd,discovery,io-cmd-bdev}.c behaviour.

mod cntlid;
mod connect;
pub mod limits;
pub mod auth;
pub mod rdma;
pub mod service;

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::string::String;
use alloc::vec::Vec;

use blockdev::{BlockDevice, BlockDone, BlockError, BlockIo, BlockOp};
use hal::PhysAddr;
use zerocopy::byteorder::little_endian::{U16, U32, U64, U128};
use zerocopy::{FromBytes, IntoBytes};

use crate::wire::*;
use cntlid::CntlidGen;
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

/// A listen address published in the discovery log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortConfig {
    pub portid: u16,
    pub traddr: [u8; 4],
    pub trsvcid: u16,
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
    /// Where the controller sits in the core's table (set by Connect with `cntlid`): the I/O
    /// path reaches it by index, checked against `cntlid`.
    pub ctrl_slot: CtrlSlot,
}

/// A controller's slot in the core's controller table (opaque; set by Connect).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CtrlSlot(u16);

impl QueueState {
    pub fn new(qid: u16) -> Self {
        QueueState { qid, ..Default::default() }
    }
    /// Advance and return SQHD for the next CQE.
    pub fn next_sqhd(&mut self) -> u16 {
        if self.sq_flow_disabled {
            return 0xFFFF;
        }
        let depth = self.sqsize as u32 + 1;
        self.sqhd = ((self.sqhd as u32 + 1) % depth.max(1)) as u16;
        self.sqhd
    }
}

/// Where a command's data is, as the transport has it.
#[derive(Debug, Clone, Copy)]
pub struct DataIn<'a> {
    /// Small host→controller payloads (Connect data, DSM ranges) copied for parsing.
    pub bytes: &'a [u8],
    /// The DMA buffer for namespace I/O (Write: holds the data; Read: to be filled).
    pub buf: PhysAddr,
    pub buf_len: usize,
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
    /// A Read was submitted with the namespace's own memory at `addr` as its buffer (see
    /// [`Core::set_direct`]): the device moves no data; when it completes, the transport
    /// sends the data to the host straight from `addr`.
    SubmittedDirect { addr: PhysAddr },
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
    /// A Write, decoded, checked and counted: move its data to [`PendingWrite::direct_addr`]
    /// (namespace memory, zero copy: once it is there the write is done, the device would
    /// move nothing) or else the transport's buffer, then [`Core::write_fetched`] submits it.
    Write(PendingWrite),
}

/// A decoded Write waiting for its data ([`Fetch::Write`]).
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
    pub fn direct_addr(&self) -> Option<PhysAddr> {
        self.direct.then_some(self.io.buf)
    }
    /// Bytes of data.
    #[inline]
    pub fn len(&self) -> usize {
        self.io.buf_len
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
    stats: SubsysStats,
    /// Per namespace, in `cfg.namespaces` order.
    ns_stats: Vec<NsStats>,
}

/// A namespace's counters kept by the core (cumulative).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NsStats {
    /// Host Flush commands forwarded to the namespace's store.
    pub flushes_forwarded: u64,
    /// Reads / writes the host sent with FUA set.
    pub fua_reads: u64,
    pub fua_writes: u64,
    /// Out of service since its store failed: inactive to hosts (gone from the active
    /// namespace list, Identify Namespace all zero, I/O refused with Invalid Namespace),
    /// announced by a Namespace Attribute Changed event.
    pub failed: bool,
}

/// One namespace as the metrics endpoint reports it.
#[derive(Debug, Clone, Copy)]
pub struct NsReport<'a> {
    pub subnqn: &'a str,
    pub nsid: u32,
    /// Whether the store has a volatile write cache (VWC reported for its subsystem).
    pub volatile_write_cache: bool,
    pub stats: NsStats,
    /// The store's own counters (flushes the drive was given and completed).
    pub dev: blockdev::DevCounters,
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
    /// Block I/Os submitted and not yet reported by `poll_block` (0: nothing to poll).
    inflight: u64,
    /// Controllers reset by the host (CC.EN 1 -> 0) whose I/O queues the transport must drop.
    resets: VecDeque<u16>,
    pub stats: CoreStats,
    /// In-band authentication (hosts, per-queue transactions, counters).
    pub auth: auth::Auth,
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
                if n.nsid == 0 || n.nsid == 0xFFFF_FFFF || n.dev.block_size() < 512 || !n.dev.block_size().is_power_of_two() {
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
        Ok(Core {
            subsystems: subsystems
                .into_iter()
                .map(|cfg| Subsystem { ns_stats: alloc::vec![NsStats::default(); cfg.namespaces.len()], cfg, stats: SubsysStats::default() })
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
            inflight: 0,
            stats: CoreStats::default(),
            auth,
        })
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
    pub fn direct_regions(&self) -> Vec<(PhysAddr, u64)> {
        self.subsystems.iter().flat_map(|s| s.cfg.namespaces.iter()).filter_map(|n| n.dev.direct_region()).collect()
    }

    /// Let Reads use the namespaces' direct memory (answer [`Action::SubmittedDirect`]); a
    /// transport turns this on once it registered every [`Core::direct_regions`] entry.
    pub fn set_direct(&mut self, on: bool) {
        self.direct = on;
    }

    /// Access a namespace's device (setup/test paths).
    pub fn namespace_dev(&mut self, subsys_nqn: &str, nsid: u32) -> Option<&mut B> {
        let s = self.subsystems.iter_mut().find(|s| s.cfg.nqn == subsys_nqn)?;
        s.cfg.namespaces.iter_mut().find(|n| n.nsid == nsid).map(|n| &mut n.dev)
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

    /// Free a controller (its queues are the transport's to tear down).
    pub fn remove_ctrl(&mut self, cntlid: u16) {
        for c in self.ctrls.iter_mut() {
            if c.as_ref().is_some_and(|c| c.cntlid == cntlid) {
                *c = None;
                self.stats.ctrls_freed += 1;
                log::info!("nvmeof: target: controller {cntlid} freed");
            }
        }
    }

    /// A queue went away: forget its I/O queue slot (the admin queue takes the controller with it).
    pub fn queue_gone(&mut self, q: &QueueState) {
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

    /// The namespace memory an I/O command on queue `q` would change, as (direct address,
    /// bytes), when zero-copy reads are on: Write and Write Zeroes name their range, Dataset
    /// Management answers "anything" (`(0, u64::MAX)`). `None` when the command changes no
    /// direct memory (or is invalid: `execute` will reject it). A transport holds such a
    /// command while a zero-copy read of overlapping memory is still being sent.
    pub fn modifies_direct(&self, q: &QueueState, sqe: &Sqe) -> Option<(PhysAddr, u64)> {
        if !self.direct || q.qid == 0 {
            return None;
        }
        match sqe.opcode {
            io_op::WRITE | io_op::WRITE_ZEROES => {}
            io_op::DSM => return Some((0, u64::MAX)),
            _ => return None,
        }
        let si = self.q_ctrl(q)?.subsys?;
        let n = self.subsystems[si].cfg.namespaces.iter().find(|n| n.nsid == sqe.nsid.get())?;
        let slba = sqe.cdw10.get() as u64 | ((sqe.cdw11.get() as u64) << 32);
        let nlb = (sqe.cdw12.get() & 0xFFFF) + 1;
        let pa = n.dev.direct(slba, nlb)?;
        Some((pa, nlb as u64 * n.dev.block_size() as u64))
    }

    /// A controller the host reset (CC.EN 1 -> 0): the transport must tear down its I/O
    /// queues (call until `None`, after answering the Property Set).
    pub fn take_reset(&mut self) -> Option<u16> {
        self.resets.pop_front()
    }

    /// Completed AERs: (tag, DW0).
    pub fn take_aen(&mut self) -> Option<(u64, u32)> {
        self.aen_ready.pop_front()
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
    /// Each subsystem's cumulative counters, with its NQN.
    pub fn subsystem_stats(&self) -> impl Iterator<Item = (&str, SubsysStats)> {
        self.subsystems.iter().map(|s| (s.cfg.nqn.as_str(), s.stats))
    }
    /// Every namespace with its counters (slow path: the metrics endpoint).
    pub fn namespace_stats(&self) -> impl Iterator<Item = NsReport<'_>> {
        self.subsystems.iter().flat_map(|s| {
            s.cfg.namespaces.iter().zip(&s.ns_stats).map(move |(n, st)| NsReport {
                subnqn: s.cfg.nqn.as_str(),
                nsid: n.nsid,
                volatile_write_cache: n.dev.volatile_write_cache(),
                stats: *st,
                dev: n.dev.counters(),
            })
        })
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
            for (n, st) in s.cfg.namespaces.iter_mut().zip(s.ns_stats.iter_mut()) {
                loop {
                    let room = core::cmp::min(self.done_buf.len(), max - total);
                    if room == 0 {
                        break 'walk;
                    }
                    let k = n.dev.poll(&mut self.done_buf[..room]).min(room);
                    for d in &self.done_buf[..k] {
                        f(d.tag, block_result_status(d.result));
                    }
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
        for (si, nsid) in newly_failed {
            log::error!("nvmeof: nvmet: {} nsid {nsid}: its store failed; namespace out of service, hosts told (Namespace Attribute Changed)", self.subsystems[si].cfg.nqn);
            self.ns_changed_at(si, nsid);
        }
        total
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

    /// Execute one command received on queue `q`.
    pub fn execute(&mut self, q: &mut QueueState, sqe: &Sqe, data: &DataIn<'_>, now_ns: u64) -> Action {
        // Host data still at the host: payloads the core parses come in first (the command is
        // executed again then); I/O Writes are decoded now and their data placed after.
        if !data.fetched && data.sgl_len > 0 && host_to_ctrl(sqe) && !(q.qid != 0 && sqe.opcode == io_op::WRITE) {
            return Action::Fetch(Fetch::Payload);
        }
        self.stats.commands += 1;
        self.now_ns = now_ns;
        let auth_cmd = sqe.opcode == FABRICS_OPCODE && matches!(sqe.fctype(), fctype::AUTH_SEND | fctype::AUTH_RECV);
        if let Some(c) = self.q_ctrl_mut(q) {
            // Traffic-based keep-alive (CTRATT.TBKAS): any command counts once authenticated,
            // a bounded number of authentication steps before (auth::Gate::keeps_alive).
            if q.auth.keeps_alive(auth_cmd) {
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
        } else if !self.q_ctrl(q).is_some_and(|c| c.enabled()) {
            Action::status(Status::CMD_SEQ_ERROR)
        } else if q.qid == 0 {
            self.exec_admin(q, sqe, data)
        } else {
            self.exec_io(q, sqe, data)
        };
        if let Action::Respond { status, .. } = a {
            if !status.is_success() {
                self.record_error(q, sqe.cid.get(), status, sqe.nsid.get());
            }
        }
        a
    }

    // -----------------------------------------------------------------------------------------
    // Fabrics
    // -----------------------------------------------------------------------------------------

    fn exec_fabrics(&mut self, q: &mut QueueState, sqe: &Sqe, data: &DataIn<'_>, now_ns: u64) -> Action {
        match sqe.fctype() {
            fctype::CONNECT => self.connect(q, sqe, data, now_ns),
            _ if q.cntlid.is_none() => Action::status(Status::CMD_SEQ_ERROR),
            fctype::PROPERTY_GET if q.qid == 0 => self.property_get(q, sqe),
            fctype::PROPERTY_SET if q.qid == 0 => self.property_set(q, sqe),
            fctype::PROPERTY_GET | fctype::PROPERTY_SET => Action::status(Status::INVALID_OPCODE),
            // Disconnect of an I/O queue: the transport tears the queue down after responding.
            fctype::DISCONNECT if q.qid != 0 => Action::ok(0, 0),
            fctype::AUTH_SEND | fctype::AUTH_RECV => self.auth_cmd(q, sqe, data),
            _ => Action::status(Status::INVALID_OPCODE),
        }
    }

    /// Authentication Send/Receive on a queue whose host must authenticate.
    fn auth_cmd(&mut self, q: &mut QueueState, sqe: &Sqe, data: &DataIn<'_>) -> Action {
        let Some(c) = q.cntlid.and_then(|id| self.ctrl(id)) else { return Action::status(Status::CMD_SEQ_ERROR) };
        let Some(subnqn) = c.subsys.and_then(|i| self.subsystems.get(i)).map(|s| s.cfg.nqn.clone()) else {
            return Action::status(Status::INVALID_OPCODE);
        };
        // Connection setup path only: the NQN copies are not per-I/O work.
        let hostnqn = c.hostnqn.clone();
        if sqe.fctype() == fctype::AUTH_SEND {
            let st = self.auth.send(&mut q.auth, sqe, data.bytes, data.sgl_len, &hostnqn, &subnqn);
            Action::status(st)
        } else {
            let (st, n) = self.auth.receive(&mut q.auth, sqe, &mut self.out[..], data.sgl_len, &hostnqn);
            Action::Respond { status: st, dw0: 0, dw1: 0, out_len: n }
        }
    }

    fn cap(&self) -> u64 {
        // MQES (0-based), TO = 15 × 500 ms, CSS bit 0 (NVM), MPSMIN = MPSMAX = 0 (4 KiB).
        nvme_spec::props::Cap::new().with_mqes(self.cfg.io_queue_depth - 1).with_to(15).with_css(1).into_bits()
    }

    fn property_get(&mut self, q: &QueueState, sqe: &Sqe) -> Action {
        let cmd = PropertyGetCmd::read_from_bytes(sqe.as_bytes()).expect("64 bytes");
        let Some(c) = self.ctrl(q.cntlid.unwrap_or(0)) else { return Action::status(Status::INTERNAL) };
        let eight = cmd.attrib & 7 == 1;
        let v: u64 = match (cmd.offset.get(), eight) {
            (prop::CAP, true) => self.cap(),
            (prop::VS, false) => nvme_spec::props::Vs::new().with_major(1).with_minor(3).into_bits() as u64,
            (prop::CC, false) => c.cc as u64,
            (prop::CSTS, false) => c.csts as u64,
            _ => return Action::status(Status::INVALID_FIELD),
        };
        Action::Respond { status: Status::SUCCESS, dw0: v as u32, dw1: (v >> 32) as u32, out_len: 0 }
    }

    fn property_set(&mut self, q: &QueueState, sqe: &Sqe) -> Action {
        let cmd = PropertySetCmd::read_from_bytes(sqe.as_bytes()).expect("64 bytes");
        let Some(c) = self.ctrl_mut(q.cntlid.unwrap_or(0)) else { return Action::status(Status::INTERNAL) };
        if cmd.offset.get() != prop::CC || cmd.attrib & 7 != 0 {
            return Action::status(Status::INVALID_FIELD);
        }
        let new = cmd.value.get() as u32;
        let old = c.cc;
        let mut reset = None;
        c.cc = new;
        if cc::en(new) && !cc::en(old) {
            if cc::valid_for_enable(new) {
                c.csts = csts::RDY;
            } else {
                c.csts = csts::CFS;
            }
        } else if !cc::en(new) && cc::en(old) {
            // Controller reset (NVMe Base 2.0 §3.7.2; NVMe-oF: the I/O queues are deleted and
            // their connections torn down, the admin queue stays): pending AERs are dropped
            // without completion, the transport drops the I/O queues (`take_reset`).
            c.csts = 0;
            c.io_connected.iter_mut().for_each(|s| *s = false);
            c.aers.clear();
            reset = Some(c.cntlid);
        }
        if cc::shn(new) != 0 && cc::shn(old) == 0 {
            c.csts = (c.csts & !csts::RDY) | csts::SHST_COMPLETE;
        } else if cc::shn(new) == 0 && cc::shn(old) != 0 {
            c.csts &= !csts::SHST_COMPLETE;
        }
        if let Some(id) = reset {
            if !self.resets.iter().any(|&x| x == id) {
                if self.resets.len() < self.resets.capacity() {
                    self.resets.push_back(id);
                } else {
                    self.stats.reset_overflow += 1;
                    log::warn!("nvmeof: target: reset list full; controller {id}'s I/O queues stay until disconnect");
                }
            }
        }
        Action::ok(0, 0)
    }

    // -----------------------------------------------------------------------------------------
    // Admin
    // -----------------------------------------------------------------------------------------

    fn exec_admin(&mut self, q: &mut QueueState, sqe: &Sqe, data: &DataIn<'_>) -> Action {
        let cntlid = q.cntlid.unwrap_or(0);
        let discovery = self.ctrl(cntlid).is_some_and(|c| c.subsys.is_none());
        match sqe.opcode {
            admin_op::IDENTIFY => self.identify(cntlid, sqe, data.sgl_len),
            admin_op::GET_LOG_PAGE => self.get_log_page(cntlid, sqe, data.sgl_len),
            admin_op::KEEP_ALIVE => Action::ok(0, 0),
            admin_op::SET_FEATURES if !discovery || sqe.cdw10.get() & 0xFF == fid::KEEP_ALIVE_TIMER as u32 => {
                self.set_features(cntlid, sqe)
            }
            admin_op::GET_FEATURES => self.get_features(cntlid, sqe),
            admin_op::ASYNC_EVENT => {
                let Some(c) = self.ctrl_mut(cntlid) else { return Action::status(Status::INTERNAL) };
                if c.aers.push(data.tag).is_err() {
                    return Action::status(Status::ASYNC_LIMIT);
                }
                Action::Hold
            }
            admin_op::ABORT if !discovery => self.abort(cntlid, sqe),
            _ => Action::status(Status::INVALID_OPCODE),
        }
    }

    /// Abort (NVMe Base 2.0 §5.1): CDW10 = CID (31:16) | SQID (15:0). Commands here are never
    /// queued inside the controller (I/O is on the device or answered at once), so nothing is
    /// aborted: DW0 bit 0 = 1 ("not aborted"), the answer the spec allows for a command not
    /// found or not abortable. An SQID this controller never had is Invalid Field.
    fn abort(&mut self, cntlid: u16, sqe: &Sqe) -> Action {
        let d10 = sqe.cdw10.get();
        let sqid = (d10 & 0xFFFF) as u16;
        let Some(c) = self.ctrl(cntlid) else { return Action::status(Status::INTERNAL) };
        if sqid > c.io_queues {
            return Action::status(Status::INVALID_FIELD);
        }
        Action::ok(1, 0)
    }

    fn set_features(&mut self, cntlid: u16, sqe: &Sqe) -> Action {
        let fid = (sqe.cdw10.get() & 0xFF) as u8;
        let save = sqe.cdw10.get() & (1 << 31) != 0;
        let v = sqe.cdw11.get();
        let max_q = self.cfg.max_io_queues;
        let kato = self.cfg.limits.clamp_kato(v);
        if fid == fid::KEEP_ALIVE_TIMER && kato != v {
            self.bounds.hit(Bound::KatoClamped, self.now_ns, &cntlid);
        }
        let Some(c) = self.ctrl_mut(cntlid) else { return Action::status(Status::INTERNAL) };
        if save {
            return Action::status(Status::FEATURE_NOT_SAVEABLE);
        }
        match fid {
            fid::NUM_QUEUES => {
                let (nsq, ncq) = (v & 0xFFFF, v >> 16);
                if nsq == 0xFFFF || ncq == 0xFFFF {
                    return Action::status(Status::INVALID_FIELD);
                }
                let granted = (nsq.min(ncq) + 1).min(max_q as u32) as u16;
                c.io_queues = granted;
                let g = granted as u32 - 1;
                Action::ok(g | (g << 16), 0)
            }
            fid::KEEP_ALIVE_TIMER => {
                c.kato_ms = kato;
                Action::ok(0, 0)
            }
            fid::ASYNC_EVENT_CONFIG => {
                if v & !AEC_NS_ATTR & !0xFF != 0 {
                    return Action::status(Status::INVALID_FIELD);
                }
                c.aec = v;
                Action::ok(0, 0)
            }
            _ => Action::status(Status::INVALID_FIELD),
        }
    }

    fn get_features(&mut self, cntlid: u16, sqe: &Sqe) -> Action {
        let fid = (sqe.cdw10.get() & 0xFF) as u8;
        let Some(c) = self.ctrl(cntlid) else { return Action::status(Status::INTERNAL) };
        match fid {
            fid::NUM_QUEUES if c.subsys.is_some() => {
                let g = c.io_queues as u32 - 1;
                Action::ok(g | (g << 16), 0)
            }
            fid::KEEP_ALIVE_TIMER => Action::ok(c.kato_ms, 0),
            fid::ASYNC_EVENT_CONFIG => Action::ok(c.aec, 0),
            _ => Action::status(Status::INVALID_FIELD),
        }
    }

    fn identify(&mut self, cntlid: u16, sqe: &Sqe, sgl_len: u32) -> Action {
        let cns = (sqe.cdw10.get() & 0xFF) as u8;
        if (sgl_len as usize) < 4096 {
            return Action::status(Status::SGL_INVALID_DATA);
        }
        let Some(c) = self.ctrl(cntlid) else { return Action::status(Status::INTERNAL) };
        let subsys = c.subsys;
        let nsid = sqe.nsid.get();
        self.out[..4096].fill(0);
        match (cns, subsys) {
            (cns::CONTROLLER, _) => {
                let id = self.identify_ctrl(cntlid, subsys);
                self.out[..4096].copy_from_slice(id.as_bytes());
            }
            (cns::NAMESPACE, Some(si)) => {
                let sub = &self.subsystems[si];
                let Some(ni) = sub.cfg.namespaces.iter().position(|n| n.nsid == nsid) else {
                    return Action::status(Status::INVALID_NS);
                };
                if sub.ns_stats[ni].failed {
                    // Inactive: an all-zero page.
                    return Action::ok(0, 4096);
                }
                let id = identify_ns(&sub.cfg.namespaces[ni]);
                self.out[..4096].copy_from_slice(id.as_bytes());
            }
            (cns::ACTIVE_NS_LIST, Some(si)) => {
                let mut ids: heapless::Vec<u32, 1024> = heapless::Vec::new();
                let sub = &self.subsystems[si];
                for (n, st) in sub.cfg.namespaces.iter().zip(&sub.ns_stats) {
                    if n.nsid > nsid && nsid < 0xFFFF_FFFE && !st.failed {
                        let _ = ids.push(n.nsid);
                    }
                }
                ids.sort_unstable();
                for (i, id) in ids.iter().enumerate() {
                    self.out[i * 4..i * 4 + 4].copy_from_slice(&id.to_le_bytes());
                }
            }
            (cns::NS_DESC_LIST, Some(si)) => {
                let sub = &self.subsystems[si];
                let Some(ni) = sub.cfg.namespaces.iter().position(|n| n.nsid == nsid) else {
                    return Action::status(Status::INVALID_NS);
                };
                if sub.ns_stats[ni].failed {
                    // Inactive: no descriptors.
                    return Action::ok(0, 4096);
                }
                let n = &sub.cfg.namespaces[ni];
                let mut off = 0;
                let eui64 = n.dev.identity().map_or([0; 8], |i| i.eui64);
                let descs: [(u8, &[u8]); 3] = [(nidt::EUI64, &eui64), (nidt::NGUID, &n.nguid), (nidt::UUID, &n.nguid)];
                for (t, id) in descs {
                    if id.iter().all(|b| *b == 0) {
                        continue;
                    }
                    let h = NsIdDescHdr { nidt: t, nidl: id.len() as u8, rsvd: U16::new(0) };
                    self.out[off..off + 4].copy_from_slice(h.as_bytes());
                    self.out[off + 4..off + 4 + id.len()].copy_from_slice(id);
                    off += 4 + id.len();
                }
                let h = NsIdDescHdr { nidt: nidt::CSI, nidl: 1, rsvd: U16::new(0) };
                self.out[off..off + 4].copy_from_slice(h.as_bytes());
                self.out[off + 4] = 0; // NVM command set
            }
            _ => return Action::status(Status::INVALID_FIELD),
        }
        Action::ok(0, 4096)
    }

    fn identify_ctrl(&self, cntlid: u16, subsys: Option<usize>) -> IdentifyCtrl {
        let mut id = IdentifyCtrl::zeroed();
        let (nqn, serial, model): (&str, &str, &str) = match subsys {
            Some(si) => {
                let s = &self.subsystems[si].cfg;
                (&s.nqn, &s.serial, &s.model)
            }
            None => (DISCOVERY_NQN, "discovery", "appliance discovery"),
        };
        put_str(&mut id.sn, serial, b' ');
        put_str(&mut id.mn, model, b' ');
        put_str(&mut id.fr, env!("CARGO_PKG_VERSION"), b' ');
        put_str(&mut id.subnqn, nqn, 0);
        id.rab = 6;
        id.mdts = (self.max_io_bytes(subsys) / 4096).trailing_zeros() as u8;
        id.cntlid = U16::new(cntlid);
        id.ver = U32::new(0x0001_0300);
        id.ctratt = U32::new(1 << 2); // TBKAS: any command resets the keep-alive timer
        id.aerl = MAX_AERS as u8 - 1;
        id.acl = 3; // 4 concurrent Aborts (0's based; the spec recommends at least 4)
        id.lpa = 1 << 2; // extended data for Get Log Page (offsets)
        id.elpe = ERROR_LOG_ENTRIES as u8 - 1;
        id.kas = U16::new(10);
        id.sqes = 0x66;
        id.cqes = 0x44;
        id.sgls = U32::new(sgls::SUPPORTED | sgls::KEYED | if self.cfg.inline_data_size > 0 { sgls::OFFSET } else { 0 });
        id.ioccsz = U32::new((64 + self.cfg.inline_data_size) / 16);
        id.iorcsz = U32::new(1);
        id.icdoff = U16::new(0);
        id.msdbd = 1;
        id.frmw = 1 << 1 | 1; // one slot, slot 1 read-only
        match subsys {
            Some(si) => {
                id.cntrltype = cntrltype::IO;
                id.oaes = U32::new(OAES_NS_ATTR);
                id.maxcmd = U16::new(self.cfg.io_queue_depth);
                let nn = self.subsystems[si].cfg.namespaces.iter().map(|n| n.nsid).max().unwrap_or(0);
                id.nn = U32::new(nn);
                id.mnan = U32::new(nn);
                // Write Zeroes and Dataset Management where every namespace's store has them
                // (a drive without them would fail the host's command).
                let nss = &self.subsystems[si].cfg.namespaces;
                let all = |op| nss.iter().all(|n| n.dev.supports(op));
                let mut o = 0;
                if all(BlockOp::Deallocate) {
                    o |= oncs::DSM;
                }
                if all(BlockOp::WriteZeroes) {
                    o |= oncs::WRITE_ZEROES;
                }
                id.oncs = U16::new(o);
                // A volatile write cache anywhere in the subsystem: hosts send Flush (to one
                // namespace at a time) and FUA.
                if self.subsystems[si].cfg.namespaces.iter().any(|n| n.dev.volatile_write_cache()) {
                    id.vwc = vwc::PRESENT | vwc::FLUSH_BROADCAST_UNSUPPORTED;
                }
            }
            None => {
                id.cntrltype = cntrltype::DISCOVERY;
                id.maxcmd = U16::new(ADMIN_QUEUE_DEPTH);
            }
        }
        id
    }

    /// The largest transfer a command of subsystem `subsys` may carry: the target's limit,
    /// lowered to the smallest of its namespaces' stores (a power of two, at least 4 KiB).
    fn max_io_bytes(&self, subsys: Option<usize>) -> u32 {
        let mut max = self.cfg.max_io_bytes;
        for n in subsys.map_or(&[][..], |si| &self.subsystems[si].cfg.namespaces[..]) {
            let dev = n.dev.max_transfer_blocks() as u64 * n.dev.block_size() as u64;
            if dev < max as u64 {
                max = 1 << (63 - dev.max(4096).leading_zeros());
            }
        }
        max
    }

    fn get_log_page(&mut self, cntlid: u16, sqe: &Sqe, sgl_len: u32) -> Action {
        let d10 = sqe.cdw10.get();
        let lid = (d10 & 0xFF) as u8;
        let rae = d10 & (1 << 15) != 0;
        let numd = ((d10 >> 16) | ((sqe.cdw11.get() & 0xFFFF) << 16)) as u64 + 1;
        let len = numd * 4;
        let off = (sqe.cdw12.get() as u64) | ((sqe.cdw13.get() as u64) << 32);
        if len > ADMIN_MAX_XFER as u64 || len > sgl_len as u64 {
            return Action::status(Status::SGL_INVALID_DATA);
        }
        if off % 4 != 0 {
            return Action::status(Status::INVALID_FIELD);
        }
        let len = len as usize;
        let Some(c) = self.ctrl(cntlid) else { return Action::status(Status::INTERNAL) };
        let discovery = c.subsys.is_none();
        match (lid, discovery) {
            (lid::DISCOVERY, true) => {
                let host = c.hostnqn.clone();
                self.discovery_log(&host, off, len);
            }
            (lid::ERROR, _) => {
                let mut page = [0u8; ERROR_LOG_ENTRIES * 64];
                for i in 0..ERROR_LOG_ENTRIES {
                    let e = &c.errors[(c.err_head + i) % ERROR_LOG_ENTRIES];
                    page[i * 64..i * 64 + 64].copy_from_slice(e.as_bytes());
                }
                copy_window(&mut self.out[..len], &page, off);
            }
            (lid::SMART, false) => {
                let mut s = SmartLog::zeroed();
                s.temperature = U16::new(300);
                s.avail_spare = 100;
                s.spare_thresh = 10;
                s.data_units_read = U128::new(c.blocks_read_512.div_ceil(1000) as u128);
                s.data_units_written = U128::new(c.blocks_written_512.div_ceil(1000) as u128);
                s.host_reads = U128::new(c.host_reads as u128);
                s.host_writes = U128::new(c.host_writes as u128);
                s.power_cycles = U128::new(1);
                s.num_err_log_entries = U128::new(c.error_count as u128);
                copy_window(&mut self.out[..len], s.as_bytes(), off);
            }
            (lid::FW_SLOT, false) => {
                let mut f = FwSlotLog::zeroed();
                f.afi = 1;
                put_str(&mut f.frs[0], env!("CARGO_PKG_VERSION"), b' ');
                copy_window(&mut self.out[..len], f.as_bytes(), off);
            }
            (lid::CHANGED_NS, false) => {
                let mut l = NsList::zeroed();
                if c.changed_overflow {
                    l.ids[0] = U32::new(0xFFFF_FFFF);
                } else {
                    for (i, id) in c.changed.iter().enumerate() {
                        l.ids[i] = U32::new(*id);
                    }
                }
                copy_window(&mut self.out[..len], l.as_bytes(), off);
                if !rae {
                    if let Some(c) = self.ctrl_mut(cntlid) {
                        c.changed.clear();
                        c.changed_overflow = false;
                        c.aen_masked = false;
                    }
                }
            }
            _ => return Action::status(Status::INVALID_LOG_PAGE),
        }
        Action::ok(0, len as u32)
    }

    /// Fill `out[..len]` with the discovery log page bytes at `off`, generated per 1024-byte record.
    fn discovery_log(&mut self, hostnqn: &str, off: u64, len: usize) {
        // Entries: one per (allowed subsystem, port).
        let allowed: Vec<usize> = (0..self.subsystems.len())
            .filter(|&i| {
                let s = &self.subsystems[i].cfg;
                s.allow_any_host || s.hosts.iter().any(|h| h == hostnqn)
            })
            .collect();
        let nports = self.cfg.ports.len();
        let numrec = (allowed.len() * nports) as u64;
        let mut pos = 0usize;
        while pos < len {
            let abs = off + pos as u64;
            let rec = abs / 1024;
            let in_rec = (abs % 1024) as usize;
            let n = core::cmp::min(1024 - in_rec, len - pos);
            let mut buf = [0u8; 1024];
            if rec == 0 {
                let mut h = DiscLogHdr::zeroed();
                h.genctr = U64::new(self.genctr);
                h.numrec = U64::new(numrec);
                buf.copy_from_slice(h.as_bytes());
            } else if rec - 1 < numrec {
                let i = (rec - 1) as usize;
                let s = &self.subsystems[allowed[i / nports]].cfg;
                let p = &self.cfg.ports[i % nports];
                let mut e = DiscLogEntry::zeroed();
                e.trtype = disc::TRTYPE_RDMA;
                e.adrfam = disc::ADRFAM_IPV4;
                e.subtype = disc::SUBTYPE_NVME;
                e.treq = 0;
                e.portid = U16::new(p.portid);
                e.cntlid = U16::new(CNTLID_DYNAMIC);
                e.asqsz = U16::new(ADMIN_QUEUE_DEPTH);
                let mut port = heapless::String::<8>::new();
                let _ = core::fmt::write(&mut port, format_args!("{}", p.trsvcid));
                put_str(&mut e.trsvcid, &port, 0);
                put_str(&mut e.subnqn, &s.nqn, 0);
                let mut addr = heapless::String::<16>::new();
                let a = p.traddr;
                let _ = core::fmt::write(&mut addr, format_args!("{}.{}.{}.{}", a[0], a[1], a[2], a[3]));
                put_str(&mut e.traddr, &addr, 0);
                e.tsas[0] = disc::QPTYPE_CONNECTED;
                e.tsas[1] = disc::PRTYPE_NOT_SPECIFIED;
                e.tsas[2] = disc::CMS_RDMA_CM;
                buf.copy_from_slice(e.as_bytes());
            }
            self.out[pos..pos + n].copy_from_slice(&buf[in_rec..in_rec + n]);
            pos += n;
        }
    }

    // -----------------------------------------------------------------------------------------
    // I/O
    // -----------------------------------------------------------------------------------------

    fn exec_io(&mut self, q: &mut QueueState, sqe: &Sqe, data: &DataIn<'_>) -> Action {
        let Some(si) = self.q_ctrl(q).and_then(|c| c.subsys) else { return Action::status(Status::INVALID_OPCODE) };
        let nsid = sqe.nsid.get();
        if !matches!(sqe.opcode, io_op::READ | io_op::WRITE | io_op::FLUSH | io_op::WRITE_ZEROES | io_op::DSM) {
            return Action::status(Status::INVALID_OPCODE);
        }
        // Identify Controller says Flush with NSID FFFFFFFFh is not supported (VWC bits
        // 2:1 = 10b): such a command is aborted with Invalid Namespace (Base spec, Flush).
        let Some(ni) = self.subsystems[si].cfg.namespaces.iter().position(|n| n.nsid == nsid) else {
            return Action::status(Status::INVALID_NS);
        };
        if self.subsystems[si].ns_stats[ni].failed {
            return Action::status(Status::INVALID_NS);
        }
        let (bs, cap) = {
            let d = &self.subsystems[si].cfg.namespaces[ni].dev;
            (d.block_size() as u64, d.num_blocks())
        };
        let slba = sqe.cdw10.get() as u64 | ((sqe.cdw11.get() as u64) << 32);
        let nlb = (sqe.cdw12.get() & 0xFFFF) + 1;
        let range_ok = slba.checked_add(nlb as u64).is_some_and(|e| e <= cap);
        let (op, blocks, buf, buf_len) = match sqe.opcode {
            io_op::READ | io_op::WRITE => {
                let bytes = nlb as u64 * bs;
                if bytes != data.sgl_len as u64 {
                    return Action::status(Status::SGL_INVALID_DATA);
                }
                if bytes > self.cfg.max_io_bytes as u64 || bytes > data.buf_len as u64 {
                    return Action::status(Status::INVALID_FIELD);
                }
                if !range_ok {
                    return Action::status(Status::LBA_RANGE);
                }
                let c = self.q_ctrl_mut(q).expect("checked");
                let op = if sqe.opcode == io_op::READ {
                    c.host_reads += 1;
                    c.blocks_read_512 += bytes / 512;
                    BlockOp::Read
                } else {
                    c.host_writes += 1;
                    c.blocks_written_512 += bytes / 512;
                    BlockOp::Write
                };
                (op, nlb, data.buf, bytes as usize)
            }
            io_op::FLUSH => {
                self.subsystems[si].ns_stats[ni].flushes_forwarded += 1;
                (BlockOp::Flush, 0, 0, 0)
            }
            io_op::WRITE_ZEROES => {
                if !range_ok {
                    return Action::status(Status::LBA_RANGE);
                }
                (BlockOp::WriteZeroes, nlb, 0, 0)
            }
            io_op::DSM => return self.dsm(si, ni, sqe, data, cap),
            _ => return Action::status(Status::INVALID_OPCODE),
        };
        let fua = matches!(op, BlockOp::Read | BlockOp::Write) && sqe.cdw12.get() & rw_cdw12::FUA != 0;
        let sub = &mut self.subsystems[si];
        if fua {
            let st = &mut sub.ns_stats[ni];
            if op == BlockOp::Read {
                st.fua_reads += 1;
            } else {
                st.fua_writes += 1;
            }
        }
        if op == BlockOp::Read {
            sub.stats.reads += 1;
            sub.stats.bytes_read += buf_len as u64;
        } else if op == BlockOp::Write {
            sub.stats.writes += 1;
            sub.stats.bytes_written += buf_len as u64;
        }
        let dev = &mut sub.cfg.namespaces[ni].dev;
        // Zero copy: a Read from (a keyed-SGL Write into) memory the transport can RDMA from
        // (into) directly names that memory as its buffer (the device moves nothing). Data
        // already here (in-capsule) is copied by the device.
        let zero_copy = op == BlockOp::Read || (op == BlockOp::Write && !data.fetched);
        let direct = if zero_copy && self.direct { dev.direct(slba, blocks) } else { None };
        let io = BlockIo { op, lba: if op == BlockOp::Flush { 0 } else { slba }, blocks, buf: direct.unwrap_or(buf), buf_len, tag: data.tag, fua };
        if op == BlockOp::Read {
            self.stats.reads += 1;
        } else if op == BlockOp::Write {
            self.stats.writes += 1;
            if !data.fetched {
                return Action::Fetch(Fetch::Write(PendingWrite { subsys: si as u16, ns: ni as u16, io, direct: direct.is_some() }));
            }
        }
        match dev.submit(&io) {
            Ok(()) => {
                self.inflight += 1;
                // Test-only mutation (emu/sim's demo, feature `sim-mutation`): acknowledge a
                // write as soon as it is handed to the device, before its data is placed.
                #[cfg(feature = "sim-mutation")]
                if op == BlockOp::Write {
                    return Action::ok(0, 0);
                }
                match direct {
                    Some(addr) => Action::SubmittedDirect { addr },
                    None => Action::Submitted { count: 1 },
                }
            }
            Err(e) => Action::status(blk_status(e)),
        }
    }

    /// Submit a Write whose data the transport moved in ([`Fetch::Write`]): into namespace
    /// memory (`direct_addr`; the device moves nothing) or into `buf`. Answers
    /// [`Action::Submitted`] or an error status (recorded by the caller's `record_error`).
    pub fn write_fetched(&mut self, w: &PendingWrite, buf: PhysAddr, tag: u64) -> Action {
        let Some(n) = self.subsystems.get_mut(w.subsys as usize).and_then(|s| s.cfg.namespaces.get_mut(w.ns as usize)) else {
            return Action::status(Status::INTERNAL);
        };
        let io = BlockIo { buf: if w.direct { w.io.buf } else { buf }, tag, ..w.io };
        match n.dev.submit(&io) {
            Ok(()) => {
                self.inflight += 1;
                Action::Submitted { count: 1 }
            }
            Err(e) => Action::status(blk_status(e)),
        }
    }

    fn dsm(&mut self, si: usize, ni: usize, sqe: &Sqe, data: &DataIn<'_>, cap: u64) -> Action {
        let nr = (sqe.cdw10.get() & 0xFF) as usize + 1;
        let need = nr * DsmRange::SIZE;
        if (data.sgl_len as usize) < need || data.bytes.len() < need {
            return Action::status(Status::SGL_INVALID_DATA);
        }
        if sqe.cdw11.get() & DSM_ATTR_DEALLOCATE == 0 {
            // Only hints: nothing to do.
            return Action::ok(0, 0);
        }
        for r in data.bytes[..need].chunks_exact(DsmRange::SIZE) {
            let r = DsmRange::read_from_bytes(r).expect("16 bytes");
            if !r.slba.get().checked_add(r.nlb.get() as u64).is_some_and(|e| e <= cap) {
                return Action::status(Status::LBA_RANGE);
            }
        }
        let mut count = 0u16;
        let dev = &mut self.subsystems[si].cfg.namespaces[ni].dev;
        for r in data.bytes[..need].chunks_exact(DsmRange::SIZE) {
            let r = DsmRange::read_from_bytes(r).expect("16 bytes");
            if r.nlb.get() == 0 {
                continue;
            }
            let io = BlockIo { op: BlockOp::Deallocate, lba: r.slba.get(), blocks: r.nlb.get(), buf: 0, buf_len: 0, tag: data.tag, fua: false };
            match dev.submit(&io) {
                Ok(()) => {
                    count += 1;
                    self.inflight += 1;
                }
                // Deallocate is advisory: a store that cannot do it simply keeps the data.
                Err(BlockError::Unsupported) => {}
                Err(e) if count == 0 => return Action::status(blk_status(e)),
                Err(_) => {}
            }
        }
        if count == 0 {
            Action::ok(0, 0)
        } else {
            Action::Submitted { count }
        }
    }
}

/// Identify Namespace for `n`: size and block size from its store, the drive's identity
/// and layout hints when the store has them (LBA format 0 is the data size the host sees;
/// the driver handles any metadata itself), NGUID as configured.
fn identify_ns<B: BlockDevice>(n: &NamespaceConfig<B>) -> IdentifyNs {
    let mut id = IdentifyNs::zeroed();
    let blocks = n.dev.num_blocks();
    id.nsze = U64::new(blocks);
    id.ncap = U64::new(blocks);
    id.nuse = U64::new(blocks);
    id.nlbaf = 0;
    id.flbas = 0;
    id.nguid = n.nguid;
    id.lbaf[0].lbads = n.dev.block_size().trailing_zeros() as u8;
    if let Some(d) = n.dev.identity() {
        if d.ncap != 0 {
            id.ncap = U64::new(d.ncap.min(blocks));
            id.nuse = U64::new(d.nuse.min(blocks));
        }
        id.nsfeat = d.nsfeat;
        id.dlfeat = d.dlfeat;
        id.noiob = U16::new(d.noiob);
        id.npwg = U16::new(d.npwg);
        id.npwa = U16::new(d.npwa);
        id.npdg = U16::new(d.npdg);
        id.npda = U16::new(d.npda);
        id.nows = U16::new(d.nows);
        id.eui64 = d.eui64;
    }
    id
}

/// Copy the window of `page` starting at `off` into `out` (zero beyond the page).
fn copy_window(out: &mut [u8], page: &[u8], off: u64) {
    out.fill(0);
    if off < page.len() as u64 {
        let off = off as usize;
        let n = core::cmp::min(out.len(), page.len() - off);
        out[..n].copy_from_slice(&page[off..off + n]);
    }
}
