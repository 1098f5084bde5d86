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

use super::cadence::Cadence;
use super::entry::EntryState;
use super::jitter::Jitter;
use super::wake_id::WakeId;
use crate::store::{
    Author, CommitClass, CommitRequest, NewEvent, ScheduleRow, Space, StoreError, StoreResult,
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
    /// A one-off (`at`) entry's occurrence.
    pub one_off: bool,
}

/// A one-off wake fired at least this late was caught up (the host was
/// down, or the space could not be woken, when its time came); a time set
/// in the past is due when it was set, so it is not.
pub const ONE_OFF_CAUGHT_UP_MS: u64 = 60_000;

impl Fired {
    /// Whether this is a one-off wake caught up after its time.
    pub fn caught_up(&self) -> bool {
        self.one_off && !self.retry && self.lateness_ms >= ONE_OFF_CAUGHT_UP_MS
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FireReport {
    pub due: usize,
    pub fired: Vec<Fired>,
    pub suppressed: usize,
    pub seq: Option<u64>,
    /// How many entries the space has indexed (the rows the firing read).
    pub indexed: usize,
    /// The lease taken with the firing ([`fire_due_taking_lease`]).
    pub lease: Option<crate::store::Lease>,
}

/// What a firing pass decides for one due row (pure): the row as it will
/// be after the firing, and the wakes it delivers (retries of failed
/// occurrences first, then the regular occurrence if it is due).
struct Decision {
    row: ScheduleRow,
    wakes: Vec<Wake>,
}

fn decide(space: &str, row: &ScheduleRow, now_ms: u64, jitter: &Jitter, mode: Mode) -> Decision {
    let mut next = row.clone();
    let cadence = Cadence::of_row(row);
    // `intervalMinutes`, or `cron` and `timeZone`: what each payload says
    // the entry is.
    let payload = |fields: serde_json::Value| {
        let mut m = match fields {
            serde_json::Value::Object(m) => m,
            _ => serde_json::Map::new(),
        };
        cadence.describe(row, &mut m);
        if cadence.is_one_off() && !m.contains_key("triggered") {
            // The time this occurrence was set for (a retry's may be older
            // than what the field holds now).
            if let Some(t) = m.get("nominalTime").cloned() {
                m.insert("setFor".into(), t);
            }
        }
        serde_json::Value::Object(m)
    };
    let mut wakes = Vec::new();
    let mut retried = Vec::new();
    // Every pending occurrence keeps its own retry, on its own back-off: a
    // retry never stands in the way of the entry's next period, nor does
    // that period replace it.
    for p in next.pending.iter_mut() {
        let Some(retry_ms) = p.retry_due_ms.filter(|r| *r <= now_ms) else {
            continue;
        };
        p.retry_due_ms = None;
        retried.push(p.occurrence.clone());
        if p.attempts == 0 {
            // An operator's extra occurrence, not yet tried: its first
            // attempt, beside the grid (see `ops::trigger_now`).
            if mode == Mode::Fire {
                next.fired_count += 1;
                next.last_fired_ms = Some(now_ms);
            }
            wakes.push(Wake {
                event_id: p.occurrence.clone(),
                payload: payload(json!({
                    "entry": row.entry,
                    "period": p.period,
                    "nominalTime": retry_ms,
                    "fireTime": now_ms,
                    "dueTime": retry_ms,
                    "missedPeriods": 0,
                    "triggered": true,
                })),
                due_ms: retry_ms,
                period: p.period,
                missed_periods: 0,
                retry: false,
            });
            continue;
        }
        wakes.push(Wake {
            event_id: super::wake_id::retry_of(&p.occurrence, p.attempts),
            payload: payload(json!({
                "entry": row.entry,
                "period": p.period,
                "nominalTime": cadence.nominal_ms(space, row, p.period),
                "fireTime": now_ms,
                "dueTime": retry_ms,
                "attempt": p.attempts + 1,
                "retry": true,
                "missedPeriods": 0,
            })),
            due_ms: retry_ms,
            period: p.period,
            missed_periods: 0,
            retry: true,
        });
    }
    if mode != Mode::Fire {
        // A retry declined (suppressed, or over budget) is not delivered:
        // its occurrence is settled as skipped.
        next.pending.retain(|p| !retried.contains(&p.occurrence));
    }
    if row.next_due_ms <= now_ms {
        let mut entropy = rand::random::<u64>;
        let adv = cadence.after_fire(space, row, now_ms, now_ms, jitter, &mut entropy);
        next.nominal_period = adv.next_period;
        next.next_due_ms = adv.next_due_ms;
        next.missed_count += adv.missed_periods;
        if mode == Mode::Fire {
            next.fired_count += 1;
            next.last_fired_ms = Some(now_ms);
        }
        wakes.push(Wake {
            event_id: WakeId::occurrence(
                &row.piece,
                row.entry,
                row.declared_at_ms,
                row.nominal_period,
            )
            .to_string(),
            payload: payload(json!({
                "entry": row.entry,
                "period": row.nominal_period,
                "nominalTime": cadence.nominal_ms(space, row, row.nominal_period),
                "dueTime": row.next_due_ms,
                "fireTime": now_ms,
                "missedPeriods": adv.missed_periods,
            })),
            due_ms: row.next_due_ms,
            period: row.nominal_period,
            missed_periods: adv.missed_periods,
            retry: false,
        });
    }
    if mode == Mode::SkipBudget {
        next.skipped_count += wakes.len() as u64;
    }
    Decision { row: next, wakes }
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
    /// The wake event to append (none unless wakes fire).
    fn event(&self, row: &ScheduleRow, mode: Mode) -> Option<NewEvent> {
        (mode == Mode::Fire).then(|| NewEvent {
            event_id: self.event_id.clone(),
            stream: row.callback_stream.clone(),
            payload: self.payload.clone(),
            fired_by: "server".into(),
        })
    }

    /// What the fire history records for it.
    fn outcome(&self, mode: Mode) -> &'static str {
        match (mode, self.retry) {
            (Mode::Suppress, _) => "suppressed",
            (Mode::SkipBudget, _) => "skippedBudget",
            (Mode::Fire, true) => "retried",
            (Mode::Fire, false) => "fired",
        }
    }

    fn fired(&self, row: &ScheduleRow, now_ms: u64) -> Fired {
        Fired {
            piece: row.piece.clone(),
            entry: row.entry,
            event_id: self.event_id.clone(),
            due_ms: self.due_ms,
            lateness_ms: now_ms.saturating_sub(self.due_ms),
            missed_periods: self.missed_periods,
            retry: self.retry,
            one_off: Cadence::of_row(row).is_one_off(),
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

/// The firing's rows changed since it read them.
fn stale(e: &StoreError) -> bool {
    match e {
        StoreError::Hook { reason, .. } => reason == STALE,
        StoreError::Stale(_) => true,
        _ => false,
    }
}

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
            // Rows changed since they were read: found so by the firing
            // itself, or by the checks of a transaction that relied on
            // what its handle knew (a fleet's, see `StoreError::Stale`).
            Err(e) if stale(&e) && tries < STALE_RETRIES => {
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
    let id = space.id().to_string();
    let rows = space.schedule(None)?;
    let indexed = rows.len();
    let due: Vec<ScheduleRow> = rows
        .iter()
        .filter(|r| r.next_wake_ms().is_some_and(|w| w <= now_ms))
        .cloned()
        .collect();
    let mut report = FireReport {
        due: due.len(),
        indexed,
        ..Default::default()
    };
    if due.is_empty() {
        return Ok(report);
    }
    let mut decisions: Vec<Decision> = due
        .iter()
        .map(|r| decide(&id, r, now_ms, jitter, mode))
        .collect();
    let mut req = CommitRequest::new(CommitClass::System, Author::server());
    req.events = decisions
        .iter()
        .flat_map(|d| d.wakes.iter().filter_map(|w| w.event(&d.row, mode)))
        .collect();
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
        for d in &mut decisions {
            super::entry::save(plane, &mut d.row).map_err(|e| e.to_string())?;
            for w in &d.wakes {
                plane
                    .record_fire(
                        &d.row.piece,
                        d.row.entry,
                        now_ms,
                        &w.event_id,
                        w.period,
                        w.due_ms,
                        w.missed_periods,
                        w.outcome(mode),
                        FIRE_HISTORY,
                    )
                    .map_err(|e| e.to_string())?;
            }
        }
        // Every row read in full (a firing never changes what a one-off
        // entry follows): what the wave's commits compare one-off fields
        // with, with no listing of their own.
        super::at::remember(plane, &rows);
        Ok(())
    })?;
    report.seq = outcome.seq;
    report.lease = outcome.lease;
    for d in &decisions {
        for w in &d.wakes {
            if mode == Mode::Fire {
                report.fired.push(w.fired(&d.row, now_ms));
            } else {
                report.suppressed += 1;
            }
        }
    }
    Ok(report)
}

/// The earliest moment any active entry of `space` needs firing.
pub fn next_wake(space: &mut Space) -> StoreResult<Option<u64>> {
    Ok(space
        .schedule(None)?
        .iter()
        .filter_map(EntryState::next_wake_ms)
        .min())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::PendingWake;

    fn retry(period: u64, at_ms: u64) -> PendingWake {
        PendingWake {
            occurrence: format!("wake/pc-a/0/0/{period}"),
            period,
            attempts: 1,
            inflight: None,
            retry_due_ms: Some(at_ms),
        }
    }

    fn row() -> ScheduleRow {
        let hour = 3_600_000;
        let mut r = ScheduleRow::new("pc-a", 0, 60, "s", 0, 3 * hour);
        r.nominal_period = 3;
        r.pending = vec![retry(1, 100), retry(2, 200), retry(0, 5 * hour)];
        r
    }

    fn ids(d: &Decision) -> Vec<&str> {
        d.wakes.iter().map(|w| w.event_id.as_str()).collect()
    }

    #[test]
    fn every_due_retry_fires_on_its_own_back_off_beside_the_regular_period() {
        let r = row();
        let d = decide("s", &r, 250, &Jitter::none(), Mode::Fire);
        assert_eq!(
            ids(&d),
            ["wake/pc-a/0/0/1/retry1", "wake/pc-a/0/0/2/retry1"],
            "the regular period is not due yet, nor the later retry"
        );
        assert_eq!(d.row.pending.len(), 3, "fired retries wait for their wave");
        assert_eq!(d.row.retry_due_ms(), Some(5 * 3_600_000));

        let d = decide("s", &r, 3 * 3_600_000, &Jitter::none(), Mode::Fire);
        assert_eq!(
            ids(&d),
            [
                "wake/pc-a/0/0/1/retry1",
                "wake/pc-a/0/0/2/retry1",
                "wake/pc-a/0/0/3"
            ],
            "a due period fires beside the retries, neither replacing the other"
        );
        assert_eq!(d.row.nominal_period, 4);
        assert_eq!(d.row.fired_count, 1, "retries are not new occurrences");
        assert_eq!(d.wakes[1].payload["period"], 2);
        assert_eq!(d.wakes[1].payload["attempt"], 2);
    }

    #[test]
    fn a_calendar_entry_fires_its_occurrence_and_moves_to_the_next_one() {
        use crate::schedule::cron::CronSpec;
        // Friday 2026-03-27 07:30 in Berlin (CET), then Monday 07:30 (CEST).
        let (fri, mon) = (1_774_593_000_000, 1_774_848_600_000);
        let spec = CronSpec::parse("30 7 * * 1-5", Some("Europe/Berlin")).unwrap();
        let mut r = ScheduleRow::new("pc-a", 0, 0, "s", fri - 3_600_000, fri);
        r.nominal_period = CronSpec::period_of(fri);
        r.cadence = Some(crate::schedule::cadence::encode_cron(&spec));
        let d = decide("s", &r, fri + 5, &Jitter::none(), Mode::Fire);
        let w = &d.wakes[0];
        assert_eq!(w.payload["nominalTime"], fri);
        assert_eq!(w.payload["cron"], "30 7 * * 1-5");
        assert_eq!(w.payload["timeZone"], "Europe/Berlin");
        assert!(w.payload.get("intervalMinutes").is_none());
        assert_eq!(
            (d.row.next_due_ms, d.row.nominal_period),
            (mon, CronSpec::period_of(mon))
        );
        // Back from a long weekend down: one fire, the misses counted.
        let tue = mon + 86_400_000;
        let d = decide("s", &r, tue + 60_000, &Jitter::none(), Mode::Fire);
        assert_eq!(d.wakes.len(), 1);
        assert_eq!(d.wakes[0].payload["missedPeriods"], 2);
        assert_eq!(d.row.next_due_ms, tue + 86_400_000);
        // An operator's trigger is numbered by the minute it was asked for.
        crate::schedule::ops::plan_trigger("s", &mut r, fri - 120_000);
        assert_eq!(r.pending[0].period, CronSpec::period_of(fri - 120_000));
    }

    #[test]
    fn a_trigger_fires_an_extra_occurrence_and_leaves_the_grid_alone() {
        let hour = 3_600_000;
        let mut r = ScheduleRow::new("pc-a", 0, 120, "s", 0, 2 * hour);
        r.nominal_period = 1;
        let at = hour + 5;
        crate::schedule::ops::plan_trigger("s", &mut r, at);
        crate::schedule::ops::plan_trigger("s", &mut r, at);
        assert_eq!(r.pending.len(), 1, "one trigger per millisecond");
        crate::schedule::ops::plan_trigger("s", &mut r, at + 1);
        assert_eq!(r.next_wake_ms(), Some(at), "the directory's wake covers it");

        let d = decide("s", &r, at + 1, &Jitter::none(), Mode::Fire);
        assert_eq!(
            ids(&d),
            ["wake/pc-a/0/0/0/at3600005", "wake/pc-a/0/0/0/at3600006"]
        );
        assert_eq!(d.wakes[0].payload["triggered"], true);
        assert_eq!(d.wakes[0].payload["period"], 0);
        assert!(d.wakes.iter().all(|w| w.outcome(Mode::Fire) == "fired"));
        assert_eq!(
            (d.row.nominal_period, d.row.next_due_ms, d.row.fired_count),
            (1, 2 * hour, 2),
            "the next period stays due when it was"
        );
        assert_eq!(d.row.retry_due_ms(), None, "fired: waiting for its wave");

        // Its first attempt is marked like any wake's; a failure retries it.
        let mut row = d.row;
        let id = "wake/pc-a/0/0/0/at3600005";
        crate::schedule::delivery::mark_in_flight(&mut row, id);
        assert_eq!(row.pending[0].attempts, 1);
        crate::schedule::delivery::settle_failed(&mut row, id, at + 2);
        let d = decide("s", &row, at + 2 + 60_000, &Jitter::none(), Mode::Fire);
        assert_eq!(ids(&d), ["wake/pc-a/0/0/0/at3600005/retry1"]);
    }

    #[test]
    fn a_declined_retry_settles_its_occurrence() {
        let d = decide("s", &row(), 250, &Jitter::none(), Mode::SkipBudget);
        assert_eq!(d.wakes.len(), 2);
        assert_eq!(d.row.skipped_count, 2);
        assert_eq!(d.row.pending.len(), 1, "only the retry not yet due is left");
        assert!(d
            .wakes
            .iter()
            .all(|w| w.outcome(Mode::SkipBudget) == "skippedBudget"));
    }
}
