//! The DH-HMAC-CHAP Diffie-Hellman groups: the null group and RFC 7919 FFDHE 2048-8192
//! (generator 2), with constant-time modular exponentiation from `crypto-bigint`. Each group's
//! Montgomery parameters are computed once per process ([`GroupParams`]) and shared by every
//! key pair: they cost about a quarter of a side's FFDHE work per Connect otherwise.

use alloc::vec::Vec;
use crypto_bigint::modular::{BoxedMontyForm, BoxedMontyParams};
use crypto_bigint::{BoxedUint, Odd};
use rand_core::{CryptoRng, RngCore};

use crate::ffdhe;
use crate::Error;

/// A DH group by its NVMe identifier (Linux `NVME_AUTH_DHGROUP_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum DhGroup {
    Null = 0x00,
    Ffdhe2048 = 0x01,
    Ffdhe3072 = 0x02,
    Ffdhe4096 = 0x03,
    Ffdhe6144 = 0x04,
    Ffdhe8192 = 0x05,
}

impl DhGroup {
    /// Every group, in identifier order.
    pub const ALL: [DhGroup; 6] =
        [DhGroup::Null, DhGroup::Ffdhe2048, DhGroup::Ffdhe3072, DhGroup::Ffdhe4096, DhGroup::Ffdhe6144, DhGroup::Ffdhe8192];

    pub fn from_id(id: u8) -> Option<DhGroup> {
        DhGroup::ALL.into_iter().find(|g| g.id() == id)
    }
    pub fn id(self) -> u8 {
        self as u8
    }
    /// nvmet/nvme-cli names: `null`, `ffdhe2048` ...
    pub fn name(self) -> &'static str {
        match self {
            DhGroup::Null => "null",
            DhGroup::Ffdhe2048 => "ffdhe2048",
            DhGroup::Ffdhe3072 => "ffdhe3072",
            DhGroup::Ffdhe4096 => "ffdhe4096",
            DhGroup::Ffdhe6144 => "ffdhe6144",
            DhGroup::Ffdhe8192 => "ffdhe8192",
        }
    }
    pub fn from_name(s: &str) -> Option<DhGroup> {
        DhGroup::ALL.into_iter().find(|g| g.name() == s)
    }
    /// The prime, big-endian (none for the null group).
    pub fn prime(self) -> Option<&'static [u8]> {
        match self {
            DhGroup::Null => None,
            DhGroup::Ffdhe2048 => Some(&ffdhe::FFDHE2048),
            DhGroup::Ffdhe3072 => Some(&ffdhe::FFDHE3072),
            DhGroup::Ffdhe4096 => Some(&ffdhe::FFDHE4096),
            DhGroup::Ffdhe6144 => Some(&ffdhe::FFDHE6144),
            DhGroup::Ffdhe8192 => Some(&ffdhe::FFDHE8192),
        }
    }
    /// Length of a public value (`dhvlen`): the prime's size, 0 for the null group.
    pub fn value_len(self) -> usize {
        self.prime().map_or(0, <[u8]>::len)
    }
    /// Private exponent length in bits: at least twice the group's security strength
    /// (RFC 7919 §5.2: 225, 275, 325, 375, 400), rounded up to a multiple of 64.
    fn exp_bits(self) -> u32 {
        match self {
            DhGroup::Null => 0,
            DhGroup::Ffdhe2048 => 256,
            DhGroup::Ffdhe3072 => 320,
            DhGroup::Ffdhe4096 => 384,
            DhGroup::Ffdhe6144 => 448,
            DhGroup::Ffdhe8192 => 512,
        }
    }
}

/// What every key pair of one FFDHE group shares: the Montgomery parameters of p, p - 1 (the
/// bound for peer values) and the generator in Montgomery form.
pub(crate) struct GroupParams {
    params: BoxedMontyParams,
    p_minus_1: BoxedUint,
    generator: BoxedMontyForm,
}

/// The parameters, computed on first use, one slot per FFDHE group (identifier - 1).
static PARAMS: [spin::Once<Option<GroupParams>>; 5] = [spin::Once::new(), spin::Once::new(), spin::Once::new(), spin::Once::new(), spin::Once::new()];

impl GroupParams {
    /// The shared parameters of `group` (computed once); `None` for the null group.
    pub(crate) fn of(group: DhGroup) -> Option<&'static GroupParams> {
        let slot = PARAMS.get(usize::from(group.id()).checked_sub(1)?)?;
        slot.call_once(|| GroupParams::compute(group)).as_ref()
    }

    fn compute(group: DhGroup) -> Option<GroupParams> {
        let prime = group.prime()?;
        let bits = u32::try_from(prime.len() * 8).ok()?;
        let p = BoxedUint::from_be_slice(prime, bits).ok()?;
        let p_minus_1 = p.wrapping_sub(&BoxedUint::one_with_precision(bits));
        let odd: Option<Odd<BoxedUint>> = Odd::new(p).into();
        let params = BoxedMontyParams::new(odd?);
        let two = BoxedUint::from_be_slice(&[2], bits).ok()?;
        let generator = BoxedMontyForm::new(two, params.clone());
        Some(GroupParams { params, p_minus_1, generator })
    }
}

/// One side's ephemeral key pair in an FFDHE group.
pub struct DhKey {
    group: DhGroup,
    shared: &'static GroupParams,
    x: BoxedUint,
    public: Vec<u8>,
}

impl core::fmt::Debug for DhKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "DhKey({})", self.group.name())
    }
}

impl DhKey {
    /// A fresh key pair: x random, public value 2^x mod p (`value_len` bytes, big-endian).
    pub fn generate(group: DhGroup, rng: &mut (impl RngCore + CryptoRng)) -> Result<DhKey, Error> {
        if group == DhGroup::Null {
            return Err(Error::DhGroupUnusable(group.id()));
        }
        let mut xb = [0u8; 64];
        let xlen = (group.exp_bits() / 8) as usize;
        let x = xb.get_mut(..xlen).ok_or(Error::DhGroupUnusable(group.id()))?;
        loop {
            rng.fill_bytes(x);
            if x.iter().rev().skip(1).any(|&b| b != 0) || x.last().is_some_and(|&b| b > 1) {
                break;
            }
        }
        let k = DhKey::with_private(group, x);
        xb.fill(0);
        k
    }

    /// The key pair for private exponent `x` (big-endian, at most the group's exponent size).
    fn with_private(group: DhGroup, x: &[u8]) -> Result<DhKey, Error> {
        let unusable = Error::DhGroupUnusable(group.id());
        let shared = GroupParams::of(group).ok_or(unusable.clone())?;
        let x = BoxedUint::from_be_slice(x, group.exp_bits()).map_err(|_| unusable)?;
        let public = shared.generator.pow(&x).retrieve().to_be_bytes().into_vec();
        Ok(DhKey { group, shared, x, public })
    }

    pub fn group(&self) -> DhGroup {
        self.group
    }
    /// Our public value, `value_len` bytes big-endian.
    pub fn public(&self) -> &[u8] {
        &self.public
    }

    /// The shared secret peer^x mod p, `value_len` bytes big-endian, after checking the peer's
    /// value has the group's length and lies in [2, p-2] (SP 800-56A partial validation).
    pub fn shared_secret(&self, peer: &[u8]) -> Result<Vec<u8>, Error> {
        let bits = (self.group.value_len() * 8) as u32;
        if peer.len() != self.group.value_len() {
            return Err(Error::BadPublicValue);
        }
        let y = BoxedUint::from_be_slice(peer, bits).map_err(|_| Error::BadPublicValue)?;
        if y.bits() <= 1 || y >= self.shared.p_minus_1 {
            return Err(Error::BadPublicValue);
        }
        Ok(BoxedMontyForm::new(y, self.shared.params.clone()).pow(&self.x).retrieve().to_be_bytes().into_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::rand_core::SeedableRng;
    use rand_chacha::ChaCha20Rng;

    #[test]
    fn both_sides_agree_and_values_are_checked() {
        let mut rng = ChaCha20Rng::from_seed([7; 32]);
        for g in [DhGroup::Ffdhe2048, DhGroup::Ffdhe3072] {
            let a = DhKey::generate(g, &mut rng).unwrap();
            let b = DhKey::generate(g, &mut rng).unwrap();
            assert_eq!(a.public().len(), g.value_len());
            let s1 = a.shared_secret(b.public()).unwrap();
            let s2 = b.shared_secret(a.public()).unwrap();
            assert_eq!(s1, s2);
            assert_eq!(s1.len(), g.value_len());
            assert_ne!(a.public(), b.public());
            // Degenerate and out-of-range values are refused.
            let n = g.value_len();
            let mut one = alloc::vec![0u8; n];
            one[n - 1] = 1;
            assert_eq!(a.shared_secret(&one), Err(Error::BadPublicValue));
            assert_eq!(a.shared_secret(&alloc::vec![0u8; n]), Err(Error::BadPublicValue));
            assert_eq!(a.shared_secret(g.prime().unwrap()), Err(Error::BadPublicValue));
            let mut pm1 = g.prime().unwrap().to_vec();
            pm1[n - 1] -= 1;
            assert_eq!(a.shared_secret(&pm1), Err(Error::BadPublicValue));
            assert_eq!(a.shared_secret(&[2]), Err(Error::BadPublicValue));
        }
        assert!(DhKey::generate(DhGroup::Null, &mut rng).is_err());
    }

    /// Cross-check against an independent computation (Python's built-in `pow`, run once
    /// when this test was written): ffdhe2048 with x = 2^255 + 5 gives a public value
    /// 033cfb73dd155936…1bfcf3ba69cbb836, and with the peer value 2^12345678901234567890 mod p
    /// a shared secret 6fd73a5118e7d5c0…3429c1dd7630429d.
    #[test]
    fn ffdhe2048_matches_independent_modexp() {
        let mut x = [0u8; 32];
        x[0] = 0x80;
        x[31] = 5;
        let k = DhKey::with_private(DhGroup::Ffdhe2048, &x).unwrap();
        assert_eq!(k.public()[..8], [0x03, 0x3c, 0xfb, 0x73, 0xdd, 0x15, 0x59, 0x36]);
        assert_eq!(k.public()[248..], [0x1b, 0xfc, 0xf3, 0xba, 0x69, 0xcb, 0xb8, 0x36]);
        let e = 12345678901234567890u64.to_be_bytes();
        let mut xe = [0u8; 32];
        xe[24..].copy_from_slice(&e);
        let peer = DhKey::with_private(DhGroup::Ffdhe2048, &xe).unwrap();
        let s = k.shared_secret(peer.public()).unwrap();
        assert_eq!(s[..8], [0x6f, 0xd7, 0x3a, 0x51, 0x18, 0xe7, 0xd5, 0xc0]);
        assert_eq!(s[248..], [0x34, 0x29, 0xc1, 0xdd, 0x76, 0x30, 0x42, 0x9d]);
    }

    #[test]
    fn group_params_are_computed_once_and_shared() {
        assert!(GroupParams::of(DhGroup::Null).is_none());
        for g in DhGroup::ALL.into_iter().skip(1) {
            let a = GroupParams::of(g).unwrap();
            let b = GroupParams::of(g).unwrap();
            assert!(core::ptr::eq(a, b), "{} computed twice", g.name());
            // p - 1 is the prime with its last byte decremented (every RFC 7919 prime ends in 0xFF)
            let mut pm1 = g.prime().unwrap().to_vec();
            let n = pm1.len();
            pm1[n - 1] -= 1;
            assert_eq!(&*a.p_minus_1.to_be_bytes(), &pm1[..]);
            assert_eq!(a.generator.retrieve().to_be_bytes()[n - 1], 2);
        }
        let mut rng = ChaCha20Rng::from_seed([9; 32]);
        let k = DhKey::generate(DhGroup::Ffdhe3072, &mut rng).unwrap();
        assert!(core::ptr::eq(k.shared, GroupParams::of(DhGroup::Ffdhe3072).unwrap()));
    }

    #[test]
    fn names_and_ids() {
        for g in DhGroup::ALL {
            assert_eq!(DhGroup::from_id(g.id()), Some(g));
            assert_eq!(DhGroup::from_name(g.name()), Some(g));
        }
        assert_eq!(DhGroup::from_id(6), None);
        assert_eq!(DhGroup::Ffdhe8192.value_len(), 1024);
    }
}
