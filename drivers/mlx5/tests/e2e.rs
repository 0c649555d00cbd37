//! Two driver instances on two emulated adapters joined by an in-process link: RC SEND,
//! RDMA WRITE and READ through the driver's verbs, data checked byte for byte.

use emu_connectx::{ConnectX, PhysMem, SimClock, SimHal};
use emu_roce::{Impairments, MemLink};
use hal::DmaRegion;
use mlx5::{Config, Mlx5, Mlx5Verbs, Timeouts};
use rdma::{Access, Completion, Qpn, RcConnectAttrs, RecvWr, SendOp, SendWr, Sge, Verbs, WcOpcode, WcStatus};

type V = Mlx5Verbs<SimHal, emu_connectx::Bar0>;

struct Side {
    cx: ConnectX,
    v: V,
}

fn side(clock: &SimClock, ip: [u8; 4], mac: [u8; 6], base: u64) -> Side {
    let mem = PhysMem::with_base(base);
    let hal = SimHal::new(mem.clone(), clock.clone());
    let cx = ConnectX::new(mem, clock.clone(), emu_connectx::Config { mac, ..Default::default() });
    let cfg = Config {
        ipv4: ip,
        timeouts: Timeouts { init_ns: 1_000_000_000, cmd_ns: 1_000_000_000, health_stall_ns: 500_000_000 },
        ..Config::default()
    };
    let dev = Mlx5::bring_up(hal, cx.bar0(), cfg).expect("bring-up");
    Side { cx, v: Mlx5Verbs::new(dev).expect("GSI") }
}

fn attrs(remote: &Side, rqpn: Qpn) -> RcConnectAttrs {
    RcConnectAttrs {
        remote_qpn: rqpn,
        remote_ip: remote.v.local_ip(),
        remote_mac: remote.v.local_mac(),
        rq_psn: 100,
        sq_psn: 100,
        mtu: 1024,
        udp_sport: 0,
        retry_cnt: 7,
        rnr_retry: 7,
        timeout: 14,
        min_rnr_timer: 1,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        access: Access { local_write: true, remote_read: true, remote_write: true },
    }
}

fn run_until(a: &mut Side, b: &mut Side, clock: &SimClock, cq: (rdma::Cqn, rdma::Cqn), want: (usize, usize)) -> (Vec<Completion>, Vec<Completion>) {
    let (mut ga, mut gb) = (Vec::new(), Vec::new());
    let mut out = [Completion::default(); 8];
    for _ in 0..200_000 {
        a.cx.poll();
        b.cx.poll();
        let n = a.v.poll_cq(cq.0, &mut out);
        ga.extend_from_slice(&out[..n]);
        let n = b.v.poll_cq(cq.1, &mut out);
        gb.extend_from_slice(&out[..n]);
        if ga.len() >= want.0 && gb.len() >= want.1 {
            return (ga, gb);
        }
        clock.advance(1_000);
    }
    panic!("timed out: got {} / {} completions: {ga:?} {gb:?}", ga.len(), gb.len());
}

fn pair(imp: Impairments) -> (SimClock, Side, Side) {
    let clock = SimClock::new();
    let a = side(&clock, [10, 0, 0, 1], [2, 0, 0, 0, 0, 1], 0x1_0000_0000);
    let b = side(&clock, [10, 0, 0, 2], [2, 0, 0, 0, 0, 2], 0x2_0000_0000);
    let (la, lb) = MemLink::pair(imp, 7);
    a.cx.attach_link(Box::new(Clocked(la, clock.clone())));
    b.cx.attach_link(Box::new(Clocked(lb, clock.clone())));
    (clock, a, b)
}

/// A MemLink end whose delay clock follows the simulation's virtual clock.
struct Clocked(MemLink, SimClock);
impl emu_roce::Link for Clocked {
    fn send(&mut self, frame: &[u8]) {
        self.0.set_now(self.1.now_ns());
        self.0.send(frame)
    }
    fn poll(&mut self) -> Option<Vec<u8>> {
        self.0.set_now(self.1.now_ns());
        self.0.poll()
    }
}

#[test]
fn rc_send_write_read_between_two_adapters() {
    let (clock, mut a, mut b) = pair(Impairments::default());

    let (cqa, cqb) = (a.v.create_cq(64).unwrap(), b.v.create_cq(64).unwrap());
    let qa = a.v.create_rc_qp(cqa, cqa, 32, 32).unwrap();
    let qb = b.v.create_rc_qp(cqb, cqb, 32, 32).unwrap();
    let full = Access { local_write: true, remote_read: true, remote_write: true };
    let bufa = a.v.alloc_buf(64 * 1024).unwrap();
    let bufb = b.v.alloc_buf(64 * 1024).unwrap();
    let (lka, _rka) = a.v.reg_mr(bufa.paddr(), 64 * 1024, full).unwrap();
    let (lkb, rkb) = b.v.reg_mr(bufb.paddr(), 64 * 1024, full).unwrap();
    // Receives may be posted while the QP is still in RESET.
    b.v.post_recv(qb, &RecvWr { wr_id: 1, sge: Sge { addr: bufb.paddr(), len: 4096, lkey: lkb } }).unwrap();
    let ab = attrs(&b, qb);
    let ba = attrs(&a, qa);
    a.v.connect_rc_qp(qa, &ab).unwrap();
    b.v.connect_rc_qp(qb, &ba).unwrap();

    // SEND 3000 bytes A -> B.
    let msg: Vec<u8> = (0..3000u32).map(|i| (i * 7 + 3) as u8).collect();
    bufa.write(0, &msg);
    a.v.post_send(qa, &SendWr { wr_id: 10, op: SendOp::Send, sge: Sge { addr: bufa.paddr(), len: 3000, lkey: lka }, signaled: true, ud: None }).unwrap();
    let (ca, cb) = run_until(&mut a, &mut b, &clock, (cqa, cqb), (1, 1));
    assert_eq!((ca[0].wr_id, ca[0].status, ca[0].opcode), (10, WcStatus::Success, WcOpcode::Send), "{ca:?}");
    assert_eq!((cb[0].wr_id, cb[0].status, cb[0].byte_len), (1, WcStatus::Success, 3000), "{cb:?}");
    let mut got = vec![0u8; 3000];
    bufb.read(0, &mut got);
    assert_eq!(got, msg);

    // RDMA WRITE 20000 bytes A -> B at offset 8192, then READ them back into A at 32768.
    let data: Vec<u8> = (0..20000u32).map(|i| (i ^ (i >> 8)) as u8).collect();
    bufa.write(4096, &data);
    let w = SendWr {
        wr_id: 11,
        op: SendOp::RdmaWrite { remote_addr: bufb.paddr() + 8192, rkey: rkb },
        sge: Sge { addr: bufa.paddr() + 4096, len: 20000, lkey: lka },
        signaled: true,
        ud: None,
    };
    a.v.post_send(qa, &w).unwrap();
    let (ca, _) = run_until(&mut a, &mut b, &clock, (cqa, cqb), (1, 0));
    assert_eq!((ca[0].wr_id, ca[0].status, ca[0].opcode), (11, WcStatus::Success, WcOpcode::RdmaWrite));
    let mut got = vec![0u8; 20000];
    bufb.read(8192, &mut got);
    assert_eq!(got, data);
    let r = SendWr {
        wr_id: 12,
        op: SendOp::RdmaRead { remote_addr: bufb.paddr() + 8192, rkey: rkb },
        sge: Sge { addr: bufa.paddr() + 32768, len: 20000, lkey: lka },
        signaled: true,
        ud: None,
    };
    a.v.post_send(qa, &r).unwrap();
    let (ca, _) = run_until(&mut a, &mut b, &clock, (cqa, cqb), (1, 0));
    assert_eq!((ca[0].wr_id, ca[0].status, ca[0].opcode), (12, WcStatus::Success, WcOpcode::RdmaRead));
    let mut back = vec![0u8; 20000];
    bufa.read(32768, &mut back);
    assert_eq!(back, data);

    // A wrong rkey ends in an error completion on the requester; the responder keeps serving.
    let bad = SendWr { wr_id: 13, op: SendOp::RdmaWrite { remote_addr: bufb.paddr(), rkey: rdma::Rkey(rkb.0 ^ 0x100) }, ..w };
    a.v.post_send(qa, &bad).unwrap();
    let (ca, _) = run_until(&mut a, &mut b, &clock, (cqa, cqb), (1, 0));
    assert_eq!(ca[0].wr_id, 13);
    assert_eq!(ca[0].status, WcStatus::RemoteAccess, "{ca:?}");

    drop((bufa, bufb));
    let (ca_, cb_) = (a.cx.clone(), b.cx.clone());
    a.v.shutdown().unwrap();
    b.v.shutdown().unwrap();
    for cx in [ca_, cb_] {
        let c = cx.counters();
        assert_eq!((c.live_objects(), c.pages_held), (0, 0), "{c:?}");
    }
}

fn leak_check(a: Side, b: Side) {
    let (ca, cb) = (a.cx.clone(), b.cx.clone());
    a.v.shutdown().unwrap();
    b.v.shutdown().unwrap();
    for cx in [ca, cb] {
        let c = cx.counters();
        assert_eq!((c.live_objects(), c.pages_held), (0, 0), "{c:?}");
    }
}

#[test]
fn gsi_qp1_ud_exchange() {
    let (clock, mut a, mut b) = pair(Impairments::default());
    let (ga, gb) = (a.v.gsi_qp(), b.v.gsi_qp());
    let (cqa, cqb) = (a.v.gsi_cq(), b.v.gsi_cq());
    let bufa = a.v.alloc_buf(8192).unwrap();
    let bufb = b.v.alloc_buf(8192).unwrap();
    let resd_a = a.v.dev.reserved_lkey();
    let resd_b = b.v.dev.reserved_lkey();
    b.v.post_recv(gb, &RecvWr { wr_id: 1, sge: Sge { addr: bufb.paddr(), len: 40 + 256, lkey: resd_b } }).unwrap();
    let mad: Vec<u8> = (0..256u32).map(|i| i as u8 ^ 0x5a).collect();
    bufa.write(4096, &mad);
    let ud = rdma::UdDest { remote_qpn: Qpn(1), qkey: 0x8001_0000, dest_ip: b.v.local_ip(), dest_mac: b.v.local_mac(), udp_sport: 0xc001 };
    let wr = SendWr { wr_id: 2, op: SendOp::Send, sge: Sge { addr: bufa.paddr() + 4096, len: 256, lkey: resd_a }, signaled: true, ud: Some(ud) };
    a.v.post_send(ga, &wr).unwrap();
    let (ca, cb) = run_until(&mut a, &mut b, &clock, (cqa, cqb), (1, 1));
    assert_eq!((ca[0].wr_id, ca[0].status), (2, WcStatus::Success), "{ca:?}");
    assert_eq!((cb[0].wr_id, cb[0].status, cb[0].opcode, cb[0].byte_len), (1, WcStatus::Success, WcOpcode::Recv, 296), "{cb:?}");
    assert_eq!(cb[0].src_qp, Qpn(1), "GSI sends carry source QP 1");
    let mut got = vec![0u8; 296];
    bufb.read(0, &mut got);
    assert_eq!(&got[40..], &mad[..]);
    assert_eq!(&got[32..36], &a.v.local_ip(), "IPv4 source in the GRH area");
    drop((bufa, bufb));
    leak_check(a, b);
}

fn connected(a: &mut Side, b: &mut Side) -> (rdma::Cqn, rdma::Cqn, Qpn, Qpn) {
    let (cqa, cqb) = (a.v.create_cq(256).unwrap(), b.v.create_cq(256).unwrap());
    let qa = a.v.create_rc_qp(cqa, cqa, 64, 64).unwrap();
    let qb = b.v.create_rc_qp(cqb, cqb, 64, 64).unwrap();
    let (ab, ba) = (attrs(b, qb), attrs(a, qa));
    a.v.connect_rc_qp(qa, &ab).unwrap();
    b.v.connect_rc_qp(qb, &ba).unwrap();
    (cqa, cqb, qa, qb)
}

#[test]
fn immediates_and_send_with_invalidate() {
    let (clock, mut a, mut b) = pair(Impairments::default());
    let (cqa, cqb, qa, qb) = connected(&mut a, &mut b);
    let full = Access { local_write: true, remote_read: true, remote_write: true };
    let bufa = a.v.alloc_buf(16384).unwrap();
    let bufb = b.v.alloc_buf(16384).unwrap();
    let (lka, _) = a.v.reg_mr(bufa.paddr(), 16384, full).unwrap();
    let (lkb, rkb) = b.v.reg_mr(bufb.paddr(), 16384, full).unwrap();
    // A per-I/O key on B for the second half of its buffer.
    let (_lk_io, rk_io) = b.v.reg_mr(bufb.paddr() + 8192, 4096, full).unwrap();
    for i in 0..3 {
        b.v.post_recv(qb, &RecvWr { wr_id: 100 + i, sge: Sge { addr: bufb.paddr() + 1024 * i, len: 1024, lkey: lkb } }).unwrap();
    }
    let sge = Sge { addr: bufa.paddr(), len: 64, lkey: lka };
    a.v.post_send(qa, &SendWr { wr_id: 1, op: SendOp::SendWithImm(0x1122_3344), sge, signaled: true, ud: None }).unwrap();
    a.v.post_send(qa, &SendWr { wr_id: 2, op: SendOp::RdmaWriteWithImm { remote_addr: bufb.paddr() + 8192, rkey: rk_io, imm: 0x5566_7788 }, sge, signaled: true, ud: None }).unwrap();
    a.v.post_send(qa, &SendWr { wr_id: 3, op: SendOp::SendWithInvalidate(rk_io), sge, signaled: true, ud: None }).unwrap();
    let (ca, cb) = run_until(&mut a, &mut b, &clock, (cqa, cqb), (3, 3));
    assert!(ca.iter().all(|c| c.status == WcStatus::Success), "{ca:?}");
    assert_eq!((cb[0].wr_id, cb[0].opcode, cb[0].imm), (100, WcOpcode::RecvWithImm, Some(0x1122_3344)), "{cb:?}");
    assert_eq!((cb[1].wr_id, cb[1].opcode, cb[1].imm), (101, WcOpcode::RecvRdmaWithImm, Some(0x5566_7788)), "{cb:?}");
    assert_eq!((cb[2].wr_id, cb[2].opcode, cb[2].invalidated_rkey), (102, WcOpcode::Recv, Some(rk_io)), "{cb:?}");
    // The invalidated key no longer reaches B's memory; the long-lived one still does.
    a.v.post_send(qa, &SendWr { wr_id: 4, op: SendOp::RdmaWrite { remote_addr: bufb.paddr() + 8192, rkey: rk_io }, sge, signaled: true, ud: None }).unwrap();
    let (ca, _) = run_until(&mut a, &mut b, &clock, (cqa, cqb), (1, 0));
    assert_eq!((ca[0].wr_id, ca[0].status), (4, WcStatus::RemoteAccess), "{ca:?}");
    let _ = rkb;
    drop((bufa, bufb));
    leak_check(a, b);
}

#[test]
fn sends_over_a_lossy_reordering_link_arrive_once_in_order() {
    let imp = Impairments { loss: 0.02, duplicate: 0.01, reorder: 0.02, delay_ns: 2_000, jitter_ns: 1_000, reorder_delay_ns: 20_000, ..Default::default() };
    let (clock, mut a, mut b) = pair(imp);
    let (cqa, cqb, qa, qb) = connected(&mut a, &mut b);
    let full = Access { local_write: true, remote_read: true, remote_write: true };
    let bufa = a.v.alloc_buf(64 * 4096).unwrap();
    let bufb = b.v.alloc_buf(64 * 4096).unwrap();
    let (lka, _) = a.v.reg_mr(bufa.paddr(), 64 * 4096, full).unwrap();
    let (lkb, _) = b.v.reg_mr(bufb.paddr(), 64 * 4096, full).unwrap();
    const N: u64 = 300;
    let slot = |i: u64| (i % 32) * 4096;
    for i in 0..32 {
        b.v.post_recv(qb, &RecvWr { wr_id: i, sge: Sge { addr: bufb.paddr() + slot(i), len: 4096, lkey: lkb } }).unwrap();
    }
    let (mut sent, mut acked, mut recvd) = (0u64, 0u64, 0u64);
    let mut out = [Completion::default(); 16];
    for _ in 0..2_000_000 {
        while sent < N && sent - acked < 16 {
            let len = 1 + (sent * 397 % 4000) as u32;
            let fill = vec![(sent % 251) as u8; len as usize];
            bufa.write(slot(sent) as usize, &fill);
            let sge = Sge { addr: bufa.paddr() + slot(sent), len, lkey: lka };
            a.v.post_send(qa, &SendWr { wr_id: sent, op: SendOp::Send, sge, signaled: true, ud: None }).unwrap();
            sent += 1;
        }
        a.cx.poll();
        b.cx.poll();
        let n = a.v.poll_cq(cqa, &mut out);
        for c in &out[..n] {
            assert_eq!((c.wr_id, c.status), (acked, WcStatus::Success));
            acked += 1;
        }
        let n = b.v.poll_cq(cqb, &mut out);
        for c in &out[..n] {
            assert_eq!((c.wr_id, c.status), (recvd, WcStatus::Success), "in order, exactly once");
            let len = 1 + (recvd * 397 % 4000) as u32;
            assert_eq!(c.byte_len, len);
            let mut got = vec![0u8; len as usize];
            bufb.read(slot(recvd) as usize, &mut got);
            assert!(got.iter().all(|&x| x == (recvd % 251) as u8), "message {recvd} corrupted");
            let next = recvd + 32;
            b.v.post_recv(qb, &RecvWr { wr_id: next, sge: Sge { addr: bufb.paddr() + slot(next), len: 4096, lkey: lkb } }).unwrap();
            recvd += 1;
        }
        if acked == N && recvd == N {
            break;
        }
        clock.advance(1_000);
    }
    assert_eq!((acked, recvd), (N, N));
    drop((bufa, bufb));
    leak_check(a, b);
}

#[test]
fn inline_send_and_write() {
    let (clock, mut a, mut b) = pair(Impairments::default());
    let (cqa, cqb, qa, qb) = connected(&mut a, &mut b);
    let bufb = b.v.alloc_buf(8192).unwrap();
    let (lkb, rkb) = b.v.reg_mr(bufb.paddr(), 8192, Access { local_write: true, remote_read: true, remote_write: true }).unwrap();
    b.v.post_recv(qb, &RecvWr { wr_id: 1, sge: Sge { addr: bufb.paddr(), len: 1024, lkey: lkb } }).unwrap();
    let msg: Vec<u8> = (0..200u8).collect();
    let wr = SendWr { wr_id: 5, op: SendOp::Send, sge: Sge::default(), signaled: true, ud: None };
    a.v.dev.post_send_inline(qa, &wr, &msg).unwrap();
    let w = SendWr { wr_id: 6, op: SendOp::RdmaWrite { remote_addr: bufb.paddr() + 4096, rkey: rkb }, ..wr };
    a.v.dev.post_send_inline(qa, &w, b"written inline").unwrap();
    assert!(a.v.dev.post_send_inline(qa, &wr, &[0u8; mlx5::datapath::MAX_INLINE + 1]).is_err());
    let (ca, cb) = run_until(&mut a, &mut b, &clock, (cqa, cqb), (2, 1));
    assert!(ca.iter().all(|c| c.status == WcStatus::Success), "{ca:?}");
    assert_eq!((cb[0].wr_id, cb[0].byte_len), (1, 200));
    let mut got = vec![0u8; 200];
    bufb.read(0, &mut got);
    assert_eq!(got, msg);
    let mut got = [0u8; 14];
    bufb.read(4096, &mut got);
    assert_eq!(&got, b"written inline");
    drop(bufb);
    leak_check(a, b);
}

#[test]
fn qp_to_error_flushes_outstanding_work() {
    let (clock, mut a, mut b) = pair(Impairments::default());
    let (cqa, cqb, qa, _qb) = connected(&mut a, &mut b);
    let bufa = a.v.alloc_buf(8192).unwrap();
    let (lka, _) = a.v.reg_mr(bufa.paddr(), 8192, Access { local_write: true, ..Default::default() }).unwrap();
    for i in 0..5 {
        a.v.post_recv(qa, &RecvWr { wr_id: 50 + i, sge: Sge { addr: bufa.paddr(), len: 1024, lkey: lka } }).unwrap();
    }
    a.v.qp_to_error(qa).unwrap();
    let (ca, _) = run_until(&mut a, &mut b, &clock, (cqa, cqb), (5, 0));
    let ids: Vec<u64> = ca.iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, vec![50, 51, 52, 53, 54]);
    assert!(ca.iter().all(|c| c.status == WcStatus::WrFlushed), "{ca:?}");
    assert!(a.v.post_recv(qa, &RecvWr { wr_id: 9, sge: Sge { addr: bufa.paddr(), len: 8, lkey: lka } }).is_err());
    drop(bufa);
    leak_check(a, b);
}

fn side_no_fw_arp(clock: &SimClock, ip: [u8; 4], mac: [u8; 6], base: u64) -> Side {
    let mem = PhysMem::with_base(base);
    let hal = SimHal::new(mem.clone(), clock.clone());
    let cx = ConnectX::new(mem, clock.clone(), emu_connectx::Config { mac, port_answers_arp: false, ..Default::default() });
    let cfg = Config { ipv4: ip, ..Config::default() };
    let dev = Mlx5::bring_up(hal, cx.bar0(), cfg).expect("bring-up");
    Side { cx, v: Mlx5Verbs::new(dev).expect("verbs") }
}

#[test]
fn arp_over_the_raw_ethernet_path() {
    let clock = SimClock::new();
    let mut a = side_no_fw_arp(&clock, [10, 0, 0, 1], [2, 0, 0, 0, 0, 1], 0x1_0000_0000);
    let mut b = side_no_fw_arp(&clock, [10, 0, 0, 2], [2, 0, 0, 0, 0, 2], 0x2_0000_0000);
    assert!(a.v.raw_eth && b.v.raw_eth, "{:?}", a.v.last_poll_error);
    let (la, lb) = MemLink::pair(Impairments::default(), 9);
    a.cx.attach_link(Box::new(Clocked(la, clock.clone())));
    b.cx.attach_link(Box::new(Clocked(lb, clock.clone())));
    assert_eq!(a.v.resolve_mac([10, 0, 0, 2]), None, "unknown at first: a request goes out");
    let mut got = None;
    for _ in 0..1000 {
        a.cx.poll();
        b.cx.poll();
        a.v.poll();
        b.v.poll();
        got = a.v.resolve_mac([10, 0, 0, 2]);
        if got.is_some() {
            break;
        }
        clock.advance(10_000);
    }
    assert_eq!(got, Some([2, 0, 0, 0, 0, 2]));
    assert_eq!(b.v.resolve_mac([10, 0, 0, 1]), Some([2, 0, 0, 0, 0, 1]), "B learnt A from the request");
    assert!(a.v.arp_requests_sent >= 1 && b.v.arp_replies_sent >= 1, "{:?} {:?}", a.v.neigh_stats(), b.v.neigh_stats());
    assert_eq!(a.v.resolve_mac([10, 0, 0, 99]), None);
    let (ca, cb) = (a.cx.clone(), b.cx.clone());
    a.v.shutdown().unwrap();
    b.v.shutdown().unwrap();
    for cx in [ca, cb] {
        let c = cx.counters();
        assert_eq!((c.live_objects(), c.pages_held), (0, 0), "{c:?}");
        assert_eq!(cx.device().raw.live(), 0);
    }
}
