//! emu-pci-shim binary: serve a QEMU guest's mlx5 driver from the emulated ConnectX.
//!
//! emu-pci-shim --ram /dev/shm/g-ram --ram-size 1G --bar /dev/shm/g-bar \
//!              [--mac 52:54:00:77:00:02] [--sock-local A --sock-remote B] [--timeout S] [--spin]
//!              [--stop-file PATH]   (ends, printing "SHIM END ...", once PATH exists)
//!              [--profile NAME]     device profile (emu_connectx::profile::NAMES, default
//!                                   connectx5); `--profile list` prints each name and PCI ID
//!
//! QEMU side (q35, RAM at most 2 GiB so guest physical = file offset):
//!   -m 1G -object memory-backend-file,id=ram,size=1G,mem-path=/dev/shm/g-ram,share=on
//!   -machine memory-backend=ram
//!   -object memory-backend-file,id=cxbar,size=32M,mem-path=/dev/shm/g-bar,share=on
//!   -device ivshmem-plain,memdev=cxbar
//! Start the shim first (it creates and presets the BAR file). The port is a Unix datagram
//! socket (one Ethernet frame per datagram) when --sock-local/--sock-remote are given.
//! Prints "SHIM ..." status lines; log level: SHIM_LOG=debug|trace|warn.
#![forbid(unsafe_code)]
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use emu_pci_shim::{Shim, BAR_FILE_SIZE};

struct Logger;
impl log::Log for Logger {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            eprintln!("[{:5}] {}", r.level(), r.args());
        }
    }
    fn flush(&self) {}
}
static LOGGER: Logger = Logger;

fn parse_size(s: &str) -> Option<usize> {
    let (n, mul) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 1 << 10),
        b'M' | b'm' => (&s[..s.len() - 1], 1 << 20),
        b'G' | b'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    n.parse::<usize>().ok()?.checked_mul(mul)
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut o = [0u8; 6];
    let mut it = s.split(':');
    for b in &mut o {
        *b = u8::from_str_radix(it.next()?, 16).ok()?;
    }
    it.next().is_none().then_some(o)
}

fn main() -> ExitCode {
    let level = match std::env::var("SHIM_LOG").as_deref() {
        Ok("trace") => log::LevelFilter::Trace,
        Ok("debug") => log::LevelFilter::Debug,
        Ok("warn") => log::LevelFilter::Warn,
        _ => log::LevelFilter::Info,
    };
    let _ = log::set_logger(&LOGGER).map(|_| log::set_max_level(level));
    let (mut ram, mut ram_size, mut bar) = (None, 1usize << 30, None);
    let (mut mac, mut local, mut remote, mut timeout, mut spin, mut stop_file) = (None, None, None, 0u64, false, None::<PathBuf>);
    let mut profile = emu_connectx::Profile::default();
    let mut it = std::env::args().skip(1);
    let usage = |m: &str| {
        eprintln!("emu-pci-shim: {m}");
        eprintln!("usage: emu-pci-shim --ram PATH [--ram-size 1G] --bar PATH [--mac XX:..] [--sock-local A --sock-remote B] [--timeout S] [--spin] [--stop-file PATH] [--profile NAME|list]");
        ExitCode::from(2)
    };
    while let Some(k) = it.next() {
        if k == "--spin" {
            spin = true;
            continue;
        }
        let Some(v) = it.next() else { return usage(&format!("{k} needs a value")) };
        match k.as_str() {
            "--ram" => ram = Some(PathBuf::from(v)),
            "--bar" => bar = Some(PathBuf::from(v)),
            "--ram-size" => match parse_size(&v) {
                // q35 keeps all RAM below 4 GiB at [0, size) only up to 2 GiB (beyond, the
                // part above 2 GiB moves to 4 GiB and file offset != guest physical address).
                Some(n) if n > 0 && n <= 2 << 30 => ram_size = n,
                Some(_) => return usage("--ram-size: at most 2G (q35 splits larger RAM around the PCI hole)"),
                _ => return usage("--ram-size: expected N[K|M|G]"),
            },
            "--mac" => match parse_mac(&v) {
                Some(m) => mac = Some(m),
                None => return usage("--mac: expected XX:XX:XX:XX:XX:XX"),
            },
            "--stop-file" => stop_file = Some(PathBuf::from(v)),
            "--profile" if v == "list" => {
                // One line per profile: its name and the PCI ID of the part it models.
                for p in emu_connectx::Profile::all() {
                    println!("{} {:04x}:{:04x}", p.name, p.pci_vendor_id, p.pci_device_id);
                }
                return ExitCode::SUCCESS;
            }
            "--profile" => match emu_connectx::Profile::by_name(&v) {
                Some(p) => profile = p,
                None => return usage(&format!("--profile: unknown device profile {v:?}; known: {}", emu_connectx::profile::NAMES.join(", "))),
            },
            "--sock-local" => local = Some(PathBuf::from(v)),
            "--sock-remote" => remote = Some(PathBuf::from(v)),
            "--timeout" => match v.parse() {
                Ok(t) => timeout = t,
                Err(_) => return usage("--timeout: seconds"),
            },
            _ => return usage(&format!("unknown option {k}")),
        }
    }
    let (Some(ram), Some(bar)) = (ram, bar) else { return usage("--ram and --bar are required") };
    let name = profile.name;
    let mut cfg = emu_connectx::Config { port_answers_arp: false, profile, ..Default::default() };
    if let Some(m) = mac {
        cfg.mac = m;
    }
    let mut shim = match Shim::open(&ram, ram_size, &bar, cfg) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("SHIM FAIL cannot map {} / {}: {e}", ram.display(), bar.display());
            return ExitCode::FAILURE;
        }
    };
    match (local, remote) {
        (Some(l), Some(r)) => match emu_roce::UnixDgramLink::new(&l, &r) {
            Ok(link) => shim.attach_link(Box::new(link)),
            Err(e) => {
                eprintln!("SHIM FAIL cannot bind {}: {e}", l.display());
                return ExitCode::FAILURE;
            }
        },
        (None, None) => {}
        _ => return usage("--sock-local and --sock-remote go together"),
    }
    println!("SHIM READY ram={} ({} MiB) bar={} ({} MiB) profile={name}", ram.display(), ram_size >> 20, bar.display(), BAR_FILE_SIZE >> 20);
    let t0 = Instant::now();
    let mut last_report = Instant::now();
    let mut last_check = Instant::now();
    let nap = if spin { Duration::ZERO } else { Duration::from_micros(20) };
    shim.run(nap, |s| {
        if last_report.elapsed() >= Duration::from_secs(5) {
            last_report = Instant::now();
            let c = s.cx.counters();
            println!("SHIM STATS {:?} commands={} dma_faults={} stray_doorbells={}", s.stats, c.commands, c.dma_faults, c.stray_doorbells);
        }
        if last_check.elapsed() >= Duration::from_millis(50) {
            last_check = Instant::now();
            if stop_file.as_ref().is_some_and(|p| p.exists()) {
                return true;
            }
        }
        timeout != 0 && t0.elapsed() >= Duration::from_secs(timeout)
    });
    let c = shim.cx.counters();
    println!(
        "SHIM END {:?} commands={} cmd_failures={} delivery_failures={} dma_faults={} stray_doorbells={} eq_overruns={}",
        shim.stats, c.commands, c.cmd_failures, c.delivery_failures, c.dma_faults, c.stray_doorbells, c.eq_overruns
    );
    ExitCode::SUCCESS
}
