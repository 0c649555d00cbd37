//! nvme spec: queue entries and Identify data structures as zerocopy types, with opcodes.
//!
//! Sources: NVMe Base Specification 2.0 §4.2 (Submission Queue Entry, Figure 88),
//! §4.6 (Completion Queue Entry, Figure 90), §5.17.2.1 (Identify Controller, Figure 275),
//! NVM Command Set Specification 1.0 §4.1.5.1 (Identify Namespace, Figure 97),
//! §3.2.3 (Dataset Management range, Figure 39). All multi-byte fields are little endian.

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Admin command opcodes (Base §5, Figure 142).
pub mod admin_op {
    pub const DELETE_IO_SQ: u8 = 0x00;
    pub const CREATE_IO_SQ: u8 = 0x01;
    pub const DELETE_IO_CQ: u8 = 0x04;
    pub const CREATE_IO_CQ: u8 = 0x05;
    pub const IDENTIFY: u8 = 0x06;
    pub const SET_FEATURES: u8 = 0x09;
    pub const GET_FEATURES: u8 = 0x0A;
}

/// NVM command set I/O opcodes (NVM Command Set §3, Figure 17).
pub mod io_op {
    pub const FLUSH: u8 = 0x00;
    pub const WRITE: u8 = 0x01;
    pub const READ: u8 = 0x02;
    pub const WRITE_ZEROES: u8 = 0x08;
    pub const DATASET_MGMT: u8 = 0x09;
}

/// Identify CNS values (Base §5.17, Figure 273).
pub mod cns {
    pub const NAMESPACE: u8 = 0x00;
    pub const CONTROLLER: u8 = 0x01;
    pub const ACTIVE_NS_LIST: u8 = 0x02;
}

/// Feature identifiers (Base §5.27.1, Figure 317).
pub mod fid {
    pub const NUMBER_OF_QUEUES: u8 = 0x07;
}

/// ONCS bits, Optional NVM Command Support (Identify Controller bytes 521:520).
pub mod oncs {
    pub const DATASET_MGMT: u16 = 1 << 2;
    pub const WRITE_ZEROES: u16 = 1 << 3;
}

/// Submission Queue Entry, 64 bytes (Base §4.2, Figure 88).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct Sqe {
    /// Opcode.
    pub opc: u8,
    /// FUSE (bits 1:0) and PSDT (bits 7:6, 0 = PRPs).
    pub flags: u8,
    /// Command Identifier.
    pub cid: U16,
    pub nsid: U32,
    pub cdw2: U32,
    pub cdw3: U32,
    /// Metadata pointer.
    pub mptr: U64,
    /// Data pointer: PRP entry 1.
    pub prp1: U64,
    /// Data pointer: PRP entry 2 (or PRP list pointer).
    pub prp2: U64,
    pub cdw10: U32,
    pub cdw11: U32,
    pub cdw12: U32,
    pub cdw13: U32,
    pub cdw14: U32,
    pub cdw15: U32,
}
const _: () = assert!(core::mem::size_of::<Sqe>() == 64);

/// Completion Queue Entry, 16 bytes (Base §4.6, Figure 90).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct Cqe {
    /// Command specific (DW0).
    pub dw0: U32,
    pub dw1: U32,
    /// SQ Head Pointer.
    pub sqhd: U16,
    /// SQ Identifier.
    pub sqid: U16,
    /// Command Identifier.
    pub cid: U16,
    /// Phase tag (bit 0) and Status field (bits 15:1), see [`crate::status`].
    pub status: U16,
}
const _: () = assert!(core::mem::size_of::<Cqe>() == 16);
/// Byte offset of the status/phase halfword inside a CQE.
pub const CQE_STATUS_OFFSET: usize = 14;

/// Identify Controller data structure (Base §5.17.2.1, Figure 275), 4096 bytes.
#[derive(Clone, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct IdentifyController {
    pub vid: U16,
    pub ssvid: U16,
    /// Serial Number, ASCII, space padded.
    pub sn: [u8; 20],
    /// Model Number, ASCII, space padded.
    pub mn: [u8; 40],
    /// Firmware Revision, ASCII, space padded.
    pub fr: [u8; 8],
    pub rab: u8,
    pub ieee: [u8; 3],
    pub cmic: u8,
    /// Maximum Data Transfer Size: 2^MDTS minimum pages (0 = no limit).
    pub mdts: u8,
    pub cntlid: U16,
    pub ver: U32,
    /// RTD3 Resume Latency, microseconds.
    pub rtd3r: U32,
    /// RTD3 Entry Latency, microseconds: expected time to shut down (0 = not reported).
    pub rtd3e: U32,
    _rsvd92: [u8; 512 - 92],
    /// Submission Queue Entry Size (bits 3:0 required, 7:4 maximum; log2).
    pub sqes: u8,
    /// Completion Queue Entry Size.
    pub cqes: u8,
    pub maxcmd: U16,
    /// Number of Namespaces (largest NSID).
    pub nn: U32,
    /// Optional NVM Command Support.
    pub oncs: U16,
    pub fuses: U16,
    pub fna: u8,
    /// Volatile Write Cache (bit 0: present).
    pub vwc: u8,
    pub awun: U16,
    pub awupf: U16,
    _rsvd530: [u8; 4096 - 530],
}
const _: () = assert!(core::mem::size_of::<IdentifyController>() == 4096);
const _: () = assert!(core::mem::offset_of!(IdentifyController, mdts) == 77);
const _: () = assert!(core::mem::offset_of!(IdentifyController, rtd3e) == 88);
const _: () = assert!(core::mem::offset_of!(IdentifyController, nn) == 516);
const _: () = assert!(core::mem::offset_of!(IdentifyController, oncs) == 520);

/// LBA Format descriptor (NVM Command Set §4.1.5.1, Figure 98).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct LbaFormat {
    /// Metadata Size in bytes.
    pub ms: U16,
    /// LBA Data Size, log2 of bytes.
    pub lbads: u8,
    /// Relative Performance (bits 1:0).
    pub rp: u8,
}

/// Identify Namespace data structure, NVM command set (NVM Command Set §4.1.5.1, Figure 97).
#[derive(Clone, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct IdentifyNamespace {
    /// Namespace Size in logical blocks.
    pub nsze: U64,
    /// Namespace Capacity.
    pub ncap: U64,
    /// Namespace Utilization.
    pub nuse: U64,
    pub nsfeat: u8,
    /// Number of LBA Formats, 0's based.
    pub nlbaf: u8,
    /// Formatted LBA Size: bits 3:0 format index (low), bit 4 extended metadata,
    /// bits 6:5 format index (high).
    pub flbas: u8,
    /// Metadata Capabilities (bit 0: extended LBA, bit 1: separate buffer).
    pub mc: u8,
    pub dpc: u8,
    /// End-to-end Data Protection Type Settings: bits 2:0 PI type (0 = off), bit 3 PI first.
    pub dps: u8,
    pub nmic: u8,
    pub rescap: u8,
    _rsvd32: [u8; 128 - 32],
    /// LBA Format 0..63.
    pub lbaf: [LbaFormat; 64],
    _rsvd384: [u8; 4096 - 384],
}
const _: () = assert!(core::mem::size_of::<IdentifyNamespace>() == 4096);
const _: () = assert!(core::mem::offset_of!(IdentifyNamespace, flbas) == 26);
const _: () = assert!(core::mem::offset_of!(IdentifyNamespace, dps) == 29);
const _: () = assert!(core::mem::offset_of!(IdentifyNamespace, lbaf) == 128);

impl IdentifyNamespace {
    /// Index of the LBA format in use.
    pub fn lba_format_index(&self) -> usize {
        ((self.flbas & 0x0F) | ((self.flbas >> 5) & 0x3) << 4) as usize
    }
    /// The LBA format in use.
    pub fn lba_format(&self) -> LbaFormat {
        self.lbaf[self.lba_format_index() & 63]
    }
    /// FLBAS bit 4: metadata travels at the end of each block's data (extended LBA) rather
    /// than in a separate buffer.
    pub fn extended_lba(&self) -> bool {
        self.flbas & 0x10 != 0
    }
    /// DPS bits 2:0: protection information type in use (0 = none).
    pub fn pi_type(&self) -> u8 {
        self.dps & 0x7
    }
}

/// Read / Write / Write Zeroes CDW12 fields (NVM Command Set spec, those commands' Command
/// Dword 12): NLB in bits 15:0 (0's based), PRINFO in bits 29:26.
pub mod rw_cdw12 {
    /// PRINFO.PRACT (bit 29): the controller inserts (writes) or strips (reads) the
    /// protection information; with 8-byte PI-only metadata nothing else is transferred.
    pub const PRACT: u32 = 1 << 29;
    /// PRINFO.PRCHK bit 2 (bit 28): check the guard (CRC) of the protection information.
    pub const PRCHK_GUARD: u32 = 1 << 28;
}

/// Dataset Management range (NVM Command Set §3.2.3, Figure 39), 16 bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct DsmRange {
    pub context_attributes: U32,
    /// Length in logical blocks.
    pub nlb: U32,
    pub slba: U64,
}
const _: () = assert!(core::mem::size_of::<DsmRange>() == 16);

/// Trim ASCII padding (spaces, NULs) from an identify string.
pub fn ascii_trim(b: &[u8]) -> &str {
    let s = core::str::from_utf8(b).unwrap_or("?");
    s.trim_end_matches([' ', '\0']).trim_start()
}
