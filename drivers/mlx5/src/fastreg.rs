//! Fast registration through the send queue: UMR WQEs that scope a key to one buffer and revoke it.
//!
//! How an mlx5 adapter changes a memory key without a firmware command (facts: Linux
//! `include/linux/mlx5/qp.h` mlx5_wqe_umr_ctrl_seg / mlx5_mkey_seg / MLX5_MKEY_MASK_* /
//! MLX5_UMR_INLINE; rdma-core `providers/mlx5/mlx5dv.h` MLX5_OPCODE_UMR 0x25 and
//! MLX5_WQE_UMR_CTRL_MKEY_MASK_*; `mlx5_ifc.h` mkc): a UMR WQE is the ctrl segment (opcode UMR,
//! imm = the key), a UMR control segment (which mkey-context fields to change: `mkey_mask`;
//! how many translation octowords follow), a 64-byte mkey context segment (the `mkc` layout)
//! with the new values, then the translation entries inline. The key must have been created
//! with `umr_en` (and free), on a QP created with `fre` (fast registration enabled).
//!
//! Registration here maps one physically contiguous range `[addr, addr + len)` with two MTT
//! entries of a page size of at least `len` (so every registration is the same 3-WQEBB WQE,
//! whatever the I/O size); the adapter bounds every access by the context's start and length,
//! not by the pages. Invalidation is a UMR that sets only the `free` bit (as Linux posts
//! IB_WR_LOCAL_INV). The new key's variant (`mkey_7_0`) is part of every registration.

use crate::error::Error;
use crate::ifc::{mkc, wqe_ctrl_seg as ctrl, wqe_umr_ctrl_seg as umr_ctrl};
use crate::layout::set;
use mlx5_ifc::{fence_mode, umr, wqe_op};
use rdma::{Access, SendOp};

/// Send WQE opcode of a UMR [mlx5dv.h MLX5_OPCODE_UMR].
pub const OPCODE_UMR: u8 = wqe_op::UMR;
/// What the driver records for an invalidating UMR so its completion reads as one (never on
/// the wire) [mlx5dv.h MLX5_OPCODE_LOCAL_INVAL].
pub const SLOT_LOCAL_INVAL: u8 = wqe_op::LOCAL_INVAL;
const UMR_INLINE: u64 = umr::FLAG_INLINE as u64;

/// Fence mode "initiator small" ([`fence_mode::INITIATOR_SMALL`]): the WQE waits for earlier
/// local operations (a UMR) to finish; set on a UMR and on the WQE after it, as Linux does, so a
/// command capsule never leaves before its key is valid.
pub const FENCE_SMALL: u64 = fence_mode::INITIATOR_SMALL as u64;

/// mkc access mode MTT [mlx5_ifc.h MLX5_MKC_ACCESS_MODE_MTT].
const ACCESS_MODE_MTT: u64 = 1;
/// Translation entries of every registration: one octoword (two 8-byte MTT entries).
pub const XLT_OCTOWORDS: u64 = 1;
/// Inline translations are padded to this [Linux MLX5_UMR_MTT_ALIGNMENT].
const XLT_ALIGN: usize = 64;
/// MTT entry read + write enable bits [mlx5 MLX5_EN_RD | MLX5_EN_WR].
const MTT_RW: u64 = 0b11;
/// Smallest and largest page size (log2) the registrations use; mkc.log_page_size is 5 bits,
/// and one registration spans at most two such pages.
const LOG_PAGE_MIN: u32 = 12;
const LOG_PAGE_MAX: u32 = 30;
/// Largest registration: one page of the largest size.
pub const MAX_LEN: u64 = 1 << LOG_PAGE_MAX;

const CTRL: usize = ctrl::LAYOUT.size;
const UMR_CTRL: usize = umr_ctrl::LAYOUT.size;
const MKEY_SEG: usize = mkc::LAYOUT.size;
/// Bytes of a registering UMR WQE (3 WQEBBs) and of an invalidating one (2 WQEBBs).
pub const REG_BYTES: usize = CTRL + UMR_CTRL + MKEY_SEG + XLT_ALIGN;
pub const INV_BYTES: usize = CTRL + UMR_CTRL + MKEY_SEG;
const _: () = assert!(UMR_CTRL == 0x30 && MKEY_SEG == 0x40 && REG_BYTES == 192 && INV_BYTES == 128);

/// log2 of the page size that covers `len` bytes with one page (at least 4 KiB).
fn log_page(len: u64) -> u32 {
    let l = 64 - len.saturating_sub(1).leading_zeros();
    l.max(LOG_PAGE_MIN)
}

/// Write the UMR segments for `op` (a `SendOp::RegMr` or `SendOp::LocalInvalidate`) into `w`
/// after the ctrl segment (which the caller fills, `imm` = the returned key). Returns (WQE
/// bytes, ctrl imm, the opcode to remember for the completion).
pub fn write(w: &mut [u8], op: &SendOp) -> Result<(usize, u32, u8), Error> {
    let (uc, rest) = w[CTRL..].split_at_mut(UMR_CTRL);
    let mk = &mut rest[..MKEY_SEG];
    set(mk, mkc::qpn, 0xff_ffff);
    match *op {
        SendOp::RegMr { key, addr, len, access } => {
            let len = len as u64;
            if len == 0 || len > MAX_LEN {
                return Err(Error::InvalidArgument("fast registration length out of range"));
            }
            addr.checked_add(len).ok_or(Error::InvalidArgument("fast registration wraps"))?;
            let lp = log_page(len);
            let page = addr & !((1u64 << lp) - 1);
            set(uc, umr_ctrl::flags, UMR_INLINE);
            set(uc, umr_ctrl::xlt_octowords, XLT_OCTOWORDS);
            let m = umr::MASK_LEN
                | umr::MASK_PAGE_SIZE
                | umr::MASK_START_ADDR
                | umr::MASK_EN_RINVAL
                | umr::MASK_KEY
                | umr::MASK_LR
                | umr::MASK_LW
                | umr::MASK_RR
                | umr::MASK_RW
                | umr::MASK_A
                | umr::MASK_FREE;
            set(uc, umr_ctrl::mkey_mask, m);
            mkc_access(mk, access);
            set(mk, mkc::access_mode_1_0, ACCESS_MODE_MTT);
            set(mk, mkc::mkey_7_0, key.variant() as u64);
            // The peer invalidates it with SEND WITH INVALIDATE.
            set(mk, mkc::en_rinval, 1);
            set(mk, mkc::start_addr, addr);
            set(mk, mkc::len, len);
            set(mk, mkc::translations_octword_size, XLT_OCTOWORDS);
            set(mk, mkc::log_page_size, lp as u64);
            let xlt = &mut rest[MKEY_SEG..MKEY_SEG + XLT_ALIGN];
            xlt[..8].copy_from_slice(&(page | MTT_RW).to_be_bytes());
            xlt[8..16].copy_from_slice(&(page.wrapping_add(1 << lp) | MTT_RW).to_be_bytes());
            xlt[16..].fill(0);
            Ok((REG_BYTES, key.0, OPCODE_UMR))
        }
        SendOp::LocalInvalidate(key) => {
            set(uc, umr_ctrl::flags, UMR_INLINE);
            set(uc, umr_ctrl::mkey_mask, umr::MASK_FREE);
            set(mk, mkc::free, 1);
            Ok((INV_BYTES, key.0, SLOT_LOCAL_INVAL))
        }
        _ => Err(Error::InvalidArgument("not a memory-registration work request")),
    }
}

/// Local read always; the rest as asked.
fn mkc_access(mk: &mut [u8], access: Access) {
    set(mk, mkc::lr, 1);
    set(mk, mkc::lw, access.local_write as u64);
    set(mk, mkc::rr, access.remote_read as u64);
    set(mk, mkc::rw, access.remote_write as u64);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::get;
    use rdma::Rkey;

    #[test]
    fn registration_is_two_pages_of_at_least_the_length() {
        let mut w = [0u8; REG_BYTES];
        let op = SendOp::RegMr { key: Rkey(0x1234_56), addr: 0x10_0800, len: 8192, access: Access { local_write: true, remote_read: false, remote_write: true } };
        let (n, imm, slot) = write(&mut w, &op).unwrap();
        assert_eq!((n, imm, slot), (192, 0x1234_56, OPCODE_UMR));
        let mk = &w[CTRL + UMR_CTRL..];
        assert_eq!(get(mk, mkc::log_page_size), 13);
        assert_eq!(get(mk, mkc::mkey_7_0), 0x56);
        assert_eq!(get(mk, mkc::start_addr), 0x10_0800);
        assert_eq!(get(mk, mkc::len), 8192);
        assert_eq!((get(mk, mkc::rw), get(mk, mkc::rr), get(mk, mkc::free)), (1, 0, 0));
        let x = &mk[MKEY_SEG..];
        assert_eq!(u64::from_be_bytes(x[..8].try_into().unwrap()), 0x10_0000 | 3);
        assert_eq!(u64::from_be_bytes(x[8..16].try_into().unwrap()), 0x10_2000 | 3);
        let bad = SendOp::RegMr { key: Rkey(0x100), addr: 0, len: 0, access: Access::default() };
        assert!(write(&mut w, &bad).is_err());
        let wraps = SendOp::RegMr { key: Rkey(0x100), addr: u64::MAX - 10, len: 4096, access: Access::default() };
        assert!(write(&mut w, &wraps).is_err());
    }

    #[test]
    fn invalidation_sets_only_free() {
        let mut w = [0u8; REG_BYTES];
        let (n, imm, slot) = write(&mut w, &SendOp::LocalInvalidate(Rkey(0x4201))).unwrap();
        assert_eq!((n, imm, slot), (128, 0x4201, SLOT_LOCAL_INVAL));
        assert_eq!(get(&w[CTRL..], umr_ctrl::mkey_mask), umr::MASK_FREE);
        assert_eq!(get(&w[CTRL + UMR_CTRL..], mkc::free), 1);
    }
}
