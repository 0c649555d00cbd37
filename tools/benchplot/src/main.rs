//! benchplot: draws the latency plot of a bench's fio JSON (`--output-format=json+` shape, as
//! `scripts/run` writes it to build/run/bench.json, or fio's own): a histogram of completion
//! latency (I/Os per fio bucket) above the percentile curve, both on a log-scaled latency axis
//! whose ticks are decades, as SVG and PNG.
//!
//! benchplot BENCH.json [--out PREFIX]   (default PREFIX: bench-latency beside BENCH.json)
//!
//! Prints the paths written and the latency axis against the measured range:
//! `benchplot: latency axis LO..HI ns, measured MIN..MAX ns`. Exit status 1 with a message on
//! an unreadable or malformed file.

mod data;
mod draw;

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut input = None;
    let mut out = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--out" => out = args.next().map(PathBuf::from),
            "-h" | "--help" => {
                eprintln!("usage: benchplot BENCH.json [--out PREFIX]  (writes PREFIX.svg and PREFIX.png)");
                return ExitCode::SUCCESS;
            }
            _ if input.is_none() => input = Some(PathBuf::from(a)),
            _ => return fail(&format!("unexpected argument {a:?} (see --help)")),
        }
    }
    let Some(input) = input else { return fail("no input file (usage: benchplot BENCH.json [--out PREFIX])") };
    let out = out.unwrap_or_else(|| input.with_file_name("bench-latency"));
    let text = match std::fs::read_to_string(&input) {
        Ok(t) => t,
        Err(e) => return fail(&format!("{}: {e}", input.display())),
    };
    let plot = match data::Plot::from_fio_json(&text) {
        Ok(p) => p,
        Err(e) => return fail(&format!("{}: {e}", input.display())),
    };
    let (svg, png) = (out.with_extension("svg"), out.with_extension("png"));
    if let Err(e) = draw::svg(&plot, &svg).and_then(|()| draw::png(&plot, &png)) {
        return fail(&e);
    }
    let (lo, hi) = plot.axis_ns();
    let (min, max) = plot.measured_ns();
    println!("benchplot: latency axis {lo}..{hi} ns, measured {min}..{max} ns");
    println!("benchplot: wrote {}", svg.display());
    println!("benchplot: wrote {}", png.display());
    ExitCode::SUCCESS
}

fn fail(msg: &str) -> ExitCode {
    eprintln!("benchplot: {msg}");
    ExitCode::FAILURE
}
