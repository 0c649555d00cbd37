//! world: one simulated world: the target node (mlx5 driver over an emulated ConnectX, the real
//! IB CM and NVMe-oF target serving a RAM namespace) and N initiator nodes (the same driver and
//! adapter model, the real CM and NVMe-oF initiator), joined by the [`Fabric`], all advancing
//! on one virtual clock in one thread. A turn polls every node and the switch; when nothing
//! happened the clock jumps (to the next frame delivery, fault or workload time, at most
//! `MAX_IDLE_NS`). Blocking initiator steps (connect, reconnect, disconnect) run the rest of
//! the world from the initiator's idle hook.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::{Rc, Weak};

use emu_roce::link::SplitMix64;
use nvmeof::host::cm_env::CmHostEnv;
use nvmeof::host::{Host, HostConfig, IoDone, IoKind};
use nvmeof::nvmet::service::TargetService;
use nvmeof::nvmet::{Core, Limits, NamespaceConfig, PortConfig, SubsystemConfig, TargetConfig};
use rdma::cm::{Cm, CmConfig};
use testbed::{Node, Options, SimClock};

use crate::device::SimRam;
use crate::fabric::Fabric;
use crate::faults::{self, Action, Kind, Plan};
use crate::model::{decode_block, fill_block, Model, BS};

type V = testbed::Verbs;
type Env = CmHostEnv<V, Box<dyn FnMut() -> u64>, Box<dyn FnMut(&mut V)>>;

pub const SUBNQN: &str = "nqn.2026-01.io.appliance:sim";
const T_IP: [u8; 4] = [10, 77, 0, 1];
const T_MAC: [u8; 6] = [0x52, 0x54, 0, 0x77, 0, 1];
const PORT: u16 = 4420;
/// Namespace: 512 blocks of 512 bytes (small: writes collide often).
const NS_BLOCKS: u64 = 512;
/// Largest I/O, in blocks.
const MAX_BLOCKS: u64 = 8;
const MS: u64 = 1_000_000;
/// Clock step of a turn that did something.
const TURN_NS: u64 = 1_000;
/// Longest clock jump of an idle turn.
const MAX_IDLE_NS: u64 = 2 * MS;
/// The workload spreads its operations over this much virtual time (faults fall inside it).
const SPAN_NS: u64 = 3_000 * MS;
/// The initiators' keep-alive timeout.
const KATO_MS: u64 = 2_000;
/// After the faults stop, every queue must finish its work within this.
const PROGRESS_NS: u64 = 30_000 * MS;
/// After the last disconnect, the target must be back at its baseline within this.
const SETTLE_NS: u64 = 30_000 * MS;
/// Longest device latency of the target's namespace.
const DEVICE_NS: u64 = 20_000;
/// A failed write may still land this long after the host gave up on it (frames on the wire,
/// the device's latency).
const GRACE_NS: u64 = 20 * MS;

/// What one run is asked to do.
#[derive(Debug, Clone)]
pub struct Config {
    pub seed: u64,
    pub initiators: usize,
    /// Operations over all initiators.
    pub ops: u64,
    pub faults: Vec<Kind>,
    /// Print faults and connection events to stderr as they happen.
    pub verbose: bool,
    /// Whether a target crash keeps its RAM namespace (`Some`), or the seed decides (`None`).
    pub keep_namespace: Option<bool>,
}

/// What one run found.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub failure: Option<String>,
    pub ops: u64,
    pub blocks_verified: u64,
    pub writes_acked: u64,
    pub io_failed: u64,
    pub error_status: u64,
    pub connects: u64,
    pub reconnects: u64,
    pub crashes: u64,
    /// Device recoveries (an adapter reset and brought up again after a hung command, a
    /// health syndrome or an internal-error event) of the target and of the initiators, and
    /// injected QP errors / CQ overruns that hit a connected QP and internal-error events an
    /// EQ took, on the target's adapter and on the initiators'.
    pub recoveries: u64,
    pub init_recoveries: u64,
    pub adapter_faults: u64,
    pub init_adapter_faults: u64,
    pub corrupted: u64,
    /// Frames the switch dropped for exceeding a port's MTU.
    pub mtu_drops: u64,
    pub frames: u64,
    pub virtual_ns: u64,
    pub turns: u64,
    pub trace: u64,
    pub drawn: Vec<Kind>,
}

impl Outcome {
    /// The one-line summary of a seed (identical for identical runs).
    pub fn line(&self, seed: u64) -> String {
        let faults = if self.drawn.is_empty() { "none".to_string() } else { self.drawn.iter().map(|k| k.name()).collect::<Vec<_>>().join(",") };
        format!(
            "seed={seed} {} ops={} blocks_verified={} writes_acked={} io_failed={} error_status={} connects={} reconnects={} crashes={} recoveries={} init_recoveries={} adapter_faults={} init_adapter_faults={} corrupted={} mtu_drops={} frames={} vtime_ms={} turns={} faults={faults} trace={:016x}",
            if self.failure.is_some() { "FAIL" } else { "ok" },
            self.ops,
            self.blocks_verified,
            self.writes_acked,
            self.io_failed,
            self.error_status,
            self.connects,
            self.reconnects,
            self.crashes,
            self.recoveries,
            self.init_recoveries,
            self.adapter_faults,
            self.init_adapter_faults,
            self.corrupted,
            self.mtu_drops,
            self.frames,
            self.virtual_ns / MS,
            self.turns,
            self.trace
        )
    }
}

/// Independent branches of the seed's RNG tree.
fn branch(seed: u64, what: u64) -> u64 {
    SplitMix64::new(seed ^ what.wrapping_mul(0xA076_1D64_78BD_642F)).next_u64()
}

fn cm_config(seed: u64) -> CmConfig {
    // Virtual time is cheap but not free: CM retries at ~268 ms, 4 of them; RC retransmit at
    // ~67 ms; timewait 500 ms.
    CmConfig { cm_response_timeout: 16, max_cm_retries: 4, local_ack_timeout: 14, timewait_ns: 500 * MS, seed, ..CmConfig::default() }
}

fn init_ip(k: usize) -> [u8; 4] {
    [10, 77, 0, 10 + k as u8]
}
fn init_mac(k: usize) -> [u8; 6] {
    [0x52, 0x54, 0, 0x77, 0, 10 + k as u8]
}

/// One outstanding I/O of an initiator.
#[derive(Debug, Clone, Copy)]
struct Op {
    write: bool,
    lba: u64,
    n: u32,
    wid: u64,
    seq: u64,
    epoch: u64,
}

/// What must return to its baseline on the target once every connection is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Footprint {
    cm_conns: usize,
    connections: usize,
    queues: usize,
    ctrls: usize,
    pinned_dma: u64,
    dma_regions: usize,
    dma_bytes: usize,
    qps: usize,
    cqs: usize,
    mkeys: usize,
    pages: usize,
}

struct Target {
    node: Node,
    svc: TargetService<V, SimRam>,
    baseline: Footprint,
}

impl Target {
    fn footprint(&self) -> Footprint {
        let m = self.node.hal.mem().stats();
        let d = &self.node.v.dev;
        Footprint {
            cm_conns: self.svc.cm.conn_count(),
            connections: self.svc.connections(),
            queues: self.svc.target.queues(),
            ctrls: self.svc.target.core.live_ctrls(),
            pinned_dma: self.svc.target.pinned().dma_bytes,
            dma_regions: m.regions,
            dma_bytes: m.bytes,
            qps: d.live_qps(),
            cqs: d.live_cqs(),
            mkeys: d.live_mkeys(),
            pages: d.pages_held(),
        }
    }
}

/// A live initiator node.
struct Parts {
    node: Node,
    env: Env,
    host: Option<Host<V>>,
    /// The host failed (transport error, keep-alive): reconnect before more I/O.
    failed: bool,
    /// QPs of the node right after bring-up (the CM's own).
    qps0: usize,
}

struct Initiator {
    port: usize,
    parts: Option<Parts>,
    /// Crashed: restarts at this time.
    restart_ns: Option<u64>,
    ops: BTreeMap<(u16, u16), Op>,
    qd: usize,
    queues: u16,
    budget: u64,
    issued: u64,
    next_try_ns: u64,
    /// Next time this initiator wants to run (for the idle clock jump).
    wake_ns: u64,
    rng: SplitMix64,
    incarnation: u64,
    finished: bool,
}

/// The world. Shared (`Rc<RefCell<_>>`) so an initiator's idle hook can run it.
pub struct World {
    cfg: Config,
    me: Weak<RefCell<World>>,
    clock: SimClock,
    fabric: Fabric,
    target: Option<Target>,
    target_restart: Option<(u64, Option<Vec<u8>>)>,
    target_incarnation: u64,
    inits: Vec<Option<Initiator>>,
    model: Model,
    seq: u64,
    next_wid: u64,
    plan: Plan,
    next_action: usize,
    deferred: Vec<Action>,
    idle_ns: u64,
    out: Outcome,
}

impl World {
    fn fail(&mut self, why: String) {
        if self.out.failure.is_none() {
            self.out.failure = Some(format!("t={}us: {why}", self.clock.now_ns() / 1000));
        }
    }

    fn trace(&mut self, a: u64, b: u64) {
        let mut h = self.out.trace ^ a.wrapping_mul(0x100_0000_01b3) ^ b.rotate_left(29) ^ self.clock.now_ns().rotate_left(7);
        h = h.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.out.trace = h ^ (h >> 31);
    }

    fn make_target(&mut self, first: bool, restore: Option<Vec<u8>>) -> Result<(), String> {
        let link = if first { self.fabric.add_port(T_MAC).1 } else { self.fabric.replace_port(0) };
        self.target_incarnation += 1;
        let inc = self.target_incarnation;
        let seed = self.cfg.seed;
        let mut node = Node::with_options(self.clock.clone(), T_IP, T_MAC, 0x1_0000_0000, Box::new(link), Options::default()).map_err(|e| format!("target bring-up: {e:?}"))?;
        for k in 0..self.cfg.initiators {
            node.v.add_neighbor(init_ip(k), init_mac(k)).map_err(|e| format!("neighbour: {e:?}"))?;
        }
        let mut dev = SimRam::new(node.hal.clone(), self.clock.clone(), NS_BLOCKS * BS as u64, branch(seed, 0x100 + inc), DEVICE_NS).ok_or("namespace memory")?;
        if let Some(b) = restore {
            dev.restore(&b);
        }
        let cfg = TargetConfig {
            ports: vec![PortConfig { portid: 1, traddr: T_IP, trsvcid: PORT }],
            inline_data_size: 1024,
            max_io_bytes: 32 * 1024,
            io_queue_depth: 32,
            max_io_queues: 2,
            max_ctrls: 32,
            limits: Limits { cntlid_seed: branch(seed, 0x200 + inc), ..Limits::default() },
            ..TargetConfig::default()
        };
        let subs = vec![SubsystemConfig {
            nqn: SUBNQN.into(),
            serial: "SIM0001".into(),
            model: "appliance sim ram".into(),
            hosts: Vec::new(),
            allow_any_host: true,
            namespaces: vec![NamespaceConfig { nsid: 1, dev, nguid: [0x5a; 16] }],
        }];
        let core = Core::new(cfg, subs).map_err(|e| format!("target config: {e}"))?;
        let mut svc = TargetService::with_cm_config(&mut node.v, core, 64, PORT, cm_config(branch(seed, 0x300 + inc))).map_err(|e| format!("listen: {e:?}"))?;
        svc.target.register_namespaces(&mut node.v);
        let mut t = Target { node, svc, baseline: Footprint { cm_conns: 0, connections: 0, queues: 0, ctrls: 0, pinned_dma: 0, dma_regions: 0, dma_bytes: 0, qps: 0, cqs: 0, mkeys: 0, pages: 0 } };
        t.baseline = t.footprint();
        self.target = Some(t);
        Ok(())
    }

    fn make_parts(&mut self, k: usize, first: bool, inc: u64) -> Result<Parts, String> {
        let link = if first { self.fabric.add_port(init_mac(k)).1 } else { self.fabric.replace_port(k + 1) };
        let base = 0x1_0000_0000 * (2 + k as u64);
        let mut node = Node::with_options(self.clock.clone(), init_ip(k), init_mac(k), base, Box::new(link), Options::default()).map_err(|e| format!("initiator {k} bring-up: {e:?}"))?;
        node.v.add_neighbor(T_IP, T_MAC).map_err(|e| format!("neighbour: {e:?}"))?;
        let cm = Cm::new(&mut node.v, cm_config(branch(self.cfg.seed, 0x400 + k as u64 * 0x1000 + inc))).map_err(|e| format!("cm: {e:?}"))?;
        let qps0 = node.v.dev.live_qps();
        let clock = self.clock.clone();
        let cx = node.cx.clone();
        let me = self.me.clone();
        let env = CmHostEnv::new(
            cm,
            T_IP,
            PORT,
            Box::new(move || clock.now_ns()) as Box<dyn FnMut() -> u64>,
            Box::new(move |v: &mut V| {
                rdma::Verbs::poll(v);
                cx.poll();
                // From a blocking initiator step the rest of the world runs; from inside a
                // turn (the world already borrowed) only this node.
                if let Some(w) = me.upgrade() {
                    if let Ok(mut w) = w.try_borrow_mut() {
                        w.turn();
                    }
                }
            }) as Box<dyn FnMut(&mut V)>,
        );
        Ok(Parts { node, env, host: None, failed: false, qps0 })
    }

    fn host_config(&self, k: usize, queues: u16) -> HostConfig {
        HostConfig {
            hostnqn: format!("nqn.2014-08.org.nvmexpress:uuid:5133d000-0000-0000-0000-0000000000{k:02x}"),
            hostid: [k as u8 + 1; 16],
            kato_ms: KATO_MS as u32,
            io_queues: queues,
            io_depth: 16,
            max_io_bytes: (MAX_BLOCKS as u32) * BS as u32,
            timeout_ns: 2_000 * MS,
            auth_seed: [k as u8; 32],
            ..HostConfig::default()
        }
    }

    /// Initiator `k`'s outstanding I/O is over without an answer (its connection or node went).
    fn abandon(&mut self, k: usize, ops: &mut BTreeMap<(u16, u16), Op>) {
        let now = self.clock.now_ns();
        for op in ops.values() {
            if op.write && op.epoch == self.model.epoch {
                self.model.failed(op.lba, op.n, op.wid, now);
            }
            self.out.io_failed += 1;
        }
        self.trace(0xab, k as u64 * 1000 + ops.len() as u64);
        ops.clear();
    }

    /// Check the ICRC caught every frame corrupted on the way to the node on `port`.
    fn check_icrc(&mut self, port: usize, cx: &testbed::ConnectX) {
        let corrupted = self.fabric.corrupted(port);
        let caught = cx.engine_counters().map_or(0, |c| c.rx_bad_icrc) + cx.counters().rx_bad_icrc_before_resets;
        self.out.corrupted += corrupted;
        if corrupted != caught {
            self.fail(format!("port {port}: {corrupted} frames corrupted on delivery, the engine's ICRC check caught {caught}"));
        }
    }

    /// The adapter of the node on `port` (0: the target, k: initiator k-1): `None` while that
    /// initiator is busy in a blocking step (the action waits for it), `Some(None)` while the
    /// node is down (crashed; nothing to do).
    fn adapter(&self, port: usize) -> Option<Option<testbed::ConnectX>> {
        if port == 0 {
            return Some(self.target.as_ref().map(|t| t.node.cx.clone()));
        }
        self.inits[port - 1].as_ref().map(|i| i.parts.as_ref().map(|p| p.node.cx.clone()))
    }

    fn count_adapter_fault(&mut self, port: usize) {
        if port == 0 {
            self.out.adapter_faults += 1;
        } else {
            self.out.init_adapter_faults += 1;
        }
    }

    fn apply(&mut self, a: Action) {
        let now = self.clock.now_ns();
        match a {
            Action::Impair { port, imp } => self.fabric.set_impairments(port, imp),
            Action::Clear { port } => self.fabric.set_impairments(port, emu_roce::Impairments::default()),
            Action::Corrupt { port, p } => self.fabric.set_corrupt(port, p),
            Action::Down { port } => self.fabric.set_down(port, true),
            Action::Up { port } => self.fabric.set_down(port, false),
            Action::HangCreateQp { port, on } => {
                let Some(cx) = self.adapter(port) else {
                    self.deferred.push(a);
                    return;
                };
                if let Some(cx) = cx {
                    let mut f = cx.faults_mut();
                    if on {
                        f.hang_opcodes.insert(mlx5_ifc::op::CREATE_QP);
                    } else {
                        f.hang_opcodes.remove(&mlx5_ifc::op::CREATE_QP);
                    }
                }
            }
            Action::HealthSyndrome { port, synd } => match self.adapter(port) {
                Some(cx) => {
                    if let Some(cx) = cx {
                        cx.set_health_syndrome(synd);
                    }
                }
                // Busy in a blocking step: when it is back.
                None => {
                    self.deferred.push(a);
                    return;
                }
            },
            Action::InternalError { port } => match self.adapter(port) {
                Some(cx) => {
                    if cx.is_some_and(|cx| cx.raise_internal_error()) {
                        self.count_adapter_fault(port);
                        self.trace(0xe3, port as u64);
                    }
                }
                None => {
                    self.deferred.push(a);
                    return;
                }
            },
            Action::QpError { port, pick } => match self.adapter(port) {
                Some(cx) => {
                    if let Some(qpn) = cx.and_then(|cx| cx.inject_qp_error(pick)) {
                        self.count_adapter_fault(port);
                        self.trace(0xe1, qpn as u64 ^ (port as u64) << 32);
                    }
                }
                None => {
                    self.deferred.push(a);
                    return;
                }
            },
            Action::CqOverrun { port, pick } => match self.adapter(port) {
                Some(cx) => {
                    if let Some(cqn) = cx.and_then(|cx| cx.inject_cq_overrun(pick)) {
                        self.count_adapter_fault(port);
                        self.trace(0xe2, cqn as u64 ^ (port as u64) << 32);
                    }
                }
                None => {
                    self.deferred.push(a);
                    return;
                }
            },
            Action::Mtu { port, mtu } => self.fabric.set_mtu(port, (mtu > 0).then_some(mtu)),
            Action::CrashInit { k, down_ns } => {
                let Some(mut init) = self.inits[k].take() else {
                    // Busy in a blocking step: crash it when it is back.
                    self.deferred.push(a);
                    return;
                };
                if let Some(p) = init.parts.take() {
                    self.check_icrc(init.port, &p.node.cx);
                    self.out.init_recoveries += p.env.recoveries;
                    drop(p);
                    self.fabric.detach(init.port);
                    let mut ops = core::mem::take(&mut init.ops);
                    self.abandon(k, &mut ops);
                    init.restart_ns = Some(now + down_ns);
                    init.incarnation += 1;
                    self.out.crashes += 1;
                }
                self.inits[k] = Some(init);
            }
            Action::CrashTarget { keep, down_ns } => {
                let keep = self.cfg.keep_namespace.unwrap_or(keep);
                if let Some(mut t) = self.target.take() {
                    self.check_icrc(0, &t.node.cx);
                    self.out.recoveries += t.svc.stats.device_recoveries;
                    let saved = keep.then(|| t.svc.target.core.namespace_dev(SUBNQN, 1).expect("namespace").contents());
                    drop(t);
                    self.fabric.detach(0);
                    if !keep {
                        self.seq += 1;
                        self.model.reset(self.seq, now);
                    }
                    self.target_restart = Some((now + down_ns, saved));
                    self.out.crashes += 1;
                }
            }
        }
        self.trace(0xfa, format!("{a:?}").len() as u64);
        if self.cfg.verbose {
            eprintln!("sim: {}us {a:?}", now / 1000);
        }
    }

    /// One turn of everything present; advances the clock.
    pub fn turn(&mut self) {
        self.out.turns += 1;
        let now = self.clock.now_ns();
        while self.next_action < self.plan.actions.len() && self.plan.actions[self.next_action].0 <= now {
            let a = self.plan.actions[self.next_action].1;
            self.next_action += 1;
            self.apply(a);
        }
        for a in core::mem::take(&mut self.deferred) {
            self.apply(a);
        }
        if self.target.is_none() && self.target_restart.as_ref().is_some_and(|r| r.0 <= now) {
            let (_, saved) = self.target_restart.take().expect("checked");
            if let Err(e) = self.make_target(false, saved) {
                self.fail(e);
            }
        }
        let mut work = 0;
        if let Some(t) = self.target.as_mut() {
            work += t.svc.poll(&mut t.node.v, now);
            rdma::Verbs::poll(&mut t.node.v);
            work += t.node.cx.poll();
        }
        let mut wake = self.plan.actions.get(self.next_action).map_or(u64::MAX, |a| a.0);
        if let Some((t, _)) = &self.target_restart {
            wake = wake.min(*t);
        }
        for k in 0..self.inits.len() {
            let Some(mut init) = self.inits[k].take() else { continue };
            if init.parts.is_none() && init.restart_ns.is_some_and(|t| t <= now) {
                init.restart_ns = None;
                match self.make_parts(k, false, init.incarnation) {
                    Ok(p) => init.parts = Some(p),
                    Err(e) => self.fail(e),
                }
            }
            if let Some(p) = init.parts.as_mut() {
                work += p.node.cx.poll();
                nvmeof::host::HostEnv::idle(&mut p.env, &mut p.node.v);
                if let (Some(h), false) = (p.host.as_mut(), p.failed) {
                    if h.tick(&mut p.node.v, now).is_err() {
                        p.failed = true;
                    }
                }
            }
            // A wake time already past belongs to an initiator waiting for a blocking step of
            // another one to return; advancing slowly would not serve it.
            for t in [init.wake_ns, init.restart_ns.unwrap_or(u64::MAX)] {
                if t > now {
                    wake = wake.min(t);
                }
            }
            self.inits[k] = Some(init);
        }
        work += self.fabric.forward();
        let step = if work > 0 {
            self.idle_ns = TURN_NS;
            TURN_NS
        } else {
            self.idle_ns = (self.idle_ns * 2).min(MAX_IDLE_NS);
            let mut s = self.idle_ns;
            if let Some(d) = self.fabric.next_delivery() {
                s = s.min(d.saturating_sub(now));
            }
            s.min(wake.saturating_sub(now)).max(TURN_NS)
        };
        self.clock.advance(step);
    }
}

/// The shared world and its run loop.
pub struct Sim {
    w: Rc<RefCell<World>>,
    clock: SimClock,
}

impl Sim {
    pub fn new(cfg: Config) -> Result<Sim, String> {
        let clock = SimClock::new();
        clock.advance(MS);
        let seed = cfg.seed;
        let mut rng = SplitMix64::new(branch(seed, 1));
        let plan = faults::draw(&mut rng, &cfg.faults, cfg.initiators + 1, SPAN_NS, KATO_MS);
        let n = cfg.initiators;
        let w = Rc::new(RefCell::new(World {
            me: Weak::new(),
            clock: clock.clone(),
            fabric: Fabric::new(clock.clone(), branch(seed, 2)),
            target: None,
            target_restart: None,
            target_incarnation: 0,
            inits: (0..n).map(|_| None).collect(),
            model: Model::new(NS_BLOCKS as usize, GRACE_NS),
            seq: 0,
            next_wid: 1,
            out: Outcome { drawn: plan.drawn.clone(), ..Outcome::default() },
            plan,
            next_action: 0,
            deferred: Vec::new(),
            idle_ns: TURN_NS,
            cfg,
        }));
        {
            let mut wm = w.borrow_mut();
            wm.me = Rc::downgrade(&w);
            wm.make_target(true, None)?;
            let ops = wm.cfg.ops;
            for k in 0..n {
                let mut r = SplitMix64::new(branch(seed, 0x10 + k as u64));
                let qd = 1 + r.below(8) as usize;
                let queues = 1 + r.below(2) as u16;
                let budget = ops / n as u64 + u64::from((k as u64) < ops % n as u64);
                wm.inits[k] = Some(Initiator {
                    port: k + 1,
                    parts: None,
                    restart_ns: None,
                    ops: BTreeMap::new(),
                    qd,
                    queues,
                    budget,
                    issued: 0,
                    next_try_ns: 0,
                    wake_ns: 0,
                    rng: r,
                    incarnation: 0,
                    finished: false,
                });
                let p = wm.make_parts(k, true, 0)?;
                wm.inits[k].as_mut().expect("just made").parts = Some(p);
            }
        }
        Ok(Sim { w, clock })
    }

    /// Run to the end; the outcome says whether every check held.
    pub fn run(self) -> Outcome {
        let n = self.w.borrow().inits.len();
        let fault_end = self.w.borrow().plan.end_ns;
        let deadline = fault_end.max(SPAN_NS) + PROGRESS_NS;
        loop {
            for k in 0..n {
                self.step(k);
            }
            self.w.borrow_mut().turn();
            let w = self.w.borrow();
            if w.out.failure.is_some() {
                break;
            }
            if w.inits.iter().all(|i| i.as_ref().is_some_and(|i| i.finished)) {
                break;
            }
            if self.clock.now_ns() > deadline {
                drop(w);
                let detail = self.stuck();
                self.w.borrow_mut().fail(format!("no progress {}s after the faults stopped: {detail}", PROGRESS_NS / 1_000_000_000));
                break;
            }
        }
        if self.w.borrow().out.failure.is_none() {
            self.settle();
        }
        let mut w = self.w.borrow_mut();
        let recoveries = w.target.as_ref().map_or(0, |t| t.svc.stats.device_recoveries);
        let init_recoveries = w.inits.iter().flatten().filter_map(|i| i.parts.as_ref()).map(|p| p.env.recoveries).sum::<u64>();
        w.out.init_recoveries += init_recoveries;
        w.out.recoveries += recoveries;
        let frames = w.fabric.stats().sent;
        w.out.frames = frames;
        w.out.mtu_drops = w.fabric.mtu_drops();
        w.out.virtual_ns = self.clock.now_ns();
        let out = w.out.clone();
        // Break the cycle (initiator hooks hold a weak reference only; nothing to do).
        out
    }

    fn stuck(&self) -> String {
        let w = self.w.borrow();
        let mut s = Vec::new();
        for (k, i) in w.inits.iter().enumerate() {
            let Some(i) = i else { continue };
            let state = match &i.parts {
                None => "crashed",
                Some(p) if p.host.is_none() => "not connected",
                Some(p) if p.failed => "failed",
                Some(_) => "connected",
            };
            let oldest = i.ops.iter().next().map(|(q, o)| format!(" oldest queue {} slot {} lba {} seq {}", q.0, q.1, o.lba, o.seq)).unwrap_or_default();
            s.push(format!("initiator {k} {state} issued {}/{} outstanding {}{oldest}", i.issued, i.budget, i.ops.len()));
        }
        s.join("; ")
    }

    /// When op number `i` of `budget` may be issued.
    fn issue_time(i: u64, budget: u64) -> u64 {
        MS + i * SPAN_NS / budget.max(1)
    }

    fn step(&self, k: usize) {
        let Some(mut init) = self.w.borrow_mut().inits[k].take() else { return };
        self.step_with(k, &mut init);
        let mut w = self.w.borrow_mut();
        w.inits[k] = Some(init);
    }

    fn step_with(&self, k: usize, init: &mut Initiator) {
        let now = self.clock.now_ns();
        init.wake_ns = u64::MAX;
        if init.finished || self.w.borrow().out.failure.is_some() {
            return;
        }
        let Some(p) = init.parts.as_mut() else { return };
        if p.host.is_none() {
            if now < init.next_try_ns {
                init.wake_ns = init.next_try_ns;
                return;
            }
            let cfg = self.w.borrow().host_config(k, init.queues);
            let r = Host::connect(&mut p.node.v, &mut p.env, cfg, SUBNQN);
            let mut w = self.w.borrow_mut();
            w.out.connects += 1;
            match r {
                Ok(h) => {
                    if w.cfg.verbose {
                        eprintln!("sim: {}us initiator {k} connected", self.clock.now_ns() / 1000);
                    }
                    w.trace(0xc0, k as u64);
                    p.host = Some(h);
                    p.failed = false;
                }
                Err(e) => {
                    w.trace(0xcf, k as u64);
                    if w.cfg.verbose {
                        eprintln!("sim: {}us initiator {k} connect: {e:?}", self.clock.now_ns() / 1000);
                    }
                    init.next_try_ns = self.clock.now_ns() + 50 * MS;
                }
            }
            return;
        }
        if p.failed {
            if self.w.borrow().cfg.verbose {
                eprintln!("sim: {}us initiator {k} connection failed ({} I/O outstanding); reconnecting", now / 1000, init.ops.len());
            }
            self.w.borrow_mut().abandon(k, &mut init.ops);
            let h = p.host.as_mut().expect("checked");
            let r = h.reconnect(&mut p.node.v, &mut p.env);
            let mut w = self.w.borrow_mut();
            w.out.reconnects += 1;
            match r {
                Ok(()) => {
                    if w.cfg.verbose {
                        eprintln!("sim: {}us initiator {k} reconnected", self.clock.now_ns() / 1000);
                    }
                    w.trace(0xc1, k as u64);
                    p.failed = false;
                }
                Err(e) => {
                    w.trace(0xcd, k as u64);
                    if w.cfg.verbose {
                        eprintln!("sim: {}us initiator {k} reconnect: {e:?}", self.clock.now_ns() / 1000);
                    }
                    p.host = None;
                    init.next_try_ns = self.clock.now_ns() + 50 * MS;
                }
            }
            return;
        }
        // Completions (all reaped first; a read's data is checked before its slot is reused).
        let mut done = [IoDone { queue: 0, slot: 0, status: nvmeof::Status::SUCCESS, dw0: 0, latency_ns: 0 }; 16];
        let mut reaped: Vec<IoDone> = Vec::new();
        let h = p.host.as_mut().expect("checked");
        loop {
            match h.poll(&mut p.node.v, now, &mut done) {
                Ok(n) => {
                    reaped.extend_from_slice(&done[..n]);
                    if n < done.len() {
                        break;
                    }
                }
                Err(_) => {
                    p.failed = true;
                    break;
                }
            }
        }
        let failed = p.failed;
        for d in &reaped {
            self.complete(k, init, d);
        }
        if failed {
            return;
        }
        let Some(p) = init.parts.as_mut() else { return };
        let h = p.host.as_mut().expect("checked");
        if h.tick(&mut p.node.v, now).is_err() {
            p.failed = true;
            return;
        }
        // New work.
        let (nq, _) = h.io_queues();
        while init.ops.len() < init.qd && init.issued < init.budget && now >= Self::issue_time(init.issued, init.budget) {
            let q = 1 + (init.issued % nq.max(1) as u64) as u16;
            let Some(slot) = h.alloc_slot(q) else { break };
            let write = init.rng.below(2) == 0;
            let n = 1 + init.rng.below(MAX_BLOCKS) as u32;
            let lba = init.rng.below(NS_BLOCKS - n as u64 + 1);
            let mut w = self.w.borrow_mut();
            w.seq += 1;
            let seq = w.seq;
            let epoch = w.model.epoch;
            let wid = if write {
                let wid = w.next_wid;
                w.next_wid += 1;
                let (buf, off, _) = h.slot_buf(q, slot);
                let mut b = [0u8; BS];
                for i in 0..n as u64 {
                    fill_block(w.cfg.seed, lba + i, wid, &mut b);
                    hal::DmaRegion::write(buf, off + i as usize * BS, &b);
                }
                w.model.submitted(lba, n, wid, seq, now);
                wid
            } else {
                0
            };
            init.ops.insert((q, slot), Op { write, lba, n, wid, seq, epoch });
            init.issued += 1;
            w.trace(if write { 0x77 } else { 0x72 }, lba * 16 + n as u64);
            drop(w);
            let kind = if write { IoKind::Write } else { IoKind::Read };
            if h.submit(&mut p.node.v, q, slot, kind, 1, lba, n, now).is_err() {
                p.failed = true;
                return;
            }
        }
        if init.issued < init.budget && init.ops.len() < init.qd {
            init.wake_ns = Self::issue_time(init.issued, init.budget);
        }
        if init.issued >= init.budget && init.ops.is_empty() {
            self.finish(k, init);
        }
    }

    /// One completion of initiator `k`.
    fn complete(&self, k: usize, init: &mut Initiator, d: &IoDone) {
        let mut w = self.w.borrow_mut();
        let now = self.clock.now_ns();
        let Some(op) = init.ops.remove(&(d.queue, d.slot)) else {
            w.fail(format!("initiator {k}: completion on queue {} slot {} with no command outstanding there (completed twice, or never sent)", d.queue, d.slot));
            return;
        };
        w.seq += 1;
        let seq = w.seq;
        let ok = d.status.is_success();
        w.trace(0xd0 + ok as u64, op.wid ^ op.lba << 20 ^ (d.queue as u64) << 40);
        w.out.ops += 1;
        if !ok {
            // Faults here break connections (the host sees a transport failure); none makes a
            // valid command fail with an NVMe status.
            w.out.error_status += 1;
            w.fail(format!("initiator {k}: queue {} {} lba {}+{} completed with status {:?}", d.queue, if op.write { "write" } else { "read" }, op.lba, op.n, d.status));
        }
        let current = op.epoch == w.model.epoch;
        if op.write {
            if !current {
                return;
            }
            if ok {
                w.model.acked(op.lba, op.n, op.wid, seq);
                w.out.writes_acked += 1;
                let horizon = init.ops.values().chain(w.inits.iter().flatten().flat_map(|i| i.ops.values())).filter(|o| !o.write).map(|o| o.seq).min().unwrap_or(seq);
                w.model.prune(op.lba, op.n, horizon);
            } else {
                w.model.failed(op.lba, op.n, op.wid, now);
            }
            return;
        }
        if !ok || !current {
            return;
        }
        let h = init.parts.as_ref().and_then(|p| p.host.as_ref()).expect("live host");
        let (buf, off, _) = h.slot_buf(d.queue, d.slot);
        let mut b = [0u8; BS];
        for i in 0..op.n as u64 {
            hal::DmaRegion::read(buf, off + i as usize * BS, &mut b);
            let lba = op.lba + i;
            let r = decode_block(w.cfg.seed, lba, &b).and_then(|wid| {
                w.trace(0xee, wid);
                w.model.check_read(lba, wid, op.seq)
            });
            match r {
                Ok(()) => w.out.blocks_verified += 1,
                Err(e) => {
                    w.fail(format!("initiator {k}: queue {} read lba {}+{}: {e}", d.queue, op.lba, op.n));
                    return;
                }
            }
        }
    }

    /// Initiator `k` did its share: disconnect, once the faults are over and two keep-alive
    /// timeouts have passed (a connection a fault broke is found dead and made again by then,
    /// so the orderly disconnect must succeed).
    fn finish(&self, k: usize, init: &mut Initiator) {
        let now = self.clock.now_ns();
        let quiet = self.w.borrow().plan.end_ns + 2 * KATO_MS * MS;
        if now <= quiet {
            init.wake_ns = quiet + 1;
            return;
        }
        let Some(p) = init.parts.as_mut() else { return };
        let Some(h) = p.host.take() else { return };
        if let Err(e) = h.disconnect(&mut p.node.v, &mut p.env) {
            self.w.borrow_mut().fail(format!("initiator {k}: disconnect after the faults stopped: {e:?}"));
        }
        self.w.borrow_mut().trace(0xdd, k as u64);
        init.finished = true;
    }

    /// After every initiator disconnected: the target and the initiators back at their
    /// baselines, and the ICRC accounting of every port.
    fn settle(&self) {
        let until = self.clock.now_ns() + SETTLE_NS;
        loop {
            self.w.borrow_mut().turn();
            let w = self.w.borrow();
            let t_ok = w.target.as_ref().is_some_and(|t| t.footprint() == t.baseline);
            let i_ok = w.inits.iter().flatten().all(|i| i.parts.as_ref().is_some_and(|p| p.env.tracked() == 0 && p.env.cm.conn_count() == 0 && p.node.v.dev.live_qps() == p.qps0));
            if t_ok && i_ok {
                break;
            }
            if self.clock.now_ns() > until {
                drop(w);
                let mut w = self.w.borrow_mut();
                let msg = match w.target.as_ref() {
                    Some(t) => format!("30s after the last disconnect: target {:?}, baseline {:?}; initiators ok: {i_ok}", t.footprint(), t.baseline),
                    None => "target not running at the end".into(),
                };
                w.fail(format!("leak: {msg}"));
                return;
            }
        }
        let mut w = self.w.borrow_mut();
        if let Some(t) = w.target.take() {
            w.check_icrc(0, &t.node.cx);
            w.target = Some(t);
        }
        for k in 0..w.inits.len() {
            if let Some(i) = w.inits[k].take() {
                if let Some(p) = &i.parts {
                    w.check_icrc(i.port, &p.node.cx);
                }
                w.inits[k] = Some(i);
            }
        }
    }
}

/// Run one seed.
pub fn run(cfg: Config) -> Outcome {
    match Sim::new(cfg) {
        Ok(s) => s.run(),
        Err(e) => Outcome { failure: Some(format!("setup: {e}")), ..Outcome::default() },
    }
}
