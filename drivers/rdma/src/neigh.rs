//! neigh: a bounded IPv4 → MAC neighbour table with ageing and a learning policy against ARP
//! spoofing, independent of how ARP frames travel (the mlx5 driver feeds it from its raw
//! Ethernet queue; a later network stack can sit behind the same few calls).
//!
//! Learning (stricter than Linux `arp_process` with `arp_accept=0`, which it follows in spirit):
//! - A **reply** teaches only when it answers a request we have outstanding for that address
//!   and is addressed to our IP; it may then change the MAC (the answer to our own question).
//!   Replies to nothing, and gratuitous ARP (sender IP = target IP) for any address, teach nothing.
//! - A **request addressed to our IP** is answered and may add its sender as a new entry
//!   ("heard"); it never changes the MAC of an existing entry (an attacker's request claiming
//!   a known peer's IP cannot redirect it: the entry ages out and is re-resolved by our own
//!   request instead). Requests for other IPs are ignored.
//! - Senders that cannot be a unicast neighbour (0.0.0.0, broadcast, multicast, our own IP;
//!   a zero, broadcast or multicast MAC) are refused.
//! - Static entries ([`NeighTable::add_static`]) never age and are never changed by ARP.
//! Every refused update is counted ([`NeighStats::refused`]).
//!
//! Bounds and ageing: at most `capacity` entries and `max_pending` outstanding requests,
//! allocated once. An entry confirmed (or heard) more than `stale_ns` ago is still used but
//! re-confirmed by a new request; after `expire_ns` it is forgotten. When the table is full, a
//! new entry replaces the oldest "heard" one; an entry confirmed by a reply to our request may
//! also replace the oldest confirmed one; a heard one never replaces a confirmed or static
//! entry (refused and counted instead), so a flood of requests from many addresses cannot
//! push out the neighbours we asked for.

use alloc::vec::Vec;

use crate::verbs::{Ipv4, Mac};

/// ARP operation (RFC 826).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArpOp {
    Request,
    Reply,
}

/// The fields of a received Ethernet/IPv4 ARP packet the table decides on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpPacket {
    pub op: ArpOp,
    /// Sender hardware / protocol address.
    pub sha: Mac,
    pub spa: Ipv4,
    /// Target protocol address.
    pub tpa: Ipv4,
}

/// Table tunables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeighConfig {
    /// Most entries (static included).
    pub capacity: usize,
    /// Most outstanding requests; the oldest is dropped for a new one when full.
    pub max_pending: usize,
    /// Re-send an unanswered request after this long.
    pub retry_ns: u64,
    /// An entry older than this is re-confirmed (a request goes out) while still in use.
    pub stale_ns: u64,
    /// An entry older than this is forgotten.
    pub expire_ns: u64,
}

impl Default for NeighConfig {
    fn default() -> Self {
        // Linux: base_reachable_time 30 s, gc_stale_time 60 s.
        NeighConfig { capacity: 64, max_pending: 16, retry_ns: 100_000_000, stale_ns: 30_000_000_000, expire_ns: 60_000_000_000 }
    }
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NeighStats {
    /// Requests the owner was told to send ([`NeighTable::lookup`] → `send_request`).
    pub requests: u64,
    /// Requests for our IP the owner was told to answer.
    pub replies: u64,
    /// Entries learnt or re-confirmed from replies to our requests.
    pub confirmed: u64,
    /// Entries added from requests addressed to us.
    pub heard: u64,
    /// ARP packets that would have changed the table against the policy (see the module text).
    pub refused: u64,
    /// Entries replaced because the table was full.
    pub evicted: u64,
    /// Entries forgotten after `expire_ns`.
    pub expired: u64,
    /// Outstanding requests dropped because `max_pending` were outstanding.
    pub pending_dropped: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Static,
    /// Learnt from a reply to our request.
    Confirmed,
    /// Learnt from a request addressed to us.
    Heard,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    ip: Ipv4,
    mac: Mac,
    kind: Kind,
    /// When it was learnt or last confirmed.
    at: u64,
}

/// What a lookup tells the owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lookup {
    pub mac: Option<Mac>,
    /// Send an ARP request for the address now (none outstanding, or the last one is due
    /// for a retry, or the entry needs re-confirming).
    pub send_request: bool,
}

/// The table is full of static entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableFull;

/// The neighbour table. All storage is allocated by [`NeighTable::new`].
pub struct NeighTable {
    cfg: NeighConfig,
    entries: Vec<Entry>,
    /// Outstanding requests: (address, when last sent).
    pending: Vec<(Ipv4, u64)>,
    stats: NeighStats,
}

fn unicast_ip(ip: Ipv4) -> bool {
    ip != [0; 4] && ip != [255; 4] && !(224..=239).contains(&ip[0])
}

fn unicast_mac(mac: Mac) -> bool {
    mac != [0; 6] && mac[0] & 1 == 0
}

impl NeighTable {
    pub fn new(cfg: NeighConfig) -> Self {
        let cfg = NeighConfig { capacity: cfg.capacity.max(1), max_pending: cfg.max_pending.max(1), ..cfg };
        NeighTable { cfg, entries: Vec::with_capacity(cfg.capacity), pending: Vec::with_capacity(cfg.max_pending), stats: NeighStats::default() }
    }

    pub fn stats(&self) -> NeighStats {
        self.stats
    }

    /// Entries held (static included).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Outstanding requests.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// A permanent entry (replaces any learnt one for `ip`); fails only when every entry is static.
    pub fn add_static(&mut self, ip: Ipv4, mac: Mac) -> Result<(), TableFull> {
        self.pending.retain(|p| p.0 != ip);
        if let Some(e) = self.entries.iter_mut().find(|e| e.ip == ip) {
            *e = Entry { ip, mac, kind: Kind::Static, at: 0 };
            return Ok(());
        }
        if self.entries.len() >= self.cfg.capacity && !self.evict(|k| k != Kind::Static) {
            return Err(TableFull);
        }
        self.entries.push(Entry { ip, mac, kind: Kind::Static, at: 0 });
        Ok(())
    }

    /// The MAC for `ip`, and whether to send an ARP request for it now (the caller sends it
    /// and that request becomes outstanding).
    pub fn lookup(&mut self, ip: Ipv4, now: u64) -> Lookup {
        let mut mac = None;
        let mut refresh = false;
        if let Some(i) = self.entries.iter().position(|e| e.ip == ip) {
            let e = self.entries[i];
            let age = now.saturating_sub(e.at);
            if e.kind == Kind::Static {
                return Lookup { mac: Some(e.mac), send_request: false };
            }
            if age >= self.cfg.expire_ns {
                self.entries.swap_remove(i);
                self.stats.expired += 1;
            } else {
                mac = Some(e.mac);
                refresh = age >= self.cfg.stale_ns;
            }
        }
        if mac.is_some() && !refresh {
            return Lookup { mac, send_request: false };
        }
        let send_request = match self.pending.iter_mut().find(|p| p.0 == ip) {
            Some(p) if now.saturating_sub(p.1) >= self.cfg.retry_ns => {
                p.1 = now;
                true
            }
            Some(_) => false,
            None => {
                if self.pending.len() >= self.cfg.max_pending {
                    if let Some(oldest) = (0..self.pending.len()).min_by_key(|&i| self.pending[i].1) {
                        self.pending.swap_remove(oldest);
                        self.stats.pending_dropped += 1;
                    }
                }
                self.pending.push((ip, now));
                true
            }
        };
        if send_request {
            self.stats.requests += 1;
        }
        Lookup { mac, send_request }
    }

    /// Forget entries older than `expire_ns` (lookups do it too; call from a slow path).
    pub fn age(&mut self, now: u64) {
        let before = self.entries.len();
        let exp = self.cfg.expire_ns;
        self.entries.retain(|e| e.kind == Kind::Static || now.saturating_sub(e.at) < exp);
        self.stats.expired += (before - self.entries.len()) as u64;
    }

    /// Apply the learning policy to a received ARP packet; true when the owner must answer it
    /// (a request for `my_ip`: reply to `sha`/`spa`).
    pub fn on_arp(&mut self, a: &ArpPacket, my_ip: Ipv4, now: u64) -> bool {
        if a.tpa != my_ip {
            // Not for us. A request for another address is ordinary broadcast traffic; a
            // reply or a gratuitous announcement would be an update we do not take.
            if a.op == ArpOp::Reply || a.spa == a.tpa {
                self.stats.refused += 1;
            }
            return false;
        }
        if !unicast_ip(a.spa) || !unicast_mac(a.sha) || a.spa == my_ip {
            // A sender that cannot be a neighbour (incl. someone claiming our own address).
            self.stats.refused += 1;
            return false;
        }
        match a.op {
            ArpOp::Reply => {
                let Some(p) = self.pending.iter().position(|p| p.0 == a.spa) else {
                    self.stats.refused += 1;
                    return false;
                };
                self.pending.swap_remove(p);
                self.insert(a.spa, a.sha, Kind::Confirmed, now);
                false
            }
            ArpOp::Request => {
                self.stats.replies += 1;
                match self.entries.iter_mut().find(|e| e.ip == a.spa) {
                    Some(e) if e.mac == a.sha && e.kind == Kind::Heard => e.at = now,
                    Some(e) if e.mac == a.sha => {}
                    Some(_) => self.stats.refused += 1,
                    None => self.insert(a.spa, a.sha, Kind::Heard, now),
                }
                true
            }
        }
    }

    fn insert(&mut self, ip: Ipv4, mac: Mac, kind: Kind, now: u64) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.ip == ip) {
            if e.kind == Kind::Static {
                self.stats.refused += 1;
                return;
            }
            *e = Entry { ip, mac, kind, at: now };
            self.stats.confirmed += 1;
            return;
        }
        if self.entries.len() >= self.cfg.capacity {
            let made_room = self.evict(|k| k == Kind::Heard) || (kind == Kind::Confirmed && self.evict(|k| k == Kind::Confirmed));
            if !made_room {
                self.stats.refused += 1;
                return;
            }
        }
        self.entries.push(Entry { ip, mac, kind, at: now });
        match kind {
            Kind::Heard => self.stats.heard += 1,
            _ => self.stats.confirmed += 1,
        }
    }

    /// Remove the oldest entry whose kind `may` allows; false when there is none.
    fn evict(&mut self, may: impl Fn(Kind) -> bool) -> bool {
        let oldest = (0..self.entries.len()).filter(|&i| may(self.entries[i].kind)).min_by_key(|&i| self.entries[i].at);
        match oldest {
            Some(i) => {
                self.entries.swap_remove(i);
                self.stats.evicted += 1;
                true
            }
            None => false,
        }
    }
}
