//! Queue groups on threads (issue #13): 2 and 4 `mlx5::QueueGroup`s of one device, each moved
//! to a std thread of its own, carry verified RDMA traffic with a peer node at the same time:
//! SENDs from the peer land in the group's SRQ and are checked byte for byte, and each group
//! QP RDMA-WRITEs a pattern into the peer's memory and READs it back. The control part (the
//! device, `Mlx5`) stays on the main thread, which also drives both emulated adapters and the
//! virtual clock; between two rounds the groups come back to it, and it destroys and creates
//! QPs in them. At the end every object is gone from the adapter.
//!
//! A second test keeps every group on its thread from start to end: the control part makes and
//! connects QPs for a group it does not hold (`Mlx5::make_group_qp` from the group's
//! `GroupHandle`), hands them over a channel (standing in for the app's hand-off ring) for the
//! group to attach at the top of its turn, and takes them back the same way (destroyed by QPN,
//! then detached by the group), over several rounds of verified traffic.
//!
//! The emulated adapter, its memory, clock and link are shared by the threads as hardware is
//! (a lock per access inside the stand-in); the groups themselves share nothing.
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use emu_connectx::{Bar0, SimDma};
use emu_roce::Impairments;
use hal::DmaRegion;
use mlx5::{GroupHandle, GroupQp, QueueGroup};
use rdma::{Access, Completion, Control, Cqn, DataPath, Lkey, Qpn, RecvWr, Rkey, SendOp, SendWr, Sge, WcOpcode, WcStatus};
use testbed::{Clocked, Node, SimClock};

type G = QueueGroup<SimDma, Bar0>;

/// Group QPs per group, peer SENDs per QP and round, WRITE+READ pairs per QP and round.
const QPS: usize = 2;
const MSGS: u64 = 120;
const RW_ROUNDS: u64 = 24;
/// Peer SENDs outstanding per connection (2 x 8 < the receives a group keeps posted).
const DEPTH: u64 = 8;
/// Receives a group keeps posted in its SRQ, each a `RECV_SLOT`-byte slot.
const RECVS: u64 = 32;
const RECV_SLOT: u64 = 1024;
/// Where a group's WRITE source and READ destination areas start in its buffer, each 8 KiB a QP.
const RW_AREA: u64 = RECVS * RECV_SLOT;
const RW_SLOT: u64 = 8192;
const GROUP_BUF: usize = (RW_AREA + 2 * QPS as u64 * RW_SLOT) as usize;
/// Give up (and fail) past this much virtual time.
const VIRTUAL_LIMIT_NS: u64 = 60_000_000_000;

/// What a peer SEND carries: its sequence number, then a fill derived from the connection.
fn message(conn: usize, seq: u64) -> Vec<u8> {
    let len = 64 + (seq % 7) as usize * 130;
    let mut m = vec![(conn as u64 * 37 + seq) as u8; len];
    m[..8].copy_from_slice(&seq.to_le_bytes());
    m
}

/// The bytes QP `conn` writes to the peer in round `r` (over several 1 KiB packets).
fn pattern(conn: usize, r: u64) -> Vec<u8> {
    let len = 4096 + (r % 3) as usize * 1000;
    (0..len).map(|i| (i as u64 * 31 + r * 7 + conn as u64 * 3) as u8).collect()
}

/// A group as handed to its thread: the group, its QPs (connection numbers and QPNs), its
/// buffer and key, and where its QPs' areas are in the peer's memory.
struct Work {
    g: G,
    conns: Vec<(usize, Qpn)>,
    buf: SimDma,
    lkey: Lkey,
    peer_base: u64,
    rkey: Rkey,
    round: u64,
}

/// Tallies a thread hands back with its group.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Tally {
    recvs: u64,
    recv_bytes: u64,
    writes: u64,
    reads: u64,
    rw_bytes: u64,
}

/// The poller of one group on its own thread: keeps its SRQ stocked, checks every message in
/// order per connection, runs WRITE-then-READ-back rounds per QP, until all are done.
fn serve(mut w: Work, stop: Arc<AtomicBool>) -> (Work, Tally) {
    let mut t = Tally::default();
    let (cq, srq) = (w.g.cqn(), w.g.srqn());
    let sge = |w: &Work, off: u64, len: u32| Sge { addr: w.buf.paddr() + off, len, lkey: w.lkey };
    let recvs: Vec<RecvWr> = (0..RECVS).map(|s| RecvWr { wr_id: s, sge: sge(&w, s * RECV_SLOT, RECV_SLOT as u32) }).collect();
    if w.round == 0 {
        // Later rounds find the SRQ stocked: every receive consumed was posted again.
        w.g.post_srq_recv_batch(srq, &recvs).unwrap();
    }
    let n = w.conns.len();
    let mut next = vec![0u64; n];
    let mut rounds = vec![0u64; n];
    // Start each QP's first round: WRITE the pattern to the peer.
    let post_write = |w: &mut Work, k: usize, r: u64| {
        let (conn, q) = w.conns[k];
        let data = pattern(conn, r + w.round * RW_ROUNDS);
        let src = RW_AREA + k as u64 * RW_SLOT;
        w.buf.write(src as usize, &data);
        let op = SendOp::RdmaWrite { remote_addr: w.peer_base + conn as u64 * RW_SLOT, rkey: w.rkey };
        let wr = SendWr { wr_id: (k as u64) << 32 | r << 1, op, sge: sge(w, src, data.len() as u32), signaled: true, fence: false, ud: None };
        w.g.post_send(q, &wr).unwrap();
    };
    for k in 0..n {
        post_write(&mut w, k, 0);
    }
    let mut wc = [Completion::default(); 32];
    while next.iter().any(|&m| m < MSGS) || rounds.iter().any(|&r| r < RW_ROUNDS) {
        assert!(!stop.load(Relaxed), "stopped: messages {next:?}, rounds {rounds:?}");
        let got = w.g.poll_cq(cq, &mut wc);
        if got == 0 {
            thread::sleep(Duration::from_micros(20));
            continue;
        }
        for c in &wc[..got] {
            assert_eq!(c.status, WcStatus::Success, "{c:?}");
            let k = w.conns.iter().position(|&(_, q)| q == c.qpn).expect("a QP of this group");
            let conn = w.conns[k].0;
            match c.opcode {
                WcOpcode::Recv => {
                    let want = message(conn, next[k]);
                    let mut got = vec![0u8; c.byte_len as usize];
                    w.buf.read((c.wr_id * RECV_SLOT) as usize, &mut got);
                    assert_eq!(got, want, "connection {conn}: message {} whole and in order", next[k]);
                    next[k] += 1;
                    t.recvs += 1;
                    t.recv_bytes += got.len() as u64;
                    let again = RecvWr { wr_id: c.wr_id, sge: sge(&w, c.wr_id * RECV_SLOT, RECV_SLOT as u32) };
                    w.g.post_srq_recv(srq, &again).unwrap();
                }
                WcOpcode::RdmaWrite => {
                    // Read the written bytes back into the QP's READ area.
                    let r = (c.wr_id & 0xffff_ffff) >> 1;
                    let len = pattern(conn, r + w.round * RW_ROUNDS).len() as u32;
                    let dst = RW_AREA + (QPS + k) as u64 * RW_SLOT;
                    w.buf.write(dst as usize, &vec![0u8; len as usize]);
                    let op = SendOp::RdmaRead { remote_addr: w.peer_base + conn as u64 * RW_SLOT, rkey: w.rkey };
                    let wr = SendWr { wr_id: c.wr_id | 1, op, sge: sge(&w, dst, len), signaled: true, fence: false, ud: None };
                    w.g.post_send(c.qpn, &wr).unwrap();
                    t.writes += 1;
                }
                WcOpcode::RdmaRead => {
                    let r = (c.wr_id & 0xffff_ffff) >> 1;
                    let want = pattern(conn, r + w.round * RW_ROUNDS);
                    let mut back = vec![0u8; want.len()];
                    w.buf.read((RW_AREA + (QPS + k) as u64 * RW_SLOT) as usize, &mut back);
                    assert_eq!(back, want, "connection {conn}: round {r} read back as written");
                    t.reads += 1;
                    t.rw_bytes += 2 * want.len() as u64;
                    rounds[k] = r + 1;
                    if r + 1 < RW_ROUNDS {
                        post_write(&mut w, k, r + 1);
                    }
                }
                other => panic!("unexpected completion {other:?}: {c:?}"),
            }
        }
    }
    (w, t)
}

/// The peer's SENDs towards every group QP, paced to `DEPTH` outstanding per connection.
struct Sender<'a> {
    qps: Vec<Qpn>,
    /// The number of `qps[0]`'s connection in the messages (they are numbered on from it).
    base: usize,
    cq: Cqn,
    buf: &'a SimDma,
    lkey: Lkey,
    sent: Vec<u64>,
    done: Vec<u64>,
}

impl Sender<'_> {
    fn turn(&mut self, b: &mut Node) {
        let mut wc = [Completion::default(); 32];
        let n = b.v.poll_cq(self.cq, &mut wc);
        for c in &wc[..n] {
            assert_eq!((c.status, c.opcode), (WcStatus::Success, WcOpcode::Send), "{c:?}");
            self.done[(c.wr_id >> 32) as usize] += 1;
        }
        for conn in 0..self.qps.len() {
            while self.sent[conn] < MSGS && self.sent[conn] - self.done[conn] < DEPTH {
                let seq = self.sent[conn];
                let m = message(self.base + conn, seq);
                let off = (conn as u64 * DEPTH + seq % DEPTH) * RECV_SLOT;
                self.buf.write(off as usize, &m);
                let sge = Sge { addr: self.buf.paddr() + off, len: m.len() as u32, lkey: self.lkey };
                let wr = SendWr { wr_id: (conn as u64) << 32 | seq, op: SendOp::Send, sge, signaled: true, fence: false, ud: None };
                b.v.post_send(self.qps[conn], &wr).unwrap();
                self.sent[conn] += 1;
            }
        }
    }
}

/// A group QP in `g` connected to a fresh peer QP (on the peer's one CQ).
fn connect(a: &mut Node, b: &mut Node, g: &mut G, pcq: Cqn) -> (Qpn, Qpn) {
    let q = a.v.test_device().create_group_qp(g, 6).unwrap();
    let p = b.v.create_rc_qp(pcq, pcq, 2 * DEPTH as u32, 1).unwrap();
    let to_a = a.rc_attrs_towards(q);
    b.v.connect_rc_qp(p, &to_a).unwrap();
    let to_b = b.rc_attrs_towards(p);
    a.v.test_device().connect_group_qp(g, q, &to_b).unwrap();
    (q, p)
}

fn counts(n: &Node) -> (usize, usize, usize) {
    (n.v.live_qps(), n.v.live_cqs(), n.v.live_srqs())
}

/// Nodes a (10.0.NET.1) and b (10.0.NET.2) on one clocked link (seeded by NET), one clock.
fn two_nodes(net: u8) -> (SimClock, Node, Node) {
    let clock = SimClock::new();
    let (la, lb) = Clocked::pair(&clock, Impairments::default(), u64::from(net));
    let a = Node::new(clock.clone(), [10, 0, net, 1], [2, 0, 0, 0, net, 1], 0x1_0000_0000, Box::new(la)).expect("node a");
    let b = Node::new(clock.clone(), [10, 0, net, 2], [2, 0, 0, 0, net, 2], 0x2_0000_0000, Box::new(lb)).expect("node b");
    (clock, a, b)
}

fn groups_on_threads(ngroups: usize) {
    let (clock, mut a, mut b) = two_nodes(13);
    let (base_a, base_b) = (counts(&a), counts(&b));
    let conns = ngroups * QPS;
    // The peer: one CQ, a send area and the area the groups WRITE to and READ from.
    let pcq = b.v.create_cq(1024).unwrap();
    let send_buf = b.v.alloc_buf(conns * (DEPTH * RECV_SLOT) as usize).unwrap();
    let (send_lkey, _) = b.v.reg_mr(send_buf.paddr(), send_buf.len() as u64, Access { local_write: true, ..Default::default() }).unwrap();
    let target = b.v.alloc_buf(conns * RW_SLOT as usize).unwrap();
    let (target_lkey, rkey) = b.v.reg_mr(target.paddr(), target.len() as u64, Access { local_write: true, remote_read: true, remote_write: true }).unwrap();
    // The groups, each with its buffer and QPS connections (numbered across groups).
    let mut works = Vec::new();
    let mut peer_qps = Vec::new();
    for _ in 0..ngroups {
        let mut g = a.v.test_device().create_group(8, 6).unwrap();
        let buf = a.v.alloc_buf(GROUP_BUF).unwrap();
        let (lkey, _) = a.v.reg_mr(buf.paddr(), GROUP_BUF as u64, Access { local_write: true, ..Default::default() }).unwrap();
        let mut mine = Vec::new();
        for _ in 0..QPS {
            let (q, p) = connect(&mut a, &mut b, &mut g, pcq);
            mine.push((peer_qps.len(), q));
            peer_qps.push(p);
        }
        works.push(Work { g, conns: mine, buf, lkey, peer_base: target.paddr(), rkey, round: 0 });
    }
    assert_eq!(a.v.live_groups(), ngroups);
    let mut total = Tally::default();
    for round in 0..2u64 {
        let stop = Arc::new(AtomicBool::new(false));
        let handles: Vec<_> = works
            .drain(..)
            .map(|mut w| {
                w.round = round;
                let stop = stop.clone();
                thread::spawn(move || serve(w, stop))
            })
            .collect();
        let mut tx = Sender { qps: peer_qps.clone(), base: 0, cq: pcq, buf: &send_buf, lkey: send_lkey, sent: vec![0; conns], done: vec![0; conns] };
        // The main thread: the device's housekeeping, both adapters, the peer, virtual time.
        let start = clock.now_ns();
        while !handles.iter().all(|h| h.is_finished()) {
            a.poll();
            tx.turn(&mut b);
            b.poll();
            clock.advance(1_000);
            if clock.now_ns() - start > VIRTUAL_LIMIT_NS {
                stop.store(true, Relaxed);
            }
        }
        for h in handles {
            let (w, t) = h.join().expect("a group's thread failed");
            assert_eq!((t.recvs, t.writes, t.reads), (QPS as u64 * MSGS, QPS as u64 * RW_ROUNDS, QPS as u64 * RW_ROUNDS), "{t:?}");
            total.recvs += t.recvs;
            total.recv_bytes += t.recv_bytes;
            total.rw_bytes += t.rw_bytes;
            works.push(w);
        }
        assert_eq!(tx.done, vec![MSGS; conns], "every peer SEND acknowledged");
        // Back on the main thread: the device is fine, each group saw only its own traffic.
        for w in works.iter_mut() {
            assert!(!w.g.sync(), "the device did not fail");
            let st = w.g.stats();
            assert_eq!(st.bad_cqes, 0, "{st:?}");
            assert_eq!(st.completions, (round + 1) * QPS as u64 * (MSGS + 2 * RW_ROUNDS), "{st:?}");
        }
        // The control part replaces the first QP of every group with a new one; the next round
        // runs on it and on the QP kept.
        for w in works.iter_mut() {
            let (conn, old) = w.conns[0];
            a.v.test_device().destroy_group_qp(&mut w.g, old).unwrap();
            b.v.destroy_qp(peer_qps[conn]).unwrap();
            let (q, p) = connect(&mut a, &mut b, &mut w.g, pcq);
            w.conns[0] = (conn, q);
            peer_qps[conn] = p;
        }
    }
    eprintln!(
        "GROUP-THREADS groups={ngroups} threads={ngroups} messages={} message_bytes={} rdma_rw_bytes={} virtual_ms={}",
        total.recvs,
        total.recv_bytes,
        total.rw_bytes,
        clock.now_ns() / 1_000_000
    );
    // Teardown by the control part: no object left beyond what the nodes had at the start.
    for w in works.iter_mut() {
        for &(conn, q) in &w.conns {
            a.v.test_device().destroy_group_qp(&mut w.g, q).unwrap();
            b.v.destroy_qp(peer_qps[conn]).unwrap();
        }
    }
    for w in works {
        let Work { g, buf, lkey, .. } = w;
        assert_eq!(g.live_qps(), 0);
        a.v.test_device().destroy_group(g).unwrap();
        a.v.dereg_mr(lkey).unwrap();
        drop(buf);
    }
    b.v.dereg_mr(send_lkey).unwrap();
    b.v.dereg_mr(target_lkey).unwrap();
    b.v.destroy_cq(pcq).unwrap();
    drop((send_buf, target));
    back_to_baseline_and_shut_down(a, b, base_a, base_b);
}

/// The groups released, both nodes' objects back at `base_a`/`base_b` (as [`counts`]), then
/// each node shut down with every page, adapter object and DMA region back.
fn back_to_baseline_and_shut_down(a: Node, b: Node, base_a: (usize, usize, usize), base_b: (usize, usize, usize)) {
    assert_eq!(a.v.live_groups(), 0);
    assert_eq!((counts(&a), counts(&b)), (base_a, base_b), "live QPs, CQs, SRQs back to the baseline");
    for n in [a, b] {
        let (cx, mem) = (n.cx.clone(), n.hal.mem().clone());
        let st = n.v.shutdown().unwrap();
        assert_eq!(st.pages_given, st.pages_reclaimed);
        let c = cx.counters();
        assert_eq!((c.live_objects(), c.pages_held, c.objects_abandoned), (0, 0, 0), "{c:?}");
        assert_eq!(mem.stats().regions, 0, "every ring and buffer freed");
    }
}

#[test]
fn two_groups_on_two_threads() {
    groups_on_threads(2);
}

#[test]
fn four_groups_on_four_threads() {
    groups_on_threads(4);
}

/// Owner → group (the test's stand-in for the hand-off ring).
enum ToGroup {
    /// Attach this QP; its messages are numbered as connection `conn`.
    Attach(GroupQp<SimDma>, usize),
    /// The QP was destroyed on the adapter: let it go.
    Detach(Qpn),
    /// Hand the group back.
    Stop,
}

/// Group → owner.
enum FromGroup {
    Attached(Qpn),
    /// Every message of the QP's connection came in.
    AllIn(Qpn),
    Detached(GroupQp<SimDma>),
}

/// A group that stays on its thread: at the top of each turn it takes what the owner sent
/// (attach, detach, stop), then polls its CQ, checks every message in order per connection
/// and re-posts the receive.
fn serve_handed(mut g: G, buf: SimDma, lkey: Lkey, inbox: mpsc::Receiver<ToGroup>, outbox: mpsc::Sender<FromGroup>, stop: Arc<AtomicBool>) -> (G, SimDma, Tally) {
    let mut t = Tally::default();
    let (cq, srq) = (g.cqn(), g.srqn());
    let sge = |s: u64| Sge { addr: buf.paddr() + s * RECV_SLOT, len: RECV_SLOT as u32, lkey };
    let recvs: Vec<RecvWr> = (0..RECVS).map(|s| RecvWr { wr_id: s, sge: sge(s) }).collect();
    g.post_srq_recv_batch(srq, &recvs).unwrap();
    // Live connections: (QPN, connection number, next message expected).
    let mut conns: Vec<(Qpn, usize, u64)> = Vec::new();
    let mut wc = [Completion::default(); 32];
    loop {
        assert!(!stop.load(Relaxed), "stopped: connections {:?}", conns.iter().map(|c| (c.1, c.2)).collect::<Vec<_>>());
        while let Ok(m) = inbox.try_recv() {
            match m {
                ToGroup::Attach(q, conn) => {
                    let qpn = g.attach_qp(q).map_err(|(e, _)| e).expect("a QP made for this group");
                    conns.push((qpn, conn, 0));
                    outbox.send(FromGroup::Attached(qpn)).unwrap();
                }
                ToGroup::Detach(qpn) => {
                    let k = conns.iter().position(|c| c.0 == qpn).expect("a QP of this group");
                    assert_eq!(conns[k].2, MSGS, "connection {}: every message in before it goes", conns[k].1);
                    conns.remove(k);
                    outbox.send(FromGroup::Detached(g.detach_qp(qpn).unwrap())).unwrap();
                }
                ToGroup::Stop => return (g, buf, t),
            }
        }
        let got = g.poll_cq(cq, &mut wc);
        if got == 0 {
            thread::sleep(Duration::from_micros(20));
            continue;
        }
        for c in &wc[..got] {
            assert_eq!((c.status, c.opcode), (WcStatus::Success, WcOpcode::Recv), "{c:?}");
            let k = conns.iter().position(|x| x.0 == c.qpn).expect("a QP attached to this group");
            let (_, conn, seq) = conns[k];
            let mut got = vec![0u8; c.byte_len as usize];
            buf.read((c.wr_id * RECV_SLOT) as usize, &mut got);
            assert_eq!(got, message(conn, seq), "connection {conn}: message {seq} whole and in order");
            conns[k].2 += 1;
            if conns[k].2 == MSGS {
                outbox.send(FromGroup::AllIn(c.qpn)).unwrap();
            }
            t.recvs += 1;
            t.recv_bytes += got.len() as u64;
            g.post_srq_recv(srq, &RecvWr { wr_id: c.wr_id, sge: sge(c.wr_id) }).unwrap();
        }
    }
}

/// Drive both nodes and virtual time until `done` says so (or the limit passes: the groups are
/// told to stop, and fail).
fn drive_until(a: &mut Node, b: &mut Node, clock: &SimClock, stop: &AtomicBool, mut done: impl FnMut(&mut Node) -> bool) {
    let start = clock.now_ns();
    while !done(b) {
        a.poll();
        b.poll();
        clock.advance(1_000);
        assert!(clock.now_ns() - start < VIRTUAL_LIMIT_NS, "no progress in {} virtual ms", VIRTUAL_LIMIT_NS / 1_000_000);
        if clock.now_ns() - start > VIRTUAL_LIMIT_NS / 2 {
            stop.store(true, Relaxed);
        }
    }
}

fn qps_handed_over(ngroups: usize, rounds: usize) {
    let (clock, mut a, mut b) = two_nodes(14);
    let (base_a, base_b) = (counts(&a), counts(&b));
    let conns = ngroups * QPS;
    let pcq = b.v.create_cq(1024).unwrap();
    let send_buf = b.v.alloc_buf(conns * (DEPTH * RECV_SLOT) as usize).unwrap();
    let (send_lkey, _) = b.v.reg_mr(send_buf.paddr(), send_buf.len() as u64, Access { local_write: true, ..Default::default() }).unwrap();
    // Every group on its thread from here to the end; the owner keeps only handles.
    let stop = Arc::new(AtomicBool::new(false));
    let (to_owner, from_groups) = mpsc::channel();
    let mut groups: Vec<(GroupHandle, mpsc::Sender<ToGroup>, thread::JoinHandle<(G, SimDma, Tally)>, Lkey)> = Vec::new();
    for _ in 0..ngroups {
        let g = a.v.test_device().create_group(8, 6).unwrap();
        let buf = a.v.alloc_buf((RECVS * RECV_SLOT) as usize).unwrap();
        let (lkey, _) = a.v.reg_mr(buf.paddr(), buf.len() as u64, Access { local_write: true, ..Default::default() }).unwrap();
        let (tx, rx) = mpsc::channel();
        let (out, stop) = (to_owner.clone(), stop.clone());
        let h = g.handle();
        groups.push((h, tx, thread::spawn(move || serve_handed(g, buf, lkey, rx, out, stop)), lkey));
    }
    for round in 0..rounds {
        // Make and connect QPS QPs per group, hand them over, and only once each group has
        // its QPs does the peer send (the passive side's REP waits for the attach).
        let mut peer_qps = Vec::new();
        let mut ours = Vec::new();
        for (gi, (h, tx, _, _)) in groups.iter().enumerate() {
            for k in 0..QPS {
                let mut q = a.v.test_device().make_group_qp(h, 6).unwrap();
                let p = b.v.create_rc_qp(pcq, pcq, 2 * DEPTH as u32, 1).unwrap();
                let to_a = a.rc_attrs_towards(q.qpn());
                b.v.connect_rc_qp(p, &to_a).unwrap();
                let to_b = b.rc_attrs_towards(p);
                a.v.test_device().connect_made_qp(&mut q, &to_b).unwrap();
                ours.push((gi, q.qpn()));
                peer_qps.push(p);
                tx.send(ToGroup::Attach(q, round * conns + gi * QPS + k)).unwrap();
            }
        }
        let mut attached = Vec::new();
        drive_until(&mut a, &mut b, &clock, &stop, |_| {
            while let Ok(m) = from_groups.try_recv() {
                let FromGroup::Attached(q) = m else { panic!("only attaches now") };
                attached.push(q);
            }
            attached.len() == conns
        });
        attached.sort();
        let mut want: Vec<Qpn> = ours.iter().map(|o| o.1).collect();
        want.sort();
        assert_eq!(attached, want, "every QP attached by its group");
        let mut tx = Sender { qps: peer_qps.clone(), base: round * conns, cq: pcq, buf: &send_buf, lkey: send_lkey, sent: vec![0; conns], done: vec![0; conns] };
        let mut all_in = 0;
        drive_until(&mut a, &mut b, &clock, &stop, |b| {
            tx.turn(b);
            while let Ok(m) = from_groups.try_recv() {
                let FromGroup::AllIn(q) = m else { panic!("only whole connections now") };
                assert!(ours.iter().any(|o| o.1 == q));
                all_in += 1;
            }
            all_in == conns && tx.done.iter().all(|&d| d == MSGS)
        });
        // Take them back while the groups keep polling: destroyed on the adapter by QPN, then
        // let go by the group (which first sees every message: it checks that itself).
        for (&(gi, q), &p) in ours.iter().zip(&peer_qps) {
            a.v.test_device().destroy_handed_qp(&groups[gi].0, q).unwrap();
            b.v.destroy_qp(p).unwrap();
        }
        for &(gi, q) in &ours {
            groups[gi].1.send(ToGroup::Detach(q)).unwrap();
        }
        let mut back = 0;
        drive_until(&mut a, &mut b, &clock, &stop, |_| {
            while let Ok(m) = from_groups.try_recv() {
                let FromGroup::Detached(q) = m else { panic!("only detaches now") };
                assert!(ours.iter().any(|o| o.1 == q.qpn()));
                drop(q);
                back += 1;
            }
            back == conns
        });
        assert_eq!(a.v.live_qps(), base_a.0, "round {round}: no group QP left on the adapter");
    }
    let mut total = Tally::default();
    for (_, tx, th, lkey) in groups {
        tx.send(ToGroup::Stop).unwrap();
        let (mut g, buf, t) = th.join().expect("a group's thread failed");
        assert_eq!(t.recvs, (rounds * QPS) as u64 * MSGS, "{t:?}");
        total.recvs += t.recvs;
        total.recv_bytes += t.recv_bytes;
        assert!(!g.sync(), "the device did not fail");
        let st = g.stats();
        assert_eq!((st.bad_cqes, st.completions), (0, t.recvs), "{st:?}");
        assert_eq!(g.live_qps(), 0);
        a.v.test_device().destroy_group(g).unwrap();
        a.v.dereg_mr(lkey).unwrap();
        drop(buf);
    }
    eprintln!(
        "GROUP-HANDOFF groups={ngroups} threads={ngroups} rounds={rounds} qps_handed={} messages={} message_bytes={} virtual_ms={}",
        rounds * conns,
        total.recvs,
        total.recv_bytes,
        clock.now_ns() / 1_000_000
    );
    b.v.dereg_mr(send_lkey).unwrap();
    b.v.destroy_cq(pcq).unwrap();
    drop(send_buf);
    back_to_baseline_and_shut_down(a, b, base_a, base_b);
}

#[test]
fn qps_are_handed_to_two_groups_on_their_threads_and_taken_back() {
    qps_handed_over(2, 3);
}

#[test]
fn qps_are_handed_to_four_groups_on_their_threads_and_taken_back() {
    qps_handed_over(4, 2);
}
