//! Boot entry: the PVH ELF note and Multiboot2 header, the 32-bit entry code, early page
//! tables (first 4 GiB identity-mapped with 2 MiB pages), and the jump to long mode.
//!
//! Both entries arrive in 32-bit protected mode with paging off:
//! - PVH (Xen `arch-x86/hvm/start_info.h`; QEMU `-kernel`): `ebx` = physical address of
//!   `hvm_start_info`. The note `XEN_ELFNOTE_PHYS32_ENTRY` (type 18) names `pvh_start32`.
//! - Multiboot2 (Multiboot2 spec §3.2, GRUB `multiboot2`): `eax` = 0x36d76289,
//!   `ebx` = physical address of the boot information; the ELF entry is `_start32`.
//!
//! Both paths read the TSC first (for boot-time figures), zero `.bss`, build the early
//! tables, enable PAE + long mode + paging and call `kernel_entry(info, protocol)` in
//! 64-bit mode with `protocol` = [`PROTOCOL_PVH`] or the Multiboot2 magic.
#![no_std]

/// `protocol` argument of `kernel_entry` when entered through the PVH note.
pub const PROTOCOL_PVH: u64 = 0x5056_4800; // "PVH\0"
/// Magic left in `eax` by a Multiboot2 loader (Multiboot2 spec §3.2 "Machine state").
pub const MULTIBOOT2_BOOTLOADER_MAGIC: u64 = 0x36d7_6289;
/// Magic in the header a Multiboot2 loader looks for (spec §3.1.1).
pub const MULTIBOOT2_HEADER_MAGIC: u32 = 0xe852_50d6;
/// XEN_ELFNOTE_PHYS32_ENTRY (xen/include/public/elfnote.h).
pub const XEN_ELFNOTE_PHYS32_ENTRY: u32 = 18;

#[cfg(target_os = "none")]
core::arch::global_asm!(
    r#"
    .section .multiboot2_header, "a"
    .balign 8
mb2_header_start:
    .long {mb2_magic}
    .long 0                                   /* architecture: i386 protected mode */
    .long mb2_header_end - mb2_header_start
    .long 0x100000000 - ({mb2_magic} + 0 + (mb2_header_end - mb2_header_start))
    .balign 8                                 /* framebuffer tag (spec 3.1.10): type 5, optional, */
    .short 5                                  /* size 20, any width and height, 32 bpp: under */
    .short 1                                  /* UEFI GRUB passes the GOP mode (kernel fbcon); */
    .long 20                                  /* under BIOS grub.cfg keeps text mode */
    .long 0
    .long 0
    .long 32
    .balign 8                                 /* end tag: type 0, flags 0, size 8 */
    .short 0
    .short 0
    .long 8
mb2_header_end:

    .section .note.Xen, "a", @note
    .balign 4
    .long 4                                   /* namesz: "Xen\0" */
    .long 8                                   /* descsz: 64-bit entry address */
    .long {xen_phys32_entry}
    .asciz "Xen"
    .balign 4
    .quad pvh_start32
    .balign 4

    .section .data.boot, "aw"
    .balign 8
    .global boot_first_tsc
boot_first_tsc:
    .quad 0
    .balign 8
    .global boot_gdt64, boot_gdt64_limit      /* also the application processors' first GDT (kernel trampoline) */
boot_gdt64:
    .quad 0
    .quad 0x00af9a000000ffff                  /* 0x08: 64-bit code, DPL 0 */
    .quad 0x00cf92000000ffff                  /* 0x10: data */
boot_gdt64_end:
    .set boot_gdt64_limit, boot_gdt64_end - boot_gdt64 - 1
boot_gdt64_ptr:
    .short boot_gdt64_end - boot_gdt64 - 1
    .quad boot_gdt64

    .section .bss.boot, "aw", @nobits
    .balign 4096
boot_pml4:  .skip 4096
boot_pdpt:  .skip 4096
boot_pd:    .skip 4096 * 4
boot_stack: .skip 262144                 /* 256 KiB: the deepest appliance chain is ~47 KiB (12-image-nvmeof measures it) */
boot_stack_top:

    .section .boot.text, "ax"
    .code32
    .global pvh_start32
pvh_start32:
    mov %ebx, %edi
    mov ${pvh}, %esi
    jmp 1f
    .global _start32
_start32:
    mov %ebx, %edi
    mov %eax, %esi
1:
    rdtsc
    mov %eax, boot_first_tsc
    mov %edx, boot_first_tsc + 4
    cli
    cld
    /* zero .bss (the loaders zero it too, but neither promise covers every path) */
    mov %edi, %ebp                            /* no stack yet: keep info in ebp */
    mov $__bss_start, %edi
    mov $__bss_end, %ecx
    sub %edi, %ecx
    shr $2, %ecx                              /* both ends are page aligned (link.ld) */
    xor %eax, %eax
    rep stosl
    mov %ebp, %edi
    mov $boot_stack_top, %esp
    /* PML4[0] -> PDPT; PDPT[0..4] -> 4 page directories; 2048 x 2 MiB identity pages */
    mov $boot_pdpt, %eax
    or $0x3, %eax
    mov %eax, boot_pml4
    mov $boot_pd, %eax
    or $0x3, %eax
    xor %ecx, %ecx
2:
    mov %eax, boot_pdpt(,%ecx,8)
    add $4096, %eax
    inc %ecx
    cmp $4, %ecx
    jne 2b
    xor %ecx, %ecx
3:
    mov %ecx, %eax
    shl $21, %eax
    or $0x83, %eax                            /* present | writable | 2 MiB page */
    mov %eax, boot_pd(,%ecx,8)
    inc %ecx
    cmp $2048, %ecx
    jne 3b
    /* CR4.PAE, CR3, EFER.LME, CR0.PG|PE */
    mov %cr4, %eax
    or $0x20, %eax
    mov %eax, %cr4
    mov $boot_pml4, %eax
    mov %eax, %cr3
    mov $0xc0000080, %ecx
    rdmsr
    or $0x100, %eax
    wrmsr
    mov %cr0, %eax
    or $0x80000001, %eax
    mov %eax, %cr0
    lgdt boot_gdt64_ptr
    ljmp $0x08, $4f

    .code64
4:
    mov $0x10, %ax
    mov %ax, %ds
    mov %ax, %es
    mov %ax, %ss
    xor %ax, %ax
    mov %ax, %fs
    mov %ax, %gs
    mov $boot_stack_top, %rsp
    mov %edi, %edi                            /* zero-extend info address */
    mov %esi, %esi                            /* protocol / magic */
    xor %ebp, %ebp
    call kernel_entry
5:
    hlt
    jmp 5b
"#,
    mb2_magic = const MULTIBOOT2_HEADER_MAGIC,
    xen_phys32_entry = const XEN_ELFNOTE_PHYS32_ENTRY,
    pvh = const PROTOCOL_PVH,
    options(att_syntax)
);

#[cfg(target_os = "none")]
unsafe extern "C" {
    static boot_first_tsc: u64;
    static __image_start: u8;
    static __image_end: u8;
}

/// TSC value read by the very first instruction of the image (0 on the host).
pub fn first_tsc() -> u64 {
    #[cfg(target_os = "none")]
    {
        // SAFETY: written once by the 32-bit entry code before any Rust code runs; read-only after.
        unsafe { core::ptr::addr_of!(boot_first_tsc).read_volatile() }
    }
    #[cfg(not(target_os = "none"))]
    0
}

/// Physical range `[start, end)` occupied by the loaded image, `.bss` included.
pub fn image_range() -> (u64, u64) {
    #[cfg(target_os = "none")]
    {
        (
            core::ptr::addr_of!(__image_start) as u64,
            core::ptr::addr_of!(__image_end) as u64,
        )
    }
    #[cfg(not(target_os = "none"))]
    (0, 0)
}
