//! `rdma::Verbs` for an mlx5 adapter: the GSI QP and its CQ at creation, a neighbour table
//! (`rdma::neigh`: bounded, ageing, learning only replies to our requests and requests for our
//! address) fed by ARP over the raw Ethernet path (requests sent by `resolve_mac`, received ARP
//! handled in `poll`), plus static entries ([`Mlx5Verbs::add_neighbor`]). With a management
//! stack attached ([`Mlx5Verbs::enable_mgmt_frames`]) the other raw frames, and copies of ARP,
//! are queued for it ([`crate::mgmt_tap`]).

use crate::arp;
use alloc::vec::Vec;
use crate::device::log2_ceil;
use crate::device::{Mlx5, QpKind, QpState, SrqId};
use crate::error::Error;
use crate::mgmt_tap::FrameTap;
use hal::{Hal, Mmio, PhysAddr};
use rdma::neigh::{NeighConfig, NeighStats, NeighTable};
use rdma::{Access, Completion, Control, Cqn, DataPath, GroupVerbs, Ipv4, Lkey, Mac, Neighbours, Qpn, RcConnectAttrs, RecvWr, Rkey, SendWr, Srqn, SrqVerbs, VerbsError};

/// GSI CQ: 2^8 CQEs; GSI SQ/RQ: 2^6 WQEBBs / 2^6 WQEs of 32 bytes (data segment + terminator).
const GSI_LOG_CQ: u8 = 8;
const GSI_LOG_SQ: u8 = 6;
const GSI_LOG_RQ: u8 = 6;
/// Most ARP replies `poll` sends per call (the rest are counted in `arp_replies_dropped`; the
/// requester asks again).
const REPLIES_PER_POLL: usize = 16;
/// How often `poll` forgets expired neighbours.
const NEIGH_SWEEP_NS: u64 = 1_000_000_000;

/// An adapter brought up and ready for apps: `Mlx5` plus the GSI QP (in RTS) and its CQ.
pub struct Mlx5Verbs<H: Hal, M: Mmio> {
    pub(crate) dev: Mlx5<H, M>,
    gsi: Qpn,
    gsi_cq: Cqn,
    neigh: NeighTable,
    /// Next time `poll` sweeps expired neighbours.
    next_age_ns: u64,
    /// Errors seen by `poll` (health, EQ); the last one is kept.
    pub last_poll_error: Option<Error>,
    /// Whether the raw Ethernet path (ARP) is up.
    pub raw_eth: bool,
    /// ARP frames sent: requests, replies; replies not sent (more than `REPLIES_PER_POLL`
    /// requests for us in one `poll`, or the send failed).
    pub arp_requests_sent: u64,
    pub arp_replies_sent: u64,
    pub arp_replies_dropped: u64,
    /// Frames for the management stack (`None`: none attached).
    mgmt: Option<FrameTap>,
    /// The management stack answers ARP requests for our address (it serves on it), so
    /// `poll` only lets the neighbour table learn from them.
    mgmt_answers_arp: bool,
    /// Made group QPs left with the device until a CM connects them by number
    /// (`GroupVerbs::park_made_qp`; few, searched on the slow path).
    parked: Vec<crate::GroupQp<H::Dma>>,
}

impl<H: Hal, M: Mmio> Mlx5Verbs<H, M> {
    /// Bring the adapter behind `bar` (BAR0) up to "ready" — the one way to get an adapter apps
    /// can use: the device bring-up ([`Mlx5::bring_up`]: firmware order up to PD, reserved lkey,
    /// RoCE and GID 0), then the GSI CQ and QP1 (in RTS), then the raw Ethernet path for ARP (if
    /// the adapter refuses it, only static neighbours work; see `raw_eth`).
    ///
    /// On failure everything made so far is released by the one cleanup, [`Mlx5::shutdown`]'s
    /// (every object destroyed, TEARDOWN_HCA, every firmware page reclaimed, DISABLE_HCA) before
    /// the error is returned: the pages the firmware owned must not go back to the DMA pool while
    /// the adapter may still use them. The returned error is the setup error; a failing cleanup
    /// is logged. [`Mlx5Verbs::shutdown`] is the same cleanup for a ready adapter.
    pub fn bring_up(hal: H, bar: M, cfg: crate::Config) -> Result<Self, Error> {
        Self::ready(Mlx5::bring_up(hal, bar, cfg)?)
    }

    /// The steps after the device bring-up (see [`Mlx5Verbs::bring_up`]).
    fn ready(mut dev: Mlx5<H, M>) -> Result<Self, Error> {
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
            neigh: NeighTable::new(NeighConfig::default()),
            next_age_ns: 0,
            last_poll_error,
            raw_eth,
            arp_requests_sent: 0,
            arp_replies_sent: 0,
            arp_replies_dropped: 0,
            mgmt: None,
            mgmt_answers_arp: false,
            parked: Vec::new(),
        })
    }

    /// The GSI CQ and QP1, QP1 brought to RTS.
    fn create_gsi(dev: &mut Mlx5<H, M>) -> Result<(Cqn, Qpn), Error> {
        let gsi_cq = dev.create_cq(GSI_LOG_CQ)?;
        let gsi = dev.create_qp(QpKind::Gsi, gsi_cq, gsi_cq, GSI_LOG_SQ, GSI_LOG_RQ, 1)?;
        dev.activate_gsi(gsi)?;
        Ok((gsi_cq, gsi))
    }

    /// Handle received raw frames: ARP goes to the neighbour table, which decides what is
    /// learnt; requests for our address are answered.
    fn poll_arp(&mut self) {
        if !self.raw_eth {
            return;
        }
        let (my_ip, my_mac) = (self.dev.ipv4(), self.dev.mac());
        let now = self.dev.hal().now_ns();
        if now >= self.next_age_ns {
            self.neigh.age(now);
            self.next_age_ns = now.saturating_add(NEIGH_SWEEP_NS);
        }
        let mut answer = [([0u8; 6], [0u8; 4]); REPLIES_PER_POLL];
        let (mut k, mut dropped) = (0, 0u64);
        let neigh = &mut self.neigh;
        let mut mgmt = self.mgmt.as_mut();
        let mgmt_answers = self.mgmt_answers_arp;
        self.dev.poll_frames(|f| {
            if let Some(t) = mgmt.as_deref_mut() {
                t.push(f);
            }
            let Some(a) = arp::parse(f) else { return };
            if neigh.on_arp(&a, my_ip, now) && !mgmt_answers {
                match answer.get_mut(k) {
                    Some(slot) => {
                        *slot = (a.sha, a.spa);
                        k += 1;
                    }
                    None => dropped += 1,
                }
            }
        });
        self.arp_replies_dropped += dropped;
        for &(mac, ip) in answer.iter().take(k) {
            match self.dev.send_frame(&arp::reply(my_mac, my_ip, mac, ip)) {
                Ok(()) => self.arp_replies_sent += 1,
                Err(_) => self.arp_replies_dropped += 1,
            }
        }
    }
}

impl<H: Hal, M: Mmio> Mlx5Verbs<H, M> {
    /// Earliest time `Control::poll` has timer work of its own (the health counter's next
    /// sample, the neighbour table's ageing sweep), for loops that jump a virtual clock over
    /// idle time; `None` once the device failed (nothing runs until it is recovered).
    pub fn next_timer(&self) -> Option<u64> {
        if self.dev.failed().is_some() {
            return None;
        }
        let age = if self.raw_eth { self.next_age_ns } else { u64::MAX };
        Some(self.dev.next_health_sample().unwrap_or(u64::MAX).min(age)).filter(|&t| t != u64::MAX)
    }
}

impl<H: Hal, M: Mmio> Mlx5Verbs<H, M> {
    /// Queue the raw frames (up to `slots` waiting) for a management network stack, which
    /// takes them with [`Mlx5Verbs::mgmt_recv`] and sends with [`Mlx5Verbs::mgmt_send`]. ARP
    /// frames still feed the neighbour table (RoCE resolution); with `answers_arp` (the stack
    /// serves on the adapter's address) only the stack answers requests for it.
    pub fn enable_mgmt_frames(&mut self, slots: usize, answers_arp: bool) {
        self.mgmt = Some(FrameTap::new(slots));
        self.mgmt_answers_arp = answers_arp;
    }

    /// The oldest queued frame for the management stack, copied into `buf`.
    pub fn mgmt_recv(&mut self, buf: &mut [u8]) -> Option<usize> {
        self.mgmt.as_mut()?.pop(buf)
    }

    /// Send a frame for the management stack; false when the raw path is down or full.
    pub fn mgmt_send(&mut self, frame: &[u8]) -> bool {
        self.raw_eth && self.dev.send_frame(frame).is_ok()
    }

    /// Management queue counters: frames queued, dropped (queue full), too long.
    pub fn mgmt_tap_stats(&self) -> Option<(u64, u64, u64)> {
        self.mgmt.as_ref().map(|t| (t.queued, t.dropped, t.too_long))
    }

    /// Record `ip` → `mac` (static neighbour entry: never ages, never changed by ARP; replaces
    /// a learnt one).
    pub fn add_neighbor(&mut self, ip: Ipv4, mac: Mac) -> Result<(), Error> {
        self.neigh.add_static(ip, mac).map_err(|_| Error::InvalidArgument("neighbour table full of static entries"))
    }

    /// Neighbour table counters (learnt, refused updates, evictions, expiries, ...).
    pub fn neigh_stats(&self) -> NeighStats {
        self.neigh.stats()
    }

    /// Neighbour entries held (static included).
    pub fn neigh_len(&self) -> usize {
        self.neigh.len()
    }

    /// Bring a failed device up again ([`Mlx5::recover`]), then the GSI CQ and QP and the raw
    /// Ethernet path as [`Mlx5Verbs::bring_up`] does (neighbour entries are kept).
    pub fn recover(&mut self) -> Result<(), Error> {
        if self.dev.failed().is_none() {
            return Ok(());
        }
        // Released without the adapter (it was reset); new ones after the bring-up.
        let _ = self.dev.destroy_qp(self.gsi);
        let _ = self.dev.destroy_cq(self.gsi_cq);
        let raw_eth = self.raw_eth;
        let mut gsi = (self.gsi_cq, self.gsi);
        let r = self.dev.recover_with(|dev| {
            gsi = Self::create_gsi(dev)?;
            if raw_eth {
                dev.enable_raw_eth()?;
            }
            Ok(())
        });
        (self.gsi_cq, self.gsi) = gsi;
        if r.is_ok() {
            // What poll saw of the failed device is history now.
            self.last_poll_error = None;
        }
        r
    }

    /// Destroy everything and hand the adapter back to firmware control (the one cleanup, as on
    /// a failed [`Mlx5Verbs::bring_up`]).
    pub fn shutdown(self) -> Result<crate::device::Stats, Error> {
        self.dev.shutdown()
    }
}

/// What apps, the management plane and tests read (and refresh) of the adapter: identity, link,
/// health, counters and live objects. The device itself stays private to the driver.
impl<H: Hal, M: Mmio> Mlx5Verbs<H, M> {
    /// Firmware version (from the init segment at bring-up).
    pub fn fw(&self) -> crate::health::FwVersion {
        self.dev.fw
    }
    /// The interface step-sequence ID in use (SET_ISSI).
    pub fn issi(&self) -> u16 {
        self.dev.issi
    }
    /// The capabilities read at bring-up.
    pub fn caps(&self) -> &crate::Caps {
        &self.dev.caps
    }
    /// The port's MTUs (PMTU register, read at bring-up).
    pub fn port_mtu(&self) -> crate::vport::PortMtu {
        self.dev.port_mtu
    }
    /// Link state from the last port-change event or [`Mlx5Verbs::query_link`]; `None` until
    /// one of them told.
    pub fn link_up(&self) -> Option<bool> {
        self.dev.link_up()
    }
    /// Ask the firmware for the vport's operational state (QUERY_VPORT_STATE); true = up.
    pub fn query_link(&mut self) -> Result<bool, Error> {
        self.dev.query_link()
    }
    /// The NIC vport context (MTU, RoCE, local loopback) for the validation kit.
    pub fn query_vport(&mut self) -> Result<crate::VportInfo, Error> {
        self.dev.query_vport()
    }
    /// The health buffer decoded now.
    pub fn health_report(&self) -> crate::HealthReport {
        self.dev.health_report()
    }
    /// Why the device failed, while it is failed (see [`Mlx5Verbs::recover`]).
    pub fn failure(&self) -> Option<Error> {
        self.dev.failed()
    }
    /// Command-interface and page counters.
    pub fn stats(&self) -> crate::Stats {
        self.dev.stats()
    }
    /// Command-interface failures so far (refused by firmware, delivery errors, abandoned).
    pub fn command_errors(&self) -> crate::cmd::CmdErrors {
        self.dev.command_errors()
    }
    /// Pages the firmware holds now.
    pub fn pages_held(&self) -> usize {
        self.dev.pages_held()
    }
    /// QPs live on the adapter (QP1 and those of queue groups included).
    pub fn live_qps(&self) -> usize {
        self.dev.live_qps()
    }
    /// CQs live on the adapter (the GSI CQ and those of queue groups included).
    pub fn live_cqs(&self) -> usize {
        self.dev.live_cqs()
    }
    /// Shared receive queues live (outside queue groups).
    pub fn live_srqs(&self) -> usize {
        self.dev.live_srqs()
    }
    /// Memory keys live.
    pub fn live_mkeys(&self) -> usize {
        self.dev.live_mkeys()
    }
    /// Queue groups live.
    pub fn live_groups(&self) -> usize {
        self.dev.live_groups()
    }
    /// The counts of each queue group slot: those released from it plus, for the groups in
    /// `live` (their owner holds them), theirs. Slow path (a metrics page).
    pub fn group_stats<'a>(&self, live: impl Iterator<Item = &'a crate::QueueGroup<H::Dma, M>>) -> alloc::vec::Vec<crate::GroupStats>
    where
        H::Dma: 'a,
        M: 'a,
    {
        self.dev.group_stats(live)
    }
    /// The queue counters (named totals), as of the last [`Mlx5Verbs::refresh_queue_counters`].
    pub fn queue_counters(&self) -> &[(&'static str, u64)] {
        self.dev.queue_counters()
    }
    /// Read the queue counter set (QUERY_Q_COUNTER) into the totals (slow path).
    pub fn refresh_queue_counters(&mut self) -> Result<(), Error> {
        self.dev.refresh_queue_counters()
    }
    /// Raw Ethernet path counters (`None`: the path is not up).
    pub fn raw_stats(&self) -> Option<crate::RawStats> {
        self.dev.raw_stats()
    }
    /// The reserved lkey local DMA uses.
    pub fn reserved_lkey(&self) -> Lkey {
        self.dev.reserved_lkey()
    }
    /// The UAR page the device's own queues ring on.
    pub fn uar(&self) -> Option<u32> {
        self.dev.uar()
    }
}

/// The device under the verbs, for this crate's own tests only (feature `test-device-access`,
/// enabled by its dev-dependency on itself): fault injection and device-level objects.
#[cfg(feature = "test-device-access")]
impl<H: Hal, M: Mmio> Mlx5Verbs<H, M> {
    pub fn test_device(&mut self) -> &mut Mlx5<H, M> {
        &mut self.dev
    }
}

impl<H: Hal, M: Mmio> VerbsError for Mlx5Verbs<H, M> {
    type Error = Error;
}

impl<H: Hal, M: Mmio> Neighbours for Mlx5Verbs<H, M> {
    fn local_ip(&self) -> Ipv4 {
        self.dev.ipv4()
    }
    fn local_mac(&self) -> Mac {
        self.dev.mac()
    }
    fn resolve_mac(&mut self, ip: Ipv4) -> Option<Mac> {
        let now = self.dev.hal().now_ns();
        let l = self.neigh.lookup(ip, now);
        if l.send_request && self.raw_eth {
            if self.dev.send_frame(&arp::request(self.dev.mac(), self.dev.ipv4(), ip)).is_ok() {
                self.arp_requests_sent += 1;
            }
        }
        l.mac
    }
}

impl<H: Hal, M: Mmio> Control for Mlx5Verbs<H, M> {
    type Buf = H::Dma;

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
    fn alloc_fast_mr(&mut self, max_len: u64) -> Result<Rkey, Error> {
        self.dev.alloc_fast_mr(max_len).map(|m| m.rkey)
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
        if let Some(q) = self.parked.iter_mut().find(|q| q.qpn() == qp) {
            return self.dev.connect_made_qp(q, attrs);
        }
        self.dev.connect_rc(qp, attrs)
    }
    fn qp_to_error(&mut self, qp: Qpn) -> Result<(), Error> {
        // A group's QP, parked or in its group, by number too (a CM flushes a QP whose peer
        // disconnected).
        if let Some(q) = self.parked.iter_mut().find(|q| q.qpn() == qp) {
            return self.dev.made_qp_to_error(q);
        }
        match self.dev.qp_to_error(qp) {
            Err(Error::NoSuchObject { .. }) => self.dev.handed_qp_to_error(qp),
            r => r,
        }
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
    fn poll(&mut self) {
        if self.dev.failed().is_some() {
            return;
        }
        if let Err(e) = self.dev.poll_eq().map(|_| ()).and_then(|_| self.dev.check_health()) {
            self.dev.note_failure(&e);
            self.last_poll_error = Some(e);
        }
        self.poll_arp();
    }
    fn device_failed(&self) -> bool {
        self.dev.failed().is_some()
    }
    fn take_qp_error(&mut self) -> Option<Qpn> {
        use mlx5_ifc::queue::event;
        while let Some(ev) = self.dev.take_event() {
            if matches!(ev.event_type, event::WQ_CATAS_ERROR | event::WQ_INVAL_REQ_ERROR | event::WQ_ACCESS_ERROR | event::PATH_MIG_FAILED) {
                return Some(Qpn(ev.object));
            }
        }
        None
    }
    fn recover_device(&mut self) -> bool {
        if self.dev.failed().is_none() {
            return true;
        }
        match self.recover() {
            Ok(()) => true,
            Err(e) => {
                self.last_poll_error = Some(e);
                false
            }
        }
    }
}

impl<H: Hal, M: Mmio> DataPath for Mlx5Verbs<H, M> {
    fn post_send(&mut self, qp: Qpn, wr: &SendWr) -> Result<(), Error> {
        self.dev.post_send(qp, wr)
    }
    fn post_send_deferred(&mut self, qp: Qpn, wr: &SendWr) -> Result<(), Error> {
        self.dev.post_send_deferred(qp, wr)
    }
    fn post_send_deferred_pair(&mut self, qp: Qpn, first: &SendWr, second: &SendWr) -> Result<(), Error> {
        self.dev.post_send_deferred_pair(qp, first, second)
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
    fn post_srq_recv(&mut self, srq: Srqn, wr: &RecvWr) -> Result<(), Error> {
        self.dev.post_srq_recv(SrqId(srq.0), wr)
    }
    fn post_srq_recv_batch(&mut self, srq: Srqn, wrs: &[RecvWr]) -> Result<(), Error> {
        self.dev.post_srq_recv_batch(SrqId(srq.0), wrs)
    }
    fn poll_cq(&mut self, cq: Cqn, out: &mut [Completion]) -> usize {
        self.dev.poll_cq(cq, out).unwrap_or(0)
    }
}

impl<H: Hal, M: Mmio> SrqVerbs for Mlx5Verbs<H, M> {
    fn create_srq(&mut self, max_wr: u32) -> Result<Srqn, Error> {
        // One WQE of the RMP always stays back.
        let log = log2_ceil(max_wr.saturating_add(1).max(2));
        self.dev.create_srq(log, 0).map(|s| Srqn(s.0))
    }
    fn destroy_srq(&mut self, srq: Srqn) -> Result<(), Error> {
        self.dev.destroy_srq(SrqId(srq.0))
    }
    fn create_rc_qp_srq(&mut self, send_cq: Cqn, recv_cq: Cqn, sq: u32, srq: Srqn) -> Result<Qpn, Error> {
        self.dev.create_qp_srq(send_cq, recv_cq, log2_ceil(sq.max(1)), SrqId(srq.0))
    }
    fn arm_srq(&mut self, srq: Srqn, limit: u32) -> Result<(), Error> {
        let l = u16::try_from(limit).map_err(|_| Error::InvalidArgument("SRQ limit"))?;
        self.dev.arm_srq(SrqId(srq.0), l)
    }
    fn srq_limit_reached(&mut self, srq: Srqn) -> bool {
        self.dev.take_srq_limit(SrqId(srq.0))
    }
}

/// Poll groups on mlx5: each is a [`QueueGroup`](crate::QueueGroup), its own CQ, SRQ, rings and
/// UAR page; its data path is the group object itself.
impl<H: Hal, M: Mmio + Clone> GroupVerbs for Mlx5Verbs<H, M> {
    type Group = crate::QueueGroup<H::Dma, M>;
    type GroupRef = crate::GroupHandle;
    type GroupQp = crate::GroupQp<H::Dma>;
    #[inline]
    fn check_group(g: &mut Self::Group) {
        g.sync();
    }
    fn group_broken(g: &mut Self::Group) -> bool {
        g.sync();
        g.broken()
    }
    fn create_group(&mut self, cq_entries: u32, srq_wrs: u32) -> Result<Self::Group, Error> {
        // One WQE of the RMP always stays back.
        self.dev.create_group(log2_ceil(cq_entries.max(2)), log2_ceil(srq_wrs.saturating_add(1).max(2)))
    }
    fn group_cq(&self, g: &Self::Group) -> Cqn {
        g.cqn()
    }
    fn group_srq(&self, g: &Self::Group) -> Srqn {
        g.srqn()
    }
    fn group_ref(&self, g: &Self::Group) -> crate::GroupHandle {
        g.handle()
    }
    fn make_group_qp(&mut self, g: &crate::GroupHandle, sq: u32) -> Result<Self::GroupQp, Error> {
        self.dev.make_group_qp(g, log2_ceil(sq.max(1)))
    }
    fn made_qpn(q: &Self::GroupQp) -> Qpn {
        q.qpn()
    }
    fn connect_made_qp(&mut self, q: &mut Self::GroupQp, attrs: &RcConnectAttrs) -> Result<(), Error> {
        self.dev.connect_made_qp(q, attrs)
    }
    fn destroy_made_qp(&mut self, q: Self::GroupQp) -> Result<(), Error> {
        self.dev.destroy_made_qp(q)
    }
    fn park_made_qp(&mut self, q: Self::GroupQp) -> Qpn {
        let qpn = q.qpn();
        self.parked.push(q);
        qpn
    }
    fn take_parked_qp(&mut self, qp: Qpn) -> Option<Self::GroupQp> {
        let i = self.parked.iter().position(|q| q.qpn() == qp)?;
        Some(self.parked.swap_remove(i))
    }
    fn attach_group_qp(g: &mut Self::Group, q: Self::GroupQp) -> Result<Qpn, (Error, Self::GroupQp)> {
        g.attach_qp(q)
    }
    fn destroy_handed_qp(&mut self, g: &crate::GroupHandle, qp: Qpn) -> Result<(), Error> {
        self.dev.destroy_handed_qp(g, qp)
    }
    fn detach_group_qp(g: &mut Self::Group, qp: Qpn) -> Result<Self::GroupQp, Error> {
        g.detach_qp(qp)
    }
    fn arm_group_srq(&mut self, g: &crate::GroupHandle, limit: u32) -> Result<(), Error> {
        let l = u16::try_from(limit).map_err(|_| Error::InvalidArgument("SRQ limit"))?;
        self.dev.arm_group_srq(g, l)
    }
    fn group_srq_limit_reached(g: &mut Self::Group) -> bool {
        g.take_srq_limit()
    }
    fn destroy_group(&mut self, g: Self::Group) -> Result<(), Error> {
        self.dev.destroy_group(g)
    }
}
