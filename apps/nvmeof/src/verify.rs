//! Verified random I/O through the initiator: random writes and reads over a namespace at a
//! queue depth, every write a pattern unique to (block, generation), every read of a block the
//! run wrote compared with what was written last. The interop check against any target
//! (the appliance's or Linux nvmet), replayable by seed. Slow path: allocates its shadow once.

use alloc::vec;
use alloc::vec::Vec;

use hal::DmaRegion;
use rdma::GroupVerbs;

use crate::bench::Rng;
use crate::host::{Host, HostEnv, IoDone, IoKind};
use crate::{Error, Status};

pub mod lanes;
pub mod reconnecting;

/// What a verified run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VerifyResult {
    pub writes: u64,
    pub reads: u64,
    /// Blocks compared against the shadow (reads of blocks this run wrote).
    pub blocks_verified: u64,
    /// Blocks whose content differed (0 on a good run).
    pub mismatches: u64,
    /// Commands that completed with an error status.
    pub errors: u64,
    /// First failed status, if any.
    pub first_error: Option<Status>,
}

impl VerifyResult {
    /// Add `o`'s counts to these (the first error kept).
    pub fn add(&mut self, o: &VerifyResult) {
        self.writes += o.writes;
        self.reads += o.reads;
        self.blocks_verified += o.blocks_verified;
        self.mismatches += o.mismatches;
        self.errors += o.errors;
        self.first_error = self.first_error.or(o.first_error);
    }
}

/// The byte at offset `i` of block `lba` written in generation `gen` (never all-zero blocks).
pub fn pattern_byte(lba: u64, gen: u64, i: usize) -> u8 {
    let w = lba.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ gen.wrapping_mul(0xC2B2_AE3D_27D4_EB4F) ^ (i as u64 / 8);
    (w >> ((i % 8) * 8)) as u8 ^ 0x5A
}

#[derive(Clone, Copy)]
struct Flight {
    queue: u16,
    slot: u16,
    write: bool,
    lba: u64,
    blocks: u32,
    gen: u64,
}

/// Run `count` verified random I/Os (about half writes) on `nsid` at queue depth `qd`, each
/// 1..=`max_blocks` blocks, spread over every I/O queue. Overlapping ranges are never in flight
/// together. Returns the tally; the caller decides what counts as a pass.
#[allow(clippy::too_many_arguments)]
pub fn run<V: GroupVerbs>(host: &mut Host<V>, verbs: &mut V, env: &mut impl HostEnv<V>, nsid: u32, count: u64, qd: usize, max_blocks: u32, seed: u64) -> Result<VerifyResult, Error<V::Error>> {
    let ns = *host.namespaces.iter().find(|n| n.nsid == nsid).ok_or(Error::Config("no such namespace"))?;
    let (nq, depth) = host.io_queues();
    if nq == 0 {
        return Err(Error::Config("no I/O queue"));
    }
    let bs = ns.block_size as usize;
    let (_, _, xfer) = host.slot_buf(1, 0);
    let max_blocks = max_blocks.clamp(1, (xfer / bs) as u32);
    // The shadow covers the first part of big namespaces (bounded memory, slow path).
    let span = ns.blocks.min(1 << 20);
    if span <= max_blocks as u64 {
        return Err(Error::Config("namespace too small for the I/O size"));
    }
    let qd = qd.clamp(1, nq as usize * depth as usize);
    let mut shadow = vec![0u64; span as usize];
    let mut gen = 0u64;
    let mut rng = Rng::new(seed);
    let mut res = VerifyResult::default();
    let mut inflight: Vec<Flight> = Vec::with_capacity(qd);
    let mut scratch = vec![0u8; max_blocks as usize * bs];
    let mut done = [IoDone { queue: 0, slot: 0, status: Status::SUCCESS, dw0: 0, latency_ns: 0 }; 64];
    let mut issued = 0u64;
    let start = env.now_ns();
    while issued < count || !inflight.is_empty() {
        while issued < count && inflight.len() < qd {
            let blocks = 1 + (rng.next() % max_blocks as u64) as u32;
            let lba = rng.next() % (span - blocks as u64);
            if inflight.iter().any(|f| lba < f.lba + f.blocks as u64 && f.lba < lba + blocks as u64) {
                continue;
            }
            let queue = 1 + (issued % nq as u64) as u16;
            let Some(slot) = host.alloc_slot(queue) else { break };
            let write = rng.next() % 2 == 0;
            let mut g = 0;
            if write {
                gen += 1;
                g = gen;
                let data = &mut scratch[..blocks as usize * bs];
                for (b, chunk) in data.chunks_mut(bs).enumerate() {
                    for (i, x) in chunk.iter_mut().enumerate() {
                        *x = pattern_byte(lba + b as u64, g, i);
                    }
                }
                let (buf, off, _) = host.slot_buf(queue, slot);
                buf.write(off, data);
                res.writes += 1;
            } else {
                res.reads += 1;
            }
            let kind = if write { IoKind::Write } else { IoKind::Read };
            let now = env.now_ns();
            host.submit(verbs, queue, slot, kind, nsid, lba, blocks, now)?;
            inflight.push(Flight { queue, slot, write, lba, blocks, gen: g });
            issued += 1;
        }
        let now = env.now_ns();
        let n = host.poll(verbs, now, &mut done)?;
        for d in &done[..n] {
            let Some(i) = inflight.iter().position(|f| f.queue == d.queue && f.slot == d.slot) else {
                return Err(Error::Protocol("completion for a slot not in flight"));
            };
            let f = inflight.swap_remove(i);
            if !d.status.is_success() {
                res.errors += 1;
                res.first_error.get_or_insert(d.status);
                continue;
            }
            if f.write {
                for b in 0..f.blocks as u64 {
                    shadow[(f.lba + b) as usize] = f.gen;
                }
                continue;
            }
            let (buf, off, _) = host.slot_buf(f.queue, f.slot);
            let got = &mut scratch[..f.blocks as usize * bs];
            buf.read(off, got);
            for (b, chunk) in got.chunks(bs).enumerate() {
                let g = shadow[(f.lba + b as u64) as usize];
                if g == 0 {
                    continue;
                }
                res.blocks_verified += 1;
                if chunk.iter().enumerate().any(|(i, x)| *x != pattern_byte(f.lba + b as u64, g, i)) {
                    res.mismatches += 1;
                    log::error!("nvmeof: verify: block {} differs (generation {g})", f.lba + b as u64);
                }
            }
        }
        host.tick(verbs, now)?;
        if host.failed() {
            return Err(Error::Protocol("the connection failed during verified I/O"));
        }
        if n == 0 {
            env.idle(verbs);
        }
        if env.now_ns().saturating_sub(start) > 600_000_000_000 {
            return Err(Error::Timeout);
        }
    }
    // Finally read back every block this run wrote that no later read covered: a full check.
    let mut lba = 0u64;
    while lba < span {
        if shadow[lba as usize] == 0 {
            lba += 1;
            continue;
        }
        let blocks = (1..=max_blocks as u64).take_while(|k| lba + k <= span && shadow[(lba + k - 1) as usize] != 0).last().unwrap_or(1) as u32;
        let slot = loop {
            if let Some(s) = host.alloc_slot(1) {
                break s;
            }
            let now = env.now_ns();
            host.poll(verbs, now, &mut done)?;
            env.idle(verbs);
        };
        let now = env.now_ns();
        host.submit(verbs, 1, slot, IoKind::Read, nsid, lba, blocks, now)?;
        let d = loop {
            let now = env.now_ns();
            let n = host.poll(verbs, now, &mut done)?;
            if n > 0 {
                break done[0];
            }
            host.tick(verbs, now)?;
            if host.failed() {
                return Err(Error::Protocol("the connection failed during the final read-back"));
            }
            env.idle(verbs);
        };
        res.reads += 1;
        if !d.status.is_success() {
            res.errors += 1;
            res.first_error.get_or_insert(d.status);
        } else {
            let (buf, off, _) = host.slot_buf(1, slot);
            let got = &mut scratch[..blocks as usize * bs];
            buf.read(off, got);
            for (b, chunk) in got.chunks(bs).enumerate() {
                let g = shadow[(lba + b as u64) as usize];
                res.blocks_verified += 1;
                if chunk.iter().enumerate().any(|(i, x)| *x != pattern_byte(lba + b as u64, g, i)) {
                    res.mismatches += 1;
                    log::error!("nvmeof: verify: block {} differs on read-back (generation {g})", lba + b as u64);
                }
            }
        }
        lba += blocks as u64;
    }
    Ok(res)
}
