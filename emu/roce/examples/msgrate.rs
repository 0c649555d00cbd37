//! Benchmark: messages per second through the in-process link between two engines.
//! `cargo run --release -p emu-roce --example msgrate [count]`
#![forbid(unsafe_code)]

#[path = "../tests/common/mod.rs"]
mod common;

fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(200_000);
    for (size, n) in [(64u32, n), (1024, n / 2), (4096, n / 8), (65536, n / 100)] {
        let r = common::bench::send_rate(n.max(1), size, 64);
        common::bench::print(&format!("SEND {size:>6} B, depth 64"), &r);
    }
}
