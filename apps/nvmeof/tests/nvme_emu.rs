//! The "Measure" figures of an NVMe-backed namespace (issue 14): the target over the mlx5
//! driver + emulated ConnectX (as `mlx5_emu`), its namespace 1 on the local NVMe driver
//! (`nvme::NvmeNamespace`) over the emulated NVMe drive (`testbed::nvme_drive`, volatile
//! write cache on) in the target node's physical memory, one process.
//!
//! Shown: verified writes and reads reach the drive's media and come back intact; per 4 KiB
//! I/O the target adapter's doorbells (MMIO writes to its BAR, SQ doorbells), the drive's
//! doorbells (SQ tail and CQ head writes), drive commands, and the CPU bytes the target
//! copied (the transport's copies; the NVMe driver has no data-copy path: the drive moves
//! data by DMA between its media and the slot's RDMA buffer, which is the command's PRP
//! buffer). Asserted: one drive command per I/O and 0 bytes copied. Run:
//! `cargo test --release -p nvmeof --test it nvme_emu:: -- --nocapture --test-threads=1`.
//! Also: bursts of Writes whose RDMA READs into slot buffers wait behind an outstanding READ
//! of their queue, and the drive's errors and limits as the host sees them.

use std::fmt::Write as _;

use hal::DmaRegion;
use nvmeof::bench::{BenchConfig, Pattern, Rng};
use nvmeof::host::{Host, HostConfig, IoDone, IoKind};
use nvmeof::Status;
use rdma::Control;
use testbed::nvme_drive::NvmeDrive;
use testbed::Node;

use crate::emu_pair;
use emu_pair::*;

#[derive(Clone, Copy)]
struct Snap {
    nic_mmio: u64,
    nic_sq: u64,
    drive_sq: u64,
    drive_cq: u64,
    drive_cmds: u64,
    copied: u64,
}
fn snap(w: &mut NvmeWorld, d: &NvmeDrive) -> Snap {
    let c = w.t.cx.counters();
    let s = d.state();
    Snap { nic_mmio: c.mmio_writes, nic_sq: c.sq_doorbells, drive_sq: s.sq_doorbells, drive_cq: s.cq_doorbells, drive_cmds: s.io_commands, copied: w.target.stats().io_copy_bytes }
}

/// 4 KiB random I/O at `qd`; prints the figure lines; returns (drive commands, CPU bytes
/// copied) per I/O.
fn measure(w: &mut NvmeWorld, h: &mut Node, d: &NvmeDrive, host: &mut Host<V>, write: bool, qd: u16, n: u64) -> (f64, f64) {
    let pattern = if write { Pattern::RandWrite } else { Pattern::RandRead };
    let bc = BenchConfig { pattern, block_size: 4096, queue_depth: qd, duration_ns: u64::MAX / 4, max_ios: n, seed: qd as u64 + write as u64, threads: false };
    let a = snap(w, d);
    let r = host.bench(&mut h.v, w, 1, &bc).expect("bench");
    let b = snap(w, d);
    assert_eq!((r.ios, r.errors), (n, 0));
    let per = |x: u64, y: u64| (y - x) as f64 / n as f64;
    let op = if write { "write" } else { "read" };
    let cmds = per(a.drive_cmds, b.drive_cmds);
    let copied = per(a.copied, b.copied);
    let mut s = String::new();
    writeln!(
        s,
        "NVMEOF-NVME-DOORBELLS op={op} qd={qd} nic_mmio={:.3} nic_sq={:.3} nvme_sq={:.3} nvme_cq={:.3} nvme_cmds={cmds:.3}",
        per(a.nic_mmio, b.nic_mmio),
        per(a.nic_sq, b.nic_sq),
        per(a.drive_sq, b.drive_sq),
        per(a.drive_cq, b.drive_cq)
    )
    .unwrap();
    writeln!(s, "NVMEOF-NVME-BYTES-COPIED op={op} qd={qd} {copied:.1}").unwrap();
    print!("{s}");
    (cmds, copied)
}

/// Write then read back `n` random 4 KiB blocks at QD1 (keyed SGLs: RDMA READ of the host's
/// data) and check every byte, at the host and on the drive's media after a Flush.
fn verified(w: &mut NvmeWorld, h: &mut Node, d: &NvmeDrive, host: &mut Host<V>, n: usize) {
    let mut rng = Rng::new(91);
    let mut done = [IoDone { queue: 0, slot: 0, status: Status::SUCCESS, dw0: 0, latency_ns: 0 }; 8];
    let lbas: Vec<u64> = (0..n).map(|_| (rng.next() % (NS_BYTES / 4096 - 1)) * 8).collect();
    let mut run = |w: &mut NvmeWorld, h: &mut Node, host: &mut Host<V>, kind: IoKind, lba: u64, blocks: u32| {
        let slot = host.alloc_slot(1).expect("slot");
        if kind == IoKind::Write {
            let (buf, off, _) = host.slot_buf(1, slot);
            let data: Vec<u8> = (0..4096).map(|i| pattern(lba, i)).collect();
            buf.write(off, &data);
        }
        host.submit(&mut h.v, 1, slot, kind, 1, lba, blocks, w.clock.now_ns()).expect("submit");
        for _ in 0..100_000 {
            h.v.poll();
            if host.poll(&mut h.v, w.clock.now_ns(), &mut done).expect("poll") > 0 {
                assert!(done[0].status.is_success(), "{kind:?} LBA {lba}: {:?}", done[0].status);
                return slot;
            }
            w.turn();
        }
        panic!("{kind:?} LBA {lba} never completed");
    };
    for &lba in &lbas {
        run(w, h, host, IoKind::Write, lba, 8);
    }
    let flushes = d.state().flushes;
    run(w, h, host, IoKind::Flush, 0, 1); // the host API takes a block count; Flush carries none
    assert_eq!(d.state().flushes, flushes + 1, "the host's Flush reached the drive");
    assert_eq!(d.state().ns(1).unwrap().unflushed_blocks(), 0, "nothing left in the drive's cache");
    for &lba in &lbas {
        let want: Vec<u8> = (0..4096).map(|i| pattern(lba, i)).collect();
        assert!(d.state().ns(1).unwrap().read(lba, 8) == &want[..], "LBA {lba}: the drive's media holds the write");
        let slot = run(w, h, host, IoKind::Read, lba, 8);
        let (buf, off, _) = host.slot_buf(1, slot);
        let mut got = vec![0u8; 4096];
        buf.read(off, &mut got);
        assert!(got == want, "LBA {lba}: read back differs");
    }
}

#[test]
fn measure_target_over_nvme_drive() {
    let (mut w, mut h, d) = setup_nvme();
    let cfg = HostConfig { inline_writes: false, ..host_cfg(32) };
    let mut host = Host::connect(&mut h.v, &mut w, cfg, SUBNQN).expect("connect");
    verified(&mut w, &mut h, &d, &mut host, 64);
    let n: u64 = std::env::var("NVMEOF_EMU_IOS").ok().and_then(|v| v.parse().ok()).unwrap_or(2000);
    for write in [false, true] {
        for qd in [1, 32] {
            let (cmds, copied) = measure(&mut w, &mut h, &d, &mut host, write, qd, n);
            assert_eq!(cmds, 1.0, "one drive command per 4 KiB I/O");
            assert_eq!(copied, 0.0, "no CPU copy of the data");
        }
    }
    host.disconnect(&mut h.v, &mut w).expect("disconnect");
}

/// One I/O of 8 blocks (4 KiB) per LBA in `lbas` on queue 1: the first half submitted before
/// polling (the target takes their capsules in one turn), the rest `gap` turns later (their
/// capsules arrive while the first half's READs may still be out); then turn until every one
/// completed, each once and with success. A Write carries `pattern`, a Read's data is checked
/// against it.
fn burst(w: &mut NvmeWorld, h: &mut Node, host: &mut Host<V>, kind: IoKind, lbas: &[u64], gap: usize) {
    let mut out = std::collections::BTreeMap::new();
    let mut done = [IoDone { queue: 0, slot: 0, status: Status::SUCCESS, dw0: 0, latency_ns: 0 }; 16];
    let (first, rest) = lbas.split_at(lbas.len() / 2);
    for turn in 0..100_000 {
        let submit = if turn == 0 { first } else if turn == gap.max(1) { rest } else { &[] };
        for &lba in submit {
            let slot = host.alloc_slot(1).expect("a slot for every I/O of the burst");
            if kind == IoKind::Write {
                let (buf, off, _) = host.slot_buf(1, slot);
                buf.write(off, &(0..4096).map(|i| pattern(lba, i)).collect::<Vec<u8>>());
            }
            host.submit(&mut h.v, 1, slot, kind, 1, lba, 8, w.clock.now_ns()).expect("submit");
            out.insert(slot, lba);
        }
        if out.is_empty() && turn >= gap {
            return;
        }
        h.v.poll();
        let n = host.poll(&mut h.v, w.clock.now_ns(), &mut done).expect("poll");
        for c in &done[..n] {
            let lba = out.remove(&c.slot).unwrap_or_else(|| panic!("{kind:?} on slot {} completed twice or never sent", c.slot));
            assert!(c.status.is_success(), "{kind:?} LBA {lba}: {:?}", c.status);
            if kind == IoKind::Read {
                let (buf, off, _) = host.slot_buf(1, c.slot);
                let mut got = vec![0u8; 4096];
                buf.read(off, &mut got);
                assert!(got.iter().enumerate().all(|(i, b)| *b == pattern(lba, i)), "LBA {lba}: read back differs");
            }
        }
        w.turn();
    }
    panic!("{kind:?} at LBAs {:?} never completed", out.values().collect::<Vec<_>>());
}

/// Writes at QD 8 over an NVMe-backed namespace (keyed SGLs: each Write's data comes by an
/// RDMA READ into its slot buffer). A READ while another is outstanding on the queue is held
/// for the queue's next doorbell (posted by it, at the latest by the last READ's completion);
/// half of each burst comes 0-3 turns after the other, while the first half's READs are out:
/// every Write of each burst completes once with success, one READ each (none lost, none
/// posted twice), its data on the drive's media and read back intact, no command left
/// outstanding on the queue.
#[test]
fn writes_whose_reads_wait_behind_an_outstanding_read_all_complete_with_their_data() {
    const QD: u16 = 8;
    const BURSTS: u64 = 16;
    let (mut w, mut h, d) = setup_nvme();
    let cfg = HostConfig { inline_writes: false, ..host_cfg(QD) };
    let mut host = Host::connect(&mut h.v, &mut w, cfg, SUBNQN).expect("connect");
    let s0 = w.target.stats();
    let mut rng = Rng::new(15);
    let mut all = Vec::new();
    for b in 0..BURSTS {
        // Distinct 4 KiB-aligned LBAs within a burst (no two Writes of one burst overlap).
        let mut lbas: Vec<u64> = Vec::new();
        while lbas.len() < QD as usize {
            let lba = (rng.next() % (NS_BYTES / 4096)) * 8;
            if !lbas.contains(&lba) {
                lbas.push(lba);
            }
        }
        burst(&mut w, &mut h, &mut host, IoKind::Write, &lbas, b as usize % 4);
        all.retain(|l| !lbas.contains(l));
        all.extend(lbas);
    }
    let s1 = w.target.stats();
    let writes = BURSTS * QD as u64;
    assert!(s1.held_slot_reads > s0.held_slot_reads, "READs waited behind an outstanding READ (held_slot_reads {})", s1.held_slot_reads);
    assert_eq!(s1.rdma_reads - s0.rdma_reads, writes, "one RDMA READ per Write");
    assert_eq!((s1.wc_errors, s1.post_errors, s1.error_responses, s1.stuck_commands), (0, 0, 0, 0));
    let q: Vec<_> = w.target.queue_reports().collect();
    assert!(q.iter().all(|q| q.busy == 0), "no command left outstanding: {q:?}");
    assert_eq!(q.iter().map(|q| q.bytes_written).sum::<u64>(), writes * 4096);
    let (mut done, slot) = ([IoDone { queue: 0, slot: 0, status: Status::SUCCESS, dw0: 0, latency_ns: 0 }; 1], host.alloc_slot(1).expect("slot"));
    host.submit(&mut h.v, 1, slot, IoKind::Flush, 1, 0, 1, w.clock.now_ns()).expect("flush");
    let mut turns = 0;
    while host.poll(&mut h.v, w.clock.now_ns(), &mut done).expect("poll") == 0 {
        assert!(turns < 100_000, "the Flush never completed");
        turns += 1;
        h.v.poll();
        w.turn();
    }
    assert!(done[0].status.is_success(), "Flush: {:?}", done[0].status);
    for &lba in &all {
        let want: Vec<u8> = (0..4096).map(|i| pattern(lba, i)).collect();
        assert!(d.state().ns(1).unwrap().read(lba, 8) == &want[..], "LBA {lba}: the drive's media holds the write");
    }
    for chunk in all.chunks(QD as usize) {
        burst(&mut w, &mut h, &mut host, IoKind::Read, chunk, 0);
    }
    host.disconnect(&mut h.v, &mut w).expect("disconnect");
}

/// The drive's media and PI errors reach the host as the drive reported them (DNR kept), one
/// drive command per host command (no retries); Write Zeroes beyond MDTS but within the
/// drive's limit is served, beyond it refused with Invalid Field before the drive.
#[test]
fn drive_errors_and_limits_through_the_target() {
    let (mut w, mut h, d) = setup_nvme();
    d.state().wzsl = 0; // not reported: one command's 16-bit NLB
    let cfg = HostConfig { inline_writes: false, ..host_cfg(8) };
    let mut host = Host::connect(&mut h.v, &mut w, cfg, SUBNQN).expect("connect");
    let run = |w: &mut NvmeWorld, h: &mut Node, host: &mut Host<V>, kind: IoKind, lba: u64, blocks: u32| io_status(w, h, host, 1, kind, lba, blocks);
    for st in [Status { sct: 2, sc: 0x82, dnr: true }, Status { sct: 2, sc: 0x81, dnr: true }] {
        d.state().failing = Some((1, st));
        let c0 = d.state().io_commands;
        assert_eq!(run(&mut w, &mut h, &mut host, IoKind::Read, 8, 8), st);
        assert_eq!(run(&mut w, &mut h, &mut host, IoKind::Write, 8, 8), st);
        assert_eq!(d.state().io_commands - c0, 2, "one drive command per host command");
    }
    d.state().failing = None;
    assert_eq!(run(&mut w, &mut h, &mut host, IoKind::Read, 8, 8), Status::SUCCESS);
    // 1 MiB of zeroes (2048 blocks, above the 128 KiB MDTS) in one drive command.
    d.state().ns_mut(1).unwrap().data[..(1 << 20) + 512].fill(0xAB);
    let c0 = d.state().io_commands;
    assert_eq!(run(&mut w, &mut h, &mut host, IoKind::WriteZeroes, 0, 2048), Status::SUCCESS);
    assert_eq!(d.state().io_commands - c0, 1);
    let s = d.state();
    let data = &s.ns(1).unwrap().data;
    assert!(data[..1 << 20].iter().all(|b| *b == 0) && data[1 << 20] == 0xAB);
}
