//! The device: configuration, state, bring-up in firmware order and the command helpers; each
//! object the bring-up creates lives in its own file (caps, eq, port, keys, cq, qp, srq, teardown).

mod caps;
mod cq;
pub(crate) mod cq_clean;
mod eq;
mod group;
mod keys;
mod port;
mod qcounter;
mod qp;
mod recovery;
mod srq;
mod teardown;

pub use srq::{Srq, SrqId};
pub(crate) use recovery::{flush_sq, flush_srq};

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use crate::cmd::{op, CmdQueue, Slot, Timeouts, MAX_MSG};
use crate::pages::{pages_op, PAGE_MSG};
use crate::error::Error;
use crate::health::{self, FwVersion, HealthReport};
use crate::ifc::*;
use crate::layout::{get, set, set_bytes, Field};
use crate::ring::{CompletionRing, WorkRing};
use hal::{DmaRegion, Hal, Mmio, PhysAddr};
use rdma::{Access, Cqn, Lkey, Pdn, Qpn, RcConnectAttrs, Rkey};

pub(crate) const PAGE: usize = 4096;
/// MTT entries per CREATE_MKEY (0x110 + 8 * n <= MAX_MSG).
const MTT_PER_CMD: usize = (MAX_MSG - 0x110) / 8;

use mlx5_ifc::{cap_type, qp as qp_fact};
/// EQE event types, re-exported for [`AsyncEvent::event_type`] users.
pub use mlx5_ifc::event;

/// The well-known QP1 Q_Key.
pub const GSI_QKEY: u32 = 0x8001_0000;
/// UAR page offsets: EQ doorbell without arm (mlx5 eq.c / vfio).
const UAR_EQ_DB_NOARM: usize = mlx5_ifc::uar::EQ_NOARM;
/// QUERY_VPORT_STATE op_mod for the function's own vNIC vport and the `state` value for up
/// (Linux mlx5_ifc.h MLX5_VPORT_STATE_OP_MOD_VNIC_VPORT, vport.h MLX5_VPORT_STATE_UP).
const VPORT_STATE_OP_MOD_VNIC: u16 = mlx5_ifc::vport_state::OP_MOD_VNIC_VPORT;
const VPORT_STATE_UP: u64 = mlx5_ifc::vport_state::UP as u64;

/// Bring-up configuration.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// The appliance's IPv4 address, programmed as GID 0 (::ffff:a.b.c.d, RoCEv2).
    pub ipv4: [u8; 4],
    pub timeouts: Timeouts,
    /// log2 of the async EQ entries the driver expects to need (64 = one 4 KiB page);
    /// `eq_spare_entries` are added and the sum rounded up to a power of two.
    pub eq_log_size: u8,
    /// Spare async EQ entries (rdma-core `mlx5_vfio.c` MLX5_NUM_SPARE_EQE = 0x80): firmware
    /// treats an async EQ overrun as fatal (health syndrome), so the EQ must absorb a burst
    /// of events that arrives while the driver is busy.
    pub eq_spare_entries: u32,
    /// This is a virtual function (PCI ID table `vf`, see [`crate::PCI_IDS`]): no
    /// HOST_ENDIANNESS (Linux writes it only on a PF).
    pub vf: bool,
    /// Write ACCESS_REG HOST_ENDIANNESS (Linux and vfio do; some drivers skip it).
    pub set_host_endianness: bool,
    /// Also ask QUERY_PAGES op_mod 3 right after INIT_HCA (Snabb/VPP), besides page-request EQEs.
    pub regular_pages_after_init: bool,
    /// Most 4 KiB pages the firmware may hold; beyond it (or when DMA memory runs out) the
    /// driver answers MANAGE_PAGES ALLOCATION_FAIL and reports an error.
    pub max_fw_pages: usize,
    /// Firmware command trace ([`crate::trace`]).
    pub trace: crate::trace::TraceMode,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            ipv4: [10, 0, 0, 1],
            timeouts: Timeouts::default(),
            eq_log_size: 6,
            eq_spare_entries: 0x80,
            vf: false,
            set_host_endianness: true,
            regular_pages_after_init: true,
            max_fw_pages: 1 << 18,
            trace: crate::trace::TraceMode::Off,
        }
    }
}

/// Capabilities read at bring-up (current values after SET_HCA_CAP).
#[derive(Debug, Clone, Copy, Default)]
pub struct Caps {
    pub log_max_qp: u8,
    pub log_max_qp_sz: u8,
    /// Largest SRQ (RMP) in WQEs, log2.
    pub log_max_srq_sz: u8,
    pub log_max_cq: u8,
    pub log_max_cq_sz: u8,
    pub log_max_eq: u8,
    pub log_max_eq_sz: u8,
    pub log_max_mkey: u8,
    pub log_max_pd: u8,
    pub log_max_msg: u8,
    pub log_max_ra_req_qp: u8,
    pub log_max_ra_res_qp: u8,
    pub port_type: u8,
    pub num_ports: u8,
    pub roce: bool,
    pub rc: bool,
    pub ud: bool,
    pub gid_table_size: u16,
    pub cqe_version: u8,
    pub roce_version: u8,
    pub roce_address_table_size: u16,
    pub sw_r_roce_src_udp_port: bool,
    pub r_roce_min_src_udp_port: u16,
    pub r_roce_max_src_udp_port: u16,
    /// Timestamp-format capabilities (0 free-running only, 1 real-time only, 2 both).
    pub qp_ts_format: u8,
    pub sq_ts_format: u8,
    pub rq_ts_format: u8,
    pub force_teardown: bool,
    pub fast_teardown: bool,
    /// Queue counter sets the function may allocate (0: none).
    pub max_qp_cnt: u16,
}

/// Counters of the command interface and page traffic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub commands: u64,
    pub pages_given: u64,
    pub pages_reclaimed: u64,
    pub page_request_events: u64,
    pub eqes: u64,
    pub port_change_events: u64,
    pub error_events: u64,
    /// SRQ_LAST_WQE events: a QP on an SRQ in ERROR with its last WQE consumed, as on every
    /// close of such a QP (not an error; not in `error_events`).
    pub srq_last_wqe_events: u64,
    /// Asynchronous events dropped with the owner's list full (64 unread): a routine one
    /// (SRQ limit, last WQE) first, a fault only when every kept event is one.
    pub events_dropped: u64,
    /// Completion events (EQE type 0): the polled data path does not need them; counted.
    pub completion_events: u64,
    /// TEARDOWN_HCA ended by force close / by fast teardown (graceful teardown failed;
    /// [`crate::teardown`]).
    pub force_teardowns: u64,
    pub fast_teardowns: u64,
    /// Firmware pages freed without MANAGE_PAGES because fast teardown closed the function.
    pub pages_released_by_fast_teardown: u64,
    /// CQEs naming an unknown QP or a WQE that is not outstanding (dropped, not reported).
    pub bad_cqes: u64,
    /// CQEs of destroyed QPs taken out of their CQs at destroy ([`cq_clean`]).
    pub cqes_cleaned: u64,
    /// Send-queue doorbells (MMIO writes to the UAR) rung by the data path.
    pub sq_doorbells: u64,
    /// Send WQEs written (a doorbell may announce several).
    pub send_wqes: u64,
    /// Times the device was found dead (command timeout, health syndrome or stall, fatal
    /// event) and reset ([`recovery`]).
    pub device_failures: u64,
    /// Of those resets, the ones done by PCIe Function Level Reset (the platform offered it;
    /// the others wrote `nic_interface` = SW_RESET).
    pub flr_resets: u64,
    /// Bring-ups after a reset that succeeded.
    pub recoveries: u64,
    /// Bring-ups after a reset that failed (the device reset again; tried again later).
    pub failed_recoveries: u64,
    /// Work requests completed with a flush error because the device failed.
    pub flushed_on_failure: u64,
    /// Objects (QPs, CQs, SRQs, keys) the app still held when the device was brought up again.
    pub objects_forgotten: u64,
}

/// An asynchronous error event the app may want (CQ / QP errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncEvent {
    pub event_type: u8,
    pub sub_type: u8,
    /// CQN or QPN/SRQN the event is about.
    pub object: u32,
    /// CQ error syndrome (1 overrun, 2 access violation), else 0.
    pub syndrome: u8,
}

struct Eq<D> {
    eqn: u8,
    buf: D,
    log_size: u8,
    ci: u32,
}

/// A completion queue: its buffer of 64-byte CQEs and doorbell record, and the ring over them.
pub struct Cq<D> {
    pub cqn: Cqn,
    pub buf: D,
    pub dbr: D,
    pub ring: CompletionRing,
    /// The adapter reported a CQ error (overrun, access violation): it writes no more CQEs
    /// here; the work outstanding on its QPs completes as flush errors ([`recovery`]).
    pub broken: bool,
}

/// Kind of QP created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpKind {
    Rc,
    /// QP1 (GSI), the UD queue CM speaks on.
    Gsi,
}

/// QP state as the driver last set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpState {
    Reset,
    Init,
    Rtr,
    Rts,
    Error,
}

/// A queue pair: one buffer (RQ at 0, SQ after it) and one doorbell record (DBR[0] RQ, DBR[1]
/// SQ), and the two rings over them.
pub struct Qp<D> {
    pub qpn: Qpn,
    pub kind: QpKind,
    pub buf: D,
    pub dbr: D,
    /// Send ring in WQEBBs (its producer counter is ctrl.wqe_index; completed up to a CQE's
    /// wqe_counter).
    pub sq: WorkRing,
    /// Receive ring in WQEs (unused, size 1, on an SRQ).
    pub rq: WorkRing,
    pub send_cq: Cqn,
    pub recv_cq: Cqn,
    pub state: QpState,
    /// Per SQ WQEBB slot: work request of the WQE starting there.
    pub(crate) sq_slots: Vec<SqSlot>,
    /// Per RQ WQE slot: wr_id.
    pub(crate) rq_wrid: Vec<u64>,
    /// First 8 bytes (ctrl segment) of the newest WQE written by `post_send_deferred` and not
    /// yet announced by a doorbell; `None` when the device has seen every WQE.
    pub(crate) sq_unrung: Option<u64>,
    /// The next send WQE must carry a small fence (it follows a UMR).
    pub(crate) next_fence: bool,
    /// The SRQ this QP takes its receives from (then it has no RQ: `log_rq` is 0 and unused).
    pub srq: Option<SrqId>,
}

/// What the driver remembers about a posted send WQE until it completes.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SqSlot {
    pub wr_id: u64,
    pub wqebbs: u8,
    /// What its completion reports (decided when the WQE is written, not per CQE).
    pub opcode: rdma::WcOpcode,
}

/// What the QP state-change commands need to know of a QP (copied out, so the commands
/// can run for a QP whose ring lives in a [`crate::QueueGroup`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct QpCtl {
    pub qpn: Qpn,
    pub kind: QpKind,
    pub send_cq: Cqn,
    pub recv_cq: Cqn,
    pub dbr: PhysAddr,
}

impl<D: DmaRegion> Qp<D> {
    pub(crate) fn ctl(&self) -> QpCtl {
        QpCtl { qpn: self.qpn, kind: self.kind, send_cq: self.send_cq, recv_cq: self.recv_cq, dbr: self.dbr.paddr() }
    }

}

/// A memory key: an MTT registration of one physically contiguous buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mkey {
    pub index: u32,
    pub lkey: Lkey,
    pub rkey: Rkey,
    pub start: PhysAddr,
    pub len: u64,
}

/// How far bring-up got (what teardown must undo).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Stage {
    CmdQueue,
    Enabled,
    Initialized,
}

/// An mlx5 adapter brought up by this driver.
pub struct Mlx5<H: Hal, M: Mmio> {
    pub(crate) hal: H,
    pub(crate) bar: M,
    pub(crate) cfg: Config,
    pub(crate) cmd: CmdQueue<H::Dma>,
    /// Command input/output staging (MAX_MSG = 36,880 bytes each), on the heap: inline they
    /// would make `Mlx5` ~74 KiB, more than a boot stack holds.
    pub(crate) inb: alloc::boxed::Box<[u8]>,
    outb: alloc::boxed::Box<[u8]>,
    /// Staging for MANAGE_PAGES on the reserved page slot (usable while `inb`/`outb` hold a
    /// command that waits for pages).
    pub(crate) page_in: alloc::boxed::Box<[u8]>,
    pub(crate) page_out: alloc::boxed::Box<[u8]>,
    /// Function ID the firmware names for this function's pages (QUERY_PAGES output).
    pub(crate) page_func: u16,
    stage: Stage,
    pub fw: FwVersion,
    pub issi: u16,
    pub caps: Caps,
    pub(crate) pages: BTreeMap<PhysAddr, H::Dma>,
    pub(crate) stats: Stats,
    pub(crate) uar: Option<u32>,
    eq: Option<Eq<H::Dma>>,
    pd: Option<Pdn>,
    td: Option<u32>,
    resd_lkey: Lkey,
    mac: [u8; 6],
    roce_enabled: bool,
    mkeys: Vec<Mkey>,
    pub(crate) cqs: Vec<Cq<H::Dma>>,
    pub(crate) qps: Vec<Qp<H::Dma>>,
    /// CQN / QPN → position in `cqs` / `qps` (rebuilt by `reindex` when they change).
    cq_pos: crate::objindex::ObjIndex,
    pub(crate) qp_pos: crate::objindex::ObjIndex,
    /// Shared receive queues by [`SrqId`] slot (None: destroyed).
    pub(crate) srqs: Vec<Option<Srq<H::Dma>>>,
    events: Vec<AsyncEvent>,
    mkey_variant: u8,
    /// Port state from the last PORT_CHANGE event (None: no event seen yet).
    port_up: Option<bool>,
    /// Raw Ethernet queues and steering, once enabled.
    pub(crate) raw: Option<crate::raw::RawEth<H::Dma>>,
    /// The port's MTUs (PMTU register, read at bring-up); path MTUs are clamped to `max`.
    pub port_mtu: crate::vport::PortMtu,
    /// The queue counter set every QP counts into, and its totals.
    pub(crate) qcounters: Option<qcounter::QueueCounters>,
    /// Why the device failed, while it is failed ([`recovery`]).
    pub(crate) failed: Option<Error>,
    /// Device generation: bumped at every failure; a [`crate::QueueGroup`] made in an older one
    /// holds objects the reset dropped.
    pub(crate) generation: u32,
    /// Records of the queue groups made ([`group`]), by the group's slot.
    pub(crate) groups: Vec<Option<group::GroupRecord>>,
    /// Counts of the queue groups released so far, by slot (added at release, slow path).
    pub(crate) released_groups: Vec<crate::GroupStats>,
}

fn clear(b: &mut [u8]) {
    b.iter_mut().for_each(|x| *x = 0);
}

impl<H: Hal, M: Mmio> Mlx5<H, M> {
    /// The device layer's bring-up (apps use [`crate::Mlx5Verbs::bring_up`], which starts with
    /// this): the adapter behind `bar` (BAR0) up to a state where CQs and QPs can be created:
    /// everything up to the PD and the reserved lkey, RoCE enabled and GID 0 set (no memory
    /// key). On failure everything that was created is undone by the one cleanup
    /// ([`Mlx5::shutdown`]'s, as far as the firmware still answers) and the error is returned.
    pub fn bring_up(hal: H, bar: M, cfg: Config) -> Result<Self, Error> {
        if bar.size() < init_seg::LAYOUT.size {
            return Err(Error::BarTooSmall(bar.size()));
        }
        health::wait_initialized(&hal, &bar, cfg.timeouts.init_ns)?;
        let fw = health::fw_version(&bar);
        let rev = health::cmdif_rev(&bar);
        if rev != 5 {
            return Err(Error::BadCmdifRev(rev));
        }
        let mut cmd = CmdQueue::new(&hal, &bar, cfg.timeouts)?;
        cmd.watch_health(&hal, &bar);
        cmd.trace = cfg.trace;
        log::info!("mlx5: firmware {fw}, cmdif rev {rev}");
        let mut dev = Mlx5 {
            hal,
            bar,
            cfg,
            cmd,
            inb: alloc::vec![0; MAX_MSG].into_boxed_slice(),
            outb: alloc::vec![0; MAX_MSG].into_boxed_slice(),
            page_in: alloc::vec![0; PAGE_MSG].into_boxed_slice(),
            page_out: alloc::vec![0; PAGE_MSG].into_boxed_slice(),
            page_func: 0,
            stage: Stage::CmdQueue,
            fw,
            issi: 0,
            caps: Caps::default(),
            pages: BTreeMap::new(),
            stats: Stats::default(),
            uar: None,
            eq: None,
            pd: None,
            td: None,
            resd_lkey: Lkey(0),
            mac: [0; 6],
            roce_enabled: false,
            mkeys: Vec::new(),
            cqs: Vec::new(),
            qps: Vec::new(),
            cq_pos: crate::objindex::ObjIndex::new(),
            qp_pos: crate::objindex::ObjIndex::new(),
            srqs: Vec::new(),
            events: Vec::new(),
            mkey_variant: 0,
            port_up: None,
            raw: None,
            port_mtu: Default::default(),
            qcounters: None,
            failed: None,
            generation: 0,
            groups: Vec::new(),
            released_groups: Vec::new(),
        };
        match dev.steps() {
            Ok(()) => Ok(dev),
            Err(e) => {
                log::error!("mlx5: bring-up failed: {e}");
                let _ = dev.teardown_inner();
                Err(e)
            }
        }
    }

    fn steps(&mut self) -> Result<(), Error> {
        self.enable_hca()?;
        self.stage = Stage::Enabled;
        self.set_issi()?;
        self.satisfy_pages(pages_op::BOOT)?;
        if self.cfg.set_host_endianness && !self.cfg.vf {
            self.host_endianness()?;
        }
        self.handle_caps()?;
        self.satisfy_pages(pages_op::INIT)?;
        self.simple(op::INIT_HCA, 0, mbox_in::LAYOUT.size, &[])?;
        self.stage = Stage::Initialized;
        if self.cfg.regular_pages_after_init {
            self.satisfy_pages(pages_op::REGULAR)?;
        }
        self.alloc_uar()?;
        self.create_eq()?;
        self.poll_eq()?;
        self.alloc_pd()?;
        self.alloc_td()?;
        self.alloc_queue_counter();
        self.query_special_contexts()?;
        self.query_mac()?;
        self.port_mtu = self.query_port_mtu()?;
        if self.caps.roce {
            self.enable_roce()?;
            self.set_roce_address(0, self.cfg.ipv4)?;
        }
        // No memory key is created here: a key with remote rights over all memory would let
        // any peer read and write the whole image. Local DMA uses the reserved lkey (rlky QPs);
        // remote access is granted per I/O buffer (`reg_mr`, fast registration).
        self.poll_eq()?;
        Ok(())
    }

    // ---------------------------------------------------------------- command helpers

    /// Run the command in `self.inb[..in_len]`, output into `self.outb[..out_len]`. While it
    /// waits, events are serviced: firmware may ask for pages in the middle of a command and
    /// not complete it until they are given (rdma-core `mlx5_vfio.c` answers page requests
    /// inside its command wait); they are given on the reserved page slot. The EQ is drained
    /// before the command is posted too, so a caller that issues commands without polling
    /// (create/destroy loops, a busy control path) still keeps the async EQ consumed: an
    /// overrun is fatal on the adapter.
    pub(crate) fn run(&mut self, in_len: usize, out_len: usize) -> Result<(), Error> {
        if self.failed.is_some() {
            return self.run_failed(out_len);
        }
        let r = self.run_live(in_len, out_len);
        if let Err(e) = &r {
            self.note_failure(e);
        }
        r
    }

    fn run_live(&mut self, in_len: usize, out_len: usize) -> Result<(), Error> {
        self.poll_eq()?;
        clear(&mut self.outb[..out_len]);
        self.cmd.post(&self.bar, Slot::Main, &self.inb[..in_len], out_len)?;
        let start = self.hal.now_ns();
        let r = loop {
            match self.cmd.poll(&self.hal, &self.bar, Slot::Main) {
                Ok(true) => break self.cmd.finish(Slot::Main, &self.inb[..in_len], &mut self.outb[..out_len]),
                Ok(false) => {}
                Err(e) => break Err(self.cmd.abandon(Slot::Main, &self.inb[..in_len], &self.outb[..out_len], e)),
            }
            if let Err(e) = self.poll_eq() {
                break Err(self.cmd.abandon(Slot::Main, &self.inb[..in_len], &self.outb[..out_len], e));
            }
            if self.hal.now_ns().wrapping_sub(start) >= self.cmd.timeouts.cmd_ns {
                let e = self.cmd.timed_out(Slot::Main);
                break Err(self.cmd.abandon(Slot::Main, &self.inb[..in_len], &self.outb[..out_len], e));
            }
            self.hal.relax();
        };
        self.stats.commands = self.cmd.issued;
        r
    }

    /// Start a command: clear the input and set opcode/op_mod.
    pub(crate) fn begin(&mut self, opcode: u16, op_mod: u16, in_len: usize) {
        clear(&mut self.inb[..in_len]);
        set(&mut self.inb, mbox_in::opcode, opcode as u64);
        set(&mut self.inb, mbox_in::op_mod, op_mod as u64);
    }

    /// A command whose input is the header plus `fields`, output 16 bytes.
    fn simple(&mut self, opcode: u16, op_mod: u16, in_len: usize, fields: &[(Field, u64)]) -> Result<(), Error> {
        self.begin(opcode, op_mod, in_len);
        for &(f, v) in fields {
            set(&mut self.inb, f, v);
        }
        self.run(in_len, mbox_out::LAYOUT.size)
    }

    pub(crate) fn out(&self, f: Field) -> u64 {
        get(&self.outb, f)
    }

    // ---------------------------------------------------------------- bring-up steps

    // ---------------------------------------------------------------- accessors

    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }
    pub fn ipv4(&self) -> [u8; 4] {
        self.cfg.ipv4
    }
    pub fn pd(&self) -> Option<Pdn> {
        self.pd
    }
    pub fn transport_domain(&self) -> Option<u32> {
        self.td
    }
    pub fn uar(&self) -> Option<u32> {
        self.uar
    }
    pub fn reserved_lkey(&self) -> Lkey {
        self.resd_lkey
    }
    /// Link state from the last port-change event or [`Mlx5::query_link`]; `None` until
    /// one of them told.
    pub fn link_up(&self) -> Option<bool> {
        self.port_up
    }

    /// Ask the firmware for the operational state of our vNIC vport (QUERY_VPORT_STATE,
    /// op_mod 0): true = up. Firmware need not send a port-change event at boot, so this is
    /// how the state is learnt then; the answer also updates [`Mlx5::link_up`].
    pub fn query_link(&mut self) -> Result<bool, Error> {
        self.begin(op::QUERY_VPORT_STATE, VPORT_STATE_OP_MOD_VNIC, query_vport_state_in::LAYOUT.size);
        self.run(query_vport_state_in::LAYOUT.size, query_vport_state_out::LAYOUT.size)?;
        let up = self.out(query_vport_state_out::state) == VPORT_STATE_UP;
        self.port_up = Some(up);
        Ok(up)
    }
    pub fn roce_enabled(&self) -> bool {
        self.roce_enabled
    }
    pub fn stats(&self) -> Stats {
        self.stats
    }
    /// Command-interface failures so far (refused by firmware, delivery errors, abandoned).
    pub fn command_errors(&self) -> crate::cmd::CmdErrors {
        self.cmd.errors
    }
    /// Pages the firmware holds now.
    pub fn pages_held(&self) -> usize {
        self.pages.len()
    }
    /// Rebuild the CQN/QPN → position maps after `cqs` or `qps` changed (slow path).
    pub(crate) fn reindex(&mut self) {
        self.cq_pos.rebuild(self.cqs.iter().map(|c| c.cqn.0));
        self.qp_pos.rebuild(self.qps.iter().map(|q| q.qpn.0));
    }

    /// Position of QP `qpn` in `qps`: by its number's low bits, a search only on a collision.
    #[inline]
    pub(crate) fn qp_index(&self, qpn: Qpn) -> Result<usize, Error> {
        self.qp_pos.find(&self.qps, qpn.0, |q| q.qpn.0).ok_or(Error::NoSuchObject { kind: "QP", id: qpn.0 })
    }

    /// Position of CQ `cqn` in `cqs` (as [`qp_index`](Self::qp_index)).
    #[inline]
    pub(crate) fn cq_index(&self, cqn: Cqn) -> Result<usize, Error> {
        let i = self.cq_pos.candidate(cqn.0);
        if self.cqs.get(i).is_some_and(|c| c.cqn == cqn) {
            return Ok(i);
        }
        self.cqs.iter().position(|c| c.cqn == cqn).ok_or(Error::NoSuchObject { kind: "CQ", id: cqn.0 })
    }

    /// CQs live on the adapter, those of queue groups included.
    pub fn live_cqs(&self) -> usize {
        self.cqs.len() + self.live_groups()
    }
    /// QPs live on the adapter, those in queue groups included.
    pub fn live_qps(&self) -> usize {
        self.qps.len() + self.group_qps()
    }
    pub fn live_mkeys(&self) -> usize {
        self.mkeys.len()
    }
    pub fn hal(&self) -> &H {
        &self.hal
    }
    pub fn bar(&self) -> &M {
        &self.bar
    }
    /// Decode the health buffer now.
    pub fn health_report(&self) -> HealthReport {
        HealthReport::read(&self.bar)
    }
    /// When [`Mlx5::check_health`] next samples the health counter (`None`: not watched).
    pub fn next_health_sample(&self) -> Option<u64> {
        self.cmd.next_health_sample()
    }
    /// Check the health counter and syndrome once (call from the poll loop).
    pub fn check_health(&mut self) -> Result<(), Error> {
        self.cmd.check_health(&self.hal, &self.bar)
    }

}

/// The ts_format a QP/SQ/RQ context asks for, given the capability (mlx5_ifc
/// MLX5_*_TIMESTAMP_FORMAT_CAP_*): FREE_RUNNING (0) where that is all the part has, else
/// DEFAULT (1), which real-time-only parts accept (Linux `mlx5_get_qp_default_ts`, DPDK
/// `mlx5_ts_format_conv`).
pub fn ts_format(cap: u8) -> u64 {
    use mlx5_ifc::ts_format::{DEFAULT, FREE_RUNNING};
    if cap == 0 {
        FREE_RUNNING as u64
    } else {
        DEFAULT as u64
    }
}

/// Smallest `k` with `2^k >= n` (ring and atomic-depth sizes).
pub(crate) fn log2_ceil(n: u32) -> u8 {
    if n <= 1 {
        0
    } else {
        (32 - (n - 1).leading_zeros()) as u8
    }
}

/// RoCEv2 UDP source port from the QPN pair (flow-label hash as Linux does), in 0xC000..=0xFFFF.
pub fn rocev2_sport(lqpn: Qpn, rqpn: Qpn) -> u16 {
    let mut v = lqpn.0 as u64 * rqpn.0 as u64;
    v ^= v >> 20;
    v ^= v >> 40;
    rdma::cm_wire::flow_label_to_udp_sport((v & 0xf_ffff) as u32)
}
