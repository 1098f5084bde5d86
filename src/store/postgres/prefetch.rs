//! Reads a space handle takes ahead, in one statement, because on the
//! database each read is a round trip and a tenure's start asks for many
//! small ones in a row: its documents (at most [`PREFETCH_DOCS`]), and at
//! the start of a tenure its action states, event failures, size,
//! undelivered events and schedule ([`TenureReads`]).
//!
//! A read taken ahead is what the database held a moment earlier, as any
//! read outside a transaction is. Each part of [`TenureReads`] answers one
//! read only, but for the schedule, which answers every read (whole or one
//! piece's rows) within the same second; any write through the handle
//! forgets them all (the handle's tenure is the only writer while it holds
//! the lease).

use super::pool::Db;
use crate::store::dead_letters::EventFailure;
use crate::store::error::{PgContext, StoreError, StoreResult};
use crate::store::plane::ScheduleRow;
use crate::store::records::EventRecord;
use crate::store::rows::{self, Columns, JsonCols, SCHEDULE_COLUMNS};
use serde_json::Value;
use std::collections::HashMap;

/// The space's documents as read at once (see the module's doc).
pub(super) enum Prefetch {
    /// Every document of the space: id → (value text, seq, rev).
    Few(HashMap<String, PrefetchedDoc>),
    /// More than [`PREFETCH_DOCS`]: each is read on its own.
    Many,
}

/// A prefetched document's row: its value's text (none once deleted), seq
/// and rev.
pub(super) type PrefetchedDoc = (Option<String>, i64, i64);

/// The most documents a handle reads at once.
pub(super) const PREFETCH_DOCS: i64 = 32;

impl Prefetch {
    fn from_rows(rows: impl ExactSizeIterator<Item = (String, PrefetchedDoc)>) -> Prefetch {
        if rows.len() as i64 > PREFETCH_DOCS {
            Prefetch::Many
        } else {
            Prefetch::Few(rows.collect())
        }
    }

    /// The documents alone, in one statement.
    pub(super) fn read(db: &mut Db<'_, postgres::Client>, space: &str) -> StoreResult<Prefetch> {
        let rows = db
            .query(
                "SELECT id, value, seq, rev FROM docs WHERE space = $1 ORDER BY id LIMIT $2",
                &[&space, &(PREFETCH_DOCS + 1)],
            )
            .doing("reading the space's documents")?;
        Ok(Prefetch::from_rows(
            rows.iter()
                .map(|r| (r.get(0), (r.get(1), r.get(2), r.get(3)))),
        ))
    }
}

/// What a tenure reads as it starts, each answering one read (see the
/// module's doc). The runtime's start reads the action states and event
/// failures, the host measures the space for its quota, the first wave
/// reads the undelivered events and the server the schedule.
#[derive(Debug, Default)]
pub(super) struct TenureReads {
    pub action_states: Option<Vec<(String, String)>>,
    pub event_failures: Option<Vec<EventFailure>>,
    pub bytes_used: Option<u64>,
    /// The oldest undelivered events, at most the limit asked for; `true`
    /// when that was all of them.
    pub undelivered: Option<(Vec<EventRecord>, bool)>,
    /// Every entry, by piece and entry.
    pub schedule: Option<Vec<ScheduleRow>>,
    /// The schedule answers one read only (read when the handle was
    /// opened, before any lease: see [`schedule_ahead_sql`]).
    pub schedule_once: bool,
}

/// The space's schedule as one JSON text, `$1` the space: read beside
/// another statement's row (`PgStore::open`'s, a tenure's start).
pub(super) fn schedule_ahead_sql() -> &'static str {
    // Built once: every open sends it.
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| schedule_of_sql("$1"))
}

/// [`schedule_ahead_sql`] of the space `space` (an SQL expression: the
/// claim reads it for each space it claims).
pub(super) fn schedule_of_sql(space: &str) -> String {
    format!(
        "(SELECT json_agg(json_build_array({SCHEDULE_COLUMNS}) ORDER BY piece, entry) \
           FROM schedule_index WHERE space = {space})::text"
    )
}

/// What [`schedule_ahead_sql`] read, as rows.
pub(super) fn schedule_from_json(
    space: &str,
    text: Option<String>,
) -> StoreResult<Vec<ScheduleRow>> {
    let bad = |reason: String| StoreError::Corrupt {
        path: format!("postgres: space {space}").into(),
        reason: format!("reading the schedule ahead: {reason}"),
    };
    schedule_rows(json_rows(text, &bad)?, &bad)
}

/// Schedule rows read as JSON arrays, in `SCHEDULE_COLUMNS` order.
fn schedule_rows(
    rows: Vec<Vec<Value>>,
    bad: &dyn Fn(String) -> StoreError,
) -> StoreResult<Vec<ScheduleRow>> {
    rows.iter()
        .map(|r| rows::schedule_row(&JsonCols(r)).map_err(bad))
        .collect()
}

/// A `json_agg` of `json_build_array` rows, as rows of values (`None`: no
/// rows).
fn json_rows(
    text: Option<String>,
    bad: &dyn Fn(String) -> StoreError,
) -> StoreResult<Vec<Vec<Value>>> {
    let Some(text) = text else {
        return Ok(Vec::new());
    };
    match serde_json::from_str(&text) {
        Ok(v) => value_rows(v, bad),
        Err(e) => Err(bad(e.to_string())),
    }
}

/// [`json_rows`] of a value already parsed (`null`: no rows).
fn value_rows(v: Value, bad: &dyn Fn(String) -> StoreError) -> StoreResult<Vec<Vec<Value>>> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Array(rows) => rows
            .into_iter()
            .map(|r| match r {
                Value::Array(cols) => Ok(cols),
                _ => Err(bad("a row is not an array".into())),
            })
            .collect(),
        _ => Err(bad("not an array of rows".into())),
    }
}

impl TenureReads {
    /// The undelivered events for a read of at most `limit`, when what was
    /// taken ahead answers it.
    pub(super) fn undelivered(&mut self, limit: usize) -> Option<Vec<EventRecord>> {
        let (mut events, all) = self.undelivered.take()?;
        if !all && limit > events.len() {
            return None;
        }
        events.truncate(limit);
        Some(events)
    }
}

/// Everything a tenure's start reads, in one statement (`spacewake_start`,
/// migration 19): the parts as JSON arrays of rows, mapped by the rows
/// module's mappers ([`start_from_json`]).
pub(super) fn read_tenure(
    db: &mut Db<'_, postgres::Client>,
    space: &str,
    events: usize,
) -> StoreResult<(Prefetch, TenureReads)> {
    let (docs, limit) = start_limits(events);
    let text: String = db
        .query_one(
            "SELECT spacewake_start($1, $2, $3)::text",
            &[&space, &docs, &limit],
        )
        .doing("reading what a tenure starts with")?
        .get(0);
    let start = serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
        path: format!("postgres: space {space}").into(),
        reason: format!("reading what a tenure starts with: {e}"),
    })?;
    start_from_json(space, start, events)
}

/// How many documents and undelivered events `spacewake_start` reads for a
/// start whose first wave reads at most `events`: one more of each, to
/// tell "all of them" from "more than that".
pub(super) fn start_limits(events: usize) -> (i64, i64) {
    (PREFETCH_DOCS + 1, events as i64 + 1)
}

/// What `spacewake_start` returned (read on its own, or by the transaction
/// before the tenure: `spacewake_tx`'s `start`), as the handle's reads.
pub(super) fn start_from_json(
    space: &str,
    start: Value,
    events: usize,
) -> StoreResult<(Prefetch, TenureReads)> {
    let bad = |reason: String| StoreError::Corrupt {
        path: format!("postgres: space {space}").into(),
        reason: format!("reading what a tenure starts with: {reason}"),
    };
    let Value::Array(mut parts) = start else {
        return Err(bad("not an array of parts".into()));
    };
    if parts.len() != 6 {
        return Err(bad(format!("{} parts, not 6", parts.len())));
    }
    let bytes_used = parts[3].as_i64().unwrap_or(0).max(0) as u64;
    let mut part = |i: usize| value_rows(std::mem::take(&mut parts[i]), &bad);
    let action_states = part(0)?
        .iter()
        .map(|r| {
            let c = JsonCols(r);
            Ok((c.text(0).map_err(bad)?, c.text(1).map_err(bad)?))
        })
        .collect::<StoreResult<_>>()?;
    let event_failures = part(1)?
        .iter()
        .map(|r| rows::event_failure(&JsonCols(r)).map_err(bad))
        .collect::<StoreResult<_>>()?;
    let docs = part(2)?
        .iter()
        .map(|r| {
            let c = JsonCols(r);
            Ok((
                c.text(0).map_err(bad)?,
                (
                    c.opt_text(1).map_err(bad)?,
                    c.int(2).map_err(bad)?,
                    c.int(3).map_err(bad)?,
                ),
            ))
        })
        .collect::<StoreResult<Vec<_>>>()?;
    let mut undelivered: Vec<EventRecord> = part(4)?
        .iter()
        .map(|r| rows::event_record(&JsonCols(r)).map_err(bad))
        .collect::<StoreResult<_>>()?;
    let all = undelivered.len() <= events;
    undelivered.truncate(events);
    let schedule = schedule_rows(part(5)?, &bad)?;
    Ok((
        Prefetch::from_rows(docs.into_iter()),
        TenureReads {
            action_states: Some(action_states),
            event_failures: Some(event_failures),
            bytes_used: Some(bytes_used),
            undelivered: Some((undelivered, all)),
            schedule: Some(schedule),
            schedule_once: false,
        },
    ))
}
