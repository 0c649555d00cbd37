//! `selftest=connectx`: the hardware validation kit's run on a ConnectX (or the emulated one with
//! `connectx.emu=ivshmem`). Brings the adapter up with the firmware command trace on (unless
//! `mlx5.trace=` says otherwise), prints its capabilities, link, MTU and GID, runs RC traffic
//! between two of its QPs over the port's local loopback with every byte verified
//! (`mlx5::selftest`), shuts it down with every firmware page reclaimed, and ends with one
//! verdict line; the image's exit status follows it.
//!
//! ```text
//! selftest: connectx: 03:00.0 firmware 22.39.1002, ISSI 1, PCI 15b3:101d
//! selftest: connectx: capabilities Caps { log_max_qp: 18, ... }
//! selftest: connectx: link up, port MTU 1500, path MTU 1024, MAC ..., GID 0 ::ffff:192.0.2.1 (RoCEv2)
//! selftest: connectx: loopback RC QPs 0x8/0x9: 192 operations, 1572864 bytes verified in 12.3 ms
//! selftest: connectx: shut down: 212 commands, 68 pages given, 68 reclaimed
//! selftest: connectx PASS
//! ```
use log::{error, info};
use rdma::Neighbours;

use crate::adapter::Adapter;
use appliance_config::Config;

/// The adapter's address when the command line gives none: TEST-NET-1 (RFC 5737), never routed.
pub const DEFAULT_IP: [u8; 4] = [192, 0, 2, 1];

/// Run the kit; true when every step passed.
pub fn run(cfg: &Config) -> bool {
    let ip = cfg.ip.unwrap_or(DEFAULT_IP);
    let trace = cfg.mlx5_trace.unwrap_or(mlx5::TraceMode::Commands);
    info!("selftest: connectx: bringing the adapter up as {}.{}.{}.{} (firmware command trace {trace:?})", ip[0], ip[1], ip[2], ip[3]);
    let attached = if cfg.connectx_emu { crate::emu::attach(Some(ip), trace, cfg.connectx_emu_device) } else { crate::adapter::attach(Some(ip), cfg.connectx, trace) };
    let mut a = match attached {
        Ok(a) => a,
        Err(why) => {
            error!("selftest: connectx: no adapter came up: {why}");
            error!("selftest: connectx FAIL");
            return false;
        }
    };
    let ok = exercise(&mut a, cfg);
    let reclaimed = shut_down(a);
    let pass = ok && reclaimed;
    if pass {
        info!("selftest: connectx PASS");
    } else {
        error!("selftest: connectx FAIL");
    }
    pass
}

/// Everything between bring-up and shutdown; true when it all passed.
fn exercise(a: &mut Adapter, cfg: &Config) -> bool {
    info!("selftest: connectx: {} firmware {}, ISSI {}", a.bdf, a.verbs.fw(), a.verbs.issi());
    let v = &mut *a.verbs;
    info!("selftest: connectx: capabilities {:?}", v.caps());
    let link = match v.query_link() {
        Ok(true) => "link up",
        Ok(false) => "link down (local loopback does not need the cable)",
        Err(_) => "link state unknown (QUERY_VPORT_STATE refused)",
    };
    let vport = match v.query_vport() {
        Ok(i) => i,
        Err(e) => {
            error!("selftest: connectx: QUERY_NIC_VPORT_CONTEXT failed: {e}");
            return false;
        }
    };
    let m = v.local_mac();
    let ip = v.local_ip();
    info!(
        "selftest: connectx: {link}, port MTU {}, path MTU {}, MAC {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}, GID 0 ::ffff:{}.{}.{}.{} (RoCEv2), RoCE {}, unicast local loopback {}",
        vport.mtu,
        cfg.roce_mtu,
        m[0], m[1], m[2], m[3], m[4], m[5],
        ip[0], ip[1], ip[2], ip[3],
        if vport.roce_en { "on" } else { "off" },
        if vport.uc_local_lb { "on" } else { "off (will be turned on)" }
    );
    let lcfg = mlx5::selftest::LoopbackConfig { mtu: cfg.roce_mtu, ..Default::default() };
    match mlx5::selftest::loopback_rc(v, &lcfg) {
        Ok(r) => {
            info!(
                "selftest: connectx: loopback RC QPs {:#x}/{:#x}: {} operations (SEND, RDMA WRITE, RDMA READ of {} bytes), {} bytes verified in {}.{:01} ms",
                r.qpns.0,
                r.qpns.1,
                r.ops,
                lcfg.size,
                r.bytes,
                r.elapsed_ns / 1_000_000,
                (r.elapsed_ns / 100_000) % 10
            );
            true
        }
        Err(e) => {
            error!("selftest: connectx: loopback RC traffic failed: {e} ({e:?})");
            false
        }
    }
}

/// Tear down; true when the firmware gave back every page it was given.
fn shut_down(a: Adapter) -> bool {
    let bdf = a.bdf.clone();
    match (*a.verbs).shutdown() {
        Ok(st) if st.pages_given == st.pages_reclaimed => {
            info!("selftest: connectx: {bdf}: shut down: {} commands, {} pages given, {} reclaimed", st.commands, st.pages_given, st.pages_reclaimed);
            true
        }
        Ok(st) => {
            error!("selftest: connectx: {bdf}: shut down with pages missing: {} given, {} reclaimed", st.pages_given, st.pages_reclaimed);
            false
        }
        Err(e) => {
            error!("selftest: connectx: {bdf}: shutdown failed: {e} ({e:?})");
            false
        }
    }
}
