//! Device recovery: a dead adapter (a command that never completes, a health syndrome, a
//! stalled health counter, an internal-error event) puts the driver in the failed state, the
//! function is reset, and [`Mlx5::recover`] brings it up again.
//!
//! Facts and order (Linux mlx5 `health.c` / `main.c` in spirit, PRM init segment, PCIe base
//! spec §6.6.2): on a fatal error the function is reset by a PCIe Function Level Reset when the
//! platform offers one (`hal::Mmio::function_level_reset`), else the driver writes
//! `nic_interface` = SW_RESET so the firmware resets it (either way every object and page lost,
//! DMA stopped, the command queue address cleared, `initializing` set until it is ready); while failed, commands that release something succeed without the
//! adapter (Linux `mlx5_internal_err_ret_value`), every other command fails, nothing is
//! posted, and every work request still outstanding completes with a flush error when its CQ is
//! polled. The app releases what it holds, then calls `recover`: wait for `initializing` to
//! clear, a new command queue, the bring-up steps again.

use super::*;
use rdma::{Completion, WcOpcode, WcStatus};

impl<H: Hal, M: Mmio> Mlx5<H, M> {
    /// Why the device failed, while it is failed (until [`Mlx5::recover`] succeeds).
    pub fn failed(&self) -> Option<Error> {
        self.failed
    }

    /// `Err(DeviceFailed)` while failed (creating anything needs a live device).
    pub(crate) fn alive(&self) -> Result<(), Error> {
        match self.failed {
            Some(_) => Err(Error::DeviceFailed),
            None => Ok(()),
        }
    }

    /// Enter the failed state if `e` says the device is dead.
    pub fn note_failure(&mut self, e: &Error) {
        if e.is_fatal() {
            self.enter_error_state(*e);
        }
    }

    /// The device is dead: reset the function at once (it stops touching memory and forgets
    /// every object and page, so the memory given to it may be reused), every QP to ERROR.
    pub fn enter_error_state(&mut self, cause: Error) {
        if self.failed.is_some() {
            return;
        }
        match cause {
            Error::Firmware(_) | Error::HealthStalled(_) => log::error!("mlx5: device failed ({cause}); resetting the function"),
            _ => log::error!("mlx5: device failed ({cause}); {}; resetting the function", HealthReport::read(&self.bar)),
        }
        self.failed = Some(cause);
        self.generation = self.generation.wrapping_add(1);
        self.signal_failure_to_groups();
        self.stats.device_failures += 1;
        // PCIe FLR when the platform can (it reaches the function even when the firmware no
        // longer reads the init segment); else the firmware's own reset.
        if self.bar.function_level_reset() {
            self.stats.flr_resets += 1;
        } else {
            self.set_nic_interface(mlx5_ifc::nic_interface::SW_RESET as u32);
        }
        for q in &mut self.qps {
            q.state = QpState::Error;
        }
        // Everything below lived only on the adapter; the reset dropped it.
        self.pages.clear();
        self.eq = None;
        self.uar = None;
        self.pd = None;
        self.td = None;
        self.qcounters = None;
        self.roce_enabled = false;
        self.port_up = None;
        self.stage = Stage::CmdQueue;
    }

    /// A command while failed: releasing commands succeed without the adapter (their output
    /// all zero: status OK), the rest fail with [`Error::DeviceFailed`].
    pub(super) fn run_failed(&mut self, out_len: usize) -> Result<(), Error> {
        let opcode = get(&self.inb, mbox_in::opcode) as u16;
        let name = crate::cmd::opcode_name(opcode);
        let releases = ["DESTROY_", "DEALLOC_", "DELETE_", "2ERR_", "2RST_"].iter().any(|p| name.starts_with(p))
            || matches!(opcode, op::TEARDOWN_HCA | op::DISABLE_HCA);
        if releases {
            clear(&mut self.outb[..out_len]);
            Ok(())
        } else {
            Err(Error::DeviceFailed)
        }
    }

    /// The adapter reported an error on CQ `cqn` (overrun): it takes no more CQEs, so the QPs
    /// reporting to it are in ERROR and their outstanding work is flushed by the driver when
    /// the CQ is polled; the app sees flush errors and closes them.
    pub(crate) fn cq_failed(&mut self, cqn: Cqn) {
        if self.group_event(event::CQ_ERROR, cqn.0) {
            log::warn!("mlx5: CQ {} of a queue group in error: its QPs' work is flushed", cqn.0);
            return;
        }
        let Ok(i) = self.cq_index(cqn) else { return };
        log::warn!("mlx5: CQ {} in error: its QPs' work is flushed", cqn.0);
        self.cqs[i].broken = true;
        for q in self.qps.iter_mut().filter(|q| q.send_cq == cqn || q.recv_cq == cqn) {
            q.state = QpState::Error;
        }
    }

    /// While failed (or for a CQ in error): the work requests outstanding on the QPs (and SRQs) completing to `cqn`,
    /// as flush errors, up to `out.len()`.
    pub(crate) fn flush_cq(&mut self, cqn: Cqn, out: &mut [Completion]) -> usize {
        let mut n = 0;
        for q in self.qps.iter_mut() {
            if q.send_cq == cqn {
                flush_sq(q, out, &mut n);
            }
            if q.recv_cq == cqn {
                flush_rq(q, out, &mut n);
            }
        }
        // An SRQ's receives flush on the receive CQ of a QP taking from it.
        for (s, srq) in self.srqs.iter_mut().enumerate() {
            let Some(srq) = srq.as_mut() else { continue };
            let Some(q) = self.qps.iter().find(|q| q.srq == Some(SrqId(s as u32)) && q.recv_cq == cqn) else { continue };
            flush_srq(srq, q.qpn, out, &mut n);
        }
        self.stats.flushed_on_failure += n as u64;
        n
    }

    /// Bring a failed device up again: forget what the app did not release (the reset dropped
    /// it on the adapter), wait for `initializing` to clear, a new command queue, the bring-up
    /// steps, then `then` (the verbs layer's own objects). On an error the device is failed
    /// again (and reset again); call again later. Nothing to do when the device has not failed.
    pub fn recover_with(&mut self, then: impl FnOnce(&mut Self) -> Result<(), Error>) -> Result<(), Error> {
        if self.failed.is_none() {
            return Ok(());
        }
        let _ = self.destroy_raw_eth();
        let left = self.qps.len() + self.cqs.len() + self.mkeys.len() + self.srqs.iter().flatten().count() + self.forget_groups();
        if left > 0 {
            log::warn!("mlx5: recovery: {left} objects of the failed device were not released; forgotten");
        }
        self.stats.objects_forgotten += left as u64;
        self.qps.clear();
        self.cqs.clear();
        self.mkeys.clear();
        self.srqs.clear();
        self.events.clear();
        self.reindex();
        let failures = self.stats.device_failures;
        let r = self.bring_up_again().and_then(|()| then(self));
        match r {
            Ok(()) => {
                self.stats.recoveries += 1;
                log::info!("mlx5: recovered after a device failure (recovery {})", self.stats.recoveries);
            }
            Err(e) => {
                log::error!("mlx5: recovery failed: {e}");
                self.enter_error_state(e);
                // Failures found in service are counted there; this one is a failed attempt.
                self.stats.device_failures = failures;
                self.stats.failed_recoveries += 1;
            }
        }
        r
    }

    /// [`Mlx5::recover_with`] nothing more.
    pub fn recover(&mut self) -> Result<(), Error> {
        self.recover_with(|_| Ok(()))
    }

    fn bring_up_again(&mut self) -> Result<(), Error> {
        health::wait_initialized(&self.hal, &self.bar, self.cfg.timeouts.init_ns)?;
        let mut cmd = CmdQueue::new(&self.hal, &self.bar, self.cfg.timeouts)?;
        cmd.watch_health(&self.hal, &self.bar);
        cmd.trace = self.cfg.trace;
        cmd.issued = self.cmd.issued;
        // Counters stay monotonic across the new queue (metrics read them as counters).
        cmd.errors = self.cmd.errors;
        self.cmd = cmd;
        self.failed = None;
        self.stage = Stage::CmdQueue;
        self.steps()
    }
}

/// `q`'s outstanding send work as flush errors into `out[*n..]` (as far as it has room); what
/// was written and not announced is dropped.
pub(crate) fn flush_sq<D: DmaRegion>(q: &mut Qp<D>, out: &mut [Completion], n: &mut usize) {
    while *n < out.len() && !q.sq.is_idle() {
        let ci = q.sq.ci();
        let slot = q.sq_slots[q.sq.slot(ci)];
        q.sq.complete_to(ci.wrapping_add(slot.wqebbs.max(1) as u16));
        out[*n] = Completion { wr_id: slot.wr_id, status: WcStatus::WrFlushed, opcode: slot.opcode, qpn: q.qpn, ..Default::default() };
        *n += 1;
    }
    q.sq_unrung = None;
}

/// `q`'s own outstanding receives (none on an SRQ) as flush errors into `out[*n..]`.
pub(crate) fn flush_rq<D: DmaRegion>(q: &mut Qp<D>, out: &mut [Completion], n: &mut usize) {
    if q.srq.is_some() {
        return;
    }
    while *n < out.len() && !q.rq.is_idle() {
        let ci = q.rq.ci();
        let wr_id = q.rq_wrid[q.rq.slot(ci)];
        q.rq.complete_to(ci.wrapping_add(1));
        out[*n] = Completion { wr_id, status: WcStatus::WrFlushed, opcode: WcOpcode::Recv, qpn: q.qpn, ..Default::default() };
        *n += 1;
    }
}

/// `srq`'s posted receives as flush errors reported on QP `qpn` into `out[*n..]`.
pub(crate) fn flush_srq<D: DmaRegion>(srq: &mut Srq<D>, qpn: Qpn, out: &mut [Completion], n: &mut usize) {
    while *n < out.len() {
        let Some(wr_id) = srq.flush_one() else { break };
        out[*n] = Completion { wr_id, status: WcStatus::WrFlushed, opcode: WcOpcode::Recv, qpn, ..Default::default() };
        *n += 1;
    }
}
