//! An initiator's connect that fails at any firmware command of its own adapter leaves nothing
//! behind: for each object-making command the connect issues (CQ, QP and its state changes,
//! memory key, shared receive queue), the emulated ConnectX fails the 1st, 2nd, ... such
//! command of one `Host::connect` (two I/O queues, per-I/O keys and static keys) until the
//! connect gets through; after every failed attempt the adapter holds exactly the objects it
//! held before (QPs, CQs, mkeys, RMPs), the target keeps no queue, and a last connect works.
//! The same sweep on the target's adapter (two poll groups) leaves the target's adapter as it
//! was, whether the host saw the failure or not.

use emu_connectx::Counters;
use mlx5::op;
use nvmeof::host::{Host, HostConfig};
use rdma::Control;
use testbed::Node;

use crate::emu_pair::*;

/// The commands a connect makes objects or moves QPs with.
const OPS: [u16; 7] = [op::CREATE_CQ, op::CREATE_QP, op::RST2INIT_QP, op::INIT2RTR_QP, op::RTR2RTS_QP, op::CREATE_MKEY, op::CREATE_RMP];

/// The command status "no resources" (`MLX5_CMD_STAT_NO_RES_ERR`, 0xf in the PRM's list), with a
/// syndrome of our choosing.
const NO_RESOURCES: u8 = 0xf;
const SYNDROME: u32 = 0x00c0_ffee;

fn objects(c: &Counters) -> (usize, usize, usize, usize) {
    (c.qps, c.cqs, c.mkeys, c.rmps)
}

/// Settle both sides: the target's turns (the CM's DREQ of a torn-down queue reaches it).
fn settle(w: &mut World, h: &mut Node) {
    for _ in 0..200 {
        h.v.poll();
        w.turn();
    }
}

fn sweep(cfg: HostConfig) {
    let (mut w, mut h) = setup_with(4);
    let base = objects(&h.cx.counters());
    let mut failures = 0;
    for opcode in OPS {
        let name = op::name(opcode).unwrap_or("?");
        let mut nth = 0u32;
        loop {
            assert!(nth < 200, "{name}: the connect never got past the forced failure");
            {
                let mut f = h.cx.faults_mut();
                f.forced.insert(opcode, (NO_RESOURCES, SYNDROME));
                f.forced_after.insert(opcode, nth);
            }
            let failed_before = h.cx.counters().cmd_failures;
            let r = Host::connect(&mut h.v, &mut w, cfg.clone(), SUBNQN);
            let passed = h.cx.counters().cmd_failures == failed_before;
            {
                let mut f = h.cx.faults_mut();
                f.forced.clear();
                f.forced_after.clear();
            }
            match r {
                Ok(host) => {
                    // The connect made fewer than nth+1 such commands: the sweep of this
                    // opcode is done.
                    assert!(passed, "{name} #{}: forced to fail, yet the connect succeeded", nth + 1);
                    host.disconnect(&mut h.v, &mut w).expect("disconnect");
                    settle(&mut w, &mut h);
                    assert_eq!(objects(&h.cx.counters()), base, "objects after the clean connect past {name}");
                    println!("{name}: a connect issues {nth}; each one failed in turn left no object");
                    break;
                }
                Err(e) => {
                    assert!(!passed, "{name} #{}: the connect failed without reaching it: {e:?}", nth + 1);
                    failures += 1;
                    settle(&mut w, &mut h);
                    assert_eq!(
                        objects(&h.cx.counters()),
                        base,
                        "(qps, cqs, mkeys, rmps) after the connect failed at {name} #{} ({e:?})",
                        nth + 1
                    );
                    assert_eq!(w.target.queues(), 0, "target queues after the connect failed at {name} #{}", nth + 1);
                }
            }
            nth += 1;
        }
    }
    assert!(failures >= OPS.len(), "every command failed at least once ({failures} failed connects)");
    // And the device still serves a connect.
    let host = Host::connect(&mut h.v, &mut w, cfg, SUBNQN).expect("connect after the sweep");
    host.disconnect(&mut h.v, &mut w).expect("disconnect");
}

#[test]
fn a_connect_failing_at_any_command_leaves_no_object_with_static_keys() {
    sweep(HostConfig { io_queues: 2, per_io_keys: false, ..host_cfg(4) });
}

#[test]
fn a_connect_failing_at_any_command_leaves_no_object_with_per_io_keys() {
    sweep(HostConfig { io_queues: 2, per_io_keys: true, ..host_cfg(4) });
}

/// The target's side: its adapter fails the 1st, 2nd, ... command of each kind a host's
/// connect makes it issue (poll group CQ and SRQ, the queue's QP and its moves, memory keys);
/// the host's connect fails (refused, or its queue closed), and once both sides have settled
/// the target's adapter holds what it held before, the target keeps no queue, and a last
/// connect is served.
fn target_sweep(cfg: HostConfig) {
    // Two poll groups: the admin queue and the I/O queues spread over both.
    let (mut w, mut h) = setup_groups(4, 2);
    // Baseline with the namespace keys the first connect registers for zero-copy.
    let host = Host::connect(&mut h.v, &mut w, cfg.clone(), SUBNQN).expect("first connect");
    host.disconnect(&mut h.v, &mut w).expect("disconnect");
    settle(&mut w, &mut h);
    let base = objects(&w.t.cx.counters());
    let host_base = objects(&h.cx.counters());
    let mut failures = 0;
    for opcode in OPS {
        let name = op::name(opcode).unwrap_or("?");
        let mut nth = 0u32;
        loop {
            assert!(nth < 200, "{name}: the connect never got past the target's forced failure");
            {
                let mut f = w.t.cx.faults_mut();
                f.forced.insert(opcode, (NO_RESOURCES, SYNDROME));
                f.forced_after.insert(opcode, nth);
            }
            let failed_before = w.t.cx.counters().cmd_failures;
            let r = Host::connect(&mut h.v, &mut w, cfg.clone(), SUBNQN);
            let passed = w.t.cx.counters().cmd_failures == failed_before;
            {
                let mut f = w.t.cx.faults_mut();
                f.forced.clear();
                f.forced_after.clear();
            }
            let host = match r {
                Ok(host) if passed => host,
                // A failure on the target that the host did not notice: its queues must work.
                Ok(host) => {
                    failures += 1;
                    host
                }
                Err(e) => {
                    assert!(!passed, "{name} #{}: the connect failed without reaching it: {e:?}", nth + 1);
                    failures += 1;
                    settle(&mut w, &mut h);
                    assert_eq!(objects(&w.t.cx.counters()), base, "target (qps, cqs, mkeys, rmps) after its {name} #{} failed ({e:?})", nth + 1);
                    assert_eq!(objects(&h.cx.counters()), host_base, "host objects after the target's {name} #{} failed", nth + 1);
                    assert_eq!(w.target.queues(), 0, "target queues after its {name} #{} failed", nth + 1);
                    nth += 1;
                    continue;
                }
            };
            host.disconnect(&mut h.v, &mut w).expect("disconnect");
            settle(&mut w, &mut h);
            assert_eq!(objects(&w.t.cx.counters()), base, "target objects after a connect past its {name} #{}", nth + 1);
            if passed {
                println!("target {name}: a connect issues {nth}; each one failed in turn left no object");
                break;
            }
            nth += 1;
        }
    }
    assert!(failures >= OPS.len(), "every command failed at least once ({failures} failed)");
    let host = Host::connect(&mut h.v, &mut w, cfg, SUBNQN).expect("connect after the sweep");
    host.disconnect(&mut h.v, &mut w).expect("disconnect");
}

#[test]
fn a_target_failing_at_any_command_of_a_connect_leaves_no_object() {
    target_sweep(HostConfig { io_queues: 2, ..host_cfg(4) });
}
