pub mod accounting;
pub mod console;
pub mod effects;
pub mod fleet;
pub mod patterns;
pub mod schedule;
pub mod serve;
pub mod store;

/// A `kB` field of this process's `/proc/self/status` (`VmRSS:`,
/// `RssAnon:`, ...); 0 where unavailable.
pub(crate) fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix(field)
                    .and_then(|v| v.split_whitespace().next()?.parse().ok())
            })
        })
        .unwrap_or(0)
}

/// Resident set size of this process, KiB.
pub(crate) fn rss_kib() -> u64 {
    status_kib("VmRSS:")
}

/// User + system CPU seconds of this process so far.
pub(crate) fn process_cpu_seconds() -> f64 {
    // SAFETY: getrusage only writes the struct we pass.
    unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
        tv(u.ru_utime) + tv(u.ru_stime)
    }
}
