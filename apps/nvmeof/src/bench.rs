//! Latency instrument: a fixed-size log-linear histogram on fio's bucket layout (no allocation
//! per sample), fio-clat-like percentile report, and the benchmark driver types. The fio JSON
//! (`--output-format=json+` shape) is written by [`crate::fio_json`].
//!
//! Buckets are fio's completion-latency buckets (fio `stat.h`: `FIO_IO_U_PLAT_BITS` 6,
//! `FIO_IO_U_PLAT_VAL` 64, `FIO_IO_U_PLAT_GROUP_NR` 29): values below 128 have a bucket each;
//! above, each power of two is split in 64 linear sub-buckets (≤ 1.6 % relative width), and
//! everything from 2^34 up shares the last bucket, as in fio. So the `bins` this histogram
//! exports are exactly the ones fio itself would have counted for the same samples.

use alloc::boxed::Box;
use core::fmt::Write;

pub mod lanes;
pub mod run;

/// fio's `FIO_IO_U_PLAT_BITS`: sub-bucket bits per power of two.
pub const PLAT_BITS: u32 = 6;
/// fio's `FIO_IO_U_PLAT_VAL`: sub-buckets per power of two.
pub const PLAT_VAL: usize = 1 << PLAT_BITS;
/// fio's `FIO_IO_U_PLAT_GROUP_NR`: groups of [`PLAT_VAL`] buckets.
pub const PLAT_GROUP_NR: usize = 29;
/// Number of buckets (fio's `FIO_IO_U_PLAT_NR`).
pub const BUCKETS: usize = PLAT_GROUP_NR * PLAT_VAL;
const _: () = assert!(BUCKETS == 1856);

/// A log-linear histogram of u64 samples (e.g. nanoseconds).
#[derive(Clone)]
pub struct Histogram {
    counts: [u64; BUCKETS],
    count: u64,
    sum: u128,
    /// Sum of squares (saturating), for the standard deviation.
    sum_sq: u128,
    min: u64,
    max: u64,
}

impl Histogram {
    /// A new empty histogram on the heap: its ~15 KB of buckets stay off the frames of the
    /// slow-path chains that make poll groups (the image runs on one boot stack).
    #[inline(never)]
    pub fn boxed() -> Box<Histogram> {
        Box::new(Histogram::new())
    }
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

/// Bucket index of a value (fio's rule: below 2 * PLAT_VAL the value itself; above, the group
/// of its most significant bit and its next PLAT_BITS bits; clamped to the last bucket).
pub fn bucket_of(v: u64) -> usize {
    if v < 2 * PLAT_VAL as u64 {
        return v as usize;
    }
    let msb = 63 - v.leading_zeros(); // > PLAT_BITS
    let error_bits = msb - PLAT_BITS;
    let base = (error_bits as usize + 1) << PLAT_BITS;
    let offset = ((v >> error_bits) as usize) & (PLAT_VAL - 1);
    (base + offset).min(BUCKETS - 1)
}

/// Inclusive value range of a bucket (the last one is open-ended, as in fio).
pub fn bucket_range(i: usize) -> (u64, u64) {
    if i < 2 * PLAT_VAL {
        return (i as u64, i as u64);
    }
    let error_bits = (i >> PLAT_BITS) as u32 - 1;
    let base = 1u64 << (error_bits + PLAT_BITS);
    let lo = base + (((i % PLAT_VAL) as u64) << error_bits);
    if i >= BUCKETS - 1 {
        return (lo, u64::MAX);
    }
    (lo, lo + (1u64 << error_bits) - 1)
}

/// The value fio reports for a bucket (its `plat_idx_to_val`: the value itself below 128,
/// else the middle of the bucket's range). These are the keys of fio's json+ `bins`.
pub fn bucket_value(i: usize) -> u64 {
    if i < 2 * PLAT_VAL {
        return i as u64;
    }
    let error_bits = (i.min(BUCKETS - 1) >> PLAT_BITS) as u32 - 1;
    bucket_range(i.min(BUCKETS - 1)).0 + (1u64 << (error_bits - 1))
}

/// Sample variance in millionths of the squared unit from n, Σx and Σx² (n ≥ 2): exact in
/// integers while n·Σx² fits, else in floating point (runs of ~10^8 I/Os at seconds each).
fn variance_micro(n: u128, sum: u128, sum_sq: u128) -> u128 {
    let den = n * (n - 1);
    let exact = sum_sq.checked_mul(n).zip(sum.checked_mul(sum)).and_then(|(a, b)| a.checked_sub(b));
    match exact {
        Some(d) => d.checked_mul(1_000_000).map_or((d / den).saturating_mul(1_000_000), |m| m / den),
        None => {
            let (nf, s, sq) = (n as f64, sum as f64, sum_sq as f64);
            let v = (sq - s * s / nf) / (nf - 1.0);
            if v > 0.0 {
                (v * 1_000_000.0) as u128
            } else {
                0
            }
        }
    }
}

impl Histogram {
    pub const fn new() -> Self {
        Histogram { counts: [0; BUCKETS], count: 0, sum: 0, sum_sq: 0, min: u64::MAX, max: 0 }
    }
    /// Add one sample (constant time, no allocation).
    #[inline]
    pub fn record(&mut self, v: u64) {
        self.counts[bucket_of(v)] += 1;
        self.count += 1;
        self.sum += v as u128;
        self.sum_sq = self.sum_sq.saturating_add(v as u128 * v as u128);
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
    /// Mean in millionths of the unit (for fio's six-decimal `mean`).
    pub fn mean_micro(&self) -> u128 {
        if self.count == 0 {
            0
        } else {
            self.sum.saturating_mul(1_000_000) / self.count as u128
        }
    }
    /// Sample standard deviation (n - 1, as fio) in thousandths of the unit.
    pub fn stddev_milli(&self) -> u128 {
        if self.count < 2 {
            return 0;
        }
        variance_micro(self.count as u128, self.sum, self.sum_sq).isqrt()
    }
    pub fn merge(&mut self, o: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(o.counts.iter()) {
            *a += *b;
        }
        self.count += o.count;
        self.sum += o.sum;
        self.sum_sq = self.sum_sq.saturating_add(o.sum_sq);
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
    }
    /// The value at percentile `p` (0..=100), by fio's rule: the reported value
    /// ([`bucket_value`]) of the first bucket where the running count reaches p % of all
    /// samples, here clamped to the observed min and max.
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
                return bucket_value(i).min(self.max).max(self.min);
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
    /// Non-empty buckets as fio's json+ `bins`: (fio's bucket value, count), ascending.
    pub fn bins(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.counts.iter().enumerate().filter(|(_, &c)| c != 0).map(|(i, &c)| (bucket_value(i), c))
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
    /// `threads=on`: each I/O queue's submit/poll loop on a thread of its own where the
    /// platform has threads or CPUs ([`lanes::on_lanes`]: emu-runner, the image), the owner keeping the admin
    /// queue; `queue_depth` is then per queue and `max_ios` split between them.
    pub threads: bool,
}

/// One data direction's completions (fio's `read` and `write` sections).
#[derive(Debug, Clone, Default)]
pub struct DirResult {
    /// Completed I/Os, successful or not.
    pub ios: u64,
    /// Completed with an error status.
    pub errors: u64,
    /// Submitted but never answered: in flight when the controller's queues were released
    /// (not latency samples, not re-issued).
    pub lost: u64,
    /// Bytes moved by successful I/Os.
    pub bytes: u64,
    /// Submit → completion latency of successful I/Os (ns). Boxed: the result is returned by
    /// value through the image's boot stack.
    pub lat: Box<Histogram>,
}

/// Benchmark result.
#[derive(Debug, Clone, Default)]
pub struct BenchResult {
    pub ios: u64,
    /// Submitted reads and writes.
    pub reads: u64,
    pub writes: u64,
    pub errors: u64,
    /// Submitted I/Os never answered (both directions; see [`DirResult::lost`]), so
    /// `reads + writes == ios + lost`.
    pub lost: u64,
    /// Times the controller was lost and live again (an outage still open at the end counts).
    pub outages: u64,
    /// Time from the last answer before each loss until live again: total and longest (ns).
    pub outage_ns: u64,
    pub longest_outage_ns: u64,
    /// The run ended while its controller was down.
    pub down_at_end: bool,
    pub bytes: u64,
    pub elapsed_ns: u64,
    /// Completions by direction.
    pub read: DirResult,
    pub write: DirResult,
}

/// `n` events over `elapsed_ns` as a per-second rate.
pub fn per_second(n: u64, elapsed_ns: u64) -> u64 {
    if elapsed_ns == 0 {
        0
    } else {
        (n as u128 * 1_000_000_000 / elapsed_ns as u128) as u64
    }
}

impl DirResult {
    fn merge(&mut self, o: &DirResult) {
        self.ios += o.ios;
        self.errors += o.errors;
        self.lost += o.lost;
        self.bytes += o.bytes;
        self.lat.merge(&o.lat);
    }
}

impl BenchResult {
    /// Add a run that went on at the same time (another queue's): counts summed, latency
    /// histograms merged, the elapsed time the longer of the two (so IOPS are summed).
    pub fn merge(&mut self, o: &BenchResult) {
        self.ios += o.ios;
        self.reads += o.reads;
        self.writes += o.writes;
        self.errors += o.errors;
        self.lost += o.lost;
        self.outages += o.outages;
        self.outage_ns += o.outage_ns;
        self.longest_outage_ns = self.longest_outage_ns.max(o.longest_outage_ns);
        self.down_at_end |= o.down_at_end;
        self.bytes += o.bytes;
        self.elapsed_ns = self.elapsed_ns.max(o.elapsed_ns);
        self.read.merge(&o.read);
        self.write.merge(&o.write);
    }
    pub fn iops(&self) -> u64 {
        per_second(self.ios, self.elapsed_ns)
    }
    pub fn bandwidth_bps(&self) -> u64 {
        per_second(self.bytes, self.elapsed_ns)
    }
    /// The latency of every successful I/O, both directions.
    pub fn lat(&self) -> Box<Histogram> {
        let mut h = self.read.lat.clone();
        h.merge(&self.write.lat);
        h
    }
    /// Print the fio-like summary: totals, then per direction IOPS, bandwidth and clat.
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
        if self.outages != 0 || self.lost != 0 {
            writeln!(
                w,
                "  outages={} down={} us (longest {} us){}, lost={} (r {} / w {}): never answered, not latency samples, not re-issued",
                self.outages,
                self.outage_ns / 1000,
                self.longest_outage_ns / 1000,
                if self.down_at_end { ", down at the end" } else { "" },
                self.lost,
                self.read.lost,
                self.write.lost
            )?;
        }
        for (name, d) in [("read", &self.read), ("write", &self.write)] {
            if d.ios == 0 {
                continue;
            }
            let (iops, bw) = (per_second(d.ios, self.elapsed_ns), per_second(d.bytes, self.elapsed_ns));
            writeln!(w, "  {name}: IOPS={iops}, BW={} KiB/s, errors={}", bw / 1024, d.errors)?;
            d.lat.write_report(w, name)?;
        }
        Ok(())
    }
}

/// Progress of a running bench (reported about once a second, from the slow path).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BenchProgress {
    pub elapsed_ns: u64,
    /// Completed I/Os so far.
    pub ios: u64,
    /// The run's length (ns).
    pub duration_ns: u64,
}

impl BenchProgress {
    /// Average IOPS since the start.
    pub fn iops(&self) -> u64 {
        per_second(self.ios, self.elapsed_ns)
    }
}

impl core::fmt::Display for BenchProgress {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let s = |ns: u64| (ns / 1_000_000_000, ns % 1_000_000_000 / 100_000_000);
        let ((a, b), (c, d)) = (s(self.elapsed_ns), s(self.duration_ns));
        write!(f, "progress: {a}.{b} s / {c}.{d} s, {} I/Os, {} IOPS", self.ios, self.iops())
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
        let total: u64 = h.buckets().map(|b| b.2).sum();
        assert_eq!(total, 10_000);
    }

    #[test]
    fn layout_is_fios() {
        // Below 128 each value is its own bucket and its own fio value.
        for v in 0..128u64 {
            assert_eq!((bucket_of(v), bucket_value(v as usize)), (v as usize, v));
        }
        // 128..=129 share the first two-wide bucket; fio reports its middle.
        assert_eq!((bucket_of(128), bucket_of(129), bucket_of(130)), (128, 128, 129));
        assert_eq!(bucket_value(128), 129);
        // The last bucket's value is the one fio_jsonplus_clat2csv starts its scan from.
        assert_eq!(bucket_value(BUCKETS - 1), 17_112_760_320);
        // From 2^34 ns up everything shares the last bucket, as in fio.
        assert_eq!(bucket_of(1 << 34), BUCKETS - 1);
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket_of((1 << 34) - 1), BUCKETS - 1);
        assert_eq!(bucket_of((1 << 34) - (1 << 27) - 1), BUCKETS - 2);
        // Every bucket's fio value lies in its own range.
        for i in 0..BUCKETS {
            let (lo, hi) = bucket_range(i);
            assert!((lo..=hi).contains(&bucket_value(i)), "bucket {i}");
        }
    }

    #[test]
    fn mean_and_stddev() {
        let mut h = Histogram::new();
        assert_eq!((h.mean_micro(), h.stddev_milli()), (0, 0));
        for v in [2u64, 4, 4, 4, 5, 5, 7, 9] {
            h.record(v);
        }
        assert_eq!(h.mean_micro(), 5_000_000);
        // Sample variance 32 / 7 = 4.571428..., stddev 2.138089...
        assert_eq!(h.stddev_milli(), 2138);
        // Past the exact range: 4·10^9 samples of 10 s ± 1 s (as n, Σx, Σx²).
        let (n, mean, var) = (4_000_000_000u128, 10_000_000_000u128, 1_000_000_000_000_000_000u128);
        let (sum, sum_sq) = (n * mean, n * (var + mean * mean));
        assert!(sum_sq.checked_mul(n).is_none(), "takes the floating-point path");
        let sd_milli = variance_micro(n, sum, sum_sq).isqrt();
        assert!((999_000_000_000..=1_001_000_000_000).contains(&sd_milli), "{sd_milli}");
    }

    #[test]
    fn report_per_direction() {
        let mut r = BenchResult { ios: 3, reads: 2, writes: 1, bytes: 3 * 4096, elapsed_ns: 1_000_000, ..Default::default() };
        r.read.ios = 2;
        r.read.bytes = 8192;
        r.read.lat.record(10_000);
        r.read.lat.record(20_000);
        r.write.ios = 1;
        r.write.bytes = 4096;
        r.write.lat.record(30_000);
        assert_eq!(r.lat().count(), 3);
        let cfg = BenchConfig { pattern: Pattern::RandMix { read_pct: 50 }, block_size: 4096, queue_depth: 1, duration_ns: 1, max_ios: 0, seed: 1, threads: false };
        let mut s = String::new();
        r.write(&mut s, &cfg).unwrap();
        assert!(s.contains("  IOPS=3000, BW=12000 KiB/s"), "{s}");
        assert!(s.contains("  read: IOPS=2000, BW=8000 KiB/s, errors=0"), "{s}");
        assert!(s.contains("  write clat (usec): min=30.000, max=30.000"), "{s}");
        let p = BenchProgress { elapsed_ns: 2_500_000_000, ios: 5000, duration_ns: 10_000_000_000 };
        assert_eq!(std::format!("{p}"), "progress: 2.5 s / 10.0 s, 5000 I/Os, 2000 IOPS");
    }
}
