//! Raw Ethernet: a TIS + SQ for transmit, an RQ + TIR + NIC_RX flow table for receive, so the
//! driver sees non-RoCE frames (ARP) [reference mlx5.md §3]. RoCEv2 frames for our GIDs are taken
//! by the adapter's RoCE engine before NIC_RX steering.
//!
//! One wildcard rule (group with no match criteria, one FWD_DEST entry to the TIR) steers every
//! remaining frame to the RQ; frames are sent inline (the whole frame in the Ethernet segment's
//! inline header), which suits ARP-sized control traffic.
//!
//! The SQ and RQ are [`WorkRing`]s and the CQs are polled by their [`crate::ring::CompletionRing`]
//! (room, WQEBB copy with wrap, doorbell records, the UAR doorbell write, CQE ownership), as for
//! RC/UD queues; the Ethernet WQE's segments are this file's own.

use crate::cmd::{op, MAX_MSG};
use crate::datapath::{cqe_op, poll_ring, wqe_op, WQEBB};
use crate::device::Mlx5;
use crate::error::Error;
use crate::ifc::*;
use crate::layout::{get, set, Field};
use crate::ring::WorkRing;
use hal::{DmaRegion, Hal, Mmio};
use mlx5_ifc::{ctrl_flags, flow};
use rdma::{Completion, Cqn, WcStatus};

const LOG_SQ: u8 = 6; // 64 WQEBBs
const LOG_RQ: u8 = 6; // 64 receive buffers
const RX_BUF: usize = 2048;
/// log2 of a receive WQE (one data segment).
const LOG_RQ_STRIDE: u8 = 4;
/// The doorbell records in `RawEth::dbr`: the SQ's at 0 (its DBR[1]), the RQ's at 32 (DBR[0]).
const SQ_DBR: usize = 0;
const RQ_DBR: usize = 32;
const WQ_CYCLIC: u64 = mlx5_ifc::wq_type::CYCLIC as u64;
const WQ_RST: u64 = mlx5_ifc::wq_state::RST as u64;
const WQ_RDY: u64 = mlx5_ifc::wq_state::RDY as u64;
const TABLE_NIC_RX: u64 = flow::TABLE_NIC_RX as u64;
const ACTION_FWD_DEST: u64 = flow::ACTION_FWD_DEST as u64;
const DEST_TIR: u64 = flow::DEST_TIR as u64;
/// Frames up to this many bytes go whole inline in the WQE (one doorbell, no buffer).
pub const MAX_INLINE_FRAME: usize = 256;
/// Largest frame `send_frame` takes: an Ethernet frame for a 1,500-byte MTU, FCS excluded. Longer
/// than [`MAX_INLINE_FRAME`], the frame's first [`INLINE_HDR`] bytes go inline and the rest is
/// gathered from the send slot's buffer.
pub const MAX_FRAME: usize = 1514;
/// Bytes inlined ahead of a gathered frame: the L2 header (with a VLAN tag's room) that the
/// strictest inline mode asks for (ConnectX-4 Lx, `wqe_inline_mode` L2: 18 bytes).
const INLINE_HDR: usize = 18;
/// Send buffer per SQ slot (a gathered frame's tail).
const TX_BUF: usize = 2048;
/// CQEs taken from a raw CQ per pass of the shared ring poll.
const CQE_BATCH: usize = 16;

/// The raw Ethernet objects (ids as the firmware numbered them).
pub struct RawEth<D> {
    tis: u32,
    sqn: u32,
    rqn: u32,
    tir: u32,
    table: u32,
    group: u32,
    pub tx_cq: Cqn,
    pub rx_cq: Cqn,
    sq_buf: D,
    rq_buf: D,
    dbr: D,
    rx: D,
    /// Send buffers, one per SQ WQEBB slot (a gathered frame uses the slot its WQE starts at).
    tx: D,
    sq: WorkRing,
    rq: WorkRing,
    /// Reserved lkey (the WQs are created with rlky: physical addresses).
    lkey: u32,
    /// Frames sent / received / dropped for errors.
    pub tx_frames: u64,
    pub rx_frames: u64,
    pub rx_errors: u64,
}

impl<H: Hal, M: Mmio> Mlx5<H, M> {
    fn raw_cmd(&mut self, opcode: u16, in_len: usize, out_len: usize, fields: &[(Field, u64)]) -> Result<(), Error> {
        self.begin(opcode, 0, in_len);
        for &(f, v) in fields {
            set(&mut self.inb, f, v);
        }
        self.run(in_len, out_len)
    }

    /// Create the raw Ethernet path (idempotent).
    pub fn enable_raw_eth(&mut self) -> Result<(), Error> {
        if self.raw.is_some() {
            return Ok(());
        }
        let td = self.transport_domain().ok_or(Error::InvalidArgument("no transport domain"))?;
        let pd = self.pd().ok_or(Error::InvalidArgument("no PD"))?.0;
        let uar = self.uar().unwrap_or(0);
        let tx_cq = self.create_cq(LOG_SQ)?;
        let rx_cq = self.create_cq(LOG_RQ)?;
        let sq_buf = self.hal.dma_alloc((1 << LOG_SQ) * WQEBB, 4096)?;
        let rq_buf = self.hal.dma_alloc((1 << LOG_RQ) << LOG_RQ_STRIDE, 4096)?;
        let dbr = self.hal.dma_alloc(64, 64)?; // SQ_DBR, RQ_DBR
        let rx = self.hal.dma_alloc((1 << LOG_RQ) * RX_BUF, 4096)?;
        let tx = self.hal.dma_alloc((1 << LOG_SQ) * TX_BUF, 4096)?;

        // TIS
        let tis_ctx = create_tis_in::ctx;
        self.raw_cmd(op::CREATE_TIS, create_tis_in::LAYOUT.size, create_tis_out::LAYOUT.size, &[(tisc::transport_domain.at(tis_ctx), td as u64)])?;
        let tis = self.out(create_tis_out::tisn) as u32;
        let mut raw = RawEth {
            tis,
            sqn: 0,
            rqn: 0,
            tir: 0,
            table: 0,
            group: 0,
            tx_cq,
            rx_cq,
            sq_buf,
            rq_buf,
            dbr,
            rx,
            tx,
            sq: WorkRing::send(0, LOG_SQ, SQ_DBR),
            rq: WorkRing::receive(0, LOG_RQ, LOG_RQ_STRIDE, RQ_DBR),
            lkey: self.reserved_lkey().0,
            tx_frames: 0,
            rx_frames: 0,
            rx_errors: 0,
        };
        let r = self.build_raw(&mut raw, td, pd, uar);
        let ok = r.is_ok();
        self.raw = Some(raw);
        if !ok {
            let _ = self.destroy_raw_eth();
        }
        r
    }

    fn build_raw(&mut self, raw: &mut RawEth<H::Dma>, td: u32, pd: u32, uar: u32) -> Result<(), Error> {
        // SQ (reset), then RDY.
        let c = create_sq_in::ctx;
        let w = sqc::wq.at(c);
        let in_len = create_sq_in::LAYOUT.size + 8;
        let mut f = [
            (sqc::rlky.at(c), 1),
            (sqc::flush_in_error_en.at(c), 1),
            (sqc::cqn.at(c), raw.tx_cq.0 as u64),
            (sqc::tis_lst_sz.at(c), 1),
            (sqc::tis_num_0.at(c), raw.tis as u64),
            (sqc::ts_format.at(c), crate::device::ts_format(self.caps.sq_ts_format)),
            (wq::wq_type.at(w), WQ_CYCLIC),
            (wq::pd.at(w), pd as u64),
            (wq::uar_page.at(w), uar as u64),
            (wq::dbr_addr.at(w), raw.dbr.paddr() + SQ_DBR as u64),
            (wq::log_wq_stride.at(w), 6),
            (wq::log_wq_pg_sz.at(w), 0),
            (wq::log_wq_sz.at(w), LOG_SQ as u64),
            (Field { off: create_sq_in::LAYOUT.size as u32 * 8, width: 64 }, raw.sq_buf.paddr()),
        ];
        self.raw_cmd(op::CREATE_SQ, in_len, create_sq_out::LAYOUT.size, &f)?;
        raw.sqn = self.out(create_sq_out::sqn) as u32;
        let mc = modify_sq_in::sq_context;
        self.raw_cmd(
            op::MODIFY_SQ,
            modify_sq_in::LAYOUT.size,
            mbox_out::LAYOUT.size,
            &[(modify_sq_in::sq_state, WQ_RST), (modify_sq_in::sqn, raw.sqn as u64), (sqc::state.at(mc), WQ_RDY)],
        )?;
        // RQ: 16-byte WQEs (one data segment), reserved lkey (rlky) with physical addresses.
        let c = create_rq_in::ctx;
        let w = rqc::wq.at(c);
        f = [
            (rqc::rlky.at(c), 1),
            (rqc::vsd.at(c), 1),
            (rqc::cqn.at(c), raw.rx_cq.0 as u64),
            (rqc::flush_in_error_en.at(c), 1),
            (rqc::mem_rq_type.at(c), 0),
            (rqc::ts_format.at(c), crate::device::ts_format(self.caps.rq_ts_format)),
            (wq::wq_type.at(w), WQ_CYCLIC),
            (wq::pd.at(w), pd as u64),
            (wq::dbr_addr.at(w), raw.dbr.paddr() + RQ_DBR as u64),
            (wq::log_wq_stride.at(w), LOG_RQ_STRIDE as u64),
            (wq::log_wq_pg_sz.at(w), 0),
            (wq::log_wq_sz.at(w), LOG_RQ as u64),
            (Field { off: create_rq_in::LAYOUT.size as u32 * 8, width: 64 }, raw.rq_buf.paddr()),
            (wq::uar_page.at(w), 0),
        ];
        self.raw_cmd(op::CREATE_RQ, create_rq_in::LAYOUT.size + 8, create_rq_out::LAYOUT.size, &f)?;
        raw.rqn = self.out(create_rq_out::rqn) as u32;
        // Fill the RQ before it goes RDY.
        for _ in 0..(1u16 << LOG_RQ) {
            post_rx(raw);
        }
        let mc = modify_rq_in::ctx;
        self.raw_cmd(
            op::MODIFY_RQ,
            modify_rq_in::LAYOUT.size,
            mbox_out::LAYOUT.size,
            &[(modify_rq_in::rq_state, WQ_RST), (modify_rq_in::rqn, raw.rqn as u64), (rqc::state.at(mc), WQ_RDY)],
        )?;
        // TIR (direct dispatch to the RQ).
        let c = create_tir_in::ctx;
        self.raw_cmd(
            op::CREATE_TIR,
            create_tir_in::LAYOUT.size,
            create_tir_out::LAYOUT.size,
            &[(tirc::disp_type.at(c), 0), (tirc::inline_rqn.at(c), raw.rqn as u64), (tirc::transport_domain.at(c), td as u64)],
        )?;
        raw.tir = self.out(create_tir_out::tirn) as u32;
        // NIC_RX table, one wildcard group, one FWD_DEST→TIR entry, made root.
        let ftc = create_flow_table_in::flow_table_context;
        self.raw_cmd(
            op::CREATE_FLOW_TABLE,
            create_flow_table_in::LAYOUT.size,
            create_flow_table_out::LAYOUT.size,
            &[(create_flow_table_in::table_type, TABLE_NIC_RX), (flow_table_context::level.at(ftc), 0), (flow_table_context::log_size.at(ftc), 0)],
        )?;
        raw.table = self.out(create_flow_table_out::table_id) as u32;
        self.raw_cmd(
            op::CREATE_FLOW_GROUP,
            create_flow_group_in::LAYOUT.size,
            create_flow_group_out::LAYOUT.size,
            &[
                (create_flow_group_in::table_type, TABLE_NIC_RX),
                (create_flow_group_in::table_id, raw.table as u64),
                (create_flow_group_in::start_flow_index, 0),
                (create_flow_group_in::end_flow_index, 0),
                (create_flow_group_in::match_criteria_enable, 0),
            ],
        )?;
        raw.group = self.out(create_flow_group_out::group_id) as u32;
        let fc = set_fte_in::flow_context;
        let dest = flow_context::destination.at(fc);
        let in_len = set_fte_in::LAYOUT.size + dest_format_struct::LAYOUT.size;
        if in_len > MAX_MSG {
            return Err(Error::InvalidArgument("flow entry too large"));
        }
        self.raw_cmd(
            op::SET_FLOW_TABLE_ENTRY,
            in_len,
            mbox_out::LAYOUT.size,
            &[
                (set_fte_in::table_type, TABLE_NIC_RX),
                (set_fte_in::table_id, raw.table as u64),
                (set_fte_in::flow_index, 0),
                (flow_context::group_id.at(fc), raw.group as u64),
                (flow_context::action.at(fc), ACTION_FWD_DEST),
                (flow_context::destination_list_size.at(fc), 1),
                (dest_format_struct::destination_type.at(dest), DEST_TIR),
                (dest_format_struct::destination_id.at(dest), raw.tir as u64),
            ],
        )?;
        self.raw_cmd(
            op::SET_FLOW_TABLE_ROOT,
            set_flow_table_root_in::LAYOUT.size,
            mbox_out::LAYOUT.size,
            &[(set_flow_table_root_in::table_type, TABLE_NIC_RX), (set_flow_table_root_in::table_id, raw.table as u64)],
        )?;
        Ok(())
    }

    /// Tear the raw path down (reverse order); called by shutdown too.
    pub fn destroy_raw_eth(&mut self) -> Result<(), Error> {
        let Some(raw) = self.raw.take() else { return Ok(()) };
        let mut first: Result<(), Error> = Ok(());
        let mut note = |r: Result<(), Error>| {
            if first.is_ok() {
                if let Err(e) = r {
                    first = Err(e);
                }
            }
        };
        let t = TABLE_NIC_RX;
        if raw.group != 0 || raw.table != 0 {
            note(self.raw_cmd(
                op::DELETE_FLOW_TABLE_ENTRY,
                delete_fte_in::LAYOUT.size,
                mbox_out::LAYOUT.size,
                &[(delete_fte_in::table_type, t), (delete_fte_in::table_id, raw.table as u64), (delete_fte_in::flow_index, 0)],
            ));
            note(self.raw_cmd(
                op::DESTROY_FLOW_GROUP,
                destroy_flow_group_in::LAYOUT.size,
                mbox_out::LAYOUT.size,
                &[(destroy_flow_group_in::table_type, t), (destroy_flow_group_in::table_id, raw.table as u64), (destroy_flow_group_in::group_id, raw.group as u64)],
            ));
            note(self.raw_cmd(
                op::DESTROY_FLOW_TABLE,
                destroy_flow_table_in::LAYOUT.size,
                mbox_out::LAYOUT.size,
                &[(destroy_flow_table_in::table_type, t), (destroy_flow_table_in::table_id, raw.table as u64)],
            ));
        }
        if raw.tir != 0 {
            note(self.raw_cmd(op::DESTROY_TIR, destroy_tir_in::LAYOUT.size, mbox_out::LAYOUT.size, &[(destroy_tir_in::tirn, raw.tir as u64)]));
        }
        if raw.rqn != 0 {
            note(self.raw_cmd(op::DESTROY_RQ, destroy_rq_in::LAYOUT.size, mbox_out::LAYOUT.size, &[(destroy_rq_in::rqn, raw.rqn as u64)]));
        }
        if raw.sqn != 0 {
            note(self.raw_cmd(op::DESTROY_SQ, destroy_sq_in::LAYOUT.size, mbox_out::LAYOUT.size, &[(destroy_sq_in::sqn, raw.sqn as u64)]));
        }
        note(self.raw_cmd(op::DESTROY_TIS, destroy_tis_in::LAYOUT.size, mbox_out::LAYOUT.size, &[(destroy_tis_in::tisn, raw.tis as u64)]));
        note(self.destroy_cq(raw.tx_cq));
        note(self.destroy_cq(raw.rx_cq));
        first
    }

    /// Send one Ethernet frame (≤ [`MAX_FRAME`] bytes, padded to 60): inline in the WQE up to
    /// [`MAX_INLINE_FRAME`] bytes, else its header inline and the rest gathered from the slot's
    /// send buffer (reserved lkey: the queue takes physical addresses).
    pub fn send_frame(&mut self, frame: &[u8]) -> Result<(), Error> {
        self.reap_tx();
        let uar = self.uar_base();
        let raw = self.raw.as_mut().ok_or(Error::InvalidArgument("raw Ethernet not enabled"))?;
        if frame.len() > MAX_FRAME || frame.len() < 14 {
            return Err(Error::InvalidArgument("frame size"));
        }
        let pi = raw.sq.pi();
        let len = frame.len().max(60);
        let gather = frame.len() > MAX_INLINE_FRAME;
        let inline = if gather { INLINE_HDR } else { len };
        // Whole WQEBBs: the copy below takes 64 bytes per basic block.
        let mut w = [0u8; (16 + 16 + MAX_INLINE_FRAME + 16).div_ceil(WQEBB) * WQEBB];
        let eth = &mut w[16..32];
        set(eth, wqe_eth_seg::inline_hdr_sz, inline as u64);
        let at = 16 + wqe_eth_seg::inline_hdr_start.byte();
        let mut total = (at + inline).div_ceil(16) * 16;
        if gather {
            w[at..at + INLINE_HDR].copy_from_slice(&frame[..INLINE_HDR]);
            let tail = &frame[INLINE_HDR..];
            let slot = raw.sq.slot(pi);
            let d = &mut w[total..total + 16];
            set(d, wqe_data_seg::byte_count, tail.len() as u64);
            set(d, wqe_data_seg::lkey, raw.lkey as u64);
            set(d, wqe_data_seg::addr, raw.tx.paddr() + (slot * TX_BUF) as u64);
            total += 16;
            if !raw.sq.has_room(total.div_ceil(WQEBB)) {
                return Err(Error::InvalidArgument("raw send queue full"));
            }
            raw.tx.write(slot * TX_BUF, tail);
        } else {
            w[at..at + frame.len()].copy_from_slice(frame);
        }
        let nbb = total.div_ceil(WQEBB);
        if !raw.sq.has_room(nbb) {
            return Err(Error::InvalidArgument("raw send queue full"));
        }
        set(&mut w, wqe_ctrl_seg::wqe_index, pi as u64);
        set(&mut w, wqe_ctrl_seg::opcode, wqe_op::SEND as u64);
        set(&mut w, wqe_ctrl_seg::qpn, raw.sqn as u64);
        set(&mut w, wqe_ctrl_seg::ds, (total / 16) as u64);
        set(&mut w, wqe_ctrl_seg::fm_ce_se, ctrl_flags::CQ_UPDATE as u64);
        let first8 = raw.sq.put_wqe(&raw.sq_buf, pi, &w, nbb);
        raw.sq.advance(nbb as u16);
        raw.tx_frames += 1;
        raw.sq.ring_doorbell(&raw.dbr, &self.bar, uar, first8);
        Ok(())
    }

    fn reap_tx(&mut self) {
        let Some(tx_cq) = self.raw.as_ref().map(|r| r.tx_cq) else { return };
        let Ok(i) = self.cq_index(tx_cq) else { return };
        let (Some(raw), cq) = (self.raw.as_mut(), &mut self.cqs[i]) else { return };
        let mut done = [Completion::default(); CQE_BATCH];
        loop {
            // One WQE per frame; WQEs are ≤ 5 WQEBBs. Completed up to and including the CQE's
            // WQE counter (carried in `wr_id`).
            let n = poll_ring(cq, &mut done, |e, c| {
                *c = Completion { wr_id: get(e, cqe64::wqe_counter), ..Completion::default() };
                true
            });
            for c in &done[..n] {
                let counter = c.wr_id as u16;
                raw.sq.complete_to(counter.wrapping_add(frame_bbs(&raw.sq_buf, &raw.sq, counter)));
            }
            if n < done.len() {
                break;
            }
        }
    }

    /// Hand every received frame to `f` (and re-post its buffer). Returns how many.
    pub fn poll_frames(&mut self, mut f: impl FnMut(&[u8])) -> usize {
        self.reap_tx();
        let Some(rx_cq) = self.raw.as_ref().map(|r| r.rx_cq) else { return 0 };
        let Ok(i) = self.cq_index(rx_cq) else { return 0 };
        let (Some(raw), cq) = (self.raw.as_mut(), &mut self.cqs[i]) else { return 0 };
        let mut n = 0;
        let mut done = [Completion::default(); CQE_BATCH];
        loop {
            // The receive's WQE counter names its buffer slot (`wr_id`); a receive that is not
            // a SEND's is an error.
            let got = poll_ring(cq, &mut done, |e, c| {
                let op = get(e, cqe64::opcode) as u8;
                *c = Completion {
                    wr_id: get(e, cqe64::wqe_counter),
                    byte_len: get(e, cqe64::byte_cnt) as u32,
                    status: if op == cqe_op::RESP_SEND { WcStatus::Success } else { WcStatus::Other(op) },
                    ..Completion::default()
                };
                true
            });
            if got == 0 {
                break;
            }
            // (Made only when frames came: this runs on every housekeeping turn.)
            let mut buf = [0u8; RX_BUF];
            for c in &done[..got] {
                let slot = raw.rq.slot(c.wr_id as u16);
                let len = (c.byte_len as usize).min(RX_BUF);
                if c.status == WcStatus::Success {
                    raw.rx.read(slot * RX_BUF, &mut buf[..len]);
                    raw.rx_frames += 1;
                    f(&buf[..len]);
                    n += 1;
                } else {
                    raw.rx_errors += 1;
                }
                post_rx(raw);
            }
            if got < done.len() {
                break;
            }
        }
        n
    }

    /// The raw Ethernet queue's frame counts (None before it is set up).
    pub fn raw_stats(&self) -> Option<RawStats> {
        self.raw.as_ref().map(|r| RawStats { tx_frames: r.tx_frames, rx_frames: r.rx_frames, rx_errors: r.rx_errors })
    }
}

/// Frames through the raw Ethernet queue ([`Mlx5::raw_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RawStats {
    pub tx_frames: u64,
    pub rx_frames: u64,
    /// Receive completions with an error.
    pub rx_errors: u64,
}

/// WQEBBs of the raw WQE starting at `idx` of `ring` (from its ctrl segment's ds).
fn frame_bbs<D: DmaRegion>(buf: &D, ring: &WorkRing, idx: u16) -> u16 {
    let mut c = [0u8; 16];
    buf.read(ring.offset(idx), &mut c);
    let ds = get(&c, wqe_ctrl_seg::ds) as usize;
    (ds * 16).div_ceil(WQEBB).max(1) as u16
}

/// Post the receive buffer of the RQ's next slot (buffer slot = WQE slot) and bump the RQ
/// doorbell record.
fn post_rx<D: DmaRegion>(raw: &mut RawEth<D>) {
    let slot = raw.rq.slot(raw.rq.pi());
    let mut w = [0u8; 1 << LOG_RQ_STRIDE];
    set(&mut w, wqe_data_seg::byte_count, RX_BUF as u64);
    set(&mut w, wqe_data_seg::lkey, raw.lkey as u64);
    set(&mut w, wqe_data_seg::addr, raw.rx.paddr() + (slot * RX_BUF) as u64);
    raw.rq.put(&raw.rq_buf, &w);
    raw.rq.advance(1);
    raw.rq.write_record(&raw.dbr);
}
