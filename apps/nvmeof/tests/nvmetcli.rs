//! nvmetcli's saved configuration (tests/data/nvmetcli-rdma.json: the shape `nvmetcli save`
//! writes for an RDMA port, two served subsystems with an allow-list, one subsystem on no
//! port, a disabled namespace) read into the target's settings, and the errors a person gets.

use nvmeof::cmdline::{build_target, NsSpec};
use nvmeof::nvmetcli::parse;

const SAVED: &str = include_str!("data/nvmetcli-rdma.json");

/// A store of `.0` bytes for the configuration tests (never given I/O).
struct Dev(u64);
impl blockdev::BlockDevice for Dev {
    fn block_size(&self) -> u32 {
        512
    }
    fn num_blocks(&self) -> u64 {
        self.0 / 512
    }
    fn max_transfer_blocks(&self) -> u32 {
        256
    }
    fn submit(&mut self, _: &blockdev::BlockIo) -> Result<(), blockdev::BlockError> {
        Ok(())
    }
    fn poll(&mut self, _: &mut [blockdev::BlockDone]) -> usize {
        0
    }
}

#[test]
fn a_saved_rdma_configuration_gives_the_ports_subsystems_hosts_and_namespaces() {
    let a = parse(SAVED.as_bytes()).unwrap();
    assert_eq!(a.listen, Some(([10, 77, 0, 1], 4420)));
    let nqns: Vec<&str> = a.subsystems.iter().map(|s| s.nqn.as_str()).collect();
    assert_eq!(nqns, ["nqn.2026-11.io.example:db", "nqn.2026-11.io.example:scratch"], "only subsystems a port names");
    let db = &a.subsystems[0];
    assert!(!db.allow_any_host);
    assert_eq!(db.hosts, ["nqn.2014-08.org.nvmexpress:uuid:8f3c2a51-1d2e-4b7a-9c0d-5e6f7a8b9c0d"]);
    assert_eq!(db.namespaces, [NsSpec::Ram { bytes: 64 << 20, block_size: 512 }, NsSpec::Null { bytes: 1 << 30, block_size: 512 }]);
    assert_eq!(db.ns_ident.iter().map(|i| i.nsid).collect::<Vec<_>>(), [1, 7], "NSID 3 is not enabled");
    assert_eq!(db.ns_ident[0].nguid.unwrap()[..4], [0x6a, 0x2f, 0x01, 0xc4]);
    assert_eq!(db.ns_ident[1].nguid, None, "an all-zero NGUID means none given");
    assert_eq!((db.serial.as_deref(), db.model.as_deref()), (Some("3a9f0c1d2e4b5a69"), Some("Linux")));
    assert!(a.subsystems[1].allow_any_host && a.subsystems[1].hosts.is_empty());
}

#[test]
fn the_target_is_built_with_the_files_nsids_nguids_serials_and_models() {
    let a = parse(SAVED.as_bytes()).unwrap();
    let (cfg, subs) = build_target(&a, Default::default(), |spec| match spec {
        NsSpec::Ram { bytes, .. } | NsSpec::Null { bytes, .. } => Ok(Dev(*bytes)),
        NsSpec::Nvme { .. } => Err("no NVMe here"),
    })
    .unwrap();
    assert_eq!((cfg.ports[0].traddr, cfg.ports[0].trsvcid), ([10, 77, 0, 1], 4420));
    assert_eq!(subs[0].namespaces.iter().map(|n| n.nsid).collect::<Vec<_>>(), [1, 7]);
    assert_eq!(subs[0].namespaces[0].nguid[..4], [0x6a, 0x2f, 0x01, 0xc4]);
    assert_eq!(subs[0].namespaces[1].nguid, nvmeof::cmdline::derive_nguid("nqn.2026-11.io.example:db", 7));
    assert_eq!((subs[0].serial.as_str(), subs[0].model.as_str()), ("3a9f0c1d2e4b5a69", "Linux"));
    assert_eq!(subs[1].serial, "77c41e0b2a9d3f58");
}

fn err_at(json: &str) -> (String, String) {
    let e = parse(json.as_bytes()).unwrap_err();
    (e.at, e.why)
}

#[test]
fn unknown_keys_are_named_with_their_place() {
    let j = SAVED.replacen("\"cntlid_max\": \"65519\"", "\"cntlid_maxx\": \"65519\"", 2);
    assert_eq!(err_at(&j).0, "subsystems[0].attr.cntlid_maxx");
    let j = SAVED.replacen("\"hosts\": [", "\"targets\": [], \"hosts\": [", 1);
    assert_eq!(err_at(&j), ("targets".to_string(), "unknown key".to_string()));
    let j = SAVED.replacen("\"tsas\"", "\"tsass\"", 1);
    assert_eq!(err_at(&j).0, "ports[0].addr.tsass");
}

#[test]
fn malformed_json_names_its_line_and_column() {
    let j = SAVED.replacen("\"portid\": 1,", "\"portid\": 1", 1);
    let (at, why) = err_at(&j);
    assert!(at.starts_with("line ") && at.contains(" column "), "{at}");
    assert!(why.starts_with("not valid JSON"), "{why}");
    assert!(err_at("").0.starts_with("line 1"));
}

#[test]
fn linux_device_paths_other_transports_and_wrong_types_are_refused_clearly() {
    let j = SAVED.replacen("\"path\": \"ram:64M\"", "\"path\": \"/dev/nvme0n1\"", 1);
    let (at, why) = err_at(&j);
    assert_eq!(at, "subsystems[0].namespaces[0].device.path");
    assert!(why.contains("/dev/nvme0n1") && why.contains("ram:SIZE"), "{why}");
    let j = SAVED.replacen("\"trtype\": \"rdma\"", "\"trtype\": \"tcp\"", 1);
    assert_eq!(err_at(&j).0, "ports[0].addr.trtype");
    let j = SAVED.replacen("\"nsid\": 7", "\"nsid\": \"7\"", 1);
    assert_eq!(err_at(&j).0, "subsystems[0].namespaces[1].nsid");
    let j = SAVED.replacen("\"nsid\": 7", "\"nsid\": 1", 1);
    assert_eq!(err_at(&j).0, "subsystems[0].namespaces[1].nsid");
    let j = SAVED.replacen("\"allow_any_host\": \"0\"", "\"allow_any_host\": \"yes\"", 1);
    assert_eq!(err_at(&j).0, "subsystems[0].attr.allow_any_host");
    let j = SAVED.replacen("\"serial\": \"3a9f0c1d2e4b5a69\"", "\"serial\": \"a serial number longer than twenty\"", 1);
    assert_eq!(err_at(&j).0, "subsystems[0].attr.serial");
    let j = SAVED.replacen("\"nqn.2026-11.io.example:scratch\"\n      ]", "\"nqn.2026-11.io.example:nowhere\"\n      ]", 1);
    assert!(err_at(&j).1.contains("nqn.2026-11.io.example:nowhere"));
}

#[test]
fn a_disabled_passthru_node_is_ignored_an_enabled_one_refused() {
    let node = |en: u8| format!("\"passthru\": [{{\"admin_timeout\": 0, \"clear_ids\": 1, \"device\": {{\"path\": \"\"}}, \"enable\": {en}, \"io_timeout\": 0}}], \"nqn\": \"nqn.2026-11.io.example:db\"");
    let j = SAVED.replacen("\"nqn\": \"nqn.2026-11.io.example:db\"", &node(0), 1);
    assert_eq!(parse(j.as_bytes()).unwrap().subsystems.len(), 2);
    let j = SAVED.replacen("\"nqn\": \"nqn.2026-11.io.example:db\"", &node(1), 1);
    assert_eq!(err_at(&j).0, "subsystems[0].passthru[0].enable");
}

/// SAVED with a second port (ID 2 on `traddr:trsvcid`, linked to the scratch subsystem only).
fn with_second_port(traddr: &str, trsvcid: &str, portid: u64) -> String {
    let mut v: serde_json::Value = serde_json::from_str(SAVED).unwrap();
    let ports = v["ports"].as_array_mut().unwrap();
    let mut p = ports[0].clone();
    p["portid"] = portid.into();
    p["addr"]["traddr"] = traddr.into();
    p["addr"]["trsvcid"] = trsvcid.into();
    p["subsystems"] = serde_json::json!(["nqn.2026-11.io.example:scratch"]);
    ports.push(p);
    v.to_string()
}

#[test]
fn ports_on_several_service_ids_keep_their_own_links() {
    let a = parse(with_second_port("10.77.0.1", "4421", 2).as_bytes()).unwrap();
    assert_eq!(a.listen, Some(([10, 77, 0, 1], 4420)), "the first port's address");
    let ports: Vec<(u16, u16, Vec<&str>)> = a.ports.iter().map(|p| (p.portid, p.addr.1, p.subsystems.iter().map(|s| s.as_str()).collect())).collect();
    assert_eq!(
        ports,
        [(1, 4420, vec!["nqn.2026-11.io.example:db", "nqn.2026-11.io.example:scratch"]), (2, 4421, vec!["nqn.2026-11.io.example:scratch"])]
    );
    // Subsystems from the command line are linked to every port of the file.
    let mut words = nvmeof::cmdline::parse("nvmet.subsys=nqn.2026-11.io.example:words,ns=null:1M,allow_any").unwrap();
    nvmeof::nvmetcli::apply(&mut words, a).unwrap();
    assert!(words.ports.iter().all(|p| p.subsystems.iter().any(|s| s == "nqn.2026-11.io.example:words")));
    let (cfg, _) = build_target(&words, nvmeof::nvmet::TargetConfig::default(), |_| Ok(Dev(1 << 20))).unwrap();
    let got: Vec<(u16, [u8; 4], u16, usize)> = cfg.ports.iter().map(|p| (p.portid, p.traddr, p.trsvcid, p.subsystems.as_ref().map_or(0, |s| s.len()))).collect();
    assert_eq!(got, [(1, [10, 77, 0, 1], 4420, 3), (2, [10, 77, 0, 1], 4421, 2)]);
    // One address only, one port per service ID, one definition per port ID.
    assert_eq!(err_at(&with_second_port("10.77.0.2", "4421", 2)).0, "ports[1].addr.traddr");
    assert_eq!(err_at(&with_second_port("10.77.0.1", "4420", 2)).0, "ports[1].addr.trsvcid");
    assert_eq!(err_at(&with_second_port("10.77.0.1", "4421", 1)).0, "ports[1].portid");
}

#[test]
fn never_panics_on_mangled_files() {
    let b = SAVED.as_bytes();
    for i in (0..b.len()).step_by(7) {
        let mut m = b.to_vec();
        m[i] ^= 0x21;
        let _ = parse(&m);
        let _ = parse(&b[..i]);
    }
}
