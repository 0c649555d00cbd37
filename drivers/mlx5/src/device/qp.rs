//! Queue pairs: CREATE_QP (RC and QP1), the state machine (RST->INIT->RTR->RTS, ERR, RST), DESTROY_QP.

use super::*;
use rdma::cm_wire::{gid_from_ipv4, mtu_bytes_to_enum};

impl<H: Hal, M: Mmio> Mlx5<H, M> {
    /// Create a QP in RESET with 2^log_sq send WQEBBs and 2^log_rq receive WQEs of
    /// 2^(log_rq_stride+4) bytes.
    pub fn create_qp(
        &mut self,
        kind: QpKind,
        send_cq: Cqn,
        recv_cq: Cqn,
        log_sq: u8,
        log_rq: u8,
        log_rq_stride: u8,
    ) -> Result<Qpn, Error> {
        self.create_qp_on(kind, send_cq, recv_cq, log_sq, log_rq, log_rq_stride, None)
    }

    /// Create an RC QP in RESET with 2^log_sq send WQEBBs whose receives come from `srq`
    /// (qpc.rq_type SRQ); its receive completions go to `recv_cq`, which other QPs may share.
    pub fn create_qp_srq(&mut self, send_cq: Cqn, recv_cq: Cqn, log_sq: u8, srq: SrqId) -> Result<Qpn, Error> {
        self.create_qp_on(QpKind::Rc, send_cq, recv_cq, log_sq, 0, 0, Some(srq))
    }

    #[allow(clippy::too_many_arguments)]
    fn create_qp_on(
        &mut self,
        kind: QpKind,
        send_cq: Cqn,
        recv_cq: Cqn,
        log_sq: u8,
        log_rq: u8,
        log_rq_stride: u8,
        srq: Option<SrqId>,
    ) -> Result<Qpn, Error> {
        self.alive()?;
        let rmpn = match srq {
            Some(id) => Some((id, self.srq(id).ok_or(Error::NoSuchObject { kind: "SRQ", id: id.0 })?.rmpn)),
            None => None,
        };
        if self.cq(send_cq).is_none() {
            return Err(Error::NoSuchObject { kind: "CQ", id: send_cq.0 });
        }
        if self.cq(recv_cq).is_none() {
            return Err(Error::NoSuchObject { kind: "CQ", id: recv_cq.0 });
        }
        if kind == QpKind::Gsi && self.qps.iter().any(|q| q.kind == QpKind::Gsi) {
            return Err(Error::InvalidArgument("GSI QP exists"));
        }
        let qp = self.new_qp(kind, (send_cq, recv_cq), log_sq, log_rq, log_rq_stride, rmpn, self.uar.unwrap_or(0))?;
        let qpn = qp.qpn;
        self.qps.push(qp);
        self.reindex();
        Ok(qpn)
    }

    /// CREATE_QP completing to `cqs` (send, receive), taking its receives from the SRQ
    /// `srq` (its id and RMP number) or its own RQ, ringing through UAR page `uar`; the ring is
    /// the caller's to keep (the device's list or a [`crate::QueueGroup`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new_qp(
        &mut self,
        kind: QpKind,
        (send_cq, recv_cq): (Cqn, Cqn),
        log_sq: u8,
        log_rq: u8,
        log_rq_stride: u8,
        srq: Option<(SrqId, u32)>,
        uar: u32,
    ) -> Result<Qp<H::Dma>, Error> {
        self.alive()?;
        let pd = self.pd.ok_or(Error::InvalidArgument("no PD"))?;
        if log_sq > 15 || log_rq > 15 || log_rq_stride > 7 || log_sq > self.caps.log_max_qp_sz || log_rq > self.caps.log_max_qp_sz {
            return Err(Error::InvalidArgument("QP size"));
        }
        if kind == QpKind::Gsi && self.qps.iter().any(|q| q.kind == QpKind::Gsi) {
            return Err(Error::InvalidArgument("GSI QP exists"));
        }
        // The SQ starts right after the RQ in the buffer and must start on a WQEBB (64 B):
        // like rdma-core (mlx5 verbs.c: RQ size at least MLX5_SEND_WQE_BB), grow a smaller RQ.
        let mut log_rq = log_rq;
        while srq.is_none() && ((1usize << log_rq) << (log_rq_stride + 4)) < 64 {
            log_rq += 1;
        }
        let rq_bytes = if srq.is_some() { 0 } else { (1usize << log_rq) << (log_rq_stride + 4) };
        let sq_bytes = (1usize << log_sq) * 64;
        let npages = (rq_bytes + sq_bytes).div_ceil(PAGE);
        let in_len = create_qp_in::pas.byte() + 8 * npages;
        if in_len > MAX_MSG {
            return Err(Error::InvalidArgument("QP too large"));
        }
        let buf = self.hal.dma_alloc(npages * PAGE, PAGE)?;
        let dbr = self.hal.dma_alloc(64, 64)?;
        self.begin(op::CREATE_QP, 0, in_len);
        let q = create_qp_in::qpc;
        let s = match kind {
            QpKind::Rc => qp_fact::ST_RC as u64,
            QpKind::Gsi => qp_fact::ST_QP1 as u64,
        };
        set(&mut self.inb, qpc::st.at(q), s);
        set(&mut self.inb, qpc::pm_state.at(q), 3);
        set(&mut self.inb, qpc::pd.at(q), pd.0 as u64);
        set(&mut self.inb, qpc::uar_page.at(q), uar as u64);
        set(&mut self.inb, qpc::log_page_size.at(q), 0);
        set(&mut self.inb, qpc::rlky.at(q), 1);
        set(&mut self.inb, qpc::fre.at(q), 1);
        set(&mut self.inb, qpc::log_rq_size.at(q), log_rq as u64);
        set(&mut self.inb, qpc::log_rq_stride.at(q), log_rq_stride as u64);
        set(&mut self.inb, qpc::log_sq_size.at(q), log_sq as u64);
        match srq.map(|(_, n)| n) {
            Some(n) => {
                set(&mut self.inb, qpc::rq_type.at(q), mlx5_ifc::rq_type::SRQ as u64);
                set(&mut self.inb, qpc::srqn_rmpn_xrqn.at(q), n as u64);
                set(&mut self.inb, qpc::log_rq_size.at(q), 0);
                set(&mut self.inb, qpc::log_rq_stride.at(q), 0);
            }
            None => set(&mut self.inb, qpc::rq_type.at(q), mlx5_ifc::rq_type::REGULAR as u64),
        }
        set(&mut self.inb, qpc::cqn_snd.at(q), send_cq.0 as u64);
        set(&mut self.inb, qpc::cqn_rcv.at(q), recv_cq.0 as u64);
        set(&mut self.inb, qpc::user_index.at(q), 0xff_ffff);
        set(&mut self.inb, qpc::ts_format.at(q), ts_format(self.caps.qp_ts_format));
        set(&mut self.inb, qpc::dbr_addr.at(q), dbr.paddr());
        for i in 0..npages {
            set(&mut self.inb, create_qp_in::pas.index(i as u32), buf.paddr() + (i * PAGE) as u64);
        }
        self.run(in_len, create_qp_out::LAYOUT.size)?;
        let qpn = Qpn(self.out(create_qp_out::qpn) as u32);
        Ok(Qp {
            qpn,
            kind,
            buf,
            dbr,
            sq: WorkRing::send(rq_bytes, log_sq, 0),
            // On an SRQ the QP has no RQ: a ring of one entry nothing is posted to.
            rq: if srq.is_some() { WorkRing::receive(0, 0, 0, 0) } else { WorkRing::receive(0, log_rq, log_rq_stride + 4, 0) },
            send_cq,
            recv_cq,
            state: QpState::Reset,
            sq_slots: alloc::vec![SqSlot::default(); 1 << log_sq],
            rq_wrid: alloc::vec![0; 1 << log_rq],
            sq_unrung: None,
            next_fence: false,
            srq: srq.map(|(id, _)| id),
        })
    }

    pub fn qp(&self, qpn: Qpn) -> Option<&Qp<H::Dma>> {
        self.qp_index(qpn).ok().map(|i| &self.qps[i])
    }

    /// Start a modify command whose input is `*_qp_in` with a qpc at 0x18 (RST2INIT, INIT2RTR, RTR2RTS).
    pub(super) fn begin_modify(&mut self, opcode: u16, qpn: Qpn) -> usize {
        let len = rst2init_qp_in::LAYOUT.size;
        self.begin(opcode, 0, len);
        set(&mut self.inb, rst2init_qp_in::qpn, qpn.0 as u64);
        set(&mut self.inb, rst2init_qp_in::opt_param_mask, 0);
        len
    }

    /// RESET → INIT.
    pub fn qp_rst2init(&mut self, qpn: Qpn, access: Access) -> Result<(), Error> {
        let i = self.qp_index(qpn)?;
        self.rst2init(self.qps[i].ctl(), access)?;
        self.qps[i].state = QpState::Init;
        Ok(())
    }

    /// RST2INIT_QP for the QP `c` describes (its state is the caller's to set).
    pub(crate) fn rst2init(&mut self, c: QpCtl, access: Access) -> Result<(), Error> {
        let QpCtl { qpn, kind, send_cq: scq, recv_cq: rcq, dbr } = c;
        let pd = self.pd.map(|p| p.0).unwrap_or(0);
        let len = self.begin_modify(op::RST2INIT_QP, qpn);
        let q = rst2init_qp_in::qpc;
        let path = qpc::primary_address_path.at(q);
        set(&mut self.inb, qpc::st.at(q), if kind == QpKind::Gsi { qp_fact::ST_QP1 } else { qp_fact::ST_RC } as u64);
        set(&mut self.inb, qpc::pm_state.at(q), 3);
        set(&mut self.inb, qpc::pd.at(q), pd as u64);
        set(&mut self.inb, qpc::cqn_snd.at(q), scq.0 as u64);
        set(&mut self.inb, qpc::cqn_rcv.at(q), rcq.0 as u64);
        set(&mut self.inb, qpc::rlky.at(q), 1);
        set(&mut self.inb, qpc::dbr_addr.at(q), dbr);
        if let Some(s) = self.queue_counter_set() {
            set(&mut self.inb, qpc::counter_set_id.at(q), s as u64);
        }
        set(&mut self.inb, ads::pkey_index.at(path), 0);
        set(&mut self.inb, ads::vhca_port_num.at(path), 1);
        match kind {
            QpKind::Gsi => set(&mut self.inb, qpc::q_key.at(q), GSI_QKEY as u64),
            QpKind::Rc => {
                set(&mut self.inb, qpc::rre.at(q), access.remote_read as u64);
                set(&mut self.inb, qpc::rwe.at(q), access.remote_write as u64);
            }
        }
        self.run(len, rst2init_qp_out::LAYOUT.size)
    }

    /// INIT → RTR for an RC QP towards a RoCEv2 peer.
    pub fn qp_init2rtr(&mut self, qpn: Qpn, a: &RcConnectAttrs) -> Result<(), Error> {
        let i = self.qp_index(qpn)?;
        self.init2rtr(self.qps[i].ctl(), a)?;
        self.qps[i].state = QpState::Rtr;
        Ok(())
    }

    /// INIT2RTR_QP for the QP `c` describes (its state is the caller's to set).
    pub(crate) fn init2rtr(&mut self, c: QpCtl, a: &RcConnectAttrs) -> Result<(), Error> {
        let (qpn, kind) = (c.qpn, c.kind);
        if kind != QpKind::Rc {
            return Err(Error::InvalidArgument("RC attributes for a QP that is not RC"));
        }
        mtu_bytes_to_enum(a.mtu).map(u64::from).ok_or(Error::InvalidArgument("path MTU"))?;
        // Never more than the port carries (firmware refuses a path MTU over the port's max).
        let mtu = mtu_bytes_to_enum(a.mtu.min(self.port_mtu.max_path_mtu())).map(u64::from).ok_or(Error::InvalidArgument("path MTU"))?;
        let len = self.begin_modify(op::INIT2RTR_QP, qpn);
        let q = init2rtr_qp_in::qpc;
        let path = qpc::primary_address_path.at(q);
        set(&mut self.inb, ads::vhca_port_num.at(path), 1);
        set(&mut self.inb, qpc::mtu.at(q), mtu);
        set(&mut self.inb, qpc::log_msg_max.at(q), self.caps.log_max_msg as u64);
        set(&mut self.inb, qpc::remote_qpn.at(q), a.remote_qpn.0 as u64 & 0xff_ffff);
        set(&mut self.inb, qpc::next_rcv_psn.at(q), a.rq_psn as u64 & 0xff_ffff);
        let rra = log2_ceil(a.max_dest_rd_atomic as u32).min(self.caps.log_max_ra_res_qp);
        set(&mut self.inb, qpc::log_rra_max.at(q), rra as u64);
        set(&mut self.inb, qpc::min_rnr_nak.at(q), a.min_rnr_timer as u64);
        set(&mut self.inb, qpc::rre.at(q), a.access.remote_read as u64);
        set(&mut self.inb, qpc::rwe.at(q), a.access.remote_write as u64);
        set_bytes(&mut self.inb, ads::rgid_rip.at(path), &gid_from_ipv4(a.remote_ip));
        let m = a.remote_mac;
        set(&mut self.inb, ads::rmac_47_32.at(path), u16::from_be_bytes([m[0], m[1]]) as u64);
        set(&mut self.inb, ads::rmac_31_0.at(path), u32::from_be_bytes([m[2], m[3], m[4], m[5]]) as u64);
        set(&mut self.inb, ads::src_addr_index.at(path), 0);
        set(&mut self.inb, ads::hop_limit.at(path), 64);
        let sport = if a.udp_sport >= 0xc000 { a.udp_sport } else { rocev2_sport(qpn, a.remote_qpn) };
        set(&mut self.inb, ads::udp_sport.at(path), sport as u64);
        self.run(len, init2rtr_qp_out::LAYOUT.size)
    }

    /// RTR → RTS.
    pub fn qp_rtr2rts(&mut self, qpn: Qpn, a: &RcConnectAttrs) -> Result<(), Error> {
        let i = self.qp_index(qpn)?;
        self.rtr2rts(self.qps[i].ctl(), a)?;
        self.qps[i].state = QpState::Rts;
        Ok(())
    }

    /// RTR2RTS_QP for the QP `c` describes (its state is the caller's to set).
    pub(crate) fn rtr2rts(&mut self, c: QpCtl, a: &RcConnectAttrs) -> Result<(), Error> {
        let (qpn, kind) = (c.qpn, c.kind);
        if kind != QpKind::Rc {
            return Err(Error::InvalidArgument("RC attributes for a QP that is not RC"));
        }
        let len = self.begin_modify(op::RTR2RTS_QP, qpn);
        let q = rtr2rts_qp_in::qpc;
        let path = qpc::primary_address_path.at(q);
        set(&mut self.inb, qpc::pm_state.at(q), 3);
        set(&mut self.inb, qpc::next_send_psn.at(q), a.sq_psn as u64 & 0xff_ffff);
        set(&mut self.inb, qpc::retry_count.at(q), a.retry_cnt.min(7) as u64);
        set(&mut self.inb, qpc::rnr_retry.at(q), a.rnr_retry.min(7) as u64);
        let sra = log2_ceil(a.max_rd_atomic as u32).min(self.caps.log_max_ra_req_qp);
        set(&mut self.inb, qpc::log_sra_max.at(q), sra as u64);
        set(&mut self.inb, ads::ack_timeout.at(path), a.timeout.min(31) as u64);
        self.run(len, rtr2rts_qp_out::LAYOUT.size)
    }

    /// RESET → INIT → RTR → RTS for an RC QP.
    pub fn connect_rc(&mut self, qpn: Qpn, a: &RcConnectAttrs) -> Result<(), Error> {
        self.qp_rst2init(qpn, a.access)?;
        self.qp_init2rtr(qpn, a)?;
        self.qp_rtr2rts(qpn, a)
    }

    /// Bring the GSI QP (QP1) to RTS: a UD QP with no peer, so its transitions carry only the
    /// port, a 256-byte path MTU (MADs), 256-byte messages, the well-known Q_Key and send PSN 0,
    /// none of an RC connection's attributes.
    pub fn activate_gsi(&mut self, qpn: Qpn) -> Result<(), Error> {
        self.qp_rst2init(qpn, Access::default())?;
        let i = self.qp_index(qpn)?;
        if self.qps[i].kind != QpKind::Gsi {
            return Err(Error::InvalidArgument("activate_gsi on a QP that is not QP1"));
        }
        let len = self.begin_modify(op::INIT2RTR_QP, qpn);
        let q = init2rtr_qp_in::qpc;
        set(&mut self.inb, ads::vhca_port_num.at(qpc::primary_address_path.at(q)), 1);
        set(&mut self.inb, qpc::mtu.at(q), 1);
        set(&mut self.inb, qpc::log_msg_max.at(q), 8);
        set(&mut self.inb, qpc::q_key.at(q), GSI_QKEY as u64);
        self.run(len, init2rtr_qp_out::LAYOUT.size)?;
        self.qps[i].state = QpState::Rtr;
        let len = self.begin_modify(op::RTR2RTS_QP, qpn);
        let q = rtr2rts_qp_in::qpc;
        set(&mut self.inb, qpc::pm_state.at(q), 3);
        set(&mut self.inb, qpc::next_send_psn.at(q), 0);
        self.run(len, rtr2rts_qp_out::LAYOUT.size)?;
        self.qps[i].state = QpState::Rts;
        Ok(())
    }

    /// Any state → ERROR.
    pub fn qp_to_error(&mut self, qpn: Qpn) -> Result<(), Error> {
        let i = self.qp_index(qpn)?;
        self.simple(op::QP_2ERR, 0, qp_2err_in::LAYOUT.size, &[(qp_2err_in::qpn, qpn.0 as u64)])?;
        self.qps[i].state = QpState::Error;
        Ok(())
    }

    /// Any state → RESET.
    pub fn qp_to_reset(&mut self, qpn: Qpn) -> Result<(), Error> {
        let i = self.qp_index(qpn)?;
        self.simple(op::QP_2RST, 0, qp_2rst_in::LAYOUT.size, &[(qp_2rst_in::qpn, qpn.0 as u64)])?;
        let q = &mut self.qps[i];
        q.state = QpState::Reset;
        q.sq.reset();
        q.rq.reset();
        q.sq_unrung = None;
        q.dbr.write(0, &[0u8; 8]);
        Ok(())
    }

    /// DESTROY_QP. A QP on an SRQ goes to ERROR first, so a receive it had started comes back as
    /// a flushed completion. Then its CQEs still in its CQs are taken out ([`cq_clean`]: a
    /// receive from the SRQ is posted there again), so a later QP with the same number never
    /// gets them.
    pub fn destroy_qp(&mut self, qpn: Qpn) -> Result<(), Error> {
        let i = self.qp_index(qpn)?;
        let srq = self.qps[i].srq;
        if srq.is_some() && !matches!(self.qps[i].state, QpState::Error | QpState::Reset) {
            self.qp_to_error(qpn)?;
        }
        self.simple(op::DESTROY_QP, 0, destroy_qp_in::LAYOUT.size, &[(destroy_qp_in::qpn, qpn.0 as u64)])?;
        let (scq, rcq) = (self.qps[i].send_cq, self.qps[i].recv_cq);
        self.clean_cq(rcq, qpn, srq);
        if scq != rcq {
            self.clean_cq(scq, qpn, srq);
        }
        self.qps.remove(i);
        self.reindex();
        Ok(())
    }
}
