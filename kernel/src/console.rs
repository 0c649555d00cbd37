//! Serial console on COM1 (uart_16550, port 0x3f8) behind the `log` facade, each line
//! stamped with the uptime since the image's first instruction: `[   0.012345] INFO  pci: msg`
//! (`[   0.012345 cpu 2] ...` when an application processor logs).
//! Every line also goes to the VGA text screen or the framebuffer once the boot information
//! names one ([`crate::vga`], [`crate::fbcon`]).
use core::fmt::Write;

use spin::Mutex;
use uart_16550::backend::PioBackend;
use uart_16550::{Config, Uart16550Tty};

/// COM1 I/O port base (PC/AT legacy).
const COM1: u16 = 0x3f8;

static SERIAL: Mutex<Option<Uart16550Tty<PioBackend>>> = Mutex::new(None);
static LOGGER: Logger = Logger;

struct Logger;

impl log::Log for Logger {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::max_level()
    }
    fn log(&self, r: &log::Record) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let ns = crate::time::uptime_ns();
        let (s, us) = (ns / 1_000_000_000, (ns / 1000) % 1_000_000);
        // Messages carry their own module prefix ("pci: ..."), per the team's logging rule.
        // Lines from an application processor name it inside the stamp: `[   0.061156 cpu 3]`.
        match crate::percpu::this_cpu() {
            crate::percpu::CpuId::BOOT => write_fmt(format_args!("[{s:4}.{us:06}] {:<5} {}\n", r.level(), r.args())),
            cpu => write_fmt(format_args!("[{s:4}.{us:06} cpu {cpu}] {:<5} {}\n", r.level(), r.args())),
        }
    }
    fn flush(&self) {}
}

/// Set up COM1 and install the logger (level Info; `log=` on the command line changes it).
pub fn init() {
    // SAFETY: COM1 is the legacy PC serial port; this is its only owner.
    let tty = unsafe { Uart16550Tty::new_port(COM1, Config::default()) };
    if let Ok(tty) = tty {
        *SERIAL.lock() = Some(tty);
    }
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(log::LevelFilter::Info);
}

fn write_fmt(args: core::fmt::Arguments) {
    if let Some(tty) = SERIAL.lock().as_mut() {
        let _ = tty.write_fmt(args);
    }
    crate::vga::write_fmt(args, false);
    crate::fbcon::write_fmt(args, false);
}

/// Print even if the console lock is held (panic and exception paths).
pub fn emergency_write(args: core::fmt::Arguments) {
    crate::vga::write_fmt(args, true);
    crate::fbcon::write_fmt(args, true);
    // A handler may interrupt a holder of the lock on this single CPU: never wait for it.
    if let Some(mut guard) = SERIAL.try_lock() {
        if let Some(tty) = guard.as_mut() {
            let _ = tty.write_fmt(args);
        }
        return;
    }
    // SAFETY: COM1 exists; the interrupted writer's line may be garbled, which is acceptable
    // on the way to stopping the machine.
    if let Ok(mut tty) = unsafe { Uart16550Tty::new_port(COM1, Config::default()) } {
        let _ = tty.write_fmt(args);
    }
}
