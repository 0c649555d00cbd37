//! One controller of a [`Controllers`] set with its I/O queues lent to lanes (`threads=on`)
//! across its reconnects: the lanes run until their work is done; when the controller fails
//! (its admin queue or keep-alive, a lent queue's QP the adapter moved to error, a connection
//! the CM saw lost, the device) the owner stops every lane, takes the queues back once each
//! stopped, and the set releases and reconnects the controller as it does any other (its
//! `reconnect_delay`, `ctrl_loss_tmo`); the new queues are lent again and each lane's work
//! resumes from its kept state ([`LaneDrive`]). Outages are counted and timed on the owner's
//! clock, from the failure the owner saw until the controller is live again; a run whose every
//! lane's work is over while the controller is down (a bench's duration, on that clock, which
//! the lanes must run on too) ends then, `down_at_end`. Slow path.

use alloc::vec::Vec;

use rdma::GroupVerbs;

use super::controllers::{Controllers, CtrlEvent, CtrlState};
use super::io::{LaneDrive, LaneEnd, Lent, LentOutcome};
use super::HostEnv;
use crate::Error;

/// What a run over lent queues across reconnects gave, besides each lane's state.
#[derive(Debug)]
pub struct LentRun<E> {
    /// Each lane's end in the last run of its work, by QID ([`LaneEnd::Stopped`] only if the
    /// controller was given up; `Err`: the lane's work failed and the run stopped).
    pub ends: Vec<(u16, Result<LaneEnd<E>, Error<E>>)>,
    /// Times the controller failed and was released while the lanes ran.
    pub releases: u64,
    /// Outages: from the failure the owner saw until live again (owner's clock, ns).
    pub outages: u64,
    pub outage_ns: u64,
    pub longest_outage_ns: u64,
    /// Down when the run ended: given up (its loss timeout) before the lanes finished, or every
    /// lane's work over (its time or count) while the controller was down.
    pub down_at_end: bool,
}

/// Run each of `states` (lane `qid`'s is `states[qid - 1]`) on an I/O queue of controller `i`
/// of `set`, lent out; `spawn` runs the jobs (each on a thread or CPU of its own) and calls the
/// owner's turn it is given until every one finished: the device and CM (`env.idle`), the set
/// (`Controllers::poll`: the adapter's QP error events, each handed to the controller whose
/// queue it names, every other controller's reconnects), controller `i`'s admin queue and
/// keep-alive (`Host::tick`). When the controller fails its lanes are stopped; once they all
/// gave their queues back it is released and reconnected, and the states run again on the new
/// queues. `on(j, event)` hears the set's events. Returns once every lane finished, a lane's
/// work failed, the controller was given up, or every lane's work is over while the
/// controller is down ([`LaneDrive::over_while_down`], at `env.now_ns()`: the lanes' clock
/// must be the owner's). Errors: the controller not live at first, or
/// back with another number of I/O queues.
pub fn reconnecting<V, E, S, Sp>(set: &mut Controllers<V>, i: usize, verbs: &mut V, env: &mut E, states: &mut [S], mut spawn: Sp, on: &mut dyn FnMut(usize, &CtrlEvent<V::Error>)) -> Result<LentRun<V::Error>, Error<V::Error>>
where
    V: GroupVerbs,
    E: HostEnv<V>,
    S: LaneDrive<V>,
    Sp: for<'a> FnMut(Vec<Lent<'a, S, V>>, &mut dyn FnMut()) -> Vec<LentOutcome<V>>,
{
    let mut run = LentRun { ends: Vec::new(), releases: 0, outages: 0, outage_ns: 0, longest_outage_ns: 0, down_at_end: false };
    if set.ctrls[i].state() != CtrlState::Live {
        return Err(Error::Config("the controller is not live"));
    }
    // Since when the controller has been down (owner's clock).
    let mut down_since: Option<u64> = None;
    loop {
        let host = set.ctrls[i].host_mut();
        if host.io_queues().0 as usize != states.len() {
            return Err(Error::Config("the controller came back with another number of I/O queues"));
        }
        let jobs: Vec<Lent<'_, S, V>> = host.lend_io_queues().into_iter().zip(states.iter_mut()).map(|(lane, s)| Lent::new(lane, s)).collect();
        let outcomes = {
            let mut turn = || {
                env.idle(verbs);
                set.poll(verbs, env, |j, e| on(j, &e));
                let c = &mut set.ctrls[i];
                let now = env.now_ns();
                if c.live().is_some_and(|h| h.tick(verbs, now).is_err() || h.failed()) {
                    c.fail();
                }
                if c.state() != CtrlState::Live {
                    c.host_mut().stop_lent();
                    down_since.get_or_insert_with(|| env.now_ns());
                }
            };
            spawn(jobs, &mut turn)
        };
        run.ends = set.ctrls[i].host_mut().give_back(outcomes);
        let stopped = run.ends.iter().any(|e| matches!(e.1, Ok(LaneEnd::Stopped(_))));
        if !stopped || run.ends.iter().any(|e| e.1.is_err()) {
            return Ok(run);
        }
        // A lane's queue failed: the controller did (released and reconnected by the set).
        set.ctrls[i].fail();
        down_since.get_or_insert_with(|| env.now_ns());
        loop {
            let state = set.ctrls[i].state();
            if state == CtrlState::Live {
                break;
            }
            let now = env.now_ns();
            // Given up (its loss timeout), or every lane's work over (its time or count) while down.
            if state == CtrlState::Lost || states.iter_mut().all(|s| s.over_while_down(now)) {
                if let Some(t) = down_since.take() {
                    run.outage(now.saturating_sub(t));
                }
                run.down_at_end = true;
                return Ok(run);
            }
            let mut live = false;
            set.poll(verbs, env, |j, e| {
                if j == i {
                    match e {
                        CtrlEvent::Released => run.releases += 1,
                        CtrlEvent::Live => live = true,
                        _ => {}
                    }
                }
                on(j, &e);
            });
            if live {
                if let Some(t) = down_since.take() {
                    run.outage(env.now_ns().saturating_sub(t));
                }
            } else {
                env.idle(verbs);
            }
        }
        for s in states.iter_mut() {
            s.reconnected();
        }
    }
}

impl<E> LentRun<E> {
    fn outage(&mut self, ns: u64) {
        self.outages += 1;
        self.outage_ns += ns;
        self.longest_outage_ns = self.longest_outage_ns.max(ns);
    }
}
