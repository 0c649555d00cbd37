//! options: the appliance's typed configuration, filled from the kernel command line through
//! [`OPTIONS`]: one table entry per option (name, help, setter). To add an option (e.g. the
//! NVMe part's `ns=...`, the NVMe-oF part's `nvmf.*`), add a field to [`Config`] and an
//! entry to [`OPTIONS`]. Rule: an unknown option or a bad value stops the image with a
//! failure status after printing an error that names the option (see kernel::cmdline).
use kernel::cmdline::Opt;
use kernel::exit::EndAction;
use kernel::fault::Fault;

/// Parse `BB:DD.F` (hexadecimal bus, device < 32, function < 8).
pub fn parse_bdf(s: &str) -> Option<(u8, u8, u8)> {
    let (b, rest) = s.split_once(':')?;
    let (d, f) = rest.split_once('.')?;
    let hex = |x: &str, max: u8| (!x.is_empty() && x.len() <= 2).then(|| u8::from_str_radix(x, 16).ok()).flatten().filter(|v| *v <= max);
    Some((hex(b, 0xff)?, hex(d, 31)?, hex(f, 7)?))
}

/// Everything the command line can set.
#[derive(Debug, Clone)]
pub struct Config {
    /// `exit=qemu|halt|reboot`: what happens when the run ends (default qemu: isa-debug-exit, then halt).
    pub exit: EndAction,
    /// `log=error|warn|info|debug|trace` (default info).
    pub log: log::LevelFilter,
    /// `test.fault=pagefault|ud|gpf|panic`: raise this exception (or panic) after start-up (tests).
    pub fault: Option<Fault>,
    /// `test.fault-cpu=N`: the CPU that raises `test.fault` (default 0, the boot CPU).
    pub fault_cpu: u32,
    /// `cpus=N`: run on at most N CPUs, the boot CPU included (default: every CPU the MADT
    /// lists; 1 = the boot CPU only, the others left parked).
    pub cpus: Option<usize>,
    /// `test.hal`: run the platform self-test (DMA, clock, BAR mappings) before "ready".
    pub selftest: bool,
    /// `test.clock=pmtimer`: re-measure the TSC against the ACPI PM timer and use that figure.
    pub pm_timer: bool,
    /// `ns=` and `nvme.selftest=`: see [`crate::storage`].
    pub storage: crate::storage::StorageConfig,
    /// `ip=A.B.C.D`: the ConnectX adapter's IPv4 address (RoCEv2 GID 0). Without it the
    /// address of `nvmet.listen=` is used; with neither, adapters are listed but not brought up.
    pub ip: Option<[u8; 4]>,
    /// `connectx=BB:DD.F`: which ConnectX function to bring up (default: the first that comes up).
    pub connectx: Option<(u8, u8, u8)>,
    /// `connectx.emu=ivshmem`: use the ivshmem device (1af4:1110) as the ConnectX, its BAR2
    /// standing for BAR0, served by the host's emulated adapter (emu/pci-shim); see the image's `emu` module.
    pub connectx_emu: bool,
    /// `connectx.emu=ivshmem,device=XXXX`: the 15b3 device ID the emulated function stands for
    /// (the ivshmem device hides it); the driver takes the VF flag from it as for a real function.
    pub connectx_emu_device: Option<u16>,
    /// `roce.mtu=256|512|1024|2048|4096`: the RoCE path MTU the CM offers (default 1024, right
    /// for a 1500-byte Ethernet MTU; 4096 needs jumbo frames end to end).
    pub roce_mtu: u32,
    /// `mlx5.trace=1|full`: the mlx5 driver's firmware command trace (one `mlx5_cmd:` line per
    /// command; `full` adds the hex of inputs and outputs), see mlx5::trace.
    /// None: not given (off, except under `selftest=connectx`, which traces by default).
    pub mlx5_trace: Option<mlx5::TraceMode>,
    /// `selftest=connectx`: the hardware validation kit (the image's `validate` module) instead of a role.
    pub selftest_connectx: bool,
    /// `nvmet.listen=`, `nvmet.subsys=`, `nvmf.connect=`, `nvmf.bench=`: the NVMe-oF role, in
    /// apps/nvmeof's grammar (see nvmeof::cmdline); checked as a whole by [`crate::check`].
    pub nvmeof: nvmeof::cmdline::NvmeofArgs,
    /// `nvmet.serve-ctrls=N`: the target ends (adapter shut down, success) once N controllers
    /// (discovery ones included) were created and every one is gone again; 0 = serve forever.
    pub serve_ctrls: u64,
    /// `nvmf.verify=N`: before the bench the initiator reads the discovery log (the subsystem
    /// must be listed) and runs N verified random I/Os; 0 = neither.
    pub verify: u64,
    /// `nvmf.verify=N,threads=on`: the N verified I/Os split over the I/O queues, each on an
    /// application processor of its own.
    pub verify_threads: bool,
    /// `mgmt=on|off`, `mgmt.listen=[IP:]PORT`, `mgmt.prefix=N`, `mgmt.control=on|off`: the
    /// management plane (ping, `http://IP:9100/metrics`, status page `/`, the port's subsystem
    /// links) on the target's adapter; on by default, changes (`mgmt.control`) off.
    pub mgmt: mgmt::MgmtConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self { exit: EndAction::Qemu, log: log::LevelFilter::Info, fault: None, fault_cpu: 0, cpus: None, selftest: false, pm_timer: false, storage: Default::default(), ip: None, connectx: None, connectx_emu: false, connectx_emu_device: None, roce_mtu: 1024, mlx5_trace: None, selftest_connectx: false, nvmeof: Default::default(), serve_ctrls: 0, verify: 0, verify_threads: false, mgmt: mgmt::MgmtConfig::default() }
    }
}

/// Parse one NVMe-oF word (`key=value`) with apps/nvmeof's grammar and merge it into `c`.
/// The grammar's parser reads whole command lines; one word at a time keeps the kernel's
/// rule (the error names this option and value). Checks across words are redone here.
fn nvmeof_word(c: &mut Config, key: &str, v: &str) -> Result<(), &'static str> {
    let word = alloc::format!("{key}={v}");
    let a = nvmeof::cmdline::parse(&word).map_err(|e| e.why)?;
    let n = &mut c.nvmeof;
    if a.listen.is_some() {
        if n.listen.is_some() {
            return Err("given twice");
        }
        n.listen = a.listen;
    }
    for s in a.subsystems {
        if n.subsystems.iter().any(|o| o.nqn == s.nqn) {
            return Err("duplicate subsystem NQN");
        }
        n.subsystems.push(s);
    }
    if a.connect.is_some() {
        if n.connect.is_some() {
            return Err("given twice");
        }
        n.connect = a.connect;
    }
    if a.bench.is_some() {
        if n.bench.is_some() {
            return Err("given twice");
        }
        n.bench = a.bench;
    }
    if a.poll_groups.is_some() {
        if n.poll_groups.is_some() {
            return Err("given twice");
        }
        n.poll_groups = a.poll_groups;
    }
    nvmeof::cmdline::bounds::merge(&mut n.bounds, &a.bounds)
}

/// The option entry of a bound word (`nvmet.kato-min=`, `cm.max-conns=`, ...), whose range and
/// field live in `nvmeof::cmdline::bounds::WORDS` (every row has an entry: checked below).
macro_rules! bound_opt {
    ($name:literal) => {
        Opt { name: $name, help: "bound on what a peer may pin: see the README word table (nvmeof::cmdline::bounds)", set: |c, v| nvmeof_word(c, $name, v) }
    };
}

const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

// Every bound word of the grammar has its option entry.
const _: () = {
    let words = nvmeof::cmdline::bounds::WORDS;
    let mut i = 0;
    while i < words.len() {
        let mut j = 0;
        while j < OPTIONS.len() && !same(words[i].name, OPTIONS[j].name) {
            j += 1;
        }
        assert!(j < OPTIONS.len(), "a bound word of nvmeof::cmdline::bounds has no option entry");
        i += 1;
    }
};

/// The option table.
pub const OPTIONS: &[Opt<Config>] = &[
    Opt { name: "mgmt", help: "on|off: the management plane (ping, /metrics, status page) on the target's adapter (default on)", set: |c, v| mgmt::config::apply(&mut c.mgmt, "mgmt", v) },
    Opt { name: "mgmt.listen", help: "[A.B.C.D:]PORT: address (default the adapter's) and TCP port (default 9100) of /metrics and /", set: |c, v| mgmt::config::apply(&mut c.mgmt, "mgmt.listen", v) },
    Opt { name: "mgmt.prefix", help: "N: prefix length of the management subnet (default 24)", set: |c, v| mgmt::config::apply(&mut c.mgmt, "mgmt.prefix", v) },
    Opt { name: "mgmt.control", help: "on|off: also serve PUT/DELETE /ports/P/subsystems/NQN (link/unlink a subsystem; no authentication: keep the subnet private) (default off)", set: |c, v| mgmt::config::apply(&mut c.mgmt, "mgmt.control", v) },
    Opt {
        name: "ip",
        help: "A.B.C.D: the ConnectX adapter's IPv4 address (default: the nvmet.listen address)",
        set: |c, v| {
            match nvmeof::cmdline::parse_addr(v) {
                Some((a, 4420)) if !v.contains(':') && a != [0; 4] => c.ip = Some(a),
                _ => return Err("expected A.B.C.D (not 0.0.0.0, no port)"),
            }
            Ok(())
        },
    },
    Opt {
        name: "connectx",
        help: "BB:DD.F: the ConnectX PCI function to bring up (default: the first one that comes up)",
        set: |c, v| {
            c.connectx = Some(parse_bdf(v).ok_or("expected BB:DD.F (hexadecimal PCI address)")?);
            Ok(())
        },
    },
    Opt {
        name: "connectx.emu",
        help: "ivshmem[,device=XXXX]: the ConnectX is the host's emulated adapter behind an ivshmem device (BAR2 = BAR0; QEMU guest RAM shared with emu/pci-shim); device= the 15b3 device ID it stands for (a VF ID makes the driver skip PF-only steps)",
        set: |c, v| {
            let (kind, device) = match v.split_once(",device=") {
                Some((k, d)) => (k, Some(u16::from_str_radix(d, 16).map_err(|_| "device=: expected a hexadecimal 15b3 device ID")?)),
                None => (v, None),
            };
            if kind != "ivshmem" {
                return Err("expected ivshmem[,device=XXXX]");
            }
            c.connectx_emu = true;
            c.connectx_emu_device = device;
            Ok(())
        },
    },
    Opt {
        name: "roce.mtu",
        help: "RoCE path MTU the CM offers: 256 | 512 | 1024 | 2048 | 4096 (default 1024; 4096 needs jumbo frames)",
        set: |c, v| {
            c.roce_mtu = match v {
                "256" => 256,
                "512" => 512,
                "1024" => 1024,
                "2048" => 2048,
                "4096" => 4096,
                _ => return Err("expected 256, 512, 1024, 2048 or 4096"),
            };
            Ok(())
        },
    },
    Opt {
        name: "mlx5.trace",
        help: "1 | full: trace every ConnectX firmware command (Linux mlx5_cmd tracepoint format; full adds the hex of inputs/outputs)",
        set: |c, v| {
            c.mlx5_trace = match mlx5::TraceMode::parse(v) {
                Some(m) => Some(m),
                None => return Err("expected 0, 1 or full"),
            };
            Ok(())
        },
    },
    Opt {
        name: "selftest",
        help: "connectx: validate the ConnectX: bring-up, capabilities, command trace, verified RC traffic over local loopback, link/MTU/GID, shutdown reclaiming every page; exit status = verdict",
        set: |c, v| {
            if v != "connectx" {
                return Err("expected connectx");
            }
            c.selftest_connectx = true;
            Ok(())
        },
    },
    Opt {
        name: "nvmet.listen",
        help: "NVMe-oF target: A.B.C.D[:PORT] to listen on (port 4420 by default)",
        set: |c, v| nvmeof_word(c, "nvmet.listen", v),
    },
    Opt {
        name: "nvmet.subsys",
        help: "NVMe-oF target subsystem (repeatable): NQN,ns=ram:SIZE|null:SIZE|nvme:NSID,...,[bs=BYTES (512..65536, for the ram/null ns= after it),]host=HOSTNQN,...|allow_any",
        set: |c, v| nvmeof_word(c, "nvmet.subsys", v),
    },
    Opt {
        name: "nvmet.poll_groups",
        help: "NVMe-oF target: N (1..64): queues spread round-robin over N poll groups, each with one CQ and one SRQ (default 1)",
        set: |c, v| nvmeof_word(c, "nvmet.poll_groups", v),
    },
    Opt {
        name: "nvmf.connect",
        help: "NVMe-oF initiator: A.B.C.D[:PORT],nqn=NQN[,hostnqn=NQN][,queues=N][,qd=N][,kato=MS]",
        set: |c, v| nvmeof_word(c, "nvmf.connect", v),
    },
    Opt {
        name: "nvmf.bench",
        help: "NVMe-oF initiator benchmark: randread|randwrite|read|write|randrw,bs=N,qd=N,time=N(ms|s)[,read=PCT][,ios=N][,seed=N]",
        set: |c, v| nvmeof_word(c, "nvmf.bench", v),
    },
    Opt {
        name: "nvmet.serve-ctrls",
        help: "NVMe-oF target: N: end (adapter shut down, success) once N controllers, discovery ones included, came and went (default 0: serve forever)",
        set: |c, v| {
            c.serve_ctrls = v.parse().map_err(|_| "expected a count (0 = serve forever)")?;
            Ok(())
        },
    },
    Opt {
        name: "nvmf.verify",
        help: "NVMe-oF initiator: N[,threads=on]: read the discovery log (the nqn must be listed), then N verified random I/Os before nvmf.bench (default 0: neither); threads=on: split over the I/O queues, each on an application processor of its own",
        set: |c, v| {
            let s = nvmeof::cmdline::parse_verify(v)?;
            (c.verify, c.verify_threads) = (s.count, s.threads);
            Ok(())
        },
    },
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
        name: "cpus",
        help: "N: run on at most N CPUs, the boot CPU included (default: all the MADT lists; 1 = boot CPU only)",
        set: |c, v| {
            match kernel::cmdline::parse_u64(v) {
                Some(n @ 1..=4096) => c.cpus = Some(n as usize),
                _ => return Err("expected a count of CPUs from 1"),
            }
            Ok(())
        },
    },
    Opt {
        name: "test.fault",
        help: "raise an exception or panic after start-up: pagefault | ud | gpf | panic",
        set: |c, v| {
            c.fault = Some(Fault::parse(v).ok_or("expected pagefault, ud, gpf or panic")?);
            Ok(())
        },
    },
    Opt {
        name: "test.fault-cpu",
        help: "N: the CPU that raises test.fault (default 0, the boot CPU)",
        set: |c, v| {
            c.fault_cpu = kernel::cmdline::parse_u64(v).and_then(|n| u32::try_from(n).ok()).ok_or("expected a CPU number")?;
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
    bound_opt!("nvmet.connect-deadline"),
    bound_opt!("nvmet.kato-min"),
    bound_opt!("nvmet.kato-max"),
    bound_opt!("nvmet.max-ctrls-per-host"),
    bound_opt!("nvmet.max-unadmitted-per-source"),
    bound_opt!("nvmet.max-unadmitted"),
    bound_opt!("cm.max-conns"),
    bound_opt!("cm.max-conns-per-source"),
    bound_opt!("cm.req-rate"),
    bound_opt!("cm.req-burst"),
    bound_opt!("cm.unrouted-reqs"),
    bound_opt!("cm.unrouted-wait"),
    bound_opt!("cm.rnr-retry-max"),
    bound_opt!("cm.ack-timeout-min"),
    bound_opt!("cm.ack-timeout-max"),
    bound_opt!("cm.response-timeout-max"),
    bound_opt!("cm.retries-max"),
    bound_opt!("cm.service-timeout-max"),
];
