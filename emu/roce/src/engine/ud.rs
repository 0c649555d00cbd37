//! UD send and receive (QP1/GSI and other UD QPs): one packet per WQE, Q_Key selection and
//! checks, and the 40-byte GRH area in front of received data.

use super::dma::{gather, scatter};
use super::qp::{push_completion, Ctx, Qp, TxOut};
use super::srq::take_recv;
use crate::types::*;
use crate::wire::{self, opcode as opc, Deth, PacketSpec, RocePacket};

pub(super) fn transmit(qp: &mut Qp, ctx: &mut Ctx<'_>, tx: &mut TxOut<'_>) -> usize {
    let mut sent = 0;
    while tx.budget > 0 {
        let Some(e) = qp.sq.pop_front() else { break };
        let Some(ud) = e.wr.ud else { continue };
        let imm = match e.wr.op {
            SendOp::SendWithImm(v) => Some(v),
            _ => None,
        };
        // QP1 always sends the GSI Q_Key; elsewhere a WR Q_Key with the high bit set means
        // "use the QP's Q_Key" (IBA 10.2.5).
        let qkey = if qp.qpn.0 == 1 {
            wire::GSI_QKEY
        } else if ud.qkey & 0x8000_0000 != 0 {
            qp.attrs.qkey
        } else {
            ud.qkey
        };
        let mut spec = PacketSpec {
            dst_mac: ud.dest_mac,
            dst_ip: ud.dest_ip,
            udp_sport: ud.udp_sport,
            opcode: if imm.is_some() { opc::UD_SEND_ONLY_IMM } else { opc::UD_SEND_ONLY },
            pkey: qp.attrs.pkey,
            dest_qp: ud.remote_qpn.0,
            psn: qp.ud_psn,
            ack_req: true,
            solicited: e.wr.solicited,
            deth: Some(Deth::new(qkey, qp.qpn.0)),
            imm,
            ..Default::default()
        };
        qp.ud_psn = wire::psn_add(qp.ud_psn, 1);
        let mut payload = std::mem::take(ctx.scratch);
        let r = gather(ctx, qp.qpn, &e.wr.data, 0, e.len as usize, &mut payload);
        let status = if r.is_ok() {
            tx.emit(ctx, &mut spec, &payload);
            ctx.c.ud_sent += 1;
            sent += 1;
            WcStatus::Success
        } else {
            WcStatus::LocalProtection
        };
        *ctx.scratch = payload;
        if e.wr.signaled || status != WcStatus::Success {
            push_completion(ctx, Completion {
                qpn: qp.qpn,
                queue: WorkQueue::Send,
                wr_id: e.wr.wr_id,
                status,
                opcode: WcOpcode::Send,
                byte_len: e.len as u32,
                ..Default::default()
            });
        }
    }
    sent
}

pub(super) fn receive(qp: &mut Qp, ctx: &mut Ctx<'_>, pkt: &RocePacket<'_>) {
    let Some(deth) = pkt.deth else { return };
    if deth.qkey.get() != qp.attrs.qkey {
        ctx.c.ud_dropped += 1;
        return;
    }
    let Some(wr) = take_recv(qp, ctx) else {
        ctx.c.ud_dropped += 1;
        return;
    };
    // GRH area: IPv4 case = 20 zero bytes + the IPv4 header (rxe behaviour, wire.md §1.7).
    let mut grh = [0u8; wire::GRH_LEN];
    grh[20..].copy_from_slice(zerocopy::IntoBytes::as_bytes(&pkt.ip));
    let total = wire::GRH_LEN + pkt.payload.len();
    let cap: u64 = wr.sges.iter().map(|s| u64::from(s.len)).sum();
    let mut c = Completion {
        qpn: qp.qpn,
        queue: WorkQueue::Recv,
        wr_id: wr.wr_id,
        opcode: if pkt.imm.is_some() { WcOpcode::RecvWithImm } else { WcOpcode::Recv },
        byte_len: total as u32,
        imm: pkt.imm,
        src_qp: Qpn(deth.src_qp()),
        src_ip: pkt.ip.src,
        grh: true,
        solicited: pkt.bth.solicited(),
        ..Default::default()
    };
    if (total as u64) > cap {
        c.status = WcStatus::LocalLength;
    } else if scatter(ctx, qp.qpn, &wr.sges, 0, &grh).is_err()
        || scatter(ctx, qp.qpn, &wr.sges, wire::GRH_LEN as u64, pkt.payload).is_err()
    {
        c.status = WcStatus::LocalProtection;
    }
    ctx.c.ud_rcvd += 1;
    push_completion(ctx, c);
}
