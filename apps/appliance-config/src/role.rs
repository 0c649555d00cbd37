//! role: the NVMe-oF role the options ask for (target, initiator or none), after the checks
//! that span several options (each word's own grammar is checked when it is parsed).

use alloc::format;
use alloc::string::String;

use crate::Config;

/// The role the command line asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    None,
    Target,
    Initiator,
}

/// `A.B.C.D`.
pub fn ip_str(a: [u8; 4]) -> String {
    format!("{}.{}.{}.{}", a[0], a[1], a[2], a[3])
}

/// The role, after checks that span several options (the per-word grammar is checked when
/// each option is parsed). The error names the options involved.
pub fn check(cfg: &Config) -> Result<Role, String> {
    let n = &cfg.nvmeof;
    let target = !n.subsystems.is_empty();
    let initiator = n.connect.is_some();
    if target && initiator {
        return Err(String::from("nvmet.subsys= and nvmf.connect= given: one NVMe-oF role per image (target or initiator)"));
    }
    if n.bench.is_some() && !initiator {
        return Err(String::from("nvmf.bench= needs nvmf.connect= (the target to measure)"));
    }
    if cfg.serve_ctrls > 0 && !target {
        return Err(String::from("nvmet.serve-ctrls= without any nvmet.subsys= (nothing to serve)"));
    }
    if cfg.verify > 0 && !initiator {
        return Err(String::from("nvmf.verify= needs nvmf.connect= (the target to verify against)"));
    }
    if cfg.selftest_connectx && (target || initiator) {
        return Err(String::from("selftest=connectx runs alone: drop nvmet.subsys= / nvmf.connect="));
    }
    if let Err(e) = nvmeof::cmdline::bounds::cm_config(&n.bounds, rdma::cm::CmConfig::default()) {
        return Err(format!("{}: {}", e.word, e.why));
    }
    if n.listen.is_some() && !target {
        return Err(String::from("nvmet.listen= without any nvmet.subsys= (nothing to serve)"));
    }
    if let (Some(ip), Some((l, _))) = (cfg.ip, n.listen) {
        if l != [0; 4] && l != ip {
            return Err(format!("ip={} and nvmet.listen={} name different addresses", ip_str(ip), ip_str(l)));
        }
    }
    if target && adapter_ip(cfg).is_none() {
        return Err(String::from("the NVMe-oF target needs an address: nvmet.listen=A.B.C.D[:PORT] or ip=A.B.C.D"));
    }
    if initiator && cfg.ip.is_none() {
        return Err(String::from("nvmf.connect= needs ip=A.B.C.D (the adapter's own address)"));
    }
    Ok(if target {
        Role::Target
    } else if initiator {
        Role::Initiator
    } else {
        Role::None
    })
}

/// The adapter's address: `ip=`, else the `nvmet.listen=` address (unless 0.0.0.0).
pub fn adapter_ip(cfg: &Config) -> Option<[u8; 4]> {
    cfg.ip.or(cfg.nvmeof.listen.map(|(a, _)| a).filter(|a| *a != [0; 4]))
}
