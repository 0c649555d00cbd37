//! nvme spec: the NVMe Base / NVM Command Set layouts this driver uses. The shared ones
//! (SQE, CQE, Identify Controller/Namespace, LBA format, DSM range, opcodes) are declared
//! once in the `nvme-spec` crate and re-exported here; PCIe-only facts (registers, PRP
//! lists) live in [`crate::regs`] and [`crate::prp`].

pub use nvme_spec::{
    admin_op, cns, fid, io_op, oncs, rw_cdw12, Cqe, DataPointer, DsmRange, IdentifyController, IdentifyControllerNvm, IdentifyNamespace, LbaFormat,
    Sqe, CQE_STATUS_OFFSET,
};

/// Trim ASCII padding (spaces, NULs) from an identify string.
pub fn ascii_trim(b: &[u8]) -> &str {
    let s = core::str::from_utf8(b).unwrap_or("?");
    s.trim_end_matches([' ', '\0']).trim_start()
}
