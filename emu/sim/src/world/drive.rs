//! drive: the run loop of a world and its initiators' workload: each initiator keeps one
//! controller per target, (re)connected by the product's `Controllers`, spreads its random
//! verified reads and writes over the live ones, checks every completion against the target's
//! block model, disconnects once the faults are over; then the leak and ICRC checks.

use super::*;

/// The shared world and its run loop.
pub struct Sim {
    w: Rc<RefCell<World>>,
    clock: SimClock,
}

impl Sim {
    pub fn new(cfg: Config) -> Result<Sim, String> {
        let clock = SimClock::new();
        clock.advance(MS);
        let seed = cfg.seed;
        let mut rng = SplitMix64::new(branch(seed, 1));
        let (nt, n) = (cfg.targets.max(1), cfg.initiators);
        let plan = faults::draw(&mut rng, &cfg.faults, nt, n, SPAN_NS, KATO_MS);
        let w = Rc::new(RefCell::new(World {
            me: Weak::new(),
            clock: clock.clone(),
            fabric: Fabric::new(clock.clone(), branch(seed, 2)),
            targets: (0..nt).map(|_| None).collect(),
            target_restart: (0..nt).map(|_| None).collect(),
            target_incarnation: vec![0; nt],
            inits: (0..n).map(|_| None).collect(),
            models: (0..nt).map(|_| Model::new(NS_BLOCKS as usize, GRACE_NS)).collect(),
            seq: 0,
            next_wid: 1,
            out: Outcome { drawn: plan.drawn.clone(), poll_groups: (0..nt).map(|j| super::poll_groups(seed, j)).collect(), ..Outcome::default() },
            plan,
            next_action: 0,
            deferred: Vec::new(),
            fault_lag_ns: 0,
            idle_ns: TURN_NS,
            changed_ns: 0,
            promised_ns: 0,
            promised_by: "",
            due_unserved: 0,
            crash_unnoticed: vec![vec![None; nt]; n],
            cq_overruns_injected: vec![0; nt + n],
            fail_why: vec![vec![Noticed::Other; nt]; n],
            cfg: Config { targets: nt, ..cfg },
        }));
        {
            let mut wm = w.borrow_mut();
            wm.me = Rc::downgrade(&w);
            for j in 0..nt {
                wm.make_target(j, true, None)?;
            }
            let ops = wm.cfg.ops;
            for k in 0..n {
                let mut r = SplitMix64::new(branch(seed, 0x10 + k as u64));
                let qd = 1 + r.below(8) as usize;
                let queues = 1 + r.below(2) as u16;
                let budget = ops / n as u64 + u64::from((k as u64) < ops % n as u64);
                wm.inits[k] = Some(Box::new(Initiator {
                    port: wm.init_port(k),
                    parts: None,
                    restart_ns: None,
                    ops: BTreeMap::new(),
                    qd,
                    queues,
                    budget,
                    issued: 0,
                    wake_ns: 0,
                    rng: r,
                    incarnation: 0,
                    finished: false,
                }));
                let p = wm.make_parts(k, true, 0, queues)?;
                wm.inits[k].as_mut().expect("just made").parts = Some(p);
            }
        }
        Ok(Sim { w, clock })
    }

    /// Run to the end; the outcome says whether every check held.
    pub fn run(self) -> Outcome {
        let n = self.w.borrow().inits.len();
        loop {
            for k in 0..n {
                self.step(k);
            }
            self.w.borrow_mut().turn();
            let w = self.w.borrow();
            if w.out.failure.is_some() {
                break;
            }
            if w.inits.iter().all(|i| i.as_ref().is_some_and(|i| i.finished)) {
                break;
            }
            if self.clock.now_ns() > w.faults_end_ns().max(SPAN_NS) + PROGRESS_NS {
                drop(w);
                let detail = self.stuck();
                self.w.borrow_mut().fail(format!("no progress {}s after the faults stopped: {detail}", PROGRESS_NS / 1_000_000_000));
                break;
            }
        }
        if self.w.borrow().out.failure.is_none() {
            self.settle();
        }
        let mut w = self.w.borrow_mut();
        let recoveries = w.targets.iter().flatten().map(|t| t.svc.stats.device_recoveries).sum::<u64>();
        let init_recoveries = w.inits.iter().flatten().filter_map(|i| i.parts.as_ref()).map(|p| p.env.recoveries).sum::<u64>();
        w.out.init_recoveries += init_recoveries;
        w.out.recoveries += recoveries;
        let replaced = w.targets.iter().flatten().map(|t| t.svc.target.stats().groups_replaced).sum::<u64>();
        w.out.groups_replaced += replaced;
        for j in 0..w.targets.len() {
            if let Some(mut t) = w.targets[j].take() {
                w.count_ns_ios(j, &mut t);
                w.targets[j] = Some(t);
            }
        }
        let frames = w.fabric.stats().sent;
        w.out.frames = frames;
        w.out.mtu_drops = w.fabric.mtu_drops();
        w.out.virtual_ns = self.clock.now_ns();
        // (Initiator hooks hold a weak reference to the world only: no cycle to break.)
        w.out.clone()
    }

    fn stuck(&self) -> String {
        let w = self.w.borrow();
        let mut s = Vec::new();
        for (k, i) in w.inits.iter().enumerate() {
            let Some(i) = i else { continue };
            let state = match &i.parts {
                None => "crashed".to_string(),
                Some(p) => p
                    .ctrls
                    .ctrls
                    .iter()
                    .enumerate()
                    .map(|(j, c)| {
                        let st = match c.state() {
                            CtrlState::Live => "connected",
                            CtrlState::Failed => "failed",
                            CtrlState::Backoff { .. } => "not connected",
                            CtrlState::Connecting { .. } => "connecting",
                            CtrlState::Enabling { .. } => "enabling",
                            CtrlState::Lost => "given up",
                        };
                        format!("target {j} {st}")
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
            };
            let oldest = i.ops.iter().next().map(|(q, o)| format!(" oldest target {} queue {} slot {} lba {} seq {}", q.0, q.1, q.2, o.lba, o.seq)).unwrap_or_default();
            s.push(format!("initiator {k} {state} issued {}/{} outstanding {}{oldest}", i.issued, i.budget, i.ops.len()));
        }
        s.join("; ")
    }

    /// When op number `i` of `budget` may be issued.
    fn issue_time(i: u64, budget: u64) -> u64 {
        MS + i * SPAN_NS / budget.max(1)
    }

    fn step(&self, k: usize) {
        let Some(mut init) = self.w.borrow_mut().inits[k].take() else { return };
        self.step_with(k, &mut init);
        let mut w = self.w.borrow_mut();
        w.inits[k] = Some(init);
    }

    /// Advance the controllers that are not live (the product's reconnect state machine and
    /// failed-device rule); the I/O outstanding on a controller it released is over.
    fn reconnect(&self, k: usize, init: &mut Initiator) {
        let p = init.parts.as_mut().expect("live");
        let mut events = Vec::new();
        p.ctrls.poll(&mut p.node.v, &mut p.env, |j, e| events.push((j, e)));
        for (j, e) in events {
            let tag = k as u64 + 0x100 * j as u64;
            let first = p.ctrls.ctrls[j].connects <= u64::from(matches!(e, CtrlEvent::Live));
            let mut w = self.w.borrow_mut();
            let now = self.clock.now_ns();
            match e {
                CtrlEvent::Released => {
                    if w.cfg.verbose {
                        eprintln!("sim: {}us initiator {k} connection to target {j} released", now / 1000);
                    }
                    w.abandon(k, &mut init.ops, Some(j));
                    let why = core::mem::take(&mut w.fail_why[k][j]);
                    if let Some(t) = w.crash_unnoticed[k][j].take() {
                        w.out.crash_notice.push((now - t, why));
                    }
                }
                CtrlEvent::Live => {
                    w.crash_unnoticed[k][j] = None;
                    if w.cfg.verbose {
                        eprintln!("sim: {}us initiator {k} {} target {j}", now / 1000, if first { "connected to" } else { "reconnected to" });
                    }
                    if first {
                        w.out.connects += 1;
                    } else {
                        w.out.reconnects += 1;
                    }
                    w.trace(if first { 0xc0 } else { 0xc1 }, tag);
                }
                CtrlEvent::AttemptFailed(e) => {
                    if matches!(e, nvmeof::Error::Nvme(s) if s == nvmeof::Status::CONNECT_INVALID_PARAM) {
                        w.out.refused_unlinked += 1;
                    }
                    if w.cfg.verbose {
                        eprintln!("sim: {}us initiator {k} connect to target {j}: {e:?}", now / 1000);
                    }
                    if first {
                        w.out.connects += 1;
                    } else {
                        w.out.reconnects += 1;
                    }
                    w.trace(if first { 0xcf } else { 0xcd }, tag);
                }
                CtrlEvent::DeviceRecovered => {
                    if w.cfg.verbose {
                        eprintln!("sim: {}us initiator {k} device up again", now / 1000);
                    }
                    w.trace(0xc3, k as u64);
                }
                // Every outage the simulator makes ends long before the loss timeout (600 s):
                // a controller given up is one that could not reconnect to a target back up.
                CtrlEvent::GaveUp => w.fail(format!("initiator {k} gave up on target {j} (no connection for the loss timeout)")),
            }
        }
    }

    fn step_with(&self, k: usize, init: &mut Initiator) {
        let now = self.clock.now_ns();
        init.wake_ns = u64::MAX;
        if init.finished || self.w.borrow().out.failure.is_some() {
            return;
        }
        let Some(nt) = init.parts.as_ref().map(|p| p.ctrls.ctrls.len()) else { return };
        self.reconnect(k, init);
        let p = init.parts.as_mut().expect("live");
        // Completions (all reaped first; a read's data is checked before its slot is reused).
        let mut done = [IoDone { queue: 0, slot: 0, status: nvmeof::Status::SUCCESS, dw0: 0, latency_ns: 0 }; 16];
        let mut reaped: Vec<(usize, IoDone)> = Vec::new();
        for (j, c) in p.ctrls.ctrls.iter_mut().enumerate() {
            let Some(h) = c.live() else { continue };
            loop {
                match h.poll(&mut p.node.v, now, &mut done) {
                    Ok(n) => {
                        reaped.extend(done[..n].iter().map(|d| (j, *d)));
                        if n < done.len() {
                            break;
                        }
                    }
                    Err(e) => {
                        self.w.borrow_mut().fail_why[k][j] = Noticed::of(&e);
                        c.fail();
                        break;
                    }
                }
            }
        }
        for (j, d) in &reaped {
            self.complete(k, init, *j, d);
        }
        let Some(p) = init.parts.as_mut() else { return };
        for (j, c) in p.ctrls.ctrls.iter_mut().enumerate() {
            if let Some(h) = c.live() {
                if let Err(e) = h.tick(&mut p.node.v, now) {
                    self.w.borrow_mut().fail_why[k][j] = Noticed::of(&e);
                    c.fail();
                }
            }
        }
        // New work, each I/O to the next target in turn that has a live session.
        while init.ops.len() < init.qd && init.issued < init.budget && now >= Self::issue_time(init.issued, init.budget) {
            let Some(j) = (0..nt).map(|d| (init.issued as usize + d) % nt).find(|&j| p.ctrls.ctrls[j].state() == CtrlState::Live) else { break };
            let h = p.ctrls.ctrls[j].live().expect("live");
            let (nq, _) = h.io_queues();
            let q = 1 + (init.issued % nq.max(1) as u64) as u16;
            let Some(slot) = h.alloc_slot(q) else { break };
            let write = init.rng.below(2) == 0;
            let n = 1 + init.rng.below(MAX_BLOCKS) as u32;
            let span = if init.rng.below(4) == 0 { HOT_BLOCKS } else { NS_BLOCKS };
            let lba = init.rng.below(span - n as u64 + 1);
            let mut w = self.w.borrow_mut();
            w.seq += 1;
            let seq = w.seq;
            let epoch = w.models[j].epoch;
            let wid = if write {
                let wid = w.next_wid;
                w.next_wid += 1;
                let (buf, off, _) = h.slot_buf(q, slot);
                let bs = w.cfg.block_size;
                let mut b = [0u8; BS_MAX];
                let b = &mut b[..bs];
                for i in 0..n as u64 {
                    fill_block(w.cfg.seed, lba + i, wid, b);
                    hal::DmaRegion::write(buf, off + i as usize * bs, b);
                }
                w.models[j].submitted(lba, n, wid, seq, now);
                wid
            } else {
                0
            };
            init.ops.insert((j, q, slot), Op { t: j, write, lba, n, wid, seq, ns: now, epoch });
            init.issued += 1;
            w.trace(if write { 0x77 } else { 0x72 }, lba * 16 + n as u64 + ((j as u64) << 40));
            drop(w);
            let kind = if write { IoKind::Write } else { IoKind::Read };
            if h.submit(&mut p.node.v, q, slot, kind, 1, lba, n, now).is_err() {
                p.ctrls.ctrls[j].fail();
                return;
            }
        }
        // The next I/O's time (one already due waits for a controller or a slot instead: a
        // reconnect or a completion).
        if init.issued < init.budget && init.ops.len() < init.qd && Self::issue_time(init.issued, init.budget) > now {
            init.wake_ns = init.wake_ns.min(Self::issue_time(init.issued, init.budget));
        }
        if init.issued >= init.budget && init.ops.is_empty() {
            self.finish(k, init);
        }
    }

    /// One completion of initiator `k` from target `j`.
    fn complete(&self, k: usize, init: &mut Initiator, j: usize, d: &IoDone) {
        let mut w = self.w.borrow_mut();
        let now = self.clock.now_ns();
        let Some(op) = init.ops.remove(&(j, d.queue, d.slot)) else {
            w.fail(format!("initiator {k}: completion from target {j} on queue {} slot {} with no command outstanding there (completed twice, or never sent)", d.queue, d.slot));
            return;
        };
        w.seq += 1;
        let seq = w.seq;
        let ok = d.status.is_success();
        w.trace(0xd0 + ok as u64, op.wid ^ op.lba << 20 ^ (d.queue as u64) << 40 ^ (j as u64) << 48);
        w.out.ops += 1;
        if ok && w.targets.iter().enumerate().any(|(i, t)| i != j && t.is_none()) {
            w.out.ops_while_a_target_down += 1;
        }
        if ok && init.parts.as_ref().is_some_and(|p| p.ctrls.ctrls.iter().enumerate().any(|(i, c)| i != j && c.state() != CtrlState::Live)) {
            w.out.ops_while_own_reconnect += 1;
        }
        if !ok {
            // Faults here break connections (the host sees a transport failure); none makes a
            // valid command fail with an NVMe status.
            w.out.error_status += 1;
            w.fail(format!("initiator {k}: target {j} queue {} {} lba {}+{} completed with status {:?}", d.queue, if op.write { "write" } else { "read" }, op.lba, op.n, d.status));
        }
        let current = op.epoch == w.models[j].epoch;
        if current {
            w.models[j].overlap_done(op.lba, op.n, op.ns, now);
        }
        if op.write {
            if !current {
                return;
            }
            if ok {
                w.models[j].acked(op.lba, op.n, op.wid, seq);
                w.out.writes_acked += 1;
                let horizon = init.ops.values().chain(w.inits.iter().flatten().flat_map(|i| i.ops.values())).filter(|o| !o.write && o.t == j).map(|o| o.seq).min().unwrap_or(seq);
                w.models[j].prune(op.lba, op.n, horizon);
            } else {
                w.models[j].failed(op.lba, op.n, op.wid, now);
            }
            return;
        }
        if !ok || !current {
            return;
        }
        let h = init.parts.as_ref().map(|p| p.ctrls.ctrls[j].host()).expect("live host");
        let (buf, off, _) = h.slot_buf(d.queue, d.slot);
        let bs = w.cfg.block_size;
        let mut b = [0u8; BS_MAX];
        let b = &mut b[..bs];
        for i in 0..op.n as u64 {
            hal::DmaRegion::read(buf, off + i as usize * bs, b);
            let lba = op.lba + i;
            let r = decode_block(w.cfg.seed, lba, b).and_then(|wid| {
                w.trace(0xee, wid);
                w.models[j].check_read(lba, wid, op.seq)
            });
            match r {
                Ok(()) => w.out.blocks_verified += 1,
                Err(e) => {
                    w.fail(format!("initiator {k}: target {j} queue {} read lba {}+{}: {e}", d.queue, op.lba, op.n));
                    return;
                }
            }
        }
    }

    /// Initiator `k` did its share: disconnect from every target, once the faults are over
    /// and two keep-alive timeouts have passed (a connection a fault broke is found dead and
    /// made again by then, so the orderly disconnect must succeed).
    fn finish(&self, k: usize, init: &mut Initiator) {
        let now = self.clock.now_ns();
        let quiet = self.w.borrow().faults_end_ns() + 2 * KATO_MS * MS;
        if now <= quiet {
            init.wake_ns = quiet + 1;
            return;
        }
        let Some(p) = init.parts.as_mut() else { return };
        if !p.ctrls.all_live() {
            // A controller still to be made again first (the reconnect steps do it).
            return;
        }
        if let Err((j, e)) = p.ctrls.disconnect(&mut p.node.v, &mut p.env) {
            self.w.borrow_mut().fail(format!("initiator {k}: disconnect from target {j} after the faults stopped: {e:?}"));
        }
        self.w.borrow_mut().trace(0xdd, k as u64);
        init.finished = true;
    }

    /// After every initiator disconnected: the targets and the initiators back at their
    /// baselines, and the ICRC and CQ overrun accounting of every port.
    fn settle(&self) {
        let until = self.clock.now_ns() + SETTLE_NS;
        loop {
            self.w.borrow_mut().turn();
            let w = self.w.borrow();
            let t_ok = w.targets.iter().all(|t| t.as_ref().is_some_and(|t| t.footprint() == t.baseline));
            let i_ok = w.inits.iter().flatten().all(|i| i.parts.as_ref().is_some_and(|p| p.env.tracked() == 0 && p.env.cm.conn_count() == 0 && p.node.v.live_qps() == p.qps0));
            if t_ok && i_ok {
                break;
            }
            if self.clock.now_ns() > until {
                drop(w);
                let mut w = self.w.borrow_mut();
                let msg = w
                    .targets
                    .iter()
                    .enumerate()
                    .map(|(j, t)| match t {
                        Some(t) => format!("target {j} {:?}, baseline {:?}", t.footprint(), t.baseline),
                        None => format!("target {j} not running at the end"),
                    })
                    .collect::<Vec<_>>()
                    .join("; ");
                w.fail(format!("leak: 30s after the last disconnect: {msg}; initiators ok: {i_ok}"));
                return;
            }
        }
        let mut w = self.w.borrow_mut();
        for j in 0..w.targets.len() {
            if let Some(t) = w.targets[j].take() {
                w.check_adapter(j, &t.node.cx);
                w.targets[j] = Some(t);
            }
        }
        for k in 0..w.inits.len() {
            if let Some(i) = w.inits[k].take() {
                if let Some(p) = &i.parts {
                    w.check_adapter(i.port, &p.node.cx);
                }
                w.inits[k] = Some(i);
            }
        }
    }
}
