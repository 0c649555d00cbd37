//! The initiator's I/O queues driven from threads of their own (issue #13: `queues=N` driven
//! from N cores, like SPDK perf's core mask). Over the mlx5 driver and the emulated ConnectX, a
//! host's N I/O queues (N = 2 and 4) are lent out (`Host::lend_io_queues`), each to a std
//! thread that runs that queue's submit/poll loop alone with verified data: writes of a pattern
//! to the queue's own LBA range at queue depth 8, then reads of every block written, checked
//! byte for byte. Meanwhile the owner thread keeps the admin queue (`Host::tick`: keep-alive,
//! with a short KATO so several go out while the lanes run) and drives the target, both
//! emulated adapters and the virtual clock. The emulated adapter, its memory, clock and link are
//! shared by the threads as hardware is (a lock per access inside the stand-in); the lanes
//! share nothing with each other or with the owner. And a lane whose QP the adapter moves to
//! error mid-run: the owner's turn hears the adapter's event and that lane stops at once.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::thread;
use std::time::{Duration, Instant};

use hal::DmaRegion;
use nvmeof::bench::{lanes, BenchConfig, Pattern};
use nvmeof::host::{Host, HostConfig, IoDone, IoKind, IoLane, LaneWork};
use nvmeof::wire::Status;

use crate::emu_pair::*;

/// Blocks written (then read) per queue, 4 KiB each, and the queue depth each lane keeps.
const PER_QUEUE: u64 = 300;
const BLOCKS: u32 = 8;
const QD: u16 = 8;
/// Virtual time the owner adds per turn, and after which it stops the lanes (a hang fails the
/// test instead of blocking it).
const TURN_NS: u64 = 5_000;
const LIMIT_NS: u64 = 60_000_000_000;

/// What a lane did: blocks written, blocks read back and checked, I/O errors.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Tally {
    written: u64,
    verified: u64,
    errors: u64,
}

/// The first LBA of the 4 KiB block `i` of queue `qid` (each queue has a range of its own).
fn lba_of(qid: u16, i: u64) -> u64 {
    qid as u64 * 16_384 + i * BLOCKS as u64
}

fn expected(lba: u64) -> Vec<u8> {
    (0..BLOCKS as usize * 512).map(|j| pattern(lba + (j / 512) as u64, j % 512)).collect()
}

/// One queue's loop, on its own thread: every block written, then (once the owner has sent two
/// Keep Alives, `kept_alive`, so that they go out while the lanes hold their queues whatever the
/// threads' speeds) every block read and checked.
fn drive(mut lane: IoLane<V>, stop: &AtomicBool, kept_alive: &AtomicBool) -> (IoLane<V>, Tally) {
    let qid = lane.qid();
    let mut t = Tally::default();
    let mut done = [IoDone { queue: 0, slot: 0, status: Status::SUCCESS, dw0: 0, latency_ns: 0 }; 16];
    // Per slot: the block index in flight on it.
    let mut inflight = vec![None; lane.depth() as usize];
    for kind in [IoKind::Write, IoKind::Read] {
        while kind == IoKind::Read && !kept_alive.load(Relaxed) && !stop.load(Relaxed) {
            thread::yield_now();
        }
        let (mut next, mut finished) = (0u64, 0u64);
        while finished < PER_QUEUE && !stop.load(Relaxed) {
            while next < PER_QUEUE && inflight.iter().flatten().count() < QD as usize {
                let Some(slot) = lane.alloc_slot() else { break };
                let lba = lba_of(qid, next);
                if kind == IoKind::Write {
                    let (buf, off, _) = lane.slot_buf(slot);
                    buf.write(off, &expected(lba));
                }
                lane.submit(slot, kind, 1, lba, BLOCKS, 0).expect("submit");
                inflight[slot as usize] = Some(next);
                next += 1;
            }
            let n = lane.poll(0, &mut done).expect("poll");
            for d in &done[..n] {
                assert_eq!(d.queue, qid, "a completion of another queue");
                let i = inflight[d.slot as usize].take().expect("a completion for a slot in flight");
                finished += 1;
                if !d.status.is_success() {
                    t.errors += 1;
                    continue;
                }
                if kind == IoKind::Write {
                    t.written += 1;
                } else {
                    let lba = lba_of(qid, i);
                    let (buf, off, _) = lane.slot_buf(d.slot);
                    let mut got = vec![0u8; BLOCKS as usize * 512];
                    buf.read(off, &mut got);
                    assert!(got == expected(lba), "queue {qid}: block at LBA {lba} read back wrong");
                    t.verified += 1;
                }
            }
            if n == 0 {
                thread::yield_now();
            }
        }
    }
    (lane, t)
}

fn queues_on_threads(n: u16) {
    let (mut w, mut h) = setup_with(n);
    // A KATO short enough that the owner sends Keep Alives while the lanes run.
    let cfg = HostConfig { io_queues: n, kato_ms: 20, ..four_queues(QD) };
    let mut host = Host::connect(&mut h.v, &mut w, cfg, SUBNQN).expect("connect");
    assert_eq!(host.io_queues().0, n);
    let lanes = host.lend_io_queues();
    assert_eq!(lanes.len(), n as usize);
    assert_eq!(host.io_queues().0, 0, "the host holds no I/O queue while they are lent");
    let (stop, kept_alive) = (AtomicBool::new(false), AtomicBool::new(false));
    let ka_before = host.stats.keep_alives;
    let results: Vec<(IoLane<V>, Tally)> = thread::scope(|s| {
        let handles: Vec<_> = lanes.into_iter().map(|l| s.spawn(|| drive(l, &stop, &kept_alive))).collect();
        // The owner: admin queue and keep-alive on the device, the target, adapters, clock.
        let start = w.clock.now_ns();
        while !handles.iter().all(|t| t.is_finished()) {
            w.turn();
            w.clock.advance(TURN_NS);
            rdma::Control::poll(&mut h.v);
            host.tick(&mut h.v, w.clock.now_ns()).expect("admin queue");
            if host.stats.keep_alives - ka_before >= 2 {
                kept_alive.store(true, Relaxed);
            }
            if w.clock.now_ns() - start > LIMIT_NS {
                stop.store(true, Relaxed);
            }
        }
        handles.into_iter().map(|t| t.join().expect("a lane's thread failed")).collect()
    });
    let keep_alives = host.stats.keep_alives - ka_before;
    let mut lanes = Vec::new();
    for (lane, t) in results {
        assert_eq!(t, Tally { written: PER_QUEUE, verified: PER_QUEUE, errors: 0 }, "queue {}", lane.qid());
        assert_eq!(lane.stats.completions, 2 * PER_QUEUE);
        lanes.push(lane);
    }
    assert!(keep_alives >= 2, "the owner kept the admin queue alive while the lanes ran ({keep_alives} Keep Alives)");
    host.return_io_queues(lanes);
    assert_eq!(host.io_queues().0, n);
    assert_eq!(host.stats.errors, 0);
    assert!(host.stats.completions >= 2 * PER_QUEUE * n as u64);
    // Back with the host: its own submit/poll drive them again.
    let r = nvmeof::verify::run(&mut host, &mut h.v, &mut w, 1, 200, 8, 8, 7).expect("verify after the lanes came back");
    assert!(r.errors == 0 && r.mismatches == 0, "{r:?}");
    host.disconnect(&mut h.v, &mut w).expect("disconnect");
    println!("HOST-THREADS queues={n} ios={} keep_alives_while_lent={keep_alives}", 2 * PER_QUEUE * n as u64);
}

#[test]
fn two_io_queues_on_two_threads_with_verified_data() {
    queues_on_threads(2);
}

#[test]
fn four_io_queues_on_four_threads_with_verified_data() {
    queues_on_threads(4);
}

/// Disconnect `host` (a failed one is released) and let both sides settle: the initiator's
/// QPs and CQs back to `base`.
fn release_to_baseline(host: Host<V>, w: &mut World, h: &mut testbed::Node, base: (usize, usize)) {
    let _ = host.disconnect(&mut h.v, w);
    for _ in 0..1000 {
        rdma::Control::poll(&mut h.v);
        w.turn();
    }
    assert_eq!((h.v.live_qps(), h.v.live_cqs()), base, "initiator objects after the release");
}

/// Mid-bench (`bench::lanes::on_lanes`, 3 I/O queues on 3 std threads, QD 8 each) the emulated
/// adapter moves queue 2's QP to error on its own (`inject_qp_error_on`, as a catastrophic
/// work-queue error: its event names the QP). Its responses sit in an SRQ, so nothing is flushed
/// and its commands in flight are never answered: only the adapter's event says so. The owner's
/// turn drains the event (`Host::take_qp_errors`) and raises the lane's flag; the lane stops at
/// its next poll with `Error::QpError { qid: 2 }`, with no virtual time passing after the
/// owner's turns that saw the event (the owner then stops turning until it ended). The other
/// two lanes run their share to the end, the report names the failed lane, the host comes back
/// failed and its release leaves no QP or CQ and no target queue behind.
#[test]
fn a_lane_whose_qp_the_adapter_moved_to_error_stops_at_once_and_the_others_finish() {
    const VICTIM: u16 = 2;
    const SHARE: u64 = 2_000;
    let (mut w, mut h) = setup_with(3);
    let (qps0, cqs0) = (h.v.live_qps(), h.v.live_cqs());
    let cfg = HostConfig { io_queues: 3, kato_ms: 20, ..four_queues(QD) };
    let mut host = Host::connect(&mut h.v, &mut w, cfg, SUBNQN).expect("connect");
    let admin_qp = w.host_qps[0];
    let bench = BenchConfig { pattern: Pattern::RandMix { read_pct: 50 }, block_size: 4096, queue_depth: QD, duration_ns: u64::MAX, max_ios: 3 * SHARE, seed: 5, threads: true };
    let (clock, cx) = (h.clock.clone(), h.cx.clone());
    // The victim's loop: clock reads (two per pass) and idle calls (passes that reaped nothing).
    let (reads, idles) = (AtomicU64::new(0), AtomicU64::new(0));
    let (mut injected_at, mut ended_at, mut prompt) = (0, 0, false);
    let r = lanes::on_lanes(&mut host, &mut h.v, &mut w, 1, &bench, |jobs, turn| {
        thread::scope(|s| {
            let (clock, reads, idles) = (&clock, &reads, &idles);
            let victim_qp = jobs.iter().find(|j| j.qid() == VICTIM).expect("victim lane").qpn();
            let threads: Vec<_> = jobs
                .into_iter()
                .map(|job| {
                    let victim = job.qid() == VICTIM;
                    let now = move || {
                        if victim {
                            reads.fetch_add(1, Relaxed);
                        }
                        clock.now_ns()
                    };
                    let idle = move || {
                        if victim {
                            idles.fetch_add(1, Relaxed);
                        }
                        thread::yield_now();
                    };
                    (victim, s.spawn(move || job.run(&now, &idle)))
                })
                .collect();
            let finished = |victim: bool| threads.iter().filter(|t| t.0 == victim).all(|t| t.1.is_finished());
            // Mid-run: once the victim has reaped completions in a few passes of its loop.
            while reads.load(Relaxed) / 2 < idles.load(Relaxed) + 4 {
                turn();
            }
            assert!(cx.inject_qp_error_on(victim_qp.0), "the victim's QP was in RTS");
            injected_at = clock.now_ns();
            // The turns that see the event (the driver reads the adapter's event queue), then
            // none: the victim must end without any more virtual time.
            for _ in 0..3 {
                turn();
            }
            let t0 = Instant::now();
            while !finished(true) && t0.elapsed() < Duration::from_secs(30) {
                thread::yield_now();
            }
            prompt = finished(true);
            ended_at = clock.now_ns();
            if !prompt {
                // Not stopped: fail the admin queue too, so the owner's tick stops every lane
                // and the test fails below instead of hanging.
                cx.inject_qp_error_on(admin_qp.0);
            }
            while !finished(true) || !finished(false) {
                turn();
            }
            threads.into_iter().map(|t| t.1.join().expect("a lane's thread panicked")).collect()
        })
    });
    assert!(prompt, "the lane whose QP failed did not stop within 30 s without more owner turns");
    let r = r.expect("the bench (the admin queue kept)");
    println!("HOST-THREADS qp error: injected at {injected_at} ns, lane ended by {ended_at} ns; lanes {:?}; failed {:?}", r.per_lane.iter().map(|l| (l.0, l.1.ios)).collect::<Vec<_>>(), r.failed);
    assert!(ended_at - injected_at <= 3 * 500, "the lane ended within the owner's 3 turns after the event");
    // The adapter writes the victim's flushed completions and raises the QP's error event in
    // the same owner turn; whether the owner's drain raises the lane's flag before the lane
    // polls a flushed completion is a race between threads, so either report is the lane's QP
    // failing (the bound above is what shows the drain: without it the lane ends later).
    assert_eq!(r.failed.len(), 1, "one lane failed: {:?}", r.failed);
    assert!(
        matches!(r.failed[0], (VICTIM, nvmeof::Error::QpError { qid: VICTIM }) | (VICTIM, nvmeof::Error::Transport(_))),
        "the report names the failed lane: {:?}",
        r.failed
    );
    assert_eq!(r.per_lane.iter().map(|l| l.0).collect::<Vec<_>>(), vec![1, 3]);
    for (qid, l) in &r.per_lane {
        assert_eq!((l.ios, l.errors, l.lost), (SHARE, 0, 0), "lane {qid} ran its share");
    }
    assert_eq!(r.merged.ios, 2 * SHARE);
    assert!(host.stats.completions > 2 * SHARE, "the victim had completed I/O before its QP failed");
    assert!(host.failed(), "the queue comes back failed: the controller needs a reconnect");
    release_to_baseline(host, &mut w, &mut h, (qps0, cqs0));
    assert_eq!(w.target.queues(), 0, "target queues after the release");
}

/// Verified I/O on lent queues of a host alone (`verify::lanes::on_lanes`, 2 queues on 2 std
/// threads) and the adapter moves the admin queue's QP to error mid-run: the owner's turn hears
/// the event, its `Host::tick` fails, and it stops every lane. Each lane reports what happened
/// (`Error::ControllerFailed`: its controller failed while its queue was lent), not a protocol
/// error of its own, and the run ends with the admin queue's failure; the host comes back
/// failed and its release leaves nothing behind.
#[test]
fn verify_lanes_stopped_by_a_failed_admin_queue_report_the_controllers_failure() {
    let (mut w, mut h) = setup_with(2);
    let (qps0, cqs0) = (h.v.live_qps(), h.v.live_cqs());
    let cfg = HostConfig { io_queues: 2, kato_ms: 20, ..four_queues(QD) };
    let mut host = Host::connect(&mut h.v, &mut w, cfg, SUBNQN).expect("connect");
    let admin_qp = w.host_qps[0];
    let work = nvmeof::verify::reconnecting::Workload { count: 1_000_000, qd: QD as usize, max_blocks: 1, seed: 3, stall_ns: LIMIT_NS };
    let (clock, cx) = (h.clock.clone(), h.cx.clone());
    let mut ends = Vec::new();
    let r = nvmeof::verify::lanes::on_lanes(&mut host, &mut h.v, &mut w, &work, |jobs, turn| {
        let out: Vec<nvmeof::host::LentOutcome<V>> = thread::scope(|s| {
            let threads: Vec<_> = jobs.into_iter().map(|job| s.spawn(|| job.run(&|| clock.now_ns(), &thread::yield_now))).collect();
            for _ in 0..50 {
                turn();
            }
            assert!(cx.inject_qp_error_on(admin_qp.0), "the admin queue's QP was in RTS");
            let t0 = Instant::now();
            while !threads.iter().all(|t| t.is_finished()) && t0.elapsed() < Duration::from_secs(30) {
                turn();
            }
            threads.into_iter().map(|t| t.join().expect("a lane's thread panicked")).collect()
        });
        ends = out.iter().map(|o| (o.0.qid(), o.1.clone())).collect();
        out
    });
    println!("HOST-THREADS admin failure: {r:?}; lanes {ends:?}");
    assert!(matches!(r, Err(ref e) if *e != nvmeof::Error::ControllerFailed), "the run ends with the admin queue's failure: {r:?}");
    assert_eq!(ends.len(), 2, "both lanes ended: {ends:?}");
    for (qid, end) in &ends {
        assert_eq!(*end, Ok(nvmeof::host::LaneEnd::Stopped(nvmeof::Error::ControllerFailed)), "lane {qid}");
    }
    assert!(host.failed(), "the host comes back failed");
    release_to_baseline(host, &mut w, &mut h, (qps0, cqs0));
}
