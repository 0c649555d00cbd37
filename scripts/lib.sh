# Shared by the scripts: which toolchain to use and how to build the bare-metal image.
# Debian's rustc-web/cargo-web (installed by scripts/setup) build the custom target with
# -Z build-std; rustup's proxies may come first in PATH, so the binaries are named.
export RUSTC=/usr/bin/rustc
export RUSTDOC=/usr/bin/rustdoc
export CARGO=/usr/bin/cargo
export RUSTC_BOOTSTRAP=1
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export ROOT
# Build the bare-metal appliance image (release); prints nothing but cargo's output.
build_image() {
    (cd "$ROOT" && "$CARGO" build --release -p appliance --target x86_64-target.json \
        -Z build-std=core,alloc -Z build-std-features=compiler-builtins-mem -Z json-target-spec "$@")
}
# The host tools the scripts run (emu-runner, emu-pci-shim, simulate, benchplot, the RoCE capture
# example) build with TOOLS_PROFILE: release unless set. scripts/test sets `checked` (release code
# with overflow checks and debug assertions), so its suites reuse the host tests' build instead of
# compiling everything a second time, and the tools run with the checks on.
export TOOLS_PROFILE="${TOOLS_PROFILE:-release}"
TOOLS_DIR="${CARGO_TARGET_DIR:-$ROOT/target}/$TOOLS_PROFILE"
export TOOLS_DIR
build_tools() {
    (cd "$ROOT" && "$CARGO" build --profile "$TOOLS_PROFILE" "$@")
}
# Follows CARGO_TARGET_DIR when a developer sets one (the team uses per-helper target dirs).
IMAGE="${CARGO_TARGET_DIR:-$ROOT/target}/x86_64-target/release/appliance"
export IMAGE

# ---- platform helpers (boot/run/tests) ----
# OVMF firmware image (Debian's ovmf package) for UEFI boots.
OVMF_FD="${OVMF_FD:-/usr/share/ovmf/OVMF.fd}"
# isa-debug-exit statuses written by the image: (0x10 << 1) | 1 and (0x11 << 1) | 1.
QEMU_EXIT_SUCCESS=33
QEMU_EXIT_FAILURE=35
# Base QEMU command line for the appliance: q35, TCG (or KVM with ACCEL=kvm), serial on stdio,
# no display, the test exit device, QEMU_SMP CPUs (default 1). Extra devices are appended by the caller.
qemu_base() {
    local accel="${ACCEL:-tcg}" cpu="max"
    [ "$accel" = kvm ] && cpu=host
    echo qemu-system-x86_64 -M q35 -accel "$accel" -cpu "$cpu" -m "${QEMU_MEM:-512}" -smp "${QEMU_SMP:-1}" \
        -serial stdio -display none -nodefaults -no-reboot \
        -device isa-debug-exit,iobase=0xf4,iosize=0x04
}
# Whether QEMU can start a TCG machine here (a paused empty machine still running after 3 s).
# Tried three times: one failed start on a loaded machine must not turn a suite into a SKIP.
# On failure prints QEMU's last message and returns 1.
qemu_tcg_ok() {
    local i err
    for i in 1 2 3; do
        err=$(timeout 3 qemu-system-x86_64 -accel tcg -M none -display none -nodefaults -no-user-config \
            -monitor none -serial none -S </dev/null 2>&1 >/dev/null)
        [ $? = 124 ] && return 0
        sleep 1
    done
    echo "$err" | grep -v 'terminating on signal' | tail -n 1
    return 1
}
# GRUB configuration that boots /appliance-path $1 with Multiboot2 and command line "$2": GRUB's
# own messages on the screen and on COM1 (115200 8N1, as the image's console), no menu delay.
grub_cfg() {
    cat <<GRUBCFG
serial --unit=0 --speed=115200
terminal_input console serial
terminal_output console serial
set timeout=0
set default=0
menuentry "appliance" {
    # The video drivers, so GRUB hands a framebuffer (VBE or GOP) over for the console.
    insmod all_video
    multiboot2 $1 $2
    boot
}
GRUBCFG
}
# Build a GRUB rescue ISO (BIOS + UEFI) that boots $IMAGE with Multiboot2 and command line "$1",
# at $2 (default build/appliance.iso). Prints the ISO's path.
build_iso() {
    local args="$1" iso="${2:-$ROOT/build/appliance.iso}" dir
    mkdir -p "$ROOT/build" && dir="$(mktemp -d "$ROOT/build/iso.XXXXXX")" && mkdir -p "$dir/boot/grub" || return 1
    objcopy --strip-debug "$IMAGE" "$dir/boot/appliance"
    grub_cfg /boot/appliance "$args" >"$dir/boot/grub/grub.cfg"
    grub-mkrescue -o "$iso" "$dir" >/dev/null 2>&1 || { rm -rf "$dir"; return 1; }
    rm -rf "$dir"
    echo "$iso"
}
