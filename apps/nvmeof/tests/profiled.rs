//! The workloads `scripts/bench-nvmeof` and `scripts/tests.d/45-nvmeof-target-ir` count under
//! callgrind, in a test binary of their own. The integration tests of this crate are otherwise
//! one binary (`it`), which instantiates the generic target, driver and emulator code once for
//! all of them; how the compiler splits and inlines that code depends on everything else in the
//! binary, so instruction counts taken there moved whenever an unrelated test was added. Here
//! they depend only on the product code and these workloads. Each module keeps the name of the
//! file the workload came from, so the tests' names read as before (`mlx5_emu::...`).
//!
//! Each workload reads `NVMEOF_PROFILE_IOS` (and `NVMEOF_PROFILE_OP`, `NVMEOF_PROFILE_QD`,
//! `NVMEOF_PROFILE_GROUPS`, `NVMEOF_HOST_KEYS` where said) and asserts that every I/O completed
//! as it should; run without them they are short tests of their own.

mod common;
mod emu_pair;

/// The target over the soft verbs double (what 45-nvmeof-target-ir counts).
mod loopback {
    use crate::common::*;
    use nvmeof::bench::{BenchConfig, Pattern};
    use nvmeof::host::Host;
    use testbed::soft::SoftFabric;

    /// 4 KiB random reads at QD1 on a RAM namespace: the workload `scripts/tests.d/45-nvmeof-target-ir`
    /// runs under callgrind to count target fast-path instructions per I/O.
    #[test]
    fn qd1_4k_reads_for_profiling() {
        let n: u64 = std::env::var("NVMEOF_PROFILE_IOS").ok().and_then(|v| v.parse().ok()).unwrap_or(2000);
        let fabric = SoftFabric::new();
        let mut w = make_world(&fabric, 8192, &[HOSTNQN]);
        let mut hd = host_dev(&fabric);
        let mut host = Host::connect(&mut hd, &mut w, host_cfg(), SUBNQN).expect("connect");
        let before = w.target.stats().responses;
        let bc = BenchConfig { pattern: Pattern::RandRead, block_size: 4096, queue_depth: 1, duration_ns: u64::MAX / 4, max_ios: n, seed: 9, threads: false };
        let r = host.bench(&mut hd, &mut w, 1, &bc).unwrap();
        assert_eq!((r.ios, r.errors), (n, 0));
        assert_eq!(w.target.stats().responses - before, n + host.stats.keep_alives);
        assert_eq!(w.target.stats().io_copy_bytes, 0);
        println!("NVMEOF-PROFILE-IOS {n}");
    }
}

/// The target and the initiator over the mlx5 driver and the emulated ConnectX, RAM namespace.
mod mlx5_emu {
    use crate::emu_pair::*;
    use nvmeof::bench::{BenchConfig, Pattern};
    use nvmeof::host::{Host, HostConfig};

    /// 4 KiB random I/O over mlx5 + emulated ConnectX with a RAM namespace: the workload
    /// `scripts/bench-nvmeof` runs under callgrind (collecting only `RdmaTarget::poll`, i.e. the
    /// target, the mlx5 driver calls it makes and the namespace, not the adapter model's own loop).
    /// `NVMEOF_PROFILE_OP=read|write|inline-write` (writes use keyed SGLs: RDMA READ of the
    /// host's data; `inline-write` sends the data in the capsule), `NVMEOF_PROFILE_QD` (default
    /// 1), `NVMEOF_PROFILE_IOS`.
    #[test]
    fn target_4k_for_profiling_mlx5() {
        let n: u64 = std::env::var("NVMEOF_PROFILE_IOS").ok().and_then(|v| v.parse().ok()).unwrap_or(500);
        let qd: u16 = std::env::var("NVMEOF_PROFILE_QD").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
        let op = std::env::var("NVMEOF_PROFILE_OP").unwrap_or_default();
        let (write, inline) = (op == "write" || op == "inline-write", op == "inline-write");
        let (mut w, mut h) = setup();
        let cfg = HostConfig { inline_writes: inline, ..host_cfg(qd) };
        let mut host = Host::connect(&mut h.v, &mut w, cfg, SUBNQN).expect("connect");
        let pattern = if write { Pattern::RandWrite } else { Pattern::RandRead };
        let bc = BenchConfig { pattern, block_size: 4096, queue_depth: qd, duration_ns: u64::MAX / 4, max_ios: n, seed: 3, threads: false };
        let (zc0, db0) = (ns_copies(&mut w).0, w.t.cx.counters().sq_doorbells);
        let r = host.bench(&mut h.v, &mut w, 1, &bc).unwrap();
        let db = w.t.cx.counters().sq_doorbells - db0;
        assert_eq!((r.ios, r.errors), (n, 0));
        if !write {
            assert_eq!(ns_copies(&mut w).0 - zc0, n, "every read zero-copy");
        }
        // Target send doorbells (a run's own figure; the bench's doorbell lines are
        // `mlx5_emu::measure_target`'s).
        println!("NVMEOF-PROFILE-IOS {n} op={} qd={qd} target_sq_doorbells={db}", if write { "write" } else { "read" });
    }

    /// 4 KiB random reads at QD1 for callgrind on the initiator (`Host::submit` + `Host::poll`):
    /// `NVMEOF_HOST_KEYS=static` for the long-lived keys, per-I/O keys otherwise.
    #[test]
    fn qd1_4k_reads_for_profiling_host_keys() {
        let n: u64 = std::env::var("NVMEOF_PROFILE_IOS").ok().and_then(|v| v.parse().ok()).unwrap_or(500);
        let per_io = std::env::var("NVMEOF_HOST_KEYS").map_or(true, |v| v != "static");
        let (mut w, mut h) = setup();
        let cfg = HostConfig { per_io_keys: per_io, ..host_cfg(1) };
        let mut host = Host::connect(&mut h.v, &mut w, cfg, SUBNQN).expect("connect");
        let bc = BenchConfig { pattern: Pattern::RandRead, block_size: 4096, queue_depth: 1, duration_ns: u64::MAX / 4, max_ios: n, seed: 3, threads: false };
        let r = host.bench(&mut h.v, &mut w, 1, &bc).unwrap();
        assert_eq!((r.ios, r.errors), (n, 0));
        println!("NVMEOF-PROFILE-IOS {n} per-io-keys={per_io}");
    }
}

/// The target over mlx5 with an NVMe-backed namespace (NVMe driver over the emulated drive).
mod nvme_emu {
    use crate::emu_pair::*;
    use nvmeof::bench::{BenchConfig, Pattern};
    use nvmeof::host::{Host, HostConfig};

    /// 4 KiB random I/O to the NVMe-backed namespace: the workload `scripts/bench-nvmeof` runs
    /// under callgrind (collecting `RdmaTarget::poll` and what it calls: the target, the mlx5 and
    /// NVMe driver calls; the emulated drive runs inside the NVMe doorbell write and is excluded
    /// by crate). `NVMEOF_PROFILE_OP=read|write`, `NVMEOF_PROFILE_QD` (default 1),
    /// `NVMEOF_PROFILE_IOS`.
    #[test]
    fn target_4k_for_profiling_nvme() {
        let n: u64 = std::env::var("NVMEOF_PROFILE_IOS").ok().and_then(|v| v.parse().ok()).unwrap_or(500);
        let qd: u16 = std::env::var("NVMEOF_PROFILE_QD").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
        let write = std::env::var("NVMEOF_PROFILE_OP").is_ok_and(|v| v == "write");
        let (mut w, mut h, d) = setup_nvme();
        let cfg = HostConfig { inline_writes: false, ..host_cfg(qd) };
        let mut host = Host::connect(&mut h.v, &mut w, cfg, SUBNQN).expect("connect");
        let pattern = if write { Pattern::RandWrite } else { Pattern::RandRead };
        let bc = BenchConfig { pattern, block_size: 4096, queue_depth: qd, duration_ns: u64::MAX / 4, max_ios: n, seed: 3, threads: false };
        let c0 = d.state().io_commands;
        let r = host.bench(&mut h.v, &mut w, 1, &bc).unwrap();
        assert_eq!((r.ios, r.errors), (n, 0));
        assert_eq!(d.state().io_commands - c0, n, "every I/O reached the drive");
        println!("NVMEOF-PROFILE-IOS {n} op={} qd={qd} nvme", if write { "write" } else { "read" });
    }
}

/// Poll groups: reads spread over 4 queues and 1, 2 or 4 groups.
mod poll_groups {
    use crate::emu_pair::*;
    use nvmeof::bench::Rng;
    use nvmeof::host::{Host, IoDone, IoKind};
    use nvmeof::Status;
    use rdma::Control;

    /// For `scripts/bench-nvmeof` (NVMEOF-SCALING, callgrind on `RdmaTarget::poll`):
    /// `NVMEOF_PROFILE_IOS` random 4 KiB reads spread over 4 I/O queues at QD8 each (QD32 in
    /// all), the queues over `NVMEOF_PROFILE_GROUPS` poll groups (default 1), one thread.
    #[test]
    fn spread_4k_reads_for_profiling() {
        let n: usize = std::env::var("NVMEOF_PROFILE_IOS").ok().and_then(|v| v.parse().ok()).unwrap_or(400);
        let groups: usize = std::env::var("NVMEOF_PROFILE_GROUPS").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
        let (mut w, mut h) = setup_groups(4, groups);
        let mut host = Host::connect(&mut h.v, &mut w, four_queues(8), SUBNQN).expect("connect");
        let mut rng = Rng::new(3);
        let mut done = [IoDone { queue: 0, slot: 0, status: Status::SUCCESS, dw0: 0, latency_ns: 0 }; 64];
        let mut per_q = [0usize; 5];
        let (mut sent, mut finished) = (0, 0);
        while finished < n {
            for q in 1..=4u16 {
                while per_q[q as usize] < 8 && sent < n {
                    let slot = host.alloc_slot(q).expect("slot");
                    let lba = (rng.next() % (NS_BYTES / 4096 - 1)) * 8;
                    host.submit(&mut h.v, q, slot, IoKind::Read, 1, lba, 8, w.clock.now_ns()).expect("submit");
                    per_q[q as usize] += 1;
                    sent += 1;
                }
            }
            h.v.poll();
            let got = host.poll(&mut h.v, w.clock.now_ns(), &mut done).expect("poll");
            for d in &done[..got] {
                assert!(d.status.is_success(), "{:?}", d.status);
                per_q[d.queue as usize] -= 1;
                finished += 1;
            }
            w.turn();
        }
        for g in 0..groups {
            assert!(w.target.group_stats(g).capsules > 0, "group {g} idle");
        }
        println!("NVMEOF-PROFILE-IOS {n} op=read qd=32 queues=4 groups={groups}");
    }
}
