//! nvme prp: Physical Region Page entries for a physically contiguous buffer (Base §4.1.1).
//!
//! PRP1 points at the first byte (any dword-aligned offset in a page). If the transfer
//! touches two pages PRP2 is the second page; if more, PRP2 points at a PRP list whose
//! entries are the following page addresses. A list page holds `page / 8` entries; when more
//! entries follow than fit, the last entry of a list page is not a data page but a pointer
//! to the next list page (Base §4.1.1, "PRP List"). This builder chains list pages that the
//! caller reserved per command, contiguous from a page-aligned base: `max_list_pages` of
//! them bound the largest transfer ([`max_transfer_bytes`]). All pure: the queue writes the
//! entries [`PrpPlan::list_page`] describes.

/// Bytes per PRP entry.
pub const ENTRY_BYTES: usize = 8;

/// Where a transfer's data lives, in the form the SQE needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrpPlan {
    pub prp1: u64,
    /// 0, the second page, or (when `list_entries > 0`) the first list page's address.
    pub prp2: u64,
    /// How many data-page entries the PRP lists hold in all (0 = no list).
    pub list_entries: usize,
    /// Value of data entry 0; data entry i is `list_first + i × page`.
    pub list_first: u64,
    /// List pages used, contiguous from `prp2` (0 = no list).
    pub list_pages: usize,
}

/// What one list page of a plan must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListPage {
    /// Address of this list page.
    pub paddr: u64,
    /// Value of this page's entry 0; entry i is `first + i × page`.
    pub first: u64,
    /// Data entries in this page (from entry 0).
    pub count: usize,
    /// Next list page, stored in this page's last entry (entry `page/8 - 1`).
    pub chain: Option<u64>,
}

/// Why a buffer cannot be described.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrpError {
    /// Zero bytes.
    Empty,
    /// The buffer is not dword aligned (Base §4.1.1: bits 1:0 of PRP1 must be 0).
    Misaligned,
    /// More pages than the reserved list pages can describe.
    TooManyPages { pages: usize, max: usize },
}

/// Number of memory pages `[addr, addr+len)` touches.
pub fn pages_spanned(addr: u64, len: usize, page: usize) -> usize {
    let off = (addr as usize) & (page - 1);
    (off + len).div_ceil(page)
}

/// Entries per list page.
pub const fn entries_per_page(page: usize) -> usize {
    page / ENTRY_BYTES
}

/// Data entries `list_pages` chained list pages can hold (the last entry of every page but
/// the last is a chain pointer).
pub const fn list_capacity(list_pages: usize, page: usize) -> usize {
    if list_pages == 0 {
        0
    } else {
        (list_pages - 1) * (entries_per_page(page) - 1) + entries_per_page(page)
    }
}

/// List pages needed for `entries` data entries (0 when they fit PRP2 itself, i.e. ≤ 1).
pub const fn list_pages_needed(entries: usize, page: usize) -> usize {
    let e = entries_per_page(page);
    if entries <= 1 {
        0
    } else if entries <= e {
        1
    } else {
        1 + (entries - e).div_ceil(e - 1)
    }
}

/// List pages a command needs so that any dword-aligned buffer of up to `max_bytes` can be
/// described, wherever in a page it starts (at least 1: the slot page also carries DSM ranges).
pub const fn list_pages_for_transfer(max_bytes: usize, page: usize) -> usize {
    // Worst case: the buffer starts at the last dword of a page.
    let worst_pages = (page - 4 + max_bytes).div_ceil(page);
    let n = list_pages_needed(worst_pages.saturating_sub(1), page);
    if n == 0 {
        1
    } else {
        n
    }
}

/// Largest transfer in bytes (a multiple of the page) that any dword-aligned buffer,
/// whatever its offset, can have with `list_pages` list pages per command.
pub const fn max_transfer_bytes(page: usize, list_pages: usize) -> usize {
    // Capacity C data entries + PRP1 = C + 1 pages; an unaligned buffer of C pages spans C + 1.
    let c = if list_pages == 0 { 1 } else { list_capacity(list_pages, page) };
    c * page
}

/// Plan the PRPs for `len` bytes at `addr`. `list_base` is the first of `max_list_pages`
/// contiguous, page-aligned list pages reserved for this command. `page` is the controller
/// memory page size (a power of two).
pub fn plan(addr: u64, len: usize, page: usize, list_base: u64, max_list_pages: usize) -> Result<PrpPlan, PrpError> {
    if len == 0 {
        return Err(PrpError::Empty);
    }
    if addr & 3 != 0 {
        return Err(PrpError::Misaligned);
    }
    let pages = pages_spanned(addr, len, page);
    let max = if max_list_pages == 0 { 2 } else { list_capacity(max_list_pages, page) + 1 };
    if pages > max {
        return Err(PrpError::TooManyPages { pages, max });
    }
    let second = (addr & !(page as u64 - 1)) + page as u64;
    Ok(match pages {
        1 => PrpPlan { prp1: addr, prp2: 0, list_entries: 0, list_first: 0, list_pages: 0 },
        2 => PrpPlan { prp1: addr, prp2: second, list_entries: 0, list_first: 0, list_pages: 0 },
        n => PrpPlan {
            prp1: addr,
            prp2: list_base,
            list_entries: n - 1,
            list_first: second,
            list_pages: list_pages_needed(n - 1, page),
        },
    })
}

impl PrpPlan {
    /// What list page `j` (< `list_pages`) holds.
    pub fn list_page(&self, j: usize, page: usize) -> ListPage {
        let e = entries_per_page(page);
        // Pages before j each hold e - 1 data entries.
        let before = j * (e - 1);
        let left = self.list_entries - before;
        let last = j + 1 == self.list_pages;
        let count = if last { left } else { e - 1 };
        let paddr = self.prp2 + (j * page) as u64;
        ListPage {
            paddr,
            first: self.list_first + (before * page) as u64,
            count,
            chain: if last { None } else { Some(paddr + page as u64) },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;
    use std::vec::Vec;

    const PAGE: usize = 4096;
    const E: usize = PAGE / 8;
    const LIST: u64 = 0x7700_0000;

    /// Memory as the device would see it after the queue wrote the plan's list pages.
    fn lists_in_memory(p: &PrpPlan) -> HashMap<u64, u64> {
        let mut mem = HashMap::new();
        for j in 0..p.list_pages {
            let lp = p.list_page(j, PAGE);
            assert!(lp.count <= E, "page {j} overfull");
            for i in 0..lp.count {
                mem.insert(lp.paddr + (i * 8) as u64, lp.first + (i * PAGE) as u64);
            }
            if let Some(next) = lp.chain {
                assert_eq!(lp.count, E - 1, "a chained page is full up to its pointer");
                mem.insert(lp.paddr + ((E - 1) * 8) as u64, next);
            }
        }
        mem
    }

    /// The device's view (Base §4.1.1): read PRP1, then PRP2 as a page or list pointer, then
    /// list entries, following the last entry of a list page as a pointer when more than one
    /// entry is still needed. Returns the (address, bytes) pieces and the list pages visited.
    fn device_walk(p: &PrpPlan, len: usize, mem: &HashMap<u64, u64>) -> (Vec<(u64, usize)>, Vec<u64>) {
        let mut out = Vec::new();
        let mut lists = Vec::new();
        let first = core::cmp::min(len, PAGE - (p.prp1 as usize & (PAGE - 1)));
        out.push((p.prp1, first));
        let mut left = len - first;
        if left == 0 {
            return (out, lists);
        }
        if left <= PAGE {
            out.push((p.prp2, left));
            return (out, lists);
        }
        let mut list = p.prp2;
        assert_eq!(list as usize & (PAGE - 1), 0);
        lists.push(list);
        let mut i = 0;
        while left > 0 {
            let v = *mem.get(&(list + (i * 8) as u64)).expect("device reads an entry never written");
            if i == E - 1 && left > PAGE {
                list = v;
                assert_eq!(list as usize & (PAGE - 1), 0, "chain pointer page aligned");
                lists.push(list);
                i = 0;
                continue;
            }
            assert_eq!(v as usize & (PAGE - 1), 0, "data entries are page aligned");
            let n = core::cmp::min(left, PAGE);
            out.push((v, n));
            left -= n;
            i += 1;
        }
        (out, lists)
    }

    #[test]
    fn small_cases() {
        assert_eq!(plan(0x1000, 0, PAGE, LIST, 1), Err(PrpError::Empty));
        assert_eq!(plan(0x1002, 8, PAGE, LIST, 1), Err(PrpError::Misaligned));
        let p = plan(0x1000, 4096, PAGE, LIST, 1).unwrap();
        assert_eq!((p.prp2, p.list_entries, p.list_pages), (0, 0, 0));
        let p = plan(0x1200, 4096, PAGE, LIST, 1).unwrap();
        assert_eq!((p.prp2, p.list_entries), (0x2000, 0));
        let p = plan(0x1000, 3 * 4096, PAGE, LIST, 1).unwrap();
        assert_eq!((p.prp2, p.list_entries, p.list_first, p.list_pages), (LIST, 2, 0x2000, 1));
        // One list page: 2 MiB at any offset fits; 2 MiB + a page at an offset does not.
        assert_eq!(max_transfer_bytes(PAGE, 1), 2 << 20);
        assert!(plan(0x10_0000, 2 << 20, PAGE, LIST, 1).is_ok());
        assert!(plan(0x10_0ffc, 2 << 20, PAGE, LIST, 1).is_ok());
        assert!(matches!(plan(0x10_0004, (2 << 20) + PAGE, PAGE, LIST, 1), Err(PrpError::TooManyPages { .. })));
        // The same with two list pages chains.
        let p = plan(0x10_0004, (2 << 20) + PAGE, PAGE, LIST, 2).unwrap();
        assert_eq!((p.list_entries, p.list_pages), (513, 2));
        assert_eq!(p.list_page(0, PAGE), ListPage { paddr: LIST, first: 0x10_1000, count: 511, chain: Some(LIST + 4096) });
        assert_eq!(p.list_page(1, PAGE), ListPage { paddr: LIST + 4096, first: 0x10_1000 + 511 * 4096, count: 2, chain: None });
    }

    #[test]
    fn chaining_boundaries() {
        // Exactly 512 data entries fit one page (no pointer); 513 need a second page.
        assert_eq!(list_pages_needed(1, PAGE), 0);
        assert_eq!(list_pages_needed(2, PAGE), 1);
        assert_eq!(list_pages_needed(E, PAGE), 1);
        assert_eq!(list_pages_needed(E + 1, PAGE), 2);
        assert_eq!(list_pages_needed(E + (E - 1), PAGE), 2);
        assert_eq!(list_pages_needed(E + (E - 1) + 1, PAGE), 3);
        assert_eq!(list_capacity(3, PAGE), 3 * E - 2);
        // 8 MiB at any offset: 2049 pages, 2048 entries, 5 list pages; 5 pages describe 10 MiB - 16 KiB.
        assert_eq!(list_pages_for_transfer(8 << 20, PAGE), 5);
        assert!(max_transfer_bytes(PAGE, 5) >= 8 << 20);
        assert_eq!(list_pages_for_transfer(4096, PAGE), 1);
        for lp in 1..12 {
            let m = max_transfer_bytes(PAGE, lp);
            assert_eq!(list_pages_for_transfer(m, PAGE), lp, "{lp}");
            assert!(list_pages_for_transfer(m + PAGE, PAGE) > lp);
        }
        // A plan with exactly E data entries keeps the last entry as data.
        let p = plan(0x20_0000, (E + 1) * PAGE, PAGE, LIST, 3).unwrap();
        assert_eq!((p.list_entries, p.list_pages), (E, 1));
        let p = plan(0x20_0000, (E + 2) * PAGE, PAGE, LIST, 3).unwrap();
        assert_eq!((p.list_entries, p.list_pages), (E + 1, 2));
    }

    proptest! {
        /// Any dword-aligned buffer up to the maximum for its list pages is described so that
        /// the device, walking PRP1/PRP2/lists/chain pointers, covers [addr, addr+len) exactly
        /// once, in order; chain pointers sit only in the last entry of a full page and point to
        /// the next reserved page; no entry beyond the transfer is needed.
        #[test]
        fn plan_covers_buffer(
            base in 0u64..(1u64 << 40),
            off in 0usize..PAGE,
            max_list_pages in 1usize..8,
            frac in 0.0f64..=1.0,
        ) {
            let max = max_transfer_bytes(PAGE, max_list_pages);
            let len = ((max as f64 * frac) as usize).max(1);
            let addr = ((base & !(PAGE as u64 - 1)) + off as u64) & !3;
            let p = plan(addr, len, PAGE, LIST, max_list_pages).unwrap();
            prop_assert!(p.list_pages <= max_list_pages);
            let mem = lists_in_memory(&p);
            let (segs, lists) = device_walk(&p, len, &mem);
            let mut cur = addr;
            for (a, n) in &segs {
                prop_assert_eq!(*a, cur);
                prop_assert!(*n > 0);
                cur += *n as u64;
            }
            prop_assert_eq!(cur, addr + len as u64);
            prop_assert_eq!(segs.len(), pages_spanned(addr, len, PAGE));
            // The device visits exactly the list pages the plan says, in reserved order.
            prop_assert_eq!(lists.len(), p.list_pages);
            for (j, l) in lists.iter().enumerate() {
                prop_assert_eq!(*l, LIST + (j * PAGE) as u64);
            }
            // Entries written = data entries + one pointer per chained page.
            prop_assert_eq!(mem.len(), p.list_entries + p.list_pages.saturating_sub(1));
        }

        /// Beyond the maximum for the reserved pages the plan is refused, never overflows.
        #[test]
        fn too_large_refused(off in 0usize..PAGE, max_list_pages in 1usize..6, extra in 1usize..3) {
            let addr = (0x4000_0000u64 + off as u64) & !3;
            let max = max_transfer_bytes(PAGE, max_list_pages);
            let len = max + extra * PAGE;
            let pages = pages_spanned(addr, len, PAGE);
            let r = plan(addr, len, PAGE, LIST, max_list_pages);
            if pages > list_capacity(max_list_pages, PAGE) + 1 {
                prop_assert!(matches!(r, Err(PrpError::TooManyPages { .. })), "{:?}", r);
            } else {
                prop_assert!(r.unwrap().list_pages <= max_list_pages);
            }
        }
    }
}
