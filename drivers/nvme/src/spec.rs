//! nvme spec: the NVMe Base / NVM Command Set layouts this driver uses. The shared ones
//! (SQE, CQE, Identify Controller/Namespace, LBA format, DSM range, opcodes) are declared
//! once in the `nvme-spec` crate and re-exported here; PCIe-only facts (registers, PRP
//! lists) live in [`crate::regs`] and [`crate::prp`].

pub use nvme_spec::{
    admin_op, cns, fid, io_op, oncs, Cqe, DataPointer, DsmRange, IdentifyController, IdentifyNamespace, LbaFormat,
    Sqe, CQE_STATUS_OFFSET,
};

/// Read / Write / Write Zeroes CDW12 fields (NVM Command Set spec, those commands' Command
/// Dword 12): NLB in bits 15:0 (0's based), PRINFO in bits 29:26.
pub mod rw_cdw12 {
    /// PRINFO.PRACT (bit 29): the controller inserts (writes) or strips (reads) the
    /// protection information; with 8-byte PI-only metadata nothing else is transferred.
    pub const PRACT: u32 = 1 << 29;
    /// PRINFO.PRCHK bit 2 (bit 28): check the guard (CRC) of the protection information.
    pub const PRCHK_GUARD: u32 = 1 << 28;
}

/// Trim ASCII padding (spaces, NULs) from an identify string.
pub fn ascii_trim(b: &[u8]) -> &str {
    let s = core::str::from_utf8(b).unwrap_or("?");
    s.trim_end_matches([' ', '\0']).trim_start()
}
