//! The UAR and the async event queue: creation, doorbell, polling, page-request/CQ-error/port/SRQ events, the event queue handed to callers.

use super::*;

/// Asynchronous events kept for the owner to read ([`Mlx5::take_event`]).
pub(super) const MAX_EVENTS: usize = 64;

impl<H: Hal, M: Mmio> Mlx5<H, M> {
    pub(super) fn alloc_uar(&mut self) -> Result<(), Error> {
        self.simple(op::ALLOC_UAR, 0, alloc_uar_in::LAYOUT.size, &[])?;
        let uar = self.out(alloc_uar_out::uar) as u32;
        if (uar as usize + 1) * PAGE > self.bar.size() {
            self.uar = Some(uar); // so teardown frees it
            return Err(Error::BadOutput { opcode: op::ALLOC_UAR, what: "UAR index outside BAR0" });
        }
        self.uar = Some(uar);
        Ok(())
    }

    /// ALLOC_UAR for a queue group: a page of its own (refused if outside BAR0).
    pub(super) fn alloc_uar_page(&mut self) -> Result<u32, Error> {
        self.simple(op::ALLOC_UAR, 0, alloc_uar_in::LAYOUT.size, &[])?;
        let uar = self.out(alloc_uar_out::uar) as u32;
        if (uar as usize + 1) * PAGE > self.bar.size() {
            let _ = self.dealloc_uar_page(uar);
            return Err(Error::BadOutput { opcode: op::ALLOC_UAR, what: "UAR index outside BAR0" });
        }
        Ok(uar)
    }

    pub(super) fn dealloc_uar_page(&mut self, uar: u32) -> Result<(), Error> {
        self.simple(op::DEALLOC_UAR, 0, dealloc_uar_in::LAYOUT.size, &[(dealloc_uar_in::uar, uar as u64)])
    }

    pub(crate) fn uar_base(&self) -> usize {
        self.uar.unwrap_or(0) as usize * PAGE
    }

    pub(super) fn create_eq(&mut self) -> Result<(), Error> {
        let want = (1u32 << self.cfg.eq_log_size.min(20)).saturating_add(self.cfg.eq_spare_entries.min(1 << 20));
        let log = (32 - (want - 1).leading_zeros()) as u8;
        if log > self.caps.log_max_eq_sz {
            return Err(Error::InvalidArgument("EQ larger than log_max_eq_sz"));
        }
        let bytes = (1usize << log) * eqe::LAYOUT.size;
        let npages = bytes.div_ceil(PAGE);
        if create_eq_in::pas.byte() + 8 * npages > MAX_MSG {
            return Err(Error::InvalidArgument("EQ too large"));
        }
        let buf = self.hal.dma_alloc(npages * PAGE, PAGE)?;
        // Every EQE starts owned by hardware (owner = 1).
        for i in 0..(1usize << log) {
            buf.write_u8(i * eqe::LAYOUT.size + eqe::owner.byte(), 1);
        }
        let in_len = create_eq_in::pas.byte() + 8 * npages;
        self.begin(op::CREATE_EQ, 0, in_len);
        let ctx = create_eq_in::eq_context_entry;
        set(&mut self.inb, eqc::log_eq_size.at(ctx), log as u64);
        set(&mut self.inb, eqc::uar_page.at(ctx), self.uar.unwrap_or(0) as u64);
        set(&mut self.inb, eqc::log_page_size.at(ctx), 0);
        set(&mut self.inb, eqc::intr.at(ctx), 0);
        let mask: u64 = [
            event::CQ_ERROR,
            event::WQ_CATAS_ERROR,
            event::PATH_MIG_FAILED,
            event::INTERNAL_ERROR,
            event::PORT_CHANGE,
            event::PAGE_REQUEST,
            event::WQ_INVAL_REQ_ERROR,
            event::WQ_ACCESS_ERROR,
            event::SRQ_CATAS_ERROR,
            event::SRQ_LAST_WQE,
            event::SRQ_RQ_LIMIT,
        ]
        .iter()
        .fold(0, |m, &t| m | (1u64 << t));
        // event_bitmask word 0 (types 0..63) is the first 64 bits of the field.
        let word0 = Field { off: create_eq_in::event_bitmask.off, width: 64 };
        set(&mut self.inb, word0, mask);
        for i in 0..npages {
            set(&mut self.inb, create_eq_in::pas.index(i as u32), buf.paddr() + (i * PAGE) as u64);
        }
        self.run(in_len, create_eq_out::LAYOUT.size)?;
        let eqn = self.out(create_eq_out::eq_number) as u8;
        self.eq = Some(Eq { eqn, buf, log_size: log, ci: 0 });
        self.eq_doorbell();
        Ok(())
    }

    pub(super) fn eq_doorbell(&self) {
        if let Some(eq) = &self.eq {
            let v = ((eq.eqn as u32) << 24) | (eq.ci & 0x00ff_ffff);
            self.bar.write32_be(self.uar_base() + UAR_EQ_DB_NOARM, v);
        }
    }

    /// Drain the EQ: answer page requests, record port changes and error events.
    /// Call from the app's poll loop; bring-up calls it too.
    pub fn poll_eq(&mut self) -> Result<usize, Error> {
        let mut handled = 0;
        loop {
            let Some(eq) = self.eq.as_mut() else { return Ok(handled) };
            let n = 1u32 << eq.log_size;
            let at = ((eq.ci & (n - 1)) as usize) * eqe::LAYOUT.size;
            // Ownership first, the rest of the EQE only once it is ours: the adapter writes the
            // body before the owner byte, so a copy of the whole entry taken while it writes
            // can hold the new owner with the old body (Linux `next_eqe_sw` + dma_rmb).
            let own = eqe::owner.byte();
            let mut e = [0u8; 64];
            eq.buf.read(at + own, &mut e[own..own + 1]);
            let sw_phase = ((eq.ci >> eq.log_size) & 1) as u64;
            if get(&e, eqe::owner) & 1 != sw_phase {
                break;
            }
            core::sync::atomic::fence(core::sync::atomic::Ordering::Acquire);
            eq.buf.read(at, &mut e[..own]);
            eq.ci = eq.ci.wrapping_add(1);
            handled += 1;
            self.stats.eqes += 1;
            if let Err(err) = self.handle_eqe(&e) {
                // The EQE is consumed even when answering it failed: tell the adapter.
                self.eq_doorbell();
                return Err(err);
            }
        }
        if handled > 0 {
            self.eq_doorbell();
        }
        Ok(handled)
    }

    pub(super) fn handle_eqe(&mut self, e: &[u8; 64]) -> Result<(), Error> {
        let ty = get(e, eqe::r#type) as u8;
        let sub = get(e, eqe::sub_type) as u8;
        match ty {
            event::PAGE_REQUEST => {
                self.stats.page_request_events += 1;
                let n = get(e, eqe_page_req::num_pages.at(eqe::page_req)) as u32 as i32;
                let func = get(e, eqe_page_req::function_id.at(eqe::page_req)) as u16;
                self.page_request(func, n)?;
            }
            event::COMPLETION => {
                // CQs are polled; a completion event (e.g. from doorbell recovery) needs no
                // action beyond being consumed.
                self.stats.completion_events += 1;
            }
            event::PORT_CHANGE => {
                self.stats.port_change_events += 1;
                let port = get(e, eqe_port_state::port.at(eqe::port_state));
                // sub_type: 1 = port down, 4 = port active (mlx5 port-change subtypes).
                match sub {
                    1 => self.port_up = Some(false),
                    4 => self.port_up = Some(true),
                    _ => {}
                }
                log::info!("mlx5: port {port} change, sub_type {sub}");
            }
            event::CQ_ERROR => {
                self.stats.error_events += 1;
                let cqn = get(e, eqe_cq_err::cqn.at(eqe::cq_err)) as u32;
                self.cq_failed(Cqn(cqn));
                self.push_event(AsyncEvent {
                    event_type: ty,
                    sub_type: sub,
                    object: cqn,
                    syndrome: get(e, eqe_cq_err::syndrome.at(eqe::cq_err)) as u8,
                });
            }
            event::INTERNAL_ERROR => {
                // The adapter says it is broken: the caller's funnel resets it.
                self.stats.error_events += 1;
                return Err(Error::FatalEvent { event_type: ty, sub_type: sub });
            }
            event::SRQ_RQ_LIMIT => {
                // Not an error: the owner should post more receives. Counted on the SRQ and
                // queued for the app like the others.
                let n = get(e, eqe_qp_srq::qp_srq_n.at(eqe::qp_srq)) as u32;
                self.srq_event(ty, n);
                self.push_event(AsyncEvent { event_type: ty, sub_type: sub, object: n, syndrome: 0 });
            }
            event::SRQ_LAST_WQE => {
                // Not an error: the adapter raises it for every QP on an SRQ once that QP is in
                // ERROR and its last WQE is consumed, which includes our own close (to ERROR
                // before destroy). Counted apart from the error events, queued for the app.
                self.stats.srq_last_wqe_events += 1;
                let n = get(e, eqe_qp_srq::qp_srq_n.at(eqe::qp_srq)) as u32;
                self.push_event(AsyncEvent { event_type: ty, sub_type: sub, object: n, syndrome: 0 });
            }
            _ => {
                if ty == event::SRQ_CATAS_ERROR {
                    self.srq_event(ty, get(e, eqe_qp_srq::qp_srq_n.at(eqe::qp_srq)) as u32);
                }
                self.stats.error_events += 1;
                self.push_event(AsyncEvent {
                    event_type: ty,
                    sub_type: sub,
                    object: get(e, eqe_qp_srq::qp_srq_n.at(eqe::qp_srq)) as u32,
                    syndrome: 0,
                });
            }
        }
        Ok(())
    }

    pub(super) fn push_event(&mut self, ev: AsyncEvent) {
        // The SRQ's low-water mark and a QP's last WQE are routine; the others are faults.
        let level = match ev.event_type {
            event::SRQ_RQ_LIMIT | event::SRQ_LAST_WQE => log::Level::Debug,
            _ => log::Level::Warn,
        };
        log::log!(level, "mlx5: async event {:#x} on {:#x}", ev.event_type, ev.object);
        if self.events.len() >= MAX_EVENTS {
            // Full: a routine event makes room before a fault is ever dropped (a peer that
            // closes many SRQ-fed connections at once raises one SRQ_LAST_WQE each, which must
            // not push out the QP error the owner has yet to read).
            let routine = |t: u8| matches!(t, event::SRQ_RQ_LIMIT | event::SRQ_LAST_WQE);
            self.stats.events_dropped += 1;
            match self.events.iter().position(|e| routine(e.event_type)) {
                Some(i) => {
                    self.events.remove(i);
                }
                None if routine(ev.event_type) => return,
                None => {
                    self.events.remove(0);
                }
            }
        }
        self.events.push(ev);
    }

    /// Oldest unread asynchronous error event.
    pub fn take_event(&mut self) -> Option<AsyncEvent> {
        if self.events.is_empty() {
            None
        } else {
            Some(self.events.remove(0))
        }
    }
}
