//! Every integration test file of this crate as one test binary (one build and link instead of
//! one per file): each `tests/NAME.rs` is module `NAME`, so `cargo test -p PKG --test it NAME::`
//! runs one file's tests. Files that must run in a process of their own (a counting global
//! allocator, a resident-set measurement) stay separate targets in Cargo.toml.

mod common;

mod cm;
mod cm_hostile;
mod cm_wire;
mod neigh;

/// Every `tests/*.rs` is either a module here or its own target in Cargo.toml, so a new test
/// file cannot be left out of the build unnoticed (Cargo.toml sets `autotests = false`).
#[test]
fn every_test_file_is_built() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests");
    let here = include_str!("it.rs");
    let manifest = include_str!("../Cargo.toml");
    for e in std::fs::read_dir(dir).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        let Some(stem) = name.strip_suffix(".rs") else { continue };
        if stem == "it" {
            continue;
        }
        let as_module = format!("\nmod {stem};\n");
        let as_target = format!("path = \"tests/{name}\"");
        assert!(
            here.contains(&as_module) || manifest.contains(&as_target),
            "tests/{name} is neither a module of tests/it.rs nor a [[test]] target"
        );
    }
}
