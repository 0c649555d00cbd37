//! Command execution: the firmware's checks common to every command (known opcode, function
//! state, op_mod) and the dispatch to the object that executes it (one module per object).

use super::{fail, need, out, CmdResult, Device, FuncState};
use crate::consts::{op, status as st, synd};

impl Device {
    /// Execute one delivered command: status and syndrome on failure, output bytes on success.
    pub(super) fn exec(&mut self, opcode: u16, op_mod: u16, inp: &[u8]) -> CmdResult {
        use FuncState::*;
        let pre_init = matches!(
            opcode,
            op::QUERY_ISSI | op::SET_ISSI | op::QUERY_PAGES | op::MANAGE_PAGES | op::QUERY_HCA_CAP
                | op::SET_HCA_CAP | op::ACCESS_REG | op::INIT_HCA | op::DISABLE_HCA | op::SET_DRIVER_VERSION
                | op::TEARDOWN_HCA
        );
        if op::name(opcode).is_none() {
            return fail(st::BAD_OP, synd::UNKNOWN_OPCODE);
        }
        match (opcode, self.func) {
            (op::ENABLE_HCA, Disabled) => {}
            (op::ENABLE_HCA, _) => return fail(st::BAD_SYS_STATE, synd::ALREADY_ENABLED),
            (_, Disabled) => return fail(st::BAD_SYS_STATE, synd::NOT_ENABLED),
            (_, Initialized) => {}
            (_, Enabled | TornDown) if pre_init => {}
            _ => return fail(st::BAD_SYS_STATE, synd::NOT_INITIALIZED),
        }
        let op_mod_ok = match opcode {
            op::QUERY_HCA_CAP => matches!(op_mod >> 1, 0 | 1 | 4),
            op::SET_HCA_CAP => op_mod & 1 == 0 && matches!(op_mod >> 1, 0 | 4),
            op::QUERY_PAGES => (1..=3).contains(&op_mod),
            op::MANAGE_PAGES => op_mod <= 2,
            op::ACCESS_REG => op_mod <= 1,
            _ => op_mod == 0,
        };
        if !op_mod_ok {
            return fail(st::BAD_PARAM, synd::BAD_OP_MOD);
        }
        need(inp, 16)?;
        match opcode {
            op::ENABLE_HCA => self.enable_hca(inp),
            op::DISABLE_HCA => self.disable_hca(inp),
            op::QUERY_ISSI => self.query_issi(),
            op::SET_ISSI => self.set_issi(inp),
            op::QUERY_PAGES => self.query_pages(op_mod),
            op::MANAGE_PAGES => self.manage_pages(op_mod, inp),
            op::QUERY_HCA_CAP => self.query_hca_cap(op_mod),
            op::SET_HCA_CAP => self.set_hca_cap(op_mod, inp),
            op::INIT_HCA => self.init_hca(),
            op::TEARDOWN_HCA => self.teardown_hca(inp),
            op::SET_DRIVER_VERSION => Ok(out(16)),
            op::ACCESS_REG => self.access_reg(op_mod, inp),
            op::ALLOC_UAR => self.alloc_uar(),
            op::DEALLOC_UAR => self.dealloc_uar(inp),
            op::ALLOC_PD | op::ALLOC_TRANSPORT_DOMAIN => self.alloc_pd_or_td(opcode),
            op::DEALLOC_PD => self.dealloc_pd(inp),
            op::DEALLOC_TRANSPORT_DOMAIN => self.dealloc_td(inp),
            op::QUERY_SPECIAL_CONTEXTS => self.query_special_contexts(),
            op::CREATE_EQ => self.create_eq(inp),
            op::DESTROY_EQ => self.destroy_eq(inp),
            op::CREATE_CQ => self.create_cq(inp),
            op::DESTROY_CQ => self.destroy_cq(inp),
            op::QUERY_CQ => self.query_cq(inp),
            op::CREATE_MKEY => self.create_mkey(inp),
            op::DESTROY_MKEY => self.destroy_mkey(inp),
            op::QUERY_NIC_VPORT_CONTEXT => self.query_nic_vport_context(inp),
            op::MODIFY_NIC_VPORT_CONTEXT => self.modify_nic_vport_context(inp),
            op::QUERY_VPORT_STATE => self.query_vport_state(op_mod, inp),
            op::SET_ROCE_ADDRESS => self.set_roce_address(inp),
            op::QUERY_ROCE_ADDRESS => self.query_roce_address(inp),
            op::CREATE_QP => self.create_qp(inp),
            op::DESTROY_QP => self.destroy_qp(inp),
            op::RST2INIT_QP | op::INIT2INIT_QP | op::INIT2RTR_QP | op::RTR2RTS_QP | op::RTS2RTS_QP
            | op::SQERR2RTS_QP | op::QP_2ERR | op::QP_2RST => self.modify_qp(opcode, inp),
            op::QUERY_QP => self.query_qp(inp),
            op::CREATE_RMP => self.create_rmp(inp),
            op::MODIFY_RMP => self.modify_rmp(inp),
            op::DESTROY_RMP => self.destroy_rmp(inp),
            op::QUERY_RMP => self.query_rmp(inp),
            op::ALLOC_Q_COUNTER => self.alloc_q_counter(),
            op::DEALLOC_Q_COUNTER => self.dealloc_q_counter(inp),
            op::QUERY_Q_COUNTER => self.query_q_counter(inp),
            _ => self.exec_raw(opcode, inp).unwrap_or(Err((st::BAD_OP, synd::UNKNOWN_OPCODE))),
        }
    }
}
