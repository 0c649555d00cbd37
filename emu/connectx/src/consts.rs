//! Numbers of the programming interface: opcodes, statuses, event types [mlx5_ifc.h, device.h],
//! and the model's own syndromes.

/// Command opcodes [mlx5_ifc.h MLX5_CMD_OP_*].
pub mod op {
    pub const QUERY_HCA_CAP: u16 = 0x100;
    pub const INIT_HCA: u16 = 0x102;
    pub const TEARDOWN_HCA: u16 = 0x103;
    pub const ENABLE_HCA: u16 = 0x104;
    pub const DISABLE_HCA: u16 = 0x105;
    pub const QUERY_PAGES: u16 = 0x107;
    pub const MANAGE_PAGES: u16 = 0x108;
    pub const SET_HCA_CAP: u16 = 0x109;
    pub const QUERY_ISSI: u16 = 0x10a;
    pub const SET_ISSI: u16 = 0x10b;
    pub const SET_DRIVER_VERSION: u16 = 0x10d;
    pub const CREATE_MKEY: u16 = 0x200;
    pub const DESTROY_MKEY: u16 = 0x202;
    pub const QUERY_SPECIAL_CONTEXTS: u16 = 0x203;
    pub const CREATE_EQ: u16 = 0x301;
    pub const DESTROY_EQ: u16 = 0x302;
    pub const CREATE_CQ: u16 = 0x400;
    pub const DESTROY_CQ: u16 = 0x401;
    pub const QUERY_CQ: u16 = 0x402;
    pub const CREATE_QP: u16 = 0x500;
    pub const DESTROY_QP: u16 = 0x501;
    pub const RST2INIT_QP: u16 = 0x502;
    pub const INIT2RTR_QP: u16 = 0x503;
    pub const RTR2RTS_QP: u16 = 0x504;
    pub const RTS2RTS_QP: u16 = 0x505;
    pub const SQERR2RTS_QP: u16 = 0x506;
    pub const QP_2ERR: u16 = 0x507;
    pub const QP_2RST: u16 = 0x50a;
    pub const QUERY_QP: u16 = 0x50b;
    pub const INIT2INIT_QP: u16 = 0x50e;
    pub const QUERY_VPORT_STATE: u16 = 0x750;
    pub const QUERY_NIC_VPORT_CONTEXT: u16 = 0x754;
    pub const MODIFY_NIC_VPORT_CONTEXT: u16 = 0x755;
    pub const QUERY_ROCE_ADDRESS: u16 = 0x760;
    pub const SET_ROCE_ADDRESS: u16 = 0x761;
    pub const ALLOC_PD: u16 = 0x800;
    pub const DEALLOC_PD: u16 = 0x801;
    pub const ALLOC_UAR: u16 = 0x802;
    pub const DEALLOC_UAR: u16 = 0x803;
    pub const ACCESS_REG: u16 = 0x805;
    pub const ALLOC_TRANSPORT_DOMAIN: u16 = 0x816;
    pub const DEALLOC_TRANSPORT_DOMAIN: u16 = 0x817;

    /// Name of an opcode (for logs and reports).
    pub fn name(op: u16) -> &'static str {
        match op {
            QUERY_HCA_CAP => "QUERY_HCA_CAP",
            INIT_HCA => "INIT_HCA",
            TEARDOWN_HCA => "TEARDOWN_HCA",
            ENABLE_HCA => "ENABLE_HCA",
            DISABLE_HCA => "DISABLE_HCA",
            QUERY_PAGES => "QUERY_PAGES",
            MANAGE_PAGES => "MANAGE_PAGES",
            SET_HCA_CAP => "SET_HCA_CAP",
            QUERY_ISSI => "QUERY_ISSI",
            SET_ISSI => "SET_ISSI",
            SET_DRIVER_VERSION => "SET_DRIVER_VERSION",
            CREATE_MKEY => "CREATE_MKEY",
            DESTROY_MKEY => "DESTROY_MKEY",
            QUERY_SPECIAL_CONTEXTS => "QUERY_SPECIAL_CONTEXTS",
            CREATE_EQ => "CREATE_EQ",
            DESTROY_EQ => "DESTROY_EQ",
            CREATE_CQ => "CREATE_CQ",
            DESTROY_CQ => "DESTROY_CQ",
            QUERY_CQ => "QUERY_CQ",
            CREATE_QP => "CREATE_QP",
            DESTROY_QP => "DESTROY_QP",
            RST2INIT_QP => "RST2INIT_QP",
            INIT2RTR_QP => "INIT2RTR_QP",
            RTR2RTS_QP => "RTR2RTS_QP",
            RTS2RTS_QP => "RTS2RTS_QP",
            SQERR2RTS_QP => "SQERR2RTS_QP",
            QP_2ERR => "2ERR_QP",
            QP_2RST => "2RST_QP",
            QUERY_QP => "QUERY_QP",
            INIT2INIT_QP => "INIT2INIT_QP",
            QUERY_VPORT_STATE => "QUERY_VPORT_STATE",
            QUERY_NIC_VPORT_CONTEXT => "QUERY_NIC_VPORT_CONTEXT",
            MODIFY_NIC_VPORT_CONTEXT => "MODIFY_NIC_VPORT_CONTEXT",
            QUERY_ROCE_ADDRESS => "QUERY_ROCE_ADDRESS",
            SET_ROCE_ADDRESS => "SET_ROCE_ADDRESS",
            ALLOC_PD => "ALLOC_PD",
            DEALLOC_PD => "DEALLOC_PD",
            ALLOC_UAR => "ALLOC_UAR",
            DEALLOC_UAR => "DEALLOC_UAR",
            ACCESS_REG => "ACCESS_REG",
            ALLOC_TRANSPORT_DOMAIN => "ALLOC_TRANSPORT_DOMAIN",
            DEALLOC_TRANSPORT_DOMAIN => "DEALLOC_TRANSPORT_DOMAIN",
            _ => crate::raw::op::name(op).unwrap_or("UNKNOWN"),
        }
    }
}

/// Command status, output byte 0 [mlx5_ifc.h MLX5_CMD_STAT_*].
pub mod status {
    pub const OK: u8 = 0x0;
    pub const INT_ERR: u8 = 0x1;
    pub const BAD_OP: u8 = 0x2;
    pub const BAD_PARAM: u8 = 0x3;
    pub const BAD_SYS_STATE: u8 = 0x4;
    pub const BAD_RES: u8 = 0x5;
    pub const RES_BUSY: u8 = 0x6;
    pub const LIM: u8 = 0x8;
    pub const BAD_RES_STATE: u8 = 0x9;
    pub const IX: u8 = 0xa;
    pub const NO_RES: u8 = 0xf;
    pub const BAD_QP_STATE: u8 = 0x10;
    pub const BAD_PKT: u8 = 0x30;
    pub const BAD_SIZE: u8 = 0x40;
    pub const BAD_INP_LEN: u8 = 0x50;
    pub const BAD_OUTP_LEN: u8 = 0x51;
}

/// Delivery status, command entry byte 0x3F bits 7:1.
pub mod delivery {
    pub const OK: u8 = 0x0;
    pub const SIGNATURE_ERR: u8 = 0x1;
    pub const TOKEN_ERR: u8 = 0x2;
    pub const BAD_BLOCK_NUMBER: u8 = 0x3;
    pub const BAD_OUTPUT_POINTER: u8 = 0x4;
    pub const BAD_INPUT_POINTER: u8 = 0x5;
    pub const INTERNAL_ERR: u8 = 0x6;
    pub const INPUT_LEN_ERR: u8 = 0x7;
    pub const OUTPUT_LEN_ERR: u8 = 0x8;
    pub const RESERVED_NOT_ZERO: u8 = 0x9;
    pub const BAD_COMMAND_TYPE: u8 = 0x10;
}

/// EQE types [mlx5_ifc.h / device.h event coding].
pub mod event {
    pub const COMPLETION: u8 = 0x0;
    pub const PATH_MIG: u8 = 0x1;
    pub const COMM_EST: u8 = 0x2;
    pub const SQ_DRAINED: u8 = 0x3;
    pub const CQ_ERROR: u8 = 0x4;
    pub const WQ_CATAS_ERROR: u8 = 0x5;
    pub const INTERNAL_ERROR: u8 = 0x8;
    pub const PORT_CHANGE: u8 = 0x9;
    pub const CMD: u8 = 0xa;
    pub const PAGE_REQUEST: u8 = 0xb;
    pub const WQ_INVAL_REQ_ERROR: u8 = 0x10;
    pub const WQ_ACCESS_ERROR: u8 = 0x11;
}

/// QP service types (qpc.st) and states (qpc.state) [mlx5_ifc.h].
pub mod qp {
    pub const ST_RC: u8 = 0x0;
    pub const ST_UC: u8 = 0x1;
    pub const ST_UD: u8 = 0x2;
    pub const ST_QP1: u8 = 0x8;
    pub const RST: u8 = 0x0;
    pub const INIT: u8 = 0x1;
    pub const RTR: u8 = 0x2;
    pub const RTS: u8 = 0x3;
    pub const SQER: u8 = 0x4;
    pub const SQD: u8 = 0x5;
    pub const ERR: u8 = 0x6;
}

/// Register ids for ACCESS_REG [mlx5 driver.h MLX5_REG_*].
pub mod reg {
    pub const PMTU: u16 = 0x5003;
    pub const PAOS: u16 = 0x5006;
    pub const HOST_ENDIANNESS: u16 = 0x7004;
}

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
