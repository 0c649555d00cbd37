//! Admin commands except Identify (`identify.rs`): Keep Alive, Set/Get Features, Asynchronous
//! Event Request, Abort, Get Log Page (error, SMART, firmware slot, changed namespace list,
//! discovery log). Facts: NVMe Base 2.0 §5 (Admin command set), NVMe-oF 1.1 §5 (discovery).

use blockdev::BlockDevice;
use zerocopy::IntoBytes;

use super::*;
use crate::wire::*;

impl<B: BlockDevice> Core<B> {

    pub(super) fn exec_admin(&mut self, q: &mut QueueState, sqe: &Sqe, data: &DataIn<'_>) -> Action {
        let cntlid = q.cntlid.unwrap_or(0);
        let discovery = self.ctrl(cntlid).is_some_and(|c| c.subsys.is_none());
        match sqe.opcode {
            admin_op::IDENTIFY => self.identify(cntlid, sqe, data.sgl_len),
            admin_op::GET_LOG_PAGE => self.get_log_page(cntlid, sqe, data.sgl_len),
            admin_op::KEEP_ALIVE => Action::ok(0, 0),
            admin_op::SET_FEATURES if !discovery || sqe.cdw10.get() & 0xFF == fid::KEEP_ALIVE_TIMER as u32 => {
                self.set_features(cntlid, sqe)
            }
            admin_op::GET_FEATURES => self.get_features(cntlid, sqe),
            admin_op::ASYNC_EVENT => {
                let Some(c) = self.ctrl_mut(cntlid) else { return Action::status(Status::INTERNAL) };
                if c.aers.push(data.tag).is_err() {
                    return Action::status(Status::ASYNC_LIMIT);
                }
                Action::Hold
            }
            admin_op::ABORT if !discovery => self.abort(cntlid, sqe),
            _ => Action::status(Status::INVALID_OPCODE),
        }
    }

    /// Abort (NVMe Base 2.0 §5.1): CDW10 = CID (31:16) | SQID (15:0). Commands here are never
    /// queued inside the controller (I/O is on the device or answered at once), so nothing is
    /// aborted: DW0 bit 0 = 1 ("not aborted"), the answer the spec allows for a command not
    /// found or not abortable. An SQID this controller never had is Invalid Field.
    pub(super) fn abort(&mut self, cntlid: u16, sqe: &Sqe) -> Action {
        let d10 = sqe.cdw10.get();
        let sqid = (d10 & 0xFFFF) as u16;
        let Some(c) = self.ctrl(cntlid) else { return Action::status(Status::INTERNAL) };
        if sqid > c.io_queues {
            return Action::status(Status::INVALID_FIELD);
        }
        Action::ok(1, 0)
    }

    pub(super) fn set_features(&mut self, cntlid: u16, sqe: &Sqe) -> Action {
        let fid = (sqe.cdw10.get() & 0xFF) as u8;
        let save = sqe.cdw10.get() & (1 << 31) != 0;
        let v = sqe.cdw11.get();
        let max_q = self.cfg.max_io_queues;
        let kato = self.cfg.limits.clamp_kato(v);
        if fid == fid::KEEP_ALIVE_TIMER && kato != v {
            self.bounds.hit(Bound::KatoClamped, self.now_ns, &cntlid);
        }
        let Some(c) = self.ctrl_mut(cntlid) else { return Action::status(Status::INTERNAL) };
        if save {
            return Action::status(Status::FEATURE_NOT_SAVEABLE);
        }
        match fid {
            fid::NUM_QUEUES => {
                let (nsq, ncq) = (v & 0xFFFF, v >> 16);
                if nsq == 0xFFFF || ncq == 0xFFFF {
                    return Action::status(Status::INVALID_FIELD);
                }
                let granted = (nsq.min(ncq) + 1).min(max_q as u32) as u16;
                c.io_queues = granted;
                let g = granted as u32 - 1;
                Action::ok(g | (g << 16), 0)
            }
            fid::KEEP_ALIVE_TIMER => {
                c.kato_ms = kato;
                Action::ok(0, 0)
            }
            fid::ASYNC_EVENT_CONFIG => {
                if v & !AEC_NS_ATTR & !0xFF != 0 {
                    return Action::status(Status::INVALID_FIELD);
                }
                c.aec = v;
                Action::ok(0, 0)
            }
            _ => Action::status(Status::INVALID_FIELD),
        }
    }

    pub(super) fn get_features(&mut self, cntlid: u16, sqe: &Sqe) -> Action {
        let fid = (sqe.cdw10.get() & 0xFF) as u8;
        let Some(c) = self.ctrl(cntlid) else { return Action::status(Status::INTERNAL) };
        match fid {
            fid::NUM_QUEUES if c.subsys.is_some() => {
                let g = c.io_queues as u32 - 1;
                Action::ok(g | (g << 16), 0)
            }
            fid::KEEP_ALIVE_TIMER => Action::ok(c.kato_ms, 0),
            fid::ASYNC_EVENT_CONFIG => Action::ok(c.aec, 0),
            _ => Action::status(Status::INVALID_FIELD),
        }
    }

    pub(super) fn get_log_page(&mut self, cntlid: u16, sqe: &Sqe, sgl_len: u32) -> Action {
        let d10 = sqe.cdw10.get();
        let lid = (d10 & 0xFF) as u8;
        let rae = d10 & (1 << 15) != 0;
        let numd = ((d10 >> 16) | ((sqe.cdw11.get() & 0xFFFF) << 16)) as u64 + 1;
        let len = numd * 4;
        let off = (sqe.cdw12.get() as u64) | ((sqe.cdw13.get() as u64) << 32);
        if len > ADMIN_MAX_XFER as u64 || len > sgl_len as u64 {
            return Action::status(Status::SGL_INVALID_DATA);
        }
        if off % 4 != 0 {
            return Action::status(Status::INVALID_FIELD);
        }
        let len = len as usize;
        let Some(c) = self.ctrl(cntlid) else { return Action::status(Status::INTERNAL) };
        let discovery = c.subsys.is_none();
        match (lid, discovery) {
            (lid::DISCOVERY, true) => {
                let (host, port) = (c.hostnqn.clone(), c.port);
                self.discovery_log(&host, port, off, len);
            }
            (lid::ERROR, _) => {
                let mut page = [0u8; ERROR_LOG_ENTRIES * 64];
                for i in 0..ERROR_LOG_ENTRIES {
                    let e = &c.errors[(c.err_head + i) % ERROR_LOG_ENTRIES];
                    page[i * 64..i * 64 + 64].copy_from_slice(e.as_bytes());
                }
                copy_window(&mut self.out[..len], &page, off);
            }
            (lid::SMART, false) => {
                let mut s = SmartLog::zeroed();
                s.temperature = U16::new(300);
                s.avail_spare = 100;
                s.spare_thresh = 10;
                s.data_units_read = U128::new(c.blocks_read_512.div_ceil(1000) as u128);
                s.data_units_written = U128::new(c.blocks_written_512.div_ceil(1000) as u128);
                s.host_reads = U128::new(c.host_reads as u128);
                s.host_writes = U128::new(c.host_writes as u128);
                s.power_cycles = U128::new(1);
                s.num_err_log_entries = U128::new(c.error_count as u128);
                copy_window(&mut self.out[..len], s.as_bytes(), off);
            }
            (lid::FW_SLOT, false) => {
                let mut f = FwSlotLog::zeroed();
                f.afi = 1;
                put_str(&mut f.frs[0], env!("CARGO_PKG_VERSION"), b' ');
                copy_window(&mut self.out[..len], f.as_bytes(), off);
            }
            (lid::CHANGED_NS, false) => {
                let mut l = NsList::zeroed();
                if c.changed_overflow {
                    l.ids[0] = U32::new(0xFFFF_FFFF);
                } else {
                    for (i, id) in c.changed.iter().enumerate() {
                        l.ids[i] = U32::new(*id);
                    }
                }
                copy_window(&mut self.out[..len], l.as_bytes(), off);
                if !rae {
                    if let Some(c) = self.ctrl_mut(cntlid) {
                        c.changed.clear();
                        c.changed_overflow = false;
                        c.aen_masked = false;
                    }
                }
            }
            _ => return Action::status(Status::INVALID_LOG_PAGE),
        }
        Action::ok(0, len as u32)
    }

    /// Fill `out[..len]` with the discovery log page bytes at `off`, generated per 1024-byte record.
    pub(super) fn discovery_log(&mut self, hostnqn: &str, port: u8, off: u64, len: usize) {
        // Entries: one per subsystem linked to the discovery controller's port and allowing
        // the host, with that port's address (as nvmet lists `req->port->subsystems`); none
        // when the target has no port to publish.
        let allowed: Vec<usize> = (0..self.subsystems.len())
            .filter(|&i| {
                let s = &self.subsystems[i].cfg;
                self.linked_via(i, port) && (s.allow_any_host || s.hosts.iter().any(|h| h == hostnqn))
            })
            .collect();
        let at = self.cfg.ports.get(port as usize).map(|p| (p.portid, p.traddr, p.trsvcid));
        let numrec = if at.is_some() { allowed.len() as u64 } else { 0 };
        let mut pos = 0usize;
        while pos < len {
            let abs = off + pos as u64;
            let rec = abs / 1024;
            let in_rec = (abs % 1024) as usize;
            let n = core::cmp::min(1024 - in_rec, len - pos);
            let mut buf = [0u8; 1024];
            if rec == 0 {
                let mut h = DiscLogHdr::zeroed();
                h.genctr = U64::new(self.genctr);
                h.numrec = U64::new(numrec);
                buf.copy_from_slice(h.as_bytes());
            } else if let (true, Some((portid, traddr, trsvcid))) = (rec - 1 < numrec, at) {
                let i = (rec - 1) as usize;
                let s = &self.subsystems[allowed[i]].cfg;
                let mut e = DiscLogEntry::zeroed();
                e.trtype = disc::TRTYPE_RDMA;
                e.adrfam = disc::ADRFAM_IPV4;
                e.subtype = disc::SUBTYPE_NVME;
                e.treq = 0;
                e.portid = U16::new(portid);
                e.cntlid = U16::new(CNTLID_DYNAMIC);
                e.asqsz = U16::new(ADMIN_QUEUE_DEPTH);
                let mut port = heapless::String::<8>::new();
                let _ = core::fmt::write(&mut port, format_args!("{trsvcid}"));
                put_str(&mut e.trsvcid, &port, 0);
                put_str(&mut e.subnqn, &s.nqn, 0);
                let mut addr = heapless::String::<16>::new();
                let a = traddr;
                let _ = core::fmt::write(&mut addr, format_args!("{}.{}.{}.{}", a[0], a[1], a[2], a[3]));
                put_str(&mut e.traddr, &addr, 0);
                e.tsas[0] = disc::QPTYPE_CONNECTED;
                e.tsas[1] = disc::PRTYPE_NOT_SPECIFIED;
                e.tsas[2] = disc::CMS_RDMA_CM;
                buf.copy_from_slice(e.as_bytes());
            }
            self.out[pos..pos + n].copy_from_slice(&buf[in_rec..in_rec + n]);
            pos += n;
        }
    }
}

/// Copy the window of `page` starting at `off` into `out` (zero beyond the page).
fn copy_window(out: &mut [u8], page: &[u8], off: u64) {
    out.fill(0);
    if off < page.len() as u64 {
        let off = off as usize;
        let n = core::cmp::min(out.len(), page.len() - off);
        out[..n].copy_from_slice(&page[off..off + n]);
    }
}
