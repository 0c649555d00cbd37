//! A broken or hostile NVMe drive against the local NVMe driver (drivers/nvme): the one
//! emulated drive (`testbed::nvme_drive`) executes the admin and I/O queues honestly unless
//! the input says otherwise, command by command through its `Misbehaviour` hook: drop the
//! completion, post it twice, with another CID, an error status, the wrong phase, a wild SQ
//! head or DW0; identify pages altered; CSTS never ready or fatal. The driver initialises,
//! lists and wraps namespaces, and runs writes, reads and a Flush through the block
//! interface. Nothing may panic, and every block completion must name an I/O that was
//! submitted and not completed yet. With no input left the drive is honest, so every run ends
//! in a working path.
#![no_main]

use std::collections::HashSet;

use blockdev::{BlockDevice, BlockDone, BlockIo, BlockOp};
use emu_connectx::{PhysMem, SimClock, SimHal};
use hal::{DmaSlice, Hal};
use nvme::{Config, Controller, NvmeNamespace};
use testbed::nvme_drive::{Completion, DriveNs, DriveState, Misbehaviour, NvmeDrive, Readiness};

const BS: usize = 512;

/// The drive's decisions, one byte at a time; 0 (also when the input is used up) is honest.
struct Script {
    data: Vec<u8>,
    at: usize,
}
impl Script {
    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }
}

impl Misbehaviour for Script {
    fn on_enable(&mut self) -> Readiness {
        match self.byte() {
            1 => Readiness::NeverReady,
            2 => Readiness::ReadyAndFatal,
            _ => Readiness::Ready,
        }
    }
    fn completion(&mut self, _qid: u16, _opcode: u8) -> Completion {
        match self.byte() % 8 {
            1 => Completion::Lost,
            2 => Completion::Twice,
            3 => Completion::CidXor(self.u16()),
            4 => Completion::Status(self.u16() & 0x7FF),
            5 => Completion::WrongPhase,
            6 => Completion::SqHead(self.u16()),
            7 => Completion::Dw0(self.u32()),
            _ => Completion::Honest,
        }
    }
    /// Runs of xored bytes.
    fn identify(&mut self, _cns: u8, page: &mut [u8]) {
        for _ in 0..(self.byte() % 8) {
            let at = self.u16() as usize % page.len();
            page[at] ^= self.byte();
        }
    }
}

/// The drive: MQES 63, CAP.TO 500 ms, two namespaces of 256 blocks, a volatile write cache.
fn drive(mem: &PhysMem) -> NvmeDrive {
    let st = DriveState {
        mqes: 63,
        timeout_units: 1,
        serial: "FUZZSN01",
        model: "FUZZ",
        vwc: 1,
        namespaces: vec![DriveNs::new(1, 256), DriveNs::new(2, 256)],
        ..DriveState::default()
    };
    NvmeDrive::with_state(mem, st)
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mem = PhysMem::new();
    let hal = SimHal::new(mem.clone(), SimClock::new());
    let drive = drive(&mem);
    drive.set_misbehaviour(Box::new(Script { data: data.to_vec(), at: 0 }));
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
            let io = BlockIo { op, lba: tag as u64, blocks, buf: DmaSlice::new(&buf, 0, blocks as usize * BS).expect("inside the buffer"), tag: tag as u64, fua: false };
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
