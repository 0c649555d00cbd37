//! Emulated ConnectX (mlx5) adapter: a behavioural model of its programming interface.
//!
//! Written from the public programming model (Linux `include/linux/mlx5/mlx5_ifc.h`,
//! `device.h`, rdma-core `providers/mlx5`), never from the project's driver. The model checks
//! what the adapter checks and fails the way it fails (delivery status, command status plus
//! syndrome, DMA errors), so the driver can be tested against it on the host.
//!
//! ```text
//! let mem = PhysMem::new();              // "physical" memory above 4 GiB
//! let clock = SimClock::new();           // virtual time
//! let hal = SimHal::new(mem.clone(), clock.clone());
//! let cx = ConnectX::new(mem, clock, Config::default());
//! let bar = cx.bar0();                   // implements hal::Mmio
//! // optional: run the data path whenever the driver busy-waits
//! let cx2 = cx.clone(); hal.set_relax_hook(Box::new(move || { cx2.poll(); }));
//! // several threads may share `cx`, `bar`, `hal` (each a handle; the model is behind a lock)
//! ```
#![forbid(unsafe_code)]
pub mod consts;
pub mod datapath;
pub mod loopback;
pub mod mem;
pub mod model;
pub mod profile;
pub mod raw;
pub mod rules;

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard};

pub use mem::{DmaFault, DmaReadFilter, ExternalMem, MemStats, PhysMem, RelaxHook, SimClock, SimDma, SimHal};
pub use model::{Config, Counters, Device, Faults, FuncState, BAR0_SIZE, FIRST_UAR};
pub use profile::Profile;

/// The emulated adapter. Cheap to clone (shared handle); usable from several threads, as the
/// hardware is: each call (a BAR access, one `poll`) holds the model for its whole duration,
/// so the model sees accesses one at a time in some order, as a PCIe function does.
///
/// A guard from [`ConnectX::device`] or [`ConnectX::faults_mut`] holds the model: drop it
/// before the next call on the adapter (on the same thread that call would wait forever).
#[derive(Clone)]
pub struct ConnectX {
    dev: Shared,
}

/// The model behind its lock (one per adapter).
#[derive(Clone)]
struct Shared(Arc<Mutex<Device>>);

impl Shared {
    /// The model for one access. A thread that panicked holding it (a failed assertion in a
    /// test) poisons it; the model is still the adapter's state, so later accesses proceed.
    #[inline]
    fn lock(&self) -> MutexGuard<'_, Device> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The fault knobs of an adapter, held ([`ConnectX::faults_mut`]).
pub struct FaultsGuard<'a>(MutexGuard<'a, Device>);

impl Deref for FaultsGuard<'_> {
    type Target = Faults;
    fn deref(&self) -> &Faults {
        &self.0.faults
    }
}
impl DerefMut for FaultsGuard<'_> {
    fn deref_mut(&mut self) -> &mut Faults {
        &mut self.0.faults
    }
}

impl ConnectX {
    /// A freshly reset adapter; `initializing` clears after `cfg.init_delay_ns` of virtual time.
    pub fn new(mem: PhysMem, clock: SimClock, cfg: Config) -> Self {
        ConnectX { dev: Shared(Arc::new(Mutex::new(Device::new(mem, clock, cfg)))) }
    }

    /// An adapter on the memory and clock of `hal` (the usual way in tests).
    pub fn with_hal(hal: &SimHal, cfg: Config) -> Self {
        Self::new(hal.mem().clone(), hal.clock().clone(), cfg)
    }

    /// The BAR0 window (initialization segment + UAR pages), as the driver maps it.
    pub fn bar0(&self) -> Bar0 {
        Bar0 { dev: self.dev.clone() }
    }

    /// Fault knobs.
    pub fn faults_mut(&self) -> FaultsGuard<'_> {
        FaultsGuard(self.dev.lock())
    }

    /// Live objects, pages and event counters.
    pub fn counters(&self) -> Counters {
        self.dev.lock().ctr_live()
    }

    /// Set a fatal health syndrome (health buffer `synd`); commands stop completing.
    pub fn set_health_syndrome(&self, synd: u8) {
        self.dev.lock().set_health_syndrome(synd)
    }

    /// PCI function-level reset (what a driver does before taking over a dirty function).
    pub fn function_reset(&self) {
        self.dev.lock().function_reset()
    }

    /// Take the port up or down (PORT_CHANGE EQE, QUERY_VPORT_STATE). Returns whether an EQ
    /// subscribed to port changes took the event.
    pub fn set_port_up(&self, up: bool) -> bool {
        self.dev.lock().set_port_up(up)
    }

    /// Raise an internal-error event (the adapter reporting itself broken). Returns whether an
    /// EQ subscribed to it took the event.
    pub fn raise_internal_error(&self) -> bool {
        self.dev.lock().raise_event(consts::event::INTERNAL_ERROR, 0, &[0u8; 28])
    }

    /// Fault: drive one RC QP in RTS to ERROR ([`Device::inject_qp_error`]).
    pub fn inject_qp_error(&self, pick: u64) -> Option<u32> {
        self.dev.lock().inject_qp_error(pick)
    }

    /// Fault: drive RC QP `qpn` in RTS to ERROR ([`Device::inject_qp_error_on`]).
    pub fn inject_qp_error_on(&self, qpn: u32) -> bool {
        self.dev.lock().inject_qp_error_on(qpn)
    }

    /// Fault: overrun one RC QP's receive CQ ([`Device::inject_cq_overrun`]).
    pub fn inject_cq_overrun(&self, pick: u64) -> Option<u32> {
        self.dev.lock().inject_cq_overrun(pick)
    }

    /// Firmware asks for `n` more pages (n > 0) or offers `-n` back (n < 0) through a
    /// page-request EQE. Returns whether an EQ subscribed to page requests took it.
    pub fn request_pages(&self, n: i32) -> bool {
        self.dev.lock().request_pages(n)
    }

    /// Run the data path once (SQ doorbells, RQ doorbell records, the RoCE engine's rx, timers
    /// and tx, completions → CQEs). Returns the work done (0 = idle).
    pub fn poll(&self) -> usize {
        self.dev.lock().poll()
    }

    /// Earliest time [`ConnectX::poll`] has work without a frame arriving (a send doorbell
    /// not yet executed, the RoCE engine's retransmit and RNR timers), for loops that jump a
    /// virtual clock over idle time; `None`: none (or no engine).
    pub fn next_timer(&self) -> Option<u64> {
        self.dev.lock().next_timer()
    }

    /// Counters of the RoCE engine (None before INIT_HCA / after TEARDOWN_HCA).
    pub fn engine_counters(&self) -> Option<emu_roce::Counters> {
        self.dev.lock().engine.as_ref().map(|e| e.counters())
    }

    /// Plug the port into a link (`emu_roce::MemLink`, `UnixDgramLink`, ...).
    pub fn attach_link(&self, link: Box<dyn emu_roce::Link + Send>) {
        self.dev.lock().attach_link(link)
    }

    /// Direct access to the model state (for tests and the data path).
    pub fn device(&self) -> MutexGuard<'_, Device> {
        self.dev.lock()
    }
    pub fn device_mut(&self) -> MutexGuard<'_, Device> {
        self.dev.lock()
    }
}

/// BAR0 of the emulated adapter (`hal::Mmio`). Accesses are calls into the model.
#[derive(Clone)]
pub struct Bar0 {
    dev: Shared,
}

impl hal::Mmio for Bar0 {
    fn size(&self) -> usize {
        BAR0_SIZE
    }
    /// As hardware: every object, page and the command queue address lost, DMA stopped, the
    /// init segment `initializing` until the firmware is ready again; the link stays.
    fn function_level_reset(&self) -> bool {
        self.dev.lock().function_level_reset()
    }
    fn read32(&self, offset: usize) -> u32 {
        self.dev.lock().bar_read32(offset)
    }
    fn write32(&self, offset: usize, value: u32) {
        self.dev.lock().bar_write32(offset, value)
    }
    fn write64(&self, offset: usize, value: u64) {
        self.dev.lock().bar_write64(offset, value)
    }
}
