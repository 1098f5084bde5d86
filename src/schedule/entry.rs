//! What a schedule entry's row means: when it next needs its host, and the
//! summary of its undelivered occurrences. The store keeps the row plain
//! (`store::ScheduleRow`); every write of a row from here goes through
//! [`save`], which stamps the row's `wake_ms` from its state first, so the
//! store's wake directory can read a plain column.

use crate::store::{PlaneTx, ScheduleRow, ScheduleStatus, Space, StoreResult};

/// Due times at or past this are "never" (a cadence with no next
/// occurrence); the store keeps times as signed 64-bit integers.
pub const NEVER_MS: u64 = i64::MAX as u64;

/// The meaning of a schedule row's state (pure).
pub trait EntryState {
    /// When the entry next needs its host: its next due time or an earlier
    /// planned retry; `None` unless the entry is active.
    fn next_wake_ms(&self) -> Option<u64>;
    /// The earliest planned retry among its pending occurrences.
    fn retry_due_ms(&self) -> Option<u64>;
    /// The most attempts any pending occurrence has had (0: none pending).
    fn attempts(&self) -> u32;
    /// The newest wake event in flight, if any.
    fn inflight_event(&self) -> Option<&str>;
}

impl EntryState for ScheduleRow {
    fn next_wake_ms(&self) -> Option<u64> {
        (self.status == ScheduleStatus::Active)
            .then(|| match self.retry_due_ms() {
                Some(r) => r.min(self.next_due_ms),
                None => self.next_due_ms,
            })
            // A cadence that never falls due again (`u64::MAX`) wakes nothing.
            .filter(|t| *t < NEVER_MS)
    }

    fn retry_due_ms(&self) -> Option<u64> {
        self.pending.iter().filter_map(|p| p.retry_due_ms).min()
    }

    fn attempts(&self) -> u32 {
        self.pending.iter().map(|p| p.attempts).max().unwrap_or(0)
    }

    fn inflight_event(&self) -> Option<&str> {
        self.pending
            .iter()
            .rev()
            .find_map(|p| p.inflight.as_deref())
    }
}

/// Writes an entry's row inside a plane transaction, its wake stamped.
pub fn save(plane: &mut PlaneTx<'_>, row: &mut ScheduleRow) -> StoreResult<()> {
    row.wake_ms = row.next_wake_ms();
    plane.upsert_schedule(row)
}

/// [`save`] in a plane transaction of its own.
pub fn save_in(space: &mut Space, row: &mut ScheduleRow) -> StoreResult<()> {
    space.plane(|p| save(p, row))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::PendingWake;

    #[test]
    fn an_entry_wakes_its_host_at_its_due_or_an_earlier_retry_while_active() {
        let mut r = ScheduleRow::new("pc", 0, 60, "s", 0, 1_000);
        assert_eq!(r.next_wake_ms(), Some(1_000));
        r.pending.push(PendingWake {
            occurrence: "wake/pc/0/0/1".into(),
            period: 1,
            attempts: 2,
            inflight: None,
            retry_due_ms: Some(400),
        });
        assert_eq!(r.next_wake_ms(), Some(400));
        assert_eq!(r.attempts(), 2);
        r.status = ScheduleStatus::Paused;
        assert_eq!(r.next_wake_ms(), None);
    }
}
