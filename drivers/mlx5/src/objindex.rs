//! Object number (QPN, CQN) → position in the driver's dense object list, direct-mapped by
//! the number's low bits: the data path reaches a QP or CQ in one load and one compare
//! instead of searching the list. Rebuilt when an object is created or destroyed (slow
//! path). Two live numbers with the same low bits are possible (firmware hands numbers out
//! mostly in order, so rare): the later one is found by a search.

/// Entries (a power of two): numbers are told apart by their low 10 bits.
const ENTRIES: usize = 1024;
const EMPTY: u16 = u16::MAX;

pub(crate) struct ObjIndex {
    pos: [u16; ENTRIES],
}

impl ObjIndex {
    pub(crate) const fn new() -> ObjIndex {
        ObjIndex { pos: [EMPTY; ENTRIES] }
    }

    /// Index `nums` (the list's numbers, in list order); the first of colliding numbers wins.
    pub(crate) fn rebuild(&mut self, nums: impl Iterator<Item = u32>) {
        self.pos = [EMPTY; ENTRIES];
        for (i, n) in nums.enumerate() {
            let e = &mut self.pos[n as usize & (ENTRIES - 1)];
            if *e == EMPTY && i < EMPTY as usize {
                *e = i as u16;
            }
        }
    }

    /// The position `num` would have (the caller checks the object there is `num`).
    #[inline(always)]
    pub(crate) fn candidate(&self, num: u32) -> usize {
        self.pos[num as usize & (ENTRIES - 1)] as usize
    }
}

impl ObjIndex {
    /// Position of the object numbered `num` in `items` (as indexed by the last `rebuild`): its
    /// candidate slot, a search only on a collision.
    #[inline(always)]
    pub(crate) fn find<T>(&self, items: &[T], num: u32, key: impl Fn(&T) -> u32) -> Option<usize> {
        let i = self.candidate(num);
        if items.get(i).is_some_and(|x| key(x) == num) {
            return Some(i);
        }
        items.iter().position(|x| key(x) == num)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_mapped_with_first_wins() {
        let mut x = ObjIndex::new();
        let nums = [0x100u32, 0x101, 0x500, 0x102];
        x.rebuild(nums.iter().copied());
        assert_eq!(x.candidate(0x101), 1);
        assert_eq!(x.candidate(0x102), 3);
        // 0x500 collides with 0x100 (same low 10 bits): the earlier one holds the entry.
        assert_eq!(x.candidate(0x500), 0);
        assert_eq!(x.candidate(0x7), EMPTY as usize);
    }
}
