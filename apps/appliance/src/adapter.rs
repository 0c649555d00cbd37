//! adapter: finds NVIDIA/Mellanox ConnectX functions on PCIe, brings the first usable one up
//! with the mlx5 driver (BAR0 through `kernel::pci`, DMA and time through `KernelHal`) and
//! wraps it as `rdma::Verbs` for the NVMe-oF role. One console line per function found:
//!
//! ```text
//! connectx: 03:00.0 15b3:1017 ConnectX-5: firmware 16.35.2000, MAC 0c:42:a1:00:00:01, GID 0 ::ffff:10.0.0.1, link up
//! ```
//!
//! A bring-up failure prints the typed `mlx5::Error` and the appliance keeps running its other
//! parts; the NVMe-oF role then fails with a clear message. Without any ConnectX (QEMU) the
//! boot says "no ConnectX adapter found".
use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use core::fmt;

use kernel::pci::PciFunction;
use kernel::{KernelHal, KernelMmio};
use log::{error, info, warn};
use rdma::{Control as _, Neighbours as _};

/// The verbs provider the NVMe-oF role runs on.
pub type Verbs = mlx5::Mlx5Verbs<KernelHal, KernelMmio>;

/// PCI vendor ID of Mellanox/NVIDIA.
pub const VENDOR: u16 = 0x15b3;

// The mlx5 device IDs and names are the driver's table, `mlx5::PCI_IDS` (exactly Linux's
// `mlx5_core_pci_table`). Functions of vendor 0x15b3 with a network class code but another
// ID in an mlx5-generation range are tried too (newer parts), with a warning.

/// PCI class codes of network controllers (Ethernet 02.00, InfiniBand 02.07).
const CLASS_NETWORK: u8 = 0x02;

/// How long to wait for a port-state event when the firmware refuses QUERY_VPORT_STATE.
const LINK_WAIT_NS: u64 = 2_000_000_000;

/// An adapter that came up.
pub struct Adapter {
    /// `bb:dd.f`.
    pub bdf: String,
    /// Boxed: the driver state is large and must not sit on the boot stack.
    pub verbs: Box<Verbs>,
}

impl Adapter {
    /// Tear the adapter down (every object destroyed, pages reclaimed, HCA disabled).
    #[inline(never)]
    pub fn shutdown(self, why: &str) {
        match (*self.verbs).shutdown() {
            Ok(st) => info!(
                "connectx: {}: shut down ({why}): {} commands, {} pages given, {} reclaimed",
                self.bdf, st.commands, st.pages_given, st.pages_reclaimed
            ),
            Err(e) => error!("connectx: {}: shutdown ({why}) failed: {e} ({e:?})", self.bdf),
        }
    }
}

/// Why there is no adapter for the NVMe-oF role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoAdapter {
    /// No ConnectX function on PCIe (always the case under QEMU).
    NotFound,
    /// Found `found`, but no `ip=` / `nvmet.listen=` address to bring one up with.
    NoAddress { found: usize },
    /// Every one of `found` failed to come up (errors printed at boot).
    Failed { found: usize },
    /// `connectx=` names no mlx5 function.
    NotSelected,
}

impl fmt::Display for NoAdapter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoAdapter::NotFound => write!(f, "no ConnectX adapter found"),
            NoAdapter::NoAddress { found } => write!(f, "{found} ConnectX function(s) found but none brought up: no ip= or nvmet.listen= address"),
            NoAdapter::Failed { found } => write!(f, "{found} ConnectX function(s) found, none came up (see the connectx: errors above)"),
            NoAdapter::NotSelected => write!(f, "the ConnectX function connectx= names does not exist"),
        }
    }
}

/// The model name of a 0x15b3 device ID, if it is in the mlx5 table (`mlx5::PCI_IDS`).
pub fn model(device: u16) -> Option<&'static str> {
    mlx5::pci_id(VENDOR, device).map(|i| i.name)
}

/// Device-ID ranges where mlx5-generation parts not (yet) in `mlx5::PCI_IDS` are expected: the
/// ConnectX numbering after Connect-IB (0x1011..), the 0x21xx C2C parts and the BlueField
/// 0xa2dx integrated NICs. Older Mellanox parts use the mlx4 interface and are not tried
/// (Linux drivers/net/ethernet/mellanox/mlx4/main.c `mlx4_pci_table`: 0x63xx/0x67xx and
/// 0x1002..=0x1010, ConnectX-3 and before).
fn mlx5_generation_id(device: u16) -> bool {
    matches!(device, 0x1011..=0x10ff | 0x2100..=0x21ff | 0xa2d0..=0xa2ff)
}

/// What the image does with a Mellanox function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    /// In the mlx5 ID table.
    Known(&'static str),
    /// Network class with an ID in an mlx5-generation range: tried, with a warning.
    Likely,
    /// A Mellanox network function of another family (listed, not used).
    Other,
}

/// Classify a PCI function; `None` if it is not a Mellanox network function.
pub fn classify(f: &PciFunction) -> Option<Match> {
    if f.vendor != VENDOR || f.bridge.is_some() {
        return None;
    }
    match model(f.device) {
        Some(n) => Some(Match::Known(n)),
        None if f.class != CLASS_NETWORK => None,
        None if mlx5_generation_id(f.device) => Some(Match::Likely),
        None => Some(Match::Other),
    }
}

/// ConnectX candidates in PCI order (every Mellanox network function, see [`classify`]).
pub fn candidates() -> impl Iterator<Item = &'static PciFunction> {
    kernel::pci::functions().iter().filter(|f| classify(f).is_some())
}

fn mac_str(m: [u8; 6]) -> String {
    format!("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4], m[5])
}

/// Find the ConnectX functions, print one line each, and bring the first usable one (or the
/// one `select` names, `connectx=`) up with IPv4 address `ip` (GID 0 = ::ffff:ip), its firmware
/// commands traced as `trace` says. Never panics; failures are printed.
#[inline(never)]
pub fn attach(ip: Option<[u8; 4]>, select: Option<(u8, u8, u8)>, trace: mlx5::TraceMode) -> Result<Adapter, NoAdapter> {
    let found: alloc::vec::Vec<&PciFunction> = candidates().collect();
    if found.is_empty() {
        info!("connectx: no ConnectX adapter found (no PCI function of vendor 15b3 with an mlx5 device ID or a network class)");
        return Err(NoAdapter::NotFound);
    }
    let mut up: Option<Adapter> = None;
    for f in &found {
        let (b, d, fu) = f.bdf();
        let bdf = format!("{b:02x}:{d:02x}.{fu:x}");
        let name = match classify(f) {
            Some(Match::Known(n)) => n,
            Some(Match::Likely) => {
                warn!("connectx: {bdf} 15b3:{:04x} is not in the mlx5 ID table; trying the mlx5 driver anyway", f.device);
                "unknown mlx5-generation model"
            }
            _ => {
                info!("connectx: {bdf} 15b3:{:04x} class {:02x}.{:02x}: not an mlx5 device (ConnectX-3 or older?): not used", f.device, f.class, f.subclass);
                continue;
            }
        };
        let head = format!("connectx: {bdf} 15b3:{:04x} {name}", f.device);
        if let Some((sb, sd, sf)) = select.filter(|s| *s != f.bdf()) {
            info!("{head}: not used (connectx={sb:02x}:{sd:02x}.{sf:x} selects another)");
            continue;
        }
        if up.is_some() {
            info!("{head}: not used (one adapter per image; the first one that came up serves)");
            continue;
        }
        let Some(ip) = ip else {
            info!("{head}: not brought up (no ip= or nvmet.listen= address on the command line)");
            continue;
        };
        // A VF (Linux's table flag) skips what only a PF may do (HOST_ENDIANNESS).
        let vf = mlx5::pci_id(f.vendor, f.device).is_some_and(|i| i.vf);
        if let Some(verbs) = bring_up(f, 0, &head, ip, trace, vf) {
            up = Some(Adapter { bdf, verbs });
        }
    }
    let usable = found.iter().filter(|f| matches!(classify(f), Some(Match::Known(_) | Match::Likely))).count();
    if let Some((sb, sd, sf)) = select {
        if up.is_none() && !found.iter().any(|f| f.bdf() == (sb, sd, sf) && matches!(classify(f), Some(Match::Known(_) | Match::Likely))) {
            error!("connectx: connectx={sb:02x}:{sd:02x}.{sf:x}: no mlx5 function at that address");
            return Err(NoAdapter::NotSelected);
        }
    }
    match up {
        Some(a) => Ok(a),
        None if usable == 0 => {
            info!("connectx: no ConnectX adapter found (none of the Mellanox functions above is an mlx5 device)");
            Err(NoAdapter::NotFound)
        }
        None if ip.is_none() => Err(NoAdapter::NoAddress { found: usable }),
        None => Err(NoAdapter::Failed { found: usable }),
    }
}

/// Bring one function up (its BAR `bar` as the mlx5 BAR0: 0 on a ConnectX, 2 on the ivshmem
/// stand-in, see `crate::emu`) and print its line. Kept out of line: `mlx5::Mlx5` is a large
/// value (tens of KiB) that passes through this frame once, then lives boxed.
#[inline(never)]
pub(crate) fn bring_up(f: &PciFunction, bar: u8, head: &str, ip: [u8; 4], trace: mlx5::TraceMode, vf: bool) -> Option<Box<Verbs>> {
    f.enable();
    let bar0 = match f.map_bar(bar) {
        Ok(m) => m,
        Err(e) => {
            error!("{head}: BAR{bar} not usable: {e:?}");
            return None;
        }
    };
    let cfg = mlx5::Config { ipv4: ip, trace, vf, ..Default::default() };
    let mut verbs = match mlx5::Mlx5Verbs::bring_up(KernelHal, bar0, cfg) {
        Ok(v) => Box::new(v),
        Err(e) => {
            // bring_up released what it made (pages reclaimed, HCA disabled) before failing.
            error!("{head}: bring-up failed: {e} ({e:?})");
            return None;
        }
    };
    let fw = verbs.fw();
    // Ask the firmware (QUERY_VPORT_STATE): it need not send a port-change event at boot.
    // Only if it refuses the query, wait a moment for such an event instead.
    if let Err(e) = verbs.query_link() {
        warn!("{head}: link state query failed ({e}); waiting for a port event");
        let t0 = kernel::time::now_ns();
        while verbs.link_up().is_none() && kernel::time::now_ns() - t0 < LINK_WAIT_NS {
            verbs.poll();
        }
    }
    let link = match verbs.link_up() {
        Some(true) => "link up",
        Some(false) => "link down",
        None => "link state unknown (query refused, no port event within 2 s)",
    };
    if let Some(e) = verbs.last_poll_error.take() {
        error!("{head}: after bring-up: {e}");
    }
    info!(
        "{head}: firmware {fw}, MAC {}, GID 0 ::ffff:{}.{}.{}.{} (RoCEv2), {link}, raw Ethernet/ARP {}",
        mac_str(verbs.local_mac()),
        ip[0],
        ip[1],
        ip[2],
        ip[3],
        if verbs.raw_eth { "on" } else { "off (static neighbours only)" }
    );
    Some(verbs)
}
