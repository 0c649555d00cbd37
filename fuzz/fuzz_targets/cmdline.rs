//! The appliance's command line: arbitrary words into the NVMe-oF grammar
//! (`nvmeof::cmdline::parse`, its bound words the one table `nvmeof::cmdline::bounds::WORDS`),
//! into the kernel's option splitter and number parser (`kernel::cmdline`) and into the image's
//! own option table (`appliance_config::OPTIONS`, then the checks across options,
//! `appliance_config::check`), as the image reads its command line. Nothing may panic. What the
//! grammar accepts must round-trip: written back in its canonical words (every field the parse
//! produced, DH-HMAC-CHAP secrets in their DHHC-1 form) it parses to the same settings. A
//! refused line is refused for one of its own words; in a line the table accepts, every word
//! is accepted alone too (no setter leans on another word's state).
#![no_main]

use kernel::cmdline::{parse_u64, CmdlineError};
use nvmeof::cmdline::{parse, NsSpec, NvmeofArgs};
use nvmeof::bench::Pattern;

fn ms(ns: u64) -> u64 {
    ns / 1_000_000
}

/// `a` in the grammar's words (each field once, in a form the parser reads back).
fn render(a: &NvmeofArgs) -> String {
    let mut w: Vec<String> = Vec::new();
    let ip = |x: [u8; 4]| format!("{}.{}.{}.{}", x[0], x[1], x[2], x[3]);
    if let Some((addr, port)) = a.listen {
        w.push(format!("nvmet.listen={}:{port}", ip(addr)));
    }
    if let Some(n) = a.poll_groups {
        w.push(format!("nvmet.poll_groups={n}"));
    }
    for s in &a.subsystems {
        let mut o = vec![s.nqn.clone()];
        for ns in &s.namespaces {
            match ns {
                NsSpec::Ram { bytes, block_size } => o.push(format!("bs={block_size},ns=ram:{bytes}")),
                NsSpec::Null { bytes, block_size } => o.push(format!("bs={block_size},ns=null:{bytes}")),
                NsSpec::Nvme { nsid, .. } => o.push(format!("ns=nvme:{nsid}")),
            }
        }
        // Each host's DH-HMAC-CHAP settings follow it; `host_auth` keeps them in host order.
        let mut auth = s.host_auth.iter().peekable();
        for h in &s.hosts {
            o.push(format!("host={h}"));
            if let Some((_, p)) = auth.next_if(|(n, _)| n == h) {
                o.push(format!("dhchap={},dhchap_hash={},dhchap_dhgroup={}", p.key.encode(), p.hash.name(), p.dhgroup.name()));
                if let Some(c) = &p.ctrl_key {
                    o.push(format!("dhchap_ctrl={}", c.encode()));
                }
            }
        }
        assert!(auth.next().is_none(), "DH-HMAC-CHAP settings for a host not listed: {s:?}");
        if s.allow_any_host {
            o.push("allow_any".into());
        }
        assert!(s.ns_ident.is_empty() && s.serial.is_none() && s.model.is_none(), "the command line sets no identities: {s:?}");
        w.push(format!("nvmet.subsys={}", o.join(",")));
    }
    if let Some(c) = &a.connect {
        let mut o = vec![format!("{}:{}", ip(c.addr), c.port), format!("nqn={}", c.nqn)];
        if let Some(h) = &c.hostnqn {
            o.push(format!("hostnqn={h}"));
        }
        o.push(format!("queues={},qd={},kato={}", c.queues, c.qd, c.kato_ms));
        o.push(format!("keys={}", if c.per_io_keys { "per-io" } else { "static" }));
        o.push(format!("inval={}", if c.invalidate { "remote" } else { "local" }));
        assert_eq!(c.reconnect_delay_ns % 1_000_000, 0, "durations are whole ms: {c:?}");
        o.push(format!("reconnect_delay={}ms", ms(c.reconnect_delay_ns)));
        match c.ctrl_loss_tmo_ns {
            None => o.push("ctrl_loss_tmo=-1".into()),
            Some(t) => {
                assert_eq!(t % 1_000_000, 0, "durations are whole ms: {c:?}");
                o.push(format!("ctrl_loss_tmo={}ms", ms(t)));
            }
        }
        if let Some(k) = &c.dhchap {
            o.push(format!("dhchap={}", k.secret.encode()));
            if let Some(x) = &k.ctrl {
                o.push(format!("dhchap_ctrl={}", x.encode()));
            }
        }
        w.push(format!("nvmf.connect={}", o.join(",")));
    }
    if let Some(b) = &a.bench {
        let pat = match b.pattern {
            Pattern::RandRead => "randread".to_string(),
            Pattern::RandWrite => "randwrite".into(),
            Pattern::SeqRead => "read".into(),
            Pattern::SeqWrite => "write".into(),
            Pattern::RandMix { read_pct } => format!("randrw,read={read_pct}"),
        };
        assert_eq!(b.duration_ns % 1_000_000, 0, "durations are whole ms: {b:?}");
        w.push(format!("nvmf.bench={pat},bs={},qd={},time={}ms,ios={},seed={},threads={}", b.block_size, b.queue_depth, ms(b.duration_ns), b.max_ios, b.seed, if b.threads { "on" } else { "off" }));
    }
    for b in &a.bounds {
        w.push(format!("{}={}", b.name(), b.value));
    }
    if let Some(v) = a.verify {
        w.push(format!("nvmf.verify={},threads={}", v.count, if v.threads { "on" } else { "off" }));
    }
    w.join(" ")
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let line = String::from_utf8_lossy(data);
    // The grammar: an answer, never a panic; what it accepts round-trips.
    if let Ok(a) = parse(&line) {
        let again = render(&a);
        match parse(&again) {
            Ok(b) => assert_eq!(a, b, "`{line}` -> `{again}` parsed differently"),
            Err(e) => panic!("`{line}` accepted, its canonical form `{again}` refused: {e:?}"),
        }
    }
    // The image's splitter: with no option known, the first word is refused by its name.
    let none: &[kernel::cmdline::Opt<()>] = &[];
    match kernel::cmdline::parse(&line, none, &mut ()) {
        Ok(()) => assert!(line.split_whitespace().next().is_none(), "`{line}`: a word passed an empty table"),
        Err(CmdlineError::Unknown { name }) => {
            let first = line.split_whitespace().next().expect("a word");
            assert_eq!(name, first.split_once('=').map_or(first, |w| w.0));
        }
        Err(e) => panic!("`{line}`: {e:?} from an empty table"),
    }
    // The image's table: an error names a word of the line; an accepted line's words stand alone.
    let mut cfg = appliance_config::Config::default();
    match kernel::cmdline::parse(&line, appliance_config::OPTIONS, &mut cfg) {
        Ok(()) => {
            let _ = appliance_config::check(&cfg);
            for w in line.split_whitespace() {
                let mut alone = appliance_config::Config::default();
                if let Err(e) = kernel::cmdline::parse(w, appliance_config::OPTIONS, &mut alone) {
                    panic!("`{line}` accepted, its word `{w}` alone refused: {e}");
                }
            }
        }
        Err(CmdlineError::Unknown { name }) => assert!(line.split_whitespace().any(|w| w.split_once('=').map_or(w, |p| p.0) == name), "`{line}`: {name} is no word of it"),
        Err(CmdlineError::Malformed { name, value, .. }) => {
            assert!(line.split_whitespace().any(|w| w.split_once('=').unwrap_or((w, "")) == (name, value)), "`{line}`: {name}={value} is no word of it")
        }
    }
    // Numbers: any u64 in decimal and in 0x form reads back; the input's own words never panic.
    if data.len() >= 8 {
        let n = u64::from_le_bytes(data[..8].try_into().expect("8 bytes"));
        assert_eq!(parse_u64(&n.to_string()), Some(n));
        assert_eq!(parse_u64(&format!("{n:#x}")), Some(n));
    }
    for w in line.split_whitespace() {
        let _ = parse_u64(w.split_once('=').map_or(w, |p| p.1));
    }
});
