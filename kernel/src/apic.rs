//! The local APIC as the image uses it: its ID, software enable, EOI, and inter-processor
//! interrupts (INIT, start-up, fixed, NMI), in xAPIC mode (MMIO page named by IA32_APIC_BASE)
//! or x2APIC mode (MSRs 0x800+), whichever the firmware left enabled.
//!
//! Register offsets and ICR fields: Intel SDM vol. 3A §11.4-11.6 (table 11-1 "Local APIC
//! Register Address Map", figure 11-12 "Interrupt Command Register"), §11.12.1 (x2APIC MSR =
//! 0x800 + xAPIC offset / 16).
use x86_64::registers::model_specific::Msr;

/// IA32_APIC_BASE MSR (SDM vol. 3A §11.4.4).
const IA32_APIC_BASE: u32 = 0x1b;
/// IA32_APIC_BASE bit 10: x2APIC mode (EXTD).
const APIC_BASE_EXTD: u64 = 1 << 10;
/// IA32_APIC_BASE bits 12..: the xAPIC page's physical address.
const APIC_BASE_ADDR_MASK: u64 = 0x000f_ffff_ffff_f000;

/// xAPIC register offsets (table 11-1).
mod reg {
    pub const EOI: u32 = 0x0b0;
    pub const SVR: u32 = 0x0f0;
    pub const ICR_LOW: u32 = 0x300;
    pub const ICR_HIGH: u32 = 0x310;
}
/// x2APIC MSR of an xAPIC register offset (§11.12.1.2).
const fn x2apic_msr(offset: u32) -> u32 {
    0x800 + (offset >> 4)
}
/// x2APIC ICR is one 64-bit MSR (0x830); the destination is bits 63:32.
const X2APIC_ICR: u32 = x2apic_msr(reg::ICR_LOW);
const _: () = assert!(X2APIC_ICR == 0x830 && x2apic_msr(reg::EOI) == 0x80b && x2apic_msr(reg::SVR) == 0x80f);

/// SVR bit 8: APIC software enable (§11.9).
const SVR_ENABLE: u32 = 1 << 8;
/// ICR fields (figure 11-12).
mod icr {
    pub const FIXED: u32 = 0b000 << 8;
    pub const NMI: u32 = 0b100 << 8;
    pub const INIT: u32 = 0b101 << 8;
    pub const STARTUP: u32 = 0b110 << 8;
    /// Delivery status: send pending (xAPIC only).
    pub const PENDING: u32 = 1 << 12;
    pub const ASSERT: u32 = 1 << 14;
    pub const LEVEL: u32 = 1 << 15;
}
/// Vector the local APIC reports for a spurious interrupt (low nibble 0xf, as older parts require).
pub const SPURIOUS_VECTOR: u8 = 0xff;

fn base_msr() -> u64 {
    // SAFETY: IA32_APIC_BASE exists on every x86_64 CPU; reading it has no side effect.
    unsafe { Msr::new(IA32_APIC_BASE).read() }
}

/// Whether this CPU's local APIC is in x2APIC mode.
pub fn x2apic() -> bool {
    base_msr() & APIC_BASE_EXTD != 0
}

/// This CPU's APIC ID from CPUID (leaf 0xB's x2APIC ID where offered, else leaf 1's 8-bit ID).
pub fn id() -> u32 {
    // CPUID is available on every x86_64 CPU (safe intrinsics); leaf 0xB only below the maximum.
    let max = core::arch::x86_64::__cpuid(0).eax;
    if max >= 0xb {
        let r = core::arch::x86_64::__cpuid_count(0xb, 0);
        if r.ebx != 0 {
            return r.edx;
        }
    }
    core::arch::x86_64::__cpuid(1).ebx >> 24
}

fn xapic_base() -> u64 {
    base_msr() & APIC_BASE_ADDR_MASK
}

fn write(offset: u32, value: u32) {
    if x2apic() {
        // SAFETY: an x2APIC register MSR of this CPU; the callers write architectural values.
        unsafe { Msr::new(x2apic_msr(offset)).write(u64::from(value)) }
    } else {
        let a = xapic_base() + u64::from(offset);
        // SAFETY: the xAPIC page (below 4 GiB, mapped uncached by paging::init or map_mmio in
        // [`enable`]); 32-bit aligned register access as §11.4.1 requires.
        unsafe { (a as *mut u32).write_volatile(value) }
    }
}

fn read(offset: u32) -> u32 {
    if x2apic() {
        // SAFETY: as `write`.
        unsafe { Msr::new(x2apic_msr(offset)).read() as u32 }
    } else {
        let a = xapic_base() + u64::from(offset);
        // SAFETY: as `write`.
        unsafe { (a as *const u32).read_volatile() }
    }
}

/// Software-enable this CPU's local APIC (so it accepts fixed IPIs), spurious vector
/// [`SPURIOUS_VECTOR`].
pub fn enable() {
    if !x2apic() {
        let _ = crate::paging::map_mmio(xapic_base(), 4096);
    }
    let svr = read(reg::SVR);
    write(reg::SVR, (svr & !0xff) | SVR_ENABLE | u32::from(SPURIOUS_VECTOR));
}

/// Signal end of interrupt (fixed-vector handlers).
pub fn eoi() {
    write(reg::EOI, 0);
}

/// Whether an IPI can name `dest` in this APIC mode (xAPIC: 8-bit destination IDs).
pub fn reachable(dest: u32) -> bool {
    x2apic() || dest <= 0xff
}

/// Send an IPI with ICR low word `low` to `dest`. xAPIC: waits (bounded) for the previous one
/// to leave; false if `dest` cannot be named in this mode (an ID over 255 in xAPIC mode).
fn send(dest: u32, low: u32) -> bool {
    if x2apic() {
        // SAFETY: x2APIC ICR write: destination in bits 63:32, command in 31:0 (§11.12.9).
        unsafe { Msr::new(X2APIC_ICR).write((u64::from(dest) << 32) | u64::from(low)) };
        return true;
    }
    if !reachable(dest) {
        return false;
    }
    crate::time::wait_until(10_000_000, || read(reg::ICR_LOW) & icr::PENDING == 0);
    write(reg::ICR_HIGH, dest << 24);
    write(reg::ICR_LOW, low);
    crate::time::wait_until(10_000_000, || read(reg::ICR_LOW) & icr::PENDING == 0);
    true
}

/// INIT IPI (assert, level), the first step of the start-up sequence (§9.4.4.1, §11.6.1).
pub fn send_init(dest: u32) -> bool {
    send(dest, icr::INIT | icr::ASSERT | icr::LEVEL)
}

/// Start-up IPI: the CPU starts in real mode at `vector << 12` (a page below 1 MiB).
pub fn send_startup(dest: u32, page: u8) -> bool {
    send(dest, icr::STARTUP | icr::ASSERT | u32::from(page))
}

/// A fixed interrupt with `vector` to `dest`.
pub fn send_fixed(dest: u32, vector: u8) -> bool {
    send(dest, icr::FIXED | icr::ASSERT | u32::from(vector))
}

/// An NMI to `dest` (used to stop the other CPUs when one fails).
pub fn send_nmi(dest: u32) -> bool {
    send(dest, icr::NMI | icr::ASSERT)
}
