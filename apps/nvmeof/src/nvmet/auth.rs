//! In-band authentication on the target (DH-HMAC-CHAP, `nvme-auth`): which hosts must
//! authenticate, one transaction per queue that has not yet, and the Authentication Send /
//! Receive commands. As nvmet does, a Connect from such a host succeeds with AUTHREQ.ATR
//! set, and the queue accepts nothing but Authentication Send/Receive until the transaction
//! succeeds (AUTH_REQUIRED otherwise); a failed transaction leaves it refusing everything.

use alloc::string::String;
use alloc::vec::Vec;

use nvme_auth::ctrl::{HostPolicy, Session};
use nvme_auth::wire::{AuthRecvCmd, AuthSendCmd, SECP_NVME, SPSP0, SPSP1};
use nvme_auth::{Rng, SeedableRng};
use zerocopy::FromBytes;

use crate::wire::{Sqe, Status};

/// One host that must authenticate to one subsystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostAuthConfig {
    pub subnqn: String,
    pub hostnqn: String,
    pub policy: HostPolicy,
}

/// A queue's authentication state (in [`super::QueueState`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Gate {
    /// No authentication required, or it succeeded.
    #[default]
    Open,
    /// Waiting for a transaction to succeed: its session slot, the policy index and how many
    /// Authentication Send/Receive have restarted the keep-alive timer so far.
    Pending { slot: u16, policy: u16, steps: u8 },
    /// The transaction failed; the queue refuses every command.
    Failed,
}

/// Authentication commands on a queue that restart its controller's keep-alive timer before the
/// transaction succeeds: a bidirectional transaction is 5 (Negotiate, Challenge, Reply, Success1,
/// Success2), so one retry fits; a host that never finishes cannot keep its controller.
pub const AUTH_KEEPALIVE_STEPS: u8 = 8;

impl Gate {
    /// Whether a command on this queue restarts its controller's keep-alive timer: any command
    /// once authenticated (traffic-based keep-alive); while authenticating only the first
    /// [`AUTH_KEEPALIVE_STEPS`] Authentication Send/Receive, so that a host spending seconds on
    /// FFDHE between steps (Linux under load, large groups) is not expired mid-transaction
    /// (nvmet counts every command); never after a failure.
    pub fn keeps_alive(&mut self, auth_cmd: bool) -> bool {
        match self {
            Gate::Open => true,
            Gate::Pending { steps, .. } if auth_cmd && *steps < AUTH_KEEPALIVE_STEPS => {
                *steps += 1;
                true
            }
            _ => false,
        }
    }
}

/// Counters (never reset).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AuthStats {
    pub required: u64,
    pub succeeded: u64,
    pub failed: u64,
    /// Commands refused with AUTH_REQUIRED.
    pub refused_cmds: u64,
}

/// The target's authentication state.
pub struct Auth {
    hosts: Vec<HostAuthConfig>,
    /// One per queue in `Pending`; bounded by the transport's queue limit.
    sessions: Vec<Option<Session>>,
    rng: Rng,
    seqnum: u32,
    pub stats: AuthStats,
}

impl Auth {
    pub fn new(hosts: Vec<HostAuthConfig>) -> Auth {
        // Reseeded by the appliance from its entropy source (Core::seed_auth); the fixed
        // seed only serves host tests that never call it.
        Auth { hosts, sessions: Vec::new(), rng: Rng::from_seed([0x5A; 32]), seqnum: 0, stats: AuthStats::default() }
    }

    pub fn seed(&mut self, seed: [u8; 32]) {
        self.rng = Rng::from_seed(seed);
        self.seqnum = u32::from_le_bytes([seed[0], seed[1], seed[2], seed[3]]);
    }

    /// The policy index when `hostnqn` must authenticate to `subnqn`.
    pub fn required(&self, subnqn: &str, hostnqn: &str) -> Option<u16> {
        self.hosts.iter().position(|h| h.subnqn == subnqn && h.hostnqn == hostnqn).map(|i| i as u16)
    }

    /// Open a transaction slot for a queue that was just connected with policy `policy`.
    pub fn begin(&mut self, policy: u16) -> Gate {
        self.stats.required += 1;
        let slot = match self.sessions.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.sessions.push(None);
                self.sessions.len() - 1
            }
        };
        self.sessions[slot] = Some(Session::new());
        Gate::Pending { slot: slot as u16, policy, steps: 0 }
    }

    /// The queue is gone: free its slot.
    pub fn end(&mut self, gate: Gate) {
        if let Gate::Pending { slot, .. } = gate {
            if let Some(s) = self.sessions.get_mut(slot as usize) {
                *s = None;
            }
        }
    }

    fn settle(&mut self, gate: &mut Gate, hostnqn: &str) {
        let Gate::Pending { slot, .. } = *gate else { return };
        let Some(Some(s)) = self.sessions.get(slot as usize) else { return };
        if s.authenticated() {
            let (h, g) = s.chosen();
            log::info!("nvmeof: target: host {hostnqn} authenticated ({}, {})", h.name(), g.name());
            self.stats.succeeded += 1;
            self.end(*gate);
            *gate = Gate::Open;
        } else if s.failed() {
            log::warn!("nvmeof: target: host {hostnqn} failed authentication");
            self.stats.failed += 1;
            self.end(*gate);
            *gate = Gate::Failed;
        }
    }

    /// Authentication Send: `data` holds the host's message.
    pub fn send(&mut self, gate: &mut Gate, sqe: &Sqe, data: &[u8], sgl_len: u32, hostnqn: &str, subnqn: &str) -> Status {
        let Ok(cmd) = AuthSendCmd::read_from_bytes(zerocopy::IntoBytes::as_bytes(sqe)) else { return Status::INVALID_FIELD };
        if cmd.secp != SECP_NVME || cmd.spsp0 != SPSP0 || cmd.spsp1 != SPSP1 {
            return Status::INVALID_FIELD;
        }
        let tl = cmd.tl.get() as usize;
        if tl == 0 || tl > sgl_len as usize || tl > data.len() {
            return Status::INVALID_FIELD;
        }
        let Gate::Pending { slot, policy, .. } = *gate else { return Status::CMD_SEQ_ERROR };
        let (Some(Some(session)), Some(cfg)) = (self.sessions.get_mut(slot as usize), self.hosts.get(policy as usize)) else {
            return Status::CMD_SEQ_ERROR;
        };
        self.seqnum = self.seqnum.wrapping_add(1).max(1);
        let st = match session.on_send(&cfg.policy, hostnqn, subnqn, self.seqnum, &data[..tl], &mut self.rng) {
            Ok(()) => Status::SUCCESS,
            Err(_) => Status::INVALID_FIELD,
        };
        self.settle(gate, hostnqn);
        st
    }

    /// Authentication Receive: the controller's next message into `out`; (status, length).
    pub fn receive(&mut self, gate: &mut Gate, sqe: &Sqe, out: &mut [u8], sgl_len: u32, hostnqn: &str) -> (Status, u32) {
        let Ok(cmd) = AuthRecvCmd::read_from_bytes(zerocopy::IntoBytes::as_bytes(sqe)) else { return (Status::INVALID_FIELD, 0) };
        if cmd.secp != SECP_NVME || cmd.spsp0 != SPSP0 || cmd.spsp1 != SPSP1 {
            return (Status::INVALID_FIELD, 0);
        }
        let al = (cmd.al.get() as usize).min(sgl_len as usize).min(out.len());
        let Gate::Pending { slot, .. } = *gate else { return (Status::CMD_SEQ_ERROR, 0) };
        let Some(Some(session)) = self.sessions.get_mut(slot as usize) else { return (Status::CMD_SEQ_ERROR, 0) };
        let r = match session.on_receive(&mut out[..al]) {
            Ok(n) => (Status::SUCCESS, n as u32),
            Err(nvme_auth::Error::Sequence) => (Status::CMD_SEQ_ERROR, 0),
            Err(_) => (Status::INVALID_FIELD, 0),
        };
        self.settle(gate, hostnqn);
        r
    }
}
