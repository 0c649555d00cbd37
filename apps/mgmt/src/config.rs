//! config: the management plane's command-line words (`mgmt.listen=[IP:]PORT`, `mgmt.prefix=N`,
//! `mgmt.control=on`, `mgmt=off`), the same words in the image's kernel command line and
//! `emu-runner --mgmt`.

use alloc::format;
use alloc::string::String;

/// Default metrics port (the Prometheus node-exporter convention).
pub const DEFAULT_PORT: u16 = 9100;

/// What the words set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MgmtConfig {
    /// Serve at all (`mgmt=off` turns the stack off; ARP then stays with the driver alone).
    pub enabled: bool,
    /// Address the stack answers on (`None`: the adapter's own address).
    pub ip: Option<[u8; 4]>,
    /// Prefix length of the management subnet (ARP is answered only for senders on it).
    pub prefix: u8,
    /// TCP port of the HTTP server.
    pub port: u16,
    /// `mgmt.control=on`: accept the requests that change the target (`PUT`/`DELETE` of a
    /// port's subsystem link, [`crate::http::Page::Link`]); off by default, as the plane has no
    /// authentication: whoever reaches the management subnet may then change what is served.
    pub control: bool,
}

impl Default for MgmtConfig {
    fn default() -> Self {
        MgmtConfig { enabled: true, ip: None, prefix: 24, port: DEFAULT_PORT, control: false }
    }
}

fn parse_ip(s: &str) -> Option<[u8; 4]> {
    let mut o = [0u8; 4];
    let mut it = s.split('.');
    for b in &mut o {
        *b = it.next()?.parse().ok()?;
    }
    it.next().is_none().then_some(o)
}

/// Whether `key` is one of this module's words.
pub fn is_word(key: &str) -> bool {
    key == "mgmt" || key.starts_with("mgmt.")
}

/// Apply one word `key=value` (the image's command-line table calls this per option).
pub fn apply(c: &mut MgmtConfig, key: &str, v: &str) -> Result<(), &'static str> {
    match key {
        "mgmt" => {
            c.enabled = match v {
                "on" => true,
                "off" => false,
                _ => return Err("expected mgmt=on or mgmt=off"),
            }
        }
        "mgmt.listen" => {
            let (ip, port) = match v.rsplit_once(':') {
                Some((ip, port)) => (Some(parse_ip(ip).ok_or("expected [A.B.C.D:]PORT (bad IPv4 address)")?), port),
                None => (None, v),
            };
            c.port = port.parse().ok().filter(|&p| p != 0).ok_or("expected [A.B.C.D:]PORT (TCP port 1-65535)")?;
            c.ip = ip;
        }
        "mgmt.prefix" => c.prefix = v.parse().ok().filter(|&p| (1..=32).contains(&p)).ok_or("expected a prefix length 1-32")?,
        "mgmt.control" => {
            c.control = match v {
                "on" => true,
                "off" => false,
                _ => return Err("expected mgmt.control=on or mgmt.control=off"),
            }
        }
        _ => return Err("unknown management word (known: mgmt=on|off, mgmt.listen=[IP:]PORT, mgmt.prefix=N, mgmt.control=on|off)"),
    }
    Ok(())
}

/// Apply every `mgmt.*` / `mgmt=` word of a space-separated command line (`on` alone stands
/// for the defaults); other words are ignored (they belong to other parts). An unknown
/// `mgmt.` word or a bad value is an error naming the word.
pub fn parse(cmdline: &str) -> Result<MgmtConfig, String> {
    let mut c = MgmtConfig::default();
    for w in cmdline.split_ascii_whitespace() {
        let (k, v) = w.split_once('=').unwrap_or((w, ""));
        if w == "on" || w == "off" {
            apply(&mut c, "mgmt", w).map_err(|why| format!("{w}: {why}"))?;
        } else if is_word(k) {
            apply(&mut c, k, v).map_err(|why| format!("{w}: {why}"))?;
        }
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words() {
        assert_eq!(parse("ip=10.0.0.5 nvmet.subsys=x").unwrap(), MgmtConfig::default());
        let c = parse("mgmt.listen=9200").unwrap();
        assert_eq!((c.port, c.ip), (9200, None));
        let c = parse("mgmt.listen=10.0.0.7:80 mgmt.prefix=16").unwrap();
        assert_eq!((c.port, c.ip, c.prefix), (80, Some([10, 0, 0, 7]), 16));
        assert!(!parse("mgmt=off").unwrap().enabled);
        assert!(!parse("").unwrap().control && parse("mgmt.control=on").unwrap().control);
        assert!(parse("mgmt.control=yes").is_err());
        assert!(parse("on").unwrap().enabled);
        assert!(parse("mgmt.listen=0").unwrap_err().contains("mgmt.listen=0"));
        assert!(parse("mgmt.listen=1.2.3:80").is_err());
        assert!(parse("mgmt.prefix=33").is_err());
        assert!(parse("mgmt.lisen=80").unwrap_err().contains("unknown"));
    }
}
