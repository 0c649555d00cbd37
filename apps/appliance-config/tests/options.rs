//! The image's option table on the host: a line as the suites boot with sets every field it
//! names, a bad word stops parsing with an error naming that word, and the checks across
//! options refuse what the image cannot run.

use appliance_config::storage::Test;
use appliance_config::{check, parse_bdf, Config, Role, OPTIONS};
use kernel::cmdline::{parse, CmdlineError};

fn config(line: &str) -> Result<Config, String> {
    let mut c = Config::default();
    parse(line, OPTIONS, &mut c).map_err(|e| e.to_string())?;
    Ok(c)
}

#[test]
fn a_target_line_sets_what_it_names() {
    let c = config("log=debug exit=halt ip=10.0.0.1 nvmet.subsys=nqn.2026-11.io.appliance:d0,ns=ram:64M,allow_any nvmet.serve-ctrls=1 mgmt.listen=9200 mgmt.control=on ns=ram:16,nvme0n1 nvme.selftest=pattern:1,bad connectx=03:00.0 cm.max-conns=10 cpus=2").expect("accepted");
    assert_eq!((c.log, c.ip, c.serve_ctrls, c.cpus, c.connectx), (log::LevelFilter::Debug, Some([10, 0, 0, 1]), 1, Some(2), Some((3, 0, 0))));
    assert_eq!((c.mgmt.port, c.mgmt.control), (9200, true));
    assert_eq!(c.nvmeof.subsystems.len(), 1);
    assert_eq!(c.nvmeof.bounds.len(), 1);
    assert_eq!(c.storage.ns.len(), 2);
    assert_eq!(c.storage.tests, vec![Test::Pattern(1), Test::Bad]);
    assert_eq!(check(&c), Ok(Role::Target));
}

#[test]
fn a_bad_word_is_named() {
    let mut c = Config::default();
    assert!(matches!(parse("log=info nope=1", OPTIONS, &mut c), Err(CmdlineError::Unknown { name: "nope" })));
    assert!(matches!(parse("connectx=03:20.0", OPTIONS, &mut c), Err(CmdlineError::Malformed { name: "connectx", value: "03:20.0", .. })));
    let twice = config("nvmet.listen=10.0.0.1 nvmet.listen=10.0.0.1").unwrap_err();
    assert!(twice.contains("nvmet.listen") && twice.contains("given twice"), "{twice}");
    assert!(config("mgmt.control=yes").unwrap_err().contains("mgmt.control"));
    assert_eq!(parse_bdf("ff:1f.7"), Some((0xff, 31, 7)));
    assert_eq!((parse_bdf("0:0.8"), parse_bdf("100:0.0"), parse_bdf(":0.0")), (None, None, None));
}

#[test]
fn checks_across_options_refuse_what_cannot_run() {
    let both = config("ip=10.0.0.2 nvmet.subsys=nqn.a:b,ns=ram:1M,allow_any nvmf.connect=10.0.0.1,nqn=nqn.a:b").unwrap();
    assert!(check(&both).unwrap_err().contains("one NVMe-oF role"));
    let no_address = config("nvmet.subsys=nqn.a:b,ns=ram:1M,allow_any").unwrap();
    assert!(check(&no_address).unwrap_err().contains("needs an address"));
    let elsewhere = config("ip=10.0.0.2 nvmet.listen=10.0.0.3 nvmet.subsys=nqn.a:b,ns=ram:1M,allow_any").unwrap();
    assert!(check(&elsewhere).unwrap_err().contains("different addresses"));
    assert_eq!(check(&config("").unwrap()), Ok(Role::None));
}

#[test]
fn every_option_has_one_entry_and_a_help() {
    for (i, o) in OPTIONS.iter().enumerate() {
        assert!(!o.help.is_empty(), "{}", o.name);
        assert!(OPTIONS[i + 1..].iter().all(|p| p.name != o.name), "{} twice", o.name);
    }
}
