//! Verified random I/O over a [`Controllers`] set that survives lost targets: each controller
//! runs its own verified workload on its first namespace, a controller whose target goes away
//! is released and reconnected by the set (backoff, no wait) while the others keep going, and
//! its workload resumes once it is live again. The appliance's `nvmf.verify=` runs on it.
//!
//! What a lost connection means for the model of each block: a write acknowledged before the
//! loss must read back until overwritten; a write in flight at the loss (released without an
//! answer) may or may not have landed, so the block may hold its last acknowledged content or
//! that write's, never anything else (blocks are checked whole; a read that matches one of the
//! candidates settles the block). Reads in flight at the loss are simply lost. After `count`
//! answered I/Os per controller every block the run wrote is read back and checked.
//! The per-block model ([`Lane`], over a block range) also drives each lent I/O queue of
//! [`super::lanes`] (`threads=on`), through its [`VerifyPath`].
//! Slow path: allocates its shadows once per controller and a little per lost write.

use alloc::collections::BTreeMap;
use alloc::vec;
use alloc::vec::Vec;

use hal::DmaRegion;
use rdma::GroupVerbs;

use super::{pattern_byte, VerifyResult};
use crate::bench::Rng;
use crate::host::controllers::{Controllers, CtrlEvent};
use crate::host::{Host, HostEnv, IoDone, IoKind, IoLane, NsInfo};
use crate::{Error, Status};

/// The queues a workload submits on: every I/O queue of a connected host ([`OnHost`]), or one
/// I/O queue lent to a thread ([`IoLane`], [`super::lanes`]).
pub(super) trait VerifyPath {
    type Buf: DmaRegion;
    type E;
    /// How many queues the workload spreads its I/O over.
    fn queues(&self) -> u16;
    /// The QID of the `i`th of them.
    fn qid(&self, i: u16) -> u16;
    fn alloc_slot(&mut self, qid: u16) -> Option<u16>;
    fn slot_buf(&self, qid: u16, slot: u16) -> (&Self::Buf, usize, usize);
    #[allow(clippy::too_many_arguments)]
    fn submit(&mut self, qid: u16, slot: u16, kind: IoKind, nsid: u32, lba: u64, blocks: u32, now: u64) -> Result<(), Error<Self::E>>;
}

/// Every I/O queue of a connected host, chosen at random per I/O.
struct OnHost<'a, V: GroupVerbs>(&'a mut Host<V>, &'a mut V);

impl<V: GroupVerbs> VerifyPath for OnHost<'_, V> {
    type Buf = V::Buf;
    type E = V::Error;
    fn queues(&self) -> u16 {
        self.0.io_queues().0
    }
    fn qid(&self, i: u16) -> u16 {
        1 + i
    }
    fn alloc_slot(&mut self, qid: u16) -> Option<u16> {
        self.0.alloc_slot(qid)
    }
    fn slot_buf(&self, qid: u16, slot: u16) -> (&V::Buf, usize, usize) {
        self.0.slot_buf(qid, slot)
    }
    fn submit(&mut self, qid: u16, slot: u16, kind: IoKind, nsid: u32, lba: u64, blocks: u32, now: u64) -> Result<(), Error<V::Error>> {
        self.0.submit(self.1, qid, slot, kind, nsid, lba, blocks, now)
    }
}

impl<V: GroupVerbs> VerifyPath for IoLane<V> {
    type Buf = V::Buf;
    type E = V::Error;
    fn queues(&self) -> u16 {
        1
    }
    fn qid(&self, _: u16) -> u16 {
        IoLane::qid(self)
    }
    fn alloc_slot(&mut self, _: u16) -> Option<u16> {
        IoLane::alloc_slot(self)
    }
    fn slot_buf(&self, _: u16, slot: u16) -> (&V::Buf, usize, usize) {
        IoLane::slot_buf(self, slot)
    }
    fn submit(&mut self, _: u16, slot: u16, kind: IoKind, nsid: u32, lba: u64, blocks: u32, now: u64) -> Result<(), Error<V::Error>> {
        IoLane::submit(self, slot, kind, nsid, lba, blocks, now)
    }
}

/// The workload's settings (per controller).
#[derive(Debug, Clone, Copy)]
pub struct Workload {
    /// Answered random I/Os per controller (lost ones are not counted, new ones replace them).
    pub count: u64,
    /// I/Os in flight per controller.
    pub qd: usize,
    /// Largest I/O in blocks.
    pub max_blocks: u32,
    pub seed: u64,
    /// Give up when no controller made progress (an I/O answered) for this long.
    pub stall_ns: u64,
}

/// What one controller's workload saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LaneResult {
    pub verify: VerifyResult,
    /// Writes released without an answer (their blocks were uncertain until read or rewritten).
    pub lost_writes: u64,
    /// Reads released without an answer.
    pub lost_reads: u64,
    /// Times the controller's queues were released.
    pub releases: u64,
    /// I/Os answered after the controller's first reconnect.
    pub answered_after_reconnect: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Read,
    Write,
    ReadBack,
}

#[derive(Clone, Copy)]
struct Flight {
    queue: u16,
    slot: u16,
    op: Op,
    lba: u64,
    blocks: u32,
    gen: u64,
}

/// One controller's (or one lent queue's) workload state over its block range.
pub(super) struct Lane {
    nsid: u32,
    bs: usize,
    /// The range's first block; everything below (shadow, flights, cursor) counts from it.
    base: u64,
    span: u64,
    max_blocks: u32,
    /// Last acknowledged generation per block (0: not written by this run).
    shadow: Vec<u64>,
    /// Generations of writes lost in flight, per block not settled since.
    maybe: BTreeMap<u64, Vec<u64>>,
    inflight: Vec<Flight>,
    rng: Rng,
    gen: u64,
    gen_base: u64,
    answered: u64,
    /// Read-back position once the random phase is over.
    cursor: Option<u64>,
    lives: u64,
    res: LaneResult,
}

impl Lane {
    /// Controller `i`'s workload on its host's first namespace, over the verified span.
    fn on_host<V: GroupVerbs>(host: &Host<V>, i: usize, w: &Workload) -> Result<Self, Error<V::Error>> {
        let ns = *host.namespaces.first().ok_or(Error::Config("the controller has no namespace"))?;
        let (nq, _) = host.io_queues();
        if nq == 0 {
            return Err(Error::Config("no I/O queue"));
        }
        let (_, _, xfer) = host.slot_buf(1, 0);
        Lane::new(&ns, xfer, 0, Lane::verified_span(&ns), i, w)
    }

    /// The blocks of `ns` a workload covers (the first part of big namespaces: its shadow's
    /// memory is bounded).
    pub(super) fn verified_span(ns: &NsInfo) -> u64 {
        ns.blocks.min(1 << 20)
    }

    /// Workload `i` (its seed and generations its own) on blocks `base..base + span` of `ns`,
    /// I/Os up to `xfer` bytes.
    pub(super) fn new<E>(ns: &NsInfo, xfer: usize, base: u64, span: u64, i: usize, w: &Workload) -> Result<Self, Error<E>> {
        let bs = ns.block_size as usize;
        let max_blocks = w.max_blocks.clamp(1, (xfer / bs).max(1) as u32);
        if span <= max_blocks as u64 {
            return Err(Error::Config("namespace too small for the I/O size"));
        }
        Ok(Lane {
            nsid: ns.nsid,
            bs,
            base,
            span,
            max_blocks,
            shadow: vec![0; span as usize],
            maybe: BTreeMap::new(),
            inflight: Vec::with_capacity(w.qd),
            rng: Rng::new(w.seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            gen: 0,
            // Each controller's generations are its own (two controllers may share a namespace).
            gen_base: (i as u64 + 1) << 48,
            answered: 0,
            cursor: None,
            lives: 1,
            res: LaneResult::default(),
        })
    }

    pub(super) fn done(&self) -> bool {
        self.cursor == Some(self.span) && self.inflight.is_empty()
    }

    /// The tally so far.
    pub(super) fn result(&self) -> LaneResult {
        self.res
    }

    /// Bytes of scratch the workload needs (its largest I/O).
    pub(super) fn scratch_len(&self) -> usize {
        self.max_blocks as usize * self.bs
    }

    /// The controller is live again after its queues were released.
    pub(super) fn reconnected(&mut self) {
        self.lives += 1;
    }

    /// Everything in flight was released without an answer.
    pub(super) fn lose_inflight(&mut self) {
        self.res.releases += 1;
        for f in self.inflight.drain(..) {
            match f.op {
                Op::Write => {
                    self.res.lost_writes += 1;
                    for b in 0..f.blocks as u64 {
                        self.maybe.entry(f.lba + b).or_default().push(f.gen);
                    }
                }
                Op::Read => self.res.lost_reads += 1,
                Op::ReadBack => {
                    self.res.lost_reads += 1;
                    // Read that range again.
                    self.cursor = self.cursor.map(|c| c.min(f.lba));
                }
            }
        }
    }

    /// The next block the read-back must look at, from `lba` on.
    fn next_known(&self, mut lba: u64) -> u64 {
        while lba < self.span && self.shadow[lba as usize] == 0 && !self.maybe.contains_key(&lba) {
            lba += 1;
        }
        lba
    }

    /// Submit what the queue depth allows; an error means the controller failed.
    pub(super) fn issue<P: VerifyPath>(&mut self, path: &mut P, w: &Workload, now: u64, scratch: &mut [u8]) -> Result<(), Error<P::E>> {
        let nq = path.queues().max(1) as u64;
        if self.cursor.is_none() && self.answered >= w.count && self.inflight.is_empty() {
            self.cursor = Some(0);
        }
        while self.inflight.len() < w.qd {
            let queue = path.qid((self.rng.next() % nq) as u16);
            let (op, lba, blocks) = if let Some(c) = self.cursor {
                let lba = self.next_known(c);
                if lba >= self.span {
                    self.cursor = Some(self.span);
                    break;
                }
                let blocks = (1..=self.max_blocks as u64).take_while(|k| lba + k <= self.span && (self.shadow[(lba + k - 1) as usize] != 0 || self.maybe.contains_key(&(lba + k - 1)))).last().unwrap_or(1) as u32;
                (Op::ReadBack, lba, blocks)
            } else {
                if self.answered + self.inflight.len() as u64 >= w.count {
                    break;
                }
                let blocks = 1 + (self.rng.next() % self.max_blocks as u64) as u32;
                let lba = self.rng.next() % (self.span - blocks as u64);
                if self.inflight.iter().any(|f| lba < f.lba + f.blocks as u64 && f.lba < lba + blocks as u64) {
                    continue;
                }
                (if self.rng.next() % 2 == 0 { Op::Write } else { Op::Read }, lba, blocks)
            };
            let Some(slot) = path.alloc_slot(queue) else { break };
            let mut gen = 0;
            if op == Op::Write {
                self.gen += 1;
                gen = self.gen_base | self.gen;
                let data = &mut scratch[..blocks as usize * self.bs];
                for (b, chunk) in data.chunks_mut(self.bs).enumerate() {
                    for (i, x) in chunk.iter_mut().enumerate() {
                        *x = pattern_byte(self.base + lba + b as u64, gen, i);
                    }
                }
                let (buf, off, _) = path.slot_buf(queue, slot);
                buf.write(off, data);
                self.res.verify.writes += 1;
            } else {
                self.res.verify.reads += 1;
            }
            let kind = if op == Op::Write { IoKind::Write } else { IoKind::Read };
            path.submit(queue, slot, kind, self.nsid, self.base + lba, blocks, now)?;
            self.inflight.push(Flight { queue, slot, op, lba, blocks, gen });
            if let (Op::ReadBack, Some(_)) = (op, self.cursor) {
                self.cursor = Some(lba + blocks as u64);
            }
        }
        Ok(())
    }

    /// Account for finished I/O; `Err` for a completion of nothing in flight.
    pub(super) fn complete<P: VerifyPath>(&mut self, path: &P, done: &[IoDone], scratch: &mut [u8]) -> Result<(), Error<P::E>> {
        for d in done {
            let Some(i) = self.inflight.iter().position(|f| f.queue == d.queue && f.slot == d.slot) else {
                return Err(Error::Protocol("completion for a slot not in flight"));
            };
            let f = self.inflight.swap_remove(i);
            if f.op != Op::ReadBack {
                self.answered += 1;
            }
            if self.lives > 1 {
                self.res.answered_after_reconnect += 1;
            }
            if !d.status.is_success() {
                self.res.verify.errors += 1;
                self.res.verify.first_error.get_or_insert(d.status);
                if f.op == Op::Write {
                    // A failed write may have left either content.
                    for b in 0..f.blocks as u64 {
                        self.maybe.entry(f.lba + b).or_default().push(f.gen);
                    }
                }
                continue;
            }
            if f.op == Op::Write {
                for b in 0..f.blocks as u64 {
                    self.shadow[(f.lba + b) as usize] = f.gen;
                    self.maybe.remove(&(f.lba + b));
                }
                continue;
            }
            let (buf, off, _) = path.slot_buf(f.queue, f.slot);
            let got = &mut scratch[..f.blocks as usize * self.bs];
            buf.read(off, got);
            for (b, chunk) in got.chunks(self.bs).enumerate() {
                self.check_block(f.lba + b as u64, chunk, f.op == Op::ReadBack);
            }
        }
        Ok(())
    }

    /// Compare one block with what it may hold; a match settles an uncertain block.
    fn check_block(&mut self, lba: u64, data: &[u8], read_back: bool) {
        let acked = self.shadow[lba as usize];
        let is = |g: u64| data.iter().enumerate().all(|(i, x)| *x == pattern_byte(self.base + lba, g, i));
        let maybe = self.maybe.get(&lba);
        if acked == 0 && maybe.is_none() {
            return;
        }
        let settled = if acked != 0 && is(acked) { Some(acked) } else { maybe.and_then(|m| m.iter().copied().find(|g| is(*g))) };
        match settled {
            Some(g) => {
                self.res.verify.blocks_verified += 1;
                self.shadow[lba as usize] = g;
                self.maybe.remove(&lba);
            }
            // Never written by an acknowledged write, and none of the lost ones landed: what
            // was there before the run (unknown here) may be.
            None if acked == 0 => {}
            None => {
                self.res.verify.blocks_verified += 1;
                self.res.verify.mismatches += 1;
                log::error!("nvmeof: verify: block {} matches neither generation {acked:#x} nor a lost write{}", self.base + lba, if read_back { " (read-back)" } else { "" });
            }
        }
    }
}

/// Run [`Workload`] on every controller of `set` (each on its first namespace), polling the
/// set so lost controllers reconnect; `on(i, event)` hears the set's events. Returns each
/// controller's tally once every one finished, or `Error::Timeout` after `stall_ns` without
/// an answered I/O (the tallies so far are logged).
pub fn run<V: GroupVerbs>(set: &mut Controllers<V>, verbs: &mut V, env: &mut impl HostEnv<V>, w: &Workload, mut on: impl FnMut(usize, &CtrlEvent<V::Error>)) -> Result<Vec<LaneResult>, Error<V::Error>> {
    let n = set.ctrls.len();
    let mut lanes: Vec<Option<Lane>> = (0..n).map(|_| None).collect();
    let mut scratch = Vec::new();
    let mut done = [IoDone { queue: 0, slot: 0, status: Status::SUCCESS, dw0: 0, latency_ns: 0 }; 64];
    let mut last_progress = env.now_ns();
    let mut setup_error = None;
    loop {
        set.poll(verbs, env, |i, e| {
            if let Some(l) = lanes[i].as_mut() {
                match e {
                    CtrlEvent::Released => l.lose_inflight(),
                    CtrlEvent::Live => l.reconnected(),
                    _ => {}
                }
            }
            on(i, &e);
        });
        let now = env.now_ns();
        let mut answered = 0;
        for (i, c) in set.ctrls.iter_mut().enumerate() {
            let Some(host) = c.live() else { continue };
            if lanes[i].is_none() {
                match Lane::on_host(host, i, w) {
                    Ok(l) => {
                        scratch.resize(scratch.len().max(l.max_blocks as usize * l.bs), 0);
                        lanes[i] = Some(l);
                    }
                    Err(e) => {
                        setup_error = Some(e);
                        break;
                    }
                }
            }
            let lane = lanes[i].as_mut().expect("made above");
            let mut ok = lane.issue(&mut OnHost(host, verbs), w, now, &mut scratch).is_ok();
            if ok {
                match host.poll(verbs, now, &mut done) {
                    Ok(k) => {
                        lane.complete(&OnHost(host, verbs), &done[..k], &mut scratch)?;
                        answered += k;
                    }
                    Err(_) => ok = false,
                }
            }
            ok = ok && host.tick(verbs, now).is_ok() && !host.failed();
            if !ok {
                // Released (and its in-flight I/O counted lost) by the next `set.poll`.
                c.fail();
            }
        }
        if let Some(e) = setup_error {
            return Err(e);
        }
        if lanes.iter().all(|l| l.as_ref().is_some_and(Lane::done)) {
            return Ok(lanes.into_iter().map(|l| l.expect("all done").res).collect());
        }
        if answered > 0 {
            last_progress = now;
        } else {
            if now.saturating_sub(last_progress) > w.stall_ns {
                for (i, l) in lanes.iter().enumerate() {
                    log::error!("nvmeof: verify: controller {i} stalled: {:?}", l.as_ref().map(|l| l.res));
                }
                return Err(Error::Timeout);
            }
            env.idle(verbs);
        }
    }
}
