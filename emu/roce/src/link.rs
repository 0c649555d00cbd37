//! Links: one Ethernet frame per `send`, one per `poll`. In-process pairs with seeded
//! impairments (loss, duplication, reordering, delay), a Unix-datagram link and a UDP link on
//! 127.0.0.1 (the two framings QEMU `-netdev dgram` speaks), and a pcap-writing wrapper.
//! The in-process pair's ends may live on different threads (its queues are behind a mutex,
//! taken once per frame); one thread driving both stays deterministic.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::net::{SocketAddr, UdpSocket};
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

/// Largest frame any link carries (jumbo-safe).
pub const MAX_FRAME: usize = 65536;

/// A point-to-point Ethernet "cable" end.
pub trait Link {
    /// Put one frame on the wire. Never blocks; a link that cannot send now queues or counts a drop.
    fn send(&mut self, frame: &[u8]);
    /// Take one received frame, if any. Never blocks.
    fn poll(&mut self) -> Option<Vec<u8>>;
}

impl<L: Link + ?Sized> Link for Box<L> {
    fn send(&mut self, frame: &[u8]) {
        (**self).send(frame)
    }
    fn poll(&mut self) -> Option<Vec<u8>> {
        (**self).poll()
    }
}

/// Deterministic PRNG (SplitMix64): same seed, same impairments.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);
impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// True with probability `p` (0.0..=1.0).
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
    /// Uniform in 0..n (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
}

/// Impairments of an in-process link, applied per frame and per direction.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Impairments {
    /// Probability a frame is dropped.
    pub loss: f64,
    /// Probability a frame is delivered twice.
    pub duplicate: f64,
    /// Probability a frame is held back by an extra `reorder_delay_ns` (overtaken by later ones).
    pub reorder: f64,
    /// Base one-way delay.
    pub delay_ns: u64,
    /// Uniform random extra delay 0..jitter_ns.
    pub jitter_ns: u64,
    /// Extra delay of reordered frames.
    pub reorder_delay_ns: u64,
}

/// Counters of an in-process link (both directions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemLinkStats {
    pub sent: u64,
    pub delivered: u64,
    pub dropped: u64,
    pub duplicated: u64,
    pub reordered: u64,
}

#[derive(Debug)]
struct InFlight {
    deliver_at: u64,
    seq: u64,
    frame: Vec<u8>,
}

#[derive(Debug)]
struct Shared {
    now_ns: u64,
    rng: SplitMix64,
    imp: Impairments,
    seq: u64,
    /// queues[i] holds frames travelling towards end i.
    queues: [Vec<InFlight>; 2],
    stats: MemLinkStats,
}

/// One end of an in-process link. Time comes from [`MemLink::set_now`] (shared by both ends),
/// so delays are deterministic; with zero delay frames are visible at once.
#[derive(Debug)]
pub struct MemLink {
    side: usize,
    shared: Arc<Mutex<Shared>>,
}

impl MemLink {
    /// Two connected ends with the same impairments in both directions.
    pub fn pair(imp: Impairments, seed: u64) -> (MemLink, MemLink) {
        let shared = Arc::new(Mutex::new(Shared {
            now_ns: 0,
            rng: SplitMix64::new(seed),
            imp,
            seq: 0,
            queues: [Vec::new(), Vec::new()],
            stats: MemLinkStats::default(),
        }));
        (MemLink { side: 0, shared: shared.clone() }, MemLink { side: 1, shared })
    }
    /// Both directions' state, for one frame or query. A thread that panicked holding it left
    /// it whole (no update under it can panic halfway), so the poison is ignored.
    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// Advance the link clock (either end; shared).
    pub fn set_now(&self, now_ns: u64) {
        self.lock().now_ns = now_ns;
    }
    /// Another handle on this end (the same frames in flight): a test keeps it to change the
    /// impairments of a link it handed to a node.
    pub fn handle(&self) -> MemLink {
        MemLink { side: self.side, shared: self.shared.clone() }
    }
    /// Change impairments (e.g. stop loss to drain).
    pub fn set_impairments(&self, imp: Impairments) {
        self.lock().imp = imp;
    }
    pub fn stats(&self) -> MemLinkStats {
        self.lock().stats
    }
    /// Frames in flight in both directions.
    pub fn in_flight(&self) -> usize {
        let s = self.lock();
        s.queues[0].len() + s.queues[1].len()
    }
    /// Earliest delivery time of a frame in flight (for event-driven test loops).
    pub fn next_delivery(&self) -> Option<u64> {
        let s = self.lock();
        s.queues.iter().flat_map(|q| q.iter().map(|f| f.deliver_at)).min()
    }
}

impl Link for MemLink {
    fn send(&mut self, frame: &[u8]) {
        let mut s = self.lock();
        let s = &mut *s;
        s.stats.sent += 1;
        let imp = s.imp;
        if s.rng.chance(imp.loss) {
            s.stats.dropped += 1;
            return;
        }
        let copies = if s.rng.chance(imp.duplicate) {
            s.stats.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut at = s.now_ns + imp.delay_ns + s.rng.below(imp.jitter_ns);
            if s.rng.chance(imp.reorder) {
                s.stats.reordered += 1;
                at += imp.reorder_delay_ns.max(1);
            }
            s.seq += 1;
            let seq = s.seq;
            s.queues[1 - self.side].push(InFlight { deliver_at: at, seq, frame: frame.to_vec() });
        }
    }

    fn poll(&mut self) -> Option<Vec<u8>> {
        let mut s = self.lock();
        let now = s.now_ns;
        let q = &mut s.queues[self.side];
        let mut best: Option<usize> = None;
        for (i, f) in q.iter().enumerate() {
            if f.deliver_at <= now {
                match best {
                    Some(b) if (q[b].deliver_at, q[b].seq) <= (f.deliver_at, f.seq) => {}
                    _ => best = Some(i),
                }
            }
        }
        let f = q.remove(best?);
        s.stats.delivered += 1;
        Some(f.frame)
    }
}

/// Counters of a socket link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SockStats {
    pub sent: u64,
    pub received: u64,
    /// Frames dropped because the peer was absent or an error other than "would block" occurred.
    pub send_errors: u64,
    /// Frames that had to wait in the backlog because the peer's socket was full.
    pub backlogged: u64,
}

/// Bounded backlog of a datagram socket link (frames waiting for the peer to drain).
const BACKLOG_MAX: usize = 65536;

/// One Ethernet frame per datagram over an AF_UNIX datagram socket (QEMU
/// `-netdev dgram,local.type=unix,...`). A full peer returns EAGAIN: frames wait in a backlog
/// (lossless back-pressure); a missing peer drops and counts.
#[derive(Debug)]
pub struct UnixDgramLink {
    sock: UnixDatagram,
    backlog: VecDeque<Vec<u8>>,
    buf: Vec<u8>,
    remote: std::path::PathBuf,
    pub stats: SockStats,
}

impl UnixDgramLink {
    /// Bind `local` (removing a stale socket file) and send to `remote` (addressed per
    /// datagram, so the peer may appear later).
    pub fn new(local: &Path, remote: &Path) -> io::Result<Self> {
        let _ = std::fs::remove_file(local);
        let sock = UnixDatagram::bind(local)?;
        sock.set_nonblocking(true)?;
        Ok(UnixDgramLink {
            sock,
            backlog: VecDeque::new(),
            buf: vec![0; MAX_FRAME],
            stats: SockStats::default(),
            remote: remote.to_path_buf(),
        })
    }
    /// Retry sending backlogged frames (also done by every `send` and `poll`).
    pub fn flush(&mut self) {
        while let Some(f) = self.backlog.front() {
            match self.sock.send_to(f, &self.remote) {
                Ok(_) => {
                    self.stats.sent += 1;
                    self.backlog.pop_front();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.raw_os_error() == Some(105) => return,
                Err(_) => {
                    self.stats.send_errors += 1;
                    self.backlog.pop_front();
                }
            }
        }
    }
    /// Frames waiting for the peer.
    pub fn backlog(&self) -> usize {
        self.backlog.len()
    }
}

impl Link for UnixDgramLink {
    fn send(&mut self, frame: &[u8]) {
        self.flush();
        if !self.backlog.is_empty() {
            if self.backlog.len() < BACKLOG_MAX {
                self.stats.backlogged += 1;
                self.backlog.push_back(frame.to_vec());
            } else {
                self.stats.send_errors += 1;
            }
            return;
        }
        match self.sock.send_to(frame, &self.remote) {
            Ok(_) => self.stats.sent += 1,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.raw_os_error() == Some(105) => {
                self.stats.backlogged += 1;
                self.backlog.push_back(frame.to_vec());
            }
            Err(_) => self.stats.send_errors += 1,
        }
    }
    fn poll(&mut self) -> Option<Vec<u8>> {
        self.flush();
        match self.sock.recv(&mut self.buf) {
            Ok(n) => {
                self.stats.received += 1;
                Some(self.buf[..n].to_vec())
            }
            Err(_) => None,
        }
    }
}

/// One Ethernet frame per UDP datagram, 127.0.0.1 only (QEMU `-netdev dgram,local.type=inet`).
/// UDP on loopback drops frames when the receiver is slow; prefer [`UnixDgramLink`].
#[derive(Debug)]
pub struct UdpLink {
    sock: UdpSocket,
    remote: SocketAddr,
    buf: Vec<u8>,
    pub stats: SockStats,
}

impl UdpLink {
    /// Bind 127.0.0.1:`local_port` (0 = any) and send to 127.0.0.1:`remote_port`.
    pub fn new(local_port: u16, remote_port: u16) -> io::Result<Self> {
        let sock = UdpSocket::bind(("127.0.0.1", local_port))?;
        sock.set_nonblocking(true)?;
        let remote = SocketAddr::from(([127, 0, 0, 1], remote_port));
        Ok(UdpLink { sock, remote, buf: vec![0; MAX_FRAME], stats: SockStats::default() })
    }
    /// Change the peer port (127.0.0.1 only).
    pub fn set_remote_port(&mut self, port: u16) {
        self.remote = SocketAddr::from(([127, 0, 0, 1], port));
    }
    /// The bound local port.
    pub fn local_port(&self) -> io::Result<u16> {
        Ok(self.sock.local_addr()?.port())
    }
}

impl Link for UdpLink {
    fn send(&mut self, frame: &[u8]) {
        match self.sock.send_to(frame, self.remote) {
            Ok(_) => self.stats.sent += 1,
            Err(_) => self.stats.send_errors += 1,
        }
    }
    fn poll(&mut self) -> Option<Vec<u8>> {
        loop {
            match self.sock.recv_from(&mut self.buf) {
                Ok((n, from)) => {
                    // Only the configured loopback peer may talk to us.
                    if !from.ip().is_loopback() {
                        continue;
                    }
                    self.stats.received += 1;
                    return Some(self.buf[..n].to_vec());
                }
                Err(_) => return None,
            }
        }
    }
}

/// Writes classic pcap (LINKTYPE_ETHERNET) records.
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    out: W,
}

impl<W: Write> PcapWriter<W> {
    /// Write the global header.
    pub fn new(mut out: W) -> io::Result<Self> {
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&4u16.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&(MAX_FRAME as u32).to_le_bytes());
        h.extend_from_slice(&1u32.to_le_bytes());
        out.write_all(&h)?;
        Ok(PcapWriter { out })
    }
    /// Append one frame with a timestamp in nanoseconds.
    pub fn write(&mut self, ts_ns: u64, frame: &[u8]) -> io::Result<()> {
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&((ts_ns / 1_000_000_000) as u32).to_le_bytes());
        h[4..8].copy_from_slice(&(((ts_ns / 1000) % 1_000_000) as u32).to_le_bytes());
        h[8..12].copy_from_slice(&(frame.len() as u32).to_le_bytes());
        h[12..16].copy_from_slice(&(frame.len() as u32).to_le_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(frame)
    }
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// A link wrapper that records every frame sent and received into a pcap file.
/// Timestamps are wall-clock (captures are for humans and tshark, not for determinism).
pub struct PcapLink<L: Link, W: Write> {
    pub inner: L,
    pcap: PcapWriter<W>,
    start: std::time::Instant,
    /// Write errors (the capture is best-effort; the link keeps working).
    pub errors: u64,
}

impl<L: Link, W: Write> PcapLink<L, W> {
    pub fn new(inner: L, out: W) -> io::Result<Self> {
        Ok(PcapLink { inner, pcap: PcapWriter::new(out)?, start: std::time::Instant::now(), errors: 0 })
    }
    fn record(&mut self, frame: &[u8]) {
        let ts = self.start.elapsed().as_nanos() as u64;
        if self.pcap.write(ts, frame).is_err() {
            self.errors += 1;
        }
    }
    pub fn flush(&mut self) -> io::Result<()> {
        self.pcap.flush()
    }
}

impl<L: Link, W: Write> Link for PcapLink<L, W> {
    fn send(&mut self, frame: &[u8]) {
        self.record(frame);
        self.inner.send(frame)
    }
    fn poll(&mut self) -> Option<Vec<u8>> {
        let f = self.inner.poll()?;
        self.record(&f);
        Some(f)
    }
}
