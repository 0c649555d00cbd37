//! The model's field tables held against offsets taken from the public header as numbers.
mod ifc_facts;
use emu_connectx::layout::ALL_LAYOUTS;

#[test]
fn declared_fields_match_public_offsets() {
    let mut checked = 0;
    let mut wrong = Vec::new();
    for &(st, f, bit, width) in ifc_facts::FACTS {
        let name = format!("{st}.{f}");
        let Some(mine) = ALL_LAYOUTS.iter().flat_map(|t| t.iter()).find(|x| x.name == name) else {
            panic!("fact for {name} but no such declared field");
        };
        // Width 0 in the header = flexible array (pas[0][..]): only the offset is a fact.
        if mine.bit != bit || (width != 0 && mine.width != width) {
            wrong.push(format!("{name}: ours ({:#x}, {}), header ({bit:#x}, {width})", mine.bit, mine.width));
        }
        checked += 1;
    }
    assert!(wrong.is_empty(), "{} mismatches:\n{}", wrong.len(), wrong.join("\n"));
    assert!(checked >= 150, "only {checked} fields checked");
}
