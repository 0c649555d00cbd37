//! The soft device as apps hold it ([`SoftDevice`]: control, data path, neighbours) and the
//! data-path handle its poll groups hold ([`SoftPath`]): two handles on one device state behind
//! its lock, so a group can post and poll on another thread without the device object.

use super::*;

/// One soft RDMA device (port) on a [`SoftFabric`]: every verb locks the device's state once.
pub struct SoftDevice {
    path: SoftPath,
}

/// The data path of a soft device, apart from it: what each of its poll groups holds
/// ([`rdma::SharedGroup`]). Posts and polls as the device does (the same state, the same lock).
#[derive(Clone)]
pub struct SoftPath {
    st: Arc<Mutex<SoftState>>,
}

impl SoftDevice {
    pub(super) fn new(st: SoftState) -> Self {
        SoftDevice { path: SoftPath { st: Arc::new(Mutex::new(st)) } }
    }

    fn st(&self) -> std::sync::MutexGuard<'_, SoftState> {
        locked(&self.path.st)
    }

    /// A handle on this device's data path (what a poll group holds).
    pub fn data_path(&self) -> SoftPath {
        self.path.clone()
    }

    /// Live resources, for leak checks.
    pub fn resources(&mut self) -> Resources {
        self.st().resources()
    }

    /// The attributes an RC QP was connected with (`None` before `connect_rc_qp` / unknown QP).
    pub fn qp_attrs(&self, qp: Qpn) -> Option<RcConnectAttrs> {
        self.st().qp_attrs(qp)
    }

    /// UD datagrams dropped at this device (no receive posted, bad Q_Key, short buffer).
    pub fn ud_dropped(&self) -> u64 {
        self.st().ud_dropped()
    }

    /// Send doorbells rung on the device and through its groups' data paths: one per
    /// `post_send`, one per `ring_send` with WRs pending (what an adapter would see as MMIO
    /// doorbell writes).
    pub fn doorbells(&self) -> u64 {
        self.st().doorbells()
    }

    /// Completions lost because a CQ was full.
    pub fn cq_overruns(&self) -> u64 {
        self.st().cq_overruns()
    }
}

impl rdma::SrqLimitPath for SoftPath {
    fn srq_limit_reached(&mut self, srq: Srqn) -> bool {
        SrqVerbs::srq_limit_reached(&mut *locked(&self.st), srq)
    }
}

impl VerbsError for SoftPath {
    type Error = SoftError;
}

impl DataPath for SoftPath {
    fn post_send(&mut self, qp: Qpn, wr: &SendWr) -> Result<(), SoftError> {
        locked(&self.st).post_send(qp, wr)
    }
    fn post_send_deferred(&mut self, qp: Qpn, wr: &SendWr) -> Result<(), SoftError> {
        locked(&self.st).post_send_deferred(qp, wr)
    }
    fn ring_send(&mut self, qp: Qpn) -> Result<(), SoftError> {
        locked(&self.st).ring_send(qp)
    }
    fn post_recv(&mut self, qp: Qpn, wr: &RecvWr) -> Result<(), SoftError> {
        locked(&self.st).post_recv(qp, wr)
    }
    fn post_srq_recv(&mut self, srq: Srqn, wr: &RecvWr) -> Result<(), SoftError> {
        locked(&self.st).post_srq_recv(srq, wr)
    }
    fn poll_cq(&mut self, cq: Cqn, out: &mut [Completion]) -> usize {
        locked(&self.st).poll_cq(cq, out)
    }
}

impl VerbsError for SoftDevice {
    type Error = SoftError;
}

impl DataPath for SoftDevice {
    rdma::forward_data_path!(path);
}

impl Neighbours for SoftDevice {
    fn local_ip(&self) -> Ipv4 {
        self.st().local_ip()
    }
    fn local_mac(&self) -> Mac {
        self.st().local_mac()
    }
    fn resolve_mac(&mut self, ip: Ipv4) -> Option<Mac> {
        self.st().resolve_mac(ip)
    }
}

impl Control for SoftDevice {
    type Buf = SoftBuf;
    fn alloc_buf(&mut self, len: usize) -> Result<SoftBuf, SoftError> {
        self.st().alloc_buf(len)
    }
    fn reg_mr(&mut self, addr: PhysAddr, len: u64, access: Access) -> Result<(Lkey, Rkey), SoftError> {
        self.st().reg_mr(addr, len, access)
    }
    fn dereg_mr(&mut self, lkey: Lkey) -> Result<(), SoftError> {
        self.st().dereg_mr(lkey)
    }
    fn alloc_fast_mr(&mut self, max_len: u64) -> Result<Rkey, SoftError> {
        self.st().alloc_fast_mr(max_len)
    }
    fn create_cq(&mut self, entries: u32) -> Result<Cqn, SoftError> {
        self.st().create_cq(entries)
    }
    fn destroy_cq(&mut self, cq: Cqn) -> Result<(), SoftError> {
        self.st().destroy_cq(cq)
    }
    fn create_rc_qp(&mut self, send_cq: Cqn, recv_cq: Cqn, sq: u32, rq: u32) -> Result<Qpn, SoftError> {
        self.st().create_rc_qp(send_cq, recv_cq, sq, rq)
    }
    fn connect_rc_qp(&mut self, qp: Qpn, attrs: &RcConnectAttrs) -> Result<(), SoftError> {
        self.st().connect_rc_qp(qp, attrs)
    }
    fn qp_to_error(&mut self, qp: Qpn) -> Result<(), SoftError> {
        self.st().qp_to_error(qp)
    }
    fn destroy_qp(&mut self, qp: Qpn) -> Result<(), SoftError> {
        self.st().destroy_qp(qp)
    }
    fn gsi_qp(&self) -> Qpn {
        self.st().gsi_qp()
    }
    fn gsi_cq(&self) -> Cqn {
        self.st().gsi_cq()
    }
    fn poll(&mut self) {
        self.st().poll()
    }
}

impl SrqVerbs for SoftDevice {
    fn create_srq(&mut self, max_wr: u32) -> Result<Srqn, SoftError> {
        self.st().create_srq(max_wr)
    }
    fn destroy_srq(&mut self, srq: Srqn) -> Result<(), SoftError> {
        self.st().destroy_srq(srq)
    }
    fn create_rc_qp_srq(&mut self, send_cq: Cqn, recv_cq: Cqn, sq: u32, srq: Srqn) -> Result<Qpn, SoftError> {
        self.st().create_rc_qp_srq(send_cq, recv_cq, sq, srq)
    }
    fn arm_srq(&mut self, srq: Srqn, limit: u32) -> Result<(), SoftError> {
        self.st().arm_srq(srq, limit)
    }
    fn srq_limit_reached(&mut self, srq: Srqn) -> bool {
        self.st().srq_limit_reached(srq)
    }
}

// Poll groups: the soft device's data path is not split; each group holds a [`SoftPath`].
rdma::shared_groups!(SoftDevice, SoftPath, |d| d.data_path());
