//! emu-roce: the RoCEv2 side of the emulated ConnectX: wire formats, ICRC, links and the
//! RC/UD transport engine. It knows nothing about mlx5: the adapter model (emu/connectx)
//! translates WQEs into [`SendWr`]/[`RecvWr`] and [`Completion`]s into CQEs.
//!
//! # How the model plugs in
//!
//! ```text
//! let mut eng = Engine::new(PortConfig { mac, ip, answer_arp: true, ud_mtu: 1024, ttl: 64, retry_cnt_7_infinite: true });
//! eng.create_qp(Qpn(1), QpType::Ud)?;                 // GSI, at bring-up
//! eng.create_qp(qpn, QpType::Rc)?;                    // CREATE_QP
//! eng.modify_qp(qpn, QpState::Init, &attrs)?;         // RST2INIT / INIT2RTR / RTR2RTS / 2ERR / 2RST:
//! eng.modify_qp(qpn, QpState::Rtr, &attrs)?;          //   the model keeps one QpAttrs per QP, updates
//! eng.modify_qp(qpn, QpState::Rts, &attrs)?;          //   the fields each command carries, passes it all
//! eng.post_recv(qpn, RecvWr { wr_id, sges })?;        // RQ doorbell: one call per new RQ WQE
//! eng.create_srq(srqn)?; eng.attach_srq(qpn, Some(srqn))?; // RMP + QP with rq_type SRQ (in RESET)
//! eng.post_srq_recv(srqn, RecvWr { wr_id, sges })?;   // RMP WQEs, fetched along the list
//! eng.post_send(qpn, SendWr { wr_id, op, data, signaled, solicited, fence, ud })?; // SQ doorbell, per WQE
//! loop {
//!     eng.poll(now_ns, &mut link, &mut phys_mem, &mut mkeys);  // rx, timers, tx
//!     while let Some(c) = eng.pop_completion() { /* write a CQE to the CQ of c.qpn/c.queue */ }
//!     while let Some(f) = eng.pop_raw_frame() { /* deliver to a raw Ethernet RQ (flow table) */ }
//! }
//! ```
//!
//! * [`Memory`]: physical reads/writes (the model's PhysMem).
//! * [`Keys`]: `translate(qp, Local(lkey)|Remote(rkey), va, len, need) -> Extent | KeyError`
//!   (bounds, access, PD, validity; page-sized extents are fine) and `invalidate(qp, rkey)` for
//!   SEND WITH INVALIDATE. Remote key errors end in a NAK remote-access at the peer.
//! * Time is passed in (`now_ns`); with [`link::MemLink`] everything is deterministic.
//! * Non-RoCE frames (ARP, IPv6 ND, other UDP...) are queued for [`Engine::pop_raw_frame`], the
//!   equivalent of mlx5 raw Ethernet queues steered by the flow table; [`Engine::send_raw`] sends
//!   driver-built frames. With `answer_arp` the port itself also answers ARP for its IPv4.
//! * Completions come in the order they happened; [`Completion::queue`] says send or receive
//!   queue. Send completions appear only for signaled WRs or errors; an error moves the QP to
//!   ERROR and flushes the rest (WrFlushed).
//!
//! # Behaviour (rxe-compatible; wire.md §1.5)
//!
//! * Requester: PMTU segmentation, AckReq on each message's last packet and every 64th
//!   packet, 128-PSN window, READ consumes ceil(len/PMTU) PSNs, at most `max_rd_atomic` READs
//!   outstanding, a fenced WQE (`SendWr::fence`) not begun before every earlier READ's response
//!   is placed (later WQEs wait behind it; a failed READ flushes it unsent), go-back-N from the oldest unacknowledged PSN on timeout (4.096 µs × 2^timeout,
//!   `retry_cnt`, 7 = infinite unless `PortConfig::retry_cnt_7_infinite` is off, as the
//!   emulated ConnectX has it) or NAK-PSN-sequence-error, RNR NAK wait per the IBA timer table
//!   (`rnr_retry`, 7 = infinite), coalesced ACKs, an ACK past an incomplete READ = lost
//!   response (re-request the rest), NAK invalid-request / remote-access / remote-operational
//!   → error completion, QP to ERROR, rest flushed.
//! * Responder: one NAK-sequence-error per gap then silent drops, duplicates re-ACKed (SEND /
//!   WRITE) or answered from the saved READ resource (never re-executed), ACK only for AckReq
//!   packets (coalesced per poll), RNR NAK (`min_rnr_timer`) without a receive WQE (checked
//!   before a WRITE-with-immediate's last packet touches memory), opcode-sequence and length
//!   checks → NAK invalid request, rkey/bounds/access → NAK remote access; class C errors move
//!   the responder QP to ERROR too (as rxe). Failed SEND-WITH-INVALIDATE: receive completes
//!   with `RemoteInvalidRequest`, QP to ERROR, and (deviation from rxe, which only errors
//!   locally) a NAK invalid-request tells the requester at once.
//! * UD: QP1 always uses Q_Key 0x80010000; Q_Key mismatch or no receive WQE → silent drop
//!   (counted); receive data lands after a 40-byte GRH area (20 zero bytes + IPv4 header).
//! * Not modelled: atomics (NAK invalid request), UC/XRC/SRQ, SQD/SQE states, alternate path /
//!   APM, IPv6 / RoCEv1 / VLAN, ECN/CNP congestion control, multicast, IPv4 options/fragments.
//!
//! Wire facts: shared/reference/wire.md §1 (from Linux rxe).
#![forbid(unsafe_code)]

pub mod engine;
pub mod icrc;
pub mod link;
pub mod types;
pub mod wire;

pub use engine::{ack_timeout_ns, Counters, Engine, QpEvents, QpInfo, SrqInfo, RNR_TIMER_NS};
pub use link::{Impairments, Link, MemLink, PcapLink, PcapWriter, UdpLink, UnixDgramLink};
pub use types::*;
