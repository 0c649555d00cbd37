//! nvme prp: Physical Region Page entries for a physically contiguous buffer (Base §4.1.1).
//!
//! PRP1 points at the first byte (any dword-aligned offset in a page). If the transfer
//! touches two pages PRP2 is the second page; if more, PRP2 points at a PRP list whose
//! entries are the following page addresses. One list page (page/8 entries) is used per
//! command, so the largest transfer is `page × page/8` bytes (2 MiB with 4 KiB pages),
//! or less when MDTS says so; lists are never chained.

/// Where a transfer's data lives, in the form the SQE needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrpPlan {
    pub prp1: u64,
    /// 0, the second page, or (when `list_entries > 0`) the list's address.
    pub prp2: u64,
    /// How many entries the PRP list at `prp2` must hold (0 = no list).
    pub list_entries: usize,
    /// Value of list entry 0; entry i is `list_first + i × page`.
    pub list_first: u64,
}

/// Why a buffer cannot be described.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrpError {
    /// Zero bytes.
    Empty,
    /// The buffer is not dword aligned (Base §4.1.1: bits 1:0 of PRP1 must be 0).
    Misaligned,
    /// More pages than one PRP list can hold.
    TooManyPages { pages: usize, max: usize },
}

/// Number of memory pages `[addr, addr+len)` touches.
pub fn pages_spanned(addr: u64, len: usize, page: usize) -> usize {
    let off = (addr as usize) & (page - 1);
    (off + len).div_ceil(page)
}

/// Plan the PRPs for `len` bytes at `addr`; `list_paddr` is the (page aligned) list page
/// reserved for this command. `page` is the controller memory page size (a power of two).
pub fn plan(addr: u64, len: usize, page: usize, list_paddr: u64) -> Result<PrpPlan, PrpError> {
    if len == 0 {
        return Err(PrpError::Empty);
    }
    if addr & 3 != 0 {
        return Err(PrpError::Misaligned);
    }
    let pages = pages_spanned(addr, len, page);
    let max = page / 8 + 1;
    if pages > max {
        return Err(PrpError::TooManyPages { pages, max });
    }
    let second = (addr & !(page as u64 - 1)) + page as u64;
    Ok(match pages {
        1 => PrpPlan { prp1: addr, prp2: 0, list_entries: 0, list_first: 0 },
        2 => PrpPlan { prp1: addr, prp2: second, list_entries: 0, list_first: 0 },
        n => PrpPlan { prp1: addr, prp2: list_paddr, list_entries: n - 1, list_first: second },
    })
}

/// Largest transfer in bytes any buffer (whatever its offset) can have with one list page.
pub fn max_transfer_bytes(page: usize) -> usize {
    // A buffer starting mid-page may touch one page more than its length suggests.
    (page / 8) * page
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::vec::Vec;

    const PAGE: usize = 4096;
    const LIST: u64 = 0x7700_0000;

    /// The device's view: the page-sized pieces the plan describes.
    fn segments(p: &PrpPlan, len: usize) -> Vec<(u64, usize)> {
        let mut out = Vec::new();
        let first = core::cmp::min(len, PAGE - (p.prp1 as usize & (PAGE - 1)));
        out.push((p.prp1, first));
        let mut left = len - first;
        let mut pages: Vec<u64> = Vec::new();
        if p.list_entries > 0 {
            assert_eq!(p.prp2, LIST);
            for i in 0..p.list_entries {
                pages.push(p.list_first + (i * PAGE) as u64);
            }
        } else if p.prp2 != 0 {
            pages.push(p.prp2);
        }
        for a in pages {
            assert_eq!(a as usize & (PAGE - 1), 0, "list entries are page aligned");
            let n = core::cmp::min(left, PAGE);
            assert!(n > 0, "no surplus entries");
            out.push((a, n));
            left -= n;
        }
        assert_eq!(left, 0, "entries cover the whole transfer");
        out
    }

    #[test]
    fn small_cases() {
        assert_eq!(plan(0x1000, 0, PAGE, LIST), Err(PrpError::Empty));
        assert_eq!(plan(0x1002, 8, PAGE, LIST), Err(PrpError::Misaligned));
        let p = plan(0x1000, 4096, PAGE, LIST).unwrap();
        assert_eq!((p.prp2, p.list_entries), (0, 0));
        let p = plan(0x1200, 4096, PAGE, LIST).unwrap();
        assert_eq!((p.prp2, p.list_entries), (0x2000, 0));
        let p = plan(0x1000, 3 * 4096, PAGE, LIST).unwrap();
        assert_eq!((p.prp2, p.list_entries, p.list_first), (LIST, 2, 0x2000));
        // 2 MiB aligned fits; 2 MiB + 4 bytes at an offset does not.
        assert!(plan(0x10_0000, max_transfer_bytes(PAGE), PAGE, LIST).is_ok());
        assert!(plan(0x10_0004, max_transfer_bytes(PAGE), PAGE, LIST).is_ok());
        assert!(matches!(
            plan(0x10_0004, max_transfer_bytes(PAGE) + PAGE, PAGE, LIST),
            Err(PrpError::TooManyPages { .. })
        ));
    }

    proptest! {
        /// Every buffer up to the maximum transfer is described exactly: contiguous pieces
        /// that cover [addr, addr+len), page-aligned after the first, list within one page.
        #[test]
        fn plan_covers_buffer(base in 0u64..(1u64 << 40), off in 0usize..PAGE, len in 1usize..=max_transfer_bytes(PAGE)) {
            let addr = ((base & !(PAGE as u64 - 1)) + off as u64) & !3;
            let p = plan(addr, len, PAGE, LIST).unwrap();
            prop_assert!(p.list_entries <= PAGE / 8);
            let segs = segments(&p, len);
            let mut cur = addr;
            for (a, n) in &segs {
                prop_assert_eq!(*a, cur);
                cur += *n as u64;
            }
            prop_assert_eq!(cur, addr + len as u64);
            prop_assert_eq!(segs.len(), pages_spanned(addr, len, PAGE));
        }
    }
}
