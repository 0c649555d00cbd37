//! The validation kit's RC loopback self-test against the emulated adapter: two QPs of one
//! function exchange SEND / RDMA WRITE / RDMA READ over the port's local loopback, with no link;
//! with loopback switched off (NIC vport `disable_uc_local_lb`) the frames go to the wire and
//! the test fails with a retry-exceeded completion.
use crate::common;
use common::*;
use mlx5::selftest::{loopback_rc, LoopbackConfig};
use mlx5::{Error, Mlx5Verbs};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

fn verbs() -> (Rig, Mlx5Verbs<emu_connectx::SimHal, emu_connectx::Bar0>) {
    let (rig, hal, bar) = rig();
    let cx = rig.cx.clone();
    hal.set_relax_hook(Box::new(move || {
        cx.poll();
    }));
    (rig, Mlx5Verbs::bring_up(hal, bar, cfg()).unwrap())
}

#[test]
fn loopback_pair_moves_verified_data_and_leaves_nothing_behind() {
    let (rig, mut v) = verbs();
    let before = (v.live_qps(), v.live_cqs(), v.live_mkeys());
    let info = v.query_vport().unwrap();
    assert!(info.uc_local_lb && info.roce_en, "{info:?}");
    let cfg = LoopbackConfig { rounds: 8, size: 5000, ..Default::default() };
    let r = loopback_rc(&mut v, &cfg).unwrap();
    assert_eq!((r.ops, r.bytes, r.enabled_lb), (24, 24 * 5000, false));
    assert_ne!(r.qpns.0, r.qpns.1);
    assert_eq!((v.live_qps(), v.live_cqs(), v.live_mkeys()), before);
    // Nothing reached a wire (there is none); the model looped every frame.
    assert!(rig.cx.device().loopback.looped >= 24 * 5, "{}", rig.cx.device().loopback.looped);
    let st = v.shutdown().unwrap();
    assert_eq!(st.pages_given, st.pages_reclaimed);
}

#[test]
fn loopback_switched_off_is_refused_turned_back_on_or_fails_with_retry_exceeded() {
    let (rig, hal, bar) = rig();
    let cx = rig.cx.clone();
    // Armed: once both RC QPs are in RTS (GSI + 2), the model's vport loopback goes off, as if
    // another agent had set disable_uc_local_lb after the self-test checked it.
    let armed = std::sync::Arc::new(AtomicBool::new(false));
    let arm = armed.clone();
    hal.set_relax_hook(Box::new(move || {
        if arm.load(Relaxed) && cx.device().qps.values().filter(|q| q.state == emu_connectx::consts::qp::RTS).count() >= 3 {
            cx.device_mut().vport.disable_uc_local_lb = true;
            arm.store(false, Relaxed);
        }
        cx.poll();
    }));
    let mut v = Mlx5Verbs::bring_up(hal, bar, cfg()).unwrap();
    v.test_device().set_local_loopback(false).unwrap();
    assert!(!v.query_vport().unwrap().uc_local_lb);
    let cfg = LoopbackConfig { rounds: 1, size: 256, enable_local_lb: false, ..Default::default() };
    assert!(matches!(loopback_rc(&mut v, &cfg), Err(Error::Unsupported(_))));
    // The self-test turns it back on by itself and passes.
    let r = loopback_rc(&mut v, &LoopbackConfig { rounds: 2, size: 256, ..Default::default() }).unwrap();
    assert!(r.enabled_lb);
    assert!(v.query_vport().unwrap().uc_local_lb);
    // Loopback off under the running test: the SEND leaves for the (absent) wire and is retried
    // until the transport gives up: an error completion, and every object is destroyed.
    let before = (v.live_qps(), v.live_cqs(), v.live_mkeys());
    armed.store(true, Relaxed);
    let r = loopback_rc(&mut v, &LoopbackConfig { rounds: 1, size: 256, ..Default::default() });
    assert!(matches!(r, Err(Error::WorkCompletion { .. })), "{r:?}");
    assert_eq!((v.live_qps(), v.live_cqs(), v.live_mkeys()), before);
    let st = v.shutdown().unwrap();
    assert_eq!(st.pages_given, st.pages_reclaimed);
}
