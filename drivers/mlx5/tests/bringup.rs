//! Full bring-up to QPs in RTS and full teardown against the emulated ConnectX.

mod common;
use common::*;
use emu_connectx::Counters;
use mlx5::{Error, Mlx5, QpKind, QpState};
use rdma::{Access, Qpn};

/// QPC state values (mlx5_ifc qpc.state): RST 0, INIT 1, RTR 2, RTS 3, ERR 6.
const QPS_RTS: u8 = 3;
const QPS_ERR: u8 = 6;
const QPS_RST: u8 = 0;

fn assert_nothing_live(c: &Counters) {
    assert_eq!(c.live_objects(), 0, "objects left: {c:?}");
    assert_eq!(c.pages_held, 0, "pages left: {c:?}");
    assert_eq!(c.gids, 0, "GIDs left: {c:?}");
    assert_eq!(c.objects_abandoned, 0, "{c:?}");
    assert_eq!(c.pages_abandoned, 0, "{c:?}");
    assert_eq!(c.dma_faults, 0, "{c:?}");
    assert_eq!(c.fw_page_corruptions, 0, "{c:?}");
}

#[test]
fn bringup_to_rts_and_teardown_leaves_nothing() {
    let (rig, hal, bar) = common::rig();
    let mut dev = Mlx5::bring_up(hal, bar, cfg()).expect("bring-up");
    assert_eq!(dev.fw.major, 16);
    assert_eq!(dev.issi, 1);
    assert!(dev.caps.roce && dev.caps.rc);
    assert!(dev.roce_enabled());
    assert_eq!(dev.mac(), emu_connectx::Config::default().mac);
    assert_ne!(dev.reserved_lkey().0, 0);

    let c = rig.cx.counters();
    // No memory key after bring-up: nothing a peer could use to reach memory.
    assert_eq!((c.uars, c.eqs, c.pds, c.tds, c.mkeys, c.gids), (1, 1, 1, 1, 0, 1), "{c:?}");
    assert_eq!(dev.live_mkeys(), 0);
    assert_eq!(c.pages_held, dev.pages_held(), "driver and firmware agree on pages");
    let cfg_emu = emu_connectx::Config::default();
    assert!(dev.pages_held() >= (cfg_emu.profile.pages.boot + cfg_emu.profile.pages.init + cfg_emu.profile.pages.regular) as usize);
    // GID 0 is ::ffff:192.168.7.2, RoCEv2.
    {
        let d = rig.cx.device();
        let g = d.gids[0].expect("GID 0 set");
        assert_eq!(&g[..16], &rdma::cm_wire::gid_from_ipv4([192, 168, 7, 2]));
        assert_eq!(d.host_endianness_le, Some(true));
    }

    let scq = dev.create_cq(8).unwrap();
    let rcq = dev.create_cq(8).unwrap();
    let gcq = dev.create_cq(6).unwrap();
    let rc = dev.create_qp(QpKind::Rc, scq, rcq, 6, 6, 0).unwrap();
    let gsi = dev.create_qp(QpKind::Gsi, gcq, gcq, 4, 4, 2).unwrap();
    dev.connect_rc(rc, &rc_attrs(Qpn(0x99))).unwrap();
    dev.activate_gsi(gsi).unwrap();
    assert_eq!(dev.qp(rc).unwrap().state, QpState::Rts);
    {
        let d = rig.cx.device();
        assert_eq!(d.qps[&rc.0].state, QPS_RTS);
        assert_eq!(d.qps[&gsi.0].state, QPS_RTS);
        assert_eq!(d.qps[&gsi.0].st, 0x8);
        assert_eq!(d.qps[&rc.0].cqn_snd, scq.0);
        assert_eq!(d.qps[&rc.0].cqn_rcv, rcq.0);
    }
    let buf = dev.hal().mem().clone();
    let _ = buf;
    let mr = dev.reg_mr(0x1_0000_3000, 3 * 4096 + 100, Access { local_write: true, remote_read: true, remote_write: false }).unwrap();
    {
        let d = rig.cx.device();
        let m = d.mkeys.values().find(|m| m.key == mr.rkey.0).expect("MTT mkey in model");
        assert_eq!(m.access_mode, 1);
        assert_eq!(m.mtt.len(), 4);
        assert!(m.rr && !m.rw);
    }
    let c = rig.cx.counters();
    assert_eq!((c.cqs, c.qps, c.mkeys), (3, 2, 1), "{c:?}");

    dev.qp_to_error(rc).unwrap();
    assert_eq!(rig.cx.device().qps[&rc.0].state, QPS_ERR);
    dev.qp_to_reset(rc).unwrap();
    assert_eq!(rig.cx.device().qps[&rc.0].state, QPS_RST);
    dev.dereg_mr(mr.lkey).unwrap();
    dev.destroy_qp(rc).unwrap();
    assert!(matches!(dev.destroy_qp(rc), Err(Error::NoSuchObject { .. })));
    dev.destroy_cq(scq).unwrap();

    // The GSI QP and its CQ, RCQ and the PA key are left for shutdown to destroy.
    let stats = dev.shutdown().expect("teardown");
    assert!(stats.commands > 30);
    assert_eq!(stats.pages_given, stats.pages_reclaimed);
    assert_nothing_live(&rig.cx.counters());
    assert_eq!(rig.cx.device().func, emu_connectx::FuncState::Disabled);
    assert_eq!(rig.mem.stats().regions, 0, "all DMA memory returned");
}

#[test]
fn page_requests_from_the_eq_give_and_take() {
    let (rig, hal, bar) = common::rig();
    let mut dev = Mlx5::bring_up(hal, bar, cfg()).unwrap();
    let before = dev.pages_held();
    assert!(rig.cx.request_pages(7), "EQ subscribed to page requests");
    assert_eq!(dev.poll_eq().unwrap(), 1);
    assert_eq!(dev.pages_held(), before + 7);
    assert_eq!(rig.cx.counters().pages_held, before + 7);
    assert!(rig.cx.request_pages(-5));
    dev.poll_eq().unwrap();
    assert_eq!(dev.pages_held(), before + 2);
    assert_eq!(rig.cx.counters().pages_held, before + 2);
    // Many EQEs: wrap the 64-entry EQ twice (owner bit flips).
    for _ in 0..150 {
        assert!(rig.cx.request_pages(1));
        dev.poll_eq().unwrap();
    }
    assert_eq!(dev.pages_held(), before + 152);
    assert!(dev.stats().page_request_events >= 152);
    dev.shutdown().unwrap();
    assert_nothing_live(&rig.cx.counters());
    assert_eq!(rig.mem.stats().regions, 0);
}

#[test]
fn bringup_without_regular_page_query_uses_page_request_events() {
    let (rig, hal, bar) = common::rig();
    let mut c = cfg();
    c.regular_pages_after_init = false;
    let dev = Mlx5::bring_up(hal, bar, c).unwrap();
    let e = emu_connectx::Config::default();
    assert_eq!(dev.pages_held(), (e.profile.pages.boot + e.profile.pages.init + e.profile.pages.regular) as usize);
    assert!(dev.stats().page_request_events >= 1);
    dev.shutdown().unwrap();
    assert_nothing_live(&rig.cx.counters());
}

#[test]
fn thousand_bringup_teardown_cycles_without_growth() {
    let (rig, _hal0, _bar0) = common::rig();
    drop((_hal0, _bar0));
    let mut baseline = None;
    let mut rss_warm = 0;
    for i in 0..1000 {
        if i == 100 {
            rss_warm = rss_kib(); // after allocator warm-up
        }
        // Fresh adapter each cycle would hide leaks in the model; reuse the same one.
        let hal = emu_connectx::SimHal::new(rig.mem.clone(), rig.clock.clone());
        let mut dev = Mlx5::bring_up(hal, rig.cx.bar0(), cfg()).unwrap_or_else(|e| panic!("cycle {i}: {e}"));
        let cq = dev.create_cq(6).unwrap();
        let qp = dev.create_qp(QpKind::Rc, cq, cq, 4, 4, 0).unwrap();
        dev.connect_rc(qp, &rc_attrs(Qpn(7))).unwrap();
        let stats = dev.shutdown().unwrap_or_else(|e| panic!("cycle {i}: {e}"));
        let c = rig.cx.counters();
        assert_eq!(c.live_objects(), 0, "cycle {i}: {c:?}");
        assert_eq!(c.pages_held, 0, "cycle {i}");
        let m = rig.mem.stats();
        assert_eq!((m.regions, m.bytes), (0, 0), "cycle {i}: DMA memory leaked");
        match baseline {
            None => baseline = Some(stats.commands),
            Some(b) => assert_eq!(stats.commands, b, "cycle {i}: command count drifted"),
        }
    }
    assert_nothing_live(&rig.cx.counters());
    let grown = rss_kib().saturating_sub(rss_warm);
    assert!(grown < 1024, "resident set grew by {grown} KiB over cycles 100..1000");
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:")).map(|l| l.to_string()))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

#[test]
fn benchmark_bringup() {
    let (rig, hal, bar) = common::rig();
    let t = std::time::Instant::now();
    let mut dev = Mlx5::bring_up(hal, bar, cfg()).unwrap();
    let up = t.elapsed();
    let pages = dev.pages_held();
    let cmds_up = dev.stats().commands;
    let cq = dev.create_cq(8).unwrap();
    let qp = dev.create_qp(QpKind::Rc, cq, cq, 6, 6, 0).unwrap();
    let t2 = std::time::Instant::now();
    dev.connect_rc(qp, &rc_attrs(Qpn(5))).unwrap();
    let connect = t2.elapsed();
    let t3 = std::time::Instant::now();
    let stats = dev.shutdown().unwrap();
    let down = t3.elapsed();
    println!(
        "mlx5 bring-up bench: {cmds_up} commands, {:?} wall, {pages} pages ({} KiB) handed to firmware, \
         virtual time {} ms; QP RST->RTS {:?}; teardown {:?}; total commands {} (model counted {})",
        up,
        pages * 4,
        rig.clock.now_ns() / 1_000_000,
        connect,
        down,
        stats.commands,
        rig.cx.counters().commands
    );
    assert_eq!(stats.commands, rig.cx.counters().commands);
}

#[test]
fn port_change_events_track_link_state() {
    let (rig, hal, bar) = common::rig();
    let mut dev = Mlx5::bring_up(hal, bar, cfg()).unwrap();
    assert_eq!(dev.link_up(), None);
    assert!(rig.cx.set_port_up(false));
    dev.poll_eq().unwrap();
    assert_eq!(dev.link_up(), Some(false));
    assert!(rig.cx.set_port_up(true));
    dev.poll_eq().unwrap();
    assert_eq!(dev.link_up(), Some(true));
    assert_eq!(dev.stats().port_change_events, 2);
    dev.shutdown().unwrap();
}

/// QUERY_VPORT_STATE tells the link state without any port-change event: up, then down, then
/// up again as the model's port changes; `link_up` follows the answer.
#[test]
fn query_link_reports_the_port_state_without_events() {
    let (rig, hal, bar) = common::rig();
    let mut dev = Mlx5::bring_up(hal, bar, cfg()).unwrap();
    // Drain whatever bring-up left so the answers below come from the query alone.
    dev.poll_eq().unwrap();
    let events_before = rig.cx.counters().eqes;
    assert_eq!(dev.query_link().unwrap(), true);
    assert_eq!(dev.link_up(), Some(true));
    rig.cx.set_port_up(false);
    assert_eq!(dev.query_link().unwrap(), false, "port down");
    assert_eq!(dev.link_up(), Some(false));
    rig.cx.set_port_up(true);
    assert_eq!(dev.query_link().unwrap(), true, "port up again");
    // The query itself raised no event.
    assert!(rig.cx.counters().eqes - events_before <= 2, "only the two port changes may add EQEs");
    let stats = dev.shutdown().unwrap();
    assert_eq!(stats.pages_given, stats.pages_reclaimed);
}

/// A fresh device whose port starts down: the query says so before any event is polled.
#[test]
fn query_link_reports_down_before_any_event() {
    let (rig, hal, bar) = common::rig();
    rig.cx.set_port_up(false);
    let mut dev = Mlx5::bring_up(hal, bar, cfg()).unwrap();
    assert_eq!(dev.query_link().unwrap(), false);
    assert_eq!(dev.link_up(), Some(false));
    dev.shutdown().unwrap();
}
