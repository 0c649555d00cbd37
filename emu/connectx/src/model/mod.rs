//! The adapter model: initialization segment, command interface, firmware state and objects.
//!
//! A command-doorbell write executes the command at once: the entry and its mailboxes are read
//! from `PhysMem` and checked the way the adapter checks them (type, token, block numbers,
//! pointers, lengths → delivery status), the command runs with the firmware's checks (opcode,
//! op_mod, lengths, function state, objects, pages → status and syndrome), the output is
//! written back, ownership returns to software, and a command-completion EQE is posted when
//! an EQ asked for those.
//!
//! One module per job: `bar` (initialization segment and UAR doorbells), `cmdif` (command
//! delivery), `exec` (checks common to all commands and the dispatch), then command execution
//! per object as Linux splits mlx5_core: `hca` (enable/init, ISSI, registers), `teardown`
//! (TEARDOWN_HCA, fast teardown through `nic_interface`), `caps`,
//! `pages`, `alloc` (UAR, PD, transport domain), `eq`, `cq`, `mkey`, `qp`, `vport` (vport
//! context and GIDs); raw Ethernet objects and flow steering are in [`crate::raw`].

use std::collections::{BTreeMap, BTreeSet};

use hal::PhysAddr;

use crate::consts::{status as st, synd};
use crate::mem::{PhysMem, SimClock};
use crate::profile::Profile;

mod alloc;
mod bar;
mod caps;
mod cmdif;
mod cq;
mod eq;
mod exec;
mod hca;
mod mkey;
mod pages;
mod qcounter;
mod qp;
mod srq;
pub mod teardown;
mod vport;

pub use cq::Cq;
pub use eq::Eq;
pub use mkey::{Mkey, DUMP_FILL_MKEY, NULL_MKEY, RESD_LKEY};
pub use qp::Qp;
pub use srq::Rmp;
pub use vport::Vport;

/// Page size the adapter uses for everything (pages given to firmware, PAS entries).
pub const PAGE: u64 = 4096;
/// First UAR index handed out; BAR0 pages below it hold the initialization segment.
pub const FIRST_UAR: u32 = 8;
/// Size of the BAR0 window.
pub const BAR0_SIZE: usize = 32 << 20;
/// Mailbox blocks must be aligned to this (Linux uses a 1 KiB-aligned pool).
pub const MAILBOX_ALIGN: u64 = 1024;
/// Largest command input/output the model accepts (delivery status beyond it).
pub const MAX_CMD_LEN: u32 = 16 + 512 * 512;
/// Fill pattern the firmware writes into pages it is given; checked when they come back.
pub const FW_PAGE_FILL: u8 = 0xF7;

/// What the model looks like and how much it asks for.
#[derive(Debug, Clone)]
pub struct Config {
    /// The part being modelled: identity, capabilities, page demand, behaviours.
    pub profile: Profile,
    /// Virtual time after creation until `initializing` clears.
    pub init_delay_ns: u64,
    pub mac: [u8; 6],
    /// Virtual nanoseconds per health-counter increment.
    pub health_tick_ns: u64,
    /// Let the port answer ARP requests for its IPv4 address by itself (emu-roce `answer_arp`).
    /// A real ConnectX does not: its driver answers through the raw Ethernet queues. Set false
    /// to test that path. Either way every ARP frame also goes up the raw path.
    pub port_answers_arp: bool,
    /// The function offers PCIe Function Level Reset (DevCap FLR; ConnectX parts do): a
    /// platform with config-space access may reset it that way (`hal::Mmio::function_level_reset`
    /// on [`crate::Bar0`]). False models a platform without it (the driver uses SW_RESET).
    pub flr: bool,
}

impl Config {
    /// The default configuration of the profile `profile`.
    pub fn for_profile(profile: Profile) -> Self {
        Config { profile, ..Default::default() }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            profile: Profile::default(),
            init_delay_ns: 2_000_000,
            mac: [0x02, 0x00, 0x5e, 0x10, 0x00, 0x01],
            health_tick_ns: 1_000_000,
            port_answers_arp: true,
            flr: true,
        }
    }
}

/// Fault knobs. Set through `ConnectX::faults_mut`.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// `initializing` never clears.
    pub stuck_initializing: bool,
    /// Commands with these opcodes are taken but never completed (ownership stays with HW).
    pub hang_opcodes: BTreeSet<u16>,
    /// Every command hangs.
    pub hang_all: bool,
    /// The health counter stops advancing.
    pub health_stopped: bool,
    /// Force this status and syndrome for an opcode (the command is not executed).
    pub forced: BTreeMap<u16, (u8, u32)>,
    /// How many more commands of a `forced` opcode execute normally before the forced status
    /// applies (counted down; none listed: the next one fails), to fail the Nth of a sequence.
    pub forced_after: BTreeMap<u16, u32>,
    /// MANAGE_PAGES give fails with NO_RESOURCES.
    pub refuse_pages: bool,
    /// MANAGE_PAGES take returns no pages.
    pub withhold_pages: bool,
    /// TEARDOWN_HCA graceful (profile 0) fails with INTERNAL_ERR; force close still works
    /// where the profile has force_teardown.
    pub fail_graceful_teardown: bool,
    /// TEARDOWN_HCA PREPARE_FAST_TEARDOWN answers state FORCE_STATE_FAIL.
    pub fail_fast_teardown: bool,
    /// TEARDOWN_HCA FORCE_CLOSE answers state FORCE_STATE_FAIL.
    pub fail_force_teardown: bool,
    /// After PREPARE_FAST_TEARDOWN, `nic_interface` = DISABLED is never acted on (keeps
    /// reading FULL_DRIVER; the function stays initialized).
    pub stuck_fast_teardown: bool,
}

/// Counters: live objects and pages (for leak checks) and events.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    pub uars: usize,
    pub eqs: usize,
    pub pds: usize,
    pub tds: usize,
    pub mkeys: usize,
    pub cqs: usize,
    pub qps: usize,
    /// Live RMPs (shared receive queues).
    pub rmps: usize,
    pub gids: usize,
    /// Pages currently held by the firmware.
    pub pages_held: usize,
    pub commands: u64,
    pub cmd_failures: u64,
    pub delivery_failures: u64,
    pub hung_commands: u64,
    pub eqes: u64,
    pub cqes: u64,
    pub page_requests: u64,
    /// Device DMA that hit unmapped memory (mailboxes, queues, DBRs...).
    pub dma_faults: u64,
    /// Objects the firmware dropped at TEARDOWN_HCA because the driver had not destroyed them.
    pub objects_abandoned: u64,
    /// Pages still held at DISABLE_HCA (never reclaimed by the driver).
    pub pages_abandoned: u64,
    /// Firmware pages found modified by the host when taken back.
    pub fw_page_corruptions: u64,
    pub eq_overruns: u64,
    pub cq_overruns: u64,
    /// Completion events raised by doorbell recovery on CQs whose arm word was never written.
    pub db_recoveries: u64,
    /// TEARDOWN_HCA PREPARE_FAST_TEARDOWN accepted / fast teardowns completed
    /// (`nic_interface` = DISABLED) and the pages they released without MANAGE_PAGES.
    pub fast_teardowns_prepared: u64,
    pub fast_teardowns: u64,
    pub pages_released_by_fast_teardown: u64,
    /// `nic_interface` = DISABLED written without a prepared fast teardown (not acted on).
    pub ignored_nic_interface_writes: u64,
    /// Software resets (`nic_interface` = SW_RESET) carried out.
    pub sw_resets: u64,
    /// PCIe Function Level Resets carried out.
    pub flrs: u64,
    /// QPs the adapter drove to ERROR on its own (fault injection).
    pub injected_qp_errors: u64,
    /// Frames the RoCE engine dropped for a bad ICRC before a function reset replaced it.
    pub rx_bad_icrc_before_resets: u64,
    /// Commands held until the driver gave pages asked for in the middle of them.
    pub mid_command_page_requests: u64,
    /// Doorbells that named no object or a slot software still owned.
    pub stray_doorbells: u64,
    /// Send WQEs parsed from SQ buffers / receive WQEs from RQ buffers.
    pub send_wqes: u64,
    pub recv_wqes: u64,
    /// WQEs the adapter could not execute (bad opcode, qpn, ds, segments): error CQE.
    pub bad_wqes: u64,
    /// Non-RoCE frames received with no raw Ethernet queue to take them.
    pub raw_frames_dropped: u64,
    /// Live raw-Ethernet objects (TIS, TIR, SQ, RQ, flow tables, groups, entries).
    pub raw_objects: usize,
    /// EQEs written to an armed EQ (an MSI-X interrupt on hardware; the EQ disarms).
    pub interrupts: u64,
    /// CPU stores to BAR0 (each `write32`/`write64` is one MMIO write): the cost a driver
    /// pays in uncached writes, doorbells included.
    pub mmio_writes: u64,
    /// CPU loads from BAR0.
    pub mmio_reads: u64,
    /// Send-queue doorbells accepted (64-bit writes to UAR+0x800..0xFFF naming a live SQ).
    pub sq_doorbells: u64,
    /// CQ arm doorbells (UAR+0x20) and EQ doorbells (UAR+0x40/0x48).
    pub cq_arm_doorbells: u64,
    pub eq_doorbells: u64,
    /// SRQ limit events raised (EQE SRQ_RQ_LIMIT) and SRQs that went to error (SRQ_CATAS_ERROR).
    pub srq_limit_events: u64,
    pub srq_errors: u64,
    /// Live queue counter sets (ALLOC_Q_COUNTER).
    pub q_counters: usize,
}

impl Counters {
    /// Live objects of every kind together.
    pub fn live_objects(&self) -> usize {
        self.uars + self.eqs + self.pds + self.tds + self.mkeys + self.cqs + self.qps + self.rmps + self.q_counters + self.raw_objects
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FuncState {
    Disabled,
    Enabled,
    Initialized,
    TornDown,
}

/// A queue buffer described by a page list.
#[derive(Debug, Clone)]
pub struct QBuf {
    pub pas: Vec<PhysAddr>,
    pub log_page_size: u8,
    /// Byte offset of the buffer inside its first page.
    pub offset: u64,
}

impl QBuf {
    /// Physical address of byte `off` of the buffer (None past the page list).
    pub fn pa(&self, off: u64) -> Option<PhysAddr> {
        let ps = PAGE << self.log_page_size;
        let o = off + self.offset;
        let page = (o / ps) as usize;
        self.pas.get(page).map(|p| p + o % ps)
    }
}

/// A command's result: output bytes, or (status, syndrome).
type CmdResult = Result<Vec<u8>, (u8, u32)>;

fn fail<T>(status: u8, syndrome: u32) -> Result<T, (u8, u32)> {
    Err((status, syndrome))
}

fn need(inp: &[u8], n: usize) -> Result<(), (u8, u32)> {
    if inp.len() < n {
        fail(st::BAD_INP_LEN, synd::INPUT_TOO_SHORT)
    } else {
        Ok(())
    }
}

fn out(n: usize) -> Vec<u8> {
    vec![0u8; n]
}

/// The whole device state (behind `ConnectX`).
pub struct Device {
    pub mem: PhysMem,
    pub clock: SimClock,
    pub cfg: Config,
    pub faults: Faults,
    pub ctr: Counters,
    created_ns: u64,
    cmdq_h: u32,
    cmdq_l: u32,
    /// Fast-teardown handshake ([`teardown`]); drives `nic_interface`.
    pub(crate) fast_teardown: teardown::FastTeardown,
    pub func: FuncState,
    pub issi: u16,
    pub pages: BTreeSet<PhysAddr>,
    pub(crate) page_req_outstanding: u32,
    pub(crate) extra_regular: i64,
    /// A command slot held until the pages asked for during it are given.
    pub(crate) parked: Option<u32>,
    pub(crate) cap_cur: Vec<u8>,
    cap_max: Vec<u8>,
    roce_cur: Vec<u8>,
    roce_max: Vec<u8>,
    pub host_endianness_le: Option<bool>,
    pub uars: BTreeSet<u32>,
    pub pds: BTreeSet<u32>,
    pub tds: BTreeSet<u32>,
    pub eqs: BTreeMap<u8, Eq>,
    pub cqs: BTreeMap<u32, Cq>,
    pub qps: BTreeMap<u32, Qp>,
    /// Shared receive queues (RMPs) by number.
    pub rmps: BTreeMap<u32, Rmp>,
    /// Queue counter sets by id, each with what QPs that left it had counted ([`qcounter`]).
    pub(crate) qcounters: BTreeMap<u8, qcounter::Vals>,
    pub mkeys: BTreeMap<u32, Mkey>,
    pub vport: Vport,
    pub gids: Vec<Option<[u8; 0x20]>>,
    health_frozen_at: Option<u32>,
    pub(crate) health_synd: u8,
    /// SQ doorbells (qpn, first 8 bytes of the ctrl segment) waiting for the data path.
    pub sq_doorbells: Vec<(u32, u64)>,
    /// The storage `process_sq_doorbells` swaps with `sq_doorbells` to run the pending ones
    /// (always empty outside it), so a doorbell reuses capacity instead of allocating.
    pub(crate) sq_doorbells_spare: Vec<(u32, u64)>,
    /// The RoCEv2 transport engine (exists between INIT_HCA and TEARDOWN_HCA).
    pub engine: Option<emu_roce::Engine>,
    /// The wire; without one, transmitted frames are dropped.
    pub link: Option<Box<dyn emu_roce::Link + Send>>,
    /// Raw Ethernet queues and steering.
    pub raw: crate::raw::Raw,
    /// Frames the port sent to itself, on their way back in ([`crate::loopback`]).
    pub loopback: crate::loopback::Loopback,
}

/// Entries in the GID (RoCE address) table.
const GID_TABLE: usize = 16;

impl Device {
    pub fn new(mem: PhysMem, clock: SimClock, cfg: Config) -> Self {
        let created_ns = clock.now_ns();
        let mut d = Device {
            vport: Vport { mac: cfg.mac, mtu: 1500, ..Default::default() },
            mem,
            clock,
            cfg,
            faults: Faults::default(),
            ctr: Counters::default(),
            created_ns,
            cmdq_h: 0,
            cmdq_l: 0,
            fast_teardown: Default::default(),
            func: FuncState::Disabled,
            issi: 0,
            pages: BTreeSet::new(),
            page_req_outstanding: 0,
            extra_regular: 0,
            parked: None,
            cap_cur: vec![0; 0x1000],
            cap_max: vec![0; 0x1000],
            roce_cur: vec![0; 0x1000],
            roce_max: vec![0; 0x1000],
            host_endianness_le: None,
            uars: BTreeSet::new(),
            pds: BTreeSet::new(),
            tds: BTreeSet::new(),
            eqs: BTreeMap::new(),
            cqs: BTreeMap::new(),
            qps: BTreeMap::new(),
            rmps: BTreeMap::new(),
            qcounters: BTreeMap::new(),
            mkeys: BTreeMap::new(),
            gids: vec![None; GID_TABLE],
            health_frozen_at: None,
            health_synd: 0,
            sq_doorbells: Vec::with_capacity(16),
            sq_doorbells_spare: Vec::with_capacity(16),
            engine: None,
            link: None,
            raw: crate::raw::Raw::default(),
            loopback: Default::default(),
        };
        d.reset_caps();
        d
    }

    /// Counters with live-object counts filled in.
    pub fn ctr_live(&self) -> Counters {
        let mut c = self.ctr.clone();
        c.uars = self.uars.len();
        c.eqs = self.eqs.len();
        c.pds = self.pds.len();
        c.tds = self.tds.len();
        c.mkeys = self.mkeys.len();
        c.cqs = self.cqs.len();
        c.qps = self.qps.len();
        c.rmps = self.rmps.len();
        c.q_counters = self.qcounters.len();
        c.gids = self.gids.iter().filter(|g| g.is_some()).count();
        c.pages_held = self.pages.len();
        c.raw_objects = self.raw.live();
        c
    }

    /// Read `npas` page addresses at byte offset `at` and check their alignment.
    fn read_pas(inp: &[u8], at: usize, npas: usize, log_page_size: u8) -> Result<Vec<u64>, (u8, u32)> {
        need(inp, at + 8 * npas)?;
        let mask = (PAGE << log_page_size) - 1;
        let mut v = Vec::with_capacity(npas);
        for i in 0..npas {
            let pa = u64::from_be_bytes(inp[at + 8 * i..at + 8 * i + 8].try_into().unwrap());
            if pa & mask != 0 {
                return fail(st::BAD_PARAM, synd::UNALIGNED_PAS);
            }
            v.push(pa);
        }
        Ok(v)
    }

    fn npages(bytes: u64, log_page_size: u8, offset: u64) -> usize {
        (bytes + offset).div_ceil(PAGE << log_page_size) as usize
    }
}

/// The lowest ID in `[lo, hi)` not in `used`.
fn lowest_free(used: &BTreeSet<u32>, lo: u32, hi: u32) -> Option<u32> {
    let mut want = lo;
    for &u in used.range(lo..) {
        if u != want {
            break;
        }
        want += 1;
    }
    (want < hi).then_some(want)
}
