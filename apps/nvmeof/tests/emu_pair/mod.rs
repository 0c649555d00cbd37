//! Two-node test equipment for the target over the real driver stack: target and initiator each
//! run the mlx5 driver (`Mlx5Verbs`) against an emulated ConnectX, the two ports joined by a
//! clocked in-process link, a direct "CM"; the target serves a blockdev `RamNamespace` in its
//! node's physical memory (or, [`setup_on`], any block device built on the target node, e.g.
//! the NVMe driver over the emulated drive). Used by `mlx5_emu`, `poll_groups`, `nvme_emu` and the
//! `profiled` binary.
#![allow(dead_code)]

use std::collections::BTreeMap;

use blockdev::{BlockDevice, RamNamespace};
use nvme::{Config, Controller, NvmeNamespace};
use emu_roce::Impairments;
use nvmeof::host::{ConnectPoll, HostConfig, HostEnv};
use nvmeof::nvmet::rdma::RdmaTarget;
use nvmeof::nvmet::{Core, NamespaceConfig, PortConfig, SubsystemConfig, TargetConfig};
use rdma::{Access, Control, Qpn, RcConnectAttrs};
use testbed::nvme_drive::{DriveNs, DriveState, NvmeDrive};
use testbed::{Clocked, ConnectX, Node, Options, SimClock, SimHal};

pub type V = testbed::Verbs;

pub const SUBNQN: &str = "nqn.2026-01.io.appliance:ram0";
pub const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000aa";
pub const T_IP: [u8; 4] = [10, 88, 0, 1];
pub const H_IP: [u8; 4] = [10, 88, 0, 2];
pub const T_MAC: [u8; 6] = [0x52, 0x54, 0, 0x88, 0, 1];
pub const H_MAC: [u8; 6] = [0x52, 0x54, 0, 0x88, 0, 2];
/// Namespace: 64 MiB of 512-byte blocks.
pub const NS_BYTES: u64 = 64 << 20;

pub fn node(clock: &SimClock, ip: [u8; 4], mac: [u8; 6], base: u64, link: Clocked) -> Node {
    // The port answers ARP, as before the shared harness.
    let opts = Options { port_answers_arp: true, ..Options::default() };
    Node::with_options(clock.clone(), ip, mac, base, Box::new(link), opts).expect("bring-up")
}

pub fn rc_attrs(remote_qpn: Qpn, ip: [u8; 4], mac: [u8; 6], rq_psn: u32, sq_psn: u32) -> RcConnectAttrs {
    RcConnectAttrs {
        remote_qpn,
        remote_ip: ip,
        remote_mac: mac,
        rq_psn,
        sq_psn,
        mtu: 4096,
        udp_sport: 0xC123,
        retry_cnt: 7,
        rnr_retry: 7,
        timeout: 14,
        min_rnr_timer: 1,
        max_rd_atomic: 16,
        max_dest_rd_atomic: 16,
        access: Access { local_write: true, remote_read: true, remote_write: true },
    }
}

/// Target side (node + RdmaTarget), driven from the initiator's waits; a direct "CM".
pub struct World<B: BlockDevice = RamNamespace<SimHal>> {
    pub clock: SimClock,
    pub t: Node,
    pub host_cx: ConnectX,
    /// The initiator's QPs, in connection order (tests that act on the wire).
    pub host_qps: Vec<Qpn>,
    pub target: RdmaTarget<V, B>,
    pub conns: BTreeMap<u32, (Qpn, ConnectPoll)>,
    /// Queues handed to a poll group, waiting for its answer: target QPN → crqsize of the REP.
    pub pending: BTreeMap<u32, u16>,
    pub next: u32,
    pub psn: u32,
    /// Path MTU both sides' QPs are connected with (4096 unless a test says otherwise).
    pub mtu: u32,
    /// The link between the two ports (a test changes its impairments, e.g. loses a frame).
    pub link: emu_roce::MemLink,
}

impl<B: BlockDevice> World<B> {
    pub fn turn(&mut self) {
        self.clock.advance(500);
        let now = self.clock.now_ns();
        self.target.poll(&mut self.t.v, now);
        self.take_answers();
        self.t.v.poll();
        self.t.cx.poll();
        self.host_cx.poll();
    }

    /// The poll groups' answers to queues `cm_connect` handed over: as a CM would, the
    /// connection becomes Connected (REP) or Rejected (REJ) only now.
    pub fn take_answers(&mut self) {
        for q in crate::common::take_answers(&mut self.target, &mut self.pending, &mut self.conns) {
            self.target.disconnected(&mut self.t.v, q);
        }
    }
}

impl<B: BlockDevice> HostEnv<V> for World<B> {
    fn now_ns(&mut self) -> u64 {
        self.clock.now_ns()
    }
    fn idle(&mut self, verbs: &mut V) {
        verbs.poll();
        self.turn();
    }
    fn cm_connect(&mut self, verbs: &mut V, qp: Qpn, private: &[u8; 32]) -> Result<u32, ()> {
        let h = self.next;
        self.next += 1;
        self.psn += 0x1000;
        let (hp, tp) = (self.psn, self.psn + 0x800);
        let mtu = self.mtu;
        let st = match self.target.accept(&mut self.t.v, private, &RcConnectAttrs { mtu, ..rc_attrs(qp, H_IP, H_MAC, hp, tp) }) {
            Ok(p) => {
                self.pending.insert(p.qpn.0, p.rep.crqsize.get());
                // The host cannot take the REP: the queue the target took goes with the group's
                // answer (`take_answers`: pending, no handle), as the service closes an
                // abandoned REQ's queue.
                verbs.connect_rc_qp(qp, &RcConnectAttrs { mtu, ..rc_attrs(p.qpn, T_IP, T_MAC, tp, hp) }).map_err(|_| ())?;
                (p.qpn, ConnectPoll::Pending)
            }
            Err(rej) => (Qpn(0), ConnectPoll::Rejected(rej.sts.get())),
        };
        self.conns.insert(h, st);
        self.host_qps.push(qp);
        Ok(h)
    }
    fn cm_poll(&mut self, _verbs: &mut V, handle: u32) -> ConnectPoll {
        self.conns.get(&handle).map_or(ConnectPoll::Failed, |c| c.1)
    }
    fn cm_disconnect(&mut self, _verbs: &mut V, handle: u32) {
        if let Some((tqp, _)) = self.conns.remove(&handle) {
            if tqp.0 != 0 {
                self.target.disconnected(&mut self.t.v, tqp);
            }
        }
    }
}

pub fn tsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // Safe to call: RDTSC has no preconditions.
        #[allow(unused_unsafe)]
        unsafe {
            core::arch::x86_64::_rdtsc()
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        use std::sync::OnceLock;
        static T0: OnceLock<std::time::Instant> = OnceLock::new();
        T0.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64
    }
}

/// TSC ticks per nanosecond, measured over 20 ms of wall time.
pub fn tsc_per_ns() -> f64 {
    let (t0, i0) = (tsc(), std::time::Instant::now());
    std::thread::sleep(std::time::Duration::from_millis(20));
    (tsc() - t0) as f64 / i0.elapsed().as_nanos() as f64
}

pub fn setup() -> (World, Node) {
    setup_with(2)
}

pub fn setup_with(max_io_queues: u16) -> (World, Node) {
    setup_groups(max_io_queues, 1)
}

/// The pair with the target's queues spread over `groups` poll groups.
pub fn setup_groups(max_io_queues: u16, groups: usize) -> (World, Node) {
    setup_on(max_io_queues, groups, |t| RamNamespace::new(t.hal.clone(), NS_BYTES, 512).expect("namespace memory"))
}

/// The pair with namespace 1 on the device `dev` builds on the target node.
pub fn setup_on<B: BlockDevice>(max_io_queues: u16, groups: usize, dev: impl FnOnce(&Node) -> B) -> (World<B>, Node) {
    setup_subsystems(max_io_queues, groups, |t| {
        vec![SubsystemConfig {
            nqn: SUBNQN.into(),
            serial: "EMU0001".into(),
            model: "appliance ram (emulated ConnectX)".into(),
            hosts: vec![HOSTNQN.into()],
            allow_any_host: false,
            namespaces: vec![NamespaceConfig { nsid: 1, dev: dev(t), nguid: [0x5a; 16] }],
        }]
    })
}

/// Second subsystem of [`setup_two_subsystems`].
pub const SUBNQN_B: &str = "nqn.2026-01.io.appliance:ram1";

/// The pair with two subsystems ([`SUBNQN`], [`SUBNQN_B`]), a RAM namespace each: two
/// controllers of one initiator device.
pub fn setup_two_subsystems() -> (World, Node) {
    setup_subsystems(2, 1, two_subsystems)
}

/// [`setup_two_subsystems`]'s subsystems, new RAM namespaces on `t` (also a restarted target's).
pub fn two_subsystems(t: &Node) -> Vec<SubsystemConfig<RamNamespace<SimHal>>> {
    [(SUBNQN, "EMU0001", 0x5a), (SUBNQN_B, "EMU0002", 0x5b)]
        .into_iter()
        .map(|(nqn, serial, g)| SubsystemConfig {
            nqn: nqn.into(),
            serial: serial.into(),
            model: "appliance ram (emulated ConnectX)".into(),
            hosts: vec![HOSTNQN.into()],
            allow_any_host: false,
            namespaces: vec![NamespaceConfig { nsid: 1, dev: RamNamespace::new(t.hal.clone(), 4 << 20, 512).expect("namespace memory"), nguid: [g; 16] }],
        })
        .collect()
}

/// The pair with the subsystems `subs` builds on the target node.
pub fn setup_subsystems<B: BlockDevice>(max_io_queues: u16, groups: usize, subs: impl FnOnce(&Node) -> Vec<SubsystemConfig<B>>) -> (World<B>, Node) {
    let clock = SimClock::new();
    clock.advance(1_000_000);
    let (a, b) = Clocked::pair(&clock, Impairments::default(), 11);
    let link = a.0.handle();
    let mut t = node(&clock, T_IP, T_MAC, 0x1_0000_0000, a);
    let mut h = node(&clock, H_IP, H_MAC, 0x2_0000_0000, b);
    t.v.add_neighbor(H_IP, H_MAC).unwrap();
    h.v.add_neighbor(T_IP, T_MAC).unwrap();
    let target = target_on(max_io_queues, groups, subs(&t));
    let host_cx = h.cx.clone();
    let w = World { clock, t, host_cx, target, conns: BTreeMap::new(), pending: BTreeMap::new(), host_qps: Vec::new(), next: 1, psn: 0x10_0000, mtu: 4096, link };
    (w, h)
}

/// The pair's target serving `subs` (a test that restarts the target builds a new one).
pub fn target_on<B: BlockDevice>(max_io_queues: u16, groups: usize, subs: Vec<SubsystemConfig<B>>) -> RdmaTarget<V, B> {
    let cfg = TargetConfig {
        ports: vec![PortConfig { portid: 1, traddr: T_IP, trsvcid: 4420, subsystems: None }],
        inline_data_size: 4096,
        max_io_bytes: 128 * 1024,
        io_queue_depth: 128,
        max_io_queues,
        max_ctrls: 4,
        ..TargetConfig::default()
    };
    let mut target = RdmaTarget::with_poll_groups(Core::new(cfg, subs).expect("config"), 8, groups);
    target.set_turnaround_clock(tsc);
    target
}

pub fn host_cfg(depth: u16) -> HostConfig {
    HostConfig { hostnqn: HOSTNQN.into(), io_queues: 1, io_depth: depth, max_io_bytes: 128 * 1024, ..Default::default() }
}

/// 4 I/O queues of `depth`, 4 KiB transfers, keyed-SGL writes (the poll-group tests' host).
pub fn four_queues(depth: u16) -> HostConfig {
    HostConfig { io_queues: 4, io_depth: depth, max_io_bytes: 4096, inline_writes: false, ..host_cfg(depth) }
}

pub fn ns_of(w: &mut World) -> &mut RamNamespace<SimHal> {
    w.target.core.namespace_dev(SUBNQN, 1).expect("namespace")
}

/// The namespace's zero-copy I/Os and bytes copied, as its report (`NsReport::dev`) folds
/// them: the store's, the live poll groups' handles' and the released groups' handles'.
pub fn ns_copies(w: &mut World) -> (u64, u64) {
    let r = w.target.namespace_stats().find(|r| r.subnqn == SUBNQN && r.nsid == 1).expect("namespace report");
    (r.dev.zero_copy, r.dev.copied_bytes)
}

/// A test store's geometry methods (`BlockDevice::block_size`, `num_blocks`,
/// `max_transfer_blocks`), those of the `RamNamespace` it wraps in its field `ram`. Unused in
/// the test binaries without such a store (`profiled`), as the module's dead code is.
#[allow(unused_macros)]
macro_rules! ram_geometry {
    () => {
        fn block_size(&self) -> u32 {
            self.ram.block_size()
        }
        fn num_blocks(&self) -> u64 {
            self.ram.num_blocks()
        }
        fn max_transfer_blocks(&self) -> u32 {
            self.ram.max_transfer_blocks()
        }
    };
}
#[allow(unused_imports)]
pub(crate) use ram_geometry;

/// One I/O of `blocks` at `lba` on queue `q` (its slot's buffer as it is); its status once it
/// completes.
#[allow(clippy::too_many_arguments)]
pub fn io_status<B: BlockDevice>(w: &mut World<B>, h: &mut Node, host: &mut nvmeof::host::Host<V>, q: u16, kind: nvmeof::host::IoKind, lba: u64, blocks: u32) -> nvmeof::Status {
    let mut done = [nvmeof::host::IoDone { queue: 0, slot: 0, status: nvmeof::Status::SUCCESS, dw0: 0, latency_ns: 0 }; 8];
    let slot = host.alloc_slot(q).expect("slot");
    host.submit(&mut h.v, q, slot, kind, 1, lba, blocks, w.clock.now_ns()).expect("submit");
    for _ in 0..100_000 {
        h.v.poll();
        if host.poll(&mut h.v, w.clock.now_ns(), &mut done).expect("poll") > 0 {
            return done[0].status;
        }
        w.turn();
    }
    panic!("queue {q}: {kind:?} LBA {lba} never completed");
}

/// The byte at offset `i` of the block written at `lba` (verified I/O).
pub fn pattern(lba: u64, i: usize) -> u8 {
    (lba.wrapping_mul(131) as usize ^ i.wrapping_mul(7)) as u8
}

pub type NvmeNs = NvmeNamespace<'static, SimHal, NvmeDrive>;
pub type NvmeWorld = World<NvmeNs>;

/// The pair, namespace 1 on the emulated drive (64 MiB of 512-byte blocks, volatile write
/// cache on, MDTS 128 KiB, one I/O queue pair of 128 entries). The drive's controller lives
/// as long as the test process (the namespace borrows it).
pub fn setup_nvme() -> (NvmeWorld, Node, NvmeDrive) {
    setup_nvme_groups(2, 1, Config::default())
}

/// [`setup_nvme`] with `max_io_queues` per controller, `groups` poll groups (each makes a
/// handle of the namespace: an I/O queue pair of its own on the drive) and the driver's
/// `cfg`.
pub fn setup_nvme_groups(max_io_queues: u16, groups: usize, cfg: Config) -> (NvmeWorld, Node, NvmeDrive) {
    setup_nvme_drive_queues(max_io_queues, groups, cfg, DriveState::default().io_queues)
}

/// [`setup_nvme_groups`] on a drive that grants `drive_queues` I/O queues (the store takes
/// one, each poll group's handle another while there are any).
pub fn setup_nvme_drive_queues(max_io_queues: u16, groups: usize, cfg: Config, drive_queues: u16) -> (NvmeWorld, Node, NvmeDrive) {
    let mut drive = None;
    let (w, h) = setup_on(max_io_queues, groups, |t| {
        let st = DriveState { vwc: 1, wce: true, namespaces: vec![DriveNs::new(1, NS_BYTES / 512)], io_queues: drive_queues, ..DriveState::default() };
        let d = NvmeDrive::with_state(t.hal.mem(), st);
        drive = Some(d.clone());
        let ctrl = Box::leak(Box::new(Controller::init(t.hal.clone(), d, cfg).expect("drive up")));
        let info = ctrl.identify_namespace(1).expect("identify");
        let q = ctrl.create_io_queue_pair(128).expect("I/O queue");
        NvmeNamespace::new(ctrl, info, q).expect("namespace")
    });
    (w, h, drive.expect("built"))
}
