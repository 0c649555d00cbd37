//! nvmf: the image's NVMe-oF role, from the `nvmet.*` / `nvmf.*` words (apps/nvmeof grammar).
//!
//! - Target (`nvmet.subsys=` given): the namespaces are built (`ns=ram:`/`null:` new,
//!   `ns=nvme:NSID` taken from the local NVMe namespaces the storage part attached), the
//!   target core is configured and reported, then served on the ConnectX adapter:
//!   `nvmeof::nvmet::service::TargetService` (CM listener + RDMA transport) polled with the adapter.
//! - Initiator (`nvmf.connect=`): connect (or read the discovery log when `nqn=` is the
//!   discovery NQN) as one controller of `nvmeof::host::controllers::Controllers` (reconnected
//!   with backoff after a lost target), print the controller and namespaces, run
//!   `nvmf.verify=` and `nvmf.bench=` if given (both resume after a reconnect), disconnect; the
//!   image then ends as `exit=` says.
//!
//! Every problem is a clear error line naming the option; no panic.
use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use blockdev::BlockDevice;
use kernel::percpu::CpuId;
use kernel::smp::{Refused, SmpError};
use kernel::KernelHal;
use log::{error, info, warn};
use nvmeof::cmdline::{NsSpec, NvmeofArgs, VerifySpec};
use nvmeof::host::HostEnv;
use nvmeof::nvmet::{Core, TargetConfig};

use appliance_config::{adapter_ip, ip_str, Config};
use crate::storage::{Backing, Served};

/// Default NVMe-oF port (NVMe-oF spec: 4420 for RDMA).
pub const PORT: u16 = 4420;

/// How often the loops run the adapter's housekeeping (`Control::poll`: event queue, health
/// counter and syndrome by MMIO reads, ARP). Not every turn: two uncached BAR reads cost
/// about a microsecond on PCIe, which would land on I/O latency.
const HOUSEKEEPING_NS: u64 = 100_000;

/// How often the NVMe drives' hot-plug slots are polled for removal requests.
const SLOT_POLL_NS: u64 = 50_000_000;

/// A TSC-based "is it time again" for [`HOUSEKEEPING_NS`].
struct Every {
    last: u64,
    ticks: u64,
}

impl Every {
    fn new(ns: u64) -> Self {
        Every { last: 0, ticks: (kernel::time::tsc_khz() * ns / 1_000_000).max(1) }
    }
    fn due(&mut self) -> bool {
        let t = kernel::time::rdtsc();
        if t.wrapping_sub(self.last) >= self.ticks {
            self.last = t;
            true
        } else {
            false
        }
    }
}

/// The CM settings of this boot: `roce.mtu=`, and a seed (comm IDs, starting PSNs, source
/// ports) from the TSC and the address, so a rebooted appliance does not reuse the previous
/// boot's connection identities (a peer would reject them as stale); the `cm.*` bound words
/// (already checked by [`check`]; on an error the defaults stay).
pub fn cm_config(mtu: u32, ip: [u8; 4], bounds: &[nvmeof::cmdline::BoundWord]) -> rdma::cm::CmConfig {
    let seed = kernel::time::rdtsc().rotate_left(17) ^ ((u32::from_be_bytes(ip) as u64) << 32);
    let base = rdma::cm::CmConfig { mtu, seed, ..rdma::cm::CmConfig::default() };
    nvmeof::cmdline::bounds::cm_config(bounds, base).unwrap_or(base)
}

/// A configured target, ready to serve.
pub struct Target {
    pub core: Core<Backing>,
    pub addr: [u8; 4],
    pub port: u16,
    /// RDMA queues (admin + I/O, all controllers) the transport accepts at most.
    pub max_queues: usize,
    /// RoCE path MTU for the CM (`roce.mtu=`).
    pub mtu: u32,
    /// The `nvmet.*`/`cm.*` bound words (the CM's are applied when the service starts).
    pub bounds: Vec<nvmeof::cmdline::BoundWord>,
    /// Poll groups the queues are spread over (`nvmet.poll_groups=`, default 1).
    pub poll_groups: usize,
}

/// Build the target from the `nvmet.*` words: namespaces, subsystems, the core. Local NVMe
/// namespaces named by `ns=nvme:NSID` are taken out of `served`. Each subsystem and namespace
/// is reported.
#[inline(never)]
pub fn build_target(cfg: &Config, served: &mut Vec<Served>) -> Result<Box<Target>, String> {
    let addr = adapter_ip(cfg).ok_or("no address")?;
    let mut args: NvmeofArgs = cfg.nvmeof.clone();
    let port = args.listen.map_or(PORT, |(_, p)| p);
    // The discovery log publishes a real address, also when listening on 0.0.0.0.
    args.listen = Some((addr, port));
    let mut base = TargetConfig::default();
    // Controller IDs a peer cannot predict: a seed from this boot's TSC.
    base.limits.cntlid_seed ^= kernel::time::rdtsc().rotate_left(29);
    let make = |spec: &NsSpec| -> Result<Backing, &'static str> {
        Backing::build(spec, KernelHal, |ctrl, nsid| {
            let name = ctrl.map(|c| format!("nvme{c}n{nsid}"));
            let pos = served.iter().position(|s| matches!(&s.dev, Backing::Local(n) if n.info().nsid == nsid) && name.as_ref().map_or(true, |w| *w == s.name));
            match pos.map(|i| served.remove(i)) {
                Some(Served { name, dev: Backing::Local(n) }) => {
                    info!("nvmf: ns=nvme:{nsid} is local namespace {name}");
                    Ok(n)
                }
                _ => Err("ns=nvme:NSID: no such local NVMe namespace attached (see storage: lines and ns=), or already used"),
            }
        })
    };
    let (tcfg, subs) = nvmeof::cmdline::build_target(&args, base, make).map_err(|e| format!("nvmet.subsys={}...: {}", e.word, e.why))?;
    for s in &subs {
        let hosts = if s.allow_any_host { String::from("any host") } else { format!("hosts {}", s.hosts.join(" ")) };
        info!("nvmf: subsystem {}: serial {}, {} namespace(s), {hosts}", s.nqn, s.serial, s.namespaces.len());
        for ns in &s.namespaces {
            let d = &ns.dev;
            let g = ns.nguid;
            info!(
                "nvmf:   nsid {}: {} ({} blocks x {} B, {} MiB), {}, NGUID {:02x}{:02x}{:02x}{:02x}..{:02x}{:02x}",
                ns.nsid,
                crate::storage::describe(d),
                d.num_blocks(),
                d.block_size(),
                (d.num_blocks() * d.block_size() as u64) >> 20,
                if d.volatile_write_cache() { "volatile write cache (Flush forwarded, FUA passed through)" } else { "no volatile write cache" },
                g[0], g[1], g[2], g[3], g[14], g[15]
            );
        }
    }
    let max_queues = tcfg.max_ctrls * (1 + tcfg.max_io_queues as usize);
    info!(
        "nvmf: target: {} subsystem(s) + discovery on {}:{port}; up to {} controllers x {} I/O queues of depth {}, in-capsule {} B, MDTS {} KiB",
        subs.len(),
        ip_str(addr),
        tcfg.max_ctrls,
        tcfg.max_io_queues,
        tcfg.io_queue_depth,
        tcfg.inline_data_size,
        tcfg.max_io_bytes / 1024
    );
    if !tcfg.host_auth.is_empty() {
        info!("nvmf: target: {} host(s) must pass DH-HMAC-CHAP", tcfg.host_auth.len());
    }
    let mut core = Core::new(tcfg, subs).map_err(|why| format!("target configuration refused: {why}"))?;
    core.auth.seed(kernel::entropy::seed32());
    Ok(Box::new(Target { core, addr, port, max_queues, mtu: cfg.roce_mtu, bounds: args.bounds.clone(), poll_groups: args.poll_groups.unwrap_or(1) }))
}

/// Serve the target on the adapter: until the power button is pressed, or with `serve_ctrls` > 0
/// until that many controllers were created and every one is gone again; then the connections are closed, the
/// counters reported and the adapter shut down (every firmware page reclaimed). Returns Ok
/// after such an end, Err if the service could not start.
#[inline(never)]
pub fn serve(adapter: crate::adapter::Adapter, t: Box<Target>, serve_ctrls: u64, mgmt: &::mgmt::MgmtConfig, storage: &mut crate::storage::Storage) -> Result<(), String> {
    use rdma::Control as _;
    let crate::adapter::Adapter { bdf, mut verbs } = adapter;
    let cm = cm_config(t.mtu, t.addr, &t.bounds);
    let svc = nvmeof::nvmet::service::TargetService::with_cm_config(&mut *verbs, t.core, t.max_queues, t.port, cm);
    let mut svc = match svc {
        Ok(s) => Box::new(s),
        Err(e) => {
            let why = format!("target service on {bdf} did not start: {e:?}");
            crate::adapter::Adapter { bdf, verbs }.shutdown("target service failed");
            return Err(why);
        }
    };
    // Nanoseconds (TSC scaled): /metrics and the log read the histogram as ns.
    svc.target.set_turnaround_clock(kernel::time::now_ns);
    svc.target.core.set_device_clock(kernel::time::now_ns);
    svc.target.set_poll_groups(t.poll_groups);
    info!("nvmf: target: queues spread over {} poll group(s), polled in turn on this CPU", svc.target.poll_groups());
    info!("nvmf: target serving on {bdf} ({}:{}, RoCE MTU {}); counters every 60 s and on connection changes", ip_str(t.addr), t.port, t.mtu);
    if serve_ctrls > 0 {
        info!("nvmf: target ends once {serve_ctrls} controller(s) came and went (nvmet.serve-ctrls)");
    }
    // The power button (or a BMC's soft off) ends the target the same clean way.
    let button = kernel::power::arm();
    info!("nvmf: power button {}", if button { "armed: a press closes the connections and shuts the adapter down" } else { "not available (no ACPI PM1 registers)" });
    // The management plane runs on housekeeping turns only: a bounded budget every 100 µs.
    let mut plane = crate::mgmt_plane::start(mgmt, &mut verbs, t.addr);
    let mut last_report = kernel::time::now_ns();
    let mut last_conns = 0;
    let mut adapter_errors = 0u64;
    let mut housekeeping = Every::new(HOUSEKEEPING_NS);
    let mut slot_watch = Every::new(SLOT_POLL_NS);
    loop {
        let slow_turn = housekeeping.due();
        if slow_turn {
            verbs.poll();
        }
        if let Some(e) = verbs.last_poll_error.take() {
            adapter_errors += 1;
            // Rate-limited: the first few, then every 1000th.
            if adapter_errors <= 8 || adapter_errors % 1000 == 0 {
                error!("nvmf: adapter {bdf}: {e} ({adapter_errors} errors so far)");
            }
        }
        let now = kernel::time::now_ns();
        svc.poll(&mut *verbs, now);
        if slow_turn {
            if let Some(p) = plane.as_mut() {
                p.turn(&mut verbs, &mut svc);
            }
        }
        let conns = svc.connections();
        if conns != last_conns || now - last_report > 60_000_000_000 {
            info!("nvmf: target: {conns} connection(s) (was {last_conns})");
            svc.report();
            report_groups(&svc.target);
            let h = &svc.target.turnaround();
            if h.count() > 0 {
                let ns = |p: f64| h.percentile(p);
                info!(
                    "nvmf: target turnaround (receive CQE seen -> response posted): {} commands, p50 {} ns, p99 {} ns, p99.9 {} ns, max {} ns",
                    h.count(),
                    ns(50.0),
                    ns(99.0),
                    ns(99.9),
                    h.max()
                );
            }
            last_conns = conns;
            last_report = now;
        }
        if slow_turn && serve_ctrls > 0 && conns == 0 && svc.target.core_stats().ctrls_created >= serve_ctrls && svc.target.core.live_ctrls() == 0 {
            break;
        }
        if !storage.slots.is_empty() && slot_watch.due() {
            // A removed drive's namespaces report failed; the target takes them out of
            // service and sends the AEN on its next turn.
            storage.watch_slots();
        }
        if slow_turn && button && kernel::power::pressed() {
            info!("nvmf: power button pressed: ending the target");
            break;
        }
    }
    // Every controller is gone; let the last CM exchanges (DREP, timewait) settle, then stop.
    svc.close_all(&mut *verbs);
    let settle = kernel::time::now_ns();
    while kernel::time::now_ns().saturating_sub(settle) < SETTLE_NS {
        verbs.poll();
        svc.poll(&mut *verbs, kernel::time::now_ns());
    }
    let c = svc.target.core_stats();
    info!("nvmf: target done: {} controller(s) created, {} freed, {} commands, {} errors", c.ctrls_created, c.ctrls_freed, c.commands, c.errors);
    svc.report();
    report_groups(&svc.target);
    drop(svc);
    crate::adapter::Adapter { bdf, verbs }.shutdown("target done");
    Ok(())
}

/// One line per poll group: the queues handed to it and the capsules it served (slow path).
fn report_groups<V: rdma::GroupVerbs, B: blockdev::BlockDevice>(t: &nvmeof::nvmet::rdma::RdmaTarget<V, B>) {
    for g in 0..t.poll_groups() {
        let s = t.group_stats(g);
        info!(
            "nvmf: poll group {g}: queues assigned {} live {}, capsules {}, completions {}, srq reposts {}, srq limit events {}, polled on cpu {}",
            s.queues_assigned,
            s.queues_live,
            s.capsules,
            s.completions,
            s.srq_reposts,
            s.srq_limit_events,
            kernel::percpu::this_cpu().index()
        );
    }
}

/// How long the target keeps polling after closing its connections before the adapter goes
/// down (CM replies in flight).
const SETTLE_NS: u64 = 200_000_000;

/// Run the initiator role, then shut the adapter down; returns whether it succeeded (errors
/// printed).
#[inline(never)]
pub fn initiate(adapter: crate::adapter::Adapter, args: &NvmeofArgs, mtu: u32, verify: VerifySpec) -> bool {
    let crate::adapter::Adapter { bdf, mut verbs } = adapter;
    let ok = initiate_on(&mut verbs, &bdf, args, mtu, verify);
    crate::adapter::Adapter { bdf, verbs }.shutdown("initiator done");
    ok
}

#[inline(never)]
fn initiate_on(verbs: &mut crate::adapter::Verbs, bdf: &str, args: &NvmeofArgs, mtu: u32, verify: VerifySpec) -> bool {
    use rdma::{Control as _, Neighbours as _};
    let Some(spec) = args.connect.as_ref() else { return false };
    let cm = match rdma::cm::Cm::new(verbs, cm_config(mtu, verbs.local_ip(), &args.bounds)) {
        Ok(c) => c,
        Err(e) => {
            error!("nvmf: initiator: CM setup on {bdf}: {e:?}");
            return false;
        }
    };
    let mut env = nvmeof::host::cm_env::CmHostEnv::new(cm, spec.addr, spec.port, kernel::time::now_ns, {
        let mut housekeeping = Every::new(HOUSEKEEPING_NS);
        move |v: &mut crate::adapter::Verbs| {
            if housekeeping.due() {
                v.poll();
            }
        }
    });
    let mut hcfg = spec.host_config();
    // Host identity: hostnqn= if given, else a UUID NQN from the adapter's MAC (hostid the
    // same 16 bytes), so two appliances never present the same host to one target.
    let mac = verbs.local_mac();
    let id: [u8; 16] = [0, 0, 0, 0, 0, 0, 0x40, 0, 0x80, 0, mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]];
    hcfg.hostid = id;
    hcfg.hostnqn = match &spec.hostnqn {
        Some(h) => h.clone(),
        None => format!(
            "nqn.2014-08.org.nvmexpress:uuid:{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
            id[0], id[1], id[2], id[3], id[4], id[5], id[6], id[7], id[8], id[9], id[10], id[11], id[12], id[13], id[14], id[15]
        ),
    };
    hcfg.auth_seed = kernel::entropy::seed32();
    info!("nvmf: initiator: host {}{}", hcfg.hostnqn, if hcfg.dhchap.is_some() { " (DH-HMAC-CHAP secret set)" } else { "" });
    if let Some(b) = &args.bench {
        hcfg.max_io_bytes = hcfg.max_io_bytes.max(b.block_size.next_power_of_two());
        if b.queue_depth > spec.qd {
            warn!("nvmf: nvmf.bench qd={} > nvmf.connect qd={}: the bench runs at qd {}", b.queue_depth, spec.qd, spec.qd);
        }
    }
    let target = format!("{}:{}", ip_str(spec.addr), spec.port);
    if spec.nqn == nvmeof::wire::DISCOVERY_NQN {
        return match discover(verbs, &mut env, hcfg) {
            Ok(entries) => {
                info!("nvmf: discovery log of {target}: {} entries", entries.len());
                for e in &entries {
                    info!("nvmf:   {} at {}:{} (port id {}, trtype {}, subtype {})", e.subnqn, e.traddr, e.trsvcid, e.portid, e.trtype, e.subtype);
                }
                true
            }
            Err(e) => {
                error!("nvmf: discovery at {target}: {e:?}");
                false
            }
        };
    }
    if verify.count > 0 {
        // nvmf.verify=: the subsystem must be in the target's discovery log.
        match discover(verbs, &mut env, hcfg.clone()) {
            Ok(entries) if entries.iter().any(|e| e.subnqn == spec.nqn) => {
                info!("nvmf: discovery log of {target}: {} entries, {} listed", entries.len(), spec.nqn);
            }
            Ok(entries) => {
                error!("nvmf: discovery log of {target}: {} entries, {} not listed", entries.len(), spec.nqn);
                return false;
            }
            Err(e) => {
                error!("nvmf: discovery at {target}: {e:?}");
                return false;
            }
        }
    }
    // One controller of the product's set: once connected, a lost target (CM disconnect, QP
    // error, keep-alive expiry, a failed adapter) is released and reconnected with backoff
    // while the verified workload waits for it; the first connect fails on its first error.
    let addr = nvmeof::host::controllers::TargetAddr { ip: spec.addr, port: spec.port };
    let mut set = nvmeof::host::controllers::Controllers::new(&hcfg, &[(addr, spec.nqn.as_str())]);
    if let Err(e) = bring_up(&mut set, verbs, &mut env) {
        error!("nvmf: connect to {} at {target}: {e:?}", spec.nqn);
        return false;
    }
    let host = set.ctrls[0].live().expect("brought up");
    if let Some(c) = &host.ctrl {
        info!("nvmf: connected to {} at {target}: controller {}, MDTS {} KiB, {} namespace(s), I/O queues {:?}", c.subnqn, c.cntlid, c.mdts_bytes / 1024, c.nn, host.io_queues());
    }
    for ns in &host.namespaces {
        info!("nvmf:   nsid {}: {} blocks x {} B ({} MiB)", ns.nsid, ns.blocks, ns.block_size, (ns.blocks * ns.block_size as u64) >> 20);
    }
    let mut ok = true;
    if verify.count > 0 {
        ok = verified_io(&mut set, verbs, &mut env, verify, spec.qd);
    }
    if let (true, Some(b)) = (ok, &args.bench) {
        // On the set: a target lost during the bench is reconnected and the bench goes on.
        match set.ctrls[0].host().namespaces.first().map(|n| n.nsid) {
            None => {
                error!("nvmf: bench: the controller has no namespace");
                ok = false;
            }
            Some(nsid) => ok = bench(&mut set, verbs, &mut env, nsid, b),
        }
    }
    let c = &set.ctrls[0];
    info!("nvmf: initiator counters {:?}", c.host().stats);
    info!(
        "nvmf: initiator controller {target}: state {:?}, connects {}, failed attempts {}, reconnects {}, device recoveries {}",
        c.state(),
        c.connects,
        c.failed_attempts,
        c.host().stats.reconnects,
        set.device_recoveries
    );
    if let Some(e) = verbs.last_poll_error.take() {
        warn!("nvmf: adapter {bdf}: last housekeeping error: {e}");
    }
    if let Err((_, e)) = set.disconnect(verbs, &mut env) {
        warn!("nvmf: disconnect: {e:?}");
    }
    ok
}

// The initiator's steps, each out of line so their frames (admin buffers, bench state) follow
// one another on the boot stack instead of adding up in one.
type HostError = nvmeof::Error<mlx5::Error>;

#[inline(never)]
fn discover(verbs: &mut crate::adapter::Verbs, env: &mut impl HostEnv<crate::adapter::Verbs>, cfg: nvmeof::host::HostConfig) -> Result<Vec<nvmeof::host::DiscEntry>, HostError> {
    nvmeof::host::Host::discover(verbs, env, cfg)
}

type HostSet = nvmeof::host::controllers::Controllers<crate::adapter::Verbs>;

/// The set's first connect ([`Controllers::connect_all`](nvmeof::host::controllers::Controllers::connect_all)),
/// out of line.
#[inline(never)]
fn bring_up(set: &mut HostSet, verbs: &mut crate::adapter::Verbs, env: &mut impl HostEnv<crate::adapter::Verbs>) -> Result<(), HostError> {
    set.connect_all(verbs, env)
}

/// Run `nvmf.bench=` on `nsid` of the set's controller and print the report and fio's JSON
/// (between `nvmeof::fio_json` markers). With `threads=on` and an application processor for
/// each I/O queue, each queue is driven from an AP of its own ([`bench_on_aps`]); otherwise
/// (and with `threads=on` but too few APs, with a warning) queue 1 is driven from the boot CPU
/// on the set, reconnected if its target is lost (`nvmeof::bench::run::reconnecting`). Returns
/// whether it ran without I/O errors (I/Os lost to an outage are reported, not errors).
#[inline(never)]
fn bench(set: &mut HostSet, verbs: &mut crate::adapter::Verbs, env: &mut impl HostEnv<crate::adapter::Verbs>, nsid: u32, cfg: &nvmeof::bench::BenchConfig) -> bool {
    use nvmeof::host::controllers::CtrlEvent;
    if cfg.threads {
        if let Some(aps) = lane_aps(set, "nvmf.bench", "the bench drives I/O queue 1") {
            return bench_on_aps(set, verbs, env, nsid, cfg, &aps);
        }
    }
    // Progress once a second on the console (scripts/run --image shows it on a terminal).
    let mut progress = |p: &nvmeof::bench::BenchProgress| info!("nvmf: {p}");
    let mut attempts = 0u64;
    let mut on = |e: &CtrlEvent<mlx5::Error>| match e {
        CtrlEvent::AttemptFailed(e) => {
            attempts += 1;
            // Rate-limited: the target may be away for a while.
            if attempts <= 4 || attempts % 100 == 0 {
                warn!("nvmf: bench: reconnect attempt {attempts} failed: {e:?}");
            }
        }
        e => info!("nvmf: bench: {e:?}"),
    };
    // Matched by reference: the result (with its histograms) stays where the bench put it.
    match &nvmeof::bench::run::reconnecting(set, 0, verbs, env, nsid, cfg, &mut progress, &mut on) {
        Ok(r) => bench_report(r, cfg),
        Err(e) => {
            error!("nvmf: bench on nsid {nsid}: {e:?}");
            false
        }
    }
}

/// `threads=on` of `word`: an online application processor for each I/O queue of the set's
/// controller, or `None` after a warning that `instead` runs from the boot CPU.
fn lane_aps(set: &HostSet, word: &str, instead: &str) -> Option<Vec<CpuId>> {
    let queues = usize::from(set.ctrls[0].host().io_queues().0);
    let aps: Vec<CpuId> = kernel::smp::online().filter(|&c| c != CpuId::BOOT).take(queues).collect();
    if queues > 0 && aps.len() == queues {
        return Some(aps);
    }
    warn!("nvmf: {word} threads=on: {queues} I/O queue(s) need as many application processors, {} online: {instead} from the boot CPU", aps.len());
    None
}

/// `threads=on` with an AP for each I/O queue: the queues are lent out
/// (`nvmeof::bench::lanes::on_lanes`) and lane i runs on `aps[i]` as a scoped job
/// ([`kernel::smp::scope`]) while the boot CPU keeps the owner's turn (admin queue and
/// keep-alive, the adapter's housekeeping, the CM) until every lane finished, as SPDK perf's
/// core mask puts one queue on each core. A lane touches only its own queue group (its CQ, SRQ,
/// QP and doorbell page) and the clock. One line per lane naming the CPU it ran on (as that CPU
/// reads its own number), then the merged report. A lost controller stops the lanes, is
/// reconnected by the set and the lanes resume (`nvmeof::bench::lanes::reconnecting`; the CPUs
/// named are those of the last connection's run).
#[inline(never)]
fn bench_on_aps(set: &mut HostSet, verbs: &mut crate::adapter::Verbs, env: &mut impl HostEnv<crate::adapter::Verbs>, nsid: u32, cfg: &nvmeof::bench::BenchConfig, aps: &[CpuId]) -> bool {
    let mut ran_on: Vec<(u16, CpuId)> = Vec::with_capacity(aps.len());
    let mut on = |_: usize, e: &nvmeof::host::controllers::CtrlEvent<mlx5::Error>| info!("nvmf: bench: {e:?}");
    let r = nvmeof::bench::lanes::reconnecting(
        set,
        0,
        verbs,
        env,
        nsid,
        cfg,
        |jobs, turn| {
            ran_on.clear();
            on_aps(jobs, turn, aps, &mut ran_on)
        },
        &mut on,
    );
    match r {
        Ok(r) => {
            for (qid, l) in &r.per_lane {
                let cpu = ran_on.iter().find(|p| p.0 == *qid).map_or(CpuId::BOOT, |p| p.1);
                info!(
                    "nvmf: bench lane qid {qid} on cpu {cpu}: {} I/Os (r {} / w {}), {} errors, IOPS {}, p50 {} ns, p99 {} ns",
                    l.ios,
                    l.reads,
                    l.writes,
                    l.errors,
                    l.iops(),
                    l.lat().percentile(50.0),
                    l.lat().percentile(99.0)
                );
            }
            for (qid, e) in &r.failed {
                error!("nvmf: bench lane qid {qid}: {e:?}");
            }
            bench_report(&r.merged, cfg) && r.failed.is_empty()
        }
        Err(e) => {
            error!("nvmf: bench on nsid {nsid} on {} application processors: {e:?}", aps.len());
            false
        }
    }
}

/// Run lane `i`'s work (a bench lane, a verified-I/O lane) on `aps[i]` as a scoped job
/// ([`kernel::smp::scope`]), the boot CPU taking the owner's `turn` until every one finished;
/// `ran_on` gets each lane's QID and the CPU it ran on (as that CPU reads its own number). Every
/// AP was online and idle when picked and only this CPU posts jobs, so a refusal is not
/// expected; such a lane runs here once the others ended.
fn on_aps<J>(jobs: Vec<J>, turn: &mut dyn FnMut(), aps: &[CpuId], ran_on: &mut Vec<(u16, CpuId)>) -> Vec<J::Outcome>
where
    J: nvmeof::host::LaneWork + Send,
    J::Outcome: Send,
{
    kernel::smp::scope(|s| {
        let mut running = Vec::with_capacity(jobs.len());
        let mut refused = Vec::new();
        for (i, job) in jobs.into_iter().enumerate() {
            let qid = job.qid();
            let lane = move || (qid, kernel::percpu::this_cpu(), job.run(&kernel::time::now_ns, &core::hint::spin_loop));
            let placed = match aps.get(i) {
                Some(&cpu) => s.run_on(cpu, lane),
                None => Err(Refused { error: SmpError::NotOnline(CpuId(i as u32 + 1)), job: lane }),
            };
            match placed {
                Ok(j) => running.push(j),
                Err(r) => {
                    warn!("nvmf: lane qid {qid}: {}: it runs on the boot CPU after the others", r.error);
                    refused.push(r.job);
                }
            }
        }
        while !running.iter().all(|j| j.is_finished()) {
            turn();
        }
        let mut outcomes = Vec::with_capacity(running.len() + refused.len());
        for (qid, cpu, outcome) in running.into_iter().map(|j| j.join()).chain(refused.into_iter().map(|lane| lane())) {
            ran_on.push((qid, cpu));
            outcomes.push(outcome);
        }
        outcomes
    })
}

/// Print a bench's report and fio's JSON as `nvmf:` lines; whether it ran without I/O errors.
fn bench_report(r: &nvmeof::bench::BenchResult, cfg: &nvmeof::bench::BenchConfig) -> bool {
    let mut s = String::new();
    let _ = r.write(&mut s, cfg);
    // fio's JSON too; no wall clock here, so timestamp 0.
    let job = nvmeof::fio_json::JobInfo { jobname: nvmeof::fio_json::rw_name(cfg.pattern), timestamp_ms: 0 };
    let _ = nvmeof::fio_json::write_marked(&mut s, cfg, r, &job);
    for line in s.lines() {
        info!("nvmf: {line}");
    }
    r.errors == 0 && r.ios > 0
}

/// `nvmf.verify=`: `count` verified random I/Os on the controller's first namespace at queue
/// depth `qd` (each write a pattern unique to block and generation, every read of a written
/// block compared), seed from the TSC (printed, so a failure can be replayed). A lost target
/// is reconnected and the workload resumes (writes lost in flight may or may not have landed,
/// nothing else may be found). Returns whether every block matched.
/// With `threads=on` and an application processor for each I/O queue the workload is split
/// over the queues, each on an AP of its own ([`verify_on_aps`]).
#[inline(never)]
fn verified_io(set: &mut HostSet, verbs: &mut crate::adapter::Verbs, env: &mut impl HostEnv<crate::adapter::Verbs>, spec: VerifySpec, qd: u16) -> bool {
    use nvmeof::host::controllers::CtrlEvent;
    let seed = kernel::time::rdtsc();
    let w = nvmeof::verify::reconnecting::Workload { count: spec.count, qd: qd as usize, max_blocks: 32, seed, stall_ns: VERIFY_STALL_NS };
    if spec.threads {
        if let Some(aps) = lane_aps(set, "nvmf.verify", "the verified I/O runs") {
            return verify_on_aps(set, verbs, env, &w, &aps);
        }
    }
    let mut attempts = 0u64;
    let r = nvmeof::verify::reconnecting::run(set, verbs, env, &w, |_, e| match e {
        CtrlEvent::AttemptFailed(e) => {
            attempts += 1;
            // Rate-limited: one every 50 ms while the target is away.
            if attempts <= 4 || attempts % 100 == 0 {
                warn!("nvmf: initiator: reconnect attempt {attempts} failed: {e:?}");
            }
        }
        e => info!("nvmf: initiator: {e:?}"),
    });
    let nsid = set.ctrls[0].host().namespaces.first().map_or(0, |n| n.nsid);
    match r {
        Ok(r) => {
            let (l, v) = (r[0], r[0].verify);
            info!(
                "nvmf: verify nsid {nsid}: writes={} reads={} blocks_verified={} mismatches={} errors={} first_error={:?} seed={seed} releases={} lost_writes={} lost_reads={} after_reconnect={}",
                v.writes, v.reads, v.blocks_verified, v.mismatches, v.errors, v.first_error, l.releases, l.lost_writes, l.lost_reads, l.answered_after_reconnect
            );
            v.mismatches == 0 && v.errors == 0 && v.blocks_verified > 0
        }
        Err(e) => {
            error!("nvmf: verify on nsid {nsid}: {e:?} (seed={seed})");
            false
        }
    }
}

/// `nvmf.verify=N,threads=on` with an AP for each I/O queue: the queues are lent out
/// (`nvmeof::verify::lanes::on_lanes`: each lane its share of the I/Os on a block range of its
/// own, its written blocks read back) and lane i runs on `aps[i]` ([`on_aps`]) while the boot
/// CPU keeps the owner's turn. One line per lane naming the CPU it ran on, then the merged
/// tally. A lost controller stops the lanes, is reconnected by the set and the lanes resume
/// (`nvmeof::verify::lanes::reconnecting`).
#[inline(never)]
fn verify_on_aps(set: &mut HostSet, verbs: &mut crate::adapter::Verbs, env: &mut impl HostEnv<crate::adapter::Verbs>, w: &nvmeof::verify::reconnecting::Workload, aps: &[CpuId]) -> bool {
    let nsid = set.ctrls[0].host().namespaces.first().map_or(0, |n| n.nsid);
    let mut ran_on: Vec<(u16, CpuId)> = Vec::with_capacity(aps.len());
    let mut on = |_: usize, e: &nvmeof::host::controllers::CtrlEvent<mlx5::Error>| info!("nvmf: initiator: {e:?}");
    let r = nvmeof::verify::lanes::reconnecting(
        set,
        0,
        verbs,
        env,
        w,
        |jobs, turn| {
            ran_on.clear();
            on_aps(jobs, turn, aps, &mut ran_on)
        },
        &mut on,
    );
    let seed = w.seed;
    match r {
        Ok((r, total)) => {
            for (qid, v) in &r.per_lane {
                let cpu = ran_on.iter().find(|p| p.0 == *qid).map_or(CpuId::BOOT, |p| p.1);
                info!("nvmf: verify lane qid {qid} on cpu {cpu}: writes={} reads={} blocks_verified={} mismatches={} errors={}", v.writes, v.reads, v.blocks_verified, v.mismatches, v.errors);
            }
            for (qid, e) in &r.failed {
                error!("nvmf: verify lane qid {qid}: {e:?}");
            }
            let v = r.merged;
            info!(
                "nvmf: verify nsid {nsid}: writes={} reads={} blocks_verified={} mismatches={} errors={} first_error={:?} seed={seed} lanes={} failed={} releases={} lost_writes={} lost_reads={} after_reconnect={}",
                v.writes,
                v.reads,
                v.blocks_verified,
                v.mismatches,
                v.errors,
                v.first_error,
                r.per_lane.len(),
                r.failed.len(),
                total.releases,
                total.lost_writes,
                total.lost_reads,
                total.answered_after_reconnect
            );
            r.failed.is_empty() && v.mismatches == 0 && v.errors == 0 && v.blocks_verified > 0
        }
        Err(e) => {
            error!("nvmf: verify on nsid {nsid} on {} application processors: {e:?} (seed={seed})", aps.len());
            false
        }
    }
}

/// `nvmf.verify=` gives up after this long without an answered I/O (its target away).
const VERIFY_STALL_NS: u64 = 60_000_000_000;

// A poll group as the image builds it (mlx5 rings on the adapter, RAM/null/local NVMe
// namespace handles) can move to a CPU of its own.
const _: fn() = || {
    fn is_send<T: Send>() {}
    is_send::<nvmeof::nvmet::rdma::PollGroup<crate::adapter::Verbs, Backing>>();
};
