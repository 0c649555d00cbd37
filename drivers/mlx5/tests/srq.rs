//! Shared receive queues through the driver, against the emulated ConnectX over the port's local
//! loopback: N RC connections whose receiving QPs share one SRQ (RMP) with fewer receives than
//! connections and one receive CQ; traffic completes through RNR retries while the owner
//! reposts; the SRQ limit event arrives once per arming; nothing is left behind.
use crate::common;
use common::*;
use hal::{DmaRegion, Hal};
use mlx5::device::event;
use mlx5::{Mlx5Verbs, SrqId};
use rdma::{Access, Completion, Control, Cqn, DataPath, Lkey, Neighbours, Qpn, RcConnectAttrs, RecvWr, SendOp, SendWr, Sge, SrqVerbs, Srqn, WcOpcode, WcStatus};

type V = Mlx5Verbs<emu_connectx::SimHal, emu_connectx::Bar0>;
const SLOT: u64 = 256;

struct Bench {
    rig: Rig,
    v: V,
    srq: SrqId,
    rcq: Cqn,
    scq: Cqn,
    senders: Vec<Qpn>,
    receivers: Vec<Qpn>,
    buf: emu_connectx::SimDma,
    lkey: Lkey,
    /// Receive slots not posted.
    free: Vec<u64>,
}

fn connect(v: &mut V, qp: Qpn, peer: Qpn) {
    let attrs = RcConnectAttrs {
        remote_qpn: peer,
        remote_ip: v.local_ip(),
        remote_mac: v.local_mac(),
        rq_psn: 0x100,
        sq_psn: 0x100,
        mtu: 1024,
        udp_sport: 0,
        retry_cnt: 7,
        rnr_retry: 7, // infinite: the sender waits for the owner to repost
        timeout: 14,
        min_rnr_timer: 1,
        max_rd_atomic: 1,
        max_dest_rd_atomic: 1,
        access: Access { local_write: true, remote_read: false, remote_write: false },
    };
    v.connect_rc_qp(qp, &attrs).unwrap();
}

fn bench(n: usize, log_srq: u8) -> Bench {
    let (rig, hal, bar) = rig();
    let cx = rig.cx.clone();
    hal.set_relax_hook(Box::new(move || {
        cx.poll();
    }));
    let mut v = Mlx5Verbs::bring_up(hal, bar, cfg()).unwrap();
    let srq = v.test_device().create_srq(log_srq, 0).unwrap();
    let rcq = v.create_cq(64).unwrap();
    let scq = v.create_cq(64).unwrap();
    let buf = v.alloc_buf(1 << 20).unwrap();
    let (lkey, _) = v.reg_mr(buf.paddr(), 1 << 20, Access { local_write: true, ..Default::default() }).unwrap();
    let (mut senders, mut receivers) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let s = v.create_rc_qp(scq, scq, 16, 1).unwrap();
        let r = v.test_device().create_qp_srq(rcq, rcq, 2, srq).unwrap();
        connect(&mut v, s, r);
        connect(&mut v, r, s);
        senders.push(s);
        receivers.push(r);
    }
    let cap = v.test_device().srq(srq).unwrap().capacity() as u64;
    Bench { rig, v, srq, rcq, scq, senders, receivers, buf, lkey, free: (0..cap).collect() }
}

impl Bench {
    /// Post a receive into a free slot (its index is the wr_id).
    fn post(&mut self) {
        let slot = self.free.pop().expect("a free slot");
        let wr = RecvWr { wr_id: slot, sge: Sge { addr: self.buf.paddr() + slot * SLOT, len: SLOT as u32, lkey: self.lkey } };
        self.v.test_device().post_srq_recv(self.srq, &wr).unwrap();
    }
    /// SEND `len` bytes of `fill` from sender `k` (payload area above the receive slots).
    fn send(&mut self, k: usize, id: u64, fill: u8, len: u32) {
        let at = 0x8_0000 + (k as u64 * 16 + id % 16) * SLOT;
        self.buf.write(at as usize, &vec![fill; len as usize]);
        let wr = SendWr { wr_id: id, op: SendOp::Send, sge: Sge { addr: self.buf.paddr() + at, len, lkey: self.lkey }, signaled: true, fence: false, ud: None };
        self.v.post_send(self.senders[k], &wr).unwrap();
    }
    fn step(&mut self) {
        self.v.poll();
        self.v.test_device().hal().relax();
    }
    fn rnr_naks(&self) -> u64 {
        self.rig.cx.device().engine.as_ref().unwrap().counters().rnr_nak_sent
    }
    fn finish(mut self) {
        assert!(self.v.test_device().destroy_srq(self.srq).is_err(), "refused while QPs use it");
        for q in self.senders.iter().chain(&self.receivers) {
            self.v.destroy_qp(*q).unwrap();
        }
        self.v.test_device().destroy_srq(self.srq).unwrap();
        assert_eq!(self.v.live_srqs(), 0);
        self.v.destroy_cq(self.rcq).unwrap();
        self.v.destroy_cq(self.scq).unwrap();
        self.v.dereg_mr(self.lkey).unwrap();
        let st = self.v.shutdown().unwrap();
        assert_eq!(st.pages_given, st.pages_reclaimed);
        assert_eq!(self.rig.cx.counters().objects_abandoned, 0);
    }
}

#[test]
fn connections_outnumbering_the_srq_buffers_complete_through_rnr_retry_and_reposts() {
    let (n, per) = (6usize, 4u64);
    let mut b = bench(n, 3); // 7 receives for 6 connections x 4 messages
    assert_eq!(b.v.test_device().srq(b.srq).unwrap().capacity(), 7);
    for _ in 0..3 {
        b.post();
    }
    for k in 0..n {
        for m in 0..per {
            b.send(k, m, (k * 16) as u8 + m as u8, 64 + k as u32);
        }
    }
    let mut got = vec![0u64; n];
    let mut sent = 0;
    let mut wc = [Completion::default(); 16];
    for _ in 0..200_000 {
        b.step();
        let (rcq, scq) = (b.rcq, b.scq);
        let k = b.v.poll_cq(rcq, &mut wc);
        for c in wc[..k].to_vec() {
            assert_eq!((c.status, c.opcode), (WcStatus::Success, WcOpcode::Recv), "{c:?}");
            let q = b.receivers.iter().position(|&r| r == c.qpn).expect("a receiver QP");
            assert_eq!(c.byte_len, 64 + q as u32);
            let mut data = vec![0u8; c.byte_len as usize];
            b.buf.read((c.wr_id * SLOT) as usize, &mut data);
            let want = (q * 16) as u8 + got[q] as u8;
            assert!(data.iter().all(|&x| x == want), "connection {q} message {} in order", got[q]);
            got[q] += 1;
            b.free.push(c.wr_id);
            b.post();
        }
        let k = b.v.poll_cq(scq, &mut wc);
        for c in &wc[..k] {
            assert_eq!(c.status, WcStatus::Success, "{c:?}");
            sent += 1;
        }
        if sent == n as u64 * per && got.iter().all(|&g| g == per) {
            break;
        }
    }
    assert_eq!(got, vec![per; n]);
    assert_eq!(sent, n as u64 * per);
    assert!(b.rnr_naks() > 0, "the SRQ ran dry and senders were told to retry");
    assert_eq!(b.v.stats().bad_cqes, 0);
    b.finish();
}

#[test]
fn srq_limit_event_arrives_once_per_arming() {
    let mut b = bench(2, 3);
    // All 7 in one batch (one doorbell-record update), through the verbs seam; an 8th is refused.
    let wrs: Vec<RecvWr> = b.free.drain(..).map(|s| RecvWr { wr_id: s, sge: Sge { addr: b.buf.paddr() + s * SLOT, len: SLOT as u32, lkey: b.lkey } }).collect();
    b.v.post_srq_recv_batch(Srqn(b.srq.0), &wrs).unwrap();
    assert!(b.v.post_srq_recv(Srqn(b.srq.0), &wrs[0]).is_err(), "SRQ full");
    b.v.test_device().arm_srq(b.srq, 3).unwrap();
    let mut received = 0u64;
    let deliver = |b: &mut Bench, count: u64, received: &mut u64| {
        for _ in 0..count {
            let k = (*received % 2) as usize;
            b.send(k, *received, 0x5a, 32);
            *received += 1;
        }
        let mut seen = 0;
        let mut wc = [Completion::default(); 16];
        for _ in 0..50_000 {
            b.step();
            let rcq = b.rcq;
            seen += b.v.poll_cq(rcq, &mut wc);
            let scq = b.scq;
            b.v.poll_cq(scq, &mut wc);
            if seen as u64 == count {
                break;
            }
        }
        assert_eq!(seen as u64, count);
        // One more turn so the EQ is read after the last completion.
        b.step();
        b.v.poll();
        b.v.test_device().srq(b.srq).unwrap().limit_events
    };
    assert_eq!(deliver(&mut b, 4, &mut received), 0, "3 left: not below the limit");
    assert_eq!(deliver(&mut b, 1, &mut received), 1, "2 left: the event");
    assert_eq!(deliver(&mut b, 1, &mut received), 1, "disarmed until armed again");
    b.v.test_device().arm_srq(b.srq, 1).unwrap();
    assert_eq!(deliver(&mut b, 1, &mut received), 2, "re-armed: the next drop below fires again");
    let rmpn = b.v.test_device().srq(b.srq).unwrap().rmpn;
    let mut limits = 0;
    while let Some(e) = b.v.test_device().take_event() {
        if e.event_type == event::SRQ_RQ_LIMIT {
            assert_eq!(e.object, rmpn);
            limits += 1;
        }
    }
    assert_eq!(limits, 2);
    // Through the verbs seam: reported once, then nothing new.
    let id = Srqn(b.srq.0);
    assert!(b.v.srq_limit_reached(id));
    assert!(!b.v.srq_limit_reached(id));
    assert!(b.v.test_device().arm_srq(b.srq, 8).is_err(), "a limit beyond the SRQ is refused");
    b.finish();
}

/// The adapter finds the SRQ's WQE list broken (a next_wqe_index outside the queue): the driver
/// hears SRQ_CATAS_ERROR for the SRQ (marked failed) and SRQ_LAST_WQE for every QP on it, and
/// everything still tears down cleanly.
#[test]
fn srq_in_error_is_reported_with_its_qps() {
    let mut b = bench(3, 3);
    let rmpn = b.v.test_device().srq(b.srq).unwrap().rmpn;
    // Corrupt the WQE the adapter fetches next, behind the driver's back once it is posted (the
    // driver writes a WQE's link with its data when it posts it).
    let (pa, next) = {
        let d = b.rig.cx.device();
        let r = &d.rmps[&rmpn];
        (r.buf.pas[0], r.next)
    };
    b.post();
    b.rig.mem.write(pa + next as u64 * 32 + 2, &0x7777u16.to_be_bytes());
    for _ in 0..10 {
        b.step();
    }
    b.v.poll();
    assert!(b.v.test_device().srq(b.srq).unwrap().failed);
    let mut catas = 0;
    let mut last = Vec::new();
    while let Some(e) = b.v.test_device().take_event() {
        match e.event_type {
            event::SRQ_CATAS_ERROR => {
                assert_eq!(e.object, rmpn);
                catas += 1;
            }
            event::SRQ_LAST_WQE => last.push(Qpn(e.object)),
            _ => {}
        }
    }
    assert_eq!(catas, 1);
    last.sort();
    let mut want = b.receivers.clone();
    want.sort();
    assert_eq!(last, want);
    b.finish();
}

/// Closing a connection whose receiving QP is on the SRQ (to ERROR, then destroy) brings the
/// adapter's SRQ_LAST_WQE for that QP: routine, so counted on its own counter, not as an error
/// event, and not handed to the app as a failed QP by `take_qp_error`.
#[test]
fn srq_last_wqe_after_a_close_is_counted_and_is_not_a_qp_error() {
    let mut b = bench(2, 3);
    let before = b.v.stats();
    let gone = b.receivers.remove(0);
    b.v.qp_to_error(gone).unwrap();
    for _ in 0..10 {
        b.step();
    }
    b.v.destroy_qp(gone).unwrap();
    let s = b.v.stats();
    assert_eq!(s.srq_last_wqe_events, before.srq_last_wqe_events + 1, "one SRQ_LAST_WQE for the closed QP");
    assert_eq!(s.error_events, before.error_events, "not an error event");
    assert_eq!(b.v.take_qp_error(), None, "not reported as a failed QP");
    assert!(b.v.test_device().take_event().is_none(), "take_qp_error read the event queue");
    b.finish();
}

/// A QP error the owner has not read yet survives a flood of routine events: 70 SRQ-fed QPs
/// closed after it (one SRQ_LAST_WQE each, more than the 64 events kept) push out routine
/// events only, so `take_qp_error` still names the failed QP; the drops are counted.
#[test]
fn a_qp_error_is_not_pushed_out_by_many_srq_last_wqe_events() {
    let mut b = bench(71, 7);
    let before = b.v.stats();
    let failed = b.receivers[0];
    assert!(b.rig.cx.inject_qp_error_on(failed.0), "error injected");
    for _ in 0..10 {
        b.step();
    }
    assert_eq!(b.v.stats().error_events, before.error_events + 1, "the QP error event");
    let gone: Vec<_> = b.receivers.drain(1..).collect();
    for q in &gone {
        b.v.qp_to_error(*q).unwrap();
    }
    for _ in 0..10 {
        b.step();
    }
    for q in gone {
        b.v.destroy_qp(q).unwrap();
    }
    let s = b.v.stats();
    assert!(s.srq_last_wqe_events - before.srq_last_wqe_events >= 70, "one SRQ_LAST_WQE per closed QP");
    assert!(s.events_dropped - before.events_dropped >= 7, "more than 64 unread: some dropped ({})", s.events_dropped);
    assert_eq!(b.v.take_qp_error(), Some(failed), "the error kept");
    b.finish();
}

/// A receiving QP destroyed while its receive CQEs still sit in the shared CQ: the driver takes
/// them out of the CQ at destroy (as Linux cleans the CQ) and posts their SRQ WQEs again with the
/// same buffers, so nothing of the dead connection is reported and the SRQ leaks nothing. A new
/// QP that gets the same QPN (the adapter hands out the lowest free number) sees only its own
/// receive; the other connection keeps receiving.
#[test]
fn destroying_a_qp_on_the_srq_cleans_its_cqes_so_a_reused_qpn_gets_none() {
    let mut b = bench(2, 3);
    for _ in 0..4 {
        b.post();
    }
    b.send(0, 0, 0x11, 16);
    b.send(0, 1, 0x12, 16);
    // Run until the sender saw both ACKs, without reading the receive CQ.
    let mut wc = [Completion::default(); 16];
    let mut acked = 0;
    for _ in 0..10_000 {
        b.step();
        let scq = b.scq;
        acked += b.v.poll_cq(scq, &mut wc);
        if acked == 2 {
            break;
        }
    }
    assert_eq!(acked, 2);
    let gone = b.receivers.remove(0);
    b.v.destroy_qp(gone).unwrap();
    assert_eq!(b.v.stats().cqes_cleaned, 2, "both receive CQEs taken out at destroy");
    let s = b.v.test_device().srq(b.srq).unwrap();
    assert_eq!(s.free_slots(), s.capacity() - 4, "the 2 consumed WQEs posted again: 4 posted");
    let rcq = b.rcq;
    assert_eq!(b.v.poll_cq(rcq, &mut wc), 0, "nothing of the destroyed QP is reported");
    // A new connection whose receiving QP gets the destroyed QP's number.
    let (scq, srq) = (b.scq, b.srq);
    let r2 = b.v.test_device().create_qp_srq(rcq, rcq, 2, srq).unwrap();
    let s2 = b.v.create_rc_qp(scq, scq, 16, 1).unwrap();
    assert_eq!(r2, gone, "the adapter reuses the lowest free QPN");
    connect(&mut b.v, s2, r2);
    connect(&mut b.v, r2, s2);
    let old = std::mem::replace(&mut b.senders[0], s2);
    b.senders.push(old);
    b.receivers.insert(0, r2);
    b.send(0, 2, 0x31, 24);
    b.send(1, 0, 0x21, 16);
    let mut got = Vec::new();
    for _ in 0..10_000 {
        b.step();
        let n = b.v.poll_cq(rcq, &mut wc);
        got.extend_from_slice(&wc[..n]);
        if got.len() >= 2 {
            break;
        }
    }
    for _ in 0..100 {
        b.step();
        let n = b.v.poll_cq(rcq, &mut wc);
        got.extend_from_slice(&wc[..n]);
    }
    assert_eq!(got.len(), 2, "one receive per live connection, none from the old one: {got:?}");
    for c in &got {
        assert_eq!(c.status, WcStatus::Success);
        let mut data = vec![0u8; c.byte_len as usize];
        b.buf.read((c.wr_id * SLOT) as usize, &mut data);
        if c.qpn == r2 {
            assert_eq!(data, vec![0x31; 24], "the new QP's receive holds its own SEND");
        } else {
            assert_eq!((c.qpn, data), (b.receivers[1], vec![0x21; 16]));
        }
        b.free.push(c.wr_id);
    }
    assert_eq!(b.v.stats().bad_cqes, 0);
    b.finish();
}
