//! Symmetric multiprocessing: the application processors (APs) the MADT lists are started one
//! by one with INIT-SIPI-SIPI (Intel SDM vol. 3A §9.4.4.1 "Typical BSP Initialization
//! Sequence"; MP spec B.4) through [`crate::apic`] and the real-mode [`crate::trampoline`].
//! Each AP gets its own stack, GDT/TSS with its own IST stacks, the shared IDT, the one set of
//! page tables and its per-CPU slot ([`crate::percpu`], through GS base), then parks: `hlt`
//! with interrupts on, woken by a fixed IPI ([`WAKE_VECTOR`]) when the slow path [`post`]s a
//! job to its mailbox. `cpus=N` on the command line caps how many CPUs run (boot CPU included).
//! [`scope`] runs jobs that borrow from the caller ([`Scope::run_on`]) and returns once they
//! all finished, as `std::thread::scope` does with threads.
//!
//! A failure on any CPU (panic, exception) is reported once with that CPU's number; the
//! reporting CPU stops the others with an NMI ([`stop_others`]) before ending the run.
//! Not implemented: the ACPI multiprocessor wake-up mailbox (MADT type 0x10, confidential
//! guests), which the INIT-SIPI-SIPI path stands in for on the machines the image runs on.
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use crate::percpu::{self, CpuId, CpuState, Job, MAX_CPUS};

mod scope;
pub use scope::{scope, Refused, Scope, ScopedJob};

/// Vector of the IPI that wakes a parked CPU (its handler only signals EOI).
pub const WAKE_VECTOR: u8 = 0xf0;
/// Each AP's stack (the boot stack is 256 KiB for the deepest appliance chain, ~47 KiB).
pub const AP_STACK: usize = 128 * 1024;
/// How long the boot CPU waits for a started AP to report (TCG on a loaded host is slow).
const START_TIMEOUT_NS: u64 = 3_000_000_000;
/// How long the self-check's APs wait for each other at the barrier.
const BARRIER_TIMEOUT_NS: u64 = 2_000_000_000;
/// INIT to start-up IPI delay (SDM §9.4.4.1: 10 ms).
const INIT_DELAY_NS: u64 = 10_000_000;
/// Between the two start-up IPIs (SDM: 200 us).
const SIPI_DELAY_NS: u64 = 200_000;
/// Most MADT entries remembered (the rest are counted).
const MAX_MADT: usize = 256;

/// Why a job could not be posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmpError {
    /// The CPU is not online (not started, failed, or beyond the table).
    NotOnline(CpuId),
    /// The CPU is the caller: a CPU cannot post to itself.
    IsCaller(CpuId),
    /// The boot CPU runs the app's main and never parks, so it takes no jobs.
    BootCpu,
    /// A job is already waiting in its mailbox.
    Busy(CpuId),
    /// Its APIC ID cannot be named by an IPI in this APIC mode.
    Unreachable(CpuId),
}

impl core::fmt::Display for SmpError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::NotOnline(c) => write!(f, "cpu {c} is not online"),
            Self::IsCaller(c) => write!(f, "cpu {c} cannot post a job to itself"),
            Self::BootCpu => write!(f, "the boot CPU takes no posted jobs"),
            Self::Busy(c) => write!(f, "cpu {c} already has a job waiting"),
            Self::Unreachable(c) => write!(f, "cpu {c}'s APIC cannot be reached by an IPI"),
        }
    }
}

/// Enabled local APIC IDs from the MADT, in table order (recorded by [`crate::acpi`]).
static MADT: spin::Mutex<heapless::Vec<u32, MAX_MADT>> = spin::Mutex::new(heapless::Vec::new());
/// The GDT/TSS the AP being started loads (built by the boot CPU, taken by the AP).
static AP_TABLES: spin::Mutex<Option<crate::interrupts::CpuTables>> = spin::Mutex::new(None);
/// Set once by the first CPU that fails; others halt instead of reporting.
static FAILING: AtomicBool = AtomicBool::new(false);
/// Set while the failing CPU stops the others: an NMI then means "halt".
static STOPPING: AtomicBool = AtomicBool::new(false);

/// Record one enabled processor entry of the MADT (local APIC or x2APIC).
pub fn record_madt_cpu(apic_id: u32) {
    let mut m = MADT.lock();
    if !m.contains(&apic_id) && m.push(apic_id).is_err() {
        log::warn!("smp: more than {MAX_MADT} MADT processors; apic {apic_id} ignored");
    }
}

/// Number of processors the MADT lists (0 without an MADT).
pub fn madt_cpus() -> usize {
    MADT.lock().len()
}

/// What [`start`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SmpReport {
    /// Processors in the MADT (at least 1: the boot CPU).
    pub present: usize,
    /// CPUs running (boot CPU included).
    pub online: usize,
    /// APs left parked by `cpus=` or [`MAX_CPUS`].
    pub parked: usize,
    /// APs started that did not report.
    pub failed: usize,
}

/// Bring the boot CPU's slot up and start up to `limit - 1` APs (all with `None`). Prints one
/// `smp: cpu N apic X online` line per CPU and the total, then checks that every AP runs a
/// job posted to it (on itself: its CPU number and APIC ID as seen from that CPU) and that all
/// of them run at once (they meet at a barrier).
pub fn start(limit: Option<usize>) -> SmpReport {
    let bsp = percpu::slot(CpuId::BOOT).expect("slot 0 exists");
    let bsp_apic = crate::apic::id();
    bsp.set_apic_id(bsp_apic);
    bsp.set_state(CpuState::Online);
    crate::apic::enable();
    log::info!("smp: cpu 0 apic {bsp_apic} online (boot CPU, {} APIC)", if crate::apic::x2apic() { "x2" } else { "x" });
    let aps: Vec<u32> = MADT.lock().iter().copied().filter(|&id| id != bsp_apic).collect();
    let want = limit.unwrap_or(usize::MAX).min(MAX_CPUS).saturating_sub(1);
    let mut report = SmpReport { present: aps.len() + 1, online: 1, parked: aps.len().saturating_sub(want), failed: 0 };
    if want > 0 && !aps.is_empty() {
        match crate::memory::low_page() {
            Some(page) if crate::trampoline::install(page) => {
                // INIT every AP to be started, then one wait for all of them (SDM: 10 ms after
                // INIT), then start-up IPIs one AP at a time (they share the trampoline).
                let targets: Vec<(u32, bool)> = aps.iter().take(want).map(|&apic| (apic, crate::apic::send_init(apic))).collect();
                crate::time::spin_ns(INIT_DELAY_NS);
                let mut next = 1;
                for (apic, reachable) in targets {
                    if !reachable {
                        log::warn!("smp: apic {apic} cannot be addressed in xAPIC mode; left parked");
                        continue;
                    }
                    if !start_one(CpuId(next), apic, page) {
                        report.failed += 1;
                        log::warn!("smp: no further application processors started");
                        break;
                    }
                    next += 1;
                    report.online += 1;
                }
                report.parked = aps.len() - (report.online - 1) - report.failed;
            }
            Some(page) => {
                log::warn!("smp: trampoline cannot be placed at {page:#x}; application processors left parked");
                report.parked = aps.len();
            }
            None => {
                log::warn!("smp: no free page below 1 MiB for the start-up trampoline; application processors left parked");
                report.parked = aps.len();
            }
        }
    }
    if report.parked > 0 {
        log::info!("smp: {} application processor(s) left parked (not started){}", report.parked, if limit.is_some() { " as cpus= asks" } else { "" });
    }
    let (checked, met) = self_check();
    log::info!(
        "smp: {} CPUs online of {} in the MADT; {checked} application processor(s) ran a job posted to them, {met} at the same time (barrier)",
        report.online,
        report.present
    );
    crate::STATS.lock().cpus = report.online;
    report
}

/// SIPI-SIPI one AP (INIT already sent and waited for) and wait for it to report; false (and
/// its slot marked failed) if not.
fn start_one(cpu: CpuId, apic: u32, page: u64) -> bool {
    let Some(slot) = percpu::slot(cpu) else { return false };
    let (Some(stack), Some(ist)) = (leak_zeroed(AP_STACK), leak_zeroed(crate::interrupts::IST_BYTES)) else {
        log::warn!("smp: no memory for cpu {cpu}'s stacks");
        return false;
    };
    *AP_TABLES.lock() = Some(crate::interrupts::ap_tables(ist));
    let top = (stack.as_ptr() as u64 + stack.len() as u64) & !0xf;
    crate::trampoline::AP_STACK_TOP.store(top, Ordering::SeqCst);
    crate::trampoline::AP_CPU.store(cpu.0, Ordering::SeqCst);
    slot.set_apic_id(apic);
    slot.set_state(CpuState::Starting);
    let vector = (page >> 12) as u8;
    let t0 = crate::time::now_ns();
    crate::apic::send_startup(apic, vector);
    if !crate::time::wait_until(SIPI_DELAY_NS, || slot.state() == CpuState::Online) {
        crate::apic::send_startup(apic, vector);
    }
    // Online within the timeout, or just after it (the transition to Failed then loses).
    if crate::time::wait_until(START_TIMEOUT_NS, || slot.state() == CpuState::Online) || !slot.transition(CpuState::Starting, CpuState::Failed) {
        log::info!("smp: cpu {cpu} apic {apic} online ({} us after the start-up IPI)", crate::time::now_ns().wrapping_sub(t0) / 1000);
        true
    } else {
        log::warn!("smp: cpu {cpu} apic {apic} did not come up within {} ms", START_TIMEOUT_NS / 1_000_000);
        false
    }
}

/// Zeroed heap memory that lives forever (stacks); None if the heap cannot give it.
fn leak_zeroed(len: usize) -> Option<&'static mut [u8]> {
    let mut v: Vec<u8> = Vec::new();
    v.try_reserve_exact(len).ok()?;
    v.resize(len, 0);
    Some(v.leak())
}

/// Post a job to every online AP that records, from that CPU, its CPU number (GS) and APIC ID
/// (CPUID), then waits at a barrier for all the others (so they must run at the same time).
/// Returns (APs whose answer matches their slot, APs that met at the barrier); a mismatch or a
/// silent AP is logged.
fn self_check() -> (usize, usize) {
    let aps: Vec<CpuId> = online().filter(|&c| c != CpuId::BOOT).collect();
    let arrived = Arc::new(AtomicUsize::new(0));
    let met = Arc::new(AtomicUsize::new(0));
    let mut seen = Vec::new();
    for &cpu in &aps {
        let answer = Arc::new(AtomicU64::new(u64::MAX));
        let (a, arrived, met, n) = (answer.clone(), arrived.clone(), met.clone(), aps.len());
        let job: Job = alloc::boxed::Box::new(move || {
            a.store((u64::from(percpu::this_cpu().0) << 32) | u64::from(crate::apic::id()), Ordering::Release);
            arrived.fetch_add(1, Ordering::AcqRel);
            if crate::time::wait_until(BARRIER_TIMEOUT_NS, || arrived.load(Ordering::Acquire) >= n) {
                met.fetch_add(1, Ordering::AcqRel);
            }
        });
        match post(cpu, job) {
            Ok(()) => seen.push((cpu, answer)),
            Err(e) => log::warn!("smp: self-check: {e}"),
        }
    }
    let mut ok = 0;
    for (cpu, answer) in seen {
        let Some(slot) = percpu::slot(cpu) else { continue };
        let want = (u64::from(cpu.0) << 32) | u64::from(slot.apic_id());
        if !wait_idle(cpu, START_TIMEOUT_NS + BARRIER_TIMEOUT_NS) || answer.load(Ordering::Acquire) == u64::MAX {
            log::warn!("smp: self-check: cpu {cpu} did not run its job");
        } else if answer.load(Ordering::Acquire) != want {
            let got = answer.load(Ordering::Acquire);
            log::warn!("smp: self-check: job for cpu {cpu} ran as cpu {} apic {}", got >> 32, got as u32);
        } else {
            ok += 1;
        }
    }
    let met = met.load(Ordering::Acquire);
    if met != aps.len() {
        log::warn!("smp: self-check: {met} of {} application processors met at the barrier", aps.len());
    }
    (ok, met)
}

/// CPUs online, boot CPU first.
pub fn online() -> impl Iterator<Item = CpuId> {
    (0..MAX_CPUS as u32).map(CpuId).filter(|&c| percpu::slot(c).is_some_and(|s| s.state() == CpuState::Online))
}

/// Hand `job` to `cpu` (slow path: allocation, a lock, an IPI). It runs there once, with
/// interrupts off; a second job waits until the first was taken.
pub fn post(cpu: CpuId, job: Job) -> Result<(), SmpError> {
    let slot = percpu::slot(cpu).filter(|s| s.state() == CpuState::Online).ok_or(SmpError::NotOnline(cpu))?;
    if cpu == percpu::this_cpu() {
        return Err(SmpError::IsCaller(cpu));
    }
    if cpu == CpuId::BOOT {
        return Err(SmpError::BootCpu);
    }
    if !crate::apic::reachable(slot.apic_id()) {
        return Err(SmpError::Unreachable(cpu));
    }
    slot.put_job(job).map_err(|_| SmpError::Busy(cpu))?;
    if !crate::apic::send_fixed(slot.apic_id(), WAKE_VECTOR) {
        return Err(SmpError::Unreachable(cpu));
    }
    Ok(())
}

/// Wait until `cpu` has no job waiting or running; false on timeout.
pub fn wait_idle(cpu: CpuId, timeout_ns: u64) -> bool {
    percpu::slot(cpu).is_some_and(|s| crate::time::wait_until(timeout_ns, || s.idle()))
}

/// Called by the first CPU to fail: true for it, false for any later one (which should halt).
pub fn claim_failure() -> bool {
    !FAILING.swap(true, Ordering::AcqRel)
}

/// Whether a failing CPU is stopping the others (an NMI then means: halt here).
pub fn stopping() -> bool {
    STOPPING.load(Ordering::Acquire)
}

/// Stop every other online CPU with an NMI (their NMI handler halts while [`stopping`]).
pub fn stop_others() {
    STOPPING.store(true, Ordering::Release);
    let me = percpu::this_cpu();
    for cpu in online().filter(|&c| c != me) {
        if let Some(s) = percpu::slot(cpu) {
            crate::apic::send_nmi(s.apic_id());
        }
    }
}

/// Rust entry of an AP (from the trampoline's `ap_entry64`, on its own stack): per-CPU slot,
/// GDT/TSS/IDT, local APIC, report online, then park for jobs.
pub extern "C" fn ap_main(cpu: u32) -> ! {
    let cpu = CpuId(cpu);
    percpu::install(cpu);
    let Some(slot) = percpu::slot(cpu) else { crate::exit::halt() };
    let Some(tables) = AP_TABLES.lock().take() else { crate::exit::halt() };
    crate::interrupts::init_ap(tables);
    crate::apic::enable();
    if !slot.transition(CpuState::Starting, CpuState::Online) {
        // Reported too late: the boot CPU gave up on it and moved on.
        crate::exit::halt();
    }
    loop {
        if slot.has_job() {
            slot.run_job();
            continue;
        }
        x86_64::instructions::interrupts::disable();
        if !slot.has_job() {
            // `sti; hlt`: a wake IPI sent after the check above is held until `sti`'s shadow
            // ends and then ends the `hlt`.
            x86_64::instructions::interrupts::enable_and_hlt();
            x86_64::instructions::interrupts::disable();
        }
    }
}
