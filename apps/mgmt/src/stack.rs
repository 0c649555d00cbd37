//! stack: the management interface. One smoltcp `Interface` (Ethernet, IPv4: ARP with ageing
//! in smoltcp's bounded neighbour cache, ICMP echo answered by the interface itself, TCP) on a
//! [`RingDevice`], and the HTTP server; [`Mgmt::poll`] is one bounded turn of it.

use smoltcp::iface::{Config, Interface, SocketSet};
use smoltcp::time::Instant;
use smoltcp::wire::{EthernetAddress, IpAddress, IpCidr};

use crate::config::MgmtConfig;
use crate::device::RingDevice;
use crate::http::{self, HttpStats, Render, Server};
pub use crate::http::{Answer, Page, Rendered};
use crate::port::FramePort;

/// Work allowed per [`Mgmt::poll`] turn: frames taken from the port, frames given to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub rx_frames: usize,
    pub tx_frames: usize,
    /// With no frame in and no timer due, the stack is looked at no more often than this.
    pub idle_ns: u64,
}

impl Default for Budget {
    fn default() -> Self {
        Budget { rx_frames: 8, tx_frames: 16, idle_ns: 1_000_000 }
    }
}

/// Largest received frame kept (a standard Ethernet frame without FCS).
pub const RX_FRAME_MAX: usize = 1514;

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MgmtStats {
    pub rx_frames: u64,
    pub tx_frames: u64,
    /// Frames the port refused (its queue full); the protocols retry.
    pub tx_dropped: u64,
    /// Turns that ran the stack (the rest found nothing to do).
    pub turns: u64,
    pub http: HttpStats,
}

/// The management stack.
pub struct Mgmt {
    iface: Interface,
    dev: RingDevice,
    sockets: SocketSet<'static>,
    http: Server,
    budget: Budget,
    ip: [u8; 4],
    next_ns: u64,
    stats: MgmtStats,
}

fn instant(ns: u64) -> Instant {
    Instant::from_micros(i64::try_from(ns / 1000).unwrap_or(i64::MAX))
}

impl Mgmt {
    /// A stack answering on `cfg.ip` (or `adapter_ip`) with `mac`, sending frames of at most
    /// `max_frame` bytes; `seed` varies TCP initial sequence numbers and ports.
    pub fn new(cfg: &MgmtConfig, adapter_ip: [u8; 4], mac: [u8; 6], max_frame: usize, budget: Budget, seed: u64, now_ns: u64) -> Mgmt {
        let ip = cfg.ip.unwrap_or(adapter_ip);
        // The stack's own MTU is the port's largest frame: TCP's MSS follows from it.
        let mut dev = RingDevice::new(budget.rx_frames.max(1), budget.tx_frames.max(1), RX_FRAME_MAX, max_frame);
        let mut c = Config::new(EthernetAddress(mac).into());
        c.random_seed = seed;
        let mut iface = Interface::new(c, &mut dev, instant(now_ns));
        iface.update_ip_addrs(|a| {
            let _ = a.push(IpCidr::new(IpAddress::v4(ip[0], ip[1], ip[2], ip[3]), cfg.prefix));
        });
        let mut sockets = SocketSet::new(alloc::vec::Vec::with_capacity(http::SOCKETS));
        let http = Server::new(&mut sockets, cfg.port, cfg.control);
        log::info!("mgmt: {}.{}.{}.{}/{} port {} (ping, http://.../metrics, /, /ports/P/subsystems{})", ip[0], ip[1], ip[2], ip[3], cfg.prefix, cfg.port, if cfg.control { "; PUT/DELETE of a link: mgmt.control=on" } else { "" });
        Mgmt { iface, dev, sockets, http, budget, ip, next_ns: 0, stats: MgmtStats::default() }
    }

    pub fn ip(&self) -> [u8; 4] {
        self.ip
    }

    pub fn port(&self) -> u16 {
        self.http.port()
    }

    pub fn stats(&self) -> MgmtStats {
        MgmtStats { http: self.http.stats, ..self.stats }
    }

    /// HTTP connections open now.
    pub fn open_connections(&self) -> usize {
        self.http.open()
    }

    /// One turn: [`Mgmt::take_frames`], [`Mgmt::run`], [`Mgmt::give_frames`]. Returns the
    /// frames moved (0: nothing to do).
    pub fn poll(&mut self, now_ns: u64, port: &mut dyn FramePort, render: &mut Render<'_>) -> usize {
        let rx = self.take_frames(port);
        self.run(now_ns, render);
        rx + self.give_frames(port)
    }

    /// Take up to `budget.rx_frames` frames from `port` (the three steps are separate so the
    /// page renderer may read the port's owner between them).
    pub fn take_frames(&mut self, port: &mut dyn FramePort) -> usize {
        let mut rx = 0;
        while rx < self.budget.rx_frames {
            let Some(slot) = self.dev.rx.free_slot() else { break };
            let Some(n) = port.recv_frame(slot) else { break };
            self.dev.rx.commit(n);
            rx += 1;
        }
        self.stats.rx_frames += rx as u64;
        rx
    }

    /// Run the interface and the HTTP server (pages written by `render`) if frames wait or a
    /// timer is due; false when there was nothing to do.
    pub fn run(&mut self, now_ns: u64, render: &mut Render<'_>) -> bool {
        if self.dev.rx.is_empty() && self.dev.tx.is_empty() && now_ns < self.next_ns {
            return false;
        }
        self.stats.turns += 1;
        let now = instant(now_ns);
        self.iface.poll(now, &mut self.dev, &mut self.sockets);
        if self.http.service(&mut self.sockets, now_ns, render) {
            self.iface.poll(now, &mut self.dev, &mut self.sockets);
        }
        let idle = now_ns.saturating_add(self.budget.idle_ns);
        self.next_ns = match self.iface.poll_at(now, &self.sockets) {
            Some(t) => (u64::try_from(t.total_micros()).unwrap_or(0).saturating_mul(1000)).min(idle),
            None => idle,
        };
        true
    }

    /// Give up to `budget.tx_frames` frames the stack produced to `port`.
    pub fn give_frames(&mut self, port: &mut dyn FramePort) -> usize {
        let mut tx = 0;
        while tx < self.budget.tx_frames {
            let Some(sent) = self.dev.tx.pop_with(|f| port.send_frame(f)) else { break };
            tx += 1;
            if sent {
                self.stats.tx_frames += 1;
            } else {
                self.stats.tx_dropped += 1;
            }
        }
        tx
    }
}
