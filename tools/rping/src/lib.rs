//! rping-compatible client and server over `rdma::Verbs` + `rdma::cm` (poll-driven, no_std).
//!
//! Protocol facts (rdma-core librdmacm/examples/rping.c): each side advertises a buffer with a
//! 16-byte SEND `rping_rdma_info` {buf: be64, rkey: be32, size: be32}; a receive of any other
//! length is an error ("bogus data"). One iteration:
//! client SEND(start_buf info) → server RDMA READ of it into its rdma_buf → server SEND (go
//! ahead) → client SEND(rdma_buf info) → server RDMA WRITE of its rdma_buf there → server SEND
//! (go ahead) → client compares start_buf with rdma_buf (`-v`). The client's start_buf holds
//! "rdma-ping-%d: " followed by ASCII 'A'..='z' cycling from a start letter that advances per
//! ping, last byte 0. The client disconnects after `count` pings.
#![no_std]
#![forbid(unsafe_code)]

use hal::DmaRegion;
use rdma::cm::{AcceptParams, Cm, CmConfig, CmError, CmEvent, ConnId, ConnectParams};
use rdma::{Access, Completion, Lkey, Qpn, RecvWr, Rkey, SendOp, SendWr, Sge, Verbs, WcOpcode, WcStatus};

/// rping's default port.
pub const DEFAULT_PORT: u16 = 7174;
/// Size of `rping_rdma_info` on the wire.
pub const INFO_LEN: usize = 16;
/// Largest buffer this implementation serves (per direction).
pub const MAX_SIZE: u32 = 64 * 1024;
/// Smallest buffer rping accepts (RPING_MIN_BUFSIZE: room for the "rdma-ping-%d: " prefix).
pub const MIN_SIZE: u32 = 24;

/// `rping_rdma_info`, declared once as a field table (offset, width), big-endian.
mod info {
    pub const BUF: (usize, usize) = (0, 8);
    pub const RKEY: (usize, usize) = (8, 4);
    pub const SIZE: (usize, usize) = (12, 4);
    const _: () = assert!(SIZE.0 + SIZE.1 == super::INFO_LEN);
}

/// Buffer layout inside the one registered region.
const RECV_OFF: usize = 0;
const SEND_OFF: usize = 64;
const RDMA_OFF: usize = 4096;
const START_OFF: usize = RDMA_OFF + MAX_SIZE as usize;
const REGION_LEN: usize = START_OFF + MAX_SIZE as usize;

const WR_RECV: u64 = 1;
const WR_SEND: u64 = 2;
const WR_READ: u64 = 3;
const WR_WRITE: u64 = 4;

/// Which side and what to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Listen on `port`; serve one client.
    Server { port: u16 },
    /// Connect to `ip:port`.
    Client { ip: rdma::Ipv4, port: u16 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    pub role: Role,
    /// Pings (client: how many to send; server: at least this many to pass, 0 = any).
    pub count: u32,
    /// Buffer size (client: what it advertises; server: largest it accepts).
    pub size: u32,
    /// Client: compare start_buf with rdma_buf after each ping (rping `-v`).
    pub verify: bool,
}

/// Errors (carry the raw detail).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error<E> {
    Verbs(E),
    Cm(CmError<E>),
    BadSize(u32),
    /// A receive that is not a 16-byte rping_rdma_info.
    BogusRecv { byte_len: u32 },
    /// The peer advertised more than our buffer.
    TooLong { advertised: u32, max: u32 },
    /// A completion with an error status.
    Completion { wr_id: u64, status: WcStatus, vendor_err: u8 },
    /// `-v` found different data at this ping.
    Mismatch { ping: u32, offset: usize },
    /// The peer went away (or never answered) before the pings were done.
    Disconnected { pings: u32 },
    Rejected { reason: u16 },
    Unreachable,
    /// A second client while one is served.
    Busy,
}

impl<E> From<CmError<E>> for Error<E> {
    fn from(e: CmError<E>) -> Self {
        Error::Cm(e)
    }
}

/// What `poll` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Running,
    /// All pings done (and verified with `verify`), connection closed.
    Done { pings: u32 },
    /// See [`Rping::error`].
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Idle,
    Connecting,
    /// Server: waiting for the client's source advert. Client: not used.
    Connected,
    /// Client: start_buf advertised, waiting for go-ahead. Server: READ posted.
    ReadAdv,
    /// Server: READ done, go-ahead sent, waiting for the sink advert.
    WaitWriteAdv,
    /// Client: rdma_buf advertised, waiting for go-ahead. Server: WRITE posted.
    WriteAdv,
    Disconnecting,
    Finished,
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub pings: u32,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub verified: u32,
    pub send_completions: u64,
}

/// One rping endpoint.
pub struct Rping<V: Verbs> {
    cfg: Config,
    cm: Cm<V>,
    buf: V::Buf,
    lkey: Lkey,
    rkey: Rkey,
    cq: rdma::Cqn,
    conn: Option<(ConnId, Qpn)>,
    state: State,
    /// Client: letter the next ping's pattern starts with.
    start: u8,
    remote: (u64, Rkey, u32),
    stats: Stats,
    result: Option<Status>,
    error: Option<Error<V::Error>>,
}

impl<V: Verbs> Rping<V> {
    pub fn new(v: &mut V, cm_cfg: CmConfig, cfg: Config) -> Result<Self, Error<V::Error>> {
        if cfg.size < MIN_SIZE || cfg.size > MAX_SIZE {
            return Err(Error::BadSize(cfg.size));
        }
        let mut cm = Cm::new(v, cm_cfg)?;
        let buf = v.alloc_buf(REGION_LEN).map_err(Error::Verbs)?;
        // Only the client's buffer is reached by the peer (the server RDMA READs the client's
        // start_buf and RDMA WRITEs its rdma_buf); the server's stays local.
        let client = matches!(cfg.role, Role::Client { .. });
        let access = Access { local_write: true, remote_read: client, remote_write: client };
        let (lkey, rkey) = v.reg_mr(buf.paddr(), REGION_LEN as u64, access).map_err(Error::Verbs)?;
        let cq = v.create_cq(64).map_err(Error::Verbs)?;
        let mut state = State::Idle;
        if let Role::Server { port } = cfg.role {
            cm.listen(port)?;
            log::info!("rping: listening on port {port}");
        } else {
            state = State::Connecting;
        }
        let mut r = Rping { cfg, cm, buf, lkey, rkey, cq, conn: None, state, start: b'A', remote: (0, Rkey(0), 0), stats: Stats::default(), result: None, error: None };
        if let Role::Client { ip, port } = cfg.role {
            r.connect(v, ip, port)?;
        }
        Ok(r)
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }
    /// Why it failed (after `Status::Failed`).
    pub fn error(&self) -> Option<&Error<V::Error>> {
        self.error.as_ref()
    }
    pub fn cm(&self) -> &Cm<V> {
        &self.cm
    }

    fn recv_wr(&self) -> RecvWr {
        RecvWr { wr_id: WR_RECV, sge: Sge { addr: self.buf.paddr() + RECV_OFF as u64, len: INFO_LEN as u32, lkey: self.lkey } }
    }

    fn connect(&mut self, v: &mut V, ip: rdma::Ipv4, port: u16) -> Result<(), Error<V::Error>> {
        let recvs = [self.recv_wr()];
        let p = ConnectParams {
            dest_ip: ip,
            dest_port: port,
            src_port: 0,
            send_cq: self.cq,
            recv_cq: self.cq,
            sq_size: 16,
            rq_size: 16,
            recv_wrs: &recvs,
            private_data: &[],
            responder_resources: 1,
            initiator_depth: 1,
            access: Access { local_write: true, remote_read: true, remote_write: true },
        };
        let id = self.cm.connect(v, &p)?;
        let qpn = self.cm.qpn(id).unwrap_or_default();
        self.conn = Some((id, qpn));
        log::info!("rping: connecting to {}.{}.{}.{}:{port}", ip[0], ip[1], ip[2], ip[3]);
        Ok(())
    }

    /// Write an rping_rdma_info into the send buffer and SEND it.
    fn send_info(&mut self, v: &mut V, off: usize, size: u32) -> Result<(), Error<V::Error>> {
        let mut m = [0u8; INFO_LEN];
        m[info::BUF.0..info::BUF.0 + info::BUF.1].copy_from_slice(&(self.buf.paddr() + off as u64).to_be_bytes());
        m[info::RKEY.0..info::RKEY.0 + info::RKEY.1].copy_from_slice(&self.rkey.0.to_be_bytes());
        m[info::SIZE.0..info::SIZE.0 + info::SIZE.1].copy_from_slice(&size.to_be_bytes());
        self.buf.write(SEND_OFF, &m);
        let sge = Sge { addr: self.buf.paddr() + SEND_OFF as u64, len: INFO_LEN as u32, lkey: self.lkey };
        let qp = self.qpn();
        v.post_send(qp, &SendWr { wr_id: WR_SEND, op: SendOp::Send, sge, signaled: true, fence: false, ud: None }).map_err(Error::Verbs)
    }

    fn qpn(&self) -> Qpn {
        self.conn.map(|c| c.1).unwrap_or_default()
    }

    /// The client's pattern for ping `n` into start_buf (rping.c's layout).
    fn fill_start(&mut self, n: u32) {
        let buf = &self.buf;
        self.start = write_pattern(n, self.start, self.cfg.size as usize, |off, b| buf.write(START_OFF + off, b));
    }

    fn client_ping(&mut self, v: &mut V) -> Result<(), Error<V::Error>> {
        let n = self.stats.pings;
        self.fill_start(n);
        // Clear the sink so a missing WRITE cannot pass verification.
        let zero = [0u8; 256];
        let mut i = 0;
        while i < self.cfg.size as usize {
            let k = (self.cfg.size as usize - i).min(zero.len());
            self.buf.write(RDMA_OFF + i, &zero[..k]);
            i += k;
        }
        self.state = State::ReadAdv;
        self.send_info(v, START_OFF, self.cfg.size)
    }

    fn verify(&mut self) -> Result<(), Error<V::Error>> {
        let (mut a, mut b) = ([0u8; 256], [0u8; 256]);
        let mut i = 0;
        let size = self.cfg.size as usize;
        while i < size {
            let k = (size - i).min(a.len());
            self.buf.read(START_OFF + i, &mut a[..k]);
            self.buf.read(RDMA_OFF + i, &mut b[..k]);
            if let Some(j) = (0..k).find(|&j| a[j] != b[j]) {
                return Err(Error::Mismatch { ping: self.stats.pings, offset: i + j });
            }
            i += k;
        }
        self.stats.verified += 1;
        Ok(())
    }

    /// Run one step: CM events and completions. Call with the device's poll in the same loop.
    pub fn poll(&mut self, v: &mut V, now_ns: u64) -> Status {
        if let Some(r) = self.result {
            return r;
        }
        match self.step(v, now_ns) {
            Ok(()) => Status::Running,
            Err(e) => {
                log::warn!("rping: failed: {e:?} after {} pings", self.stats.pings);
                if let (Some((id, _)), false) = (self.conn, matches!(e, Error::Disconnected { .. } | Error::Rejected { .. } | Error::Unreachable)) {
                    let _ = self.cm.disconnect(v, id);
                }
                self.error = Some(e);
                self.result = Some(Status::Failed);
                Status::Failed
            }
        }
    }

    fn step(&mut self, v: &mut V, now_ns: u64) -> Result<(), Error<V::Error>> {
        while let Some(ev) = self.cm.poll(v, now_ns) {
            self.on_cm(v, ev)?;
            if self.result.is_some() {
                return Ok(());
            }
        }
        let mut wc = [Completion::default(); 16];
        loop {
            let n = v.poll_cq(self.cq, &mut wc);
            for c in &wc[..n] {
                self.on_wc(v, c)?;
            }
            if n < wc.len() {
                break;
            }
        }
        Ok(())
    }

    fn on_cm(&mut self, v: &mut V, ev: CmEvent) -> Result<(), Error<V::Error>> {
        match ev {
            CmEvent::ConnectRequest(r) => {
                if self.conn.is_some() || !matches!(self.cfg.role, Role::Server { .. }) {
                    let _ = self.cm.reject(v, r.id, rdma::cm_wire::rej_reason::CONSUMER_DEFINED, &[]);
                    log::warn!("rping: refused a second connection");
                    return Ok(());
                }
                let recvs = [self.recv_wr()];
                let a = AcceptParams {
                    send_cq: self.cq,
                    recv_cq: self.cq,
                    sq_size: 16,
                    rq_size: 16,
                    recv_wrs: &recvs,
                    private_data: &[],
                    responder_resources: 1,
                    initiator_depth: 1,
                    // The server only issues RDMA READ/WRITE; its QP accepts none.
                    access: Access { local_write: true, remote_read: false, remote_write: false },
                };
                let qpn = self.cm.accept(v, r.id, &a)?;
                self.conn = Some((r.id, qpn));
                self.state = State::Connecting;
                log::info!("rping: accepted {}.{}.{}.{}:{}", r.peer_ip[0], r.peer_ip[1], r.peer_ip[2], r.peer_ip[3], r.peer_port);
            }
            CmEvent::Established { id, qpn, .. } if self.conn.map(|c| c.0) == Some(id) => {
                self.conn = Some((id, qpn));
                log::info!("rping: connected, qpn {qpn}");
                if self.state == State::Connecting {
                    self.state = State::Connected;
                }
                if matches!(self.cfg.role, Role::Client { .. }) {
                    if self.cfg.count == 0 {
                        return self.finish(v);
                    }
                    self.client_ping(v)?;
                }
            }
            CmEvent::Rejected { id, reason, .. } if self.conn.map(|c| c.0) == Some(id) => return Err(Error::Rejected { reason }),
            CmEvent::Unreachable { id } if self.conn.map(|c| c.0) == Some(id) => return Err(Error::Unreachable),
            CmEvent::Disconnected { id } if self.conn.map(|c| c.0) == Some(id) => {
                let pings = self.stats.pings;
                log::info!("rping: disconnected after {pings} pings");
                self.conn = None;
                let done = match self.cfg.role {
                    Role::Client { .. } => self.state == State::Disconnecting,
                    Role::Server { .. } => pings >= self.cfg.count && matches!(self.state, State::Connected),
                };
                self.state = State::Finished;
                if done {
                    self.result = Some(Status::Done { pings });
                } else {
                    log::warn!("rping: peer left after {pings} pings");
                    self.error = Some(Error::Disconnected { pings });
                    self.result = Some(Status::Failed);
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn finish(&mut self, v: &mut V) -> Result<(), Error<V::Error>> {
        self.state = State::Disconnecting;
        if let Some((id, _)) = self.conn {
            self.cm.disconnect(v, id)?;
        }
        Ok(())
    }

    fn on_wc(&mut self, v: &mut V, c: &Completion) -> Result<(), Error<V::Error>> {
        if c.status != WcStatus::Success {
            if c.status == WcStatus::WrFlushed {
                return Ok(());
            }
            return Err(Error::Completion { wr_id: c.wr_id, status: c.status, vendor_err: c.vendor_err });
        }
        match (c.wr_id, c.opcode) {
            (WR_SEND, _) => self.stats.send_completions += 1,
            (WR_RECV, WcOpcode::Recv) => {
                if c.byte_len as usize != INFO_LEN {
                    return Err(Error::BogusRecv { byte_len: c.byte_len });
                }
                if let (Some((id, _)), State::Connecting) = (self.conn, self.state) {
                    // Data before the RTU: the connection is up (Linux COMM_EST).
                    self.cm.notify_comm_est(id);
                    self.state = State::Connected;
                }
                let mut m = [0u8; INFO_LEN];
                self.buf.read(RECV_OFF, &mut m);
                let qp = self.qpn();
                let r = self.recv_wr();
                v.post_recv(qp, &r).map_err(Error::Verbs)?;
                match self.cfg.role {
                    Role::Server { .. } => self.server_recv(v, &m)?,
                    Role::Client { .. } => self.client_recv(v)?,
                }
            }
            (WR_READ, _) => {
                self.stats.bytes_read += u64::from(self.remote.2);
                // Tell the client to continue.
                self.state = State::WaitWriteAdv;
                self.send_info(v, RDMA_OFF, self.cfg.size)?;
            }
            (WR_WRITE, _) => {
                self.stats.bytes_written += u64::from(self.remote.2);
                self.stats.pings += 1;
                self.state = State::Connected;
                self.send_info(v, RDMA_OFF, self.cfg.size)?;
            }
            _ => {}
        }
        Ok(())
    }

    fn server_recv(&mut self, v: &mut V, m: &[u8; INFO_LEN]) -> Result<(), Error<V::Error>> {
        let mut b8 = [0u8; 8];
        b8.copy_from_slice(&m[info::BUF.0..info::BUF.0 + info::BUF.1]);
        let mut b4 = [0u8; 4];
        b4.copy_from_slice(&m[info::RKEY.0..info::RKEY.0 + info::RKEY.1]);
        let rkey = Rkey(u32::from_be_bytes(b4));
        b4.copy_from_slice(&m[info::SIZE.0..info::SIZE.0 + info::SIZE.1]);
        let size = u32::from_be_bytes(b4);
        if size > self.cfg.size {
            return Err(Error::TooLong { advertised: size, max: self.cfg.size });
        }
        self.remote = (u64::from_be_bytes(b8), rkey, size);
        let sge = Sge { addr: self.buf.paddr() + RDMA_OFF as u64, len: size, lkey: self.lkey };
        let qp = self.qpn();
        let (wr_id, op) = match self.state {
            State::Connected | State::Connecting => {
                self.state = State::ReadAdv;
                (WR_READ, SendOp::RdmaRead { remote_addr: self.remote.0, rkey })
            }
            State::WaitWriteAdv => {
                self.state = State::WriteAdv;
                (WR_WRITE, SendOp::RdmaWrite { remote_addr: self.remote.0, rkey })
            }
            // An advert while a READ/WRITE is outstanding: protocol violation.
            _ => return Err(Error::BogusRecv { byte_len: INFO_LEN as u32 }),
        };
        v.post_send(qp, &SendWr { wr_id, op, sge, signaled: true, fence: false, ud: None }).map_err(Error::Verbs)
    }

    fn client_recv(&mut self, v: &mut V) -> Result<(), Error<V::Error>> {
        match self.state {
            State::ReadAdv => {
                self.state = State::WriteAdv;
                self.send_info(v, RDMA_OFF, self.cfg.size)
            }
            State::WriteAdv => {
                if self.cfg.verify {
                    self.verify()?;
                }
                self.stats.pings += 1;
                if self.stats.pings >= self.cfg.count {
                    log::info!("rping: {} pings done (verified {}), disconnecting", self.stats.pings, self.stats.verified);
                    return self.finish(v);
                }
                self.client_ping(v)
            }
            _ => Err(Error::BogusRecv { byte_len: INFO_LEN as u32 }),
        }
    }
}

/// rping's client pattern for ping `n`, `size` bytes, handed to `out(offset, bytes)` in pieces:
/// "rdma-ping-<n>: ", then ASCII from `start` counting up through 'z' and wrapping to 'A', the
/// last byte 0. Returns the next ping's start letter (`start` + 1, 'z' wraps to 'A').
pub fn write_pattern(n: u32, start: u8, size: usize, mut out: impl FnMut(usize, &[u8])) -> u8 {
    let mut b = [0u8; 32];
    let mut w = Cursor { b: &mut b, n: 0 };
    let _ = core::fmt::write(&mut w, format_args!("rdma-ping-{n}: "));
    let cc = w.n.min(size);
    out(0, &b[..cc]);
    let mut c = start;
    let mut chunk = [0u8; 256];
    let mut i = cc;
    while i < size {
        let k = (size - i).min(chunk.len());
        for x in chunk.iter_mut().take(k) {
            *x = c;
            c = if c >= b'z' { b'A' } else { c + 1 };
        }
        if i + k == size {
            chunk[k - 1] = 0;
        }
        out(i, &chunk[..k]);
        i += k;
    }
    if size > 0 && cc == size {
        out(size - 1, &[0]);
    }
    if start >= b'z' {
        b'A'
    } else {
        start + 1
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    fn pattern(n: u32, start: u8, size: usize) -> (Vec<u8>, u8) {
        let mut v = std::vec![0xeeu8; size];
        let next = write_pattern(n, start, size, |o, b| v[o..o + b.len()].copy_from_slice(b));
        (v, next)
    }

    #[test]
    fn pattern_is_rpings() {
        let (v, next) = pattern(0, b'A', 24);
        assert_eq!(&v[..], b"rdma-ping-0: ABCDEFGHIJ\0");
        assert_eq!(next, b'B');
        let (v, next) = pattern(57, b'x', 20);
        assert_eq!(&v[..], b"rdma-ping-57: xyzAB\0");
        assert_eq!(next, b'y');
        assert_eq!(pattern(3, b'z', 16).1, b'A');
        // Wraps 'z' -> 'A' (skipping nothing between 'Z' and 'a': rping counts bytes 65..=122).
        let (v, _) = pattern(1, b'A', 13 + 60);
        assert_eq!(v[13 + 57], b'z');
        assert_eq!(v[13 + 58], b'A');
        assert_eq!(v[13 + 59], 0);
        // Spans several 256-byte chunks with the last byte 0 and no gap.
        let (v, _) = pattern(2, b'C', 1000);
        assert!(v[13..999].iter().all(|&c| (b'A'..=b'z').contains(&c)), "no gap");
        assert_eq!(v[999], 0);
    }
}

struct Cursor<'a> {
    b: &'a mut [u8],
    n: usize,
}
impl core::fmt::Write for Cursor<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let k = s.len().min(self.b.len() - self.n);
        self.b[self.n..self.n + k].copy_from_slice(&s.as_bytes()[..k]);
        self.n += k;
        Ok(())
    }
}
