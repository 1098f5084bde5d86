//! Time enters spacewake through one trait.
//!
//! Invariant: nothing else in the crate reads the wall clock. `serve` runs on
//! [`SystemClock`]; tests, scenarios and benchmarks that need determinism run
//! on [`ManualClock`], so a two-hour schedule is tested in microseconds.
//! All times are milliseconds since the Unix epoch (`*_ms` in names).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of "now", in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> u64;

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

#[cfg(test)]
mod tests {
    use super::*;

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
