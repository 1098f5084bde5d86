//! An entry's cadence: how its occurrences are numbered and when each falls
//! due. Two shapes share one row, one waker and one firing path:
//!
//! - **interval** (`intervalMinutes`): periods count intervals from the
//!   entry's anchor (`grid.rs`), jittered both ways around each nominal
//!   time;
//! - **cron** (`cron`, optional `timeZone`): periods are the occurrences'
//!   instants in minutes since the epoch (`cron.rs`), jittered forward
//!   only;
//! - **one-off** (`at`): the one occurrence is the time the piece's field
//!   holds, in epoch milliseconds (`at.rs`), never jittered; after it fires
//!   the entry waits for a new time.
//!
//! The store keeps the shape as opaque text on the row (`cadence`: `NULL`
//! for an interval, else [`encode_cron`]'s or [`AtState::encode`]'s JSON);
//! this module and `at.rs` are its only readers and writers.

use super::at::AtState;
use super::cron::{self, CronSpec};
use super::grid::{self, Advance, Grid};
use super::jitter::Jitter;
use crate::store::ScheduleRow;
use serde_json::{json, Map, Value};

/// The shape of one entry, as its row stores it.
#[derive(Debug, Clone)]
pub enum Cadence {
    Interval,
    Cron(Box<CronSpec>),
    At(Box<AtState>),
    /// A row whose stored cadence no longer reads (a zone dropped from the
    /// compiled-in database, say): it never falls due again.
    Unreadable(String),
}

/// The stored text of a cron cadence (the row's `cadence` column).
pub fn encode_cron(spec: &CronSpec) -> String {
    json!({ "cron": spec.expr(), "timeZone": spec.zone() }).to_string()
}

impl Cadence {
    /// The cadence a row fires on.
    pub fn of_row(row: &ScheduleRow) -> Cadence {
        let Some(text) = row.cadence.as_deref() else {
            return Cadence::Interval;
        };
        if let Some(state) = AtState::decode(text) {
            return Cadence::At(Box::new(state));
        }
        let parsed: Option<(String, Option<String>)> =
            serde_json::from_str::<Value>(text).ok().and_then(|v| {
                let expr = v.get("cron")?.as_str()?.to_string();
                let zone = v.get("timeZone").and_then(Value::as_str).map(String::from);
                Some((expr, zone))
            });
        match parsed {
            Some((expr, zone)) => match CronSpec::parse(&expr, zone.as_deref()) {
                Ok(spec) => Cadence::Cron(Box::new(spec)),
                Err(p) => Cadence::Unreadable(p.message),
            },
            None => Cadence::Unreadable(format!("unreadable cadence {text:?}")),
        }
    }

    /// When occurrence `period` was meant to happen, before jitter.
    pub fn nominal_ms(&self, space: &str, row: &ScheduleRow, period: u64) -> u64 {
        match self {
            Cadence::Interval => Grid::of_row(space, row).nominal_ms(period),
            Cadence::Cron(_) => CronSpec::nominal_ms(period),
            Cadence::At(_) => period,
            Cadence::Unreadable(_) => u64::MAX,
        }
    }

    /// The occurrence under way at `now_ms` (an operator's trigger counts
    /// in it): the last period whose nominal time is not after now.
    pub fn period_at(&self, space: &str, row: &ScheduleRow, now_ms: u64) -> u64 {
        match self {
            Cadence::Interval => {
                let grid = Grid::of_row(space, row);
                now_ms.saturating_sub(grid.anchor_ms) / grid.interval_ms.max(1)
            }
            Cadence::Cron(_) | Cadence::Unreadable(_) => CronSpec::period_of(now_ms),
            // The time it holds now (a trigger counts in that arming).
            Cadence::At(_) => row.nominal_period,
        }
    }

    /// Where the entry goes after firing its current period at
    /// `fired_at_ms`, seen from `now_ms` (coalescing what fell due meanwhile).
    pub fn after_fire(
        &self,
        space: &str,
        row: &ScheduleRow,
        fired_at_ms: u64,
        now_ms: u64,
        jitter: &Jitter,
        entropy: &mut impl FnMut() -> u64,
    ) -> Advance {
        match self {
            Cadence::Interval => grid::after_fire(space, row, fired_at_ms, now_ms, jitter, entropy),
            Cadence::Cron(spec) => cron::after_fire(
                spec,
                (space, &row.piece, row.entry),
                row.nominal_period,
                fired_at_ms,
                now_ms,
                jitter,
                entropy,
            ),
            // Fired once: it waits for the field to hold a new time.
            Cadence::At(_) => Advance {
                next_period: row.nominal_period,
                next_due_ms: super::entry::NEVER_MS,
                missed_periods: 0,
            },
            Cadence::Unreadable(_) => Advance {
                next_period: u64::MAX,
                next_due_ms: u64::MAX,
                missed_periods: 0,
            },
        }
    }

    /// Whether it is a one-off entry.
    pub fn is_one_off(&self) -> bool {
        matches!(self, Cadence::At(_))
    }

    /// Whether unread output may stretch it (the back-off doubles an
    /// interval; a calendar time is a time a person chose).
    pub fn backs_off(&self) -> bool {
        matches!(self, Cadence::Interval)
    }

    /// The fields a wake's payload and an operator's view name the shape
    /// by: `intervalMinutes`; `cron` and `timeZone`; or `at` (the field, as
    /// `{doc, path}`, and the time it holds, `setFor`).
    pub fn describe(&self, row: &ScheduleRow, into: &mut Map<String, Value>) {
        match self {
            Cadence::Interval => {
                into.insert("intervalMinutes".into(), json!(row.interval_minutes));
            }
            Cadence::Cron(spec) => {
                into.insert("cron".into(), json!(spec.expr()));
                into.insert("timeZone".into(), json!(spec.zone()));
            }
            Cadence::At(state) => {
                into.insert(
                    "at".into(),
                    json!({"doc": state.field.doc, "path": state.field.path}),
                );
                into.insert("setFor".into(), json!(state.set_for));
            }
            Cadence::Unreadable(_) => {
                if let Some(Ok(v)) = row.cadence.as_deref().map(serde_json::from_str::<Value>) {
                    if let Some(o) = v.as_object() {
                        into.extend(o.clone());
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::jitter::Jitter;

    #[test]
    fn a_row_without_a_cadence_is_an_interval_and_a_cron_row_reads_back() {
        let mut r = ScheduleRow::new("pc", 0, 60, "s", 0, 1_000);
        assert!(matches!(Cadence::of_row(&r), Cadence::Interval));
        let spec = CronSpec::parse("30 7 * * 1-5", Some("Europe/Berlin")).unwrap();
        r.cadence = Some(encode_cron(&spec));
        let Cadence::Cron(back) = Cadence::of_row(&r) else {
            panic!("not cron: {:?}", Cadence::of_row(&r));
        };
        assert_eq!(
            (back.expr(), back.zone()),
            ("30 7 * * 1-5", "Europe/Berlin")
        );
        let mut m = Map::new();
        Cadence::of_row(&r).describe(&r, &mut m);
        assert_eq!(
            Value::Object(m),
            json!({"cron": "30 7 * * 1-5", "timeZone": "Europe/Berlin"})
        );
        r.cadence = Some("{\"cron\": \"61 * * * *\"}".into());
        let c = Cadence::of_row(&r);
        assert!(matches!(c, Cadence::Unreadable(_)), "{c:?}");
        let j = Jitter::none();
        let adv = c.after_fire("s", &r, 0, 0, &j, &mut || 0);
        assert_eq!(
            adv.next_due_ms,
            u64::MAX,
            "an unreadable cadence never falls due"
        );
    }
}
