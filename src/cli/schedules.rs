//! `spacewake schedules …`: operator commands on the schedule entries of a
//! data directory — no running server needed.
//!
//! - `list` — one line per entry: space, piece, entry, interval, next due,
//!   last fired, attempts, status, fired/missed counts.
//! - `trigger` — make an entry due now ([`ops::trigger_now`]).
//! - `pause` / `resume` — stop and restart an entry ([`ops::pause`],
//!   [`ops::resume`]); a paused entry stays indexed.
//! - `fires` — the bounded history of an entry's recent fires.
//!
//! Entries are addressed as `--space S --piece P --entry N`, where `N` is the
//! entry's position in the piece's `[SCHEDULE]` list, counted from 0.
//!
//! # Which spaces `list` opens
//! The host directory knows each space's earliest wake but not its entries,
//! so listing means opening space files. By default `list` opens only the
//! spaces whose directory row has a wake set (every space with an active
//! entry or a pending retry has one: the directory may be early, never
//! late). A space whose entries are all paused has no wake, so it is found
//! only with `--all` (opens every space) or by naming it with `--space`.
//!
//! # Against a running server
//! Every change is a plane-only transaction on the space's file, and the
//! host directory follows by the early-never-late rule, exactly as when the
//! host itself writes. A running server on the same data directory is not
//! told (it is another process): its waker re-reads the directory at least
//! once a minute (its safety-net sleep), so a triggered or resumed entry
//! fires within a minute at most. A pause takes effect at the next firing
//! pass, which re-reads the entry.
//!
//! # Invariants
//! - Time comes from the system clock, read once per command.
//! - Bad input (unknown space, piece or entry; not a data directory) ends
//!   in one sentence on stderr and exit status 1, never a panic.
//! - Nothing here creates a data directory: a mistyped `--data` is refused
//!   before the store would create one.

use super::{table, DataArgs};
use crate::clock::{Clock, SystemClock};
use crate::human::{format_utc_ms, human_duration_ms, plural, relative, thousands};
use crate::schedule::fire::FIRE_HISTORY;
use crate::schedule::{grid, index, ops};
use crate::store::{FireRecord, ScheduleRow, ScheduleStatus, Space, Store};
use anyhow::{bail, Context};
use std::path::Path;
use std::process::ExitCode;

/// The longest a running server's waker sleeps without being told anything
/// (`host::waker::MAX_SLEEP`, which is private to the host): the most a
/// change made here waits before a running server acts on it.
pub const WAKER_SAFETY_NET_SECS: u64 = 60;

/// Directory pages read at a time while looking for spaces to list.
const PAGE: usize = 500;

/// One schedule entry of one piece.
#[derive(Debug, clap::Args)]
pub struct EntryArgs {
    #[command(flatten)]
    pub data: DataArgs,
    /// The space holding the piece.
    #[arg(long)]
    pub space: String,
    /// The piece id (as printed by `deploy` and `schedules list`).
    #[arg(long)]
    pub piece: String,
    /// The entry's position in the piece's [SCHEDULE] list, from 0.
    #[arg(long)]
    pub entry: u32,
}

#[derive(Debug, clap::Subcommand)]
pub enum SchedulesCommand {
    /// List schedule entries: interval, next due, last fired, attempts, status.
    List {
        #[command(flatten)]
        data: DataArgs,
        /// Only these spaces (repeatable); opened even if they have no wake set.
        #[arg(long)]
        space: Vec<String>,
        /// Open every space, to find entries that are all paused (slower).
        #[arg(long, conflicts_with = "space")]
        all: bool,
    },
    /// Make an entry due now; a running server fires it within a minute.
    Trigger(EntryArgs),
    /// Stop an entry from firing (it stays indexed).
    Pause(EntryArgs),
    /// Let a paused entry fire again; an overdue one fires once, missed periods coalesced.
    Resume(EntryArgs),
    /// Show an entry's recent fires (a bounded history, oldest first).
    Fires(EntryArgs),
}

pub fn run(which: SchedulesCommand) -> anyhow::Result<ExitCode> {
    let now_ms = SystemClock.now_ms();
    match which {
        SchedulesCommand::List { data, space, all } => list(&data.data, &space, all, now_ms),
        SchedulesCommand::Trigger(e) => trigger(&e, now_ms),
        SchedulesCommand::Pause(e) => pause(&e),
        SchedulesCommand::Resume(e) => resume(&e, now_ms),
        SchedulesCommand::Fires(e) => fires(&e),
    }
}

// ----- opening --------------------------------------------------------------

/// Opens a registered, healthy space, or says in a sentence why not.
fn open_space(store: &Store, data: &Path, id: &str) -> anyhow::Result<Space> {
    let Some(entry) = store.directory().get(id)? else {
        bail!(
            "there is no space {id:?} in {}; `spacewake spaces` lists the spaces",
            data.display()
        );
    };
    if let Some(reason) = entry.quarantined {
        bail!("space {id:?} is quarantined ({reason}); its schedule cannot be read or changed");
    }
    store
        .open_space(id)
        .with_context(|| format!("cannot open space {id:?}"))
}

/// The entry `args` names, or a sentence saying which part does not exist.
fn find_entry(space: &mut Space, args: &EntryArgs) -> anyhow::Result<ScheduleRow> {
    let (sid, piece) = (&args.space, &args.piece);
    if !index::is_piece_result_id(piece) {
        bail!("{piece:?} is not a piece id (piece ids have no '/'; `spacewake schedules list` shows them)");
    }
    let rows = space.schedule(Some(piece))?;
    if rows.is_empty() {
        if space.read(piece)?.is_none() {
            bail!("space {sid:?} has no piece {piece:?}");
        }
        bail!("piece {piece:?} in space {sid:?} declares no [SCHEDULE] entries");
    }
    match rows.iter().find(|r| r.entry == args.entry) {
        Some(r) => Ok(r.clone()),
        None => {
            let have: Vec<String> = rows.iter().map(|r| r.entry.to_string()).collect();
            bail!(
                "piece {piece:?} has no schedule entry {}; its entries are {} (numbered from 0 in declaration order)",
                args.entry,
                have.join(", ")
            )
        }
    }
}

fn open_entry(args: &EntryArgs) -> anyhow::Result<(Store, Space, ScheduleRow)> {
    let store = super::open_existing(&args.data.data)?;
    let mut space = open_space(&store, &args.data.data, &args.space)?;
    let row = find_entry(&mut space, args)?;
    Ok((store, space, row))
}

fn entry_name(args: &EntryArgs) -> String {
    format!(
        "space {} piece {} entry {}",
        args.space, args.piece, args.entry
    )
}

/// The space's wake in the host directory, as text.
fn directory_wake(store: &Store, space: &str, now_ms: Option<u64>) -> anyhow::Result<String> {
    let wake = store.directory().get(space)?.and_then(|e| e.next_wake_ms);
    Ok(match (wake, now_ms) {
        (None, _) => "none (nothing active)".into(),
        (Some(t), Some(now)) => format!("{} ({})", format_utc_ms(t), relative(t, now)),
        (Some(t), None) => format_utc_ms(t),
    })
}

/// A note when another process (a running server) holds the space's lease.
fn lease_note(space: &mut Space, now_ms: u64) -> anyhow::Result<Option<String>> {
    Ok(space
        .current_lease()?
        .filter(|l| l.expires_at_ms > now_ms)
        .map(|l| {
            format!(
                "The space is active on a running server (lease held by {}).",
                l.holder
            )
        }))
}

// ----- commands -------------------------------------------------------------

fn list(data: &Path, only: &[String], all: bool, now_ms: u64) -> anyhow::Result<ExitCode> {
    let store = super::open_existing(data)?;
    let mut targets: Vec<String> = Vec::new();
    let mut quarantined = 0usize;
    if !only.is_empty() {
        for id in only {
            // Checked up front, so a mistyped id fails before any output.
            match store.directory().get(id)? {
                None => bail!(
                    "there is no space {id:?} in {}; `spacewake spaces` lists the spaces",
                    data.display()
                ),
                Some(e) if e.quarantined.is_some() => quarantined += 1,
                Some(_) => targets.push(id.clone()),
            }
        }
    } else {
        let mut after: Option<String> = None;
        loop {
            let page = store.directory().list(after.as_deref(), PAGE)?;
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

    let mut lines: Vec<[String; 10]> = Vec::new();
    let mut unreadable = 0usize;
    let mut spaces_with_entries = 0usize;
    for id in &targets {
        let rows = match store.open_space(id).and_then(|mut s| s.schedule(None)) {
            Ok(rows) => rows,
            Err(e) => {
                eprintln!("warning: cannot read the schedule of space {id:?}: {e}");
                unreadable += 1;
                continue;
            }
        };
        if !rows.is_empty() {
            spaces_with_entries += 1;
        }
        for r in rows {
            lines.push(list_line(id, &r, now_ms));
        }
    }

    if lines.is_empty() {
        println!("no schedule entries");
    } else {
        table::print(
            &[
                "SPACE",
                "PIECE",
                "ENTRY",
                "INTERVAL",
                "NEXT DUE (UTC)",
                "LAST FIRED (UTC)",
                "ATTEMPTS",
                "STATUS",
                "FIRED",
                "MISSED",
            ],
            &[2, 6, 8, 9],
            &lines,
        );
        println!(
            "{} {} in {} {}",
            thousands(lines.len() as u64),
            plural(lines.len(), "entry", "entries"),
            thousands(spaces_with_entries as u64),
            plural(spaces_with_entries, "space", "spaces"),
        );
    }
    if only.is_empty() && !all {
        println!(
            "(looked in the {} {} with a wake set; entries that are all paused are found with --all)",
            thousands(targets.len() as u64),
            plural(targets.len(), "space", "spaces")
        );
    }
    if quarantined > 0 {
        println!(
            "({} quarantined {} skipped)",
            thousands(quarantined as u64),
            plural(quarantined, "space", "spaces")
        );
    }
    if unreadable > 0 {
        eprintln!(
            "error: {unreadable} {} could not be read (see the warnings above)",
            plural(unreadable, "space", "spaces")
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

fn list_line(space: &str, r: &ScheduleRow, now_ms: u64) -> [String; 10] {
    let interval = if r.backoff_factor > 1 {
        let effective = grid::interval_ms(r.interval_minutes, r.backoff_factor) / grid::MINUTE_MS;
        format!(
            "{} min (backed off ×{} = {} min)",
            thousands(u64::from(r.interval_minutes)),
            r.backoff_factor,
            thousands(effective)
        )
    } else {
        format!("{} min", thousands(u64::from(r.interval_minutes)))
    };
    let mut status = r.status.as_str().to_string();
    if let Some(retry) = r.retry_due_ms {
        status.push_str(&format!(", retry at {}", format_utc_ms(retry)));
    }
    [
        space.to_string(),
        r.piece.clone(),
        r.entry.to_string(),
        interval,
        format!(
            "{} ({})",
            format_utc_ms(r.next_due_ms),
            relative(r.next_due_ms, now_ms)
        ),
        r.last_fired_ms.map_or("-".into(), format_utc_ms),
        r.attempts.to_string(),
        status,
        thousands(r.fired_count),
        thousands(r.missed_count),
    ]
}

fn trigger(args: &EntryArgs, now_ms: u64) -> anyhow::Result<ExitCode> {
    let (store, mut space, before) = open_entry(args)?;
    let after = ops::trigger_now(&mut space, &args.piece, args.entry, now_ms)?;
    let name = entry_name(args);
    if before.next_due_ms <= now_ms {
        println!(
            "{name} was already due ({}); next due {}",
            format_utc_ms(before.next_due_ms),
            format_utc_ms(after.next_due_ms)
        );
    } else {
        println!(
            "triggered {name}: next due {} (now; it was {})",
            format_utc_ms(after.next_due_ms),
            format_utc_ms(before.next_due_ms)
        );
    }
    if before.status != ScheduleStatus::Active {
        println!(
            "It was {}; triggering made it active again.",
            before.status.as_str()
        );
    }
    println!(
        "The firing consumes the current period (the next one stays on the entry's grid); \
         the space's wake is now {}.",
        directory_wake(&store, &args.space, None)?
    );
    if let Some(note) = lease_note(&mut space, now_ms)? {
        println!("{note}");
    }
    println!(
        "A running server picks it up within {WAKER_SAFETY_NET_SECS} s at most \
         (its waker's safety-net sleep); a stopped host fires it when it starts."
    );
    Ok(ExitCode::SUCCESS)
}

fn pause(args: &EntryArgs) -> anyhow::Result<ExitCode> {
    let (store, mut space, before) = open_entry(args)?;
    let name = entry_name(args);
    if before.status == ScheduleStatus::Paused {
        println!("{name} is already paused");
        return Ok(ExitCode::SUCCESS);
    }
    ops::pause(&mut space, &args.piece, args.entry)?;
    println!("paused {name}: it stays indexed and does not fire until resumed");
    println!(
        "The space's wake is now {}.",
        directory_wake(&store, &args.space, None)?
    );
    Ok(ExitCode::SUCCESS)
}

fn resume(args: &EntryArgs, now_ms: u64) -> anyhow::Result<ExitCode> {
    let (store, mut space, before) = open_entry(args)?;
    let name = entry_name(args);
    if before.status == ScheduleStatus::Active {
        println!(
            "{name} is already active; next due {}",
            format_utc_ms(before.next_due_ms)
        );
        return Ok(ExitCode::SUCCESS);
    }
    let after = ops::resume(&mut space, &args.piece, args.entry)?;
    if after.next_due_ms <= now_ms {
        println!(
            "resumed {name}: it is overdue (due {}), so it fires at the next wake pass, \
             the periods missed while it was {} coalesced into that one wake",
            format_utc_ms(after.next_due_ms),
            before.status.as_str()
        );
        println!(
            "A running server picks it up within {WAKER_SAFETY_NET_SECS} s at most \
             (its waker's safety-net sleep)."
        );
    } else {
        println!(
            "resumed {name}: next due {} ({})",
            format_utc_ms(after.next_due_ms),
            relative(after.next_due_ms, now_ms)
        );
    }
    println!(
        "The space's wake is now {}.",
        directory_wake(&store, &args.space, None)?
    );
    Ok(ExitCode::SUCCESS)
}

fn fires(args: &EntryArgs) -> anyhow::Result<ExitCode> {
    let (_store, mut space, row) = open_entry(args)?;
    let records = space.fires(&args.piece, args.entry, FIRE_HISTORY)?;
    let name = entry_name(args);
    if records.is_empty() {
        println!(
            "{name} has not fired yet (fired {} times in all; next due {})",
            thousands(row.fired_count),
            format_utc_ms(row.next_due_ms)
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "recent fires of {name}, oldest first (the newest {FIRE_HISTORY} are kept; \
         {} fired in all):",
        thousands(row.fired_count)
    );
    let lines: Vec<[String; 7]> = records.iter().map(fire_line).collect();
    table::print(
        &[
            "TIME (UTC)",
            "EVENT",
            "PERIOD",
            "DUE (UTC)",
            "LATENESS",
            "MISSED",
            "OUTCOME",
        ],
        &[2, 4, 5],
        &lines,
    );
    Ok(ExitCode::SUCCESS)
}

fn fire_line(f: &FireRecord) -> [String; 7] {
    [
        format_utc_ms(f.fired_ms),
        f.event_id.clone(),
        thousands(f.period),
        format_utc_ms(f.due_ms),
        human_duration_ms(f.fired_ms.saturating_sub(f.due_ms)),
        thousands(f.missed_periods),
        f.outcome.clone(),
    ]
}
