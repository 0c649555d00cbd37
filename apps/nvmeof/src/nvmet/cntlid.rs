//! Controller IDs that a peer cannot predict: drawn from a seeded generator (splitmix64; the
//! image seeds it with the TSC), in the range NVMe allows for dynamic controllers
//! (0x0001..=0xFFEF: 0xFFF0.. are reserved, 0xFFFE/0xFFFF mean static/dynamic in Connect),
//! never one in use. Guessing is not the only defence: an I/O-queue Connect must also come
//! from the controller's host NQN, host ID and source address (`super::connect`).

/// Highest controller ID handed out (NVMe Base 2.0: 0xFFF0..=0xFFFF are reserved).
pub const CNTLID_MAX: u16 = 0xFFEF;

/// The generator.
#[derive(Debug, Clone)]
pub struct CntlidGen {
    state: u64,
}

impl CntlidGen {
    pub fn new(seed: u64) -> Self {
        CntlidGen { state: seed }
    }

    fn next_u64(&mut self) -> u64 {
        // splitmix64 (Steele, Lea, Flood 2014).
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A fresh ID for which `in_use` is false. The caller bounds live controllers far below
    /// the 65,519 IDs, so a free one is found in a few draws; after 64 misses the IDs are
    /// walked from a random start (always terminates: `None` only if all are in use).
    pub fn alloc(&mut self, in_use: impl Fn(u16) -> bool) -> Option<u16> {
        let pick = |r: u64| (r % CNTLID_MAX as u64) as u16 + 1;
        for _ in 0..64 {
            let id = pick(self.next_u64());
            if !in_use(id) {
                return Some(id);
            }
        }
        let start = pick(self.next_u64());
        // u32: start - 1 + i reaches 2 x 0xFFEF, past u16.
        (0..u32::from(CNTLID_MAX))
            .map(|i| ((u32::from(start) - 1 + i) % u32::from(CNTLID_MAX)) as u16 + 1)
            .find(|&id| !in_use(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_valid_unique_and_seed_dependent() {
        let mut g = CntlidGen::new(42);
        let mut used = alloc::vec::Vec::new();
        for _ in 0..2000 {
            let id = g.alloc(|x| used.contains(&x)).unwrap();
            assert!((1..=CNTLID_MAX).contains(&id));
            used.push(id);
        }
        // Not sequential.
        assert!(used.windows(2).filter(|w| w[1] == w[0].wrapping_add(1)).count() < 10);
        let a: alloc::vec::Vec<u16> = (0..8).map(|_| CntlidGen::new(1).alloc(|_| false).unwrap()).collect();
        let mut g2 = CntlidGen::new(2);
        let b: alloc::vec::Vec<u16> = (0..8).map(|_| g2.alloc(|_| false).unwrap()).collect();
        assert_ne!(a, b);
    }

    #[test]
    fn finds_the_last_free_id() {
        let mut g = CntlidGen::new(7);
        assert_eq!(g.alloc(|x| x != 0x1234), Some(0x1234));
        assert_eq!(g.alloc(|_| true), None);
    }
}
