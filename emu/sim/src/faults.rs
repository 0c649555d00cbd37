//! faults: the fault kinds the simulator injects and the plan of one seed (what happens when,
//! to which port or node), drawn from the seed's own branch of the RNG tree.

use emu_roce::link::SplitMix64;
use emu_roce::Impairments;

/// One kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Loss,
    Dup,
    Reorder,
    /// Delay and jitter.
    Delay,
    /// RoCEv2 frames corrupted on delivery (the ICRC must catch each).
    Corrupt,
    /// A port down for 1-20 ms.
    Flap,
    /// A switch port's MTU below the frames the nodes send (512-1000 bytes) for 20-500 ms.
    Mtu,
    /// A port down for 50-800 ms (under the keep-alive timeout).
    Partition,
    /// A port down for longer than the keep-alive timeout.
    Kato,
    /// An initiator node crashes (dropped) and restarts 10-500 ms later.
    InitCrash,
    /// The target node crashes; its RAM namespace kept (as if battery-backed) or lost.
    TargetCrash,
    /// A node's adapter takes CREATE_QP commands and never completes them for 200-800 ms while
    /// a connection must be made again: on the target, while an initiator crashes and
    /// reconnects (the driver finds the command hung, resets the function and brings it up
    /// again, retrying while the hang lasts; the target service listens anew and the
    /// initiators reconnect); on an initiator, while one of its QPs is driven to error (its
    /// reconnect's CREATE_QP hangs, the driver resets the function, the host brings the
    /// device up again and reconnects once the hang is over).
    CmdHang,
    /// A node's firmware (the target's or an initiator's) raises a fatal health syndrome: the
    /// same recovery on the target; an initiator's driver resets its adapter, its host finds
    /// its connections dead, brings the device up again and reconnects.
    Health,
    /// A node's adapter (the target's or an initiator's) drives one connected RC QP to ERROR
    /// (flushes its work, raises a catastrophic work-queue event): on the target, the target
    /// closes that queue and its host reconnects; on an initiator, its host finds the queue
    /// dead and reconnects.
    QpError,
    /// One of a node's CQs overruns (CQ error event; its QPs to ERROR, the driver flushes
    /// their work): the queues on it close and their hosts reconnect.
    CqOverrun,
    /// A node's adapter raises an INTERNAL_ERROR event (the adapter reporting itself broken):
    /// the driver declares the device failed and resets the function; the same recovery as
    /// `health`.
    Fatal,
    /// A target takes its subsystem away for 10-1000 ms, as Linux nvmet does when the
    /// subsystem's configfs port link is removed: DREQ on every queue of its controllers
    /// (deleted), every Connect to the NQN refused (Connect Invalid Parameters, DNR) until the
    /// link is back; the initiators retry and reconnect then.
    Unlink,
}

/// Every kind, in the order `all` draws from. Adding a kind (or a draw inside one) changes what
/// an older seed draws: a seed replays exactly on the commit that ran it.
pub const ALL: [Kind; 17] = [
    Kind::Loss,
    Kind::Dup,
    Kind::Reorder,
    Kind::Delay,
    Kind::Corrupt,
    Kind::Flap,
    Kind::Mtu,
    Kind::Partition,
    Kind::Kato,
    Kind::InitCrash,
    Kind::TargetCrash,
    Kind::CmdHang,
    Kind::Health,
    Kind::QpError,
    Kind::CqOverrun,
    Kind::Fatal,
    Kind::Unlink,
];

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Loss => "loss",
            Kind::Dup => "dup",
            Kind::Reorder => "reorder",
            Kind::Delay => "delay",
            Kind::Corrupt => "corrupt",
            Kind::Flap => "flap",
            Kind::Mtu => "mtu",
            Kind::Partition => "partition",
            Kind::Kato => "kato",
            Kind::InitCrash => "icrash",
            Kind::TargetCrash => "tcrash",
            Kind::CmdHang => "cmdhang",
            Kind::Health => "health",
            Kind::QpError => "qperr",
            Kind::CqOverrun => "cqoverrun",
            Kind::Fatal => "fatal",
            Kind::Unlink => "unlink",
        }
    }
}

/// `all`, `none` or a comma-separated list of kind names.
pub fn parse_list(s: &str) -> Result<Vec<Kind>, String> {
    match s {
        "all" => Ok(ALL.to_vec()),
        "none" | "" => Ok(Vec::new()),
        _ => {
            let mut v = Vec::new();
            for w in s.split(',') {
                let k = ALL.iter().copied().find(|k| k.name() == w).ok_or_else(|| {
                    format!("unknown fault '{w}' (known: all, none, {})", ALL.iter().map(|k| k.name()).collect::<Vec<_>>().join(", "))
                })?;
                if !v.contains(&k) {
                    v.push(k);
                }
            }
            v.sort();
            Ok(v)
        }
    }
}

/// The list back in canonical form (for the replay command line).
pub fn list_name(kinds: &[Kind]) -> String {
    if kinds.is_empty() {
        "none".into()
    } else if kinds == ALL {
        "all".into()
    } else {
        kinds.iter().map(|k| k.name()).collect::<Vec<_>>().join(",")
    }
}

/// What happens at one instant. Ports 0..T are the targets', port T+k initiator k's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Action {
    Impair { port: usize, imp: Impairments },
    Clear { port: usize },
    Corrupt { port: usize, p: f64 },
    Down { port: usize },
    /// The port's IP MTU (0: back to no limit).
    Mtu { port: usize, mtu: usize },
    Up { port: usize },
    /// Initiator `k` (0-based) crashes, restarts `down_ns` later.
    CrashInit { k: usize, down_ns: u64 },
    /// Target `t` crashes, restarts `down_ns` later, its namespace kept or lost.
    CrashTarget { t: usize, keep: bool, down_ns: u64 },
    /// The adapter of node `port` hangs CREATE_QP commands (or stops doing so).
    HangCreateQp { port: usize, on: bool },
    /// The firmware of node `port` sets this fatal health syndrome.
    HealthSyndrome { port: usize, synd: u8 },
    /// The adapter of node `port` drives its `pick`-th connected RC QP to ERROR.
    QpError { port: usize, pick: u64 },
    /// The adapter of node `port` overruns the receive CQ of its `pick`-th connected RC QP.
    CqOverrun { port: usize, pick: u64 },
    /// The adapter of node `port` raises an INTERNAL_ERROR event.
    InternalError { port: usize },
    /// Target `t`'s subsystem unlinked from its port (`linked: false`) or linked again.
    Link { t: usize, linked: bool },
}

/// A seed's faults: actions by virtual time; all windows closed by `end_ns`.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub actions: Vec<(u64, Action)>,
    pub end_ns: u64,
    /// The kinds drawn, in order (for the summary).
    pub drawn: Vec<Kind>,
}

const MS: u64 = 1_000_000;

fn range(rng: &mut SplitMix64, lo: u64, hi: u64) -> u64 {
    lo + rng.below(hi - lo + 1)
}

fn frac(rng: &mut SplitMix64, lo: f64, hi: f64) -> f64 {
    lo + (hi - lo) * (rng.below(1 << 20) as f64 / (1u64 << 20) as f64)
}

/// Draw 1-5 faults of `kinds` starting within `span_ns` (after the first 10 ms) over the ports
/// of `targets` targets and `initiators` initiators; `kato_ms` is the initiators' keep-alive
/// timeout. With one target the draws are those of the single-target simulator.
pub fn draw(rng: &mut SplitMix64, kinds: &[Kind], targets: usize, initiators: usize, span_ns: u64, kato_ms: u64) -> Plan {
    let ports = targets + initiators;
    let mut plan = Plan::default();
    if kinds.is_empty() {
        return plan;
    }
    let n = 1 + rng.below(5);
    for _ in 0..n {
        let kind = kinds[rng.below(kinds.len() as u64) as usize];
        plan.drawn.push(kind);
        let t = 10 * MS + rng.below(span_ns);
        let port = rng.below(ports as u64) as usize;
        let mut window = |a: Action, b: Action, len: u64| {
            plan.actions.push((t, a));
            plan.actions.push((t + len, b));
        };
        match kind {
            Kind::Loss | Kind::Dup | Kind::Reorder | Kind::Delay => {
                let mut imp = Impairments::default();
                match kind {
                    Kind::Loss => imp.loss = frac(rng, 0.005, 0.15),
                    Kind::Dup => imp.duplicate = frac(rng, 0.01, 0.2),
                    Kind::Reorder => {
                        imp.reorder = frac(rng, 0.05, 0.3);
                        imp.reorder_delay_ns = range(rng, 2_000, 100_000);
                    }
                    _ => {
                        imp.delay_ns = range(rng, 500, 50_000);
                        imp.jitter_ns = range(rng, 0, 50_000);
                    }
                }
                let len = range(rng, 20 * MS, 500 * MS);
                window(Action::Impair { port, imp }, Action::Clear { port }, len);
            }
            Kind::Corrupt => {
                let p = frac(rng, 0.01, 0.1);
                let len = range(rng, 20 * MS, 500 * MS);
                window(Action::Corrupt { port, p }, Action::Corrupt { port, p: 0.0 }, len);
            }
            Kind::Mtu => {
                let mtu = range(rng, 512, 1000) as usize;
                let len = range(rng, 20 * MS, 500 * MS);
                window(Action::Mtu { port, mtu }, Action::Mtu { port, mtu: 0 }, len);
            }
            Kind::Flap => {
                let len = range(rng, MS, 20 * MS);
                window(Action::Down { port }, Action::Up { port }, len);
            }
            Kind::Partition => {
                let len = range(rng, 50 * MS, 800 * MS);
                window(Action::Down { port }, Action::Up { port }, len);
            }
            Kind::Kato => {
                let len = range(rng, kato_ms * MS * 5 / 4, kato_ms * MS * 2);
                window(Action::Down { port }, Action::Up { port }, len);
            }
            Kind::InitCrash => {
                let k = rng.below(initiators as u64) as usize;
                let down_ns = range(rng, 10 * MS, 500 * MS);
                plan.actions.push((t, Action::CrashInit { k, down_ns }));
                plan.end_ns = plan.end_ns.max(t + down_ns);
            }
            Kind::CmdHang => {
                let k = rng.below(initiators as u64) as usize;
                let down_ns = range(rng, 10 * MS, 50 * MS);
                let len = range(rng, 200 * MS, 800 * MS);
                plan.actions.push((t, Action::HangCreateQp { port, on: true }));
                if port < targets {
                    plan.actions.push((t, Action::CrashInit { k, down_ns }));
                } else {
                    plan.actions.push((t, Action::QpError { port, pick: rng.next_u64() }));
                }
                plan.actions.push((t + len, Action::HangCreateQp { port, on: false }));
            }
            Kind::Health => {
                // Fatal syndromes (Linux health.c MLX5_INITIAL_SEG_HEALTH_SYNDROME_*).
                use mlx5_ifc::health_synd as h;
                const SYND: [u8; 7] = [h::FW_INTERNAL_ERR, h::DEAD_IRISC, h::HW_FATAL_ERR, h::FW_CRC_ERR, h::ICM_FETCH_PCI_ERR, h::HW_FTL_ERR, h::EQ_ERR];
                let synd = SYND[rng.below(SYND.len() as u64) as usize];
                plan.actions.push((t, Action::HealthSyndrome { port, synd }));
            }
            Kind::QpError => plan.actions.push((t, Action::QpError { port, pick: rng.next_u64() })),
            Kind::CqOverrun => plan.actions.push((t, Action::CqOverrun { port, pick: rng.next_u64() })),
            Kind::Fatal => plan.actions.push((t, Action::InternalError { port })),
            Kind::Unlink => {
                let which = if targets > 1 { rng.below(targets as u64) as usize } else { 0 };
                let len = range(rng, 10 * MS, 1000 * MS);
                window(Action::Link { t: which, linked: false }, Action::Link { t: which, linked: true }, len);
            }
            Kind::TargetCrash => {
                let keep = rng.below(2) == 0;
                let down_ns = range(rng, 10 * MS, 500 * MS);
                let which = if targets > 1 { rng.below(targets as u64) as usize } else { 0 };
                plan.actions.push((t, Action::CrashTarget { t: which, keep, down_ns }));
                plan.end_ns = plan.end_ns.max(t + down_ns);
            }
        }
    }
    plan.actions.sort_by_key(|a| a.0);
    plan.end_ns = plan.end_ns.max(plan.actions.last().map_or(0, |a| a.0));
    plan
}
