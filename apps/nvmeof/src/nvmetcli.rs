//! nvmetcli's saved configuration → the target settings the command-line words give
//! ([`crate::cmdline::NvmeofArgs`]), so a configuration exported from a Linux nvmet (`nvmetcli
//! save`, /etc/nvmet/config.json) boots the appliance with only its device paths rewritten.
//!
//! The shape follows the dump rules of linux-nvme/nvmetcli `nvmet/nvme.py`: the root holds
//! `hosts`, `ports`, `subsystems`; every configfs attribute group becomes an object of strings
//! named after the group (`attr`, `addr`, `param`, `device`, `ana`, `resv`), `enable`, `nsid`,
//! `portid`, `grpid` and `ana_grpid` are numbers. What it means here:
//! - `ports[]`: `addr.trtype` must be `rdma` and `addr.adrfam` `ipv4`; `traddr:trsvcid` is where
//!   the port listens; several ports listen on several service IDs of the one address (the
//!   appliance has one; ports on two addresses are refused). A port serves and lists only the
//!   subsystems it names (as with nvmet); a subsystem no port names is not served.
//!   `referrals` must be empty; `param` (`inline_data_size`, `max_queue_size`, `pi_enable`) and
//!   `ana_groups` are read and not applied (the appliance has fixed values and one ANA state).
//! - `subsystems[]`: `nqn`, `allowed_hosts`, `attr.allow_any_host` ("0"/"1"), `attr.serial`,
//!   `attr.model` (reported in Identify Controller); the other `attr` keys (`version`,
//!   `cntlid_min/max`, `firmware`, `ieee_oui`, `pi_enable`, `qid_max`) are read and not applied.
//!   An enabled `passthru` is refused (a disabled one, as kernels with passthru support save for
//!   every subsystem, is read and ignored).
//! - `namespaces[]`: `nsid`, `enable` (0: not served), `device.path` as an appliance backing:
//!   `ram:SIZE`, `null:SIZE` (K/M/G suffixes) or `nvme:NSID` (a local NVMe namespace); a Linux
//!   path such as `/dev/nvme0n1` is refused, naming it. `device.nguid` is reported when not all
//!   zero (else derived from the NQN and NSID, stable across boots); `device.uuid` is read and not
//!   reported (the target's identification descriptors carry the NGUID).
//! - `hosts[]`: `nqn`.
//!
//! Any other key, a wrong type or a bad value is an error naming its place
//! (`subsystems[1].attr.foo`); malformed JSON names its line and column. Nothing is applied
//! unless the whole file is good.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use serde_json::{Map, Value};

use crate::cmdline::{nqn_ok, parse_addr, parse_size, NsIdent, NsSpec, NvmeofArgs, PortSpec, SubsysSpec};

/// What is wrong with a configuration file, and where (a key path, or `line L column C`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub at: String,
    pub why: String,
}

impl core::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}: {}", self.at, self.why)
    }
}

fn bad(at: &str, why: impl Into<String>) -> ConfigError {
    ConfigError { at: at.to_string(), why: why.into() }
}

/// Parse a saved nvmetcli configuration into the target's settings.
pub fn parse(json: &[u8]) -> Result<NvmeofArgs, ConfigError> {
    let root: Value = serde_json::from_slice(json)
        .map_err(|e| bad(&format!("line {} column {}", e.line(), e.column()), format!("not valid JSON ({e})")))?;
    let root = object(&root, "the file")?;
    known(root, "", &["hosts", "ports", "subsystems"])?;
    for (i, h) in array(root.get("hosts"), "hosts")?.iter().enumerate() {
        let at = format!("hosts[{i}]");
        let h = object(h, &at)?;
        known(h, &at, &["nqn"])?;
        nqn(h.get("nqn"), &format!("{at}.nqn"))?;
    }
    let mut out = NvmeofArgs::default();
    let mut served: Vec<String> = Vec::new();
    for (i, p) in array(root.get("ports"), "ports")?.iter().enumerate() {
        let at = format!("ports[{i}]");
        let p = object(p, &at)?;
        known(p, &at, &["portid", "addr", "param", "subsystems", "ana_groups", "referrals", "enable"])?;
        let portid = number(p.get("portid"), &format!("{at}.portid"), 1, u16::MAX as u64)? as u16;
        let listen = port_addr(p.get("addr"), &format!("{at}.addr"))?;
        if out.ports.iter().any(|q| q.portid == portid) {
            return Err(bad(&format!("{at}.portid"), format!("port {portid} is defined twice")));
        }
        match out.listen {
            Some(l) if l.0 != listen.0 => return Err(bad(&format!("{at}.addr.traddr"), "a second address: the appliance has one address (its ports differ by trsvcid)")),
            _ if out.ports.iter().any(|q| q.addr == listen) => return Err(bad(&format!("{at}.addr.trsvcid"), "another port listens on this address and service ID")),
            Some(_) => {}
            None => out.listen = Some(listen),
        }
        let mut port = PortSpec { portid, addr: listen, subsystems: Vec::new() };
        let param = format!("{at}.param");
        if let Some(v) = p.get("param") {
            strings(object(v, &param)?, &param, &["inline_data_size", "max_queue_size", "pi_enable"])?;
        }
        for (j, g) in array(p.get("ana_groups"), &format!("{at}.ana_groups"))?.iter().enumerate() {
            let gat = format!("{at}.ana_groups[{j}]");
            let g = object(g, &gat)?;
            known(g, &gat, &["grpid", "ana", "enable"])?;
            number(g.get("grpid"), &format!("{gat}.grpid"), 1, 1024)?;
        }
        if !array(p.get("referrals"), &format!("{at}.referrals"))?.is_empty() {
            return Err(bad(&format!("{at}.referrals"), "referrals are not supported"));
        }
        for (j, s) in array(p.get("subsystems"), &format!("{at}.subsystems"))?.iter().enumerate() {
            let n = nqn(Some(s), &format!("{at}.subsystems[{j}]"))?;
            if !served.contains(&n) {
                served.push(n.clone());
            }
            if !port.subsystems.contains(&n) {
                port.subsystems.push(n);
            }
        }
        out.ports.push(port);
    }
    let mut seen: Vec<String> = Vec::new();
    for (i, s) in array(root.get("subsystems"), "subsystems")?.iter().enumerate() {
        let at = format!("subsystems[{i}]");
        let spec = subsystem(s, &at)?;
        if seen.contains(&spec.nqn) {
            return Err(bad(&format!("{at}.nqn"), format!("{} is named twice", spec.nqn)));
        }
        seen.push(spec.nqn.clone());
        if served.contains(&spec.nqn) {
            out.subsystems.push(spec);
        }
    }
    if let Some(n) = served.iter().find(|n| !seen.contains(n)) {
        return Err(bad("ports", format!("a port names {n}, which no subsystem defines")));
    }
    Ok(out)
}

/// Add a configuration file's settings to those of the command-line words: its subsystems join
/// theirs (an NQN defined by both is an error), its ports are the target's (the words'
/// subsystems linked to every one of them), its listen address is used unless the words give
/// one, which must then be one of its ports'.
pub fn apply(args: &mut NvmeofArgs, file: NvmeofArgs) -> Result<(), ConfigError> {
    match (args.listen, file.listen) {
        (Some(a), Some(_)) if !file.ports.iter().any(|p| p.addr == a) => return Err(bad("ports", "the configuration listens elsewhere than nvmet.listen= says")),
        (None, l) => args.listen = l,
        _ => {}
    }
    args.ports = file.ports;
    for p in &mut args.ports {
        p.subsystems.extend(args.subsystems.iter().map(|s| s.nqn.clone()));
    }
    for s in file.subsystems {
        if args.subsystems.iter().any(|t| t.nqn == s.nqn) {
            return Err(bad("subsystems", format!("{} is defined by the configuration and by nvmet.subsys=", s.nqn)));
        }
        args.subsystems.push(s);
    }
    Ok(())
}

fn subsystem(v: &Value, at: &str) -> Result<SubsysSpec, ConfigError> {
    let s = object(v, at)?;
    known(s, at, &["nqn", "allowed_hosts", "attr", "namespaces", "passthru", "enable"])?;
    // Kernels with passthru support give every subsystem a (disabled) passthru node, and
    // nvmetcli saves it; only an enabled one asks for something the appliance does not do.
    for (j, p) in array(s.get("passthru"), &format!("{at}.passthru"))?.iter().enumerate() {
        let pat = format!("{at}.passthru[{j}]");
        let p = object(p, &pat)?;
        known(p, &pat, &["device", "enable", "clear_ids", "admin_timeout", "io_timeout"])?;
        if number(p.get("enable").or(Some(&Value::from(0u8))), &format!("{pat}.enable"), 0, 1)? == 1 {
            return Err(bad(&format!("{pat}.enable"), "passthru subsystems are not supported"));
        }
    }
    let mut spec = SubsysSpec { nqn: nqn(s.get("nqn"), &format!("{at}.nqn"))?, ..Default::default() };
    for (j, h) in array(s.get("allowed_hosts"), &format!("{at}.allowed_hosts"))?.iter().enumerate() {
        spec.hosts.push(nqn(Some(h), &format!("{at}.allowed_hosts[{j}]"))?);
    }
    let attr_at = format!("{at}.attr");
    if let Some(a) = s.get("attr") {
        let a = object(a, &attr_at)?;
        let keys = ["allow_any_host", "serial", "model", "version", "cntlid_min", "cntlid_max", "firmware", "ieee_oui", "pi_enable", "qid_max"];
        strings(a, &attr_at, &keys)?;
        spec.allow_any_host = match a.get("allow_any_host").and_then(Value::as_str) {
            None | Some("0") => false,
            Some("1") => true,
            Some(_) => return Err(bad(&format!("{attr_at}.allow_any_host"), "must be \"0\" or \"1\"")),
        };
        // Identify Controller SN is 20 ASCII bytes, MN 40 (NVMe Base, Identify Controller).
        spec.serial = text(a, "serial", &attr_at, 20)?;
        spec.model = text(a, "model", &attr_at, 40)?;
    }
    for (j, n) in array(s.get("namespaces"), &format!("{at}.namespaces"))?.iter().enumerate() {
        let nat = format!("{at}.namespaces[{j}]");
        let Some((backing, ident)) = namespace(n, &nat)? else { continue };
        if spec.ns_ident.iter().any(|i| i.nsid == ident.nsid) {
            return Err(bad(&format!("{nat}.nsid"), format!("NSID {} is used twice", ident.nsid)));
        }
        spec.namespaces.push(backing);
        spec.ns_ident.push(ident);
    }
    Ok(spec)
}

/// One namespace; `None` when it is not enabled.
fn namespace(v: &Value, at: &str) -> Result<Option<(NsSpec, NsIdent)>, ConfigError> {
    let n = object(v, at)?;
    known(n, at, &["nsid", "enable", "device", "ana", "resv", "ana_grpid"])?;
    let nsid = number(n.get("nsid"), &format!("{at}.nsid"), 1, crate::nvmet::MAX_NSID as u64)? as u32;
    if let Some(g) = n.get("ana_grpid") {
        number(Some(g), &format!("{at}.ana_grpid"), 0, 1024)?;
    }
    for group in ["ana", "resv"] {
        let gat = format!("{at}.{group}");
        if let Some(g) = n.get(group) {
            let keys: &[&str] = if group == "ana" { &["grpid"] } else { &["enable"] };
            strings(object(g, &gat)?, &gat, keys)?;
        }
    }
    let enabled = match n.get("enable") {
        None => true,
        Some(e) => number(Some(e), &format!("{at}.enable"), 0, 1)? == 1,
    };
    let dat = format!("{at}.device");
    let d = object(n.get("device").ok_or_else(|| bad(&dat, "missing"))?, &dat)?;
    strings(d, &dat, &["path", "nguid", "uuid"])?;
    let path = d.get("path").and_then(Value::as_str).ok_or_else(|| bad(&format!("{dat}.path"), "missing"))?;
    let backing = backing(path).map_err(|why| bad(&format!("{dat}.path"), why))?;
    let nguid = match d.get("nguid").and_then(Value::as_str) {
        None => None,
        Some(g) => Some(guid(g).ok_or_else(|| bad(&format!("{dat}.nguid"), format!("{g:?} is not a 32-hex-digit GUID")))?),
    };
    if let Some(u) = d.get("uuid").and_then(Value::as_str) {
        if guid(u).is_none() {
            return Err(bad(&format!("{dat}.uuid"), format!("{u:?} is not a UUID")));
        }
    }
    let nguid = nguid.filter(|g| *g != [0; 16]);
    Ok(enabled.then_some((backing, NsIdent { nsid, nguid })))
}

/// `ram:SIZE`, `null:SIZE` or `nvme:NSID` (512-byte blocks for RAM and null).
fn backing(path: &str) -> Result<NsSpec, String> {
    let refuse = || format!("{path:?} is not an appliance backing: write ram:SIZE, null:SIZE or nvme:NSID");
    let (kind, arg) = path.split_once(':').ok_or_else(refuse)?;
    match kind {
        "ram" | "null" => {
            let bytes = parse_size(arg).filter(|&b| b >= 512 && b % 512 == 0).ok_or_else(|| format!("{path:?}: SIZE must be a multiple of 512 bytes (K/M/G suffixes)"))?;
            Ok(if kind == "ram" { NsSpec::Ram { bytes, block_size: 512 } } else { NsSpec::Null { bytes, block_size: 512 } })
        }
        "nvme" => arg.parse().ok().filter(|&n: &u32| n != 0).map(|nsid| NsSpec::Nvme { ctrl: None, nsid }).ok_or_else(|| format!("{path:?}: NSID must be a number from 1")),
        _ => Err(refuse()),
    }
}

/// `addr`: rdma over IPv4; returns where to listen.
fn port_addr(v: Option<&Value>, at: &str) -> Result<([u8; 4], u16), ConfigError> {
    let a = object(v.ok_or_else(|| bad(at, "missing"))?, at)?;
    strings(a, at, &["adrfam", "traddr", "treq", "trsvcid", "trtype", "tsas"])?;
    let get = |k: &str| a.get(k).and_then(Value::as_str).ok_or_else(|| bad(&format!("{at}.{k}"), "missing"));
    let trtype = get("trtype")?;
    if trtype != "rdma" {
        return Err(bad(&format!("{at}.trtype"), format!("{trtype:?}: the appliance serves rdma only")));
    }
    let adrfam = get("adrfam")?;
    if adrfam != "ipv4" {
        return Err(bad(&format!("{at}.adrfam"), format!("{adrfam:?}: the appliance listens on ipv4 only")));
    }
    let traddr = get("traddr")?;
    let port = get("trsvcid")?;
    let (ip, _) = parse_addr(traddr).filter(|_| !traddr.contains(':')).ok_or_else(|| bad(&format!("{at}.traddr"), format!("{traddr:?} is not an IPv4 address")))?;
    let port = port.parse::<u16>().ok().filter(|&p| p != 0).ok_or_else(|| bad(&format!("{at}.trsvcid"), format!("{port:?} is not a port number")))?;
    Ok((ip, port))
}

/// A GUID written as 32 hex digits, with or without dashes (nvmet prints 8-4-4-4-12).
fn guid(s: &str) -> Option<[u8; 16]> {
    let hex: Vec<u8> = s.bytes().filter(|&b| b != b'-').collect();
    if hex.len() != 32 || s.len() > 36 {
        return None;
    }
    let mut g = [0u8; 16];
    for (i, pair) in hex.chunks_exact(2).enumerate() {
        let d = |c: u8| (c as char).to_digit(16);
        g[i] = (d(pair[0])? * 16 + d(pair[1])?) as u8;
    }
    Some(g)
}

fn object<'a>(v: &'a Value, at: &str) -> Result<&'a Map<String, Value>, ConfigError> {
    v.as_object().ok_or_else(|| bad(at, "expected an object"))
}

/// A list; absent is empty.
fn array<'a>(v: Option<&'a Value>, at: &str) -> Result<&'a [Value], ConfigError> {
    match v {
        None => Ok(&[]),
        Some(v) => v.as_array().map(Vec::as_slice).ok_or_else(|| bad(at, "expected a list")),
    }
}

fn known(m: &Map<String, Value>, at: &str, keys: &[&str]) -> Result<(), ConfigError> {
    match m.keys().find(|k| !keys.contains(&k.as_str())) {
        Some(k) if at.is_empty() => Err(bad(k, "unknown key")),
        Some(k) => Err(bad(&format!("{at}.{k}"), "unknown key")),
        None => Ok(()),
    }
}

/// An attribute group: only `keys`, each a string (as configfs attributes are saved).
fn strings(m: &Map<String, Value>, at: &str, keys: &[&str]) -> Result<(), ConfigError> {
    known(m, at, keys)?;
    match m.iter().find(|(_, v)| !v.is_string()) {
        Some((k, _)) => Err(bad(&format!("{at}.{k}"), "expected a string")),
        None => Ok(()),
    }
}

fn number(v: Option<&Value>, at: &str, min: u64, max: u64) -> Result<u64, ConfigError> {
    let v = v.ok_or_else(|| bad(at, "missing"))?;
    v.as_u64().filter(|n| (min..=max).contains(n)).ok_or_else(|| bad(at, format!("expected a whole number from {min} to {max}")))
}

fn nqn(v: Option<&Value>, at: &str) -> Result<String, ConfigError> {
    let s = v.ok_or_else(|| bad(at, "missing"))?.as_str().ok_or_else(|| bad(at, "expected a string"))?;
    if nqn_ok(s) {
        Ok(s.to_string())
    } else {
        Err(bad(at, format!("{s:?} is not an NQN (1 to 223 ASCII bytes, no spaces)")))
    }
}

/// An optional printable-ASCII attribute of at most `max` bytes; empty is absent.
fn text(m: &Map<String, Value>, key: &str, at: &str, max: usize) -> Result<Option<String>, ConfigError> {
    let Some(s) = m.get(key).and_then(Value::as_str) else { return Ok(None) };
    if s.len() > max || !s.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err(bad(&format!("{at}.{key}"), format!("{s:?}: at most {max} printable ASCII characters")));
    }
    Ok((!s.is_empty()).then(|| s.to_string()))
}
