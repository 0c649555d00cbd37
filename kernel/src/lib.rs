//! The platform: boot information, memory (frames, page tables, heap, DMA), exceptions,
//! console + log, TSC clock, ACPI, PCIe, CPUs (SMP, per-CPU data), command line, and the
//! driver [`hal::Hal`].
//!
//! The only crate (beside `boot`) with `unsafe`; every block carries a `// SAFETY:` note.
//! Start-up order (see [`init`]): console → boot information → clock → GDT/IDT → frames →
//! page tables → heap + DMA pool; then the app parses its command line and calls
//! [`devices`] (ACPI + PCIe) and [`smp::start`] (application processors). Pure logic (boot-info parsing, frame ranges, command-line
//! parser) is unit tested on the host with `cargo test -p kernel --lib`.
#![cfg_attr(not(test), no_std)]
#![feature(abi_x86_interrupt)]
#![feature(allow_internal_unsafe)]
// `allow_internal_unsafe` lets `entry!` emit the `no_mangle` app entry inside apps that forbid unsafe code.
#![allow(internal_features)]

extern crate alloc;

pub mod acpi;
pub mod apic;
pub mod bootinfo;
pub mod cmdline;
pub mod console;
pub mod entropy;
pub mod exit;
pub mod fbcon;
pub mod fault;
pub mod hal;
pub mod interrupts;
pub mod memory;
pub mod paging;
pub mod pci;
pub mod pcie_slot;
pub mod percpu;
pub mod power;
pub mod smp;
pub mod time;
pub mod trampoline;
pub mod vga;

pub use hal::{KernelDma, KernelHal, KernelMmio};

/// What [`init`] hands the app.
pub struct Boot {
    /// The kernel command line (PVH `cmdline_paddr`, Multiboot2 tag 1), copied into the image.
    pub cmdline: &'static str,
    /// How the image was entered.
    pub protocol: bootinfo::Protocol,
    /// A copy of the first boot module (QEMU `-initrd`, GRUB `module2`), if the loader gave one.
    pub module: Option<&'static [u8]>,
}

/// Platform figures reported on the "ready" line (and used by `scripts/bench-boot`).
#[derive(Debug, Default, Clone, Copy)]
pub struct BootStats {
    pub pages_2m_mapped: u64,
    pub ram_bytes: u64,
    pub pci_functions: usize,
    pub cpus: usize,
}

/// Statistics collected during start-up.
pub static STATS: spin::Mutex<BootStats> = spin::Mutex::new(BootStats {
    pages_2m_mapped: 0,
    ram_bytes: 0,
    pci_functions: 0,
    cpus: 0,
});

/// Bring up console, clock, exceptions and memory. Called by `kernel_entry` with the
/// registers the boot code passed; never returns an error: a machine without a memory map
/// cannot run the appliance, so it stops with a failure status.
pub fn init(info_paddr: u64, protocol_magic: u64) -> Boot {
    percpu::install(percpu::CpuId::BOOT);
    console::init();
    let boot = match bootinfo::parse_from_boot(info_paddr, protocol_magic) {
        Ok(b) => b,
        Err(e) => {
            log::error!("boot: {e}");
            exit::fail();
        }
    };
    if let Some(m) = boot.text {
        vga::enable(m);
    }
    if let Some(m) = boot.frame {
        fbcon::enable(m);
    }
    match (boot.text.filter(|_| vga::enabled()), boot.frame.zip(fbcon::size())) {
        (Some(m), _) => log::info!("console: serial COM1 and VGA text {}x{} at {:#x}", m.cols, m.rows, m.addr),
        (None, Some((m, (cols, rows)))) => {
            log::info!("console: serial COM1 and framebuffer {}x{}x{} at {:#x} ({cols}x{rows} characters)", m.width, m.height, m.bpp, m.addr)
        }
        (None, None) => log::info!("console: serial COM1 (the loader reports no text screen or usable framebuffer)"),
    }
    time::init();
    log::info!(
        "boot: {} entry, tsc {} kHz ({}), {} memory regions",
        boot.protocol.name(),
        time::tsc_khz(),
        time::source(),
        boot.regions.len()
    );
    interrupts::init();
    memory::init(&boot);
    if let Some(m) = boot.module {
        log::info!("boot: module of {} bytes", m.len());
    }
    Boot { cmdline: boot.cmdline, protocol: boot.protocol, module: boot.module }
}

/// Discover the machine's devices: ACPI tables (FADT PM timer, MCFG, MADT) then every PCIe
/// function. `force_pm_timer` re-measures the TSC against the ACPI PM timer (test.clock=pmtimer).
pub fn devices(force_pm_timer: bool) {
    let info = acpi::init(bootinfo::rsdp(), force_pm_timer);
    pci::init(info.as_ref().and_then(|i| i.ecam));
}

/// Declare the app's main function: `kernel::entry!(main);` with `fn main(boot: kernel::Boot) -> !`.
/// The boot code calls `kernel_entry`, which runs [`init`] and then `main`.
#[allow_internal_unsafe]
#[macro_export]
macro_rules! entry {
    ($main:path) => {
        /// Called by `kernel_entry` once the platform is up.
        #[unsafe(no_mangle)]
        pub extern "Rust" fn __kernel_app_main(boot: $crate::Boot) -> ! {
            let f: fn($crate::Boot) -> ! = $main;
            f(boot)
        }
    };
}

#[cfg(target_os = "none")]
unsafe extern "Rust" {
    fn __kernel_app_main(boot: Boot) -> !;
}

/// Entered from `boot` in long mode with the early identity map and the boot stack.
#[cfg(target_os = "none")]
#[unsafe(no_mangle)]
pub extern "C" fn kernel_entry(info_paddr: u64, protocol_magic: u64) -> ! {
    let boot = init(info_paddr, protocol_magic);
    // SAFETY: defined by the `entry!` macro in the app with exactly this signature.
    unsafe { __kernel_app_main(boot) }
}

#[cfg(all(target_os = "none", not(test)))]
#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    let cpu = percpu::this_cpu();
    if !smp::claim_failure() {
        exit::halt(); // another CPU already reports and ends the run
    }
    smp::stop_others();
    console::emergency_write(format_args!("PANIC on cpu {cpu}: {info}\n"));
    exit::fail()
}
