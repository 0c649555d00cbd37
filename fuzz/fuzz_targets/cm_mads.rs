//! Sequences of CM MADs into both IB CM state machines (rdma::cm) over the soft fabric, with a
//! live connection established first. Input: steps of [ctl][256-byte MAD]; ctl bit 0 sends
//! towards the host instead of the target, bit 1 points the comm IDs at the live connection so
//! the messages reach its states. Afterwards every QP a CM owns must still exist.
#![no_main]

#[allow(dead_code, unused_imports)]
#[path = "../../drivers/rdma/tests/common/mod.rs"]
mod common;

use common::*;
use rdma::cm::GSI_QKEY;
use rdma::Qpn;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut w = World::new();
    w.t.cm.listen(4420).expect("listen");
    let (hid, tid, _, _) = w.establish(4420);
    for step in data.chunks_exact(1 + 256).take(32) {
        let (ctl, mut mad) = (step[0], step[1..].to_vec());
        let to_host = ctl & 1 != 0;
        if ctl & 2 != 0 {
            let (local, remote) = if to_host { (tid, hid) } else { (hid, tid) };
            mad[24..28].copy_from_slice(&local.0.to_be_bytes());
            mad[28..32].copy_from_slice(&remote.0.to_be_bytes());
        }
        let (src, dst) = if to_host { (TARGET, HOST) } else { (HOST, TARGET) };
        w.f.inject_ud(src, Qpn(1), dst, Qpn(1), GSI_QKEY, &mad);
        w.run(1, 3_000_000);
    }
    w.run(50, 5_000_000);
    assert_eq!(w.t.dev.resources().qps, w.t.cm.qp_count(), "target QPs vs CM");
    assert_eq!(w.h.dev.resources().qps, w.h.cm.qp_count(), "host QPs vs CM");
});
