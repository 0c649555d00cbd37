//! Behaviours of real ConnectX firmware that the driver must meet, one test each, against the
//! device profiles of the emulated adapter: page requests raised in the middle of a command,
//! polled CQs and doorbell recovery, timestamp formats on real-time-only clocks, the async EQ
//! under an event storm, SQ start alignment, virtual functions, RDMA read depth limits,
//! teardown fallback; and bring-up plus 1,000 bring-up/teardown cycles for every profile.
//! Where a test shows the old driver's failure it drives the adapter the way the old driver did.

use crate::common;
use common::*;
use emu_connectx::{Config as CxConfig, Profile};
use mlx5::{Error, Mlx5, QpKind};
use hal::{DmaRegion as _, Hal as _};
use rdma::Qpn;

fn rig_for(p: Profile) -> (Rig, emu_connectx::SimHal, emu_connectx::Bar0) {
    rig_with(CxConfig::for_profile(p))
}

fn drv_for(p: &Profile) -> mlx5::Config {
    mlx5::Config { vf: p.behaviour.vf, ..cfg() }
}

#[test]
fn every_profile_brings_up_and_shuts_down_clean() {
    for p in Profile::all() {
        let (rig, hal, bar) = rig_for(p.clone());
        let mut dev = Mlx5::bring_up(hal, bar, drv_for(&p)).unwrap_or_else(|e| panic!("{}: {e}", p.name));
        assert_eq!(dev.fw.major, p.fw.major, "{}", p.name);
        let cq = dev.create_cq(4).unwrap();
        let qp = dev.create_qp(QpKind::Rc, cq, cq, 4, 4, 0).unwrap();
        dev.connect_rc(qp, &rc_attrs(Qpn(0x42))).unwrap_or_else(|e| panic!("{}: {e}", p.name));
        dev.shutdown().unwrap_or_else(|e| panic!("{}: {e}", p.name));
        let c = rig.cx.counters();
        assert_eq!((c.live_objects(), c.pages_held, c.pages_abandoned, c.objects_abandoned), (0, 0, 0, 0), "{}", p.name);
        assert_eq!(c.eq_overruns, 0, "{}", p.name);
    }
}

#[test]
fn every_profile_survives_1000_bringup_teardown_cycles_leak_free() {
    for p in Profile::all() {
        let (rig, _hal, _bar) = rig_for(p.clone());
        for i in 0..1000 {
            let hal = emu_connectx::SimHal::new(rig.mem.clone(), rig.clock.clone());
            let mut dev = Mlx5::bring_up(hal, rig.cx.bar0(), drv_for(&p)).unwrap_or_else(|e| panic!("{} cycle {i}: {e}", p.name));
            if i % 100 == 0 {
                // Now and then with objects that make mid-command page requests.
                let cq = dev.create_cq(2).unwrap();
                dev.create_qp(QpKind::Rc, cq, cq, 2, 2, 0).unwrap();
            }
            dev.shutdown().unwrap_or_else(|e| panic!("{} cycle {i}: {e}", p.name));
        }
        let c = rig.cx.counters();
        assert_eq!((c.live_objects(), c.pages_held, c.pages_abandoned, c.objects_abandoned), (0, 0, 0, 0), "{}", p.name);
        let m = rig.mem.stats();
        assert_eq!((m.regions, m.bytes), (0, 0), "{}: DMA memory leaked", p.name);
    }
}

/// 1. ConnectX-6 Dx/7 ask for pages while executing CREATE_QP/CQ and hold the command until
/// MANAGE_PAGES gives them. The driver services the event queue while it waits and answers on
/// its reserved slot; a driver that only waits on its one slot (the old one) times out.
#[test]
fn page_request_while_create_qp_waits_is_answered_on_the_reserved_slot() {
    let p = Profile::connectx7();
    let (rig, hal, bar) = rig_for(p.clone());
    let mut dev = Mlx5::bring_up(hal, bar, drv_for(&p)).unwrap();
    let before = rig.cx.counters();
    let cq = dev.create_cq(4).unwrap();
    let qp = dev.create_qp(QpKind::Rc, cq, cq, 4, 4, 0).unwrap();
    dev.connect_rc(qp, &rc_attrs(Qpn(0x42))).unwrap();
    let c = rig.cx.counters();
    assert_eq!(c.mid_command_page_requests - before.mid_command_page_requests, 2, "CREATE_CQ and CREATE_QP each waited for pages");
    assert_eq!(c.hung_commands, 0);
    assert_eq!(dev.pages_held(), c.pages_held);
    dev.shutdown().unwrap();
    assert_eq!(rig.cx.counters().pages_held, 0);
    // A driver that waits only on its one slot never sees this complete: shown at the command
    // interface in emu-connectx tests/rules.rs (command_held_until_pages_given_on_another_slot).
}

/// 2. Polled CQs carry arm sequence 2 in the doorbell record, so doorbell recovery leaves them
/// alone; a completion event that does arrive (EQE type 0) is consumed, not an error.
#[test]
fn polled_cq_arm_word_keeps_doorbell_recovery_away_and_completion_events_are_not_errors() {
    let p = Profile::connectx6dx();
    let (rig, hal, bar) = rig_for(p.clone());
    let mut dev = Mlx5::bring_up(hal, bar, drv_for(&p)).unwrap();
    let cq = dev.create_cq(4).unwrap();
    let dbr = rig.cx.device().cqs[&cq.0].dbr;
    let mut w = [0u8; 4];
    rig.mem.read(dbr + 4, &mut w);
    assert_eq!(u32::from_be_bytes(w), 2 << 28, "arm word: sequence 2 (dr_send.c)");
    for _ in 0..100 {
        assert!(rig.cx.device_mut().post_cqe(cq.0, &[0u8; 64]));
        let mut out = [rdma::Completion::default(); 4];
        let _ = dev.poll_cq(cq, &mut out);
    }
    assert_eq!(rig.cx.counters().db_recoveries, 0);

    // The old driver left the arm word 0: every CQE brings a recovery completion event.
    rig.mem.write(dbr + 4, &[0u8; 4]);
    for _ in 0..10 {
        assert!(rig.cx.device_mut().post_cqe(cq.0, &[0u8; 64]));
    }
    assert_eq!(rig.cx.counters().db_recoveries, 10);
    dev.poll_eq().unwrap();
    let s = dev.stats();
    assert_eq!((s.completion_events, s.error_events), (10, 0), "type 0 counted, not an error");
    assert!(dev.take_event().is_none());
    dev.shutdown().unwrap();
}

/// 3. A real-time-only clock (ConnectX-7 so configured) refuses ts_format 0 (free-running);
/// the driver takes the format from roce_cap.qp_ts_format / sq_ts_format / rq_ts_format.
#[test]
fn real_time_only_clock_refuses_free_running_timestamps() {
    let p = Profile::connectx7();
    let (_rig, hal, bar) = rig_for(p.clone());
    let mut dev = Mlx5::bring_up(hal, bar, drv_for(&p)).unwrap();
    assert_eq!(dev.caps.qp_ts_format, 1, "real time only");
    let cq = dev.create_cq(4).unwrap();
    dev.create_qp(QpKind::Rc, cq, cq, 4, 4, 0).expect("ts_format DEFAULT accepted");
    dev.enable_raw_eth().expect("raw SQ and RQ with ts_format DEFAULT");
    // What the old driver sent: ts_format 0.
    dev.caps.qp_ts_format = 0;
    let r = dev.create_qp(QpKind::Rc, cq, cq, 4, 4, 0);
    assert!(matches!(r, Err(Error::Command { opcode: 0x500, status: 0x3, syndrome, .. }) if syndrome == emu_connectx::consts::synd::BAD_TS_FORMAT), "{r:?}");
    dev.shutdown().unwrap();
    // Free-running-only parts still get ts_format 0.
    let p = Profile::connectx5();
    let (rig, hal, bar) = rig_for(p.clone());
    let mut dev = Mlx5::bring_up(hal, bar, drv_for(&p)).unwrap();
    let cq = dev.create_cq(4).unwrap();
    let qp = dev.create_qp(QpKind::Rc, cq, cq, 4, 4, 0).unwrap();
    let ts = mlx5::layout::get(&rig.cx.device().qps[&qp.0].qpc, mlx5::ifc::qpc::ts_format);
    assert_eq!(ts, 0);
    dev.shutdown().unwrap();
}

/// 4. An async EQ overrun is fatal on hardware. A storm of 150 events arriving while the
/// driver is busy kills the firmware with the old 64-entry EQ and is absorbed by the EQ sized
/// with rdma-core's 0x80 spare entries.
#[test]
fn event_storm_overruns_the_old_eq_fatally_and_the_spared_eq_survives() {
    for (spare, survives) in [(0u32, false), (0x80, true)] {
        let p = Profile::connectx5();
        let (rig, hal, bar) = rig_for(p.clone());
        let mut dev = Mlx5::bring_up(hal, bar, mlx5::Config { eq_spare_entries: spare, ..drv_for(&p) }).unwrap();
        for i in 0..150 {
            rig.cx.set_port_up(i % 2 == 0);
        }
        let r = dev.poll_eq().and_then(|_| dev.check_health());
        if survives {
            r.unwrap();
            assert_eq!(dev.stats().port_change_events, 150);
            assert_eq!(rig.cx.counters().eq_overruns, 0);
            dev.shutdown().unwrap();
        } else {
            assert!(matches!(r, Err(Error::Firmware(h)) if h.synd == 0xc), "{r:?}");
            assert_eq!(rig.cx.counters().eq_overruns, 1);
        }
    }
}

/// 5. The SQ starts after the RQ and must start on a 64-byte WQEBB: a 1-entry RQ of 16-byte
/// WQEs would put it at byte 16. The model refuses that; the driver grows the RQ to 64 bytes.
#[test]
fn misaligned_sq_is_refused_and_the_driver_aligns_it() {
    let p = Profile::connectx5();
    let (rig, hal, bar) = rig_for(p.clone());
    let mut dev = Mlx5::bring_up(hal, bar, drv_for(&p)).unwrap();
    let cq = dev.create_cq(4).unwrap();
    let qp = dev.create_qp(QpKind::Rc, cq, cq, 4, 0, 0).unwrap();
    let rq_bytes = rig.cx.device().qps[&qp.0].rq_bytes();
    assert_eq!(rq_bytes, 64, "RQ grown to one WQEBB");
    assert!(emu_connectx::Device::sq_start_ok(16, true).is_err(), "SQ at byte 16 refused");
    dev.shutdown().unwrap();
}

/// 6. A VF: no HOST_ENDIANNESS (the firmware refuses it from a VF), pages for the function
/// the firmware names.
#[test]
fn vf_brings_up_without_host_endianness_and_gives_pages_to_its_own_function() {
    let p = Profile::connectx7_vf();
    let (rig, hal, bar) = rig_for(p.clone());
    let mut dev = Mlx5::bring_up(hal.clone(), bar.clone(), drv_for(&p)).unwrap();
    assert!(rig.cx.device().host_endianness_le.is_none(), "not written on a VF");
    assert!(rig.cx.request_pages(5));
    dev.poll_eq().unwrap();
    assert_eq!(dev.pages_held(), rig.cx.counters().pages_held);
    dev.shutdown().unwrap();
    assert_eq!(rig.cx.counters().pages_held, 0);
    // The old driver wrote HOST_ENDIANNESS on the VF too: refused, bring-up fails.
    let r = Mlx5::bring_up(hal, bar, mlx5::Config { vf: false, ..drv_for(&p) });
    assert!(matches!(r, Err(Error::Command { opcode: 0x805, status: 0x3, .. })), "{:?}", r.err());
}

/// 7a. log_sra_max / log_rra_max are clamped to log_max_ra_req_qp / log_max_ra_res_qp; the
/// model refuses deeper values (the old driver passed the peer's 64 straight through).
#[test]
fn rdma_read_depth_is_clamped_to_the_caps() {
    let p = Profile::connectx5();
    let (rig, hal, bar) = rig_for(p.clone());
    let mut dev = Mlx5::bring_up(hal, bar, drv_for(&p)).unwrap();
    let cq = dev.create_cq(4).unwrap();
    let qp = dev.create_qp(QpKind::Rc, cq, cq, 4, 4, 0).unwrap();
    let a = rdma::RcConnectAttrs { max_rd_atomic: 64, max_dest_rd_atomic: 64, ..rc_attrs(Qpn(0x42)) };
    dev.connect_rc(qp, &a).unwrap();
    let d = rig.cx.device();
    let qpc = &d.qps[&qp.0].qpc;
    use mlx5::{ifc::qpc as f, layout::get};
    assert_eq!((get(qpc, f::log_sra_max), get(qpc, f::log_rra_max)), (4, 4));
    assert!(d.ra_depth_ok(Some(6), Some(6)).is_err(), "log 6 (64) refused");
    drop(d);
    dev.shutdown().unwrap();
}

/// 7b. Teardown fallbacks (graceful, fast, force): `tests/teardown.rs`.

/// A long-running appliance creates and destroys QPs, CQs and MKeys all day (one set per
/// connection). 2,000 cycles of each on the default profile and on connectx7 (which asks for
/// pages in the middle of commands and reclaims them on destroy), with an async event (port
/// change) raised every cycle and the caller never polling the EQ itself: the commands keep
/// the EQ consumed, so no overrun (fatal, health syndrome 0xc), no dead command queue, every
/// event seen, every page and object accounted for.
#[test]
fn two_thousand_object_create_destroy_cycles_keep_the_eq_consumed() {
    for p in [Profile::connectx5(), Profile::connectx7()] {
        let (rig, hal, bar) = rig_for(p.clone());
        let mut dev = Mlx5::bring_up(hal, bar, drv_for(&p)).unwrap();
        let buf = dev.hal().dma_alloc(4096, 4096).unwrap();
        let access = rdma::Access { local_write: true, remote_read: true, remote_write: true };
        for i in 0..2000 {
            let run = (|| -> Result<(), Error> {
                let cq = dev.create_cq(4)?;
                let qp = dev.create_qp(QpKind::Rc, cq, cq, 4, 4, 0)?;
                let mk = dev.reg_mr(buf.paddr(), 4096, access)?;
                dev.dereg_mr(mk.lkey)?;
                dev.destroy_qp(qp)?;
                dev.destroy_cq(cq)?;
                dev.check_health()
            })();
            rig.cx.set_port_up(i % 2 == 1);
            run.unwrap_or_else(|e| panic!("{} cycle {i}: {e} (eq overruns {})", p.name, rig.cx.counters().eq_overruns));
        }
        let c = rig.cx.counters();
        assert_eq!((c.eq_overruns, c.hung_commands), (0, 0), "{}", p.name);
        assert_eq!(dev.pages_held(), c.pages_held, "{}", p.name);
        dev.poll_eq().unwrap();
        assert_eq!(dev.stats().port_change_events, 2000, "{}", p.name);
        drop(buf);
        dev.shutdown().unwrap_or_else(|e| panic!("{}: {e}", p.name));
        let c = rig.cx.counters();
        assert_eq!((c.live_objects(), c.pages_held, c.pages_abandoned, c.objects_abandoned), (0, 0, 0, 0), "{}", p.name);
    }
}
