//! The NVMe-oF RDMA initiator: discovery, admin + I/O queue connect, controller enable,
//! Identify, a non-blocking read/write API, keep-alive, reconnect, and the benchmark loop.
//!
//! Generic over `rdma::Verbs`; connection management, the clock and "let the rest of the
//! system run while I wait" come from a [`HostEnv`] the appliance provides (the real CM on
//! hardware, a direct QP pairing in tests). Setup paths allocate; the I/O path does not.
//! Facts: Linux drivers/nvme/host/{rdma,fabrics,core}.c behaviour, libnvme discovery reading.

use alloc::string::String;
use alloc::vec::Vec;

use hal::DmaRegion;
use rdma::{Access, Completion, Cqn, DataPath, GroupVerbs, Lkey, Qpn, RecvWr, Rkey, SendOp, SendWr, Sge, Srqn, Verbs, WcOpcode, WcStatus};
use zerocopy::byteorder::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, IntoBytes};

use crate::bench::{BenchConfig, BenchProgress, BenchResult};
use crate::wire::*;
use nvme_spec::props::{Cap, Cc, Csts};
use crate::Error;

mod auth;
mod bringup;
pub mod cm_env;
mod connect;
pub mod controllers;
mod io;
pub mod lent;
mod queue;
pub mod validate;
pub use io::{IoLane, LaneDrive, LaneEnd, LaneWork, LanesResult, Lent, LentOutcome};
use io::IoQueue;
use queue::*;
use validate::CidCodec;
pub use validate::{DiscField, TargetFault, MAX_CAPSULE, MAX_DISC_RECORDS, MAX_QUEUE_DEPTH};

/// Reads of a discovery log that keeps changing before the host gives up.
const DISC_READ_TRIES: usize = 4;

/// CC to enable a controller: NVM command set, 4 KiB pages, 64-byte SQEs, 16-byte CQEs.
const CC_ENABLE: Cc = Cc::new().with_en(true).with_iosqes(6).with_iocqes(4);

/// What the CM reported for a connect attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectPoll {
    Pending,
    /// QP is in RTS; `crqsize` from the REP private data.
    Connected { crqsize: u16 },
    /// REJ with NVMe-RDMA status (0 if the REJ carried none).
    Rejected(u16),
    Failed,
}

/// What the initiator needs from its surroundings.
pub trait HostEnv<V: Verbs> {
    /// Monotonic time in nanoseconds.
    fn now_ns(&mut self) -> u64;
    /// Called while the initiator busy-waits: run the CM, other apps, the device.
    fn idle(&mut self, verbs: &mut V);
    /// Start connecting RC QP `qp` (fresh, RESET, receives already posted) to the target with
    /// NVMe-RDMA REQ private data `private`; returns a handle.
    fn cm_connect(&mut self, verbs: &mut V, qp: Qpn, private: &[u8; 32]) -> Result<u32, ()>;
    fn cm_poll(&mut self, verbs: &mut V, handle: u32) -> ConnectPoll;
    fn cm_disconnect(&mut self, verbs: &mut V, handle: u32);
    /// Whether connection `handle`, once established, was lost as the CM saw it (the peer's
    /// DREQ, a timeout). An I/O queue's receives sit in its group's SRQ, which a QP in error
    /// does not flush, so an idle queue learns of its lost connection from here
    /// ([`Host::check_connections`]), not from a flushed receive. Default: never.
    fn cm_lost(&mut self, _handle: u32) -> bool {
        false
    }
    /// Point later `cm_connect`s at target `addr` (a [`controllers::Controllers`] set reaches
    /// several targets through one env). Default: the env knows one target only.
    fn select_target(&mut self, _addr: controllers::TargetAddr) {}
    /// The device failed and the initiator released everything it held on it: bring it up
    /// again, with whatever the env keeps on it. Returns whether it is back.
    fn recover_device(&mut self, verbs: &mut V) -> bool {
        verbs.recover_device()
    }
}

/// Initiator settings.
#[derive(Debug, Clone)]
pub struct HostConfig {
    pub hostnqn: String,
    pub hostid: [u8; 16],
    /// Keep-alive timeout requested at Connect (ms); 0 disables.
    pub kato_ms: u32,
    pub io_queues: u16,
    pub io_depth: u16,
    /// Per-slot data buffer (largest I/O).
    pub max_io_bytes: u32,
    /// Send small writes as in-capsule data when the target allows it.
    pub inline_writes: bool,
    /// Per-I/O memory keys (default): each command's data buffer is registered through the send
    /// queue for exactly that I/O (address, length, one direction) with a fresh key variant,
    /// and the key is invalidated before the command completes. Off: every slot keeps one
    /// long-lived key with remote read+write over its whole buffer (for comparisons only: a
    /// peer can then reach those buffers at any time).
    pub per_io_keys: bool,
    /// With per-I/O keys: mark keyed SGLs 0x4F so the target invalidates the key with SEND WITH
    /// INVALIDATE (default); otherwise, or when the target does not, the host posts a local
    /// invalidation and completes the command when it is done.
    pub invalidate: bool,
    /// Deadline for one admin command / connect step.
    pub timeout_ns: u64,
    /// A lost controller's wait between failed connect attempts (nvme-cli's
    /// `--reconnect-delay`); the first attempt after a loss is at once.
    pub reconnect_delay_ns: u64,
    /// A controller without a connection for this long is given up: no more attempts
    /// (nvme-cli's `--ctrl-loss-tmo`, Linux's default 600 s); `None`: retried for ever.
    pub ctrl_loss_tmo_ns: Option<u64>,
    /// DH-HMAC-CHAP secrets, used when the target asks for authentication.
    pub dhchap: Option<nvme_auth::host::HostKeys>,
    /// Seed of the authentication CSPRNG (challenges, DH exponents); the appliance takes it
    /// from its entropy source.
    pub auth_seed: [u8; 32],
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            hostnqn: String::from("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001"),
            hostid: [1; 16],
            kato_ms: 5000,
            io_queues: 1,
            io_depth: 32,
            max_io_bytes: 128 * 1024,
            inline_writes: true,
            per_io_keys: true,
            invalidate: true,
            timeout_ns: 5_000_000_000,
            reconnect_delay_ns: controllers::RECONNECT_DELAY_NS,
            ctrl_loss_tmo_ns: Some(controllers::CTRL_LOSS_TMO_NS),
            dhchap: None,
            auth_seed: [0x3C; 32],
        }
    }
}

/// Initiator counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostStats {
    pub commands: u64,
    pub completions: u64,
    pub errors: u64,
    pub keep_alives: u64,
    pub aens: u64,
    /// Reconnect attempts (after a first connect), failed ones included.
    pub reconnects: u64,
    /// Keys the target invalidated (SEND WITH INVALIDATE).
    pub invalidated: u64,
    /// Keys the host invalidated itself (the target answered with a plain SEND).
    pub local_invalidations: u64,
    /// Per-I/O key registrations posted.
    pub registrations: u64,
    /// Bytes copied by the CPU into capsules for in-capsule writes.
    pub inline_copy_bytes: u64,
}

/// A namespace seen through Identify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NsInfo {
    pub nsid: u32,
    pub blocks: u64,
    pub block_size: u32,
}

/// Controller facts from Identify Controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CtrlInfo {
    pub cntlid: u16,
    pub cntrltype: u8,
    pub subnqn: String,
    pub mdts_bytes: u64,
    pub maxcmd: u16,
    pub nn: u32,
    pub ioccsz: u32,
    pub sgls: u32,
    pub kas: u16,
    pub oaes: u32,
    pub vs: u32,
    pub cap: u64,
}

/// A discovery log entry, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscEntry {
    pub trtype: u8,
    pub adrfam: u8,
    pub subtype: u8,
    pub portid: u16,
    pub trsvcid: String,
    pub subnqn: String,
    pub traddr: String,
}

/// I/O kinds of the read/write API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoKind {
    Read,
    Write,
    Flush,
    WriteZeroes,
    /// Dataset Management, one range (the I/O's blocks), Deallocate: the range goes from the
    /// slot's buffer, in the capsule where in-capsule writes are.
    Deallocate,
}

/// A finished I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoDone {
    pub queue: u16,
    pub slot: u16,
    pub status: Status,
    pub dw0: u32,
    /// Submit → completion, by the time passed to `poll`.
    pub latency_ns: u64,
}

/// One connected controller (admin queue + I/O queues).
pub struct Host<V: GroupVerbs> {
    cfg: HostConfig,
    subnqn: String,
    admin: Option<HQueue<V>>,
    io: Vec<IoQueue<V>>,
    pub ctrl: Option<CtrlInfo>,
    pub namespaces: Vec<NsInfo>,
    wc: [Completion; 32],
    last_ka_ns: u64,
    ka_slot: Option<u16>,
    aer_slot: Option<u16>,
    pub last_aen: Option<u32>,
    pub stats: HostStats,
    /// The I/O queues lent out ([`Host::lend_io_queues`]) and the flag each one's lane reads
    /// once per poll: raised by [`Host::fail_qp`] when the adapter moved that queue's QP to error.
    lent: Vec<io::LentQueue>,
    /// DH-HMAC-CHAP: last transaction ID and the CSPRNG (see `host/auth.rs`).
    auth_tid: u16,
    auth_rng: nvme_auth::Rng,
}

fn cmd(opcode: u8) -> Sqe {
    let mut s = Sqe::zeroed();
    s.opcode = opcode;
    s.flags = PSDT_SGL;
    s.dptr.typ = sgl_type::KEYED_ADDR;
    s
}

/// An Identify SQE (CNS `cns`, namespace `nsid`).
fn identify_sqe(cns: u8, nsid: u32) -> Sqe {
    let mut s = cmd(admin_op::IDENTIFY);
    s.nsid = U32::new(nsid);
    s.cdw10 = U32::new(cns as u32);
    s
}

/// A Property Get SQE.
pub fn property_get_sqe(offset: u32, eight: bool) -> Sqe {
    let mut p = PropertyGetCmd::zeroed();
    p.opcode = FABRICS_OPCODE;
    p.fctype = fctype::PROPERTY_GET;
    p.attrib = eight as u8;
    p.offset = U32::new(offset);
    let mut s = Sqe::read_from_bytes(p.as_bytes()).expect("64");
    s.flags = PSDT_SGL;
    s.dptr.typ = sgl_type::KEYED_ADDR;
    s
}

/// A Property Set SQE (4-byte property).
pub fn property_set_sqe(offset: u32, value: u64) -> Sqe {
    let mut p = PropertySetCmd::zeroed();
    p.opcode = FABRICS_OPCODE;
    p.fctype = fctype::PROPERTY_SET;
    p.offset = U32::new(offset);
    p.value = U64::new(value);
    let mut s = Sqe::read_from_bytes(p.as_bytes()).expect("64");
    s.flags = PSDT_SGL;
    s.dptr.typ = sgl_type::KEYED_ADDR;
    s
}

/// Build the NVMe-RDMA CM REQ private data.
pub fn cm_req_private(qid: u16, depth: u16) -> [u8; 32] {
    let r = RdmaCmReq { recfmt: U16::new(0), qid: U16::new(qid), hrqsize: U16::new(depth), hsqsize: U16::new(depth - 1), rsvd: [0; 24] };
    let mut b = [0u8; 32];
    b.copy_from_slice(r.as_bytes());
    b
}

impl<V: GroupVerbs> Host<V> {
    fn empty(cfg: HostConfig, subnqn: &str) -> Self {
        let auth_rng = <nvme_auth::Rng as nvme_auth::SeedableRng>::from_seed(cfg.auth_seed);
        Host {
            auth_tid: 0,
            auth_rng,
            cfg,
            subnqn: String::from(subnqn),
            admin: None,
            io: Vec::new(),
            ctrl: None,
            namespaces: Vec::new(),
            wc: [Completion::default(); 32],
            last_ka_ns: 0,
            ka_slot: None,
            aer_slot: None,
            last_aen: None,
            stats: HostStats::default(),
            lent: Vec::new(),
        }
    }

    /// Connect to `subnqn`: admin queue, enable, identify, I/O queues, namespace scan.
    pub fn connect(verbs: &mut V, env: &mut impl HostEnv<V>, cfg: HostConfig, subnqn: &str) -> Result<Self, Error<V::Error>> {
        let mut h = Host::empty(cfg, subnqn);
        match h.setup(verbs, env) {
            Ok(()) => Ok(h),
            Err(e) => {
                h.teardown(verbs, env);
                Err(e)
            }
        }
    }

    /// Read the discovery log of the target `env` connects to.
    pub fn discover(verbs: &mut V, env: &mut impl HostEnv<V>, cfg: HostConfig) -> Result<Vec<DiscEntry>, Error<V::Error>> {
        let mut cfg = cfg;
        cfg.kato_ms = 0;
        let mut h = Host::empty(cfg, DISCOVERY_NQN);
        let r = h.setup(verbs, env).and_then(|()| h.read_discovery(verbs, env));
        h.teardown(verbs, env);
        r
    }

    fn read_discovery(&mut self, verbs: &mut V, env: &mut impl HostEnv<V>) -> Result<Vec<DiscEntry>, Error<V::Error>> {
        // As libnvme: header with RAE, then entries in ≤ 4 KiB chunks, then the header again;
        // a log that changed meanwhile is read again, a few times.
        let mut last = (0, 0);
        for _ in 0..DISC_READ_TRIES {
            let mut hdr = [0u8; DiscLogHdr::SIZE];
            self.get_log(verbs, env, lid::DISCOVERY, true, 0, &mut hdr)?;
            let h = DiscLogHdr::read_from_bytes(&hdr).expect("1024");
            let numrec = validate::disc_header(&h)?;
            let mut out = Vec::new();
            let mut rec = 0u64;
            while rec < numrec {
                let n = core::cmp::min(4, numrec - rec) as usize;
                // Zeroed: what the target does not write reads as an invalid (zero) entry.
                let mut buf = alloc::vec![0u8; n * DiscLogEntry::SIZE];
                self.get_log(verbs, env, lid::DISCOVERY, true, (1 + rec) * DiscLogEntry::SIZE as u64, &mut buf)?;
                for e in buf.chunks_exact(DiscLogEntry::SIZE) {
                    let e = DiscLogEntry::read_from_bytes(e).expect("1024");
                    out.push(validate::disc_entry(out.len() as u16, &e)?);
                }
                rec += n as u64;
            }
            let mut hdr2 = [0u8; DiscLogHdr::SIZE];
            self.get_log(verbs, env, lid::DISCOVERY, false, 0, &mut hdr2)?;
            let h2 = DiscLogHdr::read_from_bytes(&hdr2).expect("1024");
            if h2.genctr.get() == h.genctr.get() && h2.numrec.get() == numrec {
                return Ok(out);
            }
            last = (h2.genctr.get(), h2.numrec.get());
        }
        Err(TargetFault::DiscChanged { genctr: last.0, numrec: last.1 }.into())
    }

    fn setup(&mut self, verbs: &mut V, env: &mut impl HostEnv<V>) -> Result<(), Error<V::Error>> {
        // A failed device (its queues already released: a fresh host, or after teardown)
        // comes back first.
        if verbs.device_failed() && !env.recover_device(verbs) {
            return Err(Error::DeviceFailed);
        }
        self.start_admin(verbs, env)?;
        let start = env.now_ns();
        while !self.poll_admin(verbs, env)? {
            if env.now_ns().saturating_sub(start) > self.cfg.timeout_ns {
                return Err(Error::Timeout);
            }
            env.idle(verbs);
        }
        self.enable(verbs, env)
    }

    /// The rest of a connect once the admin queue is connected: Fabrics Connect, enable,
    /// Identify, I/O queues, namespaces ([`bringup::BringUp`]'s steps, waited for here).
    pub(super) fn enable(&mut self, verbs: &mut V, env: &mut impl HostEnv<V>) -> Result<(), Error<V::Error>> {
        let mut b = bringup::BringUp::new();
        loop {
            match b.step(self, verbs, env) {
                Ok(true) => return Ok(()),
                Ok(false) => env.idle(verbs),
                Err(e) => {
                    b.abandon(verbs, env);
                    return Err(e);
                }
            }
        }
    }

    /// The controller's facts from Identify Controller, checked against the Connect's
    /// controller ID and this host's subsystem.
    fn controller_info(&self, cntlid: u16, capf: Cap, vs: u32, id: &IdentifyCtrl) -> Result<CtrlInfo, Error<V::Error>> {
        if id.cntlid.get() != cntlid {
            return Err(Error::Protocol("Identify CNTLID differs from Connect"));
        }
        if id.icdoff.get() != 0 {
            return Err(Error::Protocol("ICDOFF != 0"));
        }
        if id.sgls.get() & sgls::KEYED == 0 {
            return Err(Error::Protocol("target lacks keyed SGLs"));
        }
        let info = CtrlInfo {
            cntlid,
            cntrltype: id.cntrltype,
            subnqn: String::from(get_str(&id.subnqn).unwrap_or("")),
            mdts_bytes: validate::transfer_limit(capf, id.mdts)?,
            maxcmd: id.maxcmd.get(),
            nn: id.nn.get(),
            ioccsz: id.ioccsz.get(),
            sgls: id.sgls.get(),
            kas: id.kas.get(),
            oaes: id.oaes.get(),
            vs,
            cap: capf.into_bits(),
        };
        if info.subnqn != self.subnqn {
            return Err(Error::Protocol("Identify SUBNQN differs"));
        }
        Ok(info)
    }

    /// Identify the active namespaces again (e.g. after an AEN).
    pub fn scan_namespaces(&mut self, verbs: &mut V, env: &mut impl HostEnv<V>) -> Result<(), Error<V::Error>> {
        let mut page = alloc::vec![0u8; 4096];
        self.identify(verbs, env, cns::ACTIVE_NS_LIST, 0, &mut page)?;
        let mut ids = Vec::new();
        validate::ns_list(&page, |id| ids.push(id))?;
        self.namespaces.clear();
        for nsid in ids {
            page.fill(0);
            self.identify(verbs, env, cns::NAMESPACE, nsid, &mut page)?;
            let ns = IdentifyNs::read_from_bytes(&page).expect("4096");
            self.namespaces.push(validate::namespace(nsid, &ns)?);
        }
        Ok(())
    }

    fn queue_mut(&mut self, qid: u16) -> &mut HQueue<V> {
        if qid == 0 {
            self.admin.as_mut().expect("admin queue")
        } else {
            &mut self.io[qid as usize - 1].q
        }
    }

    /// Queue `qid` and the data path its work goes through (the device for the admin queue,
    /// its group for an I/O queue).
    fn queue_path<'a>(admin: &'a mut Option<HQueue<V>>, io: &'a mut [IoQueue<V>], verbs: &'a mut V, qid: u16) -> (&'a mut HQueue<V>, QPath<'a, V>) {
        if qid == 0 {
            (admin.as_mut().expect("admin queue"), QPath::Device(verbs))
        } else {
            let IoQueue { q, group, .. } = &mut io[qid as usize - 1];
            (q, QPath::Group(group))
        }
    }

    /// A Fabrics Connect for queue `qid` and its data (controller `cntlid`, this host).
    fn connect_cmd(&mut self, qid: u16, cntlid: u16) -> (Sqe, ConnectData) {
        let mut c = ConnectCmd::zeroed();
        c.opcode = FABRICS_OPCODE;
        c.fctype = fctype::CONNECT;
        c.qid = U16::new(qid);
        let depth = self.queue_mut(qid).depth;
        c.sqsize = U16::new(depth - 1);
        c.kato = U32::new(if qid == 0 { self.cfg.kato_ms } else { 0 });
        let mut d = ConnectData::zeroed();
        d.hostid = self.cfg.hostid;
        d.cntlid = U16::new(cntlid);
        put_str(&mut d.subsysnqn, &self.subnqn, 0);
        put_str(&mut d.hostnqn, &self.cfg.hostnqn, 0);
        let mut sqe = Sqe::read_from_bytes(c.as_bytes()).expect("64");
        sqe.flags = PSDT_SGL;
        (sqe, d)
    }

    /// Identify into `out` (4096 bytes).
    pub fn identify(&mut self, verbs: &mut V, env: &mut impl HostEnv<V>, cns: u8, nsid: u32, out: &mut [u8]) -> Result<(), Error<V::Error>> {
        self.admin_sync(verbs, env, identify_sqe(cns, nsid), Some(Data::In(out))).map(|_| ())
    }

    /// Get Log Page `lid` at byte offset `off` into `out` (length a multiple of 4).
    pub fn get_log(&mut self, verbs: &mut V, env: &mut impl HostEnv<V>, lid: u8, rae: bool, off: u64, out: &mut [u8]) -> Result<(), Error<V::Error>> {
        let numd = match u32::try_from(out.len() / 4) {
            Ok(d @ 1..) if out.len() % 4 == 0 => d - 1,
            _ => return Err(Error::Config("log length not a nonzero multiple of 4")),
        };
        let mut s = cmd(admin_op::GET_LOG_PAGE);
        s.nsid = U32::new(0xFFFF_FFFF);
        s.cdw10 = U32::new(lid as u32 | ((rae as u32) << 15) | ((numd & 0xFFFF) << 16));
        s.cdw11 = U32::new(numd >> 16);
        s.cdw12 = U32::new(off as u32);
        s.cdw13 = U32::new((off >> 32) as u32);
        self.admin_sync(verbs, env, s, Some(Data::In(out))).map(|_| ())
    }

    /// Send an arbitrary admin command and wait (raw access for tests and tools).
    pub fn admin_raw(&mut self, verbs: &mut V, env: &mut impl HostEnv<V>, sqe: Sqe, data_in: Option<&mut [u8]>) -> Result<(u32, u32), Error<V::Error>> {
        self.admin_sync(verbs, env, sqe, data_in.map(Data::In))
    }

    fn admin_sync(&mut self, verbs: &mut V, env: &mut impl HostEnv<V>, sqe: Sqe, data: Option<Data<'_>>) -> Result<(u32, u32), Error<V::Error>> {
        self.sync(verbs, env, 0, sqe, data)
    }

    /// Submit one command on queue `qid` and wait for it.
    fn sync(&mut self, verbs: &mut V, env: &mut impl HostEnv<V>, qid: u16, sqe: Sqe, mut data: Option<Data<'_>>) -> Result<(u32, u32), Error<V::Error>> {
        let now = env.now_ns();
        let s = self.start_cmd(verbs, now, qid, sqe, data.as_mut().map(Data::reborrow))?;
        let start = env.now_ns();
        loop {
            let out = match &mut data {
                Some(Data::In(b)) => Some(&mut **b),
                _ => None,
            };
            if let Some(r) = self.poll_cmd(verbs, env.now_ns(), qid, s, out)? {
                return Ok(r);
            }
            if env.now_ns().saturating_sub(start) > self.cfg.timeout_ns {
                return Err(Error::Timeout);
            }
            env.idle(verbs);
        }
    }

    /// Submit one command on queue `qid` (no wait); the slot it went out on. `Data::In` only
    /// gives the length here ([`Host::poll_cmd`] copies the answer).
    fn start_cmd(&mut self, verbs: &mut V, now: u64, qid: u16, mut sqe: Sqe, data: Option<Data<'_>>) -> Result<u16, Error<V::Error>> {
        let inv = self.cfg.invalidate;
        let (q, mut dp) = Self::queue_path(&mut self.admin, &mut self.io, verbs, qid);
        if q.failed {
            return Err(q.failure());
        }
        let Some(s) = q.free.pop() else { return Err(Error::NoResources) };
        let mut inline = 0;
        match &data {
            Some(Data::Out(b)) => {
                q.data.write(s as usize * q.xfer, b);
                sqe.dptr = q.keyed(&mut dp, s, b.len() as u32, false, inv)?;
            }
            Some(Data::In(b)) => sqe.dptr = q.keyed(&mut dp, s, b.len() as u32, true, inv)?,
            Some(Data::Inline(b)) => {
                q.cmd.write(s as usize * q.capsule + 64, b);
                inline = b.len();
                sqe.dptr = Sgl::Inline { offset: 0, len: b.len() as u32 }.encode();
            }
            None => {}
        }
        let r = q.send(&mut dp, s, &sqe, inline, now);
        let registered = q.slots[s as usize].inv_key.is_some() as u64;
        if r.is_err() {
            // The QP cannot take work: the connection is lost (its keys die with it).
            q.failed = true;
            q.slots[s as usize] = HSlot::default();
            q.free.push(s);
        }
        self.stats.commands += 1;
        self.stats.registrations += registered;
        r.map(|()| s)
    }

    /// One look for the answer to the command in slot `s` of queue `qid` (no wait): `None`
    /// while pending, its (DW0, DW1) once answered with success (data in copied to `out`),
    /// the NVMe status or the queue's failure otherwise.
    fn poll_cmd(&mut self, verbs: &mut V, now: u64, qid: u16, s: u16, out: Option<&mut [u8]>) -> Result<Option<(u32, u32)>, Error<V::Error>> {
        let mut done = false;
        let mut wc = self.wc;
        let (q, mut dp) = Self::queue_path(&mut self.admin, &mut self.io, verbs, qid);
        let mut side: heapless::Vec<u16, 8> = heapless::Vec::new();
        q.poll(&mut dp, &mut wc, side.capacity(), |_, idx| {
            if idx == s {
                done = true;
            } else {
                let _ = side.push(idx);
            }
        })?;
        if qid == 0 {
            for idx in side {
                self.finish_background(verbs, idx, now)?;
            }
        }
        let q = self.queue_mut(qid);
        if done {
            let slot = q.slots[s as usize];
            q.slots[s as usize].busy = false;
            q.slots[s as usize].inv_key = None;
            q.free.push(s);
            self.count_keys(&slot);
            self.stats.completions += 1;
            let st = Status::from_field(slot.cqe_status);
            if !st.is_success() {
                self.stats.errors += 1;
                return Err(Error::Nvme(st));
            }
            if let Some(b) = out {
                let q = self.queue_mut(qid);
                q.data.read(s as usize * q.xfer, b);
            }
            return Ok(Some((slot.dw0, slot.dw1)));
        }
        if q.failed {
            return Err(q.failure());
        }
        Ok(None)
    }

    /// Count how a finished command's key was invalidated.
    fn count_keys(&mut self, slot: &HSlot) {
        if slot.inv_key.is_some() {
            if slot.invalidated {
                self.stats.invalidated += 1;
            } else {
                self.stats.local_invalidations += 1;
            }
        }
    }

    /// Admin-queue commands the host keeps in the background (keep-alive, AER).
    fn finish_background(&mut self, verbs: &mut V, idx: u16, now: u64) -> Result<(), Error<V::Error>> {
        let q = self.admin.as_mut().expect("admin");
        let slot = q.slots[idx as usize];
        q.slots[idx as usize].busy = false;
        q.slots[idx as usize].inv_key = None;
        q.free.push(idx);
        self.count_keys(&slot);
        if self.ka_slot == Some(idx) {
            self.ka_slot = None;
            if !Status::from_field(slot.cqe_status).is_success() {
                self.stats.errors += 1;
            }
        } else if self.aer_slot == Some(idx) {
            self.aer_slot = None;
            if Status::from_field(slot.cqe_status).is_success() {
                self.stats.aens += 1;
                self.last_aen = Some(slot.dw0);
                self.post_aer(verbs, now)?;
            }
        }
        Ok(())
    }

    fn post_aer(&mut self, verbs: &mut V, now: u64) -> Result<(), Error<V::Error>> {
        let q = self.admin.as_mut().expect("admin");
        let Some(s) = q.free.pop() else { return Err(Error::NoResources) };
        let sqe = cmd(admin_op::ASYNC_EVENT);
        q.send(verbs, s, &sqe, 0, now)?;
        self.aer_slot = Some(s);
        Ok(())
    }

    /// When [`Host::tick`] next has timer work: the Keep Alive to send (half the KATO after
    /// the last; none while every admin slot is busy, a completion frees one) or the one
    /// outstanding to give up on (a KATO after it was sent); `None`: no keep-alive running.
    pub fn next_timer(&self) -> Option<u64> {
        let kato = self.cfg.kato_ms as u64 * 1_000_000;
        let q = self.admin.as_ref()?;
        if kato == 0 || q.failed || (self.ka_slot.is_none() && q.free.is_empty()) {
            return None;
        }
        Some(self.last_ka_ns.saturating_add(if self.ka_slot.is_some() { kato } else { kato / 2 }))
    }

    /// Send a Keep Alive when half the KATO has passed; poll the admin queue. Call regularly.
    pub fn tick(&mut self, verbs: &mut V, now: u64) -> Result<(), Error<V::Error>> {
        let Some(q) = self.admin.as_mut() else { return Ok(()) };
        let mut wc = self.wc;
        let mut fin: heapless::Vec<u16, 8> = heapless::Vec::new();
        q.poll(verbs, &mut wc, fin.capacity(), |_, idx| {
            let _ = fin.push(idx);
        })?;
        for idx in fin {
            self.finish_background(verbs, idx, now)?;
        }
        let q = self.admin.as_mut().expect("admin");
        if q.failed {
            return Err(q.failure());
        }
        let kato = self.cfg.kato_ms as u64 * 1_000_000;
        if kato != 0 && self.ka_slot.is_some() && now.saturating_sub(self.last_ka_ns) >= kato {
            q.fail(TargetFault::KeepAlive { kato_ms: self.cfg.kato_ms });
            return Err(q.failure());
        }
        if kato != 0 && self.ka_slot.is_none() && now.saturating_sub(self.last_ka_ns) >= kato / 2 {
            let Some(s) = q.free.pop() else { return Ok(()) };
            let sqe = cmd(admin_op::KEEP_ALIVE);
            q.send(verbs, s, &sqe, 0, now)?;
            self.ka_slot = Some(s);
            self.last_ka_ns = now;
            self.stats.keep_alives += 1;
        }
        Ok(())
    }

    /// Fail every I/O queue whose connection the CM saw lost ([`HostEnv::cm_lost`]): with
    /// its receives in an SRQ no flushed completion says so, and a queue whose commands' SENDs
    /// were all acknowledged would wait for their responses for ever. Slow path.
    pub fn check_connections(&mut self, env: &mut impl HostEnv<V>) {
        for io in self.io.iter_mut().filter(|io| !io.q.failed) {
            if env.cm_lost(io.q.cm) {
                log::warn!("nvmeof: host: I/O queue {} lost its connection", io.q.qid);
                io.q.failed = true;
            }
        }
        // A lent queue's lane stops (the controller fails: `failed`).
        if self.lent.iter().any(|l| !l.raised() && env.cm_lost(l.cm)) {
            log::warn!("nvmeof: host: a lent I/O queue lost its connection; its lanes stop");
            self.stop_lent();
        }
    }

    /// Fail the queue on QP `qpn`, if it is one of this host's (the adapter moved it to error
    /// on its own: [`rdma::Control::take_qp_error`]); whether it was. An I/O queue's receives
    /// are in an SRQ, so no flushed receive would say so. Slow path.
    pub fn fail_qp(&mut self, qpn: Qpn) -> bool {
        if let Some(l) = self.lent.iter().find(|l| l.qpn == qpn) {
            l.raise();
            return true;
        }
        let admin = self.admin.as_mut().filter(|q| q.qpn == qpn);
        let q = match admin {
            Some(q) => q,
            None => match self.io.iter_mut().find(|io| io.q.qpn == qpn) {
                Some(io) => &mut io.q,
                None => return false,
            },
        };
        if !q.failed {
            log::warn!("nvmeof: host: queue {} ({qpn}): the adapter moved its QP to error", q.qid);
            q.failed = true;
        }
        true
    }

    /// Fail the queues whose QPs the adapter moved to error ([`Host::fail_qp`]), as its
    /// asynchronous events name them ([`rdma::Control::take_qp_error`]): the turn of an owner
    /// with one controller on the device, e.g. while its I/O queues are lent (a lent queue's
    /// lane then stops at its next poll). Events naming a QP of no queue of this host are
    /// dropped. Slow path.
    pub fn take_qp_errors(&mut self, verbs: &mut V) {
        while let Some(qpn) = verbs.take_qp_error() {
            if !self.fail_qp(qpn) {
                log::debug!("nvmeof: host: QP error event for {qpn}, no queue of ours");
            }
        }
    }

    /// Whether a queue saw a transport error (the controller needs `reconnect`).
    pub fn failed(&self) -> bool {
        self.admin.as_ref().is_some_and(|q| q.failed) || self.io.iter().any(|io| io.q.failed) || self.lent.iter().any(|l| l.raised())
    }

    /// Number of I/O queues and their depth.
    pub fn io_queues(&self) -> (u16, u16) {
        (self.io.len() as u16, self.io.first().map_or(0, |io| io.q.depth))
    }

    /// A free I/O slot on queue `queue` (1-based qid), if any.
    pub fn alloc_slot(&mut self, queue: u16) -> Option<u16> {
        self.io.get_mut(queue.checked_sub(1)? as usize)?.q.free.pop()
    }

    /// The data buffer of a slot: (region, offset, length).
    pub fn slot_buf(&self, queue: u16, slot: u16) -> (&V::Buf, usize, usize) {
        let q = &self.io[queue as usize - 1].q;
        (&q.data, slot as usize * q.xfer, q.xfer)
    }

    /// The key slot `slot`'s buffer was last offered to the target with (tests and tools: after
    /// the I/O completed it must no longer grant anything).
    pub fn slot_key(&self, queue: u16, slot: u16) -> Rkey {
        self.io[queue as usize - 1].q.data_keys[slot as usize]
    }

    /// The data path of I/O queue `queue` (its poll group), for tools and tests that post on
    /// its QP themselves.
    pub fn io_queue_path(&mut self, queue: u16) -> Option<&mut V::Group> {
        Some(&mut self.io.get_mut(queue.checked_sub(1)? as usize)?.group)
    }

    /// Submit I/O from an allocated slot. The data (writes) must already be in the slot buffer.
    /// The queue's work (its key's registration, the capsule) goes through its own poll group;
    /// the device is not used (the parameter stays for the callers that drive admin and I/O
    /// queues with one device at hand).
    #[allow(clippy::too_many_arguments)]
    pub fn submit(&mut self, _verbs: &mut V, queue: u16, slot: u16, kind: IoKind, nsid: u32, lba: u64, blocks: u32, now: u64) -> Result<(), Error<V::Error>> {
        let bs = self.namespaces.iter().find(|n| n.nsid == nsid).map_or(512, |n| n.block_size);
        let (inline_ok, inv) = (self.inline_ok(), self.cfg.invalidate);
        let io = queue.checked_sub(1).and_then(|i| self.io.get_mut(i as usize)).ok_or(Error::Config("no such I/O queue"))?;
        io.submit(&mut self.stats, bs, inline_ok, inv, slot, kind, nsid, lba, blocks, now)
    }

    /// Reap finished I/O of every I/O queue into `out`; returns how many. Each queue's CQ is
    /// its group's, polled through the group (local invalidations too); the device is not used.
    pub fn poll(&mut self, _verbs: &mut V, now: u64, out: &mut [IoDone]) -> Result<usize, Error<V::Error>> {
        let mut n = 0;
        let mut wc = self.wc;
        for io in self.io.iter_mut() {
            if n >= out.len() {
                break;
            }
            n += io.reap(&mut self.stats, &mut wc, now, &mut out[n..])?;
        }
        if n == 0 {
            if let Some(q) = self.io.iter().map(|io| &io.q).chain(self.admin.as_ref()).find(|q| q.failed) {
                return Err(q.failure());
            }
        }
        Ok(n)
    }

    /// Orderly shutdown (CC.SHN) and disconnect.
    pub fn disconnect(mut self, verbs: &mut V, env: &mut impl HostEnv<V>) -> Result<(), Error<V::Error>> {
        let r = self.shutdown(verbs, env);
        self.teardown(verbs, env);
        r
    }

    /// CC.SHN on a working admin queue (the queues stay).
    fn shutdown(&mut self, verbs: &mut V, env: &mut impl HostEnv<V>) -> Result<(), Error<V::Error>> {
        if self.admin.as_ref().is_some_and(|q| !q.failed) && self.subnqn != DISCOVERY_NQN {
            self.admin_sync(verbs, env, property_set_sqe(prop::CC, CC_ENABLE.with_shn(1).into_bits() as u64), None).map(|_| ())
        } else {
            Ok(())
        }
    }

    fn teardown(&mut self, verbs: &mut V, env: &mut impl HostEnv<V>) {
        for io in self.io.drain(..) {
            env.cm_disconnect(verbs, io.q.cm);
            io.destroy(verbs);
        }
        if let Some(q) = self.admin.take() {
            env.cm_disconnect(verbs, q.cm);
            q.destroy(verbs);
        }
        self.ka_slot = None;
        self.aer_slot = None;
    }

    /// Drop every queue and connect again (after the target or link went away), waiting for
    /// each step. A controller sharing its device with others reconnects through
    /// [`controllers::Controllers`] instead (the device-failure rule, no wait).
    pub fn reconnect(&mut self, verbs: &mut V, env: &mut impl HostEnv<V>) -> Result<(), Error<V::Error>> {
        self.teardown(verbs, env);
        self.stats.reconnects += 1;
        let r = self.setup(verbs, env);
        if r.is_err() {
            self.teardown(verbs, env);
        }
        r
    }

    /// Run a benchmark on namespace `nsid` over I/O queue 1 (the first error ends it; a
    /// controller of a [`controllers::Controllers`] set runs `bench::run::reconnecting`).
    pub fn bench(&mut self, verbs: &mut V, env: &mut impl HostEnv<V>, nsid: u32, cfg: &BenchConfig) -> Result<BenchResult, Error<V::Error>> {
        self.bench_with_progress(verbs, env, nsid, cfg, &mut |_| {})
    }

    /// [`Host::bench`], calling `progress` about once a second (from the loop's slow path).
    pub fn bench_with_progress(
        &mut self,
        verbs: &mut V,
        env: &mut impl HostEnv<V>,
        nsid: u32,
        cfg: &BenchConfig,
        progress: &mut dyn FnMut(&BenchProgress),
    ) -> Result<BenchResult, Error<V::Error>> {
        crate::bench::run::on_host(self, verbs, env, nsid, cfg, progress)
    }
}

enum Data<'a> {
    /// Host → controller via keyed SGL (target RDMA READs it).
    Out(&'a [u8]),
    /// Host → controller in the capsule.
    Inline(&'a [u8]),
    /// Controller → host via keyed SGL.
    In(&'a mut [u8]),
}

impl Data<'_> {
    fn reborrow(&mut self) -> Data<'_> {
        match self {
            Data::Out(b) => Data::Out(b),
            Data::Inline(b) => Data::Inline(b),
            Data::In(b) => Data::In(b),
        }
    }
}
