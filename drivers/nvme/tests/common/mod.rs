//! The driver's host tests run against the one emulated NVMe drive (`testbed::nvme_drive`) on
//! the shared simulated platform (`SimHal`): bring-up, completion waiting and request helpers.
#![allow(dead_code)]

use blockdev::{BlockDevice, BlockDone, BlockIo, BlockOp};
use hal::{DmaRegion, DmaSlice, Hal};
use nvme::{Config, Controller};
#[allow(unused_imports)]
pub use testbed::nvme_drive::{DriveNs, DriveState, IoRecord, MetaFormat, NvmeDrive};
pub use testbed::{PhysMem, SimClock, SimHal};

/// Block size of the default drive's namespaces.
pub const BS: usize = 512;

/// The simulated platform; each `relax()` moves the clock 1 µs.
pub fn sim_hal() -> SimHal {
    let hal = SimHal::new(PhysMem::new(), SimClock::new());
    hal.set_relax_step(1_000);
    hal
}

/// A default drive on `hal`'s memory.
pub fn drive(hal: &SimHal) -> NvmeDrive {
    NvmeDrive::new(hal.mem())
}

pub fn bring_up() -> (SimHal, NvmeDrive, Controller<SimHal, NvmeDrive>) {
    let hal = sim_hal();
    let bar = drive(&hal);
    let c = Controller::init(hal.clone(), bar.clone(), Config { admin_timeout_ns: 10_000_000, io_timeout_ns: 10_000_000, ..Config::default() }).unwrap();
    (hal, bar, c)
}

pub fn wait(ns: &mut impl BlockDevice, hal: &SimHal, want: usize) -> Vec<BlockDone> {
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

pub fn io(op: BlockOp, lba: u64, blocks: u32, buf: DmaSlice, tag: u64) -> BlockIo {
    BlockIo { op, lba, blocks, buf, tag, fua: false }
}

/// `len` bytes at `off` of `region` (inside it, or the test is wrong).
pub fn at(region: &impl DmaRegion, off: usize, len: usize) -> DmaSlice {
    DmaSlice::new(region, off, len).expect("test buffer inside its region")
}
