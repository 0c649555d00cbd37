//! The verbs interface: what an app (NVMe-oF, rping-like tools, CM) may ask of an RDMA device.
//!
//! Three parts, so that each can have its own owner: [`Control`] (memory registration, object
//! lifecycle, the GSI QP, housekeeping, recovery: firmware commands, the slow path),
//! [`DataPath`] (post, ring, poll on objects `Control` created: the per-I/O path) and
//! [`Neighbours`] (addresses and ARP). [`Verbs`] is all three on one device; [`SrqVerbs`] adds
//! the control part of shared receive queues. The split is the seam along which a poll group's
//! data path is to move to its own CPU (issue #13): today one object implements every part.
//!
//! Poll-first: nothing here blocks. `post_*` write work requests and ring a doorbell,
//! `poll_cq` drains completions into a caller-provided slice. Implementations must not
//! allocate, lock or log per operation.
//!
//! Batching: `post_send_deferred` writes a send WR without ringing the doorbell and
//! `ring_send` rings once for all of them (`post_send_batch` does both for a slice), so a
//! consumer that posts several WRs per turn pays one doorbell (one MMIO write on mlx5).
//! `post_recv_batch` posts receives with one doorbell-record update. The defaults post one
//! by one, so every implementation stays correct without them. [`SrqVerbs`] adds shared
//! receive queues; many QPs may complete to one CQ on every implementation. [`GroupVerbs`] adds
//! poll groups whose data path is a value of its own, held by the group ([`GroupVerbs::Group`]).

use hal::PhysAddr;

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
handle!(/// Queue pair number (24 bits on the wire).
    Qpn);
handle!(/// Completion queue number.
    Cqn);
handle!(/// Shared receive queue of a device ([`SrqVerbs`]).
    Srqn);
handle!(/// Protection domain number.
    Pdn);
handle!(/// Local memory key (used in local scatter/gather entries).
    Lkey);
handle!(/// Remote memory key (handed to a peer for RDMA READ/WRITE).
    Rkey);

impl Rkey {
    /// The 8-bit variant: the key's low byte (`mkey_7_0` on mlx5, the "key" part of an IB
    /// R_Key); the upper 24 bits name the registration.
    pub const fn variant(self) -> u8 {
        self.0 as u8
    }
    /// Same registration, next variant: what a fast registration hands out, so that a key a
    /// peer kept from an earlier registration of the same buffer never matches again.
    pub const fn next_variant(self) -> Rkey {
        Rkey((self.0 & !0xff) | (self.variant().wrapping_add(1) as u32))
    }
}

/// An IPv4 address in network order bytes.
pub type Ipv4 = [u8; 4];
/// An Ethernet MAC address.
pub type Mac = [u8; 6];

/// One scatter/gather entry: physical address, length, local key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sge {
    pub addr: PhysAddr,
    pub len: u32,
    pub lkey: Lkey,
}

/// Remote access rights of a memory registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Access {
    pub local_write: bool,
    pub remote_read: bool,
    pub remote_write: bool,
}

/// What a send-queue work request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    Send,
    SendWithImm(u32),
    /// SEND that invalidates `Rkey` at the responder.
    SendWithInvalidate(Rkey),
    RdmaWrite { remote_addr: u64, rkey: Rkey },
    RdmaWriteWithImm { remote_addr: u64, rkey: Rkey, imm: u32 },
    RdmaRead { remote_addr: u64, rkey: Rkey },
    /// Fast registration (IB_WR_REG_MR): make `key` (a key from [`Control::alloc_fast_mr`] with
    /// its next variant, see [`Rkey::next_variant`]) valid for exactly the physically
    /// contiguous `[addr, addr + len)` with `access`; earlier variants stop matching. The
    /// device runs it in send-queue order, before any later WR of the queue. No payload.
    RegMr { key: Rkey, addr: PhysAddr, len: u32, access: Access },
    /// Local invalidation (IB_WR_LOCAL_INV): `key` stops granting any access.
    LocalInvalidate(Rkey),
}

/// Destination of a UD send (QP1 / CM): an address vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UdDest {
    pub remote_qpn: Qpn,
    pub qkey: u32,
    pub dest_ip: Ipv4,
    pub dest_mac: Mac,
    /// UDP source port to use for this datagram (entropy).
    pub udp_sport: u16,
}

/// A send work request. `sge.len == 0` means no payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWr {
    pub wr_id: u64,
    pub op: SendOp,
    pub sge: Sge,
    /// Generate a completion for this request (unsignaled ones complete silently).
    pub signaled: bool,
    /// Fenced (IBA `IB_SEND_FENCE`): the device does not begin this request until every RDMA
    /// READ (and atomic) posted before it on the same send queue has completed, its data
    /// placed. A READ that fails leaves the fenced request flushed, never sent. Requests after
    /// it wait behind it (send-queue order), so a fence stalls the queue for one READ.
    pub fence: bool,
    /// For UD QPs only.
    pub ud: Option<UdDest>,
}

/// A receive work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvWr {
    pub wr_id: u64,
    pub sge: Sge,
}

/// Completion status, as IB verbs name them (mlx5 CQE syndromes map onto these).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WcStatus {
    #[default]
    Success,
    LocalLength,
    LocalQpOperation,
    LocalProtection,
    WrFlushed,
    MemoryWindowBind,
    BadResponse,
    LocalAccess,
    RemoteInvalidRequest,
    RemoteAccess,
    RemoteOperation,
    RetryExceeded,
    RnrRetryExceeded,
    RemoteAborted,
    /// A status the device reported that has no name here (raw syndrome).
    Other(u8),
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
    /// A [`SendOp::RegMr`] completed.
    RegMr,
    /// A [`SendOp::LocalInvalidate`] completed.
    LocalInvalidate,
}

/// One work completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Completion {
    pub wr_id: u64,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    pub qpn: Qpn,
    /// Bytes received (receive completions).
    pub byte_len: u32,
    pub imm: Option<u32>,
    /// The rkey the peer invalidated with SEND WITH INVALIDATE.
    pub invalidated_rkey: Option<Rkey>,
    /// UD receives: source QPN.
    pub src_qp: Qpn,
    /// Device-specific error detail (mlx5: vendor_err_synd), 0 on success.
    pub vendor_err: u8,
}

/// QP attributes needed to bring an RC QP to RTS towards a RoCEv2 peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RcConnectAttrs {
    pub remote_qpn: Qpn,
    pub remote_ip: Ipv4,
    pub remote_mac: Mac,
    /// PSN we expect the peer to start with.
    pub rq_psn: u32,
    /// PSN our first request carries.
    pub sq_psn: u32,
    /// Path MTU in bytes (256..4096).
    pub mtu: u32,
    pub udp_sport: u16,
    /// Transport retries (7 = infinite) and RNR retries.
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    /// Local ACK timeout exponent (4.096 µs × 2^timeout).
    pub timeout: u8,
    pub min_rnr_timer: u8,
    /// RDMA READs we may have outstanding as requester / accept as responder.
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub access: Access,
}

/// What every part of a device's interface shares: its error type (one per device, carrying
/// the raw status).
pub trait VerbsError {
    type Error: core::fmt::Debug;
}

/// The device's addresses and its neighbour resolution (ARP on RoCEv2): what the CM and a
/// connecting app ask before a QP exists. Slow path.
pub trait Neighbours: VerbsError {
    /// This port's addresses.
    fn local_ip(&self) -> Ipv4;
    fn local_mac(&self) -> Mac;
    /// Resolve a peer's MAC (ARP); `None` while unresolved (a request is sent).
    fn resolve_mac(&mut self, ip: Ipv4) -> Option<Mac>;
}

/// The control part: memory, object lifecycle (CQ, QP, GSI), device housekeeping and
/// recovery. Every call may run a firmware command or walk the device's tables; none belongs
/// on the per-I/O path. Whoever owns the control part (the CM / admin side) creates the
/// objects a poller then drives through [`DataPath`].
pub trait Control: VerbsError {
    /// Memory the app reads and writes and the device DMAs.
    type Buf: hal::DmaRegion;

    /// Allocate DMA memory for buffers (setup path, not per I/O).
    fn alloc_buf(&mut self, len: usize) -> Result<Self::Buf, Self::Error>;
    /// Register `len` bytes at `addr` (physically contiguous) with `access`.
    fn reg_mr(&mut self, addr: PhysAddr, len: u64, access: Access) -> Result<(Lkey, Rkey), Self::Error>;
    /// Release a registration (`reg_mr` or `alloc_fast_mr`), by any variant of its key.
    fn dereg_mr(&mut self, lkey: Lkey) -> Result<(), Self::Error>;
    /// Create a fast-registration key for ranges of up to `max_len` bytes (setup path, like
    /// ib_alloc_mr). The key starts invalid: it grants nothing until a [`SendOp::RegMr`]
    /// through a send queue scopes it to one physically contiguous range and one set of rights,
    /// and a [`SendOp::LocalInvalidate`] or the peer's SEND WITH INVALIDATE revokes it again.
    /// Per I/O this costs send-queue work, not a command to the device.
    fn alloc_fast_mr(&mut self, max_len: u64) -> Result<Rkey, Self::Error>;

    fn create_cq(&mut self, entries: u32) -> Result<Cqn, Self::Error>;
    fn destroy_cq(&mut self, cq: Cqn) -> Result<(), Self::Error>;
    /// Create an RC QP in RESET, sized for `sq`/`rq` work requests. A `SendOp::RegMr` may take
    /// the room of 3 plain send requests and a `SendOp::LocalInvalidate` of 2 (mlx5: UMR WQEs
    /// of 3 and 2 WQEBBs); size `sq` for that.
    fn create_rc_qp(&mut self, send_cq: Cqn, recv_cq: Cqn, sq: u32, rq: u32) -> Result<Qpn, Self::Error>;
    /// RESET → INIT → RTR → RTS.
    fn connect_rc_qp(&mut self, qp: Qpn, attrs: &RcConnectAttrs) -> Result<(), Self::Error>;
    /// Move to ERROR: outstanding work completes with `WrFlushed`.
    fn qp_to_error(&mut self, qp: Qpn) -> Result<(), Self::Error>;
    fn destroy_qp(&mut self, qp: Qpn) -> Result<(), Self::Error>;
    /// The GSI QP (QP1) for CM MADs, created at bring-up. Sends need `SendWr::ud`
    /// (remote QPN 1, Q_Key 0x80010000); the device checks incoming Q_Keys against
    /// 0x80010000. Every UD receive starts with a 40-byte GRH area: for RoCEv2 over IPv4 the
    /// received IPv4 header sits in bytes 20..40 (source address at 32..36), as rxe and
    /// mlx5 deliver it; `byte_len` counts those 40 bytes.
    fn gsi_qp(&self) -> Qpn;
    /// The CQ the GSI QP's send and receive completions go to (created at bring-up with it).
    /// The CM polls it; nothing else should.
    fn gsi_cq(&self) -> Cqn;

    /// Slow-path housekeeping (EQ, ARP, timers). Called from the app's poll loop.
    fn poll(&mut self);
    /// The device failed (dead firmware, a fatal event) and was reset: every work request
    /// outstanding completes with a flush error, posts and creates fail, releases succeed
    /// without the device. The app releases what it holds on it, then calls
    /// [`Control::recover_device`].
    fn device_failed(&self) -> bool {
        false
    }
    /// Bring a failed device up again (a new GSI QP and CQ: [`Control::gsi_qp`] changes).
    /// Returns whether the device is up; false: not back yet, try again on a later turn.
    fn recover_device(&mut self) -> bool {
        !self.device_failed()
    }
    /// A QP the device moved to ERROR on its own (a catastrophic work-queue error, an invalid
    /// request or access error it reported asynchronously), oldest first; `None` when there is
    /// none. A QP whose receives come from an SRQ has no receive of its own to be flushed, so
    /// without this its owner may never learn the QP died. The default: the device reports none.
    fn take_qp_error(&mut self) -> Option<Qpn> {
        None
    }
}

/// The data path: post work requests, ring doorbells, poll completions, on objects the
/// [`Control`] part created. What a poller calls per I/O, so implementations must not allocate,
/// lock, log or search per call (objects are reached by index from their handle).
///
/// A poll group's part is a value of its own ([`GroupVerbs::Group`]); the device implements it
/// too, for the objects it polls itself (the GSI QP, queues outside groups).
pub trait DataPath: VerbsError {
    fn post_send(&mut self, qp: Qpn, wr: &SendWr) -> Result<(), Self::Error>;
    /// Write a send WR without ringing the doorbell. The device may not start it before the
    /// next `ring_send(qp)` or `post_send(qp, ..)` (which rings for everything written before
    /// it, in order). Errors are those of `post_send`. Default: `post_send` (rings at once).
    fn post_send_deferred(&mut self, qp: Qpn, wr: &SendWr) -> Result<(), Self::Error> {
        self.post_send(qp, wr)
    }
    /// Ring the send doorbell once for every WR written by `post_send_deferred` on `qp` since
    /// the last ring; nothing happens when none is pending. Default: nothing (the default
    /// `post_send_deferred` already rang).
    fn ring_send(&mut self, qp: Qpn) -> Result<(), Self::Error> {
        let _ = qp;
        Ok(())
    }
    /// Write `first`, then `second`, without ringing, as `post_send_deferred` each (mlx5: one
    /// room check and one producer update for both; the NVMe-oF target's zero-copy Read: its
    /// RDMA WRITE and its response). On an error `first` may be written, `second` is not.
    /// Default: `post_send_deferred` each.
    fn post_send_deferred_pair(&mut self, qp: Qpn, first: &SendWr, second: &SendWr) -> Result<(), Self::Error> {
        self.post_send_deferred(qp, first)?;
        self.post_send_deferred(qp, second)
    }
    /// Post `wrs` in order with one doorbell. On an error the WRs before the failing one are
    /// posted (and rung), the rest are not.
    fn post_send_batch(&mut self, qp: Qpn, wrs: &[SendWr]) -> Result<(), Self::Error> {
        let mut r = Ok(());
        for wr in wrs {
            r = self.post_send_deferred(qp, wr);
            if r.is_err() {
                break;
            }
        }
        let rung = self.ring_send(qp);
        r.and(rung)
    }
    /// Post a receive. Allowed in any state but ERROR, including RESET right after
    /// `create_rc_qp`: the device holds the WR until the QP reaches RTR, so a consumer can
    /// post its receive buffers before the CM sends REP/RTU (no RNR window).
    fn post_recv(&mut self, qp: Qpn, wr: &RecvWr) -> Result<(), Self::Error>;
    /// Post `wrs` in order (mlx5: one doorbell-record update). On an error the WRs before
    /// the failing one are posted. Default: `post_recv` each.
    fn post_recv_batch(&mut self, qp: Qpn, wrs: &[RecvWr]) -> Result<(), Self::Error> {
        for wr in wrs {
            self.post_recv(qp, wr)?;
        }
        Ok(())
    }
    /// Post a receive to a shared receive queue ([`SrqVerbs`]).
    fn post_srq_recv(&mut self, srq: Srqn, wr: &RecvWr) -> Result<(), Self::Error>;
    /// Post several receives (one doorbell-record update on mlx5); on an error the ones before
    /// it are posted. The default posts one by one.
    fn post_srq_recv_batch(&mut self, srq: Srqn, wrs: &[RecvWr]) -> Result<(), Self::Error> {
        for wr in wrs {
            self.post_srq_recv(srq, wr)?;
        }
        Ok(())
    }
    /// Drain up to `out.len()` completions; returns how many were written.
    fn poll_cq(&mut self, cq: Cqn, out: &mut [Completion]) -> usize;
}

/// The whole interface an RDMA app is generic over: control, data path and neighbours of one
/// device. Implemented for every type that implements the three parts.
pub trait Verbs: Control + DataPath + Neighbours {}
impl<T: Control + DataPath + Neighbours> Verbs for T {}

/// Shared receive queues, for poll groups (SPDK's model: one SRQ per poller whose receives all
/// its QPs share, so receive memory grows with pollers, not connections). A QP created on an
/// SRQ has no receive queue of its own (`post_recv` on it fails); its receive completions go to
/// its receive CQ (which other QPs may share) with the `wr_id` posted to the SRQ. With the SRQ
/// empty an RC sender is told to retry (RNR NAK) until a receive is posted. The SRQ's receives
/// are posted through the data path ([`DataPath::post_srq_recv`]); this is its control part.
pub trait SrqVerbs: Verbs {
    /// An SRQ holding at least `max_wr` receives (one scatter entry each).
    fn create_srq(&mut self, max_wr: u32) -> Result<Srqn, Self::Error>;
    /// Refused while a QP takes its receives from it.
    fn destroy_srq(&mut self, srq: Srqn) -> Result<(), Self::Error>;
    /// An RC QP in RESET (like `create_rc_qp`) whose receives come from `srq`.
    fn create_rc_qp_srq(&mut self, send_cq: Cqn, recv_cq: Cqn, sq: u32, srq: Srqn) -> Result<Qpn, Self::Error>;
    /// Arm the SRQ limit: the first time fewer than `limit` receives remain posted, the SRQ
    /// reports it once ([`srq_limit_reached`](Self::srq_limit_reached)) and disarms.
    fn arm_srq(&mut self, srq: Srqn, limit: u32) -> Result<(), Self::Error>;
    /// Whether the armed limit was reached since the last call (consumes the report; slow path).
    fn srq_limit_reached(&mut self, srq: Srqn) -> bool;
}

impl<T: VerbsError + ?Sized> VerbsError for &mut T {
    type Error = T::Error;
}

/// A data path borrowed is a data path.
impl<T: DataPath + ?Sized> DataPath for &mut T {
    #[inline(always)]
    fn post_send(&mut self, qp: Qpn, wr: &SendWr) -> Result<(), Self::Error> {
        (**self).post_send(qp, wr)
    }
    #[inline(always)]
    fn post_send_deferred(&mut self, qp: Qpn, wr: &SendWr) -> Result<(), Self::Error> {
        (**self).post_send_deferred(qp, wr)
    }
    #[inline(always)]
    fn ring_send(&mut self, qp: Qpn) -> Result<(), Self::Error> {
        (**self).ring_send(qp)
    }
    #[inline(always)]
    fn post_send_deferred_pair(&mut self, qp: Qpn, first: &SendWr, second: &SendWr) -> Result<(), Self::Error> {
        (**self).post_send_deferred_pair(qp, first, second)
    }
    #[inline(always)]
    fn post_send_batch(&mut self, qp: Qpn, wrs: &[SendWr]) -> Result<(), Self::Error> {
        (**self).post_send_batch(qp, wrs)
    }
    #[inline(always)]
    fn post_recv(&mut self, qp: Qpn, wr: &RecvWr) -> Result<(), Self::Error> {
        (**self).post_recv(qp, wr)
    }
    #[inline(always)]
    fn post_recv_batch(&mut self, qp: Qpn, wrs: &[RecvWr]) -> Result<(), Self::Error> {
        (**self).post_recv_batch(qp, wrs)
    }
    #[inline(always)]
    fn post_srq_recv(&mut self, srq: Srqn, wr: &RecvWr) -> Result<(), Self::Error> {
        (**self).post_srq_recv(srq, wr)
    }
    #[inline(always)]
    fn post_srq_recv_batch(&mut self, srq: Srqn, wrs: &[RecvWr]) -> Result<(), Self::Error> {
        (**self).post_srq_recv_batch(srq, wrs)
    }
    #[inline(always)]
    fn poll_cq(&mut self, cq: Cqn, out: &mut [Completion]) -> usize {
        (**self).poll_cq(cq, out)
    }
}

/// Poll groups (SPDK's pollers): one CQ that every QP of the group completes to, one SRQ its QPs
/// take their receives from, and the group's data path. The group value is its data path
/// ([`GroupVerbs::Group`] is a [`DataPath`]): whoever holds it posts and polls without the
/// device, so a group can be moved to the thread or CPU that polls it (it is `Send` where the
/// device's memory and registers are). On a device that splits its data path (mlx5:
/// `mlx5::QueueGroup`, its own rings and doorbell page) the group object is that data path; on
/// one that does not, the group is a [`SharedGroup`]: its CQ and SRQ and a handle on the
/// device's data path ([`shared_groups!`](crate::shared_groups)).
/// [`attach_group_qp`](Self::attach_group_qp)
/// and [`detach_group_qp`](Self::detach_group_qp) are the group's side of handing a QP over,
/// [`check_group`](Self::check_group), [`group_broken`](Self::group_broken) and
/// [`group_srq_limit_reached`](Self::group_srq_limit_reached) its side of device events (slow
/// path, no device: they can run where the group is polled); every other call is the control
/// part (slow path, with the device).
pub trait GroupVerbs: SrqVerbs {
    /// What the app holds for one group (the group's side: its QPs, and its data path: every
    /// post, ring and poll of the group goes through this value).
    type Group: DataPath<Error = Self::Error>;
    /// The control part's record of a group ([`group_ref`](Self::group_ref)).
    type GroupRef: Copy;
    /// An RC QP made for a group and not in it ([`make_group_qp`](Self::make_group_qp)).
    type GroupQp;
    /// The group's side, without the device, once per turn of the group before its CQ is
    /// polled (not per I/O): take in the device state the device published for it (mlx5: a
    /// device failure since it was made, a CQ error; its CQ then flushes what is
    /// outstanding), so a group polled on another thread or CPU learns it on its own.
    /// Default: nothing to take in.
    fn check_group(g: &mut Self::Group) {
        let _ = g;
    }
    /// The group's side, without the device (slow path): whether group `g` is broken for good:
    /// its CQ in error (an overrun the adapter reported), its SRQ failed, or its device failed
    /// since it was made. Its QPs are in ERROR and flush; the app closes its queues, gives it
    /// no new ones and replaces it once it holds none. Default: never.
    fn group_broken(g: &mut Self::Group) -> bool {
        let _ = g;
        false
    }
    /// A group whose CQ holds at least `cq_entries` completions and whose SRQ at least
    /// `srq_wrs` receives.
    fn create_group(&mut self, cq_entries: u32, srq_wrs: u32) -> Result<Self::Group, Self::Error>;
    fn group_cq(&self, g: &Self::Group) -> Cqn;
    fn group_srq(&self, g: &Self::Group) -> Srqn;
    /// What the control part keeps of group `g` to make and destroy its QPs while the group
    /// itself is driven elsewhere (another thread or CPU): its numbers, no access to its rings.
    fn group_ref(&self, g: &Self::Group) -> Self::GroupRef;
    /// An RC QP in RESET for the group `g` names (its completions to the group's CQ, its
    /// receives from the group's SRQ), sized for `sq` send WRs, not in the group yet: connect
    /// it ([`connect_made_qp`](Self::connect_made_qp)), then the group takes it
    /// ([`attach_group_qp`](Self::attach_group_qp), on the group's side), or destroy it
    /// ([`destroy_made_qp`](Self::destroy_made_qp)).
    fn make_group_qp(&mut self, g: &Self::GroupRef, sq: u32) -> Result<Self::GroupQp, Self::Error>;
    /// The QPN of a made QP.
    fn made_qpn(q: &Self::GroupQp) -> Qpn;
    /// RESET → INIT → RTR → RTS, as [`Control::connect_rc_qp`], for a QP not yet in its group.
    /// The peer may send from RTR on: the QP must be in its group before the peer learns its
    /// number (a passive side sends its CM REP once the group attached it).
    fn connect_made_qp(&mut self, q: &mut Self::GroupQp, attrs: &RcConnectAttrs) -> Result<(), Self::Error>;
    /// Destroy a made QP that is not in its group.
    fn destroy_made_qp(&mut self, q: Self::GroupQp) -> Result<(), Self::Error>;
    /// The active side of a connection (a CM that connects the QP itself when the peer's REP
    /// comes, by [`Control::connect_rc_qp`] on the QP's number): leave made QP `q` with the
    /// device, which connects it when asked by its number, until
    /// [`take_parked_qp`](Self::take_parked_qp) hands it back (to be attached once connected,
    /// or destroyed). Slow path; the device keeps its parked QPs in a short list it searches.
    fn park_made_qp(&mut self, q: Self::GroupQp) -> Qpn;
    /// The made QP `qp` left with [`park_made_qp`](Self::park_made_qp), taken back (`None`
    /// if none is parked under that number).
    fn take_parked_qp(&mut self, qp: Qpn) -> Option<Self::GroupQp>;
    /// The group's side, without the device (slow path: at the top of a turn): take `q` into
    /// `g`; its posts and completions go through the group from now on. A QP made for another
    /// group (or before a device reset) is refused and given back.
    fn attach_group_qp(g: &mut Self::Group, q: Self::GroupQp) -> Result<Qpn, (Self::Error, Self::GroupQp)>;
    /// The control part's side of taking QP `qp` back from the group `g` names while the group
    /// holds it: to ERROR, then destroyed on the device. The group's owner must have stopped
    /// posting to it; the group then lets it go ([`detach_group_qp`](Self::detach_group_qp)).
    fn destroy_handed_qp(&mut self, g: &Self::GroupRef, qp: Qpn) -> Result<(), Self::Error>;
    /// The group's side, without the device (slow path), once `qp` was destroyed
    /// ([`destroy_handed_qp`](Self::destroy_handed_qp)): its completions still in the group's
    /// CQ are taken out (the receives they took go back to the SRQ, so a later QP with the same
    /// number never sees them) and the group forgets it. The QP object comes back; dropping it
    /// frees its memory.
    fn detach_group_qp(g: &mut Self::Group, qp: Qpn) -> Result<Self::GroupQp, Self::Error>;
    /// As [`SrqVerbs::arm_srq`] for the SRQ of the group `g` names (a firmware command: the
    /// control part, which needs the group's numbers, not the group, so it arms the SRQ of a
    /// group polled elsewhere).
    fn arm_group_srq(&mut self, g: &Self::GroupRef, limit: u32) -> Result<(), Self::Error>;
    /// The group's side, without the device (slow path): as [`SrqVerbs::srq_limit_reached`]
    /// for the group's SRQ, so a group polled elsewhere learns its limit event on its own (and
    /// asks its owner to arm the limit again).
    fn group_srq_limit_reached(g: &mut Self::Group) -> bool;
    /// Release the group (its QPs first).
    fn destroy_group(&mut self, g: Self::Group) -> Result<(), Self::Error>;
}

/// The numbers of a group of a device whose data path is not split: its CQ and SRQ (what the
/// control part keeps of a [`SharedGroup`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedGroupRef {
    pub cq: Cqn,
    pub srq: Srqn,
}

/// A group of a device whose data path is not split: its CQ and SRQ, and `path`, a handle on the
/// device's data path that the group holds (the device's shared state, reached without the
/// device object). The group is a [`DataPath`] through it.
#[derive(Debug, Clone)]
pub struct SharedGroup<P> {
    pub cq: Cqn,
    pub srq: Srqn,
    pub path: P,
}

impl<P: VerbsError> VerbsError for SharedGroup<P> {
    type Error = P::Error;
}

impl<P: DataPath> DataPath for SharedGroup<P> {
    crate::forward_data_path!(path);
}

/// The body of a [`DataPath`] impl whose every call goes to the field `$f` (a wrapper whose data
/// path is its field's; the two share one error type).
#[macro_export]
macro_rules! forward_data_path {
    ($f:ident) => {
        #[inline(always)]
        fn post_send(&mut self, qp: $crate::verbs::Qpn, wr: &$crate::verbs::SendWr) -> Result<(), Self::Error> {
            $crate::verbs::DataPath::post_send(&mut self.$f, qp, wr)
        }
        #[inline(always)]
        fn post_send_deferred(&mut self, qp: $crate::verbs::Qpn, wr: &$crate::verbs::SendWr) -> Result<(), Self::Error> {
            $crate::verbs::DataPath::post_send_deferred(&mut self.$f, qp, wr)
        }
        #[inline(always)]
        fn ring_send(&mut self, qp: $crate::verbs::Qpn) -> Result<(), Self::Error> {
            $crate::verbs::DataPath::ring_send(&mut self.$f, qp)
        }
        #[inline(always)]
        fn post_send_deferred_pair(&mut self, qp: $crate::verbs::Qpn, first: &$crate::verbs::SendWr, second: &$crate::verbs::SendWr) -> Result<(), Self::Error> {
            $crate::verbs::DataPath::post_send_deferred_pair(&mut self.$f, qp, first, second)
        }
        #[inline(always)]
        fn post_send_batch(&mut self, qp: $crate::verbs::Qpn, wrs: &[$crate::verbs::SendWr]) -> Result<(), Self::Error> {
            $crate::verbs::DataPath::post_send_batch(&mut self.$f, qp, wrs)
        }
        #[inline(always)]
        fn post_recv(&mut self, qp: $crate::verbs::Qpn, wr: &$crate::verbs::RecvWr) -> Result<(), Self::Error> {
            $crate::verbs::DataPath::post_recv(&mut self.$f, qp, wr)
        }
        #[inline(always)]
        fn post_recv_batch(&mut self, qp: $crate::verbs::Qpn, wrs: &[$crate::verbs::RecvWr]) -> Result<(), Self::Error> {
            $crate::verbs::DataPath::post_recv_batch(&mut self.$f, qp, wrs)
        }
        #[inline(always)]
        fn post_srq_recv(&mut self, srq: $crate::verbs::Srqn, wr: &$crate::verbs::RecvWr) -> Result<(), Self::Error> {
            $crate::verbs::DataPath::post_srq_recv(&mut self.$f, srq, wr)
        }
        #[inline(always)]
        fn post_srq_recv_batch(&mut self, srq: $crate::verbs::Srqn, wrs: &[$crate::verbs::RecvWr]) -> Result<(), Self::Error> {
            $crate::verbs::DataPath::post_srq_recv_batch(&mut self.$f, srq, wrs)
        }
        #[inline(always)]
        fn poll_cq(&mut self, cq: $crate::verbs::Cqn, out: &mut [$crate::verbs::Completion]) -> usize {
            $crate::verbs::DataPath::poll_cq(&mut self.$f, cq, out)
        }
    };
}

/// The SRQ limit event read through a handle on a device's data path (what a
/// [`SharedGroup`] holds), without the device object: as [`SrqVerbs::srq_limit_reached`].
pub trait SrqLimitPath {
    /// Whether the armed limit of `srq` was reached since the last call (consumes the report;
    /// slow path).
    fn srq_limit_reached(&mut self, srq: Srqn) -> bool;
}

/// Implement [`GroupVerbs`] for a device `$t` whose data path is not split, from its [`Control`]
/// and [`SrqVerbs`]: each group is a [`SharedGroup<$p>`](SharedGroup) whose data-path handle
/// `$p` (a [`DataPath`] and [`SrqLimitPath`]) is made by `|$d| $make` from the device
/// (`$d: &$t`) when the group is created.
#[macro_export]
macro_rules! shared_groups {
    ($t:ty, $p:ty, |$d:ident| $make:expr) => {
        impl $crate::verbs::GroupVerbs for $t {
            type Group = $crate::verbs::SharedGroup<$p>;
            type GroupRef = $crate::verbs::SharedGroupRef;
            type GroupQp = $crate::verbs::Qpn;
            fn create_group(&mut self, cq_entries: u32, srq_wrs: u32) -> Result<Self::Group, Self::Error> {
                use $crate::verbs::{Control, SrqVerbs};
                let cq = self.create_cq(cq_entries)?;
                match self.create_srq(srq_wrs) {
                    Ok(srq) => {
                        let $d: &$t = self;
                        Ok($crate::verbs::SharedGroup { cq, srq, path: $make })
                    }
                    Err(e) => {
                        let _ = self.destroy_cq(cq);
                        Err(e)
                    }
                }
            }
            fn group_cq(&self, g: &Self::Group) -> $crate::verbs::Cqn {
                g.cq
            }
            fn group_srq(&self, g: &Self::Group) -> $crate::verbs::Srqn {
                g.srq
            }
            fn group_ref(&self, g: &Self::Group) -> $crate::verbs::SharedGroupRef {
                $crate::verbs::SharedGroupRef { cq: g.cq, srq: g.srq }
            }
            fn make_group_qp(&mut self, g: &$crate::verbs::SharedGroupRef, sq: u32) -> Result<$crate::verbs::Qpn, Self::Error> {
                $crate::verbs::SrqVerbs::create_rc_qp_srq(self, g.cq, g.cq, sq, g.srq)
            }
            fn made_qpn(q: &$crate::verbs::Qpn) -> $crate::verbs::Qpn {
                *q
            }
            fn connect_made_qp(&mut self, q: &mut $crate::verbs::Qpn, attrs: &$crate::verbs::RcConnectAttrs) -> Result<(), Self::Error> {
                $crate::verbs::Control::connect_rc_qp(self, *q, attrs)
            }
            fn destroy_made_qp(&mut self, q: $crate::verbs::Qpn) -> Result<(), Self::Error> {
                $crate::verbs::Control::destroy_qp(self, q)
            }
            fn park_made_qp(&mut self, q: $crate::verbs::Qpn) -> $crate::verbs::Qpn {
                // The device connects any of its QPs by number: nothing to keep.
                q
            }
            fn take_parked_qp(&mut self, qp: $crate::verbs::Qpn) -> Option<$crate::verbs::Qpn> {
                Some(qp)
            }
            fn attach_group_qp(_g: &mut Self::Group, q: $crate::verbs::Qpn) -> Result<$crate::verbs::Qpn, (Self::Error, $crate::verbs::Qpn)> {
                Ok(q)
            }
            fn destroy_handed_qp(&mut self, _g: &$crate::verbs::SharedGroupRef, qp: $crate::verbs::Qpn) -> Result<(), Self::Error> {
                let _ = $crate::verbs::Control::qp_to_error(self, qp);
                $crate::verbs::Control::destroy_qp(self, qp)
            }
            fn detach_group_qp(_g: &mut Self::Group, qp: $crate::verbs::Qpn) -> Result<$crate::verbs::Qpn, Self::Error> {
                // The device's CQ is the device's: a QPN is not reused for 2^24 numbers.
                Ok(qp)
            }
            fn arm_group_srq(&mut self, g: &$crate::verbs::SharedGroupRef, limit: u32) -> Result<(), Self::Error> {
                $crate::verbs::SrqVerbs::arm_srq(self, g.srq, limit)
            }
            fn group_srq_limit_reached(g: &mut Self::Group) -> bool {
                $crate::verbs::SrqLimitPath::srq_limit_reached(&mut g.path, g.srq)
            }
            fn destroy_group(&mut self, g: Self::Group) -> Result<(), Self::Error> {
                use $crate::verbs::{Control, SrqVerbs};
                let r = self.destroy_srq(g.srq);
                let c = self.destroy_cq(g.cq);
                r.and(c)
            }
        }
    };
}
