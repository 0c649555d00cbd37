//! emu-runner: one appliance node on the host = mlx5 driver (`Mlx5Verbs`) over the emulated
//! ConnectX (`SimHal` + model + RoCE engine), its port attached to any `emu_roce::Link`.
//! The loop is single-threaded: `app.poll(); verbs.poll(); adapter.poll()` (the adapter polls
//! its link).
#![forbid(unsafe_code)]

pub mod nvmf;

use emu_connectx::{Bar0, ConnectX, PhysMem, SimClock, SimHal};
use mlx5::{Mlx5, Mlx5Verbs, Timeouts};

pub type Verbs = Mlx5Verbs<SimHal, Bar0>;

/// A driver + emulated adapter pair.
pub struct Node {
    pub clock: SimClock,
    /// The platform the driver runs on (shares physical memory with the adapter).
    pub hal: SimHal,
    pub cx: ConnectX,
    pub v: Verbs,
}

#[derive(Debug)]
pub enum Error {
    BringUp(mlx5::Error),
}

/// How a node is made besides its addresses (command-line options of emu-runner).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The driver's firmware command trace (`--trace 1|full`).
    pub trace: mlx5::TraceMode,
    /// The emulated adapter's device profile (`--profile NAME`, default connectx5).
    pub profile: emu_connectx::Profile,
}

/// The profile named `name` (emu_connectx::profile::NAMES), or a message listing the names.
pub fn profile_by_name(name: &str) -> Result<emu_connectx::Profile, String> {
    emu_connectx::Profile::by_name(name)
        .ok_or_else(|| format!("unknown device profile {name:?}; known: {}", emu_connectx::profile::NAMES.join(", ")))
}

impl Node {
    /// Bring the adapter up with `ip`/`mac`; physical memory starts at `mem_base`.
    /// The port does not answer ARP by itself: the driver does, over the raw Ethernet path.
    pub fn new(clock: SimClock, ip: [u8; 4], mac: [u8; 6], mem_base: u64, link: Box<dyn emu_roce::Link>) -> Result<Node, Error> {
        Self::with_options(clock, ip, mac, mem_base, link, Options::default())
    }

    /// [`Node::new`] with [`Options`].
    pub fn with_options(
        clock: SimClock,
        ip: [u8; 4],
        mac: [u8; 6],
        mem_base: u64,
        link: Box<dyn emu_roce::Link>,
        opts: Options,
    ) -> Result<Node, Error> {
        // As the appliance does: a VF by its PCI ID (Linux's table), skipping PF-only steps.
        let vf = mlx5::pci_id(opts.profile.pci_vendor_id, opts.profile.pci_device_id).is_some_and(|i| i.vf);
        let mem = PhysMem::with_base(mem_base);
        let hal = SimHal::new(mem.clone(), clock.clone());
        let cx = ConnectX::new(mem, clock.clone(), emu_connectx::Config { mac, port_answers_arp: false, profile: opts.profile, ..Default::default() });
        let cfg = mlx5::Config {
            ipv4: ip,
            timeouts: Timeouts { init_ns: 2_000_000_000, cmd_ns: 2_000_000_000, health_stall_ns: 1_000_000_000 },
            trace: opts.trace,
            vf,
            ..mlx5::Config::default()
        };
        let dev = Mlx5::bring_up(hal.clone(), cx.bar0(), cfg).map_err(Error::BringUp)?;
        let v = Mlx5Verbs::new(dev).map_err(Error::BringUp)?;
        cx.attach_link(link);
        Ok(Node { clock, hal, cx, v })
    }

    /// Device side of one loop turn (driver housekeeping, then adapter + link).
    pub fn poll(&mut self) {
        use rdma::Verbs as _;
        self.v.poll();
        self.cx.poll();
    }
}

/// A link whose virtual "now" follows a `SimClock` (for `MemLink` delays in tests).
pub struct Clocked(pub emu_roce::MemLink, pub SimClock);
impl emu_roce::Link for Clocked {
    fn send(&mut self, f: &[u8]) {
        self.0.set_now(self.1.now_ns());
        self.0.send(f)
    }
    fn poll(&mut self) -> Option<Vec<u8>> {
        self.0.set_now(self.1.now_ns());
        self.0.poll()
    }
}

/// Parse "a.b.c.d".
pub fn parse_ip(s: &str) -> Option<[u8; 4]> {
    let mut o = [0u8; 4];
    let mut it = s.split('.');
    for b in &mut o {
        *b = it.next()?.parse().ok()?;
    }
    it.next().is_none().then_some(o)
}

/// Parse "aa:bb:cc:dd:ee:ff".
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut o = [0u8; 6];
    let mut it = s.split(':');
    for b in &mut o {
        *b = u8::from_str_radix(it.next()?, 16).ok()?;
    }
    it.next().is_none().then_some(o)
}
