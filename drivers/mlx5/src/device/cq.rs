//! Completion queues: CREATE_CQ with its ring and doorbell record, DESTROY_CQ, lookup.

use super::*;

impl<H: Hal, M: Mmio> Mlx5<H, M> {
    /// Create a CQ of 2^log_size 64-byte CQEs reporting to the driver's EQ.
    pub fn create_cq(&mut self, log_size: u8) -> Result<Cqn, Error> {
        let cq = self.new_cq(log_size, self.uar.unwrap_or(0))?;
        let cqn = cq.cqn;
        self.cqs.push(cq);
        self.reindex();
        Ok(cqn)
    }

    /// CREATE_CQ of 2^log_size CQEs whose doorbells go through UAR page `uar`; the ring is the
    /// caller's to keep (the device's list or a [`crate::QueueGroup`]).
    pub(crate) fn new_cq(&mut self, log_size: u8, uar: u32) -> Result<Cq<H::Dma>, Error> {
        self.alive()?;
        if log_size > self.caps.log_max_cq_sz || log_size > 16 {
            return Err(Error::InvalidArgument("CQ size"));
        }
        let eqn = self.eq.as_ref().map(|e| e.eqn).ok_or(Error::InvalidArgument("no EQ"))?;
        let ring = CompletionRing::new(log_size);
        let npages = ring.bytes().div_ceil(PAGE);
        let in_len = create_cq_in::pas.byte() + 8 * npages;
        if in_len > MAX_MSG {
            return Err(Error::InvalidArgument("CQ too large"));
        }
        let buf = self.hal.dma_alloc(npages * PAGE, PAGE)?;
        let dbr = self.hal.dma_alloc(64, 64)?;
        ring.init(&buf, &dbr);
        self.begin(op::CREATE_CQ, 0, in_len);
        let c = create_cq_in::cq_context;
        set(&mut self.inb, cqc::cqe_sz.at(c), 0);
        set(&mut self.inb, cqc::log_cq_size.at(c), log_size as u64);
        set(&mut self.inb, cqc::uar_page.at(c), uar as u64);
        set(&mut self.inb, cqc::c_eqn.at(c), eqn as u64);
        set(&mut self.inb, cqc::log_page_size.at(c), 0);
        set(&mut self.inb, cqc::dbr_addr.at(c), dbr.paddr());
        for i in 0..npages {
            set(&mut self.inb, create_cq_in::pas.index(i as u32), buf.paddr() + (i * PAGE) as u64);
        }
        self.run(in_len, create_cq_out::LAYOUT.size)?;
        let cqn = Cqn(self.out(create_cq_out::cqn) as u32);
        Ok(Cq { cqn, buf, dbr, ring, broken: false })
    }

    pub fn destroy_cq(&mut self, cqn: Cqn) -> Result<(), Error> {
        let i = self.cq_index(cqn)?;
        if self.qps.iter().any(|q| q.send_cq == cqn || q.recv_cq == cqn) {
            return Err(Error::InvalidArgument("CQ still used by a QP"));
        }
        self.simple(op::DESTROY_CQ, 0, destroy_cq_in::LAYOUT.size, &[(destroy_cq_in::cqn, cqn.0 as u64)])?;
        self.cqs.remove(i);
        self.reindex();
        Ok(())
    }

    pub fn cq(&self, cqn: Cqn) -> Option<&Cq<H::Dma>> {
        self.cq_index(cqn).ok().map(|i| &self.cqs[i])
    }
}
