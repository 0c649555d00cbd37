//! A bench result as fio's JSON (`--output-format=json+` shape), so fio's own tools
//! (`fio_jsonplus_clat2csv`, fio-plot) read the appliance's measurements.
//!
//! The field set and units follow fio 3.x's JSON output (fio `stat.c`, `show_thread_status_json`
//! and `add_ddir_status_json`): sizes in bytes and KiB, `bw` in KiB/s, `runtime` in ms, latencies
//! in ns, percentiles keyed "%f", `bins` keyed by fio's bucket value ([`bench::bucket_value`]).
//! What the appliance does not measure is written the way fio writes an unmeasured figure:
//! `slat_ns` with N = 0 (submission is the WQE post, inside `clat`), `lat_ns` = `clat_ns`'s
//! samples, one bandwidth/IOPS sample over the whole run, no CPU or context-switch figures, no
//! submit/complete batch histograms; `iodepth_level` puts the run at its configured depth (the
//! bench keeps that many I/Os in flight until the end). `latency_ns/us/ms` are derived from the
//! histogram's bucket values.

use crate::bench::{self, BenchConfig, BenchResult, DirResult, Histogram, Pattern};
use core::fmt::{self, Write};

/// Marker line before the JSON document.
pub const BEGIN: &str = "=== NVMEOF-BENCH-FIO-JSON BEGIN ===";
/// Marker line after the JSON document.
pub const END: &str = "=== NVMEOF-BENCH-FIO-JSON END ===";
/// The `fio version` value: fio 3's schema, and who wrote it (tools check the `fio-3` prefix).
pub const VERSION: &str = "fio-3-compatible (appliance nvmeof bench)";
/// fio's default completion-latency percentile list (`percentile_list`).
pub const PERCENTILES: [(&str, f64); 17] = [
    ("1.000000", 1.0),
    ("5.000000", 5.0),
    ("10.000000", 10.0),
    ("20.000000", 20.0),
    ("30.000000", 30.0),
    ("40.000000", 40.0),
    ("50.000000", 50.0),
    ("60.000000", 60.0),
    ("70.000000", 70.0),
    ("80.000000", 80.0),
    ("90.000000", 90.0),
    ("95.000000", 95.0),
    ("99.000000", 99.0),
    ("99.500000", 99.5),
    ("99.900000", 99.9),
    ("99.950000", 99.95),
    ("99.990000", 99.99),
];

/// The job's identity beyond the bench parameters.
#[derive(Debug, Clone, Copy)]
pub struct JobInfo<'a> {
    /// fio's `jobname` (and `job options.name`).
    pub jobname: &'a str,
    /// Wall-clock end of the run in ms since the Unix epoch; 0 where there is no wall clock
    /// (the image).
    pub timestamp_ms: u64,
}

/// fio's `rw=` word for a pattern.
pub fn rw_name(p: Pattern) -> &'static str {
    match p {
        Pattern::RandRead => "randread",
        Pattern::RandWrite => "randwrite",
        Pattern::SeqRead => "read",
        Pattern::SeqWrite => "write",
        Pattern::RandMix { .. } => "randrw",
    }
}

/// The document between [`BEGIN`] and [`END`] lines.
pub fn write_marked(w: &mut dyn Write, cfg: &BenchConfig, res: &BenchResult, job: &JobInfo<'_>) -> fmt::Result {
    writeln!(w, "{BEGIN}")?;
    write(w, cfg, res, job)?;
    writeln!(w, "{END}")
}

/// The JSON document (one value per line, fio's indentation).
pub fn write(w: &mut dyn Write, cfg: &BenchConfig, res: &BenchResult, job: &JobInfo<'_>) -> fmt::Result {
    let mut j = Json::new(w);
    let secs = job.timestamp_ms / 1000;
    j.open(None, b'{')?;
    j.str("fio version", VERSION)?;
    j.uint("timestamp", secs)?;
    j.uint("timestamp_ms", job.timestamp_ms)?;
    j.raw_with("time", |w| write!(w, "\"{}\"", CTime(secs)))?;
    j.open(Some("global options"), b'{')?;
    j.close()?;
    j.open(Some("jobs"), b'[')?;
    j.open(None, b'{')?;
    j.str("jobname", job.jobname)?;
    j.uint("groupid", 0)?;
    // fio's first error (an errno): EIO when any I/O failed.
    j.uint("error", if res.errors == 0 { 0 } else { 5 })?;
    j.uint("eta", 0)?;
    j.uint("elapsed", res.elapsed_ns.div_ceil(1_000_000_000))?;
    job_options(&mut j, cfg, job)?;
    let runtime_ms = res.elapsed_ns / 1_000_000;
    direction(&mut j, "read", &res.read, res.elapsed_ns)?;
    direction(&mut j, "write", &res.write, res.elapsed_ns)?;
    direction(&mut j, "trim", &DirResult::default(), 0)?;
    j.open(Some("sync"), b'{')?;
    j.uint("total_ios", 0)?;
    stats(&mut j, "lat_ns", &Histogram::new(), false)?;
    j.close()?;
    j.uint("job_runtime", runtime_ms)?;
    j.fixed("usr_cpu", 0)?;
    j.fixed("sys_cpu", 0)?;
    for k in ["ctx", "majf", "minf"] {
        j.uint(k, 0)?;
    }
    iodepth_tables(&mut j, cfg.queue_depth)?;
    latency_tables(&mut j, &res.lat())?;
    j.uint("latency_depth", cfg.queue_depth as u64)?;
    j.uint("latency_target", 0)?;
    j.fixed("latency_percentile", 100_000_000)?;
    j.uint("latency_window", 0)?;
    j.close()?; // job
    j.close()?; // jobs
    j.close() // document
}

fn job_options(j: &mut Json<'_>, cfg: &BenchConfig, job: &JobInfo<'_>) -> fmt::Result {
    j.open(Some("job options"), b'{')?;
    j.str("name", job.jobname)?;
    j.str("ioengine", "appliance-nvmeof-rdma")?;
    j.str("rw", rw_name(cfg.pattern))?;
    if let Pattern::RandMix { read_pct } = cfg.pattern {
        j.raw_with("rwmixread", |w| write!(w, "\"{read_pct}\""))?;
    }
    j.raw_with("bs", |w| write!(w, "\"{}\"", cfg.block_size))?;
    j.raw_with("iodepth", |w| write!(w, "\"{}\"", cfg.queue_depth))?;
    j.raw_with("runtime", |w| write!(w, "\"{}ms\"", cfg.duration_ns / 1_000_000))?;
    if cfg.max_ios != 0 {
        j.raw_with("number_ios", |w| write!(w, "\"{}\"", cfg.max_ios))?;
    }
    j.raw_with("randseed", |w| write!(w, "\"{}\"", cfg.seed))?;
    j.close()
}

/// One `read`/`write`/`trim` section.
fn direction(j: &mut Json<'_>, name: &str, d: &DirResult, elapsed_ns: u64) -> fmt::Result {
    let bw_bytes = bench::per_second(d.bytes, elapsed_ns);
    // IOPS in millionths, for fio's six decimals.
    let iops_micro = if elapsed_ns == 0 { 0 } else { d.ios as u128 * 1_000_000_000_000_000 / elapsed_ns as u128 };
    let bw_kib = bw_bytes / 1024;
    j.open(Some(name), b'{')?;
    j.uint("io_bytes", d.bytes)?;
    j.uint("io_kbytes", d.bytes / 1024)?;
    j.uint("bw_bytes", bw_bytes)?;
    j.uint("bw", bw_kib)?;
    j.fixed("iops", iops_micro)?;
    j.uint("runtime", elapsed_ns / 1_000_000)?;
    j.uint("total_ios", d.ios)?;
    j.uint("short_ios", 0)?;
    j.uint("drop_ios", 0)?;
    stats(j, "slat_ns", &Histogram::new(), false)?;
    stats(j, "clat_ns", &d.lat, true)?;
    stats(j, "lat_ns", &d.lat, false)?;
    // One sample over the whole run (fio samples every 500 ms; the bench does not).
    let samples = u64::from(d.ios != 0);
    let bw_v = bw_kib * samples;
    j.uint("bw_min", bw_v)?;
    j.uint("bw_max", bw_v)?;
    j.fixed("bw_agg", if samples == 0 { 0 } else { 100_000_000 })?;
    j.fixed("bw_mean", bw_v as u128 * 1_000_000)?;
    j.fixed("bw_dev", 0)?;
    j.uint("bw_samples", samples)?;
    let iops_v = (iops_micro / 1_000_000) as u64 * samples;
    j.uint("iops_min", iops_v)?;
    j.uint("iops_max", iops_v)?;
    j.fixed("iops_mean", iops_v as u128 * 1_000_000)?;
    j.fixed("iops_stddev", 0)?;
    j.uint("iops_samples", samples)?;
    j.close()
}

/// `{min, max, mean, stddev, N}`, and with `plus` (clat) the percentiles and bins when N > 0,
/// as fio writes them.
fn stats(j: &mut Json<'_>, name: &str, h: &Histogram, plus: bool) -> fmt::Result {
    j.open(Some(name), b'{')?;
    j.uint("min", h.min())?;
    j.uint("max", h.max())?;
    j.fixed("mean", h.mean_micro())?;
    j.fixed("stddev", h.stddev_milli().saturating_mul(1000))?;
    j.uint("N", h.count())?;
    if plus && h.count() != 0 {
        j.open(Some("percentile"), b'{')?;
        for (k, p) in PERCENTILES {
            j.uint(k, h.percentile(p))?;
        }
        j.close()?;
        j.open(Some("bins"), b'{')?;
        for (v, c) in h.bins() {
            j.raw_with_num_key(v, c)?;
        }
        j.close()?;
    }
    j.close()
}

/// fio's `iodepth_level` (share of time at each depth) and its submit/complete batch tables.
fn iodepth_tables(j: &mut Json<'_>, qd: u16) -> fmt::Result {
    let levels = ["1", "2", "4", "8", "16", "32", ">=64"];
    let at = (15 - qd.max(1).leading_zeros() as usize).min(levels.len() - 1);
    j.open(Some("iodepth_level"), b'{')?;
    for (i, k) in levels.iter().enumerate() {
        j.fixed(k, if i == at { 100_000_000 } else { 0 })?;
    }
    j.close()?;
    for name in ["iodepth_submit", "iodepth_complete"] {
        j.open(Some(name), b'{')?;
        for k in ["0", "4", "8", "16", "32", "64", ">=64"] {
            j.fixed(k, 0)?;
        }
        j.close()?;
    }
    Ok(())
}

/// fio's `latency_ns`, `latency_us`, `latency_ms`: the share of I/Os (percent) below each bound
/// of its unit (and at or over the bound before it), e.g. `latency_us."50"`: 20 µs ≤ lat < 50 µs.
fn latency_tables(j: &mut Json<'_>, h: &Histogram) -> fmt::Result {
    const BOUNDS: [u64; 10] = [2, 4, 10, 20, 50, 100, 250, 500, 750, 1000];
    let total = h.count() as u128;
    let share = |lo: u64, hi: u64| -> u128 {
        if total == 0 {
            return 0;
        }
        let n: u64 = h.bins().filter(|&(v, _)| v >= lo && v < hi).map(|(_, c)| c).sum();
        n as u128 * 100_000_000 / total
    };
    for (name, unit) in [("latency_ns", 1u64), ("latency_us", 1_000), ("latency_ms", 1_000_000)] {
        j.open(Some(name), b'{')?;
        // Each table starts where the finer one ends (1 µs, 1 ms).
        let mut lo = if unit == 1 { 0 } else { unit };
        for b in BOUNDS {
            let hi = b * unit;
            j.raw_with_fixed_key(b, share(lo, hi))?;
            lo = hi;
        }
        if unit == 1_000_000 {
            j.fixed("2000", share(lo, 2000 * unit))?;
            j.fixed(">=2000", share(2000 * unit, u64::MAX))?;
        }
        j.close()?;
    }
    Ok(())
}

/// A minimal pretty JSON writer in fio's layout (`"key" : value`, two-space indent).
struct Json<'a> {
    w: &'a mut dyn Write,
    /// Per open level: whether a member was written yet.
    first: [bool; 8],
    depth: usize,
    closers: [u8; 8],
}

impl<'a> Json<'a> {
    fn new(w: &'a mut dyn Write) -> Self {
        Json { w, first: [true; 8], depth: 0, closers: [0; 8] }
    }
    fn indent(&mut self) -> fmt::Result {
        for _ in 0..self.depth {
            self.w.write_str("  ")?;
        }
        Ok(())
    }
    /// Start a member: separator, newline, indent, `"key" : `.
    fn member(&mut self, key: Option<&str>) -> fmt::Result {
        if self.depth > 0 {
            let first = &mut self.first[self.depth - 1];
            if !*first {
                self.w.write_char(',')?;
            }
            *first = false;
            self.w.write_char('\n')?;
        }
        self.indent()?;
        if let Some(k) = key {
            write_str_literal(self.w, k)?;
            self.w.write_str(" : ")?;
        }
        Ok(())
    }
    fn open(&mut self, key: Option<&str>, bracket: u8) -> fmt::Result {
        self.member(key)?;
        self.w.write_char(bracket as char)?;
        if self.depth >= self.first.len() {
            return Err(fmt::Error);
        }
        self.first[self.depth] = true;
        self.closers[self.depth] = if bracket == b'[' { b']' } else { b'}' };
        self.depth += 1;
        Ok(())
    }
    fn close(&mut self) -> fmt::Result {
        let d = self.depth.checked_sub(1).ok_or(fmt::Error)?;
        self.depth = d;
        self.w.write_char('\n')?;
        self.indent()?;
        self.w.write_char(self.closers[d] as char)?;
        if d == 0 {
            self.w.write_char('\n')?;
        }
        Ok(())
    }
    fn raw_with(&mut self, key: &str, f: impl FnOnce(&mut dyn Write) -> fmt::Result) -> fmt::Result {
        self.member(Some(key))?;
        f(&mut *self.w)
    }
    fn uint(&mut self, key: &str, v: u64) -> fmt::Result {
        self.raw_with(key, |w| write!(w, "{v}"))
    }
    /// A value given in millionths, printed with six decimals (fio's "%f").
    fn fixed(&mut self, key: &str, micro: u128) -> fmt::Result {
        self.raw_with(key, |w| write!(w, "{}.{:06}", micro / 1_000_000, micro % 1_000_000))
    }
    fn str(&mut self, key: &str, v: &str) -> fmt::Result {
        self.raw_with(key, |w| write_str_literal(w, v))
    }
    fn raw_with_num_key(&mut self, key: u64, v: u64) -> fmt::Result {
        self.member(None)?;
        write!(self.w, "\"{key}\" : {v}")
    }
    fn raw_with_fixed_key(&mut self, key: u64, micro: u128) -> fmt::Result {
        self.member(None)?;
        write!(self.w, "\"{key}\" : {}.{:06}", micro / 1_000_000, micro % 1_000_000)
    }
}

/// A JSON string literal (quotes, backslashes and control characters escaped).
fn write_str_literal(w: &mut dyn Write, s: &str) -> fmt::Result {
    w.write_char('"')?;
    for c in s.chars() {
        match c {
            '"' => w.write_str("\\\"")?,
            '\\' => w.write_str("\\\\")?,
            c if (c as u32) < 0x20 => write!(w, "\\u{:04x}", c as u32)?,
            c => w.write_char(c)?,
        }
    }
    w.write_char('"')
}

/// Seconds since the Unix epoch in C `ctime`'s layout (UTC), as fio's `time` field.
struct CTime(u64);

impl fmt::Display for CTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
        const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
        let days = self.0 / 86_400;
        let s = self.0 % 86_400;
        // Civil date from days since 1970-01-01 (proleptic Gregorian, 400-year eras).
        let z = days + 719_468;
        let era = z / 146_097;
        let doe = z % 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + u64::from(month <= 2);
        write!(
            f,
            "{} {} {:2} {:02}:{:02}:{:02} {}",
            DAYS[(days % 7) as usize],
            MONTHS[(month - 1) as usize],
            day,
            s / 3600,
            s % 3600 / 60,
            s % 60,
            year
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::string::String;

    #[test]
    fn ctime_layout() {
        assert_eq!(std::format!("{}", CTime(0)), "Thu Jan  1 00:00:00 1970");
        // The reference fio 3.33 run: timestamp 1795463595 printed as below.
        assert_eq!(std::format!("{}", CTime(1_795_463_595)), "Mon Nov 23 19:53:15 2026");
        assert_eq!(std::format!("{}", CTime(951_782_400)), "Tue Feb 29 00:00:00 2000");
    }

    #[test]
    fn document_shape() {
        let mut r = BenchResult { ios: 4, reads: 3, writes: 1, bytes: 4 * 4096, elapsed_ns: 2_000_000_000, ..Default::default() };
        r.read.ios = 3;
        r.read.bytes = 3 * 4096;
        for v in [1_500, 30_000, 2_500_000] {
            r.read.lat.record(v);
        }
        r.write.ios = 1;
        r.write.bytes = 4096;
        r.write.lat.record(100);
        let cfg = BenchConfig { pattern: Pattern::RandMix { read_pct: 75 }, block_size: 4096, queue_depth: 8, duration_ns: 2_000_000_000, max_ios: 0, seed: 3, threads: false };
        let mut s = String::new();
        write_marked(&mut s, &cfg, &r, &JobInfo { jobname: "a\"b", timestamp_ms: 1_795_463_595_797 }).unwrap();
        assert!(s.starts_with(BEGIN) && s.trim_end().ends_with(END));
        for want in [
            "  \"fio version\" : \"fio-3",
            "  \"timestamp\" : 1795463595,\n",
            "  \"time\" : \"Mon Nov 23 19:53:15 2026\",\n",
            "      \"jobname\" : \"a\\\"b\",\n",
            "        \"rw\" : \"randrw\",\n",
            "        \"rwmixread\" : \"75\",\n",
            "        \"io_bytes\" : 12288,\n",
            "        \"bw\" : 6,\n",
            "        \"iops\" : 1.500000,\n",
            "        \"runtime\" : 2000,\n",
            "          \"N\" : 3,\n",
            "            \"50.000000\" : 30080,\n",
            "            \"1496\" : 1,\n",
            "            \"100\" : 1\n",
            "        \"1\" : 0.000000,\n        \"2\" : 0.000000,\n        \"4\" : 0.000000,\n        \"8\" : 100.000000,",
            "        \"2\" : 25.000000,\n",
            "      \"latency_depth\" : 8,\n",
        ] {
            assert!(s.contains(want), "missing {want:?} in\n{s}");
        }
        // 1,500 ns is in the "2" µs class, 30 µs in "50", 2.5 ms in "4" ms, 100 ns in "250" ns.
        let us = &s[s.find("\"latency_us\"").unwrap()..];
        assert!(us.contains("\"2\" : 25.000000") && us.contains("\"50\" : 25.000000"), "{us}");
        let ms = &s[s.find("\"latency_ms\"").unwrap()..];
        assert!(ms.contains("\"4\" : 25.000000") && ms.contains("\">=2000\" : 0.000000"), "{ms}");
        // Balanced brackets, one value per line.
        assert_eq!(s.matches('{').count(), s.matches('}').count());
        assert_eq!(s.matches('[').count(), s.matches(']').count());
    }
}
