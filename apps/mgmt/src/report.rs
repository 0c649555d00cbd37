//! report: what the appliance's parts already count, as Prometheus families and as the HTML
//! status page: the NVMe-oF target ([`nvmeof::nvmet::service::TargetService`]), the adapter
//! ([`mlx5::Mlx5Verbs`]) and the management stack itself; and the port's subsystem links
//! ([`port_links`]). Read from the slow path only (an HTTP request), never from the data path.

use alloc::format;
use core::fmt::{self, Write};

use blockdev::BlockDevice;
use hal::{Hal, Mmio};
use nvmeof::bench::Histogram;
use nvmeof::nvmet::service::TargetService;
use rdma::{GroupVerbs, Neighbours};

use crate::prom::{Exposition, Kind, LATENCY_BOUNDS_S};
use crate::http::{Answer, Page, Rendered};
use crate::stack::MgmtStats;

/// A nanosecond histogram as cumulative Prometheus buckets (seconds). The source buckets are
/// log-linear (≤ 3.2 % wide); a sample counts under the first bound its bucket lies below.
fn write_hist_ns(e: &mut Exposition<'_>, name: &'static str, help: &str, h: &Histogram) {
    let (cum, sum_s) = cumulative_s(h);
    e.family(name, Kind::Histogram, help).histogram(&[], LATENCY_BOUNDS_S.iter().copied().zip(cum), sum_s, h.count());
}

/// A nanosecond histogram as Prometheus buckets: cumulative counts at [`LATENCY_BOUNDS_S`],
/// and the sum in seconds.
fn cumulative_s(h: &Histogram) -> ([u64; LATENCY_BOUNDS_S.len()], f64) {
    let mut cum = [0u64; LATENCY_BOUNDS_S.len()];
    for (_lo, hi, n) in h.buckets() {
        let hi_s = hi as f64 / 1e9;
        for (c, &b) in cum.iter_mut().zip(LATENCY_BOUNDS_S.iter()) {
            if hi_s <= b {
                *c += n;
            }
        }
    }
    // The histogram keeps its exact mean; mean × count is its sum to within `count` ns.
    (cum, h.mean() as f64 * h.count() as f64 / 1e9)
}

/// The NVMe-oF target's families (`nvmf_*`).
pub fn target_metrics<V: GroupVerbs, B: BlockDevice>(e: &mut Exposition<'_>, svc: &TargetService<V, B>) {
    let core = &svc.target.core;
    let (c, t, s, b, a) = (svc.target.core_stats(), svc.target.stats(), svc.stats, core.bound_stats(), core.auth.stats);
    e.single("nvmf_connections", Kind::Gauge, "RDMA queues (connections) open now.", svc.connections());
    e.single("nvmf_controllers", Kind::Gauge, "Controllers live now.", core.live_ctrls());
    e.single("nvmf_in_flight", Kind::Gauge, "Block I/Os submitted to namespaces (their stores and the poll groups' handles) and not yet completed.", svc.target.block_inflight_count());
    e.single("nvmf_controllers_created_total", Kind::Counter, "Controllers created (admitted Connect on an admin queue).", c.ctrls_created);
    e.single("nvmf_commands_total", Kind::Counter, "NVMe commands executed (admin and I/O).", c.commands);
    e.single("nvmf_command_errors_total", Kind::Counter, "Commands completed with an error status.", c.errors);
    e.family("nvmf_io_commands_total", Kind::Counter, "I/O commands by direction.").sample(&[("op", "read")], c.reads).sample(&[("op", "write")], c.writes);
    e.single("nvmf_keep_alive_expired_total", Kind::Counter, "Controllers torn down because no Keep Alive came within KATO.", c.ka_expired);
    e.single("nvmf_connects_refused_total", Kind::Counter, "Connect commands refused (host not allowed, bad parameters, bounds).", c.connects_refused);
    e.family("nvmf_bound_refusals_total", Kind::Counter, "Refusals at a resource bound, by bound.")
        .sample(&[("reason", "ctrls")], b.ctrls)
        .sample(&[("reason", "ctrls_per_host")], b.ctrls_per_host)
        .sample(&[("reason", "unadmitted_per_source")], b.unadmitted_per_source)
        .sample(&[("reason", "unadmitted")], b.unadmitted)
        .sample(&[("reason", "queues")], b.queues)
        .sample(&[("reason", "memory")], b.memory)
        .sample(&[("reason", "connect_deadline")], b.connect_deadline)
        .sample(&[("reason", "foreign_queue")], b.foreign_queue);
    e.family("nvmf_cm_requests_total", Kind::Counter, "RDMA CM connection requests, by outcome.")
        .sample(&[("result", "accepted")], s.accepted)
        .sample(&[("result", "rejected")], s.rejected)
        .sample(&[("result", "cm_error")], s.cm_errors);
    e.family("nvmf_queues_closed_total", Kind::Counter, "Queues closed, by side.").sample(&[("by", "peer")], s.closed_by_peer).sample(&[("by", "target")], s.closed_by_target);
    e.family("nvmf_auth_total", Kind::Counter, "DH-HMAC-CHAP transactions, by outcome.")
        .sample(&[("result", "succeeded")], a.succeeded)
        .sample(&[("result", "failed")], a.failed)
        .sample(&[("result", "refused_command")], a.refused_cmds);
    e.single("nvmf_capsules_total", Kind::Counter, "Command capsules received.", t.capsules);
    e.single("nvmf_bad_capsules_total", Kind::Counter, "Capsules refused as malformed.", t.bad_capsules);
    e.family("nvmf_responses_total", Kind::Counter, "Response capsules sent, by status.").sample(&[("status", "success")], t.responses.saturating_sub(t.error_responses)).sample(&[("status", "error")], t.error_responses);
    e.family("nvmf_rdma_operations_total", Kind::Counter, "RDMA data transfers the target posted.").sample(&[("op", "read")], t.rdma_reads).sample(&[("op", "write")], t.rdma_writes);
    e.single("nvmf_work_completion_errors_total", Kind::Counter, "RDMA work completions with an error status.", t.wc_errors);
    e.single("nvmf_qp_errors_total", Kind::Counter, "Queues closed because the adapter reported their QP in error on its own.", t.qp_errors);
    per_poll_group(e, &svc.target);
    per_queue(e, &svc.target);
    write_hist_ns(e, "nvmf_turnaround_seconds", "Target turnaround per command: receive completion seen to response posted.", &svc.target.turnaround());
    let mut f = e.family("nvmf_subsystem_namespaces", Kind::Gauge, "Namespaces per subsystem.");
    for sub in core.subsystems() {
        f.sample(&[("subnqn", sub.nqn.as_str())], sub.namespaces.len());
    }
    per_subsystem_and_controller(e, &svc.target);
    per_namespace(e, &svc.target);
    let mut f = e.family("nvmf_command_errors_by_status_total", Kind::Counter, "Commands completed with an error, by NVMe status (SCT, SC in hex).");
    for (sct, sc, n) in c.by_status.iter() {
        let (sct, sc) = (format!("{sct:#x}"), format!("{sc:#04x}"));
        f.sample(&[("sct", sct.as_str()), ("sc", sc.as_str())], n);
    }
    if c.by_status.other > 0 {
        f.sample(&[("sct", "other"), ("sc", "other")], c.by_status.other);
    }
}

fn queue_labels<'a>(c: &'a str, qid: &'a str, g: &'a str) -> [(&'static str, &'a str); 3] {
    [("cntlid", c), ("qid", qid), ("group", g)]
}

/// Per open queue (controller, queue ID, poll group): capsules received, slots busy, depth.
fn per_queue<V: rdma::GroupVerbs, B: BlockDevice>(e: &mut Exposition<'_>, t: &nvmeof::nvmet::rdma::RdmaTarget<V, B>) {
    let qs: alloc::vec::Vec<_> = t
        .queue_reports()
        .map(|q| (q.cntlid.map_or_else(|| "none".into(), |c| format!("{c}")), format!("{}", q.qid), format!("{}", q.group), q))
        .collect();
    let mut f = e.family("nvmf_queue_capsules_total", Kind::Counter, "Command capsules received per open queue.");
    for (c, qid, g, q) in &qs {
        f.sample(&queue_labels(c, qid, g), q.capsules);
    }
    let mut f = e.family("nvmf_queue_bytes_total", Kind::Counter, "Data bytes of the Reads and Writes each open queue answered with success, by direction.");
    for (c, qid, g, q) in &qs {
        let [a, b, d] = queue_labels(c, qid, g);
        f.sample(&[a, b, d, ("op", "read")], q.bytes_read).sample(&[a, b, d, ("op", "write")], q.bytes_written);
    }
    let mut f = e.family("nvmf_queue_errors_total", Kind::Counter, "Commands each open queue answered with an error status.");
    for (c, qid, g, q) in &qs {
        f.sample(&queue_labels(c, qid, g), q.errors);
    }
    let mut f = e.family("nvmf_queue_in_flight", Kind::Gauge, "Commands outstanding per open queue (slots busy).");
    for (c, qid, g, q) in &qs {
        f.sample(&queue_labels(c, qid, g), q.busy);
    }
    let mut f = e.family("nvmf_queue_depth", Kind::Gauge, "Slots per open queue (commands it may have outstanding).");
    for (c, qid, g, q) in &qs {
        f.sample(&queue_labels(c, qid, g), q.depth);
    }
}

/// Per poll group (SPDK's model: one CQ and one SRQ per group): queues, capsules, completions,
/// SRQ re-posts and limit events, queue-depth overruns (cumulative over the groups' lives).
fn per_poll_group<V: rdma::GroupVerbs, B: BlockDevice>(e: &mut Exposition<'_>, t: &nvmeof::nvmet::rdma::RdmaTarget<V, B>) {
    let gs: alloc::vec::Vec<_> = (0..t.poll_groups()).map(|g| (format!("{g}"), t.group_stats(g))).collect();
    type Get = fn(&nvmeof::nvmet::rdma::GroupStats) -> u64;
    let families: [(&'static str, Kind, &str, Get); 7] = [
        ("nvmf_poll_group_queues", Kind::Gauge, "Queues (connections) in the poll group now.", |s| s.queues_live),
        ("nvmf_poll_group_queues_assigned_total", Kind::Counter, "Queues handed to the poll group.", |s| s.queues_assigned),
        ("nvmf_poll_group_capsules_total", Kind::Counter, "Command capsules received through the poll group's SRQ.", |s| s.capsules),
        ("nvmf_poll_group_completions_total", Kind::Counter, "Work completions polled from the poll group's CQ.", |s| s.completions),
        ("nvmf_poll_group_srq_reposts_total", Kind::Counter, "Receive buffers re-posted to the poll group's SRQ.", |s| s.srq_reposts),
        ("nvmf_poll_group_srq_limit_events_total", Kind::Counter, "Times the poll group's SRQ ran below its low-water mark.", |s| s.srq_limit_events),
        (
            "nvmf_poll_group_slot_overruns_total",
            Kind::Counter,
            "Capsules that found every slot of their queue busy (host beyond its queue depth; queue closed).",
            |s| s.slot_overruns,
        ),
    ];
    for (name, kind, help, get) in families {
        let mut f = e.family(name, kind, help);
        for (g, s) in &gs {
            f.sample(&[("group", g.as_str())], get(s));
        }
    }
}

/// Per namespace: its store's volatile write cache, host Flushes forwarded, the store's own
/// Flushes (issued to the drive, completed by it), FUA commands, a memory store's CPU-copied
/// I/Os and bytes, device errors.
fn per_namespace<V: GroupVerbs, B: BlockDevice>(e: &mut Exposition<'_>, t: &nvmeof::nvmet::rdma::RdmaTarget<V, B>) {
    let ids: alloc::vec::Vec<_> = t.namespace_stats().map(|n| (n.subnqn, format!("{}", n.nsid), n)).collect();
    let mut f = e.family("nvmf_namespace_volatile_write_cache", Kind::Gauge, "1 when the namespace's store has a volatile write cache (Flush needed).");
    for (nqn, nsid, n) in &ids {
        f.sample(&[("subnqn", *nqn), ("nsid", nsid.as_str())], n.volatile_write_cache as u8);
    }
    let mut f = e.family("nvmf_namespace_failed", Kind::Gauge, "1 when the namespace is out of service because its store failed.");
    for (nqn, nsid, n) in &ids {
        f.sample(&[("subnqn", *nqn), ("nsid", nsid.as_str())], n.stats.failed as u8);
    }
    let mut f = e.family("nvmf_namespace_io_total", Kind::Counter, "Reads and Writes per namespace.");
    for (nqn, nsid, n) in &ids {
        let l = |op| [("subnqn", *nqn), ("nsid", nsid.as_str()), ("op", op)];
        f.sample(&l("read"), n.stats.reads).sample(&l("write"), n.stats.writes);
    }
    let mut f = e.family("nvmf_namespace_bytes_total", Kind::Counter, "Bytes read and written per namespace.");
    for (nqn, nsid, n) in &ids {
        let l = |op| [("subnqn", *nqn), ("nsid", nsid.as_str()), ("op", op)];
        f.sample(&l("read"), n.stats.bytes_read).sample(&l("write"), n.stats.bytes_written);
    }
    let mut f = e.family("nvmf_namespace_in_flight", Kind::Gauge, "I/Os at the namespace's store now (while device latency is timed).");
    for (nqn, nsid, n) in &ids {
        if let Some(k) = n.in_flight {
            f.sample(&[("subnqn", *nqn), ("nsid", nsid.as_str())], k);
        }
    }
    let mut f = e.family("nvmf_namespace_host_flushes_total", Kind::Counter, "Host Flush commands forwarded to the namespace's store.");
    for (nqn, nsid, n) in &ids {
        f.sample(&[("subnqn", *nqn), ("nsid", nsid.as_str())], n.stats.flushes_forwarded);
    }
    let mut f = e.family(
        "nvmf_namespace_device_flushes_total",
        Kind::Counter,
        "Flushes at the namespace's drive: drive Flush commands issued and completed, and Flushes joined to one not yet issued (served by it).",
    );
    for (nqn, nsid, n) in &ids {
        let l = |st| [("subnqn", *nqn), ("nsid", nsid.as_str()), ("state", st)];
        f.sample(&l("issued"), n.dev.flushes_issued).sample(&l("completed"), n.dev.flushes_completed).sample(&l("joined"), n.dev.flushes_joined);
    }
    let mut f = e.family(
        "nvmf_namespace_io_via_owner_total",
        Kind::Counter,
        "I/O commands of poll groups without a handle of the namespace (its drive granted too few I/O queues), run on its store through the controller owner.",
    );
    for (nqn, nsid, n) in &ids {
        f.sample(&[("subnqn", *nqn), ("nsid", nsid.as_str())], n.stats.via_owner);
    }
    let mut f = e.family("nvmf_namespace_fua_total", Kind::Counter, "Host reads and writes with Force Unit Access, by direction.");
    for (nqn, nsid, n) in &ids {
        let l = |op| [("subnqn", *nqn), ("nsid", nsid.as_str()), ("op", op)];
        f.sample(&l("read"), n.stats.fua_reads).sample(&l("write"), n.stats.fua_writes);
    }
    let mut f = e.family("nvmf_namespace_copied_io_total", Kind::Counter, "Reads and Writes whose data the namespace's memory store moved by a CPU copy (zero-copy transfers move none).");
    for (nqn, nsid, n) in &ids {
        f.sample(&[("subnqn", *nqn), ("nsid", nsid.as_str())], n.dev.copied);
    }
    let mut f = e.family("nvmf_namespace_copied_bytes_total", Kind::Counter, "Bytes the namespace's memory store moved by CPU copies.");
    for (nqn, nsid, n) in &ids {
        f.sample(&[("subnqn", *nqn), ("nsid", nsid.as_str())], n.dev.copied_bytes);
    }
    let mut f = e.family("nvmf_namespace_device_errors_total", Kind::Counter, "I/O the namespace's drive completed with an error status.");
    for (nqn, nsid, n) in &ids {
        f.sample(&[("subnqn", *nqn), ("nsid", nsid.as_str())], n.dev.device_errors);
    }
    let mut f = e.family(
        "nvmf_namespace_device_latency_seconds",
        Kind::Histogram,
        "Per namespace: time from handing an I/O to the namespace's store to its completion (the drive's latency as the target sees it).",
    );
    for (nqn, nsid, n) in &ids {
        if let Some(h) = &n.device_latency {
            let (buckets, sum_s) = cumulative_s(h);
            f.histogram(&[("subnqn", *nqn), ("nsid", nsid.as_str())], LATENCY_BOUNDS_S.iter().copied().zip(buckets), sum_s, h.count());
        }
    }
}

/// Per subsystem (cumulative) and per live controller (host NQN, controller ID) series.
fn sub<'a>(c: &nvmeof::nvmet::CtrlReport<'a>) -> &'a str {
    c.subnqn.unwrap_or(nvmeof::wire::DISCOVERY_NQN)
}

fn per_subsystem_and_controller<V: GroupVerbs, B: BlockDevice>(e: &mut Exposition<'_>, t: &nvmeof::nvmet::rdma::RdmaTarget<V, B>) {
    let core = &t.core;
    let mut f = e.family("nvmf_subsystem_io_total", Kind::Counter, "I/O commands per subsystem, by direction.");
    for (nqn, st) in t.subsystem_stats() {
        f.sample(&[("subnqn", nqn), ("op", "read")], st.reads).sample(&[("subnqn", nqn), ("op", "write")], st.writes);
    }
    let mut f = e.family("nvmf_subsystem_bytes_total", Kind::Counter, "Bytes moved per subsystem, by direction.");
    for (nqn, st) in t.subsystem_stats() {
        f.sample(&[("subnqn", nqn), ("op", "read")], st.bytes_read).sample(&[("subnqn", nqn), ("op", "write")], st.bytes_written);
    }
    let mut f = e.family("nvmf_subsystem_errors_total", Kind::Counter, "Commands completed with an error per subsystem.");
    for (nqn, st) in t.subsystem_stats() {
        f.sample(&[("subnqn", nqn)], st.errors);
    }
    let mut f = e.family("nvmf_subsystem_errors_by_status_total", Kind::Counter, "Commands completed with an error per subsystem, by NVMe status (SCT, SC in hex).");
    for (nqn, st) in t.subsystem_stats() {
        for (sct, sc, n) in st.by_status.iter() {
            let (sct, sc) = (format!("{sct:#x}"), format!("{sc:#04x}"));
            f.sample(&[("subnqn", nqn), ("sct", sct.as_str()), ("sc", sc.as_str())], n);
        }
        if st.by_status.other > 0 {
            f.sample(&[("subnqn", nqn), ("sct", "other"), ("sc", "other")], st.by_status.other);
        }
    }
    let id = |c: &nvmeof::nvmet::CtrlReport<'_>| format!("{}", c.cntlid);
    let mut f = e.family("nvmf_controller_commands_total", Kind::Counter, "Commands per live controller (host NQN, controller ID).");
    for c in core.controllers() {
        let cntlid = id(&c);
        f.sample(&[("subnqn", sub(&c)), ("hostnqn", c.hostnqn), ("cntlid", cntlid.as_str())], c.commands);
    }
    let mut f = e.family("nvmf_controller_io_total", Kind::Counter, "I/O commands per live controller, by direction.");
    for c in core.controllers() {
        let cntlid = id(&c);
        let l = |op| [("subnqn", sub(&c)), ("hostnqn", c.hostnqn), ("cntlid", cntlid.as_str()), ("op", op)];
        f.sample(&l("read"), c.reads).sample(&l("write"), c.writes);
    }
    let mut f = e.family("nvmf_controller_bytes_total", Kind::Counter, "Bytes moved per live controller, by direction.");
    for c in core.controllers() {
        let cntlid = id(&c);
        let l = |op| [("subnqn", sub(&c)), ("hostnqn", c.hostnqn), ("cntlid", cntlid.as_str()), ("op", op)];
        f.sample(&l("read"), c.bytes_read).sample(&l("write"), c.bytes_written);
    }
    let mut f = e.family("nvmf_controller_errors_total", Kind::Counter, "Commands completed with an error per live controller.");
    for c in core.controllers() {
        let cntlid = id(&c);
        f.sample(&[("subnqn", sub(&c)), ("hostnqn", c.hostnqn), ("cntlid", cntlid.as_str())], c.errors);
    }
    let mut f = e.family("nvmf_controller_io_queues", Kind::Gauge, "I/O queues granted per live controller.");
    for c in core.controllers() {
        let cntlid = id(&c);
        f.sample(&[("subnqn", sub(&c)), ("hostnqn", c.hostnqn), ("cntlid", cntlid.as_str())], c.io_queues);
    }
}

/// The adapter's families (`mlx5_*`) and the neighbour table's (`neigh_*`). `groups`: the
/// queue groups live now (their owner, the target, holds them: `RdmaTarget::group_objects`);
/// their counts and those of groups released before are the `mlx5_group_*` series, by the
/// group's slot on the device, and are in the adapter's totals.
pub fn adapter_metrics<'a, H: Hal, M: Mmio + 'a>(e: &mut Exposition<'_>, v: &mlx5::Mlx5Verbs<H, M>, groups: impl Iterator<Item = &'a mlx5::QueueGroup<H::Dma, M>>)
where
    H::Dma: 'a,
{
    let d = v.stats();
    let gs = v.group_stats(groups);
    let all = gs.iter().fold(mlx5::GroupStats::default(), |a, g| a.plus(*g));
    let link = match v.link_up() {
        Some(true) => 1,
        Some(false) => 0,
        None => -1,
    };
    e.single("mlx5_link_up", Kind::Gauge, "Port state: 1 up, 0 down, -1 not yet known.", link);
    let h = v.health_report();
    e.single("mlx5_health_syndrome", Kind::Gauge, "Firmware health syndrome (0: healthy).", h.synd);
    e.single("mlx5_health_heartbeat", Kind::Gauge, "Firmware health counter (advances while the firmware runs).", h.counter);
    e.single("mlx5_firmware_commands_total", Kind::Counter, "Firmware commands issued.", d.commands);
    let ce = v.command_errors();
    e.family("mlx5_firmware_command_errors_total", Kind::Counter, "Firmware commands that failed: refused with a status, delivery error, abandoned (timeout or dead firmware).")
        .sample(&[("kind", "refused")], ce.refused)
        .sample(&[("kind", "delivery")], ce.delivery)
        .sample(&[("kind", "abandoned")], ce.abandoned);
    let mtu = v.port_mtu();
    e.family("mlx5_port_mtu_bytes", Kind::Gauge, "Port MTU (PMTU register): operational, administrative, largest the port takes.")
        .sample(&[("kind", "oper")], mtu.oper)
        .sample(&[("kind", "admin")], mtu.admin)
        .sample(&[("kind", "max")], mtu.max);
    e.single("mlx5_firmware_pages", Kind::Gauge, "Pages given to the firmware and not reclaimed.", v.pages_held());
    e.single("mlx5_error_events_total", Kind::Counter, "Asynchronous error events (CQ/QP/port errors).", d.error_events);
    e.single("mlx5_srq_last_wqe_events_total", Kind::Counter, "SRQ_LAST_WQE events: a QP on a shared receive queue in error with its last WQE consumed, as on every close of such a QP (not an error).", d.srq_last_wqe_events);
    e.single("mlx5_async_events_dropped_total", Kind::Counter, "Asynchronous events dropped with 64 unread: routine ones (SRQ limit, last WQE) first, an error event only when all kept are errors.", d.events_dropped);
    e.single("mlx5_bad_cqes_total", Kind::Counter, "CQEs naming an unknown QP or a WQE not outstanding (dropped), on every queue (the device's own and every queue group's).", d.bad_cqes + all.bad_cqes);
    e.single("mlx5_send_doorbells_total", Kind::Counter, "Send doorbells rung, on every queue: the device's own (mlx5_device_send_doorbells_total) and every queue group's (mlx5_group_send_doorbells_total).", d.sq_doorbells + all.sq_doorbells);
    e.single("mlx5_device_send_doorbells_total", Kind::Counter, "Send doorbells rung on the device's own queues (GSI, raw Ethernet, queues outside queue groups).", d.sq_doorbells);
    group_families(e, &gs);
    e.single("mlx5_queue_pairs", Kind::Gauge, "Queue pairs live.", v.live_qps());
    let qc = v.queue_counters();
    if !qc.is_empty() {
        let mut f = e.family(
            "mlx5_roce_qp_events_total",
            Kind::Counter,
            "The adapter's RoCE queue counters over every QP (QUERY_Q_COUNTER; mlx5_ifc.h names: out_of_sequence, duplicate_request, packet_seq_err, rnr_nak_retry_err, local_ack_timeout_err, ...), as of this page.",
        );
        for (name, val) in qc {
            f.sample(&[("event", name)], val);
        }
    }
    if let Some(r) = v.raw_stats() {
        e.family("mlx5_raw_frames_total", Kind::Counter, "Frames on the raw Ethernet queue (ARP, management).").sample(&[("dir", "rx")], r.rx_frames).sample(&[("dir", "tx")], r.tx_frames);
        e.single("mlx5_raw_rx_errors_total", Kind::Counter, "Raw receive completions with an error.", r.rx_errors);
    }
    if let Some((_q, dropped, long)) = v.mgmt_tap_stats() {
        e.family("mgmt_frames_dropped_total", Kind::Counter, "Frames for the management stack dropped before it saw them.").sample(&[("reason", "queue_full")], dropped).sample(&[("reason", "too_long")], long);
    }
    let n = v.neigh_stats();
    e.single("neigh_entries", Kind::Gauge, "RoCE neighbour table entries.", v.neigh_len());
    e.family("neigh_events_total", Kind::Counter, "RoCE neighbour table events.")
        .sample(&[("event", "request_sent")], n.requests)
        .sample(&[("event", "confirmed")], n.confirmed)
        .sample(&[("event", "heard")], n.heard)
        .sample(&[("event", "refused")], n.refused)
        .sample(&[("event", "evicted")], n.evicted)
        .sample(&[("event", "expired")], n.expired);
}

/// Per queue group of the adapter (a poll group's data path, `mlx5::QueueGroup`), by its slot.
fn group_families(e: &mut Exposition<'_>, gs: &[mlx5::GroupStats]) {
    let slots: alloc::vec::Vec<_> = (0..gs.len()).map(|g| format!("{g}")).collect();
    type Get = fn(&mlx5::GroupStats) -> u64;
    let families: [(&'static str, &str, Get); 6] = [
        ("mlx5_group_send_doorbells_total", "Send doorbells the queue group rang on its own UAR page.", |s| s.sq_doorbells),
        ("mlx5_group_send_wqes_total", "Send WQEs the queue group wrote (a doorbell may announce several).", |s| s.send_wqes),
        ("mlx5_group_completions_total", "Completions polled from the queue group's CQ (flushes not included).", |s| s.completions),
        ("mlx5_group_bad_cqes_total", "CQEs of the queue group naming none of its QPs or no outstanding work (dropped).", |s| s.bad_cqes),
        ("mlx5_group_cqes_cleaned_total", "CQEs of destroyed QPs taken out of the queue group's CQ.", |s| s.cqes_cleaned),
        ("mlx5_group_flushed_total", "Work requests of the queue group completed with a flush error (device or CQ failed).", |s| s.flushed_on_failure),
    ];
    for (name, help, get) in families {
        let mut f = e.family(name, Kind::Counter, help);
        for (g, s) in slots.iter().zip(gs) {
            f.sample(&[("group", g.as_str())], get(s));
        }
    }
}

/// The management stack's own families (`mgmt_*`).
pub fn mgmt_metrics(e: &mut Exposition<'_>, m: &MgmtStats, open: usize) {
    e.family("mgmt_frames_total", Kind::Counter, "Frames the management stack took and gave.").sample(&[("dir", "rx")], m.rx_frames).sample(&[("dir", "tx")], m.tx_frames);
    e.single("mgmt_tx_dropped_total", Kind::Counter, "Frames the port refused (queue full).", m.tx_dropped);
    e.single("mgmt_http_connections", Kind::Gauge, "HTTP connections open now.", open);
    e.single("mgmt_http_connections_total", Kind::Counter, "HTTP connections accepted.", m.http.connections);
    e.family("mgmt_http_requests_total", Kind::Counter, "HTTP requests, by page or outcome.")
        .sample(&[("page", "metrics")], m.http.metrics_requests)
        .sample(&[("page", "status")], m.http.status_requests)
        .sample(&[("page", "ports")], m.http.port_requests)
        .sample(&[("page", "client_error")], m.http.client_errors)
        .sample(&[("page", "too_large")], m.http.too_large);
    e.single("mgmt_http_timeouts_total", Kind::Counter, "HTTP connections aborted at the connection deadline.", m.http.timeouts);
}

/// A port's subsystem links, the operator's side of Linux nvmet's configfs symlinks
/// `ports/P/subsystems/NQN`: list them ([`Page::Links`]: the linked NQNs, one a line), link
/// one or unlink it ([`Page::Link`]: [`nvmeof::nvmet::rdma::RdmaTarget::link_subsystem`],
/// `unlink_subsystem`, which deletes the controllers that came in through that port and closes
/// their queues); the ports are the configuration's (`TargetConfig::ports`), each listening on
/// its own service ID.
/// Other pages are not this function's: answered 404.
pub fn port_links<V: GroupVerbs, B: BlockDevice>(w: &mut dyn Write, page: Page<'_>, verbs: &mut V, svc: &mut TargetService<V, B>) -> Rendered {
    let port = match page {
        Page::Links { port } | Page::Link { port, .. } => port,
        Page::Metrics | Page::Status => return Ok(Answer::NotFound),
    };
    if !svc.target.core.config().ports.iter().any(|p| p.portid == port) {
        writeln!(w, "no port {port}")?;
        return Ok(Answer::NotFound);
    }
    let Page::Link { nqn, link, .. } = page else {
        let core = &svc.target.core;
        for s in core.subsystems().filter(|s| core.subsystem_linked(port, &s.nqn) == Some(true)) {
            writeln!(w, "{}", s.nqn)?;
        }
        return Ok(Answer::Found);
    };
    let found = if link { svc.target.link_subsystem(port, nqn) } else { svc.target.unlink_subsystem(verbs, port, nqn) };
    if !found {
        writeln!(w, "no subsystem {nqn}")?;
        return Ok(Answer::NotFound);
    }
    log::info!("mgmt: {nqn} {} port {port} by a management request", if link { "linked to" } else { "unlinked from" });
    writeln!(w, "{nqn} {} port {port}", if link { "linked to" } else { "unlinked from" })?;
    Ok(Answer::Found)
}

/// Memory figures the platform knows (heap and DMA pool, bytes).
#[derive(Debug, Clone, Copy, Default)]
pub struct Memory {
    pub heap_used: u64,
    pub heap_free: u64,
    pub dma_used: u64,
    pub dma_free: u64,
}

pub fn memory_metrics(e: &mut Exposition<'_>, m: &Memory) {
    e.family("appliance_memory_bytes", Kind::Gauge, "Heap and DMA pool, used and free.")
        .sample(&[("pool", "heap"), ("state", "used")], m.heap_used)
        .sample(&[("pool", "heap"), ("state", "free")], m.heap_free)
        .sample(&[("pool", "dma"), ("state", "used")], m.dma_used)
        .sample(&[("pool", "dma"), ("state", "free")], m.dma_free);
}

fn html_escape(w: &mut dyn Write, s: &str) -> fmt::Result {
    for c in s.chars() {
        match c {
            '<' => w.write_str("&lt;")?,
            '>' => w.write_str("&gt;")?,
            '&' => w.write_str("&amp;")?,
            '"' => w.write_str("&quot;")?,
            c => w.write_char(c)?,
        }
    }
    Ok(())
}

/// The one-page HTML status: identity, uptime, link, subsystems with their namespaces and
/// allowed hosts, connections and controllers, command counts.
pub fn status_page<H: Hal, M: Mmio, V: GroupVerbs, B: BlockDevice>(w: &mut dyn Write, name: &str, uptime_s: u64, v: &mlx5::Mlx5Verbs<H, M>, svc: &TargetService<V, B>) -> fmt::Result {
    let ip = v.local_ip();
    let mac = v.local_mac();
    let link = match v.link_up() {
        Some(true) => "up",
        Some(false) => "down",
        None => "unknown",
    };
    let core = &svc.target.core;
    w.write_str("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>")?;
    html_escape(w, name)?;
    w.write_str("</title></head><body>\n<h1>")?;
    html_escape(w, name)?;
    writeln!(w, "</h1>\n<p>uptime {}d {:02}:{:02}:{:02} &middot; <a href=\"/metrics\">metrics</a></p>", uptime_s / 86400, uptime_s / 3600 % 24, uptime_s / 60 % 60, uptime_s % 60)?;
    writeln!(
        w,
        "<h2>Adapter</h2>\n<table><tr><td>address</td><td>{}.{}.{}.{}</td></tr><tr><td>MAC</td><td>{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}</td></tr><tr><td>link</td><td>{link}</td></tr><tr><td>health syndrome</td><td>{}</td></tr></table>",
        ip[0], ip[1], ip[2], ip[3], mac[0], mac[1], mac[2], mac[3], mac[4], mac[5], v.health_report().synd
    )?;
    w.write_str("<h2>Subsystems</h2>\n<table><tr><th>NQN</th><th>namespaces</th><th>hosts</th></tr>\n")?;
    for s in core.subsystems() {
        w.write_str("<tr><td>")?;
        html_escape(w, &s.nqn)?;
        w.write_str("</td><td>")?;
        for n in &s.namespaces {
            write!(w, "{}: {} &times; {} B<br>", n.nsid, n.dev.num_blocks(), n.dev.block_size())?;
        }
        w.write_str("</td><td>")?;
        if s.allow_any_host {
            w.write_str("any host")?;
        }
        for h in &s.hosts {
            html_escape(w, h)?;
            w.write_str("<br>")?;
        }
        w.write_str("</td></tr>\n")?;
    }
    let c = svc.target.core_stats();
    writeln!(
        w,
        "</table>\n<h2>Activity</h2>\n<table><tr><td>connections</td><td>{}</td></tr><tr><td>controllers</td><td>{}</td></tr><tr><td>commands</td><td>{}</td></tr><tr><td>errors</td><td>{}</td></tr><tr><td>reads / writes</td><td>{} / {}</td></tr></table>\n</body></html>",
        svc.connections(),
        core.live_ctrls(),
        c.commands,
        c.errors,
        c.reads,
        c.writes
    )
}
