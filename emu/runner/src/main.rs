//! emu-runner binary: one appliance node (driver + emulated ConnectX + app) whose port is a
//! Unix datagram socket (one Ethernet frame per datagram, what QEMU `-netdev dgram` speaks).
//!
//! emu-runner --ip 10.77.0.1 --mac 52:54:00:77:00:01 --sock-local A --sock-remote B \
//!            --app rping-server|rping-client [--peer-ip IP] [--port 7174] [--count N] \
//!            [--size S] [--no-verify] [--timeout SECONDS]
//! emu-runner ... --app nvmf-target --nvmf "nvmet.subsys=NQN,ns=ram:64M,host=HOSTNQN" \
//!            [--port 4420] [--timeout SECONDS] [--stop-file PATH] [--serve-ctrls N]
//!            [--drop-after-writes N]
//!            (--serve-ctrls N: end with PASS once N controllers were created and all are gone;
//!             --spin: the target never naps when idle, for latency figures;
//!             --drop-after-writes N: a test hook: once N writes were served, close every
//!             connection and listen again, the namespaces kept, as a port taken away and
//!             given back)
//! emu-runner ... --app nvmf-initiator --nvmf "nvmf.connect=IP[:PORT],nqn=NQN[,qd=N,queues=N] \
//!            [nvmf.verify=N[,threads=on]] [nvmf.bench=randread,bs=4096,qd=1,time=5s]" [--count N] [--seed N]
//!            [--bench-json PATH] (`nvmf.verify=`'s N, if given, replaces `--count`)
//!            (the bench's fio JSON (json+ shape) into PATH instead of stdout; on a terminal a
//!             progress line every second)
//! The `--nvmf` words are the appliance image's kernel command line words (nvmeof::cmdline).
//! --mgmt "WORDS": (nvmf-target) also run the management stack (mgmt::config words, e.g.
//!            `mgmt.listen=9100`, or `on`): ping, http://IP:PORT/metrics, / and /ports/P/subsystems on
//!            the node's port (`mgmt.control=on`: PUT/DELETE of /ports/P/subsystems/NQN too).
//! --trace 1|full: the driver's firmware command trace on stderr (mlx5::trace: one
//!            `mlx5_cmd:` line per command; full adds the hex of inputs and outputs).
//! --profile NAME: the emulated adapter's device profile (emu_connectx::profile::NAMES:
//!            connectx4lx, connectx5 (default), connectx6dx, connectx7, connectx7-vf); `list` prints them.
//! Prints "RUNNER RESULT <app> PASS|FAIL ..." and exits 0 on PASS. Log level: RUNNER_LOG=debug|trace|warn.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use emu_connectx::SimClock;
use emu_runner::{parse_ip, parse_mac, profile_by_name, Node, Options};
use rdma::cm::CmConfig;

struct Args {
    ip: [u8; 4],
    mac: [u8; 6],
    sock_local: PathBuf,
    sock_remote: PathBuf,
    app: String,
    peer_ip: Option<[u8; 4]>,
    port: u16,
    count: u32,
    size: u32,
    verify: bool,
    timeout: u64,
    port_given: bool,
    nvmf: String,
    stop_file: Option<PathBuf>,
    bench_json: Option<PathBuf>,
    seed: u64,
    serve_ctrls: u64,
    drop_after_writes: u64,
    spin: bool,
    mgmt: Option<mgmt::MgmtConfig>,
    /// `--config FILE`: an nvmetcli-saved configuration, read before the node starts.
    config: Option<nvmeof::cmdline::NvmeofArgs>,
    opts: Options,
}

fn usage(msg: &str) -> ExitCode {
    eprintln!("emu-runner: {msg}");
    eprintln!("usage: emu-runner --ip A.B.C.D --mac XX:..:XX --sock-local PATH --sock-remote PATH --app rping-server|rping-client|nvmf-target|nvmf-initiator [--peer-ip IP] [--port N] [--count N] [--size N] [--no-verify] [--timeout S] [--nvmf \"WORDS\"] [--config NVMETCLI.json] [--stop-file PATH] [--serve-ctrls N] [--drop-after-writes N] [--spin] [--mgmt \"WORDS\"] [--seed N] [--bench-json PATH] [--trace 1|full] [--profile NAME|list]");
    ExitCode::from(2)
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        ip: [10, 77, 0, 1],
        mac: [0x52, 0x54, 0, 0x77, 0, 1],
        sock_local: PathBuf::new(),
        sock_remote: PathBuf::new(),
        app: String::new(),
        peer_ip: None,
        port: rping::DEFAULT_PORT,
        count: 300,
        size: 64,
        verify: true,
        timeout: 300,
        port_given: false,
        nvmf: String::new(),
        stop_file: None,
        bench_json: None,
        seed: 1,
        serve_ctrls: 0,
        drop_after_writes: 0,
        spin: false,
        mgmt: None,
        config: None,
        opts: Options::default(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        if k == "--no-verify" {
            a.verify = false;
            continue;
        }
        if k == "--spin" {
            a.spin = true;
            continue;
        }
        let v = it.next().ok_or_else(|| format!("{k} needs a value"))?;
        let bad = || format!("bad value for {k}: {v:?}");
        match k.as_str() {
            "--ip" => a.ip = parse_ip(&v).ok_or_else(bad)?,
            "--mac" => a.mac = parse_mac(&v).ok_or_else(bad)?,
            "--sock-local" => a.sock_local = v.into(),
            "--sock-remote" => a.sock_remote = v.into(),
            "--app" => a.app = v,
            "--peer-ip" => a.peer_ip = Some(parse_ip(&v).ok_or_else(bad)?),
            "--port" => {
                a.port = v.parse().map_err(|_| bad())?;
                a.port_given = true;
            }
            "--nvmf" => a.nvmf = v,
            "--config" => {
                let text = std::fs::read(&v).map_err(|e| format!("--config {v}: {e}"))?;
                a.config = Some(nvmeof::nvmetcli::parse(&text).map_err(|e| format!("--config {v}: {e}"))?);
            }
            "--mgmt" => a.mgmt = Some(mgmt::config::parse(&v)?),
            "--stop-file" => a.stop_file = Some(v.into()),
            "--bench-json" => a.bench_json = Some(v.into()),
            "--seed" => a.seed = v.parse().map_err(|_| bad())?,
            "--serve-ctrls" => a.serve_ctrls = v.parse().map_err(|_| bad())?,
            "--drop-after-writes" => a.drop_after_writes = v.parse().map_err(|_| bad())?,
            "--count" => a.count = v.parse().map_err(|_| bad())?,
            "--size" => a.size = v.parse().map_err(|_| bad())?,
            "--timeout" => a.timeout = v.parse().map_err(|_| bad())?,
            "--profile" => a.opts.profile = profile_by_name(&v)?,
            "--trace" => a.opts.trace = mlx5::TraceMode::parse(&v).ok_or_else(|| format!("--trace: expected 0, 1 or full, not {v:?}"))?,
            _ => return Err(format!("unknown option {k}")),
        }
    }
    if a.sock_local.as_os_str().is_empty() || a.sock_remote.as_os_str().is_empty() {
        return Err("--sock-local and --sock-remote are required".into());
    }
    Ok(a)
}

struct Logger;
impl log::Log for Logger {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::max_level()
    }
    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            eprintln!("[{}] {}", r.level(), r.args());
        }
    }
    fn flush(&self) {}
}
static LOGGER: Logger = Logger;

fn bind(a: &Args) -> Result<emu_roce::UnixDgramLink, ExitCode> {
    let _ = std::fs::remove_file(&a.sock_local);
    emu_roce::UnixDgramLink::new(&a.sock_local, &a.sock_remote).map_err(|e| {
        eprintln!("emu-runner: cannot bind {}: {e}", a.sock_local.display());
        ExitCode::from(2)
    })
}

fn run_nvmf(a: &Args) -> ExitCode {
    let link = match bind(a) {
        Ok(l) => l,
        Err(c) => return c,
    };
    let clock = SimClock::realtime();
    let mut node = match Node::with_options(clock, a.ip, a.mac, 0x1_0000_0000, Box::new(link), a.opts.clone()) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("emu-runner: adapter bring-up failed: {e:?}");
            return ExitCode::from(1);
        }
    };
    let (pf, d) = (&a.opts.profile, &node.v);
    let vf = mlx5::pci_id(pf.pci_vendor_id, pf.pci_device_id).is_some_and(|i| i.vf);
    println!("RUNNER adapter profile={} pci={:04x}:{:04x} vf={vf} firmware {} issi {}", pf.name, pf.pci_vendor_id, pf.pci_device_id, d.fw(), d.issi());
    let port = if a.port_given { a.port } else { 4420 };
    let r = if a.app == "nvmf-target" {
        emu_runner::nvmf::run_target(&mut node, &a.nvmf, a.ip, port, Duration::from_secs(a.timeout), a.stop_file.as_deref(), a.serve_ctrls, a.drop_after_writes, a.spin, a.mgmt, a.config.as_ref())
    } else {
        let t0 = Instant::now();
        let r = emu_runner::nvmf::run_initiator(&mut node, &a.nvmf, a.count as u64, a.seed, a.bench_json.as_deref());
        if r.is_ok() {
            println!("RUNNER RESULT nvmf-initiator PASS seconds={:.1}", t0.elapsed().as_secs_f64());
        }
        r
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            println!("RUNNER RESULT {} FAIL {e}", a.app);
            // Let the last CM replies leave.
            for _ in 0..1000 {
                node.poll();
                std::thread::sleep(Duration::from_micros(200));
            }
            ExitCode::from(1)
        }
    }
}

fn main() -> ExitCode {
    let level = match std::env::var("RUNNER_LOG").as_deref() {
        Ok("debug") => log::LevelFilter::Debug,
        Ok("trace") => log::LevelFilter::Trace,
        Ok("warn") => log::LevelFilter::Warn,
        _ => log::LevelFilter::Info,
    };
    let _ = log::set_logger(&LOGGER).map(|_| log::set_max_level(level));
    if std::env::args().skip(1).collect::<Vec<_>>().windows(2).any(|w| w[0] == "--profile" && w[1] == "list") {
        println!("{}", emu_connectx::profile::NAMES.join("\n"));
        return ExitCode::SUCCESS;
    }
    let a = match parse() {
        Ok(a) => a,
        Err(e) => return usage(&e),
    };
    let role = match a.app.as_str() {
        "rping-server" => rping::Role::Server { port: a.port },
        "rping-client" => match a.peer_ip {
            Some(ip) => rping::Role::Client { ip, port: a.port },
            None => return usage("rping-client needs --peer-ip"),
        },
        "nvmf-target" | "nvmf-initiator" => return run_nvmf(&a),
        other => return usage(&format!("unknown app {other:?}")),
    };
    let link = match bind(&a) {
        Ok(l) => l,
        Err(c) => return c,
    };
    let clock = SimClock::realtime();
    let mut node = match Node::with_options(clock.clone(), a.ip, a.mac, 0x1_0000_0000, Box::new(link), a.opts.clone()) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("emu-runner: adapter bring-up failed: {e:?}");
            return ExitCode::from(1);
        }
    };
    let cfg = rping::Config { role, count: a.count, size: a.size, verify: a.verify };
    let mut app = match rping::Rping::new(&mut node.v, CmConfig::default(), cfg) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("emu-runner: rping setup failed: {e:?}");
            return ExitCode::from(1);
        }
    };
    if matches!(role, rping::Role::Server { .. }) {
        println!("RUNNER listening rping port {}", a.port);
    }
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(a.timeout);
    let mut idle = 0u32;
    loop {
        let st = app.poll(&mut node.v, clock.now_ns());
        node.poll();
        match st {
            rping::Status::Running => {}
            rping::Status::Done { pings } => {
                let s = app.stats();
                println!(
                    "RUNNER RESULT {} PASS pings={pings} size={} verified={} read={} written={} seconds={:.1}",
                    a.app,
                    a.size,
                    s.verified,
                    s.bytes_read,
                    s.bytes_written,
                    t0.elapsed().as_secs_f64()
                );
                // Let the last CM replies (DREP) leave.
                for _ in 0..1000 {
                    node.poll();
                    std::thread::sleep(Duration::from_micros(200));
                }
                return ExitCode::SUCCESS;
            }
            rping::Status::Failed => {
                println!("RUNNER RESULT {} FAIL {:?} pings={}", a.app, app.error(), app.stats().pings);
                for _ in 0..1000 {
                    node.poll();
                    std::thread::sleep(Duration::from_micros(200));
                }
                return ExitCode::from(1);
            }
        }
        if Instant::now() > deadline {
            println!("RUNNER RESULT {} FAIL timeout pings={}", a.app, app.stats().pings);
            return ExitCode::from(1);
        }
        // Don't spin a shared core flat out: nap a little every few hundred turns.
        idle += 1;
        if idle % 256 == 0 {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}
