//! nvme ctrl: controller bring-up (Base §3.5.1 "Memory-based controller initialization"),
//! the admin queue, Identify, Set Features (Number of Queues) and I/O queue creation and
//! deletion.
//!
//! The admin queue sits behind a lock (admin commands are the slow path: bring-up, Identify,
//! a queue pair made or deleted), so I/O queue pairs are made and given back through a
//! shared `&Controller`: a namespace's I/O handles ([`crate::NvmeNamespace`]) are made while
//! namespaces borrow the controller. Queue IDs are reused once their queues are deleted.

use core::sync::atomic::{AtomicBool, Ordering};

use hal::{poll_until, DmaRegion, DmaSlice, Hal, Mmio};
use log::{debug, info};
use zerocopy::FromBytes;

use crate::queue::QueuePair;
use crate::regs::{off, Aqa, Cap, Cc, Csts, Vs};
use crate::spec::{admin_op, ascii_trim, cns, fid, DataPointer, IdentifyController, IdentifyControllerNvm, IdentifyNamespace, Sqe};
use crate::Error;

const PAGE: usize = 4096;
const ADMIN_DEPTH: u16 = 32;
/// CC.SHN: normal shutdown notification (Base §3.1.4.5).
const SHN_NORMAL: u8 = 0b01;
/// CSTS.SHST: shutdown processing complete (Base §3.1.4.6).
const SHST_COMPLETE: u8 = 0b10;

/// Most I/O queue pairs the driver asks a controller for (Set Features Number of Queues)
/// and tracks (one bit each); the controller may grant fewer.
pub const MAX_IO_QUEUES: u16 = 64;

/// NSFEAT bits a namespace's identity carries: 0 thin provisioning (NCAP/NUSE meaningful),
/// 4 OPTPERF (NPWG, NPWA, NPDG, NPDA, NOWS valid).
const NSFEAT_PASSED: u8 = 1 | 1 << 4;

/// Default cap on one command's transfer: 8 MiB. It applies when MDTS is larger or 0 (no
/// limit). Each I/O queue slot reserves the chained PRP list pages this needs up front
/// (5 pages = 20 KiB per slot at 8 MiB, 1.25 MiB for a 64-deep queue); larger I/Os are
/// refused with `TooLarge` before reaching the device (callers split them).
pub const DEFAULT_MAX_TRANSFER: usize = 8 << 20;

/// Bring-up options.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// Timeout for one admin command.
    pub admin_timeout_ns: u64,
    /// Timeout for an I/O that makes no progress.
    pub io_timeout_ns: u64,
    /// Largest transfer per command this driver allows (bytes, rounded down to 4 KiB,
    /// at least 4 KiB), further limited by MDTS. See [`DEFAULT_MAX_TRANSFER`].
    pub max_transfer_cap: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config { admin_timeout_ns: 5_000_000_000, io_timeout_ns: 5_000_000_000, max_transfer_cap: DEFAULT_MAX_TRANSFER }
    }
}

/// What Identify Controller said (the parts the appliance uses).
#[derive(Debug, Clone)]
pub struct ControllerInfo {
    pub vid: u16,
    pub ssvid: u16,
    sn: [u8; 20],
    mn: [u8; 40],
    fr: [u8; 8],
    /// 2^MDTS pages, 0 = unlimited.
    pub mdts: u8,
    pub cntlid: u16,
    /// Largest NSID.
    pub nn: u32,
    pub oncs: u16,
    /// A volatile write cache is present (VWC bit 0).
    pub vwc: bool,
    /// The volatile write cache is enabled (Get Features Volatile Write Cache, WCE); false
    /// without one. When the feature cannot be read the cache is taken as enabled.
    pub wce: bool,
    /// RTD3 Entry Latency in microseconds (0 = not reported).
    pub rtd3e_us: u32,
    /// The NVM command set's non-MDTS limits (Identify CNS 06h); all zero (none) when the
    /// drive does not report them.
    pub nvm_limits: NvmLimits,
}

/// Write Zeroes and Dataset Management limits a drive reports (NVM Command Set, I/O Command
/// Set specific Identify Controller); 0 = no limit reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NvmLimits {
    /// Write Zeroes Size Limit: 2^WZSL minimum memory pages (4 KiB).
    pub wzsl: u8,
    /// Ranges per Dataset Management command.
    pub dmrl: u8,
    /// Logical blocks per range.
    pub dmrsl: u32,
    /// Logical blocks per Dataset Management command.
    pub dmsl: u64,
}

impl ControllerInfo {
    pub fn serial(&self) -> &str {
        ascii_trim(&self.sn)
    }
    pub fn model(&self) -> &str {
        ascii_trim(&self.mn)
    }
    pub fn firmware(&self) -> &str {
        ascii_trim(&self.fr)
    }
}

/// What Identify Namespace said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamespaceInfo {
    pub nsid: u32,
    /// Size in logical blocks (NSZE).
    pub blocks: u64,
    pub block_size: u32,
    /// Metadata bytes per block of the format in use.
    pub metadata_size: u16,
    /// Index of the LBA format in use.
    pub lba_format: u8,
    /// Where metadata travels (meaningless when `metadata_size` is 0).
    pub metadata: MetadataLayout,
    /// Protection information type (DPS bits 2:0; 0 = none).
    pub pi_type: u8,
    /// Identifiers and layout hints as the drive reports them (NGUID/EUI-64 zero when it
    /// has none).
    pub identity: blockdev::NsIdentity,
}

/// How a namespace's per-block metadata is transferred (NVM Command Set spec, metadata region).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetadataLayout {
    /// At the end of each block's data, in the data buffer (FLBAS bit 4 = 1).
    Extended,
    /// In a separate buffer named by the command's MPTR.
    Separate,
}

impl core::fmt::Display for NamespaceInfo {
    /// The LBA format as the boot listing shows it, e.g. `LBA format 1 (data 512 B,
    /// metadata 8 B separate, PI type 1)`.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "LBA format {} (data {} B, metadata {} B", self.lba_format, self.block_size, self.metadata_size)?;
        if self.metadata_size != 0 {
            let how = match self.metadata {
                MetadataLayout::Extended => "extended LBA",
                MetadataLayout::Separate => "separate",
            };
            write!(f, " {how}")?;
        }
        match self.pi_type {
            0 => write!(f, ")"),
            t => write!(f, ", PI type {t})"),
        }
    }
}

impl NamespaceInfo {
    pub fn bytes(&self) -> u64 {
        self.blocks * self.block_size as u64
    }
}

/// The admin queue and what its commands use: one user at a time (the controller's lock).
struct Admin<D: DmaRegion> {
    q: QueuePair<D>,
    /// One page for the data of an Identify.
    buf: D,
    /// Tag of the last admin command.
    seq: u64,
    /// I/O queue IDs in use: bit `qid - 1`.
    io_qids: u64,
}

/// A running controller: admin queue up, identified.
pub struct Controller<H: Hal, M: Mmio> {
    pub(crate) hal: H,
    pub(crate) mmio: M,
    pub cap: Cap,
    pub vs: Vs,
    pub(crate) stride: usize,
    pub(crate) cfg: Config,
    admin: spin::Mutex<Admin<H::Dma>>,
    info: ControllerInfo,
    /// I/O queue pairs granted by Set Features (Number of Queues), at most [`MAX_IO_QUEUES`].
    max_io_queues: u16,
    /// Stopped by [`Controller::fail_stop`] after it stopped answering, or removed
    /// ([`Controller::remove`]).
    failed: AtomicBool,
    /// Normal shutdown notified ([`Controller::shutdown`]): no more admin commands.
    shut_down: AtomicBool,
}

fn regs_ok<M: Mmio>(mmio: &M) -> Result<(), Error> {
    if mmio.size() < off::DOORBELL_BASE + 8 {
        return Err(Error::BarTooSmall(mmio.size()));
    }
    Ok(())
}

impl<H: Hal, M: Mmio> Controller<H, M> {
    /// Reset (disable), set up the admin queue, enable, identify and negotiate queues.
    pub fn init(hal: H, mmio: M, cfg: Config) -> Result<Self, Error> {
        regs_ok(&mmio)?;
        // 64-bit registers are accessed as two dwords (low first), which every controller takes.
        let cap = Cap::from_bits(mmio.read32(off::CAP) as u64 | (mmio.read32(off::CAP + 4) as u64) << 32);
        let vs = Vs::from_bits(mmio.read32(off::VS));
        if cap.into_bits() == u64::MAX {
            return Err(Error::NoDevice);
        }
        if cap.css() & 1 == 0 {
            return Err(Error::NoNvmCommandSet);
        }
        if cap.mpsmin() > 0 {
            return Err(Error::PageSizeUnsupported { mpsmin: cap.mpsmin() });
        }
        let ready_to = cap.ready_timeout_ns();
        debug!("nvme: CAP {:#x} VS {}.{}.{} TO {} ms DSTRD {}", cap.into_bits(), vs.major(), vs.minor(), vs.tertiary(), ready_to / 1_000_000, cap.dstrd());

        // 1. Disable and wait for RDY = 0 (Base §3.5.1 step 1, §3.1.4.6).
        let cc = Cc::from_bits(mmio.read32(off::CC));
        if cc.en() {
            mmio.write32(off::CC, cc.with_en(false).into_bits());
        }
        if !poll_until(&hal, ready_to, || !Csts::from_bits(mmio.read32(off::CSTS)).rdy()) {
            return Err(Error::Timeout { what: "controller disable (CSTS.RDY=0)" });
        }

        // 2. Admin queue.
        let stride = cap.doorbell_stride();
        let admin_depth = core::cmp::min(ADMIN_DEPTH as u32, cap.mqes() as u32 + 1) as u16;
        // Admin commands move at most one page (Identify): one list page per slot is plenty.
        let admin = QueuePair::new(&hal, 0, admin_depth, PAGE, stride, PAGE)?;
        let aqa = Aqa::new().with_asqs(admin.depth() - 1).with_acqs(admin.depth() - 1);
        mmio.write32(off::AQA, aqa.into_bits());
        for (reg, pa) in [(off::ASQ, admin.sq_paddr()), (off::ACQ, admin.cq_paddr())] {
            mmio.write32(reg, pa as u32);
            mmio.write32(reg + 4, (pa >> 32) as u32);
        }

        // 3. Enable: NVM command set, 4 KiB pages, round robin, 64/16-byte entries.
        let cc = Cc::new().with_css(0).with_mps(0).with_ams(0).with_iosqes(6).with_iocqes(4).with_en(true);
        mmio.write32(off::CC, cc.into_bits());
        let mut fatal = false;
        let ready = poll_until(&hal, ready_to, || {
            let s = Csts::from_bits(mmio.read32(off::CSTS));
            fatal = s.cfs();
            s.rdy() || fatal
        });
        if fatal {
            return Err(Error::ControllerFatal);
        }
        if !ready {
            return Err(Error::Timeout { what: "controller enable (CSTS.RDY=1)" });
        }

        let buf = hal.dma_alloc(PAGE, PAGE)?;
        let dummy = ControllerInfo { vid: 0, ssvid: 0, sn: [0; 20], mn: [0; 40], fr: [0; 8], mdts: 0, cntlid: 0, nn: 0, oncs: 0, vwc: false, wce: false, rtd3e_us: 0, nvm_limits: NvmLimits::default() };
        let admin = spin::Mutex::new(Admin { q: admin, buf, seq: 0, io_qids: 0 });
        let mut c = Controller { hal, mmio, cap, vs, stride, cfg, admin, info: dummy, max_io_queues: 0, failed: AtomicBool::new(false), shut_down: AtomicBool::new(false) };
        c.info = c.identify_controller()?;
        c.max_io_queues = c.set_queue_count(MAX_IO_QUEUES)?.min(MAX_IO_QUEUES);
        // CNS is a full byte from NVMe 1.2; a drive without the NVM command set's page
        // answers Invalid Field: no limits reported.
        if (vs.major(), vs.minor()) >= (1, 2) {
            match c.identify(cns::NVM_CTRL, 0) {
                Ok(raw) => {
                    let id = IdentifyControllerNvm::read_from_bytes(&raw[..]).map_err(|_| Error::BadIdentify)?;
                    c.info.nvm_limits = NvmLimits { wzsl: id.wzsl, dmrl: id.dmrl, dmrsl: id.dmrsl.get(), dmsl: id.dmsl.get() };
                }
                Err(Error::Status { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        if c.info.vwc {
            let get = Sqe { opcode: admin_op::GET_FEATURES, cdw10: (fid::VOLATILE_WRITE_CACHE as u32).into(), ..Default::default() };
            c.info.wce = match c.admin_cmd(get, false) {
                Ok(dw0) => dw0 & 1 != 0,
                Err(e) => {
                    log::warn!("nvme: volatile write cache present, its state unreadable ({e}): taken as enabled");
                    true
                }
            };
        }
        info!(
            "nvme: up: NVMe {}.{} serial {:?} model {:?} fw {:?} mdts {} nn {} io queues {} volatile write cache {}",
            vs.major(), vs.minor(), c.info.serial(), c.info.model(), c.info.firmware(), c.info.mdts, c.info.nn, c.max_io_queues,
            match (c.info.vwc, c.info.wce) {
                (false, _) => "none",
                (true, false) => "present, disabled",
                (true, true) => "enabled",
            }
        );
        Ok(c)
    }

    pub fn info(&self) -> &ControllerInfo {
        &self.info
    }
    pub fn hal(&self) -> &H {
        &self.hal
    }
    pub fn mmio(&self) -> &M {
        &self.mmio
    }

    /// Largest transfer in bytes: MDTS (2^MDTS pages of CAP.MPSMIN = 4 KiB; 0 = no limit),
    /// capped by `Config::max_transfer_cap`. I/O queues reserve chained PRP list pages for it.
    pub fn max_transfer_bytes(&self) -> usize {
        let cap = core::cmp::max(self.cfg.max_transfer_cap & !(PAGE - 1), PAGE);
        let mdts = match self.info.mdts {
            0 => usize::MAX,
            // 4 KiB << 40 is far beyond any cap; avoids a shift overflow for odd values.
            m if m >= 40 => usize::MAX,
            m => PAGE << m,
        };
        core::cmp::min(cap, mdts)
    }

    /// Run one admin command to completion (or timeout). `data`: whether the command
    /// transfers one page through the controller's scratch buffer. Returns CQE DW0.
    ///
    /// Each command gets a fresh tag: a late completion of a command that timed out earlier
    /// is consumed (its slot freed) but never taken for the answer of a later command.
    fn admin_cmd(&self, sqe: Sqe, data: bool) -> Result<u32, Error> {
        self.admin_run(&mut self.admin.lock(), sqe, data)
    }

    /// [`Controller::admin_cmd`] with the admin queue already held (a command whose data page
    /// the caller reads afterwards, or a sequence of commands).
    fn admin_run(&self, a: &mut Admin<H::Dma>, mut sqe: Sqe, data: bool) -> Result<u32, Error> {
        if self.is_failed() {
            return Err(Error::Timeout { what: "admin command (controller stopped after a timeout)" });
        }
        let d = if data { Some(DmaSlice::new(&a.buf, 0, PAGE).expect("the admin buffer is one page")) } else { None };
        let opc = sqe.opcode;
        a.seq += 1;
        let tag = a.seq;
        a.q.push(&mut sqe, tag, d).map_err(|_| Error::AdminQueueFull)?;
        a.q.ring(&self.mmio);
        let mut result = None;
        let admin = &mut a.q;
        let mmio = &self.mmio;
        let done = poll_until(&self.hal, self.cfg.admin_timeout_ns, || {
            admin.reap(mmio, 1, |t, dw0, st| {
                if t == tag {
                    result = Some((dw0, st));
                }
            });
            result.is_some()
        });
        if !done {
            return Err(Error::Timeout { what: "admin command" });
        }
        match result {
            Some((dw0, None)) => Ok(dw0),
            Some((_, Some(st))) => Err(Error::Status { opcode: opc, admin: true, status: st }),
            None => Err(Error::Timeout { what: "admin command" }),
        }
    }

    fn identify(&mut self, cns: u8, nsid: u32) -> Result<[u8; PAGE], Error> {
        let sqe = Sqe { opcode: admin_op::IDENTIFY, nsid: nsid.into(), cdw10: (cns as u32).into(), ..Default::default() };
        let mut a = self.admin.lock();
        a.buf.fill(0, PAGE, 0);
        self.admin_run(&mut a, sqe, true)?;
        let mut out = [0u8; PAGE];
        a.buf.read(0, &mut out);
        Ok(out)
    }

    fn identify_controller(&mut self) -> Result<ControllerInfo, Error> {
        let raw = self.identify(cns::CONTROLLER, 0)?;
        let id = IdentifyController::read_from_bytes(&raw[..]).map_err(|_| Error::BadIdentify)?;
        if id.sqes & 0xF > 6 || id.cqes & 0xF > 4 {
            return Err(Error::BadIdentify);
        }
        Ok(ControllerInfo {
            vid: id.vid.get(),
            ssvid: id.ssvid.get(),
            sn: id.sn,
            mn: id.mn,
            fr: id.fr,
            mdts: id.mdts,
            cntlid: id.cntlid.get(),
            nn: id.nn.get(),
            oncs: id.oncs.get(),
            vwc: id.vwc & 1 != 0,
            wce: false,
            rtd3e_us: id.rtd3e.get(),
            nvm_limits: NvmLimits::default(),
        })
    }

    /// Active namespace IDs (Identify CNS 02h), calling `f` for each, in order. One page
    /// holds 1024 IDs greater than the command's NSID; a full page is followed by another
    /// from its last ID (Base spec, Identify CNS 02h), so every active namespace is listed.
    pub fn active_namespaces(&mut self, mut f: impl FnMut(u32)) -> Result<usize, Error> {
        let mut n = 0;
        let mut after = 0u32;
        loop {
            let raw = self.identify(cns::ACTIVE_NS_LIST, after)?;
            let mut in_page = 0;
            for c in raw.chunks_exact(4) {
                let id = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                // IDs are increasing; 0 ends the list; anything else is a device bug.
                if id == 0 || id <= after || id == u32::MAX {
                    break;
                }
                f(id);
                after = id;
                n += 1;
                in_page += 1;
            }
            if in_page < PAGE / 4 || after >= self.info.nn {
                return Ok(n);
            }
        }
    }

    /// Identify Namespace `nsid`.
    pub fn identify_namespace(&mut self, nsid: u32) -> Result<NamespaceInfo, Error> {
        if nsid == 0 || nsid == u32::MAX {
            return Err(Error::BadNamespace(nsid));
        }
        let raw = self.identify(cns::NAMESPACE, nsid)?;
        let id = IdentifyNamespace::read_from_bytes(&raw[..]).map_err(|_| Error::BadIdentify)?;
        let fmt_idx = id.lba_format_index();
        if fmt_idx > id.nlbaf as usize || fmt_idx >= 64 {
            return Err(Error::BadIdentify);
        }
        let f = id.lba_format();
        if !(9..=16).contains(&f.lbads) {
            return Err(Error::BadIdentify);
        }
        Ok(NamespaceInfo {
            nsid,
            blocks: id.nsze.get(),
            block_size: 1 << f.lbads,
            metadata_size: f.ms.get(),
            lba_format: fmt_idx as u8,
            metadata: if id.extended_lba() { MetadataLayout::Extended } else { MetadataLayout::Separate },
            pi_type: id.pi_type(),
            identity: blockdev::NsIdentity {
                nguid: id.nguid,
                eui64: id.eui64,
                ncap: id.ncap.get(),
                nuse: id.nuse.get(),
                nsfeat: id.nsfeat & NSFEAT_PASSED,
                dlfeat: id.dlfeat & 0x7,
                noiob: id.noiob.get(),
                npwg: id.npwg.get(),
                npwa: id.npwa.get(),
                npdg: id.npdg.get(),
                npda: id.npda.get(),
                nows: id.nows.get(),
            },
        })
    }

    /// Set Features: Number of Queues (Base §5.27.1.5). Returns pairs granted.
    fn set_queue_count(&mut self, want: u16) -> Result<u16, Error> {
        let n = (want - 1) as u32;
        let sqe = Sqe {
            opcode: admin_op::SET_FEATURES,
            cdw10: (fid::NUM_QUEUES as u32).into(),
            cdw11: (n | (n << 16)).into(),
            ..Default::default()
        };
        let dw0 = self.admin_cmd(sqe, false)?;
        // 0's based counts from the drive: 0xFFFF must not overflow (a broken drive's value).
        let nsqa = ((dw0 & 0xFFFF) as u16).saturating_add(1);
        let ncqa = ((dw0 >> 16) as u16).saturating_add(1);
        Ok(core::cmp::min(nsqa, ncqa))
    }

    /// Create an I/O CQ + SQ pair of `depth` entries (Base §5.4, §5.5), physically
    /// contiguous, interrupts off (polled), on the lowest queue ID not in use; `NoQueuesLeft`
    /// when all [`Controller::io_queues_granted`] are. Slow path (allocates, admin commands):
    /// give it back with [`Controller::delete_io_queue_pair`].
    pub fn create_io_queue_pair(&self, depth: u16) -> Result<QueuePair<H::Dma>, Error> {
        let mut a = self.admin.lock();
        let qid = (1..=self.max_io_queues).find(|q| a.io_qids & qid_bit(*q) == 0).ok_or(Error::NoQueuesLeft)?;
        let depth = core::cmp::min(depth as u32, self.cap.mqes() as u32 + 1) as u16;
        let qp = QueuePair::new(&self.hal, qid, depth, PAGE, self.stride, self.max_transfer_bytes())?;
        let qsize = ((depth - 1) as u32) << 16;
        let cq = Sqe {
            opcode: admin_op::CREATE_IO_CQ,
            dptr: DataPointer::prp(qp.cq_paddr(), 0),
            cdw10: (qsize | qid as u32).into(),
            cdw11: 1u32.into(), // PC=1, IEN=0
            ..Default::default()
        };
        self.admin_run(&mut a, cq, false)?;
        let sq = Sqe {
            opcode: admin_op::CREATE_IO_SQ,
            dptr: DataPointer::prp(qp.sq_paddr(), 0),
            cdw10: (qsize | qid as u32).into(),
            cdw11: (((qid as u32) << 16) | 1).into(), // CQID, PC=1
            ..Default::default()
        };
        if let Err(e) = self.admin_run(&mut a, sq, false) {
            // The CQ alone is of no use: deleted, so its ID is free again.
            let _ = self.admin_run(&mut a, delete_queue(admin_op::DELETE_IO_CQ, qid), false);
            return Err(e);
        }
        a.io_qids |= qid_bit(qid);
        Ok(qp)
    }

    /// Give back an I/O queue pair made by [`Controller::create_io_queue_pair`]: Delete I/O
    /// SQ (the controller aborts what is still queued on it and ends its DMA for it) then
    /// Delete I/O CQ (Base §5.6, §5.7); its queue ID may be used again. A stopped, removed or
    /// shut down controller has no queues any more: nothing to send. An ID whose deletion
    /// failed stays in use. Slow path; the caller drops `q` afterwards.
    pub fn delete_io_queue_pair(&self, q: &QueuePair<H::Dma>) -> Result<(), Error> {
        let qid = q.qid;
        if qid == 0 || qid > MAX_IO_QUEUES {
            return Ok(());
        }
        let mut a = self.admin.lock();
        if a.io_qids & qid_bit(qid) == 0 {
            return Ok(());
        }
        if !(self.is_failed() || self.shut_down.load(Ordering::Relaxed)) {
            self.admin_run(&mut a, delete_queue(admin_op::DELETE_IO_SQ, qid), false)?;
            self.admin_run(&mut a, delete_queue(admin_op::DELETE_IO_CQ, qid), false)?;
        }
        a.io_qids &= !qid_bit(qid);
        Ok(())
    }

    /// I/O queue pairs the controller granted (Set Features Number of Queues), at most
    /// [`MAX_IO_QUEUES`].
    pub fn io_queues_granted(&self) -> u16 {
        self.max_io_queues
    }

    /// I/O queue pairs made and not given back.
    pub fn io_queues_in_use(&self) -> u16 {
        self.admin.lock().io_qids.count_ones() as u16
    }

    /// Whether the controller was stopped after it stopped answering.
    pub fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    /// Stop a controller that stopped answering: clear CC.EN, a controller reset that aborts
    /// every outstanding command and ends the controller's DMA, and wait for CSTS.RDY = 0 up
    /// to CAP.TO. Afterwards no buffer of an I/O reported as `Timeout` is written behind the
    /// caller's back. Every queue of the controller is dead from then on (no automatic
    /// re-initialisation). Returns whether the controller acknowledged (RDY went to 0).
    pub fn fail_stop(&self) -> bool {
        if self.failed.swap(true, Ordering::Relaxed) {
            return !Csts::from_bits(self.mmio.read32(off::CSTS)).rdy();
        }
        let cc = Cc::from_bits(self.mmio.read32(off::CC));
        self.mmio.write32(off::CC, cc.with_en(false).into_bits());
        let stopped = poll_until(&self.hal, self.cap.ready_timeout_ns(), || !Csts::from_bits(self.mmio.read32(off::CSTS)).rdy());
        if stopped {
            log::error!("nvme: controller {:?} not answering: disabled (CC.EN=0, RDY=0); its I/O fails with Timeout", self.info.serial());
        } else {
            log::error!("nvme: controller {:?} not answering and still RDY {} ms after CC.EN=0: it may still DMA", self.info.serial(), self.cap.ready_timeout_ns() / 1_000_000);
        }
        stopped
    }

    /// Normal shutdown (Base spec, controller shutdown): set CC.SHN = 01b and wait for CSTS.SHST = 10b, so the
    /// controller writes its volatile cache and metadata to media before power goes. Waits
    /// RTD3E when the controller reports it (at least 1 s), else 5 s. Call once, at the end,
    /// with no I/O outstanding; the controller takes no commands afterwards.
    pub fn shutdown(&self) -> Result<(), Error> {
        self.shut_down.store(true, Ordering::Relaxed);
        let wait_ns = match self.info.rtd3e_us {
            0 => 5_000_000_000,
            us => core::cmp::max(us as u64 * 1000, 1_000_000_000),
        };
        let cc = Cc::from_bits(self.mmio.read32(off::CC));
        self.mmio.write32(off::CC, cc.with_shn(SHN_NORMAL).into_bits());
        if poll_until(&self.hal, wait_ns, || Csts::from_bits(self.mmio.read32(off::CSTS)).shst() == SHST_COMPLETE) {
            Ok(())
        } else {
            Err(Error::Timeout { what: "shutdown (CSTS.SHST=10b)" })
        }
    }

    /// Orderly removal (its slot's attention button, an operator): normal shutdown so the
    /// volatile cache reaches media ([`Controller::shutdown`]), then the controller is marked
    /// failed like [`Controller::fail_stop`]: its namespaces fail what is outstanding and
    /// take no more I/O, so their owners take them out of service. The device may be powered
    /// off and pulled afterwards. Returns the shutdown's result (the controller is marked
    /// failed either way).
    pub fn remove(&self) -> Result<(), Error> {
        let r = if self.failed.load(Ordering::Relaxed) { Ok(()) } else { self.shutdown() };
        self.failed.store(true, Ordering::Relaxed);
        match &r {
            Ok(()) => log::warn!("nvme: controller {:?} removed: shut down (cache written to media), its I/O fails from now on", self.info.serial()),
            Err(e) => log::error!("nvme: controller {:?} removed without a completed shutdown ({e}); its I/O fails from now on", self.info.serial()),
        }
        r
    }

    /// Surprise removal (the device is gone, its slot reports no card): marked failed
    /// without touching its registers (a pulled device answers reads with all-ones, and
    /// waiting for its RDY would only burn CAP.TO). Its namespaces fail what is outstanding.
    pub fn gone(&self) {
        if !self.failed.swap(true, Ordering::Relaxed) {
            log::error!("nvme: controller {:?} is gone (surprise removal); its I/O fails from now on", self.info.serial());
        }
    }

    /// Admin queue counters.
    pub fn admin_stats(&self) -> crate::queue::QueueStats {
        self.admin.lock().q.stats
    }
}

/// An I/O queue ID's bit in [`Admin::io_qids`] (`qid` in 1..=[`MAX_IO_QUEUES`]).
fn qid_bit(qid: u16) -> u64 {
    1 << (qid - 1)
}

/// Delete I/O SQ or CQ `qid`.
fn delete_queue(opcode: u8, qid: u16) -> Sqe {
    Sqe { opcode, cdw10: (qid as u32).into(), ..Default::default() }
}
