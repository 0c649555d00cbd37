//! Poll groups over a local NVMe namespace (`nvme::NvmeNamespace` on the emulated drive): each
//! group submits its Reads and Writes on an I/O queue pair of its own (the namespace's
//! `io_handle`), none on the store's; connect/disconnect rounds give the groups' queue pairs
//! back to the drive; a drive that stops answering fails the namespace for every group.

use nvme::Config;
use nvmeof::host::{Host, IoKind};
use nvmeof::Status;
use testbed::nvme_drive::NvmeDrive;
use testbed::Node;

use crate::emu_pair;
use crate::poll_groups::verified_spread;
use emu_pair::*;

/// I/O commands the drive executed on each I/O SQ (index = queue ID; 1 is the store's, the
/// groups' handles follow in group order).
fn sq_commands(d: &NvmeDrive) -> Vec<u64> {
    let mut v = d.state().sq_commands.clone();
    v.resize(8, 0);
    v
}

/// 2 and 4 poll groups, 4 I/O queues (spread round-robin with the admin queue, so every group
/// holds an I/O queue): 2,000 verified 4 KiB writes and as many reads at QD8 per queue. Each
/// group's handle is a queue pair of its own on the drive; the drive saw on each exactly the
/// Reads and Writes of that group's queues, and nothing on the store's queue.
#[test]
fn each_poll_group_reads_and_writes_on_its_own_drive_queue() {
    for groups in [2usize, 4] {
        let (mut w, mut h, d) = setup_nvme_groups(4, groups, Config::default());
        assert_eq!(d.state().io_queues_live(), (1, 1), "the store's queue pair only, before any group");
        let mut host = Host::connect(&mut h.v, &mut w, four_queues(8), SUBNQN).expect("connect");
        assert_eq!(d.state().io_queues_live(), (1 + groups, 1 + groups), "one queue pair per group");
        let before = sq_commands(&d);
        let n = verified_spread(&mut w, &mut h, &mut host, &[1, 2, 3, 4], 2000, 8, 40 + groups as u64, |_, _| None);
        assert_eq!(n, 4000);
        let after = sq_commands(&d);
        let delta: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        println!("NVME-GROUPS groups={groups} drive I/O commands per SQ {delta:?}");
        assert_eq!(delta[1], 0, "nothing on the store's queue with {groups} groups: {delta:?}");
        let reports: Vec<_> = w.target.queue_reports().collect();
        for g in 0..groups {
            let ios: u64 = reports.iter().filter(|q| q.group as usize == g && q.qid != 0).map(|q| (q.bytes_read + q.bytes_written) / 4096).sum();
            assert!(ios > 0, "group {g} serves an I/O queue: {reports:?}");
            assert_eq!(delta[2 + g], ios, "group {g}'s Reads and Writes all on its own SQ {}: {delta:?}", 2 + g);
        }
        assert_eq!(delta.iter().sum::<u64>(), 4000);
        host.disconnect(&mut h.v, &mut w).expect("disconnect");
    }
}

/// 2 poll groups on a drive that grants 2 I/O queues (the store's and one more): group 0's
/// handle is a queue pair of its own, group 1 gets none and sends its Reads and Writes to the
/// controller owner as records, which submits them on the store's queue pair and answers each
/// completion on the group's ring back. 2,000 verified 4 KiB writes and as many reads per
/// queue (4 queues at QD8) all read back right; the store's SQ carries exactly group 1's
/// I/Os, each counted as run through the owner (`NsStats::via_owner`), the handle's SQ group
/// 0's; after the disconnect the drive has the store's queue pair alone again.
#[test]
fn a_group_the_drive_has_no_queue_for_serves_its_io_through_the_owner() {
    let (mut w, mut h, d) = setup_nvme_drive_queues(4, 2, Config::default(), 2);
    let mut host = Host::connect(&mut h.v, &mut w, four_queues(8), SUBNQN).expect("connect");
    assert_eq!(d.state().io_queues_live(), (2, 2), "the store's queue pair and group 0's");
    let before = sq_commands(&d);
    let n = verified_spread(&mut w, &mut h, &mut host, &[1, 2, 3, 4], 2000, 8, 77, |_, _| None);
    assert_eq!(n, 4000);
    let delta: Vec<u64> = sq_commands(&d).iter().zip(&before).map(|(a, b)| a - b).collect();
    let reports: Vec<_> = w.target.queue_reports().collect();
    let ios = |g: u16| reports.iter().filter(|q| q.group == g && q.qid != 0).map(|q| (q.bytes_read + q.bytes_written) / 4096).sum::<u64>();
    assert!(ios(0) > 0 && ios(1) > 0, "both groups serve I/O queues: {reports:?}");
    assert_eq!((delta[1], delta[2]), (ios(1), ios(0)), "group 1's I/Os on the store's SQ, group 0's on its own: {delta:?}");
    let ns = w.target.namespace_stats().find(|r| r.subnqn == SUBNQN && r.nsid == 1).expect("namespace");
    assert_eq!(ns.stats.via_owner, ios(1), "each of group 1's I/Os went through the owner");
    assert_eq!((ns.stats.reads + ns.stats.writes, ns.in_flight.unwrap_or(0)), (4000, 0));
    host.disconnect(&mut h.v, &mut w).expect("disconnect");
    settle(&mut w);
    assert_eq!(d.state().io_queues_live(), (1, 1), "group 0's queue pair deleted");
}

/// Let the CM and the target settle: no queue left, the groups released.
fn settle(w: &mut NvmeWorld) {
    for _ in 0..1000 {
        w.turn();
    }
    assert_eq!(w.target.queues(), 0);
}

/// Connect and disconnect (4 I/O queues over 2 groups) with verified I/O in between: the
/// groups' queue pairs are made with the groups and deleted when they are released, so the
/// drive's I/O queues come back to the store's one every round.
#[test]
fn connect_disconnect_rounds_give_the_groups_drive_queues_back() {
    let (mut w, mut h, d) = setup_nvme_groups(4, 2, Config::default());
    let base = d.state().io_queues_live();
    assert_eq!(base, (1, 1));
    for round in 0..6u64 {
        let mut host = Host::connect(&mut h.v, &mut w, four_queues(8), SUBNQN).expect("connect");
        assert_eq!(d.state().io_queues_live(), (3, 3), "round {round}");
        let before = sq_commands(&d)[1];
        verified_spread(&mut w, &mut h, &mut host, &[1, 2, 3, 4], 200, 8, 60 + round, |_, _| None);
        assert_eq!(sq_commands(&d)[1], before, "round {round}: nothing on the store's queue");
        host.disconnect(&mut h.v, &mut w).expect("disconnect");
        settle(&mut w);
        assert_eq!(d.state().io_queues_live(), base, "round {round}: the groups' queue pairs deleted");
    }
    // The same two queue IDs every round (deleted IDs are used again).
    let s = sq_commands(&d);
    assert!(s[2] > 0 && s[3] > 0 && s[4..].iter().all(|x| *x == 0), "{s:?}");
}

/// One 4 KiB I/O on queue `q`; its status once it completes.
fn one_io(w: &mut NvmeWorld, h: &mut Node, host: &mut Host<V>, q: u16, kind: IoKind, lba: u64) -> Status {
    io_status(w, h, host, q, kind, lba, 8)
}

/// The drive stops answering with a Read outstanding on one group's queue pair (both groups
/// serve I/O through queue pairs of their own): that handle's I/O timeout (1 ms) stops the
/// controller, the namespace goes out of service for every group
/// (its report says failed) and the I/O queues of both groups answer errors from then on.
#[test]
fn a_drive_that_stops_answering_fails_the_namespace_for_every_group() {
    let (mut w, mut h, d) = setup_nvme_groups(4, 2, Config { io_timeout_ns: 1_000_000, ..Config::default() });
    let mut host = Host::connect(&mut h.v, &mut w, four_queues(8), SUBNQN).expect("connect");
    for q in 1..=4 {
        assert!(one_io(&mut w, &mut h, &mut host, q, IoKind::Write, q as u64 * 8).is_success());
    }
    let groups_of: Vec<u16> = (1..=4).map(|q| w.target.queue_reports().find(|r| r.qid == q).expect("queue").group).collect();
    assert!(groups_of.contains(&0) && groups_of.contains(&1), "I/O queues in both groups: {groups_of:?}");
    let s = sq_commands(&d);
    assert!(s[1] == 0 && s[2] > 0 && s[3] > 0, "the Writes went on the groups' own queue pairs: {s:?}");
    d.state().hung = true;
    let st = one_io(&mut w, &mut h, &mut host, 1, IoKind::Read, 8);
    assert!(!st.is_success(), "the Read the drive never answered fails: {st:?}");
    let failed = w.target.namespace_stats().find(|r| r.subnqn == SUBNQN && r.nsid == 1).expect("namespace").stats.failed;
    assert!(failed, "the namespace is out of service");
    for q in 1..=4 {
        let st = one_io(&mut w, &mut h, &mut host, q, IoKind::Read, 16);
        assert!(!st.is_success(), "queue {q} (group {}): I/O refused after the failure: {st:?}", groups_of[q as usize - 1]);
    }
    assert_eq!(d.state().io_commands, 4, "the drive executed the 4 Writes and nothing after");
}
