//! Firmware command queue: 64-byte entries, inline in/out, chained mailboxes, ownership, tokens.
//!
//! Two slots, each with its own mailboxes: every command goes on the first; MANAGE_PAGES goes on
//! the last, reserved for it (Linux reserves its last slot for page commands, rdma-core
//! `mlx5_vfio.c` posts MANAGE_PAGES on slot 31). Firmware may raise a page request while it
//! executes a command (CREATE_QP/CQ/MKEY) and not complete that command until the pages are
//! given, so the caller services events while a command waits ([`CmdQueue::post`],
//! [`CmdQueue::poll`], [`CmdQueue::finish`]; the device's `run` loop) and answers page requests
//! on the reserved slot ([`CmdQueue::exec`] with [`Slot::Pages`]).

use crate::bar::{read_field, write_field};
use crate::error::Error;
use crate::health::HealthMonitor;
use crate::ifc::{cmd_layout as ent, cmd_prot_block as blk, init_seg, mbox_in, mbox_out};
use crate::layout::{get, set, set_bytes, Field};
use hal::{DmaRegion, Hal, Mmio};

pub use mlx5_ifc::op;

/// The mlx5_ifc name of a command opcode, for error messages.
pub fn opcode_name(opcode: u16) -> &'static str {
    op::name(opcode).unwrap_or("UNKNOWN_CMD")
}

/// Entry `type` for the PCIe command transport.
const CMD_TYPE_PCIE: u64 = 0x7;
/// Bytes of input/output carried inside the entry.
pub const INLINE: usize = 16;
/// Data bytes per mailbox block.
pub const BLOCK_DATA: usize = 512;
/// Stride between mailbox blocks (576-byte blocks, 1 KiB aligned as Linux's DMA pool).
pub const BLOCK_STRIDE: usize = 1024;
/// Mailbox blocks per direction: 16 + 72 * 512 = 36,880 bytes, enough for CREATE_MKEY with
/// 4,576 MTT entries (a 16 MiB registration of 4 KiB pages: an NVMe-oF queue of 128 x
/// 128 KiB buffers) and for SET_HCA_CAP / MANAGE_PAGES. 72 KiB of DMA memory per direction.
pub const MAX_BLOCKS: usize = 72;
/// Largest command input or output the queue can carry.
pub const MAX_MSG: usize = INLINE + MAX_BLOCKS * BLOCK_DATA;
/// Mailbox blocks per direction of the page slot: MANAGE_PAGES with 512 page addresses
/// (16 + 8 * 512 bytes of input, or of output when taking pages back).
pub const PAGE_SLOT_BLOCKS: usize = 9;
/// Largest MANAGE_PAGES input or output the page slot carries.
pub const PAGE_SLOT_MSG: usize = INLINE + PAGE_SLOT_BLOCKS * BLOCK_DATA;

/// A command slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// Slot 0: every command but the page commands.
    Main,
    /// The last slot, reserved for MANAGE_PAGES (usable while a command waits on `Main`).
    Pages,
}

/// Timeouts (nanoseconds of `Hal::now_ns`).
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// Waiting for `initializing` to clear (Linux allows 120 s before, 2 s after the cmdq address).
    pub init_ns: u64,
    /// One command (vfio allows 60 s).
    pub cmd_ns: u64,
    /// Health counter unchanged this long = firmware dead (Linux: 3 misses at 2 s).
    pub health_stall_ns: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts { init_ns: 120_000_000_000, cmd_ns: 60_000_000_000, health_stall_ns: 6_000_000_000 }
    }
}

/// A command in flight on a slot.
#[derive(Debug, Clone, Copy)]
struct Pending {
    opcode: u16,
    op_mod: u16,
    out_blocks: usize,
}

/// One slot: its index in the queue, its mailboxes and what it is running.
struct SlotState<D> {
    index: usize,
    mbox_in: D,
    mbox_out: D,
    max_msg: usize,
    pending: Option<Pending>,
}

/// The command queue and its mailboxes.
pub struct CmdQueue<D: DmaRegion> {
    queue: D,
    main: SlotState<D>,
    pages: SlotState<D>,
    token: u8,
    dead: bool,
    stride: usize,
    pub timeouts: Timeouts,
    health: Option<HealthMonitor>,
    /// Commands posted since creation.
    pub issued: u64,
    /// Commands that failed, by how ([`CmdErrors`]).
    pub errors: CmdErrors,
    /// Command trace ([`crate::trace`]); off by default.
    pub trace: crate::trace::TraceMode,
}

/// Command-interface failures since the queue was created, by kind (for metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CmdErrors {
    /// The firmware executed the command and returned a non-zero status.
    pub refused: u64,
    /// The command entry came back with a non-zero delivery status (bad signature, token, ...).
    pub delivery: u64,
    /// The command never came back (timeout or dead firmware): the queue is abandoned.
    pub abandoned: u64,
}

impl<D: DmaRegion> CmdQueue<D> {
    /// Allocate the queue page and mailboxes and tell the firmware where they are (init segment
    /// dwords 0x10/0x14), then wait for `initializing` to clear again.
    pub fn new<H: Hal<Dma = D>, M: Mmio + ?Sized>(hal: &H, bar: &M, timeouts: Timeouts) -> Result<Self, Error> {
        let l = read_field(bar, init_seg::log_cmdq_size) as u8;
        let s = read_field(bar, init_seg::log_cmdq_stride) as u8;
        // Two slots at least: one for commands, the last reserved for MANAGE_PAGES.
        if (1usize << s) < 64 || (l as u32 + s as u32) > 12 || l > 5 || l < 1 {
            return Err(Error::BadCmdqGeometry { log_size: l, log_stride: s });
        }
        let queue = hal.dma_alloc(4096, 4096)?;
        let main = SlotState {
            index: 0,
            mbox_in: hal.dma_alloc(MAX_BLOCKS * BLOCK_STRIDE, 4096)?,
            mbox_out: hal.dma_alloc(MAX_BLOCKS * BLOCK_STRIDE, 4096)?,
            max_msg: MAX_MSG,
            pending: None,
        };
        let pages = SlotState {
            index: (1usize << l) - 1,
            mbox_in: hal.dma_alloc(PAGE_SLOT_BLOCKS * BLOCK_STRIDE, 4096)?,
            mbox_out: hal.dma_alloc(PAGE_SLOT_BLOCKS * BLOCK_STRIDE, 4096)?,
            max_msg: PAGE_SLOT_MSG,
            pending: None,
        };
        let pa = queue.paddr();
        write_field(bar, init_seg::cmdq_addr_h, (pa >> 32) as u32);
        // Low dword: address bits 31:12; nic_interface 0 (full driver); size/stride read-only.
        let mut lo = [0u8; 4];
        let cmdq_l = Field { off: init_seg::cmdq_addr_l.off - 0x14 * 8, width: init_seg::cmdq_addr_l.width };
        set(&mut lo, cmdq_l, (pa as u32 >> 12) as u64);
        bar.write32_be(0x14, u32::from_be_bytes(lo));
        crate::health::wait_initialized(hal, bar, timeouts.init_ns)?;
        Ok(CmdQueue {
            queue,
            main,
            pages,
            token: 0,
            dead: false,
            stride: 1 << s,
            timeouts,
            health: None,
            issued: 0,
            errors: CmdErrors::default(),
            trace: crate::trace::TraceMode::Off,
        })
    }

    /// Start watching the health counter while commands wait.
    pub fn watch_health<H: Hal, M: Mmio + ?Sized>(&mut self, hal: &H, bar: &M) {
        self.health = Some(HealthMonitor::new(hal, bar, self.timeouts.health_stall_ns));
    }

    /// Check firmware health once (app poll loop).
    pub fn check_health<H: Hal, M: Mmio + ?Sized>(&mut self, hal: &H, bar: &M) -> Result<(), Error> {
        match self.health.as_mut() {
            Some(h) => h.check(hal, bar),
            None => Ok(()),
        }
    }

    /// When the health check next samples the counter (`None`: health not watched).
    pub fn next_health_sample(&self) -> Option<u64> {
        self.health.as_ref().map(|h| h.next_sample_ns())
    }

    /// Index of `slot` in the queue (for traces and tests).
    pub fn slot_index(&self, slot: Slot) -> usize {
        self.slot(slot).index
    }

    fn slot(&self, slot: Slot) -> &SlotState<D> {
        match slot {
            Slot::Main => &self.main,
            Slot::Pages => &self.pages,
        }
    }

    fn slot_mut(&mut self, slot: Slot) -> &mut SlotState<D> {
        match slot {
            Slot::Main => &mut self.main,
            Slot::Pages => &mut self.pages,
        }
    }

    fn next_token(&mut self) -> u8 {
        self.token = self.token.wrapping_add(1);
        if self.token == 0 {
            self.token = 1;
        }
        self.token
    }

    fn chain(region: &D, nblocks: usize, token: u8, data: Option<&[u8]>) {
        for i in 0..nblocks {
            let mut b = [0u8; 0x240];
            if let Some(d) = data {
                let from = i * BLOCK_DATA;
                let to = core::cmp::min(d.len(), from + BLOCK_DATA);
                if from < to {
                    b[..to - from].copy_from_slice(&d[from..to]);
                }
            }
            let next = if i + 1 < nblocks { region.paddr() + ((i + 1) * BLOCK_STRIDE) as u64 } else { 0 };
            set(&mut b, blk::next, next);
            set(&mut b, blk::block_num, i as u64);
            set(&mut b, blk::token, token as u64);
            region.write(i * BLOCK_STRIDE, &b);
        }
    }

    /// Execute one command on `slot` and wait for it without servicing events (page commands,
    /// and callers that cannot be asked for pages). `input` is the whole command input (header
    /// included), `output` receives the whole output (its length is announced to the firmware).
    pub fn exec<H: Hal, M: Mmio + ?Sized>(
        &mut self,
        hal: &H,
        bar: &M,
        slot: Slot,
        input: &[u8],
        output: &mut [u8],
    ) -> Result<(), Error> {
        self.post(bar, slot, input, output.len())?;
        let start = hal.now_ns();
        loop {
            match self.poll(hal, bar, slot) {
                Ok(true) => return self.finish(slot, input, output),
                Ok(false) => {}
                Err(e) => return Err(self.abandon(slot, input, output, e)),
            }
            if hal.now_ns().wrapping_sub(start) >= self.timeouts.cmd_ns {
                let e = self.timed_out(slot);
                return Err(self.abandon(slot, input, output, e));
            }
            hal.relax();
        }
    }

    /// Hand a command to the firmware on `slot` (entry, mailboxes, doorbell); `out_len` is the
    /// output length announced. Completes with [`CmdQueue::poll`] + [`CmdQueue::finish`].
    pub fn post<M: Mmio + ?Sized>(&mut self, bar: &M, slot: Slot, input: &[u8], out_len: usize) -> Result<(), Error> {
        let opcode = get(input, mbox_in::opcode) as u16;
        let op_mod = get(input, mbox_in::op_mod) as u16;
        if self.dead {
            return Err(Error::CmdQueueDead);
        }
        let max = self.slot(slot).max_msg;
        if input.len() < INLINE || out_len < INLINE || input.len() > max || out_len > max {
            return Err(Error::InvalidArgument("command length"));
        }
        if self.slot(slot).pending.is_some() {
            return Err(Error::InvalidArgument("command slot busy"));
        }
        crate::trace::before(self.trace, self.slot(slot).index, input);
        let token = self.next_token();
        let in_blocks = (input.len() - INLINE).div_ceil(BLOCK_DATA);
        let out_blocks = (out_len - INLINE).div_ceil(BLOCK_DATA);
        let st = self.slot(slot);
        Self::chain(&st.mbox_in, in_blocks, token, Some(&input[INLINE..]));
        Self::chain(&st.mbox_out, out_blocks, token, None);

        let mut e = [0u8; 64];
        set(&mut e, ent::r#type, CMD_TYPE_PCIE);
        set(&mut e, ent::ilen, input.len() as u64);
        set(&mut e, ent::iptr, if in_blocks > 0 { st.mbox_in.paddr() } else { 0 });
        set_bytes(&mut e, ent::r#in, &input[..INLINE]);
        set(&mut e, ent::optr, if out_blocks > 0 { st.mbox_out.paddr() } else { 0 });
        set(&mut e, ent::olen, out_len as u64);
        set(&mut e, ent::token, token as u64);
        set(&mut e, ent::ownership, 1);
        let index = st.index;
        self.queue.write(index * self.stride, &e);
        core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
        self.slot_mut(slot).pending = Some(Pending { opcode, op_mod, out_blocks });
        write_field(bar, init_seg::cmd_dbell, 1 << index);
        self.issued += 1;
        Ok(())
    }

    /// Whether the firmware has handed `slot` back; checks firmware health while it waits.
    pub fn poll<H: Hal, M: Mmio + ?Sized>(&mut self, hal: &H, bar: &M, slot: Slot) -> Result<bool, Error> {
        let at = self.slot(slot).index * self.stride;
        let own_mask = 1u8 << (7 - ent::ownership.off % 8);
        if self.queue.read_u8(at + ent::ownership.byte()) & own_mask == 0 {
            return Ok(true);
        }
        if let Some(h) = self.health.as_mut() {
            h.check(hal, bar)?;
        }
        Ok(false)
    }

    /// The error for a command on `slot` that never came back (logged).
    pub fn timed_out(&self, slot: Slot) -> Error {
        let (opcode, op_mod) = self.slot(slot).pending.map(|p| (p.opcode, p.op_mod)).unwrap_or((0, 0));
        log::error!("mlx5: {}(0x{opcode:x}) timed out", opcode_name(opcode));
        Error::CmdTimeout { opcode, op_mod }
    }

    /// Give up on the command on `slot` (timeout, dead firmware, or an event the caller could
    /// not service): the slot stays owned by firmware, so the queue is dead from now on.
    pub fn abandon(&mut self, slot: Slot, input: &[u8], output: &[u8], err: Error) -> Error {
        self.dead = true;
        self.errors.abandoned += 1;
        let idx = self.slot(slot).index;
        self.slot_mut(slot).pending = None;
        let r = Err(err);
        crate::trace::after(self.trace, idx, input, output, &r);
        err
    }

    /// Read the result of the completed command on `slot` (after [`CmdQueue::poll`] said so):
    /// delivery status, output, command status and syndrome.
    pub fn finish(&mut self, slot: Slot, input: &[u8], output: &mut [u8]) -> Result<(), Error> {
        let idx = self.slot(slot).index;
        let r = self.finish_untraced(slot, output);
        crate::trace::after(self.trace, idx, input, output, &r);
        r
    }

    fn finish_untraced(&mut self, slot: Slot, output: &mut [u8]) -> Result<(), Error> {
        let Some(p) = self.slot_mut(slot).pending.take() else {
            return Err(Error::InvalidArgument("no command in flight on the slot"));
        };
        let (opcode, op_mod) = (p.opcode, p.op_mod);
        core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
        let st = self.slot(slot);
        let mut e = [0u8; 64];
        self.queue.read(st.index * self.stride, &mut e);
        let delivery = get(&e, ent::status) as u8;
        if delivery != 0 {
            self.errors.delivery += 1;
            return Err(Error::Delivery { opcode, op_mod, status: delivery });
        }
        output[..INLINE].copy_from_slice(&e[ent::out.byte()..ent::out.byte() + INLINE]);
        let rest = &mut output[INLINE..];
        for i in 0..p.out_blocks {
            let from = i * BLOCK_DATA;
            let to = core::cmp::min(rest.len(), from + BLOCK_DATA);
            st.mbox_out.read(i * BLOCK_STRIDE, &mut rest[from..to]);
        }
        let status = get(output, mbox_out::status) as u8;
        if status != 0 {
            self.errors.refused += 1;
            let syndrome = get(output, mbox_out::syndrome) as u32;
            log::warn!(
                "mlx5: {}(0x{opcode:x}) op_mod {op_mod}: status {} (0x{status:x}) syndrome 0x{syndrome:08x}",
                opcode_name(opcode),
                crate::error::status_name(status)
            );
            return Err(Error::Command { opcode, op_mod, status, syndrome });
        }
        Ok(())
    }
}
