//! Queue counters: one counter set, allocated at bring-up when the capabilities offer any
//! (`max_qp_cnt`, as Linux mlx5_ib does), named by every QP at RST2INIT (`qpc.counter_set_id`),
//! read on demand with QUERY_Q_COUNTER (`clear`, so the adapter's 32-bit counters never wrap
//! between reads) into 64-bit totals, freed at shutdown. The RoCE transport's own view of the
//! fabric: out-of-sequence packets, duplicates, NAKs, RNR, ACK timeouts, retries exhausted.

use super::*;

/// The counter set and what it has counted so far.
#[derive(Debug, Clone)]
pub(crate) struct QueueCounters {
    pub(crate) set: u8,
    /// `(mlx5_ifc.h field name, total)` for every counter `query_q_counter_out` declares.
    pub(crate) totals: Vec<(&'static str, u64)>,
}

/// The counter fields of `query_q_counter_out` (its layout minus the status words).
fn counter_fields() -> impl Iterator<Item = (&'static str, Field)> {
    query_q_counter_out::LAYOUT.entries.iter().filter(|(n, _)| !matches!(*n, "status" | "syndrome")).map(|(n, e)| (*n, e.field))
}

impl<H: Hal, M: Mmio> Mlx5<H, M> {
    /// ALLOC_Q_COUNTER when the adapter offers counter sets. Counters are telemetry: a refusal
    /// is logged and the adapter runs without them.
    pub(super) fn alloc_queue_counter(&mut self) {
        if self.caps.max_qp_cnt == 0 {
            return;
        }
        match self.simple(op::ALLOC_Q_COUNTER, 0, alloc_q_counter_in::LAYOUT.size, &[]) {
            Ok(()) => {
                let set = self.out(alloc_q_counter_out::counter_set_id) as u8;
                self.qcounters = Some(QueueCounters { set, totals: counter_fields().map(|(n, _)| (n, 0)).collect() });
            }
            Err(e) => log::warn!("mlx5: no queue counters ({e})"),
        }
    }

    /// The counter set QPs name (None: the adapter gave none).
    pub fn queue_counter_set(&self) -> Option<u8> {
        self.qcounters.as_ref().map(|q| q.set)
    }

    /// Read the counter set (QUERY_Q_COUNTER with `clear`) and add it to the totals. Slow path:
    /// one firmware command; call it when the totals are about to be shown.
    pub fn refresh_queue_counters(&mut self) -> Result<(), Error> {
        let Some(id) = self.queue_counter_set() else { return Ok(()) };
        self.begin(op::QUERY_Q_COUNTER, 0, query_q_counter_in::LAYOUT.size);
        set(&mut self.inb, query_q_counter_in::clear, 1);
        set(&mut self.inb, query_q_counter_in::counter_set_id, id as u64);
        self.run(query_q_counter_in::LAYOUT.size, query_q_counter_out::LAYOUT.size)?;
        let read: Vec<u64> = counter_fields().map(|(_, f)| self.out(f)).collect();
        if let Some(q) = self.qcounters.as_mut() {
            for ((_, t), v) in q.totals.iter_mut().zip(read) {
                *t = t.saturating_add(v);
            }
        }
        Ok(())
    }

    /// The totals as of the last [`Mlx5::refresh_queue_counters`], by `mlx5_ifc.h` name
    /// (empty without a counter set).
    pub fn queue_counters(&self) -> &[(&'static str, u64)] {
        self.qcounters.as_ref().map_or(&[], |q| &q.totals)
    }

    /// DEALLOC_Q_COUNTER (shutdown, after every QP is gone).
    pub(super) fn dealloc_queue_counter(&mut self) -> Result<(), Error> {
        let Some(q) = self.qcounters.take() else { return Ok(()) };
        self.simple(op::DEALLOC_Q_COUNTER, 0, dealloc_q_counter_in::LAYOUT.size, &[(dealloc_q_counter_in::counter_set_id, q.set as u64)])
    }
}
