//! DH-HMAC-CHAP messages into the controller's transaction state machine (nvme_auth::ctrl):
//! a sequence of Authentication Send payloads, each followed by an Authentication Receive.
//! Input: steps of [len LE16][message]; the first byte of the input picks the policy's
//! hash and DH group and whether a controller key (bidirectional) is configured.
#![no_main]

use nvme_auth::ctrl::{HostPolicy, Session};
use nvme_auth::wire::MAX_MESSAGE;
use nvme_auth::{DhGroup, HashId, Rng, Secret, SeedableRng};

const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555";
const SUBNQN: &str = "nqn.2024-01.io.example:auth";

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&sel, mut rest)) = data.split_first() else { return };
    let key = Secret::from_key(None, &[0x5a; 32]).expect("32-byte key");
    let ctrl_key = (sel & 1 != 0).then(|| Secret::from_key(Some(HashId::Sha256), &[0xa5; 48]).expect("48-byte key"));
    let mut policy = HostPolicy::new(key, ctrl_key);
    policy.hash = [HashId::Sha256, HashId::Sha384, HashId::Sha512][(sel >> 1) as usize % 3];
    policy.dhgroup = [DhGroup::Null, DhGroup::Ffdhe2048][(sel >> 3) as usize & 1];
    let mut rng = Rng::seed_from_u64(1);
    let mut s = Session::new();
    let mut out = vec![0u8; MAX_MESSAGE];
    let mut seq = 1u32;
    while let [a, b, tail @ ..] = rest {
        let n = (u16::from_le_bytes([*a, *b]) as usize).min(tail.len());
        let (msg, r) = tail.split_at(n);
        rest = r;
        let _ = s.on_send(&policy, HOSTNQN, SUBNQN, seq, msg, &mut rng);
        seq += 1;
        if let Ok(m) = s.on_receive(&mut out) {
            assert!(m <= out.len());
        }
    }
});
