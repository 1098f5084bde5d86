//! Delivering wake events: at-least-once, deduplicated, never a crash loop.
//!
//! Each occurrence of an entry keeps its own delivery state on the entry's
//! row ([`PendingWake`]), so occurrences that fail close together are each
//! retried. Before a wave runs a wake event's handler, the occurrence
//! records the event as in flight and counts the attempt — durably, in its
//! own transaction. Inside the wave's own transaction (so both commit or
//! neither):
//! - delivered: the occurrence is settled and leaves the row;
//! - the handler failed (threw, was preempted, ran out of memory): a retry
//!   is planned 1, 5 and 30 minutes later, then the occurrence is
//!   dead-lettered (the cadence continues with the next period).
//!
//! If the process dies mid-wave, the event is still undelivered at the next
//! activation and its occurrence still names it as in flight: that attempt
//! failed. The event is then consumed without running and retried by the
//! same plan — so a callback that kills the process cannot loop.

#[cfg(test)]
use super::entry::EntryState;
use super::wake_id::{occurrence_of, WakeId};
use crate::store::{EventRecord, FireRun, PendingWake, PlaneTx, ScheduleRow, Space, StoreResult};
use std::collections::HashSet;

/// One wake event's callback run: how long it took, what it cost, why it
/// failed and what it logged (bounded: [`crate::store::FIRE_LOG_LINES`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WakeRun {
    pub event_id: String,
    pub duration_us: u64,
    pub cpu_us: u64,
    pub error: Option<String>,
    pub logs: Vec<crate::store::FireLog>,
}

/// What a wave did to the events it consumed, as delivery settles it (the
/// runtime's wave report, seen from here: `WaveReport::outcome`).
#[derive(Debug, Clone, Copy, Default)]
pub struct WaveOutcome<'a> {
    /// The wave's commit.
    pub seq: Option<u64>,
    /// Events whose handler ran and returned normally.
    pub delivered: &'a [String],
    /// Events whose handler failed (writes discarded).
    pub failed: &'a [String],
    /// Events consumed without running their handler (their attempt died).
    pub skipped: &'a [String],
    /// Events consumed without delivery after their retries, and why.
    pub dead_lettered: &'a [String],
    pub dead_letter_errors: &'a [(String, String)],
    /// Documents the wave wrote.
    pub written: &'a [String],
    /// What each wake event's callback run did.
    pub wake_runs: &'a [WakeRun],
}

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

/// Entry `entry` among one piece's schedule rows.
fn entry_of(rows: Vec<ScheduleRow>, entry: u32) -> Option<ScheduleRow> {
    rows.into_iter().find(|r| r.entry == entry)
}

/// What marking a wake in flight found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// A new attempt of its occurrence is under way.
    Marked,
    /// The same event was already in flight: that attempt died with its
    /// process, and the event is consumed unrun.
    Crashed,
}

/// Records `event_id` as in flight on its entry's row (pure).
pub fn mark_in_flight(row: &mut ScheduleRow, event_id: &str) -> Mark {
    let occurrence = occurrence_of(event_id);
    match row.pending.iter_mut().find(|p| p.occurrence == occurrence) {
        Some(p) if p.inflight.as_deref() == Some(event_id) => return Mark::Crashed,
        Some(p) => {
            p.inflight = Some(event_id.to_string());
            p.attempts += 1;
            p.retry_due_ms = None;
        }
        None => row.pending.push(PendingWake {
            period: period_of(row, &occurrence),
            occurrence,
            attempts: 1,
            inflight: Some(event_id.to_string()),
            retry_due_ms: None,
        }),
    }
    Mark::Marked
}

/// The grid period an occurrence id names (the row's last fired period
/// when the id is not a wake's).
fn period_of(row: &ScheduleRow, occurrence: &str) -> u64 {
    WakeId::parse(occurrence).map_or(row.nominal_period.saturating_sub(1), |w| w.period)
}

/// Settles a delivered wake (pure): its occurrence leaves the row.
pub fn settle_delivered(row: &mut ScheduleRow, event_id: &str) {
    let occurrence = occurrence_of(event_id);
    row.pending.retain(|p| p.occurrence != occurrence);
}

/// What a failed attempt leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// A retry of the occurrence fires at this time.
    Retry { period: u64, at_ms: u64 },
    /// Its retries are spent: the occurrence is dead-lettered.
    DeadLetter { period: u64 },
}

/// Settles a failed (or crashed) attempt of a wake (pure): a retry after
/// 1, 5 and 30 minutes, then the dead letter.
pub fn settle_failed(row: &mut ScheduleRow, event_id: &str, now_ms: u64) -> Failure {
    let occurrence = occurrence_of(event_id);
    let i = match row.pending.iter().position(|p| p.occurrence == occurrence) {
        Some(i) => i,
        None => {
            // Failed without being marked (its row was recreated meanwhile):
            // the attempt still counts.
            mark_in_flight(row, event_id);
            row.pending.len() - 1
        }
    };
    let p = &mut row.pending[i];
    let period = p.period;
    match RETRY_BACKOFF_MINUTES.get(p.attempts.max(1) as usize - 1) {
        Some(min) => {
            let at_ms = now_ms + min * super::grid::minute_ms();
            p.inflight = None;
            p.retry_due_ms = Some(at_ms);
            Failure::Retry { period, at_ms }
        }
        None => {
            row.pending.remove(i);
            Failure::DeadLetter { period }
        }
    }
}

/// Marks the wake events among `events` (the undelivered events the wave
/// is about to run) as in flight (durably) and returns the ones whose
/// previous attempt died with the process: to be consumed unrun.
pub fn before_wave(space: &mut Space, events: &[EventRecord]) -> StoreResult<PendingWakes> {
    let mut crashed = HashSet::new();
    let mut marked = 0;
    let pending: Vec<(String, WakeId)> = events
        .iter()
        .filter_map(|e| WakeId::parse(&e.event_id).map(|w| (e.event_id.clone(), w)))
        .collect();
    for (id, wake) in pending {
        let Some(mut row) = entry_of(space.schedule(Some(&wake.piece))?, wake.entry) else {
            continue; // the piece or entry is gone: its event runs (or no-ops) as usual
        };
        match mark_in_flight(&mut row, &id) {
            Mark::Crashed => {
                crashed.insert(id);
            }
            Mark::Marked => {
                super::entry::save_in(space, &mut row)?;
                marked += 1;
            }
        }
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

/// Settles wake entries after a wave, inside a given transaction: resets
/// delivered ones, plans retries or dead-letters failed (and crashed) ones.
/// The host runs it inside the wave's own commit, so a wave and the
/// delivery state of its wakes commit together or not at all.
pub fn settle_delivery(
    plane: &mut PlaneTx<'_>,
    wave: &WaveOutcome<'_>,
    now_ms: u64,
    backoff: &crate::schedule::backoff::BackoffPolicy,
) -> StoreResult<DeliveryReport> {
    let mut report = DeliveryReport::default();
    for id in wave.delivered {
        let Some(WakeId { piece, entry, .. }) = WakeId::parse(id) else {
            continue;
        };
        let piece = piece.as_str();
        let Some(mut row) = entry_of(plane.schedule(Some(piece))?, entry) else {
            continue;
        };
        let occurrence = occurrence_of(id);
        let period = row
            .pending
            .iter()
            .find(|p| p.occurrence == occurrence)
            .map_or(0, |p| p.period);
        settle_delivered(&mut row, id);
        if crate::schedule::backoff::on_delivered(&mut row, wave.written, now_ms, backoff) {
            report.backed_off += 1;
        }
        super::entry::save(plane, &mut row)?;
        plane.settle_fire(
            piece,
            entry,
            id,
            period,
            "delivered",
            &fire_run(wave, id, now_ms, None),
            super::fire::FIRE_HISTORY,
        )?;
        report.delivered += 1;
    }
    for id in wave
        .failed
        .iter()
        .chain(wave.skipped)
        .chain(wave.dead_lettered)
    {
        let Some(WakeId { piece, entry, .. }) = WakeId::parse(id) else {
            continue;
        };
        let piece = piece.as_str();
        let Some(mut row) = entry_of(plane.schedule(Some(piece))?, entry) else {
            continue;
        };
        let (period, outcome) = match settle_failed(&mut row, id, now_ms) {
            Failure::Retry { period, .. } => {
                report.retried += 1;
                (period, "failed")
            }
            Failure::DeadLetter { period } => {
                report.dead_lettered += 1;
                (period, "deadLettered")
            }
        };
        super::entry::save(plane, &mut row)?;
        let why = if wave.skipped.contains(id) {
            Some("the process ended while the callback ran".to_string())
        } else {
            wave.dead_letter_errors
                .iter()
                .find(|(e, _)| e == id)
                .map(|(_, error)| error.clone())
        };
        plane.settle_fire(
            piece,
            entry,
            id,
            period,
            outcome,
            &fire_run(wave, id, now_ms, why),
            super::fire::FIRE_HISTORY,
        )?;
    }
    Ok(report)
}

/// The record of `id`'s run in `wave`, settled at `now_ms`; `why` stands
/// for the error when the callback did not run.
fn fire_run(wave: &WaveOutcome<'_>, id: &str, now_ms: u64, why: Option<String>) -> FireRun {
    let mut run = FireRun {
        settled_ms: Some(now_ms),
        error: why,
        ..FireRun::default()
    };
    if let Some(w) = wave.wake_runs.iter().find(|w| w.event_id == id) {
        run.duration_us = Some(w.duration_us);
        run.cpu_us = Some(w.cpu_us);
        run.error = w.error.clone().or(run.error);
        run.logs = w.logs.clone();
    }
    if run.error.is_none() {
        run.commit_seq = wave.seq;
    }
    run
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

    const P1: &str = "wake/pc-a/0/0/1";
    const P2: &str = "wake/pc-a/0/0/2";

    fn row() -> ScheduleRow {
        let mut r = ScheduleRow::new("pc-a", 0, 60, "s", 0, 1_000);
        r.nominal_period = 3;
        r
    }

    #[test]
    fn a_delivered_wake_settles_its_occurrence() {
        let mut r = row();
        assert_eq!(mark_in_flight(&mut r, P1), Mark::Marked);
        assert_eq!(r.attempts(), 1);
        assert_eq!(r.inflight_event(), Some(P1));
        settle_delivered(&mut r, P1);
        assert!(r.pending.is_empty());
    }

    #[test]
    fn an_attempt_found_still_in_flight_died_with_its_process() {
        let mut r = row();
        mark_in_flight(&mut r, P1);
        mark_in_flight(&mut r, P2);
        // Both were in flight when the process died: both are seen, not
        // only the newer one.
        assert_eq!(mark_in_flight(&mut r, P1), Mark::Crashed);
        assert_eq!(mark_in_flight(&mut r, P2), Mark::Crashed);
    }

    #[test]
    fn two_occurrences_failing_together_are_each_retried() {
        // The fleet's fault test found this: a host stopped with two
        // occurrences of one entry in flight; the taker consumed both unrun.
        // With one retry slot per entry the second replaced the first.
        let mut r = row();
        mark_in_flight(&mut r, P1);
        mark_in_flight(&mut r, P2);
        let m = crate::schedule::grid::minute_ms();
        assert_eq!(
            settle_failed(&mut r, P1, 10),
            Failure::Retry {
                period: 1,
                at_ms: 10 + m
            }
        );
        assert_eq!(
            settle_failed(&mut r, P2, 20),
            Failure::Retry {
                period: 2,
                at_ms: 20 + m
            }
        );
        assert_eq!(r.pending.len(), 2);
        assert_eq!(r.retry_due_ms(), Some(10 + m), "the earliest retry wakes");
        assert_eq!(r.inflight_event(), None);
        // Each retry is its own attempt of its own occurrence.
        assert_eq!(
            mark_in_flight(&mut r, &format!("{P1}/retry1")),
            Mark::Marked
        );
        assert_eq!(r.pending[0].attempts, 2);
        assert_eq!(r.pending[1].retry_due_ms, Some(20 + m));
        settle_delivered(&mut r, &format!("{P1}/retry1"));
        assert_eq!(r.pending.len(), 1);
        assert_eq!(r.pending[0].occurrence, P2);
    }

    #[test]
    fn retries_back_off_then_dead_letter() {
        let mut r = row();
        let m = crate::schedule::grid::minute_ms();
        let mut id = P1.to_string();
        for (n, min) in RETRY_BACKOFF_MINUTES.iter().enumerate() {
            mark_in_flight(&mut r, &id);
            assert_eq!(
                settle_failed(&mut r, &id, 0),
                Failure::Retry {
                    period: 1,
                    at_ms: min * m
                }
            );
            id = format!("{P1}/retry{}", n + 1);
        }
        mark_in_flight(&mut r, &id);
        assert_eq!(
            settle_failed(&mut r, &id, 0),
            Failure::DeadLetter { period: 1 }
        );
        assert!(r.pending.is_empty());
    }
}
