//! The plane's rows as values, read by position from either backend's row:
//! one mapper per kind of row, written once over [`Columns`] (a space
//! file's `rusqlite::Row` or a fleet database's `postgres::Row`). Each
//! backend's SQL selects the columns in the order its mapper reads them.

use super::dead_letters::{DeadLetter, EventFailure};
use super::plane::{
    ActionCost, Bucket, FireRecord, FireRun, LedgerDelta, LedgerRow, ScheduleRow, ScheduleStatus,
};
use super::records::EventRecord;
use serde_json::Value;

/// One row a backend read, by column position.
pub(crate) trait Columns {
    type Error;
    fn text(&self, i: usize) -> Result<String, Self::Error>;
    fn opt_text(&self, i: usize) -> Result<Option<String>, Self::Error>;
    /// An integer column of any width.
    fn int(&self, i: usize) -> Result<i64, Self::Error>;
    fn opt_int(&self, i: usize) -> Result<Option<i64>, Self::Error>;
    /// A boolean (an integer 0 or 1 on SQLite).
    fn flag(&self, i: usize) -> Result<bool, Self::Error>;

    /// An integer column the store only ever writes non-negative.
    fn uint(&self, i: usize) -> Result<u64, Self::Error> {
        self.int(i).map(|v| v as u64)
    }
    fn opt_uint(&self, i: usize) -> Result<Option<u64>, Self::Error> {
        self.opt_int(i).map(|v| v.map(|v| v as u64))
    }
}

impl Columns for rusqlite::Row<'_> {
    type Error = rusqlite::Error;
    fn text(&self, i: usize) -> rusqlite::Result<String> {
        self.get(i)
    }
    fn opt_text(&self, i: usize) -> rusqlite::Result<Option<String>> {
        self.get(i)
    }
    fn int(&self, i: usize) -> rusqlite::Result<i64> {
        self.get(i)
    }
    fn opt_int(&self, i: usize) -> rusqlite::Result<Option<i64>> {
        self.get(i)
    }
    fn flag(&self, i: usize) -> rusqlite::Result<bool> {
        Ok(self.get::<_, i64>(i)? != 0)
    }
}

impl Columns for postgres::Row {
    type Error = postgres::Error;
    fn text(&self, i: usize) -> Result<String, postgres::Error> {
        self.try_get(i)
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>, postgres::Error> {
        self.try_get(i)
    }
    fn int(&self, i: usize) -> Result<i64, postgres::Error> {
        use postgres::types::Type;
        match *self.columns()[i].type_() {
            Type::INT2 => self.try_get::<_, i16>(i).map(i64::from),
            Type::INT4 => self.try_get::<_, i32>(i).map(i64::from),
            _ => self.try_get(i),
        }
    }
    fn opt_int(&self, i: usize) -> Result<Option<i64>, postgres::Error> {
        use postgres::types::Type;
        match *self.columns()[i].type_() {
            Type::INT2 => Ok(self.try_get::<_, Option<i16>>(i)?.map(i64::from)),
            Type::INT4 => Ok(self.try_get::<_, Option<i32>>(i)?.map(i64::from)),
            _ => self.try_get(i),
        }
    }
    fn flag(&self, i: usize) -> Result<bool, postgres::Error> {
        self.try_get(i)
    }
}

/// A row read as a JSON array (on a fleet database, `json_build_array` of
/// the same columns in the same order): several kinds of row come back in
/// one statement that way (`PgSpace::prefetch_tenure`).
pub(crate) struct JsonCols<'a>(pub &'a [Value]);

impl JsonCols<'_> {
    fn at(&self, i: usize) -> &Value {
        self.0.get(i).unwrap_or(&Value::Null)
    }
}

impl Columns for JsonCols<'_> {
    type Error = String;
    fn text(&self, i: usize) -> Result<String, String> {
        self.opt_text(i)?
            .ok_or_else(|| format!("column {i} is null, not text"))
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>, String> {
        match self.at(i) {
            Value::Null => Ok(None),
            Value::String(s) => Ok(Some(s.clone())),
            v => Err(format!("column {i} is {v}, not text")),
        }
    }
    fn int(&self, i: usize) -> Result<i64, String> {
        self.opt_int(i)?
            .ok_or_else(|| format!("column {i} is null, not an integer"))
    }
    fn opt_int(&self, i: usize) -> Result<Option<i64>, String> {
        match self.at(i) {
            Value::Null => Ok(None),
            v => v
                .as_i64()
                .map(Some)
                .ok_or_else(|| format!("column {i} is {v}, not an integer")),
        }
    }
    fn flag(&self, i: usize) -> Result<bool, String> {
        self.at(i)
            .as_bool()
            .ok_or_else(|| format!("column {i} is not a boolean"))
    }
}

/// The columns [`schedule_row`] reads, in its order.
pub(crate) const SCHEDULE_COLUMNS: &str = "piece, entry, interval_minutes, callback_stream, \
     declared_at_ms, nominal_period, next_due_ms, status, wake_ms, fired_count, missed_count, \
     skipped_count, last_fired_ms, backoff_factor, unread_fires, output_docs, output_read, \
     pending, cadence";

pub(crate) fn schedule_row<C: Columns>(r: &C) -> Result<ScheduleRow, C::Error> {
    Ok(ScheduleRow {
        piece: r.text(0)?,
        entry: r.int(1)? as u32,
        interval_minutes: r.int(2)? as u32,
        callback_stream: r.text(3)?,
        declared_at_ms: r.uint(4)?,
        nominal_period: r.uint(5)?,
        next_due_ms: r.uint(6)?,
        status: ScheduleStatus::parse(&r.text(7)?),
        wake_ms: r.opt_uint(8)?,
        fired_count: r.uint(9)?,
        missed_count: r.uint(10)?,
        skipped_count: r.uint(11)?,
        last_fired_ms: r.opt_uint(12)?,
        backoff_factor: r.int(13)? as u32,
        unread_fires: r.int(14)? as u32,
        output_docs: r.opt_text(15)?,
        output_read: r.flag(16)?,
        pending: ScheduleRow::pending_from(r.opt_text(17)?.as_deref()),
        cadence: r.opt_text(18)?,
    })
}

/// A ledger row: `bucket, window_start_ms` and then `LedgerDelta::COLUMNS`.
pub(crate) fn ledger_row<C: Columns>(r: &C) -> Result<LedgerRow, C::Error> {
    let bucket = match r.text(0)?.as_str() {
        "scheduled" => Bucket::Scheduled,
        _ => Bucket::Session,
    };
    let mut v = [0u64; LedgerDelta::COLUMNS.len()];
    for (i, x) in v.iter_mut().enumerate() {
        *x = r.uint(i + 2)?;
    }
    Ok(LedgerRow {
        bucket,
        window_start_ms: r.uint(1)?,
        totals: LedgerDelta::from_values(v),
    })
}

/// The columns [`action_cost`] reads, in its order.
pub(crate) const ACTION_COST_COLUMNS: &str =
    "window_start_ms, piece, action, kind, pattern, cpu_us, wall_us, runs";

pub(crate) fn action_cost<C: Columns>(r: &C) -> Result<ActionCost, C::Error> {
    Ok(ActionCost {
        window_start_ms: r.uint(0)?,
        piece: r.text(1)?,
        action: r.text(2)?,
        kind: r.text(3)?,
        pattern: r.text(4)?,
        cpu_us: r.uint(5)?,
        wall_us: r.uint(6)?,
        runs: r.uint(7)?,
    })
}

/// The columns [`fire_record`] reads, in its order.
pub(crate) const FIRE_COLUMNS: &str = "piece, entry, fired_ms, event_id, period, due_ms, \
     missed_periods, outcome, settled_ms, duration_us, cpu_us, error, logs, commit_seq";

pub(crate) fn fire_record<C: Columns>(r: &C) -> Result<FireRecord, C::Error> {
    Ok(FireRecord {
        piece: r.text(0)?,
        entry: r.int(1)? as u32,
        fired_ms: r.uint(2)?,
        event_id: r.text(3)?,
        period: r.uint(4)?,
        due_ms: r.uint(5)?,
        missed_periods: r.uint(6)?,
        outcome: r.text(7)?,
        run: FireRun {
            settled_ms: r.opt_uint(8)?,
            duration_us: r.opt_uint(9)?,
            cpu_us: r.opt_uint(10)?,
            error: r.opt_text(11)?,
            logs: FireRun::logs_from(r.opt_text(12)?),
            commit_seq: r.opt_uint(13)?,
        },
    })
}

/// A stored event, from `event_id, stream, seq, payload, fired_by,
/// fired_at_ms` (a payload that is not JSON reads as null).
pub(crate) fn event_record<C: Columns>(r: &C) -> Result<EventRecord, C::Error> {
    Ok(EventRecord {
        event_id: r.text(0)?,
        stream: r.text(1)?,
        seq: r.uint(2)?,
        payload: serde_json::from_str(&r.text(3)?).unwrap_or(Value::Null),
        fired_by: r.text(4)?,
        fired_at_ms: r.uint(5)?,
    })
}

pub(crate) fn event_failure<C: Columns>(r: &C) -> Result<EventFailure, C::Error> {
    Ok(EventFailure {
        event_id: r.text(0)?,
        attempts: r.int(1)? as u32,
        last_error: r.text(2)?,
    })
}

/// The columns [`dead_letter`] reads, in its order.
pub(crate) const DEAD_LETTER_COLUMNS: &str =
    "event_id, stream, seq, payload, fired_by, attempts, error, dead_lettered_ms";

pub(crate) fn dead_letter<C: Columns>(r: &C) -> Result<DeadLetter, C::Error> {
    Ok(DeadLetter {
        event_id: r.text(0)?,
        stream: r.text(1)?,
        seq: r.uint(2)?,
        payload: serde_json::from_str(&r.text(3)?).unwrap_or(Value::Null),
        fired_by: r.text(4)?,
        attempts: r.int(5)? as u32,
        error: r.text(6)?,
        dead_lettered_ms: r.uint(7)?,
    })
}
