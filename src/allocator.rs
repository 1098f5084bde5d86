//! Process-wide tuning of the system allocator (glibc's malloc), which
//! the host, the SQLite library and the engine's non-imaged sandboxes share.
//! Imaged sandboxes allocate from their own regions (`sandbox/image.rs`).

/// Hands memory freed by a parked runtime back to the operating system.
/// glibc keeps freed heap pages in per-thread arenas; without this a host
/// that once activated many spaces would keep their peak footprint.
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Caps glibc's malloc arenas at two per core (at least four) before any
/// thread starts; glibc's default is eight per core. Every space-server
/// thread otherwise ends up with an arena of its own, and a thread arena
/// keeps its top chunk resident after `malloc_trim`: a host that once ran
/// sixteen spaces at a time kept ~0.8 MiB it no longer used. One arena per
/// core made a herd of scheduled wakes ~10% slower (threads queue on the
/// arena locks); two per core measured the same as glibc's default
/// (`spec/performance.md`).
pub fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let arenas = libc::c_int::try_from((2 * cores).max(4)).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt only sets an allocator parameter; called from
        // `main` before other threads exist.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, arenas);
        }
    }
}
