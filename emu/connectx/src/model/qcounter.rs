//! Queue counters (ALLOC_Q_COUNTER / DEALLOC_Q_COUNTER / QUERY_Q_COUNTER): counter sets a QP
//! names in `qpc.counter_set_id` at RST2INIT or INIT2INIT; a set reads the sum of what the
//! RoCE engine saw on its QPs ([`emu_roce::QpEvents`]) since they joined it, kept across the
//! QPs' destruction, until the set is freed or read with `clear`.

use super::{fail, lowest_free, out, CmdResult, Device};
use crate::consts::{status as st, synd};
use emu_roce::QpEvents;
use mlx5_ifc::ifc as l;
use mlx5_ifc::layout::{get, set, Field};

/// Counter values in [`FIELDS`] order.
pub(crate) type Vals = [u64; FIELDS.len()];

/// Each `query_q_counter_out` field the model counts and the engine event behind it.
const FIELDS: [(Field, fn(&QpEvents) -> u64); 13] = {
    use l::query_q_counter_out as o;
    [
        (o::rx_write_requests, |e| e.rx_write_requests),
        (o::rx_read_requests, |e| e.rx_read_requests),
        (o::out_of_buffer, |e| e.out_of_buffer),
        (o::out_of_sequence, |e| e.out_of_sequence),
        (o::duplicate_request, |e| e.duplicate_request),
        (o::rnr_nak_retry_err, |e| e.rnr_nak_retry_err),
        (o::packet_seq_err, |e| e.packet_seq_err),
        (o::local_ack_timeout_err, |e| e.local_ack_timeout_err),
        (o::req_rnr_retries_exceeded, |e| e.req_rnr_retries_exceeded),
        (o::req_transport_retries_exceeded, |e| e.req_transport_retries_exceeded),
        (o::req_remote_access_errors, |e| e.req_remote_access_errors),
        (o::req_remote_invalid_request, |e| e.req_remote_invalid_request),
        (o::resp_remote_access_errors, |e| e.resp_remote_access_errors),
    ]
};

fn vals(e: &QpEvents) -> Vals {
    FIELDS.map(|(_, f)| f(e))
}

impl Device {
    /// What QP `qpn` saw so far (zeros without an engine or engine QP).
    fn qp_vals(&self, qpn: u32) -> Vals {
        let e = self.engine.as_ref().and_then(|e| e.qp_events(emu_roce::Qpn(qpn))).unwrap_or_default();
        vals(&e)
    }

    /// ALLOC_Q_COUNTER: the lowest free set from 1 (0 is the QPs' default: counted nowhere),
    /// at most `max_qp_cnt` sets.
    pub(super) fn alloc_q_counter(&mut self) -> CmdResult {
        let used: std::collections::BTreeSet<u32> = self.qcounters.keys().map(|&k| u32::from(k)).collect();
        let max = u32::from(self.cfg.profile.caps.max_qp_cnt);
        let id = lowest_free(&used, 1, max.min(255) + 1).ok_or((st::NO_RES, synd::OUT_OF_OBJECTS))?;
        self.qcounters.insert(id as u8, [0; FIELDS.len()]);
        let mut o = out(l::alloc_q_counter_out::SIZE);
        set(&mut o, l::alloc_q_counter_out::counter_set_id, u64::from(id));
        Ok(o)
    }

    /// DEALLOC_Q_COUNTER: refused while a QP counts into the set.
    pub(super) fn dealloc_q_counter(&mut self, inp: &[u8]) -> CmdResult {
        let id = get(inp, l::dealloc_q_counter_in::counter_set_id) as u8;
        if !self.qcounters.contains_key(&id) {
            return fail(st::BAD_PARAM, synd::NO_SUCH_Q_COUNTER);
        }
        if self.qps.values().any(|q| q.counter_set == id) {
            return fail(st::RES_BUSY, synd::IN_USE);
        }
        self.qcounters.remove(&id);
        Ok(out(l::dealloc_q_counter_out::SIZE))
    }

    /// QUERY_Q_COUNTER: the set's sums (32-bit fields, wrapping as the hardware's do); `clear`
    /// starts them again from zero after this read.
    pub(super) fn query_q_counter(&mut self, inp: &[u8]) -> CmdResult {
        super::need(inp, l::query_q_counter_in::SIZE)?;
        use l::query_q_counter_in as i;
        if get(inp, i::other_vport) != 0 || get(inp, i::aggregate) != 0 {
            return fail(st::BAD_PARAM, synd::NO_SUCH_Q_COUNTER);
        }
        let id = get(inp, i::counter_set_id) as u8;
        let retired = *self.qcounters.get(&id).ok_or((st::BAD_PARAM, synd::NO_SUCH_Q_COUNTER))?;
        let mut sum = retired;
        let members: Vec<(u32, Vals)> = self.qps.values().filter(|q| q.counter_set == id).map(|q| (q.qpn, q.qc_base)).collect();
        for (qpn, base) in &members {
            let now = self.qp_vals(*qpn);
            for k in 0..sum.len() {
                sum[k] += now[k].wrapping_sub(base[k]);
            }
        }
        let mut o = out(l::query_q_counter_out::SIZE);
        for (k, (f, _)) in FIELDS.iter().enumerate() {
            set(&mut o, *f, sum[k] & 0xffff_ffff);
        }
        if get(inp, i::clear) == 1 {
            self.qcounters.insert(id, [0; FIELDS.len()]);
            for (qpn, _) in members {
                let now = self.qp_vals(qpn);
                if let Some(q) = self.qps.get_mut(&qpn) {
                    q.qc_base = now;
                }
            }
        }
        Ok(o)
    }

    /// Whether a QP context may name counter set `id` (0, or an allocated set).
    pub(super) fn q_counter_ok(&self, id: u8) -> Result<(), (u8, u32)> {
        if id == 0 || self.qcounters.contains_key(&id) {
            Ok(())
        } else {
            Err((st::BAD_PARAM, synd::NO_SUCH_Q_COUNTER))
        }
    }

    /// QP `qpn` leaves its counter set (moving to `to`, or destroyed when `to` is `None`): what it
    /// counted stays with the set it leaves.
    pub(super) fn q_counter_leave(&mut self, qpn: u32, to: Option<u8>) {
        let now = self.qp_vals(qpn);
        let Some(q) = self.qps.get_mut(&qpn) else { return };
        let from = q.counter_set;
        if to == Some(from) {
            return;
        }
        if let Some(r) = self.qcounters.get_mut(&from) {
            for k in 0..r.len() {
                r[k] += now[k].wrapping_sub(q.qc_base[k]);
            }
        }
        q.qc_base = now;
        q.counter_set = to.unwrap_or(0);
    }
}
