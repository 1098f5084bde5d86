//! Backing off useless schedules: an entry whose output no session reads
//! doubles its effective interval every `unread_threshold` consecutive unread
//! fires, up to `cap`; the first session read of its output restores the
//! declared interval.
//!
//! "Unread" is judged per delivered wave: when an entry's wake is delivered,
//! the documents its previous wave wrote either were read by a session
//! since (the entry is useful) or were not (one more unread fire). A change
//! of factor re-anchors the entry's grid at that moment (a fresh anchor, so
//! occurrence ids never repeat).

use crate::store::{ScheduleRow, Space, StoreResult};
use std::collections::HashSet;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackoffPolicy {
    pub enabled: bool,
    /// Consecutive unread fires per doubling (default 3).
    pub unread_threshold: u32,
    /// Largest factor (default 16).
    pub cap: u32,
}

impl Default for BackoffPolicy {
    fn default() -> Self {
        BackoffPolicy {
            enabled: true,
            unread_threshold: 3,
            cap: 16,
        }
    }
}

impl BackoffPolicy {
    pub fn disabled() -> Self {
        BackoffPolicy {
            enabled: false,
            ..Default::default()
        }
    }
}

/// Pure: the unread count and factor after a delivery, given whether the
/// previous delivery's output went unread.
pub fn after_delivery(
    unread_fires: u32,
    previous_unread: bool,
    factor: u32,
    p: &BackoffPolicy,
) -> (u32, u32) {
    let unread = if previous_unread { unread_fires + 1 } else { 0 };
    let factor = factor.max(1);
    if p.enabled && unread > 0 && unread % p.unread_threshold.max(1) == 0 && factor < p.cap {
        (unread, (factor * 2).min(p.cap.max(1)))
    } else {
        (unread, factor)
    }
}

/// Re-plans `row` from `now_ms` with its current factor: a fresh anchor,
/// period 1, due one effective interval later.
pub fn reanchor(row: &mut ScheduleRow, now_ms: u64) {
    row.declared_at_ms = now_ms;
    row.nominal_period = 1;
    row.next_due_ms =
        now_ms + crate::schedule::grid::interval_ms(row.interval_minutes, row.backoff_factor);
}

/// Applies the back-off rule to an entry whose wake was just delivered by a
/// wave that wrote `written`. Returns true when the factor changed.
pub fn on_delivered(
    row: &mut ScheduleRow,
    written: &[String],
    now_ms: u64,
    p: &BackoffPolicy,
) -> bool {
    let previous_unread = row.output_docs.is_some() && !row.output_read;
    // A calendar entry fires at the times a person chose: unread output
    // is noted but never stretches it.
    let p = &BackoffPolicy {
        enabled: p.enabled && super::cadence::Cadence::of_row(row).backs_off(),
        ..*p
    };
    let (unread, factor) = after_delivery(row.unread_fires, previous_unread, row.backoff_factor, p);
    row.unread_fires = unread;
    row.output_docs = Some(serde_json::to_string(written).unwrap_or_default());
    row.output_read = written.is_empty();
    if factor != row.backoff_factor.max(1) {
        row.backoff_factor = factor;
        reanchor(row, now_ms);
        return true;
    }
    false
}

/// Marks the output of every entry that `read` touches as read; an entry
/// that was backed off returns to its declared interval. Returns how many
/// entries were restored.
pub fn note_session_reads(
    space: &mut Space,
    read: &HashSet<String>,
    now_ms: u64,
) -> StoreResult<usize> {
    if read.is_empty() {
        return Ok(0);
    }
    let mut restored = 0;
    for mut row in space.schedule(None)? {
        if row.output_read && row.backoff_factor <= 1 {
            continue;
        }
        let Some(out) = row.output_docs.as_deref() else {
            continue;
        };
        let docs: Vec<String> = serde_json::from_str(out).unwrap_or_default();
        if !docs.iter().any(|d| read.contains(d)) {
            continue;
        }
        row.output_read = true;
        row.unread_fires = 0;
        if row.backoff_factor > 1 {
            row.backoff_factor = 1;
            reanchor(&mut row, now_ms);
            restored += 1;
        }
        super::entry::save_in(space, &mut row)?;
    }
    Ok(restored)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unread_fires_double_the_factor_every_threshold_up_to_the_cap() {
        let p = BackoffPolicy::default();
        let (mut unread, mut factor) = (0, 1);
        let mut seen = Vec::new();
        for _ in 0..20 {
            (unread, factor) = after_delivery(unread, true, factor, &p);
            seen.push(factor);
        }
        assert_eq!(&seen[..6], &[1, 1, 2, 2, 2, 4]);
        assert_eq!(seen[8], 8);
        assert_eq!(seen[11], 16);
        assert_eq!(*seen.last().unwrap(), 16, "capped");
    }

    #[test]
    fn a_read_output_resets_the_count_and_disabled_never_backs_off() {
        let p = BackoffPolicy::default();
        assert_eq!(after_delivery(2, false, 4, &p), (0, 4));
        assert_eq!(
            after_delivery(2, true, 1, &BackoffPolicy::disabled()),
            (3, 1)
        );
    }
}
