//! Completer (rxe_comp.c): ACK / NAK / RNR NAK and READ responses arriving at the requester,
//! cumulative acknowledgement, in-order retirement of send WQEs into completions, go-back-N
//! restarts, the retransmit timer and the error completion that moves a QP to ERROR.

use super::dma::scatter;
use super::qp::{push_completion, qp_error, wc_opcode_of, Ctx, Qp};
use super::{ack_timeout_ns, RNR_TIMER_NS};
use crate::types::*;
use crate::wire::{self, OpKind, RocePacket, Seg};

/// Complete the head send WQE with an error, then move the QP to ERROR.
pub(super) fn requester_error(qp: &mut Qp, ctx: &mut Ctx<'_>, status: WcStatus, vendor: u8) {
    match status {
        WcStatus::RetryExceeded => qp.ev.req_transport_retries_exceeded += 1,
        WcStatus::RnrRetryExceeded => qp.ev.req_rnr_retries_exceeded += 1,
        WcStatus::RemoteAccess => qp.ev.req_remote_access_errors += 1,
        WcStatus::RemoteInvalidRequest => qp.ev.req_remote_invalid_request += 1,
        _ => {}
    }
    if let Some(e) = qp.sq.pop_front() {
        push_completion(ctx, Completion {
            qpn: qp.qpn,
            queue: WorkQueue::Send,
            wr_id: e.wr.wr_id,
            status,
            opcode: wc_opcode_of(&e.wr.op),
            vendor_err: vendor,
            ..Default::default()
        });
    }
    qp_error(qp, ctx);
}

/// Pop finished WQEs from the head of the SQ, completing them in order.
fn retire(qp: &mut Qp, ctx: &mut Ctx<'_>) {
    while qp.sq.front().is_some_and(|e| e.done) {
        let e = qp.sq.pop_front().expect("front exists");
        if qp.sq_next == 0 {
            // The WQE being (re)transmitted finished (a late ACK): continue with the next one.
            qp.sq_pkt = 0;
        } else {
            qp.sq_next -= 1;
        }
        if e.wr.signaled {
            push_completion(ctx, Completion {
                qpn: qp.qpn,
                queue: WorkQueue::Send,
                wr_id: e.wr.wr_id,
                status: WcStatus::Success,
                opcode: wc_opcode_of(&e.wr.op),
                byte_len: e.len as u32,
                ..Default::default()
            });
        }
    }
    // Skip packets of the head WQE that are already acknowledged.
    if qp.sq_next == 0 {
        if let Some(e) = qp.sq.front() {
            if let (false, Some(f)) = (e.is_read(), e.first_psn) {
                let acked = wire::psn_diff(qp.una_psn, f).clamp(0, e.npkts as i32 - 1) as u32;
                qp.sq_pkt = qp.sq_pkt.max(acked);
            }
        }
    }
    // Nothing in flight: stop the retransmit timer.
    if wire::psn_diff(qp.next_psn, qp.una_psn) <= 0 {
        qp.timer = None;
    }
}

/// Restart transmission from the oldest unacknowledged packet (go-back-N, as rxe `req_retry`).
fn go_back(qp: &mut Qp) {
    qp.sq_next = 0;
    qp.sq_pkt = match qp.sq.front() {
        Some(e) if !e.is_read() => e.first_psn.map_or(0, |f| wire::psn_diff(qp.una_psn, f).max(0) as u32),
        _ => 0,
    };
}

/// Progress was made: re-arm the retransmit timer and refill the retry budget.
fn progress(qp: &mut Qp, now: u64) {
    qp.retry_left = qp.attrs.retry_cnt;
    qp.rnr_left = qp.attrs.rnr_retry;
    qp.read_retry_at = None;
    qp.timer = ack_timeout_ns(qp.attrs.timeout).map(|t| now + t);
}

/// Cumulative ACK up to and including `a`. Returns false if a READ was skipped (lost response).
fn ack_upto(qp: &mut Qp, a: u32) -> bool {
    let mut ok = true;
    for e in qp.sq.iter_mut() {
        if e.done {
            continue;
        }
        let (Some(first), Some(last)) = (e.first_psn, e.last_psn()) else { break };
        if wire::psn_diff(a, first) < 0 {
            break;
        }
        if e.is_read() {
            // An ACK past an incomplete READ means its response was lost (rxe_comp.c check_ack).
            ok = false;
            break;
        }
        if wire::psn_diff(last, a) <= 0 {
            e.done = true;
            qp.una_psn = wire::psn_add(last, 1);
        } else {
            let una = wire::psn_add(a, 1);
            if wire::psn_diff(una, qp.una_psn) > 0 {
                qp.una_psn = una;
                }
            break;
        }
    }
    ok
}

/// Fire the RNR wait and the retransmit timer of an RTS QP that are due at `ctx.now`.
pub(super) fn run_timers(qp: &mut Qp, ctx: &mut Ctx<'_>) {
    let now = ctx.now;
    if qp.rnr_until.is_some_and(|t| now >= t) {
        qp.rnr_until = None;
        progress_timer_only(qp, now);
    }
    if qp.timer.is_some_and(|t| now >= t) {
        ctx.c.timeouts += 1;
        qp.ev.local_ack_timeout_err += 1;
        if qp.retry_left == 0 {
            requester_error(qp, ctx, WcStatus::RetryExceeded, 0);
            return;
        }
        if qp.attrs.retry_cnt != 7 || !ctx.cfg.retry_cnt_7_infinite {
            qp.retry_left -= 1;
        }
        go_back(qp);
        qp.timer = ack_timeout_ns(qp.attrs.timeout).map(|t| now + t);
    }
}

fn progress_timer_only(qp: &mut Qp, now: u64) {
    if qp.timer.is_none() && wire::psn_diff(qp.next_psn, qp.una_psn) > 0 {
        qp.timer = ack_timeout_ns(qp.attrs.timeout).map(|t| now + t);
    }
}

pub(super) fn receive(qp: &mut Qp, ctx: &mut Ctx<'_>, pkt: &RocePacket<'_>) {
    let psn = pkt.bth.psn();
    // Ignore responses to PSNs we never sent.
    if wire::psn_diff(psn, qp.next_psn) >= 0 {
        ctx.c.rx_bad_peer += 1;
        return;
    }
    match pkt.op.kind {
        OpKind::Ack => {
            let Some(aeth) = pkt.aeth else { return };
            ctx.c.acks_rcvd += 1;
            let syn = aeth.syndrome;
            match syn & wire::AETH_TYPE_MASK {
                wire::AETH_TYPE_ACK => {
                    let before = qp.una_psn;
                    let ok = ack_upto(qp, psn);
                    if wire::psn_diff(qp.una_psn, before) > 0 {
                        progress(qp, ctx.now);
                    }
                    retire(qp, ctx);
                    if !ok && qp.read_retry_at != Some(qp.una_psn) {
                        qp.read_retry_at = Some(qp.una_psn);
                        go_back(qp);
                    }
                }
                wire::AETH_TYPE_RNR => {
                    ctx.c.rnr_nak_rcvd += 1;
                    qp.ev.rnr_nak_retry_err += 1;
                    ack_upto(qp, wire::psn_add(psn, wire::MASK24)); // psn - 1
                    retire(qp, ctx);
                    if qp.rnr_left == 0 {
                        requester_error(qp, ctx, WcStatus::RnrRetryExceeded, syn);
                        return;
                    }
                    if qp.attrs.rnr_retry != 7 {
                        qp.rnr_left -= 1;
                    }
                    qp.rnr_until = Some(ctx.now + RNR_TIMER_NS[usize::from(syn & 0x1F)]);
                    qp.timer = None;
                    go_back(qp);
                }
                wire::AETH_TYPE_NAK => {
                    ack_upto(qp, wire::psn_add(psn, wire::MASK24));
                    retire(qp, ctx);
                    if syn == wire::AETH_NAK_PSN_SEQ {
                        ctx.c.nak_seq_rcvd += 1;
                        qp.ev.packet_seq_err += 1;
                        if qp.retry_left == 0 {
                            requester_error(qp, ctx, WcStatus::RetryExceeded, syn);
                            return;
                        }
                        if qp.attrs.retry_cnt != 7 {
                            qp.retry_left -= 1;
                        }
                        go_back(qp);
                    } else {
                        ctx.c.nak_err_rcvd += 1;
                        let st = match syn {
                            wire::AETH_NAK_INVALID_REQ => WcStatus::RemoteInvalidRequest,
                            wire::AETH_NAK_REM_ACCESS => WcStatus::RemoteAccess,
                            _ => WcStatus::RemoteOperation,
                        };
                        requester_error(qp, ctx, st, syn);
                    }
                }
                _ => ctx.c.rx_malformed += 1,
            }
        }
        OpKind::ReadResponse => {
            ctx.c.read_resp_rcvd += 1;
            // A READ response implicitly acknowledges earlier SEND/WRITEs.
            if wire::psn_diff(psn, qp.una_psn) > 0 {
                let mut a = qp.una_psn;
                for e in qp.sq.iter() {
                    if e.done {
                        continue;
                    }
                    if e.is_read() {
                        break;
                    }
                    match e.last_psn() {
                        Some(l) if wire::psn_diff(l, psn) < 0 => a = l,
                        _ => break,
                    }
                }
                if a != qp.una_psn {
                    ack_upto(qp, a);
                    retire(qp, ctx);
                }
            }
            let Some(e) = qp.sq.iter_mut().find(|e| !e.done) else { return };
            if !e.is_read() || e.first_psn.is_none() {
                return;
            }
            let first = e.first_psn.expect("checked");
            let expect = wire::psn_add(first, e.rcvd);
            let d = wire::psn_diff(psn, expect);
            if d < 0 {
                return; // duplicate response
            }
            if d > 0 {
                // Lost response packet: re-request from the gap once (timer covers the rest).
                if wire::psn_diff(psn, wire::psn_add(first, e.npkts - 1)) <= 0 && qp.read_retry_at != Some(expect) {
                    qp.read_retry_at = Some(expect);
                    go_back(qp);
                }
                return;
            }
            let pmtu = u64::from(qp.attrs.pmtu);
            let off = u64::from(e.rcvd) * pmtu;
            let remaining = e.len - off.min(e.len);
            let want_seg = match (e.npkts, e.rcvd) {
                (1, _) => Seg::Only,
                (_, 0) => Seg::First,
                (n, r) if r + 1 == n => Seg::Last,
                _ => Seg::Middle,
            };
            // After a retried READ the responder restarts with FIRST/ONLY at our PSN.
            let seg_ok = pkt.op.seg == want_seg
                || (e.rcvd > 0 && matches!((pkt.op.seg, want_seg), (Seg::First, Seg::Middle) | (Seg::Only, Seg::Last)));
            let want_len = remaining.min(pmtu) as usize;
            let ok_syn = pkt.aeth.is_none_or(|a| a.syndrome & wire::AETH_TYPE_MASK == wire::AETH_TYPE_ACK);
            if !seg_ok || pkt.payload.len() != want_len || !ok_syn {
                requester_error(qp, ctx, WcStatus::BadResponse, 0);
                return;
            }
            let last = e.rcvd + 1 == e.npkts;
            let Gather::Sges(sges) = &e.wr.data else { return };
            if scatter(ctx, qp.qpn, sges, off, pkt.payload).is_err() {
                requester_error(qp, ctx, WcStatus::LocalProtection, 0);
                return;
            }
            let e = qp.sq.iter_mut().find(|e| !e.done).expect("still there");
            e.rcvd += 1;
            qp.una_psn = wire::psn_add(psn, 1);
            if last {
                e.done = true;
            }
            progress(qp, ctx.now);
            retire(qp, ctx);
        }
        _ => ctx.c.rx_malformed += 1,
    }
}
