//! Neighbour table policy (rdma::neigh): learning only from replies to our requests and
//! requests for our IP, no redirection of a known neighbour, bounded size under floods, ageing.
use rdma::neigh::*;

const ME: [u8; 4] = [10, 0, 0, 1];
const PEER: [u8; 4] = [10, 0, 0, 2];
const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
const EVIL: [u8; 6] = [2, 0, 0, 0, 0xee, 0xee];
const S: u64 = 1_000_000_000;

fn reply(sha: [u8; 6], spa: [u8; 4], tpa: [u8; 4]) -> ArpPacket {
    ArpPacket { op: ArpOp::Reply, sha, spa, tpa }
}
fn request(sha: [u8; 6], spa: [u8; 4], tpa: [u8; 4]) -> ArpPacket {
    ArpPacket { op: ArpOp::Request, sha, spa, tpa }
}

/// Resolve PEER the proper way: lookup → request → reply.
fn resolved(t: &mut NeighTable, now: u64) {
    let l = t.lookup(PEER, now);
    assert_eq!(l, Lookup { mac: None, send_request: true });
    assert!(!t.on_arp(&reply(PEER_MAC, PEER, ME), ME, now));
    assert_eq!(t.lookup(PEER, now).mac, Some(PEER_MAC));
}

#[test]
fn reply_to_our_request_teaches_unsolicited_reply_does_not() {
    let mut t = NeighTable::new(NeighConfig::default());
    assert!(!t.on_arp(&reply(PEER_MAC, PEER, ME), ME, 0));
    assert_eq!(t.len(), 0);
    assert_eq!(t.stats().refused, 1);
    resolved(&mut t, 0);
    assert_eq!(t.stats().confirmed, 1);
    assert_eq!(t.pending(), 0);
    // A second reply (nothing outstanding any more) with another MAC is refused.
    t.on_arp(&reply(EVIL, PEER, ME), ME, 1);
    assert_eq!(t.lookup(PEER, 1).mac, Some(PEER_MAC));
}

#[test]
fn thousand_spoofed_arp_packets_neither_redirect_nor_exhaust() {
    let cfg = NeighConfig::default();
    let mut t = NeighTable::new(cfg);
    resolved(&mut t, S);
    let mut now = S;
    for i in 0..1000u32 {
        now += 1000;
        let other = [10, 1, (i >> 8) as u8, i as u8];
        let pkt = match i % 5 {
            // Gratuitous ARP claiming the peer's address.
            0 => request(EVIL, PEER, PEER),
            // A reply to nothing, for the peer and addressed to us.
            1 => reply(EVIL, PEER, ME),
            // A request to us claiming to come from the peer.
            2 => request(EVIL, PEER, ME),
            // A request for another address.
            3 => request(EVIL, other, [10, 0, 0, 9]),
            // A flood of requests to us from distinct addresses.
            _ => request([2, 0, 0, 1, (i >> 8) as u8, i as u8], other, ME),
        };
        let answer = t.on_arp(&pkt, ME, now);
        assert_eq!(answer, pkt.op == ArpOp::Request && pkt.tpa == ME);
    }
    assert_eq!(t.lookup(PEER, now).mac, Some(PEER_MAC), "not redirected");
    assert!(t.len() <= cfg.capacity);
    let s = t.stats();
    assert_eq!(s.refused, 600, "{s:?}");
    // The flood filled the table with heard entries, evicting only heard ones.
    assert_eq!(t.len(), cfg.capacity);
    assert!(s.evicted > 0);
    // A new neighbour we ask for still gets in.
    let c = [10, 0, 0, 3];
    assert!(t.lookup(c, now).send_request);
    t.on_arp(&reply([2, 0, 0, 0, 0, 3], c, ME), ME, now);
    assert_eq!(t.lookup(c, now).mac, Some([2, 0, 0, 0, 0, 3]));
    assert_eq!(t.lookup(PEER, now).mac, Some(PEER_MAC));
}

#[test]
fn confirmed_entries_survive_a_flood_that_fills_the_table() {
    let cfg = NeighConfig { capacity: 8, ..NeighConfig::default() };
    let mut t = NeighTable::new(cfg);
    // 8 confirmed neighbours fill the table.
    for k in 0..8u8 {
        let ip = [10, 0, 1, k];
        assert!(t.lookup(ip, 0).send_request);
        t.on_arp(&reply([2, 0, 0, 1, 0, k], ip, ME), ME, 0);
    }
    assert_eq!(t.len(), 8);
    for i in 0..1000u32 {
        t.on_arp(&request([2, 0, 0, 9, (i >> 8) as u8, i as u8], [10, 2, (i >> 8) as u8, i as u8], ME), ME, 10 + i as u64);
    }
    assert_eq!(t.len(), 8);
    for k in 0..8u8 {
        assert_eq!(t.lookup([10, 0, 1, k], 2000).mac, Some([2, 0, 0, 1, 0, k]));
    }
    assert_eq!(t.stats().refused, 1000);
}

#[test]
fn request_for_our_ip_is_answered_and_teaches_a_new_sender_once() {
    let mut t = NeighTable::new(NeighConfig::default());
    assert!(t.on_arp(&request(PEER_MAC, PEER, ME), ME, 5));
    assert_eq!(t.lookup(PEER, 5), Lookup { mac: Some(PEER_MAC), send_request: false });
    // Another MAC claiming the same sender: answered, but the entry is not changed.
    assert!(t.on_arp(&request(EVIL, PEER, ME), ME, 6));
    assert_eq!(t.lookup(PEER, 6).mac, Some(PEER_MAC));
    // Bad senders: zero / broadcast / multicast addresses, our own address.
    for (sha, spa) in [(PEER_MAC, [0, 0, 0, 0]), (PEER_MAC, [255; 4]), (PEER_MAC, [224, 0, 0, 1]), ([0xff; 6], [10, 0, 0, 7]), ([1, 0, 0x5e, 0, 0, 1], [10, 0, 0, 7]), (EVIL, ME)] {
        assert!(!t.on_arp(&request(sha, spa, ME), ME, 7));
    }
    assert_eq!(t.len(), 1);
    assert_eq!(t.stats().refused, 7);
}

#[test]
fn entries_age_and_are_reconfirmed_by_our_own_request() {
    let cfg = NeighConfig::default();
    let mut t = NeighTable::new(cfg);
    resolved(&mut t, 0);
    // Stale: still used, a request goes out; the reply to it may change the MAC.
    let l = t.lookup(PEER, cfg.stale_ns);
    assert_eq!(l, Lookup { mac: Some(PEER_MAC), send_request: true });
    let new_mac = [2, 0, 0, 0, 0, 0x22];
    t.on_arp(&reply(new_mac, PEER, ME), ME, cfg.stale_ns + 1);
    assert_eq!(t.lookup(PEER, cfg.stale_ns + 2), Lookup { mac: Some(new_mac), send_request: false });
    // Not re-confirmed: forgotten after expire_ns.
    let later = cfg.stale_ns + 1 + cfg.expire_ns;
    t.age(later);
    assert_eq!(t.len(), 0);
    assert_eq!(t.stats().expired, 1);
    assert_eq!(t.lookup(PEER, later), Lookup { mac: None, send_request: true });
    // Retries only after retry_ns.
    assert!(!t.lookup(PEER, later + 1).send_request);
    assert!(t.lookup(PEER, later + cfg.retry_ns).send_request);
}

#[test]
fn static_entries_never_age_nor_change_and_pending_is_bounded() {
    let cfg = NeighConfig { max_pending: 4, ..NeighConfig::default() };
    let mut t = NeighTable::new(cfg);
    t.add_static(PEER, PEER_MAC).unwrap();
    t.on_arp(&request(EVIL, PEER, ME), ME, 1);
    t.age(u64::MAX / 2);
    assert_eq!(t.lookup(PEER, u64::MAX / 2), Lookup { mac: Some(PEER_MAC), send_request: false });
    for i in 0..100u8 {
        t.lookup([10, 9, 0, i], i as u64);
    }
    assert_eq!(t.pending(), 4);
    assert_eq!(t.stats().pending_dropped, 96);
}
