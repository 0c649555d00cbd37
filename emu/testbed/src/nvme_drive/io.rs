//! nvme_drive io: the NVM command set I/O commands the drive executes (NVM Command Set 1.0
//! §3): Read, Write, Flush, Write Zeroes, Dataset Management, Compare, through the volatile
//! write cache of [`super::media`], with MDTS and the Identify CNS 06h limits enforced.

use nvme_spec::{io_op, oncs, rw_cdw12, DsmRange, Sqe, Status};

const OP_COMPARE: u8 = io_op::COMPARE;
use zerocopy::FromBytes;

use crate::locked;

use super::{IoRecord, NvmeDrive, DEALLOCATED_MARK};

/// DSM CDW11 bit 2: Attribute – Deallocate.
const DSM_AD: u32 = 1 << 2;

const LBA_OUT_OF_RANGE: Status = Status { sct: 0, sc: 0x80, dnr: true };
const COMPARE_FAILURE: Status = Status { sct: 2, sc: 0x85, dnr: true };

impl NvmeDrive {
    pub(super) fn io(&self, c: &Sqe) -> (u32, Status) {
        let mut s = locked(&self.st);
        s.io_commands += 1;
        if let Some((sct, sc)) = s.inject.take() {
            return (0, Status { sct, sc, dnr: s.inject_dnr });
        }
        s.io_log.push(IoRecord { opcode: c.opcode, mptr: c.mptr.get(), cdw12: c.cdw12.get(), cdw14: c.cdw14.get() });
        let nsid = c.nsid.get();
        if let Some((bad, st)) = s.failing {
            if bad == nsid {
                return (0, st);
            }
        }
        let Some(ns) = s.ns(nsid) else { return (0, Status::INVALID_NS) };
        let (bs, fmt) = (ns.block_size, ns.format);
        let slba = c.cdw10.get() as u64 | ((c.cdw11.get() as u64) << 32);
        let nlb = (c.cdw12.get() & 0xFFFF) as u64 + 1;
        let ranged = matches!(c.opcode, io_op::READ | io_op::WRITE | io_op::WRITE_ZEROES | OP_COMPARE);
        if ranged && !ns.in_range(slba, nlb) {
            return (0, LBA_OUT_OF_RANGE);
        }
        let bytes = nlb as usize * bs;
        let too_big = s.max_transfer().is_some_and(|m| bytes > m);
        let cached = s.caching() && c.cdw12.get() & rw_cdw12::FUA == 0;
        match c.opcode {
            io_op::FLUSH => {
                s.flushes += 1;
                for ns in &mut s.namespaces {
                    if nsid == u32::MAX || ns.nsid == nsid {
                        ns.flush();
                    }
                }
                (0, Status::SUCCESS)
            }
            io_op::READ | io_op::WRITE | OP_COMPARE if too_big => (0, Status::INVALID_FIELD),
            OP_COMPARE if s.oncs & oncs::COMPARE == 0 => (0, Status::INVALID_OPCODE),
            io_op::READ | io_op::WRITE | OP_COMPARE => {
                // Separate metadata (except 8-byte PI with PRACT): moved through MPTR.
                let sep_ms = fmt.filter(|f| !f.extended && !(f.ms == 8 && f.pi_type != 0)).map(|f| f.ms as usize);
                drop(s);
                if let Some(ms) = sep_ms {
                    let mut m = vec![0xEE; nlb as usize * ms];
                    if c.opcode == io_op::READ {
                        if self.mem.dma_write(c.mptr.get(), &m).is_err() {
                            return (0, Status::DATA_XFER_ERROR);
                        }
                    } else {
                        if self.mem.dma_read(c.mptr.get(), &mut m).is_err() {
                            return (0, Status::DATA_XFER_ERROR);
                        }
                        if c.opcode == io_op::WRITE {
                            locked(&self.st).meta_written.extend_from_slice(&m);
                        }
                    }
                }
                let mut buf = vec![0u8; bytes];
                if c.opcode == io_op::READ {
                    buf.copy_from_slice(locked(&self.st).ns(nsid).expect("looked up").read(slba, nlb));
                    return (0, self.transfer(c, &mut buf, true).err().unwrap_or(Status::SUCCESS));
                }
                if let Err(st) = self.transfer(c, &mut buf, false) {
                    return (0, st);
                }
                let mut s = locked(&self.st);
                let ns = s.ns_mut(nsid).expect("looked up");
                if c.opcode == io_op::WRITE {
                    ns.store(slba, &buf, cached);
                    (0, Status::SUCCESS)
                } else if ns.read(slba, nlb) == &buf[..] {
                    (0, Status::SUCCESS)
                } else {
                    (0, COMPARE_FAILURE)
                }
            }
            io_op::WRITE_ZEROES if s.oncs & oncs::WRITE_ZEROES == 0 => (0, Status::INVALID_OPCODE),
            io_op::WRITE_ZEROES if s.wzsl != 0 && bytes > 4096usize << s.wzsl.min(20) => (0, Status::INVALID_FIELD),
            io_op::WRITE_ZEROES => {
                s.ns_mut(nsid).expect("looked up").fill(slba, nlb, 0, cached);
                (0, Status::SUCCESS)
            }
            io_op::DSM if s.oncs & oncs::DSM == 0 => (0, Status::INVALID_OPCODE),
            io_op::DSM => {
                let nr = (c.cdw10.get() & 0xFF) as usize + 1;
                if s.dmrl != 0 && nr > s.dmrl as usize {
                    return (0, Status::INVALID_FIELD);
                }
                let (dmrsl, dmsl) = (s.dmrsl as u64, s.dmsl);
                let caching = s.caching();
                drop(s);
                let mut raw = vec![0u8; nr * 16];
                if let Err(st) = self.transfer(c, &mut raw, false) {
                    return (0, st);
                }
                let ranges: Vec<DsmRange> = raw.chunks_exact(16).map(|r| DsmRange::read_from_bytes(r).expect("16 bytes")).collect();
                let mut s = locked(&self.st);
                let ns = s.ns_mut(nsid).expect("looked up");
                let mut total = 0u64;
                for r in &ranges {
                    let (lba, n) = (r.slba.get(), r.nlb.get() as u64);
                    if !ns.in_range(lba, n) {
                        return (0, LBA_OUT_OF_RANGE);
                    }
                    if dmrsl != 0 && n > dmrsl {
                        return (0, Status::INVALID_FIELD);
                    }
                    total += n;
                }
                if dmsl != 0 && total > dmsl {
                    return (0, Status::INVALID_FIELD);
                }
                if c.cdw11.get() & DSM_AD != 0 {
                    let fill = if ns.dlfeat & 7 == 1 { 0 } else { DEALLOCATED_MARK };
                    for r in &ranges {
                        ns.fill(r.slba.get(), r.nlb.get() as u64, fill, caching);
                    }
                }
                (0, Status::SUCCESS)
            }
            _ => (0, Status::INVALID_OPCODE),
        }
    }
}
