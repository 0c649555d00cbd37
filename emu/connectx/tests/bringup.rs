//! Model-level tests: raw commands built by hand (not the driver) in the order real firmware
//! expects, each error status path, and owner bits.
use crate::common;
use common::*;
use emu_connectx::consts::{delivery, event, op, qp, reg, status as st, synd};
use mlx5_ifc::ifc as l;
use mlx5_ifc::layout::{get, set};
use emu_connectx::*;
use hal::{DmaRegion, Hal, Mmio};

#[test]
fn full_bring_up_to_rts_and_teardown_leaks_nothing() {
    let mut r = Rig::new();
    let base = r.hal.mem().stats();
    let u = bring_up(&mut r);
    let c = r.cx.counters();
    assert_eq!((c.uars, c.eqs, c.pds, c.tds, c.mkeys, c.cqs, c.qps), (1, 1, 1, 1, 2, 1, 2));
    let cfg = Config::default();
    assert_eq!(c.pages_held, (cfg.profile.pages.boot + cfg.profile.pages.init + cfg.profile.pages.regular) as usize);
    // QUERY_QP reports RTS and keeps what the transitions set.
    let mut i = inp(op::QUERY_QP, 0, 16);
    set(&mut i, l::query_qp_in::qpn, u.qp_rc as u64);
    let o = r.ok(&i, 0x110);
    let q = &o[0x18..];
    assert_eq!(get(q, l::qpc::state), qp::RTS as u64);
    assert_eq!(get(q, l::qpc::remote_qpn), 0x1234);
    assert_eq!(get(q, l::qpc::next_send_psn), 0x100);
    assert_eq!(get(q, path(l::ads::udp_sport)), 0xc001);
    tear_down(&mut r, u);
    let c = r.cx.counters();
    assert_eq!(c.live_objects(), 0);
    assert_eq!(c.pages_held, 0);
    assert_eq!((c.objects_abandoned, c.pages_abandoned, c.fw_page_corruptions, c.dma_faults), (0, 0, 0, 0));
    assert_eq!(r.hal.mem().stats().bytes, base.bytes, "all DMA memory returned");
}

#[test]
fn bring_up_teardown_cycles_do_not_grow() {
    let mut r = Rig::new();
    let base = r.hal.mem().stats();
    let cycles = if cfg!(debug_assertions) { 100 } else { 1000 };
    for _ in 0..cycles {
        let u = bring_up(&mut r);
        tear_down(&mut r, u);
        let c = r.cx.counters();
        assert_eq!((c.live_objects(), c.pages_held), (0, 0));
        assert_eq!(r.hal.mem().stats().regions, base.regions);
    }
    assert_eq!(r.cx.counters().cmd_failures, 0);
}

#[test]
fn initializing_clears_after_delay_and_can_stick() {
    let r = Rig::new();
    assert_eq!(r.bar.read32_be(0x1fc) >> 31, 1, "initializing right after reset");
    assert_eq!(r.bar.read32_be(0x04) >> 16, 5, "cmd interface revision 5");
    let fw = r.bar.read32_be(0x00);
    assert_eq!((fw & 0xffff, fw >> 16), (16, 35));
    assert!(hal::poll_until(&r.hal, 10_000_000, || r.bar.read32_be(0x1fc) >> 31 == 0));
    let r = Rig::new();
    r.cx.faults_mut().stuck_initializing = true;
    assert!(!hal::poll_until(&r.hal, 120_000_000_000, || r.bar.read32_be(0x1fc) >> 31 == 0));
}

#[test]
fn cmdq_size_and_stride_are_reported() {
    let mut r = Rig::new();
    r.boot();
    let v = r.bar.read32_be(0x14);
    assert_eq!((v >> 4) & 0xf, 5);
    assert_eq!(v & 0xf, 6);
    assert_eq!(v & 0xffff_f000, r.cmdq.paddr() as u32);
    assert_eq!(r.bar.read32_be(0x10), (r.cmdq.paddr() >> 32) as u32);
}

#[test]
fn health_counter_advances_and_can_stop() {
    let r = Rig::new();
    let a = r.bar.read32_be(0x1010) & 0xff_ffff;
    r.hal.clock().advance(1_000_000_000);
    let b = r.bar.read32_be(0x1010) & 0xff_ffff;
    assert_ne!(a, b);
    r.cx.faults_mut().health_stopped = true;
    let c = r.bar.read32_be(0x1010) & 0xff_ffff;
    r.hal.clock().advance(3_000_000_000);
    assert_eq!(r.bar.read32_be(0x1010) & 0xff_ffff, c);
    r.cx.set_health_syndrome(0x5);
    assert_eq!(r.bar.read32_be(0x23c) >> 16 & 0xff, 5, "health synd at 0x23d");
    let mut b = [0u8; 4];
    b.copy_from_slice(&r.bar.read32(0x23c).to_le_bytes());
    assert_eq!(b[1], 5, "byte 0x23d");
}

#[test]
fn wrong_state_and_page_gates() {
    let mut r = Rig::new();
    r.boot();
    let d = r.cmd(&inp(op::INIT_HCA, 0, 16), 16);
    assert_eq!((d.status, d.syndrome), (st::BAD_SYS_STATE, synd::NOT_ENABLED));
    let d = r.cmd(&inp(op::ALLOC_PD, 0, 16), 16);
    assert_eq!(d.status, st::BAD_SYS_STATE);
    r.ok(&inp(op::ENABLE_HCA, 0, 16), 16);
    let d = r.cmd(&inp(op::ENABLE_HCA, 0, 16), 16);
    assert_eq!((d.status, d.syndrome), (st::BAD_SYS_STATE, synd::ALREADY_ENABLED));
    let d = r.cmd(&inp(op::INIT_HCA, 0, 16), 16);
    assert_eq!((d.status, d.syndrome), (st::BAD_SYS_STATE, synd::MISSING_BOOT_PAGES));
    let mut pages = Vec::new();
    let n = query_pages(&mut r, 1);
    give_pages(&mut r, &mut pages, n as usize);
    let d = r.cmd(&inp(op::INIT_HCA, 0, 16), 16);
    assert_eq!((d.status, d.syndrome), (st::BAD_SYS_STATE, synd::MISSING_INIT_PAGES));
    let d = r.cmd(&inp(op::ALLOC_PD, 0, 16), 16);
    assert_eq!((d.status, d.syndrome), (st::BAD_SYS_STATE, synd::NOT_INITIALIZED));
    let d = r.cmd(&inp(op::TEARDOWN_HCA, 0, 16), 16);
    assert_eq!(d.status, st::BAD_SYS_STATE);
    let n = query_pages(&mut r, 2);
    give_pages(&mut r, &mut pages, n as usize);
    r.ok(&inp(op::INIT_HCA, 0, 16), 16);
    let d = r.cmd(&inp(op::SET_HCA_CAP, 0, 0x1010), 16);
    assert_eq!(d.status, st::BAD_SYS_STATE);
    let d = r.cmd(&inp(op::DISABLE_HCA, 0, 16), 16);
    assert_eq!((d.status, d.syndrome), (st::BAD_SYS_STATE, synd::STILL_INITIALIZED));
    // Pages are not returned while the firmware still needs them.
    let mut i = inp(op::MANAGE_PAGES, 2, 16);
    set(&mut i, l::manage_pages_in::input_num_entries, 4);
    let o = r.ok(&i, 16 + 32);
    assert_eq!(get(&o, l::manage_pages_out::output_num_entries), 0);
    r.ok(&inp(op::TEARDOWN_HCA, 0, 16), 16);
    assert_eq!(query_pages(&mut r, 3), -(pages.len() as i32));
    let n = pages.len();
    assert_eq!(reclaim(&mut r, &mut pages), n);
    r.ok(&inp(op::DISABLE_HCA, 0, 16), 16);
}

#[test]
fn command_status_paths() {
    let mut r = Rig::new();
    let u = bring_up(&mut r);
    let cases: Vec<(Vec<u8>, usize, u8, u32)> = vec![
        (inp(0x0999, 0, 16), 16, st::BAD_OP, synd::UNKNOWN_OPCODE),
        (inp(op::ALLOC_PD, 1, 16), 16, st::BAD_PARAM, synd::BAD_OP_MOD),
        (inp(op::QUERY_HCA_CAP, 5 << 1, 16), 0x1010, st::BAD_PARAM, synd::BAD_OP_MOD),
        (inp(op::QUERY_PAGES, 4, 16), 16, st::BAD_PARAM, synd::BAD_OP_MOD),
        // QUERY_VPORT_STATE of the e-switch vport (1) or uplink (2), or of another vport:
        // e-switch manager rights, which this function lacks.
        (inp(op::QUERY_VPORT_STATE, 1, 16), 16, st::BAD_PARAM, synd::BAD_OP_MOD),
        (inp(op::QUERY_VPORT_STATE, 2, 16), 16, st::BAD_PARAM, synd::BAD_OP_MOD),
        ({
            let mut i = inp(op::QUERY_VPORT_STATE, 0, 16);
            set(&mut i, l::query_vport_state_in::other_vport, 1);
            set(&mut i, l::query_vport_state_in::vport_number, 1);
            i
        }, 16, st::BAD_PARAM, synd::OTHER_VPORT),
        (inp(op::ALLOC_PD, 0, 8), 16, st::BAD_INP_LEN, synd::INPUT_TOO_SHORT),
        (inp(op::CREATE_CQ, 0, 0x40), 16, st::BAD_INP_LEN, synd::INPUT_TOO_SHORT),
        (inp(op::QUERY_HCA_CAP, 1, 16), 0x100, st::BAD_OUTP_LEN, synd::OUTPUT_TOO_SHORT),
        ({
            let mut i = inp(op::DESTROY_CQ, 0, 16);
            set(&mut i, OBJ_ID, 0x77);
            i
        }, 16, st::BAD_RES, synd::NO_SUCH_CQ),
        ({
            let mut i = inp(op::DEALLOC_PD, 0, 16);
            set(&mut i, OBJ_ID, u.pd as u64);
            i
        }, 16, st::RES_BUSY, synd::IN_USE),
        ({
            let mut i = inp(op::DESTROY_EQ, 0, 16);
            set(&mut i, l::destroy_eq_in::eq_number, u.eqn as u64);
            i
        }, 16, st::RES_BUSY, synd::IN_USE),
        ({
            let mut i = inp(op::QUERY_QP, 0, 16);
            set(&mut i, l::query_qp_in::qpn, 0x9999);
            i
        }, 0x110, st::BAD_RES, synd::NO_SUCH_QP),
        ({
            let mut i = inp(op::SET_ROCE_ADDRESS, 0, 0x30);
            set(&mut i, l::set_roce_address_in::roce_address_index, 99);
            i
        }, 16, st::BAD_PARAM, synd::BAD_GID_INDEX),
        ({
            let mut i = inp(op::MANAGE_PAGES, 2, 16);
            set(&mut i, l::manage_pages_in::input_num_entries, 0xffff_ffff);
            i
        }, 16, st::BAD_OUTP_LEN, synd::OUTPUT_TOO_SHORT),
        ({
            let mut i = inp(op::MANAGE_PAGES, 2, 16);
            set(&mut i, l::manage_pages_in::input_num_entries, 4);
            i
        }, 16, st::BAD_OUTP_LEN, synd::OUTPUT_TOO_SHORT),
        ({
            let mut i = inp(op::MANAGE_PAGES, 1, 16);
            set(&mut i, l::manage_pages_in::input_num_entries, 0xffff_ffff);
            i
        }, 16, st::BAD_INP_LEN, synd::INPUT_TOO_SHORT),
        ({
            let mut i = inp(op::CREATE_FLOW_TABLE, 0, 0x40);
            set(&mut i, l::flow_table_context::log_size.at(l::create_flow_table_in::flow_table_context), 200);
            i
        }, 16, st::BAD_PARAM, synd::QUEUE_TOO_BIG),
        ({
            let mut i = inp(op::ACCESS_REG, 1, 32);
            set(&mut i, l::access_register_in::register_id, 0x1234);
            i
        }, 32, st::BAD_PARAM, synd::UNKNOWN_REGISTER),
    ];
    for (i, outlen, s, y) in cases {
        let d = r.cmd(&i, outlen);
        assert_eq!(d.delivery, 0);
        assert_eq!((d.status, d.syndrome), (s, y), "{:?}", op::name(get(&i, l::mbox_in::opcode) as u16));
    }
    // Bad QP transitions: RTS -> RTR, INIT2RTR on an RTS QP.
    let d = modify(&mut r, op::INIT2RTR_QP, u.qp_rc, |_| {});
    assert_eq!((d.status, d.syndrome), (st::BAD_QP_STATE, synd::BAD_TRANSITION));
    assert_eq!(modify(&mut r, op::QP_2ERR, u.qp_rc, |_| {}).status, 0);
    assert_eq!(modify(&mut r, op::RTR2RTS_QP, u.qp_rc, |_| {}).status, st::BAD_QP_STATE);
    assert_eq!(modify(&mut r, op::QP_2RST, u.qp_rc, |_| {}).status, 0);
    assert_eq!(modify(&mut r, op::RST2INIT_QP, u.qp_rc, |_| {}).status, 0);
    // INIT2RTR with an empty GID entry / bad MTU.
    let d = modify(&mut r, op::INIT2RTR_QP, u.qp_rc, |c| {
        set(c, l::qpc::mtu, 3);
        set(c, path(l::ads::src_addr_index), 5);
    });
    assert_eq!((d.status, d.syndrome), (st::BAD_PARAM, synd::BAD_GID_INDEX));
    let d = modify(&mut r, op::INIT2RTR_QP, u.qp_rc, |c| set(c, l::qpc::mtu, 7));
    assert_eq!((d.status, d.syndrome), (st::BAD_PARAM, synd::BAD_MTU));
    // A second QP1, a CQ on a missing EQ, a QP on a missing PD, an oversized queue.
    let mut bufs = Vec::new();
    let d = create_qp(&mut r, qp::ST_QP1, u.pd, u.uar, u.cq, &mut bufs);
    assert_eq!((d.status, d.syndrome), (st::BAD_PARAM, synd::QP1_EXISTS));
    let d = create_qp(&mut r, qp::ST_RC, 0x555, u.uar, u.cq, &mut bufs);
    assert_eq!((d.status, d.syndrome), (st::BAD_RES, synd::NO_SUCH_PD));
    let d = create_qp(&mut r, 0x9, u.pd, u.uar, u.cq, &mut bufs);
    assert_eq!((d.status, d.syndrome), (st::BAD_PARAM, synd::BAD_QP_TYPE));
    let mut i = inp(op::CREATE_CQ, 0, 0x118);
    set(&mut i[0x10..], l::cqc::log_cq_size, 4);
    set(&mut i[0x10..], l::cqc::uar_page, u.uar as u64);
    set(&mut i[0x10..], l::cqc::c_eqn, 200);
    let d = r.cmd(&i, 16);
    assert_eq!((d.status, d.syndrome), (st::BAD_RES, synd::NO_SUCH_EQ));
    set(&mut i[0x10..], l::cqc::c_eqn, u.eqn as u64);
    set(&mut i[0x10..], l::cqc::log_cq_size, 30);
    assert_eq!(r.cmd(&i, 16).syndrome, synd::QUEUE_TOO_BIG);
    set(&mut i[0x10..], l::cqc::log_cq_size, 4);
    set(&mut i, l::create_cq_in::pas, 0x1_0000_0010);
    assert_eq!(r.cmd(&i, 16).syndrome, synd::UNALIGNED_PAS);
    // MTT too short for the range.
    let mut i = inp(op::CREATE_MKEY, 0, 0x110 + 16);
    set(&mut i[0x10..], l::mkc::access_mode_1_0, 1);
    set(&mut i[0x10..], l::mkc::pd, u.pd as u64);
    set(&mut i[0x10..], l::mkc::len, 5 * 4096);
    set(&mut i[0x10..], l::mkc::log_page_size, 12);
    set(&mut i[0x10..], l::mkc::translations_octword_size, 1);
    assert_eq!(r.cmd(&i, 16).syndrome, synd::MTT_TOO_SHORT);
    // Forced status for an opcode.
    r.cx.faults_mut().forced.insert(op::ALLOC_PD, (st::NO_RES, 0x1234));
    let d = r.cmd(&inp(op::ALLOC_PD, 0, 16), 16);
    assert_eq!((d.status, d.syndrome), (st::NO_RES, 0x1234));
    r.cx.faults_mut().forced.clear();
    assert_eq!(modify(&mut r, op::QP_2RST, u.qp_rc, |_| {}).status, 0);
    tear_down(&mut r, u);
    assert_eq!(r.cx.counters().live_objects(), 0);
}

#[test]
fn delivery_status_paths() {
    let mut r = Rig::new();
    r.boot();
    r.ok(&inp(op::ENABLE_HCA, 0, 16), 16);
    // Wrong type.
    let mut e = [0u8; 64];
    set(&mut e, l::cmd_layout::r#type, 3);
    set(&mut e, l::cmd_layout::ilen, 16);
    set(&mut e, l::cmd_layout::olen, 16);
    set(&mut e, l::cmd_layout::ownership, 1);
    r.cmdq.write(0, &e);
    r.ring(0);
    let d = r.collect(0, 16);
    assert_eq!(d.delivery, delivery::BAD_COMMAND_TYPE);
    // Token mismatch in an input mailbox.
    let big = inp(op::QUERY_ISSI, 0, 16);
    let mut long = big.clone();
    long.resize(64, 0);
    let _ = r.cmd(&long, l::query_issi_out::SIZE);
    r.in_mb[0].write_u8(0x23d, 0xEE);
    r.cmdq.write_u8(0x3f, 1);
    r.ring(0);
    assert_eq!(r.collect(0, 16).delivery, delivery::TOKEN_ERR);
    // Wrong block number.
    r.in_mb[0].write_u8(0x23d, r.token);
    r.in_mb[0].write_be32(0x238, 3);
    r.cmdq.write_u8(0x3f, 1);
    r.ring(0);
    assert_eq!(r.collect(0, 16).delivery, delivery::BAD_BLOCK_NUMBER);
    // Input mailbox pointer truncated to 32 bits -> unmapped.
    r.in_mb[0].write_be32(0x238, 0);
    let pa = r.in_mb[0].paddr() & 0xffff_ffff;
    r.cmdq.write_be64(0x08, pa);
    r.cmdq.write_u8(0x3f, 1);
    r.ring(0);
    assert_eq!(r.collect(0, 16).delivery, delivery::BAD_INPUT_POINTER);
    assert!(r.cx.counters().dma_faults >= 1);
    // Output mailbox pointer misaligned.
    let d = {
        let _ = r.cmd(&inp(op::QUERY_ISSI, 0, 16), l::query_issi_out::SIZE);
        r.cmdq.write_be64(0x30, r.out_mb[0].paddr() + 8);
        r.cmdq.write_u8(0x3f, 1);
        r.ring(0);
        r.collect(0, 16)
    };
    assert_eq!(d.delivery, delivery::BAD_OUTPUT_POINTER);
    // Zero input length.
    r.cmdq.write_be32(0x04, 0);
    r.cmdq.write_u8(0x3f, 1);
    r.ring(0);
    assert_eq!(r.collect(0, 16).delivery, delivery::INPUT_LEN_ERR);
    // Ringing a slot software still owns does nothing.
    let before = r.cx.counters().commands;
    r.ring(0);
    assert_eq!(r.cx.counters().commands, before);
    assert!(r.cx.counters().stray_doorbells > 0);
}

#[test]
fn hung_command_keeps_ownership() {
    let mut r = Rig::new();
    r.boot();
    r.cx.faults_mut().hang_opcodes.insert(op::ENABLE_HCA);
    let _ = r.cmd(&inp(op::ENABLE_HCA, 0, 16), 16);
    assert!(r.owned_by_hw(0));
    assert!(!hal::poll_until(&r.hal, 60_000_000_000, || !r.owned_by_hw(0)));
    assert_eq!(r.cx.counters().hung_commands, 1);
    r.cx.faults_mut().hang_opcodes.clear();
    // Another slot still works.
    let d = r.cmd_slot(1, &inp(op::ENABLE_HCA, 0, 16), 16);
    assert_eq!(d.status, 0);
}

#[test]
fn refuse_and_bad_pages() {
    let mut r = Rig::new();
    r.boot();
    r.ok(&inp(op::ENABLE_HCA, 0, 16), 16);
    r.cx.faults_mut().refuse_pages = true;
    let p = r.hal.dma_alloc(4096, 4096).unwrap();
    let mut i = inp(op::MANAGE_PAGES, 1, 24);
    set(&mut i, l::manage_pages_in::input_num_entries, 1);
    set(&mut i, l::manage_pages_in::pas, p.paddr());
    assert_eq!(r.cmd(&i, 16).status, st::NO_RES);
    r.cx.faults_mut().refuse_pages = false;
    set(&mut i, l::manage_pages_in::pas, p.paddr() + 0x10_0000);
    assert_eq!(r.cmd(&i, 16).syndrome, synd::BAD_PAGE_ADDRESS, "unmapped page");
    set(&mut i, l::manage_pages_in::pas, p.paddr() + 8);
    assert_eq!(r.cmd(&i, 16).syndrome, synd::BAD_PAGE_ADDRESS, "unaligned page");
    set(&mut i, l::manage_pages_in::pas, p.paddr());
    r.ok(&i, 16);
    assert_eq!(r.cmd(&i, 16).syndrome, synd::DUPLICATE_PAGE);
    // The host scribbles on a firmware page: detected when it comes back.
    p.write_u8(100, 0);
    r.cx.faults_mut().withhold_pages = true;
    let mut t = inp(op::MANAGE_PAGES, 2, 16);
    set(&mut t, l::manage_pages_in::input_num_entries, 1);
    // Before INIT_HCA firmware keeps boot+init pages; 1 page < that, so none come back anyway.
    assert_eq!(get(&r.ok(&t, 24), l::manage_pages_out::output_num_entries), 0);
    r.cx.faults_mut().withhold_pages = false;
    // DISABLE_HCA with pages still held: counted as abandoned.
    r.ok(&inp(op::DISABLE_HCA, 0, 16), 16);
    let c = r.cx.counters();
    assert_eq!((c.pages_held, c.pages_abandoned), (0, 1));
}

#[test]
fn eqe_owner_bits_page_requests_and_wrap() {
    let mut r = Rig::new();
    let mut u = bring_up(&mut r);
    let n = 1u32 << LOG_EQ;
    let mut ci = 0u32;
    // Firmware asks for pages 3 * n times; the consumer follows owner bits across wraps.
    for round in 0..(3 * n) {
        assert!(r.cx.request_pages(2), "round {round}");
        let idx = (ci & (n - 1)) as usize * 64;
        let owner = u.eq_buf.read_u8(idx + 0x3f) & 1;
        assert_eq!(owner as u32, (ci >> LOG_EQ) & 1, "valid owner at ci {ci}");
        assert_eq!(u.eq_buf.read_u8(idx + 1), event::PAGE_REQUEST);
        let num = u.eq_buf.read_be32(idx + 0x20 + 4) as i32;
        assert_eq!(num, 2);
        // The next slot is not valid yet.
        let nidx = ((ci + 1) & (n - 1)) as usize * 64;
        assert_ne!((u.eq_buf.read_u8(nidx + 0x3f) & 1) as u32, ((ci + 1) >> LOG_EQ) & 1);
        give_pages(&mut r, &mut u.pages, 2);
        ci += 1;
        r.bar.write32_be(u.uar as usize * 4096 + 0x40, ((u.eqn as u32) << 24) | (ci & 0xff_ffff));
    }
    assert_eq!(r.cx.counters().eq_overruns, 0);
    // Without CI updates the EQ overruns (oi = 0) and stops.
    for _ in 0..n + 1 {
        r.cx.request_pages(1);
        give_pages(&mut r, &mut u.pages, 1);
    }
    assert_eq!(r.cx.counters().eq_overruns, 1);
    // Firmware offers pages back with a negative count... but the EQ is dead now: nothing.
    assert!(!r.cx.request_pages(-2));
    // An async EQ overrun is fatal, as on hardware: health syndrome 0xc, commands stop.
    assert_eq!((r.bar.read32_be(0x23c) >> 16) & 0xff, 0xc, "ASYNC_EQ_OVERRUN health syndrome");
    r.cmd_slot(0, &inp(op::QUERY_ISSI, 0, 16), 16);
    assert!(r.owned_by_hw(0), "no command completes after a fatal syndrome");
    r.cx.function_reset();
    drop(u);
}

#[test]
fn cqe_owner_bits_overrun_and_arm() {
    let mut r = Rig::new();
    let u = bring_up(&mut r);
    let log = 6u32;
    let n = 1u32 << log;
    let mut cqe = [0u8; 64];
    cqe[0x3f] = 0x00; // opcode REQ
    for k in 0..(2 * n) {
        assert!(r.cx.device_mut().post_cqe(u.cq, &cqe));
        let idx = (k & (n - 1)) as usize * 64;
        assert_eq!(u.cq_buf.read_u8(idx + 0x3f) & 1, ((k >> log) & 1) as u8);
        u.cq_dbr.write_be32(0, (k + 1) & 0xff_ffff);
    }
    // Arm: the next CQE posts a completion EQE... but our EQ does not subscribe to
    // completions (type 0 is never masked; the c_eqn is addressed directly).
    let eqes = r.cx.counters().eqes;
    let ci = 2 * n;
    let word = (1u64 << 28) | ci as u64;
    r.bar.write64_be(u.uar as usize * 4096 + 0x20, (word << 32) | u.cq as u64);
    assert!(r.cx.device_mut().post_cqe(u.cq, &cqe));
    assert_eq!(r.cx.counters().eqes, eqes + 1, "armed CQ raised one completion EQE");
    assert!(r.cx.device_mut().post_cqe(u.cq, &cqe));
    assert_eq!(r.cx.counters().eqes, eqes + 1, "one-shot arm");
    // Overrun: consumer stops at ci; n CQEs outstanding then one more fails.
    for _ in 2..n {
        assert!(r.cx.device_mut().post_cqe(u.cq, &cqe));
    }
    assert!(!r.cx.device_mut().post_cqe(u.cq, &cqe));
    assert_eq!(r.cx.counters().cq_overruns, 1);
    tear_down(&mut r, u);
}

#[test]
fn bad_eq_buffer_is_an_error_not_a_crash() {
    let mut r = Rig::new();
    let u = bring_up(&mut r);
    // An EQ whose page list points at unmapped memory.
    let mut i = inp(op::CREATE_EQ, 0, 0x118);
    set(&mut i[0x10..], l::eqc::log_eq_size, 4);
    set(&mut i[0x10..], l::eqc::uar_page, u.uar as u64);
    set(&mut i, l::create_eq_in::event_bitmask.element(64, 0), 1 << event::PORT_CHANGE);
    set(&mut i, l::create_eq_in::pas, 0x9_0000_0000);
    let o = r.ok(&i, 16);
    let bad = get(&o, l::create_eq_out::eq_number);
    let faults = r.cx.counters().dma_faults;
    assert!(!r.cx.device_mut().post_eqe(bad as u8, event::PORT_CHANGE, 4, &[0; 28]));
    assert_eq!(r.cx.counters().dma_faults, faults + 1);
    destroy(&mut r, op::DESTROY_EQ, bad as u32);
    tear_down(&mut r, u);
}

#[test]
fn teardown_with_live_objects_is_counted() {
    let mut r = Rig::new();
    let mut u = bring_up(&mut r);
    r.ok(&inp(op::TEARDOWN_HCA, 0, 16), 16);
    let c = r.cx.counters();
    assert_eq!(c.live_objects(), 0);
    assert_eq!(c.objects_abandoned, 9); // uar eq pd td 2 mkeys cq 2 qps
    let n = u.pages.len();
    assert_eq!(reclaim(&mut r, &mut u.pages), n);
    r.ok(&inp(op::DISABLE_HCA, 0, 16), 16);
}

#[test]
fn host_endianness_and_roce_address_roundtrip() {
    let mut r = Rig::new();
    let u = bring_up(&mut r);
    let mut i = inp(op::ACCESS_REG, 1, 32);
    set(&mut i, l::access_register_in::register_id, reg::HOST_ENDIANNESS as u64);
    let o = r.ok(&i, 32);
    assert_eq!(get(&o[16..], l::host_endianness_reg::he), 0, "little-endian host recorded");
    let mut i = inp(op::QUERY_ROCE_ADDRESS, 0, 16);
    set(&mut i, l::query_roce_address_in::roce_address_index, 0);
    let o = r.ok(&i, 0x30);
    assert_eq!(&o[0x10 + 12..0x10 + 16], &[10, 0, 0, 1]);
    assert_eq!(get(&o[0x10..], l::roce_addr_layout::roce_version), 2);
    assert_eq!(r.cx.counters().gids, 1);
    tear_down(&mut r, u);
}

#[test]
fn command_completion_eqe_when_subscribed() {
    let mut r = Rig::new();
    let u = bring_up(&mut r);
    let (eqn, buf) = create_eq(&mut r, u.uar, 1 << event::CMD, 3);
    let o = r.cmd_slot(2, &inp(op::ALLOC_PD, 0, 16), 16);
    assert_eq!(o.status, 0);
    // EQE 0: CREATE_EQ's own completion (the EQ exists when it completes); EQE 1: slot 2.
    assert_eq!(buf.read_u8(1), event::CMD);
    assert_eq!(buf.read_be32(0x20), 1 << 0);
    assert_eq!(buf.read_u8(64 + 1), event::CMD);
    assert_eq!(buf.read_be32(64 + 0x20), 1 << 2, "slot vector");
    assert_eq!(buf.read_u8(64 + 0x3f) & 1, 0);
    let mut i = inp(op::DEALLOC_PD, 0, 16);
    set(&mut i, OBJ_ID, get(&o.out, OBJ_ID));
    r.ok(&i, 16);
    destroy(&mut r, op::DESTROY_EQ, eqn as u32);
    tear_down(&mut r, u);
}

#[test]
fn relax_hook_runs_the_model() {
    let r = Rig::new();
    let cx = r.cx.clone();
    let polls = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let p = polls.clone();
    r.hal.set_relax_hook(Box::new(move || {
        cx.poll();
        p.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }));
    assert!(!hal::poll_until(&r.hal, 1_000_000, || false));
    assert!(polls.load(std::sync::atomic::Ordering::Relaxed) >= 10);
}

#[test]
fn firmware_asks_for_pages_as_qps_are_created() {
    let mut r = Rig::with(Config::for_profile(emu_connectx::Profile { pages: emu_connectx::profile::PageDemand { per_qp: 3, ..emu_connectx::Profile::default().pages }, ..emu_connectx::Profile::default() }));
    let mut u = bring_up(&mut r);
    // bring_up created 2 QPs after giving regular pages: firmware asked for 2 x 3 more via the EQ.
    let c = r.cx.counters();
    assert!(c.page_requests >= 1, "{c:?}");
    let mut ci = 0usize;
    let mut asked = 0i32;
    while ci < 16 && u.eq_buf.read_u8(ci * 64 + 0x3f) & 1 == 0 {
        assert_eq!(u.eq_buf.read_u8(ci * 64 + 1), event::PAGE_REQUEST);
        let n = u.eq_buf.read_be32(ci * 64 + 0x24) as i32;
        asked += n;
        give_pages(&mut r, &mut u.pages, n as usize);
        ci += 1;
        r.bar.write32_be(u.uar as usize * 4096 + 0x48, ((u.eqn as u32) << 24) | ci as u32);
    }
    assert_eq!(asked, 6);
    let cfg = Config::default();
    assert_eq!(r.cx.counters().pages_held, (cfg.profile.pages.boot + cfg.profile.pages.init + cfg.profile.pages.regular + 6) as usize);
    tear_down(&mut r, u);
    assert_eq!(r.cx.counters().pages_held, 0);
}

/// Garbage commands (known opcodes, random op_mod, random bytes, random lengths) never panic
/// the model, and it keeps answering afterwards.
#[test]
fn random_commands_do_not_break_the_model() {
    let mut r = Rig::new();
    let u = bring_up(&mut r);
    let mut rng = emu_roce::link::SplitMix64::new(42);
    let ops: Vec<u16> = (0x100..0x110).chain(0x200..0x204).chain(0x301..0x303).chain(0x400..0x403)
        .chain(0x500..0x50f).chain([0x750, 0x754, 0x755, 0x760, 0x761, 0x800, 0x801, 0x802, 0x803, 0x805, 0x816, 0x817])
        .chain(0x900..0x940).collect();
    let n = if cfg!(debug_assertions) { 1500 } else { 6000 };
    for _ in 0..n {
        let opc = ops[rng.below(ops.len() as u64) as usize];
        if matches!(opc, op::DISABLE_HCA | op::TEARDOWN_HCA | op::ENABLE_HCA) {
            continue;
        }
        let len = [16usize, 24, 0x40, 0x110, 0x118, 0x200, 0x348, 0x1010][rng.below(8) as usize];
        let mut i = inp(opc, (rng.below(4) as u16) * (rng.below(2) as u16), len);
        for b in i[8..].iter_mut() {
            if rng.below(4) == 0 {
                *b = rng.next_u64() as u8;
            }
        }
        let outlen = [16usize, 0x70, 0x110, 0x1010][rng.below(4) as usize];
        let d = r.cmd(&i, outlen);
        assert_eq!(d.delivery, 0);
    }
    let o = r.cmd(&inp(op::ALLOC_PD, 0, 16), 16);
    assert_eq!(o.status, 0, "still serving");
    drop(u);
}

#[test]
fn port_change_events_and_vport_state() {
    let mut r = Rig::new();
    let u = bring_up(&mut r);
    let st_of = |r: &mut Rig| get(&r.ok(&inp(op::QUERY_VPORT_STATE, 0, 16), 16), l::query_vport_state_out::state);
    assert_eq!(st_of(&mut r), 1);
    assert!(r.cx.set_port_up(false));
    assert_eq!(st_of(&mut r), 0);
    assert_eq!(u.eq_buf.read_u8(1), event::PORT_CHANGE);
    assert_eq!(u.eq_buf.read_u8(3), 1, "sub_type down");
    assert_eq!(u.eq_buf.read_u8(0x20 + 8) >> 4, 1, "port 1");
    assert_eq!(r.cx.counters().interrupts, 0, "EQ not armed");
    // Consume the EQE and arm (UAR+0x40): the next EQE is an interrupt, and it disarms.
    r.bar.write32_be(u.uar as usize * 4096 + 0x40, ((u.eqn as u32) << 24) | 1);
    assert!(r.cx.set_port_up(true));
    assert_eq!(u.eq_buf.read_u8(64 + 3), 4, "sub_type active");
    assert_eq!(r.cx.counters().interrupts, 1);
    assert!(r.cx.set_port_up(true));
    assert_eq!(r.cx.counters().interrupts, 1, "disarmed after one");
    assert_eq!(st_of(&mut r), 1);
    tear_down(&mut r, u);
}

#[test]
fn function_reset_drops_everything_and_reinitializes() {
    let mut r = Rig::new();
    let u = bring_up(&mut r);
    r.cx.function_reset();
    assert_eq!(r.bar.read32_be(0x1fc) >> 31, 1, "initializing again");
    let c = r.cx.counters();
    assert_eq!((c.live_objects(), c.pages_held), (0, 0));
    assert_eq!(c.objects_abandoned, 9);
    assert_eq!(c.pages_abandoned, u.pages.len() as u64);
    // The driver can start over.
    drop(u);
    let u = bring_up(&mut r);
    tear_down(&mut r, u);
    assert_eq!(r.cx.counters().live_objects(), 0);
}
