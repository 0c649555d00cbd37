//! nvme_drive: the one emulated NVMe drive every host test and fuzz target drives the local
//! NVMe driver against (written for this project from the NVMe Base 2.0 and NVM Command Set
//! 1.0 specifications).
//!
//! The drive is an `hal::Mmio` BAR0 (CAP, VS, CC, CSTS, AQA, ASQ, ACQ, doorbells with
//! CAP.DSTRD spacing) whose SQ doorbell writes execute the queued commands at once (or, when
//! [`DriveState::deferred`], when the test calls [`NvmeDrive::run_pending`]) through the
//! shared simulated platform's physical memory ([`crate::PhysMem`], the memory `SimHal`
//! hands the driver its DMA regions from); a wild address is a DMA fault, reported as a
//! status, never a panic. It models:
//! - Identify Controller / Namespace / Active Namespace List / the NVM command set's
//!   controller limits (CNS 06h: WZSL, DMRL, DMRSL, DMSL), Set/Get Features (Number of
//!   Queues, Volatile Write Cache), Create/Delete I/O SQ/CQ;
//! - Read, Write (FUA), Flush, Write Zeroes, Dataset Management (deallocate), Compare, with
//!   PRP lists, separate metadata through MPTR, MDTS and the NVM limits enforced;
//! - a volatile write cache ([`DriveState::vwc`], WCE) that [`NvmeDrive::power_loss`] loses
//!   (unflushed blocks revert whole, see [`media`]);
//! - faults: an injected status on the next I/O command, a frozen drive (`hung`), never
//!   ready, fatal on enable; and a [`Misbehaviour`] hook through which a fuzz target scripts
//!   hostile completions (lost, doubled, wrong CID/phase/SQ head/DW0, altered Identify pages).
#![forbid(unsafe_code)]

mod io;
pub mod media;

use std::sync::{Arc, Mutex, MutexGuard};

use crate::locked;

use emu_connectx::PhysMem;
use hal::Mmio;
use nvme_spec::props::{Cap, Csts};
use nvme_spec::{admin_op, cns, fid, Cqe, IdentifyController, IdentifyControllerNvm, IdentifyNamespace, Sqe, Status, StatusField};
use zerocopy::{FromBytes, IntoBytes};

pub use media::{DriveNs, MetaFormat, DEALLOCATED_MARK};

/// What the drive does when CC.EN is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    NeverReady,
    /// CSTS.RDY and CSTS.CFS together.
    ReadyAndFatal,
}

/// How the drive posts one command's completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    Honest,
    /// Not posted at all.
    Lost,
    /// Posted twice.
    Twice,
    /// With the CID xored by this value.
    CidXor(u16),
    /// With this status field (bits 15:1 of the halfword, above the phase) instead.
    Status(u16),
    /// With the phase tag inverted.
    WrongPhase,
    /// With this SQ head.
    SqHead(u16),
    /// With this DW0.
    Dw0(u32),
}

/// A script of hostile behaviour (fuzz targets); every method's default is honest.
pub trait Misbehaviour: Send {
    fn on_enable(&mut self) -> Readiness {
        Readiness::Ready
    }
    /// Called once per executed command, after it ran, before its completion is posted.
    fn completion(&mut self, _qid: u16, _opcode: u8) -> Completion {
        Completion::Honest
    }
    /// Alter an Identify page before it is transferred.
    fn identify(&mut self, _cns: u8, _page: &mut [u8]) {}
}

#[derive(Clone, Copy, Debug)]
pub struct SubQueue {
    pub base: u64,
    pub size: u16,
    pub head: u16,
    pub cqid: u16,
}

#[derive(Clone, Copy, Debug)]
pub struct CompQueue {
    pub base: u64,
    pub size: u16,
    pub tail: u16,
    pub phase: bool,
}

/// One I/O command as the drive received it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoRecord {
    pub opcode: u8,
    pub mptr: u64,
    pub cdw12: u32,
    pub cdw14: u32,
}

/// The drive's configuration (set before the controller is enabled), registers, queues and
/// what it saw. Tests read and change it through [`NvmeDrive::state`].
pub struct DriveState {
    // Configuration.
    /// CAP.MQES (0's based), CAP.TO (500 ms units), CAP.DSTRD.
    pub mqes: u16,
    pub timeout_units: u8,
    pub dstrd: u8,
    pub vid: u16,
    pub serial: &'static str,
    pub model: &'static str,
    pub firmware: &'static str,
    /// MDTS (2^MDTS 4 KiB pages; 0: no limit).
    pub mdts: u8,
    /// ONCS bits (Compare bit 0, DSM bit 2, Write Zeroes bit 3).
    pub oncs: u16,
    /// Identify Controller VWC byte, and the Volatile Write Cache feature's WCE.
    pub vwc: u8,
    pub wce: bool,
    /// I/O queues the drive grants (Set Features Number of Queues).
    pub io_queues: u16,
    /// NVM command set limits (Identify CNS 06h; 0: not reported / no limit): WZSL (2^n
    /// 4 KiB pages), DMRL (ranges per DSM), DMRSL (blocks per range), DMSL (blocks per DSM).
    pub wzsl: u8,
    pub dmrl: u8,
    pub dmrsl: u32,
    pub dmsl: u64,
    pub namespaces: Vec<DriveNs>,
    // Faults.
    pub never_ready: bool,
    pub fatal_on_enable: bool,
    /// Frozen: executes nothing, completes nothing, ignores shutdown.
    pub hung: bool,
    /// The next I/O command fails with this (SCT, SC), with DNR when `inject_dnr`.
    pub inject: Option<(u8, u8)>,
    pub inject_dnr: bool,
    /// Every I/O command to this namespace fails with this (SCT, SC, DNR) (a failed region
    /// of the media: media errors, PI errors).
    pub failing: Option<(u32, Status)>,
    /// SQ doorbells only record the tail; [`NvmeDrive::run_pending`] executes.
    pub deferred: bool,
    pub pending: Vec<(usize, u16)>,
    // Registers and queues.
    pub cc: u32,
    pub csts: u32,
    pub aqa: u32,
    pub asq: u64,
    pub acq: u64,
    pub sqs: Vec<Option<SubQueue>>,
    pub cqs: Vec<Option<CompQueue>>,
    // What the drive saw.
    pub io_commands: u64,
    /// I/O commands executed per submission queue, by queue ID (grown as queues are used).
    pub sq_commands: Vec<u64>,
    pub sq_doorbells: u64,
    pub cq_doorbells: u64,
    /// Doorbell writes off the CAP.DSTRD spacing or naming no queue.
    pub stray_doorbells: u64,
    /// Flush commands executed.
    pub flushes: u64,
    /// Most PRP list pages (chained) one command used.
    pub max_list_pages_seen: usize,
    /// Commands whose PRPs were malformed or pointed outside memory.
    pub prp_errors: u64,
    pub io_log: Vec<IoRecord>,
    /// Separate metadata the device received on writes (all bytes, in order).
    pub meta_written: Vec<u8>,
}

impl Default for DriveState {
    /// A drive with two namespaces (1: 2048 blocks, 2: 100 blocks, 512 B), ONCS DSM and Write
    /// Zeroes, MDTS 128 KiB, no volatile write cache, 8 I/O queues.
    fn default() -> Self {
        DriveState {
            mqes: 255,
            timeout_units: 2,
            dstrd: 0,
            vid: 0x1b36,
            serial: "FAKESN01",
            model: "Fake NVMe",
            firmware: "1.0",
            mdts: 5,
            oncs: nvme_spec::oncs::DSM | nvme_spec::oncs::WRITE_ZEROES,
            vwc: 0,
            wce: false,
            io_queues: 8,
            wzsl: 0,
            dmrl: 0,
            dmrsl: 0,
            dmsl: 0,
            namespaces: vec![DriveNs::new(1, 2048), DriveNs::new(2, 100)],
            never_ready: false,
            fatal_on_enable: false,
            hung: false,
            inject: None,
            inject_dnr: false,
            failing: None,
            deferred: false,
            pending: Vec::new(),
            cc: 0,
            csts: 0,
            aqa: 0,
            asq: 0,
            acq: 0,
            sqs: Vec::new(),
            cqs: Vec::new(),
            io_commands: 0,
            sq_commands: Vec::new(),
            sq_doorbells: 0,
            cq_doorbells: 0,
            stray_doorbells: 0,
            flushes: 0,
            max_list_pages_seen: 0,
            prp_errors: 0,
            io_log: Vec::new(),
            meta_written: Vec::new(),
        }
    }
}

impl DriveState {
    pub fn ns(&self, nsid: u32) -> Option<&DriveNs> {
        self.namespaces.iter().find(|n| n.nsid == nsid)
    }
    pub fn ns_mut(&mut self, nsid: u32) -> Option<&mut DriveNs> {
        self.namespaces.iter_mut().find(|n| n.nsid == nsid)
    }
    /// Writes stay in the cache (present and enabled).
    pub fn caching(&self) -> bool {
        self.vwc & nvme_spec::vwc::PRESENT != 0 && self.wce
    }
    fn cap(&self) -> Cap {
        Cap::new().with_mqes(self.mqes).with_cqr(true).with_to(self.timeout_units).with_dstrd(self.dstrd).with_css(1)
    }
    /// I/O submission and completion queues that exist now (created and not deleted).
    pub fn io_queues_live(&self) -> (usize, usize) {
        let live = |n: usize| n.saturating_sub(1);
        (live(self.sqs.iter().flatten().count()), live(self.cqs.iter().flatten().count()))
    }
    /// Largest transfer in bytes (MDTS; None: no limit).
    pub fn max_transfer(&self) -> Option<usize> {
        (self.mdts != 0).then(|| 4096usize << self.mdts.min(20))
    }
}

/// The drive: BAR0 plus its state, shared by clones (the driver owns one as its `Mmio`, the
/// test keeps another).
#[derive(Clone)]
pub struct NvmeDrive {
    mem: PhysMem,
    st: Arc<Mutex<DriveState>>,
    script: Arc<Mutex<Option<Box<dyn Misbehaviour>>>>,
}


/// BAR0 register offsets the driver programs (Base §3.1.4; the PCIe-only ones).
const AQA: usize = 0x24;
const ASQ: usize = 0x28;
const ACQ: usize = 0x30;
const DOORBELLS: usize = 0x1000;

impl NvmeDrive {
    /// A default drive ([`DriveState::default`]) on `mem`.
    pub fn new(mem: &PhysMem) -> Self {
        Self::with_state(mem, DriveState::default())
    }
    pub fn with_state(mem: &PhysMem, st: DriveState) -> Self {
        NvmeDrive { mem: mem.clone(), st: Arc::new(Mutex::new(st)), script: Arc::default() }
    }
    /// The drive's state (configuration, registers, what it saw); do not hold it across a
    /// driver call.
    pub fn state(&self) -> MutexGuard<'_, DriveState> {
        locked(&self.st)
    }
    /// Script hostile behaviour.
    pub fn set_misbehaviour(&self, m: Box<dyn Misbehaviour>) {
        *locked(&self.script) = Some(m);
    }
    /// Run the commands whose doorbells were deferred.
    pub fn run_pending(&self) {
        let p: Vec<(usize, u16)> = locked(&self.st).pending.drain(..).collect();
        for (q, t) in p {
            self.run_sq(q, t);
        }
    }
    /// Power loss: every namespace loses its unflushed cached writes; the controller resets
    /// (not ready, no queues, nothing pending).
    pub fn power_loss(&self) {
        let mut s = locked(&self.st);
        for ns in &mut s.namespaces {
            ns.lose_cache();
        }
        s.cc = 0;
        s.csts = 0;
        s.sqs.clear();
        s.cqs.clear();
        s.pending.clear();
    }

    fn enable(&self, s: &mut DriveState) {
        let readiness = match locked(&self.script).as_mut() {
            Some(m) => m.on_enable(),
            None => Readiness::Ready,
        };
        if s.fatal_on_enable || readiness == Readiness::ReadyAndFatal {
            s.csts = Csts::new().with_rdy(readiness == Readiness::ReadyAndFatal).with_cfs(true).into_bits();
            return;
        }
        if s.never_ready || readiness == Readiness::NeverReady {
            return;
        }
        s.csts = Csts::new().with_rdy(true).into_bits();
        let n = s.io_queues as usize + 1;
        s.sqs = vec![None; n];
        s.cqs = vec![None; n];
        s.sqs[0] = Some(SubQueue { base: s.asq, size: (s.aqa & 0xFFF) as u16 + 1, head: 0, cqid: 0 });
        s.cqs[0] = Some(CompQueue { base: s.acq, size: ((s.aqa >> 16) & 0xFFF) as u16 + 1, tail: 0, phase: true });
    }

    /// Execute the SQ's commands up to `tail`.
    pub fn run_sq(&self, qid: usize, tail: u16) {
        loop {
            let (sq, hung) = {
                let s = locked(&self.st);
                (s.sqs.get(qid).copied().flatten(), s.hung)
            };
            let Some(mut sq) = sq else { return };
            if hung || sq.head == tail || tail >= sq.size {
                return;
            }
            let mut raw = [0u8; 64];
            if self.mem.dma_read(sq.base + sq.head as u64 * 64, &mut raw).is_err() {
                return;
            }
            let sqe = Sqe::read_from_bytes(&raw).expect("64 bytes");
            sq.head = (sq.head + 1) % sq.size;
            locked(&self.st).sqs[qid] = Some(sq);
            let (dw0, status) = if qid == 0 {
                self.admin(&sqe)
            } else {
                let mut s = locked(&self.st);
                if s.sq_commands.len() <= qid {
                    s.sq_commands.resize(qid + 1, 0);
                }
                s.sq_commands[qid] += 1;
                drop(s);
                self.io(&sqe)
            };
            let twist = match locked(&self.script).as_mut() {
                Some(m) => m.completion(qid as u16, sqe.opcode),
                None => Completion::Honest,
            };
            let field = StatusField::new().with_sct(status.sct).with_sc(status.sc).with_dnr(status.dnr).into_bits() >> 1;
            let (cq, sqid, cid) = (sq.cqid as usize, qid as u16, sqe.cid.get());
            match twist {
                Completion::Honest => self.post(cq, sqid, sq.head, cid, dw0, field, false),
                Completion::Lost => {}
                Completion::Twice => {
                    self.post(cq, sqid, sq.head, cid, dw0, field, false);
                    self.post(cq, sqid, sq.head, cid, dw0, field, false);
                }
                Completion::CidXor(x) => self.post(cq, sqid, sq.head, cid ^ x, dw0, field, false),
                Completion::Status(f) => self.post(cq, sqid, sq.head, cid, dw0, f & 0x7FFF, false),
                Completion::WrongPhase => self.post(cq, sqid, sq.head, cid, dw0, field, true),
                Completion::SqHead(h) => self.post(cq, sqid, h, cid, dw0, field, false),
                Completion::Dw0(d) => self.post(cq, sqid, sq.head, cid, d, field, false),
            }
        }
    }

    /// Post a completion; `status` is the status field without the phase (bits 15:1 >> 1).
    #[allow(clippy::too_many_arguments)]
    fn post(&self, cqid: usize, sqid: u16, sqhd: u16, cid: u16, dw0: u32, status: u16, wrong_phase: bool) {
        let mut s = locked(&self.st);
        let Some(cq) = s.cqs.get_mut(cqid).and_then(|c| c.as_mut()) else { return };
        let phase = cq.phase ^ wrong_phase;
        let cqe = Cqe { dw0: dw0.into(), dw1: 0.into(), sqhd: sqhd.into(), sqid: sqid.into(), cid: cid.into(), status: ((status << 1) | phase as u16).into() };
        let at = cq.base + cq.tail as u64 * 16;
        cq.tail += 1;
        if cq.tail >= cq.size {
            cq.tail = 0;
            cq.phase = !cq.phase;
        }
        drop(s);
        let _ = self.mem.dma_write(at, cqe.as_bytes());
    }

    /// The PRP-described pieces of a `len`-byte transfer, walked the way a device does (Base
    /// §4.1.1: PRP2 a second page or a list; a list's last entry chains to the next list page
    /// when more than one entry is still needed). None: malformed or outside memory.
    pub fn segments(&self, prp1: u64, prp2: u64, len: usize) -> Option<Vec<(u64, usize)>> {
        let mut out = vec![];
        if len == 0 {
            return Some(out);
        }
        let first = len.min(4096 - (prp1 as usize & 4095));
        out.push((prp1, first));
        let mut left = len - first;
        if left == 0 {
            return Some(out);
        }
        if left <= 4096 {
            if prp2 & 4095 != 0 {
                return None;
            }
            out.push((prp2, left));
            return Some(out);
        }
        let mut list = prp2;
        if list & 7 != 0 {
            return None;
        }
        let mut list_pages = 1;
        while left > 0 {
            let mut e = [0u8; 8];
            self.mem.dma_read(list, &mut e).ok()?;
            let pa = u64::from_le_bytes(e);
            list += 8;
            if list & 4095 == 0 && left > 4096 {
                // The last entry of a list page: the next list page.
                if pa & 7 != 0 || list_pages > 4096 {
                    return None;
                }
                list = pa;
                list_pages += 1;
                continue;
            }
            if pa & 4095 != 0 {
                return None;
            }
            let n = left.min(4096);
            out.push((pa, n));
            left -= n;
        }
        let mut s = locked(&self.st);
        s.max_list_pages_seen = s.max_list_pages_seen.max(list_pages);
        Some(out)
    }

    /// Move `buf` to (`to_host`) or from the host memory the PRPs describe.
    fn transfer(&self, sqe: &Sqe, buf: &mut [u8], to_host: bool) -> Result<(), Status> {
        let Some(segs) = self.segments(sqe.dptr.prp1(), sqe.dptr.prp2(), buf.len()) else {
            locked(&self.st).prp_errors += 1;
            return Err(Status { sct: 0, sc: 0x13, dnr: true }); // PRP Offset Invalid
        };
        let mut off = 0;
        for (pa, n) in segs {
            let r = if to_host { self.mem.dma_write(pa, &buf[off..off + n]) } else { self.mem.dma_read(pa, &mut buf[off..off + n]) };
            if r.is_err() {
                locked(&self.st).prp_errors += 1;
                return Err(Status::DATA_XFER_ERROR);
            }
            off += n;
        }
        Ok(())
    }

    fn admin(&self, c: &Sqe) -> (u32, Status) {
        let cdw10 = c.cdw10.get();
        let qid = (cdw10 & 0xFFFF) as usize;
        let size = ((cdw10 >> 16) as u16).saturating_add(1);
        let invalid_qid = Status { sct: 1, sc: 0x01, dnr: true };
        let mut s = locked(&self.st);
        let queue_ok = qid > 0 && qid < s.sqs.len();
        match c.opcode {
            admin_op::IDENTIFY => {
                let cns = (cdw10 & 0xFF) as u8;
                let mut page = match self.identify_page(&s, cns, c) {
                    Ok(p) => p,
                    Err(st) => return (0, st),
                };
                if let Some(m) = locked(&self.script).as_mut() {
                    m.identify(cns, &mut page);
                }
                drop(s);
                match self.transfer(c, &mut page, true) {
                    Ok(()) => (0, Status::SUCCESS),
                    Err(st) => (0, st),
                }
            }
            admin_op::SET_FEATURES => match (cdw10 & 0xFF) as u8 {
                fid::NUM_QUEUES => {
                    let n = u32::from(s.io_queues.saturating_sub(1));
                    (n << 16 | n, Status::SUCCESS)
                }
                fid::VOLATILE_WRITE_CACHE if s.vwc & 1 != 0 => {
                    s.wce = c.cdw11.get() & 1 != 0;
                    (0, Status::SUCCESS)
                }
                fid::VOLATILE_WRITE_CACHE => (0, Status::INVALID_FIELD),
                _ => (0, Status::SUCCESS),
            },
            admin_op::GET_FEATURES => match (cdw10 & 0xFF) as u8 {
                fid::VOLATILE_WRITE_CACHE if s.vwc & 1 != 0 => (s.wce as u32, Status::SUCCESS),
                fid::NUM_QUEUES => {
                    let n = u32::from(s.io_queues.saturating_sub(1));
                    (n << 16 | n, Status::SUCCESS)
                }
                _ => (0, Status::INVALID_FIELD),
            },
            admin_op::CREATE_IO_CQ if queue_ok && size >= 2 => {
                s.cqs[qid] = Some(CompQueue { base: c.dptr.prp1(), size, tail: 0, phase: true });
                (0, Status::SUCCESS)
            }
            admin_op::CREATE_IO_SQ if queue_ok && size >= 2 => {
                let cqid = (c.cdw11.get() >> 16) as u16;
                if s.cqs.get(cqid as usize).copied().flatten().is_none() {
                    return (0, Status { sct: 1, sc: 0x00, dnr: true }); // Completion Queue Invalid
                }
                s.sqs[qid] = Some(SubQueue { base: c.dptr.prp1(), size, head: 0, cqid });
                (0, Status::SUCCESS)
            }
            admin_op::DELETE_IO_SQ if queue_ok => {
                s.sqs[qid] = None;
                (0, Status::SUCCESS)
            }
            admin_op::DELETE_IO_CQ if queue_ok => {
                s.cqs[qid] = None;
                (0, Status::SUCCESS)
            }
            admin_op::CREATE_IO_CQ | admin_op::CREATE_IO_SQ | admin_op::DELETE_IO_SQ | admin_op::DELETE_IO_CQ => (0, invalid_qid),
            _ => (0, Status::INVALID_OPCODE),
        }
    }

    fn identify_page(&self, s: &DriveState, cns: u8, c: &Sqe) -> Result<Vec<u8>, Status> {
        match cns {
            cns::CONTROLLER => {
                let mut id = IdentifyController::zeroed();
                id.vid = s.vid.into();
                pad(&mut id.sn, s.serial);
                pad(&mut id.mn, s.model);
                pad(&mut id.fr, s.firmware);
                id.mdts = s.mdts;
                id.ver = 0x0001_0400.into();
                id.sqes = 0x66;
                id.cqes = 0x44;
                id.nn = s.namespaces.iter().map(|n| n.nsid).max().unwrap_or(0).into();
                id.oncs = s.oncs.into();
                id.vwc = s.vwc;
                Ok(id.as_bytes().to_vec())
            }
            cns::NAMESPACE => {
                let ns = s.ns(c.nsid.get()).ok_or(Status::INVALID_NS)?;
                let mut id = IdentifyNamespace::zeroed();
                (id.nsze, id.ncap, id.nuse) = (ns.blocks.into(), ns.blocks.into(), ns.blocks.into());
                (id.nsfeat, id.dlfeat, id.noiob, id.npwg) = (ns.nsfeat, ns.dlfeat, ns.noiob.into(), ns.npwg.into());
                (id.nguid, id.eui64) = (ns.nguid, ns.eui64);
                id.lbaf[0].lbads = ns.block_size.trailing_zeros() as u8;
                if let Some(f) = ns.format {
                    id.nlbaf = 1;
                    id.flbas = 1 | ((f.extended as u8) << 4);
                    id.mc = 0b11;
                    id.dps = f.pi_type;
                    id.lbaf[1].ms = f.ms.into();
                    id.lbaf[1].lbads = ns.block_size.trailing_zeros() as u8;
                }
                Ok(id.as_bytes().to_vec())
            }
            cns::ACTIVE_NS_LIST => {
                // Up to 1024 active IDs greater than CDW1.NSID, ascending.
                let mut page = vec![0u8; 4096];
                let mut ids: Vec<u32> = s.namespaces.iter().map(|n| n.nsid).filter(|&n| n > c.nsid.get()).collect();
                ids.sort_unstable();
                for (i, id) in ids.iter().take(1024).enumerate() {
                    page[i * 4..i * 4 + 4].copy_from_slice(&id.to_le_bytes());
                }
                Ok(page)
            }
            cns::NVM_CTRL if c.cdw11.get() >> 24 == 0 => {
                let mut id = IdentifyControllerNvm::zeroed();
                (id.wzsl, id.dmrl, id.dmrsl, id.dmsl) = (s.wzsl, s.dmrl, s.dmrsl.into(), s.dmsl.into());
                Ok(id.as_bytes().to_vec())
            }
            _ => Err(Status::INVALID_FIELD),
        }
    }
}

/// Space-padded ASCII field.
fn pad(field: &mut [u8], s: &str) {
    field.fill(b' ');
    let n = s.len().min(field.len());
    field[..n].copy_from_slice(&s.as_bytes()[..n]);
}

impl Mmio for NvmeDrive {
    fn size(&self) -> usize {
        0x4000
    }
    fn read32(&self, offset: usize) -> u32 {
        let s = locked(&self.st);
        let cap = s.cap().into_bits();
        match offset {
            0x00 => cap as u32,
            0x04 => (cap >> 32) as u32,
            0x08 => 0x0001_0400,
            0x14 => s.cc,
            0x1C => s.csts,
            AQA => s.aqa,
            ASQ => s.asq as u32,
            0x2C => (s.asq >> 32) as u32,
            ACQ => s.acq as u32,
            0x34 => (s.acq >> 32) as u32,
            _ => 0,
        }
    }
    fn write32(&self, offset: usize, value: u32) {
        if offset >= DOORBELLS {
            let mut s = locked(&self.st);
            let stride = 4usize << s.dstrd;
            let idx = (offset - DOORBELLS) / stride;
            let qid = idx / 2;
            if (offset - DOORBELLS) % stride != 0 || qid >= s.sqs.len().max(1) {
                s.stray_doorbells += 1;
                return;
            }
            if idx % 2 == 1 {
                s.cq_doorbells += 1;
                return;
            }
            s.sq_doorbells += 1;
            if s.deferred {
                s.pending.push((qid, value as u16));
                return;
            }
            drop(s);
            self.run_sq(qid, value as u16);
            return;
        }
        let mut s = locked(&self.st);
        match offset {
            0x14 => {
                let shn = (value >> 14) & 3;
                let was_enabled = s.cc & 1 == 1;
                s.cc = value;
                if shn != 0 && value & 1 == 1 {
                    // Shutdown notification: SHST = 10b (complete) unless frozen.
                    if !s.hung {
                        s.csts = (s.csts & !0xC) | (0b10 << 2);
                    }
                } else if value & 1 == 1 && !was_enabled {
                    self.enable(&mut s);
                } else if value & 1 == 0 {
                    s.csts = 0;
                    s.sqs.clear();
                    s.cqs.clear();
                    s.pending.clear();
                }
            }
            AQA => s.aqa = value,
            ASQ => s.asq = (s.asq & !0xFFFF_FFFF) | value as u64,
            0x2C => s.asq = (s.asq & 0xFFFF_FFFF) | (value as u64) << 32,
            ACQ => s.acq = (s.acq & !0xFFFF_FFFF) | value as u64,
            0x34 => s.acq = (s.acq & 0xFFFF_FFFF) | (value as u64) << 32,
            _ => {}
        }
    }
    fn write64(&self, offset: usize, value: u64) {
        self.write32(offset, value as u32);
        self.write32(offset + 4, (value >> 32) as u32);
    }
}
