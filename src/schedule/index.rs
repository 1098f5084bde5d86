//! The schedule index hook: keeps `schedule_index` in step with the
//! `[SCHEDULE]` declarations on piece result documents, inside the very
//! transaction of the commit that writes them.
//!
//! # What it does per commit
//! For every piece result document the commit may have changed the
//! declaration of, it reads the document's final value in this commit and
//! reconciles the piece's rows with it:
//! - an entry whose shape (`intervalMinutes`, or `cron` and `timeZone`) and
//!   callback stream are unchanged keeps
//!   its row untouched (re-committing an unchanged declaration does not
//!   move it, nor reset its status, attempts or counters);
//! - a new or changed entry gets a fresh row anchored at the commit's time,
//!   first due one interval plus jitter later ([`grid::first_due`]);
//! - rows at positions the declaration no longer has, or whose entry is now
//!   malformed, are deleted; a deleted document, or one without a
//!   `$SCHEDULE` array, loses all its rows.
//!
//! And for every one-off (`at`) entry whose field lies in a document the
//! commit wrote, it reads the field again and arms, moves or disarms the
//! row (`at.rs`).
//!
//! # Invariants
//! - Rows commit with the commit or not at all (the store runs hooks inside
//!   the commit's transaction and rolls back on any error).
//! - Never panics on document contents: malformed entries are skipped (see
//!   [`parse_declaration`]); the compiler has already rejected them
//!   statically, so this is defence against hand-written documents.
//! - Only top-level documents (ids without `/`) are piece results; cells,
//!   node outputs, arguments, programs and `space/pieces` never declare.
//!
//! # Cost on commits that carry no schedule
//! The common commit (a wave writing cells `PIECE/cK`, node outputs
//! `PIECE/nK`, watermarks) touches no piece result and costs one pass over
//! the operations with no SQL, and a hash lookup per operation in the
//! handle's one-off watches (listed once per handle unless the firing
//! seeded them). A patch inside a result
//! document that does not address `$SCHEDULE` cannot change the
//! declaration and is skipped the same way. Only a whole-document `set` or
//! `delete` of a result (or a patch at `$SCHEDULE`) costs a lookup of that
//! piece's rows — needed to notice a dropped declaration. A commit touching
//! many results (provisioning a herd) reads the space's rows once instead
//! (see `BULK_LOOKUP_PIECES`).

use super::at::FieldLink;
use super::cron::CronSpec;
use super::grid;
use super::jitter::{Jitter, JitterMode};
use crate::store::{AppliedOp, CommitView, DeclaredRow, IndexHook, PathSeg, PlaneTx, ScheduleRow};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

/// The hook's name in store errors and counters.
pub const HOOK_NAME: &str = "schedule_index";

/// The reserved key, as spelled on a stored result.
pub const SCHEDULE_KEY: &str = "$SCHEDULE";

/// At most this many entries per piece are indexed (the declaration's
/// limit); anything past it is ignored, so no document can make the index
/// grow without bound.
pub const MAX_ENTRIES: usize = 4;

/// Accepted interval range in minutes, inclusive: one hour to 31 days.
pub const INTERVAL_MINUTES: std::ops::RangeInclusive<u64> = 60..=44_640;

/// Stream ids longer than this cannot be appended to (the store's limit on
/// names), so an entry naming one could never fire: it is not indexed.
const MAX_STREAM_LEN: usize = 512;

/// One well-formed entry of a declaration.
#[derive(Debug, Clone, PartialEq)]
pub struct DeclaredEntry {
    /// 0 for a calendar entry.
    pub interval_minutes: u32,
    /// A calendar entry's expression and zone.
    pub cron: Option<CronSpec>,
    /// A one-off entry's field (`at`).
    pub at: Option<FieldLink>,
    pub callback_stream: String,
}

impl DeclaredEntry {
    /// The row's `cadence` text for an interval or calendar entry (`None`:
    /// an interval). A one-off entry's text holds its state too (`at.rs`).
    pub fn cadence(&self) -> Option<String> {
        self.cron.as_ref().map(super::cadence::encode_cron)
    }

    /// Whether `row` already indexes this entry as declared (its state,
    /// for an interval or calendar entry its whole history, is kept).
    fn indexed_by(&self, row: &DeclaredRow) -> bool {
        let shape = match &self.at {
            Some(field) => super::at::follows(row.cadence.as_deref(), field),
            None => row.interval_minutes == self.interval_minutes && row.cadence == self.cadence(),
        };
        shape && row.callback_stream == self.callback_stream
    }
}

/// Whether a document id names a piece result (a top-level document).
pub fn is_piece_result_id(id: &str) -> bool {
    !id.is_empty() && !id.contains('/')
}

/// Reads the `$SCHEDULE` declaration of piece `piece`'s result document.
///
/// `None` when the document declares nothing (not an object, no
/// `$SCHEDULE`, or `$SCHEDULE` not an array). Otherwise one slot per
/// position (at most [`MAX_ENTRIES`]): `Some` for a well-formed entry — an
/// object with an integer `intervalMinutes` in [`INTERVAL_MINUTES`], a
/// readable `cron` (and `timeZone`), or an `at` linking a field of the
/// piece's own state, and a `callback` of the form `{"$stream": id}` — and
/// `None` for a malformed one, which is not indexed.
pub fn parse_declaration(piece: &str, doc: &Value) -> Option<Vec<Option<DeclaredEntry>>> {
    let list = doc.as_object()?.get(SCHEDULE_KEY)?.as_array()?;
    Some(
        list.iter()
            .take(MAX_ENTRIES)
            .map(|v| check_entry(piece, v).ok())
            .collect(),
    )
}

/// The entries of a result's declaration that can never fire, by position,
/// each with why. Nothing the compiler accepts and a deploy stores has any
/// (a deploy refuses them); a piece made before that rule may.
pub fn declaration_problems(piece: &str, doc: &Value) -> Vec<(u32, String)> {
    let Some(list) = doc
        .as_object()
        .and_then(|o| o.get(SCHEDULE_KEY))
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    list.iter()
        .take(MAX_ENTRIES)
        .enumerate()
        .filter_map(|(i, v)| check_entry(piece, v).err().map(|why| (i as u32, why)))
        .collect()
}

fn check_entry(piece: &str, v: &Value) -> Result<DeclaredEntry, String> {
    let o = v.as_object().ok_or("the entry is not an object")?;
    let mut at = None;
    if let Some(link) = o.get("at") {
        if ["intervalMinutes", "cron", "timeZone"]
            .iter()
            .any(|k| o.contains_key(*k))
        {
            return Err("it has at beside intervalMinutes, cron or timeZone".into());
        }
        let field = FieldLink::of_link(link)
            .ok_or("its at is not a link to a field of the piece's state")?;
        if let Some(why) = super::at::not_own_state(piece, &field) {
            return Err(why);
        }
        at = Some(field);
    }
    let (minutes, cron) = match (o.get("intervalMinutes"), o.get("cron")) {
        _ if at.is_some() => (0, None),
        (Some(_), Some(_)) => return Err("it has both intervalMinutes and cron".into()),
        (None, Some(expr)) => {
            let expr = expr.as_str().ok_or("its cron is not a string")?;
            let zone = match o.get("timeZone") {
                None => None,
                Some(z) => Some(z.as_str().ok_or("its timeZone is not a string")?),
            };
            let spec = CronSpec::parse(expr, zone).map_err(|p| p.message)?;
            (0, Some(spec))
        }
        (m, None) => {
            if o.contains_key("timeZone") {
                return Err("it has a timeZone but no cron".into());
            }
            let minutes = m
                .and_then(Value::as_u64)
                .filter(|m| INTERVAL_MINUTES.contains(m))
                .ok_or_else(|| {
                    format!(
                        "intervalMinutes is not a whole number of minutes in {}..={}",
                        INTERVAL_MINUTES.start(),
                        INTERVAL_MINUTES.end()
                    )
                })?;
            (minutes, None)
        }
    };
    let stream = o
        .get("callback")
        .and_then(Value::as_object)
        .and_then(|c| c.get("$stream"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or(
            "its callback is not a stream (a handler not bound to its state; bind it: \
             `sweep({ … })`)",
        )?;
    if stream.len() > MAX_STREAM_LEN {
        return Err(format!(
            "its callback's stream id is longer than {MAX_STREAM_LEN} bytes"
        ));
    }
    Ok(DeclaredEntry {
        interval_minutes: minutes as u32,
        cron,
        at,
        callback_stream: stream.to_string(),
    })
}

/// Whether `op` can have changed the declaration on a piece result.
fn may_change_declaration(op: &AppliedOp) -> bool {
    if !is_piece_result_id(&op.doc_id) {
        return false;
    }
    match op.path.as_deref() {
        // `set`, `delete`, or a patch replacing the whole document.
        None | Some([]) => true,
        Some([PathSeg::Key(k), ..]) => k == SCHEDULE_KEY,
        Some(_) => false,
    }
}

type Entropy = Box<dyn FnMut() -> u64 + Send>;

/// Maintains `schedule_index` from `[SCHEDULE]` declarations. Register it
/// once per store with [`crate::store::Store::add_hook`].
pub struct ScheduleIndexHook {
    jitter: Jitter,
    /// Consulted only in random mode, when a fresh row is planned.
    entropy: Mutex<Entropy>,
}

impl std::fmt::Debug for ScheduleIndexHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScheduleIndexHook")
            .field("jitter", &self.jitter)
            .finish_non_exhaustive()
    }
}

impl ScheduleIndexHook {
    /// A hook with the host's jitter; random mode draws OS-seeded entropy.
    pub fn new(jitter: Jitter) -> Self {
        Self::with_entropy(jitter, rand::random::<u64>)
    }

    /// A hook whose random-mode draws come from `entropy` (deterministic
    /// tests).
    pub fn with_entropy(jitter: Jitter, entropy: impl FnMut() -> u64 + Send + 'static) -> Self {
        ScheduleIndexHook {
            jitter,
            entropy: Mutex::new(Box::new(entropy)),
        }
    }

    pub fn jitter(&self) -> &Jitter {
        &self.jitter
    }

    /// The first occurrence of a newly declared entry: `(period, due)`.
    fn first_due(
        &self,
        space: &str,
        piece: &str,
        entry: u32,
        e: &DeclaredEntry,
        at_ms: u64,
    ) -> (u64, u64) {
        let minutes = e.interval_minutes;
        let mut keyed = || 0;
        let mut source;
        let mut entropy: &mut dyn FnMut() -> u64 = match self.jitter.mode {
            JitterMode::Keyed => &mut keyed,
            JitterMode::Random => {
                source = self.entropy.lock().unwrap_or_else(|p| p.into_inner());
                &mut *source
            }
        };
        match &e.cron {
            None => (
                1,
                grid::first_due(
                    space,
                    piece,
                    entry,
                    minutes,
                    at_ms,
                    &self.jitter,
                    &mut entropy,
                ),
            ),
            Some(spec) => super::cron::first_due(
                spec,
                (space, piece, entry),
                at_ms,
                &self.jitter,
                &mut entropy,
            ),
        }
    }

    /// Brings `piece`'s rows (`existing`) in line with `doc_after` (its
    /// value after this commit; `None` = deleted).
    fn reconcile(
        &self,
        commit: &CommitView<'_>,
        plane: &mut PlaneTx<'_>,
        piece: &str,
        doc_after: Option<&Value>,
        existing: &[DeclaredRow],
    ) -> Result<(), String> {
        let declared = doc_after
            .and_then(|d| parse_declaration(piece, d))
            .unwrap_or_default();
        if declared.iter().all(Option::is_none) {
            if !existing.is_empty() {
                plane
                    .delete_schedule(piece, None)
                    .map_err(|e| e.to_string())?;
                super::at::forget(plane, piece, 0);
            }
            return Ok(());
        }
        for (position, slot) in declared.iter().enumerate() {
            let entry = position as u32;
            let old = existing.iter().find(|r| r.entry == entry);
            match (slot, old) {
                (Some(e), Some(r)) if e.indexed_by(r) => {}
                (
                    Some(
                        e @ DeclaredEntry {
                            at: Some(field), ..
                        },
                    ),
                    _,
                ) => {
                    super::at::declare(commit, plane, piece, entry, field, &e.callback_stream)?;
                }
                (Some(e), _) => {
                    let (period, due) = self.first_due(commit.space, piece, entry, e, commit.at_ms);
                    let mut row = ScheduleRow::new(
                        piece,
                        entry,
                        e.interval_minutes,
                        &e.callback_stream,
                        commit.at_ms,
                        due,
                    );
                    row.nominal_period = period;
                    row.cadence = e.cadence();
                    super::entry::save(plane, &mut row).map_err(|e| e.to_string())?;
                    if old.is_some() {
                        super::at::forget_entry(plane, piece, entry);
                    }
                }
                (None, Some(_)) => {
                    plane
                        .delete_schedule(piece, Some(entry))
                        .map_err(|e| e.to_string())?;
                    super::at::forget_entry(plane, piece, entry);
                }
                (None, None) => {}
            }
        }
        for r in existing
            .iter()
            .filter(|r| r.entry as usize >= declared.len())
        {
            plane
                .delete_schedule(piece, Some(r.entry))
                .map_err(|e| e.to_string())?;
        }
        super::at::forget(plane, piece, declared.len() as u32);
        Ok(())
    }
}

/// Above this many pieces in one commit, existing rows are read with one
/// listing of the space instead of one lookup per piece. `PlaneTx::schedule`
/// with a piece currently scans the table (its `?1 IS NULL OR piece = ?1`
/// filter defeats the primary key), so k lookups cost k scans; one listing
/// costs one. Below the threshold the per-piece form is kept, because it
/// becomes an O(log n) primary-key probe once that query is split.
const BULK_LOOKUP_PIECES: usize = 8;

impl IndexHook for ScheduleIndexHook {
    fn name(&self) -> &'static str {
        HOOK_NAME
    }

    fn on_commit(&self, commit: &CommitView<'_>, plane: &mut PlaneTx<'_>) -> Result<(), String> {
        // Pass 1 (no allocation unless a result's declaration may change):
        // which pieces need reconciling.
        let mut pending: HashSet<&str> = HashSet::new();
        for op in commit.ops.iter().filter(|op| may_change_declaration(op)) {
            pending.insert(&op.doc_id);
        }
        // One-off entries whose field lies in a document this commit wrote.
        let followed = super::at::touched(commit, plane)?;
        if pending.is_empty() && followed.is_empty() {
            return Ok(());
        }
        self.reconcile_results(commit, plane, pending)?;
        for (piece, entry) in &followed {
            super::at::follow(commit, plane, piece, *entry)?;
        }
        Ok(())
    }
}

impl ScheduleIndexHook {
    /// Reconciles each result document in `pending` with its rows.
    fn reconcile_results(
        &self,
        commit: &CommitView<'_>,
        plane: &mut PlaneTx<'_>,
        mut pending: HashSet<&str>,
    ) -> Result<(), String> {
        if pending.is_empty() {
            return Ok(());
        }
        let mut bulk: Option<HashMap<String, Vec<DeclaredRow>>> = None;
        if pending.len() > BULK_LOOKUP_PIECES {
            let mut by_piece: HashMap<String, Vec<DeclaredRow>> = HashMap::new();
            for r in plane.declared(None).map_err(|e| e.to_string())? {
                if pending.contains(r.piece.as_str()) {
                    by_piece.entry(r.piece.clone()).or_default().push(r);
                }
            }
            bulk = Some(by_piece);
        }
        // Pass 2: each such piece once, with its value after the commit's
        // last operation on it (a later patch elsewhere in the document
        // still carries the declaration an earlier `set` wrote).
        for op in commit.ops.iter().rev() {
            if !pending.remove(op.doc_id.as_str()) {
                continue;
            }
            let piece = op.doc_id.as_str();
            let existing = match bulk.as_mut() {
                Some(by_piece) => by_piece.remove(piece).unwrap_or_default(),
                None => plane.declared(Some(piece)).map_err(|e| e.to_string())?,
            };
            self.reconcile(commit, plane, piece, op.doc_after.as_ref(), &existing)?;
            if pending.is_empty() {
                break;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn op(id: &str, path: Option<Vec<PathSeg>>, after: Option<Value>) -> AppliedOp {
        AppliedOp {
            doc_id: id.into(),
            op: if path.is_some() { "patch" } else { "set" },
            path,
            doc_after: after,
        }
    }

    #[test]
    fn a_well_formed_declaration_parses_in_order() {
        let doc = json!({"$SCHEDULE": [
            {"intervalMinutes": 120, "callback": {"$stream": "pc-1/s3"}},
            {"intervalMinutes": 60, "callback": {"$stream": "pc-1/s4"}},
        ]});
        let d = parse_declaration("pc-1", &doc).unwrap();
        assert_eq!(
            d,
            vec![
                Some(DeclaredEntry {
                    interval_minutes: 120,
                    cron: None,
                    at: None,
                    callback_stream: "pc-1/s3".into()
                }),
                Some(DeclaredEntry {
                    interval_minutes: 60,
                    cron: None,
                    at: None,
                    callback_stream: "pc-1/s4".into()
                }),
            ]
        );
    }

    #[test]
    fn a_calendar_entry_parses_and_a_bad_one_says_why() {
        let cb = json!({"$stream": "pc-1/s0"});
        let doc = json!({"$SCHEDULE": [
            {"cron": "30 7 * * 1-5", "timeZone": "Europe/Berlin", "callback": cb},
            {"cron": "0 9 * * FRI", "callback": cb},
        ]});
        let d = parse_declaration("pc-1", &doc).unwrap();
        let e = d[0].as_ref().unwrap();
        assert_eq!(e.interval_minutes, 0);
        assert_eq!(
            e.cadence().as_deref(),
            Some(r#"{"cron":"30 7 * * 1-5","timeZone":"Europe/Berlin"}"#)
        );
        assert_eq!(d[1].as_ref().unwrap().cron.as_ref().unwrap().zone(), "UTC");
        let bad = json!({"$SCHEDULE": [
            {"cron": "*/5 * * * *", "callback": cb},
            {"cron": "0 9 * * *", "timeZone": "Mars/Olympus", "callback": cb},
            {"cron": "0 9 * * *", "intervalMinutes": 60, "callback": cb},
            {"intervalMinutes": 60, "timeZone": "UTC", "callback": cb},
        ]});
        let why: Vec<String> = declaration_problems("pc-1", &bad)
            .into_iter()
            .map(|(_, w)| w)
            .collect();
        assert_eq!(why.len(), 4, "{why:?}");
        assert!(
            why[0].contains("minutes apart") || why[0].contains("60"),
            "{why:?}"
        );
        assert!(why[1].contains("Mars/Olympus"), "{why:?}");
        assert!(why[2].contains("both"), "{why:?}");
        assert!(why[3].contains("no cron"), "{why:?}");
    }

    #[test]
    fn documents_without_a_schedule_array_declare_nothing() {
        for doc in [
            json!(null),
            json!([1, 2]),
            json!({"value": 1}),
            json!({"$SCHEDULE": {"intervalMinutes": 60}}),
            json!({"$SCHEDULE": "hourly"}),
        ] {
            assert_eq!(parse_declaration("pc-1", &doc), None, "{doc}");
        }
    }

    #[test]
    fn malformed_entries_keep_their_position_but_are_not_indexed() {
        let cb = json!({"$stream": "pc-1/s0"});
        let long = "x".repeat(513);
        let doc = json!({"$SCHEDULE": [
            {"intervalMinutes": 59, "callback": cb},
            {"intervalMinutes": 44_641, "callback": cb},
            {"intervalMinutes": 60.5, "callback": cb},
            {"intervalMinutes": "60", "callback": cb},
        ]});
        assert_eq!(parse_declaration("pc-1", &doc).unwrap(), vec![None; 4]);
        let doc = json!({"$SCHEDULE": [
            {"intervalMinutes": -60, "callback": cb},
            {"intervalMinutes": 60, "callback": "pc-1/s0"},
            {"intervalMinutes": 60, "callback": {"$link": {"doc": "x", "path": []}}},
            {"intervalMinutes": 60, "callback": {"$stream": ""}},
        ]});
        assert_eq!(parse_declaration("pc-1", &doc).unwrap(), vec![None; 4]);
        let doc = json!({"$SCHEDULE": [
            7,
            {"intervalMinutes": 60, "callback": {"$stream": long}},
            {"callback": cb},
            {"intervalMinutes": 44_640, "callback": cb},
        ]});
        let d = parse_declaration("pc-1", &doc).unwrap();
        assert_eq!(&d[..3], &[None, None, None]);
        assert_eq!(d[3].as_ref().unwrap().interval_minutes, 44_640);
    }

    #[test]
    fn each_entry_that_can_never_fire_is_named_with_why() {
        let cb = json!({"$stream": "pc-1/s0"});
        let doc = json!({"$SCHEDULE": [
            {"intervalMinutes": 60, "callback": null},
            {"intervalMinutes": 60, "callback": cb},
            {"intervalMinutes": 59, "callback": cb},
            7,
        ]});
        let p = declaration_problems("pc-1", &doc);
        assert_eq!(p.iter().map(|(i, _)| *i).collect::<Vec<_>>(), [0, 2, 3]);
        assert!(p[0].1.contains("callback is not a stream"), "{p:?}");
        assert!(p[1].1.contains("60..=44640"), "{p:?}");
        assert!(p[2].1.contains("not an object"), "{p:?}");
        assert!(declaration_problems("pc-1", &json!({"a": 1})).is_empty());
    }

    #[test]
    fn entries_past_the_limit_are_ignored() {
        let e = json!({"intervalMinutes": 60, "callback": {"$stream": "s"}});
        let doc = json!({"$SCHEDULE": vec![e; 9]});
        assert_eq!(parse_declaration("pc-1", &doc).unwrap().len(), MAX_ENTRIES);
    }

    #[test]
    fn only_whole_writes_or_schedule_patches_of_results_are_considered() {
        let v = Some(json!({}));
        assert!(may_change_declaration(&op("pc-1", None, v.clone())));
        assert!(may_change_declaration(&op("pc-1", None, None)));
        assert!(may_change_declaration(&op("pc-1", Some(vec![]), v.clone())));
        let sched = vec![PathSeg::Key("$SCHEDULE".into()), PathSeg::Index(0)];
        assert!(may_change_declaration(&op("pc-1", Some(sched), v.clone())));
        let value = vec![PathSeg::Key("value".into())];
        assert!(!may_change_declaration(&op("pc-1", Some(value), v.clone())));
        assert!(!may_change_declaration(&op("pc-1/s3", None, v.clone())));
        assert!(!may_change_declaration(&op(
            "space/pieces",
            None,
            v.clone()
        )));
        assert!(!may_change_declaration(&op("", None, v)));
    }
}
