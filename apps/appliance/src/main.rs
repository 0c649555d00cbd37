//! The bootable appliance image: the kernel brings the machine up, this reads the command
//! line, discovers devices (ACPI, PCIe), attaches drivers, prints "ready" and ends as
//! `exit=` says.
#![no_std]
#![no_main]
#![forbid(unsafe_code)]

extern crate alloc;

mod adapter;
mod emu;
mod mgmt_plane;
mod nvmf;
mod selftest;
mod storage;
mod validate;

use appliance_config::{Config, Role, OPTIONS};

kernel::entry!(main);

fn main(boot: kernel::Boot) -> ! {
    log::info!("appliance: command line `{}`", boot.cmdline);
    let mut cfg = Config::default();
    if let Err(e) = kernel::cmdline::parse(boot.cmdline, OPTIONS, &mut cfg) {
        log::error!("appliance: {e}");
        log::error!("appliance: known options:");
        for o in OPTIONS {
            log::error!("appliance:   {:<12} {}", o.name, o.help);
        }
        kernel::exit::fail();
    }
    // A configuration in nvmetcli's saved shape given as a boot module (QEMU -initrd, GRUB
    // module2): read whole before any device is touched; any error stops the image here.
    if let Some(m) = boot.module {
        let applied = nvmeof::nvmetcli::parse(m).and_then(|file| nvmeof::nvmetcli::apply(&mut cfg.nvmeof, file));
        match applied {
            Ok(()) => log::info!("appliance: configuration module read ({} bytes, nvmetcli JSON)", m.len()),
            Err(e) => {
                log::error!("appliance: configuration module: {e}");
                kernel::exit::fail();
            }
        }
    }
    let role = match appliance_config::check(&cfg) {
        Ok(r) => r,
        Err(e) => {
            log::error!("appliance: {e}");
            kernel::exit::fail();
        }
    };
    kernel::exit::set_action(cfg.exit);
    log::set_max_level(cfg.log);
    kernel::devices(cfg.pm_timer);
    kernel::smp::start(cfg.cpus);
    // Drivers attach here, through kernel::pci (find/find_class, enable, map_bar) and
    // kernel::KernelHal; see the API notes atop kernel/src/pci.rs.
    let mut storage = storage::attach(&cfg.storage);
    if let Some(f) = cfg.fault {
        fault_on(f, kernel::percpu::CpuId(cfg.fault_cpu));
        end(&mut storage, false);
    }
    if cfg.selftest && selftest::run() != 0 {
        end(&mut storage, false);
    }
    if !storage.ok {
        log::error!("appliance: storage self-test or namespace configuration failed");
        end(&mut storage, false);
    }
    let target = match role {
        Role::Target => match nvmf::build_target(&cfg, &mut storage.served) {
            Ok(t) => Some(t),
            Err(e) => {
                log::error!("appliance: NVMe-oF target: {e}");
                end(&mut storage, false);
            }
        },
        _ => None,
    };
    if cfg.selftest_connectx {
        let ok = validate::run(&cfg);
        end(&mut storage, ok);
    }
    // ConnectX last, so no failure above leaves an adapter up: a failure is printed and the
    // other parts keep running; the NVMe-oF role then fails clearly.
    let trace = cfg.mlx5_trace.unwrap_or(mlx5::TraceMode::Off);
    let adapter = if cfg.connectx_emu { emu::attach(appliance_config::adapter_ip(&cfg), trace, cfg.connectx_emu_device) } else { adapter::attach(appliance_config::adapter_ip(&cfg), cfg.connectx, trace) };
    let adapter = match (role, adapter) {
        (Role::None, Ok(a)) => {
            a.shutdown("no NVMe-oF role on the command line");
            None
        }
        (Role::None, Err(_)) => None,
        (_, Ok(a)) => Some(a),
        (r, Err(why)) => {
            log::error!("appliance: NVMe-oF {}: {why}; cannot run without a ConnectX adapter", if r == Role::Target { "target" } else { "initiator" });
            end(&mut storage, false);
        }
    };
    let s = *kernel::STATS.lock();
    let ticks = kernel::time::rdtsc().wrapping_sub(boot::first_tsc());
    log::info!(
        "ready: boot {} us ({ticks} TSC ticks, of which {} in TSC calibration), {} x 2MiB pages mapped, {} PCI functions, {} CPUs, {} MiB RAM",
        kernel::time::ticks_to_ns(ticks) / 1000,
        kernel::time::calibration_ticks(),
        s.pages_2m_mapped,
        s.pci_functions,
        s.cpus,
        s.ram_bytes >> 20
    );
    match (target, adapter) {
        (Some(t), Some(a)) => {
            // serve() returns when nvmet.serve-ctrls= was met or the service could not start;
            // either way it shut the adapter down.
            if let Err(why) = nvmf::serve(a, t, cfg.serve_ctrls, &cfg.mgmt, &mut storage) {
                log::error!("appliance: NVMe-oF target: {why}");
                end(&mut storage, false);
            }
        }
        (None, Some(a)) => {
            // initiate() shuts the adapter down when the role ends, success or not.
            if !nvmf::initiate(a, &cfg.nvmeof, cfg.roce_mtu, nvmeof::cmdline::VerifySpec { count: cfg.verify, threads: cfg.verify_threads }) {
                log::error!("appliance: NVMe-oF initiator failed");
                end(&mut storage, false);
            }
        }
        _ => {}
    }
    end(&mut storage, true);
}

/// Raise `test.fault` on `cpu` (a job posted to an application processor, which the boot CPU
/// waits for). Returns only if no fault ended the run, after saying so.
fn fault_on(f: kernel::fault::Fault, cpu: kernel::percpu::CpuId) {
    if cpu == kernel::percpu::CpuId::BOOT {
        kernel::fault::trigger(f);
    } else {
        if let Err(e) = kernel::smp::post(cpu, alloc::boxed::Box::new(move || kernel::fault::trigger(f))) {
            log::error!("appliance: test.fault-cpu: {e}");
            return;
        }
        // The faulting CPU stops this one; waiting past the timeout means it did not fault.
        kernel::smp::wait_idle(cpu, 5_000_000_000);
    }
    log::error!("appliance: test.fault={f:?} did not fault on cpu {cpu}");
}

/// The end path once storage is attached: the NVMe normal-shutdown notification to every local
/// controller (so each flushes its volatile cache and metadata), then the exit `exit=` asks
/// for. A failed shutdown turns a success into a failure. The ConnectX adapter is shut down
/// before this by whoever ends its role (`nvmf::initiate`, `nvmf::serve`, or `main` when there
/// is no role).
fn end(storage: &mut storage::Storage, ok: bool) -> ! {
    let failed = storage.shutdown();
    if failed > 0 {
        log::error!("appliance: {failed} NVMe controller(s) did not complete the normal shutdown");
    }
    if ok && failed == 0 {
        kernel::exit::success()
    } else {
        kernel::exit::fail()
    }
}
