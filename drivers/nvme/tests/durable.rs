//! Durable semantics of a drive namespace against the emulated drive (`testbed::nvme_drive`): the
//! volatile write cache as Identify Controller VWC and Get Features WCE report it, Flush
//! reaching the drive and completing only when the drive completes it, FUA in the SQE, the
//! drive's error status handed up unchanged, and the namespace's identity (NGUID/EUI-64
//! passed through, or derived stably from the drive's model, serial and NSID).

mod common;

use blockdev::{BlockDevice, BlockDone, BlockError, BlockOp};
use common::*;
use hal::{DmaRegion, DmaSlice, Hal};
use nvme::{Config, Controller, NvmeNamespace};

/// Bring up an emulated drive configured by `setup` before its controller starts.
fn bring_up_with(setup: impl FnOnce(&mut DriveState)) -> (SimHal, NvmeDrive, Controller<SimHal, NvmeDrive>) {
    let hal = sim_hal();
    let bar = drive(&hal);
    setup(&mut bar.state());
    let c = Controller::init(hal.clone(), bar.clone(), Config { admin_timeout_ns: 10_000_000, io_timeout_ns: 10_000_000, ..Config::default() }).unwrap();
    (hal, bar, c)
}

fn volatile(setup: impl FnOnce(&mut DriveState)) -> bool {
    let (_hal, _bar, mut c) = bring_up_with(setup);
    let info = c.identify_namespace(1).unwrap();
    let q = c.create_io_queue_pair(8).unwrap();
    let ns = NvmeNamespace::new(&c, info, q).unwrap();
    ns.volatile_write_cache()
}

#[test]
fn volatile_write_cache_from_vwc_and_wce() {
    assert!(!volatile(|_| {}), "no cache reported");
    assert!(volatile(|f| (f.vwc, f.wce) = (1, true)), "present and enabled");
    assert!(!volatile(|f| (f.vwc, f.wce) = (1, false)), "present, disabled (write-through)");
    // VWC bits 2:1 (broadcast flush support) do not change the answer.
    assert!(volatile(|f| (f.vwc, f.wce) = (0b111, true)));
}

#[test]
fn flush_reaches_the_drive_and_completes_only_when_the_drive_does() {
    let (hal, bar, mut c) = bring_up_with(|f| (f.vwc, f.wce) = (1, true));
    let info = c.identify_namespace(1).unwrap();
    let q = c.create_io_queue_pair(8).unwrap();
    let mut ns = NvmeNamespace::new(&c, info, q).unwrap();
    bar.state().deferred = true;
    ns.submit(&io(BlockOp::Flush, 0, 0, DmaSlice::EMPTY, 41)).unwrap();
    let mut out = [BlockDone { tag: 0, result: Ok(()) }; 4];
    // The doorbell is rung, but the drive has not executed the Flush: nothing completes.
    for _ in 0..100 {
        assert_eq!(ns.poll(&mut out), 0);
        hal.relax();
    }
    assert_eq!(ns.counters().flushes_issued, 1);
    assert_eq!(ns.counters().flushes_completed, 0);
    assert_eq!(bar.state().pending.len(), 1, "one SQ doorbell waiting at the drive");
    bar.run_pending();
    assert_eq!(ns.poll(&mut out), 1);
    assert_eq!(out[0], BlockDone { tag: 41, result: Ok(()) });
    assert_eq!(ns.counters().flushes_completed, 1);
    let log = bar.state().io_log.clone();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].opcode, 0x00, "opcode Flush");
}

#[test]
fn flushes_before_the_doorbell_share_one_drive_flush() {
    let (hal, bar, mut c) = bring_up_with(|f| (f.vwc, f.wce) = (1, true));
    let info = c.identify_namespace(1).unwrap();
    let q = c.create_io_queue_pair(8).unwrap();
    let mut ns = NvmeNamespace::new(&c, info, q).unwrap();
    bar.state().deferred = true;
    // Three Flushes before the doorbell: one drive Flush serves them all.
    for tag in [1, 2, 3] {
        ns.submit(&io(BlockOp::Flush, 0, 0, DmaSlice::EMPTY, tag)).unwrap();
    }
    let mut out = [BlockDone { tag: 0, result: Ok(()) }; 8];
    assert_eq!(ns.poll(&mut out), 0, "rung, not executed by the drive yet");
    // A Flush after the doorbell must not be answered by the earlier drive Flush.
    ns.submit(&io(BlockOp::Flush, 0, 0, DmaSlice::EMPTY, 4)).unwrap();
    assert_eq!(ns.outstanding(), 4);
    bar.run_pending();
    // Room for two completions only: the rest comes on the next poll.
    let k = ns.poll(&mut out[..2]);
    assert_eq!(k, 2);
    let mut tags: Vec<u64> = out[..k].iter().map(|d| d.tag).collect();
    for _ in 0..10 {
        let k = ns.poll(&mut out);
        tags.extend(out[..k].iter().map(|d| d.tag));
        bar.run_pending();
    }
    tags.sort();
    assert_eq!(tags, vec![1, 2, 3, 4]);
    let flushes = bar.state().io_log.iter().filter(|e| e.opcode == 0x00).count();
    assert_eq!(flushes, 2, "tags 1-3 share one drive Flush, tag 4 has its own");
    let cn = ns.counters();
    assert_eq!((cn.flushes_issued, cn.flushes_completed, cn.flushes_joined), (2, 2, 2));
    assert_eq!(ns.outstanding(), 0);
    // The drive Flush fails: every Flush that joined it fails the same way.
    bar.state().deferred = false;
    bar.state().inject = Some((0, 0x06));
    ns.submit(&io(BlockOp::Flush, 0, 0, DmaSlice::EMPTY, 5)).unwrap();
    ns.submit(&io(BlockOp::Flush, 0, 0, DmaSlice::EMPTY, 6)).unwrap();
    let d = wait(&mut ns, &hal, 2);
    assert_eq!(d.len(), 2);
    assert!(d.iter().all(|d| d.result == Err(BlockError::Device { sct: 0, sc: 0x06, dnr: false })), "{d:?}");
}

#[test]
fn fua_reaches_the_drives_sqe_on_read_and_write() {
    let (hal, bar, mut c) = bring_up_with(|f| (f.vwc, f.wce) = (1, true));
    let info = c.identify_namespace(1).unwrap();
    let q = c.create_io_queue_pair(8).unwrap();
    let mut ns = NvmeNamespace::new(&c, info, q).unwrap();
    let buf = hal.dma_alloc(8192, 4096).unwrap();
    for (op, fua, tag) in [(BlockOp::Write, true, 1), (BlockOp::Write, false, 2), (BlockOp::Read, true, 3), (BlockOp::Read, false, 4)] {
        let mut r = io(op, 16, 8, at(&buf, 0, 4096), tag);
        r.fua = fua;
        ns.submit(&r).unwrap();
        let d = wait(&mut ns, &hal, 1);
        assert_eq!(d[0], BlockDone { tag, result: Ok(()) });
    }
    let log = bar.state().io_log.clone();
    let fua: Vec<(u8, bool, u32)> = log.iter().map(|e| (e.opcode, e.cdw12 & (1 << 30) != 0, e.cdw12 & 0xFFFF)).collect();
    assert_eq!(fua, vec![(0x01, true, 7), (0x01, false, 7), (0x02, true, 7), (0x02, false, 7)]);
}

#[test]
fn drive_error_status_is_handed_up_unchanged() {
    let (hal, bar, mut c) = bring_up_with(|f| (f.vwc, f.wce) = (1, true));
    let info = c.identify_namespace(1).unwrap();
    let q = c.create_io_queue_pair(8).unwrap();
    let mut ns = NvmeNamespace::new(&c, info, q).unwrap();
    let buf = hal.dma_alloc(4096, 4096).unwrap();
    // Flush failing with Internal Error (retryable); a read failing with Unrecovered Read
    // Error (media, SCT 2 SC 81h, Do Not Retry); then both succeed again.
    for (op, inject, dnr) in [(BlockOp::Flush, (0, 0x06), false), (BlockOp::Read, (2, 0x81), true)] {
        bar.state().inject = Some(inject);
        bar.state().inject_dnr = dnr;
        ns.submit(&io(op, 0, if op == BlockOp::Flush { 0 } else { 1 }, at(&buf, 0, 512), 9)).unwrap();
        let d = wait(&mut ns, &hal, 1);
        assert_eq!(d[0].result, Err(BlockError::Device { sct: inject.0, sc: inject.1, dnr }), "{op:?}");
        ns.submit(&io(op, 0, if op == BlockOp::Flush { 0 } else { 1 }, at(&buf, 0, 512), 10)).unwrap();
        assert_eq!(wait(&mut ns, &hal, 1)[0].result, Ok(()));
    }
    assert_eq!(ns.counters().device_errors, 2);
    assert_eq!((ns.counters().flushes_issued, ns.counters().flushes_completed), (2, 2));
}

#[test]
fn identity_passed_through_or_derived_stably() {
    let nguid = [0xA5; 16];
    let eui = [1, 2, 3, 4, 5, 6, 7, 8];
    let (_hal, _bar, mut c) = bring_up_with(|f| {
        let ns = &mut f.namespaces[0];
        (ns.nguid, ns.eui64) = (nguid, eui);
        (ns.nsfeat, ns.dlfeat, ns.noiob, ns.npwg) = (0x11, 0x01, 64, 7);
    });
    let info = c.identify_namespace(1).unwrap();
    let q = c.create_io_queue_pair(8).unwrap();
    let id = NvmeNamespace::new(&c, info, q).unwrap().identity().unwrap();
    assert_eq!((id.nguid, id.eui64), (nguid, eui));
    assert_eq!((id.ncap, id.nuse), (2048, 2048));
    assert_eq!((id.nsfeat, id.dlfeat, id.noiob, id.npwg), (0x11, 0x01, 64, 7));

    // No NGUID from the drive: derived from model + serial + NSID, the same on every
    // bring-up, different per namespace.
    let derived = |nsid: u32| {
        let (_hal, _bar, mut c) = bring_up_with(|_| {});
        let info = c.identify_namespace(nsid).unwrap();
        let q = c.create_io_queue_pair(8).unwrap();
        let ns = NvmeNamespace::new(&c, info, q).unwrap();
        ns.identity().unwrap().nguid
    };
    let (a, b) = (derived(1), derived(1));
    assert_eq!(a, b);
    assert_ne!(a, [0; 16]);
    assert_ne!(a, derived(2));
    assert_eq!(a, blockdev::derive_guid(b"Fake NVMe\0FAKESN01", 1));
}

#[test]
fn a_drive_that_stops_answering_reports_failed() {
    let (hal, bar, mut c) = bring_up_with(|_| {});
    let info = c.identify_namespace(1).unwrap();
    let q = c.create_io_queue_pair(8).unwrap();
    let mut ns = NvmeNamespace::new(&c, info, q).unwrap();
    let buf = hal.dma_alloc(4096, 4096).unwrap();
    assert!(!ns.failed());
    bar.state().hung = true;
    ns.submit(&io(BlockOp::Read, 0, 1, at(&buf, 0, 512), 1)).unwrap();
    let d = wait(&mut ns, &hal, 1);
    assert_eq!(d[0].result, Err(BlockError::Timeout));
    assert!(ns.failed(), "stopped after the I/O timeout: out of service for good");
}

/// Power loss on the emulated drive: what was flushed or written with FUA survives, a cached
/// write acknowledged after the last Flush is lost whole (the block reads as before it).
#[test]
fn power_loss_keeps_flushed_and_fua_writes_only() {
    let (hal, bar, mut c) = bring_up_with(|f| (f.vwc, f.wce) = (1, true));
    let info = c.identify_namespace(1).unwrap();
    let q = c.create_io_queue_pair(8).unwrap();
    let mut ns = NvmeNamespace::new(&c, info, q).unwrap();
    let buf = hal.dma_alloc(3 * 4096, 4096).unwrap();
    let (x, y, z) = ([0x11u8; 4096], [0x22u8; 4096], [0x33u8; 4096]);
    let step = |ns: &mut NvmeNamespace<SimHal, NvmeDrive>, op: BlockOp, lba: u64, data: Option<&[u8; 4096]>, fua, tag| {
        if let Some(d) = data {
            buf.write(0, d);
        }
        let mut r = io(op, lba, if op == BlockOp::Flush { 0 } else { 8 }, at(&buf, 0, 4096), tag);
        r.fua = fua;
        ns.submit(&r).unwrap();
        assert_eq!(wait(ns, &hal, 1)[0], BlockDone { tag, result: Ok(()) });
    };
    step(&mut ns, BlockOp::Write, 0, Some(&x), false, 1);
    step(&mut ns, BlockOp::Flush, 0, None, false, 2);
    step(&mut ns, BlockOp::Write, 0, Some(&y), false, 3); // acknowledged, never flushed
    step(&mut ns, BlockOp::Write, 8, Some(&z), true, 4); // FUA: on the media at completion
    step(&mut ns, BlockOp::Write, 16, Some(&y), false, 5); // acknowledged, never flushed
    assert_eq!(bar.state().ns(1).unwrap().unflushed_blocks(), 16);
    drop(ns);
    drop(c);
    bar.power_loss();
    let mut c = Controller::init(hal.clone(), bar.clone(), Config::default()).unwrap();
    let info = c.identify_namespace(1).unwrap();
    let q = c.create_io_queue_pair(8).unwrap();
    let mut ns = NvmeNamespace::new(&c, info, q).unwrap();
    for (lba, want, tag) in [(0u64, x, 10u64), (8, z, 11), (16, [0u8; 4096], 12)] {
        buf.fill(0, 4096, 0xFF);
        ns.submit(&io(BlockOp::Read, lba, 8, at(&buf, 0, 4096), tag)).unwrap();
        assert_eq!(wait(&mut ns, &hal, 1)[0].result, Ok(()));
        let mut got = [0u8; 4096];
        buf.read(0, &mut got);
        assert!(got == want, "LBA {lba} after power loss");
    }
}

/// Write Zeroes and Deallocate within the drive's NVM command set limits (Identify CNS 06h:
/// WZSL, DMRSL, DMSL), not MDTS: beyond them refused before the drive; a drive's media or PI
/// error on them handed up unchanged, one drive command each (no retries).
#[test]
fn write_zeroes_and_deallocate_within_the_drives_limits() {
    // MDTS 8 KiB (16 blocks); WZSL 2 (16 KiB: 32 blocks); DMRSL 100, DMSL 40 blocks.
    let (hal, bar, mut c) = bring_up_with(|f| (f.mdts, f.wzsl, f.dmrsl, f.dmsl) = (1, 2, 100, 40));
    assert_eq!(c.info().nvm_limits, nvme::ctrl::NvmLimits { wzsl: 2, dmrl: 0, dmrsl: 100, dmsl: 40 });
    let info = c.identify_namespace(1).unwrap();
    let q = c.create_io_queue_pair(8).unwrap();
    let mut ns = NvmeNamespace::new(&c, info, q).unwrap();
    assert_eq!(ns.max_transfer_blocks(), 16);
    assert_eq!(ns.op_limits(), blockdev::OpLimits { write_zeroes_blocks: 32, deallocate_blocks: 40 });
    bar.state().namespaces[0].data.fill(0xAB);
    ns.submit(&io(BlockOp::WriteZeroes, 100, 32, DmaSlice::EMPTY, 1)).unwrap(); // above MDTS, within WZSL
    ns.submit(&io(BlockOp::Deallocate, 200, 40, DmaSlice::EMPTY, 2)).unwrap();
    assert!(wait(&mut ns, &hal, 2).iter().all(|d| d.result.is_ok()));
    {
        let s = bar.state();
        let d = &s.ns(1).unwrap().data;
        assert!(d[100 * BS..132 * BS].iter().all(|b| *b == 0) && d[132 * BS] == 0xAB);
        assert!(d[200 * BS..240 * BS].iter().all(|b| *b == testbed::nvme_drive::DEALLOCATED_MARK) && d[240 * BS] == 0xAB);
    }
    let before = bar.state().io_commands;
    assert_eq!(ns.submit(&io(BlockOp::WriteZeroes, 0, 33, DmaSlice::EMPTY, 3)), Err(BlockError::TooLarge { blocks: 33, max: 32 }));
    assert_eq!(ns.submit(&io(BlockOp::Deallocate, 0, 41, DmaSlice::EMPTY, 4)), Err(BlockError::TooLarge { blocks: 41, max: 40 }));
    assert_eq!(bar.state().io_commands, before, "nothing reached the drive");

    // The drive fails namespace 1's commands with a PI guard check error (SCT 2, SC 82h, DNR)
    // and then an unrecovered read error: each is the caller's, after one drive command.
    let buf = hal.dma_alloc(4096, 4096).unwrap();
    for (k, st) in [(2u8, 0x82u8), (2, 0x81)].into_iter().enumerate() {
        bar.state().failing = Some((1, nvme_spec::Status { sct: st.0, sc: st.1, dnr: true }));
        let before = bar.state().io_commands;
        ns.submit(&io(BlockOp::WriteZeroes, 0, 8, DmaSlice::EMPTY, 10 + k as u64)).unwrap();
        ns.submit(&io(BlockOp::Read, 0, 8, at(&buf, 0, 4096), 20 + k as u64)).unwrap();
        let d = wait(&mut ns, &hal, 2);
        assert!(d.iter().all(|d| d.result == Err(BlockError::Device { sct: st.0, sc: st.1, dnr: true })), "{d:?}");
        assert_eq!(bar.state().io_commands - before, 2, "one drive command each, no retry");
    }
    bar.state().failing = None;

    // A drive that does not report the limits: Write Zeroes up to one command's 16-bit NLB.
    let (_hal, _bar, mut c) = bring_up_with(|f| f.mdts = 1);
    let info = c.identify_namespace(1).unwrap();
    let q = c.create_io_queue_pair(8).unwrap();
    let ns = NvmeNamespace::new(&c, info, q).unwrap();
    assert_eq!(ns.op_limits(), blockdev::OpLimits { write_zeroes_blocks: 1 << 16, deallocate_blocks: u32::MAX });
}

/// Compare passed through when the drive has it (ONCS bit 0): equal data completes, other
/// data completes with the drive's Compare Failure (SCT 2, SC 85h); without it, refused.
#[test]
fn compare_passed_through_when_the_drive_has_it() {
    let (hal, bar, mut c) = bring_up_with(|f| f.oncs |= nvme_spec::oncs::COMPARE);
    let info = c.identify_namespace(1).unwrap();
    let q = c.create_io_queue_pair(8).unwrap();
    let mut ns = NvmeNamespace::new(&c, info, q).unwrap();
    assert!(ns.supports(BlockOp::Compare));
    let buf = hal.dma_alloc(4096, 4096).unwrap();
    bar.state().ns_mut(1).unwrap().data[8 * BS..16 * BS].fill(0x5A);
    buf.fill(0, 4096, 0x5A);
    ns.submit(&io(BlockOp::Compare, 8, 8, at(&buf, 0, 4096), 1)).unwrap();
    assert_eq!(wait(&mut ns, &hal, 1)[0], BlockDone { tag: 1, result: Ok(()) });
    buf.fill(4095, 1, 0x5B);
    ns.submit(&io(BlockOp::Compare, 8, 8, at(&buf, 0, 4096), 2)).unwrap();
    assert_eq!(wait(&mut ns, &hal, 1)[0].result, Err(BlockError::Device { sct: 2, sc: 0x85, dnr: true }));
    assert_eq!(bar.state().io_log.iter().filter(|r| r.opcode == 0x05).count(), 2);
    assert!(bar.state().ns(1).unwrap().data[8 * BS..16 * BS].iter().all(|b| *b == 0x5A), "nothing written");

    let (hal, _bar, mut c) = bring_up_with(|_| {});
    let info = c.identify_namespace(1).unwrap();
    let q = c.create_io_queue_pair(8).unwrap();
    let mut ns = NvmeNamespace::new(&c, info, q).unwrap();
    let buf = hal.dma_alloc(4096, 4096).unwrap();
    assert!(!ns.supports(BlockOp::Compare));
    assert_eq!(ns.submit(&io(BlockOp::Compare, 8, 8, at(&buf, 0, 4096), 3)), Err(BlockError::Unsupported));
}
