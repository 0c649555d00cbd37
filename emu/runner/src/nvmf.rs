//! The NVMe-oF application on a runner node: target (`TargetService` serving RAM/null
//! namespaces) or initiator (discover, connect, identify, verified I/O, optional bench), both
//! configured with the same words as the appliance image's kernel command line
//! (`nvmet.listen=`, `nvmet.subsys=`, `nvmf.connect=`, `nvmf.bench=`; see nvmeof::cmdline).

use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};
use std::path::Path;
use std::time::{Duration, Instant};

use blockdev::BlockDevice;
use emu_connectx::{SimClock, SimHal};
use nvmeof::cmdline::{build_target, NvmeofArgs};
use nvmeof::host::controllers::{Controllers, CtrlEvent, TargetAddr};
use nvmeof::host::{Host, HostConfig, HostEnv};
use nvmeof::host::LaneWork;
use nvmeof::verify::reconnecting::{LaneResult, Workload};
use nvmeof::host::cm_env::CmHostEnv;
use nvmeof::nvmet::service::TargetService;
use nvmeof::nvmet::{Core, PortConfig, TargetConfig};
use rdma::cm::{Cm, CmConfig};

use crate::Node;

/// A namespace the runner can serve: RAM or null (no local drives on a host runner).
pub type RunnerNs = blockdev::Backing<SimHal, blockdev::NoLocal>;

/// Monotonic nanoseconds of the host process (the runner's stand-in for the image's TSC).
fn host_clock_ns() -> u64 {
    static T0: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    T0.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Build the target's core from command-line words and, if given, an nvmetcli configuration
/// (`--config FILE`, [`nvmeof::nvmetcli`]); the listen address defaults to the node's.
pub fn build_core(node: &Node, words: &str, config: Option<&NvmeofArgs>, ip: [u8; 4], port: u16) -> Result<(Core<RunnerNs>, u16), String> {
    let mut args: NvmeofArgs = nvmeof::cmdline::parse(words).map_err(|e| format!("{}: {}", e.word, e.why))?;
    if let Some(c) = config {
        nvmeof::nvmetcli::apply(&mut args, c.clone()).map_err(|e| format!("--config: {e}"))?;
    }
    if args.subsystems.is_empty() {
        return Err("no subsystem: give nvmet.subsys=NQN,ns=ram:SIZE,host=HOSTNQN|allow_any or --config FILE.json".into());
    }
    let listen = *args.listen.get_or_insert((ip, port));
    if listen.0 != ip {
        return Err(format!("nvmet.listen address {:?} is not this node's {:?}", listen.0, ip));
    }
    let mut base = TargetConfig { ports: vec![PortConfig { portid: 1, traddr: listen.0, trsvcid: listen.1, subsystems: None }], ..TargetConfig::default() };
    // Controller IDs a peer cannot predict (the image uses the TSC).
    base.limits.cntlid_seed ^= std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let hal = node.hal.clone();
    let (cfg, subs) = build_target(&args, base, |spec| RunnerNs::build(spec, hal.clone(), |_, _| Err("local NVMe namespaces exist only in the image")))
    .map_err(|e| format!("{}: {}", e.word, e.why))?;
    for s in &subs {
        let hosts = if s.allow_any_host { "any host".to_string() } else { s.hosts.join(" ") };
        for n in &s.namespaces {
            println!("RUNNER subsystem {} nsid {} blocks {} x {} B, hosts: {hosts}", s.nqn, n.nsid, n.dev.num_blocks(), n.dev.block_size());
        }
    }
    let mut core = Core::new(cfg, subs).map_err(|e| e.to_string())?;
    core.auth.seed(os_seed());
    Ok((core, listen.1))
}

/// The CM settings for `words`: the defaults with the `cm.*` bound words applied.
pub fn cm_config(words: &str) -> Result<CmConfig, String> {
    let args = nvmeof::cmdline::parse(words).map_err(|e| format!("{}: {}", e.word, e.why))?;
    nvmeof::cmdline::bounds::cm_config(&args.bounds, CmConfig::default()).map_err(|e| format!("{}: {}", e.word, e.why))
}

/// The `nvmet.poll_groups=N` word (1 if absent).
pub fn poll_groups(words: &str) -> Result<usize, String> {
    let args = nvmeof::cmdline::parse(words).map_err(|e| format!("{}: {}", e.word, e.why))?;
    Ok(args.poll_groups.unwrap_or(1))
}

/// Serve until `timeout` passes, `stop_file` appears, or (with `serve_ctrls` > 0) that many
/// controllers have been created and every one is gone again; prints the counters at the end.
/// `drop_after_writes` > 0 (a test hook): once that many writes were served, every connection
/// is closed and the port listened on again, namespaces kept (a target taken away and back).
/// `spin`: never sleep (lowest latency; takes a whole core). With `mgmt` the management stack
/// runs in the same loop (a bounded budget per turn): ping, `/metrics`, `/`.
#[allow(clippy::too_many_arguments)]
pub fn run_target(
    node: &mut Node,
    words: &str,
    ip: [u8; 4],
    port: u16,
    timeout: Duration,
    stop_file: Option<&Path>,
    serve_ctrls: u64,
    drop_after_writes: u64,
    spin: bool,
    mgmt: Option<mgmt::MgmtConfig>,
    config: Option<&NvmeofArgs>,
) -> Result<(), String> {
    let (core, port) = build_core(node, words, config, ip, port)?;
    let clock = node.clock.clone();
    let mut svc = TargetService::with_cm_config(&mut node.v, core, 64, port, cm_config(words)?).map_err(|e| format!("listen: {e:?}"))?;
    svc.target.set_turnaround_clock(host_clock_ns);
    svc.target.core.set_device_clock(host_clock_ns);
    svc.target.set_poll_groups(poll_groups(words)?);
    println!("RUNNER listening nvmf port {port}");
    println!("RUNNER poll groups {}", svc.target.poll_groups());
    let t0 = Instant::now();
    let mut mg = mgmt.filter(|c| c.enabled).map(|c| {
        node.v.enable_mgmt_frames(16, c.ip.unwrap_or(ip) == ip);
        let seed = u64::from_le_bytes(os_seed()[..8].try_into().unwrap_or_default());
        let m = mgmt::Mgmt::new(&c, ip, rdma::Neighbours::local_mac(&node.v), mlx5::MAX_FRAME, mgmt::Budget::default(), seed, host_clock_ns());
        let a = m.ip();
        println!("RUNNER listening mgmt {}.{}.{}.{} port {}", a[0], a[1], a[2], a[3], m.port());
        m
    });
    let mut turns = 0u64;
    let mut dropped = false;
    let mut next_check = Instant::now();
    loop {
        let mut n = svc.poll(&mut node.v, clock.now_ns());
        node.poll();
        if let Some(m) = mg.as_mut() {
            n += serve_mgmt(m, node, &mut svc, t0);
        }
        turns += 1;
        // Nap a little when idle so a shared core stays usable, unless asked to spin (benchmarks).
        if !spin && n == 0 && turns % 256 == 0 {
            std::thread::sleep(Duration::from_micros(50));
        }
        if Instant::now() >= next_check {
            next_check = Instant::now() + Duration::from_millis(100);
            if stop_file.is_some_and(|p| p.exists()) {
                break;
            }
            if drop_after_writes > 0 && svc.target.core_stats().writes >= drop_after_writes && !dropped {
                dropped = true;
                svc.close_all(&mut node.v);
                svc.cm.listen(port).map_err(|e| format!("listen again: {e:?}"))?;
                println!("RUNNER dropped every connection after {} writes (--drop-after-writes), listening again", svc.target.core_stats().writes);
            }
            if t0.elapsed() > timeout {
                if serve_ctrls > 0 {
                    svc.report();
                    return Err(format!("timeout: {} of {serve_ctrls} controllers served", svc.target.core_stats().ctrls_freed));
                }
                break;
            }
            let c = svc.target.core_stats();
            if serve_ctrls > 0 && c.ctrls_created >= serve_ctrls && svc.target.core.live_ctrls() == 0 && svc.connections() == 0 {
                break;
            }
        }
    }
    svc.close_all(&mut node.v);
    for _ in 0..2000 {
        svc.poll(&mut node.v, clock.now_ns());
        node.poll();
        std::thread::sleep(Duration::from_micros(100));
    }
    // The service's counters (errors by status included) on stderr, as after a timeout.
    svc.report();
    neighbour_report(&node.v);
    let mut rep = String::new();
    let _ = svc.target.turnaround().write_report(&mut rep, "target turnaround, receive CQE seen -> response posted (host clock)");
    print!("{rep}");
    let s = svc.stats;
    let t = svc.target.stats();
    let c = svc.target.core_stats();
    let a = svc.target.core.auth.stats;
    println!(
        "RUNNER RESULT nvmf-target PASS requests={} accepted={} rejected={} closed_by_peer={} closed_by_target={} ctrls_created={} ctrls_freed={} connects_refused={} commands={} errors={} reads={} writes={} bad_capsules={} wc_errors={} auth_required={} auth_ok={} auth_failed={} auth_refused_cmds={} cm_refused={} seconds={:.1}",
        s.requests, s.accepted, s.rejected, s.closed_by_peer, s.closed_by_target, c.ctrls_created, c.ctrls_freed, c.connects_refused, c.commands, c.errors, c.reads, c.writes, t.bad_capsules, t.wc_errors,
        a.required, a.succeeded, a.failed, a.refused_cmds,
        {
            let m = svc.cm.stats();
            m.refused_rate + m.refused_per_source + m.refused_table_full
        },
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// One bounded turn of the management stack; pages read the target and the adapter, and with
/// `mgmt.control=on` link and unlink its subsystems (`mgmt::report::port_links`).
pub fn serve_mgmt(m: &mut mgmt::Mgmt, node: &mut Node, svc: &mut TargetService<crate::Verbs, RunnerNs>, t0: Instant) -> usize {
    let rx = m.take_frames(&mut node.v);
    let (stats, open) = (m.stats(), m.open_connections());
    let v = &mut node.v;
    m.run(host_clock_ns(), &mut |page, w| match page {
        mgmt::Page::Metrics => {
            // The adapter's queue counters are read (one firmware command) only for a page.
            if let Err(e) = v.refresh_queue_counters() {
                log::warn!("runner: queue counters: {e}");
            }
            let mut e = mgmt::prom::Exposition::new(w);
            e.single("appliance_uptime_seconds", mgmt::prom::Kind::Gauge, "Seconds since the node started serving.", t0.elapsed().as_secs());
            mgmt::report::target_metrics(&mut e, svc);
            mgmt::report::adapter_metrics(&mut e, v, svc.target.group_objects());
            mgmt::report::mgmt_metrics(&mut e, &stats, open);
            e.error.map_or(Ok(mgmt::Answer::Found), Err)
        }
        mgmt::Page::Status => mgmt::report::status_page(w, "emu-runner NVMe-oF target", t0.elapsed().as_secs(), v, svc).map(|()| mgmt::Answer::Found),
        mgmt::Page::Links { .. } | mgmt::Page::Link { .. } => mgmt::report::port_links(w, page, v, svc),
    });
    rx + m.give_frames(&mut node.v)
}

/// Initiator: discover, connect, identify, `count` verified I/Os at the connect's queue depth,
/// then the bench if `nvmf.bench=` was given: its report on stdout, and fio's JSON into
/// `bench_json` (or on stdout between `nvmeof::fio_json` markers). Returns the failure reason.
pub fn run_initiator(node: &mut Node, words: &str, count: u64, seed: u64, bench_json: Option<&Path>) -> Result<(), String> {
    let args = nvmeof::cmdline::parse(words).map_err(|e| format!("{}: {}", e.word, e.why))?;
    let c = args.connect.clone().ok_or("no nvmf.connect=A.B.C.D[:PORT],nqn=NQN[,hostnqn=..][,queues=N][,qd=N][,kato=MS]")?;
    let clock = node.clock.clone();
    let clk = clock.clone();
    let cx = node.cx.clone();
    let cm_cfg = nvmeof::cmdline::bounds::cm_config(&args.bounds, CmConfig::default()).map_err(|e| format!("{}: {}", e.word, e.why))?;
    let cm = Cm::new(&mut node.v, cm_cfg).map_err(|e| format!("cm: {e:?}"))?;
    let mut env = CmHostEnv::new(
        cm,
        c.addr,
        c.port,
        move || clk.now_ns(),
        move |v: &mut crate::Verbs| {
            rdma::Control::poll(v);
            cx.poll();
        },
    );
    let mut cfg = c.host_config();
    cfg.auth_seed = os_seed();
    let entries = Host::discover(&mut node.v, &mut env, cfg.clone()).map_err(|e| format!("discover: {e:?}"))?;
    for e in &entries {
        println!("RUNNER discovery entry subnqn={} traddr={} trsvcid={} subtype={}", e.subnqn, e.traddr, e.trsvcid, e.subtype);
    }
    if !entries.iter().any(|e| e.subnqn == c.nqn) {
        return Err(format!("discovery log has no entry for {}", c.nqn));
    }
    let r = initiate(node, &mut env, &args, cfg, count, seed, bench_json);
    // Let the DREQ/DREP exchange finish.
    let until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < until {
        nvmeof::host::HostEnv::idle(&mut env, &mut node.v);
        std::thread::sleep(Duration::from_micros(100));
    }
    r.map(|_| ())
}

/// What [`initiate`] saw: the verified workload, the bench (if `nvmf.bench=` was given) and
/// its controller's connects.
#[derive(Debug, Clone)]
pub struct InitiatorReport {
    pub lane: LaneResult,
    pub bench: Option<nvmeof::bench::BenchResult>,
    /// With `threads=on`: each I/O queue's own part of `bench`, by QID.
    pub bench_lanes: Vec<(u16, nvmeof::bench::BenchResult)>,
    /// With `nvmf.verify=N,threads=on`: each I/O queue's own part of the verified I/O, by QID.
    pub verify_lanes: Vec<(u16, nvmeof::verify::VerifyResult)>,
    pub connects: u64,
    pub failed_attempts: u64,
}

/// `args.connect`'s controller as the one controller of a
/// [`Controllers`](nvmeof::host::controllers::Controllers) set (as the image's initiator):
/// connect (the first failed attempt is the answer), identify, `count` verified I/Os that
/// survive a lost target (the set releases and reconnects the controller with backoff; the
/// workload resumes: `nvmeof::verify::reconnecting`), then the bench if `nvmf.bench=` was given
/// (on the same set: a target lost during it is reconnected and the bench goes on,
/// `nvmeof::bench::run::reconnecting`), then disconnect. `node`'s clock must be `env`'s: the
/// owner's, which `threads=on` lanes run on too (a bench's time over while the target is away
/// ends the run, `down_at_end`).
pub fn initiate<E: HostEnv<crate::Verbs>>(node: &mut Node, env: &mut E, args: &NvmeofArgs, cfg: HostConfig, count: u64, seed: u64, bench_json: Option<&Path>) -> Result<InitiatorReport, String> {
    let c = args.connect.as_ref().ok_or("no nvmf.connect=")?;
    let (v, clock) = (&mut node.v, node.clock.clone());
    let addr = TargetAddr { ip: c.addr, port: c.port };
    let mut set = Controllers::new(&cfg, &[(addr, c.nqn.as_str())]);
    set.connect_all(v, env).map_err(|e| format!("connect: {e:?}"))?;
    let host = set.ctrls[0].live().expect("connected");
    if let Some(ci) = &host.ctrl {
        println!("RUNNER controller cntlid={} subnqn={} mdts_bytes={} maxcmd={} ioccsz={} kas={} vs={:#x}", ci.cntlid, ci.subnqn, ci.mdts_bytes, ci.maxcmd, ci.ioccsz, ci.kas, ci.vs);
    }
    for n in &host.namespaces {
        println!("RUNNER namespace nsid={} blocks={} block_size={}", n.nsid, n.blocks, n.block_size);
    }
    let (nq, depth) = host.io_queues();
    println!("RUNNER io queues {nq} depth {depth}");
    let nsid = host.namespaces.first().ok_or("no namespace")?.nsid;
    // `nvmf.verify=` among the words: its count (instead of `count`), and maybe `threads=on`.
    let (count, threads) = args.verify.map_or((count, false), |s| (s.count, s.threads));
    let w = Workload { count, qd: c.qd as usize, max_blocks: 32, seed, stall_ns: VERIFY_STALL_NS };
    // Outages (released until live again), wall clock: the target's side of them is real time.
    let (mut down_since, mut outage, mut longest) = (None::<Instant>, Duration::ZERO, Duration::ZERO);
    let mut on = |e: &CtrlEvent<mlx5::Error>| {
        match e {
            CtrlEvent::AttemptFailed(e) => log::warn!("runner: reconnect attempt failed: {e:?}"),
            e => println!("RUNNER controller event {e:?}"),
        }
        match e {
            CtrlEvent::Released => {
                down_since.get_or_insert_with(Instant::now);
            }
            CtrlEvent::Live => {
                if let Some(t) = down_since.take() {
                    outage += t.elapsed();
                    longest = longest.max(t.elapsed());
                }
            }
            _ => {}
        }
    };
    let r = if threads {
        verify_on_threads(&mut set, v, env, &clock, &w, &mut on)
    } else {
        nvmeof::verify::reconnecting::run(&mut set, v, env, &w, |_, e| on(e)).map(|r| (r[0], Vec::new())).map_err(|e| format!("verified I/O: {e:?}"))
    };
    let (r, verify_lanes) = match r {
        Ok(r) => r,
        Err(e) => {
            let _ = set.disconnect(v, env);
            return Err(e);
        }
    };
    let vr = r.verify;
    println!("RUNNER verify writes={} reads={} blocks_verified={} mismatches={} errors={} first_error={:?}", vr.writes, vr.reads, vr.blocks_verified, vr.mismatches, vr.errors, vr.first_error);
    println!(
        "RUNNER reconnect releases={} lost_writes={} lost_reads={} after_reconnect={} connects={} failed_attempts={} outage_ms={} longest_outage_ms={}",
        r.releases,
        r.lost_writes,
        r.lost_reads,
        r.answered_after_reconnect,
        set.ctrls[0].connects,
        set.ctrls[0].failed_attempts,
        outage.as_millis(),
        longest.as_millis()
    );
    if vr.mismatches != 0 || vr.errors != 0 || vr.blocks_verified == 0 {
        let _ = set.disconnect(v, env);
        return Err("verified I/O failed".into());
    }
    let (mut bench_result, mut bench_lanes) = (None, Vec::new());
    if let Some(b) = &args.bench {
        match bench(&mut set, v, env, &clock, nsid, b, bench_json) {
            Ok((res, lanes)) => (bench_result, bench_lanes) = (Some(res), lanes),
            Err(e) => {
                let _ = set.disconnect(v, env);
                return Err(e);
            }
        }
    }
    let report = InitiatorReport { lane: r, bench: bench_result, bench_lanes, verify_lanes, connects: set.ctrls[0].connects, failed_attempts: set.ctrls[0].failed_attempts };
    set.disconnect(v, env).map_err(|(_, e)| format!("disconnect: {e:?}"))?;
    Ok(report)
}

/// `nvmf.bench=` on `nsid` of the set's controller (reconnected if its target is lost): the
/// report on stdout, a `RUNNER bench outages` line, fio's JSON into `bench_json` (or on stdout
/// between `nvmeof::fio_json` markers). I/O errors fail it; I/Os lost to an outage do not.
/// With `threads=on` ([`on_threads`]) also each queue's part, a `RUNNER bench lane` line each.
#[allow(clippy::type_complexity)]
fn bench<E: HostEnv<crate::Verbs>>(set: &mut Controllers<crate::Verbs>, v: &mut crate::Verbs, env: &mut E, clock: &SimClock, nsid: u32, b: &nvmeof::bench::BenchConfig, bench_json: Option<&Path>) -> Result<(nvmeof::bench::BenchResult, Vec<(u16, nvmeof::bench::BenchResult)>), String> {
    // On a terminal, a progress line rewritten in place every second.
    let tty = std::io::stdout().is_terminal();
    let mut progress = |p: &nvmeof::bench::BenchProgress| {
        if tty {
            print!("\r{p}\x1b[K");
            let _ = std::io::stdout().flush();
        }
    };
    let mut on = |e: &CtrlEvent<mlx5::Error>| match e {
        CtrlEvent::AttemptFailed(e) => log::warn!("runner: bench: reconnect attempt failed: {e:?}"),
        e => println!("RUNNER bench controller event {e:?}"),
    };
    let mut out = String::new();
    let (res, per_lane) = if b.threads {
        let lanes = on_threads(set, v, env, clock, nsid, b, &mut on)?;
        for (qid, r) in &lanes.per_lane {
            let _ = writeln!(out, "RUNNER bench lane qid={qid} ios={} errors={} iops={} p50_ns={} p99_ns={}", r.ios, r.errors, r.iops(), r.lat().percentile(50.0), r.lat().percentile(99.0));
        }
        for (qid, e) in &lanes.failed {
            let _ = writeln!(out, "RUNNER bench lane qid={qid} failed: {e:?}");
        }
        if !lanes.failed.is_empty() {
            print!("{out}");
            return Err(format!("bench: {} of the lanes failed", lanes.failed.len()));
        }
        (lanes.merged, lanes.per_lane)
    } else {
        let res = nvmeof::bench::run::reconnecting(set, 0, v, env, nsid, b, &mut progress, &mut on).map_err(|e| format!("bench: {e:?}"))?;
        if tty {
            print!("\r\x1b[K");
        }
        (res, Vec::new())
    };
    let _ = res.write(&mut out, b);
    let _ = writeln!(
        out,
        "RUNNER bench outages={} outage_ns={} longest_outage_ns={} down_at_end={} lost={} ios={} submitted={} errors={}",
        res.outages,
        res.outage_ns,
        res.longest_outage_ns,
        res.down_at_end,
        res.lost,
        res.ios,
        res.reads + res.writes,
        res.errors
    );
    let timestamp_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    let job = nvmeof::fio_json::JobInfo { jobname: nvmeof::fio_json::rw_name(b.pattern), timestamp_ms };
    match bench_json {
        Some(path) => {
            let mut doc = String::new();
            let _ = nvmeof::fio_json::write(&mut doc, b, &res, &job);
            std::fs::write(path, doc).map_err(|e| format!("bench: writing {}: {e}", path.display()))?;
            let _ = writeln!(out, "RUNNER bench fio json {}", path.display());
        }
        None => {
            let _ = nvmeof::fio_json::write_marked(&mut out, b, &res, &job);
        }
    }
    let _ = writeln!(out);
    print!("{out}");
    if res.errors != 0 {
        return Err(format!("bench: {} I/O errors", res.errors));
    }
    Ok((res, per_lane))
}

/// `nvmf.bench=...,threads=on`: every I/O queue of the set's controller driven by a std thread
/// of its own (`nvmeof::bench::lanes`), timed by `clock` (the owner's); this thread
/// keeps the admin queue, the device and the CM meanwhile. A lost controller stops the lanes,
/// is reconnected by the set and the lanes resume (`on` hears its events); outages counted, and
/// the bench's time over while it is down ends the run.
fn on_threads<E: HostEnv<crate::Verbs>>(
    set: &mut Controllers<crate::Verbs>,
    v: &mut crate::Verbs,
    env: &mut E,
    clock: &SimClock,
    nsid: u32,
    b: &nvmeof::bench::BenchConfig,
    on: &mut dyn FnMut(&CtrlEvent<mlx5::Error>),
) -> Result<nvmeof::bench::lanes::LanesResult<mlx5::Error>, String> {
    nvmeof::bench::lanes::reconnecting(set, 0, v, env, nsid, b, |jobs, turn| on_std_threads(jobs, clock, turn), &mut |_, e| on(e)).map_err(|e| format!("bench: {e:?}"))
}

/// `nvmf.verify=N,threads=on`: the verified workload split over every I/O queue of the set's
/// controller, each on a std thread of its own with a block range of its own
/// (`nvmeof::verify::lanes`); this thread keeps the admin queue, the device and the CM. A
/// `RUNNER verify lane` line each; a failed lane (or a mismatch) fails the run. A lost
/// controller stops the lanes, is reconnected by the set and the lanes resume (`on` hears its
/// events).
fn verify_on_threads<E: HostEnv<crate::Verbs>>(
    set: &mut Controllers<crate::Verbs>,
    v: &mut crate::Verbs,
    env: &mut E,
    clock: &SimClock,
    w: &Workload,
    on: &mut dyn FnMut(&CtrlEvent<mlx5::Error>),
) -> Result<(LaneResult, Vec<(u16, nvmeof::verify::VerifyResult)>), String> {
    let (r, total) = nvmeof::verify::lanes::reconnecting(set, 0, v, env, w, |jobs, turn| on_std_threads(jobs, clock, turn), &mut |_, e| on(e)).map_err(|e| format!("verified I/O: {e:?}"))?;
    for (qid, l) in &r.per_lane {
        println!("RUNNER verify lane qid={qid} writes={} reads={} blocks_verified={} mismatches={} errors={}", l.writes, l.reads, l.blocks_verified, l.mismatches, l.errors);
    }
    for (qid, e) in &r.failed {
        println!("RUNNER verify lane qid={qid} failed: {e:?}");
    }
    if !r.failed.is_empty() {
        return Err(format!("verified I/O: {} of the lanes failed", r.failed.len()));
    }
    Ok((total, r.per_lane))
}

/// Run each lane's work on a std thread of its own, timed by `clock` (the owner's), calling
/// the owner's `turn` from this thread until every one finished.
fn on_std_threads<J: LaneWork + Send>(jobs: Vec<J>, clock: &SimClock, turn: &mut dyn FnMut()) -> Vec<J::Outcome>
where
    J::Outcome: Send,
{
    std::thread::scope(|s| {
        let threads: Vec<_> = jobs
            .into_iter()
            .map(|job| {
                let clock = clock.clone();
                s.spawn(move || job.run(&|| clock.now_ns(), &std::thread::yield_now))
            })
            .collect();
        while !threads.iter().all(|t| t.is_finished()) {
            turn();
        }
        threads.into_iter().map(|t| t.join().expect("a lane's thread panicked")).collect()
    })
}

/// The verified workload gives up after this long without an answered I/O (its target away).
const VERIFY_STALL_NS: u64 = 60_000_000_000;

/// 32 bytes from the host OS's random source, seeding the DH-HMAC-CHAP CSPRNG.
fn os_seed() -> [u8; 32] {
    use std::io::Read;
    let mut s = [0u8; 32];
    if std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut s)).is_err() {
        // Still unpredictable enough for a test harness: the time and std's per-process hash keys.
        use std::hash::BuildHasher;
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        s[..16].copy_from_slice(&t.to_le_bytes());
        s[16..24].copy_from_slice(&std::collections::hash_map::RandomState::new().hash_one(t).to_le_bytes());
        s[24..].copy_from_slice(&std::collections::hash_map::RandomState::new().hash_one(t).to_le_bytes());
    }
    s
}

/// The node's neighbour resolution (ARP) counters on stderr: how a CM answer found, or did not
/// find, its way back to a peer.
fn neighbour_report(v: &testbed::node::Verbs) {
    log::info!(
        "runner: neighbours {} {:?}, arp requests sent {}, replies sent {}, replies dropped {}",
        v.neigh_len(),
        v.neigh_stats(),
        v.arp_requests_sent,
        v.arp_replies_sent,
        v.arp_replies_dropped
    );
}

// A poll group as emu-runner builds it (mlx5 rings on the emulated ConnectX, RAM/null
// namespace handles) can move to a thread of its own.
const _: fn() = || {
    fn is_send<T: Send>() {}
    is_send::<nvmeof::nvmet::rdma::PollGroup<crate::Verbs, RunnerNs>>();
};
