//! Fabrics commands other than Connect (`connect.rs`): Property Get/Set (CAP, VS, CC, CSTS;
//! enable, reset, shutdown), I/O queue Disconnect, Authentication Send/Receive.
//! Facts: NVMe-oF 1.1 §3.4-3.5, NVMe Base 2.0 §3.1 (controller properties), §3.7.2 (reset).

use blockdev::BlockDevice;
use zerocopy::{FromBytes, IntoBytes};

use super::*;
use crate::wire::*;

impl<B: BlockDevice> Core<B> {

    pub(super) fn exec_fabrics(&mut self, q: &mut QueueState, sqe: &Sqe, data: &DataIn<'_>, now_ns: u64) -> Action {
        match sqe.fctype() {
            fctype::CONNECT => self.connect(q, sqe, data, now_ns),
            _ if q.cntlid.is_none() => Action::status(Status::CMD_SEQ_ERROR),
            fctype::PROPERTY_GET if q.qid == 0 => self.property_get(q, sqe),
            fctype::PROPERTY_SET if q.qid == 0 => self.property_set(q, sqe),
            fctype::PROPERTY_GET | fctype::PROPERTY_SET => Action::status(Status::INVALID_OPCODE),
            // Disconnect of an I/O queue: the transport tears the queue down after responding.
            fctype::DISCONNECT if q.qid != 0 => Action::ok(0, 0),
            fctype::AUTH_SEND | fctype::AUTH_RECV => self.auth_cmd(q, sqe, data),
            _ => Action::status(Status::INVALID_OPCODE),
        }
    }

    /// Authentication Send/Receive on a queue whose host must authenticate.
    pub(super) fn auth_cmd(&mut self, q: &mut QueueState, sqe: &Sqe, data: &DataIn<'_>) -> Action {
        let Some(c) = q.cntlid.and_then(|id| self.ctrl(id)) else { return Action::status(Status::CMD_SEQ_ERROR) };
        let Some(subnqn) = c.subsys.and_then(|i| self.subsystems.get(i)).map(|s| s.cfg.nqn.clone()) else {
            return Action::status(Status::INVALID_OPCODE);
        };
        // Connection setup path only: the NQN copies are not per-I/O work.
        let hostnqn = c.hostnqn.clone();
        if sqe.fctype() == fctype::AUTH_SEND {
            let st = self.auth.send(&mut q.auth, sqe, data.bytes, data.sgl_len, &hostnqn, &subnqn);
            Action::status(st)
        } else {
            let (st, n) = self.auth.receive(&mut q.auth, sqe, &mut self.out[..], data.sgl_len, &hostnqn);
            Action::Respond { status: st, dw0: 0, dw1: 0, out_len: n }
        }
    }

    pub(super) fn cap(&self) -> u64 {
        // MQES (0-based), TO = 15 × 500 ms, CSS bit 0 (NVM), MPSMIN = MPSMAX = 0 (4 KiB).
        nvme_spec::props::Cap::new().with_mqes(self.cfg.io_queue_depth - 1).with_to(15).with_css(1).into_bits()
    }

    pub(super) fn property_get(&mut self, q: &QueueState, sqe: &Sqe) -> Action {
        let cmd = PropertyGetCmd::read_from_bytes(sqe.as_bytes()).expect("64 bytes");
        let Some(c) = self.ctrl(q.cntlid.unwrap_or(0)) else { return Action::status(Status::INTERNAL) };
        let eight = cmd.attrib & 7 == 1;
        let v: u64 = match (cmd.offset.get(), eight) {
            (prop::CAP, true) => self.cap(),
            (prop::VS, false) => nvme_spec::props::Vs::new().with_major(1).with_minor(3).into_bits() as u64,
            (prop::CC, false) => c.cc as u64,
            (prop::CSTS, false) => c.csts as u64,
            _ => return Action::status(Status::INVALID_FIELD),
        };
        Action::Respond { status: Status::SUCCESS, dw0: v as u32, dw1: (v >> 32) as u32, out_len: 0 }
    }

    pub(super) fn property_set(&mut self, q: &QueueState, sqe: &Sqe) -> Action {
        let cmd = PropertySetCmd::read_from_bytes(sqe.as_bytes()).expect("64 bytes");
        let Some(c) = self.ctrl_mut(q.cntlid.unwrap_or(0)) else { return Action::status(Status::INTERNAL) };
        if cmd.offset.get() != prop::CC || cmd.attrib & 7 != 0 {
            return Action::status(Status::INVALID_FIELD);
        }
        let new = cmd.value.get() as u32;
        let old = c.cc;
        let was_enabled = c.enabled();
        let mut reset = None;
        c.cc = new;
        if cc::en(new) && !cc::en(old) {
            if cc::valid_for_enable(new) {
                c.csts = csts::RDY;
            } else {
                c.csts = csts::CFS;
            }
        } else if !cc::en(new) && cc::en(old) {
            // Controller reset (NVMe Base 2.0 §3.7.2; NVMe-oF: the I/O queues are deleted and
            // their connections torn down, the admin queue stays): pending AERs are dropped
            // without completion, the transport drops the I/O queues (`take_reset`).
            c.csts = 0;
            c.io_connected.iter_mut().for_each(|s| *s = false);
            c.aers.clear();
            reset = Some(c.cntlid);
        }
        if cc::shn(new) != 0 && cc::shn(old) == 0 {
            c.csts = (c.csts & !csts::RDY) | csts::SHST_COMPLETE;
        } else if cc::shn(new) == 0 && cc::shn(old) != 0 {
            c.csts &= !csts::SHST_COMPLETE;
        }
        if was_enabled && !c.enabled() {
            // Reset or shutdown: its I/O queues stop executing I/O (QueueState::enabled).
            self.ctrl_epoch = self.ctrl_epoch.wrapping_add(1);
        }
        if let Some(id) = reset {
            if !self.resets.iter().any(|&x| x == id) {
                if self.resets.len() < self.resets.capacity() {
                    self.resets.push_back(id);
                } else {
                    self.stats.reset_overflow += 1;
                    log::warn!("nvmeof: target: reset list full; controller {id}'s I/O queues stay until disconnect");
                }
            }
        }
        Action::ok(0, 0)
    }
}
