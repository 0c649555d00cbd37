//! The management stack against a second smoltcp interface over an in-memory wire, on a
//! virtual clock: ARP, ping, `GET /metrics` and `/`, and the connection bounds.

use std::collections::VecDeque;
use std::fmt::Write as _;

use mgmt::device::RingDevice;
use mgmt::{Answer, Budget, FramePort, Mgmt, MgmtConfig, Page};
use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::socket::{icmp, tcp};
use smoltcp::time::Instant;
use smoltcp::wire::{EthernetAddress, Icmpv4Packet, Icmpv4Repr, IpAddress, IpCidr, Ipv4Address};

const SERVER_IP: [u8; 4] = [10, 0, 0, 5];
const SERVER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 5];
const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 9];
const MTU: usize = 256;

/// The server's end of the wire.
#[derive(Default)]
struct Wire {
    to_server: VecDeque<Vec<u8>>,
    to_client: VecDeque<Vec<u8>>,
}

impl FramePort for Wire {
    fn recv_frame(&mut self, buf: &mut [u8]) -> Option<usize> {
        let f = self.to_server.pop_front()?;
        let n = f.len().min(buf.len());
        buf[..n].copy_from_slice(&f[..n]);
        Some(n)
    }
    fn send_frame(&mut self, frame: &[u8]) -> bool {
        assert!(frame.len() <= MTU, "frame of {} bytes over the port's limit", frame.len());
        self.to_client.push_back(frame.to_vec());
        true
    }
    fn mac(&self) -> [u8; 6] {
        SERVER_MAC
    }
    fn max_frame(&self) -> usize {
        MTU
    }
}

struct Bed {
    now_ns: u64,
    wire: Wire,
    server: Mgmt,
    client: Interface,
    cdev: RingDevice,
    sockets: SocketSet<'static>,
    renders: u32,
}

fn render(n: &mut u32, page: Page, w: &mut dyn std::fmt::Write) -> mgmt::Rendered {
    *n += 1;
    match page {
        Page::Metrics => {
            let mut e = mgmt::prom::Exposition::new(w);
            e.single("test_renders_total", mgmt::prom::Kind::Counter, "Pages rendered.", *n);
            e.error.map_or(Ok(Answer::Found), Err)
        }
        Page::Status => w.write_str("<html>status</html>").map(|()| Answer::Found),
        Page::Links { .. } | Page::Link { .. } => Ok(Answer::NotFound),
    }
}

impl Bed {
    fn new() -> Bed {
        let cfg = MgmtConfig::default();
        let server = Mgmt::new(&cfg, SERVER_IP, SERVER_MAC, MTU, Budget::default(), 7, 0);
        let mut cdev = RingDevice::new(64, 64, 1514, 1514);
        let mut c = Config::new(EthernetAddress(CLIENT_MAC).into());
        c.random_seed = 3;
        let mut client = Interface::new(c, &mut cdev, Instant::from_millis(0));
        client.update_ip_addrs(|a| {
            a.push(IpCidr::new(IpAddress::v4(10, 0, 0, 9), 24)).unwrap();
        });
        Bed { now_ns: 0, wire: Wire::default(), server, client, cdev, sockets: SocketSet::new(vec![]), renders: 0 }
    }

    /// Advance 1 ms: both sides poll, frames cross.
    fn step(&mut self) {
        self.now_ns += 1_000_000;
        let n = &mut self.renders;
        self.server.poll(self.now_ns, &mut self.wire, &mut |p, w| render(n, p, w));
        let now = Instant::from_micros((self.now_ns / 1000) as i64);
        while !self.cdev.rx.is_full() {
            let Some(f) = self.wire.to_client.pop_front() else { break };
            self.cdev.rx.push_with(|s| {
                s[..f.len()].copy_from_slice(&f);
                f.len()
            });
        }
        self.client.poll(now, &mut self.cdev, &mut self.sockets);
        while let Some(f) = self.cdev.tx.pop_with(|b| b.to_vec()) {
            self.wire.to_server.push_back(f);
        }
    }

    fn tcp(&mut self, local_port: u16) -> SocketHandle {
        let mut s = tcp::Socket::new(tcp::SocketBuffer::new(vec![0; 4096]), tcp::SocketBuffer::new(vec![0; 65536]));
        s.connect(self.client.context(), (Ipv4Address::new(10, 0, 0, 5), 9100), local_port).unwrap();
        self.sockets.add(s)
    }

    /// GET `path` on a new connection; the whole response once the server closed.
    fn get(&mut self, path: &str, local_port: u16) -> String {
        let h = self.tcp(local_port);
        let mut sent = false;
        let mut out = Vec::new();
        for _ in 0..5000 {
            self.step();
            let s = self.sockets.get_mut::<tcp::Socket>(h);
            if !sent && s.can_send() {
                s.send_slice(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).unwrap();
                sent = true;
            }
            while s.can_recv() {
                s.recv(|b| {
                    out.extend_from_slice(b);
                    (b.len(), ())
                })
                .unwrap();
            }
            if sent && !s.may_recv() {
                s.close();
                break;
            }
        }
        String::from_utf8(out).unwrap()
    }
}

#[test]
fn answers_ping() {
    let mut b = Bed::new();
    let mut s = icmp::Socket::new(icmp::PacketBuffer::new(vec![icmp::PacketMetadata::EMPTY; 4], vec![0; 1024]), icmp::PacketBuffer::new(vec![icmp::PacketMetadata::EMPTY; 4], vec![0; 1024]));
    s.bind(icmp::Endpoint::Ident(0x1234)).unwrap();
    let h = b.sockets.add(s);
    let mut replies = 0;
    for seq in 0..3u16 {
        let data = [seq as u8; 56];
        let req = Icmpv4Repr::EchoRequest { ident: 0x1234, seq_no: seq, data: &data };
        let s = b.sockets.get_mut::<icmp::Socket>(h);
        let buf = s.send(req.buffer_len(), IpAddress::v4(10, 0, 0, 5)).unwrap();
        req.emit(&mut Icmpv4Packet::new_unchecked(buf), &smoltcp::phy::ChecksumCapabilities::default());
        for _ in 0..50 {
            b.step();
            let s = b.sockets.get_mut::<icmp::Socket>(h);
            if let Ok((p, _)) = s.recv() {
                let r = Icmpv4Repr::parse(&Icmpv4Packet::new_checked(p).unwrap(), &smoltcp::phy::ChecksumCapabilities::default()).unwrap();
                assert_eq!(r, Icmpv4Repr::EchoReply { ident: 0x1234, seq_no: seq, data: &data });
                replies += 1;
                break;
            }
        }
    }
    assert_eq!(replies, 3, "three echo replies");
    assert!(b.server.stats().rx_frames >= 4 && b.server.stats().tx_frames >= 4, "{:?}", b.server.stats());
}

#[test]
fn serves_metrics_and_status() {
    let mut b = Bed::new();
    let r = b.get("/metrics", 40000);
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
    assert!(r.contains("Content-Type: text/plain; version=0.0.4"), "{r}");
    assert!(r.ends_with("# HELP test_renders_total Pages rendered.\n# TYPE test_renders_total counter\ntest_renders_total 1\n"), "{r}");
    let r = b.get("/", 40001);
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n") && r.ends_with("<html>status</html>"), "{r}");
    let r = b.get("/nope", 40002);
    assert!(r.starts_with("HTTP/1.1 404"), "{r}");
    let st = b.server.stats();
    assert_eq!((st.http.metrics_requests, st.http.status_requests, st.http.client_errors), (1, 1, 1));
}

#[test]
fn idle_clients_are_bounded_and_timed_out() {
    let mut b = Bed::new();
    // 20 clients connect and say nothing.
    let hs: Vec<_> = (0..20).map(|i| b.tcp(41000 + i)).collect();
    for _ in 0..200 {
        b.step();
    }
    let est = hs.iter().filter(|&&h| b.sockets.get_mut::<tcp::Socket>(h).state() == tcp::State::Established).count();
    assert_eq!(est, mgmt::http::SOCKETS, "only the fixed number of connections is accepted");
    assert_eq!(b.server.open_connections(), mgmt::http::SOCKETS);
    // While they hold every slot a new client is refused, not queued.
    // After the deadline the server has aborted them and serves again.
    for _ in 0..(mgmt::http::CONN_DEADLINE_NS / 1_000_000 + 100) {
        b.step();
    }
    assert_eq!(b.server.stats().http.timeouts, mgmt::http::SOCKETS as u64, "{:?} open {}", b.server.stats(), b.server.open_connections());
    for h in hs {
        b.sockets.get_mut::<tcp::Socket>(h).abort();
    }
    for _ in 0..10 {
        b.step();
    }
    let r = b.get("/metrics", 42000);
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
}

#[test]
fn a_page_of_many_segments_arrives_whole() {
    let mut b = Bed::new();
    b.server = Mgmt::new(&MgmtConfig::default(), SERVER_IP, SERVER_MAC, MTU, Budget::default(), 7, 0);
    let mut big = String::new();
    for i in 0..3000 {
        writeln!(big, "line_{i} {i}").unwrap();
    }
    // Serve `big` as the status page.
    let h = b.tcp(43000);
    let mut out = Vec::new();
    let mut sent = false;
    for _ in 0..20000 {
        b.now_ns += 1_000_000;
        b.server.poll(b.now_ns, &mut b.wire, &mut |_, w| w.write_str(&big).map(|()| Answer::Found));
        let now = Instant::from_micros((b.now_ns / 1000) as i64);
        while let Some(f) = b.wire.to_client.pop_front() {
            b.cdev.rx.push_with(|s| {
                s[..f.len()].copy_from_slice(&f);
                f.len()
            });
        }
        b.client.poll(now, &mut b.cdev, &mut b.sockets);
        while let Some(f) = b.cdev.tx.pop_with(|x| x.to_vec()) {
            b.wire.to_server.push_back(f);
        }
        let s = b.sockets.get_mut::<tcp::Socket>(h);
        if !sent && s.can_send() {
            s.send_slice(b"GET / HTTP/1.0\r\n\r\n").unwrap();
            sent = true;
        }
        while s.can_recv() {
            s.recv(|d| {
                out.extend_from_slice(d);
                (d.len(), ())
            })
            .unwrap();
        }
        if sent && !s.may_recv() {
            break;
        }
    }
    let r = String::from_utf8(out).unwrap();
    assert!(r.ends_with(&big), "whole body (got {} bytes)", r.len());
    assert!(r.contains(&format!("Content-Length: {:010}\r\n", big.len())));
}
