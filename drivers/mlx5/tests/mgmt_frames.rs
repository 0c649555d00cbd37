//! The management stack's frames over the raw Ethernet path between two adapters: every size
//! up to `MAX_FRAME` (inline up to `MAX_INLINE_FRAME`, header inline + gathered tail beyond,
//! through every send slot) arrives byte-identical in the receiver's bounded queue, the queue
//! drops (and counts) what does not fit, ARP still feeds the neighbour table, and with
//! `answers_arp` the driver leaves answering to the stack.

use emu_connectx::{ConnectX, PhysMem, SimClock, SimHal};
use emu_roce::Impairments;
use mlx5::{Config, Mlx5Verbs, MAX_FRAME, MAX_INLINE_FRAME};
use rdma::{Control, Neighbours};
use testbed::Clocked;

type V = Mlx5Verbs<SimHal, emu_connectx::Bar0>;

fn side(clock: &SimClock, ip: [u8; 4], mac: [u8; 6], base: u64) -> (ConnectX, V) {
    let mem = PhysMem::with_base(base);
    let hal = SimHal::new(mem.clone(), clock.clone());
    let cx = ConnectX::new(mem, clock.clone(), emu_connectx::Config { mac, port_answers_arp: false, ..Default::default() });
    let v = Mlx5Verbs::bring_up(hal, cx.bar0(), Config { ipv4: ip, ..Config::default() }).expect("bring-up");
    (cx, v)
}

fn ipv4_frame(dst: [u8; 6], src: [u8; 6], len: usize, fill: u8) -> Vec<u8> {
    let mut f = vec![fill; len];
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    // IPv4, protocol 6 (TCP): not RoCE, so the adapter steers it to the raw queue.
    if len >= 34 {
        f[14] = 0x45;
        f[23] = 6;
    }
    // A payload that differs byte by byte, so a misplaced or stale chunk shows.
    for (i, b) in f.iter_mut().enumerate().skip(34) {
        *b = fill.wrapping_add((i * 7) as u8);
    }
    f
}

#[test]
fn frames_of_every_size_cross_and_the_queue_is_bounded() {
    let clock = SimClock::new();
    let (amac, bmac) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
    let (acx, mut a) = side(&clock, [10, 0, 0, 1], amac, 0x1_0000_0000);
    let (bcx, mut b) = side(&clock, [10, 0, 0, 2], bmac, 0x2_0000_0000);
    let (la, lb) = Clocked::pair(&clock, Impairments::default(), 3);
    acx.attach_link(Box::new(la));
    bcx.attach_link(Box::new(lb));
    b.enable_mgmt_frames(4, true);
    let turn = |a: &mut V, b: &mut V| {
        for _ in 0..20 {
            acx.poll();
            bcx.poll();
            a.poll();
            b.poll();
            clock.advance(10_000);
        }
    };
    let mut buf = [0u8; 2048];
    for len in [60, 100, 200, 241, 242, 255, MAX_INLINE_FRAME, MAX_INLINE_FRAME + 1, 600, 1000, 1500, MAX_FRAME] {
        let f = ipv4_frame(bmac, amac, len, len as u8);
        assert!(a.mgmt_send(&f), "send {len}");
        turn(&mut a, &mut b);
        let n = b.mgmt_recv(&mut buf).unwrap_or_else(|| panic!("frame of {len} bytes arrived"));
        assert_eq!(&buf[..n], &f[..], "frame of {len} bytes byte-identical");
        assert_eq!(b.mgmt_recv(&mut buf), None);
    }
    assert!(!a.mgmt_send(&[0u8; MAX_FRAME + 1]), "longer than an Ethernet frame: refused, no panic");
    // Gathered frames through every send slot more than once (64 WQEBBs), three per turn,
    // sizes varying: each one byte-identical (no slot's buffer reused while its WQE is queued).
    for round in 0..50usize {
        let sent: Vec<Vec<u8>> = (0..3)
            .map(|k| {
                let len = MAX_INLINE_FRAME + 1 + (round * 97 + k * 331) % (MAX_FRAME - MAX_INLINE_FRAME);
                let f = ipv4_frame(bmac, amac, len, (round * 3 + k) as u8);
                assert!(a.mgmt_send(&f), "round {round} frame {k} ({len} bytes)");
                f
            })
            .collect();
        turn(&mut a, &mut b);
        for (k, f) in sent.iter().enumerate() {
            let n = b.mgmt_recv(&mut buf).unwrap_or_else(|| panic!("round {round} frame {k} arrived"));
            assert_eq!(&buf[..n], &f[..], "round {round} frame {k} byte-identical");
        }
    }
    // Six frames into a queue of four: four kept, two dropped and counted.
    for i in 0..6 {
        assert!(a.mgmt_send(&ipv4_frame(bmac, amac, 80, i)));
    }
    turn(&mut a, &mut b);
    let (_q, dropped, _long) = b.mgmt_tap_stats().unwrap();
    assert_eq!(dropped, 2);
    let kept: Vec<u8> = std::iter::from_fn(|| b.mgmt_recv(&mut buf).map(|_| buf[20])).collect();
    assert_eq!(kept, [0, 1, 2, 3]);
    // ARP still resolves for RoCE: A asks, B's table hears it, B's driver does not answer
    // (the management stack does, and none runs here), so A learns nothing.
    assert_eq!(a.resolve_mac([10, 0, 0, 2]), None);
    turn(&mut a, &mut b);
    assert_eq!(b.neigh_stats().heard, 1, "{:?}", b.neigh_stats());
    assert_eq!(b.arp_replies_sent, 0);
    assert_eq!(a.resolve_mac([10, 0, 0, 2]), None);
    assert!(b.mgmt_recv(&mut buf).is_some(), "the request was queued for the stack too");
}
