//! What the initiator accepts from a target: every value a target reports (CAP, Identify,
//! the active namespace list, the discovery log, response capsules) is checked here before
//! the host sizes buffers or completes a command with it; a bad value becomes a
//! [`TargetFault`] carrying it, and the host fails that connection instead of wrapping,
//! panicking or completing the wrong command.
//!
//! Rules: NVMe Base 2.0 (CAP.MQES/MPSMIN, MDTS in units of CAP.MPSMIN, Identify Namespace
//! FLBAS/NLBAF/LBADS, NSIDs), NVMe-oF 1.1 (IOCCSZ ≥ 4 and IORCSZ ≥ 1 for I/O controllers,
//! discovery log header and entry fields, TRTYPE/ADRFAM/SUBTYPE values), as Linux
//! drivers/nvme/host reads them; command IDs carry a generation above the slot number, as
//! Linux's `nvme_cid` does, so a late or repeated response cannot complete a newer command.

use alloc::string::String;

use nvme_spec::props::Cap;

use super::{DiscEntry, NsInfo};
use crate::wire::{get_str, DiscLogEntry, DiscLogHdr, IdentifyNs};

/// A value from the target the initiator refuses; the connection is failed with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetFault {
    /// CAP.MPSMIN above 4 KiB: the host's CC.MPS (4 KiB pages) would be invalid.
    MpsMin(u8),
    /// MDTS (a power of two in CAP.MPSMIN pages) makes the transfer size overflow 64 bits.
    Mdts { mdts: u8, mpsmin: u8 },
    /// CAP.MQES 0: a queue of one entry is invalid.
    Mqes(u16),
    /// IOCCSZ below 4 (the 64-byte SQE) on an I/O controller.
    Ioccsz(u32),
    /// IORCSZ below 1 (the 16-byte CQE) on an I/O controller.
    Iorcsz(u32),
    /// A controller ID from Connect in the reserved range (FFF0h..FFFFh).
    Cntlid(u16),
    /// The active namespace list is not strictly ascending, or names a reserved NSID.
    NsList(u32),
    /// FLBAS selects an LBA format beyond NLBAF.
    LbaFormat { nsid: u32, index: u8, nlbaf: u8 },
    /// LBA data size 2^LBADS outside 512 B..64 KiB.
    LbaSize { nsid: u32, lbads: u8 },
    /// NSZE × LBA size overflows 64 bits.
    Capacity { nsid: u32, nsze: u64, lbads: u8 },
    /// Discovery log header with more records than the host reads.
    DiscNumrec(u64),
    /// Discovery log header with an unknown record format.
    DiscRecfmt(u16),
    /// The discovery log kept changing (GENCTR, NUMREC) while it was read.
    DiscChanged { genctr: u64, numrec: u64 },
    /// A discovery log entry (index) with a field out of range or unreadable.
    DiscRecord { index: u16, field: DiscField },
    /// A response capsule shorter than a CQE (bytes received).
    ShortResponse(u32),
    /// A response whose command ID names no outstanding command on this queue (late,
    /// duplicate, or garbage).
    Cid { qid: u16, cid: u16 },
    /// SQ Head Pointer beyond this queue's submission queue.
    SqHead { qid: u16, sqhd: u16 },
    /// A Keep Alive left unanswered for a whole KATO (ms): the controller is gone or hung
    /// (NVMe Base 2.0, Keep Alive: the host treats it as a lost association).
    KeepAlive { kato_ms: u32 },
}

/// The discovery log entry field a [`TargetFault::DiscRecord`] refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiscField {
    Trtype(u8),
    Adrfam(u8),
    Subtype(u8),
    /// Not a decimal port number 1..65535 (RDMA, TCP) or not printable ASCII.
    Trsvcid,
    /// Not an NQN ("nqn." UTF-8, NUL-terminated within the field).
    Subnqn,
    /// Empty, not printable ASCII, or not an address of the entry's ADRFAM.
    Traddr,
}

/// Deepest queue the host builds: leaves at least 6 bits of command-ID generation.
pub const MAX_QUEUE_DEPTH: u16 = 1024;
/// Largest command capsule the host allocates (64-byte SQE + 16 KiB in-capsule data),
/// whatever IOCCSZ allows.
pub const MAX_CAPSULE: usize = 64 + 16 * 1024;
/// Most discovery log records the host reads.
pub const MAX_DISC_RECORDS: u64 = 1024;

/// Controller IDs FFF0h..FFFFh are reserved (FFFFh: dynamic at Connect).
const CNTLID_RESERVED: u16 = 0xFFF0;

/// TRTYPE values (NVMe-oF 1.1 Figure 38): RDMA, Fibre Channel, TCP, intra-host.
const TRTYPES: [u8; 4] = [1, 2, 3, 254];
/// ADRFAM values: IPv4, IPv6, InfiniBand, Fibre Channel, intra-host.
const ADRFAMS: [u8; 5] = [1, 2, 3, 4, 254];
/// SUBTYPE values: referral, NVM subsystem, current discovery subsystem.
const SUBTYPES: [u8; 3] = [1, 2, 3];
const TRTYPE_RDMA: u8 = 1;
const TRTYPE_TCP: u8 = 3;
const ADRFAM_IPV4: u8 = 1;
const ADRFAM_IPV6: u8 = 2;

/// Bytes one command may move (u64::MAX: no limit), from MDTS and CAP.MPSMIN.
pub fn transfer_limit(cap: Cap, mdts: u8) -> Result<u64, TargetFault> {
    let mpsmin = cap.mpsmin();
    if mpsmin != 0 {
        return Err(TargetFault::MpsMin(mpsmin));
    }
    if mdts == 0 {
        return Ok(u64::MAX);
    }
    let shift = 12 + mpsmin as u32 + mdts as u32;
    if shift >= 64 {
        return Err(TargetFault::Mdts { mdts, mpsmin });
    }
    Ok(1u64 << shift)
}

/// Entries an I/O queue may have, from CAP.MQES (0's based).
pub fn queue_entries(cap: Cap) -> Result<u32, TargetFault> {
    match cap.mqes() {
        0 => Err(TargetFault::Mqes(0)),
        m => Ok(m as u32 + 1),
    }
}

/// The queue depth the host uses: what it asked for, within MQES, MAXCMD and
/// [`MAX_QUEUE_DEPTH`], at least 2.
pub fn io_depth(want: u16, mqes_entries: u32, maxcmd: u16) -> u16 {
    let d = (want as u32).min(mqes_entries).min(maxcmd.max(2) as u32).min(MAX_QUEUE_DEPTH as u32).max(2);
    d as u16
}

/// The command capsule size for I/O queues from IOCCSZ/IORCSZ (16-byte units).
pub fn capsule_size(ioccsz: u32, iorcsz: u32) -> Result<usize, TargetFault> {
    if ioccsz < 4 {
        return Err(TargetFault::Ioccsz(ioccsz));
    }
    if iorcsz < 1 {
        return Err(TargetFault::Iorcsz(iorcsz));
    }
    Ok((ioccsz as u64 * 16).min(MAX_CAPSULE as u64) as usize)
}

/// A controller ID returned by Connect.
pub fn cntlid(id: u16) -> Result<u16, TargetFault> {
    if id >= CNTLID_RESERVED {
        return Err(TargetFault::Cntlid(id));
    }
    Ok(id)
}

/// NSIDs of an Active Namespace ID list page: ascending, nonzero up to the first 0, none
/// the broadcast value.
pub fn ns_list(page: &[u8], mut out: impl FnMut(u32)) -> Result<(), TargetFault> {
    let mut last = 0u32;
    for c in page.chunks_exact(4) {
        let id = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        if id == 0 {
            break;
        }
        if id <= last || id == u32::MAX {
            return Err(TargetFault::NsList(id));
        }
        last = id;
        out(id);
    }
    Ok(())
}

/// A namespace from Identify Namespace.
pub fn namespace(nsid: u32, ns: &IdentifyNs) -> Result<NsInfo, TargetFault> {
    let index = ns.lba_format_index();
    if index > ns.nlbaf as usize {
        return Err(TargetFault::LbaFormat { nsid, index: index as u8, nlbaf: ns.nlbaf });
    }
    let lbads = ns.lba_format().lbads;
    if !(9..=16).contains(&lbads) {
        return Err(TargetFault::LbaSize { nsid, lbads });
    }
    let nsze = ns.nsze.get();
    if nsze.checked_mul(1u64 << lbads).is_none() {
        return Err(TargetFault::Capacity { nsid, nsze, lbads });
    }
    Ok(NsInfo { nsid, blocks: nsze, block_size: 1 << lbads })
}

/// Records to read from a discovery log header.
pub fn disc_header(h: &DiscLogHdr) -> Result<u64, TargetFault> {
    if h.recfmt.get() != 0 {
        return Err(TargetFault::DiscRecfmt(h.recfmt.get()));
    }
    let numrec = h.numrec.get();
    if numrec > MAX_DISC_RECORDS {
        return Err(TargetFault::DiscNumrec(numrec));
    }
    Ok(numrec)
}

/// One discovery log entry, decoded and checked.
pub fn disc_entry(index: u16, e: &DiscLogEntry) -> Result<DiscEntry, TargetFault> {
    let bad = |field| TargetFault::DiscRecord { index, field };
    if !TRTYPES.contains(&e.trtype) {
        return Err(bad(DiscField::Trtype(e.trtype)));
    }
    if !ADRFAMS.contains(&e.adrfam) {
        return Err(bad(DiscField::Adrfam(e.adrfam)));
    }
    if !SUBTYPES.contains(&e.subtype) {
        return Err(bad(DiscField::Subtype(e.subtype)));
    }
    let trsvcid = ascii_field(&e.trsvcid).ok_or(bad(DiscField::Trsvcid))?;
    if matches!(e.trtype, TRTYPE_RDMA | TRTYPE_TCP) && !matches!(trsvcid.parse::<u16>(), Ok(1..)) {
        return Err(bad(DiscField::Trsvcid));
    }
    let traddr = ascii_field(&e.traddr).filter(|s| !s.is_empty()).ok_or(bad(DiscField::Traddr))?;
    let addr_ok = match e.adrfam {
        ADRFAM_IPV4 => is_ipv4(traddr),
        ADRFAM_IPV6 => traddr.bytes().all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.' || b == b'%'),
        _ => true,
    };
    if !addr_ok {
        return Err(bad(DiscField::Traddr));
    }
    let subnqn = nqn_field(&e.subnqn).ok_or(bad(DiscField::Subnqn))?;
    Ok(DiscEntry {
        trtype: e.trtype,
        adrfam: e.adrfam,
        subtype: e.subtype,
        portid: e.portid.get(),
        trsvcid: String::from(trsvcid),
        subnqn: String::from(subnqn),
        traddr: String::from(traddr),
    })
}

/// A space- or NUL-padded printable ASCII field, without its padding.
fn ascii_field(b: &[u8]) -> Option<&str> {
    let s = get_str(b)?.trim_end_matches(' ');
    s.bytes().all(|c| (0x20..0x7F).contains(&c)).then_some(s)
}

/// An NQN field: UTF-8, NUL-terminated inside the field, "nqn." first.
fn nqn_field(b: &[u8]) -> Option<&str> {
    if !b.contains(&0) {
        return None;
    }
    let s = get_str(b)?;
    (s.starts_with("nqn.") && !s.chars().any(char::is_control)).then_some(s)
}

/// Dotted-quad IPv4 text.
fn is_ipv4(s: &str) -> bool {
    let mut n = 0;
    for part in s.split('.') {
        n += 1;
        if part.is_empty() || part.len() > 3 || !part.bytes().all(|b| b.is_ascii_digit()) || part.parse::<u16>().map_or(true, |v| v > 255) {
            return false;
        }
    }
    n == 4
}

/// Command IDs: the slot number in the low bits, a per-slot generation above it, so a
/// response for a command that already finished never matches the command now in its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CidCodec {
    slot_bits: u32,
}

impl CidCodec {
    /// For a queue of `depth` (≤ [`MAX_QUEUE_DEPTH`]) slots.
    pub fn new(depth: u16) -> Self {
        let slot_bits = u16::BITS - depth.saturating_sub(1).leading_zeros();
        CidCodec { slot_bits }
    }
    /// The command ID for `slot` at generation `gen` (wraps within the bits left).
    pub fn encode(self, slot: u16, gen: u16) -> u16 {
        (gen.checked_shl(self.slot_bits).unwrap_or(0)) | slot
    }
    /// The slot a command ID names (the caller checks it is outstanding).
    pub fn slot(self, cid: u16) -> u16 {
        cid & (((1u32 << self.slot_bits) - 1) as u16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::FromZeros;

    #[test]
    fn mdts_in_mpsmin_pages_and_overflow_refused() {
        let cap = Cap::new();
        assert_eq!(transfer_limit(cap, 0), Ok(u64::MAX));
        assert_eq!(transfer_limit(cap, 5), Ok(128 * 1024));
        assert_eq!(transfer_limit(cap, 51), Ok(1 << 63));
        assert_eq!(transfer_limit(cap, 52), Err(TargetFault::Mdts { mdts: 52, mpsmin: 0 }));
        assert_eq!(transfer_limit(cap, 255), Err(TargetFault::Mdts { mdts: 255, mpsmin: 0 }));
        assert_eq!(transfer_limit(cap.with_mpsmin(1), 1), Err(TargetFault::MpsMin(1)));
    }

    #[test]
    fn mqes_zero_refused_and_ffff_does_not_wrap() {
        assert_eq!(queue_entries(Cap::new()), Err(TargetFault::Mqes(0)));
        assert_eq!(queue_entries(Cap::new().with_mqes(0xFFFF)), Ok(65536));
        assert_eq!(io_depth(32, 65536, 0), 2);
        assert_eq!(io_depth(32, 65536, 0xFFFF), 32);
        assert_eq!(io_depth(u16::MAX, 65536, 0xFFFF), MAX_QUEUE_DEPTH);
        assert_eq!(io_depth(32, 2, 64), 2);
    }

    #[test]
    fn capsule_minimums_and_cap() {
        assert_eq!(capsule_size(3, 1), Err(TargetFault::Ioccsz(3)));
        assert_eq!(capsule_size(4, 0), Err(TargetFault::Iorcsz(0)));
        assert_eq!(capsule_size(4, 1), Ok(64));
        assert_eq!(capsule_size(260, 1), Ok(4160));
        assert_eq!(capsule_size(u32::MAX, 1), Ok(MAX_CAPSULE));
    }

    #[test]
    fn namespace_format_size_and_capacity() {
        let mut ns = IdentifyNs::new_zeroed();
        ns.nlbaf = 1;
        ns.lbaf[1].lbads = 12;
        ns.flbas = 1;
        ns.nsze.set(1 << 20);
        assert_eq!(namespace(1, &ns), Ok(NsInfo { nsid: 1, blocks: 1 << 20, block_size: 4096 }));
        ns.nsze.set(u64::MAX);
        assert_eq!(namespace(1, &ns), Err(TargetFault::Capacity { nsid: 1, nsze: u64::MAX, lbads: 12 }));
        ns.nsze.set(1);
        ns.flbas = 2;
        assert_eq!(namespace(1, &ns), Err(TargetFault::LbaFormat { nsid: 1, index: 2, nlbaf: 1 }));
        ns.flbas = 0;
        ns.lbaf[0].lbads = 40;
        assert_eq!(namespace(1, &ns), Err(TargetFault::LbaSize { nsid: 1, lbads: 40 }));
    }

    #[test]
    fn ns_list_ascending_only() {
        let page = |ids: &[u32]| ids.iter().flat_map(|i| i.to_le_bytes()).chain([0; 8]).collect::<alloc::vec::Vec<u8>>();
        let mut got = alloc::vec::Vec::new();
        assert_eq!(ns_list(&page(&[1, 2, 7]), |i| got.push(i)), Ok(()));
        assert_eq!(got, [1, 2, 7]);
        assert_eq!(ns_list(&page(&[1, 1]), |_| ()), Err(TargetFault::NsList(1)));
        assert_eq!(ns_list(&page(&[5, 2]), |_| ()), Err(TargetFault::NsList(2)));
        assert_eq!(ns_list(&page(&[u32::MAX]), |_| ()), Err(TargetFault::NsList(u32::MAX)));
    }

    fn entry() -> DiscLogEntry {
        let mut e = DiscLogEntry::new_zeroed();
        e.trtype = 1;
        e.adrfam = 1;
        e.subtype = 2;
        e.trsvcid[..4].copy_from_slice(b"4420");
        e.trsvcid[4..].fill(b' ');
        e.traddr[..8].copy_from_slice(b"10.0.0.1");
        e.subnqn[..12].copy_from_slice(b"nqn.2026-01:");
        e
    }

    #[test]
    fn discovery_entry_fields() {
        let d = disc_entry(0, &entry()).expect("good entry");
        assert_eq!((d.trsvcid.as_str(), d.traddr.as_str(), d.subnqn.as_str()), ("4420", "10.0.0.1", "nqn.2026-01:"));
        let bad = |f: &dyn Fn(&mut DiscLogEntry)| {
            let mut e = entry();
            f(&mut e);
            match disc_entry(3, &e) {
                Err(TargetFault::DiscRecord { index: 3, field }) => field,
                other => panic!("expected a DiscRecord fault, got {other:?}"),
            }
        };
        assert_eq!(bad(&|e| e.trtype = 0), DiscField::Trtype(0));
        assert_eq!(bad(&|e| e.adrfam = 9), DiscField::Adrfam(9));
        assert_eq!(bad(&|e| e.subtype = 0), DiscField::Subtype(0));
        assert_eq!(bad(&|e| e.trsvcid[..4].copy_from_slice(b"44a0")), DiscField::Trsvcid);
        assert_eq!(bad(&|e| e.trsvcid[..4].copy_from_slice(b"0000")), DiscField::Trsvcid);
        assert_eq!(bad(&|e| e.traddr[..8].copy_from_slice(b"10.0.0.x")), DiscField::Traddr);
        assert_eq!(bad(&|e| e.traddr[..9].copy_from_slice(b"300.0.0.1")), DiscField::Traddr);
        assert_eq!(bad(&|e| e.traddr.fill(0)), DiscField::Traddr);
        assert_eq!(bad(&|e| e.traddr[0] = 0xFF), DiscField::Traddr);
        assert_eq!(bad(&|e| e.subnqn.fill(b'n')), DiscField::Subnqn);
        assert_eq!(bad(&|e| e.subnqn[..4].copy_from_slice(b"xqn.")), DiscField::Subnqn);
    }

    #[test]
    fn cid_generation_above_slot() {
        let c = CidCodec::new(32);
        assert_eq!(c.encode(5, 0), 5);
        assert_eq!(c.encode(5, 1), 32 | 5);
        assert_eq!(c.slot(c.encode(31, 0x7FF)), 31);
        assert_ne!(c.encode(3, 1), c.encode(3, 2));
        let one = CidCodec::new(1);
        assert_eq!(one.slot(one.encode(0, 9)), 0);
        let max = CidCodec::new(MAX_QUEUE_DEPTH);
        assert_eq!(max.encode(1023, 63), 0xFFFF);
        assert_eq!(max.slot(0xFFFF), 1023);
    }
}
