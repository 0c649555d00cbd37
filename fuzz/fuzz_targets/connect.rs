//! Fabrics Connect commands and their 1024-byte data into the target over RDMA: admin and I/O
//! queue Connects with any fields, NQNs, controller IDs and queue sizes. Input: steps of
//! [ctl][64-byte Connect SQE][1024-byte Connect data], each on a new RDMA connection; ctl bit 0
//! is the queue ID the RDMA CM private data names (admin or 1), bit 1 sends the data in the
//! capsule instead of through a keyed SGL to the host's real buffer (real rkey).
#![no_main]

#[allow(dead_code, unused_imports)]
#[path = "../../apps/nvmeof/tests/common/mod.rs"]
mod common;

use common::raw::*;
use hal::DmaRegion;
use common::*;
use nvmeof::wire::{Sgl, FABRICS_OPCODE};
use testbed::soft::SoftFabric;
use zerocopy::IntoBytes;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let fabric = SoftFabric::new();
    let mut w = make_world(&fabric, 256, &[HOSTNQN]);
    let mut hd = host_dev(&fabric);
    for step in data.chunks_exact(1 + 64 + 1024).take(4) {
        let (ctl, sqe, cdata) = (step[0], &step[1..65], &step[65..]);
        let mut q = Raw::connect(&mut hd, &mut w, (ctl & 1) as u16, 32);
        let mut cap = sqe.to_vec();
        cap[0] = FABRICS_OPCODE;
        cap[4] = 0x01; // fctype Connect
        let d = if ctl & 2 != 0 {
            Sgl::Inline { offset: 0, len: 1024 }.encode()
        } else {
            q.data.write(0, cdata);
            Sgl::Keyed { addr: q.data.paddr(), len: 1024, key: q.rkey.0, invalidate: false }.encode()
        };
        cap[24..40].copy_from_slice(d.as_bytes());
        if ctl & 2 != 0 {
            cap.extend_from_slice(cdata);
        }
        let _ = q.try_xchg(&mut hd, &mut w, &cap);
    }
});
