//! Known-answer tests for the CHAP computations.
//!
//! No public known-answer vectors exist for DH-HMAC-CHAP responses (neither the NVMe spec,
//! Linux, libnvme/nvme-cli nor SPDK publish any: SPDK's unit tests mock the computation). The
//! secret is the NVMe specification's own example; the expected values below were computed
//! independently with Python's standard `hmac`/`hashlib`, following the field order of Linux
//! `nvme_auth_transform_key`, `nvme_auth_dhchap_setup_host_response`,
//! `nvme_auth_dhchap_setup_ctrl_response` and `nvme_auth_augmented_challenge`.

use nvme_auth::chap::{augmented_challenge, ctrl_response, host_response};
use nvme_auth::{HashId, Secret};

const SPEC_EXAMPLE_01: &str = "DHHC-1:01:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:";
const SPEC_EXAMPLE_00: &str = "DHHC-1:00:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:0c468c4d-a385-47e0-8299-6e95051277db";
const SUBNQN: &str = "nqn.2024-01.io.example:subsys";

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

#[test]
fn transformed_key_sha256() {
    let s = Secret::parse(SPEC_EXAMPLE_01).unwrap();
    assert_eq!(
        s.transformed(HOSTNQN).as_slice(),
        &unhex("e2ef7f7003314a87b01fa76a96a6330fb0f04e27f3a6291695e2a4e4a350a7f2")[..]
    );
    // Hash field 00: the key is used as is.
    let s0 = Secret::parse(SPEC_EXAMPLE_00).unwrap();
    assert_eq!(s0.transformed(HOSTNQN).as_slice(), s0.key());
}

#[test]
fn host_response_sha256() {
    let k = Secret::parse(SPEC_EXAMPLE_01).unwrap().transformed(HOSTNQN);
    let c1: Vec<u8> = (0..32).collect();
    let r = host_response(HashId::Sha256, &k, &c1, 0x0102_0304, 7, HOSTNQN, SUBNQN);
    assert_eq!(r.as_slice(), &unhex("cf1d0b4ee1dfc8d8755d3cc1e395328084c3082fc301ffa29bc50ca0fa89be54")[..]);
}

#[test]
fn ctrl_response_sha512() {
    let k = Secret::parse(SPEC_EXAMPLE_00).unwrap().transformed(SUBNQN);
    let c2: Vec<u8> = (0x40..0x80).collect();
    let r = ctrl_response(HashId::Sha512, &k, &c2, 0xDEAD_BEEF, 7, SUBNQN, HOSTNQN);
    assert_eq!(
        r.as_slice(),
        &unhex(concat!(
            "d112155e580e05fe80b542d90d9666356ec392aead7617451b1bbfa1c929aaa0",
            "d20899ec532a875f2629990464178a7bdfa6a0372e1dd4a3f371a2322a6862e1"
        ))[..]
    );
}

#[test]
fn augmented_challenge_sha384() {
    let c: Vec<u8> = (0..48).collect();
    let a = augmented_challenge(HashId::Sha384, &[0xA5; 256], &c);
    assert_eq!(
        a.as_slice(),
        &unhex("18abbf6d4e948603f36257417d06918cdd9647e4a27821dfa50d4a1a4f88237bf9bf7ed12d33f671f8b2800dc755cca1")[..]
    );
}
