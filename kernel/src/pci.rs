//! PCIe enumeration and the small API drivers use to claim a device.
//!
//! Config space goes through ECAM (PCIe base spec §7.2.2: `base + (bus << 20 | dev << 15 |
//! fn << 12) + offset`) when ACPI gave an MCFG, else through the legacy 0xCF8/0xCFC ports
//! (offsets < 256 only). Every function on bus 0 and on every bus behind a PCI-to-PCI bridge
//! (secondary bus numbers as firmware assigned them) is listed, one console line each:
//!
//! ```text
//! 00:02.0 1b36:0010 class 01.08.02 bar0 mem64 0xfebf0000 size 0x4000
//! ```
//!
//! BARs are sized by writing all-ones with memory/IO decode disabled (PCI local bus spec
//! 3.0 §6.2.5.1) and every memory BAR is mapped uncached.
//!
//! # Driver API (the NVMe driver's attach in apps/appliance uses it)
//! ```ignore
//! for f in kernel::pci::find_class(0x01, 0x08, Some(0x02)) {   // NVMe
//!     f.enable();                          // memory space + bus mastering
//!     let bar0: kernel::KernelMmio = f.map_bar(0)?;   // hal::Mmio, uncached
//!     let drv = nvme::Controller::new(kernel::KernelHal, bar0, ...);
//! }
//! ```
//! Also: [`functions`] (all), [`find`] (vendor:device), [`PciFunction::config_read`]/`config_write`,
//! [`PciFunction::capability`], [`function_level_reset`]; hot-plug slots: [`crate::pcie_slot`].
use alloc::vec::Vec;
use core::fmt;

use pci_types::{ConfigRegionAccess, HeaderType, PciAddress, PciHeader, PciPciBridgeHeader};
use x86_64::instructions::port::Port;

use crate::acpi::Ecam;
use crate::hal::KernelMmio;

/// Legacy configuration mechanism #1 ports (PCI local bus spec 3.0 §3.2.2.3.2).
const CONFIG_ADDRESS: u16 = 0xcf8;
const CONFIG_DATA: u16 = 0xcfc;
/// Type 0/1 header registers (PCI local bus spec 3.0 §6.1).
const REG_COMMAND: u16 = 0x04;
const REG_BAR0: u16 = 0x10;
const REG_CAP_PTR: u16 = 0x34;
const CMD_IO: u32 = 1 << 0;
const CMD_MEMORY: u32 = 1 << 1;
const CMD_BUS_MASTER: u32 = 1 << 2;
/// BAR low bits.
const BAR_IO: u32 = 1 << 0;
const BAR_TYPE_MASK: u32 = 0b110;
const BAR_TYPE_64: u32 = 0b100;
const BAR_PREFETCH: u32 = 1 << 3;

static ECAM: spin::Once<Option<Ecam>> = spin::Once::new();
static FUNCTIONS: spin::Once<Vec<PciFunction>> = spin::Once::new();

/// The configuration-space access in force.
#[derive(Debug, Clone, Copy)]
pub struct ConfigAccess;

fn ecam() -> Option<Ecam> {
    ECAM.get().copied().flatten()
}

/// Read the 32-bit config register at `offset` (4-byte aligned) of `a`; all-ones if absent.
pub fn config_read(a: PciAddress, offset: u16) -> u32 {
    let offset = offset & 0xffc;
    match ecam() {
        Some(e) if (e.bus_start..=e.bus_end).contains(&a.bus()) && a.segment() == 0 => {
            let pa = ecam_addr(e, a, offset);
            // SAFETY: inside the ECAM window from MCFG, mapped uncached.
            unsafe { (pa as *const u32).read_volatile() }
        }
        _ if offset < 256 => {
            let (mut addr, mut data) = (Port::<u32>::new(CONFIG_ADDRESS), Port::<u32>::new(CONFIG_DATA));
            // SAFETY: configuration mechanism #1; single CPU, no concurrent users.
            unsafe {
                addr.write(legacy_addr(a, offset));
                data.read()
            }
        }
        _ => u32::MAX,
    }
}

/// Write the 32-bit config register at `offset` of `a`.
pub fn config_write(a: PciAddress, offset: u16, v: u32) {
    let offset = offset & 0xffc;
    match ecam() {
        Some(e) if (e.bus_start..=e.bus_end).contains(&a.bus()) && a.segment() == 0 => {
            let pa = ecam_addr(e, a, offset);
            // SAFETY: inside the ECAM window from MCFG, mapped uncached.
            unsafe { (pa as *mut u32).write_volatile(v) }
        }
        _ if offset < 256 => {
            let (mut addr, mut data) = (Port::<u32>::new(CONFIG_ADDRESS), Port::<u32>::new(CONFIG_DATA));
            // SAFETY: configuration mechanism #1; single CPU, no concurrent users.
            unsafe {
                addr.write(legacy_addr(a, offset));
                data.write(v)
            }
        }
        _ => {}
    }
}

fn ecam_addr(e: Ecam, a: PciAddress, offset: u16) -> u64 {
    e.base
        + (((a.bus() - e.bus_start) as u64) << 20)
        + ((a.device() as u64) << 15)
        + ((a.function() as u64) << 12)
        + offset as u64
}

fn legacy_addr(a: PciAddress, offset: u16) -> u32 {
    (1 << 31) | ((a.bus() as u32) << 16) | ((a.device() as u32) << 11) | ((a.function() as u32) << 8) | offset as u32
}

impl ConfigRegionAccess for ConfigAccess {
    unsafe fn read(&self, address: PciAddress, offset: u16) -> u32 {
        config_read(address, offset)
    }
    unsafe fn write(&self, address: PciAddress, offset: u16, value: u32) {
        config_write(address, offset, value)
    }
}

/// Kind of a BAR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarKind {
    Mem32,
    Mem64,
    Io,
}

/// A decoded, sized BAR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bar {
    /// BAR register index (0-5; a 64-bit BAR uses this and the next).
    pub index: u8,
    pub kind: BarKind,
    pub prefetchable: bool,
    pub address: u64,
    pub size: u64,
}

impl fmt::Display for Bar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let k = match self.kind {
            BarKind::Mem32 => "mem32",
            BarKind::Mem64 => "mem64",
            BarKind::Io => "io",
        };
        write!(f, "bar{} {k}{} {:#x} size {:#x}", self.index, if self.prefetchable { " pf" } else { "" }, self.address, self.size)
    }
}

/// One PCI function as enumerated.
#[derive(Debug, Clone)]
pub struct PciFunction {
    pub address: PciAddress,
    pub vendor: u16,
    pub device: u16,
    pub class: u8,
    pub subclass: u8,
    pub prog_if: u8,
    /// `Some((secondary, subordinate))` for a PCI-to-PCI bridge.
    pub bridge: Option<(u8, u8)>,
    pub bars: heapless::Vec<Bar, 6>,
}

/// Why a driver request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PciError {
    /// The function has no memory BAR with that index.
    NoSuchBar(u8),
    /// The BAR is unassigned (address 0) or too large to map.
    Unassigned(u8),
    /// No page-table memory left to map it.
    Map(crate::paging::PagingError),
}

impl fmt::Display for PciFunction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:02x}:{:02x}.{:x} {:04x}:{:04x} class {:02x}.{:02x}.{:02x}",
            self.address.bus(),
            self.address.device(),
            self.address.function(),
            self.vendor,
            self.device,
            self.class,
            self.subclass,
            self.prog_if
        )?;
        if let Some((s, e)) = self.bridge {
            write!(f, " bridge buses {s:02x}-{e:02x}")?;
        }
        for b in &self.bars {
            write!(f, " {b}")?;
        }
        Ok(())
    }
}

impl PciFunction {
    /// `bb:dd.f`.
    pub fn bdf(&self) -> (u8, u8, u8) {
        (self.address.bus(), self.address.device(), self.address.function())
    }

    /// Turn on memory-space decoding and bus mastering (DMA) for a device a driver claims.
    pub fn enable(&self) {
        let c = config_read(self.address, REG_COMMAND);
        config_write(self.address, REG_COMMAND, (c & 0xffff) | CMD_MEMORY | CMD_BUS_MASTER);
        log::info!("pci: {:02x}:{:02x}.{:x} memory space + bus master enabled", self.bdf().0, self.bdf().1, self.bdf().2);
    }

    /// The BAR with register index `index`, if it exists.
    pub fn bar(&self, index: u8) -> Option<Bar> {
        self.bars.iter().copied().find(|b| b.index == index)
    }

    /// Map memory BAR `index` uncached and return it as a [`hal::Mmio`] window.
    pub fn map_bar(&self, index: u8) -> Result<KernelMmio, PciError> {
        let b = self.bar(index).filter(|b| b.kind != BarKind::Io).ok_or(PciError::NoSuchBar(index))?;
        if b.address == 0 || b.size > usize::MAX as u64 {
            return Err(PciError::Unassigned(index));
        }
        KernelMmio::map(b.address, b.size as usize, Some(self.address)).map_err(PciError::Map)
    }

    /// Read a 32-bit config register (capabilities etc.).
    pub fn config_read(&self, offset: u16) -> u32 {
        config_read(self.address, offset)
    }

    /// Write a 32-bit config register.
    pub fn config_write(&self, offset: u16, value: u32) {
        config_write(self.address, offset, value)
    }

    /// Config-space offset of the first capability with ID `id` in the standard list (PCI
    /// local bus spec 3.0 §6.7: Status bit 4, pointer at 0x34, each entry ID + next pointer),
    /// e.g. 0x10 for PCI Express. Walks at most 48 entries (a broken list cannot loop).
    pub fn capability(&self, id: u8) -> Option<u16> {
        capability(self.address, id)
    }
}

/// PCI Express capability (PCIe base spec §7.5.3): its ID, and the registers FLR uses.
const CAP_ID_PCIE: u8 = 0x10;
const PCIE_DEVCAP: u16 = 0x04;
const PCIE_DEVCTL: u16 = 0x08;
const DEVCAP_FLR: u32 = 1 << 28;
const DEVCTL_INITIATE_FLR: u32 = 1 << 15;
/// Device Status (upper half of the DevCtl dword): Transactions Pending.
const DEVSTA_TRANS_PENDING: u32 = 1 << (16 + 5);
/// After an FLR the function may not be accessed for 100 ms (PCIe base spec §6.6.2); then it
/// must answer config requests (vendor ID not all-ones) within a second, as Linux waits.
const FLR_WAIT_NS: u64 = 100_000_000;
const FLR_READY_NS: u64 = 1_000_000_000;

/// Config-space offset of function `a`'s first capability with ID `id` ([`PciFunction::capability`]).
fn capability(a: PciAddress, id: u8) -> Option<u16> {
    const STATUS_CAP_LIST: u32 = 1 << (16 + 4);
    if config_read(a, REG_COMMAND) & STATUS_CAP_LIST == 0 {
        return None;
    }
    let mut at = (config_read(a, REG_CAP_PTR) & 0xfc) as u16;
    for _ in 0..48 {
        if at < 0x40 {
            return None;
        }
        let head = config_read(a, at);
        if head & 0xff == id as u32 {
            return Some(at);
        }
        at = ((head >> 8) & 0xfc) as u16;
    }
    None
}

/// Reset function `a` by a PCIe Function Level Reset if its Device Capabilities offer one:
/// wait (up to 100 ms) for its outstanding transactions, save its type-0 header, set Initiate
/// FLR, wait 100 ms and until it answers config reads again, then restore the BARs and the
/// command register (the FLR cleared memory decode and bus mastering). Returns false when it
/// cannot: without the capability (nothing done), or when the function does not answer within
/// a second after the reset (logged).
pub fn function_level_reset(a: PciAddress) -> bool {
    let Some(cap) = capability(a, CAP_ID_PCIE) else { return false };
    if config_read(a, cap + PCIE_DEVCAP) & DEVCAP_FLR == 0 {
        return false;
    }
    let start = crate::time::now_ns();
    while config_read(a, cap + PCIE_DEVCTL) & DEVSTA_TRANS_PENDING != 0 && crate::time::now_ns() - start < FLR_WAIT_NS {
        core::hint::spin_loop();
    }
    let mut header = [0u32; 16];
    for (i, d) in header.iter_mut().enumerate() {
        *d = config_read(a, i as u16 * 4);
    }
    let ctl = config_read(a, cap + PCIE_DEVCTL);
    config_write(a, cap + PCIE_DEVCTL, (ctl & 0xffff) | DEVCTL_INITIATE_FLR);
    crate::time::spin_ns(FLR_WAIT_NS);
    let start = crate::time::now_ns();
    while config_read(a, 0) & 0xffff == 0xffff {
        if crate::time::now_ns() - start > FLR_READY_NS {
            log::error!("pci: {:02x}:{:02x}.{:x} did not come back after FLR", a.bus(), a.device(), a.function());
            return false;
        }
        core::hint::spin_loop();
    }
    // BARs, then cache line / latency / interrupt line, then the command register last.
    for i in 4..10 {
        config_write(a, i * 4, header[i as usize]);
    }
    config_write(a, 0x0c, header[3]);
    config_write(a, 0x3c, header[15]);
    config_write(a, REG_COMMAND, header[1] & 0xffff);
    log::info!("pci: {:02x}:{:02x}.{:x} function level reset", a.bus(), a.device(), a.function());
    true
}

/// Every function found (empty before [`init`]).
pub fn functions() -> &'static [PciFunction] {
    FUNCTIONS.get().map_or(&[], |v| v.as_slice())
}

/// Functions with this vendor and device ID.
pub fn find(vendor: u16, device: u16) -> impl Iterator<Item = &'static PciFunction> {
    functions().iter().filter(move |f| f.vendor == vendor && f.device == device)
}

/// Functions of this class and subclass (and programming interface, if given).
pub fn find_class(class: u8, subclass: u8, prog_if: Option<u8>) -> impl Iterator<Item = &'static PciFunction> {
    functions()
        .iter()
        .filter(move |f| f.class == class && f.subclass == subclass && prog_if.is_none_or(|p| p == f.prog_if))
}

/// Size and decode the BARs of a function with `count` BAR registers.
fn probe_bars(a: PciAddress, count: u8) -> heapless::Vec<Bar, 6> {
    let mut out = heapless::Vec::new();
    let cmd = config_read(a, REG_COMMAND);
    config_write(a, REG_COMMAND, (cmd & 0xffff) & !(CMD_IO | CMD_MEMORY));
    let mut i = 0;
    while i < count {
        let off = REG_BAR0 + 4 * i as u16;
        let orig = config_read(a, off);
        config_write(a, off, u32::MAX);
        let rb = config_read(a, off);
        config_write(a, off, orig);
        let this = i;
        i += 1;
        if rb == 0 || rb == u32::MAX && orig == u32::MAX {
            continue;
        }
        if orig & BAR_IO != 0 {
            let mask = rb & !0x3 & 0xffff;
            if mask != 0 {
                let size = (!mask & 0xffff) as u64 + 1;
                let _ = out.push(Bar { index: this, kind: BarKind::Io, prefetchable: false, address: (orig & !0x3) as u64, size });
            }
            continue;
        }
        let prefetchable = orig & BAR_PREFETCH != 0;
        match orig & BAR_TYPE_MASK {
            0 => {
                let mask = rb & !0xf;
                if mask != 0 {
                    let size = (!mask as u64 & 0xffff_ffff) + 1;
                    let _ = out.push(Bar { index: this, kind: BarKind::Mem32, prefetchable, address: (orig & !0xf) as u64, size });
                }
            }
            BAR_TYPE_64 if i < count => {
                let hoff = off + 4;
                let horig = config_read(a, hoff);
                config_write(a, hoff, u32::MAX);
                let hrb = config_read(a, hoff);
                config_write(a, hoff, horig);
                i += 1;
                let mask = ((hrb as u64) << 32) | (rb & !0xf) as u64;
                if mask != 0 {
                    let size = (!mask).wrapping_add(1);
                    let address = ((horig as u64) << 32) | (orig & !0xf) as u64;
                    let _ = out.push(Bar { index: this, kind: BarKind::Mem64, prefetchable, address, size });
                }
            }
            t => log::warn!("pci: {a} bar{this} has reserved memory type {t:#x}; ignored"),
        }
    }
    config_write(a, REG_COMMAND, cmd & 0xffff);
    out
}

fn scan_bus(bus: u8, out: &mut Vec<PciFunction>, seen: &mut [bool; 256], depth: u32) {
    if seen[bus as usize] || depth > 32 {
        return;
    }
    seen[bus as usize] = true;
    for dev in 0..32u8 {
        let h0 = PciHeader::new(PciAddress::new(0, bus, dev, 0));
        if h0.id(ConfigAccess).0 == 0xffff {
            continue;
        }
        let nfn = if h0.has_multiple_functions(ConfigAccess) { 8 } else { 1 };
        for func in 0..nfn {
            let a = PciAddress::new(0, bus, dev, func);
            let h = PciHeader::new(a);
            let (vendor, device) = h.id(ConfigAccess);
            if vendor == 0xffff {
                continue;
            }
            let (_rev, class, subclass, prog_if) = h.revision_and_class(ConfigAccess);
            let (bridge, nbars) = match h.header_type(ConfigAccess) {
                HeaderType::Endpoint => (None, 6),
                HeaderType::PciPciBridge => {
                    let b = PciPciBridgeHeader::from_header(h, ConfigAccess);
                    (b.map(|b| (b.secondary_bus_number(ConfigAccess), b.subordinate_bus_number(ConfigAccess))), 2)
                }
                _ => (None, 0),
            };
            let bars = probe_bars(a, nbars);
            for b in bars.iter().filter(|b| b.kind != BarKind::Io && b.address != 0) {
                if let Err(e) = crate::paging::map_mmio(b.address, b.size) {
                    log::warn!("pci: {a} bar{} not mapped: {e:?}", b.index);
                }
            }
            let f = PciFunction { address: a, vendor, device, class, subclass, prog_if, bridge, bars };
            log::info!("pci: {f}");
            out.push(f);
            if let Some((sec, _)) = bridge {
                if sec > bus {
                    scan_bus(sec, out, seen, depth + 1);
                } else {
                    log::warn!("pci: bridge {a} has no secondary bus assigned; not scanned");
                }
            }
        }
    }
}

/// Enumerate every function; print one line each.
pub fn init(from_acpi: Option<Ecam>) {
    let ecam = from_acpi;
    if let Some(e) = ecam {
        let len = ((e.bus_end as u64 - e.bus_start as u64) + 1) << 20;
        if let Err(err) = crate::paging::map_mmio(e.base, len) {
            log::warn!("pci: ECAM at {:#x} not mappable ({err:?}); legacy access", e.base);
            ECAM.call_once(|| None);
        }
    }
    ECAM.call_once(|| ecam);
    let mut out = Vec::new();
    let mut seen = [false; 256];
    let start = ecam.map_or(0, |e| e.bus_start);
    scan_bus(start, &mut out, &mut seen, 0);
    log::info!("pci: {} functions via {}", out.len(), if self::ecam().is_some() { "ECAM" } else { "legacy 0xcf8" });
    crate::STATS.lock().pci_functions = out.len();
    FUNCTIONS.call_once(|| out);
}
