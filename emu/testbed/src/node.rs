//! node: one appliance node on the host, the mlx5 driver over an emulated ConnectX on the
//! simulated platform, and the clocked in-process link two nodes talk over.
//!
//! The one home of the two-node harness: `emu-runner` builds its node with it, and so do the
//! driver's and the apps' tests (`drivers/mlx5/tests`, `apps/nvmeof/tests`).
//! Loop turn: `app.poll(); node.poll()` (driver housekeeping, then the adapter, which polls
//! its link). The adapter, memory, clock and link are shareable across threads (queue groups
//! on threads of their own: `drivers/mlx5/tests/group_threads.rs`).

use rdma::Control;
use emu_connectx::{Bar0, ConnectX, PhysMem, SimClock, SimHal};
use mlx5::{Mlx5Verbs, Timeouts};

/// The verbs a node's apps run on.
pub type Verbs = Mlx5Verbs<SimHal, Bar0>;

/// A driver + emulated adapter pair sharing one simulated physical memory.
pub struct Node {
    pub clock: SimClock,
    /// The platform the driver runs on (shares physical memory with the adapter).
    pub hal: SimHal,
    pub cx: ConnectX,
    pub v: Verbs,
}

/// Why a node could not be made.
#[derive(Debug)]
pub enum Error {
    /// The driver's bring-up (or its verbs layer's setup) failed, with the raw mlx5 status.
    BringUp(mlx5::Error),
}

/// How a node is made besides its addresses.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The driver's firmware command trace (emu-runner's `--trace 1|full`).
    pub trace: mlx5::TraceMode,
    /// The emulated adapter's device profile (emu-runner's `--profile NAME`).
    pub profile: emu_connectx::Profile,
    /// Whether the emulated port itself answers ARP. Off (the default) as on the appliance,
    /// where the driver answers over its raw Ethernet path.
    pub port_answers_arp: bool,
}

/// Driver timeouts of a node: generous, as time is virtual (it moves only while waiting).
const TIMEOUTS: Timeouts = Timeouts { init_ns: 2_000_000_000, cmd_ns: 2_000_000_000, health_stall_ns: 1_000_000_000 };

impl Node {
    /// Bring a node up with `ip`/`mac`; its physical memory starts at `mem_base` (give each
    /// node of a test its own range so a stray address cannot hit the other node's memory).
    pub fn new(clock: SimClock, ip: [u8; 4], mac: [u8; 6], mem_base: u64, link: Box<dyn emu_roce::Link + Send>) -> Result<Node, Error> {
        Self::with_options(clock, ip, mac, mem_base, link, Options::default())
    }

    /// [`Node::new`] with [`Options`].
    pub fn with_options(
        clock: SimClock,
        ip: [u8; 4],
        mac: [u8; 6],
        mem_base: u64,
        link: Box<dyn emu_roce::Link + Send>,
        opts: Options,
    ) -> Result<Node, Error> {
        // As the appliance does: a VF by its PCI ID (Linux's table), skipping PF-only steps.
        let vf = mlx5::pci_id(opts.profile.pci_vendor_id, opts.profile.pci_device_id).is_some_and(|i| i.vf);
        let mem = PhysMem::with_base(mem_base);
        let hal = SimHal::new(mem.clone(), clock.clone());
        let cx_cfg = emu_connectx::Config { mac, port_answers_arp: opts.port_answers_arp, profile: opts.profile, ..Default::default() };
        let cx = ConnectX::new(mem, clock.clone(), cx_cfg);
        let cfg = mlx5::Config { ipv4: ip, timeouts: TIMEOUTS, trace: opts.trace, vf, ..mlx5::Config::default() };
        let v = Mlx5Verbs::bring_up(hal.clone(), cx.bar0(), cfg).map_err(Error::BringUp)?;
        cx.attach_link(link);
        Ok(Node { clock, hal, cx, v })
    }

    /// What a QP on another node connects with to this node's RC QP `qpn`: this node's
    /// addresses, PSN 100 both ways, 1 KiB MTU, retries and RNR retries unbounded by the tests'
    /// pace (7), 4 RDMA READs in flight, every access granted.
    pub fn rc_attrs_towards(&self, qpn: rdma::Qpn) -> rdma::RcConnectAttrs {
        use rdma::Neighbours;
        rdma::RcConnectAttrs {
            remote_qpn: qpn,
            remote_ip: self.v.local_ip(),
            remote_mac: self.v.local_mac(),
            rq_psn: 100,
            sq_psn: 100,
            mtu: 1024,
            udp_sport: 0,
            retry_cnt: 7,
            rnr_retry: 7,
            timeout: 14,
            min_rnr_timer: 1,
            max_rd_atomic: 4,
            max_dest_rd_atomic: 4,
            access: rdma::Access { local_write: true, remote_read: true, remote_write: true },
        }
    }

    /// Device side of one loop turn (driver housekeeping, then adapter + link).
    pub fn poll(&mut self) {
        self.v.poll();
        self.cx.poll();
    }
}

/// A link whose virtual "now" follows a `SimClock` (for `MemLink` delays in tests).
pub struct Clocked(pub emu_roce::MemLink, pub SimClock);

impl Clocked {
    /// Both ends of a fresh in-process link (`impairments`, `seed` as `MemLink::pair`), each
    /// following `clock`.
    pub fn pair(clock: &SimClock, impairments: emu_roce::Impairments, seed: u64) -> (Clocked, Clocked) {
        let (a, b) = emu_roce::MemLink::pair(impairments, seed);
        (Clocked(a, clock.clone()), Clocked(b, clock.clone()))
    }
}

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
