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

use std::cell::{Ref, RefCell, RefMut};
use std::rc::Rc;

pub use mem::{DmaFault, DmaReadFilter, ExternalMem, MemStats, PhysMem, SimClock, SimDma, SimHal};
pub use model::{Config, Counters, Device, Faults, FuncState, BAR0_SIZE, FIRST_UAR};
pub use profile::Profile;

/// The emulated adapter. Cheap to clone (shared handle).
#[derive(Clone)]
pub struct ConnectX {
    dev: Rc<RefCell<Device>>,
}

impl ConnectX {
    /// A freshly reset adapter; `initializing` clears after `cfg.init_delay_ns` of virtual time.
    pub fn new(mem: PhysMem, clock: SimClock, cfg: Config) -> Self {
        ConnectX { dev: Rc::new(RefCell::new(Device::new(mem, clock, cfg))) }
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
    pub fn faults_mut(&self) -> RefMut<'_, Faults> {
        RefMut::map(self.dev.borrow_mut(), |d| &mut d.faults)
    }

    /// Live objects, pages and event counters.
    pub fn counters(&self) -> Counters {
        self.dev.borrow().ctr_live()
    }

    /// Set a fatal health syndrome (health buffer `synd`); commands stop completing.
    pub fn set_health_syndrome(&self, synd: u8) {
        self.dev.borrow_mut().set_health_syndrome(synd)
    }

    /// PCI function-level reset (what a driver does before taking over a dirty function).
    pub fn function_reset(&self) {
        self.dev.borrow_mut().function_reset()
    }

    /// Take the port up or down (PORT_CHANGE EQE, QUERY_VPORT_STATE). Returns whether an EQ
    /// subscribed to port changes took the event.
    pub fn set_port_up(&self, up: bool) -> bool {
        self.dev.borrow_mut().set_port_up(up)
    }

    /// Raise an internal-error event (the adapter reporting itself broken). Returns whether an
    /// EQ subscribed to it took the event.
    pub fn raise_internal_error(&self) -> bool {
        self.dev.borrow_mut().raise_event(consts::event::INTERNAL_ERROR, 0, &[0u8; 28])
    }

    /// Fault: drive one RC QP in RTS to ERROR ([`Device::inject_qp_error`]).
    pub fn inject_qp_error(&self, pick: u64) -> Option<u32> {
        self.dev.borrow_mut().inject_qp_error(pick)
    }

    /// Fault: overrun one RC QP's receive CQ ([`Device::inject_cq_overrun`]).
    pub fn inject_cq_overrun(&self, pick: u64) -> Option<u32> {
        self.dev.borrow_mut().inject_cq_overrun(pick)
    }

    /// Firmware asks for `n` more pages (n > 0) or offers `-n` back (n < 0) through a
    /// page-request EQE. Returns whether an EQ subscribed to page requests took it.
    pub fn request_pages(&self, n: i32) -> bool {
        self.dev.borrow_mut().request_pages(n)
    }

    /// Run the data path once (SQ doorbells, RQ doorbell records, the RoCE engine's rx, timers
    /// and tx, completions → CQEs). Returns the work done (0 = idle).
    pub fn poll(&self) -> usize {
        self.dev.borrow_mut().poll()
    }

    /// Counters of the RoCE engine (None before INIT_HCA / after TEARDOWN_HCA).
    pub fn engine_counters(&self) -> Option<emu_roce::Counters> {
        self.dev.borrow().engine.as_ref().map(|e| e.counters())
    }

    /// Plug the port into a link (`emu_roce::MemLink`, `UnixDgramLink`, ...).
    pub fn attach_link(&self, link: Box<dyn emu_roce::Link>) {
        self.dev.borrow_mut().attach_link(link)
    }

    /// Direct access to the model state (for tests and the data path).
    pub fn device(&self) -> Ref<'_, Device> {
        self.dev.borrow()
    }
    pub fn device_mut(&self) -> RefMut<'_, Device> {
        self.dev.borrow_mut()
    }
}

/// BAR0 of the emulated adapter (`hal::Mmio`). Accesses are calls into the model.
#[derive(Clone)]
pub struct Bar0 {
    dev: Rc<RefCell<Device>>,
}

impl hal::Mmio for Bar0 {
    fn size(&self) -> usize {
        BAR0_SIZE
    }
    /// As hardware: every object, page and the command queue address lost, DMA stopped, the
    /// init segment `initializing` until the firmware is ready again; the link stays.
    fn function_level_reset(&self) -> bool {
        self.dev.borrow_mut().function_level_reset()
    }
    fn read32(&self, offset: usize) -> u32 {
        self.dev.borrow_mut().bar_read32(offset)
    }
    fn write32(&self, offset: usize, value: u32) {
        self.dev.borrow_mut().bar_write32(offset, value)
    }
    fn write64(&self, offset: usize, value: u64) {
        self.dev.borrow_mut().bar_write64(offset, value)
    }
}
