//! Queue groups (`mlx5::QueueGroup`) against the emulated ConnectX over the port's local
//! loopback: each group owns its CQ, SRQ, its QPs' rings and a UAR page of its own, and serves
//! traffic through `rdma::DataPath` without the device; the device creates, connects and
//! destroys QPs in it (CQ cleaned, SRQ buffers back) and publishes CQ errors, SRQ limit events
//! and its own failure for the group, which takes them in by itself (`QueueGroup::sync`, also on
//! a thread of its own); a device failure makes it flush and be released without commands.
use crate::common;
use common::*;
use hal::{DmaRegion, Hal};
use mlx5::{Error, Mlx5Verbs, QueueGroup};
use rdma::{Access, Completion, Control, Cqn, DataPath, Lkey, Neighbours, Qpn, RcConnectAttrs, RecvWr, SendOp, SendWr, Sge, WcOpcode, WcStatus};

type V = Mlx5Verbs<emu_connectx::SimHal, emu_connectx::Bar0>;
type G = QueueGroup<emu_connectx::SimDma, emu_connectx::Bar0>;
const SLOT: u64 = 256;

fn attrs(v: &V, peer: Qpn) -> RcConnectAttrs {
    RcConnectAttrs {
        remote_qpn: peer,
        remote_ip: v.local_ip(),
        remote_mac: v.local_mac(),
        rq_psn: 0x100,
        sq_psn: 0x100,
        mtu: 1024,
        udp_sport: 0,
        retry_cnt: 7,
        rnr_retry: 7,
        timeout: 14,
        min_rnr_timer: 1,
        max_rd_atomic: 1,
        max_dest_rd_atomic: 1,
        access: Access { local_write: true, remote_read: false, remote_write: false },
    }
}

/// Two groups of `per` QPs each, every group QP connected to a plain QP of the device (its own
/// CQ and RQ) over the loopback.
struct Bench {
    rig: Rig,
    v: V,
    groups: Vec<G>,
    /// (group, group QP, plain peer QP)
    pairs: Vec<(usize, Qpn, Qpn)>,
    pcq: Cqn,
    buf: emu_connectx::SimDma,
    lkey: Lkey,
}

fn bench(ngroups: usize, per: usize) -> Bench {
    let (rig, hal, bar) = rig();
    let cx = rig.cx.clone();
    hal.set_relax_hook(Box::new(move || {
        cx.poll();
    }));
    let mut v = Mlx5Verbs::bring_up(hal, bar, cfg()).unwrap();
    let pcq = v.create_cq(256).unwrap();
    let buf = v.alloc_buf(1 << 20).unwrap();
    let (lkey, _) = v.reg_mr(buf.paddr(), 1 << 20, Access { local_write: true, ..Default::default() }).unwrap();
    let mut groups = Vec::new();
    let mut pairs = Vec::new();
    for gi in 0..ngroups {
        let mut g = v.test_device().create_group(8, 5).unwrap();
        for _ in 0..per {
            let q = v.test_device().create_group_qp(&mut g, 4).unwrap();
            let p = v.create_rc_qp(pcq, pcq, 16, 16).unwrap();
            let a = attrs(&v, q);
            v.connect_rc_qp(p, &a).unwrap();
            let a = attrs(&v, p);
            v.test_device().connect_group_qp(&mut g, q, &a).unwrap();
            pairs.push((gi, q, p));
        }
        groups.push(g);
    }
    Bench { rig, v, groups, pairs, pcq, buf, lkey }
}

impl Bench {
    fn sge(&self, slot: u64, len: u32) -> Sge {
        Sge { addr: self.buf.paddr() + slot * SLOT, len, lkey: self.lkey }
    }
    /// Post `n` receives to group `gi`'s SRQ, slots `gi * 64 ..`.
    fn fill_srq(&mut self, gi: usize, n: u64) {
        let wrs: Vec<RecvWr> = (0..n).map(|k| RecvWr { wr_id: gi as u64 * 64 + k, sge: self.sge(gi as u64 * 64 + k, SLOT as u32) }).collect();
        let srq = self.groups[gi].srqn();
        self.groups[gi].post_srq_recv_batch(srq, &wrs).unwrap();
    }
    /// SEND from plain QP `p` with `fill` bytes from the slot area above the receive slots.
    fn send_from_plain(&mut self, p: Qpn, id: u64, fill: u8, len: u32) {
        let slot = 1024 + id % 1024;
        self.buf.write((slot * SLOT) as usize, &vec![fill; len as usize]);
        let wr = SendWr { wr_id: id, op: SendOp::Send, sge: self.sge(slot, len), signaled: true, fence: false, ud: None };
        self.v.post_send(p, &wr).unwrap();
    }
    fn step(&mut self) {
        self.v.poll();
        self.v.test_device().hal().relax();
    }
    /// Poll group `gi` until `want` completions came (or give up).
    fn drain_group(&mut self, gi: usize, want: usize) -> Vec<Completion> {
        let mut got = Vec::new();
        let mut wc = [Completion::default(); 16];
        for _ in 0..100_000 {
            self.step();
            let cq = self.groups[gi].cqn();
            let n = self.groups[gi].poll_cq(cq, &mut wc);
            got.extend_from_slice(&wc[..n]);
            let pcq = self.pcq;
            let _ = self.v.poll_cq(pcq, &mut wc);
            if got.len() >= want {
                break;
            }
        }
        got
    }
}

#[test]
fn groups_serve_traffic_through_their_own_rings_and_uar_pages() {
    let mut b = bench(2, 2);
    // The device counts what lives on the adapter, groups included: GSI + 4 plain + 4 group
    // QPs; the GSI CQ, the raw Ethernet path's two, the plain QPs' one and 2 group CQs; 2 group
    // SRQs.
    assert_eq!((b.v.live_qps(), b.v.live_cqs(), b.v.live_srqs()), (9, 6, 2));
    // Each group rings its own UAR page, neither the device's nor the other group's.
    let (u0, u1) = (b.groups[0].uar(), b.groups[1].uar());
    assert!(u0 != u1 && Some(u0) != b.v.uar() && Some(u1) != b.v.uar());
    for &(gi, q, _) in &b.pairs {
        let dev = b.rig.cx.device();
        assert_eq!(dev.qps[&q.0].uar, b.groups[gi].uar(), "QP {q} rings through its group's page");
        assert_eq!(dev.cqs[&b.groups[gi].cqn().0].uar, b.groups[gi].uar());
    }
    let (q, sge) = (b.pairs[0].1, b.sge(0, 1));
    assert!(b.groups[0].post_recv(q, &RecvWr { wr_id: 0, sge }).is_err(), "receives come from the SRQ");
    for gi in 0..2 {
        b.fill_srq(gi, 8);
    }
    // Plain → group: 3 messages per connection, into the group's SRQ, seen on the group's CQ.
    let pairs = b.pairs.clone();
    for (k, &(_, _, p)) in pairs.iter().enumerate() {
        for m in 0..3u64 {
            b.send_from_plain(p, k as u64 * 16 + m, (k * 16) as u8 + m as u8, 64 + k as u32);
        }
    }
    for gi in 0..2 {
        let got = b.drain_group(gi, 6);
        assert_eq!(got.len(), 6, "group {gi}: {got:?}");
        let mut next = [0u8; 4];
        for c in got {
            assert_eq!((c.status, c.opcode), (WcStatus::Success, WcOpcode::Recv), "{c:?}");
            let k = pairs.iter().position(|&(g, q, _)| g == gi && q == c.qpn).expect("a QP of this group");
            assert_eq!(c.byte_len, 64 + k as u32);
            let mut data = vec![0u8; c.byte_len as usize];
            b.buf.read((c.wr_id * SLOT) as usize, &mut data);
            let want = (k * 16) as u8 + next[k];
            assert!(data.iter().all(|&x| x == want), "connection {k} message {} in order", next[k]);
            next[k] += 1;
        }
    }
    // Group → plain: two SENDs per group QP in one doorbell each (deferred + ring).
    let db_before = b.rig.cx.counters().sq_doorbells;
    let mut wc = [Completion::default(); 32];
    for &(gi, q, p) in &pairs {
        b.v.post_recv(p, &RecvWr { wr_id: 7, sge: b.sge(900, SLOT as u32) }).unwrap();
        b.v.post_recv(p, &RecvWr { wr_id: 8, sge: b.sge(901, SLOT as u32) }).unwrap();
        for id in [1u64, 2] {
            let wr = SendWr { wr_id: id, op: SendOp::Send, sge: b.sge(1000, 32), signaled: true, fence: false, ud: None };
            b.groups[gi].post_send_deferred(q, &wr).unwrap();
        }
        b.groups[gi].ring_send(q).unwrap();
    }
    assert_eq!(b.rig.cx.counters().sq_doorbells - db_before, 4, "one doorbell per QP for two WQEs");
    let (mut sends, mut recvs) = (0, 0);
    for _ in 0..100_000 {
        b.step();
        for gi in 0..2 {
            let cq = b.groups[gi].cqn();
            let n = b.groups[gi].poll_cq(cq, &mut wc);
            for c in &wc[..n] {
                assert_eq!((c.status, c.opcode), (WcStatus::Success, WcOpcode::Send), "{c:?}");
                sends += 1;
            }
        }
        let pcq = b.pcq;
        let n = b.v.poll_cq(pcq, &mut wc);
        for c in &wc[..n] {
            assert_eq!(c.status, WcStatus::Success, "{c:?}");
            recvs += u32::from(c.opcode == WcOpcode::Recv);
        }
        if sends == 8 && recvs == 8 {
            break;
        }
    }
    assert_eq!((sends, recvs), (8, 8));
    for g in &b.groups {
        let st = g.stats();
        assert_eq!((st.send_wqes, st.sq_doorbells, st.bad_cqes), (4, 2, 0), "{st:?}");
        assert_eq!(st.completions, 10, "6 receives and 4 sends polled from its CQ: {st:?}");
    }
    let by_slot = b.v.group_stats(b.groups.iter());
    for g in &b.groups {
        assert_eq!(by_slot[g.slot()], g.stats(), "the device reports a live group's counts under its slot");
    }
    assert_eq!(b.rig.cx.counters().stray_doorbells, 0);
    finish(b);
}

fn finish(mut b: Bench) {
    for (gi, q, p) in b.pairs.clone() {
        b.v.test_device().destroy_group_qp(&mut b.groups[gi], q).unwrap();
        b.v.destroy_qp(p).unwrap();
    }
    let before = b.v.group_stats(b.groups.iter());
    for g in b.groups.drain(..) {
        assert_eq!(g.live_qps(), 0);
        b.v.test_device().destroy_group(g).unwrap();
    }
    assert_eq!(b.v.live_groups(), 0);
    assert_eq!(b.v.group_stats(core::iter::empty()), before, "a released group's counts stay with its slot");
    assert_eq!(b.v.live_srqs(), 0);
    b.v.destroy_cq(b.pcq).unwrap();
    b.v.dereg_mr(b.lkey).unwrap();
    let st = b.v.shutdown().unwrap();
    assert_eq!(st.pages_given, st.pages_reclaimed);
    assert_eq!(b.rig.cx.counters().objects_abandoned, 0);
}

#[test]
fn destroying_a_group_qp_cleans_its_cqes_and_gives_the_srq_its_buffers_back() {
    let mut b = bench(1, 2);
    b.fill_srq(0, 8);
    let cap = b.groups[0].srq().capacity();
    let (_, q0, p0) = b.pairs[0];
    let (_, q1, p1) = b.pairs[1];
    for m in 0..3 {
        b.send_from_plain(p0, m, 0x10, 32);
    }
    b.send_from_plain(p1, 9, 0x20, 32);
    // Let the adapter deliver all four (the senders see them acknowledged) without polling the
    // group's CQ.
    let (mut acked, mut wc) = (0, [Completion::default(); 8]);
    for _ in 0..100_000 {
        b.step();
        let pcq = b.pcq;
        acked += b.v.poll_cq(pcq, &mut wc);
        if acked == 4 {
            break;
        }
    }
    assert_eq!(acked, 4);
    assert_eq!(b.groups[0].srq().free_slots(), cap - 8, "eight posted, none polled yet");
    b.v.test_device().destroy_group_qp(&mut b.groups[0], q0).unwrap();
    assert_eq!(b.groups[0].stats().cqes_cleaned, 3);
    let cq = b.groups[0].cqn();
    let n = b.groups[0].poll_cq(cq, &mut wc);
    assert_eq!(n, 1, "{:?}", &wc[..n]);
    assert_eq!((wc[0].qpn, wc[0].status, wc[0].wr_id), (q1, WcStatus::Success, 3));
    assert_eq!(b.groups[0].srq().free_slots(), cap - 7, "the destroyed QP's three receives were posted again");
    b.v.destroy_qp(p0).unwrap();
    b.pairs.remove(0);
    finish(b);
}

#[test]
fn a_cq_error_and_srq_limit_reach_the_group_on_its_slow_path() {
    let mut b = bench(2, 1);
    for gi in 0..2 {
        b.fill_srq(gi, 8);
    }
    assert!(b.v.test_device().arm_group_srq(&b.groups[0].handle(), 6).is_ok());
    let p = b.pairs[0].2;
    for m in 0..3 {
        b.send_from_plain(p, m, 1, 16);
    }
    assert_eq!(b.drain_group(0, 3).len(), 3);
    b.step();
    assert!(b.groups[0].take_srq_limit(), "below 6 posted: the limit event, for this group");
    assert!(!b.groups[0].take_srq_limit(), "reported once");
    assert!(!b.groups[1].take_srq_limit());
    // Break group 0's CQ: after the sync its QP is flushed there; group 1 keeps serving.
    let cq0 = b.groups[0].cqn();
    // The emulator picks among the receive CQs of RC QPs in RTS, in QPN order.
    let pick = {
        let dev = b.rig.cx.device();
        let rts: Vec<u32> = dev.qps.values().filter(|q| q.st == 0 && q.state == 3).map(|q| q.cqn_rcv).collect();
        rts.iter().position(|&c| c == cq0.0).unwrap() as u64
    };
    assert_eq!(b.rig.cx.inject_cq_overrun(pick), Some(cq0.0));
    b.step();
    assert!(!b.groups[0].broken() && !b.groups[1].broken());
    assert!(!b.groups[0].sync(), "the device is fine");
    assert!(b.groups[0].broken(), "its CQ is in error for good: the group is broken");
    assert!(!b.groups[1].sync() && !b.groups[1].broken(), "the other group is not");
    let mut wc = [Completion::default(); 16];
    let n = b.groups[0].poll_cq(cq0, &mut wc);
    assert!(n > 0 && wc[..n].iter().all(|c| c.status == WcStatus::WrFlushed), "{:?}", &wc[..n]);
    let p1 = b.pairs[1].2;
    b.send_from_plain(p1, 50, 2, 16);
    let got = b.drain_group(1, 1);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].status, WcStatus::Success);
    finish(b);
}

#[test]
fn a_device_failure_flushes_a_group_which_is_then_released_without_the_adapter() {
    let mut b = bench(1, 2);
    b.fill_srq(0, 4);
    let (_, q, _) = b.pairs[0];
    let sge = b.sge(1000, 8);
    b.groups[0].post_send(q, &SendWr { wr_id: 77, op: SendOp::Send, sge, signaled: true, fence: false, ud: None }).unwrap();
    b.v.test_device().enter_error_state(Error::CmdQueueDead);
    assert!(b.groups[0].sync());
    assert!(matches!(b.groups[0].post_send(q, &SendWr { wr_id: 78, op: SendOp::Send, sge, signaled: true, fence: false, ud: None }), Err(Error::DeviceFailed)));
    let cq = b.groups[0].cqn();
    let mut wc = [Completion::default(); 16];
    let mut flushed = Vec::new();
    loop {
        let n = b.groups[0].poll_cq(cq, &mut wc);
        if n == 0 {
            break;
        }
        flushed.extend(wc[..n].iter().map(|c| (c.wr_id, c.status)));
    }
    flushed.sort_by_key(|&(id, _)| id);
    // The SEND that may or may not have run, and the four posted receives.
    assert!(flushed.iter().all(|&(_, s)| s == WcStatus::WrFlushed), "{flushed:?}");
    let ids: Vec<u64> = flushed.iter().map(|&(id, _)| id).filter(|&id| id != 77).collect();
    assert_eq!(ids, vec![0, 1, 2, 3]);
    // Recover with the group still held: its objects are forgotten; released, it sends no command.
    b.v.recover().unwrap();
    assert!(b.groups[0].sync(), "made before the reset");
    let cmds = b.v.stats().commands;
    let g = b.groups.remove(0);
    b.v.test_device().destroy_group(g).unwrap();
    assert_eq!(b.v.stats().commands, cmds, "nothing of it is on the adapter any more");
    // A new group works on the recovered device.
    let g = b.v.test_device().create_group(6, 3).unwrap();
    assert!(!g.failed());
    b.v.test_device().destroy_group(g).unwrap();
    let Bench { rig, v, buf, .. } = b;
    v.shutdown().unwrap();
    drop(buf);
    assert_eq!(rig.mem.stats().regions, 0, "every ring freed");
}

/// Groups polled on threads of their own learn of a device failure by themselves
/// (`QueueGroup::sync` at the top of each turn: the device is on the owner's thread and never
/// called by them): each flushes the receives posted in its SRQ, then, back with the owner
/// after recovery, is released without a command.
#[test]
fn a_device_failure_reaches_groups_polled_on_threads_of_their_own() {
    const RECVS: u64 = 4;
    let mut b = bench(3, 1);
    for gi in 0..3 {
        b.fill_srq(gi, RECVS);
    }
    let started = std::sync::Arc::new(std::sync::Barrier::new(4));
    let threads: Vec<_> = b
        .groups
        .drain(..)
        .enumerate()
        .map(|(gi, mut g)| {
            let started = started.clone();
            std::thread::spawn(move || {
                let (cq, mut wc, mut flushed) = (g.cqn(), [Completion::default(); 16], Vec::new());
                let t0 = std::time::Instant::now();
                let mut turns = 0u64;
                loop {
                    let failed = g.sync();
                    let n = g.poll_cq(cq, &mut wc);
                    for c in &wc[..n] {
                        assert!(failed, "group {gi}: nothing completes on a healthy idle device: {c:?}");
                        assert_eq!(c.status, WcStatus::WrFlushed, "group {gi}: {c:?}");
                        flushed.push(c.wr_id);
                    }
                    turns += 1;
                    if turns == 1 {
                        started.wait();
                    }
                    if flushed.len() == RECVS as usize {
                        break;
                    }
                    assert!(t0.elapsed() < std::time::Duration::from_secs(60), "group {gi}: the failure never showed");
                    std::thread::sleep(std::time::Duration::from_micros(50));
                }
                flushed.sort();
                assert_eq!(flushed, (0..RECVS).map(|k| gi as u64 * 64 + k).collect::<Vec<_>>(), "group {gi}: its own receives, each once");
                assert!(g.failed() && g.broken());
                g
            })
        })
        .collect();
    // Every group has polled its healthy CQ at least once; then the device fails here.
    started.wait();
    b.v.test_device().enter_error_state(Error::CmdQueueDead);
    b.groups = threads.into_iter().map(|t| t.join().expect("a group's thread failed")).collect();
    b.v.recover().unwrap();
    let cmds = b.v.stats().commands;
    for g in b.groups.drain(..) {
        b.v.test_device().destroy_group(g).unwrap();
    }
    assert_eq!(b.v.stats().commands, cmds, "nothing of them is on the adapter any more");
    let Bench { rig, v, buf, .. } = b;
    v.shutdown().unwrap();
    drop(buf);
    assert_eq!(rig.mem.stats().regions, 0, "every ring freed");
}

#[test]
fn shutdown_destroys_a_group_the_app_still_holds() {
    let b = bench(1, 1);
    let st = b.v.shutdown().unwrap();
    assert_eq!(st.pages_given, st.pages_reclaimed);
    assert_eq!(b.rig.cx.counters().objects_abandoned, 0);
    drop(b.groups);
}

#[test]
fn a_group_is_send_with_the_simulated_platform_types() {
    // The emulated adapter and its memory are shared across threads as hardware is
    // (tests/group_threads.rs runs groups on threads of their own).
    fn send<T: Send>() {}
    send::<G>();
    send::<(emu_connectx::SimHal, emu_connectx::ConnectX, emu_roce::MemLink)>();
}
