//! Engine reuse by heap image: a sandbox whose whole engine heap (the
//! QuickJS runtime, its context, every object and atom) lives in one
//! mapped region, so its state right after start-up — lockdown installed,
//! intrinsics frozen, the authoring API evaluated and hardened — can be
//! copied aside once and copied back at the end of every tenure.
//!
//! Why: building that state is most of a scheduled wake's CPU (a fresh
//! context, the lockdown's freeze of ~600 objects, the authoring API's
//! module evaluation: about 13 M of a wake's 20 M instructions), and all
//! of it is the same for every space. Copying it back costs one `memcpy`
//! of the image (a few hundred KiB).
//!
//! Why it isolates: after a restore the heap is byte for byte what it was
//! when the image was taken, before any space's code ran — no object,
//! global, prototype, closure, atom or pending job of an earlier tenure
//! exists any more, whatever that tenure did to its intrinsics. The engine's
//! Rust-side state is equally fixed: an imaged sandbox that gained anything
//! that would outlive a restore on the Rust side (a host function, a new
//! realm) is not reused but freed (`Sandbox::tainted`).
//!
//! # The region's allocator
//! All engine allocations come from a region mapped once per image
//! (`MAP_NORESERVE`: only touched pages cost memory), by a segregated
//! free-list allocator whose whole state (`Heap`) sits at the start of the
//! region, so that restoring the region's bytes restores the allocator too.
//! Blocks carry a 16-byte header naming their size class: 16-byte steps up
//! to 1 KiB, then four classes per power of two (a block is at most a
//! quarter larger than asked, so the engine's limit, which counts usable
//! sizes, still means about what it says). A freed block is reused by its
//! class only.
//! The engine's own heap limit (`JS_SetMemoryLimit`) still bounds what a
//! space may hold; the region is sized well above it for fragmentation.

use std::rc::Rc;

use rquickjs::allocator::Allocator;

const HEADER: usize = 16;
const SMALL_STEP: usize = 16;
const SMALL_CLASSES: usize = 64;
/// Past the small classes: four per power of two, from 1 KiB up to 2^40.
const LARGE_BASE_SHIFT: usize = 10;
const CLASSES: usize = SMALL_CLASSES + 4 * (40 - LARGE_BASE_SHIFT);

/// Pages of a tenure's heap growth past the image that a restore keeps
/// resident (reused by the next tenure); more is handed back.
pub(crate) const KEEP_GROWTH_BYTES: usize = 1 << 20;

/// Freed blocks at least this large hand their pages back at once (a
/// `madvise` costs about a microsecond; a block this size took the engine
/// far longer to fill).
const RELEASE_BLOCK_BYTES: usize = 64 << 10;

/// The first size class whose blocks are that large (one compare per free).
const RELEASE_CLASS: usize = {
    let mut c = 0;
    while class_size(c) < RELEASE_BLOCK_BYTES {
        c += 1;
    }
    c
};

/// The allocator's state, at offset 0 of its region. Offsets, not
/// pointers, so that it reads the same wherever it is copied from.
#[repr(C)]
struct Heap {
    /// First byte never handed out.
    top: usize,
    /// Highest `top` since the last restore.
    high: usize,
    /// Per class, the offset of the first free block's payload (0: none).
    free: [usize; CLASSES],
}

const HEAP_BYTES: usize = std::mem::size_of::<Heap>().div_ceil(16) * 16;

fn class_of(size: usize) -> Option<usize> {
    if size <= SMALL_CLASSES * SMALL_STEP {
        return Some(size.max(1).div_ceil(SMALL_STEP) - 1);
    }
    // 2^k < size <= 2^(k+1), in quarters of 2^k.
    let k = (usize::BITS - 1 - (size - 1).leading_zeros()) as usize;
    let quarter = 1usize << (k - 2);
    let q = (size - (1 << k)).div_ceil(quarter);
    let c = SMALL_CLASSES + (k - LARGE_BASE_SHIFT) * 4 + (q - 1);
    (c < CLASSES).then_some(c)
}

const fn class_size(c: usize) -> usize {
    if c < SMALL_CLASSES {
        (c + 1) * SMALL_STEP
    } else {
        let j = c - SMALL_CLASSES;
        let k = LARGE_BASE_SHIFT + j / 4;
        (1 << k) + (j % 4 + 1) * (1 << (k - 2))
    }
}

/// One mapped region: the engine heap of one imaged sandbox.
pub(crate) struct Region {
    base: *mut u8,
    len: usize,
}

impl Region {
    /// Maps `len` bytes (rounded up to pages) of zeroed, unreserved memory.
    pub fn map(len: usize) -> Option<Rc<Region>> {
        let len = len.div_ceil(page()) * page();
        // SAFETY: an anonymous private mapping at an address of the
        // kernel's choosing touches no existing memory.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return None;
        }
        let r = Region {
            base: base as *mut u8,
            len,
        };
        r.heap().top = HEAP_BYTES;
        r.heap().high = HEAP_BYTES;
        Some(Rc::new(r))
    }

    #[allow(clippy::mut_from_ref)]
    fn heap(&self) -> &mut Heap {
        // SAFETY: the region starts with a `Heap` (zeroed memory is a valid
        // one), and the sandbox that owns the region is single-threaded and
        // never holds two of these references at once.
        unsafe { &mut *(self.base as *mut Heap) }
    }

    /// Bytes the allocator has handed out so far (blocks and its own state).
    #[cfg(test)]
    pub fn used(&self) -> usize {
        self.heap().top
    }

    fn alloc(&self, size: usize) -> *mut u8 {
        let Some(c) = class_of(size) else {
            return std::ptr::null_mut();
        };
        let h = self.heap();
        let head = h.free[c];
        // SAFETY: offsets in the free lists and below `top` are inside the
        // mapping; a free block's payload starts with the next offset.
        unsafe {
            if head != 0 {
                h.free[c] = (self.base.add(head) as *const usize).read();
                return self.base.add(head);
            }
            let need = HEADER + class_size(c);
            if h.top + need > self.len {
                return std::ptr::null_mut();
            }
            let block = h.top;
            h.top += need;
            h.high = h.high.max(h.top);
            (self.base.add(block) as *mut usize).write(c);
            self.base.add(block + HEADER)
        }
    }

    /// # Safety
    /// `ptr` is a live block of this region.
    unsafe fn free(&self, ptr: *mut u8) {
        let c = class_at(ptr);
        let h = self.heap();
        (ptr as *mut usize).write(h.free[c]);
        h.free[c] = ptr.offset_from(self.base) as usize;
        // A large block waits on its class's list for a block of the same
        // size: its pages go back to the system meanwhile (all but the one
        // holding the list's link), so what a tenure keeps resident follows
        // what it holds live, not the most it ever held. A growing array
        // frees each smaller copy as it moves: without this, sorts that
        // run out of memory kept 111 MB resident against a 64 MiB limit.
        if c >= RELEASE_CLASS {
            release_pages(ptr, class_size(c));
        }
    }

    /// A copy of the region's used bytes, allocator state included.
    pub fn snapshot(&self) -> Box<[u8]> {
        let h = self.heap();
        h.high = h.top;
        // SAFETY: `[base, base + top)` is mapped and initialised.
        unsafe { std::slice::from_raw_parts(self.base, h.top) }.into()
    }

    /// Puts `image` back, and hands the pages grown past it back to the
    /// system when there are many.
    pub fn restore(&self, image: &[u8]) {
        let high = self.heap().high;
        // SAFETY: the image came from `snapshot` of this region, so it fits.
        unsafe { std::ptr::copy_nonoverlapping(image.as_ptr(), self.base, image.len()) };
        let keep = (image.len() + KEEP_GROWTH_BYTES).div_ceil(page()) * page();
        if high > keep {
            let end = high.div_ceil(page()) * page();
            // SAFETY: the range is inside the mapping and holds no block the
            // restored allocator knows of (all of them are below the image's
            // `top`); the pages read as zero afterwards.
            unsafe {
                libc::madvise(
                    self.base.add(keep) as *mut libc::c_void,
                    end.min(self.len) - keep,
                    libc::MADV_DONTNEED,
                );
            }
        }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: the mapping was made by `map` with this length; the
        // engine that used it is gone (it holds the region alive).
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.len);
        }
    }
}

/// # Safety
/// `ptr` is a block payload handed out by a region.
unsafe fn class_at(ptr: *mut u8) -> usize {
    (ptr.sub(HEADER) as *const usize).read()
}

/// Hands the pages of a freed large block back to the system, all but
/// the one holding its free-list link (kept off the hot path of `free`).
#[cold]
#[inline(never)]
unsafe fn release_pages(ptr: *mut u8, size: usize) {
    let page = page();
    let start = (ptr as usize + HEADER).div_ceil(page) * page;
    let end = (ptr as usize + size) / page * page;
    if end > start {
        libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
    }
}

fn page() -> usize {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).max(4096) as usize
}

/// The engine's allocator for an imaged sandbox: blocks from its region
/// (metered by wrapping it in [`super::meter::MeteredAllocator`]).
pub(crate) struct RegionAllocator {
    pub region: Rc<Region>,
}

// SAFETY: blocks are 16-byte aligned (the region is page-aligned, the
// allocator's state and every block are multiples of 16), at least `size`
// bytes long, and owned by one caller until freed; null means out of memory.
unsafe impl Allocator for RegionAllocator {
    fn alloc(&mut self, size: usize) -> *mut u8 {
        self.region.alloc(size)
    }

    fn calloc(&mut self, count: usize, size: usize) -> *mut u8 {
        let Some(total) = count.checked_mul(size) else {
            return std::ptr::null_mut();
        };
        let p = self.region.alloc(total);
        if !p.is_null() {
            // SAFETY: the block holds at least `total` bytes.
            unsafe { std::ptr::write_bytes(p, 0, total) };
        }
        p
    }

    unsafe fn dealloc(&mut self, ptr: *mut u8) {
        if !ptr.is_null() {
            self.region.free(ptr);
        }
    }

    unsafe fn realloc(&mut self, ptr: *mut u8, new_size: usize) -> *mut u8 {
        if ptr.is_null() {
            return self.region.alloc(new_size);
        }
        if new_size == 0 {
            self.region.free(ptr);
            return std::ptr::null_mut();
        }
        let old = class_size(class_at(ptr));
        if new_size <= old {
            return ptr;
        }
        let p = self.region.alloc(new_size);
        if !p.is_null() {
            std::ptr::copy_nonoverlapping(ptr, p, old);
            self.region.free(ptr);
        }
        p
    }

    unsafe fn usable_size(ptr: *mut u8) -> usize {
        class_size(class_at(ptr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_cover_every_size_with_the_smallest_block_that_fits() {
        let sizes = (1..5000).chain([1 << 20, (1 << 20) + 1, 1_600_000, 3 << 30]);
        for size in sizes {
            let c = class_of(size).unwrap();
            assert!(class_size(c) >= size, "{size}");
            assert!(class_size(c).is_multiple_of(16), "{size}");
            assert!(
                class_size(c) <= size + size / 4 + 16,
                "{size}: at most a quarter more"
            );
            if c > 0 {
                assert!(class_size(c - 1) < size, "{size}");
            }
        }
    }

    /// Pages of `[p, p + len)` resident now.
    fn resident(p: *mut u8, len: usize) -> usize {
        let page = page();
        let start = (p as usize).div_ceil(page) * page;
        let pages = (p as usize + len - start) / page;
        let mut v = vec![0u8; pages];
        let rc = unsafe { libc::mincore(start as *mut libc::c_void, pages * page, v.as_mut_ptr()) };
        assert_eq!(rc, 0);
        v.iter().filter(|b| **b & 1 == 1).count()
    }

    #[test]
    fn a_freed_large_block_hands_its_pages_back_and_is_reused_intact() {
        let r = Region::map(64 << 20).unwrap();
        let big = r.alloc(4 << 20);
        unsafe { std::ptr::write_bytes(big, 5, 4 << 20) };
        assert!(resident(big, 4 << 20) >= 1000, "touched pages are resident");
        unsafe { r.free(big) };
        assert!(
            resident(big, 4 << 20) <= 1,
            "all but the link's page are handed back"
        );
        let again = r.alloc(4 << 20);
        assert_eq!(again, big, "reused by its class");
        unsafe { std::ptr::write_bytes(again, 6, 4 << 20) };
        assert_eq!(unsafe { *again.add((4 << 20) - 1) }, 6);
        // Small blocks keep their pages (a syscall per small free would cost
        // more than it saves).
        let small = r.alloc(1000);
        unsafe { std::ptr::write_bytes(small, 1, 1000) };
        unsafe { r.free(small) };
        assert_eq!(unsafe { *small.add(999) }, 1);
    }

    #[test]
    fn freed_blocks_are_reused_and_a_restore_forgets_everything_after_the_snapshot() {
        let r = Region::map(8 << 20).unwrap();
        let a = r.alloc(100);
        // SAFETY: 100 bytes were asked for.
        unsafe { std::ptr::write_bytes(a, 7, 100) };
        let image = r.snapshot();
        let used = r.used();
        // SAFETY: `a` is live; each block is used within its size.
        unsafe {
            r.free(a);
            let b = r.alloc(99);
            assert_eq!(a, b, "a freed block is reused by its class");
            std::ptr::write_bytes(b, 9, 99);
            let big = r.alloc(3 << 20);
            assert!(!big.is_null());
            std::ptr::write_bytes(big, 1, 3 << 20);
            assert!(r.used() > used);
            r.restore(&image);
            assert_eq!(r.used(), used);
            assert_eq!(*a, 7, "the block's bytes are the image's again");
            let c = r.alloc(100);
            assert_ne!(c, a, "the block is live again in the image");
        }
        assert!(r.alloc(64 << 20).is_null(), "past the region: refused");
    }
}
