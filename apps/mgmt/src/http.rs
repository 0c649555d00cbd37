//! http: a minimal HTTP/1.x server on a fixed number of smoltcp TCP sockets: one request per
//! connection, answered with `Connection: close`: `GET`/`HEAD` of `/metrics`, `/` and
//! `/ports/P/subsystems` (the NQNs linked to port P, one a line), and with `mgmt.control=on`
//! `PUT`/`DELETE` of `/ports/P/subsystems/NQN`, which link a subsystem to the port and unlink
//! it, the operator's side of Linux nvmet's configfs symlink `ports/P/subsystems/NQN`
//! (`ln -s` / `rm`). The NQN is taken as written in the path (no percent-decoding).
//!
//! Bounds (a slow or hostile client cannot pin more): [`SOCKETS`] connections at once (further
//! SYNs are refused with a reset while all are busy), [`REQUEST_MAX`] bytes of request head,
//! [`RESPONSE_MAX`] bytes of response per connection, and every connection is aborted
//! [`CONN_DEADLINE_NS`] after it opened, whatever it is doing.

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt::{self, Write};
use smoltcp::iface::{SocketHandle, SocketSet};
use smoltcp::socket::tcp;

/// Connections served at once.
pub const SOCKETS: usize = 4;
/// Request head bytes read (request line and headers); a longer head gets 431.
pub const REQUEST_MAX: usize = 1024;
/// Largest response (headers and body); a larger page gets 500.
pub const RESPONSE_MAX: usize = 256 * 1024;
/// A connection is aborted this long after it opened.
pub const CONN_DEADLINE_NS: u64 = 5_000_000_000;
/// TCP buffers per socket.
const TCP_RX: usize = REQUEST_MAX;
const TCP_TX: usize = 8 * 1024;

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Page<'a> {
    /// `GET /metrics`: Prometheus text exposition.
    Metrics,
    /// `GET /`: the HTML status page.
    Status,
    /// `GET /ports/P/subsystems`: the NQNs linked to port P, one a line.
    Links { port: u16 },
    /// `PUT` (`link: true`) or `DELETE` `/ports/P/subsystems/NQN`: link subsystem NQN to port P
    /// or unlink it (only with `mgmt.control=on`; else 403).
    Link { port: u16, nqn: &'a str, link: bool },
}

impl Page<'_> {
    fn content_type(self) -> &'static str {
        match self {
            Page::Metrics => crate::prom::CONTENT_TYPE,
            Page::Status => "text/html; charset=utf-8",
            Page::Links { .. } | Page::Link { .. } => "text/plain; charset=utf-8",
        }
    }
}

/// A renderer's verdict once it wrote the body: `Found` answers 200, `NotFound` 404 (no such
/// port or subsystem; the body says which).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Found,
    NotFound,
}

/// What a renderer returns: its verdict, or the body did not fit [`RESPONSE_MAX`].
pub type Rendered = Result<Answer, fmt::Error>;

/// A page renderer: writes the body of `page` to the writer.
pub type Render<'r> = dyn FnMut(Page<'_>, &mut dyn Write) -> Rendered + 'r;

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HttpStats {
    pub connections: u64,
    pub metrics_requests: u64,
    pub status_requests: u64,
    /// `/ports/...` requests: link listings, links and unlinks (whatever their answer).
    pub port_requests: u64,
    /// Answered with a 4xx (bad request line, unknown path or method, head too long).
    pub client_errors: u64,
    /// Pages that did not fit [`RESPONSE_MAX`] (answered 500).
    pub too_large: u64,
    /// Connections aborted at [`CONN_DEADLINE_NS`].
    pub timeouts: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Listening (or about to listen again).
    Idle,
    Reading,
    Writing,
    /// Response queued, FIN sent or about to be.
    Closing,
}

struct Slot {
    handle: SocketHandle,
    state: State,
    since_ns: u64,
    req: Vec<u8>,
    resp: String,
    sent: usize,
}

/// A `fmt::Write` into a `String` that refuses to grow it past `max` bytes.
struct Bounded<'a> {
    s: &'a mut String,
    max: usize,
}

impl Write for Bounded<'_> {
    fn write_str(&mut self, t: &str) -> fmt::Result {
        if self.s.len().saturating_add(t.len()) > self.max {
            return Err(fmt::Error);
        }
        self.s.push_str(t);
        Ok(())
    }
}

/// The server: [`SOCKETS`] sockets listening on one port.
pub struct Server {
    port: u16,
    /// `mgmt.control=on`: requests that change the target are served.
    control: bool,
    slots: Vec<Slot>,
    pub stats: HttpStats,
}

/// What the request head asks for: Ok(page, head_only) or the status line to answer with.
/// `control`: whether requests that change the target are served (else 403).
fn route(head: &[u8], control: bool) -> Result<(Page<'_>, bool), &'static str> {
    let line_end = head.iter().position(|&b| b == b'\n').unwrap_or(head.len());
    let line = core::str::from_utf8(&head[..line_end]).map_err(|_| "400 Bad Request")?.trim_end_matches('\r');
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err("400 Bad Request");
    };
    if !version.starts_with("HTTP/1.") {
        return Err("505 HTTP Version Not Supported");
    }
    let path = target.split('?').next().unwrap_or(target);
    if let Some(rest) = path.strip_prefix("/ports/") {
        return route_port(method, rest, control);
    }
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Err("405 Method Not Allowed"),
    };
    match path {
        "/metrics" => Ok((Page::Metrics, head_only)),
        "/" | "/index.html" => Ok((Page::Status, head_only)),
        _ => Err("404 Not Found"),
    }
}

/// `/ports/` + `rest`: `P/subsystems` (GET, HEAD) or `P/subsystems/NQN` (PUT, DELETE).
fn route_port<'a>(method: &str, rest: &'a str, control: bool) -> Result<(Page<'a>, bool), &'static str> {
    let (port, rest) = rest.split_once('/').ok_or("404 Not Found")?;
    let port = match port.parse::<u16>() {
        Ok(p) if !port.starts_with('+') => p,
        _ => return Err("404 Not Found"),
    };
    match rest.strip_prefix("subsystems") {
        Some("" | "/") => match method {
            "GET" => Ok((Page::Links { port }, false)),
            "HEAD" => Ok((Page::Links { port }, true)),
            _ => Err("405 Method Not Allowed"),
        },
        Some(r) => {
            let nqn = r.strip_prefix('/').filter(|n| !n.is_empty() && !n.contains('/')).ok_or("404 Not Found")?;
            let link = match method {
                "PUT" => true,
                "DELETE" => false,
                _ => return Err("405 Method Not Allowed"),
            };
            if !control {
                return Err("403 Forbidden");
            }
            Ok((Page::Link { port, nqn, link }, false))
        }
        None => Err("404 Not Found"),
    }
}

fn head_complete(req: &[u8]) -> bool {
    req.windows(4).any(|w| w == b"\r\n\r\n") || req.windows(2).any(|w| w == b"\n\n")
}

impl Server {
    /// Add the sockets to `sockets` and listen on `port`; `control`: serve the requests that
    /// change the target ([`Page::Link`]).
    pub fn new(sockets: &mut SocketSet<'static>, port: u16, control: bool) -> Server {
        let slots = (0..SOCKETS)
            .map(|_| {
                let s = tcp::Socket::new(tcp::SocketBuffer::new(vec![0; TCP_RX]), tcp::SocketBuffer::new(vec![0; TCP_TX]));
                Slot { handle: sockets.add(s), state: State::Idle, since_ns: 0, req: Vec::with_capacity(REQUEST_MAX), resp: String::new(), sent: 0 }
            })
            .collect();
        let mut srv = Server { port, control, slots, stats: HttpStats::default() };
        srv.service(sockets, 0, &mut |_, _| Ok(Answer::Found));
        srv
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.slots.iter().filter(|s| s.state != State::Idle).count()
    }

    /// Move every connection along: read request heads, answer them with `render(page, out)`,
    /// send, close, enforce the deadline, listen again. Returns true when anything happened.
    pub fn service(&mut self, sockets: &mut SocketSet<'static>, now_ns: u64, render: &mut Render<'_>) -> bool {
        let mut busy = false;
        for slot in &mut self.slots {
            let s = sockets.get_mut::<tcp::Socket>(slot.handle);
            match s.state() {
                tcp::State::Closed => {
                    s.set_timeout(Some(smoltcp::time::Duration::from_micros(CONN_DEADLINE_NS / 500)));
                    if s.listen(self.port).is_ok() {
                        slot.state = State::Idle;
                    }
                    continue;
                }
                // Half-open: smoltcp's own timeout (2 x the deadline, set at listen) ends it.
                tcp::State::Listen | tcp::State::SynReceived => continue,
                tcp::State::TimeWait => {
                    // The peer has closed too; do not hold the slot for 2 MSL.
                    s.abort();
                    slot.state = State::Idle;
                    busy = true;
                    continue;
                }
                _ => {}
            }
            if slot.state == State::Idle {
                slot.state = State::Reading;
                slot.since_ns = now_ns;
                slot.req.clear();
                slot.sent = 0;
                self.stats.connections += 1;
                busy = true;
            }
            if now_ns.saturating_sub(slot.since_ns) >= CONN_DEADLINE_NS {
                s.abort();
                slot.state = State::Idle;
                self.stats.timeouts += 1;
                continue;
            }
            if slot.state == State::Reading {
                let mut buf = [0u8; 256];
                while s.can_recv() && slot.req.len() < REQUEST_MAX {
                    let room = (REQUEST_MAX - slot.req.len()).min(buf.len());
                    match s.recv_slice(&mut buf[..room]) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            slot.req.extend_from_slice(&buf[..n]);
                            busy = true;
                        }
                    }
                }
                let full = slot.req.len() >= REQUEST_MAX;
                if head_complete(&slot.req) || full || (!s.may_recv() && !slot.req.is_empty()) {
                    let answer = if full && !head_complete(&slot.req) { Err("431 Request Header Fields Too Large") } else { route(&slot.req, self.control) };
                    respond(&mut slot.resp, answer, render, &mut self.stats);
                    slot.state = State::Writing;
                    busy = true;
                } else if !s.may_recv() {
                    // Closed without asking anything.
                    s.close();
                    slot.state = State::Closing;
                }
            }
            if slot.state == State::Writing {
                while slot.sent < slot.resp.len() && s.can_send() {
                    match s.send_slice(&slot.resp.as_bytes()[slot.sent..]) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            slot.sent += n;
                            busy = true;
                        }
                    }
                }
                if slot.sent >= slot.resp.len() {
                    s.close();
                    slot.state = State::Closing;
                }
            }
        }
        busy
    }
}

/// Build the whole response for `answer` into `resp` (bounded by [`RESPONSE_MAX`]).
fn respond(resp: &mut String, answer: Result<(Page<'_>, bool), &'static str>, render: &mut Render<'_>, stats: &mut HttpStats) {
    resp.clear();
    let (page, head_only) = match answer {
        Ok(a) => a,
        Err(status) => {
            stats.client_errors += 1;
            let _ = write!(resp, "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{status}\n", status.len() + 1);
            return;
        }
    };
    match page {
        Page::Metrics => stats.metrics_requests += 1,
        Page::Status => stats.status_requests += 1,
        Page::Links { .. } | Page::Link { .. } => stats.port_requests += 1,
    }
    // Content-Length is patched in once the body is written (fixed width, leading zeros), then
    // the status if the renderer found nothing to act on.
    let _ = write!(resp, "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nCache-Control: no-store\r\nConnection: close\r\nContent-Length: ", page.content_type());
    let len_at = resp.len();
    resp.push_str("0000000000\r\n\r\n");
    let body_at = resp.len();
    let verdict = render(page, &mut Bounded { s: resp, max: RESPONSE_MAX });
    let Ok(verdict) = verdict else {
        stats.too_large += 1;
        resp.clear();
        let msg = "page larger than the server's response bound\n";
        let _ = write!(resp, "HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{msg}", msg.len());
        return;
    };
    let body_len = resp.len() - body_at;
    let mut digits = [b'0'; 10];
    let mut n = body_len;
    for d in digits.iter_mut().rev() {
        *d = b'0' + (n % 10) as u8;
        n /= 10;
    }
    if let Ok(d) = core::str::from_utf8(&digits) {
        resp.replace_range(len_at..len_at + 10, d);
    }
    if head_only {
        resp.truncate(body_at);
    }
    if verdict == Answer::NotFound {
        resp.replace_range("HTTP/1.1 ".len().."HTTP/1.1 200 OK".len(), "404 Not Found");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let route = |h| route(h, false);
        assert_eq!(route(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"), Ok((Page::Metrics, false)));
        assert_eq!(route(b"HEAD / HTTP/1.0\r\n\r\n"), Ok((Page::Status, true)));
        assert_eq!(route(b"GET /metrics?x=1 HTTP/1.1\r\n\r\n"), Ok((Page::Metrics, false)));
        assert_eq!(route(b"POST /metrics HTTP/1.1\r\n\r\n"), Err("405 Method Not Allowed"));
        assert_eq!(route(b"GET /etc/passwd HTTP/1.1\r\n\r\n"), Err("404 Not Found"));
        assert_eq!(route(b"GET /\xff HTTP/1.1\r\n\r\n"), Err("400 Bad Request"));
        assert_eq!(route(b"GET / SPDY/3\r\n\r\n"), Err("505 HTTP Version Not Supported"));
        assert_eq!(route(b"garbage\r\n\r\n"), Err("400 Bad Request"));
        assert_eq!(route(b"GET /ports/1/subsystems HTTP/1.1\r\n\r\n"), Ok((Page::Links { port: 1 }, false)));
        assert_eq!(route(b"HEAD /ports/7/subsystems/ HTTP/1.1\r\n\r\n"), Ok((Page::Links { port: 7 }, true)));
        assert_eq!(route(b"GET /ports/x/subsystems HTTP/1.1\r\n\r\n"), Err("404 Not Found"));
        assert_eq!(route(b"GET /ports/+1/subsystems HTTP/1.1\r\n\r\n"), Err("404 Not Found"));
        assert_eq!(route(b"GET /ports/65536/subsystems HTTP/1.1\r\n\r\n"), Err("404 Not Found"));
        assert_eq!(route(b"GET /ports/1/referrals HTTP/1.1\r\n\r\n"), Err("404 Not Found"));
        assert_eq!(route(b"POST /ports/1/subsystems HTTP/1.1\r\n\r\n"), Err("405 Method Not Allowed"));
        // Changes only with mgmt.control=on.
        assert_eq!(route(b"DELETE /ports/1/subsystems/nqn.a:b HTTP/1.1\r\n\r\n"), Err("403 Forbidden"));
        let control = |h| super::route(h, true);
        assert_eq!(control(b"DELETE /ports/1/subsystems/nqn.a:b HTTP/1.1\r\n\r\n"), Ok((Page::Link { port: 1, nqn: "nqn.a:b", link: false }, false)));
        assert_eq!(control(b"PUT /ports/2/subsystems/nqn.a:b?x HTTP/1.1\r\n\r\n"), Ok((Page::Link { port: 2, nqn: "nqn.a:b", link: true }, false)));
        assert_eq!(control(b"GET /ports/1/subsystems/nqn.a:b HTTP/1.1\r\n\r\n"), Err("405 Method Not Allowed"));
        assert_eq!(control(b"PUT /ports/1/subsystems/a/b HTTP/1.1\r\n\r\n"), Err("404 Not Found"));
        assert_eq!(control(b"PUT /ports/1/subsystemsX HTTP/1.1\r\n\r\n"), Err("404 Not Found"));
    }

    #[test]
    fn response_length_and_bound() {
        let mut st = HttpStats::default();
        let mut r = String::new();
        respond(&mut r, Ok((Page::Metrics, false)), &mut |_, w| w.write_str("a 1\n").map(|()| Answer::Found), &mut st);
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n") && r.contains("Content-Length: 0000000004\r\n\r\na 1\n"), "{r}");
        respond(&mut r, Ok((Page::Metrics, true)), &mut |_, w| w.write_str("a 1\n").map(|()| Answer::Found), &mut st);
        assert!(r.ends_with("Content-Length: 0000000004\r\n\r\n"), "{r}");
        respond(&mut r, Ok((Page::Status, false)), &mut |_, w| (0..RESPONSE_MAX).try_for_each(|_| w.write_str("x")).map(|()| Answer::Found), &mut st);
        assert!(r.starts_with("HTTP/1.1 500"), "{r}");
        assert!(r.len() < 200);
        let link = Page::Link { port: 1, nqn: "nqn.x", link: false };
        respond(&mut r, Ok((link, false)), &mut |_, w| w.write_str("no subsystem nqn.x\n").map(|()| Answer::NotFound), &mut st);
        assert!(r.starts_with("HTTP/1.1 404 Not Found\r\nContent-Type: text/plain") && r.ends_with("\r\n\r\nno subsystem nqn.x\n"), "{r}");
        assert_eq!((st.metrics_requests, st.status_requests, st.port_requests, st.too_large), (2, 1, 1, 1));
    }
}
