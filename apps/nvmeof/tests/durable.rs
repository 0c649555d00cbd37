//! Durable semantics through the target core, straight on `Core::execute`: a subsystem with
//! a namespace on a store with a volatile write cache (a scripted drive double) and one on a
//! RAM disk. Identify Controller reports VWC (broadcast Flush not supported) only when a
//! namespace sits on a volatile cache; a host Flush is forwarded and answered only after the
//! store completes it; FUA reaches the store on Read and Write; the store's error status is
//! the host's; Identify Namespace carries the store's identity and layout hints; MDTS is the
//! smaller of the target's and the stores' limits; the counters show all of it. A store that
//! fails takes only its namespace out of service, and hosts are told (Namespace Attribute
//! Changed).

use crate::common;

use std::cell::RefCell;
use std::rc::Rc;

use blockdev::{BlockDevice, BlockDone, BlockError, BlockIo, BlockOp, DevCounters, NsIdentity, OpLimits};
use common::raw::*;
use common::*;
use hal::DmaSlice;
use nvmeof::host::property_set_sqe;
use nvmeof::nvmet::{Action, Core, DataIn, Fetch, NamespaceConfig, QueueState, SubsystemConfig, TargetConfig};
use nvmeof::wire::*;
use nvmeof::Status;
use zerocopy::byteorder::little_endian::{U32, U64};
use zerocopy::{FromBytes, IntoBytes};

/// What the drive double saw and what it holds back.
#[derive(Default)]
struct DriveLog {
    /// Every I/O submitted (op, lba, blocks, fua).
    seen: Vec<(BlockOp, u64, u32, bool)>,
    /// Submitted, not yet completed by the "drive".
    held: Vec<u64>,
    /// Completed by the drive, to be reported by the next poll.
    done: Vec<BlockDone>,
    counters: DevCounters,
    /// The drive stopped answering (the driver stopped it).
    failed: bool,
}

/// A drive with a volatile write cache: completes an I/O only when the test releases it.
struct Drive(Rc<RefCell<DriveLog>>);

impl Drive {
    /// The drive finishes every held I/O with `result`.
    fn complete_all(log: &Rc<RefCell<DriveLog>>, result: Result<(), BlockError>) {
        let mut l = log.borrow_mut();
        let held: Vec<u64> = l.held.drain(..).collect();
        for tag in held {
            l.done.push(BlockDone { tag, result });
        }
    }
}

const NGUID: [u8; 16] = [0xD1; 16];
const EUI64: [u8; 8] = [0x52, 0x54, 0, 0, 0, 0, 0, 7];

impl BlockDevice for Drive {
    fn block_size(&self) -> u32 {
        4096
    }
    fn num_blocks(&self) -> u64 {
        1024
    }
    fn max_transfer_blocks(&self) -> u32 {
        16 // 64 KiB: below the target's 128 KiB
    }
    fn submit(&mut self, io: &BlockIo) -> Result<(), BlockError> {
        blockdev::check_io(io, 4096, 1024, 16)?;
        let mut l = self.0.borrow_mut();
        l.seen.push((io.op, io.lba, io.blocks, io.fua));
        l.held.push(io.tag);
        if io.op == BlockOp::Flush {
            l.counters.flushes_issued += 1;
        }
        Ok(())
    }
    fn poll(&mut self, out: &mut [BlockDone]) -> usize {
        let mut l = self.0.borrow_mut();
        let n = out.len().min(l.done.len());
        for (o, d) in out.iter_mut().zip(l.done.drain(..n)) {
            *o = d;
        }
        n
    }
    fn volatile_write_cache(&self) -> bool {
        true
    }
    fn identity(&self) -> Option<NsIdentity> {
        Some(NsIdentity { nguid: NGUID, eui64: EUI64, ncap: 1024, nuse: 1000, nsfeat: 0x10, dlfeat: 1, noiob: 32, npwg: 3, ..NsIdentity::default() })
    }
    fn counters(&self) -> DevCounters {
        self.0.borrow().counters
    }
    fn supports(&self, op: BlockOp) -> bool {
        op != BlockOp::WriteZeroes // a drive without Write Zeroes
    }
    fn op_limits(&self) -> OpLimits {
        OpLimits { write_zeroes_blocks: 0, deallocate_blocks: 8 } // DMRSL 8
    }
    fn failed(&self) -> bool {
        self.0.borrow().failed
    }
}

enum Ns {
    Drive(Drive),
    Ram(RamDisk),
}

impl BlockDevice for Ns {
    fn block_size(&self) -> u32 {
        match self {
            Ns::Drive(d) => d.block_size(),
            Ns::Ram(r) => r.block_size(),
        }
    }
    fn num_blocks(&self) -> u64 {
        match self {
            Ns::Drive(d) => d.num_blocks(),
            Ns::Ram(r) => r.num_blocks(),
        }
    }
    fn max_transfer_blocks(&self) -> u32 {
        match self {
            Ns::Drive(d) => d.max_transfer_blocks(),
            Ns::Ram(r) => r.max_transfer_blocks(),
        }
    }
    fn submit(&mut self, io: &BlockIo) -> Result<(), BlockError> {
        match self {
            Ns::Drive(d) => d.submit(io),
            Ns::Ram(r) => r.submit(io),
        }
    }
    fn poll(&mut self, out: &mut [BlockDone]) -> usize {
        match self {
            Ns::Drive(d) => d.poll(out),
            Ns::Ram(r) => r.poll(out),
        }
    }
    fn volatile_write_cache(&self) -> bool {
        matches!(self, Ns::Drive(_))
    }
    fn identity(&self) -> Option<NsIdentity> {
        match self {
            Ns::Drive(d) => d.identity(),
            Ns::Ram(_) => None,
        }
    }
    fn counters(&self) -> DevCounters {
        match self {
            Ns::Drive(d) => d.counters(),
            Ns::Ram(_) => DevCounters::default(),
        }
    }
    fn supports(&self, op: BlockOp) -> bool {
        match self {
            Ns::Drive(d) => d.supports(op),
            Ns::Ram(r) => r.supports(op),
        }
    }
    fn op_limits(&self) -> OpLimits {
        match self {
            Ns::Drive(d) => d.op_limits(),
            Ns::Ram(r) => r.op_limits(),
        }
    }
    fn failed(&self) -> bool {
        match self {
            Ns::Drive(d) => d.failed(),
            Ns::Ram(r) => r.failed(),
        }
    }
}

const NONE: DataIn<'static> = DataIn { bytes: &[], buf: DmaSlice::EMPTY, sgl_len: 0, tag: 0, fetched: true };

fn respond(a: Action) -> (Status, u32) {
    match a {
        Action::Respond { status, dw0, .. } => (status, dw0),
        other => panic!("expected a response, got {other:?}"),
    }
}

/// A core with `namespaces`, an enabled controller, and one I/O queue.
fn connected(namespaces: Vec<NamespaceConfig<Ns>>) -> (Core<Ns>, QueueState, QueueState) {
    let subs = vec![SubsystemConfig {
        nqn: SUBNQN.into(),
        serial: "s".into(),
        model: "m".into(),
        hosts: vec![HOSTNQN.into()],
        allow_any_host: false,
        namespaces,
    }];
    let mut core = Core::new(TargetConfig { ports: vec![], ..TargetConfig::default() }, subs).unwrap();
    let mut aq = QueueState::new(0);
    let cd = connect_data(0xFFFF);
    let (st, cntlid) = respond(core.execute(&mut aq, &connect_sqe(0, 31, 1), &DataIn { bytes: cd.as_bytes(), sgl_len: 1024, ..NONE }, 0));
    assert!(st.is_success());
    assert!(respond(core.execute(&mut aq, &property_set_sqe(prop::CC, 0x0046_0001), &NONE, 0)).0.is_success());
    let mut iq = QueueState::new(1);
    let idata = connect_data(cntlid as u16);
    assert!(respond(core.execute(&mut iq, &connect_sqe(1, 31, 2), &DataIn { bytes: idata.as_bytes(), sgl_len: 1024, ..NONE }, 0)).0.is_success());
    (core, aq, iq)
}

fn identify(core: &mut Core<Ns>, aq: &mut QueueState, cns: u8, nsid: u32) -> Vec<u8> {
    let mut s = sqe(admin_op::IDENTIFY, 5);
    s.cdw10 = U32::new(cns as u32);
    s.nsid = U32::new(nsid);
    assert!(respond(core.execute(aq, &s, &DataIn { sgl_len: 4096, ..NONE }, 0)).0.is_success());
    core.out()[..4096].to_vec()
}

fn io_sqe(op: u8, nsid: u32, slba: u64, nlb: u32, fua: bool) -> Sqe {
    let mut s = sqe(op, 7);
    s.nsid = U32::new(nsid);
    s.cdw10 = U32::new(slba as u32);
    s.cdw11 = U32::new((slba >> 32) as u32);
    s.cdw12 = U32::new((nlb - 1) | if fua { 1 << 30 } else { 0 });
    s
}

/// Every completion the core reports now: (tag, status).
fn reap(core: &mut Core<Ns>) -> Vec<(u64, Status)> {
    let mut v = vec![];
    core.poll_block(64, |t, s| v.push((t, s)));
    v
}

fn drive_and_ram() -> (Rc<RefCell<DriveLog>>, Vec<NamespaceConfig<Ns>>) {
    let log = Rc::new(RefCell::new(DriveLog::default()));
    let mem = MemMap::default();
    let nss = vec![
        NamespaceConfig { nsid: 1, dev: Ns::Drive(Drive(log.clone())), nguid: NGUID },
        NamespaceConfig { nsid: 2, dev: Ns::Ram(RamDisk::new(mem, 64, 512)), nguid: [2; 16] },
    ];
    (log, nss)
}

#[test]
fn vwc_reported_only_with_a_volatile_cache_and_mdts_is_the_smaller_limit() {
    let (_log, nss) = drive_and_ram();
    let (mut core, mut aq, _iq) = connected(nss);
    let id = IdentifyCtrl::read_from_bytes(&identify(&mut core, &mut aq, cns::CONTROLLER, 0)).unwrap();
    assert_eq!(id.vwc, 0b101, "present; Flush with NSID FFFFFFFFh not supported");
    assert_eq!(id.mdts, 4, "64 KiB (the drive's) < 128 KiB (the target's)");
    assert_eq!(id.oncs.get(), oncs::DSM, "the drive lacks Write Zeroes: not offered");

    let mem = MemMap::default();
    let ram_only = vec![NamespaceConfig { nsid: 1, dev: Ns::Ram(RamDisk::new(mem, 64, 512)), nguid: [2; 16] }];
    let (mut core, mut aq, _iq) = connected(ram_only);
    let id = IdentifyCtrl::read_from_bytes(&identify(&mut core, &mut aq, cns::CONTROLLER, 0)).unwrap();
    assert_eq!(id.vwc, 0, "RAM: no volatile cache");
    assert_eq!(id.mdts, 5, "the target's 128 KiB");
    assert_eq!(id.oncs.get(), oncs::DSM | oncs::WRITE_ZEROES);
}

#[test]
fn host_flush_waits_for_the_drives_flush() {
    let (log, nss) = drive_and_ram();
    let (mut core, _aq, mut iq) = connected(nss);
    let a = core.execute(&mut iq, &io_sqe(io_op::FLUSH, 1, 0, 1, false), &DataIn { tag: 77, ..NONE }, 0);
    assert_eq!(a, Action::Submitted { count: 1 });
    assert_eq!(log.borrow().seen, vec![(BlockOp::Flush, 0, 0, false)]);
    for _ in 0..10 {
        assert!(reap(&mut core).is_empty(), "no answer before the drive completes the Flush");
    }
    assert!(core.block_inflight());
    Drive::complete_all(&log, Ok(()));
    assert_eq!(reap(&mut core), vec![(77, Status::SUCCESS)]);
    let ns: Vec<_> = core.namespace_stats().collect();
    assert_eq!((ns[0].nsid, ns[0].volatile_write_cache, ns[0].stats.flushes_forwarded), (1, true, 1));
    assert_eq!((ns[0].dev.flushes_issued, ns[1].volatile_write_cache), (1, false));
    // Broadcast Flush: refused as Identify Controller says (Invalid Namespace).
    let (st, _) = respond(core.execute(&mut iq, &io_sqe(io_op::FLUSH, 0xFFFF_FFFF, 0, 1, false), &NONE, 0));
    assert_eq!(st, Status::INVALID_NS);
    // Flush of the RAM namespace: completes at once (nothing volatile).
    assert_eq!(core.execute(&mut iq, &io_sqe(io_op::FLUSH, 2, 0, 1, false), &DataIn { tag: 78, ..NONE }, 0), Action::Submitted { count: 1 });
    assert_eq!(reap(&mut core), vec![(78, Status::SUCCESS)]);
}

#[test]
fn fua_reaches_the_drive_and_drive_errors_reach_the_host() {
    let (log, nss) = drive_and_ram();
    let (mut core, _aq, mut iq) = connected(nss);
    let (_mem, buf) = unmapped_buf(8192);
    let data = |tag| DataIn { bytes: &[], buf, sgl_len: 8192, tag, fetched: true };
    for (op, fua, tag) in [(io_op::WRITE, true, 1), (io_op::WRITE, false, 2), (io_op::READ, true, 3)] {
        assert_eq!(core.execute(&mut iq, &io_sqe(op, 1, 8, 2, fua), &data(tag), 0), Action::Submitted { count: 1 });
    }
    let seen: Vec<(BlockOp, bool)> = log.borrow().seen.iter().map(|s| (s.0, s.3)).collect();
    assert_eq!(seen, vec![(BlockOp::Write, true), (BlockOp::Write, false), (BlockOp::Read, true)]);
    // The drive fails them with Unrecovered Read Error (media error: SCT 2, SC 81h, Do Not
    // Retry): the host gets exactly that, DNR included (no retries of a hopeless command).
    Drive::complete_all(&log, Err(BlockError::Device { sct: 2, sc: 0x81, dnr: true }));
    let got = reap(&mut core);
    assert_eq!(got.len(), 3);
    assert!(got.iter().all(|(_, s)| *s == Status { sct: 2, sc: 0x81, dnr: true }), "{got:?}");
    // A retryable drive error stays retryable.
    assert_eq!(core.execute(&mut iq, &io_sqe(io_op::WRITE, 1, 8, 2, false), &data(4), 0), Action::Submitted { count: 1 });
    Drive::complete_all(&log, Err(BlockError::Device { sct: 0, sc: 0x06, dnr: false }));
    assert_eq!(reap(&mut core), vec![(4, Status { sct: 0, sc: 0x06, dnr: false })]);
    let ns = core.namespace_stats().next().unwrap();
    assert_eq!((ns.stats.fua_writes, ns.stats.fua_reads), (1, 1));
}

#[test]
fn identify_namespace_carries_the_drives_identity() {
    let (_log, nss) = drive_and_ram();
    let (mut core, mut aq, _iq) = connected(nss);
    let id = IdentifyNs::read_from_bytes(&identify(&mut core, &mut aq, cns::NAMESPACE, 1)).unwrap();
    assert_eq!((id.nsze.get(), id.ncap.get(), id.nuse.get()), (1024, 1024, 1000));
    assert_eq!(id.lbaf[0].lbads, 12);
    assert_eq!((id.nguid, id.eui64), (NGUID, EUI64));
    assert_eq!((id.nsfeat, id.dlfeat, id.noiob.get(), id.npwg.get()), (0x10, 1, 32, 3));
    // Descriptor list: EUI-64, NGUID, UUID, CSI.
    let d = identify(&mut core, &mut aq, cns::NS_DESC_LIST, 1);
    assert_eq!((d[0], d[1]), (nidt::EUI64, 8));
    assert_eq!(d[4..12], EUI64);
    assert_eq!((d[12], d[13]), (nidt::NGUID, 16));
    assert_eq!(d[16..32], NGUID);
    // The RAM namespace has no EUI-64: the list starts with its NGUID.
    let d = identify(&mut core, &mut aq, cns::NS_DESC_LIST, 2);
    assert_eq!((d[0], d[1], d[4]), (nidt::NGUID, 16, 2));
}

#[test]
fn a_failed_drive_takes_only_its_namespace_out_and_hosts_are_told() {
    let (log, nss) = drive_and_ram();
    let (mut core, mut aq, mut iq) = connected(nss);
    // The host arms Namespace Attribute Notices and posts an Asynchronous Event Request.
    let mut sf = sqe(admin_op::SET_FEATURES, 8);
    sf.cdw10 = U32::new(fid::ASYNC_EVENT_CONFIG as u32);
    sf.cdw11 = U32::new(AEC_NS_ATTR);
    assert!(respond(core.execute(&mut aq, &sf, &NONE, 0)).0.is_success());
    assert_eq!(core.execute(&mut aq, &sqe(admin_op::ASYNC_EVENT, 9), &DataIn { tag: 900, ..NONE }, 0), Action::Hold);
    // A write is at the drive when the drive stops answering: the driver fails it.
    let (_mem, buf) = unmapped_buf(8192);
    let data = |tag| DataIn { bytes: &[], buf, sgl_len: 8192, tag, fetched: true };
    assert_eq!(core.execute(&mut iq, &io_sqe(io_op::WRITE, 1, 8, 2, false), &data(11), 0), Action::Submitted { count: 1 });
    log.borrow_mut().failed = true;
    Drive::complete_all(&log, Err(BlockError::Timeout));
    assert_eq!(reap(&mut core), vec![(11, Status::DATA_XFER_ERROR)]);
    // Hosts are told once: Namespace Attribute Changed, Changed Namespace List names nsid 1.
    assert_eq!(core.take_aen(), Some((900, AEN_NS_CHANGED)));
    assert_eq!(core.take_aen(), None);
    let mut gl = sqe(admin_op::GET_LOG_PAGE, 10);
    gl.cdw10 = U32::new(lid::CHANGED_NS as u32 | (1023 << 16));
    assert!(respond(core.execute(&mut aq, &gl, &DataIn { sgl_len: 4096, ..NONE }, 0)).0.is_success());
    assert_eq!(core.out()[..8], [1, 0, 0, 0, 0, 0, 0, 0]);
    // The namespace is inactive: not listed, Identify all zero, I/O refused before the drive.
    let list = identify(&mut core, &mut aq, cns::ACTIVE_NS_LIST, 0);
    assert_eq!(list[..8], [2, 0, 0, 0, 0, 0, 0, 0]);
    assert!(identify(&mut core, &mut aq, cns::NAMESPACE, 1).iter().all(|b| *b == 0));
    let seen = log.borrow().seen.len();
    let (st, _) = respond(core.execute(&mut iq, &io_sqe(io_op::READ, 1, 8, 2, false), &data(12), 0));
    assert_eq!(st, Status::INVALID_NS);
    assert_eq!(log.borrow().seen.len(), seen, "nothing reached the failed drive");
    // The other namespace keeps serving.
    assert_eq!(core.execute(&mut iq, &io_sqe(io_op::FLUSH, 2, 0, 1, false), &DataIn { tag: 13, ..NONE }, 0), Action::Submitted { count: 1 });
    assert_eq!(reap(&mut core), vec![(13, Status::SUCCESS)]);
    let ns: Vec<bool> = core.namespace_stats().map(|n| n.stats.failed).collect();
    assert_eq!(ns, vec![true, false]);
}

#[test]
fn transfers_over_mdts_are_refused_before_any_data_moves() {
    let (log, nss) = drive_and_ram();
    let (mut core, _aq, mut iq) = connected(nss);
    let (_mem, buf) = unmapped_buf(128 * 1024);
    let data = |len: u32, tag, fetched| DataIn { bytes: &[], buf, sgl_len: len, tag, fetched };
    // 64 KiB (16 blocks) is the drive's limit, so the subsystem's MDTS: served.
    assert_eq!(core.execute(&mut iq, &io_sqe(io_op::READ, 1, 0, 16, false), &data(16 * 4096, 1, true), 0), Action::Submitted { count: 1 });
    // One block more (still under the target's own 128 KiB): Invalid Field in Command, as the
    // spec has for a transfer over MDTS; the drive never sees it, and a Write is refused
    // before its data is fetched from the host (no RDMA READ for a doomed command).
    let (st, _) = respond(core.execute(&mut iq, &io_sqe(io_op::READ, 1, 0, 17, false), &data(17 * 4096, 2, true), 0));
    assert_eq!(st, Status::INVALID_FIELD);
    let (st, _) = respond(core.execute(&mut iq, &io_sqe(io_op::WRITE, 1, 0, 17, false), &data(17 * 4096, 3, false), 0));
    assert_eq!(st, Status::INVALID_FIELD);
    assert_eq!(log.borrow().seen.len(), 1, "only the 64 KiB Read reached the drive");
}

/// A drive removed (or failing its submissions) while nothing is in flight: no completion
/// tells the core, so its slow-path check does: the namespace goes out of service once and
/// the hosts are told.
#[test]
fn a_drive_failed_with_nothing_in_flight_is_found_by_the_slow_path_check() {
    let (log, nss) = drive_and_ram();
    let (mut core, mut aq, _iq) = connected(nss);
    let mut sf = sqe(admin_op::SET_FEATURES, 8);
    sf.cdw10 = U32::new(fid::ASYNC_EVENT_CONFIG as u32);
    sf.cdw11 = U32::new(AEC_NS_ATTR);
    assert!(respond(core.execute(&mut aq, &sf, &NONE, 0)).0.is_success());
    assert_eq!(core.execute(&mut aq, &sqe(admin_op::ASYNC_EVENT, 9), &DataIn { tag: 900, ..NONE }, 0), Action::Hold);
    assert_eq!(core.check_stores(), 0);
    log.borrow_mut().failed = true;
    assert_eq!(reap(&mut core), vec![], "nothing in flight, nothing reaped");
    assert_eq!(core.check_stores(), 1);
    assert_eq!(core.take_aen(), Some((900, AEN_NS_CHANGED)));
    assert_eq!(core.check_stores(), 0, "announced once");
    assert_eq!(core.take_aen(), None);
    let ns: Vec<bool> = core.namespace_stats().map(|n| n.stats.failed).collect();
    assert_eq!(ns, vec![true, false]);
}

/// Identify CNS 06h (NVM command set) carries the tightest store limits: WZSL from the stores
/// with Write Zeroes, DMRSL from the drive's Deallocate limit; a Dataset Management range
/// beyond it is refused with Invalid Field before any range reaches the drive.
#[test]
fn nvm_limits_reported_and_a_deallocate_beyond_them_refused() {
    let (log, nss) = drive_and_ram();
    let ram_wz = RamDisk::new(MemMap::default(), 64, 512).op_limits().write_zeroes_blocks as u64 * 512;
    let (mut core, mut aq, mut iq) = connected(nss);
    let id = IdentifyCtrlNvm::read_from_bytes(&identify(&mut core, &mut aq, cns::NVM_CTRL, 0)).unwrap();
    assert_eq!(id.dmrsl.get(), 8, "the drive's DMRSL, the smaller");
    assert_eq!((id.dmrl, id.dmsl.get()), (0, 0), "one drive command per range: no count or total limit");
    assert_eq!(4096u64 << id.wzsl, 4096u64 << (63 - (ram_wz / 4096).leading_zeros()), "the RAM namespace's (the drive has no Write Zeroes)");
    let dsm = |ranges: &[(u64, u32)], tag| {
        let mut bytes = vec![];
        for &(slba, nlb) in ranges {
            bytes.extend_from_slice(DsmRange { cattr: U32::new(0), nlb: U32::new(nlb), slba: U64::new(slba) }.as_bytes());
        }
        let mut s = sqe(io_op::DSM, 9);
        s.nsid = U32::new(1);
        s.cdw10 = U32::new(ranges.len() as u32 - 1);
        s.cdw11 = U32::new(1 << 2); // deallocate
        (s, bytes, tag)
    };
    let (s, bytes, tag) = dsm(&[(0, 8), (100, 9)], 5);
    let (st, _) = respond(core.execute(&mut iq, &s, &DataIn { bytes: &bytes, sgl_len: bytes.len() as u32, tag, ..NONE }, 0));
    assert_eq!(st, Status::INVALID_FIELD);
    assert!(log.borrow().seen.is_empty(), "no range reached the drive");
    let (s, bytes, tag) = dsm(&[(0, 8), (100, 8)], 6);
    assert_eq!(core.execute(&mut iq, &s, &DataIn { bytes: &bytes, sgl_len: bytes.len() as u32, tag, ..NONE }, 0), Action::Submitted { count: 2 });
    assert_eq!(log.borrow().seen, vec![(BlockOp::Deallocate, 0, 8, false), (BlockOp::Deallocate, 100, 8, false)]);
}

/// Compare: ONCS bit 0 only when every store compares; the host's data is fetched into the
/// transport's buffer (never namespace memory) and the Compare goes to the store with it, its
/// Compare Failure being the host's status.
#[test]
fn compare_fetched_then_passed_to_the_store() {
    let (_log, nss) = drive_and_ram();
    let (mut core, mut aq, _iq) = connected(nss);
    let id = IdentifyCtrl::read_from_bytes(&identify(&mut core, &mut aq, cns::CONTROLLER, 0)).unwrap();
    assert_eq!(id.oncs.get() & oncs::COMPARE, 0, "the RAM namespace does not compare");

    let log = Rc::new(RefCell::new(DriveLog::default()));
    let (mut core, mut aq, mut iq) = connected(vec![NamespaceConfig { nsid: 1, dev: Ns::Drive(Drive(log.clone())), nguid: NGUID }]);
    let id = IdentifyCtrl::read_from_bytes(&identify(&mut core, &mut aq, cns::CONTROLLER, 0)).unwrap();
    assert_eq!(id.oncs.get() & oncs::COMPARE, oncs::COMPARE);
    let (_mem, keyed_buf) = unmapped_buf(8192);
    let keyed = DataIn { bytes: &[], buf: keyed_buf, sgl_len: 8192, tag: 31, fetched: false };
    let Action::Fetch(Fetch::Write(w)) = core.execute(&mut iq, &io_sqe(io_op::COMPARE, 1, 8, 2, false), &keyed, 0) else { panic!("the data is fetched first") };
    assert_eq!(w.direct_buf(), None, "into the transport's buffer");
    assert!(log.borrow().seen.is_empty());
    let (_slot_mem, slot_buf) = unmapped_buf(8192);
    assert_eq!(core.write_fetched(&w, slot_buf, 31), Action::Submitted { count: 1 });
    assert_eq!(log.borrow().seen, vec![(BlockOp::Compare, 8, 2, false)]);
    Drive::complete_all(&log, Err(BlockError::Device { sct: 2, sc: 0x85, dnr: true }));
    assert_eq!(reap(&mut core), vec![(31, Status { sct: 2, sc: 0x85, dnr: true })]);
}
