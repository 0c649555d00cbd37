//! Teardown: destroy every live object, TEARDOWN_HCA (graceful, then force close), reclaim every firmware page, DISABLE_HCA.

use super::*;

impl<H: Hal, M: Mmio> Mlx5<H, M> {
    /// Destroy every object, TEARDOWN_HCA, take every page back, DISABLE_HCA.
    pub fn shutdown(mut self) -> Result<Stats, Error> {
        self.teardown_inner()?;
        Ok(self.stats)
    }

    pub(super) fn teardown_inner(&mut self) -> Result<(), Error> {
        let mut first_err: Option<Error> = None;
        let mut note = |r: Result<(), Error>| {
            if let Err(e) = r {
                if first_err.is_none() {
                    first_err = Some(e);
                }
            }
        };
        if self.stage >= Stage::Initialized {
            if self.raw.is_some() {
                note(self.destroy_raw_eth());
            }
            note(self.destroy_group_objects());
            while let Some(q) = self.qps.last() {
                let qpn = q.qpn;
                let r = self.simple(op::DESTROY_QP, 0, destroy_qp_in::LAYOUT.size, &[(destroy_qp_in::qpn, qpn.0 as u64)]);
                self.qps.pop();
                self.reindex();
                note(r);
            }
            while let Some(s) = self.srqs.pop() {
                if let Some(s) = s {
                    note(self.simple(op::DESTROY_RMP, 0, destroy_rmp_in::LAYOUT.size, &[(destroy_rmp_in::rmpn, s.rmpn as u64)]));
                }
            }
            while let Some(m) = self.mkeys.pop() {
                note(self.simple(op::DESTROY_MKEY, 0, destroy_mkey_in::LAYOUT.size, &[(destroy_mkey_in::mkey_index, m.index as u64)]));
            }
            while let Some(c) = self.cqs.pop() {
                note(self.simple(op::DESTROY_CQ, 0, destroy_cq_in::LAYOUT.size, &[(destroy_cq_in::cqn, c.cqn.0 as u64)]));
            }
            self.reindex();
            if self.roce_enabled {
                note(self.set_roce_gid(0, None));
                self.roce_enabled = false;
            }
            note(self.dealloc_queue_counter());
            if let Some(td) = self.td.take() {
                note(self.simple(
                    op::DEALLOC_TRANSPORT_DOMAIN,
                    0,
                    dealloc_transport_domain_in::LAYOUT.size,
                    &[(dealloc_transport_domain_in::transport_domain, td as u64)],
                ));
            }
            if let Some(pd) = self.pd.take() {
                note(self.simple(op::DEALLOC_PD, 0, dealloc_pd_in::LAYOUT.size, &[(dealloc_pd_in::pd, pd.0 as u64)]));
            }
            // Answer any page requests still queued before the EQ goes.
            note(self.poll_eq().map(|_| ()));
            if let Some(eq) = self.eq.take() {
                note(self.simple(op::DESTROY_EQ, 0, destroy_eq_in::LAYOUT.size, &[(destroy_eq_in::eq_number, eq.eqn as u64)]));
            }
            if let Some(uar) = self.uar.take() {
                note(self.simple(op::DEALLOC_UAR, 0, dealloc_uar_in::LAYOUT.size, &[(dealloc_uar_in::uar, uar as u64)]));
            }
            match self.teardown_hca() {
                Ok(crate::teardown::Rung::Fast) => {
                    // The function is closed and its DMA stopped: the pages are ours again
                    // without MANAGE_PAGES, and the command interface is off (no DISABLE_HCA).
                    self.stats.pages_released_by_fast_teardown += self.pages.len() as u64;
                    self.pages.clear();
                    self.stage = Stage::CmdQueue;
                }
                r => {
                    note(r.map(|_| ()));
                    self.stage = Stage::Enabled;
                }
            }
        }
        if self.stage >= Stage::Enabled {
            // Reclaim every page: keep asking until the firmware returns none.
            while !self.pages.is_empty() {
                let want = self.pages.len();
                match self.take_pages(self.page_func, want) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) => {
                        note(Err(e));
                        break;
                    }
                }
            }
            let disabled = self.simple(op::DISABLE_HCA, 0, disable_hca_in::LAYOUT.size, &[(disable_hca_in::function_id, 0)]);
            if disabled.is_err() && !self.pages.is_empty() {
                // Pages not given back and the function not disabled (firmware hung or
                // refusing): the adapter may still write them, so they must not return to
                // the DMA pool. Leaked on purpose. (After a completed DISABLE_HCA the
                // function no longer uses them and they are freed normally.)
                log::error!(
                    "mlx5: {} firmware pages neither returned nor released by DISABLE_HCA; leaking them rather than reusing memory the adapter may still write",
                    self.pages.len()
                );
                core::mem::forget(core::mem::take(&mut self.pages));
            }
            note(disabled);
            self.stage = Stage::CmdQueue;
        }
        let left = self.pages.len() as u64;
        if let Some(e) = first_err {
            return Err(e);
        }
        if left != 0 {
            return Err(Error::PagesLeft(left));
        }
        Ok(())
    }
}
