//! Shared setup for the integration tests: driver + emulated ConnectX over simulated memory.
#![allow(dead_code)]

use emu_connectx::{Bar0, ConnectX, PhysMem, SimClock, SimHal};
use mlx5::{Config, Mlx5, Timeouts};
use rdma::{Access, RcConnectAttrs, Qpn};

pub type Dev = Mlx5<SimHal, Bar0>;

pub struct Rig {
    pub mem: PhysMem,
    pub clock: SimClock,
    pub cx: ConnectX,
}

pub fn rig_with(cfg: emu_connectx::Config) -> (Rig, SimHal, Bar0) {
    let mem = PhysMem::new();
    let clock = SimClock::new();
    let hal = SimHal::new(mem.clone(), clock.clone());
    let cx = ConnectX::new(mem.clone(), clock.clone(), cfg);
    let bar = cx.bar0();
    (Rig { mem, clock, cx }, hal, bar)
}

pub fn rig() -> (Rig, SimHal, Bar0) {
    rig_with(emu_connectx::Config::default())
}

/// Driver config with short (virtual-time) timeouts so failure tests end quickly.
pub fn cfg() -> Config {
    Config {
        ipv4: [192, 168, 7, 2],
        timeouts: Timeouts { init_ns: 500_000_000, cmd_ns: 200_000_000, health_stall_ns: 50_000_000 },
        ..Config::default()
    }
}

pub fn rc_attrs(remote_qpn: Qpn) -> RcConnectAttrs {
    RcConnectAttrs {
        remote_qpn,
        remote_ip: [192, 168, 7, 3],
        remote_mac: [0x02, 0, 0, 0, 0, 0x33],
        rq_psn: 0x1234,
        sq_psn: 0x5678,
        mtu: 1024,
        udp_sport: 0,
        retry_cnt: 7,
        rnr_retry: 7,
        timeout: 14,
        min_rnr_timer: 12,
        max_rd_atomic: 16,
        max_dest_rd_atomic: 16,
        access: Access { local_write: true, remote_read: true, remote_write: true },
    }
}
