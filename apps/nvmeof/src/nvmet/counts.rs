//! The core's per-command counts kept apart from its shared tables: each executor (a
//! transport's poll group) counts its commands in an [`IoCounts`] of its own, indexed by the
//! namespace's slot in the core's table, and the core's, subsystems' and namespaces' figures
//! take them in on the slow path: folded ([`Core::fold_io`], e.g. as a group is released) or
//! added on read ([`Core::stats_plus`], [`Core::subsystem_stats_plus`],
//! [`Core::namespace_stats_plus`]).

use alloc::vec::Vec;

use blockdev::BlockDevice;

use super::{Core, CoreStats, GroupIo, NsReport, NsStats, SubsysStats};

impl NsStats {
    /// Add `o`'s counts (not its `failed`, which is the core's alone).
    fn add_counts(&mut self, o: &NsStats) {
        self.reads += o.reads;
        self.writes += o.writes;
        self.bytes_read += o.bytes_read;
        self.bytes_written += o.bytes_written;
        self.flushes_forwarded += o.flushes_forwarded;
        self.fua_reads += o.fua_reads;
        self.fua_writes += o.fua_writes;
        self.via_owner += o.via_owner;
    }
}

/// The per-command counts of the commands one executor ran ([`Core::execute_counted`]): kept
/// in storage the executor owns (a transport's poll group: written with plain adds by that
/// group only, no line shared with another group), not in the core's shared tables; they
/// reach the core's figures on the slow path, folded ([`Core::fold_io`]) or added on read
/// ([`Core::stats_plus`], [`Core::subsystem_stats_plus`], [`Core::namespace_stats_plus`]).
/// Made by [`Core::io_counts`], sized for the core's namespace table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IoCounts {
    /// Commands executed (admin and I/O): [`CoreStats::commands`]' share.
    pub(super) commands: u64,
    /// Per namespace by its slot in the core's table (subsystems in order, each one's
    /// namespaces in order; a subsystem's first is its `ns_base`): reads, writes, their bytes, Flushes,
    /// FUA (`failed` unused). A subsystem's and the core's read/write figures are their sums.
    pub(super) ns: Vec<NsStats>,
}

impl<B: BlockDevice> Core<B> {
    /// Empty per-command counts sized for this core's namespaces, for one executor (a poll
    /// group) to pass to [`Core::execute_counted`]. Slow path (allocates).
    pub fn io_counts(&self) -> IoCounts {
        let n = self.subsystems.iter().map(|s| s.cfg.namespaces.len()).sum();
        IoCounts { commands: 0, ns: alloc::vec![NsStats::default(); n] }
    }

    /// Fold an executor's counts into the core's figures (the core's, its subsystems' and
    /// namespaces') and start them again (e.g. a poll group's, as the group is released).
    pub fn fold_io(&mut self, c: &mut IoCounts) {
        self.stats.commands += core::mem::take(&mut c.commands);
        for s in &mut self.subsystems {
            let Some(part) = c.ns.get_mut(s.ns_base..s.ns_base + s.ns_stats.len()) else { continue };
            for (st, p) in s.ns_stats.iter_mut().zip(part) {
                let p = core::mem::take(p);
                st.add_counts(&p);
                s.stats.reads += p.reads;
                s.stats.writes += p.writes;
                s.stats.bytes_read += p.bytes_read;
                s.stats.bytes_written += p.bytes_written;
                self.stats.reads += p.reads;
                self.stats.writes += p.writes;
            }
        }
    }
    /// The core's counters as folded so far: the commands given to [`Core::execute`] are in;
    /// an executor's own [`IoCounts`] are not until folded (a transport adds its groups':
    /// `RdmaTarget::core_stats`).
    pub fn stats(&self) -> CoreStats {
        self.stats
    }
    /// The core's counters with the executors' counts `extra` added (not folded). Slow path.
    pub fn stats_plus(&self, extra: &[&IoCounts]) -> CoreStats {
        let mut c = self.stats;
        for e in extra {
            c.commands += e.commands;
            for p in &e.ns {
                c.reads += p.reads;
                c.writes += p.writes;
            }
        }
        c
    }
    /// Namespace slot `k`'s counts in `extra`, summed.
    fn extra_ns(extra: &[&IoCounts], k: usize) -> NsStats {
        let mut sum = NsStats::default();
        for e in extra {
            if let Some(p) = e.ns.get(k) {
                sum.add_counts(p);
            }
        }
        sum
    }
    /// Each subsystem's cumulative counters as folded so far, with its NQN.
    pub fn subsystem_stats(&self) -> alloc::vec::IntoIter<(&str, SubsysStats)> {
        self.subsystem_stats_plus(&[]).into_iter()
    }
    /// Each subsystem's cumulative counters with the executors' counts `extra` added, with its
    /// NQN. Slow path.
    pub fn subsystem_stats_plus(&self, extra: &[&IoCounts]) -> Vec<(&str, SubsysStats)> {
        self.subsystems
            .iter()
            .map(|s| {
                let mut st = s.stats;
                for k in s.ns_base..s.ns_base + s.ns_stats.len() {
                    let p = Self::extra_ns(extra, k);
                    st.reads += p.reads;
                    st.writes += p.writes;
                    st.bytes_read += p.bytes_read;
                    st.bytes_written += p.bytes_written;
                }
                (s.cfg.nqn.as_str(), st)
            })
            .collect()
    }
    /// Every namespace with its counters as folded so far (slow path: the metrics endpoint).
    pub fn namespace_stats(&self) -> alloc::vec::IntoIter<NsReport<'_>> {
        self.namespace_stats_plus(&[], &[]).into_iter()
    }
    /// Every namespace with its counters, the executors' counts `extra` added, and its device
    /// latency with the poll groups' handles' (`ios`) merged in. Slow path.
    pub fn namespace_stats_plus(&self, extra: &[&IoCounts], ios: &[&GroupIo<B>]) -> Vec<NsReport<'_>> {
        self.subsystems
            .iter()
            .flat_map(|s| {
                s.cfg.namespaces.iter().zip(&s.ns_stats).zip(&s.ns_lat).enumerate().map(move |(i, ((n, st), lat))| {
                    let (device_latency, in_flight) = Self::folded_latency(lat.as_ref(), ios, s.ns_base + i);
                    let mut stats = *st;
                    stats.add_counts(&Self::extra_ns(extra, s.ns_base + i));
                    let dev = Self::folded_dev(n.dev.counters(), s.ns_dev_released[i], ios, s.ns_base + i);
                    NsReport { subnqn: s.cfg.nqn.as_str(), nsid: n.nsid, volatile_write_cache: n.dev.volatile_write_cache(), stats, dev, device_latency, in_flight }
                })
            })
            .collect()
    }
}
