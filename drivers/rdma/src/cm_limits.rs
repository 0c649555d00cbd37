//! cm_limits: what the CM lets a peer choose — clamps on peer-chosen timers and retry counts.
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

use crate::cm_wire::{Mra, Rep, Req};

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
