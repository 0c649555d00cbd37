//! arp: ARP frames (RFC 826, Ethernet/IPv4) on the raw Ethernet queue, for the neighbour table
//! (`rdma::neigh`, which decides what is learnt). Layout as data; building and parsing only.

use rdma::neigh::{ArpOp, ArpPacket};
use rdma::{Ipv4, Mac};

/// ARP over Ethernet/IPv4 (RFC 826), byte offsets in the frame.
pub mod frame {
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

/// An ARP frame from `sha`/`spa` to Ethernet `dst`, asking for / answering about `tha`/`tpa`.
pub fn build(op: ArpOp, sha: Mac, spa: Ipv4, dst: Mac, tha: Mac, tpa: Ipv4) -> [u8; frame::LEN] {
    use crate::layout::{set, set_bytes};
    let mut b = [0u8; frame::LEN];
    set_bytes(&mut b, frame::DST, &dst);
    set_bytes(&mut b, frame::SRC, &sha);
    set(&mut b, frame::ETHERTYPE, frame::ETHERTYPE_ARP);
    set(&mut b, frame::HTYPE, 1);
    set(&mut b, frame::PTYPE, 0x0800);
    set(&mut b, frame::HLEN, 6);
    set(&mut b, frame::PLEN, 4);
    set(&mut b, frame::OPER, if op == ArpOp::Request { frame::REQUEST } else { frame::REPLY });
    set_bytes(&mut b, frame::SHA, &sha);
    set_bytes(&mut b, frame::SPA, &spa);
    set_bytes(&mut b, frame::THA, &tha);
    set_bytes(&mut b, frame::TPA, &tpa);
    b
}

/// A broadcast request for `tpa` from us.
pub fn request(my_mac: Mac, my_ip: Ipv4, tpa: Ipv4) -> [u8; frame::LEN] {
    build(ArpOp::Request, my_mac, my_ip, [0xff; 6], [0; 6], tpa)
}

/// Our reply to a request from `to_mac`/`to_ip`.
pub fn reply(my_mac: Mac, my_ip: Ipv4, to_mac: Mac, to_ip: Ipv4) -> [u8; frame::LEN] {
    build(ArpOp::Reply, my_mac, my_ip, to_mac, to_mac, to_ip)
}

/// A well-formed Ethernet/IPv4 ARP request or reply; anything else is `None`.
pub fn parse(b: &[u8]) -> Option<ArpPacket> {
    use crate::layout::{bytes, get};
    if b.len() < frame::LEN
        || get(b, frame::ETHERTYPE) != frame::ETHERTYPE_ARP
        || get(b, frame::HTYPE) != 1
        || get(b, frame::PTYPE) != 0x0800
        || get(b, frame::HLEN) != 6
        || get(b, frame::PLEN) != 4
    {
        return None;
    }
    let op = match get(b, frame::OPER) {
        frame::REQUEST => ArpOp::Request,
        frame::REPLY => ArpOp::Reply,
        _ => return None,
    };
    let mut sha = [0u8; 6];
    sha.copy_from_slice(bytes(b, frame::SHA));
    let mut spa = [0u8; 4];
    spa.copy_from_slice(bytes(b, frame::SPA));
    let mut tpa = [0u8; 4];
    tpa.copy_from_slice(bytes(b, frame::TPA));
    Some(ArpPacket { op, sha, spa, tpa })
}
