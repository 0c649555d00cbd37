//! NVMe-oF capsules (SQE + in-capsule data, any SGL) sent over RDMA into the target: the
//! transport's SGL decoding and the core's admin, I/O and Fabrics commands, on a connected and
//! enabled controller with one I/O queue. Input: steps of [ctl][inline len][64-byte SQE][data];
//! ctl bit 0 picks the I/O queue, bit 1 points a keyed SGL at the host's real registered buffer
//! (its real rkey: valid keys are part of the input space, not filtered out).
#![no_main]

#[allow(dead_code, unused_imports)]
#[path = "../../apps/nvmeof/tests/common/mod.rs"]
mod common;

use common::raw::*;
use hal::DmaRegion;
use common::*;
use nvmeof::wire::Sgl;
use testbed::soft::SoftFabric;
use zerocopy::IntoBytes;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let fabric = SoftFabric::new();
    let mut w = make_world(&fabric, 256, &[HOSTNQN]);
    let mut hd = host_dev(&fabric);
    let (admin, cntlid) = setup(&mut hd, &mut w);
    let io = io_queue(&mut hd, &mut w, cntlid);
    let mut queues = [Some(admin), Some(io)];
    let mut rest = data;
    while let [ctl, len, tail @ ..] = rest {
        let Some(sqe) = tail.get(..64) else { break };
        let inline = &tail[64..][..(*len as usize).min(tail.len() - 64)];
        rest = &tail[64 + inline.len()..];
        let qi = (ctl & 1) as usize;
        let Some(q) = queues[qi].as_mut() else { continue };
        let mut cap = sqe.to_vec();
        if ctl & 2 != 0 {
            // Keep the fuzzed length; address and key become the real ones.
            let flen = u32::from_le_bytes([sqe[32], sqe[33], sqe[34], 0]);
            let d = Sgl::Keyed { addr: q.data.paddr(), len: flen, key: q.rkey.0, invalidate: ctl & 4 != 0 }.encode();
            cap[24..40].copy_from_slice(d.as_bytes());
        }
        cap.extend_from_slice(inline);
        if q.try_xchg(&mut hd, &mut w, &cap).is_none() {
            // The target closed the queue (a transport error it detected): stop using it.
            queues[qi] = None;
        }
    }
});
