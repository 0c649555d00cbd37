//! Shared CM test harness over soft verbs: two nodes (target, host), a fake clock, MAD taps.
#![allow(dead_code)]
use std::sync::{Arc, Mutex};

use hal::DmaRegion;
use rdma::cm::*;
use testbed::soft::{SoftBuf, SoftDevice, SoftFabric};
use rdma::*;

pub const TARGET: [u8; 4] = [10, 77, 0, 1];
pub const HOST: [u8; 4] = [10, 77, 0, 2];
pub const RW: Access = Access { local_write: true, remote_read: true, remote_write: true };

pub fn cfg(seed: u64) -> CmConfig {
    CmConfig {
        // Small timers so tests run fast on a fake clock (4.096 µs × 2^v).
        cm_response_timeout: 10,
        packet_life_time: 8,
        max_cm_retries: 3,
        timewait_ns: 10_000_000,
        seed,
        ..CmConfig::default()
    }
}

pub struct Node {
    pub dev: SoftDevice,
    pub cm: Cm<SoftDevice>,
    pub cq: Cqn,
    pub buf: SoftBuf,
    pub lkey: Lkey,
    pub rkey: Rkey,
    pub events: Vec<CmEvent>,
}

impl Node {
    pub fn new(f: &SoftFabric, ip: [u8; 4], seed: u64) -> Self {
        Self::with_cfg(f, ip, cfg(seed))
    }
    pub fn with_cfg(f: &SoftFabric, ip: [u8; 4], c: CmConfig) -> Self {
        let mut dev = f.add_device(ip);
        let cm = Cm::new(&mut dev, c).unwrap();
        let cq = dev.create_cq(256).unwrap();
        let buf = dev.alloc_buf(64 * 1024).unwrap();
        let (lkey, rkey) = dev.reg_mr(buf.paddr(), 64 * 1024, RW).unwrap();
        Node { dev, cm, cq, buf, lkey, rkey, events: Vec::new() }
    }
    pub fn recvs(&self, n: usize) -> Vec<RecvWr> {
        (0..n).map(|i| RecvWr { wr_id: 100 + i as u64, sge: Sge { addr: self.buf.paddr() + (i * 1024) as u64, len: 1024, lkey: self.lkey } }).collect()
    }
}

pub struct World {
    pub f: SoftFabric,
    pub t: Node,
    pub h: Node,
    pub now: u64,
}

impl World {
    pub fn new() -> Self {
        Self::with_target_cfg(cfg(0x1111))
    }
    /// A world whose target CM runs with `c`.
    pub fn with_target_cfg(c: CmConfig) -> Self {
        let f = SoftFabric::new();
        let t = Node::with_cfg(&f, TARGET, c);
        let h = Node::new(&f, HOST, 0x2222);
        World { f, t, h, now: 1_000_000 }
    }
    /// One round: poll both devices and CMs; advance the clock by `dt` ns.
    pub fn step(&mut self, dt: u64) {
        self.now += dt;
        for n in [&mut self.t, &mut self.h] {
            n.dev.poll();
            while let Some(e) = n.cm.poll(&mut n.dev, self.now) {
                n.events.push(e);
            }
        }
    }
    pub fn run(&mut self, rounds: usize, dt: u64) {
        for _ in 0..rounds {
            self.step(dt);
        }
    }
    pub fn connect(&mut self, port: u16, pd: &[u8]) -> ConnId {
        let recvs = self.h.recvs(8);
        let p = ConnectParams {
            dest_ip: TARGET,
            dest_port: port,
            src_port: 0,
            send_cq: self.h.cq,
            recv_cq: self.h.cq,
            sq_size: 32,
            rq_size: 32,
            recv_wrs: &recvs,
            private_data: pd,
            responder_resources: 16,
            initiator_depth: 16,
            access: RW,
        };
        self.h.cm.connect(&mut self.h.dev, &p).unwrap()
    }
    pub fn accept(&mut self, id: ConnId, pd: &[u8]) -> Qpn {
        let recvs: Vec<RecvWr> = self.t.recvs(8);
        let p = AcceptParams {
            send_cq: self.t.cq,
            recv_cq: self.t.cq,
            sq_size: 32,
            rq_size: 32,
            recv_wrs: &recvs,
            private_data: pd,
            responder_resources: 16,
            initiator_depth: 16,
            access: RW,
        };
        self.t.cm.accept(&mut self.t.dev, id, &p).unwrap()
    }
    pub fn take_request(&mut self) -> ConnectRequest {
        let i = self.t.events.iter().position(|e| matches!(e, CmEvent::ConnectRequest(_))).expect("a ConnectRequest");
        match self.t.events.remove(i) {
            CmEvent::ConnectRequest(r) => r,
            _ => unreachable!(),
        }
    }
    /// Connect, accept, run until both sides are established. Returns (host id, target id, host qpn, target qpn).
    pub fn establish(&mut self, port: u16) -> (ConnId, ConnId, Qpn, Qpn) {
        let hid = self.connect(port, b"hello");
        self.run(2, 1000);
        let req = self.take_request();
        let tq = self.accept(req.id, b"welcome");
        self.run(3, 1000);
        let hq = match self.h.events.pop() {
            Some(CmEvent::Established { id, qpn, .. }) if id == hid => qpn,
            e => panic!("host: {e:?}"),
        };
        assert!(matches!(self.t.events.pop(), Some(CmEvent::Established { id, qpn, .. }) if id == req.id && qpn == tq));
        (hid, req.id, hq, tq)
    }
}

pub fn attr_of(mad: &[u8]) -> u16 {
    u16::from_be_bytes([mad[16], mad[17]])
}

/// The MADs a tap saw, by source address (the fabric's UD filter fills it).
pub type MadLog = Arc<Mutex<Vec<(Ipv4, Vec<u8>)>>>;

/// Record every MAD on the fabric; drop the ones `drop` says to.
pub fn tap(f: &SoftFabric, mut drop: impl FnMut(u16, usize) -> bool + Send + 'static) -> MadLog {
    tap_to(f, move |a, n, _| drop(a, n))
}

/// Like `tap`, the predicate also sees the destination address.
pub fn tap_to(f: &SoftFabric, mut drop: impl FnMut(u16, usize, Ipv4) -> bool + Send + 'static) -> MadLog {
    let log = Arc::new(Mutex::new(Vec::new()));
    let l2 = log.clone();
    let mut counts = std::collections::HashMap::<u16, usize>::new();
    f.set_ud_filter(Some(Box::new(move |src, dst, p: &[u8]| {
        let a = attr_of(p);
        let n = counts.entry(a).or_insert(0);
        *n += 1;
        l2.lock().unwrap().push((src, p.to_vec()));
        !drop(a, *n, dst)
    })));
    log
}


pub fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// The admin-queue REQ Linux nvme-rdma sent (see tests/cm_wire.rs for the derivation).
pub fn linux_req_mad() -> Vec<u8> {
    let mut m = hex(
        "01 07 02 03 00 00 00 00 00 00 00 02 7e 98 0c 6f 00 10 00 00 00 00 00 00
         6f 0c 98 7e 00 00 00 00 00 00 00 00 01 06 11 44 50 54 00 ff fe 77 00 02
         00 00 00 00 00 00 00 00 00 00 11 80 00 00 00 00 00 00 00 a1 2e d2 69 a7
         ff ff 37 f0 ff ff ff ff 00 00 00 00 00 00 00 00 00 00 ff ff 0a 4d 00 02
         00 00 00 00 00 00 00 00 00 00 ff ff 0a 4d 00 01 c9 31 a0 00 00 40 00 98",
    );
    m.resize(256, 0);
    let pd = hex(
        "00 40 eb 6a 00 00 00 00 00 00 00 00 00 00 00 00 0a 4d 00 02
         00 00 00 00 00 00 00 00 00 00 00 00 0a 4d 00 01
         00 00 00 00 20 00 1f 00",
    );
    m[164..164 + pd.len()].copy_from_slice(&pd);
    m
}

