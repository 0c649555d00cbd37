//! Time: the TSC as the monotonic clock, its frequency from CPUID leaf 0x15 (crystal ×
//! ratio) or calibrated against the PIT (8254 channel 2, 1.193182 MHz; the gate/OUT2 bits of
//! port 0x61), falling back to CPUID leaf 0x16 (base MHz) and, once ACPI is read, to the
//! ACPI PM timer (3.579545 MHz). Busy-wait helpers with timeouts.
//!
//! The origin of [`uptime_ns`] is the image's first instruction (read by `boot`).
use core::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use x86_64::instructions::port::Port;

/// PIT input clock (Hz).
const PIT_HZ: u64 = 1_193_182;
/// Calibration window.
const CALIBRATE_MS: u64 = 2;
/// Calibration rounds; the smallest count wins (a late look at OUT2, e.g. a preempted vCPU,
/// only ever adds ticks).
const CALIBRATE_ROUNDS: usize = 3;
/// PIT ports: channel 2 data, mode/command, NMI status and control (gate = bit 0, speaker = bit 1, OUT2 = bit 5).
const PIT_CH2: u16 = 0x42;
const PIT_CMD: u16 = 0x43;
const PORT_61: u16 = 0x61;
/// Channel 2, lobyte/hibyte, mode 0 (interrupt on terminal count), binary.
const PIT_CH2_MODE0: u8 = 0b1011_0000;

static TSC_HZ: AtomicU64 = AtomicU64::new(0);
/// ns = ticks * MULT >> 32.
static MULT: AtomicU64 = AtomicU64::new(0);
static SOURCE: AtomicU8 = AtomicU8::new(0);
/// TSC ticks spent calibrating (a fixed wait; 0 when CPUID 0x15 gives the frequency).
static CALIBRATION_TICKS: AtomicU64 = AtomicU64::new(0);

/// Read the time-stamp counter.
#[inline]
pub fn rdtsc() -> u64 {
    // SAFETY: RDTSC has no side effects; CR4.TSD is clear (ring 0 anyway).
    #[allow(unused_unsafe)]
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
}

fn cpuid(leaf: u32) -> (u32, u32, u32, u32) {
    // SAFETY: CPUID is available on every x86_64 CPU.
    #[allow(unused_unsafe)]
    let r = unsafe { core::arch::x86_64::__cpuid_count(leaf, 0) };
    (r.eax, r.ebx, r.ecx, r.edx)
}

fn max_leaf() -> u32 {
    cpuid(0).0
}

/// TSC frequency from CPUID 0x15: crystal Hz × EBX / EAX (Intel SDM vol. 2, CPUID leaf 15H).
fn from_cpuid_15() -> Option<u64> {
    if max_leaf() < 0x15 {
        return None;
    }
    let (den, num, crystal, _) = cpuid(0x15);
    (den != 0 && num != 0 && crystal != 0).then(|| crystal as u64 * num as u64 / den as u64)
}

/// Base frequency in MHz from CPUID 0x16 (Intel SDM, CPUID leaf 16H).
fn from_cpuid_16() -> Option<u64> {
    if max_leaf() < 0x16 {
        return None;
    }
    let mhz = cpuid(0x16).0 & 0xffff;
    (mhz != 0).then(|| mhz as u64 * 1_000_000)
}

/// TSC frequency from the fewest ticks seen over `CALIBRATE_ROUNDS` PIT windows.
fn calibrate_pit() -> Option<u64> {
    let mut best: Option<u64> = None;
    let mut spent = 0;
    for _ in 0..CALIBRATE_ROUNDS {
        let t = pit_window_ticks()?;
        spent += t;
        best = Some(best.map_or(t, |b| b.min(t)));
    }
    CALIBRATION_TICKS.store(spent, Ordering::Relaxed);
    best.map(|t| t * 1000 / CALIBRATE_MS)
}

/// Count TSC ticks over `CALIBRATE_MS` of PIT channel 2. None if OUT2 never rises (no PIT).
fn pit_window_ticks() -> Option<u64> {
    let latch = PIT_HZ * CALIBRATE_MS / 1000;
    let mut p61: Port<u8> = Port::new(PORT_61);
    let mut cmd: Port<u8> = Port::new(PIT_CMD);
    let mut ch2: Port<u8> = Port::new(PIT_CH2);
    // SAFETY: legacy PIT and port 0x61 I/O; the speaker stays off (bit 1 cleared).
    unsafe {
        let v = p61.read();
        p61.write((v & !0x02) | 0x01);
        cmd.write(PIT_CH2_MODE0);
        ch2.write((latch & 0xff) as u8);
        ch2.write((latch >> 8) as u8);
    }
    let t0 = rdtsc();
    let mut loops = 0u64;
    // SAFETY: reading port 0x61 has no side effect.
    while unsafe { p61.read() } & 0x20 == 0 {
        loops += 1;
        if loops > 50_000_000 {
            return None;
        }
    }
    Some(rdtsc() - t0)
}

/// ACPI PM timer frequency (ACPI 6.5 §4.8.3.3).
pub const PM_TIMER_HZ: u64 = 3_579_545;

/// Measure the TSC against the ACPI PM timer at I/O `port` (24-bit counter, or 32-bit if
/// `ext32`) over `CALIBRATE_MS`. None if the counter does not move.
pub fn measure_with_pm_timer(port: u16, ext32: bool) -> Option<u64> {
    let mask: u32 = if ext32 { u32::MAX } else { 0x00ff_ffff };
    let mut p: Port<u32> = Port::new(port);
    // SAFETY: reading the PM timer register named by the FADT has no side effects.
    let mut read = || unsafe { p.read() } & mask;
    let want = (PM_TIMER_HZ * CALIBRATE_MS / 1000) as u32;
    let c0 = read();
    let t0 = rdtsc();
    let mut loops = 0u64;
    let (c1, t1) = loop {
        let c = read();
        let t = rdtsc();
        if c.wrapping_sub(c0) & mask >= want {
            break (c, t);
        }
        loops += 1;
        if loops > 50_000_000 {
            return None;
        }
    };
    let ticks = (c1.wrapping_sub(c0) & mask) as u64;
    Some((t1 - t0) * PM_TIMER_HZ / ticks)
}

/// Use the ACPI PM timer when the boot-time calibration had no reference (no CPUID 0x15, no
/// PIT): called once ACPI is parsed. With `force`, measure and log even if a source exists
/// (test.clock=pmtimer), switching to the PM-timer figure.
pub fn refine_with_pm_timer(port: u16, ext32: bool, force: bool) {
    let src = SOURCE.load(Ordering::Relaxed);
    if src <= 2 && !force {
        return;
    }
    match measure_with_pm_timer(port, ext32) {
        Some(hz) => {
            log::info!(
                "time: ACPI PM timer at port {port:#x}: tsc {} kHz (was {} kHz, {})",
                hz / 1000,
                tsc_khz(),
                source()
            );
            set_hz(hz);
            SOURCE.store(5, Ordering::Relaxed);
        }
        None => log::warn!("time: ACPI PM timer at port {port:#x} does not count"),
    }
}

/// Determine the TSC frequency. Called once, early.
pub fn init() {
    let (hz, src) = if let Some(hz) = from_cpuid_15() {
        (hz, 1)
    } else if let Some(hz) = calibrate_pit() {
        (hz, 2)
    } else if let Some(hz) = from_cpuid_16() {
        (hz, 3)
    } else {
        (2_000_000_000, 4)
    };
    set_hz(hz);
    SOURCE.store(src, Ordering::Relaxed);
}

fn set_hz(hz: u64) {
    TSC_HZ.store(hz, Ordering::Relaxed);
    MULT.store(((1_000_000_000u128 << 32) / hz as u128) as u64, Ordering::Relaxed);
}

/// Where the frequency came from.
pub fn source() -> &'static str {
    match SOURCE.load(Ordering::Relaxed) {
        1 => "CPUID 0x15",
        2 => "PIT-calibrated",
        3 => "CPUID 0x16",
        4 => "assumed 2 GHz: no CPUID 0x15/0x16, no PIT",
        5 => "ACPI PM timer",
        _ => "uncalibrated",
    }
}

/// TSC ticks the PIT calibration waited (part of the boot time that real hardware with
/// CPUID 0x15 does not spend).
pub fn calibration_ticks() -> u64 {
    CALIBRATION_TICKS.load(Ordering::Relaxed)
}

/// TSC frequency in kHz (0 before [`init`]).
pub fn tsc_khz() -> u64 {
    TSC_HZ.load(Ordering::Relaxed) / 1000
}

/// Convert TSC ticks to nanoseconds (0 before [`init`]).
pub fn ticks_to_ns(ticks: u64) -> u64 {
    ((ticks as u128 * MULT.load(Ordering::Relaxed) as u128) >> 32) as u64
}

/// Monotonic nanoseconds since the image's first instruction.
pub fn uptime_ns() -> u64 {
    ticks_to_ns(rdtsc().wrapping_sub(boot::first_tsc()))
}

/// Monotonic clock in nanoseconds (the driver Hal's `now_ns`).
pub fn now_ns() -> u64 {
    uptime_ns()
}

/// Busy-wait for `ns` nanoseconds.
pub fn spin_ns(ns: u64) {
    let start = now_ns();
    while now_ns().wrapping_sub(start) < ns {
        core::hint::spin_loop();
    }
}

/// Busy-wait until `done()` or `timeout_ns` elapses; true if `done()` became true.
pub fn wait_until(timeout_ns: u64, mut done: impl FnMut() -> bool) -> bool {
    let start = now_ns();
    loop {
        if done() {
            return true;
        }
        if now_ns().wrapping_sub(start) >= timeout_ns {
            return done();
        }
        core::hint::spin_loop();
    }
}
