//! cm_limits: what the CM lets a peer have — bounds on the connection table and REQ admission
//! per source ([`CmLimits`], [`SourceLimiter`]), and clamps on peer-chosen timers and retry
//! counts ([`PeerClamps`]).
//!
//! Admission: a REQ that would add a connection passes a token bucket of its source address
//! (`req_burst` REQs at once, refilled at `req_rate_per_s` on the CM's clock) and a cap on the
//! table entries (timewait included) that source holds (`max_conns_per_source`); the table
//! itself holds at most `max_conns`. A refused REQ gets REJ NO_RESOURCES (IBA 12.6.7; Linux's
//! cm answers a REQ it cannot take the same way), is counted by cause in `CmStats`, and is
//! logged at most once per `log_interval_ns` with the counts since the last line.
//!
//! A REQ, REP or MRA names timers our side then runs: the RNR retry count and Local ACK
//! Timeout our RC QP uses towards the peer, the CM response timeouts and Max CM Retries that
//! set how long we resend a REP or hold an undecided REQ, an MRA's service timeout. Taken as
//! given, a peer pins our QP forever (RNR Retry Count 7 = retry forever, IBA 9.7.5.2.8; Local
//! ACK Timeout 0 = no timer, IBA 9.7.6.1.3) or a table entry for hours (a 5-bit timeout
//! exponent of 31 is 4.096 µs × 2^31 ≈ 2.4 h per try). [`PeerClamps`] bounds each of them; the
//! CM applies it once, where a REQ/REP/MRA enters, so every later use (QP to RTR/RTS, REP
//! resend timer, give-up deadline) sees the clamped value.
//!
//! Defaults (all IBA exponents are 4.096 µs × 2^v):
//! - RNR retry ≤ 6: bounded retries instead of 7 = infinite (Linux nvme-rdma and nvmet send 7);
//!   with the peer's RNR NAK timer at most 655 ms that is ≤ 4 s of RNR retrying.
//! - Local ACK Timeout in 10..=20 (4.2 ms .. 4.3 s): 0 (no timer) and tiny values (a
//!   retransmit storm) are raised, huge ones lowered; Linux rdma_cm over RoCE sends 19.
//! - CM response timeouts ≤ 20 (4.3 s, Linux's CMA_CM_RESPONSE_TIMEOUT), Max CM Retries ≤ 8,
//!   MRA service timeout ≤ 24 (68.7 s, what Linux rdma_cm itself sends).

use crate::cm_table::HashIndex;
use crate::cm_wire::{Mra, Rep, Req};
use crate::verbs::Ipv4;

/// Bounds on what peers may make the CM hold (see the module text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmLimits {
    /// Connections held at once, timewait included (the table is allocated for this many).
    pub max_conns: usize,
    /// Connections one source address may hold (passive side, timewait included).
    pub max_conns_per_source: u32,
    /// Sustained new REQs per second per source.
    pub req_rate_per_s: u32,
    /// REQs a source may send at once.
    pub req_burst: u32,
    /// At most one log line about refusals per interval.
    pub log_interval_ns: u64,
    /// New REQs held while their source's MAC is resolved (ARP), at most; more are dropped
    /// (counted in `no_route`) and the peer's retransmission tries again.
    pub unrouted_reqs: usize,
    /// How long a held REQ waits for the ARP answer before it is dropped.
    pub unrouted_wait_ns: u64,
}

impl Default for CmLimits {
    fn default() -> Self {
        // An NVMe-oF host opens 1 admin + one I/O queue per CPU (Linux: up to 128+) at once.
        // A REQ from a peer we have no MAC for waits for the ARP answer (Linux resolves the
        // reply path's neighbour before it answers a REQ) instead of costing the peer a whole
        // REQ retransmission interval (4 s and more).
        CmLimits { max_conns: 1024, max_conns_per_source: 256, req_rate_per_s: 100, req_burst: 160, log_interval_ns: 1_000_000_000, unrouted_reqs: 16, unrouted_wait_ns: 2_000_000_000 }
    }
}

/// Why a REQ was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The source's token bucket is empty.
    Rate,
    /// The source holds `max_conns_per_source` entries.
    PerSource,
    /// The table holds `max_conns` entries (or the source table is full).
    TableFull,
}

#[derive(Debug, Clone, Copy)]
struct Source {
    /// Tokens × 1000.
    milli_tokens: u64,
    last_ns: u64,
    held: u32,
}

/// Per-source REQ admission: token bucket and held-entry count, in a bounded index.
pub struct SourceLimiter {
    lim: CmLimits,
    sources: HashIndex<Source>,
}

impl SourceLimiter {
    pub fn new(lim: CmLimits, hash_key: u64) -> Result<Self, alloc::collections::TryReserveError> {
        // Every source holding an entry has a record, plus as many recent ones.
        Ok(SourceLimiter { lim, sources: HashIndex::new(lim.max_conns.saturating_mul(2), hash_key)? })
    }

    fn refill(&self, s: &mut Source, now: u64) {
        let add = now.saturating_sub(s.last_ns).saturating_mul(self.lim.req_rate_per_s as u64) / 1_000_000;
        s.milli_tokens = s.milli_tokens.saturating_add(add).min(self.lim.req_burst as u64 * 1000);
        s.last_ns = now;
    }

    /// Admit one new connection from `ip` at `now` (takes a token and counts it as held).
    pub fn admit(&mut self, ip: Ipv4, now: u64) -> Result<(), Refusal> {
        let k = u32::from_be_bytes(ip) as u64;
        let full = Source { milli_tokens: self.lim.req_burst as u64 * 1000, last_ns: now, held: 0 };
        let mut s = self.sources.get(k).unwrap_or(full);
        self.refill(&mut s, now);
        if s.held >= self.lim.max_conns_per_source {
            return Err(Refusal::PerSource);
        }
        if s.milli_tokens < 1000 {
            let _ = self.sources.insert(k, s);
            return Err(Refusal::Rate);
        }
        s.milli_tokens -= 1000;
        s.held += 1;
        if self.sources.insert(k, s) {
            Ok(())
        } else {
            Err(Refusal::TableFull)
        }
    }

    /// An entry admitted for `ip` is gone.
    pub fn release(&mut self, ip: Ipv4) {
        if let Some(s) = self.sources.get_mut(u32::from_be_bytes(ip) as u64) {
            s.held = s.held.saturating_sub(1);
        }
    }

    /// Forget sources that hold nothing and whose bucket has refilled (slow path).
    pub fn sweep(&mut self, now: u64) {
        let (rate, burst) = (self.lim.req_rate_per_s as u64, self.lim.req_burst as u64 * 1000);
        self.sources.retain(|_, s| {
            let refilled = s.milli_tokens.saturating_add(now.saturating_sub(s.last_ns).saturating_mul(rate) / 1_000_000) >= burst;
            s.held > 0 || !refilled
        });
    }

    /// Sources remembered (for tests and leak checks).
    pub fn sources(&self) -> usize {
        self.sources.len()
    }
}

/// Bounds on peer-chosen timers (see the module text for the defaults and why).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerClamps {
    /// Highest RNR Retry Count our QPs use (7 = infinite is never used when this is < 7).
    pub rnr_retry_max: u8,
    /// Local ACK Timeout exponent range for our QPs (0 = infinite is raised to the minimum).
    pub ack_timeout_min: u8,
    pub ack_timeout_max: u8,
    /// Highest CM response timeout exponent honoured (REQ local/remote, REP resend timer).
    pub cm_response_timeout_max: u8,
    /// Highest Max CM Retries honoured (REP resends, undecided REQ lifetime).
    pub max_cm_retries_max: u8,
    /// Highest MRA service timeout exponent honoured.
    pub service_timeout_max: u8,
}

impl Default for PeerClamps {
    fn default() -> Self {
        PeerClamps {
            rnr_retry_max: 6,
            ack_timeout_min: 10,
            ack_timeout_max: 20,
            cm_response_timeout_max: 20,
            max_cm_retries_max: 8,
            service_timeout_max: 24,
        }
    }
}

impl PeerClamps {
    /// `v` within `lo..=hi`; counts a change in `n` (reported as `CmStats::clamped`).
    fn clamp(v: u8, lo: u8, hi: u8, n: &mut u64) -> u8 {
        let c = v.max(lo).min(hi.max(lo));
        if c != v {
            *n = n.saturating_add(1);
        }
        c
    }

    /// A REQ as the CM will use it; `n` counts each field changed.
    pub fn req(&self, mut r: Req, n: &mut u64) -> Req {
        r.rnr_retry_count = Self::clamp(r.rnr_retry_count, 0, self.rnr_retry_max, n);
        r.primary.local_ack_timeout = Self::clamp(r.primary.local_ack_timeout, self.ack_timeout_min, self.ack_timeout_max, n);
        r.remote_cm_response_timeout = Self::clamp(r.remote_cm_response_timeout, 0, self.cm_response_timeout_max, n);
        r.local_cm_response_timeout = Self::clamp(r.local_cm_response_timeout, 0, self.cm_response_timeout_max, n);
        r.max_cm_retries = Self::clamp(r.max_cm_retries, 0, self.max_cm_retries_max, n);
        r
    }

    /// A REP as the CM will use it (the RNR retry count our active QP takes from it).
    pub fn rep(&self, mut r: Rep, n: &mut u64) -> Rep {
        r.rnr_retry_count = Self::clamp(r.rnr_retry_count, 0, self.rnr_retry_max, n);
        r
    }

    /// An MRA as the CM will use it.
    pub fn mra(&self, mut r: Mra, n: &mut u64) -> Mra {
        r.service_timeout = Self::clamp(r.service_timeout, 0, self.service_timeout_max, n);
        r
    }
}
