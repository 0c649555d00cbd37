//! The host (initiator) side of DH-HMAC-CHAP: AUTH_Negotiate → (Challenge) → Reply →
//! (Success1) → Success2 or AUTH_Failure2. The caller moves the messages with Authentication
//! Send / Receive and keeps nothing but the [`Pending`] value between the two exchanges.

use rand_core::{CryptoRng, RngCore};
use zerocopy::{FromBytes, IntoBytes};

use crate::chap::{ctrl_response, effective_challenge, host_response};
use crate::dh::{DhGroup, DhKey};
use crate::hash::{Digest, HashId};
use crate::wire::{self, auth_id, auth_type, ChallengeHdr, NegotiateHdr, ProtocolDesc, ReplyHdr, Success1Hdr, Success2};
use crate::{as_failure, field, put, Error, Secret};

/// The host's secrets (`--dhchap-secret` and, for bidirectional authentication,
/// `--dhchap-ctrl-secret`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostKeys {
    pub secret: Secret,
    pub ctrl: Option<Secret>,
}

/// Write AUTH_Negotiate for transaction `tid`, offering every hash and DH group; its length.
pub fn negotiate(tid: u16, out: &mut [u8]) -> Result<usize, Error> {
    let mut h = NegotiateHdr::zeroed();
    h.auth_type = auth_type::COMMON;
    h.auth_id = auth_id::NEGOTIATE;
    h.t_id.set(tid);
    h.sc_c = wire::SC_C_NONE;
    h.napd = 1;
    let mut d = ProtocolDesc::zeroed();
    d.authid = wire::AUTHID_DHCHAP;
    d.halen = HashId::ALL.len() as u8;
    d.dhlen = DhGroup::ALL.len() as u8;
    for (slot, hid) in d.idlist.iter_mut().zip(HashId::ALL) {
        *slot = hid.id();
    }
    for (slot, g) in d.idlist[wire::IDLIST_DH_OFFSET..].iter_mut().zip(DhGroup::ALL) {
        *slot = g.id();
    }
    let n = put(out, 0, h.as_bytes())?;
    put(out, n, d.as_bytes())
}

/// What the host waits for after sending its Reply.
#[derive(Debug, Clone, Copy)]
pub struct Pending {
    tid: u16,
    hash: HashId,
    group: DhGroup,
    /// The controller's expected response when we asked for bidirectional authentication.
    expect_ctrl: Option<Digest>,
}

impl Pending {
    /// The hash and DH group the controller chose.
    pub fn chosen(&self) -> (HashId, DhGroup) {
        (self.hash, self.group)
    }

    /// Check DH-HMAC-CHAP_Success1 (or the controller's AUTH_Failure1). `Ok(true)` when the
    /// controller proved its secret and the host must send Success2, `Ok(false)` when the
    /// transaction is complete (unidirectional). On `Err`, the host sends AUTH_Failure2 with
    /// the error's explanation unless the controller already refused.
    pub fn success1(&self, msg: &[u8]) -> Result<bool, Error> {
        if let Some(e) = as_failure(msg, auth_id::FAILURE1) {
            return Err(e);
        }
        let (h, rest) = Success1Hdr::read_from_prefix(msg).map_err(|_| Error::Payload("success1 header"))?;
        if h.auth_type != auth_type::DHCHAP || h.auth_id != auth_id::SUCCESS1 || h.t_id.get() != self.tid {
            return Err(Error::UnexpectedMessage { auth_type: h.auth_type, auth_id: h.auth_id });
        }
        if h.hl as usize != self.hash.len() {
            return Err(Error::HashUnusable(h.hl));
        }
        let Some(expect) = self.expect_ctrl else { return Ok(false) };
        if h.rvalid == 0 {
            return Err(Error::Failed);
        }
        let rval = field(rest, 0, self.hash.len(), "success1 rval")?;
        if expect.matches(rval) {
            Ok(true)
        } else {
            Err(Error::Failed)
        }
    }
}

/// Process the controller's Challenge (or AUTH_Failure1) and write the host's Reply to `out`.
/// Returns what to check in Success1 and the Reply's length.
#[allow(clippy::too_many_arguments)]
pub fn reply(
    keys: &HostKeys,
    hostnqn: &str,
    subnqn: &str,
    tid: u16,
    msg: &[u8],
    rng: &mut (impl RngCore + CryptoRng),
    out: &mut [u8],
) -> Result<(Pending, usize), Error> {
    if let Some(e) = as_failure(msg, auth_id::FAILURE1) {
        return Err(e);
    }
    let (c, rest) = ChallengeHdr::read_from_prefix(msg).map_err(|_| Error::Payload("challenge header"))?;
    if c.auth_type != auth_type::DHCHAP || c.auth_id != auth_id::CHALLENGE || c.t_id.get() != tid {
        return Err(Error::UnexpectedMessage { auth_type: c.auth_type, auth_id: c.auth_id });
    }
    let hash = HashId::from_id(c.hashid).ok_or(Error::HashUnusable(c.hashid))?;
    let group = DhGroup::from_id(c.dhgid).ok_or(Error::DhGroupUnusable(c.dhgid))?;
    let hl = hash.len();
    if c.hl as usize != hl {
        return Err(Error::Payload("challenge hl"));
    }
    let dhvlen = c.dhvlen.get() as usize;
    if dhvlen != group.value_len() {
        return Err(Error::Payload("challenge dhvlen"));
    }
    let c1 = field(rest, 0, hl, "challenge cval")?;
    let dhv = field(rest, hl, dhvlen, "challenge dhv")?;

    let (dh, session) = if group == DhGroup::Null {
        (None, None)
    } else {
        let k = DhKey::generate(group, rng)?;
        let s = k.shared_secret(dhv)?;
        (Some(k), Some(s))
    };
    let ch1 = effective_challenge(hash, session.as_deref(), c1);
    let r1 = host_response(hash, &keys.secret.transformed(hostnqn), ch1.as_slice(), c.seqnum.get(), tid, hostnqn, subnqn);

    let mut c2 = [0u8; 64];
    let (s2, expect_ctrl) = match &keys.ctrl {
        Some(ck) => {
            rng.fill_bytes(&mut c2[..hl]);
            let s2 = loop {
                let s = rng.next_u32();
                if s != 0 {
                    break s;
                }
            };
            let ch2 = effective_challenge(hash, session.as_deref(), &c2[..hl]);
            (s2, Some(ctrl_response(hash, &ck.transformed(subnqn), ch2.as_slice(), s2, tid, subnqn, hostnqn)))
        }
        None => (0, None),
    };

    let public: &[u8] = dh.as_ref().map_or(&[], DhKey::public);
    let mut r = ReplyHdr::zeroed();
    r.auth_type = auth_type::DHCHAP;
    r.auth_id = auth_id::REPLY;
    r.t_id.set(tid);
    r.hl = hl as u8;
    r.cvalid = expect_ctrl.is_some() as u8;
    r.dhvlen.set(public.len() as u16);
    r.seqnum.set(s2);
    let n = put(out, 0, r.as_bytes())?;
    let n = put(out, n, r1.as_slice())?;
    let n = put(out, n, &c2[..hl])?;
    let n = put(out, n, public)?;
    Ok((Pending { tid, hash, group, expect_ctrl }, n))
}

/// Write DH-HMAC-CHAP_Success2 for transaction `tid`; its length.
pub fn success2(tid: u16, out: &mut [u8]) -> Result<usize, Error> {
    let mut s = Success2::zeroed();
    s.auth_type = auth_type::DHCHAP;
    s.auth_id = auth_id::SUCCESS2;
    s.t_id.set(tid);
    put(out, 0, s.as_bytes())
}

/// Write AUTH_Failure2 for transaction `tid` with the explanation of `e`; its length.
pub fn failure2(tid: u16, e: &Error, out: &mut [u8]) -> Result<usize, Error> {
    crate::failure(auth_id::FAILURE2, tid, e.explanation(), out)
}
