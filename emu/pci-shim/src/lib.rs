//! emu-pci-shim: the emulated ConnectX (`emu-connectx`) serving a QEMU guest through two
//! shared files: the guest's RAM (`-object memory-backend-file,share=on` as the machine's
//! memory: the model's DMA) and an `ivshmem-plain` BAR2 file standing for the adapter's BAR0.
//!
//! QEMU exits to nobody on a RAM-backed BAR access, so the shim polls the BAR file:
//! - words whose write has a side effect are consumed: the command doorbell (0x018, swapped to
//!   0; mask 0 means nothing) and, on every UAR page, the CQ arm (0x20), EQ doorbells
//!   (0x40/0x48) and the BlueFlame/SQ doorbell words (0x800 + k*0x100), each preset to an
//!   all-ones sentinel no valid doorbell has (it would name EQ 255 / CQ or QP 0xffffff) and
//!   swapped back to it when taken, so no write is lost or seen twice;
//! - the command-queue address dwords (0x010/0x014) are read-write: a value other than the
//!   one last published is a guest write, given to the model, and the model's read-back is
//!   published with a compare-exchange (a guest write racing it wins and is seen next turn);
//! - every other init-segment dword (firmware revision, `initializing`, health buffer and
//!   counter, internal timer) is republished from the model every `REFRESH` interval.
//!
//! Lost-write caveats: a BlueFlame word keeps only the last doorbell written since the last
//! turn, so every send queue of that UAR is rung (harmless: queues run up to their doorbell
//! records). Two EQ doorbells of different EQs on one UAR within a turn keep only the last
//! (the other EQ's consumer index is updated by its next doorbell), and two command doorbells
//! within a turn keep only the last mask (the driver runs one command at a time).
//!
//! Ordering: one turn takes the init segment first (0x010, 0x014, then 0x018), then UAR
//! pages, then runs `ConnectX::poll`, so a doorbell is executed after the writes the guest
//! made before it (x86 stores are seen in order, also through TCG).
// Only `shared` (the mapped files) may use `unsafe`; every other module is checked.
#![deny(unsafe_code)]
#[allow(unsafe_code)]
pub mod shared;

use std::sync::Arc;
use std::time::{Duration, Instant};

use emu_connectx::{ConnectX, PhysMem, SimClock, BAR0_SIZE, FIRST_UAR};
use log::debug;

pub use shared::{GuestRam, SharedMap};

/// Size of the shared BAR file: the ivshmem BAR must be a power of two.
pub const BAR_FILE_SIZE: usize = BAR0_SIZE.next_power_of_two();
/// Init-segment bytes (pages below the first UAR hold it; the model answers below 0x3000).
const INIT_SEG: usize = 0x3000;
const CMDQ_H: usize = 0x010;
const CMDQ_L: usize = 0x014;
const CMD_DBELL: usize = 0x018;
/// UAR page offsets of 32-bit doorbells (EQ arm / no-arm) and 64-bit ones (CQ arm, SQ/BF).
const UAR_DB32: [usize; 2] = [0x40, 0x48];
const UAR_DB64: [usize; 9] = [0x20, 0x800, 0x900, 0xa00, 0xb00, 0xc00, 0xd00, 0xe00, 0xf00];
pub const SENTINEL32: u32 = u32::MAX;
pub const SENTINEL64: u64 = u64::MAX;
/// How often the read-side init-segment registers are republished.
pub const REFRESH: Duration = Duration::from_micros(500);

/// What the shim moved (for the report line and tests).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ShimStats {
    pub turns: u64,
    pub cmdq_addr_writes: u64,
    pub cmd_doorbells: u64,
    pub uar_doorbells: u64,
    /// Send queues rung besides the one a BlueFlame word named (see `ring_every_sq`).
    pub sq_rings_added: u64,
    pub refreshes: u64,
    pub poll_work: u64,
}

/// The model plus the polled BAR file.
pub struct Shim {
    pub cx: ConnectX,
    bar: SharedMap,
    /// Last values published at 0x010 / 0x014.
    published: [u32; 2],
    uar_pages: usize,
    last_refresh: Option<Instant>,
    /// A link is plugged in and the port-up event has not been taken by an EQ yet.
    port_up_pending: bool,
    pub stats: ShimStats,
}

impl Shim {
    /// Map `ram` (the guest's RAM file, `ram_size` bytes) and `bar` (the ivshmem BAR file,
    /// created/sized to [`BAR_FILE_SIZE`]), make a fresh adapter with `cfg` on a real-time
    /// clock, and publish its init segment and the doorbell sentinels.
    pub fn open(ram: &std::path::Path, ram_size: usize, bar: &std::path::Path, cfg: emu_connectx::Config) -> std::io::Result<Shim> {
        let ram = SharedMap::open(ram, ram_size)?;
        let bar = SharedMap::open(bar, BAR_FILE_SIZE)?;
        Ok(Self::new(ram, bar, cfg))
    }

    pub fn new(ram: SharedMap, bar: SharedMap, cfg: emu_connectx::Config) -> Shim {
        assert!(bar.len() >= BAR0_SIZE, "BAR file smaller than the adapter's BAR0");
        let uar_pages = (cfg.profile.caps.max_uars as usize).min(BAR0_SIZE / 0x1000 - FIRST_UAR as usize);
        let mem = PhysMem::external(Arc::new(GuestRam(ram)));
        let cx = ConnectX::new(mem, SimClock::realtime(), cfg);
        let mut s = Shim { cx, bar, published: [0; 2], uar_pages, last_refresh: None, port_up_pending: false, stats: ShimStats::default() };
        for (i, off) in [CMDQ_H, CMDQ_L].into_iter().enumerate() {
            let v = s.cx.device_mut().bar_read32(off);
            s.bar.word32(off).store(v, SeqCst);
            s.published[i] = v;
        }
        s.bar.word32(CMD_DBELL).store(0, SeqCst);
        for p in 0..s.uar_pages {
            let base = (FIRST_UAR as usize + p) * 0x1000;
            UAR_DB32.iter().for_each(|o| s.bar.word32(base + o).store(SENTINEL32, SeqCst));
            UAR_DB64.iter().for_each(|o| s.bar.word64(base + o).store(SENTINEL64, SeqCst));
        }
        s.refresh();
        s
    }

    /// Plug the port into `link`. Like a cabled port, it reports "up" (a PORT_CHANGE event)
    /// as soon as the driver has an EQ subscribed to port events.
    pub fn attach_link(&mut self, link: Box<dyn emu_roce::Link + Send>) {
        self.cx.attach_link(link);
        self.port_up_pending = true;
    }

    /// Republish the read-side init-segment dwords.
    fn refresh(&mut self) {
        let mut dev = self.cx.device_mut();
        for off in (0..INIT_SEG).step_by(4) {
            if !matches!(off, CMDQ_H | CMDQ_L | CMD_DBELL) {
                self.bar.word32(off).store(dev.bar_read32(off), SeqCst);
            }
        }
        self.stats.refreshes += 1;
        self.last_refresh = Some(Instant::now());
    }

    /// One turn: take guest writes, run the adapter, refresh registers. Returns the work done
    /// (0 = idle).
    pub fn turn(&mut self) -> usize {
        self.stats.turns += 1;
        let mut work = 0;
        for (i, off) in [CMDQ_H, CMDQ_L].into_iter().enumerate() {
            let w = self.bar.word32(off);
            let v = w.load(SeqCst);
            if v != self.published[i] {
                self.stats.cmdq_addr_writes += 1;
                debug!("shim: guest wrote {v:#010x} at {off:#x}");
                let back = {
                    let mut dev = self.cx.device_mut();
                    dev.bar_write32(off, v);
                    dev.bar_read32(off)
                };
                // A guest write racing this one wins: it stays and is taken next turn.
                let _ = w.compare_exchange(v, back, SeqCst, SeqCst);
                self.published[i] = back;
                work += 1;
            }
        }
        let db = self.bar.word32(CMD_DBELL).swap(0, SeqCst);
        if db != 0 {
            self.stats.cmd_doorbells += 1;
            debug!("shim: command doorbell {db:#010x}");
            self.cx.device_mut().bar_write32(CMD_DBELL, db);
            work += 1;
        }
        for p in 0..self.uar_pages {
            let base = (FIRST_UAR as usize + p) * 0x1000;
            for o in UAR_DB32 {
                let v = self.bar.word32(base + o).swap(SENTINEL32, SeqCst);
                if v != SENTINEL32 {
                    self.stats.uar_doorbells += 1;
                    self.cx.device_mut().bar_write32(base + o, v);
                    work += 1;
                }
            }
            for o in UAR_DB64 {
                let v = self.bar.word64(base + o).swap(SENTINEL64, SeqCst);
                if v != SENTINEL64 {
                    self.stats.uar_doorbells += 1;
                    self.cx.device_mut().bar_write64(base + o, v);
                    if o >= 0x800 {
                        self.ring_every_sq((FIRST_UAR as usize + p) as u32);
                    }
                    work += 1;
                }
            }
        }
        if self.port_up_pending && self.cx.set_port_up(true) {
            self.port_up_pending = false;
            debug!("shim: port up event posted");
            work += 1;
        }
        let w = self.cx.poll();
        self.stats.poll_work += w as u64;
        work += w;
        if work > 0 || self.last_refresh.is_none_or(|t| t.elapsed() >= REFRESH) {
            self.refresh();
        }
        work
    }

    /// A BlueFlame word holds only the last of the doorbells written to it since the previous
    /// turn (a real adapter sees each posted write). Every send queue on that UAR is therefore
    /// rung: the model runs a queue only up to its doorbell record, so an extra ring is a no-op
    /// and an overwritten one is recovered.
    fn ring_every_sq(&mut self, uar: u32) {
        let mut d = self.cx.device_mut();
        let d = &mut *d;
        let on_uar = d.qps.iter().filter(|(_, q)| q.uar == uar).map(|(n, _)| *n);
        let on_uar: Vec<u32> = on_uar.chain(d.raw.sqs.iter().filter(|(_, s)| s.uar == uar).map(|(n, _)| *n)).collect();
        for qpn in on_uar {
            if !d.sq_doorbells.iter().any(|x| x.0 == qpn) {
                d.sq_doorbells.push((qpn, 0));
                self.stats.sq_rings_added += 1;
            }
        }
    }

    /// Turn until `stop()` says so; naps `idle_nap` after an idle turn (zero: spin).
    pub fn run(&mut self, idle_nap: Duration, mut stop: impl FnMut(&Shim) -> bool) {
        while !stop(self) {
            if self.turn() == 0 && !idle_nap.is_zero() {
                std::thread::sleep(idle_nap);
            }
        }
    }
}

use std::sync::atomic::Ordering::SeqCst;
