//! Event queues: the EQ object, CREATE_EQ / DESTROY_EQ, the EQ doorbell, and posting EQEs
//! (with the owner bit, overrun and interrupt accounting).

use std::collections::BTreeSet;

use log::warn;

use super::{fail, lowest_free, need, out, CmdResult, Device, QBuf};
use crate::consts::{event, status as st, synd};
use mlx5_ifc::ifc as l;
use mlx5_ifc::layout::{get, set};

#[derive(Debug, Clone)]
pub struct Eq {
    pub eqn: u8,
    pub uar: u32,
    pub log_size: u8,
    pub buf: QBuf,
    pub mask: u64,
    pub oi: bool,
    pub pi: u32,
    pub ci: u32,
    pub armed: bool,
    pub broken: bool,
}

impl Device {
    pub(super) fn create_eq(&mut self, inp: &[u8]) -> CmdResult {
        need(inp, l::create_eq_in::SIZE)?;
        let c = &inp[0x10..0x50];
        use l::eqc;
        let log_size = get(c, eqc::log_eq_size) as u8;
        if log_size as u64 > get(&self.cap_cur, l::cmd_hca_cap::log_max_eq_sz) {
            return fail(st::BAD_PARAM, synd::QUEUE_TOO_BIG);
        }
        let uar = get(c, eqc::uar_page) as u32;
        if !self.uars.contains(&uar) {
            return fail(st::BAD_RES, synd::NO_SUCH_UAR);
        }
        let lps = get(c, eqc::log_page_size) as u8;
        let offset = get(c, eqc::page_offset) * 64;
        let np = Self::npages((1u64 << log_size) * 64, lps, offset);
        let pas = Self::read_pas(inp, 0x110, np, lps)?;
        let mask = get(inp, l::create_eq_in::event_bitmask.element(64, 0));
        if mask == 0 {
            return fail(st::BAD_PARAM, synd::BAD_EVENT_MASK);
        }
        let max_eq = 1u32 << get(&self.cap_cur, l::cmd_hca_cap::log_max_eq);
        let ids: BTreeSet<u32> = self.eqs.keys().map(|&k| k as u32).collect();
        let eqn = lowest_free(&ids, 1, max_eq.min(256)).ok_or((st::NO_RES, synd::OUT_OF_OBJECTS))? as u8;
        self.eqs.insert(eqn, Eq {
            eqn,
            uar,
            log_size,
            buf: QBuf { pas, log_page_size: lps, offset },
            mask,
            oi: get(c, eqc::oi) == 1,
            pi: 0,
            ci: 0,
            armed: false,
            broken: false,
        });
        let mut o = out(16);
        set(&mut o, l::create_eq_out::eq_number, eqn as u64);
        Ok(o)
    }

    /// DESTROY_EQ: refused while a CQ reports to the EQ.
    pub(super) fn destroy_eq(&mut self, inp: &[u8]) -> CmdResult {
        let n = get(inp, l::destroy_eq_in::eq_number) as u8;
        if !self.eqs.contains_key(&n) {
            return fail(st::BAD_RES, synd::NO_SUCH_EQ);
        }
        if self.cqs.values().any(|c| c.c_eqn == n) {
            return fail(st::RES_BUSY, synd::IN_USE);
        }
        self.eqs.remove(&n);
        Ok(out(16))
    }

    pub(super) fn eq_doorbell(&mut self, uar: u32, v: u32, arm: bool) {
        let eqn = (v >> 24) as u8;
        let ci24 = v & 0xFF_FFFF;
        match self.eqs.get_mut(&eqn) {
            Some(eq) if eq.uar == uar => {
                let behind = eq.pi.wrapping_sub(ci24) & 0xFF_FFFF;
                eq.ci = eq.pi.wrapping_sub(behind);
                eq.armed = arm;
            }
            _ => self.ctr.stray_doorbells += 1,
        }
    }

    /// Post an EQE on the first EQ subscribed to `ty`. Returns whether one was written.
    pub fn raise_event(&mut self, ty: u8, sub: u8, data: &[u8; 28]) -> bool {
        let eqn = self.eqs.values().find(|q| q.mask & (1u64 << ty) != 0).map(|q| q.eqn);
        match eqn {
            Some(n) => self.post_eqe(n, ty, sub, data),
            None => false,
        }
    }

    /// Write one EQE into EQ `eqn` with the right owner bit.
    pub fn post_eqe(&mut self, eqn: u8, ty: u8, sub: u8, data: &[u8; 28]) -> bool {
        let Some(eq) = self.eqs.get_mut(&eqn) else { return false };
        if eq.broken {
            return false;
        }
        let n = 1u32 << eq.log_size;
        if eq.pi.wrapping_sub(eq.ci) >= n && !eq.oi {
            eq.broken = true;
            let mask = eq.mask;
            self.eq_overrun(eqn, mask);
            return false;
        }
        let idx = eq.pi & (n - 1);
        let owner = ((eq.pi >> eq.log_size) & 1) as u8;
        let mut e = [0u8; 64];
        e[1] = ty;
        e[3] = sub;
        e[0x20..0x3c].copy_from_slice(data);
        e[0x3f] = owner;
        let Some(pa) = eq.buf.pa(idx as u64 * 64) else {
            eq.broken = true;
            return false;
        };
        if self.mem.dma_write(pa, &e[..0x3f]).is_err() || self.mem.dma_write(pa + 0x3f, &e[0x3f..]).is_err() {
            self.ctr.dma_faults += 1;
            eq.broken = true;
            warn!("cx: EQ {eqn} buffer at {pa:#x} is not in memory");
            return false;
        }
        eq.pi = eq.pi.wrapping_add(1);
        self.ctr.eqes += 1;
        if eq.armed {
            eq.armed = false;
            self.ctr.interrupts += 1;
        }
        true
    }

    pub(crate) fn completion_event(&mut self, eqn: u8, cqn: u32) {
        let mut d = [0u8; 28];
        d[0x18..0x1c].copy_from_slice(&(cqn & 0xFF_FFFF).to_be_bytes());
        self.post_eqe(eqn, event::COMPLETION, 0, &d);
    }
}
