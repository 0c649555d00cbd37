//! Command-interface numbers: opcodes [mlx5_ifc.h MLX5_CMD_OP_*], command status
//! [MLX5_CMD_STAT_*], delivery status (entry byte 0x3f bits 7:1), register ids [MLX5_REG_*], `op_mod` values (ACCESS_REG, pages, vport state), capability types,
//! teardown profiles, health syndromes, `ts_format` values, `nic_interface` values.

macro_rules! numbers {
    ($(#[$m:meta])* $ty:ty { $($name:ident = $v:expr => $text:expr,)* }) => {
        $(#[$m])*
        $(pub const $name: $ty = $v;)*
        /// The headers' name of a value, `None` if this crate does not know it.
        pub fn name(v: $ty) -> Option<&'static str> {
            match v {
                $($name => Some($text),)*
                _ => None,
            }
        }
        /// Every known value (tests check that they are distinct).
        pub const ALL: &[$ty] = &[$($name),*];
    };
}

/// Command opcodes [mlx5_ifc.h MLX5_CMD_OP_*].
pub mod op {
    numbers!(u16 {
        QUERY_HCA_CAP = 0x100 => "QUERY_HCA_CAP",
        INIT_HCA = 0x102 => "INIT_HCA",
        TEARDOWN_HCA = 0x103 => "TEARDOWN_HCA",
        ENABLE_HCA = 0x104 => "ENABLE_HCA",
        DISABLE_HCA = 0x105 => "DISABLE_HCA",
        QUERY_PAGES = 0x107 => "QUERY_PAGES",
        MANAGE_PAGES = 0x108 => "MANAGE_PAGES",
        SET_HCA_CAP = 0x109 => "SET_HCA_CAP",
        QUERY_ISSI = 0x10a => "QUERY_ISSI",
        SET_ISSI = 0x10b => "SET_ISSI",
        SET_DRIVER_VERSION = 0x10d => "SET_DRIVER_VERSION",
        CREATE_MKEY = 0x200 => "CREATE_MKEY",
        DESTROY_MKEY = 0x202 => "DESTROY_MKEY",
        QUERY_SPECIAL_CONTEXTS = 0x203 => "QUERY_SPECIAL_CONTEXTS",
        CREATE_EQ = 0x301 => "CREATE_EQ",
        DESTROY_EQ = 0x302 => "DESTROY_EQ",
        CREATE_CQ = 0x400 => "CREATE_CQ",
        DESTROY_CQ = 0x401 => "DESTROY_CQ",
        QUERY_CQ = 0x402 => "QUERY_CQ",
        CREATE_QP = 0x500 => "CREATE_QP",
        DESTROY_QP = 0x501 => "DESTROY_QP",
        RST2INIT_QP = 0x502 => "RST2INIT_QP",
        INIT2RTR_QP = 0x503 => "INIT2RTR_QP",
        RTR2RTS_QP = 0x504 => "RTR2RTS_QP",
        RTS2RTS_QP = 0x505 => "RTS2RTS_QP",
        SQERR2RTS_QP = 0x506 => "SQERR2RTS_QP",
        QP_2ERR = 0x507 => "2ERR_QP",
        QP_2RST = 0x50a => "2RST_QP",
        QUERY_QP = 0x50b => "QUERY_QP",
        INIT2INIT_QP = 0x50e => "INIT2INIT_QP",
        QUERY_VPORT_STATE = 0x750 => "QUERY_VPORT_STATE",
        QUERY_NIC_VPORT_CONTEXT = 0x754 => "QUERY_NIC_VPORT_CONTEXT",
        MODIFY_NIC_VPORT_CONTEXT = 0x755 => "MODIFY_NIC_VPORT_CONTEXT",
        QUERY_ROCE_ADDRESS = 0x760 => "QUERY_ROCE_ADDRESS",
        SET_ROCE_ADDRESS = 0x761 => "SET_ROCE_ADDRESS",
        ALLOC_Q_COUNTER = 0x771 => "ALLOC_Q_COUNTER",
        DEALLOC_Q_COUNTER = 0x772 => "DEALLOC_Q_COUNTER",
        QUERY_Q_COUNTER = 0x773 => "QUERY_Q_COUNTER",
        ALLOC_PD = 0x800 => "ALLOC_PD",
        DEALLOC_PD = 0x801 => "DEALLOC_PD",
        ALLOC_UAR = 0x802 => "ALLOC_UAR",
        DEALLOC_UAR = 0x803 => "DEALLOC_UAR",
        ACCESS_REG = 0x805 => "ACCESS_REG",
        ALLOC_TRANSPORT_DOMAIN = 0x816 => "ALLOC_TRANSPORT_DOMAIN",
        DEALLOC_TRANSPORT_DOMAIN = 0x817 => "DEALLOC_TRANSPORT_DOMAIN",
        CREATE_TIR = 0x900 => "CREATE_TIR",
        DESTROY_TIR = 0x902 => "DESTROY_TIR",
        CREATE_SQ = 0x904 => "CREATE_SQ",
        MODIFY_SQ = 0x905 => "MODIFY_SQ",
        DESTROY_SQ = 0x906 => "DESTROY_SQ",
        CREATE_RQ = 0x908 => "CREATE_RQ",
        MODIFY_RQ = 0x909 => "MODIFY_RQ",
        DESTROY_RQ = 0x90a => "DESTROY_RQ",
        CREATE_RMP = 0x90c => "CREATE_RMP",
        MODIFY_RMP = 0x90d => "MODIFY_RMP",
        DESTROY_RMP = 0x90e => "DESTROY_RMP",
        QUERY_RMP = 0x90f => "QUERY_RMP",
        CREATE_TIS = 0x912 => "CREATE_TIS",
        DESTROY_TIS = 0x914 => "DESTROY_TIS",
        SET_FLOW_TABLE_ROOT = 0x92f => "SET_FLOW_TABLE_ROOT",
        CREATE_FLOW_TABLE = 0x930 => "CREATE_FLOW_TABLE",
        DESTROY_FLOW_TABLE = 0x931 => "DESTROY_FLOW_TABLE",
        CREATE_FLOW_GROUP = 0x933 => "CREATE_FLOW_GROUP",
        DESTROY_FLOW_GROUP = 0x934 => "DESTROY_FLOW_GROUP",
        SET_FLOW_TABLE_ENTRY = 0x936 => "SET_FLOW_TABLE_ENTRY",
        DELETE_FLOW_TABLE_ENTRY = 0x938 => "DELETE_FLOW_TABLE_ENTRY",
    });
}

/// Command status, output byte 0 [mlx5_ifc.h / PRM MLX5_CMD_STAT_*].
pub mod status {
    numbers!(u8 {
        OK = 0x00 => "OK",
        INT_ERR = 0x01 => "INTERNAL_ERR",
        BAD_OP = 0x02 => "BAD_OP",
        BAD_PARAM = 0x03 => "BAD_PARAM",
        BAD_SYS_STATE = 0x04 => "BAD_SYS_STATE",
        BAD_RES = 0x05 => "BAD_RESOURCE",
        RES_BUSY = 0x06 => "RESOURCE_BUSY",
        LIM = 0x08 => "EXCEED_LIM",
        BAD_RES_STATE = 0x09 => "BAD_RES_STATE",
        IX = 0x0a => "BAD_INDEX",
        NO_RES = 0x0f => "NO_RESOURCES",
        BAD_QP_STATE = 0x10 => "BAD_QP_STATE",
        BAD_PKT = 0x30 => "BAD_PKT",
        BAD_SIZE = 0x40 => "BAD_SIZE",
        BAD_INP_LEN = 0x50 => "BAD_INPUT_LEN",
        BAD_OUTP_LEN = 0x51 => "BAD_OUTPUT_LEN",
    });
}

/// Delivery status, command entry byte 0x3f bits 7:1 [PRM, Linux cmd.c].
pub mod delivery {
    numbers!(u8 {
        OK = 0x00 => "OK",
        SIGNATURE_ERR = 0x01 => "SIGNATURE_ERR",
        TOKEN_ERR = 0x02 => "TOKEN_ERR",
        BAD_BLOCK_NUMBER = 0x03 => "BAD_BLOCK_NUMBER",
        BAD_OUTPUT_POINTER = 0x04 => "BAD_OUTPUT_POINTER",
        BAD_INPUT_POINTER = 0x05 => "BAD_INPUT_POINTER",
        INTERNAL_ERR = 0x06 => "INTERNAL_ERR",
        INPUT_LEN_ERR = 0x07 => "INPUT_LEN_ERR",
        OUTPUT_LEN_ERR = 0x08 => "OUTPUT_LEN_ERR",
        RESERVED_NOT_ZERO = 0x09 => "RESERVED_NOT_ZERO",
        BAD_COMMAND_TYPE = 0x10 => "BAD_COMMAND_TYPE",
    });
}

/// Register ids for ACCESS_REG [Linux driver.h MLX5_REG_*].
pub mod reg {
    numbers!(u16 {
        PMTU = 0x5003 => "PMTU",
        PAOS = 0x5006 => "PAOS",
        HOST_ENDIANNESS = 0x7004 => "HOST_ENDIANNESS",
    });
}

/// ACCESS_REG `op_mod` [Linux `mlx5_core_access_reg`: write 0, read 1].
pub mod access_reg {
    pub const WRITE: u16 = 0;
    pub const READ: u16 = 1;
}

/// QUERY_PAGES and MANAGE_PAGES `op_mod` [mlx5_ifc.h MLX5_BOOT_PAGES / MLX5_INIT_PAGES /
/// MLX5_REGULAR_PAGES; MLX5_PAGES_CANT_GIVE / MLX5_PAGES_GIVE / MLX5_PAGES_TAKE].
pub mod pages_op {
    pub const BOOT: u16 = 1;
    pub const INIT: u16 = 2;
    pub const REGULAR: u16 = 3;
    /// MANAGE_PAGES: the driver could not allocate what was asked for.
    pub const CANT_GIVE: u16 = 0;
    pub const GIVE: u16 = 1;
    pub const TAKE: u16 = 2;
}

/// QUERY_VPORT_STATE `op_mod` and `state` [mlx5_ifc.h MLX5_VPORT_STATE_OP_MOD_*, MLX5_VPORT_STATE_*].
pub mod vport_state {
    /// The function's own vNIC vport.
    pub const OP_MOD_VNIC_VPORT: u16 = 0;
    pub const OP_MOD_ESW_VPORT: u16 = 1;
    pub const OP_MOD_UPLINK: u16 = 2;
    pub const DOWN: u8 = 0;
    pub const UP: u8 = 1;
}

/// Capability types, QUERY/SET_HCA_CAP `op_mod` bits 15:1 [mlx5_ifc.h MLX5_CAP_GENERAL, MLX5_CAP_ROCE].
pub mod cap_type {
    pub const GENERAL: u16 = 0;
    pub const ROCE: u16 = 4;
}

/// TEARDOWN_HCA profiles and output state [mlx5_ifc.h MLX5_TEARDOWN_HCA_IN_PROFILE_*,
/// MLX5_TEARDOWN_HCA_OUT_FORCE_STATE_*].
pub mod teardown {
    /// `teardown_hca_in.profile`.
    pub mod profile {
        pub const GRACEFUL_CLOSE: u64 = 0;
        pub const FORCE_CLOSE: u64 = 1;
        pub const PREPARE_FAST_TEARDOWN: u64 = 2;
    }
    /// `teardown_hca_out.state`.
    pub const FORCE_STATE_SUCCESS: u64 = 0;
    pub const FORCE_STATE_FAIL: u64 = 1;
}

/// `health_buffer.synd` values [Linux health.c MLX5_INITIAL_SEG_HEALTH_SYNDROME_*], named as
/// Linux's health report describes them.
pub mod health_synd {
    numbers!(u8 {
        NONE = 0x0 => "none",
        FW_INTERNAL_ERR = 0x1 => "firmware internal error",
        DEAD_IRISC = 0x7 => "irisc not responding",
        HW_FATAL_ERR = 0x8 => "unrecoverable hardware error",
        FW_CRC_ERR = 0x9 => "firmware CRC error",
        ICM_FETCH_PCI_ERR = 0xa => "ICM fetch PCI error",
        HW_FTL_ERR = 0xb => "HW fatal error",
        ASYNC_EQ_OVERRUN_ERR = 0xc => "async EQ buffer overrun",
        EQ_ERR = 0xd => "EQ error",
        EQ_INV = 0xe => "invalid EQ referenced",
        FFSER_ERR = 0xf => "FFSER error",
        HIGH_TEMP_ERR = 0x10 => "high temperature",
    });
}

/// `ts_format` of QP, SQ and RQ contexts [mlx5_ifc.h MLX5_QPC_TIMESTAMP_FORMAT_*, the same
/// numbers for SQ and RQ].
pub mod ts_format {
    pub const FREE_RUNNING: u8 = 0x0;
    pub const DEFAULT: u8 = 0x1;
    pub const REAL_TIME: u8 = 0x2;
}

/// `init_seg.nic_interface` values [mlx5_ifc.h MLX5_INITIAL_SEG_NIC_INTERFACE_*].
pub mod nic_interface {
    pub const FULL_DRIVER: u8 = 0;
    pub const DISABLED: u8 = 1;
    /// Written by the driver: the firmware resets the function (every object and page lost,
    /// `initializing` set until it is ready again) [MLX5_INITIAL_SEG_NIC_INTERFACE_SW_RESET].
    pub const SW_RESET: u8 = 7;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn distinct<T: PartialEq + Copy>(all: &[T]) -> bool {
        all.iter().enumerate().all(|(i, a)| all[i + 1..].iter().all(|b| a != b))
    }

    #[test]
    fn values_are_distinct_and_named() {
        assert!(distinct(op::ALL) && distinct(status::ALL) && distinct(delivery::ALL) && distinct(reg::ALL));
        assert!(op::ALL.iter().all(|&o| op::name(o).is_some()));
        assert_eq!(op::name(op::QP_2ERR), Some("2ERR_QP"));
        assert_eq!(op::name(0x9999), None);
        assert_eq!(status::name(status::BAD_PARAM), Some("BAD_PARAM"));
        assert_eq!(delivery::name(delivery::BAD_COMMAND_TYPE), Some("BAD_COMMAND_TYPE"));
    }
}
