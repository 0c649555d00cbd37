//! The plot's data from fio's JSON: per job and direction, the clat `bins` as bucket ranges
//! (fio's layout, `nvmeof::bench`), min/max and the reported percentiles; and the decade-aligned
//! latency axis that spans all of it.

use nvmeof::bench::{bucket_of, bucket_range};
use serde_json::Value;

/// One job direction's completion latencies.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// e.g. "randread read".
    pub name: String,
    /// (bucket low ns, bucket high ns, count), ascending.
    pub buckets: Vec<(u64, u64, u64)>,
    pub min_ns: u64,
    pub max_ns: u64,
    pub total: u64,
    /// (percentile, ns) as fio reported them.
    pub percentiles: Vec<(f64, u64)>,
}

/// Everything drawn.
#[derive(Debug, Clone, PartialEq)]
pub struct Plot {
    /// "randread bs=4096 qd=1" and the like, from the job options.
    pub title: String,
    pub series: Vec<Series>,
}

impl Plot {
    /// Read fio's JSON (json+ shape: `jobs[].{read,write,trim}.clat_ns.bins`).
    pub fn from_fio_json(text: &str) -> Result<Plot, String> {
        let doc: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let jobs = doc.get("jobs").and_then(Value::as_array).ok_or("no \"jobs\" array (not fio JSON)")?;
        let mut series = Vec::new();
        let mut titles = Vec::new();
        for job in jobs {
            let name = job.get("jobname").and_then(Value::as_str).unwrap_or("job");
            let opt = |k: &str| job.get("job options").and_then(|o| o.get(k)).and_then(Value::as_str).map(str::to_owned);
            let mut t = opt("rw").unwrap_or_else(|| name.to_owned());
            for k in ["bs", "iodepth"] {
                if let Some(v) = opt(k) {
                    t.push_str(&format!(" {}={v}", if k == "iodepth" { "qd" } else { k }));
                }
            }
            titles.push(t);
            for dir in ["read", "write", "trim"] {
                let Some(clat) = job.get(dir).and_then(|d| d.get("clat_ns")) else { continue };
                if clat.get("N").and_then(Value::as_u64).unwrap_or(0) == 0 {
                    continue;
                }
                let bins = clat.get("bins").and_then(Value::as_object).ok_or_else(|| format!("{name} {dir}: clat_ns has no \"bins\" (not json+ output)"))?;
                let mut buckets = Vec::with_capacity(bins.len());
                for (k, v) in bins {
                    let value: u64 = k.parse().map_err(|_| format!("{name} {dir}: bin key {k:?} is not a number of ns"))?;
                    let count = v.as_u64().ok_or_else(|| format!("{name} {dir}: bin {k} count is not a whole number"))?;
                    let (lo, hi) = bucket_range(bucket_of(value));
                    buckets.push((lo, hi, count));
                }
                buckets.sort_unstable();
                let num = |k: &str| clat.get(k).and_then(Value::as_u64).ok_or_else(|| format!("{name} {dir}: clat_ns.{k} missing"));
                let mut percentiles: Vec<(f64, u64)> = clat
                    .get("percentile")
                    .and_then(Value::as_object)
                    .map(|m| m.iter().filter_map(|(k, v)| Some((k.parse().ok()?, v.as_u64()?))).collect())
                    .unwrap_or_default();
                percentiles.sort_by(|a, b| a.0.total_cmp(&b.0));
                series.push(Series {
                    name: format!("{name} {dir}"),
                    total: buckets.iter().map(|b| b.2).sum(),
                    buckets,
                    min_ns: num("min")?,
                    max_ns: num("max")?,
                    percentiles,
                });
            }
        }
        if series.is_empty() {
            return Err("no job direction with completion latencies (clat_ns.N = 0 everywhere)".into());
        }
        titles.dedup();
        Ok(Plot { title: titles.join(", "), series })
    }

    /// The measured range: smallest min and largest max over all series (ns).
    pub fn measured_ns(&self) -> (u64, u64) {
        let min = self.series.iter().map(|s| s.min_ns).min().unwrap_or(0);
        let max = self.series.iter().map(|s| s.max_ns).max().unwrap_or(0);
        (min, max)
    }

    /// The data's extent: the measured range and every drawn bucket edge (ns). The last fio
    /// bucket is open-ended; it is drawn up to the measured max.
    fn extent_ns(&self) -> (u64, u64) {
        let (mut lo, mut hi) = self.measured_ns();
        for s in &self.series {
            for &(a, b, _) in &s.buckets {
                lo = lo.min(a);
                hi = hi.max(self.bucket_end(a, b));
            }
        }
        (lo, hi)
    }

    /// Where a bucket's bar ends (its high edge + 1, open-ended buckets at the measured max).
    pub fn bucket_end(&self, lo: u64, hi: u64) -> u64 {
        if hi == u64::MAX {
            self.measured_ns().1.max(lo).saturating_add(1)
        } else {
            hi.saturating_add(1)
        }
    }

    /// The latency axis: from the decade at or below the data to the decade at or above it
    /// (ns; at least 1 ns and one decade wide). Its ticks are these decades.
    pub fn axis_ns(&self) -> (u64, u64) {
        let (lo, hi) = self.extent_ns();
        let mut a = 1u64;
        while a.saturating_mul(10) <= lo.max(1) {
            a *= 10;
        }
        let mut b = a.saturating_mul(10);
        while b < hi && b < u64::MAX / 10 {
            b *= 10;
        }
        (a, b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = r#"{"fio version":"fio-3.33","jobs":[{"jobname":"j","job options":{"rw":"randrw","bs":"4k","iodepth":"8"},
        "read":{"clat_ns":{"min":1500,"max":2500000,"N":3,"percentile":{"50.000000":30080,"99.000000":2506752},
                "bins":{"1496":1,"30080":1,"2506752":1}}},
        "write":{"clat_ns":{"min":100,"max":100,"N":1,"bins":{"100":1}}},
        "trim":{"clat_ns":{"min":0,"max":0,"N":0}}}]}"#;

    #[test]
    fn reads_bins_as_fio_buckets() {
        let p = Plot::from_fio_json(DOC).unwrap();
        assert_eq!(p.title, "randrw bs=4k qd=8");
        assert_eq!(p.series.len(), 2);
        let r = &p.series[0];
        assert_eq!(r.name, "j read");
        // 1496 is the middle of fio's bucket 1488..=1503.
        assert_eq!(r.buckets[0], (1488, 1503, 1));
        assert_eq!(r.total, 3);
        assert_eq!(r.percentiles, vec![(50.0, 30080), (99.0, 2506752)]);
        assert_eq!(p.series[1].buckets, vec![(100, 100, 1)]);
        assert_eq!(p.measured_ns(), (100, 2_500_000));
        // Decades around 100 ns .. the 2.5 ms bucket's end.
        assert_eq!(p.axis_ns(), (100, 10_000_000));
    }

    #[test]
    fn axis_spans_the_data() {
        for (min, max) in [(1u64, 1u64), (37_440, 28_511_261), (999, 1001), (1000, 1000), (0, 5)] {
            let doc = format!(r#"{{"jobs":[{{"read":{{"clat_ns":{{"min":{min},"max":{max},"N":2,"bins":{{"{min}":1,"{max}":1}}}}}}}}]}}"#);
            let p = Plot::from_fio_json(&doc).unwrap();
            let (a, b) = p.axis_ns();
            assert!(a <= min.max(1) && b >= max && b > a, "{min}..{max} -> {a}..{b}");
            assert!(a.to_string().trim_start_matches('1').chars().all(|c| c == '0'), "decade {a}");
        }
    }

    #[test]
    fn refuses_what_is_not_fio_json_plus() {
        assert!(Plot::from_fio_json("{").unwrap_err().starts_with("not JSON"));
        assert!(Plot::from_fio_json("{}").unwrap_err().contains("jobs"));
        let no_bins = r#"{"jobs":[{"read":{"clat_ns":{"min":1,"max":2,"N":2}}}]}"#;
        assert!(Plot::from_fio_json(no_bins).unwrap_err().contains("bins"));
        let empty = r#"{"jobs":[{"read":{"clat_ns":{"N":0}}}]}"#;
        assert!(Plot::from_fio_json(empty).unwrap_err().contains("N = 0"));
        let bad_key = r#"{"jobs":[{"read":{"clat_ns":{"min":1,"max":2,"N":2,"bins":{"x":2}}}}]}"#;
        assert!(Plot::from_fio_json(bad_key).unwrap_err().contains("\"x\""));
    }
}
