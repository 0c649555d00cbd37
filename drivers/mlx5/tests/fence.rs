//! The verbs fence through the driver and the emulated ConnectX: the driver puts the fence mode
//! in the WQE's ctrl segment, the adapter holds a fenced WQE until every earlier RDMA READ of the
//! send queue is complete (one-way link delay 50 µs, so an unfenced SEND reaches the peer before
//! the READ's data is back).

use emu_roce::Impairments;
use hal::DmaRegion;
use rdma::{Access, Completion, Control, DataPath, Qpn, RecvWr, Rkey, SendOp, SendWr, Sge, WcOpcode, WcStatus};
use testbed::{Clocked, Options, SimClock};

type Side = testbed::Node;

const FULL: Access = Access { local_write: true, remote_read: true, remote_write: true };

struct Pair {
    clock: SimClock,
    a: Side,
    b: Side,
    cqs: (rdma::Cqn, rdma::Cqn),
    qps: (Qpn, Qpn),
    bufa: testbed::SimDma,
    bufb: testbed::SimDma,
    lka: rdma::Lkey,
    lkb: rdma::Lkey,
    rkb: Rkey,
}

fn pair() -> Pair {
    let clock = SimClock::new();
    let (la, lb) = Clocked::pair(&clock, Impairments { delay_ns: 50_000, ..Default::default() }, 7);
    let opts = Options { port_answers_arp: true, ..Options::default() };
    let mut a = Side::with_options(clock.clone(), [10, 0, 0, 1], [2, 0, 0, 0, 0, 1], 0x1_0000_0000, Box::new(la), opts.clone()).expect("bring-up");
    let mut b = Side::with_options(clock.clone(), [10, 0, 0, 2], [2, 0, 0, 0, 0, 2], 0x2_0000_0000, Box::new(lb), opts).expect("bring-up");
    let (cqa, cqb) = (a.v.create_cq(64).unwrap(), b.v.create_cq(64).unwrap());
    let qa = a.v.create_rc_qp(cqa, cqa, 32, 32).unwrap();
    let qb = b.v.create_rc_qp(cqb, cqb, 32, 32).unwrap();
    let bufa = a.v.alloc_buf(64 * 1024).unwrap();
    let bufb = b.v.alloc_buf(64 * 1024).unwrap();
    let (lka, _) = a.v.reg_mr(bufa.paddr(), 64 * 1024, FULL).unwrap();
    let (lkb, rkb) = b.v.reg_mr(bufb.paddr(), 64 * 1024, FULL).unwrap();
    let (ab, ba) = (b.rc_attrs_towards(qb), a.rc_attrs_towards(qa));
    a.v.connect_rc_qp(qa, &ab).unwrap();
    b.v.connect_rc_qp(qb, &ba).unwrap();
    Pair { clock, a, b, cqs: (cqa, cqb), qps: (qa, qb), bufa, bufb, lka, lkb, rkb }
}

impl Pair {
    /// A's READ of B's first 20,000 bytes (key `rkey`) and a 16-byte SEND, posted together with
    /// one doorbell, the SEND fenced or not.
    fn post_read_and_send(&mut self, rkey: Rkey, fence: bool) {
        self.b.v.post_recv(self.qps.1, &RecvWr { wr_id: 50, sge: Sge { addr: self.bufb.paddr() + 32768, len: 64, lkey: self.lkb } }).unwrap();
        let read = SendWr {
            wr_id: 1,
            op: SendOp::RdmaRead { remote_addr: self.bufb.paddr(), rkey },
            sge: Sge { addr: self.bufa.paddr(), len: 20000, lkey: self.lka },
            signaled: true,
            fence: false,
            ud: None,
        };
        let send = SendWr { wr_id: 2, op: SendOp::Send, sge: Sge { addr: self.bufa.paddr() + 32768, len: 16, lkey: self.lka }, fence, ..read };
        self.a.v.post_send_batch(self.qps.0, &[read, send]).unwrap();
    }

    /// Run until A has `want_a` completions and B has `want_b`; `at_b` sees A's buffer when B's
    /// first completion is polled.
    fn run(&mut self, want_a: usize, want_b: usize, mut at_b: impl FnMut(&Self)) -> (Vec<Completion>, Vec<Completion>) {
        let (mut ga, mut gb) = (Vec::new(), Vec::new());
        let mut out = [Completion::default(); 8];
        for _ in 0..100_000 {
            self.a.cx.poll();
            self.b.cx.poll();
            let n = self.a.v.poll_cq(self.cqs.0, &mut out);
            ga.extend_from_slice(&out[..n]);
            let n = self.b.v.poll_cq(self.cqs.1, &mut out);
            if gb.is_empty() && n > 0 {
                at_b(self);
            }
            gb.extend_from_slice(&out[..n]);
            if ga.len() >= want_a && gb.len() >= want_b {
                return (ga, gb);
            }
            self.clock.advance(1_000);
        }
        panic!("timed out: {ga:?} {gb:?}");
    }
}

#[test]
fn fenced_send_leaves_after_the_read_is_placed_an_unfenced_one_before() {
    for fence in [false, true] {
        let mut p = pair();
        let data: Vec<u8> = (0..20000u32).map(|i| (i * 13 ^ (i >> 7)) as u8).collect();
        p.bufb.write(0, &data);
        let doorbells = p.a.cx.counters().sq_doorbells;
        p.post_read_and_send(p.rkb, fence);
        assert_eq!(p.a.cx.counters().sq_doorbells - doorbells, 1, "READ and SEND on one doorbell");
        let mut landed = None;
        let (ca, cb) = p.run(2, 1, |p| {
            let mut got = vec![0u8; 20000];
            p.bufa.read(0, &mut got);
            landed = Some(got == data);
        });
        assert_eq!(landed, Some(fence), "fence {fence}: READ data in place when the SEND arrived");
        assert_eq!((ca[0].wr_id, ca[0].status, ca[0].opcode), (1, WcStatus::Success, WcOpcode::RdmaRead), "{ca:?}");
        assert_eq!((ca[1].wr_id, ca[1].status, ca[1].opcode), (2, WcStatus::Success, WcOpcode::Send), "{ca:?}");
        assert_eq!((cb[0].wr_id, cb[0].status, cb[0].byte_len), (50, WcStatus::Success, 16), "{cb:?}");
    }
}

#[test]
fn failed_read_leaves_the_fenced_send_flushed_never_sent() {
    let mut p = pair();
    let bad = Rkey(p.rkb.0 ^ 0x100);
    p.post_read_and_send(bad, true);
    let (ca, cb) = p.run(2, 1, |_| {});
    assert_eq!((ca[0].wr_id, ca[0].status), (1, WcStatus::RemoteAccess), "{ca:?}");
    assert_eq!((ca[1].wr_id, ca[1].status), (2, WcStatus::WrFlushed), "{ca:?}");
    // B's QP went to ERROR with its NAK (class C): its receive flushed, never filled.
    assert_eq!((cb[0].wr_id, cb[0].status), (50, WcStatus::WrFlushed), "{cb:?}");
    let mut got = [0xAAu8; 16];
    p.bufb.read(32768, &mut got);
    assert_eq!(got, [0u8; 16], "no SEND payload landed");
}
