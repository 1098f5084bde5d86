//! The log's SQL, over a plain connection or a transaction: applying a
//! commit's document operations, appending events (idempotent by event id),
//! watermarks, undelivered events, document reads and the commit log.
//! `FileSpace` (`space.rs`) wraps these in its transactions.

use super::error::{SqlContext, StoreError, StoreResult};
use super::path::{display_path, set_at};
use super::records::{AppliedOp, CommitRecord, DocOp, DocRead, EventRecord, LoggedOp, NewEvent};
use rusqlite::{params, Connection, OptionalExtension, Transaction};
use serde_json::Value;
use std::path::Path;

pub(super) fn validate_name(what: &str, s: &str) -> StoreResult<()> {
    if s.is_empty() || s.chars().count() > 512 {
        return Err(StoreError::InvalidCommit(format!(
            "{what} must be 1 to 512 characters (got {})",
            s.chars().count()
        )));
    }
    Ok(())
}

/// What operation `idx` of a commit writes: the document after it, with
/// the texts both backends store. Pure but for `current`, which reads the
/// document's head as the commit's transaction sees it (a patch needs it).
pub(super) fn resolve_op(
    idx: usize,
    op: DocOp,
    current: impl FnOnce(&str) -> StoreResult<Option<Value>>,
) -> StoreResult<(AppliedOp, Option<String>, Option<String>)> {
    let kind = op.kind();
    let (doc_id, op_path, new_value) = match op {
        DocOp::Set { id, value } => (id, None, Some(value)),
        DocOp::Delete { id } => (id, None, None),
        DocOp::Patch { id, path: p, value } => {
            let current = current(&id)?;
            let patched =
                set_at(current.as_ref(), &p, value).map_err(|reason| StoreError::BadPath {
                    index: idx,
                    doc: id.clone(),
                    reason: format!("path {}: {reason}", display_path(&p)),
                })?;
            (id, Some(p), Some(patched))
        }
    };
    if doc_id.is_empty() {
        return Err(StoreError::InvalidCommit(format!(
            "operation {idx}: document id is empty"
        )));
    }
    let text = new_value.as_ref().map(|v| v.to_string());
    let path_text = op_path
        .as_ref()
        .map(|p| serde_json::to_string(p).unwrap_or_default());
    let applied = AppliedOp {
        doc_id,
        op: kind,
        path: op_path,
        doc_after: new_value,
    };
    Ok((applied, text, path_text))
}

/// Whether a stream's watermark may move from `wm` to `to_seq` with its
/// head at `head` (`None`: the stream has no events): forward only, never
/// past the head.
pub(super) fn check_watermark(
    stream: &str,
    head_wm: Option<(u64, u64)>,
    to_seq: u64,
) -> StoreResult<()> {
    let Some((head, wm)) = head_wm else {
        return Err(StoreError::InvalidCommit(format!(
            "watermark of stream {stream:?}: the stream has no events"
        )));
    };
    if to_seq > head {
        return Err(StoreError::InvalidCommit(format!(
            "watermark of stream {stream:?} cannot pass its head ({to_seq} > {head})"
        )));
    }
    if to_seq < wm {
        return Err(StoreError::InvalidCommit(format!(
            "watermark of stream {stream:?} cannot move backwards ({to_seq} < {wm})"
        )));
    }
    Ok(())
}

pub(super) fn apply_op(
    tx: &Transaction<'_>,
    path: &Path,
    seq: u64,
    idx: usize,
    op: DocOp,
) -> StoreResult<AppliedOp> {
    let (applied, text, path_text) =
        resolve_op(idx, op, |id| Ok(read_doc(tx, path, id)?.map(|d| d.value)))?;
    let (doc_id, kind) = (&applied.doc_id, applied.op);
    // The log records what was written: the patch's own value is implied by
    // the document after it, so the log keeps the full new value.
    tx.prepare_cached(
        "INSERT INTO commit_ops (seq, idx, doc_id, op, path, value) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )
    .at(path)?
    .execute(params![seq as i64, idx as i64, doc_id, kind, path_text, text])
    .at(path)?;
    tx.prepare_cached(
        "INSERT INTO docs (id, value, seq, rev) VALUES (?1, ?2, ?3, 1) \
         ON CONFLICT (id) DO UPDATE SET value = excluded.value, seq = excluded.seq, rev = rev + 1",
    )
    .at(path)?
    .execute(params![doc_id, text, seq as i64])
    .at(path)?;
    Ok(applied)
}

pub(super) fn append_event(
    tx: &Transaction<'_>,
    path: &Path,
    seq: u64,
    now_ms: u64,
    e: NewEvent,
) -> StoreResult<EventRecord> {
    tx.prepare_cached(
        "INSERT INTO events (event_id, stream, seq, payload, fired_by, fired_at_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )
    .at(path)?
    .execute(params![
        e.event_id,
        e.stream,
        seq as i64,
        e.payload.to_string(),
        e.fired_by,
        now_ms as i64
    ])
    .at(path)?;
    tx.prepare_cached(
        "INSERT INTO streams (stream, head_seq, watermark_seq) VALUES (?1, ?2, 0) \
         ON CONFLICT (stream) DO UPDATE SET head_seq = excluded.head_seq",
    )
    .at(path)?
    .execute(params![e.stream, seq as i64])
    .at(path)?;
    Ok(e.appended(seq, now_ms))
}

/// Test injection (`StoreConfig::refuse_delivering`): whether this
/// transaction, with its watermarks already moved, consumes `event_id`
/// without dead-lettering it.
pub(super) fn delivers(tx: &Transaction<'_>, path: &Path, event_id: &str) -> StoreResult<bool> {
    tx.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM events e JOIN streams s ON s.stream = e.stream \
         WHERE e.event_id = ?1 AND s.watermark_seq >= e.seq \
         AND NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.event_id = e.event_id))",
    )
    .at(path)?
    .query_row([event_id], |r| r.get(0))
    .at(path)
}

pub(super) fn advance_watermark(
    tx: &Transaction<'_>,
    path: &Path,
    stream: &str,
    to_seq: u64,
) -> StoreResult<()> {
    // One statement when the move is allowed (forward, never past the
    // head): every statement a wake runs is compiled afresh on its new
    // connection. The stream is read only to explain a refusal.
    let moved = tx
        .prepare_cached(
            "UPDATE streams SET watermark_seq = ?2 \
             WHERE stream = ?1 AND head_seq >= ?2 AND watermark_seq <= ?2",
        )
        .at(path)?
        .execute(params![stream, to_seq as i64])
        .at(path)?;
    if moved == 1 {
        return Ok(());
    }
    let row: Option<(i64, i64)> = tx
        .prepare_cached("SELECT head_seq, watermark_seq FROM streams WHERE stream = ?1")
        .at(path)?
        .query_row([stream], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
        .at(path)?;
    check_watermark(stream, row.map(|(h, w)| (h as u64, w as u64)), to_seq)
}

/// The oldest `limit` undelivered events, in (seq, eventId) order: per
/// stream past its watermark, merged. Two single-table queries instead of
/// a join: a space file is opened for every wake, so every statement is
/// compiled afresh, and the join's planning cost more than running both.
pub(super) fn undelivered_events(
    conn: &Connection,
    path: &Path,
    limit: usize,
) -> StoreResult<Vec<EventRecord>> {
    let behind: Vec<(String, i64)> = conn
        .prepare_cached(STREAMS_BEHIND)
        .at(path)?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .at(path)?
        .collect::<Result<_, _>>()
        .at(path)?;
    let mut out = Vec::new();
    for (stream, watermark) in behind {
        let mut st = conn
            .prepare_cached(
                "SELECT event_id, stream, seq, payload, fired_by, fired_at_ms FROM events \
                 WHERE stream = ?1 AND seq > ?2 ORDER BY seq, event_id LIMIT ?3",
            )
            .at(path)?;
        let rows = st
            .query_map(params![stream, watermark, limit as i64], event_from_row)
            .at(path)?;
        for row in rows {
            out.push(row.at(path)?);
        }
    }
    out.sort_by(|a, b| (a.seq, &a.event_id).cmp(&(b.seq, &b.event_id)));
    out.truncate(limit);
    Ok(out)
}

/// Whether any stream has events past its watermark. The same statement
/// as [`undelivered_events`]'s first, so a fresh connection compiles one
/// statement for both (the streams behind are few).
pub(super) fn has_undelivered(conn: &Connection, path: &Path) -> StoreResult<bool> {
    conn.prepare_cached(STREAMS_BEHIND)
        .at(path)?
        .exists([])
        .at(path)
}

const STREAMS_BEHIND: &str =
    "SELECT stream, watermark_seq FROM streams WHERE head_seq > watermark_seq";

pub(super) fn read_doc(conn: &Connection, path: &Path, id: &str) -> StoreResult<Option<DocRead>> {
    let row: Option<(Option<String>, i64, i64)> = conn
        .prepare_cached("SELECT value, seq, rev FROM docs WHERE id = ?1")
        .at(path)?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()
        .at(path)?;
    match row {
        Some((Some(text), seq, rev)) => {
            let value = serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
                path: path.to_path_buf(),
                reason: format!("document {id:?} holds invalid JSON: {e}"),
            })?;
            Ok(Some(DocRead {
                value,
                seq: seq as u64,
                rev: rev as u64,
            }))
        }
        _ => Ok(None),
    }
}

pub(super) fn event_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<EventRecord> {
    super::rows::event_record(r)
}

pub(super) fn commits_since(
    conn: &Connection,
    path: &Path,
    after_seq: u64,
    limit: usize,
) -> StoreResult<Vec<CommitRecord>> {
    let mut st = conn
        .prepare_cached(
            "SELECT seq, class, principal, session, at_ms FROM commits WHERE seq > ?1 \
             ORDER BY seq LIMIT ?2",
        )
        .at(path)?;
    let mut commits = st
        .query_map(params![after_seq as i64, limit as i64], |r| {
            Ok(CommitRecord {
                seq: r.get::<_, i64>(0)? as u64,
                class: r.get(1)?,
                principal: r.get(2)?,
                session: r.get(3)?,
                at_ms: r.get::<_, i64>(4)? as u64,
                ops: Vec::new(),
            })
        })
        .at(path)?
        .collect::<Result<Vec<_>, _>>()
        .at(path)?;
    let mut ops = conn
        .prepare_cached(
            "SELECT doc_id, op, path, value FROM commit_ops WHERE seq = ?1 ORDER BY idx",
        )
        .at(path)?;
    for c in &mut commits {
        c.ops = ops
            .query_map([c.seq as i64], |r| {
                let p: Option<String> = r.get(2)?;
                let v: Option<String> = r.get(3)?;
                Ok(LoggedOp {
                    doc_id: r.get(0)?,
                    op: r.get(1)?,
                    path: p.and_then(|s| serde_json::from_str(&s).ok()),
                    value: v.and_then(|s| serde_json::from_str(&s).ok()),
                })
            })
            .at(path)?
            .collect::<Result<Vec<_>, _>>()
            .at(path)?;
    }
    Ok(commits)
}
