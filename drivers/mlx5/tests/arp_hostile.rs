//! ARP against a hostile link (issue 10): the driver on an emulated adapter (firmware ARP off)
//! resolves a peer, then 1,000 spoofed ARP frames (gratuitous, replies to nothing, requests
//! claiming the peer's address, requests for other IPs, a flood of distinct senders) neither
//! redirect the peer nor exhaust the neighbour table; the refusals are counted.

use emu_connectx::{ConnectX, PhysMem, SimClock, SimHal};
use emu_roce::{Impairments, Link, MemLink};
use mlx5::arp;
use mlx5::{Config, Mlx5Verbs};
use rdma::neigh::{ArpOp, NeighConfig};
use rdma::{Control, Neighbours};

const ME: [u8; 4] = [10, 0, 0, 1];
const MY_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const PEER: [u8; 4] = [10, 0, 0, 2];
const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
const EVIL: [u8; 6] = [2, 0, 0, 0, 0xee, 0xee];

struct Rig {
    cx: ConnectX,
    v: Mlx5Verbs<SimHal, emu_connectx::Bar0>,
    wire: MemLink,
    clock: SimClock,
}

impl Rig {
    fn new() -> Self {
        let clock = SimClock::new();
        clock.advance(1_000_000);
        let mem = PhysMem::with_base(0x1_0000_0000);
        let hal = SimHal::new(mem.clone(), clock.clone());
        let cx = ConnectX::new(mem, clock.clone(), emu_connectx::Config { mac: MY_MAC, port_answers_arp: false, ..Default::default() });
        let v = Mlx5Verbs::bring_up(hal, cx.bar0(), Config { ipv4: ME, ..Config::default() }).unwrap();
        assert!(v.raw_eth);
        let (dev_end, wire) = MemLink::pair(Impairments::default(), 5);
        cx.attach_link(Box::new(dev_end));
        Rig { cx, v, wire, clock }
    }
    fn turn(&mut self) {
        self.clock.advance(1000);
        self.cx.poll();
        self.v.poll();
        self.cx.poll();
    }
    /// ARP frames the device put on the wire.
    fn sent(&mut self) -> Vec<rdma::neigh::ArpPacket> {
        let mut out = Vec::new();
        while let Some(f) = self.wire.poll() {
            if let Some(a) = arp::parse(&f) {
                out.push(a);
            }
        }
        out
    }
}

#[test]
fn thousand_spoofed_arp_frames_neither_redirect_nor_exhaust_the_table() {
    let mut r = Rig::new();
    // Resolve the peer the proper way: our request, its reply.
    assert_eq!(r.v.resolve_mac(PEER), None);
    r.turn();
    let out = r.sent();
    assert!(out.iter().any(|a| a.op == ArpOp::Request && a.tpa == PEER), "{out:?}");
    r.wire.send(&arp::reply(PEER_MAC, PEER, MY_MAC, ME));
    r.turn();
    assert_eq!(r.v.resolve_mac(PEER), Some(PEER_MAC));

    let mut answered = 0;
    for i in 0..1000u32 {
        let other = [10, 1, (i >> 8) as u8, i as u8];
        let f = match i % 5 {
            0 => arp::build(ArpOp::Request, EVIL, PEER, [0xff; 6], [0; 6], PEER), // gratuitous for the peer
            1 => arp::build(ArpOp::Reply, EVIL, PEER, MY_MAC, MY_MAC, ME),      // reply to nothing
            2 => arp::build(ArpOp::Request, EVIL, PEER, [0xff; 6], [0; 6], ME), // "the peer" asks us
            3 => arp::build(ArpOp::Request, EVIL, other, [0xff; 6], [0; 6], [10, 0, 0, 9]), // for another IP
            _ => arp::build(ArpOp::Request, [2, 0, 0, 1, (i >> 8) as u8, i as u8], other, [0xff; 6], [0; 6], ME), // flood of senders
        };
        r.wire.send(&f);
        if i % 8 == 7 {
            r.turn();
            answered += r.sent().iter().filter(|a| a.op == ArpOp::Reply).count();
        }
    }
    r.turn();
    answered += r.sent().iter().filter(|a| a.op == ArpOp::Reply).count();

    assert_eq!(r.v.resolve_mac(PEER), Some(PEER_MAC), "the peer was redirected");
    let s = r.v.neigh_stats();
    assert_eq!(s.refused, 600, "{s:?}");
    assert_eq!(r.v.neigh_len(), NeighConfig::default().capacity, "bounded");
    // Requests for our address were answered (400: 200 "from the peer", 200 distinct senders).
    assert_eq!(answered as u64 + r.v.arp_replies_dropped, 400);
    assert_eq!(r.v.arp_replies_dropped, 0);
    // A new neighbour we ask for still gets in.
    let c = [10, 0, 0, 3];
    assert_eq!(r.v.resolve_mac(c), None);
    r.turn();
    assert!(r.sent().iter().any(|a| a.op == ArpOp::Request && a.tpa == c));
    r.wire.send(&arp::reply([2, 0, 0, 0, 0, 3], c, MY_MAC, ME));
    r.turn();
    assert_eq!(r.v.resolve_mac(c), Some([2, 0, 0, 0, 0, 3]));
    assert_eq!(r.v.resolve_mac(PEER), Some(PEER_MAC));
    let cx = r.cx.clone();
    r.v.shutdown().unwrap();
    assert_eq!(cx.counters().live_objects(), 0);
}
