//! The project's IB CM (rdma::cm) over this driver's verbs on two emulated adapters:
//! connect, data, disconnect, and 1,000 connect/disconnect cycles leaking no QP, key or page.

use emu_roce::Impairments;
use hal::DmaRegion;
use rdma::cm::*;
use rdma::*;
use testbed::{Clocked, ConnectX, Options, SimClock};

type V = testbed::Verbs;
const RW: Access = Access { local_write: true, remote_read: true, remote_write: true };
const TARGET: [u8; 4] = [10, 77, 0, 1];
const HOST: [u8; 4] = [10, 77, 0, 2];

struct Node {
    cx: ConnectX,
    v: V,
    cm: Cm<V>,
    cq: Cqn,
    buf: <V as rdma::Control>::Buf,
    lkey: Lkey,
    events: Vec<CmEvent>,
}

fn node(clock: &SimClock, ip: [u8; 4], mac: [u8; 6], base: u64, seed: u64, link: Clocked) -> Node {
    // The port answers ARP, as before the shared harness; the tests also add static neighbours.
    let opts = Options { port_answers_arp: true, ..Options::default() };
    let testbed::Node { cx, mut v, .. } = testbed::Node::with_options(clock.clone(), ip, mac, base, Box::new(link), opts).unwrap();
    let cm = Cm::new(
        &mut v,
        CmConfig { cm_response_timeout: 10, packet_life_time: 8, max_cm_retries: 3, timewait_ns: 10_000_000, seed, ..CmConfig::default() },
    )
    .unwrap();
    let cq = v.create_cq(256).unwrap();
    let buf = v.alloc_buf(64 * 1024).unwrap();
    let (lkey, _) = v.reg_mr(buf.paddr(), 64 * 1024, RW).unwrap();
    Node { cx, v, cm, cq, buf, lkey, events: Vec::new() }
}

struct World {
    clock: SimClock,
    t: Node,
    h: Node,
}

impl World {
    fn new() -> Self {
        let clock = SimClock::new();
        clock.advance(1_000_000);
        let (tm, hm) = ([2, 0, 0, 0, 0x77, 1], [2, 0, 0, 0, 0x77, 2]);
        let (a, b) = Clocked::pair(&clock, Impairments::default(), 3);
        let mut t = node(&clock, TARGET, tm, 0x1_0000_0000, 0x1111, a);
        let mut h = node(&clock, HOST, hm, 0x2_0000_0000, 0x2222, b);
        // Static neighbours: these tests are about the CM, not address resolution.
        t.v.add_neighbor(HOST, hm).unwrap();
        h.v.add_neighbor(TARGET, tm).unwrap();
        World { clock, t, h }
    }
    fn step(&mut self, dt: u64) {
        self.clock.advance(dt);
        for n in [&mut self.t, &mut self.h] {
            n.cx.poll();
            n.v.poll();
            while let Some(e) = n.cm.poll(&mut n.v, self.clock.now_ns()) {
                n.events.push(e);
            }
        }
    }
    fn run(&mut self, rounds: usize, dt: u64) {
        for _ in 0..rounds {
            self.step(dt);
        }
    }
    fn run_until(&mut self, mut f: impl FnMut(&World) -> bool) {
        for _ in 0..100_000 {
            if f(self) {
                return;
            }
            self.step(1_000);
        }
        panic!("condition not reached: host {:?} target {:?}", self.h.events, self.t.events);
    }
    fn recvs(n: &Node, k: usize) -> Vec<RecvWr> {
        (0..k).map(|i| RecvWr { wr_id: 100 + i as u64, sge: Sge { addr: n.buf.paddr() + (i * 1024) as u64, len: 1024, lkey: n.lkey } }).collect()
    }
    fn establish(&mut self, port: u16) -> (ConnId, ConnId, Qpn, Qpn) {
        let recvs = Self::recvs(&self.h, 8);
        let p = ConnectParams {
            dest_ip: TARGET,
            dest_port: port,
            src_port: 0,
            send_cq: self.h.cq,
            recv_cq: self.h.cq,
            sq_size: 32,
            rq_size: 32,
            recv_wrs: &recvs,
            private_data: b"hello",
            responder_resources: 16,
            initiator_depth: 16,
            access: RW,
        };
        let hid = self.h.cm.connect(&mut self.h.v, &p).unwrap();
        self.run_until(|w| w.t.events.iter().any(|e| matches!(e, CmEvent::ConnectRequest(_))));
        let i = self.t.events.iter().position(|e| matches!(e, CmEvent::ConnectRequest(_))).unwrap();
        let CmEvent::ConnectRequest(req) = self.t.events.remove(i) else { unreachable!() };
        let recvs = Self::recvs(&self.t, 8);
        let a = AcceptParams {
            send_cq: self.t.cq,
            recv_cq: self.t.cq,
            sq_size: 32,
            rq_size: 32,
            recv_wrs: &recvs,
            private_data: b"welcome",
            responder_resources: 16,
            initiator_depth: 16,
            access: RW,
        };
        let tq = self.t.cm.accept(&mut self.t.v, req.id, &a).unwrap();
        self.run_until(|w| {
            w.h.events.iter().any(|e| matches!(e, CmEvent::Established { .. }))
                && w.t.events.iter().any(|e| matches!(e, CmEvent::Established { .. }))
        });
        let hq = self
            .h
            .events
            .iter()
            .find_map(|e| match e {
                CmEvent::Established { id, qpn, .. } if *id == hid => Some(*qpn),
                _ => None,
            })
            .expect("host established");
        self.h.events.clear();
        self.t.events.clear();
        (hid, req.id, hq, tq)
    }
}

#[test]
fn cm_connect_send_disconnect_over_mlx5() {
    let mut w = World::new();
    w.t.cm.listen(4420).unwrap();
    let (hid, tid, hq, _tq) = w.establish(4420);
    w.h.buf.write(60_000, b"capsule!");
    let sge = Sge { addr: w.h.buf.paddr() + 60_000, len: 8, lkey: w.h.lkey };
    w.h.v.post_send(hq, &SendWr { wr_id: 1, op: SendOp::Send, sge, signaled: true, fence: false, ud: None }).unwrap();
    let mut got = Vec::new();
    for _ in 0..10_000 {
        w.step(1_000);
        let mut wc = [Completion::default(); 8];
        let n = w.t.v.poll_cq(w.t.cq, &mut wc);
        got.extend_from_slice(&wc[..n]);
        if !got.is_empty() {
            break;
        }
    }
    assert_eq!((got[0].wr_id, got[0].status, got[0].byte_len), (100, WcStatus::Success, 8), "{got:?}");
    let mut b = [0u8; 8];
    w.t.buf.read(0, &mut b);
    assert_eq!(&b, b"capsule!");
    w.h.cm.disconnect(&mut w.h.v, hid).unwrap();
    w.run_until(|w| w.h.events.contains(&CmEvent::Disconnected { id: hid }) && w.t.events.contains(&CmEvent::Disconnected { id: tid }));
}

#[test]
fn thousand_cm_cycles_over_mlx5_leak_nothing() {
    let mut w = World::new();
    w.t.cm.listen(4420).unwrap();
    let base_t = w.t.cx.counters();
    let base_h = w.h.cx.counters();
    for i in 0..1000 {
        let (hid, tid, _, _) = w.establish(4420);
        if i % 2 == 0 {
            w.h.cm.disconnect(&mut w.h.v, hid).unwrap();
        } else {
            w.t.cm.disconnect(&mut w.t.v, tid).unwrap();
        }
        w.run_until(|w| w.h.events.contains(&CmEvent::Disconnected { id: hid }) && w.t.events.contains(&CmEvent::Disconnected { id: tid }));
        w.h.events.clear();
        w.t.events.clear();
        // Let the CM's timewait (10 ms) pass: the adapter may hand the same QPN out again, and a
        // QPN still in timewait would (rightly) be rejected as a stale connection.
        w.run(2, 6_000_000);
        let mut wc = [Completion::default(); 64];
        while w.t.v.poll_cq(w.t.cq, &mut wc) > 0 {}
        while w.h.v.poll_cq(w.h.cq, &mut wc) > 0 {}
        for (n, base) in [(&w.t, &base_t), (&w.h, &base_h)] {
            let c = n.cx.counters();
            assert_eq!((c.qps, c.mkeys, c.cqs, c.pages_held), (base.qps, base.mkeys, base.cqs, base.pages_held), "cycle {i}: {c:?}");
            assert_eq!(n.v.live_qps(), 1, "cycle {i}: only QP1 left");
        }
    }
    w.run(3, 50_000_000);
    assert_eq!((w.t.cm.conn_count(), w.h.cm.conn_count()), (0, 0));
    assert_eq!(w.t.cx.counters().cq_overruns + w.h.cx.counters().cq_overruns, 0);
}
