//! Hostile peers over the real mlx5 driver and the emulated ConnectX (issue 10's must-show):
//! four `testbed::Node`s on one in-test Ethernet hub — the appliance target (`TargetService`:
//! the IB CM + the NVMe-oF RDMA transport over a RAM namespace), a flooding attacker that
//! posts raw CM MADs on its QP1 (10,000 REQs from one source, then REQ/REJ/DREQ spoofed at a
//! live connection), a second attacker that opens 100 connections through its own CM and
//! never sends Fabrics Connect, and a well-behaved initiator (`Host` over `CmHostEnv`).
//! The well-behaved host connects and completes verified I/O during the attack; once the
//! attackers stop and the virtual clock runs the timers (Connect deadline, REP timeout,
//! timewait, the limiter's sweep), the target's CM table, queues, DMA memory and the heap
//! are back to their baseline, and every refusal was counted.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use blockdev::RamNamespace;
use hal::DmaRegion;
use nvmeof::host::cm_env::CmHostEnv;
use nvmeof::host::{cm_req_private, Host, HostConfig};
use nvmeof::nvmet::service::TargetService;
use nvmeof::nvmet::{Core, NamespaceConfig, PortConfig, SubsystemConfig, TargetConfig};
use rdma::cm::{Cm, CmConfig, CmEvent, ConnectParams, GSI_QKEY};
use rdma::cm_wire::{gid_from_ipv4, rej_reason, CmMsg, CmaHdr, Dreq, Rej};
use rdma::{Access, Completion, Control, Cqn, DataPath, Qpn, SendOp, SendWr, Sge, UdDest};
use testbed::alloc_count::{count_this_thread, live_bytes, Counting};
use testbed::{Node, Options, SimClock, SimHal};

#[global_allocator]
static A: Counting = Counting;

type V = testbed::Verbs;

const SUBNQN: &str = "nqn.2026-01.io.appliance:ram0";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000aa";
const T_IP: [u8; 4] = [10, 89, 0, 1];
const H_IP: [u8; 4] = [10, 89, 0, 2];
const F_IP: [u8; 4] = [10, 89, 0, 66];
const S_IP: [u8; 4] = [10, 89, 0, 67];
const T_MAC: [u8; 6] = [0x52, 0x54, 0, 0x89, 0, 1];
const H_MAC: [u8; 6] = [0x52, 0x54, 0, 0x89, 0, 2];
const F_MAC: [u8; 6] = [0x52, 0x54, 0, 0x89, 0, 66];
const S_MAC: [u8; 6] = [0x52, 0x54, 0, 0x89, 0, 67];
const NS_BYTES: u64 = 16 << 20;
/// Bytes from the start of a RoCEv2 UD frame to its MAD: Ethernet 14, IPv4 20, UDP 8, BTH 12, DETH 8.
const MAD_OFF: usize = 14 + 20 + 8 + 12 + 8;
/// Virtual time one loop turn takes.
const TURN_NS: u64 = 2_000;

// ---- an Ethernet hub (test equipment): frames go to the port with the destination MAC ----

#[derive(Default)]
struct Hub {
    ports: Vec<([u8; 6], VecDeque<Vec<u8>>)>,
    /// CM MADs seen on the wire: (source MAC, destination MAC, MAD).
    cm_tap: Vec<([u8; 6], [u8; 6], Vec<u8>)>,
    tap_on: bool,
}

struct Port(Arc<Mutex<Hub>>, usize);

impl emu_roce::Link for Port {
    fn send(&mut self, f: &[u8]) {
        let mut hub = self.0.lock().unwrap();
        let (Some(dst), Some(src)) = (f.get(..6), f.get(6..12)) else { return };
        let (dst, src): ([u8; 6], [u8; 6]) = (dst.try_into().unwrap(), src.try_into().unwrap());
        if hub.tap_on && f.len() >= MAD_OFF + 256 && CmMsg::parse(&f[MAD_OFF..]).is_ok() {
            hub.cm_tap.push((src, dst, f[MAD_OFF..MAD_OFF + 256].to_vec()));
        }
        for (i, (mac, q)) in hub.ports.iter_mut().enumerate() {
            if i != self.1 && (*mac == dst || dst == [0xff; 6]) {
                q.push_back(f.to_vec());
            }
        }
    }
    fn poll(&mut self) -> Option<Vec<u8>> {
        self.0.lock().unwrap().ports[self.1].1.pop_front()
    }
}

fn node(clock: &SimClock, hub: &Arc<Mutex<Hub>>, ip: [u8; 4], mac: [u8; 6], base: u64) -> Node {
    let port = {
        let mut h = hub.lock().unwrap();
        h.ports.push((mac, VecDeque::new()));
        Port(hub.clone(), h.ports.len() - 1)
    };
    let mut n = Node::with_options(clock.clone(), ip, mac, base, Box::new(port), Options::default()).expect("bring-up");
    for (pip, pmac) in [(T_IP, T_MAC), (H_IP, H_MAC), (F_IP, F_MAC), (S_IP, S_MAC)] {
        if pip != ip {
            n.v.add_neighbor(pip, pmac).unwrap();
        }
    }
    n
}

// ---- the attackers ----

/// The flooder: raw MADs posted on its QP1 (no CM; what the target answers is dropped, as no
/// receive is posted on its QP1).
struct Flooder {
    n: Node,
    buf: <V as rdma::Control>::Buf,
    lkey: rdma::Lkey,
    sent: u64,
}

impl Flooder {
    const SLOTS: u64 = 32;
    fn new(mut n: Node) -> Self {
        let buf = n.v.alloc_buf(Self::SLOTS as usize * 256).unwrap();
        let (lkey, _) = n.v.reg_mr(buf.paddr(), buf.len() as u64, Access { local_write: true, ..Default::default() }).unwrap();
        Flooder { n, buf, lkey, sent: 0 }
    }
    /// Post one MAD to the target's QP1; false if the send queue is full right now.
    fn send(&mut self, mad: &[u8; 256]) -> bool {
        let off = (self.sent % Self::SLOTS) as usize * 256;
        self.buf.write(off, mad);
        let ud = UdDest { remote_qpn: Qpn(1), qkey: GSI_QKEY, dest_ip: T_IP, dest_mac: T_MAC, udp_sport: 0xC0DE };
        let wr = SendWr { wr_id: self.sent, op: SendOp::Send, sge: Sge { addr: self.buf.paddr() + off as u64, len: 256, lkey: self.lkey }, signaled: true, fence: false, ud: Some(ud) };
        let qp1 = self.n.v.gsi_qp();
        let ok = self.n.v.post_send(qp1, &wr).is_ok();
        if ok {
            self.sent += 1;
        }
        ok
    }
    fn poll(&mut self) {
        self.n.poll();
        let mut wc = [Completion::default(); 32];
        let cq = self.n.v.gsi_cq();
        while self.n.v.poll_cq(cq, &mut wc) > 0 {}
    }
}

/// The silent attacker: connections through its own CM that never send Fabrics Connect.
struct Silent {
    n: Node,
    cm: Cm<V>,
    cq: Cqn,
    /// CM id → (QP, state: 0 pending, 1 established, 2 refused, 3 closed by the target).
    conns: BTreeMap<u32, (Qpn, u8)>,
}

impl Silent {
    fn poll(&mut self, now: u64) {
        self.n.poll();
        while let Some(ev) = self.cm.poll(&mut self.n.v, now) {
            let (id, st) = match ev {
                CmEvent::Established { id, .. } => (id, 1),
                CmEvent::Rejected { id, .. } | CmEvent::Unreachable { id } => (id, 2),
                CmEvent::Disconnected { id } => (id, 3),
                CmEvent::ConnectRequest(r) => {
                    let _ = self.cm.reject(&mut self.n.v, r.id, rej_reason::INVALID_SERVICE_ID, &[]);
                    continue;
                }
            };
            if let Some(c) = self.conns.get_mut(&id.0) {
                c.1 = st;
            }
        }
        let mut wc = [Completion::default(); 32];
        while self.n.v.poll_cq(self.cq, &mut wc) > 0 {}
    }
    fn open(&mut self, n: usize) {
        for _ in 0..n {
            let qp = self.n.v.create_rc_qp(self.cq, self.cq, 8, 8).unwrap();
            let p = ConnectParams {
                dest_ip: T_IP,
                dest_port: 4420,
                src_port: 0,
                send_cq: Cqn(0),
                recv_cq: Cqn(0),
                sq_size: 0,
                rq_size: 0,
                recv_wrs: &[],
                private_data: &cm_req_private(0, 32),
                responder_resources: 0,
                initiator_depth: 0,
                access: Access { local_write: true, ..Default::default() },
            };
            let id = self.cm.connect_app_qp(&mut self.n.v, qp, &p).expect("attacker REQ");
            self.conns.insert(id.0, (qp, 0));
        }
    }
    fn count(&self, st: u8) -> usize {
        self.conns.values().filter(|c| c.1 == st).count()
    }
    /// Drop every connection the target closed or refused (destroying our QPs).
    fn forget(&mut self) {
        let done: Vec<u32> = self.conns.iter().filter(|c| c.1 .1 >= 2).map(|c| *c.0).collect();
        for id in done {
            let (qp, _) = self.conns.remove(&id).unwrap();
            self.n.v.destroy_qp(qp).unwrap();
        }
    }
}

// ---- the target side of the world, driven from the host's waits ----

struct Others {
    clock: SimClock,
    t: Node,
    svc: TargetService<V, RamNamespace<SimHal>>,
    flood: Flooder,
    silent: Silent,
    host_cx: testbed::ConnectX,
}

impl Others {
    fn turn(&mut self) {
        self.clock.advance(TURN_NS);
        let now = self.clock.now_ns();
        self.svc.poll(&mut self.t.v, now);
        self.t.poll();
        self.flood.poll();
        self.silent.poll(now);
        self.host_cx.poll();
    }
    /// Let `ns` of virtual time pass in coarse steps (timers), turning the loop at each.
    fn wait(&mut self, ns: u64, step: u64) {
        for _ in 0..ns / step {
            self.clock.advance(step - TURN_NS);
            self.turn();
        }
    }
}

type Env = CmHostEnv<V, Box<dyn FnMut() -> u64>, Box<dyn FnMut(&mut V)>>;

struct World {
    hub: Arc<Mutex<Hub>>,
    o: Rc<RefCell<Others>>,
    h: Node,
    env: Env,
}

fn world() -> World {
    let clock = SimClock::new();
    clock.advance(1_000_000);
    let hub = Arc::new(Mutex::new(Hub::default()));
    let mut t = node(&clock, &hub, T_IP, T_MAC, 0x1_0000_0000);
    let mut h = node(&clock, &hub, H_IP, H_MAC, 0x2_0000_0000);
    let f = node(&clock, &hub, F_IP, F_MAC, 0x3_0000_0000);
    let mut s = node(&clock, &hub, S_IP, S_MAC, 0x4_0000_0000);
    let ns = RamNamespace::new(t.hal.clone(), NS_BYTES, 512).expect("namespace memory");
    let cfg = TargetConfig {
        ports: vec![PortConfig { portid: 1, traddr: T_IP, trsvcid: 4420, subsystems: None }],
        inline_data_size: 4096,
        max_io_bytes: 128 * 1024,
        io_queue_depth: 32,
        max_io_queues: 2,
        max_ctrls: 4,
        ..TargetConfig::default()
    };
    let subs = vec![SubsystemConfig {
        nqn: SUBNQN.into(),
        serial: "EMU0002".into(),
        model: "appliance ram (hostile)".into(),
        hosts: vec![HOSTNQN.into()],
        allow_any_host: false,
        namespaces: vec![NamespaceConfig { nsid: 1, dev: ns, nguid: [0x5b; 16] }],
    }];
    let svc = TargetService::with_cm_config(&mut t.v, Core::new(cfg, subs).expect("config"), 64, 4420, CmConfig { seed: 0x7a11, ..CmConfig::default() }).expect("listen");
    let scm = Cm::new(&mut s.v, CmConfig { seed: 0x5111, ..CmConfig::default() }).unwrap();
    let scq = s.v.create_cq(256).unwrap();
    let silent = Silent { n: s, cm: scm, cq: scq, conns: BTreeMap::new() };
    let o = Rc::new(RefCell::new(Others { clock: clock.clone(), t, svc, flood: Flooder::new(f), silent, host_cx: h.cx.clone() }));
    let hcm = Cm::new(&mut h.v, CmConfig { seed: 0x4057, ..CmConfig::default() }).unwrap();
    let (clk, o2) = (clock.clone(), o.clone());
    let env: Env = CmHostEnv::new(
        hcm,
        T_IP,
        4420,
        Box::new(move || clk.now_ns()),
        Box::new(move |v: &mut V| {
            v.poll();
            o2.borrow_mut().turn();
        }),
    );
    World { hub, o, h, env }
}

impl World {
    fn turns(&mut self, n: usize) {
        for _ in 0..n {
            use nvmeof::host::HostEnv as _;
            self.env.idle(&mut self.h.v);
        }
    }
}

fn host_cfg() -> HostConfig {
    HostConfig { hostnqn: HOSTNQN.into(), io_queues: 1, io_depth: 16, max_io_bytes: 64 * 1024, ..HostConfig::default() }
}

/// `count` verified I/Os (writes then reads checked against a shadow) on the host's queue.
fn verified(w: &mut World, host: &mut Host<V>, count: u64, seed: u64) {
    let r = nvmeof::verify::run(host, &mut w.h.v, &mut w.env, 1, count, 8, 16, seed).expect("verified I/O");
    assert!(r.errors == 0 && r.mismatches == 0 && r.blocks_verified > 0, "verify: {r:?}");
}

/// What must return to baseline on the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Footprint {
    cm_conns: usize,
    cm_sources: usize,
    live: usize,
    queues: usize,
    pinned_dma: u64,
    dma_regions: usize,
    dma_bytes: usize,
}

fn footprint(o: &Others) -> Footprint {
    let m = o.t.hal.mem().stats();
    Footprint {
        cm_conns: o.svc.cm.conn_count(),
        cm_sources: o.svc.cm.sources_tracked(),
        live: o.svc.connections(),
        queues: o.svc.target.queues(),
        pinned_dma: o.svc.target.pinned().dma_bytes,
        dma_regions: m.regions,
        dma_bytes: m.bytes,
    }
}

/// A REQ from the flooder: the silent attacker's REQ (a well-formed NVMe-oF admin REQ) with a
/// fresh comm ID and QPN, and the flooder's (or a claimed) source GID.
fn req_from(template: &[u8], comm_id: u32, qpn: u32, gid_ip: [u8; 4]) -> [u8; 256] {
    let (h, CmMsg::Req(mut r)) = CmMsg::parse(template).unwrap() else { panic!("not a REQ") };
    r.local_comm_id = comm_id;
    r.local_qpn = qpn;
    r.local_ca_guid ^= 0x66;
    r.primary.local_gid = gid_from_ipv4(gid_ip);
    CmaHdr { src_port: 0x8000 | (comm_id as u16 & 0x3fff), src_ip: gid_ip, dst_ip: T_IP }.write(&mut r.private_data);
    CmMsg::Req(r).encode(h.tid ^ comm_id as u64)
}

/// One attack: the silent attacker opens `silent` connections, the flooder sends `reqs` REQs,
/// the host connects half-way, completes verified I/O, is the target of spoofed REQ/REJ/DREQ,
/// completes verified I/O again, disconnects. Then the attackers stop and timers run.
/// Returns what the target counted (CM stats, bound stats: refusal counters as deltas over
/// this attack), the silent connections that got a queue, and the footprint and heap at the
/// attack's height. (Nothing is printed here: captured test output is heap too.)
fn attack(w: &mut World, reqs: u32, silent: usize, base: u32) -> (rdma::cm::CmStats, nvmeof::nvmet::limits::BoundStats, usize, Footprint, isize) {
    let cm0 = w.o.borrow().svc.cm.stats();
    let b0 = w.o.borrow().svc.target.core.bound_stats();
    w.hub.lock().unwrap().tap_on = true;
    w.o.borrow_mut().silent.open(silent);
    w.turns(3000);
    let established = w.o.borrow().silent.count(1);
    let template = {
        let hub = w.hub.lock().unwrap();
        hub.cm_tap.iter().find(|(s, _, m)| *s == S_MAC && matches!(CmMsg::parse(m), Ok((_, CmMsg::Req(_))))).expect("a REQ seen").2.clone()
    };
    let mut host = None;
    for i in 0..reqs {
        let id = base.wrapping_add(i);
        let mad = req_from(&template, id, (id & 0xff_ffff) | 0x10_0000, F_IP);
        while !w.o.borrow_mut().flood.send(&mad) {
            w.turns(1);
        }
        if i % 16 == 15 {
            w.turns(1);
        }
        if i == reqs / 2 {
            w.hub.lock().unwrap().cm_tap.clear();
            let mut hst = Host::connect(&mut w.h.v, &mut w.env, host_cfg(), SUBNQN).expect("the well-behaved host connects during the flood");
            verified(w, &mut hst, 64, base as u64);
            host = Some(hst);
        }
    }
    w.turns(2000);
    let peak = footprint(&w.o.borrow());
    assert!(peak.queues >= 2 + established && peak.pinned_dma > 0, "{peak:?}");
    let peak_heap = live_bytes();
    let mut host = host.expect("host connected");
    // Spoofs aimed at the host's live connections, from the flooder's address.
    let live: Vec<(u32, u32, u32)> = {
        let hub = w.hub.lock().unwrap();
        hub.cm_tap
            .iter()
            .filter(|(s, d, _)| *s == T_MAC && *d == H_MAC)
            .filter_map(|(_, _, m)| match CmMsg::parse(m) {
                Ok((_, CmMsg::Rep(r))) => Some((r.local_comm_id, r.remote_comm_id, r.local_qpn)),
                _ => None,
            })
            .collect()
    };
    assert_eq!(live.len(), 2, "admin + one I/O queue connected");
    let (ws0, closed0, live0) = (w.o.borrow().svc.cm.stats().wrong_source, w.o.borrow().svc.stats.closed_by_peer, w.o.borrow().svc.connections());
    let host_req = w.hub.lock().unwrap().cm_tap.iter().find(|(s, _, m)| *s == H_MAC && matches!(CmMsg::parse(m), Ok((_, CmMsg::Req(_))))).map(|t| t.2.clone()).expect("host REQ");
    for &(t_comm, h_comm, t_qpn) in &live {
        let dreq = CmMsg::Dreq(Dreq { local_comm_id: h_comm, remote_comm_id: t_comm, remote_qpn: t_qpn, private_data: [0; 220] }).encode(0xd0 ^ h_comm as u64);
        let rej = |local: u32| CmMsg::Rej(Rej { local_comm_id: local, remote_comm_id: t_comm, message_rejected: 2, reject_info_length: 0, reason: rej_reason::CONSUMER_DEFINED, ari: [0; 72], private_data: [0; 148] }).encode(0xe0 ^ h_comm as u64);
        // A REQ that repeats the host's own (its comm ID, QPN, GUID and GID) from elsewhere.
        let (hh, CmMsg::Req(hr)) = CmMsg::parse(&host_req).unwrap() else { unreachable!() };
        let req = CmMsg::Req(hr).encode(hh.tid);
        for mad in [dreq, rej(h_comm), rej(0), req] {
            while !w.o.borrow_mut().flood.send(&mad) {
                w.turns(1);
            }
            w.turns(50);
        }
    }
    w.turns(2000);
    let ws = w.o.borrow().svc.cm.stats().wrong_source - ws0;
    assert_eq!(ws, 4 * live.len() as u64, "every spoofed DREQ/REJ/REQ dropped as wrong-source");
    assert_eq!(w.o.borrow().svc.stats.closed_by_peer, closed0, "a spoof closed a live queue");
    assert_eq!(w.o.borrow().svc.connections(), live0, "no queue closed by the spoofs");
    verified(w, &mut host, 64, base as u64 + 1);
    host.disconnect(&mut w.h.v, &mut w.env).expect("disconnect");
    w.hub.lock().unwrap().tap_on = false;
    w.hub.lock().unwrap().cm_tap = Vec::new();
    // The attackers stop. The Connect deadline (5 s) closes the queues the flooder's REQs got:
    // the target's DREQs to a peer that never answers are resent max_cm_retries (15) times
    // at its CM response timeout (about 4 s) before the entry closes; then timewait (4 s) and
    // the limiter's sweep. Two virtual minutes cover it.
    w.o.borrow_mut().wait(120_000_000_000, 50_000_000);
    w.turns(100);
    let mut o = w.o.borrow_mut();
    o.silent.forget();
    assert!(o.silent.conns.is_empty(), "the target closed every silent connection: {:?}", o.silent.conns.values().map(|c| c.1).collect::<Vec<_>>());
    let cm = o.svc.cm.stats();
    let b = o.svc.target.core.bound_stats();
    let d = |a: u64, b: u64| a - b;
    (
        rdma::cm::CmStats {
            refused_rate: d(cm.refused_rate, cm0.refused_rate),
            refused_per_source: d(cm.refused_per_source, cm0.refused_per_source),
            refused_table_full: d(cm.refused_table_full, cm0.refused_table_full),
            wrong_source: d(cm.wrong_source, cm0.wrong_source),
            ..cm
        },
        nvmeof::nvmet::limits::BoundStats {
            unadmitted_per_source: d(b.unadmitted_per_source, b0.unadmitted_per_source),
            unadmitted: d(b.unadmitted, b0.unadmitted),
            connect_deadline: d(b.connect_deadline, b0.connect_deadline),
            ..b
        },
        established,
        peak,
        peak_heap,
    )
}

#[test]
fn floods_and_silent_connections_over_mlx5_leave_the_target_serving_and_back_to_baseline() {
    count_this_thread();
    let mut w = world();
    // Empty footprint, before anyone connects.
    let empty = footprint(&w.o.borrow());
    // Warm-up round (fills the test equipment's own queues and the models' tables); the
    // baseline is taken after it.
    attack(&mut w, 1000, 100, 0x1000_0000);
    assert_eq!(footprint(&w.o.borrow()), empty, "warm-up round left target state behind");
    let heap0 = live_bytes();

    let (cm, b, est, peak, peak_heap) = attack(&mut w, 10_000, 100, 0x2000_0000);
    let after = footprint(&w.o.borrow());
    let heap1 = live_bytes();
    let limits = nvmeof::nvmet::Limits::default();
    println!("hostile_mlx5: during the attack: {peak:?}, heap {peak_heap} bytes");
    println!("hostile_mlx5: CM {cm:?}");
    println!("hostile_mlx5: bounds {b:?}, silent connections established {est}");
    println!("hostile_mlx5: footprint empty {empty:?} after {after:?}; heap baseline {heap0} after {heap1}");
    // The flood was refused at the CM (rate) and at the target's admission bound.
    assert!(cm.refused_rate >= 9000, "{cm:?}");
    assert!(cm.wrong_source >= 4, "{cm:?}");
    // Silent connections: only max_unadmitted_per_source got a queue; each expired at the deadline.
    assert_eq!(est, limits.max_unadmitted_per_source as usize);
    assert!(b.unadmitted_per_source >= (100 - est) as u64, "{b:?}");
    assert!(b.connect_deadline >= est as u64, "{b:?}");
    assert_eq!(after, empty, "target state back to its baseline");
    assert!(heap1 <= heap0, "heap grew by {} bytes", heap1 - heap0);
}
