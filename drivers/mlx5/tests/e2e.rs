//! Two driver instances on two emulated adapters joined by an in-process link: RC SEND,
//! RDMA WRITE and READ through the driver's verbs, data checked byte for byte.

use emu_connectx::{ConnectX, PhysMem, SimClock, SimHal};
use emu_roce::{Impairments, MemLink};
use hal::DmaRegion;
use mlx5::{Config, Mlx5, Mlx5Verbs, Timeouts};
use rdma::{Access, Completion, Qpn, RcConnectAttrs, RecvWr, SendOp, SendWr, Sge, Verbs, WcOpcode, WcStatus};

type V = Mlx5Verbs<SimHal, emu_connectx::Bar0>;

struct Side {
    cx: ConnectX,
    v: V,
}

fn side(clock: &SimClock, ip: [u8; 4], mac: [u8; 6], base: u64) -> Side {
    let mem = PhysMem::with_base(base);
    let hal = SimHal::new(mem.clone(), clock.clone());
    let cx = ConnectX::new(mem, clock.clone(), emu_connectx::Config { mac, ..Default::default() });
    let cfg = Config {
        ipv4: ip,
        timeouts: Timeouts { init_ns: 1_000_000_000, cmd_ns: 1_000_000_000, health_stall_ns: 500_000_000 },
        ..Config::default()
    };
    let dev = Mlx5::bring_up(hal, cx.bar0(), cfg).expect("bring-up");
    Side { cx, v: Mlx5Verbs::new(dev).expect("GSI") }
}

fn attrs(remote: &Side, rqpn: Qpn) -> RcConnectAttrs {
    RcConnectAttrs {
        remote_qpn: rqpn,
        remote_ip: remote.v.local_ip(),
        remote_mac: remote.v.local_mac(),
        rq_psn: 100,
        sq_psn: 100,
        mtu: 1024,
        udp_sport: 0,
        retry_cnt: 7,
        rnr_retry: 7,
        timeout: 14,
        min_rnr_timer: 1,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        access: Access { local_write: true, remote_read: true, remote_write: true },
    }
}

fn run_until(a: &mut Side, b: &mut Side, clock: &SimClock, cq: (rdma::Cqn, rdma::Cqn), want: (usize, usize)) -> (Vec<Completion>, Vec<Completion>) {
    let (mut ga, mut gb) = (Vec::new(), Vec::new());
    let mut out = [Completion::default(); 8];
    for _ in 0..200_000 {
        a.cx.poll();
        b.cx.poll();
        let n = a.v.poll_cq(cq.0, &mut out);
        ga.extend_from_slice(&out[..n]);
        let n = b.v.poll_cq(cq.1, &mut out);
        gb.extend_from_slice(&out[..n]);
        if ga.len() >= want.0 && gb.len() >= want.1 {
            return (ga, gb);
        }
        clock.advance(1_000);
    }
    panic!("timed out: got {} / {} completions: {ga:?} {gb:?}", ga.len(), gb.len());
}

#[test]
fn rc_send_write_read_between_two_adapters() {
    let clock = SimClock::new();
    let mut a = side(&clock, [10, 0, 0, 1], [2, 0, 0, 0, 0, 1], 0x1_0000_0000);
    let mut b = side(&clock, [10, 0, 0, 2], [2, 0, 0, 0, 0, 2], 0x2_0000_0000);
    let (la, lb) = MemLink::pair(Impairments::default(), 7);
    a.cx.attach_link(Box::new(la));
    b.cx.attach_link(Box::new(lb));

    let (cqa, cqb) = (a.v.create_cq(64).unwrap(), b.v.create_cq(64).unwrap());
    let qa = a.v.create_rc_qp(cqa, cqa, 32, 32).unwrap();
    let qb = b.v.create_rc_qp(cqb, cqb, 32, 32).unwrap();
    let full = Access { local_write: true, remote_read: true, remote_write: true };
    let bufa = a.v.alloc_buf(64 * 1024).unwrap();
    let bufb = b.v.alloc_buf(64 * 1024).unwrap();
    let (lka, _rka) = a.v.reg_mr(bufa.paddr(), 64 * 1024, full).unwrap();
    let (lkb, rkb) = b.v.reg_mr(bufb.paddr(), 64 * 1024, full).unwrap();
    // Receives may be posted while the QP is still in RESET.
    b.v.post_recv(qb, &RecvWr { wr_id: 1, sge: Sge { addr: bufb.paddr(), len: 4096, lkey: lkb } }).unwrap();
    let ab = attrs(&b, qb);
    let ba = attrs(&a, qa);
    a.v.connect_rc_qp(qa, &ab).unwrap();
    b.v.connect_rc_qp(qb, &ba).unwrap();

    // SEND 3000 bytes A -> B.
    let msg: Vec<u8> = (0..3000u32).map(|i| (i * 7 + 3) as u8).collect();
    bufa.write(0, &msg);
    a.v.post_send(qa, &SendWr { wr_id: 10, op: SendOp::Send, sge: Sge { addr: bufa.paddr(), len: 3000, lkey: lka }, signaled: true, ud: None }).unwrap();
    let (ca, cb) = run_until(&mut a, &mut b, &clock, (cqa, cqb), (1, 1));
    assert_eq!((ca[0].wr_id, ca[0].status, ca[0].opcode), (10, WcStatus::Success, WcOpcode::Send), "{ca:?}");
    assert_eq!((cb[0].wr_id, cb[0].status, cb[0].byte_len), (1, WcStatus::Success, 3000), "{cb:?}");
    let mut got = vec![0u8; 3000];
    bufb.read(0, &mut got);
    assert_eq!(got, msg);

    // RDMA WRITE 20000 bytes A -> B at offset 8192, then READ them back into A at 32768.
    let data: Vec<u8> = (0..20000u32).map(|i| (i ^ (i >> 8)) as u8).collect();
    bufa.write(4096, &data);
    let w = SendWr {
        wr_id: 11,
        op: SendOp::RdmaWrite { remote_addr: bufb.paddr() + 8192, rkey: rkb },
        sge: Sge { addr: bufa.paddr() + 4096, len: 20000, lkey: lka },
        signaled: true,
        ud: None,
    };
    a.v.post_send(qa, &w).unwrap();
    let (ca, _) = run_until(&mut a, &mut b, &clock, (cqa, cqb), (1, 0));
    assert_eq!((ca[0].wr_id, ca[0].status, ca[0].opcode), (11, WcStatus::Success, WcOpcode::RdmaWrite));
    let mut got = vec![0u8; 20000];
    bufb.read(8192, &mut got);
    assert_eq!(got, data);
    let r = SendWr {
        wr_id: 12,
        op: SendOp::RdmaRead { remote_addr: bufb.paddr() + 8192, rkey: rkb },
        sge: Sge { addr: bufa.paddr() + 32768, len: 20000, lkey: lka },
        signaled: true,
        ud: None,
    };
    a.v.post_send(qa, &r).unwrap();
    let (ca, _) = run_until(&mut a, &mut b, &clock, (cqa, cqb), (1, 0));
    assert_eq!((ca[0].wr_id, ca[0].status, ca[0].opcode), (12, WcStatus::Success, WcOpcode::RdmaRead));
    let mut back = vec![0u8; 20000];
    bufa.read(32768, &mut back);
    assert_eq!(back, data);

    // A wrong rkey ends in an error completion on the requester; the responder keeps serving.
    let bad = SendWr { wr_id: 13, op: SendOp::RdmaWrite { remote_addr: bufb.paddr(), rkey: rdma::Rkey(rkb.0 ^ 0x100) }, ..w };
    a.v.post_send(qa, &bad).unwrap();
    let (ca, _) = run_until(&mut a, &mut b, &clock, (cqa, cqb), (1, 0));
    assert_eq!(ca[0].wr_id, 13);
    assert_eq!(ca[0].status, WcStatus::RemoteAccess, "{ca:?}");

    drop((bufa, bufb));
    let (ca_, cb_) = (a.cx.clone(), b.cx.clone());
    a.v.shutdown().unwrap();
    b.v.shutdown().unwrap();
    for cx in [ca_, cb_] {
        let c = cx.counters();
        assert_eq!((c.live_objects(), c.pages_held), (0, 0), "{c:?}");
    }
}
