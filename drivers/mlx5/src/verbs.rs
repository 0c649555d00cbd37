//! `rdma::Verbs` for an mlx5 adapter: the GSI QP and its CQ at creation, a neighbour table fed by
//! ARP over the raw Ethernet path (requests sent by `resolve_mac`, replies and requests for our
//! address handled in `poll`), plus static entries ([`Mlx5Verbs::add_neighbor`]).

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
    /// Whether the raw Ethernet path (ARP) is up.
    pub raw_eth: bool,
    /// Outstanding ARP requests: (ip, time last sent).
    pending: [Option<(Ipv4, u64)>; 8],
    /// ARP requests sent / replies sent / neighbours learnt.
    pub arp_stats: (u64, u64, u64),
}

/// ARP over Ethernet/IPv4 (RFC 826), byte offsets in the frame.
mod arp {
    use crate::layout::Field;
    const fn f(byte: u32, bytes: u32) -> Field {
        Field { off: byte * 8, width: bytes * 8 }
    }
    pub const DST: Field = f(0, 6);
    pub const SRC: Field = f(6, 6);
    pub const ETHERTYPE: Field = f(12, 2);
    pub const HTYPE: Field = f(14, 2);
    pub const PTYPE: Field = f(16, 2);
    pub const HLEN: Field = f(18, 1);
    pub const PLEN: Field = f(19, 1);
    pub const OPER: Field = f(20, 2);
    pub const SHA: Field = f(22, 6);
    pub const SPA: Field = f(28, 4);
    pub const THA: Field = f(32, 6);
    pub const TPA: Field = f(38, 4);
    pub const LEN: usize = 42;
    pub const ETHERTYPE_ARP: u64 = 0x0806;
    pub const REQUEST: u64 = 1;
    pub const REPLY: u64 = 2;
}

/// Re-send an unanswered ARP request after this long.
const ARP_RETRY_NS: u64 = 100_000_000;

fn arp_frame(oper: u64, sha: Mac, spa: Ipv4, dst: Mac, tha: Mac, tpa: Ipv4) -> [u8; arp::LEN] {
    use crate::layout::{set, set_bytes};
    let mut b = [0u8; arp::LEN];
    set_bytes(&mut b, arp::DST, &dst);
    set_bytes(&mut b, arp::SRC, &sha);
    set(&mut b, arp::ETHERTYPE, arp::ETHERTYPE_ARP);
    set(&mut b, arp::HTYPE, 1);
    set(&mut b, arp::PTYPE, 0x0800);
    set(&mut b, arp::HLEN, 6);
    set(&mut b, arp::PLEN, 4);
    set(&mut b, arp::OPER, oper);
    set_bytes(&mut b, arp::SHA, &sha);
    set_bytes(&mut b, arp::SPA, &spa);
    set_bytes(&mut b, arp::THA, &tha);
    set_bytes(&mut b, arp::TPA, &tpa);
    b
}

/// (oper, sender MAC, sender IP, target IP) of a well-formed Ethernet/IPv4 ARP frame.
fn parse_arp(b: &[u8]) -> Option<(u64, Mac, Ipv4, Ipv4)> {
    use crate::layout::{bytes, get};
    if b.len() < arp::LEN
        || get(b, arp::ETHERTYPE) != arp::ETHERTYPE_ARP
        || get(b, arp::HTYPE) != 1
        || get(b, arp::PTYPE) != 0x0800
        || get(b, arp::HLEN) != 6
        || get(b, arp::PLEN) != 4
    {
        return None;
    }
    let mut sha = [0u8; 6];
    sha.copy_from_slice(bytes(b, arp::SHA));
    let mut spa = [0u8; 4];
    spa.copy_from_slice(bytes(b, arp::SPA));
    let mut tpa = [0u8; 4];
    tpa.copy_from_slice(bytes(b, arp::TPA));
    Some((get(b, arp::OPER), sha, spa, tpa))
}

fn log2_ceil(n: u32) -> u8 {
    if n <= 1 {
        0
    } else {
        (32 - (n - 1).leading_zeros()) as u8
    }
}

impl<H: Hal, M: Mmio> Mlx5Verbs<H, M> {
    /// Create the GSI CQ and QP1, bring QP1 to RTS, and bring up the raw Ethernet path for ARP
    /// (if the adapter refuses it, only static neighbours work; see `raw_eth`).
    ///
    /// On failure the device is shut down before the error is returned (every object
    /// destroyed, TEARDOWN_HCA, every firmware page reclaimed, DISABLE_HCA): the pages the
    /// firmware owned must not go back to the DMA pool while the adapter may still use them.
    /// The returned error is the setup error; a failing shutdown is logged.
    pub fn new(mut dev: Mlx5<H, M>) -> Result<Self, Error> {
        let (gsi_cq, gsi) = match Self::create_gsi(&mut dev) {
            Ok(v) => v,
            Err(e) => {
                match dev.shutdown() {
                    Ok(st) => log::warn!(
                        "mlx5: verbs setup failed ({e}); device shut down: {} pages given, {} reclaimed",
                        st.pages_given,
                        st.pages_reclaimed
                    ),
                    Err(se) => log::error!("mlx5: verbs setup failed ({e}); shutdown after it failed too: {se}"),
                }
                return Err(e);
            }
        };
        let (raw_eth, last_poll_error) = match dev.enable_raw_eth() {
            Ok(()) => (true, None),
            Err(e) => {
                log::warn!("mlx5: no raw Ethernet path ({e}); ARP disabled, static neighbours only");
                (false, Some(e))
            }
        };
        Ok(Mlx5Verbs {
            dev,
            gsi,
            gsi_cq,
            neighbors: [None; NEIGHBORS],
            last_poll_error,
            raw_eth,
            pending: [None; 8],
            arp_stats: (0, 0, 0),
        })
    }

    /// The GSI CQ and QP1, QP1 brought to RTS.
    fn create_gsi(dev: &mut Mlx5<H, M>) -> Result<(Cqn, Qpn), Error> {
        let gsi_cq = dev.create_cq(GSI_LOG_CQ)?;
        let gsi = dev.create_qp(QpKind::Gsi, gsi_cq, gsi_cq, GSI_LOG_SQ, GSI_LOG_RQ, 1)?;
        dev.activate_gsi(gsi)?;
        Ok((gsi_cq, gsi))
    }

    fn learn(&mut self, ip: Ipv4, mac: Mac) {
        if self.add_neighbor(ip, mac).is_ok() {
            self.arp_stats.2 += 1;
        }
        for p in self.pending.iter_mut() {
            if matches!(p, Some((i, _)) if *i == ip) {
                *p = None;
            }
        }
    }

    /// Handle received raw frames: ARP replies to us teach neighbours; requests for our address
    /// are answered (and teach the requester).
    fn poll_arp(&mut self) {
        if !self.raw_eth {
            return;
        }
        let mut seen: [Option<(u64, Mac, Ipv4, Ipv4)>; 16] = [None; 16];
        let mut k = 0;
        self.dev.poll_frames(|f| {
            if let Some(a) = parse_arp(f) {
                if k < seen.len() {
                    seen[k] = Some(a);
                    k += 1;
                }
            }
        });
        let (my_ip, my_mac) = (self.dev.ipv4(), self.dev.mac());
        for (oper, sha, spa, tpa) in seen.into_iter().flatten() {
            if tpa != my_ip {
                continue;
            }
            self.learn(spa, sha);
            if oper == arp::REQUEST {
                let reply = arp_frame(arp::REPLY, my_mac, my_ip, sha, sha, spa);
                if self.dev.send_frame(&reply).is_ok() {
                    self.arp_stats.1 += 1;
                }
            }
        }
    }
}

impl<H: Hal, M: Mmio> Mlx5Verbs<H, M> {

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
    fn post_send_deferred(&mut self, qp: Qpn, wr: &SendWr) -> Result<(), Error> {
        self.dev.post_send_deferred(qp, wr)
    }
    fn ring_send(&mut self, qp: Qpn) -> Result<(), Error> {
        self.dev.ring_send(qp)
    }
    fn post_recv(&mut self, qp: Qpn, wr: &RecvWr) -> Result<(), Error> {
        self.post_recv_batch(qp, core::slice::from_ref(wr))
    }
    fn post_recv_batch(&mut self, qp: Qpn, wrs: &[RecvWr]) -> Result<(), Error> {
        match self.dev.qp(qp).map(|q| q.state) {
            Some(QpState::Error) => Err(Error::InvalidArgument("post_recv on a QP in ERROR")),
            _ => self.dev.post_recv_batch(qp, wrs),
        }
    }
    fn poll_cq(&mut self, cq: Cqn, out: &mut [Completion]) -> usize {
        self.dev.poll_cq(cq, out).unwrap_or(0)
    }
    fn resolve_mac(&mut self, ip: Ipv4) -> Option<Mac> {
        if let Some(m) = self.neighbors.iter().flatten().find(|(i, _)| *i == ip).map(|(_, m)| *m) {
            return Some(m);
        }
        if !self.raw_eth {
            return None;
        }
        let now = self.dev.hal().now_ns();
        let due = match self.pending.iter().flatten().find(|(i, _)| *i == ip) {
            Some(&(_, sent)) => now.wrapping_sub(sent) >= ARP_RETRY_NS,
            None => true,
        };
        if due {
            let (my_ip, my_mac) = (self.dev.ipv4(), self.dev.mac());
            let req = arp_frame(arp::REQUEST, my_mac, my_ip, [0xff; 6], [0; 6], ip);
            if self.dev.send_frame(&req).is_ok() {
                self.arp_stats.0 += 1;
                let slot = self
                    .pending
                    .iter()
                    .position(|p| matches!(p, Some((i, _)) if *i == ip))
                    .or_else(|| self.pending.iter().position(|p| p.is_none()))
                    .unwrap_or(0);
                self.pending[slot] = Some((ip, now));
            }
        }
        None
    }
    fn poll(&mut self) {
        if let Err(e) = self.dev.poll_eq().map(|_| ()).and_then(|_| self.dev.check_health()) {
            self.last_poll_error = Some(e);
        }
        self.poll_arp();
    }
}
