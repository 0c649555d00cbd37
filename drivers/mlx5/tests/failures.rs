//! Every failure path ends in a typed error, in bounded (virtual) time, without leaks.

use crate::common;
use common::*;
use mlx5::{op, Error, Mlx5, QpKind};
use rdma::Qpn;

const SYNDROME: u32 = 0x1234_5678;

/// Every command status the PRM defines (and the model can force).
const STATUSES: [u8; 15] = [0x1, 0x2, 0x3, 0x4, 0x5, 0x6, 0x8, 0x9, 0xa, 0xf, 0x10, 0x30, 0x40, 0x50, 0x51];

/// The commands bring-up issues, in order.
const BRINGUP_OPS: [u16; 17] = [
    op::ENABLE_HCA,
    op::QUERY_ISSI,
    op::SET_ISSI,
    op::QUERY_PAGES,
    op::MANAGE_PAGES,
    op::ACCESS_REG,
    op::QUERY_HCA_CAP,
    op::SET_HCA_CAP,
    op::INIT_HCA,
    op::ALLOC_UAR,
    op::CREATE_EQ,
    op::ALLOC_PD,
    op::ALLOC_TRANSPORT_DOMAIN,
    op::QUERY_SPECIAL_CONTEXTS,
    op::QUERY_NIC_VPORT_CONTEXT,
    op::MODIFY_NIC_VPORT_CONTEXT,
    op::SET_ROCE_ADDRESS,
];

#[test]
fn each_bringup_command_failing_gives_a_typed_error_and_no_leak() {
    for &opcode in &BRINGUP_OPS {
        let (rig, hal, bar) = common::rig();
        rig.cx.faults_mut().forced.insert(opcode, (0x3, SYNDROME));
        let err = Mlx5::bring_up(hal, bar, cfg()).err().unwrap_or_else(|| panic!("0x{opcode:x}: bring-up succeeded"));
        match err {
            Error::Command { opcode: o, status: 0x3, syndrome: SYNDROME, .. } => assert_eq!(o, opcode),
            other => panic!("0x{opcode:x}: unexpected {other:?}"),
        }
        let text = err.to_string();
        assert!(text.contains(mlx5::cmd::opcode_name(opcode)) && text.contains("BAD_PARAM"), "{text}");
        // Commands that the cleanup itself needs cannot be expected to clean up.
        if opcode != op::MANAGE_PAGES && opcode != op::ENABLE_HCA {
            let c = rig.cx.counters();
            assert_eq!(c.live_objects(), 0, "0x{opcode:x}: {c:?}");
            assert_eq!(c.pages_held, 0, "0x{opcode:x}: {c:?}");
        }
        assert_eq!(rig.mem.stats().regions, 0, "0x{opcode:x}: DMA memory leaked");
    }
}

#[test]
fn every_status_is_reported_with_opcode_status_and_syndrome() {
    for &status in &STATUSES {
        let (rig, hal, bar) = common::rig();
        let mut dev = Mlx5::bring_up(hal, bar, cfg()).unwrap();
        rig.cx.faults_mut().forced.insert(op::CREATE_CQ, (status, SYNDROME ^ status as u32));
        let err = dev.create_cq(6).unwrap_err();
        assert_eq!(
            err,
            Error::Command { opcode: op::CREATE_CQ, op_mod: 0, status, syndrome: SYNDROME ^ status as u32 }
        );
        assert!(err.to_string().contains(mlx5::error::status_name(status)));
        assert_eq!(dev.live_cqs(), 0);
        assert_eq!(dev.command_errors(), mlx5::cmd::CmdErrors { refused: 1, delivery: 0, abandoned: 0 });
        // The device keeps working once the fault is gone.
        rig.cx.faults_mut().forced.clear();
        dev.create_cq(6).unwrap();
        dev.shutdown().unwrap();
        assert_eq!(rig.cx.counters().live_objects(), 0);
        assert_eq!(rig.mem.stats().regions, 0);
    }
}

#[test]
fn model_checks_surface_as_command_errors() {
    let (rig, hal, bar) = common::rig();
    let mut dev = Mlx5::bring_up(hal, bar, cfg()).unwrap();
    let cq = dev.create_cq(6).unwrap();
    let qp = dev.create_qp(QpKind::Rc, cq, cq, 4, 4, 0).unwrap();
    // INIT2RTR on a QP still in RESET: wrong state.
    let e = dev.qp_init2rtr(qp, &rc_attrs(Qpn(3))).unwrap_err();
    match e {
        Error::Command { opcode, status, .. } => {
            assert_eq!(opcode, op::INIT2RTR_QP);
            assert_ne!(status, 0);
        }
        other => panic!("{other:?}"),
    }
    // Still serving: the proper sequence works afterwards.
    dev.connect_rc(qp, &rc_attrs(Qpn(3))).unwrap();
    assert!(rig.cx.counters().cmd_failures >= 1);
    dev.shutdown().unwrap();
    assert_eq!(rig.cx.counters().live_objects(), 0);
}

#[test]
fn stuck_initializing_times_out() {
    let (rig, hal, bar) = common::rig();
    rig.cx.faults_mut().stuck_initializing = true;
    let t0 = rig.clock.now_ns();
    match Mlx5::bring_up(hal, bar, cfg()) {
        Err(Error::InitTimeout { waited_ns }) => assert!(waited_ns >= cfg().timeouts.init_ns),
        other => panic!("{:?}", other.err()),
    }
    assert!(rig.clock.now_ns() - t0 < 2 * cfg().timeouts.init_ns);
    assert_eq!(rig.mem.stats().regions, 0);
}

#[test]
fn command_that_never_completes_times_out() {
    for &opcode in &[op::ENABLE_HCA, op::QUERY_HCA_CAP, op::INIT_HCA, op::CREATE_EQ, op::SET_ROCE_ADDRESS] {
        let (rig, hal, bar) = common::rig();
        rig.cx.faults_mut().hang_opcodes.insert(opcode);
        let err = Mlx5::bring_up(hal, bar, cfg()).err().expect("must fail");
        assert!(matches!(err, Error::CmdTimeout { opcode: o, .. } if o == opcode), "0x{opcode:x}: {err:?}");
        assert!(err.to_string().contains(mlx5::cmd::opcode_name(opcode)));
        // The hung command makes the device failed: the function is reset (it holds no page
        // and no object any more), so every page is the driver's again and freed.
        assert_eq!(rig.cx.counters().flrs, 1, "reset by FLR (the emulated platform offers it): 0x{opcode:x}");
        assert_eq!(rig.cx.counters().pages_held, 0, "0x{opcode:x}");
        assert_eq!(rig.mem.stats().regions, 0, "0x{opcode:x}");
    }
    // Later commands on the failed device are refused, not hung; shutdown of the reset
    // function has nothing left to undo (recovery: tests/recovery.rs).
    let (rig, hal, bar) = common::rig();
    let mut dev = Mlx5::bring_up(hal, bar, cfg()).unwrap();
    rig.cx.faults_mut().hang_opcodes.insert(op::CREATE_CQ);
    assert!(matches!(dev.create_cq(6), Err(Error::CmdTimeout { opcode: op::CREATE_CQ, .. })));
    assert_eq!(dev.command_errors().abandoned, 1);
    assert!(matches!(dev.create_cq(6), Err(Error::DeviceFailed)));
    assert!(dev.shutdown().is_ok());
    assert_eq!(rig.mem.stats().regions, 0);
}

#[test]
fn health_counter_stopping_is_detected() {
    // While a command waits.
    let (rig, hal, bar) = common::rig();
    {
        let mut f = rig.cx.faults_mut();
        f.health_stopped = true;
        f.hang_opcodes.insert(op::INIT_HCA);
    }
    match Mlx5::bring_up(hal, bar, cfg()) {
        Err(Error::HealthStalled(r)) => assert!(r.to_string().contains("counter")),
        other => panic!("{:?}", other.err()),
    }
    // From the poll loop, after bring-up.
    let (rig, hal, bar) = common::rig();
    let mut dev = Mlx5::bring_up(hal, bar, cfg()).unwrap();
    dev.check_health().unwrap();
    rig.cx.faults_mut().health_stopped = true;
    let mut res = Ok(());
    for _ in 0..100 {
        rig.clock.advance(1_000_000);
        res = dev.check_health();
        if res.is_err() {
            break;
        }
    }
    assert!(matches!(res, Err(Error::HealthStalled(_))), "{res:?}");
}

/// A clock that jumps past the whole stall window between two samples (this CPU paused, a
/// virtual machine descheduled) is one missed sample, not dead firmware; three misses in a
/// row are.
#[test]
fn one_clock_jump_is_one_missed_health_sample() {
    let (rig, hal, bar) = common::rig();
    let mut dev = Mlx5::bring_up(hal, bar, cfg()).unwrap();
    rig.cx.faults_mut().health_stopped = true;
    // Sampled (the stall window is 50 ms, so a sample every 50/3 ms at most): the counter
    // moved since bring-up and is frozen from here on.
    rig.clock.advance(20_000_000);
    dev.check_health().unwrap();
    rig.clock.advance(10 * 50_000_000);
    dev.check_health().expect("one jump of ten windows is one miss");
    rig.clock.advance(20_000_000);
    dev.check_health().expect("two misses");
    rig.clock.advance(20_000_000);
    assert!(matches!(dev.check_health(), Err(Error::HealthStalled(_))), "the third miss in a row");
}

#[test]
fn health_syndrome_is_reported() {
    let (rig, hal, bar) = common::rig();
    let mut dev = Mlx5::bring_up(hal, bar, cfg()).unwrap();
    rig.cx.set_health_syndrome(0x8);
    let err = dev.create_cq(6).unwrap_err();
    match err {
        Error::Firmware(r) | Error::HealthStalled(r) => {
            assert_eq!(r.synd, 0x8);
            assert!(r.to_string().contains("unrecoverable hardware error"), "{r}");
        }
        other => panic!("{other:?}"),
    }
    // The device failed with that report and was reset (the syndrome cleared by the reset).
    assert!(matches!(dev.failed(), Some(Error::Firmware(r)) if r.synd == 0x8), "{:?}", dev.failed());
    assert_eq!(rig.cx.counters().flrs, 1, "reset by FLR");
}

#[test]
fn wrong_cmdif_revision_is_refused() {
    let (_rig, hal, bar) = rig_with(emu_connectx::Config::for_profile(emu_connectx::Profile { cmdif_rev: 4, ..Default::default() }));
    assert_eq!(Mlx5::bring_up(hal, bar, cfg()).err(), Some(Error::BadCmdifRev(4)));
}

#[test]
fn unusable_cmdq_geometry_is_refused() {
    let (_rig, hal, bar) = rig_with(emu_connectx::Config::for_profile(emu_connectx::Profile { log_cmdq_stride: 5, ..Default::default() }));
    assert!(matches!(Mlx5::bring_up(hal, bar, cfg()), Err(Error::BadCmdqGeometry { log_stride: 5, .. })));
}

#[test]
fn refused_pages_fail_bringup() {
    let (rig, hal, bar) = common::rig();
    rig.cx.faults_mut().refuse_pages = true;
    match Mlx5::bring_up(hal, bar, cfg()) {
        Err(Error::Command { opcode: op::MANAGE_PAGES, status, .. }) => assert_ne!(status, 0),
        other => panic!("{:?}", other.err()),
    }
    assert_eq!(rig.mem.stats().regions, 0);
}

#[test]
fn withheld_pages_are_reported_at_teardown() {
    let (rig, hal, bar) = common::rig();
    let dev = Mlx5::bring_up(hal, bar, cfg()).unwrap();
    let held = dev.pages_held() as u64;
    rig.cx.faults_mut().withhold_pages = true;
    assert_eq!(dev.shutdown().err(), Some(Error::PagesLeft(held)));
    // DISABLE_HCA completed: the function released them, so they are freed.
    assert_eq!(rig.cx.counters().pages_abandoned, held);
    assert_eq!(rig.mem.stats().regions, 0);
}

#[test]
fn page_demand_over_budget_is_refused_and_reported() {
    let (rig, hal, bar) = common::rig();
    let mut c = cfg();
    c.max_fw_pages = 100;
    let mut dev = Mlx5::bring_up(hal, bar, c).unwrap();
    let held = dev.pages_held();
    assert!(rig.cx.request_pages(1000));
    assert!(matches!(dev.poll_eq(), Err(Error::Unsupported(_))));
    assert_eq!(dev.pages_held(), held);
    assert_eq!(rig.cx.counters().pages_held, held);
    // The device still works and tears down cleanly.
    dev.create_cq(4).unwrap();
    dev.shutdown().unwrap();
    assert_eq!(rig.cx.counters().pages_held, 0);
    assert_eq!(rig.mem.stats().regions, 0);
}

/// `Mlx5Verbs::bring_up` failing after the device bring-up (a command of the GSI setup refused
/// by the firmware) shuts the device down before returning the error: no firmware page is left with the adapter, no object
/// abandoned, the function is disabled and all DMA memory is back with the host.
#[test]
fn verbs_setup_failure_shuts_the_device_down() {
    for opcode in [op::CREATE_CQ, op::CREATE_QP, op::RST2INIT_QP, op::INIT2RTR_QP, op::RTR2RTS_QP] {
        // Firmware that wants pages per QP, so the failing setup has pages beyond bring-up's.
        let (rig, hal, bar) = common::rig_with(emu_connectx::Config::for_profile(emu_connectx::Profile { pages: emu_connectx::profile::PageDemand { per_qp: 2, ..Default::default() }, ..Default::default() }));
        // The device bring-up sends none of these commands: the failure comes after it, with
        // the bring-up's pages and objects held.
        rig.cx.faults_mut().forced.insert(opcode, (0x3, SYNDROME));
        let err = mlx5::Mlx5Verbs::bring_up(hal, bar, cfg()).err().unwrap_or_else(|| panic!("0x{opcode:x}: verbs setup succeeded"));
        assert!(matches!(err, Error::Command { opcode: o, status: 0x3, syndrome: SYNDROME, .. } if o == opcode), "0x{opcode:x}: {err:?}");
        let c = rig.cx.counters();
        // Only the forced command failed: the device bring-up before it went through.
        assert_eq!(c.cmd_failures, 1, "0x{opcode:x}: {c:?}");
        assert_eq!(c.pages_held, 0, "0x{opcode:x}: {c:?}");
        assert_eq!(c.pages_abandoned, 0, "0x{opcode:x}: {c:?}");
        assert_eq!(c.objects_abandoned, 0, "0x{opcode:x}: {c:?}");
        assert_eq!(c.live_objects(), 0, "0x{opcode:x}: {c:?}");
        assert_eq!(c.dma_faults, 0, "0x{opcode:x}: {c:?}");
        assert_eq!(rig.cx.device().func, emu_connectx::FuncState::Disabled, "0x{opcode:x}");
        assert_eq!(rig.mem.stats().regions, 0, "0x{opcode:x}: DMA memory leaked");
    }
}
