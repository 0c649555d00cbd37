//! Cleaning a CQ of a destroyed QP's completions (what Linux mlx5_ib does at destroy with
//! `__mlx5_ib_cq_clean`): once DESTROY_QP has returned the adapter writes no more CQEs for the
//! QP, so the driver takes the ones still waiting in the QP's CQs out of the ring (later CQEs
//! move back over them, each keeping the owner bit of the slot it lands in) and advances the
//! consumer index. A QPN the adapter hands out again can then never receive an old QP's
//! completion. A receive that the QP had taken from an SRQ is posted to the SRQ again with the
//! same `wr_id` and buffer, so the SRQ's owner neither loses the buffer nor sees a capsule of a
//! connection that is gone; the QP's send and own-RQ completions are dropped (the QP's owner
//! released that work with the QP). Slow path (destroy only); counted in `Stats::cqes_cleaned`.

use super::*;
use mlx5_ifc::cqe_op;

impl<H: Hal, M: Mmio> Mlx5<H, M> {
    /// Take QP `qpn`'s CQEs out of CQ `cqn` (see the module doc). Nothing while the device is
    /// failed or the CQ broken: their completions are the flush path's.
    pub(crate) fn clean_cq(&mut self, cqn: Cqn, qpn: Qpn, srq: Option<SrqId>) {
        let Ok(ci_idx) = self.cq_index(cqn) else { return };
        if self.failed.is_some() || self.cqs[ci_idx].broken {
            return;
        }
        let s = srq.and_then(|s| self.srqs.get_mut(s.0 as usize)).and_then(|s| s.as_mut());
        let (freed, bad) = clean_ring(&mut self.cqs[ci_idx], qpn, srq.is_some(), s);
        self.stats.cqes_cleaned += freed;
        self.stats.bad_cqes += bad;
    }
}

/// Take QP `qpn`'s CQEs out of `c`; with `on_srq` its receives go back to `srq`. Returns the
/// CQEs taken out and the receives `srq` did not know (counted as bad CQEs).
pub(crate) fn clean_ring<D: DmaRegion>(c: &mut Cq<D>, qpn: Qpn, on_srq: bool, srq: Option<&mut Srq<D>>) -> (u64, u64) {
    let (r, ci) = (c.ring, c.ring.ci());
    let own = cqe64::op_own.byte();
    let at = |i: u32| r.offset(i);
    // The CQEs software owns now: [ci, pi).
    let mut pi = ci;
    while pi.wrapping_sub(ci) < r.size() && r.sw_owned(&c.buf, pi) {
        pi = pi.wrapping_add(1);
    }
    core::sync::atomic::fence(core::sync::atomic::Ordering::Acquire);
    // Newest first: a kept CQE moves `freed` slots on (towards the producer).
    let mut freed = 0u32;
    let mut recycle: Vec<u16> = Vec::new();
    let mut i = pi;
    while i != ci {
        i = i.wrapping_sub(1);
        let mut e = [0u8; 64];
        c.buf.read(at(i), &mut e);
        if get(&e, cqe64::qpn) as u32 == qpn.0 {
            freed += 1;
            let op = get(&e, cqe64::opcode) as u8;
            if on_srq && !matches!(op, cqe_op::REQ | cqe_op::REQ_ERR) {
                recycle.push(get(&e, cqe64::wqe_counter) as u16);
            }
        } else if freed > 0 {
            let dst = i.wrapping_add(freed);
            let dst_owner = c.buf.read_u8(at(dst) + own) & 1;
            e[own] = (e[own] & !1) | dst_owner;
            c.buf.write(at(dst), &e);
        }
    }
    if freed == 0 {
        return (0, 0);
    }
    c.ring.consume(&c.dbr, freed);
    let mut bad = 0;
    if let Some(s) = srq {
        // Oldest first, as the adapter consumed them.
        for &counter in recycle.iter().rev() {
            if !s.repost(counter) {
                bad += 1;
            }
        }
    }
    (u64::from(freed), bad)
}
