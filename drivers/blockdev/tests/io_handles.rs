//! Tests of the stores' I/O handles (`BlockDevice::io_handle`, SPDK's io_channel): a RAM
//! namespace's handles share its blocks and nothing else, and can be moved to other threads.
use blockdev::{Backing, BlockDevice, BlockDone, BlockIo, BlockOp, NoLocal, NsSpec, NullNamespace, RamNamespace};
use hal::{DmaRegion, DmaSlice, Hal};
use testbed::{PhysMem, SimClock, SimHal};

fn done(d: &mut impl BlockDevice) -> Vec<BlockDone> {
    let mut out = [BlockDone { tag: 0, result: Ok(()) }; 8];
    let n = d.poll(&mut out);
    out[..n].to_vec()
}

#[test]
fn ram_handles_share_blocks_not_completions_or_counters() {
    let h = SimHal::new(PhysMem::new(), SimClock::new());
    h.set_copy_dma(false);
    let mut ns = RamNamespace::new(h.clone(), 1 << 20, 512).unwrap();
    let mut a = ns.io_handle().unwrap();
    let mut b = ns.io_handle().unwrap();
    assert_eq!(ns.handles(), 3);
    assert_eq!((a.num_blocks(), a.block_size(), a.direct_region()), (ns.num_blocks(), 512, ns.direct_region()));
    // Written through `a` (a copy from a caller buffer), read through `b` and the store.
    let buf = h.dma_alloc(4096, 4096).unwrap();
    buf.write(0, &[0x5A; 1024]);
    a.copy_with(BlockOp::Write, 20, 2, &buf, 0).unwrap();
    let mut got = [0u8; 1024];
    b.region().read(20 * 512, &mut got);
    assert!(got.iter().all(|x| *x == 0x5A));
    ns.region().read(20 * 512, &mut got);
    assert!(got.iter().all(|x| *x == 0x5A));
    // A zero-copy write through `b`: the data is already in the shared blocks.
    let range = b.dma_range(30, 1).unwrap();
    assert_eq!(range, a.dma_range(30, 1).unwrap(), "every handle names the same memory");
    b.submit(&BlockIo { op: BlockOp::Write, lba: 30, blocks: 1, buf: range, tag: 7, fua: false }).unwrap();
    // Write Zeroes through `a` clears what `b` sees.
    a.submit(&BlockIo { op: BlockOp::WriteZeroes, lba: 20, blocks: 1, buf: DmaSlice::EMPTY, tag: 8, fua: false }).unwrap();
    b.region().read(20 * 512, &mut got[..512]);
    assert!(got[..512].iter().all(|x| *x == 0));
    // Each handle reports its own completions and counts its own I/O.
    assert_eq!(done(&mut ns), vec![]);
    assert_eq!(done(&mut a), vec![BlockDone { tag: 8, result: Ok(()) }]);
    assert_eq!(done(&mut b), vec![BlockDone { tag: 7, result: Ok(()) }]);
    assert_eq!((a.copied, a.zero_copy, b.copied, b.zero_copy, ns.copied, ns.zero_copy), (1, 0, 0, 1, 0, 0));
    drop(a);
    drop(b);
    assert_eq!(ns.handles(), 1, "a handle gives its share back when dropped");
}

#[test]
fn null_and_backing_handles_are_of_the_same_kind() {
    let mut n = NullNamespace::new(100, 4096);
    let mut hn = n.io_handle().unwrap();
    assert_eq!((hn.num_blocks(), hn.block_size()), (100, 4096));
    hn.submit(&BlockIo { op: BlockOp::Flush, lba: 0, blocks: 0, buf: DmaSlice::EMPTY, tag: 1, fua: false }).unwrap();
    assert_eq!(done(&mut n), vec![]);
    assert_eq!(done(&mut hn).len(), 1);
    let h = SimHal::new(PhysMem::new(), SimClock::new());
    let mut ram: Backing<SimHal, NoLocal> = Backing::build(&NsSpec::Ram { bytes: 64 << 10, block_size: 512 }, h, |_, _| Err("none")).unwrap();
    let hr = ram.io_handle().unwrap();
    assert!(matches!(hr, Backing::Ram(_)));
    assert_eq!(hr.direct_region(), ram.direct_region(), "the handle is on the same memory");
}

fn assert_send<T: Send>(_: &T) {}

#[test]
fn ram_handles_serve_from_their_own_threads() {
    // The shared simulated platform is `Send + Sync` as the image's `KernelHal` is (its DMA
    // arena one lock per access); no `copy_dma`, so a copy goes through the handle's own reads.
    let hal = SimHal::new(PhysMem::new(), SimClock::new());
    hal.set_copy_dma(false);
    let mut ns = RamNamespace::new(hal.clone(), 4 << 20, 512).unwrap();
    const THREADS: u64 = 4;
    const BLOCKS_EACH: u64 = 256;
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let mut h = ns.io_handle().unwrap();
            assert_send(&h);
            let hal = hal.clone();
            std::thread::spawn(move || {
                // Each thread writes its own blocks (one pattern per block) through its handle.
                let buf = hal.dma_alloc(512, 4096).unwrap();
                for i in 0..BLOCKS_EACH {
                    let lba = t * BLOCKS_EACH + i;
                    buf.write(0, &[(lba % 251) as u8 + 1; 512]);
                    h.copy_with(BlockOp::Write, lba, 1, &buf, 0).unwrap();
                }
                // And zero-copy writes it completes itself.
                let r = h.dma_range(t * BLOCKS_EACH, 1).unwrap();
                h.submit(&BlockIo { op: BlockOp::Write, lba: t * BLOCKS_EACH, blocks: 1, buf: r, tag: t, fua: false }).unwrap();
                let mut out = [BlockDone { tag: 0, result: Ok(()) }; 2];
                assert_eq!(h.poll(&mut out), 1);
                assert_eq!(out[0], BlockDone { tag: t, result: Ok(()) });
                (h.copied, h.zero_copy)
            })
        })
        .collect();
    for w in workers {
        assert_eq!(w.join().unwrap(), (BLOCKS_EACH, 1));
    }
    assert_eq!(ns.handles(), 1);
    // Every thread's blocks are in the store.
    let mut got = [0u8; 512];
    for lba in 0..THREADS * BLOCKS_EACH {
        ns.region().read(lba as usize * 512, &mut got);
        assert!(got.iter().all(|x| *x == (lba % 251) as u8 + 1), "block {lba}");
    }
}
