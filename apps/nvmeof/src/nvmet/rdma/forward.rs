//! Admin-queue and Fabrics commands a poll group forwards to the controller owner, as records on
//! the group's rings (README, "NVMe-oF target poll groups on their own CPUs"): the group puts
//! the command ([`Forwarded`]: queue index, generation and slot, the queue's state, and on a
//! ring of bytes its SQE and the host data it already fetched); the owner executes it from the
//! record alone ([`RdmaTarget::execute_forwarded`], no group value read) and answers
//! ([`Answer`]: status, DW0/DW1, the queue's new state, and on a ring of bytes the
//! controller→host data; an admitted Connect's data buffers staged by queue index); the group
//! carries the answer out ([`TurnShared::take_forward_answers`]).

use alloc::boxed::Box;

use super::gone_queue::{gate_word, word_gate};
use super::handoff::{self, words_for, Consumer, Producer, Record, MAX_WORDS};
use super::*;
use crate::nvmet::CtrlSlot;

/// Forwarded commands a group may have at the owner at once (a command beyond waits on the
/// group's held list and is forwarded again at the end of a turn). The owner answers each when
/// the turn call that forwarded it returns, so one is all a group on the owner's thread uses.
pub(super) const FORWARDS: usize = 4;

/// Host data a forwarded command carries, at most (Connect's 1 KiB, DH-HMAC-CHAP messages, Set
/// Features data): what the core parses of it, as the group's payload buffer had before.
const FORWARD_DATA: usize = 4096;

/// What the owner needs of a queue to execute its command, and gives back after: every
/// [`QueueState`] field but its I/O counts (the group's, [`QueueState::io`]). Five words.
fn queue_words(q: &QueueState) -> [u64; 5] {
    let a = ((q.qid as u64) << 48) | ((q.sqsize as u64) << 32) | ((q.sqhd as u64) << 16) | q.ctrl_slot.0 as u64;
    let flags = (q.cntlid.is_some() as u64) << 16 | (q.sq_flow_disabled as u64) << 17 | (q.enabled as u64) << 18 | (q.port as u64) << 19;
    let b = ((q.peer_qpn as u64) << 32) | flags | q.cntlid.unwrap_or(0) as u64;
    // Bits 40..62 of the gate's word are free.
    let c = gate_word(q.auth) | ((q.subsys as u64) << 40);
    let gid = |k: usize| u64::from_le_bytes(q.peer_gid[8 * k..8 * k + 8].try_into().expect("8 bytes"));
    [a, b, c, gid(0), gid(1)]
}

/// The queue [`queue_words`] put in `w` (I/O counts zero).
fn words_queue(w: &[u64]) -> QueueState {
    let mut peer_gid = [0; 16];
    peer_gid[..8].copy_from_slice(&w[3].to_le_bytes());
    peer_gid[8..].copy_from_slice(&w[4].to_le_bytes());
    QueueState {
        qid: (w[0] >> 48) as u16,
        sqsize: (w[0] >> 32) as u16,
        sqhd: (w[0] >> 16) as u16,
        ctrl_slot: CtrlSlot(w[0] as u16),
        cntlid: (w[1] >> 16 & 1 == 1).then_some(w[1] as u16),
        sq_flow_disabled: w[1] >> 17 & 1 == 1,
        enabled: w[1] >> 18 & 1 == 1,
        port: (w[1] >> 19) as u8,
        peer_qpn: (w[1] >> 32) as u32,
        auth: word_gate(w[2]),
        subsys: (w[2] >> 40) as u16,
        peer_gid,
        io: Default::default(),
    }
}

/// Queue index, generation, slot and a byte count in one word.
fn at_word(conn: u16, gen: u16, slot: u16, len: u16) -> u64 {
    ((conn as u64) << 48) | ((gen as u64) << 32) | ((slot as u64) << 16) | len as u64
}

fn word_at(w: u64) -> (u16, u16, u16, u16) {
    ((w >> 48) as u16, (w >> 32) as u16, (w >> 16) as u16, w as u16)
}

/// A command a group's turn does not execute (every admin-queue command, AERs included, and
/// every Fabrics command), as the owner gets it: eight words on the group's ring to the owner,
/// its SQE and `len` bytes of host data (already fetched) before it on the group's ring of
/// bytes. With it the queue's facts admission needs (`depth`, `full_xfer`, `source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Forwarded {
    pub(super) conn: u16,
    pub(super) gen: u16,
    pub(super) slot: u16,
    /// Bytes of host data after the SQE.
    pub(super) len: u16,
    /// The data length the command's SGL describes, and whether its host data is here (a keyed
    /// SGL not read yet: the owner answers "fetch first").
    pub(super) sgl_len: u32,
    pub(super) fetched: bool,
    /// The queue's depth and per-slot transfer once admitted: a Connect's data buffers.
    pub(super) depth: u16,
    pub(super) full_xfer: u32,
    pub(super) source: rdma::Ipv4,
    pub(super) q: QueueState,
}

impl Record for Forwarded {
    const WORDS: usize = 8;
    fn to_words(self) -> [u64; MAX_WORDS] {
        let q = queue_words(&self.q);
        let facts = ((self.depth as u64) << 48) | ((self.fetched as u64) << 32) | self.sgl_len as u64;
        let admit = ((u32::from_le_bytes(self.source) as u64) << 32) | self.full_xfer as u64;
        [at_word(self.conn, self.gen, self.slot, self.len), facts, admit, q[0], q[1], q[2], q[3], q[4]]
    }
    fn from_words(w: &[u64; MAX_WORDS]) -> Self {
        let (conn, gen, slot, len) = word_at(w[0]);
        Forwarded {
            conn,
            gen,
            slot,
            len,
            sgl_len: w[1] as u32,
            fetched: w[1] >> 32 & 1 == 1,
            depth: (w[1] >> 48) as u16,
            full_xfer: w[2] as u32,
            source: ((w[2] >> 32) as u32).to_le_bytes(),
            q: words_queue(&w[3..8]),
        }
    }
}

/// What the group does with a forwarded command's slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reply {
    /// Respond; `Answer::len` bytes of controller→host data on the ring of bytes.
    Respond { status: Status, dw0: u32, dw1: u32 },
    /// Its host data is still at the host: RDMA READ it, then forward the command again.
    Fetch,
    /// An AER: its slot goes back; the owner completes it later ([`super::group::AerDone`]).
    Hold,
}

/// The owner's answer to a [`Forwarded`] command: eight words on the ring back to the group,
/// `len` bytes of controller→host data before it on the ring of bytes; `admitted`: the queue's
/// data buffers are staged at its index ([`GroupForwarding::admitted`]); `connect`: the command
/// was a Connect (which starts the queue's SQ head).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Answer {
    pub(super) conn: u16,
    pub(super) gen: u16,
    pub(super) slot: u16,
    pub(super) len: u16,
    pub(super) reply: Reply,
    pub(super) admitted: bool,
    pub(super) connect: bool,
    /// The queue's state after the command (a Connect, an authentication step, ...).
    pub(super) q: QueueState,
}

impl Record for Answer {
    const WORDS: usize = 8;
    fn to_words(self) -> [u64; MAX_WORDS] {
        let q = queue_words(&self.q);
        let (kind, st, dws) = match self.reply {
            Reply::Respond { status, dw0, dw1 } => (0, ((status.sct as u64) << 8) | status.sc as u64 | (status.dnr as u64) << 16, ((dw1 as u64) << 32) | dw0 as u64),
            Reply::Fetch => (1, 0, 0),
            Reply::Hold => (2, 0, 0),
        };
        let reply = (kind << 62) | ((self.admitted as u64) << 61) | ((self.connect as u64) << 60) | st;
        [at_word(self.conn, self.gen, self.slot, self.len), reply, dws, q[0], q[1], q[2], q[3], q[4]]
    }
    fn from_words(w: &[u64; MAX_WORDS]) -> Self {
        let (conn, gen, slot, len) = word_at(w[0]);
        let reply = match w[1] >> 62 {
            0 => Reply::Respond { status: Status { sct: (w[1] >> 8) as u8, sc: w[1] as u8, dnr: w[1] >> 16 & 1 == 1 }, dw0: w[2] as u32, dw1: (w[2] >> 32) as u32 },
            1 => Reply::Fetch,
            _ => Reply::Hold,
        };
        Answer { conn, gen, slot, len, reply, admitted: w[1] >> 61 & 1 == 1, connect: w[1] >> 60 & 1 == 1, q: words_queue(&w[3..8]) }
    }
}

/// A group's ends of its forwarding rings, and what it keeps for them.
pub(super) struct GroupForwarding<V: GroupVerbs> {
    tx: Producer<Forwarded>,
    bytes_tx: Producer<u64>,
    rx: Consumer<Answer>,
    bytes_rx: Consumer<u64>,
    /// Commands forwarded and not answered yet (at most [`FORWARDS`]: the rings' room).
    pub(super) outstanding: usize,
    /// The data buffers (and their key) the owner made for a Connect it admitted, by queue
    /// index, until the group takes them with the answer (room for every index).
    pub(super) admitted: Vec<Option<(V::Buf, Lkey)>>,
    /// One forwarded command's bytes either way: its SQE and host data out, the answer's
    /// controller→host data in.
    buf: Box<[u8]>,
}

/// The owner's ends of a group's forwarding rings, and its buffer for a command's bytes.
pub(super) struct OwnerForwarding {
    rx: Consumer<Forwarded>,
    bytes_rx: Consumer<u64>,
    tx: Producer<Answer>,
    bytes_tx: Producer<u64>,
    buf: Box<[u8]>,
}

impl OwnerForwarding {
    /// Nothing forwarded waits.
    pub(super) fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }
}

/// A zeroed buffer of `n` bytes, `Err` if the memory is not there.
fn zeroed(n: usize) -> Result<Box<[u8]>, ()> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| ())?;
    v.resize(n, 0u8);
    Ok(v.into_boxed_slice())
}

/// The forwarding rings of a group of up to `max_queues` queues, room for [`FORWARDS`]
/// commands and their bytes each way reserved now.
pub(super) fn forwarding<V: GroupVerbs>(max_queues: usize) -> Result<(GroupForwarding<V>, OwnerForwarding), ()> {
    let (tx, rx) = handoff::ring(FORWARDS)?;
    let (bytes_tx, bytes_rx) = handoff::ring(FORWARDS * words_for(Sqe::SIZE + FORWARD_DATA))?;
    let (atx, arx) = handoff::ring(FORWARDS)?;
    let (abytes_tx, abytes_rx) = handoff::ring(FORWARDS * words_for(ADMIN_MAX_XFER))?;
    let mut admitted = Vec::new();
    admitted.try_reserve_exact(max_queues).map_err(|_| ())?;
    admitted.resize_with(max_queues, || None);
    let group = GroupForwarding { tx, bytes_tx, rx: arx, bytes_rx: abytes_rx, outstanding: 0, admitted, buf: zeroed(ADMIN_MAX_XFER.max(Sqe::SIZE + FORWARD_DATA))? };
    let owner = OwnerForwarding { rx, bytes_rx, tx: atx, bytes_tx: abytes_tx, buf: zeroed(Sqe::SIZE + FORWARD_DATA)? };
    Ok((group, owner))
}

impl<V: GroupVerbs, B: BlockDevice> PollGroup<V, B> {
    /// Slot `s` of queue `ci` holds a command the owner executes: put it on the ring to the
    /// owner with its SQE, its host data already here (copied, as the core parses it) and the
    /// queue's state. The slot waits (`Executing`: a closing queue is freed only after the
    /// answer) until the answer comes. With [`FORWARDS`] commands at the owner it is held and
    /// forwarded again at the end of a turn.
    #[cold]
    #[inline(never)]
    pub(super) fn forward(&mut self, ci: QueueAt, s: u16) {
        let c = self.conns[ci.i].as_mut().expect("live");
        if self.fwd.outstanding >= FORWARDS {
            let slot = &mut c.slots[s as usize];
            slot.state = SlotState::Blocked;
            slot.resume = Resume::Execute;
            // Room for every slot of the group's queues, reserved with the group.
            self.blocked.push_back((ci.i, c.gen, s));
            return;
        }
        let slot = &mut c.slots[s as usize];
        let sgl = slot.sgl.unwrap_or(Sgl::Inline { offset: 0, len: 0 });
        let fetched = slot.fetched || !matches!(sgl, Sgl::Keyed { len, .. } if len > 0);
        let sqe = slot.sqe;
        slot.state = SlotState::Executing;
        let capsule_at = slot.rbuf as usize * self.buf_len;
        let buf = &mut self.fwd.buf;
        buf[..Sqe::SIZE].copy_from_slice(sqe.as_bytes());
        let mut len = 0;
        if fetched && sqe.opcode != io_op::WRITE && sgl.len() > 0 && host_to_ctrl(&sqe) {
            len = core::cmp::min(sgl.len() as usize, FORWARD_DATA);
            let data = &mut buf[Sqe::SIZE..Sqe::SIZE + len];
            match sgl {
                Sgl::Inline { offset, .. } => self.recv.read(capsule_at + Sqe::SIZE + offset as usize, data),
                Sgl::Keyed { .. } => c.data.read(c.data_off(s), data),
            }
            self.io.admin_copy_bytes += len as u64;
        }
        if matches!(sgl, Sgl::Inline { len, .. } if len > 0) {
            self.io.inline_writes += 1;
        }
        let m = Forwarded { conn: ci.i as u16, gen: c.gen, slot: s, len: len as u16, sgl_len: sgl.len(), fetched, depth: c.depth, full_xfer: c.full_xfer as u32, source: c.source, q: c.q };
        // Room for `FORWARDS` commands and their bytes, reserved with the group.
        let put = self.fwd.bytes_tx.push_bytes(&buf[..Sqe::SIZE + len]).is_ok() && self.fwd.tx.push(m).is_ok();
        debug_assert!(put, "forwarding rings full");
        self.fwd.outstanding += 1;
        self.owner_due = true;
    }
}

impl TurnShared {
    /// Group `g`'s (number `gi`) look at the owner's answers to its forwarded commands: each
    /// carried out on its slot as the core's answer is (`on_action`: respond, its data RDMA
    /// WRITTEN first; fetch the host data; an AER's slot back), the queue's state as the owner
    /// left it (its I/O counts and, but after a Connect, its SQ head are the group's own), an
    /// admitted Connect's data buffers taken in. A queue closed since (its close waits for the
    /// answer) takes the buffers to be freed with it and answers nothing; a controller a
    /// Connect joined it to meanwhile learns it is gone. Returns how many.
    pub(super) fn take_forward_answers<V: GroupVerbs, B: BlockDevice>(&mut self, g: &mut PollGroup<V, B>, gi: usize) -> usize {
        let mut n = 0;
        while let Some(a) = g.fwd.rx.pop() {
            n += 1;
            g.fwd.outstanding = g.fwd.outstanding.saturating_sub(1);
            let len = a.len as usize;
            let got = g.fwd.bytes_rx.pop_bytes(&mut g.fwd.buf[..len]);
            debug_assert!(got, "an answer's bytes come before it");
            let ci = QueueAt { g: gi, i: a.conn as usize };
            let admitted = if a.admitted { g.fwd.admitted.get_mut(ci.i).and_then(Option::take) } else { None };
            let Some(c) = g.conns.get_mut(ci.i).and_then(|c| c.as_mut()).filter(|c| c.gen == a.gen) else {
                // Cannot happen: a queue with a command at the owner stays until its answer.
                debug_assert!(false, "answer for queue {} gone", ci.i);
                continue;
            };
            let s = a.slot;
            let joined = c.q.cntlid.is_none() && a.q.cntlid.is_some();
            c.q = QueueState { io: c.q.io, sqhd: if a.connect { a.q.sqhd } else { c.q.sqhd }, ..a.q };
            if let Some((buf, lkey)) = admitted {
                c.data_dma = DmaSlice::whole(&buf);
                let pre = (core::mem::replace(&mut c.data, buf), core::mem::replace(&mut c.data_lkey, lkey));
                c.pre_data = Some(pre);
                c.stride = c.full_xfer;
                c.xfer = c.full_xfer;
            }
            if c.draining {
                c.slots[s as usize].state = SlotState::Idle;
                if joined {
                    let q = c.q;
                    g.tell_queue_gone(&q);
                }
                g.free_queue(ci);
                continue;
            }
            let action = match a.reply {
                Reply::Respond { status, dw0, dw1 } => {
                    let keyed = matches!(c.slots[s as usize].sgl, Some(Sgl::Keyed { .. }));
                    if status.is_success() && len > 0 && keyed {
                        c.data.write(c.data_off(s), &g.fwd.buf[..len]);
                        g.io.admin_copy_bytes += len as u64;
                        let src = Sge { addr: c.data.paddr() + c.data_off(s) as u64, len: len as u32, lkey: c.data_lkey };
                        if !self.post_write(g, ci, s, src) {
                            continue;
                        }
                    }
                    Action::Respond { status, dw0, dw1, out_len: 0 }
                }
                Reply::Fetch => Action::Fetch(Fetch::Payload),
                Reply::Hold => Action::Hold,
            };
            self.on_action(g, ci, s, action);
        }
        n
    }
}

impl<V: GroupVerbs, B: BlockDevice> RdmaTarget<V, B> {
    /// The owner's look at group `gi`'s ring of forwarded commands: the next one executed from
    /// its record alone (the I/O queues the turns closed handed to the core first, every I/O
    /// queue's counts folded first for an admin command, a Connect admitted with data buffers
    /// the owner makes and stages at the queue's index, the owner's counts of it folded into
    /// the controller), answered on the ring back, and carried out by the group at once (on
    /// one thread: the response leaves when it did before); then a controller the answer's
    /// turn closed loses its queues in the other groups, a reset controller its I/O queues, and
    /// the queues' enabled flags are refreshed. False when none was waiting.
    pub(super) fn execute_forwarded(&mut self, verbs: &mut V, gi: usize, now_ns: u64) -> bool {
        let Some(ends) = self.ends.get_mut(gi) else { return false };
        let Some(f) = ends.fwd.rx.pop() else { return false };
        let n = Sqe::SIZE + f.len as usize;
        let got = ends.fwd.bytes_rx.pop_bytes(&mut ends.fwd.buf[..n]);
        debug_assert!(got, "a command's bytes come before it");
        let sqe = Sqe::read_from_bytes(&ends.fwd.buf[..Sqe::SIZE]).expect("64 bytes");
        // The queues the turns closed are the core's first (a Connect may take one's I/O queue
        // slot, or its controller's ID once that is freed).
        self.take_gone_queues();
        if f.q.qid == 0 {
            self.fold_queues();
        }
        let mut q = f.q;
        let ci = QueueAt { g: gi, i: f.conn as usize };
        // AERs are completed by CID later (their slot is reused at once); others by slot.
        let tag = if sqe.opcode == admin_op::ASYNC_EVENT && q.qid == 0 { block_tag(ci, f.gen, Kind::Aer, sqe.cid.get()) } else { block_tag(ci, f.gen, Kind::Block, f.slot) };
        let data = DataIn { bytes: &self.ends[gi].fwd.buf[Sqe::SIZE..n], buf: DmaSlice::EMPTY, sgl_len: f.sgl_len, tag, fetched: f.fetched };
        let action = self.core.execute(&mut q, &sqe, &data, now_ns);
        let mut admitted = None;
        let connect = sqe.opcode == FABRICS_OPCODE && sqe.fctype() == fctype::CONNECT;
        let (reply, len) = match action {
            Action::Respond { status, dw0, dw1, out_len } => {
                let mut status = status;
                if connect && status.is_success() {
                    // Admitted: now the queue gets its data buffers (refused if there are none).
                    admitted = Self::admit_buffers(verbs, f.depth, f.full_xfer as usize);
                    if admitted.is_none() {
                        self.core.queue_gone(&q);
                        q.cntlid = None;
                        self.core.bound_hit(Bound::Memory, self.now_ns, &Ip(f.source));
                        status = Status::CONNECT_CTRL_BUSY;
                    }
                }
                let len = if status.is_success() { core::cmp::min(out_len, f.sgl_len) as usize } else { 0 };
                (Reply::Respond { status, dw0, dw1 }, len)
            }
            Action::Fetch(Fetch::Payload) => (Reply::Fetch, 0),
            Action::Hold => (Reply::Hold, 0),
            other => {
                // No admin or Fabrics command submits block I/O or a Write.
                debug_assert!(false, "forwarded command answered {other:?}");
                (Reply::Respond { status: Status::INTERNAL, dw0: 0, dw1: 0 }, 0)
            }
        };
        // What executing it counted on an I/O queue goes to its controller now (the group's
        // counts of the queue stay the group's).
        if q.qid != 0 {
            self.core.fold_queue(&mut q);
        }
        let is_admitted = admitted.is_some();
        if let Some(b) = admitted {
            // Staged by index, as a new queue is (`PollGroup::stage`).
            self.groups[gi].fwd.admitted[ci.i] = Some(b);
        }
        let a = Answer { conn: f.conn, gen: f.gen, slot: f.slot, len: len as u16, reply, admitted: is_admitted, connect, q };
        let fwd = &mut self.ends[gi].fwd;
        // Room for `FORWARDS` answers and their bytes: the group forwards no more at once.
        let put = fwd.bytes_tx.push_bytes(&self.core.out()[..len]).is_ok() && fwd.tx.push(a).is_ok();
        debug_assert!(put, "rings back to a group full");
        // The group's turn takes its answer (on a thread of its own: its next turn's look).
        let (sh, g) = self.turn_parts(gi);
        sh.take_forward_answers(g, gi);
        self.close_ctrls_elsewhere(gi);
        if matches!(reply, Reply::Respond { .. }) && sqe.opcode == FABRICS_OPCODE {
            // A Property Set may have reset the controller: drop its I/O queues.
            while let Some(id) = self.core.take_reset() {
                self.reset_io_queues(verbs, id);
            }
        }
        // A Property Set may have reset or shut the controller down: its I/O queues stop
        // executing I/O (those a reset did not close: a full reset list, commands at the store).
        self.refresh_enabled();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvmet::auth::Gate;

    #[test]
    fn forwarded_commands_and_answers_travel_whole() {
        let q = QueueState {
            qid: 0xFFFF,
            cntlid: Some(0xFFEF),
            sqsize: 127,
            sqhd: 0xFFFF,
            sq_flow_disabled: true,
            peer_gid: core::array::from_fn(|k| k as u8 * 17),
            peer_qpn: 0xFF_FFFF,
            auth: Gate::Pending { slot: 0xFFFF, policy: 7, steps: 255 },
            ctrl_slot: CtrlSlot(4095),
            enabled: true,
            subsys: 0xFFFF,
            io: Default::default(),
            port: 255,
        };
        for q in [q, QueueState::new(3), QueueState { auth: Gate::Failed, cntlid: Some(0), ..q }] {
            let f = Forwarded { conn: 4095, gen: 0xFFFF, slot: 0xFFFF, len: 4096, sgl_len: u32::MAX, fetched: true, depth: 0xFFFF, full_xfer: u32::MAX, source: [10, 0, 0, 255], q };
            assert_eq!(Forwarded::from_words(&f.to_words()), f);
            for reply in [Reply::Respond { status: Status::CONNECT_CTRL_BUSY, dw0: u32::MAX, dw1: 1 }, Reply::Respond { status: Status::INTERNAL, dw0: 0, dw1: u32::MAX }, Reply::Fetch, Reply::Hold] {
                for (admitted, connect) in [(true, false), (false, true)] {
                    let a = Answer { conn: 1, gen: 2, slot: 3, len: 8192, reply, admitted, connect, q };
                    assert_eq!(Answer::from_words(&a.to_words()), a);
                }
            }
        }
    }
}
