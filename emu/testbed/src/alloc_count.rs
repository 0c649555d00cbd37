//! alloc_count: a global allocator that counts the bytes live on the threads that opt in.
//!
//! A test binary installs it with
//! `#[global_allocator] static A: testbed::alloc_count::Counting = testbed::alloc_count::Counting;`
//! and calls [`count_this_thread`] in the test that measures; the harness's other threads
//! allocate concurrently and are not counted. [`live_bytes`] is the running balance.
//! Allocation itself is delegated to [`std::alloc::System`] unchanged.
#![allow(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, Ordering};

/// The counting allocator (a zero-sized wrapper around `System`).
pub struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

thread_local! {
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread's allocations are counted. `try_with`: during thread teardown the
/// flag may already be gone; such late frees are simply not counted.
fn counted() -> bool {
    COUNTED.try_with(|c| c.get()).unwrap_or(false)
}

/// Count this thread's allocations from now on.
pub fn count_this_thread() {
    COUNTED.with(|c| c.set(true));
}

/// Bytes allocated minus bytes freed by counted threads so far.
pub fn live_bytes() -> isize {
    LIVE.load(Ordering::Relaxed)
}

// SAFETY: every method forwards its arguments unchanged to `System`, which upholds the
// `GlobalAlloc` contract; the only extra work is an atomic add on a counter, which neither
// allocates nor unwinds.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if counted() {
            LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract for `alloc` (non-zero size layout) is passed on as is.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        if counted() {
            LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        }
        // SAFETY: `p` was returned by this allocator, i.e. by `System`, for layout `l`.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        if counted() {
            LIVE.fetch_add(n as isize - l.size() as isize, Ordering::Relaxed);
        }
        // SAFETY: `p` was returned by `System` for layout `l`; `n` is the caller's new size
        // under the same `realloc` contract.
        unsafe { System.realloc(p, l, n) }
    }
}
