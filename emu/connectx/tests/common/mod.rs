//! A minimal hand-made command builder for the model tests (not the driver): it owns a
//! command queue page and mailboxes in `PhysMem` and rings the doorbell through BAR0.
#![allow(dead_code)]
use emu_connectx::consts::op;
use mlx5_ifc::ifc as l;
use mlx5_ifc::layout::{get, set, Field};

/// Where every alloc/create output and dealloc/destroy input these tests send carries the
/// object number: dword 2 bits 23:0 (mlx5_ifc.h alloc_pd_out.pd, destroy_cq_in.cqn, ...).
pub const OBJ_ID: Field = l::alloc_pd_out::pd;
use emu_connectx::*;
use emu_connectx::consts::{event, qp, reg};
use hal::{DmaRegion, Hal, Mmio};

pub struct Rig {
    pub hal: SimHal,
    pub cx: ConnectX,
    pub bar: Bar0,
    pub cmdq: SimDma,
    pub in_mb: Vec<SimDma>,
    pub out_mb: Vec<SimDma>,
    pub token: u8,
}

/// Outcome of a command: delivery status, then (status, syndrome, output bytes).
#[derive(Debug)]
pub struct Done {
    pub delivery: u8,
    pub status: u8,
    pub syndrome: u32,
    pub out: Vec<u8>,
}

impl Rig {
    pub fn new() -> Rig {
        Self::with(Config::default())
    }
    pub fn with(cfg: Config) -> Rig {
        let mem = PhysMem::new();
        let clock = SimClock::new();
        let hal = SimHal::new(mem.clone(), clock.clone());
        let cx = ConnectX::new(mem, clock, cfg);
        let bar = cx.bar0();
        let cmdq = hal.dma_alloc(4096, 4096).unwrap();
        let mut r = Rig { hal, cx, bar, cmdq, in_mb: vec![], out_mb: vec![], token: 0 };
        for _ in 0..12 {
            let a = r.hal.dma_alloc(1024, 4096).unwrap();
            let b = r.hal.dma_alloc(1024, 4096).unwrap();
            r.in_mb.push(a);
            r.out_mb.push(b);
        }
        r
    }

    /// Wait for `initializing` to clear and program the command queue address.
    pub fn boot(&mut self) {
        assert!(hal::poll_until(&self.hal, 1_000_000_000, || self.bar.read32_be(0x1fc) >> 31 == 0));
        let pa = self.cmdq.paddr();
        self.bar.write32_be(0x10, (pa >> 32) as u32);
        self.bar.write32_be(0x14, pa as u32);
    }

    /// Build entry `slot` with `input`, give it to HW, ring, and read the result.
    pub fn cmd_slot(&mut self, slot: usize, input: &[u8], outlen: usize) -> Done {
        self.token = self.token.wrapping_add(1).max(1);
        let t = self.token;
        let e = slot * 64;
        self.cmdq.fill(e, 64, 0);
        let mut ent = [0u8; 64];
        set(&mut ent, l::cmd_layout::r#type, 7);
        set(&mut ent, l::cmd_layout::ilen, input.len() as u64);
        set(&mut ent, l::cmd_layout::olen, outlen as u64);
        set(&mut ent, l::cmd_layout::token, t as u64);
        let n = input.len().min(16);
        ent[0x10..0x10 + n].copy_from_slice(&input[..n]);
        if input.len() > 16 {
            let nb = (input.len() - 16).div_ceil(512);
            for i in 0..nb {
                let mb = &self.in_mb[i];
                mb.fill(0, 1024, 0);
                let from = 16 + i * 512;
                let to = (from + 512).min(input.len());
                mb.write(0, &input[from..to]);
                let next = if i + 1 < nb { self.in_mb[i + 1].paddr() } else { 0 };
                mb.write_be64(0x230, next);
                mb.write_be32(0x238, i as u32);
                mb.write_u8(0x23d, t);
            }
            set(&mut ent, l::cmd_layout::iptr, self.in_mb[0].paddr());
        }
        if outlen > 16 {
            let nb = (outlen - 16).div_ceil(512);
            for i in 0..nb {
                let mb = &self.out_mb[i];
                mb.fill(0, 1024, 0);
                let next = if i + 1 < nb { self.out_mb[i + 1].paddr() } else { 0 };
                mb.write_be64(0x230, next);
                mb.write_be32(0x238, i as u32);
                mb.write_u8(0x23d, t);
            }
            set(&mut ent, l::cmd_layout::optr, self.out_mb[0].paddr());
        }
        set(&mut ent, l::cmd_layout::ownership, 1);
        self.cmdq.write(e, &ent);
        self.ring(slot);
        self.collect(slot, outlen)
    }

    pub fn ring(&self, slot: usize) {
        self.bar.write32_be(0x18, 1 << slot);
    }

    pub fn owned_by_hw(&self, slot: usize) -> bool {
        self.cmdq.read_u8(slot * 64 + 0x3f) & 1 == 1
    }

    pub fn collect(&self, slot: usize, outlen: usize) -> Done {
        let mut ent = [0u8; 64];
        self.cmdq.read(slot * 64, &mut ent);
        let mut out = ent[0x20..0x30].to_vec();
        if outlen > 16 {
            let nb = (outlen - 16).div_ceil(512);
            for i in 0..nb {
                let mut b = vec![0u8; 512];
                self.out_mb[i].read(0, &mut b);
                out.extend_from_slice(&b);
            }
        }
        out.truncate(outlen.max(16));
        Done {
            delivery: get(&ent, l::cmd_layout::status) as u8,
            status: get(&out, l::mbox_out::status) as u8,
            syndrome: get(&out, l::mbox_out::syndrome) as u32,
            out,
        }
    }

    pub fn cmd(&mut self, input: &[u8], outlen: usize) -> Done {
        self.cmd_slot(0, input, outlen)
    }

    /// Run a command that must succeed; returns its output.
    pub fn ok(&mut self, input: &[u8], outlen: usize) -> Vec<u8> {
        let d = self.cmd(input, outlen);
        let opc = get(input, l::mbox_in::opcode) as u16;
        assert_eq!((d.delivery, d.status, d.syndrome), (0, 0, 0), "{} failed", op::name(opc).unwrap_or("UNKNOWN"));
        d.out
    }
}

/// A zeroed input of `len` bytes with opcode and op_mod set.
pub fn inp(opcode: u16, op_mod: u16, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    set(&mut v, l::mbox_in::opcode, opcode as u64);
    set(&mut v, l::mbox_in::op_mod, op_mod as u64);
    v
}

/// Give `n` pages to firmware; the pages stay owned by `keep`.
pub fn give_pages(r: &mut Rig, keep: &mut Vec<SimDma>, n: usize) {
    let mut i = inp(op::MANAGE_PAGES, 1, 16 + 8 * n);
    set(&mut i, l::manage_pages_in::input_num_entries, n as u64);
    for k in 0..n {
        let p = r.hal.dma_alloc(4096, 4096).unwrap();
        set(&mut i, l::manage_pages_in::pas.at_byte(8 * k), p.paddr());
        keep.push(p);
    }
    r.ok(&i, 16);
}

pub fn query_pages(r: &mut Rig, op_mod: u16) -> i32 {
    let o = r.ok(&inp(op::QUERY_PAGES, op_mod, 16), 16);
    get(&o, l::query_pages_out::num_pages) as u32 as i32
}

/// Take every page back; returns how many came back.
pub fn reclaim(r: &mut Rig, keep: &mut Vec<SimDma>) -> usize {
    let mut total = 0;
    loop {
        let n = 8;
        let mut i = inp(op::MANAGE_PAGES, 2, 16);
        set(&mut i, l::manage_pages_in::input_num_entries, n);
        let o = r.ok(&i, 16 + 8 * n as usize);
        let got = get(&o, l::manage_pages_out::output_num_entries) as usize;
        for k in 0..got {
            let pa = get(&o, l::manage_pages_out::pas.at_byte(8 * k));
            let pos = keep.iter().position(|p| p.paddr() == pa).expect("page we gave");
            keep.swap_remove(pos);
        }
        total += got;
        if got == 0 {
            return total;
        }
    }
}

pub struct Up {
    pub pages: Vec<SimDma>,
    pub uar: u32,
    pub eqn: u8,
    pub eq_buf: SimDma,
    pub pd: u32,
    pub td: u32,
    pub mkey_pa: u32,
    pub mkey_mtt: u32,
    pub cq: u32,
    pub cq_buf: SimDma,
    pub cq_dbr: SimDma,
    pub qp_rc: u32,
    pub qp1: u32,
    pub _qp_bufs: Vec<SimDma>,
}

pub const LOG_EQ: u8 = 4;

pub fn create_eq(r: &mut Rig, uar: u32, mask: u64, log: u8) -> (u8, SimDma) {
    let buf = r.hal.dma_alloc(64 << log, 4096).unwrap();
    for k in 0..(1usize << log) {
        buf.write_u8(k * 64 + 0x3f, 1);
    }
    let np = (64usize << log).div_ceil(4096);
    let mut i = inp(op::CREATE_EQ, 0, 0x110 + 8 * np);
    let c = &mut i[0x10..0x50];
    set(c, l::eqc::log_eq_size, log as u64);
    set(c, l::eqc::uar_page, uar as u64);
    set(&mut i, l::create_eq_in::event_bitmask.element(64, 0), mask);
    for k in 0..np {
        set(&mut i, l::create_eq_in::pas.at_byte(8 * k), buf.paddr() + 4096 * k as u64);
    }
    let o = r.ok(&i, 16);
    (get(&o, l::create_eq_out::eq_number) as u8, buf)
}

pub fn create_cq(r: &mut Rig, uar: u32, eqn: u8, log: u8) -> (u32, SimDma, SimDma) {
    let buf = r.hal.dma_alloc(64 << log, 4096).unwrap();
    for k in 0..(1usize << log) {
        buf.write_u8(k * 64 + 0x3f, 0xf1);
    }
    let dbr = r.hal.dma_alloc(64, 64).unwrap();
    let np = (64usize << log).div_ceil(4096);
    let mut i = inp(op::CREATE_CQ, 0, 0x110 + 8 * np);
    let c = &mut i[0x10..0x50];
    set(c, l::cqc::log_cq_size, log as u64);
    set(c, l::cqc::uar_page, uar as u64);
    set(c, l::cqc::c_eqn, eqn as u64);
    set(c, l::cqc::dbr_addr, dbr.paddr());
    for k in 0..np {
        set(&mut i, l::create_cq_in::pas.at_byte(8 * k), buf.paddr() + 4096 * k as u64);
    }
    let o = r.ok(&i, 16);
    (get(&o, OBJ_ID) as u32, buf, dbr)
}

pub fn create_qp(r: &mut Rig, st_: u8, pd: u32, uar: u32, cq: u32, bufs: &mut Vec<SimDma>) -> Done {
    // RQ 16 x 64 B, SQ 64 x 64 B => 5 KiB => 2 pages.
    let buf = r.hal.dma_alloc(8192, 4096).unwrap();
    let dbr = r.hal.dma_alloc(64, 64).unwrap();
    let mut i = inp(op::CREATE_QP, 0, 0x110 + 16);
    let c = &mut i[0x18..0x18 + l::qpc::SIZE];
    set(c, l::qpc::st, st_ as u64);
    set(c, l::qpc::pm_state, 3);
    set(c, l::qpc::pd, pd as u64);
    set(c, l::qpc::uar_page, uar as u64);
    set(c, l::qpc::log_rq_size, 4);
    set(c, l::qpc::log_rq_stride, 2);
    set(c, l::qpc::log_sq_size, 6);
    set(c, l::qpc::rlky, 1);
    set(c, l::qpc::fre, 1);
    set(c, l::qpc::cqn_snd, cq as u64);
    set(c, l::qpc::cqn_rcv, cq as u64);
    set(c, l::qpc::dbr_addr, dbr.paddr());
    set(&mut i, l::create_qp_in::pas, buf.paddr());
    set(&mut i, l::create_qp_in::pas.at_byte(8), buf.paddr() + 4096);
    bufs.push(buf);
    bufs.push(dbr);
    r.cmd(&i, 16)
}

pub fn modify(r: &mut Rig, opcode: u16, qpn: u32, f: impl FnOnce(&mut [u8])) -> Done {
    let len = if matches!(opcode, op::QP_2ERR | op::QP_2RST) { 16 } else { 0x110 };
    let mut i = inp(opcode, 0, len);
    set(&mut i, l::query_qp_in::qpn, qpn as u64);
    if len > 16 {
        f(&mut i[0x18..0x18 + l::qpc::SIZE]);
    }
    r.cmd(&i, 16)
}

pub fn path(f: Field) -> Field {
    f.at(l::qpc::primary_address_path)
}

pub fn bring_up(r: &mut Rig) -> Up {
    bring_up_with(r, [10, 0, 0, 1], Peer::default())
}

/// The remote end of the RC QP.
pub struct Peer {
    pub qpn: u32,
    pub ip: [u8; 4],
    pub mac: [u8; 6],
}

impl Default for Peer {
    fn default() -> Self {
        Peer { qpn: 0x1234, ip: [10, 0, 0, 2], mac: [0x02, 0x00, 0x5e, 0x10, 0x00, 0x02] }
    }
}

pub fn bring_up_with(r: &mut Rig, ip: [u8; 4], peer: Peer) -> Up {
    r.boot();
    r.ok(&inp(op::ENABLE_HCA, 0, 16), 16);
    let o = r.ok(&inp(op::QUERY_ISSI, 0, 16), l::query_issi_out::SIZE);
    assert_eq!(get(&o, l::query_issi_out::supported_issi_dw0) & 2, 2, "ISSI 1 supported");
    let mut i = inp(op::SET_ISSI, 0, 16);
    set(&mut i, l::set_issi_in::current_issi, 1);
    r.ok(&i, 16);
    let mut pages = Vec::new();
    let n = query_pages(r, 1);
    assert!(n > 0);
    give_pages(r, &mut pages, n as usize);
    let mut i = inp(op::ACCESS_REG, 0, 32);
    set(&mut i, l::access_register_in::register_id, reg::HOST_ENDIANNESS as u64);
    r.ok(&i, 32);
    let cap = r.ok(&inp(op::QUERY_HCA_CAP, 1, 16), 0x1010);
    let c = &cap[0x10..];
    assert_eq!(get(c, l::cmd_hca_cap::roce), 1);
    assert_eq!(get(c, l::cmd_hca_cap::port_type), 1);
    let mut i = inp(op::SET_HCA_CAP, 0, 0x1010);
    i[0x10..].copy_from_slice(c);
    set(&mut i[0x10..], l::cmd_hca_cap::log_max_qp, 10);
    r.ok(&i, 16);
    let roce = r.ok(&inp(op::QUERY_HCA_CAP, (4 << 1) | 1, 16), 0x1010);
    assert_eq!(get(&roce[0x10..], l::roce_cap::r_roce_dest_udp_port), 4791);
    let mut i = inp(op::SET_HCA_CAP, 4 << 1, 0x1010);
    i[0x10..].copy_from_slice(&roce[0x10..]);
    set(&mut i[0x10..], l::roce_cap::sw_r_roce_src_udp_port, 1);
    r.ok(&i, 16);
    let n = query_pages(r, 2);
    give_pages(r, &mut pages, n as usize);
    r.ok(&inp(op::INIT_HCA, 0, 16), 16);
    // Regular pages the way Snabb/Theseus do it (the page-request path is tested separately).
    let n = query_pages(r, 3);
    give_pages(r, &mut pages, n as usize);
    assert_eq!(query_pages(r, 3), 0);
    let mut i = inp(op::MODIFY_NIC_VPORT_CONTEXT, 0, 0x200);
    set(&mut i, l::modify_nic_vport_field_select::roce_en.at(l::modify_nic_vport_context_in::field_select), 1);
    set(&mut i[0x100..], l::nic_vport_context::roce_en, 1);
    r.ok(&i, 16);
    let o = r.ok(&inp(op::QUERY_NIC_VPORT_CONTEXT, 0, 16), 0x110);
    assert_eq!(get(&o[0x10..], l::nic_vport_context::roce_en), 1);
    let mac = r.cx.device().cfg.mac;
    assert_eq!(&o[0x106..0x10c], &mac);
    let o = r.ok(&inp(op::ALLOC_UAR, 0, 16), 16);
    let uar = get(&o, OBJ_ID) as u32;
    let mask = (1 << event::PAGE_REQUEST) | (1 << event::CQ_ERROR) | (1 << event::PORT_CHANGE)
        | (1 << event::WQ_CATAS_ERROR) | (1 << event::WQ_ACCESS_ERROR);
    let (eqn, eq_buf) = create_eq(r, uar, mask, LOG_EQ);
    let o = r.ok(&inp(op::ALLOC_PD, 0, 16), 16);
    let pd = get(&o, OBJ_ID) as u32;
    let o = r.ok(&inp(op::ALLOC_TRANSPORT_DOMAIN, 0, 16), 16);
    let td = get(&o, OBJ_ID) as u32;
    let o = r.ok(&inp(op::QUERY_SPECIAL_CONTEXTS, 0, 16), 16);
    assert_ne!(get(&o, l::query_special_contexts_out::resd_lkey), 0);
    // PA mkey over everything.
    let mut i = inp(op::CREATE_MKEY, 0, 0x110);
    let m = &mut i[0x10..0x50];
    for f in [l::mkc::lr, l::mkc::lw, l::mkc::rr, l::mkc::rw, l::mkc::length64] {
        set(m, f, 1);
    }
    set(m, l::mkc::qpn, 0xff_ffff);
    set(m, l::mkc::mkey_7_0, 0x42);
    set(m, l::mkc::pd, pd as u64);
    let o = r.ok(&i, 16);
    let mkey_pa = get(&o, OBJ_ID) as u32;
    // MTT mkey over 3 pages.
    let mut i = inp(op::CREATE_MKEY, 0, 0x110 + 32);
    let m = &mut i[0x10..0x50];
    set(m, l::mkc::access_mode_1_0, 1);
    set(m, l::mkc::lr, 1);
    set(m, l::mkc::rr, 1);
    set(m, l::mkc::pd, pd as u64);
    set(m, l::mkc::start_addr, 0x7000_0000_0800);
    set(m, l::mkc::len, 3 * 4096 - 0x800);
    set(m, l::mkc::log_page_size, 12);
    set(m, l::mkc::translations_octword_size, 2);
    set(&mut i, l::create_mkey_in::translations_octword_actual_size, 2);
    for k in 0..3u64 {
        set(&mut i, l::create_mkey_in::klm_pas_mtt.element(64, k as u32), 0x2_0000_0000 + k * 0x1_0000 + 3);
    }
    let o = r.ok(&i, 16);
    let mkey_mtt = get(&o, OBJ_ID) as u32;
    // GID 0 = ::ffff:10.0.0.1, RoCEv2.
    let mut i = inp(op::SET_ROCE_ADDRESS, 0, 0x30);
    let g = &mut i[0x10..0x30];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..16].copy_from_slice(&ip);
    set(g, l::roce_addr_layout::roce_version, 2);
    r.ok(&i, 16);
    let (cq, cq_buf, cq_dbr) = create_cq(r, uar, eqn, 6);
    let mut qp_bufs = Vec::new();
    let d = create_qp(r, qp::ST_RC, pd, uar, cq, &mut qp_bufs);
    assert_eq!(d.status, 0, "{d:?}");
    let qp_rc = get(&d.out, l::query_qp_in::qpn) as u32;
    let d = create_qp(r, qp::ST_QP1, pd, uar, cq, &mut qp_bufs);
    assert_eq!(d.status, 0);
    let qp1 = get(&d.out, l::query_qp_in::qpn) as u32;
    assert_eq!(qp1, 1);
    // RC: RST -> INIT -> RTR -> RTS.
    let d = modify(r, op::RST2INIT_QP, qp_rc, |c| {
        set(c, l::qpc::rre, 1);
        set(c, l::qpc::rwe, 1);
        set(c, path(l::ads::vhca_port_num), 1);
    });
    assert_eq!(d.status, 0);
    let d = modify(r, op::INIT2RTR_QP, qp_rc, |c| {
        set(c, l::qpc::mtu, 3);
        set(c, l::qpc::log_msg_max, 30);
        set(c, l::qpc::remote_qpn, peer.qpn as u64);
        let rg = path(l::ads::rgid_rip).byte();
        c[rg + 10] = 0xff;
        c[rg + 11] = 0xff;
        c[rg + 12..rg + 16].copy_from_slice(&peer.ip);
        set(c, l::qpc::next_rcv_psn, 0x100);
        set(c, path(l::ads::src_addr_index), 0);
        set(c, path(l::ads::hop_limit), 64);
        set(c, path(l::ads::udp_sport), 0xc001);
        set(c, path(l::ads::rmac_47_32), u16::from_be_bytes([peer.mac[0], peer.mac[1]]) as u64);
        set(c, path(l::ads::rmac_31_0), u32::from_be_bytes([peer.mac[2], peer.mac[3], peer.mac[4], peer.mac[5]]) as u64);
    });
    assert_eq!(d.status, 0, "{d:?}");
    let d = modify(r, op::RTR2RTS_QP, qp_rc, |c| {
        set(c, l::qpc::next_send_psn, 0x100);
        set(c, l::qpc::retry_count, 7);
        set(c, l::qpc::rnr_retry, 7);
        set(c, path(l::ads::ack_timeout), 14);
    });
    assert_eq!(d.status, 0);
    // QP1: RST -> INIT (q_key) -> RTR -> RTS.
    assert_eq!(modify(r, op::RST2INIT_QP, qp1, |c| set(c, l::qpc::q_key, 0x8001_0000)).status, 0);
    assert_eq!(modify(r, op::INIT2RTR_QP, qp1, |c| set(c, l::qpc::mtu, 1)).status, 0);
    assert_eq!(modify(r, op::RTR2RTS_QP, qp1, |_| {}).status, 0);
    Up { pages, uar, eqn, eq_buf, pd, td, mkey_pa, mkey_mtt, cq, cq_buf, cq_dbr, qp_rc, qp1, _qp_bufs: qp_bufs }
}

pub fn destroy(r: &mut Rig, opcode: u16, id: u32) {
    let mut i = inp(opcode, 0, 16);
    if opcode == op::DESTROY_EQ {
        set(&mut i, l::destroy_eq_in::eq_number, id as u64);
    } else {
        set(&mut i, OBJ_ID, id as u64);
    }
    r.ok(&i, 16);
}

pub fn tear_down(r: &mut Rig, mut u: Up) {
    destroy(r, op::DESTROY_QP, u.qp_rc);
    destroy(r, op::DESTROY_QP, u.qp1);
    destroy(r, op::DESTROY_CQ, u.cq);
    destroy(r, op::DESTROY_MKEY, u.mkey_pa);
    destroy(r, op::DESTROY_MKEY, u.mkey_mtt);
    destroy(r, op::DESTROY_EQ, u.eqn as u32);
    destroy(r, op::DEALLOC_TRANSPORT_DOMAIN, u.td);
    destroy(r, op::DEALLOC_PD, u.pd);
    destroy(r, op::DEALLOC_UAR, u.uar);
    r.ok(&inp(op::TEARDOWN_HCA, 0, 16), 16);
    let n = u.pages.len();
    assert_eq!(reclaim(r, &mut u.pages), n);
    r.ok(&inp(op::DISABLE_HCA, 0, 16), 16);
    drop(u);
}

