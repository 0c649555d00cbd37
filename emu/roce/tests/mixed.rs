//! Interleaved SEND / WRITE / WRITE-with-imm / READ in both directions over a lossy,
//! duplicating, reordering link, for several seeds: every operation completes once, in
//! order, with the right bytes.

use crate::common;
use common::*;
use emu_roce::*;

const MIB: usize = 1 << 20;

fn lossy(loss: f64, duplicate: f64, reorder: f64) -> Impairments {
    Impairments { loss, duplicate, reorder, delay_ns: 3_000, jitter_ns: 2_000, reorder_delay_ns: 15_000 }
}

fn run(seed: u64, n_ops: u64, imp: Impairments, pmtu: u32, max_rd_atomic: u8) {
    let mut p = Pair::new(imp, seed, 16 * MIB);
    p.connect(0x11, 0x12, QpAttrs { max_rd_atomic, pmtu, ..rc_attrs() });
    let ka = p.a.reg(0x100_0000, 4 * MIB as u64, Access::ALL);
    let kb = p.b.reg(0x800_0000, 4 * MIB as u64, Access::ALL);
    let kr = p.b.reg(0x1000_0000, n_ops * 8192, Access::LOCAL_WRITE);
    let mut rng = emu_roce::link::SplitMix64::new(seed);
    // Expected side effects, checked at the end.
    let mut expect_remote: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut expect_recv: Vec<(u64, Vec<u8>, Option<u32>)> = Vec::new();
    let mut reads: Vec<(u64, u64, usize)> = Vec::new();
    let mut posted = 0u64;
    let mut send_done = 0u64;
    let mut recv_done = 0usize;
    let slot = 128 * 1024u64;
    for r in 0..n_ops {
        p.b.eng.post_recv(Qpn(0x12), recv_wr(r, kr, 0x1000_0000 + r * 8192, 8192)).unwrap();
    }
    let mut expected_wc: Vec<WcOpcode> = Vec::new();
    while posted < n_ops || send_done < n_ops {
        while posted < n_ops && posted - send_done < 16 {
            let i = posted;
            let kind = rng.below(4);
            let len = match rng.below(4) {
                0 => rng.below(16) as usize,
                1 => rng.below(3000) as usize,
                2 => 1024 * (1 + rng.below(8) as usize),
                _ => rng.below(100_000) as usize,
            };
            let local = 0x100_0000 + (i % 16) * slot;
            let remote = 0x800_0000 + (i % 16) * slot + rng.below(100);
            let data = pattern(len, seed * 1_000_000 + i);
            let wr = match kind {
                0 => {
                    let len = len.min(8192);
                    p.a.write_va(ka, local, &data[..len]);
                    expect_recv.push((i, data[..len].to_vec(), None));
                    expected_wc.push(WcOpcode::Send);
                    send_wr(i, SendOp::Send, ka, local, len as u32)
                }
                1 => {
                    p.a.write_va(ka, local, &data);
                    expect_remote.push((remote, data.clone()));
                    expected_wc.push(WcOpcode::RdmaWrite);
                    send_wr(i, SendOp::RdmaWrite { remote_va: remote, rkey: Rkey(kb) }, ka, local, len as u32)
                }
                2 => {
                    p.a.write_va(ka, local, &data);
                    expect_remote.push((remote, data.clone()));
                    expect_recv.push((i, vec![], Some(i as u32)));
                    expected_wc.push(WcOpcode::RdmaWrite);
                    send_wr(i, SendOp::RdmaWriteWithImm { remote_va: remote, rkey: Rkey(kb), imm: i as u32 }, ka, local, len as u32)
                }
                _ => {
                    p.b.write_va(kb, remote, &data);
                    reads.push((i, local, len));
                    expected_wc.push(WcOpcode::RdmaRead);
                    // Remember what must be read back.
                    expect_remote.push((remote, data.clone()));
                    send_wr(i, SendOp::RdmaRead { remote_va: remote, rkey: Rkey(kb) }, ka, local, len as u32)
                }
            };
            p.a.eng.post_send(Qpn(0x11), wr).unwrap();
            posted += 1;
        }
        assert!(p.run_until(p.now + 120_000_000_000, |p| !p.a.cqes.is_empty()), "seed {seed}: stalled at {send_done}: {:?}", p.a.eng.counters());
        for c in p.a.take_cqes() {
            assert_eq!((c.wr_id, c.status), (send_done, WcStatus::Success), "seed {seed}");
            assert_eq!(c.opcode, expected_wc[send_done as usize], "seed {seed}");
            if let Some(&(_, local, len)) = reads.iter().find(|r| r.0 == c.wr_id) {
                let want = pattern(len, seed * 1_000_000 + c.wr_id);
                assert!(p.a.read_va(ka, local, len) == want, "seed {seed}: READ {} bytes differ", c.wr_id);
            }
            // Slot reuse: a WRITE's remote bytes must be checked before the slot is reused.
            send_done += 1;
        }
        for c in p.b.take_cqes() {
            let (wr_i, ref data, imm) = expect_recv[recv_done];
            assert_eq!(c.status, WcStatus::Success, "seed {seed}");
            assert_eq!(c.imm, imm, "seed {seed}: receive {recv_done} (op {wr_i})");
            if imm.is_none() {
                assert_eq!(c.byte_len as usize, data.len());
                let va = 0x1000_0000 + c.wr_id * 8192;
                assert!(p.b.read_va(kr, va, data.len()) == *data, "seed {seed}: SEND {wr_i} bytes");
            }
            recv_done += 1;
        }
    }
    p.run_until(p.now + 1_000_000_000, |_| false);
    for c in p.b.take_cqes() {
        let (_, ref data, imm) = expect_recv[recv_done];
        assert_eq!((c.status, c.imm), (WcStatus::Success, imm));
        if imm.is_none() {
            assert_eq!(c.byte_len as usize, data.len());
        }
        recv_done += 1;
    }
    assert_eq!(recv_done, expect_recv.len(), "seed {seed}: every receive exactly once");
    // The last WRITE to each remote slot must be in place.
    let mut last: std::collections::BTreeMap<u64, (u64, Vec<u8>)> = Default::default();
    for (remote, data) in expect_remote {
        last.insert(remote & !(slot - 1), (remote, data));
    }
    for (_, (remote, data)) in last {
        assert!(p.b.read_va(kb, remote, data.len()) == data, "seed {seed}: remote slot {remote:#x}");
    }
    let c = p.a.eng.counters();
    assert!(c.retransmits > 0, "seed {seed}: loss exercised");
}

#[test]
fn mixed_ops_lossy_seeds() {
    for seed in 1..=4 {
        run(seed, 150, lossy(0.02, 0.02, 0.03), 1024, 4);
    }
}

#[test]
fn mixed_ops_heavy_loss_small_mtu() {
    run(201, 120, lossy(0.10, 0.05, 0.10), 256, 4);
}

#[test]
fn mixed_ops_4k_mtu_one_read_outstanding() {
    run(301, 150, lossy(0.02, 0.02, 0.03), 4096, 1);
}
