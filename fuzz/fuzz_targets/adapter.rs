//! The mlx5 driver against a broken or hostile adapter. The emulated ConnectX runs as usual, but
//! values the driver reads from the adapter are altered as the input says: BAR words (init
//! segment, health buffer) and every DMA read (command outputs and mailboxes, EQEs, CQEs, page
//! requests: an adapter may write any memory it was given). Bring-up, the RC loopback self-test
//! (CQs, QPs, keys, SEND / RDMA WRITE / RDMA READ) and shutdown must end in `Ok` or a typed
//! error: never a panic, an out-of-range DMA access, an overflow or a hang.
//!
//! Input: byte 0 picks the device profile; then 6-byte steps, each `gap` (u16 LE: how many reads
//! to let through) and `xor` (u32 LE: what the next read's first bytes are xored with).
#![no_main]

use std::sync::{Arc, Mutex};

use emu_connectx::{ConnectX, PhysMem, Profile, SimClock, SimHal};
use hal::Mmio;
use mlx5::selftest::{loopback_rc, LoopbackConfig};
use mlx5::{Config, Mlx5Verbs, Timeouts};

/// Which reads to alter: (reads to let through first, xor mask), consumed in order.
/// Shared by the BAR and the DMA read filter (which the simulated platform wants `Sync`).
struct Plan(Mutex<PlanState>);

struct PlanState {
    steps: Vec<(u32, u32)>,
    next: usize,
    countdown: u32,
}

impl Plan {
    fn new(data: &[u8]) -> Arc<Plan> {
        let steps: Vec<(u32, u32)> = data
            .chunks_exact(6)
            .map(|c| (u16::from_le_bytes([c[0], c[1]]) as u32, u32::from_le_bytes([c[2], c[3], c[4], c[5]])))
            .collect();
        let first = steps.first().map_or(u32::MAX, |s| s.0);
        Arc::new(Plan(Mutex::new(PlanState { steps, next: 0, countdown: first })))
    }

    /// One read happened: the mask to apply to it, if this is the one the plan names.
    fn on_read(&self) -> Option<u32> {
        let mut p = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if p.countdown > 0 {
            p.countdown -= 1;
            return None;
        }
        let i = p.next;
        let mask = p.steps.get(i)?.1;
        p.next = i + 1;
        p.countdown = p.steps.get(i + 1).map_or(u32::MAX, |s| s.0);
        Some(mask)
    }
}

fn alter(buf: &mut [u8], mask: u32) {
    for (b, m) in buf.iter_mut().zip(mask.to_be_bytes()) {
        *b ^= m;
    }
}

/// Frees the run's simulated memory when the run ends, however it ends: the driver
/// deliberately leaks pages it cannot get back from a broken adapter, and those must not keep
/// simulated memory alive across millions of runs.
struct FreeAll(PhysMem);
impl Drop for FreeAll {
    fn drop(&mut self) {
        self.0.free_all();
    }
}

/// BAR 0 whose reads the plan may alter.
struct HostileBar {
    inner: emu_connectx::Bar0,
    plan: Arc<Plan>,
}

impl Mmio for HostileBar {
    fn size(&self) -> usize {
        self.inner.size()
    }
    fn read32(&self, offset: usize) -> u32 {
        let v = self.inner.read32(offset);
        self.plan.on_read().map_or(v, |m| v ^ m)
    }
    fn write32(&self, offset: usize, value: u32) {
        self.inner.write32(offset, value)
    }
    fn write64(&self, offset: usize, value: u64) {
        self.inner.write64(offset, value)
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&pick, steps)) = data.split_first() else { return };
    let profiles = Profile::all();
    let profile = profiles[pick as usize % profiles.len()].clone();
    let vf = mlx5::pci_id(profile.pci_vendor_id, profile.pci_device_id).is_some_and(|i| i.vf);
    let plan = Plan::new(steps);
    let mem = PhysMem::new();
    let _free = FreeAll(mem.clone());
    let clock = SimClock::new();
    // The shared simulated platform, every DMA read the driver makes altered as the plan says.
    let hal = SimHal::new(mem.clone(), clock.clone());
    let reads = plan.clone();
    hal.set_dma_read_filter(Arc::new(move |buf: &mut [u8]| {
        if let Some(m) = reads.on_read() {
            alter(buf, m);
        }
    }));
    let cx = ConnectX::new(mem, clock, emu_connectx::Config { profile, ..Default::default() });
    let poller = cx.clone();
    hal.set_relax_hook(Box::new(move || {
        poller.poll();
    }));
    let bar = HostileBar { inner: cx.bar0(), plan };
    let cfg = Config {
        ipv4: [192, 168, 7, 2],
        vf,
        timeouts: Timeouts { init_ns: 500_000_000, cmd_ns: 200_000_000, health_stall_ns: 50_000_000 },
        ..Config::default()
    };
    // An adapter the plan leaves alone must pass everything, with every page given back.
    let honest = steps.len() < 6;
    let mut v = match Mlx5Verbs::bring_up(hal, bar, cfg) {
        Ok(v) => v,
        Err(e) => return assert!(!honest, "honest bring-up failed: {e:?}"),
    };
    let r = loopback_rc(&mut v, &LoopbackConfig { rounds: 1, size: 512, ..Default::default() });
    assert!(!honest || r.is_ok(), "honest loopback failed: {r:?}");
    match v.shutdown() {
        Ok(st) => assert!(!honest || st.pages_given == st.pages_reclaimed, "honest shutdown kept pages: {st:?}"),
        Err(e) => assert!(!honest, "honest shutdown failed: {e:?}"),
    }
});
