//! What pattern code writes with `console.*`: taken from the sandbox after
//! each action and written to the host's log (target `spacewake::pattern`),
//! attributed to the space, the piece and the action. Bounded twice: the
//! sandbox keeps at most 64 lines an action, and each space may log
//! [`BURST`] lines at once, then [`PER_MINUTE`] a minute on the host clock.
//! What either bound drops is counted (`actions.logLinesDropped`), never an
//! error for the pattern.

use super::*;
use crate::sandbox::LogLevel;

/// Lines a space may log at once.
pub const BURST: u64 = 120;
/// Lines a space may log a minute, after its burst.
pub const PER_MINUTE: u64 = 120;

/// A token bucket on the host clock, in thousandths of a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LogRate {
    milli: u64,
    at_ms: u64,
}

impl LogRate {
    pub(super) fn new(now_ms: u64) -> LogRate {
        LogRate {
            milli: BURST * 1000,
            at_ms: now_ms,
        }
    }

    /// Whether one more line may be logged at `now_ms` (taking it if so).
    pub(super) fn admit(&mut self, now_ms: u64) -> bool {
        // PER_MINUTE lines a minute: PER_MINUTE thousandths a millisecond / 60.
        let refill = now_ms.saturating_sub(self.at_ms).saturating_mul(PER_MINUTE) / 60;
        self.milli = self.milli.saturating_add(refill).min(BURST * 1000);
        self.at_ms = self.at_ms.max(now_ms);
        if self.milli >= 1000 {
            self.milli -= 1000;
            true
        } else {
            false
        }
    }
}

impl SpaceRuntime {
    /// Writes what the last action logged, within the space's rate.
    pub(super) fn drain_console(&mut self, piece: &str, action: &str) {
        let (lines, mut dropped) = self.sandbox.take_logs();
        if lines.is_empty() && dropped == 0 {
            return;
        }
        // A wake's callback keeps its first lines with its fire, whatever
        // the log's rate limit lets through.
        if let Some(kept) = self.wake_logs.as_mut() {
            let room = crate::store::FIRE_LOG_LINES.saturating_sub(kept.len());
            kept.extend(lines.iter().take(room).map(|l| crate::store::FireLog {
                level: l.level.name().to_string(),
                text: crate::human::truncate_message(&l.text, crate::store::FIRE_LOG_CHARS),
            }));
        }
        let now = self.clock.now_ms();
        let space = self.space.id().to_string();
        let mut admitted = Vec::with_capacity(lines.len());
        for line in lines {
            if self.log_rate.admit(now) {
                admitted.push(line);
            } else {
                dropped += 1;
            }
        }
        // Counted before written, so a reader who sees a line in the log
        // sees it counted too.
        self.counters
            .add(Counter::PatternLogLines, admitted.len() as i64);
        self.counters
            .add(Counter::PatternLogDropped, dropped as i64);
        for line in admitted {
            let text = line.text.as_str();
            match line.level {
                LogLevel::Debug => {
                    tracing::debug!(target: "spacewake::pattern", space, piece, action, "{text}")
                }
                LogLevel::Info => {
                    tracing::info!(target: "spacewake::pattern", space, piece, action, "{text}")
                }
                LogLevel::Warn => {
                    tracing::warn!(target: "spacewake::pattern", space, piece, action, "{text}")
                }
                LogLevel::Error => {
                    tracing::error!(target: "spacewake::pattern", space, piece, action, "{text}")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_space_logs_its_burst_then_its_rate() {
        let mut r = LogRate::new(0);
        for _ in 0..BURST {
            assert!(r.admit(0));
        }
        assert!(!r.admit(0), "the burst is spent");
        // One line every 60 s / PER_MINUTE.
        let every = 60_000 / PER_MINUTE;
        assert!(!r.admit(every - 1));
        assert!(r.admit(every));
        assert!(!r.admit(every));
        // A long quiet refills to the burst, never past it.
        let mut r = LogRate::new(0);
        assert!(r.admit(3_600_000));
        let mut n = 1;
        while r.admit(3_600_000) {
            n += 1;
        }
        assert_eq!(n, BURST);
    }
}
