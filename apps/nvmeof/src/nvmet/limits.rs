//! The target's admission bounds: what one peer may pin before and after Fabrics Connect
//! (queues, controllers, keep-alive range, the Connect deadline), the counters of refusals
//! at those bounds, and the rate limit on their log lines.
//!
//! Refusals use the protocols' own answers: an unadmitted queue over its bound gets a CM REJ
//! (consumer-defined, NVMe-RDMA status NO_RESOURCES); a Connect over a controller bound gets
//! Connect status Controller Busy; a queue that never sends Connect is closed (DREQ) at the
//! deadline. Everyone within the bounds keeps being served.

/// Admission bounds (part of [`super::TargetConfig`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// A queue the CM accepted that has not completed Fabrics Connect within this many ms is
    /// closed (its buffers freed). Linux hosts send Connect right after the CM handshake.
    pub connect_deadline_ms: u32,
    /// Keep-alive timeout range (ms) applied to Connect and Set Features. A host asking
    /// outside it gets the nearest bound; KATO 0 ("no keep-alive") becomes `kato_max_ms`
    /// rather than being refused, because Linux discovery (and `--keep-alive-tmo=0`) sends 0
    /// and must still connect, while a controller without a timer would pin its queues
    /// forever. The value in force is what Get Features reports.
    pub kato_min_ms: u32,
    pub kato_max_ms: u32,
    /// Controllers (admin queues) one host NQN may hold at once.
    pub max_ctrls_per_host: usize,
    /// Queues accepted by the CM but not yet admitted by Connect, from one source address
    /// and in total; beyond them a REQ gets REJ NO_RESOURCES.
    pub max_unadmitted_per_source: usize,
    pub max_unadmitted: usize,
    /// Seed of the controller-ID generator (the image mixes in the TSC at boot).
    pub cntlid_seed: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            connect_deadline_ms: 5_000,
            kato_min_ms: 1_000,
            // nvmet's keep-alive for discovery controllers that ask for none.
            kato_max_ms: 120_000,
            max_ctrls_per_host: 8,
            max_unadmitted_per_source: 8,
            max_unadmitted: 32,
            cntlid_seed: 0x6e76_6d65_6f66_0001,
        }
    }
}

impl Limits {
    /// The keep-alive timeout in force for a host's request `ms` (see [`Limits::kato_min_ms`]).
    pub fn clamp_kato(&self, ms: u32) -> u32 {
        if ms == 0 {
            self.kato_max_ms
        } else {
            ms.clamp(self.kato_min_ms, self.kato_max_ms)
        }
    }

    pub(crate) fn check(&self) -> Result<(), &'static str> {
        if self.kato_min_ms == 0 || self.kato_min_ms > self.kato_max_ms {
            return Err("keep-alive bounds: 0 < min <= max");
        }
        if self.connect_deadline_ms == 0 || self.max_ctrls_per_host == 0 || self.max_unadmitted_per_source == 0 || self.max_unadmitted == 0 {
            return Err("connect deadline and admission bounds must be > 0");
        }
        Ok(())
    }
}

/// Why a peer was refused or cut off at a bound (counters in [`BoundStats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// All controllers in use (Connect: Controller Busy).
    Ctrls,
    /// The host NQN holds `max_ctrls_per_host` controllers (Connect: Controller Busy).
    CtrlsPerHost,
    /// Unadmitted queues from this source at the bound (REJ NO_RESOURCES).
    UnadmittedPerSource,
    /// Unadmitted queues in total at the bound (REJ NO_RESOURCES).
    Unadmitted,
    /// Every RDMA queue in use (REJ NO_RESOURCES).
    Queues,
    /// Heap or DMA memory could not be had (REJ NO_RESOURCES or Connect: Controller Busy).
    Memory,
    /// No Connect before the deadline (queue closed, DREQ).
    ConnectDeadline,
    /// An I/O-queue Connect naming a controller of another host, host ID or source address
    /// (Connect: Invalid Parameters on CNTLID, the same answer as an unknown controller).
    ForeignQueue,
    /// KATO outside the range, replaced (not a refusal; counted).
    KatoClamped,
}

/// Counters of [`Bound`] events (never reset).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BoundStats {
    pub ctrls: u64,
    pub ctrls_per_host: u64,
    pub unadmitted_per_source: u64,
    pub unadmitted: u64,
    pub queues: u64,
    pub memory: u64,
    pub connect_deadline: u64,
    pub foreign_queue: u64,
    pub kato_clamped: u64,
}

/// Log lines about bounds: at most one per this interval (the counters keep every event).
pub const BOUND_LOG_INTERVAL_NS: u64 = 1_000_000_000;

impl BoundStats {
    fn slot(&mut self, b: Bound) -> &mut u64 {
        match b {
            Bound::Ctrls => &mut self.ctrls,
            Bound::CtrlsPerHost => &mut self.ctrls_per_host,
            Bound::UnadmittedPerSource => &mut self.unadmitted_per_source,
            Bound::Unadmitted => &mut self.unadmitted,
            Bound::Queues => &mut self.queues,
            Bound::Memory => &mut self.memory,
            Bound::ConnectDeadline => &mut self.connect_deadline,
            Bound::ForeignQueue => &mut self.foreign_queue,
            Bound::KatoClamped => &mut self.kato_clamped,
        }
    }
}

/// Counts bound events and logs them once per [`BOUND_LOG_INTERVAL_NS`].
#[derive(Debug, Clone, Default)]
pub struct BoundLog {
    pub stats: BoundStats,
    next_log_ns: u64,
    quiet: u64,
}

impl BoundLog {
    /// Count `b` (seen at `now_ns`) and log it unless a line went out less than an interval ago.
    pub fn hit(&mut self, b: Bound, now_ns: u64, who: &dyn core::fmt::Display) {
        *self.stats.slot(b) += 1;
        if now_ns < self.next_log_ns {
            self.quiet += 1;
            return;
        }
        self.next_log_ns = now_ns.saturating_add(BOUND_LOG_INTERVAL_NS);
        let quiet = core::mem::take(&mut self.quiet);
        log::warn!("nvmeof: limits: {b:?} ({who}); {quiet} more since the last line; totals {:?}", self.stats);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kato_zero_becomes_max_and_others_clamp() {
        let l = Limits { kato_min_ms: 1_000, kato_max_ms: 60_000, ..Limits::default() };
        assert_eq!(l.clamp_kato(0), 60_000);
        assert_eq!(l.clamp_kato(1), 1_000);
        assert_eq!(l.clamp_kato(5_000), 5_000);
        assert_eq!(l.clamp_kato(u32::MAX), 60_000);
    }

    #[test]
    fn log_is_rate_limited_but_every_event_counted() {
        let mut l = BoundLog::default();
        for i in 0..100 {
            l.hit(Bound::Queues, 1_000 + i, &"x");
        }
        assert_eq!(l.stats.queues, 100);
        assert_eq!(l.quiet, 99);
        l.hit(Bound::Memory, 1_000 + BOUND_LOG_INTERVAL_NS, &"y");
        assert_eq!((l.stats.memory, l.quiet), (1, 0));
    }
}
