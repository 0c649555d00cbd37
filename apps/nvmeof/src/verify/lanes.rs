//! Verified random I/O with each I/O queue on a thread of its own (`nvmf.verify=N,threads=on`;
//! issue #13's `queues=N` driven from N cores): the host's I/O queues are lent out
//! ([`Host::lend_io_queues`]), one [`VerifyJob`] each, and the caller runs every job on a thread
//! (or application processor) of its own while its own thread keeps the admin queue, the device
//! and the CM through the turn [`on_lanes`] hands it, as the bench's lanes do
//! ([`crate::bench::lanes`]). Each lane runs the verified workload's model
//! ([`super::reconnecting`]: pattern per block and generation, the generations its own) on its
//! own disjoint block range (the namespace's verified span cut in equal parts, one per queue),
//! its share of the I/O count, then reads back every block it wrote; the lanes' tallies are
//! merged. No reconnect while the queues are lent: a lost controller ends the run with an error
//! (the one-thread [`super::reconnecting::run`] survives it); a queue whose QP the adapter moved
//! to error ends its lane at once ([`crate::Error::QpError`]) while the others finish.

use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering::Relaxed};

use rdma::GroupVerbs;

use super::reconnecting::{Lane, Workload};
use super::VerifyResult;
use crate::host::{Host, HostEnv, IoDone, IoLane, LaneWork};
use crate::{Error, Status};

/// One I/O queue's share of a verified run, to be run on a thread of its own ([`VerifyJob::run`]).
pub struct VerifyJob<'a, V: GroupVerbs> {
    lane: IoLane<V>,
    model: Lane,
    w: Workload,
    scratch: Vec<u8>,
    /// Set by the owner when its admin queue failed: the lane stops at once.
    stop: &'a AtomicBool,
}

/// What a lane did: the queue (to be given back to its host) and its tally.
pub type VerifyOutcome<V> = (IoLane<V>, Result<VerifyResult, Error<<V as rdma::VerbsError>::Error>>);

impl<V: GroupVerbs> LaneWork for VerifyJob<'_, V> {
    type Outcome = VerifyOutcome<V>;
    fn qid(&self) -> u16 {
        self.lane.qid()
    }
    /// The lane's share: random verified I/O up to the queue depth until its count is
    /// answered, then the read-back of every block it wrote.
    fn run(self, clock: &dyn Fn() -> u64, idle: &dyn Fn()) -> VerifyOutcome<V> {
        let VerifyJob { mut lane, mut model, w, mut scratch, stop } = self;
        let r = drive(&mut lane, &mut model, &w, &mut scratch, stop, clock, idle);
        (lane, r)
    }
}

fn drive<V: GroupVerbs>(lane: &mut IoLane<V>, model: &mut Lane, w: &Workload, scratch: &mut [u8], stop: &AtomicBool, clock: &dyn Fn() -> u64, idle: &dyn Fn()) -> Result<VerifyResult, Error<V::Error>> {
    let mut done = [IoDone { queue: 0, slot: 0, status: Status::SUCCESS, dw0: 0, latency_ns: 0 }; 64];
    let mut last_progress = clock();
    loop {
        if stop.load(Relaxed) {
            return Err(Error::Protocol("the controller failed while its queues were lent"));
        }
        let now = clock();
        model.issue(lane, w, now, scratch)?;
        let n = lane.poll(now, &mut done)?;
        model.complete(lane, &done[..n], scratch)?;
        if model.done() {
            return Ok(model.result().verify);
        }
        if n > 0 {
            last_progress = now;
        } else {
            if now.saturating_sub(last_progress) > w.stall_ns {
                log::error!("nvmeof: verify: queue {} stalled: {:?}", lane.qid(), model.result());
                return Err(Error::Timeout);
            }
            idle();
        }
    }
}

/// The merged tally of a verified run over lanes, each lane's, and each failed lane's error.
pub type VerifyLanes<E> = crate::host::LanesResult<VerifyResult, E>;

/// Run `w` (its `qd` per queue, its `count` split between them) on the host's first namespace
/// over every I/O queue of `host`, each lent out as a [`VerifyJob`] with a block range of its
/// own. `spawn` runs the jobs and calls the owner's turn it is given until they all finished,
/// as for [`crate::bench::lanes::on_lanes`]; the queues are given back to the host before this
/// returns. Errors: no namespace or I/O queue, a namespace too small for a range per queue, an
/// I/O count smaller than the number of queues, the admin queue's failure (every lane stopped);
/// a lane's own failure ends that lane only and is reported in [`VerifyLanes::failed`].
pub fn on_lanes<V, E, S>(host: &mut Host<V>, verbs: &mut V, env: &mut E, w: &Workload, spawn: S) -> Result<VerifyLanes<V::Error>, Error<V::Error>>
where
    V: GroupVerbs,
    E: HostEnv<V>,
    S: for<'a> FnOnce(Vec<VerifyJob<'a, V>>, &mut dyn FnMut()) -> Vec<VerifyOutcome<V>>,
{
    let ns = *host.namespaces.first().ok_or(Error::Config("the controller has no namespace"))?;
    let nq = host.io_queues().0 as u64;
    if nq == 0 {
        return Err(Error::Config("no I/O queue"));
    }
    if w.count < nq {
        return Err(Error::Config("fewer I/Os than I/O queues"));
    }
    let (_, _, xfer) = host.slot_buf(1, 0);
    let part = Lane::verified_span(&ns) / nq;
    let mut models = Vec::with_capacity(nq as usize);
    for i in 0..nq {
        let count = w.count / nq + (i < w.count % nq) as u64;
        let lw = Workload { count, ..*w };
        models.push((Lane::new(&ns, xfer, i * part, part, i as usize, &lw)?, lw));
    }
    let stop = AtomicBool::new(false);
    let jobs: Vec<VerifyJob<'_, V>> = host
        .lend_io_queues()
        .into_iter()
        .zip(models)
        .map(|(lane, (model, lw))| VerifyJob { lane, scratch: vec![0; model.scratch_len()], model, w: lw, stop: &stop })
        .collect();
    host.run_lent(verbs, env, &stop, jobs, spawn, VerifyResult::add)
}
