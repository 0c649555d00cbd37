//! Shared receive queues: one pool of receive work requests that several QPs take from, in
//! posting order (IBTA vol. 1 10.2.9; rxe_srq.c). A QP attached to an SRQ has no receive queue
//! of its own; with the SRQ empty an RC responder answers RNR NAK as for an empty RQ, and a UD
//! QP drops the datagram. The SRQ limit (its arming and event) is the adapter's business: the
//! engine counts what was taken so the adapter can tell when the pool drops below it.

use std::collections::VecDeque;

use super::qp::{Ctx, Qp};
use super::Engine;
use crate::types::*;

/// One SRQ: its posted receive work requests.
#[derive(Debug, Default)]
pub(super) struct Srq {
    wqes: VecDeque<RecvWr>,
    taken: u64,
}

/// Snapshot of an SRQ for the adapter model and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqInfo {
    /// Receive work requests posted and not yet taken by a QP.
    pub posted: usize,
    /// Work requests taken by QPs since creation.
    pub taken: u64,
}

/// The next receive work request for `qp`: from its SRQ when it has one, else its own RQ.
pub(super) fn take_recv(qp: &mut Qp, ctx: &mut Ctx<'_>) -> Option<RecvWr> {
    match qp.srq {
        None => qp.rq.pop_front(),
        Some(n) => {
            let s = ctx.srqs.get_mut(&n.0)?;
            let wr = s.wqes.pop_front()?;
            s.taken += 1;
            Some(wr)
        }
    }
}

/// Whether [`take_recv`] would find a work request.
pub(super) fn has_recv(qp: &Qp, ctx: &Ctx<'_>) -> bool {
    match qp.srq {
        None => !qp.rq.is_empty(),
        Some(n) => ctx.srqs.get(&n.0).is_some_and(|s| !s.wqes.is_empty()),
    }
}

impl Engine {
    /// Create an empty SRQ.
    pub fn create_srq(&mut self, n: Srqn) -> Result<(), EngineError> {
        if self.sh.srqs.contains_key(&n.0) {
            return Err(EngineError::SrqExists(n));
        }
        self.sh.srqs.insert(n.0, Srq::default());
        Ok(())
    }

    /// Destroy an SRQ; refused while a QP is attached to it. Posted work requests are dropped.
    pub fn destroy_srq(&mut self, n: Srqn) -> Result<(), EngineError> {
        if !self.sh.srqs.contains_key(&n.0) {
            return Err(EngineError::NoSuchSrq(n));
        }
        if self.qps.values().any(|q| q.srq == Some(n)) {
            return Err(EngineError::BadOp);
        }
        self.sh.srqs.remove(&n.0);
        Ok(())
    }

    /// Add a receive work request to an SRQ.
    pub fn post_srq_recv(&mut self, n: Srqn, wr: RecvWr) -> Result<(), EngineError> {
        let s = self.sh.srqs.get_mut(&n.0).ok_or(EngineError::NoSuchSrq(n))?;
        s.wqes.push_back(wr);
        Ok(())
    }

    pub fn query_srq(&self, n: Srqn) -> Option<SrqInfo> {
        self.sh.srqs.get(&n.0).map(|s| SrqInfo { posted: s.wqes.len(), taken: s.taken })
    }

    /// Make a QP in RESET take its receives from SRQ `n` (None: its own RQ again).
    pub fn attach_srq(&mut self, qpn: Qpn, n: Option<Srqn>) -> Result<(), EngineError> {
        if let Some(n) = n {
            if !self.sh.srqs.contains_key(&n.0) {
                return Err(EngineError::NoSuchSrq(n));
            }
        }
        let qp = self.qps.get_mut(&qpn.0).ok_or(EngineError::NoSuchQp(qpn))?;
        if qp.state != QpState::Reset {
            return Err(EngineError::BadState(qp.state));
        }
        qp.srq = n;
        Ok(())
    }
}
