//! `test.hal`: exercise the platform API drivers use, on the real machine (QEMU tests):
//! DMA regions (alignment, physical address, volatile read/write, reuse after drop), the
//! clock (a timed busy-wait), and every memory BAR mapped as `hal::Mmio` (read; a RAM-backed
//! ivshmem BAR is also written and read back, proving 64-bit BARs above 4 GiB are mapped).
//! With several CPUs online, every CPU at once also allocates, fills, checks and frees DMA
//! regions and heap memory, so the shared allocators are exercised under contention and a
//! region handed to two CPUs shows up as a pattern mismatch; the APs' shares are scoped jobs
//! that borrow the caller's arrays (`kernel::smp::scope`).
use alloc::vec::Vec;
use core::sync::atomic::{AtomicUsize, Ordering};

use hal::{DmaRegion, Hal, Mmio};
use kernel::pci::BarKind;
use kernel::percpu::CpuId;
use kernel::KernelHal;

/// Allocation rounds each CPU runs in the SMP part.
const SMP_ROUNDS: usize = 300;
/// DMA regions each CPU keeps alive at once (so regions of different CPUs coexist).
const SMP_HELD: usize = 4;
/// How long the SMP part's APs wait for each other at the barrier.
const SMP_BARRIER_NS: u64 = 5_000_000_000;

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
    let smp = smp_allocators();
    if smp > 0 {
        fail("allocators on several CPUs at once");
    }
    log::info!("selftest: read {read} memory BARs ({high} above 4 GiB), {fails} failures");
    fails
}

/// One CPU's share of the SMP part: DMA regions of varying size filled with a pattern unique to
/// (CPU, round), up to [`SMP_HELD`] alive at once, each checked before it is freed; plus a heap
/// vector per round. Returns the mismatches and failed allocations.
fn allocator_rounds(cpu: CpuId) -> u32 {
    let hal = KernelHal;
    let mut bad = 0;
    let mut held: Vec<(<KernelHal as Hal>::Dma, u8)> = Vec::new();
    let check = |r: &<KernelHal as Hal>::Dma, p: u8| {
        let mut back = alloc::vec![0u8; r.len()];
        r.read(0, &mut back);
        back.iter().any(|&b| b != p)
    };
    for round in 0..SMP_ROUNDS {
        let p = (cpu.0 as u8).wrapping_mul(61).wrapping_add(round as u8) | 1;
        match hal.dma_alloc(512 + (round % 7) * 1024, 4096) {
            Ok(r) => {
                r.write(0, &alloc::vec![p; r.len()]);
                held.push((r, p));
            }
            Err(_) => bad += 1,
        }
        if held.len() > SMP_HELD {
            let (r, p) = held.remove(0);
            bad += u32::from(check(&r, p));
        }
        let v: Vec<u64> = (0..256u64).map(|i| i ^ u64::from(p)).collect();
        bad += u32::from(v.iter().enumerate().any(|(i, &x)| x != i as u64 ^ u64::from(p)));
    }
    for (r, p) in held {
        bad += u32::from(check(&r, p));
    }
    bad
}

/// Run [`allocator_rounds`] on every online CPU at once (scoped jobs on the APs,
/// `kernel::smp::scope`, the boot CPU's share inline); returns the failures, 0 with a single
/// CPU. The jobs borrow the caller's data: each AP writes its failures and its CPU number (as
/// it reads it itself) into its own element of the caller's arrays and meets the others at a
/// barrier (a counter on the caller's stack) first, so they provably run at the same time.
fn smp_allocators() -> u32 {
    let aps: Vec<CpuId> = kernel::smp::online().filter(|&c| c != CpuId::BOOT).collect();
    if aps.is_empty() {
        return 0;
    }
    let n = aps.len();
    let mut bad = alloc::vec![0u32; n];
    let mut ran_on = alloc::vec![None; n];
    let (arrived, met) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let mut refused = 0u32;
    let boot_bad = kernel::smp::scope(|s| {
        for ((&cpu, bad), ran_on) in aps.iter().zip(bad.iter_mut()).zip(ran_on.iter_mut()) {
            let (arrived, met) = (&arrived, &met);
            let job = move || {
                *ran_on = Some(kernel::percpu::this_cpu());
                arrived.fetch_add(1, Ordering::AcqRel);
                if kernel::time::wait_until(SMP_BARRIER_NS, || arrived.load(Ordering::Acquire) >= n) {
                    met.fetch_add(1, Ordering::AcqRel);
                }
                *bad = allocator_rounds(cpu);
            };
            if let Err(r) = s.run_on(cpu, job) {
                log::error!("selftest: smp: {}", r.error);
                refused += 1;
            }
        }
        allocator_rounds(CpuId::BOOT)
    });
    let placed = aps.iter().zip(&ran_on).filter(|&(&c, &r)| r == Some(c)).count();
    let met = met.load(Ordering::Acquire);
    log::info!("selftest: smp: scoped jobs on {n} application processors: {placed} wrote their own CPU number into the caller's array, {met} met at a barrier");
    let bad = bad.iter().sum::<u32>() + boot_bad + refused;
    log::info!("selftest: smp: {} CPUs x {SMP_ROUNDS} DMA + heap allocation rounds at once, {bad} failures", n + 1);
    bad + (n - placed) as u32 + (n - met) as u32
}
