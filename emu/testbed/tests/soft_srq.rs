//! Shared receive queues through the `rdma::SrqVerbs` seam on the soft device: connections
//! outnumbering the SRQ's receives complete in order as the owner reposts (requests wait while
//! it is empty), one receive CQ serves every QP, the limit is reported once per arming; a poll
//! group's data path is a value of its own that posts and polls on another thread.
use hal::DmaRegion;
use rdma::*;
use testbed::soft::{SoftDevice, SoftFabric};

const RW: Access = Access { local_write: true, remote_read: false, remote_write: false };
const SLOT: u64 = 256;

fn attrs(peer: &SoftDevice, qpn: Qpn) -> RcConnectAttrs {
    RcConnectAttrs { remote_qpn: qpn, remote_ip: peer.local_ip(), remote_mac: peer.local_mac(), mtu: 1024, access: RW, retry_cnt: 7, rnr_retry: 7, ..Default::default() }
}

struct Rig {
    _f: SoftFabric,
    a: SoftDevice,
    b: SoftDevice,
    srq: Srqn,
    rcq: Cqn,
    scq: Cqn,
    senders: Vec<Qpn>,
    receivers: Vec<Qpn>,
    abuf: testbed::soft::SoftBuf,
    alkey: Lkey,
    bbuf: testbed::soft::SoftBuf,
    blkey: Lkey,
}

fn rig(n: usize, max_wr: u32) -> Rig {
    let f = SoftFabric::new();
    let mut a = f.add_device([10, 0, 0, 1]);
    let mut b = f.add_device([10, 0, 0, 2]);
    let srq = b.create_srq(max_wr).unwrap();
    let rcq = b.create_cq(64).unwrap();
    let scq = a.create_cq(64).unwrap();
    let (mut senders, mut receivers) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let s = a.create_rc_qp(scq, scq, 16, 1).unwrap();
        let r = b.create_rc_qp_srq(rcq, rcq, 4, srq).unwrap();
        a.connect_rc_qp(s, &attrs(&b, r)).unwrap();
        b.connect_rc_qp(r, &attrs(&a, s)).unwrap();
        senders.push(s);
        receivers.push(r);
    }
    let abuf = a.alloc_buf(1 << 16).unwrap();
    let (alkey, _) = a.reg_mr(abuf.paddr(), 1 << 16, RW).unwrap();
    let bbuf = b.alloc_buf(1 << 16).unwrap();
    let (blkey, _) = b.reg_mr(bbuf.paddr(), 1 << 16, RW).unwrap();
    Rig { _f: f, a, b, srq, rcq, scq, senders, receivers, abuf, alkey, bbuf, blkey }
}

impl Rig {
    fn post(&mut self, slot: u64) {
        let wr = RecvWr { wr_id: slot, sge: Sge { addr: self.bbuf.paddr() + slot * SLOT, len: SLOT as u32, lkey: self.blkey } };
        self.b.post_srq_recv(self.srq, &wr).unwrap();
    }
    fn send(&mut self, k: usize, id: u64, fill: u8, len: u32) {
        let at = (k as u64 * 16 + id % 16) * SLOT;
        self.abuf.write(at as usize, &vec![fill; len as usize]);
        let wr = SendWr { wr_id: id, op: SendOp::Send, sge: Sge { addr: self.abuf.paddr() + at, len, lkey: self.alkey }, signaled: true, fence: false, ud: None };
        self.a.post_send(self.senders[k], &wr).unwrap();
    }
    fn pump(&mut self) {
        self.a.poll();
        self.b.poll();
    }
}

#[test]
fn connections_outnumbering_the_srq_receives_complete_as_the_owner_reposts() {
    let (n, per) = (6usize, 4u64);
    let mut r = rig(n, 3);
    for s in 0..3 {
        r.post(s);
    }
    assert!(r.b.post_recv(r.receivers[0], &RecvWr { wr_id: 0, sge: Sge { addr: r.bbuf.paddr(), len: 8, lkey: r.blkey } }).is_err(), "a QP on an SRQ has no RQ");
    for k in 0..n {
        for m in 0..per {
            r.send(k, m, (k * 16) as u8 + m as u8, 40 + k as u32);
        }
    }
    let mut got = vec![0u64; n];
    let mut sent = 0;
    let mut wc = [Completion::default(); 16];
    for _ in 0..10_000 {
        r.pump();
        let k = r.b.poll_cq(r.rcq, &mut wc);
        for c in wc[..k].to_vec() {
            assert_eq!(c.status, WcStatus::Success, "{c:?}");
            let q = r.receivers.iter().position(|&x| x == c.qpn).expect("a receiver QP");
            let mut data = vec![0u8; c.byte_len as usize];
            r.bbuf.read((c.wr_id * SLOT) as usize, &mut data);
            assert_eq!(data.len(), 40 + q);
            assert!(data.iter().all(|&x| x == (q * 16) as u8 + got[q] as u8), "connection {q} in order");
            got[q] += 1;
            r.post(c.wr_id);
        }
        let scq = r.scq;
        sent += r.a.poll_cq(scq, &mut wc);
        if sent as u64 == n as u64 * per && got.iter().all(|&g| g == per) {
            break;
        }
    }
    assert_eq!(got, vec![per; n]);
    assert_eq!(sent as u64, n as u64 * per);
    assert!(r.b.destroy_srq(r.srq).is_err(), "busy while QPs use it");
    for q in r.receivers.clone() {
        r.b.destroy_qp(q).unwrap();
    }
    r.b.destroy_srq(r.srq).unwrap();
}

#[test]
fn srq_limit_is_reported_once_per_arming() {
    let mut r = rig(2, 7);
    for s in 0..7 {
        r.post(s);
    }
    r.b.arm_srq(r.srq, 3).unwrap();
    let mut sent = 0u64;
    let mut deliver = |r: &mut Rig, count: u64| {
        for _ in 0..count {
            r.send((sent % 2) as usize, sent, 1, 16);
            sent += 1;
        }
        let mut wc = [Completion::default(); 16];
        let mut seen = 0;
        for _ in 0..100 {
            r.pump();
            seen += r.b.poll_cq(r.rcq, &mut wc);
        }
        assert_eq!(seen as u64, count);
        r.b.srq_limit_reached(r.srq)
    };
    assert!(!deliver(&mut r, 4), "3 left");
    assert!(deliver(&mut r, 1), "2 left: reported");
    assert!(!deliver(&mut r, 1), "reported once");
    r.b.arm_srq(r.srq, 1).unwrap();
    assert!(deliver(&mut r, 1), "re-armed");
}

#[test]
fn a_poll_group_posts_and_polls_on_its_own_thread_while_the_device_stays() {
    let f = SoftFabric::new();
    let mut a = f.add_device([10, 0, 0, 1]);
    let mut b = f.add_device([10, 0, 0, 2]);
    let mut g = b.create_group(64, 8).unwrap();
    let (gcq, gsrq) = (b.group_cq(&g), b.group_srq(&g));
    let mut q = b.make_group_qp(&b.group_ref(&g), 16).unwrap();
    let scq = a.create_cq(64).unwrap();
    let s = a.create_rc_qp(scq, scq, 16, 1).unwrap();
    a.connect_rc_qp(s, &attrs(&b, SoftDevice::made_qpn(&q))).unwrap();
    b.connect_made_qp(&mut q, &attrs(&a, s)).unwrap();
    let r = SoftDevice::attach_group_qp(&mut g, q).map_err(|(e, _)| e).unwrap();
    let bbuf = b.alloc_buf(8 * SLOT as usize).unwrap();
    let (blkey, _) = b.reg_mr(bbuf.paddr(), 8 * SLOT, RW).unwrap();
    let abuf = a.alloc_buf(4 * SLOT as usize).unwrap();
    let (alkey, _) = a.reg_mr(abuf.paddr(), 4 * SLOT, RW).unwrap();
    let recv_addr = bbuf.paddr();
    // The group (its data path) goes to a thread of its own; the devices stay here.
    let poller = std::thread::spawn(move || {
        let wrs: Vec<RecvWr> = (0..4).map(|i| RecvWr { wr_id: i, sge: Sge { addr: recv_addr + i * SLOT, len: SLOT as u32, lkey: blkey } }).collect();
        g.post_srq_recv_batch(gsrq, &wrs).unwrap();
        let (mut got, mut wc) = (Vec::new(), [Completion::default(); 8]);
        for _ in 0..100_000 {
            let n = g.poll_cq(gcq, &mut wc);
            got.extend(wc[..n].iter().map(|c| (c.wr_id, c.qpn, c.byte_len, c.status)));
            if got.len() == 4 {
                break;
            }
            std::thread::yield_now();
        }
        (g, got)
    });
    for i in 0..4u64 {
        abuf.write((i * SLOT) as usize, &[i as u8 + 1; 32]);
        let wr = SendWr { wr_id: i, op: SendOp::Send, sge: Sge { addr: abuf.paddr() + i * SLOT, len: 32, lkey: alkey }, signaled: true, fence: false, ud: None };
        a.post_send(s, &wr).unwrap();
    }
    let (mut acked, mut wc) = (0, [Completion::default(); 8]);
    for _ in 0..100_000 {
        acked += a.poll_cq(scq, &mut wc);
        if acked == 4 {
            break;
        }
        std::thread::yield_now();
    }
    let (g, got) = poller.join().unwrap();
    assert_eq!(acked, 4, "every SEND acknowledged");
    assert_eq!(got, (0..4).map(|i| (i, r, 32, WcStatus::Success)).collect::<Vec<_>>(), "received in order by the group's thread");
    for i in 0..4u64 {
        let mut m = [0u8; 32];
        bbuf.read((i * SLOT) as usize, &mut m);
        assert_eq!(m, [i as u8 + 1; 32]);
    }
    b.destroy_handed_qp(&b.group_ref(&g), r).unwrap();
    let mut g = g;
    SoftDevice::detach_group_qp(&mut g, r).unwrap();
    b.destroy_group(g).unwrap();
    a.destroy_qp(s).unwrap();
    a.destroy_cq(scq).unwrap();
    assert_eq!((b.resources().qps, b.resources().cqs), (0, 0), "the group's QP and CQ released");
}
