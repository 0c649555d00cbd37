//! How a run ends: QEMU's isa-debug-exit (iobase 0xf4) for tests, or on bare metal a halt
//! or a reboot, as `exit=qemu|halt|reboot` on the command line says; the other CPUs are
//! stopped first.
//!
//! isa-debug-exit makes QEMU exit with status `(value << 1) | 1`: [`SUCCESS`] → 33,
//! [`FAILURE`] → 35. If the device is absent (bare metal), the `qemu` action falls back to halting.
use core::sync::atomic::{AtomicU8, Ordering};

use x86_64::instructions::port::Port;

/// isa-debug-exit I/O port (QEMU `-device isa-debug-exit,iobase=0xf4,iosize=0x04`).
pub const DEBUG_EXIT_PORT: u16 = 0xf4;
/// Value written for success (QEMU exit status 33).
pub const SUCCESS: u32 = 0x10;
/// Value written for failure (QEMU exit status 35).
pub const FAILURE: u32 = 0x11;

/// What to do at the end of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum EndAction {
    /// Write the status to isa-debug-exit, then halt if still running.
    Qemu = 0,
    /// Halt the CPU forever.
    Halt = 1,
    /// Reset the machine (keyboard controller pulse, then a triple fault).
    Reboot = 2,
}

impl EndAction {
    /// Parse `qemu`, `halt` or `reboot`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "qemu" => Some(Self::Qemu),
            "halt" => Some(Self::Halt),
            "reboot" => Some(Self::Reboot),
            _ => None,
        }
    }
}

static ACTION: AtomicU8 = AtomicU8::new(EndAction::Qemu as u8);

/// Choose the end action (from the command line).
pub fn set_action(a: EndAction) {
    ACTION.store(a as u8, Ordering::Relaxed);
}

fn action() -> EndAction {
    match ACTION.load(Ordering::Relaxed) {
        1 => EndAction::Halt,
        2 => EndAction::Reboot,
        _ => EndAction::Qemu,
    }
}

/// End the run successfully.
pub fn success() -> ! {
    finish(SUCCESS)
}

/// End the run with a failure status.
pub fn fail() -> ! {
    finish(FAILURE)
}

fn finish(code: u32) -> ! {
    // Application processors stop first (NMI, then halt with interrupts off), so none keeps
    // polling a device that the end of the run leaves behind.
    crate::smp::stop_others();
    match action() {
        EndAction::Qemu => {
            let mut port: Port<u32> = Port::new(DEBUG_EXIT_PORT);
            // SAFETY: port 0xf4 is QEMU's isa-debug-exit; on hardware without it the write is ignored.
            unsafe { port.write(code) };
        }
        EndAction::Reboot => reboot(),
        EndAction::Halt => {}
    }
    halt()
}

/// Stop this CPU for good.
pub fn halt() -> ! {
    loop {
        x86_64::instructions::interrupts::disable();
        x86_64::instructions::hlt();
    }
}

fn reboot() -> ! {
    let mut kbc: Port<u8> = Port::new(0x64);
    // SAFETY: 0xFE on the 8042 command port pulses the CPU reset line (PC/AT).
    unsafe { kbc.write(0xfe) };
    crate::time::spin_ns(100_000_000);
    // Still alive: load an empty IDT and fault, which triple-faults into a reset.
    static EMPTY: x86_64::structures::DescriptorTablePointer =
        x86_64::structures::DescriptorTablePointer { limit: 0, base: x86_64::VirtAddr::zero() };
    // SAFETY: deliberately invalid IDT so that the next exception resets the machine.
    unsafe {
        x86_64::instructions::tables::lidt(&EMPTY);
        core::arch::asm!("ud2");
    }
    halt()
}
