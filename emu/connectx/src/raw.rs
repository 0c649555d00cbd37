//! Raw Ethernet queues and NIC receive steering: how non-RoCE frames (ARP, ICMP, ...) reach
//! the driver on real hardware, modelled the same way [reference mlx5.md §3; Snabb connectx.lua,
//! Theseus mlx_ethernet]: TIS + SQ for transmit; RQ + TIR + NIC_RX flow table (groups, entries
//! forwarding to a TIR) for receive. RoCEv2 frames for the port's GIDs are taken by the RoCE
//! engine first; everything else the engine hands up goes through the root NIC_RX table.
//!
//! Simplifications (stated, not hidden): outer-header match only (fte_match_set_lyr_2_4;
//! misc/inner criteria must be zero), one destination per entry used (the first TIR or table),
//! L4 checksum offload not computed (IPv4 header checksum is, with cs_flags L3).
use std::collections::BTreeMap;

use emu_roce::Link;

use crate::consts::{flow, status as st, synd, wq_state, wq_type};
use crate::datapath::{cqe_op, INVALID_LKEY};
use mlx5_ifc::ifc as l;
use mlx5_ifc::layout::{get, set, Field};
use crate::model::{Device, QBuf};

use mlx5_ifc::ifc::{
    create_flow_group_in, create_flow_table_in, dest_format_struct as dest_format, destroy_flow_table_in as flow_cmd,
    flow_context, flow_table_context, fte_match_set_lyr_2_4 as lyr_2_4, modify_sq_in, rqc, set_fte_in, sqc, tirc,
    tisc, wq,
};
use mlx5_ifc::op;

/// The raw-queue and steering commands this module executes.
const RAW_OPS: &[u16] = &[
    op::CREATE_TIR,
    op::DESTROY_TIR,
    op::CREATE_SQ,
    op::MODIFY_SQ,
    op::DESTROY_SQ,
    op::CREATE_RQ,
    op::MODIFY_RQ,
    op::DESTROY_RQ,
    op::CREATE_TIS,
    op::DESTROY_TIS,
    op::SET_FLOW_TABLE_ROOT,
    op::CREATE_FLOW_TABLE,
    op::DESTROY_FLOW_TABLE,
    op::CREATE_FLOW_GROUP,
    op::DESTROY_FLOW_GROUP,
    op::SET_FLOW_TABLE_ENTRY,
    op::DELETE_FLOW_TABLE_ENTRY,
];

/// The object number in every raw object's create output and destroy/modify input: all sit
/// where `create_tis_out.tisn` does (dword 2, bits 23:0), asserted below.
const OBJ_NUM: Field = l::create_tis_out::tisn;
const _: () = {
    let all = [
        l::destroy_tis_in::tisn,
        l::create_sq_out::sqn,
        l::destroy_sq_in::sqn,
        l::create_rq_out::rqn,
        l::destroy_rq_in::rqn,
        l::create_tir_out::tirn,
        l::destroy_tir_in::tirn,
        l::create_flow_table_out::table_id,
    ];
    let mut i = 0;
    while i < all.len() {
        assert!(all[i].off == OBJ_NUM.off && all[i].width == OBJ_NUM.width);
        i += 1;
    }
    // MODIFY_SQ and MODIFY_RQ carry state and number alike.
    assert!(modify_sq_in::sq_state.off == l::modify_rq_in::rq_state.off);
    assert!(modify_sq_in::sqn.off == l::modify_rq_in::rqn.off);
};

/// The IPv4 address inside a 16-byte address union [mlx5_ifc.h ipv4_layout: 96 reserved bits, then ipv4].
const fn ipv4_of(union: Field) -> Field {
    union.element(32, 3)
}

const ACTION_DROP: u64 = flow::ACTION_DROP as u64;
const ACTION_FWD_DEST: u64 = flow::ACTION_FWD_DEST as u64;
const DEST_FLOW_TABLE: u8 = flow::DEST_FLOW_TABLE;
const DEST_TIR: u8 = flow::DEST_TIR;
const WQ_RDY: u8 = wq_state::RDY;

#[derive(Debug, Clone)]
pub struct RawWq {
    pub id: u32,
    pub cqn: u32,
    pub pd: u32,
    pub uar: u32,
    pub dbr: u64,
    pub buf: QBuf,
    pub log_stride: u8,
    pub log_size: u8,
    pub state: u8,
    pub rlky: bool,
    /// Consumed WQE/WQEBB counter.
    pub hw: u16,
    pub tis: u32,
}

#[derive(Debug, Clone, Default)]
pub struct FlowGroup {
    pub start: u32,
    pub end: u32,
    pub enable: u8,
    pub criteria: Vec<u8>,
}

#[derive(Debug, Clone)]
pub struct Fte {
    pub group: u32,
    pub action: u64,
    pub dest: Option<(u8, u32)>,
    pub value: Vec<u8>,
}

#[derive(Debug, Clone, Default)]
pub struct FlowTable {
    pub ty: u8,
    pub level: u8,
    pub log_size: u8,
    pub groups: BTreeMap<u32, FlowGroup>,
    pub entries: BTreeMap<u32, Fte>,
}

/// Raw Ethernet state of the adapter.
#[derive(Debug, Clone, Default)]
pub struct Raw {
    pub tises: BTreeMap<u32, u32>,
    pub tirs: BTreeMap<u32, u32>,
    pub sqs: BTreeMap<u32, RawWq>,
    pub rqs: BTreeMap<u32, RawWq>,
    pub tables: BTreeMap<u32, FlowTable>,
    pub root_rx: Option<u32>,
    next_id: u32,
    /// Frames steered to an RQ / dropped (no rule, drop rule, no WQE).
    pub rx_steered: u64,
    pub rx_no_rule: u64,
    pub rx_no_wqe: u64,
    pub tx_frames: u64,
}

impl Raw {
    pub fn live(&self) -> usize {
        self.tises.len()
            + self.tirs.len()
            + self.sqs.len()
            + self.rqs.len()
            + self.tables.len()
            + self.tables.values().map(|t| t.groups.len() + t.entries.len()).sum::<usize>()
    }
    fn id(&mut self) -> u32 {
        self.next_id = (self.next_id + 1) & 0xff_ffff;
        0x30_0000 | (self.next_id & 0xf_ffff)
    }
}

type R = Result<Vec<u8>, (u8, u32)>;

fn out16(id: Option<u32>) -> Vec<u8> {
    let mut o = vec![0u8; 16];
    if let Some(id) = id {
        set(&mut o, OBJ_NUM, id as u64);
    }
    o
}

fn need(inp: &[u8], n: usize) -> Result<(), (u8, u32)> {
    if inp.len() < n {
        Err((st::BAD_INP_LEN, synd::INPUT_TOO_SHORT))
    } else {
        Ok(())
    }
}

/// The 0x40-byte outer-header match set of a frame.
pub fn match_set(frame: &[u8]) -> [u8; 0x40] {
    let mut m = [0u8; 0x40];
    if frame.len() < 14 {
        return m;
    }
    let be16 = |o: usize| u16::from_be_bytes([frame[o], frame[o + 1]]) as u64;
    set(&mut m, lyr_2_4::dmac_47_16, u32::from_be_bytes(frame[0..4].try_into().unwrap()) as u64);
    set(&mut m, lyr_2_4::dmac_15_0, be16(4));
    set(&mut m, lyr_2_4::smac_47_16, u32::from_be_bytes(frame[6..10].try_into().unwrap()) as u64);
    set(&mut m, lyr_2_4::smac_15_0, be16(10));
    let mut et = be16(12);
    let mut l3 = 14;
    if et == 0x8100 && frame.len() >= 18 {
        set(&mut m, lyr_2_4::first_vid, be16(14) & 0xfff);
        et = be16(16);
        l3 = 18;
    }
    set(&mut m, lyr_2_4::ethertype, et);
    if et == 0x0800 && frame.len() >= l3 + 20 {
        let ihl = (frame[l3] & 0xf) as usize * 4;
        set(&mut m, lyr_2_4::ip_version, 4);
        set(&mut m, lyr_2_4::ip_protocol, frame[l3 + 9] as u64);
        set(&mut m, ipv4_of(lyr_2_4::src_ipv4_src_ipv6), u32::from_be_bytes(frame[l3 + 12..l3 + 16].try_into().unwrap()) as u64);
        set(&mut m, ipv4_of(lyr_2_4::dst_ipv4_dst_ipv6), u32::from_be_bytes(frame[l3 + 16..l3 + 20].try_into().unwrap()) as u64);
        if frame[l3 + 9] == 17 && frame.len() >= l3 + ihl + 4 {
            set(&mut m, lyr_2_4::udp_sport, be16(l3 + ihl));
            set(&mut m, lyr_2_4::udp_dport, be16(l3 + ihl + 2));
        }
    }
    m
}

fn ipv4_checksum(h: &mut [u8]) {
    h[10] = 0;
    h[11] = 0;
    let mut s: u32 = 0;
    for c in h.chunks(2) {
        s += u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32;
    }
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    let c = !(s as u16);
    h[10..12].copy_from_slice(&c.to_be_bytes());
}

impl Device {
    /// Raw-path commands; None when `opcode` is not one of them.
    pub(crate) fn exec_raw(&mut self, opcode: u16, inp: &[u8]) -> Option<R> {
        if !RAW_OPS.contains(&opcode) {
            return None;
        }
        Some(self.exec_raw_inner(opcode, inp))
    }

    fn exec_raw_inner(&mut self, opcode: u16, inp: &[u8]) -> R {
        let id_in = get(inp, OBJ_NUM) as u32;
        match opcode {
            op::CREATE_TIS => {
                need(inp, 0x20 + 0xa0)?;
                let td = get(&inp[0x20..], tisc::transport_domain) as u32;
                if !self.tds.contains(&td) {
                    return Err((st::BAD_RES, synd::NO_SUCH_TD));
                }
                let id = self.raw.id();
                self.raw.tises.insert(id, td);
                Ok(out16(Some(id)))
            }
            op::DESTROY_TIS => {
                if self.raw.sqs.values().any(|s| s.tis == id_in) {
                    return Err((st::RES_BUSY, synd::IN_USE));
                }
                self.raw.tises.remove(&id_in).map(|_| out16(None)).ok_or((st::BAD_RES, synd::NO_SUCH_QP))
            }
            op::CREATE_SQ | op::CREATE_RQ => {
                need(inp, 0x110)?;
                let c = &inp[0x20..0x110];
                let w = &c[0x30..];
                let sq = opcode == op::CREATE_SQ;
                let cqn = get(c, if sq { sqc::cqn } else { rqc::cqn }) as u32;
                let caps = &self.cfg.profile.caps;
                let (cap, ts) = if sq { (caps.sq_ts_format, get(c, sqc::ts_format)) } else { (caps.rq_ts_format, get(c, rqc::ts_format)) };
                self.check_ts_format(cap, ts)?;
                if !self.cqs.contains_key(&cqn) {
                    return Err((st::BAD_RES, synd::NO_SUCH_CQ));
                }
                let pd = get(w, wq::pd) as u32;
                if !self.pds.contains(&pd) {
                    return Err((st::BAD_RES, synd::NO_SUCH_PD));
                }
                let uar = get(w, wq::uar_page) as u32;
                if sq && !self.uars.contains(&uar) {
                    return Err((st::BAD_RES, synd::NO_SUCH_UAR));
                }
                let tis = get(c, sqc::tis_num_0) as u32;
                if sq && !self.raw.tises.contains_key(&tis) {
                    return Err((st::BAD_RES, synd::NO_SUCH_QP));
                }
                if get(w, wq::wq_type) != wq_type::CYCLIC as u64 {
                    return Err((st::BAD_PARAM, synd::BAD_QP_TYPE));
                }
                let dbr = get(w, wq::dbr_addr);
                if !dbr.is_multiple_of(8) {
                    return Err((st::BAD_PARAM, synd::UNALIGNED_DBR));
                }
                let log_stride = get(w, wq::log_wq_stride) as u8;
                let log_size = get(w, wq::log_wq_sz) as u8;
                if log_size as u64 > get(&self.cap_cur, l::cmd_hca_cap::log_max_wq_sz) || log_stride < 4 {
                    return Err((st::BAD_PARAM, synd::QUEUE_TOO_BIG));
                }
                let lps = get(w, wq::log_wq_pg_sz) as u8;
                let bytes = (1u64 << log_size) << log_stride;
                let np = bytes.div_ceil(4096 << lps) as usize;
                need(inp, 0x110 + 8 * np)?;
                let mut pas = Vec::with_capacity(np);
                for i in 0..np {
                    let pa = u64::from_be_bytes(inp[0x110 + 8 * i..0x118 + 8 * i].try_into().unwrap());
                    if pa & ((4096 << lps) - 1) != 0 {
                        return Err((st::BAD_PARAM, synd::UNALIGNED_PAS));
                    }
                    pas.push(pa);
                }
                let id = self.raw.id();
                let q = RawWq {
                    id,
                    cqn,
                    pd,
                    uar,
                    dbr,
                    buf: QBuf { pas, log_page_size: lps, offset: 0 },
                    log_stride,
                    log_size,
                    state: 0,
                    rlky: get(c, sqc::rlky) == 1,
                    hw: 0,
                    tis,
                };
                if sq {
                    self.raw.sqs.insert(id, q);
                } else {
                    self.raw.rqs.insert(id, q);
                }
                Ok(out16(Some(id)))
            }
            op::MODIFY_SQ | op::MODIFY_RQ => {
                need(inp, 0x20 + 0x30)?;
                let cur = get(inp, modify_sq_in::sq_state) as u8;
                let wqn = get(inp, modify_sq_in::sqn) as u32;
                let new = get(&inp[0x20..], sqc::state) as u8;
                let map = if opcode == op::MODIFY_SQ { &mut self.raw.sqs } else { &mut self.raw.rqs };
                let q = map.get_mut(&wqn).ok_or((st::BAD_RES, synd::NO_SUCH_QP))?;
                if q.state != cur || new > wq_state::ERR {
                    return Err((st::BAD_RES_STATE, synd::BAD_TRANSITION));
                }
                q.state = new;
                if new == wq_state::RST {
                    q.hw = 0;
                }
                Ok(out16(None))
            }
            op::DESTROY_SQ => {
                self.raw.sqs.remove(&id_in).map(|_| out16(None)).ok_or((st::BAD_RES, synd::NO_SUCH_QP))
            }
            op::DESTROY_RQ => {
                if self.raw.tirs.values().any(|&r| r == id_in) {
                    return Err((st::RES_BUSY, synd::IN_USE));
                }
                self.raw.rqs.remove(&id_in).map(|_| out16(None)).ok_or((st::BAD_RES, synd::NO_SUCH_QP))
            }
            op::CREATE_TIR => {
                need(inp, 0x20 + 0x30)?;
                let c = &inp[0x20..];
                if get(c, tirc::disp_type) != 0 {
                    return Err((st::BAD_PARAM, synd::BAD_QP_TYPE)); // RSS (indirect) not modelled
                }
                let rqn = get(c, tirc::inline_rqn) as u32;
                if !self.raw.rqs.contains_key(&rqn) {
                    return Err((st::BAD_RES, synd::NO_SUCH_QP));
                }
                if !self.tds.contains(&(get(c, tirc::transport_domain) as u32)) {
                    return Err((st::BAD_RES, synd::NO_SUCH_TD));
                }
                let id = self.raw.id();
                self.raw.tirs.insert(id, rqn);
                Ok(out16(Some(id)))
            }
            op::DESTROY_TIR => {
                let used = self.raw.tables.values().any(|t| t.entries.values().any(|e| e.dest == Some((DEST_TIR, id_in))));
                if used {
                    return Err((st::RES_BUSY, synd::IN_USE));
                }
                self.raw.tirs.remove(&id_in).map(|_| out16(None)).ok_or((st::BAD_RES, synd::NO_SUCH_QP))
            }
            op::CREATE_FLOW_TABLE => {
                need(inp, 0x18 + 0x28)?;
                let ty = get(inp, create_flow_table_in::table_type) as u8;
                if ty != flow::TABLE_NIC_RX {
                    return Err((st::BAD_PARAM, synd::BAD_OP_MOD)); // only NIC_RX modelled
                }
                let ctx = &inp[0x18..];
                if get(ctx, flow_table_context::log_size) > 24 {
                    return Err((st::BAD_PARAM, synd::QUEUE_TOO_BIG));
                }
                let id = self.raw.id();
                self.raw.tables.insert(id, FlowTable {
                    ty,
                    level: get(ctx, flow_table_context::level) as u8,
                    log_size: get(ctx, flow_table_context::log_size) as u8,
                    ..Default::default()
                });
                Ok(out16(Some(id)))
            }
            op::DESTROY_FLOW_TABLE => {
                let t = get(inp, flow_cmd::table_id) as u32;
                let tb = self.raw.tables.get(&t).ok_or((st::BAD_RES, synd::NO_SUCH_QP))?;
                if !tb.groups.is_empty() {
                    return Err((st::RES_BUSY, synd::IN_USE));
                }
                if self.raw.root_rx == Some(t) {
                    self.raw.root_rx = None;
                }
                self.raw.tables.remove(&t);
                Ok(out16(None))
            }
            op::SET_FLOW_TABLE_ROOT => {
                let t = get(inp, flow_cmd::table_id) as u32;
                if t != 0 && !self.raw.tables.contains_key(&t) {
                    return Err((st::BAD_RES, synd::NO_SUCH_QP));
                }
                self.raw.root_rx = (t != 0).then_some(t);
                Ok(out16(None))
            }
            op::CREATE_FLOW_GROUP => {
                need(inp, 0x40 + 0x40)?;
                let t = get(inp, flow_cmd::table_id) as u32;
                let start = get(inp, create_flow_group_in::start_flow_index) as u32;
                let end = get(inp, create_flow_group_in::end_flow_index) as u32;
                let enable = get(inp, create_flow_group_in::match_criteria_enable) as u8;
                let crit = inp[0x40..0x80].to_vec();
                let misc_nonzero = inp.len() > 0x80 && inp[0x80..inp.len().min(0x240)].iter().any(|&b| b != 0);
                let id = self.raw.id();
                let tb = self.raw.tables.get_mut(&t).ok_or((st::BAD_RES, synd::NO_SUCH_QP))?;
                if end < start || end >= (1u32 << tb.log_size) || enable & !1 != 0 && misc_nonzero {
                    return Err((st::BAD_PARAM, synd::BAD_EVENT_MASK));
                }
                if tb.groups.values().any(|g| start <= g.end && g.start <= end) {
                    return Err((st::BAD_PARAM, synd::BAD_EVENT_MASK));
                }
                tb.groups.insert(id, FlowGroup { start, end, enable, criteria: crit });
                let mut o = vec![0u8; 16];
                set(&mut o, l::create_flow_group_out::group_id, id as u64);
                Ok(o)
            }
            op::DESTROY_FLOW_GROUP => {
                let t = get(inp, flow_cmd::table_id) as u32;
                let g = get(inp, l::destroy_flow_group_in::group_id) as u32;
                let tb = self.raw.tables.get_mut(&t).ok_or((st::BAD_RES, synd::NO_SUCH_QP))?;
                if tb.entries.values().any(|e| e.group == g) {
                    return Err((st::RES_BUSY, synd::IN_USE));
                }
                tb.groups.remove(&g).map(|_| out16(None)).ok_or((st::BAD_RES, synd::NO_SUCH_QP))
            }
            op::SET_FLOW_TABLE_ENTRY => {
                need(inp, 0x340)?;
                let t = get(inp, flow_cmd::table_id) as u32;
                let idx = get(inp, set_fte_in::flow_index) as u32;
                let fc = &inp[0x40..];
                let g = get(fc, flow_context::group_id) as u32;
                let action = get(fc, flow_context::action);
                let ndest = get(fc, flow_context::destination_list_size) as usize;
                let value = fc[0x40..0x80].to_vec();
                let mut dest = None;
                if action & ACTION_FWD_DEST != 0 {
                    need(inp, 0x340 + 8 * ndest)?;
                    if ndest == 0 {
                        return Err((st::BAD_PARAM, synd::BAD_EVENT_MASK));
                    }
                    let d = &fc[0x300..];
                    let (ty, id) = (get(d, dest_format::destination_type) as u8, get(d, dest_format::destination_id) as u32);
                    let ok = match ty {
                        DEST_TIR => self.raw.tirs.contains_key(&id),
                        DEST_FLOW_TABLE => self.raw.tables.contains_key(&id) && id != t,
                        _ => false,
                    };
                    if !ok {
                        return Err((st::BAD_RES, synd::NO_SUCH_QP));
                    }
                    dest = Some((ty, id));
                }
                let tb = self.raw.tables.get_mut(&t).ok_or((st::BAD_RES, synd::NO_SUCH_QP))?;
                let grp = tb.groups.get(&g).ok_or((st::BAD_RES, synd::NO_SUCH_QP))?;
                if idx < grp.start || idx > grp.end {
                    return Err((st::BAD_PARAM, synd::BAD_GID_INDEX));
                }
                tb.entries.insert(idx, Fte { group: g, action, dest, value });
                Ok(out16(None))
            }
            op::DELETE_FLOW_TABLE_ENTRY => {
                let t = get(inp, flow_cmd::table_id) as u32;
                let idx = get(inp, set_fte_in::flow_index) as u32;
                let tb = self.raw.tables.get_mut(&t).ok_or((st::BAD_RES, synd::NO_SUCH_QP))?;
                tb.entries.remove(&idx).map(|_| out16(None)).ok_or((st::BAD_RES, synd::NO_SUCH_QP))
            }
            _ => Err((st::BAD_OP, synd::UNKNOWN_OPCODE)),
        }
    }

    /// Steer one non-RoCE frame: root NIC_RX table → TIR → RQ; write it and its CQE.
    pub(crate) fn raw_receive(&mut self, frame: &[u8]) {
        let m = match_set(frame);
        let mut table = self.raw.root_rx;
        let mut rqn = None;
        for _ in 0..8 {
            let Some(t) = table.and_then(|t| self.raw.tables.get(&t)) else { break };
            table = None;
            let hit = t.entries.values().find(|e| {
                let g = &t.groups[&e.group];
                g.enable & 1 == 0 || (0..0x40).all(|i| m[i] & g.criteria[i] == e.value[i] & g.criteria[i])
            });
            match hit {
                Some(e) if e.action & ACTION_DROP != 0 => break,
                Some(Fte { dest: Some((DEST_TIR, tir)), .. }) => rqn = self.raw.tirs.get(tir).copied(),
                Some(Fte { dest: Some((DEST_FLOW_TABLE, nt)), .. }) => table = Some(*nt),
                _ => {}
            }
        }
        let Some(rqn) = rqn else {
            self.raw.rx_no_rule += 1;
            self.ctr.raw_frames_dropped += 1;
            return;
        };
        let Some(rq) = self.raw.rqs.get(&rqn).cloned() else { return };
        if rq.state != WQ_RDY {
            self.raw.rx_no_wqe += 1;
            self.ctr.raw_frames_dropped += 1;
            return;
        }
        let head = self.mem.dma_read_be32(rq.dbr).map(|v| v as u16).unwrap_or(rq.hw);
        if head == rq.hw {
            self.raw.rx_no_wqe += 1;
            self.ctr.raw_frames_dropped += 1;
            return;
        }
        let stride = 1usize << rq.log_stride;
        let off = ((rq.hw as u64) & ((1 << rq.log_size) - 1)) * stride as u64;
        let mut w = vec![0u8; stride];
        if rq.buf.pa(off).map(|pa| self.mem.dma_read(pa, &mut w).is_ok()) != Some(true) {
            self.ctr.dma_faults += 1;
            return;
        }
        let pd = rq.pd;
        let mut done = 0usize;
        let mut err = false;
        for s in w.chunks(16) {
            if done == frame.len() {
                break;
            }
            let lkey = u32::from_be_bytes(s[4..8].try_into().unwrap());
            if lkey == INVALID_LKEY {
                break;
            }
            let bc = u32::from_be_bytes(s[0..4].try_into().unwrap()) as usize;
            let addr = u64::from_be_bytes(s[8..16].try_into().unwrap());
            let n = bc.min(frame.len() - done);
            match self.raw_translate(pd, rq.rlky, lkey, addr, n) {
                Some(pa) if self.mem.dma_write(pa, &frame[done..done + n]).is_ok() => done += n,
                _ => {
                    err = true;
                    break;
                }
            }
        }
        self.raw.rqs.get_mut(&rqn).expect("rq").hw = rq.hw.wrapping_add(1);
        let mut c = [0u8; 64];
        c[0x2c..0x30].copy_from_slice(&(done as u32).to_be_bytes());
        c[0x38..0x3c].copy_from_slice(&rqn.to_be_bytes());
        c[0x3c..0x3e].copy_from_slice(&rq.hw.to_be_bytes());
        if err || done < frame.len() {
            c[0x37] = if err { crate::datapath::cqe_synd::LOCAL_PROT_ERR } else { crate::datapath::cqe_synd::LOCAL_LENGTH_ERR };
            c[0x3f] = cqe_op::RESP_ERR << 4;
        } else {
            c[0x3f] = cqe_op::RESP_SEND << 4;
            self.raw.rx_steered += 1;
        }
        self.post_cqe(rq.cqn, &c);
    }

    /// A contiguous translation of `[va, va+n)` through `lkey` (reserved lkey or an MKey of `pd`).
    pub(crate) fn raw_translate(&self, pd: u32, rlky: bool, lkey: u32, va: u64, n: usize) -> Option<u64> {
        if lkey == crate::model::RESD_LKEY {
            return rlky.then_some(va);
        }
        let m = self.mkeys.get(&(lkey >> 8))?;
        if m.key != lkey || m.free || m.pd != pd {
            return None;
        }
        let ext = m.translate(va, n as u64)?;
        (ext.len() == 1).then(|| ext[0].0)
    }

    /// Run a raw SQ up to its doorbell record; frames go out on `link`.
    pub(crate) fn run_raw_sq(&mut self, sqn: u32, link: &mut dyn Link) -> usize {
        let Some(sq) = self.raw.sqs.get(&sqn).cloned() else { return 0 };
        if sq.state != WQ_RDY {
            return 0;
        }
        let Ok(pi) = self.mem.dma_read_be32(sq.dbr + 4) else {
            self.ctr.dma_faults += 1;
            return 0;
        };
        let pi = pi as u16;
        let mut hw = sq.hw;
        let n = 1u32 << sq.log_size;
        let mut work = 0;
        while hw != pi && work < 1 << 16 {
            let read = |k: u16, len: usize| -> Option<Vec<u8>> {
                let mut v = vec![0u8; len];
                for (i, ch) in v.chunks_mut(64).enumerate() {
                    let bb = (k as u32 + i as u32) & (n - 1);
                    let pa = sq.buf.pa(bb as u64 * 64)?;
                    self.mem.dma_read(pa, ch).ok()?;
                }
                Some(v)
            };
            let Some(ctrl) = read(hw, 16) else { break };
            let ds = (ctrl[7] & 0x3f) as usize;
            let bbs = (ds * 16).div_ceil(64).max(1) as u16;
            let signaled = (ctrl[0x0b] >> 2) & 3 >= 2;
            let opcode = ctrl[3];
            let mut frame = Vec::new();
            let mut ok = ds >= 2 && opcode == crate::datapath::wqe_op::SEND;
            if ok {
                if let Some(w) = read(hw, ds * 16) {
                    let eth = &w[16..32];
                    let cs = eth[4];
                    let hsz = u16::from_be_bytes([eth[0x0c], eth[0x0d]]) as usize;
                    let hdr_end = 16 + 0x0e + hsz;
                    if hdr_end > w.len() {
                        ok = false;
                    } else {
                        frame.extend_from_slice(&w[16 + 0x0e..hdr_end]);
                        let mut off = (hdr_end - 16).div_ceil(16) * 16 + 16;
                        while ok && off + 16 <= w.len() {
                            let s = &w[off..off + 16];
                            let bc = u32::from_be_bytes(s[0..4].try_into().unwrap()) as usize;
                            let lkey = u32::from_be_bytes(s[4..8].try_into().unwrap());
                            let addr = u64::from_be_bytes(s[8..16].try_into().unwrap());
                            if bc == 0 && lkey == 0 {
                                break;
                            }
                            match self.raw_translate(sq.pd, sq.rlky, lkey, addr, bc) {
                                Some(pa) => {
                                    let mut b = vec![0u8; bc];
                                    ok = self.mem.dma_read(pa, &mut b).is_ok();
                                    frame.extend_from_slice(&b);
                                }
                                None => ok = false,
                            }
                            off += 16;
                        }
                        if ok && cs & 0x40 != 0 && frame.len() >= 34 && frame[12..14] == [8, 0] {
                            let ihl = (frame[14] & 0xf) as usize * 4;
                            if frame.len() >= 14 + ihl {
                                ipv4_checksum(&mut frame[14..14 + ihl]);
                            }
                        }
                    }
                } else {
                    ok = false;
                }
            }
            let idx = hw;
            hw = hw.wrapping_add(bbs);
            work += 1;
            if ok {
                if let Some(e) = self.engine.as_mut() {
                    e.send_raw(link, &frame);
                } else {
                    link.send(&frame);
                }
                self.raw.tx_frames += 1;
            }
            if signaled || !ok {
                let mut c = [0u8; 64];
                c[0x38..0x3c].copy_from_slice(&(((opcode as u32) << 24) | sqn).to_be_bytes());
                c[0x3c..0x3e].copy_from_slice(&idx.to_be_bytes());
                if ok {
                    c[0x3f] = cqe_op::REQ << 4;
                } else {
                    c[0x37] = crate::datapath::cqe_synd::LOCAL_QP_OP_ERR;
                    c[0x3f] = cqe_op::REQ_ERR << 4;
                }
                self.post_cqe(sq.cqn, &c);
            }
        }
        if let Some(s) = self.raw.sqs.get_mut(&sqn) {
            s.hw = hw;
        }
        work
    }
}

