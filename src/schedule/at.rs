//! One-off wakes from a piece's own state: `{ at: <field>, callback }`.
//!
//! The declaration is static — a link to a field of the piece's state (its
//! argument or a cell it owns) — and the time is data: a handler sets the
//! field, moves it or clears it, and the index follows it inside the very
//! transaction of the commit that changes it.
//!
//! # The row
//! An `at` entry keeps one row like any entry. Its `cadence` text says
//! which field it follows and what that field last held:
//! `{"at": {"doc", "path"}, "via": [docs], "setFor": ms | null}` (`via`:
//! the documents the field's value was reached through when it is itself a
//! link). While a time is held and not yet fired, `nominal_period` is that
//! time (the occurrence is named by the time it was set for) and
//! `next_due_ms` is it too, or the moment it was set if that was later; `declared_at_ms` is when that time was taken up, so each
//! arming has a wake id of its own. Once fired, the row waits (`NEVER_MS`)
//! until the field holds a different time; an empty or unreadable field
//! disarms it.
//!
//! # Following the field without a query
//! Every commit of a wave writes cells, so the hook must tell cheaply
//! whether a commit touched a followed field. It keeps [`Watches`] in the
//! space handle's memo (`store::HookMemo`): loaded once per handle (by the
//! first firing, which reads every row anyway, or else by one listing), and
//! kept in step by every write of an `at` row made through here. A commit
//! whose documents no watch names costs a hash lookup per operation; one
//! that rewrites a followed document without changing the time costs a
//! comparison; only a new time reads and writes the row.

use super::entry::NEVER_MS;
use crate::store::path::{get_at, parse_path, PathSeg};
use crate::store::{CommitView, DeclaredRow, PlaneTx, ScheduleRow};
use serde_json::{json, Value};
use std::collections::HashSet;

/// At most this many one-off entries of a space hold a time at once; an
/// arming past it is refused (counted, the row stays empty) so no space can
/// make the waker's work grow without bound.
pub const MAX_HELD_PER_SPACE: usize = 256;

/// Links followed from the declared field before giving up (a cycle).
const MAX_HOPS: usize = 8;

/// The last instant a field may hold: 9999-12-31T23:59:59.999Z.
const MAX_TIME_MS: u64 = 253_402_300_799_999;

/// The memo slot's name (the index hook's).
const MEMO: &str = super::index::HOOK_NAME;

/// The field an entry follows, as the stored result links it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldLink {
    pub doc: String,
    pub path: Vec<PathSeg>,
}

impl FieldLink {
    /// Reads `{"$link": {"doc", "path"}}` (any other keys of the link, such
    /// as `asCell`, are flags that do not change where it points).
    pub fn of_link(v: &Value) -> Option<FieldLink> {
        let o = v.as_object()?;
        if o.len() != 1 {
            return None;
        }
        Self::from_json(o.get("$link")?)
    }

    fn to_json(&self) -> Value {
        json!({ "doc": self.doc, "path": self.path })
    }

    /// `{"doc", "path"}` (a missing path is the whole document).
    fn from_json(v: &Value) -> Option<FieldLink> {
        Some(FieldLink {
            doc: v.get("doc")?.as_str()?.to_string(),
            path: match v.get("path") {
                None => Vec::new(),
                Some(p) => parse_path(p).ok()?,
            },
        })
    }

    /// `doc` and its path as one readable string (`pc-1/argument.remindAt`).
    pub fn describe(&self) -> String {
        let mut s = self.doc.clone();
        for seg in &self.path {
            match seg {
                PathSeg::Key(k) => {
                    s.push('.');
                    s.push_str(k);
                }
                PathSeg::Index(i) => s.push_str(&format!("[{i}]")),
            }
        }
        s
    }
}

/// Why a field cannot be followed as the piece's own state, if it cannot:
/// it must lie in one of the piece's documents and not be its result.
pub fn not_own_state(piece: &str, field: &FieldLink) -> Option<String> {
    let own = field
        .doc
        .strip_prefix(piece)
        .is_some_and(|rest| rest.starts_with('/'));
    (!own).then(|| {
        format!(
            "its at field {} is not in the piece's own state (its argument or a cell it owns)",
            field.describe()
        )
    })
}

/// What an `at` row remembers (its `cadence` text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AtState {
    pub field: FieldLink,
    /// Documents the value was reached through after `field.doc`.
    pub via: Vec<String>,
    /// The time the field held when last read (`None`: empty or unreadable).
    pub set_for: Option<u64>,
}

impl AtState {
    pub fn encode(&self) -> String {
        json!({ "at": self.field.to_json(), "via": self.via, "setFor": self.set_for }).to_string()
    }

    /// `None` unless `text` is an `at` cadence.
    pub fn decode(text: &str) -> Option<AtState> {
        let v: Value = serde_json::from_str(text).ok()?;
        let field = FieldLink::from_json(v.get("at")?)?;
        let via = match v.get("via") {
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(|d| d.as_str().map(String::from))
                .collect(),
            _ => Vec::new(),
        };
        let set_for = v.get("setFor").and_then(Value::as_u64);
        Some(AtState {
            field,
            via,
            set_for,
        })
    }

    /// Every document whose change may change the time.
    fn docs(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.field.doc.as_str()).chain(self.via.iter().map(String::as_str))
    }
}

/// Whether a stored cadence follows `field` (the declaration is unchanged).
pub fn follows(stored: Option<&str>, field: &FieldLink) -> bool {
    stored
        .and_then(AtState::decode)
        .is_some_and(|s| &s.field == field)
}

/// What a field holds, read as a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reading {
    /// Epoch milliseconds.
    Time(u64),
    /// Nothing (absent, `null`, `""`): the entry is disarmed.
    Empty,
    /// Something that is not a time: disarmed, and counted.
    Unreadable(String),
}

/// Reads a field's value: epoch milliseconds, or an ISO-8601 time with an
/// offset (`2026-12-04T09:00:00+01:00`, `…Z`); a time before 1970 is
/// simply past.
pub fn read_time(v: Option<&Value>) -> Reading {
    match v {
        None | Some(Value::Null) => Reading::Empty,
        Some(Value::Number(n)) => match n.as_f64() {
            Some(f) if f.is_finite() && f <= MAX_TIME_MS as f64 => Reading::Time(f.max(0.0) as u64),
            _ => Reading::Unreadable(format!("{n} is not a time before the year 10000")),
        },
        Some(Value::String(s)) if s.trim().is_empty() => Reading::Empty,
        Some(Value::String(s)) => parse_iso(s.trim()),
        Some(other) => Reading::Unreadable(format!(
            "{} is not a time (epoch milliseconds or an ISO-8601 string with an offset)",
            crate::human::truncate_message(&other.to_string(), 60)
        )),
    }
}

fn parse_iso(s: &str) -> Reading {
    let parsed = chrono::DateTime::parse_from_rfc3339(s)
        .or_else(|_| chrono::DateTime::parse_from_str(s, "%Y-%m-%dT%H:%M%:z"))
        .or_else(|_| chrono::DateTime::parse_from_str(s, "%Y-%m-%dT%H:%MZ"));
    match parsed {
        Ok(t) => {
            let ms = t.timestamp_millis();
            if ms > MAX_TIME_MS as i64 {
                Reading::Unreadable(format!("{s:?} is after the year 9999"))
            } else {
                Reading::Time(ms.max(0) as u64)
            }
        }
        Err(_) => Reading::Unreadable(format!(
            "{s:?} is not an ISO-8601 time with an offset (like 2026-12-04T09:00:00+01:00)"
        )),
    }
}

/// Follows `field` through the links stored on the way, reading documents
/// with `read`: the value found (`None`: nothing there) and the documents
/// passed through after the first.
pub fn resolve(
    field: &FieldLink,
    read: &mut dyn FnMut(&str) -> Result<Option<Value>, String>,
) -> Result<(Option<Value>, Vec<String>), String> {
    let mut via = Vec::new();
    let mut doc = field.doc.clone();
    let mut path = field.path.clone();
    'hop: for _ in 0..=MAX_HOPS {
        let root = read(&doc)?;
        let mut cur = root.as_ref();
        for (i, seg) in path.iter().enumerate() {
            if let Some(next) = cur.and_then(FieldLink::of_link) {
                let mut rest = next.path.clone();
                rest.extend_from_slice(&path[i..]);
                (doc, path) = (next.doc, rest);
                via.push(doc.clone());
                continue 'hop;
            }
            cur = cur.and_then(|v| get_at(v, std::slice::from_ref(seg)));
        }
        if let Some(next) = cur.and_then(FieldLink::of_link) {
            (doc, path) = (next.doc, next.path);
            via.push(doc.clone());
            continue;
        }
        return Ok((cur.cloned(), via));
    }
    Err(format!(
        "its at field {} leads through more than {MAX_HOPS} links",
        field.describe()
    ))
}

/// The watches of one space handle: every `at` row's state, and the
/// documents any of them follows.
#[derive(Debug, Default)]
pub struct Watches {
    rows: Vec<(String, u32, AtState)>,
    docs: HashSet<String>,
}

impl Watches {
    fn from_cadences<'r>(rows: impl Iterator<Item = (&'r str, u32, Option<&'r str>)>) -> Self {
        let mut w = Watches::default();
        for (piece, entry, cadence) in rows {
            if let Some(state) = cadence.and_then(AtState::decode) {
                w.rows.push((piece.to_string(), entry, state));
            }
        }
        w.index();
        w
    }

    fn index(&mut self) {
        self.docs = self
            .rows
            .iter()
            .flat_map(|(_, _, s)| s.docs().map(String::from))
            .collect();
    }

    /// The entries following any of `docs`.
    fn following(&self, docs: &HashSet<&str>) -> Vec<(String, u32)> {
        self.rows
            .iter()
            .filter(|(_, _, s)| s.docs().any(|d| docs.contains(d)))
            .map(|(p, e, _)| (p.clone(), *e))
            .collect()
    }

    fn state(&self, piece: &str, entry: u32) -> Option<&AtState> {
        self.rows
            .iter()
            .find(|(p, e, _)| p == piece && *e == entry)
            .map(|(_, _, s)| s)
    }

    /// How many entries hold a time, `except` one.
    fn held(&self, except: (&str, u32)) -> usize {
        self.rows
            .iter()
            .filter(|(p, e, s)| s.set_for.is_some() && (p.as_str(), *e) != except)
            .count()
    }

    fn set(&mut self, piece: &str, entry: u32, state: Option<AtState>) {
        self.rows.retain(|(p, e, _)| !(p == piece && *e == entry));
        if let Some(s) = state {
            self.rows.push((piece.to_string(), entry, s));
        }
        self.index();
    }

    fn drop_piece(&mut self, piece: &str, from_entry: u32) {
        self.rows
            .retain(|(p, e, _)| !(p == piece && *e >= from_entry));
        self.index();
    }
}

/// Seeds the handle's watches from rows read in full (the firing reads
/// every row of the space anyway, so a wake's wave needs no listing).
pub fn remember(plane: &mut PlaneTx<'_>, rows: &[ScheduleRow]) {
    let w = Watches::from_cadences(
        rows.iter()
            .map(|r| (r.piece.as_str(), r.entry, r.cadence.as_deref())),
    );
    plane.memo().put(MEMO, w);
}

/// The handle's watches, listed once if nothing seeded them yet.
fn watches<'p>(plane: &'p mut PlaneTx<'_>) -> Result<&'p mut Watches, String> {
    if plane.memo().get_mut::<Watches>(MEMO).is_none() {
        let rows: Vec<DeclaredRow> = plane.declared(None).map_err(|e| e.to_string())?;
        let w = Watches::from_cadences(
            rows.iter()
                .map(|r| (r.piece.as_str(), r.entry, r.cadence.as_deref())),
        );
        plane.memo().put(MEMO, w);
    }
    Ok(plane
        .memo()
        .get_mut::<Watches>(MEMO)
        .expect("just remembered"))
}

/// Keeps the watches (when loaded) in step with a piece's rows being
/// deleted from `from_entry` on.
pub fn forget(plane: &mut PlaneTx<'_>, piece: &str, from_entry: u32) {
    if let Some(w) = plane.memo().get_mut::<Watches>(MEMO) {
        w.drop_piece(piece, from_entry);
    }
}

/// Keeps the watches (when loaded) in step with one entry's row being
/// deleted or replaced by another shape.
pub fn forget_entry(plane: &mut PlaneTx<'_>, piece: &str, entry: u32) {
    if let Some(w) = plane.memo().get_mut::<Watches>(MEMO) {
        w.set(piece, entry, None);
    }
}

/// The entries whose field this commit may have changed: any operation on
/// a document a watch follows. No query unless the handle has no watches
/// loaded yet and the commit wrote a piece's state.
pub fn touched(
    commit: &CommitView<'_>,
    plane: &mut PlaneTx<'_>,
) -> Result<Vec<(String, u32)>, String> {
    if !commit.ops.iter().any(|op| op.doc_id.contains('/')) {
        return Ok(Vec::new());
    }
    let w = watches(plane)?;
    if w.rows.is_empty() {
        return Ok(Vec::new());
    }
    let docs: HashSet<&str> = commit
        .ops
        .iter()
        .map(|op| op.doc_id.as_str())
        .filter(|d| w.docs.contains(*d))
        .collect();
    if docs.is_empty() {
        return Ok(Vec::new());
    }
    Ok(w.following(&docs))
}

/// A document's value after this commit: its last operation's result, or
/// what the transaction sees.
fn read_after(
    commit: &CommitView<'_>,
    plane: &mut PlaneTx<'_>,
    doc: &str,
) -> Result<Option<Value>, String> {
    match commit.ops.iter().rev().find(|op| op.doc_id == doc) {
        Some(op) => Ok(op.doc_after.clone()),
        None => plane.doc(doc).map_err(|e| e.to_string()),
    }
}

/// What following `field` finds now: the time (if any), why not, and the
/// documents passed through.
fn look(
    commit: &CommitView<'_>,
    plane: &mut PlaneTx<'_>,
    field: &FieldLink,
) -> (Reading, Vec<String>) {
    let mut read = |doc: &str| read_after(commit, plane, doc);
    match resolve(field, &mut read) {
        Ok((v, via)) => (read_time(v.as_ref()), via),
        Err(why) => (Reading::Unreadable(why), Vec::new()),
    }
}

/// What arming a row decided, for counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Armed,
    Cleared,
    Refused,
    Unreadable,
    Unchanged,
}

/// Applies a reading to an `at` row and its state (pure; the caller writes
/// the state into the row's cadence): a new time arms it, anchored at
/// `now_ms`; nothing disarms it; the same time leaves it as it is (fired or
/// not). `room` says whether the space may hold one more time.
pub fn apply(
    row: &mut ScheduleRow,
    state: &mut AtState,
    reading: &Reading,
    room: bool,
    now_ms: u64,
) -> Change {
    let (time, change) = match reading {
        Reading::Time(t) if state.set_for == Some(*t) => return Change::Unchanged,
        Reading::Time(_) if !room => (None, Change::Refused),
        Reading::Time(t) => (Some(*t), Change::Armed),
        Reading::Empty => (None, Change::Cleared),
        Reading::Unreadable(_) => (None, Change::Unreadable),
    };
    if time.is_none() && state.set_for.is_none() && row.next_due_ms >= NEVER_MS {
        return match change {
            Change::Cleared => Change::Unchanged,
            other => other,
        };
    }
    state.set_for = time;
    match time {
        Some(t) => {
            row.declared_at_ms = now_ms;
            row.nominal_period = t;
            // A time already past is due now, when it was set: it fires
            // at once and is not late (not a catch-up).
            row.next_due_ms = t.max(now_ms);
            if row.status == crate::store::ScheduleStatus::Dead {
                // A new time is a new occurrence: the dead one stays dead.
                row.status = crate::store::ScheduleStatus::Active;
            }
        }
        None => {
            row.nominal_period = 0;
            row.next_due_ms = NEVER_MS;
        }
    }
    change
}

/// Writes a newly declared `at` entry's row: it follows `field` and holds
/// whatever time the field holds now.
pub fn declare(
    commit: &CommitView<'_>,
    plane: &mut PlaneTx<'_>,
    piece: &str,
    entry: u32,
    field: &FieldLink,
    callback_stream: &str,
) -> Result<(), String> {
    let mut row = ScheduleRow::new(piece, entry, 0, callback_stream, commit.at_ms, NEVER_MS);
    row.nominal_period = 0;
    let mut state = AtState {
        field: field.clone(),
        via: Vec::new(),
        set_for: None,
    };
    let found = look(commit, plane, field);
    settle(commit, plane, &mut row, &mut state, found, true)
}

/// Re-reads the field of an entry this commit may have changed.
pub fn follow(
    commit: &CommitView<'_>,
    plane: &mut PlaneTx<'_>,
    piece: &str,
    entry: u32,
) -> Result<(), String> {
    let Some(mut state) = watches(plane)?.state(piece, entry).cloned() else {
        return Ok(());
    };
    let (reading, via) = look(commit, plane, &state.field);
    let same = match reading {
        Reading::Time(t) => state.set_for == Some(t),
        Reading::Empty | Reading::Unreadable(_) => state.set_for.is_none(),
    };
    if same && via == state.via {
        return Ok(()); // the common rewrite: another field of the document
    }
    let rows = plane.schedule(Some(piece)).map_err(|e| e.to_string())?;
    let Some(mut row) = rows.into_iter().find(|r| r.entry == entry) else {
        watches(plane)?.set(piece, entry, None);
        return Ok(());
    };
    if let Some(stored) = row.cadence.as_deref().and_then(AtState::decode) {
        state = stored;
    }
    settle(commit, plane, &mut row, &mut state, (reading, via), false)
}

/// Applies what the field was found to hold to `row`, writes the row if it changed (or
/// is `fresh`) and keeps the watches in step.
fn settle(
    commit: &CommitView<'_>,
    plane: &mut PlaneTx<'_>,
    row: &mut ScheduleRow,
    state: &mut AtState,
    (reading, via): (Reading, Vec<String>),
    fresh: bool,
) -> Result<(), String> {
    let moved_via = via != state.via;
    state.via = via;
    let room = match reading {
        Reading::Time(_) => watches(plane)?.held((&row.piece, row.entry)) < MAX_HELD_PER_SPACE,
        _ => true,
    };
    let change = apply(row, state, &reading, room, commit.at_ms);
    let counter = match change {
        Change::Armed => Some(crate::metrics::Counter::ScheduleOneOffArmed),
        Change::Cleared => Some(crate::metrics::Counter::ScheduleOneOffCleared),
        Change::Refused => Some(crate::metrics::Counter::ScheduleOneOffRefused),
        Change::Unreadable => Some(crate::metrics::Counter::ScheduleOneOffUnreadable),
        Change::Unchanged => None,
    };
    if let Some(c) = counter {
        commit.counters.inc(c);
    }
    match (&change, &reading) {
        (Change::Refused, _) => tracing::warn!(
            space = commit.space,
            piece = %row.piece,
            entry = row.entry,
            "a one-off wake was not armed: the space already holds {MAX_HELD_PER_SPACE} one-off times"
        ),
        (Change::Unreadable, Reading::Unreadable(why)) => tracing::warn!(
            space = commit.space,
            piece = %row.piece,
            entry = row.entry,
            why,
            "a one-off wake's field does not hold a time; the entry is disarmed"
        ),
        _ => {}
    }
    if fresh || change != Change::Unchanged || moved_via {
        row.cadence = Some(state.encode());
        super::entry::save(plane, row).map_err(|e| e.to_string())?;
    }
    watches(plane)?.set(&row.piece, row.entry, Some(state.clone()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field() -> FieldLink {
        FieldLink {
            doc: "pc-1/argument".into(),
            path: vec![PathSeg::Key("remindAt".into())],
        }
    }

    #[test]
    fn a_field_holds_epoch_milliseconds_or_an_iso_time_with_an_offset() {
        assert_eq!(
            read_time(Some(&json!(1_700_000_000_000u64))),
            Reading::Time(1_700_000_000_000)
        );
        assert_eq!(
            read_time(Some(&json!(1.5e12))),
            Reading::Time(1_500_000_000_000)
        );
        assert_eq!(
            read_time(Some(&json!("2026-12-04T09:00:00+01:00"))),
            Reading::Time(1_796_371_200_000)
        );
        assert_eq!(
            read_time(Some(&json!("2026-12-04T08:00:00Z"))),
            Reading::Time(1_796_371_200_000)
        );
        assert_eq!(
            read_time(Some(&json!("2026-12-04T09:00+01:00"))),
            Reading::Time(1_796_371_200_000)
        );
        assert_eq!(
            read_time(Some(&json!(-5))),
            Reading::Time(0),
            "before 1970 is past"
        );
        for empty in [None, Some(json!(null)), Some(json!("")), Some(json!("  "))] {
            assert_eq!(read_time(empty.as_ref()), Reading::Empty, "{empty:?}");
        }
        for bad in [
            json!("2026-12-04T09:00:00"),
            json!("tomorrow"),
            json!(true),
            json!({"t": 1}),
            json!(1e300),
        ] {
            assert!(
                matches!(read_time(Some(&bad)), Reading::Unreadable(_)),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_field_is_followed_through_the_links_stored_on_its_way() {
        let docs = std::collections::HashMap::from([
            (
                "pc-1/argument",
                json!({"remindAt": {"$link": {"doc": "pc-0/c2", "path": ["when"], "asCell": true}}}),
            ),
            (
                "pc-0/c2",
                json!({"when": {"$link": {"doc": "pc-0/c3", "path": []}}}),
            ),
            ("pc-0/c3", json!(42)),
        ]);
        let mut read = |d: &str| Ok(docs.get(d).cloned());
        let (v, via) = resolve(&field(), &mut read).unwrap();
        assert_eq!(v, Some(json!(42)));
        assert_eq!(via, ["pc-0/c2", "pc-0/c3"]);
        // A cycle is refused, not followed forever.
        let cyclic = std::collections::HashMap::from([(
            "pc-1/argument",
            json!({"remindAt": {"$link": {"doc": "pc-1/argument", "path": ["remindAt"]}}}),
        )]);
        let mut read = |d: &str| Ok(cyclic.get(d).cloned());
        assert!(resolve(&field(), &mut read).unwrap_err().contains("links"));
        // A missing document or key is simply nothing.
        let mut read = |_: &str| Ok(None);
        assert_eq!(resolve(&field(), &mut read).unwrap(), (None, vec![]));
    }

    fn row() -> (ScheduleRow, AtState) {
        let state = AtState {
            field: field(),
            via: vec![],
            set_for: None,
        };
        let mut r = ScheduleRow::new("pc-1", 0, 0, "pc-1/s0", 0, NEVER_MS);
        r.cadence = Some(state.encode());
        (r, state)
    }

    #[test]
    fn a_new_time_arms_the_same_time_stays_put_and_nothing_disarms() {
        let (mut r, mut s) = row();
        assert_eq!(
            apply(&mut r, &mut s, &Reading::Empty, true, 5),
            Change::Unchanged
        );
        assert_eq!(
            apply(&mut r, &mut s, &Reading::Time(1_000), true, 10),
            Change::Armed
        );
        assert_eq!(
            (r.next_due_ms, r.nominal_period, r.declared_at_ms),
            (1_000, 1_000, 10)
        );
        assert_eq!(s.set_for, Some(1_000));
        // Fired: the row waits; the same time does not arm it again.
        r.next_due_ms = NEVER_MS;
        assert_eq!(
            apply(&mut r, &mut s, &Reading::Time(1_000), true, 20),
            Change::Unchanged
        );
        assert_eq!(r.next_due_ms, NEVER_MS);
        // A different time does, with an anchor (and so a wake id) of its own.
        assert_eq!(
            apply(&mut r, &mut s, &Reading::Time(500), true, 30),
            Change::Armed
        );
        assert_eq!((r.next_due_ms, r.declared_at_ms), (500, 30));
        assert_eq!(
            apply(&mut r, &mut s, &Reading::Empty, true, 40),
            Change::Cleared
        );
        assert_eq!((r.next_due_ms, s.set_for), (NEVER_MS, None));
        assert_eq!(
            apply(&mut r, &mut s, &Reading::Unreadable("x".into()), true, 50),
            Change::Unreadable
        );
        assert_eq!(
            apply(&mut r, &mut s, &Reading::Time(700), false, 60),
            Change::Refused
        );
        assert_eq!(r.next_due_ms, NEVER_MS, "no room: not armed");
        // A time already past is due when it is set.
        assert_eq!(
            apply(&mut r, &mut s, &Reading::Time(5), true, 70),
            Change::Armed
        );
        assert_eq!((r.nominal_period, r.next_due_ms), (5, 70));
    }

    #[test]
    fn watches_name_the_entries_following_a_document() {
        let (r, mut s) = row();
        s.via = vec!["pc-0/c2".into()];
        s.set_for = Some(1_000);
        let text = s.encode();
        assert_eq!(
            AtState::decode(&text),
            Some(s.clone()),
            "the cadence round-trips"
        );
        let w = Watches::from_cadences(
            [("pc-1", 0, Some(text.as_str())), ("pc-2", 1, None)].into_iter(),
        );
        let docs: HashSet<&str> = ["pc-0/c2"].into();
        assert_eq!(w.following(&docs), [("pc-1".to_string(), 0)]);
        assert!(w.following(&["pc-1/c0"].into()).is_empty());
        assert_eq!(w.held(("x", 0)), 1, "one entry holds a time");
        assert_eq!(w.held(("pc-1", 0)), 0, "not counting itself");
        assert!(follows(r.cadence.as_deref(), &field()));
        assert!(!follows(None, &field()));
        assert_eq!(not_own_state("pc-1", &field()), None);
        assert!(not_own_state("pc-2", &field()).is_some());
        assert!(not_own_state(
            "pc-1",
            &FieldLink {
                doc: "pc-1".into(),
                path: vec![]
            }
        )
        .is_some());
    }
}
