//! A broken or hostile NVMe drive against the local NVMe driver (drivers/nvme): a small scripted
//! controller (written for this target from the NVMe Base spec) that executes the admin and I/O
//! queues honestly unless the input says otherwise, command by command: drop the completion,
//! post it twice, with another CID, an error status, the wrong phase, a wild SQ head or DW0;
//! identify pages altered; CSTS never ready or fatal. The driver initialises, lists and wraps
//! namespaces, and runs reads and writes through the block interface. Nothing may panic, and
//! every block completion must name an I/O that was submitted and not completed yet. With no
//! input left the controller is honest, so every run ends in a working path.
#![no_main]

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::rc::Rc;

use blockdev::{BlockDevice, BlockDone, BlockIo, BlockOp};
use emu_connectx::{PhysMem, SimClock, SimHal};
use hal::{DmaRegion, Hal, Mmio};
use nvme::{Config, Controller, NvmeNamespace};

const BS: usize = 512;

/// The drive's decisions, one byte at a time; 0 (also when the input is used up) is honest.
struct Script {
    data: Vec<u8>,
    at: Cell<usize>,
}
impl Script {
    fn byte(&self) -> u8 {
        let i = self.at.get();
        self.at.set(i + 1);
        self.data.get(i).copied().unwrap_or(0)
    }
    fn u16(&self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }
    fn u32(&self) -> u32 {
        u32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }
}

/// The drive's view of simulated physical memory (the same the driver's DMA regions come from:
/// the emulated adapter's simulated platform, the one test Hal); a wild address is a DMA fault.
#[derive(Clone)]
struct Mem(PhysMem);
impl Mem {
    fn read(&self, pa: u64, out: &mut [u8]) -> bool {
        self.0.dma_read(pa, out).is_ok()
    }
    fn write(&self, pa: u64, data: &[u8]) -> bool {
        self.0.dma_write(pa, data).is_ok()
    }
}

#[derive(Clone, Copy)]
struct Queue {
    base: u64,
    size: u16,
    /// SQ: head; CQ: tail.
    pos: u16,
    /// SQ: its CQ; CQ: phase.
    cq_or_phase: u16,
}

#[derive(Default)]
struct State {
    cc: u32,
    csts: u32,
    aqa: u32,
    asq: u64,
    acq: u64,
    sqs: [Option<Queue>; 8],
    cqs: [Option<Queue>; 8],
}

#[derive(Clone)]
struct Drive {
    mem: Mem,
    st: Rc<RefCell<State>>,
    script: Rc<Script>,
}

// CAP: MQES 63, CQR, TO 1 (500 ms), DSTRD 0, CSS NVM, MPSMIN 0.
const CAP: u64 = 63 | (1 << 16) | (1 << 24) | (1 << 37);

impl Mmio for Drive {
    fn size(&self) -> usize {
        0x2000
    }
    fn read32(&self, offset: usize) -> u32 {
        let s = self.st.borrow();
        match offset {
            0x00 => CAP as u32,
            0x04 => (CAP >> 32) as u32,
            0x08 => 0x0001_0400,
            0x14 => s.cc,
            0x1C => s.csts,
            0x24 => s.aqa,
            _ => 0,
        }
    }
    fn write32(&self, offset: usize, value: u32) {
        if offset >= 0x1000 {
            let idx = (offset - 0x1000) / 4;
            if idx % 2 == 0 {
                self.run_sq(idx / 2, value as u16);
            }
            return;
        }
        let mut s = self.st.borrow_mut();
        match offset {
            0x14 => {
                s.cc = value;
                if (value >> 14) & 3 != 0 {
                    s.csts = (s.csts & !0xC) | (0b10 << 2);
                } else if value & 1 == 1 {
                    s.csts = match self.script.byte() {
                        1 => 0, // never ready
                        2 => 3, // ready and fatal
                        _ => 1,
                    };
                    let aqa = s.aqa;
                    s.sqs = [None; 8];
                    s.cqs = [None; 8];
                    s.sqs[0] = Some(Queue { base: s.asq, size: (aqa & 0xFFF) as u16 + 1, pos: 0, cq_or_phase: 0 });
                    s.cqs[0] = Some(Queue { base: s.acq, size: ((aqa >> 16) & 0xFFF) as u16 + 1, pos: 0, cq_or_phase: 1 });
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
        self.write32(offset, value as u32);
        self.write32(offset + 4, (value >> 32) as u32);
    }
}

impl Drive {
    fn run_sq(&self, qid: usize, tail: u16) {
        for _ in 0..256 {
            let Some(mut sq) = self.st.borrow().sqs.get(qid).copied().flatten() else { return };
            if sq.pos == tail || tail >= sq.size {
                return;
            }
            let mut sqe = [0u8; 64];
            if !self.mem.read(sq.base + sq.pos as u64 * 64, &mut sqe) {
                return;
            }
            sq.pos = (sq.pos + 1) % sq.size;
            self.st.borrow_mut().sqs[qid] = Some(sq);
            let (dw0, status) = if qid == 0 { self.admin(&sqe) } else { (0, 0) };
            let cid = u16::from_le_bytes([sqe[2], sqe[3]]);
            let cq = sq.cq_or_phase as usize;
            match self.script.byte() % 8 {
                1 => {} // lost
                2 => {
                    self.post(cq, qid as u16, sq.pos, cid, dw0, status, false);
                    self.post(cq, qid as u16, sq.pos, cid, dw0, status, false);
                }
                3 => self.post(cq, qid as u16, sq.pos, cid ^ self.script.u16(), dw0, status, false),
                4 => self.post(cq, qid as u16, sq.pos, cid, dw0, self.script.u16() & 0x7FF, false),
                5 => self.post(cq, qid as u16, sq.pos, cid, dw0, status, true),
                6 => self.post(cq, qid as u16, self.script.u16(), cid, dw0, status, false),
                7 => self.post(cq, qid as u16, sq.pos, cid, self.script.u32(), status, false),
                _ => self.post(cq, qid as u16, sq.pos, cid, dw0, status, false),
            }
        }
    }

    /// Post a completion; `status` is SCT/SC (bits 10:0 of the status field, above the phase).
    #[allow(clippy::too_many_arguments)]
    fn post(&self, cqid: usize, sqid: u16, sqhd: u16, cid: u16, dw0: u32, status: u16, wrong_phase: bool) {
        let mut s = self.st.borrow_mut();
        let Some(cq) = s.cqs.get_mut(cqid).and_then(|c| c.as_mut()) else { return };
        let phase = (cq.cq_or_phase & 1) ^ wrong_phase as u16;
        let mut cqe = [0u8; 16];
        cqe[0..4].copy_from_slice(&dw0.to_le_bytes());
        cqe[8..10].copy_from_slice(&sqhd.to_le_bytes());
        cqe[10..12].copy_from_slice(&sqid.to_le_bytes());
        cqe[12..14].copy_from_slice(&cid.to_le_bytes());
        cqe[14..16].copy_from_slice(&(phase | status << 1).to_le_bytes());
        let at = cq.base + cq.pos as u64 * 16;
        cq.pos += 1;
        if cq.pos == cq.size {
            cq.pos = 0;
            cq.cq_or_phase ^= 1;
        }
        drop(s);
        self.mem.write(at, &cqe);
    }

    fn admin(&self, sqe: &[u8; 64]) -> (u32, u16) {
        let dw = |i: usize| u32::from_le_bytes([sqe[i], sqe[i + 1], sqe[i + 2], sqe[i + 3]]);
        let prp1 = u64::from(dw(24)) | u64::from(dw(28)) << 32;
        let (cdw10, cdw11) = (dw(40), dw(44));
        let qid = (cdw10 & 0xFFFF) as usize;
        let size = ((cdw10 >> 16) as u16).saturating_add(1);
        let mut s = self.st.borrow_mut();
        match sqe[0] {
            0x06 => {
                drop(s);
                let mut page = [0u8; 4096];
                match cdw10 & 0xFF {
                    1 => {
                        page[4..24].copy_from_slice(b"FUZZSN01            ");
                        page[24..64].fill(b' ');
                        page[24..28].copy_from_slice(b"FUZZ");
                        page[77] = 5; // MDTS: 128 KiB
                        page[512] = 0x66; // SQES
                        page[513] = 0x44; // CQES
                        page[516..520].copy_from_slice(&2u32.to_le_bytes()); // NN
                        page[520..522].copy_from_slice(&0x000Cu16.to_le_bytes()); // ONCS: DSM, Write Zeroes
                        page[525] = 1; // VWC
                    }
                    2 => {
                        page[0..4].copy_from_slice(&1u32.to_le_bytes());
                        page[4..8].copy_from_slice(&2u32.to_le_bytes());
                    }
                    0 => {
                        page[0..8].copy_from_slice(&256u64.to_le_bytes()); // NSZE
                        page[8..16].copy_from_slice(&256u64.to_le_bytes());
                        page[130] = 9; // LBAF0: 512-byte blocks
                    }
                    _ => {}
                }
                // The drive's alterations: runs of xored bytes.
                for _ in 0..(self.script.byte() % 8) {
                    let at = self.script.u16() as usize % 4096;
                    let x = self.script.byte();
                    page[at] ^= x;
                }
                self.mem.write(prp1, &page);
                (0, 0)
            }
            0x05 if qid > 0 && qid < 8 => {
                s.cqs[qid] = Some(Queue { base: prp1, size, pos: 0, cq_or_phase: 1 });
                (0, 0)
            }
            0x01 if qid > 0 && qid < 8 => {
                s.sqs[qid] = Some(Queue { base: prp1, size, pos: 0, cq_or_phase: (cdw11 >> 16) as u16 % 8 });
                (0, 0)
            }
            0x00 if qid > 0 && qid < 8 => {
                s.sqs[qid] = None;
                (0, 0)
            }
            0x04 if qid > 0 && qid < 8 => {
                s.cqs[qid] = None;
                (0, 0)
            }
            0x09 => (0x0007_0007, 0), // Set Features: 8 queues granted
            _ => (0, 0),
        }
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mem = PhysMem::new();
    let hal = SimHal::new(mem.clone(), SimClock::new());
    let drive = Drive { mem: Mem(mem), st: Rc::default(), script: Rc::new(Script { data: data.to_vec(), at: Cell::new(0) }) };
    let cfg = Config { admin_timeout_ns: 20_000_000, io_timeout_ns: 20_000_000, ..Config::default() };
    // An empty script is an honest drive: everything must work.
    let honest = data.is_empty();
    let mut ctrl = match Controller::init(hal.clone(), drive, cfg) {
        Ok(c) => c,
        Err(e) => return assert!(!honest, "honest drive refused: {e:?}"),
    };
    let mut nsids = Vec::new();
    let _ = ctrl.active_namespaces(|n| nsids.push(n));
    let mut namespaces = Vec::new();
    for &nsid in nsids.iter().take(2) {
        let Ok(info) = ctrl.identify_namespace(nsid) else { continue };
        let Ok(q) = ctrl.create_io_queue_pair(16) else { continue };
        namespaces.push((info, q));
    }
    assert!(!honest || namespaces.len() == 2, "honest drive: {nsids:?} listed, {} set up", namespaces.len());
    let Ok(buf) = hal.dma_alloc(8 * BS, 4096) else { return };
    for (info, q) in namespaces {
        let mut ns = match NvmeNamespace::new(&ctrl, info, q) {
            Ok(ns) => ns,
            Err(e) => {
                assert!(!honest, "honest namespace refused: {e:?}");
                continue;
            }
        };
        let mut live = HashSet::new();
        let ops = [BlockOp::Write, BlockOp::Read, BlockOp::Flush, BlockOp::Read];
        for (tag, op) in ops.into_iter().enumerate() {
            let blocks = if op == BlockOp::Flush { 0 } else { 1 };
            let io = BlockIo { op, lba: tag as u64, blocks, buf: buf.paddr(), buf_len: blocks as usize * BS, tag: tag as u64, fua: false };
            match ns.submit(&io) {
                Ok(()) => assert!(live.insert(io.tag)),
                Err(e) => assert!(!honest, "honest drive: {op:?} refused: {e:?}"),
            }
        }
        let mut done = [BlockDone { tag: 0, result: Ok(()) }; 8];
        for _ in 0..400 {
            if live.is_empty() {
                break;
            }
            let n = ns.poll(&mut done);
            for d in &done[..n] {
                assert!(live.remove(&d.tag), "completion for tag {} that is not outstanding", d.tag);
                assert!(!honest || d.result.is_ok(), "honest drive: tag {} failed: {:?}", d.tag, d.result);
            }
            hal.relax();
        }
        assert!(!honest || live.is_empty(), "honest drive: {live:?} never completed");
    }
    let _ = ctrl.shutdown();
});
