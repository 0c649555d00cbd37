//! The fake NVMe controller the driver's host tests run against (written for these tests,
//! from the NVMe Base spec): an in-memory "physical" arena behind a test Hal, and a BAR whose
//! doorbell writes make the fake execute the queued commands and post completions.
#![allow(dead_code)]

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use blockdev::{BlockDevice, BlockDone, BlockIo, BlockOp};
use hal::{DmaRegion, Hal, HalError, Mmio, PhysAddr};
use nvme::spec::{Cqe, Sqe};
use nvme::{Config, Controller};
use zerocopy::{FromBytes, IntoBytes};

pub const BASE: u64 = 0x4000_0000;

pub struct Mem {
    pub bytes: RefCell<Vec<u8>>,
    pub next: Cell<usize>,
}

#[derive(Clone)]
pub struct TestHal {
    pub mem: Rc<Mem>,
    pub now: Rc<Cell<u64>>,
}

pub struct Region {
    pub mem: Rc<Mem>,
    pub off: usize,
    pub len: usize,
}

impl DmaRegion for Region {
    fn paddr(&self) -> PhysAddr {
        BASE + self.off as u64
    }
    fn len(&self) -> usize {
        self.len
    }
    fn read(&self, offset: usize, buf: &mut [u8]) {
        assert!(offset + buf.len() <= self.len);
        buf.copy_from_slice(&self.mem.bytes.borrow()[self.off + offset..self.off + offset + buf.len()]);
    }
    fn write(&self, offset: usize, data: &[u8]) {
        assert!(offset + data.len() <= self.len);
        self.mem.bytes.borrow_mut()[self.off + offset..self.off + offset + data.len()].copy_from_slice(data);
    }
}

impl TestHal {
    pub fn new(size: usize) -> Self {
        TestHal { mem: Rc::new(Mem { bytes: RefCell::new(vec![0; size]), next: Cell::new(0) }), now: Rc::new(Cell::new(0)) }
    }
    pub fn phys_read(&self, pa: u64, out: &mut [u8]) {
        let o = (pa - BASE) as usize;
        out.copy_from_slice(&self.mem.bytes.borrow()[o..o + out.len()]);
    }
    pub fn phys_write(&self, pa: u64, data: &[u8]) {
        let o = (pa - BASE) as usize;
        self.mem.bytes.borrow_mut()[o..o + data.len()].copy_from_slice(data);
    }
}

impl Hal for TestHal {
    type Dma = Region;
    fn dma_alloc(&self, size: usize, align: usize) -> Result<Region, HalError> {
        let align = align.max(4096);
        let off = self.mem.next.get().div_ceil(align) * align;
        if off + size > self.mem.bytes.borrow().len() {
            return Err(HalError::OutOfMemory { size, align });
        }
        self.mem.next.set(off + size);
        self.mem.bytes.borrow_mut()[off..off + size].fill(0);
        Ok(Region { mem: self.mem.clone(), off, len: size })
    }
    fn now_ns(&self) -> u64 {
        self.now.get()
    }
    fn relax(&self) {
        self.now.set(self.now.get() + 1_000);
    }
}

#[derive(Clone, Copy)]
pub struct Sq {
    pub base: u64,
    pub size: u16,
    pub head: u16,
    pub cqid: u16,
}
#[derive(Clone, Copy)]
pub struct Cq {
    pub base: u64,
    pub size: u16,
    pub tail: u16,
    pub phase: bool,
}

#[derive(Default)]
pub struct Fake {
    pub cc: u32,
    pub csts: u32,
    pub aqa: u32,
    pub asq: u64,
    pub acq: u64,
    pub sqs: Vec<Option<Sq>>,
    pub cqs: Vec<Option<Cq>>,
    /// (nsid, blocks, data)
    pub namespaces: Vec<(u32, u64, Vec<u8>)>,
    pub oncs: u16,
    pub mdts: u8,
    pub never_ready: bool,
    pub hung: bool,
    pub inject: Option<(u8, u8)>,
    /// Set Do Not Retry in the injected status.
    pub inject_dnr: bool,
    pub io_commands: u64,
    pub sq_doorbells: u64,
    /// Doorbells only record the tail; the test runs the device with `FakeBar::run_pending`
    /// (so a profiler sees driver work apart from device work).
    pub deferred: bool,
    pub pending: Vec<(usize, u16)>,
    /// CAP.DSTRD: doorbells 4 << dstrd bytes apart.
    pub dstrd: u8,
    /// Set CSTS.CFS instead of RDY on enable.
    pub fatal_on_enable: bool,
    /// Most PRP list pages (chained) one command used.
    pub max_list_pages_seen: usize,
    /// LBA format 1 for a namespace: (nsid, metadata bytes, extended LBA, PI type).
    pub formats: Vec<(u32, u16, bool, u8)>,
    /// Per I/O command: (opcode, MPTR, CDW12, CDW14).
    pub io_log: Vec<(u8, u64, u32, u32)>,
    /// Separate metadata the device received on writes (all bytes, in order).
    pub meta_written: Vec<u8>,
    /// Identify Controller VWC byte and the Volatile Write Cache feature's WCE bit.
    pub vwc: u8,
    pub wce: bool,
    /// NGUID and EUI-64 of namespace 1 (zero: none).
    pub nguid: [u8; 16],
    pub eui64: [u8; 8],
    /// Identify Namespace NSFEAT, DLFEAT, NOIOB and NPWG of namespace 1.
    pub hints: (u8, u8, u16, u16),
}

#[derive(Clone)]
pub struct FakeBar {
    pub hal: TestHal,
    pub st: Rc<RefCell<Fake>>,
}

pub const BS: usize = 512;
/// Marks an SCT handed to `post` as carrying Do Not Retry (SCT itself is 3 bits).
pub const DNR_MARK: u8 = 0x80;
// CAP: MQES 255, CQR, TO 2 (1 s), DSTRD 0, CSS NVM.
pub const CAP: u64 = 255 | (1 << 16) | (2 << 24) | (1 << 37);

impl Mmio for FakeBar {
    fn size(&self) -> usize {
        0x4000
    }
    fn read32(&self, offset: usize) -> u32 {
        let s = self.st.borrow();
        match offset {
            0x00 => CAP as u32,
            0x04 => (CAP >> 32) as u32 | s.dstrd as u32,
            0x08 => 0x0001_0400,
            0x14 => s.cc,
            0x1C => s.csts,
            0x24 => s.aqa,
            _ => 0,
        }
    }
    fn write32(&self, offset: usize, value: u32) {
        if offset >= 0x1000 {
            let stride = 4usize << self.st.borrow().dstrd;
            assert_eq!((offset - 0x1000) % stride, 0, "doorbell write off the stride");
            let idx = (offset - 0x1000) / stride;
            let qid = idx / 2;
            if idx % 2 == 0 {
                let mut s = self.st.borrow_mut();
                s.sq_doorbells += 1;
                if s.deferred {
                    s.pending.push((qid, value as u16));
                    return;
                }
                drop(s);
                self.run_sq(qid, value as u16);
            }
            return;
        }
        let mut s = self.st.borrow_mut();
        match offset {
            0x14 => {
                let shn = (value >> 14) & 3;
                s.cc = value;
                if shn != 0 && value & 1 == 1 {
                    // Shutdown notification: report SHST = 10b (complete) unless hung.
                    if !s.hung {
                        s.csts = (s.csts & !0xC) | (0b10 << 2);
                    }
                    return;
                }
                if value & 1 == 1 {
                    if s.fatal_on_enable {
                        s.csts = 2;
                    } else if !s.never_ready {
                        s.csts = 1;
                        let (asq, acq, aqa) = (s.asq, s.acq, s.aqa);
                        s.sqs = vec![None; 17];
                        s.cqs = vec![None; 17];
                        s.sqs[0] = Some(Sq { base: asq, size: (aqa & 0xFFF) as u16 + 1, head: 0, cqid: 0 });
                        s.cqs[0] = Some(Cq { base: acq, size: ((aqa >> 16) & 0xFFF) as u16 + 1, tail: 0, phase: true });
                    }
                } else {
                    s.csts = 0;
                }
            }
            0x24 => s.aqa = value,
            0x28 => s.asq = (s.asq & !0xFFFF_FFFF) | value as u64,
            0x2C => s.asq = (s.asq & 0xFFFF_FFFF) | (value as u64) << 32,
            0x30 => s.acq = (s.acq & !0xFFFF_FFFF) | value as u64,
            0x34 => s.acq = (s.acq & 0xFFFF_FFFF) | (value as u64) << 32,
            _ => {}
        }
    }
    fn write64(&self, offset: usize, value: u64) {
        let mut s = self.st.borrow_mut();
        match offset {
            0x28 => s.asq = value,
            0x30 => s.acq = value,
            _ => {}
        }
    }
}

impl FakeBar {
    pub fn new(hal: &TestHal) -> Self {
        let st = Fake {
            namespaces: vec![(1, 2048, vec![0; 2048 * BS]), (2, 100, vec![0; 100 * BS])],
            oncs: (1 << 2) | (1 << 3),
            mdts: 5, // 128 KiB
            ..Default::default()
        };
        FakeBar { hal: hal.clone(), st: Rc::new(RefCell::new(st)) }
    }

    /// Run the commands whose doorbells were deferred.
    pub fn run_pending(&self) {
        let p: Vec<(usize, u16)> = self.st.borrow_mut().pending.drain(..).collect();
        for (q, t) in p {
            self.run_sq(q, t);
        }
    }

    /// The PRP-described pieces of a `len`-byte transfer, read the way a device does.
    pub fn segments(&self, prp1: u64, prp2: u64, len: usize) -> Vec<(u64, usize)> {
        let mut out = vec![];
        let first = len.min(4096 - (prp1 as usize & 4095));
        out.push((prp1, first));
        let mut left = len - first;
        if left == 0 {
            return out;
        }
        if left <= 4096 {
            assert_eq!(prp2 & 4095, 0);
            out.push((prp2, left));
            return out;
        }
        // A PRP list; its last entry points to the next list page when more than one entry
        // is still needed (Base §4.1.1).
        let mut list = prp2;
        assert_eq!(list & 4095, 0, "PRP list not page aligned");
        let mut i = 0;
        let mut list_pages = 1;
        while left > 0 {
            let mut e = [0u8; 8];
            self.hal.phys_read(list + 8 * i, &mut e);
            let pa = u64::from_le_bytes(e);
            if i == 511 && left > 4096 {
                assert_eq!(pa & 4095, 0, "chain pointer not page aligned");
                list = pa;
                i = 0;
                list_pages += 1;
                continue;
            }
            assert_eq!(pa & 4095, 0, "PRP list entry not page aligned");
            let n = left.min(4096);
            out.push((pa, n));
            left -= n;
            i += 1;
        }
        let mut s = self.st.borrow_mut();
        s.max_list_pages_seen = s.max_list_pages_seen.max(list_pages);
        drop(s);
        out
    }

    pub fn run_sq(&self, qid: usize, tail: u16) {
        loop {
            let (sq, hung) = {
                let s = self.st.borrow();
                (s.sqs.get(qid).copied().flatten(), s.hung)
            };
            let Some(mut sq) = sq else { return };
            if hung || sq.head == tail {
                return;
            }
            let mut raw = [0u8; 64];
            self.hal.phys_read(sq.base + sq.head as u64 * 64, &mut raw);
            let sqe = Sqe::read_from_bytes(&raw).unwrap();
            sq.head = (sq.head + 1) % sq.size;
            self.st.borrow_mut().sqs[qid] = Some(sq);
            let (dw0, sct, sc) = if qid == 0 { self.admin(&sqe) } else { self.io(&sqe) };
            self.post(sq.cqid as usize, qid as u16, sq.head, sqe.cid.get(), dw0, sct, sc);
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn post(&self, cqid: usize, sqid: u16, sqhd: u16, cid: u16, dw0: u32, sct: u8, sc: u8) {
        let mut s = self.st.borrow_mut();
        let cq = s.cqs[cqid].as_mut().unwrap();
        let dnr = if sct & DNR_MARK != 0 { 1 << 15 } else { 0 };
        let status = (cq.phase as u16) | ((sc as u16) << 1) | (((sct & 7) as u16) << 9) | dnr;
        let cqe = Cqe { dw0: dw0.into(), dw1: 0.into(), sqhd: sqhd.into(), sqid: sqid.into(), cid: cid.into(), status: status.into() };
        let at = cq.base + cq.tail as u64 * 16;
        cq.tail += 1;
        if cq.tail == cq.size {
            cq.tail = 0;
            cq.phase = !cq.phase;
        }
        drop(s);
        self.hal.phys_write(at, cqe.as_bytes());
    }

    pub fn admin(&self, c: &Sqe) -> (u32, u8, u8) {
        let mut s = self.st.borrow_mut();
        match c.opcode {
            0x06 => {
                let mut page = vec![0u8; 4096];
                match c.cdw10.get() & 0xFF {
                    1 => {
                        page[0..2].copy_from_slice(&0x1b36u16.to_le_bytes());
                        page[4..24].copy_from_slice(b"FAKESN01            ");
                        let mut mn = [b' '; 40];
                        mn[..9].copy_from_slice(b"Fake NVMe");
                        page[24..64].copy_from_slice(&mn);
                        page[64..72].copy_from_slice(b"1.0     ");
                        page[77] = s.mdts;
                        page[512] = 0x66;
                        page[513] = 0x44;
                        page[516..520].copy_from_slice(&s.namespaces.iter().map(|n| n.0).max().unwrap_or(0).to_le_bytes()); // NN: largest NSID
                        page[520..522].copy_from_slice(&s.oncs.to_le_bytes());
                        page[525] = s.vwc;
                    }
                    0 => {
                        let Some(ns) = s.namespaces.iter().find(|n| n.0 == c.nsid.get()) else {
                            return (0, 0, 0x0B);
                        };
                        page[0..8].copy_from_slice(&ns.1.to_le_bytes());
                        page[8..16].copy_from_slice(&ns.1.to_le_bytes());
                        page[16..24].copy_from_slice(&ns.1.to_le_bytes());
                        page[128 + 2] = 9; // LBAF0: 512 B
                        if ns.0 == 1 {
                            page[104..120].copy_from_slice(&s.nguid);
                            page[120..128].copy_from_slice(&s.eui64);
                            (page[24], page[33]) = (s.hints.0, s.hints.1);
                            page[46..48].copy_from_slice(&s.hints.2.to_le_bytes());
                            page[64..66].copy_from_slice(&s.hints.3.to_le_bytes());
                        }
                        if let Some(&(_, ms, ext, pi)) = s.formats.iter().find(|f| f.0 == c.nsid.get()) {
                            page[25] = 1; // NLBAF: two formats
                            page[26] = 1 | ((ext as u8) << 4); // FLBAS: format 1, extended?
                            page[27] = 0b11; // MC: both ways
                            page[29] = pi; // DPS
                            page[132..134].copy_from_slice(&ms.to_le_bytes()); // LBAF1.MS
                            page[134] = 9; // LBAF1: 512 B
                        }
                    }
                    2 => {
                        // Up to 1024 active IDs greater than CDW1.NSID.
                        let after = c.nsid.get();
                        for (i, ns) in s.namespaces.iter().filter(|n| n.0 > after).take(1024).enumerate() {
                            page[i * 4..i * 4 + 4].copy_from_slice(&ns.0.to_le_bytes());
                        }
                    }
                    _ => return (0, 0, 0x02),
                }
                drop(s);
                for (pa, n) in self.segments(c.dptr.prp1(), c.dptr.prp2(), 4096) {
                    let o = (pa - c.dptr.prp1()) as usize;
                    let o = if o < 4096 { o } else { 4096 - n };
                    self.hal.phys_write(pa, &page[o..o + n]);
                }
                (0, 0, 0)
            }
            0x09 => (((7u32) << 16) | 7, 0, 0), // 8 SQs and CQs granted
            // Get Features, Volatile Write Cache (only when one is present).
            0x0A if c.cdw10.get() & 0xFF == 0x06 && s.vwc & 1 != 0 => (s.wce as u32, 0, 0),
            0x05 => {
                let qid = (c.cdw10.get() & 0xFFFF) as usize;
                let size = (c.cdw10.get() >> 16) as u16 + 1;
                if qid == 0 || qid > 8 {
                    return (0, 1, 0x01);
                }
                s.cqs[qid] = Some(Cq { base: c.dptr.prp1(), size, tail: 0, phase: true });
                (0, 0, 0)
            }
            0x01 => {
                let qid = (c.cdw10.get() & 0xFFFF) as usize;
                let size = (c.cdw10.get() >> 16) as u16 + 1;
                let cqid = (c.cdw11.get() >> 16) as u16;
                if s.cqs.get(cqid as usize).copied().flatten().is_none() {
                    return (0, 1, 0x00);
                }
                s.sqs[qid] = Some(Sq { base: c.dptr.prp1(), size, head: 0, cqid });
                (0, 0, 0)
            }
            _ => (0, 0, 0x01),
        }
    }

    pub fn io(&self, c: &Sqe) -> (u32, u8, u8) {
        let mut s = self.st.borrow_mut();
        s.io_commands += 1;
        if let Some((sct, sc)) = s.inject.take() {
            return (0, sct | if s.inject_dnr { DNR_MARK } else { 0 }, sc);
        }
        let nsid = c.nsid.get();
        s.io_log.push((c.opcode, c.mptr.get(), c.cdw12.get(), c.cdw14.get()));
        let Some(idx) = s.namespaces.iter().position(|n| n.0 == nsid) else { return (0, 0, 0x0B) };
        // Separate metadata (except 8-byte PI with PRACT): moved through MPTR.
        let sep_ms = s.formats.iter().find(|f| f.0 == nsid && !f.2 && !(f.1 == 8 && f.3 != 0)).map(|f| f.1 as usize);
        let blocks = s.namespaces[idx].1;
        let slba = c.cdw10.get() as u64 | ((c.cdw11.get() as u64) << 32);
        let nlb = (c.cdw12.get() & 0xFFFF) as u64 + 1;
        match c.opcode {
            0x00 => return (0, 0, 0),
            0x01 | 0x02 | 0x08 if slba + nlb > blocks => return (0, 0, 0x80),
            0x01 | 0x02 => {
                let len = nlb as usize * BS;
                let mut off = slba as usize * BS;
                drop(s);
                if let Some(ms) = sep_ms {
                    let mut m = vec![0xEE; nlb as usize * ms];
                    if c.opcode == 0x01 {
                        self.hal.phys_read(c.mptr.get(), &mut m);
                        self.st.borrow_mut().meta_written.extend_from_slice(&m);
                    } else {
                        self.hal.phys_write(c.mptr.get(), &m);
                    }
                }
                for (pa, n) in self.segments(c.dptr.prp1(), c.dptr.prp2(), len) {
                    let mut s = self.st.borrow_mut();
                    let data = &mut s.namespaces[idx].2[off..off + n];
                    if c.opcode == 0x01 {
                        self.hal.phys_read(pa, data);
                    } else {
                        self.hal.phys_write(pa, data);
                    }
                    off += n;
                }
            }
            0x08 => {
                s.namespaces[idx].2[slba as usize * BS..(slba + nlb) as usize * BS].fill(0);
            }
            0x09 => {
                let mut r = [0u8; 16];
                drop(s);
                self.hal.phys_read(c.dptr.prp1(), &mut r);
                let n = u32::from_le_bytes(r[4..8].try_into().unwrap()) as usize;
                let sl = u64::from_le_bytes(r[8..16].try_into().unwrap()) as usize;
                self.st.borrow_mut().namespaces[idx].2[sl * BS..(sl + n) * BS].fill(0xDD);
            }
            _ => return (0, 0, 0x01),
        }
        (0, 0, 0)
    }
}

pub fn bring_up() -> (TestHal, FakeBar, Controller<TestHal, FakeBar>) {
    let hal = TestHal::new(64 << 20);
    let bar = FakeBar::new(&hal);
    let c = Controller::init(hal.clone(), bar.clone(), Config { admin_timeout_ns: 10_000_000, io_timeout_ns: 10_000_000, ..Config::default() }).unwrap();
    (hal, bar, c)
}

pub fn wait(ns: &mut impl BlockDevice, hal: &TestHal, want: usize) -> Vec<BlockDone> {
    let mut got = vec![];
    let mut out = [BlockDone { tag: 0, result: Ok(()) }; 16];
    for _ in 0..1_000_000 {
        let n = ns.poll(&mut out);
        got.extend_from_slice(&out[..n]);
        if got.len() >= want {
            return got;
        }
        hal.relax();
    }
    panic!("no completion");
}

pub fn io(op: BlockOp, lba: u64, blocks: u32, buf: u64, buf_len: usize, tag: u64) -> BlockIo {
    BlockIo { op, lba, blocks, buf, buf_len, tag, fua: false }
}
