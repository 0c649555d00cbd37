//! Queue counters driven through commands: ALLOC_Q_COUNTER up to the profile's `max_qp_cnt`,
//! QUERY/DEALLOC of a set that does not exist refused, a QP context naming an unallocated set
//! refused, a set busy while a QP counts into it, and what a QP counted staying with its set
//! after the QP is destroyed (until a read with `clear`).
use crate::common;
use common::*;
use emu_connectx::consts::{op, qp};
use emu_connectx::*;
use mlx5_ifc::ifc as l;
use mlx5_ifc::layout::{get, set};

fn alloc(r: &mut Rig) -> Done {
    r.cmd(&inp(op::ALLOC_Q_COUNTER, 0, l::alloc_q_counter_in::SIZE), l::alloc_q_counter_out::SIZE)
}

fn query(r: &mut Rig, id: u8, clear: bool) -> Done {
    let mut i = inp(op::QUERY_Q_COUNTER, 0, l::query_q_counter_in::SIZE);
    set(&mut i, l::query_q_counter_in::counter_set_id, id as u64);
    set(&mut i, l::query_q_counter_in::clear, clear as u64);
    r.cmd(&i, l::query_q_counter_out::SIZE)
}

fn dealloc(r: &mut Rig, id: u8) -> Done {
    let mut i = inp(op::DEALLOC_Q_COUNTER, 0, l::dealloc_q_counter_in::SIZE);
    set(&mut i, l::dealloc_q_counter_in::counter_set_id, id as u64);
    r.cmd(&i, 16)
}

#[test]
fn counter_sets_are_bounded_checked_and_busy_while_named() {
    let mut r = Rig::new();
    let u = bring_up(&mut r);
    let max = Profile::default().caps.max_qp_cnt as usize;
    assert!(max > 0);
    let mut ids = Vec::new();
    for _ in 0..max {
        let d = alloc(&mut r);
        assert_eq!(d.status, 0, "{d:?}");
        ids.push(get(&d.out, l::alloc_q_counter_out::counter_set_id) as u8);
    }
    assert!(ids.iter().all(|&i| i != 0), "set 0 is the QPs' default, never handed out");
    assert_eq!(alloc(&mut r).status, 0x0f, "NO_RESOURCES past max_qp_cnt");
    assert_eq!(r.cx.counters().q_counters, max);
    for &id in &ids[1..] {
        assert_eq!(dealloc(&mut r, id).status, 0);
    }
    let id = ids[0];
    assert_eq!(query(&mut r, ids[1], false).status, 0x03, "a freed set cannot be read");
    assert_eq!(dealloc(&mut r, ids[1]).status, 0x03, "nor freed twice");
    // A fresh QP naming a set nobody allocated is refused at RST2INIT; naming ours works.
    let mut bufs = Vec::new();
    let d = create_qp(&mut r, qp::ST_RC, u.pd, u.uar, u.cq, &mut bufs);
    assert_eq!(d.status, 0, "{d:?}");
    let qpn = get(&d.out, l::create_qp_out::qpn) as u32;
    let d = modify(&mut r, op::RST2INIT_QP, qpn, |c| {
        set(c, l::qpc::counter_set_id, ids[1] as u64);
        set(c, path(l::ads::vhca_port_num), 1);
    });
    assert_eq!(d.status, 0x03, "{d:?}");
    let d = modify(&mut r, op::RST2INIT_QP, qpn, |c| {
        set(c, l::qpc::counter_set_id, id as u64);
        set(c, path(l::ads::vhca_port_num), 1);
    });
    assert_eq!(d.status, 0, "{d:?}");
    assert_eq!(dealloc(&mut r, id).status, 0x06, "RESOURCE_BUSY while a QP counts into it");
    let d = query(&mut r, id, true);
    assert_eq!(d.status, 0);
    assert!(d.out[0x10..0x100].iter().all(|&b| b == 0), "a quiet QP counted nothing");
    destroy(&mut r, op::DESTROY_QP, qpn);
    assert_eq!(dealloc(&mut r, id).status, 0, "free once no QP names it");
    assert_eq!(r.cx.counters().q_counters, 0);
    tear_down(&mut r, u);
    assert_eq!(r.cx.counters().objects_abandoned, 0);
}

#[test]
fn every_profile_offers_counter_sets_within_the_field() {
    for p in Profile::all() {
        let n = p.caps.max_qp_cnt;
        assert!(n > 0 && n < 1 << 10, "{}: max_qp_cnt {n} (10-bit field)", p.name);
    }
}
