//! Verified random I/O with each I/O queue on a thread of its own (`nvmf.verify=N,threads=on`;
//! issue #13's `queues=N` driven from N cores): the host's I/O queues are lent out
//! ([`Host::lend_io_queues`]), one [`VerifyJob`] each, and the caller runs every job on a thread
//! (or application processor) of its own while its own thread keeps the admin queue, the device
//! and the CM through the turn it is handed, as the bench's lanes do ([`crate::bench::lanes`]).
//! Each lane runs the verified workload's model ([`super::reconnecting`]: pattern per block and
//! generation, the generations its own) on its own disjoint block range (the namespace's
//! verified span cut in equal parts, one per queue), its share of the I/O count, then reads
//! back every block it wrote; the lanes' tallies are merged. On one controller of a set
//! ([`reconnecting`]): a lost controller stops every lane, each lane's model takes what it had
//! in flight as lost (a write may or may not have landed), the set reconnects the controller
//! and the lanes resume on the new queues (`host::lent`). On a host alone ([`on_lanes`]): no
//! reconnect; a lost controller ends the run with its error, each lane stopped with
//! [`crate::Error::ControllerFailed`], and a queue whose QP the adapter moved to error ends its
//! lane at once ([`crate::Error::QpError`]) while the others finish.

use alloc::vec;
use alloc::vec::Vec;

use rdma::GroupVerbs;

use super::reconnecting::{Lane, LaneResult, Workload};
use super::VerifyResult;
use crate::host::controllers::{Controllers, CtrlEvent};
use crate::host::{lent, Host, HostEnv, IoDone, IoLane, LaneDrive, LaneEnd, Lent, LentOutcome};
use crate::{Error, Status};

/// One I/O queue's share of a verified run: its model, kept across the controller's reconnects.
pub struct VerifyLane {
    model: Lane,
    w: Workload,
    scratch: Vec<u8>,
}

/// One I/O queue's share of a verified run, lent, to be run on a thread of its own.
pub type VerifyJob<'a, V> = Lent<'a, VerifyLane, V>;

/// What a lane did: the queue (to be given back to its host) and how it ended.
pub type VerifyOutcome<V> = LentOutcome<V>;

impl<V: GroupVerbs> LaneDrive<V> for VerifyLane {
    /// The lane's share: random verified I/O up to the queue depth until its count is
    /// answered, then the read-back of every block it wrote; or until the queue fails (what
    /// was in flight lost: a write may or may not have landed).
    fn drive(&mut self, lane: &mut IoLane<V>, clock: &dyn Fn() -> u64, idle: &dyn Fn()) -> Result<LaneEnd<V::Error>, Error<V::Error>> {
        let VerifyLane { model, w, scratch } = self;
        let mut done = [IoDone { queue: 0, slot: 0, status: Status::SUCCESS, dw0: 0, latency_ns: 0 }; 64];
        let mut last_progress = clock();
        loop {
            let now = clock();
            let polled = match model.issue(lane, w, now, scratch) {
                Ok(()) => lane.poll(now, &mut done),
                Err(e) => Err(e),
            };
            let n = match polled {
                Ok(n) => n,
                Err(e) => {
                    model.lose_inflight();
                    return Ok(LaneEnd::Stopped(e));
                }
            };
            model.complete(lane, &done[..n], scratch)?;
            if model.done() {
                return Ok(LaneEnd::Finished);
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

    fn reconnected(&mut self) {
        self.model.reconnected();
    }
}

/// The merged tally of a verified run over lanes, each lane's, and each failed lane's error.
pub type VerifyLanes<E> = crate::host::LanesResult<VerifyResult, E>;

/// A lane state per I/O queue of `host` (QID order): `w` (its `qd` per queue, its `count` split
/// between them) on the host's first namespace, a block range each.
fn lane_states<V: GroupVerbs>(host: &Host<V>, w: &Workload) -> Result<Vec<VerifyLane>, Error<V::Error>> {
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
    let mut states = Vec::with_capacity(nq as usize);
    for i in 0..nq {
        let count = w.count / nq + (i < w.count % nq) as u64;
        let lw = Workload { count, ..*w };
        let model = Lane::new(&ns, xfer, i * part, part, i as usize, &lw)?;
        states.push(VerifyLane { scratch: vec![0; model.scratch_len()], model, w: lw });
    }
    Ok(states)
}

/// Run `w` on the host's first namespace over every I/O queue of `host` (alone on its device,
/// no reconnect), each lent out as a [`VerifyJob`] with a block range of its own. `spawn` runs
/// the jobs and calls the owner's turn it is given until they all finished, as for
/// [`crate::bench::lanes::on_lanes`]; the queues are given back to the host before this
/// returns. Errors: no namespace or I/O queue, a namespace too small for a range per queue, an
/// I/O count smaller than the number of queues, the admin queue's failure (every lane stopped
/// with [`Error::ControllerFailed`]); a lane's own failure ends that lane only and is reported
/// in [`VerifyLanes::failed`].
pub fn on_lanes<V, E, S>(host: &mut Host<V>, verbs: &mut V, env: &mut E, w: &Workload, spawn: S) -> Result<VerifyLanes<V::Error>, Error<V::Error>>
where
    V: GroupVerbs,
    E: HostEnv<V>,
    S: for<'a> FnOnce(Vec<VerifyJob<'a, V>>, &mut dyn FnMut()) -> Vec<VerifyOutcome<V>>,
{
    let mut states = lane_states(host, w)?;
    let jobs: Vec<VerifyJob<'_, V>> = host.lend_io_queues().into_iter().zip(states.iter_mut()).map(|(lane, s)| Lent::new(lane, s)).collect();
    let ends = host.run_lent(verbs, env, jobs, spawn)?;
    Ok(VerifyLanes::gather(ends, &states, |s| s.model.result().verify, VerifyResult::add))
}

/// Run `w` over every I/O queue of controller `i` of `set`, each lent out as a [`VerifyJob`]
/// (`spawn` as for [`on_lanes`], called again for each connection), surviving lost
/// connections: the lanes stop, each model takes what it had in flight as lost, the set
/// reconnects the controller and the lanes resume (`host::lent::reconnecting`; `on(j, event)`
/// hears the set's events). Returns the lanes' tallies and their sum with the losses
/// (`releases`: the controller's, lost writes and reads and the I/Os answered after a
/// reconnect: the lanes' sums). Errors: as [`on_lanes`], the controller not live at first, back
/// with another number of I/O queues, or given up ([`Error::ControllerFailed`]) before the
/// lanes finished.
pub fn reconnecting<V, E, S>(set: &mut Controllers<V>, i: usize, verbs: &mut V, env: &mut E, w: &Workload, spawn: S, on: &mut dyn FnMut(usize, &CtrlEvent<V::Error>)) -> Result<(VerifyLanes<V::Error>, LaneResult), Error<V::Error>>
where
    V: GroupVerbs,
    E: HostEnv<V>,
    S: for<'a> FnMut(Vec<VerifyJob<'a, V>>, &mut dyn FnMut()) -> Vec<VerifyOutcome<V>>,
{
    let mut states = lane_states(set.ctrls[i].live().ok_or(Error::Config("the controller is not live"))?, w)?;
    let run = lent::reconnecting(set, i, verbs, env, &mut states, spawn, on)?;
    if run.down_at_end {
        return Err(Error::ControllerFailed);
    }
    let lanes = VerifyLanes::gather(run.ends, &states, |s| s.model.result().verify, VerifyResult::add);
    let mut total = LaneResult { verify: lanes.merged, releases: run.releases, ..LaneResult::default() };
    for s in &states {
        let r = s.model.result();
        total.lost_writes += r.lost_writes;
        total.lost_reads += r.lost_reads;
        total.answered_after_reconnect += r.answered_after_reconnect;
    }
    Ok((lanes, total))
}
