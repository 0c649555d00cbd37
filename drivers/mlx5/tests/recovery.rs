//! Device recovery: a dead adapter (a command that never completes, a health syndrome, an
//! internal-error event) puts the driver in the failed state: the function is reset at once
//! (PCIe FLR on a platform that offers it, else `nic_interface` = SW_RESET; the emulated
//! adapter loses everything either way and reads `initializing` until ready), outstanding
//! work completes with flush errors, posts and creates fail, releases succeed; `recover` brings
//! the device up again and RDMA works again (the loopback self-test passes). Each failure is
//! run on both platforms.
use crate::common;
use common::*;
use mlx5::selftest::{loopback_rc, LoopbackConfig};
use mlx5::{op, Error, Mlx5Verbs};
use rdma::{Access, Completion, Control, DataPath, RecvWr, SendOp, SendWr, Sge, WcStatus};

type V = Mlx5Verbs<emu_connectx::SimHal, emu_connectx::Bar0>;

/// The two platforms: one offering PCIe FLR (config-space access; the emulated function has
/// the capability), one without (the driver writes SW_RESET).
const PLATFORMS: [bool; 2] = [true, false];

fn verbs() -> (Rig, V) {
    verbs_on(true)
}

fn verbs_on(flr: bool) -> (Rig, V) {
    let (rig, hal, bar) = rig_with(emu_connectx::Config { flr, ..Default::default() });
    let cx = rig.cx.clone();
    hal.set_relax_hook(Box::new(move || {
        cx.poll();
    }));
    (rig, Mlx5Verbs::bring_up(hal, bar, cfg()).unwrap())
}

/// A connected-enough RC QP (RTS towards itself) with receives and a send posted, its CQ,
/// buffer and key: what an app holds when the device dies.
struct Held {
    qp: rdma::Qpn,
    cq: rdma::Cqn,
    lkey: rdma::Lkey,
    _buf: emu_connectx::SimDma,
}

fn hold(v: &mut V) -> Held {
    let cq = v.create_cq(16).unwrap();
    let qp = v.create_rc_qp(cq, cq, 8, 8).unwrap();
    let buf = v.alloc_buf(4096).unwrap();
    let (lkey, _) = v.reg_mr(hal::DmaRegion::paddr(&buf), 4096, Access { local_write: true, remote_read: false, remote_write: false }).unwrap();
    for i in 0..3u64 {
        v.post_recv(qp, &RecvWr { wr_id: 100 + i, sge: Sge { addr: hal::DmaRegion::paddr(&buf), len: 256, lkey } }).unwrap();
    }
    Held { qp, cq, lkey, _buf: buf }
}

/// The device failed: posted receives come back flushed, posts and creates fail, releases
/// succeed; the adapter was reset (everything dropped); then recover and run RDMA again.
fn flush_release_recover(rig: &Rig, v: &mut V, h: Held, flr: bool) {
    assert!(v.device_failed());
    let flr = u64::from(flr);
    assert_eq!((rig.cx.counters().flrs, rig.cx.counters().sw_resets), (flr, 1 - flr), "the function was reset once, by one means");
    assert_eq!(v.stats().flr_resets, flr);
    assert_eq!(rig.cx.counters().live_objects(), 0, "the reset dropped every object");
    assert_eq!(rig.cx.counters().pages_held, 0);
    // As hardware after a reset: `initializing` until the firmware is ready (virtual time).
    let initializing = |rig: &Rig| hal::Mmio::read32_be(&rig.cx.bar0(), 0x1fc) >> 31;
    assert_eq!(initializing(rig), 1, "initializing right after the reset");
    let mut wc = [Completion::default(); 8];
    let n = v.poll_cq(h.cq, &mut wc);
    assert_eq!(n, 3, "every posted receive completes");
    assert!(wc[..n].iter().all(|c| c.status == WcStatus::WrFlushed && c.qpn == h.qp));
    assert_eq!(wc[..n].iter().map(|c| c.wr_id).collect::<Vec<_>>(), vec![100, 101, 102]);
    assert_eq!(v.poll_cq(h.cq, &mut wc), 0, "each once");
    let send = SendWr { wr_id: 7, op: SendOp::Send, sge: Sge { addr: 0, len: 0, lkey: h.lkey }, signaled: true, fence: false, ud: None };
    assert_eq!(v.post_send(h.qp, &send), Err(Error::DeviceFailed));
    assert_eq!(v.create_cq(4), Err(Error::DeviceFailed));
    v.qp_to_error(h.qp).unwrap();
    v.destroy_qp(h.qp).unwrap();
    v.destroy_cq(h.cq).unwrap();
    v.dereg_mr(h.lkey).unwrap();
    let old_gsi = v.gsi_qp();
    assert!(v.recover_device(), "{:?}", v.last_poll_error);
    assert!(!v.device_failed());
    let st = v.stats();
    assert_eq!((st.device_failures, st.recoveries, st.flushed_on_failure, st.objects_forgotten), (1, 1, 3, 0), "{st:?}");
    // GSI again (the old one went with the reset; the model numbers objects afresh).
    let gsi = v.gsi_qp();
    assert_eq!(v.test_device().qp(gsi).map(|q| q.kind), Some(mlx5::QpKind::Gsi));
    let _ = old_gsi;
    let r = loopback_rc(v, &LoopbackConfig { rounds: 4, size: 3000, ..Default::default() }).unwrap();
    assert_eq!(r.ops, 12);
    v.test_device().check_health().unwrap();
}

#[test]
fn hung_command_resets_flushes_and_recovers() {
    for flr in PLATFORMS {
        let (rig, mut v) = verbs_on(flr);
        let h = hold(&mut v);
        rig.cx.faults_mut().hang_opcodes.insert(op::CREATE_CQ);
        assert!(matches!(v.create_cq(4), Err(Error::CmdTimeout { opcode: op::CREATE_CQ, .. })));
        // The hang is a property of this firmware; after the reset it is gone in this test.
        rig.cx.faults_mut().hang_opcodes.clear();
        flush_release_recover(&rig, &mut v, h, flr);
        assert_eq!(v.command_errors().abandoned, 1, "the hung command stays counted across the new queue");
        let st = v.shutdown().unwrap();
        assert_eq!(st.recoveries, 1);
        assert_eq!(rig.mem.stats().regions, 0, "no DMA memory left behind");
    }
}

#[test]
fn health_syndrome_found_by_the_poll_loop_resets_and_recovers() {
    for flr in PLATFORMS {
        let (rig, mut v) = verbs_on(flr);
        let h = hold(&mut v);
        rig.cx.set_health_syndrome(0x1);
        rig.clock.advance(1_000_000);
        v.poll();
        assert!(matches!(v.failure(), Some(Error::Firmware(r)) if r.synd == 0x1), "{:?}", v.failure());
        flush_release_recover(&rig, &mut v, h, flr);
        assert_eq!(v.health_report().synd, 0, "the reset cleared the syndrome");
        v.shutdown().unwrap();
        assert_eq!(rig.mem.stats().regions, 0);
    }
}

#[test]
fn internal_error_event_resets_and_recovers() {
    for flr in PLATFORMS {
        let (rig, mut v) = verbs_on(flr);
        let h = hold(&mut v);
        assert!(rig.cx.raise_internal_error(), "the EQ takes the event");
        v.poll();
        assert!(matches!(v.failure(), Some(Error::FatalEvent { event_type: 0x08, .. })), "{:?}", v.failure());
        flush_release_recover(&rig, &mut v, h, flr);
        v.shutdown().unwrap();
        assert_eq!(rig.mem.stats().regions, 0);
    }
}

#[test]
fn recovery_while_the_firmware_still_hangs_fails_and_can_be_retried() {
    let (rig, mut v) = verbs();
    rig.cx.faults_mut().hang_opcodes.insert(op::CREATE_QP);
    assert!(v.create_rc_qp(v.gsi_cq(), v.gsi_cq(), 4, 4).is_err());
    assert!(v.device_failed());
    // Bring-up succeeds, the GSI QP's CREATE_QP hangs: failed (and reset) again.
    assert!(!v.recover_device());
    assert!(v.device_failed());
    assert_eq!(rig.cx.counters().flrs, 2);
    rig.cx.faults_mut().hang_opcodes.clear();
    assert!(v.recover_device(), "{:?}", v.last_poll_error);
    assert_eq!((v.stats().device_failures, v.stats().recoveries), (1, 1));
    let r = loopback_rc(&mut v, &LoopbackConfig { rounds: 2, size: 100, ..Default::default() }).unwrap();
    assert_eq!(r.ops, 6);
    v.shutdown().unwrap();
}

/// A QP in RTS (connected to itself) with three receives posted.
fn hold_connected(v: &mut V) -> Held {
    let h = hold(v);
    v.connect_rc_qp(h.qp, &rc_attrs(h.qp)).unwrap();
    h
}

fn flushed_receives(rig: &Rig, v: &mut V, cq: rdma::Cqn) -> Vec<u64> {
    let mut got = Vec::new();
    let mut wc = [Completion::default(); 8];
    for _ in 0..20 {
        rig.cx.poll();
        v.poll();
        let n = v.poll_cq(cq, &mut wc);
        for c in &wc[..n] {
            assert_eq!(c.status, WcStatus::WrFlushed, "{c:?}");
            got.push(c.wr_id);
        }
    }
    got
}

#[test]
fn qp_driven_to_error_by_the_adapter_flushes_its_work_and_the_device_stays_up() {
    let (rig, mut v) = verbs();
    let h = hold_connected(&mut v);
    assert_eq!(rig.cx.inject_qp_error(0), Some(h.qp.0));
    assert_eq!(flushed_receives(&rig, &mut v, h.cq), vec![100, 101, 102]);
    let ev = v.test_device().take_event().expect("WQ_CATAS_ERROR reported");
    assert_eq!((ev.event_type, ev.object), (mlx5_ifc::event::WQ_CATAS_ERROR, h.qp.0));
    assert!(!v.device_failed());
    v.destroy_qp(h.qp).unwrap();
    v.destroy_cq(h.cq).unwrap();
    v.dereg_mr(h.lkey).unwrap();
    let r = loopback_rc(&mut v, &LoopbackConfig { rounds: 2, size: 100, ..Default::default() }).unwrap();
    assert_eq!(r.ops, 6);
    v.shutdown().unwrap();
}

#[test]
fn cq_overrun_flushes_the_work_of_its_qps_in_the_driver_and_the_device_stays_up() {
    let (rig, mut v) = verbs();
    let h = hold_connected(&mut v);
    assert_eq!(rig.cx.inject_cq_overrun(0), Some(h.cq.0));
    assert_eq!(flushed_receives(&rig, &mut v, h.cq), vec![100, 101, 102]);
    let ev = v.test_device().take_event().expect("CQ_ERROR reported");
    assert_eq!((ev.event_type, ev.object, ev.syndrome), (mlx5_ifc::event::CQ_ERROR, h.cq.0, 1));
    assert!(v.test_device().cq(h.cq).unwrap().broken);
    assert!(!v.device_failed());
    v.destroy_qp(h.qp).unwrap();
    v.destroy_cq(h.cq).unwrap();
    v.dereg_mr(h.lkey).unwrap();
    let r = loopback_rc(&mut v, &LoopbackConfig { rounds: 2, size: 100, ..Default::default() }).unwrap();
    assert_eq!(r.ops, 6);
    v.shutdown().unwrap();
}
