//! NVMe-oF over the emulated adapters: appliance initiator ↔ appliance target, each a full
//! runner node (mlx5 driver + emulated ConnectX + RoCE engine), the IB CM on QP1, in one
//! process on a seeded in-memory link with a simulated clock. Connect, identify, 10,000
//! verified random writes/reads at QD1 and at QD32; a host not on the allow-list is refused;
//! keep-alive expiry frees the controller and the target sends DREQ for its queues.

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
use rdma::cm::{Cm, CmConfig};

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
    assert!(s.svc.target.core.stats.reads > 5_000 && s.svc.target.core.stats.writes > 5_000);
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
    assert_eq!(s.svc.target.core.stats.connects_refused, 1);
    assert_eq!(s.svc.target.core.live_ctrls(), 0);
    assert_eq!(s.svc.target.core.stats.reads + s.svc.target.core.stats.writes, 0);
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
    assert_eq!(s.svc.target.core.stats.ka_expired, 1);
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
    let mut failed = false;
    for _ in 0..20_000 {
        env.idle(&mut h.v);
        let now = env.now_ns();
        if host.tick(&mut h.v, now).is_err() || host.failed() {
            failed = true;
            break;
        }
    }
    assert!(failed, "the initiator noticed its queues were gone");
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
        if !d2.get() && s.svc.target.core.stats.writes >= 300 {
            d2.set(true);
            s.svc.close_all(&mut s.node.v);
            s.svc.cm.listen(4420).unwrap();
        }
    });
    let args = nvmeof::cmdline::parse(&format!("nvmf.connect=10.77.0.1:4420,nqn={NQN},hostnqn={HOSTNQN},queues=2,qd=8")).unwrap();
    let r = emu_runner::nvmf::initiate(&mut h.v, &mut env, &args, cfg(), 2_000, 7, None).expect("initiator run");
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
    let d2 = dropped.clone();
    let (clock, side, mut h, mut env) = setup_hooked("", move |s| {
        // The verified run before the bench writes ~100 blocks.
        if d2.get().is_none() && s.svc.target.core.stats.writes >= 1_500 {
            d2.set(Some(s.svc.target.core.stats.commands));
            s.svc.close_all(&mut s.node.v);
            s.svc.cm.listen(4420).unwrap();
        }
    });
    let args = nvmeof::cmdline::parse(&format!("nvmf.connect=10.77.0.1:4420,nqn={NQN},hostnqn={HOSTNQN},queues=2,qd=8 nvmf.bench=randrw,qd=8,time=150ms,seed=3")).unwrap();
    let t0 = clock.now_ns();
    let r = emu_runner::nvmf::initiate(&mut h.v, &mut env, &args, cfg(), 200, 7, None).expect("initiator run");
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
    assert!(s.svc.target.core.stats.commands > at + 1_000, "commands after the drop: {} at the drop, {} in all", at, s.svc.target.core.stats.commands);
    assert_eq!((s.svc.target.core.stats.errors, s.svc.target.stats().bad_capsules), (0, 0), "{:?}", s.svc.target.core.stats);
}
