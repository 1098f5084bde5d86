//! Delivering wake events: at-least-once, deduplicated, never a crash loop.
//!
//! Before a wave runs a wake event's handler, the entry records the event
//! as in flight and counts the attempt — durably, in its own transaction.
//! Inside the wave's own transaction (so both commit or neither):
//! - delivered: the entry's attempts reset;
//! - the handler failed (threw, was preempted, ran out of memory): a retry
//!   is planned 1, 5 and 30 minutes later, then the occurrence is
//!   dead-lettered (the cadence continues with the next period).
//!
//! If the process dies mid-wave, the event is still undelivered at the next
//! activation and its entry still names it as in flight: that attempt
//! failed. The event is then consumed without running and retried by the
//! same plan — so a callback that kills the process cannot loop.

use crate::runtime::{RuntimeResult, SpaceRuntime, WaveReport};
use crate::store::{PlaneTx, ScheduleRow, Space, StoreResult};
use std::collections::HashSet;

/// Minutes to wait before retry 1, 2 and 3 of a failed occurrence.
pub const RETRY_BACKOFF_MINUTES: [u64; 3] = [1, 5, 30];

/// What happened to wake deliveries in one wave.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeliveryReport {
    pub delivered: usize,
    /// Entries whose effective interval doubled (unread output).
    pub backed_off: usize,
    pub retried: usize,
    pub dead_lettered: usize,
}

/// `(piece, entry)` of a wake event id (`wake/{piece}/{entry}/...`).
pub fn wake_target(event_id: &str) -> Option<(&str, u32)> {
    let mut parts = event_id.split('/');
    if parts.next()? != "wake" {
        return None;
    }
    let piece = parts.next()?;
    let entry = parts.next()?.parse().ok()?;
    Some((piece, entry))
}

/// Entry `entry` among one piece's schedule rows.
fn entry_of(rows: Vec<ScheduleRow>, entry: u32) -> Option<ScheduleRow> {
    rows.into_iter().find(|r| r.entry == entry)
}

/// Marks pending wake events as in flight (durably) and returns the ones
/// whose previous attempt died with the process: to be consumed unrun.
pub fn before_wave(space: &mut Space, limit: usize) -> StoreResult<PendingWakes> {
    let mut crashed = HashSet::new();
    let mut marked = 0;
    let pending: Vec<String> = space
        .undelivered_events(limit)?
        .into_iter()
        .map(|e| e.event_id)
        .filter(|id| wake_target(id).is_some())
        .collect();
    for id in pending {
        let (piece, entry) = wake_target(&id).expect("filtered");
        let Some(mut row) = entry_of(space.schedule(Some(piece))?, entry) else {
            continue; // the piece or entry is gone: its event runs (or no-ops) as usual
        };
        if row.inflight_event.as_deref() == Some(id.as_str()) {
            crashed.insert(id);
            continue;
        }
        row.inflight_event = Some(id.clone());
        row.attempts += 1;
        space.plane(|p| p.upsert_schedule(&row))?;
        marked += 1;
    }
    Ok(PendingWakes { crashed, marked })
}

/// What [`before_wave`] found among the undelivered events.
#[derive(Debug, Default)]
pub struct PendingWakes {
    /// Wakes whose previous attempt died with the process: consume unrun.
    pub crashed: HashSet<String>,
    /// Wakes marked in flight for this wave.
    pub marked: usize,
}

/// Settles wake entries after a wave: resets delivered ones, plans retries
/// or dead-letters failed (and crashed) ones.
pub fn after_wave(
    space: &mut Space,
    wave: &WaveReport,
    now_ms: u64,
) -> StoreResult<DeliveryReport> {
    after_wave_with(
        space,
        wave,
        now_ms,
        &crate::schedule::backoff::BackoffPolicy::default(),
    )
}

/// [`after_wave`] under an explicit back-off policy, in one plane
/// transaction of its own.
pub fn after_wave_with(
    space: &mut Space,
    wave: &WaveReport,
    now_ms: u64,
    backoff: &crate::schedule::backoff::BackoffPolicy,
) -> StoreResult<DeliveryReport> {
    space.plane(|p| settle_delivery(p, wave, now_ms, backoff))
}

/// The bookkeeping of [`after_wave`], inside a given transaction: the
/// host runs it inside the wave's own commit, so a wave and the delivery
/// state of its wakes commit together or not at all.
pub fn settle_delivery(
    plane: &mut PlaneTx<'_>,
    wave: &WaveReport,
    now_ms: u64,
    backoff: &crate::schedule::backoff::BackoffPolicy,
) -> StoreResult<DeliveryReport> {
    let mut report = DeliveryReport::default();
    for id in &wave.delivered {
        let Some((piece, entry)) = wake_target(id) else {
            continue;
        };
        let Some(mut row) = entry_of(plane.schedule(Some(piece))?, entry) else {
            continue;
        };
        if row.inflight_event.as_deref() == Some(id.as_str()) {
            row.inflight_event = None;
            row.attempts = 0;
        }
        if crate::schedule::backoff::on_delivered(&mut row, &wave.written, now_ms, backoff) {
            report.backed_off += 1;
        }
        plane.upsert_schedule(&row)?;
        report.delivered += 1;
    }
    for id in wave
        .failed_events
        .iter()
        .chain(&wave.skipped_events)
        .chain(&wave.dead_lettered)
    {
        let Some((piece, entry)) = wake_target(id) else {
            continue;
        };
        let Some(mut row) = entry_of(plane.schedule(Some(piece))?, entry) else {
            continue;
        };
        let attempts = row.attempts.max(1) as usize;
        let outcome = match RETRY_BACKOFF_MINUTES.get(attempts - 1) {
            Some(min) => {
                row.retry_due_ms = Some(now_ms + min * super::grid::minute_ms());
                report.retried += 1;
                "failed"
            }
            None => {
                row.retry_due_ms = None;
                row.inflight_event = None;
                row.attempts = 0;
                report.dead_lettered += 1;
                "deadLettered"
            }
        };
        plane.upsert_schedule(&row)?;
        plane.record_fire(
            piece,
            entry,
            now_ms,
            id,
            row.nominal_period.saturating_sub(1),
            now_ms,
            0,
            outcome,
            super::fire::FIRE_HISTORY,
        )?;
    }
    Ok(report)
}

/// One wave with wake accounting around it: what the host and the
/// scenario runner both run.
pub fn run_wave(
    rt: &mut SpaceRuntime,
    now_ms: u64,
    limit: usize,
) -> RuntimeResult<(WaveReport, DeliveryReport)> {
    run_wave_with(
        rt,
        now_ms,
        limit,
        &crate::schedule::backoff::BackoffPolicy::default(),
    )
}

/// [`run_wave`] under an explicit back-off policy.
pub fn run_wave_with(
    rt: &mut SpaceRuntime,
    now_ms: u64,
    limit: usize,
    backoff: &crate::schedule::backoff::BackoffPolicy,
) -> RuntimeResult<(WaveReport, DeliveryReport)> {
    let pending = before_wave(rt.space(), limit)?;
    if pending.marked > 0 {
        crash_point(CrashPoint::MidWave);
    }
    let mut delivery = DeliveryReport::default();
    let wave = rt.run_wave_with(&pending.crashed, &mut |wave, plane| {
        delivery = settle_delivery(plane, wave, now_ms, backoff)?;
        Ok(())
    })?;
    if wave.delivered.iter().any(|id| wake_target(id).is_some()) {
        crash_point(CrashPoint::AfterWave);
    }
    Ok((wave, delivery))
}

/// Where the crash tests kill a host (`SPACEWAKE_CRASH_AT`); never set in
/// production.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// Right after the write-first firing transaction committed.
    AfterFire,
    /// A wake is marked in flight; its wave has not committed.
    MidWave,
    /// The wave that delivered a wake committed (with its bookkeeping).
    AfterWave,
}

/// Aborts the process if `SPACEWAKE_CRASH_AT` names this point (as a
/// SIGKILL would, with nothing flushed or unwound).
pub fn crash_point(at: CrashPoint) {
    static WANTED: std::sync::OnceLock<Option<CrashPoint>> = std::sync::OnceLock::new();
    let wanted = WANTED.get_or_init(
        || match std::env::var("SPACEWAKE_CRASH_AT").ok()?.as_str() {
            "after-fire" => Some(CrashPoint::AfterFire),
            "mid-wave" => Some(CrashPoint::MidWave),
            "after-wave" => Some(CrashPoint::AfterWave),
            _ => None,
        },
    );
    if *wanted == Some(at) {
        std::process::abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_ids_name_their_piece_and_entry() {
        assert_eq!(wake_target("wake/pc-abc/1/1000/3"), Some(("pc-abc", 1)));
        assert_eq!(
            wake_target("wake/pc-abc/0/1000/3/retry2"),
            Some(("pc-abc", 0))
        );
        assert_eq!(wake_target("scenario/step1/event0"), None);
        assert_eq!(wake_target("wake/pc-abc/x/1"), None);
    }
}
