//! The runtime's allocator: Rust's global allocator (through rquickjs's
//! `RustAllocator`) or an imaged sandbox's region, plus a per-call
//! allocation meter.
//!
//! Why: QuickJS polls its interrupt handler every 10,000 ticks, and a tick
//! can be an arbitrarily large native operation (`new Array(1e6).fill(1)`).
//! A loop that allocates, catches the out-of-memory error and retries can
//! therefore run for tens of seconds between two polls. Metering the bytes
//! a call allocates gives a second deterministic budget that is checked on
//! every allocation: once a call has allocated more than its allocation
//! budget, every further allocation fails and the call is marked preempted,
//! so the loop falls through to its next poll quickly and is stopped there.
//!
//! Invariants: only allocations made while a call is running are charged
//! (setup, GC and the embedder's own conversions between calls are free);
//! the heap *limit* itself stays QuickJS's `JS_SetMemoryLimit`, which the
//! engine enforces before it reaches this allocator.

use std::rc::Rc;

use rquickjs::allocator::{Allocator, RustAllocator};

use super::state::State;

/// `inner` with the meter around it: the system allocator for a sandbox
/// built per tenure, a region (`image.rs`) for an imaged one.
pub(crate) struct MeteredAllocator<A: Allocator = RustAllocator> {
    pub state: Rc<State>,
    pub inner: A,
}

impl<A: Allocator> MeteredAllocator<A> {
    /// Adds the usable size of `ptr` (when non-null) times `sign` to the
    /// live-bytes gauge.
    #[inline]
    fn track(&self, ptr: *mut u8, sign: i64) {
        if !ptr.is_null() {
            // SAFETY: `ptr` came from `inner` and is still live.
            let n = unsafe { A::usable_size(ptr) } as i64;
            self.state.add_live(sign * n);
        }
    }
}

// SAFETY: every method delegates to `inner`, which upholds the trait's
// contract; the meter only decides whether to return null first, which the
// contract permits (QuickJS treats null as out of memory).
unsafe impl<A: Allocator> Allocator for MeteredAllocator<A> {
    fn alloc(&mut self, size: usize) -> *mut u8 {
        if !self.state.charge(size) {
            return std::ptr::null_mut();
        }
        let p = self.inner.alloc(size);
        self.track(p, 1);
        p
    }

    fn calloc(&mut self, count: usize, size: usize) -> *mut u8 {
        let Some(total) = count.checked_mul(size) else {
            return std::ptr::null_mut();
        };
        if total == 0 || !self.state.charge(total) {
            return std::ptr::null_mut();
        }
        let p = self.inner.calloc(count, size);
        self.track(p, 1);
        p
    }

    unsafe fn dealloc(&mut self, ptr: *mut u8) {
        self.track(ptr, -1);
        self.inner.dealloc(ptr)
    }

    unsafe fn realloc(&mut self, ptr: *mut u8, new_size: usize) -> *mut u8 {
        // QuickJS maps realloc(NULL, n) and realloc(p, 0) itself, but stay
        // correct if it ever passes them through.
        if ptr.is_null() {
            return self.alloc(new_size);
        }
        if new_size == 0 {
            self.dealloc(ptr);
            return std::ptr::null_mut();
        }
        let old = A::usable_size(ptr);
        if new_size > old && !self.state.charge(new_size - old) {
            return std::ptr::null_mut();
        }
        let p = self.inner.realloc(ptr, new_size);
        if !p.is_null() {
            self.state.add_live(-(old as i64));
            self.track(p, 1);
        }
        p
    }

    unsafe fn usable_size(ptr: *mut u8) -> usize {
        A::usable_size(ptr)
    }
}
