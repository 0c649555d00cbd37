//! Firmware rules that differ between parts or that real firmware enforces strictly, driven by
//! the device profile: timestamp formats, SQ start alignment, port and path MTU within the
//! port's max_mtu, RDMA read/atomic depth limits,
//! VF register restrictions, fatal async EQ overrun, doorbell recovery on CQs, page requests
//! raised in the middle of a command (teardown: [`crate::model::teardown`]).
//!
//! Each rule cites what it models. Where no public source states the firmware's exact reaction
//! (e.g. which syndrome), the reaction is the model's own and says so.

use log::warn;

use crate::consts::{event, status as st, synd};
use mlx5_ifc::ts_format as ts;
use crate::model::{Device, FuncState};
use crate::profile::TsCap;

/// Health syndrome for an async EQ overrun ("async EQ buffer overrun").
pub const HEALTH_SYND_ASYNC_EQ_OVERRUN: u8 = mlx5_ifc::health_synd::ASYNC_EQ_OVERRUN_ERR;
/// A send WQE basic block; the SQ must start on one.
pub const SEND_WQE_BB: u64 = mlx5_ifc::queue::WQEBB as u64;

/// Whether a context's `ts_format` is acceptable under the capability `cap` [mlx5_ifc.h]:
/// free-running-only parts know only FREE_RUNNING (older firmware: a reserved field, must be
/// 0); real-time-only parts refuse FREE_RUNNING; parts with both accept any defined value.
pub fn ts_format_ok(cap: TsCap, v: u64) -> bool {
    match cap {
        TsCap::FreeRunning => v == ts::FREE_RUNNING as u64,
        TsCap::RealTime => v == ts::DEFAULT as u64 || v == ts::REAL_TIME as u64,
        TsCap::Both => v <= ts::REAL_TIME as u64,
    }
}

impl Device {
    pub(crate) fn check_ts_format(&self, cap: TsCap, v: u64) -> Result<(), (u8, u32)> {
        if ts_format_ok(cap, v) {
            Ok(())
        } else {
            warn!("cx: ts_format {v} refused ({} has {cap:?} timestamps)", self.cfg.profile.name);
            Err((st::BAD_PARAM, synd::BAD_TS_FORMAT))
        }
    }

    /// The SQ starts right after the RQ in a QP buffer; it must start on a WQEBB boundary.
    pub fn sq_start_ok(rq_bytes: u64, has_sq: bool) -> Result<(), (u8, u32)> {
        if has_sq && !rq_bytes.is_multiple_of(SEND_WQE_BB) {
            return Err((st::BAD_PARAM, synd::MISALIGNED_SQ));
        }
        Ok(())
    }

    /// log_sra_max / log_rra_max may not exceed log_max_ra_req_qp / log_max_ra_res_qp.
    pub fn ra_depth_ok(&self, log_sra: Option<u64>, log_rra: Option<u64>) -> Result<(), (u8, u32)> {
        let caps = &self.cfg.profile.caps;
        if log_sra.is_some_and(|v| v > caps.log_max_ra_req_qp as u64) || log_rra.is_some_and(|v| v > caps.log_max_ra_res_qp as u64) {
            return Err((st::BAD_PARAM, synd::RA_DEPTH_OVER_MAX));
        }
        Ok(())
    }

    /// HOST_ENDIANNESS is the PF's register: a VF may not write it (Linux `mlx5_core` writes it
    /// only when `mlx5_core_is_pf`). The refusal (BAD_PARAM) is the model's choice.
    pub(crate) fn check_host_endianness_access(&self, write: bool) -> Result<(), (u8, u32)> {
        if write && self.cfg.profile.behaviour.vf {
            return Err((st::BAD_PARAM, synd::VF_REGISTER));
        }
        Ok(())
    }

    /// MANAGE_PAGES / QUERY_PAGES name the function the pages are for: the one the firmware
    /// named in QUERY_PAGES and in its page-request events.
    pub(crate) fn check_page_function(&self, func: u64) -> Result<(), (u8, u32)> {
        if func != self.cfg.profile.behaviour.function_id as u64 {
            return Err((st::BAD_PARAM, synd::BAD_FUNCTION_ID));
        }
        Ok(())
    }

    /// An EQ without overrun-ignore got more EQEs than it holds. For an EQ carrying async
    /// events the firmware declares itself dead (health syndrome 0xc, commands stop); a
    /// completion-only EQ just stops.
    pub(crate) fn eq_overrun(&mut self, eqn: u8, mask: u64) {
        self.ctr.eq_overruns += 1;
        warn!("cx: EQ {eqn} overrun");
        if mask & !(1u64 << event::COMPLETION) != 0 {
            warn!("cx: async EQ {eqn} overrun: fatal health syndrome {HEALTH_SYND_ASYNC_EQ_OVERRUN:#x}");
            self.set_health_syndrome(HEALTH_SYND_ASYNC_EQ_OVERRUN);
        }
    }

    /// Doorbell recovery (profiles with `db_recovery`): after a CQE, a CQ that is not armed and
    /// whose doorbell-record arm word was never written (sequence 0) is taken as having lost
    /// its arm doorbell, and recovery arms it: a completion event follows. A polled CQ avoids
    /// this by writing arm sequence 2 (Linux dr_send.c `2 << 28`). Representative: what
    /// recovery does exactly is not public; the model's reaction is an event per CQE.
    pub(crate) fn db_recovery(&mut self, cqn: u32) {
        if !self.cfg.profile.behaviour.db_recovery {
            return;
        }
        let Some(cq) = self.cqs.get(&cqn) else { return };
        if cq.armed.is_some() {
            return;
        }
        let (dbr, eqn) = (cq.dbr, cq.c_eqn);
        match self.mem.dma_read_be32(dbr.wrapping_add(4)) {
            Ok(word) if word >> 28 == 0 => {
                self.ctr.db_recoveries += 1;
                self.completion_event(eqn, cqn);
            }
            Ok(_) => {}
            Err(_) => self.ctr.dma_faults += 1,
        }
    }

    /// Page request in the middle of a command (profiles listing `opcode`): the firmware asks
    /// for pages with a page-request event and keeps the command (its slot stays owned by
    /// hardware) until MANAGE_PAGES brings them. Returns true when the command was parked.
    pub(crate) fn park_for_pages(&mut self, slot: u32, opcode: u16) -> bool {
        let pages = &self.cfg.profile.pages;
        if pages.mid_command == 0 || !pages.mid_command_opcodes.contains(&opcode) || self.func != FuncState::Initialized {
            return false;
        }
        let n = pages.mid_command;
        if !self.request_pages_eqe(n as i32) {
            return false; // no EQ to ask on: the firmware makes do
        }
        self.extra_regular += n as i64;
        self.page_req_outstanding = self.page_req_outstanding.saturating_add(n);
        self.parked = Some(slot);
        self.ctr.mid_command_page_requests += 1;
        true
    }

    /// Run the parked command once its pages are there.
    pub(crate) fn resume_parked(&mut self) {
        let Some(slot) = self.parked else { return };
        if (self.pages.len() as i64) < self.page_target() && self.health_synd == 0 {
            return;
        }
        self.parked = None;
        self.run_slot_now(slot);
    }

    /// A port MTU (PMTU admin_mtu, NIC vport context mtu) may not exceed the profile's
    /// max_mtu (PMTU max_mtu; Linux `mlx5e_change_mtu` checks the same bound before asking).
    pub(crate) fn check_port_mtu(&self, mtu: u64) -> Result<(), (u8, u32)> {
        if mtu > self.cfg.profile.caps.max_mtu as u64 {
            warn!("cx: MTU {mtu} over the port's max_mtu {}", self.cfg.profile.caps.max_mtu);
            return Err((st::BAD_PARAM, synd::MTU_OVER_MAX));
        }
        Ok(())
    }

    /// An RC path MTU (qpc.mtu, IB MTU code 1..=5 = 256..4096 bytes) whose RoCEv2 packets do
    /// not fit in the port's max_mtu is refused. The RoCEv2 overhead counted is Linux
    /// `iboe_get_mtu`'s (GRH 40 + UDP 8 + BTH 12 + XRC 4 + AtomicETH 28 + ICRC 4 = 96 bytes).
    /// Model's choice: which status real firmware answers with is not public.
    pub(crate) fn check_path_mtu(&self, code: u64) -> Result<(), (u8, u32)> {
        let bytes = 128u64 << code.min(5);
        if bytes + rdma::cm_wire::ROCEV2_MTU_OVERHEAD as u64 > self.cfg.profile.caps.max_mtu as u64 {
            warn!("cx: path MTU {bytes} does not fit the port's max_mtu {}", self.cfg.profile.caps.max_mtu);
            return Err((st::BAD_PARAM, synd::MTU_OVER_MAX));
        }
        Ok(())
    }

    /// ACCESS_REG PMTU (port 1): read reports max_mtu (the profile's), admin and operational
    /// MTU (the vport's); write sets admin_mtu within max_mtu [mlx5_ifc.h pmtu_reg].
    pub(crate) fn pmtu_reg(&mut self, read: bool, data: &[u8]) -> Result<Vec<u8>, (u8, u32)> {
        use mlx5_ifc::{ifc::pmtu_reg as p, layout::{get, set}};
        if data.len() < p::SIZE {
            return Err((st::BAD_INP_LEN, synd::INPUT_TOO_SHORT));
        }
        if get(data, p::local_port) != 1 {
            return Err((st::BAD_PARAM, synd::BAD_PORT));
        }
        if !read {
            let admin = get(data, p::admin_mtu);
            self.check_port_mtu(admin)?;
            self.vport.mtu = admin as u16;
        }
        let mut o = vec![0u8; 16 + p::SIZE];
        let r = &mut o[16..];
        set(r, p::local_port, 1);
        set(r, p::max_mtu, self.cfg.profile.caps.max_mtu as u64);
        set(r, p::admin_mtu, self.vport.mtu as u64);
        set(r, p::oper_mtu, self.vport.mtu as u64);
        Ok(o)
    }

    /// This function's ID as the firmware names it in page requests and QUERY_PAGES.
    pub(crate) fn function_id(&self) -> u16 {
        self.cfg.profile.behaviour.function_id
    }
}
