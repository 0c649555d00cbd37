//! The NVMe-oF service glue over the real IB CM (MADs on QP1 of the soft verbs): the
//! appliance initiator (`CmHostEnv`) connects to `TargetService`, identifies, does verified
//! I/O, is refused when not allowed (Connect status) or when its CM private data is bad (REJ 28
//! with the NVMe-RDMA status), and leaves no QP behind on either side after disconnect.

use crate::common;
use common::*;

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use hal::DmaRegion;
use nvmeof::host::{ConnectPoll, Host, HostConfig, HostEnv, IoDone, IoKind};
use nvmeof::host::cm_env::CmHostEnv;
use nvmeof::nvmet::service::TargetService;
use nvmeof::nvmet::{Core, NamespaceConfig, PortConfig, SubsystemConfig, TargetConfig};
use nvmeof::wire::cm_rej;
use nvmeof::{Error, Status};
use rdma::cm::{Cm, CmConfig};
use testbed::soft::SoftFabric;
use rdma::Control;

fn cm_cfg(seed: u64) -> CmConfig {
    CmConfig { cm_response_timeout: 10, packet_life_time: 8, max_cm_retries: 3, timewait_ns: 10_000_000, seed, ..CmConfig::default() }
}

struct Side {
    svc: TargetService<TDev, RamDisk>,
    dev: TDev,
}

type Env = CmHostEnv<TDev, Box<dyn FnMut() -> u64>, Box<dyn FnMut(&mut TDev)>>;

fn setup(fabric: &SoftFabric) -> (Rc<RefCell<Side>>, TDev, Env, Rc<Cell<u64>>) {
    setup_with(fabric, vec![PortConfig { portid: 1, traddr: TARGET_IP, trsvcid: 4420, subsystems: None }], &[SUBNQN])
}

/// The service on `ports` serving one RAM namespace in each subsystem of `nqns` (the host
/// allowed), listening on 4420 and every port's service ID; the host's CM aims at 4420.
fn setup_with(fabric: &SoftFabric, ports: Vec<PortConfig>, nqns: &[&str]) -> (Rc<RefCell<Side>>, TDev, Env, Rc<Cell<u64>>) {
    let mem = MemMap::default();
    let mut tdev = TDev { dev: fabric.add_device(TARGET_IP), mem: mem.clone() };
    let cfg = TargetConfig {
        ports,
        inline_data_size: 4096,
        max_io_bytes: 32 * 1024,
        io_queue_depth: 64,
        max_io_queues: 2,
        max_ctrls: 4,
        ..TargetConfig::default()
    };
    let subs = nqns
        .iter()
        .enumerate()
        .map(|(i, nqn)| SubsystemConfig {
            nqn: nqn.to_string(),
            serial: format!("APPL000{}", i + 1),
            model: "appliance ram".into(),
            hosts: vec![HOSTNQN.into()],
            allow_any_host: false,
            namespaces: vec![NamespaceConfig { nsid: 1, dev: RamDisk::new(mem.clone(), 2048, 512), nguid: [0x11 + i as u8; 16] }],
        })
        .collect();
    let core = Core::new(cfg, subs).expect("config");
    let svc = TargetService::with_cm_config(&mut tdev, core, 16, 4420, cm_cfg(7)).expect("listen");
    let side = Rc::new(RefCell::new(Side { svc, dev: tdev }));
    let mut hdev = TDev { dev: fabric.add_device(HOST_IP), mem: MemMap::default() };
    let cm = Cm::new(&mut hdev, cm_cfg(9)).expect("host cm");
    let now = Rc::new(Cell::new(1_000_000u64));
    let (n1, n2, s2) = (now.clone(), now.clone(), side.clone());
    let clock: Box<dyn FnMut() -> u64> = Box::new(move || n1.get());
    let poll: Box<dyn FnMut(&mut TDev)> = Box::new(move |hd: &mut TDev| {
        n2.set(n2.get() + 2_000);
        hd.poll();
        let mut s = s2.borrow_mut();
        let Side { svc, dev } = &mut *s;
        dev.poll();
        svc.poll(dev, n2.get());
    });
    let env = CmHostEnv::new(cm, TARGET_IP, 4420, clock, poll);
    (side, hdev, env, now)
}

fn cfg() -> HostConfig {
    HostConfig { hostnqn: HOSTNQN.into(), io_queues: 2, io_depth: 16, max_io_bytes: 32 * 1024, kato_ms: 0, ..Default::default() }
}

#[test]
fn initiator_connects_through_the_cm_and_moves_verified_data() {
    let f = SoftFabric::new();
    let (side, mut hd, mut env, _now) = setup(&f);
    let before_t = side.borrow_mut().dev.dev.resources();
    let before_h = hd.dev.resources();
    let mut host = Host::connect(&mut hd, &mut env, cfg(), SUBNQN).expect("connect");
    assert_eq!(host.namespaces.len(), 1);
    assert_eq!((host.namespaces[0].blocks, host.namespaces[0].block_size), (2048, 512));
    assert_eq!(host.io_queues().0, 2);
    {
        let s = side.borrow();
        assert_eq!(s.svc.connections(), 3, "admin + 2 I/O queues");
        assert_eq!((s.svc.stats.accepted, s.svc.stats.established), (3, 3));
    }
    // 200 writes of distinct patterns, then read every one back.
    let mut done = [IoDone { queue: 0, slot: 0, status: Status::SUCCESS, dw0: 0, latency_ns: 0 }; 32];
    for pass in 0..2 {
        for i in 0..200u64 {
            let q = 1 + (i % 2) as u16;
            let slot = loop {
                if let Some(s) = host.alloc_slot(q) {
                    break s;
                }
                let n = env.now_ns_peek();
                let _ = host.poll(&mut hd, n, &mut done).unwrap();
                env.idle_now(&mut hd);
            };
            let lba = i * 8;
            let (buf, off, _) = host.slot_buf(q, slot);
            if pass == 0 {
                let data: Vec<u8> = (0..4096).map(|k| (k as u64 ^ i.wrapping_mul(37)) as u8).collect();
                buf.write(off, &data);
                host.submit(&mut hd, q, slot, IoKind::Write, 1, lba, 8, env.now_ns_peek()).unwrap();
            } else {
                buf.write(off, &[0u8; 4096]);
                host.submit(&mut hd, q, slot, IoKind::Read, 1, lba, 8, env.now_ns_peek()).unwrap();
            }
            // Complete it before the next (each slot's data is checked right away).
            loop {
                env.idle_now(&mut hd);
                let n = host.poll(&mut hd, env.now_ns_peek(), &mut done).unwrap();
                if n > 0 {
                    assert_eq!(n, 1);
                    assert!(done[0].status.is_success(), "{:?}", done[0].status);
                    if pass == 1 {
                        let (buf, off, _) = host.slot_buf(done[0].queue, done[0].slot);
                        let mut got = vec![0u8; 4096];
                        buf.read(off, &mut got);
                        let want: Vec<u8> = (0..4096).map(|k| (k as u64 ^ i.wrapping_mul(37)) as u8).collect();
                        assert!(got == want, "block run {i} differs");
                    }
                    break;
                }
            }
        }
    }
    host.disconnect(&mut hd, &mut env).expect("disconnect");
    for _ in 0..50 {
        env.idle_now(&mut hd);
    }
    assert_eq!(side.borrow().svc.connections(), 0);
    assert_eq!(side.borrow_mut().dev.dev.resources().qps, before_t.qps, "target QPs destroyed");
    assert_eq!(hd.dev.resources().qps, before_h.qps, "host QPs destroyed");
    assert_eq!(env.tracked(), 0);
}

#[test]
fn host_not_allowed_is_refused_at_connect_and_bad_private_data_gets_rej_28() {
    let f = SoftFabric::new();
    let (side, mut hd, mut env, _now) = setup(&f);
    let mut c = cfg();
    c.hostnqn = "nqn.2014-08.org.nvmexpress:uuid:intruder".into();
    match Host::connect(&mut hd, &mut env, c, SUBNQN) {
        Err(Error::Nvme(s)) => assert_eq!(s, Status::CONNECT_INVALID_HOST),
        other => panic!("expected Connect Invalid Host, got {:?}", other.map(|_| ())),
    }
    // A REQ whose NVMe-RDMA private data has recfmt 1: REJ reason 28 carrying the status.
    let cq = hd.create_cq(8).unwrap();
    let qp = hd.create_rc_qp(cq, cq, 4, 4).unwrap();
    let mut pd = [0u8; 32];
    pd[0] = 1; // recfmt
    pd[2] = 0; // qid 0
    pd[4] = 32; // hrqsize
    pd[6] = 31; // hsqsize
    let h = env.cm_connect(&mut hd, qp, &pd).expect("REQ sent");
    let got = loop {
        match env.cm_poll(&mut hd, h) {
            ConnectPoll::Pending => env.idle_now(&mut hd),
            other => break other,
        }
    };
    assert_eq!(got, ConnectPoll::Rejected(cm_rej::INVALID_RECFMT));
    hd.destroy_qp(qp).unwrap();
    hd.destroy_cq(cq).unwrap();
    for _ in 0..50 {
        env.idle_now(&mut hd);
    }
    let s = side.borrow();
    assert!(s.svc.stats.rejected >= 1);
    assert_eq!(s.svc.connections(), 0);
    // And the service still serves the allowed host.
    drop(s);
    let host = Host::connect(&mut hd, &mut env, cfg(), SUBNQN).expect("allowed host still served");
    host.disconnect(&mut hd, &mut env).unwrap();
}

/// Test conveniences on the env.
trait EnvExt {
    fn now_ns_peek(&mut self) -> u64;
    fn idle_now(&mut self, hd: &mut TDev);
}
impl EnvExt for Env {
    fn now_ns_peek(&mut self) -> u64 {
        nvmeof::host::HostEnv::now_ns(self)
    }
    fn idle_now(&mut self, hd: &mut TDev) {
        nvmeof::host::HostEnv::idle(self, hd)
    }
}

#[test]
fn verified_random_io_at_qd1_and_qd16_through_the_cm() {
    let f = SoftFabric::new();
    let (_side, mut hd, mut env, _now) = setup(&f);
    let mut host = Host::connect(&mut hd, &mut env, cfg(), SUBNQN).expect("connect");
    for (qd, seed) in [(1usize, 11u64), (16, 12)] {
        let r = nvmeof::verify::run(&mut host, &mut hd, &mut env, 1, 600, qd, 16, seed).expect("verified run");
        assert_eq!((r.errors, r.mismatches), (0, 0), "{r:?}");
        assert!(r.writes > 200 && r.reads > 200 && r.blocks_verified > 1000, "{r:?}");
    }
    host.disconnect(&mut hd, &mut env).unwrap();
}

/// Two ports as nvmet's configfs has them (port 1 on 4420 linked to one subsystem, port 2 on
/// 4421 to the other): each port's discovery log lists only its own subsystem with its own
/// service ID and port ID; a Connect to a subsystem through the port it is not linked to gets
/// the unknown subsystem's answer; a REQ for a service ID no port has is refused; unlinking a
/// subsystem from port 1 deletes the controller that came in there and leaves port 2's
/// controller serving verified I/O.
#[test]
fn two_ports_serve_and_list_only_the_subsystems_linked_to_them() {
    const B: &str = "nqn.2026-01.io.appliance:ram1";
    let f = SoftFabric::new();
    let ports = vec![
        PortConfig { portid: 1, traddr: TARGET_IP, trsvcid: 4420, subsystems: Some(vec![SUBNQN.into()]) },
        PortConfig { portid: 2, traddr: TARGET_IP, trsvcid: 4421, subsystems: Some(vec![B.into()]) },
    ];
    let (side, mut hd, mut env, _now) = setup_with(&f, ports, &[SUBNQN, B]);
    let before_t = side.borrow_mut().dev.dev.resources();
    for (port, portid, nqn, other) in [(4420u16, 1u16, SUBNQN, B), (4421, 2, B, SUBNQN)] {
        env.set_target(TARGET_IP, port);
        let log = Host::discover(&mut hd, &mut env, cfg()).expect("discover");
        let got: Vec<(&str, &str, u16)> = log.iter().map(|e| (e.subnqn.as_str(), e.trsvcid.as_str(), e.portid)).collect();
        assert_eq!(got, [(nqn, port.to_string().as_str(), portid)], "port {portid}'s discovery log");
        match Host::connect(&mut hd, &mut env, cfg(), other) {
            Err(Error::Nvme(s)) => assert_eq!(s, Status::CONNECT_INVALID_PARAM, "{other} through port {portid}"),
            r => panic!("{other} through port {portid}: {:?}", r.map(|_| ())),
        }
    }
    env.set_target(TARGET_IP, 4422);
    assert!(Host::connect(&mut hd, &mut env, cfg(), SUBNQN).is_err(), "no port on 4422");
    env.set_target(TARGET_IP, 4420);
    let mut a = Host::connect(&mut hd, &mut env, cfg(), SUBNQN).expect("A through port 1");
    env.set_target(TARGET_IP, 4421);
    let mut b = Host::connect(&mut hd, &mut env, cfg(), B).expect("B through port 2");
    assert_eq!(side.borrow().svc.connections(), 6, "two controllers, admin + 2 I/O queues each");
    {
        let mut s = side.borrow_mut();
        let Side { svc, dev } = &mut *s;
        assert!(!svc.target.unlink_subsystem(dev, 2, "nqn.2026-01.io.appliance:none"), "no such subsystem");
        assert!(!svc.target.unlink_subsystem(dev, 3, SUBNQN), "no such port");
        assert!(svc.target.unlink_subsystem(dev, 2, SUBNQN), "not linked there: nothing deleted");
        assert_eq!(svc.target.core.subsystem_linked(1, SUBNQN), Some(true));
        assert!(svc.target.unlink_subsystem(dev, 1, SUBNQN));
        assert_eq!(svc.target.core.subsystem_linked(1, SUBNQN), Some(false));
    }
    for _ in 0..50 {
        env.idle_now(&mut hd);
    }
    assert_eq!(side.borrow().svc.connections(), 3, "A's controller deleted, B's queues kept");
    let mut done = [IoDone { queue: 0, slot: 0, status: Status::SUCCESS, dw0: 0, latency_ns: 0 }; 4];
    for (kind, fill) in [(IoKind::Write, 0x5au8), (IoKind::Read, 0)] {
        let slot = b.alloc_slot(1).expect("slot");
        let (buf, off, _) = b.slot_buf(1, slot);
        buf.write(off, &[fill; 4096]);
        b.submit(&mut hd, 1, slot, kind, 1, 64, 8, env.now_ns_peek()).expect("submit");
        let n = loop {
            env.idle_now(&mut hd);
            let n = b.poll(&mut hd, env.now_ns_peek(), &mut done).expect("poll");
            if n > 0 {
                break n;
            }
        };
        assert_eq!(n, 1);
        assert!(done[0].status.is_success(), "{:?}", done[0].status);
        if kind == IoKind::Read {
            let mut got = vec![0u8; 4096];
            b.slot_buf(1, slot).0.read(off, &mut got);
            assert!(got.iter().all(|&x| x == 0x5a), "B's data read back through port 2");
        }
    }
    let _ = a.poll(&mut hd, env.now_ns_peek(), &mut done);
    let _ = a.disconnect(&mut hd, &mut env);
    b.disconnect(&mut hd, &mut env).expect("B disconnects");
    for _ in 0..50 {
        env.idle_now(&mut hd);
    }
    assert_eq!(side.borrow().svc.connections(), 0);
    assert_eq!(side.borrow_mut().dev.dev.resources().qps, before_t.qps, "target QPs destroyed");
}
