//! Admission on the RDMA transport: what a queue pins before and after Fabrics Connect.
//!
//! A queue the CM accepted holds its QP, CQ, receive and response buffers and a 1 KiB
//! Connect buffer, nothing more, and counts as unadmitted: bounded per source address and in
//! total (REJ NO_RESOURCES beyond), closed at the Connect deadline. Only a Connect the core
//! admitted gets the queue its data buffers (depth × largest transfer); if they cannot be
//! had the Connect is answered Controller Busy and the controller/queue admission undone.

use core::fmt;

use blockdev::BlockDevice;
use hal::DmaRegion;
use rdma::{Access, GroupVerbs, Lkey};

use super::{Conn, QueueAt, RdmaTarget, Slot};
use crate::nvmet::limits::Bound;
use crate::wire::cm_rej;

/// An IPv4 address for log lines.
pub(super) struct Ip(pub rdma::Ipv4);

impl fmt::Display for Ip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = self.0;
        write!(f, "{}.{}.{}.{}", a[0], a[1], a[2], a[3])
    }
}

/// What the transport's queues hold, for leak checks and the per-connection memory figure.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pinned {
    /// Live queues (not draining, or accepted and waiting for their poll group's answer),
    /// and those of them not admitted by Connect.
    pub queues: usize,
    pub unadmitted: usize,
    /// DMA memory held by all queues (response, data, Connect buffers) and the poll groups'
    /// shared receive buffers, bytes.
    pub dma_bytes: u64,
    /// Heap held by all queues (queue record, slots, wait list), bytes.
    pub heap_bytes: u64,
}

impl<V: GroupVerbs> Conn<V> {
    fn admitted(&self) -> bool {
        self.q.cntlid.is_some()
    }

    /// The DMA and heap bytes the queue holds (`RdmaTarget::pinned`).
    pub(super) fn held(&self) -> (u64, u64) {
        let dma = self.rsp.len() + self.data.len() + self.pre_data.as_ref().map_or(0, |d| d.0.len());
        let heap = core::mem::size_of::<Self>() + self.slots.capacity() * core::mem::size_of::<Slot>() + (self.free.capacity() + self.turn_writes.capacity() + self.held_reads.capacity()) * 2;
        (dma as u64, heap as u64)
    }
}

impl<V: GroupVerbs, B: BlockDevice> RdmaTarget<V, B> {
    /// Whether a queue from `source` may be accepted: unadmitted queues are bounded per
    /// source and in total. Err is the NVMe-RDMA REJ status.
    pub(super) fn admission_room(&mut self, source: rdma::Ipv4) -> Result<(), u16> {
        let limits = &self.core.config().limits;
        let (per, total) = (limits.max_unadmitted_per_source, limits.max_unadmitted);
        // Queues staged in a group and not answered yet count too (the owner's own figures).
        let staged = self.ends.iter().flat_map(|e| e.handed()).map(|h| h.source);
        let waiting = self.all_conns().map(|(_, c)| c).filter(|c| !c.draining && !c.admitted()).map(|c| c.source).chain(staged);
        let (mut all, mut here) = (0, 0);
        for s in waiting {
            all += 1;
            here += (s == source) as usize;
        }
        let bound = if here >= per {
            Bound::UnadmittedPerSource
        } else if all >= total {
            Bound::Unadmitted
        } else {
            return Ok(());
        };
        self.core.bound_hit(bound, self.now_ns, &Ip(source));
        Err(cm_rej::NO_RESOURCES)
    }

    /// The data buffers of a queue of `depth` slots of `full_xfer` bytes a Connect admitted,
    /// made and registered by the owner (the group takes them with the Connect's answer,
    /// `TurnShared::take_forward_answers`); `None` when memory cannot be had (the caller undoes
    /// the core's admission and answers Controller Busy).
    pub(super) fn admit_buffers(verbs: &mut V, depth: u16, full_xfer: usize) -> Option<(V::Buf, Lkey)> {
        let len = (depth as usize).saturating_mul(full_xfer);
        let local = Access { local_write: true, remote_read: false, remote_write: false };
        let buf = verbs.alloc_buf(len).ok()?;
        let (lkey, _) = verbs.reg_mr(buf.paddr(), buf.len() as u64, local).ok()?;
        Some((buf, lkey))
    }

    /// When [`RdmaTarget::expire_unadmitted`] next finds a queue past its Connect deadline.
    pub(super) fn next_connect_deadline(&self) -> Option<u64> {
        let deadline = self.core.config().limits.connect_deadline_ms as u64 * 1_000_000;
        self.all_conns().filter(|(_, c)| !c.draining && !c.admitted()).map(|(_, c)| c.accepted_ns.saturating_add(deadline + 1)).min()
    }

    /// Close queues that did not complete Connect within the deadline (DREQ to the host).
    pub(super) fn expire_unadmitted(&mut self, verbs: &mut V, now_ns: u64) -> usize {
        let deadline = self.core.config().limits.connect_deadline_ms as u64 * 1_000_000;
        let mut n = 0;
        let mut at = QueueAt { g: 0, i: 0 };
        while let Some(ci) = self.find_conn_from(at, &|c| !c.admitted() && now_ns.saturating_sub(c.accepted_ns) > deadline) {
            let source = self.conn(ci).expect("found").source;
            self.core.bound_hit(Bound::ConnectDeadline, now_ns, &Ip(source));
            self.teardown(verbs, ci, true);
            n += 1;
            at = QueueAt { g: ci.g, i: ci.i + 1 };
        }
        n
    }

    /// What the queues hold now.
    pub fn pinned(&self) -> Pinned {
        let mut p = Pinned::default();
        // Live and draining queues; the group's bytes for both.
        for (_, c) in self.all_conns() {
            if !c.draining {
                p.queues += 1;
                p.unadmitted += !c.admitted() as usize;
            }
            let (dma, heap) = c.held();
            p.dma_bytes += dma;
            p.heap_bytes += heap;
        }
        // Staged in a group waiting for its answer (the owner's own figures): not admitted yet.
        for h in self.ends.iter().flat_map(|e| e.handed()) {
            p.queues += 1;
            p.unadmitted += 1;
            p.dma_bytes += h.held.0;
            p.heap_bytes += h.held.1;
        }
        p.dma_bytes += self.groups.iter().map(|g| g.dma_bytes()).sum::<u64>();
        p
    }
}
