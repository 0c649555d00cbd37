//! Command-line words for the bounds a peer meets: the target's admission limits
//! (`nvmet.*`, [`crate::nvmet::Limits`]) and the IB CM's table, REQ admission and peer-timer
//! clamps (`cm.*`, [`rdma::cm_limits::CmLimits`], [`rdma::cm_limits::PeerClamps`]).
//!
//! Every word is one row of [`WORDS`]: its name, the accepted range and the field it sets.
//! Ranges exclude values that mean nothing (a table of 0 connections, a deadline of 0 ms) or
//! that the wire field cannot carry (IBA timer exponents are 5 bits, Max CM Retries 4 bits,
//! RNR Retry Count 3 bits). Cross-word rules (min ≤ max) are checked once every word is in.

use alloc::vec::Vec;

use super::{err, ArgError};
use crate::nvmet::Limits;
use rdma::cm::CmConfig;
use rdma::cm_limits::{CmLimits, PeerClamps};

/// What the bound words set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bounds {
    pub target: Limits,
    pub cm: CmLimits,
    pub clamps: PeerClamps,
}

/// One bound word: its name, the accepted range (inclusive) and the field it sets.
pub struct Word {
    pub name: &'static str,
    pub min: u64,
    pub max: u64,
    /// What the range error says.
    pub expect: &'static str,
    set: fn(&mut Bounds, u64),
}

/// Largest table / count a word accepts: the CM allocates its table for `cm.max-conns` at start.
const MAX_COUNT: u64 = 1 << 16;
/// Longest deadline or keep-alive (ms) a word accepts: about 49 days, what fits in u32.
const MAX_MS: u64 = u32::MAX as u64;

// The setters narrow `v`, which `min..=max` already bounds to the field's type.
/// The bound words, in the README's order.
pub const WORDS: &[Word] = &[
    Word { name: "nvmet.connect-deadline", min: 1, max: MAX_MS, expect: "ms, 1..4294967295", set: |b, v| b.target.connect_deadline_ms = v as u32 },
    Word { name: "nvmet.kato-min", min: 1, max: MAX_MS, expect: "ms, 1..4294967295", set: |b, v| b.target.kato_min_ms = v as u32 },
    Word { name: "nvmet.kato-max", min: 1, max: MAX_MS, expect: "ms, 1..4294967295", set: |b, v| b.target.kato_max_ms = v as u32 },
    Word { name: "nvmet.max-ctrls-per-host", min: 1, max: MAX_COUNT, expect: "1..65536", set: |b, v| b.target.max_ctrls_per_host = v as usize },
    Word { name: "nvmet.max-unadmitted-per-source", min: 1, max: MAX_COUNT, expect: "1..65536", set: |b, v| b.target.max_unadmitted_per_source = v as usize },
    Word { name: "nvmet.max-unadmitted", min: 1, max: MAX_COUNT, expect: "1..65536", set: |b, v| b.target.max_unadmitted = v as usize },
    Word { name: "cm.max-conns", min: 1, max: MAX_COUNT, expect: "1..65536", set: |b, v| b.cm.max_conns = v as usize },
    Word { name: "cm.max-conns-per-source", min: 1, max: MAX_COUNT, expect: "1..65536", set: |b, v| b.cm.max_conns_per_source = v as u32 },
    Word { name: "cm.req-rate", min: 1, max: 1_000_000, expect: "REQs per second, 1..1000000", set: |b, v| b.cm.req_rate_per_s = v as u32 },
    Word { name: "cm.req-burst", min: 1, max: 1_000_000, expect: "REQs, 1..1000000", set: |b, v| b.cm.req_burst = v as u32 },
    Word { name: "cm.unrouted-reqs", min: 0, max: 4096, expect: "REQs held for ARP, 0..4096", set: |b, v| b.cm.unrouted_reqs = v as usize },
    Word { name: "cm.unrouted-wait", min: 1, max: MAX_MS, expect: "ms, 1..4294967295", set: |b, v| b.cm.unrouted_wait_ns = v * 1_000_000 },
    Word { name: "cm.rnr-retry-max", min: 0, max: 7, expect: "0..7 (7 = retry forever)", set: |b, v| b.clamps.rnr_retry_max = v as u8 },
    Word { name: "cm.ack-timeout-min", min: 1, max: 31, expect: "exponent 1..31 (4.096 us x 2^N)", set: |b, v| b.clamps.ack_timeout_min = v as u8 },
    Word { name: "cm.ack-timeout-max", min: 1, max: 31, expect: "exponent 1..31 (4.096 us x 2^N)", set: |b, v| b.clamps.ack_timeout_max = v as u8 },
    Word { name: "cm.response-timeout-max", min: 0, max: 31, expect: "exponent 0..31", set: |b, v| b.clamps.cm_response_timeout_max = v as u8 },
    Word { name: "cm.retries-max", min: 0, max: 15, expect: "0..15", set: |b, v| b.clamps.max_cm_retries_max = v as u8 },
    Word { name: "cm.service-timeout-max", min: 0, max: 31, expect: "exponent 0..31", set: |b, v| b.clamps.service_timeout_max = v as u8 },
];

/// One bound word as given: its row in [`WORDS`] and the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BoundWord {
    pub word: usize,
    pub value: u64,
}

impl BoundWord {
    pub fn name(&self) -> &'static str {
        WORDS.get(self.word).map_or("?", |w| w.name)
    }
}

/// If `key` is a bound word, parse `val` for it (`Ok(None)`: not a bound word).
pub(super) fn parse_word(word: &str, key: &str, val: &str) -> Result<Option<BoundWord>, ArgError> {
    let Some(i) = WORDS.iter().position(|w| w.name == key) else { return Ok(None) };
    let w = &WORDS[i];
    let value = val.parse::<u64>().ok().filter(|v| (w.min..=w.max).contains(v)).ok_or_else(|| err(word, w.expect))?;
    Ok(Some(BoundWord { word: i, value }))
}

/// Apply `words` to `b` (in order; a word given twice is refused) and check the cross-word
/// rules on the result.
pub fn apply(words: &[BoundWord], b: &mut Bounds) -> Result<(), ArgError> {
    for (n, w) in words.iter().enumerate() {
        let row = WORDS.get(w.word).ok_or_else(|| err("?", "unknown bound word"))?;
        if words[..n].iter().any(|o| o.word == w.word) {
            return Err(err(row.name, "given twice"));
        }
        (row.set)(b, w.value);
    }
    if b.target.kato_min_ms > b.target.kato_max_ms {
        return Err(err("nvmet.kato-min", "must be <= nvmet.kato-max (default 1000..120000 ms)"));
    }
    if b.clamps.ack_timeout_min > b.clamps.ack_timeout_max {
        return Err(err("cm.ack-timeout-min", "must be <= cm.ack-timeout-max (default 10..20)"));
    }
    b.target.check().map_err(|why| err("nvmet.*", why))
}

/// The target's limits `base` with the `nvmet.*` bound words applied.
pub fn target_limits(words: &[BoundWord], base: &Limits) -> Result<Limits, ArgError> {
    let mut b = Bounds { target: base.clone(), cm: CmLimits::default(), clamps: PeerClamps::default() };
    apply(words, &mut b)?;
    Ok(b.target)
}

/// The CM settings `base` with the `cm.*` bound words applied.
pub fn cm_config(words: &[BoundWord], base: CmConfig) -> Result<CmConfig, ArgError> {
    let mut b = Bounds { target: Limits::default(), cm: base.limits, clamps: base.clamps };
    apply(words, &mut b)?;
    Ok(CmConfig { limits: b.cm, clamps: b.clamps, ..base })
}

/// The bound words of a whole command line, for callers that merge words one at a time.
pub fn merge(into: &mut Vec<BoundWord>, more: &[BoundWord]) -> Result<(), &'static str> {
    for w in more {
        if into.iter().any(|o| o.word == w.word) {
            return Err("given twice");
        }
        into.push(*w);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    #[test]
    fn every_word_sets_its_field() {
        let a = parse(
            "nvmet.connect-deadline=750 nvmet.kato-min=2000 nvmet.kato-max=30000 nvmet.max-ctrls-per-host=3 \
             nvmet.max-unadmitted-per-source=4 nvmet.max-unadmitted=9 cm.max-conns=2 cm.max-conns-per-source=5 \
             cm.req-rate=7 cm.req-burst=11 cm.unrouted-reqs=6 cm.unrouted-wait=1500 cm.rnr-retry-max=3 cm.ack-timeout-min=12 cm.ack-timeout-max=14 \
             cm.response-timeout-max=16 cm.retries-max=4 cm.service-timeout-max=18",
        )
        .unwrap();
        assert_eq!(a.bounds.len(), WORDS.len());
        let base = Limits { cntlid_seed: 42, ..Limits::default() };
        let t = target_limits(&a.bounds, &base).unwrap();
        let want = Limits { connect_deadline_ms: 750, kato_min_ms: 2000, kato_max_ms: 30000, max_ctrls_per_host: 3, max_unadmitted_per_source: 4, max_unadmitted: 9, cntlid_seed: 42 };
        assert_eq!(t, want, "target bounds set, the caller's seed kept");
        let base = CmConfig { mtu: 4096, seed: 99, ..CmConfig::default() };
        let c = cm_config(&a.bounds, base).unwrap();
        assert_eq!((c.mtu, c.seed), (4096, 99), "other CM settings kept");
        assert_eq!(c.limits, CmLimits { max_conns: 2, max_conns_per_source: 5, req_rate_per_s: 7, req_burst: 11, unrouted_reqs: 6, unrouted_wait_ns: 1_500_000_000, ..CmLimits::default() });
        let want = PeerClamps { rnr_retry_max: 3, ack_timeout_min: 12, ack_timeout_max: 14, cm_response_timeout_max: 16, max_cm_retries_max: 4, service_timeout_max: 18 };
        assert_eq!(c.clamps, want);
        // No words: the defaults.
        let none = parse("nvmet.listen=10.0.0.1").unwrap();
        let c = cm_config(&none.bounds, CmConfig::default()).unwrap();
        assert_eq!((c.limits, c.clamps), (CmLimits::default(), PeerClamps::default()));
        assert_eq!(target_limits(&none.bounds, &Limits::default()).unwrap(), Limits::default());
    }

    #[test]
    fn bad_values_are_clear_errors() {
        for (bad, why) in [
            ("cm.max-conns=0", "1..65536"),
            ("cm.max-conns=65537", "1..65536"),
            ("cm.max-conns=18446744073709551616", "1..65536"),
            ("cm.max-conns=-1", "1..65536"),
            ("cm.max-conns=", "1..65536"),
            ("cm.max-conns=2k", "1..65536"),
            ("nvmet.connect-deadline=0", "ms, 1..4294967295"),
            ("nvmet.kato-max=4294967296", "ms, 1..4294967295"),
            ("nvmet.max-ctrls-per-host=0", "1..65536"),
            ("nvmet.max-unadmitted=0", "1..65536"),
            ("cm.req-rate=0", "REQs per second, 1..1000000"),
            ("cm.rnr-retry-max=8", "0..7 (7 = retry forever)"),
            ("cm.ack-timeout-min=0", "exponent 1..31 (4.096 us x 2^N)"),
            ("cm.ack-timeout-max=32", "exponent 1..31 (4.096 us x 2^N)"),
            ("cm.retries-max=16", "0..15"),
            ("cm.service-timeout-max=32", "exponent 0..31"),
            ("nvmet.kato-min=5000 nvmet.kato-max=4000", "must be <= nvmet.kato-max (default 1000..120000 ms)"),
            ("nvmet.kato-min=200000", "must be <= nvmet.kato-max (default 1000..120000 ms)"),
            ("cm.ack-timeout-min=21", "must be <= cm.ack-timeout-max (default 10..20)"),
            ("cm.max-conns=2 cm.max-conns=3", "given twice"),
        ] {
            let e = parse(bad).expect_err(bad);
            assert_eq!(e.why, why, "{bad}");
        }
        // Edges that are meaningful are accepted.
        for good in ["cm.rnr-retry-max=0", "cm.retries-max=0", "cm.max-conns=65536", "nvmet.kato-min=1 nvmet.kato-max=1", "nvmet.connect-deadline=4294967295"] {
            assert!(parse(good).is_ok(), "{good}");
        }
        let mut v = parse("cm.max-conns=2").unwrap().bounds;
        assert_eq!(v[0].name(), "cm.max-conns");
        assert_eq!(merge(&mut v, &parse("cm.max-conns=3").unwrap().bounds), Err("given twice"));
        assert!(merge(&mut v, &parse("cm.req-rate=3").unwrap().bounds).is_ok());
        assert_eq!(v.len(), 2);
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in "(nvmet|cm)\\.[a-z-]{0,30}=[0-9a-z-]{0,25}") {
            let _ = parse(&s);
        }
    }
}
