//! Firing, write-first: one space transaction advances every due entry and
//! appends its wake event. Shared by the host's space servers and the
//! scenario runner, so a scenario's `advanceMinutes` is the host running.
//!
//! # Crash safety
//! The entry's next due time and the wake event commit together. A crash
//! before the commit leaves the entry due (it fires at the next activation);
//! a crash after it leaves an undelivered event (delivered at least once
//! through the ordinary event path, deduplicated by its deterministic id)
//! and an entry that is no longer due — so a crash can never put the entry
//! into a tight loop.

use super::grid::{after_fire, occurrence_event_id, Grid};
use super::jitter::Jitter;
use crate::store::{
    Author, CommitClass, CommitRequest, NewEvent, ScheduleRow, ScheduleStatus, Space, StoreError,
    StoreResult,
};
use serde_json::json;

/// How many recent fires of an entry are kept for operators.
pub const FIRE_HISTORY: usize = 20;

/// One wake appended by a firing pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fired {
    pub piece: String,
    pub entry: u32,
    pub event_id: String,
    pub due_ms: u64,
    pub lateness_ms: u64,
    pub missed_periods: u64,
    pub retry: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FireReport {
    pub due: usize,
    pub fired: Vec<Fired>,
    pub suppressed: usize,
    pub seq: Option<u64>,
    /// The lease taken with the firing ([`fire_due_taking_lease`]).
    pub lease: Option<crate::store::Lease>,
}

/// What a firing pass decides for one due row (pure).
struct Decision {
    row: ScheduleRow,
    event: Option<NewEvent>,
    fired: Option<Fired>,
    outcome: &'static str,
    due_ms: u64,
    period: u64,
}

fn decide(space: &str, row: &ScheduleRow, now_ms: u64, jitter: &Jitter, enabled: bool) -> Decision {
    let mut next = row.clone();
    let mut entropy = rand::random::<u64>;
    // A pending retry of a failed occurrence goes first: when it is due,
    // and also, ahead of its back-off, when the entry's next regular
    // period is due — the regular one fires on the next pass, so a failed
    // occurrence is retried or dead-lettered, never dropped by the next.
    let retry_now = row
        .retry_due_ms
        .filter(|r| *r <= now_ms || row.next_due_ms <= now_ms);
    if let Some(retry_ms) = retry_now {
        let base = row
            .inflight_event
            .as_deref()
            .map(|e| e.split("/retry").next().unwrap_or(e).to_string())
            .unwrap_or_else(|| {
                occurrence_event_id(
                    &row.piece,
                    row.entry,
                    row.declared_at_ms,
                    row.nominal_period.saturating_sub(1),
                )
            });
        let event_id = format!("{base}/retry{}", row.attempts);
        next.retry_due_ms = None;
        // The retried occurrence's period is the last segment of its id.
        let period: u64 = base
            .rsplit('/')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(row.nominal_period.saturating_sub(1));
        let grid = Grid::of_row(space, row);
        let payload = json!({
            "entry": row.entry,
            "period": period,
            "nominalTime": grid.nominal_ms(period),
            "intervalMinutes": row.interval_minutes,
            "fireTime": now_ms,
            "dueTime": retry_ms,
            "attempt": row.attempts + 1,
            "retry": true,
            "missedPeriods": 0,
        });
        let wake = Wake {
            event_id,
            payload,
            due_ms: retry_ms,
            period,
            missed_periods: 0,
            retry: true,
        };
        return wake.decision(row, next, now_ms, enabled);
    }
    let grid = Grid::of_row(space, row);
    let adv = after_fire(space, row, now_ms, now_ms, jitter, &mut entropy);
    let event_id = occurrence_event_id(
        &row.piece,
        row.entry,
        row.declared_at_ms,
        row.nominal_period,
    );
    next.nominal_period = adv.next_period;
    next.next_due_ms = adv.next_due_ms;
    next.missed_count += adv.missed_periods;
    if enabled {
        next.fired_count += 1;
        next.last_fired_ms = Some(now_ms);
        // A new occurrence starts its own attempts (a pending retry of an
        // older one went first, above).
        next.attempts = 0;
        next.retry_due_ms = None;
    }
    let payload = json!({
        "entry": row.entry,
        "period": row.nominal_period,
        "intervalMinutes": row.interval_minutes,
        "nominalTime": grid.nominal_ms(row.nominal_period),
        "dueTime": row.next_due_ms,
        "fireTime": now_ms,
        "missedPeriods": adv.missed_periods,
    });
    let wake = Wake {
        event_id,
        payload,
        due_ms: row.next_due_ms,
        period: row.nominal_period,
        missed_periods: adv.missed_periods,
        retry: false,
    };
    wake.decision(row, next, now_ms, enabled)
}

/// One occurrence to deliver: a new one, or a retry of a failed one.
struct Wake {
    event_id: String,
    payload: serde_json::Value,
    due_ms: u64,
    period: u64,
    missed_periods: u64,
    retry: bool,
}

impl Wake {
    /// The wake event to append (none when wakes are suppressed), what to
    /// count, and the row as it will be after this firing (`next`).
    fn decision(
        self,
        row: &ScheduleRow,
        next: ScheduleRow,
        now_ms: u64,
        enabled: bool,
    ) -> Decision {
        Decision {
            event: enabled.then(|| NewEvent {
                event_id: self.event_id.clone(),
                stream: row.callback_stream.clone(),
                payload: self.payload,
                fired_by: "server".into(),
            }),
            fired: Some(Fired {
                piece: row.piece.clone(),
                entry: row.entry,
                event_id: self.event_id,
                due_ms: self.due_ms,
                lateness_ms: now_ms.saturating_sub(self.due_ms),
                missed_periods: self.missed_periods,
                retry: self.retry,
            }),
            outcome: match (enabled, self.retry) {
                (false, _) => "suppressed",
                (true, true) => "retried",
                (true, false) => "fired",
            },
            due_ms: self.due_ms,
            period: self.period,
            row: next,
        }
    }
}

/// Fires every entry of `space` due at `now_ms`: one transaction advances
/// them and appends their wake events (or, when `enabled` is false, only
/// advances them and records the suppression).
pub fn fire_due(
    space: &mut Space,
    now_ms: u64,
    jitter: &Jitter,
    enabled: bool,
) -> StoreResult<FireReport> {
    let mode = if enabled { Mode::Fire } else { Mode::Suppress };
    fire_due_as(space, now_ms, jitter, mode, false)
}

/// [`fire_due`] for the first wake of a scheduled tenure: the tenure's
/// lease is taken in the firing's own transaction (one transaction fewer
/// per wake; the crash argument is in `spec/scheduling.md`). `None`: another
/// holder's lease is live, and nothing was fired or taken. A report with
/// nothing due took no lease either (`lease` is `None`): the caller takes
/// it as usual.
pub fn fire_due_taking_lease(
    space: &mut Space,
    now_ms: u64,
    jitter: &Jitter,
    enabled: bool,
) -> StoreResult<Option<FireReport>> {
    let mode = if enabled { Mode::Fire } else { Mode::Suppress };
    match fire_due_as(space, now_ms, jitter, mode, true) {
        Err(crate::store::StoreError::NotLeaseHolder(_)) => Ok(None),
        other => other.map(Some),
    }
}

/// Declines a space's due wakes because its scheduled budget is spent: the
/// entries advance as usual, nothing is appended, the skip is recorded in
/// the fire history and the ledger.
pub fn skip_due_for_budget(
    space: &mut Space,
    now_ms: u64,
    jitter: &Jitter,
    window_ms: u64,
) -> StoreResult<FireReport> {
    let report = fire_due_as(space, now_ms, jitter, Mode::SkipBudget, false)?;
    if report.suppressed > 0 {
        let window = crate::accounting::window_start_ms(now_ms, window_ms);
        let delta = crate::store::LedgerDelta {
            budget_skips: report.suppressed as u64,
            ..Default::default()
        };
        space.plane(|p| p.add_ledger(crate::store::Bucket::Scheduled, window, &delta))?;
    }
    Ok(report)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Fire,
    Suppress,
    SkipBudget,
}

/// What a firing's transaction says when the rows it decided on changed
/// before it could write: nothing of it is written, and it decides again.
const STALE: &str = "the schedule changed since the firing read it";

/// How many times a firing decides again after finding its rows changed
/// (another host of a fleet fired them meanwhile) before it gives up.
const STALE_RETRIES: usize = 3;

fn fire_due_as(
    space: &mut Space,
    now_ms: u64,
    jitter: &Jitter,
    mode: Mode,
    take_lease: bool,
) -> StoreResult<FireReport> {
    let mut tries = 0;
    loop {
        match fire_once(space, now_ms, jitter, mode, take_lease) {
            Err(StoreError::Hook { reason, .. }) if reason == STALE && tries < STALE_RETRIES => {
                space
                    .counters()
                    .inc(crate::metrics::Counter::ScheduleFiringsRedecided);
                tries += 1;
            }
            other => return other,
        }
    }
}

fn fire_once(
    space: &mut Space,
    now_ms: u64,
    jitter: &Jitter,
    mode: Mode,
    take_lease: bool,
) -> StoreResult<FireReport> {
    let enabled = mode == Mode::Fire;
    let id = space.id().to_string();
    let due: Vec<ScheduleRow> = space
        .schedule(None)?
        .into_iter()
        .filter(|r| r.status == ScheduleStatus::Active && r.wake_ms() <= now_ms)
        .collect();
    let mut report = FireReport {
        due: due.len(),
        ..Default::default()
    };
    if due.is_empty() {
        return Ok(report);
    }
    let mut decisions: Vec<Decision> = due
        .iter()
        .map(|r| decide(&id, r, now_ms, jitter, enabled))
        .collect();
    if mode == Mode::SkipBudget {
        for d in &mut decisions {
            d.outcome = "skippedBudget";
            d.row.skipped_count += 1;
        }
    }
    let mut req = CommitRequest::new(CommitClass::System, Author::server());
    req.events = decisions.iter().filter_map(|d| d.event.clone()).collect();
    req.take_lease = take_lease;
    let shared = space.shared_by_fleet();
    let outcome = space.commit_with(req, |_, plane| {
        // The decisions were made on rows read before this transaction.
        // On one host's files nothing else writes them meanwhile; on a
        // fleet's database another host may have fired them, and writing
        // over its advance would record an occurrence twice: there they are
        // written only if they are still what the transaction sees.
        for r in due.iter().filter(|_| shared) {
            let now = plane.schedule(Some(&r.piece)).map_err(|e| e.to_string())?;
            if now.iter().find(|x| x.entry == r.entry) != Some(r) {
                return Err(STALE.to_string());
            }
        }
        for d in &decisions {
            plane.upsert_schedule(&d.row).map_err(|e| e.to_string())?;
            if let Some(f) = &d.fired {
                plane
                    .record_fire(
                        &d.row.piece,
                        d.row.entry,
                        now_ms,
                        &f.event_id,
                        d.period,
                        d.due_ms,
                        f.missed_periods,
                        d.outcome,
                        FIRE_HISTORY,
                    )
                    .map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    })?;
    report.seq = outcome.seq;
    report.lease = outcome.lease;
    for d in decisions {
        if enabled {
            report.fired.extend(d.fired);
        } else {
            report.suppressed += 1;
        }
    }
    Ok(report)
}

/// The earliest moment any active entry of `space` needs firing.
pub fn next_wake(space: &mut Space) -> StoreResult<Option<u64>> {
    Ok(space
        .schedule(None)?
        .iter()
        .filter(|r| r.status == ScheduleStatus::Active)
        .map(ScheduleRow::wake_ms)
        .min())
}
