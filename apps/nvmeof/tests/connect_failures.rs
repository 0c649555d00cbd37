//! An initiator's connect that fails at any firmware command of its own adapter leaves nothing
//! behind: for each object-making command the connect issues (CQ, QP and its state changes,
//! memory key, shared receive queue), the emulated ConnectX fails the 1st, 2nd, ... such
//! command of one `Host::connect` (two I/O queues, per-I/O keys and static keys) until the
//! connect gets through; after every failed attempt both adapters hold exactly the objects they
//! held before (QPs, CQs, mkeys, RMPs), the target keeps no queue, and a last connect works.
//! The same sweep on the target's adapter (two poll groups), whether the host saw the failure
//! or not.

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

/// Which adapter the sweep fails commands on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Host,
    Target,
}

/// Fail the 1st, 2nd, ... command of each of [`OPS`] on `side`'s adapter during one connect
/// until a connect gets past them all, checking after each attempt that both adapters hold
/// the objects they held before and the target no queue; then a last connect is served.
fn sweep(side: Side, groups: usize, cfg: HostConfig) {
    let (mut w, mut h) = setup_groups(4, groups);
    // Baselines after one clean connect (the target registers its namespace keys then).
    let host = Host::connect(&mut h.v, &mut w, cfg.clone(), SUBNQN).expect("first connect");
    host.disconnect(&mut h.v, &mut w).expect("disconnect");
    settle(&mut w, &mut h);
    let base = (objects(&h.cx.counters()), objects(&w.t.cx.counters()));
    let mut failures = 0;
    for opcode in OPS {
        let name = op::name(opcode).unwrap_or("?");
        let mut nth = 0u32;
        loop {
            assert!(nth < 200, "{name}: the connect never got past the forced failure");
            let cx = if side == Side::Host { h.cx.clone() } else { w.t.cx.clone() };
            {
                let mut f = cx.faults_mut();
                f.forced.insert(opcode, (NO_RESOURCES, SYNDROME));
                f.forced_after.insert(opcode, nth);
            }
            let failed_before = cx.counters().cmd_failures;
            let r = Host::connect(&mut h.v, &mut w, cfg.clone(), SUBNQN);
            let passed = cx.counters().cmd_failures == failed_before;
            {
                let mut f = cx.faults_mut();
                f.forced.clear();
                f.forced_after.clear();
            }
            let what = format!("{name} #{}", nth + 1);
            match r {
                Ok(host) => {
                    // Fewer than nth+1 such commands (the sweep of this opcode is done), or a
                    // target-side failure the host did not see (its queues must work).
                    assert!(passed || side == Side::Target, "{what}: forced to fail, yet the connect succeeded");
                    failures += !passed as usize;
                    host.disconnect(&mut h.v, &mut w).expect("disconnect");
                    settle(&mut w, &mut h);
                    assert_eq!((objects(&h.cx.counters()), objects(&w.t.cx.counters())), base, "(host, target) objects after a connect past {what}");
                    if passed {
                        println!("{name}: a connect issues {nth}; each one failed in turn left no object");
                        break;
                    }
                }
                Err(e) => {
                    assert!(!passed, "{what}: the connect failed without reaching it: {e:?}");
                    failures += 1;
                    settle(&mut w, &mut h);
                    assert_eq!((objects(&h.cx.counters()), objects(&w.t.cx.counters())), base, "(host, target) (qps, cqs, mkeys, rmps) after {what} failed ({e:?})");
                    assert_eq!(w.target.queues(), 0, "target queues after {what} failed");
                }
            }
            nth += 1;
        }
    }
    assert!(failures >= OPS.len(), "every command failed at least once ({failures} failed)");
    // And the devices still serve a connect.
    let host = Host::connect(&mut h.v, &mut w, cfg, SUBNQN).expect("connect after the sweep");
    host.disconnect(&mut h.v, &mut w).expect("disconnect");
}

#[test]
fn a_connect_failing_at_any_command_leaves_no_object_with_static_keys() {
    sweep(Side::Host, 1, HostConfig { io_queues: 2, per_io_keys: false, ..host_cfg(4) });
}

#[test]
fn a_connect_failing_at_any_command_leaves_no_object_with_per_io_keys() {
    sweep(Side::Host, 1, HostConfig { io_queues: 2, per_io_keys: true, ..host_cfg(4) });
}

/// The target's side, two poll groups (the admin queue and the I/O queues spread over both).
#[test]
fn a_target_failing_at_any_command_of_a_connect_leaves_no_object() {
    sweep(Side::Target, 2, HostConfig { io_queues: 2, ..host_cfg(4) });
}
