//! nvme-spec: the NVMe Base / NVM Command Set layouts both the local PCIe driver (`nvme`) and
//! NVMe over Fabrics (`nvmeof`) speak, declared once as little-endian zerocopy types.
//!
//! Sources (facts only): NVMe Base Specification 2.0 (§4.2 SQE Figure 88, §4.6 CQE
//! Figure 90, §4.6.1 Status Field Figures 92-97, SGL descriptor, §5 admin opcodes
//! Figure 142, §5.17.2.1 Identify Controller Figure 275, §5.27.1 feature identifiers,
//! §6 Fabrics command format), NVM Command Set Specification 1.0 (§3 I/O opcodes, §3.2.3
//! DSM range Figure 39, §4.1.5.1 Identify Namespace Figures 97-98), cross-checked with
//! Linux `include/linux/nvme.h` (`nvme_common_command`, `nvme_completion`, `nvme_sgl_desc`,
//! `nvme_id_ctrl`, `nvme_id_ns`, `nvme_lbaf`, `nvme_dsm_range`). Every size is asserted at
//! compile time; offsets are tested against the spec's numbers below.
//!
//! Transport-specific layouts stay with their transport: PCIe registers and PRP lists in
//! `nvme`, Fabrics Connect/Property/discovery/RDMA CM data in `nvmeof`.
#![no_std]
#![forbid(unsafe_code)]

pub mod props;
pub mod status;

pub use status::{Status, StatusCode, StatusField};

use zerocopy::byteorder::little_endian::{U16, U32, U64};

/// Declares a packed little-endian layout with its wire size asserted at compile time,
/// `SIZE` and `zeroed()`. `terse` types (the 4 KiB pages, Fabrics structures with long
/// reserved arrays) print only name and size and have no `Default`/`PartialEq`.
/// Exported so other crates declaring transport layouts (apps/nvmeof) use the same rule;
/// the caller needs `zerocopy` as a dependency (its derives name `::zerocopy`).
#[macro_export]
macro_rules! layout {
    (@common $name:ident $size:expr) => {
        const _: () = assert!(core::mem::size_of::<$name>() == $size);
        const _: () = assert!(core::mem::align_of::<$name>() == 1);
        impl $name {
            /// Wire size in bytes.
            pub const SIZE: usize = $size;
            /// An all-zero value.
            pub fn zeroed() -> Self {
                <Self as ::zerocopy::FromZeros>::new_zeroed()
            }
        }
    };
    ($(#[$m:meta])* terse pub struct $name:ident [$size:expr] { $($(#[$fm:meta])* pub $f:ident : $t:ty),* $(,)? }) => {
        $(#[$m])*
        #[derive(::zerocopy::FromBytes, ::zerocopy::IntoBytes, ::zerocopy::KnownLayout, ::zerocopy::Immutable, ::zerocopy::Unaligned, Clone, Copy)]
        #[repr(C)]
        pub struct $name { $($(#[$fm])* pub $f: $t),* }
        $crate::layout!(@common $name $size);
        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                write!(f, "{}[{} B]", stringify!($name), $size)
            }
        }
    };
    ($(#[$m:meta])* pub struct $name:ident [$size:expr] { $($(#[$fm:meta])* pub $f:ident : $t:ty),* $(,)? }) => {
        $(#[$m])*
        #[derive(::zerocopy::FromBytes, ::zerocopy::IntoBytes, ::zerocopy::KnownLayout, ::zerocopy::Immutable, ::zerocopy::Unaligned, Clone, Copy, Debug, Default, PartialEq, Eq)]
        #[repr(C)]
        pub struct $name { $($(#[$fm])* pub $f: $t),* }
        $crate::layout!(@common $name $size);
    };
}

// ---------------------------------------------------------------------------------------------
// Opcodes and identifiers
// ---------------------------------------------------------------------------------------------

/// Admin command opcodes (Base §5, Figure 142).
pub mod admin_op {
    pub const DELETE_IO_SQ: u8 = 0x00;
    pub const CREATE_IO_SQ: u8 = 0x01;
    pub const GET_LOG_PAGE: u8 = 0x02;
    pub const DELETE_IO_CQ: u8 = 0x04;
    pub const CREATE_IO_CQ: u8 = 0x05;
    pub const IDENTIFY: u8 = 0x06;
    pub const ABORT: u8 = 0x08;
    pub const SET_FEATURES: u8 = 0x09;
    pub const GET_FEATURES: u8 = 0x0A;
    pub const ASYNC_EVENT: u8 = 0x0C;
    pub const KEEP_ALIVE: u8 = 0x18;
}

/// NVM command set I/O opcodes (NVM Command Set §3, Figure 17).
pub mod io_op {
    pub const FLUSH: u8 = 0x00;
    pub const WRITE: u8 = 0x01;
    pub const READ: u8 = 0x02;
    /// Compare: the controller reads the blocks and compares them with the command's data.
    pub const COMPARE: u8 = 0x05;
    pub const WRITE_ZEROES: u8 = 0x08;
    /// Dataset Management.
    pub const DSM: u8 = 0x09;
}

/// Identify CNS values (Base §5.17, Figure 273).
pub mod cns {
    pub const NAMESPACE: u8 = 0x00;
    pub const CONTROLLER: u8 = 0x01;
    pub const ACTIVE_NS_LIST: u8 = 0x02;
    pub const NS_DESC_LIST: u8 = 0x03;
    /// I/O Command Set specific Identify Controller (CDW11.CSI selects the set; 0 = NVM):
    /// [`IdentifyControllerNvm`](crate::IdentifyControllerNvm).
    pub const NVM_CTRL: u8 = 0x06;
}

/// Read / Write / Write Zeroes CDW12 fields (NVM Command Set spec, those commands' Command
/// Dword 12): NLB in bits 15:0 (0's based), PRINFO in bits 29:26, FUA bit 30.
pub mod rw_cdw12 {
    /// Force Unit Access (bit 30): the data is on non-volatile media before the command
    /// completes (writes), or read from non-volatile media (reads).
    pub const FUA: u32 = 1 << 30;
    /// PRINFO.PRACT (bit 29): the controller inserts (writes) or strips (reads) the
    /// protection information; with 8-byte PI-only metadata nothing else is transferred.
    pub const PRACT: u32 = 1 << 29;
    /// PRINFO.PRCHK bit 2 (bit 28): check the guard (CRC) of the protection information.
    pub const PRCHK_GUARD: u32 = 1 << 28;
}

/// Identify Controller VWC byte (Base spec, Identify Controller byte 525).
pub mod vwc {
    /// Bit 0: a volatile write cache is present.
    pub const PRESENT: u8 = 1;
    /// Bits 2:1 = 10b: Flush with NSID FFFFFFFFh is not supported.
    pub const FLUSH_BROADCAST_UNSUPPORTED: u8 = 0b10 << 1;
}

/// Feature identifiers (Base §5.27.1, Figure 317).
pub mod fid {
    /// Volatile Write Cache: DW0 bit 0 WCE (write cache enabled).
    pub const VOLATILE_WRITE_CACHE: u8 = 0x06;
    pub const NUM_QUEUES: u8 = 0x07;
    pub const ASYNC_EVENT_CONFIG: u8 = 0x0B;
    pub const KEEP_ALIVE_TIMER: u8 = 0x0F;
}

/// ONCS bits, Optional NVM Command Support (Identify Controller bytes 521:520).
pub mod oncs {
    /// Compare supported.
    pub const COMPARE: u16 = 1 << 0;
    /// Dataset Management supported.
    pub const DSM: u16 = 1 << 2;
    pub const WRITE_ZEROES: u16 = 1 << 3;
}

/// Controller property offsets (Base 2.0 §3.1.4 Figure 33): BAR0 register offsets on PCIe,
/// Property Get/Set offsets on Fabrics. PCIe-only registers (AQA, ASQ, ACQ, doorbells) are
/// in the `nvme` driver.
pub mod prop {
    /// Controller Capabilities (64 bit).
    pub const CAP: u32 = 0x00;
    /// Version.
    pub const VS: u32 = 0x08;
    /// Interrupt Mask Set.
    pub const INTMS: u32 = 0x0C;
    /// Interrupt Mask Clear.
    pub const INTMC: u32 = 0x10;
    /// Controller Configuration.
    pub const CC: u32 = 0x14;
    /// Controller Status.
    pub const CSTS: u32 = 0x1C;
    /// NVM Subsystem Reset.
    pub const NSSR: u32 = 0x20;
}

// ---------------------------------------------------------------------------------------------
// Submission / completion queue entries
// ---------------------------------------------------------------------------------------------

layout! {
    /// The Data Pointer (DPTR, SQE bytes 39:24; Base §4.2 Figure 88). With PSDT = 0 it holds
    /// PRP Entry 1 (bytes 7:0) and PRP Entry 2 (bytes 15:8), see [`DataPointer::prp`]; with
    /// PSDT ≠ 0 it is one SGL descriptor (Base, SGL Descriptor): address (7:0), type-specific bytes
    /// 14:8 (data block: length 32 + reserved; keyed: length 24 + key 32), SGL Identifier
    /// (byte 15: type in bits 7:4, subtype in bits 3:0).
    pub struct DataPointer [16] {
        /// PRP Entry 1, or the SGL descriptor's address.
        pub addr: U64,
        /// Bytes 14:8 of the SGL descriptor (low 7 bytes of PRP Entry 2).
        pub b8: [u8; 7],
        /// SGL Identifier (top byte of PRP Entry 2).
        pub typ: u8,
    }
}

impl DataPointer {
    /// The PRP form: PRP Entry 1 and PRP Entry 2 (PRP2 or PRP list pointer).
    pub fn prp(prp1: u64, prp2: u64) -> Self {
        let b = prp2.to_le_bytes();
        DataPointer { addr: U64::new(prp1), b8: [b[0], b[1], b[2], b[3], b[4], b[5], b[6]], typ: b[7] }
    }
    /// PRP Entry 1.
    pub fn prp1(&self) -> u64 {
        self.addr.get()
    }
    /// PRP Entry 2.
    pub fn prp2(&self) -> u64 {
        let b = &self.b8;
        u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], self.typ])
    }
}

layout! {
    /// Submission Queue Entry, 64 bytes (Base §4.2 Figure 88; Linux `nvme_common_command`).
    pub struct Sqe [64] {
        /// Opcode (CDW0 bits 7:0).
        pub opcode: u8,
        /// FUSE (bits 1:0) and PSDT (bits 7:6; 0 = PRPs).
        pub flags: u8,
        /// Command Identifier.
        pub cid: U16,
        /// Namespace Identifier; for Fabrics commands byte 0 of this field is FCTYPE.
        pub nsid: U32,
        pub cdw2: U32,
        pub cdw3: U32,
        /// Metadata pointer.
        pub mptr: U64,
        /// Data pointer: PRP entries or one SGL descriptor.
        pub dptr: DataPointer,
        pub cdw10: U32,
        pub cdw11: U32,
        pub cdw12: U32,
        pub cdw13: U32,
        pub cdw14: U32,
        pub cdw15: U32,
    }
}

/// PSDT value Linux sets in SQE flags for Fabrics: SGL for data, metadata contiguous.
pub const PSDT_SGL: u8 = 0x40;

impl Sqe {
    /// Fabrics command type (SQE byte 4; Base 2.0 §6 Fabrics command format; Linux `nvmf_common_command`).
    pub fn fctype(&self) -> u8 {
        self.nsid.get().to_le_bytes()[0]
    }
    /// Set the Fabrics command type (SQE byte 4; bytes 7:5 become 0).
    pub fn set_fctype(&mut self, t: u8) {
        self.nsid = U32::new(t as u32);
    }
}

layout! {
    /// Completion Queue Entry, 16 bytes (Base §4.6 Figure 90; Linux `nvme_completion`).
    pub struct Cqe [16] {
        /// Command specific (DW0).
        pub dw0: U32,
        pub dw1: U32,
        /// SQ Head Pointer.
        pub sqhd: U16,
        /// SQ Identifier.
        pub sqid: U16,
        /// Command Identifier.
        pub cid: U16,
        /// Phase tag (bit 0) and Status field (bits 15:1), see [`StatusField`].
        pub status: U16,
    }
}
/// Byte offset of the phase/status halfword inside a CQE.
pub const CQE_STATUS_OFFSET: usize = 14;
const _: () = assert!(core::mem::offset_of!(Cqe, status) == CQE_STATUS_OFFSET);

// ---------------------------------------------------------------------------------------------
// Identify
// ---------------------------------------------------------------------------------------------

layout! {
    /// Identify Controller data structure, 4096 bytes (Base §5.17.2.1 Figure 275; Linux
    /// `nvme_id_ctrl`). Bytes 2047:1792 are the Fabrics-specific fields (IOCCSZ...).
    terse pub struct IdentifyController [4096] {
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
        /// Maximum Data Transfer Size: 2^MDTS minimum pages (MPSMIN); 0 = no limit.
        pub mdts: u8,
        pub cntlid: U16,
        pub ver: U32,
        /// RTD3 Resume Latency, microseconds.
        pub rtd3r: U32,
        /// RTD3 Entry Latency, microseconds: expected time to shut down (0 = not reported).
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
        /// Submission Queue Entry Size (bits 3:0 required, 7:4 maximum; log2).
        pub sqes: u8,
        /// Completion Queue Entry Size.
        pub cqes: u8,
        pub maxcmd: U16,
        /// Number of Namespaces (largest NSID).
        pub nn: U32,
        /// Optional NVM Command Support, see [`oncs`].
        pub oncs: U16,
        pub fuses: U16,
        pub fna: u8,
        /// Volatile Write Cache (bit 0: present).
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
        /// I/O queue command capsule size in 16-byte units (Fabrics).
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

layout! {
    /// LBA Format descriptor, 4 bytes (NVM Command Set §4.1.5.1 Figure 98; Linux `nvme_lbaf`).
    pub struct LbaFormat [4] {
        /// Metadata Size in bytes.
        pub ms: U16,
        /// LBA Data Size, log2 of bytes.
        pub lbads: u8,
        /// Relative Performance (bits 1:0).
        pub rp: u8,
    }
}

layout! {
    /// Identify Namespace data structure, NVM command set, 4096 bytes (NVM Command Set
    /// §4.1.5.1 Figure 97; Linux `nvme_id_ns`). 64 LBA formats (bytes 383:128) as in NVMe 2.0;
    /// NVMe 1.4 defined 16 and reserved bytes 383:192, which read as zero there.
    terse pub struct IdentifyNamespace [4096] {
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
        /// LBA Format 0..63.
        pub lbaf: [LbaFormat; 64],
        /// Vendor specific (bytes 4095:384).
        pub vs: [u8; 3712],
    }
}

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

layout! {
    /// I/O Command Set specific Identify Controller for the NVM command set (CNS 06h, CSI 0),
    /// 4096 bytes (NVM Command Set 1.0 §4.1.5.2 Figure 101): the non-MDTS limits.
    terse pub struct IdentifyControllerNvm [4096] {
        /// Verify Size Limit (2^n minimum pages; 0 = none reported).
        pub vsl: u8,
        /// Write Zeroes Size Limit (2^n minimum memory pages; 0 = none reported).
        pub wzsl: u8,
        /// Write Uncorrectable Size Limit.
        pub wusl: u8,
        /// Dataset Management Ranges Limit (ranges per command; 0 = none reported).
        pub dmrl: u8,
        /// Dataset Management Range Size Limit (logical blocks per range; 0 = none).
        pub dmrsl: U32,
        /// Dataset Management Size Limit (logical blocks per command; 0 = none).
        pub dmsl: U64,
        pub rsvd16: [u8; 4080],
    }
}

layout! {
    /// Dataset Management range, 16 bytes (NVM Command Set §3.2.3 Figure 39; Linux
    /// `nvme_dsm_range`).
    pub struct DsmRange [16] {
        /// Context Attributes.
        pub cattr: U32,
        /// Length in logical blocks.
        pub nlb: U32,
        pub slba: U64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::offset_of;
    use zerocopy::IntoBytes;

    // Known numbers: NVMe Base 2.0 figures / Linux include/linux/nvme.h, not each other.
    #[test]
    fn sqe_cqe_offsets_match_spec() {
        assert_eq!(offset_of!(Sqe, cid), 2);
        assert_eq!(offset_of!(Sqe, nsid), 4);
        assert_eq!(offset_of!(Sqe, mptr), 16);
        assert_eq!(offset_of!(Sqe, dptr), 24);
        assert_eq!(offset_of!(Sqe, cdw10), 40);
        assert_eq!(offset_of!(Sqe, cdw15), 60);
        assert_eq!(offset_of!(Cqe, sqhd), 8);
        assert_eq!(offset_of!(Cqe, sqid), 10);
        assert_eq!(offset_of!(Cqe, cid), 12);
        assert_eq!(offset_of!(Cqe, status), 14);
        assert_eq!(offset_of!(DataPointer, typ), 15);
    }

    #[test]
    fn prp_form_of_the_data_pointer() {
        let d = DataPointer::prp(0x1122_3344_5566_7000, 0x8877_6655_4433_2000);
        assert_eq!((d.prp1(), d.prp2()), (0x1122_3344_5566_7000, 0x8877_6655_4433_2000));
        let mut s = Sqe { dptr: d, ..Default::default() };
        s.cid = U16::new(0xBEEF);
        let b = s.as_bytes();
        assert_eq!(&b[24..32], &0x1122_3344_5566_7000u64.to_le_bytes());
        assert_eq!(&b[32..40], &0x8877_6655_4433_2000u64.to_le_bytes());
        assert_eq!(&b[2..4], &[0xEF, 0xBE]);
    }

    #[test]
    fn identify_controller_offsets_match_spec() {
        assert_eq!(offset_of!(IdentifyController, sn), 4);
        assert_eq!(offset_of!(IdentifyController, mn), 24);
        assert_eq!(offset_of!(IdentifyController, fr), 64);
        assert_eq!(offset_of!(IdentifyController, mdts), 77);
        assert_eq!(offset_of!(IdentifyController, cntlid), 78);
        assert_eq!(offset_of!(IdentifyController, ver), 80);
        assert_eq!(offset_of!(IdentifyController, rtd3e), 88);
        assert_eq!(offset_of!(IdentifyController, oaes), 92);
        assert_eq!(offset_of!(IdentifyController, cntrltype), 111);
        assert_eq!(offset_of!(IdentifyController, oacs), 256);
        assert_eq!(offset_of!(IdentifyController, lpa), 261);
        assert_eq!(offset_of!(IdentifyController, kas), 320);
        assert_eq!(offset_of!(IdentifyController, sqes), 512);
        assert_eq!(offset_of!(IdentifyController, maxcmd), 514);
        assert_eq!(offset_of!(IdentifyController, nn), 516);
        assert_eq!(offset_of!(IdentifyController, oncs), 520);
        assert_eq!(offset_of!(IdentifyController, vwc), 525);
        assert_eq!(offset_of!(IdentifyController, sgls), 536);
        assert_eq!(offset_of!(IdentifyController, subnqn), 768);
        assert_eq!(offset_of!(IdentifyController, ioccsz), 1792);
        assert_eq!(offset_of!(IdentifyController, iorcsz), 1796);
        assert_eq!(offset_of!(IdentifyController, icdoff), 1800);
        assert_eq!(offset_of!(IdentifyController, msdbd), 1803);
        assert_eq!(offset_of!(IdentifyController, psd), 2048);
        assert_eq!(offset_of!(IdentifyController, vs), 3072);
    }

    #[test]
    fn identify_namespace_offsets_match_spec() {
        assert_eq!(offset_of!(IdentifyNamespace, nlbaf), 25);
        assert_eq!(offset_of!(IdentifyNamespace, flbas), 26);
        assert_eq!(offset_of!(IdentifyNamespace, dps), 29);
        assert_eq!(offset_of!(IdentifyNamespace, nvmcap), 48);
        assert_eq!(offset_of!(IdentifyNamespace, anagrpid), 92);
        assert_eq!(offset_of!(IdentifyNamespace, nguid), 104);
        assert_eq!(offset_of!(IdentifyNamespace, eui64), 120);
        assert_eq!(offset_of!(IdentifyNamespace, lbaf), 128);
        assert_eq!(offset_of!(IdentifyNamespace, vs), 384);
        assert_eq!(offset_of!(DsmRange, slba), 8);
    }

    #[test]
    fn lba_format_index_uses_both_flbas_parts() {
        let mut ns = IdentifyNamespace::zeroed();
        ns.flbas = 0x10 | 0x03 | (0x2 << 5);
        ns.lbaf[0x23].lbads = 12;
        assert_eq!(ns.lba_format_index(), 0x23);
        assert_eq!(ns.lba_format().lbads, 12);
        assert!(ns.extended_lba());
    }
}
