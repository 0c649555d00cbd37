//! prom: a writer of the Prometheus text exposition format (version 0.0.4: `# HELP`, `# TYPE`,
//! then the family's samples together; label values escaped; histograms as cumulative
//! `_bucket{le=..}` series ending in `+Inf`, then `_sum` and `_count`). Names follow the
//! Prometheus conventions `promtool check metrics` lints: base units (`_seconds`, `_bytes`),
//! counters ending in `_total`.

use core::fmt::{self, Write};

/// The metric type line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// Content type of the exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Labels of one sample: (name, value) pairs.
pub type Labels<'a> = &'a [(&'a str, &'a str)];

/// Writes families into any `fmt::Write` (the HTTP server gives it a bounded buffer).
pub struct Exposition<'w> {
    out: &'w mut dyn Write,
    /// The first write error (a full buffer); later writes are skipped.
    pub error: Option<fmt::Error>,
}

/// One family being written: its samples follow its header.
pub struct Family<'e, 'w> {
    e: &'e mut Exposition<'w>,
    name: &'static str,
}

fn escape_label(out: &mut dyn Write, v: &str) -> fmt::Result {
    for c in v.chars() {
        match c {
            '\\' => out.write_str("\\\\")?,
            '"' => out.write_str("\\\"")?,
            '\n' => out.write_str("\\n")?,
            c => out.write_char(c)?,
        }
    }
    Ok(())
}

fn write_labels(out: &mut dyn Write, labels: Labels<'_>, extra: Option<(&str, &dyn fmt::Display)>) -> fmt::Result {
    if labels.is_empty() && extra.is_none() {
        return Ok(());
    }
    out.write_char('{')?;
    let mut first = true;
    for (k, v) in labels {
        if !first {
            out.write_char(',')?;
        }
        first = false;
        write!(out, "{k}=\"")?;
        escape_label(out, v)?;
        out.write_char('"')?;
    }
    if let Some((k, v)) = extra {
        if !first {
            out.write_char(',')?;
        }
        write!(out, "{k}=\"{v}\"")?;
    }
    out.write_char('}')
}

impl<'w> Exposition<'w> {
    pub fn new(out: &'w mut dyn Write) -> Self {
        Exposition { out, error: None }
    }

    fn run(&mut self, f: impl FnOnce(&mut dyn Write) -> fmt::Result) {
        if self.error.is_none() {
            if let Err(e) = f(self.out) {
                self.error = Some(e);
            }
        }
    }

    /// Start family `name` (HELP text on one line, backslashes and newlines escaped).
    pub fn family<'e>(&'e mut self, name: &'static str, kind: Kind, help: &str) -> Family<'e, 'w> {
        self.run(|o| {
            write!(o, "# HELP {name} ")?;
            for c in help.chars() {
                match c {
                    '\\' => o.write_str("\\\\")?,
                    '\n' => o.write_str("\\n")?,
                    c => o.write_char(c)?,
                }
            }
            writeln!(o, "\n# TYPE {name} {}", kind.name())
        });
        Family { e: self, name }
    }

    /// A family with one unlabelled sample.
    pub fn single(&mut self, name: &'static str, kind: Kind, help: &str, v: impl fmt::Display) {
        self.family(name, kind, help).sample(&[], v);
    }
}

impl Family<'_, '_> {
    /// One sample of a counter or gauge family.
    pub fn sample(&mut self, labels: Labels<'_>, v: impl fmt::Display) -> &mut Self {
        let name = self.name;
        self.e.run(|o| {
            o.write_str(name)?;
            write_labels(o, labels, None)?;
            writeln!(o, " {v}")
        });
        self
    }

    /// One labelled histogram of a histogram family: `buckets` are (upper bound, cumulative
    /// count) in increasing order; `+Inf` (= `count`), `_sum` and `_count` are added.
    pub fn histogram(&mut self, labels: Labels<'_>, buckets: impl Iterator<Item = (f64, u64)>, sum: f64, count: u64) -> &mut Self {
        let name = self.name;
        self.e.run(|o| {
            for (le, c) in buckets {
                write!(o, "{name}_bucket")?;
                write_labels(o, labels, Some(("le", &le)))?;
                writeln!(o, " {c}")?;
            }
            write!(o, "{name}_bucket")?;
            write_labels(o, labels, Some(("le", &"+Inf")))?;
            writeln!(o, " {count}")?;
            write!(o, "{name}_sum")?;
            write_labels(o, labels, None)?;
            writeln!(o, " {sum}")?;
            write!(o, "{name}_count")?;
            write_labels(o, labels, None)?;
            writeln!(o, " {count}")
        });
        self
    }
}

/// Upper bounds (seconds) of the latency histograms: 1 µs to 10 s, 1-2-5 steps.
pub const LATENCY_BOUNDS_S: [f64; 22] = [
    1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0,
];

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::String;

    #[test]
    fn text_format() {
        let mut s = String::new();
        let mut e = Exposition::new(&mut s);
        e.family("x_total", Kind::Counter, "Things.\nMore").sample(&[("host", "a\"b\\c")], 3).sample(&[("host", "d")], 4);
        e.family("lat_seconds", Kind::Histogram, "Latency").histogram(&[("q", "1")], [(1e-6, 1), (0.5, 2)].into_iter(), 0.25, 3);
        assert!(e.error.is_none());
        assert_eq!(
            s,
            "# HELP x_total Things.\\nMore\n# TYPE x_total counter\nx_total{host=\"a\\\"b\\\\c\"} 3\nx_total{host=\"d\"} 4\n\
             # HELP lat_seconds Latency\n# TYPE lat_seconds histogram\nlat_seconds_bucket{q=\"1\",le=\"0.000001\"} 1\n\
             lat_seconds_bucket{q=\"1\",le=\"0.5\"} 2\nlat_seconds_bucket{q=\"1\",le=\"+Inf\"} 3\nlat_seconds_sum{q=\"1\"} 0.25\nlat_seconds_count{q=\"1\"} 3\n"
        );
    }
}
