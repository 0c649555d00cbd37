//! The latency bench's driver loop, in two forms over one state: on a single connected
//! [`Host`] (an error ends the run: [`on_host`], behind `Host::bench`), and on one controller
//! of a [`Controllers`] set ([`reconnecting`], the appliance's and emu-runner's `nvmf.bench=`):
//! a lost target is released and reconnected by the set with its backoff and the bench goes on
//! once the controller is live again. The same state drives each lent I/O queue of
//! [`super::lanes`] (`threads=on`), through its `BenchQueue`.
//!
//! What a lost connection does to the figures: I/Os in flight when the controller's queues
//! were released never got an answer; they are counted `lost` (per direction), are not latency
//! samples and are not re-issued (the random offsets carry no obligation). The time from the
//! last answer before the loss until the controller is live again is an outage (count, total,
//! longest): it includes the time the loss took to notice (a dead target is often found only
//! by the keep-alive); the run's elapsed time includes it, as fio's runtime would. Per I/O: no
//! allocation, no search (a per-slot direction table sized at each connect).

use alloc::vec::Vec;

use rdma::GroupVerbs;

use super::{BenchConfig, BenchProgress, BenchResult, Pattern, Rng};
use crate::host::controllers::{Controllers, CtrlEvent, CtrlState};
use crate::host::{Host, HostEnv, IoDone, IoKind, IoLane, NsInfo};
use crate::{Error, Status};

/// How often the progress callback runs.
const PROGRESS_NS: u64 = 1_000_000_000;

/// Direction of a slot's I/O in flight.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Slot {
    Free,
    Read,
    Write,
}

/// The queue a run submits on: queue 1 of a connected host, or an I/O queue lent to a thread
/// ([`crate::host::IoLane`]).
pub(super) trait BenchQueue<E> {
    fn alloc_slot(&mut self) -> Option<u16>;
    fn submit(&mut self, slot: u16, kind: IoKind, nsid: u32, lba: u64, blocks: u32, now: u64) -> Result<(), Error<E>>;
}

/// Queue 1 of a host.
struct HostQueue1<'a, V: GroupVerbs>(&'a mut Host<V>, &'a mut V);

impl<V: GroupVerbs> BenchQueue<V::Error> for HostQueue1<'_, V> {
    #[inline]
    fn alloc_slot(&mut self) -> Option<u16> {
        self.0.alloc_slot(1)
    }
    #[inline]
    fn submit(&mut self, slot: u16, kind: IoKind, nsid: u32, lba: u64, blocks: u32, now: u64) -> Result<(), Error<V::Error>> {
        self.0.submit(self.1, 1, slot, kind, nsid, lba, blocks, now)
    }
}

impl<V: GroupVerbs> BenchQueue<V::Error> for IoLane<V> {
    #[inline]
    fn alloc_slot(&mut self) -> Option<u16> {
        IoLane::alloc_slot(self)
    }
    #[inline]
    fn submit(&mut self, slot: u16, kind: IoKind, nsid: u32, lba: u64, blocks: u32, now: u64) -> Result<(), Error<V::Error>> {
        IoLane::submit(self, slot, kind, nsid, lba, blocks, now)
    }
}

/// One run's state, whatever drives it.
pub(super) struct Run {
    cfg: BenchConfig,
    nsid: u32,
    /// LBAs per I/O and I/O-sized units in the namespace (of the current connection).
    blocks: u32,
    span: u64,
    rng: Rng,
    seq: u64,
    res: BenchResult,
    /// The slots of the queue it submits on (index = slot).
    slots: Vec<Slot>,
    pub(super) inflight: u32,
    issued: u64,
    start: u64,
    next_progress: u64,
}

impl Run {
    pub(super) fn new(cfg: &BenchConfig, nsid: u32, start: u64) -> Self {
        Run {
            cfg: *cfg,
            nsid,
            blocks: 0,
            span: 0,
            rng: Rng::new(cfg.seed),
            seq: 0,
            res: BenchResult::default(),
            slots: Vec::new(),
            inflight: 0,
            issued: 0,
            start,
            next_progress: start.saturating_add(PROGRESS_NS),
        }
    }

    /// Take a (re)connected host's namespace geometry and queue depth (slow path).
    fn attach<V: GroupVerbs>(&mut self, host: &Host<V>) -> Result<(), Error<V::Error>> {
        let ns = *host.namespaces.iter().find(|n| n.nsid == self.nsid).ok_or(Error::Config("no such namespace"))?;
        self.attach_ns(&ns, host.io_queues().1)
    }

    /// Take namespace `ns`'s geometry and the depth of the queue the run submits on.
    pub(super) fn attach_ns<E>(&mut self, ns: &NsInfo, depth: u16) -> Result<(), Error<E>> {
        if self.cfg.block_size == 0 || self.cfg.block_size % ns.block_size != 0 {
            return Err(Error::Config("block size not a multiple of the LBA size"));
        }
        self.blocks = self.cfg.block_size / ns.block_size;
        self.span = ns.blocks / self.blocks as u64;
        if self.span == 0 {
            return Err(Error::Config("namespace smaller than one I/O"));
        }
        debug_assert_eq!(self.inflight, 0, "attached with I/O in flight");
        self.slots.clear();
        self.slots.resize(depth as usize, Slot::Free);
        Ok(())
    }

    /// The run is over (duration or I/O count reached): no new I/O.
    pub(super) fn over(&self, now: u64) -> bool {
        now.saturating_sub(self.start) >= self.cfg.duration_ns || (self.cfg.max_ios != 0 && self.issued >= self.cfg.max_ios)
    }

    /// Submit up to the queue depth on `q` (a host's queue 1, or a lent queue).
    pub(super) fn issue<E>(&mut self, q: &mut impl BenchQueue<E>, now: u64) -> Result<(), Error<E>> {
        let qd = self.cfg.queue_depth.min(self.slots.len() as u16).max(1) as u32;
        while self.inflight < qd && !(self.cfg.max_ios != 0 && self.issued >= self.cfg.max_ios) {
            let Some(slot) = q.alloc_slot() else { break };
            let idx = match self.cfg.pattern {
                Pattern::SeqRead | Pattern::SeqWrite => {
                    self.seq = (self.seq + 1) % self.span;
                    self.seq
                }
                _ => self.rng.next() % self.span,
            };
            let read = match self.cfg.pattern {
                Pattern::RandRead | Pattern::SeqRead => true,
                Pattern::RandWrite | Pattern::SeqWrite => false,
                Pattern::RandMix { read_pct } => (self.rng.next() % 100) < read_pct as u64,
            };
            let kind = if read { IoKind::Read } else { IoKind::Write };
            q.submit(slot, kind, self.nsid, idx * self.blocks as u64, self.blocks, now)?;
            if let Some(s) = self.slots.get_mut(slot as usize) {
                *s = if read { Slot::Read } else { Slot::Write };
            }
            if read {
                self.res.reads += 1;
            } else {
                self.res.writes += 1;
            }
            self.inflight += 1;
            self.issued += 1;
        }
        Ok(())
    }

    /// Count answered I/Os; only successful ones are latency samples.
    pub(super) fn complete<E>(&mut self, done: &[IoDone]) -> Result<(), Error<E>> {
        for d in done {
            let s = self.slots.get_mut(d.slot as usize).ok_or(Error::Protocol("completion for a slot not in flight"))?;
            let read = match *s {
                Slot::Free => return Err(Error::Protocol("completion for a slot not in flight")),
                Slot::Read => true,
                Slot::Write => false,
            };
            *s = Slot::Free;
            self.inflight -= 1;
            self.res.ios += 1;
            let dir = if read { &mut self.res.read } else { &mut self.res.write };
            dir.ios += 1;
            if d.status.is_success() {
                self.res.bytes += self.cfg.block_size as u64;
                dir.bytes += self.cfg.block_size as u64;
                dir.lat.record(d.latency_ns);
            } else {
                self.res.errors += 1;
                dir.errors += 1;
            }
        }
        Ok(())
    }

    /// The controller's queues were released: whatever was in flight got no answer.
    pub(super) fn lose_inflight(&mut self) {
        for s in self.slots.iter_mut() {
            match *s {
                Slot::Free => continue,
                Slot::Read => self.res.read.lost += 1,
                Slot::Write => self.res.write.lost += 1,
            }
            self.res.lost += 1;
            *s = Slot::Free;
        }
        self.inflight = 0;
    }

    fn outage(&mut self, ns: u64) {
        self.res.outages += 1;
        self.res.outage_ns += ns;
        self.res.longest_outage_ns = self.res.longest_outage_ns.max(ns);
    }

    fn progress(&mut self, now: u64, progress: &mut dyn FnMut(&BenchProgress)) {
        if now >= self.next_progress {
            self.next_progress = now.saturating_add(PROGRESS_NS);
            progress(&BenchProgress { elapsed_ns: now.saturating_sub(self.start), ios: self.res.ios, duration_ns: self.cfg.duration_ns });
        }
    }

    /// The result so far, its elapsed time up to `now` (a lane's, each time it ends).
    pub(super) fn result_at(&self, now: u64) -> BenchResult {
        let mut r = self.res.clone();
        r.elapsed_ns = now.saturating_sub(self.start);
        r
    }

    pub(super) fn finish(mut self, now: u64) -> BenchResult {
        self.res.elapsed_ns = now.saturating_sub(self.start);
        self.res
    }
}

pub(super) const NO_IO: IoDone = IoDone { queue: 0, slot: 0, status: Status::SUCCESS, dw0: 0, latency_ns: 0 };

/// Run `cfg` on `host`'s namespace `nsid` over I/O queue 1; the first error (submit, poll,
/// keep-alive) ends it. `progress` about once a second.
pub fn on_host<V: GroupVerbs>(host: &mut Host<V>, verbs: &mut V, env: &mut impl HostEnv<V>, nsid: u32, cfg: &BenchConfig, progress: &mut dyn FnMut(&BenchProgress)) -> Result<BenchResult, Error<V::Error>> {
    let mut run = Run::new(cfg, nsid, env.now_ns());
    run.attach(host)?;
    let mut done = [NO_IO; 64];
    loop {
        let now = env.now_ns();
        if !run.over(now) {
            run.issue(&mut HostQueue1(host, verbs), now)?;
        } else if run.inflight == 0 {
            break;
        }
        let now = env.now_ns();
        let n = host.poll(verbs, now, &mut done)?;
        run.complete(&done[..n])?;
        run.progress(now, progress);
        host.tick(verbs, now)?;
        if n == 0 {
            env.idle(verbs);
        }
    }
    Ok(run.finish(env.now_ns()))
}

/// Run `cfg` on controller `i` of `set` (namespace `nsid`), polling the set: when the
/// controller is lost its in-flight I/Os are counted lost, the set reconnects it with its
/// backoff (`on` hears controller `i`'s events) and the bench resumes on the new connection
/// until the duration or I/O count is reached; an outage still open at the end is counted and
/// `down_at_end` set. Errors: the namespace missing or unusable on a (re)connect, a completion
/// of nothing in flight.
#[allow(clippy::too_many_arguments)]
pub fn reconnecting<V: GroupVerbs>(
    set: &mut Controllers<V>,
    i: usize,
    verbs: &mut V,
    env: &mut impl HostEnv<V>,
    nsid: u32,
    cfg: &BenchConfig,
    progress: &mut dyn FnMut(&BenchProgress),
    on: &mut dyn FnMut(&CtrlEvent<V::Error>),
) -> Result<BenchResult, Error<V::Error>> {
    let start = env.now_ns();
    let mut run = Run::new(cfg, nsid, start);
    let mut down_since = None;
    match set.ctrls[i].live() {
        Some(host) => run.attach(host)?,
        None => down_since = Some(start),
    }
    let mut done = [NO_IO; 64];
    // When the controller last answered an I/O (where an outage begins).
    let mut last_answer = start;
    loop {
        let (mut released, mut live) = (false, false);
        set.poll(verbs, env, |j, e| {
            if j == i {
                match e {
                    CtrlEvent::Released => released = true,
                    CtrlEvent::Live => live = true,
                    _ => {}
                }
                on(&e);
            }
        });
        let now = env.now_ns();
        if released {
            run.lose_inflight();
            down_since.get_or_insert(last_answer);
        }
        let c = &mut set.ctrls[i];
        if live {
            run.attach(c.host())?;
            if let Some(t) = down_since.take() {
                run.outage(now.saturating_sub(t));
            }
            last_answer = now;
        }
        // Given up (its loss timeout): nothing more will come from it.
        let over = run.over(now) || c.state() == CtrlState::Lost;
        if over && run.inflight == 0 {
            break;
        }
        let mut n = 0;
        if let Some(host) = c.live() {
            let mut ok = over || run.issue(&mut HostQueue1(host, verbs), now).is_ok();
            if ok {
                match host.poll(verbs, now, &mut done) {
                    Ok(k) => {
                        run.complete(&done[..k])?;
                        n = k;
                        if k > 0 {
                            last_answer = now;
                        }
                    }
                    Err(_) => ok = false,
                }
            }
            ok = ok && host.tick(verbs, now).is_ok() && !host.failed();
            if !ok {
                // Released (its in-flight I/O counted lost) by the next `set.poll`.
                c.fail();
                down_since.get_or_insert(last_answer);
            }
        }
        run.progress(now, progress);
        if n == 0 {
            env.idle(verbs);
        }
    }
    let end = env.now_ns();
    if let Some(t) = down_since {
        run.outage(end.saturating_sub(t));
        run.res.down_at_end = true;
    }
    Ok(run.finish(end))
}
