//! Messages per second through the in-process link (printed; run with --nocapture).
//! The assertion is only that every message arrived; the numbers are for the report.

use crate::common;

#[test]
fn bench_send_rate_in_process_link() {
    for (size, n) in [(64u32, 20_000u64), (4096, 5_000), (65536, 500)] {
        let r = common::bench::send_rate(n, size, 64);
        common::bench::print(&format!("SEND {size} B, depth 64"), &r);
        assert_eq!(r.msgs, n);
    }
}
