//! NVMe / NVMe-oF / NVMe-RDMA wire layouts (little-endian), declared once as zerocopy types.
//!
//! Sources (facts only): NVMe Base 2.0 / NVMe-oF 1.1 as reflected in Linux
//! `include/linux/nvme.h` (struct nvme_command, nvme_completion, nvme_sgl_desc,
//! nvme_keyed_sgl_desc, nvmf_connect_command, nvmf_connect_data, nvmf_property_*_command,
//! nvme_id_ctrl, nvme_id_ns, nvmf_disc_rsp_page_hdr/entry, nvme_error_slot, nvme_smart_log),
//! `include/linux/nvme-rdma.h` (CM private data), and the project's shared/reference/wire.md §3.
//! Every size is asserted at compile time.

use zerocopy::byteorder::little_endian::{U16, U32, U64, U128};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

macro_rules! wire {
    ($(#[$m:meta])* pub struct $name:ident [$size:expr] { $($(#[$fm:meta])* pub $f:ident : $t:ty),* $(,)? }) => {
        $(#[$m])*
        #[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy)]
        #[repr(C)]
        pub struct $name { $($(#[$fm])* pub $f: $t),* }
        const _: () = assert!(core::mem::size_of::<$name>() == $size);
        const _: () = assert!(core::mem::align_of::<$name>() == 1);
        impl $name {
            /// Wire size in bytes.
            pub const SIZE: usize = $size;
            /// An all-zero value.
            pub fn zeroed() -> Self { <Self as zerocopy::FromZeros>::new_zeroed() }
        }
        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                write!(f, "{}[{} B]", stringify!($name), $size)
            }
        }
    };
}

// ---------------------------------------------------------------------------------------------
// Opcodes and constants
// ---------------------------------------------------------------------------------------------

/// Admin opcodes (NVMe Base §5).
pub mod admin_op {
    pub const GET_LOG_PAGE: u8 = 0x02;
    pub const IDENTIFY: u8 = 0x06;
    pub const ABORT: u8 = 0x08;
    pub const SET_FEATURES: u8 = 0x09;
    pub const GET_FEATURES: u8 = 0x0A;
    pub const ASYNC_EVENT: u8 = 0x0C;
    pub const KEEP_ALIVE: u8 = 0x18;
}
/// NVM I/O opcodes.
pub mod io_op {
    pub const FLUSH: u8 = 0x00;
    pub const WRITE: u8 = 0x01;
    pub const READ: u8 = 0x02;
    pub const WRITE_ZEROES: u8 = 0x08;
    pub const DSM: u8 = 0x09;
}
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
/// Controller property offsets (NVMe-oF §3.5 / NVMe Base §3.1.3).
pub mod prop {
    pub const CAP: u32 = 0x00;
    pub const VS: u32 = 0x08;
    pub const INTMS: u32 = 0x0C;
    pub const INTMC: u32 = 0x10;
    pub const CC: u32 = 0x14;
    pub const CSTS: u32 = 0x1C;
    pub const NSSR: u32 = 0x20;
}
/// Log page identifiers.
pub mod lid {
    pub const ERROR: u8 = 0x01;
    pub const SMART: u8 = 0x02;
    pub const FW_SLOT: u8 = 0x03;
    pub const CHANGED_NS: u8 = 0x04;
    pub const DISCOVERY: u8 = 0x70;
}
/// Feature identifiers.
pub mod fid {
    pub const NUM_QUEUES: u8 = 0x07;
    pub const ASYNC_EVENT_CONFIG: u8 = 0x0B;
    pub const KEEP_ALIVE_TIMER: u8 = 0x0F;
}
/// Identify CNS values.
pub mod cns {
    pub const NAMESPACE: u8 = 0x00;
    pub const CONTROLLER: u8 = 0x01;
    pub const ACTIVE_NS_LIST: u8 = 0x02;
    pub const NS_DESC_LIST: u8 = 0x03;
}
/// The well-known discovery subsystem NQN.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";
/// Connect data CNTLID meaning "any controller" (dynamic model).
pub const CNTLID_DYNAMIC: u16 = 0xFFFF;
/// PSDT value Linux sets in SQE flags: SGL, metadata contiguous.
pub const PSDT_SGL: u8 = 0x40;
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
// Status
// ---------------------------------------------------------------------------------------------

/// An NVMe completion status: status code type, status code, DNR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Status {
    pub sct: u8,
    pub sc: u8,
    pub dnr: bool,
}

impl Status {
    pub const SUCCESS: Status = Status { sct: 0, sc: 0, dnr: false };
    const fn g(sc: u8) -> Status {
        Status { sct: 0, sc, dnr: true }
    }
    const fn cs(sc: u8) -> Status {
        Status { sct: 1, sc, dnr: true }
    }
    // Generic (SCT 0).
    pub const INVALID_OPCODE: Status = Status::g(0x01);
    pub const INVALID_FIELD: Status = Status::g(0x02);
    pub const DATA_XFER_ERROR: Status = Status::g(0x04);
    pub const INTERNAL: Status = Status { sct: 0, sc: 0x06, dnr: false };
    pub const ABORT_SQ_DELETED: Status = Status { sct: 0, sc: 0x08, dnr: false };
    pub const INVALID_NS: Status = Status::g(0x0B);
    pub const CMD_SEQ_ERROR: Status = Status::g(0x0C);
    pub const SGL_INVALID_DATA: Status = Status::g(0x0F);
    pub const SGL_INVALID_TYPE: Status = Status::g(0x11);
    pub const SGL_INVALID_OFFSET: Status = Status::g(0x16);
    pub const KA_EXPIRED: Status = Status::g(0x19);
    pub const KA_INVALID: Status = Status::g(0x1A);
    pub const LBA_RANGE: Status = Status::g(0x80);
    pub const CAP_EXCEEDED: Status = Status::g(0x81);
    // Command specific (SCT 1).
    pub const QID_INVALID: Status = Status::cs(0x01);
    pub const ASYNC_LIMIT: Status = Status::cs(0x05);
    pub const INVALID_LOG_PAGE: Status = Status::cs(0x09);
    pub const FEATURE_NOT_SAVEABLE: Status = Status::cs(0x0D);
    // Fabrics (SCT 1, 0x80..).
    pub const CONNECT_FORMAT: Status = Status::cs(0x80);
    pub const CONNECT_CTRL_BUSY: Status = Status::cs(0x81);
    pub const CONNECT_INVALID_PARAM: Status = Status::cs(0x82);
    pub const CONNECT_RESTART_DISC: Status = Status::cs(0x83);
    pub const CONNECT_INVALID_HOST: Status = Status::cs(0x84);

    /// The CQE status field (phase bit 0 stays 0 on fabrics).
    pub const fn to_field(self) -> u16 {
        ((self.sc as u16) << 1) | (((self.sct & 7) as u16) << 9) | ((self.dnr as u16) << 15)
    }
    /// Decode a CQE status field.
    pub const fn from_field(v: u16) -> Status {
        Status { sc: (v >> 1) as u8, sct: ((v >> 9) & 7) as u8, dnr: v & 0x8000 != 0 }
    }
    pub const fn is_success(self) -> bool {
        self.sct == 0 && self.sc == 0
    }
}

// ---------------------------------------------------------------------------------------------
// Submission / completion entries and SGL descriptors
// ---------------------------------------------------------------------------------------------

wire! {
    /// A 16-byte SGL descriptor as raw fields; interpret with [`Sgl::decode`].
    pub struct SglDesc [16] {
        pub addr: U64,
        /// Bytes 8..15: keyed: len24 + key32; data block: len32 + 3 reserved.
        pub b8: [u8; 7],
        pub typ: u8,
    }
}

wire! {
    /// Submission queue entry (64 B). Src: nvme.h `struct nvme_common_command`.
    pub struct Sqe [64] {
        pub opcode: u8,
        pub flags: u8,
        pub cid: U16,
        /// NSID; for Fabrics commands byte 0 of this field is FCTYPE.
        pub nsid: U32,
        pub cdw2: U32,
        pub cdw3: U32,
        pub mptr: U64,
        pub dptr: SglDesc,
        pub cdw10: U32,
        pub cdw11: U32,
        pub cdw12: U32,
        pub cdw13: U32,
        pub cdw14: U32,
        pub cdw15: U32,
    }
}

impl Sqe {
    /// Fabrics command type (SQE byte 4).
    pub fn fctype(&self) -> u8 {
        self.nsid.get().to_le_bytes()[0]
    }
    pub fn set_fctype(&mut self, t: u8) {
        self.nsid = U32::new(t as u32);
    }
}

wire! {
    /// Completion queue entry (16 B). Src: nvme.h `struct nvme_completion`.
    pub struct Cqe [16] {
        pub dw0: U32,
        pub dw1: U32,
        pub sqhd: U16,
        pub sqid: U16,
        pub cid: U16,
        pub status: U16,
    }
}

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
    pub struct ConnectCmd [64] {
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
    pub struct ConnectData [1024] {
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
    pub struct PropertyGetCmd [64] {
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
    pub struct PropertySetCmd [64] {
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
    pub struct RdmaCmReq [32] {
        pub recfmt: U16,
        pub qid: U16,
        pub hrqsize: U16,
        pub hsqsize: U16,
        pub rsvd: [u8; 24],
    }
}
wire! {
    /// Target → host in the CM REP.
    pub struct RdmaCmRep [32] {
        pub recfmt: U16,
        pub crqsize: U16,
        pub rsvd: [u8; 28],
    }
}
wire! {
    /// Target → host in a CM REJ (reason 28 consumer defined).
    pub struct RdmaCmRej [4] {
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

wire! {
    /// Identify Controller (4096 B). Src: nvme.h `struct nvme_id_ctrl`; wire.md §3.6.
    pub struct IdentifyCtrl [4096] {
        pub vid: U16,
        pub ssvid: U16,
        pub sn: [u8; 20],
        pub mn: [u8; 40],
        pub fr: [u8; 8],
        pub rab: u8,
        pub ieee: [u8; 3],
        pub cmic: u8,
        /// 2^n × MPSMIN (4 KiB); 0 = no limit.
        pub mdts: u8,
        pub cntlid: U16,
        pub ver: U32,
        pub rtd3r: U32,
        pub rtd3e: U32,
        pub oaes: U32,
        pub ctratt: U32,
        pub rrls: U16,
        pub rsvd102: [u8; 9],
        /// 1 I/O, 2 discovery, 3 administrative.
        pub cntrltype: u8,
        pub fguid: [u8; 16],
        pub crdt: [U16; 3],
        pub rsvd134: [u8; 122],
        pub oacs: U16,
        pub acl: u8,
        pub aerl: u8,
        pub frmw: u8,
        pub lpa: u8,
        pub elpe: u8,
        pub npss: u8,
        pub avscc: u8,
        pub apsta: u8,
        pub wctemp: U16,
        pub cctemp: U16,
        pub rsvd270: [u8; 50],
        /// Keep-alive granularity in 100 ms units.
        pub kas: U16,
        pub rsvd322: [u8; 190],
        pub sqes: u8,
        pub cqes: u8,
        pub maxcmd: U16,
        pub nn: U32,
        pub oncs: U16,
        pub fuses: U16,
        pub fna: u8,
        pub vwc: u8,
        pub awun: U16,
        pub awupf: U16,
        pub nvscc: u8,
        pub nwpc: u8,
        pub acwu: U16,
        pub rsvd534: [u8; 2],
        pub sgls: U32,
        pub mnan: U32,
        pub rsvd544: [u8; 224],
        pub subnqn: [u8; 256],
        pub rsvd1024: [u8; 768],
        /// I/O queue command capsule size in 16-byte units.
        pub ioccsz: U32,
        pub iorcsz: U32,
        pub icdoff: U16,
        pub fcatt: u8,
        pub msdbd: u8,
        pub ofcs: U16,
        pub rsvd1806: [u8; 242],
        pub psd: [u8; 1024],
        pub vs: [u8; 1024],
    }
}
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
/// ONCS bits.
pub mod oncs {
    pub const DSM: u16 = 1 << 2;
    pub const WRITE_ZEROES: u16 = 1 << 3;
}
/// OAES bit: namespace attribute notices.
pub const OAES_NS_ATTR: u32 = 1 << 8;

wire! {
    /// One LBA format (4 B).
    pub struct LbaFormat [4] {
        pub ms: U16,
        /// log2 of the LBA data size.
        pub lbads: u8,
        pub rp: u8,
    }
}

wire! {
    /// Identify Namespace (4096 B). Src: nvme.h `struct nvme_id_ns`.
    pub struct IdentifyNs [4096] {
        pub nsze: U64,
        pub ncap: U64,
        pub nuse: U64,
        pub nsfeat: u8,
        pub nlbaf: u8,
        pub flbas: u8,
        pub mc: u8,
        pub dpc: u8,
        pub dps: u8,
        pub nmic: u8,
        pub rescap: u8,
        pub fpi: u8,
        pub dlfeat: u8,
        pub nawun: U16,
        pub nawupf: U16,
        pub nacwu: U16,
        pub nabsn: U16,
        pub nabo: U16,
        pub nabspf: U16,
        pub noiob: U16,
        pub nvmcap: [u8; 16],
        pub npwg: U16,
        pub npwa: U16,
        pub npdg: U16,
        pub npda: U16,
        pub nows: U16,
        pub rsvd74: [u8; 18],
        pub anagrpid: U32,
        pub rsvd96: [u8; 3],
        pub nsattr: u8,
        pub nvmsetid: U16,
        pub endgid: U16,
        pub nguid: [u8; 16],
        pub eui64: [u8; 8],
        pub lbaf: [LbaFormat; 16],
        pub rsvd192: [u8; 3904],
    }
}

wire! {
    /// Namespace identification descriptor header (4 B), followed by NIDL bytes.
    pub struct NsIdDescHdr [4] {
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
    pub struct NsList [4096] {
        pub ids: [U32; 1024],
    }
}

wire! {
    /// DSM range (16 B). Src: nvme.h `struct nvme_dsm_range`.
    pub struct DsmRange [16] {
        pub cattr: U32,
        pub nlb: U32,
        pub slba: U64,
    }
}
/// DSM CDW11 attribute: deallocate.
pub const DSM_ATTR_DEALLOCATE: u32 = 1 << 2;

// ---------------------------------------------------------------------------------------------
// Log pages
// ---------------------------------------------------------------------------------------------

wire! {
    /// Discovery log page header (1024 B). Src: nvme.h `struct nvmf_disc_rsp_page_hdr`.
    pub struct DiscLogHdr [1024] {
        pub genctr: U64,
        pub numrec: U64,
        pub recfmt: U16,
        pub rsvd: [u8; 1006],
    }
}
wire! {
    /// Discovery log entry (1024 B). Src: nvme.h `struct nvmf_disc_rsp_page_entry`.
    pub struct DiscLogEntry [1024] {
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
    pub struct ErrorLogEntry [64] {
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
    pub struct SmartLog [512] {
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
    pub struct FwSlotLog [512] {
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
    fn identify_ctrl_offsets_match_spec() {
        assert_eq!(offset_of!(IdentifyCtrl, mdts), 77);
        assert_eq!(offset_of!(IdentifyCtrl, cntlid), 78);
        assert_eq!(offset_of!(IdentifyCtrl, ver), 80);
        assert_eq!(offset_of!(IdentifyCtrl, oaes), 92);
        assert_eq!(offset_of!(IdentifyCtrl, cntrltype), 111);
        assert_eq!(offset_of!(IdentifyCtrl, oacs), 256);
        assert_eq!(offset_of!(IdentifyCtrl, lpa), 261);
        assert_eq!(offset_of!(IdentifyCtrl, kas), 320);
        assert_eq!(offset_of!(IdentifyCtrl, sqes), 512);
        assert_eq!(offset_of!(IdentifyCtrl, maxcmd), 514);
        assert_eq!(offset_of!(IdentifyCtrl, nn), 516);
        assert_eq!(offset_of!(IdentifyCtrl, oncs), 520);
        assert_eq!(offset_of!(IdentifyCtrl, vwc), 525);
        assert_eq!(offset_of!(IdentifyCtrl, sgls), 536);
        assert_eq!(offset_of!(IdentifyCtrl, subnqn), 768);
        assert_eq!(offset_of!(IdentifyCtrl, ioccsz), 1792);
        assert_eq!(offset_of!(IdentifyCtrl, iorcsz), 1796);
        assert_eq!(offset_of!(IdentifyCtrl, icdoff), 1800);
        assert_eq!(offset_of!(IdentifyCtrl, msdbd), 1803);
        assert_eq!(offset_of!(IdentifyCtrl, psd), 2048);
    }

    #[test]
    fn other_offsets_match_spec() {
        assert_eq!(offset_of!(Sqe, dptr), 24);
        assert_eq!(offset_of!(Sqe, cdw10), 40);
        assert_eq!(offset_of!(ConnectCmd, qid), 42);
        assert_eq!(offset_of!(ConnectCmd, sqsize), 44);
        assert_eq!(offset_of!(ConnectCmd, cattr), 46);
        assert_eq!(offset_of!(ConnectCmd, kato), 48);
        assert_eq!(offset_of!(PropertyGetCmd, attrib), 40);
        assert_eq!(offset_of!(PropertyGetCmd, offset), 44);
        assert_eq!(offset_of!(PropertySetCmd, value), 48);
        assert_eq!(offset_of!(ConnectData, subsysnqn), 256);
        assert_eq!(offset_of!(ConnectData, hostnqn), 512);
        assert_eq!(offset_of!(IdentifyNs, flbas), 26);
        assert_eq!(offset_of!(IdentifyNs, nguid), 104);
        assert_eq!(offset_of!(IdentifyNs, lbaf), 128);
        assert_eq!(offset_of!(DiscLogEntry, trsvcid), 32);
        assert_eq!(offset_of!(DiscLogEntry, subnqn), 256);
        assert_eq!(offset_of!(DiscLogEntry, traddr), 512);
        assert_eq!(offset_of!(DiscLogEntry, tsas), 768);
        assert_eq!(offset_of!(SmartLog, data_units_read), 32);
        assert_eq!(offset_of!(SmartLog, num_err_log_entries), 176);
        assert_eq!(offset_of!(SmartLog, temp_sensor), 200);
        assert_eq!(offset_of!(Cqe, status), 14);
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

    #[test]
    fn status_field() {
        let s = Status::CONNECT_INVALID_HOST;
        assert_eq!(s.to_field() >> 1 & 0x7FF, 0x184);
        assert_eq!(Status::from_field(s.to_field()), s);
    }
}
