//! Write a pcap of a representative session between two engines (ARP, a CM-sized MAD on QP1,
//! SENDs, WRITE, multi-packet READ, RNR NAK, and recovery from loss: PSN-sequence NAKs,
//! retransmissions, duplicates), for tshark's RoCE/InfiniBand dissectors.
//! `cargo run -p emu-roce --example capture -- out.pcap`
#![forbid(unsafe_code)]

#[path = "../tests/common/mod.rs"]
mod common;
use common::*;
use emu_roce::*;

/// Records A's side of the in-process link (every frame A sends or receives).
struct Capture {
    link: PcapLink<MemLink, std::io::BufWriter<std::fs::File>>,
}

fn main() {
    let path = std::env::args().nth(1).unwrap_or_else(|| "roce-capture.pcap".into());
    let imp = Impairments { loss: 0.03, duplicate: 0.02, reorder: 0.02, delay_ns: 2000, jitter_ns: 0, reorder_delay_ns: 10_000 };
    let mut p = Pair::new(imp, 11, 16 << 20);
    let (la, lb) = MemLink::pair(imp, 11);
    p.a.link = la;
    p.b.link = lb;
    let mut cap = Capture { link: PcapLink::new(MemLink::pair(Impairments::default(), 0).0, std::io::BufWriter::new(std::fs::File::create(&path).unwrap())).unwrap() };
    std::mem::swap(&mut cap.link.inner, &mut p.a.link);

    // ARP for B's address, answered by B's engine.
    let mut arp = Vec::new();
    wire::build_arp(wire::ARP_REQUEST, MAC_A, IP_A, [0; 6], IP_B, [0xFF; 6], &mut arp);
    cap.link.send(&arp);

    p.connect(0x11, 0x12, rc_attrs());
    for n in [&mut p.a, &mut p.b] {
        n.eng.create_qp(Qpn(1), QpType::Ud).unwrap();
        for st in [QpState::Init, QpState::Rtr, QpState::Rts] {
            n.eng.modify_qp(Qpn(1), st, &QpAttrs::default()).unwrap();
        }
    }
    let ka = p.a.reg(0x100_0000, 4 << 20, Access::ALL);
    let kb = p.b.reg(0x800_0000, 4 << 20, Access::ALL);
    let kr = p.b.reg(0x900_0000, 1 << 20, Access::LOCAL_WRITE);
    let kinv = p.b.reg(0xA00_0000, 4096, Access::ALL);
    p.a.write_va(ka, 0x100_0000, &pattern(1 << 20, 1));
    p.b.write_va(kb, 0x800_0000, &pattern(1 << 20, 2));
    // A CM MAD header (base 1, class 7, version 2, Send, attribute REQ) on zeros.
    let mut mad = vec![0u8; 256];
    mad[..4].copy_from_slice(&[1, 7, 2, 3]);
    mad[8..16].copy_from_slice(&[0, 0, 0, 2, 0x7e, 0x98, 0x0c, 0x6f]);
    mad[16..18].copy_from_slice(&[0, 0x10]);
    p.a.write_va(ka, 0x130_0000, &mad);
    p.b.eng.post_recv(Qpn(1), recv_wr(1, kr, 0x900_0000, 296)).unwrap();
    let ud = UdAddr { remote_qpn: Qpn(1), qkey: wire::GSI_QKEY, dest_ip: IP_B, dest_mac: MAC_B, udp_sport: 0xD872 };
    p.a.eng.post_send(Qpn(1), SendWr { fence: false, ud: Some(ud), ..send_wr(100, SendOp::Send, ka, 0x130_0000, 256) }).unwrap();
    // A SEND before B posts a receive: RNR NAK.
    p.a.eng.post_send(Qpn(0x11), send_wr(1, SendOp::SendWithImm(7), ka, 0x100_0000, 3000)).unwrap();
    let mut now = 0u64;
    let mut step = |p: &mut Pair, cap: &mut Capture, until: u64| {
        while now < until {
            now += 500;
            p.a.link.set_now(now);
            cap.link.inner.set_now(now);
            p.a.eng.poll(now, &mut cap.link, &mut p.a.mem, &mut p.a.keys);
            p.b.eng.poll(now, &mut p.b.link, &mut p.b.mem, &mut p.b.keys);
            while let Some(c) = p.a.eng.pop_completion() {
                p.a.cqes.push(c);
            }
            while let Some(c) = p.b.eng.pop_completion() {
                p.b.cqes.push(c);
            }
        }
    };
    step(&mut p, &mut cap, 50_000);
    for i in 0..8 {
        p.b.eng.post_recv(Qpn(0x12), recv_wr(10 + i, kr, 0x901_0000 + i * 8192, 8192)).unwrap();
    }
    p.a.eng.post_send(Qpn(0x11), send_wr(2, SendOp::SendWithInvalidate(Rkey(kinv)), ka, 0x100_0000, 0)).unwrap();
    let _ = p.a.eng.post_send(Qpn(0x11), send_wr(3, SendOp::RdmaWrite { remote_va: 0x800_0000, rkey: Rkey(kb) }, ka, 0x100_0000, 200_000));
    let _ = p.a.eng.post_send(Qpn(0x11), send_wr(4, SendOp::RdmaRead { remote_va: 0x800_0000, rkey: Rkey(kb) }, ka, 0x120_0000, 128 * 1024));
    let _ = p.a.eng.post_send(Qpn(0x11), send_wr(5, SendOp::RdmaWriteWithImm { remote_va: 0x800_0000, rkey: Rkey(kb), imm: 5 }, ka, 0x100_0000, 5000));
    step(&mut p, &mut cap, 2_000_000_000);
    cap.link.flush().unwrap();
    let c = p.a.eng.counters();
    eprintln!("B completions {:?}", p.b.cqes.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>());
    eprintln!("capture: {path}; A completions {:?}", p.a.cqes.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>());
    eprintln!("A counters {c:?}");
    eprintln!("B counters {:?}", p.b.eng.counters());
}
