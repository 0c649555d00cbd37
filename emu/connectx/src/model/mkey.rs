//! Memory keys: the mkey object and its translation (PA and MTT access modes), CREATE_MKEY /
//! DESTROY_MKEY, and the reserved keys QUERY_SPECIAL_CONTEXTS reports. UMR changes to keys are
//! applied by the data path (`datapath::apply_umr`).

use std::collections::BTreeSet;

use super::{fail, lowest_free, need, out, CmdResult, Device};
use crate::consts::{status as st, synd};
use mlx5_ifc::ifc as l;
use mlx5_ifc::layout::{get, set};
use hal::PhysAddr;

pub const RESD_LKEY: u32 = 0x0000_0200;
pub const NULL_MKEY: u32 = 0x0000_0300;
pub const DUMP_FILL_MKEY: u32 = 0x0000_0400;

#[derive(Debug, Clone)]
pub struct Mkey {
    pub index: u32,
    pub key: u32,
    pub pd: u32,
    /// 0 = PA, 1 = MTT.
    pub access_mode: u8,
    pub lr: bool,
    pub lw: bool,
    pub rr: bool,
    pub rw: bool,
    pub atomic: bool,
    pub start: u64,
    pub len: u64,
    pub length64: bool,
    pub log_page_size: u8,
    pub mtt: Vec<PhysAddr>,
    /// Invalidated (LOCAL_INVAL / SEND WITH INVALIDATE): unusable until re-created.
    pub free: bool,
    /// Remote invalidation allowed (mkc.en_rinval).
    pub en_rinval: bool,
    /// May be changed by UMR WQEs (mkc.umr_en).
    pub umr_en: bool,
}

impl Mkey {
    /// Translate `[va, va+len)` to physical extents if the key covers it.
    pub fn translate(&self, va: u64, len: u64) -> Option<Vec<(PhysAddr, u64)>> {
        if !self.length64 {
            let end = va.checked_add(len)?;
            if va < self.start || end > self.start.checked_add(self.len)? {
                return None;
            }
        }
        if self.access_mode == 0 {
            return Some(vec![(va, len)]);
        }
        let ps = 1u64 << self.log_page_size;
        let base = self.start & !(ps - 1);
        let mut out = Vec::new();
        let mut off = va - base;
        let mut left = len;
        while left > 0 {
            let page = (off / ps) as usize;
            let in_page = off % ps;
            let n = (ps - in_page).min(left);
            out.push((self.mtt.get(page)? + in_page, n));
            off += n;
            left -= n;
        }
        Some(out)
    }
}

impl Device {
    pub(super) fn create_mkey(&mut self, inp: &[u8]) -> CmdResult {
        need(inp, l::create_mkey_in::SIZE)?;
        let c = &inp[0x10..0x50];
        use l::mkc;
        let am = get(c, mkc::access_mode_1_0) as u8 | ((get(c, mkc::access_mode_4_2) as u8) << 2);
        if am > 1 {
            return fail(st::BAD_PARAM, synd::BAD_ACCESS_MODE);
        }
        let pd = get(c, mkc::pd) as u32;
        if !self.pds.contains(&pd) {
            return fail(st::BAD_RES, synd::NO_SUCH_PD);
        }
        let length64 = get(c, mkc::length64) == 1;
        let start = get(c, mkc::start_addr);
        let len = get(c, mkc::len);
        let lps = get(c, mkc::log_page_size) as u8;
        let mut mtt = Vec::new();
        if am == 1 {
            if length64 || !(12..=30).contains(&lps) {
                return fail(st::BAD_PARAM, synd::BAD_ACCESS_MODE);
            }
            let octw = get(c, mkc::translations_octword_size) as usize;
            let n = octw * 2;
            need(inp, 0x110 + 8 * n)?;
            let ps = 1u64 << lps;
            let needed = ((start % ps) + len).div_ceil(ps) as usize;
            if needed > n {
                return fail(st::BAD_PARAM, synd::MTT_TOO_SHORT);
            }
            for i in 0..needed {
                let e = u64::from_be_bytes(inp[0x110 + 8 * i..0x118 + 8 * i].try_into().unwrap());
                let pa = e & !7; // low bits: read/write enable flags
                if pa & (ps - 1) != 0 {
                    return fail(st::BAD_PARAM, synd::UNALIGNED_PAS);
                }
                mtt.push(pa);
            }
        }
        let max = 1u32 << get(&self.cap_cur, l::cmd_hca_cap::log_max_mkey);
        let ids: BTreeSet<u32> = self.mkeys.keys().copied().collect();
        let index = lowest_free(&ids, 0x10, max).ok_or((st::NO_RES, synd::OUT_OF_OBJECTS))?;
        let key = (index << 8) | get(c, mkc::mkey_7_0) as u32;
        self.mkeys.insert(index, Mkey {
            index,
            key,
            pd,
            access_mode: am,
            lr: get(c, mkc::lr) == 1,
            lw: get(c, mkc::lw) == 1,
            rr: get(c, mkc::rr) == 1,
            rw: get(c, mkc::rw) == 1,
            atomic: get(c, mkc::a) == 1,
            start,
            len,
            length64,
            log_page_size: lps,
            mtt,
            free: get(c, mkc::free) == 1,
            en_rinval: get(c, mkc::en_rinval) == 1,
            umr_en: get(c, mkc::umr_en) == 1,
        });
        let mut o = out(16);
        set(&mut o, l::create_mkey_out::mkey_index, index as u64);
        Ok(o)
    }

    /// DESTROY_MKEY.
    pub(super) fn destroy_mkey(&mut self, inp: &[u8]) -> CmdResult {
        let idx = get(inp, l::destroy_mkey_in::mkey_index) as u32;
        if self.mkeys.remove(&idx).is_none() {
            return fail(st::BAD_RES, synd::NO_SUCH_MKEY);
        }
        Ok(out(16))
    }

    /// QUERY_SPECIAL_CONTEXTS: the reserved lkey and the null / dump-fill mkeys.
    pub(super) fn query_special_contexts(&self) -> CmdResult {
        let mut o = out(l::query_special_contexts_out::SIZE);
        set(&mut o, l::query_special_contexts_out::dump_fill_mkey, DUMP_FILL_MKEY as u64);
        set(&mut o, l::query_special_contexts_out::resd_lkey, RESD_LKEY as u64);
        set(&mut o, l::query_special_contexts_out::null_mkey, NULL_MKEY as u64);
        // The first 16 bytes (dump_fill_mkey, resd_lkey) are what every driver reads.
        Ok(o[..0x10].to_vec())
    }
}
