//! fabric: the simulated Ethernet fabric, a switch forwarding frames by destination MAC between
//! per-node ports. Each port is an `emu_roce::MemLink` pair (node end, switch end) carrying the
//! link impairments (seeded loss, duplication, reordering, delay, jitter); a port taken down
//! drops every frame both ways (link flap, partition). On delivery to a node a RoCEv2 frame may
//! be corrupted (one byte after the BTH flipped), counted per port, so the simulator can check
//! that the receiving engine's ICRC check caught every one.

use std::sync::{Arc, Mutex, MutexGuard};

use emu_roce::link::{MemLinkStats, SplitMix64};
use emu_roce::{Impairments, Link, MemLink};
use testbed::SimClock;

/// Where a corruption may land: after Ethernet (14) + IPv4 (20) + UDP (8) + BTH (12); what
/// follows (extended headers, payload, ICRC) is covered by the ICRC and nothing before it in
/// the engine's parse order can refuse the frame first.
const CORRUPT_FROM: usize = 54;
const ROCEV2_PORT: u16 = 4791;

/// Per-port corruption state shared by the fabric and the node's end.
#[derive(Debug)]
struct TapState {
    /// Probability a RoCEv2 frame delivered to the node is corrupted.
    corrupt: f64,
    /// Frames corrupted on delivery to the node currently on this port.
    corrupted: u64,
    rng: SplitMix64,
}

/// [`TapState`] shared by the fabric and the node's end (which the node's adapter owns, and an
/// adapter may be driven from another thread; the simulator itself is one thread).
#[derive(Debug, Clone)]
struct Tap(Arc<Mutex<TapState>>);

impl Tap {
    fn new(seed: u64) -> Tap {
        Tap(Arc::new(Mutex::new(TapState { corrupt: 0.0, corrupted: 0, rng: SplitMix64::new(seed) })))
    }
    fn lock(&self) -> MutexGuard<'_, TapState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The node's end of its switch port (what the node's emulated ConnectX is given).
pub struct NodeLink {
    end: MemLink,
    clock: SimClock,
    tap: Tap,
}

/// Whether `f` is a RoCEv2 frame long enough to corrupt; returns the end of its IP packet.
fn roce_end(f: &[u8]) -> Option<usize> {
    if f.len() < 42 || f[12..14] != [0x08, 0x00] || f[23] != 17 || u16::from_be_bytes([f[36], f[37]]) != ROCEV2_PORT {
        return None;
    }
    let end = 14 + u16::from_be_bytes([f[16], f[17]]) as usize;
    (end > CORRUPT_FROM && end <= f.len()).then_some(end)
}

impl Link for NodeLink {
    fn send(&mut self, f: &[u8]) {
        self.end.set_now(self.clock.now_ns());
        self.end.send(f)
    }
    fn poll(&mut self) -> Option<Vec<u8>> {
        self.end.set_now(self.clock.now_ns());
        let mut f = self.end.poll()?;
        let mut tap = self.tap.lock();
        let p = tap.corrupt;
        if p > 0.0 {
            if let Some(end) = roce_end(&f) {
                if tap.rng.chance(p) {
                    let at = CORRUPT_FROM + tap.rng.below((end - CORRUPT_FROM) as u64) as usize;
                    f[at] ^= 1 + tap.rng.below(255) as u8;
                    tap.corrupted += 1;
                }
            }
        }
        drop(tap);
        Some(f)
    }
}

struct Port {
    mac: [u8; 6],
    sw: MemLink,
    imp: Impairments,
    down: bool,
    /// A node is on the port (not crashed).
    attached: bool,
    /// IP MTU of the port's switch side: larger frames towards or from the node are dropped
    /// (a switch port configured smaller than the nodes: MTU mismatch).
    mtu: Option<usize>,
    tap: Tap,
    /// Link counters of the port's earlier pairs (replaced when a node is rebuilt).
    past: MemLinkStats,
}

/// The switch and its ports.
pub struct Fabric {
    clock: SimClock,
    ports: Vec<Port>,
    mtu_drops: u64,
    seeds: SplitMix64,
}

const DOWN: Impairments = Impairments { loss: 1.0, duplicate: 0.0, reorder: 0.0, delay_ns: 0, jitter_ns: 0, reorder_delay_ns: 0 };

impl Fabric {
    pub fn new(clock: SimClock, seed: u64) -> Self {
        Fabric { clock, ports: Vec::new(), mtu_drops: 0, seeds: SplitMix64::new(seed) }
    }

    fn pair(&mut self, imp: Impairments) -> (MemLink, MemLink) {
        let (a, b) = MemLink::pair(imp, self.seeds.next_u64());
        let now = self.clock.now_ns();
        a.set_now(now);
        (a, b)
    }

    /// A new port for the node with `mac`; returns its index and the node's end.
    pub fn add_port(&mut self, mac: [u8; 6]) -> (usize, NodeLink) {
        let (node, sw) = self.pair(Impairments::default());
        let tap = Tap::new(self.seeds.next_u64());
        self.ports.push(Port { mac, sw, imp: Impairments::default(), down: false, attached: true, mtu: None, tap: tap.clone(), past: MemLinkStats::default() });
        (self.ports.len() - 1, NodeLink { end: node, clock: self.clock.clone(), tap })
    }

    /// A fresh cable on port `i` for a rebuilt node (frames in flight on the old one are lost
    /// with the node). The port keeps its impairments and state.
    pub fn replace_port(&mut self, i: usize) -> NodeLink {
        let imp = if self.ports[i].down { DOWN } else { self.ports[i].imp };
        let (node, sw) = self.pair(imp);
        let p = &mut self.ports[i];
        let s = p.sw.stats();
        p.past = add_stats(p.past, s);
        p.sw = sw;
        p.attached = true;
        p.tap.lock().corrupted = 0;
        NodeLink { end: node, clock: self.clock.clone(), tap: p.tap.clone() }
    }

    /// The node on port `i` is gone (crashed): frames on its cable are lost, frames for it are
    /// dropped at the switch until a node is back ([`Fabric::replace_port`]).
    pub fn detach(&mut self, i: usize) {
        drop(self.replace_port(i));
        self.ports[i].attached = false;
    }

    /// IP MTU of port `i` (`None`: no limit below the nodes' own).
    pub fn set_mtu(&mut self, i: usize, mtu: Option<usize>) {
        self.ports[i].mtu = mtu;
    }

    /// Frames the switch dropped for exceeding a port's MTU.
    pub fn mtu_drops(&self) -> u64 {
        self.mtu_drops
    }

    /// Impairments of port `i` (both directions).
    pub fn set_impairments(&mut self, i: usize, imp: Impairments) {
        let p = &mut self.ports[i];
        p.imp = imp;
        if !p.down {
            p.sw.set_impairments(imp);
        }
    }

    /// Take port `i` down (every frame dropped both ways) or bring it back up.
    pub fn set_down(&mut self, i: usize, down: bool) {
        let p = &mut self.ports[i];
        p.down = down;
        p.sw.set_impairments(if down { DOWN } else { p.imp });
    }

    /// Corruption probability of RoCEv2 frames delivered on port `i`.
    pub fn set_corrupt(&mut self, i: usize, p: f64) {
        self.ports[i].tap.lock().corrupt = p;
    }

    /// Frames corrupted on delivery to the node now on port `i`.
    pub fn corrupted(&self, i: usize) -> u64 {
        self.ports[i].tap.lock().corrupted
    }

    /// Forward every frame that reached the switch; returns how many.
    pub fn forward(&mut self) -> usize {
        let now = self.clock.now_ns();
        let mut n = 0;
        for i in 0..self.ports.len() {
            self.ports[i].sw.set_now(now);
            while let Some(f) = { let sw = &mut self.ports[i].sw; sw.poll() } {
                n += 1;
                let Some(dst) = f.get(..6) else { continue };
                let fits = |m: Option<usize>| m.is_none_or(|m| f.len() <= m + 14);
                if !fits(self.ports[i].mtu) {
                    self.mtu_drops += 1;
                    continue;
                }
                for j in 0..self.ports.len() {
                    if j != i && self.ports[j].attached && (self.ports[j].mac == dst || dst == [0xff; 6]) {
                        if !fits(self.ports[j].mtu) {
                            self.mtu_drops += 1;
                            continue;
                        }
                        self.ports[j].sw.set_now(now);
                        self.ports[j].sw.send(&f);
                    }
                }
            }
        }
        n
    }

    /// Earliest delivery time of a frame in flight anywhere.
    pub fn next_delivery(&self) -> Option<u64> {
        self.ports.iter().filter_map(|p| p.sw.next_delivery()).min()
    }

    /// Frames in flight anywhere.
    pub fn in_flight(&self) -> usize {
        self.ports.iter().map(|p| p.sw.in_flight()).sum()
    }

    /// Link counters over every port and cable so far.
    pub fn stats(&self) -> MemLinkStats {
        self.ports.iter().fold(MemLinkStats::default(), |a, p| add_stats(add_stats(a, p.past), p.sw.stats()))
    }
}

fn add_stats(a: MemLinkStats, b: MemLinkStats) -> MemLinkStats {
    MemLinkStats {
        sent: a.sent + b.sent,
        delivered: a.delivered + b.delivered,
        dropped: a.dropped + b.dropped,
        duplicated: a.duplicated + b.duplicated,
        reordered: a.reordered + b.reordered,
    }
}
