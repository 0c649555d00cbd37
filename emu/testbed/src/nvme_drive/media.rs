//! nvme_drive media: one namespace's blocks behind the drive's volatile write cache.
//!
//! `data` is what a read returns (the cache over the media). A cached write first saves the
//! media's old contents of each block it covers (once per block until the next Flush), so a
//! power loss restores exactly what was on the media: acknowledged-but-unflushed writes are
//! lost whole blocks at a time, never torn within a block.

use std::collections::BTreeMap;

/// Separate or extended metadata of a namespace's LBA format 1 (the format in use when set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetaFormat {
    /// Metadata bytes per block.
    pub ms: u16,
    /// Extended LBA (metadata interleaved with the data) rather than a separate buffer.
    pub extended: bool,
    /// Protection information type (0: none).
    pub pi_type: u8,
}

/// One namespace of the drive.
pub struct DriveNs {
    pub nsid: u32,
    pub blocks: u64,
    /// Logical block size in bytes (a power of two, at least 512).
    pub block_size: usize,
    /// What reads return: the volatile cache over the media.
    pub data: Vec<u8>,
    /// NGUID and EUI-64 (all zero: not reported).
    pub nguid: [u8; 16],
    pub eui64: [u8; 8],
    /// Identify Namespace NSFEAT, DLFEAT (bits 2:0 = 001b: deallocated blocks read as
    /// zeroes), NOIOB and NPWG.
    pub nsfeat: u8,
    pub dlfeat: u8,
    pub noiob: u16,
    pub npwg: u16,
    /// LBA format 1 with metadata, in use (None: format 0, no metadata).
    pub format: Option<MetaFormat>,
    /// Block → the media's contents before the first unflushed cached write to it.
    unflushed: BTreeMap<u64, Vec<u8>>,
}

/// What a deallocated block reads as when DLFEAT does not promise zeroes (NVM Command Set:
/// the value is then unspecified; the model picks a marker so tests see the deallocation).
pub const DEALLOCATED_MARK: u8 = 0xDD;

impl DriveNs {
    /// A namespace of `blocks` zeroed 512-byte blocks.
    pub fn new(nsid: u32, blocks: u64) -> Self {
        Self::with_block_size(nsid, blocks, 512)
    }
    pub fn with_block_size(nsid: u32, blocks: u64, block_size: usize) -> Self {
        assert!(block_size.is_power_of_two() && block_size >= 512);
        DriveNs {
            nsid,
            blocks,
            block_size,
            data: vec![0; blocks as usize * block_size],
            nguid: [0; 16],
            eui64: [0; 8],
            nsfeat: 0,
            dlfeat: 0,
            noiob: 0,
            npwg: 0,
            format: None,
            unflushed: BTreeMap::new(),
        }
    }

    /// Bytes of `blocks` blocks from `lba` (caller checked the range).
    fn span(&self, lba: u64, blocks: u64) -> std::ops::Range<usize> {
        lba as usize * self.block_size..(lba + blocks) as usize * self.block_size
    }

    /// Whether `blocks` blocks from `lba` lie inside the namespace.
    pub fn in_range(&self, lba: u64, blocks: u64) -> bool {
        lba.checked_add(blocks).is_some_and(|end| end <= self.blocks)
    }

    /// Store `bytes` (whole blocks) at `lba`; `cached`: into the volatile cache only.
    pub fn store(&mut self, lba: u64, bytes: &[u8], cached: bool) {
        let blocks = (bytes.len() / self.block_size) as u64;
        self.note_writes(lba, blocks, cached);
        let r = self.span(lba, blocks);
        self.data[r].copy_from_slice(bytes);
    }

    /// Fill `blocks` blocks from `lba` with `byte` (Write Zeroes, deallocation).
    pub fn fill(&mut self, lba: u64, blocks: u64, byte: u8, cached: bool) {
        self.note_writes(lba, blocks, cached);
        let r = self.span(lba, blocks);
        self.data[r].fill(byte);
    }

    /// The current contents of `blocks` blocks from `lba`.
    pub fn read(&self, lba: u64, blocks: u64) -> &[u8] {
        &self.data[self.span(lba, blocks)]
    }

    fn note_writes(&mut self, lba: u64, blocks: u64, cached: bool) {
        for b in lba..lba + blocks {
            if cached {
                if !self.unflushed.contains_key(&b) {
                    let old = self.data[self.span(b, 1)].to_vec();
                    self.unflushed.insert(b, old);
                }
            } else {
                // Written through to the media: durable now, nothing to undo.
                self.unflushed.remove(&b);
            }
        }
    }

    /// Flush: everything cached is on the media.
    pub fn flush(&mut self) {
        self.unflushed.clear();
    }

    /// Blocks written into the cache and not flushed yet.
    pub fn unflushed_blocks(&self) -> usize {
        self.unflushed.len()
    }

    /// Power loss: the cache's contents are gone; reads return the media again.
    pub fn lose_cache(&mut self) {
        let undo = std::mem::take(&mut self.unflushed);
        for (b, old) in undo {
            let r = self.span(b, 1);
            self.data[r].copy_from_slice(&old);
        }
    }
}
