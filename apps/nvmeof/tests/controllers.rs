//! Several controllers on one initiator device (`nvmeof::host::controllers`): after the device
//! fails every controller releases its queues before the device comes back, then each
//! reconnects and verified I/O resumes with nothing leaked; and while one target is down and
//! retried, I/O to the other keeps completing; a subsystem unlinked from its port (Linux nvmet's
//! way: queues disconnected, Connects refused with DNR) is retried and reconnected once linked
//! again. Two subsystems of the emulated-ConnectX pair
//! stand for the two targets (each reached at its own address through the test's CM).

use std::collections::BTreeMap;

use hal::DmaRegion;
use nvmeof::bench::{BenchConfig, Pattern};
use nvmeof::host::controllers::{Controllers, CtrlEvent, CtrlState, TargetAddr};
use nvmeof::host::{ConnectPoll, Host, HostEnv, IoDone, IoKind};
use nvmeof::verify::reconnecting::{self, Workload};
use nvmeof::Status;
use rdma::{Control, Qpn};
use testbed::Node;

use crate::emu_pair;
use emu_pair::*;

const A: TargetAddr = TargetAddr { ip: [10, 88, 0, 1], port: 4420 };
const B: TargetAddr = TargetAddr { ip: [10, 88, 0, 3], port: 4420 };

/// The pair's direct CM reached at two addresses; a target that is "down" never answers.
struct Net {
    w: World,
    to: TargetAddr,
    down: Option<TargetAddr>,
    /// CM handle → (our QP, target address); handles to a down target stay pending.
    conns: BTreeMap<u32, (Qpn, TargetAddr)>,
    unanswered: Vec<u32>,
    next_dead: u32,
    /// A planned outage, taken in `idle` by the clock: target down from..to.
    outage: Option<(u64, u64, TargetAddr)>,
    /// A target that accepts connections but never takes a command (its QP posts no
    /// receive: the host's capsules wait in RNR retries), so Fabrics Connect is never
    /// answered. CM handle -> (its QP, CQ) on the target's adapter.
    mute: Option<TargetAddr>,
    /// As `mute`, for I/O queues only (the REQ's qid not 0): the admin queue works.
    mute_io: Option<TargetAddr>,
    mute_qps: BTreeMap<u32, (Qpn, rdma::Cqn)>,
    /// A planned target restart at this time (taken in `idle`): the running target (its
    /// connections closed by the outage) is dropped and a new one with new, empty RAM
    /// namespaces serves the same subsystems.
    restart: Option<u64>,
    /// As `restart`, without an outage first: the old target's connections are left as they
    /// are (its QPs still on the adapter, nobody serving them), as a killed process.
    silent_restart: Option<u64>,
    restarts: u64,
    /// A planned unlinking of target `t`'s subsystem from its port, from..to, as Linux nvmet
    /// does when the port's link in configfs is removed: its connections are disconnected
    /// (nvmet deletes the controller), and meanwhile the CM still accepts connections to `t`
    /// but Fabrics Connect is answered "invalid subsystem" (Connect Invalid Parameters, DNR)
    /// by `refuser`, a target on the same adapter that does not serve that NQN.
    unlink: Option<(u64, u64, TargetAddr)>,
    unlinked: bool,
    refuser: Option<nvmeof::nvmet::rdma::RdmaTarget<V, blockdev::RamNamespace<testbed::SimHal>>>,
    /// CM handle -> the refuser's QP.
    refused: BTreeMap<u32, Qpn>,
}

impl Net {
    /// Target `t` goes away: its connections close under the host (as a DREQ would flush
    /// them) and later connects to it are never answered.
    fn take_down(&mut self, verbs: &mut V, t: TargetAddr) {
        self.down = Some(t);
        self.disconnect_all(verbs, t);
    }

    /// Every connection to `t` closes under the host, as a DREQ would flush them.
    fn disconnect_all(&mut self, verbs: &mut V, t: TargetAddr) {
        let hs: Vec<u32> = self.conns.iter().filter(|c| c.1 .1 == t).map(|c| *c.0).collect();
        for h in hs {
            let (qp, _) = self.conns.remove(&h).expect("listed");
            let _ = verbs.qp_to_error(qp);
            self.w.cm_disconnect(verbs, h);
        }
    }
}

impl HostEnv<V> for Net {
    fn now_ns(&mut self) -> u64 {
        self.w.now_ns()
    }
    fn idle(&mut self, verbs: &mut V) {
        if self.silent_restart.is_some_and(|at| self.w.clock.now_ns() >= at) {
            self.silent_restart = None;
            self.restarts += 1;
            self.w.target = target_on(2, 1, two_subsystems(&self.w.t));
        }
        if self.restart.is_some_and(|at| self.w.clock.now_ns() >= at) {
            self.restart = None;
            self.restarts += 1;
            self.w.target.release_namespaces(&mut self.w.t.v);
            self.w.target = target_on(2, 1, two_subsystems(&self.w.t));
        }
        if let Some((from, to, t)) = self.unlink {
            let now = self.w.now_ns();
            if now >= to {
                self.unlink = None;
                self.unlinked = false;
            } else if now >= from && !self.unlinked {
                self.unlinked = true;
                self.disconnect_all(verbs, t);
            }
        }
        if let Some(r) = self.refuser.as_mut() {
            r.poll(&mut self.w.t.v, self.w.clock.now_ns());
            while r.take_answer().is_some() {}
        }
        if let Some((from, to, t)) = self.outage {
            let now = self.w.now_ns();
            if now >= to {
                self.down = None;
                self.outage = None;
            } else if now >= from && self.down.is_none() {
                self.take_down(verbs, t);
            }
        }
        self.w.idle(verbs)
    }
    fn cm_connect(&mut self, verbs: &mut V, qp: Qpn, private: &[u8; 32]) -> Result<u32, ()> {
        if self.down == Some(self.to) {
            self.next_dead += 1;
            let h = 0x8000_0000 | self.next_dead;
            self.unanswered.push(h);
            return Ok(h);
        }
        if self.unlinked && self.unlink.is_some_and(|u| u.2 == self.to) {
            let r = self.refuser.as_mut().expect("an unlink has a refuser");
            self.w.psn += 0x1000;
            let (hp, tp) = (self.w.psn, self.w.psn + 0x800);
            // Its poll group takes the queue in on the refuser's next poll, before its CQ is
            // polled: the host's Connect finds the queue.
            let tqp = r.accept(&mut self.w.t.v, private, &rc_attrs(qp, H_IP, H_MAC, hp, tp)).map_err(|_| ())?.qpn;
            verbs.connect_rc_qp(qp, &rc_attrs(tqp, T_IP, T_MAC, tp, hp)).map_err(|_| ())?;
            self.next_dead += 1;
            let h = 0x2000_0000 | self.next_dead;
            self.refused.insert(h, tqp);
            return Ok(h);
        }
        // NVMe-RDMA REQ private data: RECFMT, then the QID (little-endian).
        let io_queue = u16::from_le_bytes([private[2], private[3]]) != 0;
        if self.mute == Some(self.to) || (io_queue && self.mute_io == Some(self.to)) {
            let v = &mut self.w.t.v;
            let cq = v.create_cq(16).map_err(|_| ())?;
            let tqp = v.create_rc_qp(cq, cq, 16, 16).map_err(|_| ())?;
            self.w.psn += 0x1000;
            let (hp, tp) = (self.w.psn, self.w.psn + 0x800);
            v.connect_rc_qp(tqp, &rc_attrs(qp, H_IP, H_MAC, hp, tp)).map_err(|_| ())?;
            verbs.connect_rc_qp(qp, &rc_attrs(tqp, T_IP, T_MAC, tp, hp)).map_err(|_| ())?;
            self.next_dead += 1;
            let h = 0x4000_0000 | self.next_dead;
            self.mute_qps.insert(h, (tqp, cq));
            return Ok(h);
        }
        let h = self.w.cm_connect(verbs, qp, private)?;
        self.conns.insert(h, (qp, self.to));
        Ok(h)
    }
    fn cm_poll(&mut self, verbs: &mut V, handle: u32) -> ConnectPoll {
        if self.unanswered.contains(&handle) {
            return ConnectPoll::Pending;
        }
        if self.mute_qps.contains_key(&handle) || self.refused.contains_key(&handle) {
            return ConnectPoll::Connected { crqsize: 32 };
        }
        self.w.cm_poll(verbs, handle)
    }
    fn cm_disconnect(&mut self, verbs: &mut V, handle: u32) {
        if let Some(tqp) = self.refused.remove(&handle) {
            self.refuser.as_mut().expect("refused by it").disconnected(&mut self.w.t.v, tqp);
            return;
        }
        if let Some((tqp, cq)) = self.mute_qps.remove(&handle) {
            let _ = self.w.t.v.destroy_qp(tqp);
            let _ = self.w.t.v.destroy_cq(cq);
            return;
        }
        self.unanswered.retain(|h| *h != handle);
        self.conns.remove(&handle);
        self.w.cm_disconnect(verbs, handle)
    }
    fn select_target(&mut self, addr: TargetAddr) {
        self.to = addr;
    }
}

fn setup() -> (Net, Node, Controllers<V>) {
    setup_with(2_000_000)
}

/// [`setup`] with each connect step and bring-up command given `timeout_ns`.
fn setup_with(timeout_ns: u64) -> (Net, Node, Controllers<V>) {
    setup_cfg(nvmeof::host::HostConfig { timeout_ns, ..host_cfg(8) })
}

fn setup_cfg(cfg: nvmeof::host::HostConfig) -> (Net, Node, Controllers<V>) {
    let (w, h) = setup_two_subsystems();
    let net = Net { w, to: A, down: None, conns: BTreeMap::new(), unanswered: Vec::new(), next_dead: 0, outage: None, mute: None, mute_io: None, mute_qps: BTreeMap::new(), restart: None, silent_restart: None, restarts: 0, unlink: None, unlinked: false, refuser: None, refused: BTreeMap::new() };
    let mut set = Controllers::new(&cfg, &[(A, SUBNQN), (B, SUBNQN_B)]);
    set.reconnect_delay_ns = 1_000_000;
    (net, h, set)
}

/// Run the set and the world until `done`; the events seen meanwhile.
/// Controller 0's bench of nsid 1 on the reconnecting set: its result, its text report and the
/// controller events it saw.
fn bench_reconnecting(net: &mut Net, h: &mut Node, set: &mut Controllers<V>, cfg: &BenchConfig) -> (nvmeof::bench::BenchResult, String, Vec<String>) {
    let mut ev = Vec::new();
    let mut progress = |_: &nvmeof::bench::BenchProgress| {};
    let r = nvmeof::bench::run::reconnecting(set, 0, &mut h.v, net, 1, cfg, &mut progress, &mut |e| ev.push(format!("{e:?}"))).expect("bench ran");
    let mut text = String::new();
    r.write(&mut text, cfg).unwrap();
    println!("{text}events {ev:?}");
    (r, text, ev)
}

fn drive(net: &mut Net, h: &mut Node, set: &mut Controllers<V>, mut done: impl FnMut(&Controllers<V>) -> bool) -> Vec<(usize, String)> {
    let mut ev = Vec::new();
    for _ in 0..200_000 {
        if done(set) {
            return ev;
        }
        h.v.poll();
        set.poll(&mut h.v, net, |i, e| ev.push((i, format!("{e:?}"))));
        net.w.turn();
    }
    panic!("not done; events {ev:?}");
}

/// Write (round 0) or read back and check (round 1) `lbas` of 4 KiB on controller `c` at QD1;
/// `tag` makes each controller's data its own.
fn verified(net: &mut Net, h: &mut Node, host: &mut Host<V>, lbas: &[u64], tag: u8, write: bool) {
    let mut done = [IoDone { queue: 0, slot: 0, status: Status::SUCCESS, dw0: 0, latency_ns: 0 }; 4];
    for &lba in lbas {
        let slot = host.alloc_slot(1).expect("slot");
        let data: Vec<u8> = (0..4096).map(|i| pattern(lba, i) ^ tag).collect();
        if write {
            let (buf, off, _) = host.slot_buf(1, slot);
            buf.write(off, &data);
        }
        let kind = if write { IoKind::Write } else { IoKind::Read };
        host.submit(&mut h.v, 1, slot, kind, 1, lba, 8, net.w.clock.now_ns()).expect("submit");
        let mut got = 0;
        for _ in 0..100_000 {
            h.v.poll();
            got = host.poll(&mut h.v, net.w.clock.now_ns(), &mut done).expect("poll");
            if got > 0 {
                break;
            }
            net.w.turn();
        }
        assert_eq!(got, 1, "I/O completed");
        assert!(done[0].status.is_success(), "{:?}", done[0].status);
        if !write {
            let (buf, off, _) = host.slot_buf(1, slot);
            let mut back = vec![0u8; 4096];
            buf.read(off, &mut back);
            assert!(back == data, "controller tag {tag:#x} LBA {lba}: data differs");
        }
    }
}

/// Keep 4 reads outstanding on B's queue 1 and reap what completed (each must succeed);
/// returns how many completed this turn.
fn keep_b_busy(h: &mut Node, host: &mut Host<V>, inflight: &mut usize, now: u64, done: &mut [IoDone]) -> usize {
    while *inflight < 4 {
        let Some(slot) = host.alloc_slot(1) else { break };
        host.submit(&mut h.v, 1, slot, IoKind::Read, 1, slot as u64 * 8, 8, now).expect("submit to B");
        *inflight += 1;
    }
    let n = host.poll(&mut h.v, now, done).expect("B's poll");
    *inflight -= n;
    assert!(done[..n].iter().all(|d| d.status.is_success()));
    n
}

/// Disconnect every controller in order, let the CM settle, and check that the initiator's
/// QPs/CQs are back at `base` and the target holds no queue or CM connection.
fn disconnect_to_baseline(net: &mut Net, h: &mut Node, set: &mut Controllers<V>, base: (usize, usize)) {
    set.disconnect(&mut h.v, net).expect("orderly disconnect");
    for _ in 0..1000 {
        h.v.poll();
        net.w.turn();
    }
    assert_eq!((h.v.live_qps(), h.v.live_cqs()), base, "initiator objects after disconnect");
    assert_eq!(net.w.target.queues(), 0, "target queues after disconnect");
    assert!(net.w.conns.is_empty(), "CM connections after disconnect: {:?}", net.w.conns.len());
}

#[test]
fn a_failed_device_is_released_by_every_controller_before_it_comes_back() {
    let (mut net, mut h, mut set) = setup();
    let (qps0, cqs0) = (h.v.live_qps(), h.v.live_cqs());
    drive(&mut net, &mut h, &mut set, |s| s.all_live());
    let lbas = [0u64, 64, 800];
    for (i, tag) in [(0, 0xA0), (1, 0xB0)] {
        let host = set.ctrls[i].live().expect("live");
        verified(&mut net, &mut h, host, &lbas, tag, true);
    }
    let (qps, cqs) = (h.v.live_qps(), h.v.live_cqs());
    assert_eq!(qps - qps0, 4, "admin + one I/O queue per controller");

    // The initiator's adapter reports itself broken.
    assert!(net.w.host_cx.raise_internal_error());
    let ev = drive(&mut net, &mut h, &mut set, |s| s.device_recoveries == 1 && s.all_live());
    let at = |what: &str, i: usize| ev.iter().position(|e| e.0 == i && e.1.starts_with(what));
    let up = ev.iter().position(|e| e.1 == "DeviceRecovered").expect("recovered");
    for i in 0..2 {
        // Released while the device was down, live again after it came back.
        assert!(at("Released", i).expect("released") < up, "controller {i}: {ev:?}");
        assert!(at("Live", i).expect("live") > up, "controller {i}: {ev:?}");
    }
    assert_eq!(set.device_recoveries, 1);
    // Exactly the queues of two controllers: nothing destroyed twice (a release after the
    // bring-up would have taken another controller's new QP), nothing left over.
    assert_eq!((h.v.live_qps(), h.v.live_cqs()), (qps, cqs), "events {ev:?}");
    for (i, tag) in [(0, 0xA0), (1, 0xB0)] {
        let host = set.ctrls[i].live().expect("live");
        // What was acknowledged before the failure reads back; new writes work.
        verified(&mut net, &mut h, host, &lbas, tag, false);
        verified(&mut net, &mut h, host, &[4000], tag, true);
        verified(&mut net, &mut h, host, &[4000], tag, false);
        assert_eq!(set.ctrls[i].connects, 2);
        assert_eq!(set.ctrls[i].host().stats.reconnects, 1);
    }
    disconnect_to_baseline(&mut net, &mut h, &mut set, (qps0, cqs0));
}

#[test]
fn io_to_a_live_target_flows_while_a_dead_one_is_retried() {
    let (mut net, mut h, mut set) = setup();
    drive(&mut net, &mut h, &mut set, |s| s.all_live());
    net.take_down(&mut h.v, A);
    // B keeps 4 reads in flight while A is found dead and retried.
    let mut done = [IoDone { queue: 0, slot: 0, status: Status::SUCCESS, dw0: 0, latency_ns: 0 }; 8];
    let (mut b_done, mut a_attempts, mut a_live) = (0u64, 0u64, false);
    let mut b_done_while_retrying = 0u64;
    let (mut turns, mut inflight) = (0u64, 0usize);
    while a_attempts < 3 {
        turns += 1;
        assert!(turns < 2_000_000, "A was not retried 3 times");
        h.v.poll();
        set.poll(&mut h.v, &mut net, |i, e| match e {
            CtrlEvent::AttemptFailed(_) if i == 0 => a_attempts += 1,
            CtrlEvent::Live if i == 0 => a_live = true,
            _ => {}
        });
        let now = net.w.clock.now_ns();
        if let Some(host) = set.ctrls[0].live() {
            // A's queues are flushed: its host notices on its next poll and tick, as a
            // workload loop makes them (an idle I/O queue takes its receives from its group's
            // SRQ, which a QP in error does not flush: the admin queue's are).
            if host.poll(&mut h.v, now, &mut done).is_err() || host.tick(&mut h.v, now).is_err() {
                set.ctrls[0].fail();
            }
        }
        let retrying = matches!(set.ctrls[0].state(), CtrlState::Connecting { .. } | CtrlState::Backoff { .. });
        let n = keep_b_busy(&mut h, set.ctrls[1].live().expect("B stays live"), &mut inflight, now, &mut done);
        b_done += n as u64;
        if retrying {
            b_done_while_retrying += n as u64;
        }
        net.w.turn();
    }
    assert!(!a_live, "A connected while down");
    assert!(b_done_while_retrying >= 100, "B completed {b_done_while_retrying} I/Os while A was retried ({b_done} in all)");
    println!("B: {b_done_while_retrying} I/Os completed while A was retried ({a_attempts} attempts), {b_done} in all");
    // Drain B, then A comes back and reconnects; verified I/O on it.
    let host = set.ctrls[1].live().expect("live");
    while inflight > 0 {
        h.v.poll();
        inflight -= host.poll(&mut h.v, net.w.clock.now_ns(), &mut done).expect("B's poll");
        net.w.turn();
    }
    net.down = None;
    drive(&mut net, &mut h, &mut set, |s| s.all_live());
    assert_eq!(set.ctrls[0].connects, 2);
    assert!(set.ctrls[0].failed_attempts >= 3);
    assert_eq!(set.ctrls[0].host().stats.reconnects, set.ctrls[0].failed_attempts + 1, "attempts counted");
    let host = set.ctrls[0].live().expect("A live again");
    verified(&mut net, &mut h, host, &[8, 16], 0xA0, true);
    verified(&mut net, &mut h, host, &[8, 16], 0xA0, false);
    set.disconnect(&mut h.v, &mut net).expect("orderly disconnect");
}

#[test]
fn a_verified_workload_resumes_after_its_target_went_away_and_came_back() {
    let (mut net, mut h, mut set) = setup();
    let (qps0, cqs0) = (h.v.live_qps(), h.v.live_cqs());
    let t0 = net.w.clock.now_ns();
    // A goes away a little into the run (its connections close under the host, reconnects are
    // not answered) and comes back ~10 ms later; B is never touched.
    net.outage = Some((t0 + 300_000, t0 + 10_000_000, A));
    let w = Workload { count: 3000, qd: 8, max_blocks: 8, seed: 0x15, stall_ns: 1_000_000_000 };
    let mut ev = Vec::new();
    let r = reconnecting::run(&mut set, &mut h.v, &mut net, &w, |i, e| ev.push((i, format!("{e:?}")))).expect("workload finished");
    let took = net.w.clock.now_ns() - t0;
    println!("A: {:?}\nB: {:?}\nvirtual time {} ms; events {ev:?}", r[0], r[1], took / 1_000_000);
    assert!(net.outage.is_none() && took > 10_000_000, "the run outlasted the outage ({took} ns)");
    let (a, b) = (r[0], r[1]);
    assert_eq!((a.verify.mismatches, b.verify.mismatches), (0, 0));
    assert_eq!((a.verify.errors, b.verify.errors), (0, 0));
    assert!(a.releases >= 1 && b.releases == 0, "only A was lost: {a:?} {b:?}");
    assert!(a.lost_writes + a.lost_reads > 0, "A lost I/O in flight: {a:?}");
    assert!(a.answered_after_reconnect >= 500, "A's workload resumed after the reconnect: {a:?}");
    assert!(a.verify.blocks_verified > 0 && b.verify.blocks_verified > 0);
    assert_eq!(set.ctrls[0].connects, 2, "A reconnected once");
    assert!(set.ctrls[0].failed_attempts >= 1, "A was retried while down");
    assert_eq!(set.ctrls[1].connects, 1);
    assert!(ev.iter().any(|e| e.0 == 0 && e.1 == "Released"));
    // Nothing left behind once both disconnect.
    disconnect_to_baseline(&mut net, &mut h, &mut set, (qps0, cqs0));
}

/// What Linux nvmet (6.1) does when a subsystem's port link is removed in configfs and later
/// added back (`60-nvmeof-linux` part 2 does it to this initiator): every queue of the
/// controller is disconnected, and each Connect to that NQN meanwhile is accepted by the CM
/// and answered Connect Invalid Parameters (SCT 1, SC 82h) with DNR, IATTR pointing at
/// SUBNQN. The host retries the refused Connect (as Linux 6.1's host does until
/// ctrl_loss_tmo) and reconnects once the link is back; A's verified workload resumes with
/// nothing lost that was acknowledged, B never notices, nothing leaks.
#[test]
fn a_verified_workload_resumes_after_its_subsystem_was_unlinked_from_the_port_and_back() {
    let (mut net, mut h, mut set) = setup();
    let (qps0, cqs0) = (h.v.live_qps(), h.v.live_cqs());
    // The refuser: the same port's target without A's subsystem (a placeholder one only).
    let placeholder = nvmeof::nvmet::SubsystemConfig {
        nqn: "nqn.2026-01.io.appliance:placeholder".into(),
        serial: "EMU0009".into(),
        model: "placeholder".into(),
        hosts: vec![],
        allow_any_host: true,
        namespaces: vec![nvmeof::nvmet::NamespaceConfig { nsid: 1, dev: blockdev::RamNamespace::new(net.w.t.hal.clone(), 64 << 10, 512).expect("memory"), nguid: [0x59; 16] }],
    };
    net.refuser = Some(target_on(2, 1, vec![placeholder]));
    let t0 = net.w.clock.now_ns();
    let (from, to) = (t0 + 300_000, t0 + 10_000_000);
    net.unlink = Some((from, to, A));
    let w = Workload { count: 3000, qd: 8, max_blocks: 8, seed: 0x16, stall_ns: 1_000_000_000 };
    let mut ev = Vec::new();
    let mut a_live_at = Vec::new();
    let clock = net.w.clock.clone();
    let r = reconnecting::run(&mut set, &mut h.v, &mut net, &w, |i, e| {
        if i == 0 && matches!(e, CtrlEvent::Live) {
            a_live_at.push(clock.now_ns());
        }
        ev.push((i, format!("{e:?}")));
    })
    .expect("workload finished");
    println!("A: {:?}\nB: {:?}\nevents {ev:?}", r[0], r[1]);
    let (a, b) = (r[0], r[1]);
    assert_eq!((a.verify.mismatches, b.verify.mismatches), (0, 0));
    assert_eq!((a.verify.errors, b.verify.errors), (0, 0));
    assert!(a.releases == 1 && b.releases == 0, "only A was lost, once: {a:?} {b:?}");
    assert!(a.answered_after_reconnect >= 500, "A's workload resumed: {a:?}");
    // Every attempt while unlinked reached the refuser and was refused with its status.
    let refused = ev.iter().filter(|e| e.0 == 0 && e.1 == "AttemptFailed(Nvme(Status { sct: 1, sc: 130, dnr: true }))").count() as u64;
    assert!(refused >= 2, "A's Connects refused as invalid subsystem: {ev:?}");
    assert_eq!(refused, set.ctrls[0].failed_attempts, "no other failure: {ev:?}");
    assert_eq!(set.ctrls[0].connects, 2, "A reconnected once");
    // The first connect, then the reconnect only once linked again.
    assert!(a_live_at.len() == 2 && a_live_at[0] < from && a_live_at[1] >= to, "A live at {a_live_at:?} (unlinked {from}..{to})");
    assert_eq!(set.ctrls[1].connects, 1);
    assert_eq!(net.refuser.as_ref().expect("there").queues(), 0, "the refused connections were released");
    assert!(net.refused.is_empty());
    disconnect_to_baseline(&mut net, &mut h, &mut set, (qps0, cqs0));
}

#[test]
fn io_to_a_live_target_flows_while_another_is_slow_to_answer_connect() {
    // Each bring-up command may take 20 ms (the default is 5 s).
    let (mut net, mut h, mut set) = setup_with(20_000_000);
    drive(&mut net, &mut h, &mut set, |s| s.all_live());
    let t_qps0 = net.w.t.v.live_qps();
    // A's connections close; its reconnect's CM is answered, but its Fabrics Connect never is.
    net.take_down(&mut h.v, A);
    net.down = None;
    net.mute = Some(A);
    let mut done = [IoDone { queue: 0, slot: 0, status: Status::SUCCESS, dw0: 0, latency_ns: 0 }; 8];
    let (mut inflight, mut b_while_enabling, mut enabling_turns) = (0usize, 0u64, 0u64);
    let mut a_failed_while_enabling = 0;
    for turn in 0.. {
        assert!(turn < 2_000_000, "A's bring-up never timed out");
        h.v.poll();
        let was_enabling = matches!(set.ctrls[0].state(), CtrlState::Enabling { .. });
        set.poll(&mut h.v, &mut net, |i, e| {
            if i == 0 && was_enabling && matches!(e, CtrlEvent::AttemptFailed(nvmeof::Error::Timeout)) {
                a_failed_while_enabling += 1;
            }
        });
        if a_failed_while_enabling > 0 {
            break;
        }
        let now = net.w.clock.now_ns();
        if let Some(host) = set.ctrls[0].live() {
            // Noticed on the admin queue (see `io_to_a_live_target_flows_while_a_dead_one_is_retried`).
            if host.poll(&mut h.v, now, &mut done).is_err() || host.tick(&mut h.v, now).is_err() {
                set.ctrls[0].fail();
            }
        }
        let enabling = matches!(set.ctrls[0].state(), CtrlState::Enabling { .. });
        enabling_turns += u64::from(enabling);
        let n = keep_b_busy(&mut h, set.ctrls[1].live().expect("B stays live"), &mut inflight, now, &mut done);
        if enabling {
            b_while_enabling += n as u64;
        }
        net.w.turn();
    }
    println!("B: {b_while_enabling} I/Os completed in {enabling_turns} turns while A waited for its Fabrics Connect answer");
    assert!(enabling_turns > 1000, "A's bring-up was polled, not waited in: {enabling_turns} turns");
    assert!(b_while_enabling >= 1000, "B completed {b_while_enabling} I/Os while A's bring-up waited");
    // Drain B; A's target answers again and A reconnects; the mute QPs are gone.
    let host = set.ctrls[1].live().expect("live");
    while inflight > 0 {
        h.v.poll();
        inflight -= host.poll(&mut h.v, net.w.clock.now_ns(), &mut done).expect("B's poll");
        net.w.turn();
    }
    net.mute = None;
    drive(&mut net, &mut h, &mut set, |s| s.all_live());
    assert!(net.mute_qps.is_empty(), "the silent connection was released");
    let host = set.ctrls[0].live().expect("A live again");
    verified(&mut net, &mut h, host, &[8, 16], 0xA0, true);
    verified(&mut net, &mut h, host, &[8, 16], 0xA0, false);
    assert_eq!(net.w.t.v.live_qps(), t_qps0, "target QPs: A's new admin + I/O queue replace the old ones");
    set.disconnect(&mut h.v, &mut net).expect("orderly disconnect");
}

#[test]
fn a_bring_up_waiting_for_an_io_queue_keeps_its_controller_alive() {
    // KATO 1 s (the target's least); each bring-up step may take 3 s. A's reconnect gets its
    // admin queue, but its I/O queue's Fabrics Connect is never answered: for the 3 s the
    // bring-up waits, its Keep Alives (from Identify Controller on, as Linux's host since
    // 6.6) keep the new controller alive on the target, which would otherwise expire it
    // after 1 s.
    let (mut net, mut h, mut set) = setup_cfg(nvmeof::host::HostConfig { timeout_ns: 3_000_000_000, kato_ms: 1000, ..host_cfg(8) });
    drive(&mut net, &mut h, &mut set, |s| s.all_live());
    net.take_down(&mut h.v, A);
    net.down = None;
    net.mute_io = Some(A);
    let expired0 = net.w.target.core_stats().ka_expired;
    let (mut ka_enabling, mut waited_ns, mut last) = (0u64, 0u64, net.w.clock.now_ns());
    let mut failed = None;
    for turn in 0.. {
        assert!(turn < 2_000_000, "A's bring-up never ended");
        h.v.poll();
        let now = net.w.clock.now_ns();
        let was_enabling = matches!(set.ctrls[0].state(), CtrlState::Enabling { .. });
        let ka0 = set.ctrls[0].host().stats.keep_alives;
        set.poll(&mut h.v, &mut net, |i, e| {
            if i == 0 && was_enabling && matches!(e, CtrlEvent::AttemptFailed(_)) {
                failed = Some(format!("{e:?}"));
            }
        });
        if failed.is_some() {
            break;
        }
        if was_enabling {
            ka_enabling += set.ctrls[0].host().stats.keep_alives - ka0;
            waited_ns += now - last;
        }
        last = now;
        // A finds its closed queues by its keep-alive tick; B is live and idle: its own.
        if let Some(host) = set.ctrls[0].live() {
            if host.tick(&mut h.v, now).is_err() {
                set.ctrls[0].fail();
            }
        }
        if let Some(host) = set.ctrls[1].live() {
            host.tick(&mut h.v, now).expect("B's keep-alive");
        }
        net.w.clock.advance(50_000);
        net.w.turn();
    }
    let failed = failed.expect("ended");
    println!("A waited {} ms in Enabling, sent {ka_enabling} Keep Alives, then: {failed}", waited_ns / 1_000_000);
    assert!(failed.contains("Timeout"), "the I/O queue's Connect timed out, nothing else: {failed}");
    assert!(waited_ns >= 2_900_000_000, "A's bring-up waited ~3 s: {waited_ns} ns");
    assert_eq!(net.w.target.core_stats().ka_expired, expired0, "no controller's keep-alive expired on the target");
    assert!(ka_enabling >= 5, "Keep Alive every KATO/2 while waiting: {ka_enabling}");
    // A's I/O queues are answered again: A reconnects and its verified I/O works.
    net.mute_io = None;
    drive(&mut net, &mut h, &mut set, |s| s.all_live());
    assert!(net.mute_qps.is_empty(), "the silent connection was released");
    let host = set.ctrls[0].live().expect("A live again");
    verified(&mut net, &mut h, host, &[8, 16], 0xA1, true);
    verified(&mut net, &mut h, host, &[8, 16], 0xA1, false);
    set.disconnect(&mut h.v, &mut net).expect("orderly disconnect");
}

#[test]
fn a_bench_survives_a_target_restart_and_counts_what_it_lost() {
    // One controller: the restart takes the whole target (both subsystems) away.
    let (mut net, mut h, _) = setup();
    let mut set = Controllers::new(&nvmeof::host::HostConfig { timeout_ns: 2_000_000, ..host_cfg(8) }, &[(A, SUBNQN)]);
    set.reconnect_delay_ns = 1_000_000;
    let (qps0, cqs0) = (h.v.live_qps(), h.v.live_cqs());
    drive(&mut net, &mut h, &mut set, |s| s.all_live());
    let t0 = net.w.clock.now_ns();
    // A goes away 2 ms into the bench (its connections close under the host, connects are not
    // answered), its target is restarted at 3 ms (new RAM namespaces), and it listens again
    // at 12 ms.
    net.outage = Some((t0 + 2_000_000, t0 + 12_000_000, A));
    net.restart = Some(t0 + 3_000_000);
    let cfg = BenchConfig { pattern: Pattern::RandMix { read_pct: 50 }, block_size: 4096, queue_depth: 8, duration_ns: 30_000_000, max_ios: 0, seed: 7, threads: false };
    let (r, text, ev) = bench_reconnecting(&mut net, &mut h, &mut set, &cfg);
    assert_eq!(net.restarts, 1, "the target was restarted");
    assert!(net.outage.is_none(), "the run outlasted the outage");
    assert!(r.elapsed_ns >= cfg.duration_ns, "ran its duration: {r:?}");
    // Every submitted I/O was answered or lost, never both; only answered successes are
    // latency samples; nothing failed with a status.
    assert_eq!(r.reads + r.writes, r.ios + r.lost, "{r:?}");
    assert_eq!((r.read.lost + r.write.lost, r.read.ios + r.write.ios), (r.lost, r.ios));
    assert_eq!(r.errors, 0);
    assert_eq!(r.lat().count(), r.ios, "a lost I/O is no latency sample");
    assert!(r.lost >= 1 && r.lost <= 8, "the I/Os in flight at the loss (QD 8): {}", r.lost);
    assert_eq!((r.outages, r.down_at_end), (1, false), "{r:?}");
    // Down from the loss (2 ms) until live again (after 12 ms); the rest of the run ran.
    assert!((10_000_000..r.elapsed_ns).contains(&r.outage_ns), "outage {} ns", r.outage_ns);
    assert_eq!(r.longest_outage_ns, r.outage_ns);
    assert!(text.contains(&format!("outages=1 down={} us", r.outage_ns / 1000)), "{text}");
    assert_eq!(set.ctrls[0].connects, 2, "reconnected once");
    assert!(set.ctrls[0].failed_attempts >= 1, "retried while down: {ev:?}");
    assert!(ev.first().is_some_and(|e| e == "Released") && ev.last().is_some_and(|e| e == "Live"), "{ev:?}");
    // The bench went on after the reconnect: the new target served reads and writes.
    let c = net.w.target.core_stats();
    assert!(c.reads > 0 && c.writes > 0, "the restarted target served the bench: {c:?}");
    assert_eq!((c.errors, net.w.target.stats().bad_capsules), (0, 0), "{c:?}");
    assert_eq!(set.ctrls[0].host().stats.errors, 0, "{:?}", set.ctrls[0].host().stats);
    // Nothing of the lost connection or the new one left behind.
    disconnect_to_baseline(&mut net, &mut h, &mut set, (qps0, cqs0));
}

/// As a killed target process: the target is replaced without closing anything (the old
/// target's QPs stay on the adapter, unserved), the host finds out only by its keep-alive,
/// reconnects to the new target, and the bench goes on with no error anywhere.
#[test]
fn a_bench_survives_a_killed_target_found_by_its_keep_alive() {
    let (mut net, mut h, _) = setup();
    let mut set = Controllers::new(&nvmeof::host::HostConfig { timeout_ns: 2_000_000, kato_ms: 1000, ..host_cfg(8) }, &[(A, SUBNQN)]);
    set.reconnect_delay_ns = 1_000_000;
    drive(&mut net, &mut h, &mut set, |s| s.all_live());
    let t0 = net.w.clock.now_ns();
    net.silent_restart = Some(t0 + 2_000_000);
    let cfg = BenchConfig { pattern: Pattern::RandMix { read_pct: 50 }, block_size: 4096, queue_depth: 8, duration_ns: 10_000_000_000, max_ios: 60_000, seed: 7, threads: false };
    let (r, _, _) = bench_reconnecting(&mut net, &mut h, &mut set, &cfg);
    let c = net.w.target.core_stats();
    println!("new target {c:?} {:?}; host {:?}", net.w.target.stats(), set.ctrls[0].host().stats);
    assert_eq!(net.restarts, 1);
    assert_eq!((r.outages, r.down_at_end, r.errors), (1, false, 0), "{r:?}");
    assert_eq!(r.reads + r.writes, r.ios + r.lost);
    // A Keep Alive goes out every KATO/2 and fails the controller when unanswered for a KATO.
    assert!((500_000_000..=1_100_000_000).contains(&r.outage_ns), "found by the keep-alive (KATO 1 s): {} ns", r.outage_ns);
    assert!(r.lost >= 1 && r.lost <= 8, "{r:?}");
    assert!(c.reads > 0 && c.writes > 0, "the new target served the bench: {c:?}");
    assert_eq!((c.errors, net.w.target.stats().bad_capsules), (0, 0), "{c:?}");
    assert_eq!(set.ctrls[0].host().stats.errors, 0, "{:?}", set.ctrls[0].host().stats);
}

/// Regression (found by `13-image-mlx5-emu` (e): the new target counted a bad capsule, Command
/// Sequence Error): a reconnect whose last Keep Alive is more than KATO/2 old must not send a
/// Keep Alive on the new admin queue before its Fabrics Connect (the previous connection's
/// controller info made the bring-up tick from its first step).
#[test]
fn a_reconnect_sends_no_keep_alive_before_its_fabrics_connect() {
    let (mut net, mut h, _) = setup();
    let mut set = Controllers::new(&nvmeof::host::HostConfig { timeout_ns: 2_000_000, kato_ms: 1000, ..host_cfg(8) }, &[(A, SUBNQN)]);
    set.reconnect_delay_ns = 1_000_000;
    drive(&mut net, &mut h, &mut set, |s| s.all_live());
    // 0.6 s without a tick: the last Keep Alive (the connect's) is past KATO/2, as when a dead
    // target is found by its keep-alive.
    net.w.clock.advance(600_000_000);
    let (errors0, ka0) = (net.w.target.core_stats().errors, set.ctrls[0].host().stats.keep_alives);
    net.take_down(&mut h.v, A);
    net.down = None;
    set.ctrls[0].fail();
    drive(&mut net, &mut h, &mut set, |s| s.ctrls[0].connects == 2 && s.all_live());
    let host = set.ctrls[0].host().stats;
    assert_eq!(set.ctrls[0].connects, 2);
    assert_eq!((net.w.target.core_stats().errors - errors0, net.w.target.stats().bad_capsules), (0, 0), "{:?}", net.w.target.core_stats());
    assert_eq!(host.errors, 0, "{host:?}");
    println!("keep alives during the reconnect: {}", host.keep_alives - ka0);
    set.disconnect(&mut h.v, &mut net).expect("orderly disconnect");
}

/// A target that stays away is given up after the loss timeout (nvme-cli's `--ctrl-loss-tmo`):
/// attempts every reconnect delay until then, one `GaveUp`, no attempt after it, nothing of it
/// held; the other controller keeps serving, and a bench on the lost one ends instead of
/// waiting out its duration.
#[test]
fn a_controller_without_a_connection_for_the_loss_timeout_is_given_up() {
    let tmo = 20_000_000;
    let (mut net, mut h, mut set) = setup_cfg(nvmeof::host::HostConfig { timeout_ns: 2_000_000, ctrl_loss_tmo_ns: Some(tmo), ..host_cfg(8) });
    assert_eq!((set.reconnect_delay_ns, set.ctrl_loss_tmo_ns), (1_000_000, Some(tmo)));
    let (qps0, cqs0) = (h.v.live_qps(), h.v.live_cqs());
    drive(&mut net, &mut h, &mut set, |s| s.all_live());
    let (qps_live, cqs_live) = (h.v.live_qps(), h.v.live_cqs());
    net.take_down(&mut h.v, A);
    let down_at = net.w.clock.now_ns();
    // The caller saw A's flushed queues.
    set.ctrls[0].fail();
    let ev = drive(&mut net, &mut h, &mut set, |s| s.ctrls[0].state() == CtrlState::Lost);
    let lost_at = net.w.clock.now_ns();
    let of_a: Vec<&String> = ev.iter().filter(|e| e.0 == 0).map(|e| &e.1).collect();
    let attempts = of_a.iter().filter(|e| e.starts_with("AttemptFailed")).count();
    assert_eq!(of_a.iter().filter(|e| *e == &"GaveUp").count(), 1, "{of_a:?}");
    assert_eq!(of_a.last().map(|s| s.as_str()), Some("GaveUp"));
    assert!(lost_at - down_at >= tmo && lost_at - down_at < tmo + 5_000_000, "given up {} ns after the loss", lost_at - down_at);
    // Each attempt waits out its 2 ms CM timeout, then the 1 ms delay: about 7 in 20 ms.
    assert!((5..=10).contains(&attempts), "{attempts} attempts: {of_a:?}");
    assert_eq!(set.ctrls[0].failed_attempts as usize, attempts);
    assert!(ev.iter().all(|e| e.0 == 0), "B saw events: {ev:?}");
    println!("GAVE-UP after {} ns without a connection, {attempts} attempts", lost_at - down_at);
    // Nothing more from A; B serves.
    let tried = set.ctrls[0].failed_attempts;
    let mut later = Vec::new();
    for _ in 0..20_000 {
        h.v.poll();
        set.poll(&mut h.v, &mut net, |i, e| later.push((i, format!("{e:?}"))));
        net.w.turn();
    }
    assert!(later.is_empty(), "events after giving up: {later:?}");
    assert_eq!(set.ctrls[0].failed_attempts, tried);
    assert_eq!(set.next_wake(), set.ctrls[1].host().next_timer(), "a lost controller waits on no timer (B's keep-alive only)");
    assert!(!set.all_live());
    assert_eq!((qps_live - h.v.live_qps(), cqs_live - h.v.live_cqs()), (2, 2), "A's admin and I/O queue released");
    verified(&mut net, &mut h, set.ctrls[1].live().expect("B live"), &[8, 16], 0xB0, true);
    verified(&mut net, &mut h, set.ctrls[1].live().expect("B live"), &[8, 16], 0xB0, false);
    // A bench asked of the lost controller ends at once, its whole time an outage.
    let cfg = BenchConfig { pattern: Pattern::RandRead, block_size: 4096, queue_depth: 4, duration_ns: 10_000_000_000, max_ios: 0, seed: 1, threads: false };
    let t0 = net.w.clock.now_ns();
    let (r, _, _) = bench_reconnecting(&mut net, &mut h, &mut set, &cfg);
    assert!(net.w.clock.now_ns() - t0 < 1_000_000, "the bench waited for a controller given up");
    assert_eq!(r.ios, 0);
    assert!(r.down_at_end);
    disconnect_to_baseline(&mut net, &mut h, &mut set, (qps0, cqs0));
}

/// An I/O queue's QP that the adapter moves to error on its own (a catastrophic work-queue
/// error: the WQ_CATAS_ERROR event names it), with nothing outstanding on it: its receives are
/// in an SRQ, so no flushed completion says so, and the CM hears nothing. The event fails its
/// controller at the set's next poll (not at some later I/O or keep-alive), which reconnects and
/// serves verified I/O again; the other controller is not disturbed.
#[test]
fn an_io_queue_qp_the_adapter_moved_to_error_fails_its_controller_at_once() {
    let (mut net, mut h, mut set) = setup();
    drive(&mut net, &mut h, &mut set, |s| s.all_live());
    // A's connections in CM order: its admin queue's QP, then its I/O queue's.
    let a_qps: Vec<Qpn> = net.conns.values().filter(|c| c.1 == A).map(|c| c.0).collect();
    assert_eq!(a_qps.len(), 2, "A's admin and I/O queue");
    assert!(h.cx.inject_qp_error_on(a_qps[1].0), "A's I/O queue QP was in RTS");
    let ev = drive(&mut net, &mut h, &mut set, |s| s.ctrls[0].connects == 2 && s.all_live());
    println!("events {ev:?}");
    assert_eq!(ev.iter().filter(|e| e.1 == "Released").map(|e| e.0).collect::<Vec<_>>(), vec![0], "only A was released: {ev:?}");
    assert_eq!(set.ctrls[1].connects, 1, "B kept its connection");
    let lbas: Vec<u64> = (0..8).map(|i| i * 64).collect();
    let host = set.ctrls[0].live().expect("A live");
    verified(&mut net, &mut h, host, &lbas, 0x5a, true);
    verified(&mut net, &mut h, host, &lbas, 0x5a, false);
}

/// Controller `i`'s lent jobs on std threads (its I/O queues lent: `threads=on`), the owner's
/// turn taken from this thread until they all finished; `at_turn(n)` is called before the
/// owner's n-th turn (1-based).
fn on_threads<J: nvmeof::host::LaneWork + Send>(h_clock: &emu_connectx::SimClock, jobs: Vec<J>, turn: &mut dyn FnMut(), mut at_turn: impl FnMut(u64)) -> Vec<J::Outcome>
where
    J::Outcome: Send,
{
    std::thread::scope(|s| {
        let threads: Vec<_> = jobs.into_iter().map(|job| s.spawn(move || job.run(&|| h_clock.now_ns(), &std::thread::yield_now))).collect();
        let mut n = 0;
        while !threads.iter().all(|t| t.is_finished()) {
            n += 1;
            at_turn(n);
            turn();
        }
        threads.into_iter().map(|t| t.join().expect("a lane's thread panicked")).collect()
    })
}

/// Controller A's I/O queues lent to a threaded bench (`bench::lanes::reconnecting`, 2 queues on
/// 2 std threads) while the adapter moves controller B's I/O queue QP to error (its event names
/// B's QP, not one of A's): the owner's turn polls the set, which hands the event to B, so B is
/// released and reconnected at once while A's lanes run their bench to the end undisturbed (no
/// outage, nothing lost). The event of a QP that is not A's is not dropped.
#[test]
fn a_qp_error_of_another_controller_reaches_it_while_a_controllers_queues_are_lent() {
    let (mut net, mut h, mut set) = setup_cfg(nvmeof::host::HostConfig { timeout_ns: 2_000_000, io_queues: 2, ..host_cfg(8) });
    drive(&mut net, &mut h, &mut set, |s| s.all_live());
    // B's connections in CM order: its admin queue's QP, then its I/O queues'.
    let b_qps: Vec<Qpn> = net.conns.values().filter(|c| c.1 == B).map(|c| c.0).collect();
    assert_eq!(b_qps.len(), 3, "B's admin and 2 I/O queues");
    let bench = BenchConfig { pattern: Pattern::RandMix { read_pct: 50 }, block_size: 4096, queue_depth: 8, duration_ns: u64::MAX, max_ios: 6_000, seed: 5, threads: true };
    let (clock, cx) = (h.clock.clone(), h.cx.clone());
    let mut ev = Vec::new();
    let r = nvmeof::bench::lanes::reconnecting(
        &mut set,
        0,
        &mut h.v,
        &mut net,
        1,
        &bench,
        |jobs, turn| {
            on_threads(&clock, jobs, turn, |n| {
                if n == 2 {
                    assert!(cx.inject_qp_error_on(b_qps[1].0), "B's I/O queue QP was in RTS");
                }
            })
        },
        &mut |j, e| ev.push((j, format!("{e:?}"))),
    )
    .expect("A's bench");
    println!("A's lanes {:?}; events {ev:?}", r.per_lane.iter().map(|l| (l.0, l.1.ios)).collect::<Vec<_>>());
    assert!(r.failed.is_empty(), "{:?}", r.failed);
    assert_eq!((r.merged.ios, r.merged.lost, r.merged.errors, r.merged.outages), (6_000, 0, 0, 0), "A undisturbed");
    assert!(ev.contains(&(1, "Released".to_string())), "B heard its QP's error while A's queues were lent: {ev:?}");
    assert!(!ev.iter().any(|e| e.0 == 0), "nothing happened to A: {ev:?}");
    drive(&mut net, &mut h, &mut set, |s| s.all_live());
    assert_eq!((set.ctrls[0].connects, set.ctrls[1].connects), (1, 2), "B reconnected, A kept its connection");
}

/// Controller A's verified I/O on lent queues (`verify::lanes::reconnecting`, 2 queues on 2
/// std threads, a block range each) and the adapter moves one of A's lent I/O queues' QP to
/// error mid-run: that lane stops at its next poll, the owner stops the other, the set
/// releases and reconnects A (B untouched) and both lanes resume on the new queues with their
/// models (writes in flight at the failure may or may not have landed): every lane finishes
/// its share and the read-back with 0 mismatches and 0 errors.
#[test]
fn verify_lanes_resume_after_a_lent_queue_qp_the_adapter_moved_to_error() {
    let (mut net, mut h, mut set) = setup_cfg(nvmeof::host::HostConfig { timeout_ns: 2_000_000, io_queues: 2, ..host_cfg(8) });
    drive(&mut net, &mut h, &mut set, |s| s.all_live());
    let w = Workload { count: 3_000, qd: 8, max_blocks: 8, seed: 11, stall_ns: 10_000_000_000 };
    let (clock, cx) = (h.clock.clone(), h.cx.clone());
    let mut ev = Vec::new();
    let mut injected = false;
    let (lanes, total) = nvmeof::verify::lanes::reconnecting(
        &mut set,
        0,
        &mut h.v,
        &mut net,
        &w,
        |jobs, turn| {
            let victim = jobs[1].qpn();
            let first = !injected;
            injected = true;
            on_threads(&clock, jobs, turn, |n| {
                if first && n == 40 {
                    assert!(cx.inject_qp_error_on(victim.0), "A's lent I/O queue QP was in RTS");
                }
            })
        },
        &mut |j, e| ev.push((j, format!("{e:?}"))),
    )
    .expect("A's verified I/O");
    println!("lanes {:?} total {total:?} events {ev:?}", lanes.per_lane);
    assert!(lanes.failed.is_empty(), "{:?}", lanes.failed);
    assert_eq!(lanes.per_lane.iter().map(|l| l.0).collect::<Vec<_>>(), vec![1, 2], "both lanes finished");
    let v = total.verify;
    assert_eq!((v.mismatches, v.errors), (0, 0), "{total:?}");
    assert!(v.blocks_verified > 0, "{total:?}");
    assert_eq!(total.releases, 1, "A released once: {ev:?}");
    assert!(total.answered_after_reconnect > 0, "the lanes resumed: {total:?}");
    assert_eq!(ev.iter().filter(|e| e.1 == "Released").map(|e| e.0).collect::<Vec<_>>(), vec![0], "only A was released: {ev:?}");
    assert_eq!((set.ctrls[0].connects, set.ctrls[1].connects), (2, 1));
}
