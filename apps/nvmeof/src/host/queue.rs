//! One queue of the initiator (admin or I/O): its QP and CQ, capsule, response and data
//! buffers, command slots with generation-checked command IDs, per-I/O keys, and the posting and
//! completion mechanics every command goes through, on the data path the queue's work goes
//! through: the device's for the admin queue, an I/O queue's own poll group
//! ([`rdma::GroupVerbs`]) for an I/O queue, so its per-I/O work never needs the device object.

use super::*;

pub(super) const KIND_SEND: u64 = 1;
pub(super) const KIND_RECV: u64 = 2;
/// A per-I/O registration (unsignaled: only an error completes it).
pub(super) const KIND_REG: u64 = 3;
/// A local invalidation of a slot's key; the slot completes with it.
pub(super) const KIND_LINV: u64 = 4;
/// Send-queue room one command may need, in plain requests: registration (up to 3 on mlx5, see
/// `Control::create_rc_qp`), capsule (1), local invalidation (up to 2).
pub(super) const WRS_PER_CMD: u32 = 6;

#[derive(Clone, Copy, Default)]
pub(super) struct HSlot {
    pub(super) busy: bool,
    /// Command ID of the command in flight (slot + generation).
    pub(super) cid: u16,
    /// Generation of the last command sent from this slot.
    pub(super) gen: u16,
    pub(super) send_done: bool,
    pub(super) got_rsp: bool,
    pub(super) cqe_status: u16,
    pub(super) dw0: u32,
    pub(super) dw1: u32,
    pub(super) t_submit: u64,
    /// The per-I/O key registered for this command, live until it is invalidated.
    pub(super) inv_key: Option<u32>,
    /// The target invalidated it (SEND WITH INVALIDATE).
    pub(super) invalidated: bool,
    /// A local invalidation is posted; the command completes with it.
    pub(super) local_inv: bool,
}

pub(super) struct HQueue<V: GroupVerbs> {
    pub(super) qid: u16,
    pub(super) qpn: Qpn,
    pub(super) cq: Cqn,
    /// Where the response buffers are posted: the QP's own receive queue (`None`: the admin
    /// queue) or the SRQ of the I/O queue's group, which holds this queue's buffers alone.
    pub(super) srq: Option<Srqn>,
    pub(super) cm: u32,
    pub(super) depth: u16,
    pub(super) capsule: usize,
    pub(super) xfer: usize,
    pub(super) cmd: V::Buf,
    pub(super) cmd_lkey: Lkey,
    pub(super) rsp: V::Buf,
    pub(super) rsp_lkey: Lkey,
    pub(super) data: V::Buf,
    /// Per slot: the fast-registration key in its latest variant (per-I/O keys), or the
    /// long-lived key over the slot's buffer.
    pub(super) data_keys: Vec<Rkey>,
    pub(super) per_io: bool,
    pub(super) slots: Vec<HSlot>,
    pub(super) free: Vec<u16>,
    pub(super) codec: CidCodec,
    pub(super) failed: bool,
    /// The first target value that failed this queue.
    pub(super) fault: Option<TargetFault>,
}

pub(super) fn wrid(kind: u64, idx: u16) -> u64 {
    (kind << 32) | idx as u64
}

/// Receive buffers of a queue of `depth` commands (a response per command, and room for a
/// few the target may send unasked).
pub(super) fn recv_count(depth: u16) -> u16 {
    depth + 4
}

/// CQ entries a queue of `depth` commands needs: a capsule, a registration and a local
/// invalidation per command, and every receive.
pub(super) fn cq_entries(depth: u16) -> u32 {
    3 * depth as u32 + recv_count(depth) as u32 + 8
}

/// Send-queue room of a queue of `depth` commands.
pub(super) fn sq_room(depth: u16) -> u32 {
    WRS_PER_CMD * depth as u32 + 2
}

impl<V: GroupVerbs> HQueue<V> {
    /// The admin queue: a CQ and a QP of the device, driven through the device.
    pub(super) fn create(verbs: &mut V, qid: u16, depth: u16, capsule: usize, xfer: usize, per_io: bool) -> Result<Self, Error<V::Error>> {
        let nrecv = recv_count(depth);
        let cq = verbs.create_cq(cq_entries(depth)).map_err(Error::Verbs)?;
        let qpn = match verbs.create_rc_qp(cq, cq, sq_room(depth), nrecv as u32) {
            Ok(qpn) => qpn,
            Err(e) => {
                let _ = verbs.destroy_cq(cq);
                return Err(Error::Verbs(e));
            }
        };
        let mut q = match Self::with_qp(verbs, qid, qpn, cq, None, depth, capsule, xfer, per_io) {
            Ok(q) => q,
            Err(e) => {
                let _ = verbs.destroy_qp(qpn);
                let _ = verbs.destroy_cq(cq);
                return Err(e);
            }
        };
        for i in 0..nrecv {
            if let Err(e) = q.post_recv(verbs, i) {
                q.destroy(verbs);
                return Err(e);
            }
        }
        Ok(q)
    }

    /// The queue's buffers and keys around QP `qpn` (its receives not posted yet). On a failure
    /// the keys registered so far are deregistered (the buffers free themselves when dropped);
    /// the QP and CQ stay the caller's.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn with_qp(verbs: &mut V, qid: u16, qpn: Qpn, cq: Cqn, srq: Option<Srqn>, depth: u16, capsule: usize, xfer: usize, per_io: bool) -> Result<Self, Error<V::Error>> {
        let mut keys = Vec::with_capacity(depth as usize + 2);
        let q = Self::build(verbs, qid, qpn, cq, srq, depth, capsule, xfer, per_io, &mut keys);
        if q.is_err() {
            for k in keys {
                let _ = verbs.dereg_mr(Lkey(k));
            }
        }
        q
    }

    /// [`HQueue::with_qp`]'s work, listing every key it registers in `keys` as it goes.
    #[allow(clippy::too_many_arguments)]
    fn build(verbs: &mut V, qid: u16, qpn: Qpn, cq: Cqn, srq: Option<Srqn>, depth: u16, capsule: usize, xfer: usize, per_io: bool, keys: &mut Vec<u32>) -> Result<Self, Error<V::Error>> {
        let nrecv = recv_count(depth);
        let local = Access { local_write: true, remote_read: false, remote_write: false };
        let cmd = verbs.alloc_buf(depth as usize * capsule).map_err(Error::Verbs)?;
        let (cmd_lkey, _) = verbs.reg_mr(cmd.paddr(), cmd.len() as u64, local).map_err(Error::Verbs)?;
        keys.push(cmd_lkey.0);
        let rsp = verbs.alloc_buf(nrecv as usize * Cqe::SIZE).map_err(Error::Verbs)?;
        let (rsp_lkey, _) = verbs.reg_mr(rsp.paddr(), rsp.len() as u64, local).map_err(Error::Verbs)?;
        keys.push(rsp_lkey.0);
        let data = verbs.alloc_buf(depth as usize * xfer).map_err(Error::Verbs)?;
        let mut data_keys = Vec::with_capacity(depth as usize);
        let remote = Access { local_write: true, remote_read: true, remote_write: true };
        for s in 0..depth as usize {
            let key = if per_io {
                // Grants nothing until a command registers it.
                verbs.alloc_fast_mr(xfer as u64)
            } else {
                verbs.reg_mr(data.paddr() + (s * xfer) as u64, xfer as u64, remote).map(|k| k.1)
            };
            let key = key.map_err(Error::Verbs)?;
            keys.push(key.0);
            data_keys.push(key);
        }
        Ok(HQueue {
            qid,
            qpn,
            cq,
            srq,
            cm: 0,
            depth,
            capsule,
            xfer,
            cmd,
            cmd_lkey,
            rsp,
            rsp_lkey,
            data,
            data_keys,
            per_io,
            slots: alloc::vec![HSlot::default(); depth as usize],
            free: (0..depth).rev().collect(),
            codec: CidCodec::new(depth),
            failed: false,
            fault: None,
        })
    }

    pub(super) fn post_recv<D: DataPath<Error = V::Error>>(&mut self, dp: &mut D, i: u16) -> Result<(), Error<V::Error>> {
        let wr = RecvWr {
            wr_id: wrid(KIND_RECV, i),
            sge: Sge { addr: self.rsp.paddr() + (i as usize * Cqe::SIZE) as u64, len: Cqe::SIZE as u32, lkey: self.rsp_lkey },
        };
        match self.srq {
            None => dp.post_recv(self.qpn, &wr),
            Some(srq) => dp.post_srq_recv(srq, &wr),
        }
        .map_err(Error::Verbs)
    }

    /// Release the admin queue (QP, CQ, buffers' keys).
    pub(super) fn destroy(self, verbs: &mut V) {
        let _ = verbs.qp_to_error(self.qpn);
        let _ = verbs.destroy_qp(self.qpn);
        let _ = verbs.destroy_cq(self.cq);
        self.release_keys(verbs);
    }

    pub(super) fn release_keys(&self, verbs: &mut V) {
        let _ = verbs.dereg_mr(self.cmd_lkey);
        let _ = verbs.dereg_mr(self.rsp_lkey);
        for k in &self.data_keys {
            let _ = verbs.dereg_mr(Lkey(k.0));
        }
    }

    /// Send `sqe` from slot `s` with `inline` bytes of in-capsule data already placed; the
    /// command ID is the slot's next generation.
    pub(super) fn send<D: DataPath<Error = V::Error>>(&mut self, dp: &mut D, s: u16, sqe: &Sqe, inline: usize, now: u64) -> Result<(), Error<V::Error>> {
        let off = s as usize * self.capsule;
        let slot = &mut self.slots[s as usize];
        let gen = slot.gen.wrapping_add(1);
        let cid = self.codec.encode(s, gen);
        // keyed() registered this command's key just before (if it has data).
        let reg = slot.inv_key.take();
        *slot = HSlot { busy: true, cid, gen, t_submit: now, inv_key: reg, ..Default::default() };
        let mut sqe = *sqe;
        sqe.cid = U16::new(cid);
        self.cmd.write(off, sqe.as_bytes());
        let wr = SendWr {
            wr_id: wrid(KIND_SEND, s),
            op: SendOp::Send,
            sge: Sge { addr: self.cmd.paddr() + off as u64, len: (64 + inline) as u32, lkey: self.cmd_lkey },
            signaled: true,
            fence: false,
            ud: None,
        };
        dp.post_send(self.qpn, &wr).map_err(Error::Verbs)
    }

    /// Drain up to `max` completions; finished slots (at most one per completion) are
    /// reported through `f(slot)`, so a caller with room for `max` loses none.
    pub(super) fn poll<D: DataPath<Error = V::Error>>(&mut self, dp: &mut D, wc: &mut [Completion], max: usize, mut f: impl FnMut(&mut Self, u16)) -> Result<(), Error<V::Error>> {
        let max = max.min(wc.len());
        let n = dp.poll_cq(self.cq, &mut wc[..max]);
        for c in &wc[..n] {
            let kind = c.wr_id >> 32;
            let idx = c.wr_id as u16;
            if c.status != WcStatus::Success {
                self.failed = true;
                continue;
            }
            match kind {
                KIND_SEND if idx < self.depth => {
                    let s = &mut self.slots[idx as usize];
                    s.send_done = true;
                    if s.busy && s.got_rsp && self.key_released(dp, idx)? {
                        f(self, idx);
                    }
                }
                KIND_LINV if idx < self.depth && self.slots[idx as usize].local_inv => {
                    self.slots[idx as usize].local_inv = false;
                    if self.slots[idx as usize].busy {
                        f(self, idx);
                    }
                }
                KIND_RECV if c.opcode == WcOpcode::Recv || c.opcode == WcOpcode::RecvWithImm => {
                    let mut b = [0u8; Cqe::SIZE];
                    self.rsp.read(idx as usize * Cqe::SIZE, &mut b);
                    self.post_recv(dp, idx)?;
                    let cqe = Cqe::read_from_bytes(&b).expect("16 bytes");
                    let Some(cid) = self.check_response(&c, &cqe) else { continue };
                    let s = &mut self.slots[cid as usize];
                    s.got_rsp = true;
                    s.cqe_status = cqe.status.get();
                    s.dw0 = cqe.dw0.get();
                    s.dw1 = cqe.dw1.get();
                    if let Some(k) = c.invalidated_rkey {
                        if s.inv_key != Some(k.0) {
                            // The target invalidated a key this command did not carry: treat
                            // as a transport error (nvme-rdma does the same).
                            self.failed = true;
                            continue;
                        }
                        s.invalidated = true;
                    }
                    if s.send_done && self.key_released(dp, cid)? {
                        f(self, cid);
                    }
                }
                _ => {}
            }
        }
        // Local invalidations posted above: one doorbell for all.
        dp.ring_send(self.qpn).map_err(Error::Verbs)?;
        Ok(())
    }

    /// The slot a response completes, or `None` after failing the queue with the fault: a
    /// response must be a whole CQE, name the command now in flight in its slot (not one
    /// that already finished: late or duplicate), and report an SQ head inside the queue.
    pub(super) fn check_response(&mut self, c: &Completion, cqe: &Cqe) -> Option<u16> {
        if self.failed {
            return None;
        }
        let fault = if (c.byte_len as usize) < Cqe::SIZE {
            TargetFault::ShortResponse(c.byte_len)
        } else {
            let cid = cqe.cid.get();
            let slot = self.codec.slot(cid);
            let sqhd = cqe.sqhd.get();
            match self.slots.get(slot as usize) {
                Some(s) if s.busy && !s.got_rsp && s.cid == cid => {
                    if sqhd < self.depth {
                        return Some(slot);
                    }
                    TargetFault::SqHead { qid: self.qid, sqhd }
                }
                _ => TargetFault::Cid { qid: self.qid, cid },
            }
        };
        self.fail(fault);
        None
    }

    /// Fail the queue because of a target value (the first one is kept).
    pub(super) fn fail(&mut self, fault: TargetFault) {
        if self.fault.is_none() {
            log::warn!("nvmeof: host: queue {} failed: target sent {fault:?}", self.qid);
        }
        self.fault.get_or_insert(fault);
        self.failed = true;
    }

    /// The error a failed queue reports.
    pub(super) fn failure<E>(&self) -> Error<E> {
        match self.fault {
            Some(f) => Error::Target(f),
            None => Error::Transport(WcStatus::RetryExceeded),
        }
    }

    /// Response and capsule are both done: is the command's key gone? If the target did not
    /// invalidate it, post a local invalidation (rung at the end of this poll) and complete the
    /// command when it completes: the buffer goes back to the caller only once no peer can
    /// reach it.
    pub(super) fn key_released<D: DataPath<Error = V::Error>>(&mut self, dp: &mut D, idx: u16) -> Result<bool, Error<V::Error>> {
        let s = &mut self.slots[idx as usize];
        if s.local_inv {
            return Ok(false);
        }
        match s.inv_key {
            Some(k) if !s.invalidated => {
                s.local_inv = true;
                let wr = SendWr { wr_id: wrid(KIND_LINV, idx), op: SendOp::LocalInvalidate(Rkey(k)), sge: Sge::default(), signaled: true, fence: false, ud: None };
                dp.post_send_deferred(self.qpn, &wr).map_err(Error::Verbs)?;
                Ok(false)
            }
            _ => Ok(true),
        }
    }

    /// The keyed SGL for `len` bytes of slot `s`'s buffer. With per-I/O keys this first posts
    /// (unrung: the capsule's doorbell announces both) the registration of exactly that range
    /// with a fresh variant, remote write if the target fills it (`to_host`), remote read if it
    /// reads it; the slot remembers the key until it is invalidated.
    pub(super) fn keyed<D: DataPath<Error = V::Error>>(&mut self, dp: &mut D, s: u16, len: u32, to_host: bool, invalidate: bool) -> Result<SglDesc, Error<V::Error>> {
        let addr = self.data.paddr() + (s as usize * self.xfer) as u64;
        let slot = s as usize;
        if !self.per_io || len == 0 {
            return Ok(Sgl::Keyed { addr, len, key: self.data_keys[slot].0, invalidate: false }.encode());
        }
        let key = self.data_keys[slot].next_variant();
        let access = Access { local_write: true, remote_read: !to_host, remote_write: to_host };
        let wr = SendWr { wr_id: wrid(KIND_REG, s), op: SendOp::RegMr { key, addr, len, access }, sge: Sge::default(), signaled: false, fence: false, ud: None };
        dp.post_send_deferred(self.qpn, &wr).map_err(Error::Verbs)?;
        self.data_keys[slot] = key;
        self.slots[slot].inv_key = Some(key.0);
        Ok(Sgl::Keyed { addr, len, key: key.0, invalidate }.encode())
    }
}

/// The data path a queue's posts and polls go through on the slow path (Fabrics Connect and
/// the admin commands, which pick their queue by QID): the device's for the admin queue, the
/// group's for an I/O queue. The per-I/O path names the group directly.
pub(super) enum QPath<'a, V: GroupVerbs> {
    Device(&'a mut V),
    Group(&'a mut V::Group),
}

impl<V: GroupVerbs> rdma::VerbsError for QPath<'_, V> {
    type Error = V::Error;
}

impl<V: GroupVerbs> DataPath for QPath<'_, V> {
    fn post_send(&mut self, qp: Qpn, wr: &SendWr) -> Result<(), V::Error> {
        match self {
            QPath::Device(d) => d.post_send(qp, wr),
            QPath::Group(g) => g.post_send(qp, wr),
        }
    }
    fn post_send_deferred(&mut self, qp: Qpn, wr: &SendWr) -> Result<(), V::Error> {
        match self {
            QPath::Device(d) => d.post_send_deferred(qp, wr),
            QPath::Group(g) => g.post_send_deferred(qp, wr),
        }
    }
    fn ring_send(&mut self, qp: Qpn) -> Result<(), V::Error> {
        match self {
            QPath::Device(d) => d.ring_send(qp),
            QPath::Group(g) => g.ring_send(qp),
        }
    }
    fn post_recv(&mut self, qp: Qpn, wr: &RecvWr) -> Result<(), V::Error> {
        match self {
            QPath::Device(d) => d.post_recv(qp, wr),
            QPath::Group(g) => g.post_recv(qp, wr),
        }
    }
    fn post_srq_recv(&mut self, srq: Srqn, wr: &RecvWr) -> Result<(), V::Error> {
        match self {
            QPath::Device(d) => d.post_srq_recv(srq, wr),
            QPath::Group(g) => g.post_srq_recv(srq, wr),
        }
    }
    fn poll_cq(&mut self, cq: Cqn, out: &mut [Completion]) -> usize {
        match self {
            QPath::Device(d) => d.poll_cq(cq, out),
            QPath::Group(g) => g.poll_cq(cq, out),
        }
    }
}
