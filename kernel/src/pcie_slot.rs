//! PCIe native hot-plug slots (PCIe base spec §6.7, the Slot Capabilities / Control / Status
//! registers of a root or downstream port's PCI Express capability), polled from a slow path.
//!
//! Orderly removal as an operator (or QEMU's `device_del`) asks for it: the slot's attention
//! button is pressed ([`SlotEvents::attention`]); the driver of the device behind the slot
//! quiesces it; then [`HotplugSlot::power_off`] turns the power indicator and the slot power
//! off, which is where the device may be pulled (QEMU removes it at that write). A device
//! that vanishes without that (surprise removal) shows as presence lost.
//! No interrupts: the enables in Slot Control stay off and the status is read on each poll.
use alloc::vec::Vec;

use pci_types::PciAddress;

use crate::pci::{config_read, config_write, functions, PciFunction};

/// PCI Express capability ID (PCI local bus spec, capability list).
const CAP_PCIE: u8 = 0x10;
/// Offsets inside the PCI Express capability (PCIe base spec §7.5.3); the PCI Express
/// Capabilities register is the high half of the capability's first dword.
const SLOT_CAP: u16 = 0x14;
/// Slot Control (bits 15:0) and Slot Status (bits 31:16) share this dword.
const SLOT_CTL_STA: u16 = 0x18;
/// PCI Express Capabilities register: Slot Implemented; port types with a slot.
const FLAGS_SLOT: u32 = 1 << 8;
const TYPE_ROOT_PORT: u32 = 0x4;
const TYPE_DOWNSTREAM: u32 = 0x6;
/// Slot Capabilities: Attention Button Present, Power Controller Present, Hot-Plug Capable,
/// Physical Slot Number (31:19).
const SLTCAP_ABP: u32 = 1 << 0;
const SLTCAP_PCP: u32 = 1 << 1;
const SLTCAP_HPC: u32 = 1 << 6;
/// Slot Control: Power Indicator Control (9:8, 11b = off), Power Controller Control (1 = off).
const SLTCTL_PIC_MASK: u32 = 0b11 << 8;
const SLTCTL_PIC_OFF: u32 = 0b11 << 8;
const SLTCTL_PCC_OFF: u32 = 1 << 10;
/// Slot Status (as bits of the shared dword): Attention Button Pressed, Presence Detect
/// Changed, Presence Detect State; the first two are write-1-to-clear.
const SLTSTA_ABP: u32 = 1 << 16;
const SLTSTA_PDC: u32 = 1 << (16 + 3);
const SLTSTA_PDS: u32 = 1 << (16 + 6);

/// A hot-plug capable slot below a root or downstream port.
#[derive(Debug, Clone, Copy)]
pub struct HotplugSlot {
    /// The port the slot belongs to.
    pub port: PciAddress,
    /// Buses behind the port (secondary..=subordinate): the devices in the slot.
    pub buses: (u8, u8),
    /// Physical slot number (Slot Capabilities 31:19).
    pub number: u32,
    /// Whether the port can switch the slot's power (else only the indicator goes off).
    pub power_controller: bool,
    /// Whether the slot has an attention button (orderly removal requests).
    pub attention_button: bool,
    cap: u16,
}

/// What a poll of the slot found (the events are cleared by the poll that reports them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotEvents {
    /// The attention button was pressed: removal requested.
    pub attention: bool,
    /// Presence detect changed.
    pub presence_changed: bool,
    /// A card is present now.
    pub present: bool,
}

impl HotplugSlot {
    /// Whether the device at `a` sits in this slot (on a bus behind the port).
    pub fn holds(&self, a: PciAddress) -> bool {
        (self.buses.0..=self.buses.1).contains(&a.bus())
    }

    /// Read the slot's status and clear the events it reports (write-1-to-clear; the control
    /// half of the dword is written back unchanged).
    pub fn poll(&self) -> SlotEvents {
        let v = config_read(self.port, self.cap + SLOT_CTL_STA);
        let events = v & (SLTSTA_ABP | SLTSTA_PDC);
        if events != 0 {
            config_write(self.port, self.cap + SLOT_CTL_STA, (v & 0xffff) | events);
        }
        SlotEvents { attention: v & SLTSTA_ABP != 0, presence_changed: v & SLTSTA_PDC != 0, present: v & SLTSTA_PDS != 0 }
    }

    /// Turn the power indicator off and (where the port has a power controller) the slot's
    /// power off: one Slot Control command. The device may be pulled from then on.
    pub fn power_off(&self) {
        let v = config_read(self.port, self.cap + SLOT_CTL_STA) & 0xffff;
        let ctl = (v & !SLTCTL_PIC_MASK) | SLTCTL_PIC_OFF | SLTCTL_PCC_OFF;
        config_write(self.port, self.cap + SLOT_CTL_STA, ctl);
    }
}

fn slot_of(f: &PciFunction) -> Option<HotplugSlot> {
    let buses = f.bridge?;
    let cap = f.capability(CAP_PCIE)?;
    let flags = f.config_read(cap) >> 16;
    let port_type = (flags >> 4) & 0xf;
    if flags & FLAGS_SLOT == 0 || !(port_type == TYPE_ROOT_PORT || port_type == TYPE_DOWNSTREAM) {
        return None;
    }
    let sltcap = f.config_read(cap + SLOT_CAP);
    if sltcap & SLTCAP_HPC == 0 {
        return None;
    }
    Some(HotplugSlot {
        port: f.address,
        buses,
        number: sltcap >> 19,
        power_controller: sltcap & SLTCAP_PCP != 0,
        attention_button: sltcap & SLTCAP_ABP != 0,
        cap,
    })
}

/// Every hot-plug capable slot among the enumerated ports.
pub fn slots() -> Vec<HotplugSlot> {
    functions().iter().filter_map(slot_of).collect()
}

/// The hot-plug slot the device at `a` sits in, if any (the innermost, behind switches).
pub fn slot_for(a: PciAddress) -> Option<HotplugSlot> {
    slots().into_iter().filter(|s| s.holds(a)).min_by_key(|s| s.buses.1 - s.buses.0)
}
