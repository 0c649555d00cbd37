//! Appliance initiator ↔ appliance target over the soft verbs: connect, identify, discovery,
//! verified random I/O at QD1/QD32, allow-list, keep-alive expiry, reconnect, bench.

use crate::common;
use common::*;

use hal::DmaRegion;
use nvmeof::bench::{BenchConfig, Pattern, Rng};
use nvmeof::fio_json;
use nvmeof::host::{Host, HostConfig, IoDone, IoKind};
use nvmeof::wire::*;
use nvmeof::{Error, Status};
use testbed::soft::SoftFabric;

fn pattern(lba: u64, gen: u64, i: usize) -> u8 {
    (lba.wrapping_mul(31).wrapping_add(gen.wrapping_mul(7)).wrapping_add(i as u64 / 8) ^ (i as u64)) as u8
}

/// `n` random writes/reads (verified against a shadow) at queue depth `qd`, avoiding
/// overlapping in-flight ranges.
fn verified_io(host: &mut Host<TDev>, hd: &mut TDev, w: &mut World, n: u64, qd: usize, seed: u64) -> (u64, u64) {
    let ns = host.namespaces[0];
    let mut shadow = vec![0u64; ns.blocks as usize];
    let mut gen = 0;
    verified_io_with(host, hd, w, n, qd, seed, &mut shadow, &mut gen)
}

/// Like `verified_io`, continuing a shadow (generation per block, 0 = zeroes).
#[allow(clippy::too_many_arguments)]
fn verified_io_with(host: &mut Host<TDev>, hd: &mut TDev, w: &mut World, n: u64, qd: usize, seed: u64, shadow: &mut [u64], gen: &mut u64) -> (u64, u64) {
    let ns = host.namespaces[0];
    let bs = ns.block_size as usize;
    let mut rng = Rng::new(seed);
    let mut inflight: Vec<(u16, u16, bool, u64, u32, u64)> = Vec::new(); // q, slot, write, lba, blocks, gen
    let (mut issued, mut reads, mut writes, mut verified) = (0u64, 0u64, 0u64, 0u64);
    let mut done = [IoDone { queue: 0, slot: 0, status: Status::SUCCESS, dw0: 0, latency_ns: 0 }; 64];
    while issued < n || !inflight.is_empty() {
        while issued < n && inflight.len() < qd {
            let blocks = 1 + (rng.next() % 16) as u32;
            let lba = rng.next() % (ns.blocks - blocks as u64);
            if inflight.iter().any(|f| lba < f.3 + f.4 as u64 && f.3 < lba + blocks as u64) {
                continue;
            }
            let q = 1 + (issued % 2) as u16;
            let Some(slot) = host.alloc_slot(q) else { break };
            let write = rng.next() % 2 == 0;
            let mut g = 0;
            if write {
                *gen += 1;
                g = *gen;
                let (buf, off, _) = host.slot_buf(q, slot);
                let mut data = vec![0u8; blocks as usize * bs];
                for b in 0..blocks as usize {
                    for i in 0..bs {
                        data[b * bs + i] = pattern(lba + b as u64, g, i);
                    }
                }
                buf.write(off, &data);
                writes += 1;
            } else {
                reads += 1;
            }
            let kind = if write { IoKind::Write } else { IoKind::Read };
            host.submit(hd, q, slot, kind, ns.nsid, lba, blocks, w.now).expect("submit");
            inflight.push((q, slot, write, lba, blocks, g));
            issued += 1;
        }
        let k = host.poll(hd, w.now, &mut done).expect("poll");
        for d in &done[..k] {
            assert!(d.status.is_success(), "I/O failed: {:?}", d.status);
            let i = inflight.iter().position(|f| f.0 == d.queue && f.1 == d.slot).expect("known slot");
            let (q, slot, write, lba, blocks, g) = inflight.swap_remove(i);
            if write {
                for b in 0..blocks as u64 {
                    shadow[(lba + b) as usize] = g;
                }
            } else {
                let (buf, off, _) = host.slot_buf(q, slot);
                let mut data = vec![0u8; blocks as usize * bs];
                buf.read(off, &mut data);
                for b in 0..blocks as usize {
                    let sg = shadow[lba as usize + b];
                    for i in 0..bs {
                        let want = if sg == 0 { 0 } else { pattern(lba + b as u64, sg, i) };
                        assert_eq!(data[b * bs + i], want, "lba {} byte {i}", lba + b as u64);
                    }
                }
                verified += 1;
            }
        }
        use nvmeof::host::HostEnv;
        w.idle(hd);
    }
    assert_eq!(reads, verified);
    (reads, writes)
}

#[test]
fn connect_identify_and_verified_io_qd1_qd32() {
    let fabric = SoftFabric::new();
    let mut w = make_world(&fabric, 8192, &[HOSTNQN]);
    let mut hd = host_dev(&fabric);
    let mut host = Host::connect(&mut hd, &mut w, host_cfg(), SUBNQN).expect("connect");
    let ctrl = host.ctrl.clone().unwrap();
    assert_eq!(ctrl.cntrltype, 1);
    assert_eq!(ctrl.subnqn, SUBNQN);
    assert_eq!(ctrl.ioccsz, (64 + 4096) / 16);
    assert_eq!(ctrl.vs, 0x10300);
    assert_eq!(ctrl.mdts_bytes, 32 * 1024);
    assert_eq!(host.io_queues(), (2, 32));
    assert_eq!(host.namespaces.len(), 1);
    assert_eq!(host.namespaces[0].blocks, 8192);
    assert_eq!(host.namespaces[0].block_size, 512);
    assert_eq!(w.target.core.live_ctrls(), 1);
    assert_eq!(w.target.queues(), 3);

    let mut shadow = vec![0u64; 8192];
    let mut gen = 0;
    let (r1, w1) = verified_io_with(&mut host, &mut hd, &mut w, 10_000, 1, 7, &mut shadow, &mut gen);
    let (r32, w32) = verified_io_with(&mut host, &mut hd, &mut w, 10_000, 32, 8, &mut shadow, &mut gen);
    assert!(r1 > 4000 && w1 > 4000 && r32 > 4000 && w32 > 4000);
    let ts = w.target.stats();
    // Reads leave by RDMA WRITE straight from the buffer the namespace filled: 0 CPU bytes.
    assert_eq!(ts.io_copy_bytes, 0);
    assert!(ts.rdma_writes >= r1 + r32);
    assert!(ts.inline_writes > 0, "small writes went in-capsule");
    assert!(ts.rdma_reads > 0, "large writes were RDMA READ");
    assert_eq!(ts.error_responses, 0);
    assert_eq!(w.target.core_stats().reads, r1 + r32);

    // Flush and Write Zeroes.
    let slot = host.alloc_slot(1).unwrap();
    host.submit(&mut hd, 1, slot, IoKind::WriteZeroes, 1, 0, 8, w.now).unwrap();
    let mut done = [IoDone { queue: 0, slot: 0, status: Status::SUCCESS, dw0: 0, latency_ns: 0 }; 4];
    let mut got = 0;
    while got == 0 {
        use nvmeof::host::HostEnv;
        w.idle(&mut hd);
        got = host.poll(&mut hd, w.now, &mut done).unwrap();
    }
    assert!(done[0].status.is_success());
    assert!(w.target.core.namespace_dev(SUBNQN, 1).unwrap().data.borrow()[..4096].iter().all(|&b| b == 0));

    // Logs: SMART counts and an empty-ish changed NS list.
    let mut smart = [0u8; 512];
    host.get_log(&mut hd, &mut w, lid::SMART, false, 0, &mut smart).unwrap();
    let reads_logged = u64::from_le_bytes(smart[64..72].try_into().unwrap());
    assert_eq!(reads_logged, r1 + r32);
    let writes_logged = u64::from_le_bytes(smart[80..88].try_into().unwrap());
    assert_eq!(writes_logged, w1 + w32, "SMART Host Write Commands");

    host.disconnect(&mut hd, &mut w).unwrap();
    for _ in 0..10 {
        use nvmeof::host::HostEnv;
        w.idle(&mut hd);
    }
    assert_eq!(w.target.core.live_ctrls(), 0);
    assert_eq!(w.target.queues(), 0);
    let res = w.tdev.dev.resources();
    assert_eq!((res.qps, res.cqs, res.mrs, res.bufs), (0, 0, 0, 0), "target freed everything");
}

/// The tests' `RamDisk` makes a handle per poll group (on the same blocks): over 2 groups,
/// verified Reads and Writes on 2 I/O queues move their data through the groups' handles
/// only, the core's store itself moving none.
#[test]
fn ram_disk_io_runs_on_the_poll_groups_handles_not_the_cores_store() {
    let fabric = SoftFabric::new();
    let mut w = make_world(&fabric, 8192, &[HOSTNQN]);
    w.target.set_poll_groups(2);
    let mut hd = host_dev(&fabric);
    let mut host = Host::connect(&mut hd, &mut w, host_cfg(), SUBNQN).expect("connect");
    let (reads, writes) = verified_io(&mut host, &mut hd, &mut w, 2_000, 8, 11);
    assert!(reads > 500 && writes > 500);
    let handles: Vec<u64> = w.target.namespace_handles(SUBNQN, 1).map(|h| h.dma_bytes).collect();
    assert_eq!(handles.len(), 2, "a handle per group");
    assert!(handles.iter().all(|&b| b > 0), "each group's handle moved data: {handles:?}");
    assert_eq!(w.target.core.namespace_dev(SUBNQN, 1).unwrap().dma_bytes, 0, "the core's store moved none");
    assert_eq!(w.target.core_stats().reads, reads);
}

#[test]
fn invalidate_keys_and_no_inline() {
    let fabric = SoftFabric::new();
    let mut w = make_world(&fabric, 2048, &[HOSTNQN]);
    let mut hd = host_dev(&fabric);
    let c = HostConfig { invalidate: true, inline_writes: false, ..host_cfg() };
    let mut host = Host::connect(&mut hd, &mut w, c, SUBNQN).expect("connect");
    verified_io(&mut host, &mut hd, &mut w, 2000, 8, 3);
    assert!(w.target.stats().send_invalidate > 2000);
    assert!(host.stats.invalidated > 2000);
    assert_eq!(w.target.stats().inline_writes, 2, "only the two I/O-queue Connects went inline");
}

#[test]
fn discovery_lists_only_allowed_subsystems() {
    let fabric = SoftFabric::new();
    let mut w = make_world(&fabric, 64, &[HOSTNQN]);
    let mut hd = host_dev(&fabric);
    let e = Host::discover(&mut hd, &mut w, host_cfg()).expect("discover");
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].subnqn, SUBNQN);
    assert_eq!(e[0].traddr, "10.0.0.1");
    assert_eq!(e[0].trsvcid, "4420");
    assert_eq!((e[0].trtype, e[0].adrfam, e[0].subtype), (1, 1, 2));
    for _ in 0..5 {
        use nvmeof::host::HostEnv;
        w.idle(&mut hd);
    }
    assert_eq!(w.target.core.live_ctrls(), 0, "discovery controller freed on disconnect");
}

#[test]
fn host_not_on_allow_list_is_refused() {
    let fabric = SoftFabric::new();
    let mut w = make_world(&fabric, 64, &["nqn.2014-08.org.nvmexpress:uuid:someone-else"]);
    let mut hd = host_dev(&fabric);
    match Host::connect(&mut hd, &mut w, host_cfg(), SUBNQN) {
        Err(Error::Nvme(s)) => assert_eq!(s, Status::CONNECT_INVALID_HOST),
        Err(e) => panic!("unexpected {e:?}"),
        Ok(_) => panic!("connected"),
    }
    match Host::connect(&mut hd, &mut w, host_cfg(), OTHER_NQN) {
        Err(Error::Nvme(s)) => assert_eq!(s, Status::CONNECT_INVALID_HOST),
        _ => panic!("expected refusal"),
    }
    assert_eq!(w.target.core_stats().connects_refused, 2);
    assert_eq!(w.target.core.live_ctrls(), 0);
    // Discovery shows this host nothing.
    let e = Host::discover(&mut hd, &mut w, host_cfg()).expect("discover");
    assert!(e.is_empty());
}

#[test]
fn keep_alive_expiry_frees_controller_and_host_reconnects() {
    let fabric = SoftFabric::new();
    let mut w = make_world(&fabric, 1024, &[HOSTNQN]);
    let mut hd = host_dev(&fabric);
    let c = HostConfig { kato_ms: 2000, ..host_cfg() };
    let mut host = Host::connect(&mut hd, &mut w, c, SUBNQN).expect("connect");
    // A host that keeps ticking stays alive for 10 simulated seconds.
    for _ in 0..100 {
        w.now += 100_000_000;
        host.tick(&mut hd, w.now).unwrap();
        use nvmeof::host::HostEnv;
        w.idle(&mut hd);
        w.idle(&mut hd);
    }
    assert!(host.stats.keep_alives >= 4);
    assert_eq!(w.target.core.live_ctrls(), 1);
    // Silence: the target tears everything down after KATO.
    w.now += 2_500_000_000;
    w.target.poll(&mut w.tdev, w.now);
    assert_eq!(w.target.core_stats().ka_expired, 1);
    assert_eq!(w.target.core.live_ctrls(), 0);
    assert_eq!(w.target.queues(), 0);
    let res = w.tdev.dev.resources();
    assert_eq!((res.qps, res.cqs, res.mrs, res.bufs), (0, 0, 0, 0));
    let mut closed = 0;
    while w.target.take_closed().is_some() {
        closed += 1;
    }
    assert_eq!(closed, 3, "the CM is told to DREQ each queue");
    // The host notices on its next I/O and reconnects.
    let slot = host.alloc_slot(1).unwrap();
    host.submit(&mut hd, 1, slot, IoKind::Read, 1, 0, 1, w.now).unwrap();
    let mut done = [IoDone { queue: 0, slot: 0, status: Status::SUCCESS, dw0: 0, latency_ns: 0 }; 4];
    let mut failed = false;
    for _ in 0..100 {
        use nvmeof::host::HostEnv;
        w.idle(&mut hd);
        match host.poll(&mut hd, w.now, &mut done) {
            Err(_) => {
                failed = true;
                break;
            }
            Ok(_) => {}
        }
    }
    assert!(failed && host.failed());
    host.reconnect(&mut hd, &mut w).expect("reconnect");
    assert_eq!(w.target.core.live_ctrls(), 1);
    verified_io(&mut host, &mut hd, &mut w, 200, 4, 1);
}

/// Traffic-based keep-alive over RDMA: a host that sends no Keep Alive but reads every 100 ms
/// keeps its controller for 10 s with a 2 s KATO (the I/O queue counts in its own state, folded
/// into the controller by the transport's keep-alive check), and its reads reach the
/// controller's counters.
#[test]
fn io_traffic_alone_keeps_the_controller_alive() {
    let fabric = SoftFabric::new();
    let mut w = make_world(&fabric, 1024, &[HOSTNQN]);
    let mut hd = host_dev(&fabric);
    let c = HostConfig { kato_ms: 2000, ..host_cfg() };
    let mut host = Host::connect(&mut hd, &mut w, c, SUBNQN).expect("connect");
    let mut done = [IoDone { queue: 0, slot: 0, status: Status::SUCCESS, dw0: 0, latency_ns: 0 }; 4];
    for i in 0..100u64 {
        w.now += 100_000_000;
        let slot = host.alloc_slot(1).unwrap();
        host.submit(&mut hd, 1, slot, IoKind::Read, 1, i % 8, 1, w.now).unwrap();
        let mut got = 0;
        for _ in 0..100 {
            use nvmeof::host::HostEnv;
            w.idle(&mut hd);
            got += host.poll(&mut hd, w.now, &mut done[got..]).unwrap();
            if got == 1 {
                break;
            }
        }
        assert_eq!(got, 1, "read {i}");
        assert!(done[0].status.is_success(), "read {i}: {:?}", done[0].status);
    }
    assert_eq!(host.stats.keep_alives, 0, "the host never ticked");
    assert_eq!(w.target.core_stats().ka_expired, 0);
    assert_eq!(w.target.core.live_ctrls(), 1);
    w.target.fold_queues();
    let reads: u64 = w.target.core.controllers().map(|c| c.reads).sum();
    assert_eq!(reads, 100);
}

fn wall_ns() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64
}

#[test]
fn bench_prints_report_and_json() {
    let fabric = SoftFabric::new();
    let mut w = make_world(&fabric, 4096, &[HOSTNQN]);
    w.target.set_turnaround_clock(wall_ns);
    let mut hd = host_dev(&fabric);
    let mut host = Host::connect(&mut hd, &mut w, host_cfg(), SUBNQN).expect("connect");
    let bc = BenchConfig { pattern: Pattern::RandMix { read_pct: 70 }, block_size: 4096, queue_depth: 16, duration_ns: 1_000_000_000_000, max_ios: 3000, seed: 5, threads: false };
    let r = host.bench(&mut hd, &mut w, 1, &bc).unwrap();
    assert_eq!(r.ios, 3000);
    assert_eq!(r.errors, 0);
    assert_eq!(r.lat().count(), 3000);
    assert_eq!((r.read.ios + r.write.ios, r.read.ios, r.write.ios), (3000, r.reads, r.writes));
    assert!(r.reads > 1500 && r.writes > 500);
    let mut s = String::new();
    r.write(&mut s, &bc).unwrap();
    println!("{s}");
    assert!(s.contains("IOPS="));
    assert!(s.contains("99.99th"));
    // Target-side turnaround (receive CQE seen → response posted), host wall clock over the
    // soft verbs: a software-path figure for this host CPU, not a hardware latency.
    let mut t = String::new();
    w.target.turnaround().write_report(&mut t, "target turnaround").unwrap();
    println!("{t}");
    assert!(w.target.turnaround().count() >= 3000);
    let ts = w.target.stats();
    let per_io = ts.posts as f64 / ts.responses as f64;
    println!("target: {} responses, {:.2} posts per command, {} bytes copied on I/O paths", ts.responses, per_io, ts.io_copy_bytes);
    assert!(per_io <= 3.01, "recv re-post + optional RDMA op + response SEND");
    let mut j = String::new();
    fio_json::write_marked(&mut j, &bc, &r, &fio_json::JobInfo { jobname: "loopback", timestamp_ms: 0 }).unwrap();
    let b = j.find(fio_json::BEGIN).unwrap();
    let e = j.find(fio_json::END).unwrap();
    for want in ["\"read\" : {", "\"write\" : {", "\"bins\" : {", "\"50.000000\" : "] {
        assert!(j[b..e].contains(want), "{want}");
    }
}

#[test]
fn namespace_change_raises_aen() {
    let fabric = SoftFabric::new();
    let mut w = make_world(&fabric, 64, &[HOSTNQN]);
    let mut hd = host_dev(&fabric);
    let mut host = Host::connect(&mut hd, &mut w, host_cfg(), SUBNQN).expect("connect");
    w.target.core.notify_ns_changed(SUBNQN, 1);
    for _ in 0..10 {
        use nvmeof::host::HostEnv;
        w.idle(&mut hd);
        host.tick(&mut hd, w.now).unwrap();
    }
    assert_eq!(host.stats.aens, 1);
    assert_eq!(host.last_aen, Some(AEN_NS_CHANGED));
    let mut l = [0u8; 4096];
    host.get_log(&mut hd, &mut w, lid::CHANGED_NS, false, 0, &mut l).unwrap();
    assert_eq!(u32::from_le_bytes(l[0..4].try_into().unwrap()), 1);
    assert_eq!(u32::from_le_bytes(l[4..8].try_into().unwrap()), 0);
    host.get_log(&mut hd, &mut w, lid::CHANGED_NS, false, 0, &mut l).unwrap();
    assert_eq!(u32::from_le_bytes(l[0..4].try_into().unwrap()), 0, "cleared by RAE=0 read");
}


/// Abort (admin 0x08): parsed (CDW10 = CID << 16 | SQID); nothing is ever queued inside the
/// target, so the answer is "not aborted" (DW0 bit 0 = 1); an SQID the controller never had
/// is Invalid Field; Identify reports ACL (4 concurrent aborts).
#[test]
fn abort_is_parsed_and_answered_not_aborted() {
    let fabric = SoftFabric::new();
    let mut w = make_world(&fabric, 256, &[HOSTNQN]);
    let mut hd = host_dev(&fabric);
    let mut host = Host::connect(&mut hd, &mut w, host_cfg(), SUBNQN).expect("connect");
    let abort = |sqid: u32, cid: u32| {
        let mut s = Sqe::zeroed();
        s.opcode = admin_op::ABORT;
        s.flags = PSDT_SGL;
        s.dptr.typ = sgl_type::KEYED_ADDR; // null keyed SGL, as hosts send for no data
        s.cdw10 = zerocopy::byteorder::little_endian::U32::new(cid << 16 | sqid);
        s
    };
    for (sqid, cid) in [(0, 3), (1, 0), (2, 31), (1, 0xFFFF)] {
        let (dw0, _) = host.admin_raw(&mut hd, &mut w, abort(sqid, cid), None).expect("abort answered");
        assert_eq!(dw0 & 1, 1, "SQID {sqid} CID {cid}: not aborted");
    }
    match host.admin_raw(&mut hd, &mut w, abort(3, 1), None) {
        Err(Error::Nvme(st)) => assert_eq!(st, Status::INVALID_FIELD, "SQID beyond the granted queues"),
        r => panic!("{r:?}"),
    }
    let mut id = [0u8; 4096];
    host.identify(&mut hd, &mut w, cns::CONTROLLER, 0, &mut id).unwrap();
    assert_eq!(id[258], 3, "ACL (Identify Controller byte 258)");
    // The connection keeps working.
    verified_io(&mut host, &mut hd, &mut w, 50, 4, 9);
}

/// CC.EN 1 -> 0 (controller reset by Property Set): CSTS.RDY clears, the controller's I/O
/// queues are torn down (their QPs handed to the CM for DREQ), the admin queue stays; after
/// re-enabling, the host may connect I/O queues again.
#[test]
fn controller_reset_tears_down_io_queues() {
    let fabric = SoftFabric::new();
    let mut w = make_world(&fabric, 256, &[HOSTNQN]);
    let mut hd = host_dev(&fabric);
    let mut host = Host::connect(&mut hd, &mut w, host_cfg(), SUBNQN).expect("connect");
    assert_eq!(w.target.queues(), 3, "admin + 2 I/O queues");
    let io_qps_before = w.target.stats().conns_closed;
    host.admin_raw(&mut hd, &mut w, nvmeof::host::property_set_sqe(prop::CC, 0), None).expect("CC.EN = 0");
    assert_eq!(w.target.queues(), 1, "only the admin queue is left");
    assert_eq!(w.target.stats().conns_closed - io_qps_before, 2);
    let mut closed = vec![];
    while let Some(q) = w.target.take_closed() {
        closed.push(q);
    }
    assert_eq!(closed.len(), 2, "DREQ for each I/O queue: {closed:?}");
    let (csts, _) = host.admin_raw(&mut hd, &mut w, nvmeof::host::property_get_sqe(prop::CSTS, false), None).unwrap();
    assert_eq!(csts & 1, 0, "CSTS.RDY cleared");
    // Re-enable (IOSQES 6, IOCQES 4, EN): ready again; the controller takes I/O queue Connects anew.
    host.admin_raw(&mut hd, &mut w, nvmeof::host::property_set_sqe(prop::CC, (4 << 20) | (6 << 16) | 1), None).unwrap();
    let (csts, _) = host.admin_raw(&mut hd, &mut w, nvmeof::host::property_get_sqe(prop::CSTS, false), None).unwrap();
    assert_eq!(csts & 3, 1, "CSTS.RDY set, no fatal status");
    assert_eq!(w.target.core.live_ctrls(), 1, "the controller survives its reset");
}

#[test]
fn device_latency_is_timed_per_namespace() {
    let fabric = SoftFabric::new();
    let mut w = make_world(&fabric, 4096, &[HOSTNQN]);
    assert!(w.target.core.set_device_clock(wall_ns));
    let mut hd = host_dev(&fabric);
    let mut host = Host::connect(&mut hd, &mut w, host_cfg(), SUBNQN).expect("connect");
    verified_io(&mut host, &mut hd, &mut w, 400, 8, 3);
    let c = w.target.core_stats();
    let ns: Vec<_> = w.target.namespace_stats().collect();
    // Every namespace is timed; every Read and Write went to its store through the table
    // (and the verified I/O above shows the tags mapped back).
    let timed: u64 = ns.iter().map(|n| n.device_latency.as_ref().expect("timed").count()).sum();
    assert_eq!(timed, c.reads + c.writes);
    assert!(timed >= 400);
    let per_ns: u64 = ns.iter().map(|n| n.stats.reads + n.stats.writes).sum();
    assert_eq!(per_ns, c.reads + c.writes);
    let sub_bytes: u64 = w.target.subsystem_stats().map(|(_, s)| s.bytes_read + s.bytes_written).sum();
    assert_eq!(ns.iter().map(|n| n.stats.bytes_read + n.stats.bytes_written).sum::<u64>(), sub_bytes);
    assert!(sub_bytes >= 400 * 512);
    assert!(ns.iter().all(|n| n.in_flight == Some(0)));
    assert_eq!(w.target.core.block_inflight_count(), 0);
}

/// The subsystem unlinked from the port (nvmet configfs: its port link removed): the
/// controller is deleted (every queue closed, the CM told to DREQ each), Connects are refused
/// as for an unknown subsystem (Connect Invalid Parameters, DNR) and discovery leaves it out;
/// linked again, it is listed and served.
#[test]
fn an_unlinked_subsystem_is_neither_served_nor_listed_until_linked_again() {
    let fabric = SoftFabric::new();
    let mut w = make_world(&fabric, 256, &[HOSTNQN]);
    let mut hd = host_dev(&fabric);
    let host = Host::connect(&mut hd, &mut w, host_cfg(), SUBNQN).expect("connect");
    assert_eq!((w.target.core.live_ctrls(), w.target.queues()), (1, 3));
    assert!(w.target.unlink_subsystem(&mut w.tdev, 1, SUBNQN));
    assert!(!w.target.unlink_subsystem(&mut w.tdev, 1, "nqn.2026-01.io.appliance:none"), "no such subsystem");
    assert_eq!(w.target.core.subsystem_linked(1, SUBNQN), Some(false));
    assert_eq!((w.target.core.live_ctrls(), w.target.queues()), (0, 0), "controller deleted, queues closed");
    let mut closed = 0;
    while w.target.take_closed().is_some() {
        closed += 1;
    }
    assert_eq!(closed, 3, "the CM is told to DREQ each queue");
    drop(host);
    match Host::connect(&mut hd, &mut w, host_cfg(), SUBNQN) {
        Err(Error::Nvme(s)) => assert_eq!(s, Status::CONNECT_INVALID_PARAM),
        Err(e) => panic!("unexpected {e:?}"),
        Ok(_) => panic!("connected to an unlinked subsystem"),
    }
    assert!(Host::discover(&mut hd, &mut w, host_cfg()).expect("discover").is_empty(), "not listed while unlinked");
    assert!(w.target.link_subsystem(1, SUBNQN));
    let e = Host::discover(&mut hd, &mut w, host_cfg()).expect("discover");
    assert_eq!(e.iter().map(|e| e.subnqn.as_str()).collect::<Vec<_>>(), [SUBNQN]);
    let mut host = Host::connect(&mut hd, &mut w, host_cfg(), SUBNQN).expect("connect once linked");
    verified_io(&mut host, &mut hd, &mut w, 200, 4, 5);
}
