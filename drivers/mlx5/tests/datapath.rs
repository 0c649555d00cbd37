//! Data path against the emulated adapter's memory: WQE bytes as the adapter reads them,
//! doorbell record + UAR doorbell, CQEs written by the model (owner bits) polled by the driver.

use crate::common;
use common::*;
use mlx5::{Mlx5, QpKind};
use rdma::{Completion, Lkey, Qpn, RecvWr, Rkey, SendOp, SendWr, Sge, UdDest, WcOpcode, WcStatus};

fn read(rig: &Rig, pa: u64, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rig.mem.read(pa, &mut v);
    v
}
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}
fn be64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().unwrap())
}

/// A CQE as the adapter writes it (mlx5dv.h mlx5_cqe64 byte offsets).
fn cqe(opcode: u8, qpn: u32, wqe_counter: u16, byte_cnt: u32, imm: u32, syndrome: u8) -> [u8; 64] {
    let mut e = [0u8; 64];
    e[0x24..0x28].copy_from_slice(&imm.to_be_bytes());
    e[0x2c..0x30].copy_from_slice(&byte_cnt.to_be_bytes());
    e[0x37] = syndrome;
    e[0x38..0x3c].copy_from_slice(&(qpn & 0xff_ffff).to_be_bytes());
    e[0x3c..0x3e].copy_from_slice(&wqe_counter.to_be_bytes());
    e[0x3f] = opcode << 4;
    e
}

#[test]
fn send_wqe_layout_doorbells_and_completions() {
    let (rig, hal, bar) = common::rig();
    let mut dev = Mlx5::bring_up(hal, bar, cfg()).unwrap();
    let cq = dev.create_cq(2).unwrap(); // 4 CQEs: polling wraps the owner bit often
    let qp = dev.create_qp(QpKind::Rc, cq, cq, 3, 3, 0).unwrap();
    dev.connect_rc(qp, &rc_attrs(Qpn(0x42))).unwrap();

    let wr = SendWr {
        wr_id: 77,
        op: SendOp::RdmaWrite { remote_addr: 0xdead_0000_1000, rkey: Rkey(0x1234) },
        sge: Sge { addr: 0x1_0000_8000, len: 300, lkey: Lkey(0x5678) },
        signaled: true,
        fence: false,
        ud: None,
    };
    dev.post_send(qp, &wr).unwrap();
    let (sq_pa, dbr_pa) = {
        let d = rig.cx.device();
        let q = &d.qps[&qp.0];
        (q.buf.pa(q.rq_bytes()).unwrap(), q.dbr)
    };
    let w = read(&rig, sq_pa, 64);
    // ctrl: opmod|wqe_index|opcode, qpn|ds, signature, fm_ce_se.
    assert_eq!(be32(&w, 0), 0x08, "wqe_index 0, RDMA_WRITE");
    assert_eq!(be32(&w, 4), (qp.0 << 8) | 3, "qpn, ds = 3 (ctrl+raddr+data)");
    assert_eq!(w[0x0b], 0x08, "CQE always");
    assert_eq!(be64(&w, 16), 0xdead_0000_1000);
    assert_eq!(be32(&w, 24), 0x1234);
    assert_eq!((be32(&w, 32), be32(&w, 36), be64(&w, 40)), (300, 0x5678, 0x1_0000_8000));
    assert_eq!(be32(&read(&rig, dbr_pa, 8), 4), 1, "DBR[1] = SQ producer counter");
    {
        let d = rig.cx.device();
        let &(dq, first8) = d.sq_doorbells.last().expect("UAR doorbell rang");
        assert_eq!(dq, qp.0);
        assert_eq!(first8, be64(&w, 0), "doorbell carries ctrl's first 8 bytes");
    }

    // The adapter completes it; then an error completion; then receives with immediate.
    assert!(rig.cx.device_mut().post_cqe(cq.0, &cqe(0x0, qp.0, 0, 0, 0, 0)));
    let mut out = [Completion::default(); 8];
    assert_eq!(dev.poll_cq(cq, &mut out).unwrap(), 1);
    assert_eq!((out[0].wr_id, out[0].opcode, out[0].status), (77, WcOpcode::RdmaWrite, WcStatus::Success));
    assert_eq!(dev.poll_cq(cq, &mut out).unwrap(), 0, "nothing new");

    let mut wrid = 100;
    for round in 0..10u16 {
        // Send + receive each round: the 4-entry CQ wraps five times.
        let send = SendWr { wr_id: wrid, op: SendOp::SendWithImm(0xabcd), sge: Sge::default(), signaled: true, fence: false, ud: None };
        dev.post_send(qp, &send).unwrap();
        dev.post_recv(qp, &RecvWr { wr_id: wrid + 1, sge: Sge { addr: 0x1_0000_9000, len: 4096, lkey: Lkey(1) } }).unwrap();
        let pi = 1 + round; // one WQEBB each
        let synd = if round == 9 { 0x13 } else { 0 };
        let op = if round == 9 { 0xd } else { 0x0 };
        assert!(rig.cx.device_mut().post_cqe(cq.0, &cqe(op, qp.0, pi, 0, 0, synd)));
        assert!(rig.cx.device_mut().post_cqe(cq.0, &cqe(0x3, qp.0, round, 512, 0xfeed, 0)));
        assert_eq!(dev.poll_cq(cq, &mut out).unwrap(), 2, "round {round}");
        assert_eq!(out[0].wr_id, wrid);
        if round == 9 {
            assert_eq!(out[0].status, WcStatus::RemoteAccess);
        } else {
            assert_eq!((out[0].status, out[0].opcode), (WcStatus::Success, WcOpcode::Send));
        }
        assert_eq!((out[1].wr_id, out[1].opcode, out[1].byte_len, out[1].imm), (wrid + 1, WcOpcode::RecvWithImm, 512, Some(0xfeed)));
        wrid += 2;
    }
    let d = rig.cx.device();
    assert_eq!(d.ctr.cq_overruns, 0, "driver kept the CQ doorbell record current");
    let q = &d.qps[&qp.0];
    assert_eq!(be32(&read(&rig, q.dbr, 8), 0), 10, "DBR[0] = RQ counter");
    // RQ WQE 0: one data segment (stride 16 bytes).
    let r = read(&rig, q.buf.pa(0).unwrap(), 16);
    assert_eq!((be32(&r, 0), be32(&r, 4), be64(&r, 8)), (4096, 1, 0x1_0000_9000));
    drop(d);
    dev.shutdown().unwrap();
}

#[test]
fn send_queue_full_is_an_error_not_an_overwrite() {
    let (_rig, hal, bar) = common::rig();
    let mut dev = Mlx5::bring_up(hal, bar, cfg()).unwrap();
    let cq = dev.create_cq(4).unwrap();
    let qp = dev.create_qp(QpKind::Rc, cq, cq, 2, 2, 0).unwrap();
    dev.connect_rc(qp, &rc_attrs(Qpn(9))).unwrap();
    let wr = SendWr { wr_id: 1, op: SendOp::Send, sge: Sge::default(), signaled: true, fence: false, ud: None };
    for _ in 0..4 {
        dev.post_send(qp, &wr).unwrap();
    }
    assert!(dev.post_send(qp, &wr).is_err());
    let rw = RecvWr { wr_id: 1, sge: Sge::default() };
    for _ in 0..4 {
        dev.post_recv(qp, &rw).unwrap();
    }
    assert!(dev.post_recv(qp, &rw).is_err());
    dev.shutdown().unwrap();
}

#[test]
fn ud_send_on_qp1_carries_an_address_vector() {
    let (rig, hal, bar) = common::rig();
    let mut dev = Mlx5::bring_up(hal, bar, cfg()).unwrap();
    let cq = dev.create_cq(4).unwrap();
    let gsi = dev.create_qp(QpKind::Gsi, cq, cq, 3, 3, 2).unwrap();
    dev.activate_gsi(gsi).unwrap();
    // Advance the SQ to its last WQEBB (1 + 3 * 2 = 7) so the 2-WQEBB UD WQE wraps around the ring.
    let small = SendWr { wr_id: 0, op: SendOp::Send, sge: Sge::default(), signaled: true, fence: false, ud: Some(UdDest::default()) };
    let big = SendWr { sge: Sge { addr: 0x1_0000_a000, len: 1, lkey: Lkey(3) }, ..small };
    dev.post_send(gsi, &small).unwrap(); // ctrl + AV = 1 WQEBB
    for _ in 0..3 {
        dev.post_send(gsi, &big).unwrap(); // ctrl + AV + data = 80 B = 2 WQEBBs
    }
    for counter in [0u16, 1, 3, 5] {
        assert!(rig.cx.device_mut().post_cqe(cq.0, &cqe(0, gsi.0, counter, 0, 0, 0)));
    }
    let mut out = [Completion::default(); 4];
    assert_eq!(dev.poll_cq(cq, &mut out).unwrap(), 4);
    let ud = UdDest { remote_qpn: Qpn(1), qkey: 0x8001_0000, dest_ip: [192, 168, 7, 3], dest_mac: [2, 0, 0, 0, 0, 0x33], udp_sport: 0xc123 };
    let wr = SendWr { wr_id: 5, op: SendOp::Send, sge: Sge { addr: 0x1_0000_a000, len: 256, lkey: Lkey(3) }, signaled: true, fence: false, ud: Some(ud) };
    dev.post_send(gsi, &wr).unwrap(); // WQEBBs 7 and 0 (wrapped)
    let d = rig.cx.device();
    let q = &d.qps[&gsi.0];
    let sq = q.rq_bytes();
    let mut w = read(&rig, q.buf.pa(sq + 7 * 64).unwrap(), 64);
    w.extend(read(&rig, q.buf.pa(sq).unwrap(), 64));
    assert_eq!(be32(&w, 0), (7 << 8) | 0x0a, "wqe_index 7, SEND");
    assert_eq!(be32(&w, 4) & 0x3f, 5, "ds = ctrl + AV(3) + data");
    let av = &w[16..64];
    assert_eq!(be32(av, 0), 0x8001_0000);
    assert_eq!(be32(av, 8), 0x8000_0001, "extended AV | remote QPN 1");
    assert_eq!(u16::from_be_bytes([av[0x0e], av[0x0f]]), 0xc123, "udp_sport");
    assert_eq!(&av[0x14..0x1a], &[2, 0, 0, 0, 0, 0x33]);
    assert_eq!(av[0x1b], 64, "hop limit");
    assert_eq!(&av[0x20..0x30], &rdma::cm_wire::gid_from_ipv4([192, 168, 7, 3]));
    assert_eq!((be32(&w, 64), be32(&w, 68), be64(&w, 72)), (256, 3, 0x1_0000_a000));
}

#[test]
fn cqes_for_unknown_qps_or_idle_slots_are_dropped_and_counted() {
    let (rig, hal, bar) = common::rig();
    let mut dev = Mlx5::bring_up(hal, bar, cfg()).unwrap();
    let cq = dev.create_cq(4).unwrap();
    let qp = dev.create_qp(QpKind::Rc, cq, cq, 2, 2, 0).unwrap();
    // Posting before RTS is refused.
    let wr = SendWr { wr_id: 1, op: SendOp::Send, sge: Sge::default(), signaled: true, fence: false, ud: None };
    assert!(dev.post_send(qp, &wr).is_err());
    dev.connect_rc(qp, &rc_attrs(Qpn(9))).unwrap();
    let mut d = rig.cx.device_mut();
    assert!(d.post_cqe(cq.0, &cqe(0x0, qp.0, 0, 0, 0, 0)), "send CQE with nothing posted");
    assert!(d.post_cqe(cq.0, &cqe(0x2, qp.0, 0, 8, 0, 0)), "recv CQE with nothing posted");
    assert!(d.post_cqe(cq.0, &cqe(0x0, 0xabcd, 0, 0, 0, 0)), "unknown QP");
    drop(d);
    let mut out = [Completion::default(); 4];
    assert_eq!(dev.poll_cq(cq, &mut out).unwrap(), 0);
    assert_eq!(dev.stats().bad_cqes, 3);
    // Still consistent: a real send completes normally afterwards.
    dev.post_send(qp, &wr).unwrap();
    assert!(rig.cx.device_mut().post_cqe(cq.0, &cqe(0x0, qp.0, 0, 0, 0, 0)));
    assert_eq!(dev.poll_cq(cq, &mut out).unwrap(), 1);
    assert_eq!(out[0].wr_id, 1);
    dev.shutdown().unwrap();
}

#[test]
fn cq_overrun_arrives_as_an_async_error_event() {
    let (rig, hal, bar) = common::rig();
    let mut dev = Mlx5::bring_up(hal, bar, cfg()).unwrap();
    let cq = dev.create_cq(2).unwrap();
    let qp = dev.create_qp(QpKind::Rc, cq, cq, 3, 3, 0).unwrap();
    dev.connect_rc(qp, &rc_attrs(Qpn(9))).unwrap();
    // Five CQEs into a 4-entry CQ nobody polls: the adapter reports an overrun on the EQ.
    let mut ok = 0;
    for i in 0..5u16 {
        ok += rig.cx.device_mut().post_cqe(cq.0, &cqe(0, qp.0, i, 0, 0, 0)) as u32;
    }
    assert_eq!(ok, 4);
    assert!(dev.poll_eq().unwrap() >= 1);
    let ev = dev.take_event().expect("CQ error event");
    assert_eq!((ev.event_type, ev.object, ev.syndrome), (mlx5::device::event::CQ_ERROR, cq.0, 1));
    assert!(dev.take_event().is_none());
    assert_eq!(dev.stats().error_events, 1);
    dev.shutdown().unwrap();
}

/// An adapter with one connected RC QP (8-WQEBB queues) on a 16-CQE CQ, and the physical
/// addresses of the QP's SQ and doorbell record.
fn rc_qp() -> (Rig, Dev, rdma::Cqn, Qpn, u64, u64) {
    let (rig, hal, bar) = common::rig();
    let mut dev = Mlx5::bring_up(hal, bar, cfg()).unwrap();
    let cq = dev.create_cq(4).unwrap();
    let qp = dev.create_qp(QpKind::Rc, cq, cq, 3, 3, 0).unwrap();
    dev.connect_rc(qp, &rc_attrs(Qpn(0x42))).unwrap();
    let (sq_pa, dbr_pa) = {
        let d = rig.cx.device();
        let q = &d.qps[&qp.0];
        (q.buf.pa(q.rq_bytes()).unwrap(), q.dbr)
    };
    (rig, dev, cq, qp, sq_pa, dbr_pa)
}

#[test]
fn deferred_sends_share_one_doorbell_and_receives_need_no_mmio() {
    let (rig, mut dev, cq, qp, sq_pa, dbr_pa) = rc_qp();
    let mmio0 = rig.cx.counters().mmio_writes;
    let stats0 = dev.stats();
    let send = |i: u64| SendWr { wr_id: i, op: SendOp::Send, sge: Sge { addr: 0x1_0000_9000, len: 16, lkey: Lkey(1) }, signaled: true, fence: false, ud: None };
    for i in 0..3 {
        dev.post_send_deferred(qp, &send(i)).unwrap();
    }
    assert_eq!(rig.cx.counters().mmio_writes, mmio0, "deferred WQEs touch no register");
    assert_eq!(be32(&read(&rig, dbr_pa, 8), 4), 0, "nor the doorbell record");
    assert!(rig.cx.device().sq_doorbells.is_empty());
    dev.ring_send(qp).unwrap();
    dev.ring_send(qp).unwrap();
    let c = rig.cx.counters();
    assert_eq!((c.mmio_writes - mmio0, c.sq_doorbells), (1, 1), "one MMIO for three WQEs; an idle ring is free");
    assert_eq!(be32(&read(&rig, dbr_pa, 8), 4), 3, "DBR[1] covers all three");
    let newest = read(&rig, sq_pa + 2 * 64, 8);
    assert_eq!(rig.cx.device().sq_doorbells.last().unwrap().1, be64(&newest, 0), "doorbell = newest WQE's ctrl");
    // post_send after a deferred WQE rings for both.
    dev.post_send_deferred(qp, &send(3)).unwrap();
    dev.post_send(qp, &send(4)).unwrap();
    assert_eq!(rig.cx.counters().mmio_writes - mmio0, 2);
    assert_eq!(be32(&read(&rig, dbr_pa, 8), 4), 5);
    let s = dev.stats();
    assert_eq!((s.sq_doorbells - stats0.sq_doorbells, s.send_wqes - stats0.send_wqes), (2, 5));
    // Receives: WQEs + one doorbell-record write, never an MMIO.
    let recvs: Vec<RecvWr> = (0..4).map(|i| RecvWr { wr_id: 50 + i, sge: Sge { addr: 0x1_0000_a000 + 64 * i, len: 64, lkey: Lkey(1) } }).collect();
    dev.post_recv_batch(qp, &recvs).unwrap();
    dev.post_recv(qp, &recvs[0]).unwrap();
    assert_eq!(rig.cx.counters().mmio_writes - mmio0, 2);
    assert_eq!(be32(&read(&rig, dbr_pa, 8), 0), 5, "DBR[0] = RQ counter");
    // The adapter completes WQE 0..=4 in order.
    for i in 0..5u16 {
        assert!(rig.cx.device_mut().post_cqe(cq.0, &cqe(0x0, qp.0, i, 0, 0, 0)));
    }
    let mut out = [Completion::default(); 8];
    assert_eq!(dev.poll_cq(cq, &mut out).unwrap(), 5);
    assert_eq!(out[..5].iter().map(|c| c.wr_id).collect::<Vec<_>>(), vec![0, 1, 2, 3, 4]);
    dev.shutdown().unwrap();
}

/// A Read's RDMA WRITE and its response as the NVMe-oF target posts them.
fn write_and_response(i: u64) -> [SendWr; 2] {
    let write = SendWr {
        wr_id: 2 * i,
        op: SendOp::RdmaWrite { remote_addr: 0xdead_0000_0000 + 4096 * i, rkey: Rkey(0x1234) },
        sge: Sge { addr: 0x1_0000_8000 + 4096 * i, len: 4096, lkey: Lkey(0x5678) },
        signaled: false,
        fence: false,
        ud: None,
    };
    let response = SendWr {
        wr_id: 2 * i + 1,
        op: SendOp::SendWithInvalidate(Rkey(0x1234)),
        sge: Sge { addr: 0x1_0000_9000 + 16 * i, len: 16, lkey: Lkey(0x9abc) },
        signaled: true,
        fence: i % 3 == 0,
        ud: None,
    };
    [write, response]
}

#[test]
fn a_pair_of_sends_writes_the_wqes_that_posting_them_one_by_one_writes() {
    // The same WRs on two adapters: one by one with `post_send_deferred`, and in pairs with
    // `post_send_deferred_pair`; the rings (wrapped once), doorbell records, doorbells,
    // completions and counters must be the same.
    let mut sides = Vec::new();
    for batched in [false, true] {
        let (rig, mut dev, cq, qp, sq_pa, dbr_pa) = rc_qp();
        let mut done = Vec::new();
        for round in 0..2u64 {
            // Four pairs fill the 8-WQEBB ring; the second round wraps it.
            for i in 4 * round..4 * round + 4 {
                let wrs = write_and_response(i);
                if batched {
                    dev.post_send_deferred_pair(qp, &wrs[0], &wrs[1]).unwrap();
                } else {
                    wrs.iter().for_each(|wr| dev.post_send_deferred(qp, wr).unwrap());
                }
            }
            assert_eq!(rig.cx.counters().sq_doorbells, round, "written, not announced");
            dev.ring_send(qp).unwrap();
            let full = write_and_response(99);
            assert!(dev.post_send_deferred_pair(qp, &full[0], &full[1]).is_err(), "no room for either");
            for k in 0..4u16 {
                let counter = 8 * round as u16 + 2 * k + 1;
                assert!(rig.cx.device_mut().post_cqe(cq.0, &cqe(0x0, qp.0, counter, 0, 0, 0)));
            }
            let mut out = [Completion::default(); 8];
            let n = dev.poll_cq(cq, &mut out).unwrap();
            done.extend(out[..n].iter().map(|c| (c.wr_id, c.opcode, c.status)));
        }
        let ring = read(&rig, sq_pa, 8 * 64);
        // Room for one WQE only: the first of the pair is written, the second refused.
        for i in 0..7 {
            dev.post_send_deferred(qp, &write_and_response(20 + i)[1]).unwrap();
        }
        let wrs = write_and_response(30);
        if batched {
            assert!(dev.post_send_deferred_pair(qp, &wrs[0], &wrs[1]).is_err());
        } else {
            dev.post_send_deferred(qp, &wrs[0]).unwrap();
            assert!(dev.post_send_deferred(qp, &wrs[1]).is_err());
        }
        dev.ring_send(qp).unwrap();
        let s = dev.stats();
        let d = rig.cx.device();
        let last = read(&rig, sq_pa + 7 * 64, 64);
        sides.push((ring, be32(&read(&rig, dbr_pa, 8), 4), d.sq_doorbells.clone(), done, s.send_wqes, s.sq_doorbells, last));
    }
    let (one, batch) = (&sides[0], &sides[1]);
    assert_eq!(one.0, batch.0, "same WQE bytes");
    assert_eq!(one.6, batch.6, "the refused pair's first WQE");
    assert_eq!(be32(&batch.6, 0) & 0xff, 0x08, "an RDMA WRITE");
    assert_eq!((one.1, batch.1), (24, 24), "DBR[1]: 16 WQEs, 7 singles and the refused pair's first");
    assert_eq!(one.2, batch.2, "same doorbells, each carrying the newest WQE's ctrl");
    assert_eq!(one.3, batch.3);
    let expect: Vec<_> = (0..8u64).map(|i| (2 * i + 1, WcOpcode::Send, WcStatus::Success)).collect();
    assert_eq!(batch.3, expect, "the responses complete (their WRITEs unsignaled)");
    assert_eq!((one.4, one.5), (batch.4, batch.5));
}
