//! A minimal hand-made command builder for the model tests (not the driver): it owns a
//! command queue page and mailboxes in `PhysMem` and rings the doorbell through BAR0.
#![allow(dead_code)]
use emu_connectx::consts::op;
use emu_connectx::layout::{self as l, get, set};
use emu_connectx::*;
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
        set(&mut ent, l::cmd_layout::type_, 7);
        set(&mut ent, l::cmd_layout::inlen, input.len() as u64);
        set(&mut ent, l::cmd_layout::outlen, outlen as u64);
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
            set(&mut ent, l::cmd_layout::in_ptr, self.in_mb[0].paddr());
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
            set(&mut ent, l::cmd_layout::out_ptr, self.out_mb[0].paddr());
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
            status: get(&out, l::cmd_out::status) as u8,
            syndrome: get(&out, l::cmd_out::syndrome) as u32,
            out,
        }
    }

    pub fn cmd(&mut self, input: &[u8], outlen: usize) -> Done {
        self.cmd_slot(0, input, outlen)
    }

    /// Run a command that must succeed; returns its output.
    pub fn ok(&mut self, input: &[u8], outlen: usize) -> Vec<u8> {
        let d = self.cmd(input, outlen);
        let opc = get(input, l::cmd_in::opcode) as u16;
        assert_eq!((d.delivery, d.status, d.syndrome), (0, 0, 0), "{} failed", op::name(opc));
        d.out
    }
}

/// A zeroed input of `len` bytes with opcode and op_mod set.
pub fn inp(opcode: u16, op_mod: u16, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    set(&mut v, l::cmd_in::opcode, opcode as u64);
    set(&mut v, l::cmd_in::op_mod, op_mod as u64);
    v
}
