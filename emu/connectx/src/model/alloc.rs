//! The objects that are only an ID: UAR pages (ALLOC_UAR / DEALLOC_UAR), protection domains and
//! transport domains (ALLOC_ / DEALLOC_PD, _TRANSPORT_DOMAIN); freeing one still in use fails.

use super::{fail, lowest_free, out, CmdResult, Device, FIRST_UAR};
use crate::consts::{op, status as st, synd};
use mlx5_ifc::ifc as l;
use mlx5_ifc::layout::{get, set};

impl Device {
    /// ALLOC_UAR: the lowest free UAR index from `FIRST_UAR`.
    pub(super) fn alloc_uar(&mut self) -> CmdResult {
        let id = lowest_free(&self.uars, FIRST_UAR, FIRST_UAR + self.cfg.profile.caps.max_uars)
            .ok_or((st::NO_RES, synd::OUT_OF_OBJECTS))?;
        self.uars.insert(id);
        let mut o = out(16);
        set(&mut o, l::alloc_uar_out::uar, id as u64);
        Ok(o)
    }

    /// DEALLOC_UAR: refused while an EQ, CQ or send queue rings through it.
    pub(super) fn dealloc_uar(&mut self, inp: &[u8]) -> CmdResult {
        let id = get(inp, l::dealloc_uar_in::uar) as u32;
        if !self.uars.contains(&id) {
            return fail(st::BAD_RES, synd::NO_SUCH_UAR);
        }
        if self.eqs.values().any(|q| q.uar == id) || self.cqs.values().any(|q| q.uar == id) || self.qps.values().any(|q| q.uar == id) || self.raw.sqs.values().any(|q| q.uar == id) {
            return fail(st::RES_BUSY, synd::IN_USE);
        }
        self.uars.remove(&id);
        Ok(out(16))
    }

    /// ALLOC_PD / ALLOC_TRANSPORT_DOMAIN: the lowest free ID from 1.
    pub(super) fn alloc_pd_or_td(&mut self, opcode: u16) -> CmdResult {
        let set_ = if opcode == op::ALLOC_PD { &mut self.pds } else { &mut self.tds };
        let id = lowest_free(set_, 1, 1 << 20).ok_or((st::NO_RES, synd::OUT_OF_OBJECTS))?;
        set_.insert(id);
        let mut o = out(16);
        set(&mut o, if opcode == op::ALLOC_PD { l::alloc_pd_out::pd } else { l::alloc_transport_domain_out::transport_domain }, id as u64);
        Ok(o)
    }

    /// DEALLOC_PD: refused while a QP, mkey or raw queue uses it.
    pub(super) fn dealloc_pd(&mut self, inp: &[u8]) -> CmdResult {
        let id = get(inp, l::dealloc_pd_in::pd) as u32;
        if !self.pds.contains(&id) {
            return fail(st::BAD_RES, synd::NO_SUCH_PD);
        }
        if self.qps.values().any(|q| q.pd == id)
            || self.mkeys.values().any(|m| m.pd == id)
            || self.raw.sqs.values().chain(self.raw.rqs.values()).any(|q| q.pd == id)
        {
            return fail(st::RES_BUSY, synd::IN_USE);
        }
        self.pds.remove(&id);
        Ok(out(16))
    }

    /// DEALLOC_TRANSPORT_DOMAIN: refused while a TIS uses it.
    pub(super) fn dealloc_td(&mut self, inp: &[u8]) -> CmdResult {
        let id = get(inp, l::dealloc_transport_domain_in::transport_domain) as u32;
        if self.raw.tises.values().any(|&t| t == id) {
            return fail(st::RES_BUSY, synd::IN_USE);
        }
        if !self.tds.remove(&id) {
            return fail(st::BAD_RES, synd::NO_SUCH_TD);
        }
        Ok(out(16))
    }
}
