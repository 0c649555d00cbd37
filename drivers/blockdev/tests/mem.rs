//! Tests of the RAM and null namespaces over the shared simulated platform (`testbed::SimHal`),
//! and of `Backing` (one type for memory, null and local stores).
use blockdev::{BlockDevice, BlockDone, BlockError, BlockIo, BlockOp, NullNamespace, RamNamespace};
use hal::{DmaRegion, DmaSlice, Hal};
use proptest::prelude::*;
use testbed::{PhysMem, SimClock, SimHal};

/// The shared simulated platform (testbed), without `copy_dma`: a platform that cannot copy
/// between DMA slices, so the RAM namespace's own fallbacks are what is tested.
fn hal() -> SimHal {
    let h = SimHal::new(PhysMem::new(), SimClock::new());
    h.set_copy_dma(false);
    h
}
fn done(d: &mut impl BlockDevice) -> Vec<BlockDone> {
    let mut out = [BlockDone { tag: 0, result: Ok(()) }; 8];
    let n = d.poll(&mut out);
    out[..n].to_vec()
}

#[test]
fn ram_zero_copy_and_copy() {
    let h = hal();
    let mut r = RamNamespace::new(h.clone(), 1 << 20, 512).unwrap();
    assert_eq!((r.num_blocks(), r.block_size()), (2048, 512));
    // Zero copy: "RDMA" data straight into blocks 10..12, then a write I/O naming that range.
    let pa = r.dma_range(10, 2).unwrap();
    assert_eq!((pa.paddr(), pa.len()), (r.paddr_of(10), 1024));
    r.region().write((pa.paddr() - r.paddr_of(0)) as usize, &[7u8; 1024]);
    r.submit(&BlockIo { op: BlockOp::Write, lba: 10, blocks: 2, buf: pa, tag: 1, fua: false }).unwrap();
    assert_eq!(done(&mut r), vec![BlockDone { tag: 1, result: Ok(()) }]);
    assert_eq!(r.zero_copy, 1);
    // Copy out to a caller region and back in elsewhere.
    let buf = h.dma_alloc(4096, 4096).unwrap();
    r.copy_with(BlockOp::Read, 10, 2, &buf, 100).unwrap();
    let mut b = [0u8; 1024];
    buf.read(100, &mut b);
    assert!(b.iter().all(|x| *x == 7));
    r.copy_with(BlockOp::Write, 500, 2, &buf, 100).unwrap();
    let mut b2 = [0u8; 1024];
    r.region().read(500 * 512, &mut b2);
    assert_eq!(b, b2);
    // A buffer inside the namespace but elsewhere: copied within the region.
    r.submit(&BlockIo { op: BlockOp::Read, lba: 10, blocks: 2, buf: DmaSlice::new(r.region(), 1000 * 512, 1024).unwrap(), tag: 2, fua: false }).unwrap();
    r.region().read(1000 * 512, &mut b2);
    assert!(b2.iter().all(|x| *x == 7));
    // A buffer outside the region, on a platform without copy_dma: refused.
    assert_eq!(r.submit(&BlockIo { op: BlockOp::Read, lba: 0, blocks: 1, buf: DmaSlice::new(&buf, 0, 512).unwrap(), tag: 3, fua: false }), Err(BlockError::Unsupported));
    // Write zeroes.
    r.submit(&BlockIo { op: BlockOp::WriteZeroes, lba: 10, blocks: 1, buf: DmaSlice::EMPTY, tag: 4, fua: false }).unwrap();
    r.region().read(10 * 512, &mut b2[..512]);
    assert!(b2[..512].iter().all(|x| *x == 0));
    // Bad requests.
    assert!(matches!(r.submit(&BlockIo { op: BlockOp::Read, lba: 2048, blocks: 1, buf: pa.sub(0, 512).unwrap(), tag: 5, fua: false }), Err(BlockError::OutOfRange { .. })));
    assert_eq!(r.submit(&BlockIo { op: BlockOp::Read, lba: 0, blocks: 0, buf: pa.sub(0, 512).unwrap(), tag: 5, fua: false }), Err(BlockError::ZeroLength));
    assert_eq!(r.dma_range(2047, 2), None);
    assert_eq!(done(&mut r).len(), 2);
    // Counted copies: copy_with twice + the in-region read, 1 KiB each; zero-copy moved none.
    assert_eq!((r.copied, r.copied_bytes, r.zero_copy), (3, 3 * 1024, 1));
    // The trait's direct access: the same address as dma_range, None outside.
    assert_eq!(BlockDevice::direct(&r, 10, 2), Some(pa));
    assert_eq!(BlockDevice::direct(&r, 2047, 2), None);
    assert_eq!(r.direct_region().map(|s| (s.paddr(), s.len())), Some((r.paddr_of(0), 1 << 20)));
    assert_eq!(NullNamespace::new(8, 512).direct(0, 1), None, "default: no direct memory");
}

#[test]
fn null_completes_at_once_and_checks() {
    let mut n = NullNamespace::new(100, 4096);
    let page = hal().dma_alloc(4096, 4096).unwrap();
    for t in 0..5 {
        n.submit(&BlockIo { op: BlockOp::Read, lba: t, blocks: 1, buf: DmaSlice::whole(&page), tag: t, fua: false }).unwrap();
    }
    let d = done(&mut n);
    assert_eq!(d.iter().map(|d| d.tag).collect::<Vec<_>>(), vec![0, 1, 2, 3, 4]);
    assert_eq!(n.submit(&BlockIo { op: BlockOp::Write, lba: 0, blocks: 2, buf: DmaSlice::whole(&page), tag: 9, fua: false }), Err(BlockError::BufferTooSmall { need: 8192, have: 4096 }));
    // The completion ring reports QueueFull rather than losing completions.
    for t in 0..256 {
        n.submit(&BlockIo { op: BlockOp::Flush, lba: 0, blocks: 0, buf: DmaSlice::EMPTY, tag: t, fua: false }).unwrap();
    }
    assert_eq!(n.submit(&BlockIo { op: BlockOp::Flush, lba: 0, blocks: 0, buf: DmaSlice::EMPTY, tag: 0, fua: false }), Err(BlockError::QueueFull));
}

proptest! {
    /// Random writes through copy_with followed by reads return what a model holds.
    #[test]
    fn ram_matches_model(ops in proptest::collection::vec((0u64..64, 1u32..8, any::<u8>()), 1..40)) {
        let h = hal();
        let mut r = RamNamespace::new(h.clone(), 64 * 512, 512).unwrap();
        let buf = h.dma_alloc(8 * 512, 4096).unwrap();
        let mut model = vec![0u8; 64 * 512];
        for (lba, n, v) in ops {
            buf.write(0, &vec![v; n as usize * 512]);
            let res = r.copy_with(BlockOp::Write, lba, n, &buf, 0);
            if lba + n as u64 > 64 {
                prop_assert!(matches!(res, Err(BlockError::OutOfRange { .. })), "{res:?}");
                continue;
            }
            res.unwrap();
            model[lba as usize * 512..(lba as usize + n as usize) * 512].fill(v);
        }
        for lba in 0..64u64 {
            r.copy_with(BlockOp::Read, lba, 1, &buf, 0).unwrap();
            let mut b = [0u8; 512];
            buf.read(0, &mut b);
            prop_assert_eq!(&b[..], &model[lba as usize * 512..lba as usize * 512 + 512]);
        }
    }
}

#[test]
fn ram_copies_through_platform_copy() {
    let h = hal();
    h.set_copy_dma(true);
    let mut r = RamNamespace::new(h.clone(), 1 << 20, 4096).unwrap();
    let buf = h.dma_alloc(3 * 4096, 4096).unwrap();
    buf.write(4, &[9u8; 8192]);
    r.submit(&BlockIo { op: BlockOp::Write, lba: 5, blocks: 2, buf: DmaSlice::new(&buf, 4, 8192).unwrap(), tag: 1, fua: false }).unwrap();
    buf.fill(0, 3 * 4096, 0);
    r.submit(&BlockIo { op: BlockOp::Read, lba: 5, blocks: 2, buf: DmaSlice::new(&buf, 0, 8192).unwrap(), tag: 2, fua: false }).unwrap();
    let mut b = vec![0u8; 8192];
    buf.read(0, &mut b);
    assert!(b.iter().all(|x| *x == 9));
    assert_eq!((r.copied, r.zero_copy), (2, 0));
    assert_eq!(done(&mut r).len(), 2);
}

/// A local store with answers unlike the memory namespaces' (volatile cache, no Write
/// Zeroes, failed, counters), to see `Backing` pass each one through.
struct Drive;
impl BlockDevice for Drive {
    fn block_size(&self) -> u32 {
        4096
    }
    fn num_blocks(&self) -> u64 {
        77
    }
    fn max_transfer_blocks(&self) -> u32 {
        3
    }
    fn submit(&mut self, _: &BlockIo) -> Result<(), BlockError> {
        Err(BlockError::QueueFull)
    }
    fn poll(&mut self, out: &mut [BlockDone]) -> usize {
        out[0] = BlockDone { tag: 99, result: Ok(()) };
        1
    }
    fn volatile_write_cache(&self) -> bool {
        true
    }
    fn supports(&self, op: BlockOp) -> bool {
        op != BlockOp::WriteZeroes
    }
    fn failed(&self) -> bool {
        true
    }
    fn counters(&self) -> blockdev::DevCounters {
        blockdev::DevCounters { device_errors: 5, ..Default::default() }
    }
}

#[test]
fn a_local_store_without_handles_says_so_and_its_backing_still_makes_memory_handles() {
    use blockdev::{Backing, NsSpec};
    // The default answer (a local NVMe namespace's today).
    assert!(matches!(Drive.io_handle(), Err(BlockError::Unsupported)));
    let mut local = Backing::<SimHal, Drive>::build(&NsSpec::Nvme { ctrl: None, nsid: 1 }, hal(), |_, _| Ok(Box::new(Drive))).unwrap();
    assert!(matches!(local.io_handle(), Err(BlockError::Unsupported)));
    // A RAM namespace of the same backing type (one enum for every namespace of a target)
    // makes handles of that type, on its memory.
    let mut ram = Backing::<SimHal, Drive>::build(&NsSpec::Ram { bytes: 64 << 10, block_size: 512 }, hal(), |_, _| Err("none")).unwrap();
    let handle = ram.io_handle().unwrap();
    assert!(matches!(handle, Backing::Ram(_)));
    assert_eq!(handle.direct_region(), ram.direct_region());
}

#[test]
fn backing_builds_each_spec_and_forwards_every_answer() {
    use blockdev::{Backing, NsSpec};
    let h = hal();
    let mut asked = Vec::new();
    let mut build = |spec: NsSpec| {
        Backing::<SimHal, Drive>::build(&spec, h.clone(), |ctrl, nsid| {
            asked.push((ctrl, nsid));
            if nsid == 1 { Ok(Box::new(Drive)) } else { Err("no such drive") }
        })
    };
    let mut ram = build(NsSpec::Ram { bytes: 1 << 20, block_size: 4096 }).unwrap();
    let null = build(NsSpec::Null { bytes: 1 << 20, block_size: 512 }).unwrap();
    let mut local = build(NsSpec::Nvme { ctrl: Some(2), nsid: 1 }).unwrap();
    assert!(build(NsSpec::Nvme { ctrl: None, nsid: 4 }).is_err());
    assert!(build(NsSpec::Ram { bytes: 8 << 30, block_size: 512 }).is_err(), "more than the platform gives");
    assert_eq!(asked, [(Some(2), 1), (None, 4)]);
    assert!(matches!((&ram, &null, &local), (Backing::Ram(_), Backing::Null(_), Backing::Local(_))));

    // Memory: its geometry, zero-copy window and I/O.
    assert_eq!((ram.block_size(), ram.num_blocks()), (4096, 256));
    assert_eq!((null.block_size(), null.num_blocks()), (512, 2048));
    let region = ram.direct_region().unwrap();
    assert_eq!(region.len(), 1 << 20);
    assert_eq!(ram.direct(1, 1), region.sub(4096, 4096));
    assert_eq!(null.direct(1, 1), None);
    ram.submit(&BlockIo { op: BlockOp::Write, lba: 1, blocks: 1, buf: region.sub(4096, 4096).unwrap(), tag: 7, fua: false }).unwrap();
    assert_eq!(done(&mut ram), vec![BlockDone { tag: 7, result: Ok(()) }]);
    assert!(!ram.volatile_write_cache() && ram.supports(BlockOp::WriteZeroes) && !ram.failed());

    // Local: every answer is the drive's, not a default.
    assert_eq!((local.block_size(), local.num_blocks(), local.max_transfer_blocks()), (4096, 77, 3));
    assert_eq!(local.submit(&BlockIo { op: BlockOp::Flush, lba: 0, blocks: 0, buf: DmaSlice::EMPTY, tag: 1, fua: false }), Err(BlockError::QueueFull));
    assert_eq!(done(&mut local), vec![BlockDone { tag: 99, result: Ok(()) }]);
    assert!(local.volatile_write_cache() && !local.supports(BlockOp::WriteZeroes) && local.supports(BlockOp::Read) && local.failed());
    assert_eq!(local.counters().device_errors, 5);
    assert!(local.local().is_some() && ram.local().is_none());
}

/// A read of the RAM namespace's own blocks is done when `execute_direct` returns (zero copy,
/// nothing left for `poll`); a bad one answers its error the same way. A null namespace has no
/// memory to serve from: it asks to be submitted (`None`).
#[test]
fn ram_executes_direct_reads_at_once() {
    let mut r = RamNamespace::new(hal(), 1 << 20, 512).unwrap();
    let pa = r.dma_range(10, 8).unwrap();
    let io = BlockIo { op: BlockOp::Read, lba: 10, blocks: 8, buf: pa, tag: 9, fua: false };
    assert_eq!(r.execute_direct(&io), Some(Ok(())));
    assert_eq!((r.zero_copy, r.copied), (1, 0));
    assert!(done(&mut r).is_empty(), "no completion follows");
    let bad = BlockIo { lba: 2047, blocks: 2, ..io };
    assert!(matches!(r.execute_direct(&bad), Some(Err(BlockError::OutOfRange { .. }))));
    assert!(done(&mut r).is_empty());
    let mut n = NullNamespace::new(1024, 512);
    assert_eq!(n.execute_direct(&BlockIo { buf: DmaSlice::EMPTY, ..io }), None);
}
