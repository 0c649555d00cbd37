//! Responder (rxe_resp.c): request packets at the target side of an RC QP: PSN checks,
//! duplicate handling, opcode-sequence / access / length checks, SEND and WRITE placement,
//! READ resources, RNR and error NAKs, and the transmit of ACKs and READ responses.

use super::dma::{check_range, dma_read, dma_write, scatter};
use super::srq::{has_recv, take_recv};
use super::qp::{npkts, pick, push_completion, qp_error, rc_spec, Ctx, InMsg, Qp, ReadRes, RespItem, TxOut};
use super::MAX_MSG_LEN;
use crate::types::*;
use crate::wire::{self, opcode as opc, Aeth, OpKind, RocePacket, Seg};

/// Queue an ACK/NAK, coalescing with a plain ACK at the tail of the response queue.
fn queue_ack(qp: &mut Qp, syndrome: u8, psn: u32) {
    if syndrome == wire::AETH_ACK_UNLIMITED {
        if let Some(RespItem::Ack { syndrome: s, psn: p }) = qp.out.back_mut() {
            if *s == wire::AETH_ACK_UNLIMITED {
                *p = psn;
                return;
            }
        }
    }
    qp.out.push_back(RespItem::Ack { syndrome, psn });
}

/// Class C error at the responder: NAK and move the QP to ERROR once the NAK is out.
fn responder_fatal(qp: &mut Qp, ctx: &mut Ctx<'_>, syndrome: u8, psn: u32, tx_now: &mut Vec<RespItem>) {
    ctx.c.nak_err_sent += 1;
    if syndrome == wire::AETH_NAK_REM_ACCESS {
        qp.ev.resp_remote_access_errors += 1;
    }
    tx_now.push(RespItem::Ack { syndrome, psn });
    qp_error(qp, ctx);
}

pub(super) fn receive(qp: &mut Qp, ctx: &mut Ctx<'_>, pkt: &RocePacket<'_>) {
    let mut fatal: Vec<RespItem> = Vec::new();
    responder_inner(qp, ctx, pkt, &mut fatal);
    if !fatal.is_empty() {
        // The QP is in ERROR now; the NAK still goes out (queued after the flush).
        qp.out.extend(fatal);
    }
}

fn responder_inner(qp: &mut Qp, ctx: &mut Ctx<'_>, pkt: &RocePacket<'_>, fatal: &mut Vec<RespItem>) {
    let psn = pkt.bth.psn();
    let op = pkt.op;
    let d = wire::psn_diff(psn, qp.epsn);
    if d > 0 {
        if !qp.nak_sent {
            qp.nak_sent = true;
            ctx.c.nak_seq_sent += 1;
            queue_ack_nak(qp, wire::AETH_NAK_PSN_SEQ, qp.epsn);
        } else {
            ctx.c.out_of_seq_dropped += 1;
        }
        qp.ev.out_of_sequence += 1;
        return;
    }
    if d < 0 {
        ctx.c.dup_requests += 1;
        qp.ev.duplicate_request += 1;
        duplicate(qp, pkt);
        return;
    }
    qp.nak_sent = false;
    let pmtu = qp.attrs.pmtu as usize;
    // Opcode sequence (rxe check_op_seq).
    let continuing = match (&qp.cur, op.kind) {
        (Some(InMsg::Send { .. }), OpKind::Send) | (Some(InMsg::Write { .. }), OpKind::Write) => true,
        (Some(_), _) => {
            return responder_fatal(qp, ctx, wire::AETH_NAK_INVALID_REQ, psn, fatal);
        }
        (None, _) => false,
    };
    if continuing != matches!(op.seg, Seg::Middle | Seg::Last) {
        return responder_fatal(qp, ctx, wire::AETH_NAK_INVALID_REQ, psn, fatal);
    }
    // Access (rxe check_op_valid) and lengths (check_length).
    let acc = qp.attrs.access;
    let bad_access = match op.kind {
        OpKind::Write => !acc.remote_write,
        OpKind::ReadRequest => !acc.remote_read || qp.attrs.max_dest_rd_atomic == 0,
        OpKind::Atomic => true, // atomics are not modelled
        _ => false,
    };
    if bad_access {
        return responder_fatal(qp, ctx, wire::AETH_NAK_INVALID_REQ, psn, fatal);
    }
    let plen = pkt.payload.len();
    let len_ok = match op.seg {
        Seg::First | Seg::Middle => plen == pmtu,
        Seg::Last => plen >= 1 && plen <= pmtu,
        Seg::Only => plen <= pmtu,
    };
    if op.payload && !len_ok {
        return responder_fatal(qp, ctx, wire::AETH_NAK_INVALID_REQ, psn, fatal);
    }
    match op.kind {
        OpKind::Send => {
            if op.is_first() {
                let Some(wr) = take_recv(qp, ctx) else {
                    // Class B: RNR NAK, drop until the retry (one NAK only).
                    ctx.c.rnr_nak_sent += 1;
                    qp.ev.out_of_buffer += 1;
                    qp.nak_sent = true;
                    queue_ack_nak(qp, wire::AETH_TYPE_RNR | qp.attrs.min_rnr_timer, psn);
                    return;
                };
                qp.cur = Some(InMsg::Send { wr, offset: 0 });
            }
            let Some(InMsg::Send { wr, offset }) = qp.cur.take() else { return };
            let cap: u64 = wr.sges.iter().map(|s| u64::from(s.len)).sum();
            if offset + plen as u64 > cap {
                push_completion(ctx, Completion { qpn: qp.qpn, queue: WorkQueue::Recv, wr_id: wr.wr_id, status: WcStatus::LocalLength, opcode: WcOpcode::Recv, ..Default::default() });
                return responder_fatal(qp, ctx, wire::AETH_NAK_INVALID_REQ, psn, fatal);
            }
            if scatter(ctx, qp.qpn, &wr.sges, offset, pkt.payload).is_err() {
                push_completion(ctx, Completion { qpn: qp.qpn, queue: WorkQueue::Recv, wr_id: wr.wr_id, status: WcStatus::LocalProtection, opcode: WcOpcode::Recv, ..Default::default() });
                return responder_fatal(qp, ctx, wire::AETH_NAK_REM_OP, psn, fatal);
            }
            qp.cur = Some(InMsg::Send { wr, offset: offset + plen as u64 });
            if op.is_last() {
                let Some(InMsg::Send { wr, offset }) = qp.cur.take() else { return };
                let mut c = Completion {
                    qpn: qp.qpn,
                    queue: WorkQueue::Recv,
                    wr_id: wr.wr_id,
                    opcode: if pkt.imm.is_some() { WcOpcode::RecvWithImm } else { WcOpcode::Recv },
                    byte_len: offset as u32,
                    imm: pkt.imm,
                    src_qp: qp.attrs.remote_qpn,
                    solicited: pkt.bth.solicited(),
                    ..Default::default()
                };
                if let Some(rkey) = pkt.ieth {
                    if ctx.keys.invalidate(qp.qpn, Rkey(rkey)).is_err() {
                        // rxe class J: the receive completes in error and the QP goes to ERROR.
                        // Deviation: we also NAK (invalid request) so the requester learns at once.
                        c.status = WcStatus::RemoteInvalidRequest;
                        push_completion(ctx, c);
                        return responder_fatal(qp, ctx, wire::AETH_NAK_INVALID_REQ, psn, fatal);
                    }
                    c.invalidated_rkey = Some(Rkey(rkey));
                }
                push_completion(ctx, c);
                qp.msn = wire::psn_add(qp.msn, 1);
            }
        }
        OpKind::Write => {
            if op.is_first() {
                qp.ev.rx_write_requests += 1;
                let Some(reth) = pkt.reth else { return };
                let (va, rkey, total) = (reth.va.get(), Rkey(reth.rkey.get()), u64::from(reth.len.get()));
                if total > MAX_MSG_LEN || (op.seg == Seg::Only && total != plen as u64) || (op.seg == Seg::First && total <= pmtu as u64) {
                    return responder_fatal(qp, ctx, wire::AETH_NAK_INVALID_REQ, psn, fatal);
                }
                if total > 0 && check_range(ctx, qp.qpn, rkey, va, total, Access::REMOTE_WRITE).is_err() {
                    return responder_fatal(qp, ctx, wire::AETH_NAK_REM_ACCESS, psn, fatal);
                }
                qp.cur = Some(InMsg::Write { va, rkey, remaining: total, total });
            }
            let Some(InMsg::Write { va, rkey, remaining, total }) = qp.cur.as_ref().map(|m| match m {
                InMsg::Write { va, rkey, remaining, total } => InMsg::Write { va: *va, rkey: *rkey, remaining: *remaining, total: *total },
                InMsg::Send { .. } => unreachable!("sequence checked"),
            }) else {
                return;
            };
            let p = plen as u64;
            if p > remaining || (op.is_last() && p != remaining) || (!op.is_last() && p == remaining && remaining > 0) {
                return responder_fatal(qp, ctx, wire::AETH_NAK_INVALID_REQ, psn, fatal);
            }
            // WRITE with immediate consumes a receive WQE: check before touching memory (rxe CHK_RESOURCE).
            if op.imm && op.is_last() && !has_recv(qp, ctx) {
                if op.seg == Seg::Only {
                    qp.cur = None;
                }
                ctx.c.rnr_nak_sent += 1;
                qp.ev.out_of_buffer += 1;
                qp.nak_sent = true;
                queue_ack_nak(qp, wire::AETH_TYPE_RNR | qp.attrs.min_rnr_timer, psn);
                return;
            }
            if p > 0 && dma_write(ctx.mem, ctx.keys, qp.qpn, KeyRef::Remote(rkey), va, Access::REMOTE_WRITE, pkt.payload).is_err() {
                return responder_fatal(qp, ctx, wire::AETH_NAK_REM_ACCESS, psn, fatal);
            }
            if op.is_last() {
                qp.cur = None;
                if let Some(imm) = pkt.imm {
                    let Some(wr) = take_recv(qp, ctx) else { return };
                    push_completion(ctx, Completion {
                        qpn: qp.qpn,
                        queue: WorkQueue::Recv,
                        wr_id: wr.wr_id,
                        opcode: WcOpcode::RecvRdmaWithImm,
                        byte_len: total as u32,
                        imm: Some(imm),
                        src_qp: qp.attrs.remote_qpn,
                        solicited: pkt.bth.solicited(),
                        ..Default::default()
                    });
                }
                qp.msn = wire::psn_add(qp.msn, 1);
            } else {
                qp.cur = Some(InMsg::Write { va: va + p, rkey, remaining: remaining - p, total });
            }
        }
        OpKind::ReadRequest => {
            qp.ev.rx_read_requests += 1;
            let Some(reth) = pkt.reth else { return };
            let (va, rkey, len) = (reth.va.get(), Rkey(reth.rkey.get()), u64::from(reth.len.get()));
            if len > MAX_MSG_LEN {
                return responder_fatal(qp, ctx, wire::AETH_NAK_INVALID_REQ, psn, fatal);
            }
            if len > 0 && check_range(ctx, qp.qpn, rkey, va, len, Access::REMOTE_READ).is_err() {
                return responder_fatal(qp, ctx, wire::AETH_NAK_REM_ACCESS, psn, fatal);
            }
            let n = npkts(len, qp.attrs.pmtu);
            let cap = usize::from(qp.attrs.max_dest_rd_atomic.max(1));
            while qp.reads.len() >= cap {
                qp.reads.pop_front();
            }
            qp.reads.push_back(ReadRes { first_psn: psn, npkts: n, va, rkey, len });
            qp.out.push_back(RespItem::Read { res_psn: psn, psn, va, rkey, remaining: len, first: true, replay: false });
            qp.epsn = wire::psn_add(psn, n);
            qp.msn = wire::psn_add(qp.msn, 1);
            return;
        }
        _ => return,
    }
    qp.epsn = wire::psn_add(psn, 1);
    if pkt.bth.ack_req() {
        queue_ack(qp, wire::AETH_ACK_UNLIMITED, psn);
    }
}

fn queue_ack_nak(qp: &mut Qp, syndrome: u8, psn: u32) {
    qp.out.push_back(RespItem::Ack { syndrome, psn });
}

/// A request PSN older than expected: re-ACK, or replay a READ response; never re-execute.
fn duplicate(qp: &mut Qp, pkt: &RocePacket<'_>) {
    let psn = pkt.bth.psn();
    if pkt.op.kind == OpKind::ReadRequest {
        let Some(reth) = pkt.reth else { return };
        let (va, rkey, len) = (reth.va.get(), Rkey(reth.rkey.get()), u64::from(reth.len.get()));
        let pmtu = u64::from(qp.attrs.pmtu);
        // Find the saved READ this PSN belongs to; the retried request must be its tail.
        let Some(res) = qp.reads.iter().copied().find(|r| {
            let d = wire::psn_diff(psn, r.first_psn);
            d >= 0 && (d as u32) < r.npkts
        }) else {
            return;
        };
        let off = u64::from(wire::psn_diff(psn, res.first_psn) as u32) * pmtu;
        if rkey != res.rkey || va != res.va.wrapping_add(off) || len != res.len - off.min(res.len) {
            return;
        }
        // A reply of the same READ still queued restarts where it stands, so it keeps its place
        // ahead of the ACKs queued after it: an ACK past a READ the requester still waits for
        // tells it the READ's response was lost (rxe retries at once), and moving the replay
        // behind such an ACK feeds a retransmission storm.
        let replay = RespItem::Read { res_psn: res.first_psn, psn, va, rkey, remaining: len, first: true, replay: true };
        match qp.out.iter_mut().find(|it| matches!(it, RespItem::Read { res_psn, .. } if *res_psn == res.first_psn)) {
            Some(queued) => *queued = replay,
            None => qp.out.push_back(replay),
        }
        return;
    }
    // Duplicate SEND/WRITE: re-ACK (C9-105), coalesced with an ACK still queued last (an ACK
    // covers every PSN up to its own, so one suffices).
    let psn = wire::psn_add(qp.epsn, wire::MASK24);
    if let Some(RespItem::Ack { syndrome, psn: p }) = qp.out.back_mut() {
        if *syndrome == wire::AETH_ACK_UNLIMITED {
            *p = psn;
            return;
        }
    }
    queue_ack(qp, wire::AETH_ACK_UNLIMITED, psn);
}

pub(super) fn transmit(qp: &mut Qp, ctx: &mut Ctx<'_>, tx: &mut TxOut<'_>) -> usize {
    let mut sent = 0;
    let pmtu = u64::from(qp.attrs.pmtu);
    while tx.budget > 0 {
        let Some(item) = qp.out.front_mut() else { break };
        match *item {
            RespItem::Ack { syndrome, psn } => {
                qp.out.pop_front();
                let mut spec = rc_spec(qp, opc::RC_ACK, psn);
                spec.aeth = Some(Aeth::new(syndrome, qp.msn));
                tx.emit(ctx, &mut spec, &[]);
                ctx.c.acks_sent += 1;
                sent += 1;
            }
            RespItem::Read { psn, va, rkey, remaining, first, replay, .. } => {
                let n = remaining.min(pmtu);
                let last = remaining <= pmtu;
                let seg = match (first, last) {
                    (true, true) => Seg::Only,
                    (true, false) => Seg::First,
                    (false, true) => Seg::Last,
                    (false, false) => Seg::Middle,
                };
                let opcode = pick(seg, [opc::RC_READ_RESP_FIRST, opc::RC_READ_RESP_MIDDLE, opc::RC_READ_RESP_LAST, opc::RC_READ_RESP_ONLY]);
                let mut payload = std::mem::take(ctx.scratch);
                payload.clear();
                payload.resize(n as usize, 0);
                let r = if n > 0 {
                    dma_read(ctx.mem, ctx.keys, qp.qpn, KeyRef::Remote(rkey), va, Access::REMOTE_READ, &mut payload)
                } else {
                    Ok(())
                };
                if r.is_err() && replay {
                    // A duplicate READ whose key has gone since it was executed: the requester
                    // invalidated it, which it does once it holds the data (nvmet-rdma answers
                    // with SEND WITH INVALIDATE only after its READ completed; rxe may still
                    // re-send such a READ while retrying). Drop it as a stale duplicate rather
                    // than fail the QP; a requester that truly still waits retries and, in the
                    // end, sees its retry count exhausted.
                    *ctx.scratch = payload;
                    qp.out.pop_front();
                    ctx.c.stale_read_replays_dropped += 1;
                    continue;
                }
                if r.is_err() {
                    // The key went away between request and reply: NAK and error, as at request time.
                    *ctx.scratch = payload;
                    let mut f = Vec::new();
                    responder_fatal(qp, ctx, wire::AETH_NAK_REM_ACCESS, psn, &mut f);
                    qp.out.extend(f);
                    continue;
                }
                let mut spec = rc_spec(qp, opcode, psn);
                if seg != Seg::Middle {
                    spec.aeth = Some(Aeth::new(wire::AETH_ACK_UNLIMITED, qp.msn));
                }
                tx.emit(ctx, &mut spec, &payload);
                *ctx.scratch = payload;
                ctx.c.read_resp_sent += 1;
                sent += 1;
                if last {
                    qp.out.pop_front();
                } else if let Some(RespItem::Read { psn: p, va: v, remaining: r, first: f, .. }) = qp.out.front_mut() {
                    *p = wire::psn_add(*p, 1);
                    *v = v.wrapping_add(n);
                    *r -= n;
                    *f = false;
                }
            }
        }
    }
    sent
}
