//! The controllers one initiator device serves (one [`Host`] per target) and their reconnects.
//!
//! Two rules live here, for every user of several controllers on one device (the simulator's
//! initiators today):
//! - **A failed device comes back only after every controller on it released its queues.**
//!   The device reuses QP/CQ/key numbers after it is brought up again, so a controller that
//!   released its dead queues afterwards would destroy another controller's new ones. When
//!   [`Controllers::poll`] sees the device failed it releases every controller's queues first
//!   (releases succeed without the device), then brings the device up once, then each
//!   controller reconnects.
//! - **A reconnect does not stop the others' I/O.** It is a state machine the caller's poll
//!   loop advances a step per call: a backoff timer, the admin queue's CM exchange looked at
//!   once per call (a dead target costs the CM's retries, not a wait), then the rest of the
//!   bring-up (Fabrics Connect, enable, Identify, I/O queues and their CM connects,
//!   namespaces: `bringup`), one command submitted or looked at per call, so a target slow
//!   to answer costs the others nothing. Not yet: a DH-HMAC-CHAP exchange the target asks for
//!   at Connect is still waited for.
//! - **Lent I/O queues are released only once given back.** A failed controller whose queues
//!   are lent to lanes (`super::lent`) has its lanes stopped and stays failed until every queue
//!   came back; a failed device waits for every controller's lanes the same way.


use super::*;

/// Where a controller's target listens (RoCEv2: IPv4 address and port).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TargetAddr {
    pub ip: [u8; 4],
    pub port: u16,
}

/// Default delay between failed connect attempts (the first one after a failure is immediate).
/// Linux's host waits 10 s; a benchmarking instrument wants its target back sooner, and one
/// attempt a second costs a target little (each is a CM exchange and, if the CM is answered,
/// a Fabrics Connect).
pub const RECONNECT_DELAY_NS: u64 = 1_000_000_000;
/// Default time without a connection after which a controller is given up (Linux's
/// `ctrl_loss_tmo` default, 600 s).
pub const CTRL_LOSS_TMO_NS: u64 = 600_000_000_000;

/// Where one controller is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CtrlState {
    /// Connected; I/O may be submitted.
    Live,
    /// Its queues failed (or it never connected); released at the next poll.
    Failed,
    /// Released; the next attempt starts at `at` (virtual or real ns, the env's clock).
    Backoff { at: u64 },
    /// Without a connection for longer than the set's loss timeout: no more attempts (its
    /// queues are released; [`Controllers::disconnect`] still releases what is left).
    Lost,
    /// The admin queue's CM connect is in flight since `since`.
    Connecting { since: u64 },
    /// The target answered the CM at `since`; the bring-up's commands are under way.
    Enabling { since: u64 },
}

/// What [`Controllers::poll`] reports about controller `i` (the caller's bookkeeping).
#[derive(Debug)]
pub enum CtrlEvent<E> {
    /// Its queues were released: every I/O outstanding on it is over without an answer.
    Released,
    /// Connected (first time) or reconnected.
    Live,
    /// An attempt failed (the next one after the backoff).
    AttemptFailed(Error<E>),
    /// The device was brought up again (reported once, for controller 0).
    DeviceRecovered,
    /// Given up: without a connection for the loss timeout (state [`CtrlState::Lost`]).
    GaveUp,
}

/// One controller of the set: its target, its host (queues only while connected) and state.
pub struct Controller<V: GroupVerbs> {
    pub addr: TargetAddr,
    host: Host<V>,
    state: CtrlState,
    /// The bring-up while `Enabling`.
    bring: Option<super::bringup::BringUp<V>>,
    /// Successful connects of this controller (the first included).
    pub connects: u64,
    /// Failed attempts.
    pub failed_attempts: u64,
    /// Since when it has had no connection (the loss timeout runs from here); `None` while live.
    down_since: Option<u64>,
}

impl<V: GroupVerbs> Controller<V> {
    pub fn state(&self) -> CtrlState {
        self.state
    }

    /// The connected host (I/O, tick), or `None` while it is down.
    pub fn live(&mut self) -> Option<&mut Host<V>> {
        (self.state == CtrlState::Live).then_some(&mut self.host)
    }

    /// The host whatever its state (counters, namespaces of the last connect, slot buffers of
    /// I/O that just completed).
    pub fn host(&self) -> &Host<V> {
        &self.host
    }

    /// The host whatever its state, to lend its I/O queues out and take them back
    /// ([`super::lent::reconnecting`]).
    pub(crate) fn host_mut(&mut self) -> &mut Host<V> {
        &mut self.host
    }

    /// The caller saw this controller fail (a poll, tick or submit error): it is released and
    /// reconnected by the next [`Controllers::poll`].
    pub fn fail(&mut self) {
        if self.state == CtrlState::Live {
            self.state = CtrlState::Failed;
        }
    }
}

/// The controllers of one initiator device.
pub struct Controllers<V: GroupVerbs> {
    pub ctrls: Vec<Controller<V>>,
    /// Device recoveries this set performed.
    pub device_recoveries: u64,
    /// Wait after a failed attempt before the next one (from
    /// [`HostConfig::reconnect_delay_ns`]).
    pub reconnect_delay_ns: u64,
    /// Give a controller up after this long without a connection (from
    /// [`HostConfig::ctrl_loss_tmo_ns`]; `None`: never).
    pub ctrl_loss_tmo_ns: Option<u64>,
}

impl<V: GroupVerbs> Controllers<V> {
    /// One controller per `(address, subsystem NQN)`, none connected yet (the first
    /// [`Controllers::poll`] starts connecting them all).
    pub fn new(cfg: &HostConfig, targets: &[(TargetAddr, &str)]) -> Self {
        let ctrls = targets
            .iter()
            .map(|(addr, nqn)| Controller { addr: *addr, host: Host::empty(cfg.clone(), nqn), state: CtrlState::Backoff { at: 0 }, bring: None, connects: 0, failed_attempts: 0, down_since: None })
            .collect();
        Controllers { ctrls, device_recoveries: 0, reconnect_delay_ns: cfg.reconnect_delay_ns, ctrl_loss_tmo_ns: cfg.ctrl_loss_tmo_ns }
    }

    /// The earliest time a controller has timer work in [`Controllers::poll`] or its host's
    /// `tick` (a backoff ending, a connect or bring-up command timing out, a Keep Alive to
    /// send or give up on; a failed controller or a bring-up with its next command to send:
    /// at once, 0), for a caller that sleeps or jumps a virtual clock; `None` if none waits on
    /// a timer.
    pub fn next_wake(&self) -> Option<u64> {
        self.ctrls
            .iter()
            .filter_map(|c| match c.state {
                CtrlState::Backoff { at } => Some(at),
                CtrlState::Failed => Some(0),
                CtrlState::Connecting { since } => Some(since.saturating_add(c.host.cfg.timeout_ns + 1)),
                CtrlState::Enabling { .. } => c.bring.as_ref().map_or(Some(0), |b| b.next_timer(&c.host)),
                CtrlState::Live => c.host.next_timer(),
                CtrlState::Lost => None,
            })
            .min()
    }

    /// Whether every controller is connected.
    pub fn all_live(&self) -> bool {
        self.ctrls.iter().all(|c| c.state == CtrlState::Live)
    }

    /// The set's first connect, waited for (polled, the CM and device run by `env.idle`)
    /// until every controller is live; the first failed attempt is the answer (no retries
    /// before the target was ever reached, as a one-shot connect) and the set is released.
    pub fn connect_all(&mut self, verbs: &mut V, env: &mut impl HostEnv<V>) -> Result<(), Error<V::Error>> {
        loop {
            let mut failed = None;
            self.poll(verbs, env, |_, e| {
                if let CtrlEvent::AttemptFailed(e) = e {
                    failed.get_or_insert(e);
                }
            });
            if let Some(e) = failed {
                let _ = self.disconnect(verbs, env);
                return Err(e);
            }
            if self.all_live() {
                return Ok(());
            }
            env.idle(verbs);
        }
    }

    /// Advance every controller that is not live by one step; `on(i, event)` hears what
    /// happened to controller `i`. Call from the poll loop (it waits only in the bring-up
    /// after a target answered the CM).
    pub fn poll(&mut self, verbs: &mut V, env: &mut impl HostEnv<V>, mut on: impl FnMut(usize, CtrlEvent<V::Error>)) {
        // QPs the adapter moved to error on its own (an access error, a catastrophic
        // work-queue error): the controller holding one fails now, not at its next keep-alive.
        while let Some(qpn) = verbs.take_qp_error() {
            if !self.ctrls.iter_mut().any(|c| c.host.fail_qp(qpn)) {
                log::debug!("nvmeof: host: QP error event for {qpn}, no queue of ours");
            }
        }
        for c in self.ctrls.iter_mut() {
            if c.state == CtrlState::Live {
                c.host.check_connections(env);
            }
            if c.state == CtrlState::Live && c.host.failed() {
                c.state = CtrlState::Failed;
            }
        }
        if verbs.device_failed() {
            // Lent queues are released only once their lanes gave them back: stop the lanes
            // and wait for them (a later poll goes on).
            let mut lending = false;
            for c in self.ctrls.iter_mut().filter(|c| c.host.lending()) {
                c.host.stop_lent();
                c.fail();
                lending = true;
            }
            if lending {
                return;
            }
            // Every controller lets go of the dead device's objects before it comes back.
            let now = env.now_ns();
            for (i, c) in self.ctrls.iter_mut().enumerate() {
                if let Some(mut b) = c.bring.take() {
                    b.abandon(verbs, env);
                }
                if c.host.admin.is_some() || !c.host.io.is_empty() {
                    c.host.teardown(verbs, env);
                    on(i, CtrlEvent::Released);
                }
                if c.state == CtrlState::Lost {
                    continue;
                }
                c.down_since.get_or_insert(now);
                if !matches!(c.state, CtrlState::Backoff { .. }) {
                    c.state = CtrlState::Backoff { at: now };
                }
            }
            if !env.recover_device(verbs) {
                return;
            }
            self.device_recoveries += 1;
            log::info!("nvmeof: host: device up again; {} controller(s) reconnect", self.ctrls.len());
            on(0, CtrlEvent::DeviceRecovered);
        }
        for i in 0..self.ctrls.len() {
            self.step(i, verbs, env, &mut on);
        }
    }

    fn step(&mut self, i: usize, verbs: &mut V, env: &mut impl HostEnv<V>, on: &mut impl FnMut(usize, CtrlEvent<V::Error>)) {
        let now = env.now_ns();
        let delay = self.reconnect_delay_ns;
        let loss_tmo = self.ctrl_loss_tmo_ns;
        let c = &mut self.ctrls[i];
        match c.state {
            CtrlState::Live | CtrlState::Lost => {}
            CtrlState::Failed if c.host.lending() => {
                // Released once its lanes stopped and gave their queues back.
                c.host.stop_lent();
            }
            CtrlState::Failed => {
                c.host.teardown(verbs, env);
                on(i, CtrlEvent::Released);
                c.down_since.get_or_insert(now);
                // The first attempt at once; the backoff is between failed attempts.
                c.state = CtrlState::Backoff { at: now };
            }
            CtrlState::Backoff { at } if now >= at => {
                let down = *c.down_since.get_or_insert(now);
                if loss_tmo.is_some_and(|t| now.saturating_sub(down) >= t) {
                    log::warn!(
                        "nvmeof: host: controller {i} ({}) without a connection for {} ms after {} attempts: given up (ctrl_loss_tmo)",
                        c.host.subnqn,
                        now.saturating_sub(down) / 1_000_000,
                        c.failed_attempts
                    );
                    c.state = CtrlState::Lost;
                    on(i, CtrlEvent::GaveUp);
                    return;
                }
                env.select_target(c.addr);
                // Counted per attempt, as `Host::reconnect` counts.
                c.host.stats.reconnects += u64::from(c.connects > 0);
                match c.host.start_admin(verbs, env) {
                    Ok(()) => c.state = CtrlState::Connecting { since: now },
                    Err(e) => Self::attempt_failed(c, i, e, verbs, env, now + delay, on),
                }
            }
            CtrlState::Backoff { .. } => {}
            CtrlState::Connecting { since } => match c.host.poll_admin(verbs, env) {
                Ok(false) if now.saturating_sub(since) <= c.host.cfg.timeout_ns => {}
                Ok(false) => Self::attempt_failed(c, i, Error::Timeout, verbs, env, now + delay, on),
                Ok(true) => {
                    // The target answered: the rest of the bring-up, a step per call.
                    c.bring = Some(super::bringup::BringUp::new());
                    c.state = CtrlState::Enabling { since: now };
                }
                Err(e) => Self::attempt_failed(c, i, e, verbs, env, now + delay, on),
            },
            CtrlState::Enabling { .. } => {
                // Its I/O queues' CM connects go to this controller's target.
                env.select_target(c.addr);
                let b = c.bring.as_mut().expect("enabling has a bring-up");
                match b.step(&mut c.host, verbs, env) {
                    Ok(false) => {}
                    Ok(true) => {
                        c.bring = None;
                        c.connects += 1;
                        c.down_since = None;
                        c.state = CtrlState::Live;
                        on(i, CtrlEvent::Live);
                    }
                    Err(e) => Self::attempt_failed(c, i, e, verbs, env, now + delay, on),
                }
            }
        }
    }

    /// An attempt failed: release what it made; the next one at `retry_at`.
    fn attempt_failed(c: &mut Controller<V>, i: usize, e: Error<V::Error>, verbs: &mut V, env: &mut impl HostEnv<V>, retry_at: u64, on: &mut impl FnMut(usize, CtrlEvent<V::Error>)) {
        if let Some(mut b) = c.bring.take() {
            b.abandon(verbs, env);
        }
        c.host.teardown(verbs, env);
        c.failed_attempts += 1;
        c.state = CtrlState::Backoff { at: retry_at };
        on(i, CtrlEvent::AttemptFailed(e));
    }

    /// Orderly shutdown of every live controller (the others are released); the first error
    /// and its controller.
    pub fn disconnect(&mut self, verbs: &mut V, env: &mut impl HostEnv<V>) -> Result<(), (usize, Error<V::Error>)> {
        let mut r = Ok(());
        for (i, c) in self.ctrls.iter_mut().enumerate() {
            if c.state == CtrlState::Live {
                let e = c.host.shutdown(verbs, env);
                if let (Ok(()), Err(e)) = (&r, e) {
                    r = Err((i, e));
                }
            }
            if let Some(mut b) = c.bring.take() {
                b.abandon(verbs, env);
            }
            c.host.teardown(verbs, env);
            c.state = CtrlState::Backoff { at: u64::MAX };
        }
        r
    }
}
