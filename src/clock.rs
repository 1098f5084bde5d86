//! Time enters spacewake through one trait.
//!
//! Invariant: nothing else in the crate reads `Instant` or `SystemTime`.
//! `serve` runs on [`SystemClock`]; tests, scenarios and benchmarks that
//! need determinism run on [`ManualClock`], so a two-hour schedule is tested
//! in microseconds. All times are milliseconds since the Unix epoch (`*_ms`
//! in names).
//!
//! Two kinds of time, kept apart:
//! - **When something happens** (a wake falls due, a space parks, a lease is
//!   renewed, a WAL is checkpointed): always on a [`Clock`], timers included.
//!   A thread waiting for such a deadline asks [`Clock::real_wait_until`]
//!   how long it may block, and a manual clock's jump wakes it (`on_jump`).
//! - **How long real work took, or how long to wait for another thread or
//!   a socket** (the compute a wave used, a safety net on a runaway
//!   handler, a shutdown's drain, a client's timeout): a [`Stopwatch`].
//!   That is real time by nature; a manual clock must not stretch it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A source of "now", in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> u64;

    /// Milliseconds on a clock that never jumps (for measuring how long
    /// ago something happened on this host, such as a lease's last
    /// renewal); only differences between readings mean anything. A manual
    /// clock's is its `now_ms`.
    fn monotonic_ms(&self) -> u64 {
        self.now_ms()
    }

    /// How long, in real time, a thread may block before `deadline_ms` on
    /// this clock can have come: zero once it has. `None` when the passing
    /// of real time never brings it (a manual clock moves only when told,
    /// and then calls its `on_jump` listeners, which is how such a waiter
    /// learns to look again).
    fn real_wait_until(&self, deadline_ms: u64) -> Option<Duration> {
        Some(Duration::from_millis(
            deadline_ms.saturating_sub(self.now_ms()),
        ))
    }

    /// Calls `f` whenever this clock jumps. Real time flows by itself, so
    /// the system clock never calls it; a manual clock calls it on every
    /// move, which is how timers sleeping on manual time learn to look again.
    fn on_jump(&self, _f: Box<dyn Fn() + Send + Sync>) {}
}

/// The operating system's wall clock. Only `serve` and operator commands use it.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }

    fn monotonic_ms(&self) -> u64 {
        static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        ORIGIN.get_or_init(Instant::now).elapsed().as_millis() as u64
    }
}

/// A clock that moves only when told to. Time never goes backwards.
pub struct ManualClock {
    now_ms: AtomicU64,
    listeners: std::sync::Mutex<Vec<Box<dyn Fn() + Send + Sync>>>,
}

impl std::fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManualClock")
            .field("now_ms", &self.now_ms)
            .finish()
    }
}

impl ManualClock {
    /// 2026-01-01T00:00:00Z: a fixed, readable default start for tests.
    pub const DEFAULT_START_MS: u64 = 1_767_225_600_000;

    pub fn new(start_ms: u64) -> Self {
        Self {
            now_ms: AtomicU64::new(start_ms),
            listeners: std::sync::Mutex::new(Vec::new()),
        }
    }

    pub fn advance_ms(&self, by_ms: u64) -> u64 {
        let now = self.now_ms.fetch_add(by_ms, Ordering::SeqCst) + by_ms;
        self.jumped();
        now
    }

    fn jumped(&self) {
        for f in self
            .listeners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            f();
        }
    }

    /// Moves the clock to `to_ms`.
    ///
    /// # Panics
    /// If `to_ms` is earlier than the current time: a clock that goes
    /// backwards would let a test pass that production could never reproduce.
    pub fn set_ms(&self, to_ms: u64) {
        let prev = self.now_ms.swap(to_ms, Ordering::SeqCst);
        assert!(
            to_ms >= prev,
            "ManualClock moved backwards: {prev} -> {to_ms}"
        );
        self.jumped();
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new(Self::DEFAULT_START_MS)
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now_ms.load(Ordering::SeqCst)
    }

    fn real_wait_until(&self, deadline_ms: u64) -> Option<Duration> {
        (self.now_ms() >= deadline_ms).then_some(Duration::ZERO)
    }

    fn on_jump(&self, f: Box<dyn Fn() + Send + Sync>) {
        self.listeners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(f);
    }
}

/// The system clock shifted by a fixed offset. Only for crash tests that
/// restart a host "hours later" without waiting (`serve --clock-offset-ms`).
#[derive(Debug, Clone, Copy)]
pub struct OffsetClock {
    pub offset_ms: u64,
}

impl Clock for OffsetClock {
    fn now_ms(&self) -> u64 {
        SystemClock.now_ms() + self.offset_ms
    }
}

/// Real elapsed time, for measuring work and bounding waits on threads and
/// sockets (see the module documentation); never a space's timeline.
#[derive(Debug, Clone, Copy)]
pub struct Stopwatch(Instant);

impl Stopwatch {
    pub fn start() -> Self {
        Self(Instant::now())
    }

    pub fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }

    /// True once `limit` of real time has passed since the start.
    pub fn passed(&self, limit: Duration) -> bool {
        self.0.elapsed() >= limit
    }

    /// What is left of `limit` (zero once it has passed).
    pub fn left_of(&self, limit: Duration) -> Duration {
        limit.saturating_sub(self.0.elapsed())
    }
}

/// A bound on real time: `limit` from when it was made.
#[derive(Debug, Clone, Copy)]
pub struct Timeout {
    started: Stopwatch,
    limit: Duration,
}

impl Timeout {
    pub fn after(limit: Duration) -> Self {
        Self {
            started: Stopwatch::start(),
            limit,
        }
    }

    pub fn passed(&self) -> bool {
        self.started.passed(self.limit)
    }

    pub fn limit(&self) -> Duration {
        self.limit
    }

    /// Real time left before it passes (zero once it has).
    pub fn left(&self) -> Duration {
        self.started.left_of(self.limit)
    }
}

/// CPU time the calling thread has used so far (only differences between
/// two readings on one thread mean anything).
fn thread_cpu_time() -> Duration {
    Duration::from_micros(crate::accounting::thread_cpu_us())
}

/// How many times its CPU limit a [`CpuTimeout`] waits in real time before
/// it passes regardless of the CPU used (a call blocked in native code, or
/// a host stopped for that long).
pub const CPU_TIMEOUT_REAL_FACTOR: u32 = 10;

/// A bound on the CPU a thread spends from when it was made: it passes once
/// the thread has used `limit` of CPU, or once `limit` ×
/// [`CPU_TIMEOUT_REAL_FACTOR`] of real time has gone by. A loaded machine
/// (the thread waiting for a core) therefore does not trip it where an
/// idle one would not. Real time is checked first: it is the cheap reading,
/// and CPU used can never exceed the real time elapsed.
#[derive(Debug, Clone, Copy)]
pub struct CpuTimeout {
    real: Stopwatch,
    cpu_start: Duration,
    limit: Duration,
}

impl CpuTimeout {
    /// Starts now, on the calling thread (the one `passed` must be asked on).
    pub fn after(limit: Duration) -> Self {
        Self {
            real: Stopwatch::start(),
            cpu_start: thread_cpu_time(),
            limit,
        }
    }

    pub fn passed(&self) -> bool {
        let real = self.real.elapsed();
        if real < self.limit {
            return false;
        }
        if real >= self.limit.saturating_mul(CPU_TIMEOUT_REAL_FACTOR) {
            return true;
        }
        thread_cpu_time().saturating_sub(self.cpu_start) >= self.limit
    }

    pub fn limit(&self) -> Duration {
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_deadline_comes_only_by_a_jump_and_a_real_one_by_waiting() {
        let c = ManualClock::new(1_000);
        assert_eq!(c.real_wait_until(5_000), None, "real time never brings it");
        assert_eq!(c.real_wait_until(1_000), Some(Duration::ZERO));
        c.set_ms(5_000);
        assert_eq!(c.real_wait_until(5_000), Some(Duration::ZERO));
        let s = SystemClock;
        let now = s.now_ms();
        let wait = s.real_wait_until(now + 60_000).unwrap();
        assert!(wait <= Duration::from_millis(60_000) && wait >= Duration::from_millis(59_000));
        assert_eq!(s.real_wait_until(now - 1), Some(Duration::ZERO));
    }

    #[test]
    fn a_stopwatch_counts_real_time() {
        let w = Stopwatch::start();
        assert!(!w.passed(Duration::from_secs(3600)));
        assert!(w.passed(Duration::ZERO));
        assert!(w.left_of(Duration::from_secs(3600)) > Duration::from_secs(3599));
        let t = Timeout::after(Duration::ZERO);
        assert!(t.passed() && t.left() == Duration::ZERO);
        assert!(!Timeout::after(Duration::from_secs(3600)).passed());
    }

    #[test]
    fn a_cpu_timeout_counts_the_threads_cpu_not_time_spent_waiting() {
        // Sleeping past the limit uses no CPU: not passed.
        let t = CpuTimeout::after(Duration::from_millis(20));
        std::thread::sleep(Duration::from_millis(60));
        assert!(!t.passed(), "waiting is not work");
        // Spinning past it does.
        let start = thread_cpu_time();
        while thread_cpu_time() - start < Duration::from_millis(25) {}
        assert!(t.passed());
        // Real time alone passes it at the backstop.
        let t = CpuTimeout::after(Duration::from_millis(5));
        std::thread::sleep(Duration::from_millis(
            5 * CPU_TIMEOUT_REAL_FACTOR as u64 + 5,
        ));
        assert!(t.passed(), "the real-time backstop");
        assert_eq!(t.limit(), Duration::from_millis(5));
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(1_000);
        assert_eq!(c.now_ms(), 1_000);
        assert_eq!(c.advance_ms(500), 1_500);
        c.set_ms(2_000);
        assert_eq!(c.now_ms(), 2_000);
    }

    #[test]
    #[should_panic(expected = "backwards")]
    fn manual_clock_refuses_to_go_backwards() {
        let c = ManualClock::new(1_000);
        c.set_ms(999);
    }
}
