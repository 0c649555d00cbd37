//! The control part of queue groups ([`crate::QueueGroup`]): creating one (its UAR page, CQ and
//! SRQ by firmware commands), creating, connecting and destroying QPs in it, the device events
//! that concern it, and what a device failure means for it. The device keeps a record of each
//! group's objects (not their rings), so events find their group, teardown destroys what the
//! app did not, and recovery counts what it forgot.

use super::*;
use crate::group::{GroupHandle, GroupQp, GroupSignals, GroupStats, QueueGroup};
use alloc::sync::Arc;

/// What the device remembers of a group: its objects on the adapter and the events for it.
pub(crate) struct GroupRecord {
    uar: u32,
    cqn: Cqn,
    rmpn: u32,
    qpns: Vec<Qpn>,
    /// The device generation the group was made in.
    generation: u32,
    /// Where the device publishes a failure and the events for the group's CQ and SRQ (the
    /// group holds the same signals and reads them on its own).
    signals: Arc<GroupSignals>,
}

impl<H: Hal, M: Mmio + Clone> Mlx5<H, M> {
    /// A queue group: a UAR page of its own (ALLOC_UAR), a CQ of 2^`log_cq` CQEs ringing
    /// through it, and an SRQ of 2^`log_srq` WQEs (2^`log_srq` - 1 receives). On failure what
    /// was made is released.
    pub fn create_group(&mut self, log_cq: u8, log_srq: u8) -> Result<QueueGroup<H::Dma, M>, Error> {
        self.alive()?;
        let uar = self.alloc_uar_page()?;
        let cq = match self.new_cq(log_cq, uar) {
            Ok(c) => c,
            Err(e) => {
                let _ = self.dealloc_uar_page(uar);
                return Err(e);
            }
        };
        let srq = match self.new_srq(log_srq, 0) {
            Ok(s) => s,
            Err(e) => {
                let _ = self.simple(op::DESTROY_CQ, 0, destroy_cq_in::LAYOUT.size, &[(destroy_cq_in::cqn, cq.cqn.0 as u64)]);
                let _ = self.dealloc_uar_page(uar);
                return Err(e);
            }
        };
        let signals = Arc::new(GroupSignals::default());
        let rec = GroupRecord { uar, cqn: cq.cqn, rmpn: srq.rmpn, qpns: Vec::new(), generation: self.generation, signals: signals.clone() };
        let id = match self.groups.iter().position(|g| g.is_none()) {
            Some(i) => {
                self.groups[i] = Some(rec);
                i
            }
            None => {
                self.groups.push(Some(rec));
                self.groups.len() - 1
            }
        };
        Ok(QueueGroup {
            id,
            generation: self.generation,
            uar,
            bar: self.bar.clone(),
            cq,
            srq,
            qps: Vec::new(),
            qp_pos: crate::objindex::ObjIndex::new(),
            failed: false,
            stats: Default::default(),
            signals,
            seen: 0,
        })
    }
}

impl<H: Hal, M: Mmio> Mlx5<H, M> {
    /// `Err(DeviceFailed)` unless a group of `generation` was made by the device as it is now
    /// (not failed, not reset since).
    fn current(&self, generation: u32) -> Result<(), Error> {
        self.alive()?;
        if generation != self.generation {
            return Err(Error::DeviceFailed);
        }
        Ok(())
    }

    /// An RC QP in RESET in group `g`: sends and receives complete to the group's CQ, receives
    /// come from its SRQ, doorbells go through its UAR page; `log_sq`: 2^log_sq WQEBBs.
    /// ([`Mlx5::make_group_qp`] then [`QueueGroup::attach_qp`], for an owner that holds the
    /// group.)
    pub fn create_group_qp(&mut self, g: &mut QueueGroup<H::Dma, M>, log_sq: u8) -> Result<Qpn, Error> {
        let q = self.make_group_qp(&g.handle(), log_sq)?;
        match g.attach_qp(q) {
            Ok(qpn) => Ok(qpn),
            Err((e, q)) => {
                let _ = self.destroy_made_qp(q);
                Err(e)
            }
        }
    }

    /// An RC QP in RESET for the group `h` names, not in it yet (CREATE_QP on the group's CQ,
    /// SRQ and UAR page; the group may be polled elsewhere meanwhile): connect it
    /// ([`Mlx5::connect_made_qp`]) and hand it to the group ([`QueueGroup::attach_qp`]), or
    /// destroy it ([`Mlx5::destroy_made_qp`]).
    pub fn make_group_qp(&mut self, h: &GroupHandle, log_sq: u8) -> Result<GroupQp<H::Dma>, Error> {
        self.current(h.generation)?;
        let qp = self.new_qp(QpKind::Rc, (h.cqn, h.cqn), log_sq, 0, 0, Some((SrqId(h.rmpn), h.rmpn)), h.uar)?;
        if let Some(r) = self.record_of(h.id, h.generation) {
            r.qpns.push(qp.qpn);
        }
        Ok(GroupQp { group: (h.id, h.generation), qp })
    }

    /// The device's record of group slot `id` made in `generation` (none once recovery forgot it).
    fn record_of(&mut self, id: usize, generation: u32) -> Option<&mut GroupRecord> {
        self.groups.get_mut(id).and_then(|r| r.as_mut()).filter(|r| r.generation == generation)
    }

    /// The device's record of group `g`.
    fn record(&mut self, g: &QueueGroup<H::Dma, M>) -> Option<&mut GroupRecord> {
        self.record_of(g.id, g.generation)
    }

    fn group_qp(g: &QueueGroup<H::Dma, M>, qpn: Qpn) -> Result<usize, Error> {
        g.index(qpn).ok_or(Error::NoSuchObject { kind: "QP", id: qpn.0 })
    }

    /// RESET → INIT → RTR → RTS for `qp` (as [`Mlx5::connect_rc`]).
    fn connect_qp(&mut self, qp: &mut Qp<H::Dma>, a: &RcConnectAttrs) -> Result<(), Error> {
        let c = qp.ctl();
        self.rst2init(c, a.access)?;
        qp.state = QpState::Init;
        self.init2rtr(c, a)?;
        qp.state = QpState::Rtr;
        self.rtr2rts(c, a)?;
        qp.state = QpState::Rts;
        Ok(())
    }

    /// RESET → INIT → RTR → RTS for QP `qpn` of group `g` (as [`Mlx5::connect_rc`]).
    pub fn connect_group_qp(&mut self, g: &mut QueueGroup<H::Dma, M>, qpn: Qpn, a: &RcConnectAttrs) -> Result<(), Error> {
        self.current(g.generation)?;
        let i = Self::group_qp(g, qpn)?;
        self.connect_qp(&mut g.qps[i], a)
    }

    /// RESET → INIT → RTR → RTS for a QP made for a group and not in it yet: the peer may send
    /// from RTR on, so the QP must reach its group before the peer learns its number.
    pub fn connect_made_qp(&mut self, q: &mut GroupQp<H::Dma>, a: &RcConnectAttrs) -> Result<(), Error> {
        self.current(q.group.1)?;
        self.connect_qp(&mut q.qp, a)
    }

    /// QP `qpn` of group `g` to ERROR (its outstanding work completes with flush errors).
    pub fn group_qp_to_error(&mut self, g: &mut QueueGroup<H::Dma, M>, qpn: Qpn) -> Result<(), Error> {
        let i = Self::group_qp(g, qpn)?;
        if g.generation == self.generation {
            self.qp_2err(qpn)?;
        }
        g.qps[i].state = QpState::Error;
        Ok(())
    }

    /// A made QP not in its group (parked with the device) to ERROR.
    pub fn made_qp_to_error(&mut self, q: &mut GroupQp<H::Dma>) -> Result<(), Error> {
        self.current(q.group.1)?;
        self.qp_2err(q.qp.qpn)?;
        q.qp.state = QpState::Error;
        Ok(())
    }

    /// QP `qpn` of a group (held by the group, maybe on another thread) to ERROR by its number,
    /// as a CM does when the peer disconnects: its outstanding work flushes to the group's CQ,
    /// where the group finds it.
    pub fn handed_qp_to_error(&mut self, qpn: Qpn) -> Result<(), Error> {
        self.alive()?;
        let generation = self.generation;
        if !self.groups.iter().flatten().any(|r| r.generation == generation && r.qpns.contains(&qpn)) {
            return Err(Error::NoSuchObject { kind: "QP", id: qpn.0 });
        }
        self.qp_2err(qpn)
    }

    fn qp_2err(&mut self, qpn: Qpn) -> Result<(), Error> {
        self.simple(op::QP_2ERR, 0, qp_2err_in::LAYOUT.size, &[(qp_2err_in::qpn, qpn.0 as u64)])
    }

    /// The adapter's part of destroying a group QP: ERROR first when `to_error` (it takes from
    /// the SRQ), then DESTROY_QP, and the device forgets it. Nothing on the adapter for a group
    /// of an older device generation (the reset dropped it).
    fn unmake_group_qp(&mut self, (id, generation): (usize, u32), qpn: Qpn, to_error: bool) -> Result<(), Error> {
        if generation == self.generation {
            if to_error {
                self.qp_2err(qpn)?;
            }
            self.simple(op::DESTROY_QP, 0, destroy_qp_in::LAYOUT.size, &[(destroy_qp_in::qpn, qpn.0 as u64)])?;
        }
        if let Some(r) = self.record_of(id, generation) {
            r.qpns.retain(|&q| q != qpn);
        }
        Ok(())
    }

    /// Destroy QP `qpn` of group `g`: moved to ERROR first (it takes from the SRQ), then
    /// DESTROY_QP, then the group lets it go ([`QueueGroup::detach_qp`]: its CQEs still in the
    /// group's CQ are taken out and the receives they had taken go back to the group's SRQ). A
    /// group of an older device generation just forgets the QP (the reset dropped it on the
    /// adapter).
    pub fn destroy_group_qp(&mut self, g: &mut QueueGroup<H::Dma, M>, qpn: Qpn) -> Result<(), Error> {
        let i = Self::group_qp(g, qpn)?;
        let to_error = !matches!(g.qps[i].state, QpState::Error | QpState::Reset);
        self.unmake_group_qp((g.id, g.generation), qpn, to_error)?;
        if g.generation != self.generation || self.failed.is_some() {
            // No CQ cleaning on a failed or reset device (its CQ is flushed instead).
            g.qps.remove(i);
            g.reindex();
            return Ok(());
        }
        g.detach_qp(qpn).map(drop)
    }

    /// The adapter's part of destroying QP `qpn` of the group `h` names while the group holds
    /// it (maybe on another thread): QP to ERROR, DESTROY_QP. Then the group must let it go
    /// ([`QueueGroup::detach_qp`], which cleans its CQ of the QP's CQEs). The group's owner
    /// must have stopped posting to the QP first.
    pub fn destroy_handed_qp(&mut self, h: &GroupHandle, qpn: Qpn) -> Result<(), Error> {
        self.unmake_group_qp((h.id, h.generation), qpn, true)
    }

    /// Destroy a QP made for a group and never attached (or detached before being destroyed):
    /// no CQE of it can be in the group's CQ unless it was connected to a peer that sent.
    pub fn destroy_made_qp(&mut self, q: GroupQp<H::Dma>) -> Result<(), Error> {
        let to_error = !matches!(q.qp.state, QpState::Error | QpState::Reset);
        self.unmake_group_qp(q.group, q.qp.qpn, to_error)
        // The QP's rings drop here.
    }

    /// Destroy group `g`: its QPs (as [`Mlx5::destroy_group_qp`]), its SRQ, CQ and UAR page.
    /// A group of an older device generation is only dropped.
    pub fn destroy_group(&mut self, mut g: QueueGroup<H::Dma, M>) -> Result<(), Error> {
        let r = self.release_group(&mut g);
        if self.released_groups.len() <= g.id {
            self.released_groups.resize(g.id + 1, GroupStats::default());
        }
        self.released_groups[g.id] = self.released_groups[g.id].plus(g.stats);
        r
    }

    /// The counts of each group slot: those of the groups released from it plus, for the
    /// groups in `live` (their owner holds them), theirs. Slow path (a metrics page).
    pub fn group_stats<'a>(&self, live: impl Iterator<Item = &'a QueueGroup<H::Dma, M>>) -> Vec<GroupStats>
    where
        H::Dma: 'a,
        M: 'a,
    {
        let mut all = self.released_groups.clone();
        for g in live {
            if all.len() <= g.id {
                all.resize(g.id + 1, GroupStats::default());
            }
            all[g.id] = all[g.id].plus(g.stats);
        }
        all
    }

    fn release_group(&mut self, g: &mut QueueGroup<H::Dma, M>) -> Result<(), Error> {
        while let Some(q) = g.qps.last() {
            let qpn = q.qpn;
            self.destroy_group_qp(g, qpn)?;
        }
        if g.generation != self.generation {
            if self.record(g).is_some() {
                self.groups[g.id] = None;
            }
            return Ok(());
        }
        self.simple(op::DESTROY_RMP, 0, destroy_rmp_in::LAYOUT.size, &[(destroy_rmp_in::rmpn, g.srq.rmpn as u64)])?;
        self.simple(op::DESTROY_CQ, 0, destroy_cq_in::LAYOUT.size, &[(destroy_cq_in::cqn, g.cq.cqn.0 as u64)])?;
        self.dealloc_uar_page(g.uar)?;
        if let Some(r) = self.groups.get_mut(g.id) {
            *r = None;
        }
        Ok(())
    }

    /// Arm the SRQ limit of the group `h` names at `lwm` receives (as [`Mlx5::arm_srq`]; the
    /// group may be polled elsewhere meanwhile).
    pub fn arm_group_srq(&mut self, h: &GroupHandle, lwm: u16) -> Result<(), Error> {
        self.current(h.generation)?;
        if lwm == 0 || usize::from(lwm) > h.srq_capacity {
            return Err(Error::InvalidArgument("SRQ limit"));
        }
        self.modify_rmp_lwm(h.rmpn, lwm)
    }

    /// Groups the device holds a record of.
    pub fn live_groups(&self) -> usize {
        self.groups.iter().flatten().count()
    }

    /// QPs in the groups the device holds a record of.
    pub(super) fn group_qps(&self) -> usize {
        self.groups.iter().flatten().map(|r| r.qpns.len()).sum()
    }

    /// An event for a group's CQ or SRQ (called from the EQ; false: no group's).
    pub(super) fn group_event(&mut self, ty: u8, object: u32) -> bool {
        for r in self.groups.iter_mut().flatten() {
            match ty {
                event::CQ_ERROR if r.cqn.0 == object => r.signals.raise(GroupSignals::CQ_ERROR),
                event::SRQ_RQ_LIMIT if r.rmpn == object => r.signals.limit_event(),
                event::SRQ_CATAS_ERROR if r.rmpn == object => r.signals.raise(GroupSignals::SRQ_FAILED),
                _ => continue,
            }
            return true;
        }
        false
    }

    /// Teardown: destroy every group's objects the app did not (their rings are the app's).
    pub(super) fn destroy_group_objects(&mut self) -> Result<(), Error> {
        let mut first = Ok(());
        let groups = core::mem::take(&mut self.groups);
        for r in groups.into_iter().flatten() {
            for q in r.qpns {
                let x = self.simple(op::DESTROY_QP, 0, destroy_qp_in::LAYOUT.size, &[(destroy_qp_in::qpn, q.0 as u64)]);
                first = first.and(x);
            }
            let x = self.simple(op::DESTROY_RMP, 0, destroy_rmp_in::LAYOUT.size, &[(destroy_rmp_in::rmpn, r.rmpn as u64)]);
            first = first.and(x);
            let x = self.simple(op::DESTROY_CQ, 0, destroy_cq_in::LAYOUT.size, &[(destroy_cq_in::cqn, r.cqn.0 as u64)]);
            first = first.and(x);
            first = first.and(self.dealloc_uar_page(r.uar));
        }
        first
    }

    /// The device failed: every group it holds a record of learns it on its next turn
    /// ([`QueueGroup::sync`]).
    pub(super) fn signal_failure_to_groups(&self) {
        for r in self.groups.iter().flatten() {
            r.signals.raise(GroupSignals::FAILED);
        }
    }

    /// Recovery: the objects of the groups still held (the reset dropped them); the records
    /// are forgotten.
    pub(super) fn forget_groups(&mut self) -> usize {
        let n = self.groups.iter().flatten().map(|r| r.qpns.len() + 3).sum();
        self.groups.clear();
        n
    }
}
