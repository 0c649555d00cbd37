//! Poll groups of the target (SPDK's model: one shared CQ and one SRQ per group) over the mlx5
//! driver and the emulated ConnectX: verified random I/O at QD32 over 4 queues with 1, 2 and 4
//! groups (queues spread round-robin, per-group counters); connect/disconnect with the
//! adapter's objects and pages back at baseline; a QP in error on one group leaves the other
//! queues serving; more connections than SRQ buffers (RNR NAKs, retried) and the SRQ limit
//! event; a new queue answered (attached or refused, REJ with nothing leaked) only after its
//! group's turn; a full group skipped by the round-robin; overlapping commands of two groups
//! waiting for each other's zero-copy transfers. The groups are polled in turn by one thread.

use std::collections::BTreeMap;

use hal::DmaRegion;
use nvmeof::bench::Rng;
use nvmeof::host::{cm_req_private, property_set_sqe, Host, HostConfig, HostEnv, IoDone, IoKind};
use nvmeof::nvmet::rdma::{PendingQueue, Pinned, QueueAnswer};
use nvmeof::Status;
use rdma::{Control, Qpn};
use testbed::Node;

use crate::emu_pair;
use emu_pair::*;

/// Random 4 KiB writes then reads of the same blocks, `qd` outstanding per queue on `queues`,
/// every byte checked; `n` I/Os of each kind in all. `on_turn(w, done)` runs each turn with
/// the I/Os completed so far and may name a queue to give up on (its outstanding I/Os are
/// dropped, nothing more is sent on it). Returns the I/Os completed.
#[allow(clippy::too_many_arguments)]
pub(crate) fn verified_spread<B: blockdev::BlockDevice>(w: &mut World<B>, h: &mut Node, host: &mut Host<V>, queues: &[u16], n: usize, qd: usize, seed: u64, mut on_turn: impl FnMut(&mut World<B>, usize) -> Option<u16>) -> usize {
    let mut queues = queues.to_vec();
    let mut rng = Rng::new(seed);
    // Distinct blocks: I/O `i` uses block i * stride + a random offset below the stride.
    let stride = NS_BYTES / 4096 / n as u64;
    let lbas: Vec<u64> = (0..n).map(|i| (i as u64 * stride + rng.next() % stride) * 8).collect();
    let mut done = [IoDone { queue: 0, slot: 0, status: Status::SUCCESS, dw0: 0, latency_ns: 0 }; 64];
    let mut total = 0;
    // I/Os given up with their queue: their blocks are not read back.
    let mut dropped = vec![false; n];
    for kind in [IoKind::Write, IoKind::Read] {
        let mut next = 0;
        let mut inflight: BTreeMap<(u16, u16), usize> = BTreeMap::new();
        let mut per_q: BTreeMap<u16, usize> = BTreeMap::new();
        let mut finished = 0;
        let mut turns = 0u64;
        while finished < n {
            for &q in &queues {
                while per_q.get(&q).copied().unwrap_or(0) < qd && next < n {
                    if dropped[next] {
                        next += 1;
                        finished += 1;
                        continue;
                    }
                    let lba = lbas[next];
                    let slot = host.alloc_slot(q).expect("slot");
                    let (buf, off, _) = host.slot_buf(q, slot);
                    if kind == IoKind::Write {
                        buf.write(off, &(0..4096).map(|i| pattern(lba, i)).collect::<Vec<u8>>());
                    } else {
                        buf.write(off, &[0u8; 4096]);
                    }
                    host.submit(&mut h.v, q, slot, kind, 1, lba, 8, w.clock.now_ns()).expect("submit");
                    inflight.insert((q, slot), next);
                    *per_q.entry(q).or_default() += 1;
                    next += 1;
                }
            }
            h.v.poll();
            // A queue that failed (its target QP in error) makes `poll` report it when nothing
            // else completed: that is not a completion of ours.
            let got = host.poll(&mut h.v, w.clock.now_ns(), &mut done).unwrap_or(0);
            for d in &done[..got] {
                let Some(i) = inflight.remove(&(d.queue, d.slot)) else { continue };
                let lba = lbas[i];
                assert!(d.status.is_success(), "queue {} {kind:?} LBA {lba}: {:?}", d.queue, d.status);
                *per_q.get_mut(&d.queue).expect("queue") -= 1;
                if kind == IoKind::Read {
                    let (buf, off, _) = host.slot_buf(d.queue, d.slot);
                    let mut data = vec![0u8; 4096];
                    buf.read(off, &mut data);
                    assert!(data.iter().enumerate().all(|(i, b)| *b == pattern(lba, i)), "queue {} LBA {lba}: data differs", d.queue);
                }
                finished += 1;
                total += 1;
            }
            w.turn();
            if let Some(q) = on_turn(w, total) {
                queues.retain(|&x| x != q);
                for (_, i) in inflight.iter().filter(|(k, _)| k.0 == q) {
                    dropped[*i] = true;
                    finished += 1;
                }
                inflight.retain(|k, _| k.0 != q);
                per_q.remove(&q);
            }
            turns += 1;
            assert!(turns < 20_000_000, "I/O hangs: {finished} of {n} {kind:?}s done");
        }
    }
    total
}

/// 1, 2 and 4 poll groups: 4 I/O queues, 10,000 verified random 4 KiB writes and as many
/// reads at QD32 per queue; every group serves queues (admin + I/O handed out round-robin).
#[test]
fn verified_io_over_1_2_and_4_poll_groups() {
    for groups in [1usize, 2, 4] {
        let (mut w, mut h) = setup_groups(4, groups);
        let mut host = Host::connect(&mut h.v, &mut w, four_queues(32), SUBNQN).expect("connect");
        assert_eq!(host.io_queues().0, 4);
        let n = verified_spread(&mut w, &mut h, &mut host, &[1, 2, 3, 4], 10_000, 32, 7 + groups as u64, |_, _| None);
        assert_eq!(n, 20_000);
        let t = w.target.stats();
        assert_eq!((t.block_done_lost, t.closed_overflow, t.wc_errors, t.post_errors), (0, 0, 0, 0), "{t:?}");
        let mut capsules = 0;
        for g in 0..groups {
            let s = w.target.group_stats(g);
            println!("POLL-GROUPS groups={groups} group={g} queues={} capsules={} completions={} srq_reposts={} srq_batches={} limit_events={}", s.queues_live, s.capsules, s.completions, s.srq_reposts, s.srq_batches, s.srq_limit_events);
            // 5 queues round-robin: every group holds at least one, and each I/O queue's
            // group received its capsules.
            assert!(s.queues_live >= 1 && s.capsules > 0, "group {g} idle: {s:?}");
            assert_eq!(s.slot_overruns, 0);
            capsules += s.capsules;
        }
        assert_eq!(capsules, t.capsules, "every capsule came through a group's SRQ");
        assert!(w.target.group_stats(groups).queues_assigned == 0, "no group beyond {groups}");
        // Per queue: the admin queue and 4 I/O queues of one controller, each in a group it
        // was counted in, every capsule on some queue, nothing outstanding once I/O is done.
        let qs: Vec<_> = w.target.queue_reports().collect();
        assert_eq!(qs.len(), 5, "{qs:?}");
        assert!(qs.iter().all(|q| q.cntlid.is_some() && q.cntlid == qs[0].cntlid && (q.group as usize) < groups && q.busy == 0), "{qs:?}");
        assert_eq!(qs.iter().map(|q| q.capsules).sum::<u64>(), t.capsules);
        assert!(qs.iter().filter(|q| q.qid != 0).all(|q| q.capsules >= 1000), "{qs:?}");
        // 20,000 verified 4 KiB-multiple Reads and Writes answered with success, no errors.
        let (rd, wr): (u64, u64) = (qs.iter().map(|q| q.bytes_read).sum(), qs.iter().map(|q| q.bytes_written).sum());
        assert!(rd >= 10_000 * 512 && wr >= 10_000 * 512, "{rd} {wr}");
        assert_eq!(qs.iter().map(|q| q.errors).sum::<u64>(), 0);
        assert_eq!(qs.iter().find(|q| q.qid == 0).map(|q| q.bytes_read + q.bytes_written), Some(0));
        // The controller's SMART log counts every queue's commands, whichever group served them.
        let mut smart = [0u8; 512];
        host.get_log(&mut h.v, &mut w, nvmeof::wire::lid::SMART, false, 0, &mut smart).expect("SMART log");
        let (reads, writes) = (u64::from_le_bytes(smart[64..72].try_into().unwrap()), u64::from_le_bytes(smart[80..88].try_into().unwrap()));
        assert_eq!((reads, writes), (10_000, 10_000), "SMART Host Read/Write Commands with {groups} groups");
    }
}

/// Overlapping commands of queues in two poll groups wait for each other's zero-copy
/// transfers: each group has its own zero-copy range table (`rdma/ranges.rs`), ordered against
/// the other groups' by their per-stripe counts (`rdma/stripes.rs`). (1) A zero-copy Read on group 0's queue and an in-capsule
/// Write of the same blocks on group 1's, sent together: the Write waits for the Read being
/// sent, which returns the old data whole. (2) A keyed 8 KiB zero-copy Write on group 1's queue
/// and, while its RDMA READ is landing, an in-capsule Write of its first 4 KiB on group 0's:
/// the second waits for the first to land, so it lands last. (3) A Write on group 0's queue and
/// a Read on group 1's sent together: the Write goes first (group 0 is polled first), the Read
/// waits for it and returns the new data whole. (4) A zero-copy Read on group 1's queue being
/// sent and then an in-capsule Write of the same blocks on group 0's: the Write waits for the
/// Read's response. Without the other groups' counts (the test-only mutation
/// `sim-mutation-cross-group`) nothing waits: in (1) the Write's data changes the memory the
/// Read is being sent from (the Read returns it), in (2) the first Write's data lands over the
/// second's.
#[test]
fn overlapping_commands_of_two_groups_wait_for_each_other() {
    let (mut w, mut h) = setup_groups(2, 2);
    let mut host = Host::connect(&mut h.v, &mut w, HostConfig { io_queues: 2, ..host_cfg(8) }, SUBNQN).expect("connect");
    let q_of = |w: &World, g: u16| w.target.queue_reports().find(|q| q.qid != 0 && q.group == g).map(|q| q.qid).expect("an I/O queue in each group");
    let (q0, q1) = (q_of(&w, 0), q_of(&w, 1));
    let fill = |host: &mut Host<V>, q: u16, slot: u16, byte: u8, len: usize| {
        let (buf, off, _) = host.slot_buf(q, slot);
        buf.write(off, &vec![byte; len]);
    };
    let mut done = [IoDone { queue: 0, slot: 0, status: Status::SUCCESS, dw0: 0, latency_ns: 0 }; 8];
    let mut wait = |w: &mut World, h: &mut Node, host: &mut Host<V>, want: usize| {
        let mut got = 0;
        for _ in 0..100_000 {
            h.v.poll();
            let k = host.poll(&mut h.v, w.clock.now_ns(), &mut done).expect("poll");
            assert!(done[..k].iter().all(|d| d.status.is_success()));
            got += k;
            if got >= want {
                break;
            }
            w.turn();
        }
        assert_eq!(got, want);
    };
    let read_back = |host: &Host<V>, q: u16, slot: u16| {
        let (buf, off, _) = host.slot_buf(q, slot);
        let mut got = vec![0u8; 4096];
        buf.read(off, &mut got);
        got
    };
    for round in 1..=4u8 {
        let lba = 800 + 64 * round as u64;
        let (old, new) = (0xA0 + round, 0xB0 + round);
        let s0 = host.alloc_slot(q0).unwrap();
        fill(&mut host, q0, s0, old, 4096);
        host.submit(&mut h.v, q0, s0, IoKind::Write, 1, lba, 8, w.clock.now_ns()).unwrap();
        wait(&mut w, &mut h, &mut host, 1);
        // The queue of the Read (or, in round 2, of the first Write) and of the Write.
        let (rq, wq) = if round == 1 { (q0, q1) } else { (q1, q0) };
        let (r, wr) = (host.alloc_slot(rq).unwrap(), host.alloc_slot(wq).unwrap());
        fill(&mut host, rq, r, 0, 4096);
        fill(&mut host, wq, wr, new, 4096);
        let s = w.target.stats();
        let (held_w, held_r) = (s.held_writes, s.held_reads);
        let now = w.clock.now_ns();
        if round == 2 || round == 4 {
            // The first command (round 2: a keyed 16-block Write, beyond the 4 KiB of in-capsule
            // data; round 4: a Read), its transfer posted by the target's turn, then the Write.
            if round == 2 {
                fill(&mut host, rq, r, old, 8192);
                host.submit(&mut h.v, rq, r, IoKind::Write, 1, lba, 16, now).unwrap();
            } else {
                host.submit(&mut h.v, rq, r, IoKind::Read, 1, lba, 8, now).unwrap();
            }
            h.v.poll();
            w.turn();
            host.submit(&mut h.v, wq, wr, IoKind::Write, 1, lba, 8, w.clock.now_ns()).unwrap();
        } else {
            host.submit(&mut h.v, rq, r, IoKind::Read, 1, lba, 8, now).unwrap();
            host.submit(&mut h.v, wq, wr, IoKind::Write, 1, lba, 8, now).unwrap();
        }
        wait(&mut w, &mut h, &mut host, 2);
        let s = w.target.stats();
        let held = (s.held_writes - held_w, s.held_reads - held_r);
        match round {
            2 => assert_eq!(held, (1, 0), "round 2: the second write waited for the other group's first"),
            3 => {
                assert_eq!(held, (0, 1), "round 3: the read waited for the other group's write");
                assert!(read_back(&host, rq, r).iter().all(|&b| b == new), "round 3: the read saw the new data whole");
            }
            _ => {
                assert_eq!(held, (1, 0), "round {round}: the write waited for the other group's read");
                assert!(read_back(&host, rq, r).iter().all(|&b| b == old), "round {round}: the read saw only the old data");
            }
        }
        let r2 = host.alloc_slot(rq).unwrap();
        host.submit(&mut h.v, rq, r2, IoKind::Read, 1, lba, 8, w.clock.now_ns()).unwrap();
        wait(&mut w, &mut h, &mut host, 1);
        assert!(read_back(&host, rq, r2).iter().all(|&b| b == new), "round {round}: then the write took effect");
    }
}

/// The target adapter's live objects and pages (leak check).
fn objects(w: &World) -> (usize, usize, usize, usize, usize, usize) {
    let c = w.t.cx.counters();
    (c.qps, c.cqs, c.rmps, c.mkeys, c.pages_held, c.uars)
}

/// Let the CM and the target settle, then: no queue left and, with the namespaces' keys
/// released, the adapter's objects and pages at `base` and no DMA memory pinned.
fn settle_to_baseline(w: &mut World, base: (usize, usize, usize, usize, usize, usize), what: &str) {
    for _ in 0..1000 {
        w.turn();
    }
    assert_eq!(w.target.queues(), 0, "{what}");
    w.target.release_namespaces(&mut w.t.v);
    assert_eq!(objects(w), base, "{what}: adapter objects/pages not back at baseline");
    assert_eq!(w.target.pinned().dma_bytes, 0, "{what}");
}

/// Connect and disconnect (4 I/O queues over 2 groups) repeatedly with I/O in between: the
/// adapter's QPs, CQs, SRQs, keys and pages come back to the baseline every time.
#[test]
fn connect_disconnect_over_groups_leaks_nothing() {
    let (mut w, mut h) = setup_groups(4, 2);
    let base = objects(&w);
    let mut copies_before = ns_copies(&mut w);
    for round in 0..5u64 {
        let mut host = Host::connect(&mut h.v, &mut w, four_queues(8), SUBNQN).expect("connect");
        let live = objects(&w);
        assert!(live.0 >= base.0 + 5 && live.2 == base.2 + 2, "5 QPs and 2 SRQs while connected: {live:?} vs {base:?}");
        // Each group rings through a UAR page of its own (mlx5::QueueGroup), not the device's.
        assert_eq!(live.5, base.5 + 2, "one UAR page per group");
        let pages: std::collections::BTreeSet<u32> = {
            let d = w.t.cx.device();
            w.conns.values().map(|c| d.qps[&c.0 .0].uar).collect()
        };
        assert_eq!(pages.len(), 2, "the five queues' QPs ring through their groups' two pages: {pages:?}");
        assert!(!pages.contains(&w.t.v.uar().unwrap()));
        verified_spread(&mut w, &mut h, &mut host, &[1, 2, 3, 4], 200, 8, 100 + round, |_, _| None);
        // The namespace's copy counters (its groups' handles' counts folded into its report)
        // grow with every round's groups and survive their release.
        let copies = ns_copies(&mut w);
        assert!(copies.0 > copies_before.0 && copies.1 >= copies_before.1, "round {round}: {copies:?} after {copies_before:?}");
        host.disconnect(&mut h.v, &mut w).expect("disconnect");
        settle_to_baseline(&mut w, base, &format!("round {round}"));
        assert_eq!(ns_copies(&mut w), copies, "round {round}: the released groups' counts kept");
        copies_before = copies;
        // The groups are gone; their counters stay (cumulative, as /metrics reads them).
        let (g0, g1) = (w.target.group_stats(0), w.target.group_stats(1));
        assert_eq!(g0.queues_assigned + g1.queues_assigned, 5 * (round + 1), "round {round}");
        assert_eq!((g0.queues_live, g1.queues_live), (0, 0));
        assert!(g0.capsules > 100 * round && g1.capsules > 100 * round, "round {round}: {g0:?} {g1:?}");
    }
}

/// A host-side RC QP for a queue accepted by hand (its own CQ on the host's adapter).
fn host_qp(h: &mut Node) -> Qpn {
    let cq = h.v.create_cq(16).expect("host CQ");
    h.v.create_rc_qp(cq, cq, 16, 16).expect("host QP")
}

/// The owner accepts a queue (QP made and connected, `Conn` built) and stages it in its group:
/// nothing answers until the group's turn has taken it in (attached, found by its QPN), and
/// only then is it a queue of the target; the same on a second group. Disconnected, the
/// adapter's objects and pages are back at baseline.
#[test]
fn a_queue_accepted_into_a_group_answers_only_after_the_groups_turn() {
    let (mut w, mut h) = setup_groups(4, 2);
    let base = objects(&w);
    let mut qpns = Vec::new();
    for k in 0..2u16 {
        let hq = host_qp(&mut h);
        let p = w.target.accept(&mut w.t.v, &cm_req_private(0, 32), &rc_attrs(hq, H_IP, H_MAC, 0x100, 0x900)).expect("accepted");
        assert_eq!(p.rep.crqsize.get(), 32);
        assert!(w.target.take_answer().is_none(), "queue {k}: an answer before its group's turn");
        assert_eq!(w.target.queues(), k as usize, "queue {k} is not the target's before its group's turn");
        assert!(w.t.cx.device().qps.contains_key(&p.qpn.0), "its QP made by the owner");
        assert_eq!(w.target.group_stats(k as usize).queues_assigned, 0);
        // Other traffic does not answer it: only the group's turn.
        w.t.v.poll();
        assert!(w.target.take_answer().is_none());
        w.target.poll(&mut w.t.v, w.clock.now_ns());
        match w.target.take_answer() {
            Some(QueueAnswer::Attached(q)) => assert_eq!(q, p.qpn),
            a => panic!("queue {k}: {a:?}"),
        }
        assert!(w.target.take_answer().is_none(), "one answer per queue");
        assert_eq!(w.target.queues(), k as usize + 1);
        assert_eq!(w.target.group_stats(k as usize).queues_assigned, 1, "round-robin: queue {k} in group {k}");
        qpns.push(p.qpn);
    }
    assert_eq!(w.target.stats().conns_accepted, 2);
    for q in qpns {
        w.target.disconnected(&mut w.t.v, q);
    }
    settle_to_baseline(&mut w, base, "after the hand-accepted queues");
}

/// Two groups; group 0 holds a first queue (attached, answered), group 1 is handed a second
/// whose CQ then fails before the group's turn (so the group will refuse it). The figures
/// before the second queue (`before`, `pinned`) and with it staged (`staged`).
struct Refusing {
    w: World,
    /// The host node (its QPs live as long as the test).
    _h: Node,
    base: (usize, usize, usize, usize, usize, usize),
    first: PendingQueue,
    p: PendingQueue,
    before: (usize, usize, usize, usize, usize, usize),
    pinned: Pinned,
    staged: (usize, usize, usize, usize, usize, usize),
}

fn refusing() -> Refusing {
    let (mut w, mut h) = setup_groups(4, 2);
    let base = objects(&w);
    // Group 0 takes the first queue.
    let first = w.target.accept(&mut w.t.v, &cm_req_private(0, 32), &rc_attrs(host_qp(&mut h), H_IP, H_MAC, 0x100, 0x900)).expect("accepted");
    // (`w.turn()` would hand the answer to the harness's CM.)
    w.target.poll(&mut w.t.v, w.clock.now_ns());
    assert!(matches!(w.target.take_answer(), Some(QueueAnswer::Attached(q)) if q == first.qpn));
    let before = objects(&w);
    let pinned = w.target.pinned();
    // Group 1 is handed the second; its CQ fails before the group's turn.
    let p = w.target.accept(&mut w.t.v, &cm_req_private(0, 32), &rc_attrs(host_qp(&mut h), H_IP, H_MAC, 0x200, 0xa00)).expect("accepted");
    assert!(w.target.pinned().dma_bytes > pinned.dma_bytes, "the staged queue's memory is counted");
    let staged = objects(&w);
    let pick = {
        let d = w.t.cx.device();
        d.qps.values().filter(|q| q.st == 0 && q.state == 3).position(|q| q.qpn == p.qpn.0).expect("staged QP in RTS") as u64
    };
    assert!(w.t.cx.inject_cq_overrun(pick).is_some());
    w.t.cx.poll();
    w.t.v.poll();
    Refusing { w, _h: h, base, first, p, before, pinned, staged }
}

/// A queue staged in a group that breaks before its turn (its CQ overruns: the adapter puts
/// the CQ in error) is refused by the group: the owner destroys its QP and deregisters its
/// keys, the answer is a REJ (NO_RESOURCES), the target counts a rejected connection, and the
/// queue in the other group keeps working; with it gone, the adapter's QPs, CQs, SRQs, keys
/// and pages are back at baseline.
#[test]
fn a_refused_attach_sends_rej_and_leaks_nothing() {
    let Refusing { mut w, _h, base, first, p, before, pinned, .. } = refusing();
    assert!(w.target.take_answer().is_none(), "no answer before the group's turn");
    w.target.poll(&mut w.t.v, w.clock.now_ns());
    match w.target.take_answer() {
        Some(QueueAnswer::Refused(q, rej)) => {
            assert_eq!(q, p.qpn);
            assert_eq!(rej.sts.get(), nvmeof::wire::cm_rej::NO_RESOURCES);
        }
        a => panic!("{a:?}"),
    }
    assert!(!w.t.cx.device().qps.contains_key(&p.qpn.0), "the refused queue's QP destroyed");
    assert_eq!(w.target.queues(), 1);
    assert_eq!(w.target.stats().conns_rejected, 1);
    assert_eq!(w.target.group_stats(1).queues_assigned, 0);
    let now = objects(&w);
    assert_eq!((now.0, now.3, now.4), (before.0, before.3, before.4), "QPs, keys and pages as before the refused queue");
    assert_eq!(w.target.pinned().dma_bytes, pinned.dma_bytes, "its memory freed");
    w.target.disconnected(&mut w.t.v, first.qpn);
    settle_to_baseline(&mut w, base, "after the refused queue");
}

/// A refused queue's QP the device would not destroy (DESTROY_QP failing) is tried again as a
/// closed queue's is: the host gets its REJ at once, the QP and the queue's keys stay while
/// the command fails, and once it succeeds the QP is destroyed, the keys deregistered and the
/// memory freed (no Detach: it was never in the group).
#[test]
fn a_refused_queues_qp_not_destroyed_is_retried_and_leaks_nothing() {
    let Refusing { mut w, _h, base, first, p, before, pinned, staged } = refusing();
    w.t.cx.faults_mut().forced.insert(mlx5::op::DESTROY_QP, (0xf, 0x00c0_ffee));
    let s0 = w.target.stats();
    w.target.poll(&mut w.t.v, w.clock.now_ns());
    assert!(matches!(w.target.take_answer(), Some(QueueAnswer::Refused(q, _)) if q == p.qpn), "REJ at once");
    for _ in 0..8 {
        w.target.poll(&mut w.t.v, w.clock.now_ns());
    }
    assert!(w.t.cx.device().qps.contains_key(&p.qpn.0), "the QP is still there while DESTROY_QP fails");
    let held = objects(&w);
    assert_eq!((held.0, held.3), (staged.0, staged.3), "the QP and its queue's keys held while it fails");
    let retries = w.target.stats().qp_destroy_retries - s0.qp_destroy_retries;
    assert!(retries >= 1, "tried again: {retries}");
    w.t.cx.faults_mut().forced.clear();
    for _ in 0..16 {
        w.target.poll(&mut w.t.v, w.clock.now_ns());
    }
    assert!(!w.t.cx.device().qps.contains_key(&p.qpn.0), "the refused queue's QP destroyed on a retry");
    let now = objects(&w);
    assert_eq!((now.0, now.3, now.4), (before.0, before.3, before.4), "QPs, keys and pages as before the refused queue");
    assert_eq!(w.target.pinned().dma_bytes, pinned.dma_bytes, "its memory freed");
    let s = w.target.stats();
    assert_eq!((s.qp_destroy_retries - s0.qp_destroy_retries, s.qp_destroy_failed), (retries + 1, 0));
    w.target.disconnected(&mut w.t.v, first.qpn);
    settle_to_baseline(&mut w, base, "after the refused queue's retried destroy");
}

/// A group holding the most queues its CQ was sized for is skipped by the round-robin: with
/// group 1's queues gone and group 0 full (8 queues over 2 groups: 4 each), the next four new
/// queues all go to group 1; the ninth is refused at once (REJ NO_RESOURCES, no QP made), and
/// with every queue gone the adapter's objects and pages are back at baseline.
#[test]
fn a_full_group_is_skipped_and_a_queue_beyond_every_groups_room_is_refused() {
    let (mut w, mut h) = setup_groups(4, 2);
    let base = objects(&w);
    let accept = |w: &mut World, h: &mut Node, k: u32| -> Result<Qpn, u16> {
        let hq = host_qp(h);
        let p = w.target.accept(&mut w.t.v, &cm_req_private(0, 32), &rc_attrs(hq, H_IP, H_MAC, 0x100 + k, 0x900 + k)).map_err(|rej| rej.sts.get())?;
        w.target.poll(&mut w.t.v, w.clock.now_ns());
        match w.target.take_answer() {
            Some(QueueAnswer::Attached(q)) => assert_eq!(q, p.qpn, "queue {k}"),
            a => panic!("queue {k}: {a:?}"),
        }
        Ok(p.qpn)
    };
    let mut by_group: [Vec<Qpn>; 2] = [Vec::new(), Vec::new()];
    for k in 0..8u32 {
        by_group[k as usize % 2].push(accept(&mut w, &mut h, k).expect("room"));
    }
    assert_eq!((w.target.group_stats(0).queues_assigned, w.target.group_stats(1).queues_assigned), (4, 4), "round-robin");
    for q in by_group[1].drain(..) {
        w.target.disconnected(&mut w.t.v, q);
    }
    for _ in 0..4 {
        w.target.poll(&mut w.t.v, w.clock.now_ns());
    }
    assert_eq!(w.target.queues(), 4);
    assert_eq!(w.target.group_stats(1).queues_live, 0);
    // Round-robin would start at group 0 (it took the first of the last pair), which is full.
    for k in 8..12u32 {
        by_group[1].push(accept(&mut w, &mut h, k).expect("group 1 has room"));
        assert_eq!(w.target.group_stats(0).queues_assigned, 4, "queue {k} not given to the full group 0");
    }
    assert_eq!(w.target.group_stats(1).queues_assigned, 8);
    assert_eq!(w.target.group_stats(1).queues_live, 4);
    let qps = w.t.cx.device().qps.len();
    assert_eq!(accept(&mut w, &mut h, 12), Err(nvmeof::wire::cm_rej::NO_RESOURCES), "every group full");
    assert_eq!(w.t.cx.device().qps.len(), qps, "no QP made for the refused queue");
    assert_eq!(w.target.queues(), 8);
    for q in by_group.iter().flatten() {
        w.target.disconnected(&mut w.t.v, *q);
    }
    settle_to_baseline(&mut w, base, "after the full groups");
}

/// A target QP forced into error while its queue has I/O outstanding, then closed (by its
/// flushed completions, or the CM's disconnect): the other three queues (one in the same
/// group, two in the other) keep serving verified I/O through the shared CQs and SRQs.
#[test]
fn qp_in_error_leaves_other_groups_serving() {
    let (mut w, mut h) = setup_groups(4, 2);
    let mut host = Host::connect(&mut h.v, &mut w, four_queues(16), SUBNQN).expect("connect");
    // Connection handles 1 (admin), 2..=5 (I/O queues 1..=4): queue 1's target QP.
    let victim: Qpn = w.conns.get(&2).expect("queue 1").0;
    // Queue 1 gets I/O of its own, then its QP fails while the others run.
    let mut failed = false;
    let n = verified_spread(&mut w, &mut h, &mut host, &[1, 2, 3, 4], 400, 16, 5, |w, done| {
        if !failed && done >= 64 {
            failed = true;
            // The adapter moves it to ERROR on its own (a catastrophic work-queue error): the
            // QP's ring is its poll group's, not the device's.
            let pick = {
                let d = w.t.cx.device();
                d.qps.values().filter(|q| q.st == 0 && q.state == 3).position(|q| q.qpn == victim.0).expect("victim in RTS") as u64
            };
            assert_eq!(w.t.cx.inject_qp_error(pick), Some(victim.0), "QP to error");
            return Some(1);
        }
        None
    });
    assert!(failed && n >= 700, "{n} I/Os completed");
    // With nothing of the target's outstanding on it, no completion tells the target (the
    // seam has no QP async events); the host's DREQ or its CM timeout does: as the CM would.
    if w.target.queues() == 5 {
        w.target.disconnected(&mut w.t.v, victim);
    }
    // The three other queues alone, 2,000 more verified I/Os.
    let n = verified_spread(&mut w, &mut h, &mut host, &[2, 3, 4], 1000, 16, 6, |_, _| None);
    assert_eq!(n, 2000);
    assert_eq!(w.target.queues(), 4, "admin + queues 2..4 live, queue 1 closed");
    assert!(w.target.stats().conns_closed >= 1);
}

/// Queues closed inside a poll group's turn are freed by the owner's drain at the end of the
/// same `poll`: the host resets its controller (Property Set CC.EN = 0 on the admin queue); the
/// group's turn that runs the command closes the controller's four I/O queues (spread over
/// both groups) giving the device no command, and the owner then destroys their QPs and
/// deregisters their keys. Nobody calls `disconnected` for them; once the admin queue goes
/// too, the adapter's QPs, CQs, SRQs, keys and pages are back at baseline.
#[test]
fn queues_closed_in_a_group_turn_are_freed_by_the_owner() {
    let (mut w, mut h) = setup_groups(4, 2);
    let base = objects(&w);
    let mut host = Host::connect(&mut h.v, &mut w, four_queues(8), SUBNQN).expect("connect");
    let n = verified_spread(&mut w, &mut h, &mut host, &[1, 2, 3, 4], 200, 8, 11, |_, _| None);
    assert_eq!(n, 400);
    let live = objects(&w);
    let io_qpns: Vec<u32> = (2..=5).map(|k| w.conns.get(&k).expect("I/O queue").0 .0).collect();
    let closed = w.target.stats().conns_closed;
    host.admin_raw(&mut h.v, &mut w, property_set_sqe(0x14, 0), None).expect("CC.EN = 0");
    for _ in 0..100 {
        w.turn();
    }
    assert_eq!(w.target.queues(), 1, "the target closed the controller's I/O queues itself; its admin queue stays");
    assert_eq!(w.target.stats().conns_closed, closed + 4);
    assert!(io_qpns.iter().all(|q| !w.t.cx.device().qps.contains_key(q)), "every I/O queue's QP destroyed by the owner");
    let now = objects(&w);
    assert_eq!(now.0, live.0 - 4, "four QPs fewer: {now:?} vs {live:?}");
    assert!(now.3 < live.3, "the queues' keys deregistered: {now:?} vs {live:?}");
    assert_eq!((now.1, now.2, now.5), (live.1, live.2, live.5), "CQs, SRQs and UAR pages stay with the groups");
    let admin = w.conns.get(&1).expect("admin queue").0;
    drop(host);
    w.target.disconnected(&mut w.t.v, admin);
    settle_to_baseline(&mut w, base, "after the admin queue");
}

/// A controller shut down (Property Set CC.SHN = 01b, CC.EN still 1: CSTS.RDY clears,
/// CSTS.SHST = 10b) keeps its I/O queues (spread over both groups), but every one of them
/// answers an I/O command with Command Sequence Error: each queue carries its controller's
/// "enabled" (`QueueState::enabled`), cleared by the owner when the controller stopped being
/// enabled; the I/O path does not look at the controller table. A reset then closes them.
#[test]
fn a_shut_down_controllers_io_queues_in_every_group_refuse_io() {
    let (mut w, mut h) = setup_groups(4, 2);
    let mut host = Host::connect(&mut h.v, &mut w, four_queues(8), SUBNQN).expect("connect");
    assert_eq!(verified_spread(&mut w, &mut h, &mut host, &[1, 2, 3, 4], 200, 8, 13, |_, _| None), 400);
    let groups: std::collections::BTreeSet<u16> = w.target.queue_reports().filter(|q| q.qid != 0).map(|q| q.group).collect();
    assert_eq!(groups.len(), 2, "I/O queues in both groups");
    // IOCQES 4, IOSQES 6, EN, SHN = 01b (normal shutdown).
    let cc = (4 << 20) | (6 << 16) | (1 << 14) | 1;
    host.admin_raw(&mut h.v, &mut w, property_set_sqe(0x14, cc), None).expect("CC.SHN = 01b");
    let (csts, _) = host.admin_raw(&mut h.v, &mut w, nvmeof::host::property_get_sqe(0x1C, false), None).expect("CSTS");
    assert_eq!(csts & 0xD, 0x8, "RDY clear, SHST = 10b, no fatal status");
    assert_eq!(w.target.queues(), 5, "a shutdown closes no queue");
    let before = w.target.core_stats();
    let mut done = [IoDone { queue: 0, slot: 0, status: Status::SUCCESS, dw0: 0, latency_ns: 0 }; 8];
    for kind in [IoKind::Read, IoKind::Write] {
        for q in 1..=4u16 {
            let slot = host.alloc_slot(q).expect("slot");
            host.submit(&mut h.v, q, slot, kind, 1, 8 * q as u64, 8, w.clock.now_ns()).expect("submit");
            let mut got = None;
            for _ in 0..100_000 {
                h.v.poll();
                let k = host.poll(&mut h.v, w.clock.now_ns(), &mut done).expect("poll");
                if let Some(d) = done[..k].iter().find(|d| d.queue == q && d.slot == slot) {
                    got = Some(d.status);
                    break;
                }
                w.turn();
            }
            assert_eq!(got, Some(Status::CMD_SEQ_ERROR), "{kind:?} on queue {q} of the shut-down controller");
        }
    }
    // The store saw none of them; a reset (CC.EN = 0) then closes the I/O queues.
    let after = w.target.core_stats();
    assert_eq!((after.reads, after.writes), (before.reads, before.writes));
    assert_eq!(w.target.core.live_ctrls(), 1);
    host.admin_raw(&mut h.v, &mut w, property_set_sqe(0x14, 0), None).expect("CC.EN = 0");
    for _ in 0..100 {
        w.turn();
    }
    assert_eq!(w.target.queues(), 1, "the reset closed the I/O queues");
}

/// One group whose SRQ has 4 receive buffers serves 5 connections (admin + 4 I/O queues at
/// QD8): the SRQ runs dry, the host's adapter is sent RNR NAKs and retries, every I/O
/// completes verified, and the SRQ limit event is seen and counted.
#[test]
fn more_connections_than_srq_buffers() {
    let (mut w, mut h) = setup_groups(4, 1);
    w.target.set_srq_bufs(4);
    let mut host = Host::connect(&mut h.v, &mut w, four_queues(8), SUBNQN).expect("connect");
    let n = verified_spread(&mut w, &mut h, &mut host, &[1, 2, 3, 4], 1000, 8, 9, |_, _| None);
    assert_eq!(n, 2000);
    let g = w.target.group_stats(0);
    let t = w.t.cx.engine_counters().expect("target engine");
    let hc = w.host_cx.engine_counters().expect("host engine");
    println!("SRQ-BUFFERS bufs=4 queues=5 rnr_nak_sent={} host_rnr_nak_rcvd={} limit_events={} reposts={} batches={}", t.rnr_nak_sent, hc.rnr_nak_rcvd, g.srq_limit_events, g.srq_reposts, g.srq_batches);
    assert_eq!(g.queues_live, 5);
    assert!(t.rnr_nak_sent > 0 && hc.rnr_nak_rcvd > 0, "the SRQ never ran dry: {t:?}");
    assert!(g.srq_limit_events > 0, "no SRQ limit event: {g:?}");
    assert_eq!(w.target.stats().wc_errors, 0);
}


/// The target's adapter fails while two groups serve: each group learns it on its next turn
/// (its CQ flushes what was outstanding), the queues close, and the groups, whose objects the
/// reset dropped, are released without a command; the recovered device forgets nothing and a
/// new connection is served by new groups.
#[test]
fn device_failure_reaches_every_group_which_is_released_without_the_adapter() {
    let (mut w, mut h) = setup_groups(4, 2);
    let mut host = Host::connect(&mut h.v, &mut w, four_queues(8), SUBNQN).expect("connect");
    verified_spread(&mut w, &mut h, &mut host, &[1, 2, 3, 4], 200, 8, 41, |_, _| None);
    assert_eq!(w.t.v.live_groups(), 2);
    assert!(w.t.cx.raise_internal_error(), "the EQ takes the event");
    for _ in 0..100 {
        w.turn();
        if w.t.v.device_failed() {
            break;
        }
    }
    assert!(w.t.v.device_failed());
    // As the service does on a failure: every connection closed.
    let qpns: Vec<Qpn> = w.conns.values().map(|c| c.0).collect();
    for q in qpns {
        w.target.disconnected(&mut w.t.v, q);
    }
    for _ in 0..100 {
        w.turn();
    }
    assert_eq!(w.target.queues(), 0);
    w.target.release_namespaces(&mut w.t.v);
    assert_eq!(w.t.v.live_groups(), 0, "both groups released");
    let cmds = w.t.v.stats().commands;
    assert!(w.t.v.recover_device());
    assert_eq!(w.t.v.stats().objects_forgotten, 0, "the app released everything it held");
    assert!(w.t.v.stats().commands > cmds);
    drop(host);
    w.target.register_namespaces(&mut w.t.v);
    w.conns.clear();
    let mut host = Host::connect(&mut h.v, &mut w, four_queues(8), SUBNQN).expect("connect after recovery");
    let n = verified_spread(&mut w, &mut h, &mut host, &[1, 2, 3, 4], 200, 8, 42, |_, _| None);
    assert!(n >= 200, "{n} I/Os after recovery");
    assert_eq!(w.t.v.live_groups(), 2, "new groups on the recovered device");
}

/// Linux-like host settings over 4 groups: in-capsule writes, per-I/O keys invalidated by the
/// target's SEND with Invalidate, depth 128 queues.
#[test]
fn linux_like_host_over_4_groups() {
    for (inline, keys, inval) in [(true, false, false), (false, true, true), (true, true, true)] {
        let (mut w, mut h) = setup_groups(4, 4);
        let cfg = HostConfig { inline_writes: inline, per_io_keys: keys, invalidate: inval, ..four_queues(128) };
        let mut host = Host::connect(&mut h.v, &mut w, cfg, SUBNQN).expect("connect");
        let n = verified_spread(&mut w, &mut h, &mut host, &[1, 2, 3, 4], 4_000, 32, 11, |_, _| None);
        assert_eq!(n, 8_000, "inline={inline} keys={keys} inval={inval}");
    }
}

/// A closed queue's QP the adapter would not destroy is tried again on the owner's later
/// turns, the queue's keys (and memory) held back until it is gone: with 4 I/O queues over 2
/// groups, one I/O queue disconnected while DESTROY_QP fails (its first try and first retry),
/// then another while QP to ERROR fails once; each QP is destroyed on a retry with the host
/// still connected, its keys released with it, the retries counted and none given
/// up; after the host's disconnect, everything back at baseline.
#[test]
fn a_closed_queues_qp_not_destroyed_is_retried_and_leaks_nothing() {
    let (mut w, mut h) = setup_groups(4, 2);
    let base = objects(&w);
    let mut host = Host::connect(&mut h.v, &mut w, four_queues(8), SUBNQN).expect("connect");
    verified_spread(&mut w, &mut h, &mut host, &[1, 2, 3, 4], 64, 8, 7, |_, _| None);
    let last_io = w.next - 1;
    for (k, (opcode, failures)) in [(mlx5::op::DESTROY_QP, 2u64), (mlx5::op::QP_2ERR, 1)].into_iter().enumerate() {
        let before = objects(&w);
        let s0 = w.target.stats();
        w.t.cx.faults_mut().forced.insert(opcode, (0xf, 0x00c0_ffee));
        w.cm_disconnect(&mut h.v, last_io - k as u32);
        for _ in 1..failures {
            for _ in 0..4 {
                w.turn();
            }
        }
        let held = objects(&w);
        assert_eq!((held.0, held.3), (before.0, before.3), "opcode {opcode:#x}: the QP and its queue's keys held while it fails");
        assert_eq!(w.target.stats().qp_destroy_retries - s0.qp_destroy_retries, failures - 1, "opcode {opcode:#x}");
        w.t.cx.faults_mut().forced.clear();
        for _ in 0..16 {
            w.turn();
        }
        let after = objects(&w);
        assert_eq!(after.0, before.0 - 1, "opcode {opcode:#x}: the QP destroyed on a retry");
        assert_eq!(after.3, before.3 - 3, "opcode {opcode:#x}: its queue's three keys released: {after:?} vs {before:?}");
        let s = w.target.stats();
        assert_eq!((s.qp_destroy_retries - s0.qp_destroy_retries, s.qp_destroy_failed), (failures, 0), "opcode {opcode:#x}");
    }
    for handle in w.conns.keys().copied().collect::<Vec<_>>() {
        w.cm_disconnect(&mut h.v, handle);
    }
    drop(host);
    settle_to_baseline(&mut w, base, "after the retried destroys");
}
