//! UD on QP1 (GSI) and other UD QPs; the Unix-datagram and UDP-loopback links; pcap output.

use crate::common;
use common::*;
use emu_roce::wire::{self, Frame};
use emu_roce::*;

/// A link wrapper that keeps a copy of every frame sent.
struct Tap<L: Link> {
    inner: L,
    sent: Vec<Vec<u8>>,
}
impl<L: Link> Link for Tap<L> {
    fn send(&mut self, f: &[u8]) {
        self.sent.push(f.to_vec());
        self.inner.send(f)
    }
    fn poll(&mut self) -> Option<Vec<u8>> {
        self.inner.poll()
    }
}

fn ud_up(n: &mut Node, qpn: u32, qkey: u32) {
    n.eng.create_qp(Qpn(qpn), QpType::Ud).unwrap();
    let a = QpAttrs { qkey, ..Default::default() };
    for st in [QpState::Init, QpState::Rtr, QpState::Rts] {
        n.eng.modify_qp(Qpn(qpn), st, &a).unwrap();
    }
}

#[test]
fn gsi_mad_over_qp1_matches_linux_framing() {
    let mut p = Pair::new(Impairments::default(), 1, 1 << 20);
    ud_up(&mut p.a, 1, 0);
    ud_up(&mut p.b, 1, 0);
    let ka = p.a.reg(0x1_0000, 4096, Access::ALL);
    let kb = p.b.reg(0x2_0000, 4096, Access::ALL);
    let mad = pattern(256, 5);
    p.a.write_va(ka, 0x1_0000, &mad);
    p.b.eng.post_recv(Qpn(1), recv_wr(77, kb, 0x2_0000, 40 + 256)).unwrap();
    let ud = UdAddr { remote_qpn: Qpn(1), qkey: 0, dest_ip: IP_B, dest_mac: MAC_B, udp_sport: 55410 };
    p.a.eng.post_send(Qpn(1), SendWr { fence: false, ud: Some(ud), ..send_wr(5, SendOp::Send, ka, 0x1_0000, 256) }).unwrap();
    // Capture A's frame.
    let mut tap = Tap { inner: MemLink::pair(Impairments::default(), 0).0, sent: vec![] };
    p.a.eng.poll(0, &mut tap, &mut p.a.mem, &mut p.a.keys);
    let f = tap.sent.pop().unwrap();
    assert_eq!(f.len(), 322, "same size as Linux's CM MAD frames");
    let Ok(Frame::Roce(pkt)) = wire::parse_frame(&f) else { panic!() };
    assert_eq!((pkt.bth.opcode, pkt.bth.dest_qp(), pkt.bth.pkey.get()), (0x64, 1, 0xFFFF));
    assert_eq!((pkt.deth.unwrap().qkey.get(), pkt.deth.unwrap().src_qp()), (wire::GSI_QKEY, 1));
    assert_eq!((pkt.udp.len.get(), pkt.ip.total_len.get(), pkt.udp.sport.get()), (288, 308, 55410));
    assert_eq!(pkt.payload, &mad[..]);
    let sc = p.a.eng.pop_completion().unwrap();
    assert_eq!((sc.wr_id, sc.status), (5, WcStatus::Success));
    // Deliver it to B.
    p.b.link.set_now(0);
    p.a.link.send(&f);
    p.b.poll(0);
    let c = p.b.take_cqes();
    assert_eq!(c.len(), 1);
    let c = c[0];
    assert_eq!((c.wr_id, c.status, c.byte_len, c.src_qp, c.src_ip, c.grh), (77, WcStatus::Success, 296, Qpn(1), IP_A, true));
    let got = p.b.read_va(kb, 0x2_0000, 296);
    assert!(got[..20].iter().all(|&x| x == 0), "GRH area: 20 zero bytes");
    assert_eq!(&got[20..40], &f[14..34], "then the IPv4 header");
    assert_eq!(&got[40..], &mad[..]);
}

#[test]
fn ud_qkey_mismatch_and_no_receive_are_dropped() {
    let mut p = Pair::new(Impairments::default(), 2, 1 << 20);
    ud_up(&mut p.a, 0x21, 0x1111);
    ud_up(&mut p.b, 0x22, 0x2222);
    let ka = p.a.reg(0x1_0000, 4096, Access::ALL);
    let kb = p.b.reg(0x2_0000, 4096, Access::ALL);
    let mk = |qkey, id| SendWr {
        fence: false,
        ud: Some(UdAddr { remote_qpn: Qpn(0x22), qkey, dest_ip: IP_B, dest_mac: MAC_B, udp_sport: 0xC001 }),
        ..send_wr(id, SendOp::SendWithImm(id as u32), ka, 0x1_0000, 100)
    };
    // No receive posted yet: dropped silently (UD has no RNR).
    p.a.eng.post_send(Qpn(0x21), mk(0x2222, 1)).unwrap();
    p.run_until(1_000_000, |_| false);
    assert_eq!(p.b.eng.counters().ud_dropped, 1);
    p.b.eng.post_recv(Qpn(0x22), recv_wr(9, kb, 0x2_0000, 200)).unwrap();
    p.a.eng.post_send(Qpn(0x21), mk(0x9999, 2)).unwrap(); // wrong Q_Key
    p.a.eng.post_send(Qpn(0x21), mk(0x2222, 3)).unwrap();
    assert!(p.run_until(10_000_000, |p| !p.b.cqes.is_empty()));
    let c = p.b.cqes[0];
    assert_eq!((c.wr_id, c.imm, c.byte_len, c.src_qp, c.opcode), (9, Some(3), 140, Qpn(0x21), WcOpcode::RecvWithImm));
    assert_eq!(p.b.eng.counters().ud_dropped, 2);
    // Too long for the UD MTU is refused at post time.
    assert_eq!(p.a.eng.post_send(Qpn(0x21), mk(0x2222, 4).clone_with_len(2000, ka)), Err(EngineError::TooLong(2000)));
}

trait WithLen {
    fn clone_with_len(self, len: u32, key: u32) -> SendWr;
}
impl WithLen for SendWr {
    fn clone_with_len(mut self, len: u32, key: u32) -> SendWr {
        self.data = Gather::Sges(vec![Sge { addr: 0x1_0000, len, lkey: Lkey(key) }]);
        self
    }
}

fn tmpdir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("emu-roce-{}-{}", name, std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn unix_dgram_link_is_lossless_under_backpressure() {
    let d = tmpdir("unix");
    let (pa, pb) = (d.join("a.sock"), d.join("b.sock"));
    let mut a = UnixDgramLink::new(&pa, &pb).unwrap();
    let mut b = UnixDgramLink::new(&pb, &pa).unwrap();
    // Far more than the socket buffer holds, without reading.
    let n = 3000u32;
    for i in 0..n {
        let mut f = vec![0u8; 1100];
        f[..4].copy_from_slice(&i.to_le_bytes());
        a.send(&f);
    }
    assert!(a.backlog() > 0, "the receiver's buffer must have filled");
    let mut got = 0u32;
    for _ in 0..1_000_000 {
        a.flush();
        while let Some(f) = b.poll() {
            if f.is_empty() {
                continue;
            }
            assert_eq!(u32::from_le_bytes(f[..4].try_into().unwrap()), got, "in order");
            got += 1;
        }
        if got == n {
            break;
        }
    }
    assert_eq!(got, n, "every frame delivered");
    assert_eq!(a.stats.send_errors, 0);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn udp_loopback_link_carries_frames() {
    let mut a = UdpLink::new(0, 0).unwrap();
    let pa = a.local_port().unwrap();
    let mut b = UdpLink::new(0, pa).unwrap();
    let pb = b.local_port().unwrap();
    a.set_remote_port(pb);
    b.send(b"hello-frame");
    let mut got = None;
    for _ in 0..100_000 {
        if let Some(f) = a.poll() {
            got = Some(f);
            break;
        }
    }
    assert_eq!(got.as_deref(), Some(&b"hello-frame"[..]));
    a.send(b"reply");
    let mut got = None;
    for _ in 0..100_000 {
        if let Some(f) = b.poll() {
            got = Some(f);
            break;
        }
    }
    assert_eq!(got.as_deref(), Some(&b"reply"[..]));
}

/// Two engines over real Unix datagram sockets: 1 MiB WRITE then READ back.
#[test]
fn engines_over_unix_dgram_sockets() {
    let d = tmpdir("eng");
    let (pa, pb) = (d.join("a.sock"), d.join("b.sock"));
    let mut la = PcapLink::new(UnixDgramLink::new(&pa, &pb).unwrap(), std::fs::File::create(d.join("a.pcap")).unwrap()).unwrap();
    let mut lb = UnixDgramLink::new(&pb, &pa).unwrap();
    let mut p = Pair::new(Impairments::default(), 3, 8 << 20);
    p.connect(0x11, 0x12, rc_attrs());
    let ka = p.a.reg(0x100_0000, 2 << 20, Access::ALL);
    let kb = p.b.reg(0x200_0000, 1 << 20, Access::ALL);
    let data = pattern(1 << 20, 42);
    p.a.write_va(ka, 0x100_0000, &data);
    p.a.eng.post_send(Qpn(0x11), send_wr(1, SendOp::RdmaWrite { remote_va: 0x200_0000, rkey: Rkey(kb) }, ka, 0x100_0000, 1 << 20)).unwrap();
    p.a.eng.post_send(Qpn(0x11), send_wr(2, SendOp::RdmaRead { remote_va: 0x200_0000, rkey: Rkey(kb) }, ka, 0x110_0000, 1 << 20)).unwrap();
    let start = std::time::Instant::now();
    let mut now = 0;
    while p.a.cqes.len() < 2 && start.elapsed().as_secs() < 60 {
        now += 1000;
        p.a.eng.poll(now, &mut la, &mut p.a.mem, &mut p.a.keys);
        p.b.eng.poll(now, &mut lb, &mut p.b.mem, &mut p.b.keys);
        while let Some(c) = p.a.eng.pop_completion() {
            p.a.cqes.push(c);
        }
    }
    assert_eq!(p.a.cqes.len(), 2);
    assert!(p.a.cqes.iter().all(|c| c.status == WcStatus::Success));
    assert!(p.b.read_va(kb, 0x200_0000, 1 << 20) == data);
    assert!(p.a.read_va(ka, 0x110_0000, 1 << 20) == data);
    assert_eq!(p.a.eng.counters().retransmits, 0, "unix datagrams are lossless");
    la.flush().unwrap();
    // The pcap holds every frame A saw: header + (16 + frame) records, all RoCE frames valid.
    let pcap = std::fs::read(d.join("a.pcap")).unwrap();
    assert_eq!(&pcap[..4], &0xa1b2c3d4u32.to_le_bytes());
    let mut off = 24;
    let mut frames = 0;
    while off < pcap.len() {
        let len = u32::from_le_bytes(pcap[off + 8..off + 12].try_into().unwrap()) as usize;
        let f = &pcap[off + 16..off + 16 + len];
        assert!(matches!(wire::parse_frame(f), Ok(Frame::Roce(_))));
        off += 16 + len;
        frames += 1;
    }
    let c = p.a.eng.counters();
    assert_eq!(frames as u64, c.tx_frames + c.rx_frames);
    let _ = std::fs::remove_dir_all(&d);
}
