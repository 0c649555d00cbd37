//! world: one simulated world: T target nodes (mlx5 driver over an emulated ConnectX, the real
//! IB CM and NVMe-oF target serving its own RAM namespace) and N initiator nodes (the same
//! driver and adapter model, the real CM and NVMe-oF initiator, a controller on every target),
//! joined by the [`Fabric`], all advancing on one virtual clock in one thread. A turn polls
//! every node and the switch; when nothing happened the clock jumps straight to the earliest
//! timer anything reports ([`World::next_timer`]: frame deliveries, faults, the workload, every
//! node's CM, driver, adapter, transport, keep-alive and namespace); while an initiator is busy
//! in a blocking step (it cannot report then) it ramps up to at most `MAX_IDLE_NS` a turn. An
//! initiator's controllers reconnect through the product's state machine
//! (`nvmeof::host::controllers`), advanced a step per turn; the steps that still wait (an
//! orderly disconnect) run the rest of the world from the initiator's idle hook.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::{Rc, Weak};

use emu_roce::link::SplitMix64;
use nvmeof::host::cm_env::CmHostEnv;
use nvmeof::host::controllers::{Controllers, CtrlEvent, CtrlState, TargetAddr};
use nvmeof::host::{HostConfig, IoDone, IoKind};
use nvmeof::nvmet::service::TargetService;
use nvmeof::nvmet::{Core, Limits, NamespaceConfig, PortConfig, SubsystemConfig, TargetConfig};
use rdma::cm::{Cm, CmConfig};
use testbed::{Node, Options, SimClock};

use crate::device::SimRam;
use crate::fabric::Fabric;
use crate::faults::{self, Action, Kind, Plan};
use crate::model::{decode_block, fill_block, Model, BS_MAX};

mod drive;
use drive::Sim;

type V = testbed::Verbs;
type Env = CmHostEnv<V, Box<dyn FnMut() -> u64>, Box<dyn FnMut(&mut V)>>;

pub const SUBNQN: &str = "nqn.2026-01.io.appliance:sim";
const PORT: u16 = 4420;
/// Namespace: 512 blocks of 512 bytes (small: writes collide often).
const NS_BLOCKS: u64 = 512;
/// Largest I/O, in blocks.
const MAX_BLOCKS: u64 = 8;
/// The hot spot: one I/O in four lands in the namespace's first blocks, so commands of
/// different queues (and poll groups) overlap in time often enough to check their ordering.
const HOT_BLOCKS: u64 = 16;
const MS: u64 = 1_000_000;
/// Clock step of a turn that did something.
const TURN_NS: u64 = 1_000;
/// Longest clock step of an idle turn while an initiator is busy in a blocking step (it cannot
/// report its timers), and under `--check-timers`.
const MAX_IDLE_NS: u64 = 2 * MS;
/// Idle turns in a row past a timer due before a failure says so (it is reported, not served).
const DUE_UNSERVED_TURNS: u32 = 10_000;
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
    /// Target nodes (1-4), each serving its own subsystem and namespace; every initiator
    /// connects to every target.
    pub targets: usize,
    pub initiators: usize,
    /// Operations over all initiators.
    pub ops: u64,
    pub faults: Vec<Kind>,
    /// Print faults and connection events to stderr as they happen.
    pub verbose: bool,
    /// Whether a target crash keeps its RAM namespace (`Some`), or the seed decides (`None`).
    pub keep_namespace: Option<bool>,
    /// Move the clock as before the jumps over idle time (ramping up to `MAX_IDLE_NS`) and
    /// fail if anything happens before the earliest timer the nodes reported.
    pub check_timers: bool,
    /// The namespaces' block size, one of [`crate::model::BLOCK_SIZES`].
    pub block_size: usize,
}

/// What made an initiator fail a controller (time-to-notice of a crashed target).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Noticed {
    /// Not seen (released for another reason, e.g. the device failed).
    #[default]
    Other,
    /// A work request's error completion (transport retries exhausted, flushed).
    Transport,
    /// No Keep Alive answer within KATO.
    KeepAlive,
}

impl Noticed {
    fn of<E>(e: &nvmeof::Error<E>) -> Self {
        match e {
            nvmeof::Error::Transport(_) => Noticed::Transport,
            nvmeof::Error::Target(nvmeof::host::TargetFault::KeepAlive { .. }) => Noticed::KeepAlive,
            _ => Noticed::Other,
        }
    }
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
    /// Completions from a target while another target was down (crashed).
    pub ops_while_a_target_down: u64,
    /// Per (initiator, target crash) with the initiator's controller connected at the crash:
    /// virtual ns from the crash until that controller was released, and what made the
    /// initiator fail it (not in [`Outcome::line`]: the campaign's lines stay as they were).
    pub crash_notice: Vec<(u64, Noticed)>,
    /// Completions an initiator reaped from one target while its own controller on another
    /// target was not connected (being released, backing off or reconnecting).
    pub ops_while_own_reconnect: u64,
    /// Target poll groups found broken (a CQ overrun) and replaced once their queues were gone
    /// (not in [`Outcome::line`]).
    pub groups_replaced: u64,
    pub corrupted: u64,
    /// Controllers deleted by a subsystem unlinked from its port, and Connects refused as for
    /// an invalid subsystem (SCT 1, SC 0x82, DNR) while it was (not in [`Outcome::line`]).
    pub unlinked_ctrls: u64,
    pub refused_unlinked: u64,
    /// Frames the switch dropped for exceeding a port's MTU.
    pub mtu_drops: u64,
    pub frames: u64,
    pub virtual_ns: u64,
    pub turns: u64,
    pub trace: u64,
    pub drawn: Vec<Kind>,
    /// Poll groups of each target (drawn per seed and target, 1..4, kept across restarts).
    pub poll_groups: Vec<usize>,
    /// Reads and writes the targets' namespaces moved (`NsReport::dev`: the store's and every
    /// poll group's handles'), and those of them the store itself (`Core`'s) moved (not in
    /// [`Outcome::line`]).
    pub ns_ios: u64,
    pub store_ios: u64,
}

impl Outcome {
    /// The one-line summary of a seed (identical for identical runs).
    pub fn line(&self, seed: u64) -> String {
        let faults = if self.drawn.is_empty() { "none".to_string() } else { self.drawn.iter().map(|k| k.name()).collect::<Vec<_>>().join(",") };
        format!(
            "seed={seed} {} ops={} blocks_verified={} writes_acked={} io_failed={} error_status={} connects={} reconnects={} crashes={} recoveries={} init_recoveries={} adapter_faults={} init_adapter_faults={} ops_while_a_target_down={} ops_while_own_reconnect={} corrupted={} mtu_drops={} frames={} vtime_ms={} turns={} faults={faults} poll_groups={} trace={:016x}",
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
            self.ops_while_a_target_down,
            self.ops_while_own_reconnect,
            self.corrupted,
            self.mtu_drops,
            self.frames,
            self.virtual_ns / MS,
            self.turns,
            self.poll_groups.iter().map(|g| g.to_string()).collect::<Vec<_>>().join(","),
            self.trace
        )
    }
}

/// Independent branches of the seed's RNG tree.
/// Target `j`'s poll groups for `seed`: 1 to 4, the same in every incarnation.
pub fn poll_groups(seed: u64, j: usize) -> usize {
    1 + (branch(seed, 0x500 + j as u64) % 4) as usize
}

fn branch(seed: u64, what: u64) -> u64 {
    SplitMix64::new(seed ^ what.wrapping_mul(0xA076_1D64_78BD_642F)).next_u64()
}

fn cm_config(seed: u64) -> CmConfig {
    // Virtual time is cheap but not free: CM retries at ~268 ms, 4 of them; RC retransmit at
    // ~67 ms; timewait 500 ms.
    CmConfig { cm_response_timeout: 16, max_cm_retries: 4, local_ack_timeout: 14, timewait_ns: 500 * MS, seed, ..CmConfig::default() }
}

/// Target `j`'s subsystem (each target serves its own namespace).
pub fn subnqn(j: usize) -> String {
    if j == 0 {
        SUBNQN.into()
    } else {
        format!("{SUBNQN}-t{j}")
    }
}
fn t_ip(j: usize) -> [u8; 4] {
    [10, 77, 0, 1 + j as u8]
}
fn t_mac(j: usize) -> [u8; 6] {
    [0x52, 0x54, 0, 0x77, 0, 1 + j as u8]
}
fn t_addr(j: usize) -> TargetAddr {
    TargetAddr { ip: t_ip(j), port: PORT }
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
    /// The target (its model) the I/O went to.
    t: usize,
    write: bool,
    lba: u64,
    n: u32,
    wid: u64,
    seq: u64,
    /// Virtual time of the submission.
    ns: u64,
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
        let d = &self.node.v;
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

/// A live initiator node: one CM (one env, pointed at a controller's target before each of
/// its connects) and a controller per target, whose (re)connects and device-failure rule are
/// the product's (`nvmeof::host::controllers`).
struct Parts {
    node: Node,
    env: Env,
    ctrls: Controllers<V>,
    /// QPs of the node right after bring-up (the CM's own).
    qps0: usize,
}

struct Initiator {
    port: usize,
    parts: Option<Parts>,
    /// Crashed: restarts at this time.
    restart_ns: Option<u64>,
    /// Outstanding I/O by (target, queue, slot).
    ops: BTreeMap<(usize, u16, u16), Op>,
    qd: usize,
    queues: u16,
    budget: u64,
    issued: u64,
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
    /// Target `j` on switch port `j`; initiator `k` on port `targets + k`.
    targets: Vec<Option<Target>>,
    target_restart: Vec<Option<(u64, Option<Vec<u8>>)>>,
    target_incarnation: Vec<u64>,
    /// Boxed: an initiator is taken out of the world for each of its steps and turns (the node,
    /// its driver and controllers are large; moving them by value was a fifth of the run time).
    inits: Vec<Option<Box<Initiator>>>,
    /// The block model of each target's namespace.
    models: Vec<Model>,
    seq: u64,
    next_wid: u64,
    plan: Plan,
    next_action: usize,
    /// Actions that could not be done when due (an initiator busy in a blocking step), with
    /// the time they were due.
    deferred: Vec<(u64, Action)>,
    /// How much later than planned the latest fault action was done: a node's blocking
    /// firmware command freezes the world (a hung CREATE_QP waits out the driver's command
    /// timeout, 2 s here), a deferred action waits for its initiator; the faults end that much
    /// later than the plan says ([`World::faults_end_ns`]).
    fault_lag_ns: u64,
    idle_ns: u64,
    /// When the last turn that did something ran.
    changed_ns: u64,
    /// `--check-timers`: the earliest timer reported at the last idle turn (0: none), and by what.
    promised_ns: u64,
    promised_by: &'static str,
    /// Idle turns in a row whose earliest timer was already due.
    due_unserved: u32,
    /// `[k][j]`: when target `j` crashed while initiator `k`'s controller on it was live, until
    /// the initiator released that controller; and why `k` failed it last.
    crash_unnoticed: Vec<Vec<Option<u64>>>,
    /// `[port]`: CQ overruns the fault plan injected into the adapter of the node now on that
    /// port (0 again when the node is made anew); every other overrun fails the seed.
    cq_overruns_injected: Vec<u64>,
    fail_why: Vec<Vec<Noticed>>,
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

    /// Switch port of initiator `k`.
    /// The adapter of the node on `port` overran no CQ the fault plan did not overrun (a host
    /// that keeps more completion-producing work than its CQ holds, or an adapter that makes
    /// CQEs it should not), then [`World::check_icrc`].
    /// Add target `j`'s namespace I/O counts to the outcome (at its crash, at the end).
    fn count_ns_ios(&mut self, j: usize, t: &mut Target) {
        let moved = |c: blockdev::DevCounters| c.zero_copy + c.copied;
        self.out.ns_ios += t.svc.target.namespace_stats().map(|r| moved(r.dev)).sum::<u64>();
        self.out.store_ios += t.svc.target.core.namespace_dev(&subnqn(j), 1).map_or(0, |d| moved(blockdev::BlockDevice::counters(d)));
    }

    fn check_adapter(&mut self, port: usize, cx: &testbed::ConnectX) {
        let seen = cx.counters().cq_overruns;
        let injected = self.cq_overruns_injected[port];
        if seen != injected {
            self.fail(format!("port {port}: {seen} CQ overruns, {injected} of them injected"));
        }
        self.check_icrc(port, cx);
    }

    fn init_port(&self, k: usize) -> usize {
        self.cfg.targets + k
    }

    fn make_target(&mut self, j: usize, first: bool, restore: Option<Vec<u8>>) -> Result<(), String> {
        let link = if first { self.fabric.add_port(t_mac(j)).1 } else { self.fabric.replace_port(j) };
        self.cq_overruns_injected[j] = 0;
        self.target_incarnation[j] += 1;
        // Target 0 draws as a lone target always did; the others from their own branches.
        let inc = self.target_incarnation[j] + j as u64 * 0x1_0000;
        let seed = self.cfg.seed;
        let base = if j == 0 { 0x1_0000_0000 } else { 0x1_0000_0000 * (0x10 + j as u64) };
        let mut node = Node::with_options(self.clock.clone(), t_ip(j), t_mac(j), base, Box::new(link), Options::default()).map_err(|e| format!("target {j} bring-up: {e:?}"))?;
        for k in 0..self.cfg.initiators {
            node.v.add_neighbor(init_ip(k), init_mac(k)).map_err(|e| format!("neighbour: {e:?}"))?;
        }
        let mut dev = SimRam::new(node.hal.clone(), self.clock.clone(), NS_BLOCKS * self.cfg.block_size as u64, self.cfg.block_size as u32, branch(seed, 0x100 + inc), DEVICE_NS).ok_or("namespace memory")?;
        if let Some(b) = restore {
            dev.restore(&b);
        }
        let cfg = TargetConfig {
            ports: vec![PortConfig { portid: 1, traddr: t_ip(j), trsvcid: PORT, subsystems: None }],
            inline_data_size: 1024,
            max_io_bytes: 32 * 1024,
            io_queue_depth: 32,
            max_io_queues: 2,
            max_ctrls: 32,
            limits: Limits { cntlid_seed: branch(seed, 0x200 + inc), ..Limits::default() },
            ..TargetConfig::default()
        };
        let subs = vec![SubsystemConfig {
            nqn: subnqn(j),
            serial: format!("SIM000{}", j + 1),
            model: "appliance sim ram".into(),
            hosts: Vec::new(),
            allow_any_host: true,
            namespaces: vec![NamespaceConfig { nsid: 1, dev, nguid: [0x5a + j as u8; 16] }],
        }];
        let core = Core::new(cfg, subs).map_err(|e| format!("target config: {e}"))?;
        let mut svc = TargetService::with_cm_config(&mut node.v, core, 64, PORT, cm_config(branch(seed, 0x300 + inc))).map_err(|e| format!("listen: {e:?}"))?;
        svc.target.register_namespaces(&mut node.v);
        svc.target.set_poll_groups(poll_groups(seed, j));
        let mut t = Target { node, svc, baseline: Footprint { cm_conns: 0, connections: 0, queues: 0, ctrls: 0, pinned_dma: 0, dma_regions: 0, dma_bytes: 0, qps: 0, cqs: 0, mkeys: 0, pages: 0 } };
        t.baseline = t.footprint();
        self.targets[j] = Some(t);
        Ok(())
    }

    fn make_parts(&mut self, k: usize, first: bool, inc: u64, queues: u16) -> Result<Parts, String> {
        let link = if first { self.fabric.add_port(init_mac(k)).1 } else { self.fabric.replace_port(self.init_port(k)) };
        let port = self.init_port(k);
        self.cq_overruns_injected[port] = 0;
        let base = 0x1_0000_0000 * (2 + k as u64);
        let mut node = Node::with_options(self.clock.clone(), init_ip(k), init_mac(k), base, Box::new(link), Options::default()).map_err(|e| format!("initiator {k} bring-up: {e:?}"))?;
        for j in 0..self.cfg.targets {
            node.v.add_neighbor(t_ip(j), t_mac(j)).map_err(|e| format!("neighbour: {e:?}"))?;
        }
        let cm = Cm::new(&mut node.v, cm_config(branch(self.cfg.seed, 0x400 + k as u64 * 0x1000 + inc))).map_err(|e| format!("cm: {e:?}"))?;
        let qps0 = node.v.live_qps();
        let clock = self.clock.clone();
        let cx = node.cx.clone();
        let me = self.me.clone();
        let env = CmHostEnv::new(
            cm,
            t_ip(0),
            PORT,
            Box::new(move || clock.now_ns()) as Box<dyn FnMut() -> u64>,
            Box::new(move |v: &mut V| {
                rdma::Control::poll(v);
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
        let names: Vec<String> = (0..self.cfg.targets).map(subnqn).collect();
        let targets: Vec<(TargetAddr, &str)> = names.iter().enumerate().map(|(j, n)| (t_addr(j), n.as_str())).collect();
        let ctrls = Controllers::new(&self.host_config(k, queues), &targets);
        Ok(Parts { node, env, ctrls, qps0 })
    }

    fn host_config(&self, k: usize, queues: u16) -> HostConfig {
        HostConfig {
            hostnqn: format!("nqn.2014-08.org.nvmexpress:uuid:5133d000-0000-0000-0000-0000000000{k:02x}"),
            hostid: [k as u8 + 1; 16],
            kato_ms: KATO_MS as u32,
            io_queues: queues,
            io_depth: 16,
            max_io_bytes: (MAX_BLOCKS as u32) * self.cfg.block_size as u32,
            timeout_ns: 2_000 * MS,
            // The fault schedule is timed for a quick retry (the product's default is 1 s).
            reconnect_delay_ns: 50 * MS,
            auth_seed: [k as u8; 32],
            ..HostConfig::default()
        }
    }

    /// Initiator `k`'s outstanding I/O is over without an answer (its connection or node went).
    /// (Of target `t` only, or of every target.)
    fn abandon(&mut self, k: usize, ops: &mut BTreeMap<(usize, u16, u16), Op>, t: Option<usize>) {
        let now = self.clock.now_ns();
        let before = ops.len();
        ops.retain(|_, op| {
            if t.is_some_and(|t| t != op.t) {
                return true;
            }
            if op.epoch == self.models[op.t].epoch {
                self.models[op.t].overlap_done(op.lba, op.n, op.ns, now);
                if op.write {
                    self.models[op.t].failed(op.lba, op.n, op.wid, now);
                }
            }
            self.out.io_failed += 1;
            false
        });
        self.trace(0xab, k as u64 * 1000 + (before - ops.len()) as u64);
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
        if let Some(t) = self.targets.get(port) {
            return Some(t.as_ref().map(|t| t.node.cx.clone()));
        }
        self.inits[port - self.cfg.targets].as_ref().map(|i| i.parts.as_ref().map(|p| p.node.cx.clone()))
    }

    fn count_adapter_fault(&mut self, port: usize) {
        if port < self.cfg.targets {
            self.out.adapter_faults += 1;
        } else {
            self.out.init_adapter_faults += 1;
        }
    }

    /// When the faults are over: the plan's end, moved by the lateness of its latest action.
    pub(crate) fn faults_end_ns(&self) -> u64 {
        self.plan.end_ns + self.fault_lag_ns
    }

    /// Do action `a`, due at `due`.
    fn apply(&mut self, due: u64, a: Action) {
        let now = self.clock.now_ns();
        self.fault_lag_ns = self.fault_lag_ns.max(now - due);
        match a {
            Action::Impair { port, imp } => self.fabric.set_impairments(port, imp),
            Action::Clear { port } => self.fabric.set_impairments(port, emu_roce::Impairments::default()),
            Action::Corrupt { port, p } => self.fabric.set_corrupt(port, p),
            Action::Down { port } => self.fabric.set_down(port, true),
            Action::Up { port } => self.fabric.set_down(port, false),
            Action::HangCreateQp { port, .. } | Action::HealthSyndrome { port, .. } | Action::InternalError { port } | Action::QpError { port, .. } | Action::CqOverrun { port, .. } => {
                // On a node's adapter: later while that initiator is busy in a blocking step,
                // nothing while the node is down.
                let Some(cx) = self.adapter(port) else {
                    self.deferred.push((due, a));
                    return;
                };
                if let Some((tag, object)) = cx.and_then(|cx| adapter_fault(&cx, a)) {
                    if tag == 0xe2 {
                        self.cq_overruns_injected[port] += 1;
                    }
                    self.count_adapter_fault(port);
                    self.trace(tag, object ^ (port as u64) << 32);
                }
            }
            Action::Mtu { port, mtu } => self.fabric.set_mtu(port, (mtu > 0).then_some(mtu)),
            Action::CrashInit { k, down_ns } => {
                let Some(mut init) = self.inits[k].take() else {
                    // Busy in a blocking step: crash it when it is back.
                    self.deferred.push((due, a));
                    return;
                };
                if let Some(p) = init.parts.take() {
                    self.check_adapter(init.port, &p.node.cx);
                    self.out.init_recoveries += p.env.recoveries;
                    drop(p);
                    self.fabric.detach(init.port);
                    let mut ops = core::mem::take(&mut init.ops);
                    self.abandon(k, &mut ops, None);
                    init.restart_ns = Some(now + down_ns);
                    self.crash_unnoticed[k].iter_mut().for_each(|c| *c = None);
                    init.incarnation += 1;
                    self.out.crashes += 1;
                }
                self.inits[k] = Some(init);
            }
            Action::Link { t: j, linked } => {
                // Nothing while the target is down (it restarts linked, as configured).
                if let Some(t) = self.targets[j].as_mut() {
                    let nqn = subnqn(j);
                    let ok = if linked {
                        t.svc.target.link_subsystem(1, &nqn)
                    } else {
                        let ctrls = t.svc.target.core.live_ctrls() as u64;
                        let ok = t.svc.target.unlink_subsystem(&mut t.node.v, 1, &nqn);
                        self.out.unlinked_ctrls += ctrls - t.svc.target.core.live_ctrls() as u64;
                        ok
                    };
                    if !ok {
                        self.fail(format!("target {j}: no subsystem {nqn} to link or unlink"));
                    }
                }
            }
            Action::CrashTarget { t: j, keep, down_ns } => {
                let keep = self.cfg.keep_namespace.unwrap_or(keep);
                if let Some(mut t) = self.targets[j].take() {
                    self.check_adapter(j, &t.node.cx);
                    self.out.recoveries += t.svc.stats.device_recoveries;
                    self.out.groups_replaced += t.svc.target.stats().groups_replaced;
                    self.count_ns_ios(j, &mut t);
                    let saved = keep.then(|| t.svc.target.core.namespace_dev(&subnqn(j), 1).expect("namespace").contents());
                    drop(t);
                    self.fabric.detach(j);
                    if !keep {
                        self.seq += 1;
                        self.models[j].reset(self.seq, now);
                    }
                    self.target_restart[j] = Some((now + down_ns, saved));
                    for k in 0..self.inits.len() {
                        let live = self.inits[k].as_ref().and_then(|i| i.parts.as_ref()).is_some_and(|p| p.ctrls.ctrls[j].state() == CtrlState::Live);
                        // The first crash counts (a restarted target may crash again unnoticed).
                        if live && self.crash_unnoticed[k][j].is_none() {
                            self.crash_unnoticed[k][j] = Some(now);
                        }
                    }
                    self.out.crashes += 1;
                }
            }
        }
        self.trace(0xfa, format!("{a:?}").len() as u64);
        if self.cfg.verbose {
            eprintln!("sim: {}us {a:?}", now / 1000);
        }
    }

    /// One turn of everything present; advances the clock: by `TURN_NS` after a turn that did
    /// something, else straight to the earliest timer of the world ([`World::next_timer`]).
    pub fn turn(&mut self) {
        self.out.turns += 1;
        let now = self.clock.now_ns();
        let applied = self.next_action;
        while self.next_action < self.plan.actions.len() && self.plan.actions[self.next_action].0 <= now {
            let (due, a) = self.plan.actions[self.next_action];
            self.next_action += 1;
            self.apply(due, a);
        }
        for (due, a) in core::mem::take(&mut self.deferred) {
            self.apply(due, a);
        }
        let mut work = self.next_action - applied;
        for j in 0..self.targets.len() {
            if self.targets[j].is_none() && self.target_restart[j].as_ref().is_some_and(|r| r.0 <= now) {
                let (_, saved) = self.target_restart[j].take().expect("checked");
                if let Err(e) = self.make_target(j, false, saved) {
                    self.fail(e);
                }
                work += 1;
            }
            if let Some(t) = self.targets[j].as_mut() {
                work += t.svc.poll(&mut t.node.v, now);
                rdma::Control::poll(&mut t.node.v);
                work += t.node.cx.poll();
            }
        }
        for k in 0..self.inits.len() {
            let Some(mut init) = self.inits[k].take() else { continue };
            if init.parts.is_none() && init.restart_ns.is_some_and(|t| t <= now) {
                init.restart_ns = None;
                match self.make_parts(k, false, init.incarnation, init.queues) {
                    Ok(p) => init.parts = Some(p),
                    Err(e) => self.fail(e),
                }
                work += 1;
            }
            if let Some(p) = init.parts.as_mut() {
                work += p.node.cx.poll();
                nvmeof::host::HostEnv::idle(&mut p.env, &mut p.node.v);
                for c in p.ctrls.ctrls.iter_mut() {
                    if let Some(h) = c.live() {
                        if h.tick(&mut p.node.v, now).is_err() {
                            c.fail();
                        }
                    }
                }
            }
            self.inits[k] = Some(init);
        }
        work += self.fabric.forward();
        let step = if work > 0 {
            if now < self.promised_ns {
                self.fail(format!("--check-timers: something happened at {}us, before the earliest timer any node reported ({}us, {})", now / 1000, self.promised_ns / 1000, self.promised_by));
            }
            self.changed_ns = now;
            self.idle_ns = TURN_NS;
            self.promised_ns = 0;
            TURN_NS
        } else {
            let blocked = self.inits.iter().any(|i| i.is_none());
            let (wake, what) = self.next_timer(blocked);
            self.due_unserved = if wake <= now { self.due_unserved + 1 } else { 0 };
            if self.due_unserved > DUE_UNSERVED_TURNS {
                self.fail(format!("a timer due at {}us ({what}) is not served: {DUE_UNSERVED_TURNS} idle turns past it", wake / 1000));
            }
            if wake <= now {
                TURN_NS
            } else if self.cfg.check_timers || blocked {
                // An initiator busy in a blocking step cannot report its timers: the clock
                // ramps up as before the jumps, at most `MAX_IDLE_NS` a turn. `--check-timers`
                // moves it so always, and fails on anything done before the earliest timer.
                (self.promised_ns, self.promised_by) = if blocked { (0, "") } else { (wake, what) };
                self.idle_ns = (self.idle_ns * 2).min(MAX_IDLE_NS);
                self.idle_ns.min(wake - now)
            } else {
                wake - now
            }
        };
        self.clock.advance(step);
    }

    /// The earliest time anything in the world has timer work: the fault schedule, node
    /// restarts, frames on the switch, the initiators' workload and controllers (reconnects,
    /// bring-up, keep-alive), every node's CM, driver (health sample, neighbour ageing) and
    /// emulated adapter (retransmit, RNR), the targets' transport (keep-alive, Connect
    /// deadlines; its slow path's look at device state when something happened since it
    /// last ran) and namespace (device latency). With what asked for it (for a diagnosis).
    /// While an initiator is `blocked` in a step of its own (the world runs from its hook),
    /// the others' workload and controller timers are left out: only their own step serves
    /// them, after the blocking one returns.
    fn next_timer(&mut self, blocked: bool) -> (u64, &'static str) {
        let mut best = (u64::MAX, "nothing");
        let mut at = |t: Option<u64>, what: &'static str| {
            if let Some(t) = t.filter(|&t| t < best.0) {
                best = (t, what);
            }
        };
        at(self.plan.actions.get(self.next_action).map(|a| a.0), "fault schedule");
        at(self.fabric.next_delivery(), "switch delivery");
        for j in 0..self.targets.len() {
            at(self.target_restart[j].as_ref().map(|r| r.0), "target restart");
            let Some(t) = self.targets[j].as_mut() else { continue };
            at(t.svc.next_timer(), "target service (transport, CM)");
            at(t.svc.target.next_slow_poll(self.changed_ns), "target slow path after a change");
            at(t.node.cx.next_timer(), "target adapter");
            at(t.node.v.next_timer(), "target driver");
            at(t.svc.target.core.namespace_dev(&subnqn(j), 1).and_then(|d| d.next_due()), "target namespace");
            at(t.svc.target.namespace_handles(&subnqn(j), 1).filter_map(|d| d.next_due()).min(), "target namespace (a poll group's handle)");
        }
        for i in self.inits.iter().flatten() {
            at(i.restart_ns, "initiator restart");
            let Some(p) = &i.parts else {
                at((!blocked).then_some(i.wake_ns), "initiator workload");
                continue;
            };
            if !blocked {
                at(Some(i.wake_ns), "initiator workload");
                at(p.ctrls.next_wake(), "initiator controllers");
            }
            at(p.env.cm.next_timer(), "initiator CM");
            at(p.node.cx.next_timer(), "initiator adapter");
            at(p.node.v.next_timer(), "initiator driver");
        }
        best
    }
}

/// Do adapter fault `a` to `cx`; what it hit (trace tag, object number), when it hit something
/// the adapter counts as a fault (an event an EQ took, a QP or CQ it broke).
fn adapter_fault(cx: &testbed::ConnectX, a: Action) -> Option<(u64, u64)> {
    match a {
        Action::HangCreateQp { on, .. } => {
            let mut f = cx.faults_mut();
            if on {
                f.hang_opcodes.insert(mlx5_ifc::op::CREATE_QP);
            } else {
                f.hang_opcodes.remove(&mlx5_ifc::op::CREATE_QP);
            }
            None
        }
        Action::HealthSyndrome { synd, .. } => {
            cx.set_health_syndrome(synd);
            None
        }
        Action::InternalError { .. } => cx.raise_internal_error().then_some((0xe3, 0)),
        Action::QpError { pick, .. } => cx.inject_qp_error(pick).map(|qpn| (0xe1, qpn as u64)),
        Action::CqOverrun { pick, .. } => cx.inject_cq_overrun(pick).map(|cqn| (0xe2, cqn as u64)),
        _ => None,
    }
}

/// Run one seed.
pub fn run(cfg: Config) -> Outcome {
    match Sim::new(cfg) {
        Ok(s) => s.run(),
        Err(e) => Outcome { failure: Some(format!("setup: {e}")), ..Outcome::default() },
    }
}
