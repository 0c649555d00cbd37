//! Data path through two emulated adapters on an in-process link: WQEs written by hand into
//! SQ/RQ buffers, doorbells rung through the UAR, CQEs read by owner bit.
use crate::common;
use common::*;
use emu_connectx::datapath::{cqe_op, cqe_synd, wqe_op};
use emu_connectx::*;
use emu_roce::{Impairments, MemLink};
use hal::{DmaRegion, Hal, Mmio};

struct Side {
    r: Rig,
    u: Up,
    mkey: u32,
    buf: SimDma,
    sq_pi: u16,
    rq_head: u16,
    cq_ci: u32,
}

const RQ_BYTES: usize = 16 * 64;

fn side(mac_last: u8, ip: [u8; 4], peer_ip: [u8; 4], peer_mac_last: u8) -> Side {
    let cfg = Config { mac: [0x02, 0x00, 0x5e, 0x10, 0x00, mac_last], ..Config::default() };
    let mut r = Rig::with(cfg);
    let u = bring_up_with(&mut r, ip, Peer { qpn: 0x100, ip: peer_ip, mac: [0x02, 0x00, 0x5e, 0x10, 0x00, peer_mac_last] });
    let mkey = (u.mkey_pa << 8) | 0x42;
    let buf = r.hal.dma_alloc(1 << 20, 4096).unwrap();
    Side { r, u, mkey, buf, sq_pi: 0, rq_head: 0, cq_ci: 0 }
}

impl Side {
    fn qp_buf(&self) -> &SimDma {
        &self.u._qp_bufs[0]
    }
    fn qp_dbr(&self) -> &SimDma {
        &self.u._qp_bufs[1]
    }
    fn post_recv(&mut self, addr: u64, len: u32) {
        let off = (self.rq_head as usize & 15) * 64;
        let b = self.qp_buf();
        b.write_be32(off, len);
        b.write_be32(off + 4, self.mkey);
        b.write_be64(off + 8, addr);
        b.write_be32(off + 16, 0);
        b.write_be32(off + 20, 0x100);
        self.rq_head = self.rq_head.wrapping_add(1);
        self.qp_dbr().write_be32(0, self.rq_head as u32);
    }
    /// One-WQEBB WQE: ctrl + optional raddr + one data segment.
    fn post_send(&mut self, opcode: u8, raddr: Option<(u64, u32)>, addr: u64, len: u32) {
        let idx = self.sq_pi;
        let off = RQ_BYTES + (idx as usize & 63) * 64;
        let ds = 2 + raddr.is_some() as u32;
        let b = self.qp_buf();
        b.fill(off, 64, 0);
        b.write_be32(off, ((idx as u32) << 8) | opcode as u32);
        b.write_be32(off + 4, (self.u.qp_rc << 8) | ds);
        b.write_u8(off + 0x0b, 0x08); // CQE always
        let mut o = off + 16;
        if let Some((ra, rkey)) = raddr {
            b.write_be64(o, ra);
            b.write_be32(o + 8, rkey);
            o += 16;
        }
        b.write_be32(o, len);
        b.write_be32(o + 4, self.mkey);
        b.write_be64(o + 8, addr);
        let mut first = [0u8; 8];
        b.read(off, &mut first);
        self.sq_pi = self.sq_pi.wrapping_add(1);
        self.qp_dbr().write_be32(4, self.sq_pi as u32);
        self.r.bar.write64_be(self.u.uar as usize * 4096 + 0x800, u64::from_be_bytes(first));
    }
    /// Next valid CQE (by owner bit), if any; advances the consumer index and set_ci.
    fn poll_cq(&mut self) -> Option<[u8; 64]> {
        let n = 64u32;
        let off = (self.cq_ci & (n - 1)) as usize * 64;
        let mut c = [0u8; 64];
        self.u.cq_buf.read(off, &mut c);
        let op_own = c[0x3f];
        if op_own >> 4 == 0xf || (op_own & 1) as u32 != (self.cq_ci >> 6) & 1 {
            return None;
        }
        self.cq_ci += 1;
        self.u.cq_dbr.write_be32(0, self.cq_ci & 0xff_ffff);
        Some(c)
    }
}

fn pair() -> (Side, Side) {
    pair_with(Impairments::default())
}

fn pair_with(imp: Impairments) -> (Side, Side) {
    let a = side(1, [10, 0, 0, 1], [10, 0, 0, 2], 2);
    let b = side(2, [10, 0, 0, 2], [10, 0, 0, 1], 1);
    assert_eq!((a.u.qp_rc, b.u.qp_rc), (0x100, 0x100));
    let (la, lb) = MemLink::pair(imp, 7);
    a.r.cx.attach_link(Box::new(la));
    b.r.cx.attach_link(Box::new(lb));
    (a, b)
}

fn run(a: &mut Side, b: &mut Side, want_a: usize, want_b: usize) -> (Vec<[u8; 64]>, Vec<[u8; 64]>) {
    let (mut ca, mut cb) = (Vec::new(), Vec::new());
    for _ in 0..10_000 {
        a.r.hal.relax();
        b.r.hal.relax();
        a.r.cx.poll();
        b.r.cx.poll();
        while let Some(c) = a.poll_cq() {
            ca.push(c);
        }
        while let Some(c) = b.poll_cq() {
            cb.push(c);
        }
        if ca.len() >= want_a && cb.len() >= want_b {
            break;
        }
    }
    (ca, cb)
}

fn be32(c: &[u8], o: usize) -> u32 {
    u32::from_be_bytes(c[o..o + 4].try_into().unwrap())
}

#[test]
fn send_write_read_between_two_adapters() {
    let (mut a, mut b) = pair();
    // SEND 100 bytes A -> B.
    let msg: Vec<u8> = (0..100u8).collect();
    a.buf.write(0, &msg);
    b.post_recv(b.buf.paddr(), 4096);
    a.post_send(wqe_op::SEND, None, a.buf.paddr(), 100);
    let (ca, cb) = run(&mut a, &mut b, 1, 1);
    assert_eq!(ca.len(), 1, "A: one send CQE");
    assert_eq!(cb.len(), 1, "B: one receive CQE");
    assert_eq!(ca[0][0x3f] >> 4, cqe_op::REQ);
    assert_eq!(u16::from_be_bytes([ca[0][0x3c], ca[0][0x3d]]), 0, "wqe_counter");
    assert_eq!(be32(&ca[0], 0x38) & 0xff_ffff, 0x100);
    assert_eq!(cb[0][0x3f] >> 4, cqe_op::RESP_SEND);
    assert_eq!(be32(&cb[0], 0x2c), 100, "byte_cnt");
    let mut got = vec![0u8; 100];
    b.buf.read(0, &mut got);
    assert_eq!(got, msg);

    // RDMA WRITE 64 KiB A -> B (B's PA mkey as rkey), then READ it back into A at +512 KiB.
    let data: Vec<u8> = (0..65536u32).map(|i| (i * 7 + 3) as u8).collect();
    a.buf.write(4096, &data);
    let dst = b.buf.paddr() + 8192;
    a.post_send(wqe_op::RDMA_WRITE, Some((dst, b.mkey)), a.buf.paddr() + 4096, 65536);
    let (ca, _) = run(&mut a, &mut b, 1, 0);
    assert_eq!(ca.len(), 1);
    assert_eq!(ca[0][0x3f] >> 4, cqe_op::REQ, "write completed: {:x?}", &ca[0][0x30..]);
    let mut got = vec![0u8; 65536];
    b.buf.read(8192, &mut got);
    assert_eq!(got, data);
    a.post_send(wqe_op::RDMA_READ, Some((dst, b.mkey)), a.buf.paddr() + 512 * 1024, 65536);
    let (ca, _) = run(&mut a, &mut b, 1, 0);
    assert_eq!(ca.len(), 1);
    assert_eq!(ca[0][0x3f] >> 4, cqe_op::REQ);
    assert_eq!(be32(&ca[0], 0x2c), 65536, "READ byte count");
    a.buf.read(512 * 1024, &mut got);
    assert_eq!(got, data);
    assert_eq!(ca[0][0x38], wqe_op::RDMA_READ, "sop_drop_qpn carries the WQE opcode");

    // Bad rkey: remote access error on the requester; the responder keeps serving.
    a.post_send(wqe_op::RDMA_WRITE, Some((dst, 0xdead_0042)), a.buf.paddr(), 64);
    let (ca, _) = run(&mut a, &mut b, 1, 0);
    assert_eq!(ca.len(), 1);
    assert_eq!(ca[0][0x3f] >> 4, cqe_op::REQ_ERR);
    assert_eq!(ca[0][0x37], cqe_synd::REMOTE_ACCESS_ERR);
    // The responder QP is in error too (class C error, as rxe/IBA): the model mirrors the state
    // and raises a WQ access-error event naming the QP on B's EQ.
    let bst = b.r.cx.device().qps[&0x100].state;
    assert_eq!(bst, emu_connectx::consts::qp::ERR, "responder QP mirrored to ERROR");
    let e = &b.u.eq_buf;
    assert_eq!(e.read_u8(1), emu_connectx::consts::event::WQ_ACCESS_ERROR);
    assert_eq!(e.read_be32(0x20 + 0x18) & 0xff_ffff, 0x100, "qp_srq_n at data+0x18");
    assert_eq!(e.read_u8(0x3f) & 1, 0);
    // B still serves: its QP1 and its commands work.
    assert_eq!(b.r.cmd(&inp(emu_connectx::consts::op::ALLOC_PD, 0, 16), 16).status, 0);
    // A's QP is in ERROR now: the next WQE is flushed.
    a.post_send(wqe_op::SEND, None, a.buf.paddr(), 8);
    let (ca, _) = run(&mut a, &mut b, 1, 0);
    assert_eq!(ca[0][0x37], cqe_synd::WR_FLUSH_ERR);
    let c = a.r.cx.counters();
    assert!(c.send_wqes >= 5 && c.cqes >= 5 && c.dma_faults == 0, "{c:?}");
}

#[test]
fn wqe_with_wrong_qpn_is_a_local_qp_operation_error() {
    let (mut a, mut b) = pair();
    // Corrupt the ctrl segment's qpn after writing a good WQE.
    a.post_send(wqe_op::NOP, None, 0, 0);
    let (ca, _) = run(&mut a, &mut b, 1, 0);
    assert_eq!(ca.len(), 1, "signaled NOP completes");
    assert_eq!(ca[0][0x3f] >> 4, cqe_op::REQ);
    let off = RQ_BYTES + 64;
    a.post_send(wqe_op::SEND, None, a.buf.paddr(), 8);
    a.qp_buf().write_be32(off + 4, (0x999 << 8) | 2);
    // Ring again (the model reads the WQE at ring time in poll()).
    let (ca, _) = run(&mut a, &mut b, 1, 0);
    assert_eq!(ca.len(), 1);
    assert_eq!(ca[0][0x3f] >> 4, cqe_op::REQ_ERR);
    assert_eq!(ca[0][0x37], cqe_synd::LOCAL_QP_OP_ERR);
    assert_eq!(a.r.cx.counters().bad_wqes, 1);
}

#[test]
fn qp1_ud_send_with_address_vector() {
    let (mut a, mut b) = pair();
    let (abuf, adbr) = (&a.u._qp_bufs[2], &a.u._qp_bufs[3]);
    let (bbuf, bdbr) = (&b.u._qp_bufs[2], &b.u._qp_bufs[3]);
    // B: one receive on QP1 (GRH area + payload).
    bbuf.write_be32(0, 2048);
    bbuf.write_be32(4, b.mkey);
    bbuf.write_be64(8, b.buf.paddr() + 0x10000);
    bbuf.write_be32(20, 0x100);
    bdbr.write_be32(0, 1);
    // A: UD SEND on QP1: ctrl + 48-byte datagram segment + data = 5 DS, 2 WQEBBs.
    let payload = b"CM REQ stand-in, 40 bytes of text here.!";
    a.buf.write(0x2000, payload);
    let off = RQ_BYTES;
    abuf.fill(off, 128, 0);
    abuf.write_be32(off, wqe_op::SEND as u32);
    abuf.write_be32(off + 4, (1 << 8) | 5);
    abuf.write_u8(off + 0x0b, 0x08);
    let av = off + 16;
    abuf.write_be32(av, 0x8001_0000);
    abuf.write_be32(av + 8, 0x8000_0000 | 1);
    abuf.write_be16(av + 0x0e, 0xc123);
    abuf.write(av + 0x14, &[0x02, 0x00, 0x5e, 0x10, 0x00, 0x02]);
    abuf.write_u8(av + 0x1b, 64);
    abuf.write(av + 0x20 + 10, &[0xff, 0xff, 10, 0, 0, 2]);
    let d = av + 48;
    abuf.write_be32(d, payload.len() as u32);
    abuf.write_be32(d + 4, a.mkey);
    abuf.write_be64(d + 8, a.buf.paddr() + 0x2000);
    adbr.write_be32(4, 2);
    let mut first = [0u8; 8];
    abuf.read(off, &mut first);
    a.r.bar.write64_be(a.u.uar as usize * 4096 + 0x900, u64::from_be_bytes(first));
    let (ca, cb) = run(&mut a, &mut b, 1, 1);
    assert_eq!(ca.len(), 1, "UD send completed");
    assert_eq!(ca[0][0x3f] >> 4, cqe_op::REQ);
    assert_eq!(be32(&ca[0], 0x38) & 0xff_ffff, 1);
    assert_eq!(cb.len(), 1, "UD receive completed");
    assert_eq!(cb[0][0x3f] >> 4, cqe_op::RESP_SEND);
    assert_eq!(be32(&cb[0], 0x2c), 40 + payload.len() as u32, "byte_cnt includes the GRH area");
    let fr = be32(&cb[0], 0x18);
    assert_eq!(fr & 0xff_ffff, 1, "source QPN");
    assert_ne!((fr >> 28) & 3, 0, "GRH present");
    let mut got = vec![0u8; payload.len()];
    b.buf.read(0x10000 + 40, &mut got);
    assert_eq!(&got[..], &payload[..]);
}

#[test]
fn armed_cq_posts_completion_eqe_and_cmd_eqe() {
    let (mut a, mut b) = pair();
    let eqes = a.r.cx.counters().eqes;
    // Arm A's CQ (ci = 0), then a SEND completes on it.
    let word = 0u64;
    a.r.bar.write64_be(a.u.uar as usize * 4096 + 0x20, (word << 32) | a.u.cq as u64);
    b.post_recv(b.buf.paddr(), 64);
    a.post_send(wqe_op::SEND, None, a.buf.paddr(), 8);
    let (ca, _) = run(&mut a, &mut b, 1, 1);
    assert_eq!(ca.len(), 1);
    assert_eq!(a.r.cx.counters().eqes, eqes + 1);
    // The completion EQE names the CQ.
    let e = &a.u.eq_buf;
    assert_eq!(e.read_u8(1), emu_connectx::consts::event::COMPLETION);
    assert_eq!(e.read_be32(0x20 + 0x18) & 0xff_ffff, a.u.cq);
    assert_eq!(e.read_u8(0x3f) & 1, 0, "first pass owner bit 0");
}

#[test]
fn sends_over_a_lossy_duplicating_link_arrive_once_in_order() {
    let imp = Impairments { loss: 0.05, duplicate: 0.05, ..Impairments::default() };
    let (mut a, mut b) = pair_with(imp);
    let mut got_total = 0;
    for round in 0..6u32 {
        for k in 0..8u32 {
            let m = round * 8 + k;
            b.post_recv(b.buf.paddr() + (m as u64 % 16) * 8192, 8192);
            let msg: Vec<u8> = (0..4096u32).map(|i| (i ^ m) as u8).collect();
            a.buf.write(m as usize % 8 * 8192, &msg);
        }
        for k in 0..8u32 {
            let m = round * 8 + k;
            a.post_send(wqe_op::SEND, None, a.buf.paddr() + (m as u64 % 8) * 8192, 4096);
        }
        let (ca, cb) = run(&mut a, &mut b, 8, 8);
        assert_eq!(ca.len(), 8, "round {round}: all sends completed");
        assert_eq!(cb.len(), 8, "round {round}: each message received once");
        for (k, c) in cb.iter().enumerate() {
            let m = round * 8 + k as u32;
            assert_eq!(c[0x3f] >> 4, cqe_op::RESP_SEND);
            assert_eq!(u16::from_be_bytes([c[0x3c], c[0x3d]]) as u32, m & 0xffff, "in order");
            let mut got = vec![0u8; 4096];
            b.buf.read((m as usize % 16) * 8192, &mut got);
            assert!(got.iter().enumerate().all(|(i, &x)| x == (i as u32 ^ m) as u8), "message {m} intact");
        }
        got_total += cb.len();
    }
    assert_eq!(got_total, 48);
    let e = a.r.cx.engine_counters().unwrap();
    assert!(e.retransmits > 0, "loss forced retransmissions: {e:?}");
}

/// Per-I/O keys: a free, UMR-enabled MTT mkey is fast-registered by a UMR WQE, used by the peer
/// for an RDMA WRITE across a page boundary, invalidated by LOCAL_INVAL, then refused.
#[test]
fn umr_fast_register_then_local_invalidate() {
    umr_case(true);
}

/// The same UMR WQE on a QP whose context has `fre` = 0 fails as a local QP operation error and
/// leaves the mkey free: only fast-registration-enabled QPs may change a key.
#[test]
fn umr_on_a_qp_without_fre_is_a_local_qp_operation_error() {
    umr_case(false);
}

fn umr_case(fre: bool) {
    use emu_connectx::consts::op;
    use emu_connectx::datapath::umr;
    use mlx5_ifc::ifc as l;
use mlx5_ifc::layout::{get, set};
    let (mut a, mut b) = pair();
    if !fre {
        let qpn = b.u.qp_rc;
        let mut d = b.r.cx.device_mut();
        set(&mut d.qps.get_mut(&qpn).expect("B's RC QP").qpc, l::qpc::fre, 0);
    }
    // B: CREATE_MKEY MTT, free, umr_en, room for 4 translations.
    let mut i = inp(op::CREATE_MKEY, 0, 0x110 + 32);
    let m = &mut i[0x10..0x50];
    set(m, l::mkc::free, 1);
    set(m, l::mkc::umr_en, 1);
    set(m, l::mkc::access_mode_1_0, 1);
    set(m, l::mkc::qpn, 0xff_ffff);
    set(m, l::mkc::pd, b.u.pd as u64);
    set(m, l::mkc::log_page_size, 12);
    set(m, l::mkc::translations_octword_size, 2);
    let idx = get(&b.r.ok(&i, 16), OBJ_ID) as u32;
    let key = (idx << 8) | 0x77;
    // The MTT list (2 pages, not adjacent) in B's memory, reached with B's PA mkey.
    let (p0, p1) = (b.buf.paddr() + 0x40000, b.buf.paddr() + 0x60000);
    b.buf.write_be64(0x30000, p0 | 3);
    b.buf.write_be64(0x30008, p1 | 3);
    // UMR WQE: ctrl(16) + umr ctrl(48) + mkey seg(64) + data seg(16) = 9 DS, 3 WQEBBs.
    let mem = b.r.hal.mem().clone();
    let qpa = b.u._qp_bufs[0].paddr();
    let dbr = b.u._qp_bufs[1].paddr();
    let w8 = |o: usize, v: u8| mem.write(qpa + o as u64, &[v]);
    let w16 = |o: usize, v: u16| mem.write(qpa + o as u64, &v.to_be_bytes());
    let w32 = |o: usize, v: u32| mem.write(qpa + o as u64, &v.to_be_bytes());
    let w64 = |o: usize, v: u64| mem.write(qpa + o as u64, &v.to_be_bytes());
    let off = RQ_BYTES;
    mem.write(qpa + off as u64, &[0u8; 192]);
    w32(off, wqe_op::UMR as u32);
    w32(off + 4, (b.u.qp_rc << 8) | 9);
    w8(off + 0x0b, 0x08);
    w32(off + 0x0c, (idx << 8) | 0x55); // current key (variant not checked by index)
    let uc = off + 16;
    w16(uc + 4, 1); // klm_octowords: 2 MTT entries
    let mask = umr::MASK_LEN | umr::MASK_PAGE_SIZE | umr::MASK_START_ADDR | umr::MASK_KEY | umr::MASK_LR
        | umr::MASK_LW | umr::MASK_RR | umr::MASK_RW | umr::MASK_FREE;
    w64(uc + 8, mask);
    let mk = uc + 48;
    w8(mk + 2, (1 << 2) | (1 << 3) | (1 << 4) | (1 << 5));
    w32(mk + 4, (0xff_ffff << 8) | 0x77);
    w64(mk + 16, 0x5000_0000_0000);
    w64(mk + 24, 8192);
    w8(mk + 0x3b, 12);
    let ds = mk + 64;
    w32(ds, 16);
    w32(ds + 4, b.mkey);
    w64(ds + 8, b.buf.paddr() + 0x30000);
    b.sq_pi = 3;
    mem.write(dbr + 4, &3u32.to_be_bytes());
    let mut first = [0u8; 8];
    mem.read(qpa + off as u64, &mut first);
    b.r.bar.write64_be(b.u.uar as usize * 4096 + 0x800, u64::from_be_bytes(first));
    let (_, cb) = run(&mut a, &mut b, 0, 1);
    assert_eq!(cb.len(), 1);
    if !fre {
        assert_eq!(cb[0][0x3f] >> 4, cqe_op::REQ_ERR, "UMR refused: {:x?}", &cb[0][0x30..]);
        assert_eq!(cb[0][0x37], cqe_synd::LOCAL_QP_OP_ERR);
        assert!(b.r.cx.device().mkeys[&idx].free, "the key stays free");
        return;
    }
    assert_eq!(cb[0][0x3f] >> 4, cqe_op::REQ, "UMR completed: {:x?}", &cb[0][0x30..]);
    // A writes 64 bytes straddling the two pages of the new registration.
    let data: Vec<u8> = (0..64u8).map(|x| x ^ 0xa5).collect();
    a.buf.write(0, &data);
    a.post_send(wqe_op::RDMA_WRITE, Some((0x5000_0000_0000 + 4096 - 32, key)), a.buf.paddr(), 64);
    let (ca, _) = run(&mut a, &mut b, 1, 0);
    assert_eq!(ca[0][0x3f] >> 4, cqe_op::REQ);
    let mut got = vec![0u8; 32];
    b.buf.read(0x40000 + 4096 - 32, &mut got);
    assert_eq!(&got[..], &data[..32], "first page");
    b.buf.read(0x60000, &mut got);
    assert_eq!(&got[..], &data[32..], "second page");
    // B invalidates the key locally; A's next WRITE gets a remote access error.
    let off = RQ_BYTES + 3 * 64;
    mem.write(qpa + off as u64, &[0u8; 64]);
    w32(off, (3 << 8) | wqe_op::LOCAL_INVAL as u32);
    w32(off + 4, (b.u.qp_rc << 8) | 1);
    w8(off + 0x0b, 0x08);
    w32(off + 0x0c, key);
    b.sq_pi = 4;
    mem.write(dbr + 4, &4u32.to_be_bytes());
    mem.read(qpa + off as u64, &mut first);
    b.r.bar.write64_be(b.u.uar as usize * 4096 + 0x800, u64::from_be_bytes(first));
    let (_, cb) = run(&mut a, &mut b, 0, 1);
    assert_eq!(cb[0][0x3f] >> 4, cqe_op::REQ);
    assert!(b.r.cx.device().mkeys[&idx].free);
    a.post_send(wqe_op::RDMA_WRITE, Some((0x5000_0000_0000, key)), a.buf.paddr(), 8);
    let (ca, _) = run(&mut a, &mut b, 1, 0);
    assert_eq!(ca[0][0x3f] >> 4, cqe_op::REQ_ERR);
    assert_eq!(ca[0][0x37], cqe_synd::REMOTE_ACCESS_ERR);
}

/// A signaled NOP posted right behind a SEND completes after it (SQ order), even though the
/// adapter completes NOPs itself.
#[test]
fn local_completions_keep_sq_order() {
    let (mut a, mut b) = pair();
    b.post_recv(b.buf.paddr(), 4096);
    a.post_send(wqe_op::SEND, None, a.buf.paddr(), 2000);
    a.post_send(wqe_op::NOP, None, 0, 0);
    let (ca, _) = run(&mut a, &mut b, 2, 1);
    assert_eq!(ca.len(), 2);
    let order: Vec<u16> = ca.iter().map(|c| u16::from_be_bytes([c[0x3c], c[0x3d]])).collect();
    assert_eq!(order, vec![0, 1], "SEND's CQE first, then the NOP's");
}
