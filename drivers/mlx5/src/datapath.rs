//! Data path: WQEs written straight into SQ/RQ buffers, doorbell record + UAR doorbell, CQ polling.
//!
//! No allocation, lock or log line per operation: everything is fixed-size buffers and counters.

use crate::device::{Cq, Mlx5, Qp, QpKind, QpState, SqSlot, Srq};
use crate::error::Error;
use crate::ifc::{cqe64, wqe_av, wqe_ctrl_seg as ctrl, wqe_data_seg, wqe_inline_seg, wqe_raddr_seg};
use crate::layout::{get, in_be64, set, set_bytes};

use hal::{DmaRegion, Hal, Mmio};
use rdma::{Completion, Qpn, RecvWr, SendOp, SendWr, WcOpcode, WcStatus};

use mlx5_ifc::cqe_synd as synd;
use mlx5_ifc::fence_mode;
use mlx5_ifc::queue::{INLINE_SEG, INVALID_LKEY};
pub use mlx5_ifc::queue::WQEBB;
pub use mlx5_ifc::{cqe_op, wqe_op};
/// fm_ce_se: CQE always (ce = 2).
const CE_ALWAYS: u64 = mlx5_ifc::ctrl_flags::CQ_UPDATE as u64;
/// Largest inline payload `post_send_inline` accepts.
pub const MAX_INLINE: usize = 256;
/// Largest WQE: ctrl 16 + AV 48 + raddr 16 + inline header 4 + payload, rounded to WQEBBs.
const MAX_WQE: usize = (16 + 48 + 16 + 4 + MAX_INLINE).div_ceil(WQEBB) * WQEBB;
// An RC WQE without UMR, address vector or inline payload (ctrl, remote address, one data
// segment) fits the one-WQEBB array `put_small` builds it in.
const _: () = assert!(ctrl::LAYOUT.size + wqe_raddr_seg::LAYOUT.size + wqe_data_seg::LAYOUT.size <= WQEBB);
/// fm_ce_se fence mode by (fenced WR, after a UMR): a verbs fence waits for earlier READs
/// (FENCE); after a UMR a WQE waits for the key change (INITIATOR_SMALL), a fenced one for both
/// (SMALL_AND_FENCE), as Linux mlx5 maps IB_SEND_FENCE. A table: no branch per WQE.
const FENCE_MODES: [u64; 4] = [
    fence_mode::NONE as u64,
    fence_mode::INITIATOR_SMALL as u64,
    fence_mode::FENCE as u64,
    fence_mode::SMALL_AND_FENCE as u64,
];
/// Extended-AV flag in dqp_dct.
const AV_EXTENDED: u32 = mlx5_ifc::queue::EXTENDED_UD_AV;

/// mlx5 CQE error syndrome → verbs status (mlx5dv.h MLX5_CQE_SYNDROME_*).
pub fn wc_status(syndrome: u8) -> WcStatus {
    match syndrome {
        synd::LOCAL_LENGTH_ERR => WcStatus::LocalLength,
        synd::LOCAL_QP_OP_ERR => WcStatus::LocalQpOperation,
        synd::LOCAL_PROT_ERR => WcStatus::LocalProtection,
        synd::WR_FLUSH_ERR => WcStatus::WrFlushed,
        synd::MW_BIND_ERR => WcStatus::MemoryWindowBind,
        synd::BAD_RESP_ERR => WcStatus::BadResponse,
        synd::LOCAL_ACCESS_ERR => WcStatus::LocalAccess,
        synd::REMOTE_INVAL_REQ_ERR => WcStatus::RemoteInvalidRequest,
        synd::REMOTE_ACCESS_ERR => WcStatus::RemoteAccess,
        synd::REMOTE_OP_ERR => WcStatus::RemoteOperation,
        synd::TRANSPORT_RETRY_EXC_ERR => WcStatus::RetryExceeded,
        synd::RNR_RETRY_EXC_ERR => WcStatus::RnrRetryExceeded,
        synd::REMOTE_ABORTED_ERR => WcStatus::RemoteAborted,
        s => WcStatus::Other(s),
    }
}

/// The completion opcode of a send WQE by the opcode its slot recorded.
pub(crate) fn slot_wc_opcode(opcode: u8) -> WcOpcode {
    match opcode {
        wqe_op::RDMA_WRITE | wqe_op::RDMA_WRITE_IMM => WcOpcode::RdmaWrite,
        wqe_op::RDMA_READ => WcOpcode::RdmaRead,
        crate::fastreg::OPCODE_UMR => WcOpcode::RegMr,
        crate::fastreg::SLOT_LOCAL_INVAL => WcOpcode::LocalInvalidate,
        _ => WcOpcode::Send,
    }
}

impl<H: Hal, M: Mmio> Mlx5<H, M> {
    /// Write a send WQE for `wr` into the SQ, update the doorbell record, ring the UAR doorbell
    /// (which also announces any WQE written before by `post_send_deferred`).
    pub fn post_send(&mut self, qpn: Qpn, wr: &SendWr) -> Result<(), Error> {
        let i = self.post_send_inner(qpn, wr, None)?;
        self.ring_sq(i);
        Ok(())
    }

    /// Write a send WQE for `wr` into the SQ without telling the device: no doorbell record
    /// update, no MMIO. [`ring_send`](Self::ring_send) (or the next `post_send`) announces it.
    pub fn post_send_deferred(&mut self, qpn: Qpn, wr: &SendWr) -> Result<(), Error> {
        self.post_send_inner(qpn, wr, None).map(|_| ())
    }

    /// `post_send_deferred` for `first`, then `second` (one room check and one producer update
    /// for two one-WQEBB WQEs). On an error `first` may be written, `second` is not.
    pub fn post_send_deferred_pair(&mut self, qpn: Qpn, first: &SendWr, second: &SendWr) -> Result<(), Error> {
        if self.failed.is_some() {
            return Err(Error::DeviceFailed);
        }
        let i = self.qp_index(qpn)?;
        let (n, r) = write_send_pair(&mut self.qps[i], first, second);
        self.stats.send_wqes += n as u64;
        r
    }

    /// Announce every WQE written by `post_send_deferred` on `qpn`: one doorbell record update
    /// and one 8-byte doorbell write (the newest WQE's ctrl segment) for all of them.
    pub fn ring_send(&mut self, qpn: Qpn) -> Result<(), Error> {
        let i = self.qp_index(qpn)?;
        self.ring_sq(i);
        Ok(())
    }

    fn ring_sq(&mut self, i: usize) {
        let uar = self.uar_base();
        if ring_sq(&mut self.qps[i], &self.bar, uar) {
            self.stats.sq_doorbells += 1;
        }
    }

    /// Like `post_send`, but the payload is `data`, copied into the WQE (inline segment) instead
    /// of gathered by DMA; `wr.sge` is ignored. At most [`MAX_INLINE`] bytes.
    pub fn post_send_inline(&mut self, qpn: Qpn, wr: &SendWr, data: &[u8]) -> Result<(), Error> {
        if data.len() > MAX_INLINE {
            return Err(Error::InvalidArgument("inline payload too large"));
        }
        let i = self.post_send_inner(qpn, wr, Some(data))?;
        self.ring_sq(i);
        Ok(())
    }

    /// Write the WQE into the SQ (not announced); returns the QP's index.
    fn post_send_inner(&mut self, qpn: Qpn, wr: &SendWr, inline: Option<&[u8]>) -> Result<usize, Error> {
        if self.failed.is_some() {
            return Err(Error::DeviceFailed);
        }
        let i = self.qp_index(qpn)?;
        write_send(&mut self.qps[i], wr, inline)?;
        self.stats.send_wqes += 1;
        Ok(i)
    }

    /// Write a receive WQE (one data segment, terminated if the stride has room) and bump DBR[0].
    pub fn post_recv(&mut self, qpn: Qpn, wr: &RecvWr) -> Result<(), Error> {
        self.post_recv_batch(qpn, core::slice::from_ref(wr))
    }

    /// Write receive WQEs for `wrs` in order, then one DBR[0] update (a memory write the
    /// adapter reads; receives need no MMIO doorbell). On an error (queue full) the WQEs
    /// before it are posted.
    pub fn post_recv_batch(&mut self, qpn: Qpn, wrs: &[RecvWr]) -> Result<(), Error> {
        if self.failed.is_some() {
            return Err(Error::DeviceFailed);
        }
        let i = self.qp_index(qpn)?;
        write_recvs(&mut self.qps[i], wrs)
    }

    /// Take up to `out.len()` completions from CQ `cqn`; updates the CQ doorbell record.
    pub fn poll_cq(&mut self, cqn: rdma::Cqn, out: &mut [Completion]) -> Result<usize, Error> {
        let ci_idx = self.cq_index(cqn)?;
        if self.failed.is_some() || self.cqs[ci_idx].broken {
            // The adapter was reset, or writes no more CQEs here: what was outstanding is
            // flushed by the driver.
            return Ok(self.flush_cq(cqn, out));
        }
        let (cqs, qps, srqs, pos) = (&mut self.cqs, &mut self.qps, &mut self.srqs, &self.qp_pos);
        let mut bad = 0u64;
        let n = poll_ring(&mut cqs[ci_idx], out, |e, wc| {
            let qpn = Qpn(get(e, cqe64::qpn) as u32);
            let q = match pos.find(qps, qpn.0, |q| q.qpn.0) {
                Some(i) => &mut qps[i],
                None => {
                    bad += 1;
                    return false;
                }
            };
            let srq = q.srq.and_then(|s| srqs.get_mut(s.0 as usize)).and_then(|s| s.as_mut());
            let reported = decode_cqe(e, q, srq, wc);
            bad += u64::from(!reported);
            reported
        });
        self.stats.bad_cqes += bad;
        Ok(n)
    }
}

// ---------------------------------------------------------------- the rings themselves
//
// One home for the per-I/O mechanics, used by the device's own queues (`Mlx5`: the GSI QP and
// queues created outside a group) and by each [`crate::QueueGroup`]: they work on one QP's or
// CQ's ring state and the doorbell page they are given, nothing else.

// The ring mechanics themselves are `crate::ring`'s ([`crate::ring::WorkRing`], [`crate::ring::CompletionRing`]); what
// follows is what goes into an RC/UD WQE and what a CQE of such a QP means.

/// Ring `q`'s SQ ([`crate::ring::WorkRing::ring_doorbell`]) for the WQEs written since the last doorbell.
/// Nothing (false) if every WQE was announced already.
#[inline]
pub(crate) fn ring_sq<D: DmaRegion, M: Mmio>(q: &mut Qp<D>, bar: &M, uar: usize) -> bool {
    let Some(first8) = q.sq_unrung.take() else { return false };
    q.sq.ring_doorbell(&q.dbr, bar, uar, first8);
    true
}

/// Write the send WQE for `wr` (payload `inline` copied into it when given) into `q`'s SQ, not
/// announced to the device.
///
/// An RC WQE without UMR or inline payload (the data path's SEND, RDMA WRITE and READ) is
/// built in one pass ([`put_small`]). Everything else takes [`build_large`].
pub(crate) fn write_send<D: DmaRegion>(q: &mut Qp<D>, wr: &SendWr, inline: Option<&[u8]>) -> Result<(), Error> {
    if !matches!(q.state, QpState::Rts | QpState::Error) {
        return Err(Error::InvalidArgument("post_send before RTS"));
    }
    if q.kind == QpKind::Gsi || inline.is_some() {
        return build_large(q, wr, inline);
    }
    let Some(op) = small_op(wr) else { return build_large(q, wr, None) };
    if !q.sq.has_room(1) {
        return Err(Error::InvalidArgument("send queue full"));
    }
    let first8 = put_small(q, 0, wr, op, q.next_fence);
    commit_small(q, 1, first8);
    Ok(())
}

/// `write_send` for `first`, then `second` (no inline payload): two one-WQEBB RC WQEs (the
/// data path's, e.g. a Read's RDMA WRITE and its response SEND) with one state and room check
/// and one producer update; otherwise (a UMR, a UD QP, no room for both) one by one. Returns
/// how many were written and, on an error, the error (`first` may be written, `second` not).
pub(crate) fn write_send_pair<D: DmaRegion>(q: &mut Qp<D>, first: &SendWr, second: &SendWr) -> (usize, Result<(), Error>) {
    if q.kind != QpKind::Gsi && matches!(q.state, QpState::Rts | QpState::Error) && q.sq.has_room(2) {
        if let (Some(a), Some(b)) = (small_op(first), small_op(second)) {
            put_small(q, 0, first, a, q.next_fence);
            let first8 = put_small(q, 1, second, b, false);
            commit_small(q, 2, first8);
            return (2, Ok(()));
        }
    }
    if let Err(e) = write_send(q, first, None) {
        return (0, Err(e));
    }
    match write_send(q, second, None) {
        Ok(()) => (2, Ok(())),
        Err(e) => (1, Err(e)),
    }
}

/// A one-WQEBB RC WQE's opcode and immediate, what its completion will report (kept in its
/// slot), and its remote address segment's (address, rkey) if it has one: one look at the
/// operation. `None` for a UMR (registration, local invalidation).
#[inline(always)]
fn small_op(wr: &SendWr) -> Option<(u8, u32, WcOpcode, Option<(u64, u32)>)> {
    Some(match wr.op {
        SendOp::Send => (wqe_op::SEND, 0, WcOpcode::Send, None),
        SendOp::SendWithImm(v) => (wqe_op::SEND_IMM, v, WcOpcode::Send, None),
        SendOp::SendWithInvalidate(rkey) => (wqe_op::SEND_INVAL, rkey.0, WcOpcode::Send, None),
        SendOp::RdmaWrite { remote_addr, rkey } => (wqe_op::RDMA_WRITE, 0, WcOpcode::RdmaWrite, Some((remote_addr, rkey.0))),
        SendOp::RdmaWriteWithImm { remote_addr, rkey, imm } => (wqe_op::RDMA_WRITE_IMM, imm, WcOpcode::RdmaWrite, Some((remote_addr, rkey.0))),
        SendOp::RdmaRead { remote_addr, rkey } => (wqe_op::RDMA_READ, 0, WcOpcode::RdmaRead, Some((remote_addr, rkey.0))),
        SendOp::RegMr { .. } | SendOp::LocalInvalidate(_) => return None,
    })
}

/// Build `wr`'s one-WQEBB RC WQE (`op` from [`small_op`]; fenced behind a UMR if `after_umr`)
/// and put it `at` WQEBBs past the producer counter, its slot recorded; the caller checked the
/// room and advances ([`commit_small`]). Returns the WQE's first 8 bytes.
#[inline(always)]
fn put_small<D: DmaRegion>(q: &mut Qp<D>, at: u16, wr: &SendWr, (opcode, imm, wc, raddr): (u8, u32, WcOpcode, Option<(u64, u32)>), after_umr: bool) -> u64 {
    // Built in a zeroed WQEBB copied into the ring whole, so every byte the adapter reads is
    // this WQE's (no stale byte of an earlier WQE in the slot).
    let mut w = [0u8; WQEBB];
    let mut len = ctrl::LAYOUT.size;
    if let Some((remote_addr, rkey)) = raddr {
        let r = &mut w[len..len + wqe_raddr_seg::LAYOUT.size];
        set(r, wqe_raddr_seg::raddr, remote_addr);
        set(r, wqe_raddr_seg::rkey, rkey as u64);
        len += wqe_raddr_seg::LAYOUT.size;
    }
    if wr.sge.len > 0 {
        let d = &mut w[len..len + wqe_data_seg::LAYOUT.size];
        set(d, wqe_data_seg::byte_count, wr.sge.len as u64);
        set(d, wqe_data_seg::lkey, wr.sge.lkey.0 as u64);
        set(d, wqe_data_seg::addr, wr.sge.addr);
        len += wqe_data_seg::LAYOUT.size;
    }
    let fence = FENCE_MODES[(wr.fence as usize) << 1 | after_umr as usize];
    put_ctrl(q, at, wr, &mut w, len, (opcode, imm, wc), fence)
}

/// Post the `n` one-WQEBB WQEs put since the producer counter (the newest one's first 8 bytes
/// `first8`, for the doorbell).
#[inline(always)]
fn commit_small<D: DmaRegion>(q: &mut Qp<D>, n: u16, first8: u64) {
    q.sq.advance(n);
    q.next_fence = false;
    q.sq_unrung = Some(first8);
}

/// `write_send` for a WQE with UMR, address vector or inline payload (control and GSI traffic),
/// out of line so the data path's one-WQEBB case keeps a small frame.
#[inline(never)]
fn build_large<D: DmaRegion>(q: &mut Qp<D>, wr: &SendWr, inline: Option<&[u8]>) -> Result<(), Error> {
    // The WQE's opcode and immediate, and what its completion will report (kept in its slot).
    let op = match wr.op {
        // A UMR reports a registration or an invalidation (`build_send` asks `fastreg`).
        SendOp::RegMr { key, .. } | SendOp::LocalInvalidate(key) => (crate::fastreg::OPCODE_UMR, key.0, WcOpcode::RegMr),
        SendOp::Send => (wqe_op::SEND, 0, WcOpcode::Send),
        SendOp::SendWithImm(v) => (wqe_op::SEND_IMM, v, WcOpcode::Send),
        SendOp::SendWithInvalidate(rkey) => (wqe_op::SEND_INVAL, rkey.0, WcOpcode::Send),
        SendOp::RdmaWrite { .. } => (wqe_op::RDMA_WRITE, 0, WcOpcode::RdmaWrite),
        SendOp::RdmaWriteWithImm { imm, .. } => (wqe_op::RDMA_WRITE_IMM, imm, WcOpcode::RdmaWrite),
        SendOp::RdmaRead { .. } => (wqe_op::RDMA_READ, 0, WcOpcode::RdmaRead),
    };
    if q.kind == QpKind::Gsi && !matches!(wr.op, SendOp::Send | SendOp::SendWithImm(_)) {
        return Err(Error::InvalidArgument("UD QPs only SEND"));
    }
    let umr = matches!(wr.op, SendOp::RegMr { .. } | SendOp::LocalInvalidate(_));
    build_send(q, wr, inline, &mut [0u8; MAX_WQE], op, umr)
}

/// `write_send` once `wr` is checked: its segments into `w` (zeroed, at least as long as the
/// WQE), then `w`'s WQEBBs into the SQ.
#[inline(always)]
fn build_send<D: DmaRegion, const N: usize>(
    q: &mut Qp<D>,
    wr: &SendWr,
    inline: Option<&[u8]>,
    w: &mut [u8; N],
    (opcode, imm, mut wc): (u8, u32, WcOpcode),
    umr: bool,
) -> Result<(), Error> {
    let mut len = ctrl::LAYOUT.size;
    let mut fence = FENCE_MODES[(wr.fence as usize) << 1 | q.next_fence as usize];
    if umr {
        let (n, _, so) = crate::fastreg::write(w, &wr.op)?;
        len = n;
        wc = slot_wc_opcode(so);
        fence = if wr.fence { fence_mode::SMALL_AND_FENCE as u64 } else { crate::fastreg::FENCE_SMALL };
    }
    if q.kind == QpKind::Gsi {
        let ud = wr.ud.ok_or(Error::InvalidArgument("UD send without address"))?;
        let av = &mut w[len..len + wqe_av::LAYOUT.size];
        set(av, wqe_av::qkey, ud.qkey as u64);
        set(av, wqe_av::dqp_dct, (ud.remote_qpn.0 & 0xff_ffff | AV_EXTENDED) as u64);
        set(av, wqe_av::rlid, ud.udp_sport as u64);
        set_bytes(av, wqe_av::rmac, &ud.dest_mac);
        set(av, wqe_av::hop_limit, 64);
        // grh_gid_fl: GRH present (bit 30), source GID index 0, flow label 0.
        set(av, wqe_av::grh_gid_fl, 1 << 30);
        set_bytes(av, wqe_av::rgid, &rdma::cm_wire::gid_from_ipv4(ud.dest_ip));
        len += wqe_av::LAYOUT.size;
    }
    match wr.op {
        SendOp::RdmaWrite { remote_addr, rkey }
        | SendOp::RdmaWriteWithImm { remote_addr, rkey, .. }
        | SendOp::RdmaRead { remote_addr, rkey } => {
            let r = &mut w[len..len + wqe_raddr_seg::LAYOUT.size];
            set(r, wqe_raddr_seg::raddr, remote_addr);
            set(r, wqe_raddr_seg::rkey, rkey.0 as u64);
            len += wqe_raddr_seg::LAYOUT.size;
        }
        _ => {}
    }
    if umr {
        // No data segment: the UMR segments are the WQE.
    } else if let Some(data) = inline {
        let seg = &mut w[len..len + wqe_inline_seg::LAYOUT.size];
        set(seg, wqe_inline_seg::byte_count, (data.len() as u32 | INLINE_SEG) as u64);
        let at = len + wqe_inline_seg::LAYOUT.size;
        w[at..at + data.len()].copy_from_slice(data);
        len = (at + data.len()).div_ceil(16) * 16;
    } else if wr.sge.len > 0 {
        let d = &mut w[len..len + wqe_data_seg::LAYOUT.size];
        set(d, wqe_data_seg::byte_count, wr.sge.len as u64);
        set(d, wqe_data_seg::lkey, wr.sge.lkey.0 as u64);
        set(d, wqe_data_seg::addr, wr.sge.addr);
        len += wqe_data_seg::LAYOUT.size;
    }
    finish_send(q, wr, w, len, (opcode, imm, wc), fence, umr)
}

/// The last step of a WQE `build_send` built: `w`'s first `len` bytes (segments after the ctrl
/// segment written) get their ctrl segment and go into the SQ in whole WQEBBs.
#[inline(always)]
fn finish_send<D: DmaRegion, const N: usize>(
    q: &mut Qp<D>,
    wr: &SendWr,
    w: &mut [u8; N],
    len: usize,
    op: (u8, u32, WcOpcode),
    fence: u64,
    umr: bool,
) -> Result<(), Error> {
    let nbb = len.div_ceil(WQEBB);
    if !q.sq.has_room(nbb) {
        return Err(Error::InvalidArgument("send queue full"));
    }
    let first8 = put_ctrl(q, 0, wr, w, len, op, fence);
    q.sq.advance(nbb as u16);
    q.next_fence = umr;
    q.sq_unrung = Some(first8);
    Ok(())
}

/// Every send WQE's ctrl segment into `w` (whose first `len` bytes hold the WQE), then `w`'s
/// WQEBBs into the SQ `at` WQEBBs past the producer counter, the slot recording what the
/// completion reports; not advanced. Returns the WQE's first 8 bytes.
#[inline(always)]
fn put_ctrl<D: DmaRegion, const N: usize>(q: &mut Qp<D>, at: u16, wr: &SendWr, w: &mut [u8; N], len: usize, (opcode, imm, wc): (u8, u32, WcOpcode), fence: u64) -> u64 {
    let nbb = len.div_ceil(WQEBB);
    let pi = q.sq.pi().wrapping_add(at);
    // The ctrl segment as its two big-endian words, each one store (opmod and signature 0).
    let w0 = in_be64(ctrl::wqe_index, 0, pi as u64)
        | in_be64(ctrl::opcode, 0, opcode as u64)
        | in_be64(ctrl::qpn, 0, q.qpn.0 as u64)
        | in_be64(ctrl::ds, 0, (len / 16) as u64);
    let w1 = in_be64(ctrl::fm_ce_se, 8, fence | if wr.signaled { CE_ALWAYS } else { 0 }) | in_be64(ctrl::imm, 8, imm as u64);
    w[..8].copy_from_slice(&w0.to_be_bytes());
    w[8..16].copy_from_slice(&w1.to_be_bytes());
    let first8 = q.sq.put_wqe(&q.buf, pi, w, nbb);
    q.sq_slots[q.sq.slot(pi)] = SqSlot { wr_id: wr.wr_id, wqebbs: nbb as u8, opcode: wc };
    first8
}

/// Write receive WQEs for `wrs` into `q`'s own RQ in order, then one DBR[0] update (a memory
/// write the adapter reads; receives need no MMIO doorbell). On an error (queue full) the
/// WQEs before it are posted.
pub(crate) fn write_recvs<D: DmaRegion>(q: &mut Qp<D>, wrs: &[RecvWr]) -> Result<(), Error> {
    if q.srq.is_some() {
        return Err(Error::InvalidArgument("QP takes its receives from an SRQ"));
    }
    let mut r = Ok(());
    for wr in wrs {
        r = write_recv(q, wr);
        if r.is_err() {
            break;
        }
    }
    q.rq.write_record(&q.dbr);
    r
}

fn write_recv<D: DmaRegion>(q: &mut Qp<D>, wr: &RecvWr) -> Result<(), Error> {
    if !q.rq.has_room(1) {
        return Err(Error::InvalidArgument("receive queue full"));
    }
    let stride = q.rq.stride();
    let mut w = [0u8; 32];
    set(&mut w, wqe_data_seg::byte_count, wr.sge.len as u64);
    set(&mut w, wqe_data_seg::lkey, wr.sge.lkey.0 as u64);
    set(&mut w, wqe_data_seg::addr, wr.sge.addr);
    let n = if stride >= 32 {
        set(&mut w[16..], wqe_data_seg::lkey, INVALID_LKEY as u64);
        32
    } else {
        16
    };
    q.rq.put(&q.buf, &w[..n]);
    q.rq_wrid[q.rq.slot(q.rq.pi())] = wr.wr_id;
    q.rq.advance(1);
    Ok(())
}

/// Take CQEs from `c` into `out` ([`crate::ring::CompletionRing::poll`]) until it is empty or `out` full;
/// `decode` writes each CQE's completion into its place in `out` (false: not reported).
#[inline]
pub(crate) fn poll_ring<D: DmaRegion>(c: &mut Cq<D>, out: &mut [Completion], decode: impl FnMut(&[u8; 64], &mut Completion) -> bool) -> usize {
    c.ring.poll(&c.buf, &c.dbr, out, decode)
}

/// Write the completion a CQE of QP `q` reports into `wc`; a receive from an SRQ takes its
/// `wr_id` from `srq` (which gets the WQE back). False: the CQE names no outstanding work (the
/// caller counts it; `wc` holds nothing to report). Reads only what the completion needs: a
/// successful send or plain receive (the data path's CQEs) is written whole in one go; error,
/// immediate and invalidate CQEs add their fields in [`decode_rest`].
#[inline]
pub(crate) fn decode_cqe<D: DmaRegion>(e: &[u8; 64], q: &mut Qp<D>, srq: Option<&mut Srq<D>>, wc: &mut Completion) -> bool {
    let op = get(e, cqe64::opcode) as u8;
    let counter = get(e, cqe64::wqe_counter) as u16;
    let (wr_id, opcode, byte_len, src_qp);
    if matches!(op, cqe_op::REQ | cqe_op::REQ_ERR) {
        // The completed WQE must lie in the outstanding window [ci, pi).
        if !q.sq.outstanding(counter) {
            return false;
        }
        let slot = q.sq_slots[q.sq.slot(counter)];
        q.sq.complete_to(counter.wrapping_add(slot.wqebbs.max(1) as u16));
        (wr_id, opcode, byte_len, src_qp) = (slot.wr_id, slot.opcode, 0, Qpn(0));
    } else if q.srq.is_some() {
        // The WQE came from the QP's SRQ: its wr_id, and the WQE goes back on the list. SRQs
        // serve RC QPs only, whose completions carry no source QP (verbs report it for UD).
        let Some(id) = srq.and_then(|s| s.complete(counter)) else { return false };
        (wr_id, opcode, byte_len, src_qp) = (id, WcOpcode::Recv, get(e, cqe64::byte_cnt) as u32, Qpn(0));
    } else {
        if !q.rq.outstanding(counter) {
            return false;
        }
        let id = q.rq_wrid[q.rq.slot(counter)];
        q.rq.complete_to(counter.wrapping_add(1));
        (wr_id, opcode, byte_len, src_qp) = (id, WcOpcode::Recv, get(e, cqe64::byte_cnt) as u32, Qpn(get(e, cqe64::rqpn) as u32));
    }
    *wc = Completion { wr_id, status: WcStatus::Success, opcode, qpn: q.qpn, byte_len, imm: None, invalidated_rkey: None, src_qp, vendor_err: 0 };
    if op != cqe_op::REQ && op != cqe_op::RESP_SEND {
        decode_rest(e, op, wc);
    }
    true
}

/// What an error, immediate or invalidate CQE adds to the completion [`decode_cqe`] wrote.
#[inline(never)]
fn decode_rest(e: &[u8; 64], op: u8, wc: &mut Completion) {
    match op {
        cqe_op::REQ_ERR | cqe_op::RESP_ERR => {
            wc.status = wc_status(get(e, cqe64::syndrome) as u8);
            wc.vendor_err = get(e, cqe64::vendor_err_synd) as u8;
        }
        cqe_op::RESP_SEND_IMM => {
            wc.opcode = WcOpcode::RecvWithImm;
            wc.imm = Some(get(e, cqe64::imm_inval_pkey) as u32);
        }
        cqe_op::RESP_WR_IMM => {
            wc.opcode = WcOpcode::RecvRdmaWithImm;
            wc.imm = Some(get(e, cqe64::imm_inval_pkey) as u32);
        }
        cqe_op::RESP_SEND_INV => {
            wc.invalidated_rkey = Some(rdma::Rkey(get(e, cqe64::imm_inval_pkey) as u32));
        }
        _ => {}
    }
}
