//! Receive and dispatch on the RDMA transport, in a poll group's turn: a completion reaches
//! its queue and slot by index (`WrId`), a capsule is checked and executed by the group
//! (`GroupIo::execute`), and its `Action` is carried out (held commands retried once nothing overlaps them); an
//! admin-queue or Fabrics command is forwarded to the owner as a record (`forward.rs`), who
//! executes it from the record ([`RdmaTarget::execute_forwarded`]).

use super::*;

impl TurnShared {
    /// Completion `k` of group `g`'s (number `gi`) completion array (read in place, not copied).
    /// Inlined into the owner's loop over the group's completions, with `on_recv` (as the turn
    /// was before it was handed the group; measured with `scripts/bench-nvmeof`).
    #[inline(always)]
    pub(super) fn on_completion<V: GroupVerbs, B: BlockDevice>(&mut self, g: &mut PollGroup<V, B>, gi: usize, k: usize, now_ns: u64) {
        let wc = &g.wc[k];
        let (id, status) = (WrId::from_raw(wc.wr_id), wc.status);
        if id.kind() == Some(Kind::Recv) {
            self.on_recv(g, gi, id.slot(), k, now_ns);
            return;
        }
        let (ci, gen, s) = (QueueAt { g: gi, i: id.conn() }, id.gen(), id.slot());
        let Some(c) = g.conns.get_mut(ci.i).and_then(|c| c.as_mut()).filter(|c| c.gen == gen && !c.draining) else {
            Self::end_stale(g, id, ci, gen);
            return;
        };
        let (qpn, depth, close_after_send) = (c.qpn, c.depth, c.close_after_send);
        let kind = id.kind();
        if status != WcStatus::Success {
            if status != WcStatus::WrFlushed {
                g.io.wc_errors += 1;
                log::warn!("nvmeof: rdma: {qpn} completion error {status:?} ({kind:?})");
            }
            // A failed RDMA READ of a zero-copy Write leaves the command unanswered with its
            // queue: the host never sees success for data that may have landed in part. The
            // QP is in error: the range this completion carries ends (the close keeps those
            // of the work requests still to complete).
            Self::end_stale(g, id, ci, gen);
            self.close_queue(g, ci, true);
            return;
        }
        if s >= depth && kind != Some(Kind::Aer) {
            return;
        }
        match kind {
            Some(Kind::Read) => {
                c.reads_posted = c.reads_posted.saturating_sub(1);
                if c.slots[s as usize].state == SlotState::Reading {
                    self.data_in(g, ci, s, now_ns);
                }
                // The last READ in: held READs go out now (this turn's doorbell), whether or
                // not its command wrote anything.
                if let Some(c) = g.conns[ci.i].as_mut().filter(|c| !c.draining && c.reads_posted == 0 && !c.held_reads.is_empty()) {
                    let listed = core::mem::replace(&mut c.unrung, true);
                    g.list_unrung(ci.i, listed);
                }
            }
            Some(Kind::Send) => {
                // The response went out, so did the RDMA WRITE before it (RC order): the
                // namespace memory a zero-copy Read sent from may change now. A zero-copy
                // Write's response was fenced behind its (unsignaled) READ: its data is in
                // place, the blocks are free for overlapping commands again.
                let r = id.range();
                if !r.is_none() {
                    g.inflight.remove(r, ci, gen);
                }
                if close_after_send {
                    self.close_queue(g, ci, true);
                }
            }
            _ => {}
        }
    }

    /// A completion of queue `ci` (generation `gen`) after its close, or in error: the QP
    /// will place or send no more for the work request, so the zero-copy range a response
    /// carries ends (the close kept it while the data could still move: a zero-copy Write's
    /// READ landing, a zero-copy Read's RDMA WRITE sending). A range the queue no longer
    /// owns (ended already, or by the owner's destroying the QP) is left alone.
    #[cold]
    fn end_stale<V: GroupVerbs, B: BlockDevice>(g: &mut PollGroup<V, B>, id: WrId, ci: QueueAt, gen: u16) {
        let r = id.range();
        if id.kind() == Some(Kind::Send) && !r.is_none() {
            g.inflight.remove(r, ci, gen);
        }
    }

    /// A receive completion (`k` of group `g`'s array) from the group's SRQ in buffer `b`: the
    /// queue is found by QPN, the capsule takes the queue's oldest free slot (which holds the
    /// buffer until answered). Inlined into `on_completion` (as in the turn before).
    #[inline(always)]
    fn on_recv<V: GroupVerbs, B: BlockDevice>(&mut self, g: &mut PollGroup<V, B>, gi: usize, b: u16, k: usize, now_ns: u64) {
        if !g.has_buf(b) {
            return;
        }
        let wc = &g.wc[k];
        let (qpn, status, byte_len) = (wc.qpn, wc.status, wc.byte_len);
        let ok = status == WcStatus::Success && (wc.opcode == WcOpcode::Recv || wc.opcode == WcOpcode::RecvWithImm);
        let ci = g.qps.get(qpn).map(|i| QueueAt { g: gi, i: i as usize });
        let live = ci.and_then(|ci| g.conns[ci.i].as_ref().map(|c| !c.draining)).unwrap_or(false);
        let slot = match (ci, live && ok) {
            (Some(ci), true) => g.conns[ci.i].as_mut().and_then(|c| c.free.pop_front()),
            _ => None,
        };
        let (Some(ci), Some(s)) = (ci, slot) else {
            // A late receive of a queue gone, an error, or a host beyond its queue depth:
            // the buffer goes back; the queue (if any) is closed.
            g.give_back(gi, b);
            if let Some(ci) = ci.filter(|_| live) {
                if ok {
                    g.stats.slot_overruns += 1;
                } else if status != WcStatus::WrFlushed {
                    g.io.wc_errors += 1;
                    log::warn!("nvmeof: rdma: {qpn:?} receive completion error {status:?}");
                }
                self.close_queue(g, ci, true);
            }
            return;
        };
        g.stats.capsules += 1;
        g.conns[ci.i].as_mut().expect("live").slots[s as usize].rbuf = b;
        self.on_capsule(g, ci, s, byte_len, now_ns);
    }

    /// Slot `s`'s RDMA READ into the slot buffer completed: a Write's data (submit it) or a
    /// payload (execute the command with it). (A zero-copy Write's READ is answered with its
    /// fenced response, `answer_turn_writes`.)
    pub(super) fn data_in<V: GroupVerbs, B: BlockDevice>(&mut self, g: &mut PollGroup<V, B>, ci: QueueAt, s: u16, now_ns: u64) {
        let c = g.conns[ci.i].as_mut().expect("live");
        let gen = c.gen;
        let buf = c.data_dma.sub(c.data_off(s), c.xfer).unwrap_or(DmaSlice::EMPTY);
        let slot = &mut c.slots[s as usize];
        let Some(w) = slot.write else {
            slot.fetched = true;
            self.execute(g, ci, s, now_ns);
            return;
        };
        // A staged Write (`on_action`): copied into namespace memory once no zero-copy
        // transfer there overlaps it (a Read being sent from it would carry a torn block).
        // The store places it at any time until it completes: its blocks are claimed as a
        // write's until its response's completion, so a zero-copy Read waits for it. Held
        // again, its range kept, while another group's transfer is in the way.
        let w = match w.direct_buf() {
            Some(ns) => {
                let (start, end) = (ns.paddr(), ns.paddr() + ns.len() as u64);
                let kept = slot.range;
                if kept.is_none() && g.inflight.overlaps(start, end, false) {
                    g.hold(ci.i, s, Resume::Place);
                    return;
                }
                let Some(r) = (if kept.is_none() { g.inflight.insert(start, end, true, ci, gen) } else { Some(kept) }) else {
                    // Cannot happen (see `SubmittedDirect`): the command fails, memory untouched.
                    g.io.range_overflow += 1;
                    let (q, cid, nsid, t0) = (c.q, slot.sqe.cid.get(), slot.sqe.nsid.get(), slot.t0);
                    g.nsio.note_error(&q, cid, Status::INTERNAL, nsid);
                    g.owner_due = true;
                    self.respond(g, ci, s, Status::INTERNAL, 0, 0, t0);
                    return;
                };
                slot.range = r;
                if !g.inflight.claim(r) {
                    g.hold(ci.i, s, Resume::Place);
                    return;
                }
                PendingWrite { direct: false, ..w }
            }
            None => w,
        };
        // On the group's own handle of the namespace (through the owner when it has none).
        let tag = block_tag(ci, gen, Kind::Block, s);
        let action = g.nsio.write_fetched(&w, buf, tag, &mut g.owner_due);
        self.on_action(g, ci, s, action);
    }

    pub(super) fn on_capsule<V: GroupVerbs, B: BlockDevice>(&mut self, g: &mut PollGroup<V, B>, ci: QueueAt, s: u16, byte_len: u32, now_ns: u64) {
        let t0 = self.clock.map_or(0, |f| f());
        let c = g.conns[ci.i].as_mut().expect("live");
        c.capsules += 1;
        g.io.capsules += 1;
        let n = core::cmp::min(byte_len as usize, 64).min(c.capsule);
        let slot = &mut c.slots[s as usize];
        let base = slot.rbuf as usize * g.buf_len;
        if n < Sqe::SIZE {
            slot.sqe = Sqe::zeroed();
        }
        // The SQE goes straight from the receive buffer into the slot (one 64-byte copy).
        g.recv.read(base, &mut slot.sqe.as_mut_bytes()[..n]);
        slot.byte_len = byte_len;
        slot.sgl = None;
        slot.pending = 0;
        slot.status = Status::SUCCESS;
        slot.t0 = t0;
        slot.direct_addr = 0;
        slot.fetched = false;
        slot.write = None;
        slot.range = RangeId::NONE;
        match c.check_capsule(s, byte_len) {
            Err(st) => {
                g.io.bad_capsules += 1;
                let sqe = &c.slots[s as usize].sqe;
                let (cid, nsid) = (sqe.cid.get(), sqe.nsid.get());
                g.nsio.note_error(&c.q, cid, st, nsid);
                g.owner_due = true;
                self.respond(g, ci, s, st, 0, 0, 0);
            }
            Ok(()) => self.execute(g, ci, s, now_ns),
        }
    }

    /// Retry group `g`'s (number `gi`) held commands (each may be held again).
    pub(super) fn run_blocked<V: GroupVerbs, B: BlockDevice>(&mut self, g: &mut PollGroup<V, B>, gi: usize, now_ns: u64) {
        let n = g.blocked.len();
        for _ in 0..n {
            let Some((i, gen, s)) = g.blocked.pop_front() else { break };
            let ci = QueueAt { g: gi, i };
            let Some(c) = g.conns.get(i).and_then(|c| c.as_ref()) else { continue };
            let slot = &c.slots[s as usize];
            if c.gen != gen || c.draining || slot.state != SlotState::Blocked {
                continue;
            }
            let resume = slot.resume;
            match resume {
                Resume::Execute => self.execute(g, ci, s, now_ns),
                Resume::Fetch => self.fetch_direct(g, ci, s),
                Resume::Send => self.send_read(g, ci, s),
                Resume::Place => self.data_in(g, ci, s, now_ns),
            }
        }
    }

    /// Execute slot `s`'s command, an I/O queue's; an admin-queue or Fabrics command is left to
    /// the owner ([`PollGroup::forward`]: it may need every queue's counts, device memory for
    /// Connect, or close a reset controller's queues in other groups).
    pub(super) fn execute<V: GroupVerbs, B: BlockDevice>(&mut self, g: &mut PollGroup<V, B>, ci: QueueAt, s: u16, now_ns: u64) {
        self.command_action(g, ci, s, now_ns, |sh, g, action| sh.on_action(g, ci, s, action));
    }

    /// Execute slot `s`'s command (`GroupIo::execute`) and hand its answer to `then`, unless it is held (it
    /// overlaps a zero-copy transfer in flight) or forwarded to the owner (an admin-queue or
    /// Fabrics command, [`PollGroup::forward`]). Inlined into
    /// `execute` (as one call it was before the owner's commands went their own way), the
    /// answer handed on, not returned (an `Option<Action>` cost ~20 instructions per I/O).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn command_action<V: GroupVerbs, B: BlockDevice>(&mut self, g: &mut PollGroup<V, B>, ci: QueueAt, s: u16, now_ns: u64, then: impl FnOnce(&mut Self, &mut PollGroup<V, B>, Action)) {
        let c = g.conns[ci.i].as_mut().expect("live");
        // The fields it needs, not a copy of the whole slot.
        let slot = &c.slots[s as usize];
        if c.q.qid == 0 || slot.sqe.opcode == FABRICS_OPCODE {
            g.forward(ci, s);
            return;
        }
        let (sgl, slot_fetched) = (slot.sgl.unwrap_or(Sgl::Inline { offset: 0, len: 0 }), slot.fetched);
        // A keyed SGL's data is at the host until fetched (the core says when it wants it).
        let fetched = slot_fetched || !matches!(sgl, Sgl::Keyed { len, .. } if len > 0);
        // The SQE read where the capsule put it (not copied): the core takes the queue's state
        // mutably and the slot's SQE shared, two fields of the queue.
        let sqe = &c.slots[s as usize].sqe;
        // AERs are completed by CID later (their slot is reused at once); others by slot.
        let tag = if sqe.opcode == admin_op::ASYNC_EVENT && c.q.qid == 0 {
            block_tag(ci, c.gen, Kind::Aer, sqe.cid.get())
        } else {
            block_tag(ci, c.gen, Kind::Block, s)
        };
        // Where the capsule sits in the group's receive buffers.
        let capsule_at = (c.slots[s as usize].rbuf as usize * g.buf_len) as u64;
        // Inside the buffer by `check_capsule` (in-capsule data within the capsule, the slot's
        // data buffer `xfer` bytes); an empty slice otherwise fails the command.
        let buf = match sgl {
            Sgl::Inline { offset, len } => DmaSlice::new(&g.recv, (capsule_at + 64 + offset) as usize, len as usize),
            Sgl::Keyed { .. } => c.data_dma.sub(c.data_off(s), c.xfer),
        }
        .unwrap_or(DmaSlice::EMPTY);
        // Small host→controller payloads that the core parses (not namespace data).
        let small = &mut g.scratch_in;
        let mut small_len = 0;
        if fetched && sqe.opcode != io_op::WRITE && sgl.len() > 0 && host_to_ctrl(sqe) {
            small_len = core::cmp::min(sgl.len() as usize, small.len());
            match sgl {
                Sgl::Inline { offset, .. } => g.recv.read(capsule_at as usize + 64 + offset as usize, &mut small[..small_len]),
                Sgl::Keyed { .. } => c.data.read(c.data_off(s), &mut small[..small_len]),
            }
        }
        if fetched {
            // An in-capsule Write, Write Zeroes or DSM changes namespace memory: it waits for
            // the zero-copy transfers there, then claims its blocks as a write's until its
            // response's completion (the store may place them any time until it completes),
            // so a zero-copy Read of them waits for it (a staged Write's way, `data_in`).
            if let Some((a, n)) = g.nsio.modifies_direct(&c.q, sqe, &small[..small_len]) {
                let end = a.saturating_add(n);
                // Its range once taken is kept while another group's transfer is in the way.
                let kept = c.slots[s as usize].range;
                if kept.is_none() && g.inflight.overlaps(a, end, false) {
                    g.hold(ci.i, s, Resume::Execute);
                    return;
                }
                let Some(r) = (if kept.is_none() { g.inflight.insert(a, end, true, ci, c.gen) } else { Some(kept) }) else {
                    // Cannot happen (see `SubmittedDirect`): the command fails, memory untouched.
                    g.io.range_overflow += 1;
                    let (q, cid, nsid, t0) = (c.q, sqe.cid.get(), sqe.nsid.get(), c.slots[s as usize].t0);
                    g.nsio.note_error(&q, cid, Status::INTERNAL, nsid);
                    g.owner_due = true;
                    self.respond(g, ci, s, Status::INTERNAL, 0, 0, t0);
                    return;
                };
                c.slots[s as usize].range = r;
                if !g.inflight.claim(r) {
                    g.hold(ci.i, s, Resume::Execute);
                    return;
                }
            }
        }
        let sqe = &c.slots[s as usize].sqe;
        if small_len > 0 {
            let io = &mut g.io;
            if c.q.qid == 0 || sqe.opcode == FABRICS_OPCODE {
                io.admin_copy_bytes += small_len as u64;
            } else {
                io.io_copy_bytes += small_len as u64;
            }
        }
        if matches!(sgl, Sgl::Inline { len, .. } if len > 0) {
            g.io.inline_writes += 1;
        }
        let data = DataIn { bytes: &small[..small_len], buf, sgl_len: sgl.len(), tag, fetched };
        // Counted in the group's own counts (folded into the core's figures on the slow path);
        // an I/O command on the group's own handle of its namespace (through the owner for a
        // namespace the group has no handle of), anything else refused by the group.
        let action = g.nsio.execute(&mut c.q, sqe, &data, now_ns, &mut g.counts, &mut g.owner_due);
        then(self, g, action);
    }

    /// Carry out the core's answer for slot `s` (or the owner's to a forwarded command, whose
    /// data and admission are done before: [`TurnShared::take_forward_answers`]).
    pub(super) fn on_action<V: GroupVerbs, B: BlockDevice>(&mut self, g: &mut PollGroup<V, B>, ci: QueueAt, s: u16, action: Action) {
        match action {
            Action::Respond { status, dw0, dw1, out_len } => {
                let c = g.conns[ci.i].as_mut().expect("live");
                let slot = &c.slots[s as usize];
                let (sqe, t0, fetched_write) = (slot.sqe, slot.t0, slot.write.is_some());
                if status.is_success() && sqe.opcode == FABRICS_OPCODE && sqe.fctype() == fctype::DISCONNECT {
                    c.close_after_send = true;
                }
                if fetched_write && !status.is_success() {
                    // `write_fetched` failed: the core leaves recording to its caller.
                    let q = c.q;
                    g.nsio.note_error(&q, sqe.cid.get(), status, sqe.nsid.get());
                    g.owner_due = true;
                }
                // Controller-to-host data comes only with an admin or Fabrics command's answer,
                // the owner's, which carries it (`take_forward_answers`): an I/O command's has none.
                debug_assert_eq!(out_len, 0, "an I/O command answered with data");
                self.respond(g, ci, s, status, dw0, dw1, t0);
            }
            Action::Submitted { count } => {
                let c = g.conns[ci.i].as_mut().expect("live");
                c.slots[s as usize].state = SlotState::Executing;
                c.slots[s as usize].pending = count;
            }
            Action::SubmittedDirect { buf } | Action::ReadyDirect { buf } => {
                let ready = matches!(action, Action::ReadyDirect { .. });
                let addr = buf.paddr();
                let lkey = self.ns_lkey(addr);
                let c = g.conns[ci.i].as_mut().expect("live");
                let gen = c.gen;
                let slot = &mut c.slots[s as usize];
                slot.state = SlotState::Executing;
                slot.pending = 1;
                slot.direct_addr = addr;
                let len = slot.sgl.map_or(0, |g| g.len()) as u64;
                // From now until the response's completion, the adapter will read this
                // namespace memory: writes to it wait.
                // Its claim against the other groups' writes is made when it is sent (`send_read`).
                match lkey.map(|k| (k, g.inflight.insert(addr, addr + len, false, ci, gen))) {
                    Some((k, Some(r))) => {
                        slot.direct_lkey = k;
                        slot.range = r;
                    }
                    // Cannot happen (direct is on only with every region registered, the
                    // range table has room for every slot twice); fail the command rather
                    // than send stale slot memory.
                    other => {
                        if matches!(other, Some((_, None))) {
                            g.io.range_overflow += 1;
                        }
                        slot.status = Status::INTERNAL;
                    }
                }
                if ready {
                    // The store is done already: on as its completion would go (one path).
                    slot.pending = 0;
                    self.block_done(g, ci, s);
                }
            }
            Action::Fetch(Fetch::Payload) => self.post_read(g, ci, s),
            Action::Fetch(Fetch::Write(w)) => {
                let c = g.conns[ci.i].as_mut().expect("live");
                c.slots[s as usize].write = Some(w);
                match w.direct_buf() {
                    Some(buf) if w.len() as u64 <= c.pmtu as u64 * w.blocks() as u64 => {
                        g.io.direct_writes += 1;
                        c.slots[s as usize].direct_addr = buf.paddr();
                        self.fetch_direct(g, ci, s);
                    }
                    // A block would span packets: into the slot buffer, copied once all of it
                    // is there (`data_in`).
                    Some(_) => {
                        g.io.staged_writes += 1;
                        self.post_read(g, ci, s);
                    }
                    None => self.post_read(g, ci, s),
                }
            }
            Action::Hold => {
                // The AER keeps only its CID; its slot and receive buffer go straight back.
                g.release_slot(ci, s);
            }
            Action::Busy => {
                // The group's block I/Os at the owner leave no room (`GroupIo`): held, its
                // claim given back (taken again when it comes back), and executed again (a
                // Write whose data is in placed again) once answers made room.
                let c = g.conns[ci.i].as_mut().expect("live");
                let (gen, slot) = (c.gen, &mut c.slots[s as usize]);
                let r = core::mem::replace(&mut slot.range, RangeId::NONE);
                if !r.is_none() {
                    g.inflight.remove(r, ci, gen);
                }
                let resume = if slot.write.is_some() { Resume::Place } else { Resume::Execute };
                // Counted here, not as a command held for an overlap (`hold` counts a slot
                // it finds not blocked yet).
                slot.state = SlotState::Blocked;
                slot.resume = resume;
                g.io.held_via_owner += 1;
                g.hold(ci.i, s, resume);
            }
        }
    }
}

impl<V: GroupVerbs> Conn<V> {
    /// Validate slot `s`'s capsule's framing and SGL (the slot keeps the decoded SGL).
    pub(super) fn check_capsule(&mut self, s: u16, byte_len: u32) -> Result<(), Status> {
        let c = self;
        let sqe = &c.slots[s as usize].sqe;
        if (byte_len as usize) < Sqe::SIZE || byte_len as usize > c.capsule {
            return Err(Status::INVALID_FIELD);
        }
        if sqe.flags & 0xC0 != PSDT_SGL || sqe.flags & 0x03 != 0 {
            // PRPs or fused commands are not supported on fabrics.
            return Err(Status::INVALID_FIELD);
        }
        if c.q.cntlid.is_none() && !(sqe.opcode == FABRICS_OPCODE && sqe.fctype() == fctype::CONNECT) {
            // Nothing but Connect before Connect (and no data moved for anything else).
            return Err(Status::CMD_SEQ_ERROR);
        }
        let sgl = Sgl::decode(&sqe.dptr)?;
        match sgl {
            Sgl::Inline { offset, len } if len > 0 => {
                // In-capsule data only flows host to controller, on I/O queues.
                if !host_to_ctrl(sqe) || c.q.qid == 0 {
                    return Err(Status::INVALID_FIELD);
                }
                let room = (byte_len as u64).saturating_sub(Sqe::SIZE as u64);
                if offset > room || len as u64 > room - offset {
                    return Err(Status::SGL_INVALID_OFFSET);
                }
            }
            Sgl::Keyed { len, .. } if len > 0 => {
                if len as usize > c.xfer {
                    return Err(Status::SGL_INVALID_DATA);
                }
                if byte_len as usize != Sqe::SIZE && c.q.qid == 0 {
                    return Err(Status::INVALID_FIELD);
                }
            }
            _ => {}
        }
        c.slots[s as usize].sgl = Some(sgl);
        Ok(())
    }
}
