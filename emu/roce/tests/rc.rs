//! Two engines over the in-process link: RC SEND/WRITE/READ, loss recovery, errors, RNR, UD.

use crate::common;
use common::*;
use emu_roce::*;
use emu_roce::wire::{Frame, OpKind};

const MIB: usize = 1 << 20;

#[test]
fn send_ping_pong() {
    let mut p = Pair::new(Impairments::default(), 1, 4 * MIB);
    p.connect(0x11, 0x12, rc_attrs());
    let ka = p.a.reg(0x10_0000, 64 * 1024, Access::ALL);
    let kb = p.b.reg(0x20_0000, 64 * 1024, Access::ALL);
    for round in 0..200u64 {
        let len = [0usize, 1, 7, 1024, 1025, 3000, 5000][round as usize % 7];
        let msg = pattern(len, round);
        // A -> B
        p.b.eng.post_recv(Qpn(0x12), recv_wr(1000 + round, kb, 0x20_0000 + 0x8000, 8192)).unwrap();
        p.a.write_va(ka, 0x10_0000, &msg);
        p.a.eng.post_send(Qpn(0x11), send_wr(round, SendOp::SendWithImm(round as u32), ka, 0x10_0000, len as u32)).unwrap();
        assert!(p.run_until(p.now + 1_000_000_000, |p| p.b.cqes.len() == 1 && p.a.cqes.len() == 1));
        let rc = p.b.take_cqes()[0];
        assert_eq!((rc.status, rc.wr_id, rc.byte_len, rc.imm, rc.queue), (WcStatus::Success, 1000 + round, len as u32, Some(round as u32), WorkQueue::Recv));
        assert_eq!(rc.opcode, WcOpcode::RecvWithImm);
        let sc = p.a.take_cqes()[0];
        assert_eq!((sc.status, sc.wr_id, sc.opcode, sc.queue), (WcStatus::Success, round, WcOpcode::Send, WorkQueue::Send));
        assert_eq!(p.b.read_va(kb, 0x20_0000 + 0x8000, len), msg);
        // B -> A (pong: echo)
        p.a.eng.post_recv(Qpn(0x11), recv_wr(2000 + round, ka, 0x10_0000 + 0x8000, 8192)).unwrap();
        p.b.eng.post_send(Qpn(0x12), send_wr(round, SendOp::Send, kb, 0x20_0000 + 0x8000, len as u32)).unwrap();
        assert!(p.run_until(p.now + 1_000_000_000, |p| p.b.cqes.len() == 1 && p.a.cqes.len() == 1));
        let rc = p.a.take_cqes()[0];
        assert_eq!((rc.status, rc.byte_len, rc.imm, rc.opcode), (WcStatus::Success, len as u32, None, WcOpcode::Recv));
        assert_eq!(p.b.take_cqes()[0].status, WcStatus::Success);
        assert_eq!(p.a.read_va(ka, 0x10_0000 + 0x8000, len), msg);
    }
    let c = p.a.eng.counters();
    assert_eq!(c.retransmits, 0);
    assert_eq!(c.rx_bad_icrc + c.rx_malformed, 0);
}

fn write_read_sizes(imp: Impairments, seed: u64) -> (Counters, Counters) {
    let mut p = Pair::new(imp, seed, 8 * MIB);
    p.connect(0x11, 0x12, rc_attrs());
    let ka = p.a.reg(0x100_0000, 2 * MIB as u64, Access::ALL);
    let kb = p.b.reg(0x700_0000, MIB as u64 + 8192, Access::ALL);
    let sizes = [1usize, 2, 3, 4, 5, 1023, 1024, 1025, 2048, 4095, 4096, 4097, 65535, 65536, 65537, 300_001, MIB];
    for (i, &len) in sizes.iter().enumerate() {
        let data = pattern(len, 77 + i as u64);
        let src = 0x100_0000;
        let back = 0x100_0000 + MIB as u64;
        let remote = 0x700_0000 + (i as u64 * 13) % 4096; // unaligned remote offsets
        p.a.write_va(ka, src, &data);
        p.a.write_va(ka, back, &vec![0u8; len]);
        let wid = 10 * i as u64;
        p.a.eng.post_send(Qpn(0x11), send_wr(wid, SendOp::RdmaWrite { remote_va: remote, rkey: Rkey(kb) }, ka, src, len as u32)).unwrap();
        p.a.eng.post_send(Qpn(0x11), send_wr(wid + 1, SendOp::RdmaRead { remote_va: remote, rkey: Rkey(kb) }, ka, back, len as u32)).unwrap();
        assert!(p.run_until(p.now + 600_000_000_000, |p| p.a.cqes.len() == 2), "size {len}: {:?}", p.a.cqes);
        let c = p.a.take_cqes();
        assert_eq!((c[0].wr_id, c[0].status, c[0].opcode), (wid, WcStatus::Success, WcOpcode::RdmaWrite), "size {len}");
        assert_eq!((c[1].wr_id, c[1].status, c[1].opcode, c[1].byte_len), (wid + 1, WcStatus::Success, WcOpcode::RdmaRead, len as u32), "size {len}");
        assert!(p.b.read_va(kb, remote, len) == data, "remote bytes differ for size {len}");
        assert!(p.a.read_va(ka, back, len) == data, "read-back bytes differ for size {len}");
        assert!(p.b.cqes.is_empty(), "plain WRITE/READ must not complete at the responder");
    }
    (p.a.eng.counters(), p.b.eng.counters())
}

#[test]
fn write_read_1b_to_1mib() {
    let (a, b) = write_read_sizes(Impairments::default(), 2);
    assert_eq!(a.retransmits, 0);
    assert!(b.read_resp_sent > 1024);
}

fn lossy() -> Impairments {
    Impairments { loss: 0.02, duplicate: 0.01, reorder: 0.02, delay_ns: 2_000, jitter_ns: 1_000, reorder_delay_ns: 20_000 }
}

#[test]
fn write_read_1b_to_1mib_lossy() {
    let (a, b) = write_read_sizes(lossy(), 3);
    assert!(a.retransmits > 0 && (a.timeouts > 0 || a.nak_seq_rcvd > 0), "loss must have been recovered: {a:?}");
    assert!(b.dup_requests > 0 || b.nak_seq_sent > 0, "{b:?}");
}

#[test]
fn sends_exactly_once_in_order_lossy() {
    let mut p = Pair::new(lossy(), 4, 8 * MIB);
    p.connect(0x11, 0x12, rc_attrs());
    let ka = p.a.reg(0x10_0000, MIB as u64, Access::ALL);
    let kb = p.b.reg(0x20_0000, 4 * MIB as u64, Access::ALL);
    const N: u64 = 600;
    const SLOT: u64 = 6000;
    // Messages of varied length carrying their sequence number; posted in bursts.
    let msg = |i: u64| {
        let len = [8usize, 100, 1024, 1500, 4000, 5000][i as usize % 6];
        let mut m = pattern(len, 1000 + i);
        m[..8].copy_from_slice(&i.to_le_bytes());
        m
    };
    for i in 0..N {
        p.b.eng.post_recv(Qpn(0x12), recv_wr(i, kb, 0x20_0000 + i * SLOT, SLOT as u32)).unwrap();
    }
    let mut posted = 0u64;
    let mut recvd: Vec<Completion> = Vec::new();
    let mut sends_done = 0u64;
    while (recvd.len() as u64) < N || sends_done < N {
        while posted < N && posted - sends_done < 40 {
            let m = msg(posted);
            let va = 0x10_0000 + (posted % 100) * SLOT;
            p.a.write_va(ka, va, &m);
            p.a.eng.post_send(Qpn(0x11), send_wr(posted, SendOp::Send, ka, va, m.len() as u32)).unwrap();
            posted += 1;
        }
        assert!(p.run_until(p.now + 60_000_000_000, |p| !p.b.cqes.is_empty() || !p.a.cqes.is_empty()), "stalled at {} recvd / {} sent", recvd.len(), sends_done);
        for c in p.a.take_cqes() {
            assert_eq!(c.status, WcStatus::Success);
            assert_eq!(c.wr_id, sends_done, "send completions in order");
            sends_done += 1;
        }
        recvd.extend(p.b.take_cqes());
    }
    assert_eq!(recvd.len() as u64, N, "exactly N receives");
    for (i, c) in recvd.iter().enumerate() {
        let i = i as u64;
        assert_eq!(c.status, WcStatus::Success);
        assert_eq!(c.wr_id, i, "in order");
        let m = msg(i);
        assert_eq!(c.byte_len as usize, m.len());
        assert_eq!(p.b.read_va(kb, 0x20_0000 + i * SLOT, m.len()), m, "message {i} intact");
    }
    // Nothing further arrives later (no re-delivery of duplicates).
    p.run_until(p.now + 1_000_000_000, |_| false);
    assert!(p.b.take_cqes().is_empty());
    let (a, b) = (p.a.eng.counters(), p.b.eng.counters());
    let ls = p.a.link.stats();
    assert!(ls.dropped > 0 && ls.duplicated > 0 && ls.reordered > 0, "{ls:?}");
    assert!(a.retransmits > 0 && b.dup_requests > 0, "{a:?} {b:?}");
}

#[test]
fn rnr_nak_then_retry_succeeds() {
    let mut p = Pair::new(Impairments::default(), 5, 4 * MIB);
    p.connect(0x11, 0x12, rc_attrs());
    let ka = p.a.reg(0x10_0000, 64 * 1024, Access::ALL);
    let kb = p.b.reg(0x20_0000, 64 * 1024, Access::ALL);
    let m = pattern(3000, 9);
    p.a.write_va(ka, 0x10_0000, &m);
    p.a.eng.post_send(Qpn(0x11), send_wr(1, SendOp::Send, ka, 0x10_0000, 3000)).unwrap();
    // No receive posted: B answers RNR NAK; A keeps retrying (rnr_retry 7 = infinite).
    p.run_until(p.now + 2_000_000, |_| false);
    assert!(p.a.cqes.is_empty() && p.b.cqes.is_empty());
    assert!(p.b.eng.counters().rnr_nak_sent >= 2, "{:?}", p.b.eng.counters());
    p.b.eng.post_recv(Qpn(0x12), recv_wr(7, kb, 0x20_0000, 4096)).unwrap();
    assert!(p.run_until(p.now + 1_000_000_000, |p| p.a.cqes.len() == 1 && p.b.cqes.len() == 1));
    assert_eq!(p.a.cqes[0].status, WcStatus::Success);
    assert_eq!((p.b.cqes[0].status, p.b.cqes[0].byte_len), (WcStatus::Success, 3000));
    assert_eq!(p.b.read_va(kb, 0x20_0000, 3000), m);
}

#[test]
fn rnr_retry_exhausted() {
    let mut p = Pair::new(Impairments::default(), 6, 4 * MIB);
    p.connect(0x11, 0x12, QpAttrs { rnr_retry: 2, ..rc_attrs() });
    let ka = p.a.reg(0x10_0000, 4096, Access::ALL);
    p.a.eng.post_send(Qpn(0x11), send_wr(1, SendOp::Send, ka, 0x10_0000, 10)).unwrap();
    p.a.eng.post_send(Qpn(0x11), send_wr(2, SendOp::Send, ka, 0x10_0000, 10)).unwrap();
    assert!(p.run_until(p.now + 1_000_000_000, |p| p.a.cqes.len() == 2));
    assert_eq!(p.a.cqes[0].status, WcStatus::RnrRetryExceeded);
    assert_eq!(p.a.cqes[1].status, WcStatus::WrFlushed);
    assert_eq!(p.b.eng.counters().rnr_nak_sent, 3);
    assert_eq!(p.a.eng.query_qp(Qpn(0x11)).unwrap().state, QpState::Error);
}

#[test]
fn retry_exceeded_on_dead_link() {
    let mut p = Pair::new(Impairments { loss: 1.0, ..Default::default() }, 7, 4 * MIB);
    p.connect(0x11, 0x12, QpAttrs { retry_cnt: 3, timeout: 8, ..rc_attrs() });
    let ka = p.a.reg(0x10_0000, 4096, Access::ALL);
    p.a.eng.post_send(Qpn(0x11), send_wr(1, SendOp::RdmaWrite { remote_va: 0, rkey: Rkey(1) }, ka, 0x10_0000, 100)).unwrap();
    assert!(p.run_until(p.now + 1_000_000_000, |p| !p.a.cqes.is_empty()));
    assert_eq!(p.a.cqes[0].status, WcStatus::RetryExceeded);
    let c = p.a.eng.counters();
    assert_eq!(c.timeouts, 4, "1 + retry_cnt timeouts");
    assert_eq!(c.req_sent, 4, "original + 3 retries");
    // 4.096 µs × 2^8 ≈ 1.05 ms per timeout.
    assert!(p.now >= 4 * 1_048_576 && p.now < 6 * 1_048_576, "now = {}", p.now);
}

#[test]
fn retry_cnt_7_is_seven_retries_on_a_connectx_port_and_for_ever_on_rxe() {
    for connectx in [true, false] {
        let mut p = Pair::new(Impairments { loss: 1.0, ..Default::default() }, 7, 4 * MIB);
        if connectx {
            let cfg = PortConfig { retry_cnt_7_infinite: false, ..*p.a.eng.config() };
            p.a.eng.set_config(cfg);
        }
        p.connect(0x11, 0x12, QpAttrs { retry_cnt: 7, timeout: 8, ..rc_attrs() });
        let ka = p.a.reg(0x10_0000, 4096, Access::ALL);
        p.a.eng.post_send(Qpn(0x11), send_wr(1, SendOp::RdmaWrite { remote_va: 0, rkey: Rkey(1) }, ka, 0x10_0000, 100)).unwrap();
        // 4.096 µs × 2^8 ≈ 1.05 ms per timeout: 8 of them on a ConnectX, 20 ms is plenty.
        let ended = p.run_until(p.now + 20_000_000, |p| !p.a.cqes.is_empty());
        let c = p.a.eng.counters();
        if connectx {
            assert!(ended, "RetryExceeded after 1 + 7 timeouts");
            assert_eq!(p.a.cqes[0].status, WcStatus::RetryExceeded);
            assert_eq!((c.timeouts, c.req_sent), (8, 8), "original + 7 retries");
        } else {
            assert!(!ended && c.timeouts > 8, "rxe: still retrying after {} timeouts", c.timeouts);
        }
    }
}

/// Wrong rkey, out of bounds, no access, invalidated key: requester gets an error completion
/// and its QP goes to ERROR; the responder keeps serving new QPs.
#[test]
fn key_errors_complete_in_error_and_responder_keeps_serving() {
    let mut p = Pair::new(Impairments::default(), 8, 8 * MIB);
    let ka = p.a.reg(0x10_0000, 64 * 1024, Access::ALL);
    let kb = p.b.reg(0x20_0000, 8192, Access::ALL);
    let kb_ro = p.b.reg(0x30_0000, 8192, Access { local_write: true, remote_read: true, ..Access::NONE });
    let kb_inv = p.b.reg(0x40_0000, 8192, Access::ALL);
    let cases: Vec<(&str, SendOp, Option<SendOp>)> = vec![
        ("wrong rkey write", SendOp::RdmaWrite { remote_va: 0x20_0000, rkey: Rkey(0xdead) }, None),
        ("wrong rkey read", SendOp::RdmaRead { remote_va: 0x20_0000, rkey: Rkey(0xdead) }, None),
        ("oob write", SendOp::RdmaWrite { remote_va: 0x20_0000 + 8000, rkey: Rkey(kb) }, None),
        ("oob read", SendOp::RdmaRead { remote_va: 0x20_0000 - 1, rkey: Rkey(kb) }, None),
        ("no write access", SendOp::RdmaWrite { remote_va: 0x30_0000, rkey: Rkey(kb_ro) }, None),
        ("invalidated", SendOp::RdmaWrite { remote_va: 0x40_0000, rkey: Rkey(kb_inv) }, Some(SendOp::SendWithInvalidate(Rkey(kb_inv)))),
    ];
    let mut qn = 0x20;
    for (name, op, pre) in cases {
        let (qa, qb) = (qn, qn + 1);
        qn += 2;
        p.connect(qa, qb, rc_attrs());
        if let Some(pre) = pre {
            p.b.eng.post_recv(Qpn(qb), recv_wr(5, kb, 0x20_0000, 4096)).unwrap();
            p.a.eng.post_send(Qpn(qa), send_wr(1, pre, ka, 0x10_0000, 16)).unwrap();
            assert!(p.run_until(p.now + 100_000_000, |p| p.a.cqes.len() == 1 && p.b.cqes.len() == 1), "{name}");
            let r = p.b.take_cqes()[0];
            assert_eq!((r.status, r.invalidated_rkey), (WcStatus::Success, Some(Rkey(kb_inv))), "{name}");
            assert_eq!(p.a.take_cqes()[0].status, WcStatus::Success);
        }
        p.a.eng.post_send(Qpn(qa), send_wr(2, op, ka, 0x10_0000, 300)).unwrap();
        p.a.eng.post_send(Qpn(qa), send_wr(3, SendOp::Send, ka, 0x10_0000, 10)).unwrap();
        assert!(p.run_until(p.now + 100_000_000, |p| p.a.cqes.len() == 2), "{name}: {:?}", p.a.cqes);
        let c = p.a.take_cqes();
        assert_eq!((c[0].wr_id, c[0].status, c[0].vendor_err), (2, WcStatus::RemoteAccess, 0x62), "{name}");
        assert_eq!((c[1].wr_id, c[1].status), (3, WcStatus::WrFlushed), "{name}");
        assert_eq!(p.a.eng.query_qp(Qpn(qa)).unwrap().state, QpState::Error, "{name}");
        assert_eq!(p.b.eng.query_qp(Qpn(qb)).unwrap().state, QpState::Error, "{name}: responder QP errors (class C)");
        p.b.take_cqes();
        // Untouched remote memory.
        assert!(p.b.read_va(kb, 0x20_0000 + 4096, 4096).iter().all(|&x| x == 0), "{name}");
    }
    // A fresh QP pair on the same responder still works.
    p.connect(0x40, 0x41, rc_attrs());
    let d = pattern(5000, 1);
    p.a.write_va(ka, 0x10_0000, &d);
    p.a.eng.post_send(Qpn(0x40), send_wr(9, SendOp::RdmaWrite { remote_va: 0x20_0000, rkey: Rkey(kb) }, ka, 0x10_0000, 5000)).unwrap();
    assert!(p.run_until(p.now + 100_000_000, |p| p.a.cqes.len() == 1));
    assert_eq!(p.a.cqes[0].status, WcStatus::Success);
    assert_eq!(p.b.read_va(kb, 0x20_0000, 5000), d);
}

#[test]
fn invalidate_unknown_key_is_an_error() {
    let mut p = Pair::new(Impairments::default(), 9, 4 * MIB);
    p.connect(0x11, 0x12, rc_attrs());
    let ka = p.a.reg(0x10_0000, 4096, Access::ALL);
    let kb = p.b.reg(0x20_0000, 4096, Access::ALL);
    p.b.eng.post_recv(Qpn(0x12), recv_wr(5, kb, 0x20_0000, 4096)).unwrap();
    p.a.eng.post_send(Qpn(0x11), send_wr(1, SendOp::SendWithInvalidate(Rkey(0x7777)), ka, 0x10_0000, 8)).unwrap();
    assert!(p.run_until(p.now + 100_000_000, |p| p.a.cqes.len() == 1 && !p.b.cqes.is_empty()));
    assert_eq!(p.b.cqes[0].status, WcStatus::RemoteInvalidRequest);
    assert_eq!(p.a.cqes[0].status, WcStatus::RemoteInvalidRequest);
}

#[test]
fn write_with_imm_consumes_receive() {
    let mut p = Pair::new(Impairments::default(), 10, 4 * MIB);
    p.connect(0x11, 0x12, rc_attrs());
    let ka = p.a.reg(0x10_0000, 64 * 1024, Access::ALL);
    let kb = p.b.reg(0x20_0000, 64 * 1024, Access::ALL);
    let d = pattern(10_000, 3);
    p.a.write_va(ka, 0x10_0000, &d);
    p.b.eng.post_recv(Qpn(0x12), recv_wr(44, kb, 0x20_0000, 0)).unwrap();
    p.a.eng.post_send(Qpn(0x11), send_wr(1, SendOp::RdmaWriteWithImm { remote_va: 0x20_1000, rkey: Rkey(kb), imm: 0xabcd }, ka, 0x10_0000, 10_000)).unwrap();
    assert!(p.run_until(p.now + 100_000_000, |p| p.a.cqes.len() == 1 && p.b.cqes.len() == 1));
    let r = p.b.cqes[0];
    assert_eq!((r.wr_id, r.status, r.opcode, r.imm, r.byte_len), (44, WcStatus::Success, WcOpcode::RecvRdmaWithImm, Some(0xabcd), 10_000));
    assert_eq!(p.b.read_va(kb, 0x20_1000, 10_000), d);
}

#[test]
fn outstanding_read_limit_respected() {
    let mut p = Pair::new(Impairments { delay_ns: 50_000, ..Default::default() }, 11, 8 * MIB);
    p.connect(0x11, 0x12, QpAttrs { max_rd_atomic: 2, ..rc_attrs() });
    let ka = p.a.reg(0x10_0000, MIB as u64, Access::ALL);
    let kb = p.b.reg(0x20_0000, MIB as u64, Access::ALL);
    let d = pattern(64 * 1024, 5);
    p.b.write_va(kb, 0x20_0000, &d);
    for i in 0..8u64 {
        p.a.eng.post_send(Qpn(0x11), send_wr(i, SendOp::RdmaRead { remote_va: 0x20_0000 + i * 8192, rkey: Rkey(kb) }, ka, 0x10_0000 + i * 8192, 8192)).unwrap();
    }
    // With a 50 µs one-way delay only two READ requests may be on the wire at first.
    p.step();
    assert_eq!(p.a.eng.counters().req_sent, 2);
    assert!(p.run_until(p.now + 100_000_000, |p| p.a.cqes.len() == 8));
    assert!(p.a.cqes.iter().enumerate().all(|(i, c)| c.wr_id == i as u64 && c.status == WcStatus::Success));
    assert_eq!(p.a.read_va(ka, 0x10_0000, 64 * 1024), d);
}

#[test]
fn error_state_flushes_receives() {
    let mut p = Pair::new(Impairments::default(), 12, 4 * MIB);
    p.connect(0x11, 0x12, rc_attrs());
    let kb = p.b.reg(0x20_0000, 4096, Access::ALL);
    for i in 0..3 {
        p.b.eng.post_recv(Qpn(0x12), recv_wr(i, kb, 0x20_0000, 64)).unwrap();
    }
    p.b.eng.modify_qp(Qpn(0x12), QpState::Error, &rc_attrs()).unwrap();
    p.b.poll(0);
    assert_eq!(p.b.cqes.len(), 3);
    assert!(p.b.cqes.iter().all(|c| c.status == WcStatus::WrFlushed && c.queue == WorkQueue::Recv));
    assert!(matches!(p.b.eng.modify_qp(Qpn(0x12), QpState::Rts, &rc_attrs()), Err(EngineError::BadTransition { .. })));
    p.b.eng.modify_qp(Qpn(0x12), QpState::Reset, &rc_attrs()).unwrap();
    p.b.eng.destroy_qp(Qpn(0x12)).unwrap();
    assert_eq!(p.b.eng.qp_count(), 0);
}

/// A link wrapper that keeps a copy of every frame sent.
struct Tap<'a> {
    inner: &'a mut MemLink,
    sent: Vec<Vec<u8>>,
}
impl Link for Tap<'_> {
    fn send(&mut self, f: &[u8]) {
        self.sent.push(f.to_vec());
        self.inner.send(f)
    }
    fn poll(&mut self) -> Option<Vec<u8>> {
        self.inner.poll()
    }
}

/// 100 steps of 1 µs with A's frames kept as they leave (B polled as usual); A's completions
/// go to `p.a.cqes`.
fn run_a_through_a_tap(p: &mut Pair) -> Vec<Vec<u8>> {
    let mut sent = Vec::new();
    for _ in 0..100 {
        p.now += 1000;
        p.a.link.set_now(p.now);
        let mut tap = Tap { inner: &mut p.a.link, sent: Vec::new() };
        p.a.eng.poll(p.now, &mut tap, &mut p.a.mem, &mut p.a.keys);
        sent.extend(tap.sent);
        p.b.poll(p.now);
        while let Some(c) = p.a.eng.pop_completion() {
            p.a.cqes.push(c);
        }
    }
    sent
}

/// rxe re-sends already-ACKed packets now and then (linuxpeer.md): replaying old SEND, WRITE
/// and READ REQUEST frames later is re-ACKed / re-answered but never re-executed.
#[test]
fn stale_duplicates_are_not_re_executed() {
    let mut p = Pair::new(Impairments::default(), 13, 4 * MIB);
    p.connect(0x11, 0x12, rc_attrs());
    let ka = p.a.reg(0x10_0000, 64 * 1024, Access::ALL);
    let kb = p.b.reg(0x20_0000, 64 * 1024, Access::ALL);
    let d = pattern(3000, 1);
    p.a.write_va(ka, 0x10_0000, &d);
    let mut rk = recv_wr(1, kb, 0x20_8000, 8192);
    rk.wr_id = 1;
    p.b.eng.post_recv(Qpn(0x12), rk.clone()).unwrap();
    rk.wr_id = 2;
    p.b.eng.post_recv(Qpn(0x12), rk).unwrap();
    p.a.eng.post_send(Qpn(0x11), send_wr(1, SendOp::RdmaWrite { remote_va: 0x20_0000, rkey: Rkey(kb) }, ka, 0x10_0000, 3000)).unwrap();
    p.a.eng.post_send(Qpn(0x11), send_wr(2, SendOp::Send, ka, 0x10_0000, 100)).unwrap();
    p.a.eng.post_send(Qpn(0x11), send_wr(3, SendOp::RdmaRead { remote_va: 0x20_0000, rkey: Rkey(kb) }, ka, 0x10_8000, 3000)).unwrap();
    let sent = run_a_through_a_tap(&mut p);
    assert_eq!(p.a.take_cqes().iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(), vec![(1, WcStatus::Success), (2, WcStatus::Success), (3, WcStatus::Success)]);
    let brecv = p.b.take_cqes();
    assert_eq!(brecv.iter().map(|c| (c.wr_id, c.status, c.byte_len)).collect::<Vec<_>>(), vec![(1, WcStatus::Success, 100)]);
    assert_eq!(sent.len(), 3 + 1 + 1, "3 WRITE packets, 1 SEND, 1 READ REQUEST");
    // B's application changes the written memory; then every old frame is replayed.
    p.b.write_va(kb, 0x20_0000, &[0xEE; 3000]);
    let before = p.b.eng.counters();
    for f in &sent {
        p.a.link.send(f);
    }
    let a_before = p.a.eng.counters();
    p.run_until(p.now + 10_000_000, |_| false);
    let after = p.b.eng.counters();
    assert_eq!(after.dup_requests - before.dup_requests, 5);
    assert!(after.acks_sent > before.acks_sent, "duplicates are re-ACKed");
    assert_eq!(after.read_resp_sent - before.read_resp_sent, 3, "duplicate READ replayed (3 packets)");
    assert!(p.b.cqes.is_empty(), "no second receive completion");
    assert_eq!(p.b.read_va(kb, 0x20_0000, 3000), vec![0xEE; 3000], "WRITE not re-executed");
    assert!(p.a.cqes.is_empty(), "stale ACKs/responses complete nothing at the requester");
    assert_eq!(p.a.eng.counters().retransmits, a_before.retransmits);
    // And the connection still works.
    p.a.eng.post_send(Qpn(0x11), send_wr(4, SendOp::Send, ka, 0x10_0000, 10)).unwrap();
    assert!(p.run_until(p.now + 10_000_000, |p| p.a.cqes.len() == 1 && p.b.cqes.len() == 1));
    assert_eq!(p.b.cqes[0].wr_id, 2);
}

/// A: one 3-packet READ from B's `kb` and one SEND, run to completion; returns A's frames
/// (READ REQUEST, SEND) so a test can replay them at B.
fn read_then_send_frames(p: &mut Pair, ka: u32, kb: u32) -> Vec<Vec<u8>> {
    p.b.eng.post_recv(Qpn(0x12), recv_wr(1, kb, 0x20_8000, 8192)).unwrap();
    p.b.eng.post_recv(Qpn(0x12), recv_wr(2, kb, 0x20_8000, 8192)).unwrap();
    p.a.eng.post_send(Qpn(0x11), send_wr(1, SendOp::RdmaRead { remote_va: 0x20_0000, rkey: Rkey(kb) }, ka, 0x10_8000, 3000)).unwrap();
    p.a.eng.post_send(Qpn(0x11), send_wr(2, SendOp::Send, ka, 0x10_0000, 100)).unwrap();
    let sent = run_a_through_a_tap(p);
    assert_eq!(p.a.take_cqes().iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(), vec![(1, WcStatus::Success), (2, WcStatus::Success)]);
    assert_eq!(p.b.take_cqes().len(), 1);
    assert_eq!(sent.len(), 2, "READ REQUEST, SEND");
    sent
}

/// rxe, retrying, re-sends READ requests and SENDs in bursts. A duplicate READ whose reply is
/// still queued restarts in place, ahead of the re-ACK queued after it (an ACK past a READ the
/// requester waits for reads as "response lost": rxe retries at once, which fed a retransmission
/// storm against Linux nvmet); duplicate ACKs queued back to back are coalesced.
#[test]
fn duplicate_read_reply_keeps_its_place_ahead_of_the_re_ack() {
    let mut p = Pair::new(Impairments::default(), 17, 4 * MIB);
    p.connect(0x11, 0x12, rc_attrs());
    let ka = p.a.reg(0x10_0000, 64 * 1024, Access::ALL);
    let kb = p.b.reg(0x20_0000, 64 * 1024, Access::ALL);
    let sent = read_then_send_frames(&mut p, ka, kb);
    // The burst: READ, SEND, SEND, READ (all in before B polls).
    for f in [&sent[0], &sent[1], &sent[1], &sent[0]] {
        p.a.link.send(f);
    }
    let before = p.b.eng.counters();
    p.now += 1000;
    p.b.link.set_now(p.now);
    let mut tap = Tap { inner: &mut p.b.link, sent: Vec::new() };
    p.b.eng.poll(p.now, &mut tap, &mut p.b.mem, &mut p.b.keys);
    let ops: Vec<OpKind> = tap
        .sent
        .iter()
        .map(|f| match wire::parse_frame(f) {
            Ok(Frame::Roce(pkt)) => pkt.op.kind,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(p.b.eng.counters().dup_requests - before.dup_requests, 4);
    assert_eq!(ops, vec![OpKind::ReadResponse, OpKind::ReadResponse, OpKind::ReadResponse, OpKind::Ack], "the READ replay first, then one ACK");
    // The requester ignores all of it and the connection still works.
    p.run_until(p.now + 1_000_000, |_| false);
    assert!(p.a.cqes.is_empty() && p.b.cqes.is_empty());
    p.a.eng.post_send(Qpn(0x11), send_wr(3, SendOp::Send, ka, 0x10_0000, 10)).unwrap();
    assert!(p.run_until(p.now + 10_000_000, |p| p.a.cqes.len() == 1 && p.b.cqes.len() == 1));
}

/// A duplicate READ whose key the requester has invalidated since (nvmet-rdma's SEND WITH
/// INVALIDATE follows its READ's completion; rxe may still re-send the READ) is dropped as stale:
/// no NAK, the responder's QP keeps serving.
#[test]
fn stale_read_replay_after_invalidation_is_dropped_not_fatal() {
    let mut p = Pair::new(Impairments::default(), 19, 4 * MIB);
    p.connect(0x11, 0x12, rc_attrs());
    let ka = p.a.reg(0x10_0000, 64 * 1024, Access::ALL);
    let kb = p.b.reg(0x20_0000, 64 * 1024, Access::ALL);
    let sent = read_then_send_frames(&mut p, ka, kb);
    p.b.keys.mrs.get_mut(&kb).unwrap().valid = false;
    let before = p.b.eng.counters();
    p.a.link.send(&sent[0]);
    p.run_until(p.now + 1_000_000, |_| false);
    let after = p.b.eng.counters();
    assert_eq!(after.dup_requests - before.dup_requests, 1);
    assert_eq!(after.stale_read_replays_dropped - before.stale_read_replays_dropped, 1);
    assert_eq!(after.nak_err_sent, before.nak_err_sent, "no NAK");
    assert_eq!(after.read_resp_sent, before.read_resp_sent);
    assert!(p.a.cqes.is_empty() && p.b.cqes.is_empty());
    // B's QP still serves (a SEND into its second receive).
    p.b.keys.mrs.get_mut(&kb).unwrap().valid = true;
    p.a.eng.post_send(Qpn(0x11), send_wr(3, SendOp::Send, ka, 0x10_0000, 10)).unwrap();
    assert!(p.run_until(p.now + 10_000_000, |p| p.a.cqes.len() == 1 && p.b.cqes.len() == 1));
    assert_eq!((p.b.cqes[0].wr_id, p.b.cqes[0].status), (2, WcStatus::Success));
}

#[test]
fn solicited_bit_reaches_the_receive_completion() {
    let mut p = Pair::new(Impairments::default(), 14, 4 * MIB);
    p.connect(0x11, 0x12, rc_attrs());
    let ka = p.a.reg(0x10_0000, 4096, Access::ALL);
    let kb = p.b.reg(0x20_0000, 4096, Access::ALL);
    for i in 0..2 {
        p.b.eng.post_recv(Qpn(0x12), recv_wr(i, kb, 0x20_0000, 4096)).unwrap();
    }
    p.a.eng.post_send(Qpn(0x11), SendWr { solicited: true, ..send_wr(1, SendOp::Send, ka, 0x10_0000, 2000) }).unwrap();
    p.a.eng.post_send(Qpn(0x11), send_wr(2, SendOp::Send, ka, 0x10_0000, 20)).unwrap();
    assert!(p.run_until(p.now + 10_000_000, |p| p.b.cqes.len() == 2));
    assert_eq!((p.b.cqes[0].solicited, p.b.cqes[1].solicited), (true, false));
}

/// PSNs wrap at 2^24: start just below the wrap on both sides, lossy link, WRITE/READ/SEND.
#[test]
fn psn_wraparound_lossy() {
    let mut p = Pair::new(lossy(), 15, 8 * MIB);
    p.connect_psn(0x11, 0x12, rc_attrs(), 0xFF_FFF0, 0xFF_FFFA);
    let ka = p.a.reg(0x10_0000, MIB as u64, Access::ALL);
    let kb = p.b.reg(0x20_0000, MIB as u64, Access::ALL);
    let d = pattern(200_000, 2);
    p.a.write_va(ka, 0x10_0000, &d);
    for i in 0..4 {
        p.b.eng.post_recv(Qpn(0x12), recv_wr(i, kb, 0x20_0000 + 0x8_0000 + i * 8192, 8192)).unwrap();
    }
    p.a.eng.post_send(Qpn(0x11), send_wr(1, SendOp::RdmaWrite { remote_va: 0x20_0000, rkey: Rkey(kb) }, ka, 0x10_0000, 200_000)).unwrap();
    p.a.eng.post_send(Qpn(0x11), send_wr(2, SendOp::Send, ka, 0x10_0000, 5000)).unwrap();
    p.a.eng.post_send(Qpn(0x11), send_wr(3, SendOp::RdmaRead { remote_va: 0x20_0000, rkey: Rkey(kb) }, ka, 0x40_000 + 0x10_0000, 200_000)).unwrap();
    // B sends too, from below its wrap.
    for i in 0..3 {
        p.a.eng.post_recv(Qpn(0x11), recv_wr(i, ka, 0x10_0000 + 0x9_0000 + i * 8192, 8192)).unwrap();
        p.b.eng.post_send(Qpn(0x12), send_wr(i, SendOp::Send, kb, 0x20_0000, 4000)).unwrap();
    }
    assert!(p.run_until(p.now + 60_000_000_000, |p| p.a.cqes.len() == 6 && p.b.cqes.len() == 4), "{:?} {:?}", p.a.cqes, p.b.cqes);
    assert!(p.a.cqes.iter().chain(p.b.cqes.iter()).all(|c| c.status == WcStatus::Success));
    assert_eq!(p.b.read_va(kb, 0x20_0000, 200_000), d);
    assert_eq!(p.a.read_va(ka, 0x14_0000, 200_000), d);
    let qa = p.a.eng.query_qp(Qpn(0x11)).unwrap();
    assert!(qa.sq_psn < 0x1000, "A's PSN wrapped: {:#x}", qa.sq_psn);
}

/// Same seed, same run: identical counters, link statistics and simulated time.
#[test]
fn in_process_runs_are_deterministic() {
    let run = |seed| {
        let mut p = Pair::new(lossy(), seed, 4 * MIB);
        p.connect(0x11, 0x12, rc_attrs());
        let ka = p.a.reg(0x10_0000, MIB as u64, Access::ALL);
        let kb = p.b.reg(0x20_0000, MIB as u64, Access::ALL);
        p.a.eng.post_send(Qpn(0x11), send_wr(1, SendOp::RdmaWrite { remote_va: 0x20_0000, rkey: Rkey(kb) }, ka, 0x10_0000, 300_000)).unwrap();
        p.a.eng.post_send(Qpn(0x11), send_wr(2, SendOp::RdmaRead { remote_va: 0x20_0000, rkey: Rkey(kb) }, ka, 0x10_0000, 300_000)).unwrap();
        assert!(p.run_until(p.now + 60_000_000_000, |p| p.a.cqes.len() == 2));
        (p.now, p.a.eng.counters(), p.b.eng.counters(), p.a.link.stats())
    };
    let (r1, r2, r3) = (run(21), run(21), run(22));
    assert_eq!(r1, r2);
    assert_ne!(r1, r3);
}

/// A responder QP without REMOTE_READ / REMOTE_WRITE access answers NAK invalid request
/// (rxe check_op_valid): REM_INV_REQ at the requester, both QPs in ERROR.
#[test]
fn qp_access_denied_is_invalid_request() {
    for (i, op) in [SendOp::RdmaRead { remote_va: 0x20_0000, rkey: Rkey(0) }, SendOp::RdmaWrite { remote_va: 0x20_0000, rkey: Rkey(0) }].into_iter().enumerate() {
        let mut p = Pair::new(Impairments::default(), 16 + i as u64, 4 * MIB);
        p.connect(0x11, 0x12, QpAttrs { access: Access::LOCAL_WRITE, ..rc_attrs() });
        let ka = p.a.reg(0x10_0000, 4096, Access::ALL);
        let kb = p.b.reg(0x20_0000, 4096, Access::ALL);
        let op = match op {
            SendOp::RdmaRead { remote_va, .. } => SendOp::RdmaRead { remote_va, rkey: Rkey(kb) },
            SendOp::RdmaWrite { remote_va, .. } => SendOp::RdmaWrite { remote_va, rkey: Rkey(kb) },
            o => o,
        };
        p.a.eng.post_send(Qpn(0x11), send_wr(1, op, ka, 0x10_0000, 64)).unwrap();
        assert!(p.run_until(p.now + 100_000_000, |p| !p.a.cqes.is_empty()));
        assert_eq!((p.a.cqes[0].status, p.a.cqes[0].vendor_err), (WcStatus::RemoteInvalidRequest, 0x61), "{op:?}");
        assert_eq!(p.b.eng.query_qp(Qpn(0x12)).unwrap().state, QpState::Error);
    }
}

/// A SEND larger than the posted receive buffer: LocalLength at the responder's receive,
/// REM_INV_REQ at the requester.
#[test]
fn send_longer_than_receive_buffer() {
    let mut p = Pair::new(Impairments::default(), 18, 4 * MIB);
    p.connect(0x11, 0x12, rc_attrs());
    let ka = p.a.reg(0x10_0000, 8192, Access::ALL);
    let kb = p.b.reg(0x20_0000, 8192, Access::ALL);
    p.b.eng.post_recv(Qpn(0x12), recv_wr(1, kb, 0x20_0000, 1500)).unwrap();
    p.a.eng.post_send(Qpn(0x11), send_wr(1, SendOp::Send, ka, 0x10_0000, 3000)).unwrap();
    assert!(p.run_until(p.now + 100_000_000, |p| !p.a.cqes.is_empty() && !p.b.cqes.is_empty()));
    assert_eq!(p.b.cqes[0].status, WcStatus::LocalLength);
    assert_eq!(p.a.cqes[0].status, WcStatus::RemoteInvalidRequest);
}

/// A fenced SEND posted behind an RDMA READ is not on the wire before the READ's last response
/// is placed; an unfenced one goes at once (one-way delay 50 µs: the SEND would reach the
/// responder 50 µs before the READ's data is back).
#[test]
fn fenced_send_waits_for_the_read_before_it_and_an_unfenced_one_does_not() {
    for fence in [false, true] {
        let mut p = Pair::new(Impairments { delay_ns: 50_000, ..Default::default() }, 31, 8 * MIB);
        p.connect(0x11, 0x12, rc_attrs());
        let ka = p.a.reg(0x10_0000, 64 * 1024, Access::ALL);
        let kb = p.b.reg(0x20_0000, 64 * 1024, Access::ALL);
        let d = pattern(5000, 7);
        p.b.write_va(kb, 0x20_0000, &d);
        p.b.eng.post_recv(Qpn(0x12), recv_wr(50, kb, 0x20_8000, 64)).unwrap();
        p.a.eng.post_send(Qpn(0x11), send_wr(1, SendOp::RdmaRead { remote_va: 0x20_0000, rkey: Rkey(kb) }, ka, 0x10_0000, 5000)).unwrap();
        p.a.eng.post_send(Qpn(0x11), SendWr { fence, ..send_wr(2, SendOp::Send, ka, 0x10_8000, 16) }).unwrap();
        p.step();
        // READ request only (fenced) or READ request + SEND (not fenced).
        assert_eq!(p.a.eng.counters().req_sent, if fence { 1 } else { 2 }, "fence {fence}");
        // When the SEND's receive completes at B, has the READ's data landed at A?
        let mut landed_at_recv = None;
        assert!(p.run_until(p.now + 100_000_000, |p| {
            if landed_at_recv.is_none() && !p.b.cqes.is_empty() {
                landed_at_recv = Some(p.a.read_va(ka, 0x10_0000, 5000) == d);
            }
            p.a.cqes.len() == 2 && p.b.cqes.len() == 1
        }));
        assert_eq!(landed_at_recv, Some(fence), "fence {fence}: READ data placed before the SEND arrived");
        let c = p.a.take_cqes();
        assert_eq!((c[0].wr_id, c[0].status, c[0].opcode), (1, WcStatus::Success, WcOpcode::RdmaRead));
        assert_eq!((c[1].wr_id, c[1].status, c[1].opcode), (2, WcStatus::Success, WcOpcode::Send));
        assert_eq!(p.b.cqes[0].status, WcStatus::Success);
        assert_eq!(p.a.eng.counters().fence_waits > 0, fence);
    }
}

/// A READ that fails (remote access error) leaves the fenced SEND behind it flushed, never sent.
#[test]
fn failed_read_leaves_the_fenced_send_flushed_and_unsent() {
    let mut p = Pair::new(Impairments { delay_ns: 50_000, ..Default::default() }, 32, 8 * MIB);
    p.connect(0x11, 0x12, rc_attrs());
    let ka = p.a.reg(0x10_0000, 64 * 1024, Access::ALL);
    let kb = p.b.reg(0x20_0000, 64 * 1024, Access::ALL);
    p.b.eng.post_recv(Qpn(0x12), recv_wr(50, kb, 0x20_8000, 64)).unwrap();
    p.a.eng.post_send(Qpn(0x11), send_wr(1, SendOp::RdmaRead { remote_va: 0x20_0000, rkey: Rkey(kb ^ 0x40) }, ka, 0x10_0000, 5000)).unwrap();
    p.a.eng.post_send(Qpn(0x11), SendWr { fence: true, ..send_wr(2, SendOp::Send, ka, 0x10_8000, 16) }).unwrap();
    assert!(p.run_until(p.now + 100_000_000, |p| p.a.cqes.len() == 2));
    let c = p.a.take_cqes();
    assert_eq!((c[0].wr_id, c[0].status), (1, WcStatus::RemoteAccess));
    assert_eq!((c[1].wr_id, c[1].status), (2, WcStatus::WrFlushed));
    assert_eq!(p.a.eng.counters().req_sent, 1, "only the READ request went out");
    // B's QP went to ERROR with the NAK (class C): its receive is flushed, never filled.
    assert!(p.b.cqes.iter().all(|c| c.status == WcStatus::WrFlushed), "{:?}", p.b.cqes);
    assert_eq!(p.b.eng.counters().rx_frames, 1);
}
