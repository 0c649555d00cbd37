//! Fabrics Connect: admission of an admin queue (a new controller) or of an I/O queue (to an
//! existing controller). Checks in order: record format, Connect data, queue ID, NQNs, the
//! subsystem's allow-list, SQ size; then the bounds (`super::limits`): controllers in total
//! and per host; KATO clamped. An I/O queue is bound to its controller's admin connection:
//! same subsystem, host NQN, host ID and source GID, or it is refused with the answer an
//! unknown controller gets (Invalid Parameters on CNTLID), so the refusal reveals nothing.
//! Facts: NVMe-oF 1.1 §3.3 (Connect), §3.3.1 status values; Linux nvmet fabrics-cmd.c
//! behaviour (CNTLID 0xFFFF for dynamic controllers, IATTR/IPO in DW0).

use alloc::string::String;
use alloc::vec::Vec;

use blockdev::BlockDevice;
use zerocopy::{FromBytes, IntoBytes};

use super::limits::Bound;
use super::{Action, Core, Ctrl, CtrlSlot, DataIn, QueueState, ADMIN_QUEUE_DEPTH, ERROR_LOG_ENTRIES};
use crate::wire::*;

impl<B: BlockDevice> Core<B> {
    pub(super) fn connect(&mut self, q: &mut QueueState, sqe: &Sqe, data: &DataIn<'_>, now_ns: u64) -> Action {
        let Ok(cmd) = ConnectCmd::read_from_bytes(sqe.as_bytes()) else { return Action::status(Status::INTERNAL) };
        let invalid = |off: u32| Action::Respond { status: Status::CONNECT_INVALID_PARAM, dw0: off, dw1: 0, out_len: 0 };
        if q.cntlid.is_some() {
            return Action::status(Status::CMD_SEQ_ERROR);
        }
        if cmd.recfmt.get() != 0 {
            return Action::Respond { status: Status::CONNECT_FORMAT, dw0: 40, dw1: 0, out_len: 0 };
        }
        if data.bytes.len() < ConnectData::SIZE || data.sgl_len < ConnectData::SIZE as u32 {
            return Action::status(Status::SGL_INVALID_DATA);
        }
        let Ok(cd) = ConnectData::read_from_bytes(&data.bytes[..ConnectData::SIZE]) else {
            return Action::status(Status::SGL_INVALID_DATA);
        };
        let qid = cmd.qid.get();
        let sqsize = cmd.sqsize.get();
        if qid != q.qid {
            return invalid(connect_off::SQE_QID);
        }
        let (Some(subnqn), Some(hostnqn)) = (get_str(&cd.subsysnqn), get_str(&cd.hostnqn)) else {
            return invalid(connect_off::IATTR_DATA | connect_off::DATA_SUBNQN);
        };
        if hostnqn.is_empty() {
            return invalid(connect_off::IATTR_DATA | connect_off::DATA_HOSTNQN);
        }
        let subsys = if subnqn == DISCOVERY_NQN {
            None
        } else {
            // A subsystem not linked to the port the queue came in on is not there for it
            // (nvmet: "connect request for invalid subsystem").
            match self.subsystems.iter().position(|s| s.cfg.nqn == subnqn) {
                Some(i) if self.linked_via(i, q.port) => Some(i),
                _ => return invalid(connect_off::IATTR_DATA | connect_off::DATA_SUBNQN),
            }
        };
        if let Some(si) = subsys {
            let s = &self.subsystems[si].cfg;
            if !s.allow_any_host && !s.hosts.iter().any(|h| h == hostnqn) {
                self.stats.connects_refused += 1;
                log::warn!("nvmeof: target: host {hostnqn} not allowed on {subnqn}");
                return Action::Respond {
                    status: Status::CONNECT_INVALID_HOST,
                    dw0: connect_off::IATTR_DATA | connect_off::DATA_HOSTNQN,
                    dw1: 0,
                    out_len: 0,
                };
            }
        }
        let max_sq = if qid == 0 { ADMIN_QUEUE_DEPTH } else { self.cfg.io_queue_depth };
        if sqsize == 0 || sqsize >= max_sq {
            return invalid(connect_off::SQE_SQSIZE);
        }
        let cntlid = if qid == 0 {
            if cd.cntlid.get() != CNTLID_DYNAMIC {
                return invalid(connect_off::IATTR_DATA | connect_off::DATA_CNTLID);
            }
            match self.new_ctrl(q, subsys, hostnqn, &cd.hostid, cmd.kato.get(), now_ns) {
                Ok((id, slot)) => {
                    q.ctrl_slot = CtrlSlot(slot as u16);
                    id
                }
                Err(a) => return a,
            }
        } else {
            let want = cd.cntlid.get();
            let gid = q.peer_gid;
            let Some(slot) = self.ctrls.iter().position(|c| c.as_ref().is_some_and(|c| c.cntlid == want)) else {
                return invalid(connect_off::IATTR_DATA | connect_off::DATA_CNTLID);
            };
            q.ctrl_slot = CtrlSlot(slot as u16);
            let c = self.ctrls[slot].as_mut().expect("found");
            if c.subsys != subsys || c.subsys.is_none() || c.hostnqn != hostnqn || c.hostid != cd.hostid || c.source_gid != gid {
                self.bounds.hit(Bound::ForeignQueue, now_ns, &hostnqn);
                return invalid(connect_off::IATTR_DATA | connect_off::DATA_CNTLID);
            }
            if !c.enabled() {
                return Action::status(Status::CMD_SEQ_ERROR);
            }
            if qid > c.io_queues {
                return invalid(connect_off::SQE_QID);
            }
            let Some(slot) = c.io_connected.get_mut(qid as usize - 1) else { return invalid(connect_off::SQE_QID) };
            if *slot {
                return Action::status(Status::CONNECT_CTRL_BUSY);
            }
            *slot = true;
            c.last_seen_ns = now_ns;
            want
        };
        q.cntlid = Some(cntlid);
        if qid != 0 {
            // Its controller is enabled (checked above) and in a subsystem (not discovery).
            q.enabled = true;
            q.subsys = subsys.unwrap_or(0) as u16;
        }
        q.sqsize = sqsize;
        q.sqhd = 0;
        q.sq_flow_disabled = cmd.cattr & CATTR_DISABLE_SQFLOW != 0;
        let mut dw0 = cntlid as u32;
        if let Some(p) = subsys.and_then(|_| self.auth.required(subnqn, hostnqn)) {
            // Every queue of such a host authenticates (AUTHREQ.ATR), as with nvmet.
            q.auth = self.auth.begin(p);
            dw0 |= nvme_auth::wire::AUTHREQ_ATR;
        }
        Action::ok(dw0, 0)
    }

    /// Create the controller of an admitted admin-queue Connect, within the bounds.
    /// Returns its controller ID and its slot in the table.
    fn new_ctrl(&mut self, q: &QueueState, subsys: Option<usize>, hostnqn: &str, hostid: &[u8; 16], kato: u32, now_ns: u64) -> Result<(u16, usize), Action> {
        let busy = Action::status(Status::CONNECT_CTRL_BUSY);
        let Some(free) = self.ctrls.iter().position(|c| c.is_none()) else {
            self.bounds.hit(Bound::Ctrls, now_ns, &hostnqn);
            return Err(busy);
        };
        let held = self.ctrls.iter().flatten().filter(|c| c.hostnqn == hostnqn).count();
        if held >= self.cfg.limits.max_ctrls_per_host {
            self.bounds.hit(Bound::CtrlsPerHost, now_ns, &hostnqn);
            return Err(busy);
        }
        // Heap for the controller, fallibly: an exhausted heap refuses this host only.
        let mut name = String::new();
        let mut io_connected = Vec::new();
        if name.try_reserve_exact(hostnqn.len()).is_err() || io_connected.try_reserve_exact(self.cfg.max_io_queues as usize).is_err() {
            self.bounds.hit(Bound::Memory, now_ns, &hostnqn);
            return Err(busy);
        }
        name.push_str(hostnqn);
        io_connected.resize(self.cfg.max_io_queues as usize, false);
        let ctrls = &self.ctrls;
        let Some(cntlid) = self.cntlids.alloc(|id| ctrls.iter().flatten().any(|c| c.cntlid == id)) else {
            self.bounds.hit(Bound::Ctrls, now_ns, &hostnqn);
            return Err(busy);
        };
        let kato_ms = self.cfg.limits.clamp_kato(kato);
        if kato_ms != kato {
            self.bounds.hit(Bound::KatoClamped, now_ns, &hostnqn);
        }
        self.ctrls[free] = Some(Ctrl {
            cntlid,
            port: q.port,
            subsys,
            hostnqn: name,
            hostid: *hostid,
            source_gid: q.peer_gid,
            cc: 0,
            csts: 0,
            kato_ms,
            last_seen_ns: now_ns,
            io_queues: self.cfg.max_io_queues,
            io_connected,
            aec: 0,
            aers: heapless::Vec::new(),
            aen_masked: false,
            changed: heapless::Vec::new(),
            changed_overflow: false,
            errors: [ErrorLogEntry::zeroed(); ERROR_LOG_ENTRIES],
            error_count: 0,
            commands: 0,
            err_head: 0,
            host_reads: 0,
            host_writes: 0,
            blocks_read_512: 0,
            blocks_written_512: 0,
        });
        self.stats.ctrls_created += 1;
        let subnqn = subsys.map_or(DISCOVERY_NQN, |si| self.subsystems[si].cfg.nqn.as_str());
        log::info!("nvmeof: target: controller {cntlid} for {hostnqn} on {subnqn}, keep-alive {kato_ms} ms");
        Ok((cntlid, free))
    }
}
