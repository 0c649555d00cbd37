# Shared by the scripts: which toolchain to use and how to build the bare-metal image.
# Debian's rustc-web/cargo-web (installed by scripts/setup) build the custom target with
# -Z build-std; rustup's proxies may come first in PATH, so the binaries are named.
export RUSTC=/usr/bin/rustc
export CARGO=/usr/bin/cargo
export RUSTC_BOOTSTRAP=1
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export ROOT
# Build the bare-metal appliance image (release); prints nothing but cargo's output.
build_image() {
    (cd "$ROOT" && "$CARGO" build --release -p appliance --target x86_64-target.json \
        -Z build-std=core,alloc -Z build-std-features=compiler-builtins-mem -Z json-target-spec "$@")
}
IMAGE="$ROOT/target/x86_64-target/release/appliance"
export IMAGE
