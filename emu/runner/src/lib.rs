//! emu-runner: one appliance node on the host = mlx5 driver (`Mlx5Verbs`) over the emulated
//! ConnectX (`SimHal` + model + RoCE engine), its port attached to any `emu_roce::Link`; the
//! node and the clocked link are the shared harness's (`testbed::node`), the apps and the
//! command line are the runner's. The loop is single-threaded: `app.poll(); node.poll()`.
#![forbid(unsafe_code)]

pub mod nvmf;

pub use testbed::node::{Clocked, Error, Node, Options, Verbs};

/// The profile named `name` (emu_connectx::profile::NAMES), or a message listing the names.
pub fn profile_by_name(name: &str) -> Result<emu_connectx::Profile, String> {
    emu_connectx::Profile::by_name(name)
        .ok_or_else(|| format!("unknown device profile {name:?}; known: {}", emu_connectx::profile::NAMES.join(", ")))
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
