//! The initiator's side of in-band authentication: when a Connect response asks for it
//! (AUTHREQ.ATR), run one DH-HMAC-CHAP transaction on that queue with Authentication
//! Send/Receive (`nvme-auth` does the protocol), before the queue carries anything else.

use alloc::vec;

use nvme_auth::host::{self as chap, Pending};
use nvme_auth::wire::{auth_id, AuthRecvCmd, AuthSendCmd, AUTHREQ_ASCR, AUTHREQ_ATR, MAX_MESSAGE, SECP_NVME, SPSP0, SPSP1};
use rdma::GroupVerbs;
use zerocopy::{FromBytes, IntoBytes};

use super::{Data, Host, HostEnv};
use crate::wire::{fctype, Sqe, FABRICS_OPCODE, PSDT_SGL};
use crate::Error;

fn auth_sqe(send: bool, len: u32) -> Sqe {
    let bytes = if send {
        let mut c = AuthSendCmd::zeroed();
        c.opcode = FABRICS_OPCODE;
        c.fctype = fctype::AUTH_SEND;
        c.secp = SECP_NVME;
        c.spsp0 = SPSP0;
        c.spsp1 = SPSP1;
        c.tl.set(len);
        Sqe::read_from_bytes(c.as_bytes()).ok()
    } else {
        let mut c = AuthRecvCmd::zeroed();
        c.opcode = FABRICS_OPCODE;
        c.fctype = fctype::AUTH_RECV;
        c.secp = SECP_NVME;
        c.spsp0 = SPSP0;
        c.spsp1 = SPSP1;
        c.al.set(len);
        Sqe::read_from_bytes(c.as_bytes()).ok()
    };
    let mut sqe = bytes.unwrap_or_else(|| unreachable!("both commands are 64 bytes"));
    sqe.flags = PSDT_SGL;
    sqe
}

impl<V: GroupVerbs> Host<V> {
    /// Act on a Connect response's AUTHREQ bits for queue `qid`.
    pub(super) fn authenticate_if_asked(&mut self, verbs: &mut V, env: &mut impl HostEnv<V>, qid: u16, dw0: u32) -> Result<(), Error<V::Error>> {
        if dw0 & AUTHREQ_ASCR != 0 {
            return Err(Error::Protocol("target requires a secure channel (TLS), not supported"));
        }
        if dw0 & AUTHREQ_ATR == 0 {
            return Ok(());
        }
        let keys = self.cfg.dhchap.clone().ok_or(Error::Protocol("target requires authentication and no dhchap secret is set"))?;
        self.auth_tid = self.auth_tid.wrapping_add(1);
        let tid = self.auth_tid;
        let al = MAX_MESSAGE.min(self.queue_mut(qid).xfer);
        let mut buf = vec![0u8; MAX_MESSAGE];
        let mut rx = vec![0u8; al];
        let subnqn = self.subnqn.clone();
        let hostnqn = self.cfg.hostnqn.clone();

        let n = chap::negotiate(tid, &mut buf).map_err(Error::Auth)?;
        self.auth_send(verbs, env, qid, &buf[..n])?;
        self.auth_recv(verbs, env, qid, &mut rx)?;
        let (pending, n): (Pending, usize) = match chap::reply(&keys, &hostnqn, &subnqn, tid, &rx, &mut self.auth_rng, &mut buf) {
            Ok(x) => x,
            Err(e) => return self.auth_fail(verbs, env, qid, tid, e),
        };
        self.auth_send(verbs, env, qid, &buf[..n])?;
        self.auth_recv(verbs, env, qid, &mut rx)?;
        match pending.success1(&rx) {
            Ok(true) => {
                let n = chap::success2(tid, &mut buf).map_err(Error::Auth)?;
                self.auth_send(verbs, env, qid, &buf[..n])?;
            }
            Ok(false) => {}
            Err(e) => return self.auth_fail(verbs, env, qid, tid, e),
        }
        if qid == 0 {
            let (h, g) = pending.chosen();
            log::info!("nvmeof: host: authenticated to {subnqn} ({}, {})", h.name(), g.name());
        }
        Ok(())
    }

    /// Tell the controller with AUTH_Failure2 (unless it refused first) and fail the connect.
    fn auth_fail(&mut self, verbs: &mut V, env: &mut impl HostEnv<V>, qid: u16, tid: u16, e: nvme_auth::Error) -> Result<(), Error<V::Error>> {
        log::warn!("nvmeof: host: qid {qid} authentication failed: {e:?}");
        if !matches!(e, nvme_auth::Error::Refused { .. }) {
            let mut f = [0u8; 16];
            if let Ok(n) = nvme_auth::failure(auth_id::FAILURE2, tid, e.explanation(), &mut f) {
                let _ = self.auth_send(verbs, env, qid, &f[..n]);
            }
        }
        Err(Error::Auth(e))
    }

    fn auth_send(&mut self, verbs: &mut V, env: &mut impl HostEnv<V>, qid: u16, msg: &[u8]) -> Result<(), Error<V::Error>> {
        self.sync(verbs, env, qid, auth_sqe(true, msg.len() as u32), Some(Data::Out(msg))).map(|_| ())
    }

    fn auth_recv(&mut self, verbs: &mut V, env: &mut impl HostEnv<V>, qid: u16, out: &mut [u8]) -> Result<(), Error<V::Error>> {
        out.fill(0);
        self.sync(verbs, env, qid, auth_sqe(false, out.len() as u32), Some(Data::In(out))).map(|_| ())
    }
}
