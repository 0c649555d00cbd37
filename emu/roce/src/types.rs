//! The engine's neutral vocabulary: handles, QP attributes, work requests, completions, and
//! the two traits the adapter model implements (physical memory, key translation).
//! Nothing here knows mlx5 formats.

macro_rules! handle {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub struct $name(pub u32);
        impl core::fmt::Display for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                write!(f, "{}({:#x})", stringify!($name), self.0)
            }
        }
    };
}
handle!(/// Queue pair number (24 bits).
    Qpn);
handle!(/// Shared receive queue number: receive WQEs several QPs take from.
    Srqn);
handle!(/// Local key (scatter/gather entries of our own work requests).
    Lkey);
handle!(/// Remote key (carried in RETH/IETH by the peer).
    Rkey);

/// IPv4 address, network-order bytes.
pub type Ipv4 = [u8; 4];
/// MAC address.
pub type Mac = [u8; 6];

/// QP transport type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpType {
    /// Reliable connected.
    Rc,
    /// Unreliable datagram (QP1/GSI is a UD QP with Q_Key 0x80010000).
    Ud,
}

/// QP state (IBA 10.3.1; SQD/SQE are not modelled).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QpState {
    #[default]
    Reset,
    Init,
    Rtr,
    Rts,
    Error,
}

/// Access rights (of a QP for incoming requests, of a key, or needed by an access).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Access {
    pub local_write: bool,
    pub remote_read: bool,
    pub remote_write: bool,
    pub remote_atomic: bool,
}
impl Access {
    pub const NONE: Access = Access { local_write: false, remote_read: false, remote_write: false, remote_atomic: false };
    pub const LOCAL_WRITE: Access = Access { local_write: true, ..Access::NONE };
    pub const REMOTE_READ: Access = Access { remote_read: true, ..Access::NONE };
    pub const REMOTE_WRITE: Access = Access { remote_write: true, ..Access::NONE };
    pub const ALL: Access = Access { local_write: true, remote_read: true, remote_write: true, remote_atomic: true };
    /// Whether `self` grants everything in `need`.
    pub fn allows(&self, need: Access) -> bool {
        (!need.local_write || self.local_write)
            && (!need.remote_read || self.remote_read)
            && (!need.remote_write || self.remote_write)
            && (!need.remote_atomic || self.remote_atomic)
    }
}

/// QP attributes. The model keeps one per QP, updates the fields each mlx5 transition command
/// carries and passes the whole struct to [`crate::Engine::modify_qp`]; the engine takes, per
/// target state, the fields that transition defines (IBA 11.2.4.2):
/// INIT: `access`, `qkey`, `pkey`; RTR: `remote_*`, `udp_sport`, `rq_psn`, `pmtu`,
/// `max_dest_rd_atomic`, `min_rnr_timer`; RTS: `sq_psn`, `timeout`, `retry_cnt`, `rnr_retry`,
/// `max_rd_atomic`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpAttrs {
    pub access: Access,
    /// Q_Key for UD QPs (QP1 always uses GSI_QKEY).
    pub qkey: u32,
    pub pkey: u16,
    pub remote_qpn: Qpn,
    pub remote_ip: Ipv4,
    pub remote_mac: Mac,
    /// UDP source port (flow entropy) of this QP's packets.
    pub udp_sport: u16,
    /// PSN the responder expects first.
    pub rq_psn: u32,
    /// PSN of the requester's first packet.
    pub sq_psn: u32,
    /// Path MTU in bytes: 256, 512, 1024, 2048 or 4096.
    pub pmtu: u32,
    /// Local ACK timeout exponent: 4.096 µs × 2^timeout; 0 = never time out.
    pub timeout: u8,
    /// Transport retries (7 = infinite).
    pub retry_cnt: u8,
    /// RNR retries (7 = infinite).
    pub rnr_retry: u8,
    /// RNR NAK timer code we send as responder (table in wire.md §1.5).
    pub min_rnr_timer: u8,
    /// RDMA READs we may have outstanding as requester.
    pub max_rd_atomic: u8,
    /// RDMA READs we accept outstanding as responder.
    pub max_dest_rd_atomic: u8,
}
impl Default for QpAttrs {
    fn default() -> Self {
        QpAttrs {
            access: Access::NONE,
            qkey: 0,
            pkey: crate::wire::DEFAULT_PKEY,
            remote_qpn: Qpn(0),
            remote_ip: [0; 4],
            remote_mac: [0; 6],
            udp_sport: 0xC000,
            rq_psn: 0,
            sq_psn: 0,
            pmtu: 1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
        }
    }
}

/// One local scatter/gather entry: `len` bytes at `addr` (an address in `lkey`'s space).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sge {
    pub addr: u64,
    pub len: u32,
    pub lkey: Lkey,
}

/// Where a send's payload comes from (or a READ's data goes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gather {
    /// Local memory through lkeys.
    Sges(Vec<Sge>),
    /// Bytes copied into the WQE (mlx5 inline segments). Not valid for READ.
    Inline(Vec<u8>),
}
impl Gather {
    /// Total length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            Gather::Sges(s) => s.iter().map(|s| u64::from(s.len)).sum(),
            Gather::Inline(b) => b.len() as u64,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a send work request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    Send,
    SendWithImm(u32),
    /// SEND that invalidates this rkey at the responder.
    SendWithInvalidate(Rkey),
    RdmaWrite { remote_va: u64, rkey: Rkey },
    RdmaWriteWithImm { remote_va: u64, rkey: Rkey, imm: u32 },
    RdmaRead { remote_va: u64, rkey: Rkey },
}

/// Destination of a UD send (an address vector).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UdAddr {
    pub remote_qpn: Qpn,
    /// Q_Key to put in the DETH (QP1 sends always use GSI_QKEY).
    pub qkey: u32,
    pub dest_ip: Ipv4,
    pub dest_mac: Mac,
    pub udp_sport: u16,
}

/// A send-queue work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr {
    pub wr_id: u64,
    pub op: SendOp,
    pub data: Gather,
    /// Produce a completion on success (errors always complete).
    pub signaled: bool,
    /// Set the BTH SE bit on the last packet (SEND / WRITE with immediate).
    pub solicited: bool,
    /// Fenced: not begun until every earlier RDMA READ of the send queue has completed (its
    /// response placed); later requests wait behind it.
    pub fence: bool,
    /// For UD QPs only.
    pub ud: Option<UdAddr>,
}

/// A receive-queue work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWr {
    pub wr_id: u64,
    pub sges: Vec<Sge>,
}

/// Completion status (IB verbs names; the model maps them to mlx5 CQE syndromes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WcStatus {
    #[default]
    Success,
    LocalLength,
    LocalQpOperation,
    LocalProtection,
    WrFlushed,
    BadResponse,
    LocalAccess,
    RemoteInvalidRequest,
    RemoteAccess,
    RemoteOperation,
    RetryExceeded,
    RnrRetryExceeded,
}

/// What completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WcOpcode {
    #[default]
    Send,
    RdmaWrite,
    RdmaRead,
    Recv,
    RecvWithImm,
    RecvRdmaWithImm,
}

/// Which work queue a completion belongs to (the model routes it to that queue's CQ).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WorkQueue {
    #[default]
    Send,
    Recv,
}

/// One completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Completion {
    pub qpn: Qpn,
    pub queue: WorkQueue,
    pub wr_id: u64,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    /// Bytes received (receive completions; UD includes the 40-byte GRH area) or read.
    pub byte_len: u32,
    pub imm: Option<u32>,
    /// The rkey invalidated by an incoming SEND WITH INVALIDATE.
    pub invalidated_rkey: Option<Rkey>,
    /// UD receives: source QPN and source IPv4 (from the GRH area).
    pub src_qp: Qpn,
    pub src_ip: Ipv4,
    /// UD receives: a GRH area (40 bytes) precedes the data.
    pub grh: bool,
    /// Raw detail for error completions (NAK syndrome, or 0).
    pub vendor_err: u8,
    /// Receive completions: the message's last packet had the BTH SE bit (solicited event).
    pub solicited: bool,
}

/// A physically contiguous piece of a translated range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub pa: u64,
    pub len: u64,
}

/// Which key a translation uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyRef {
    /// Our own work request's scatter/gather entry.
    Local(Lkey),
    /// A peer's RETH / READ request.
    Remote(Rkey),
}

/// Why a key translation failed (the model may carry its own raw code in `Other`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyError {
    /// No such key, or invalidated / not valid.
    InvalidKey,
    /// Range outside the registration.
    OutOfBounds,
    /// The registration does not grant the access.
    AccessDenied,
    /// Key belongs to another protection domain than the QP.
    WrongPd,
    Other(u32),
}

/// Physical memory error (address outside the machine's memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemError {
    pub pa: u64,
    pub len: u64,
}

/// Physical memory as the adapter's DMA engine sees it. The model implements it over its PhysMem.
pub trait Memory {
    fn read(&mut self, pa: u64, buf: &mut [u8]) -> Result<(), MemError>;
    fn write(&mut self, pa: u64, data: &[u8]) -> Result<(), MemError>;
}

/// Memory-key checks and translation, implemented by the model over its MKey table.
pub trait Keys {
    /// Check that `[va, va+len)` lies inside `key`'s registration, which must belong to `qp`'s
    /// protection domain and grant `need`; return the physically contiguous extent starting at
    /// `va` (`0 < extent.len <= len`; for `len == 0` any extent with `len == 0`). The engine calls
    /// again with `va + extent.len` for the rest, so page-sized answers are fine.
    fn translate(&mut self, qp: Qpn, key: KeyRef, va: u64, len: u64, need: Access) -> Result<Extent, KeyError>;
    /// Invalidate `rkey` for an incoming SEND WITH INVALIDATE on `qp`.
    fn invalidate(&mut self, qp: Qpn, rkey: Rkey) -> Result<(), KeyError>;
}

/// Errors of the engine's control calls (raw values carried).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineError {
    NoSuchQp(Qpn),
    QpExists(Qpn),
    NoSuchSrq(Srqn),
    SrqExists(Srqn),
    /// QPN 0 or above 24 bits.
    BadQpn(Qpn),
    /// Transition not allowed from the current state.
    BadTransition { from: QpState, to: QpState },
    /// Posting to a QP in a state that does not accept it (RESET for recv; <RTS for send).
    BadState(QpState),
    /// Attribute out of range (e.g. PMTU not a power of two in 256..4096).
    BadAttr(&'static str),
    /// Operation not valid on this QP type (e.g. READ on UD, UD send without address).
    BadOp,
    /// UD message larger than the path MTU.
    TooLong(u64),
}

/// Port configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortConfig {
    pub mac: Mac,
    pub ip: Ipv4,
    /// Answer ARP requests for `ip` in the engine (a NIC-side responder). When false, ARP
    /// requests go up the raw path only and the driver answers them.
    pub answer_arp: bool,
    /// Largest UD payload (the port's active MTU, 1024 on a 1500-byte link).
    pub ud_mtu: u32,
    /// TTL of emitted IPv4 packets.
    pub ttl: u8,
    /// A QP's transport `retry_cnt` of 7 retries for ever (rxe's reading). False: 7 retries,
    /// then RetryExceeded, as the IBA Retry Count (7 the largest count; only the RNR retry
    /// count has an infinite value) and as ConnectX adapters do.
    pub retry_cnt_7_infinite: bool,
}
impl Default for PortConfig {
    fn default() -> Self {
        PortConfig { mac: [0x02, 0, 0, 0, 0, 1], ip: [10, 0, 0, 1], answer_arp: true, ud_mtu: 1024, ttl: 64, retry_cnt_7_infinite: true }
    }
}
