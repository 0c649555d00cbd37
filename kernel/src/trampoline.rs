//! The application processors' way in: a real-mode blob, copied to a free page below 1 MiB,
//! that a start-up IPI points at. It loads the boot CPU's first GDT (`boot_gdt64`), the boot CPU's CR4, CR3 (the one set
//! of page tables) and EFER, sets CR0 (protection and paging at once: real mode straight to
//! long mode), and far-jumps into the image's `ap_entry64`, which takes the stack and CPU
//! number the boot CPU left in [`AP_STACK_TOP`] / [`AP_CPU`] and calls `crate::smp::ap_main`.
//!
//! Only the blob's own bytes are addressed relative to its start (CS = page >> 4, IP = 0); the
//! GDT and the 64-bit entry are link-time addresses in the image (loaded at 1 MiB, below 4 GiB).
use core::sync::atomic::{AtomicU32, AtomicU64};

/// Stack top the next AP takes (written by the boot CPU before each start-up).
pub static AP_STACK_TOP: AtomicU64 = AtomicU64::new(0);
/// CPU number the next AP takes.
pub static AP_CPU: AtomicU32 = AtomicU32::new(0);

#[cfg(target_os = "none")]
core::arch::global_asm!(
    r#"
    .section .rodata.ap_trampoline, "a"
    .balign 16
    .code16
    .global ap_tramp_start
ap_tramp_start:
    cli
    cld
    mov %cs, %ax
    mov %ax, %ds
    lgdtl ap_tramp_gdtr - ap_tramp_start
    movl ap_tramp_cr4 - ap_tramp_start, %eax
    mov %eax, %cr4
    movl ap_tramp_cr3 - ap_tramp_start, %eax
    mov %eax, %cr3
    movl ap_tramp_efer - ap_tramp_start, %eax
    xor %edx, %edx
    mov $0xc0000080, %ecx
    wrmsr
    movl ap_tramp_cr0 - ap_tramp_start, %eax
    mov %eax, %cr0
    ljmpl *(ap_tramp_far - ap_tramp_start)
    .balign 8
ap_tramp_gdtr:                            /* the boot CPU's first GDT (boot/src/lib.rs): 0x08 code, 0x10 data */
    .short boot_gdt64_limit
    .long boot_gdt64
    .balign 4
ap_tramp_far:
    .long ap_entry64
    .short 0x08
    .balign 4
    .global ap_tramp_cr3, ap_tramp_cr4, ap_tramp_cr0, ap_tramp_efer, ap_tramp_end
ap_tramp_cr3: .long 0
ap_tramp_cr4: .long 0
ap_tramp_cr0: .long 0
ap_tramp_efer: .long 0
ap_tramp_end:

    .section .text.ap_entry64, "ax"
    .code64
ap_entry64:
    mov $0x10, %eax
    mov %eax, %ds
    mov %eax, %es
    mov %eax, %ss
    xor %eax, %eax
    mov %eax, %fs
    mov %eax, %gs
    mov {stack}(%rip), %rsp
    mov {cpu}(%rip), %edi
    xor %ebp, %ebp
    call {main}
1:
    cli
    hlt
    jmp 1b
"#,
    stack = sym AP_STACK_TOP,
    cpu = sym AP_CPU,
    main = sym crate::smp::ap_main,
    options(att_syntax)
);

#[cfg(target_os = "none")]
unsafe extern "C" {
    static ap_tramp_start: u8;
    static ap_tramp_end: u8;
    static ap_tramp_cr3: u8;
    static ap_tramp_cr4: u8;
    static ap_tramp_cr0: u8;
    static ap_tramp_efer: u8;
}

/// CR4 bits an AP must not take from the boot CPU: PCIDE (bit 17) may only be set in long mode.
#[cfg(target_os = "none")]
const CR4_NOT_COPIED: u64 = 1 << 17;
/// EFER bits an AP takes from the boot CPU: SCE, LME, NXE (LMA is set by the CPU itself).
#[cfg(target_os = "none")]
const EFER_COPIED: u64 = (1 << 0) | (1 << 8) | (1 << 11);

/// Copy the blob to `page` (page aligned, below 1 MiB, RAM nothing else uses) with this CPU's
/// CR0/CR3/CR4/EFER patched in. False if the page or CR3 is out of the blob's reach.
#[cfg(target_os = "none")]
pub fn install(page: u64) -> bool {
    use x86_64::registers::control::{Cr0, Cr3, Cr4};
    use x86_64::registers::model_specific::Efer;
    let start = core::ptr::addr_of!(ap_tramp_start) as u64;
    let len = core::ptr::addr_of!(ap_tramp_end) as u64 - start;
    let cr3 = Cr3::read_raw().0.start_address().as_u64();
    if page % 4096 != 0 || page + len > 0x10_0000 || cr3 > u64::from(u32::MAX) || len > 4096 {
        return false;
    }
    let fields = [
        (core::ptr::addr_of!(ap_tramp_cr3) as u64, cr3 as u32),
        (core::ptr::addr_of!(ap_tramp_cr4) as u64, (Cr4::read_raw() & !CR4_NOT_COPIED) as u32),
        (core::ptr::addr_of!(ap_tramp_cr0) as u64, Cr0::read_raw() as u32),
        (core::ptr::addr_of!(ap_tramp_efer) as u64, (Efer::read_raw() & EFER_COPIED) as u32),
    ];
    // SAFETY: `page` is identity-mapped RAM below 1 MiB that the memory map marks usable and
    // nothing in the image uses (chosen by memory::low_page); the blob is `len` <= 4096 bytes.
    unsafe { core::ptr::copy_nonoverlapping(start as *const u8, page as *mut u8, len as usize) };
    for (sym, value) in fields {
        // SAFETY: each field lies inside the blob just copied (offset < len), 4-byte aligned.
        unsafe { ((page + (sym - start)) as *mut u32).write_volatile(value) };
    }
    true
}

#[cfg(not(target_os = "none"))]
pub fn install(_page: u64) -> bool {
    false
}
