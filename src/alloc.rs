//! The process's memory allocator: mimalloc, for Rust, QuickJS (through
//! the sandbox's metered allocator) and SQLite alike.
//!
//! Why not the system allocator: a space server's tenure allocates and
//! frees a whole engine and a connection, over and over, on many threads.
//! Under glibc's malloc that churn was about a quarter of a scheduled
//! wake's CPU (arena locks, consolidation), and the freed memory stayed in
//! per-thread arenas until trimmed. mimalloc keeps per-thread free lists
//! and returns idle pages to the operating system on its own.

use libmimalloc_sys as mi;
use std::ffi::{c_int, c_void};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Hands memory freed by parked runtimes back to the operating system now
/// rather than after mimalloc's purge delay (and trims glibc's heap, which
/// libc-internal allocations still use).
pub fn release_freed_memory() {
    // SAFETY: mi_collect only walks mimalloc's own heaps.
    unsafe { mi::mi_collect(true) };
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

// SQLite's allocator hooks, routed to mimalloc. SQLite asks for 8-byte
// alignment, which every mimalloc block has.
unsafe extern "C" fn sqlite_malloc(n: c_int) -> *mut c_void {
    // SAFETY: plain allocation; SQLite never asks for a negative size.
    unsafe { mi::mi_malloc(n.max(0) as usize) }
}
unsafe extern "C" fn sqlite_free(p: *mut c_void) {
    // SAFETY: `p` came from sqlite_malloc/realloc (or is null).
    unsafe { mi::mi_free(p) }
}
unsafe extern "C" fn sqlite_realloc(p: *mut c_void, n: c_int) -> *mut c_void {
    // SAFETY: as above.
    unsafe { mi::mi_realloc(p, n.max(0) as usize) }
}
unsafe extern "C" fn sqlite_size(p: *mut c_void) -> c_int {
    // SAFETY: as above; mimalloc reports 0 for null.
    unsafe { mi::mi_usable_size(p) as c_int }
}
unsafe extern "C" fn sqlite_roundup(n: c_int) -> c_int {
    (n + 7) & !7
}
unsafe extern "C" fn sqlite_init(_: *mut c_void) -> c_int {
    0
}
unsafe extern "C" fn sqlite_shutdown(_: *mut c_void) {}

/// Routes SQLite's allocations to mimalloc. Must run before SQLite is
/// initialised (`store::configure_sqlite` calls it once); if SQLite was
/// initialised already it keeps its own allocator, which is harmless.
pub(crate) fn route_sqlite() {
    let methods = rusqlite::ffi::sqlite3_mem_methods {
        xMalloc: Some(sqlite_malloc),
        xFree: Some(sqlite_free),
        xRealloc: Some(sqlite_realloc),
        xSize: Some(sqlite_size),
        xRoundup: Some(sqlite_roundup),
        xInit: Some(sqlite_init),
        xShutdown: Some(sqlite_shutdown),
        pAppData: std::ptr::null_mut(),
    };
    // SAFETY: SQLITE_CONFIG_MALLOC copies the struct before returning; its
    // functions live for the whole process.
    unsafe {
        rusqlite::ffi::sqlite3_config(
            rusqlite::ffi::SQLITE_CONFIG_MALLOC,
            &methods as *const rusqlite::ffi::sqlite3_mem_methods,
        );
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sqlite_allocates_through_the_process_allocator() {
        crate::store::configure_sqlite();
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (randomblob(100000));")
            .unwrap();
        // SAFETY: a plain allocation and free through SQLite's API; the
        // pointer is only inspected, never dereferenced.
        unsafe {
            let p = rusqlite::ffi::sqlite3_malloc(1000);
            assert!(!p.is_null());
            assert!(
                super::mi::mi_is_in_heap_region(p),
                "SQLite's allocation is not mimalloc's"
            );
            rusqlite::ffi::sqlite3_free(p);
        }
        let n: i64 = conn
            .query_row("SELECT length(x) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 100_000);
    }
}
