//! simulate: run seeds of the deterministic whole-stack simulation (see the README's
//! "Deterministic simulation"). One summary line per seed; on a failure the seed and the
//! shortest command line that replays it, exit status 1.
#![forbid(unsafe_code)]

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Instant;

use sim::faults;

const USAGE: &str = "usage: simulate [--seed S | --seeds A..B] [--until-failure] [--targets N] [--initiators N] [--ops N] [--faults all|none|LIST] [--namespace-on-crash keep|lose] [--quiet] [--verbose] [--log LEVEL] [--check-timers] [--block-size 512|4096]
  LIST: comma-separated of loss,dup,reorder,delay,corrupt,flap,mtu,partition,kato,icrash,tcrash,cmdhang,health,qperr,cqoverrun,fatal";

struct Args {
    from: u64,
    to: u64,
    until_failure: bool,
    targets: usize,
    initiators: usize,
    ops: u64,
    faults: Vec<faults::Kind>,
    quiet: bool,
    verbose: bool,
    keep_namespace: Option<bool>,
    check_timers: bool,
    block_size: usize,
}

fn parse() -> Result<Args, String> {
    let mut a = Args { from: 0, to: 1, until_failure: false, targets: 1, initiators: 2, ops: 400, faults: faults::ALL.to_vec(), quiet: false, verbose: false, keep_namespace: None, check_timers: false, block_size: 512 };
    let mut it = std::env::args().skip(1);
    let num = |v: Option<String>, what: &str| -> Result<u64, String> { v.ok_or(format!("{what} needs a value"))?.parse::<u64>().map_err(|e| format!("{what}: {e}")) };
    while let Some(w) = it.next() {
        match w.as_str() {
            "--seed" => {
                a.from = num(it.next(), "--seed")?;
                a.to = a.from + 1;
            }
            "--seeds" => {
                let v = it.next().ok_or("--seeds needs A..B")?;
                let (x, y) = v.split_once("..").ok_or("--seeds takes A..B (B excluded)")?;
                a.from = x.parse().map_err(|e| format!("--seeds: {e}"))?;
                a.to = y.parse().map_err(|e| format!("--seeds: {e}"))?;
            }
            "--until-failure" => a.until_failure = true,
            "--targets" => a.targets = num(it.next(), "--targets")?.clamp(1, 4) as usize,
            "--initiators" => a.initiators = num(it.next(), "--initiators")?.clamp(1, 8) as usize,
            "--ops" => a.ops = num(it.next(), "--ops")?,
            "--faults" => a.faults = faults::parse_list(&it.next().ok_or("--faults needs a list")?)?,
            "--quiet" => a.quiet = true,
            "--verbose" => a.verbose = true,
            "--check-timers" => a.check_timers = true,
            "--block-size" => {
                let v = num(it.next(), "--block-size")? as usize;
                if !sim::model::BLOCK_SIZES.contains(&v) {
                    return Err(format!("--block-size takes one of {:?}", sim::model::BLOCK_SIZES));
                }
                a.block_size = v;
            }
            "--log" => {
                let l: log::LevelFilter = it.next().ok_or("--log needs a level")?.parse().map_err(|_| "--log takes error|warn|info|debug|trace")?;
                let _ = log::set_logger(&LOGGER);
                log::set_max_level(l);
            }
            "--namespace-on-crash" => {
                a.keep_namespace = match it.next().as_deref() {
                    Some("keep") => Some(true),
                    Some("lose") => Some(false),
                    _ => return Err("--namespace-on-crash takes keep or lose (default: drawn per crash)".into()),
                }
            }
            "-h" | "--help" => return Err(USAGE.into()),
            _ => return Err(format!("unknown argument '{w}'\n{USAGE}")),
        }
    }
    Ok(a)
}

/// A line on stdout; a closed pipe (`| head`) is not an error worth a panic.
macro_rules! say {
    ($($t:tt)*) => {{
        let _ = writeln!(std::io::stdout().lock(), $($t)*);
    }};
}

/// With `--log LEVEL`: the product's own log lines on stderr.
struct StderrLog;
impl log::Log for StderrLog {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, r: &log::Record) {
        eprintln!("log {} {}", r.level(), r.args());
    }
    fn flush(&self) {}
}
static LOGGER: StderrLog = StderrLog;

fn main() -> ExitCode {
    let a = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let t0 = Instant::now();
    let (mut seeds, mut failures, mut ops) = (0u64, 0u64, 0u64);
    let mut notice: Vec<(u64, sim::world::Noticed)> = Vec::new();
    let mut seed = a.from;
    while a.until_failure || seed < a.to {
        let cfg = sim::Config { seed, targets: a.targets, initiators: a.initiators, ops: a.ops, faults: a.faults.clone(), verbose: a.verbose, keep_namespace: a.keep_namespace, check_timers: a.check_timers, block_size: a.block_size };
        let out = sim::run(cfg);
        seeds += 1;
        ops += out.ops;
        notice.extend_from_slice(&out.crash_notice);
        if let Some(why) = &out.failure {
            failures += 1;
            say!("{}", out.line(seed));
            say!("SIM-FAILURE seed={seed}: {why}");
            let mutation = if cfg!(feature = "sim-mutation") {
                " --mutation"
            } else if cfg!(feature = "sim-mutation-cross-group") {
                " --mutation=cross-group"
            } else {
                ""
            };
            let mut replay = format!("scripts/simulate{mutation} --seed {seed}");
            if a.targets != 1 {
                replay += &format!(" --targets {}", a.targets);
            }
            if a.initiators != 2 {
                replay += &format!(" --initiators {}", a.initiators);
            }
            if a.ops != 400 {
                replay += &format!(" --ops {}", a.ops);
            }
            if a.faults.len() != faults::ALL.len() {
                replay += &format!(" --faults {}", faults::list_name(&a.faults));
            }
            if a.block_size != 512 {
                replay += &format!(" --block-size {}", a.block_size);
            }
            if let Some(k) = a.keep_namespace {
                replay += if k { " --namespace-on-crash keep" } else { " --namespace-on-crash lose" };
            }
            say!("SIM-REPLAY {replay}");
            if a.until_failure {
                break;
            }
        } else if !a.quiet {
            say!("{}", out.line(seed));
        }
        seed += 1;
    }
    let secs = t0.elapsed().as_secs_f64().max(1e-9);
    say!(
        "SIM-SUMMARY seeds={seeds} failures={failures} ops={ops} sim_ops_per_sec={} seeds_per_min={}",
        (ops as f64 / secs) as u64,
        (seeds as f64 * 60.0 / secs) as u64
    );
    if !notice.is_empty() {
        // How long a crashed target goes unnoticed by an initiator connected to it.
        let mut ms: Vec<u64> = notice.iter().map(|n| n.0 / 1_000_000).collect();
        ms.sort_unstable();
        let pct = |p: usize| ms[(ms.len() - 1) * p / 100];
        let by = |w: sim::world::Noticed| notice.iter().filter(|n| n.1 == w).count();
        say!(
            "SIM-CRASH-NOTICE n={} ms_min={} ms_p50={} ms_p90={} ms_max={} by_transport_error={} by_keep_alive={} by_other={}",
            ms.len(),
            ms[0],
            pct(50),
            pct(90),
            ms[ms.len() - 1],
            by(sim::world::Noticed::Transport),
            by(sim::world::Noticed::KeepAlive),
            by(sim::world::Noticed::Other)
        );
    }
    if failures > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
