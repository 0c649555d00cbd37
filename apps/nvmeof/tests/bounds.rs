//! Target resource bounds over the soft verbs: no block completion is lost when many queues
//! or one many-range command finish at once; admission bounds (silent queues, Connect
//! deadline, KATO range, controllers per host, queues per source), I/O queues bound to their
//! controller's host and source, and the per-connection memory figure.

use crate::common;
use common::raw::*;
use common::*;

use hal::{DmaRegion, DmaSlice};
use nvmeof::host::{cm_req_private, property_set_sqe, Host, HostConfig, HostEnv, IoDone, IoKind};
use nvmeof::nvmet::rdma::Pinned;
use nvmeof::nvmet::{Action, Core, DataIn, Limits, NamespaceConfig, QueueState, SubsystemConfig, TargetConfig};
use nvmeof::wire::*;
use nvmeof::Status;
use testbed::soft::SoftFabric;
use rdma::Qpn;
use zerocopy::byteorder::little_endian::{U32, U64};
use zerocopy::{FromBytes, IntoBytes};

/// Every bounded list of the target either applied back-pressure or counted an overflow.
fn assert_no_overflow(w: &World) {
    let t = &w.target.stats();
    assert_eq!((t.block_done_lost, t.closed_overflow), (0, 0), "{t:?}");
    let c = &w.target.core_stats();
    assert_eq!((c.aen_overflow, c.reset_overflow), (0, 0), "{c:?}");
}

fn four_queue_cfg() -> TargetConfig {
    TargetConfig { max_io_queues: 4, ..world_cfg() }
}

fn byte(lba: u64, i: usize) -> u8 {
    (lba.wrapping_mul(131) ^ (i as u64).wrapping_mul(7)) as u8
}

/// Fill every slot of every I/O queue (`queues` × 32) before the target runs, so all of them
/// complete in the same target turn; then read each back and check it.
fn all_slots_at_once(queues: u16) {
    let f = SoftFabric::new();
    let mut w = make_world_with(&f, 8192, &[HOSTNQN], four_queue_cfg(), 16);
    let mut hd = host_dev(&f);
    let cfg = HostConfig { hostnqn: HOSTNQN.into(), io_queues: queues, io_depth: 32, max_io_bytes: 4096, ..Default::default() };
    let mut host = Host::connect(&mut hd, &mut w, cfg, SUBNQN).expect("connect");
    assert_eq!(host.io_queues().0, queues);
    let mut done = [IoDone { queue: 0, slot: 0, status: Status::SUCCESS, dw0: 0, latency_ns: 0 }; 256];
    for write in [true, false] {
        let mut sent = Vec::new();
        for q in 1..=queues {
            for _ in 0..32 {
                let slot = host.alloc_slot(q).expect("free slot");
                let lba = (q as u64 * 32 + slot as u64) * 8;
                let (buf, off, _) = host.slot_buf(q, slot);
                if write {
                    let data: Vec<u8> = (0..4096).map(|i| byte(lba, i)).collect();
                    buf.write(off, &data);
                } else {
                    buf.write(off, &[0u8; 4096]);
                }
                let kind = if write { IoKind::Write } else { IoKind::Read };
                host.submit(&mut hd, q, slot, kind, 1, lba, 8, w.now).expect("submit");
                sent.push((q, slot, lba));
            }
        }
        let total = sent.len();
        let mut got = 0;
        for _ in 0..2000 {
            if got == total {
                break;
            }
            w.idle(&mut hd);
            let n = host.poll(&mut hd, w.now, &mut done).expect("poll");
            for d in &done[..n] {
                assert!(d.status.is_success(), "{:?}", d.status);
                let i = sent.iter().position(|s| s.0 == d.queue && s.1 == d.slot).expect("known slot");
                let (q, slot, lba) = sent.swap_remove(i);
                if !write {
                    let (buf, off, _) = host.slot_buf(q, slot);
                    let mut data = vec![0u8; 4096];
                    buf.read(off, &mut data);
                    assert!(data.iter().enumerate().all(|(i, b)| *b == byte(lba, i)), "lba {lba} read back wrong");
                }
            }
            got += n;
        }
        assert_eq!(got, total, "{queues} queues x 32: {} commands never completed", total - got);
    }
    assert_no_overflow(&w);
}

#[test]
fn three_io_queues_at_qd32_complete() {
    all_slots_at_once(3);
}

#[test]
fn four_io_queues_at_qd32_complete() {
    all_slots_at_once(4);
}

/// One Dataset Management (deallocate) command with 256 ranges: 256 block completions for one
/// command in one turn, four times the transport's batch.
#[test]
fn dsm_with_256_ranges_completes() {
    let f = SoftFabric::new();
    let mut w = make_world(&f, 8192, &[HOSTNQN]);
    let mut hd = host_dev(&f);
    let (_admin, cntlid) = setup(&mut hd, &mut w);
    let mut q = io_queue(&mut hd, &mut w, cntlid);
    let mut ranges = Vec::new();
    for i in 0..256u64 {
        let r = DsmRange { cattr: U32::new(0), nlb: U32::new(4), slba: U64::new(i * 16) };
        ranges.extend_from_slice(r.as_bytes());
    }
    q.data.write(0, &ranges);
    for round in 0..3u16 {
        let mut s = sqe(io_op::DSM, 40 + round);
        s.nsid = U32::new(1);
        s.cdw10 = U32::new(255);
        s.cdw11 = U32::new(DSM_ATTR_DEALLOCATE);
        s.dptr = q.keyed(ranges.len() as u32);
        let c = q.try_xchg(&mut hd, &mut w, s.as_bytes()).expect("DSM answered");
        assert_eq!(c.cid.get(), 40 + round);
        assert!(st(&c).is_success(), "{:?}", st(&c));
        // The queue still serves.
        read_ok(&mut q, &mut hd, &mut w, 50 + round);
    }
    assert_no_overflow(&w);
}

// ---------------------------------------------------------------------------------------------
// Admission bounds
// ---------------------------------------------------------------------------------------------

/// Soft-device resources plus the target's own account of its queues' memory.
fn footprint(w: &mut World) -> (testbed::soft::Resources, Pinned) {
    (w.tdev.dev.resources(), w.target.pinned())
}

/// A few hundred verified 4 KiB writes and reads on queue 1.
fn verified_io(host: &mut Host<TDev>, hd: &mut TDev, w: &mut World, n: u64) {
    let mut done = [IoDone { queue: 0, slot: 0, status: Status::SUCCESS, dw0: 0, latency_ns: 0 }; 4];
    for i in 0..n {
        for write in [true, false] {
            let slot = host.alloc_slot(1).expect("slot");
            let lba = (i * 8) % 4096;
            let (buf, off, _) = host.slot_buf(1, slot);
            if write {
                buf.write(off, &(0..4096).map(|k| byte(lba + i, k)).collect::<Vec<u8>>());
            } else {
                buf.write(off, &[0u8; 4096]);
            }
            let kind = if write { IoKind::Write } else { IoKind::Read };
            host.submit(hd, 1, slot, kind, 1, lba, 8, w.now).expect("submit");
            let mut got = 0;
            for _ in 0..100 {
                w.idle(hd);
                got = host.poll(hd, w.now, &mut done).expect("poll");
                if got > 0 {
                    break;
                }
            }
            assert_eq!(got, 1, "I/O {i} never completed");
            assert!(done[0].status.is_success(), "{:?}", done[0].status);
            if !write {
                let (buf, off, _) = host.slot_buf(1, slot);
                let mut data = vec![0u8; 4096];
                buf.read(off, &mut data);
                assert!(data.iter().enumerate().all(|(k, b)| *b == byte(lba + i, k)), "lba {lba} read back wrong");
            }
        }
    }
}

/// 100 connections the CM accepted that never send Connect (from 25 addresses, 4 each) are
/// closed at the Connect deadline, and the target's memory returns to its baseline, while a
/// well-behaved host connects and completes verified I/O meanwhile.
#[test]
fn silent_connections_expire_at_the_deadline_while_a_good_host_is_served() {
    let f = SoftFabric::new();
    let limits = Limits { connect_deadline_ms: 50, max_unadmitted: 128, max_unadmitted_per_source: 4, ..Limits::default() };
    let cfg = TargetConfig { limits, ..world_cfg() };
    let mut w = make_world_with(&f, 8192, &[HOSTNQN], cfg, 112);
    let mut hd = host_dev(&f);
    let mut attacker = host_dev(&f);
    let baseline = footprint(&mut w);
    let mut silent = Vec::new();
    for i in 0..100u8 {
        let ip = [10, 9, i / 4, 1];
        let cq = rdma::Control::create_cq(&mut attacker, 8).unwrap();
        let qp = rdma::Control::create_rc_qp(&mut attacker, cq, cq, 8, 8).unwrap();
        let qid = (i % 3) as u16;
        let r = w.target.accept(&mut w.tdev, &cm_req_private(qid, 32), &attrs(qp, ip));
        assert!(r.is_ok(), "silent connection {i} refused: {:?}", r.err().map(|e| e.sts.get()));
        silent.push(qp);
    }
    // A fifth from one of those addresses is over the per-source bound: REJ NO_RESOURCES.
    let r = w.target.accept(&mut w.tdev, &cm_req_private(0, 32), &attrs(Qpn(0x77), [10, 9, 0, 1]));
    assert_eq!(r.err().map(|e| e.sts.get()), Some(cm_rej::NO_RESOURCES));
    assert_eq!(w.target.core.bound_stats().unadmitted_per_source, 1);
    let p = w.target.pinned();
    assert_eq!((p.queues, p.unadmitted), (100, 100));
    // Each silent queue holds no data buffers: receive + response + the 1 KiB Connect buffer.
    assert!(p.dma_bytes < 100 * (32 * (64 + 4096) + 64 * 16 + 1024) as u64, "{p:?}");

    // The good host is served while they wait.
    let hcfg = HostConfig { hostnqn: HOSTNQN.into(), io_queues: 1, io_depth: 8, max_io_bytes: 4096, kato_ms: 10_000, ..Default::default() };
    let mut host = Host::connect(&mut hd, &mut w, hcfg, SUBNQN).expect("good host connects");
    verified_io(&mut host, &mut hd, &mut w, 100);
    // The deadline passes (the good host keeps its controller alive with its I/O and keep-alives).
    let end = w.now + 60_000_000;
    while w.now < end {
        w.idle(&mut hd);
        host.tick(&mut hd, w.now).expect("keep-alive");
    }
    assert_eq!(w.target.core.bound_stats().connect_deadline, 100);
    let p = w.target.pinned();
    assert_eq!((p.queues, p.unadmitted), (2, 0), "only the good host's admin + I/O queue remain");
    verified_io(&mut host, &mut hd, &mut w, 20);
    // The CM is asked to DREQ every expired queue.
    let mut dreq = 0;
    while w.target.take_closed().is_some() {
        dreq += 1;
    }
    assert_eq!(dreq, 100);
    host.disconnect(&mut hd, &mut w).expect("disconnect");
    for _ in 0..10 {
        w.idle(&mut hd);
    }
    let after = footprint(&mut w);
    assert_eq!(after.0, baseline.0, "QPs, CQs, MRs and DMA buffers back to baseline");
    assert_eq!(after.1, baseline.1);
    assert_no_overflow(&w);
}

/// The defaults: a flood of silent connections from one address gets REJ NO_RESOURCES past
/// the per-source bound, and the total bound caps them from many addresses.
#[test]
fn unadmitted_queues_are_bounded_per_source_and_in_total() {
    let f = SoftFabric::new();
    let limits = Limits { max_unadmitted_per_source: 8, max_unadmitted: 20, ..Limits::default() };
    let mut w = make_world_with(&f, 64, &[HOSTNQN], TargetConfig { limits, ..world_cfg() }, 64);
    let mut ok = 0;
    for i in 0..100u32 {
        if w.target.accept(&mut w.tdev, &cm_req_private(0, 32), &attrs(Qpn(0x100 + i), [10, 9, 9, 9])).is_ok() {
            ok += 1;
        }
    }
    assert_eq!(ok, 8);
    assert_eq!(w.target.core.bound_stats().unadmitted_per_source, 92);
    for i in 0..100u32 {
        let ip = [10, 8, (i / 8) as u8, 1];
        if w.target.accept(&mut w.tdev, &cm_req_private(0, 32), &attrs(Qpn(0x200 + i), ip)).is_ok() {
            ok += 1;
        }
    }
    assert_eq!(ok, 20);
    assert_eq!(w.target.core.bound_stats().unadmitted, 88);
    // Every RDMA queue in use: REJ NO_RESOURCES too.
    let limits = Limits { max_unadmitted_per_source: 64, max_unadmitted: 64, ..Limits::default() };
    let mut w = make_world_with(&f, 64, &[HOSTNQN], TargetConfig { limits, ..world_cfg() }, 4);
    for i in 0..4 {
        assert!(w.target.accept(&mut w.tdev, &cm_req_private(0, 32), &attrs(Qpn(0x300 + i), HOST_IP)).is_ok());
    }
    let r = w.target.accept(&mut w.tdev, &cm_req_private(0, 32), &attrs(Qpn(0x399), HOST_IP));
    assert_eq!(r.err().map(|e| e.sts.get()), Some(cm_rej::NO_RESOURCES));
    assert_eq!(w.target.core.bound_stats().queues, 1);
}

fn core_with(limits: Limits, max_ctrls: usize) -> Core<RamDisk> {
    let mem = MemMap::default();
    let cfg = TargetConfig { ports: vec![], max_ctrls, limits, ..TargetConfig::default() };
    let subs = vec![SubsystemConfig {
        nqn: SUBNQN.into(),
        serial: "s".into(),
        model: "m".into(),
        hosts: vec![],
        allow_any_host: true,
        namespaces: vec![NamespaceConfig { nsid: 1, dev: RamDisk::new(mem, 64, 512), nguid: [1; 16] }],
    }];
    Core::new(cfg, subs).unwrap()
}

fn none() -> DataIn<'static> {
    DataIn { bytes: &[], buf: DmaSlice::EMPTY, sgl_len: 0, tag: 0, fetched: true }
}

/// Connect on `q` with `data`; (status, DW0).
fn connect(core: &mut Core<RamDisk>, q: &mut QueueState, kato: u32, data: &ConnectData) -> (Status, u32) {
    let mut s = connect_sqe(q.qid, 31, 1);
    let mut c = ConnectCmd::read_from_bytes(s.as_bytes()).unwrap();
    c.kato = U32::new(kato);
    s = Sqe::read_from_bytes(c.as_bytes()).unwrap();
    let d = DataIn { bytes: data.as_bytes(), buf: DmaSlice::EMPTY, sgl_len: 1024, tag: 0, fetched: true };
    match core.execute(q, &s, &d, 1_000) {
        Action::Respond { status, dw0, .. } => (status, dw0),
        a => panic!("{a:?}"),
    }
}

fn admin(core: &mut Core<RamDisk>, gid: u8, kato: u32, data: &ConnectData) -> (QueueState, Status, u16) {
    let mut q = QueueState { peer_gid: [gid; 16], peer_qpn: 0x40, ..QueueState::new(0) };
    let (st, dw0) = connect(core, &mut q, kato, data);
    if st.is_success() {
        let en = property_set_sqe(prop::CC, 0x0046_0001);
        assert!(matches!(core.execute(&mut q, &en, &none(), 1_000), Action::Respond { status: Status::SUCCESS, .. }));
    }
    (q, st, dw0 as u16)
}

fn get_kato(core: &mut Core<RamDisk>, q: &mut QueueState) -> u32 {
    let mut s = sqe(admin_op::GET_FEATURES, 9);
    s.cdw10 = U32::new(fid::KEEP_ALIVE_TIMER as u32);
    match core.execute(q, &s, &none(), 2_000) {
        Action::Respond { status: Status::SUCCESS, dw0, .. } => dw0,
        a => panic!("{a:?}"),
    }
}

/// KATO 0 (Connect or Set Features) becomes the maximum; values outside [min, max] are
/// clamped; Get Features reports the value in force; the controller expires by it.
#[test]
fn kato_zero_and_huge_are_clamped() {
    let limits = Limits { kato_min_ms: 2_000, kato_max_ms: 30_000, ..Limits::default() };
    let mut core = core_with(limits, 8);
    let (mut q, st, id) = admin(&mut core, 1, 0, &connect_data(0xFFFF));
    assert!(st.is_success());
    assert_eq!(get_kato(&mut core, &mut q), 30_000);
    let (mut q2, _, _) = admin(&mut core, 1, 100, &connect_data(0xFFFF));
    assert_eq!(get_kato(&mut core, &mut q2), 2_000);
    let (mut q3, _, _) = admin(&mut core, 1, 10_000, &connect_data(0xFFFF));
    assert_eq!(get_kato(&mut core, &mut q3), 10_000);
    for (ask, want) in [(0u32, 30_000u32), (u32::MAX, 30_000), (1, 2_000), (7_000, 7_000)] {
        let mut s = sqe(admin_op::SET_FEATURES, 8);
        s.cdw10 = U32::new(fid::KEEP_ALIVE_TIMER as u32);
        s.cdw11 = U32::new(ask);
        assert!(matches!(core.execute(&mut q3, &s, &none(), 2_000), Action::Respond { status: Status::SUCCESS, .. }));
        assert_eq!(get_kato(&mut core, &mut q3), want, "Set Features KATO {ask}");
    }
    assert_eq!(core.bound_stats().kato_clamped, 5);
    // The KATO-0 controller is not kept forever: it expires after the maximum.
    core.queue_gone(&q2);
    core.queue_gone(&q3);
    assert_eq!(core.expired_ctrl(2_000 + 30_000_000_000), None);
    assert_eq!(core.expired_ctrl(2_001 + 30_000_000_000), Some(id));
}

/// An I/O-queue Connect naming an existing controller from another source GID, host ID or
/// host NQN is refused with the same answer as an unknown controller; the owner's succeeds.
/// An I/O queue's commands are counted in the queue itself (no write to the shared controller
/// per I/O): its traffic keeps the controller alive and reaches the SMART log and the metrics
/// once the transport folds it in on the slow path (`Core::fold_queue`; `queue_gone` folds
/// a queue's last counts).
#[test]
fn io_queue_counts_reach_its_controller_when_folded() {
    const S: u64 = 1_000_000_000;
    let mut core = core_with(Limits::default(), 8);
    let (mut aq, st, cntlid) = admin(&mut core, 1, 5_000, &connect_data(0xFFFF));
    assert!(st.is_success());
    let mut q = QueueState { peer_gid: [1; 16], ..QueueState::new(1) };
    assert_eq!(connect(&mut core, &mut q, 0, &connect_data(cntlid)).0, Status::SUCCESS);
    let ctrl_cmds = |core: &Core<RamDisk>| core.controllers().find(|c| c.cntlid == cntlid).map(|c| (c.commands, c.reads, c.writes, c.bytes_read));
    let before = ctrl_cmds(&core).unwrap();
    // Two 1-block Reads (the buffer is not the disk's: the store fails them later, after
    // they were counted) and a Flush, 4 s after Connect.
    let (_region, buf) = unmapped_buf(4096);
    for cid in 0..3u16 {
        let mut s = sqe(if cid < 2 { io_op::READ } else { io_op::FLUSH }, cid);
        s.nsid = U32::new(1);
        let d = DataIn { buf, sgl_len: if cid < 2 { 512 } else { 0 }, ..none() };
        let a = core.execute(&mut q, &s, &d, 4 * S);
        assert!(matches!(a, Action::Submitted { .. }), "{a:?}");
    }
    assert_eq!((q.io.commands, q.io.host_reads, q.io.blocks_read_512, q.io.last_seen_ns), (3, 2, 2, 4 * S));
    assert_eq!(ctrl_cmds(&core).unwrap(), before, "nothing written to the controller per I/O");
    // The controller has not heard of the traffic: by its own clock it expired.
    assert_eq!(core.expired_ctrl(1_000 + 5 * S + 1), Some(cntlid));
    core.fold_queue(&mut q);
    assert_eq!(core.expired_ctrl(1_000 + 5 * S + 1), None, "the queue's traffic kept it alive");
    assert_eq!(core.expired_ctrl(4 * S + 5 * S + 1), Some(cntlid));
    let (c0, r0, w0, b0) = before;
    assert_eq!(ctrl_cmds(&core).unwrap(), (c0 + 3, r0 + 2, w0, b0 + 1024));
    assert_eq!((q.io.commands, q.io.host_reads, q.io.last_seen_ns), (0, 0, 4 * S), "counted again from 0");
    core.fold_queue(&mut q);
    assert_eq!(ctrl_cmds(&core).unwrap(), (c0 + 3, r0 + 2, w0, b0 + 1024), "folding twice adds nothing");
    // SMART log: Host Read Commands (bytes 64..80).
    let mut s = sqe(admin_op::GET_LOG_PAGE, 20);
    s.nsid = U32::new(0xFFFF_FFFF);
    s.cdw10 = U32::new(lid::SMART as u32 | ((512 / 4 - 1) << 16));
    let a = core.execute(&mut aq, &s, &DataIn { sgl_len: 512, ..none() }, 4 * S);
    assert!(matches!(a, Action::Respond { status: Status::SUCCESS, .. }), "{a:?}");
    assert_eq!(u64::from_le_bytes(core.out()[64..72].try_into().unwrap()), r0 + 2);
    // A queue going away hands its last counts over.
    let mut s = sqe(io_op::FLUSH, 9);
    s.nsid = U32::new(1);
    core.execute(&mut q, &s, &none(), 4 * S + 1);
    core.queue_gone(&q);
    assert_eq!(ctrl_cmds(&core).unwrap().0, c0 + 4 + 1, "3 + 1 I/O and the Get Log Page");
}

#[test]
fn io_queue_connect_from_another_source_is_refused() {
    let mut core = core_with(Limits::default(), 8);
    let data = connect_data(0xFFFF);
    let (_aq, st, cntlid) = admin(&mut core, 1, 5_000, &data);
    assert!(st.is_success());
    let unknown = {
        let mut q = QueueState { peer_gid: [1; 16], ..QueueState::new(1) };
        connect(&mut core, &mut q, 0, &connect_data(cntlid.wrapping_add(1).max(1)))
    };
    assert_eq!(unknown, (Status::CONNECT_INVALID_PARAM, connect_off::IATTR_DATA | connect_off::DATA_CNTLID));
    // Another source GID, same host NQN and host ID.
    let mut q = QueueState { peer_gid: [2; 16], ..QueueState::new(1) };
    assert_eq!(connect(&mut core, &mut q, 0, &connect_data(cntlid)), unknown);
    assert_eq!(q.cntlid, None);
    // Same source, another host ID.
    let mut d = connect_data(cntlid);
    d.hostid = [7; 16];
    let mut q = QueueState { peer_gid: [1; 16], ..QueueState::new(1) };
    assert_eq!(connect(&mut core, &mut q, 0, &d), unknown);
    // Same source, another host NQN.
    let mut d = connect_data(cntlid);
    d.hostnqn = [0; 256];
    put_str(&mut d.hostnqn, "nqn.2014-08.org.nvmexpress:uuid:intruder", 0);
    let mut q = QueueState { peer_gid: [1; 16], ..QueueState::new(1) };
    assert_eq!(connect(&mut core, &mut q, 0, &d), unknown);
    assert_eq!(core.bound_stats().foreign_queue, 3);
    // The owner.
    let mut q = QueueState { peer_gid: [1; 16], ..QueueState::new(1) };
    assert_eq!(connect(&mut core, &mut q, 0, &connect_data(cntlid)).0, Status::SUCCESS);
    assert_eq!(q.cntlid, Some(cntlid));
}

/// The same over RDMA: the transport gives the core the queue's source address; an I/O
/// queue from another address cannot join the controller.
#[test]
fn io_queue_from_another_address_is_refused_over_rdma() {
    let f = SoftFabric::new();
    let mut w = make_world(&f, 256, &[HOSTNQN]);
    let mut hd = host_dev(&f);
    let (_a, cntlid) = setup(&mut hd, &mut w);
    let other = [10, 0, 0, 66];
    let mut od = TDev { dev: f.add_device(other), mem: MemMap::default() };
    w.peer_ip = other;
    let mut q = Raw::connect(&mut od, &mut w, 1, 32);
    let mut s = connect_sqe(1, 31, 3);
    s.dptr = Sgl::Inline { offset: 0, len: 1024 }.encode();
    let mut cap = s.as_bytes().to_vec();
    cap.extend_from_slice(connect_data(cntlid).as_bytes());
    let c = q.xchg(&mut od, &mut w, &cap);
    assert_eq!(st(&c), Status::CONNECT_INVALID_PARAM);
    assert_eq!(w.target.core.bound_stats().foreign_queue, 1);
    w.peer_ip = HOST_IP;
    let mut good = io_queue(&mut hd, &mut w, cntlid);
    read_ok(&mut good, &mut hd, &mut w, 9);
}

/// Controller IDs are not sequential and depend on the seed.
#[test]
fn cntlids_are_not_sequential() {
    let ids = |seed: u64| -> Vec<u16> {
        let mut core = core_with(Limits { cntlid_seed: seed, max_ctrls_per_host: 8, ..Limits::default() }, 8);
        (0..8).map(|_| admin(&mut core, 1, 5_000, &connect_data(0xFFFF)).2).collect()
    };
    let a = ids(1);
    assert!(a.iter().all(|&id| (1..=0xFFEF).contains(&id)));
    assert!(a.windows(2).all(|p| p[1] != p[0].wrapping_add(1)), "{a:?}");
    let mut u = a.clone();
    u.sort();
    u.dedup();
    assert_eq!(u.len(), 8);
    assert_ne!(a, ids(2));
}

/// Controllers per host NQN and in total: Connect answers Controller Busy at the bound;
/// another host is still admitted (per-host bound) and a freed controller makes room.
#[test]
fn controller_bounds_answer_controller_busy() {
    let mut core = core_with(Limits { max_ctrls_per_host: 2, ..Limits::default() }, 3);
    let mine = connect_data(0xFFFF);
    let mut other = connect_data(0xFFFF);
    put_str(&mut other.hostnqn, "nqn.2014-08.org.nvmexpress:uuid:other", 0);
    let (q1, s1, _) = admin(&mut core, 1, 5_000, &mine);
    let (_q2, s2, _) = admin(&mut core, 1, 5_000, &mine);
    assert!(s1.is_success() && s2.is_success());
    let (_, s3, _) = admin(&mut core, 1, 5_000, &mine);
    assert_eq!(s3, Status::CONNECT_CTRL_BUSY);
    assert_eq!(core.bound_stats().ctrls_per_host, 1);
    let (_, s4, _) = admin(&mut core, 3, 5_000, &other);
    assert!(s4.is_success(), "another host is served");
    let (_, s5, _) = admin(&mut core, 3, 5_000, &other);
    assert_eq!(s5, Status::CONNECT_CTRL_BUSY);
    assert_eq!(core.bound_stats().ctrls, 1);
    core.queue_gone(&q1);
    let (_, s6, _) = admin(&mut core, 3, 5_000, &other);
    assert!(s6.is_success());
}

/// Per-connection memory with the default target configuration (admin depth 32; I/O depth
/// 128, 128 KiB transfers, 4 KiB in-capsule): after the CM accepted the queue and after its
/// Connect was admitted. Prints `NVMEOF-CONN-MEMORY` lines.
#[test]
fn per_connection_memory_before_and_after_connect() {
    let f = SoftFabric::new();
    let cfg = TargetConfig { ports: world_cfg().ports, ..TargetConfig::default() };
    let (depth, xfer) = (cfg.io_queue_depth as u64, cfg.max_io_bytes as u64);
    let mut w = make_world_with(&f, 8192, &[HOSTNQN], cfg, 16);
    let mut hd = host_dev(&f);
    let bytes = |p: Pinned| p.dma_bytes + p.heap_bytes;
    let base = bytes(w.target.pinned());
    let mut a = Raw::connect(&mut hd, &mut w, 0, 32);
    let admin_before = bytes(w.target.pinned()) - base;
    a.data.write(0, connect_data(0xFFFF).as_bytes());
    let mut s = connect_sqe(0, 31, 1);
    s.dptr = a.keyed(1024);
    let c = a.xchg(&mut hd, &mut w, s.as_bytes());
    assert!(st(&c).is_success());
    let cntlid = c.dw0.get() as u16;
    let admin_after = bytes(w.target.pinned()) - base;
    let mut en = property_set_sqe(prop::CC, 0x0046_0001);
    en.cid = zerocopy::byteorder::little_endian::U16::new(2);
    assert!(st(&a.xchg(&mut hd, &mut w, en.as_bytes())).is_success());
    let base = bytes(w.target.pinned());
    let mut q = Raw::connect(&mut hd, &mut w, 1, depth as u16);
    let io_before = bytes(w.target.pinned()) - base;
    let mut s = connect_sqe(1, depth as u16 - 1, 3);
    s.dptr = Sgl::Inline { offset: 0, len: 1024 }.encode();
    let mut cap = s.as_bytes().to_vec();
    cap.extend_from_slice(connect_data(cntlid).as_bytes());
    assert!(st(&q.xchg(&mut hd, &mut w, &cap)).is_success());
    let io_after = bytes(w.target.pinned()) - base;
    println!("NVMEOF-CONN-MEMORY queue=admin depth=32 before_connect={admin_before} after_connect={admin_after}");
    println!("NVMEOF-CONN-MEMORY queue=io depth={depth} xfer={xfer} before_connect={io_before} after_connect={io_after}");
    // The data buffers (depth x largest transfer) are pinned only by an admitted Connect.
    assert!(io_after - io_before >= depth * xfer);
    assert!(io_before < depth * xfer / 8, "{io_before}");
    assert!(admin_after - admin_before >= 32 * 8192);
    read_ok(&mut q, &mut hd, &mut w, 7);
}
