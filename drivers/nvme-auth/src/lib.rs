//! NVMe in-band authentication, DH-HMAC-CHAP (NVMe Base 2.0 §8.13, TP 8006): secrets in the
//! `DHHC-1:` representation, the key transformation, HMAC-SHA-256/384/512, the null and RFC 7919
//! FFDHE groups, the messages as wire layouts, and the two sides' state machines:
//! [`host`] (what the initiator sends over Authentication Send/Receive after a Connect whose
//! response asked for authentication) and [`ctrl`] (what a target answers, per queue).
//!
//! No hand-written primitives: RustCrypto `sha2`/`hmac`, `crypto-bigint` (constant-time
//! Montgomery exponentiation), `base64ct`, `subtle`; randomness comes from the caller's CSPRNG
//! (`rand_core::CryptoRng`; the appliance seeds a ChaCha20 generator from RDRAND/TSC).
//! Everything here runs on the connection setup path only; nothing a peer sends can panic it.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod chap;
pub mod ctrl;
pub mod dh;
mod ffdhe;
pub mod hash;
pub mod host;
pub mod secret;
pub mod wire;

pub use dh::DhGroup;
pub use hash::{Digest, HashId};
pub use secret::Secret;

/// The ChaCha20 CSPRNG callers seed (re-exported so they need not name `rand_chacha`).
pub use rand_chacha::ChaCha20Rng as Rng;
pub use rand_core::SeedableRng;

/// Why authentication (or a secret) failed. Protocol errors map onto the AUTH_Failure
/// reason-code explanations with [`Error::explanation`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A `DHHC-1:` secret is malformed (what is wrong).
    Secret(&'static str),
    /// A `DHHC-1:` secret's CRC-32 does not match its key.
    SecretCrc,
    /// The peer offered or chose no usable hash (its identifier).
    HashUnusable(u8),
    /// The peer offered or chose no usable DH group (its identifier).
    DhGroupUnusable(u8),
    /// The peer's DH public value has the wrong length or lies outside [2, p-2].
    BadPublicValue,
    /// A message is too short or its lengths disagree (which field).
    Payload(&'static str),
    /// A message of another type, step or transaction than expected (raw auth_type, auth_id).
    UnexpectedMessage { auth_type: u8, auth_id: u8 },
    /// Secure channel concatenation requested (not supported; raw SC_C).
    ConcatMismatch(u8),
    /// A response did not verify: wrong secret on one side.
    Failed,
    /// The peer ended the transaction with AUTH_Failure1/2 (raw reason explanation).
    Refused { explanation: u8 },
    /// The caller's buffer cannot hold the message (bytes needed).
    BufferTooSmall(usize),
    /// A command arrived at the wrong step (e.g. Receive with nothing to send).
    Sequence,
}

impl Error {
    /// The AUTH_Failure reason-code explanation describing this error.
    pub fn explanation(&self) -> u8 {
        use wire::failure as f;
        match self {
            Error::HashUnusable(_) => f::HASH_UNUSABLE,
            Error::DhGroupUnusable(_) => f::DHGROUP_UNUSABLE,
            Error::ConcatMismatch(_) => f::CONCAT_MISMATCH,
            Error::Payload(_) | Error::BadPublicValue | Error::BufferTooSmall(_) => f::INCORRECT_PAYLOAD,
            Error::UnexpectedMessage { .. } | Error::Sequence => f::INCORRECT_MESSAGE,
            Error::Refused { explanation } => *explanation,
            Error::Secret(_) | Error::SecretCrc | Error::Failed => f::FAILED,
        }
    }
}

/// Copy `src` into `out` at `off`; the end offset, or `BufferTooSmall`.
pub(crate) fn put(out: &mut [u8], off: usize, src: &[u8]) -> Result<usize, Error> {
    let end = off.checked_add(src.len()).ok_or(Error::BufferTooSmall(usize::MAX))?;
    out.get_mut(off..end).ok_or(Error::BufferTooSmall(end))?.copy_from_slice(src);
    Ok(end)
}

/// `msg[off..off+len]`, or a payload error naming `what`.
pub(crate) fn field<'a>(msg: &'a [u8], off: usize, len: usize, what: &'static str) -> Result<&'a [u8], Error> {
    off.checked_add(len).and_then(|end| msg.get(off..end)).ok_or(Error::Payload(what))
}

/// If `msg` is an AUTH_Failure1/2, the refusal it carries.
pub(crate) fn as_failure(msg: &[u8], which: u8) -> Option<Error> {
    use zerocopy::FromBytes;
    let (f, _) = wire::Failure::read_from_prefix(msg).ok()?;
    (f.auth_type == wire::auth_type::COMMON && f.auth_id == which).then_some(Error::Refused { explanation: f.rescode_exp })
}

/// Write AUTH_Failure1 or 2 (`which`) for transaction `tid`; its length.
pub fn failure(which: u8, tid: u16, explanation: u8, out: &mut [u8]) -> Result<usize, Error> {
    use zerocopy::IntoBytes;
    let mut f = wire::Failure::zeroed();
    f.auth_type = wire::auth_type::COMMON;
    f.auth_id = which;
    f.t_id.set(tid);
    f.rescode = wire::failure::REASON_FAILED;
    f.rescode_exp = explanation;
    put(out, 0, f.as_bytes())
}
