//! NVMe-oF / NVMe-RDMA wire layouts (little-endian) as zerocopy types; the NVMe Base ones
//! come from `nvme-spec`.
//!
//! Sources (facts only): NVMe Base 2.0 / NVMe-oF 1.1 as reflected in Linux
//! `include/linux/nvme.h` (struct nvme_command, nvme_completion, nvme_sgl_desc,
//! nvme_keyed_sgl_desc, nvmf_connect_command, nvmf_connect_data, nvmf_property_*_command,
//! nvme_id_ctrl, nvme_id_ns, nvmf_disc_rsp_page_hdr/entry, nvme_error_slot, nvme_smart_log),
//! `include/linux/nvme-rdma.h` (CM private data), and the project's shared/reference/wire.md §3.
//! Every size is asserted at compile time.

use zerocopy::byteorder::little_endian::{U16, U32, U64, U128};

// The NVMe Base layouts shared with the local driver (SQE, CQE, status, opcodes, Identify,
// DSM range) are declared once in `nvme-spec`; re-exported under this module's old names.
// `SglDesc` is the SQE's 16-byte data pointer in its SGL form.
pub use nvme_spec::{
    admin_op, cns, fid, io_op, oncs, Cqe, DataPointer as SglDesc, DsmRange, IdentifyController as IdentifyCtrl,
    IdentifyControllerNvm as IdentifyCtrlNvm, IdentifyNamespace as IdentifyNs, LbaFormat, Sqe, Status, prop, rw_cdw12, vwc, PSDT_SGL,
};

use nvme_spec::layout as wire;

// ---------------------------------------------------------------------------------------------
// Opcodes and constants
// ---------------------------------------------------------------------------------------------

/// The Fabrics command opcode; FCTYPE is SQE byte 4.
pub const FABRICS_OPCODE: u8 = 0x7F;
/// Fabrics command types.
pub mod fctype {
    pub const PROPERTY_SET: u8 = 0x00;
    pub const CONNECT: u8 = 0x01;
    pub const PROPERTY_GET: u8 = 0x04;
    pub const AUTH_SEND: u8 = 0x05;
    pub const AUTH_RECV: u8 = 0x06;
    pub const DISCONNECT: u8 = 0x08;
}
/// Log page identifiers.
pub mod lid {
    pub const ERROR: u8 = 0x01;
    pub const SMART: u8 = 0x02;
    pub const FW_SLOT: u8 = 0x03;
    pub const CHANGED_NS: u8 = 0x04;
    pub const DISCOVERY: u8 = 0x70;
}
/// The well-known discovery subsystem NQN.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";
/// Connect data CNTLID meaning "any controller" (dynamic model).
pub const CNTLID_DYNAMIC: u16 = 0xFFFF;
/// SGL descriptor type bytes (SQE byte 39 / descriptor byte 15).
pub mod sgl_type {
    /// Data block, offset subtype: in-capsule data.
    pub const DATA_OFFSET: u8 = 0x01;
    /// Keyed data block, address subtype.
    pub const KEYED_ADDR: u8 = 0x40;
    /// Keyed data block, invalidate-key subtype.
    pub const KEYED_INVALIDATE: u8 = 0x4F;
}

// ---------------------------------------------------------------------------------------------
// Submission / completion entries and SGL descriptors
// ---------------------------------------------------------------------------------------------

/// A decoded data SGL descriptor (the only kinds NVMe-RDMA uses; MSDBD = 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sgl {
    /// Keyed data block: host memory at `addr` with `key`; `invalidate` for subtype 0xF.
    Keyed { addr: u64, len: u32, key: u32, invalidate: bool },
    /// In-capsule data at capsule byte 64 + `offset`.
    Inline { offset: u64, len: u32 },
}

impl Sgl {
    /// Decode per the type byte (high nibble type, low nibble subtype) as nvmet does.
    pub fn decode(d: &SglDesc) -> Result<Sgl, Status> {
        match d.typ {
            sgl_type::KEYED_ADDR | sgl_type::KEYED_INVALIDATE => {
                let len = u32::from_le_bytes([d.b8[0], d.b8[1], d.b8[2], 0]);
                let key = u32::from_le_bytes([d.b8[3], d.b8[4], d.b8[5], d.b8[6]]);
                Ok(Sgl::Keyed { addr: d.addr.get(), len, key, invalidate: d.typ == sgl_type::KEYED_INVALIDATE })
            }
            sgl_type::DATA_OFFSET => {
                let len = u32::from_le_bytes([d.b8[0], d.b8[1], d.b8[2], d.b8[3]]);
                Ok(Sgl::Inline { offset: d.addr.get(), len })
            }
            _ => Err(Status::SGL_INVALID_TYPE),
        }
    }
    /// Data length described.
    pub fn len(&self) -> u32 {
        match *self {
            Sgl::Keyed { len, .. } | Sgl::Inline { len, .. } => len,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Encode into a descriptor.
    pub fn encode(&self) -> SglDesc {
        let mut d = SglDesc::zeroed();
        match *self {
            Sgl::Keyed { addr, len, key, invalidate } => {
                d.addr = U64::new(addr);
                let l = len.to_le_bytes();
                let k = key.to_le_bytes();
                d.b8 = [l[0], l[1], l[2], k[0], k[1], k[2], k[3]];
                d.typ = if invalidate { sgl_type::KEYED_INVALIDATE } else { sgl_type::KEYED_ADDR };
            }
            Sgl::Inline { offset, len } => {
                d.addr = U64::new(offset);
                let l = len.to_le_bytes();
                d.b8 = [l[0], l[1], l[2], l[3], 0, 0, 0];
                d.typ = sgl_type::DATA_OFFSET;
            }
        }
        d
    }
}

// ---------------------------------------------------------------------------------------------
// Fabrics commands
// ---------------------------------------------------------------------------------------------

wire! {
    /// Connect command (64 B). Src: nvme.h `struct nvmf_connect_command`.
    terse pub struct ConnectCmd [64] {
        pub opcode: u8,
        pub rsvd1: u8,
        pub cid: U16,
        pub fctype: u8,
        pub rsvd2: [u8; 19],
        pub dptr: SglDesc,
        pub recfmt: U16,
        pub qid: U16,
        /// 0-based submission queue size.
        pub sqsize: U16,
        /// Bit 2: disable SQ flow control.
        pub cattr: u8,
        pub rsvd3: u8,
        /// Keep-alive timeout in milliseconds.
        pub kato: U32,
        pub rsvd4: [u8; 12],
    }
}
/// CATTR bit: SQ flow control disable.
pub const CATTR_DISABLE_SQFLOW: u8 = 1 << 2;

wire! {
    /// Connect data (1024 B). Src: nvme.h `struct nvmf_connect_data`.
    terse pub struct ConnectData [1024] {
        pub hostid: [u8; 16],
        pub cntlid: U16,
        pub rsvd4: [u8; 238],
        pub subsysnqn: [u8; 256],
        pub hostnqn: [u8; 256],
        pub rsvd5: [u8; 256],
    }
}
/// Offsets inside the connect data / command, for IATTR/IPO in Connect error DW0.
pub mod connect_off {
    pub const DATA_CNTLID: u32 = 16;
    pub const DATA_SUBNQN: u32 = 256;
    pub const DATA_HOSTNQN: u32 = 512;
    pub const SQE_QID: u32 = 42;
    pub const SQE_SQSIZE: u32 = 44;
    /// IATTR bit: the offset is in the connect data (else in the SQE).
    pub const IATTR_DATA: u32 = 1 << 16;
}

wire! {
    /// Property Get (64 B). Src: nvme.h `struct nvmf_property_get_command`.
    terse pub struct PropertyGetCmd [64] {
        pub opcode: u8,
        pub rsvd1: u8,
        pub cid: U16,
        pub fctype: u8,
        pub rsvd2: [u8; 35],
        /// Bits 2:0: 0 = 4 bytes, 1 = 8 bytes.
        pub attrib: u8,
        pub rsvd3: [u8; 3],
        pub offset: U32,
        pub rsvd4: [u8; 16],
    }
}
wire! {
    /// Property Set (64 B). Src: nvme.h `struct nvmf_property_set_command`.
    terse pub struct PropertySetCmd [64] {
        pub opcode: u8,
        pub rsvd1: u8,
        pub cid: U16,
        pub fctype: u8,
        pub rsvd2: [u8; 35],
        pub attrib: u8,
        pub rsvd3: [u8; 3],
        pub offset: U32,
        pub value: U64,
        pub rsvd4: [u8; 8],
    }
}

// ---------------------------------------------------------------------------------------------
// NVMe-RDMA CM private data (Src: include/linux/nvme-rdma.h)
// ---------------------------------------------------------------------------------------------

wire! {
    /// Host → target in the CM REQ (after rdma_cm's 36-byte header).
    terse pub struct RdmaCmReq [32] {
        pub recfmt: U16,
        pub qid: U16,
        pub hrqsize: U16,
        pub hsqsize: U16,
        pub rsvd: [u8; 24],
    }
}
wire! {
    /// Target → host in the CM REP.
    terse pub struct RdmaCmRep [32] {
        pub recfmt: U16,
        pub crqsize: U16,
        pub rsvd: [u8; 28],
    }
}
wire! {
    /// Target → host in a CM REJ (reason 28 consumer defined).
    terse pub struct RdmaCmRej [4] {
        pub recfmt: U16,
        pub sts: U16,
    }
}
/// NVMe-RDMA CM reject statuses.
pub mod cm_rej {
    pub const INVALID_LEN: u16 = 1;
    pub const INVALID_RECFMT: u16 = 2;
    pub const INVALID_QID: u16 = 3;
    pub const INVALID_HSQSIZE: u16 = 4;
    pub const INVALID_HRQSIZE: u16 = 5;
    pub const NO_RESOURCES: u16 = 6;
    pub const INVALID_IRD: u16 = 7;
    pub const INVALID_ORD: u16 = 8;
}

// ---------------------------------------------------------------------------------------------
// Identify
// ---------------------------------------------------------------------------------------------

/// CNTRLTYPE values.
pub mod cntrltype {
    pub const IO: u8 = 1;
    pub const DISCOVERY: u8 = 2;
}
/// SGLS bits.
pub mod sgls {
    /// SGLs supported, no alignment requirement.
    pub const SUPPORTED: u32 = 1 << 0;
    /// Keyed SGL data block descriptor supported.
    pub const KEYED: u32 = 1 << 2;
    /// Address used as offset (in-capsule data) supported.
    pub const OFFSET: u32 = 1 << 20;
}
/// OAES bit: namespace attribute notices.
pub const OAES_NS_ATTR: u32 = 1 << 8;

wire! {
    /// Namespace identification descriptor header (4 B), followed by NIDL bytes.
    terse pub struct NsIdDescHdr [4] {
        pub nidt: u8,
        pub nidl: u8,
        pub rsvd: U16,
    }
}
/// NIDT values.
pub mod nidt {
    pub const EUI64: u8 = 1;
    pub const NGUID: u8 = 2;
    pub const UUID: u8 = 3;
    pub const CSI: u8 = 4;
}

wire! {
    /// Active namespace ID list / changed namespace list (4096 B: 1024 NSIDs, 0-terminated).
    terse pub struct NsList [4096] {
        pub ids: [U32; 1024],
    }
}

/// DSM CDW11 attribute: deallocate.
pub const DSM_ATTR_DEALLOCATE: u32 = 1 << 2;

// ---------------------------------------------------------------------------------------------
// Log pages
// ---------------------------------------------------------------------------------------------

wire! {
    /// Discovery log page header (1024 B). Src: nvme.h `struct nvmf_disc_rsp_page_hdr`.
    terse pub struct DiscLogHdr [1024] {
        pub genctr: U64,
        pub numrec: U64,
        pub recfmt: U16,
        pub rsvd: [u8; 1006],
    }
}
wire! {
    /// Discovery log entry (1024 B). Src: nvme.h `struct nvmf_disc_rsp_page_entry`.
    terse pub struct DiscLogEntry [1024] {
        pub trtype: u8,
        pub adrfam: u8,
        pub subtype: u8,
        pub treq: u8,
        pub portid: U16,
        pub cntlid: U16,
        pub asqsz: U16,
        pub eflags: U16,
        pub rsvd12: [u8; 20],
        pub trsvcid: [u8; 32],
        pub rsvd64: [u8; 192],
        pub subnqn: [u8; 256],
        pub traddr: [u8; 256],
        /// RDMA TSAS: qptype, prtype, cms, 5 rsvd, pkey (LE16), rest reserved.
        pub tsas: [u8; 256],
    }
}
/// Discovery entry values.
pub mod disc {
    pub const TRTYPE_RDMA: u8 = 1;
    pub const ADRFAM_IPV4: u8 = 1;
    pub const SUBTYPE_DISCOVERY: u8 = 3;
    pub const SUBTYPE_NVME: u8 = 2;
    pub const QPTYPE_CONNECTED: u8 = 1;
    pub const PRTYPE_NOT_SPECIFIED: u8 = 1;
    pub const CMS_RDMA_CM: u8 = 1;
}

wire! {
    /// Error information log entry (64 B). Src: nvme.h `struct nvme_error_slot`.
    terse pub struct ErrorLogEntry [64] {
        pub error_count: U64,
        pub sqid: U16,
        pub cmdid: U16,
        pub status_field: U16,
        pub param_error_location: U16,
        pub lba: U64,
        pub nsid: U32,
        pub vs: u8,
        pub trtype: u8,
        pub rsvd30: [u8; 2],
        pub cs: U64,
        pub trtype_spec_info: U16,
        pub rsvd42: [u8; 22],
    }
}

wire! {
    /// SMART / health information log (512 B). Src: nvme.h `struct nvme_smart_log`.
    terse pub struct SmartLog [512] {
        pub critical_warning: u8,
        /// Composite temperature in kelvin.
        pub temperature: U16,
        pub avail_spare: u8,
        pub spare_thresh: u8,
        pub percent_used: u8,
        pub endu_grp_crit_warn: u8,
        pub rsvd7: [u8; 25],
        /// In thousands of 512-byte units.
        pub data_units_read: U128,
        pub data_units_written: U128,
        pub host_reads: U128,
        pub host_writes: U128,
        pub ctrl_busy_time: U128,
        pub power_cycles: U128,
        pub power_on_hours: U128,
        pub unsafe_shutdowns: U128,
        pub media_errors: U128,
        pub num_err_log_entries: U128,
        pub warning_temp_time: U32,
        pub critical_comp_time: U32,
        pub temp_sensor: [U16; 8],
        pub thm_temp_trans_count: [U32; 2],
        pub thm_temp_total_time: [U32; 2],
        pub rsvd232: [u8; 280],
    }
}

wire! {
    /// Firmware slot information log (512 B).
    terse pub struct FwSlotLog [512] {
        pub afi: u8,
        pub rsvd1: [u8; 7],
        pub frs: [[u8; 8]; 7],
        pub rsvd64: [u8; 448],
    }
}

/// Async event: type notice (2), info NS attribute changed (0), log page changed NS (0x04).
pub const AEN_NS_CHANGED: u32 = 2 | (0 << 8) | ((lid::CHANGED_NS as u32) << 16);
/// Async event config bit enabling namespace attribute notices.
pub const AEC_NS_ATTR: u32 = 1 << 8;

/// Copy `s` into a fixed field, padded with `pad` (space for Identify strings, NUL for NQNs).
pub fn put_str(dst: &mut [u8], s: &str, pad: u8) {
    dst.fill(pad);
    let n = core::cmp::min(dst.len(), s.len());
    dst[..n].copy_from_slice(&s.as_bytes()[..n]);
}

/// The string in a NUL-padded field (up to the first NUL), if it is valid UTF-8.
pub fn get_str(src: &[u8]) -> Option<&str> {
    let end = src.iter().position(|&b| b == 0).unwrap_or(src.len());
    core::str::from_utf8(&src[..end]).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::offset_of;

    #[test]
    fn other_offsets_match_spec() {
        assert_eq!(offset_of!(ConnectCmd, qid), 42);
        assert_eq!(offset_of!(ConnectCmd, sqsize), 44);
        assert_eq!(offset_of!(ConnectCmd, cattr), 46);
        assert_eq!(offset_of!(ConnectCmd, kato), 48);
        assert_eq!(offset_of!(PropertyGetCmd, attrib), 40);
        assert_eq!(offset_of!(PropertyGetCmd, offset), 44);
        assert_eq!(offset_of!(PropertySetCmd, value), 48);
        assert_eq!(offset_of!(ConnectData, subsysnqn), 256);
        assert_eq!(offset_of!(ConnectData, hostnqn), 512);
        assert_eq!(offset_of!(DiscLogEntry, trsvcid), 32);
        assert_eq!(offset_of!(DiscLogEntry, subnqn), 256);
        assert_eq!(offset_of!(DiscLogEntry, traddr), 512);
        assert_eq!(offset_of!(DiscLogEntry, tsas), 768);
        assert_eq!(offset_of!(SmartLog, data_units_read), 32);
        assert_eq!(offset_of!(SmartLog, num_err_log_entries), 176);
        assert_eq!(offset_of!(SmartLog, temp_sensor), 200);
    }

    #[test]
    fn sgl_roundtrip() {
        for s in [
            Sgl::Keyed { addr: 0x1122_3344_5566_7788, len: 0xABCDEF, key: 0xDEAD_BEEF, invalidate: true },
            Sgl::Keyed { addr: 1, len: 4096, key: 7, invalidate: false },
            Sgl::Inline { offset: 0, len: 4096 },
        ] {
            assert_eq!(Sgl::decode(&s.encode()), Ok(s));
        }
        let mut d = SglDesc::zeroed();
        d.typ = 0x00;
        assert_eq!(Sgl::decode(&d), Err(Status::SGL_INVALID_TYPE));
    }
}
