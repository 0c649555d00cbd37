//! Per-CPU data: one cache-line-aligned slot per CPU in a static table, reached from the CPU
//! itself through its GS base (IA32_GS_BASE points at its own slot), so [`this_cpu`] is one
//! GS-relative load. The slot carries the CPU number, its local APIC ID, its start-up state and
//! the mailbox through which the slow path posts work to it (see [`crate::smp`]).
use alloc::boxed::Box;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};

/// Most CPUs the image drives (the rest of a larger MADT is reported and left parked).
pub const MAX_CPUS: usize = 64;

/// A CPU's number: 0 is the boot CPU, then the application processors in MADT order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CpuId(pub u32);

impl CpuId {
    /// The boot CPU.
    pub const BOOT: CpuId = CpuId(0);
    /// The slot index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl core::fmt::Display for CpuId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Work posted to a CPU: runs once, on that CPU, with interrupts off.
pub type Job = Box<dyn FnOnce() + Send + 'static>;

/// Start-up state of a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum CpuState {
    /// No CPU, or one not started (`cpus=` limit, not in the MADT).
    Absent = 0,
    /// INIT-SIPI-SIPI sent; the CPU has not reported yet.
    Starting = 1,
    /// Running kernel code: parked waiting for work, or running a job.
    Online = 2,
    /// Did not report within the start-up timeout; never used.
    Failed = 3,
}

impl CpuState {
    fn from_u8(v: u8) -> Self {
        match v {
            1 => Self::Starting,
            2 => Self::Online,
            3 => Self::Failed,
            _ => Self::Absent,
        }
    }
}

/// One CPU's slot. Aligned to a cache line so no two CPUs share one through this table.
#[repr(C, align(64))]
pub struct PerCpu {
    /// This slot's index (read GS-relative by [`this_cpu`]; set before the CPU runs).
    index: u32,
    /// Local APIC ID (x2APIC ID where the MADT gives one).
    apic_id: AtomicU32,
    state: AtomicU8,
    /// A job is waiting in `job` (checked without the lock by the parked CPU).
    pending: AtomicBool,
    /// The CPU is running a job.
    busy: AtomicBool,
    /// Jobs this CPU finished.
    jobs_done: AtomicU64,
    /// The posted job (one deep).
    job: spin::Mutex<Option<Job>>,
}

const fn slots() -> [PerCpu; MAX_CPUS] {
    let mut t = [const {
        PerCpu {
            index: 0,
            apic_id: AtomicU32::new(0),
            state: AtomicU8::new(0),
            pending: AtomicBool::new(false),
            busy: AtomicBool::new(false),
            jobs_done: AtomicU64::new(0),
            job: spin::Mutex::new(None),
        }
    }; MAX_CPUS];
    let mut i = 0;
    while i < MAX_CPUS {
        t[i].index = i as u32;
        i += 1;
    }
    t
}

static PERCPU: [PerCpu; MAX_CPUS] = slots();

/// The slot of CPU `cpu` (None past [`MAX_CPUS`]).
pub fn slot(cpu: CpuId) -> Option<&'static PerCpu> {
    PERCPU.get(cpu.index())
}

/// Point this CPU's GS base at its slot. Called first thing on every CPU (boot CPU in
/// `kernel::init`, application processors in their entry).
pub fn install(cpu: CpuId) {
    if let Some(s) = slot(cpu) {
        x86_64::registers::model_specific::GsBase::write(x86_64::VirtAddr::from_ptr(s));
    }
}

/// The CPU this code runs on (one GS-relative load; valid once [`install`] ran, i.e. in all
/// Rust code of the image).
#[inline]
pub fn this_cpu() -> CpuId {
    #[cfg(target_os = "none")]
    {
        let i: u32;
        // SAFETY: GS base points at this CPU's `PerCpu` slot (installed before any Rust code
        // reads it); `index` is a plain u32 written before the CPU started.
        unsafe {
            core::arch::asm!(
                "mov {0:e}, dword ptr gs:[{off}]",
                out(reg) i,
                off = const core::mem::offset_of!(PerCpu, index),
                options(nostack, readonly, preserves_flags)
            )
        };
        CpuId(i)
    }
    #[cfg(not(target_os = "none"))]
    CpuId::BOOT
}

impl PerCpu {
    /// This slot's CPU.
    pub fn cpu(&self) -> CpuId {
        CpuId(self.index)
    }
    pub fn apic_id(&self) -> u32 {
        self.apic_id.load(Ordering::Relaxed)
    }
    pub fn set_apic_id(&self, id: u32) {
        self.apic_id.store(id, Ordering::Relaxed)
    }
    pub fn state(&self) -> CpuState {
        CpuState::from_u8(self.state.load(Ordering::Acquire))
    }
    pub fn set_state(&self, s: CpuState) {
        self.state.store(s as u8, Ordering::Release)
    }
    /// Move from `from` to `to`; false if the state was something else.
    pub fn transition(&self, from: CpuState, to: CpuState) -> bool {
        self.state.compare_exchange(from as u8, to as u8, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }
    /// Jobs this CPU finished.
    pub fn jobs_done(&self) -> u64 {
        self.jobs_done.load(Ordering::Acquire)
    }
    /// No job waiting and none running.
    pub fn idle(&self) -> bool {
        !self.pending.load(Ordering::Acquire) && !self.busy.load(Ordering::Acquire)
    }
    /// Put `job` in the mailbox; gives it back if one is already waiting.
    pub fn put_job(&self, job: Job) -> Result<(), Job> {
        let mut slot = self.job.lock();
        if slot.is_some() {
            return Err(job);
        }
        *slot = Some(job);
        self.pending.store(true, Ordering::Release);
        Ok(())
    }
    /// Whether a job waits (lock-free check for the parked CPU).
    pub fn has_job(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }
    /// Take the waiting job and run it, counting it. Called by the owning CPU only.
    pub fn run_job(&self) {
        self.busy.store(true, Ordering::Release);
        let job = {
            let mut slot = self.job.lock();
            self.pending.store(false, Ordering::Release);
            slot.take()
        };
        if let Some(job) = job {
            job();
            self.jobs_done.fetch_add(1, Ordering::AcqRel);
        }
        self.busy.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_know_their_index_and_mailbox_is_one_deep() {
        let s = slot(CpuId(5)).unwrap();
        assert_eq!(s.cpu(), CpuId(5));
        assert!(slot(CpuId(MAX_CPUS as u32)).is_none());
        assert!(s.idle());
        let hit = alloc::sync::Arc::new(AtomicU64::new(0));
        let h = hit.clone();
        assert!(s.put_job(Box::new(move || {
            h.fetch_add(7, Ordering::Relaxed);
        }))
        .is_ok());
        assert!(s.put_job(Box::new(|| {})).is_err(), "one job waits at a time");
        assert!(s.has_job() && !s.idle());
        s.run_job();
        assert_eq!(hit.load(Ordering::Relaxed), 7);
        assert_eq!(s.jobs_done(), 1);
        assert!(s.idle());
        assert!(s.transition(CpuState::Absent, CpuState::Starting));
        assert!(!s.transition(CpuState::Absent, CpuState::Online));
        assert_eq!(s.state(), CpuState::Starting);
    }
}
