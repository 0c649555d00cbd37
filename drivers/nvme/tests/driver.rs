//! Host tests of the driver against the emulated NVMe drive (`testbed::nvme_drive`; bring-up,
//! I/O, PRP lists, metadata formats, timeouts, shutdown).

mod common;

use blockdev::{BlockDevice, BlockDone, BlockError, BlockIo, BlockOp};
use common::*;
use hal::{DmaRegion, DmaSlice, Hal};
use nvme::{Config, Controller, Error, NvmeNamespace, StatusCode};

#[test]
fn init_and_identify() {
    let (_hal, _bar, mut c) = bring_up();
    assert_eq!(c.info().serial(), "FAKESN01");
    assert_eq!(c.info().model(), "Fake NVMe");
    assert_eq!(c.info().firmware(), "1.0");
    assert_eq!(c.max_transfer_bytes(), 128 * 1024);
    let mut ids = vec![];
    assert_eq!(c.active_namespaces(|n| ids.push(n)).unwrap(), 2);
    assert_eq!(ids, vec![1, 2]);
    let ns = c.identify_namespace(1).unwrap();
    assert_eq!((ns.blocks, ns.block_size, ns.bytes()), (2048, 512, 2048 * 512));
    // A namespace that does not exist: typed status from the device.
    match c.identify_namespace(7) {
        Err(Error::Status { status, .. }) => assert_eq!(status.code(), StatusCode::InvalidNamespaceOrFormat),
        other => panic!("{other:?}"),
    }
}

#[test]
fn controller_that_never_becomes_ready_times_out() {
    let hal = sim_hal();
    let bar = drive(&hal);
    bar.state().never_ready = true;
    let t0 = hal.now_ns();
    let r = Controller::init(hal.clone(), bar, Config::default());
    assert!(matches!(r, Err(Error::Timeout { .. })), "{:?}", r.err());
    // CAP.TO = 2 → 1 s of (simulated) waiting, not forever.
    let waited = hal.now_ns() - t0;
    assert!((1_000_000_000..1_100_000_000).contains(&waited), "{waited}");
}

#[test]
fn io_mixed_sizes_unaligned_and_one_doorbell_per_batch() {
    let (hal, bar, mut c) = bring_up();
    let info = c.identify_namespace(1).unwrap();
    let q = c.create_io_queue_pair(64).unwrap();
    let mut ns = NvmeNamespace::new(&c, info, q).unwrap();
    assert_eq!(ns.max_transfer_blocks(), 256);
    let buf = hal.dma_alloc(4 << 20, 4096).unwrap();
    // Write the whole namespace in pieces of varying size and buffer offset.
    let sizes = [1u32, 7, 8, 9, 64, 255, 256, 3, 100, 200];
    let mut lba = 0u64;
    let mut i = 0;
    let mut pieces = vec![];
    while lba < info.blocks {
        let n = (sizes[i % sizes.len()] as u64).min(info.blocks - lba) as u32;
        let boff = (i * 1236) % 8192 & !3; // dword aligned, page-unaligned
        pieces.push((lba, n, boff));
        lba += n as u64;
        i += 1;
    }
    for (k, &(lba, n, boff)) in pieces.iter().enumerate() {
        let data: Vec<u8> = (0..n as usize * BS).map(|j| (lba as usize * 7 + j * 13 + k) as u8).collect();
        buf.write(boff, &data);
        let before = ns.queue_stats().sq_doorbells;
        ns.submit(&io(BlockOp::Write, lba, n, at(&buf, boff, n as usize * BS), k as u64)).unwrap();
        let done = wait(&mut ns, &hal, 1);
        assert_eq!(done[0], BlockDone { tag: k as u64, result: Ok(()) });
        assert_eq!(ns.queue_stats().sq_doorbells, before + 1);
    }
    // Device contents are what was written.
    {
        let s = bar.state();
        for (k, &(lba, n, _)) in pieces.iter().enumerate() {
            for j in 0..n as usize * BS {
                assert_eq!(s.namespaces[0].data[lba as usize * BS + j], (lba as usize * 7 + j * 13 + k) as u8);
            }
        }
    }
    // Read back in a batch of 8 (8 submits, one doorbell), different offsets.
    let db0 = bar.state().sq_doorbells;
    for (k, &(lba, n, _)) in pieces.iter().take(8).enumerate() {
        let boff = k * (256 * BS + 4096) + 20;
        ns.submit(&io(BlockOp::Read, lba, n, at(&buf, boff, n as usize * BS), 100 + k as u64)).unwrap();
    }
    let done = wait(&mut ns, &hal, 8);
    assert_eq!(bar.state().sq_doorbells, db0 + 1, "one doorbell for the batch");
    assert!(done.iter().all(|d| d.result.is_ok()));
    for (k, &(lba, n, _)) in pieces.iter().take(8).enumerate() {
        let boff = k * (256 * BS + 4096) + 20;
        let mut got = vec![0u8; n as usize * BS];
        buf.read(boff, &mut got);
        for (j, b) in got.iter().enumerate() {
            assert_eq!(*b, (lba as usize * 7 + j * 13 + k) as u8);
        }
    }
    // Flush, Write Zeroes, Deallocate (ONCS has both).
    ns.submit(&io(BlockOp::Flush, 0, 0, DmaSlice::EMPTY, 1)).unwrap();
    ns.submit(&io(BlockOp::WriteZeroes, 10, 4, DmaSlice::EMPTY, 2)).unwrap();
    ns.submit(&io(BlockOp::Deallocate, 20, 2, DmaSlice::EMPTY, 3)).unwrap();
    let done = wait(&mut ns, &hal, 3);
    assert!(done.iter().all(|d| d.result.is_ok()), "{done:?}");
    let s = bar.state();
    assert!(s.namespaces[0].data[10 * BS..14 * BS].iter().all(|b| *b == 0));
    assert!(s.namespaces[0].data[20 * BS..22 * BS].iter().all(|b| *b == 0xDD));
}

#[test]
fn bad_requests_never_reach_the_device() {
    let (hal, bar, mut c) = bring_up();
    let info = c.identify_namespace(2).unwrap();
    let q = c.create_io_queue_pair(8).unwrap();
    let mut ns = NvmeNamespace::new(&c, info, q).unwrap();
    let buf = hal.dma_alloc(1 << 20, 4096).unwrap();
    let before = bar.state().io_commands;
    assert_eq!(ns.submit(&io(BlockOp::Read, 99, 2, at(&buf, 0, 1024), 0)), Err(BlockError::OutOfRange { lba: 99, blocks: 2, capacity: 100 }));
    assert!(matches!(ns.submit(&io(BlockOp::Read, u64::MAX, 1, at(&buf, 0, 512), 0)), Err(BlockError::OutOfRange { .. })));
    assert_eq!(ns.submit(&io(BlockOp::Write, 0, 0, at(&buf, 0, 512), 0)), Err(BlockError::ZeroLength));
    assert_eq!(ns.submit(&io(BlockOp::Write, 0, 4, at(&buf, 0, 1000), 0)), Err(BlockError::BufferTooSmall { need: 2048, have: 1000 }));
    assert_eq!(ns.submit(&io(BlockOp::Read, 0, 1, at(&buf, 2, 512), 0)), Err(BlockError::Unsupported));
    assert!(matches!(ns.submit(&io(BlockOp::Read, 0, 257, at(&buf, 0, 1 << 20), 0)), Err(BlockError::OutOfRange { .. })));
    let mut out = [BlockDone { tag: 0, result: Ok(()) }; 4];
    assert_eq!(ns.poll(&mut out), 0);
    assert_eq!(bar.state().io_commands, before, "nothing reached the device");
    assert_eq!(ns.refused, 6);
    // A device-reported error is typed, and the queue keeps working afterwards.
    bar.state().inject = Some((2, 0x81));
    ns.submit(&io(BlockOp::Read, 0, 1, at(&buf, 0, 512), 5)).unwrap();
    let d = wait(&mut ns, &hal, 1);
    assert_eq!(d[0], BlockDone { tag: 5, result: Err(BlockError::Device { sct: 2, sc: 0x81, dnr: false }) });
    ns.submit(&io(BlockOp::Read, 0, 1, at(&buf, 0, 512), 6)).unwrap();
    assert_eq!(wait(&mut ns, &hal, 1)[0], BlockDone { tag: 6, result: Ok(()) });
}

#[test]
fn full_queue_and_wraparound() {
    let (hal, _bar, mut c) = bring_up();
    let info = c.identify_namespace(1).unwrap();
    let q = c.create_io_queue_pair(4).unwrap();
    let mut ns = NvmeNamespace::new(&c, info, q).unwrap();
    let buf = hal.dma_alloc(4096, 4096).unwrap();
    for round in 0..10u64 {
        for k in 0..3 {
            ns.submit(&io(BlockOp::Read, k, 1, at(&buf, 0, 512), round * 3 + k)).unwrap();
        }
        assert_eq!(ns.submit(&io(BlockOp::Read, 0, 1, at(&buf, 0, 512), 99)), Err(BlockError::QueueFull));
        let d = wait(&mut ns, &hal, 3);
        let mut tags: Vec<u64> = d.iter().map(|d| d.tag).collect();
        tags.sort();
        assert_eq!(tags, vec![round * 3, round * 3 + 1, round * 3 + 2]);
    }
}

#[test]
fn unsupported_ops_when_oncs_lacks_them() {
    let hal = sim_hal();
    let bar = drive(&hal);
    bar.state().oncs = 0;
    let mut c = Controller::init(hal.clone(), bar, Config::default()).unwrap();
    let info = c.identify_namespace(1).unwrap();
    let q = c.create_io_queue_pair(4).unwrap();
    let mut ns = NvmeNamespace::new(&c, info, q).unwrap();
    assert_eq!(ns.submit(&io(BlockOp::WriteZeroes, 0, 1, DmaSlice::EMPTY, 0)), Err(BlockError::Unsupported));
    assert_eq!(ns.submit(&io(BlockOp::Deallocate, 0, 1, DmaSlice::EMPTY, 0)), Err(BlockError::Unsupported));
}

#[test]
fn hung_controller_is_detected_by_timeout() {
    let (hal, bar, mut c) = bring_up();
    let info = c.identify_namespace(1).unwrap();
    let info2 = c.identify_namespace(2).unwrap();
    let q = c.create_io_queue_pair(8).unwrap();
    let q2 = c.create_io_queue_pair(8).unwrap();
    let mut ns = NvmeNamespace::new(&c, info, q).unwrap();
    let mut ns2 = NvmeNamespace::new(&c, info2, q2).unwrap();
    let buf = hal.dma_alloc(4096, 4096).unwrap();
    bar.state().hung = true;
    ns.submit(&io(BlockOp::Read, 0, 1, at(&buf, 0, 512), 1)).unwrap();
    ns.submit(&io(BlockOp::Read, 1, 1, at(&buf, 0, 512), 2)).unwrap();
    ns2.submit(&io(BlockOp::Read, 0, 1, at(&buf, 0, 512), 3)).unwrap();
    assert_eq!(ns2.poll(&mut [BlockDone { tag: 0, result: Ok(()) }; 4]), 0);
    let t0 = hal.now_ns();
    let d = wait(&mut ns, &hal, 2);
    assert!(d.iter().all(|d| d.result == Err(BlockError::Timeout)));
    assert!(hal.now_ns() - t0 >= 10_000_000);
    // The controller was stopped (CC.EN = 0, RDY = 0): no late DMA into the buffers handed back.
    assert_eq!(bar.state().cc & 1, 0);
    assert_eq!(bar.state().csts & 1, 0);
    assert!(c.is_failed());
    assert_eq!(ns.submit(&io(BlockOp::Read, 0, 1, at(&buf, 0, 512), 4)), Err(BlockError::Timeout));
    // The other namespace on the same controller fails at once, without its own timeout.
    let t1 = hal.now_ns();
    let d = wait(&mut ns2, &hal, 1);
    assert_eq!(d, vec![BlockDone { tag: 3, result: Err(BlockError::Timeout) }]);
    assert!(hal.now_ns() - t1 < 1_000_000);
    assert_eq!(ns2.submit(&io(BlockOp::Read, 0, 1, at(&buf, 0, 512), 5)), Err(BlockError::Timeout));
}

#[test]
fn admin_commands_refused_after_the_controller_was_stopped() {
    let (_hal, _bar, mut c) = bring_up();
    assert!(c.fail_stop());
    assert!(matches!(c.identify_namespace(1), Err(Error::Timeout { .. })));
    assert!(matches!(c.create_io_queue_pair(4), Err(Error::Timeout { .. })));
}

/// Orderly removal: a normal shutdown first (the cache reaches media), then the controller's
/// namespaces fail at once, outstanding I/O and new I/O alike, and report `failed` so the
/// target takes them out of service. A controller that cannot finish the shutdown is still
/// removed.
#[test]
fn removal_shuts_down_then_fails_the_namespaces() {
    let (hal, bar, mut c) = bring_up();
    let info = c.identify_namespace(1).unwrap();
    let q = c.create_io_queue_pair(8).unwrap();
    let mut ns = NvmeNamespace::new(&c, info, q).unwrap();
    let buf = hal.dma_alloc(4096, 4096).unwrap();
    ns.submit(&io(BlockOp::Write, 0, 1, at(&buf, 0, 512), 1)).unwrap();
    assert_eq!(wait(&mut ns, &hal, 1), vec![BlockDone { tag: 1, result: Ok(()) }]);
    assert!(!BlockDevice::failed(&ns));
    c.remove().unwrap();
    assert_eq!((bar.state().cc >> 14) & 3, 1, "CC.SHN = normal shutdown");
    assert!(c.is_failed() && BlockDevice::failed(&ns));
    assert_eq!(ns.submit(&io(BlockOp::Read, 0, 1, at(&buf, 0, 512), 2)), Err(BlockError::Timeout));
    drop(ns);

    // Removal with I/O outstanding on a drive that no longer answers.
    let (hal, bar, mut c) = bring_up();
    let info = c.identify_namespace(1).unwrap();
    let q = c.create_io_queue_pair(8).unwrap();
    let mut ns = NvmeNamespace::new(&c, info, q).unwrap();
    let buf = hal.dma_alloc(4096, 4096).unwrap();
    bar.state().hung = true;
    ns.submit(&io(BlockOp::Read, 0, 1, at(&buf, 0, 512), 7)).unwrap();
    assert!(matches!(c.remove(), Err(Error::Timeout { .. })));
    let t0 = hal.now_ns();
    assert_eq!(wait(&mut ns, &hal, 1), vec![BlockDone { tag: 7, result: Err(BlockError::Timeout) }]);
    assert!(hal.now_ns() - t0 < 1_000_000, "failed at once, not after the I/O timeout");
    assert!(BlockDevice::failed(&ns));
}

/// Not inlined, so a profiler can count exactly the driver's submit path.
#[inline(never)]
fn drv_submit(ns: &mut impl BlockDevice, io: &BlockIo) -> Result<(), BlockError> {
    ns.submit(io)
}
/// Not inlined: the driver's doorbell + completion path.
#[inline(never)]
fn drv_poll(ns: &mut impl BlockDevice, out: &mut [BlockDone]) -> usize {
    ns.poll(out)
}

/// Driver cost per I/O: QD32 4 KiB reads with device work deferred outside the driver calls.
/// Run under callgrind by scripts/bench-nvme (ignored in normal test runs: it only measures).
#[test]
#[ignore]
fn bench_submit_complete() {
    let (hal, bar, mut c) = bring_up();
    let info = c.identify_namespace(1).unwrap();
    let q = c.create_io_queue_pair(64).unwrap();
    let mut ns = NvmeNamespace::new(&c, info, q).unwrap();
    let buf = hal.dma_alloc(32 * 4096, 4096).unwrap();
    bar.state().deferred = true;
    let n: u64 = std::env::var("NVME_BENCH_IOS").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let (mut sent, mut done) = (0u64, 0u64);
    let mut out = [BlockDone { tag: 0, result: Ok(()) }; 32];
    while done < n {
        while sent < n && sent - done < 32 {
            let slot = sent % 32;
            drv_submit(&mut ns, &io(BlockOp::Read, (sent * 8) % 2040, 8, at(&buf, slot as usize * 4096, 4096), sent)).unwrap();
            sent += 1;
        }
        let k = drv_poll(&mut ns, &mut out); // rings the doorbell (deferred)
        done += k as u64;
        bar.run_pending();
        let k = drv_poll(&mut ns, &mut out);
        done += k as u64;
    }
    let st = ns.queue_stats();
    println!("bench: {n} I/Os, {} SQ doorbells, {} CQ doorbells", st.sq_doorbells, st.cq_doorbells);
}

#[test]
fn doorbell_stride_from_cap() {
    let hal = sim_hal();
    let bar = drive(&hal);
    bar.state().dstrd = 2; // 16-byte doorbell spacing; the drive counts doorbells off it
    let mut c = Controller::init(hal.clone(), bar.clone(), Config::default()).unwrap();
    let info = c.identify_namespace(1).unwrap();
    let q = c.create_io_queue_pair(8).unwrap();
    let mut ns = NvmeNamespace::new(&c, info, q).unwrap();
    let buf = hal.dma_alloc(4096, 4096).unwrap();
    ns.submit(&io(BlockOp::Read, 0, 8, at(&buf, 0, 4096), 1)).unwrap();
    assert_eq!(wait(&mut ns, &hal, 1)[0], BlockDone { tag: 1, result: Ok(()) });
    assert_eq!(bar.state().stray_doorbells, 0, "every doorbell on the CAP.DSTRD spacing");
    assert!(bar.state().cq_doorbells >= 1);
}

#[test]
fn fatal_status_and_silent_admin_queue() {
    let hal = sim_hal();
    let bar = drive(&hal);
    bar.state().fatal_on_enable = true;
    assert_eq!(Controller::init(hal.clone(), bar, Config::default()).err(), Some(Error::ControllerFatal));
    // Ready, but never answers an admin command: Identify times out.
    let bar = drive(&hal);
    bar.state().hung = true;
    let t0 = hal.now_ns();
    let r = Controller::init(hal.clone(), bar, Config { admin_timeout_ns: 50_000_000, io_timeout_ns: 1, ..Config::default() });
    assert_eq!(r.err(), Some(Error::Timeout { what: "admin command" }));
    assert!(hal.now_ns() - t0 >= 50_000_000);
}

/// Transfers beyond one PRP list page: chained lists, on a controller without an MDTS limit
/// (the driver's 8 MiB cap applies) and with MDTS limits; buffers at the worst page offset.
#[test]
fn chained_prp_lists_up_to_the_maximum_transfer() {
    let hal = sim_hal();
    let bar = drive(&hal);
    {
        let mut s = bar.state();
        s.mdts = 0; // no limit
        s.namespaces = vec![DriveNs::new(1, 40_000)];
    }
    let mut c = Controller::init(hal.clone(), bar.clone(), Config::default()).unwrap();
    assert_eq!(c.max_transfer_bytes(), nvme::ctrl::DEFAULT_MAX_TRANSFER);
    let info = c.identify_namespace(1).unwrap();
    let q = c.create_io_queue_pair(8).unwrap();
    let mut ns = NvmeNamespace::new(&c, info, q).unwrap();
    assert_eq!(ns.max_transfer_blocks(), (8 << 20) / BS as u32);
    let wbuf = hal.dma_alloc((8 << 20) + 8192, 4096).unwrap();
    let rbuf = hal.dma_alloc((8 << 20) + 8192, 4096).unwrap();
    // (bytes, write buffer offset, read buffer offset): 2 MiB + 1 page and 4 MiB cross one and
    // more chain pointers; 513 pages fill the first list page exactly then chain; 8 MiB at the
    // last dword of a page uses all 5 reserved list pages.
    let cases: [(usize, usize, usize); 7] = [
        ((2 << 20) + 4096, 0, 0xFFC),
        (4 << 20, 0x204, 0x1000),
        (512 * 4096, 0, 0),
        (513 * 4096, 0xFFC, 8),
        (1022 * 4096 + 512, 0x600, 0xA00),
        (8 << 20, 0xFFC, 0xFFC),
        ((8 << 20) - 512, 4, 0x1FFC),
    ];
    let mut lba = 0u64;
    for (k, &(bytes, wo, ro)) in cases.iter().enumerate() {
        let blocks = (bytes / BS) as u32;
        let data: Vec<u8> = (0..bytes).map(|j| ((j / 4096) as u8) ^ (j as u8).wrapping_mul(31) ^ k as u8).collect();
        wbuf.write(wo, &data);
        ns.submit(&io(BlockOp::Write, lba, blocks, at(&wbuf, wo, bytes), 2 * k as u64)).unwrap();
        assert_eq!(wait(&mut ns, &hal, 1)[0].result, Ok(()), "write case {k}");
        assert_eq!(&bar.state().namespaces[0].data[lba as usize * BS..lba as usize * BS + bytes], &data[..], "device data case {k}");
        rbuf.fill(ro, bytes, 0);
        ns.submit(&io(BlockOp::Read, lba, blocks, at(&rbuf, ro, bytes), 2 * k as u64 + 1)).unwrap();
        assert_eq!(wait(&mut ns, &hal, 1)[0].result, Ok(()), "read case {k}");
        let mut got = vec![0u8; bytes];
        rbuf.read(ro, &mut got);
        assert!(got == data, "read back case {k}");
        lba = (lba + blocks as u64 + 7) % 20_000;
    }
    assert_eq!(bar.state().max_list_pages_seen, 5, "8 MiB at offset 0xFFC chains 5 list pages");
    // One block more than the maximum is refused before the device.
    let before = bar.state().io_commands;
    let too_big = ns.max_transfer_blocks() + 1;
    assert_eq!(
        ns.submit(&io(BlockOp::Read, 0, too_big, at(&rbuf, 0, too_big as usize * BS), 99)),
        Err(BlockError::TooLarge { blocks: too_big, max: too_big - 1 })
    );
    assert_eq!(bar.state().io_commands, before);
}

/// MDTS bounds the transfer when it is below the cap; a larger cap is honoured up to MDTS.
#[test]
fn max_transfer_from_mdts_and_cap() {
    for (mdts, cap, want) in [(9u8, 8usize << 20, 2usize << 20), (11, 8 << 20, 8 << 20), (12, 8 << 20, 8 << 20), (0, 16 << 20, 16 << 20), (1, 8 << 20, 8192), (255, 8 << 20, 8 << 20), (0, 1000, 4096)] {
        let hal = sim_hal();
        let bar = drive(&hal);
        bar.state().mdts = mdts;
        let mut c = Controller::init(hal.clone(), bar, Config { max_transfer_cap: cap, ..Config::default() }).unwrap();
        assert_eq!(c.max_transfer_bytes(), want, "mdts {mdts} cap {cap}");
        let info = c.identify_namespace(1).unwrap();
        let q = c.create_io_queue_pair(2).unwrap();
        assert!(q.max_transfer_bytes() >= want);
        let ns = NvmeNamespace::new(&c, info, q).unwrap();
        assert_eq!(ns.max_transfer_blocks() as usize, want / BS);
    }
}

/// Metadata formats: separate metadata served through driver-owned MPTR buffers (zeros on
/// writes, a discard buffer on reads; the caller's buffer holds only data); PI served with
/// PRACT and the LBA as initial reference tag (8-byte: no MPTR; 16-byte separate: MPTR too);
/// extended LBA other than 8-byte PI refused with a typed error.
#[test]
fn metadata_formats() {
    let hal = sim_hal();
    let bar = drive(&hal);
    {
        let mut s = bar.state();
        s.namespaces = (1..=6).map(|n| DriveNs::new(n, 256)).collect();
        for (ns, (ms, extended, pi_type)) in s.namespaces.iter_mut().zip([(8, false, 0), (8, true, 0), (8, false, 1), (8, true, 3), (16, false, 1), (16, true, 1)]) {
            ns.format = Some(MetaFormat { ms, extended, pi_type });
        }
    }
    let mut c = Controller::init(hal.clone(), bar.clone(), Config::default()).unwrap();
    let infos: Vec<_> = (1..=6).map(|n| c.identify_namespace(n).unwrap()).collect();
    assert_eq!(infos[0].to_string(), "LBA format 1 (data 512 B, metadata 8 B separate)");
    assert_eq!(infos[1].to_string(), "LBA format 1 (data 512 B, metadata 8 B extended LBA)");
    assert_eq!(infos[2].to_string(), "LBA format 1 (data 512 B, metadata 8 B separate, PI type 1)");
    assert_eq!(infos[3].to_string(), "LBA format 1 (data 512 B, metadata 8 B extended LBA, PI type 3)");
    let mut qs: Vec<_> = (0..6).map(|_| Some(c.create_io_queue_pair(8).unwrap())).collect();
    let c = &c;
    let mut open = |i: usize| NvmeNamespace::new(c, infos[i], qs[i].take().unwrap());
    let mut ns1 = open(0).unwrap();
    assert!(matches!(open(1).err(), Some(Error::MetadataUnsupported { nsid: 2, ms: 8, layout: nvme::MetadataLayout::Extended, pi_type: 0 })));
    let mut ns3 = open(2).unwrap();
    let mut ns4 = open(3).unwrap();
    let mut ns5 = open(4).unwrap();
    assert!(matches!(open(5).err(), Some(Error::MetadataUnsupported { nsid: 6, ms: 16, pi_type: 1, .. })));
    let e = Error::MetadataUnsupported { nsid: 2, ms: 8, layout: nvme::MetadataLayout::Extended, pi_type: 0 }.to_string();
    assert!(e.contains("extended LBA (interleaved with the data)") && e.contains("not served"), "{e}");

    let buf = hal.dma_alloc(64 * 1024, 4096).unwrap();
    let data: Vec<u8> = (0..16 * BS).map(|j| (j * 7 + 3) as u8).collect();
    for (k, ns) in [&mut ns1, &mut ns3, &mut ns4, &mut ns5].into_iter().enumerate() {
        buf.fill(0, 64 * 1024, 0x11);
        buf.write(0, &data);
        bar.state().io_log.clear();
        ns.submit(&io(BlockOp::Write, 100, 16, at(&buf, 0, 16 * BS), 1)).unwrap();
        assert_eq!(wait(ns, &hal, 1)[0].result, Ok(()));
        buf.fill(0, 64 * 1024, 0x22);
        ns.submit(&io(BlockOp::Read, 100, 16, at(&buf, 8, 16 * BS), 2)).unwrap();
        assert_eq!(wait(ns, &hal, 1)[0].result, Ok(()));
        let mut got = vec![0u8; 16 * BS + 64];
        buf.read(8, &mut got);
        assert_eq!(&got[..16 * BS], &data[..], "namespace {k}: data read back");
        assert!(got[16 * BS..].iter().all(|b| *b == 0x22), "namespace {k}: nothing beyond the data in the caller's buffer");
        ns.submit(&io(BlockOp::WriteZeroes, 7, 3, DmaSlice::EMPTY, 3)).unwrap();
        assert_eq!(wait(ns, &hal, 1)[0].result, Ok(()));
        let log: Vec<_> = bar.state().io_log.iter().map(|r| (r.opcode, r.mptr, r.cdw12, r.cdw14)).collect();
        let [(wo, wm, w12, w14), (ro, rm, r12, r14), (zo, zm, z12, z14)] = log[..] else { panic!("{log:?}") };
        assert_eq!((wo, ro, zo), (0x01, 0x02, 0x08));
        const PRACT: u32 = 1 << 29;
        const GUARD: u32 = 1 << 28;
        match k {
            0 => {
                // Separate metadata: MPTR set, distinct buffers for writes and reads, no PRACT.
                assert!(wm != 0 && rm != 0 && wm != rm && wm % 4 == 0 && rm % 4 == 0);
                assert_eq!((w12, r12, zm), (15, 15, 0));
                assert!(wm < buf.paddr() || wm >= buf.paddr() + 64 * 1024, "metadata not in the caller's buffer");
            }
            1 => {
                // PI type 1: PRACT, no MPTR, reference tag from the LBA.
                assert_eq!((wm, rm, zm), (0, 0, 0));
                assert_eq!((w12, r12, z12), (15 | PRACT, 15 | PRACT | GUARD, 2 | PRACT));
                assert_eq!((w14, r14, z14), (100, 100, 7));
            }
            2 => {
                // PI type 3: no reference tag.
                assert_eq!((w12, z12), (15 | PRACT, 2 | PRACT));
                assert_eq!((w14, r14, z14), (0, 0, 0));
            }
            _ => {
                // 16-byte separate metadata holding PI type 1: PRACT and MPTR.
                assert!(wm != 0 && rm != 0 && wm != rm);
                assert_eq!((w12, r12, z12), (15 | PRACT, 15 | PRACT | GUARD, 2 | PRACT));
                assert_eq!((w14, r14, z14), (100, 100, 7));
            }
        }
    }
    // The separate metadata the device got on writes was zeros: 8 then 16 bytes per block.
    assert_eq!(bar.state().meta_written, vec![0u8; 16 * 8 + 16 * 16]);
}


/// More active namespaces than one Identify page lists (1024): the list is read page by page.
#[test]
fn active_namespace_list_beyond_one_page() {
    let hal = sim_hal();
    let bar = drive(&hal);
    // NSIDs 1, 3, 5, ... 4001: 2001 namespaces, two full pages and a partial one.
    bar.state().namespaces = (0..2001u32).map(|i| DriveNs::new(2 * i + 1, 1)).collect();
    let mut c = Controller::init(hal.clone(), bar.clone(), Config::default()).unwrap();
    assert_eq!(c.info().nn, 4001);
    let mut ids = vec![];
    assert_eq!(c.active_namespaces(|id| ids.push(id)).unwrap(), 2001);
    assert_eq!(ids, (0..2001u32).map(|i| 2 * i + 1).collect::<Vec<_>>());
    // Exactly 1024: a full page, then an empty one ends the list.
    bar.state().namespaces = (1..=1024u32).map(|i| DriveNs::new(i, 1)).collect();
    let mut ids = vec![];
    assert_eq!(c.active_namespaces(|id| ids.push(id)).unwrap(), 1024);
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config { cases: 24, ..Default::default() })]
    /// Through the whole driver (queue slot list pages, chain pointers written to DMA memory,
    /// the drive walking them as a device does): any size up to the 8 MiB maximum from and to
    /// any dword offset lands at the right place on the device and reads back intact, with
    /// the slot's list pages reused across commands of different sizes.
    #[test]
    fn any_transfer_up_to_the_maximum(cases in proptest::collection::vec((1u32..=16384, 0usize..1024, 0usize..1024), 1..4)) {
        let hal = sim_hal();
        let bar = drive(&hal);
        {
            let mut s = bar.state();
            s.mdts = 0;
            s.namespaces = vec![DriveNs::new(1, 16384 + 64)];
        }
        let mut c = Controller::init(hal.clone(), bar.clone(), Config::default()).unwrap();
        let info = c.identify_namespace(1).unwrap();
        let q = c.create_io_queue_pair(2).unwrap(); // one usable slot: its list pages are reused
        let mut ns = NvmeNamespace::new(&c, info, q).unwrap();
        let wbuf = hal.dma_alloc((8 << 20) + 8192, 4096).unwrap();
        let rbuf = hal.dma_alloc((8 << 20) + 8192, 4096).unwrap();
        for (k, &(blocks, wo, ro)) in cases.iter().enumerate() {
            let (wo, ro) = (wo * 4, ro * 4);
            let bytes = blocks as usize * BS;
            let lba = (k as u64 * 13) % 64;
            let data: Vec<u8> = (0..bytes).map(|j| (j as u32).wrapping_mul(2654435761).wrapping_add(k as u32 * 7) as u8 ^ (j >> 12) as u8).collect();
            wbuf.write(wo, &data);
            ns.submit(&io(BlockOp::Write, lba, blocks, at(&wbuf, wo, bytes), 1)).unwrap();
            proptest::prop_assert_eq!(wait(&mut ns, &hal, 1)[0].result, Ok(()));
            proptest::prop_assert!(bar.state().namespaces[0].data[lba as usize * BS..lba as usize * BS + bytes] == data[..]);
            rbuf.fill(ro, bytes, 0);
            ns.submit(&io(BlockOp::Read, lba, blocks, at(&rbuf, ro, bytes), 2)).unwrap();
            proptest::prop_assert_eq!(wait(&mut ns, &hal, 1)[0].result, Ok(()));
            let mut got = vec![0u8; bytes];
            rbuf.read(ro, &mut got);
            proptest::prop_assert!(got == data);
        }
    }
}

/// An admin command that timed out and completes later does not answer the next one.
#[test]
fn late_admin_completion_is_not_taken_for_the_next_command() {
    let hal = sim_hal();
    let bar = drive(&hal);
    let mut c = Controller::init(hal.clone(), bar.clone(), Config { admin_timeout_ns: 20_000_000, ..Config::default() }).unwrap();
    bar.state().hung = true;
    // Namespace 7 does not exist: its (late) completion carries an error status.
    assert_eq!(c.identify_namespace(7).err(), Some(Error::Timeout { what: "admin command" }));
    bar.state().hung = false;
    // The device now runs both commands; the answer is namespace 1's, not the stale error.
    let ns = c.identify_namespace(1).unwrap();
    assert_eq!(ns.blocks, 2048);
    assert_eq!(c.identify_namespace(2).unwrap().blocks, 100);
}

/// Normal shutdown: CC.SHN = 01b written with EN kept, CSTS.SHST = 10b awaited; a controller
/// that never completes it is reported by timeout.
#[test]
fn shutdown_notification() {
    let (hal, bar, c) = bring_up();
    c.shutdown().unwrap();
    assert_eq!((bar.state().cc >> 14) & 3, 1);
    assert_eq!(bar.state().cc & 1, 1);
    drop(hal);
    let (hal, bar, c) = bring_up();
    bar.state().hung = true;
    let t0 = hal.now_ns();
    assert_eq!(c.shutdown(), Err(Error::Timeout { what: "shutdown (CSTS.SHST=10b)" }));
    // RTD3E not reported: 5 s (simulated) of waiting, then the error.
    assert!((5_000_000_000..5_100_000_000).contains(&(hal.now_ns() - t0)));
}
