//! The model's own syndromes; the interface's numbers (opcodes, statuses, event types, QP
//! states, register ids, `op_mod` values, UAR offsets, steering numbers) come from the shared `mlx5-ifc` facts and are re-exported here.

pub use mlx5_ifc::{
    access_reg, delivery, event, flow, op, pages_op, qp, reg, rmp_state, rq_type, status, uar, vport_state, wq_state, wq_type,
};

/// The model's syndromes. Real firmware syndromes are not published; the model gives every
/// check its own stable value so a test (or a driver log) can tell exactly which check fired.
/// Layout: 0x5E00_0000 | (status << 16) | check number.
pub mod synd {
    const fn s(status: u8, n: u16) -> u32 {
        0x5E00_0000 | ((status as u32) << 16) | n as u32
    }
    use super::status::*;
    pub const UNKNOWN_OPCODE: u32 = s(BAD_OP, 1);
    pub const BAD_OP_MOD: u32 = s(BAD_PARAM, 1);
    pub const BAD_FUNCTION_ID: u32 = s(BAD_PARAM, 2);
    pub const UNSUPPORTED_ISSI: u32 = s(BAD_PARAM, 3);
    pub const CAP_VALUE_OVER_MAX: u32 = s(BAD_PARAM, 4);
    pub const BAD_PAGE_ADDRESS: u32 = s(BAD_PARAM, 5);
    pub const DUPLICATE_PAGE: u32 = s(BAD_PARAM, 6);
    pub const UNKNOWN_REGISTER: u32 = s(BAD_PARAM, 7);
    pub const QUEUE_TOO_BIG: u32 = s(BAD_PARAM, 8);
    pub const UNALIGNED_PAS: u32 = s(BAD_PARAM, 9);
    pub const UNALIGNED_DBR: u32 = s(BAD_PARAM, 10);
    pub const BAD_CQE_SIZE: u32 = s(BAD_PARAM, 11);
    pub const BAD_ACCESS_MODE: u32 = s(BAD_PARAM, 12);
    pub const MTT_TOO_SHORT: u32 = s(BAD_PARAM, 13);
    pub const BAD_QP_TYPE: u32 = s(BAD_PARAM, 14);
    pub const QP1_EXISTS: u32 = s(BAD_PARAM, 15);
    pub const BAD_MTU: u32 = s(BAD_PARAM, 16);
    pub const BAD_GID_INDEX: u32 = s(BAD_PARAM, 17);
    pub const BAD_ROCE_VERSION: u32 = s(BAD_PARAM, 18);
    pub const OTHER_VPORT: u32 = s(BAD_PARAM, 19);
    pub const BAD_TEARDOWN_PROFILE: u32 = s(BAD_PARAM, 20);
    pub const BAD_RQ_SIZE: u32 = s(BAD_PARAM, 21);
    pub const BAD_PORT: u32 = s(BAD_PARAM, 22);
    pub const BAD_EVENT_MASK: u32 = s(BAD_PARAM, 23);
    pub const BAD_UAR_INDEX: u32 = s(BAD_PARAM, 24);
    pub const BAD_TS_FORMAT: u32 = s(BAD_PARAM, 25);
    pub const MISALIGNED_SQ: u32 = s(BAD_PARAM, 26);
    pub const RA_DEPTH_OVER_MAX: u32 = s(BAD_PARAM, 27);
    pub const VF_REGISTER: u32 = s(BAD_PARAM, 28);
    /// Port MTU (PMTU admin_mtu, vport context mtu) or QP path MTU over the port's max_mtu.
    pub const MTU_OVER_MAX: u32 = s(BAD_PARAM, 31);
    /// CREATE_RMP with a wq_type other than linked list.
    pub const BAD_WQ_TYPE: u32 = s(BAD_PARAM, 40);
    /// RMP stride too small for the next segment and one data segment, or over max_wqe_sz_rq.
    pub const BAD_RMP_STRIDE: u32 = s(BAD_PARAM, 41);
    /// MODIFY_RMP lwm not below the RMP's size.
    pub const BAD_LWM: u32 = s(BAD_PARAM, 42);
    /// MODIFY_RMP rmp_state is not the RMP's current state, or the new state is unknown.
    pub const BAD_RMP_STATE: u32 = s(BAD_RES_STATE, 1);
    pub const NO_SUCH_RMP: u32 = s(BAD_RES, 8);
    /// A queue counter set that was not allocated (QUERY/DEALLOC_Q_COUNTER, qpc.counter_set_id).
    pub const NO_SUCH_Q_COUNTER: u32 = s(BAD_PARAM, 43);
    pub const TEARDOWN_REFUSED: u32 = s(INT_ERR, 1);
    pub const NOT_ENABLED: u32 = s(BAD_SYS_STATE, 1);
    pub const ALREADY_ENABLED: u32 = s(BAD_SYS_STATE, 2);
    pub const NOT_INITIALIZED: u32 = s(BAD_SYS_STATE, 3);
    pub const ALREADY_INITIALIZED: u32 = s(BAD_SYS_STATE, 4);
    pub const MISSING_BOOT_PAGES: u32 = s(BAD_SYS_STATE, 5);
    pub const MISSING_INIT_PAGES: u32 = s(BAD_SYS_STATE, 6);
    pub const STILL_INITIALIZED: u32 = s(BAD_SYS_STATE, 7);
    pub const NO_SUCH_UAR: u32 = s(BAD_RES, 1);
    pub const NO_SUCH_EQ: u32 = s(BAD_RES, 2);
    pub const NO_SUCH_PD: u32 = s(BAD_RES, 3);
    pub const NO_SUCH_TD: u32 = s(BAD_RES, 4);
    pub const NO_SUCH_CQ: u32 = s(BAD_RES, 5);
    pub const NO_SUCH_MKEY: u32 = s(BAD_RES, 6);
    pub const NO_SUCH_QP: u32 = s(BAD_RES, 7);
    pub const IN_USE: u32 = s(RES_BUSY, 1);
    pub const OUT_OF_OBJECTS: u32 = s(NO_RES, 1);
    pub const PAGES_REFUSED: u32 = s(NO_RES, 2);
    pub const BAD_TRANSITION: u32 = s(BAD_QP_STATE, 1);
    pub const INPUT_TOO_SHORT: u32 = s(BAD_INP_LEN, 1);
    pub const OUTPUT_TOO_SHORT: u32 = s(BAD_OUTP_LEN, 1);
    pub const FORCED: u32 = 0x5EFF_0000;
}
