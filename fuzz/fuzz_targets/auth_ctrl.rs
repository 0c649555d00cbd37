//! DH-HMAC-CHAP messages into the controller's transaction state machine (nvme_auth::ctrl):
//! a sequence of Authentication Send payloads, each followed by an Authentication Receive.
//! The first input byte picks the policy's hash and DH group and whether a controller key
//! (bidirectional) is configured. Then steps of [ctl][len LE16][bytes]: ctl 0 sends the bytes
//! as the message; ctl 1, 2, 3 send an honest host's Negotiate, Reply (to the controller's
//! last message, so the right secret and DH value) or Success2, with the bytes as (offset,
//! xor) patches. An untouched honest exchange must authenticate.
#![no_main]

use nvme_auth::ctrl::{HostPolicy, Session};
use nvme_auth::host::{self, HostKeys};
use nvme_auth::wire::MAX_MESSAGE;
use nvme_auth::{DhGroup, HashId, Rng, Secret, SeedableRng};

const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555";
const SUBNQN: &str = "nqn.2024-01.io.example:auth";
const TID: u16 = 0x1234;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&sel, mut rest)) = data.split_first() else { return };
    let key = Secret::from_key(None, &[0x5a; 32]).expect("32-byte key");
    let ctrl_key = (sel & 1 != 0).then(|| Secret::from_key(Some(HashId::Sha256), &[0xa5; 48]).expect("48-byte key"));
    let keys = HostKeys { secret: key.clone(), ctrl: ctrl_key.clone() };
    let mut policy = HostPolicy::new(key, ctrl_key);
    policy.hash = [HashId::Sha256, HashId::Sha384, HashId::Sha512][(sel >> 1) as usize % 3];
    policy.dhgroup = [DhGroup::Null, DhGroup::Ffdhe2048][(sel >> 3) as usize & 1];
    let (mut crng, mut hrng) = (Rng::seed_from_u64(1), Rng::seed_from_u64(2));
    let mut s = Session::new();
    let (mut last, mut msg) = (vec![0u8; MAX_MESSAGE], vec![0u8; MAX_MESSAGE]);
    let mut last_len = 0;
    let mut seq = 1u32;
    // The steps an honest host takes, in order; any other step or a patch breaks the chain.
    let mut honest = Some(0u8);
    while let [ctl, a, b, tail @ ..] = rest {
        let n = (u16::from_le_bytes([*a, *b]) as usize).min(tail.len());
        let (bytes, r) = tail.split_at(n);
        rest = r;
        let kind = ctl & 3;
        let len = match kind {
            1 => host::negotiate(TID, &mut msg).ok(),
            2 => host::reply(&keys, HOSTNQN, SUBNQN, TID, &last[..last_len], &mut hrng, &mut msg).ok().map(|(_, n)| n),
            3 => host::success2(TID, &mut msg).ok(),
            _ => None,
        };
        let m: &[u8] = match len {
            Some(len) => {
                for p in bytes.chunks_exact(2) {
                    msg[p[0] as usize % len.max(1)] ^= p[1];
                }
                &msg[..len]
            }
            None => bytes,
        };
        honest = honest.filter(|&h| kind == h + 1 && len.is_some() && !bytes.chunks_exact(2).any(|p| p[1] != 0));
        let _ = s.on_send(&policy, HOSTNQN, SUBNQN, seq, m, &mut crng);
        seq += 1;
        last_len = s.on_receive(&mut last).unwrap_or(0);
        assert!(last_len <= last.len());
        honest = honest.map(|h| h + 1);
        // Negotiate, Reply and, when bidirectional, Success2: the controller must accept.
        if honest == Some(if policy.ctrl_key.is_some() { 3 } else { 2 }) {
            assert!(s.authenticated(), "an honest host was refused");
        }
    }
});
