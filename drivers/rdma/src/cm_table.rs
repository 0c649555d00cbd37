//! cm_table: the CM's bounded storage — a slot table addressed by Local Communication ID and
//! fixed-capacity hash indexes, all allocated once, so no packet costs an allocation or a scan.
//!
//! [`SlotTable`]: a Local Comm ID is `tag << slot_bits | slot`: the slot index in its low bits,
//! a random non-zero tag (changed at every reuse, so a stale or guessed ID misses) above. A
//! lookup is one index and one compare. Sweeps look only below the highest occupied slot.
//!
//! [`HashIndex`]: open addressing over `u64` keys (an address and a comm ID or QPN packed
//! together) with linear probing and backward-shift deletion, hashed with a per-instance key
//! so a peer cannot aim collisions; kept at most half full.

use alloc::collections::TryReserveError;
use alloc::vec::Vec;

/// Slot table of `T` with generation-tagged IDs. Capacity fixed at creation.
pub struct SlotTable<T> {
    slots: Vec<(u32, Option<T>)>,
    /// Free slots (a stack: the last freed is reused first; initially lowest first).
    free: Vec<u32>,
    slot_bits: u32,
    /// One past the highest occupied slot.
    end: usize,
}

impl<T> SlotTable<T> {
    /// Room for `cap` (at least 1, at most 2^24) values, allocated now.
    pub fn new(cap: usize) -> Result<Self, TryReserveError> {
        let cap = cap.clamp(1, 1 << 24);
        let mut slots = Vec::new();
        slots.try_reserve_exact(cap)?;
        slots.resize_with(cap, || (0, None));
        let mut free = Vec::new();
        free.try_reserve_exact(cap)?;
        free.extend((0..cap as u32).rev());
        let slot_bits = usize::BITS - (cap - 1).leading_zeros();
        Ok(SlotTable { slots, free, slot_bits: slot_bits.max(1), end: 0 })
    }

    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Every occupied slot is below this (sweeps look at `0..scan_end()`).
    pub fn scan_end(&self) -> usize {
        self.end
    }

    pub fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn split(&self, id: u32) -> (usize, u32) {
        ((id & ((1u32 << self.slot_bits) - 1)) as usize, id >> self.slot_bits)
    }

    /// Store the value `make(id)` under a fresh ID whose tag comes from `rand`; `None` when full.
    pub fn insert_with(&mut self, rand: u32, make: impl FnOnce(u32) -> T) -> Option<u32> {
        let slot = self.free.pop()?;
        let tag_bits = 32 - self.slot_bits;
        let mut tag = rand & ((1u32 << tag_bits) - 1);
        let Some(entry) = self.slots.get_mut(slot as usize) else { return None };
        if tag == 0 || tag == entry.0 {
            // Never 0 (ID 0 means "none" on the wire) and never the slot's previous tag.
            tag = (entry.0 % ((1u32 << tag_bits) - 1)) + 1;
        }
        let id = (tag << self.slot_bits) | slot;
        *entry = (tag, Some(make(id)));
        self.end = self.end.max(slot as usize + 1);
        Some(id)
    }

    pub fn get(&self, id: u32) -> Option<&T> {
        let (slot, tag) = self.split(id);
        match self.slots.get(slot) {
            Some((t, Some(v))) if *t == tag => Some(v),
            _ => None,
        }
    }

    pub fn get_mut(&mut self, id: u32) -> Option<&mut T> {
        let (slot, tag) = self.split(id);
        match self.slots.get_mut(slot) {
            Some((t, Some(v))) if *t == tag => Some(v),
            _ => None,
        }
    }

    pub fn contains_key(&self, id: u32) -> bool {
        self.get(id).is_some()
    }

    pub fn remove(&mut self, id: u32) -> Option<T> {
        let (slot, tag) = self.split(id);
        let v = match self.slots.get_mut(slot) {
            Some((t, v)) if *t == tag && v.is_some() => v.take(),
            _ => None,
        }?;
        self.free.push(slot as u32);
        while self.end > 0 && matches!(self.slots.get(self.end - 1), Some((_, None))) {
            self.end -= 1;
        }
        Some(v)
    }

    /// The ID of the value in slot `i`, if any (for slow-path sweeps by index).
    pub fn id_at(&self, i: usize) -> Option<u32> {
        match self.slots.get(i) {
            Some((t, Some(_))) => Some((t << self.slot_bits) | i as u32),
            _ => None,
        }
    }

    /// Every value, for slow-path counts.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().filter_map(|s| s.1.as_ref())
    }
}

/// Fixed-capacity map `u64 → V` (open addressing, keyed hash). Never grows.
pub struct HashIndex<V: Copy> {
    cells: Vec<Option<(u64, V)>>,
    mask: usize,
    key: u64,
    len: usize,
    max: usize,
}

fn mix(mut x: u64) -> u64 {
    // SplitMix64 finaliser.
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl<V: Copy> HashIndex<V> {
    /// Room for `max` keys (the cell array is the next power of two ≥ 2 × max), hashed with `key`.
    pub fn new(max: usize, key: u64) -> Result<Self, TryReserveError> {
        let max = max.max(1);
        let n = max.saturating_mul(2).next_power_of_two();
        let mut cells = Vec::new();
        cells.try_reserve_exact(n)?;
        cells.resize(n, None);
        Ok(HashIndex { cells, mask: n - 1, key: mix(key), len: 0, max })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn home(&self, k: u64) -> usize {
        (mix(k ^ self.key) as usize) & self.mask
    }

    fn find(&self, k: u64) -> Option<usize> {
        let mut i = self.home(k);
        loop {
            match self.cells.get(i)? {
                Some((kk, _)) if *kk == k => return Some(i),
                Some(_) => i = (i + 1) & self.mask,
                None => return None,
            }
        }
    }

    pub fn get(&self, k: u64) -> Option<V> {
        self.find(k).and_then(|i| self.cells.get(i).copied().flatten()).map(|(_, v)| v)
    }

    pub fn get_mut(&mut self, k: u64) -> Option<&mut V> {
        let i = self.find(k)?;
        self.cells.get_mut(i)?.as_mut().map(|(_, v)| v)
    }

    /// Set `k` to `v` (replacing); false when `k` is new and the index holds `max` keys.
    pub fn insert(&mut self, k: u64, v: V) -> bool {
        if let Some(i) = self.find(k) {
            if let Some(c) = self.cells.get_mut(i) {
                *c = Some((k, v));
            }
            return true;
        }
        if self.len >= self.max {
            return false;
        }
        let mut i = self.home(k);
        while matches!(self.cells.get(i), Some(Some(_))) {
            i = (i + 1) & self.mask;
        }
        if let Some(c) = self.cells.get_mut(i) {
            *c = Some((k, v));
            self.len += 1;
        }
        true
    }

    /// Remove `k` if `keep` says its value may go; returns the removed value.
    pub fn remove_if(&mut self, k: u64, keep: impl FnOnce(&V) -> bool) -> Option<V> {
        let mut i = self.find(k)?;
        let (_, v) = self.cells.get(i).copied().flatten()?;
        if !keep(&v) {
            return None;
        }
        // Backward-shift deletion: pull later members of the probe run into the hole.
        let mut j = i;
        loop {
            j = (j + 1) & self.mask;
            let Some((kj, vj)) = self.cells.get(j).copied().flatten() else { break };
            let h = self.home(kj);
            // Move kj to the hole at i if its home is not cyclically within (i, j].
            let between = if i <= j { i < h && h <= j } else { i < h || h <= j };
            if !between {
                if let Some(c) = self.cells.get_mut(i) {
                    *c = Some((kj, vj));
                }
                i = j;
            }
        }
        if let Some(c) = self.cells.get_mut(i) {
            *c = None;
        }
        self.len -= 1;
        Some(v)
    }

    pub fn remove(&mut self, k: u64) -> Option<V> {
        self.remove_if(k, |_| true)
    }

    /// Remove every entry `drop` says to (a slow-path sweep over the whole index).
    pub fn retain(&mut self, mut keep: impl FnMut(u64, &V) -> bool) {
        let mut i = 0;
        while i < self.cells.len() {
            match self.cells.get(i).copied().flatten() {
                Some((k, v)) if !keep(k, &v) => {
                    // The shift may pull an unvisited entry into i: look at i again.
                    self.remove(k);
                }
                _ => i += 1,
            }
        }
    }
}

/// Pack an IPv4 address and a 32-bit value (comm ID, QPN) into an index key.
pub fn key(ip: [u8; 4], v: u32) -> u64 {
    ((u32::from_be_bytes(ip) as u64) << 32) | v as u64
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    #[test]
    fn slot_ids_are_tagged_and_reuse_changes_the_tag() {
        let mut t = SlotTable::new(4).unwrap();
        let a = t.insert_with(0x1234_5678, |id| id).unwrap();
        assert_ne!(a, 0);
        assert_eq!(t.get(a), Some(&a));
        assert_eq!(t.get(a ^ 0x100), None);
        t.remove(a).unwrap();
        let b = t.insert_with(0x1234_5678, |id| id).unwrap();
        assert_eq!(a & 3, b & 3, "same slot");
        assert_ne!(a, b, "new tag");
        assert_eq!(t.get(a), None);
        for _ in 0..3 {
            t.insert_with(7, |id| id).unwrap();
        }
        assert_eq!(t.insert_with(7, |id| id), None, "full");
        assert_eq!(t.len(), 4);
    }

    #[test]
    fn hash_index_insert_remove_under_collisions_stays_consistent() {
        let mut h = HashIndex::new(64, 9).unwrap();
        let mut model = std::collections::BTreeMap::new();
        let mut s = 0x9e37_79b9_u64;
        for step in 0..20_000u32 {
            s = mix(s);
            let k = s % 96; // few keys: many collisions and reinsertions
            if s & 1 == 0 {
                let ok = h.insert(k, step);
                if ok {
                    model.insert(k, step);
                } else {
                    assert_eq!(model.len(), 64);
                    assert!(!model.contains_key(&k));
                }
            } else {
                assert_eq!(h.remove(k), model.remove(&k));
            }
            assert_eq!(h.len(), model.len());
            if step % 97 == 0 {
                for kk in 0..96 {
                    assert_eq!(h.get(kk), model.get(&kk).copied());
                }
            }
        }
        h.retain(|k, _| k % 2 == 0);
        model.retain(|k, _| k % 2 == 0);
        for kk in 0..96 {
            assert_eq!(h.get(kk), model.get(&kk).copied());
        }
    }
}
