//! The DH-HMAC-CHAP computations (NVMe Base 2.0 §8.13.5.x), on both sides:
//! - augmented challenge Ca = HMAC(H(session key), C) when a DH group is in use;
//! - host response  R1 = HMAC(Kh, C1 || S1 (LE32) || T_ID (LE16) || SC_C || "HostHost"   || NQNh || 0x00 || NQNs);
//! - controller response R2 = HMAC(Kc, C2 || S2 || T_ID || SC_C || "Controller" || NQNs || 0x00 || NQNh);
//!
//! where Kh/Kc are the transformed host/controller secrets ([`crate::Secret::transformed`]).
//! Field order and text as in Linux `nvme_auth_dhchap_setup_host_response` /
//! `_setup_ctrl_response` and nvmet `nvmet_auth_host_hash` / `nvmet_auth_ctrl_hash` (facts only).

use crate::hash::{digest, hmac, Digest, HashId};
use crate::wire::SC_C_NONE;

/// HMAC(H(session_key), challenge).
pub fn augmented_challenge(h: HashId, session_key: &[u8], challenge: &[u8]) -> Digest {
    let hk = digest(h, &[session_key]);
    hmac(h, hk.as_slice(), &[challenge])
}

/// The challenge a response is computed over: augmented when there is a session key.
pub fn effective_challenge(h: HashId, session_key: Option<&[u8]>, challenge: &[u8]) -> Digest {
    match session_key {
        Some(k) => augmented_challenge(h, k, challenge),
        None => Digest::from_slice(challenge).unwrap_or_else(|| unreachable!("challenges are ≤ 64 bytes")),
    }
}

/// The host's response to the controller's challenge.
pub fn host_response(h: HashId, key: &Digest, challenge: &[u8], seq: u32, tid: u16, hostnqn: &str, subnqn: &str) -> Digest {
    hmac(
        h,
        key.as_slice(),
        &[
            challenge,
            &seq.to_le_bytes(),
            &tid.to_le_bytes(),
            &[SC_C_NONE],
            b"HostHost",
            hostnqn.as_bytes(),
            &[0],
            subnqn.as_bytes(),
        ],
    )
}

/// The controller's response to the host's challenge (bidirectional authentication).
pub fn ctrl_response(h: HashId, key: &Digest, challenge: &[u8], seq: u32, tid: u16, subnqn: &str, hostnqn: &str) -> Digest {
    hmac(
        h,
        key.as_slice(),
        &[
            challenge,
            &seq.to_le_bytes(),
            &tid.to_le_bytes(),
            &[SC_C_NONE],
            b"Controller",
            subnqn.as_bytes(),
            &[0],
            hostnqn.as_bytes(),
        ],
    )
}
