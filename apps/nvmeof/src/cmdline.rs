//! Kernel command line → NVMe-oF target/initiator settings (parsing only; the appliance maps
//! namespace specs to block devices). Bad input yields a clear error, never a panic.
//!
//! Grammar (space-separated words; unknown words are ignored for other subsystems):
//! - `nvmet.listen=A.B.C.D[:PORT]`                 listen address (port 4420 by default)
//! - `nvmet.poll_groups=N`                          queues spread round-robin over N poll groups
//!   (1..64, default 1), each with one CQ and one SRQ; polled in turn by one CPU
//! - `nvmet.subsys=NQN,ns=KIND:SIZE|nvme:N,...,host=HOSTNQN,...[,allow_any]`
//!   KIND is `ram` or `null`, SIZE takes K/M/G suffixes (bytes); `nvme:N` is local NVMe
//!   namespace N; `bs=512|4096` sets the block size for the ram/null namespaces that follow.
//!   After a `host=HOSTNQN`, DH-HMAC-CHAP for that host (as nvmet's host attributes):
//!   `dhchap=DHHC-1:XX:...:` (required to set the others), `dhchap_ctrl=DHHC-1:...:`
//!   (bidirectional), `dhchap_hash=sha256|sha384|sha512`, `dhchap_dhgroup=null|ffdhe2048|...|ffdhe8192`.
//! - `nvmf.connect=A.B.C.D[:PORT],nqn=NQN[,hostnqn=NQN][,queues=N][,qd=N][,kato=MS][,keys=per-io|static][,inval=remote|local]`
//!   `[,dhchap=DHHC-1:...:][,dhchap_ctrl=DHHC-1:...:]` (as `nvme connect --dhchap-secret`/`--dhchap-ctrl-secret`)
//!   `keys=per-io` (default): each I/O's buffer gets its own key, scoped to that I/O and
//!   invalidated when it completes; `keys=static` keeps one remote-writable key per slot (for
//!   comparisons only). `inval=remote` (default) asks the target to invalidate with SEND WITH
//!   INVALIDATE; `inval=local`: the host invalidates each key itself.
//!   `[,reconnect_delay=T][,ctrl_loss_tmo=T|-1]` (as `nvme connect --reconnect-delay`/
//!   `--ctrl-loss-tmo`; T in seconds, or with an `ms`/`s` suffix): a lost controller is
//!   retried every `reconnect_delay` (default 1 s) and given up after `ctrl_loss_tmo` without a
//!   connection (default 600 s; -1: never).
//! - `nvmf.bench=PATTERN,bs=N,qd=N,time=N(ms|s)[,read=PCT][,ios=N][,seed=N][,threads=on]`
//!   PATTERN: randread randwrite read write randrw; `threads=on`: every I/O queue driven from
//!   a thread of its own at `qd` each (emu-runner: a std thread each; the image: an application
//!   processor each, given enough of them)
//! - bounds on what a peer may pin: `nvmet.connect-deadline=MS`, `nvmet.kato-min=MS`,
//!   `cm.max-conns=N`, `cm.req-rate=N`, ... (the list is [`bounds::WORDS`])

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::bench::{BenchConfig, Pattern};
use nvme_auth::{DhGroup, HashId, Secret};

pub mod bounds;
pub use bounds::BoundWord;

/// A namespace backing requested on the command line (`ns=nvme:NSID` names no controller).
pub use blockdev::NsSpec;

/// One subsystem from `nvmet.subsys=` (or from a configuration file, [`crate::nvmetcli`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SubsysSpec {
    pub nqn: String,
    pub namespaces: Vec<NsSpec>,
    pub hosts: Vec<String>,
    pub allow_any_host: bool,
    /// Hosts that must pass DH-HMAC-CHAP, with what they must present.
    pub host_auth: Vec<(String, nvme_auth::ctrl::HostPolicy)>,
    /// The namespaces' identities, one per entry of `namespaces`, when a configuration file
    /// gave them; empty from the command line (NSIDs 1, 2, … and derived NGUIDs).
    pub ns_ident: Vec<NsIdent>,
    /// Serial number and model to report (Identify Controller SN, MN); `None`: the defaults.
    pub serial: Option<String>,
    pub model: Option<String>,
}

/// A namespace's NSID and, if given and non-zero, its NGUID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NsIdent {
    pub nsid: u32,
    pub nguid: Option<[u8; 16]>,
}

/// The initiator's target from `nvmf.connect=`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectSpec {
    pub addr: [u8; 4],
    pub port: u16,
    pub nqn: String,
    pub hostnqn: Option<String>,
    pub queues: u16,
    pub qd: u16,
    pub kato_ms: u32,
    /// DH-HMAC-CHAP secrets, used if the target asks for authentication.
    pub dhchap: Option<nvme_auth::host::HostKeys>,
    /// `keys=per-io|static` (HostConfig::per_io_keys).
    pub per_io_keys: bool,
    /// `inval=remote|local` (HostConfig::invalidate).
    pub invalidate: bool,
    /// `reconnect_delay=` (HostConfig::reconnect_delay_ns).
    pub reconnect_delay_ns: u64,
    /// `ctrl_loss_tmo=` (HostConfig::ctrl_loss_tmo_ns; `None` for -1).
    pub ctrl_loss_tmo_ns: Option<u64>,
}

impl ConnectSpec {
    /// The initiator's configuration this spec asks for (the host's identity, its secrets'
    /// CSPRNG seed and buffer sizes are the caller's: defaults here).
    pub fn host_config(&self) -> crate::host::HostConfig {
        let mut c = crate::host::HostConfig {
            io_queues: self.queues.max(1),
            io_depth: self.qd.max(2),
            kato_ms: self.kato_ms,
            per_io_keys: self.per_io_keys,
            invalidate: self.invalidate,
            reconnect_delay_ns: self.reconnect_delay_ns,
            ctrl_loss_tmo_ns: self.ctrl_loss_tmo_ns,
            dhchap: self.dhchap.clone(),
            ..Default::default()
        };
        if let Some(h) = &self.hostnqn {
            c.hostnqn = h.clone();
        }
        c
    }
}

/// A port of a configuration file (nvmet's `ports/P`): its ID, where it listens, and the
/// subsystems linked to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSpec {
    pub portid: u16,
    pub addr: ([u8; 4], u16),
    pub subsystems: Vec<String>,
}

/// Everything NVMe-oF found on the command line.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NvmeofArgs {
    /// `nvmet.listen=` (or a configuration file's first port).
    pub listen: Option<([u8; 4], u16)>,
    /// A configuration file's ports with their links (empty: one port at `listen`, every
    /// subsystem linked to it).
    pub ports: Vec<PortSpec>,
    pub subsystems: Vec<SubsysSpec>,
    pub connect: Option<ConnectSpec>,
    pub bench: Option<BenchConfig>,
    /// `nvmet.*`/`cm.*` bound words, in command-line order ([`bounds`]).
    pub bounds: Vec<BoundWord>,
    /// `nvmet.poll_groups=N` (None: 1).
    pub poll_groups: Option<usize>,
    /// `nvmf.verify=N[,threads=on|off]`.
    pub verify: Option<VerifySpec>,
}

/// `nvmf.verify=N[,threads=on|off]`: N verified random I/Os; `threads=on`: split over the I/O
/// queues, each on a thread (the image: an application processor) of its own
/// (`nvmeof::verify::lanes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifySpec {
    pub count: u64,
    pub threads: bool,
}

/// What was wrong, with the offending word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgError {
    pub word: String,
    pub why: &'static str,
}

fn err(word: &str, why: &'static str) -> ArgError {
    ArgError { word: word.to_string(), why }
}

/// Parse `A.B.C.D[:PORT]`.
pub fn parse_addr(s: &str) -> Option<([u8; 4], u16)> {
    let (ip, port) = match s.split_once(':') {
        Some((i, p)) => (i, p.parse::<u16>().ok().filter(|&p| p != 0)?),
        None => (s, 4420),
    };
    let mut a = [0u8; 4];
    let mut n = 0;
    for part in ip.split('.') {
        if n == 4 || part.is_empty() || part.len() > 3 {
            return None;
        }
        a[n] = part.parse().ok()?;
        n += 1;
    }
    (n == 4).then_some((a, port))
}

/// Parse a size with optional K/M/G suffix (powers of 1024).
pub fn parse_size(s: &str) -> Option<u64> {
    let (num, mul) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 1u64 << 10),
        b'M' | b'm' => (&s[..s.len() - 1], 1 << 20),
        b'G' | b'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mul)
}

pub(crate) fn nqn_ok(n: &str) -> bool {
    !n.is_empty() && n.len() <= 223 && n.is_ascii() && !n.contains(' ')
}

/// Parse the NVMe-oF words of a command line.
pub fn parse(cmdline: &str) -> Result<NvmeofArgs, ArgError> {
    let mut out = NvmeofArgs::default();
    for word in cmdline.split_ascii_whitespace() {
        let Some((key, val)) = word.split_once('=') else { continue };
        match key {
            "nvmet.listen" => out.listen = Some(parse_addr(val).ok_or_else(|| err(word, "expected A.B.C.D[:PORT]"))?),
            "nvmet.subsys" => out.subsystems.push(parse_subsys(word, val)?),
            "nvmet.poll_groups" => out.poll_groups = Some(val.parse::<usize>().ok().filter(|n| (1..=64).contains(n)).ok_or_else(|| err(word, "expected 1..64"))?),
            "nvmf.connect" => out.connect = Some(parse_connect(word, val)?),
            "nvmf.bench" => out.bench = Some(parse_bench(word, val)?),
            "nvmf.verify" => out.verify = Some(parse_verify(val).map_err(|why| err(word, why))?),
            _ => {
                if let Some(b) = bounds::parse_word(word, key, val)? {
                    out.bounds.push(b);
                }
            }
        }
    }
    // Cross-word rules of the bounds (min <= max, each word once).
    bounds::cm_config(&out.bounds, rdma::cm::CmConfig::default())?;
    let mut nqns: Vec<&str> = out.subsystems.iter().map(|s| s.nqn.as_str()).collect();
    nqns.sort_unstable();
    if nqns.windows(2).any(|w| w[0] == w[1]) {
        return Err(err("nvmet.subsys", "duplicate subsystem NQN"));
    }
    Ok(out)
}

fn parse_subsys(word: &str, val: &str) -> Result<SubsysSpec, ArgError> {
    let mut it = val.split(',');
    let nqn = it.next().unwrap_or("");
    if !nqn_ok(nqn) || nqn == crate::wire::DISCOVERY_NQN {
        return Err(err(word, "bad subsystem NQN"));
    }
    let mut s = SubsysSpec { nqn: nqn.to_string(), ..Default::default() };
    // DH-HMAC-CHAP options of the last host= (secret, controller secret, hash, group).
    let mut auth: Vec<(usize, Option<Secret>, Option<Secret>, HashId, DhGroup)> = Vec::new();
    let mut bs = 512u32;
    for opt in it {
        let (k, v) = opt.split_once('=').unwrap_or((opt, ""));
        match k {
            "allow_any" => s.allow_any_host = true,
            "host" if nqn_ok(v) => s.hosts.push(v.to_string()),
            "dhchap" | "dhchap_ctrl" | "dhchap_hash" | "dhchap_dhgroup" => {
                let Some(h) = s.hosts.len().checked_sub(1) else { return Err(err(word, "dhchap options follow a host=NQN")) };
                if auth.last().is_none_or(|a| a.0 != h) {
                    auth.push((h, None, None, HashId::Sha256, DhGroup::Null));
                }
                let Some(a) = auth.last_mut() else { return Err(err(word, "dhchap options follow a host=NQN")) };
                match k {
                    "dhchap" => a.1 = Some(Secret::parse(v).map_err(|_| err(word, "dhchap= needs a valid DHHC-1 secret"))?),
                    "dhchap_ctrl" => a.2 = Some(Secret::parse(v).map_err(|_| err(word, "dhchap_ctrl= needs a valid DHHC-1 secret"))?),
                    "dhchap_hash" => a.3 = HashId::from_name(v).ok_or_else(|| err(word, "dhchap_hash is sha256, sha384 or sha512"))?,
                    _ => a.4 = DhGroup::from_name(v).ok_or_else(|| err(word, "dhchap_dhgroup is null or ffdhe2048..ffdhe8192"))?,
                }
            }
            "bs" => {
                bs = v.parse().ok().filter(|b: &u32| b.is_power_of_two() && (512..=65536).contains(b)).ok_or_else(|| err(word, "bs must be a power of two 512..65536"))?
            }
            "ns" => {
                let (kind, arg) = v.split_once(':').ok_or_else(|| err(word, "ns=KIND:ARG"))?;
                let ns = match kind {
                    "ram" | "null" => {
                        let bytes = parse_size(arg).filter(|&b| b >= bs as u64 && b % bs as u64 == 0).ok_or_else(|| err(word, "namespace size: a multiple of bs"))?;
                        if kind == "ram" {
                            NsSpec::Ram { bytes, block_size: bs }
                        } else {
                            NsSpec::Null { bytes, block_size: bs }
                        }
                    }
                    "nvme" => NsSpec::Nvme { ctrl: None, nsid: arg.parse().ok().filter(|&n| n != 0).ok_or_else(|| err(word, "nvme:NSID"))? },
                    _ => return Err(err(word, "namespace kind is ram, null or nvme")),
                };
                s.namespaces.push(ns);
            }
            _ => return Err(err(word, "unknown subsystem option")),
        }
    }
    if s.hosts.is_empty() && !s.allow_any_host {
        return Err(err(word, "no host=NQN allowed and no allow_any"));
    }
    for (h, key, ctrl_key, hash, dhgroup) in auth {
        let key = key.ok_or_else(|| err(word, "dhchap_* options need dhchap=DHHC-1:... for the host"))?;
        let policy = nvme_auth::ctrl::HostPolicy { key, ctrl_key, hash, dhgroup };
        s.host_auth.push((s.hosts[h].clone(), policy));
    }
    Ok(s)
}

fn parse_connect(word: &str, val: &str) -> Result<ConnectSpec, ArgError> {
    let mut it = val.split(',');
    let (addr, port) = parse_addr(it.next().unwrap_or("")).ok_or_else(|| err(word, "expected A.B.C.D[:PORT]"))?;
    let d = crate::host::HostConfig::default();
    let mut c = ConnectSpec {
        addr,
        port,
        nqn: String::new(),
        hostnqn: None,
        queues: 1,
        qd: 32,
        kato_ms: 5000,
        dhchap: None,
        per_io_keys: true,
        invalidate: true,
        reconnect_delay_ns: d.reconnect_delay_ns,
        ctrl_loss_tmo_ns: d.ctrl_loss_tmo_ns,
    };
    let mut ctrl_secret = None;
    for opt in it {
        let (k, v) = opt.split_once('=').ok_or_else(|| err(word, "option=value"))?;
        let num = |max: u32| v.parse::<u32>().ok().filter(|&n| n >= 1 && n <= max).ok_or_else(|| err(word, "number out of range"));
        match k {
            "nqn" if nqn_ok(v) => c.nqn = v.to_string(),
            "hostnqn" if nqn_ok(v) => c.hostnqn = Some(v.to_string()),
            "queues" => c.queues = num(64)? as u16,
            "qd" => c.qd = num(1024)? as u16,
            "kato" => c.kato_ms = v.parse().map_err(|_| err(word, "kato in ms"))?,
            "dhchap" => {
                let secret = Secret::parse(v).map_err(|_| err(word, "dhchap= needs a valid DHHC-1 secret"))?;
                c.dhchap = Some(nvme_auth::host::HostKeys { secret, ctrl: None });
            }
            "dhchap_ctrl" => ctrl_secret = Some(Secret::parse(v).map_err(|_| err(word, "dhchap_ctrl= needs a valid DHHC-1 secret"))?),
            "keys" => {
                c.per_io_keys = match v {
                    "per-io" => true,
                    "static" => false,
                    _ => return Err(err(word, "keys=per-io|static")),
                }
            }
            "inval" => {
                c.invalidate = match v {
                    "remote" => true,
                    "local" => false,
                    _ => return Err(err(word, "inval=remote|local")),
                }
            }
            "reconnect_delay" => c.reconnect_delay_ns = parse_duration_ns(v, true).ok_or_else(|| err(word, "reconnect_delay=N[ms|s]"))?,
            "ctrl_loss_tmo" if v == "-1" => c.ctrl_loss_tmo_ns = None,
            "ctrl_loss_tmo" => c.ctrl_loss_tmo_ns = Some(parse_duration_ns(v, true).ok_or_else(|| err(word, "ctrl_loss_tmo=N[ms|s] or -1"))?),
            _ => return Err(err(word, "unknown connect option")),
        }
    }
    if c.nqn.is_empty() {
        return Err(err(word, "nqn= required"));
    }
    if let Some(cs) = ctrl_secret {
        let keys = c.dhchap.as_mut().ok_or_else(|| err(word, "dhchap_ctrl= needs dhchap="))?;
        keys.ctrl = Some(cs);
    }
    Ok(c)
}

/// `N ms` or `N s` (and a bare `N` as seconds when `bare_secs`, as nvme-cli's options take
/// them) in ns; `None` if it is not that or overflows.
fn parse_duration_ns(v: &str, bare_secs: bool) -> Option<u64> {
    let (n, unit) = if let Some(ms) = v.strip_suffix("ms") {
        (ms, 1_000_000)
    } else if let Some(s) = v.strip_suffix('s') {
        (s, 1_000_000_000)
    } else if bare_secs {
        (v, 1_000_000_000)
    } else {
        return None;
    };
    n.parse::<u64>().ok()?.checked_mul(unit)
}

/// `N[,threads=on|off]` of `nvmf.verify=`.
pub fn parse_verify(val: &str) -> Result<VerifySpec, &'static str> {
    let mut it = val.split(',');
    let count = it.next().and_then(|n| n.parse().ok()).ok_or("expected a count of I/Os")?;
    let mut threads = false;
    for opt in it {
        threads = match opt {
            "threads=on" => true,
            "threads=off" => false,
            _ => return Err("expected N[,threads=on|off]"),
        };
    }
    Ok(VerifySpec { count, threads })
}

fn parse_bench(word: &str, val: &str) -> Result<BenchConfig, ArgError> {
    let mut it = val.split(',');
    let mut read_pct = 50u8;
    let pat = it.next().unwrap_or("");
    let mut b = BenchConfig { pattern: Pattern::RandRead, block_size: 4096, queue_depth: 1, duration_ns: 10_000_000_000, max_ios: 0, seed: 1, threads: false };
    for opt in it {
        let (k, v) = opt.split_once('=').ok_or_else(|| err(word, "option=value"))?;
        match k {
            "bs" => b.block_size = parse_size(v).filter(|&x| x >= 512 && x <= 1 << 24).ok_or_else(|| err(word, "bs 512..16M"))? as u32,
            "qd" => b.queue_depth = v.parse().ok().filter(|&q| q >= 1).ok_or_else(|| err(word, "qd >= 1"))?,
            "time" => b.duration_ns = parse_duration_ns(v, false).filter(|&n| n > 0).ok_or_else(|| err(word, "time=N(ms|s)"))?,
            "ios" => b.max_ios = v.parse().map_err(|_| err(word, "ios=N"))?,
            "read" => read_pct = v.parse().ok().filter(|&p| p <= 100).ok_or_else(|| err(word, "read=0..100"))?,
            "seed" => b.seed = v.parse().map_err(|_| err(word, "seed=N"))?,
            "threads" => {
                b.threads = match v {
                    "on" => true,
                    "off" => false,
                    _ => return Err(err(word, "threads=on|off")),
                }
            }
            _ => return Err(err(word, "unknown bench option")),
        }
    }
    b.pattern = match pat {
        "randread" => Pattern::RandRead,
        "randwrite" => Pattern::RandWrite,
        "read" => Pattern::SeqRead,
        "write" => Pattern::SeqWrite,
        "randrw" => Pattern::RandMix { read_pct },
        _ => return Err(err(word, "pattern: randread randwrite read write randrw")),
    };
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_line() {
        let a = parse(
            "console=ttyS0 nvmet.listen=10.0.0.1 nvmet.subsys=nqn.2026-01.io.x:a,ns=ram:64M,bs=4096,ns=null:1G,ns=nvme:1,host=nqn.h:1 \
             nvmf.connect=10.0.0.2:4421,nqn=nqn.t:b,queues=2,qd=64 nvmf.bench=randrw,bs=4K,qd=32,time=5s,read=70",
        )
        .unwrap();
        assert_eq!(a.listen, Some(([10, 0, 0, 1], 4420)));
        let s = &a.subsystems[0];
        assert_eq!(s.namespaces[0], NsSpec::Ram { bytes: 64 << 20, block_size: 512 });
        assert_eq!(s.namespaces[1], NsSpec::Null { bytes: 1 << 30, block_size: 4096 });
        assert_eq!(s.namespaces[2], NsSpec::Nvme { ctrl: None, nsid: 1 });
        assert_eq!(s.hosts, ["nqn.h:1"]);
        let c = a.connect.unwrap();
        assert_eq!((c.addr, c.port, c.queues, c.qd), ([10, 0, 0, 2], 4421, 2, 64));
        assert!(c.per_io_keys && c.invalidate, "per-I/O keys, remote invalidation by default");
        assert_eq!((c.reconnect_delay_ns, c.ctrl_loss_tmo_ns), (1_000_000_000, Some(600_000_000_000)), "defaults");
        let h = c.host_config();
        assert_eq!((h.io_queues, h.io_depth, h.reconnect_delay_ns, h.ctrl_loss_tmo_ns), (2, 64, 1_000_000_000, Some(600_000_000_000)));
        let c = parse("nvmf.connect=10.0.0.2,nqn=nqn.t:b,keys=static,inval=local").unwrap().connect.unwrap();
        assert!(!c.per_io_keys && !c.invalidate);
        // nvme-cli's units (seconds) or an explicit ms/s suffix; -1: never give up.
        for (opts, delay, tmo) in [
            ("reconnect_delay=10,ctrl_loss_tmo=-1", 10_000_000_000, None),
            ("reconnect_delay=250ms,ctrl_loss_tmo=30s", 250_000_000, Some(30_000_000_000)),
            ("ctrl_loss_tmo=0", 1_000_000_000, Some(0)),
        ] {
            let c = parse(&alloc::format!("nvmf.connect=10.0.0.2,nqn=nqn.t:b,{opts}")).unwrap().connect.unwrap();
            assert_eq!((c.reconnect_delay_ns, c.ctrl_loss_tmo_ns), (delay, tmo), "{opts}");
        }
        assert_eq!(a.poll_groups, None);
        assert_eq!(parse("nvmet.poll_groups=4").unwrap().poll_groups, Some(4));
        let b = a.bench.unwrap();
        assert_eq!(b.pattern, Pattern::RandMix { read_pct: 70 });
        assert_eq!((b.block_size, b.queue_depth, b.duration_ns, b.threads), (4096, 32, 5_000_000_000, false));
        assert!(parse("nvmf.bench=randread,threads=on").unwrap().bench.unwrap().threads);
        assert!(parse("nvmf.bench=randread,threads=yes").is_err());
        assert_eq!(parse("nvmf.verify=500,threads=on").unwrap().verify, Some(VerifySpec { count: 500, threads: true }));
        assert_eq!(parse("nvmf.verify=500").unwrap().verify, Some(VerifySpec { count: 500, threads: false }));
        assert!(parse("nvmf.verify=500,threads=yes").is_err() && parse("nvmf.verify=x").is_err());
    }

    #[test]
    fn errors() {
        for bad in [
            "nvmet.listen=10.0.0",
            "nvmet.listen=10.0.0.1:0",
            "nvmet.poll_groups=0",
            "nvmet.poll_groups=65",
            "nvmet.poll_groups=two",
            "nvmet.subsys=nqn.a,ns=ram:1M",
            "nvmet.subsys=nqn.a,ns=ram:100,host=h",
            "nvmet.subsys=nqn.a,ns=disk:1M,allow_any",
            "nvmet.subsys=nqn.2014-08.org.nvmexpress.discovery,allow_any",
            "nvmet.subsys=nqn.a,allow_any nvmet.subsys=nqn.a,allow_any",
            "nvmf.connect=10.0.0.1",
            "nvmf.connect=10.0.0.1,nqn=nqn.t:b,keys=none",
            "nvmf.connect=10.0.0.1,nqn=nqn.t:b,inval=never",
            "nvmf.connect=10.0.0.1,nqn=nqn.t:b,reconnect_delay=-1",
            "nvmf.connect=10.0.0.1,nqn=nqn.t:b,ctrl_loss_tmo=-2",
            "nvmf.connect=10.0.0.1,nqn=nqn.t:b,ctrl_loss_tmo=99999999999999999s",
            "nvmf.bench=randread,time=5",
            "nvmf.bench=sideways",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,200}") {
            let _ = parse(&s);
        }
        #[test]
        fn never_panics_structured(s in "(nvmet\\.(listen|subsys)|nvmf\\.(connect|bench))=[a-z0-9.:,=KMG]{0,60}") {
            let _ = parse(&s);
        }
    }
}

/// A 128-bit namespace GUID derived from the subsystem NQN and NSID (stable across boots,
/// unique per namespace, never zero; [`blockdev::derive_guid`]).
pub fn derive_nguid(nqn: &str, nsid: u32) -> [u8; 16] {
    blockdev::derive_guid(nqn.as_bytes(), nsid)
}

/// Build the target configuration from parsed arguments. `make_ns` turns each namespace spec
/// into a backing device (or an error message); NSIDs are assigned 1, 2, … per subsystem.
pub fn build_target<B: blockdev::BlockDevice>(
    args: &NvmeofArgs,
    base: crate::nvmet::TargetConfig,
    mut make_ns: impl FnMut(&NsSpec) -> Result<B, &'static str>,
) -> Result<(crate::nvmet::TargetConfig, Vec<crate::nvmet::SubsystemConfig<B>>), ArgError> {
    let mut cfg = base;
    cfg.limits = bounds::target_limits(&args.bounds, &cfg.limits)?;
    if !args.ports.is_empty() {
        // The listen address may have been rewritten (the image publishes its own address):
        // every port is on it, as the configuration file's ports share one address.
        let ip = args.listen.map(|(a, _)| a);
        cfg.ports = args
            .ports
            .iter()
            .map(|p| crate::nvmet::PortConfig { portid: p.portid, traddr: ip.unwrap_or(p.addr.0), trsvcid: p.addr.1, subsystems: Some(p.subsystems.clone()) })
            .collect();
    } else if let Some((addr, port)) = args.listen {
        cfg.ports = alloc::vec![crate::nvmet::PortConfig { portid: 1, traddr: addr, trsvcid: port, subsystems: None }];
    }
    let mut subs = Vec::new();
    for s in &args.subsystems {
        for (hostnqn, policy) in &s.host_auth {
            cfg.host_auth.push(crate::nvmet::auth::HostAuthConfig { subnqn: s.nqn.clone(), hostnqn: hostnqn.clone(), policy: policy.clone() });
        }
    }
    for (i, s) in args.subsystems.iter().enumerate() {
        let mut namespaces = Vec::new();
        for (j, spec) in s.namespaces.iter().enumerate() {
            let ident = s.ns_ident.get(j);
            let nsid = ident.map_or(j as u32 + 1, |n| n.nsid);
            let dev = make_ns(spec).map_err(|why| err(&s.nqn, why))?;
            // The configuration's NGUID, else the store's own (a drive's, passed through or
            // derived from its serial), else one derived from the subsystem NQN.
            let nguid = ident
                .and_then(|n| n.nguid)
                .or_else(|| dev.identity().map(|i| i.nguid).filter(|g| *g != [0; 16]))
                .unwrap_or_else(|| derive_nguid(&s.nqn, nsid));
            namespaces.push(crate::nvmet::NamespaceConfig { nsid, dev, nguid });
        }
        let serial = s.serial.clone().unwrap_or_else(|| {
            let mut serial = String::new();
            let _ = core::fmt::write(&mut serial, format_args!("APPL{:08X}", i as u32 + 1));
            serial
        });
        subs.push(crate::nvmet::SubsystemConfig {
            nqn: s.nqn.clone(),
            serial,
            model: s.model.clone().unwrap_or_else(|| "appliance nvme-of".to_string()),
            hosts: s.hosts.clone(),
            allow_any_host: s.allow_any_host,
            namespaces,
        });
    }
    Ok((cfg, subs))
}

#[cfg(test)]
mod build_tests {
    use super::*;

    struct Null(u64, u32);
    impl blockdev::BlockDevice for Null {
        fn block_size(&self) -> u32 {
            self.1
        }
        fn num_blocks(&self) -> u64 {
            self.0
        }
        fn max_transfer_blocks(&self) -> u32 {
            256
        }
        fn submit(&mut self, _io: &blockdev::BlockIo) -> Result<(), blockdev::BlockError> {
            Err(blockdev::BlockError::Unsupported)
        }
        fn poll(&mut self, _out: &mut [blockdev::BlockDone]) -> usize {
            0
        }
    }

    fn make(s: &NsSpec) -> Result<Null, &'static str> {
        match *s {
            NsSpec::Null { bytes, block_size } | NsSpec::Ram { bytes, block_size } => Ok(Null(bytes / block_size as u64, block_size)),
            NsSpec::Nvme { .. } => Err("no local NVMe in this test"),
        }
    }

    /// DH-HMAC-CHAP words: the NVMe spec's example secret, per-host options after host=.
    #[test]
    fn dhchap_words() {
        let k = "DHHC-1:01:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:";
        let c0 = "DHHC-1:00:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:";
        let line = alloc::format!(
            "nvmet.subsys=nqn.a,ns=ram:1M,host=nqn.h1,dhchap={k},dhchap_ctrl={c0},dhchap_hash=sha512,dhchap_dhgroup=ffdhe3072,host=nqn.h2 \
             nvmf.connect=10.0.0.2,nqn=nqn.a,dhchap={k},dhchap_ctrl={c0}"
        );
        let a = parse(&line).unwrap();
        let s = &a.subsystems[0];
        assert_eq!(s.hosts, ["nqn.h1", "nqn.h2"]);
        assert_eq!(s.host_auth.len(), 1);
        let (h, p) = &s.host_auth[0];
        assert_eq!(h, "nqn.h1");
        assert_eq!((p.hash, p.dhgroup), (HashId::Sha512, DhGroup::Ffdhe3072));
        assert_eq!(p.key, Secret::parse(k).unwrap());
        assert_eq!(p.ctrl_key, Some(Secret::parse(c0).unwrap()));
        let keys = a.connect.unwrap().dhchap.unwrap();
        assert_eq!(keys.secret, Secret::parse(k).unwrap());
        assert_eq!(keys.ctrl, Some(Secret::parse(c0).unwrap()));
        // Defaults as nvmet: SHA-256, null group.
        let a = parse(&alloc::format!("nvmet.subsys=nqn.a,host=nqn.h,dhchap={k}")).unwrap();
        assert_eq!((a.subsystems[0].host_auth[0].1.hash, a.subsystems[0].host_auth[0].1.dhgroup), (HashId::Sha256, DhGroup::Null));
        for bad in [
            alloc::format!("nvmet.subsys=nqn.a,dhchap={k},host=nqn.h"),
            "nvmet.subsys=nqn.a,host=nqn.h,dhchap=DHHC-1:01:AAAA:".into(),
            alloc::format!("nvmet.subsys=nqn.a,host=nqn.h,dhchap_ctrl={k}"),
            alloc::format!("nvmet.subsys=nqn.a,host=nqn.h,dhchap={k},dhchap_hash=md5"),
            alloc::format!("nvmet.subsys=nqn.a,host=nqn.h,dhchap={k},dhchap_dhgroup=ffdhe1024"),
            alloc::format!("nvmf.connect=10.0.0.2,nqn=nqn.a,dhchap_ctrl={k}"),
            "nvmf.connect=10.0.0.2,nqn=nqn.a,dhchap=DHHC-1:01:x:".into(),
        ] {
            assert!(parse(&bad).is_err(), "{bad}");
        }
        // build_target hands the policies to the core.
        let a = parse(&alloc::format!("nvmet.subsys=nqn.a,ns=null:1M,host=nqn.h,dhchap={k}")).unwrap();
        let (cfg, subs) = build_target(&a, crate::nvmet::TargetConfig::default(), make).unwrap();
        assert_eq!(cfg.host_auth.len(), 1);
        assert_eq!((cfg.host_auth[0].subnqn.as_str(), cfg.host_auth[0].hostnqn.as_str()), ("nqn.a", "nqn.h"));
        assert!(crate::nvmet::Core::new(cfg, subs).is_ok());
    }

    #[test]
    fn builds_a_core() {
        let bad = parse("nvmet.subsys=nqn.b,ns=nvme:1,allow_any").unwrap();
        let e = build_target(&bad, crate::nvmet::TargetConfig::default(), make).err().unwrap();
        assert_eq!(e.why, "no local NVMe in this test");
        let a = parse("nvmet.listen=10.0.0.1 nvmet.subsys=nqn.a,ns=null:1M,ns=ram:64K,host=nqn.h").unwrap();
        let (cfg, subs) = build_target(&a, crate::nvmet::TargetConfig::default(), make).unwrap();
        assert_eq!(cfg.ports[0].trsvcid, 4420);
        assert_eq!(subs[0].namespaces.len(), 2);
        assert_eq!(subs[0].namespaces[1].nsid, 2);
        assert_ne!(subs[0].namespaces[0].nguid, subs[0].namespaces[1].nguid);
        assert_ne!(derive_nguid("nqn.a", 1), derive_nguid("nqn.b", 1));
        assert!(crate::nvmet::Core::new(cfg, subs).is_ok());
        // Bound words reach the target's limits, over the caller's base (its cntlid seed kept).
        let a = parse("nvmet.subsys=nqn.a,ns=null:1M,host=nqn.h nvmet.max-ctrls-per-host=2 nvmet.connect-deadline=300").unwrap();
        let mut base = crate::nvmet::TargetConfig::default();
        base.limits.cntlid_seed = 7;
        let (cfg, _) = build_target(&a, base, make).unwrap();
        assert_eq!((cfg.limits.max_ctrls_per_host, cfg.limits.connect_deadline_ms, cfg.limits.cntlid_seed), (2, 300, 7));
    }
}
