//! The bench with each I/O queue on a thread of its own (`nvmf.bench=...,threads=on`; issue
//! #13's `queues=N` driven from N cores, like SPDK perf's core mask): the host's I/O queues are
//! lent out ([`Host::lend_io_queues`]), one [`LaneJob`] each, and the caller runs every job on a
//! thread of its own while its own thread keeps the admin queue (keep-alive), the device and
//! the CM through the turn it is handed. Each lane runs the bench's one driver state at the
//! configured queue depth with its own offsets (the seed mixed with its QID) and its share of
//! the I/O count; the lanes' results are merged into one (counts and IOPS summed, latency
//! histograms merged) and also given per lane.
//!
//! This crate has no threads: the caller spawns them (emu-runner: std's scoped threads; the
//! image: scoped jobs on application processors, `kernel::smp::scope`). On one controller of a
//! set ([`reconnecting`], emu-runner's and the image's): a lost controller stops every lane
//! (what each had in flight counted lost), is released and reconnected by the set, and the
//! lanes resume on the new queues (`host::lent`); outages are counted and timed, and the
//! bench's duration or count over while the controller is down ends the run there
//! (`down_at_end`, on the owner's clock, which the lanes must run on too). On a host
//! alone ([`on_lanes`]): no reconnect, a lost controller ends the run with an error and a queue
//! whose QP the adapter moved to error ends its lane at once ([`crate::Error::QpError`]) while
//! the others finish.

use alloc::vec::Vec;

use rdma::GroupVerbs;

use super::run::{Run, NO_IO};
use super::{BenchConfig, BenchResult};
use crate::host::controllers::{Controllers, CtrlEvent};
use crate::host::{lent, Host, HostEnv, IoLane, LaneDrive, LaneEnd, Lent, LentOutcome, NsInfo};
use crate::Error;

/// One I/O queue's share of a bench: its run's state, kept across the controller's reconnects.
pub struct BenchLane {
    ns: NsInfo,
    cfg: BenchConfig,
    /// Started by the lane's first drive (on the lane's clock).
    run: Option<Run>,
    /// The result when the lane last ended.
    res: BenchResult,
}

/// One I/O queue's share of a bench, lent, to be run on a thread of its own.
pub type LaneJob<'a, V> = Lent<'a, BenchLane, V>;

/// What a lane did: the queue (to be given back to its host) and how it ended.
pub type LaneOutcome<V> = LentOutcome<V>;

impl<V: GroupVerbs> LaneDrive<V> for BenchLane {
    /// The lane's share: submit up to its depth, poll, until its duration or I/O count is
    /// reached and nothing is in flight, or the queue fails (what was in flight counted lost).
    fn drive(&mut self, lane: &mut IoLane<V>, clock: &dyn Fn() -> u64, idle: &dyn Fn()) -> Result<LaneEnd<V::Error>, Error<V::Error>> {
        let run = match &mut self.run {
            Some(r) => r,
            None => self.run.insert(Run::new(&self.cfg, self.ns.nsid, clock())),
        };
        run.attach_ns(&self.ns, lane.depth())?;
        let end = drive(lane, run, clock, idle);
        self.res = run.result_at(clock());
        end
    }

    /// Its duration (from the lane's start) or I/O count reached at `now`: the result is taken
    /// then, the outage in its elapsed time (as the one-queue bench's).
    fn over_while_down(&mut self, now: u64) -> bool {
        let Some(run) = &self.run else { return false };
        let over = run.over(now);
        if over {
            self.res = run.result_at(now);
        }
        over
    }
}

fn drive<V: GroupVerbs>(lane: &mut IoLane<V>, run: &mut Run, clock: &dyn Fn() -> u64, idle: &dyn Fn()) -> Result<LaneEnd<V::Error>, Error<V::Error>> {
    let mut done = [NO_IO; 64];
    loop {
        let now = clock();
        if !run.over(now) {
            if let Err(e) = run.issue(lane, now) {
                run.lose_inflight();
                return Ok(LaneEnd::Stopped(e));
            }
        } else if run.inflight == 0 {
            return Ok(LaneEnd::Finished);
        }
        let n = match lane.poll(clock(), &mut done) {
            Ok(n) => n,
            Err(e) => {
                // The queue failed: what is in flight will not be answered.
                run.lose_inflight();
                return Ok(LaneEnd::Stopped(e));
            }
        };
        run.complete(&done[..n])?;
        if n == 0 {
            idle();
        }
    }
}

/// The merged result of a bench over lanes (counts and IOPS summed, latency histograms
/// merged), each lane's, and each failed lane's error.
pub type LanesResult<E> = crate::host::LanesResult<BenchResult, E>;

/// A lane state per I/O queue of `host` (QID order): `cfg` (its `queue_depth` per queue, its
/// `max_ios` split between them) on namespace `nsid`.
fn lane_states<V: GroupVerbs>(host: &Host<V>, nsid: u32, cfg: &BenchConfig) -> Result<Vec<BenchLane>, Error<V::Error>> {
    let ns = *host.namespaces.iter().find(|n| n.nsid == nsid).ok_or(Error::Config("no such namespace"))?;
    let nq = host.io_queues().0 as u64;
    if nq == 0 {
        return Err(Error::Config("no I/O queue"));
    }
    if cfg.max_ios != 0 && cfg.max_ios < nq {
        return Err(Error::Config("fewer I/Os than I/O queues"));
    }
    Ok((0..nq)
        .map(|i| {
            let share = if cfg.max_ios == 0 { 0 } else { cfg.max_ios / nq + (i < cfg.max_ios % nq) as u64 };
            let seed = cfg.seed ^ (i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            BenchLane { ns, cfg: BenchConfig { max_ios: share, seed, ..*cfg }, run: None, res: BenchResult::default() }
        })
        .collect())
}

/// Run `cfg` on namespace `nsid` over every I/O queue of `host` (alone on its device, no
/// reconnect), each lent out as a [`LaneJob`]. `spawn` runs the jobs (each on a thread of its
/// own) and, until they are all finished, calls the turn it is given from the calling thread:
/// the owner's work (`Host::run_lent`: the device and CM, the adapter's QP error events, whose
/// lane then stops at once, the admin queue and keep-alive); it returns every job's outcome.
/// The queues are given back to the host before this returns (a failed one failed: the host
/// needs a reconnect). Errors: the namespace missing or unusable, an I/O count smaller than the
/// number of queues, the admin queue's failure (every lane stopped); a lane's own failure ends
/// that lane only and is reported in [`LanesResult::failed`].
pub fn on_lanes<V, E, S>(host: &mut Host<V>, verbs: &mut V, env: &mut E, nsid: u32, cfg: &BenchConfig, spawn: S) -> Result<LanesResult<V::Error>, Error<V::Error>>
where
    V: GroupVerbs,
    E: HostEnv<V>,
    S: for<'a> FnOnce(Vec<LaneJob<'a, V>>, &mut dyn FnMut()) -> Vec<LaneOutcome<V>>,
{
    let mut states = lane_states(host, nsid, cfg)?;
    let jobs: Vec<LaneJob<'_, V>> = host.lend_io_queues().into_iter().zip(states.iter_mut()).map(|(lane, s)| Lent::new(lane, s)).collect();
    let ends = host.run_lent(verbs, env, jobs, spawn)?;
    Ok(LanesResult::gather(ends, &states, |s| s.res.clone(), BenchResult::merge))
}

/// Run `cfg` on namespace `nsid` over every I/O queue of controller `i` of `set`, each lent out
/// as a [`LaneJob`] (`spawn` as for [`on_lanes`], called again for each connection), surviving
/// lost connections: the lanes stop, the set reconnects the controller and they resume with
/// their state (`host::lent::reconnecting`; `on(j, event)` hears the set's events). The merged
/// result counts the outages (count, total, longest, on the owner's clock) and, if the
/// controller was given up before the lanes finished or every lane's duration or count ran out
/// while it was down (the lanes' clock must be the owner's), `down_at_end` (each lane's part
/// up to then is counted). Errors: as [`on_lanes`], the controller not live at first or back with
/// another number of I/O queues; a lane's own failure is reported in [`LanesResult::failed`].
#[allow(clippy::too_many_arguments)]
pub fn reconnecting<V, E, S>(set: &mut Controllers<V>, i: usize, verbs: &mut V, env: &mut E, nsid: u32, cfg: &BenchConfig, spawn: S, on: &mut dyn FnMut(usize, &CtrlEvent<V::Error>)) -> Result<LanesResult<V::Error>, Error<V::Error>>
where
    V: GroupVerbs,
    E: HostEnv<V>,
    S: for<'a> FnMut(Vec<LaneJob<'a, V>>, &mut dyn FnMut()) -> Vec<LaneOutcome<V>>,
{
    let mut states = lane_states(set.ctrls[i].live().ok_or(Error::Config("the controller is not live"))?, nsid, cfg)?;
    let mut run = lent::reconnecting(set, i, verbs, env, &mut states, spawn, on)?;
    if run.down_at_end {
        // Given up or over while down: each stopped lane's part up to then counts.
        for e in run.ends.iter_mut().filter(|e| matches!(e.1, Ok(LaneEnd::Stopped(_)))) {
            e.1 = Ok(LaneEnd::Finished);
        }
    }
    let mut r = LanesResult::gather(run.ends, &states, |s| s.res.clone(), BenchResult::merge);
    r.merged.outages = run.outages;
    r.merged.outage_ns = run.outage_ns;
    r.merged.longest_outage_ns = run.longest_outage_ns;
    r.merged.down_at_end = run.down_at_end;
    Ok(r)
}
