//! Hardware validation: RC traffic between two QPs of one adapter over its local loopback
//! (frames to the port's own MAC come back in while the NIC vport's `disable_uc_local_lb` is 0),
//! every byte verified. Used by the image's `selftest=connectx` on a real ConnectX and, on the
//! host, against the emulated one. Slow path only: it allocates, logs and waits.
//!
//! Per round `i` (payload `size` bytes, a pattern seeded by `i`): SEND A→B into a posted
//! receive, RDMA WRITE B→A, RDMA READ A←B; each lands in a zeroed buffer that is compared with
//! the pattern. A completion with an error status ends the test with its vendor syndrome.

use alloc::vec;
use alloc::vec::Vec;

use crate::error::Error;
use crate::verbs::Mlx5Verbs;
use hal::{DmaRegion, Hal, Mmio};
use rdma::{Access, Completion, Control, Cqn, DataPath, Lkey, Neighbours, Qpn, RcConnectAttrs, RecvWr, Rkey, SendOp, SendWr, Sge, WcOpcode, WcStatus};

/// What to run.
#[derive(Debug, Clone, Copy)]
pub struct LoopbackConfig {
    /// Rounds (each: one SEND, one RDMA WRITE, one RDMA READ).
    pub rounds: u32,
    /// Payload bytes per operation (more than the path MTU makes multi-packet messages).
    pub size: u32,
    /// Path MTU in bytes (256..4096).
    pub mtu: u32,
    /// How long one operation may take before the test fails (the adapter's own clock).
    pub op_timeout_ns: u64,
    /// Turn unicast local loopback on first if the vport has it off.
    pub enable_local_lb: bool,
}

impl Default for LoopbackConfig {
    fn default() -> Self {
        LoopbackConfig { rounds: 64, size: 8192, mtu: 1024, op_timeout_ns: 2_000_000_000, enable_local_lb: true }
    }
}

/// What ran.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoopbackReport {
    pub qpns: (u32, u32),
    /// Operations completed and verified (3 per round).
    pub ops: u64,
    /// Payload bytes moved and compared.
    pub bytes: u64,
    /// Adapter-clock nanoseconds for all rounds.
    pub elapsed_ns: u64,
    /// Local loopback had to be turned on (the vport had it off).
    pub enabled_lb: bool,
}

/// The pattern of round `round`, byte `i` (never all-zero, differs per round and offset).
fn pattern(round: u32, i: usize) -> u8 {
    let x = (i as u32).wrapping_mul(0x9e37_79b1) ^ round.wrapping_mul(0x85eb_ca6b);
    ((x >> 24) as u8) | 1
}

/// One side: its QP, CQ, buffer (send half, receive half) and keys.
struct Side<D> {
    qp: Qpn,
    cq: Cqn,
    buf: D,
    lkey: Lkey,
    rkey: Rkey,
}

/// Run the loopback test on `v`. Every object it creates is destroyed again, success or not.
pub fn loopback_rc<H: Hal, M: Mmio>(v: &mut Mlx5Verbs<H, M>, cfg: &LoopbackConfig) -> Result<LoopbackReport, Error> {
    if cfg.size == 0 || cfg.rounds == 0 {
        return Err(Error::InvalidArgument("loopback: zero size or rounds"));
    }
    let mut report = LoopbackReport::default();
    let lb = v.dev.query_vport()?;
    if !lb.uc_local_lb {
        if !cfg.enable_local_lb {
            return Err(Error::Unsupported("local loopback (vport disable_uc_local_lb is set)"));
        }
        v.dev.set_local_loopback(true)?;
        report.enabled_lb = true;
        log::info!("mlx5: selftest: unicast local loopback was off; turned on");
    }
    let mut sides: Vec<Side<H::Dma>> = Vec::new();
    let r = (|| {
        for _ in 0..2 {
            let s = make_side(v, cfg.size as usize)?;
            sides.push(s);
        }
        let (a, b) = (&sides[0], &sides[1]);
        report.qpns = (a.qp.0, b.qp.0);
        connect(v, a.qp, b.qp, cfg.mtu, 0x10_0000)?;
        connect(v, b.qp, a.qp, cfg.mtu, 0x20_0000)?;
        let t0 = v.dev.hal().now_ns();
        for round in 0..cfg.rounds {
            rounds(v, &sides[0], &sides[1], round, cfg)?;
            report.ops += 3;
            report.bytes += 3 * cfg.size as u64;
        }
        report.elapsed_ns = v.dev.hal().now_ns().saturating_sub(t0);
        Ok(())
    })();
    // Teardown, whatever happened: QPs, CQs, MRs (buffers free when dropped).
    let mut first_err = r.err();
    for s in sides.drain(..) {
        for e in [v.destroy_qp(s.qp).err(), v.destroy_cq(s.cq).err(), v.dereg_mr(s.lkey).err()].into_iter().flatten() {
            first_err.get_or_insert(e);
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(report),
    }
}

fn make_side<H: Hal, M: Mmio>(v: &mut Mlx5Verbs<H, M>, size: usize) -> Result<Side<H::Dma>, Error> {
    let buf = v.alloc_buf(2 * size)?;
    let access = Access { local_write: true, remote_read: true, remote_write: true };
    let (lkey, rkey) = v.reg_mr(buf.paddr(), 2 * size as u64, access)?;
    let cq = match v.create_cq(64) {
        Ok(c) => c,
        Err(e) => {
            let _ = v.dereg_mr(lkey);
            return Err(e);
        }
    };
    let qp = match v.create_rc_qp(cq, cq, 16, 16) {
        Ok(q) => q,
        Err(e) => {
            let _ = v.destroy_cq(cq);
            let _ = v.dereg_mr(lkey);
            return Err(e);
        }
    };
    Ok(Side { qp, cq, buf, lkey, rkey })
}

/// Connect `qp` to `peer` on this same port: its own GID and MAC are the remote's.
fn connect<H: Hal, M: Mmio>(v: &mut Mlx5Verbs<H, M>, qp: Qpn, peer: Qpn, mtu: u32, psn: u32) -> Result<(), Error> {
    let peer_psn = if psn == 0x10_0000 { 0x20_0000 } else { 0x10_0000 };
    let attrs = RcConnectAttrs {
        remote_qpn: peer,
        remote_ip: v.local_ip(),
        remote_mac: v.local_mac(),
        rq_psn: peer_psn,
        sq_psn: psn,
        mtu,
        udp_sport: 0,
        // Few retries with a short timeout: without loopback the test fails in well under a second.
        retry_cnt: 3,
        rnr_retry: 3,
        timeout: 14,
        min_rnr_timer: 12,
        max_rd_atomic: 1,
        max_dest_rd_atomic: 1,
        access: Access { local_write: true, remote_read: true, remote_write: true },
    };
    v.connect_rc_qp(qp, &attrs)
}

/// Wait for one completion on `cq`; it must be a success of opcode `want`.
fn wait_one<H: Hal, M: Mmio>(v: &mut Mlx5Verbs<H, M>, cq: Cqn, want: WcOpcode, timeout_ns: u64) -> Result<Completion, Error> {
    let t0 = v.dev.hal().now_ns();
    let mut wc = [Completion::default(); 1];
    loop {
        v.poll();
        if v.poll_cq(cq, &mut wc) == 1 {
            let c = wc[0];
            if c.status != WcStatus::Success {
                log::error!("mlx5: selftest: QP {:#x} wr {}: completion {:?} (vendor syndrome {:#x})", c.qpn.0, c.wr_id, c.status, c.vendor_err);
                return Err(Error::WorkCompletion { qpn: c.qpn.0, vendor_err: c.vendor_err });
            }
            if c.opcode != want {
                return Err(Error::Verify { what: "completion opcode", at: c.wr_id });
            }
            return Ok(c);
        }
        if let Some(e) = v.last_poll_error.take() {
            return Err(e);
        }
        if v.dev.hal().now_ns().saturating_sub(t0) >= timeout_ns {
            return Err(Error::Verify { what: "no completion in time", at: want as u64 });
        }
        v.dev.hal().relax();
    }
}

fn fill<D: DmaRegion>(buf: &D, at: usize, size: usize, round: u32) {
    let data: Vec<u8> = (0..size).map(|i| pattern(round, i)).collect();
    buf.write(at, &data);
}

fn check<D: DmaRegion>(buf: &D, at: usize, size: usize, round: u32, what: &'static str) -> Result<(), Error> {
    let mut got = vec![0u8; size];
    buf.read(at, &mut got);
    match got.iter().enumerate().position(|(i, b)| *b != pattern(round, i)) {
        None => Ok(()),
        Some(i) => {
            log::error!("mlx5: selftest: round {round}: {what}: byte {i} is {:#04x}, expected {:#04x}", got[i], pattern(round, i));
            Err(Error::Verify { what, at: i as u64 })
        }
    }
}

fn rounds<H: Hal, M: Mmio>(v: &mut Mlx5Verbs<H, M>, a: &Side<H::Dma>, b: &Side<H::Dma>, round: u32, cfg: &LoopbackConfig) -> Result<(), Error> {
    let size = cfg.size as usize;
    let (send_half, recv_half) = (0usize, size);
    let zero = vec![0u8; size];
    let to = cfg.op_timeout_ns;
    let sge = |s: &Side<H::Dma>, at: usize| Sge { addr: s.buf.paddr() + at as u64, len: cfg.size, lkey: s.lkey };
    let wr = |id: u64, op: SendOp, sge: Sge| SendWr { wr_id: id, op, sge, signaled: true, fence: false, ud: None };
    let id = (round as u64) << 8;

    // SEND A -> B (into B's posted receive).
    fill(&a.buf, send_half, size, round);
    b.buf.write(recv_half, &zero);
    v.post_recv(b.qp, &RecvWr { wr_id: id | 1, sge: sge(b, recv_half) })?;
    v.post_send(a.qp, &wr(id | 2, SendOp::Send, sge(a, send_half)))?;
    wait_one(v, a.cq, WcOpcode::Send, to)?;
    let c = wait_one(v, b.cq, WcOpcode::Recv, to)?;
    if c.byte_len != cfg.size {
        return Err(Error::Verify { what: "SEND byte count", at: c.byte_len as u64 });
    }
    check(&b.buf, recv_half, size, round, "SEND payload")?;

    // RDMA WRITE B -> A (B's send half into A's receive half).
    let next = round.wrapping_add(0x5555);
    fill(&b.buf, send_half, size, next);
    a.buf.write(recv_half, &zero);
    let remote = a.buf.paddr() + recv_half as u64;
    v.post_send(b.qp, &wr(id | 3, SendOp::RdmaWrite { remote_addr: remote, rkey: a.rkey }, sge(b, send_half)))?;
    wait_one(v, b.cq, WcOpcode::RdmaWrite, to)?;
    check(&a.buf, recv_half, size, next, "RDMA WRITE payload")?;

    // RDMA READ A <- B (B's send half, still `next`, into A's receive half, zeroed first).
    a.buf.write(recv_half, &zero);
    let remote = b.buf.paddr() + send_half as u64;
    v.post_send(a.qp, &wr(id | 4, SendOp::RdmaRead { remote_addr: remote, rkey: b.rkey }, sge(a, recv_half)))?;
    wait_one(v, a.cq, WcOpcode::RdmaRead, to)?;
    check(&a.buf, recv_half, size, next, "RDMA READ payload")
}
