//! Deliberate faults for tests (`test.fault=` on the command line, on the CPU `test.fault-cpu=`
//! names): they prove that the exception path reports the CPU, vector, error code, RIP and CR2
//! and the panic path the CPU and message, and that both end with a failure status.

/// Kinds of deliberate fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Read an unmapped address (vector 14).
    PageFault,
    /// Execute `ud2` (vector 6).
    InvalidOpcode,
    /// Load through a non-canonical address (vector 13).
    GeneralProtection,
    /// A Rust panic.
    Panic,
}

impl Fault {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "pagefault" => Some(Self::PageFault),
            "ud" => Some(Self::InvalidOpcode),
            "gpf" => Some(Self::GeneralProtection),
            "panic" => Some(Self::Panic),
            _ => None,
        }
    }
}

/// An address no page table maps: 64 TiB, far above any RAM the kernel maps.
pub const UNMAPPED: u64 = 0x4000_dead_b000;

/// Trigger `f`. Returns only if the CPU did not fault (which the caller reports as failure).
pub fn trigger(f: Fault) {
    log::warn!("fault: triggering {f:?} on cpu {} as asked by test.fault", crate::percpu::this_cpu());
    match f {
        // SAFETY: deliberately faulting accesses; the exception handler stops the machine.
        Fault::PageFault => unsafe {
            let v = (UNMAPPED as *const u64).read_volatile();
            core::hint::black_box(v);
        },
        Fault::GeneralProtection => unsafe {
            let v = (0x8000_0000_0000_0000u64 as *const u64).read_volatile();
            core::hint::black_box(v);
        },
        // SAFETY: ud2 raises #UD, handled by the IDT.
        Fault::InvalidOpcode => unsafe { core::arch::asm!("ud2") },
        Fault::Panic => panic!("deliberate panic (test.fault=panic)"),
    }
}
