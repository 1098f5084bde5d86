//! Scheduled wakes: a pattern's `[SCHEDULE]` declaration, indexed at commit
//! time and fired by the host with no browser open.
//!
//! - [`jitter`] — pure: the offset of each nominal period (keyed blake3 hash
//!   under the host secret, or random), uniform in ±window.
//! - [`grid`] — pure: nominal times, due times, the min-gap rule, catch-up
//!   after downtime. Time is an argument, never read.
//! - [`entry`] — what a row's state means (its next wake) and the one
//!   way rows are written from here ([`entry::save`]).
//! - [`cadence`] — an entry's shape (interval or cron) as its row stores
//!   it: nominal times, the advance after a fire, the payload's fields.
//! - [`at`] — one-off entries: the field an entry follows, what it holds
//!   read as a time, and the watches that let a commit find them cheaply.
//! - [`cron`] — pure: calendar cadences in a time zone (five-field cron,
//!   the DST rule, forward-only jitter, the 60-minute floor).
//! - [`fire`] — write-first firing: one transaction advances due entries
//!   and appends their wake events (shared by host and scenarios).
//! - [`delivery`] — in-flight marking, retries (1, 5, 30 min) and
//!   dead-lettering around each wave.
//! - [`index`] — the index hook that keeps `schedule_index` in step with
//!   declarations inside each commit's transaction.
//! - [`wake_id`] — a wake's identity, built and parsed in one place.
//! - [`backoff`] — schedule policy for unread output: an entry whose
//!   output no session reads fires less often until one does.
//!
//! # Invariants
//! - Nothing here reads a clock: the shell passes `now` and the commit's
//!   time in, and stores the decisions these cores return.
//! - The grid is anchored at the declaration; fires never re-base it, so a
//!   cadence does not drift.
//! - Consecutive fires of one entry are never closer than
//!   `interval − window` (see [`grid`]).

pub mod at;
pub mod backoff;
pub mod cadence;
pub mod cron;
pub mod delivery;
pub mod entry;
pub mod fire;
pub mod grid;
pub mod index;
pub mod jitter;
pub mod ops;
pub mod wake_id;

pub use entry::EntryState;
pub use grid::{after_fire, first_due, Advance, Grid};
pub use index::{parse_declaration, DeclaredEntry, ScheduleIndexHook, SCHEDULE_KEY};
pub use jitter::{keyed_offset_ms, Jitter, JitterMode, DEFAULT_WINDOW_MS};
pub use wake_id::WakeId;
