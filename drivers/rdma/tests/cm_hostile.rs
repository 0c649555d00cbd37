//! CM against a hostile fabric (issue 10): spoofed REJ/DREQ/RTU/MRA/REQ that name a live
//! connection's comm IDs, QPN or node GUID from another source (or with comm ID 0) leave it
//! alone; peer-chosen timers are clamped where the QP is brought to RTS.
use crate::common;
use common::*;
use hal::DmaRegion;
use rdma::cm::*;
use rdma::cm_wire::*;
use rdma::*;

const ATTACKER: [u8; 4] = [10, 77, 0, 66];

/// Send a SEND host → target over the live connection and check it arrives intact.
fn traffic_still_flows(w: &mut World, hq: Qpn, tag: &[u8; 8]) {
    w.h.buf.write(60_000, tag);
    w.h.dev.post_send(hq, &SendWr { wr_id: 77, op: SendOp::Send, sge: Sge { addr: w.h.buf.paddr() + 60_000, len: 8, lkey: w.h.lkey }, signaled: true, fence: false, ud: None }).unwrap();
    w.run(3, 1000);
    let mut wc = [Completion::default(); 16];
    let n = w.t.dev.poll_cq(w.t.cq, &mut wc);
    let rx = wc[..n].iter().find(|c| c.opcode == WcOpcode::Recv).unwrap_or_else(|| panic!("no receive: {:?}", &wc[..n]));
    assert_eq!((rx.status, rx.byte_len), (WcStatus::Success, 8));
    let mut got = [0u8; 8];
    w.t.buf.read(((rx.wr_id - 100) * 1024) as usize, &mut got);
    assert_eq!(&got, tag);
    let n = w.h.dev.poll_cq(w.h.cq, &mut wc);
    assert!(wc[..n].iter().any(|c| c.wr_id == 77 && c.status == WcStatus::Success), "{:?}", &wc[..n]);
}

fn req_of(m: &[u8]) -> (u64, Req) {
    match CmMsg::parse(m).unwrap() {
        (h, CmMsg::Req(r)) => (h.tid, r),
        x => panic!("{x:?}"),
    }
}

#[test]
fn spoofed_rej_dreq_rtu_mra_and_req_do_not_disturb_a_live_connection() {
    let mut w = World::new();
    w.t.cm.listen(4420).unwrap();
    let _attacker = w.f.add_device(ATTACKER);
    let log = tap(&w.f, |_, _| false);
    let (hid, tid_conn, hq, tq) = w.establish(4420);
    traffic_still_flows(&mut w, hq, b"before!!");
    let host_req = log.lock().unwrap().iter().find(|(_, m)| attr_of(m) == attr::REQ).unwrap().1.clone();
    let (req_tid, host_req) = req_of(&host_req);
    let before = w.t.cm.stats();
    let hs_before = w.h.cm.stats();
    let spoof = |w: &mut World, src: Ipv4, dst: Ipv4, m: [u8; MAD_LEN]| {
        w.f.inject_ud(src, Qpn(1), dst, Qpn(1), GSI_QKEY, &m);
        w.run(1, 1000);
    };
    let rej = |local: u32, remote: u32, reason: u16| {
        CmMsg::Rej(Rej { local_comm_id: local, remote_comm_id: remote, message_rejected: msg_code::REP, reject_info_length: 0, reason, ari: [0; rej_f::ARI_LEN], private_data: [0; rej_f::PRIVATE_DATA_LEN] }).encode(req_tid)
    };
    let dreq = |local: u32, remote: u32, qpn: u32| CmMsg::Dreq(Dreq { local_comm_id: local, remote_comm_id: remote, remote_qpn: qpn, private_data: [0; short_f::DREQ_PRIVATE_DATA_LEN] }).encode(7);
    // Right comm IDs and QPN, wrong source: REJ (STALE_CONN would close it), DREQ, to both ends.
    spoof(&mut w, ATTACKER, TARGET, rej(hid.0, tid_conn.0, rej_reason::STALE_CONN));
    spoof(&mut w, ATTACKER, TARGET, dreq(hid.0, tid_conn.0, tq.0));
    spoof(&mut w, ATTACKER, HOST, rej(tid_conn.0, hid.0, rej_reason::STALE_CONN));
    spoof(&mut w, ATTACKER, HOST, dreq(tid_conn.0, hid.0, hq.0));
    // Right source, REJ with local comm ID 0: once the peer's ID is known, 0 is no wildcard.
    spoof(&mut w, HOST, TARGET, rej(0, tid_conn.0, rej_reason::STALE_CONN));
    spoof(&mut w, TARGET, HOST, rej(0, hid.0, rej_reason::STALE_CONN));
    // Right source and IDs, DREQ naming another QPN; and comm ID 0 in the DREQ.
    spoof(&mut w, HOST, TARGET, dreq(hid.0, tid_conn.0, tq.0 ^ 1));
    spoof(&mut w, HOST, TARGET, dreq(0, tid_conn.0, tq.0));
    // RTU / MRA / DREP from elsewhere.
    let rtu = CmMsg::Rtu(Rtu { local_comm_id: hid.0, remote_comm_id: tid_conn.0, private_data: [0; short_f::RTU_PRIVATE_DATA_LEN] }).encode(req_tid);
    spoof(&mut w, ATTACKER, TARGET, rtu);
    let mra = CmMsg::Mra(Mra { local_comm_id: hid.0, remote_comm_id: tid_conn.0, message_mraed: msg_code::REP, service_timeout: 31, private_data: [0; mra_f::PRIVATE_DATA_LEN] }).encode(req_tid);
    spoof(&mut w, ATTACKER, TARGET, mra);
    let drep = CmMsg::Drep(Drep { local_comm_id: hid.0, remote_comm_id: tid_conn.0, private_data: [0; short_f::DREP_PRIVATE_DATA_LEN] }).encode(7);
    spoof(&mut w, ATTACKER, TARGET, drep);
    // The stale-connection path: a REQ from the attacker naming the host's CA GUID and QPN
    // (and claiming the host's GID, or its own) must not tear the host's connection down.
    let mut r = host_req;
    r.local_comm_id = 0xdead_beef;
    spoof(&mut w, ATTACKER, TARGET, CmMsg::Req(r).encode(0x99));
    r.primary.local_gid = gid_from_ipv4(ATTACKER);
    spoof(&mut w, ATTACKER, TARGET, CmMsg::Req(r).encode(0x9a));
    // Duplicate of the host's own REQ (its comm ID + GUID) from elsewhere: not a duplicate.
    let mut d = host_req;
    d.primary.local_gid = gid_from_ipv4(ATTACKER);
    spoof(&mut w, ATTACKER, TARGET, CmMsg::Req(d).encode(req_tid));
    w.run(20, 100_000);

    let s = w.t.cm.stats();
    assert!(s.wrong_source - before.wrong_source >= 6, "{s:?}");
    assert!(w.h.cm.stats().wrong_source - hs_before.wrong_source >= 2);
    assert_eq!(s.stale_rejects, before.stale_rejects, "no stale-connection match from another source");
    // The attacker's own REQ (its GID, victim's GUID/QPN) is simply a new request; nobody was disconnected.
    assert!(w.h.events.is_empty(), "host: {:?}", w.h.events);
    assert!(w.t.events.iter().all(|e| matches!(e, CmEvent::ConnectRequest(r) if r.peer_ip == ATTACKER)), "target: {:?}", w.t.events);
    assert_eq!(w.t.cm.qpn(tid_conn), Some(tq));
    assert_eq!(w.h.cm.qpn(hid), Some(hq));
    traffic_still_flows(&mut w, hq, b"after!!!");

    // The real peer still can: its DREQ closes both sides.
    w.t.events.clear();
    w.h.cm.disconnect(&mut w.h.dev, hid).unwrap();
    w.run(5, 1000);
    assert!(w.h.events.contains(&CmEvent::Disconnected { id: hid }));
    assert!(w.t.events.contains(&CmEvent::Disconnected { id: tid_conn }));
}

#[test]
fn stale_connection_from_the_same_source_is_still_detected() {
    // IBA's stale-connection rule still applies to the connection's own peer.
    let mut w = World::new();
    w.t.cm.listen(4420).unwrap();
    let log = tap(&w.f, |_, _| false);
    let (_hid, tid_conn, _hq, _tq) = w.establish(4420);
    let (_, mut r) = req_of(&log.lock().unwrap().iter().find(|(_, m)| attr_of(m) == attr::REQ).unwrap().1);
    r.local_comm_id ^= 0x5555;
    w.f.inject_ud(HOST, Qpn(1), TARGET, Qpn(1), GSI_QKEY, &CmMsg::Req(r).encode(0x42));
    w.run(3, 1000);
    assert_eq!(w.t.cm.stats().stale_rejects, 1);
    let rej = log.lock().unwrap().iter().rev().find(|(src, m)| *src == TARGET && attr_of(m) == attr::REJ).map(|x| x.1.clone()).expect("REJ");
    assert!(matches!(CmMsg::parse(&rej).unwrap().1, CmMsg::Rej(j) if j.reason == rej_reason::STALE_CONN));
    w.run(5, 1000);
    assert!(w.t.events.contains(&CmEvent::Disconnected { id: tid_conn }), "{:?}", w.t.events);
}

#[test]
fn req_whose_gid_is_not_its_source_is_rejected() {
    let mut w = World::new();
    w.t.cm.listen(4420).unwrap();
    let _attacker = w.f.add_device(ATTACKER);
    let log = tap(&w.f, |_, _| false);
    // The Linux host's REQ (claims HOST's GID) sent from the attacker's address.
    w.f.inject_ud(ATTACKER, Qpn(1), TARGET, Qpn(1), GSI_QKEY, &linux_req_mad());
    w.run(2, 1000);
    assert!(w.t.events.is_empty(), "{:?}", w.t.events);
    assert_eq!(w.t.cm.conn_count(), 0);
    let (dst_is_attacker, reason) = log
        .lock()
        .unwrap()
        .iter()
        .find(|(src, m)| *src == TARGET && attr_of(m) == attr::REJ)
        .map(|(_, m)| match CmMsg::parse(m).unwrap().1 {
            CmMsg::Rej(j) => (true, j.reason),
            _ => (false, 0),
        })
        .expect("REJ sent");
    assert!(dst_is_attacker);
    assert_eq!(reason, rej_reason::INVALID_GID);
}

#[test]
fn peer_chosen_timers_are_clamped_on_the_qp_and_the_cm_timers() {
    let mut w = World::new();
    w.t.cm.listen(4420).unwrap();
    let (tid, mut r) = req_of(&linux_req_mad());
    // Retry RNR forever, no ACK timer, CM timeouts of 2.4 hours, 15 retries.
    r.rnr_retry_count = 7;
    r.primary.local_ack_timeout = 0;
    r.remote_cm_response_timeout = 31;
    r.local_cm_response_timeout = 31;
    r.max_cm_retries = 15;
    w.f.inject_ud(HOST, Qpn(1), TARGET, Qpn(1), GSI_QKEY, &CmMsg::Req(r).encode(tid));
    w.run(1, 1000);
    let req = w.take_request();
    assert_eq!(w.t.cm.stats().clamped, 5);
    let a = w.t.cm.accept_attrs(req.id, 16, 16, RW).unwrap();
    let c = rdma::cm_limits::PeerClamps::default();
    assert_eq!((a.rnr_retry, a.timeout), (c.rnr_retry_max, c.ack_timeout_min));
    // A huge ACK timeout is lowered too.
    let mut r2 = r;
    r2.local_comm_id ^= 1;
    r2.local_qpn ^= 1;
    r2.primary.local_ack_timeout = 31;
    w.f.inject_ud(HOST, Qpn(1), TARGET, Qpn(1), GSI_QKEY, &CmMsg::Req(r2).encode(tid + 1));
    w.run(1, 1000);
    let req2 = w.take_request();
    assert_eq!(w.t.cm.accept_attrs(req2.id, 16, 16, RW).unwrap().timeout, c.ack_timeout_max);
    // Left undecided, the requests are forgotten after the clamped give-up time
    // ((8 + 1) × (2 × packet life + 4.3 s) < 40 s), not after 16 × 2.4 hours.
    for _ in 0..450 {
        w.step(100_000_000);
    }
    assert_eq!(w.t.cm.conn_count(), 0, "undecided requests still held after 40 s");
}

#[test]
fn rep_rnr_retry_is_clamped_on_the_active_side() {
    let mut w = World::new();
    w.t.cm.listen(4420).unwrap();
    // The target's CM advertises RNR Retry Count 7 (default, as Linux nvmet does).
    let (_hid, _tid, hq, _tq) = w.establish(4420);
    let a = w.h.dev.qp_attrs(hq).unwrap();
    assert_eq!(a.rnr_retry, rdma::cm_limits::PeerClamps::default().rnr_retry_max);
    assert!(w.h.cm.stats().clamped >= 1);
}
