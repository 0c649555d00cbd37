//! Profile-driven firmware rules at the command interface, without the driver: a command held
//! for pages asked in the middle of it, profile identity in the init segment and caps.

use crate::common;
use common::*;
use emu_connectx::consts::{event, op};
use mlx5_ifc::ifc as l;
use mlx5_ifc::layout::{get, set};
use emu_connectx::profile::PageDemand;
use emu_connectx::{Config, Profile};
use hal::{DmaRegion, Hal, Mmio};

/// A command the profile makes wait for pages stays owned by hardware (a driver waiting only
/// on that slot would time out) until MANAGE_PAGES, on another slot, gives what the
/// page-request event asked for; then it completes.
#[test]
fn command_held_until_pages_given_on_another_slot() {
    let p = Profile {
        pages: PageDemand { mid_command: 3, mid_command_opcodes: &[op::QUERY_CQ], ..PageDemand::default() },
        ..Profile::connectx5()
    };
    let mut r = Rig::with(Config::for_profile(p));
    let up = bring_up(&mut r);
    let eqes_before = r.cx.counters().eqes;
    let mut i = inp(op::QUERY_CQ, 0, 16);
    set(&mut i, OBJ_ID, up.cq as u64);
    let d = r.cmd_slot(0, &i, l::query_cq_out::SIZE);
    assert!(r.owned_by_hw(0), "QUERY_CQ held: {d:?}");
    assert_eq!(r.cx.counters().eqes, eqes_before + 1, "one page-request EQE");
    // Find it in the EQ: type PAGE_REQUEST, 3 pages, function 0.
    let n = 1usize << LOG_EQ;
    let found = (0..n).map(|k| {
        let mut e = [0u8; 64];
        up.eq_buf.read(k * 64, &mut e);
        e
    }).find(|e| e[1] == event::PAGE_REQUEST && i32::from_be_bytes(e[0x24..0x28].try_into().unwrap()) == 3);
    let e = found.expect("page-request EQE");
    assert_eq!(u16::from_be_bytes([e[0x22], e[0x23]]), 0, "function 0 (a PF)");
    // Ringing slot 0 again does not complete it; MANAGE_PAGES on slot 31 does.
    r.ring(0);
    assert!(r.owned_by_hw(0));
    let mut keep = Vec::new();
    let mut g = inp(op::MANAGE_PAGES, 1, 16 + 8 * 3);
    set(&mut g, l::manage_pages_in::input_num_entries, 3);
    for k in 0..3 {
        let pg = r.hal.dma_alloc(4096, 4096).unwrap();
        set(&mut g, l::manage_pages_in::pas.at_byte(8 * k), pg.paddr());
        keep.push(pg);
    }
    let d = r.cmd_slot(31, &g, 16);
    assert_eq!((d.delivery, d.status), (0, 0));
    assert!(!r.owned_by_hw(0), "QUERY_CQ completed once the pages came");
    let d = r.collect(0, l::query_cq_out::SIZE);
    assert_eq!((d.delivery, d.status), (0, 0));
    assert_eq!(r.cx.counters().mid_command_page_requests, 1);
}

#[test]
fn init_segment_and_caps_follow_the_profile() {
    for p in Profile::all() {
        let mut r = Rig::with(Config::for_profile(p.clone()));
        r.boot();
        let fw = r.bar.read32_be(0);
        assert_eq!((fw & 0xffff, fw >> 16), (p.fw.major as u32, p.fw.minor as u32), "{}", p.name);
        r.ok(&inp(op::ENABLE_HCA, 0, 16), 16);
        let o = r.ok(&inp(op::QUERY_ISSI, 0, 16), l::query_issi_out::SIZE);
        assert_eq!(get(&o, l::query_issi_out::supported_issi_dw0), p.supported_issi as u64);
        let cap = r.ok(&inp(op::QUERY_HCA_CAP, 1, 16), 0x1010);
        let c = &cap[0x10..];
        assert_eq!(get(c, l::cmd_hca_cap::log_max_ra_req_qp), p.caps.log_max_ra_req_qp as u64);
        assert_eq!(get(c, l::cmd_hca_cap::sq_ts_format), p.caps.sq_ts_format as u64);
        assert_eq!(get(c, l::cmd_hca_cap::force_teardown), p.caps.force_teardown as u64);
        let roce = r.ok(&inp(op::QUERY_HCA_CAP, (4 << 1) | 1, 16), 0x1010);
        assert_eq!(get(&roce[0x10..], l::roce_cap::qp_ts_format), p.caps.qp_ts_format as u64, "{}", p.name);
        let o = r.ok(&inp(op::QUERY_PAGES, 1, 16), 16);
        assert_eq!(get(&o, l::query_pages_out::function_id), p.behaviour.function_id as u64);
    }
}
