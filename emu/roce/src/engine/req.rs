//! Requester (rxe_req.c): turns send WQEs into request packets: PSN assignment, PMTU
//! segmentation, the 128-PSN window, READ credit (`max_rd_atomic`), fenced WQEs held until every
//! earlier READ is complete, AckReq placement and retransmission from the point the completer
//! rewound to.

use super::comp::requester_error;
use super::dma::gather;
use super::qp::{pick, rc_spec, Ctx, Qp, TxOut};
use super::{ack_timeout_ns, MAX_PKT_PER_ACK, MAX_UNACKED_PSNS};
use crate::types::*;
use crate::wire::{self, opcode as opc, Reth, Seg};

fn outstanding_reads(qp: &Qp) -> usize {
    qp.sq.iter().filter(|e| e.is_read() && !e.done && e.first_psn.is_some()).count()
}

/// Whether a READ before SQ entry `idx` is not complete yet (its response not all placed):
/// what a fenced WQE waits for (IBA fence; rxe holds such a WQE the same way). Entries leave
/// the SQ head in order once done, so this is a scan of what is in flight only.
fn read_before_incomplete(qp: &Qp, idx: usize) -> bool {
    qp.sq.iter().take(idx).any(|e| e.is_read() && !e.done)
}

pub(super) fn transmit(qp: &mut Qp, ctx: &mut Ctx<'_>, tx: &mut TxOut<'_>) -> usize {
    let mut sent = 0;
    let pmtu = u64::from(qp.attrs.pmtu);
    while tx.budget > 0 && qp.state == QpState::Rts {
        if qp.rnr_until.is_some() || qp.sq_next >= qp.sq.len() {
            break;
        }
        let idx = qp.sq_next;
        if qp.sq[idx].first_psn.is_none() {
            if qp.sq[idx].wr.fence && read_before_incomplete(qp, idx) {
                // Begun once the READ's last response is placed (the completer calls back in).
                ctx.c.fence_waits += 1;
                break;
            }
            if qp.sq[idx].is_read() && outstanding_reads(qp) >= usize::from(qp.attrs.max_rd_atomic.max(1)) {
                break;
            }
            // Window on the PSN this WQE would start at.
            if wire::psn_diff(qp.next_psn, qp.una_psn) >= MAX_UNACKED_PSNS {
                break;
            }
            let n = qp.sq[idx].npkts;
            qp.sq[idx].first_psn = Some(qp.next_psn);
            qp.next_psn = wire::psn_add(qp.next_psn, n);
        }
        let e = &qp.sq[idx];
        let first = e.first_psn.expect("assigned above");
        let is_retx;
        if e.is_read() {
            let SendOp::RdmaRead { remote_va, rkey } = e.wr.op else { unreachable!() };
            let psn = wire::psn_add(first, e.rcvd);
            if wire::psn_diff(psn, qp.una_psn) >= MAX_UNACKED_PSNS {
                break;
            }
            is_retx = wire::psn_diff(psn, qp.sent_end) < 0;
            let end = wire::psn_add(first, e.npkts);
            let off = u64::from(e.rcvd) * pmtu;
            let mut spec = rc_spec(qp, opc::RC_READ_REQUEST, psn);
            spec.ack_req = true;
            spec.reth = Some(Reth { va: remote_va.wrapping_add(off).into(), rkey: rkey.0.into(), len: ((e.len - off.min(e.len)) as u32).into() });
            tx.emit(ctx, &mut spec, &[]);
            if wire::psn_diff(end, qp.sent_end) > 0 {
                qp.sent_end = end;
            }
            qp.sq_next += 1;
            qp.sq_pkt = 0;
        } else {
            let i = qp.sq_pkt;
            let psn = wire::psn_add(first, i);
            if wire::psn_diff(psn, qp.una_psn) >= MAX_UNACKED_PSNS {
                break;
            }
            is_retx = wire::psn_diff(psn, qp.sent_end) < 0;
            let n = e.npkts;
            let off = u64::from(i) * pmtu;
            let plen = (e.len - off).min(pmtu) as usize;
            let seg = match (n, i) {
                (1, _) => Seg::Only,
                (_, 0) => Seg::First,
                (n, i) if i + 1 == n => Seg::Last,
                _ => Seg::Middle,
            };
            let last = matches!(seg, Seg::Last | Seg::Only);
            let (opcode, reth, imm, ieth) = match e.wr.op {
                SendOp::Send => (pick(seg, [opc::RC_SEND_FIRST, opc::RC_SEND_MIDDLE, opc::RC_SEND_LAST, opc::RC_SEND_ONLY]), None, None, None),
                SendOp::SendWithImm(v) => (pick(seg, [opc::RC_SEND_FIRST, opc::RC_SEND_MIDDLE, opc::RC_SEND_LAST_IMM, opc::RC_SEND_ONLY_IMM]), None, last.then_some(v), None),
                SendOp::SendWithInvalidate(r) => (pick(seg, [opc::RC_SEND_FIRST, opc::RC_SEND_MIDDLE, opc::RC_SEND_LAST_INV, opc::RC_SEND_ONLY_INV]), None, None, last.then_some(r.0)),
                SendOp::RdmaWrite { remote_va, rkey } => (
                    pick(seg, [opc::RC_WRITE_FIRST, opc::RC_WRITE_MIDDLE, opc::RC_WRITE_LAST, opc::RC_WRITE_ONLY]),
                    Some((remote_va, rkey)),
                    None,
                    None,
                ),
                SendOp::RdmaWriteWithImm { remote_va, rkey, imm } => (
                    pick(seg, [opc::RC_WRITE_FIRST, opc::RC_WRITE_MIDDLE, opc::RC_WRITE_LAST_IMM, opc::RC_WRITE_ONLY_IMM]),
                    Some((remote_va, rkey)),
                    last.then_some(imm),
                    None,
                ),
                SendOp::RdmaRead { .. } => unreachable!(),
            };
            let mut spec = rc_spec(qp, opcode, psn);
            if matches!(seg, Seg::First | Seg::Only) {
                if let Some((va, rkey)) = reth {
                    spec.reth = Some(Reth { va: va.into(), rkey: rkey.0.into(), len: (e.len as u32).into() });
                }
            }
            spec.imm = imm;
            spec.ieth = ieth;
            spec.solicited = last && e.wr.solicited;
            spec.ack_req = last || (i + 1) % MAX_PKT_PER_ACK == 0;
            let mut payload = std::mem::take(ctx.scratch);
            let r = gather(ctx, qp.qpn, &e.wr.data, off, plen, &mut payload);
            if r.is_err() {
                *ctx.scratch = payload;
                requester_error(qp, ctx, WcStatus::LocalProtection, 0);
                break;
            }
            tx.emit(ctx, &mut spec, &payload);
            *ctx.scratch = payload;
            if wire::psn_diff(wire::psn_add(psn, 1), qp.sent_end) > 0 {
                qp.sent_end = wire::psn_add(psn, 1);
            }
            if i + 1 == n {
                qp.sq_next += 1;
                qp.sq_pkt = 0;
            } else {
                qp.sq_pkt = i + 1;
            }
        }
        if is_retx {
            ctx.c.retransmits += 1;
        }
        ctx.c.req_sent += 1;
        sent += 1;
        if qp.timer.is_none() {
            qp.timer = ack_timeout_ns(qp.attrs.timeout).map(|t| ctx.now + t);
        }
    }
    sent
}
