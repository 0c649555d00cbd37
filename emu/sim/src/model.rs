//! model: what each block may contain, and the block contents that say which write they are.
//!
//! Every written block carries a tag (seed, LBA, write ID) in its first 24 bytes and a pattern
//! derived from the tag in the rest, so a read names the write it sees and a block that is torn,
//! misplaced or garbage is recognised. Write ID 0 is the initial content (all zeros).
//!
//! Rules (NVMe: no ordering between commands in flight; a completed write is visible to every
//! command submitted after its completion was seen):
//! - a write acknowledged before a read was submitted, and not itself ordered before a later
//!   acknowledged write, must be what that read sees, unless a write still in flight or with an
//!   unknown outcome may have landed on top;
//! - a write that failed (error status, or its connection or node went away) may or may not be
//!   there, until a write submitted `grace_ns` after the failure was acknowledged (the grace
//!   covers frames still on the wire when the host gave up); the failure counts from the end of
//!   the last command on the same blocks that was in flight when it failed, as the target may
//!   hold the write behind it (a write waits for a zero-copy read of the same bytes) and place
//!   it only then, however long that command takes;
//! - when the target loses its namespace (a crash configured so) every block is back to zeros
//!   and acknowledgements of writes sent before that are void.

/// The block sizes a run may use (`Config::block_size`): 512 bytes, or 4 KiB, where a 1 KiB
/// path MTU carries one block in several packets, so a block torn between two transfers is seen.
pub const BLOCK_SIZES: [usize; 2] = [512, 4096];
/// The largest of them (the size of a block buffer).
pub const BS_MAX: usize = 4096;

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn word(seed: u64, lba: u64, wid: u64, i: usize) -> u64 {
    mix(seed ^ lba.rotate_left(17) ^ wid.rotate_left(41) ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// Fill `out` (one block, any of [`BLOCK_SIZES`]) with write `wid`'s content for `lba`.
pub fn fill_block(seed: u64, lba: u64, wid: u64, out: &mut [u8]) {
    out[0..8].copy_from_slice(&seed.to_le_bytes());
    out[8..16].copy_from_slice(&lba.to_le_bytes());
    out[16..24].copy_from_slice(&wid.to_le_bytes());
    for (i, c) in out[24..].chunks_exact_mut(8).enumerate() {
        c.copy_from_slice(&word(seed, lba, wid, i).to_le_bytes());
    }
}

/// Which write a block read from `lba` holds, or why it holds none.
pub fn decode_block(seed: u64, lba: u64, b: &[u8]) -> Result<u64, String> {
    if b.iter().all(|&x| x == 0) {
        return Ok(0);
    }
    let le = |r: core::ops::Range<usize>| u64::from_le_bytes(b[r].try_into().expect("8 bytes"));
    let (s, l, wid) = (le(0..8), le(8..16), le(16..24));
    if s != seed || l != lba {
        return Err(format!("block {lba}: not this run's data for it (tag seed {s:#x} lba {l} write {wid})"));
    }
    for (i, c) in b[24..].chunks_exact(8).enumerate() {
        if u64::from_le_bytes(c.try_into().expect("8 bytes")) != word(seed, lba, wid, i) {
            return Err(format!("block {lba}: torn or garbage (tag write {wid}, word {i} differs)"));
        }
    }
    Ok(wid)
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    InFlight,
    /// Acknowledged; the event sequence number when the ack was seen.
    Acked(u64),
    /// Failed or abandoned at this virtual time.
    Failed(u64),
}

#[derive(Debug, Clone, Copy)]
struct Cand {
    wid: u64,
    /// Event sequence number and virtual time of the submission.
    seq: u64,
    ns: u64,
    st: State,
}

/// The per-block model.
pub struct Model {
    blocks: Vec<Vec<Cand>>,
    grace_ns: u64,
    /// Namespace generation (bumped when the target loses it).
    pub epoch: u64,
}

impl Model {
    pub fn new(blocks: usize, grace_ns: u64) -> Self {
        let mut m = Model { blocks: Vec::new(), grace_ns, epoch: 0 };
        m.blocks.resize(blocks, Vec::new());
        m.reset(0, 0);
        m
    }

    /// The namespace is lost: every block reads zeros again.
    pub fn reset(&mut self, seq: u64, ns: u64) {
        self.epoch += 1;
        for b in &mut self.blocks {
            b.clear();
            b.push(Cand { wid: 0, seq, ns, st: State::Acked(seq) });
        }
    }

    pub fn submitted(&mut self, lba: u64, n: u32, wid: u64, seq: u64, ns: u64) {
        for b in lba..lba + n as u64 {
            self.blocks[b as usize].push(Cand { wid, seq, ns, st: State::InFlight });
        }
    }

    fn set(&mut self, lba: u64, n: u32, wid: u64, st: State) {
        for b in lba..lba + n as u64 {
            if let Some(c) = self.blocks[b as usize].iter_mut().find(|c| c.wid == wid) {
                c.st = st;
            }
        }
    }

    pub fn acked(&mut self, lba: u64, n: u32, wid: u64, seq: u64) {
        self.set(lba, n, wid, State::Acked(seq));
    }

    pub fn failed(&mut self, lba: u64, n: u32, wid: u64, ns: u64) {
        self.set(lba, n, wid, State::Failed(ns));
    }

    /// A command on blocks `lba..lba + n`, submitted at `submitted_ns`, is over at `now`: a write
    /// on those blocks that failed while it was in flight may have been held behind it at the
    /// target and placed only now, so its failure counts from now.
    pub fn overlap_done(&mut self, lba: u64, n: u32, submitted_ns: u64, now: u64) {
        for b in lba..lba + n as u64 {
            for c in &mut self.blocks[b as usize] {
                if let State::Failed(t) = c.st {
                    if submitted_ns <= t && t < now {
                        c.st = State::Failed(now);
                    }
                }
            }
        }
    }

    /// Whether `x` can no longer be seen by a command submitted at event `seq`: some other
    /// write acknowledged before `seq` was submitted after `x` was over.
    fn excluded(&self, list: &[Cand], x: &Cand, seq: u64) -> bool {
        list.iter().any(|w| {
            w.wid != x.wid
                && matches!(w.st, State::Acked(a) if a < seq)
                && match x.st {
                    State::InFlight => false,
                    State::Acked(a) => w.seq > a,
                    State::Failed(t) => w.ns > t.saturating_add(self.grace_ns),
                }
        })
    }

    /// Check that a read of block `lba` submitted at event `seq` may return write `wid`.
    pub fn check_read(&self, lba: u64, wid: u64, seq: u64) -> Result<(), String> {
        let list = &self.blocks[lba as usize];
        if list.iter().any(|c| c.wid == wid && !self.excluded(list, c, seq)) {
            return Ok(());
        }
        let may: Vec<String> = list.iter().filter(|c| !self.excluded(list, c, seq)).map(|c| format!("{}:{:?}", c.wid, c.st)).collect();
        Err(format!("block {lba}: read (submitted at event {seq}) saw write {wid}; it may hold only [{}]", may.join(", ")))
    }

    /// Forget candidates no read submitted at or after event `horizon` can see.
    pub fn prune(&mut self, lba: u64, n: u32, horizon: u64) {
        for b in lba..lba + n as u64 {
            let list = &self.blocks[b as usize];
            if list.len() <= 4 {
                continue;
            }
            // A failed write is kept: a command still in flight may move its failure later.
            let keep: Vec<Cand> = list.iter().filter(|c| matches!(c.st, State::Failed(_)) || !self.excluded(list, c, horizon)).copied().collect();
            self.blocks[b as usize] = keep;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_name_their_write_and_refuse_torn_data() {
        let mut b = [0u8; 512];
        assert_eq!(decode_block(7, 3, &b), Ok(0));
        fill_block(7, 3, 42, &mut b);
        assert_eq!(decode_block(7, 3, &b), Ok(42));
        assert!(decode_block(7, 4, &b).is_err(), "misplaced");
        b[300] ^= 1;
        assert!(decode_block(7, 3, &b).is_err(), "torn");
        // A 4 KiB block whose last KiB is another write's (a packet of the other transfer).
        let (mut x, mut y) = ([0u8; BS_MAX], [0u8; BS_MAX]);
        fill_block(7, 3, 42, &mut x);
        fill_block(7, 3, 43, &mut y);
        assert_eq!(decode_block(7, 3, &x), Ok(42));
        x[3072..].copy_from_slice(&y[3072..]);
        assert!(decode_block(7, 3, &x).is_err(), "torn across packets");
    }

    #[test]
    fn acknowledged_writes_must_be_seen_and_failed_ones_may_be() {
        let mut m = Model::new(4, 1000);
        m.submitted(0, 1, 1, 1, 10);
        assert!(m.check_read(0, 0, 2).is_ok() && m.check_read(0, 1, 2).is_ok(), "in flight: old or new");
        m.acked(0, 1, 1, 3);
        assert!(m.check_read(0, 0, 4).is_err(), "an acknowledged write hides the old data");
        assert!(m.check_read(0, 0, 3).is_ok(), "a read submitted before the ack may see the old data");
        m.submitted(0, 1, 2, 5, 20);
        m.failed(0, 1, 2, 30);
        assert!(m.check_read(0, 1, 6).is_ok() && m.check_read(0, 2, 6).is_ok(), "a failed write may or may not be there");
        m.submitted(0, 1, 3, 7, 500);
        m.acked(0, 1, 3, 8);
        assert!(m.check_read(0, 2, 9).is_ok(), "inside the grace a failed write may still land");
        m.submitted(0, 1, 4, 10, 2000);
        m.acked(0, 1, 4, 11);
        assert!(m.check_read(0, 2, 12).is_err() && m.check_read(0, 3, 12).is_err() && m.check_read(0, 4, 12).is_ok());
        m.prune(0, 1, 12);
        assert!(m.check_read(0, 4, 13).is_ok());
        m.reset(14, 3000);
        assert!(m.check_read(0, 0, 15).is_ok() && m.check_read(0, 4, 15).is_err());
    }

    #[test]
    fn a_failed_write_held_behind_a_command_in_flight_may_land_when_that_command_ends() {
        // Seed 9222211: host 1's write (wid 1) was held at the target behind host 0's zero-copy
        // read of the same block, slowed by an MTU drop; host 1 crashed (the write failed at
        // 100); the read ended at 5000, the target then placed the write, after host 0's
        // write (wid 2, submitted at 5000) was acknowledged.
        let mut m = Model::new(1, 20);
        m.submitted(0, 1, 1, 2, 50);
        m.failed(0, 1, 1, 100);
        m.overlap_done(0, 1, 10, 5000);
        m.submitted(0, 1, 2, 4, 5000);
        m.acked(0, 1, 2, 5);
        m.prune(0, 1, 6);
        assert!(m.check_read(0, 1, 6).is_ok() && m.check_read(0, 2, 6).is_ok(), "the held write may land after the ack");
        // A command submitted after the failure does not move it.
        m.overlap_done(0, 1, 6000, 7000);
        m.submitted(0, 1, 3, 7, 7000);
        m.acked(0, 1, 3, 8);
        assert!(m.check_read(0, 1, 9).is_err() && m.check_read(0, 3, 9).is_ok());
    }
}
