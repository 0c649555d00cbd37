//! Identify: controller (limits, VWC, ONCS, MDTS = the smaller of the fabric's and the drives'),
//! namespace (passed through from the drive where it has one), active namespace list,
//! namespace identification descriptors. Facts: NVMe Base 2.0 §5.17, NVM Command Set 1.0 §4.1.5.

use blockdev::BlockDevice;
use zerocopy::IntoBytes;

use super::*;
use crate::wire::*;

impl<B: BlockDevice> Core<B> {
    pub(super) fn identify(&mut self, cntlid: u16, sqe: &Sqe, sgl_len: u32) -> Action {
        let cns = (sqe.cdw10.get() & 0xFF) as u8;
        if (sgl_len as usize) < 4096 {
            return Action::status(Status::SGL_INVALID_DATA);
        }
        let Some(c) = self.ctrl(cntlid) else { return Action::status(Status::INTERNAL) };
        let subsys = c.subsys;
        let nsid = sqe.nsid.get();
        self.out[..4096].fill(0);
        match (cns, subsys) {
            (cns::CONTROLLER, _) => {
                let id = self.identify_ctrl(cntlid, subsys);
                self.out[..4096].copy_from_slice(id.as_bytes());
            }
            (cns::NAMESPACE, Some(si)) => {
                let sub = &self.subsystems[si];
                let Some(ni) = sub.ns(nsid) else {
                    return Action::status(Status::INVALID_NS);
                };
                if sub.ns_stats[ni].failed {
                    // Inactive: an all-zero page.
                    return Action::ok(0, 4096);
                }
                let id = identify_ns(&sub.cfg.namespaces[ni]);
                self.out[..4096].copy_from_slice(id.as_bytes());
            }
            (cns::ACTIVE_NS_LIST, Some(si)) => {
                let mut ids: heapless::Vec<u32, 1024> = heapless::Vec::new();
                let sub = &self.subsystems[si];
                for (n, st) in sub.cfg.namespaces.iter().zip(&sub.ns_stats) {
                    if n.nsid > nsid && nsid < 0xFFFF_FFFE && !st.failed {
                        let _ = ids.push(n.nsid);
                    }
                }
                ids.sort_unstable();
                for (i, id) in ids.iter().enumerate() {
                    self.out[i * 4..i * 4 + 4].copy_from_slice(&id.to_le_bytes());
                }
            }
            (cns::NS_DESC_LIST, Some(si)) => {
                let sub = &self.subsystems[si];
                let Some(ni) = sub.ns(nsid) else {
                    return Action::status(Status::INVALID_NS);
                };
                if sub.ns_stats[ni].failed {
                    // Inactive: no descriptors.
                    return Action::ok(0, 4096);
                }
                let n = &sub.cfg.namespaces[ni];
                let mut off = 0;
                let eui64 = n.dev.identity().map_or([0; 8], |i| i.eui64);
                let descs: [(u8, &[u8]); 3] = [(nidt::EUI64, &eui64), (nidt::NGUID, &n.nguid), (nidt::UUID, &n.nguid)];
                for (t, id) in descs {
                    if id.iter().all(|b| *b == 0) {
                        continue;
                    }
                    let h = NsIdDescHdr { nidt: t, nidl: id.len() as u8, rsvd: U16::new(0) };
                    self.out[off..off + 4].copy_from_slice(h.as_bytes());
                    self.out[off + 4..off + 4 + id.len()].copy_from_slice(id);
                    off += 4 + id.len();
                }
                let h = NsIdDescHdr { nidt: nidt::CSI, nidl: 1, rsvd: U16::new(0) };
                self.out[off..off + 4].copy_from_slice(h.as_bytes());
                self.out[off + 4] = 0; // NVM command set
            }
            // The NVM command set's non-MDTS limits (CSI 0), the tightest of the subsystem's
            // stores: hosts then keep Write Zeroes and Deallocate within what every drive
            // takes (larger ones are refused with Invalid Field before reaching a drive).
            (cns::NVM_CTRL, Some(si)) if sqe.cdw11.get() >> 24 == 0 => {
                let id = self.identify_ctrl_nvm(si);
                self.out[..4096].copy_from_slice(id.as_bytes());
            }
            _ => return Action::status(Status::INVALID_FIELD),
        }
        Action::ok(0, 4096)
    }

    /// WZSL: 2^WZSL 4 KiB pages, the largest power of two within every Write Zeroes-capable
    /// store's limit (at least 8 KiB: WZSL 0 would mean no limit). DMRSL: the smallest
    /// Deallocate limit in blocks (each range becomes one drive command, so DMRL and DMSL
    /// stay 0: any number of ranges up to the command's 256, in total).
    fn identify_ctrl_nvm(&self, si: usize) -> IdentifyCtrlNvm {
        let mut id = IdentifyCtrlNvm::zeroed();
        let nss = &self.subsystems[si].cfg.namespaces;
        let wz_bytes = nss.iter().filter(|n| n.dev.supports(BlockOp::WriteZeroes)).map(|n| n.dev.op_limits().write_zeroes_blocks as u64 * n.dev.block_size() as u64).min();
        if let Some(b) = wz_bytes {
            id.wzsl = (63 - (b / 4096).max(2).leading_zeros()) as u8;
        }
        let dealloc = nss.iter().filter(|n| n.dev.supports(BlockOp::Deallocate)).map(|n| n.dev.op_limits().deallocate_blocks).min();
        id.dmrsl = U32::new(dealloc.unwrap_or(0));
        id
    }

    pub(super) fn identify_ctrl(&self, cntlid: u16, subsys: Option<usize>) -> IdentifyCtrl {
        let mut id = IdentifyCtrl::zeroed();
        let (nqn, serial, model): (&str, &str, &str) = match subsys {
            Some(si) => {
                let s = &self.subsystems[si].cfg;
                (&s.nqn, &s.serial, &s.model)
            }
            None => (DISCOVERY_NQN, "discovery", "appliance discovery"),
        };
        put_str(&mut id.sn, serial, b' ');
        put_str(&mut id.mn, model, b' ');
        put_str(&mut id.fr, env!("CARGO_PKG_VERSION"), b' ');
        put_str(&mut id.subnqn, nqn, 0);
        id.rab = 6;
        let max_io = subsys.map_or(self.cfg.max_io_bytes, |si| self.subsystems[si].max_io_bytes);
        id.mdts = (max_io / 4096).trailing_zeros() as u8;
        id.cntlid = U16::new(cntlid);
        id.ver = U32::new(0x0001_0300);
        id.ctratt = U32::new(1 << 2); // TBKAS: any command resets the keep-alive timer
        id.aerl = MAX_AERS as u8 - 1;
        id.acl = 3; // 4 concurrent Aborts (0's based; the spec recommends at least 4)
        id.lpa = 1 << 2; // extended data for Get Log Page (offsets)
        id.elpe = ERROR_LOG_ENTRIES as u8 - 1;
        id.kas = U16::new(10);
        id.sqes = 0x66;
        id.cqes = 0x44;
        id.sgls = U32::new(sgls::SUPPORTED | sgls::KEYED | if self.cfg.inline_data_size > 0 { sgls::OFFSET } else { 0 });
        id.ioccsz = U32::new((64 + self.cfg.inline_data_size) / 16);
        id.iorcsz = U32::new(1);
        id.icdoff = U16::new(0);
        id.msdbd = 1;
        id.frmw = 1 << 1 | 1; // one slot, slot 1 read-only
        match subsys {
            Some(si) => {
                id.cntrltype = cntrltype::IO;
                id.oaes = U32::new(OAES_NS_ATTR);
                id.maxcmd = U16::new(self.cfg.io_queue_depth);
                let nn = self.subsystems[si].cfg.namespaces.iter().map(|n| n.nsid).max().unwrap_or(0);
                id.nn = U32::new(nn);
                id.mnan = U32::new(nn);
                // Write Zeroes and Dataset Management where every namespace's store has them
                // (a drive without them would fail the host's command).
                let nss = &self.subsystems[si].cfg.namespaces;
                let all = |op| nss.iter().all(|n| n.dev.supports(op));
                let mut o = 0;
                if all(BlockOp::Deallocate) {
                    o |= oncs::DSM;
                }
                if all(BlockOp::WriteZeroes) {
                    o |= oncs::WRITE_ZEROES;
                }
                if all(BlockOp::Compare) {
                    o |= oncs::COMPARE;
                }
                id.oncs = U16::new(o);
                // A volatile write cache anywhere in the subsystem: hosts send Flush (to one
                // namespace at a time) and FUA.
                if self.subsystems[si].cfg.namespaces.iter().any(|n| n.dev.volatile_write_cache()) {
                    id.vwc = vwc::PRESENT | vwc::FLUSH_BROADCAST_UNSUPPORTED;
                }
            }
            None => {
                id.cntrltype = cntrltype::DISCOVERY;
                id.maxcmd = U16::new(ADMIN_QUEUE_DEPTH);
            }
        }
        id
    }
}

/// Identify Namespace for `n`: size and block size from its store, the drive's identity
/// and layout hints when the store has them (LBA format 0 is the data size the host sees;
/// the driver handles any metadata itself), NGUID as configured.
fn identify_ns<B: BlockDevice>(n: &NamespaceConfig<B>) -> IdentifyNs {
    let mut id = IdentifyNs::zeroed();
    let blocks = n.dev.num_blocks();
    id.nsze = U64::new(blocks);
    id.ncap = U64::new(blocks);
    id.nuse = U64::new(blocks);
    id.nlbaf = 0;
    id.flbas = 0;
    id.nguid = n.nguid;
    id.lbaf[0].lbads = n.dev.block_size().trailing_zeros() as u8;
    if let Some(d) = n.dev.identity() {
        if d.ncap != 0 {
            id.ncap = U64::new(d.ncap.min(blocks));
            id.nuse = U64::new(d.nuse.min(blocks));
        }
        id.nsfeat = d.nsfeat;
        id.dlfeat = d.dlfeat;
        id.noiob = U16::new(d.noiob);
        id.npwg = U16::new(d.npwg);
        id.npwa = U16::new(d.npwa);
        id.npdg = U16::new(d.npdg);
        id.npda = U16::new(d.npda);
        id.nows = U16::new(d.nows);
        id.eui64 = d.eui64;
    }
    id
}
