//! What an operator sees of a host and does to it, as data: the views and
//! actions behind the operator HTTP API (`http/operator.rs`), the CLI's
//! operator commands (through that API while a server runs, or on a data
//! directory directly when none does), and the console's JSON twins.
//!
//! Reads take a [`View`] (the store, the time, which spaces are active) and
//! open space files themselves: reads never conflict with a running space
//! (SQLite readers do not block its writer). Writes are functions of one
//! open [`Space`]: the host runs them on the space server's own handle
//! (`Host::operate`), so no second handle moves the host directory behind
//! the server's back; the CLI runs them on its own handle only while it
//! holds the data directory's lock (no server can be running).
//!
//! Every view type is `Serialize` and `Deserialize`: the CLI renders what
//! came over HTTP with the same code as what it read from the directory.

use crate::schedule::fire::FIRE_HISTORY;
use crate::schedule::EntryState;
use crate::schedule::{grid, index, ops};
use crate::store::{
    ActionCost, FireRecord, LedgerRow, ScheduleRow, ScheduleStatus, Space, SpaceEntry, Store,
    StoreError, WindowSpend,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{HashMap, HashSet};

/// Directory rows read per page while listing.
const PAGE: usize = 500;

/// The host's own operator key, in its data directory (mode 0600): whoever
/// can read the data directory may operate the host.
pub const HOST_KEY_FILE: &str = "host.key";

/// The host's key: loaded, or created (mode 0600) on the first serve.
pub fn host_key(data_dir: &std::path::Path) -> anyhow::Result<crate::protocol::Identity> {
    use anyhow::Context;
    let path = data_dir.join(HOST_KEY_FILE);
    crate::protocol::Identity::load_or_create(&path)
        .map(|(id, _)| id)
        .with_context(|| format!("the host key {}", path.display()))
}

/// Why an operator request cannot be done; mapped to HTTP and CLI errors
/// at the edges.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpError {
    #[error("there is no space {0:?}; `spacewake spaces` lists the spaces")]
    UnknownSpace(String),
    #[error("space {space:?} is quarantined ({reason}); it cannot be read or changed")]
    Quarantined { space: String, reason: String },
    #[error("space {space:?} has no piece {piece:?}")]
    UnknownPiece { space: String, piece: String },
    #[error("piece {0:?} declares no [SCHEDULE] entries")]
    NoSchedule(String),
    #[error("piece {piece:?} has no schedule entry {entry}; its entries are {} (numbered from 0 in declaration order)", list(.have))]
    UnknownEntry {
        piece: String,
        entry: u32,
        have: Vec<u32>,
    },
    #[error("space {space:?} has no recorded run of wake event {event:?} (only the newest fires of each entry are kept)")]
    UnknownRun { space: String, event: String },
    #[error("{0}")]
    BadRequest(String),
    #[error("space {0:?} already exists")]
    SpaceExists(String),
    #[error("{0}")]
    Internal(String),
}

fn list(have: &[u32]) -> String {
    have.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

impl From<StoreError> for OpError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::UnknownSpace(s) => OpError::UnknownSpace(s),
            StoreError::InvalidSpaceId { id, .. } => OpError::UnknownSpace(id),
            StoreError::SpaceExists(s) => OpError::SpaceExists(s),
            StoreError::Quarantined { space, reason, .. } => OpError::Quarantined { space, reason },
            other => OpError::Internal(other.to_string()),
        }
    }
}

pub type OpResult<T> = Result<T, OpError>;

/// What reads need besides the store.
pub struct View<'a> {
    pub store: &'a Store,
    pub now_ms: u64,
    /// Spaces with a running space server (none without a server).
    pub active: HashSet<String>,
    /// The ledger window (`--ledger-window-hours`).
    pub window_ms: u64,
    /// The host's default scheduled budget, when known (a running server
    /// knows its flag; the CLI on a bare directory does not).
    pub host_budget: Option<Limit>,
    /// The host's default effect knobs, when known (a server with a broker).
    pub host_effects: Option<crate::effects::budget::Limits>,
}

// ----- the host -----------------------------------------------------------------

/// Waves and events per second between two samples of the host's counters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Throughput {
    /// The later sample's time (the rate covers the interval before it).
    pub until_ms: u64,
    pub waves_per_s: f64,
    pub events_per_s: f64,
}

/// The host at a glance: the console's host page and its JSON twin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostView {
    pub registered: u64,
    pub active: u64,
    /// The host's default scheduled budget per ledger window.
    pub scheduled_budget: Limit,
    /// The host-wide counter blocks (as `servingLoop` has them, without
    /// the per-space ones).
    pub counters: serde_json::Map<String, serde_json::Value>,
    /// The last hour's throughput, oldest first.
    pub throughput: Vec<Throughput>,
    pub now_ms: u64,
}

/// What the host page shows, from `counters` (the host's counter blocks)
/// and the throughput samples the server keeps.
pub fn host_view(
    v: &View<'_>,
    counters: serde_json::Map<String, serde_json::Value>,
    throughput: Vec<Throughput>,
) -> OpResult<HostView> {
    Ok(HostView {
        registered: v.store.directory().count()?,
        active: v.active.len() as u64,
        scheduled_budget: v.host_budget.unwrap_or(Limit::Unlimited),
        counters,
        throughput,
        now_ms: v.now_ms,
    })
}

// ----- spaces -----------------------------------------------------------------

/// One space as an operator sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpaceView {
    pub id: String,
    pub owner: String,
    pub created_ms: u64,
    /// `active` (a space server runs it), `parked`, or `quarantined`.
    pub state: String,
    pub next_wake_ms: Option<u64>,
    pub undelivered: bool,
    pub quarantined: Option<String>,
    pub window_start_ms: u64,
    /// CPU spent this ledger window; `None` when it could not be read (a
    /// quarantined file, or one busy for longer than a listing waits).
    pub spend: Option<WindowSpend>,
}

/// A page of spaces, in id order; `next` continues after the last one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpacesPage {
    pub spaces: Vec<SpaceView>,
    pub next: Option<String>,
    pub registered: u64,
    pub active: u64,
    pub now_ms: u64,
}

fn space_view(v: &View<'_>, e: SpaceEntry) -> SpaceView {
    let window_start_ms = crate::accounting::window_start_ms(v.now_ms, v.window_ms);
    let spend = match e.quarantined {
        Some(_) => None,
        None => v.store.window_spend(&e.id, window_start_ms).ok(),
    };
    let state = if e.quarantined.is_some() {
        "quarantined"
    } else if v.active.contains(&e.id) {
        "active"
    } else {
        "parked"
    };
    SpaceView {
        state: state.into(),
        id: e.id,
        owner: e.owner,
        created_ms: e.created_ms,
        next_wake_ms: e.next_wake_ms,
        undelivered: e.undelivered,
        quarantined: e.quarantined,
        window_start_ms,
        spend,
    }
}

/// Up to `limit` spaces after `after`, in id order.
pub fn spaces(v: &View<'_>, after: Option<&str>, limit: usize) -> OpResult<SpacesPage> {
    let limit = limit.clamp(1, 1_000);
    let dir = v.store.directory();
    let rows = dir.list(after, limit)?;
    let next = (rows.len() == limit).then(|| rows[rows.len() - 1].id.clone());
    Ok(SpacesPage {
        spaces: rows.into_iter().map(|e| space_view(v, e)).collect(),
        next,
        registered: dir.count()?,
        active: v.active.len() as u64,
        now_ms: v.now_ms,
    })
}

/// One space.
pub fn space(v: &View<'_>, id: &str) -> OpResult<SpaceView> {
    let e = entry(v.store, id)?;
    Ok(space_view(v, e))
}

fn entry(store: &Store, id: &str) -> OpResult<SpaceEntry> {
    store
        .directory()
        .get(id)?
        .ok_or_else(|| OpError::UnknownSpace(id.to_string()))
}

/// A registered space whose file is not quarantined (one directory read),
/// or why not.
pub fn healthy(store: &Store, id: &str) -> OpResult<SpaceEntry> {
    let e = entry(store, id)?;
    match e.quarantined {
        Some(reason) => Err(OpError::Quarantined {
            space: id.to_string(),
            reason,
        }),
        None => Ok(e),
    }
}

/// Opens a registered, healthy space, or says why not.
pub fn open(store: &Store, id: &str) -> OpResult<Space> {
    healthy(store, id)?;
    Ok(store.open_space(id)?)
}

/// Creates a space owned by `owner` (an explicit create).
pub fn create_space(store: &Store, id: &str, owner: &str) -> OpResult<()> {
    crate::protocol::decode_did_key(owner)
        .map_err(|e| OpError::BadRequest(format!("the owner must be an ed25519 did:key ({e})")))?;
    crate::store::validate_space_id(id).map_err(|e| OpError::BadRequest(e.to_string()))?;
    Ok(store.create_space(id, owner)?)
}

/// Sets (`read`, `write`) or revokes (`none`) a principal's access.
pub fn grant(store: &Store, space: &str, did: &str, access: &str) -> OpResult<GrantView> {
    entry(store, space)?;
    crate::protocol::decode_did_key(did)
        .map_err(|e| OpError::BadRequest(format!("the did must be an ed25519 did:key ({e})")))?;
    let level = match access {
        "read" | "write" => Some(access),
        "none" => None,
        other => {
            return Err(OpError::BadRequest(format!(
                "access must be read, write or none (got {other:?})"
            )))
        }
    };
    store.directory().set_grant(space, did, level)?;
    Ok(GrantView {
        space: space.to_string(),
        did: did.to_string(),
        access: access.to_string(),
    })
}

/// A grant as set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GrantView {
    pub space: String,
    pub did: String,
    /// `read`, `write` or `none`.
    pub access: String,
}

// ----- pieces -----------------------------------------------------------------

/// One piece of a space.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PieceView {
    pub id: String,
    /// The pattern: its entry module and export (`counter.tsx#default`).
    pub pattern: String,
    /// The stored program's hash.
    pub program: String,
    /// Its `[NAME]`, when that is text (or a computed text already stored).
    pub name: Option<String>,
    /// When it was deployed (pieces deployed before this was recorded: `None`).
    pub created_ms: Option<u64>,
    pub schedule_entries: usize,
    /// Why the last activation set it aside (it could not load), if it did.
    pub set_aside: Option<String>,
}

/// A space's dead letters (oldest first) and the undelivered events
/// whose waves failed their tenure, with their attempts so far.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeadLettersView {
    pub space: String,
    pub dead_letters: Vec<crate::store::DeadLetter>,
    pub failing: Vec<FailingEventView>,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FailingEventView {
    pub event_id: String,
    pub attempts: u32,
    pub last_error: String,
    /// When a failed wake's next attempt fires (a wake's retries are
    /// planned 1, 5 and 30 minutes out; other events retry at the next
    /// wave).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_due_ms: Option<u64>,
}

pub fn dead_letters(store: &Store, id: &str) -> OpResult<DeadLettersView> {
    let mut sp = open(store, id)?;
    let mut failing: Vec<FailingEventView> = sp
        .event_failures()?
        .into_iter()
        .map(|f| FailingEventView {
            event_id: f.event_id,
            attempts: f.attempts,
            last_error: f.last_error,
            retry_due_ms: None,
        })
        .collect();
    // Wake occurrences whose callback failed and whose retry is planned:
    // their last error is on the fire that failed.
    for row in sp.schedule(None)? {
        let waiting: Vec<_> = row
            .pending
            .iter()
            .filter(|p| p.attempts > 0 && p.retry_due_ms.is_some())
            .collect();
        if waiting.is_empty() {
            continue;
        }
        let fires = sp.fires(&row.piece, row.entry, usize::MAX)?;
        for p in waiting {
            let last_error = fires
                .iter()
                .rev()
                .find(|f| {
                    crate::schedule::wake_id::occurrence_of(&f.event_id) == p.occurrence
                        && f.run.error.is_some()
                })
                .and_then(|f| f.run.error.clone())
                .unwrap_or_else(|| "(not recorded)".to_string());
            failing.push(FailingEventView {
                event_id: p.occurrence.clone(),
                attempts: p.attempts,
                last_error,
                retry_due_ms: p.retry_due_ms,
            });
        }
    }
    Ok(DeadLettersView {
        space: id.to_string(),
        dead_letters: sp.dead_letters()?,
        failing,
    })
}

/// What deleting a piece did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PieceDeleted {
    pub space: String,
    pub piece: String,
    /// Its wakes that were pending (undelivered, awaiting a retry or a
    /// trigger) and ended with it.
    pub ended_wakes: u64,
}

/// Deletes `piece` of `space` through `host` (an operator's tenure, which
/// becomes a full one: the runtime deletes it, in one commit with its
/// schedule entries leaving the index).
pub async fn delete_piece(
    host: &crate::host::Host,
    space: &str,
    piece: &str,
) -> Result<PieceDeleted, crate::host::HostError> {
    let ended_wakes = host
        .ask(
            space,
            crate::host::Trigger::Operator,
            crate::host::DeletePiece {
                piece: piece.to_string(),
            },
        )
        .await?;
    Ok(PieceDeleted {
        space: space.to_string(),
        piece: piece.to_string(),
        ended_wakes,
    })
}

/// The pieces of a space, in id order.
pub fn pieces(store: &Store, id: &str) -> OpResult<Vec<PieceView>> {
    let mut sp = open(store, id)?;
    let listed = sp
        .read(crate::runtime::PIECES_DOC)?
        .map(|d| d.value)
        .unwrap_or(Value::Null);
    let Some(map) = listed.as_object() else {
        return Ok(Vec::new());
    };
    let rows = sp.schedule(None)?;
    let set_aside = sp
        .read(crate::runtime::SET_ASIDE_DOC)?
        .map(|d| d.value)
        .unwrap_or(Value::Null);
    // Pieces of one pattern share its program document (all its sources):
    // read each once.
    let mut entries: std::collections::HashMap<String, String> = Default::default();
    let mut out = Vec::new();
    for (piece, info) in map {
        let program = info["program"].as_str().unwrap_or_default().to_string();
        let export = info["export"].as_str().unwrap_or("default");
        if !entries.contains_key(&program) {
            let entry = sp
                .read(&format!("program/{program}"))?
                .and_then(|d| d.value["entry"].as_str().map(str::to_string))
                .unwrap_or_else(|| "?".into());
            entries.insert(program.clone(), entry.trim_start_matches("./").to_string());
        }
        let entry = &entries[&program];
        out.push(PieceView {
            id: piece.clone(),
            pattern: format!("{entry}#{export}"),
            name: piece_name(&mut sp, piece)?,
            program,
            created_ms: info["createdMs"].as_u64(),
            schedule_entries: rows.iter().filter(|r| &r.piece == piece).count(),
            set_aside: set_aside[piece].as_str().map(str::to_string),
        });
    }
    Ok(out)
}

/// A piece's `$NAME`: text in its result, or the text at the one link it
/// holds (a computed name, once computed).
fn piece_name(sp: &mut Space, piece: &str) -> OpResult<Option<String>> {
    let Some(result) = sp.read(piece)? else {
        return Ok(None);
    };
    let name = &result.value["$NAME"];
    if let Some(s) = name.as_str() {
        return Ok(Some(s.to_string()));
    }
    if let Some(link) = crate::runtime::graph::as_link(name) {
        if let Some(v) = sp.read_path(&link.doc, &link.path)? {
            return Ok(v.as_str().map(str::to_string));
        }
    }
    Ok(None)
}

// ----- schedules --------------------------------------------------------------

/// One schedule entry, with where it lives and its effective interval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EntryView {
    pub space: String,
    /// The interval after back-off (`intervalMinutes × backoffFactor`; 0
    /// for a calendar entry).
    pub effective_interval_minutes: u64,
    /// A calendar entry's cron expression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// A calendar entry's IANA zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// A calendar entry's next due time on the wall clock of its zone
    /// (`2026-03-27 07:30 CET`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_due_local: Option<String>,
    /// A one-off entry's field (`pc-1/argument.remindAt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// The time a one-off entry's field holds (`None`: nothing; it fires
    /// once per time, so a fired time stays here until the field moves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_for_ms: Option<u64>,
    /// The most delivery attempts of a pending occurrence (0: none).
    pub attempts: u32,
    /// The earliest planned retry among the pending occurrences.
    pub retry_due_ms: Option<u64>,
    /// The newest wake event in flight.
    pub inflight_event: Option<String>,
    /// Its callback's name in the source (`const sweep = handler(...)`),
    /// when the piece recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback_name: Option<String>,
    #[serde(flatten)]
    pub row: ScheduleRow,
}

/// The source names of a space's handlers, by stream id, as its pieces
/// list recorded them at creation; for a piece made before names were
/// recorded, where each stream shows in its result.
pub fn handler_names(sp: &mut Space) -> OpResult<HashMap<String, String>> {
    let listed = sp
        .read(crate::runtime::PIECES_DOC)?
        .map(|d| d.value)
        .unwrap_or(Value::Null);
    let mut names = HashMap::new();
    for (piece, info) in listed.as_object().into_iter().flatten() {
        match info["handlers"].as_object() {
            Some(handlers) => {
                for (stream, name) in handlers {
                    if let Some(n) = name.as_str() {
                        names.insert(stream.clone(), n.to_string());
                    }
                }
            }
            None => {
                if let Some(result) = sp.read(piece)? {
                    names.extend(crate::runtime::graph::stream_paths(&result.value));
                }
            }
        }
    }
    Ok(names)
}

impl EntryView {
    pub fn new(space: &str, row: ScheduleRow) -> EntryView {
        use crate::schedule::cadence::Cadence;
        let (calendar, one_off) = match Cadence::of_row(&row) {
            Cadence::Cron(spec) => (Some(spec), None),
            Cadence::At(state) => (None, Some(state)),
            _ => (None, None),
        };
        EntryView {
            callback_name: None,
            space: space.to_string(),
            effective_interval_minutes: grid::interval_ms(row.interval_minutes, row.backoff_factor)
                / grid::MINUTE_MS,
            cron: calendar.as_ref().map(|c| c.expr().to_string()),
            time_zone: calendar.as_ref().map(|c| c.zone().to_string()),
            next_due_local: calendar
                .as_ref()
                .filter(|_| row.next_due_ms < crate::schedule::entry::NEVER_MS)
                .map(|c| c.local_text(row.next_due_ms)),
            at: one_off.as_ref().map(|s| s.field.describe()),
            set_for_ms: one_off.as_ref().and_then(|s| s.set_for),
            attempts: row.attempts(),
            retry_due_ms: row.retry_due_ms(),
            inflight_event: row.inflight_event().map(str::to_string),
            row,
        }
    }

    /// [`EntryView::new`], its callback named from `names` ([`handler_names`]).
    pub fn named(space: &str, row: ScheduleRow, names: &HashMap<String, String>) -> EntryView {
        let name = names.get(&row.callback_stream).cloned();
        EntryView {
            callback_name: name,
            ..EntryView::new(space, row)
        }
    }
}

/// Schedule entries of several spaces, and what could not be looked at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleList {
    pub entries: Vec<EntryView>,
    /// Declared entries that can never fire (never indexed), with why:
    /// only pieces made before such entries were refused have any.
    #[serde(default)]
    pub invalid: Vec<InvalidEntry>,
    /// How many spaces were opened to find them.
    pub looked_in: usize,
    /// Whether only spaces with a wake set were looked in (see [`schedules`]).
    pub wake_set_only: bool,
    pub quarantined: usize,
    /// Spaces whose schedule could not be read, with the reason.
    pub unreadable: Vec<(String, String)>,
    pub now_ms: u64,
}

/// A `[SCHEDULE]` entry on a piece's result that can never fire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InvalidEntry {
    pub space: String,
    pub piece: String,
    pub entry: u32,
    pub reason: String,
}

/// The invalid entries of a space's pieces (see [`InvalidEntry`]).
pub fn invalid_entries(space: &str, sp: &mut Space) -> OpResult<Vec<InvalidEntry>> {
    let listed = sp
        .read(crate::runtime::PIECES_DOC)?
        .map(|d| d.value)
        .unwrap_or(Value::Null);
    let mut out = Vec::new();
    for piece in listed.as_object().into_iter().flat_map(|m| m.keys()) {
        let Some(result) = sp.read(piece)? else {
            continue;
        };
        for (entry, reason) in index::declaration_problems(piece, &result.value) {
            out.push(InvalidEntry {
                space: space.to_string(),
                piece: piece.clone(),
                entry,
                reason,
            });
        }
    }
    Ok(out)
}

/// The entries of the spaces named in `only`, or of every space with a
/// wake set (every space with an active entry or a pending retry has one:
/// the directory may be early, never late), or with `all` of every space
/// (to find entries that are all paused).
pub fn schedules(v: &View<'_>, only: &[String], all: bool) -> OpResult<ScheduleList> {
    let dir = v.store.directory();
    let mut targets = Vec::new();
    let mut quarantined = 0;
    if !only.is_empty() {
        for id in only {
            let e = entry(v.store, id)?;
            if e.quarantined.is_some() {
                quarantined += 1;
            } else {
                targets.push(e.id);
            }
        }
    } else {
        let mut after: Option<String> = None;
        loop {
            let page = dir.list(after.as_deref(), PAGE)?;
            let Some(last) = page.last() else { break };
            after = Some(last.id.clone());
            for e in page {
                if e.quarantined.is_some() {
                    quarantined += 1;
                } else if all || e.next_wake_ms.is_some() {
                    targets.push(e.id);
                }
            }
        }
    }
    let mut entries = Vec::new();
    let mut invalid = Vec::new();
    let mut unreadable = Vec::new();
    for id in &targets {
        let read = v
            .store
            .open_space(id)
            .map_err(OpError::from)
            .and_then(|mut s| {
                let names = handler_names(&mut s)?;
                Ok((s.schedule(None)?, names, invalid_entries(id, &mut s)?))
            });
        match read {
            Ok((rows, names, bad)) => {
                entries.extend(rows.into_iter().map(|r| EntryView::named(id, r, &names)));
                invalid.extend(bad);
            }
            Err(e) => unreadable.push((id.clone(), e.to_string())),
        }
    }
    Ok(ScheduleList {
        entries,
        invalid,
        looked_in: targets.len(),
        wake_set_only: only.is_empty() && !all,
        quarantined,
        unreadable,
        now_ms: v.now_ms,
    })
}

/// The entry `piece`/`entry` names, or a sentence saying which part does
/// not exist.
pub fn find_entry(sp: &mut Space, piece: &str, entry: u32) -> OpResult<ScheduleRow> {
    if !index::is_piece_result_id(piece) {
        return Err(OpError::BadRequest(format!(
            "{piece:?} is not a piece id (piece ids have no '/'; `spacewake schedules list` shows them)"
        )));
    }
    let rows = sp.schedule(Some(piece))?;
    if rows.is_empty() {
        if sp.read(piece)?.is_none() {
            return Err(OpError::UnknownPiece {
                space: sp.id().to_string(),
                piece: piece.to_string(),
            });
        }
        return Err(OpError::NoSchedule(piece.to_string()));
    }
    rows.iter()
        .find(|r| r.entry == entry)
        .cloned()
        .ok_or_else(|| OpError::UnknownEntry {
            piece: piece.to_string(),
            entry,
            have: rows.iter().map(|r| r.entry).collect(),
        })
}

/// An entry before and after an operator changed it, and the space's wake
/// in the directory afterwards.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EntryChange {
    pub before: EntryView,
    pub after: EntryView,
    pub space_wake_ms: Option<u64>,
    pub now_ms: u64,
}

/// What an operator does to one schedule entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryAction {
    /// Fire an extra occurrence now, beside its grid (reactivating a
    /// paused or dead entry); the next period stays due when it was.
    Trigger,
    /// Stop it firing; it stays indexed.
    Pause,
    /// Let a paused (or dead) entry fire again; one overdue fires once,
    /// the missed periods coalesced.
    Resume,
}

impl EntryAction {
    /// `trigger`, `pause`, `resume`: the API's and the CLI's word.
    pub fn as_str(self) -> &'static str {
        match self {
            EntryAction::Trigger => "trigger",
            EntryAction::Pause => "pause",
            EntryAction::Resume => "resume",
        }
    }

    pub fn parse(text: &str) -> Option<EntryAction> {
        [
            EntryAction::Trigger,
            EntryAction::Pause,
            EntryAction::Resume,
        ]
        .into_iter()
        .find(|a| a.as_str() == text)
    }

    /// Does it to `piece`'s entry `entry`; pausing a paused entry or
    /// resuming an active one changes nothing.
    pub fn apply(
        self,
        sp: &mut Space,
        piece: &str,
        entry: u32,
        now_ms: u64,
    ) -> OpResult<EntryChange> {
        let before = find_entry(sp, piece, entry)?;
        let after = match self {
            EntryAction::Trigger => ops::trigger_now(sp, piece, entry, now_ms)?,
            EntryAction::Pause if before.status == ScheduleStatus::Paused => before.clone(),
            EntryAction::Pause => ops::pause(sp, piece, entry)?,
            EntryAction::Resume if before.status == ScheduleStatus::Active => before.clone(),
            EntryAction::Resume => ops::resume(sp, piece, entry)?,
        };
        let id = sp.id().to_string();
        let names = handler_names(sp)?;
        // The directory as it is now, moved later if the change allows.
        let space_wake_ms = sp.reconcile_projection()?.next_wake_ms;
        Ok(EntryChange {
            before: EntryView::named(&id, before, &names),
            after: EntryView::named(&id, after, &names),
            space_wake_ms,
            now_ms,
        })
    }
}

/// One fire of a wake and what its run did: the console's run view.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunView {
    pub space: String,
    pub fire: FireRecord,
    /// The entry it fired (gone when the piece was deleted since).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<EntryView>,
    /// The wake event as appended: its payload and the commit that
    /// appended it (gone once history compaction dropped it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub appended_seq: Option<u64>,
}

/// The fire that wrote wake event `event` in `space`, with its payload.
pub fn run(store: &Store, space: &str, event: &str) -> OpResult<RunView> {
    let mut sp = open(store, space)?;
    let unknown = || OpError::UnknownRun {
        space: space.to_string(),
        event: event.to_string(),
    };
    let wake = crate::schedule::WakeId::parse(event).ok_or_else(unknown)?;
    let (piece, entry) = (wake.piece.as_str(), wake.entry);
    let fire = sp
        .fires(piece, entry, usize::MAX)?
        .into_iter()
        .rev()
        .find(|f| f.event_id == event)
        .ok_or_else(unknown)?;
    let row = sp
        .schedule(Some(piece))?
        .into_iter()
        .find(|r| r.entry == entry);
    let appended = sp.event(event)?;
    Ok(RunView {
        space: space.to_string(),
        entry: match row {
            Some(r) => Some(EntryView::named(space, r, &handler_names(&mut sp)?)),
            None => None,
        },
        payload: appended.as_ref().map(|e| e.payload.clone()),
        appended_seq: appended.map(|e| e.seq),
        fire,
    })
}

/// An entry's recent fires (oldest first; the newest [`FIRE_HISTORY`] kept).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FiresView {
    pub entry: EntryView,
    pub fires: Vec<FireRecord>,
    pub kept: usize,
}

pub fn fires(store: &Store, space: &str, piece: &str, entry: u32) -> OpResult<FiresView> {
    let mut sp = open(store, space)?;
    let row = find_entry(&mut sp, piece, entry)?;
    let fires = sp.fires(piece, entry, FIRE_HISTORY)?;
    Ok(FiresView {
        entry: EntryView::named(space, row, &handler_names(&mut sp)?),
        fires,
        kept: FIRE_HISTORY,
    })
}

// ----- the ledger -------------------------------------------------------------

/// A scheduled-CPU limit per ledger window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Limit {
    Unlimited,
    CpuUs(u64),
}

impl Limit {
    /// `None` (no budget) is unlimited.
    pub fn of(us: Option<u64>) -> Limit {
        us.map_or(Limit::Unlimited, Limit::CpuUs)
    }
}

/// A space's scheduled budget: its own setting and what applies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetView {
    /// `default` (the host's), `unlimited`, or `override`.
    pub setting: String,
    /// The override, in CPU µs per window.
    pub override_us: Option<u64>,
    /// The host default, when known (a running server knows its flag).
    pub host_default: Option<Limit>,
    /// What applies, when known.
    pub effective: Option<Limit>,
}

/// A space's ledger: its budget, every window and bucket, the top actions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerView {
    pub space: String,
    pub window_ms: u64,
    pub budget: BudgetView,
    /// The space's effect knobs.
    pub effects: EffectsView,
    pub rows: Vec<LedgerRow>,
    pub top: Vec<ActionCost>,
    pub now_ms: u64,
}

fn budget_view(sp: &mut Space, host_default: Option<Limit>) -> OpResult<BudgetView> {
    use crate::accounting::BudgetOverride;
    let (setting, override_us, effective) = match crate::accounting::budget_override(sp)? {
        BudgetOverride::HostDefault => ("default", None, host_default),
        BudgetOverride::Unlimited => ("unlimited", None, Some(Limit::Unlimited)),
        BudgetOverride::CpuUs(us) => ("override", Some(us), Some(Limit::CpuUs(us))),
    };
    Ok(BudgetView {
        setting: setting.into(),
        override_us,
        host_default,
        effective,
    })
}

pub fn ledger(v: &View<'_>, space: &str, top: usize) -> OpResult<LedgerView> {
    let mut sp = open(v.store, space)?;
    Ok(LedgerView {
        space: space.to_string(),
        window_ms: v.window_ms,
        budget: budget_view(&mut sp, v.host_budget)?,
        effects: effects_view(&mut sp, v.host_effects)?,
        rows: sp.ledger()?,
        top: sp.action_costs(top.min(1_000))?,
        now_ms: v.now_ms,
    })
}

/// A space's effect knobs: its own settings, and what applies (when the
/// host's defaults are known).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EffectsView {
    pub own: crate::effects::budget::Overrides,
    pub effective: Option<crate::effects::budget::Overrides>,
}

impl EffectsView {
    /// For a person: each knob as it applies, and whose setting it is.
    pub fn describe(&self) -> String {
        let eff = self.effective.unwrap_or_default();
        let one = |own: Option<String>, eff: Option<String>| match (own, eff) {
            (Some(o), _) => format!("{o} (this space's)"),
            (None, Some(e)) => format!("{e} (the host's)"),
            (None, None) => "the host's".to_string(),
        };
        format!(
            "in flight {}; requests/s {}; bytes/s {}",
            one(
                self.own.in_flight.map(|n| n.to_string()),
                eff.in_flight.map(|n| n.to_string())
            ),
            one(
                self.own.per_second.map(|r| r.to_string()),
                eff.per_second.map(|r| r.to_string())
            ),
            one(
                self.own.bytes_per_second.map(crate::human::bytes),
                eff.bytes_per_second.map(crate::human::bytes)
            ),
        )
    }
}

fn effects_view(
    sp: &mut Space,
    host: Option<crate::effects::budget::Limits>,
) -> OpResult<EffectsView> {
    let own = crate::accounting::effect_overrides(sp)?;
    let effective = host.map(|h| {
        let l = own.apply(&h);
        crate::effects::budget::Overrides {
            in_flight: Some(l.in_flight),
            per_second: Some(l.requests_per_second),
            bytes_per_second: Some(l.bytes_per_second as u64),
        }
    });
    Ok(EffectsView { own, effective })
}

/// One knob's new setting.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Knob<T> {
    Keep,
    Default,
    Set(T),
}

impl<T: std::str::FromStr + Copy> Knob<T> {
    /// `default`, or a number, as the CLI and the console write them
    /// (blank: keep).
    pub fn parse(text: &str, what: &str) -> OpResult<Knob<T>> {
        match text.trim() {
            "" => Ok(Knob::Keep),
            "default" => Ok(Knob::Default),
            n => n.parse().map(Knob::Set).map_err(|_| {
                OpError::BadRequest(format!("{what} is a number or `default` (got {n:?})"))
            }),
        }
    }

    /// The API's field: absent (keep), `"default"`, or a number.
    pub fn from_json(v: Option<&Value>, what: &str) -> OpResult<Knob<T>> {
        match v {
            None => Ok(Knob::Keep),
            Some(Value::String(s)) if s == "default" => Ok(Knob::Default),
            Some(Value::Number(n)) => Knob::parse(&n.to_string(), what),
            Some(other) => Err(OpError::BadRequest(format!(
                "{what} is a number or \"default\" (got {other})"
            ))),
        }
    }

    fn over(self, current: Option<T>) -> Option<T> {
        match self {
            Knob::Keep => current,
            Knob::Default => None,
            Knob::Set(v) => Some(v),
        }
    }
}

/// New settings of a space's effect knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EffectsSetting {
    pub in_flight: Knob<usize>,
    pub per_second: Knob<f64>,
    pub bytes_per_second: Knob<u64>,
}

impl EffectsSetting {
    /// The API's body: `{inFlight, perSecond, bytesPerSecond}`, each
    /// optional.
    pub fn from_json(v: &Value) -> OpResult<EffectsSetting> {
        let Some(o) = v.as_object() else {
            return Err(OpError::BadRequest("the body is a JSON object".into()));
        };
        if let Some(k) = o
            .keys()
            .find(|k| !["inFlight", "perSecond", "bytesPerSecond"].contains(&k.as_str()))
        {
            return Err(OpError::BadRequest(format!(
                "unknown field {k:?} (expected inFlight, perSecond, bytesPerSecond)"
            )));
        }
        let s = EffectsSetting {
            in_flight: Knob::from_json(o.get("inFlight"), "inFlight")?,
            per_second: Knob::from_json(o.get("perSecond"), "perSecond")?,
            bytes_per_second: Knob::from_json(o.get("bytesPerSecond"), "bytesPerSecond")?,
        };
        s.check()?;
        Ok(s)
    }

    /// Refuses settings no space could run with.
    pub fn check(&self) -> OpResult<()> {
        let bad = matches!(self.in_flight, Knob::Set(0))
            || matches!(self.per_second, Knob::Set(r) if !(r.is_finite() && r > 0.0))
            || matches!(self.bytes_per_second, Knob::Set(0));
        if bad {
            return Err(OpError::BadRequest(
                "effect knobs are positive numbers (or `default`)".into(),
            ));
        }
        Ok(())
    }

    /// As the API's body (fields kept are left out).
    pub fn to_json(self) -> Value {
        let mut o = serde_json::Map::new();
        let mut put = |k: &str, v: Option<Value>| {
            if let Some(v) = v {
                o.insert(k.to_string(), v);
            }
        };
        fn j<T: Into<Value>>(k: Knob<T>) -> Option<Value> {
            match k {
                Knob::Keep => None,
                Knob::Default => Some(Value::from("default")),
                Knob::Set(v) => Some(v.into()),
            }
        }
        put("inFlight", j(self.in_flight));
        put("perSecond", j(self.per_second));
        put("bytesPerSecond", j(self.bytes_per_second));
        Value::Object(o)
    }
}

/// Sets a space's effect knobs; returns its settings and what applies.
pub fn set_effects(
    sp: &mut Space,
    setting: EffectsSetting,
    host: Option<crate::effects::budget::Limits>,
) -> OpResult<EffectsView> {
    setting.check()?;
    let cur = crate::accounting::effect_overrides(sp)?;
    let new = crate::effects::budget::Overrides {
        in_flight: setting.in_flight.over(cur.in_flight),
        per_second: setting.per_second.over(cur.per_second),
        bytes_per_second: setting.bytes_per_second.over(cur.bytes_per_second),
    };
    crate::accounting::set_effect_overrides(sp, &new)?;
    effects_view(sp, host)
}

/// A new scheduled budget for a space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetSetting {
    /// CPU milliseconds per window.
    Ms(u64),
    /// No budget, whatever the host default.
    Unlimited,
    /// The host default.
    Default,
}

impl BudgetSetting {
    /// `500`, `none` or `default`, as the CLI and the API write them.
    pub fn parse(text: &str) -> OpResult<BudgetSetting> {
        match text {
            "none" => Ok(BudgetSetting::Unlimited),
            "default" => Ok(BudgetSetting::Default),
            ms => ms.parse().map(BudgetSetting::Ms).map_err(|_| {
                OpError::BadRequest(format!(
                    "a budget is milliseconds, `none` or `default` (got {ms:?})"
                ))
            }),
        }
    }

    /// The API's `budgetMs`: a number of milliseconds, `"none"` or `"default"`.
    pub fn from_json(v: &Value) -> OpResult<BudgetSetting> {
        match v {
            Value::String(t) => BudgetSetting::parse(t),
            Value::Number(n) => n.as_u64().map(BudgetSetting::Ms).ok_or_else(|| {
                OpError::BadRequest(format!("a budget is whole milliseconds (got {n})"))
            }),
            other => Err(OpError::BadRequest(format!(
                "`budgetMs` is milliseconds, \"none\" or \"default\" (got {other})"
            ))),
        }
    }

    pub fn to_json(self) -> Value {
        match self {
            BudgetSetting::Ms(ms) => Value::from(ms),
            BudgetSetting::Unlimited => Value::from("none"),
            BudgetSetting::Default => Value::from("default"),
        }
    }
}

/// Sets a space's scheduled budget; returns what now applies.
pub fn set_budget(
    sp: &mut Space,
    setting: BudgetSetting,
    host_default: Option<Limit>,
) -> OpResult<BudgetView> {
    use crate::accounting::BudgetOverride;
    let o = match setting {
        BudgetSetting::Unlimited => BudgetOverride::Unlimited,
        BudgetSetting::Default => BudgetOverride::HostDefault,
        BudgetSetting::Ms(ms) => BudgetOverride::CpuUs(ms.saturating_mul(1_000)),
    };
    crate::accounting::set_budget_override(sp, o)?;
    budget_view(sp, host_default)
}
