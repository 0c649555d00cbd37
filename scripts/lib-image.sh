# shellcheck shell=bash
# Booted appliance images on the emulated ConnectX (source after scripts/lib.sh). One "image
# node" is emu-pci-shim (the emulated ConnectX on the host: DMA into the guest's RAM file, the
# adapter's BAR0 = an ivshmem BAR file, its port a Unix-datagram socket) plus QEMU (q35, TCG by
# default, 1 GiB RAM backed by that file) booting $IMAGE with `connectx.emu=ivshmem`. Two nodes
# whose sockets name each other form the fabric. Used by `scripts/run --image` and the image
# suites in scripts/tests.d/, so the QEMU/shim command lines live here only.
#
#   img_begin WORKDIR LOGDIR   sockets and stop files in WORKDIR (created, removed at the end),
#                              logs in LOGDIR (kept); traps EXIT/INT/TERM to img_cleanup
#   img_build                  build the image, emu-pci-shim and emu-runner (quiet; 1 on failure)
#   img_start NAME MAC SOCK_LOCAL SOCK_REMOTE CONSOLE CMDLINE [QEMU args...]
#                              shim up (its READY line), then QEMU in the background; CONSOLE is a
#                              file or - (stdout). Empty SOCK_LOCAL/SOCK_REMOTE: no link.
#                              IMG_PROFILE set: the shim's device profile (--profile).
#   img_wait_line NAME REGEX SECONDS   until the console shows REGEX (1 if QEMU ended or time ran out)
#   img_wait NAME SECONDS      until QEMU ends: 0 success, 1 failure, 124 timeout (then killed)
#   img_stop NAME              QEMU stopped if still running, then the shim (it prints SHIM END)
#   img_cleanup                every process group started here killed, sockets and
#                              shared-memory files removed (the traps call it)
# Every process is started in a process group of its own (setsid), recorded, and stopped by
# group, so nothing outlives the caller; file names carry IMG_TAG (appliance-image-<pid>).
SHIM="$TOOLS_DIR/emu-pci-shim"
RUNNER="$TOOLS_DIR/emu-runner"
IMG_SHM=/dev/shm
[ -d "$IMG_SHM" ] && [ -w "$IMG_SHM" ] || IMG_SHM=/tmp
IMG_TAG="appliance-image-$$"
# The shim's own bound, seconds (a backstop; the caller's waits are shorter).
IMG_SHIM_TIMEOUT="${IMG_SHIM_TIMEOUT:-1800}"
declare -A IMG_QPID IMG_SPID IMG_CONSOLE
IMG_PGIDS=()
IMG_DIR=""
IMG_LOGS=""

img_begin() {
    IMG_DIR="$1"; IMG_LOGS="$2"
    mkdir -p "$IMG_DIR" "$IMG_LOGS" || return 1
    trap 'img_cleanup' EXIT
    trap 'img_cleanup; exit 130' INT
    trap 'img_cleanup; exit 143' TERM
}

img_build() {
    build_image >"$IMG_LOGS/build.log" 2>&1 || { echo "image: build failed (see $IMG_LOGS/build.log)" >&2; return 1; }
    build_tools -p emu-pci-shim -p emu-runner >>"$IMG_LOGS/build.log" 2>&1 \
        || { echo "image: cargo build -p emu-pci-shim -p emu-runner failed (see $IMG_LOGS/build.log)" >&2; return 1; }
}

# The QEMU command line of a node whose RAM and BAR files are $1 and $2.
img_qemu() {
    local ram="$1" bar="$2"
    # shellcheck disable=SC2046
    echo $(qemu_base | sed 's/ -m [^ ]* / -m 1G /') \
        -object "memory-backend-file,id=ram,size=1G,mem-path=$ram,share=on" -machine memory-backend=ram \
        -object "memory-backend-file,id=cxbar,size=32M,mem-path=$bar,share=on" -device ivshmem-plain,memdev=cxbar
}

img_start() {
    local name="$1" mac="$2" local_sock="$3" remote_sock="$4" console="$5" cmdline="$6"; shift 6
    local ram="$IMG_SHM/$IMG_TAG-$name-ram" bar="$IMG_SHM/$IMG_TAG-$name-bar" slog="$IMG_LOGS/$name-shim.log"
    local link=()
    [ -n "$local_sock" ] && link=(--sock-local "$local_sock" --sock-remote "$remote_sock")
    rm -f "$ram" "$bar" "$IMG_DIR/$name.stop" "$local_sock"
    # q35 with 1 GiB: all guest RAM at [0, 1 GiB) = the RAM file's offsets (what the shim assumes).
    [ -n "${IMG_PROFILE:-}" ] && link+=(--profile "$IMG_PROFILE")
    setsid "$SHIM" --ram "$ram" --ram-size 1G --bar "$bar" --mac "$mac" --stop-file "$IMG_DIR/$name.stop" \
        --timeout "$IMG_SHIM_TIMEOUT" "${link[@]}" >"$slog" 2>&1 &
    IMG_SPID[$name]=$!; IMG_PGIDS+=($!)
    local i
    for i in $(seq 100); do grep -q '^SHIM READY' "$slog" 2>/dev/null && break; sleep 0.1; done
    grep -q '^SHIM READY' "$slog" || { echo "image: $name: emu-pci-shim did not start (see $slog)" >&2; return 1; }
    # shellcheck disable=SC2207
    local q=($(img_qemu "$ram" "$bar") -qmp "unix:$IMG_DIR/$name.qmp,server,nowait")
    if [ "$console" = - ]; then
        setsid "${q[@]}" -kernel "$IMAGE" -append "$cmdline" "$@" &
    else
        setsid "${q[@]}" -kernel "$IMAGE" -append "$cmdline" "$@" >"$console" 2>&1 &
    fi
    IMG_QPID[$name]=$!; IMG_PGIDS+=($!); IMG_CONSOLE[$name]="$console"
}

img_wait_line() {
    local name="$1" re="$2" log="${IMG_CONSOLE[$1]}" end=$((SECONDS + $3))
    while [ "$SECONDS" -lt "$end" ]; do
        tr -d '\r' <"$log" 2>/dev/null | grep -aE -- "$re" >/dev/null && return 0
        kill -0 "${IMG_QPID[$name]}" 2>/dev/null || break
        sleep 0.1
    done
    tr -d '\r' <"$log" 2>/dev/null | grep -aE -- "$re" >/dev/null
}

img_wait() {
    local name="$1" pid="${IMG_QPID[$1]:-}" end=$((SECONDS + $2)) rc
    [ -n "$pid" ] || return 1
    while [ "$SECONDS" -lt "$end" ]; do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM -- "-$pid" 2>/dev/null; wait "$pid" 2>/dev/null; IMG_QPID[$name]=""
        return 124
    fi
    wait "$pid"; rc=$?; IMG_QPID[$name]=""
    case $rc in
        "$QEMU_EXIT_SUCCESS") return 0 ;;
        *) return 1 ;;
    esac
}

# Press the power button of node NAME (QMP system_powerdown) and wait up to SECONDS for QEMU to
# end: 0 if it ended with success (the image shut down cleanly), else as img_wait.
img_powerdown() {
    local name="$1" secs="$2"
    [ -n "${IMG_QPID[$name]:-}" ] || return 1
    python3 - "$IMG_DIR/$name.qmp" <<'PY' || return 1
import json, socket, sys
s = socket.socket(socket.AF_UNIX); s.settimeout(10); s.connect(sys.argv[1]); f = s.makefile("rw")
f.readline()
for c in ({"execute": "qmp_capabilities"}, {"execute": "system_powerdown"}):
    f.write(json.dumps(c) + "\n"); f.flush()
    while "return" not in (r := json.loads(f.readline())):
        if "error" in r:
            sys.exit(1)
PY
    img_wait "$name" "$secs"
}

img_stop() {
    local name="$1" pid="${IMG_QPID[$1]:-}" spid="${IMG_SPID[$1]:-}" i
    if [ -n "$pid" ]; then kill -TERM -- "-$pid" 2>/dev/null; wait "$pid" 2>/dev/null; IMG_QPID[$name]=""; fi
    if [ -n "$spid" ]; then
        touch "$IMG_DIR/$name.stop"
        for i in $(seq 50); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
        kill -TERM -- "-$spid" 2>/dev/null; wait "$spid" 2>/dev/null; IMG_SPID[$name]=""
    fi
    rm -f "$IMG_SHM/$IMG_TAG-$name-ram" "$IMG_SHM/$IMG_TAG-$name-bar"
}

img_cleanup() {
    local g i alive
    for g in "${IMG_PGIDS[@]}"; do kill -TERM -- "-$g" 2>/dev/null; done
    for i in $(seq 30); do
        alive=0
        for g in "${IMG_PGIDS[@]}"; do kill -0 -- "-$g" 2>/dev/null && alive=1; done
        [ $alive = 0 ] && break
        sleep 0.1
    done
    for g in "${IMG_PGIDS[@]}"; do kill -KILL -- "-$g" 2>/dev/null; done
    for g in "${IMG_PGIDS[@]}"; do wait "$g" 2>/dev/null; done
    rm -f "$IMG_SHM/$IMG_TAG"-*
    [ -n "$IMG_DIR" ] && rm -rf "$IMG_DIR"
    IMG_PGIDS=()
}


# ---- the main job with booted images (scripts/run --image) ----
# Reads scripts/run's settings: pattern bs qd time count nsmib, and target_only, nvme, linux
# (0/1). A target image serving a RAM namespace (the NVMe drive first with nvme=1) and, unless
# target_only or linux, an initiator image that discovers, connects, verifies, benchmarks and
# disconnects; then both shut their adapters down. Prints scripts/run's report; 0 if all held.
img_main_job() {
    local nqn=nqn.2026-11.io.appliance:ram0 hostnqn=nqn.2026-11.io.appliance:initiator
    local logs="$ROOT/build/run" tip=10.77.0.1 iip=10.77.0.2 rc=0
    img_begin "$(mktemp -d "/tmp/$IMG_TAG.XXXXXX")" "$logs" || return 1
    rm -f "$logs"/target*.log "$logs"/initiator*.log
    echo "run: booted images under QEMU ${ACCEL:-tcg}; consoles in $logs (target.log, initiator.log), shim logs beside them; files tagged $IMG_TAG"
    img_build || return 1
    local ns="ns=ram:${nsmib}M" tq=()
    if [ "$nvme" = 1 ]; then
        truncate -s "${nsmib}M" "$IMG_DIR/nvme.img"
        tq=(-drive "if=none,id=nvm0,file=$IMG_DIR/nvme.img,format=raw" -device nvme,serial=appliance0,drive=nvm0)
        ns="ns=nvme:1,$ns"
    fi
    if [ "$linux" = 1 ]; then img_linux_job "$nqn" "$ns" "${tq[@]}"; return $?; fi
    local ctrls=2 tsock="$IMG_DIR/target.sock" isock="$IMG_DIR/init.sock"
    [ "$target_only" = 1 ] && ctrls=0
    img_start target 52:54:00:77:00:01 "$tsock" "$isock" "$logs/target.log" \
        "connectx.emu=ivshmem nvmet.listen=$tip nvmet.subsys=$nqn,$ns,host=$hostnqn nvmet.serve-ctrls=$ctrls" "${tq[@]}" || return 1
    if ! img_wait_line target 'nvmf: target serving' 300; then
        echo "run: the target image did not come up (see $logs/target.log, $logs/target-shim.log)" >&2; return 1
    fi
    img_console target 'connectx:|nvmf: (subsystem|  nsid|target serving)'
    if [ "$target_only" = 1 ]; then
        echo "run: serving $nqn at $tip:4420 (RoCEv2) until Ctrl-C; the fabric is the Unix-datagram socket $tsock."
        echo "run: connect another node to it, e.g. the host-process initiator:"
        echo "  $RUNNER --ip $iip --mac 52:54:00:77:00:02 --sock-local $isock --sock-remote $tsock \\"
        echo "    --app nvmf-initiator --nvmf 'nvmf.connect=$tip,nqn=$nqn,hostnqn=$hostnqn nvmf.bench=randread,bs=4096,qd=1,time=5s'"
        echo "run: (or scripts/run --image --linux for a Linux host with nvme-cli + fio); the console follows."
        echo "run: Ctrl-C presses the image's power button: it closes the connections and shuts the adapter down."
        # Ctrl-C: the power button first (clean adapter shutdown), then everything stopped.
        trap 'img_stop_target_only; exit 130' INT
        trap 'img_stop_target_only; exit 143' TERM
        setsid tail -n 0 -f "$logs/target.log" &
        IMG_PGIDS+=($!)
        img_wait target 864000; return $?
    fi
    local bq=$qd; [ "$bq" -lt 2 ] && bq=2
    img_start initiator 52:54:00:77:00:02 "$isock" "$tsock" "$logs/initiator.log" \
        "connectx.emu=ivshmem ip=$iip nvmf.connect=$tip,nqn=$nqn,hostnqn=$hostnqn,qd=$(( bq > 32 ? bq : 32 )) nvmf.verify=$count nvmf.bench=$pattern,bs=$bs,qd=$qd,time=$time" || return 1
    # On a terminal: the initiator's once-a-second bench progress, rewritten in place.
    local follow=""
    if [ -t 1 ]; then
        setsid bash -c "$(declare -f img_follow_progress); img_follow_progress \"\$1\"" _ "$logs/initiator.log" &
        follow=$!; IMG_PGIDS+=($follow)
    fi
    img_wait initiator 900; local irc=$?
    if [ -n "$follow" ]; then kill -TERM -- "-$follow" 2>/dev/null; wait "$follow" 2>/dev/null; printf '\r\033[K'; fi
    img_wait target 120; local trc=$?
    img_stop initiator; img_stop target
    img_console initiator 'connectx:|nvmf: (discovery|connected|  nsid|verify)'
    # The bench report as scripts/run prints it (console prefix removed), and its fio JSON
    # (between the nvmeof::fio_json markers) into build/run/bench.json.
    local body; body="$(tr -d '\r' <"$logs/initiator.log" | sed -nE 's/^\[ *[0-9.]+\] INFO  nvmf: //p')"
    echo "$body" | sed -n '/^bench: /,/NVMEOF-BENCH-FIO-JSON BEGIN/p' | grep -v 'NVMEOF-BENCH-FIO-JSON'
    rm -f "$logs/bench.json"
    if echo "$body" | grep -q '^=== NVMEOF-BENCH-FIO-JSON END ===$'; then
        echo "$body" | sed -n '/^=== NVMEOF-BENCH-FIO-JSON BEGIN ===$/,/^=== NVMEOF-BENCH-FIO-JSON END ===$/{//!p}' >"$logs/bench.json"
        echo "run: fio JSON (json+ shape): $logs/bench.json"
    fi
    tr -d '\r' <"$logs/target.log" | sed -n '/nvmf: target done/,$p' | grep -aE 'nvmf: target|nvmeof: service: (core|transport)|connectx: .*shut down' | sed 's/^/target /'
    img_console initiator 'connectx: .*shut down'
    local n c
    for n in target initiator; do
        c="$(tr -d '\r' <"$logs/$n.log")"
        if ! echo "$c" | grep -aE "connectx: .* shut down \([a-z ]+ done\): [0-9]+ commands, ([1-9][0-9]*) pages given, \1 reclaimed" >/dev/null; then
            echo "run: $n: no clean adapter shutdown with every page reclaimed" >&2; rc=1
        fi
        if ! grep -aqE '^SHIM END .* delivery_failures=0 dma_faults=0 ' "$logs/$n-shim.log"; then
            echo "run: $n: the emulated adapter saw DMA faults or failed deliveries (see $logs/$n-shim.log)" >&2; rc=1
        fi
    done
    if ! tr -d '\r' <"$logs/initiator.log" | grep -aE "nvmf: verify nsid [0-9]+: writes=[1-9][0-9]* reads=[1-9][0-9]* blocks_verified=[1-9][0-9]* mismatches=0 errors=0" >/dev/null; then
        echo "run: initiator: no clean verified-I/O line" >&2; rc=1
    fi
    [ $irc = 0 ] && [ $trc = 0 ] && [ $rc = 0 ] && return 0
    echo "run: initiator image status $irc, target image status $trc (0 success, 1 failure, 124 timeout); consoles in $logs" >&2
    tr -d '\r' <"$logs/initiator.log" | grep -aE 'ERROR|WARN' | tail -5 >&2
    tr -d '\r' <"$logs/target.log" | grep -aE 'ERROR|WARN' | tail -5 >&2
    return 1
}

# Follow console FILE and show each "nvmf: progress: ..." line in place (\r, erase to end).
img_follow_progress() {
    local l
    tail -n 0 -F "$1" 2>/dev/null | while IFS= read -r l; do
        case "$l" in *"INFO  nvmf: progress: "*) l=${l%$'\r'}; printf '\rbench %s\033[K' "${l#*INFO  nvmf: }" ;; esac
    done
}

# --target-only's Ctrl-C: the target's power button (QMP system_powerdown; the image closes its
# connections and shuts the adapter down), its last lines, then img_cleanup.
img_stop_target_only() {
    trap '' INT TERM
    echo "run: stopping: power button of the target image"
    if img_powerdown target 30; then
        img_console target 'nvmf: (power button pressed|target done)|connectx: .*shut down'
    else
        echo "run: the target image did not shut down cleanly within 30 s; stopping it" >&2
    fi
    img_cleanup
}

# Print the console lines of node NAME matching REGEX, prefixed with the node's name.
img_console() {
    tr -d '\r' <"$IMG_LOGS/$1.log" | grep -aE -- "$2" | sed "s/^/$1 /"
}

# The same target image judged by Linux: nvme-cli + fio in a QEMU guest (rdma_rxe), through
# peer/run-with-appliance, which starts this library's img_serve as the appliance end.
img_linux_job() {
    local nqn="$1" ns="$2"; shift 2
    local lhost=nqn.2026-11.io.appliance.peer:linux-initiator
    peer/build >&2 || { echo "run: peer/build failed" >&2; return 1; }
    peer/run-with-appliance --dir "$IMG_LOGS/linux" --ready-regex 'nvmf: target serving' --timeout 500 \
        --appliance "$(img_harness_cmd "$IMG_LOGS/linux" "nvmet.subsys=$nqn,$ns,host=$lhost" "$@")" \
        lp.role=nvme-initiator lp.nqn="$nqn" lp.hostnqn="$lhost" lp.fio_size=8m lp.fio_runtime=3 >&2
    local rc=$?
    tr -d '\r' <"$IMG_LOGS/linux/guest.log" | grep -a '^PEER ' || true
    tr -d '\r' <"$IMG_LOGS/linux/appliance.log" | grep -aE 'connectx:|nvmf: (subsystem|  nsid|target serving|target:)' || true
    return $rc
}

# The --appliance command for peer/run-with-appliance: a target image (img_serve) on the
# harness's socket and address, with the given nvmet.* words and QEMU arguments.
#   img_harness_cmd LOGDIR "NVMET WORDS" [QEMU args...]
img_harness_cmd() {
    local logs="$1" words="$2" extra="" a; shift 2
    for a in "$@"; do extra+=" $(printf '%q' "$a")"; done
    echo "exec bash -c '. \"$ROOT/scripts/lib.sh\"; . \"$ROOT/scripts/lib-image.sh\"; img_serve \"$logs\" \"\$APPLIANCE_MAC\" \"\$APPLIANCE_SOCK\" \"\$APPLIANCE_PEER\" \"connectx.emu=ivshmem nvmet.listen=\$APPLIANCE_IP $words\"$extra'"
}

# One image node in the foreground, its console on stdout, for harnesses that run "the
# appliance" as one command and stop it with SIGTERM (peer/run-with-appliance): shim + QEMU,
# both stopped and their files removed when this ends.
#   img_serve LOGDIR MAC SOCK_LOCAL SOCK_REMOTE CMDLINE [QEMU args...]
img_serve() {
    local logs="$1" mac="$2" local_sock="$3" remote_sock="$4" cmdline="$5"; shift 5
    img_begin "$(mktemp -d "/tmp/$IMG_TAG.XXXXXX")" "$logs" || return 1
    # The shim's socket is the harness's; keep it out of our work directory's removal.
    img_start appliance "$mac" "$local_sock" "$remote_sock" - "$cmdline" "$@" || return 1
    img_wait appliance 3600
}
