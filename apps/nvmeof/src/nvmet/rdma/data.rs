//! Data movement and completion on the RDMA transport: RDMA READ of host data (into namespace
//! memory or the slot's buffer), RDMA WRITE of read data, block completions, AER and
//! command responses, and the deferred send doorbell, in a poll group's turn.

use super::*;

impl TurnShared {
    /// RDMA READ slot `s`'s host data: into the slot's buffer, or, for a zero-copy Write, into
    /// namespace memory at the end of the turn with the Write's response (`answer_turn_writes`).
    ///
    /// A READ into the slot buffer while another is outstanding on the queue is held until
    /// the queue's next doorbell (`ring_one`; at the latest the last outstanding READ's
    /// completion posts it), so it goes out with the responses that completion brings
    /// (NVMe-backed Writes: READ, drive write, response; one doorbell per turn for both).
    /// Not bounded by the number of READs outstanding.
    /// The QP's outstanding-READ limit (`max_rd_atomic`, the initiator depth agreed with the
    /// host's responder resources) is the adapter requester's to keep, as InfiniBand asks of
    /// it: it does not begin a READ beyond the limit and holds the send queue behind it until
    /// an earlier READ's response is in (so does the emulated RoCE requester, `emu-roce`
    /// `rc::outstanding_read_limit_respected`; Linux's nvmet-rdma likewise posts its READs
    /// bounded only by send queue room). The send queue has room for a READ per slot
    /// (`sq_depth`).
    pub(super) fn post_read<V: GroupVerbs, B: BlockDevice>(&mut self, g: &mut PollGroup<V, B>, ci: QueueAt, s: u16) {
        let c = g.conns[ci.i].as_mut().expect("live");
        if let Some(listed) = c.list_turn_write(s) {
            g.has_turn_writes = true;
            g.list_unrung(ci.i, listed);
            return;
        }
        let slot = &mut c.slots[s as usize];
        let Some(Sgl::Keyed { .. }) = slot.sgl else { return };
        slot.state = SlotState::Reading;
        if c.reads_posted > 0 {
            // An earlier READ's completion will ring the queue (its command answered, or the
            // held READs posted when it is the last): this one waits to share that doorbell.
            // A slot is held at most once (it is Reading until its READ is posted), so the
            // list, with room for every slot, does not allocate.
            c.held_reads.push(s);
            g.io.held_slot_reads += 1;
            return;
        }
        self.post_slot_read(g, ci, s);
    }

    /// Write slot `s`'s RDMA READ into its slot buffer (unrung).
    fn post_slot_read<V: GroupVerbs, B: BlockDevice>(&mut self, g: &mut PollGroup<V, B>, ci: QueueAt, s: u16) -> bool {
        let c = g.conns[ci.i].as_mut().expect("live");
        let Some(Sgl::Keyed { addr, len, key, .. }) = c.slots[s as usize].sgl else { return true };
        c.reads_posted += 1;
        let sge = Sge { addr: c.data.paddr() + c.data_off(s) as u64, len, lkey: c.data_lkey };
        let wr = SendWr { wr_id: wr_id(ci, c.gen, Kind::Read, s), op: SendOp::RdmaRead { remote_addr: addr, rkey: Rkey(key) }, sge, signaled: true, fence: false, ud: None };
        let (qpn, listed) = (c.qpn, core::mem::replace(&mut c.unrung, true));
        if g.post_deferred(ci.i, qpn, listed, &wr) {
            return true;
        }
        self.close_queue(g, ci, true);
        false
    }

    /// Write queue `ci`'s held READs (unrung: the caller's doorbell rings them). False if the
    /// queue was torn down.
    pub(super) fn post_held_reads<V: GroupVerbs, B: BlockDevice>(&mut self, g: &mut PollGroup<V, B>, ci: QueueAt) -> bool {
        let n = g.conns[ci.i].as_ref().map_or(0, |c| c.held_reads.len());
        for i in 0..n {
            let s = g.conns[ci.i].as_ref().expect("live").held_reads[i];
            if !self.post_slot_read(g, ci, s) {
                return false;
            }
        }
        if let Some(c) = g.conns[ci.i].as_mut() {
            c.held_reads.clear();
        }
        true
    }

    /// End of the turn: each queue's zero-copy Writes of this turn are answered. Their READs are
    /// written first, then their responses, each SEND fenced (IBA fence: the adapter begins it
    /// only once every earlier READ's data is placed; a failed READ flushes it unsent), so a
    /// turn's Writes cost its one doorbell and their READ completions none. The cost: a
    /// response, and every later work request of the queue (e.g. a Read's data and response
    /// of the next turn), waits for all READs before it, not just its own.
    pub(super) fn answer_turn_writes<V: GroupVerbs, B: BlockDevice>(&mut self, g: &mut PollGroup<V, B>, gi: usize) {
        // Most turns have none (reads): one flag (the caller's), no pass over the queues.
        g.has_turn_writes = false;
        if g.unrung_overflow {
            let hi = g.hi;
            for i in 0..hi {
                self.answer_queue_writes(g, QueueAt { g: gi, i });
            }
            return;
        }
        // A queue's answer may tear it down, never list another: the list only shrinks.
        let mut k = 0;
        while let Some(&i) = g.unrung.get(k) {
            self.answer_queue_writes(g, QueueAt { g: gi, i: i as usize });
            k += 1;
        }
    }

    /// Queue `ci`'s Writes of this turn: first the READs, then the responses, of the same
    /// slots (those `turn_write` takes: one filter for both passes).
    fn answer_queue_writes<V: GroupVerbs, B: BlockDevice>(&mut self, g: &mut PollGroup<V, B>, ci: QueueAt) {
        let Some(c) = g.conns[ci.i].as_mut() else { return };
        let n = c.turn_writes.len();
        if n == 0 || c.draining {
            c.turn_writes.clear();
            return;
        }
        // The list is kept to the slots `turn_write` takes, so the answer pass answers exactly
        // the Writes whose READs this pass wrote.
        let mut kept = 0;
        for i in 0..n {
            let c = g.conns[ci.i].as_mut().expect("live");
            let s = c.turn_writes[i];
            let Some((addr, len, key)) = turn_write(&c.slots[s as usize]) else { continue };
            c.turn_writes[kept] = s;
            kept += 1;
            let slot = &c.slots[s as usize];
            // Unsignaled: the fenced response's completion says the data is placed (the adapter
            // begins the SEND only then), so the range stays with the slot and travels in the
            // response's `wr_id` (`respond_fenced`), ended by its completion; until then
            // overlapping commands wait as for any Write still landing. A failed READ still
            // completes (in error, as every failed work request does) and fails the queue.
            let sge = Sge { addr: slot.direct_addr, len, lkey: slot.direct_lkey };
            let op = SendOp::RdmaRead { remote_addr: addr, rkey: Rkey(key) };
            let wr = SendWr { wr_id: wr_id(ci, c.gen, Kind::AnsweredRead, s), op, sge, signaled: false, fence: false, ud: None };
            let (qpn, listed) = (c.qpn, core::mem::replace(&mut c.unrung, true));
            if !g.post_deferred(ci.i, qpn, listed, &wr) {
                self.close_queue(g, ci, true);
                return;
            }
        }
        for i in 0..kept {
            let Some(c) = g.conns[ci.i].as_mut().filter(|c| !c.draining) else { return };
            let s = c.turn_writes[i];
            let t0 = c.slots[s as usize].t0;
            g.io.fenced_responses += 1;
            self.respond_fenced(g, ci, s, Status::SUCCESS, 0, 0, t0, true, None);
        }
        if let Some(c) = g.conns[ci.i].as_mut() {
            c.turn_writes.clear();
        }
    }

    /// A zero-copy Write: once nothing of its group in flight overlaps its blocks but its own
    /// queue's zero-copy Writes (posted before it on the same QP: their data lands first),
    /// claim them, and once no other group's transfer is in the way (held meanwhile, its range
    /// kept, `InFlight::claim`), RDMA READ the host's data straight into namespace memory.
    pub(super) fn fetch_direct<V: GroupVerbs, B: BlockDevice>(&mut self, g: &mut PollGroup<V, B>, ci: QueueAt, s: u16) {
        let c = g.conns[ci.i].as_mut().expect("live");
        let slot = &c.slots[s as usize];
        let (addr, len, gen, kept) = (slot.direct_addr, slot.write.map_or(0, |w| w.len()) as u64, c.gen, slot.range);
        if kept.is_none() && g.inflight.write_waits(addr, addr + len, ci, gen) {
            g.hold(ci.i, s, Resume::Fetch);
            return;
        }
        let lkey = self.ns_lkey(addr);
        let range = if kept.is_none() { g.inflight.insert(addr, addr + len, true, ci, gen) } else { Some(kept) };
        let slot = &mut c.slots[s as usize];
        match (lkey, range) {
            (Some(k), Some(r)) => {
                slot.direct_lkey = k;
                slot.range = r;
                if !g.inflight.claim(r) {
                    g.hold(ci.i, s, Resume::Fetch);
                    return;
                }
                // Its READ, on this turn's list (as `post_read` would, with the queue at hand).
                match c.list_turn_write(s) {
                    Some(listed) => {
                        g.has_turn_writes = true;
                        g.list_unrung(ci.i, listed);
                    }
                    None => self.post_read(g, ci, s),
                }
            }
            _ => {
                // Cannot happen (see `SubmittedDirect`): the command fails, memory untouched.
                if let Some(r) = range {
                    g.inflight.remove(r, ci, gen);
                }
                g.io.range_overflow += range.is_none() as u64;
                let (q, cid, nsid, t0) = (c.q, slot.sqe.cid.get(), slot.sqe.nsid.get(), slot.t0);
                g.nsio.note_error(&q, cid, Status::INTERNAL, nsid);
                g.owner_due = true;
                self.respond(g, ci, s, Status::INTERNAL, 0, 0, t0);
            }
        }
    }

    /// RDMA WRITE `src` to the host buffer of slot `s`'s keyed SGL.
    pub(super) fn post_write<V: GroupVerbs, B: BlockDevice>(&mut self, g: &mut PollGroup<V, B>, ci: QueueAt, s: u16, src: Sge) -> bool {
        let c = g.conns[ci.i].as_mut().expect("live");
        let Some(wr) = c.write_wr(ci, s, src) else { return true };
        let (qpn, listed) = (c.qpn, core::mem::replace(&mut c.unrung, true));
        if g.post_deferred(ci.i, qpn, listed, &wr) {
            return true;
        }
        self.close_queue(g, ci, true);
        false
    }

    /// A block completion (`tag`, the store's status `st`) of one of group `g`'s commands
    /// ([`WrId::tag`] names the group: the caller hands that one).
    pub(super) fn on_block_done<V: GroupVerbs, B: BlockDevice>(&mut self, g: &mut PollGroup<V, B>, tag: u64, st: Status) {
        let id = WrId::from_raw(tag);
        let (ci, gen, s) = (QueueAt { g: id.group(), i: id.conn() }, id.gen(), id.slot());
        let Some(c) = g.conns.get_mut(ci.i).and_then(|c| c.as_mut()) else { return };
        if c.gen != gen || s >= c.depth {
            return;
        }
        let slot = &mut c.slots[s as usize];
        if slot.state != SlotState::Executing {
            return;
        }
        if slot.status.is_success() && !st.is_success() {
            slot.status = st;
        }
        slot.pending = slot.pending.saturating_sub(1);
        if slot.pending > 0 {
            return;
        }
        self.block_done(g, ci, s);
    }

    /// Slot `s`'s block I/O is done (its last completion, or the store did it at once,
    /// `Action::ReadyDirect`): a Read's data goes to the host, anything else is answered.
    pub(super) fn block_done<V: GroupVerbs, B: BlockDevice>(&mut self, g: &mut PollGroup<V, B>, ci: QueueAt, s: u16) {
        let c = g.conns[ci.i].as_mut().expect("live");
        let slot = &c.slots[s as usize];
        let (status, t0, opcode) = (slot.status, slot.t0, slot.sqe.opcode);
        if c.draining {
            // Its blocks, kept claimed by the close while the store had them, are free now.
            let (r, gen) = (c.slots[s as usize].range, c.gen);
            g.inflight.remove(r, ci, gen);
            c.slots[s as usize].state = SlotState::Idle;
            g.free_queue(ci);
            return;
        }
        if !status.is_success() {
            let (q, sqe) = (c.q, &c.slots[s as usize].sqe);
            let (cid, nsid) = (sqe.cid.get(), sqe.nsid.get());
            g.nsio.note_error(&q, cid, status, nsid);
            g.owner_due = true;
        } else if opcode == io_op::READ {
            self.send_read(g, ci, s);
            return;
        }
        self.respond(g, ci, s, status, 0, 0, t0);
    }

    /// A Read's data is ready: RDMA WRITE it to the host and respond. A zero-copy Read waits
    /// while a zero-copy Write is still landing in its blocks, its group's or, claimed against
    /// the other groups' (`InFlight::claim_send`), another group's. Inlined into `block_done`, which
    /// has the queue at hand already (not fetched twice per Read).
    #[inline(always)]
    pub(super) fn send_read<V: GroupVerbs, B: BlockDevice>(&mut self, g: &mut PollGroup<V, B>, ci: QueueAt, s: u16) {
        let c = g.conns[ci.i].as_mut().expect("live");
        // The fields it needs, not a copy of the whole slot.
        let slot = &c.slots[s as usize];
        // The claim first, before the fields below are read: they are not kept across the call.
        if !g.inflight.alone() && slot.direct_addr != 0 && !g.inflight.claim_send(slot.range) {
            g.hold(ci.i, s, Resume::Send);
            return;
        }
        let (len, direct_addr, direct_lkey, status, t0) = (slot.sgl.map_or(0, |g| g.len()), slot.direct_addr, slot.direct_lkey, slot.status, slot.t0);
        let src = if direct_addr != 0 {
            if g.inflight.overlaps(direct_addr, direct_addr + len as u64, true) {
                g.hold(ci.i, s, Resume::Send);
                return;
            }
            Sge { addr: direct_addr, len, lkey: direct_lkey }
        } else {
            Sge { addr: c.data.paddr() + c.data_off(s) as u64, len, lkey: c.data_lkey }
        };
        // Its RDMA WRITE (as `post_write`, on the queue already at hand), written with the
        // response by one data-path call.
        let write = c.write_wr(ci, s, src);
        self.respond_fenced(g, ci, s, status, 0, 0, t0, false, write.as_ref());
    }

    /// Group `g`'s (number `gi`) look at its ring of AER completions from the owner
    /// ([`AerDone`]): each answered on its queue (a queue gone since is skipped). Returns how
    /// many.
    pub(super) fn take_aers<V: GroupVerbs, B: BlockDevice>(&mut self, g: &mut PollGroup<V, B>, gi: usize) -> usize {
        let mut n = 0;
        while let Some(a) = g.aer_rx.pop() {
            n += 1;
            let tag = WrId::tag(gi, a.conn as usize, a.gen, Kind::Aer, a.cid).raw();
            self.complete_aer(g, tag, a.dw0);
        }
        n
    }

    /// Complete an AER of group `g`'s queue (`tag`, as [`RdmaTarget::execute_forwarded`] gave the
    /// core) with `dw0`.
    pub(super) fn complete_aer<V: GroupVerbs, B: BlockDevice>(&mut self, g: &mut PollGroup<V, B>, tag: u64, dw0: u32) {
        let id = WrId::from_raw(tag);
        let (ci, gen, cid) = (QueueAt { g: id.group(), i: id.conn() }, id.gen(), id.slot());
        let Some(c) = g.conns.get_mut(ci.i).and_then(|c| c.as_mut()) else { return };
        if c.gen != gen || c.draining {
            return;
        }
        let idx = c.depth + c.aer_rsp_next;
        c.aer_rsp_next = (c.aer_rsp_next + 1) % MAX_AERS as u16;
        let cqe = Cqe {
            dw0: U32::new(dw0),
            dw1: U32::new(0),
            sqhd: U16::new(c.q.next_sqhd()),
            sqid: U16::new(c.q.qid),
            cid: U16::new(cid),
            status: U16::new(0),
        };
        c.rsp.write(idx as usize * Cqe::SIZE, cqe.as_bytes());
        let wr = SendWr {
            wr_id: wr_id(ci, c.gen, Kind::Aer, idx),
            op: SendOp::Send,
            sge: Sge { addr: c.rsp.paddr() + (idx as usize * Cqe::SIZE) as u64, len: Cqe::SIZE as u32, lkey: c.rsp_lkey },
            signaled: true,
            fence: false,
            ud: None,
        };
        let (qpn, listed) = (c.qpn, core::mem::replace(&mut c.unrung, true));
        if !g.post_deferred(ci.i, qpn, listed, &wr) {
            self.close_queue(g, ci, true);
        }
    }

    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) fn respond<V: GroupVerbs, B: BlockDevice>(&mut self, g: &mut PollGroup<V, B>, ci: QueueAt, s: u16, status: Status, dw0: u32, dw1: u32, t0: u64) {
        self.respond_fenced(g, ci, s, status, dw0, dw1, t0, false, None);
    }

    /// Answer slot `s` (its SEND `fence`d behind the queue's outstanding READs when asked, or
    /// after a Read's RDMA WRITE `write`, the two written by one data-path call) and free the
    /// slot.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn respond_fenced<V: GroupVerbs, B: BlockDevice>(&mut self, g: &mut PollGroup<V, B>, ci: QueueAt, s: u16, status: Status, dw0: u32, dw1: u32, t0: u64, fence: bool, write: Option<&SendWr>) {
        let c = g.conns[ci.i].as_mut().expect("live");
        let (cid, sgl, range, opcode) = {
            let sl = &c.slots[s as usize];
            (sl.sqe.cid, sl.sgl, sl.range, sl.sqe.opcode)
        };
        // Per-queue counters (metrics): data of answered Reads/Writes, error responses.
        if !status.is_success() {
            c.errors += 1;
        } else if c.q.qid != 0 {
            let len = sgl.map_or(0, |g| g.len() as u64);
            match opcode {
                io_op::READ => c.bytes_read += len,
                io_op::WRITE => c.bytes_written += len,
                _ => {}
            }
        }
        let cqe = Cqe {
            dw0: U32::new(dw0),
            dw1: U32::new(dw1),
            sqhd: U16::new(c.q.next_sqhd()),
            sqid: U16::new(c.q.qid),
            cid,
            status: U16::new(status.to_field()),
        };
        c.rsp.write(s as usize * Cqe::SIZE, cqe.as_bytes());
        let op = match sgl {
            Some(Sgl::Keyed { key, invalidate: true, .. }) => SendOp::SendWithInvalidate(Rkey(key)),
            _ => SendOp::Send,
        };
        let wr = SendWr {
            // A zero-copy Read's range ends with this completion.
            wr_id: WrId::new(ci.i, c.gen, Kind::Send, s, range).raw(),
            op,
            sge: Sge { addr: c.rsp.paddr() + (s as usize * Cqe::SIZE) as u64, len: Cqe::SIZE as u32, lkey: c.rsp_lkey },
            signaled: true,
            fence,
            ud: None,
        };
        // The slot and its receive buffer are free again: the buffer is re-posted to the SRQ
        // at the end of this turn, before the SEND is rung with the rest of the turn's sends.
        let b = c.release_slot(s);
        let (qpn, listed) = (c.qpn, core::mem::replace(&mut c.unrung, true));
        if b != NO_BUF {
            g.give_back(ci.g, b);
        }
        // Responses (and SEND WITH INVALIDATE) are counted by `post_deferred`.
        if !status.is_success() {
            g.io.error_responses += 1;
        }
        let posted = match write {
            Some(w) => g.post_deferred_pair(ci.i, qpn, listed, w, &wr),
            None => g.post_deferred(ci.i, qpn, listed, &wr),
        };
        if !posted {
            self.close_queue(g, ci, true);
            return;
        }
        if let Some(f) = self.clock {
            g.turnaround.record(f().wrapping_sub(t0));
        }
    }

    /// The end of group `g`'s (number `gi`) turn, which touches only the group's own lists and
    /// queues: its held commands retried, its zero-copy Writes' READs and fenced answers, the
    /// buffers its commands gave back re-posted (one batch), then one send doorbell per queue
    /// of the group that had WRs written this turn.
    #[inline]
    pub(super) fn end_group_turn<V: GroupVerbs, B: BlockDevice>(&mut self, g: &mut PollGroup<V, B>, gi: usize, now_ns: u64) {
        if !g.blocked.is_empty() {
            let listed = g.unrung.len();
            self.run_blocked(g, gi, now_ns);
            // The queues the retried commands listed had nothing else this turn: the doorbell
            // rung for them below is the retries' (counted here, off the common path).
            g.io.held_retry_doorbells += (g.unrung.len() - listed) as u64;
        }
        if g.has_turn_writes {
            self.answer_turn_writes(g, gi);
        }
        match g.flush() {
            Ok(n) => g.io.posts += n as u64,
            Err(e) => {
                // The buffers are lost to the SRQ (it shrinks); counted and logged.
                g.io.post_errors += 1;
                log::warn!("nvmeof: rdma: SRQ re-post failed: {e:?}");
            }
        }
        self.ring_doorbells(g, gi);
    }

    /// One send doorbell per QP of group `g` (number `gi`) that had WRs written this turn.
    fn ring_doorbells<V: GroupVerbs, B: BlockDevice>(&mut self, g: &mut PollGroup<V, B>, gi: usize) {
        if core::mem::replace(&mut g.unrung_overflow, false) {
            g.unrung.clear();
            let hi = g.hi;
            for i in 0..hi {
                self.ring_one(g, QueueAt { g: gi, i });
            }
            return;
        }
        while let Some(i) = g.unrung.pop() {
            self.ring_one(g, QueueAt { g: gi, i: i as usize });
        }
    }

    fn ring_one<V: GroupVerbs, B: BlockDevice>(&mut self, g: &mut PollGroup<V, B>, ci: QueueAt) {
        let Some(c) = g.conns.get_mut(ci.i).and_then(|c| c.as_mut()) else { return };
        if !c.unrung {
            return;
        }
        c.unrung = false;
        if c.draining {
            return;
        }
        if !c.held_reads.is_empty() {
            // Under this doorbell with the rest of the turn's work requests.
            c.unrung = true;
            let ok = self.post_held_reads(g, ci);
            let Some(c) = g.conns[ci.i].as_mut().filter(|_| ok) else { return };
            c.unrung = false;
        }
        let c = g.conns[ci.i].as_ref().expect("live");
        g.io.send_doorbells += 1;
        if g.rings.ring_send(c.qpn).is_err() {
            g.io.post_errors += 1;
            self.close_queue(g, ci, true);
        }
    }
}

impl<V: GroupVerbs> Conn<V> {
    /// If slot `s` is a zero-copy Write (keyed SGL, namespace memory to READ into): it is
    /// Reading and on the queue's list of this turn's Writes, whose READs and fenced answers are
    /// written at the end of the turn (`answer_turn_writes`; its READ is counted then, by
    /// `post_deferred`). Returns whether the queue was listed for this turn's doorbell already
    /// (its `unrung`, now set); none for any other slot.
    #[inline(always)]
    pub(super) fn list_turn_write(&mut self, s: u16) -> Option<bool> {
        let slot = &mut self.slots[s as usize];
        if !(matches!(slot.sgl, Some(Sgl::Keyed { .. })) && slot.direct_addr != 0 && slot.write.is_some()) {
            return None;
        }
        slot.state = SlotState::Reading;
        // The list has room for every slot and a slot is on it at most once (it is Reading
        // until answered), so this does not allocate.
        self.turn_writes.push(s);
        Some(core::mem::replace(&mut self.unrung, true))
    }

    /// Slot `s` is done with its command: back on the free list. Returns its receive buffer
    /// (`NO_BUF` if none) for the caller to give back to the group.
    #[inline(always)]
    pub(super) fn release_slot(&mut self, s: u16) -> u16 {
        let slot = &mut self.slots[s as usize];
        slot.state = SlotState::Idle;
        let b = core::mem::replace(&mut slot.rbuf, NO_BUF);
        // Room for every slot (reserved at accept); each is freed once per capsule.
        if self.free.len() < self.free.capacity() {
            self.free.push_back(s);
        }
        b
    }

    /// The RDMA WRITE of `src` to the host buffer of slot `s`'s keyed SGL (queue `ci`); none
    /// for another SGL.
    #[inline(always)]
    fn write_wr(&self, ci: QueueAt, s: u16, src: Sge) -> Option<SendWr> {
        let Some(Sgl::Keyed { addr, key, .. }) = self.slots[s as usize].sgl else { return None };
        Some(SendWr {
            wr_id: wr_id(ci, self.gen, Kind::Write, s),
            op: SendOp::RdmaWrite { remote_addr: addr, rkey: Rkey(key) },
            sge: src,
            signaled: false,
            fence: false,
            ud: None,
        })
    }
}

impl<V: GroupVerbs, B: BlockDevice> PollGroup<V, B> {
    /// Slot `s` of queue `i` is done with its command: back on the queue's free list, its
    /// receive buffer given back to the group (re-posted in this turn's batch).
    #[inline(always)]
    pub(super) fn release_slot(&mut self, ci: QueueAt, s: u16) {
        let b = self.conns[ci.i].as_mut().expect("live").release_slot(s);
        if b != NO_BUF {
            self.give_back(ci.g, b);
        }
    }

    /// Hold slot `s` of queue `i` until nothing in flight overlaps it (on the group's list);
    /// `resume` is what it does then.
    pub(super) fn hold(&mut self, i: usize, s: u16, resume: Resume) {
        let c = self.conns[i].as_mut().expect("live");
        let slot = &mut c.slots[s as usize];
        if slot.state != SlotState::Blocked {
            slot.state = SlotState::Blocked;
            slot.resume = resume;
            if resume == Resume::Send {
                self.io.held_reads += 1;
            } else {
                self.io.held_writes += 1;
            }
        }
        // Room for every slot of the group's queues is reserved with the group and a slot is on
        // the list at most once, so this does not allocate; were the room ever short, the list
        // grows rather than leave a held command unanswered for good.
        self.blocked.push_back((i, c.gen, s));
    }

    /// List queue `i` for this turn's doorbells (rung at the end of `poll`) unless it is
    /// `listed` already (its `Conn::unrung` before the caller set it).
    #[inline(always)]
    pub(super) fn list_unrung(&mut self, i: usize, listed: bool) {
        if !listed && self.unrung.push(i as u16).is_err() {
            self.unrung_overflow = true;
        }
    }

    /// Write `wr` on queue `i` (QP `qpn`) without ringing, listing the queue for this turn's one
    /// doorbell unless `listed` already, counted by its operation. False on a device error: the
    /// caller tears the queue down.
    #[inline(always)]
    pub(super) fn post_deferred(&mut self, i: usize, qpn: Qpn, listed: bool, wr: &SendWr) -> bool {
        self.count_post(wr);
        self.list_unrung(i, listed);
        if self.rings.post_send_deferred(qpn, wr).is_err() {
            self.io.post_errors += 1;
            return false;
        }
        true
    }

    /// `post_deferred` for `first`, then `second`, written by one data-path call (a Read's RDMA
    /// WRITE and its response). False on a device error (`first` may be written): the caller
    /// tears the queue down.
    #[inline(always)]
    pub(super) fn post_deferred_pair(&mut self, i: usize, qpn: Qpn, listed: bool, first: &SendWr, second: &SendWr) -> bool {
        self.count_post(first);
        self.count_post(second);
        self.list_unrung(i, listed);
        if self.rings.post_send_deferred_pair(qpn, first, second).is_err() {
            self.io.post_errors += 1;
            return false;
        }
        true
    }

    /// A send WR posted: counted by its operation.
    #[inline(always)]
    fn count_post(&mut self, wr: &SendWr) {
        self.io.posts += 1;
        match wr.op {
            SendOp::RdmaRead { .. } => self.io.rdma_reads += 1,
            SendOp::RdmaWrite { .. } => self.io.rdma_writes += 1,
            SendOp::SendWithInvalidate(_) => {
                self.io.responses += 1;
                self.io.send_invalidate += 1;
            }
            // The target SENDs nothing but responses.
            SendOp::Send | SendOp::SendWithImm(_) => self.io.responses += 1,
            _ => {}
        }
    }
}

/// What a slot on its queue's list of this turn's zero-copy Writes READs: its keyed SGL's
/// host data (`addr`, `len`, `key`). `post_read` lists no other slot (and only one Reading
/// into namespace memory), and nothing changes a listed slot before `answer_queue_writes` (a
/// queue torn down is not answered at all), so both its passes take every listed slot; were
/// one ever not keyed, it would get neither its READ nor a response (before, the answer pass
/// answered every listed slot, with success, whatever the READ pass had skipped).
#[inline(always)]
fn turn_write(slot: &Slot) -> Option<(u64, u32, u32)> {
    match slot.sgl {
        Some(Sgl::Keyed { addr, len, key, .. }) => Some((addr, len, key)),
        _ => None,
    }
}
