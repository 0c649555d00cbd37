//! Host ↔ controller DH-HMAC-CHAP transactions run through both state machines: every hash,
//! the null group and FFDHE, unidirectional and bidirectional, wrong secrets refused, and
//! garbage never panics.

use nvme_auth::ctrl::{HostPolicy, Session};
use nvme_auth::host::{self, HostKeys};
use nvme_auth::wire::{auth_id, failure, MAX_MESSAGE};
use nvme_auth::{DhGroup, Error, HashId, Rng, Secret, SeedableRng};

const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555";
const SUBNQN: &str = "nqn.2024-01.io.example:auth";

fn secret(seed: u8, t: Option<HashId>, len: usize) -> Secret {
    let key: Vec<u8> = (0..len as u8).map(|i| i.wrapping_mul(31).wrapping_add(seed)).collect();
    Secret::from_key(t, &key).unwrap()
}

/// What the host saw at the end.
#[derive(Debug, PartialEq)]
enum End {
    Ok { bidirectional: bool },
    HostFailed(Error),
}

/// One full transaction; returns the host's view and the controller session.
fn run(keys: &HostKeys, policy: &HostPolicy, seed: u64) -> (End, Session) {
    let mut hrng = Rng::seed_from_u64(seed);
    let mut crng = Rng::seed_from_u64(seed ^ 0xFFFF);
    let mut ctrl = Session::new();
    let mut buf = vec![0u8; MAX_MESSAGE];
    let tid = 0x1234;
    let n = host::negotiate(tid, &mut buf).unwrap();
    ctrl.on_send(policy, HOSTNQN, SUBNQN, 42, &buf[..n], &mut crng).unwrap();
    let n = ctrl.on_receive(&mut buf).unwrap();
    let mut out = vec![0u8; MAX_MESSAGE];
    let (pending, m) = match host::reply(keys, HOSTNQN, SUBNQN, tid, &buf[..n], &mut hrng, &mut out) {
        Ok(x) => x,
        Err(e) => return (End::HostFailed(e), ctrl),
    };
    ctrl.on_send(policy, HOSTNQN, SUBNQN, 42, &out[..m], &mut crng).unwrap();
    let n = ctrl.on_receive(&mut buf).unwrap();
    match pending.success1(&buf[..n]) {
        Ok(true) => {
            let m = host::success2(tid, &mut out).unwrap();
            ctrl.on_send(policy, HOSTNQN, SUBNQN, 42, &out[..m], &mut crng).unwrap();
            (End::Ok { bidirectional: true }, ctrl)
        }
        Ok(false) => (End::Ok { bidirectional: false }, ctrl),
        Err(e) => {
            if !matches!(e, Error::Refused { .. }) {
                let m = host::failure2(tid, &e, &mut out).unwrap();
                ctrl.on_send(policy, HOSTNQN, SUBNQN, 42, &out[..m], &mut crng).unwrap();
            }
            (End::HostFailed(e), ctrl)
        }
    }
}

#[test]
fn every_hash_null_and_ffdhe_bidirectional() {
    for (i, hash) in HashId::ALL.into_iter().enumerate() {
        for group in [DhGroup::Null, DhGroup::Ffdhe2048] {
            let hs = secret(i as u8, Some(hash), hash.len());
            let cs = secret(100 + i as u8, Some(HashId::Sha512), 64);
            let keys = HostKeys { secret: hs.clone(), ctrl: Some(cs.clone()) };
            let policy = HostPolicy { key: hs, ctrl_key: Some(cs), hash, dhgroup: group };
            let (end, ctrl) = run(&keys, &policy, i as u64);
            assert_eq!(end, End::Ok { bidirectional: true }, "{hash:?} {group:?}");
            assert!(ctrl.authenticated(), "{hash:?} {group:?}");
            assert_eq!(ctrl.chosen(), (hash, group));
        }
    }
}

#[test]
fn every_ffdhe_group_unidirectional() {
    for group in DhGroup::ALL {
        let hs = secret(9, None, 48);
        let keys = HostKeys { secret: hs.clone(), ctrl: None };
        let policy = HostPolicy { key: hs, ctrl_key: None, hash: HashId::Sha384, dhgroup: group };
        let (end, ctrl) = run(&keys, &policy, 5);
        assert_eq!(end, End::Ok { bidirectional: false }, "{group:?}");
        assert!(ctrl.authenticated());
    }
}

#[test]
fn wrong_host_secret_is_refused() {
    for group in [DhGroup::Null, DhGroup::Ffdhe2048] {
        let keys = HostKeys { secret: secret(1, Some(HashId::Sha256), 32), ctrl: None };
        let policy = HostPolicy { key: secret(2, Some(HashId::Sha256), 32), ctrl_key: None, hash: HashId::Sha256, dhgroup: group };
        let (end, ctrl) = run(&keys, &policy, 1);
        assert_eq!(end, End::HostFailed(Error::Refused { explanation: failure::FAILED }));
        assert!(ctrl.failed() && !ctrl.authenticated());
    }
    // Same key bytes, other transformation hash: still a different secret.
    let k = secret(1, Some(HashId::Sha256), 32);
    let k2 = Secret::from_key(Some(HashId::Sha384), k.key()).unwrap();
    let (end, ctrl) = run(&HostKeys { secret: k, ctrl: None }, &HostPolicy::new(k2, None), 2);
    assert!(matches!(end, End::HostFailed(Error::Refused { .. })));
    assert!(!ctrl.authenticated());
}

#[test]
fn wrong_controller_secret_is_refused_by_the_host() {
    let hs = secret(1, None, 32);
    let keys = HostKeys { secret: hs.clone(), ctrl: Some(secret(3, None, 32)) };
    let policy = HostPolicy { key: hs.clone(), ctrl_key: Some(secret(4, None, 32)), hash: HashId::Sha512, dhgroup: DhGroup::Ffdhe2048 };
    let (end, ctrl) = run(&keys, &policy, 3);
    assert_eq!(end, End::HostFailed(Error::Failed));
    assert!(ctrl.failed() && !ctrl.authenticated());
    // Bidirectional asked, but the controller has no controller secret: Failure1.
    let policy = HostPolicy::new(hs, None);
    let (end, ctrl) = run(&keys, &policy, 4);
    assert_eq!(end, End::HostFailed(Error::Refused { explanation: failure::FAILED }));
    assert!(ctrl.failed());
}

#[test]
fn unoffered_hash_or_group_gets_failure1() {
    let hs = secret(1, None, 32);
    let mut rng = Rng::seed_from_u64(1);
    let mut buf = vec![0u8; MAX_MESSAGE];
    // Negotiate offering SHA-256 only: the controller wants SHA-512.
    let n = host::negotiate(1, &mut buf).unwrap();
    buf[8 + 2] = 1; // halen
    let mut s = Session::new();
    let policy = HostPolicy { key: hs.clone(), ctrl_key: None, hash: HashId::Sha512, dhgroup: DhGroup::Null };
    s.on_send(&policy, HOSTNQN, SUBNQN, 1, &buf[..n], &mut rng).unwrap();
    let m = s.on_receive(&mut buf).unwrap();
    assert_eq!(&buf[..2], &[0, auth_id::FAILURE1]);
    assert_eq!(buf[7], failure::HASH_UNUSABLE);
    assert_eq!(m, 8);
    assert!(s.failed());
    // Secure channel concatenation asked for.
    let n = host::negotiate(2, &mut buf).unwrap();
    buf[6] = 1;
    let mut s = Session::new();
    s.on_send(&HostPolicy::new(hs, None), HOSTNQN, SUBNQN, 1, &buf[..n], &mut rng).unwrap();
    s.on_receive(&mut buf).unwrap();
    assert_eq!(buf[7], failure::CONCAT_MISMATCH);
    // Nothing to receive before a Negotiate.
    assert_eq!(Session::new().on_receive(&mut buf), Err(Error::Sequence));
}

#[test]
fn garbage_never_panics_and_never_authenticates() {
    let hs = secret(1, None, 32);
    let policy = HostPolicy { key: hs.clone(), ctrl_key: Some(hs.clone()), hash: HashId::Sha256, dhgroup: DhGroup::Ffdhe2048 };
    let keys = HostKeys { secret: hs, ctrl: Some(secret(2, None, 32)) };
    let mut rng = Rng::seed_from_u64(77);
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut buf = vec![0u8; MAX_MESSAGE];
    for round in 0..2000 {
        let len = (next() % 1300) as usize;
        let mut msg: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        // Steer the header towards real message types half of the time.
        if len >= 2 && round % 2 == 0 {
            msg[0] = (round / 2 % 2) as u8;
            msg[1] = [0, 1, 2, 3, 4, 0xF0, 0xF1][round / 4 % 7];
        }
        let mut s = Session::new();
        let _ = s.on_send(&policy, HOSTNQN, SUBNQN, 1, &msg, &mut rng);
        let _ = s.on_receive(&mut buf);
        let _ = s.on_send(&policy, HOSTNQN, SUBNQN, 1, &msg, &mut rng);
        assert!(!s.authenticated());
        let _ = host::reply(&keys, HOSTNQN, SUBNQN, 0, &msg, &mut rng, &mut buf);
    }
}

#[test]
fn short_receive_buffer_is_an_error_not_a_panic() {
    let hs = secret(1, None, 32);
    let policy = HostPolicy::new(hs, None);
    let mut rng = Rng::seed_from_u64(1);
    let mut buf = vec![0u8; MAX_MESSAGE];
    let n = host::negotiate(1, &mut buf).unwrap();
    let mut s = Session::new();
    s.on_send(&policy, HOSTNQN, SUBNQN, 1, &buf[..n], &mut rng).unwrap();
    assert_eq!(s.on_receive(&mut buf[..20]), Err(Error::BufferTooSmall(48)));
    assert!(host::negotiate(1, &mut buf[..10]).is_err());
}
