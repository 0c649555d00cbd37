//! The appliance's typed configuration, filled from the kernel command line through
//! [`OPTIONS`]: one table entry per option (name, help, setter). To add an option (e.g. the
//! NVMe part's `ns=...`, the NVMe-oF part's `nvmf.*`), add a field to [`Config`] and an
//! entry to [`OPTIONS`]. Rule: an unknown option or a bad value stops the image with a
//! failure status after printing an error that names the option (see kernel::cmdline).
use kernel::cmdline::Opt;
use kernel::exit::EndAction;
use kernel::fault::Fault;

/// Everything the command line can set.
#[derive(Debug, Clone)]
pub struct Config {
    /// `exit=qemu|halt|reboot`: what happens when the run ends (default qemu: isa-debug-exit, then halt).
    pub exit: EndAction,
    /// `log=error|warn|info|debug|trace` (default info).
    pub log: log::LevelFilter,
    /// `test.fault=pagefault|ud|gpf`: raise this exception after start-up (tests).
    pub fault: Option<Fault>,
    /// `test.hal`: run the platform self-test (DMA, clock, BAR mappings) before "ready".
    pub selftest: bool,
    /// `test.clock=pmtimer`: re-measure the TSC against the ACPI PM timer and use that figure.
    pub pm_timer: bool,
    /// `ns=` and `nvme.selftest=`: see [`crate::storage`].
    pub storage: crate::storage::StorageConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self { exit: EndAction::Qemu, log: log::LevelFilter::Info, fault: None, selftest: false, pm_timer: false, storage: Default::default() }
    }
}

/// The option table.
pub const OPTIONS: &[Opt<Config>] = &[
    Opt {
        name: "ns",
        help: "namespaces served: comma list of nvme<C>n<NSID> | ram:<MiB> | null:<MiB> (default: every NVMe namespace)",
        set: |c, v| crate::storage::parse_ns(&mut c.storage, v),
    },
    Opt {
        name: "nvme.selftest",
        help: "NVMe tests: comma list of pattern:<seed> | write:<seed> | verify:<seed> | bad | bench",
        set: |c, v| crate::storage::parse_tests(&mut c.storage, v),
    },
    Opt {
        name: "exit",
        help: "end action: qemu (isa-debug-exit, then halt) | halt | reboot",
        set: |c, v| {
            c.exit = EndAction::parse(v).ok_or("expected qemu, halt or reboot")?;
            Ok(())
        },
    },
    Opt {
        name: "log",
        help: "log level: error | warn | info | debug | trace",
        set: |c, v| {
            c.log = match v {
                "error" => log::LevelFilter::Error,
                "warn" => log::LevelFilter::Warn,
                "info" => log::LevelFilter::Info,
                "debug" => log::LevelFilter::Debug,
                "trace" => log::LevelFilter::Trace,
                _ => return Err("expected error, warn, info, debug or trace"),
            };
            Ok(())
        },
    },
    Opt {
        name: "test.fault",
        help: "raise an exception after start-up: pagefault | ud | gpf",
        set: |c, v| {
            c.fault = Some(Fault::parse(v).ok_or("expected pagefault, ud or gpf")?);
            Ok(())
        },
    },
    Opt {
        name: "test.clock",
        help: "pmtimer: re-measure the TSC against the ACPI PM timer",
        set: |c, v| {
            if v != "pmtimer" {
                return Err("expected pmtimer");
            }
            c.pm_timer = true;
            Ok(())
        },
    },
    Opt {
        name: "test.hal",
        help: "run the platform self-test (DMA, clock, BARs) before ready",
        set: |c, v| {
            if !v.is_empty() {
                return Err("takes no value");
            }
            c.selftest = true;
            Ok(())
        },
    },
];
