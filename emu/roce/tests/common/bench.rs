//! Message-rate measurement through the in-process link (shared by the bench test and example).

use super::*;

pub struct Rate {
    pub msgs: u64,
    pub bytes: u64,
    pub secs: f64,
    pub frames: u64,
}

/// Stream `n` SENDs of `size` bytes from A to B (B pre-posts receives, up to `depth` in flight),
/// over a zero-impairment in-process link; every receive is checked for length and order.
pub fn send_rate(n: u64, size: u32, depth: u64) -> Rate {
    let mut p = Pair::new(Impairments::default(), 1, 64 << 20);
    p.connect(0x11, 0x12, rc_attrs());
    let ka = p.a.reg(0x100_0000, 4 << 20, Access::ALL);
    let kb = p.b.reg(0x800_0000, 32 << 20, Access::ALL);
    let slot = u64::from(size.max(64)).next_multiple_of(64);
    let ring = (32u64 << 20) / slot;
    let start = std::time::Instant::now();
    let (mut posted, mut sent, mut recvd) = (0u64, 0u64, 0u64);
    for i in 0..depth.min(n) {
        p.b.eng.post_recv(Qpn(0x12), recv_wr(i, kb, 0x800_0000 + (i % ring) * slot, slot as u32)).unwrap();
    }
    let mut rposted = depth.min(n);
    while recvd < n || sent < n {
        while posted < n && posted - sent < depth {
            p.a.eng.post_send(Qpn(0x11), SendWr { signaled: true, ..send_wr(posted, SendOp::Send, ka, 0x100_0000, size) }).unwrap();
            posted += 1;
        }
        p.now += 1000;
        p.step();
        for c in p.a.take_cqes() {
            assert_eq!((c.status, c.wr_id), (WcStatus::Success, sent));
            sent += 1;
        }
        for c in p.b.take_cqes() {
            assert_eq!((c.status, c.wr_id, c.byte_len), (WcStatus::Success, recvd, size));
            recvd += 1;
            if rposted < n {
                p.b.eng.post_recv(Qpn(0x12), recv_wr(rposted, kb, 0x800_0000 + (rposted % ring) * slot, slot as u32)).unwrap();
                rposted += 1;
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    Rate { msgs: n, bytes: n * u64::from(size), secs, frames: p.a.eng.counters().tx_frames + p.b.eng.counters().tx_frames }
}

pub fn print(label: &str, r: &Rate) {
    println!(
        "{label}: {} msgs in {:.3} s = {:.0} msgs/s, {:.1} MB/s payload, {} frames ({:.0} frames/s)",
        r.msgs,
        r.secs,
        r.msgs as f64 / r.secs,
        r.bytes as f64 / r.secs / 1e6,
        r.frames,
        r.frames as f64 / r.secs
    );
}
