//! Link the image with the boot crate's linker script (load address 1 MiB, PVH note,
//! Multiboot2 header first).
fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let script = format!("{dir}/../../boot/link.ld");
    println!("cargo:rerun-if-changed={script}");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("none") {
        println!("cargo:rustc-link-arg-bins=-T{script}");
        println!("cargo:rustc-link-arg-bins=--gc-sections");
    }
}
