//! Queue numbers: event types [mlx5_ifc.h / device.h MLX5_EVENT_TYPE_*], QP service types and
//! states [mlx5_ifc.h], send WQE (opcodes, fence modes), CQE and UMR codes [rdma-core mlx5dv.h, Linux qp.h], the
//! fixed sizes of the rings, UAR register offsets [device.h] and steering numbers [mlx5_ifc.h].

/// Send WQE basic block (bytes); every SQ slot is one [mlx5dv.h MLX5_SEND_WQE_BB].
pub const WQEBB: usize = 64;
/// Data segment lkey that ends a shorter-than-stride scatter list [mlx5dv.h MLX5_INVALID_LKEY].
pub const INVALID_LKEY: u32 = 0x100;
/// Inline segment flag in `byte_count` [mlx5dv.h MLX5_INLINE_SEG].
pub const INLINE_SEG: u32 = 0x8000_0000;

/// EQE types [device.h MLX5_EVENT_TYPE_*].
pub mod event {
    pub const COMPLETION: u8 = 0x00;
    pub const PATH_MIG: u8 = 0x01;
    pub const COMM_EST: u8 = 0x02;
    pub const SQ_DRAINED: u8 = 0x03;
    pub const CQ_ERROR: u8 = 0x04;
    pub const WQ_CATAS_ERROR: u8 = 0x05;
    pub const PATH_MIG_FAILED: u8 = 0x07;
    pub const INTERNAL_ERROR: u8 = 0x08;
    pub const PORT_CHANGE: u8 = 0x09;
    pub const CMD: u8 = 0x0a;
    pub const PAGE_REQUEST: u8 = 0x0b;
    pub const WQ_INVAL_REQ_ERROR: u8 = 0x10;
    pub const WQ_ACCESS_ERROR: u8 = 0x11;
    /// An SRQ/RMP went to error; `qp_srq_n` names it.
    pub const SRQ_CATAS_ERROR: u8 = 0x12;
    /// A QP attached to an SRQ in error will take no more receive WQEs; `qp_srq_n` names the QP.
    pub const SRQ_LAST_WQE: u8 = 0x13;
    /// An armed SRQ/RMP dropped below its limit (`wq.lwm`); `qp_srq_n` names it. Fires once per arming.
    pub const SRQ_RQ_LIMIT: u8 = 0x14;
}

/// `qpc.rq_type` [mlx5_ifc.h / Linux qp.h MLX5_NON_ZERO_RQ, MLX5_SRQ_RQ, MLX5_CRQ_RQ, MLX5_ZERO_LEN_RQ].
pub mod rq_type {
    pub const REGULAR: u8 = 0x0;
    /// Receives come from the SRQ/RMP named in `qpc.srqn_rmpn_xrqn`.
    pub const SRQ: u8 = 0x1;
    pub const ZERO_LEN: u8 = 0x3;
}

/// `wq.wq_type` [mlx5_ifc.h MLX5_WQ_TYPE_*]: an RMP's WQEs are a linked list.
pub mod wq_type {
    pub const LINKED_LIST: u8 = 0x0;
    pub const CYCLIC: u8 = 0x1;
}

/// Send WQE ctrl segment `fm_ce_se` bits [mlx5dv.h MLX5_WQE_CTRL_CQ_UPDATE, MLX5_WQE_CTRL_SOLICITED].
pub mod ctrl_flags {
    /// A CQE for this WQE, signalled or not.
    pub const CQ_UPDATE: u8 = 2 << 2;
    pub const SOLICITED: u8 = 1 << 1;
}

/// UD address vector flag in `av.dqp_dct` [mlx5dv.h MLX5_EXTENDED_UD_AV].
pub const EXTENDED_UD_AV: u32 = 0x8000_0000;

/// Registers of a UAR page (byte offsets in the 4 KiB page) [Linux device.h MLX5_CQ_DOORBELL,
/// MLX5_EQ_DOORBEL_OFFSET, MLX5_BF_OFFSET].
pub mod uar {
    /// CQ arm doorbell (64-bit: arm command, sequence, CQN; then the consumer index).
    pub const CQ_DOORBELL: usize = 0x20;
    /// EQ consumer index, arming the EQ.
    pub const EQ_ARM: usize = 0x40;
    /// EQ consumer index, not arming it (Linux writes `doorbell + 2` dwords).
    pub const EQ_NOARM: usize = 0x48;
    /// First BlueFlame / send doorbell register (the first 8 bytes of a WQE); two buffers of
    /// 0x100 bytes per BlueFlame register follow to the end of the page.
    pub const BF: usize = 0x800;
}

/// SQ and RQ states, `sqc.state` / `rqc.state` and MODIFY_SQ/RQ's current state
/// [mlx5_ifc.h MLX5_SQC_STATE_*, MLX5_RQC_STATE_*: the same numbers].
pub mod wq_state {
    pub const RST: u8 = 0x0;
    pub const RDY: u8 = 0x1;
    pub const ERR: u8 = 0x3;
}

/// NIC receive steering: flow table types, flow-context actions and destination types
/// [mlx5_ifc.h FS_FT_NIC_RX, MLX5_FLOW_CONTEXT_ACTION_*, MLX5_FLOW_DESTINATION_TYPE_*].
pub mod flow {
    /// `table_type` of the NIC receive tables.
    pub const TABLE_NIC_RX: u8 = 0x0;
    pub const ACTION_ALLOW: u32 = 0x1;
    pub const ACTION_DROP: u32 = 0x2;
    pub const ACTION_FWD_DEST: u32 = 0x4;
    pub const ACTION_COUNT: u32 = 0x8;
    pub const DEST_VPORT: u8 = 0x0;
    pub const DEST_FLOW_TABLE: u8 = 0x1;
    pub const DEST_TIR: u8 = 0x2;
}

/// `rmpc.state` [mlx5_ifc.h MLX5_RMPC_STATE_*].
pub mod rmp_state {
    pub const RDY: u8 = 0x1;
    pub const ERR: u8 = 0x3;
}

/// QP service types (`qpc.st`) and states (`qpc.state`) [mlx5_ifc.h MLX5_QPC_ST_*, MLX5_QP_STATE_*].
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

/// Send WQE opcodes, ctrl segment byte 3 [mlx5dv.h MLX5_OPCODE_*].
pub mod wqe_op {
    pub const NOP: u8 = 0x00;
    pub const SEND_INVAL: u8 = 0x01;
    pub const RDMA_WRITE: u8 = 0x08;
    pub const RDMA_WRITE_IMM: u8 = 0x09;
    pub const SEND: u8 = 0x0a;
    pub const SEND_IMM: u8 = 0x0b;
    pub const RDMA_READ: u8 = 0x10;
    pub const LOCAL_INVAL: u8 = 0x1b;
    pub const UMR: u8 = 0x25;
}

/// Fence mode, bits 7:5 of the send WQE ctrl segment's `fm_ce_se` byte [Linux qp.h
/// MLX5_FENCE_MODE_*; rdma-core mlx5dv.h MLX5_WQE_CTRL_FENCE = 4 << 5 and
/// MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE = 1 << 5].
///
/// What a verbs fence (IBV_SEND_FENCE / IB_SEND_FENCE: wait for earlier RDMA READs and atomics
/// of the send queue) maps to: Linux mlx5 posts [`FENCE`](fence_mode::FENCE), or
/// [`SMALL_AND_FENCE`](fence_mode::SMALL_AND_FENCE) when the WQE also follows a UMR (it must
/// wait for the key change as well); rdma-core's provider always posts `SMALL_AND_FENCE` (the
/// union of both waits, so it need not know what came before). Linux gives a UMR itself
/// [`INITIATOR_SMALL`](fence_mode::INITIATOR_SMALL) or [`STRONG_ORDERING`](fence_mode::STRONG_ORDERING)
/// and the WQE after it `INITIATOR_SMALL`.
pub mod fence_mode {
    /// Where the mode sits in `fm_ce_se`.
    pub const MASK: u8 = 0b111 << 5;
    pub const NONE: u8 = 0;
    /// Wait for earlier local operations of the queue (a UMR) to finish.
    pub const INITIATOR_SMALL: u8 = 1 << 5;
    /// Wait for earlier RDMA READs and atomics of the queue to complete.
    pub const FENCE: u8 = 2 << 5;
    /// Wait for every earlier WQE of the queue to complete.
    pub const STRONG_ORDERING: u8 = 3 << 5;
    /// `FENCE` and `INITIATOR_SMALL` together.
    pub const SMALL_AND_FENCE: u8 = 4 << 5;
}

/// UMR control-segment flag and mkey-mask bits [Linux qp.h MLX5_UMR_INLINE, MLX5_MKEY_MASK_*;
/// rdma-core mlx5dv.h MLX5_WQE_UMR_CTRL_MKEY_MASK_*].
pub mod umr {
    /// Translations follow inline.
    pub const FLAG_INLINE: u8 = 1 << 7;
    pub const MASK_LEN: u64 = 1 << 0;
    pub const MASK_PAGE_SIZE: u64 = 1 << 1;
    pub const MASK_START_ADDR: u64 = 1 << 6;
    pub const MASK_PD: u64 = 1 << 7;
    pub const MASK_EN_RINVAL: u64 = 1 << 8;
    pub const MASK_KEY: u64 = 1 << 13;
    pub const MASK_LR: u64 = 1 << 17;
    pub const MASK_LW: u64 = 1 << 18;
    pub const MASK_RR: u64 = 1 << 19;
    pub const MASK_RW: u64 = 1 << 20;
    pub const MASK_A: u64 = 1 << 21;
    pub const MASK_FREE: u64 = 1 << 29;
}

/// CQE opcodes, `op_own` bits 7:4 [mlx5dv.h MLX5_CQE_*].
pub mod cqe_op {
    pub const REQ: u8 = 0x0;
    pub const RESP_WR_IMM: u8 = 0x1;
    pub const RESP_SEND: u8 = 0x2;
    pub const RESP_SEND_IMM: u8 = 0x3;
    pub const RESP_SEND_INV: u8 = 0x4;
    pub const REQ_ERR: u8 = 0xd;
    pub const RESP_ERR: u8 = 0xe;
    pub const INVALID: u8 = 0xf;
}

/// Error CQE syndromes [mlx5dv.h MLX5_CQE_SYNDROME_*].
pub mod cqe_synd {
    pub const LOCAL_LENGTH_ERR: u8 = 0x01;
    pub const LOCAL_QP_OP_ERR: u8 = 0x02;
    pub const LOCAL_PROT_ERR: u8 = 0x04;
    pub const WR_FLUSH_ERR: u8 = 0x05;
    pub const MW_BIND_ERR: u8 = 0x06;
    pub const BAD_RESP_ERR: u8 = 0x10;
    pub const LOCAL_ACCESS_ERR: u8 = 0x11;
    pub const REMOTE_INVAL_REQ_ERR: u8 = 0x12;
    pub const REMOTE_ACCESS_ERR: u8 = 0x13;
    pub const REMOTE_OP_ERR: u8 = 0x14;
    pub const TRANSPORT_RETRY_EXC_ERR: u8 = 0x15;
    pub const RNR_RETRY_EXC_ERR: u8 = 0x16;
    pub const REMOTE_ABORTED_ERR: u8 = 0x22;
}
