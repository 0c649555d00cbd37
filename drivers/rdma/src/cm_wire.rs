//! cm_wire: IB CM MAD codecs (REQ/REP/RTU/REJ/MRA/DREQ/DREP), rdma_cm IP header, NVMe-RDMA private data.
//!
//! Layouts are declared once, as field tables in the IBTA "Byte[Bit]" notation that Linux
//! `include/rdma/ibta_vol1_c12.h` uses (`IBA_FIELD_BLOC(struct, byte, bit, width)`, bit 0 = MSB
//! of the byte; `IBA_FIELDn_LOC(struct, byte, width)` = MSB-aligned). Offsets are relative to
//! the CM message body, which starts after the 24-byte MAD common header (IBA Vol1 13.4.2,
//! Linux `struct ib_mad_hdr`). All CM fields are big-endian; NVMe-RDMA private data is
//! little-endian (Linux `include/linux/nvme-rdma.h`).
//!
//! Parsers take any byte slice and return `Err` on anything short or malformed; they never panic.

/// Size of a MAD (the UD payload of every CM message).
pub const MAD_LEN: usize = 256;
/// Size of the MAD common header.
pub const MAD_HDR_LEN: usize = 24;
/// Size of a CM message body (MAD minus header).
pub const CM_BODY_LEN: usize = MAD_LEN - MAD_HDR_LEN;

/// MAD base version, CM management class and class version (Linux `IB_MGMT_BASE_VERSION`,
/// `IB_MGMT_CLASS_CM`, `IB_CM_CLASS_VERSION`).
pub const MAD_BASE_VERSION: u8 = 1;
pub const MGMT_CLASS_CM: u8 = 0x07;
pub const CM_CLASS_VERSION: u8 = 2;
/// Every CM message uses method Send (`IB_MGMT_METHOD_SEND`).
pub const METHOD_SEND: u8 = 0x03;

/// CM attribute IDs (IBA Table 103; Linux `CM_REQ_ATTR_ID` ...).
pub mod attr {
    pub const REQ: u16 = 0x0010;
    pub const MRA: u16 = 0x0011;
    pub const REJ: u16 = 0x0012;
    pub const REP: u16 = 0x0013;
    pub const RTU: u16 = 0x0014;
    pub const DREQ: u16 = 0x0015;
    pub const DREP: u16 = 0x0016;
    pub const SIDR_REQ: u16 = 0x0017;
    pub const SIDR_REP: u16 = 0x0018;
    pub const LAP: u16 = 0x0019;
    pub const APR: u16 = 0x001A;
}

/// Decoding failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// Fewer bytes than the layout needs.
    Short { need: usize, got: usize },
    /// Not a CM MAD we speak (base version, class, class version, method).
    NotCm { class: u8, class_version: u8, method: u8 },
    /// An attribute ID this CM does not handle (SIDR, LAP, APR, unknown).
    UnknownAttr(u16),
    /// rdma_cm header with an unsupported version or IP version.
    BadCmaHeader { cma_version: u8, ip_version: u8 },
}

/// One field in IBTA Byte[Bit] notation: `byte` offset, `bit` offset from the MSB of that
/// byte, `width` in bits (up to 64; may span bytes, big-endian).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub byte: usize,
    pub bit: u8,
    pub width: u8,
}

const fn f(byte: usize, bit: u8, width: u8) -> Field {
    Field { byte, bit, width }
}

impl Field {
    /// Last byte index (exclusive) the field touches.
    pub const fn end(&self) -> usize {
        (self.byte * 8 + self.bit as usize + self.width as usize).div_ceil(8)
    }
    /// Read the field; `buf` must be at least `end()` long (callers check lengths first).
    pub fn get(&self, buf: &[u8]) -> u64 {
        let start = self.byte * 8 + self.bit as usize;
        let mut v = 0u64;
        for i in start..start + self.width as usize {
            let b = buf.get(i / 8).copied().unwrap_or(0);
            v = (v << 1) | ((b >> (7 - (i % 8))) & 1) as u64;
        }
        v
    }
    /// Write the field (value truncated to `width` bits).
    pub fn set(&self, buf: &mut [u8], v: u64) {
        let start = self.byte * 8 + self.bit as usize;
        let w = self.width as usize;
        for (k, i) in (start..start + w).enumerate() {
            let bitv = ((v >> (w - 1 - k)) & 1) as u8;
            if let Some(b) = buf.get_mut(i / 8) {
                let m = 1u8 << (7 - (i % 8));
                *b = (*b & !m) | (bitv << (7 - (i % 8)));
            }
        }
    }
}

/// MAD common header fields (absolute MAD offsets). Src: IBA 13.4.2 / Linux `struct ib_mad_hdr`.
pub mod mad_f {
    use super::{f, Field};
    pub const BASE_VERSION: Field = f(0, 0, 8);
    pub const MGMT_CLASS: Field = f(1, 0, 8);
    pub const CLASS_VERSION: Field = f(2, 0, 8);
    pub const METHOD: Field = f(3, 0, 8);
    pub const STATUS: Field = f(4, 0, 16);
    pub const CLASS_SPECIFIC: Field = f(6, 0, 16);
    pub const TID: Field = f(8, 0, 64);
    pub const ATTR_ID: Field = f(16, 0, 16);
    pub const ATTR_MOD: Field = f(20, 0, 32);
}

/// REQ body fields. Src: IBA Table 106 / Linux `CM_REQ_*` in ibta_vol1_c12.h.
pub mod req_f {
    use super::{f, Field};
    pub const LOCAL_COMM_ID: Field = f(0, 0, 32);
    pub const SERVICE_ID: Field = f(8, 0, 64);
    pub const LOCAL_CA_GUID: Field = f(16, 0, 64);
    pub const LOCAL_Q_KEY: Field = f(28, 0, 32);
    pub const LOCAL_QPN: Field = f(32, 0, 24);
    pub const RESPONDER_RESOURCES: Field = f(35, 0, 8);
    pub const LOCAL_EECN: Field = f(36, 0, 24);
    pub const INITIATOR_DEPTH: Field = f(39, 0, 8);
    pub const REMOTE_EECN: Field = f(40, 0, 24);
    pub const REMOTE_CM_RESPONSE_TIMEOUT: Field = f(43, 0, 5);
    pub const TRANSPORT_SERVICE_TYPE: Field = f(43, 5, 2);
    pub const END_TO_END_FLOW_CONTROL: Field = f(43, 7, 1);
    pub const STARTING_PSN: Field = f(44, 0, 24);
    pub const LOCAL_CM_RESPONSE_TIMEOUT: Field = f(47, 0, 5);
    pub const RETRY_COUNT: Field = f(47, 5, 3);
    pub const PARTITION_KEY: Field = f(48, 0, 16);
    pub const PATH_PACKET_PAYLOAD_MTU: Field = f(50, 0, 4);
    pub const RDC_EXISTS: Field = f(50, 4, 1);
    pub const RNR_RETRY_COUNT: Field = f(50, 5, 3);
    pub const MAX_CM_RETRIES: Field = f(51, 0, 4);
    pub const SRQ: Field = f(51, 4, 1);
    pub const EXTENDED_TRANSPORT_TYPE: Field = f(51, 5, 3);
    /// Primary path starts at 52, alternate at 96 (same layout, +44). See [`PathFields`].
    pub const PRIMARY_PATH: usize = 52;
    pub const ALTERNATE_PATH: usize = 96;
    pub const SAP_SUPPORTED: Field = f(139, 5, 1);
    pub const PRIVATE_DATA: usize = 140;
    pub const PRIVATE_DATA_LEN: usize = 92;
}

/// One path's fields inside a REQ, relative to the path start (52 primary, 96 alternate).
/// Src: Linux `CM_REQ_PRIMARY_*` / `CM_REQ_ALTERNATE_*`.
pub mod path_f {
    use super::{f, Field};
    pub const LOCAL_PORT_LID: Field = f(0, 0, 16);
    pub const REMOTE_PORT_LID: Field = f(2, 0, 16);
    pub const LOCAL_PORT_GID: usize = 4;
    pub const REMOTE_PORT_GID: usize = 20;
    pub const FLOW_LABEL: Field = f(36, 0, 20);
    pub const PACKET_RATE: Field = f(39, 2, 6);
    pub const TRAFFIC_CLASS: Field = f(40, 0, 8);
    pub const HOP_LIMIT: Field = f(41, 0, 8);
    pub const SL: Field = f(42, 0, 4);
    pub const SUBNET_LOCAL: Field = f(42, 4, 1);
    pub const LOCAL_ACK_TIMEOUT: Field = f(43, 0, 5);
    pub const LEN: usize = 44;
}

/// MRA body. Src: IBA Table 107 / Linux `CM_MRA_*`.
pub mod mra_f {
    use super::{f, Field};
    pub const LOCAL_COMM_ID: Field = f(0, 0, 32);
    pub const REMOTE_COMM_ID: Field = f(4, 0, 32);
    pub const MESSAGE_MRAED: Field = f(8, 0, 2);
    pub const SERVICE_TIMEOUT: Field = f(9, 0, 5);
    pub const PRIVATE_DATA: usize = 10;
    pub const PRIVATE_DATA_LEN: usize = 222;
}

/// REJ body. Src: IBA Table 108 / Linux `CM_REJ_*`.
pub mod rej_f {
    use super::{f, Field};
    pub const LOCAL_COMM_ID: Field = f(0, 0, 32);
    pub const REMOTE_COMM_ID: Field = f(4, 0, 32);
    pub const MESSAGE_REJECTED: Field = f(8, 0, 2);
    pub const REJECTED_INFO_LENGTH: Field = f(9, 0, 7);
    pub const REASON: Field = f(10, 0, 16);
    pub const ARI: usize = 12;
    pub const ARI_LEN: usize = 72;
    pub const PRIVATE_DATA: usize = 84;
    pub const PRIVATE_DATA_LEN: usize = 148;
}

/// REP body. Src: IBA Table 109 / Linux `CM_REP_*`.
pub mod rep_f {
    use super::{f, Field};
    pub const LOCAL_COMM_ID: Field = f(0, 0, 32);
    pub const REMOTE_COMM_ID: Field = f(4, 0, 32);
    pub const LOCAL_Q_KEY: Field = f(8, 0, 32);
    pub const LOCAL_QPN: Field = f(12, 0, 24);
    pub const LOCAL_EECN: Field = f(16, 0, 24);
    pub const STARTING_PSN: Field = f(20, 0, 24);
    pub const RESPONDER_RESOURCES: Field = f(24, 0, 8);
    pub const INITIATOR_DEPTH: Field = f(25, 0, 8);
    pub const TARGET_ACK_DELAY: Field = f(26, 0, 5);
    pub const FAILOVER_ACCEPTED: Field = f(26, 5, 2);
    pub const END_TO_END_FLOW_CONTROL: Field = f(26, 7, 1);
    pub const RNR_RETRY_COUNT: Field = f(27, 0, 3);
    pub const SRQ: Field = f(27, 3, 1);
    pub const LOCAL_CA_GUID: Field = f(28, 0, 64);
    pub const PRIVATE_DATA: usize = 36;
    pub const PRIVATE_DATA_LEN: usize = 196;
}

/// RTU / DREQ / DREP bodies. Src: IBA Tables 110-112 / Linux `CM_RTU_*`, `CM_DREQ_*`, `CM_DREP_*`.
pub mod short_f {
    use super::{f, Field};
    pub const LOCAL_COMM_ID: Field = f(0, 0, 32);
    pub const REMOTE_COMM_ID: Field = f(4, 0, 32);
    pub const DREQ_REMOTE_QPN_EECN: Field = f(8, 0, 24);
    pub const RTU_PRIVATE_DATA: usize = 8;
    pub const RTU_PRIVATE_DATA_LEN: usize = 224;
    pub const DREQ_PRIVATE_DATA: usize = 12;
    pub const DREQ_PRIVATE_DATA_LEN: usize = 220;
    pub const DREP_PRIVATE_DATA: usize = 8;
    pub const DREP_PRIVATE_DATA_LEN: usize = 224;
}

// Compile-time layout checks: every private-data area ends exactly at the body end.
const _: () = assert!(req_f::PRIVATE_DATA + req_f::PRIVATE_DATA_LEN == CM_BODY_LEN);
const _: () = assert!(req_f::ALTERNATE_PATH + path_f::LEN == req_f::PRIVATE_DATA);
const _: () = assert!(req_f::PRIMARY_PATH + path_f::LEN == req_f::ALTERNATE_PATH);
const _: () = assert!(mra_f::PRIVATE_DATA + mra_f::PRIVATE_DATA_LEN == CM_BODY_LEN);
const _: () = assert!(rej_f::PRIVATE_DATA + rej_f::PRIVATE_DATA_LEN == CM_BODY_LEN);
const _: () = assert!(rej_f::ARI + rej_f::ARI_LEN == rej_f::PRIVATE_DATA);
const _: () = assert!(rep_f::PRIVATE_DATA + rep_f::PRIVATE_DATA_LEN == CM_BODY_LEN);
const _: () = assert!(short_f::RTU_PRIVATE_DATA + short_f::RTU_PRIVATE_DATA_LEN == CM_BODY_LEN);
const _: () = assert!(short_f::DREQ_PRIVATE_DATA + short_f::DREQ_PRIVATE_DATA_LEN == CM_BODY_LEN);
const _: () = assert!(path_f::LOCAL_ACK_TIMEOUT.end() == path_f::LEN);

/// REJ reasons (IBA Table 112; Linux `enum ib_cm_rej_reason`).
pub mod rej_reason {
    pub const NO_QP: u16 = 1;
    pub const NO_EEC: u16 = 2;
    pub const NO_RESOURCES: u16 = 3;
    pub const TIMEOUT: u16 = 4;
    pub const UNSUPPORTED: u16 = 5;
    pub const INVALID_COMM_ID: u16 = 6;
    pub const INVALID_COMM_INSTANCE: u16 = 7;
    pub const INVALID_SERVICE_ID: u16 = 8;
    pub const INVALID_TRANSPORT_TYPE: u16 = 9;
    pub const STALE_CONN: u16 = 10;
    pub const RDC_NOT_EXIST: u16 = 11;
    pub const INVALID_GID: u16 = 12;
    pub const INVALID_LID: u16 = 13;
    pub const INVALID_SL: u16 = 14;
    pub const INVALID_TRAFFIC_CLASS: u16 = 15;
    pub const INVALID_HOP_LIMIT: u16 = 16;
    pub const INVALID_PACKET_RATE: u16 = 17;
    pub const PORT_CM_REDIRECT: u16 = 24;
    pub const PORT_REDIRECT: u16 = 25;
    pub const INVALID_MTU: u16 = 26;
    pub const INSUFFICIENT_RESP_RESOURCES: u16 = 27;
    /// Used by rdma_reject() / a consumer's decision.
    pub const CONSUMER_DEFINED: u16 = 28;
    pub const INVALID_RNR_RETRY: u16 = 29;
    pub const DUPLICATE_LOCAL_COMM_ID: u16 = 30;
    pub const INVALID_CLASS_VERSION: u16 = 31;
    pub const INVALID_FLOW_LABEL: u16 = 32;
    pub const INVALID_ALT_FLOW_LABEL: u16 = 33;
}

/// "Message Rejected" / "Message MRAed" codes.
pub mod msg_code {
    pub const REQ: u8 = 0;
    pub const REP: u8 = 1;
    pub const OTHER: u8 = 2;
}

/// The MAD common header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MadHdr {
    pub base_version: u8,
    pub mgmt_class: u8,
    pub class_version: u8,
    pub method: u8,
    pub status: u16,
    pub class_specific: u16,
    pub tid: u64,
    pub attr_id: u16,
    pub attr_mod: u32,
}

impl MadHdr {
    /// The header Linux `cm_format_mad_hdr` writes for a CM message.
    pub fn cm(attr_id: u16, tid: u64) -> Self {
        MadHdr {
            base_version: MAD_BASE_VERSION,
            mgmt_class: MGMT_CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: METHOD_SEND,
            status: 0,
            class_specific: 0,
            tid,
            attr_id,
            attr_mod: 0,
        }
    }
    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        need(b, MAD_HDR_LEN)?;
        Ok(MadHdr {
            base_version: mad_f::BASE_VERSION.get(b) as u8,
            mgmt_class: mad_f::MGMT_CLASS.get(b) as u8,
            class_version: mad_f::CLASS_VERSION.get(b) as u8,
            method: mad_f::METHOD.get(b) as u8,
            status: mad_f::STATUS.get(b) as u16,
            class_specific: mad_f::CLASS_SPECIFIC.get(b) as u16,
            tid: mad_f::TID.get(b),
            attr_id: mad_f::ATTR_ID.get(b) as u16,
            attr_mod: mad_f::ATTR_MOD.get(b) as u32,
        })
    }
    pub fn write(&self, b: &mut [u8; MAD_LEN]) {
        mad_f::BASE_VERSION.set(b, self.base_version as u64);
        mad_f::MGMT_CLASS.set(b, self.mgmt_class as u64);
        mad_f::CLASS_VERSION.set(b, self.class_version as u64);
        mad_f::METHOD.set(b, self.method as u64);
        mad_f::STATUS.set(b, self.status as u64);
        mad_f::CLASS_SPECIFIC.set(b, self.class_specific as u64);
        mad_f::TID.set(b, self.tid);
        mad_f::ATTR_ID.set(b, self.attr_id as u64);
        mad_f::ATTR_MOD.set(b, self.attr_mod as u64);
    }
}

fn need(b: &[u8], n: usize) -> Result<(), WireError> {
    if b.len() < n {
        Err(WireError::Short { need: n, got: b.len() })
    } else {
        Ok(())
    }
}

/// A REQ path (primary or alternate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Path {
    pub local_lid: u16,
    pub remote_lid: u16,
    pub local_gid: [u8; 16],
    pub remote_gid: [u8; 16],
    pub flow_label: u32,
    pub packet_rate: u8,
    pub traffic_class: u8,
    pub hop_limit: u8,
    pub sl: u8,
    pub subnet_local: bool,
    pub local_ack_timeout: u8,
}

impl Path {
    fn parse(p: &[u8]) -> Self {
        let mut lg = [0u8; 16];
        let mut rg = [0u8; 16];
        lg.copy_from_slice(&p[path_f::LOCAL_PORT_GID..path_f::LOCAL_PORT_GID + 16]);
        rg.copy_from_slice(&p[path_f::REMOTE_PORT_GID..path_f::REMOTE_PORT_GID + 16]);
        Path {
            local_lid: path_f::LOCAL_PORT_LID.get(p) as u16,
            remote_lid: path_f::REMOTE_PORT_LID.get(p) as u16,
            local_gid: lg,
            remote_gid: rg,
            flow_label: path_f::FLOW_LABEL.get(p) as u32,
            packet_rate: path_f::PACKET_RATE.get(p) as u8,
            traffic_class: path_f::TRAFFIC_CLASS.get(p) as u8,
            hop_limit: path_f::HOP_LIMIT.get(p) as u8,
            sl: path_f::SL.get(p) as u8,
            subnet_local: path_f::SUBNET_LOCAL.get(p) != 0,
            local_ack_timeout: path_f::LOCAL_ACK_TIMEOUT.get(p) as u8,
        }
    }
    fn write(&self, p: &mut [u8]) {
        path_f::LOCAL_PORT_LID.set(p, self.local_lid as u64);
        path_f::REMOTE_PORT_LID.set(p, self.remote_lid as u64);
        p[path_f::LOCAL_PORT_GID..path_f::LOCAL_PORT_GID + 16].copy_from_slice(&self.local_gid);
        p[path_f::REMOTE_PORT_GID..path_f::REMOTE_PORT_GID + 16].copy_from_slice(&self.remote_gid);
        path_f::FLOW_LABEL.set(p, self.flow_label as u64);
        path_f::PACKET_RATE.set(p, self.packet_rate as u64);
        path_f::TRAFFIC_CLASS.set(p, self.traffic_class as u64);
        path_f::HOP_LIMIT.set(p, self.hop_limit as u64);
        path_f::SL.set(p, self.sl as u64);
        path_f::SUBNET_LOCAL.set(p, self.subnet_local as u64);
        path_f::LOCAL_ACK_TIMEOUT.set(p, self.local_ack_timeout as u64);
    }
}

/// CM REQ (IBA 12.6.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Req {
    pub local_comm_id: u32,
    pub service_id: u64,
    pub local_ca_guid: u64,
    pub local_qkey: u32,
    pub local_qpn: u32,
    pub responder_resources: u8,
    pub local_eecn: u32,
    pub initiator_depth: u8,
    pub remote_eecn: u32,
    pub remote_cm_response_timeout: u8,
    /// 0 = RC, 1 = UC.
    pub transport_service_type: u8,
    pub end_to_end_flow_control: bool,
    pub starting_psn: u32,
    pub local_cm_response_timeout: u8,
    pub retry_count: u8,
    pub pkey: u16,
    /// IB MTU enum: 1=256 .. 5=4096.
    pub path_mtu: u8,
    pub rdc_exists: bool,
    pub rnr_retry_count: u8,
    pub max_cm_retries: u8,
    pub srq: bool,
    pub extended_transport_type: u8,
    pub primary: Path,
    pub alternate: Path,
    pub sap_supported: bool,
    pub private_data: [u8; req_f::PRIVATE_DATA_LEN],
}

/// CM REP (IBA 12.6.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rep {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub local_qkey: u32,
    pub local_qpn: u32,
    pub local_eecn: u32,
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub target_ack_delay: u8,
    pub failover_accepted: u8,
    pub end_to_end_flow_control: bool,
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub local_ca_guid: u64,
    pub private_data: [u8; rep_f::PRIVATE_DATA_LEN],
}

/// CM REJ (IBA 12.6.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rej {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// [`msg_code`].
    pub message_rejected: u8,
    pub reject_info_length: u8,
    /// [`rej_reason`].
    pub reason: u16,
    pub ari: [u8; rej_f::ARI_LEN],
    pub private_data: [u8; rej_f::PRIVATE_DATA_LEN],
}

/// CM MRA (IBA 12.6.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mra {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// [`msg_code`].
    pub message_mraed: u8,
    pub service_timeout: u8,
    pub private_data: [u8; mra_f::PRIVATE_DATA_LEN],
}

/// CM RTU (IBA 12.6.9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rtu {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub private_data: [u8; short_f::RTU_PRIVATE_DATA_LEN],
}

/// CM DREQ (IBA 12.6.10).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dreq {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub remote_qpn: u32,
    pub private_data: [u8; short_f::DREQ_PRIVATE_DATA_LEN],
}

/// CM DREP (IBA 12.6.11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drep {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub private_data: [u8; short_f::DREP_PRIVATE_DATA_LEN],
}

/// A decoded CM message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmMsg {
    Req(Req),
    Rep(Rep),
    Rej(Rej),
    Mra(Mra),
    Rtu(Rtu),
    Dreq(Dreq),
    Drep(Drep),
}

/// Copy `src` into the start of a zeroed N-byte array (longer input is truncated; callers
/// that care check lengths before).
pub fn pad<const N: usize>(src: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    let n = src.len().min(N);
    a[..n].copy_from_slice(&src[..n]);
    a
}

fn arr<const N: usize>(b: &[u8], off: usize) -> [u8; N] {
    pad(&b[off..off + N])
}

impl CmMsg {
    pub fn attr_id(&self) -> u16 {
        match self {
            CmMsg::Req(_) => attr::REQ,
            CmMsg::Rep(_) => attr::REP,
            CmMsg::Rej(_) => attr::REJ,
            CmMsg::Mra(_) => attr::MRA,
            CmMsg::Rtu(_) => attr::RTU,
            CmMsg::Dreq(_) => attr::DREQ,
            CmMsg::Drep(_) => attr::DREP,
        }
    }

    /// Decode a MAD (exactly or at least 256 bytes; extra bytes ignored).
    pub fn parse(mad: &[u8]) -> Result<(MadHdr, CmMsg), WireError> {
        need(mad, MAD_LEN)?;
        let h = MadHdr::parse(mad)?;
        if h.base_version != MAD_BASE_VERSION || h.mgmt_class != MGMT_CLASS_CM || h.class_version != CM_CLASS_VERSION || h.method != METHOD_SEND {
            return Err(WireError::NotCm { class: h.mgmt_class, class_version: h.class_version, method: h.method });
        }
        let b = &mad[MAD_HDR_LEN..MAD_LEN];
        let m = match h.attr_id {
            attr::REQ => CmMsg::Req(Req {
                local_comm_id: req_f::LOCAL_COMM_ID.get(b) as u32,
                service_id: req_f::SERVICE_ID.get(b),
                local_ca_guid: req_f::LOCAL_CA_GUID.get(b),
                local_qkey: req_f::LOCAL_Q_KEY.get(b) as u32,
                local_qpn: req_f::LOCAL_QPN.get(b) as u32,
                responder_resources: req_f::RESPONDER_RESOURCES.get(b) as u8,
                local_eecn: req_f::LOCAL_EECN.get(b) as u32,
                initiator_depth: req_f::INITIATOR_DEPTH.get(b) as u8,
                remote_eecn: req_f::REMOTE_EECN.get(b) as u32,
                remote_cm_response_timeout: req_f::REMOTE_CM_RESPONSE_TIMEOUT.get(b) as u8,
                transport_service_type: req_f::TRANSPORT_SERVICE_TYPE.get(b) as u8,
                end_to_end_flow_control: req_f::END_TO_END_FLOW_CONTROL.get(b) != 0,
                starting_psn: req_f::STARTING_PSN.get(b) as u32,
                local_cm_response_timeout: req_f::LOCAL_CM_RESPONSE_TIMEOUT.get(b) as u8,
                retry_count: req_f::RETRY_COUNT.get(b) as u8,
                pkey: req_f::PARTITION_KEY.get(b) as u16,
                path_mtu: req_f::PATH_PACKET_PAYLOAD_MTU.get(b) as u8,
                rdc_exists: req_f::RDC_EXISTS.get(b) != 0,
                rnr_retry_count: req_f::RNR_RETRY_COUNT.get(b) as u8,
                max_cm_retries: req_f::MAX_CM_RETRIES.get(b) as u8,
                srq: req_f::SRQ.get(b) != 0,
                extended_transport_type: req_f::EXTENDED_TRANSPORT_TYPE.get(b) as u8,
                primary: Path::parse(&b[req_f::PRIMARY_PATH..req_f::PRIMARY_PATH + path_f::LEN]),
                alternate: Path::parse(&b[req_f::ALTERNATE_PATH..req_f::ALTERNATE_PATH + path_f::LEN]),
                sap_supported: req_f::SAP_SUPPORTED.get(b) != 0,
                private_data: arr(b, req_f::PRIVATE_DATA),
            }),
            attr::REP => CmMsg::Rep(Rep {
                local_comm_id: rep_f::LOCAL_COMM_ID.get(b) as u32,
                remote_comm_id: rep_f::REMOTE_COMM_ID.get(b) as u32,
                local_qkey: rep_f::LOCAL_Q_KEY.get(b) as u32,
                local_qpn: rep_f::LOCAL_QPN.get(b) as u32,
                local_eecn: rep_f::LOCAL_EECN.get(b) as u32,
                starting_psn: rep_f::STARTING_PSN.get(b) as u32,
                responder_resources: rep_f::RESPONDER_RESOURCES.get(b) as u8,
                initiator_depth: rep_f::INITIATOR_DEPTH.get(b) as u8,
                target_ack_delay: rep_f::TARGET_ACK_DELAY.get(b) as u8,
                failover_accepted: rep_f::FAILOVER_ACCEPTED.get(b) as u8,
                end_to_end_flow_control: rep_f::END_TO_END_FLOW_CONTROL.get(b) != 0,
                rnr_retry_count: rep_f::RNR_RETRY_COUNT.get(b) as u8,
                srq: rep_f::SRQ.get(b) != 0,
                local_ca_guid: rep_f::LOCAL_CA_GUID.get(b),
                private_data: arr(b, rep_f::PRIVATE_DATA),
            }),
            attr::REJ => CmMsg::Rej(Rej {
                local_comm_id: rej_f::LOCAL_COMM_ID.get(b) as u32,
                remote_comm_id: rej_f::REMOTE_COMM_ID.get(b) as u32,
                message_rejected: rej_f::MESSAGE_REJECTED.get(b) as u8,
                reject_info_length: rej_f::REJECTED_INFO_LENGTH.get(b) as u8,
                reason: rej_f::REASON.get(b) as u16,
                ari: arr(b, rej_f::ARI),
                private_data: arr(b, rej_f::PRIVATE_DATA),
            }),
            attr::MRA => CmMsg::Mra(Mra {
                local_comm_id: mra_f::LOCAL_COMM_ID.get(b) as u32,
                remote_comm_id: mra_f::REMOTE_COMM_ID.get(b) as u32,
                message_mraed: mra_f::MESSAGE_MRAED.get(b) as u8,
                service_timeout: mra_f::SERVICE_TIMEOUT.get(b) as u8,
                private_data: arr(b, mra_f::PRIVATE_DATA),
            }),
            attr::RTU => CmMsg::Rtu(Rtu {
                local_comm_id: short_f::LOCAL_COMM_ID.get(b) as u32,
                remote_comm_id: short_f::REMOTE_COMM_ID.get(b) as u32,
                private_data: arr(b, short_f::RTU_PRIVATE_DATA),
            }),
            attr::DREQ => CmMsg::Dreq(Dreq {
                local_comm_id: short_f::LOCAL_COMM_ID.get(b) as u32,
                remote_comm_id: short_f::REMOTE_COMM_ID.get(b) as u32,
                remote_qpn: short_f::DREQ_REMOTE_QPN_EECN.get(b) as u32,
                private_data: arr(b, short_f::DREQ_PRIVATE_DATA),
            }),
            attr::DREP => CmMsg::Drep(Drep {
                local_comm_id: short_f::LOCAL_COMM_ID.get(b) as u32,
                remote_comm_id: short_f::REMOTE_COMM_ID.get(b) as u32,
                private_data: arr(b, short_f::DREP_PRIVATE_DATA),
            }),
            other => return Err(WireError::UnknownAttr(other)),
        };
        Ok((h, m))
    }

    /// Encode header + message into a full 256-byte MAD (reserved bytes zero).
    pub fn encode(&self, tid: u64) -> [u8; MAD_LEN] {
        let mut mad = [0u8; MAD_LEN];
        MadHdr::cm(self.attr_id(), tid).write(&mut mad);
        let b = &mut mad[MAD_HDR_LEN..];
        match self {
            CmMsg::Req(r) => {
                req_f::LOCAL_COMM_ID.set(b, r.local_comm_id as u64);
                req_f::SERVICE_ID.set(b, r.service_id);
                req_f::LOCAL_CA_GUID.set(b, r.local_ca_guid);
                req_f::LOCAL_Q_KEY.set(b, r.local_qkey as u64);
                req_f::LOCAL_QPN.set(b, r.local_qpn as u64);
                req_f::RESPONDER_RESOURCES.set(b, r.responder_resources as u64);
                req_f::LOCAL_EECN.set(b, r.local_eecn as u64);
                req_f::INITIATOR_DEPTH.set(b, r.initiator_depth as u64);
                req_f::REMOTE_EECN.set(b, r.remote_eecn as u64);
                req_f::REMOTE_CM_RESPONSE_TIMEOUT.set(b, r.remote_cm_response_timeout as u64);
                req_f::TRANSPORT_SERVICE_TYPE.set(b, r.transport_service_type as u64);
                req_f::END_TO_END_FLOW_CONTROL.set(b, r.end_to_end_flow_control as u64);
                req_f::STARTING_PSN.set(b, r.starting_psn as u64);
                req_f::LOCAL_CM_RESPONSE_TIMEOUT.set(b, r.local_cm_response_timeout as u64);
                req_f::RETRY_COUNT.set(b, r.retry_count as u64);
                req_f::PARTITION_KEY.set(b, r.pkey as u64);
                req_f::PATH_PACKET_PAYLOAD_MTU.set(b, r.path_mtu as u64);
                req_f::RDC_EXISTS.set(b, r.rdc_exists as u64);
                req_f::RNR_RETRY_COUNT.set(b, r.rnr_retry_count as u64);
                req_f::MAX_CM_RETRIES.set(b, r.max_cm_retries as u64);
                req_f::SRQ.set(b, r.srq as u64);
                req_f::EXTENDED_TRANSPORT_TYPE.set(b, r.extended_transport_type as u64);
                r.primary.write(&mut b[req_f::PRIMARY_PATH..req_f::PRIMARY_PATH + path_f::LEN]);
                r.alternate.write(&mut b[req_f::ALTERNATE_PATH..req_f::ALTERNATE_PATH + path_f::LEN]);
                req_f::SAP_SUPPORTED.set(b, r.sap_supported as u64);
                b[req_f::PRIVATE_DATA..].copy_from_slice(&r.private_data);
            }
            CmMsg::Rep(r) => {
                rep_f::LOCAL_COMM_ID.set(b, r.local_comm_id as u64);
                rep_f::REMOTE_COMM_ID.set(b, r.remote_comm_id as u64);
                rep_f::LOCAL_Q_KEY.set(b, r.local_qkey as u64);
                rep_f::LOCAL_QPN.set(b, r.local_qpn as u64);
                rep_f::LOCAL_EECN.set(b, r.local_eecn as u64);
                rep_f::STARTING_PSN.set(b, r.starting_psn as u64);
                rep_f::RESPONDER_RESOURCES.set(b, r.responder_resources as u64);
                rep_f::INITIATOR_DEPTH.set(b, r.initiator_depth as u64);
                rep_f::TARGET_ACK_DELAY.set(b, r.target_ack_delay as u64);
                rep_f::FAILOVER_ACCEPTED.set(b, r.failover_accepted as u64);
                rep_f::END_TO_END_FLOW_CONTROL.set(b, r.end_to_end_flow_control as u64);
                rep_f::RNR_RETRY_COUNT.set(b, r.rnr_retry_count as u64);
                rep_f::SRQ.set(b, r.srq as u64);
                rep_f::LOCAL_CA_GUID.set(b, r.local_ca_guid);
                b[rep_f::PRIVATE_DATA..].copy_from_slice(&r.private_data);
            }
            CmMsg::Rej(r) => {
                rej_f::LOCAL_COMM_ID.set(b, r.local_comm_id as u64);
                rej_f::REMOTE_COMM_ID.set(b, r.remote_comm_id as u64);
                rej_f::MESSAGE_REJECTED.set(b, r.message_rejected as u64);
                rej_f::REJECTED_INFO_LENGTH.set(b, r.reject_info_length as u64);
                rej_f::REASON.set(b, r.reason as u64);
                b[rej_f::ARI..rej_f::ARI + rej_f::ARI_LEN].copy_from_slice(&r.ari);
                b[rej_f::PRIVATE_DATA..].copy_from_slice(&r.private_data);
            }
            CmMsg::Mra(r) => {
                mra_f::LOCAL_COMM_ID.set(b, r.local_comm_id as u64);
                mra_f::REMOTE_COMM_ID.set(b, r.remote_comm_id as u64);
                mra_f::MESSAGE_MRAED.set(b, r.message_mraed as u64);
                mra_f::SERVICE_TIMEOUT.set(b, r.service_timeout as u64);
                b[mra_f::PRIVATE_DATA..].copy_from_slice(&r.private_data);
            }
            CmMsg::Rtu(r) => {
                short_f::LOCAL_COMM_ID.set(b, r.local_comm_id as u64);
                short_f::REMOTE_COMM_ID.set(b, r.remote_comm_id as u64);
                b[short_f::RTU_PRIVATE_DATA..].copy_from_slice(&r.private_data);
            }
            CmMsg::Dreq(r) => {
                short_f::LOCAL_COMM_ID.set(b, r.local_comm_id as u64);
                short_f::REMOTE_COMM_ID.set(b, r.remote_comm_id as u64);
                short_f::DREQ_REMOTE_QPN_EECN.set(b, r.remote_qpn as u64);
                b[short_f::DREQ_PRIVATE_DATA..].copy_from_slice(&r.private_data);
            }
            CmMsg::Drep(r) => {
                short_f::LOCAL_COMM_ID.set(b, r.local_comm_id as u64);
                short_f::REMOTE_COMM_ID.set(b, r.remote_comm_id as u64);
                b[short_f::DREP_PRIVATE_DATA..].copy_from_slice(&r.private_data);
            }
        }
        mad
    }
}

// ---------------------------------------------------------------------------------------------
// rdma_cm conventions (Linux drivers/infiniband/core/cma.c)

/// rdma_cm port space TCP (`RDMA_PS_TCP`).
pub const RDMA_PS_TCP: u64 = 0x0106;

/// Service ID for a TCP-port-space rdma_cm port (`rdma_get_service_id`): 0x0000000001060000 | port.
pub const fn service_id_tcp(port: u16) -> u64 {
    (RDMA_PS_TCP << 16) | port as u64
}

/// The port of a TCP-port-space service ID, or `None` for another port space.
pub const fn tcp_port_of_service_id(sid: u64) -> Option<u16> {
    if sid >> 16 == RDMA_PS_TCP {
        Some(sid as u16)
    } else {
        None
    }
}

/// rdma_cm header (`struct cma_hdr`) in front of REQ private data. 36 bytes.
pub mod cma_f {
    pub const CMA_VERSION: usize = 0;
    pub const IP_VERSION: usize = 1;
    pub const PORT: usize = 2;
    pub const SRC_ADDR: usize = 4;
    pub const DST_ADDR: usize = 20;
    pub const LEN: usize = 36;
    /// IPv4 addresses sit in the last 4 bytes of each 16-byte address field.
    pub const IP4_IN_ADDR: usize = 12;
}

/// The decoded rdma_cm header (IPv4 only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmaHdr {
    /// The active side's rdma_cm source port.
    pub src_port: u16,
    pub src_ip: [u8; 4],
    pub dst_ip: [u8; 4],
}

impl CmaHdr {
    pub const VERSION: u8 = 0;
    /// ip_version nibble in bits 7:4 of byte 1.
    pub const IPV4: u8 = 4;

    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        need(b, cma_f::LEN)?;
        let v = b[cma_f::CMA_VERSION];
        let ipv = b[cma_f::IP_VERSION] >> 4;
        if v != Self::VERSION || ipv != Self::IPV4 {
            return Err(WireError::BadCmaHeader { cma_version: v, ip_version: ipv });
        }
        let s = cma_f::SRC_ADDR + cma_f::IP4_IN_ADDR;
        let d = cma_f::DST_ADDR + cma_f::IP4_IN_ADDR;
        Ok(CmaHdr {
            src_port: u16::from_be_bytes([b[cma_f::PORT], b[cma_f::PORT + 1]]),
            src_ip: [b[s], b[s + 1], b[s + 2], b[s + 3]],
            dst_ip: [b[d], b[d + 1], b[d + 2], b[d + 3]],
        })
    }

    pub fn write(&self, b: &mut [u8]) {
        b[..cma_f::LEN].fill(0);
        b[cma_f::CMA_VERSION] = Self::VERSION;
        b[cma_f::IP_VERSION] = Self::IPV4 << 4;
        b[cma_f::PORT..cma_f::PORT + 2].copy_from_slice(&self.src_port.to_be_bytes());
        let s = cma_f::SRC_ADDR + cma_f::IP4_IN_ADDR;
        let d = cma_f::DST_ADDR + cma_f::IP4_IN_ADDR;
        b[s..s + 4].copy_from_slice(&self.src_ip);
        b[d..d + 4].copy_from_slice(&self.dst_ip);
    }
}

/// IPv4-mapped RoCEv2 GID (`::ffff:a.b.c.d`).
pub fn gid_from_ipv4(ip: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&ip);
    g
}

/// The IPv4 address in an IPv4-mapped GID, if it is one.
pub fn ipv4_from_gid(g: &[u8; 16]) -> Option<[u8; 4]> {
    if g[..10].iter().all(|&x| x == 0) && g[10] == 0xff && g[11] == 0xff {
        Some([g[12], g[13], g[14], g[15]])
    } else {
        None
    }
}

/// Node GUID as EUI-64 of the MAC (rxe: node_guid = EUI-64 of the netdev MAC).
pub fn guid_from_mac(m: [u8; 6]) -> u64 {
    u64::from_be_bytes([m[0] ^ 0x02, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]])
}

/// Flow label rdma_cm uses for RoCEv2 over IPv4: `(src_port * 31 + dst_port) & 0xFFFFF`
/// from the rdma_cm ports. Src: wire.md 2.3 (cma.c).
pub fn rdma_cm_flow_label(src_port: u16, dst_port: u16) -> u32 {
    ((src_port as u32).wrapping_mul(31).wrapping_add(dst_port as u32)) & 0xF_FFFF
}

/// UDP source port from a flow label (Linux `rdma_flow_label_to_udp_sport`):
/// `0xC000 | ((fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14))`.
pub fn flow_label_to_udp_sport(fl: u32) -> u16 {
    let low = fl & 0x3FFF;
    let high = (fl & 0xF_C000) >> 14;
    (0xC000 | (low ^ high)) as u16
}

/// Bytes a RoCEv2 packet adds around its path-MTU payload at most: GRH 40 + UDP 8 + BTH 12 +
/// XRC 4 + AtomicETH 28 + ICRC 4 (the overhead Linux `iboe_get_mtu` takes off the Ethernet
/// MTU). A path MTU fits a port when it plus this is at most the port's MTU.
pub const ROCEV2_MTU_OVERHEAD: u32 = 96;

/// IB MTU enum → bytes (1=256 .. 5=4096).
pub fn mtu_enum_to_bytes(e: u8) -> Option<u32> {
    match e {
        1..=5 => Some(128u32 << e),
        _ => None,
    }
}

/// Bytes → IB MTU enum.
pub fn mtu_bytes_to_enum(b: u32) -> Option<u8> {
    match b {
        256 => Some(1),
        512 => Some(2),
        1024 => Some(3),
        2048 => Some(4),
        4096 => Some(5),
        _ => None,
    }
}

/// CM time field (4.096 µs × 2^v) in nanoseconds, saturating for v ≥ 31.
pub fn cm_time_ns(v: u8) -> u64 {
    4096u64 << v.min(31)
}

// ---------------------------------------------------------------------------------------------
// NVMe-RDMA CM private data (Linux include/linux/nvme-rdma.h). Little-endian.

/// `struct nvme_rdma_cm_req` (32 B; after the 36-byte cma_hdr in REQ private data).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NvmeRdmaCmReq {
    pub recfmt: u16,
    pub qid: u16,
    pub hrqsize: u16,
    pub hsqsize: u16,
    /// Newer kernels: controller ID for I/O queues (0 otherwise / on older hosts).
    pub cntlid: u16,
}

/// `struct nvme_rdma_cm_rep` (32 B).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NvmeRdmaCmRep {
    pub recfmt: u16,
    pub crqsize: u16,
}

/// `struct nvme_rdma_cm_rej` (4 B), sent with REJ reason 28 (consumer defined).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NvmeRdmaCmRej {
    pub recfmt: u16,
    pub sts: u16,
}

/// `enum nvme_rdma_cm_status`.
pub mod nvme_rdma_sts {
    pub const INVALID_LEN: u16 = 0x01;
    pub const INVALID_RECFMT: u16 = 0x02;
    pub const INVALID_QID: u16 = 0x03;
    pub const INVALID_HSQSIZE: u16 = 0x04;
    pub const INVALID_HRQSIZE: u16 = 0x05;
    pub const NO_RSC: u16 = 0x06;
    pub const INVALID_IRD: u16 = 0x07;
    pub const INVALID_ORD: u16 = 0x08;
}

fn le16(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}

impl NvmeRdmaCmReq {
    pub const LEN: usize = 32;
    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        need(b, Self::LEN)?;
        Ok(NvmeRdmaCmReq { recfmt: le16(b, 0), qid: le16(b, 2), hrqsize: le16(b, 4), hsqsize: le16(b, 6), cntlid: le16(b, 8) })
    }
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..2].copy_from_slice(&self.recfmt.to_le_bytes());
        b[2..4].copy_from_slice(&self.qid.to_le_bytes());
        b[4..6].copy_from_slice(&self.hrqsize.to_le_bytes());
        b[6..8].copy_from_slice(&self.hsqsize.to_le_bytes());
        b[8..10].copy_from_slice(&self.cntlid.to_le_bytes());
        b
    }
}

impl NvmeRdmaCmRep {
    pub const LEN: usize = 32;
    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        need(b, Self::LEN)?;
        Ok(NvmeRdmaCmRep { recfmt: le16(b, 0), crqsize: le16(b, 2) })
    }
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..2].copy_from_slice(&self.recfmt.to_le_bytes());
        b[2..4].copy_from_slice(&self.crqsize.to_le_bytes());
        b
    }
}

impl NvmeRdmaCmRej {
    pub const LEN: usize = 4;
    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        need(b, Self::LEN)?;
        Ok(NvmeRdmaCmRej { recfmt: le16(b, 0), sts: le16(b, 2) })
    }
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..2].copy_from_slice(&self.recfmt.to_le_bytes());
        b[2..4].copy_from_slice(&self.sts.to_le_bytes());
        b
    }
}
