//! The management plane on the image (apps/mgmt): `mgmt=`, `mgmt.listen=`, `mgmt.prefix=`,
//! `mgmt.control=` words, and one bounded turn per target poll loop turn serving ping,
//! `/metrics` (target, adapter, memory, the stack itself), the status page `/` and the port's
//! subsystem links `/ports/P/subsystems[/NQN]` (listed; linked and unlinked with `mgmt.control=on`).

use alloc::boxed::Box;
use mgmt::prom::{Exposition, Kind};
use mgmt::report;

use crate::adapter::Verbs;
use crate::storage::Backing;

/// Frames queued for the stack between two of its turns.
const TAP_SLOTS: usize = 32;

pub struct Plane {
    m: Box<mgmt::Mgmt>,
    start_ns: u64,
}

/// Start the stack on the adapter (`None` with `mgmt=off`).
pub fn start(cfg: &mgmt::MgmtConfig, verbs: &mut Verbs, adapter_ip: [u8; 4]) -> Option<Plane> {
    if !cfg.enabled {
        log::info!("mgmt: off (mgmt=off)");
        return None;
    }
    verbs.enable_mgmt_frames(TAP_SLOTS, cfg.ip.unwrap_or(adapter_ip) == adapter_ip);
    let seed = u64::from_le_bytes(kernel::entropy::seed32()[..8].try_into().unwrap_or_default());
    let now = kernel::time::now_ns();
    let m = mgmt::Mgmt::new(cfg, adapter_ip, rdma::Neighbours::local_mac(verbs), mlx5::MAX_FRAME, mgmt::Budget::default(), seed, now);
    Some(Plane { m: Box::new(m), start_ns: now })
}

impl Plane {
    /// One bounded turn.
    pub fn turn(&mut self, verbs: &mut Verbs, svc: &mut nvmeof::nvmet::service::TargetService<Verbs, Backing>) {
        self.m.take_frames(verbs);
        let (stats, open) = (self.m.stats(), self.m.open_connections());
        let now = kernel::time::now_ns();
        let up = now.saturating_sub(self.start_ns) / 1_000_000_000;
        let v = &mut *verbs;
        self.m.run(now, &mut |page, w| match page {
            mgmt::Page::Metrics => {
                // The adapter's queue counters are read (one firmware command) only for a page.
                if let Err(e) = v.refresh_queue_counters() {
                    log::warn!("mgmt: queue counters: {e}");
                }
                let mut e = Exposition::new(w);
                e.single("appliance_uptime_seconds", Kind::Gauge, "Seconds since the management plane started.", up);
                let (hu, hf, du, df) = kernel::memory::usage();
                report::memory_metrics(&mut e, &report::Memory { heap_used: hu, heap_free: hf, dma_used: du, dma_free: df });
                report::target_metrics(&mut e, svc);
                report::adapter_metrics(&mut e, v, svc.target.group_objects());
                report::mgmt_metrics(&mut e, &stats, open);
                e.error.map_or(Ok(mgmt::Answer::Found), Err)
            }
            mgmt::Page::Status => report::status_page(w, "RDMA storage appliance", up, v, svc).map(|()| mgmt::Answer::Found),
            mgmt::Page::Links { .. } | mgmt::Page::Link { .. } => report::port_links(w, page, v, svc),
        });
        self.m.give_frames(verbs);
    }
}
