//! The DH-HMAC-CHAP hash functions (SHA-256/384/512 by their NVMe identifiers), their HMACs
//! (RustCrypto `sha2` + `hmac`) and a fixed-size digest value that needs no allocation.

use hmac::{Hmac, Mac};
use sha2::{Digest as _, Sha256, Sha384, Sha512};
use subtle::ConstantTimeEq;

/// A hash function by its NVMe identifier (Base 2.0 §8.13.5.x; Linux `NVME_AUTH_HASH_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum HashId {
    Sha256 = 0x01,
    Sha384 = 0x02,
    Sha512 = 0x03,
}

impl HashId {
    /// Every hash, in identifier order.
    pub const ALL: [HashId; 3] = [HashId::Sha256, HashId::Sha384, HashId::Sha512];

    pub fn from_id(id: u8) -> Option<HashId> {
        HashId::ALL.into_iter().find(|h| h.id() == id)
    }
    pub fn id(self) -> u8 {
        self as u8
    }
    /// Digest length in bytes (also the challenge and response length `hl`).
    pub fn len(self) -> usize {
        match self {
            HashId::Sha256 => 32,
            HashId::Sha384 => 48,
            HashId::Sha512 => 64,
        }
    }
    /// The name nvmet's configfs and nvme-cli use (`hmac(sha256)` ...), without `hmac()`.
    pub fn name(self) -> &'static str {
        match self {
            HashId::Sha256 => "sha256",
            HashId::Sha384 => "sha384",
            HashId::Sha512 => "sha512",
        }
    }
    pub fn from_name(s: &str) -> Option<HashId> {
        let s = s.strip_prefix("hmac(").and_then(|r| r.strip_suffix(')')).unwrap_or(s);
        HashId::ALL.into_iter().find(|h| h.name() == s)
    }
}

/// Largest digest (SHA-512).
pub const MAX_DIGEST: usize = 64;

/// A digest or HMAC value of one of the [`HashId`]s.
#[derive(Clone, Copy)]
pub struct Digest {
    len: u8,
    bytes: [u8; MAX_DIGEST],
}

impl Digest {
    /// A copy of `b` (at most 64 bytes), or `None` when longer.
    pub fn from_slice(b: &[u8]) -> Option<Digest> {
        let mut d = Digest { len: 0, bytes: [0; MAX_DIGEST] };
        d.bytes.get_mut(..b.len())?.copy_from_slice(b);
        d.len = b.len() as u8;
        Some(d)
    }
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
    /// Constant-time comparison with a received value (different lengths never match).
    pub fn matches(&self, other: &[u8]) -> bool {
        self.as_slice().ct_eq(other).into()
    }
}

impl core::fmt::Debug for Digest {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Values are secrets or responses: print the length only.
        write!(f, "Digest[{} B]", self.len)
    }
}

fn finish(out: &[u8]) -> Digest {
    // Every output here is ≤ 64 bytes.
    Digest::from_slice(out).unwrap_or(Digest { len: 0, bytes: [0; MAX_DIGEST] })
}

macro_rules! with_hash {
    ($h:expr, $D:ident => $body:expr) => {
        match $h {
            HashId::Sha256 => {
                type $D = Sha256;
                $body
            }
            HashId::Sha384 => {
                type $D = Sha384;
                $body
            }
            HashId::Sha512 => {
                type $D = Sha512;
                $body
            }
        }
    };
}

/// HMAC-`h` keyed with `key` over the concatenation of `parts`.
pub fn hmac(h: HashId, key: &[u8], parts: &[&[u8]]) -> Digest {
    with_hash!(h, D => {
        // HMAC accepts keys of any length (long ones are hashed first), so this never fails.
        let Ok(mut m) = <Hmac<D> as Mac>::new_from_slice(key) else { unreachable!("HMAC takes any key length") };
        for p in parts {
            m.update(p);
        }
        finish(&m.finalize().into_bytes())
    })
}

/// The plain digest of the concatenation of `parts`.
pub fn digest(h: HashId, parts: &[&[u8]]) -> Digest {
    with_hash!(h, D => {
        let mut d = D::new();
        for p in parts {
            d.update(p);
        }
        finish(&d.finalize())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> alloc::vec::Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// RFC 4231 test case 2 (key "Jefe"): published HMAC-SHA-256/384/512 vectors.
    #[test]
    fn hmac_rfc4231_case2() {
        let data = b"what do ya want for nothing?";
        let want = [
            (HashId::Sha256, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"),
            (HashId::Sha384, "af45d2e376484031617f78d2b58a6b1b9c7ef464f5a01b47e42ec3736322445e8e2240ca5e69e2c78b3239ecfab21649"),
            (HashId::Sha512, "164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea2505549758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737"),
        ];
        for (h, w) in want {
            assert_eq!(hmac(h, b"Jefe", &[&data[..10], &data[10..]]).as_slice(), &unhex(w)[..], "{h:?}");
        }
    }

    /// FIPS 180-2 "abc" digests.
    #[test]
    fn digest_abc() {
        assert_eq!(
            digest(HashId::Sha256, &[b"a", b"bc"]).as_slice(),
            &unhex("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")[..]
        );
        assert_eq!(digest(HashId::Sha384, &[b"abc"]).as_slice().len(), 48);
        assert_eq!(
            &digest(HashId::Sha512, &[b"abc"]).as_slice()[..8],
            &unhex("ddaf35a193617aba")[..]
        );
    }

    #[test]
    fn ids_and_names() {
        for h in HashId::ALL {
            assert_eq!(HashId::from_id(h.id()), Some(h));
            assert_eq!(HashId::from_name(h.name()), Some(h));
        }
        assert_eq!(HashId::from_name("hmac(sha384)"), Some(HashId::Sha384));
        assert_eq!(HashId::from_id(0), None);
        assert_eq!(HashId::from_id(4), None);
    }

    #[test]
    fn matches_is_exact() {
        let d = Digest::from_slice(&[1, 2, 3]).unwrap();
        assert!(d.matches(&[1, 2, 3]));
        assert!(!d.matches(&[1, 2, 4]));
        assert!(!d.matches(&[1, 2]));
        assert!(Digest::from_slice(&[0; 65]).is_none());
    }
}
