//! Cost of one DH-HMAC-CHAP transaction (what each authenticated Connect adds, per queue):
//! `auth_cost HASH GROUP N` runs N bidirectional transactions host ↔ controller in-process
//! and prints the wall time per transaction. `scripts/bench-auth` runs it under callgrind,
//! collecting only `ctrl_step` (the target's work) or `host_step` (the initiator's), and
//! prints instructions per Connect.

use nvme_auth::ctrl::{HostPolicy, Session};
use nvme_auth::host::{self, HostKeys, Pending};
use nvme_auth::wire::MAX_MESSAGE;
use nvme_auth::{DhGroup, HashId, Rng, Secret, SeedableRng};

const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555";
const SUBNQN: &str = "nqn.2024-01.io.example:bench";

/// The controller's part of a step: consume `msg` (if any), produce the next message.
#[inline(never)]
fn ctrl_step(s: &mut Session, p: &HostPolicy, msg: &[u8], rng: &mut Rng, out: &mut [u8]) -> usize {
    if !msg.is_empty() {
        s.on_send(p, HOSTNQN, SUBNQN, 7, msg, rng).expect("send");
    }
    s.on_receive(out).unwrap_or(0)
}

/// The host's part: Challenge → Reply.
#[inline(never)]
fn host_step(keys: &HostKeys, msg: &[u8], rng: &mut Rng, out: &mut [u8]) -> (Pending, usize) {
    host::reply(keys, HOSTNQN, SUBNQN, 1, msg, rng, out).expect("reply")
}

/// The host's part: Success1 → Success2.
#[inline(never)]
fn host_step_end(p: &Pending, msg: &[u8], out: &mut [u8]) -> usize {
    assert!(p.success1(msg).expect("success1"));
    host::success2(1, out).expect("success2")
}

#[inline(never)]
fn host_step_start(out: &mut [u8]) -> usize {
    host::negotiate(1, out).expect("negotiate")
}

fn transaction(keys: &HostKeys, policy: &HostPolicy, hr: &mut Rng, cr: &mut Rng, a: &mut [u8], b: &mut [u8]) {
    let mut s = Session::new();
    let n = host_step_start(a);
    let m = ctrl_step(&mut s, policy, &a[..n], cr, b);
    let (pending, n) = host_step(keys, &b[..m], hr, a);
    let m = ctrl_step(&mut s, policy, &a[..n], cr, b);
    let n = host_step_end(&pending, &b[..m], a);
    ctrl_step(&mut s, policy, &a[..n], cr, b);
    assert!(s.authenticated());
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let hash = args.get(1).and_then(|h| HashId::from_name(h)).unwrap_or(HashId::Sha256);
    let group = args.get(2).and_then(|g| DhGroup::from_name(g)).unwrap_or(DhGroup::Null);
    let n: u32 = args.get(3).and_then(|n| n.parse().ok()).unwrap_or(10);
    let hk = Secret::from_key(Some(hash), &[0x11; 32]).expect("key");
    let ck = Secret::from_key(None, &[0x22; 32]).expect("key");
    let keys = HostKeys { secret: hk.clone(), ctrl: Some(ck.clone()) };
    let policy = HostPolicy { key: hk, ctrl_key: Some(ck), hash, dhgroup: group };
    let (mut hr, mut cr) = (Rng::seed_from_u64(1), Rng::seed_from_u64(2));
    let (mut a, mut b) = (vec![0u8; MAX_MESSAGE], vec![0u8; MAX_MESSAGE]);
    let t0 = std::time::Instant::now();
    for _ in 0..n {
        transaction(&keys, &policy, &mut hr, &mut cr, &mut a, &mut b);
    }
    let us = t0.elapsed().as_secs_f64() * 1e6 / n.max(1) as f64;
    println!("AUTH-WALL-PER-CONNECT {} {} {:.0} us (host + controller, bidirectional, {n} transactions)", hash.name(), group.name(), us);
}
