//! `test.hal`: exercise the platform API drivers use, on the real machine (QEMU tests):
//! DMA regions (alignment, physical address, volatile read/write, reuse after drop), the
//! clock (a timed busy-wait), and every memory BAR mapped as `hal::Mmio` (read; a RAM-backed
//! ivshmem BAR is also written and read back, proving 64-bit BARs above 4 GiB are mapped).
use hal::{DmaRegion, Hal, Mmio};
use kernel::pci::BarKind;
use kernel::KernelHal;

/// IVSHMEM (QEMU docs/specs/ivshmem-spec): BAR2 is the shared RAM.
const IVSHMEM: (u16, u16) = (0x1af4, 0x1110);

/// Run the checks; returns the number of failures (each logged).
pub fn run() -> u32 {
    let hal = KernelHal;
    let mut fails = 0;
    let mut fail = |what: &str| {
        log::error!("selftest: FAIL {what}");
        fails += 1;
    };
    // DMA
    match (hal.dma_alloc(100, 4096), hal.dma_alloc(8192, 65536)) {
        (Ok(a), Ok(b)) => {
            if a.paddr() % 4096 != 0 || b.paddr() % 65536 != 0 || a.len() != 100 || b.len() != 8192 {
                fail("dma alignment/length");
            }
            if (0..b.len()).step_by(512).any(|o| b.read_u8(o) != 0) {
                fail("dma zeroed");
            }
            b.write_be32(4, 0xdead_beef);
            b.write_le64(8184, 0x0102_0304_0506_0708);
            if b.read_be32(4) != 0xdead_beef || b.read_le64(8184) != 0x0102_0304_0506_0708 {
                fail("dma read back");
            }
            // unaligned, word-crossing copy round trip
            let pattern: [u8; 61] = core::array::from_fn(|i| (i as u8).wrapping_mul(37).wrapping_add(1));
            b.write(3, &pattern);
            let mut back = [0u8; 61];
            b.read(3, &mut back);
            if back != pattern || b.read_u8(2) != 0 || b.read_u8(64) != 0 {
                fail("dma unaligned copy");
            }
            let pa = b.paddr();
            drop(b);
            match hal.dma_alloc(8192, 65536) {
                Ok(c) if c.read_be32(4) == 0 => log::info!("selftest: dma ok (regions at {:#x}, {pa:#x}; freed region reused zeroed at {:#x})", a.paddr(), c.paddr()),
                _ => fail("dma realloc zeroed"),
            }
        }
        _ => fail("dma_alloc"),
    }
    if hal.dma_alloc(64, 3).is_ok() {
        fail("dma bad alignment accepted");
    }
    if hal.dma_alloc(1 << 40, 4096).is_ok() {
        fail("dma 1 TiB accepted");
    }
    // clock: a 2 ms timeout must take about 2 ms
    let t0 = hal.now_ns();
    let done = hal::poll_until(&hal, 2_000_000, || false);
    let dt = hal.now_ns() - t0;
    if done || !(2_000_000..20_000_000).contains(&dt) {
        fail("poll_until timeout");
    } else {
        log::info!("selftest: poll_until timed out after {dt} ns (asked 2000000)");
    }
    // BARs
    let (mut read, mut high) = (0, 0);
    for f in kernel::pci::functions().iter().filter(|f| f.bridge.is_none()) {
        for b in f.bars.iter().filter(|b| b.kind != BarKind::Io && b.address != 0) {
            let Ok(m) = f.map_bar(b.index) else {
                fail("map_bar");
                continue;
            };
            let v = m.read32(0);
            read += 1;
            if b.address >= 1 << 32 {
                high += 1;
            }
            let (bus, dev, func) = f.bdf();
            log::info!("selftest: {bus:02x}:{dev:02x}.{func:x} bar{} @ {:#x} [0] = {v:#010x}", b.index, b.address);
            if (f.vendor, f.device) == IVSHMEM && b.index == 2 {
                let last = m.size() - 8;
                m.write64(last, 0x5a5a_0000_1234_5678);
                m.write32(0, 0xcafe_f00d);
                if m.read64(last) != 0x5a5a_0000_1234_5678 || m.read32(0) != 0xcafe_f00d {
                    fail("ivshmem BAR write/read");
                } else {
                    log::info!("selftest: ivshmem bar2 @ {:#x} size {:#x} written and read back", b.address, m.size());
                }
            }
        }
    }
    log::info!("selftest: read {read} memory BARs ({high} above 4 GiB), {fails} failures");
    fails
}
