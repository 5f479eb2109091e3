//! The counting global allocator: live heap bytes and allocations of the process.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, AtomicU64, Ordering};

/// Live heap bytes of the process: what was allocated and not yet freed (requested sizes,
/// without the allocator's own overhead).
static LIVE_HEAP: AtomicIsize = AtomicIsize::new(0);
/// Heap allocations made so far (`alloc`, `alloc_zeroed` and `realloc` calls).
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

/// The system allocator, counting [`LIVE_HEAP`] and [`ALLOCATIONS`].
struct Counting;

impl Counting {
    fn grew(by: isize) {
        LIVE_HEAP.fetch_add(by, Ordering::Relaxed);
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded to `System` unchanged; only counters are updated.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = System.alloc(layout);
        if !ptr.is_null() {
            Counting::grew(layout.size() as isize);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let ptr = System.alloc_zeroed(layout);
        if !ptr.is_null() {
            Counting::grew(layout.size() as isize);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        LIVE_HEAP.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = System.realloc(ptr, layout, new_size);
        if !new.is_null() {
            Counting::grew(new_size as isize - layout.size() as isize);
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Live heap bytes now (see [`LIVE_HEAP`]).
pub fn live_heap() -> isize {
    LIVE_HEAP.load(Ordering::Relaxed)
}

/// Heap allocations made so far by the whole process.
pub fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}
