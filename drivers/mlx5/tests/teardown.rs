//! The TEARDOWN_HCA ladder against the emulated ConnectX: graceful close; when the firmware
//! refuses it, fast teardown (PREPARE_FAST_TEARDOWN, `nic_interface` = DISABLED, polled) where
//! `fast_teardown` is offered; when that is missing or fails, force close. Each rung is taken
//! exactly when the one before fails, and every firmware page comes back (by MANAGE_PAGES, or
//! released by the closed function after a fast teardown).

use crate::common;
use common::*;
use emu_connectx::{Config as CxConfig, Profile};
use mlx5::{Error, Mlx5, QpKind};
use rdma::Qpn;

fn rig_for(p: &Profile) -> (Rig, emu_connectx::SimHal, emu_connectx::Bar0) {
    rig_with(CxConfig::for_profile(p.clone()))
}

fn up(p: &Profile) -> (Rig, Dev) {
    let (rig, hal, bar) = rig_for(p);
    let mut dev = Mlx5::bring_up(hal, bar, mlx5::Config { vf: p.behaviour.vf, ..cfg() }).unwrap();
    let cq = dev.create_cq(4).unwrap();
    let qp = dev.create_qp(QpKind::Rc, cq, cq, 4, 4, 0).unwrap();
    dev.connect_rc(qp, &rc_attrs(Qpn(0x42))).unwrap();
    (rig, dev)
}

/// Nothing leaked: no page or object left in the firmware, none abandoned, no DMA memory.
fn assert_clean(rig: &Rig, what: &str) {
    let c = rig.cx.counters();
    assert_eq!((c.pages_held, c.pages_abandoned, c.objects_abandoned, c.live_objects()), (0, 0, 0, 0), "{what}");
    let m = rig.mem.stats();
    assert_eq!((m.regions, m.bytes), (0, 0), "{what}: DMA memory leaked");
}

#[test]
fn graceful_teardown_is_the_first_rung_on_every_profile() {
    for p in Profile::all() {
        let (rig, dev) = up(&p);
        let s = dev.shutdown().unwrap_or_else(|e| panic!("{}: {e}", p.name));
        assert_eq!((s.fast_teardowns, s.force_teardowns), (0, 0), "{}", p.name);
        assert_eq!(rig.cx.counters().fast_teardowns_prepared, 0, "{}", p.name);
        assert_clean(&rig, p.name);
    }
}

/// Graceful refused on a part with fast teardown: PREPARE_FAST_TEARDOWN, `nic_interface`
/// DISABLED, polled until the firmware reports it; the pages are released by the closed
/// function (no MANAGE_PAGES, no DISABLE_HCA). Force close is made to fail here too: the old
/// ladder (graceful, then force) ended in an error with the function still initialized.
#[test]
fn fast_teardown_when_graceful_fails() {
    for p in [Profile::connectx5(), Profile::connectx6dx(), Profile::connectx7(), Profile::connectx7_vf()] {
        assert!(p.caps.fast_teardown, "{}", p.name);
        let (rig, dev) = up(&p);
        let given = dev.stats().pages_given - dev.stats().pages_reclaimed;
        {
            let mut f = rig.cx.faults_mut();
            f.fail_graceful_teardown = true;
            f.fail_force_teardown = true;
        }
        let s = dev.shutdown().unwrap_or_else(|e| panic!("{}: {e}", p.name));
        assert_eq!((s.fast_teardowns, s.force_teardowns), (1, 0), "{}", p.name);
        let c = rig.cx.counters();
        assert_eq!((c.fast_teardowns_prepared, c.fast_teardowns), (1, 1), "{}", p.name);
        assert!(given > 0);
        assert_eq!(s.pages_released_by_fast_teardown, c.pages_released_by_fast_teardown, "{}", p.name);
        assert!(s.pages_released_by_fast_teardown > 0, "{}", p.name);
        assert_eq!(rig.cx.device().func, emu_connectx::FuncState::Disabled, "{}", p.name);
        assert_clean(&rig, p.name);
        // The adapter comes back for the next driver (nic_interface FULL_DRIVER with the new
        // command queue address), and a graceful teardown works again.
        rig.cx.faults_mut().fail_graceful_teardown = false;
        let hal = emu_connectx::SimHal::new(rig.mem.clone(), rig.clock.clone());
        let dev = Mlx5::bring_up(hal, rig.cx.bar0(), mlx5::Config { vf: p.behaviour.vf, ..cfg() }).unwrap();
        let s = dev.shutdown().unwrap();
        assert_eq!((s.fast_teardowns, s.force_teardowns), (0, 0));
        assert_clean(&rig, p.name);
    }
}

/// Fast teardown answers state FAIL: force close follows and the pages come back by
/// MANAGE_PAGES.
#[test]
fn force_close_when_fast_teardown_fails() {
    let p = Profile::connectx6dx();
    let (rig, dev) = up(&p);
    {
        let mut f = rig.cx.faults_mut();
        f.fail_graceful_teardown = true;
        f.fail_fast_teardown = true;
    }
    let s = dev.shutdown().unwrap();
    assert_eq!((s.fast_teardowns, s.force_teardowns), (0, 1));
    assert_eq!(s.pages_released_by_fast_teardown, 0);
    assert_eq!(s.pages_given, s.pages_reclaimed);
    assert_eq!(rig.cx.counters().fast_teardowns, 0);
    assert_clean(&rig, p.name);
}

/// Fast teardown prepared but the firmware never reports `nic_interface` DISABLED: after the
/// teardown timeout (3 s, virtual) the driver gives the interface back and forces close.
#[test]
fn force_close_when_nic_interface_never_reads_disabled() {
    let p = Profile::connectx7();
    let (rig, dev) = up(&p);
    {
        let mut f = rig.cx.faults_mut();
        f.fail_graceful_teardown = true;
        f.stuck_fast_teardown = true;
    }
    let t0 = rig.clock.now_ns();
    let s = dev.shutdown().unwrap();
    assert!(rig.clock.now_ns() - t0 >= mlx5::teardown::FAST_TEARDOWN_TIMEOUT_NS);
    assert_eq!((s.fast_teardowns, s.force_teardowns), (0, 1));
    let c = rig.cx.counters();
    assert_eq!((c.fast_teardowns_prepared, c.fast_teardowns, c.ignored_nic_interface_writes), (1, 0, 1));
    assert_clean(&rig, p.name);
}

/// ConnectX-4 Lx offers no fast teardown: graceful refused goes straight to force close.
#[test]
fn force_close_directly_without_fast_teardown_cap() {
    let p = Profile::connectx4lx();
    assert!(!p.caps.fast_teardown && p.caps.force_teardown);
    let (rig, dev) = up(&p);
    rig.cx.faults_mut().fail_graceful_teardown = true;
    let s = dev.shutdown().unwrap();
    assert_eq!((s.fast_teardowns, s.force_teardowns), (0, 1));
    assert_eq!(rig.cx.counters().fast_teardowns_prepared, 0);
    assert_clean(&rig, p.name);
}

/// Every rung refused: shutdown reports the last rung's error (force state FAIL).
#[test]
fn every_rung_failing_is_reported() {
    let p = Profile::connectx5();
    let (rig, dev) = up(&p);
    {
        let mut f = rig.cx.faults_mut();
        f.fail_graceful_teardown = true;
        f.fail_fast_teardown = true;
        f.fail_force_teardown = true;
    }
    match dev.shutdown() {
        Err(Error::BadOutput { opcode, .. }) => assert_eq!(opcode, mlx5::op::TEARDOWN_HCA),
        other => panic!("expected the force-close FAIL state, got {other:?}"),
    }
}
