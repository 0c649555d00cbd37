//! Shared receive queues as ISSI-1 firmware offers them: the RMP object (CREATE_RMP,
//! MODIFY_RMP arming the limit, DESTROY_RMP, QUERY_RMP), the adapter fetching its linked-list
//! WQEs for the RoCE engine, the limit event and the RMP in error.
//!
//! Sources [Linux mlx5_ifc.h rmpc/wq/*_rmp_*, qp.h mlx5_wqe_srq_next_seg, device.h
//! MLX5_EVENT_TYPE_SRQ_*; IBTA vol. 1 10.2.9 (SRQ limit), 11.6.3 (async events); ibv_modify_srq(3),
//! ibv_get_async_event(3)]:
//! - A receive WQE is `2^log_wq_stride` bytes: a 16-byte next segment (next_wqe_index, big-endian
//!   at byte 2) then data segments ended by lkey 0x100 or the stride. The adapter consumes WQEs
//!   along the list, starting at index 0; the doorbell record's dword 0 (low 16 bits) counts the
//!   WQEs software has posted. The receive CQE goes to the CQ of the QP that took the WQE, with
//!   the WQE's index in wqe_counter.
//! - `wq.lwm` is the limit: when a WQE is taken and fewer than `lwm` remain, the adapter raises
//!   SRQ_RQ_LIMIT (0x14) naming the RMP once and disarms (lwm reads 0) until MODIFY_RMP sets it
//!   again (bitmask.lwm).
//! - An RMP whose WQEs or doorbell record cannot be read (or whose list leaves the queue) goes to
//!   ERR: SRQ_CATAS_ERROR (0x12) names it, every QP attached moves to ERROR (its WQE in progress
//!   flushed) and gets SRQ_LAST_WQE (0x13). An empty RMP is not an error: the RC responder of a
//!   QP that finds it empty answers RNR NAK (the engine does).

use std::collections::BTreeSet;

use super::{fail, lowest_free, need, out, CmdResult, Device, QBuf};
use crate::consts::{event, qp as qps, rmp_state, status as st, synd, wq_type};
use emu_roce::{RecvWr, Sge, Srqn};
use hal::PhysAddr;
use log::{debug, warn};
use mlx5_ifc::ifc as l;
use mlx5_ifc::layout::{get, set};
use mlx5_ifc::queue::INVALID_LKEY;

/// Offset of the RMP context in CREATE_RMP / MODIFY_RMP input and QUERY_RMP output.
const CTX: usize = l::create_rmp_in::ctx.byte();
const _: () = {
    assert!(CTX == l::modify_rmp_in::ctx.byte() && CTX == l::query_rmp_out::rmp_context.byte());
    assert!(CTX + l::rmpc::SIZE == l::create_rmp_in::SIZE);
};
/// The first RMP number handed out.
const FIRST_RMPN: u32 = 0x20;

/// One RMP: its queue, the adapter's position in the list and the limit.
#[derive(Debug, Clone)]
pub struct Rmp {
    pub rmpn: u32,
    pub pd: u32,
    pub dbr: PhysAddr,
    pub buf: QBuf,
    pub log_size: u8,
    /// log2 of the WQE size in bytes.
    pub log_stride: u8,
    pub state: u8,
    /// The limit; 0 = not armed.
    pub lwm: u16,
    /// The stored context (what QUERY_RMP returns; state and lwm kept current).
    pub ctx: Vec<u8>,
    /// WQEs the adapter has fetched (compared with the doorbell record's counter).
    pub fetched: u16,
    /// Index of the next WQE to fetch along the list.
    pub next: u16,
    /// The engine's taken count at the last limit check.
    taken_seen: u64,
}

impl Device {
    pub(super) fn create_rmp(&mut self, inp: &[u8]) -> CmdResult {
        need(inp, l::create_rmp_in::SIZE)?;
        let c = &inp[CTX..CTX + l::rmpc::SIZE];
        let w = &c[l::rmpc::wq.byte()..];
        use l::wq;
        if get(c, l::rmpc::state) != rmp_state::RDY as u64 {
            return fail(st::BAD_PARAM, synd::BAD_RMP_STATE);
        }
        if get(w, wq::wq_type) != wq_type::LINKED_LIST as u64 {
            return fail(st::BAD_PARAM, synd::BAD_WQ_TYPE);
        }
        let pd = get(w, wq::pd) as u32;
        if !self.pds.contains(&pd) {
            return fail(st::BAD_RES, synd::NO_SUCH_PD);
        }
        let dbr = get(w, wq::dbr_addr);
        if !dbr.is_multiple_of(8) {
            return fail(st::BAD_PARAM, synd::UNALIGNED_DBR);
        }
        let log_size = get(w, wq::log_wq_sz) as u8;
        if log_size as u64 > get(&self.cap_cur, l::cmd_hca_cap::log_max_srq_sz) {
            return fail(st::BAD_PARAM, synd::QUEUE_TOO_BIG);
        }
        let log_stride = get(w, wq::log_wq_stride) as u8;
        // The next segment plus at least one data segment, and no more than the largest receive WQE.
        if !(5..=15).contains(&log_stride) || (1u64 << log_stride) > get(&self.cap_cur, l::cmd_hca_cap::max_wqe_sz_rq) {
            return fail(st::BAD_PARAM, synd::BAD_RMP_STRIDE);
        }
        let lwm = get(w, wq::lwm) as u16;
        if u32::from(lwm) >= 1u32 << log_size {
            return fail(st::BAD_PARAM, synd::BAD_LWM);
        }
        let lps = get(w, wq::log_wq_pg_sz) as u8;
        let offset = get(w, wq::page_offset) * 64;
        let np = Self::npages((1u64 << log_size) << log_stride, lps, offset);
        let pas = Self::read_pas(inp, l::create_rmp_in::SIZE, np, lps)?;
        let max = 1u32 << get(&self.cap_cur, l::cmd_hca_cap::log_max_srq);
        let ids: BTreeSet<u32> = self.rmps.keys().copied().collect();
        let rmpn = lowest_free(&ids, FIRST_RMPN, FIRST_RMPN + max).ok_or((st::NO_RES, synd::OUT_OF_OBJECTS))?;
        if let Some(e) = self.engine.as_mut() {
            if e.create_srq(Srqn(rmpn)).is_err() {
                return fail(st::INT_ERR, synd::OUT_OF_OBJECTS);
            }
        }
        self.rmps.insert(rmpn, Rmp {
            rmpn,
            pd,
            dbr,
            buf: QBuf { pas, log_page_size: lps, offset },
            log_size,
            log_stride,
            state: rmp_state::RDY,
            lwm,
            ctx: c.to_vec(),
            fetched: 0,
            next: 0,
            taken_seen: 0,
        });
        let mut o = out(16);
        set(&mut o, l::create_rmp_out::rmpn, rmpn as u64);
        Ok(o)
    }

    /// MODIFY_RMP: `rmp_state` must be the current state; the context's state is the new one
    /// (RDY or ERR); with bitmask.lwm the limit is (re)armed from `wq.lwm`.
    pub(super) fn modify_rmp(&mut self, inp: &[u8]) -> CmdResult {
        need(inp, l::modify_rmp_in::SIZE)?;
        let n = get(inp, l::modify_rmp_in::rmpn) as u32;
        let Some(r) = self.rmps.get(&n) else { return fail(st::BAD_RES, synd::NO_SUCH_RMP) };
        let c = &inp[CTX..CTX + l::rmpc::SIZE];
        let to = get(c, l::rmpc::state) as u8;
        if get(inp, l::modify_rmp_in::rmp_state) != r.state as u64 || !matches!(to, rmp_state::RDY | rmp_state::ERR) {
            return fail(st::BAD_RES_STATE, synd::BAD_RMP_STATE);
        }
        if r.state == rmp_state::ERR && to == rmp_state::RDY {
            return fail(st::BAD_RES_STATE, synd::BAD_RMP_STATE);
        }
        let arm = get(inp, l::rmp_bitmask::lwm.at(l::modify_rmp_in::bitmask)) == 1;
        let lwm = get(&c[l::rmpc::wq.byte()..], l::wq::lwm) as u16;
        if arm && u32::from(lwm) >= 1u32 << r.log_size {
            return fail(st::BAD_PARAM, synd::BAD_LWM);
        }
        let taken = self.engine.as_ref().and_then(|e| e.query_srq(Srqn(n))).map_or(0, |i| i.taken);
        let r = self.rmps.get_mut(&n).expect("rmp");
        if arm {
            r.lwm = lwm;
            r.taken_seen = taken;
            set(&mut r.ctx[l::rmpc::wq.byte()..], l::wq::lwm, lwm as u64);
        }
        if to == rmp_state::ERR && r.state != rmp_state::ERR {
            self.rmp_error(n);
        }
        Ok(out(16))
    }

    /// DESTROY_RMP: refused while a QP takes its receives from it.
    pub(super) fn destroy_rmp(&mut self, inp: &[u8]) -> CmdResult {
        let n = get(inp, l::destroy_rmp_in::rmpn) as u32;
        if !self.rmps.contains_key(&n) {
            return fail(st::BAD_RES, synd::NO_SUCH_RMP);
        }
        if self.qps.values().any(|q| q.srqn == Some(n)) {
            return fail(st::RES_BUSY, synd::IN_USE);
        }
        if let Some(e) = self.engine.as_mut() {
            let _ = e.destroy_srq(Srqn(n));
        }
        self.rmps.remove(&n);
        Ok(out(16))
    }

    /// QUERY_RMP: the stored context with the current state, limit and the adapter's counter.
    pub(super) fn query_rmp(&self, inp: &[u8]) -> CmdResult {
        let n = get(inp, l::query_rmp_in::rmpn) as u32;
        let r = self.rmps.get(&n).ok_or((st::BAD_RES, synd::NO_SUCH_RMP))?;
        let mut o = out(l::query_rmp_out::SIZE);
        o[CTX..CTX + l::rmpc::SIZE].copy_from_slice(&r.ctx);
        let c = &mut o[CTX..CTX + l::rmpc::SIZE];
        set(c, l::rmpc::state, r.state as u64);
        let w = &mut c[l::rmpc::wq.byte()..];
        set(w, l::wq::lwm, r.lwm as u64);
        set(w, l::wq::hw_counter, r.fetched as u64);
        Ok(o)
    }

    /// Fetch the WQEs software posted (per each RMP's doorbell record) along the list and hand
    /// them to the engine's SRQ. Returns the number fetched.
    pub(crate) fn scan_rmps(&mut self) -> usize {
        let ids: Vec<u32> = self.rmps.values().filter(|r| r.state == rmp_state::RDY).map(|r| r.rmpn).collect();
        let mut work = 0;
        for n in ids {
            match self.fetch_rmp(n) {
                Ok(k) => work += k,
                Err(why) => {
                    warn!("cx: RMP {n:#x}: {why}; RMP in error");
                    self.rmp_error(n);
                }
            }
        }
        work
    }

    fn fetch_rmp(&mut self, n: u32) -> Result<usize, &'static str> {
        let r = &self.rmps[&n];
        let Ok(db) = self.mem.dma_read_be32(r.dbr) else {
            self.ctr.dma_faults += 1;
            return Err("doorbell record not in memory");
        };
        let posted = db as u16;
        let size = 1u32 << r.log_size;
        let stride = 1usize << r.log_stride;
        if u32::from(posted.wrapping_sub(r.fetched)) > size {
            return Err("doorbell counter beyond the queue");
        }
        if posted == r.fetched {
            return Ok(0);
        }
        let (mut fetched, mut next) = (r.fetched, r.next);
        let mut wrs = Vec::new();
        let mut w = vec![0u8; stride];
        while fetched != posted {
            let ok = r.buf.pa(u64::from(next) << r.log_stride).is_some_and(|pa| self.mem.dma_read(pa, &mut w).is_ok());
            if !ok {
                self.ctr.dma_faults += 1;
                return Err("WQE not in memory");
            }
            let mut sges = Vec::new();
            for s in w[l::wqe_srq_next_seg::SIZE..].chunks_exact(l::wqe_data_seg::SIZE) {
                let lkey = get(s, l::wqe_data_seg::lkey) as u32;
                if lkey == INVALID_LKEY {
                    break;
                }
                let bc = get(s, l::wqe_data_seg::byte_count) as u32 & 0x7fff_ffff;
                let addr = get(s, l::wqe_data_seg::addr);
                sges.push(Sge { addr, len: bc, lkey: emu_roce::Lkey(lkey) });
            }
            wrs.push(RecvWr { wr_id: u64::from(next), sges });
            let nx = get(&w, l::wqe_srq_next_seg::next_wqe_index) as u16;
            if u32::from(nx) >= size {
                return Err("next_wqe_index outside the queue");
            }
            next = nx;
            fetched = fetched.wrapping_add(1);
        }
        let r = self.rmps.get_mut(&n).expect("rmp");
        r.fetched = fetched;
        r.next = next;
        let k = wrs.len();
        self.ctr.recv_wqes += k as u64;
        if let Some(e) = self.engine.as_mut() {
            for wr in wrs {
                if let Err(err) = e.post_srq_recv(Srqn(n), wr) {
                    debug!("cx: RMP {n:#x} post: {err:?}");
                }
            }
        }
        Ok(k)
    }

    /// After the engine ran: an armed RMP from which WQEs were taken and that now holds fewer
    /// than its limit raises SRQ_RQ_LIMIT once and disarms.
    pub(crate) fn check_rmp_limits(&mut self) {
        if self.rmps.is_empty() {
            return;
        }
        let Some(e) = self.engine.as_ref() else { return };
        let mut fire = Vec::new();
        for r in self.rmps.values_mut() {
            let Some(i) = e.query_srq(Srqn(r.rmpn)) else { continue };
            let took = i.taken != r.taken_seen;
            r.taken_seen = i.taken;
            if r.lwm > 0 && took && r.state == rmp_state::RDY && i.posted < usize::from(r.lwm) {
                r.lwm = 0;
                set(&mut r.ctx[l::rmpc::wq.byte()..], l::wq::lwm, 0);
                fire.push(r.rmpn);
            }
        }
        for n in fire {
            self.ctr.srq_limit_events += 1;
            self.raise_event(event::SRQ_RQ_LIMIT, 0, &qp_srq_data(n));
        }
    }

    /// The RMP goes to ERR: SRQ_CATAS_ERROR, then every attached QP to ERROR with SRQ_LAST_WQE.
    fn rmp_error(&mut self, n: u32) {
        let Some(r) = self.rmps.get_mut(&n) else { return };
        r.state = rmp_state::ERR;
        set(&mut r.ctx, l::rmpc::state, rmp_state::ERR as u64);
        self.ctr.srq_errors += 1;
        self.raise_event(event::SRQ_CATAS_ERROR, 0, &qp_srq_data(n));
        let attached: Vec<u32> = self.qps.values().filter(|q| q.srqn == Some(n)).map(|q| q.qpn).collect();
        for qpn in attached {
            if self.qps[&qpn].state != qps::ERR && self.qps[&qpn].state != qps::RST {
                let qpc = self.qps[&qpn].qpc.clone();
                // Errors from the engine here only mean the QP was already gone.
                let _ = self.engine_modify(qpn, qps::ERR, &qpc);
                let q = self.qps.get_mut(&qpn).expect("qp");
                q.state = qps::ERR;
                set(&mut q.qpc, l::qpc::state, qps::ERR as u64);
            }
        }
        self.report_last_wqe();
    }

    /// SRQ_LAST_WQE once for every QP on an RMP that is in ERROR, however it got there (a modify
    /// command, a transport error, its RMP in error): it will take no more WQEs from the RMP
    /// (IBTA vol. 1 11.6.3 "Last WQE Reached"; software may then destroy it without losing
    /// receives it still held).
    pub(crate) fn report_last_wqe(&mut self) {
        if self.rmps.is_empty() {
            return; // no QP can be on one
        }
        let due: Vec<u32> = self
            .qps
            .values()
            .filter(|q| q.srqn.is_some() && q.state == qps::ERR && !q.last_wqe_reported)
            .map(|q| q.qpn)
            .collect();
        for qpn in due {
            if let Some(q) = self.qps.get_mut(&qpn) {
                q.last_wqe_reported = true;
            }
            self.raise_event(event::SRQ_LAST_WQE, 0, &qp_srq_data(qpn));
        }
    }
}

/// EQE data naming a QP or SRQ [device.h mlx5_eqe_qp_srq: qp_srq_n at 0x18].
fn qp_srq_data(n: u32) -> [u8; 28] {
    let mut d = [0u8; 28];
    set(&mut d, l::eqe_qp_srq::qp_srq_n, u64::from(n & 0xff_ffff));
    d
}
