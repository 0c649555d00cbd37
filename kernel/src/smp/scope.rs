//! Scoped jobs: closures that borrow from the caller's stack run on application processors,
//! as `std::thread::scope` runs them on threads. [`scope`] hands its closure a [`Scope`] whose
//! [`Scope::run_on`] posts a job to one AP and gives back a [`ScopedJob`] to look at or join;
//! meanwhile the calling CPU does its own share (e.g. an owner's turn loop). `scope` returns
//! only once every CPU it posted to has finished that job and dropped it, whether or not the
//! jobs were joined, so what the jobs borrow outlives them. Slow path only: posting allocates
//! and takes the mailbox lock ([`super::post`]); a job's own work is the caller's business.
use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::cell::RefCell;
use core::marker::PhantomData;
use core::sync::atomic::{AtomicBool, Ordering};

use super::SmpError;
use crate::percpu::{self, CpuId, Job};

/// How a scope hands a job to a CPU ([`super::post`] in the image; a host test's stand-in).
type Post = fn(CpuId, Job) -> Result<(), SmpError>;

/// The jobs of one [`scope`] call. `'scope` is the scope's own lifetime, `'env` that of what
/// its jobs may borrow. Used from the calling CPU only (not `Sync`: jobs cannot post jobs).
pub struct Scope<'scope, 'env: 'scope> {
    post: Post,
    /// CPUs holding (waiting or running) a job of this scope.
    posted: RefCell<Vec<CpuId>>,
    scope: PhantomData<&'scope mut &'scope ()>,
    env: PhantomData<&'env mut &'env ()>,
}

/// A job's answer, filled in on its CPU.
struct Outcome<T> {
    done: AtomicBool,
    value: spin::Mutex<Option<T>>,
}

/// A job of a [`Scope`] running on another CPU.
pub struct ScopedJob<'scope, T> {
    cpu: CpuId,
    outcome: Arc<Outcome<T>>,
    scope: PhantomData<&'scope ()>,
}

/// Run `f` with a [`Scope`] on which it may post jobs that borrow from the caller; returns
/// `f`'s value once every job posted has finished (waiting for them without a limit: a CPU
/// that fails stops the image).
pub fn scope<'env, F, T>(f: F) -> T
where
    F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> T,
{
    scope_with(super::post, f)
}

pub(super) fn scope_with<'env, F, T>(post: Post, f: F) -> T
where
    F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> T,
{
    let s = Scope { post, posted: RefCell::new(Vec::new()), scope: PhantomData, env: PhantomData };
    // Dropped last, on return or unwinding (host tests; the image aborts on panic).
    let _wait = WaitForJobs(&s.posted);
    f(&s)
}

/// Waits, when dropped, until every CPU in the list is idle. A job of a scope has run and
/// been dropped (its captures with it) once its CPU's mailbox is empty and the CPU is not
/// running a job: the slot marks itself busy before it takes the job and idle only after the
/// job was dropped (`PerCpu::run_job`).
struct WaitForJobs<'a>(&'a RefCell<Vec<CpuId>>);

impl Drop for WaitForJobs<'_> {
    fn drop(&mut self) {
        for cpu in self.0.borrow().iter() {
            if let Some(slot) = percpu::slot(*cpu) {
                while !slot.idle() {
                    core::hint::spin_loop();
                }
            }
        }
    }
}

/// A job [`Scope::run_on`] could not post, given back with the reason.
pub struct Refused<F> {
    pub error: SmpError,
    pub job: F,
}

impl<F> core::fmt::Debug for Refused<F> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Refused({:?})", self.error)
    }
}

impl<'scope, 'env> Scope<'scope, 'env> {
    /// Post `f` to `cpu` (an online application processor, not the caller, its mailbox empty);
    /// it runs there once, with interrupts off. Refused (`f` given back) for the reasons
    /// [`super::post`] gives.
    pub fn run_on<F, T>(&'scope self, cpu: CpuId, f: F) -> Result<ScopedJob<'scope, T>, Refused<F>>
    where
        F: FnOnce() -> T + Send + 'scope,
        T: Send + 'scope,
    {
        let outcome = Arc::new(Outcome { done: AtomicBool::new(false), value: spin::Mutex::new(None) });
        // The closure waits here until its CPU takes it, so a refused post can give it back.
        let cell = Arc::new(spin::Mutex::new(Some(f)));
        let (out, take) = (outcome.clone(), cell.clone());
        let job: Box<dyn FnOnce() + Send + 'scope> = Box::new(move || {
            let f = take.lock().take();
            if let Some(f) = f {
                *out.value.lock() = Some(f());
            }
            out.done.store(true, Ordering::Release);
        });
        // SAFETY: only the lifetime changes (same layout, same vtable). The job runs and is
        // dropped before `'scope` ends: `scope_with` neither returns nor unwinds before every
        // CPU recorded in `posted` went idle, i.e. took this job from its mailbox, ran it and
        // dropped it (`WaitForJobs`); a CPU that faults stops the image instead of coming
        // back. Leaking the `ScopedJob` changes nothing: the wait is on the CPU, not on the
        // handle.
        let job: Job = unsafe { core::mem::transmute::<Box<dyn FnOnce() + Send + 'scope>, Job>(job) };
        // Recorded whatever the answer: a job left in a mailbox is waited for too.
        self.posted.borrow_mut().push(cpu);
        if let Err(error) = (self.post)(cpu, job) {
            // Not run: refused before the mailbox, or left there and now empty (it finds no
            // closure if its CPU takes it after all).
            let f = cell.lock().take();
            return match f {
                Some(job) => Err(Refused { error, job }),
                // Its CPU took it meanwhile: it runs.
                None => Ok(ScopedJob { cpu, outcome, scope: PhantomData }),
            };
        }
        Ok(ScopedJob { cpu, outcome, scope: PhantomData })
    }
}

impl<T> ScopedJob<'_, T> {
    /// The CPU it runs on.
    pub fn cpu(&self) -> CpuId {
        self.cpu
    }

    /// Whether its closure has returned.
    pub fn is_finished(&self) -> bool {
        self.outcome.done.load(Ordering::Acquire)
    }

    /// Wait for its closure to return and take its value.
    pub fn join(self) -> T {
        while !self.is_finished() {
            core::hint::spin_loop();
        }
        self.outcome.value.lock().take().expect("a finished job left its value")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    /// CPUs 40..43 stand in for application processors: a std thread each takes and runs the
    /// jobs posted to its slot (the parked AP's loop without the `hlt`).
    const FIRST: u32 = 40;
    const N: u32 = 3;

    fn post_to_slot(cpu: CpuId, job: Job) -> Result<(), SmpError> {
        percpu::slot(cpu).ok_or(SmpError::NotOnline(cpu))?.put_job(job).map_err(|_| SmpError::Busy(cpu))
    }

    #[test]
    fn scoped_jobs_borrow_the_callers_data_and_the_scope_waits_for_them() {
        let stop = Arc::new(AtomicBool::new(false));
        let aps: Vec<_> = (FIRST..FIRST + N)
            .map(|c| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let slot = percpu::slot(CpuId(c)).unwrap();
                    while !stop.load(Ordering::Acquire) {
                        if slot.has_job() {
                            // Slow to finish: the scope must still wait for it.
                            std::thread::sleep(std::time::Duration::from_millis(20));
                            slot.run_job();
                        }
                        std::thread::yield_now();
                    }
                })
            })
            .collect();
        let input: Vec<u64> = (1..=300).collect();
        let mut sums = [0u64; N as usize];
        let touched = AtomicU32::new(0);
        let mut owner_turns = 0u64;
        let total = scope_with(post_to_slot, |s| {
            let jobs: Vec<_> = sums
                .iter_mut()
                .zip(input.chunks(100))
                .enumerate()
                .map(|(i, (sum, part))| {
                    let touched = &touched;
                    s.run_on(CpuId(FIRST + i as u32), move || {
                        *sum = part.iter().sum();
                        touched.fetch_add(1, Ordering::AcqRel);
                        i
                    })
                    .unwrap()
                })
                .collect();
            // A CPU's mailbox is one deep.
            let refused = s.run_on(CpuId(FIRST), || 5).err().expect("the mailbox is full");
            assert_eq!(refused.error, SmpError::Busy(CpuId(FIRST)));
            assert_eq!((refused.job)(), 5, "a refused closure comes back");
            while !jobs.iter().all(|j| j.is_finished()) {
                owner_turns += 1;
                std::thread::yield_now();
            }
            let mut order = Vec::new();
            for j in jobs {
                order.push((j.cpu(), j.join()));
            }
            assert_eq!(order, (0..N as usize).map(|i| (CpuId(FIRST + i as u32), i)).collect::<Vec<_>>());
            // Not joined: the scope still waits for it.
            let late = s.run_on(CpuId(FIRST + 1), || touched.fetch_add(10, Ordering::AcqRel)).unwrap();
            core::mem::forget(late);
            7
        });
        assert_eq!(total, 7);
        assert!(owner_turns > 0, "the caller ran its turns while the jobs ran");
        assert_eq!(sums, [5050, 15050, 25050]);
        assert_eq!(touched.load(Ordering::Acquire), N + 10, "the unjoined job ran before the scope returned");
        stop.store(true, Ordering::Release);
        for t in aps {
            t.join().unwrap();
        }
    }
}
