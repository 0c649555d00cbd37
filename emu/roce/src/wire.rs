//! Wire formats of RoCEv2 as data: Ethernet II, ARP, IPv4, UDP, the IB transport headers
//! (BTH, RETH, AETH, DETH, ImmDt, IETH, AtomicETH, AtomicAckETH), the opcode table, a frame
//! builder and a parser that never panics.
//!
//! Sources: IBTA Vol 1 ch. 9 (transport headers, as mirrored by Linux
//! `drivers/infiniband/sw/rxe/rxe_hdr.h` and `include/rdma/ib_pack.h`), RFC 791 (IPv4),
//! RFC 768 (UDP), RFC 826 (ARP); summarised in `shared/reference/wire.md` §1.
//! All multi-byte fields are big-endian (`zerocopy::network_endian`).

use zerocopy::network_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::icrc;

/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;
/// IANA UDP destination port of RoCEv2.
pub const ROCEV2_UDP_PORT: u16 = 4791;
/// The default (full-member) partition key rxe sends on every packet.
pub const DEFAULT_PKEY: u16 = 0xFFFF;
/// Q_Key of the GSI QP (QP1).
pub const GSI_QKEY: u32 = 0x8001_0000;
/// Size of the GRH area in front of UD receive data.
pub const GRH_LEN: usize = 40;
/// 24-bit PSN / QPN mask.
pub const MASK24: u32 = 0x00FF_FFFF;
/// Bytes of the ICRC trailer.
pub const ICRC_LEN: usize = 4;

/// Ethernet II header (14 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct EthHdr {
    pub dst: [u8; 6],
    pub src: [u8; 6],
    pub ethertype: U16,
}

/// ARP packet for Ethernet/IPv4 (RFC 826), 28 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct ArpPkt {
    /// 1 = Ethernet.
    pub htype: U16,
    /// 0x0800 = IPv4.
    pub ptype: U16,
    pub hlen: u8,
    pub plen: u8,
    /// 1 = request, 2 = reply.
    pub oper: U16,
    pub sha: [u8; 6],
    pub spa: [u8; 4],
    pub tha: [u8; 6],
    pub tpa: [u8; 4],
}
/// ARP operation codes.
pub const ARP_REQUEST: u16 = 1;
pub const ARP_REPLY: u16 = 2;

/// IPv4 header without options (RFC 791), 20 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct Ipv4Hdr {
    /// Version (4) and IHL (5): 0x45.
    pub ver_ihl: u8,
    pub tos: u8,
    pub total_len: U16,
    pub id: U16,
    /// Flags (bit 14 = DF) and fragment offset.
    pub frag: U16,
    pub ttl: u8,
    pub proto: u8,
    pub csum: U16,
    pub src: [u8; 4],
    pub dst: [u8; 4],
}
/// IPv4 "don't fragment" flag in `frag`.
pub const IPV4_DF: u16 = 0x4000;

/// UDP header (RFC 768), 8 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct UdpHdr {
    pub sport: U16,
    pub dport: U16,
    pub len: U16,
    pub csum: U16,
}

/// Base Transport Header, 12 bytes (IBA 9.2; rxe_hdr.h `struct rxe_bth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct Bth {
    pub opcode: u8,
    /// SE(7) MigReq(6) PadCnt(5:4) TVer(3:0).
    pub flags: u8,
    pub pkey: U16,
    /// FECN(7) BECN(6) resv6(5:0); masked to 0xFF in the ICRC.
    pub fecn_becn: u8,
    pub dest_qp: [u8; 3],
    /// AckReq(7) resv7(6:0).
    pub ack_req: u8,
    pub psn: [u8; 3],
}
/// BTH `flags` bits.
pub const BTH_SE: u8 = 0x80;
pub const BTH_MIG: u8 = 0x40;
pub const BTH_PAD_SHIFT: u8 = 4;
pub const BTH_PAD_MASK: u8 = 0x30;
pub const BTH_TVER_MASK: u8 = 0x0F;
/// BTH `ack_req` bit.
pub const BTH_ACKREQ: u8 = 0x80;

/// RDMA Extended Transport Header, 16 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct Reth {
    pub va: U64,
    pub rkey: U32,
    /// Whole remaining message length (rxe `reth_set_len(wqe->dma.resid)`).
    pub len: U32,
}

/// ACK Extended Transport Header, 4 bytes: syndrome + 24-bit MSN.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct Aeth {
    pub syndrome: u8,
    pub msn: [u8; 3],
}
/// AETH syndromes (wire.md §1.3): type in bits 6:5, value in 4:0.
pub const AETH_TYPE_MASK: u8 = 0x60;
pub const AETH_TYPE_ACK: u8 = 0x00;
pub const AETH_TYPE_RNR: u8 = 0x20;
pub const AETH_TYPE_NAK: u8 = 0x60;
/// ACK with "unlimited credits" (what rxe always sends).
pub const AETH_ACK_UNLIMITED: u8 = 0x1F;
pub const AETH_NAK_PSN_SEQ: u8 = 0x60;
pub const AETH_NAK_INVALID_REQ: u8 = 0x61;
pub const AETH_NAK_REM_ACCESS: u8 = 0x62;
pub const AETH_NAK_REM_OP: u8 = 0x63;

/// Datagram Extended Transport Header, 8 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct Deth {
    pub qkey: U32,
    pub resv: u8,
    pub src_qp: [u8; 3],
}

/// Immediate data, 4 bytes (opaque).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct ImmDt {
    pub imm: U32,
}

/// Invalidate Extended Transport Header: the R_Key to invalidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct Ieth {
    pub rkey: U32,
}

/// Atomic Extended Transport Header, 28 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct AtomicEth {
    pub va: U64,
    pub rkey: U32,
    pub swap_add: U64,
    pub compare: U64,
}

/// Atomic ACK Extended Transport Header, 8 bytes: the original remote value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct AtomicAckEth {
    pub orig: U64,
}

const _: () = {
    assert!(core::mem::size_of::<EthHdr>() == 14);
    assert!(core::mem::size_of::<ArpPkt>() == 28);
    assert!(core::mem::size_of::<Ipv4Hdr>() == 20);
    assert!(core::mem::size_of::<UdpHdr>() == 8);
    assert!(core::mem::size_of::<Bth>() == 12);
    assert!(core::mem::size_of::<Reth>() == 16);
    assert!(core::mem::size_of::<Aeth>() == 4);
    assert!(core::mem::size_of::<Deth>() == 8);
    assert!(core::mem::size_of::<ImmDt>() == 4);
    assert!(core::mem::size_of::<Ieth>() == 4);
    assert!(core::mem::size_of::<AtomicEth>() == 28);
    assert!(core::mem::size_of::<AtomicAckEth>() == 8);
};

/// Byte offsets of the RoCEv2 layers inside an untagged Ethernet frame.
pub const ETH_LEN: usize = 14;
pub const IP_OFF: usize = ETH_LEN;
pub const UDP_OFF: usize = IP_OFF + 20;
pub const BTH_OFF: usize = UDP_OFF + 8;

/// Read a 24-bit big-endian field.
pub fn get24(b: [u8; 3]) -> u32 {
    u32::from_be_bytes([0, b[0], b[1], b[2]])
}
/// Encode a 24-bit big-endian field (upper bits dropped).
pub fn put24(v: u32) -> [u8; 3] {
    let b = v.to_be_bytes();
    [b[1], b[2], b[3]]
}

impl Bth {
    pub fn dest_qp(&self) -> u32 {
        get24(self.dest_qp)
    }
    pub fn psn(&self) -> u32 {
        get24(self.psn)
    }
    pub fn ack_req(&self) -> bool {
        self.ack_req & BTH_ACKREQ != 0
    }
    pub fn pad(&self) -> usize {
        ((self.flags & BTH_PAD_MASK) >> BTH_PAD_SHIFT) as usize
    }
    pub fn tver(&self) -> u8 {
        self.flags & BTH_TVER_MASK
    }
    pub fn solicited(&self) -> bool {
        self.flags & BTH_SE != 0
    }
}
impl Aeth {
    pub fn new(syndrome: u8, msn: u32) -> Self {
        Aeth { syndrome, msn: put24(msn) }
    }
    pub fn msn(&self) -> u32 {
        get24(self.msn)
    }
}
impl Deth {
    pub fn new(qkey: u32, src_qp: u32) -> Self {
        Deth { qkey: qkey.into(), resv: 0, src_qp: put24(src_qp) }
    }
    pub fn src_qp(&self) -> u32 {
        get24(self.src_qp)
    }
}

/// What kind of operation a BTH opcode belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Send,
    Write,
    ReadRequest,
    ReadResponse,
    Ack,
    AtomicAck,
    Atomic,
}

/// Position of a packet inside its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seg {
    First,
    Middle,
    Last,
    Only,
}

/// One row of the opcode table (rxe_opcode.c `rxe_opcode[]` mask bits, ib_pack.h numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpInfo {
    pub opcode: u8,
    pub kind: OpKind,
    pub seg: Seg,
    pub reth: bool,
    pub aeth: bool,
    pub deth: bool,
    pub imm: bool,
    pub ieth: bool,
    pub atomic: bool,
    pub atomic_ack: bool,
    /// Whether the packet carries payload after the headers.
    pub payload: bool,
}

impl OpInfo {
    /// Bytes of transport headers after the BTH.
    pub const fn ext_len(&self) -> usize {
        (self.reth as usize) * 16
            + (self.aeth as usize) * 4
            + (self.deth as usize) * 8
            + (self.imm as usize) * 4
            + (self.ieth as usize) * 4
            + (self.atomic as usize) * 28
            + (self.atomic_ack as usize) * 8
    }
    /// True for the last packet of a message (LAST or ONLY).
    pub const fn is_last(&self) -> bool {
        matches!(self.seg, Seg::Last | Seg::Only)
    }
    /// True for the first packet of a message (FIRST or ONLY).
    pub const fn is_first(&self) -> bool {
        matches!(self.seg, Seg::First | Seg::Only)
    }
    /// True for requests (what a responder handles); false for ACKs and responses.
    pub const fn is_request(&self) -> bool {
        matches!(self.kind, OpKind::Send | OpKind::Write | OpKind::ReadRequest | OpKind::Atomic)
    }
}

macro_rules! op {
    ($code:expr, $kind:ident, $seg:ident $(, $flag:ident)*) => {{
        #[allow(unused_mut)]
        let mut o = OpInfo {
            opcode: $code, kind: OpKind::$kind, seg: Seg::$seg, reth: false, aeth: false,
            deth: false, imm: false, ieth: false, atomic: false, atomic_ack: false, payload: false,
        };
        $( o.$flag = true; )*
        o
    }};
}

/// RC opcodes (transport 000) and UD opcodes (transport 011) this engine speaks.
/// Src: include/rdma/ib_pack.h; header presence per rxe_opcode.c (wire.md §1.3).
pub const OPCODES: &[OpInfo] = &[
    op!(0x00, Send, First, payload),
    op!(0x01, Send, Middle, payload),
    op!(0x02, Send, Last, payload),
    op!(0x03, Send, Last, imm, payload),
    op!(0x04, Send, Only, payload),
    op!(0x05, Send, Only, imm, payload),
    op!(0x06, Write, First, reth, payload),
    op!(0x07, Write, Middle, payload),
    op!(0x08, Write, Last, payload),
    op!(0x09, Write, Last, imm, payload),
    op!(0x0A, Write, Only, reth, payload),
    op!(0x0B, Write, Only, reth, imm, payload),
    op!(0x0C, ReadRequest, Only, reth),
    op!(0x0D, ReadResponse, First, aeth, payload),
    op!(0x0E, ReadResponse, Middle, payload),
    op!(0x0F, ReadResponse, Last, aeth, payload),
    op!(0x10, ReadResponse, Only, aeth, payload),
    op!(0x11, Ack, Only, aeth),
    op!(0x12, AtomicAck, Only, aeth, atomic_ack),
    op!(0x13, Atomic, Only, atomic),
    op!(0x14, Atomic, Only, atomic),
    op!(0x16, Send, Last, ieth, payload),
    op!(0x17, Send, Only, ieth, payload),
    op!(0x64, Send, Only, deth, payload),
    op!(0x65, Send, Only, deth, imm, payload),
];

/// Named opcodes.
pub mod opcode {
    pub const RC_SEND_FIRST: u8 = 0x00;
    pub const RC_SEND_MIDDLE: u8 = 0x01;
    pub const RC_SEND_LAST: u8 = 0x02;
    pub const RC_SEND_LAST_IMM: u8 = 0x03;
    pub const RC_SEND_ONLY: u8 = 0x04;
    pub const RC_SEND_ONLY_IMM: u8 = 0x05;
    pub const RC_WRITE_FIRST: u8 = 0x06;
    pub const RC_WRITE_MIDDLE: u8 = 0x07;
    pub const RC_WRITE_LAST: u8 = 0x08;
    pub const RC_WRITE_LAST_IMM: u8 = 0x09;
    pub const RC_WRITE_ONLY: u8 = 0x0A;
    pub const RC_WRITE_ONLY_IMM: u8 = 0x0B;
    pub const RC_READ_REQUEST: u8 = 0x0C;
    pub const RC_READ_RESP_FIRST: u8 = 0x0D;
    pub const RC_READ_RESP_MIDDLE: u8 = 0x0E;
    pub const RC_READ_RESP_LAST: u8 = 0x0F;
    pub const RC_READ_RESP_ONLY: u8 = 0x10;
    pub const RC_ACK: u8 = 0x11;
    pub const RC_ATOMIC_ACK: u8 = 0x12;
    pub const RC_CMP_SWAP: u8 = 0x13;
    pub const RC_FETCH_ADD: u8 = 0x14;
    pub const RC_SEND_LAST_INV: u8 = 0x16;
    pub const RC_SEND_ONLY_INV: u8 = 0x17;
    pub const UD_SEND_ONLY: u8 = 0x64;
    pub const UD_SEND_ONLY_IMM: u8 = 0x65;
}

/// Look an opcode up in [`OPCODES`].
pub fn op_info(opcode: u8) -> Option<&'static OpInfo> {
    OPCODES.iter().find(|o| o.opcode == opcode)
}

/// Why a frame was not accepted. Never a panic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// Shorter than its headers claim.
    Truncated,
    BadIpVersion(u8),
    /// IPv4 options or fragments are not supported on the RoCE path.
    IpOptionsOrFragment,
    BadIpChecksum,
    BadIpLength,
    BadUdpLength,
    BadTver(u8),
    UnknownOpcode(u8),
    /// Pad count larger than the payload area.
    BadPad,
    /// The ICRC did not match (computed, on the wire).
    BadIcrc { computed: u32, wire: u32 },
    /// Header set passed to the builder does not fit the opcode.
    HeaderMismatch(u8),
    /// Payload too large for one packet.
    TooLarge,
}

/// A decoded Ethernet frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame<'a> {
    Arp(EthHdr, ArpPkt),
    Roce(RocePacket<'a>),
    /// Anything else (non-IPv4/ARP EtherType, IPv4 not UDP/4791): for the raw Ethernet path.
    Other(EthHdr),
}

/// A decoded RoCEv2 packet; headers copied out, payload borrowed (pad and ICRC excluded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RocePacket<'a> {
    pub eth: EthHdr,
    pub ip: Ipv4Hdr,
    pub udp: UdpHdr,
    pub bth: Bth,
    pub op: &'static OpInfo,
    pub reth: Option<Reth>,
    pub aeth: Option<Aeth>,
    pub deth: Option<Deth>,
    pub imm: Option<u32>,
    pub ieth: Option<u32>,
    pub atomic: Option<AtomicEth>,
    pub atomic_ack: Option<u64>,
    pub payload: &'a [u8],
}

fn take<T: FromBytes + KnownLayout + Immutable + Unaligned + Copy>(b: &[u8], off: &mut usize) -> Result<T, WireError> {
    let rest = b.get(*off..).ok_or(WireError::Truncated)?;
    let (v, _) = T::read_from_prefix(rest).map_err(|_| WireError::Truncated)?;
    *off += core::mem::size_of::<T>();
    Ok(v)
}

/// Internet checksum (RFC 1071) of `data`.
pub fn inet_checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

/// Decode one Ethernet frame (no FCS). RoCE packets are fully validated, ICRC included.
pub fn parse_frame(frame: &[u8]) -> Result<Frame<'_>, WireError> {
    let mut off = 0;
    let eth: EthHdr = take(frame, &mut off)?;
    match eth.ethertype.get() {
        ETHERTYPE_ARP => {
            let arp: ArpPkt = take(frame, &mut off)?;
            Ok(Frame::Arp(eth, arp))
        }
        ETHERTYPE_IPV4 => parse_ipv4(frame, eth),
        _ => Ok(Frame::Other(eth)),
    }
}

fn parse_ipv4(frame: &[u8], eth: EthHdr) -> Result<Frame<'_>, WireError> {
    let mut off = IP_OFF;
    let ip: Ipv4Hdr = take(frame, &mut off)?;
    if ip.ver_ihl >> 4 != 4 {
        return Err(WireError::BadIpVersion(ip.ver_ihl >> 4));
    }
    if ip.proto != IPPROTO_UDP {
        return Ok(Frame::Other(eth));
    }
    // Peek at the UDP destination port before insisting on RoCE-only rules.
    let ihl = usize::from(ip.ver_ihl & 0xF) * 4;
    if ihl < 20 {
        return Err(WireError::BadIpLength);
    }
    let udp_at = IP_OFF + ihl;
    let mut uo = udp_at;
    let udp: UdpHdr = take(frame, &mut uo)?;
    if udp.dport.get() != ROCEV2_UDP_PORT {
        return Ok(Frame::Other(eth));
    }
    if ihl != 20 || ip.frag.get() & 0x3FFF != 0 {
        return Err(WireError::IpOptionsOrFragment);
    }
    if inet_checksum(&frame[IP_OFF..IP_OFF + 20]) != 0 {
        return Err(WireError::BadIpChecksum);
    }
    let total = usize::from(ip.total_len.get());
    if total < 20 + 8 + 12 + ICRC_LEN || IP_OFF + total > frame.len() {
        return Err(WireError::BadIpLength);
    }
    if usize::from(udp.len.get()) != total - 20 {
        return Err(WireError::BadUdpLength);
    }
    // Everything below is inside the IP packet; trailing Ethernet padding is ignored.
    let pkt = &frame[..IP_OFF + total];
    let mut off = BTH_OFF;
    let bth: Bth = take(pkt, &mut off)?;
    if bth.tver() != 0 {
        return Err(WireError::BadTver(bth.tver()));
    }
    let op = op_info(bth.opcode).ok_or(WireError::UnknownOpcode(bth.opcode))?;
    let reth = if op.reth { Some(take::<Reth>(pkt, &mut off)?) } else { None };
    let aeth = if op.aeth { Some(take::<Aeth>(pkt, &mut off)?) } else { None };
    let deth = if op.deth { Some(take::<Deth>(pkt, &mut off)?) } else { None };
    let imm = if op.imm { Some(take::<ImmDt>(pkt, &mut off)?.imm.get()) } else { None };
    let ieth = if op.ieth { Some(take::<Ieth>(pkt, &mut off)?.rkey.get()) } else { None };
    let atomic = if op.atomic { Some(take::<AtomicEth>(pkt, &mut off)?) } else { None };
    let atomic_ack = if op.atomic_ack { Some(take::<AtomicAckEth>(pkt, &mut off)?.orig.get()) } else { None };
    let end = pkt.len().checked_sub(ICRC_LEN).ok_or(WireError::Truncated)?;
    if off > end {
        return Err(WireError::Truncated);
    }
    let body = end - off;
    let pad = bth.pad();
    if pad > body || (!op.payload && body != 0) {
        return Err(WireError::BadPad);
    }
    let wire = u32::from_le_bytes([pkt[end], pkt[end + 1], pkt[end + 2], pkt[end + 3]]);
    let computed = icrc::compute(&pkt[IP_OFF..end]);
    if computed != wire {
        return Err(WireError::BadIcrc { computed, wire });
    }
    Ok(Frame::Roce(RocePacket {
        eth,
        ip,
        udp,
        bth,
        op,
        reth,
        aeth,
        deth,
        imm,
        ieth,
        atomic,
        atomic_ack,
        payload: &pkt[off..end - pad],
    }))
}

/// Everything the builder needs to emit one RoCEv2 frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PacketSpec {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub src_ip: [u8; 4],
    pub dst_ip: [u8; 4],
    pub ip_id: u16,
    pub ttl: u8,
    pub udp_sport: u16,
    pub opcode: u8,
    pub solicited: bool,
    pub pkey: u16,
    pub dest_qp: u32,
    pub ack_req: bool,
    pub psn: u32,
    pub reth: Option<Reth>,
    pub aeth: Option<Aeth>,
    pub deth: Option<Deth>,
    pub imm: Option<u32>,
    pub ieth: Option<u32>,
    pub atomic: Option<AtomicEth>,
    pub atomic_ack: Option<u64>,
}

/// Append one complete frame (Ethernet … ICRC) for `spec` + `payload` to `out` (cleared first).
/// The header set must match the opcode's row in [`OPCODES`].
pub fn build_frame(spec: &PacketSpec, payload: &[u8], out: &mut Vec<u8>) -> Result<(), WireError> {
    let op = op_info(spec.opcode).ok_or(WireError::UnknownOpcode(spec.opcode))?;
    let want = (op.reth, op.aeth, op.deth, op.imm, op.ieth, op.atomic, op.atomic_ack);
    let have = (
        spec.reth.is_some(),
        spec.aeth.is_some(),
        spec.deth.is_some(),
        spec.imm.is_some(),
        spec.ieth.is_some(),
        spec.atomic.is_some(),
        spec.atomic_ack.is_some(),
    );
    if want != have || (!op.payload && !payload.is_empty()) {
        return Err(WireError::HeaderMismatch(spec.opcode));
    }
    let pad = payload.len().wrapping_neg() & 3;
    let ip_total = 20 + 8 + 12 + op.ext_len() + payload.len() + pad + ICRC_LEN;
    let ip_total16 = u16::try_from(ip_total).map_err(|_| WireError::TooLarge)?;
    out.clear();
    out.reserve(ETH_LEN + ip_total);
    let eth = EthHdr { dst: spec.dst_mac, src: spec.src_mac, ethertype: ETHERTYPE_IPV4.into() };
    out.extend_from_slice(eth.as_bytes());
    let mut ip = Ipv4Hdr {
        ver_ihl: 0x45,
        tos: 0,
        total_len: ip_total16.into(),
        id: spec.ip_id.into(),
        frag: IPV4_DF.into(),
        ttl: if spec.ttl == 0 { 64 } else { spec.ttl },
        proto: IPPROTO_UDP,
        csum: 0.into(),
        src: spec.src_ip,
        dst: spec.dst_ip,
    };
    ip.csum = inet_checksum(ip.as_bytes()).into();
    out.extend_from_slice(ip.as_bytes());
    let udp = UdpHdr {
        sport: spec.udp_sport.into(),
        dport: ROCEV2_UDP_PORT.into(),
        len: (ip_total16 - 20).into(),
        csum: 0.into(),
    };
    out.extend_from_slice(udp.as_bytes());
    let bth = Bth {
        opcode: spec.opcode,
        flags: if spec.solicited { BTH_SE } else { 0 } | ((pad as u8) << BTH_PAD_SHIFT),
        pkey: spec.pkey.into(),
        fecn_becn: 0,
        dest_qp: put24(spec.dest_qp),
        ack_req: if spec.ack_req { BTH_ACKREQ } else { 0 },
        psn: put24(spec.psn),
    };
    out.extend_from_slice(bth.as_bytes());
    if let Some(h) = spec.reth {
        out.extend_from_slice(h.as_bytes());
    }
    if let Some(h) = spec.aeth {
        out.extend_from_slice(h.as_bytes());
    }
    if let Some(h) = spec.deth {
        out.extend_from_slice(h.as_bytes());
    }
    if let Some(v) = spec.imm {
        out.extend_from_slice(&v.to_be_bytes());
    }
    if let Some(v) = spec.ieth {
        out.extend_from_slice(&v.to_be_bytes());
    }
    if let Some(h) = spec.atomic {
        out.extend_from_slice(h.as_bytes());
    }
    if let Some(v) = spec.atomic_ack {
        out.extend_from_slice(&v.to_be_bytes());
    }
    out.extend_from_slice(payload);
    out.extend_from_slice(&[0u8; 3][..pad]);
    let crc = icrc::compute(&out[IP_OFF..]);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// Build a 42-byte ARP frame.
pub fn build_arp(oper: u16, sha: [u8; 6], spa: [u8; 4], tha: [u8; 6], tpa: [u8; 4], eth_dst: [u8; 6], out: &mut Vec<u8>) {
    out.clear();
    let eth = EthHdr { dst: eth_dst, src: sha, ethertype: ETHERTYPE_ARP.into() };
    let arp = ArpPkt {
        htype: 1.into(),
        ptype: ETHERTYPE_IPV4.into(),
        hlen: 6,
        plen: 4,
        oper: oper.into(),
        sha,
        spa,
        tha,
        tpa,
    };
    out.extend_from_slice(eth.as_bytes());
    out.extend_from_slice(arp.as_bytes());
}

/// PSN arithmetic mod 2^24: signed distance `a - b` (rxe `psn_compare` semantics).
pub fn psn_diff(a: u32, b: u32) -> i32 {
    ((a.wrapping_sub(b)) << 8) as i32 >> 8
}
/// `psn + n` mod 2^24.
pub fn psn_add(psn: u32, n: u32) -> u32 {
    psn.wrapping_add(n) & MASK24
}
