# shellcheck shell=bash
# `scripts/run-image --passthrough DDDD:BB:DD.F`: the checks before the image may boot under
# KVM with a ConnectX handed to it by vfio-pci (source after scripts/lib.sh). Each refusal says
# what is missing and how to fix it; nothing is changed on the host.
#
#   passthrough_check BDF      0 when the host can pass BDF through; else messages on stderr, 2
#   passthrough_qemu_args BDF  the QEMU arguments that hand BDF to the guest

pt_say() { echo "run-image: --passthrough: $*" >&2; }

passthrough_check() {
    local bdf="$1" dev grp g other drv
    if ! [[ "$bdf" =~ ^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-1][0-9a-fA-F]\.[0-7]$ ]]; then
        pt_say "'$bdf' is not a PCI address; expected DDDD:BB:DD.F as lspci -D prints it (e.g. 0000:03:00.0)"
        return 2
    fi
    bdf="${bdf,,}"
    # 1. Hardware virtualization: KVM with device assignment needs VT-x or AMD-V.
    if ! grep -qwE 'vmx|svm' /proc/cpuinfo; then
        local why="this CPU shows neither VMX (Intel VT-x) nor SVM (AMD-V) in /proc/cpuinfo"
        [ -d /sys/module/kvm_pvm ] && why="$why; /dev/kvm here is PVM (kvm_pvm), a paravirtual KVM that cannot assign PCI devices"
        grep -qw hypervisor /proc/cpuinfo && why="$why; this host is itself a virtual machine"
        pt_say "$why."
        pt_say "fix: run on the ConnectX's own machine, booted on bare metal, with VT-x/AMD-V and VT-d/AMD-Vi enabled in its firmware setup (or a VM with nested virtualization and a virtual IOMMU)."
        pt_say "or skip KVM: boot the image on that machine directly from GRUB (README: 'Validate a real ConnectX', bare-metal GRUB recipe)."
        return 2
    fi
    if ! [ -r /dev/kvm ] || ! [ -w /dev/kvm ]; then
        pt_say "/dev/kvm is missing or not usable by $(id -un)."
        pt_say "fix: modprobe kvm_intel (or kvm_amd); add yourself to the kvm group (usermod -aG kvm $(id -un), log in again)."
        return 2
    fi
    # 2. The IOMMU: vfio needs IOMMU groups.
    if [ -z "$(ls -A /sys/kernel/iommu_groups 2>/dev/null)" ]; then
        pt_say "no IOMMU groups under /sys/kernel/iommu_groups: the IOMMU is off."
        pt_say "fix: enable VT-d (Intel) / AMD-Vi (AMD) in the firmware setup, add intel_iommu=on iommu=pt (or amd_iommu=on iommu=pt) to the host kernel command line, reboot."
        return 2
    fi
    dev="/sys/bus/pci/devices/$bdf"
    if ! [ -e "$dev" ]; then
        pt_say "no PCI function $bdf on this host (lspci -D -d 15b3: lists the ConnectX functions)."
        return 2
    fi
    if [ "$(cat "$dev/vendor")" != 0x15b3 ]; then
        pt_say "$bdf is $(cat "$dev/vendor"):$(cat "$dev/device"), not a Mellanox/NVIDIA (15b3) function."
        return 2
    fi
    grp="$(basename "$(readlink -f "$dev/iommu_group" 2>/dev/null)")"
    if [ -z "$grp" ] || ! [ -d "/sys/kernel/iommu_groups/$grp" ]; then
        pt_say "$bdf is in no IOMMU group (the IOMMU does not cover it)."
        pt_say "fix: check the firmware's VT-d/AMD-Vi and ACS settings; dmesg | grep -i -e DMAR -e IOMMU."
        return 2
    fi
    # 3. The binding: the function (and every other endpoint of its group) on vfio-pci.
    drv="$(basename "$(readlink -f "$dev/driver" 2>/dev/null)" 2>/dev/null)"
    if [ "$drv" != vfio-pci ]; then
        pt_say "$bdf is bound to ${drv:-no driver}, not vfio-pci."
        pt_say "fix (as root): modprobe vfio-pci; echo vfio-pci > $dev/driver_override;"
        pt_say "     ${drv:+echo $bdf > $dev/driver/unbind; }echo $bdf > /sys/bus/pci/drivers_probe"
        pt_say "     (undo: echo > $dev/driver_override; echo $bdf > /sys/bus/pci/drivers/vfio-pci/unbind; echo $bdf > /sys/bus/pci/drivers_probe)"
        return 2
    fi
    for g in /sys/kernel/iommu_groups/"$grp"/devices/*; do
        other="$(basename "$g")"
        [ "$other" = "$bdf" ] && continue
        # Bridges stay with their host driver; endpoints must be on vfio-pci or on none.
        [[ "$(cat "$g/class")" == 0x0604* ]] && continue
        drv="$(basename "$(readlink -f "$g/driver" 2>/dev/null)" 2>/dev/null)"
        if [ -n "$drv" ] && [ "$drv" != vfio-pci ]; then
            pt_say "IOMMU group $grp also holds $other (bound to $drv): a group is passed through whole."
            pt_say "fix: bind $other to vfio-pci as well (same commands as for $bdf), or move the ConnectX to a slot with its own group (ACS)."
            return 2
        fi
    done
    if ! [ -r "/dev/vfio/$grp" ] || ! [ -w "/dev/vfio/$grp" ]; then
        pt_say "/dev/vfio/$grp is not usable by $(id -un)."
        pt_say "fix: run as root, or chown $(id -un) /dev/vfio/$grp and raise the locked-memory limit (ulimit -l unlimited): vfio pins all guest RAM."
        return 2
    fi
    return 0
}

passthrough_qemu_args() {
    echo -device "vfio-pci,host=${1,,}"
}
