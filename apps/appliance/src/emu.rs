//! emu: `connectx.emu=ivshmem`: the ConnectX is the project's emulated adapter (emu/connectx)
//! run by `emu-pci-shim` on the host, reached through an `ivshmem-plain` device (1af4:1110)
//! whose BAR2 (a shared file) stands for the adapter's BAR0, while the guest's RAM is a shared
//! file the model DMAs into. The mlx5 driver and everything above it run unchanged:
//!
//! ```text
//! connectx: 00:03.0 1af4:1110 emulated ConnectX (ivshmem BAR2 as BAR0): firmware 16.35.2000, MAC ..., link up
//! ```
use alloc::format;

use log::{error, info};

use crate::adapter::{Adapter, NoAdapter};

/// The ivshmem device QEMU offers (`-device ivshmem-plain`, Red Hat/virtio vendor 0x1af4).
pub const IVSHMEM: (u16, u16) = (0x1af4, 0x1110);
/// Its shared-memory BAR (BAR0 is ivshmem's own registers).
pub const SHARED_BAR: u8 = 2;

/// Bring the stand-in up with IPv4 address `ip` (the first ivshmem function). Never panics.
#[inline(never)]
/// `device`: the 15b3 device ID the emulated function stands for (`connectx.emu=ivshmem,device=`),
/// whose VF flag in the mlx5 table the driver follows, as for a real function.
pub fn attach(ip: Option<[u8; 4]>, trace: mlx5::TraceMode, device: Option<u16>) -> Result<Adapter, NoAdapter> {
    let Some(f) = kernel::pci::find(IVSHMEM.0, IVSHMEM.1).next() else {
        error!("connectx: connectx.emu=ivshmem: no ivshmem device ({:04x}:{:04x}) found", IVSHMEM.0, IVSHMEM.1);
        return Err(NoAdapter::NotFound);
    };
    let (b, d, fu) = f.bdf();
    let bdf = format!("{b:02x}:{d:02x}.{fu:x}");
    let head = format!("connectx: {bdf} {:04x}:{:04x} emulated ConnectX (ivshmem BAR{SHARED_BAR} as BAR0)", IVSHMEM.0, IVSHMEM.1);
    let Some(ip) = ip else {
        info!("{head}: not brought up (no ip= or nvmet.listen= address on the command line)");
        return Err(NoAdapter::NoAddress { found: 1 });
    };
    match crate::adapter::bring_up(f, SHARED_BAR, &head, ip, trace, device.and_then(|d| mlx5::pci_id(mlx5::PCI_VENDOR, d)).is_some_and(|i| i.vf)) {
        Some(verbs) => Ok(Adapter { bdf, verbs }),
        None => Err(NoAdapter::Failed { found: 1 }),
    }
}
