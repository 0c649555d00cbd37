//! Raw Ethernet path: TIS+SQ transmit, RQ+TIR+NIC_RX flow table receive. A sends an ARP
//! request from its raw SQ; B's port answers it; the reply (not RoCE) is steered by A's
//! flow table into A's raw RQ.
use crate::common;
use common::*;
use emu_connectx::datapath::cqe_op;
use mlx5_ifc::layout::{get, set};
use emu_connectx::consts::op;
use mlx5_ifc::ifc as l;
use emu_connectx::*;
use emu_roce::{Impairments, MemLink};
use hal::{DmaRegion, Hal, Mmio};

fn id(o: &[u8]) -> u32 {
    get(o, OBJ_ID) as u32
}

#[test]
fn arp_out_of_raw_sq_reply_steered_into_raw_rq() {
    let cfg = |m: u8| Config { mac: [0x02, 0x00, 0x5e, 0x10, 0x00, m], ..Config::default() };
    let mut a = Rig::with(cfg(1));
    let ua = bring_up_with(&mut a, [10, 0, 0, 1], Peer { qpn: 0x100, ip: [10, 0, 0, 2], mac: [2, 0, 0x5e, 0x10, 0, 2] });
    let mut b = Rig::with(cfg(2));
    let ub = bring_up_with(&mut b, [10, 0, 0, 2], Peer { qpn: 0x100, ip: [10, 0, 0, 1], mac: [2, 0, 0x5e, 0x10, 0, 1] });
    let (la, lb) = MemLink::pair(Impairments::default(), 1);
    a.cx.attach_link(Box::new(la));
    b.cx.attach_link(Box::new(lb));
    let mkey = (ua.mkey_pa << 8) | 0x42;

    // TIS + SQ (64 WQEBBs), to RDY.
    let mut i = inp(op::CREATE_TIS, 0, 0xc0);
    set(&mut i[0x20..], l::tisc::transport_domain, ua.td as u64);
    let tis = id(&a.ok(&i, 16));
    let sq_buf = a.hal.dma_alloc(4096, 4096).unwrap();
    let sq_dbr = a.hal.dma_alloc(64, 64).unwrap();
    let mut i = inp(op::CREATE_SQ, 0, 0x118);
    let c = &mut i[0x20..];
    set(c, l::sqc::cqn, ua.cq as u64);
    set(c, l::sqc::tis_lst_sz, 1);
    set(c, l::sqc::tis_num_0, tis as u64);
    let w = &mut c[0x30..];
    set(w, l::wq::wq_type, 1);
    set(w, l::wq::pd, ua.pd as u64);
    set(w, l::wq::uar_page, ua.uar as u64);
    set(w, l::wq::dbr_addr, sq_dbr.paddr());
    set(w, l::wq::log_wq_stride, 6);
    set(w, l::wq::log_wq_sz, 6);
    set(&mut i, l::wq::pas.at(l::sqc::wq).at(l::create_sq_in::ctx), sq_buf.paddr());
    let sqn = id(&a.ok(&i, 16));
    let mut i = inp(op::MODIFY_SQ, 0, 0x50);
    set(&mut i, l::modify_sq_in::sqn, sqn as u64);
    set(&mut i[0x20..], l::sqc::state, 1);
    a.ok(&i, 16);

    // RQ (16 x 16 B), TIR, flow table: ARP -> TIR.
    let rq_buf = a.hal.dma_alloc(4096, 4096).unwrap();
    let rq_dbr = a.hal.dma_alloc(64, 64).unwrap();
    let frames = a.hal.dma_alloc(16 * 2048, 4096).unwrap();
    let mut i = inp(op::CREATE_RQ, 0, 0x118);
    let c = &mut i[0x20..];
    set(c, l::rqc::cqn, ua.cq as u64);
    let w = &mut c[0x30..];
    set(w, l::wq::wq_type, 1);
    set(w, l::wq::pd, ua.pd as u64);
    set(w, l::wq::dbr_addr, rq_dbr.paddr());
    set(w, l::wq::log_wq_stride, 4);
    set(w, l::wq::log_wq_sz, 4);
    set(&mut i, l::wq::pas.at(l::rqc::wq).at(l::create_rq_in::ctx), rq_buf.paddr());
    let rqn = id(&a.ok(&i, 16));
    let mut i = inp(op::MODIFY_RQ, 0, 0x50);
    set(&mut i, l::modify_sq_in::sqn, rqn as u64);
    set(&mut i[0x20..], l::rqc::state, 1);
    a.ok(&i, 16);
    for k in 0..16u64 {
        rq_buf.write_be32(k as usize * 16, 2048);
        rq_buf.write_be32(k as usize * 16 + 4, mkey);
        rq_buf.write_be64(k as usize * 16 + 8, frames.paddr() + k * 2048);
    }
    rq_dbr.write_be32(0, 16);
    let mut i = inp(op::CREATE_TIR, 0, 0x120);
    set(&mut i[0x20..], l::tirc::inline_rqn, rqn as u64);
    set(&mut i[0x20..], l::tirc::transport_domain, ua.td as u64);
    let tir = id(&a.ok(&i, 16));
    let mut i = inp(op::CREATE_FLOW_TABLE, 0, 0x40);
    set(&mut i[0x18..], l::flow_table_context::log_size, 4);
    let ft = id(&a.ok(&i, 16));
    let mut i = inp(op::CREATE_FLOW_GROUP, 0, 0x400);
    set(&mut i, l::destroy_flow_table_in::table_id, ft as u64);
    set(&mut i, l::create_flow_group_in::start_flow_index, 0);
    set(&mut i, l::create_flow_group_in::end_flow_index, 0);
    set(&mut i, l::create_flow_group_in::match_criteria_enable, 1);
    set(&mut i[0x40..], l::fte_match_set_lyr_2_4::ethertype, 0xffff);
    let o = a.ok(&i, 16);
    let fg = get(&o, l::create_flow_group_out::group_id) as u32;
    let mut i = inp(op::SET_FLOW_TABLE_ENTRY, 0, 0x348);
    set(&mut i, l::destroy_flow_table_in::table_id, ft as u64);
    set(&mut i, l::set_fte_in::flow_index, 0);
    let fc = &mut i[0x40..];
    set(fc, l::flow_context::group_id, fg as u64);
    set(fc, l::flow_context::action, 4);
    set(fc, l::flow_context::destination_list_size, 1);
    set(&mut fc[0x40..], l::fte_match_set_lyr_2_4::ethertype, 0x0806);
    set(&mut fc[0x300..], l::dest_format_struct::destination_type, 2);
    set(&mut fc[0x300..], l::dest_format_struct::destination_id, tir as u64);
    a.ok(&i, 16);
    let mut i = inp(op::SET_FLOW_TABLE_ROOT, 0, 0x40);
    set(&mut i, l::destroy_flow_table_in::table_id, ft as u64);
    a.ok(&i, 16);
    assert_eq!(a.cx.counters().raw_objects, 7); // tis sq rq tir table group entry

    // ARP request for 10.0.0.2: 14-byte Ethernet header inline, 28-byte ARP body by pointer.
    let mut arp = vec![0xffu8; 6];
    arp.extend_from_slice(&[2, 0, 0x5e, 0x10, 0, 1, 0x08, 0x06]);
    let body: Vec<u8> = [0u8, 1, 8, 0, 6, 4, 0, 1]
        .iter()
        .chain(&[2, 0, 0x5e, 0x10, 0, 1, 10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 10, 0, 0, 2])
        .copied()
        .collect();
    frames.write(15 * 2048, &body);
    // ctrl(16) + eth seg(16, 2 hdr bytes) + 12 more hdr bytes padded(16) + data(16) = 4 DS.
    sq_buf.write_be32(0, 0x0a);
    sq_buf.write_be32(4, (sqn << 8) | 4);
    sq_buf.write_u8(0x0b, 0x08);
    sq_buf.write_be16(16 + 0x0c, 14);
    sq_buf.write(16 + 0x0e, &arp);
    sq_buf.write_be32(48, 28);
    sq_buf.write_be32(52, mkey);
    sq_buf.write_be64(56, frames.paddr() + 15 * 2048);
    sq_dbr.write_be32(4, 1);
    let mut first = [0u8; 8];
    sq_buf.read(0, &mut first);
    a.bar.write64_be(ua.uar as usize * 4096 + 0x800, u64::from_be_bytes(first));
    let mut cqes = Vec::new();
    let mut ci = 0u32;
    for _ in 0..100 {
        a.cx.poll();
        b.cx.poll();
        loop {
            let off = (ci & 63) as usize * 64;
            let mut c = [0u8; 64];
            ua.cq_buf.read(off, &mut c);
            if c[0x3f] >> 4 == 0xf || (c[0x3f] & 1) as u32 != (ci >> 6) & 1 {
                break;
            }
            ci += 1;
            ua.cq_dbr.write_be32(0, ci);
            cqes.push(c);
        }
        if cqes.len() >= 2 {
            break;
        }
    }
    assert_eq!(b.cx.engine_counters().unwrap().arp_replies, 1, "B's port answered the ARP request");
    assert_eq!(cqes.len(), 2, "send CQE + receive CQE");
    let tx = cqes.iter().find(|c| u32::from_be_bytes(c[0x38..0x3c].try_into().unwrap()) & 0xff_ffff == sqn).unwrap();
    assert_eq!(tx[0x3f] >> 4, cqe_op::REQ);
    let rx = cqes.iter().find(|c| u32::from_be_bytes(c[0x38..0x3c].try_into().unwrap()) & 0xff_ffff == rqn).unwrap();
    assert_eq!(rx[0x3f] >> 4, cqe_op::RESP_SEND);
    let n = u32::from_be_bytes(rx[0x2c..0x30].try_into().unwrap()) as usize;
    assert!(n >= 42);
    let mut reply = vec![0u8; n];
    frames.read(0, &mut reply);
    assert_eq!(&reply[12..14], &[0x08, 0x06]);
    assert_eq!(u16::from_be_bytes([reply[20], reply[21]]), 2, "ARP reply");
    assert_eq!(&reply[22..28], &[2, 0, 0x5e, 0x10, 0, 2], "sender = B's MAC");
    assert_eq!(&reply[28..32], &[10, 0, 0, 2]);
    // Tear the raw path down, then everything: nothing left.
    let mut i = inp(op::DELETE_FLOW_TABLE_ENTRY, 0, 0x40);
    set(&mut i, l::destroy_flow_table_in::table_id, ft as u64);
    a.ok(&i, 16);
    let mut i = inp(op::DESTROY_FLOW_GROUP, 0, 0x40);
    set(&mut i, l::destroy_flow_table_in::table_id, ft as u64);
    set(&mut i, l::destroy_flow_group_in::group_id, fg as u64);
    a.ok(&i, 16);
    let mut i = inp(op::DESTROY_FLOW_TABLE, 0, 0x40);
    set(&mut i, l::destroy_flow_table_in::table_id, ft as u64);
    a.ok(&i, 16);
    for (opc, x) in [(op::DESTROY_TIR, tir), (op::DESTROY_RQ, rqn), (op::DESTROY_SQ, sqn), (op::DESTROY_TIS, tis)] {
        let mut i = inp(opc, 0, 16);
        set(&mut i, OBJ_ID, x as u64);
        a.ok(&i, 16);
    }
    tear_down(&mut a, ua);
    tear_down(&mut b, ub);
    let c = a.cx.counters();
    assert_eq!((c.live_objects(), c.pages_held, c.objects_abandoned, c.dma_faults), (0, 0, 0, 0));
}
