pub mod accounting;
pub mod console;
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
