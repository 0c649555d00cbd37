//! Latency instrument: a fixed-size log-linear histogram (no allocation per sample),
//! fio-clat-like percentile report, JSON dump between markers, and the benchmark driver types.
//!
//! Buckets: values below 32 have their own bucket; above, each power of two is split in 32
//! linear sub-buckets (≤ 3.2 % relative bucket width).

use core::fmt::Write;

const SUB_BITS: u32 = 5;
const SUB: usize = 1 << SUB_BITS;
/// Number of buckets covering the whole u64 range.
pub const BUCKETS: usize = (64 - SUB_BITS as usize + 1) * SUB;

/// Marker line before the histogram JSON.
pub const JSON_BEGIN: &str = "=== NVMEOF-BENCH-HISTOGRAM-JSON BEGIN ===";
/// Marker line after the histogram JSON.
pub const JSON_END: &str = "=== NVMEOF-BENCH-HISTOGRAM-JSON END ===";

/// A log-linear histogram of u64 samples (e.g. nanoseconds).
#[derive(Clone)]
pub struct Histogram {
    counts: [u64; BUCKETS],
    count: u64,
    sum: u128,
    min: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

impl core::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Histogram(n={}, min={}, max={})", self.count, self.min, self.max)
    }
}

/// Bucket index of a value.
pub fn bucket_of(v: u64) -> usize {
    if v < SUB as u64 {
        return v as usize;
    }
    let k = 63 - v.leading_zeros(); // ≥ SUB_BITS
    let sub = ((v >> (k - SUB_BITS)) as usize) & (SUB - 1);
    (k - SUB_BITS + 1) as usize * SUB + sub
}

/// Inclusive value range of a bucket.
pub fn bucket_range(i: usize) -> (u64, u64) {
    if i < SUB {
        return (i as u64, i as u64);
    }
    let k = (i / SUB) as u32 + SUB_BITS - 1;
    let sub = (i % SUB) as u64;
    let lo = (SUB as u64 + sub) << (k - SUB_BITS);
    let width = 1u64 << (k - SUB_BITS);
    (lo, lo.saturating_add(width - 1))
}

impl Histogram {
    pub const fn new() -> Self {
        Histogram { counts: [0; BUCKETS], count: 0, sum: 0, min: u64::MAX, max: 0 }
    }
    /// Add one sample (constant time, no allocation).
    #[inline]
    pub fn record(&mut self, v: u64) {
        self.counts[bucket_of(v)] += 1;
        self.count += 1;
        self.sum += v as u128;
        if v < self.min {
            self.min = v;
        }
        if v > self.max {
            self.max = v;
        }
    }
    pub fn count(&self) -> u64 {
        self.count
    }
    pub fn min(&self) -> u64 {
        if self.count == 0 {
            0
        } else {
            self.min
        }
    }
    pub fn max(&self) -> u64 {
        self.max
    }
    pub fn mean(&self) -> u64 {
        if self.count == 0 {
            0
        } else {
            (self.sum / self.count as u128) as u64
        }
    }
    pub fn merge(&mut self, o: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(o.counts.iter()) {
            *a += *b;
        }
        self.count += o.count;
        self.sum += o.sum;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
    }
    /// The value at percentile `p` (0..=100): the upper bound of the bucket holding that rank,
    /// clamped to the observed max.
    pub fn percentile(&self, p: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        // rank = ceil(p% of count), computed in integers (no_std has no f64::ceil).
        let ppm = (p * 10_000.0) as u128; // parts per million
        let rank = ((self.count as u128 * ppm).div_ceil(1_000_000) as u64).max(1);
        let mut acc = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            acc += c;
            if acc >= rank {
                return bucket_range(i).1.min(self.max).max(self.min);
            }
        }
        self.max
    }
    /// Non-empty buckets: (low, high, count).
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.counts.iter().enumerate().filter(|(_, &c)| c != 0).map(|(i, &c)| {
            let (lo, hi) = bucket_range(i);
            (lo, hi, c)
        })
    }
    /// fio-like clat report (values in ns, printed in µs).
    pub fn write_report(&self, w: &mut dyn Write, title: &str) -> core::fmt::Result {
        let us = |v: u64| (v / 1000, v % 1000);
        let (a, b) = us(self.min());
        let (c, d) = us(self.max());
        let (e, f) = us(self.mean());
        writeln!(w, "  {title} clat (usec): min={a}.{b:03}, max={c}.{d:03}, avg={e}.{f:03}, samples={}", self.count)?;
        writeln!(w, "  clat percentiles (usec):")?;
        for (name, p) in [("50.00th", 50.0), ("90.00th", 90.0), ("99.00th", 99.0), ("99.90th", 99.9), ("99.99th", 99.99)] {
            let (x, y) = us(self.percentile(p));
            writeln!(w, "   | {name}=[{x}.{y:03}]")?;
        }
        let (x, y) = us(self.max());
        writeln!(w, "   | max=[{x}.{y:03}]")
    }
    /// The same report for values in any clock unit (e.g. TSC ticks), printed as integers.
    pub fn write_report_in(&self, w: &mut dyn Write, title: &str, unit: &str) -> core::fmt::Result {
        writeln!(w, "  {title} ({unit}): min={}, max={}, avg={}, samples={}", self.min(), self.max(), self.mean(), self.count)?;
        write!(w, "  percentiles ({unit}):")?;
        for (name, p) in [("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p99.9", 99.9), ("p99.99", 99.99)] {
            write!(w, " {name}={}", self.percentile(p))?;
        }
        writeln!(w, " max={}", self.max())
    }
    /// The full histogram as one JSON object between [`JSON_BEGIN`]/[`JSON_END`] lines.
    pub fn write_json(&self, w: &mut dyn Write, label: &str) -> core::fmt::Result {
        writeln!(w, "{JSON_BEGIN}")?;
        write!(
            w,
            "{{\"label\":\"{label}\",\"unit\":\"ns\",\"count\":{},\"min\":{},\"max\":{},\"mean\":{},\"p50\":{},\"p90\":{},\"p99\":{},\"p99_9\":{},\"p99_99\":{},\"buckets\":[",
            self.count,
            self.min(),
            self.max(),
            self.mean(),
            self.percentile(50.0),
            self.percentile(90.0),
            self.percentile(99.0),
            self.percentile(99.9),
            self.percentile(99.99)
        )?;
        for (i, (lo, hi, c)) in self.buckets().enumerate() {
            if i > 0 {
                w.write_char(',')?;
            }
            write!(w, "[{lo},{hi},{c}]")?;
        }
        writeln!(w, "]}}")?;
        writeln!(w, "{JSON_END}")
    }
}

/// Access pattern of a benchmark run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    RandRead,
    RandWrite,
    SeqRead,
    SeqWrite,
    /// Random mix with this percentage of reads.
    RandMix { read_pct: u8 },
}

/// Benchmark parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BenchConfig {
    pub pattern: Pattern,
    pub block_size: u32,
    pub queue_depth: u16,
    pub duration_ns: u64,
    /// Stop after this many I/Os even before the duration (0 = no limit).
    pub max_ios: u64,
    pub seed: u64,
}

/// Benchmark result.
#[derive(Debug, Clone)]
pub struct BenchResult {
    pub ios: u64,
    pub reads: u64,
    pub writes: u64,
    pub errors: u64,
    pub bytes: u64,
    pub elapsed_ns: u64,
    pub lat: Histogram,
}

impl BenchResult {
    pub fn iops(&self) -> u64 {
        if self.elapsed_ns == 0 {
            0
        } else {
            (self.ios as u128 * 1_000_000_000 / self.elapsed_ns as u128) as u64
        }
    }
    pub fn bandwidth_bps(&self) -> u64 {
        if self.elapsed_ns == 0 {
            0
        } else {
            (self.bytes as u128 * 1_000_000_000 / self.elapsed_ns as u128) as u64
        }
    }
    /// Print the fio-like summary and the JSON histogram.
    pub fn write(&self, w: &mut dyn Write, cfg: &BenchConfig) -> core::fmt::Result {
        writeln!(
            w,
            "bench: {:?} bs={} qd={} ios={} (r {} / w {}) errors={} elapsed={} us",
            cfg.pattern,
            cfg.block_size,
            cfg.queue_depth,
            self.ios,
            self.reads,
            self.writes,
            self.errors,
            self.elapsed_ns / 1000
        )?;
        writeln!(w, "  IOPS={}, BW={} KiB/s", self.iops(), self.bandwidth_bps() / 1024)?;
        self.lat.write_report(w, "io")?;
        self.lat.write_json(w, "clat")
    }
}

/// xorshift64* for offsets (deterministic, no allocation).
#[derive(Debug, Clone, Copy)]
pub struct Rng(u64);
impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed | 1)
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::string::String;

    #[test]
    fn buckets_are_contiguous_and_contain_values() {
        let mut prev_hi = None;
        for i in 0..BUCKETS {
            let (lo, hi) = bucket_range(i);
            if let Some(p) = prev_hi {
                assert_eq!(lo, p + 1, "bucket {i}");
            }
            assert_eq!(bucket_of(lo), i);
            assert_eq!(bucket_of(hi), i);
            prev_hi = Some(hi);
            if hi == u64::MAX {
                assert_eq!(i, BUCKETS - 1);
            }
        }
    }

    #[test]
    fn percentiles() {
        let mut h = Histogram::new();
        for v in 1..=10_000u64 {
            h.record(v * 100);
        }
        let p50 = h.percentile(50.0);
        assert!((480_000..=520_000).contains(&p50), "{p50}");
        let p99 = h.percentile(99.0);
        assert!((970_000..=1_000_000).contains(&p99), "{p99}");
        assert_eq!(h.percentile(100.0), 1_000_000);
        assert_eq!(h.min(), 100);
        let mut s = String::new();
        h.write_json(&mut s, "t").unwrap();
        assert!(s.starts_with(JSON_BEGIN));
        assert!(s.trim_end().ends_with(JSON_END));
        let total: u64 = h.buckets().map(|b| b.2).sum();
        assert_eq!(total, 10_000);
    }
}
