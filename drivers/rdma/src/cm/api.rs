//! The CM's public vocabulary: connection handles, configuration, errors, events, the
//! parameters of connect/accept and the counters [`super::Cm`] reports.

use super::*;

/// A connection handle: our Local Communication ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub u32);

/// CM tunables (defaults = what Linux rdma_cm sends over RoCE, wire.md §2.3).
#[derive(Debug, Clone, Copy)]
pub struct CmConfig {
    /// Our port's path MTU in bytes (rxe on a 1500-byte link: 1024).
    pub mtu: u32,
    /// Local and Remote CM Response Timeout we advertise (IBA exponent).
    pub cm_response_timeout: u8,
    /// Max CM Retries for REQ/DREQ we send.
    pub max_cm_retries: u8,
    /// Packet life time exponent (rdma_cm RoCE: 18) — for CM timers.
    pub packet_life_time: u8,
    /// RC Local ACK Timeout we put in the REQ and use for our QPs (Linux: 19).
    pub local_ack_timeout: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    /// Our QPs' min RNR NAK timer code (IBA table; 12 = 0.64 ms).
    pub min_rnr_timer: u8,
    /// Target ACK Delay we advertise in REP (rxe: 15).
    pub target_ack_delay: u8,
    /// How long a closed connection stays in timewait.
    pub timewait_ns: u64,
    /// High 32 bits of our TIDs (Linux: MAD agent hi_tid).
    pub tid_hi: u32,
    /// Seed for comm IDs, PSNs and source ports.
    pub seed: u64,
    /// QP1 receive buffers to keep posted.
    pub recv_slots: usize,
    /// QP1 send slots (MADs in flight).
    pub send_slots: usize,
    /// Bounds on the timers and retry counts a peer's REQ/REP/MRA may set ([`PeerClamps`]).
    pub clamps: PeerClamps,
    /// Table size and REQ admission per source ([`CmLimits`]).
    pub limits: CmLimits,
}

impl Default for CmConfig {
    fn default() -> Self {
        CmConfig {
            mtu: 1024,
            cm_response_timeout: 20,
            max_cm_retries: 15,
            packet_life_time: 18,
            local_ack_timeout: 19,
            retry_count: 7,
            rnr_retry_count: 7,
            min_rnr_timer: 12,
            target_ack_delay: 15,
            timewait_ns: 4_000_000_000,
            tid_hi: 1,
            seed: 0x5eed_c0de_1234_5678,
            recv_slots: 64,
            send_slots: 64,
            clamps: PeerClamps::default(),
            limits: CmLimits::default(),
        }
    }
}

/// Errors of the rdma crate's CM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmError<E> {
    /// The device refused (raw device error inside).
    Verbs(E),
    UnknownConn(ConnId),
    /// The call does not fit the connection's state.
    BadState(ConnId),
    PrivateDataTooLong { max: usize, got: usize },
    PortInUse(u16),
    /// The peer's MAC is not resolved (yet).
    NoRoute(Ipv4),
    /// The connection table holds `CmLimits::max_conns` connections.
    TableFull,
    /// The heap could not provide the CM's tables at creation.
    NoMemory,
}

/// A REQ a listener received, waiting for [`Cm::accept`] or [`Cm::reject`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectRequest {
    pub id: ConnId,
    /// The listening port it came for.
    pub port: u16,
    pub peer_ip: Ipv4,
    /// The active side's rdma_cm source port.
    pub peer_port: u16,
    /// READs the peer lets us have outstanding at it (its Responder Resources).
    pub responder_resources: u8,
    /// READs the peer wants outstanding at us (its Initiator Depth).
    pub initiator_depth: u8,
    /// Private data after the rdma_cm header (e.g. nvme_rdma_cm_req at offset 0).
    pub private_data: [u8; REQ_PRIVATE_DATA_MAX],
}

/// What the CM tells the app.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmEvent {
    ConnectRequest(ConnectRequest),
    /// The QP is in RTS and the peer knows it. `private_data`: REP's (active side) or
    /// RTU's (passive side).
    Established { id: ConnId, qpn: Qpn, private_data: [u8; rep_f::PRIVATE_DATA_LEN] },
    /// The peer answered with REJ (active: to our REQ; passive: to our REP).
    Rejected { id: ConnId, reason: u16, private_data: [u8; rej_f::PRIVATE_DATA_LEN] },
    /// No answer after all retries (REQ, REP or address resolution).
    Unreachable { id: ConnId },
    /// Closed by DREQ/DREP (either side) or DREQ timeout; the QP is destroyed.
    Disconnected { id: ConnId },
}

/// Parameters of an active connect.
#[derive(Debug, Clone, Copy)]
pub struct ConnectParams<'a> {
    pub dest_ip: Ipv4,
    pub dest_port: u16,
    /// rdma_cm source port for the cma header and flow label; 0 = pick one.
    pub src_port: u16,
    pub send_cq: Cqn,
    pub recv_cq: Cqn,
    pub sq_size: u32,
    pub rq_size: u32,
    /// Posted on the new QP before the REQ leaves.
    pub recv_wrs: &'a [RecvWr],
    /// After the rdma_cm header; at most [`REQ_PRIVATE_DATA_MAX`] bytes.
    pub private_data: &'a [u8],
    /// READs we accept from the peer (REQ Responder Resources).
    pub responder_resources: u8,
    /// READs we want outstanding at the peer (REQ Initiator Depth).
    pub initiator_depth: u8,
    pub access: Access,
}

/// Parameters of a passive accept.
#[derive(Debug, Clone, Copy)]
pub struct AcceptParams<'a> {
    pub send_cq: Cqn,
    pub recv_cq: Cqn,
    pub sq_size: u32,
    pub rq_size: u32,
    /// Posted on the new QP before the REP leaves.
    pub recv_wrs: &'a [RecvWr],
    /// REP private data, at most 196 bytes.
    pub private_data: &'a [u8],
    /// READs we accept from the peer (REP Responder Resources), capped by REQ Initiator Depth.
    pub responder_resources: u8,
    /// READs we want outstanding at the peer (REP Initiator Depth), capped by REQ Responder Resources.
    pub initiator_depth: u8,
    pub access: Access,
}

/// CM counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CmStats {
    pub mads_rx: u64,
    pub mads_tx: u64,
    pub bad_mads: u64,
    pub resends: u64,
    pub dup_reqs: u64,
    pub stale_rejects: u64,
    pub send_ring_full: u64,
    /// MADs that found no MAC for their source on arrival (ARP asked); a new REQ among them
    /// is held for the answer (`route_waits`) when there is room, the rest are dropped.
    pub no_route: u64,
    /// New REQs held until their source's MAC was known; of them, handled once it was
    /// (`route_waits_answered`) and dropped after `CmLimits::unrouted_wait_ns` without it.
    pub route_waits: u64,
    pub route_waits_answered: u64,
    pub route_waits_expired: u64,
    pub ignored: u64,
    /// MADs naming one of our connections that came from another source address than the
    /// connection's peer (or a REQ whose Primary Local Port GID is not its source): dropped
    /// (a REQ gets REJ INVALID_GID) before they touch the connection.
    pub wrong_source: u64,
    /// Peer-chosen timer / retry fields lowered or raised by [`PeerClamps`].
    pub clamped: u64,
    /// REQs refused (REJ NO_RESOURCES): the source's rate, its held entries, the table full.
    pub refused_rate: u64,
    pub refused_per_source: u64,
    pub refused_table_full: u64,
}
