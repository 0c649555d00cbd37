//! Test harness: the rdma crate's soft Verbs double wrapped so a RAM block device can DMA
//! into the target's buffers by physical address, a simulated clock, and a direct CM.
#![allow(dead_code)]

pub mod raw;

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::{Rc, Weak};

use blockdev::{check_io, BlockDevice, BlockDone, BlockError, BlockIo, BlockOp};
use hal::{DmaRegion, DmaSlice, Hal, PhysAddr};
use nvmeof::host::{ConnectPoll, HostConfig, HostEnv};
use nvmeof::nvmet::rdma::{QueueAnswer, RdmaTarget};
use nvmeof::nvmet::{Core, NamespaceConfig, PortConfig, SubsystemConfig, TargetConfig};
use testbed::soft::{SoftBuf, SoftDevice, SoftError, SoftFabric};
use rdma::*;

/// Physical memory map shared by the devices of one node (buffers by base address).
#[derive(Clone, Default)]
pub struct MemMap(Rc<RefCell<BTreeMap<PhysAddr, Weak<SoftBuf>>>>);

impl MemMap {
    fn find(&self, addr: PhysAddr, len: usize) -> Option<(Rc<SoftBuf>, usize)> {
        let m = self.0.borrow();
        let (base, w) = m.range(..=addr).next_back()?;
        let b = w.upgrade()?;
        let off = (addr - base) as usize;
        if off + len > b.len() {
            return None;
        }
        Some((b, off))
    }
    pub fn read(&self, addr: PhysAddr, out: &mut [u8]) -> bool {
        match self.find(addr, out.len()) {
            Some((b, off)) => {
                b.read(off, out);
                true
            }
            None => false,
        }
    }
    pub fn write(&self, addr: PhysAddr, data: &[u8]) -> bool {
        match self.find(addr, data.len()) {
            Some((b, off)) => {
                b.write(off, data);
                true
            }
            None => false,
        }
    }
}

/// A DMA buffer shared between the verbs device and the memory map.
pub struct TBuf(Rc<SoftBuf>);
impl DmaRegion for TBuf {
    fn paddr(&self) -> PhysAddr {
        self.0.paddr()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn read(&self, offset: usize, buf: &mut [u8]) {
        self.0.read(offset, buf)
    }
    fn write(&self, offset: usize, data: &[u8]) {
        self.0.write(offset, data)
    }
}

/// A test device's `VerbsError`, `Neighbours` and `SrqVerbs`, passed to its field `$f` (its
/// `Control` is its own, with [`forward_control`], and so is its `DataPath`), and its poll
/// groups, each holding the data path `$p` that `|$d| $make` hands out (`$d: &$ty`).
macro_rules! forward_verbs {
    ($ty:ty, $f:ident, $p:ty, |$d:ident| $make:expr) => {
        impl VerbsError for $ty {
            type Error = SoftError;
        }
        impl Neighbours for $ty {
            fn local_ip(&self) -> Ipv4 {
                self.$f.local_ip()
            }
            fn local_mac(&self) -> Mac {
                self.$f.local_mac()
            }
            fn resolve_mac(&mut self, ip: Ipv4) -> Option<Mac> {
                self.$f.resolve_mac(ip)
            }
        }
        impl SrqVerbs for $ty {
            fn create_srq(&mut self, max_wr: u32) -> Result<Srqn, SoftError> {
                self.$f.create_srq(max_wr)
            }
            fn destroy_srq(&mut self, srq: Srqn) -> Result<(), SoftError> {
                self.$f.destroy_srq(srq)
            }
            fn create_rc_qp_srq(&mut self, s: Cqn, r: Cqn, sq: u32, srq: Srqn) -> Result<Qpn, SoftError> {
                self.$f.create_rc_qp_srq(s, r, sq, srq)
            }
            fn arm_srq(&mut self, srq: Srqn, limit: u32) -> Result<(), SoftError> {
                self.$f.arm_srq(srq, limit)
            }
            fn srq_limit_reached(&mut self, srq: Srqn) -> bool {
                self.$f.srq_limit_reached(srq)
            }
        }
        rdma::shared_groups!($ty, $p, |$d| $make);
    };
}
#[allow(unused_imports)] // not every test file forwards
pub(crate) use forward_verbs;

/// The `Control` methods but `alloc_buf` (each test device allocates its own way) of a test
/// device that passes them to its field `$f`.
macro_rules! forward_control {
    ($f:ident) => {
        fn reg_mr(&mut self, addr: hal::PhysAddr, len: u64, access: Access) -> Result<(Lkey, Rkey), SoftError> {
            self.$f.reg_mr(addr, len, access)
        }
        fn dereg_mr(&mut self, lkey: Lkey) -> Result<(), SoftError> {
            self.$f.dereg_mr(lkey)
        }
        fn alloc_fast_mr(&mut self, max_len: u64) -> Result<Rkey, SoftError> {
            self.$f.alloc_fast_mr(max_len)
        }
        fn create_cq(&mut self, entries: u32) -> Result<Cqn, SoftError> {
            self.$f.create_cq(entries)
        }
        fn destroy_cq(&mut self, cq: Cqn) -> Result<(), SoftError> {
            self.$f.destroy_cq(cq)
        }
        fn create_rc_qp(&mut self, s: Cqn, r: Cqn, sq: u32, rq: u32) -> Result<Qpn, SoftError> {
            self.$f.create_rc_qp(s, r, sq, rq)
        }
        fn connect_rc_qp(&mut self, qp: Qpn, a: &RcConnectAttrs) -> Result<(), SoftError> {
            self.$f.connect_rc_qp(qp, a)
        }
        fn qp_to_error(&mut self, qp: Qpn) -> Result<(), SoftError> {
            self.$f.qp_to_error(qp)
        }
        fn destroy_qp(&mut self, qp: Qpn) -> Result<(), SoftError> {
            self.$f.destroy_qp(qp)
        }
        fn gsi_qp(&self) -> Qpn {
            self.$f.gsi_qp()
        }
        fn gsi_cq(&self) -> Cqn {
            self.$f.gsi_cq()
        }
        fn poll(&mut self) {
            self.$f.poll()
        }
    };
}
#[allow(unused_imports)] // not every test file forwards
pub(crate) use forward_control;


/// SoftDevice + memory map.
pub struct TDev {
    pub dev: SoftDevice,
    pub mem: MemMap,
}

// Its data path is the soft device's, and so is each of its groups'.
forward_verbs!(TDev, dev, testbed::soft::SoftPath, |d| d.dev.data_path());

impl Control for TDev {
    type Buf = TBuf;
    fn alloc_buf(&mut self, len: usize) -> Result<TBuf, SoftError> {
        let b = Rc::new(self.dev.alloc_buf(len)?);
        self.mem.0.borrow_mut().insert(b.paddr(), Rc::downgrade(&b));
        Ok(TBuf(b))
    }
    forward_control!(dev);
}

impl DataPath for TDev {
    rdma::forward_data_path!(dev);
}

/// A DMA buffer of `len` bytes in memory of its own, in no node's memory map (a [`RamDisk`]
/// moving data through the map fails on it with a device error), and all of it as a slice.
/// Keep the region while the slice is in use.
pub fn unmapped_buf(len: usize) -> (testbed::SimDma, DmaSlice) {
    let hal = testbed::SimHal::new(testbed::PhysMem::new(), testbed::SimClock::new());
    let region = hal.dma_alloc(len, 4096).expect("test buffer");
    let slice = DmaSlice::whole(&region);
    (region, slice)
}

/// A RAM namespace whose "DMA" goes through the node's memory map. Its I/O handles (a poll
/// group's, `BlockDevice::io_handle`) share its blocks and its map (so a buffer the map lacks
/// fails on a handle as on the store), each with its own completions and byte count, as a
/// RAM namespace's handles share its memory.
pub struct RamDisk {
    pub mem: MemMap,
    pub data: Rc<RefCell<Vec<u8>>>,
    pub bs: u32,
    pub blocks: u64,
    pub done: VecDeque<BlockDone>,
    /// Bytes moved between the disk and DMA buffers (the device's DMA, not the target's CPU)
    /// by this value (the store, or one handle).
    pub dma_bytes: u64,
}

impl RamDisk {
    pub fn new(mem: MemMap, blocks: u64, bs: u32) -> Self {
        RamDisk { mem, data: Rc::new(RefCell::new(vec![0; (blocks * bs as u64) as usize])), bs, blocks, done: VecDeque::new(), dma_bytes: 0 }
    }
}

impl BlockDevice for RamDisk {
    fn block_size(&self) -> u32 {
        self.bs
    }
    fn num_blocks(&self) -> u64 {
        self.blocks
    }
    fn max_transfer_blocks(&self) -> u32 {
        1 << 16
    }
    fn submit(&mut self, io: &BlockIo) -> Result<(), BlockError> {
        check_io(io, self.bs, self.num_blocks(), self.max_transfer_blocks())?;
        let off = (io.lba * self.bs as u64) as usize;
        let len = io.blocks as usize * self.bs as usize;
        let mut data = self.data.borrow_mut();
        let ok = match io.op {
            BlockOp::Read => self.mem.write(io.buf.paddr(), &data[off..off + len]),
            BlockOp::Write => self.mem.read(io.buf.paddr(), &mut data[off..off + len]),
            BlockOp::WriteZeroes | BlockOp::Deallocate => {
                data[off..off + len].fill(0);
                true
            }
            BlockOp::Flush => true,
            BlockOp::Compare => return Err(BlockError::Unsupported),
        };
        if matches!(io.op, BlockOp::Read | BlockOp::Write) {
            self.dma_bytes += len as u64;
        }
        let result = if ok { Ok(()) } else { Err(BlockError::Device { sct: 0, sc: 4, dnr: false }) };
        self.done.push_back(BlockDone { tag: io.tag, result });
        Ok(())
    }
    fn poll(&mut self, out: &mut [BlockDone]) -> usize {
        let n = out.len().min(self.done.len());
        for (o, d) in out.iter_mut().zip(self.done.drain(..n)) {
            *o = d;
        }
        n
    }
    /// A disk on the same blocks and map with its own completions and byte count.
    fn io_handle(&mut self) -> Result<Self, BlockError> {
        Ok(RamDisk { mem: self.mem.clone(), data: Rc::clone(&self.data), bs: self.bs, blocks: self.blocks, done: VecDeque::new(), dma_bytes: 0 })
    }
}

pub const SUBNQN: &str = "nqn.2026-01.io.appliance:ram0";
pub const OTHER_NQN: &str = "nqn.2026-01.io.appliance:secret";
pub const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001";
pub const TARGET_IP: Ipv4 = [10, 0, 0, 1];
pub const HOST_IP: Ipv4 = [10, 0, 0, 2];

/// The target side of a test, driven by the host's waits. `D` is the target's device: the
/// soft device itself, or a wrapper that tampers with the target's traffic (tests/hostile.rs).
pub struct World<D: GroupVerbs = TDev> {
    pub target: RdmaTarget<D, RamDisk>,
    pub tdev: D,
    pub now: u64,
    /// ns added to the clock on every idle() call.
    pub tick_ns: u64,
    conns: BTreeMap<u32, (Qpn, ConnectPoll)>,
    /// Queues handed to a poll group, waiting for its answer: target QPN → crqsize of the REP.
    pending: BTreeMap<u32, u16>,
    next: u32,
    pub idle_calls: u64,
    /// The source address the target sees for connections made through `cm_connect`.
    pub peer_ip: Ipv4,
}

/// The direct "CM" of the test harnesses: the poll groups' answers to the queues handed over
/// (`pending`: target QPN → crqsize of the REP); as a CM would, a connection in `conns`
/// (handle → target QPN, state) becomes Connected (REP) or Rejected (REJ, no target QP) only now.
/// Returns the queues taken in for connections the host gave up meanwhile (pending, but the
/// handle gone): as the service does with an abandoned REQ, the caller closes them
/// (`RdmaTarget::disconnected`).
pub fn take_answers<V: GroupVerbs, B: BlockDevice>(target: &mut RdmaTarget<V, B>, pending: &mut BTreeMap<u32, u16>, conns: &mut BTreeMap<u32, (Qpn, ConnectPoll)>) -> Vec<Qpn> {
    let mut abandoned = Vec::new();
    while let Some(a) = target.take_answer() {
        let (qpn, st) = match a {
            QueueAnswer::Attached(q) => (q, pending.remove(&q.0).map(|crqsize| ConnectPoll::Connected { crqsize })),
            QueueAnswer::Refused(q, rej) => (q, pending.remove(&q.0).map(|_| ConnectPoll::Rejected(rej.sts.get()))),
        };
        let Some(st) = st else { continue };
        match conns.values_mut().find(|c| c.0 == qpn && c.1 == ConnectPoll::Pending) {
            Some(c) => *c = (if matches!(st, ConnectPoll::Rejected(_)) { Qpn(0) } else { qpn }, st),
            None if matches!(st, ConnectPoll::Connected { .. }) => abandoned.push(qpn),
            None => {}
        }
    }
    abandoned
}

pub fn attrs(remote: Qpn, ip: Ipv4) -> RcConnectAttrs {
    RcConnectAttrs {
        remote_qpn: remote,
        remote_ip: ip,
        mtu: 4096,
        retry_cnt: 7,
        rnr_retry: 7,
        timeout: 14,
        max_rd_atomic: 16,
        max_dest_rd_atomic: 16,
        access: Access { local_write: true, remote_read: true, remote_write: true },
        ..Default::default()
    }
}

/// The target configuration of [`make_world`].
pub fn world_cfg() -> TargetConfig {
    TargetConfig {
        ports: vec![PortConfig { portid: 1, traddr: TARGET_IP, trsvcid: 4420, subsystems: None }],
        inline_data_size: 4096,
        max_io_bytes: 32 * 1024,
        io_queue_depth: 64,
        max_io_queues: 2,
        max_ctrls: 8,
        ..TargetConfig::default()
    }
}

/// The initiator's configuration of the soft-verbs tests: 2 I/O queues of depth 32, 32 KiB
/// transfers.
pub fn host_cfg() -> HostConfig {
    HostConfig { hostnqn: HOSTNQN.into(), io_queues: 2, io_depth: 32, max_io_bytes: 32 * 1024, ..Default::default() }
}

pub fn make_world(fabric: &SoftFabric, blocks: u64, allowed: &[&str]) -> World {
    make_world_with(fabric, blocks, allowed, world_cfg(), 16)
}

/// [`make_world`] with another target configuration and RDMA queue limit.
pub fn make_world_with(fabric: &SoftFabric, blocks: u64, allowed: &[&str], cfg: TargetConfig, max_queues: usize) -> World {
    make_world_on(fabric, blocks, allowed, cfg, max_queues, |d| d)
}

/// [`make_world_with`] with the target's device wrapped by `wrap`.
pub fn make_world_on<D: GroupVerbs>(fabric: &SoftFabric, blocks: u64, allowed: &[&str], cfg: TargetConfig, max_queues: usize, wrap: impl FnOnce(TDev) -> D) -> World<D> {
    let mem = MemMap::default();
    let tdev = wrap(TDev { dev: fabric.add_device(TARGET_IP), mem: mem.clone() });
    let subs = vec![
        SubsystemConfig {
            nqn: SUBNQN.into(),
            serial: "APPL0001".into(),
            model: "appliance ram".into(),
            hosts: allowed.iter().map(|s| s.to_string()).collect(),
            allow_any_host: false,
            namespaces: vec![NamespaceConfig { nsid: 1, dev: RamDisk::new(mem.clone(), blocks, 512), nguid: [0x11; 16] }],
        },
        SubsystemConfig {
            nqn: OTHER_NQN.into(),
            serial: "APPL0002".into(),
            model: "appliance ram".into(),
            hosts: vec!["nqn.2014-08.org.nvmexpress:uuid:nobody".into()],
            allow_any_host: false,
            namespaces: vec![NamespaceConfig { nsid: 1, dev: RamDisk::new(mem.clone(), 64, 4096), nguid: [0x22; 16] }],
        },
    ];
    let core = Core::new(cfg, subs).expect("config");
    World { target: RdmaTarget::new(core, max_queues), tdev, now: 1_000_000, tick_ns: 1_000, conns: BTreeMap::new(), pending: BTreeMap::new(), next: 1, idle_calls: 0, peer_ip: HOST_IP }
}

impl<D: GroupVerbs> HostEnv<TDev> for World<D> {
    fn now_ns(&mut self) -> u64 {
        self.now += 50;
        self.now
    }
    fn idle(&mut self, _verbs: &mut TDev) {
        self.idle_calls += 1;
        self.now += self.tick_ns;
        rdma::Control::poll(&mut self.tdev);
        self.target.poll(&mut self.tdev, self.now);
        for q in take_answers(&mut self.target, &mut self.pending, &mut self.conns) {
            self.target.disconnected(&mut self.tdev, q);
        }
    }
    fn cm_connect(&mut self, verbs: &mut TDev, qp: Qpn, private: &[u8; 32]) -> Result<u32, ()> {
        let h = self.next;
        self.next += 1;
        let st = match self.target.accept(&mut self.tdev, private, &attrs(qp, self.peer_ip)) {
            Ok(p) => {
                verbs.connect_rc_qp(qp, &attrs(p.qpn, TARGET_IP)).map_err(|_| ())?;
                self.pending.insert(p.qpn.0, p.rep.crqsize.get());
                self.conns.insert(h, (p.qpn, ConnectPoll::Pending));
                return Ok(h);
            }
            Err(rej) => ConnectPoll::Rejected(rej.sts.get()),
        };
        self.conns.insert(h, (Qpn(0), st));
        Ok(h)
    }
    fn cm_poll(&mut self, _verbs: &mut TDev, handle: u32) -> ConnectPoll {
        self.conns.get(&handle).map_or(ConnectPoll::Failed, |c| c.1)
    }
    fn cm_disconnect(&mut self, _verbs: &mut TDev, handle: u32) {
        if let Some((tqp, _)) = self.conns.remove(&handle) {
            if tqp.0 != 0 {
                self.target.disconnected(&mut self.tdev, tqp);
            }
        }
    }
}

pub fn host_dev(fabric: &SoftFabric) -> TDev {
    TDev { dev: fabric.add_device(HOST_IP), mem: MemMap::default() }
}
