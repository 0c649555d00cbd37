//! Initialization segment: firmware version, `initializing` wait, health buffer and counter.

use crate::bar::read_field;
use crate::error::Error;
use crate::ifc::{health_buffer as hb, init_seg};
use crate::layout::Field;
use hal::{Hal, Mmio};

/// Firmware version from init segment dwords 0 and 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FwVersion {
    pub major: u16,
    pub minor: u16,
    pub subminor: u16,
}

impl core::fmt::Display for FwVersion {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.subminor)
    }
}

pub fn fw_version<M: Mmio + ?Sized>(bar: &M) -> FwVersion {
    FwVersion {
        major: read_field(bar, init_seg::fw_rev_major) as u16,
        minor: read_field(bar, init_seg::fw_rev_minor) as u16,
        subminor: read_field(bar, init_seg::fw_rev_subminor) as u16,
    }
}

pub fn cmdif_rev<M: Mmio + ?Sized>(bar: &M) -> u16 {
    read_field(bar, init_seg::cmdif_rev) as u16
}

/// Poll until `initializing` clears, or fail with [`Error::InitTimeout`].
pub fn wait_initialized<H: Hal, M: Mmio + ?Sized>(hal: &H, bar: &M, timeout_ns: u64) -> Result<(), Error> {
    let start = hal.now_ns();
    if hal::poll_until(hal, timeout_ns, || read_field(bar, init_seg::initializing) == 0) {
        Ok(())
    } else {
        Err(Error::InitTimeout { waited_ns: hal.now_ns().wrapping_sub(start) })
    }
}

/// The health buffer decoded, plus the health counter at the time of reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HealthReport {
    pub assert_var: [u32; 5],
    pub assert_exit_ptr: u32,
    pub assert_callra: u32,
    pub fw_ver: u32,
    pub hw_id: u32,
    pub irisc_index: u8,
    pub synd: u8,
    pub ext_synd: u16,
    pub counter: u32,
}

impl HealthReport {
    pub fn read<M: Mmio + ?Sized>(bar: &M) -> Self {
        let base = init_seg::health;
        let g = |f: Field| read_field(bar, f.at(base));
        let mut assert_var = [0u32; 5];
        for (i, v) in assert_var.iter_mut().enumerate() {
            *v = bar.read32_be(hb::assert_var.at(base).byte() + 4 * i);
        }
        HealthReport {
            assert_var,
            assert_exit_ptr: g(hb::assert_exit_ptr),
            assert_callra: g(hb::assert_callra),
            fw_ver: g(hb::fw_ver),
            hw_id: g(hb::hw_id),
            irisc_index: g(hb::irisc_index) as u8,
            synd: g(hb::synd) as u8,
            ext_synd: g(hb::ext_synd) as u16,
            counter: read_field(bar, init_seg::health_counter),
        }
    }

    /// Name of the health syndrome (values from Linux health.c MLX5_HEALTH_SYNDR_*).
    pub fn synd_name(&self) -> &'static str {
        mlx5_ifc::health_synd::name(self.synd).unwrap_or("unknown")
    }
}

impl core::fmt::Display for HealthReport {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "health: synd 0x{:x} ({}), ext_synd 0x{:04x}, irisc {}, fw_ver 0x{:08x}, hw_id 0x{:08x}, \
             assert_exit_ptr 0x{:08x}, assert_callra 0x{:08x}, assert_var {:08x?}, counter 0x{:06x}",
            self.synd,
            self.synd_name(),
            self.ext_synd,
            self.irisc_index,
            self.fw_ver,
            self.hw_id,
            self.assert_exit_ptr,
            self.assert_callra,
            self.assert_var,
            self.counter
        )
    }
}

/// Consecutive unchanged samples of the health counter that declare the firmware dead.
const MISSES: u32 = 3;

/// Watches the health counter; declares the firmware dead when it stays unchanged over
/// [`MISSES`] samples taken at least `stall_ns / MISSES` apart (so over at least `stall_ns`).
/// Counting samples, not only elapsed time, keeps one long pause of this CPU (a stalled
/// virtual machine, a busy-wait elsewhere) from reading as dead firmware: a clock that jumps
/// past the whole window between two reads is one miss, not three. Linux's health poll
/// counts misses the same way.
#[derive(Debug, Clone, Copy)]
pub struct HealthMonitor {
    last: u32,
    /// When the counter was last sampled.
    sampled_ns: u64,
    misses: u32,
    stall_ns: u64,
}

impl HealthMonitor {
    pub fn new<H: Hal, M: Mmio + ?Sized>(hal: &H, bar: &M, stall_ns: u64) -> Self {
        HealthMonitor { last: read_field(bar, init_seg::health_counter), sampled_ns: hal.now_ns(), misses: 0, stall_ns }
    }

    /// When [`HealthMonitor::check`] next samples the counter.
    pub fn next_sample_ns(&self) -> u64 {
        self.sampled_ns.saturating_add(self.stall_ns / MISSES as u64)
    }

    /// Check once: a non-zero syndrome, or the counter unchanged over [`MISSES`] samples, is
    /// an error. The counter is sampled at most every `stall_ns / MISSES`.
    pub fn check<H: Hal, M: Mmio + ?Sized>(&mut self, hal: &H, bar: &M) -> Result<(), Error> {
        let now = hal.now_ns();
        if now.wrapping_sub(self.sampled_ns) >= self.stall_ns / MISSES as u64 {
            self.sampled_ns = now;
            let c = read_field(bar, init_seg::health_counter);
            if c != self.last {
                self.last = c;
                self.misses = 0;
            } else {
                self.misses += 1;
                if self.misses >= MISSES {
                    return Err(Error::HealthStalled(HealthReport::read(bar)));
                }
            }
        }
        let synd = read_field(bar, hb::synd.at(init_seg::health));
        if synd != 0 {
            return Err(Error::Firmware(HealthReport::read(bar)));
        }
        Ok(())
    }
}
