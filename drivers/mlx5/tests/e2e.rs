//! Two driver instances on two emulated adapters joined by an in-process link: RC SEND,
//! RDMA WRITE and READ through the driver's verbs, data checked byte for byte.

use emu_roce::Impairments;
use hal::DmaRegion;
use rdma::{Access, Completion, Control, DataPath, Neighbours, Qpn, RcConnectAttrs, RecvWr, SendOp, SendWr, Sge, WcOpcode, WcStatus};
use testbed::{Clocked, Options, SimClock};

/// A driver over its emulated adapter: the shared harness's node.
type Side = testbed::Node;

fn side(clock: &SimClock, ip: [u8; 4], mac: [u8; 6], base: u64, link: Clocked) -> Side {
    // The port answers ARP as well (as before the shared harness).
    let opts = Options { port_answers_arp: true, ..Options::default() };
    Side::with_options(clock.clone(), ip, mac, base, Box::new(link), opts).expect("bring-up")
}

fn attrs(remote: &Side, rqpn: Qpn) -> RcConnectAttrs {
    remote.rc_attrs_towards(rqpn)
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
    let (la, lb) = Clocked::pair(&clock, imp, 7);
    let a = side(&clock, [10, 0, 0, 1], [2, 0, 0, 0, 0, 1], 0x1_0000_0000, la);
    let b = side(&clock, [10, 0, 0, 2], [2, 0, 0, 0, 0, 2], 0x2_0000_0000, lb);
    (clock, a, b)
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
    a.v.post_send(qa, &SendWr { wr_id: 10, op: SendOp::Send, sge: Sge { addr: bufa.paddr(), len: 3000, lkey: lka }, signaled: true, fence: false, ud: None }).unwrap();
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
        fence: false,
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
        fence: false,
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
    let resd_a = a.v.reserved_lkey();
    let resd_b = b.v.reserved_lkey();
    b.v.post_recv(gb, &RecvWr { wr_id: 1, sge: Sge { addr: bufb.paddr(), len: 40 + 256, lkey: resd_b } }).unwrap();
    let mad: Vec<u8> = (0..256u32).map(|i| i as u8 ^ 0x5a).collect();
    bufa.write(4096, &mad);
    let ud = rdma::UdDest { remote_qpn: Qpn(1), qkey: 0x8001_0000, dest_ip: b.v.local_ip(), dest_mac: b.v.local_mac(), udp_sport: 0xc001 };
    let wr = SendWr { wr_id: 2, op: SendOp::Send, sge: Sge { addr: bufa.paddr() + 4096, len: 256, lkey: resd_a }, signaled: true, fence: false, ud: Some(ud) };
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
    a.v.post_send(qa, &SendWr { wr_id: 1, op: SendOp::SendWithImm(0x1122_3344), sge, signaled: true, fence: false, ud: None }).unwrap();
    a.v.post_send(qa, &SendWr { wr_id: 2, op: SendOp::RdmaWriteWithImm { remote_addr: bufb.paddr() + 8192, rkey: rk_io, imm: 0x5566_7788 }, sge, signaled: true, fence: false, ud: None }).unwrap();
    a.v.post_send(qa, &SendWr { wr_id: 3, op: SendOp::SendWithInvalidate(rk_io), sge, signaled: true, fence: false, ud: None }).unwrap();
    let (ca, cb) = run_until(&mut a, &mut b, &clock, (cqa, cqb), (3, 3));
    assert!(ca.iter().all(|c| c.status == WcStatus::Success), "{ca:?}");
    assert_eq!((cb[0].wr_id, cb[0].opcode, cb[0].imm), (100, WcOpcode::RecvWithImm, Some(0x1122_3344)), "{cb:?}");
    assert_eq!((cb[1].wr_id, cb[1].opcode, cb[1].imm), (101, WcOpcode::RecvRdmaWithImm, Some(0x5566_7788)), "{cb:?}");
    assert_eq!((cb[2].wr_id, cb[2].opcode, cb[2].invalidated_rkey), (102, WcOpcode::Recv, Some(rk_io)), "{cb:?}");
    // The invalidated key no longer reaches B's memory; the long-lived one still does.
    a.v.post_send(qa, &SendWr { wr_id: 4, op: SendOp::RdmaWrite { remote_addr: bufb.paddr() + 8192, rkey: rk_io }, sge, signaled: true, fence: false, ud: None }).unwrap();
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
            a.v.post_send(qa, &SendWr { wr_id: sent, op: SendOp::Send, sge, signaled: true, fence: false, ud: None }).unwrap();
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
    // The adapters' queue counters (QUERY_Q_COUNTER on the set every QP names) tell the same
    // story as the RoCE engines' own port counters: what the loss cost, seen by each side.
    for s in [&mut a, &mut b] {
        s.v.refresh_queue_counters().unwrap();
    }
    let qc = |s: &Side, name: &str| s.v.queue_counters().iter().find(|(n, _)| *n == name).map(|&(_, v)| v).expect(name);
    let (ea, eb) = (a.cx.engine_counters().unwrap(), b.cx.engine_counters().unwrap());
    assert_eq!(qc(&b, "out_of_sequence"), eb.nak_seq_sent + eb.out_of_seq_dropped, "responder: PSNs ahead of the expected one");
    assert_eq!(qc(&b, "duplicate_request"), eb.dup_requests);
    assert_eq!(qc(&a, "packet_seq_err"), ea.nak_seq_rcvd, "requester: NAK-sequence errors received");
    assert_eq!(qc(&a, "local_ack_timeout_err"), ea.timeouts);
    assert_eq!(qc(&a, "rnr_nak_retry_err"), ea.rnr_nak_rcvd);
    let lossy = qc(&b, "out_of_sequence") + qc(&b, "duplicate_request") + qc(&a, "packet_seq_err") + qc(&a, "local_ack_timeout_err");
    assert!(lossy > 0, "2% loss over {N} messages left no trace in the queue counters");
    for name in ["req_transport_retries_exceeded", "req_rnr_retries_exceeded", "req_remote_access_errors"] {
        assert_eq!(qc(&a, name), 0, "{name}");
    }
    // A second read adds nothing new (the first one cleared the set).
    let before = qc(&b, "out_of_sequence");
    b.v.refresh_queue_counters().unwrap();
    assert_eq!(qc(&b, "out_of_sequence"), before);
    drop((bufa, bufb));
    leak_check(a, b);
}

#[test]
fn queue_counters_count_rdma_writes_and_reads_received() {
    let (clock, mut a, mut b) = pair(Impairments::default());
    let (cqa, cqb, qa, _qb) = connected(&mut a, &mut b);
    assert!(a.v.test_device().queue_counter_set().is_some(), "the model offers max_qp_cnt: the driver takes a set");
    let full = Access { local_write: true, remote_read: true, remote_write: true };
    let bufa = a.v.alloc_buf(4096).unwrap();
    let bufb = b.v.alloc_buf(4096).unwrap();
    let (lka, _) = a.v.reg_mr(bufa.paddr(), 4096, full).unwrap();
    let (_, rkb) = b.v.reg_mr(bufb.paddr(), 4096, full).unwrap();
    let sge = Sge { addr: bufa.paddr(), len: 512, lkey: lka };
    for i in 0..5u64 {
        let op = if i < 3 { SendOp::RdmaWrite { remote_addr: bufb.paddr(), rkey: rkb } } else { SendOp::RdmaRead { remote_addr: bufb.paddr(), rkey: rkb } };
        a.v.post_send(qa, &SendWr { wr_id: i, op, sge, signaled: true, fence: false, ud: None }).unwrap();
    }
    let (ga, _) = run_until(&mut a, &mut b, &clock, (cqa, cqb), (5, 0));
    assert!(ga.iter().all(|c| c.status == WcStatus::Success), "{ga:?}");
    b.v.refresh_queue_counters().unwrap();
    let qc = |s: &Side, name: &str| s.v.queue_counters().iter().find(|(n, _)| *n == name).map(|&(_, v)| v).expect(name);
    assert_eq!((qc(&b, "rx_write_requests"), qc(&b, "rx_read_requests")), (3, 2));
    assert!(b.v.queue_counters().iter().filter(|(n, _)| !n.starts_with("rx_")).all(|&(_, v)| v == 0), "{:?}", b.v.queue_counters());
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
    let wr = SendWr { wr_id: 5, op: SendOp::Send, sge: Sge::default(), signaled: true, fence: false, ud: None };
    a.v.test_device().post_send_inline(qa, &wr, &msg).unwrap();
    let w = SendWr { wr_id: 6, op: SendOp::RdmaWrite { remote_addr: bufb.paddr() + 4096, rkey: rkb }, ..wr };
    a.v.test_device().post_send_inline(qa, &w, b"written inline").unwrap();
    assert!(a.v.test_device().post_send_inline(qa, &wr, &[0u8; mlx5::datapath::MAX_INLINE + 1]).is_err());
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

/// A node whose port does not answer ARP: the driver answers over its raw Ethernet path.
fn side_no_fw_arp(clock: &SimClock, ip: [u8; 4], mac: [u8; 6], base: u64, link: Clocked) -> Side {
    Side::new(clock.clone(), ip, mac, base, Box::new(link)).expect("bring-up")
}

#[test]
fn arp_over_the_raw_ethernet_path() {
    let clock = SimClock::new();
    let (la, lb) = Clocked::pair(&clock, Impairments::default(), 9);
    let mut a = side_no_fw_arp(&clock, [10, 0, 0, 1], [2, 0, 0, 0, 0, 1], 0x1_0000_0000, la);
    let mut b = side_no_fw_arp(&clock, [10, 0, 0, 2], [2, 0, 0, 0, 0, 2], 0x2_0000_0000, lb);
    assert!(a.v.raw_eth && b.v.raw_eth, "{:?}", a.v.last_poll_error);
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

// ---- per-I/O keys: fast registration through the send queue, and a hostile peer ----

/// A connects a fresh QP pair to B; B (the peer) may issue READ/WRITE, A's QP accepts them.
fn fresh_pair(a: &mut Side, b: &mut Side) -> (rdma::Cqn, rdma::Cqn, Qpn, Qpn) {
    connected(a, b)
}

/// B does `op` (READ or WRITE of 64 bytes) towards A's memory with `rkey` at `addr`; returns
/// B's completion status and tears both QPs down.
fn peer_access(clock: &SimClock, a: &mut Side, b: &mut Side, write: bool, addr: u64, rkey: rdma::Rkey) -> WcStatus {
    let (cqa, cqb, qa, qb) = fresh_pair(a, b);
    let bufb = b.v.alloc_buf(4096).unwrap();
    let (lkb, _) = b.v.reg_mr(bufb.paddr(), 4096, Access { local_write: true, ..Default::default() }).unwrap();
    bufb.write(0, &[0xEE; 64]);
    let sge = Sge { addr: bufb.paddr(), len: 64, lkey: lkb };
    let op = if write { SendOp::RdmaWrite { remote_addr: addr, rkey } } else { SendOp::RdmaRead { remote_addr: addr, rkey } };
    b.v.post_send(qb, &SendWr { wr_id: 7, op, sge, signaled: true, fence: false, ud: None }).unwrap();
    let (_, cb) = run_until(a, b, clock, (cqa, cqb), (0, 1));
    let st = cb[0].status;
    if st != WcStatus::Success {
        // IB: a remote access error moves the responder's QP (A's) to ERROR too.
        for _ in 0..10 {
            a.cx.poll();
            b.cx.poll();
        }
        assert_eq!(a.cx.device().qps[&qa.0].state, emu_connectx::consts::qp::ERR, "A's QP after a refused access");
        a.v.poll();
        let ev = a.v.test_device().take_event().expect("A is told its QP failed");
        assert_eq!((ev.event_type, ev.object), (mlx5::device::event::WQ_ACCESS_ERROR, qa.0), "{ev:?}");
        // The requester learns of it from its error CQE, not from an async event.
        b.v.poll();
        assert_eq!(b.v.test_device().take_event(), None, "B's error is reported by its CQE only");
    }
    let _ = (a.v.qp_to_error(qa), b.v.qp_to_error(qb));
    let mut out = [Completion::default(); 8];
    while a.v.poll_cq(cqa, &mut out) > 0 {}
    while b.v.poll_cq(cqb, &mut out) > 0 {}
    a.v.destroy_qp(qa).unwrap();
    b.v.destroy_qp(qb).unwrap();
    a.v.destroy_cq(cqa).unwrap();
    b.v.destroy_cq(cqb).unwrap();
    b.v.dereg_mr(lkb).unwrap();
    st
}

/// A registers `[addr, addr + len)` of its buffer with a fresh variant of `key` through its
/// send queue (UMR, one doorbell with a SEND behind it) and returns the new key.
fn fast_register(clock: &SimClock, a: &mut Side, b: &mut Side, key: rdma::Rkey, addr: u64, len: u32, access: Access) -> rdma::Rkey {
    let (cqa, cqb, qa, qb) = fresh_pair(a, b);
    let key = key.next_variant();
    let before = a.v.stats().sq_doorbells;
    a.v.post_send_deferred(qa, &SendWr { wr_id: 1, op: SendOp::RegMr { key, addr, len, access }, sge: Sge::default(), signaled: true, fence: false, ud: None }).unwrap();
    a.v.post_send_deferred(qa, &SendWr { wr_id: 2, op: SendOp::Send, sge: Sge::default(), signaled: true, fence: false, ud: None }).unwrap();
    a.v.ring_send(qa).unwrap();
    assert_eq!(a.v.stats().sq_doorbells - before, 1, "registration and SEND share one doorbell");
    let bufb = b.v.alloc_buf(4096).unwrap();
    let (lkb, _) = b.v.reg_mr(bufb.paddr(), 4096, Access { local_write: true, ..Default::default() }).unwrap();
    b.v.post_recv(qb, &RecvWr { wr_id: 9, sge: Sge { addr: bufb.paddr(), len: 64, lkey: lkb } }).unwrap();
    let (ca, _) = run_until(a, b, clock, (cqa, cqb), (2, 1));
    assert_eq!((ca[0].wr_id, ca[0].status, ca[0].opcode), (1, WcStatus::Success, WcOpcode::RegMr), "{ca:?}");
    assert_eq!((ca[1].wr_id, ca[1].status), (2, WcStatus::Success), "{ca:?}");
    for (q, c, side) in [(qa, cqa, &mut *a), (qb, cqb, &mut *b)] {
        side.v.destroy_qp(q).unwrap();
        side.v.destroy_cq(c).unwrap();
    }
    b.v.dereg_mr(lkb).unwrap();
    key
}

/// Post one local invalidation of `key` on a fresh QP of A and wait for it.
fn local_invalidate(clock: &SimClock, a: &mut Side, b: &mut Side, key: rdma::Rkey) {
    let (cqa, cqb, qa, qb) = fresh_pair(a, b);
    a.v.post_send(qa, &SendWr { wr_id: 3, op: SendOp::LocalInvalidate(key), sge: Sge::default(), signaled: true, fence: false, ud: None }).unwrap();
    let (ca, _) = run_until(a, b, clock, (cqa, cqb), (1, 0));
    assert_eq!((ca[0].status, ca[0].opcode), (WcStatus::Success, WcOpcode::LocalInvalidate), "{ca:?}");
    for (q, c, side) in [(qa, cqa, &mut *a), (qb, cqb, &mut *b)] {
        side.v.destroy_qp(q).unwrap();
        side.v.destroy_cq(c).unwrap();
    }
}

/// The initiator's memory against a hostile peer: the old whole-memory key, guessed keys
/// (indexes and every stale variant), a key after local and after remote invalidation, and a
/// valid key outside its range or direction all end in remote access errors (A's QP to
/// ERROR), and not one byte of A's memory changes. A valid key in range works.
#[test]
fn hostile_peer_cannot_reach_initiator_memory_without_a_live_key() {
    let (clock, mut a, mut b) = pair(Impairments::default());
    let rw = Access { local_write: true, remote_read: false, remote_write: true };
    let ro = Access { local_write: true, remote_read: true, remote_write: false };
    // A's "code/data" region (never registered) and its I/O buffer.
    let code = a.v.alloc_buf(8192).unwrap();
    let pattern: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 3) as u8).collect();
    code.write(0, &pattern);
    let io = a.v.alloc_buf(16384).unwrap();
    io.write(0, &pattern);
    io.write(8192, &pattern);
    let key0 = a.v.alloc_fast_mr(16384).unwrap();
    let live_before = a.cx.counters().mkeys;

    // (a) the key the whole-memory MKey used to have (first index the adapter hands out,
    // variant 1), at the code and at the I/O buffer: no such key exists.
    for addr in [code.paddr(), io.paddr()] {
        for write in [true, false] {
            assert_eq!(peer_access(&clock, &mut a, &mut b, write, addr, rdma::Rkey(0x1001)), WcStatus::RemoteAccess);
        }
    }
    // A fast key that was never registered grants nothing.
    assert_eq!(peer_access(&clock, &mut a, &mut b, true, io.paddr(), key0), WcStatus::RemoteAccess);

    // Register 4 KiB at io+4096 for remote WRITE (what a READ command hands the target).
    let k1 = fast_register(&clock, &mut a, &mut b, key0, io.paddr() + 4096, 4096, rw);
    assert_ne!(k1, key0);
    assert_eq!(k1.0 >> 8, key0.0 >> 8, "same registration, new variant");
    assert_eq!(a.cx.counters().mkeys, live_before, "no firmware object per registration");
    // (d) outside the range (before, straddling the end, after), and the wrong direction.
    for addr in [io.paddr(), io.paddr() + 4096 - 64, io.paddr() + 8192 - 32, io.paddr() + 8192, code.paddr()] {
        assert_eq!(peer_access(&clock, &mut a, &mut b, true, addr, k1), WcStatus::RemoteAccess, "addr {addr:#x}");
    }
    assert_eq!(peer_access(&clock, &mut a, &mut b, false, io.paddr() + 4096, k1), WcStatus::RemoteAccess, "READ on a write-only key");
    // (b) guesses: every other variant of the live index, and neighbouring indexes.
    for v in 0..=255u32 {
        let g = rdma::Rkey((k1.0 & !0xff) | v);
        if g == k1 {
            continue;
        }
        assert_eq!(peer_access(&clock, &mut a, &mut b, true, io.paddr() + 4096, g), WcStatus::RemoteAccess, "variant {v:#x}");
    }
    for idx in 0..0x40u32 {
        let g = rdma::Rkey((idx << 8) | k1.variant() as u32);
        if g == k1 {
            continue;
        }
        assert_eq!(peer_access(&clock, &mut a, &mut b, true, io.paddr() + 4096, g), WcStatus::RemoteAccess, "index {idx:#x}");
    }
    let mut got = vec![0u8; 16384];
    io.read(0, &mut got);
    assert_eq!(&got[..8192], &pattern[..], "nothing written by refused accesses");
    // In range, right direction: the write lands.
    assert_eq!(peer_access(&clock, &mut a, &mut b, true, io.paddr() + 4096 + 64, k1), WcStatus::Success);
    io.read(4096 + 64, &mut got[..64]);
    assert_eq!(&got[..64], &[0xEE; 64]);

    // (c) after a local invalidation: refused, and a re-registration's new variant is the only
    // key that works again (the old one stays dead).
    local_invalidate(&clock, &mut a, &mut b, k1);
    assert_eq!(peer_access(&clock, &mut a, &mut b, true, io.paddr() + 4096, k1), WcStatus::RemoteAccess);
    let k2 = fast_register(&clock, &mut a, &mut b, k1, io.paddr(), 8192, ro);
    assert_eq!(peer_access(&clock, &mut a, &mut b, false, io.paddr(), k1), WcStatus::RemoteAccess, "stale variant");
    assert_eq!(peer_access(&clock, &mut a, &mut b, false, io.paddr(), k2), WcStatus::Success);
    // (c) after the peer's SEND WITH INVALIDATE: refused.
    {
        let (cqa, cqb, qa, qb) = fresh_pair(&mut a, &mut b);
        let (lka, _) = a.v.reg_mr(code.paddr(), 64, Access { local_write: true, ..Default::default() }).unwrap();
        a.v.post_recv(qa, &RecvWr { wr_id: 5, sge: Sge { addr: code.paddr(), len: 0, lkey: lka } }).unwrap();
        b.v.post_send(qb, &SendWr { wr_id: 6, op: SendOp::SendWithInvalidate(k2), sge: Sge::default(), signaled: true, fence: false, ud: None }).unwrap();
        let (ca, cb) = run_until(&mut a, &mut b, &clock, (cqa, cqb), (1, 1));
        assert_eq!((cb[0].status, ca[0].invalidated_rkey), (WcStatus::Success, Some(k2)), "{ca:?} {cb:?}");
        for (q, c, side) in [(qa, cqa, &mut a), (qb, cqb, &mut b)] {
            side.v.destroy_qp(q).unwrap();
            side.v.destroy_cq(c).unwrap();
        }
        a.v.dereg_mr(lka).unwrap();
    }
    assert_eq!(peer_access(&clock, &mut a, &mut b, false, io.paddr(), k2), WcStatus::RemoteAccess, "after remote invalidation");
    assert_eq!(peer_access(&clock, &mut a, &mut b, true, io.paddr(), k2), WcStatus::RemoteAccess, "after remote invalidation");

    let mut c = vec![0u8; 8192];
    code.read(0, &mut c);
    assert_eq!(c, pattern, "code region untouched");
    io.read(8192, &mut got[..8192]);
    assert_eq!(&got[..8192], &pattern[..], "rest of the buffer untouched");
    a.v.dereg_mr(rdma::Lkey(k2.0)).unwrap();
    drop((code, io));
    leak_check(a, b);
}
