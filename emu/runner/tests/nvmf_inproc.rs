//! NVMe-oF over the emulated adapters: appliance initiator ↔ appliance target, each a full
//! runner node (mlx5 driver + emulated ConnectX + RoCE engine), the IB CM on QP1, in one
//! process on a seeded in-memory link with a simulated clock. Connect, identify, 10,000
//! verified random writes/reads at QD1 and at QD32; a host not on the allow-list is refused;
//! keep-alive expiry frees the controller and the target sends DREQ for its queues; an operator
//! unlinks the subsystem from the port over the management plane and links it again.

use std::cell::RefCell;
use std::rc::Rc;

use emu_connectx::SimClock;
use emu_roce::{Impairments, MemLink};
use emu_runner::nvmf::{build_core, RunnerNs};
use emu_runner::{Clocked, Node, Verbs};
use nvmeof::host::{Host, HostConfig, HostEnv};
use nvmeof::host::cm_env::CmHostEnv;
use nvmeof::nvmet::service::TargetService;
use nvmeof::{Error, Status};
use mgmt::device::RingDevice;
use rdma::cm::{Cm, CmConfig};
use smoltcp::iface::{Config as IfaceConfig, Interface, SocketSet};
use smoltcp::socket::tcp;
use smoltcp::time::Instant as SmolInstant;
use smoltcp::wire::{EthernetAddress, IpAddress, IpCidr, Ipv4Address};

const TARGET: [u8; 4] = [10, 77, 0, 1];
const HOST: [u8; 4] = [10, 77, 0, 2];
const NQN: &str = "nqn.2026-11.io.appliance:ram0";
const HOSTNQN: &str = "nqn.2026-11.io.appliance:initiator";

struct TargetSide {
    svc: TargetService<Verbs, RunnerNs>,
    node: Node,
}

type Env = CmHostEnv<Verbs, Box<dyn FnMut() -> u64>, Box<dyn FnMut(&mut Verbs)>>;

fn setup() -> (SimClock, Rc<RefCell<TargetSide>>, Node, Env) {
    setup_with("")
}

/// As [`setup`], the target built from its command-line words plus `words` (bounds, ...).
fn setup_with(words: &str) -> (SimClock, Rc<RefCell<TargetSide>>, Node, Env) {
    setup_hooked(words, |_| {})
}

/// As [`setup_with`], `hook` called with the target after each of its polls.
fn setup_hooked(words: &str, mut hook: impl FnMut(&mut TargetSide) + 'static) -> (SimClock, Rc<RefCell<TargetSide>>, Node, Env) {
    let clock = SimClock::new();
    clock.advance(1_000_000);
    let (a, b) = MemLink::pair(Impairments::default(), 11);
    let mut t = Node::new(clock.clone(), TARGET, [0x52, 0x54, 0, 0x77, 0, 1], 0x1_0000_0000, Box::new(Clocked(a, clock.clone()))).unwrap();
    let mut h = Node::new(clock.clone(), HOST, [0x52, 0x54, 0, 0x77, 0, 2], 0x4_0000_0000, Box::new(Clocked(b, clock.clone()))).unwrap();
    let words = format!("nvmet.subsys={NQN},ns=ram:16M,host={HOSTNQN} {words}");
    let (core, port) = build_core(&t, &words, None, TARGET, 4420).unwrap();
    let svc = TargetService::with_cm_config(&mut t.v, core, 64, port, emu_runner::nvmf::cm_config(&words).unwrap()).unwrap();
    let side = Rc::new(RefCell::new(TargetSide { svc, node: t }));
    let cm = Cm::new(&mut h.v, CmConfig::default()).unwrap();
    let (c1, c2, s2, hcx) = (clock.clone(), clock.clone(), side.clone(), h.cx.clone());
    let clk: Box<dyn FnMut() -> u64> = Box::new(move || c1.now_ns());
    let poll: Box<dyn FnMut(&mut Verbs)> = Box::new(move |hv: &mut Verbs| {
        c2.advance(1_000);
        rdma::Control::poll(hv);
        hcx.poll();
        let mut s = s2.borrow_mut();
        let TargetSide { svc, node } = &mut *s;
        svc.poll(&mut node.v, c2.now_ns());
        node.poll();
        hook(&mut s);
    });
    let env = CmHostEnv::new(cm, TARGET, 4420, clk, poll);
    (clock, side, h, env)
}

/// Run the host's keep-alive and completion checks until it finds its connection gone (true)
/// or 20,000 turns passed (false).
fn notices_loss(host: &mut Host<Verbs>, h: &mut Node, env: &mut Env) -> bool {
    for _ in 0..20_000 {
        env.idle(&mut h.v);
        let now = env.now_ns();
        if host.tick(&mut h.v, now).is_err() || host.failed() {
            return true;
        }
    }
    false
}

/// A target hook: once the target has written `writes` blocks it closes every connection and
/// listens again (the port taken away and given back), once; `at` gets its command count then.
fn drop_once_after_writes(writes: u64, at: Rc<std::cell::Cell<Option<u64>>>) -> impl FnMut(&mut TargetSide) + 'static {
    move |s| {
        if at.get().is_none() && s.svc.target.core_stats().writes >= writes {
            at.set(Some(s.svc.target.core_stats().commands));
            s.svc.close_all(&mut s.node.v);
            s.svc.cm.listen(4420).unwrap();
        }
    }
}

fn cfg() -> HostConfig {
    HostConfig { hostnqn: HOSTNQN.into(), io_queues: 2, io_depth: 32, max_io_bytes: 64 * 1024, kato_ms: 0, ..HostConfig::default() }
}

/// `cm.max-conns=2` on the target's command line: the admin queue and the first I/O queue are
/// accepted, the second I/O queue's REQ gets REJ NO_RESOURCES, counted as table-full; a host
/// with one I/O queue still connects and does verified I/O.
#[test]
fn cm_max_conns_word_refuses_the_third_connection() {
    let (_clock, side, mut h, mut env) = setup_with("cm.max-conns=2");
    assert_eq!(side.borrow().svc.cm.stats().refused_table_full, 0);
    let r = Host::connect(&mut h.v, &mut env, cfg(), NQN);
    assert!(r.is_err(), "a third connection must be refused");
    for _ in 0..2_000 {
        env.idle(&mut h.v);
    }
    {
        let s = side.borrow();
        let m = s.svc.cm.stats();
        assert_eq!((m.refused_table_full, m.refused_rate, m.refused_per_source), (1, 0, 0), "{m:?}");
        assert_eq!(s.svc.stats.accepted, 2, "{:?}", s.svc.stats);
    }
    // The refused host's entries age out of timewait (4 s), then two queues fit again.
    _clock.advance(5_000_000_000);
    for _ in 0..2_000 {
        env.idle(&mut h.v);
    }
    let one = HostConfig { io_queues: 1, ..cfg() };
    let mut host = Host::connect(&mut h.v, &mut env, one, NQN).expect("admin + one I/O queue fit in cm.max-conns=2");
    let r = nvmeof::verify::run(&mut host, &mut h.v, &mut env, 1, 200, 1, 16, 3).expect("verified run");
    assert_eq!((r.errors, r.mismatches), (0, 0), "{r:?}");
    host.disconnect(&mut h.v, &mut env).expect("disconnect");
    assert_eq!(side.borrow().svc.cm.stats().refused_table_full, 1);
}

#[test]
fn ten_thousand_verified_ios_at_qd1_and_qd32() {
    let (_clock, side, mut h, mut env) = setup();
    let mut host = Host::connect(&mut h.v, &mut env, cfg(), NQN).expect("connect");
    assert_eq!(host.namespaces.len(), 1);
    assert_eq!((host.namespaces[0].blocks, host.namespaces[0].block_size), (16 * 2048, 512));
    assert_eq!(host.ctrl.as_ref().unwrap().subnqn, NQN);
    for (qd, seed) in [(1usize, 1u64), (32, 2)] {
        let r = nvmeof::verify::run(&mut host, &mut h.v, &mut env, 1, 10_000, qd, 16, seed).expect("verified run");
        assert_eq!((r.errors, r.mismatches), (0, 0), "qd {qd}: {r:?}");
        assert!(r.writes + r.reads >= 10_000 && r.blocks_verified > 20_000, "qd {qd}: {r:?}");
    }
    host.disconnect(&mut h.v, &mut env).expect("disconnect");
    for _ in 0..2_000 {
        env.idle(&mut h.v);
    }
    let s = side.borrow();
    assert_eq!(s.svc.connections(), 0);
    assert_eq!((s.svc.target.stats().bad_capsules, s.svc.target.stats().wc_errors), (0, 0));
    assert_eq!(s.svc.target.core.live_ctrls(), 0);
    assert!(s.svc.target.core_stats().reads > 5_000 && s.svc.target.core_stats().writes > 5_000);
}

#[test]
fn host_not_on_the_allow_list_is_refused_and_never_sees_a_namespace() {
    let (_clock, side, mut h, mut env) = setup();
    let mut c = cfg();
    c.hostnqn = "nqn.2026-11.io.appliance:intruder".into();
    match Host::connect(&mut h.v, &mut env, c, NQN) {
        Err(Error::Nvme(s)) => assert_eq!(s, Status::CONNECT_INVALID_HOST),
        other => panic!("expected Connect Invalid Host, got {:?}", other.map(|h| h.namespaces.len())),
    }
    for _ in 0..2_000 {
        env.idle(&mut h.v);
    }
    let s = side.borrow();
    assert_eq!(s.svc.target.core_stats().connects_refused, 1);
    assert_eq!(s.svc.target.core.live_ctrls(), 0);
    assert_eq!(s.svc.target.core_stats().reads + s.svc.target.core_stats().writes, 0);
}

#[test]
fn keep_alive_expiry_frees_the_controller_and_closes_its_queues() {
    let (clock, side, mut h, mut env) = setup();
    let mut c = cfg();
    c.kato_ms = 1_000;
    let host = Host::connect(&mut h.v, &mut env, c, NQN).expect("connect");
    assert_eq!(side.borrow().svc.target.core.live_ctrls(), 1);
    // The host goes silent (no keep-alive), the target keeps running for 3 s.
    for _ in 0..30_000 {
        clock.advance(100_000);
        let mut s = side.borrow_mut();
        let TargetSide { svc, node } = &mut *s;
        svc.poll(&mut node.v, clock.now_ns());
        node.poll();
        drop(s);
        rdma::Control::poll(&mut h.v);
        h.cx.poll();
    }
    let s = side.borrow();
    assert_eq!(s.svc.target.core_stats().ka_expired, 1);
    assert_eq!(s.svc.target.core.live_ctrls(), 0);
    assert_eq!(s.svc.connections(), 0, "every queue of the controller closed");
    assert_eq!(s.svc.stats.closed_by_target, 3, "admin + 2 I/O queues, DREQ each");
    drop(s);
    drop(host);
}

#[test]
fn initiator_reconnects_after_the_target_dropped_it() {
    let (_clock, side, mut h, mut env) = setup();
    let mut host = Host::connect(&mut h.v, &mut env, cfg(), NQN).expect("connect");
    let r = nvmeof::verify::run(&mut host, &mut h.v, &mut env, 1, 500, 8, 16, 3).expect("before");
    assert_eq!((r.errors, r.mismatches), (0, 0));
    // The target goes away: every connection closed (DREQ), then it listens again.
    {
        let mut s = side.borrow_mut();
        let TargetSide { svc, node } = &mut *s;
        svc.close_all(&mut node.v);
        svc.cm.listen(4420).unwrap();
    }
    assert!(notices_loss(&mut host, &mut h, &mut env), "the initiator noticed its queues were gone");
    host.reconnect(&mut h.v, &mut env).expect("reconnect");
    assert_eq!(host.namespaces.len(), 1);
    let r = nvmeof::verify::run(&mut host, &mut h.v, &mut env, 1, 1_000, 16, 16, 4).expect("after");
    assert_eq!((r.errors, r.mismatches), (0, 0), "{r:?}");
    host.disconnect(&mut h.v, &mut env).expect("disconnect");
}

/// The runner's initiator (`emu_runner::nvmf::initiate`, what `--app nvmf-initiator` runs) on
/// the product's `Controllers`: the target closes every connection mid-run (as a port taken
/// away and given back) after 300 writes; the controller is released and reconnected and the
/// verified workload resumes and completes with every block matching.
#[test]
fn runner_initiator_survives_the_target_dropping_it_mid_run() {
    // After 300 writes the target closes every connection, then listens again.
    let dropped = Rc::new(std::cell::Cell::new(false));
    let d2 = dropped.clone();
    let (_clock, side, mut h, mut env) = setup_hooked("", move |s| {
        if !d2.get() && s.svc.target.core_stats().writes >= 300 {
            d2.set(true);
            s.svc.close_all(&mut s.node.v);
            s.svc.cm.listen(4420).unwrap();
        }
    });
    let args = nvmeof::cmdline::parse(&format!("nvmf.connect=10.77.0.1:4420,nqn={NQN},hostnqn={HOSTNQN},queues=2,qd=8")).unwrap();
    let r = emu_runner::nvmf::initiate(&mut h, &mut env, &args, cfg(), 2_000, 7, None).expect("initiator run");
    println!("{r:?}");
    assert!(dropped.get(), "the target dropped the initiator mid-run");
    let v = r.lane.verify;
    assert_eq!((v.mismatches, v.errors), (0, 0), "{r:?}");
    assert!(r.lane.releases >= 1 && r.connects >= 2, "released and reconnected: {r:?}");
    assert!(r.lane.answered_after_reconnect >= 1_000, "the workload resumed: {r:?}");
    assert!(v.blocks_verified > 1_000, "{r:?}");
    for _ in 0..2_000 {
        env.idle(&mut h.v);
    }
    let s = side.borrow();
    assert_eq!(s.svc.connections(), 0, "every queue closed after the run");
    assert_eq!(s.svc.target.core.live_ctrls(), 0);
}

/// The runner's `nvmf.bench=` on the same `Controllers`: the target closes every connection
/// once the bench has written 1,500 blocks (the port taken away and given back); the bench
/// counts what was in flight as lost (no latency sample, no error), the outage, and goes on
/// on the new connection to the end of its duration.
#[test]
fn runner_bench_survives_the_target_dropping_it_mid_bench() {
    let dropped = Rc::new(std::cell::Cell::new(None));
    // The verified run before the bench writes ~100 blocks.
    let (clock, side, mut h, mut env) = setup_hooked("", drop_once_after_writes(1_500, dropped.clone()));
    let args = nvmeof::cmdline::parse(&format!("nvmf.connect=10.77.0.1:4420,nqn={NQN},hostnqn={HOSTNQN},queues=2,qd=8 nvmf.bench=randrw,qd=8,time=150ms,seed=3")).unwrap();
    let t0 = clock.now_ns();
    let r = emu_runner::nvmf::initiate(&mut h, &mut env, &args, cfg(), 200, 7, None).expect("initiator run");
    let took = clock.now_ns() - t0;
    let b = r.bench.clone().expect("bench ran");
    println!("{:?} connects {} failed attempts {}; {} ms virtual", b, r.connects, r.failed_attempts, took / 1_000_000);
    let at = dropped.get().expect("the target dropped the initiator mid-bench");
    assert_eq!(r.lane.releases, 0, "the drop came during the bench, not the verified run");
    assert_eq!(r.connects, 2, "reconnected once");
    assert_eq!((b.outages, b.down_at_end, b.errors), (1, false, 0), "{b:?}");
    assert!(b.lost >= 1 && b.lost <= 8, "in flight at the drop (QD 8): {b:?}");
    assert_eq!(b.reads + b.writes, b.ios + b.lost);
    assert_eq!(b.lat().count(), b.ios, "lost I/Os are no latency samples");
    assert!(b.outage_ns > 0 && b.outage_ns < b.elapsed_ns);
    // The bench went on after the reconnect: the target answered more than it had by the drop.
    let s = side.borrow();
    assert!(s.svc.target.core_stats().commands > at + 1_000, "commands after the drop: {} at the drop, {} in all", at, s.svc.target.core_stats().commands);
    assert_eq!((s.svc.target.core_stats().errors, s.svc.target.stats().bad_capsules), (0, 0), "{:?}", s.svc.target.core_stats());
}

/// `nvmf.bench=...,threads=on` over `n` I/O queues: each queue's submit/poll loop on a std
/// thread of its own while this thread keeps the admin queue (a KATO short enough that Keep
/// Alives go out meanwhile), the device and the target; the I/O count asked is done in all,
/// with no error, by every lane, and the merged result is the sum of the lanes'.
fn bench_on_threads(n: u16) {
    let (_clock, side, mut h, mut env) = setup_with("");
    let ios = 2_000;
    let args = nvmeof::cmdline::parse(&format!("nvmf.connect=10.77.0.1:4420,nqn={NQN},hostnqn={HOSTNQN},queues={n},qd=8 nvmf.bench=randrw,qd=8,time=600s,ios={ios},seed=3,threads=on")).unwrap();
    let r = emu_runner::nvmf::initiate(&mut h, &mut env, &args, HostConfig { io_queues: n, io_depth: 8, kato_ms: 20, ..cfg() }, 200, 7, None).expect("initiator run");
    let b = r.bench.clone().expect("bench ran");
    assert_eq!((b.ios, b.errors, b.lost, b.reads + b.writes), (ios, 0, 0, ios), "{b:?}");
    assert_eq!(b.lat().count(), ios, "every I/O a latency sample");
    let qids: Vec<u16> = r.bench_lanes.iter().map(|l| l.0).collect();
    assert_eq!(qids, (1..=n).collect::<Vec<_>>(), "one lane per I/O queue");
    for (qid, l) in &r.bench_lanes {
        assert_eq!((l.ios, l.errors), (ios / n as u64, 0), "queue {qid}: its share of the I/Os, no error");
        assert!(l.reads > 0 && l.writes > 0, "queue {qid}: {l:?}");
    }
    let lat: u64 = r.bench_lanes.iter().map(|l| l.1.lat().count()).sum();
    assert_eq!(lat, b.lat().count(), "the lanes' histograms merged");
    let s = side.borrow();
    assert_eq!((s.svc.target.core_stats().errors, s.svc.target.stats().bad_capsules), (0, 0), "{:?}", s.svc.target.core_stats());
    assert_eq!(s.svc.target.core_stats().ka_expired, 0, "the owner kept the admin queue alive: {:?}", s.svc.target.core_stats());
    println!("RUNNER-BENCH-THREADS queues={n} ios={} lanes={:?}", b.ios, r.bench_lanes.iter().map(|l| (l.0, l.1.ios)).collect::<Vec<_>>());
}

#[test]
fn runner_bench_on_two_threads() {
    bench_on_threads(2);
}

#[test]
fn runner_bench_on_four_threads() {
    bench_on_threads(4);
}

/// An operator's HTTP client: smoltcp on the host node's raw Ethernet queue (the host's own
/// address), talking to the target's management stack over the link like `curl` would.
struct Operator {
    iface: Interface,
    dev: RingDevice,
    sockets: SocketSet<'static>,
    next_port: u16,
}

impl Operator {
    fn new(v: &mut Verbs) -> Operator {
        v.enable_mgmt_frames(16, true);
        let mut dev = RingDevice::new(16, 16, mgmt::stack::RX_FRAME_MAX, mlx5::MAX_FRAME);
        let mut c = IfaceConfig::new(EthernetAddress(rdma::Neighbours::local_mac(v)).into());
        c.random_seed = 9;
        let mut iface = Interface::new(c, &mut dev, SmolInstant::from_micros(0));
        iface.update_ip_addrs(|a| a.push(IpCidr::new(IpAddress::v4(HOST[0], HOST[1], HOST[2], HOST[3]), 24)).expect("one address"));
        Operator { iface, dev, sockets: SocketSet::new(vec![]), next_port: 50_000 }
    }

    /// Frames from the host's raw queue in, the stack polled, its frames out.
    fn turn(&mut self, v: &mut Verbs, now_ns: u64) {
        while let Some(slot) = self.dev.rx.free_slot() {
            let Some(n) = mgmt::FramePort::recv_frame(v, slot) else { break };
            self.dev.rx.commit(n);
        }
        self.iface.poll(SmolInstant::from_micros((now_ns / 1000) as i64), &mut self.dev, &mut self.sockets);
        while self.dev.tx.pop_with(|f| mgmt::FramePort::send_frame(v, f)).is_some() {}
    }

    /// `METHOD path` to the target's management port on a new connection, every node
    /// running meanwhile; the whole response once the server closed the connection (and the
    /// client's own FIN is through, so the server's connection slot is free again).
    fn request(&mut self, h: &mut Node, env: &mut Env, method: &str, path: &str) -> String {
        let mut s = tcp::Socket::new(tcp::SocketBuffer::new(vec![0; 2048]), tcp::SocketBuffer::new(vec![0; 16384]));
        self.next_port += 1;
        s.connect(self.iface.context(), (Ipv4Address::new(TARGET[0], TARGET[1], TARGET[2], TARGET[3]), mgmt::config::DEFAULT_PORT), self.next_port).expect("connect");
        let hd = self.sockets.add(s);
        let (mut sent, mut out, mut closing) = (false, Vec::new(), false);
        for _ in 0..200_000 {
            env.idle(&mut h.v);
            self.turn(&mut h.v, env.now_ns());
            let s = self.sockets.get_mut::<tcp::Socket>(hd);
            if closing {
                if matches!(s.state(), tcp::State::Closed | tcp::State::TimeWait) {
                    s.abort();
                    self.sockets.remove(hd);
                    return String::from_utf8(out).expect("text");
                }
                continue;
            }
            if !sent && s.can_send() {
                s.send_slice(format!("{method} {path} HTTP/1.1\r\nHost: appliance\r\n\r\n").as_bytes()).expect("request fits");
                sent = true;
            }
            while s.can_recv() {
                s.recv(|b| (b.len(), out.extend_from_slice(b))).expect("recv");
            }
            if sent && !s.may_recv() {
                s.close();
                closing = true;
            }
        }
        panic!("{method} {path}: no complete answer (closing: {closing}); got {:?}", String::from_utf8_lossy(&out));
    }
}

/// A hook for [`setup_hooked`]: the target's management stack (`emu_runner::nvmf::serve_mgmt`,
/// with `mgmt.control=on` when `control`) served after each of the target's polls.
fn serving_mgmt(control: bool) -> impl FnMut(&mut TargetSide) + 'static {
    let mut plane: Option<(mgmt::Mgmt, std::time::Instant)> = None;
    move |s| {
        let (m, t0) = plane.get_or_insert_with(|| {
            s.node.v.enable_mgmt_frames(16, true);
            let c = mgmt::MgmtConfig { control, ..Default::default() };
            (mgmt::Mgmt::new(&c, TARGET, rdma::Neighbours::local_mac(&s.node.v), mlx5::MAX_FRAME, mgmt::Budget::default(), 5, 0), std::time::Instant::now())
        });
        emu_runner::nvmf::serve_mgmt(m, &mut s.node, &mut s.svc, *t0);
    }
}

/// The body of a response whose status line starts `status`.
fn body<'a>(r: &'a str, status: &str) -> &'a str {
    assert!(r.starts_with(&format!("HTTP/1.1 {status}")), "expected {status}: {r}");
    r.split_once("\r\n\r\n").expect("head and body").1
}

/// The operator takes the subsystem off the port and puts it back at run time through the
/// management plane with `mgmt.control=on` (Linux nvmet: `rm` / `ln -s` of the configfs link
/// `ports/1/subsystems/NQN`; here `DELETE` / `PUT /ports/1/subsystems/NQN`): HTTP from a
/// client on the host node's raw Ethernet queue over the link to the target's stack
/// (`emu_runner::nvmf::serve_mgmt`, what `emu-runner --mgmt` runs; the image's plane calls
/// the same `mgmt::report::port_links`). Unlinked: the host's queues are disconnected, the
/// listing is empty, a Connect is refused as for an unknown subsystem (sct 1 sc 0x82, DNR);
/// linked again: listed, the host reconnects and verified I/O runs on the new controller.
#[test]
fn an_operator_unlinks_the_subsystem_over_the_management_plane_and_links_it_again() {
    let (_clock, side, mut h, mut env) = setup_hooked("", serving_mgmt(true));
    let mut op = Operator::new(&mut h.v);
    let mut host = Host::connect(&mut h.v, &mut env, cfg(), NQN).expect("connect");
    let r = nvmeof::verify::run(&mut host, &mut h.v, &mut env, 1, 500, 8, 16, 5).expect("before");
    assert_eq!((r.errors, r.mismatches), (0, 0), "{r:?}");
    assert_eq!(body(&op.request(&mut h, &mut env, "GET", "/ports/1/subsystems"), "200 OK"), format!("{NQN}\n"));
    // Wrong names change nothing.
    let r = op.request(&mut h, &mut env, "DELETE", "/ports/1/subsystems/nqn.2026-11.io.appliance:none");
    assert_eq!(body(&r, "404 Not Found"), "no subsystem nqn.2026-11.io.appliance:none\n");
    assert_eq!(body(&op.request(&mut h, &mut env, "DELETE", &format!("/ports/2/subsystems/{NQN}")), "404 Not Found"), "no port 2\n");
    assert_eq!(side.borrow().svc.target.core.live_ctrls(), 1);
    // Unlinked: the target deletes the controller and disconnects its queues.
    let r = op.request(&mut h, &mut env, "DELETE", &format!("/ports/1/subsystems/{NQN}"));
    assert_eq!(body(&r, "200 OK"), format!("{NQN} unlinked from port 1\n"));
    assert!(notices_loss(&mut host, &mut h, &mut env), "the host saw its queues disconnected");
    assert_eq!(body(&op.request(&mut h, &mut env, "GET", "/ports/1/subsystems"), "200 OK"), "");
    match host.reconnect(&mut h.v, &mut env) {
        Err(Error::Nvme(s)) => assert_eq!(s, Status::CONNECT_INVALID_PARAM, "refused as an unknown subsystem"),
        other => panic!("Connect to an unlinked subsystem: {:?}", other.map(|()| host.namespaces.len())),
    }
    assert_eq!(side.borrow().svc.target.core.live_ctrls(), 0);
    // Linked again: served and listed; the host reconnects.
    assert_eq!(body(&op.request(&mut h, &mut env, "PUT", &format!("/ports/1/subsystems/{NQN}")), "200 OK"), format!("{NQN} linked to port 1\n"));
    assert_eq!(body(&op.request(&mut h, &mut env, "GET", "/ports/1/subsystems"), "200 OK"), format!("{NQN}\n"));
    host.reconnect(&mut h.v, &mut env).expect("reconnect once linked");
    let r = nvmeof::verify::run(&mut host, &mut h.v, &mut env, 1, 500, 8, 16, 6).expect("after");
    assert_eq!((r.errors, r.mismatches), (0, 0), "{r:?}");
    host.disconnect(&mut h.v, &mut env).expect("disconnect");
    for _ in 0..2_000 {
        env.idle(&mut h.v);
    }
    let s = side.borrow();
    assert_eq!((s.svc.connections(), s.svc.target.core.live_ctrls()), (0, 0));
    // The one error is the refused Connect (sct 1 sc 0x82).
    assert_eq!((s.svc.target.stats().bad_capsules, s.svc.target.core_stats().errors), (0, 1), "{:?}", s.svc.target.core_stats());
    assert_eq!(s.svc.target.core_stats().by_status.slots[0], (1, 0x82, 1));
}

/// The value of the one sample of `/metrics` text `m` named `series` (name and labels as the
/// page writes them).
fn metric(m: &str, series: &str) -> u64 {
    let line = m.lines().find(|l| l.split_once(' ').is_some_and(|(s, _)| s == series)).unwrap_or_else(|| panic!("{series} not in /metrics"));
    line.rsplit_once(' ').expect("value").1.parse().expect("integer")
}

/// The I/O counts of two poll groups (each group counts its own commands, no counter shared
/// between groups on the I/O path) reach the target's totals: `/metrics` (core, subsystem and
/// namespace series) and the target's getters agree with what the host did, while the groups
/// live and after they are released with the last queue (their counts folded into the core).
#[test]
fn io_counts_of_every_poll_group_reach_the_metrics_and_outlive_the_groups() {
    let (_clock, side, mut h, mut env) = setup_hooked("", serving_mgmt(false));
    side.borrow_mut().svc.target.set_poll_groups(2);
    let mut op = Operator::new(&mut h.v);
    let mut host = Host::connect(&mut h.v, &mut env, cfg(), NQN).expect("connect");
    let r = nvmeof::verify::run(&mut host, &mut h.v, &mut env, 1, 2_000, 8, 16, 9).expect("verified run");
    assert_eq!((r.errors, r.mismatches), (0, 0), "{r:?}");
    let ns = |op: &str| format!("nvmf_namespace_io_total{{subnqn=\"{NQN}\",nsid=\"1\",op=\"{op}\"}}");
    let sub = |op: &str| format!("nvmf_subsystem_io_total{{subnqn=\"{NQN}\",op=\"{op}\"}}");
    let core = |op: &str| format!("nvmf_io_commands_total{{op=\"{op}\"}}");
    let check = |m: &str, s: &TargetSide, when: &str| {
        for (op, n) in [("read", r.reads), ("write", r.writes)] {
            assert_eq!((metric(m, &ns(op)), metric(m, &sub(op)), metric(m, &core(op))), (n, n, n), "{when}: {op}s in /metrics");
        }
        let t = &s.svc.target;
        let (c, st) = (t.core_stats(), t.namespace_stats().next().expect("namespace").stats);
        let (_, sb) = t.subsystem_stats().next().expect("subsystem");
        assert_eq!((c.reads, c.writes, st.reads, st.writes, sb.reads, sb.writes), (r.reads, r.writes, r.reads, r.writes, r.reads, r.writes), "{when}");
        assert_eq!((st.bytes_read, st.bytes_written), (sb.bytes_read, sb.bytes_written), "{when}");
        assert!(st.bytes_read >= 512 * r.reads && st.bytes_written >= 512 * r.writes, "{when}: {st:?}");
        // The RAM store's CPU copies (counted per group handle, folded into the namespace's
        // report): in-capsule Writes are copied, zero-copy Reads and keyed Writes are not.
        let dev = t.namespace_stats().next().expect("namespace").dev;
        let copied = format!("nvmf_namespace_copied_io_total{{subnqn=\"{NQN}\",nsid=\"1\"}}");
        let bytes = format!("nvmf_namespace_copied_bytes_total{{subnqn=\"{NQN}\",nsid=\"1\"}}");
        assert_eq!((metric(m, &copied), metric(m, &bytes)), (dev.copied, dev.copied_bytes), "{when}: copies in /metrics");
        assert!(dev.copied > 0 && dev.copied < r.reads + r.writes && dev.copied_bytes >= 512 * dev.copied, "{when}: {dev:?}");
    };
    {
        let s = side.borrow();
        // Both groups served I/O queues (admin and I/O queues handed out round-robin).
        for g in 0..2 {
            assert!(s.svc.target.group_stats(g).capsules > 100, "group {g}: {:?}", s.svc.target.group_stats(g));
        }
        // The groups keep their counts: nothing of the I/O is in the core's own tables yet.
        assert_eq!((s.svc.target.core.stats().reads, s.svc.target.core.stats().writes), (0, 0));
    }
    let m = op.request(&mut h, &mut env, "GET", "/metrics");
    check(body(&m, "200 OK"), &side.borrow(), "groups live");
    host.disconnect(&mut h.v, &mut env).expect("disconnect");
    for _ in 0..2_000 {
        env.idle(&mut h.v);
    }
    assert_eq!(side.borrow().svc.connections(), 0);
    // Released with the last queue: their counts are the core's now.
    assert_eq!(side.borrow().svc.target.core.stats().reads, r.reads);
    let m = op.request(&mut h, &mut env, "GET", "/metrics");
    check(body(&m, "200 OK"), &side.borrow(), "groups released");
}

/// `nvmf.verify=N,threads=on` over `n` I/O queues: the verified workload split over the queues,
/// each queue's loop on a std thread of its own with a block range of its own (its own model:
/// pattern per block and generation, every read of a written block compared, its written
/// blocks read back at the end), while this thread keeps the admin queue (Keep Alives go out
/// meanwhile) and the target; every lane answers its share with 0 mismatches and 0 errors and
/// the merged tally is the sum of the lanes'.
fn verify_on_threads(n: u16) {
    let (_clock, side, mut h, mut env) = setup_with("");
    let count = 2_000u64;
    let args = nvmeof::cmdline::parse(&format!("nvmf.connect=10.77.0.1:4420,nqn={NQN},hostnqn={HOSTNQN},queues={n},qd=8 nvmf.verify={count},threads=on")).unwrap();
    let r = emu_runner::nvmf::initiate(&mut h, &mut env, &args, HostConfig { io_queues: n, io_depth: 8, kato_ms: 20, ..cfg() }, 0, 7, None).expect("initiator run");
    let qids: Vec<u16> = r.verify_lanes.iter().map(|l| l.0).collect();
    assert_eq!(qids, (1..=n).collect::<Vec<_>>(), "one lane per I/O queue");
    let mut sum = nvmeof::verify::VerifyResult::default();
    for (qid, l) in &r.verify_lanes {
        assert_eq!((l.mismatches, l.errors), (0, 0), "queue {qid}: {l:?}");
        assert!(l.writes > 0 && l.blocks_verified > 0, "queue {qid}: {l:?}");
        // Its share of the random I/Os, then the read-back (reads only).
        assert!(l.writes + l.reads >= count / n as u64, "queue {qid}: {l:?}");
        sum.add(l);
    }
    assert_eq!(r.lane.verify, sum, "the merged tally is the lanes' sum");
    let s = side.borrow();
    assert_eq!((s.svc.target.core_stats().errors, s.svc.target.stats().bad_capsules), (0, 0), "{:?}", s.svc.target.core_stats());
    assert_eq!(s.svc.target.core_stats().ka_expired, 0, "the owner kept the admin queue alive");
    println!("RUNNER-VERIFY-THREADS queues={n} lanes={:?}", r.verify_lanes);
}

#[test]
fn runner_verify_on_two_threads() {
    verify_on_threads(2);
}

#[test]
fn runner_verify_on_four_threads() {
    verify_on_threads(4);
}

/// `nvmf.bench=...,threads=on` (2 I/O queues, each on a std thread of its own, QD 8) and the
/// target closes every connection once the bench has written 1,500 blocks (the port taken away
/// and given back): the owner sees the controller lost (its CM hears the queues' DREQs), stops
/// both lanes (what each had in flight counted lost), the set reconnects the controller and the
/// lanes resume on the new queues with their state, to the I/O count asked: one outage, every
/// I/O answered or lost, no error, each lane its share.
#[test]
fn runner_bench_on_threads_resumes_after_the_target_dropped_it() {
    let dropped = Rc::new(std::cell::Cell::new(None));
    let (_clock, side, mut h, mut env) = setup_hooked("", drop_once_after_writes(1_500, dropped.clone()));
    let ios = 6_000;
    let args = nvmeof::cmdline::parse(&format!("nvmf.connect=10.77.0.1:4420,nqn={NQN},hostnqn={HOSTNQN},queues=2,qd=8 nvmf.bench=randrw,qd=8,time=600s,ios={ios},seed=3,threads=on")).unwrap();
    let r = emu_runner::nvmf::initiate(&mut h, &mut env, &args, HostConfig { io_queues: 2, io_depth: 8, kato_ms: 20, ..cfg() }, 200, 7, None).expect("initiator run");
    let b = r.bench.clone().expect("bench ran");
    println!("{b:?} connects {} lanes {:?}", r.connects, r.bench_lanes.iter().map(|l| (l.0, l.1.ios, l.1.lost)).collect::<Vec<_>>());
    let at = dropped.get().expect("the target dropped the initiator mid-bench");
    assert_eq!(r.lane.releases, 0, "the drop came during the bench, not the verified run");
    assert_eq!(r.connects, 2, "reconnected once");
    assert_eq!((b.outages, b.down_at_end, b.errors), (1, false, 0), "{b:?}");
    assert!(b.outage_ns > 0, "{b:?}");
    assert!(b.lost >= 1 && b.lost <= 16, "in flight at the drop (2 lanes at QD 8): {b:?}");
    assert_eq!((b.reads + b.writes, b.ios + b.lost), (ios, ios), "every I/O asked was answered or lost: {b:?}");
    assert_eq!(b.lat().count(), b.ios, "lost I/Os are no latency samples");
    assert_eq!(r.bench_lanes.iter().map(|l| l.0).collect::<Vec<_>>(), vec![1, 2], "both lanes finished");
    for (qid, l) in &r.bench_lanes {
        assert_eq!((l.ios + l.lost, l.errors), (ios / 2, 0), "queue {qid}: its share, answered or lost");
    }
    let s = side.borrow();
    assert!(s.svc.target.core_stats().commands > at + 1_000, "the lanes went on after the reconnect: {} at the drop, {} in all", at, s.svc.target.core_stats().commands);
    assert_eq!((s.svc.target.core_stats().errors, s.svc.target.stats().bad_capsules), (0, 0), "{:?}", s.svc.target.core_stats());
}

/// `nvmf.bench=...,time=200ms,threads=on` (2 I/O queues on 2 std threads) and the target closes
/// every connection after 24 writes (the 2 verified I/Os before the bench write at most 2) and
/// stays away (no listener) longer than the bench's time: the run ends at the bench's time,
/// not at the controller's loss timeout (1 s here), with the outage counted and `down_at_end`. One clock: the lanes and the owner both run on
/// the node's simulated clock, which only the owner's turns advance (1 µs each), so the bench's
/// time is owner turns and the end does not depend on how fast the threads run.
#[test]
fn runner_bench_on_threads_ends_at_its_time_while_the_target_stays_away() {
    let away = Rc::new(std::cell::Cell::new(None));
    let at = away.clone();
    let (clock, _side, mut h, mut env) = setup_hooked("", move |s| {
        if at.get().is_none() && s.svc.target.core_stats().writes >= 24 {
            at.set(Some(s.svc.target.core_stats().commands));
            s.svc.close_all(&mut s.node.v);
        }
    });
    let time_ns = 200_000_000;
    let args = nvmeof::cmdline::parse(&format!("nvmf.connect=10.77.0.1:4420,nqn={NQN},hostnqn={HOSTNQN},queues=2,qd=8 nvmf.bench=randrw,qd=8,time=200ms,seed=3,threads=on")).unwrap();
    let t0 = clock.now_ns();
    let cfg = HostConfig { io_queues: 2, io_depth: 8, kato_ms: 20, ctrl_loss_tmo_ns: Some(1_000_000_000), ..cfg() };
    let r = emu_runner::nvmf::initiate(&mut h, &mut env, &args, cfg, 2, 7, None).expect("initiator run");
    let took = clock.now_ns() - t0;
    let b = r.bench.clone().expect("bench ran");
    println!("{b:?} connects {} failed attempts {}; {} ms simulated", r.connects, r.failed_attempts, took / 1_000_000);
    assert!(away.get().is_some(), "the target went away mid-bench");
    assert_eq!(r.lane.releases, 0, "the drop came during the bench, not the verified run");
    assert_eq!(r.connects, 1, "never back");
    assert_eq!((b.outages, b.down_at_end, b.errors), (1, true, 0), "{b:?}");
    assert!(took < time_ns + 100_000_000, "the run ended near the bench's time, not at the loss timeout: {} ms", took / 1_000_000);
    assert!(b.outage_ns > 0 && b.outage_ns < time_ns, "{b:?}");
    assert!(b.lost >= 1 && b.lost <= 16, "in flight at the drop (2 lanes at QD 8): {b:?}");
    assert_eq!(b.reads + b.writes, b.ios + b.lost, "{b:?}");
    assert_eq!(r.bench_lanes.iter().map(|l| l.0).collect::<Vec<_>>(), vec![1, 2], "both lanes' parts counted");
    for (qid, l) in &r.bench_lanes {
        assert!(l.elapsed_ns >= time_ns && l.elapsed_ns < time_ns + 20_000_000, "queue {qid}: its time (and the last reconnect attempt's), the outage in it: {l:?}");
    }
}

/// `nvmf.verify=N,threads=on` (2 I/O queues on 2 std threads, a block range each) and the
/// target closes every connection after 600 writes: both lanes stop, each lane's model takes
/// its writes in flight as maybe landed, the controller is reconnected and the lanes resume and
/// finish their share and the read-back: 0 mismatches, 0 errors, I/O answered after the
/// reconnect.
#[test]
fn runner_verify_on_threads_resumes_after_the_target_dropped_it() {
    let dropped = Rc::new(std::cell::Cell::new(None));
    let (_clock, side, mut h, mut env) = setup_hooked("", drop_once_after_writes(600, dropped.clone()));
    let count = 4_000u64;
    let args = nvmeof::cmdline::parse(&format!("nvmf.connect=10.77.0.1:4420,nqn={NQN},hostnqn={HOSTNQN},queues=2,qd=8 nvmf.verify={count},threads=on")).unwrap();
    let r = emu_runner::nvmf::initiate(&mut h, &mut env, &args, HostConfig { io_queues: 2, io_depth: 8, kato_ms: 20, ..cfg() }, 0, 7, None).expect("initiator run");
    println!("{:?} lanes {:?}", r.lane, r.verify_lanes);
    assert!(dropped.get().is_some(), "the target dropped the initiator mid-run");
    let v = r.lane.verify;
    assert_eq!((v.mismatches, v.errors), (0, 0), "{r:?}");
    assert_eq!((r.lane.releases, r.connects), (1, 2), "released and reconnected once: {r:?}");
    assert!(r.lane.answered_after_reconnect >= 1_000, "the lanes resumed: {r:?}");
    assert_eq!(r.verify_lanes.iter().map(|l| l.0).collect::<Vec<_>>(), vec![1, 2], "both lanes finished");
    let mut sum = nvmeof::verify::VerifyResult::default();
    for (qid, l) in &r.verify_lanes {
        assert!(l.blocks_verified > 0 && l.writes + l.reads >= count / 2, "queue {qid}: {l:?}");
        sum.add(l);
    }
    assert_eq!(v, sum, "the merged tally is the lanes' sum");
    for _ in 0..2_000 {
        env.idle(&mut h.v);
    }
    let s = side.borrow();
    assert_eq!(s.svc.connections(), 0, "every queue closed after the run");
}
