//! ACPI with the `acpi` crate: RSDP from the loader (PVH `rsdp_paddr`, Multiboot2 tag 14/15)
//! or the BIOS area scan (ACPI 6.5 §5.2.5.1), then MCFG (PCI Firmware spec §4.1.2: the ECAM
//! window) and MADT (ACPI §5.2.12: the CPUs' local APICs). Tables are identity-mapped, so
//! "mapping" a region is returning its physical address.
use core::ptr::NonNull;

use ::acpi::address::AddressSpace;
use ::acpi::sdt::fadt::Fadt;
use ::acpi::sdt::madt::{Madt, MadtEntry};
use ::acpi::sdt::mcfg::Mcfg;
use ::acpi::{AcpiTables, Handler, PhysicalMapping, PciAddress};
use x86_64::instructions::port::Port;

/// The ECAM window of PCI segment 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ecam {
    pub base: u64,
    pub bus_start: u8,
    pub bus_end: u8,
}

/// What the platform needs from ACPI.
#[derive(Debug, Clone, Copy)]
pub struct AcpiInfo {
    pub rsdp: u64,
    pub ecam: Option<Ecam>,
    pub cpus: usize,
    pub io_apics: usize,
}

/// Identity-mapped access for the `acpi` crate.
#[derive(Debug, Clone, Copy)]
pub struct IdentityHandler;

impl Handler for IdentityHandler {
    unsafe fn map_physical_region<T>(&self, physical_address: usize, size: usize) -> PhysicalMapping<Self, T> {
        if physical_address as u64 >= 4 << 30 {
            let _ = crate::paging::map_mmio(physical_address as u64, size as u64);
        }
        PhysicalMapping {
            physical_start: physical_address,
            // SAFETY: the caller (acpi) passes the non-null address of a table; identity mapping.
            virtual_start: unsafe { NonNull::new_unchecked(physical_address as *mut T) },
            region_length: size,
            mapped_length: size,
            handler: *self,
        }
    }
    fn unmap_physical_region<T>(_region: &PhysicalMapping<Self, T>) {}

    // The accessors below serve AML, which this kernel does not run; they work anyway.
    fn read_u8(&self, a: usize) -> u8 {
        // SAFETY: identity-mapped physical address given by a firmware table.
        unsafe { (a as *const u8).read_volatile() }
    }
    fn read_u16(&self, a: usize) -> u16 {
        // SAFETY: as read_u8.
        unsafe { (a as *const u16).read_volatile() }
    }
    fn read_u32(&self, a: usize) -> u32 {
        // SAFETY: as read_u8.
        unsafe { (a as *const u32).read_volatile() }
    }
    fn read_u64(&self, a: usize) -> u64 {
        // SAFETY: as read_u8.
        unsafe { (a as *const u64).read_volatile() }
    }
    fn write_u8(&self, a: usize, v: u8) {
        // SAFETY: as read_u8.
        unsafe { (a as *mut u8).write_volatile(v) }
    }
    fn write_u16(&self, a: usize, v: u16) {
        // SAFETY: as read_u8.
        unsafe { (a as *mut u16).write_volatile(v) }
    }
    fn write_u32(&self, a: usize, v: u32) {
        // SAFETY: as read_u8.
        unsafe { (a as *mut u32).write_volatile(v) }
    }
    fn write_u64(&self, a: usize, v: u64) {
        // SAFETY: as read_u8.
        unsafe { (a as *mut u64).write_volatile(v) }
    }
    fn read_io_u8(&self, p: u16) -> u8 {
        // SAFETY: port named by a firmware table.
        unsafe { Port::new(p).read() }
    }
    fn read_io_u16(&self, p: u16) -> u16 {
        // SAFETY: as read_io_u8.
        unsafe { Port::new(p).read() }
    }
    fn read_io_u32(&self, p: u16) -> u32 {
        // SAFETY: as read_io_u8.
        unsafe { Port::new(p).read() }
    }
    fn write_io_u8(&self, p: u16, v: u8) {
        // SAFETY: as read_io_u8.
        unsafe { Port::new(p).write(v) }
    }
    fn write_io_u16(&self, p: u16, v: u16) {
        // SAFETY: as read_io_u8.
        unsafe { Port::new(p).write(v) }
    }
    fn write_io_u32(&self, p: u16, v: u32) {
        // SAFETY: as read_io_u8.
        unsafe { Port::new(p).write(v) }
    }
    fn read_pci_u8(&self, a: PciAddress, o: u16) -> u8 {
        (crate::pci::config_read(a, o & !3) >> ((o & 3) * 8)) as u8
    }
    fn read_pci_u16(&self, a: PciAddress, o: u16) -> u16 {
        (crate::pci::config_read(a, o & !3) >> ((o & 2) * 8)) as u16
    }
    fn read_pci_u32(&self, a: PciAddress, o: u16) -> u32 {
        crate::pci::config_read(a, o)
    }
    fn write_pci_u8(&self, a: PciAddress, o: u16, v: u8) {
        let sh = (o & 3) * 8;
        let old = crate::pci::config_read(a, o & !3);
        crate::pci::config_write(a, o & !3, (old & !(0xff << sh)) | ((v as u32) << sh));
    }
    fn write_pci_u16(&self, a: PciAddress, o: u16, v: u16) {
        let sh = (o & 2) * 8;
        let old = crate::pci::config_read(a, o & !3);
        crate::pci::config_write(a, o & !3, (old & !(0xffff << sh)) | ((v as u32) << sh));
    }
    fn write_pci_u32(&self, a: PciAddress, o: u16, v: u32) {
        crate::pci::config_write(a, o, v)
    }
    fn nanos_since_boot(&self) -> u64 {
        crate::time::uptime_ns()
    }
    fn stall(&self, us: u64) {
        crate::time::spin_ns(us * 1000)
    }
    fn sleep(&self, ms: u64) {
        crate::time::spin_ns(ms * 1_000_000)
    }
}

/// Find and read the tables. None (with a warning) if there is no valid RSDP.
pub fn init(from_loader: Option<u64>, force_pm_timer: bool) -> Option<AcpiInfo> {
    let rsdp = match from_loader {
        Some(pa) => pa,
        None => {
            // SAFETY: the BIOS area (EBDA, 0xE0000-0xFFFFF) is identity-mapped RAM/ROM.
            match unsafe { ::acpi::rsdp::Rsdp::search_for_on_bios(IdentityHandler) } {
                Ok(m) => m.physical_start as u64,
                Err(e) => {
                    log::warn!("acpi: no RSDP from the loader or the BIOS area ({e:?}); legacy PCI access");
                    return None;
                }
            }
        }
    };
    // SAFETY: `rsdp` is the RSDP's physical address (loader or a checksummed BIOS-area match).
    let tables = match unsafe { AcpiTables::from_rsdp(IdentityHandler, rsdp as usize) } {
        Ok(t) => t,
        Err(e) => {
            log::warn!("acpi: tables at RSDP {rsdp:#x} unusable: {e:?}");
            return None;
        }
    };
    let ecam = tables.find_table::<Mcfg>().and_then(|m| {
        m.entries().iter().find(|e| e.pci_segment_group == 0).map(|e| Ecam {
            base: e.base_address,
            bus_start: e.bus_number_start,
            bus_end: e.bus_number_end,
        })
    });
    match tables.find_table::<Fadt>().map(|f| (f.pm_timer_block(), { let flags = f.flags; flags.pm_timer_is_32_bit() })) {
        Some((Ok(Some(gas)), ext32)) if gas.address_space == AddressSpace::SystemIo && gas.address <= 0xffff => {
            crate::time::refine_with_pm_timer(gas.address as u16, ext32, force_pm_timer)
        }
        _ if force_pm_timer => log::warn!("acpi: no I/O-port PM timer in the FADT"),
        _ => {}
    }
    if let Some(f) = tables.find_table::<Fadt>() {
        let io = |g: Result<::acpi::address::GenericAddress, _>| match g {
            Ok(g) if g.address_space == AddressSpace::SystemIo && g.address <= 0xffff => g.address as u16,
            _ => 0,
        };
        let (smi_cmd, acpi_enable, event_len) = (f.smi_cmd_port, f.acpi_enable, f.pm1_event_length);
        crate::power::record(crate::power::Pm1 {
            event: io(f.pm1a_event_block()),
            event_len,
            control: io(f.pm1a_control_block()),
            smi_cmd: u16::try_from(smi_cmd).unwrap_or(0),
            acpi_enable,
        });
    }
    let (mut cpus, mut io_apics) = (0, 0);
    if let Some(madt) = tables.find_table::<Madt>() {
        for e in madt.get().entries() {
            match e {
                MadtEntry::LocalApic(l) => {
                    let (id, flags) = (l.apic_id, l.flags);
                    if flags & 0b11 != 0 {
                        cpus += 1;
                        if flags & 1 != 0 {
                            // enabled now (bit 1 alone: online capable, a hot-plug slot)
                            crate::smp::record_madt_cpu(u32::from(id));
                        }
                        log::info!("acpi: cpu apic id {id}");
                    }
                }
                MadtEntry::LocalX2Apic(l) => {
                    let (id, flags) = (l.x2apic_id, l.flags);
                    if flags & 0b11 != 0 {
                        cpus += 1;
                        if flags & 1 != 0 {
                            // enabled now (bit 1 alone: online capable, a hot-plug slot)
                            crate::smp::record_madt_cpu(id);
                        }
                        log::info!("acpi: cpu x2apic id {id}");
                    }
                }
                MadtEntry::IoApic(_) => io_apics += 1,
                _ => {}
            }
        }
    } else {
        log::warn!("acpi: no MADT");
    }
    match ecam {
        Some(e) => log::info!(
            "acpi: RSDP {rsdp:#x}, MCFG ECAM {:#x} buses {:02x}-{:02x}, {cpus} CPUs, {io_apics} IO APICs",
            e.base,
            e.bus_start,
            e.bus_end
        ),
        None => log::info!("acpi: RSDP {rsdp:#x}, no MCFG (legacy PCI access), {cpus} CPUs, {io_apics} IO APICs"),
    }
    crate::STATS.lock().cpus = cpus;
    Some(AcpiInfo { rsdp, ecam, cpus, io_apics })
}
