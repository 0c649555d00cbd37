//! DH-HMAC-CHAP secrets in their `DHHC-1:XX:<base64 of key || CRC-32 LE>:` representation
//! (NVMe Base 2.0 §8.13.5.7; what `nvme gen-dhchap-key` prints and nvmet's `dhchap_key`
//! takes), and the key transformation HMAC(key, NQN || "NVMe-over-Fabrics").

use alloc::string::String;
use base64ct::{Base64, Encoding};

use crate::hash::{hmac, Digest, HashId};
use crate::Error;

/// The representation's prefix.
pub const PREFIX: &str = "DHHC-1:";
/// The fixed text appended to the NQN in the key transformation.
pub const TRANSFORM_SUFFIX: &[u8] = b"NVMe-over-Fabrics";
/// Key lengths the representation allows.
pub const KEY_LENS: [usize; 3] = [32, 48, 64];

/// A parsed secret: the key bytes and the hash that transforms it (`None` for `00`).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    transform: Option<HashId>,
    len: u8,
    key: [u8; 64],
}

impl core::fmt::Debug for Secret {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Secret({:?}, {} B)", self.transform, self.len)
    }
}

impl Secret {
    /// A secret from raw key bytes (32, 48 or 64 of them).
    pub fn from_key(transform: Option<HashId>, key: &[u8]) -> Result<Secret, Error> {
        if !KEY_LENS.contains(&key.len()) {
            return Err(Error::Secret("key must be 32, 48 or 64 bytes"));
        }
        let mut s = Secret { transform, len: key.len() as u8, key: [0; 64] };
        s.key[..key.len()].copy_from_slice(key);
        Ok(s)
    }

    /// Parse `DHHC-1:XX:<base64>:` (the trailing colon may be missing, as Linux allows).
    /// XX is 00 (no transformation), 01 SHA-256, 02 SHA-384 or 03 SHA-512; the base64
    /// payload is the key followed by its CRC-32 (IEEE, little-endian), which must match.
    pub fn parse(s: &str) -> Result<Secret, Error> {
        let rest = s.strip_prefix(PREFIX).ok_or(Error::Secret("missing DHHC-1: prefix"))?;
        let (hash, b64) = rest.split_once(':').ok_or(Error::Secret("missing hash field"))?;
        let transform = match hash {
            "00" => None,
            "01" | "02" | "03" => HashId::from_id(hash.as_bytes()[1] - b'0'),
            _ => return Err(Error::Secret("hash field must be 00, 01, 02 or 03")),
        };
        let b64 = b64.strip_suffix(':').unwrap_or(b64);
        let mut buf = [0u8; 68];
        let raw = Base64::decode(b64, &mut buf).map_err(|_| Error::Secret("bad base64 payload"))?;
        let n = raw.len();
        if !KEY_LENS.iter().any(|&k| k + 4 == n) {
            return Err(Error::Secret("key must be 32, 48 or 64 bytes"));
        }
        let (key, crc) = raw.split_at(n - 4);
        if crc32fast::hash(key).to_le_bytes() != crc {
            return Err(Error::SecretCrc);
        }
        Secret::from_key(transform, key)
    }

    /// The `DHHC-1:XX:...:` representation.
    pub fn encode(&self) -> String {
        let mut raw = [0u8; 68];
        let n = self.len as usize;
        raw[..n].copy_from_slice(self.key());
        raw[n..n + 4].copy_from_slice(&crc32fast::hash(self.key()).to_le_bytes());
        let mut s = String::from(PREFIX);
        s.push_str(match self.transform {
            None => "00",
            Some(HashId::Sha256) => "01",
            Some(HashId::Sha384) => "02",
            Some(HashId::Sha512) => "03",
        });
        s.push(':');
        let mut b64 = [0u8; 92];
        // 68 bytes encode to 92 characters: the buffer always suffices.
        s.push_str(Base64::encode(&raw[..n + 4], &mut b64).unwrap_or_default());
        s.push(':');
        s
    }

    pub fn key(&self) -> &[u8] {
        &self.key[..self.len as usize]
    }
    pub fn transform_hash(&self) -> Option<HashId> {
        self.transform
    }

    /// The key the CHAP HMACs use: the key itself for `00`, else HMAC-XX(key, nqn ||
    /// "NVMe-over-Fabrics") (host secrets with the host NQN, controller secrets with the
    /// subsystem NQN).
    pub fn transformed(&self, nqn: &str) -> Digest {
        match self.transform {
            None => Digest::from_slice(self.key()).unwrap_or_else(|| unreachable!("keys are ≤ 64 bytes")),
            Some(h) => hmac(h, self.key(), &[nqn.as_bytes(), TRANSFORM_SUFFIX]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example secret printed in the NVMe Base specification (§8.13.5.7), as quoted by
    /// the Linux patch that made nvmet accept it with every hash field.
    const SPEC_EXAMPLE: &str = "DHHC-1:00:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:";

    #[test]
    fn parses_spec_example() {
        let s = Secret::parse(SPEC_EXAMPLE).unwrap();
        assert_eq!(s.key().len(), 32);
        assert_eq!(s.transform_hash(), None);
        assert_eq!(s.encode(), SPEC_EXAMPLE);
        for (f, h) in [("01", HashId::Sha256), ("02", HashId::Sha384), ("03", HashId::Sha512)] {
            let t = SPEC_EXAMPLE.replacen(":00:", &alloc::format!(":{f}:"), 1);
            assert_eq!(Secret::parse(&t).unwrap().transform_hash(), Some(h));
        }
        // Without the trailing colon too.
        assert!(Secret::parse(SPEC_EXAMPLE.strip_suffix(':').unwrap()).is_ok());
    }

    #[test]
    fn refuses_bad_secrets() {
        let mut bad_crc = String::from(SPEC_EXAMPLE);
        bad_crc.replace_range(10..11, "j");
        assert_eq!(Secret::parse(&bad_crc), Err(Error::SecretCrc));
        for s in [
            "",
            "DHHC-1:",
            "DHHC-2:00:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:",
            "DHHC-1:04:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:",
            "DHHC-1:1:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:",
            "DHHC-1:00:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4H:",
            "DHHC-1:00:!!!!:",
            "DHHC-1:00:AAAA:",
        ] {
            assert!(matches!(Secret::parse(s), Err(Error::Secret(_))), "{s}");
        }
    }

    #[test]
    fn encode_roundtrips_every_length() {
        for (i, n) in KEY_LENS.into_iter().enumerate() {
            let key: alloc::vec::Vec<u8> = (0..n as u8).map(|b| b.wrapping_mul(37).wrapping_add(i as u8)).collect();
            for t in [None, Some(HashId::Sha256), Some(HashId::Sha512)] {
                let s = Secret::from_key(t, &key).unwrap();
                assert_eq!(Secret::parse(&s.encode()).unwrap(), s);
            }
        }
        assert!(Secret::from_key(None, &[0; 31]).is_err());
    }
}
