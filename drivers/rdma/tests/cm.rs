//! CM behaviour over soft verbs: connect/data/disconnect, REJ paths, lost MADs, duplicates,
//! MRA, timeouts, stale connections, 1,000 cycles without leaks, and interop with the REQ
//! bytes Linux nvme-rdma sent (linuxpeer.md).
use crate::common;
use common::*;
use hal::DmaRegion;
use rdma::cm::*;
use rdma::cm_wire::*;
use rdma::*;

#[test]
fn connect_exchange_data_disconnect() {
    let mut w = World::new();
    w.t.cm.listen(4420).unwrap();
    let log = tap(&w.f, |_, _| false);
    let before_t = w.t.dev.resources();
    let before_h = w.h.dev.resources();
    let nv = NvmeRdmaCmReq { recfmt: 0, qid: 1, hrqsize: 128, hsqsize: 127, cntlid: 0 };
    let hid = w.connect(4420, &nv.to_bytes());
    w.run(2, 1000);
    let req = w.take_request();
    assert_eq!(req.port, 4420);
    assert_eq!(req.peer_ip, HOST);
    assert_eq!(NvmeRdmaCmReq::parse(&req.private_data).unwrap(), nv);
    let tq = w.accept(req.id, &NvmeRdmaCmRep { recfmt: 0, crqsize: 128 }.to_bytes());
    w.run(3, 1000);
    let Some(CmEvent::Established { id, qpn: hq, private_data }) = w.h.events.pop() else { panic!("{:?}", w.h.events) };
    assert_eq!(id, hid);
    assert_eq!(NvmeRdmaCmRep::parse(&private_data).unwrap().crqsize, 128);
    assert!(matches!(w.t.events.pop(), Some(CmEvent::Established { qpn, .. }) if qpn == tq));

    // TIDs: REP and RTU reuse the REQ's TID; the REQ TID is hi<<32 | comm-id byte-swapped.
    let mads: Vec<(u16, u64, Vec<u8>)> = log.lock().unwrap().iter().map(|(_, m)| (attr_of(m), MadHdr::parse(m).unwrap().tid, m.clone())).collect();
    let attrs: Vec<u16> = mads.iter().map(|m| m.0).collect();
    assert_eq!(attrs, vec![attr::REQ, attr::REP, attr::RTU]);
    assert!(mads.iter().all(|m| m.1 == mads[0].1));
    assert_eq!(mads[0].1, (1u64 << 32) | hid.0.swap_bytes() as u64);
    let (_, CmMsg::Rep(rep)) = CmMsg::parse(&mads[1].2).unwrap() else { panic!() };
    let (_, CmMsg::Req(rq)) = CmMsg::parse(&mads[0].2).unwrap() else { panic!() };
    assert_eq!((rep.remote_comm_id, rep.local_qpn, rq.local_qpn), (hid.0, tq.0, hq.0));

    // Data both ways over the CM-made QPs.
    w.h.buf.write(60_000, b"capsule!");
    w.h.dev.post_send(hq, &SendWr { wr_id: 1, op: SendOp::Send, sge: Sge { addr: w.h.buf.paddr() + 60_000, len: 8, lkey: w.h.lkey }, signaled: true, fence: false, ud: None }).unwrap();
    w.t.buf.write(60_000, b"response");
    w.t.dev.post_send(tq, &SendWr { wr_id: 2, op: SendOp::RdmaWrite { remote_addr: w.h.buf.paddr() + 50_000, rkey: w.h.rkey }, sge: Sge { addr: w.t.buf.paddr() + 60_000, len: 8, lkey: w.t.lkey }, signaled: true, fence: false, ud: None }).unwrap();
    w.run(3, 1000);
    let mut wc = [Completion::default(); 8];
    let n = w.t.dev.poll_cq(w.t.cq, &mut wc);
    let got: Vec<(u64, WcStatus)> = wc[..n].iter().map(|c| (c.wr_id, c.status)).collect();
    assert!(got.contains(&(100, WcStatus::Success)) && got.contains(&(2, WcStatus::Success)), "{got:?}");
    let mut b = [0u8; 8];
    w.t.buf.read(0, &mut b);
    assert_eq!(&b, b"capsule!");
    w.h.buf.read(50_000, &mut b);
    assert_eq!(&b, b"response");

    // Disconnect from the host: DREQ (fresh TID) → DREP (same TID); both sides Disconnected.
    w.h.cm.disconnect(&mut w.h.dev, hid).unwrap();
    w.run(3, 1000);
    assert!(w.h.events.contains(&CmEvent::Disconnected { id: hid }));
    assert!(w.t.events.contains(&CmEvent::Disconnected { id: req.id }));
    let l = log.lock().unwrap();
    let dreq = &l[l.len() - 2].1;
    let drep = &l[l.len() - 1].1;
    assert_eq!((attr_of(dreq), attr_of(drep)), (attr::DREQ, attr::DREP));
    assert_eq!(MadHdr::parse(dreq).unwrap().tid, MadHdr::parse(drep).unwrap().tid);
    let (_, CmMsg::Dreq(d)) = CmMsg::parse(dreq).unwrap() else { panic!() };
    assert_eq!(d.remote_qpn, tq.0);
    drop(l);
    // QPs destroyed; timewait expires and the CMs forget the connections.
    assert_eq!(w.t.dev.resources().qps, before_t.qps);
    assert_eq!(w.h.dev.resources().qps, before_h.qps);
    w.run(3, 20_000_000);
    assert_eq!((w.t.cm.conn_count(), w.h.cm.conn_count()), (0, 0));
    assert_eq!(w.t.dev.resources(), before_t);
    assert_eq!(w.h.dev.resources(), before_h);
}

#[test]
fn consumer_reject_carries_reason_and_private_data() {
    let mut w = World::new();
    w.t.cm.listen(4420).unwrap();
    let log = tap(&w.f, |_, _| false);
    let hid = w.connect(4420, &NvmeRdmaCmReq { recfmt: 0, qid: 0, hrqsize: 32, hsqsize: 200, cntlid: 0 }.to_bytes());
    w.run(2, 1000);
    let req = w.take_request();
    let rej = NvmeRdmaCmRej { recfmt: 0, sts: nvme_rdma_sts::INVALID_HSQSIZE };
    w.t.cm.reject(&mut w.t.dev, req.id, rej_reason::CONSUMER_DEFINED, &rej.to_bytes()).unwrap();
    w.run(2, 1000);
    let Some(CmEvent::Rejected { id, reason, private_data }) = w.h.events.pop() else { panic!("{:?}", w.h.events) };
    assert_eq!((id, reason), (hid, rej_reason::CONSUMER_DEFINED));
    assert_eq!(NvmeRdmaCmRej::parse(&private_data).unwrap(), rej);
    // REJ reuses the REQ TID; host QP destroyed; no QP was ever created on the target.
    let l = log.lock().unwrap();
    assert_eq!(MadHdr::parse(&l[1].1).unwrap().tid, MadHdr::parse(&l[0].1).unwrap().tid);
    assert_eq!(w.h.dev.resources().qps, 0);
    assert_eq!(w.t.dev.resources().qps, 0);
    assert_eq!(w.h.cm.qp_count() + w.t.cm.qp_count(), 0);
}

#[test]
fn unknown_port_is_rejected_with_invalid_service_id() {
    let mut w = World::new();
    w.t.cm.listen(4420).unwrap();
    let hid = w.connect(4421, b"");
    w.run(3, 1000);
    assert!(matches!(w.h.events.pop(), Some(CmEvent::Rejected { id, reason: rej_reason::INVALID_SERVICE_ID, .. }) if id == hid));
    assert!(w.t.events.is_empty());
    assert_eq!(w.h.dev.resources().qps, 0);
}

#[test]
fn lost_req_rep_and_rtu_are_recovered_by_retries() {
    for lost in [attr::REQ, attr::REP, attr::RTU] {
        let mut w = World::new();
        w.t.cm.listen(4420).unwrap();
        let log = tap(&w.f, move |a, n| a == lost && n == 1);
        let hid = w.connect(4420, b"x");
        // Enough fake time for a resend (REQ/REP timer ≈ 2×1 ms + 4 ms here).
        let mut req = None;
        for _ in 0..40 {
            w.step(500_000);
            if req.is_none() && w.t.events.iter().any(|e| matches!(e, CmEvent::ConnectRequest(_))) {
                let r = w.take_request();
                w.accept(r.id, b"");
                req = Some(r);
            }
        }
        let req = req.expect("REQ arrived");
        assert!(w.h.events.iter().any(|e| matches!(e, CmEvent::Established { id, .. } if *id == hid)), "lost {lost:#x}: {:?}", w.h.events);
        assert!(w.t.events.iter().any(|e| matches!(e, CmEvent::Established { id, .. } if *id == req.id)), "lost {lost:#x}: {:?}", w.t.events);
        let sent = |a: u16| log.lock().unwrap().iter().filter(|(_, m)| attr_of(m) == a).count();
        assert!(sent(lost) >= 2, "the lost {lost:#x} was sent again");
        assert_eq!(w.t.dev.resources().qps, 1, "one connection, one QP");
        if lost == attr::REP {
            // The active side retried its REQ; the passive side saw it as a duplicate.
            assert!(w.t.cm.stats().dup_reqs >= 1 || w.t.cm.stats().resends >= 1);
        }
    }
}

#[test]
fn duplicate_req_gives_one_connect_request_and_a_resent_rep() {
    let mut w = World::new();
    w.t.cm.listen(4420).unwrap();
    let log = tap(&w.f, |_, _| false);
    w.connect(4420, b"x");
    w.run(2, 1000);
    // Replay the REQ (as a retransmission would) while the app is deciding, then after REP.
    let req_mad = log.lock().unwrap()[0].1.clone();
    let hq = Qpn(1);
    w.f.inject_ud(HOST, hq, TARGET, Qpn(1), GSI_QKEY, &req_mad);
    w.run(2, 1000);
    assert_eq!(w.t.events.iter().filter(|e| matches!(e, CmEvent::ConnectRequest(_))).count(), 1);
    let req = w.take_request();
    w.accept(req.id, b"");
    w.run(3, 1000);
    let reps_before = log.lock().unwrap().iter().filter(|(_, m)| attr_of(m) == attr::REP).count();
    // Established now; a late duplicate REQ must not create anything new.
    w.f.inject_ud(HOST, hq, TARGET, Qpn(1), GSI_QKEY, &req_mad);
    w.run(2, 1000);
    assert_eq!(w.t.cm.stats().dup_reqs, 2);
    assert!(w.t.events.iter().all(|e| !matches!(e, CmEvent::ConnectRequest(_))));
    assert_eq!(log.lock().unwrap().iter().filter(|(_, m)| attr_of(m) == attr::REP).count(), reps_before);
    assert_eq!(w.t.dev.resources().qps, 1);
}

/// A REQ from a host whose MAC the target has not resolved yet (its ARP answer still on the
/// way: the host knew the target's address, the target never asked for the host's) is held
/// and answered as soon as the address resolves, well inside the host's REQ retransmission
/// interval; before, it was dropped and the host's first connect waited a whole interval.
#[test]
fn req_from_an_unresolved_host_is_answered_once_its_address_resolves() {
    let mut w = World::new();
    w.t.cm.listen(4420).unwrap();
    let log = tap(&w.f, |_, _| false);
    w.f.delay_resolution(HOST, 3);
    let hid = w.connect(4420, b"x");
    // The REQ timer is about 6 ms here; everything below happens in under 1 ms.
    accept_within(&mut w, 10, hid);
    let reqs = log.lock().unwrap().iter().filter(|(_, m)| attr_of(m) == attr::REQ).count();
    assert_eq!(reqs, 1, "answered without a retransmitted REQ");
    let s = w.t.cm.stats();
    assert_eq!((s.no_route, s.route_waits, s.route_waits_answered, s.route_waits_expired), (1, 1, 1, 0), "{s:?}");
}

/// A held REQ whose address never resolves is dropped after `unrouted_wait_ns` (nothing
/// created, counted); the host's retransmission, once the address resolves, is served. The
/// hold is bounded: with room for one, a second unresolved REQ is only counted.
#[test]
fn held_req_expires_and_the_hold_is_bounded() {
    let limits = rdma::cm_limits::CmLimits { unrouted_reqs: 1, unrouted_wait_ns: 1_000_000, ..rdma::cm_limits::CmLimits::default() };
    let mut w = World::with_target_cfg(CmConfig { limits, ..cfg(0x1111) });
    w.t.cm.listen(4420).unwrap();
    let log = tap(&w.f, |_, _| false);
    w.f.delay_resolution(HOST, u32::MAX);
    let hid = w.connect(4420, b"x");
    w.run(2, 100_000);
    let req_mad = log.lock().unwrap()[0].1.clone();
    // Another REQ (another comm ID) from the same unresolved host finds the hold full.
    let mut other = req_mad.clone();
    other[24] ^= 0x5a;
    w.f.inject_ud(HOST, Qpn(1), TARGET, Qpn(1), GSI_QKEY, &other);
    w.run(15, 100_000);
    let s = w.t.cm.stats();
    assert_eq!((s.no_route, s.route_waits, s.route_waits_answered, s.route_waits_expired), (2, 1, 0, 1), "{s:?}");
    assert!(w.t.events.is_empty(), "{:?}", w.t.events);
    assert_eq!(w.t.cm.conn_count(), 0);
    // The address resolves; the host's REQ retransmission is served.
    w.f.delay_resolution(HOST, 0);
    accept_within(&mut w, 100, hid);
}

/// Step 100 us at a time (at most `steps`) until the target has a connect request, accept it,
/// and check the host's connection `hid` is established.
fn accept_within(w: &mut World, steps: usize, hid: ConnId) {
    for _ in 0..steps {
        w.step(100_000);
        if w.t.events.iter().any(|e| matches!(e, CmEvent::ConnectRequest(_))) {
            break;
        }
    }
    let req = w.take_request();
    w.accept(req.id, b"");
    w.run(5, 100_000);
    assert!(w.h.events.iter().any(|e| matches!(e, CmEvent::Established { id, .. } if *id == hid)), "{:?}", w.h.events);
}

#[test]
fn no_answer_ends_in_unreachable_after_max_cm_retries() {
    let mut w = World::new();
    // Nobody listens and every MAD to the target is lost.
    let log = tap(&w.f, |a, _| a == attr::REQ);
    let hid = w.connect(4420, b"");
    w.run(100, 1_000_000);
    assert_eq!(w.h.events, vec![CmEvent::Unreachable { id: hid }]);
    let reqs = log.lock().unwrap().iter().filter(|(_, m)| attr_of(m) == attr::REQ).count();
    assert_eq!(reqs, 1 + 3, "first REQ + max_cm_retries resends");
    // Linux sends REJ(TIMEOUT) when it gives up on a REQ.
    let last = log.lock().unwrap().last().unwrap().1.clone();
    assert!(matches!(CmMsg::parse(&last).unwrap().1, CmMsg::Rej(r) if r.reason == rej_reason::TIMEOUT));
    assert_eq!(w.h.dev.resources().qps, 0);
    assert_eq!(w.h.cm.conn_count(), 0);
}

#[test]
fn mra_extends_the_active_timer() {
    let mut w = World::new();
    w.t.cm.listen(4420).unwrap();
    let log = tap(&w.f, |_, _| false);
    let hid = w.connect(4420, b"");
    w.run(2, 1000);
    let req = w.take_request();
    // Service timeout 18 ≈ 1.07 s, far beyond REQ timeout × retries (≈ 6 ms × 4).
    w.t.cm.delay(&mut w.t.dev, req.id, 18).unwrap();
    w.run(50, 10_000_000); // 0.5 s
    assert!(w.h.events.is_empty(), "{:?}", w.h.events);
    assert_eq!(log.lock().unwrap().iter().filter(|(_, m)| attr_of(m) == attr::REQ).count(), 1);
    w.accept(req.id, b"");
    w.run(3, 1000);
    assert!(matches!(w.h.events.pop(), Some(CmEvent::Established { id, .. }) if id == hid));
}

#[test]
fn rep_unanswered_times_out_on_the_passive_side() {
    let mut w = World::new();
    w.t.cm.listen(4420).unwrap();
    // Every REP is lost; the host's REQ resends and its final REJ are lost too, so only
    // the passive REP timer decides.
    let log = tap(&w.f, |a, n| a == attr::REP || a == attr::REJ || (a == attr::REQ && n > 1));
    w.connect(4420, b"");
    w.run(2, 1000);
    let req = w.take_request();
    w.accept(req.id, b"");
    assert_eq!(w.t.dev.resources().qps, 1);
    w.run(200, 1_000_000);
    assert!(w.t.events.contains(&CmEvent::Unreachable { id: req.id }));
    assert_eq!(w.t.dev.resources().qps, 0, "QP destroyed on REP timeout");
    assert_eq!(w.t.cm.qp_count(), 0);
    // The REQ's Max CM Retries (3) bound the REP resends.
    assert_eq!(log.lock().unwrap().iter().filter(|(_, m)| attr_of(m) == attr::REP).count(), 4);
}

#[test]
fn target_initiated_disconnect_and_lost_drep() {
    let mut w = World::new();
    w.t.cm.listen(4420).unwrap();
    let (hid, tid, _, _) = w.establish(4420);
    let log = tap(&w.f, |a, n| a == attr::DREP && n == 1);
    w.t.cm.disconnect(&mut w.t.dev, tid).unwrap();
    w.run(40, 1_000_000);
    assert!(w.h.events.contains(&CmEvent::Disconnected { id: hid }));
    assert!(w.t.events.contains(&CmEvent::Disconnected { id: tid }));
    // The DREQ was resent and the host (in timewait) answered the duplicate with a DREP.
    let n = |a: u16| log.lock().unwrap().iter().filter(|(_, m)| attr_of(m) == a).count();
    assert!(n(attr::DREQ) >= 2 && n(attr::DREP) >= 2);
    assert_eq!(w.t.dev.resources().qps + w.h.dev.resources().qps, 0);
}

#[test]
fn thousand_connect_disconnect_cycles_leak_nothing() {
    let mut w = World::new();
    w.t.cm.listen(4420).unwrap();
    let before_t = w.t.dev.resources();
    let before_h = w.h.dev.resources();
    for i in 0..1000 {
        let (hid, tid, hq, tq) = w.establish(4420);
        let _ = (hq, tq);
        if i % 2 == 0 {
            w.h.cm.disconnect(&mut w.h.dev, hid).unwrap();
        } else {
            w.t.cm.disconnect(&mut w.t.dev, tid).unwrap();
        }
        w.run(3, 1000);
        assert!(w.h.events.contains(&CmEvent::Disconnected { id: hid }), "cycle {i}");
        assert!(w.t.events.contains(&CmEvent::Disconnected { id: tid }), "cycle {i}");
        w.h.events.clear();
        w.t.events.clear();
        // Drain flushed completions from the app CQs.
        let mut wc = [Completion::default(); 64];
        while w.t.dev.poll_cq(w.t.cq, &mut wc) > 0 {}
        while w.h.dev.poll_cq(w.h.cq, &mut wc) > 0 {}
        assert_eq!(w.t.dev.resources().qps, 0, "cycle {i}");
        assert_eq!(w.h.dev.resources().qps, 0, "cycle {i}");
        // One connection per 10 ms: the host's REQ rate stays within CmLimits (100/s).
        w.run(1, 10_000_000);
    }
    w.run(2, 50_000_000);
    assert_eq!((w.t.cm.conn_count(), w.h.cm.conn_count()), (0, 0));
    assert_eq!(w.t.dev.resources(), before_t);
    assert_eq!(w.h.dev.resources(), before_h);
    assert_eq!(w.t.dev.cq_overruns() + w.h.dev.cq_overruns(), 0);
}

// ---- Interop with what Linux sends (linuxpeer.md) ----

#[test]
fn listener_answers_the_linux_req_as_nvmet_would() {
    let mut w = World::new();
    w.t.cm.listen(4420).unwrap();
    // The "Linux host" is this test: what the target sends is recorded, not delivered to
    // the host device's own CM (which would REJ a REP it knows nothing about).
    let log = tap_to(&w.f, |_, _, dst| dst == HOST);
    w.f.inject_ud(HOST, Qpn(1), TARGET, Qpn(1), GSI_QKEY, &linux_req_mad());
    w.run(1, 1000);
    let req = w.take_request();
    assert_eq!((req.peer_ip, req.peer_port, req.responder_resources, req.initiator_depth), (HOST, 0xeb6a, 128, 0));
    let nv = NvmeRdmaCmReq::parse(&req.private_data).unwrap();
    assert_eq!((nv.qid, nv.hrqsize, nv.hsqsize), (0, 32, 31));
    let tq = w.accept(req.id, &NvmeRdmaCmRep { recfmt: 0, crqsize: nv.hsqsize + 1 }.to_bytes());
    w.run(1, 1000);
    let rep_mad = log.lock().unwrap().iter().find(|(_, m)| attr_of(m) == attr::REP).expect("REP sent").1.clone();
    // Expected REP bytes from the field facts: Linux TID echoed, comm IDs, our QPN, PSN
    // (random, read back), RespRes = min(16, REQ InitDepth 0) = 0, InitDepth = min(16, 128) = 16,
    // ack delay 15 | failover 0 | E2E 1 = 0x79, RNR 7 << 5 = 0xe0, GUID = EUI-64 of 02:00:0a:4d:00:01.
    let psn = &rep_mad[24 + 20..24 + 23];
    let mut want = hex("01 07 02 03 0000 0000 00000002 7e980c6f 0013 0000 00000000");
    want.extend_from_slice(&req.id.0.to_be_bytes());
    want.extend_from_slice(&hex("6f0c987e 00000000"));
    want.extend_from_slice(&[(tq.0 >> 16) as u8, (tq.0 >> 8) as u8, tq.0 as u8, 0, 0, 0, 0, 0]);
    want.extend_from_slice(psn);
    want.extend_from_slice(&hex("00 00 10 79 e0 00 00 0a ff fe 4d 00 01"));
    want.extend_from_slice(&hex("0000 2000"));
    want.resize(256, 0);
    assert_eq!(rep_mad, want);
    // The QP got the REQ's parameters (cm.c cm_req_handler / cm_init_qp_*_attr rules).
    let a = w.t.dev.qp_attrs(tq).expect("QP connected before the REP left");
    // Starting PSN in REQ/REP is the sender's receive PSN (cm.c: active rq_psn = REQ's, sq_psn =
    // REP's), so our QP sends with the REQ's PSN and expects the REP's.
    assert_eq!((a.remote_qpn, a.remote_ip, a.sq_psn, a.rq_psn), (Qpn(0x11), HOST, 0x2ed269, u32::from_be_bytes([0, psn[0], psn[1], psn[2]])));
    // RNR Retry Count 7 (retry forever) is clamped to 6 (cm_limits::PeerClamps).
    assert_eq!((a.mtu, a.retry_cnt, a.rnr_retry, a.timeout), (1024, 7, 6, 19));
    // RC UDP source port from the REQ flow label 0xc931a, as Linux rxe did on the wire.
    assert_eq!(a.udp_sport, 54056);
    // READs: we may issue min(our 16, host RespRes 128); host may issue min(16, its InitDepth 0) = 0,
    // so REMOTE_READ stays off (Linux cm_init_qp_init_attr).
    assert_eq!((a.max_rd_atomic, a.max_dest_rd_atomic, a.access.remote_read, a.access.remote_write), (16, 0, false, true));
    assert_eq!(a.remote_mac, w.h.dev.local_mac());
    let rtu = CmMsg::Rtu(Rtu { local_comm_id: 0x6f0c987e, remote_comm_id: req.id.0, private_data: [0; 224] }).encode(0x0000_0002_7e98_0c6f);
    w.f.inject_ud(HOST, Qpn(1), TARGET, Qpn(1), GSI_QKEY, &rtu);
    w.run(1, 1000);
    assert!(matches!(w.t.events.pop(), Some(CmEvent::Established { qpn, .. }) if qpn == tq));

    // A DREQ naming another QPN is ignored (Linux cm_dreq_handler); the right one gets a DREP.
    let dreq = |qpn: u32| CmMsg::Dreq(Dreq { local_comm_id: 0x6f0c987e, remote_comm_id: req.id.0, remote_qpn: qpn, private_data: [0; 220] }).encode(0x0000_0002_7e98_0c6f);
    w.f.inject_ud(HOST, Qpn(1), TARGET, Qpn(1), GSI_QKEY, &dreq(tq.0 + 1));
    w.run(1, 1000);
    assert!(w.t.events.is_empty());
    w.f.inject_ud(HOST, Qpn(1), TARGET, Qpn(1), GSI_QKEY, &dreq(tq.0));
    w.run(1, 1000);
    assert_eq!(w.t.events.pop(), Some(CmEvent::Disconnected { id: req.id }));
    let drep = log.lock().unwrap().last().unwrap().1.clone();
    assert_eq!(MadHdr::parse(&drep).unwrap().tid, 0x0000_0002_7e98_0c6f);
    assert!(matches!(CmMsg::parse(&drep).unwrap().1, CmMsg::Drep(d) if d.local_comm_id == req.id.0 && d.remote_comm_id == 0x6f0c987e));

    // The same host QP (0x11, same CA GUID) asking again under a new comm ID during timewait:
    // a new request (Linux cm_enter_timewait drops the remote QPN from its stale table; hosts
    // reuse QPNs at once, e.g. nvme discover then connect).
    let mut again = linux_req_mad();
    again[24..28].copy_from_slice(&0x1234_5678u32.to_be_bytes());
    w.f.inject_ud(HOST, Qpn(1), TARGET, Qpn(1), GSI_QKEY, &again);
    w.run(1, 1000);
    assert!(matches!(w.t.events.pop(), Some(CmEvent::ConnectRequest(r)) if r.id != req.id));
    assert_eq!(w.t.dev.resources().qps, 0);
}

#[test]
fn our_req_matches_linux_byte_for_byte_except_per_connection_values() {
    let mut w = World::new();
    w.h.cm = {
        // Linux's timers and retries (wire.md 2.3).
        let c = CmConfig { seed: 0x77, ..CmConfig::default() };
        Cm::new(&mut w.h.dev, c).unwrap()
    };
    let log = tap(&w.f, |_, _| false);
    let recvs = w.h.recvs(4);
    let nv = NvmeRdmaCmReq { recfmt: 0, qid: 0, hrqsize: 32, hsqsize: 31, cntlid: 0 };
    let p = ConnectParams {
        dest_ip: TARGET,
        dest_port: 4420,
        src_port: 0xeb6a,
        send_cq: w.h.cq,
        recv_cq: w.h.cq,
        sq_size: 32,
        rq_size: 32,
        recv_wrs: &recvs,
        private_data: &nv.to_bytes(),
        responder_resources: 128,
        initiator_depth: 0,
        access: RW,
    };
    let id = w.h.cm.connect(&mut w.h.dev, &p).unwrap();
    let qpn = w.h.cm.qpn(id).unwrap();
    let ours = log.lock().unwrap()[0].1.clone();
    // Start from Linux's bytes and substitute only what differs per connection/host.
    let mut want = linux_req_mad();
    want[8..12].copy_from_slice(&1u32.to_be_bytes()); // TID hi (Linux: its MAD agent's)
    want[12..16].copy_from_slice(&id.0.swap_bytes().to_be_bytes()); // TID lo: comm ID as Linux forms it
    want[24..28].copy_from_slice(&id.0.to_be_bytes());
    want[40..48].copy_from_slice(&guid_from_mac(w.h.dev.local_mac()).to_be_bytes());
    want[56..59].copy_from_slice(&qpn.0.to_be_bytes()[1..]);
    want[68..71].copy_from_slice(&ours[68..71]); // starting PSN (random)
    assert_eq!(ours, want);
}

#[test]
fn first_packet_establishes_when_the_rtu_is_lost() {
    let mut w = World::new();
    w.t.cm.listen(4420).unwrap();
    let log = tap(&w.f, |a, _| a == attr::RTU);
    let hid = w.connect(4420, b"");
    w.run(2, 1000);
    let req = w.take_request();
    let tq = w.accept(req.id, b"");
    w.run(2, 1000);
    let Some(CmEvent::Established { id, qpn: hq, .. }) = w.h.events.pop() else { panic!() };
    assert_eq!(id, hid);
    assert!(w.t.events.is_empty(), "no RTU, not established yet");
    // The host sends at once; the target app sees the receive and tells the CM (COMM_EST).
    w.h.dev.post_send(hq, &SendWr { wr_id: 1, op: SendOp::Send, sge: Sge { addr: w.h.buf.paddr() + 60_000, len: 64, lkey: w.h.lkey }, signaled: true, fence: false, ud: None }).unwrap();
    w.run(1, 1000);
    let mut wc = [Completion::default(); 4];
    assert_eq!(w.t.dev.poll_cq(w.t.cq, &mut wc), 1);
    assert_eq!((wc[0].opcode, wc[0].qpn), (WcOpcode::Recv, tq));
    w.t.cm.notify_comm_est(req.id);
    w.run(1, 1000);
    assert!(matches!(w.t.events.pop(), Some(CmEvent::Established { id, .. }) if id == req.id));
    // Established: the REP timer is off, nothing more is resent.
    let reps = log.lock().unwrap().iter().filter(|(_, m)| attr_of(m) == attr::REP).count();
    w.run(50, 1_000_000);
    assert_eq!(log.lock().unwrap().iter().filter(|(_, m)| attr_of(m) == attr::REP).count(), reps);
    assert!(w.t.events.is_empty() && w.h.events.is_empty());
}

#[test]
fn undecided_request_is_forgotten_after_the_peer_gave_up() {
    let mut w = World::new();
    w.t.cm.listen(4420).unwrap();
    // The host's REJ(TIMEOUT) is lost, so only the target's own deadline cleans up.
    let _log = tap(&w.f, |a, _| a == attr::REJ);
    let hid = w.connect(4420, b"");
    w.run(2, 1000);
    let req = w.take_request();
    w.run(200, 1_000_000);
    assert!(w.h.events.contains(&CmEvent::Unreachable { id: hid }));
    assert!(w.t.events.contains(&CmEvent::Unreachable { id: req.id }));
    assert!(matches!(w.t.cm.reject(&mut w.t.dev, req.id, rej_reason::CONSUMER_DEFINED, &[]), Err(CmError::BadState(_)) | Err(CmError::UnknownConn(_))));
    w.run(2, 50_000_000);
    assert_eq!((w.t.cm.conn_count(), w.h.cm.conn_count()), (0, 0));
}

mod garbage {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
        /// Random CM MADs (valid header, random attribute and body, including bodies that
        /// reuse live comm IDs) never panic either side, and a real connection still works after.
        #[test]
        fn random_mads_do_not_break_the_cm(
            mads in proptest::collection::vec((0x10u16..0x1b, proptest::collection::vec(any::<u8>(), 232), any::<bool>()), 1..24),
        ) {
            let mut w = World::new();
            w.t.cm.listen(4420).unwrap();
            let (hid, tid, _, _) = w.establish(4420);
            for (attr, body, aim) in mads {
                let mut m = vec![1u8, 7, 2, 3, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5];
                m.extend_from_slice(&attr.to_be_bytes());
                m.extend_from_slice(&[0; 6]);
                m.extend_from_slice(&body);
                if aim {
                    // Point the message at the live connection's IDs to reach deeper states.
                    m[24..28].copy_from_slice(&hid.0.to_be_bytes());
                    m[28..32].copy_from_slice(&tid.0.to_be_bytes());
                }
                w.f.inject_ud(HOST, Qpn(1), TARGET, Qpn(1), GSI_QKEY, &m);
                let mut back = m.clone();
                if aim {
                    back[24..28].copy_from_slice(&tid.0.to_be_bytes());
                    back[28..32].copy_from_slice(&hid.0.to_be_bytes());
                }
                w.f.inject_ud(TARGET, Qpn(1), HOST, Qpn(1), GSI_QKEY, &back);
                w.run(1, 3_000_000);
            }
            w.run(50, 5_000_000);
            // Whatever happened to the first connection, every QP the CMs still own exists
            // and a new connection comes up.
            prop_assert_eq!(w.t.dev.resources().qps, w.t.cm.qp_count());
            prop_assert_eq!(w.h.dev.resources().qps, w.h.cm.qp_count());
            w.t.events.clear();
            w.h.events.clear();
            w.establish(4420);
        }
    }
}

#[test]
fn unresolvable_peer_ends_in_unreachable_without_leaks() {
    let mut w = World::new();
    let recvs = w.h.recvs(2);
    let p = ConnectParams {
        dest_ip: [10, 77, 0, 99],
        dest_port: 4420,
        src_port: 0,
        send_cq: w.h.cq,
        recv_cq: w.h.cq,
        sq_size: 4,
        rq_size: 4,
        recv_wrs: &recvs,
        private_data: &[],
        responder_resources: 0,
        initiator_depth: 0,
        access: RW,
    };
    let id = w.h.cm.connect(&mut w.h.dev, &p).unwrap();
    assert_eq!(w.h.dev.resources().qps, 1);
    w.run(50, 1_000_000);
    assert_eq!(w.h.events, vec![CmEvent::Unreachable { id }]);
    assert_eq!(w.h.dev.resources().qps, 0);
    assert_eq!(w.h.cm.conn_count(), 0);
    // Too much private data is refused before anything is created.
    let big = [0u8; REQ_PRIVATE_DATA_MAX + 1];
    let p2 = ConnectParams { dest_ip: TARGET, private_data: &big, ..p };
    assert!(matches!(w.h.cm.connect(&mut w.h.dev, &p2), Err(CmError::PrivateDataTooLong { .. })));
    assert_eq!(w.h.dev.resources().qps, 0);
}

/// App-owned QPs on both sides (the NVMe-oF transports create their own): the CM hands out
/// the attributes, connects the active QP on the REP, exchanges the same MADs, and never
/// moves such a QP to ERROR nor destroys it.
#[test]
fn app_owned_qps_connect_carry_data_and_are_left_to_the_app() {
    let mut w = World::new();
    w.t.cm.listen(4420).unwrap();
    let log = tap(&w.f, |_, _| false);
    let before_t = w.t.dev.resources();
    let before_h = w.h.dev.resources();
    // Host: QP in RESET with receives posted, then the CM.
    let hq = w.h.dev.create_rc_qp(w.h.cq, w.h.cq, 32, 32).unwrap();
    for r in w.h.recvs(4) {
        w.h.dev.post_recv(hq, &r).unwrap();
    }
    let p = ConnectParams { dest_ip: TARGET, dest_port: 4420, src_port: 0, send_cq: Cqn(0), recv_cq: Cqn(0), sq_size: 0, rq_size: 0, recv_wrs: &[], private_data: b"req", responder_resources: 16, initiator_depth: 0, access: RW };
    let hid = w.h.cm.connect_app_qp(&mut w.h.dev, hq, &p).unwrap();
    w.run(2, 1000);
    let req = w.take_request();
    // Target: attributes first, then its own QP, then the REP.
    let attrs = w.t.cm.accept_attrs(req.id, 16, 16, RW).unwrap();
    assert_eq!(attrs.remote_qpn, hq);
    assert_eq!(attrs.remote_ip, HOST);
    assert_eq!(attrs.max_rd_atomic, 16, "host offered 16 responder resources");
    assert_eq!(attrs.max_dest_rd_atomic, 0, "host wants no READs from us");
    assert!(!attrs.access.remote_read, "no responder resources, no remote read");
    // Step 2 before step 1 on another request is refused.
    assert!(matches!(w.t.cm.accept_app_qp(&mut w.t.dev, ConnId(0xdead), Qpn(5), b""), Err(CmError::UnknownConn(_))));
    let tq = w.t.dev.create_rc_qp(w.t.cq, w.t.cq, 32, 32).unwrap();
    for r in w.t.recvs(4) {
        w.t.dev.post_recv(tq, &r).unwrap();
    }
    w.t.dev.connect_rc_qp(tq, &attrs).unwrap();
    w.t.cm.accept_app_qp(&mut w.t.dev, req.id, tq, b"rep").unwrap();
    // A second accept of the same request is a state error.
    assert!(matches!(w.t.cm.accept_app_qp(&mut w.t.dev, req.id, tq, b""), Err(CmError::BadState(_))));
    w.run(3, 1000);
    assert!(matches!(w.h.events.pop(), Some(CmEvent::Established { id, qpn, private_data }) if id == hid && qpn == hq && &private_data[..3] == b"rep"));
    assert!(matches!(w.t.events.pop(), Some(CmEvent::Established { id, qpn, .. }) if id == req.id && qpn == tq));
    let l = log.lock().unwrap();
    let (_, CmMsg::Rep(rep)) = CmMsg::parse(&l[1].1).unwrap() else { panic!() };
    assert_eq!((rep.local_qpn, rep.starting_psn, rep.responder_resources, rep.initiator_depth), (tq.0, attrs.rq_psn, 0, 16));
    drop(l);

    // Data both ways.
    w.h.buf.write(60_000, b"capsule!");
    w.h.dev.post_send(hq, &SendWr { wr_id: 1, op: SendOp::Send, sge: Sge { addr: w.h.buf.paddr() + 60_000, len: 8, lkey: w.h.lkey }, signaled: true, fence: false, ud: None }).unwrap();
    w.t.buf.write(60_000, b"response");
    w.t.dev.post_send(tq, &SendWr { wr_id: 2, op: SendOp::RdmaWrite { remote_addr: w.h.buf.paddr() + 50_000, rkey: w.h.rkey }, sge: Sge { addr: w.t.buf.paddr() + 60_000, len: 8, lkey: w.t.lkey }, signaled: true, fence: false, ud: None }).unwrap();
    w.run(3, 1000);
    let mut b = [0u8; 8];
    w.t.buf.read(0, &mut b);
    assert_eq!(&b, b"capsule!");
    w.h.buf.read(50_000, &mut b);
    assert_eq!(&b, b"response");

    // Target-initiated disconnect (keep-alive expiry): the app has already destroyed its QP.
    w.t.dev.qp_to_error(tq).unwrap();
    w.t.dev.destroy_qp(tq).unwrap();
    w.t.cm.disconnect(&mut w.t.dev, req.id).unwrap();
    w.run(3, 1000);
    assert!(w.t.events.contains(&CmEvent::Disconnected { id: req.id }));
    assert!(w.h.events.contains(&CmEvent::Disconnected { id: hid }));
    // The host's QP is still there (the CM does not destroy an app's QP): one more than before.
    assert_eq!(w.h.dev.resources().qps, before_h.qps + 1);
    w.h.dev.destroy_qp(hq).unwrap();
    w.run(3, 20_000_000);
    assert_eq!((w.t.cm.conn_count(), w.h.cm.conn_count()), (0, 0));
    assert_eq!(w.t.dev.resources(), before_t);
    assert_eq!(w.h.dev.resources(), before_h);
}

/// An app-owned active QP rejected by the peer stays with the app.
#[test]
fn app_owned_qp_survives_a_reject() {
    let mut w = World::new();
    w.t.cm.listen(4420).unwrap();
    let before_h = w.h.dev.resources();
    let hq = w.h.dev.create_rc_qp(w.h.cq, w.h.cq, 8, 8).unwrap();
    let p = ConnectParams { dest_ip: TARGET, dest_port: 4420, src_port: 0, send_cq: Cqn(0), recv_cq: Cqn(0), sq_size: 0, rq_size: 0, recv_wrs: &[], private_data: b"", responder_resources: 16, initiator_depth: 0, access: RW };
    let hid = w.h.cm.connect_app_qp(&mut w.h.dev, hq, &p).unwrap();
    w.run(2, 1000);
    let req = w.take_request();
    let _ = w.t.cm.accept_attrs(req.id, 16, 16, RW).unwrap();
    w.t.cm.reject(&mut w.t.dev, req.id, rej_reason::CONSUMER_DEFINED, &[0, 0, 3, 0]).unwrap();
    w.run(3, 1000);
    assert!(matches!(w.h.events.pop(), Some(CmEvent::Rejected { id, reason: 28, private_data }) if id == hid && private_data[2] == 3));
    assert_eq!(w.h.dev.resources().qps, before_h.qps + 1);
    w.h.dev.destroy_qp(hq).unwrap();
    assert_eq!(w.h.dev.resources(), before_h);
}
