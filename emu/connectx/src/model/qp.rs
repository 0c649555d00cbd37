//! Queue pairs (RC, UD, QP1) as firmware objects: the QP record and context, CREATE_QP,
//! the modify state machine (which context fields each transition takes), DESTROY_QP and
//! QUERY_QP. The transport itself runs in emu-roce; `engine_modify` keeps it in step.

use std::collections::BTreeSet;

use super::{fail, lowest_free, need, out, CmdResult, Device, QBuf, GID_TABLE};
use crate::consts::{op, qp as qps, rq_type as rqt, status as st, synd};
use mlx5_ifc::ifc as l;
use mlx5_ifc::layout::{get, set, Field};

/// The QP number of every QP state-transition command [mlx5_ifc.h *2*_qp_in.qpn]; the model
/// handles them in one place, so they must agree.
const MODIFY_QP_QPN: Field = l::rst2init_qp_in::qpn;
const _: () = {
    let all = [l::init2rtr_qp_in::qpn, l::rtr2rts_qp_in::qpn, l::qp_2err_in::qpn, l::qp_2rst_in::qpn];
    let mut i = 0;
    while i < all.len() {
        assert!(all[i].off == MODIFY_QP_QPN.off && all[i].width == MODIFY_QP_QPN.width);
        i += 1;
    }
};
use hal::PhysAddr;

#[derive(Debug, Clone)]
pub struct Qp {
    pub qpn: u32,
    pub st: u8,
    pub state: u8,
    pub pd: u32,
    pub uar: u32,
    pub cqn_snd: u32,
    pub cqn_rcv: u32,
    pub dbr: PhysAddr,
    pub buf: QBuf,
    pub log_rq_size: u8,
    pub log_rq_stride: u8,
    pub rq_type: u8,
    /// The RMP this QP takes its receives from (`rq_type` SRQ).
    pub srqn: Option<u32>,
    /// SRQ_LAST_WQE was raised for this QP's current ERROR state.
    pub last_wqe_reported: bool,
    pub no_sq: bool,
    pub log_sq_size: u8,
    /// The stored QP context (what QUERY_QP returns), state field kept current.
    pub qpc: Vec<u8>,
    /// SQ WQEBB counter consumed by the adapter.
    pub sq_hw: u16,
    /// RQ WQE counter consumed by the adapter.
    pub rq_hw: u16,
    /// The queue counter set this QP counts into (qpc.counter_set_id; 0: none).
    pub counter_set: u8,
    /// What the engine had counted for this QP when it joined `counter_set`.
    pub(crate) qc_base: super::qcounter::Vals,
}

impl Qp {
    pub fn rq_bytes(&self) -> u64 {
        if self.rq_type != 0 {
            0
        } else {
            (1u64 << self.log_rq_size) << (self.log_rq_stride + 4)
        }
    }
    pub fn sq_bytes(&self) -> u64 {
        if self.no_sq {
            0
        } else {
            (1u64 << self.log_sq_size) * 64
        }
    }
}

impl Device {
    pub(super) fn create_qp(&mut self, inp: &[u8]) -> CmdResult {
        need(inp, 0x110)?;
        let c = &inp[0x18..0x18 + l::qpc::SIZE];
        use l::qpc;
        let stype = get(c, qpc::st) as u8;
        if !matches!(stype, qps::ST_RC | qps::ST_UD | qps::ST_QP1) {
            return fail(st::BAD_PARAM, synd::BAD_QP_TYPE);
        }
        if stype == qps::ST_QP1 && self.qps.contains_key(&1) {
            return fail(st::BAD_PARAM, synd::QP1_EXISTS);
        }
        let pd = get(c, qpc::pd) as u32;
        if !self.pds.contains(&pd) {
            return fail(st::BAD_RES, synd::NO_SUCH_PD);
        }
        let uar = get(c, qpc::uar_page) as u32;
        if !self.uars.contains(&uar) {
            return fail(st::BAD_RES, synd::NO_SUCH_UAR);
        }
        let (cs, cr) = (get(c, qpc::cqn_snd) as u32, get(c, qpc::cqn_rcv) as u32);
        let no_sq = get(c, qpc::no_sq) == 1;
        let rq_type = get(c, qpc::rq_type) as u8;
        // A QP on an RMP has no receive queue of its own but its receive completions go to cqn_rcv.
        let recv_cq = matches!(rq_type, rqt::REGULAR | rqt::SRQ);
        if (!no_sq && !self.cqs.contains_key(&cs)) || (recv_cq && !self.cqs.contains_key(&cr)) {
            return fail(st::BAD_RES, synd::NO_SUCH_CQ);
        }
        let srqn = if rq_type == rqt::SRQ {
            let n = get(c, qpc::srqn_rmpn_xrqn) as u32;
            match self.rmps.get(&n) {
                // Only RC and UD QPs of the RMP's own PD may share it.
                Some(r) if r.pd == pd && stype != qps::ST_QP1 => Some(n),
                Some(_) => return fail(st::BAD_PARAM, synd::BAD_QP_TYPE),
                None => return fail(st::BAD_RES, synd::NO_SUCH_RMP),
            }
        } else {
            None
        };
        let dbr = get(c, qpc::dbr_addr);
        if !dbr.is_multiple_of(8) {
            return fail(st::BAD_PARAM, synd::UNALIGNED_DBR);
        }
        if !matches!(rq_type, rqt::REGULAR | rqt::SRQ | rqt::ZERO_LEN) {
            return fail(st::BAD_PARAM, synd::BAD_RQ_SIZE);
        }
        let max_sz = get(&self.cap_cur, l::cmd_hca_cap::log_max_qp_sz);
        let log_sq = get(c, qpc::log_sq_size) as u8;
        let log_rq = get(c, qpc::log_rq_size) as u8;
        let stride = get(c, qpc::log_rq_stride) as u8;
        if log_sq as u64 > max_sz || log_rq as u64 > max_sz {
            return fail(st::BAD_PARAM, synd::QUEUE_TOO_BIG);
        }
        if rq_type == 0 && ((16u64 << stride) > get(&self.cap_cur, l::cmd_hca_cap::max_wqe_sz_rq)) {
            return fail(st::BAD_PARAM, synd::BAD_RQ_SIZE);
        }
        let lps = get(c, qpc::log_page_size) as u8;
        let offset = get(c, qpc::page_offset) * 64;
        let mut q = Qp {
            qpn: 0,
            st: stype,
            state: qps::RST,
            pd,
            uar,
            cqn_snd: if no_sq { 0 } else { cs },
            cqn_rcv: if recv_cq { cr } else { 0 },
            dbr,
            buf: QBuf { pas: Vec::new(), log_page_size: lps, offset },
            log_rq_size: log_rq,
            log_rq_stride: stride,
            rq_type,
            srqn,
            last_wqe_reported: false,
            no_sq,
            log_sq_size: log_sq,
            qpc: c.to_vec(),
            sq_hw: 0,
            rq_hw: 0,
            counter_set: 0,
            qc_base: Default::default(),
        };
        Self::sq_start_ok(q.rq_bytes(), !no_sq)?;
        self.check_ts_format(self.cfg.profile.caps.qp_ts_format, get(c, qpc::ts_format))?;
        let bytes = q.rq_bytes() + q.sq_bytes();
        let np = Self::npages(bytes, lps, offset);
        q.buf.pas = Self::read_pas(inp, 0x110, np, lps)?;
        let qpn = if stype == qps::ST_QP1 {
            1
        } else {
            let max = 1u32 << get(&self.cap_cur, l::cmd_hca_cap::log_max_qp);
            let ids: BTreeSet<u32> = self.qps.keys().copied().collect();
            lowest_free(&ids, 0x100, 0x100 + max).ok_or((st::NO_RES, synd::OUT_OF_OBJECTS))?
        };
        q.qpn = qpn;
        set(&mut q.qpc, qpc::state, qps::RST as u64);
        if let Some(e) = self.engine.as_mut() {
            let ty = if stype == qps::ST_RC { emu_roce::QpType::Rc } else { emu_roce::QpType::Ud };
            if e.create_qp(emu_roce::Qpn(qpn), ty).is_err() {
                return fail(st::INT_ERR, synd::OUT_OF_OBJECTS);
            }
            if let Some(n) = srqn {
                if e.attach_srq(emu_roce::Qpn(qpn), Some(emu_roce::Srqn(n))).is_err() {
                    let _ = e.destroy_qp(emu_roce::Qpn(qpn));
                    return fail(st::INT_ERR, synd::NO_SUCH_RMP);
                }
            }
        }
        self.qps.insert(qpn, q);
        let mut o = out(16);
        set(&mut o, l::create_qp_out::qpn, qpn as u64);
        Ok(o)
    }

    pub(super) fn modify_qp(&mut self, opcode: u16, inp: &[u8]) -> CmdResult {
        let qpn = get(inp, MODIFY_QP_QPN) as u32;
        if !self.qps.contains_key(&qpn) {
            return fail(st::BAD_RES, synd::NO_SUCH_QP);
        }
        let cur = self.qps[&qpn].state;
        let (from_ok, to) = match opcode {
            op::RST2INIT_QP => (cur == qps::RST, qps::INIT),
            op::INIT2INIT_QP => (cur == qps::INIT, qps::INIT),
            op::INIT2RTR_QP => (cur == qps::INIT, qps::RTR),
            op::RTR2RTS_QP => (cur == qps::RTR, qps::RTS),
            op::RTS2RTS_QP => (cur == qps::RTS, qps::RTS),
            op::SQERR2RTS_QP => (cur == qps::SQER, qps::RTS),
            op::QP_2ERR => (true, qps::ERR),
            _ => (true, qps::RST),
        };
        if !from_ok {
            return fail(st::BAD_QP_STATE, synd::BAD_TRANSITION);
        }
        if matches!(opcode, op::QP_2ERR | op::QP_2RST) {
            let qpc_now = self.qps[&qpn].qpc.clone();
            self.engine_modify(qpn, to, &qpc_now)?;
            let q = self.qps.get_mut(&qpn).expect("qp");
            q.state = to;
            if to == qps::RST {
                q.sq_hw = 0;
                q.rq_hw = 0;
                q.last_wqe_reported = false;
            }
            set(&mut q.qpc, l::qpc::state, to as u64);
            self.report_last_wqe();
            return Ok(out(16));
        }
        need(inp, 0x110)?;
        let c = &inp[0x18..0x18 + l::qpc::SIZE];
        use l::qpc;
        let path = |f: Field| f.at(qpc::primary_address_path);
        let stype = self.qps[&qpn].st;
        let mut copy: Vec<Field> = Vec::new();
        match opcode {
            op::RST2INIT_QP | op::INIT2INIT_QP => {
                if get(c, path(l::ads::vhca_port_num)) > 1 {
                    return fail(st::BAD_PARAM, synd::BAD_PORT);
                }
                // qpc.fre (fast registration enable) is a create-time attribute: Linux and rdma-core
                // set it in CREATE_QP only, so a transition keeps the created value.
                copy.extend([qpc::rre, qpc::rwe, qpc::rae, qpc::atomic_mode, qpc::q_key, qpc::counter_set_id,
                    path(l::ads::pkey_index), path(l::ads::vhca_port_num), qpc::rlky, qpc::pm_state]);
            }
            op::INIT2RTR_QP => {
                let mtu = get(c, qpc::mtu);
                if stype == qps::ST_RC {
                    if !(1..=5).contains(&mtu) {
                        return fail(st::BAD_PARAM, synd::BAD_MTU);
                    }
                    self.check_path_mtu(mtu)?;
                    let gi = get(c, path(l::ads::src_addr_index)) as usize;
                    if gi >= GID_TABLE || self.gids[gi].is_none() {
                        return fail(st::BAD_PARAM, synd::BAD_GID_INDEX);
                    }
                    copy.extend([qpc::remote_qpn, qpc::next_rcv_psn, qpc::log_rra_max, qpc::min_rnr_nak,
                        qpc::primary_address_path]);
                } else if mtu > 5 {
                    return fail(st::BAD_PARAM, synd::BAD_MTU);
                }
                copy.extend([qpc::mtu, qpc::log_msg_max, qpc::rre, qpc::rwe, qpc::rae]);
            }
            op::RTR2RTS_QP | op::SQERR2RTS_QP | op::RTS2RTS_QP => {
                copy.extend([qpc::next_send_psn, qpc::retry_count, qpc::rnr_retry, qpc::log_sra_max,
                    path(l::ads::ack_timeout), qpc::min_rnr_nak]);
                if opcode == op::RTS2RTS_QP {
                    copy.retain(|f| *f != qpc::next_send_psn);
                }
            }
            _ => {}
        }
        let mut new = self.qps[&qpn].qpc.clone();
        if copy.contains(&qpc::primary_address_path) {
            let b = qpc::primary_address_path.byte();
            let e = b + l::ads::SIZE;
            new[b..e].copy_from_slice(&c[b..e]);
            copy.retain(|f| *f != qpc::primary_address_path);
        }
        for f in copy {
            set(&mut new, f, get(c, f));
        }
        if stype == qps::ST_RC {
            self.ra_depth_ok(Some(get(&new, qpc::log_sra_max)), Some(get(&new, qpc::log_rra_max)))?;
        }
        let counter_set = get(&new, qpc::counter_set_id) as u8;
        self.q_counter_ok(counter_set)?;
        self.engine_modify(qpn, to, &new)?;
        self.q_counter_leave(qpn, Some(counter_set));
        let q = self.qps.get_mut(&qpn).expect("qp");
        q.qpc = new;
        q.state = to;
        set(&mut q.qpc, qpc::state, to as u64);
        Ok(out(16))
    }

    /// DESTROY_QP: the engine QP and pending doorbells go with it.
    pub(super) fn destroy_qp(&mut self, inp: &[u8]) -> CmdResult {
        let n = get(inp, l::destroy_qp_in::qpn) as u32;
        if !self.qps.contains_key(&n) {
            return fail(st::BAD_RES, synd::NO_SUCH_QP);
        }
        self.q_counter_leave(n, None);
        self.qps.remove(&n);
        if let Some(e) = self.engine.as_mut() {
            let _ = e.destroy_qp(emu_roce::Qpn(n));
        }
        self.sq_doorbells.retain(|d| d.0 != n);
        Ok(out(16))
    }

    /// QUERY_QP: the stored context with the adapter's WQE counters.
    pub(super) fn query_qp(&self, inp: &[u8]) -> CmdResult {
        let n = get(inp, l::query_qp_in::qpn) as u32;
        let q = self.qps.get(&n).ok_or((st::BAD_RES, synd::NO_SUCH_QP))?;
        let mut o = out(0x110);
        o[0x18..0x18 + l::qpc::SIZE].copy_from_slice(&q.qpc);
        let c = &mut o[0x18..0x18 + l::qpc::SIZE];
        set(c, l::qpc::hw_sq_wqebb_counter, q.sq_hw as u64);
        set(c, l::qpc::hw_rq_counter, q.rq_hw as u64);
        Ok(o)
    }
}

impl Device {
    /// Fault: the adapter drives one connected RC QP (the `pick`-th of those in RTS, modulo
    /// their number) to ERROR on its own, as on a catastrophic work-queue error: its
    /// outstanding work is flushed (flush-error CQEs) and a WQ_CATAS_ERROR event names it.
    /// Returns its number, or None when no RC QP is in RTS.
    pub fn inject_qp_error(&mut self, pick: u64) -> Option<u32> {
        let rts: Vec<u32> = self.qps.values().filter(|q| q.st == qps::ST_RC && q.state == qps::RTS).map(|q| q.qpn).collect();
        let qpn = *rts.get((pick % rts.len().max(1) as u64) as usize)?;
        self.inject_qp_error_on(qpn).then_some(qpn)
    }

    /// Fault: as [`Device::inject_qp_error`], on RC QP `qpn` if it is in RTS; whether it was.
    pub fn inject_qp_error_on(&mut self, qpn: u32) -> bool {
        if !self.qps.get(&qpn).is_some_and(|q| q.st == qps::ST_RC && q.state == qps::RTS) {
            return false;
        }
        let mut inp = vec![0u8; l::qp_2err_in::SIZE];
        set(&mut inp, l::qp_2err_in::qpn, qpn as u64);
        if self.modify_qp(op::QP_2ERR, &inp).is_err() {
            return false;
        }
        let mut d = [0u8; 28];
        set(&mut d, l::eqe_qp_srq::qp_srq_n, u64::from(qpn & 0xff_ffff));
        self.raise_event(crate::consts::event::WQ_CATAS_ERROR, 0, &d);
        self.ctr.injected_qp_errors += 1;
        true
    }
}
