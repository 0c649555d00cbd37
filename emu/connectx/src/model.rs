//! The adapter model: initialization segment, command interface, firmware state and objects.
//!
//! A command-doorbell write executes the command at once: the entry and its mailboxes are read
//! from `PhysMem` and checked the way the adapter checks them (type, token, block numbers,
//! pointers, lengths → delivery status), the command runs with the firmware's checks (opcode,
//! op_mod, lengths, function state, objects, pages → status and syndrome), the output is
//! written back, ownership returns to software, and a command-completion EQE is posted when
//! an EQ asked for those.
use std::collections::{BTreeMap, BTreeSet};

use hal::PhysAddr;
use log::{debug, warn};

use crate::consts::{delivery, event, op, qp as qps, reg, status as st, synd};
use crate::layout::{self as l, get, set, Field};
use crate::mem::{PhysMem, SimClock};
use crate::profile::Profile;

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
    /// MANAGE_PAGES give fails with NO_RESOURCES.
    pub refuse_pages: bool,
    /// MANAGE_PAGES take returns no pages.
    pub withhold_pages: bool,
    /// TEARDOWN_HCA graceful (profile 0) fails with INTERNAL_ERR; force close still works
    /// where the profile has force_teardown.
    pub fail_graceful_teardown: bool,
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
}

impl Counters {
    /// Live objects of every kind together.
    pub fn live_objects(&self) -> usize {
        self.uars + self.eqs + self.pds + self.tds + self.mkeys + self.cqs + self.qps + self.raw_objects
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

#[derive(Debug, Clone)]
pub struct Eq {
    pub eqn: u8,
    pub uar: u32,
    pub log_size: u8,
    pub buf: QBuf,
    pub mask: u64,
    pub oi: bool,
    pub pi: u32,
    pub ci: u32,
    pub armed: bool,
    pub broken: bool,
}

#[derive(Debug, Clone)]
pub struct Cq {
    pub cqn: u32,
    pub uar: u32,
    pub log_size: u8,
    pub buf: QBuf,
    pub c_eqn: u8,
    pub dbr: PhysAddr,
    pub oi: bool,
    pub cc: bool,
    pub pi: u32,
    pub armed: Option<bool>,
    pub broken: bool,
}

#[derive(Debug, Clone)]
pub struct Qp {
    pub qpn: u32,
    pub st: u8,
    pub state: u8,
    pub pd: u32,
    pub uar: u32,
    pub cqn_snd: u32,
    pub cqn_rcv: u32,
    pub dbr: PhysAddr,
    pub buf: QBuf,
    pub log_rq_size: u8,
    pub log_rq_stride: u8,
    pub rq_type: u8,
    pub no_sq: bool,
    pub log_sq_size: u8,
    /// The stored QP context (what QUERY_QP returns), state field kept current.
    pub qpc: Vec<u8>,
    /// SQ WQEBB counter consumed by the adapter.
    pub sq_hw: u16,
    /// RQ WQE counter consumed by the adapter.
    pub rq_hw: u16,
}

impl Qp {
    pub fn rq_bytes(&self) -> u64 {
        if self.rq_type != 0 {
            0
        } else {
            (1u64 << self.log_rq_size) << (self.log_rq_stride + 4)
        }
    }
    pub fn sq_bytes(&self) -> u64 {
        if self.no_sq {
            0
        } else {
            (1u64 << self.log_sq_size) * 64
        }
    }
}

#[derive(Debug, Clone)]
pub struct Mkey {
    pub index: u32,
    pub key: u32,
    pub pd: u32,
    /// 0 = PA, 1 = MTT.
    pub access_mode: u8,
    pub lr: bool,
    pub lw: bool,
    pub rr: bool,
    pub rw: bool,
    pub atomic: bool,
    pub start: u64,
    pub len: u64,
    pub length64: bool,
    pub log_page_size: u8,
    pub mtt: Vec<PhysAddr>,
    /// Invalidated (LOCAL_INVAL / SEND WITH INVALIDATE): unusable until re-created.
    pub free: bool,
    /// Remote invalidation allowed (mkc.en_rinval).
    pub en_rinval: bool,
    /// May be changed by UMR WQEs (mkc.umr_en).
    pub umr_en: bool,
}

impl Mkey {
    /// Translate `[va, va+len)` to physical extents if the key covers it.
    pub fn translate(&self, va: u64, len: u64) -> Option<Vec<(PhysAddr, u64)>> {
        if !self.length64 {
            let end = va.checked_add(len)?;
            if va < self.start || end > self.start.checked_add(self.len)? {
                return None;
            }
        }
        if self.access_mode == 0 {
            return Some(vec![(va, len)]);
        }
        let ps = 1u64 << self.log_page_size;
        let base = self.start & !(ps - 1);
        let mut out = Vec::new();
        let mut off = va - base;
        let mut left = len;
        while left > 0 {
            let page = (off / ps) as usize;
            let in_page = off % ps;
            let n = (ps - in_page).min(left);
            out.push((self.mtt.get(page)? + in_page, n));
            off += n;
            left -= n;
        }
        Some(out)
    }
}

#[derive(Debug, Clone, Default)]
pub struct Vport {
    /// Port operational state (QUERY_VPORT_STATE); changed by `ConnectX::set_port_up`.
    pub down: bool,
    pub roce_en: bool,
    pub mac: [u8; 6],
    pub mtu: u16,
    pub promisc_uc: bool,
    pub promisc_mc: bool,
    pub promisc_all: bool,
    /// NIC vport context `disable_uc_local_lb` / `disable_mc_local_lb`: 0 (local loopback on)
    /// after ENABLE_HCA; see [`crate::loopback`].
    pub disable_uc_local_lb: bool,
    pub disable_mc_local_lb: bool,
}

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
    nic_interface: u8,
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
    pub mkeys: BTreeMap<u32, Mkey>,
    pub vport: Vport,
    pub gids: Vec<Option<[u8; 0x20]>>,
    health_frozen_at: Option<u32>,
    pub(crate) health_synd: u8,
    /// SQ doorbells (qpn, first 8 bytes of the ctrl segment) waiting for the data path.
    pub sq_doorbells: Vec<(u32, u64)>,
    /// The RoCEv2 transport engine (exists between INIT_HCA and TEARDOWN_HCA).
    pub engine: Option<emu_roce::Engine>,
    /// The wire; without one, transmitted frames are dropped.
    pub link: Option<Box<dyn emu_roce::Link>>,
    /// Raw Ethernet queues and steering.
    pub raw: crate::raw::Raw,
    /// Frames the port sent to itself, on their way back in ([`crate::loopback`]).
    pub loopback: crate::loopback::Loopback,
}

pub const RESD_LKEY: u32 = 0x0000_0200;
pub const NULL_MKEY: u32 = 0x0000_0300;
pub const DUMP_FILL_MKEY: u32 = 0x0000_0400;
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
            nic_interface: 0,
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
            mkeys: BTreeMap::new(),
            gids: vec![None; GID_TABLE],
            health_frozen_at: None,
            health_synd: 0,
            sq_doorbells: Vec::new(),
            engine: None,
            link: None,
            raw: crate::raw::Raw::default(),
            loopback: Default::default(),
        };
        d.reset_caps();
        d
    }

    fn reset_caps(&mut self) {
        use l::cmd_hca_cap as c;
        let k = &self.cfg.profile.caps;
        let gen: &[(Field, u64)] = &[
            (c::log_max_srq_sz, k.log_max_srq_sz as u64),
            (c::log_max_qp_sz, k.log_max_qp_sz as u64),
            (c::log_max_qp, k.log_max_qp as u64),
            (c::log_max_srq, k.log_max_srq as u64),
            (c::log_max_cq_sz, k.log_max_cq_sz as u64),
            (c::log_max_cq, k.log_max_cq as u64),
            (c::log_max_eq_sz, k.log_max_eq_sz as u64),
            (c::log_max_mkey, k.log_max_mkey as u64),
            (c::log_max_eq, k.log_max_eq as u64),
            (c::fast_teardown, k.fast_teardown as u64),
            (c::force_teardown, k.force_teardown as u64),
            (c::log_max_ra_req_qp, k.log_max_ra_req_qp as u64),
            (c::log_max_ra_res_qp, k.log_max_ra_res_qp as u64),
            (c::end_pad, 1),
            (c::gid_table_size, GID_TABLE as u64),
            (c::pkey_table_size, 0),
            (c::nic_flow_table, 1),
            (c::port_type, 1),
            (c::num_ports, k.num_ports as u64),
            (c::log_max_msg, k.log_max_msg as u64),
            (c::cqe_version, 1),
            (c::cmdif_checksum, 0),
            (c::eth_net_offloads, 1),
            (c::roce, 1),
            (c::atomic, 0),
            (c::ud, 1),
            (c::uc, 0),
            (c::rc, 1),
            (c::uar_4k, 1),
            (c::log_pg_sz, 12),
            (c::bf, 1),
            (c::driver_version, 1),
            (c::log_bf_reg_size, k.log_bf_reg_size as u64),
            (c::max_wqe_sz_sq, k.max_wqe_sz_sq as u64),
            (c::max_wqe_sz_rq, k.max_wqe_sz_rq as u64),
            (c::log_max_transport_domain, 20),
            (c::log_max_pd, k.log_max_pd as u64),
            (c::log_max_rq, 16),
            (c::log_max_sq, 16),
            (c::log_max_tir, 16),
            (c::log_max_tis, 16),
            (c::log_max_wq_sz, 15),
            (c::sq_ts_format, k.sq_ts_format as u64),
            (c::rq_ts_format, k.rq_ts_format as u64),
            (c::log_uar_page_sz, 0),
            (c::device_frequency_mhz, k.device_frequency_mhz as u64),
            (c::num_of_uars_per_page, k.num_of_uars_per_page as u64),
        ];
        self.cap_max = vec![0; 0x1000];
        for &(f, v) in gen {
            set(&mut self.cap_max, f, v);
        }
        // Checksums are "supported" at max (value 1 = ... ) but disabled in current values.
        set(&mut self.cap_max, c::cmdif_checksum, 1);
        self.cap_cur = self.cap_max.clone();
        set(&mut self.cap_cur, c::cmdif_checksum, 0);
        set(&mut self.cap_cur, c::log_max_qp, get(&self.cap_max, c::log_max_qp).saturating_sub(1));
        use l::roce_cap as r;
        self.roce_max = vec![0; 0x1000];
        for &(f, v) in &[
            (r::sw_r_roce_src_udp_port, 1u64),
            (r::l3_type, 0b11),
            (r::roce_version, 0b110),
            (r::r_roce_dest_udp_port, 4791),
            (r::r_roce_max_src_udp_port, 0xffff),
            (r::r_roce_min_src_udp_port, 0xc000),
            (r::roce_address_table_size, GID_TABLE as u64),
            (r::qp_ts_format, self.cfg.profile.caps.qp_ts_format as u64),
        ] {
            set(&mut self.roce_max, f, v);
        }
        self.roce_cur = self.roce_max.clone();
        set(&mut self.roce_cur, r::sw_r_roce_src_udp_port, 0);
    }

    // ---------------------------------------------------------------- init segment / BAR

    fn initializing(&self) -> bool {
        self.faults.stuck_initializing
            || self.clock.now_ns().wrapping_sub(self.created_ns) < self.cfg.init_delay_ns
    }

    fn health_counter(&mut self) -> u32 {
        let live = ((self.clock.now_ns() / self.cfg.health_tick_ns.max(1)) & 0xFF_FFFF) as u32;
        if self.faults.health_stopped {
            *self.health_frozen_at.get_or_insert(live)
        } else {
            self.health_frozen_at = None;
            live
        }
    }

    /// Big-endian value of the 32-bit init-segment register at `off` (4-aligned).
    fn init_reg(&mut self, off: usize) -> u32 {
        match off {
            0x000 => ((self.cfg.profile.fw.minor as u32) << 16) | self.cfg.profile.fw.major as u32,
            0x004 => ((self.cfg.profile.cmdif_rev as u32) << 16) | self.cfg.profile.fw.subminor as u32,
            0x010 => self.cmdq_h,
            0x014 => {
                (self.cmdq_l & 0xFFFF_F000)
                    | ((self.nic_interface as u32) << 8)
                    | ((self.cfg.profile.log_cmdq_size as u32) << 4)
                    | self.cfg.profile.log_cmdq_stride as u32
            }
            0x1fc => (self.initializing() as u32) << 31,
            0x230 => ((self.cfg.profile.fw.major as u32) << 16) | self.cfg.profile.fw.minor as u32,
            0x234 => 0x0000_020b,
            // irisc_index @0x23C, synd @0x23D, ext_synd @0x23E [device.h health_buffer].
            0x23c => (self.health_synd as u32) << 16,
            0x1000 => (self.clock.now_ns() >> 32) as u32,
            0x1004 => self.clock.now_ns() as u32,
            0x1010 => self.health_counter(),
            _ => 0,
        }
    }

    pub fn bar_read32(&mut self, off: usize) -> u32 {
        self.ctr.mmio_reads += 1;
        if off & 3 == 0 && off < 0x3000 {
            let v = self.init_reg(off);
            return u32::from_le_bytes(v.to_be_bytes());
        }
        // Unaligned or beyond the init segment: assemble bytes (UAR registers read as 0).
        let mut b = [0u8; 4];
        for (i, byte) in b.iter_mut().enumerate() {
            let o = off + i;
            if o < 0x3000 {
                *byte = self.init_reg(o & !3).to_be_bytes()[o & 3];
            }
        }
        u32::from_le_bytes(b)
    }

    pub fn bar_write32(&mut self, off: usize, v: u32) {
        self.ctr.mmio_writes += 1;
        self.bar_store32(off, v)
    }

    fn bar_store32(&mut self, off: usize, v: u32) {
        let be = u32::from_be_bytes(v.to_le_bytes());
        match off {
            0x010 => self.cmdq_h = be,
            0x014 => {
                self.cmdq_l = be & 0xFFFF_F000;
                self.nic_interface = ((be >> 8) & 7) as u8;
            }
            0x018 => self.ring_cmd(be),
            _ if off >= FIRST_UAR as usize * 0x1000 => self.uar_write(off, &be.to_be_bytes()),
            _ => self.ctr.stray_doorbells += 1,
        }
    }

    pub fn bar_write64(&mut self, off: usize, v: u64) {
        self.ctr.mmio_writes += 1;
        let bytes = v.to_le_bytes();
        if off < FIRST_UAR as usize * 0x1000 {
            self.bar_store32(off, u32::from_le_bytes(bytes[0..4].try_into().unwrap()));
            self.bar_store32(off + 4, u32::from_le_bytes(bytes[4..8].try_into().unwrap()));
        } else {
            self.uar_write(off, &bytes);
        }
    }

    fn uar_write(&mut self, off: usize, bytes: &[u8]) {
        let uar = (off / 0x1000) as u32;
        let reg = off % 0x1000;
        if !self.uars.contains(&uar) || self.func != FuncState::Initialized {
            self.ctr.stray_doorbells += 1;
            return;
        }
        match (reg, bytes.len()) {
            (0x40 | 0x48, _) => {
                self.ctr.eq_doorbells += 1;
                let v = u32::from_be_bytes(bytes[0..4].try_into().unwrap());
                self.eq_doorbell(uar, v, reg == 0x40);
            }
            (0x20, 8) => {
                self.ctr.cq_arm_doorbells += 1;
                let v = u64::from_be_bytes(bytes.try_into().unwrap());
                self.cq_arm(uar, v);
            }
            (0x800..=0xFFF, 8) => {
                let v = u64::from_be_bytes(bytes.try_into().unwrap());
                let qpn = ((v & 0xFFFF_FFFF) >> 8) as u32;
                let ok = match self.qps.get(&qpn) {
                    Some(q) => q.uar == uar,
                    None => self.raw.sqs.get(&qpn).is_some_and(|s| s.uar == uar),
                };
                if ok {
                    self.ctr.sq_doorbells += 1;
                    // One pending entry per queue: the SQ runs up to the doorbell record anyway.
                    if !self.sq_doorbells.iter().any(|d| d.0 == qpn) {
                        self.sq_doorbells.push((qpn, v));
                    }
                } else {
                    self.ctr.stray_doorbells += 1;
                }
            }
            _ => self.ctr.stray_doorbells += 1,
        }
    }

    fn eq_doorbell(&mut self, uar: u32, v: u32, arm: bool) {
        let eqn = (v >> 24) as u8;
        let ci24 = v & 0xFF_FFFF;
        match self.eqs.get_mut(&eqn) {
            Some(eq) if eq.uar == uar => {
                let behind = eq.pi.wrapping_sub(ci24) & 0xFF_FFFF;
                eq.ci = eq.pi.wrapping_sub(behind);
                eq.armed = arm;
            }
            _ => self.ctr.stray_doorbells += 1,
        }
    }

    fn cq_arm(&mut self, uar: u32, v: u64) {
        let cqn = (v & 0xFF_FFFF) as u32;
        let word = (v >> 32) as u32;
        let solicited = (word >> 24) & 0xF == 1;
        let ci = word & 0xFF_FFFF;
        let (eqn, fire) = match self.cqs.get_mut(&cqn) {
            Some(cq) if cq.uar == uar => {
                cq.armed = Some(solicited);
                // Arming with completions already past `ci` raises the event at once.
                let fire = (cq.pi & 0xFF_FFFF) != ci && !solicited;
                (cq.c_eqn, fire)
            }
            _ => {
                self.ctr.stray_doorbells += 1;
                return;
            }
        };
        if fire {
            self.cqs.get_mut(&cqn).expect("cq").armed = None;
            self.completion_event(eqn, cqn);
        }
    }

    // ---------------------------------------------------------------- command interface

    fn cmdq_pa(&self) -> u64 {
        ((self.cmdq_h as u64) << 32) | self.cmdq_l as u64
    }

    fn ring_cmd(&mut self, mask: u32) {
        let n = 1u32 << self.cfg.profile.log_cmdq_size;
        if self.cmdq_pa() == 0 || self.initializing() {
            self.ctr.stray_doorbells += 1;
            return;
        }
        for slot in 0..n.min(32) {
            if mask & (1 << slot) != 0 {
                self.run_slot(slot, true);
            }
        }
        self.resume_parked();
        self.maybe_request_pages();
    }

    /// Execute the command in `slot` now (a parked command resuming).
    pub(crate) fn run_slot_now(&mut self, slot: u32) {
        self.run_slot(slot, false)
    }

    fn run_slot(&mut self, slot: u32, may_park: bool) {
        let ea = self.cmdq_pa() + ((slot as u64) << self.cfg.profile.log_cmdq_stride);
        let mut e = [0u8; 64];
        if self.mem.dma_read(ea, &mut e).is_err() {
            self.ctr.dma_faults += 1;
            warn!("cx: command entry {slot} at {ea:#x} is not in memory");
            return;
        }
        if get(&e, l::cmd_layout::ownership) == 0 {
            self.ctr.stray_doorbells += 1;
            return;
        }
        let opcode = get(&e, l::cmd_in::opcode.at(0x10)) as u16;
        if self.faults.hang_all || self.faults.hang_opcodes.contains(&opcode) || self.health_synd != 0 {
            self.ctr.hung_commands += 1;
            debug!("cx: {} (slot {slot}) will never complete", op::name(opcode));
            return;
        }
        if may_park && self.parked == Some(slot) {
            // Already executing (waiting for pages): a second doorbell changes nothing.
            self.ctr.stray_doorbells += 1;
            return;
        }
        if may_park && self.park_for_pages(slot, opcode) {
            debug!("cx: {} (slot {slot}) waits for pages", op::name(opcode));
            return;
        }
        self.ctr.commands += 1;
        let dstat = self.deliver(&mut e, slot);
        if dstat != delivery::OK {
            self.ctr.delivery_failures += 1;
            debug!("cx: slot {slot} delivery status {dstat:#x}");
        }
        set(&mut e, l::cmd_layout::status, dstat as u64);
        set(&mut e, l::cmd_layout::ownership, 0);
        // Output bytes first, then the status/ownership byte.
        let _ = self.mem.dma_write(ea + 0x20, &e[0x20..0x30]);
        if self.mem.dma_write(ea + 0x3f, &e[0x3f..0x40]).is_err() {
            self.ctr.dma_faults += 1;
        }
        let mut data = [0u8; 28];
        data[0..4].copy_from_slice(&(1u32 << slot).to_be_bytes());
        self.raise_event(event::CMD, 0, &data);
    }

    /// Walk a mailbox chain of `nblocks`, checking pointer, block number and token.
    fn walk_mailboxes(&mut self, first: u64, nblocks: usize, token: u8, bad_ptr: u8) -> Result<Vec<(u64, [u8; 0x240])>, u8> {
        let mut v = Vec::with_capacity(nblocks);
        let mut ptr = first;
        for i in 0..nblocks {
            if ptr == 0 || !ptr.is_multiple_of(MAILBOX_ALIGN) {
                return Err(bad_ptr);
            }
            let mut b = [0u8; 0x240];
            if self.mem.dma_read(ptr, &mut b).is_err() {
                self.ctr.dma_faults += 1;
                return Err(bad_ptr);
            }
            if get(&b, l::cmd_mailbox::block_num) != i as u64 {
                return Err(delivery::BAD_BLOCK_NUMBER);
            }
            if get(&b, l::cmd_mailbox::token) != token as u64 {
                return Err(delivery::TOKEN_ERR);
            }
            let next = get(&b, l::cmd_mailbox::next);
            v.push((ptr, b));
            ptr = next;
        }
        Ok(v)
    }

    /// Deliver one command; returns the delivery status. Output goes into `e` and mailboxes.
    fn deliver(&mut self, e: &mut [u8; 64], _slot: u32) -> u8 {
        use l::cmd_layout as c;
        if get(e, c::type_) != 7 {
            return delivery::BAD_COMMAND_TYPE;
        }
        let inlen = get(e, c::inlen) as u32;
        let outlen = get(e, c::outlen) as u32;
        let token = get(e, c::token) as u8;
        if !(8..=MAX_CMD_LEN).contains(&inlen) {
            return delivery::INPUT_LEN_ERR;
        }
        if !(8..=MAX_CMD_LEN).contains(&outlen) {
            return delivery::OUTPUT_LEN_ERR;
        }
        let mut input = e[0x10..0x20].to_vec();
        if inlen > 16 {
            let nb = (inlen as usize - 16).div_ceil(512);
            match self.walk_mailboxes(get(e, c::in_ptr), nb, token, delivery::BAD_INPUT_POINTER) {
                Ok(blocks) => {
                    for (_, b) in &blocks {
                        input.extend_from_slice(&b[..512]);
                    }
                }
                Err(d) => return d,
            }
        }
        input.truncate(inlen as usize);
        let out_blocks = if outlen > 16 {
            let nb = (outlen as usize - 16).div_ceil(512);
            match self.walk_mailboxes(get(e, c::out_ptr), nb, token, delivery::BAD_OUTPUT_POINTER) {
                Ok(b) => b,
                Err(d) => return d,
            }
        } else {
            Vec::new()
        };
        let opcode = get(&input, l::cmd_in::opcode) as u16;
        let op_mod = get(&input, l::cmd_in::op_mod) as u16;
        let res = match self.faults.forced.get(&opcode) {
            Some(&(s, y)) => Err((s, y)),
            None => self.exec(opcode, op_mod, &input),
        };
        let mut outb = vec![0u8; outlen as usize];
        match res {
            Ok(o) if o.len() > outlen as usize => {
                set(&mut outb, l::cmd_out::status, st::BAD_OUTP_LEN as u64);
                set(&mut outb, l::cmd_out::syndrome, synd::OUTPUT_TOO_SHORT as u64);
                self.ctr.cmd_failures += 1;
            }
            Ok(o) => outb[..o.len()].copy_from_slice(&o),
            Err((s, y)) => {
                debug!("cx: {}({opcode:#x}) op_mod {op_mod:#x} failed: status {s:#x} syndrome {y:#x}", op::name(opcode));
                set(&mut outb, l::cmd_out::status, s as u64);
                set(&mut outb, l::cmd_out::syndrome, y as u64);
                self.ctr.cmd_failures += 1;
            }
        }
        e[0x20..0x30].copy_from_slice(&outb[..16]);
        for (i, (pa, _)) in out_blocks.iter().enumerate() {
            let from = 16 + i * 512;
            let to = (from + 512).min(outb.len());
            if self.mem.dma_write(*pa, &outb[from..to]).is_err() {
                self.ctr.dma_faults += 1;
                return delivery::BAD_OUTPUT_POINTER;
            }
        }
        delivery::OK
    }

    // ---------------------------------------------------------------- events

    /// Post an EQE on the first EQ subscribed to `ty`. Returns whether one was written.
    pub fn raise_event(&mut self, ty: u8, sub: u8, data: &[u8; 28]) -> bool {
        let eqn = self.eqs.values().find(|q| q.mask & (1u64 << ty) != 0).map(|q| q.eqn);
        match eqn {
            Some(n) => self.post_eqe(n, ty, sub, data),
            None => false,
        }
    }

    /// Write one EQE into EQ `eqn` with the right owner bit.
    pub fn post_eqe(&mut self, eqn: u8, ty: u8, sub: u8, data: &[u8; 28]) -> bool {
        let Some(eq) = self.eqs.get_mut(&eqn) else { return false };
        if eq.broken {
            return false;
        }
        let n = 1u32 << eq.log_size;
        if eq.pi.wrapping_sub(eq.ci) >= n && !eq.oi {
            eq.broken = true;
            let mask = eq.mask;
            self.eq_overrun(eqn, mask);
            return false;
        }
        let idx = eq.pi & (n - 1);
        let owner = ((eq.pi >> eq.log_size) & 1) as u8;
        let mut e = [0u8; 64];
        e[1] = ty;
        e[3] = sub;
        e[0x20..0x3c].copy_from_slice(data);
        e[0x3f] = owner;
        let Some(pa) = eq.buf.pa(idx as u64 * 64) else {
            eq.broken = true;
            return false;
        };
        if self.mem.dma_write(pa, &e[..0x3f]).is_err() || self.mem.dma_write(pa + 0x3f, &e[0x3f..]).is_err() {
            self.ctr.dma_faults += 1;
            eq.broken = true;
            warn!("cx: EQ {eqn} buffer at {pa:#x} is not in memory");
            return false;
        }
        eq.pi = eq.pi.wrapping_add(1);
        self.ctr.eqes += 1;
        if eq.armed {
            eq.armed = false;
            self.ctr.interrupts += 1;
        }
        true
    }

    pub(crate) fn completion_event(&mut self, eqn: u8, cqn: u32) {
        let mut d = [0u8; 28];
        d[0x18..0x1c].copy_from_slice(&(cqn & 0xFF_FFFF).to_be_bytes());
        self.post_eqe(eqn, event::COMPLETION, 0, &d);
    }

    /// Write a CQE (64 bytes; op_own's owner bit is set here) into CQ `cqn`.
    /// Returns false when the CQ is in error (overrun, bad buffer).
    pub fn post_cqe(&mut self, cqn: u32, cqe: &[u8; 64]) -> bool {
        let Some(cq) = self.cqs.get(&cqn) else { return false };
        if cq.broken {
            return false;
        }
        let n = 1u32 << cq.log_size;
        let (dbr, pi, log, c_eqn, cc, oi) = (cq.dbr, cq.pi, cq.log_size, cq.c_eqn, cq.cc, cq.oi);
        let ci = match self.mem.dma_read_be32(dbr) {
            Ok(v) => v & 0xFF_FFFF,
            Err(_) => {
                self.ctr.dma_faults += 1;
                return self.cq_error(cqn, 2);
            }
        };
        let used = (pi.wrapping_sub(ci)) & 0xFF_FFFF;
        if !cc && !oi && used >= n {
            self.ctr.cq_overruns += 1;
            return self.cq_error(cqn, 1);
        }
        let idx = if cc { 0 } else { pi & (n - 1) };
        let owner = ((pi >> log) & 1) as u8;
        let mut e = *cqe;
        e[0x3f] = (e[0x3f] & !1) | owner;
        let pa = self.cqs[&cqn].buf.pa(idx as u64 * 64);
        let ok = match pa {
            Some(pa) => self.mem.dma_write(pa, &e[..0x3f]).is_ok() && self.mem.dma_write(pa + 0x3f, &e[0x3f..]).is_ok(),
            None => false,
        };
        if !ok {
            self.ctr.dma_faults += 1;
            return self.cq_error(cqn, 2);
        }
        let cq = self.cqs.get_mut(&cqn).expect("cq");
        cq.pi = cq.pi.wrapping_add(1);
        self.ctr.cqes += 1;
        if let Some(solicited_only) = cq.armed {
            let se = cqe[0x3f] & 2 != 0;
            if !solicited_only || se {
                cq.armed = None;
                self.completion_event(c_eqn, cqn);
            }
        } else {
            self.db_recovery(cqn);
        }
        true
    }

    /// CQ error event (syndrome 1 overrun, 2 access violation); the CQ stops.
    fn cq_error(&mut self, cqn: u32, syndrome: u8) -> bool {
        if let Some(cq) = self.cqs.get_mut(&cqn) {
            cq.broken = true;
        }
        let mut d = [0u8; 28];
        d[0..4].copy_from_slice(&(cqn & 0xFF_FFFF).to_be_bytes());
        d[11] = syndrome;
        self.raise_event(event::CQ_ERROR, 0, &d);
        false
    }

    // ---------------------------------------------------------------- pages

    pub(crate) fn page_target(&self) -> i64 {
        let b = self.cfg.profile.pages.boot as i64;
        let i = self.cfg.profile.pages.init as i64;
        let r = (self.cfg.profile.pages.regular as i64 + self.extra_regular).max(0);
        match self.func {
            FuncState::Disabled | FuncState::TornDown => 0,
            FuncState::Enabled => b + i,
            FuncState::Initialized => b + i + r + (self.qps.len() as i64) * self.cfg.profile.pages.per_qp as i64,
        }
    }

    fn maybe_request_pages(&mut self) {
        if self.func != FuncState::Initialized || self.page_req_outstanding != 0 {
            return;
        }
        let deficit = self.page_target() - self.pages.len() as i64;
        if deficit > 0 && self.request_pages_eqe(deficit as i32) {
            self.page_req_outstanding = deficit as u32;
        }
    }

    pub(crate) fn request_pages_eqe(&mut self, n: i32) -> bool {
        let mut d = [0u8; 28];
        d[2..4].copy_from_slice(&self.function_id().to_be_bytes());
        d[4..8].copy_from_slice(&n.to_be_bytes());
        let ok = self.raise_event(event::PAGE_REQUEST, 0, &d);
        if ok {
            self.ctr.page_requests += 1;
        }
        ok
    }

    /// Test knob: firmware wants `n` more pages (n > 0) or wants to return `-n` (n < 0);
    /// posts a page-request EQE. Returns whether an EQ took it.
    pub fn request_pages(&mut self, n: i32) -> bool {
        self.extra_regular += n as i64;
        if n > 0 {
            self.page_req_outstanding = 0;
            let before = self.ctr.page_requests;
            self.maybe_request_pages();
            self.ctr.page_requests > before
        } else {
            self.request_pages_eqe(n)
        }
    }

    // ---------------------------------------------------------------- execution

    fn exec(&mut self, opcode: u16, op_mod: u16, inp: &[u8]) -> CmdResult {
        use FuncState::*;
        let pre_init = matches!(
            opcode,
            op::QUERY_ISSI | op::SET_ISSI | op::QUERY_PAGES | op::MANAGE_PAGES | op::QUERY_HCA_CAP
                | op::SET_HCA_CAP | op::ACCESS_REG | op::INIT_HCA | op::DISABLE_HCA | op::SET_DRIVER_VERSION
                | op::TEARDOWN_HCA
        );
        if op::name(opcode) == "UNKNOWN" {
            return fail(st::BAD_OP, synd::UNKNOWN_OPCODE);
        }
        match (opcode, self.func) {
            (op::ENABLE_HCA, Disabled) => {}
            (op::ENABLE_HCA, _) => return fail(st::BAD_SYS_STATE, synd::ALREADY_ENABLED),
            (_, Disabled) => return fail(st::BAD_SYS_STATE, synd::NOT_ENABLED),
            (_, Initialized) => {}
            (_, Enabled | TornDown) if pre_init => {}
            _ => return fail(st::BAD_SYS_STATE, synd::NOT_INITIALIZED),
        }
        let op_mod_ok = match opcode {
            op::QUERY_HCA_CAP => matches!(op_mod >> 1, 0 | 1 | 4),
            op::SET_HCA_CAP => op_mod & 1 == 0 && matches!(op_mod >> 1, 0 | 4),
            op::QUERY_PAGES => (1..=3).contains(&op_mod),
            op::MANAGE_PAGES => op_mod <= 2,
            op::ACCESS_REG => op_mod <= 1,
            _ => op_mod == 0,
        };
        if !op_mod_ok {
            return fail(st::BAD_PARAM, synd::BAD_OP_MOD);
        }
        need(inp, 16)?;
        match opcode {
            op::ENABLE_HCA => {
                if get(inp, l::enable_hca_in::function_id) != 0 {
                    return fail(st::BAD_PARAM, synd::BAD_FUNCTION_ID);
                }
                self.func = Enabled;
                self.issi = 0;
                self.extra_regular = 0;
                self.page_req_outstanding = 0;
                self.reset_caps();
                // The vport's context starts afresh; the link (cable, peer) is physical and
                // keeps its state.
                self.vport = Vport { mac: self.cfg.mac, mtu: 1500, down: self.vport.down, ..Default::default() };
                self.gids = vec![None; GID_TABLE];
                self.host_endianness_le = None;
                Ok(out(16))
            }
            op::DISABLE_HCA => {
                if self.func == Initialized {
                    return fail(st::BAD_SYS_STATE, synd::STILL_INITIALIZED);
                }
                if get(inp, l::enable_hca_in::function_id) != 0 {
                    return fail(st::BAD_PARAM, synd::BAD_FUNCTION_ID);
                }
                if !self.pages.is_empty() {
                    warn!("cx: DISABLE_HCA with {} pages still held by firmware", self.pages.len());
                    self.ctr.pages_abandoned += self.pages.len() as u64;
                    self.pages.clear();
                }
                self.func = Disabled;
                Ok(out(16))
            }
            op::QUERY_ISSI => {
                let mut o = out(l::query_issi_out::SIZE);
                set(&mut o, l::query_issi_out::current_issi, self.issi as u64);
                set(&mut o, l::query_issi_out::supported_issi_dw0, self.cfg.profile.supported_issi as u64);
                Ok(o)
            }
            op::SET_ISSI => {
                if self.func != Enabled {
                    return fail(st::BAD_SYS_STATE, synd::ALREADY_INITIALIZED);
                }
                let v = get(inp, l::set_issi_in::current_issi);
                if v >= 32 || self.cfg.profile.supported_issi & (1 << v) == 0 {
                    return fail(st::BAD_PARAM, synd::UNSUPPORTED_ISSI);
                }
                self.issi = v as u16;
                Ok(out(16))
            }
            op::QUERY_PAGES => {
                let held = self.pages.len() as i64;
                let b = self.cfg.profile.pages.boot as i64;
                let i = self.cfg.profile.pages.init as i64;
                let n = match (self.func, op_mod) {
                    (TornDown, _) => -held,
                    (_, 1) => (b - held).max(0),
                    (_, 2) => (b + i - held).max(0),
                    (Initialized, _) => self.page_target() - held,
                    _ => 0,
                };
                let mut o = out(16);
                set(&mut o, l::query_pages_out::function_id, self.function_id() as u64);
                set(&mut o, l::query_pages_out::num_pages, n as i32 as u32 as u64);
                Ok(o)
            }
            op::MANAGE_PAGES => self.manage_pages(op_mod, inp),
            op::QUERY_HCA_CAP => {
                let cur = op_mod & 1 == 1;
                let src = match op_mod >> 1 {
                    0 => if cur { &self.cap_cur } else { &self.cap_max },
                    4 => if cur { &self.roce_cur } else { &self.roce_max },
                    _ => &vec![0u8; 0x1000], // Ethernet offload caps: all zero (none offered)
                };
                let mut o = out(0x1010);
                o[0x10..].copy_from_slice(src);
                Ok(o)
            }
            op::SET_HCA_CAP => {
                if self.func != Enabled {
                    return fail(st::BAD_SYS_STATE, synd::ALREADY_INITIALIZED);
                }
                if self.pages.len() < self.cfg.profile.pages.boot as usize {
                    return fail(st::BAD_SYS_STATE, synd::MISSING_BOOT_PAGES);
                }
                need(inp, 0x1010)?;
                let cap = &inp[0x10..0x1010];
                if op_mod >> 1 == 0 {
                    use l::cmd_hca_cap as c;
                    for f in [c::log_max_qp, c::cmdif_checksum] {
                        if get(cap, f) > get(&self.cap_max, f) {
                            return fail(st::BAD_PARAM, synd::CAP_VALUE_OVER_MAX);
                        }
                    }
                    if get(cap, c::log_uar_page_sz) != 0 {
                        // The model only does 4 KiB UAR pages.
                        return fail(st::BAD_PARAM, synd::CAP_VALUE_OVER_MAX);
                    }
                    for f in [c::log_max_qp, c::cmdif_checksum, c::pkey_table_size, c::cache_line_128byte, c::uar_4k] {
                        set(&mut self.cap_cur, f, get(cap, f));
                    }
                } else {
                    use l::roce_cap as r;
                    let v = get(cap, r::sw_r_roce_src_udp_port);
                    if v > get(&self.roce_max, r::sw_r_roce_src_udp_port) {
                        return fail(st::BAD_PARAM, synd::CAP_VALUE_OVER_MAX);
                    }
                    set(&mut self.roce_cur, r::sw_r_roce_src_udp_port, v);
                }
                Ok(out(16))
            }
            op::INIT_HCA => {
                if self.func != Enabled {
                    return fail(st::BAD_SYS_STATE, synd::ALREADY_INITIALIZED);
                }
                let held = self.pages.len() as u32;
                if held < self.cfg.profile.pages.boot {
                    return fail(st::BAD_SYS_STATE, synd::MISSING_BOOT_PAGES);
                }
                if held < self.cfg.profile.pages.boot + self.cfg.profile.pages.init {
                    return fail(st::BAD_SYS_STATE, synd::MISSING_INIT_PAGES);
                }
                self.func = Initialized;
                self.page_req_outstanding = 0;
                self.engine = Some(emu_roce::Engine::new(self.port_config()));
                Ok(out(16))
            }
            op::TEARDOWN_HCA => {
                if self.func != Initialized {
                    return fail(st::BAD_SYS_STATE, synd::NOT_INITIALIZED);
                }
                let profile = get(inp, l::teardown_hca_in::profile);
                let force_state = self.check_teardown(profile)?;
                let live = self.ctr_live().live_objects();
                if live > 0 {
                    warn!("cx: TEARDOWN_HCA with {live} objects still alive");
                    self.ctr.objects_abandoned += live as u64;
                }
                self.uars.clear();
                self.pds.clear();
                self.tds.clear();
                self.eqs.clear();
                self.cqs.clear();
                self.qps.clear();
                self.mkeys.clear();
                self.gids = vec![None; GID_TABLE];
                self.sq_doorbells.clear();
                self.engine = None;
                self.loopback.clear();
                self.raw = crate::raw::Raw::default();
                self.func = TornDown;
                let mut o = out(16);
                set(&mut o, l::teardown_hca_out::state, force_state);
                Ok(o)
            }
            op::SET_DRIVER_VERSION => Ok(out(16)),
            op::ACCESS_REG => self.access_reg(op_mod, inp),
            op::ALLOC_UAR => {
                let id = lowest_free(&self.uars, FIRST_UAR, FIRST_UAR + self.cfg.profile.caps.max_uars)
                    .ok_or((st::NO_RES, synd::OUT_OF_OBJECTS))?;
                self.uars.insert(id);
                let mut o = out(16);
                set(&mut o, l::obj_id_24::id, id as u64);
                Ok(o)
            }
            op::DEALLOC_UAR => {
                let id = get(inp, l::obj_id_24::id) as u32;
                if !self.uars.contains(&id) {
                    return fail(st::BAD_RES, synd::NO_SUCH_UAR);
                }
                if self.eqs.values().any(|q| q.uar == id) || self.cqs.values().any(|q| q.uar == id) || self.qps.values().any(|q| q.uar == id) || self.raw.sqs.values().any(|q| q.uar == id) {
                    return fail(st::RES_BUSY, synd::IN_USE);
                }
                self.uars.remove(&id);
                Ok(out(16))
            }
            op::ALLOC_PD | op::ALLOC_TRANSPORT_DOMAIN => {
                let set_ = if opcode == op::ALLOC_PD { &mut self.pds } else { &mut self.tds };
                let id = lowest_free(set_, 1, 1 << 20).ok_or((st::NO_RES, synd::OUT_OF_OBJECTS))?;
                set_.insert(id);
                let mut o = out(16);
                set(&mut o, l::obj_id_24::id, id as u64);
                Ok(o)
            }
            op::DEALLOC_PD => {
                let id = get(inp, l::obj_id_24::id) as u32;
                if !self.pds.contains(&id) {
                    return fail(st::BAD_RES, synd::NO_SUCH_PD);
                }
                if self.qps.values().any(|q| q.pd == id)
                    || self.mkeys.values().any(|m| m.pd == id)
                    || self.raw.sqs.values().chain(self.raw.rqs.values()).any(|q| q.pd == id)
                {
                    return fail(st::RES_BUSY, synd::IN_USE);
                }
                self.pds.remove(&id);
                Ok(out(16))
            }
            op::DEALLOC_TRANSPORT_DOMAIN => {
                let id = get(inp, l::obj_id_24::id) as u32;
                if self.raw.tises.values().any(|&t| t == id) {
                    return fail(st::RES_BUSY, synd::IN_USE);
                }
                if !self.tds.remove(&id) {
                    return fail(st::BAD_RES, synd::NO_SUCH_TD);
                }
                Ok(out(16))
            }
            op::QUERY_SPECIAL_CONTEXTS => {
                let mut o = out(l::query_special_contexts_out::SIZE);
                set(&mut o, l::query_special_contexts_out::dump_fill_mkey, DUMP_FILL_MKEY as u64);
                set(&mut o, l::query_special_contexts_out::resd_lkey, RESD_LKEY as u64);
                set(&mut o, l::query_special_contexts_out::null_mkey, NULL_MKEY as u64);
                // The first 16 bytes (dump_fill_mkey, resd_lkey) are what every driver reads.
                Ok(o[..0x10].to_vec())
            }
            op::CREATE_EQ => self.create_eq(inp),
            op::DESTROY_EQ => {
                let n = get(inp, l::destroy_eq_in::eq_number) as u8;
                if !self.eqs.contains_key(&n) {
                    return fail(st::BAD_RES, synd::NO_SUCH_EQ);
                }
                if self.cqs.values().any(|c| c.c_eqn == n) {
                    return fail(st::RES_BUSY, synd::IN_USE);
                }
                self.eqs.remove(&n);
                Ok(out(16))
            }
            op::CREATE_CQ => self.create_cq(inp),
            op::DESTROY_CQ => {
                let n = get(inp, l::obj_id_24::id) as u32;
                if !self.cqs.contains_key(&n) {
                    return fail(st::BAD_RES, synd::NO_SUCH_CQ);
                }
                if self.qps.values().any(|q| q.cqn_snd == n || q.cqn_rcv == n)
                    || self.raw.sqs.values().chain(self.raw.rqs.values()).any(|q| q.cqn == n)
                {
                    return fail(st::RES_BUSY, synd::IN_USE);
                }
                self.cqs.remove(&n);
                Ok(out(16))
            }
            op::QUERY_CQ => {
                let n = get(inp, l::obj_id_24::id) as u32;
                let cq = self.cqs.get(&n).ok_or((st::BAD_RES, synd::NO_SUCH_CQ))?;
                let mut o = out(l::query_cq_out::SIZE);
                let c = &mut o[0x10..0x50];
                set(c, l::cqc::status, if cq.broken { 0x9 } else { 0 });
                set(c, l::cqc::log_cq_size, cq.log_size as u64);
                set(c, l::cqc::uar_page, cq.uar as u64);
                set(c, l::cqc::c_eqn, cq.c_eqn as u64);
                set(c, l::cqc::log_page_size, cq.buf.log_page_size as u64);
                set(c, l::cqc::producer_counter, (cq.pi & 0xFF_FFFF) as u64);
                set(c, l::cqc::dbr_addr, cq.dbr);
                Ok(o)
            }
            op::CREATE_MKEY => self.create_mkey(inp),
            op::DESTROY_MKEY => {
                let idx = get(inp, l::obj_id_24::id) as u32;
                if self.mkeys.remove(&idx).is_none() {
                    return fail(st::BAD_RES, synd::NO_SUCH_MKEY);
                }
                Ok(out(16))
            }
            op::QUERY_NIC_VPORT_CONTEXT => {
                if get(inp, l::query_nic_vport_context_in::other_vport) != 0 {
                    return fail(st::BAD_PARAM, synd::OTHER_VPORT);
                }
                let mut o = out(l::query_nic_vport_context_out::SIZE);
                let c = &mut o[0x10..0x110];
                use l::nic_vport_context as v;
                set(c, v::roce_en, self.vport.roce_en as u64);
                set(c, v::mtu, self.vport.mtu as u64);
                set(c, v::promisc_uc, self.vport.promisc_uc as u64);
                set(c, v::promisc_mc, self.vport.promisc_mc as u64);
                set(c, v::promisc_all, self.vport.promisc_all as u64);
                set(c, v::disable_uc_local_lb, self.vport.disable_uc_local_lb as u64);
                set(c, v::disable_mc_local_lb, self.vport.disable_mc_local_lb as u64);
                let m = self.vport.mac;
                set(c, v::permanent_address_47_32, u16::from_be_bytes([m[0], m[1]]) as u64);
                set(c, v::permanent_address_31_0, u32::from_be_bytes([m[2], m[3], m[4], m[5]]) as u64);
                Ok(o)
            }
            op::MODIFY_NIC_VPORT_CONTEXT => {
                use l::modify_nic_vport_context_in as m;
                use l::nic_vport_context as v;
                if get(inp, m::other_vport) != 0 {
                    return fail(st::BAD_PARAM, synd::OTHER_VPORT);
                }
                need(inp, 0x200)?;
                let c = &inp[0x100..0x200];
                if get(inp, m::field_select_roce_en) == 1 {
                    self.vport.roce_en = get(c, v::roce_en) == 1;
                }
                if get(inp, m::field_select_mtu) == 1 {
                    self.vport.mtu = get(c, v::mtu) as u16;
                }
                if get(inp, m::field_select_disable_uc_local_lb) == 1 {
                    self.vport.disable_uc_local_lb = get(c, v::disable_uc_local_lb) == 1;
                }
                if get(inp, m::field_select_disable_mc_local_lb) == 1 {
                    self.vport.disable_mc_local_lb = get(c, v::disable_mc_local_lb) == 1;
                }
                if get(inp, m::field_select_promisc) == 1 {
                    self.vport.promisc_uc = get(c, v::promisc_uc) == 1;
                    self.vport.promisc_mc = get(c, v::promisc_mc) == 1;
                    self.vport.promisc_all = get(c, v::promisc_all) == 1;
                }
                if get(inp, m::field_select_permanent_address) == 1 {
                    let hi = (get(c, v::permanent_address_47_32) as u16).to_be_bytes();
                    let lo = (get(c, v::permanent_address_31_0) as u32).to_be_bytes();
                    self.vport.mac = [hi[0], hi[1], lo[0], lo[1], lo[2], lo[3]];
                    self.port_changed();
                }
                Ok(out(16))
            }
            op::QUERY_VPORT_STATE => {
                // op_mod 0 = own vNIC vport; 1 (e-switch vport) and 2 (uplink) and other_vport
                // need e-switch manager rights, which this function does not have.
                if op_mod != 0 {
                    return fail(st::BAD_PARAM, synd::BAD_OP_MOD);
                }
                if get(inp, l::query_vport_state_in::other_vport) != 0 {
                    return fail(st::BAD_PARAM, synd::OTHER_VPORT);
                }
                let mut o = out(16);
                set(&mut o, l::query_vport_state_out::admin_state, 1);
                set(&mut o, l::query_vport_state_out::state, if self.vport.down { 0 } else { 1 });
                Ok(o)
            }
            op::SET_ROCE_ADDRESS => {
                need(inp, l::set_roce_address_in::SIZE)?;
                let idx = get(inp, l::set_roce_address_in::roce_address_index) as usize;
                if idx >= GID_TABLE {
                    return fail(st::BAD_PARAM, synd::BAD_GID_INDEX);
                }
                if get(inp, l::set_roce_address_in::vhca_port_num) > 1 {
                    return fail(st::BAD_PARAM, synd::BAD_PORT);
                }
                let mut e = [0u8; 0x20];
                e.copy_from_slice(&inp[0x10..0x30]);
                let ver = get(&e, l::roce_addr_layout::roce_version);
                let l3 = get(&e, l::roce_addr_layout::roce_l3_type);
                if !matches!(ver, 0 | 2) || l3 > 1 {
                    return fail(st::BAD_PARAM, synd::BAD_ROCE_VERSION);
                }
                // An all-zero address clears the entry (how Linux deletes a GID).
                self.gids[idx] = if e[..16].iter().all(|&b| b == 0) { None } else { Some(e) };
                self.port_changed();
                Ok(out(16))
            }
            op::QUERY_ROCE_ADDRESS => {
                let idx = get(inp, l::query_roce_address_in::roce_address_index) as usize;
                if idx >= GID_TABLE {
                    return fail(st::BAD_PARAM, synd::BAD_GID_INDEX);
                }
                let mut o = out(l::query_roce_address_out::SIZE);
                if let Some(e) = self.gids[idx] {
                    o[0x10..0x30].copy_from_slice(&e);
                }
                Ok(o)
            }
            op::CREATE_QP => self.create_qp(inp),
            op::DESTROY_QP => {
                let n = get(inp, l::qp_cmd::qpn) as u32;
                if self.qps.remove(&n).is_none() {
                    return fail(st::BAD_RES, synd::NO_SUCH_QP);
                }
                if let Some(e) = self.engine.as_mut() {
                    let _ = e.destroy_qp(emu_roce::Qpn(n));
                }
                self.sq_doorbells.retain(|d| d.0 != n);
                Ok(out(16))
            }
            op::RST2INIT_QP | op::INIT2INIT_QP | op::INIT2RTR_QP | op::RTR2RTS_QP | op::RTS2RTS_QP
            | op::SQERR2RTS_QP | op::QP_2ERR | op::QP_2RST => self.modify_qp(opcode, inp),
            op::QUERY_QP => {
                let n = get(inp, l::qp_cmd::qpn) as u32;
                let q = self.qps.get(&n).ok_or((st::BAD_RES, synd::NO_SUCH_QP))?;
                let mut o = out(0x110);
                o[0x18..0x18 + l::qpc::SIZE].copy_from_slice(&q.qpc);
                let c = &mut o[0x18..0x18 + l::qpc::SIZE];
                set(c, l::qpc::hw_sq_wqebb_counter, q.sq_hw as u64);
                set(c, l::qpc::hw_rq_counter, q.rq_hw as u64);
                Ok(o)
            }
            _ => self.exec_raw(opcode, inp).unwrap_or(Err((st::BAD_OP, synd::UNKNOWN_OPCODE))),
        }
    }

    fn manage_pages(&mut self, op_mod: u16, inp: &[u8]) -> CmdResult {
        let n = get(inp, l::manage_pages_in::input_num_entries) as usize;
        self.check_page_function(get(inp, l::manage_pages_in::function_id))?;
        match op_mod {
            0 => {
                // The driver could not allocate what was asked for.
                self.page_req_outstanding = u32::MAX; // do not ask again until asked to
                Ok(out(16))
            }
            1 => {
                if self.faults.refuse_pages {
                    return fail(st::NO_RES, synd::PAGES_REFUSED);
                }
                need(inp, 16 + 8 * n)?;
                let mut new = Vec::with_capacity(n);
                for i in 0..n {
                    let pa = get(inp, l::manage_pages_in::pas.at(8 * i));
                    if !pa.is_multiple_of(PAGE) || !self.mem.is_mapped(pa, PAGE as usize) {
                        if pa.is_multiple_of(PAGE) {
                            self.ctr.dma_faults += 1;
                        }
                        return fail(st::BAD_PARAM, synd::BAD_PAGE_ADDRESS);
                    }
                    if self.pages.contains(&pa) || new.contains(&pa) {
                        return fail(st::BAD_PARAM, synd::DUPLICATE_PAGE);
                    }
                    new.push(pa);
                }
                let fill = [FW_PAGE_FILL; PAGE as usize];
                for pa in new {
                    let _ = self.mem.dma_write(pa, &fill);
                    self.pages.insert(pa);
                }
                if self.page_req_outstanding != u32::MAX {
                    self.page_req_outstanding = self.page_req_outstanding.saturating_sub(n as u32);
                }
                Ok(out(16))
            }
            _ => {
                if n > MAX_CMD_LEN as usize / 8 {
                    // More entries than any output could hold.
                    return fail(st::BAD_OUTP_LEN, synd::OUTPUT_TOO_SHORT);
                }
                let o_len = 16 + 8 * n;
                let surplus = (self.pages.len() as i64 - self.page_target()).max(0) as usize;
                let give = if self.faults.withhold_pages { 0 } else { n.min(surplus) };
                let mut o = out(o_len);
                let taken: Vec<u64> = self.pages.iter().rev().take(give).copied().collect();
                let mut buf = vec![0u8; PAGE as usize];
                for (i, pa) in taken.iter().enumerate() {
                    self.pages.remove(pa);
                    if self.mem.dma_read(*pa, &mut buf).is_err() || buf.iter().any(|&b| b != FW_PAGE_FILL) {
                        self.ctr.fw_page_corruptions += 1;
                        warn!("cx: firmware page {pa:#x} was modified by the host while firmware owned it");
                    }
                    set(&mut o, l::manage_pages_out::pas.at(8 * i), *pa);
                }
                set(&mut o, l::manage_pages_out::output_num_entries, give as u64);
                if self.page_req_outstanding == u32::MAX {
                    self.page_req_outstanding = 0;
                }
                Ok(o)
            }
        }
    }

    fn access_reg(&mut self, op_mod: u16, inp: &[u8]) -> CmdResult {
        let id = get(inp, l::access_register_in::register_id) as u16;
        let data = &inp[16..];
        let read = op_mod == 1;
        match id {
            reg::HOST_ENDIANNESS => {
                self.check_host_endianness_access(!read)?;
                need(inp, 16 + l::host_endianness_reg::SIZE)?;
                let mut o = out(16 + l::host_endianness_reg::SIZE);
                if read {
                    let he = self.host_endianness_le.map(|le| !le).unwrap_or(false);
                    set(&mut o[16..], l::host_endianness_reg::he, he as u64);
                } else {
                    self.host_endianness_le = Some(get(data, l::host_endianness_reg::he) == 0);
                    o[16..].copy_from_slice(&data[..l::host_endianness_reg::SIZE]);
                }
                Ok(o)
            }
            reg::PAOS | reg::PMTU => {
                // Accepted; port is always up, MTU fixed. Echo the register back.
                let mut o = out(inp.len());
                o[16..].copy_from_slice(data);
                Ok(o)
            }
            _ => fail(st::BAD_PARAM, synd::UNKNOWN_REGISTER),
        }
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

    fn create_eq(&mut self, inp: &[u8]) -> CmdResult {
        need(inp, l::create_eq_in::SIZE)?;
        let c = &inp[0x10..0x50];
        use l::eqc;
        let log_size = get(c, eqc::log_eq_size) as u8;
        if log_size as u64 > get(&self.cap_cur, l::cmd_hca_cap::log_max_eq_sz) {
            return fail(st::BAD_PARAM, synd::QUEUE_TOO_BIG);
        }
        let uar = get(c, eqc::uar_page) as u32;
        if !self.uars.contains(&uar) {
            return fail(st::BAD_RES, synd::NO_SUCH_UAR);
        }
        let lps = get(c, eqc::log_page_size) as u8;
        let offset = get(c, eqc::page_offset) * 64;
        let np = Self::npages((1u64 << log_size) * 64, lps, offset);
        let pas = Self::read_pas(inp, 0x110, np, lps)?;
        let mask = get(inp, l::create_eq_in::event_bitmask_0);
        if mask == 0 {
            return fail(st::BAD_PARAM, synd::BAD_EVENT_MASK);
        }
        let max_eq = 1u32 << get(&self.cap_cur, l::cmd_hca_cap::log_max_eq);
        let ids: BTreeSet<u32> = self.eqs.keys().map(|&k| k as u32).collect();
        let eqn = lowest_free(&ids, 1, max_eq.min(256)).ok_or((st::NO_RES, synd::OUT_OF_OBJECTS))? as u8;
        self.eqs.insert(eqn, Eq {
            eqn,
            uar,
            log_size,
            buf: QBuf { pas, log_page_size: lps, offset },
            mask,
            oi: get(c, eqc::oi) == 1,
            pi: 0,
            ci: 0,
            armed: false,
            broken: false,
        });
        let mut o = out(16);
        set(&mut o, l::create_eq_out::eq_number, eqn as u64);
        Ok(o)
    }

    fn create_cq(&mut self, inp: &[u8]) -> CmdResult {
        need(inp, l::create_cq_in::SIZE)?;
        let c = &inp[0x10..0x50];
        use l::cqc;
        if get(c, cqc::cqe_sz) != 0 || get(c, cqc::cqe_comp_en) != 0 {
            // 64-byte CQEs only; CQE compression is not offered.
            return fail(st::BAD_PARAM, synd::BAD_CQE_SIZE);
        }
        let log_size = get(c, cqc::log_cq_size) as u8;
        if log_size as u64 > get(&self.cap_cur, l::cmd_hca_cap::log_max_cq_sz) {
            return fail(st::BAD_PARAM, synd::QUEUE_TOO_BIG);
        }
        let uar = get(c, cqc::uar_page) as u32;
        if !self.uars.contains(&uar) {
            return fail(st::BAD_RES, synd::NO_SUCH_UAR);
        }
        let c_eqn = get(c, cqc::c_eqn) as u8;
        if !self.eqs.contains_key(&c_eqn) {
            return fail(st::BAD_RES, synd::NO_SUCH_EQ);
        }
        let dbr = get(c, cqc::dbr_addr);
        if !dbr.is_multiple_of(8) {
            return fail(st::BAD_PARAM, synd::UNALIGNED_DBR);
        }
        let lps = get(c, cqc::log_page_size) as u8;
        let offset = get(c, cqc::page_offset) * 64;
        let np = Self::npages((1u64 << log_size) * 64, lps, offset);
        let pas = Self::read_pas(inp, 0x110, np, lps)?;
        let max = 1u32 << get(&self.cap_cur, l::cmd_hca_cap::log_max_cq);
        let ids: BTreeSet<u32> = self.cqs.keys().copied().collect();
        let cqn = lowest_free(&ids, 0x400, 0x400 + max).ok_or((st::NO_RES, synd::OUT_OF_OBJECTS))?;
        self.cqs.insert(cqn, Cq {
            cqn,
            uar,
            log_size,
            buf: QBuf { pas, log_page_size: lps, offset },
            c_eqn,
            dbr,
            oi: get(c, cqc::oi) == 1,
            cc: get(c, cqc::cc) == 1,
            pi: 0,
            armed: None,
            broken: false,
        });
        let mut o = out(16);
        set(&mut o, l::obj_id_24::id, cqn as u64);
        Ok(o)
    }

    fn create_mkey(&mut self, inp: &[u8]) -> CmdResult {
        need(inp, l::create_mkey_in::SIZE)?;
        let c = &inp[0x10..0x50];
        use l::mkc;
        let am = get(c, mkc::access_mode_1_0) as u8 | ((get(c, mkc::access_mode_4_2) as u8) << 2);
        if am > 1 {
            return fail(st::BAD_PARAM, synd::BAD_ACCESS_MODE);
        }
        let pd = get(c, mkc::pd) as u32;
        if !self.pds.contains(&pd) {
            return fail(st::BAD_RES, synd::NO_SUCH_PD);
        }
        let length64 = get(c, mkc::length64) == 1;
        let start = get(c, mkc::start_addr);
        let len = get(c, mkc::len);
        let lps = get(c, mkc::log_page_size) as u8;
        let mut mtt = Vec::new();
        if am == 1 {
            if length64 || !(12..=30).contains(&lps) {
                return fail(st::BAD_PARAM, synd::BAD_ACCESS_MODE);
            }
            let octw = get(c, mkc::translations_octword_size) as usize;
            let n = octw * 2;
            need(inp, 0x110 + 8 * n)?;
            let ps = 1u64 << lps;
            let needed = ((start % ps) + len).div_ceil(ps) as usize;
            if needed > n {
                return fail(st::BAD_PARAM, synd::MTT_TOO_SHORT);
            }
            for i in 0..needed {
                let e = u64::from_be_bytes(inp[0x110 + 8 * i..0x118 + 8 * i].try_into().unwrap());
                let pa = e & !7; // low bits: read/write enable flags
                if pa & (ps - 1) != 0 {
                    return fail(st::BAD_PARAM, synd::UNALIGNED_PAS);
                }
                mtt.push(pa);
            }
        }
        let max = 1u32 << get(&self.cap_cur, l::cmd_hca_cap::log_max_mkey);
        let ids: BTreeSet<u32> = self.mkeys.keys().copied().collect();
        let index = lowest_free(&ids, 0x10, max).ok_or((st::NO_RES, synd::OUT_OF_OBJECTS))?;
        let key = (index << 8) | get(c, mkc::mkey_7_0) as u32;
        self.mkeys.insert(index, Mkey {
            index,
            key,
            pd,
            access_mode: am,
            lr: get(c, mkc::lr) == 1,
            lw: get(c, mkc::lw) == 1,
            rr: get(c, mkc::rr) == 1,
            rw: get(c, mkc::rw) == 1,
            atomic: get(c, mkc::a) == 1,
            start,
            len,
            length64,
            log_page_size: lps,
            mtt,
            free: get(c, mkc::free) == 1,
            en_rinval: get(c, mkc::en_rinval) == 1,
            umr_en: get(c, mkc::umr_en) == 1,
        });
        let mut o = out(16);
        set(&mut o, l::obj_id_24::id, index as u64);
        Ok(o)
    }

    fn create_qp(&mut self, inp: &[u8]) -> CmdResult {
        need(inp, 0x110)?;
        let c = &inp[0x18..0x18 + l::qpc::SIZE];
        use l::qpc;
        let stype = get(c, qpc::st) as u8;
        if !matches!(stype, qps::ST_RC | qps::ST_UD | qps::ST_QP1) {
            return fail(st::BAD_PARAM, synd::BAD_QP_TYPE);
        }
        if stype == qps::ST_QP1 && self.qps.contains_key(&1) {
            return fail(st::BAD_PARAM, synd::QP1_EXISTS);
        }
        let pd = get(c, qpc::pd) as u32;
        if !self.pds.contains(&pd) {
            return fail(st::BAD_RES, synd::NO_SUCH_PD);
        }
        let uar = get(c, qpc::uar_page) as u32;
        if !self.uars.contains(&uar) {
            return fail(st::BAD_RES, synd::NO_SUCH_UAR);
        }
        let (cs, cr) = (get(c, qpc::cqn_snd) as u32, get(c, qpc::cqn_rcv) as u32);
        let no_sq = get(c, qpc::no_sq) == 1;
        let rq_type = get(c, qpc::rq_type) as u8;
        if (!no_sq && !self.cqs.contains_key(&cs)) || (rq_type == 0 && !self.cqs.contains_key(&cr)) {
            return fail(st::BAD_RES, synd::NO_SUCH_CQ);
        }
        let dbr = get(c, qpc::dbr_addr);
        if !dbr.is_multiple_of(8) {
            return fail(st::BAD_PARAM, synd::UNALIGNED_DBR);
        }
        if !matches!(rq_type, 0 | 3) {
            return fail(st::BAD_PARAM, synd::BAD_RQ_SIZE);
        }
        let max_sz = get(&self.cap_cur, l::cmd_hca_cap::log_max_qp_sz);
        let log_sq = get(c, qpc::log_sq_size) as u8;
        let log_rq = get(c, qpc::log_rq_size) as u8;
        let stride = get(c, qpc::log_rq_stride) as u8;
        if log_sq as u64 > max_sz || log_rq as u64 > max_sz {
            return fail(st::BAD_PARAM, synd::QUEUE_TOO_BIG);
        }
        if rq_type == 0 && ((16u64 << stride) > get(&self.cap_cur, l::cmd_hca_cap::max_wqe_sz_rq)) {
            return fail(st::BAD_PARAM, synd::BAD_RQ_SIZE);
        }
        let lps = get(c, qpc::log_page_size) as u8;
        let offset = get(c, qpc::page_offset) * 64;
        let mut q = Qp {
            qpn: 0,
            st: stype,
            state: qps::RST,
            pd,
            uar,
            cqn_snd: if no_sq { 0 } else { cs },
            cqn_rcv: if rq_type == 0 { cr } else { 0 },
            dbr,
            buf: QBuf { pas: Vec::new(), log_page_size: lps, offset },
            log_rq_size: log_rq,
            log_rq_stride: stride,
            rq_type,
            no_sq,
            log_sq_size: log_sq,
            qpc: c.to_vec(),
            sq_hw: 0,
            rq_hw: 0,
        };
        Self::sq_start_ok(q.rq_bytes(), !no_sq)?;
        self.check_ts_format(self.cfg.profile.caps.qp_ts_format, get(c, qpc::ts_format))?;
        let bytes = q.rq_bytes() + q.sq_bytes();
        let np = Self::npages(bytes, lps, offset);
        q.buf.pas = Self::read_pas(inp, 0x110, np, lps)?;
        let qpn = if stype == qps::ST_QP1 {
            1
        } else {
            let max = 1u32 << get(&self.cap_cur, l::cmd_hca_cap::log_max_qp);
            let ids: BTreeSet<u32> = self.qps.keys().copied().collect();
            lowest_free(&ids, 0x100, 0x100 + max).ok_or((st::NO_RES, synd::OUT_OF_OBJECTS))?
        };
        q.qpn = qpn;
        set(&mut q.qpc, qpc::state, qps::RST as u64);
        if let Some(e) = self.engine.as_mut() {
            let ty = if stype == qps::ST_RC { emu_roce::QpType::Rc } else { emu_roce::QpType::Ud };
            if e.create_qp(emu_roce::Qpn(qpn), ty).is_err() {
                return fail(st::INT_ERR, synd::OUT_OF_OBJECTS);
            }
        }
        self.qps.insert(qpn, q);
        let mut o = out(16);
        set(&mut o, l::qp_cmd::qpn, qpn as u64);
        Ok(o)
    }

    fn modify_qp(&mut self, opcode: u16, inp: &[u8]) -> CmdResult {
        let qpn = get(inp, l::qp_cmd::qpn) as u32;
        if !self.qps.contains_key(&qpn) {
            return fail(st::BAD_RES, synd::NO_SUCH_QP);
        }
        let cur = self.qps[&qpn].state;
        let (from_ok, to) = match opcode {
            op::RST2INIT_QP => (cur == qps::RST, qps::INIT),
            op::INIT2INIT_QP => (cur == qps::INIT, qps::INIT),
            op::INIT2RTR_QP => (cur == qps::INIT, qps::RTR),
            op::RTR2RTS_QP => (cur == qps::RTR, qps::RTS),
            op::RTS2RTS_QP => (cur == qps::RTS, qps::RTS),
            op::SQERR2RTS_QP => (cur == qps::SQER, qps::RTS),
            op::QP_2ERR => (true, qps::ERR),
            _ => (true, qps::RST),
        };
        if !from_ok {
            return fail(st::BAD_QP_STATE, synd::BAD_TRANSITION);
        }
        if matches!(opcode, op::QP_2ERR | op::QP_2RST) {
            let qpc_now = self.qps[&qpn].qpc.clone();
            self.engine_modify(qpn, to, &qpc_now)?;
            let q = self.qps.get_mut(&qpn).expect("qp");
            q.state = to;
            if to == qps::RST {
                q.sq_hw = 0;
                q.rq_hw = 0;
            }
            set(&mut q.qpc, l::qpc::state, to as u64);
            return Ok(out(16));
        }
        need(inp, 0x110)?;
        let c = &inp[0x18..0x18 + l::qpc::SIZE];
        use l::qpc;
        let path = |f: Field| f.at(qpc::primary_address_path.byte());
        let stype = self.qps[&qpn].st;
        let mut copy: Vec<Field> = Vec::new();
        match opcode {
            op::RST2INIT_QP | op::INIT2INIT_QP => {
                if get(c, path(l::ads::vhca_port_num)) > 1 {
                    return fail(st::BAD_PARAM, synd::BAD_PORT);
                }
                copy.extend([qpc::rre, qpc::rwe, qpc::rae, qpc::atomic_mode, qpc::q_key, qpc::counter_set_id,
                    path(l::ads::pkey_index), path(l::ads::vhca_port_num), qpc::rlky, qpc::fre, qpc::pm_state]);
            }
            op::INIT2RTR_QP => {
                let mtu = get(c, qpc::mtu);
                if stype == qps::ST_RC {
                    if !(1..=5).contains(&mtu) {
                        return fail(st::BAD_PARAM, synd::BAD_MTU);
                    }
                    let gi = get(c, path(l::ads::src_addr_index)) as usize;
                    if gi >= GID_TABLE || self.gids[gi].is_none() {
                        return fail(st::BAD_PARAM, synd::BAD_GID_INDEX);
                    }
                    copy.extend([qpc::remote_qpn, qpc::next_rcv_psn, qpc::log_rra_max, qpc::min_rnr_nak,
                        qpc::primary_address_path]);
                } else if mtu > 5 {
                    return fail(st::BAD_PARAM, synd::BAD_MTU);
                }
                copy.extend([qpc::mtu, qpc::log_msg_max, qpc::rre, qpc::rwe, qpc::rae]);
            }
            op::RTR2RTS_QP | op::SQERR2RTS_QP | op::RTS2RTS_QP => {
                copy.extend([qpc::next_send_psn, qpc::retry_count, qpc::rnr_retry, qpc::log_sra_max,
                    path(l::ads::ack_timeout), qpc::min_rnr_nak]);
                if opcode == op::RTS2RTS_QP {
                    copy.retain(|f| *f != qpc::next_send_psn);
                }
            }
            _ => {}
        }
        let mut new = self.qps[&qpn].qpc.clone();
        if copy.contains(&qpc::primary_address_path) {
            let b = qpc::primary_address_path.byte();
            let e = b + l::ads::SIZE;
            new[b..e].copy_from_slice(&c[b..e]);
            copy.retain(|f| *f != qpc::primary_address_path);
        }
        for f in copy {
            set(&mut new, f, get(c, f));
        }
        if stype == qps::ST_RC {
            self.ra_depth_ok(Some(get(&new, qpc::log_sra_max)), Some(get(&new, qpc::log_rra_max)))?;
        }
        self.engine_modify(qpn, to, &new)?;
        let q = self.qps.get_mut(&qpn).expect("qp");
        q.qpc = new;
        q.state = to;
        set(&mut q.qpc, qpc::state, to as u64);
        Ok(out(16))
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
        c.gids = self.gids.iter().filter(|g| g.is_some()).count();
        c.pages_held = self.pages.len();
        c.raw_objects = self.raw.live();
        c
    }

    /// PCI function-level reset: all firmware state is lost (objects and pages are counted as
    /// abandoned), the command queue address is cleared and `initializing` is set again for
    /// `init_delay_ns`. Fault knobs and event counters survive.
    pub fn function_reset(&mut self) {
        let live = self.ctr_live().live_objects();
        self.ctr.objects_abandoned += live as u64;
        self.ctr.pages_abandoned += self.pages.len() as u64;
        let (faults, ctr, link) = (self.faults.clone(), self.ctr.clone(), self.link.take());
        let (mem, clock, cfg) = (self.mem.clone(), self.clock.clone(), self.cfg.clone());
        *self = Device::new(mem, clock, cfg);
        self.faults = faults;
        self.ctr = ctr;
        self.link = link;
    }

    /// Port goes up or down: vport state follows and a PORT_CHANGE EQE (sub_type 4 active,
    /// 1 down; port number in data+8 bits 7:4) is posted. Returns whether an EQ took it.
    pub fn set_port_up(&mut self, up: bool) -> bool {
        self.vport.down = !up;
        let mut d = [0u8; 28];
        d[8] = 1 << 4;
        self.raise_event(event::PORT_CHANGE, if up { 4 } else { 1 }, &d)
    }

    /// Whether the firmware has a fatal health syndrome set.
    pub fn set_health_syndrome(&mut self, synd: u8) {
        self.health_synd = synd;
    }
}

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

