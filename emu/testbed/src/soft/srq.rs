//! Shared receive queues of the soft device ([`SrqVerbs`]): one pool of receive WRs that its
//! RC QPs take from in posting order; a request that finds it empty waits (the soft RNR) and
//! runs once a receive is posted; the limit is reported once per arming, as ConnectX raises
//! SRQ_RQ_LIMIT.

use super::*;

pub(super) struct SoftSrq {
    wrs: VecDeque<RecvWr>,
    cap: u32,
    /// Armed limit (0: not armed) and whether it was reached since last asked.
    limit: u32,
    limit_hit: bool,
}

impl SoftState {
    /// Whether QP `q` has a receive WR to take (its SRQ's or its own).
    pub(super) fn has_recv(&self, q: u32) -> bool {
        match self.qps.get(&q) {
            None => false,
            Some(qp) => match qp.srq {
                Some(s) => self.srqs.get(&s).is_some_and(|s| !s.wrs.is_empty()),
                None => !qp.rq.is_empty(),
            },
        }
    }

    /// The next receive WR of QP `q`; taking one from an armed SRQ below its limit reports it.
    pub(super) fn take_recv(&mut self, q: u32) -> Option<RecvWr> {
        let qp = self.qps.get_mut(&q)?;
        let Some(n) = qp.srq else { return qp.rq.pop_front() };
        let s = self.srqs.get_mut(&n)?;
        let wr = s.wrs.pop_front()?;
        if s.limit > 0 && (s.wrs.len() as u32) < s.limit {
            s.limit = 0;
            s.limit_hit = true;
        }
        Some(wr)
    }

    /// Post a receive to SRQ `srq` ([`DataPath::post_srq_recv`]).
    pub(super) fn srq_post(&mut self, srq: Srqn, wr: &RecvWr) -> Result<(), SoftError> {
        let s = self.srqs.get_mut(&srq.0).ok_or(SoftError::InvalidArgument)?;
        if s.wrs.len() as u32 >= s.cap {
            return Err(SoftError::InvalidArgument);
        }
        s.wrs.push_back(*wr);
        // Requests parked for want of a receive on any QP of this SRQ run now (slow: a scan
        // of the QPs, as the soft device is a test double, not a data path).
        let waiting: Vec<u32> = self.qps.iter().filter(|(_, q)| q.srq == Some(srq.0) && !q.parked.is_empty()).map(|(n, _)| *n).collect();
        for q in waiting {
            self.unpark(q);
        }
        Ok(())
    }
}

impl SrqVerbs for SoftState {
    fn create_srq(&mut self, max_wr: u32) -> Result<Srqn, SoftError> {
        if max_wr == 0 {
            return Err(SoftError::InvalidArgument);
        }
        let n = self.next_srqn;
        self.next_srqn = self.next_srqn.wrapping_add(1).max(1);
        self.srqs.insert(n, SoftSrq { wrs: VecDeque::new(), cap: max_wr, limit: 0, limit_hit: false });
        Ok(Srqn(n))
    }
    fn destroy_srq(&mut self, srq: Srqn) -> Result<(), SoftError> {
        if !self.srqs.contains_key(&srq.0) {
            return Err(SoftError::InvalidArgument);
        }
        if self.qps.values().any(|q| q.srq == Some(srq.0)) {
            return Err(SoftError::Busy);
        }
        self.srqs.remove(&srq.0);
        Ok(())
    }
    fn create_rc_qp_srq(&mut self, send_cq: Cqn, recv_cq: Cqn, sq: u32, srq: Srqn) -> Result<Qpn, SoftError> {
        if !self.srqs.contains_key(&srq.0) {
            return Err(SoftError::InvalidArgument);
        }
        let q = self.create_rc_qp(send_cq, recv_cq, sq, 1)?;
        if let Some(qp) = self.qps.get_mut(&q.0) {
            qp.srq = Some(srq.0);
        }
        Ok(q)
    }
    fn arm_srq(&mut self, srq: Srqn, limit: u32) -> Result<(), SoftError> {
        let s = self.srqs.get_mut(&srq.0).ok_or(SoftError::InvalidArgument)?;
        if limit == 0 || limit > s.cap {
            return Err(SoftError::InvalidArgument);
        }
        s.limit = limit;
        Ok(())
    }
    fn srq_limit_reached(&mut self, srq: Srqn) -> bool {
        self.srqs.get_mut(&srq.0).is_some_and(|s| core::mem::take(&mut s.limit_hit))
    }
}
