//! A namespace's I/O handles (`BlockDevice::io_handle`) against the emulated NVMe drive: each
//! handle submits on an I/O queue pair of its own, bounded by the queues the drive granted;
//! a dropped handle's queue pair is deleted and its ID used again; a drive that stops
//! answering fails every handle.

mod common;

use blockdev::{BlockDevice, BlockDone, BlockError, BlockOp};
use common::*;
use hal::{DmaRegion, Hal};
use nvme::{Config, Controller, NvmeNamespace};

/// I/O commands the drive executed on each I/O SQ (index = queue ID).
fn per_sq(bar: &NvmeDrive) -> Vec<u64> {
    let mut v = bar.state().sq_commands.clone();
    v.resize(8, 0);
    v
}

#[test]
fn each_handle_submits_on_its_own_queue_pair() {
    let (hal, bar, mut c) = bring_up();
    let info = c.identify_namespace(1).unwrap();
    let q = c.create_io_queue_pair(16).unwrap();
    let mut ns = NvmeNamespace::new(&c, info, q).unwrap();
    let mut a = ns.io_handle().unwrap();
    let mut b = ns.io_handle().unwrap();
    assert_eq!(bar.state().io_queues_live(), (3, 3), "the store's queue pair and one per handle");
    assert_eq!(c.io_queues_in_use(), 3);
    let buf = hal.dma_alloc(3 * 4096, 4096).unwrap();
    // Each writes 8 blocks of its own through its handle.
    for (k, dev) in [&mut ns, &mut a, &mut b].into_iter().enumerate() {
        buf.fill(k * 4096, 4096, 0x10 + k as u8);
        dev.submit(&io(BlockOp::Write, k as u64 * 8, 8, at(&buf, k * 4096, 4096), k as u64)).unwrap();
        assert_eq!(wait(dev, &hal, 1), vec![BlockDone { tag: k as u64, result: Ok(()) }]);
    }
    assert_eq!(per_sq(&bar)[1..4], [1, 1, 1], "one command on each SQ: {:?}", per_sq(&bar));
    // Each names the queue it submits on (what the image logs per poll group's handle).
    assert_eq!((ns.device_queue(), a.device_queue(), b.device_queue()), (Some(1), Some(2), Some(3)));
    // Reads through another handle than the writer's see the same blocks.
    buf.fill(0, 3 * 4096, 0);
    for (k, dev) in [&mut b, &mut ns, &mut a].into_iter().enumerate() {
        dev.submit(&io(BlockOp::Read, k as u64 * 8, 8, at(&buf, k * 4096, 4096), 9)).unwrap();
        assert_eq!(wait(dev, &hal, 1)[0].result, Ok(()));
        let mut got = [0u8; 4096];
        buf.read(k * 4096, &mut got);
        assert!(got.iter().all(|x| *x == 0x10 + k as u8), "blocks {} read through another queue", k * 8);
    }
    assert_eq!(per_sq(&bar)[1..4], [2, 2, 2]);
    // The handles' own counters: each queue pair counts only its commands.
    assert_eq!((ns.queue_stats().submitted, a.queue_stats().submitted, b.queue_stats().submitted), (2, 2, 2));
    drop((a, b));
    assert_eq!(bar.state().io_queues_live(), (1, 1), "both handles' queue pairs deleted");
    assert_eq!(c.io_queues_in_use(), 1);
}

/// The drive grants 3 I/O queue pairs: the store's and two handles; a third handle is
/// refused (its poller stays on the store) until one is dropped. Rounds of make and drop
/// leave the drive's queues at the baseline and reuse the same IDs.
#[test]
fn handles_are_bounded_by_the_granted_queues_and_given_back() {
    let hal = sim_hal();
    let bar = drive(&hal);
    bar.state().io_queues = 3;
    let mut c = Controller::init(hal.clone(), bar.clone(), Config::default()).unwrap();
    assert_eq!(c.io_queues_granted(), 3);
    let info = c.identify_namespace(1).unwrap();
    let q = c.create_io_queue_pair(8).unwrap();
    let mut ns = NvmeNamespace::new(&c, info, q).unwrap();
    let buf = hal.dma_alloc(4096, 4096).unwrap();
    for round in 0..10u64 {
        let mut a = ns.io_handle().unwrap();
        let b = ns.io_handle().unwrap();
        assert_eq!(ns.io_handle().err(), Some(BlockError::Unsupported), "round {round}: no queue left");
        assert_eq!(bar.state().io_queues_live(), (3, 3));
        a.submit(&io(BlockOp::Read, round, 1, at(&buf, 0, 512), round)).unwrap();
        assert_eq!(wait(&mut a, &hal, 1)[0].result, Ok(()));
        drop(b);
        // The freed ID is taken again.
        let b = ns.io_handle().unwrap();
        drop((a, b));
        assert_eq!(bar.state().io_queues_live(), (1, 1), "round {round}");
        assert_eq!(c.io_queues_in_use(), 1);
    }
    // Every handle's command went to queue 2 (the lowest free ID each round), none to the store's.
    assert_eq!(per_sq(&bar)[1..4], [0, 10, 0]);
}

/// A drive that stops answering while a handle has I/O outstanding: that handle's timeout
/// stops the controller; the store and every other handle fail at once (`failed()`, new
/// I/O refused) and no handle can be made any more. Dropping them sends nothing.
#[test]
fn a_drive_that_stops_answering_fails_every_handle() {
    let (hal, bar, mut c) = bring_up();
    let info = c.identify_namespace(1).unwrap();
    let q = c.create_io_queue_pair(8).unwrap();
    let mut ns = NvmeNamespace::new(&c, info, q).unwrap();
    let mut a = ns.io_handle().unwrap();
    let mut b = ns.io_handle().unwrap();
    let buf = hal.dma_alloc(4096, 4096).unwrap();
    bar.state().hung = true;
    a.submit(&io(BlockOp::Read, 0, 1, at(&buf, 0, 512), 1)).unwrap();
    b.submit(&io(BlockOp::Read, 1, 1, at(&buf, 0, 512), 2)).unwrap();
    assert_eq!(wait(&mut a, &hal, 1), vec![BlockDone { tag: 1, result: Err(BlockError::Timeout) }]);
    assert!(c.is_failed());
    assert!(BlockDevice::failed(&ns) && BlockDevice::failed(&a) && BlockDevice::failed(&b));
    let t0 = hal.now_ns();
    assert_eq!(wait(&mut b, &hal, 1), vec![BlockDone { tag: 2, result: Err(BlockError::Timeout) }]);
    assert!(hal.now_ns() - t0 < 1_000_000, "the other handle fails at once, not after its own timeout");
    assert_eq!(ns.submit(&io(BlockOp::Read, 0, 1, at(&buf, 0, 512), 3)), Err(BlockError::Timeout));
    assert_eq!(ns.io_handle().err(), Some(BlockError::Timeout));
    let admin = c.admin_stats().submitted;
    drop((a, b));
    assert_eq!(c.admin_stats().submitted, admin, "a stopped controller's queues are gone with it: no Delete sent");
    assert_eq!(c.io_queues_in_use(), 1);
}
