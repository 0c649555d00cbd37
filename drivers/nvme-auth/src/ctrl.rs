//! The controller (target) side of DH-HMAC-CHAP, one [`Session`] per queue: Authentication
//! Send delivers the host's messages ([`Session::on_send`]), Authentication Receive collects
//! the controller's ([`Session::on_receive`]). A protocol error does not fail the Send; as in
//! nvmet, the next Receive returns AUTH_Failure1 and the queue stays unauthenticated.

use alloc::vec::Vec;
use rand_core::{CryptoRng, RngCore};
use zerocopy::{FromBytes, IntoBytes};

use crate::chap::{ctrl_response, effective_challenge, host_response};
use crate::dh::{DhGroup, DhKey};
use crate::hash::{Digest, HashId};
use crate::wire::{self, auth_id, auth_type, ChallengeHdr, NegotiateHdr, ProtocolDesc, ReplyHdr, Success1Hdr, Success2};
use crate::{as_failure, field, put, Error, Secret};

/// What the controller requires of one host (nvmet's `dhchap_key`, `dhchap_ctrl_key`,
/// `dhchap_hash`, `dhchap_dhgroup` host attributes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPolicy {
    pub key: Secret,
    pub ctrl_key: Option<Secret>,
    pub hash: HashId,
    pub dhgroup: DhGroup,
}

impl HostPolicy {
    /// nvmet's defaults: HMAC-SHA-256, null DH group.
    pub fn new(key: Secret, ctrl_key: Option<Secret>) -> HostPolicy {
        HostPolicy { key, ctrl_key, hash: HashId::Sha256, dhgroup: DhGroup::Null }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Expecting AUTH_Negotiate.
    Negotiate,
    /// The Challenge is ready for the next Receive.
    Challenge,
    /// Expecting the Reply.
    Reply,
    /// Success1 is ready for the next Receive.
    Success1,
    /// Expecting Success2 (bidirectional only).
    Success2,
    /// AUTH_Failure1 is ready for the next Receive.
    Failure1,
    Authenticated,
    Failed,
}

/// One queue's authentication transaction.
pub struct Session {
    step: Step,
    tid: u16,
    hash: HashId,
    group: DhGroup,
    c1: Digest,
    s1: u32,
    dh: Option<DhKey>,
    /// Our response to the host's challenge, when it asked for one.
    r2: Option<Digest>,
    explanation: u8,
}

impl core::fmt::Debug for Session {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Session({:?}, tid {})", self.step, self.tid)
    }
}

impl Default for Session {
    fn default() -> Self {
        Session::new()
    }
}

impl Session {
    pub fn new() -> Session {
        Session {
            step: Step::Negotiate,
            tid: 0,
            hash: HashId::Sha256,
            group: DhGroup::Null,
            c1: Digest::from_slice(&[]).unwrap_or_else(|| unreachable!()),
            s1: 0,
            dh: None,
            r2: None,
            explanation: 0,
        }
    }

    /// The queue may carry commands other than Authentication Send/Receive.
    pub fn authenticated(&self) -> bool {
        self.step == Step::Authenticated
    }
    /// The transaction failed (Failure1 delivered, or the host sent Failure2).
    pub fn failed(&self) -> bool {
        self.step == Step::Failed
    }
    /// The negotiated hash and group (meaningful once a Negotiate was accepted).
    pub fn chosen(&self) -> (HashId, DhGroup) {
        (self.hash, self.group)
    }

    fn fail(&mut self, e: Error) {
        log::warn!("nvme-auth: ctrl: transaction {} failed: {e:?}", self.tid);
        self.explanation = e.explanation();
        self.dh = None;
        self.step = Step::Failure1;
    }

    /// A message from Authentication Send. `seqnum` is the controller's next sequence
    /// number (non-zero, increasing across transactions). Errors in the message become a
    /// pending AUTH_Failure1; `Err` is returned only when there is no transaction to fail
    /// (the caller answers the command with an error status then).
    pub fn on_send(
        &mut self,
        policy: &HostPolicy,
        hostnqn: &str,
        subnqn: &str,
        seqnum: u32,
        msg: &[u8],
        rng: &mut (impl RngCore + CryptoRng),
    ) -> Result<(), Error> {
        let (Some(&typ), Some(&id)) = (msg.first(), msg.get(1)) else { return Err(Error::Payload("message header")) };
        let r = match (typ, id) {
            (auth_type::COMMON, auth_id::NEGOTIATE) => self.negotiate(policy, seqnum, msg, rng),
            (auth_type::DHCHAP, auth_id::REPLY) if self.step == Step::Reply => self.reply(policy, hostnqn, subnqn, msg),
            (auth_type::DHCHAP, auth_id::SUCCESS2) if self.step == Step::Success2 => {
                match Success2::read_from_prefix(msg) {
                    Ok((s, _)) if s.t_id.get() == self.tid => {
                        self.step = Step::Authenticated;
                        Ok(())
                    }
                    _ => Err(Error::UnexpectedMessage { auth_type: typ, auth_id: id }),
                }
            }
            (auth_type::COMMON, auth_id::FAILURE2) => {
                let e = as_failure(msg, auth_id::FAILURE2).unwrap_or(Error::Failed);
                log::warn!("nvme-auth: ctrl: host refused controller authentication: {e:?}");
                self.dh = None;
                self.step = Step::Failed;
                return Ok(());
            }
            _ => Err(Error::UnexpectedMessage { auth_type: typ, auth_id: id }),
        };
        if let Err(e) = r {
            self.fail(e);
        }
        Ok(())
    }

    fn negotiate(&mut self, policy: &HostPolicy, seqnum: u32, msg: &[u8], rng: &mut (impl RngCore + CryptoRng)) -> Result<(), Error> {
        *self = Session::new();
        let (h, rest) = NegotiateHdr::read_from_prefix(msg).map_err(|_| Error::Payload("negotiate header"))?;
        self.tid = h.t_id.get();
        if h.sc_c != wire::SC_C_NONE {
            return Err(Error::ConcatMismatch(h.sc_c));
        }
        if h.napd == 0 {
            return Err(Error::Payload("negotiate napd"));
        }
        let descs = field(rest, 0, h.napd as usize * ProtocolDesc::SIZE, "negotiate descriptors")?;
        let d = descs
            .chunks_exact(ProtocolDesc::SIZE)
            .filter_map(|c| ProtocolDesc::read_from_bytes(c).ok())
            .find(|d| d.authid == wire::AUTHID_DHCHAP)
            .ok_or(Error::Payload("no DH-HMAC-CHAP descriptor"))?;
        let (halen, dhlen) = (d.halen as usize, d.dhlen as usize);
        if halen > wire::IDLIST_DH_OFFSET || dhlen > d.idlist.len() - wire::IDLIST_DH_OFFSET {
            return Err(Error::Payload("negotiate halen/dhlen"));
        }
        if !d.idlist[..halen].contains(&policy.hash.id()) {
            return Err(Error::HashUnusable(policy.hash.id()));
        }
        let dh_ids = &d.idlist[wire::IDLIST_DH_OFFSET..wire::IDLIST_DH_OFFSET + dhlen];
        if !dh_ids.contains(&policy.dhgroup.id()) {
            return Err(Error::DhGroupUnusable(policy.dhgroup.id()));
        }
        self.hash = policy.hash;
        self.group = policy.dhgroup;
        let mut c1 = [0u8; 64];
        rng.fill_bytes(&mut c1[..self.hash.len()]);
        self.c1 = Digest::from_slice(&c1[..self.hash.len()]).ok_or(Error::Sequence)?;
        self.s1 = seqnum;
        self.dh = match self.group {
            DhGroup::Null => None,
            g => Some(DhKey::generate(g, rng)?),
        };
        self.step = Step::Challenge;
        Ok(())
    }

    fn reply(&mut self, policy: &HostPolicy, hostnqn: &str, subnqn: &str, msg: &[u8]) -> Result<(), Error> {
        let (r, rest) = ReplyHdr::read_from_prefix(msg).map_err(|_| Error::Payload("reply header"))?;
        if r.t_id.get() != self.tid {
            return Err(Error::UnexpectedMessage { auth_type: r.auth_type, auth_id: r.auth_id });
        }
        let hl = self.hash.len();
        if r.hl as usize != hl {
            return Err(Error::Payload("reply hl"));
        }
        let dhvlen = r.dhvlen.get() as usize;
        if dhvlen != self.group.value_len() {
            return Err(Error::Payload("reply dhvlen"));
        }
        let rval = field(rest, 0, hl, "reply rval")?;
        let c2 = field(rest, hl, hl, "reply cval")?;
        let dhv = field(rest, 2 * hl, dhvlen, "reply dhv")?;
        let session: Option<Vec<u8>> = match &self.dh {
            Some(k) => Some(k.shared_secret(dhv)?),
            None => None,
        };
        self.dh = None;
        let ch1 = effective_challenge(self.hash, session.as_deref(), self.c1.as_slice());
        let want = host_response(self.hash, &policy.key.transformed(hostnqn), ch1.as_slice(), self.s1, self.tid, hostnqn, subnqn);
        if !want.matches(rval) {
            return Err(Error::Failed);
        }
        self.r2 = if r.cvalid != 0 {
            // The host wants us to prove our secret; without one we cannot.
            let ck = policy.ctrl_key.as_ref().ok_or(Error::Failed)?;
            let ch2 = effective_challenge(self.hash, session.as_deref(), c2);
            Some(ctrl_response(self.hash, &ck.transformed(subnqn), ch2.as_slice(), r.seqnum.get(), self.tid, subnqn, hostnqn))
        } else {
            None
        };
        self.step = Step::Success1;
        Ok(())
    }

    /// The controller's next message for Authentication Receive, written to `out`; its length.
    /// `Err(Sequence)` when there is nothing to send at this step.
    pub fn on_receive(&mut self, out: &mut [u8]) -> Result<usize, Error> {
        match self.step {
            Step::Challenge => {
                let public: &[u8] = self.dh.as_ref().map_or(&[], DhKey::public);
                let mut c = ChallengeHdr::zeroed();
                c.auth_type = auth_type::DHCHAP;
                c.auth_id = auth_id::CHALLENGE;
                c.t_id.set(self.tid);
                c.hl = self.hash.len() as u8;
                c.hashid = self.hash.id();
                c.dhgid = self.group.id();
                c.dhvlen.set(public.len() as u16);
                c.seqnum.set(self.s1);
                let n = put(out, 0, c.as_bytes())?;
                let n = put(out, n, self.c1.as_slice())?;
                let n = put(out, n, public)?;
                self.step = Step::Reply;
                Ok(n)
            }
            Step::Success1 => {
                let mut s = Success1Hdr::zeroed();
                s.auth_type = auth_type::DHCHAP;
                s.auth_id = auth_id::SUCCESS1;
                s.t_id.set(self.tid);
                s.hl = self.hash.len() as u8;
                s.rvalid = self.r2.is_some() as u8;
                let mut n = put(out, 0, s.as_bytes())?;
                if let Some(r2) = &self.r2 {
                    n = put(out, n, r2.as_slice())?;
                }
                self.step = if self.r2.is_some() { Step::Success2 } else { Step::Authenticated };
                Ok(n)
            }
            Step::Failure1 => {
                let n = crate::failure(auth_id::FAILURE1, self.tid, self.explanation, out)?;
                self.step = Step::Failed;
                Ok(n)
            }
            _ => Err(Error::Sequence),
        }
    }
}
