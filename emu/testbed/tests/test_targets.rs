//! Every integration-test file of a crate that builds its tests as one binary (`tests/it.rs`,
//! `autotests = false`) is either a module of that binary or a `[[test]]` target of its own, so a
//! new test file cannot be left out of the build unnoticed.

use std::fs;
use std::path::Path;

#[test]
fn every_test_file_of_a_one_binary_crate_is_built() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let workspace = fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let mut crates = 0;
    for member in workspace.lines().filter_map(|l| l.trim().strip_prefix('"')?.strip_suffix("\",")) {
        let dir = root.join(member);
        let Ok(here) = fs::read_to_string(dir.join("tests/it.rs")) else { continue };
        let manifest = fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        assert!(manifest.contains("autotests = false"), "{member}: tests/it.rs without autotests = false");
        crates += 1;
        for e in fs::read_dir(dir.join("tests")).unwrap() {
            let name = e.unwrap().file_name().into_string().unwrap();
            let Some(stem) = name.strip_suffix(".rs") else { continue };
            if stem == "it" {
                continue;
            }
            let as_module = format!("\nmod {stem};\n");
            let as_target = format!("path = \"tests/{name}\"");
            assert!(
                here.contains(&as_module) || manifest.contains(&as_target),
                "{member}/tests/{name} is neither a module of tests/it.rs nor a [[test]] target"
            );
        }
    }
    assert!(crates >= 5, "only {crates} crates with tests/it.rs found under {}", root.display());
}
