//! `--profile NAME`: the named device profile reaches the emulated adapter (the driver reads that
//! profile's firmware version and capabilities), every name brings up and tears down leak-free,
//! and an unknown name is refused with the list of known ones.
use emu_connectx::{profile, Profile, SimClock};
use emu_runner::{profile_by_name, Node, Options};

#[test]
fn every_profile_reaches_the_model_and_tears_down_clean() {
    for &name in profile::NAMES {
        let p = profile_by_name(name).unwrap();
        let (a, _b) = emu_roce::MemLink::pair(Default::default(), 1);
        let n = Node::with_options(SimClock::new(), [10, 0, 0, 1], [2, 0, 0, 0, 0, 1], 0x1_0000_0000, Box::new(a), Options { profile: p.clone(), ..Default::default() })
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        let fw = n.v.fw();
        assert_eq!((fw.major, fw.minor, fw.subminor), (p.fw.major, p.fw.minor, p.fw.subminor), "{name}");
        assert_eq!(n.v.caps().log_max_ra_req_qp, p.caps.log_max_ra_req_qp, "{name}");
        let st = n.v.shutdown().unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(st.pages_given, st.pages_reclaimed, "{name}");
        assert_eq!(n.cx.counters().pages_held, 0, "{name}");
    }
}

#[test]
fn default_is_connectx5_and_unknown_names_are_refused() {
    assert_eq!(Options::default().profile, Profile::by_name(profile::DEFAULT).unwrap());
    assert_eq!(profile::DEFAULT, "connectx5");
    let e = profile_by_name("connectx9").unwrap_err();
    assert!(e.contains("connectx9") && e.contains("connectx4lx, connectx5, connectx6dx, connectx7"), "{e}");
}
