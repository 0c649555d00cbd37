//! Queue lifecycle on the RDMA transport: CM accept (QP, CQ, buffers, receives posted), host
//! or target disconnect, controller reset, keep-alive expiry, a subsystem unlinked from the
//! port, teardown and freeing once block I/O has drained.

use super::*;

impl<V: GroupVerbs, B: BlockDevice> RdmaTarget<V, B> {
    /// A CM connect request arrived. `private` is the NVMe-RDMA REQ private data (after
    /// rdma_cm's header); `attrs` are the RC attributes the CM derived from the REQ. On success
    /// the queue is built (its QP in RTS, taking receives from its group's SRQ) and staged in a
    /// poll group, whose next turn takes it in or refuses it: the answer comes from
    /// [`RdmaTarget::take_answer`] after a [`RdmaTarget::poll`], and only then does the CM send
    /// the REP (with the returned private data and our QPN) or, refused, a REJ. On failure now
    /// the CM sends REJ (reason 28) with the returned private data.
    pub fn accept(&mut self, verbs: &mut V, private: &[u8], attrs: &RcConnectAttrs) -> Result<PendingQueue, RdmaCmRej> {
        self.accept_on(verbs, 0, private, attrs)
    }

    /// [`RdmaTarget::accept`] for a connection that came in on the port at index `port` of
    /// `TargetConfig::ports` ([`Core::port_for_service`]): its Connect is admitted only to the
    /// subsystems linked to that port, and a discovery controller lists those.
    pub fn accept_on(&mut self, verbs: &mut V, port: u8, private: &[u8], attrs: &RcConnectAttrs) -> Result<PendingQueue, RdmaCmRej> {
        let rej = |sts: u16| RdmaCmRej { recfmt: U16::new(0), sts: U16::new(sts) };
        let r = self.accept_inner(verbs, port, private, attrs);
        match r {
            // Counted accepted (or rejected) when its group answers.
            Ok(x) => Ok(x),
            Err(sts) => {
                self.stats.conns_rejected += 1;
                log::warn!("nvmeof: rdma: connect request rejected (nvme-rdma status {sts})");
                Err(rej(sts))
            }
        }
    }

    pub(super) fn accept_inner(&mut self, verbs: &mut V, port: u8, private: &[u8], attrs: &RcConnectAttrs) -> Result<PendingQueue, u16> {
        if private.len() < RdmaCmReq::SIZE {
            return Err(cm_rej::INVALID_LEN);
        }
        let req = RdmaCmReq::read_from_bytes(&private[..RdmaCmReq::SIZE]).map_err(|_| cm_rej::INVALID_LEN)?;
        if req.recfmt.get() != 0 {
            return Err(cm_rej::INVALID_RECFMT);
        }
        let qid = req.qid.get();
        if qid != 0 && !self.ns_registered {
            self.register_namespaces(verbs);
        }
        self.admission_room(attrs.remote_ip)?;
        let cfg = self.core.config();
        if qid > cfg.max_io_queues {
            return Err(cm_rej::INVALID_QID);
        }
        let depth = req.hsqsize.get() as u32 + 1;
        let max = if qid == 0 { ADMIN_QUEUE_DEPTH as u32 } else { cfg.io_queue_depth as u32 };
        if depth < 2 || depth > max {
            return Err(cm_rej::INVALID_HSQSIZE);
        }
        if req.hrqsize.get() == 0 {
            return Err(cm_rej::INVALID_HRQSIZE);
        }
        if self.all_conns().count() + self.staged_count() >= self.max_queues {
            self.core.bound_hit(Bound::Queues, self.now_ns, &Ip(attrs.remote_ip));
            return Err(cm_rej::NO_RESOURCES);
        }
        let depth = depth as u16;
        let capsule = if qid == 0 { 64 } else { self.core.io_capsule_size() };
        let xfer = if qid == 0 { ADMIN_MAX_XFER } else { cfg.max_io_bytes as usize };
        let Some(gi) = self.pick_group(verbs) else {
            self.core.bound_hit(Bound::Memory, self.now_ns, &Ip(attrs.remote_ip));
            return Err(cm_rej::NO_RESOURCES);
        };
        let Ok(mut staged) = self.build_conn(verbs, gi, qid, depth, capsule, xfer, attrs) else {
            self.core.bound_hit(Bound::Memory, self.now_ns, &Ip(attrs.remote_ip));
            self.release_idle_groups(verbs);
            return Err(cm_rej::NO_RESOURCES);
        };
        staged.conn.q.port = port;
        let qpn = staged.conn.qpn;
        // Receives come from the group's SRQ, posted when the group was made: the QP can take
        // a capsule as soon as it reaches RTR, and the host learns its number only from the
        // REP, sent once the group has taken it in.
        // `pick_group` chose a group with room.
        let idx = self.ends[gi].take_index().expect("room");
        self.groups[gi].stage(&mut self.ends[gi], idx, staged);
        self.attach_pending = true;
        log::info!("nvmeof: rdma: queue {qid} on {qpn}, depth {depth}, handed to poll group {gi}");
        let rep = RdmaCmRep { recfmt: U16::new(0), crqsize: U16::new(depth), rsvd: [0; 28] };
        Ok(PendingQueue { qpn, rep })
    }

    /// New queues staged in the groups and not answered yet (slow path).
    pub(super) fn staged_count(&self) -> usize {
        self.ends.iter().map(|e| e.handed().count()).sum()
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn build_conn(&mut self, verbs: &mut V, gi: usize, qid: u16, depth: u16, capsule: usize, xfer: usize, attrs: &RcConnectAttrs) -> Result<Staged<V>, ()> {
        // Heap first (fallible: an exhausted heap is a refusal, not a panic), then the device.
        let mut slots = Vec::new();
        slots.try_reserve_exact(depth as usize).map_err(|_| ())?;
        let mut free = VecDeque::new();
        free.try_reserve_exact(depth as usize).map_err(|_| ())?;
        let mut turn_writes = Vec::new();
        turn_writes.try_reserve_exact(depth as usize).map_err(|_| ())?;
        let mut held_reads = Vec::new();
        held_reads.try_reserve_exact(depth as usize).map_err(|_| ())?;
        free.extend(0..depth);
        // The QP is made and connected by the device's owner; the group takes it in on its
        // turn (`PollGroup::take_new`), before the CM's REP tells the host its number.
        let gref = verbs.group_ref(&self.groups[gi].rings);
        let mut made = verbs.make_group_qp(&gref, sq_depth(depth)).map_err(|_| ())?;
        if verbs.connect_made_qp(&mut made, attrs).is_err() {
            let _ = verbs.destroy_made_qp(made);
            return Err(());
        }
        let qpn = V::made_qpn(&made);
        let res = (|| {
            let local = Access { local_write: true, remote_read: false, remote_write: false };
            let rsp = verbs.alloc_buf((depth as usize + MAX_AERS) * Cqe::SIZE)?;
            let (rsp_lkey, _) = verbs.reg_mr(rsp.paddr(), rsp.len() as u64, local)?;
            // Until Connect admits the queue, only the Connect data buffer (see `admit`).
            let data = match verbs.alloc_buf(ConnectData::SIZE).and_then(|d| verbs.reg_mr(d.paddr(), d.len() as u64, local).map(|(k, _)| (d, k))) {
                Ok(x) => x,
                Err(e) => {
                    let _ = verbs.dereg_mr(rsp_lkey);
                    return Err(e);
                }
            };
            Ok::<_, V::Error>((rsp, rsp_lkey, data.0, data.1))
        })();
        let (rsp, rsp_lkey, data, data_lkey) = match res {
            Ok(x) => x,
            Err(_) => {
                let _ = verbs.destroy_made_qp(made);
                return Err(());
            }
        };
        // 12 bits of generation in a `WrId`.
        self.gen = ((self.gen + 1) & 0xFFF).max(1);
        let slot = Slot {
            state: SlotState::Idle,
            sqe: Sqe::zeroed(),
            sgl: None,
            byte_len: 0,
            pending: 0,
            status: Status::SUCCESS,
            t0: 0,
            direct_addr: 0,
            direct_lkey: Lkey(0),
            fetched: false,
            write: None,
            range: RangeId::NONE,
            resume: Resume::Execute,
            rbuf: NO_BUF,
        };
        slots.resize(depth as usize, slot);
        let conn = Conn {
            capsules: 0,
            bytes_read: 0,
            bytes_written: 0,
            errors: 0,
            gen: self.gen,
            qpn,
            q: QueueState { peer_gid: gid_from_ipv4(attrs.remote_ip), peer_qpn: attrs.remote_qpn.0, ..QueueState::new(qid) },
            depth,
            capsule,
            xfer: ConnectData::SIZE,
            stride: 0,
            full_xfer: xfer,
            rsp,
            rsp_lkey,
            data_dma: DmaSlice::whole(&data),
            data,
            data_lkey,
            pre_data: None,
            accepted_ns: self.now_ns,
            source: attrs.remote_ip,
            slots,
            free,
            aer_rsp_next: 0,
            draining: false,
            close_after_send: false,
            unrung: false,
            turn_writes,
            held_reads,
            reads_posted: 0,
            pmtu: if attrs.mtu == 0 { u32::MAX } else { attrs.mtu },
        };
        Ok(Staged { conn, qp: made })
    }

    /// The host (or the CM) closed the connection of `qpn`.
    pub fn disconnected(&mut self, verbs: &mut V, qpn: Qpn) {
        if let Some(ci) = self.find_conn(|c| c.qpn == qpn) {
            self.teardown(verbs, ci, false);
        }
    }

    /// Controller `cntlid` was reset (CC.EN 1 -> 0): tear down its I/O queues (the CM sends
    /// DREQ for each, `take_closed`); its admin queue stays.
    pub(super) fn reset_io_queues(&mut self, verbs: &mut V, cntlid: u16) {
        let mut at = QueueAt { g: 0, i: 0 };
        while let Some(j) = self.find_conn_from(at, &|o| o.q.qid != 0 && o.q.cntlid == Some(cntlid)) {
            self.teardown(verbs, j, true);
            at = QueueAt { g: j.g, i: j.i + 1 };
        }
    }

    /// Tear a queue down (and, for an admin queue, every queue of its controller): the group's
    /// half ([`RdmaTarget::close_queue`]), then, outside a turn, the owner's
    /// ([`RdmaTarget::drain_gone`]); inside `poll` the owner drains at the end of the turn, so
    /// a group's turn gives the device no command. `verbs` is the owner's, used only outside a
    /// turn.
    pub(super) fn teardown(&mut self, verbs: &mut V, ci: QueueAt, notify_cm: bool) {
        self.close_queue(ci, notify_cm);
        if !self.in_poll {
            self.drain_gone(verbs);
        }
    }

    /// Tear queue `ci` down without the device (inside a turn or out of it): the group's half
    /// ([`TurnShared::close_queue`]), and for an admin queue its controller's queues in the
    /// other groups.
    pub(super) fn close_queue(&mut self, ci: QueueAt, notify_cm: bool) {
        let Some(g) = self.groups.get_mut(ci.g) else { return };
        self.shared.close_queue(g, ci, notify_cm);
        self.close_ctrls_elsewhere(ci.g);
        if let Some(g) = self.groups.get_mut(ci.g) {
            g.owner_due = self.ends.get(ci.g).is_some_and(|e| !e.fwd.is_empty()) || g.nsio.has_notes();
        }
        self.refresh_enabled();
    }
}

impl TurnShared {
    /// The group's half of tearing queue `ci` down (and, for an admin queue, every queue of
    /// its controller in group `g`; those in other groups are the owner's to close,
    /// [`PollGroup::closed_ctrl`]), without the device: the queue stops taking work, its
    /// held commands and the zero-copy ranges of those with nothing in flight are forgotten, its group stops finding it by QPN, the
    /// core forgets it (an admin queue's controller freed with it) when the owner drains its
    /// record ([`OwnerEnds::take_gone_queues`]), and its QP is put on its group's [`PollGroup::gone`] ring for the owner
    /// to destroy. Completions its QP still delivers find no queue (a receive's buffer goes
    /// back; a response's range ends, [`TurnShared::end_stale`]).
    #[cold]
    pub(super) fn close_queue<V: GroupVerbs, B: BlockDevice>(&mut self, g: &mut PollGroup<V, B>, ci: QueueAt, notify_cm: bool) {
        let Some(c) = g.conns.get_mut(ci.i).and_then(|c| c.as_mut()) else { return };
        if c.draining {
            return;
        }
        c.draining = true;
        let gen = c.gen;
        // Its QP is going with everything in flight: forget its held commands and the ranges
        // of those with nothing in flight (held, or a Write's READ not written yet), but not
        // the ranges of its commands at the store (a Write's store may place its data until it
        // completes: each ends with its command's completion, [`TurnShared::block_done`], and
        // the queue is freed only then) nor those its written work requests carry (a zero-copy
        // Write's READ places data in namespace memory, a zero-copy Read's RDMA WRITE sends
        // from it, until the QP is destroyed): each ends with its work request's completion,
        // success or flush ([`TurnShared::end_stale`]), or when the owner has destroyed the QP
        // ([`PollGroup::take_back`]), whichever comes first.
        let slots = &c.slots;
        g.inflight.remove_queue(ci, gen, |r| !slots.iter().any(|s| s.range == r && matches!(s.state, SlotState::Reading | SlotState::Blocked)));
        g.blocked.retain(|b| b.0 != ci.i || b.1 != gen);
        g.qps.remove(c.qpn);
        g.live = g.live.saturating_sub(1);
        g.stats.queues_live = g.live as u64;
        let (q, qpn) = (c.q, c.qpn);
        if notify_cm {
            g.tell_owner(ToOwner::Dreq(qpn));
        }
        g.tell_owner(ToOwner::Qp(qpn, ci.i as u16));
        g.io.conns_closed += 1;
        log::info!("nvmeof: rdma: queue {} on {} closed", q.qid, qpn);
        // Its last counts, I/O queue slot (an admin queue: its controller) and authentication
        // session: the owner's, when it drains the group's ring ([`OwnerEnds::take_gone_queues`]).
        g.tell_queue_gone(&q);
        g.free_queue(ci);
        if q.qid == 0 {
            if let Some(id) = q.cntlid {
                // The target closes these itself, whoever closed the admin queue: the CM must
                // say so to the host (DREQ) and forget them, or its record and the service's
                // CM-ID -> QPN entry outlive the QP, and once the QPN is reused a late event
                // for the old connection closes another host's queue (emu/sim seed 23 with 4
                // initiators).
                for i in 0..g.hi {
                    if g.conns[i].as_ref().is_some_and(|o| !o.draining && o.q.cntlid == Some(id)) {
                        self.close_queue(g, QueueAt { g: ci.g, i }, true);
                    }
                }
                // The group's queues of it (closing, some with commands still to finish) execute
                // no more I/O; the other groups' are the owner's (`RdmaTarget::owner_step`).
                g.closed_ctrl(id);
            }
        }
    }
}

impl<V: GroupVerbs, B: BlockDevice> PollGroup<V, B> {
    /// The group's half of freeing closed queue `ci` (of this group) once none of its commands
    /// is at the store: the capsule buffers its unanswered commands held go back to the
    /// group's SRQ and its response and data memory is parked in the group and put on its
    /// [`PollGroup::gone`] ring (after its QP) for the owner to deregister.
    pub(super) fn free_queue(&mut self, ci: QueueAt) {
        let Some(c) = self.conns.get(ci.i).and_then(|c| c.as_ref()) else { return };
        if !c.draining || c.slots.iter().any(|s| s.state == SlotState::Executing) {
            return;
        }
        let c = self.conns[ci.i].take().expect("checked");
        self.hi = self.conns.iter().rposition(|c| c.is_some()).map_or(0, |i| i + 1);
        for s in c.slots.iter().filter(|s| s.rbuf != NO_BUF) {
            self.give_back(ci.g, s.rbuf);
        }
        // The keys go to the owner, the memory is parked until the owner says no key names it.
        self.park(ci.i, c, None);
    }
}

impl<V: GroupVerbs, B: BlockDevice> RdmaTarget<V, B> {
    /// The owner's half of the teardowns done since the last call: every group's closed QPs
    /// destroyed and freed queues' memory deregistered ([`PollGroup::drain_gone`]); with no
    /// queue left, the groups released. Outside a turn's completion handling.
    pub(super) fn drain_gone(&mut self, verbs: &mut V) -> usize {
        // Lowered before the rings are looked at: a record put after its ring was drained
        // rings it again.
        self.gone_bell.lower();
        let mut n = self.take_gone_queues();
        let inbox = &mut self.inbox;
        let before = inbox.answers.len();
        for (gi, g) in self.groups.iter_at_mut() {
            let Some(ends) = self.ends.get_mut(gi) else { continue };
            let was_broken = ends.broken;
            n += g.drain_gone(ends, verbs, inbox);
            if ends.broken && !was_broken {
                // It closed its queues; it is replaced once it holds none.
                self.stats.groups_broken += 1;
                self.replace_pending = true;
                log::info!("nvmeof: rdma: poll group {gi} reported broken: no new queues for it; replaced once its queues are gone");
            }
            // The group's look at the answers (its next turn's, once on a thread of its own).
            g.take_back(gi);
        }
        self.count_answers(before);
        self.qp_retrying = self.ends.iter().any(|e| e.retrying > 0);
        if n > 0 {
            self.release_idle_groups(verbs);
        }
        n
    }

    /// The queues the groups' turns closed, handed to the core ([`OwnerEnds::take_gone_queues`],
    /// group by group): before a forwarded command (a Connect takes a freed I/O queue slot or
    /// controller ID), a fold of the queues' counts and the owner's other records. Slow path.
    pub(super) fn take_gone_queues(&mut self) -> usize {
        self.ends.iter_mut().map(|e| e.take_gone_queues(&mut self.core)).sum()
    }

    /// Count the answers added to `answers` since it held `before` and keep no more than its
    /// room: an answer nobody took makes room for the newest.
    fn count_answers(&mut self, before: usize) {
        for a in self.inbox.answers.iter().skip(before) {
            match a {
                QueueAnswer::Attached(_) => self.stats.conns_accepted += 1,
                QueueAnswer::Refused(qpn, _) => {
                    self.stats.conns_rejected += 1;
                    log::warn!("nvmeof: rdma: queue on {qpn} refused by its poll group (broken): REJ");
                }
            }
        }
        while self.inbox.answers.len() > self.max_queues.max(1) {
            self.inbox.answers.pop_front();
            self.stats.answers_dropped += 1;
        }
    }

    /// Queues whose QP the device moved to ERROR on its own (an asynchronous event): closed
    /// with the CM told, as a flushed receive would have closed them before receives came
    /// from the group's SRQ (slow path: the QP is found by a search).
    pub(super) fn check_qp_errors(&mut self, verbs: &mut V) -> usize {
        let mut work = 0;
        while let Some(qpn) = verbs.take_qp_error() {
            work += 1;
            if let Some(ci) = self.find_conn(|c| c.qpn == qpn) {
                self.stats.qp_errors += 1;
                log::warn!("nvmeof: rdma: {qpn:?} in error (asynchronous event): closing its queue");
                self.teardown(verbs, ci, true);
            }
        }
        work
    }

    pub(super) fn check_keep_alive(&mut self, verbs: &mut V, now_ns: u64) -> usize {
        let mut work = 0;
        // I/O queues' traffic keeps their controllers alive: fold it in first.
        self.fold_queues();
        while let Some(id) = self.core.expired_ctrl(now_ns) {
            work += 1;
            self.delete_ctrl(verbs, id);
        }
        work
    }

    /// Delete controller `id`: every queue of it closed with the CM told (DREQ), the controller
    /// freed. Slow path (the admin queue is found by a search).
    fn delete_ctrl(&mut self, verbs: &mut V, id: u16) {
        let admin = self.find_conn(|c| c.q.qid == 0 && c.q.cntlid == Some(id));
        match admin {
            // Tearing down the admin queue frees the controller (Core::queue_gone).
            Some(ci) => self.teardown(verbs, ci, true),
            None => self.core.remove_ctrl(id),
        }
        // Its admin queue's record (inside `poll`, not drained yet) frees it now.
        self.take_gone_queues();
        self.refresh_enabled();
    }

    /// Unlink subsystem `nqn` from port `portid` ([`Core::unlink_subsystem`]: Connects to it
    /// through that port refused until [`RdmaTarget::link_subsystem`]) and delete its
    /// controllers that came in through that port, as Linux nvmet does when the port's configfs
    /// link goes: the CM sends a DREQ on every queue of theirs ([`RdmaTarget::take_closed`]);
    /// commands still at the store finish there unanswered. False: no such port or subsystem.
    /// Slow path (operator action), outside [`RdmaTarget::poll`].
    pub fn unlink_subsystem(&mut self, verbs: &mut V, portid: u16, nqn: &str) -> bool {
        let Some(ids) = self.core.unlink_subsystem(portid, nqn) else { return false };
        for id in ids {
            self.delete_ctrl(verbs, id);
        }
        true
    }

    /// Link subsystem `nqn` to port `portid` (again). False: no such port or subsystem.
    pub fn link_subsystem(&mut self, portid: u16, nqn: &str) -> bool {
        self.core.link_subsystem(portid, nqn)
    }


    /// The poll group the next queue goes to: round-robin, skipping broken groups and groups
    /// already holding the most queues their CQ was sized for. Creates the groups with the
    /// first queue; replaces broken groups no queue refers to any more.
    fn pick_group(&mut self, verbs: &mut V) -> Option<usize> {
        if self.groups.is_empty() {
            let n = self.n_groups;
            if self.groups.try_reserve_exact(n).is_err() || self.ends.try_reserve_exact(n).is_err() {
                return None;
            }
            for gi in 0..n {
                match self.new_group(verbs, gi) {
                    Ok((g, ends)) => {
                        self.groups.push(g);
                        self.ends.push(ends);
                    }
                    Err(()) => {
                        self.release_idle_groups(verbs);
                        return None;
                    }
                }
            }
            log::info!("nvmeof: rdma: {n} poll group(s), SRQ of {} x {} B each", self.srq_bufs, self.core.io_capsule_size());
        }
        if self.replace_pending && !self.in_poll {
            self.replace_broken_groups(verbs);
        }
        let n = self.groups.len();
        for k in 0..n {
            let gi = (self.next_group + k) % n;
            if !self.ends[gi].broken && self.ends[gi].has_room() {
                self.next_group = (gi + 1) % n;
                return Some(gi);
            }
        }
        None
    }

    /// A new poll group for slot `gi`, sized for this target's queues.
    fn new_group(&mut self, verbs: &mut V, gi: usize) -> Result<(PollGroup<V, B>, OwnerEnds<V>), ()> {
        let per = self.max_queues.div_ceil(self.n_groups);
        let depth = self.core.config().io_queue_depth.max(ADMIN_QUEUE_DEPTH as u16);
        let buf_len = self.core.io_capsule_size();
        let (bufs, limit) = (self.srq_bufs, srq_limit(self.srq_bufs));
        // The groups' cross-group stripe counts, made again with the first group when the
        // group count changed since the last were made (`set_poll_groups` while none lived).
        if self.groups.is_empty() && self.stripes.groups() != self.n_groups {
            self.stripes = stripes::Rows::new(self.n_groups);
        }
        let made = PollGroup::new(verbs, gi, per, sq_depth(depth), depth, bufs, buf_len, limit, self.gone_bell.clone(), self.stripes.of(gi)).inspect_err(|()| {
            log::warn!("nvmeof: rdma: poll group {gi} not created (CQ, SRQ or {bufs} x {buf_len} B of buffers)");
        });
        made.map(|(mut g, ends)| {
            g.counts = self.core.io_counts();
            g.nsio = self.core.group_io(gi);
            (g, ends)
        })
    }

    /// Each group's look at its device's signals on its slow turn (once per millisecond,
    /// [`PollGroup::check_broken`], no device): a group that learns it is broken closes its
    /// queues with the CM told (their QPs are in ERROR and can carry nothing) and tells the
    /// owner on its ring, whose drain at the end of `poll` stops giving it queues and has it
    /// replaced once they are gone.
    pub(super) fn check_broken_groups(&mut self) -> usize {
        let mut work = 0;
        for gi in 0..self.groups.len() {
            let g = &mut self.groups[gi];
            if !g.check_broken() {
                continue;
            }
            work += 1;
            log::warn!("nvmeof: rdma: poll group {gi} broken (CQ in error or SRQ failed): closing its {} queue(s)", g.live);
            // The group's half of each teardown (inside `poll`: the owner's half at its end);
            // an entry that is empty or draining is left as it is.
            let hi = g.hi;
            for i in 0..hi {
                self.close_queue(QueueAt { g: gi, i }, true);
            }
        }
        work
    }

    /// Replace each broken group no queue (live or draining) refers to any more by a new one
    /// in its slot (outside a turn's completion handling). A group that cannot be made now is
    /// tried again at the end of a later turn.
    pub(super) fn replace_broken_groups(&mut self, verbs: &mut V) {
        if self.in_poll {
            return;
        }
        self.replace_pending = false;
        // A group's closed queues reach the core before the group goes.
        self.take_gone_queues();
        for gi in 0..self.groups.len() {
            if !self.ends[gi].broken {
                continue;
            }
            if self.ends[gi].queues > 0 {
                self.replace_pending = true;
                continue;
            }
            let Ok((fresh, fresh_ends)) = self.new_group(verbs, gi) else {
                self.replace_pending = true;
                continue;
            };
            let mut old = core::mem::replace(&mut self.groups[gi], fresh);
            let old_ends = core::mem::replace(&mut self.ends[gi], fresh_ends);
            if self.group_totals.len() <= gi {
                self.group_totals.resize(gi + 1, GroupStats::default());
            }
            self.group_totals[gi] = self.group_totals[gi].plus(GroupStats { queues_live: 0, ..old.stats });
            self.stats = self.stats.plus(old.io);
            self.turnaround.merge(&old.turnaround);
            self.core.fold_io(&mut old.counts);
            self.core.fold_group_io(&mut old.nsio);
            let before = self.inbox.answers.len();
            old.destroy(old_ends, verbs, &mut self.inbox);
            self.stripes.clear(gi);
            self.count_answers(before);
            self.stats.groups_replaced += 1;
            log::info!("nvmeof: rdma: poll group {gi} replaced");
        }
    }

    /// With no queue left (live or draining), release the poll groups (their CQs, SRQs and
    /// buffers); the next queue creates them again.
    pub(super) fn release_idle_groups(&mut self, verbs: &mut V) {
        if self.ends.iter().any(|e| e.queues > 0) {
            return;
        }
        if self.in_poll {
            self.release_pending = true;
            return;
        }
        self.take_gone_queues();
        // Buffers given back and not yet posted die with their SRQ.
        let before = self.inbox.answers.len();
        for (gi, (mut g, ends)) in self.groups.drain_all().zip(self.ends.drain(..)).enumerate() {
            if self.group_totals.len() <= gi {
                self.group_totals.resize(gi + 1, GroupStats::default());
            }
            self.group_totals[gi] = self.group_totals[gi].plus(GroupStats { queues_live: 0, ..g.stats });
            self.stats = self.stats.plus(g.io);
            self.turnaround.merge(&g.turnaround);
            self.core.fold_io(&mut g.counts);
            self.core.fold_group_io(&mut g.nsio);
            g.destroy(ends, verbs, &mut self.inbox);
            self.stripes.clear(gi);
        }
        self.count_answers(before);
        self.next_group = 0;
    }
}

/// Send WRs a queue of `depth` slots needs: a response and an RDMA READ or WRITE per slot
/// (a slot may take its next command before its last response completes: one more), and the
/// AER responses.
fn sq_depth(depth: u16) -> u32 {
    3 * depth as u32 + MAX_AERS as u32 + 1
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use crate::nvmet::{NamespaceConfig, SubsystemConfig, TargetConfig};
    use blockdev::NullNamespace;
    use rdma::Control;
    use testbed::soft::{SoftDevice, SoftFabric};

    /// A core of one subsystem, "nqn.t", any host, one null namespace.
    fn core_of_one_subsystem() -> Core<NullNamespace> {
        core_of_one_subsystem_with(TargetConfig::default())
    }

    /// [`core_of_one_subsystem`] with configuration `cfg`.
    fn core_of_one_subsystem_with(cfg: TargetConfig) -> Core<NullNamespace> {
        let ns = NamespaceConfig { nsid: 1, dev: NullNamespace::new(2048, 512), nguid: [1; 16] };
        let subs = alloc::vec![SubsystemConfig { nqn: "nqn.t".into(), serial: "s".into(), model: "m".into(), hosts: alloc::vec![], allow_any_host: true, namespaces: alloc::vec![ns] }];
        Core::new(cfg, subs).expect("core")
    }

    /// The connection of host QP `hq` at 10.0.0.1.
    fn host_attrs(hq: Qpn) -> RcConnectAttrs {
        RcConnectAttrs { remote_qpn: hq, remote_ip: [10, 0, 0, 1], mtu: 4096, retry_cnt: 7, rnr_retry: 7, timeout: 14, max_rd_atomic: 16, max_dest_rd_atomic: 16, ..Default::default() }
    }

    /// A soft fabric with a host device (10.0.0.1, with one CQ) and the target's (10.0.0.2).
    fn host_and_target_devices() -> (SoftFabric, SoftDevice, SoftDevice, rdma::Cqn) {
        let f = SoftFabric::new();
        let mut host = f.add_device([10, 0, 0, 1]);
        let dev = f.add_device([10, 0, 0, 2]);
        let cq = host.create_cq(16).expect("host CQ");
        (f, host, dev, cq)
    }

    /// A new queue for a new QP of `host` (on its CQ `cq`) accepted by `t` on `dev`: its QPN.
    fn accept_host_qp(t: &mut RdmaTarget<SoftDevice, NullNamespace>, dev: &mut SoftDevice, host: &mut SoftDevice, cq: rdma::Cqn) -> Result<Qpn, RdmaCmRej> {
        let hq = host.create_rc_qp(cq, cq, 16, 16).expect("host QP");
        t.accept(dev, &crate::host::cm_req_private(0, 32), &host_attrs(hq)).map(|p| p.qpn)
    }

    /// Group `g` moved to a thread of its own, with only its own ends of its rings, takes in
    /// the one queue staged for it there, and comes back.
    fn takes_one_in_on_its_own_thread(g: PollGroup<SoftDevice, NullNamespace>) -> PollGroup<SoftDevice, NullNamespace> {
        std::thread::spawn(move || {
            let mut g = g;
            assert_eq!(g.take_new(0), 1, "one answer");
            g
        })
        .join()
        .expect("group thread")
    }

    /// A new queue's hand-over with the group value on a thread of its own: the owner stages
    /// the queue (QP made and connected, `Conn` built) and keeps its ends of the rings; the
    /// group, moved to another thread with only its own ends, takes the queue in there (its
    /// QP attached, found by its QPN) and answers on its ring; back home, the owner's drain
    /// turns the answer into "attached" (the REP).
    #[test]
    fn a_group_takes_a_new_queue_in_on_a_thread_of_its_own() {
        let f = SoftFabric::new();
        let mut host = f.add_device([10, 0, 0, 1]);
        let mut dev: SoftDevice = f.add_device([10, 0, 0, 2]);
        let mut t = RdmaTarget::new(core_of_one_subsystem(), 8);
        let cq = host.create_cq(16).expect("host CQ");
        let hq = host.create_rc_qp(cq, cq, 16, 16).expect("host QP");
        let attrs = host_attrs(hq);
        let p = t.accept(&mut dev, &crate::host::cm_req_private(0, 32), &attrs).expect("accepted");
        assert!(t.take_answer().is_none());
        let g = takes_one_in_on_its_own_thread(t.groups.pop().expect("one group"));
        assert_eq!((g.live, g.qps.get(p.qpn)), (1, Some(0)), "taken in on the group's thread");
        t.groups.push(g);
        assert!(t.take_answer().is_none(), "the owner has not drained yet");
        t.drain_gone(&mut dev);
        assert!(matches!(t.take_answer(), Some(QueueAnswer::Attached(q)) if q == p.qpn));
        assert_eq!(t.queues(), 1);
        t.disconnected(&mut dev, p.qpn);
        assert_eq!(t.queues(), 0);
        assert!(t.groups.is_empty(), "released with its last queue");
    }

    /// The owner reaches a group another thread drives only by parking it: group 0, sent away
    /// from its cell to a thread that runs its turns (each takes in the new queues staged
    /// for it), is parked by the owner, which accepts a second queue into it (staged through
    /// the owner's table, the value home), and given back; the thread's next turns take the
    /// queue in, and once the thread let go and the value is called back, the owner's drain
    /// answers "attached". Nothing leaks.
    #[test]
    fn the_owner_parks_a_group_its_thread_turns_to_hand_it_a_queue() {
        use super::group_cell::GroupCell;
        use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let (_f, mut host, mut dev, cq) = host_and_target_devices();
        let base = dev.resources();
        let mut t = RdmaTarget::new(core_of_one_subsystem(), 8);
        let a = accept_host_qp(&mut t, &mut dev, &mut host, cq).expect("accepted");
        let away = t.groups.cell_mut(0).and_then(GroupCell::send_away).expect("group 0 home");
        assert!(t.groups.get(0).is_none(), "away: not the owner's to reach");
        let stop = AtomicBool::new(false);
        let taken = AtomicUsize::new(0);
        let b = std::thread::scope(|s| {
            s.spawn(|| {
                let mut away = away;
                while !stop.load(Ordering::Relaxed) {
                    let g = away.turn().expect("the group's value");
                    let n = g.take_new(0);
                    taken.fetch_add(n, Ordering::Relaxed);
                }
                assert_eq!(away.yields(), 1, "home once, when the owner parked it");
            });
            while taken.load(Ordering::Relaxed) < 1 {
                std::hint::spin_loop();
            }
            t.groups.cell_mut(0).expect("group 0").park();
            let b = accept_host_qp(&mut t, &mut dev, &mut host, cq).expect("accepted");
            t.groups.cell_mut(0).expect("group 0").unpark();
            while taken.load(Ordering::Relaxed) < 2 {
                std::hint::spin_loop();
            }
            stop.store(true, Ordering::Relaxed);
            b
        });
        assert!(t.groups.cell_mut(0).expect("group 0").call_back(), "the thread let go");
        assert_eq!((t.groups[0].live, t.groups[0].qps.get(a), t.groups[0].qps.get(b)), (2, Some(0), Some(1)), "both taken in on the group's thread");
        t.drain_gone(&mut dev);
        assert!(matches!((t.take_answer(), t.take_answer()), (Some(QueueAnswer::Attached(x)), Some(QueueAnswer::Attached(y))) if (x, y) == (a, b)));
        t.disconnected(&mut dev, a);
        t.disconnected(&mut dev, b);
        assert!(t.groups.is_empty(), "released with the last queue");
        assert_eq!(dev.resources(), base, "nothing left behind");
    }

    /// An index is the owner's to reuse once the group's `Mem` for it is drained, before the
    /// group has seen the owner's `Drop`: on two groups of one queue each, group 1's queue is
    /// freed and the owner drains its records (the group not looking at the answers), so its
    /// memory is still parked at index 0 when the owner stages the next queue there; the group,
    /// on a thread of its own, takes the `Drop` in before the new queue, and nothing leaks.
    #[test]
    fn an_index_is_reused_as_soon_as_the_owner_has_answered_for_it() {
        let f = SoftFabric::new();
        let mut host = f.add_device([10, 0, 0, 1]);
        let mut dev: SoftDevice = f.add_device([10, 0, 0, 2]);
        let base = dev.resources();
        let mut t = RdmaTarget::with_poll_groups(core_of_one_subsystem(), 2, 2);
        let cq = host.create_cq(16).expect("host CQ");
        let mut accept = |t: &mut RdmaTarget<SoftDevice, NullNamespace>, dev: &mut SoftDevice| accept_host_qp(t, dev, &mut host, cq);
        let a = accept(&mut t, &mut dev).expect("first accepted");
        let b = accept(&mut t, &mut dev).expect("second accepted");
        for (gi, g) in t.groups.iter_at_mut() {
            assert_eq!(g.take_new(gi), 1);
        }
        t.drain_gone(&mut dev);
        assert!(matches!((t.take_answer(), t.take_answer()), (Some(QueueAnswer::Attached(x)), Some(QueueAnswer::Attached(y))) if (x, y) == (a, b)));
        assert!(accept(&mut t, &mut dev).is_err(), "both groups full");
        // Group 1's queue closed and freed on a turn; the owner's half alone, as on its own thread.
        t.in_poll = true;
        t.disconnected(&mut dev, b);
        t.in_poll = false;
        assert_eq!(t.groups[1].drain_gone(&mut t.ends[1], &mut dev, &mut Inbox::with_capacity(1)), 4, "its QP, two keys and its Mem");
        assert!(t.groups[1].parked[0].is_some(), "the group has not seen the owner's answer");
        let c = accept(&mut t, &mut dev).expect("index 0 of group 1 free by the owner's record");
        let g = takes_one_in_on_its_own_thread(t.groups.pop().expect("group 1"));
        assert!(g.parked[0].is_none(), "the old queue's memory dropped first");
        assert_eq!((g.live, g.qps.get(c), g.qps.get(b)), (1, Some(0), None), "the new queue at index 0");
        t.groups.push(g);
        t.drain_gone(&mut dev);
        assert!(matches!(t.take_answer(), Some(QueueAnswer::Attached(q)) if q == c));
        assert_eq!(t.queues(), 2);
        t.disconnected(&mut dev, a);
        t.disconnected(&mut dev, c);
        assert!(t.groups.is_empty(), "released with the last queue");
        assert_eq!(dev.resources(), base, "nothing left behind");
    }

    /// A Connect of queue `qid` to controller `cntlid` (0xFFFF: a new one) of subsystem
    /// "nqn.t" by host "nqn.h": its SQE and its 1 KiB of data.
    fn connect_command(qid: u16, cntlid: u16) -> (Sqe, ConnectData) {
        use zerocopy::FromZeros;
        let mut c = ConnectCmd::new_zeroed();
        (c.opcode, c.fctype, c.cid, c.qid, c.sqsize) = (FABRICS_OPCODE, fctype::CONNECT, U16::new(1), U16::new(qid), U16::new(15));
        let mut sqe = Sqe::read_from_bytes(c.as_bytes()).expect("an SQE");
        sqe.flags = PSDT_SGL;
        let mut d = ConnectData::new_zeroed();
        d.cntlid = U16::new(cntlid);
        d.subsysnqn[..5].copy_from_slice(b"nqn.t");
        d.hostnqn[..5].copy_from_slice(b"nqn.h");
        (sqe, d)
    }

    /// Connect `q` with `cntlid` (0xFFFF: a new controller) to subsystem "nqn.t" in `core`
    /// and, for an admin queue, enable its controller; the controller's ID.
    fn connect_in_core(core: &mut Core<NullNamespace>, q: &mut QueueState, cntlid: u16) -> u16 {
        let (sqe, d) = connect_command(q.qid, cntlid);
        let data = DataIn { bytes: d.as_bytes(), buf: hal::DmaSlice::EMPTY, sgl_len: 1024, tag: 0, fetched: true };
        let Action::Respond { status, dw0, .. } = core.execute(q, &sqe, &data, 1_000) else { panic!("Connect answered at once") };
        assert!(status.is_success(), "{status:?}");
        if q.qid == 0 {
            let none = DataIn { bytes: &[], ..data };
            let en = crate::host::property_set_sqe(0x14, 0x0046_0001);
            assert!(matches!(core.execute(q, &en, &none, 1_000), Action::Respond { status: Status::SUCCESS, .. }));
        }
        dw0 as u16
    }

    /// An I/O queue a group closes reaches the core only through the owner's drain of the
    /// group's ring of closed queues (`GoneQueue`, eight words): with the group's half done
    /// (inside a turn, no drain), its controller has neither its last counts nor its I/O queue
    /// slot back; the owner's drain hands both over, and the queue's QID connects again.
    #[test]
    fn a_closed_io_queues_last_counts_reach_its_controller_by_the_owners_drain() {
        let f = SoftFabric::new();
        let mut host = f.add_device([10, 0, 0, 1]);
        let mut dev: SoftDevice = f.add_device([10, 0, 0, 2]);
        let mut t = RdmaTarget::with_poll_groups(core_of_one_subsystem(), 2, 1);
        let cq = host.create_cq(16).expect("host CQ");
        let hq = host.create_rc_qp(cq, cq, 16, 16).expect("host QP");
        let attrs = host_attrs(hq);
        let qpn = t.accept(&mut dev, &crate::host::cm_req_private(1, 16), &attrs).expect("accepted").qpn;
        assert_eq!(t.groups[0].take_new(0), 1);
        t.drain_gone(&mut dev);
        // Its controller, made by an admin queue from the same address (kept by the test).
        let mut q = t.groups[0].conns[0].as_ref().expect("the I/O queue").q;
        let mut aq = QueueState { peer_gid: q.peer_gid, ..QueueState::new(0) };
        let id = connect_in_core(&mut t.core, &mut aq, 0xFFFF);
        assert_eq!(connect_in_core(&mut t.core, &mut q, id), id);
        q.io = crate::nvmet::QueueCounters { last_seen_ns: 7, commands: 3, host_reads: 2, host_writes: 1, blocks_read_512: 16, blocks_written_512: 8 };
        t.groups[0].conns[0].as_mut().expect("the I/O queue").q = q;
        let ctrl = |t: &RdmaTarget<SoftDevice, NullNamespace>| t.core.controllers().find(|c| c.cntlid == id).map(|c| (c.commands, c.reads, c.writes, c.bytes_read, c.bytes_written));
        let before = ctrl(&t).expect("the controller");
        // The group's half, as in a turn: nothing reaches the core yet.
        t.in_poll = true;
        t.disconnected(&mut dev, qpn);
        t.in_poll = false;
        assert_eq!(ctrl(&t), Some(before), "the counts wait for the owner's drain");
        let mut again = QueueState { qid: 1, peer_gid: q.peer_gid, ..QueueState::default() };
        assert!(t.core.ctrl(id).is_some_and(|c| c.io_connected[0]), "its I/O queue slot too");
        t.drain_gone(&mut dev);
        let (c, r, w, br, bw) = before;
        assert_eq!(ctrl(&t), Some((c + 3, r + 2, w + 1, br + 16 * 512, bw + 8 * 512)), "the record's counts folded in");
        assert_eq!(connect_in_core(&mut t.core, &mut again, id), id, "QID 1 free again");
    }

    /// An admin queue a group closes frees its controller only through the owner's drain of
    /// the group's ring of closed queues, as an I/O queue's last counts reach it: with the
    /// group's half done (inside a turn, no drain), the controller (the target's only one) is
    /// still there and a new admin Connect finds no room; after the owner's drain it is freed
    /// and a new Connect gets a controller ID.
    #[test]
    fn a_closed_admin_queues_controller_is_freed_by_the_owners_drain() {
        let f = SoftFabric::new();
        let mut host = f.add_device([10, 0, 0, 1]);
        let mut dev: SoftDevice = f.add_device([10, 0, 0, 2]);
        let mut t = RdmaTarget::with_poll_groups(core_of_one_subsystem_with(TargetConfig { max_ctrls: 1, ..TargetConfig::default() }), 2, 1);
        let cq = host.create_cq(16).expect("host CQ");
        let (hq0, hq1) = (host.create_rc_qp(cq, cq, 16, 16).expect("host QP"), host.create_rc_qp(cq, cq, 16, 16).expect("host QP"));
        let admin = t.accept(&mut dev, &crate::host::cm_req_private(0, 16), &host_attrs(hq0)).expect("accepted").qpn;
        t.accept(&mut dev, &crate::host::cm_req_private(1, 16), &host_attrs(hq1)).expect("accepted");
        assert_eq!(t.groups[0].take_new(0), 2);
        t.drain_gone(&mut dev);
        // Its controller and I/O queue, connected in the core as the owner would (kept by the test).
        let mut aq = t.groups[0].conns[0].as_ref().expect("the admin queue").q;
        let id = connect_in_core(&mut t.core, &mut aq, 0xFFFF);
        let mut q = t.groups[0].conns[1].as_ref().expect("the I/O queue").q;
        assert_eq!(connect_in_core(&mut t.core, &mut q, id), id);
        t.groups[0].conns[0].as_mut().expect("the admin queue").q = aq;
        t.groups[0].conns[1].as_mut().expect("the I/O queue").q = q;
        let refused = |t: &mut RdmaTarget<SoftDevice, NullNamespace>| {
            let mut fresh = QueueState { peer_gid: aq.peer_gid, ..QueueState::new(0) };
            let (sqe, d) = connect_command(0, 0xFFFF);
            let data = DataIn { bytes: d.as_bytes(), buf: hal::DmaSlice::EMPTY, sgl_len: 1024, tag: 0, fetched: true };
            matches!(t.core.execute(&mut fresh, &sqe, &data, 1_000), Action::Respond { status, .. } if !status.is_success())
        };
        assert!(refused(&mut t), "one controller at most");
        assert!(q.enabled);
        // A command of the I/O queue at the store keeps it until it completes.
        t.groups[0].conns[1].as_mut().expect("the I/O queue").slots[0].state = SlotState::Executing;
        // The group's half, as in a turn: the group closes the controller's queues and stops
        // its I/O queue's I/O, the core still has the controller.
        t.in_poll = true;
        t.disconnected(&mut dev, admin);
        t.in_poll = false;
        let io = t.groups[0].conns[1].as_ref().expect("the I/O queue, its command at the store");
        assert!(io.draining && !io.q.enabled, "its I/O queue closed with it and executing no more I/O");
        assert!(t.core.ctrl(id).is_some(), "the controller waits for the owner's drain");
        assert!(refused(&mut t), "no room for another yet");
        t.drain_gone(&mut dev);
        assert!(t.core.ctrl(id).is_none(), "freed by the drain");
        let mut fresh = QueueState { peer_gid: aq.peer_gid, ..QueueState::new(0) };
        assert_ne!(connect_in_core(&mut t.core, &mut fresh, 0xFFFF), 0, "a new Connect gets a controller ID");
    }

    /// Command `sqe` with `data` (already fetched, in the slot's data buffer: a keyed SGL of
    /// `sgl_len` bytes) in a free slot of queue 0 of group 0, forwarded by the group's turn;
    /// the slot's SQE (but its CID, which the group's response carries) and data buffer
    /// cleared before the owner looks (`RdmaTarget::owner_step`,
    /// which the group's turn call returns to). The slot.
    fn forward_then_clear(t: &mut RdmaTarget<SoftDevice, NullNamespace>, dev: &mut SoftDevice, sqe: Sqe, data: &[u8], sgl_len: u32) -> u16 {
        let c = t.groups[0].conns[0].as_mut().expect("the queue");
        let s = c.free.pop_front().expect("a free slot");
        let slot = &mut c.slots[s as usize];
        (slot.sqe, slot.sgl, slot.fetched, slot.t0) = (sqe, Some(Sgl::Keyed { addr: 0x1000, len: sgl_len, key: 7, invalidate: false }), true, 0);
        c.data.write(c.data_off(s), data);
        let (sh, g) = t.turn_parts(0);
        sh.execute(g, QueueAt { g: 0, i: 0 }, s, 1_000);
        assert!(g.owner_due, "left to the owner");
        let c = g.conns[0].as_mut().expect("the queue");
        c.slots[s as usize].sqe = Sqe { cid: sqe.cid, ..Sqe::zeroed() };
        c.data.fill(c.data_off(s), c.xfer, 0);
        t.owner_step(dev, 0, 1_000);
        s
    }

    /// A target of one poll group with one admin queue taken in (the forwarded-command tests):
    /// the fabric and both devices, the target device's resources before, the target, the
    /// queue's QPN.
    fn one_admin_queue() -> (SoftFabric, SoftDevice, SoftDevice, testbed::soft::Resources, RdmaTarget<SoftDevice, NullNamespace>, Qpn) {
        let (f, mut host, mut dev, cq) = host_and_target_devices();
        let base = dev.resources();
        let mut t = RdmaTarget::with_poll_groups(core_of_one_subsystem(), 2, 1);
        let qpn = accept_host_qp(&mut t, &mut dev, &mut host, cq).expect("accepted");
        assert_eq!(t.groups[0].take_new(0), 1);
        t.drain_gone(&mut dev);
        (f, host, dev, base, t, qpn)
    }

    /// The response a queue's slot `s` holds (the CQE its SEND carries).
    fn response(t: &RdmaTarget<SoftDevice, NullNamespace>, s: u16) -> Cqe {
        let mut b = [0u8; Cqe::SIZE];
        t.groups[0].conns[0].as_ref().expect("the queue").rsp.read(s as usize * Cqe::SIZE, &mut b);
        Cqe::read_from_bytes(&b).expect("a CQE")
    }

    /// The owner executes a forwarded command from its record alone: a group's turn forwards a
    /// Connect (its 1 KiB of data already fetched into the queue's Connect buffer), a Property
    /// Set that enables the controller and an Identify, each slot's SQE and data buffer cleared
    /// before the owner looks; the queue joins the controller as the records said, with the data
    /// buffers the owner made (staged for the group), and the Identify's 4 KiB reach the slot's
    /// data buffer for the RDMA WRITE from the answer; nothing leaks. (Read from the group's
    /// slot, as before, the Connect would find opcode 0 and be refused.)
    #[test]
    fn the_owner_executes_a_forwarded_command_from_its_record_alone() {
        let (_f, _host, mut dev, base, mut t, qpn) = one_admin_queue();
        let (sqe, d) = connect_command(0, 0xFFFF);
        let s = forward_then_clear(&mut t, &mut dev, sqe, d.as_bytes(), 1024);
        let c = t.groups[0].conns[0].as_ref().expect("the admin queue");
        let id = c.q.cntlid.expect("joined the controller the record asked for");
        assert_eq!((t.core.live_ctrls(), c.slots[s as usize].state), (1, SlotState::Idle));
        assert!(c.pre_data.is_some() && c.stride == c.full_xfer && c.xfer == c.full_xfer, "its admitted data buffers taken in");
        let r = response(&t, s);
        assert_eq!((r.status.get(), r.dw0.get(), r.cid.get()), (0, id as u32, 1), "Connect answered with its controller ID");
        let s = forward_then_clear(&mut t, &mut dev, crate::host::property_set_sqe(0x14, 0x0046_0001), &[], 0);
        assert_eq!(response(&t, s).status.get(), 0, "enabled");
        let mut sqe = Sqe::zeroed();
        (sqe.opcode, sqe.flags, sqe.cid, sqe.cdw10) = (admin_op::IDENTIFY, PSDT_SGL, U16::new(9), U32::new(1));
        let s = forward_then_clear(&mut t, &mut dev, sqe, &[], 4096);
        let r = response(&t, s);
        assert_eq!((r.status.get(), r.cid.get()), (0, 9), "Identify answered");
        let c = t.groups[0].conns[0].as_ref().expect("the admin queue");
        let mut id_data = [0u8; 4096];
        c.data.read(c.data_off(s), &mut id_data);
        assert_eq!(&id_data[768..774], b"nqn.t\0", "the controller's data from the answer, for its RDMA WRITE");
        t.disconnected(&mut dev, qpn);
        assert!(t.groups.is_empty() && t.core.live_ctrls() == 0, "released with the queue");
        assert_eq!(dev.resources(), base, "nothing left behind");
    }

    /// A group with [`super::super::forward::FORWARDS`] commands at the owner holds the next
    /// one and forwards it again at the end of a turn (as a group on its own thread will when
    /// the owner is slower than its host): five Keep Alives executed by the group's turn with no
    /// owner step between them, the fifth held (its slot blocked, nothing put on the rings);
    /// the owner answers the four; the end of the turn forwards the fifth, which the owner
    /// answers too: every response with its CID and success, the group's rings empty after.
    #[test]
    fn a_command_beyond_the_forwarding_room_is_held_and_forwarded_again() {
        let (_f, _host, mut dev, base, mut t, qpn) = one_admin_queue();
        let (sqe, d) = connect_command(0, 0xFFFF);
        forward_then_clear(&mut t, &mut dev, sqe, d.as_bytes(), 1024);
        forward_then_clear(&mut t, &mut dev, crate::host::property_set_sqe(0x14, 0x0046_0001), &[], 0);
        let ci = QueueAt { g: 0, i: 0 };
        let mut slots = std::vec::Vec::new();
        for k in 0..5u16 {
            let c = t.groups[0].conns[0].as_mut().expect("the admin queue");
            let s = c.free.pop_front().expect("a free slot");
            let slot = &mut c.slots[s as usize];
            let mut sqe = Sqe::zeroed();
            (sqe.opcode, sqe.cid) = (admin_op::KEEP_ALIVE, U16::new(40 + k));
            (slot.sqe, slot.sgl, slot.fetched, slot.t0) = (sqe, None, true, 0);
            let (sh, g) = t.turn_parts(0);
            sh.execute(g, ci, s, 2_000);
            slots.push(s);
        }
        let g = &t.groups[0];
        let c = g.conns[0].as_ref().expect("the admin queue");
        assert_eq!(g.fwd.outstanding, super::super::forward::FORWARDS, "four at the owner");
        assert_eq!(c.slots[slots[4] as usize].state, SlotState::Blocked, "the fifth held");
        assert_eq!(g.blocked.len(), 1);
        t.owner_step(&mut dev, 0, 2_000);
        for (k, &s) in slots[..4].iter().enumerate() {
            let r = response(&t, s);
            assert_eq!((r.status.get(), r.cid.get()), (0, 40 + k as u16), "Keep Alive {k} answered");
        }
        assert_eq!(t.groups[0].fwd.outstanding, 0);
        assert_eq!(t.groups[0].conns[0].as_ref().expect("the admin queue").slots[slots[4] as usize].state, SlotState::Blocked, "still held until the end of the turn");
        let (sh, g) = t.turn_parts(0);
        sh.end_group_turn(g, 0, 2_000);
        assert!(g.owner_due, "the held command forwarded again");
        t.owner_step(&mut dev, 0, 2_000);
        let r = response(&t, slots[4]);
        assert_eq!((r.status.get(), r.cid.get()), (0, 44), "the fifth answered");
        let g = &t.groups[0];
        assert!(g.blocked.is_empty() && g.fwd.outstanding == 0, "nothing left held or at the owner");
        t.disconnected(&mut dev, qpn);
        assert!(t.groups.is_empty() && t.core.live_ctrls() == 0, "released with the queue");
        assert_eq!(dev.resources(), base, "nothing left behind");
    }
}
