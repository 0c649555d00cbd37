//! The bench with each I/O queue on a thread of its own (`nvmf.bench=...,threads=on`; issue
//! #13's `queues=N` driven from N cores, like SPDK perf's core mask): the host's I/O queues are
//! lent out ([`Host::lend_io_queues`]), one [`LaneJob`] each, and the caller runs every job on a
//! thread of its own while its own thread keeps the admin queue (keep-alive), the device and
//! the CM through the turn [`on_lanes`] hands it. Each lane runs the bench's one driver state
//! at the configured queue depth with its own offsets (the seed mixed with its QID) and its
//! share of the I/O count; the lanes' results are merged into one (counts and IOPS summed,
//! latency histograms merged) and also given per lane.
//!
//! This crate has no threads: the caller spawns them (emu-runner: std's scoped threads; the
//! image: scoped jobs on application processors, `kernel::smp::scope`). A lost controller ends the
//! run with an error (no reconnect while the queues are lent: [`super::run::reconnecting`] is
//! the one-queue bench that survives it); a queue whose QP the adapter moved to error ends its
//! lane at once ([`crate::Error::QpError`]) while the others finish.

use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering::Relaxed};

use rdma::GroupVerbs;

use super::run::{Run, NO_IO};
use super::{BenchConfig, BenchResult};
use crate::host::{Host, HostEnv, IoLane, LaneWork, NsInfo};
use crate::Error;

/// One I/O queue's share of a bench, to be run on a thread of its own ([`LaneJob::run`]).
pub struct LaneJob<'a, V: GroupVerbs> {
    lane: IoLane<V>,
    ns: NsInfo,
    cfg: BenchConfig,
    /// Set by the owner when its admin queue failed: the lane stops at once.
    stop: &'a AtomicBool,
}

/// What a lane did: the queue (to be given back to its host) and its run.
pub type LaneOutcome<V> = (IoLane<V>, Result<BenchResult, Error<<V as rdma::VerbsError>::Error>>);

impl<V: GroupVerbs> LaneJob<'_, V> {
    /// The lent queue's QP.
    pub fn qpn(&self) -> rdma::Qpn {
        self.lane.qpn()
    }
}

impl<V: GroupVerbs> LaneWork for LaneJob<'_, V> {
    type Outcome = LaneOutcome<V>;
    fn qid(&self) -> u16 {
        self.lane.qid()
    }
    /// The lane's share: submit up to its depth, poll, until its duration or I/O count is
    /// reached and nothing is in flight.
    fn run(self, clock: &dyn Fn() -> u64, idle: &dyn Fn()) -> LaneOutcome<V> {
        let LaneJob { mut lane, ns, cfg, stop } = self;
        let r = drive(&mut lane, &ns, &cfg, stop, clock, idle);
        (lane, r)
    }
}

fn drive<V: GroupVerbs>(lane: &mut IoLane<V>, ns: &NsInfo, cfg: &BenchConfig, stop: &AtomicBool, clock: &dyn Fn() -> u64, idle: &dyn Fn()) -> Result<BenchResult, Error<V::Error>> {
    let mut run = Run::new(cfg, ns.nsid, clock());
    run.attach_ns(ns, lane.depth())?;
    let mut done = [NO_IO; 64];
    loop {
        if stop.load(Relaxed) {
            // The owner lost the controller: what is in flight will not be answered.
            run.lose_inflight();
            break;
        }
        let now = clock();
        if !run.over(now) {
            run.issue(lane, now)?;
        } else if run.inflight == 0 {
            break;
        }
        let n = lane.poll(clock(), &mut done)?;
        run.complete(&done[..n])?;
        if n == 0 {
            idle();
        }
    }
    Ok(run.finish(clock()))
}

/// The merged result of a bench over lanes (counts and IOPS summed, latency histograms
/// merged), each lane's, and each failed lane's error.
pub type LanesResult<E> = crate::host::LanesResult<BenchResult, E>;

/// Run `cfg` (its `queue_depth` per queue, its `max_ios` split between them) on namespace
/// `nsid` over every I/O queue of `host`, each lent out as a [`LaneJob`]. `spawn` runs the jobs
/// (each on a thread of its own) and, until they are all finished, calls the turn it is given
/// from the calling thread: the owner's work (the device and CM through `env.idle`, the
/// adapter's QP error events through `Host::take_qp_errors`, whose lane then stops at once,
/// the admin queue and keep-alive through `Host::tick`); it returns every job's outcome. The
/// queues are given back to the host before this returns (a failed one failed: the host needs
/// a reconnect). Errors: the namespace missing or unusable, an I/O count smaller than the
/// number of queues, the admin queue's failure (every lane stopped); a lane's own failure ends
/// that lane only and is reported in [`LanesResult::failed`].
pub fn on_lanes<V, E, S>(host: &mut Host<V>, verbs: &mut V, env: &mut E, nsid: u32, cfg: &BenchConfig, spawn: S) -> Result<LanesResult<V::Error>, Error<V::Error>>
where
    V: GroupVerbs,
    E: HostEnv<V>,
    S: for<'a> FnOnce(Vec<LaneJob<'a, V>>, &mut dyn FnMut()) -> Vec<LaneOutcome<V>>,
{
    let ns = *host.namespaces.iter().find(|n| n.nsid == nsid).ok_or(Error::Config("no such namespace"))?;
    let nq = host.io_queues().0 as u64;
    if nq == 0 {
        return Err(Error::Config("no I/O queue"));
    }
    if cfg.max_ios != 0 && cfg.max_ios < nq {
        return Err(Error::Config("fewer I/Os than I/O queues"));
    }
    let stop = AtomicBool::new(false);
    let jobs: Vec<LaneJob<'_, V>> = host
        .lend_io_queues()
        .into_iter()
        .enumerate()
        .map(|(i, lane)| {
            let i = i as u64;
            let share = if cfg.max_ios == 0 { 0 } else { cfg.max_ios / nq + (i < cfg.max_ios % nq) as u64 };
            let seed = cfg.seed ^ (lane.qid() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            LaneJob { lane, ns, cfg: BenchConfig { max_ios: share, seed, ..*cfg }, stop: &stop }
        })
        .collect();
    host.run_lent(verbs, env, &stop, jobs, spawn, BenchResult::merge)
}
