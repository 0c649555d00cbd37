//! Completion queues: the CQ object, CREATE_CQ / DESTROY_CQ / QUERY_CQ, the arm doorbell,
//! and writing CQEs (owner bit, doorbell-record consumer index, overrun and access errors,
//! completion events).

use std::collections::BTreeSet;

use super::{fail, lowest_free, need, out, CmdResult, Device, QBuf};
use crate::consts::{event, op, status as st, synd};
use mlx5_ifc::ifc as l;
use mlx5_ifc::layout::{get, set};
use hal::PhysAddr;

#[derive(Debug, Clone)]
pub struct Cq {
    pub cqn: u32,
    pub uar: u32,
    pub log_size: u8,
    pub buf: QBuf,
    pub c_eqn: u8,
    pub dbr: PhysAddr,
    pub oi: bool,
    pub cc: bool,
    pub pi: u32,
    pub armed: Option<bool>,
    pub broken: bool,
}

impl Device {
    pub(super) fn create_cq(&mut self, inp: &[u8]) -> CmdResult {
        need(inp, l::create_cq_in::SIZE)?;
        let c = &inp[0x10..0x50];
        use l::cqc;
        if get(c, cqc::cqe_sz) != 0 || get(c, cqc::cqe_comp_en) != 0 {
            // 64-byte CQEs only; CQE compression is not offered.
            return fail(st::BAD_PARAM, synd::BAD_CQE_SIZE);
        }
        let log_size = get(c, cqc::log_cq_size) as u8;
        if log_size as u64 > get(&self.cap_cur, l::cmd_hca_cap::log_max_cq_sz) {
            return fail(st::BAD_PARAM, synd::QUEUE_TOO_BIG);
        }
        let uar = get(c, cqc::uar_page) as u32;
        if !self.uars.contains(&uar) {
            return fail(st::BAD_RES, synd::NO_SUCH_UAR);
        }
        let c_eqn = get(c, cqc::c_eqn) as u8;
        if !self.eqs.contains_key(&c_eqn) {
            return fail(st::BAD_RES, synd::NO_SUCH_EQ);
        }
        let dbr = get(c, cqc::dbr_addr);
        if !dbr.is_multiple_of(8) {
            return fail(st::BAD_PARAM, synd::UNALIGNED_DBR);
        }
        let lps = get(c, cqc::log_page_size) as u8;
        let offset = get(c, cqc::page_offset) * 64;
        let np = Self::npages((1u64 << log_size) * 64, lps, offset);
        let pas = Self::read_pas(inp, 0x110, np, lps)?;
        let max = 1u32 << get(&self.cap_cur, l::cmd_hca_cap::log_max_cq);
        let ids: BTreeSet<u32> = self.cqs.keys().copied().collect();
        let cqn = lowest_free(&ids, 0x400, 0x400 + max).ok_or((st::NO_RES, synd::OUT_OF_OBJECTS))?;
        self.cqs.insert(cqn, Cq {
            cqn,
            uar,
            log_size,
            buf: QBuf { pas, log_page_size: lps, offset },
            c_eqn,
            dbr,
            oi: get(c, cqc::oi) == 1,
            cc: get(c, cqc::cc) == 1,
            pi: 0,
            armed: None,
            broken: false,
        });
        let mut o = out(16);
        set(&mut o, l::create_cq_out::cqn, cqn as u64);
        Ok(o)
    }

    /// DESTROY_CQ: refused while a QP or raw queue completes to it.
    pub(super) fn destroy_cq(&mut self, inp: &[u8]) -> CmdResult {
        let n = get(inp, l::destroy_cq_in::cqn) as u32;
        if !self.cqs.contains_key(&n) {
            return fail(st::BAD_RES, synd::NO_SUCH_CQ);
        }
        if self.qps.values().any(|q| q.cqn_snd == n || q.cqn_rcv == n)
            || self.raw.sqs.values().chain(self.raw.rqs.values()).any(|q| q.cqn == n)
        {
            return fail(st::RES_BUSY, synd::IN_USE);
        }
        self.cqs.remove(&n);
        Ok(out(16))
    }

    /// QUERY_CQ: the context fields the model keeps.
    pub(super) fn query_cq(&self, inp: &[u8]) -> CmdResult {
        let n = get(inp, l::query_cq_in::cqn) as u32;
        let cq = self.cqs.get(&n).ok_or((st::BAD_RES, synd::NO_SUCH_CQ))?;
        let mut o = out(l::query_cq_out::SIZE);
        let c = &mut o[0x10..0x50];
        set(c, l::cqc::status, if cq.broken { 0x9 } else { 0 });
        set(c, l::cqc::log_cq_size, cq.log_size as u64);
        set(c, l::cqc::uar_page, cq.uar as u64);
        set(c, l::cqc::c_eqn, cq.c_eqn as u64);
        set(c, l::cqc::log_page_size, cq.buf.log_page_size as u64);
        set(c, l::cqc::producer_counter, (cq.pi & 0xFF_FFFF) as u64);
        set(c, l::cqc::dbr_addr, cq.dbr);
        Ok(o)
    }

    pub(super) fn cq_arm(&mut self, uar: u32, v: u64) {
        let cqn = (v & 0xFF_FFFF) as u32;
        let word = (v >> 32) as u32;
        let solicited = (word >> 24) & 0xF == 1;
        let ci = word & 0xFF_FFFF;
        let (eqn, fire) = match self.cqs.get_mut(&cqn) {
            Some(cq) if cq.uar == uar => {
                cq.armed = Some(solicited);
                // Arming with completions already past `ci` raises the event at once.
                let fire = (cq.pi & 0xFF_FFFF) != ci && !solicited;
                (cq.c_eqn, fire)
            }
            _ => {
                self.ctr.stray_doorbells += 1;
                return;
            }
        };
        if fire {
            self.cqs.get_mut(&cqn).expect("cq").armed = None;
            self.completion_event(eqn, cqn);
        }
    }

    /// Write a CQE (64 bytes; op_own's owner bit is set here) into CQ `cqn`.
    /// Returns false when the CQ is in error (overrun, bad buffer).
    pub fn post_cqe(&mut self, cqn: u32, cqe: &[u8; 64]) -> bool {
        let Some(cq) = self.cqs.get(&cqn) else { return false };
        if cq.broken {
            return false;
        }
        let n = 1u32 << cq.log_size;
        let (dbr, pi, log, c_eqn, cc, oi) = (cq.dbr, cq.pi, cq.log_size, cq.c_eqn, cq.cc, cq.oi);
        let ci = match self.mem.dma_read_be32(dbr) {
            Ok(v) => v & 0xFF_FFFF,
            Err(_) => {
                self.ctr.dma_faults += 1;
                return self.cq_error(cqn, 2);
            }
        };
        let used = (pi.wrapping_sub(ci)) & 0xFF_FFFF;
        if !cc && !oi && used >= n {
            self.ctr.cq_overruns += 1;
            return self.cq_error(cqn, 1);
        }
        let idx = if cc { 0 } else { pi & (n - 1) };
        let owner = ((pi >> log) & 1) as u8;
        let mut e = *cqe;
        e[0x3f] = (e[0x3f] & !1) | owner;
        let pa = self.cqs[&cqn].buf.pa(idx as u64 * 64);
        let ok = match pa {
            Some(pa) => self.mem.dma_write(pa, &e[..0x3f]).is_ok() && self.mem.dma_write(pa + 0x3f, &e[0x3f..]).is_ok(),
            None => false,
        };
        if !ok {
            self.ctr.dma_faults += 1;
            return self.cq_error(cqn, 2);
        }
        let cq = self.cqs.get_mut(&cqn).expect("cq");
        cq.pi = cq.pi.wrapping_add(1);
        self.ctr.cqes += 1;
        if let Some(solicited_only) = cq.armed {
            let se = cqe[0x3f] & 2 != 0;
            if !solicited_only || se {
                cq.armed = None;
                self.completion_event(c_eqn, cqn);
            }
        } else {
            self.db_recovery(cqn);
        }
        true
    }

    /// CQ error event (syndrome 1 overrun, 2 access violation); the CQ stops.
    fn cq_error(&mut self, cqn: u32, syndrome: u8) -> bool {
        if let Some(cq) = self.cqs.get_mut(&cqn) {
            cq.broken = true;
        }
        let mut d = [0u8; 28];
        d[0..4].copy_from_slice(&(cqn & 0xFF_FFFF).to_be_bytes());
        d[11] = syndrome;
        self.raise_event(event::CQ_ERROR, 0, &d);
        false
    }
}

impl Device {
    /// Fault: the completion queue of one connected RC QP (the `pick`-th in RTS, modulo their
    /// number; its receive CQ) overruns: CQ error event (syndrome 1), the CQ takes no more
    /// CQEs, and every QP reporting to it goes to ERROR (its flush CQEs have nowhere to go).
    /// Returns the CQ number, or None when no RC QP is in RTS.
    pub fn inject_cq_overrun(&mut self, pick: u64) -> Option<u32> {
        use crate::consts::qp as qps;
        let rts: Vec<u32> = self.qps.values().filter(|q| q.st == qps::ST_RC && q.state == qps::RTS).map(|q| q.cqn_rcv).collect();
        let cqn = *rts.get((pick % rts.len().max(1) as u64) as usize)?;
        self.ctr.cq_overruns += 1;
        self.cq_error(cqn, 1);
        let on: Vec<u32> = self.qps.values().filter(|q| q.cqn_snd == cqn || q.cqn_rcv == cqn).map(|q| q.qpn).collect();
        for qpn in on {
            let mut inp = vec![0u8; l::qp_2err_in::SIZE];
            set(&mut inp, l::qp_2err_in::qpn, qpn as u64);
            let _ = self.modify_qp(op::QP_2ERR, &inp);
        }
        Some(cqn)
    }
}
