//! A hostile target against the appliance initiator: the real target over a device wrapper
//! ([`Evil`]) that rewrites what the target sends (Identify data, CAP, the discovery log,
//! response capsules) or sends responses of its own (duplicates, late and garbage command
//! IDs, short capsules). The initiator must fail the connection with a typed error carrying
//! the value, never panic, and never report a read as good whose data the target did not
//! deliver.

use crate::common;
use common::*;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use hal::DmaRegion;
use nvmeof::host::{DiscField, Host, HostConfig, IoDone, IoKind, TargetFault, MAX_CAPSULE};
use nvmeof::wire::*;
use nvmeof::wire::prop;
use nvmeof::{Error, Status};
use proptest::prelude::*;
use testbed::soft::{SoftError, SoftFabric, SoftPath};
use rdma::*;
use zerocopy::{FromBytes, IntoBytes, KnownLayout, Immutable};

/// What the hostile target does with one response capsule.
struct Reply {
    /// Bytes actually sent (16 normally; fewer for a short capsule).
    len: u32,
    /// Capsules sent right after this one (duplicates, late or invented responses).
    after: Vec<Vec<u8>>,
}

/// `(qid, command, data the target RDMA-WRITEs for it)`: edit in place, may shorten.
type DataHook = Box<dyn FnMut(u16, &Sqe, &mut Vec<u8>)>;
/// `(qid, command, response, reply)`: edit the response, add more.
type CqeHook = Box<dyn FnMut(u16, &Sqe, &mut Cqe, &mut Reply)>;
/// `(qid, command)` as the target receives it: capsules to send before the target answers.
type CmdHook = Box<dyn FnMut(u16, &Sqe) -> Vec<Vec<u8>>>;

/// The target's device with a hostile hand on its traffic: its control part is the test
/// device's; its data path, and each of its poll groups', is an [`EvilPath`] sharing the hooks.
struct Evil {
    dev: TDev,
    path: EvilPath,
}

/// The hostile data path: the soft device's, through the hooks and what they learnt.
#[derive(Clone)]
struct EvilPath {
    dev: SoftPath,
    mem: MemMap,
    h: Rc<RefCell<Hooks>>,
}

/// The hooks and the traffic they have seen.
struct Hooks {
    data: Option<DataHook>,
    cqe: Option<CqeHook>,
    cmd: Option<CmdHook>,
    /// Receive buffers the target posted: (QPN, wr_id) → address (QPN 0: to an SRQ).
    recvs: HashMap<(u32, u64), u64>,
    /// Queue ID of each target QP (from its Fabrics Connect).
    qids: HashMap<u32, u16>,
    /// Commands received and not yet answered, per (QPN, CID).
    cmds: HashMap<(u32, u16), Sqe>,
    /// Where invented capsules are sent from.
    spare: (TBuf, Lkey),
    spare_next: usize,
}

const SPARE_SLOT: usize = 256;
const SPARE_SLOTS: usize = 64;

impl Evil {
    fn new(mut dev: TDev) -> Self {
        let b = dev.alloc_buf(SPARE_SLOT * SPARE_SLOTS).unwrap();
        let (l, _) = dev.reg_mr(b.paddr(), b.len() as u64, Access { local_write: true, ..Default::default() }).unwrap();
        let h = Hooks { data: None, cqe: None, cmd: None, recvs: HashMap::new(), qids: HashMap::new(), cmds: HashMap::new(), spare: (b, l), spare_next: 0 };
        let path = EvilPath { dev: dev.dev.data_path(), mem: dev.mem.clone(), h: Rc::new(RefCell::new(h)) };
        Evil { dev, path }
    }

    /// The hooks (set and cleared by the tests).
    fn hooks(&self) -> std::cell::RefMut<'_, Hooks> {
        self.path.h.borrow_mut()
    }
}

impl EvilPath {
    fn qid(&self, qp: Qpn) -> u16 {
        self.h.borrow().qids.get(&qp.0).copied().unwrap_or(0)
    }

    /// Send `bytes` on `qp` from the spare buffer, unsignaled, after everything posted so far.
    fn inject(&mut self, qp: Qpn, bytes: &[u8]) {
        let wr = {
            let mut h = self.h.borrow_mut();
            let off = (h.spare_next % SPARE_SLOTS) * SPARE_SLOT;
            h.spare_next += 1;
            let (buf, lkey) = &h.spare;
            buf.write(off, bytes);
            SendWr { wr_id: u64::MAX, op: SendOp::Send, sge: Sge { addr: buf.paddr() + off as u64, len: bytes.len() as u32, lkey: *lkey }, signaled: false, fence: false, ud: None }
        };
        self.dev.post_send(qp, &wr).unwrap();
    }

    /// Apply the hooks to a WR the target is about to post; returns the WR to post and the
    /// capsules to send after it.
    fn tamper(&mut self, qp: Qpn, wr: &SendWr) -> (SendWr, Vec<Vec<u8>>) {
        let mut wr = *wr;
        let qid = self.qid(qp);
        let mut h = self.h.borrow_mut();
        let h = &mut *h;
        match wr.op {
            SendOp::Send | SendOp::SendWithInvalidate(_) if wr.sge.len as usize == Cqe::SIZE => {
                let mut b = [0u8; 16];
                self.mem.read(wr.sge.addr, &mut b);
                let mut cqe = Cqe::read_from_bytes(&b).unwrap();
                // Answered: the command no longer owns its host buffer.
                let Some(cmd) = h.cmds.remove(&(qp.0, cqe.cid.get())) else { return (wr, vec![]) };
                let Some(hook) = h.cqe.as_mut() else { return (wr, vec![]) };
                let mut reply = Reply { len: 16, after: vec![] };
                hook(qid, &cmd, &mut cqe, &mut reply);
                self.mem.write(wr.sge.addr, cqe.as_bytes());
                wr.sge.len = reply.len;
                (wr, reply.after)
            }
            SendOp::RdmaWrite { remote_addr, .. } => {
                let Some(hook) = h.data.as_mut() else { return (wr, vec![]) };
                let cmd = h.cmds.iter().filter(|((q, _), _)| *q == qp.0).map(|(_, s)| *s).find(|s| {
                    matches!(Sgl::decode(&s.dptr), Ok(Sgl::Keyed { addr, len, .. }) if addr <= remote_addr && remote_addr < addr + len as u64)
                });
                let Some(cmd) = cmd else { return (wr, vec![]) };
                let mut bytes = vec![0u8; wr.sge.len as usize];
                self.mem.read(wr.sge.addr, &mut bytes);
                hook(qid, &cmd, &mut bytes);
                bytes.truncate(wr.sge.len as usize);
                self.mem.write(wr.sge.addr, &bytes);
                wr.sge.len = bytes.len() as u32;
                (wr, vec![])
            }
            _ => (wr, vec![]),
        }
    }
}

forward_verbs!(Evil, dev, EvilPath, |d| d.path.clone());

impl Control for Evil {
    type Buf = TBuf;
    fn alloc_buf(&mut self, len: usize) -> Result<TBuf, SoftError> {
        self.dev.alloc_buf(len)
    }
    forward_control!(dev);
}

impl SrqLimitPath for EvilPath {
    fn srq_limit_reached(&mut self, srq: Srqn) -> bool {
        self.dev.srq_limit_reached(srq)
    }
}

impl VerbsError for EvilPath {
    type Error = SoftError;
}

impl DataPath for EvilPath {
    fn post_send(&mut self, qp: Qpn, wr: &SendWr) -> Result<(), SoftError> {
        let (wr, after) = self.tamper(qp, wr);
        self.dev.post_send(qp, &wr)?;
        after.iter().for_each(|b| self.inject(qp, b));
        Ok(())
    }
    fn post_recv(&mut self, qp: Qpn, wr: &RecvWr) -> Result<(), SoftError> {
        self.h.borrow_mut().recvs.insert((qp.0, wr.wr_id), wr.sge.addr);
        self.dev.post_recv(qp, wr)
    }
    fn post_send_deferred(&mut self, qp: Qpn, wr: &SendWr) -> Result<(), SoftError> {
        let (wr, after) = self.tamper(qp, wr);
        self.dev.post_send_deferred(qp, &wr)?;
        after.iter().for_each(|b| self.inject(qp, b));
        Ok(())
    }
    fn ring_send(&mut self, qp: Qpn) -> Result<(), SoftError> {
        self.dev.ring_send(qp)
    }
    fn poll_cq(&mut self, cq: Cqn, out: &mut [Completion]) -> usize {
        let n = self.dev.poll_cq(cq, out);
        for c in &out[..n] {
            if c.status != WcStatus::Success || c.opcode != WcOpcode::Recv {
                continue;
            }
            let before = {
                let mut h = self.h.borrow_mut();
                let h = &mut *h;
                let Some(&addr) = h.recvs.get(&(c.qpn.0, c.wr_id)).or_else(|| h.recvs.get(&(0, c.wr_id))) else { continue };
                let mut b = [0u8; 64];
                self.mem.read(addr, &mut b);
                let sqe = Sqe::read_from_bytes(&b).unwrap();
                if sqe.opcode == FABRICS_OPCODE {
                    let c2 = ConnectCmd::read_from_bytes(&b).unwrap();
                    if c2.fctype == fctype::CONNECT {
                        h.qids.insert(c.qpn.0, c2.qid.get());
                    }
                }
                h.cmds.insert((c.qpn.0, sqe.cid.get()), sqe);
                let qid = h.qids.get(&c.qpn.0).copied().unwrap_or(0);
                h.cmd.as_mut().map(|f| f(qid, &sqe)).unwrap_or_default()
            };
            before.iter().for_each(|x| self.inject(c.qpn, x));
        }
        n
    }
    fn post_srq_recv(&mut self, srq: Srqn, wr: &RecvWr) -> Result<(), SoftError> {
        // SRQ receives are not the QP's own: keyed by QPN 0 (a wr_id names the group's buffer).
        self.h.borrow_mut().recvs.insert((0, wr.wr_id), wr.sge.addr);
        self.dev.post_srq_recv(srq, wr)
    }
}

/// The device's own data path (the CM's GSI QP) is the hostile one too.
impl DataPath for Evil {
    rdma::forward_data_path!(path);
}

type Hostile = World<Evil>;

fn hostile(fabric: &SoftFabric) -> Hostile {
    make_world_on(fabric, 2048, &[HOSTNQN], world_cfg(), 16, Evil::new)
}

fn cfg() -> HostConfig {
    HostConfig { hostnqn: HOSTNQN.into(), io_queues: 1, io_depth: 8, max_io_bytes: 32 * 1024, ..Default::default() }
}

/// Edit a wire struct at the start of `bytes` (when the bytes hold all of it).
fn edit<T: FromBytes + IntoBytes + KnownLayout + Immutable>(bytes: &mut [u8], f: impl FnOnce(&mut T)) {
    let n = core::mem::size_of::<T>();
    if bytes.len() >= n {
        let mut t = T::read_from_bytes(&bytes[..n]).unwrap();
        f(&mut t);
        bytes[..n].copy_from_slice(t.as_bytes());
    }
}

fn is_identify(cmd: &Sqe, cns: u8) -> bool {
    cmd.opcode == admin_op::IDENTIFY && cmd.cdw10.get() as u8 == cns
}

fn is_prop_get(cmd: &Sqe, offset: u32) -> bool {
    let p = PropertyGetCmd::read_from_bytes(cmd.as_bytes()).unwrap();
    p.opcode == FABRICS_OPCODE && p.fctype == fctype::PROPERTY_GET && p.offset.get() == offset
}

/// Log page offset of a Get Log Page for the discovery log, if `cmd` is one.
fn disc_log_offset(cmd: &Sqe) -> Option<u64> {
    (cmd.opcode == admin_op::GET_LOG_PAGE && cmd.cdw10.get() as u8 == lid::DISCOVERY).then(|| cmd.cdw12.get() as u64 | (cmd.cdw13.get() as u64) << 32)
}

/// Connect through a target whose Identify/Property data `data` rewrites; the error.
fn connect_err(data: DataHook, cqe: Option<CqeHook>) -> Error<SoftError> {
    let fabric = SoftFabric::new();
    let mut w = hostile(&fabric);
    w.tdev.hooks().data = Some(data);
    w.tdev.hooks().cqe = cqe;
    let mut hd = host_dev(&fabric);
    let e = Host::connect(&mut hd, &mut w, cfg(), SUBNQN).err().expect("connect must fail");
    let r = hd.dev.resources();
    assert_eq!((r.qps, r.cqs, r.mrs), (0, 0, 0), "failed connect frees every host resource");
    e
}

fn no_data() -> DataHook {
    Box::new(|_, _, _| ())
}

#[test]
fn mdts_that_overflows_is_refused() {
    let e = connect_err(Box::new(|_, c, b| if is_identify(c, cns::CONTROLLER) { edit::<IdentifyCtrl>(b, |id| id.mdts = 60) }), None);
    assert_eq!(e, Error::Target(TargetFault::Mdts { mdts: 60, mpsmin: 0 }));
}

#[test]
fn cap_mqes_zero_and_mpsmin_refused_mqes_ffff_does_not_wrap() {
    let cap = |f: fn(u32) -> u32| -> CqeHook {
        Box::new(move |_, c, cqe, _| {
            if is_prop_get(c, prop::CAP) {
                cqe.dw0.set(f(cqe.dw0.get()));
            }
        })
    };
    assert_eq!(connect_err(no_data(), Some(cap(|d| d & !0xFFFF))), Error::Target(TargetFault::Mqes(0)));
    // CAP bits 51:48 (MPSMIN) live in DW1.
    let fabric = SoftFabric::new();
    let mut w = hostile(&fabric);
    w.tdev.hooks().cqe = Some(Box::new(|_, c, cqe, _| {
        if is_prop_get(c, prop::CAP) {
            cqe.dw1.set(cqe.dw1.get() | 2 << 16);
        }
    }));
    let mut hd = host_dev(&fabric);
    assert_eq!(Host::connect(&mut hd, &mut w, cfg(), SUBNQN).err(), Some(Error::Target(TargetFault::MpsMin(2))));
    // MQES FFFFh (65,536 entries) is legal: the host's own depth applies, nothing wraps.
    let fabric = SoftFabric::new();
    let mut w = hostile(&fabric);
    w.tdev.hooks().cqe = Some(cap(|d| d | 0xFFFF));
    let mut hd = host_dev(&fabric);
    let host = Host::connect(&mut hd, &mut w, cfg(), SUBNQN).expect("connect");
    assert_eq!(host.io_queues(), (1, 8));
}

#[test]
fn ioccsz_iorcsz_below_minimum_refused_huge_ioccsz_capped() {
    let e = connect_err(Box::new(|_, c, b| if is_identify(c, cns::CONTROLLER) { edit::<IdentifyCtrl>(b, |id| id.ioccsz.set(2)) }), None);
    assert_eq!(e, Error::Target(TargetFault::Ioccsz(2)));
    let e = connect_err(Box::new(|_, c, b| if is_identify(c, cns::CONTROLLER) { edit::<IdentifyCtrl>(b, |id| id.iorcsz.set(0)) }), None);
    assert_eq!(e, Error::Target(TargetFault::Iorcsz(0)));
    // IOCCSZ FFFFFFFFh would be 64 GiB capsules: the host allocates MAX_CAPSULE per slot
    // at most, comes up, and in-capsule writes still work.
    let fabric = SoftFabric::new();
    let mut w = hostile(&fabric);
    w.tdev.hooks().data = Some(Box::new(|_, c, b| if is_identify(c, cns::CONTROLLER) { edit::<IdentifyCtrl>(b, |id| id.ioccsz.set(u32::MAX)) }));
    let mut hd = host_dev(&fabric);
    let mut host = Host::connect(&mut hd, &mut w, cfg(), SUBNQN).expect("connect");
    assert_eq!(host.ctrl.as_ref().unwrap().ioccsz, u32::MAX);
    assert!(MAX_CAPSULE <= 64 + 16 * 1024);
    w.tdev.hooks().data = None;
    let (d, e, _) = one_io(&mut w, &mut hd, &mut host, IoKind::Write, 24, 0x42);
    assert!(e.is_none() && d[0].status.is_success());
    assert_eq!(host.stats.inline_copy_bytes, 4096, "the write went in-capsule");
    let (d, e, slot) = one_io(&mut w, &mut hd, &mut host, IoKind::Read, 24, 0);
    assert!(e.is_none() && d[0].status.is_success());
    assert_eq!(slot_data(&host, slot), vec![0x42; 4096]);
}

#[test]
fn namespace_size_format_and_list_checked() {
    let ns = |f: fn(&mut IdentifyNs)| -> DataHook { Box::new(move |_, c, b| if is_identify(c, cns::NAMESPACE) { edit::<IdentifyNs>(b, f) }) };
    assert_eq!(connect_err(ns(|n| n.nsze.set(u64::MAX)), None), Error::Target(TargetFault::Capacity { nsid: 1, nsze: u64::MAX, lbads: 9 }));
    assert_eq!(connect_err(ns(|n| n.flbas = 5), None), Error::Target(TargetFault::LbaFormat { nsid: 1, index: 5, nlbaf: 0 }));
    assert_eq!(connect_err(ns(|n| n.lbaf[0].lbads = 63), None), Error::Target(TargetFault::LbaSize { nsid: 1, lbads: 63 }));
    let e = connect_err(
        Box::new(|_, c, b| {
            if is_identify(c, cns::ACTIVE_NS_LIST) {
                b[4..8].copy_from_slice(&1u32.to_le_bytes());
            }
        }),
        None,
    );
    assert_eq!(e, Error::Target(TargetFault::NsList(1)));
}

#[test]
fn reserved_cntlid_refused() {
    let e = connect_err(
        no_data(),
        Some(Box::new(|qid, c, cqe, _| {
            let connect = ConnectCmd::read_from_bytes(c.as_bytes()).unwrap();
            if qid == 0 && connect.opcode == FABRICS_OPCODE && connect.fctype == fctype::CONNECT {
                cqe.dw0.set(0xFFF3);
            }
        })),
    );
    assert_eq!(e, Error::Target(TargetFault::Cntlid(0xFFF3)));
}

/// A connected host over a hostile world whose hooks are still empty.
fn connected() -> (Hostile, TDev, Host<TDev>) {
    let fabric = SoftFabric::new();
    let mut w = hostile(&fabric);
    let mut hd = host_dev(&fabric);
    let host = Host::connect(&mut hd, &mut w, cfg(), SUBNQN).expect("connect");
    (w, hd, host)
}

fn done0() -> [IoDone; 8] {
    [IoDone { queue: 0, slot: 0, status: Status::SUCCESS, dw0: 0, latency_ns: 0 }; 8]
}

/// Submit one I/O of 8 blocks at `lba` from a fresh slot; for writes the slot buffer is
/// filled with `fill` first, for reads it is poisoned with 0xEE. Polls until the host
/// reports it or fails; returns the completions seen and the poll error, if any.
fn one_io(w: &mut Hostile, hd: &mut TDev, host: &mut Host<TDev>, kind: IoKind, lba: u64, fill: u8) -> (Vec<IoDone>, Option<Error<SoftError>>, u16) {
    use nvmeof::host::HostEnv;
    let slot = host.alloc_slot(1).expect("slot");
    let (buf, off, _) = host.slot_buf(1, slot);
    buf.write(off, &[if kind == IoKind::Write { fill } else { 0xEE }; 4096]);
    host.submit(hd, 1, slot, kind, 1, lba, 8, w.now).expect("submit");
    let mut seen = Vec::new();
    let mut out = done0();
    for _ in 0..200 {
        match host.poll(hd, w.now, &mut out) {
            Ok(n) => seen.extend_from_slice(&out[..n]),
            Err(e) => return (seen, Some(e), slot),
        }
        if !seen.is_empty() && { let h = w.tdev.hooks(); h.cqe.is_none() && h.cmd.is_none() } {
            break;
        }
        w.idle(hd);
    }
    (seen, None, slot)
}

fn slot_data(host: &Host<TDev>, slot: u16) -> Vec<u8> {
    let (buf, off, _) = host.slot_buf(1, slot);
    let mut b = vec![0u8; 4096];
    buf.read(off, &mut b);
    b
}

#[test]
fn duplicate_completion_fails_the_queue_and_completes_nothing_twice() {
    let (mut w, mut hd, mut host) = connected();
    let (d, e, _) = one_io(&mut w, &mut hd, &mut host, IoKind::Write, 16, 0x5A);
    assert!(e.is_none() && d.len() == 1 && d[0].status.is_success());
    w.tdev.hooks().cqe = Some(Box::new(|qid, c, cqe, r| {
        if qid == 1 && c.opcode == io_op::READ {
            r.after.push(cqe.as_bytes().to_vec());
        }
    }));
    let (d, e, slot) = one_io(&mut w, &mut hd, &mut host, IoKind::Read, 16, 0);
    assert_eq!(d.len(), 1, "the read completes once");
    assert!(d[0].status.is_success());
    assert_eq!(slot_data(&host, slot), vec![0x5A; 4096], "the good completion carries the target's data");
    let cid = match e {
        Some(Error::Target(TargetFault::Cid { qid: 1, cid })) => cid,
        other => panic!("expected a CID fault, got {other:?}"),
    };
    assert_eq!(cid as usize % 8, slot as usize, "the duplicate names the finished command");
    assert!(host.failed());
    // The failed queue completes nothing more, whatever arrives.
    let mut out = done0();
    assert!(matches!(host.poll(&mut hd, w.now, &mut out), Err(Error::Target(TargetFault::Cid { .. }))));
}

#[test]
fn late_completion_never_completes_the_next_command_in_its_slot() {
    let (mut w, mut hd, mut host) = connected();
    let (d, e, _) = one_io(&mut w, &mut hd, &mut host, IoKind::Write, 40, 0x77);
    assert!(e.is_none() && d[0].status.is_success());
    // Keep the response of a read of LBA 0 (zeroes) ...
    let saved: Rc<RefCell<Option<Vec<u8>>>> = Rc::default();
    let s2 = saved.clone();
    w.tdev.hooks().cqe = Some(Box::new(move |qid, c, cqe, _| {
        if qid == 1 && c.opcode == io_op::READ {
            s2.borrow_mut().get_or_insert_with(|| cqe.as_bytes().to_vec());
        }
    }));
    let (d, e, first_slot) = one_io(&mut w, &mut hd, &mut host, IoKind::Read, 0, 0);
    assert!(e.is_none() && d.len() == 1 && d[0].status.is_success());
    w.tdev.hooks().cqe = None;
    // ... and replay it as soon as the next read (same slot, written data) reaches the
    // target, before the target moved any data.
    let s3 = saved.clone();
    w.tdev.hooks().cmd = Some(Box::new(move |qid, c| if qid == 1 && c.opcode == io_op::READ { s3.borrow_mut().take().into_iter().collect() } else { vec![] }));
    let (d, e, slot) = one_io(&mut w, &mut hd, &mut host, IoKind::Read, 40, 0);
    assert_eq!(slot, first_slot, "the slot was reused");
    assert!(d.iter().all(|x| !x.status.is_success() || slot_data(&host, slot) == vec![0x77; 4096]), "no read reported good with data the target did not send");
    assert!(d.is_empty(), "the stale response completed nothing");
    assert!(matches!(e, Some(Error::Target(TargetFault::Cid { qid: 1, .. }))), "got {e:?}");
}

#[test]
fn garbage_cids_sq_heads_and_short_capsules_fail_the_queue() {
    type Edit = fn(&mut Cqe, &mut Reply);
    let cases: [(Edit, fn(TargetFault) -> bool); 6] = [
        (|c, _| c.cid.set(0xBEEF), |f| f == TargetFault::Cid { qid: 1, cid: 0xBEEF }),
        (|c, _| c.cid.set(0xFFFF), |f| f == TargetFault::Cid { qid: 1, cid: 0xFFFF }),
        // The right slot, another generation.
        (|c, _| c.cid.set(c.cid.get() ^ 0x100), |f| matches!(f, TargetFault::Cid { qid: 1, .. })),
        // The neighbouring slot, which has no command in flight.
        (|c, _| c.cid.set(c.cid.get() ^ 1), |f| matches!(f, TargetFault::Cid { qid: 1, .. })),
        (|c, _| c.sqhd.set(0xFFF0), |f| f == TargetFault::SqHead { qid: 1, sqhd: 0xFFF0 }),
        (|_, r| r.len = 8, |f| f == TargetFault::ShortResponse(8)),
    ];
    for (i, (edit, want)) in cases.into_iter().enumerate() {
        let (mut w, mut hd, mut host) = connected();
        let (d, e, _) = one_io(&mut w, &mut hd, &mut host, IoKind::Write, 8, 0x33);
        assert!(e.is_none() && d[0].status.is_success());
        w.tdev.hooks().cqe = Some(Box::new(move |qid, c, cqe, r| {
            if qid == 1 && c.opcode == io_op::READ {
                edit(cqe, r);
            }
        }));
        let (d, e, _) = one_io(&mut w, &mut hd, &mut host, IoKind::Read, 8, 0);
        match e {
            Some(Error::Target(f)) if want(f) => {}
            other => panic!("case {i}: got {other:?}"),
        }
        assert!(d.is_empty(), "case {i}: the bad response completed a command");
    }
}

#[test]
fn caller_with_room_for_one_completion_loses_none() {
    let fabric = SoftFabric::new();
    let mut w = make_world(&fabric, 2048, &[HOSTNQN]);
    let mut hd = host_dev(&fabric);
    let mut host = Host::connect(&mut hd, &mut w, HostConfig { io_depth: 32, ..cfg() }, SUBNQN).expect("connect");
    use nvmeof::host::HostEnv;
    let mut outstanding = 0;
    while let Some(slot) = host.alloc_slot(1) {
        host.submit(&mut hd, 1, slot, IoKind::Read, 1, slot as u64 * 8, 8, w.now).unwrap();
        outstanding += 1;
    }
    assert_eq!(outstanding, 32);
    for _ in 0..50 {
        w.idle(&mut hd);
    }
    let mut out = [IoDone { queue: 0, slot: 0, status: Status::SUCCESS, dw0: 0, latency_ns: 0 }; 1];
    let mut got = 0;
    let before = host.stats.completions;
    for _ in 0..1000 {
        got += host.poll(&mut hd, w.now, &mut out).unwrap();
        if got == 32 {
            break;
        }
    }
    assert_eq!(got, 32, "every completion reported, one per call");
    assert_eq!(host.stats.completions - before, 32);
    let mut n = 0;
    while host.alloc_slot(1).is_some() {
        n += 1;
    }
    assert_eq!(n, 32, "every slot free again");
}

/// Discovery against a target whose log `data` rewrites.
fn discover_err(data: DataHook) -> Error<SoftError> {
    let fabric = SoftFabric::new();
    let mut w = hostile(&fabric);
    w.tdev.hooks().data = Some(data);
    let mut hd = host_dev(&fabric);
    let e = Host::discover(&mut hd, &mut w, cfg()).err().expect("discovery must fail");
    let r = hd.dev.resources();
    assert_eq!((r.qps, r.cqs, r.mrs), (0, 0, 0), "failed discovery frees every host resource");
    e
}

#[test]
fn bad_discovery_logs_are_refused() {
    let hdr = |f: fn(&mut DiscLogHdr)| -> DataHook { Box::new(move |_, c, b| if disc_log_offset(c) == Some(0) { edit::<DiscLogHdr>(b, f) }) };
    let entry = |f: fn(&mut DiscLogEntry)| -> DataHook { Box::new(move |_, c, b| if disc_log_offset(c) == Some(1024) { edit::<DiscLogEntry>(b, f) }) };
    assert_eq!(discover_err(hdr(|h| h.numrec.set(1 << 40))), Error::Target(TargetFault::DiscNumrec(1 << 40)));
    assert_eq!(discover_err(hdr(|h| h.recfmt.set(7))), Error::Target(TargetFault::DiscRecfmt(7)));
    // More records announced than the log holds: the missing ones read as zeroes.
    assert_eq!(discover_err(hdr(|h| h.numrec.set(3))), Error::Target(TargetFault::DiscRecord { index: 1, field: DiscField::Trtype(0) }));
    // Fewer bytes returned than asked for.
    let e = discover_err(Box::new(|_, c, b| if disc_log_offset(c) == Some(1024) { b.truncate(16) }));
    assert_eq!(e, Error::Target(TargetFault::DiscRecord { index: 0, field: DiscField::Trsvcid }));
    // A log that changes under every read.
    let e = discover_err(Box::new({
        let mut g = 0u64;
        move |_, c, b| {
            if disc_log_offset(c) == Some(0) {
                g += 1;
                edit::<DiscLogHdr>(b, |h| h.genctr.set(g));
            }
        }
    }));
    assert!(matches!(e, Error::Target(TargetFault::DiscChanged { .. })), "{e:?}");
    let bad = |f: fn(&mut DiscLogEntry), field| assert_eq!(discover_err(entry(f)), Error::Target(TargetFault::DiscRecord { index: 0, field }));
    bad(|e| e.trtype = 0x55, DiscField::Trtype(0x55));
    bad(|e| e.adrfam = 0, DiscField::Adrfam(0));
    bad(|e| e.subtype = 9, DiscField::Subtype(9));
    bad(|e| e.traddr[..4].copy_from_slice(b"\xff\xfe\x01\x02"), DiscField::Traddr);
    bad(|e| e.traddr[..10].copy_from_slice(b"10.0.0.999"), DiscField::Traddr);
    bad(|e| e.trsvcid.fill(b'9'), DiscField::Trsvcid);
    bad(|e| e.subnqn.fill(b'x'), DiscField::Subnqn);
}

#[test]
fn a_log_that_changed_once_is_read_again() {
    let fabric = SoftFabric::new();
    let mut w = hostile(&fabric);
    let mut reads = 0;
    w.tdev.hooks().data = Some(Box::new(move |_, c, b| {
        if disc_log_offset(c) == Some(0) {
            reads += 1;
            if reads == 2 {
                edit::<DiscLogHdr>(b, |h| h.genctr.set(h.genctr.get() + 1));
            }
        }
    }));
    let mut hd = host_dev(&fabric);
    let e = Host::discover(&mut hd, &mut w, cfg()).expect("discovery succeeds on the second read");
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].subnqn, SUBNQN);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    /// Any byte of Identify Controller/Namespace or CAP the target gets wrong ends in a
    /// connection or an error, never a panic; a connection that comes up still works.
    #[test]
    fn identify_and_cap_garbage_never_panics(which in 0u8..3, off in 0usize..4096, val: u8, capbits: u64) {
        let fabric = SoftFabric::new();
        let mut w = hostile(&fabric);
        match which {
            0 => w.tdev.hooks().data = Some(Box::new(move |_, c, b| if is_identify(c, cns::CONTROLLER) && off < b.len() { b[off] = val })),
            1 => w.tdev.hooks().data = Some(Box::new(move |_, c, b| if is_identify(c, cns::NAMESPACE) && off < b.len() { b[off] = val })),
            _ => w.tdev.hooks().cqe = Some(Box::new(move |_, c, cqe, _| if is_prop_get(c, prop::CAP) {
                cqe.dw0.set(capbits as u32);
                cqe.dw1.set((capbits >> 32) as u32);
            })),
        }
        let mut hd = host_dev(&fabric);
        if let Ok(mut host) = Host::connect(&mut hd, &mut w, cfg(), SUBNQN) {
            w.tdev.hooks().data = None;
            w.tdev.hooks().cqe = None;
            if let Some(ns) = host.namespaces.first().copied() {
                if ns.block_size <= 4096 && ns.blocks >= 16 {
                    if let Some(slot) = host.alloc_slot(1) {
                        let _ = host.submit(&mut hd, 1, slot, IoKind::Read, ns.nsid, 0, 1, w.now);
                        let mut out = done0();
                        for _ in 0..50 {
                            use nvmeof::host::HostEnv;
                            if host.poll(&mut hd, w.now, &mut out).is_err() { break; }
                            w.idle(&mut hd);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn submit_to_a_missing_queue_or_busy_slot_is_refused() {
    let (mut w, mut hd, mut host) = connected();
    assert_eq!(host.alloc_slot(0), None);
    assert_eq!(host.alloc_slot(9), None);
    let r = host.submit(&mut hd, 0, 0, IoKind::Read, 1, 0, 1, w.now);
    assert_eq!(r, Err(Error::Config("no such I/O queue")));
    let slot = host.alloc_slot(1).unwrap();
    host.submit(&mut hd, 1, slot, IoKind::Read, 1, 0, 1, w.now).unwrap();
    let r = host.submit(&mut hd, 1, slot, IoKind::Read, 1, 0, 1, w.now);
    assert_eq!(r, Err(Error::Config("slot not allocated or in flight")));
    assert_eq!(host.submit(&mut hd, 1, 999, IoKind::Read, 1, 0, 1, w.now), Err(Error::Config("slot not allocated or in flight")));
    let mut empty = [];
    use nvmeof::host::HostEnv;
    w.idle(&mut hd);
    assert_eq!(host.get_log(&mut hd, &mut w, lid::DISCOVERY, false, 0, &mut empty), Err(Error::Config("log length not a nonzero multiple of 4")));
}

#[test]
fn a_target_that_stops_answering_keep_alives_fails_the_association_after_kato() {
    use nvmeof::host::HostEnv;
    let (mut w, mut hd, mut host) = connected();
    let kato_ns = cfg().kato_ms as u64 * 1_000_000;
    assert!(kato_ns > 0);
    // A target that answers: four KATO periods pass without a fault.
    w.tick_ns = 100_000_000;
    for _ in 0..200 {
        host.tick(&mut hd, w.now).expect("answered keep-alives keep the association");
        w.idle(&mut hd);
    }
    assert!(!host.failed());
    assert!(host.stats.keep_alives >= 7, "a keep-alive every KATO/2: {}", host.stats.keep_alives);
    // The target stops (it is never polled again): the host fails the admin queue with a
    // typed fault within KATO of the unanswered keep-alive, instead of waiting forever.
    let start = w.now;
    let mut t = start;
    let err = loop {
        t += 100_000_000;
        assert!(t - start <= 2 * kato_ns, "no fault two KATO after the target stopped");
        if let Err(e) = host.tick(&mut hd, t) {
            break e;
        }
    };
    assert!(matches!(err, Error::Target(TargetFault::KeepAlive { kato_ms }) if kato_ms == cfg().kato_ms), "{err:?}");
    assert!(t - start >= kato_ns, "not before a whole KATO: {} ms", (t - start) / 1_000_000);
    assert!(host.failed());
    let mut out = done0();
    assert!(host.poll(&mut hd, t, &mut out).is_err() || host.failed());
}
