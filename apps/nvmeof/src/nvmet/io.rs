//! I/O commands: Read, Write (zero copy where the namespace's memory allows), Compare (the
//! host's data fetched into the slot buffer, compared by the store), Flush, Write Zeroes,
//! Dataset Management; checks (namespace in service, LBA range, transfer size) before
//! anything reaches the store. Facts: NVM Command Set 1.0 §3 (I/O commands).
//!
//! The decode, checks and submission of one command on one namespace are [`exec_ns`], over
//! the namespace's store given as any [`BlockDevice`] (the core's store, or a poll group's
//! own I/O handle on the same blocks, `group_io`), with what it needs beyond the store in
//! [`NsAt`].

use blockdev::BlockDevice;
use zerocopy::FromBytes;

use super::*;
use crate::wire::*;

/// The I/O command set's opcodes the target executes (any other on an I/O queue: Invalid
/// Opcode, before the namespace is looked at).
#[inline(always)]
pub(super) fn is_io_opcode(opcode: u8) -> bool {
    matches!(opcode, io_op::READ | io_op::WRITE | io_op::COMPARE | io_op::FLUSH | io_op::WRITE_ZEROES | io_op::DSM)
}

/// Why command `opcode` on I/O queue `q` is refused before its namespace is looked at, in the
/// order they are checked: not authenticated (Authentication Required), no controller yet or
/// its controller no longer enabled (Command Sequence Error), not an I/O command set opcode
/// (Invalid Opcode); `None`: it goes on to its namespace. The rules of every executor of an
/// I/O queue's commands (the core's [`Core::execute_counted`] and a poll group's
/// [`GroupIo::execute`]).
#[inline(always)]
pub(super) fn io_queue_refusal(q: &QueueState, opcode: u8) -> Option<Status> {
    if q.auth != auth::Gate::Open {
        Some(Status::AUTH_REQUIRED)
    } else if q.cntlid.is_none() || !q.enabled {
        Some(Status::CMD_SEQ_ERROR)
    } else if !is_io_opcode(opcode) {
        Some(Status::INVALID_OPCODE)
    } else {
        None
    }
}

/// What [`exec_ns`] needs of a namespace beyond its store: its place in the core's tables
/// (named again by a [`PendingWrite`]), its subsystem's MDTS in bytes, and whether its
/// direct memory may be used (the transport registered it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct NsAt {
    pub(super) subsys: u16,
    pub(super) ns: u16,
    pub(super) max_io_bytes: u32,
    pub(super) direct: bool,
}

/// Execute I/O command `sqe` (an [`is_io_opcode`] opcode, its namespace found and in service)
/// on the namespace `at` whose store is `dev`, timed by `lat` ([`devlat`]) when it has one,
/// counted in `q`'s counters and the namespace's `st`; `inflight` counts the block I/Os
/// submitted to `dev` (the poller of `dev` takes them back). Inlined into its caller (as the
/// core's `exec_io` body it was before: a call cost ~14 instructions per I/O).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) fn exec_ns<D: BlockDevice>(at: NsAt, dev: &mut D, lat: Option<&mut devlat::DevLatency>, q: &mut QueueState, sqe: &Sqe, data: &DataIn<'_>, st: &mut NsStats, inflight: &mut u64) -> Action {
    let (bs, cap) = (dev.block_size() as u64, dev.num_blocks());
    let slba = sqe.cdw10.get() as u64 | ((sqe.cdw11.get() as u64) << 32);
    let nlb = (sqe.cdw12.get() & 0xFFFF) + 1;
    let range_ok = slba.checked_add(nlb as u64).is_some_and(|e| e <= cap);
    let (op, blocks, buf) = match sqe.opcode {
        io_op::READ | io_op::WRITE | io_op::COMPARE => {
            let bytes = nlb as u64 * bs;
            if bytes != data.sgl_len as u64 {
                return Action::status(Status::SGL_INVALID_DATA);
            }
            // Over MDTS (Identify Controller): Invalid Field, before any data moves.
            if bytes > at.max_io_bytes as u64 || bytes > data.buf.len() as u64 {
                return Action::status(Status::INVALID_FIELD);
            }
            if !range_ok {
                return Action::status(Status::LBA_RANGE);
            }
            // Counted in the queue's own counters (folded into the controller on the
            // slow path: `Core::fold_queue`).
            let op = if sqe.opcode == io_op::COMPARE {
                BlockOp::Compare
            } else if sqe.opcode == io_op::READ {
                q.io.host_reads += 1;
                q.io.blocks_read_512 += bytes / 512;
                BlockOp::Read
            } else {
                q.io.host_writes += 1;
                q.io.blocks_written_512 += bytes / 512;
                BlockOp::Write
            };
            // The command's data: the first `bytes` of the transport's buffer.
            (op, nlb, data.buf.prefix(bytes as usize))
        }
        io_op::FLUSH => {
            st.flushes_forwarded += 1;
            (BlockOp::Flush, 0, DmaSlice::EMPTY)
        }
        io_op::WRITE_ZEROES => {
            if !range_ok {
                return Action::status(Status::LBA_RANGE);
            }
            (BlockOp::WriteZeroes, nlb, DmaSlice::EMPTY)
        }
        io_op::DSM => return dsm(dev, lat, sqe, data, cap, inflight),
        _ => return Action::status(Status::INVALID_OPCODE),
    };
    let fua = matches!(op, BlockOp::Read | BlockOp::Write) && sqe.cdw12.get() & rw_cdw12::FUA != 0;
    // The executor's counts only (its subsystem's and the core's figures are their sums,
    // made on the slow path).
    if fua {
        if op == BlockOp::Read {
            st.fua_reads += 1;
        } else {
            st.fua_writes += 1;
        }
    }
    let buf_len = buf.len();
    if op == BlockOp::Read {
        st.reads += 1;
        st.bytes_read += buf_len as u64;
    } else if op == BlockOp::Write {
        st.writes += 1;
        st.bytes_written += buf_len as u64;
    }
    // Zero copy: a Read from (a keyed-SGL Write into) memory the transport can RDMA from
    // (into) directly names that memory as its buffer (the device moves nothing). Data
    // already here (in-capsule) is copied by the device.
    let zero_copy = op == BlockOp::Read || (op == BlockOp::Write && !data.fetched);
    let direct = if zero_copy && at.direct { dev.direct(slba, blocks) } else { None };
    let io = BlockIo { op, lba: if op == BlockOp::Flush { 0 } else { slba }, blocks, buf: direct.unwrap_or(buf), tag: data.tag, fua };
    if op == BlockOp::Write && !data.fetched {
        return Action::Fetch(Fetch::Write(PendingWrite { subsys: at.subsys, ns: at.ns, io, direct: direct.is_some() }));
    } else if op == BlockOp::Compare && !data.fetched {
        // The host's data into the slot buffer, then to the store (never direct).
        return Action::Fetch(Fetch::Write(PendingWrite { subsys: at.subsys, ns: at.ns, io, direct: false }));
    }
    // A Read the store serves from its own memory at once (RAM) is done now: no block
    // completion to wait for. Not while the namespace's store is timed (`devlat` times a
    // submit to its completion).
    if let (Some(buf), BlockOp::Read, None) = (direct, op, &lat) {
        if let Some(r) = dev.execute_direct(&io) {
            return match r {
                Ok(()) => Action::ReadyDirect { buf },
                Err(e) => Action::status(blk_status(e)),
            };
        }
    }
    match devlat::submit(dev, lat, &io) {
        Ok(()) => {
            *inflight += 1;
            // Test-only mutation (emu/sim's demo, feature `sim-mutation`): acknowledge a
            // write as soon as it is handed to the device, before its data is placed.
            #[cfg(feature = "sim-mutation")]
            if op == BlockOp::Write {
                return Action::ok(0, 0);
            }
            match direct {
                Some(buf) => Action::SubmittedDirect { buf },
                None => Action::Submitted { count: 1 },
            }
        }
        Err(e) => Action::status(blk_status(e)),
    }
}

/// Submit the Write `w` whose data the transport moved in ([`Fetch::Write`]) to `dev`, the
/// store of the namespace `w` names: into namespace memory (`w`'s direct buffer; the device
/// moves nothing) or into `buf` (at least [`PendingWrite::len`] bytes). Answers
/// [`Action::Submitted`] (counted in `inflight`) or an error status.
pub(super) fn submit_fetched<D: BlockDevice>(dev: &mut D, lat: Option<&mut devlat::DevLatency>, w: &PendingWrite, buf: DmaSlice, tag: u64, inflight: &mut u64) -> Action {
    // A buffer shorter than the write is refused by the store (BufferTooSmall).
    let io = BlockIo { buf: if w.direct { w.io.buf } else { buf.prefix(w.len()) }, tag, ..w.io };
    match devlat::submit(dev, lat, &io) {
        Ok(()) => {
            *inflight += 1;
            Action::Submitted { count: 1 }
        }
        Err(e) => Action::status(blk_status(e)),
    }
}

/// The namespace memory command `sqe` would change on the store `dev` (its namespace found,
/// on an enabled I/O queue, with zero-copy transfers on), as (direct address, bytes): Write and
/// Write Zeroes name their blocks, a Dataset Management Deallocate the blocks from the lowest
/// to the highest its ranges (`dsm`, as the host sent them) touch: one span, so the command
/// claims one range however many it names, exact for a DSM of one range, the whole namespace
/// at worst. `None` when the command changes no direct memory (another opcode, DSM hints only)
/// or is invalid (execution refuses it before anything reaches the store). A transport holds
/// such a command while a zero-copy transfer of overlapping memory is under way and claims
/// the memory until it is answered ([`GroupIo::modifies_direct`] asks it of the store the
/// command will run on).
pub(super) fn modified_direct<D: BlockDevice>(dev: &D, sqe: &Sqe, dsm: &[u8]) -> Option<(PhysAddr, u64)> {
    let buf = match sqe.opcode {
        io_op::DSM => {
            let (mut lo, mut hi) = (u64::MAX, 0u64);
            for r in dsm_ranges(sqe, dsm.len(), dsm).ok()??.filter(|r| r.nlb.get() > 0) {
                lo = lo.min(r.slba.get());
                hi = hi.max(r.slba.get().checked_add(r.nlb.get() as u64)?);
            }
            // A span beyond a command's block count: the whole namespace (DSM is rare).
            match u32::try_from(hi.checked_sub(lo)?) {
                Ok(blocks) => dev.direct(lo, blocks)?,
                Err(_) => dev.direct_region()?,
            }
        }
        io_op::WRITE | io_op::WRITE_ZEROES => {
            let slba = sqe.cdw10.get() as u64 | ((sqe.cdw11.get() as u64) << 32);
            let nlb = (sqe.cdw12.get() & 0xFFFF) + 1;
            dev.direct(slba, nlb)?
        }
        _ => return None,
    };
    Some((buf.paddr(), buf.len() as u64))
}

/// A Dataset Management command's ranges (`bytes`, as the host sent them, `sgl_len` by its
/// SGL): Sgl Invalid Data when fewer than its Number of Ranges, none when it asks no
/// Deallocate (only hints).
pub(super) fn dsm_ranges<'a>(sqe: &Sqe, sgl_len: usize, bytes: &'a [u8]) -> Result<Option<impl Iterator<Item = DsmRange> + Clone + 'a>, Status> {
    let need = ((sqe.cdw10.get() & 0xFF) as usize + 1) * DsmRange::SIZE;
    if sgl_len < need || bytes.len() < need {
        return Err(Status::SGL_INVALID_DATA);
    }
    if sqe.cdw11.get() & DSM_ATTR_DEALLOCATE == 0 {
        return Ok(None);
    }
    Ok(Some(bytes[..need].chunks_exact(DsmRange::SIZE).map(|r| DsmRange::read_from_bytes(r).expect("16 bytes"))))
}

/// Dataset Management on the namespace whose store is `dev` (`cap` blocks): its ranges
/// checked all or nothing, then a Deallocate per non-empty range (counted in `inflight`).
fn dsm<D: BlockDevice>(dev: &mut D, mut lat: Option<&mut devlat::DevLatency>, sqe: &Sqe, data: &DataIn<'_>, cap: u64, inflight: &mut u64) -> Action {
    let ranges = match dsm_ranges(sqe, data.sgl_len as usize, data.bytes) {
        Err(st) => return Action::status(st),
        // Only hints: nothing to do.
        Ok(None) => return Action::ok(0, 0),
        Ok(Some(r)) => r,
    };
    // Every range within the store's Deallocate limit (Identify CNS 06h DMRSL says so to
    // the host), checked before any range reaches the store: all or nothing.
    let limit = dev.op_limits().deallocate_blocks;
    for r in ranges.clone() {
        if !r.slba.get().checked_add(r.nlb.get() as u64).is_some_and(|e| e <= cap) {
            return Action::status(Status::LBA_RANGE);
        }
        if r.nlb.get() > limit {
            return Action::status(Status::INVALID_FIELD);
        }
    }
    let mut count = 0u16;
    for r in ranges {
        if r.nlb.get() == 0 {
            continue;
        }
        let io = BlockIo { op: BlockOp::Deallocate, lba: r.slba.get(), blocks: r.nlb.get(), buf: DmaSlice::EMPTY, tag: data.tag, fua: false };
        match devlat::submit(dev, lat.as_deref_mut(), &io) {
            Ok(()) => {
                count += 1;
                *inflight += 1;
            }
            // Deallocate is advisory: a store that cannot do it simply keeps the data.
            Err(BlockError::Unsupported) => {}
            Err(e) if count == 0 => return Action::status(blk_status(e)),
            Err(_) => {}
        }
    }
    if count == 0 {
        Action::ok(0, 0)
    } else {
        Action::Submitted { count }
    }
}

impl<B: BlockDevice> Core<B> {
    /// I/O command `sqe` on I/O queue `q`, whose enabled controller is in subsystem `si` (an
    /// I/O queue joins no discovery controller: Connect refuses it), counted in `counts` (the
    /// executor's: the namespace's slot in it, not the core's shared tables), on the
    /// namespace's store ([`exec_ns`]).
    pub(super) fn exec_io(&mut self, q: &mut QueueState, sqe: &Sqe, data: &DataIn<'_>, si: usize, counts: &mut IoCounts) -> Action {
        if let Some(st) = io_queue_refusal(q, sqe.opcode) {
            return Action::status(st);
        }
        // Identify Controller says Flush with NSID FFFFFFFFh is not supported (VWC bits
        // 2:1 = 10b): such a command is aborted with Invalid Namespace (Base spec, Flush).
        let Some(ni) = self.subsystems[si].ns(sqe.nsid.get()) else {
            return Action::status(Status::INVALID_NS);
        };
        self.exec_io_ns(q, sqe, data, si, ni, counts)
    }

    /// I/O command `sqe` on namespace `ni` of subsystem `si` (found by the caller) on the
    /// core's store: out of service, or decoded, checked and submitted ([`exec_ns`]).
    #[inline(always)]
    pub(super) fn exec_io_ns(&mut self, q: &mut QueueState, sqe: &Sqe, data: &DataIn<'_>, si: usize, ni: usize, counts: &mut IoCounts) -> Action {
        let sub = &mut self.subsystems[si];
        if sub.ns_stats[ni].failed {
            return Action::status(Status::INVALID_NS);
        }
        let at = NsAt { subsys: si as u16, ns: ni as u16, max_io_bytes: sub.max_io_bytes, direct: self.direct };
        let st = &mut counts.ns[sub.ns_base + ni];
        exec_ns(at, &mut sub.cfg.namespaces[ni].dev, sub.ns_lat[ni].as_mut(), q, sqe, data, st, &mut self.inflight)
    }

    /// Submit a Write whose data the transport moved in ([`Fetch::Write`]): into namespace
    /// memory (`direct_buf`; the device moves nothing) or into `buf` (at least
    /// [`PendingWrite::len`] bytes). Answers [`Action::Submitted`] or an error status
    /// (recorded by the caller's `record_error`).
    pub fn write_fetched(&mut self, w: &PendingWrite, buf: DmaSlice, tag: u64) -> Action {
        let Some(s) = self.subsystems.get_mut(w.subsys as usize) else {
            return Action::status(Status::INTERNAL);
        };
        let (Some(n), Some(lat)) = (s.cfg.namespaces.get_mut(w.ns as usize), s.ns_lat.get_mut(w.ns as usize)) else {
            return Action::status(Status::INTERNAL);
        };
        submit_fetched(&mut n.dev, lat.as_mut(), w, buf, tag, &mut self.inflight)
    }
}
