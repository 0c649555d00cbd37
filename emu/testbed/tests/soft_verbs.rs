//! Behaviour of the soft verbs double (testbed::soft): RC ops, key checks, UD on QP1.
use hal::DmaRegion;
use rdma::*;
use testbed::soft::{SoftDevice, SoftFabric, GRH_LEN, GSI_QKEY};

const RW: Access = Access { local_write: true, remote_read: true, remote_write: true };

struct Side {
    cq: Cqn,
    qp: Qpn,
    buf: testbed::soft::SoftBuf,
    lkey: Lkey,
    rkey: Rkey,
}

fn side(d: &mut SoftDevice) -> Side {
    let cq = d.create_cq(64).unwrap();
    let qp = d.create_rc_qp(cq, cq, 16, 16).unwrap();
    let buf = d.alloc_buf(8192).unwrap();
    let (lkey, rkey) = d.reg_mr(buf.paddr(), 8192, RW).unwrap();
    Side { cq, qp, buf, lkey, rkey }
}

fn attrs(peer: &SoftDevice, qpn: Qpn) -> RcConnectAttrs {
    RcConnectAttrs {
        remote_qpn: qpn,
        remote_ip: peer.local_ip(),
        remote_mac: peer.local_mac(),
        mtu: 1024,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        access: RW,
        retry_cnt: 7,
        rnr_retry: 7,
        ..Default::default()
    }
}

fn pair() -> (SoftFabric, SoftDevice, SoftDevice, Side, Side) {
    let f = SoftFabric::new();
    let mut a = f.add_device([10, 0, 0, 1]);
    let mut b = f.add_device([10, 0, 0, 2]);
    let sa = side(&mut a);
    let sb = side(&mut b);
    a.connect_rc_qp(sa.qp, &attrs(&b, sb.qp)).unwrap();
    b.connect_rc_qp(sb.qp, &attrs(&a, sa.qp)).unwrap();
    (f, a, b, sa, sb)
}

fn poll_one(d: &mut SoftDevice, cq: Cqn) -> Completion {
    let mut c = [Completion::default(); 1];
    for _ in 0..100 {
        if d.poll_cq(cq, &mut c) == 1 {
            return c[0];
        }
    }
    panic!("no completion");
}

fn pump(a: &mut SoftDevice, b: &mut SoftDevice) {
    for _ in 0..4 {
        a.poll();
        b.poll();
    }
}

#[test]
fn send_recv_waits_for_receive_and_completes_after_ack() {
    let (_f, mut a, mut b, sa, sb) = pair();
    sa.buf.write(0, b"hello");
    a.post_send(sa.qp, &SendWr { wr_id: 7, op: SendOp::SendWithImm(0x55), sge: Sge { addr: sa.buf.paddr(), len: 5, lkey: sa.lkey }, signaled: true, fence: false, ud: None }).unwrap();
    pump(&mut a, &mut b);
    let mut c = [Completion::default(); 4];
    assert_eq!(a.poll_cq(sa.cq, &mut c), 0, "no ACK before the responder has a receive");
    b.post_recv(sb.qp, &RecvWr { wr_id: 9, sge: Sge { addr: sb.buf.paddr() + 100, len: 64, lkey: sb.lkey } }).unwrap();
    let rc = poll_one(&mut b, sb.cq);
    assert_eq!((rc.wr_id, rc.status, rc.opcode, rc.byte_len, rc.imm), (9, WcStatus::Success, WcOpcode::RecvWithImm, 5, Some(0x55)));
    let mut got = [0u8; 5];
    sb.buf.read(100, &mut got);
    assert_eq!(&got, b"hello");
    let sc = poll_one(&mut a, sa.cq);
    assert_eq!((sc.wr_id, sc.status, sc.opcode), (7, WcStatus::Success, WcOpcode::Send));
}

#[test]
fn write_and_read_move_bytes() {
    let (_f, mut a, mut b, sa, sb) = pair();
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    sa.buf.write(0, &data);
    a.post_send(sa.qp, &SendWr { wr_id: 1, op: SendOp::RdmaWrite { remote_addr: sb.buf.paddr() + 4096, rkey: sb.rkey }, sge: Sge { addr: sa.buf.paddr(), len: 4096, lkey: sa.lkey }, signaled: true, fence: false, ud: None }).unwrap();
    b.poll();
    assert_eq!(poll_one(&mut a, sa.cq).status, WcStatus::Success);
    let mut got = vec![0u8; 4096];
    sb.buf.read(4096, &mut got);
    assert_eq!(got, data);
    a.post_send(sa.qp, &SendWr { wr_id: 2, op: SendOp::RdmaRead { remote_addr: sb.buf.paddr() + 4096, rkey: sb.rkey }, sge: Sge { addr: sa.buf.paddr() + 4096, len: 4096, lkey: sa.lkey }, signaled: true, fence: false, ud: None }).unwrap();
    b.poll();
    let c = poll_one(&mut a, sa.cq);
    assert_eq!((c.wr_id, c.status, c.opcode), (2, WcStatus::Success, WcOpcode::RdmaRead));
    let mut back = vec![0u8; 4096];
    sa.buf.read(4096, &mut back);
    assert_eq!(back, data);
}

#[test]
fn bad_rkey_out_of_bounds_and_invalidated_key_fail_on_requester_only() {
    for case in 0..3 {
        let (_f, mut a, mut b, sa, sb) = pair();
        let (addr, rkey) = match case {
            0 => (sb.buf.paddr(), Rkey(sb.rkey.0 + 1000)),
            1 => (sb.buf.paddr() + 8000, sb.rkey),
            _ => {
                // The requester itself invalidates the responder's key with SEND WITH INVALIDATE.
                b.post_recv(sb.qp, &RecvWr { wr_id: 1, sge: Sge { addr: sb.buf.paddr(), len: 16, lkey: sb.lkey } }).unwrap();
                a.post_send(sa.qp, &SendWr { wr_id: 3, op: SendOp::SendWithInvalidate(sb.rkey), sge: Sge { addr: sa.buf.paddr(), len: 4, lkey: sa.lkey }, signaled: true, fence: false, ud: None }).unwrap();
                let rc = poll_one(&mut b, sb.cq);
                assert_eq!(rc.invalidated_rkey, Some(sb.rkey));
                assert_eq!(poll_one(&mut a, sa.cq).status, WcStatus::Success);
                (sb.buf.paddr(), sb.rkey)
            }
        };
        a.post_send(sa.qp, &SendWr { wr_id: 5, op: SendOp::RdmaWrite { remote_addr: addr, rkey }, sge: Sge { addr: sa.buf.paddr(), len: 512, lkey: sa.lkey }, signaled: true, fence: false, ud: None }).unwrap();
        a.post_send(sa.qp, &SendWr { wr_id: 6, op: SendOp::Send, sge: Sge { addr: sa.buf.paddr(), len: 4, lkey: sa.lkey }, signaled: true, fence: false, ud: None }).unwrap();
        b.poll();
        let c = poll_one(&mut a, sa.cq);
        assert_eq!((c.wr_id, c.status), (5, WcStatus::RemoteAccess), "case {case}");
        let c = poll_one(&mut a, sa.cq);
        assert_eq!((c.wr_id, c.status), (6, WcStatus::WrFlushed), "case {case}");
        // The responder keeps serving: a fresh QP pair between the same devices works.
        let sa2 = side(&mut a);
        let sb2 = side(&mut b);
        a.connect_rc_qp(sa2.qp, &attrs(&b, sb2.qp)).unwrap();
        b.connect_rc_qp(sb2.qp, &attrs(&a, sa2.qp)).unwrap();
        a.post_send(sa2.qp, &SendWr { wr_id: 8, op: SendOp::RdmaWrite { remote_addr: sb2.buf.paddr(), rkey: sb2.rkey }, sge: Sge { addr: sa2.buf.paddr(), len: 512, lkey: sa2.lkey }, signaled: true, fence: false, ud: None }).unwrap();
        b.poll();
        assert_eq!(poll_one(&mut a, sa2.cq).status, WcStatus::Success);
    }
}

#[test]
fn local_key_violation_and_dead_peer() {
    let (_f, mut a, mut b, sa, sb) = pair();
    a.post_send(sa.qp, &SendWr { wr_id: 1, op: SendOp::Send, sge: Sge { addr: sa.buf.paddr() + 8190, len: 16, lkey: sa.lkey }, signaled: true, fence: false, ud: None }).unwrap();
    assert_eq!(poll_one(&mut a, sa.cq).status, WcStatus::LocalProtection);
    // Peer QP destroyed: requests end in RetryExceeded.
    let sa2 = side(&mut a);
    a.connect_rc_qp(sa2.qp, &attrs(&b, sb.qp)).unwrap();
    b.destroy_qp(sb.qp).unwrap();
    a.post_send(sa2.qp, &SendWr { wr_id: 2, op: SendOp::Send, sge: Sge { addr: sa2.buf.paddr(), len: 4, lkey: sa2.lkey }, signaled: true, fence: false, ud: None }).unwrap();
    b.poll();
    assert_eq!(poll_one(&mut a, sa2.cq).status, WcStatus::RetryExceeded);
}

#[test]
fn ud_on_qp1_has_grh_and_checks_qkey() {
    let f = SoftFabric::new();
    let mut a = f.add_device([10, 0, 0, 1]);
    let mut b = f.add_device([10, 0, 0, 2]);
    let ba = a.alloc_buf(4096).unwrap();
    let (la, _) = a.reg_mr(ba.paddr(), 4096, RW).unwrap();
    let bb = b.alloc_buf(4096).unwrap();
    let (lb, _) = b.reg_mr(bb.paddr(), 4096, RW).unwrap();
    let g = b.gsi_qp();
    b.post_recv(g, &RecvWr { wr_id: 1, sge: Sge { addr: bb.paddr(), len: 296, lkey: lb } }).unwrap();
    b.post_recv(g, &RecvWr { wr_id: 2, sge: Sge { addr: bb.paddr() + 1024, len: 296, lkey: lb } }).unwrap();
    ba.fill(0, 256, 0xab);
    let mut ud = UdDest { remote_qpn: Qpn(1), qkey: 0x1234, dest_ip: b.local_ip(), dest_mac: b.local_mac(), udp_sport: 0xd872 };
    let ga = a.gsi_qp();
    a.post_send(ga, &SendWr { wr_id: 3, op: SendOp::Send, sge: Sge { addr: ba.paddr(), len: 256, lkey: la }, signaled: true, fence: false, ud: Some(ud) }).unwrap();
    ud.qkey = GSI_QKEY;
    a.post_send(ga, &SendWr { wr_id: 4, op: SendOp::Send, sge: Sge { addr: ba.paddr(), len: 256, lkey: la }, signaled: true, fence: false, ud: Some(ud) }).unwrap();
    let gcq = b.gsi_cq();
    let c = poll_one(&mut b, gcq);
    assert_eq!((c.wr_id, c.byte_len, c.src_qp), (1, 296, Qpn(1)));
    assert_eq!(b.ud_dropped(), 1, "wrong Q_Key dropped");
    let mut grh = [0u8; GRH_LEN];
    bb.read(0, &mut grh);
    assert_eq!(&grh[..20], &[0u8; 20]);
    assert_eq!(grh[20], 0x45);
    assert_eq!(&grh[32..36], &[10, 0, 0, 1]);
    assert_eq!(&grh[36..40], &[10, 0, 0, 2]);
    assert_eq!(bb.read_u8(GRH_LEN), 0xab);
}

#[test]
fn resources_are_counted_for_leak_checks() {
    let f = SoftFabric::new();
    let mut a = f.add_device([10, 0, 0, 1]);
    let before = a.resources();
    {
        let s = side(&mut a);
        assert_eq!(a.resources().qps, before.qps + 1);
        a.destroy_qp(s.qp).unwrap();
        a.dereg_mr(s.lkey).unwrap();
        a.destroy_cq(s.cq).unwrap();
    }
    assert_eq!(a.resources(), before);
}

#[test]
fn deferred_sends_wait_for_the_doorbell_and_run_in_order() {
    let (_f, mut a, mut b, sa, sb) = pair();
    for i in 0..3u64 {
        b.post_recv(sb.qp, &RecvWr { wr_id: 100 + i, sge: Sge { addr: sb.buf.paddr() + 64 * i, len: 64, lkey: sb.lkey } }).unwrap();
    }
    let send = |i: u64| SendWr { wr_id: i, op: SendOp::Send, sge: Sge { addr: sa.buf.paddr() + i, len: 1, lkey: sa.lkey }, signaled: true, fence: false, ud: None };
    sa.buf.write(0, &[10, 11, 12]);
    let before = a.doorbells();
    a.post_send_deferred(sa.qp, &send(0)).unwrap();
    a.post_send_deferred(sa.qp, &send(1)).unwrap();
    pump(&mut a, &mut b);
    let mut c = [Completion::default(); 4];
    assert_eq!(b.poll_cq(sb.cq, &mut c), 0, "nothing runs before the doorbell");
    assert_eq!(a.doorbells(), before);
    a.ring_send(sa.qp).unwrap();
    a.ring_send(sa.qp).unwrap();
    assert_eq!(a.doorbells(), before + 1, "one doorbell for both, an empty ring is free");
    a.post_send_deferred(sa.qp, &send(2)).unwrap();
    pump(&mut a, &mut b);
    assert_eq!(b.poll_cq(sb.cq, &mut c), 2);
    assert_eq!((c[0].wr_id, c[1].wr_id), (100, 101));
    assert_eq!(a.doorbells(), before + 1);
    a.ring_send(sa.qp).unwrap();
    let r = poll_one(&mut b, sb.cq);
    assert_eq!((r.wr_id, r.byte_len), (102, 1));
    let mut got = [0u8; 3];
    for i in 0..3 {
        sb.buf.read(64 * i, &mut got[i..i + 1]);
    }
    assert_eq!(got, [10, 11, 12]);
    assert_eq!(a.doorbells(), before + 2);
    a.post_send_batch(sa.qp, &[]).unwrap();
    assert_eq!(a.doorbells(), before + 2, "an empty batch rings nothing");
}

#[test]
fn batch_post_and_flush_of_unrung_work_on_error() {
    let (_f, mut a, mut b, sa, sb) = pair();
    let recvs: Vec<RecvWr> = (0..4u64).map(|i| RecvWr { wr_id: 200 + i, sge: Sge { addr: sb.buf.paddr() + 64 * i, len: 64, lkey: sb.lkey } }).collect();
    b.post_recv_batch(sb.qp, &recvs).unwrap();
    let send = |i: u64| SendWr { wr_id: i, op: SendOp::Send, sge: Sge { addr: sa.buf.paddr(), len: 8, lkey: sa.lkey }, signaled: i == 1, fence: false, ud: None };
    let before = a.doorbells();
    a.post_send_batch(sa.qp, &[send(0), send(1)]).unwrap();
    assert_eq!(a.doorbells(), before + 1);
    pump(&mut a, &mut b);
    let mut c = [Completion::default(); 8];
    assert_eq!(b.poll_cq(sb.cq, &mut c), 2);
    assert_eq!((c[0].wr_id, c[1].wr_id), (200, 201));
    let s = poll_one(&mut a, sa.cq);
    assert_eq!((s.wr_id, s.status), (1, WcStatus::Success), "only the signaled one completes");
    // Written but never rung, then the QP fails: the WR is flushed, not lost.
    a.post_send_deferred(sa.qp, &send(5)).unwrap();
    a.qp_to_error(sa.qp).unwrap();
    let f = poll_one(&mut a, sa.cq);
    assert_eq!((f.wr_id, f.status), (5, WcStatus::WrFlushed));
    assert!(a.post_send_deferred(sa.qp, &send(6)).is_err(), "no posting in ERROR");
}

/// A's READ of B's first 4 KiB (key `rkey`) and a SEND to B's posted receive, with one doorbell.
fn read_then_send(a: &mut SoftDevice, b: &mut SoftDevice, sa: &Side, sb: &Side, rkey: Rkey, fence: bool) {
    b.post_recv(sb.qp, &RecvWr { wr_id: 9, sge: Sge { addr: sb.buf.paddr() + 4096, len: 64, lkey: sb.lkey } }).unwrap();
    let read = SendWr { wr_id: 1, op: SendOp::RdmaRead { remote_addr: sb.buf.paddr(), rkey }, sge: Sge { addr: sa.buf.paddr(), len: 4096, lkey: sa.lkey }, signaled: true, fence: false, ud: None };
    let send = SendWr { wr_id: 2, op: SendOp::Send, sge: Sge { addr: sa.buf.paddr() + 4096, len: 8, lkey: sa.lkey }, fence, ..read };
    a.post_send_batch(sa.qp, &[read, send]).unwrap();
}

#[test]
fn fenced_send_waits_for_the_read_response_an_unfenced_one_does_not() {
    for fence in [false, true] {
        let (_f, mut a, mut b, sa, sb) = pair();
        let data: Vec<u8> = (0..4096u32).map(|i| (i * 11 + 1) as u8).collect();
        sb.buf.write(0, &data);
        read_then_send(&mut a, &mut b, &sa, &sb, sb.rkey, fence);
        // B serves the READ request (and the SEND, if it was sent).
        let mut c = [Completion::default(); 4];
        let n = b.poll_cq(sb.cq, &mut c);
        assert_eq!(n, usize::from(!fence), "fence {fence}: the SEND reached B before A placed the READ's data");
        // A places the READ response; a held SEND goes now.
        let r = poll_one(&mut a, sa.cq);
        assert_eq!((r.wr_id, r.status, r.opcode), (1, WcStatus::Success, WcOpcode::RdmaRead));
        let mut got = vec![0u8; 4096];
        sa.buf.read(0, &mut got);
        assert_eq!(got, data);
        if fence {
            assert_eq!(poll_one(&mut b, sb.cq).wr_id, 9);
        }
        let s = poll_one(&mut a, sa.cq);
        assert_eq!((s.wr_id, s.status), (2, WcStatus::Success));
    }
}

#[test]
fn failed_read_leaves_the_fenced_send_flushed_never_sent() {
    let (_f, mut a, mut b, sa, sb) = pair();
    read_then_send(&mut a, &mut b, &sa, &sb, Rkey(sb.rkey.0 + 1000), true);
    pump(&mut a, &mut b);
    let c = poll_one(&mut a, sa.cq);
    assert_eq!((c.wr_id, c.status), (1, WcStatus::RemoteAccess));
    let c = poll_one(&mut a, sa.cq);
    assert_eq!((c.wr_id, c.status), (2, WcStatus::WrFlushed));
    pump(&mut a, &mut b);
    // The responder keeps serving (soft NAKs leave it in RTS): its receive is still unfilled.
    let mut out = [Completion::default(); 4];
    assert_eq!(b.poll_cq(sb.cq, &mut out), 0);
}
