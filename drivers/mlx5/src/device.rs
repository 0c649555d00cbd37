//! Bring-up in firmware order, the objects it creates (UAR, EQ, PD, TD, MKeys, CQs, QPs), teardown.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use crate::cmd::{op, CmdQueue, Slot, Timeouts, MAX_MSG};
use crate::pages::{pages_op, PAGE_MSG};
use crate::error::Error;
use crate::health::{self, FwVersion, HealthReport};
use crate::ifc::*;
use crate::layout::{get, set, set_bytes, Field};
use hal::{DmaRegion, Hal, Mmio, PhysAddr};
use rdma::{Access, Cqn, Lkey, Pdn, Qpn, RcConnectAttrs, Rkey};

const PAGE: usize = 4096;
/// MTT entries per CREATE_MKEY (0x110 + 8 * n <= MAX_MSG).
const MTT_PER_CMD: usize = (MAX_MSG - 0x110) / 8;

use mlx5_ifc::{cap_type, qp as qp_fact};
/// EQE event types, re-exported for [`AsyncEvent::event_type`] users.
pub use mlx5_ifc::event;

/// The well-known QP1 Q_Key.
pub const GSI_QKEY: u32 = 0x8001_0000;
/// UAR page offsets: EQ doorbell without arm (mlx5 eq.c / vfio).
const UAR_EQ_DB_NOARM: usize = 0x48;
/// CQ doorbell record arm word for a CQ used in polling mode: arm sequence number 2 in bits
/// 31:28 (Linux `steering/dr_send.c` writes `2 << 28` "to avoid the HW running db-recovery on a
/// CQ used in polling mode").
pub const CQ_DB_POLLING_ARM: u32 = 2 << 28;
/// QUERY_VPORT_STATE op_mod for the function's own vNIC vport and the `state` value for up
/// (Linux mlx5_ifc.h MLX5_VPORT_STATE_OP_MOD_VNIC_VPORT, vport.h MLX5_VPORT_STATE_UP).
const VPORT_STATE_OP_MOD_VNIC: u16 = 0;
const VPORT_STATE_UP: u64 = 1;

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
    /// Send-queue doorbells (MMIO writes to the UAR) rung by the data path.
    pub sq_doorbells: u64,
    /// Send WQEs written (a doorbell may announce several).
    pub send_wqes: u64,
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

/// A completion queue: ring of 64-byte CQEs and its doorbell record.
pub struct Cq<D> {
    pub cqn: Cqn,
    pub buf: D,
    pub dbr: D,
    pub log_size: u8,
    /// Consumer counter (CQEs taken).
    pub ci: u32,
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

/// A queue pair: one buffer (RQ at 0, SQ after it) and a doorbell record.
pub struct Qp<D> {
    pub qpn: Qpn,
    pub kind: QpKind,
    pub buf: D,
    pub dbr: D,
    pub log_sq: u8,
    pub log_rq: u8,
    /// log2(RQ WQE bytes) - 4.
    pub log_rq_stride: u8,
    pub send_cq: Cqn,
    pub recv_cq: Cqn,
    pub state: QpState,
    /// SQ producer counter in WQEBBs (ctrl.wqe_index, DBR[1]).
    pub sq_pi: u16,
    /// SQ WQEBBs known completed (from CQE wqe_counter).
    pub sq_ci: u16,
    /// RQ producer / consumer counters in WQEs.
    pub rq_head: u16,
    pub rq_tail: u16,
    /// Per SQ WQEBB slot: work request of the WQE starting there.
    pub(crate) sq_slots: Vec<SqSlot>,
    /// Per RQ WQE slot: wr_id.
    pub(crate) rq_wrid: Vec<u64>,
    /// First 8 bytes (ctrl segment) of the newest WQE written by `post_send_deferred` and not
    /// yet announced by a doorbell; `None` when the device has seen every WQE.
    pub(crate) sq_unrung: Option<u64>,
    /// The next send WQE must carry a small fence (it follows a UMR).
    pub(crate) next_fence: bool,
}

/// What the driver remembers about a posted send WQE until it completes.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SqSlot {
    pub wr_id: u64,
    pub wqebbs: u8,
    pub opcode: u8,
}

impl<D: DmaRegion> Qp<D> {
    /// Byte offset of the SQ inside `buf`.
    pub fn sq_offset(&self) -> usize {
        (1usize << self.log_rq) << (self.log_rq_stride + 4)
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
    events: Vec<AsyncEvent>,
    mkey_variant: u8,
    /// Port state from the last PORT_CHANGE event (None: no event seen yet).
    port_up: Option<bool>,
    /// Raw Ethernet queues and steering, once enabled.
    pub(crate) raw: Option<crate::raw::RawEth<H::Dma>>,
    /// The port's MTUs (PMTU register, read at bring-up); path MTUs are clamped to `max`.
    pub port_mtu: crate::vport::PortMtu,
}

fn clear(b: &mut [u8]) {
    b.iter_mut().for_each(|x| *x = 0);
}

impl<H: Hal, M: Mmio> Mlx5<H, M> {
    /// Bring the adapter behind `bar` (BAR0) up to a state where CQs and QPs can be created:
    /// everything up to the PD and the reserved lkey, RoCE enabled and GID 0 set (no memory key). On failure everything that was
    /// created is undone (as far as the firmware still answers) and the error is returned.
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
            events: Vec::new(),
            mkey_variant: 0,
            port_up: None,
            raw: None,
            port_mtu: Default::default(),
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

    fn enable_hca(&mut self) -> Result<(), Error> {
        self.simple(op::ENABLE_HCA, 0, enable_hca_in::LAYOUT.size, &[(enable_hca_in::function_id, 0)])
    }

    fn set_issi(&mut self) -> Result<(), Error> {
        self.begin(op::QUERY_ISSI, 0, query_issi_in::LAYOUT.size);
        match self.run(query_issi_in::LAYOUT.size, query_issi_out::LAYOUT.size) {
            Ok(()) => {}
            // Firmware without ISSI support answers BAD_OP: it runs ISSI 0.
            Err(Error::Command { status: 0x2, .. }) => {
                self.issi = 0;
                return Ok(());
            }
            Err(e) => return Err(e),
        }
        let supported = self.out(query_issi_out::supported_issi_dw0);
        if supported & 0b10 != 0 {
            self.simple(op::SET_ISSI, 0, set_issi_in::LAYOUT.size, &[(set_issi_in::current_issi, 1)])?;
            self.issi = 1;
        } else if supported & 0b01 != 0 {
            self.issi = 0;
        } else {
            return Err(Error::Unsupported("ISSI 0 or 1"));
        }
        Ok(())
    }

    fn host_endianness(&mut self) -> Result<(), Error> {
        // Register data: 16 bytes, byte 0 `he` = 0 for a little-endian host.
        let len = access_register_in::LAYOUT.size + 16;
        self.begin(op::ACCESS_REG, 0, len);
        set(&mut self.inb, access_register_in::register_id, mlx5_ifc::reg::HOST_ENDIANNESS as u64);
        set(&mut self.inb, access_register_in::argument, 0);
        self.run(len, access_register_out::LAYOUT.size + 16)
    }

    fn query_cap(&mut self, ty: u16, current: bool) -> Result<(), Error> {
        self.begin(op::QUERY_HCA_CAP, (ty << 1) | current as u16, query_hca_cap_in::LAYOUT.size);
        self.run(query_hca_cap_in::LAYOUT.size, query_hca_cap_out::LAYOUT.size)
    }

    /// The capability block of the last QUERY_HCA_CAP, at `f` (a cmd_hca_cap / roce_cap field).
    fn cap(&self, f: Field) -> u64 {
        get(&self.outb, f.at(query_hca_cap_out::capability))
    }

    /// Copy the queried capability block into a SET_HCA_CAP input (op_mod = type << 1).
    fn begin_set_cap(&mut self, ty: u16) {
        let cap = query_hca_cap_out::capability;
        let (from, len) = (cap.byte(), cap.bytes());
        let mut block = [0u8; 0x1000];
        block.copy_from_slice(&self.outb[from..from + len]);
        self.begin(op::SET_HCA_CAP, ty << 1, set_hca_cap_in::LAYOUT.size);
        let to = set_hca_cap_in::capability.byte();
        self.inb[to..to + len].copy_from_slice(&block);
    }

    fn set_cap_field(&mut self, f: Field, v: u64) {
        set(&mut self.inb, f.at(set_hca_cap_in::capability), v);
    }

    fn handle_caps(&mut self) -> Result<(), Error> {
        // General: start from current values; no command checksums, 4 KiB UAR pages.
        self.query_cap(cap_type::GENERAL, true)?;
        self.begin_set_cap(cap_type::GENERAL);
        self.set_cap_field(cmd_hca_cap::cmdif_checksum, 0);
        self.set_cap_field(cmd_hca_cap::log_uar_page_sz, 0);
        self.run(set_hca_cap_in::LAYOUT.size, set_hca_cap_out::LAYOUT.size)?;
        self.query_cap(cap_type::GENERAL, true)?;
        let c = |s: &Self, f| s.cap(f) as u8;
        self.caps = Caps {
            log_max_qp: c(self, cmd_hca_cap::log_max_qp),
            log_max_qp_sz: c(self, cmd_hca_cap::log_max_qp_sz),
            log_max_cq: c(self, cmd_hca_cap::log_max_cq),
            log_max_cq_sz: c(self, cmd_hca_cap::log_max_cq_sz),
            log_max_eq: c(self, cmd_hca_cap::log_max_eq),
            log_max_eq_sz: c(self, cmd_hca_cap::log_max_eq_sz),
            log_max_mkey: c(self, cmd_hca_cap::log_max_mkey),
            log_max_pd: c(self, cmd_hca_cap::log_max_pd),
            log_max_msg: c(self, cmd_hca_cap::log_max_msg),
            log_max_ra_req_qp: c(self, cmd_hca_cap::log_max_ra_req_qp),
            log_max_ra_res_qp: c(self, cmd_hca_cap::log_max_ra_res_qp),
            port_type: c(self, cmd_hca_cap::port_type),
            num_ports: c(self, cmd_hca_cap::num_ports),
            roce: self.cap(cmd_hca_cap::roce) != 0,
            rc: self.cap(cmd_hca_cap::rc) != 0,
            ud: self.cap(cmd_hca_cap::ud) != 0,
            gid_table_size: self.cap(cmd_hca_cap::gid_table_size) as u16,
            cqe_version: c(self, cmd_hca_cap::cqe_version),
            sq_ts_format: c(self, cmd_hca_cap::sq_ts_format),
            rq_ts_format: c(self, cmd_hca_cap::rq_ts_format),
            force_teardown: self.cap(cmd_hca_cap::force_teardown) != 0,
            fast_teardown: self.cap(cmd_hca_cap::fast_teardown) != 0,
            ..Caps::default()
        };
        if !self.caps.rc {
            return Err(Error::Unsupported("RC transport"));
        }
        if self.caps.roce {
            // RoCE: honour the address path's UDP source port when the adapter allows it.
            self.query_cap(cap_type::ROCE, false)?;
            let max_sport = self.cap(roce_cap::sw_r_roce_src_udp_port) != 0;
            self.query_cap(cap_type::ROCE, true)?;
            if max_sport && self.cap(roce_cap::sw_r_roce_src_udp_port) == 0 {
                self.begin_set_cap(cap_type::ROCE);
                self.set_cap_field(roce_cap::sw_r_roce_src_udp_port, 1);
                self.run(set_hca_cap_in::LAYOUT.size, set_hca_cap_out::LAYOUT.size)?;
                self.query_cap(cap_type::ROCE, true)?;
            }
            self.caps.roce_version = self.cap(roce_cap::roce_version) as u8;
            self.caps.qp_ts_format = self.cap(roce_cap::qp_ts_format) as u8;
            self.caps.roce_address_table_size = self.cap(roce_cap::roce_address_table_size) as u16;
            self.caps.sw_r_roce_src_udp_port = self.cap(roce_cap::sw_r_roce_src_udp_port) != 0;
            self.caps.r_roce_min_src_udp_port = self.cap(roce_cap::r_roce_min_src_udp_port) as u16;
            self.caps.r_roce_max_src_udp_port = self.cap(roce_cap::r_roce_max_src_udp_port) as u16;
        }
        Ok(())
    }

    fn alloc_uar(&mut self) -> Result<(), Error> {
        self.simple(op::ALLOC_UAR, 0, alloc_uar_in::LAYOUT.size, &[])?;
        let uar = self.out(alloc_uar_out::uar) as u32;
        if (uar as usize + 1) * PAGE > self.bar.size() {
            self.uar = Some(uar); // so teardown frees it
            return Err(Error::BadOutput { opcode: op::ALLOC_UAR, what: "UAR index outside BAR0" });
        }
        self.uar = Some(uar);
        Ok(())
    }

    pub(crate) fn uar_base(&self) -> usize {
        self.uar.unwrap_or(0) as usize * PAGE
    }

    fn create_eq(&mut self) -> Result<(), Error> {
        let want = (1u32 << self.cfg.eq_log_size.min(20)).saturating_add(self.cfg.eq_spare_entries.min(1 << 20));
        let log = (32 - (want - 1).leading_zeros()) as u8;
        if log > self.caps.log_max_eq_sz {
            return Err(Error::InvalidArgument("EQ larger than log_max_eq_sz"));
        }
        let bytes = (1usize << log) * eqe::LAYOUT.size;
        let npages = bytes.div_ceil(PAGE);
        if create_eq_in::pas.byte() + 8 * npages > MAX_MSG {
            return Err(Error::InvalidArgument("EQ too large"));
        }
        let buf = self.hal.dma_alloc(npages * PAGE, PAGE)?;
        // Every EQE starts owned by hardware (owner = 1).
        for i in 0..(1usize << log) {
            buf.write_u8(i * eqe::LAYOUT.size + eqe::owner.byte(), 1);
        }
        let in_len = create_eq_in::pas.byte() + 8 * npages;
        self.begin(op::CREATE_EQ, 0, in_len);
        let ctx = create_eq_in::eq_context_entry;
        set(&mut self.inb, eqc::log_eq_size.at(ctx), log as u64);
        set(&mut self.inb, eqc::uar_page.at(ctx), self.uar.unwrap_or(0) as u64);
        set(&mut self.inb, eqc::log_page_size.at(ctx), 0);
        set(&mut self.inb, eqc::intr.at(ctx), 0);
        let mask: u64 = [
            event::CQ_ERROR,
            event::WQ_CATAS_ERROR,
            event::PATH_MIG_FAILED,
            event::PORT_CHANGE,
            event::PAGE_REQUEST,
            event::WQ_INVAL_REQ_ERROR,
            event::WQ_ACCESS_ERROR,
        ]
        .iter()
        .fold(0, |m, &t| m | (1u64 << t));
        // event_bitmask word 0 (types 0..63) is the first 64 bits of the field.
        let word0 = Field { off: create_eq_in::event_bitmask.off, width: 64 };
        set(&mut self.inb, word0, mask);
        for i in 0..npages {
            set(&mut self.inb, create_eq_in::pas.index(i as u32), buf.paddr() + (i * PAGE) as u64);
        }
        self.run(in_len, create_eq_out::LAYOUT.size)?;
        let eqn = self.out(create_eq_out::eq_number) as u8;
        self.eq = Some(Eq { eqn, buf, log_size: log, ci: 0 });
        self.eq_doorbell();
        Ok(())
    }

    fn eq_doorbell(&self) {
        if let Some(eq) = &self.eq {
            let v = ((eq.eqn as u32) << 24) | (eq.ci & 0x00ff_ffff);
            self.bar.write32_be(self.uar_base() + UAR_EQ_DB_NOARM, v);
        }
    }

    /// Drain the EQ: answer page requests, record port changes and error events.
    /// Call from the app's poll loop; bring-up calls it too.
    pub fn poll_eq(&mut self) -> Result<usize, Error> {
        let mut handled = 0;
        loop {
            let Some(eq) = self.eq.as_mut() else { return Ok(handled) };
            let n = 1u32 << eq.log_size;
            let at = ((eq.ci & (n - 1)) as usize) * eqe::LAYOUT.size;
            // Ownership first, the rest of the EQE only once it is ours: the adapter writes the
            // body before the owner byte, so a copy of the whole entry taken while it writes
            // can hold the new owner with the old body (Linux `next_eqe_sw` + dma_rmb).
            let own = eqe::owner.byte();
            let mut e = [0u8; 64];
            eq.buf.read(at + own, &mut e[own..own + 1]);
            let sw_phase = ((eq.ci >> eq.log_size) & 1) as u64;
            if get(&e, eqe::owner) & 1 != sw_phase {
                break;
            }
            core::sync::atomic::fence(core::sync::atomic::Ordering::Acquire);
            eq.buf.read(at, &mut e[..own]);
            eq.ci = eq.ci.wrapping_add(1);
            handled += 1;
            self.stats.eqes += 1;
            if let Err(err) = self.handle_eqe(&e) {
                // The EQE is consumed even when answering it failed: tell the adapter.
                self.eq_doorbell();
                return Err(err);
            }
        }
        if handled > 0 {
            self.eq_doorbell();
        }
        Ok(handled)
    }

    fn handle_eqe(&mut self, e: &[u8; 64]) -> Result<(), Error> {
        let ty = get(e, eqe::r#type) as u8;
        let sub = get(e, eqe::sub_type) as u8;
        match ty {
            event::PAGE_REQUEST => {
                self.stats.page_request_events += 1;
                let n = get(e, eqe_page_req::num_pages.at(eqe::page_req)) as u32 as i32;
                let func = get(e, eqe_page_req::function_id.at(eqe::page_req)) as u16;
                self.page_request(func, n)?;
            }
            event::COMPLETION => {
                // CQs are polled; a completion event (e.g. from doorbell recovery) needs no
                // action beyond being consumed.
                self.stats.completion_events += 1;
            }
            event::PORT_CHANGE => {
                self.stats.port_change_events += 1;
                let port = get(e, eqe_port_state::port.at(eqe::port_state));
                // sub_type: 1 = port down, 4 = port active (mlx5 port-change subtypes).
                match sub {
                    1 => self.port_up = Some(false),
                    4 => self.port_up = Some(true),
                    _ => {}
                }
                log::info!("mlx5: port {port} change, sub_type {sub}");
            }
            event::CQ_ERROR => {
                self.stats.error_events += 1;
                self.push_event(AsyncEvent {
                    event_type: ty,
                    sub_type: sub,
                    object: get(e, eqe_cq_err::cqn.at(eqe::cq_err)) as u32,
                    syndrome: get(e, eqe_cq_err::syndrome.at(eqe::cq_err)) as u8,
                });
            }
            _ => {
                self.stats.error_events += 1;
                self.push_event(AsyncEvent {
                    event_type: ty,
                    sub_type: sub,
                    object: get(e, eqe_qp_srq::qp_srq_n.at(eqe::qp_srq)) as u32,
                    syndrome: 0,
                });
            }
        }
        Ok(())
    }

    fn push_event(&mut self, ev: AsyncEvent) {
        log::warn!("mlx5: async event 0x{:x} on 0x{:x}", ev.event_type, ev.object);
        if self.events.len() >= 64 {
            self.events.remove(0);
        }
        self.events.push(ev);
    }

    /// Oldest unread asynchronous error event.
    pub fn take_event(&mut self) -> Option<AsyncEvent> {
        if self.events.is_empty() {
            None
        } else {
            Some(self.events.remove(0))
        }
    }

    fn alloc_pd(&mut self) -> Result<(), Error> {
        self.simple(op::ALLOC_PD, 0, alloc_pd_in::LAYOUT.size, &[])?;
        self.pd = Some(Pdn(self.out(alloc_pd_out::pd) as u32));
        Ok(())
    }

    fn alloc_td(&mut self) -> Result<(), Error> {
        self.simple(op::ALLOC_TRANSPORT_DOMAIN, 0, alloc_transport_domain_in::LAYOUT.size, &[])?;
        self.td = Some(self.out(alloc_transport_domain_out::transport_domain) as u32);
        Ok(())
    }

    fn query_special_contexts(&mut self) -> Result<(), Error> {
        self.begin(op::QUERY_SPECIAL_CONTEXTS, 0, query_special_contexts_in::LAYOUT.size);
        self.run(query_special_contexts_in::LAYOUT.size, query_special_contexts_out::LAYOUT.size)?;
        self.resd_lkey = Lkey(self.out(query_special_contexts_out::resd_lkey) as u32);
        Ok(())
    }

    fn query_mac(&mut self) -> Result<(), Error> {
        self.begin(op::QUERY_NIC_VPORT_CONTEXT, 0, query_nic_vport_context_in::LAYOUT.size);
        self.run(query_nic_vport_context_in::LAYOUT.size, query_nic_vport_context_out::LAYOUT.size)?;
        let a = query_nic_vport_context_out::nic_vport_context;
        let p = nic_vport_context::permanent_address.at(a);
        let hi = self.out(mac_address_layout::mac_addr_47_32.at(p)) as u16;
        let lo = self.out(mac_address_layout::mac_addr_31_0.at(p)) as u32;
        self.mac[..2].copy_from_slice(&hi.to_be_bytes());
        self.mac[2..].copy_from_slice(&lo.to_be_bytes());
        Ok(())
    }

    fn enable_roce(&mut self) -> Result<(), Error> {
        let len = modify_nic_vport_context_in::LAYOUT.size;
        self.begin(op::MODIFY_NIC_VPORT_CONTEXT, 0, len);
        let fs = modify_nic_vport_context_in::field_select;
        set(&mut self.inb, modify_nic_vport_field_select::roce_en.at(fs), 1);
        let ctx = modify_nic_vport_context_in::nic_vport_context;
        set(&mut self.inb, nic_vport_context::roce_en.at(ctx), 1);
        self.run(len, modify_nic_vport_context_out::LAYOUT.size)?;
        self.roce_enabled = true;
        Ok(())
    }

    fn set_roce_gid(&mut self, index: u16, gid: Option<[u8; 16]>) -> Result<(), Error> {
        let len = set_roce_address_in::LAYOUT.size;
        self.begin(op::SET_ROCE_ADDRESS, 0, len);
        set(&mut self.inb, set_roce_address_in::roce_address_index, index as u64);
        if let Some(gid) = gid {
            let a = set_roce_address_in::roce_address;
            set_bytes(&mut self.inb, roce_addr_layout::source_l3_address.at(a), &gid);
            let mac = self.mac;
            set(&mut self.inb, roce_addr_layout::source_mac_47_32.at(a), u16::from_be_bytes([mac[0], mac[1]]) as u64);
            set(
                &mut self.inb,
                roce_addr_layout::source_mac_31_0.at(a),
                u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]]) as u64,
            );
            set(&mut self.inb, roce_addr_layout::roce_l3_type.at(a), 0); // IPv4
            set(&mut self.inb, roce_addr_layout::roce_version.at(a), 2); // RoCEv2
        }
        self.run(len, set_roce_address_out::LAYOUT.size)
    }

    /// Program GID `index` with `ip` as an IPv4-mapped IPv6 address, RoCEv2.
    pub fn set_roce_address(&mut self, index: u16, ip: [u8; 4]) -> Result<(), Error> {
        self.set_roce_gid(index, Some(ipv4_gid(ip)))
    }

    // ---------------------------------------------------------------- memory keys

    fn next_variant(&mut self) -> u8 {
        self.mkey_variant = self.mkey_variant.wrapping_add(1);
        self.mkey_variant
    }

    fn mkc_access(&mut self, base: Field, access: Access) {
        set(&mut self.inb, mkc::lr.at(base), 1);
        set(&mut self.inb, mkc::lw.at(base), access.local_write as u64);
        set(&mut self.inb, mkc::rr.at(base), access.remote_read as u64);
        set(&mut self.inb, mkc::rw.at(base), access.remote_write as u64);
    }

    /// Register `len` bytes of physically contiguous memory at `addr` in MTT mode (4 KiB
    /// translation entries, addressed by physical address). For per-I/O keys and bounded rkeys.
    pub fn reg_mr(&mut self, addr: PhysAddr, len: u64, access: Access) -> Result<Mkey, Error> {
        let pd = self.pd.ok_or(Error::InvalidArgument("no PD"))?;
        if len == 0 {
            return Err(Error::InvalidArgument("empty registration"));
        }
        let first = addr & !(PAGE as u64 - 1);
        let end = addr.checked_add(len).ok_or(Error::InvalidArgument("registration wraps"))?;
        let npages = (end - first).div_ceil(PAGE as u64) as usize;
        if npages > MTT_PER_CMD {
            return Err(Error::InvalidArgument("registration larger than one command's MTT list"));
        }
        let octwords = npages.div_ceil(2);
        let in_len = create_mkey_in::klm_pas_mtt.byte() + 16 * octwords;
        let variant = self.next_variant();
        self.begin(op::CREATE_MKEY, 0, in_len);
        let m = create_mkey_in::memory_key_mkey_entry;
        set(&mut self.inb, create_mkey_in::pg_access, 1);
        set(&mut self.inb, mkc::access_mode_1_0.at(m), 1); // MTT
        self.mkc_access(m, access);
        // Keys handed to a peer may be invalidated by it (SEND WITH INVALIDATE).
        set(&mut self.inb, mkc::en_rinval.at(m), (access.remote_read || access.remote_write) as u64);
        set(&mut self.inb, mkc::qpn.at(m), 0xff_ffff);
        set(&mut self.inb, mkc::mkey_7_0.at(m), variant as u64);
        set(&mut self.inb, mkc::pd.at(m), pd.0 as u64);
        set(&mut self.inb, mkc::start_addr.at(m), addr);
        set(&mut self.inb, mkc::len.at(m), len);
        set(&mut self.inb, mkc::log_page_size.at(m), 12);
        set(&mut self.inb, mkc::translations_octword_size.at(m), octwords as u64);
        set(&mut self.inb, create_mkey_in::translations_octword_actual_size, octwords as u64);
        let mtt = Field { off: create_mkey_in::klm_pas_mtt.off, width: 64 };
        for i in 0..npages {
            // mlx5_mtt: page address | read (bit 0) | write (bit 1) = present.
            set(&mut self.inb, mtt.index(i as u32), (first + (i * PAGE) as u64) | 0b11);
        }
        self.run(in_len, create_mkey_out::LAYOUT.size)?;
        let index = self.out(create_mkey_out::mkey_index) as u32;
        let key = (index << 8) | variant as u32;
        let mk = Mkey { index, lkey: Lkey(key), rkey: Rkey(key), start: addr, len };
        self.mkeys.push(mk);
        Ok(mk)
    }

    /// A free MTT key for fast registration (`SendOp::RegMr` through a send queue, see
    /// [`crate::fastreg`]): `umr_en`, created free (it grants nothing until a UMR registers it),
    /// room for the two translation entries every registration writes. `max_len` is checked
    /// against what one registration can map.
    pub fn alloc_fast_mr(&mut self, max_len: u64) -> Result<Mkey, Error> {
        let pd = self.pd.ok_or(Error::InvalidArgument("no PD"))?;
        if max_len == 0 || max_len > crate::fastreg::MAX_LEN {
            return Err(Error::InvalidArgument("fast registration length out of range"));
        }
        // The translation list is written by each registration; the mailbox carries it empty.
        let in_len = create_mkey_in::klm_pas_mtt.byte() + 16 * crate::fastreg::XLT_OCTOWORDS as usize;
        let variant = self.next_variant();
        self.begin(op::CREATE_MKEY, 0, in_len);
        let m = create_mkey_in::memory_key_mkey_entry;
        set(&mut self.inb, mkc::free.at(m), 1);
        set(&mut self.inb, mkc::umr_en.at(m), 1);
        set(&mut self.inb, mkc::access_mode_1_0.at(m), 1); // MTT
        set(&mut self.inb, mkc::qpn.at(m), 0xff_ffff);
        set(&mut self.inb, mkc::mkey_7_0.at(m), variant as u64);
        set(&mut self.inb, mkc::pd.at(m), pd.0 as u64);
        set(&mut self.inb, mkc::log_page_size.at(m), 12);
        set(&mut self.inb, mkc::translations_octword_size.at(m), crate::fastreg::XLT_OCTOWORDS);
        self.run(in_len, create_mkey_out::LAYOUT.size)?;
        let index = self.out(create_mkey_out::mkey_index) as u32;
        let key = (index << 8) | variant as u32;
        let mk = Mkey { index, lkey: Lkey(key), rkey: Rkey(key), start: 0, len: 0 };
        self.mkeys.push(mk);
        Ok(mk)
    }

    /// Destroy a registration (`reg_mr` or `alloc_fast_mr`) by its key, any variant.
    pub fn dereg_mr(&mut self, lkey: Lkey) -> Result<(), Error> {
        let i = self
            .mkeys
            .iter()
            .position(|m| m.index == lkey.0 >> 8)
            .ok_or(Error::NoSuchObject { kind: "mkey", id: lkey.0 })?;
        let index = self.mkeys[i].index;
        self.simple(op::DESTROY_MKEY, 0, destroy_mkey_in::LAYOUT.size, &[(destroy_mkey_in::mkey_index, index as u64)])?;
        self.mkeys.remove(i);
        Ok(())
    }

    // ---------------------------------------------------------------- CQs

    /// Create a CQ of 2^log_size 64-byte CQEs reporting to the driver's EQ.
    pub fn create_cq(&mut self, log_size: u8) -> Result<Cqn, Error> {
        if log_size > self.caps.log_max_cq_sz || log_size > 16 {
            return Err(Error::InvalidArgument("CQ size"));
        }
        let eqn = self.eq.as_ref().map(|e| e.eqn).ok_or(Error::InvalidArgument("no EQ"))?;
        let bytes = (1usize << log_size) * cqe64::LAYOUT.size;
        let npages = bytes.div_ceil(PAGE);
        let in_len = create_cq_in::pas.byte() + 8 * npages;
        if in_len > MAX_MSG {
            return Err(Error::InvalidArgument("CQ too large"));
        }
        let buf = self.hal.dma_alloc(npages * PAGE, PAGE)?;
        let dbr = self.hal.dma_alloc(64, 64)?;
        for i in 0..(1usize << log_size) {
            // opcode INVALID (0xF) in op_own, owner 0.
            buf.write_u8(i * cqe64::LAYOUT.size + cqe64::op_own.byte(), 0xf0);
        }
        self.begin(op::CREATE_CQ, 0, in_len);
        let c = create_cq_in::cq_context;
        set(&mut self.inb, cqc::cqe_sz.at(c), 0);
        set(&mut self.inb, cqc::log_cq_size.at(c), log_size as u64);
        set(&mut self.inb, cqc::uar_page.at(c), self.uar.unwrap_or(0) as u64);
        set(&mut self.inb, cqc::c_eqn.at(c), eqn as u64);
        set(&mut self.inb, cqc::log_page_size.at(c), 0);
        set(&mut self.inb, cqc::dbr_addr.at(c), dbr.paddr());
        for i in 0..npages {
            set(&mut self.inb, create_cq_in::pas.index(i as u32), buf.paddr() + (i * PAGE) as u64);
        }
        // Doorbell record: set_ci = 0; arm word = sequence 2, no command: "polling mode", so the
        // adapter's doorbell recovery leaves the CQ alone (Linux dr_send.c dr_create_cq).
        dbr.write_be32(0, 0);
        dbr.write_be32(4, CQ_DB_POLLING_ARM);
        self.run(in_len, create_cq_out::LAYOUT.size)?;
        let cqn = Cqn(self.out(create_cq_out::cqn) as u32);
        self.cqs.push(Cq { cqn, buf, dbr, log_size, ci: 0 });
        Ok(cqn)
    }

    pub fn destroy_cq(&mut self, cqn: Cqn) -> Result<(), Error> {
        let i = self.cqs.iter().position(|c| c.cqn == cqn).ok_or(Error::NoSuchObject { kind: "CQ", id: cqn.0 })?;
        if self.qps.iter().any(|q| q.send_cq == cqn || q.recv_cq == cqn) {
            return Err(Error::InvalidArgument("CQ still used by a QP"));
        }
        self.simple(op::DESTROY_CQ, 0, destroy_cq_in::LAYOUT.size, &[(destroy_cq_in::cqn, cqn.0 as u64)])?;
        self.cqs.remove(i);
        Ok(())
    }

    pub fn cq(&self, cqn: Cqn) -> Option<&Cq<H::Dma>> {
        self.cqs.iter().find(|c| c.cqn == cqn)
    }

    // ---------------------------------------------------------------- QPs

    /// Create a QP in RESET with 2^log_sq send WQEBBs and 2^log_rq receive WQEs of
    /// 2^(log_rq_stride+4) bytes.
    pub fn create_qp(
        &mut self,
        kind: QpKind,
        send_cq: Cqn,
        recv_cq: Cqn,
        log_sq: u8,
        log_rq: u8,
        log_rq_stride: u8,
    ) -> Result<Qpn, Error> {
        let pd = self.pd.ok_or(Error::InvalidArgument("no PD"))?;
        if self.cq(send_cq).is_none() {
            return Err(Error::NoSuchObject { kind: "CQ", id: send_cq.0 });
        }
        if self.cq(recv_cq).is_none() {
            return Err(Error::NoSuchObject { kind: "CQ", id: recv_cq.0 });
        }
        if log_sq > 15 || log_rq > 15 || log_rq_stride > 7 || log_sq > self.caps.log_max_qp_sz || log_rq > self.caps.log_max_qp_sz {
            return Err(Error::InvalidArgument("QP size"));
        }
        if kind == QpKind::Gsi && self.qps.iter().any(|q| q.kind == QpKind::Gsi) {
            return Err(Error::InvalidArgument("GSI QP exists"));
        }
        // The SQ starts right after the RQ in the buffer and must start on a WQEBB (64 B):
        // like rdma-core (mlx5 verbs.c: RQ size at least MLX5_SEND_WQE_BB), grow a smaller RQ.
        let mut log_rq = log_rq;
        while ((1usize << log_rq) << (log_rq_stride + 4)) < 64 {
            log_rq += 1;
        }
        let rq_bytes = (1usize << log_rq) << (log_rq_stride + 4);
        let sq_bytes = (1usize << log_sq) * 64;
        let npages = (rq_bytes + sq_bytes).div_ceil(PAGE);
        let in_len = create_qp_in::pas.byte() + 8 * npages;
        if in_len > MAX_MSG {
            return Err(Error::InvalidArgument("QP too large"));
        }
        let buf = self.hal.dma_alloc(npages * PAGE, PAGE)?;
        let dbr = self.hal.dma_alloc(64, 64)?;
        self.begin(op::CREATE_QP, 0, in_len);
        let q = create_qp_in::qpc;
        let s = match kind {
            QpKind::Rc => qp_fact::ST_RC as u64,
            QpKind::Gsi => qp_fact::ST_QP1 as u64,
        };
        set(&mut self.inb, qpc::st.at(q), s);
        set(&mut self.inb, qpc::pm_state.at(q), 3);
        set(&mut self.inb, qpc::pd.at(q), pd.0 as u64);
        set(&mut self.inb, qpc::uar_page.at(q), self.uar.unwrap_or(0) as u64);
        set(&mut self.inb, qpc::log_page_size.at(q), 0);
        set(&mut self.inb, qpc::rlky.at(q), 1);
        set(&mut self.inb, qpc::fre.at(q), 1);
        set(&mut self.inb, qpc::log_rq_size.at(q), log_rq as u64);
        set(&mut self.inb, qpc::log_rq_stride.at(q), log_rq_stride as u64);
        set(&mut self.inb, qpc::log_sq_size.at(q), log_sq as u64);
        set(&mut self.inb, qpc::rq_type.at(q), 0);
        set(&mut self.inb, qpc::cqn_snd.at(q), send_cq.0 as u64);
        set(&mut self.inb, qpc::cqn_rcv.at(q), recv_cq.0 as u64);
        set(&mut self.inb, qpc::user_index.at(q), 0xff_ffff);
        set(&mut self.inb, qpc::ts_format.at(q), ts_format(self.caps.qp_ts_format));
        set(&mut self.inb, qpc::dbr_addr.at(q), dbr.paddr());
        for i in 0..npages {
            set(&mut self.inb, create_qp_in::pas.index(i as u32), buf.paddr() + (i * PAGE) as u64);
        }
        self.run(in_len, create_qp_out::LAYOUT.size)?;
        let qpn = Qpn(self.out(create_qp_out::qpn) as u32);
        self.qps.push(Qp {
            qpn,
            kind,
            buf,
            dbr,
            log_sq,
            log_rq,
            log_rq_stride,
            send_cq,
            recv_cq,
            state: QpState::Reset,
            sq_pi: 0,
            sq_ci: 0,
            rq_head: 0,
            rq_tail: 0,
            sq_slots: alloc::vec![SqSlot::default(); 1 << log_sq],
            rq_wrid: alloc::vec![0; 1 << log_rq],
            sq_unrung: None,
            next_fence: false,
        });
        Ok(qpn)
    }

    pub fn qp(&self, qpn: Qpn) -> Option<&Qp<H::Dma>> {
        self.qps.iter().find(|q| q.qpn == qpn)
    }

    fn qp_index(&self, qpn: Qpn) -> Result<usize, Error> {
        self.qps.iter().position(|q| q.qpn == qpn).ok_or(Error::NoSuchObject { kind: "QP", id: qpn.0 })
    }

    /// Start a modify command whose input is `*_qp_in` with a qpc at 0x18 (RST2INIT, INIT2RTR, RTR2RTS).
    fn begin_modify(&mut self, opcode: u16, qpn: Qpn) -> usize {
        let len = rst2init_qp_in::LAYOUT.size;
        self.begin(opcode, 0, len);
        set(&mut self.inb, rst2init_qp_in::qpn, qpn.0 as u64);
        set(&mut self.inb, rst2init_qp_in::opt_param_mask, 0);
        len
    }

    /// RESET → INIT.
    pub fn qp_rst2init(&mut self, qpn: Qpn, access: Access) -> Result<(), Error> {
        let i = self.qp_index(qpn)?;
        let (kind, scq, rcq) = (self.qps[i].kind, self.qps[i].send_cq, self.qps[i].recv_cq);
        let dbr = self.qps[i].dbr.paddr();
        let pd = self.pd.map(|p| p.0).unwrap_or(0);
        let len = self.begin_modify(op::RST2INIT_QP, qpn);
        let q = rst2init_qp_in::qpc;
        let path = qpc::primary_address_path.at(q);
        set(&mut self.inb, qpc::st.at(q), if kind == QpKind::Gsi { qp_fact::ST_QP1 } else { qp_fact::ST_RC } as u64);
        set(&mut self.inb, qpc::pm_state.at(q), 3);
        set(&mut self.inb, qpc::pd.at(q), pd as u64);
        set(&mut self.inb, qpc::cqn_snd.at(q), scq.0 as u64);
        set(&mut self.inb, qpc::cqn_rcv.at(q), rcq.0 as u64);
        set(&mut self.inb, qpc::rlky.at(q), 1);
        set(&mut self.inb, qpc::dbr_addr.at(q), dbr);
        set(&mut self.inb, ads::pkey_index.at(path), 0);
        set(&mut self.inb, ads::vhca_port_num.at(path), 1);
        match kind {
            QpKind::Gsi => set(&mut self.inb, qpc::q_key.at(q), GSI_QKEY as u64),
            QpKind::Rc => {
                set(&mut self.inb, qpc::rre.at(q), access.remote_read as u64);
                set(&mut self.inb, qpc::rwe.at(q), access.remote_write as u64);
            }
        }
        self.run(len, rst2init_qp_out::LAYOUT.size)?;
        self.qps[i].state = QpState::Init;
        Ok(())
    }

    /// INIT → RTR for an RC QP towards a RoCEv2 peer.
    pub fn qp_init2rtr(&mut self, qpn: Qpn, a: &RcConnectAttrs) -> Result<(), Error> {
        let i = self.qp_index(qpn)?;
        let kind = self.qps[i].kind;
        mtu_code(a.mtu).ok_or(Error::InvalidArgument("path MTU"))?;
        // Never more than the port carries (firmware refuses a path MTU over the port's max).
        let mtu = mtu_code(a.mtu.min(self.port_mtu.max_path_mtu())).ok_or(Error::InvalidArgument("path MTU"))?;
        let len = self.begin_modify(op::INIT2RTR_QP, qpn);
        let q = init2rtr_qp_in::qpc;
        let path = qpc::primary_address_path.at(q);
        set(&mut self.inb, ads::vhca_port_num.at(path), 1);
        if kind == QpKind::Gsi {
            set(&mut self.inb, qpc::mtu.at(q), 1);
            set(&mut self.inb, qpc::log_msg_max.at(q), 8);
            set(&mut self.inb, qpc::q_key.at(q), GSI_QKEY as u64);
        } else {
            set(&mut self.inb, qpc::mtu.at(q), mtu);
            set(&mut self.inb, qpc::log_msg_max.at(q), self.caps.log_max_msg as u64);
            set(&mut self.inb, qpc::remote_qpn.at(q), a.remote_qpn.0 as u64 & 0xff_ffff);
            set(&mut self.inb, qpc::next_rcv_psn.at(q), a.rq_psn as u64 & 0xff_ffff);
            let rra = log2_ceil(a.max_dest_rd_atomic).min(self.caps.log_max_ra_res_qp);
            set(&mut self.inb, qpc::log_rra_max.at(q), rra as u64);
            set(&mut self.inb, qpc::min_rnr_nak.at(q), a.min_rnr_timer as u64);
            set(&mut self.inb, qpc::rre.at(q), a.access.remote_read as u64);
            set(&mut self.inb, qpc::rwe.at(q), a.access.remote_write as u64);
            set_bytes(&mut self.inb, ads::rgid_rip.at(path), &ipv4_gid(a.remote_ip));
            let m = a.remote_mac;
            set(&mut self.inb, ads::rmac_47_32.at(path), u16::from_be_bytes([m[0], m[1]]) as u64);
            set(&mut self.inb, ads::rmac_31_0.at(path), u32::from_be_bytes([m[2], m[3], m[4], m[5]]) as u64);
            set(&mut self.inb, ads::src_addr_index.at(path), 0);
            set(&mut self.inb, ads::hop_limit.at(path), 64);
            let sport = if a.udp_sport >= 0xc000 { a.udp_sport } else { rocev2_sport(qpn, a.remote_qpn) };
            set(&mut self.inb, ads::udp_sport.at(path), sport as u64);
        }
        self.run(len, init2rtr_qp_out::LAYOUT.size)?;
        self.qps[i].state = QpState::Rtr;
        Ok(())
    }

    /// RTR → RTS.
    pub fn qp_rtr2rts(&mut self, qpn: Qpn, a: &RcConnectAttrs) -> Result<(), Error> {
        let i = self.qp_index(qpn)?;
        let kind = self.qps[i].kind;
        let len = self.begin_modify(op::RTR2RTS_QP, qpn);
        let q = rtr2rts_qp_in::qpc;
        let path = qpc::primary_address_path.at(q);
        set(&mut self.inb, qpc::pm_state.at(q), 3);
        set(&mut self.inb, qpc::next_send_psn.at(q), a.sq_psn as u64 & 0xff_ffff);
        if kind == QpKind::Rc {
            set(&mut self.inb, qpc::retry_count.at(q), a.retry_cnt.min(7) as u64);
            set(&mut self.inb, qpc::rnr_retry.at(q), a.rnr_retry.min(7) as u64);
            let sra = log2_ceil(a.max_rd_atomic).min(self.caps.log_max_ra_req_qp);
            set(&mut self.inb, qpc::log_sra_max.at(q), sra as u64);
            set(&mut self.inb, ads::ack_timeout.at(path), a.timeout.min(31) as u64);
        }
        self.run(len, rtr2rts_qp_out::LAYOUT.size)?;
        self.qps[i].state = QpState::Rts;
        Ok(())
    }

    /// RESET → INIT → RTR → RTS for an RC QP.
    pub fn connect_rc(&mut self, qpn: Qpn, a: &RcConnectAttrs) -> Result<(), Error> {
        self.qp_rst2init(qpn, a.access)?;
        self.qp_init2rtr(qpn, a)?;
        self.qp_rtr2rts(qpn, a)
    }

    /// Bring the GSI QP (QP1) to RTS.
    pub fn activate_gsi(&mut self, qpn: Qpn) -> Result<(), Error> {
        let a = RcConnectAttrs { mtu: 256, ..Default::default() };
        self.qp_rst2init(qpn, Access::default())?;
        self.qp_init2rtr(qpn, &a)?;
        self.qp_rtr2rts(qpn, &a)
    }

    /// Any state → ERROR.
    pub fn qp_to_error(&mut self, qpn: Qpn) -> Result<(), Error> {
        let i = self.qp_index(qpn)?;
        self.simple(op::QP_2ERR, 0, qp_2err_in::LAYOUT.size, &[(qp_2err_in::qpn, qpn.0 as u64)])?;
        self.qps[i].state = QpState::Error;
        Ok(())
    }

    /// Any state → RESET.
    pub fn qp_to_reset(&mut self, qpn: Qpn) -> Result<(), Error> {
        let i = self.qp_index(qpn)?;
        self.simple(op::QP_2RST, 0, qp_2rst_in::LAYOUT.size, &[(qp_2rst_in::qpn, qpn.0 as u64)])?;
        let q = &mut self.qps[i];
        q.state = QpState::Reset;
        (q.sq_pi, q.sq_ci, q.rq_head, q.rq_tail) = (0, 0, 0, 0);
        q.sq_unrung = None;
        q.dbr.write(0, &[0u8; 8]);
        Ok(())
    }

    pub fn destroy_qp(&mut self, qpn: Qpn) -> Result<(), Error> {
        let i = self.qp_index(qpn)?;
        self.simple(op::DESTROY_QP, 0, destroy_qp_in::LAYOUT.size, &[(destroy_qp_in::qpn, qpn.0 as u64)])?;
        self.qps.remove(i);
        Ok(())
    }

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
    /// Pages the firmware holds now.
    pub fn pages_held(&self) -> usize {
        self.pages.len()
    }
    pub fn live_cqs(&self) -> usize {
        self.cqs.len()
    }
    pub fn live_qps(&self) -> usize {
        self.qps.len()
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
    /// Check the health counter and syndrome once (call from the poll loop).
    pub fn check_health(&mut self) -> Result<(), Error> {
        self.cmd.check_health(&self.hal, &self.bar)
    }

    // ---------------------------------------------------------------- teardown

    /// Destroy every object, TEARDOWN_HCA, take every page back, DISABLE_HCA.
    pub fn shutdown(mut self) -> Result<Stats, Error> {
        self.teardown_inner()?;
        Ok(self.stats)
    }

    fn teardown_inner(&mut self) -> Result<(), Error> {
        let mut first_err: Option<Error> = None;
        let mut note = |r: Result<(), Error>| {
            if let Err(e) = r {
                if first_err.is_none() {
                    first_err = Some(e);
                }
            }
        };
        if self.stage >= Stage::Initialized {
            if self.raw.is_some() {
                note(self.destroy_raw_eth());
            }
            while let Some(q) = self.qps.last() {
                let qpn = q.qpn;
                let r = self.simple(op::DESTROY_QP, 0, destroy_qp_in::LAYOUT.size, &[(destroy_qp_in::qpn, qpn.0 as u64)]);
                self.qps.pop();
                note(r);
            }
            while let Some(m) = self.mkeys.pop() {
                note(self.simple(op::DESTROY_MKEY, 0, destroy_mkey_in::LAYOUT.size, &[(destroy_mkey_in::mkey_index, m.index as u64)]));
            }
            while let Some(c) = self.cqs.pop() {
                note(self.simple(op::DESTROY_CQ, 0, destroy_cq_in::LAYOUT.size, &[(destroy_cq_in::cqn, c.cqn.0 as u64)]));
            }
            if self.roce_enabled {
                note(self.set_roce_gid(0, None));
                self.roce_enabled = false;
            }
            if let Some(td) = self.td.take() {
                note(self.simple(
                    op::DEALLOC_TRANSPORT_DOMAIN,
                    0,
                    dealloc_transport_domain_in::LAYOUT.size,
                    &[(dealloc_transport_domain_in::transport_domain, td as u64)],
                ));
            }
            if let Some(pd) = self.pd.take() {
                note(self.simple(op::DEALLOC_PD, 0, dealloc_pd_in::LAYOUT.size, &[(dealloc_pd_in::pd, pd.0 as u64)]));
            }
            // Answer any page requests still queued before the EQ goes.
            note(self.poll_eq().map(|_| ()));
            if let Some(eq) = self.eq.take() {
                note(self.simple(op::DESTROY_EQ, 0, destroy_eq_in::LAYOUT.size, &[(destroy_eq_in::eq_number, eq.eqn as u64)]));
            }
            if let Some(uar) = self.uar.take() {
                note(self.simple(op::DEALLOC_UAR, 0, dealloc_uar_in::LAYOUT.size, &[(dealloc_uar_in::uar, uar as u64)]));
            }
            match self.teardown_hca() {
                Ok(crate::teardown::Rung::Fast) => {
                    // The function is closed and its DMA stopped: the pages are ours again
                    // without MANAGE_PAGES, and the command interface is off (no DISABLE_HCA).
                    self.stats.pages_released_by_fast_teardown += self.pages.len() as u64;
                    self.pages.clear();
                    self.stage = Stage::CmdQueue;
                }
                r => {
                    note(r.map(|_| ()));
                    self.stage = Stage::Enabled;
                }
            }
        }
        if self.stage >= Stage::Enabled {
            // Reclaim every page: keep asking until the firmware returns none.
            while !self.pages.is_empty() {
                let want = self.pages.len();
                match self.take_pages(self.page_func, want) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) => {
                        note(Err(e));
                        break;
                    }
                }
            }
            let disabled = self.simple(op::DISABLE_HCA, 0, disable_hca_in::LAYOUT.size, &[(disable_hca_in::function_id, 0)]);
            if disabled.is_err() && !self.pages.is_empty() {
                // Pages not given back and the function not disabled (firmware hung or
                // refusing): the adapter may still write them, so they must not return to
                // the DMA pool. Leaked on purpose. (After a completed DISABLE_HCA the
                // function no longer uses them and they are freed normally.)
                log::error!(
                    "mlx5: {} firmware pages neither returned nor released by DISABLE_HCA; leaking them rather than reusing memory the adapter may still write",
                    self.pages.len()
                );
                core::mem::forget(core::mem::take(&mut self.pages));
            }
            note(disabled);
            self.stage = Stage::CmdQueue;
        }
        let left = self.pages.len() as u64;
        if let Some(e) = first_err {
            return Err(e);
        }
        if left != 0 {
            return Err(Error::PagesLeft(left));
        }
        Ok(())
    }
}

/// `::ffff:a.b.c.d` as 16 GID bytes.
pub fn ipv4_gid(ip: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&ip);
    g
}

/// qpc.mtu encoding (IB MTU enum): 256 → 1 ... 4096 → 5.
pub fn mtu_code(bytes: u32) -> Option<u64> {
    match bytes {
        256 => Some(1),
        512 => Some(2),
        1024 => Some(3),
        2048 => Some(4),
        4096 => Some(5),
        _ => None,
    }
}

/// The ts_format a QP/SQ/RQ context asks for, given the capability (mlx5_ifc
/// MLX5_*_TIMESTAMP_FORMAT_CAP_*): FREE_RUNNING (0) where that is all the part has, else
/// DEFAULT (1), which real-time-only parts accept (Linux `mlx5_get_qp_default_ts`, DPDK
/// `mlx5_ts_format_conv`).
pub fn ts_format(cap: u8) -> u64 {
    if cap == 0 {
        0
    } else {
        1
    }
}

fn log2_ceil(n: u8) -> u8 {
    if n <= 1 {
        0
    } else {
        (8 - (n - 1).leading_zeros()) as u8
    }
}

/// RoCEv2 UDP source port from the QPN pair (flow-label hash as Linux does), in 0xC000..=0xFFFF.
pub fn rocev2_sport(lqpn: Qpn, rqpn: Qpn) -> u16 {
    let mut v = lqpn.0 as u64 * rqpn.0 as u64;
    v ^= v >> 20;
    v ^= v >> 40;
    let fl = (v & 0xf_ffff) as u32;
    (((fl & 0x3fff) ^ ((fl & 0xf_c000) >> 14)) | 0xc000) as u16
}
