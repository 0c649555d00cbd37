//! `rdma::Verbs` for an mlx5 adapter: the GSI QP and its CQ at creation, a neighbour table.
//!
//! Missing (issue 4): the raw Ethernet queues + flow table that would carry ARP. Until then
//! `resolve_mac` answers only from entries added with [`Mlx5Verbs::add_neighbor`] and sends no
//! request.

use crate::device::{Mlx5, QpKind, QpState};
use crate::error::Error;
use hal::{Hal, Mmio, PhysAddr};
use rdma::{Access, Completion, Cqn, Ipv4, Lkey, Mac, Qpn, RcConnectAttrs, RecvWr, Rkey, SendWr, Verbs};

/// GSI CQ: 2^8 CQEs; GSI SQ/RQ: 2^6 WQEBBs / 2^6 WQEs of 32 bytes (data segment + terminator).
const GSI_LOG_CQ: u8 = 8;
const GSI_LOG_SQ: u8 = 6;
const GSI_LOG_RQ: u8 = 6;
const NEIGHBORS: usize = 32;

/// An adapter brought up and ready for apps: `Mlx5` plus the GSI QP (in RTS) and its CQ.
pub struct Mlx5Verbs<H: Hal, M: Mmio> {
    pub dev: Mlx5<H, M>,
    gsi: Qpn,
    gsi_cq: Cqn,
    neighbors: [Option<(Ipv4, Mac)>; NEIGHBORS],
    /// Errors seen by `poll` (health, EQ); the last one is kept.
    pub last_poll_error: Option<Error>,
}

fn log2_ceil(n: u32) -> u8 {
    if n <= 1 {
        0
    } else {
        (32 - (n - 1).leading_zeros()) as u8
    }
}

impl<H: Hal, M: Mmio> Mlx5Verbs<H, M> {
    /// Create the GSI CQ and QP1 and bring QP1 to RTS.
    pub fn new(mut dev: Mlx5<H, M>) -> Result<Self, Error> {
        let gsi_cq = dev.create_cq(GSI_LOG_CQ)?;
        let gsi = dev.create_qp(QpKind::Gsi, gsi_cq, gsi_cq, GSI_LOG_SQ, GSI_LOG_RQ, 1)?;
        dev.activate_gsi(gsi)?;
        Ok(Mlx5Verbs { dev, gsi, gsi_cq, neighbors: [None; NEIGHBORS], last_poll_error: None })
    }

    /// Record `ip` → `mac` (static neighbour entry; replaces an existing one).
    pub fn add_neighbor(&mut self, ip: Ipv4, mac: Mac) -> Result<(), Error> {
        if let Some(slot) = self.neighbors.iter_mut().find(|n| matches!(n, Some((i, _)) if *i == ip)) {
            *slot = Some((ip, mac));
            return Ok(());
        }
        let free = self.neighbors.iter_mut().find(|n| n.is_none()).ok_or(Error::InvalidArgument("neighbour table full"))?;
        *free = Some((ip, mac));
        Ok(())
    }

    /// Destroy everything and hand the adapter back to firmware control.
    pub fn shutdown(self) -> Result<crate::device::Stats, Error> {
        self.dev.shutdown()
    }
}

impl<H: Hal, M: Mmio> Verbs for Mlx5Verbs<H, M> {
    type Error = Error;
    type Buf = H::Dma;

    fn local_ip(&self) -> Ipv4 {
        self.dev.ipv4()
    }
    fn local_mac(&self) -> Mac {
        self.dev.mac()
    }
    fn alloc_buf(&mut self, len: usize) -> Result<H::Dma, Error> {
        Ok(self.dev.hal().dma_alloc(len.max(1), 4096)?)
    }
    fn reg_mr(&mut self, addr: PhysAddr, len: u64, access: Access) -> Result<(Lkey, Rkey), Error> {
        let m = self.dev.reg_mr(addr, len, access)?;
        Ok((m.lkey, m.rkey))
    }
    fn dereg_mr(&mut self, lkey: Lkey) -> Result<(), Error> {
        self.dev.dereg_mr(lkey)
    }
    fn create_cq(&mut self, entries: u32) -> Result<Cqn, Error> {
        self.dev.create_cq(log2_ceil(entries.max(2)))
    }
    fn destroy_cq(&mut self, cq: Cqn) -> Result<(), Error> {
        if cq == self.gsi_cq {
            return Err(Error::InvalidArgument("the GSI CQ lives as long as the device"));
        }
        self.dev.destroy_cq(cq)
    }
    fn create_rc_qp(&mut self, send_cq: Cqn, recv_cq: Cqn, sq: u32, rq: u32) -> Result<Qpn, Error> {
        // RC WQEs are at most ctrl + raddr + data = 48 bytes: one WQEBB per request.
        self.dev.create_qp(QpKind::Rc, send_cq, recv_cq, log2_ceil(sq.max(1)), log2_ceil(rq.max(1)), 0)
    }
    fn connect_rc_qp(&mut self, qp: Qpn, attrs: &RcConnectAttrs) -> Result<(), Error> {
        self.dev.connect_rc(qp, attrs)
    }
    fn qp_to_error(&mut self, qp: Qpn) -> Result<(), Error> {
        self.dev.qp_to_error(qp)
    }
    fn destroy_qp(&mut self, qp: Qpn) -> Result<(), Error> {
        if qp == self.gsi {
            return Err(Error::InvalidArgument("the GSI QP lives as long as the device"));
        }
        self.dev.destroy_qp(qp)
    }
    fn gsi_qp(&self) -> Qpn {
        self.gsi
    }
    fn gsi_cq(&self) -> Cqn {
        self.gsi_cq
    }
    fn post_send(&mut self, qp: Qpn, wr: &SendWr) -> Result<(), Error> {
        self.dev.post_send(qp, wr)
    }
    fn post_recv(&mut self, qp: Qpn, wr: &RecvWr) -> Result<(), Error> {
        match self.dev.qp(qp).map(|q| q.state) {
            Some(QpState::Error) => Err(Error::InvalidArgument("post_recv on a QP in ERROR")),
            _ => self.dev.post_recv(qp, wr),
        }
    }
    fn poll_cq(&mut self, cq: Cqn, out: &mut [Completion]) -> usize {
        self.dev.poll_cq(cq, out).unwrap_or(0)
    }
    fn resolve_mac(&mut self, ip: Ipv4) -> Option<Mac> {
        self.neighbors.iter().flatten().find(|(i, _)| *i == ip).map(|(_, m)| *m)
    }
    fn poll(&mut self) {
        if let Err(e) = self.dev.poll_eq().map(|_| ()).and_then(|_| self.dev.check_health()) {
            self.last_poll_error = Some(e);
        }
    }
}
