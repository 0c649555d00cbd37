//! The soft device seen through `rdma::Verbs`: object lifecycle, posting, polling and
//! addressing, each a thin entry into the device's own machinery in `soft.rs`.

use super::*;

impl VerbsError for SoftState {
    type Error = SoftError;
}

impl Neighbours for SoftState {
    fn local_ip(&self) -> Ipv4 {
        self.ip
    }
    fn local_mac(&self) -> Mac {
        self.mac
    }
    fn resolve_mac(&mut self, ip: Ipv4) -> Option<Mac> {
        self.fabric.resolve(ip)
    }
}

impl Control for SoftState {
    type Buf = SoftBuf;
    fn alloc_buf(&mut self, len: usize) -> Result<SoftBuf, SoftError> {
        if len == 0 {
            return Err(SoftError::InvalidArgument);
        }
        let paddr = self.next_paddr;
        self.next_paddr += ((len as u64 + 4095) & !4095) + 4096; // guard page between buffers
        let data = Arc::new(Mutex::new(vec![0u8; len]));
        self.mem.insert(paddr, Arc::downgrade(&data));
        Ok(SoftBuf { paddr, data })
    }
    fn reg_mr(&mut self, addr: PhysAddr, len: u64, access: Access) -> Result<(Lkey, Rkey), SoftError> {
        if len == 0 || self.mem_find(addr, len).is_none() {
            return Err(SoftError::InvalidArgument);
        }
        let key = self.new_key();
        self.mrs.insert(key >> 8, Mr { key, addr, len, access, remote_valid: true, fast_max: None });
        Ok((Lkey(key), Rkey(key)))
    }
    fn dereg_mr(&mut self, lkey: Lkey) -> Result<(), SoftError> {
        self.mrs.remove(&(lkey.0 >> 8)).map(|_| ()).ok_or(SoftError::NoSuchKey(lkey.0))
    }
    fn alloc_fast_mr(&mut self, max_len: u64) -> Result<Rkey, SoftError> {
        if max_len == 0 {
            return Err(SoftError::InvalidArgument);
        }
        let key = self.new_key();
        let none = Access::default();
        self.mrs.insert(key >> 8, Mr { key, addr: 0, len: 0, access: none, remote_valid: false, fast_max: Some(max_len) });
        Ok(Rkey(key))
    }
    fn create_cq(&mut self, entries: u32) -> Result<Cqn, SoftError> {
        if entries == 0 {
            return Err(SoftError::InvalidArgument);
        }
        let n = self.next_cqn;
        self.next_cqn += 1;
        self.cqs.insert(n, Cq { cap: entries, entries: VecDeque::new(), overruns: 0 });
        Ok(Cqn(n))
    }
    fn destroy_cq(&mut self, cq: Cqn) -> Result<(), SoftError> {
        if cq == self.gsi_cq {
            return Err(SoftError::Busy);
        }
        if self.qps.values().any(|q| q.send_cq == cq || q.recv_cq == cq) {
            return Err(SoftError::Busy);
        }
        self.cqs.remove(&cq.0).map(|_| ()).ok_or(SoftError::NoSuchCq(cq))
    }
    fn create_rc_qp(&mut self, send_cq: Cqn, recv_cq: Cqn, sq: u32, rq: u32) -> Result<Qpn, SoftError> {
        if !self.cqs.contains_key(&send_cq.0) {
            return Err(SoftError::NoSuchCq(send_cq));
        }
        if !self.cqs.contains_key(&recv_cq.0) {
            return Err(SoftError::NoSuchCq(recv_cq));
        }
        if sq == 0 || rq == 0 {
            return Err(SoftError::InvalidArgument);
        }
        let n = self.next_qpn;
        self.next_qpn = if self.next_qpn >= 0xFF_FFFE { 0x11 } else { self.next_qpn + 1 };
        self.qps.insert(n, Qp::new(QpKind::Rc, send_cq, recv_cq, sq, rq));
        Ok(Qpn(n))
    }
    fn connect_rc_qp(&mut self, qp: Qpn, attrs: &RcConnectAttrs) -> Result<(), SoftError> {
        let q = self.qps.get_mut(&qp.0).ok_or(SoftError::NoSuchQp(qp))?;
        if q.kind != QpKind::Rc || q.state != QpState::Reset {
            return Err(SoftError::BadState(qp));
        }
        if !matches!(attrs.mtu, 256 | 512 | 1024 | 2048 | 4096) {
            return Err(SoftError::InvalidArgument);
        }
        q.attrs = *attrs;
        q.state = QpState::Rts;
        self.unpark(qp.0);
        Ok(())
    }
    fn qp_to_error(&mut self, qp: Qpn) -> Result<(), SoftError> {
        if !self.qps.contains_key(&qp.0) || qp.0 == 1 {
            return Err(SoftError::NoSuchQp(qp));
        }
        self.error_qp(qp.0);
        Ok(())
    }
    fn destroy_qp(&mut self, qp: Qpn) -> Result<(), SoftError> {
        if qp.0 == 1 {
            return Err(SoftError::BadState(qp));
        }
        self.qps.remove(&qp.0).map(|_| ()).ok_or(SoftError::NoSuchQp(qp))
    }
    fn gsi_qp(&self) -> Qpn {
        Qpn(1)
    }
    fn gsi_cq(&self) -> Cqn {
        self.gsi_cq
    }
    fn poll(&mut self) {
        self.pump();
    }
}

impl DataPath for SoftState {
    fn post_send(&mut self, qpn: Qpn, wr: &SendWr) -> Result<(), SoftError> {
        let q = self.qps.get(&qpn.0).ok_or(SoftError::NoSuchQp(qpn))?;
        if q.state != QpState::Rts {
            return Err(SoftError::BadState(qpn));
        }
        if q.kind == QpKind::Rc && (q.outstanding.len() + q.deferred.len() + q.fenced.len()) as u32 >= q.sq_cap {
            return Err(SoftError::QueueFull(qpn));
        }
        // One doorbell: it also starts everything written before it (in order, behind a fence
        // when there is one).
        self.doorbells += 1;
        self.qps.get_mut(&qpn.0).expect("checked above").deferred.push_back(*wr);
        self.run_deferred(qpn)
    }
    fn post_send_deferred(&mut self, qpn: Qpn, wr: &SendWr) -> Result<(), SoftError> {
        let q = self.qps.get_mut(&qpn.0).ok_or(SoftError::NoSuchQp(qpn))?;
        if q.state != QpState::Rts {
            return Err(SoftError::BadState(qpn));
        }
        if q.kind == QpKind::Rc && (q.outstanding.len() + q.deferred.len() + q.fenced.len()) as u32 >= q.sq_cap {
            return Err(SoftError::QueueFull(qpn));
        }
        q.deferred.push_back(*wr);
        Ok(())
    }
    fn ring_send(&mut self, qpn: Qpn) -> Result<(), SoftError> {
        let q = self.qps.get(&qpn.0).ok_or(SoftError::NoSuchQp(qpn))?;
        if q.deferred.is_empty() {
            return Ok(());
        }
        self.doorbells += 1;
        self.run_deferred(qpn)
    }
    fn post_recv(&mut self, qpn: Qpn, wr: &RecvWr) -> Result<(), SoftError> {
        self.post_recv_one(qpn, wr)
    }
    fn poll_cq(&mut self, cq: Cqn, out: &mut [Completion]) -> usize {
        self.poll_cq_inner(cq, out)
    }
    fn post_srq_recv(&mut self, srq: Srqn, wr: &RecvWr) -> Result<(), SoftError> {
        self.srq_post(srq, wr)
    }
}

