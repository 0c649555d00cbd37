//! The data path: WQEs parsed from SQ/RQ buffers in `PhysMem`, handed to the RoCEv2 engine
//! (emu-roce), and its completions written back as CQEs.
//!
//! Formats [Linux include/linux/mlx5/qp.h, rdma-core mlx5dv.h; reference mlx5.md §2]:
//! - SQ: 64-byte WQEBBs after the RQ in the QP buffer; the doorbell record's dword 1 holds the
//!   SQ producer counter; a 64-bit write of the ctrl segment's first 8 bytes to UAR+0x800 rings.
//! - Ctrl segment: opmod|wqe_index|opcode, qpn|ds, signature, fm_ce_se, imm/inval rkey; a
//!   fence mode that waits for READs (`fence_mode::FENCE`, `SMALL_AND_FENCE`, `STRONG_ORDERING`)
//!   makes the engine hold the WQE until every earlier READ of the SQ is complete.
//! - Remote address seg (raddr, rkey), data segs (byte_count, lkey, addr), inline segs
//!   (0x80000000|len + bytes, padded to 16), datagram seg (48 B address vector).
//! - RQ: WQEs of 2^(log_rq_stride+4) bytes of data segs, ended by lkey 0x100; the doorbell
//!   record's dword 0 holds the RQ counter (read by the adapter when it polls).
//! - CQE: 64 bytes, op_own = opcode<<4 | owner; error CQEs carry the syndrome at 0x37.
use std::collections::BTreeMap;

use emu_roce::{
    Access, Completion, Engine, Extent, Gather, KeyError, KeyRef, Keys, Link, MemError, Memory, PortConfig, QpAttrs,
    QpState, Qpn, RecvWr, Rkey, SendOp, SendWr, Sge, UdAddr, WcOpcode, WcStatus, WorkQueue,
};
use log::debug;

use crate::consts::{qp as qps, status as st, synd};
use mlx5_ifc::ifc as l;
use mlx5_ifc::ifc::cqe64 as cqe;
use mlx5_ifc::layout::{get, set, Field};
use crate::mem::PhysMem;
use crate::model::{Device, Mkey, Qp, RESD_LKEY};

pub use mlx5_ifc::queue::INVALID_LKEY;
use mlx5_ifc::queue::INLINE_SEG;
pub use mlx5_ifc::{cqe_op, cqe_synd, umr, wqe_op};
use mlx5_ifc::fence_mode;


struct MemView<'a>(&'a PhysMem);

impl Memory for MemView<'_> {
    fn read(&mut self, pa: u64, buf: &mut [u8]) -> Result<(), MemError> {
        self.0.dma_read(pa, buf).map_err(|f| MemError { pa: f.addr, len: f.len as u64 })
    }
    fn write(&mut self, pa: u64, data: &[u8]) -> Result<(), MemError> {
        self.0.dma_write(pa, data).map_err(|f| MemError { pa: f.addr, len: f.len as u64 })
    }
}

/// The MKey table as the engine sees it.
struct KeyView<'a> {
    mkeys: &'a mut BTreeMap<u32, Mkey>,
    qps: &'a BTreeMap<u32, Qp>,
}

impl Keys for KeyView<'_> {
    fn translate(&mut self, qp: Qpn, key: KeyRef, va: u64, len: u64, need: Access) -> Result<Extent, KeyError> {
        let q = self.qps.get(&qp.0).ok_or(KeyError::Other(0))?;
        let (k, remote) = match key {
            KeyRef::Local(k) => (k.0, false),
            KeyRef::Remote(k) => (k.0, true),
        };
        if k == RESD_LKEY {
            // Physical addressing: local only, and only for QPs created with rlky.
            if remote || get(&q.qpc, l::qpc::rlky) == 0 {
                return Err(KeyError::InvalidKey);
            }
            return Ok(Extent { pa: va, len });
        }
        let m = self.mkeys.get(&(k >> 8)).ok_or(KeyError::InvalidKey)?;
        if m.key != k || m.free {
            return Err(KeyError::InvalidKey);
        }
        if m.pd != q.pd {
            return Err(KeyError::WrongPd);
        }
        let ok = (!need.local_write || m.lw)
            && (!need.remote_read || m.rr)
            && (!need.remote_write || m.rw)
            && (!need.remote_atomic || m.atomic)
            && (remote || m.lr);
        if !ok {
            return Err(KeyError::AccessDenied);
        }
        if len == 0 {
            return Ok(Extent { pa: 0, len: 0 });
        }
        let ext = m.translate(va, len).ok_or(KeyError::OutOfBounds)?;
        let (pa, n) = ext[0];
        Ok(Extent { pa, len: n })
    }

    fn invalidate(&mut self, qp: Qpn, rkey: Rkey) -> Result<(), KeyError> {
        let q = self.qps.get(&qp.0).ok_or(KeyError::Other(0))?;
        let m = self.mkeys.get_mut(&(rkey.0 >> 8)).ok_or(KeyError::InvalidKey)?;
        if m.key != rkey.0 || m.free {
            return Err(KeyError::InvalidKey);
        }
        if m.pd != q.pd {
            return Err(KeyError::WrongPd);
        }
        if !m.en_rinval {
            return Err(KeyError::AccessDenied);
        }
        m.free = true;
        Ok(())
    }
}

/// The cable as a plain link (no cable: None).
fn wire_of(link: &mut Option<Box<dyn Link + Send>>) -> Option<&mut dyn Link> {
    match link {
        Some(l) => Some(l.as_mut()),
        None => None,
    }
}

fn ipv4_of_gid(g: &[u8]) -> Option<[u8; 4]> {
    (g[..10].iter().all(|&b| b == 0) && g[10] == 0xff && g[11] == 0xff).then(|| [g[12], g[13], g[14], g[15]])
}

fn engine_state(s: u8) -> QpState {
    match s {
        qps::RST => QpState::Reset,
        qps::INIT => QpState::Init,
        qps::RTR => QpState::Rtr,
        qps::RTS => QpState::Rts,
        _ => QpState::Error,
    }
}

/// The engine's attributes from a stored QP context.
fn attrs_of(qpc: &[u8]) -> QpAttrs {
    use l::qpc as q;
    let p = |f: Field| f.at(q::primary_address_path);
    let rgid = mlx5_ifc::layout::bytes(qpc, p(l::ads::rgid_rip));
    let hi = (get(qpc, p(l::ads::rmac_47_32)) as u16).to_be_bytes();
    let lo = (get(qpc, p(l::ads::rmac_31_0)) as u32).to_be_bytes();
    let mtu = get(qpc, q::mtu) as u32;
    let sport = get(qpc, p(l::ads::udp_sport)) as u16;
    QpAttrs {
        access: Access {
            local_write: true,
            remote_read: get(qpc, q::rre) == 1,
            remote_write: get(qpc, q::rwe) == 1,
            remote_atomic: get(qpc, q::rae) == 1,
        },
        qkey: get(qpc, q::q_key) as u32,
        remote_qpn: Qpn(get(qpc, q::remote_qpn) as u32),
        remote_ip: [rgid[12], rgid[13], rgid[14], rgid[15]],
        remote_mac: [hi[0], hi[1], lo[0], lo[1], lo[2], lo[3]],
        udp_sport: if sport == 0 { 0xC000 } else { sport },
        rq_psn: get(qpc, q::next_rcv_psn) as u32,
        sq_psn: get(qpc, q::next_send_psn) as u32,
        pmtu: if (1..=5).contains(&mtu) { 256 << (mtu - 1) } else { 1024 },
        timeout: get(qpc, p(l::ads::ack_timeout)) as u8,
        retry_cnt: get(qpc, q::retry_count) as u8,
        rnr_retry: get(qpc, q::rnr_retry) as u8,
        min_rnr_timer: get(qpc, q::min_rnr_nak) as u8,
        max_rd_atomic: 1 << get(qpc, q::log_sra_max),
        max_dest_rd_atomic: 1 << get(qpc, q::log_rra_max),
        ..QpAttrs::default()
    }
}

/// A parsed send WQE or the reason the adapter rejects it.
enum Parsed {
    Post(SendWr),
    Nop { signaled: bool },
    LocalInval { key: u32, signaled: bool },
    /// UMR: ctrl imm = key; the WQE bytes after ctrl (umr ctrl seg, mkey seg, translations).
    Umr { key: u32, signaled: bool, body: Vec<u8> },
    Bad(u8),
}

impl Device {
    /// Port configuration for the engine: MAC from the vport, IPv4 from the first IPv4 GID.
    pub(crate) fn port_config(&self) -> PortConfig {
        let ip = self.gids.iter().flatten().find_map(|g| ipv4_of_gid(&g[..16])).unwrap_or([0; 4]);
        PortConfig {
            mac: self.vport.mac,
            ip,
            answer_arp: self.cfg.port_answers_arp,
            ud_mtu: 1024,
            ttl: 64,
            // A ConnectX counts retry_cnt 7 as 7 retries (rxe retries for ever).
            retry_cnt_7_infinite: false,
        }
    }

    /// MAC or GID changed: rebuild the engine if it has no QPs yet (the usual bring-up order).
    pub(crate) fn port_changed(&mut self) {
        if let Some(e) = &self.engine {
            let want = self.port_config();
            if *e.config() != want {
                if e.qp_count() == 0 && self.rmps.is_empty() {
                    self.engine = Some(Engine::new(want));
                } else {
                    log::warn!("cx: port address changed with QPs alive; engine keeps {:?}", e.config().ip);
                }
            }
        }
    }

    pub(crate) fn engine_modify(&mut self, qpn: u32, to: u8, qpc: &[u8]) -> Result<(), (u8, u32)> {
        let Some(e) = self.engine.as_mut() else { return Ok(()) };
        let r = e.modify_qp(Qpn(qpn), engine_state(to), &attrs_of(qpc));
        match r {
            Ok(()) => {
                self.drain_completions();
                Ok(())
            }
            Err(emu_roce::EngineError::BadTransition { .. }) => Err((st::BAD_QP_STATE, synd::BAD_TRANSITION)),
            Err(err) => {
                debug!("cx: engine refused QP {qpn:#x} -> {to}: {err:?}");
                Err((st::BAD_PARAM, synd::BAD_MTU))
            }
        }
    }

    /// Plug in the wire.
    pub fn attach_link(&mut self, link: Box<dyn Link + Send>) {
        self.link = Some(link);
    }

    /// Earliest time [`Device::poll`] has work without a frame arriving: a send doorbell not
    /// executed yet (now), the RoCE engine's timers. (Requests the engine holds back for want
    /// of a window or budget go out with the ACKs and polls that follow work.)
    pub fn next_timer(&self) -> Option<u64> {
        let eng = self.engine.as_ref()?;
        if !self.sq_doorbells.is_empty() {
            return Some(self.clock.now_ns());
        }
        eng.next_timer()
    }

    /// Run the data path once: SQ doorbells, new RQ WQEs, the engine (rx, timers, tx),
    /// completions → CQEs. Returns a count of work done (0 = idle).
    pub fn poll(&mut self) -> usize {
        if self.engine.is_none() {
            return 0;
        }
        let mut link = self.link.take();
        let mut lb = std::mem::take(&mut self.loopback);
        let (mac, local_lb) = (self.vport.mac, !self.vport.disable_uc_local_lb);
        let mut work = self.process_sq_doorbells(&mut lb.link(wire_of(&mut link), mac, local_lb));
        work += self.scan_rqs();
        work += self.scan_rmps();
        let now = self.clock.now_ns();
        // Borrowed beside the other fields it works with (taking it out and back moved the
        // whole engine twice a poll).
        let eng = self.engine.as_mut().expect("engine");
        let mem = self.mem.clone();
        {
            let mut keys = KeyView { mkeys: &mut self.mkeys, qps: &self.qps };
            let mut mv = MemView(&mem);
            // A port that is down neither sends nor receives on the wire (frames stay on the
            // link); local loopback is inside the adapter and keeps working.
            let wire = if self.vport.down { None } else { wire_of(&mut link) };
            work += eng.poll(now, &mut lb.link(wire, mac, local_lb), &mut mv, &mut keys);
        }
        self.loopback = lb;
        let mut raw = Vec::new();
        while let Some(f) = eng.pop_raw_frame() {
            raw.push(f);
        }
        // QPs the engine moved to ERROR in this pass. Those whose error an error CQE reports (the
        // requester of a NAKed request, a responder that consumed a receive WQE) get no event;
        // the others (responder errors with no WQE to complete, e.g. an RDMA WRITE outside any
        // key) get the QP's affiliated async error event (IBTA vol. 1 "Local Access Violation Work
        // Queue Error"; Linux mlx5_ib reports it as IB_EVENT_QP_ACCESS_ERR).
        // (Every QP that went to ERROR is on the engine's list, so those still RTR or RTS here
        // are the ones a query of every QP would find; taken in QP number order as it would.)
        let mut errored = eng.take_errored();
        errored.sort_unstable();
        errored.dedup();
        errored.retain(|qpn| {
            self.qps.get(qpn).is_some_and(|q| matches!(q.state, qps::RTR | qps::RTS)) && eng.query_qp(Qpn(*qpn)).is_some_and(|i| i.state == QpState::Error)
        });
        self.link = link;
        self.check_rmp_limits();
        for f in raw {
            work += 1;
            self.raw_receive(&f);
        }
        let mut reported = Vec::new();
        work += self.drain_completions_noting_errors(&mut reported);
        for qpn in errored {
            let Some(q) = self.qps.get_mut(&qpn) else { continue };
            q.state = qps::ERR;
            mlx5_ifc::layout::set(&mut q.qpc, l::qpc::state, qps::ERR as u64);
            if reported.contains(&qpn) {
                continue;
            }
            // [device.h mlx5_eqe_qp_srq: reserved1[5] (be32), type (u8) @0x14, qp_srq_n @0x18]
            let mut data = [0u8; 28];
            data[0x14] = 0; // resource type: QP
            data[0x18..0x1c].copy_from_slice(&(qpn & 0xff_ffff).to_be_bytes());
            self.raise_event(crate::consts::event::WQ_ACCESS_ERROR, 0, &data);
        }
        self.report_last_wqe();
        work
    }

    fn process_sq_doorbells(&mut self, link: &mut dyn Link) -> usize {
        // The pending doorbells move to `dbs` and `sq_doorbells` gets the empty spare (doorbells
        // rung while these run land there); `dbs` is emptied and kept as the next spare, so
        // neither vector is reallocated once it has grown to the most doorbells pending at once.
        let mut dbs = std::mem::take(&mut self.sq_doorbells_spare);
        debug_assert!(dbs.is_empty());
        std::mem::swap(&mut dbs, &mut self.sq_doorbells);
        let mut work = 0;
        for &(qpn, _ctrl) in &dbs {
            if self.raw.sqs.contains_key(&qpn) {
                work += self.run_raw_sq(qpn, link);
            } else {
                work += self.run_sq(qpn);
            }
        }
        dbs.clear();
        self.sq_doorbells_spare = dbs;
        work
    }

    /// Execute the SQ of `qpn` up to its doorbell record's producer counter.
    fn run_sq(&mut self, qpn: u32) -> usize {
        let Some(q) = self.qps.get(&qpn) else { return 0 };
        if q.no_sq || !matches!(q.state, qps::RTS | qps::ERR) {
            return 0; // Doorbells before RTS are ignored; the WQEs stay for a later ring.
        }
        let pi = match self.mem.dma_read_be32(q.dbr + 4) {
            Ok(v) => v as u16,
            Err(_) => {
                self.ctr.dma_faults += 1;
                return 0;
            }
        };
        let mut n = 0;
        let mut guard = 0;
        while self.qps[&qpn].sq_hw != pi && guard < 1 << 16 {
            guard += 1;
            let (idx, parsed, wqebbs, opcode) = self.parse_send_wqe(qpn);
            // Operations the adapter completes itself wait until every earlier WQE of this SQ has
            // left the transport, so CQEs stay in SQ order; the SQ is retried on the next poll.
            let local = matches!(parsed, Parsed::Nop { .. } | Parsed::LocalInval { .. } | Parsed::Umr { .. });
            let busy = self
                .engine
                .as_ref()
                .and_then(|e| e.query_qp(Qpn(qpn)))
                .is_some_and(|i| i.sq_outstanding > 0);
            // An unsignaled UMR that succeeds writes no CQE, so it runs as soon as the SQ
            // reaches it, as on the adapter (a command capsule behind a registration must not
            // wait for the ACKs of earlier SENDs); one that fails waits like the rest so its
            // error CQE keeps SQ order.
            let early_umr = match &parsed {
                Parsed::Umr { key, signaled: false, body } if local && busy => self.apply_umr(qpn, *key, body).is_ok(),
                _ => false,
            };
            if early_umr {
                let q = self.qps.get_mut(&qpn).expect("qp");
                q.sq_hw = q.sq_hw.wrapping_add(wqebbs);
                self.ctr.send_wqes += 1;
                n += 1;
                continue;
            }
            if local && busy {
                if !self.sq_doorbells.iter().any(|d| d.0 == qpn) {
                    self.sq_doorbells.push((qpn, 0));
                }
                break;
            }
            let q = self.qps.get_mut(&qpn).expect("qp");
            q.sq_hw = q.sq_hw.wrapping_add(wqebbs);
            self.ctr.send_wqes += 1;
            n += 1;
            match parsed {
                Parsed::Post(wr) => {
                    let e = self.engine.as_mut().expect("engine");
                    if let Err(err) = e.post_send(Qpn(qpn), wr) {
                        debug!("cx: QP {qpn:#x} WQE {idx}: {err:?}");
                        self.ctr.bad_wqes += 1;
                        let s = match err {
                            emu_roce::EngineError::TooLong(_) => cqe_synd::LOCAL_LENGTH_ERR,
                            _ => cqe_synd::LOCAL_QP_OP_ERR,
                        };
                        self.fail_qp(qpn, idx, opcode, s);
                    }
                }
                Parsed::Nop { signaled } => {
                    if signaled {
                        self.req_cqe(qpn, idx, opcode, 0);
                    }
                }
                Parsed::LocalInval { key, signaled } => {
                    let pd = self.qps[&qpn].pd;
                    match self.mkeys.get_mut(&(key >> 8)) {
                        Some(m) if m.key == key && m.pd == pd => {
                            m.free = true;
                            if signaled {
                                self.req_cqe(qpn, idx, opcode, 0);
                            }
                        }
                        _ => self.fail_qp(qpn, idx, opcode, cqe_synd::LOCAL_PROT_ERR),
                    }
                }
                Parsed::Umr { key, signaled, body } => match self.apply_umr(qpn, key, &body) {
                    Ok(()) => {
                        if signaled {
                            self.req_cqe(qpn, idx, opcode, 0);
                        }
                    }
                    Err(s) => {
                        self.ctr.bad_wqes += 1;
                        self.fail_qp(qpn, idx, opcode, s);
                    }
                },
                Parsed::Bad(s) => {
                    self.ctr.bad_wqes += 1;
                    self.fail_qp(qpn, idx, opcode, s);
                }
            }
        }
        n
    }

    /// Read `len` bytes of the SQ starting at WQEBB `idx` (wrapping around the ring).
    fn read_sq(&self, q: &Qp, idx: u16, len: usize) -> Option<Vec<u8>> {
        let n = 1u32 << q.log_sq_size;
        let base = q.rq_bytes();
        let mut v = vec![0u8; len];
        for (k, chunk) in v.chunks_mut(64).enumerate() {
            let bb = (idx as u32 + k as u32) & (n - 1);
            let pa = q.buf.pa(base + bb as u64 * 64)?;
            self.mem.dma_read(pa, chunk).ok()?;
        }
        Some(v)
    }

    /// Parse the WQE at the QP's hardware SQ counter. Returns (wqe_index, parse, WQEBBs, opcode).
    fn parse_send_wqe(&mut self, qpn: u32) -> (u16, Parsed, u16, u8) {
        let q = &self.qps[&qpn];
        let idx = q.sq_hw;
        let Some(ctrl) = self.read_sq(q, idx, 16) else {
            self.ctr.dma_faults += 1;
            return (idx, Parsed::Bad(cqe_synd::LOCAL_PROT_ERR), 1, 0);
        };
        let w0 = u32::from_be_bytes(ctrl[0..4].try_into().unwrap());
        let w1 = u32::from_be_bytes(ctrl[4..8].try_into().unwrap());
        let opcode = (w0 & 0xff) as u8;
        let wqe_index = ((w0 >> 8) & 0xffff) as u16;
        let ds = (w1 & 0x3f) as usize;
        let fm_ce_se = ctrl[0x0b];
        let imm = u32::from_be_bytes(ctrl[0x0c..0x10].try_into().unwrap());
        let signaled = (fm_ce_se >> 2) & 3 >= 2;
        let solicited = fm_ce_se & 2 != 0;
        // Fence modes that wait for earlier RDMA READs (the engine holds the WQE until they are
        // complete); "initiator small" alone waits for local work only, which runs at once here.
        let fence = matches!(fm_ce_se & fence_mode::MASK, fence_mode::FENCE | fence_mode::STRONG_ORDERING | fence_mode::SMALL_AND_FENCE);
        let wqebbs = (ds * 16).div_ceil(64).max(1) as u16;
        if w1 >> 8 != qpn || wqe_index != idx || ds == 0 {
            return (idx, Parsed::Bad(cqe_synd::LOCAL_QP_OP_ERR), wqebbs, opcode);
        }
        let Some(w) = self.read_sq(q, idx, ds * 16) else {
            self.ctr.dma_faults += 1;
            return (idx, Parsed::Bad(cqe_synd::LOCAL_PROT_ERR), wqebbs, opcode);
        };
        let ud = q.st != qps::ST_RC;
        let mut off = 16;
        let be32 = |b: &[u8], o: usize| u32::from_be_bytes(b[o..o + 4].try_into().unwrap());
        let be64 = |b: &[u8], o: usize| u64::from_be_bytes(b[o..o + 8].try_into().unwrap());
        let wr_id = ((opcode as u64) << 32) | idx as u64;
        let op = match opcode {
            wqe_op::NOP => return (idx, Parsed::Nop { signaled }, wqebbs, opcode),
            wqe_op::LOCAL_INVAL => return (idx, Parsed::LocalInval { key: imm, signaled }, wqebbs, opcode),
            wqe_op::UMR if w.len() >= 16 + 48 + 64 => {
                return (idx, Parsed::Umr { key: imm, signaled, body: w[16..].to_vec() }, wqebbs, opcode)
            }
            wqe_op::SEND => SendOp::Send,
            wqe_op::SEND_IMM => SendOp::SendWithImm(imm),
            wqe_op::SEND_INVAL => SendOp::SendWithInvalidate(Rkey(imm)),
            wqe_op::RDMA_WRITE | wqe_op::RDMA_WRITE_IMM | wqe_op::RDMA_READ if !ud => {
                if w.len() < off + 16 {
                    return (idx, Parsed::Bad(cqe_synd::LOCAL_QP_OP_ERR), wqebbs, opcode);
                }
                let raddr = be64(&w, off);
                let rkey = Rkey(be32(&w, off + 8));
                off += 16;
                match opcode {
                    wqe_op::RDMA_WRITE => SendOp::RdmaWrite { remote_va: raddr, rkey },
                    wqe_op::RDMA_WRITE_IMM => SendOp::RdmaWriteWithImm { remote_va: raddr, rkey, imm },
                    _ => SendOp::RdmaRead { remote_va: raddr, rkey },
                }
            }
            _ => return (idx, Parsed::Bad(cqe_synd::LOCAL_QP_OP_ERR), wqebbs, opcode),
        };
        let mut uda = None;
        if ud {
            if w.len() < off + 48 {
                return (idx, Parsed::Bad(cqe_synd::LOCAL_QP_OP_ERR), wqebbs, opcode);
            }
            let av = &w[off..off + 48];
            uda = Some(UdAddr {
                remote_qpn: Qpn(be32(av, 8) & 0xff_ffff),
                qkey: be32(av, 0),
                dest_ip: [av[0x2c], av[0x2d], av[0x2e], av[0x2f]],
                dest_mac: [av[0x14], av[0x15], av[0x16], av[0x17], av[0x18], av[0x19]],
                udp_sport: u16::from_be_bytes([av[0x0e], av[0x0f]]),
            });
            off += 48;
        }
        // Data: either inline segments or pointer segments.
        let mut sges = Vec::new();
        let mut inline: Option<Vec<u8>> = None;
        while off + 16 <= w.len() {
            let bc = be32(&w, off);
            if bc & INLINE_SEG != 0 {
                let n = (bc & !INLINE_SEG) as usize;
                if off + 4 + n > w.len() {
                    return (idx, Parsed::Bad(cqe_synd::LOCAL_LENGTH_ERR), wqebbs, opcode);
                }
                inline.get_or_insert_with(Vec::new).extend_from_slice(&w[off + 4..off + 4 + n]);
                off += (4 + n).div_ceil(16) * 16;
            } else {
                let lkey = be32(&w, off + 4);
                if lkey == INVALID_LKEY {
                    break;
                }
                // byte_count 0 means 2 GiB (IB convention).
                let len = if bc == 0 { 0x8000_0000 } else { bc };
                sges.push(Sge { addr: be64(&w, off + 8), len, lkey: emu_roce::Lkey(lkey) });
                off += 16;
            }
        }
        let data = match inline {
            Some(b) if sges.is_empty() => Gather::Inline(b),
            Some(_) => return (idx, Parsed::Bad(cqe_synd::LOCAL_QP_OP_ERR), wqebbs, opcode),
            None => Gather::Sges(sges),
        };
        (idx, Parsed::Post(SendWr { wr_id, op, data, signaled, solicited, fence, ud: uda }), wqebbs, opcode)
    }

    /// Apply a UMR WQE (fast registration): umr ctrl seg (flags, klm_octowords, mkey_mask), mkey
    /// context seg (mkc layout), then MTT entries inline or through one data segment.
    fn apply_umr(&mut self, qpn: u32, key: u32, b: &[u8]) -> Result<(), u8> {
        let q = &self.qps[&qpn];
        let (qpd, rlky) = (q.pd, get(&q.qpc, l::qpc::rlky) == 1);
        // Only a QP created with qpc.fre (fast registration enable) may post UMR WQEs; on any
        // other the WQE fails as a local QP operation error [PRM qpc.fre; Linux mlx5_ib sets it
        // on the QPs that post registration work requests].
        if get(&q.qpc, l::qpc::fre) != 1 {
            return Err(cqe_synd::LOCAL_QP_OP_ERR);
        }
        let flags = b[0];
        let octw = u16::from_be_bytes([b[4], b[5]]) as usize;
        let mask = u64::from_be_bytes(b[8..16].try_into().unwrap());
        let mk = &b[48..112];
        let m = self.mkeys.get(&(key >> 8)).ok_or(cqe_synd::LOCAL_PROT_ERR)?;
        if m.pd != qpd || !m.umr_en {
            return Err(cqe_synd::LOCAL_PROT_ERR);
        }
        if octw > 0 && m.access_mode != 1 {
            return Err(cqe_synd::LOCAL_QP_OP_ERR);
        }
        // Translations.
        let n = octw * 2;
        let mut mtt = Vec::new();
        if n > 0 {
            let list: Vec<u8> = if flags & umr::FLAG_INLINE != 0 {
                b.get(112..112 + 8 * n).ok_or(cqe_synd::LOCAL_LENGTH_ERR)?.to_vec()
            } else {
                let d = b.get(112..128).ok_or(cqe_synd::LOCAL_QP_OP_ERR)?;
                let lkey = u32::from_be_bytes(d[4..8].try_into().unwrap());
                let addr = u64::from_be_bytes(d[8..16].try_into().unwrap());
                let pa = self.raw_translate(qpd, rlky, lkey, addr, 8 * n).ok_or(cqe_synd::LOCAL_PROT_ERR)?;
                let mut v = vec![0u8; 8 * n];
                self.mem.dma_read(pa, &mut v).map_err(|_| cqe_synd::LOCAL_PROT_ERR)?;
                v
            };
            for e in list.chunks(8) {
                mtt.push(u64::from_be_bytes(e.try_into().unwrap()) & !7);
            }
        }
        let m = self.mkeys.get_mut(&(key >> 8)).expect("mkey");
        let acc = mk[2];
        if mask & umr::MASK_LEN != 0 {
            m.len = get(mk, l::mkc::len);
            m.length64 = get(mk, l::mkc::length64) == 1;
        }
        if mask & umr::MASK_PAGE_SIZE != 0 {
            m.log_page_size = get(mk, l::mkc::log_page_size) as u8;
        }
        if mask & umr::MASK_START_ADDR != 0 {
            m.start = get(mk, l::mkc::start_addr);
        }
        if mask & umr::MASK_PD != 0 {
            m.pd = get(mk, l::mkc::pd) as u32;
        }
        if mask & umr::MASK_EN_RINVAL != 0 {
            m.en_rinval = get(mk, l::mkc::en_rinval) == 1;
        }
        if mask & umr::MASK_KEY != 0 {
            m.key = (m.index << 8) | get(mk, l::mkc::mkey_7_0) as u32;
        }
        let bit = |v: u8, b: u8| v & (1 << b) != 0;
        if mask & umr::MASK_LR != 0 {
            m.lr = bit(acc, 2);
        }
        if mask & umr::MASK_LW != 0 {
            m.lw = bit(acc, 3);
        }
        if mask & umr::MASK_RR != 0 {
            m.rr = bit(acc, 4);
        }
        if mask & umr::MASK_RW != 0 {
            m.rw = bit(acc, 5);
        }
        if mask & umr::MASK_A != 0 {
            m.atomic = bit(acc, 6);
        }
        if mask & umr::MASK_FREE != 0 {
            m.free = get(mk, l::mkc::free) == 1;
        }
        if n > 0 {
            m.mtt = mtt;
        }
        Ok(())
    }

    /// Hand new RQ WQEs (per the doorbell record) to the engine.
    fn scan_rqs(&mut self) -> usize {
        let Some(eng) = self.engine.as_mut() else { return 0 };
        let mut work = 0;
        for q in self.qps.values_mut().filter(|q| q.rq_type == 0 && q.state != qps::RST) {
            let qpn = q.qpn;
            let head = match self.mem.dma_read_be32(q.dbr) {
                Ok(v) => v as u16,
                Err(_) => {
                    self.ctr.dma_faults += 1;
                    continue;
                }
            };
            let n = 1u32 << q.log_rq_size;
            let stride = 16usize << q.log_rq_stride;
            let mut hw = q.rq_hw;
            let mut posts = Vec::new();
            while hw != head && (head.wrapping_sub(hw) as u32) <= n {
                let off = ((hw as u32) & (n - 1)) as u64 * stride as u64;
                let mut w = vec![0u8; stride];
                let ok = q.buf.pa(off).map(|pa| self.mem.dma_read(pa, &mut w).is_ok()).unwrap_or(false);
                if !ok {
                    self.ctr.dma_faults += 1;
                    break;
                }
                let mut sges = Vec::new();
                for s in w.chunks(16) {
                    let lkey = u32::from_be_bytes(s[4..8].try_into().unwrap());
                    if lkey == INVALID_LKEY {
                        break;
                    }
                    let bc = u32::from_be_bytes(s[0..4].try_into().unwrap()) & 0x7fff_ffff;
                    let addr = u64::from_be_bytes(s[8..16].try_into().unwrap());
                    sges.push(Sge { addr, len: bc, lkey: emu_roce::Lkey(lkey) });
                }
                posts.push(RecvWr { wr_id: hw as u64, sges });
                hw = hw.wrapping_add(1);
            }
            q.rq_hw = hw;
            for wr in posts {
                self.ctr.recv_wqes += 1;
                work += 1;
                if let Err(err) = eng.post_recv(Qpn(qpn), wr) {
                    debug!("cx: QP {qpn:#x} recv: {err:?}");
                }
            }
        }
        work
    }

    /// Move a QP to ERROR after a WQE the adapter cannot run: error CQE, then flushes.
    fn fail_qp(&mut self, qpn: u32, idx: u16, opcode: u8, syndrome: u8) {
        self.req_cqe(qpn, idx, opcode, syndrome);
        let qpc = self.qps[&qpn].qpc.clone();
        if let Some(e) = self.engine.as_mut() {
            let _ = e.modify_qp(Qpn(qpn), QpState::Error, &attrs_of(&qpc));
        }
        let q = self.qps.get_mut(&qpn).expect("qp");
        q.state = qps::ERR;
        mlx5_ifc::layout::set(&mut q.qpc, l::qpc::state, qps::ERR as u64);
        self.drain_completions();
    }

    /// A requester CQE written by the adapter itself (NOP, LOCAL_INVAL, WQE errors).
    fn req_cqe(&mut self, qpn: u32, idx: u16, opcode: u8, syndrome: u8) {
        let mut c = [0u8; 64];
        set(&mut c, cqe::s_wqe_opcode, opcode as u64);
        set(&mut c, cqe::qpn, qpn as u64);
        set(&mut c, cqe::wqe_counter, idx as u64);
        if syndrome != 0 {
            set(&mut c, cqe::syndrome, syndrome as u64);
            set(&mut c, cqe::opcode, cqe_op::REQ_ERR as u64);
        } else {
            set(&mut c, cqe::opcode, cqe_op::REQ as u64);
        }
        let cqn = self.qps[&qpn].cqn_snd;
        self.post_cqe(cqn, &c);
    }

    /// Turn the engine's completions into CQEs.
    fn drain_completions(&mut self) -> usize {
        self.drain_completions_noting_errors(&mut Vec::new())
    }

    /// [`Self::drain_completions`], noting in `errors` the QPs that got an error CQE other than
    /// a flush (their error is reported by the CQE, not by an async event).
    fn drain_completions_noting_errors(&mut self, errors: &mut Vec<u32>) -> usize {
        let mut n = 0;
        loop {
            let Some(c) = self.engine.as_mut().and_then(|e| e.pop_completion()) else { break };
            n += 1;
            if !matches!(c.status, WcStatus::Success | WcStatus::WrFlushed) && !errors.contains(&c.qpn.0) {
                errors.push(c.qpn.0);
            }
            self.completion_cqe(&c);
        }
        n
    }

    fn completion_cqe(&mut self, c: &Completion) {
        let Some(q) = self.qps.get(&c.qpn.0) else { return };
        let mut e = [0u8; 64];
        let send = c.queue == WorkQueue::Send;
        let cqn = if send { q.cqn_snd } else { q.cqn_rcv };
        let wqe_opcode = (c.wr_id >> 32) as u8;
        let counter = (c.wr_id & 0xffff) as u16;
        set(&mut e, cqe::wqe_counter, counter as u64);
        let qpn = c.qpn.0 & 0xff_ffff;
        if c.status != WcStatus::Success {
            let s = match c.status {
                WcStatus::LocalLength => cqe_synd::LOCAL_LENGTH_ERR,
                WcStatus::LocalQpOperation => cqe_synd::LOCAL_QP_OP_ERR,
                WcStatus::LocalProtection => cqe_synd::LOCAL_PROT_ERR,
                WcStatus::WrFlushed => cqe_synd::WR_FLUSH_ERR,
                WcStatus::BadResponse => cqe_synd::BAD_RESP_ERR,
                WcStatus::LocalAccess => cqe_synd::LOCAL_ACCESS_ERR,
                WcStatus::RemoteInvalidRequest => cqe_synd::REMOTE_INVAL_REQ_ERR,
                WcStatus::RemoteAccess => cqe_synd::REMOTE_ACCESS_ERR,
                WcStatus::RemoteOperation => cqe_synd::REMOTE_OP_ERR,
                WcStatus::RetryExceeded => cqe_synd::TRANSPORT_RETRY_EXC_ERR,
                WcStatus::RnrRetryExceeded => cqe_synd::RNR_RETRY_EXC_ERR,
                WcStatus::Success => 0,
            };
            set(&mut e, cqe::syndrome, s as u64);
            set(&mut e, cqe::vendor_err_synd, c.vendor_err as u64);
            set(&mut e, cqe::s_wqe_opcode, if send { wqe_opcode as u64 } else { 0 });
            set(&mut e, cqe::qpn, qpn as u64);
            set(&mut e, cqe::opcode, if send { cqe_op::REQ_ERR } else { cqe_op::RESP_ERR } as u64);
            // The engine moved the QP to ERROR: mirror it.
            if let Some(q) = self.qps.get_mut(&c.qpn.0) {
                q.state = qps::ERR;
                mlx5_ifc::layout::set(&mut q.qpc, l::qpc::state, qps::ERR as u64);
            }
        } else if send {
            set(&mut e, cqe::s_wqe_opcode, wqe_opcode as u64);
            set(&mut e, cqe::qpn, qpn as u64);
            if c.opcode == WcOpcode::RdmaRead {
                set(&mut e, cqe::byte_cnt, c.byte_len as u64);
            }
            set(&mut e, cqe::opcode, cqe_op::REQ as u64);
        } else {
            set(&mut e, cqe::qpn, qpn as u64);
            set(&mut e, cqe::byte_cnt, c.byte_len as u64);
            let op = match (c.opcode, c.imm, c.invalidated_rkey) {
                (WcOpcode::RecvRdmaWithImm, _, _) => cqe_op::RESP_WR_IMM,
                (_, Some(_), _) => cqe_op::RESP_SEND_IMM,
                (_, _, Some(_)) => cqe_op::RESP_SEND_INV,
                _ => cqe_op::RESP_SEND,
            };
            if let Some(imm) = c.imm {
                set(&mut e, cqe::imm_inval_pkey, imm as u64);
            } else if let Some(k) = c.invalidated_rkey {
                set(&mut e, cqe::imm_inval_pkey, k.0 as u64);
            }
            if c.grh {
                // flags_rqpn: the GRH-present flag (bits 29:28 = 1) and the source QPN.
                set(&mut e, cqe::flags_rqpn, (1u64 << 28) | (c.src_qp.0 & 0xff_ffff) as u64);
            }
            set(&mut e, cqe::opcode, op as u64);
        }
        self.post_cqe(cqn, &e);
    }
}
