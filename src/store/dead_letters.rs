//! Events that failed their tenure, and the dead letters they become: the
//! rows behind "no event can wedge a space" (`spec/serving-loop.md`,
//! *Dead letters*). The store keeps the rows; when to retry and when to give
//! up is the runtime's decision.

use super::error::{SqlContext, StoreResult};
use super::plane::PlaneTx;
use super::records::EventRecord;
use rusqlite::params;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::Path;

/// An undelivered event whose waves failed their tenure `attempts` times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventFailure {
    pub event_id: String,
    pub attempts: u32,
    pub last_error: String,
}

/// An event consumed without delivery after its retries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetter {
    pub event_id: String,
    pub stream: String,
    pub seq: u64,
    pub payload: Value,
    pub fired_by: String,
    pub attempts: u32,
    pub error: String,
    pub dead_lettered_ms: u64,
}

pub(crate) fn event_failures(
    conn: &rusqlite::Connection,
    path: &Path,
) -> StoreResult<Vec<EventFailure>> {
    let mut st = conn
        .prepare_cached("SELECT event_id, attempts, last_error FROM event_failures")
        .at(path)?;
    let rows = st
        .query_map([], |r| {
            Ok(EventFailure {
                event_id: r.get(0)?,
                attempts: r.get(1)?,
                last_error: r.get(2)?,
            })
        })
        .at(path)?;
    rows.collect::<Result<_, _>>().at(path)
}

pub(crate) fn dead_letters(
    conn: &rusqlite::Connection,
    path: &Path,
) -> StoreResult<Vec<DeadLetter>> {
    let mut st = conn
        .prepare_cached(
            "SELECT event_id, stream, seq, payload, fired_by, attempts, error, dead_lettered_ms \
             FROM dead_letters ORDER BY seq",
        )
        .at(path)?;
    let rows = st
        .query_map([], |r| {
            let payload: String = r.get(3)?;
            Ok(DeadLetter {
                event_id: r.get(0)?,
                stream: r.get(1)?,
                seq: r.get::<_, i64>(2)? as u64,
                payload: serde_json::from_str(&payload).unwrap_or(Value::Null),
                fired_by: r.get(4)?,
                attempts: r.get(5)?,
                error: r.get(6)?,
                dead_lettered_ms: r.get::<_, i64>(7)? as u64,
            })
        })
        .at(path)?;
    rows.collect::<Result<_, _>>().at(path)
}

impl PlaneTx<'_> {
    /// One more failed wave for event `event_id` (of `stream`, appended by
    /// commit `seq`), with its error. Returns its attempts so far.
    pub fn note_event_failure(
        &mut self,
        event_id: &str,
        stream: &str,
        seq: u64,
        error: &str,
        now_ms: u64,
    ) -> StoreResult<u32> {
        self.tx
            .prepare_cached(
                "INSERT INTO event_failures (event_id, stream, seq, attempts, last_error, last_ms) \
                 VALUES (?1, ?2, ?3, 1, ?4, ?5) ON CONFLICT (event_id) DO UPDATE SET \
                 attempts = attempts + 1, last_error = excluded.last_error, \
                 last_ms = excluded.last_ms RETURNING attempts",
            )
            .at(self.path)?
            .query_row(
                params![event_id, stream, seq as i64, error, now_ms as i64],
                |r| r.get(0),
            )
            .at(self.path)
    }

    /// Forgets the failures of an event that was delivered after all.
    pub fn clear_event_failure(&mut self, event_id: &str) -> StoreResult<()> {
        self.tx
            .prepare_cached("DELETE FROM event_failures WHERE event_id = ?1")
            .at(self.path)?
            .execute([event_id])
            .at(self.path)?;
        Ok(())
    }

    /// Records `ev` as dead-lettered (in the transaction that moves its
    /// watermark past it) and forgets its failures.
    pub fn dead_letter(
        &mut self,
        ev: &EventRecord,
        attempts: u32,
        error: &str,
        now_ms: u64,
    ) -> StoreResult<()> {
        self.tx
            .prepare_cached(
                "INSERT OR REPLACE INTO dead_letters (event_id, stream, seq, payload, fired_by, \
                 attempts, error, dead_lettered_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .at(self.path)?
            .execute(params![
                ev.event_id,
                ev.stream,
                ev.seq as i64,
                ev.payload.to_string(),
                ev.fired_by,
                attempts,
                error,
                now_ms as i64
            ])
            .at(self.path)?;
        self.clear_event_failure(&ev.event_id)
    }
}
