//! The host directory: one small SQLite file (`host.sqlite`) listing every
//! space, and per space a projection of what it needs from the host (its
//! earliest wake and whether it has undelivered events).
//!
//! # Invariant: early, never late
//! For every healthy space, `next_wake_ms` is at or before the space's true
//! earliest due schedule entry, and `undelivered` is 1 whenever the space has
//! undelivered events — or its `next_wake_ms` was already due when they were
//! appended: a due wake activates the space as surely (the waker, or boot
//! discovery's due arm and then the waker), and every activation delivers
//! what is undelivered. This spares a scheduled wake's firing a directory
//! write. The space's commit path keeps this by moving the
//! projection *earlier* before its SQLite commit and *later* only after it.
//! A crash between the two steps leaves the projection early: discovery
//! then opens a space with nothing to do and corrects the row
//! ([`FileDirectory::set_projection`]). It can never leave a due space unfound.

use super::error::{SqlContext, StoreError, StoreResult};
use super::migrate::{migrate, HOST_MIGRATIONS};
use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Mutex};

/// One space's row in the directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpaceEntry {
    pub id: String,
    pub owner: String,
    pub created_ms: u64,
    pub next_wake_ms: Option<u64>,
    pub undelivered: bool,
    pub quarantined: Option<String>,
    /// See [`UpcomingWake::budget_policy`].
    pub budget_policy: Option<bool>,
}

/// What the directory believes a space needs: the projection it stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Projection {
    pub next_wake_ms: Option<u64>,
    pub undelivered: bool,
}

impl Projection {
    /// The projection that is at least as early as both: what must be in the
    /// directory while a commit moving from `self` to `other` is in flight.
    pub fn earliest_of(self, other: Projection) -> Projection {
        let next_wake_ms = match (self.next_wake_ms, other.next_wake_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Projection {
            next_wake_ms,
            undelivered: self.undelivered || other.undelivered,
        }
    }

    /// The same obligation, written more cheaply: undelivered events need no
    /// flag while the wake is already due at `now_ms` (see the invariant).
    pub fn covered_by_due_wake(self, now_ms: u64) -> Projection {
        let due = self.next_wake_ms.is_some_and(|t| t <= now_ms);
        Projection {
            undelivered: self.undelivered && !due,
            ..self
        }
    }
}

/// A space found by discovery, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovered {
    pub id: String,
    pub next_wake_ms: Option<u64>,
    pub undelivered: bool,
}

pub struct FileDirectory {
    path: PathBuf,
    conn: Mutex<Connection>,
    /// Writes so far; every [`CHECKPOINT_EVERY_WRITES`]th nudges the
    /// checkpointer thread.
    writes: AtomicU64,
    nudge: SyncSender<()>,
    checkpoints: Arc<AtomicU64>,
}

/// How many directory writes go by between two checkpoints of the host
/// file's WAL (each write adds about three pages).
const CHECKPOINT_EVERY_WRITES: u64 = 256;

/// The host file's WAL past which a write checkpoints inline after all
/// (the checkpointer has fallen far behind).
const INLINE_CHECKPOINT_PAGES: u32 = 10_000;

/// Checkpoints the host file on its own connection and thread, nudged by
/// [`FileDirectory::with`]. Why: with SQLite's automatic checkpoint, the write
/// that crossed 1,000 pages ran the checkpoint — two fsyncs — while
/// holding the directory's lock, and every space thread and session open
/// queued behind it. Under load (each session wave writes the directory
/// twice) those fsyncs came several times a second and, when the disk
/// was slow, sends waited up to a second each. A passive checkpoint on
/// another connection does not block the directory's writers.
fn spawn_checkpointer(path: &Path, rx: Receiver<()>, done: Arc<AtomicU64>) -> StoreResult<()> {
    let conn = Connection::open(path).at(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .at(path)?;
    let file = path.to_path_buf();
    std::thread::Builder::new()
        .name("host-checkpoint".into())
        .spawn(move || {
            // Ends when the directory (the sender) is dropped.
            while rx.recv().is_ok() {
                match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
                    Ok(()) => {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        tracing::warn!(path = %file.display(), error = %e, "host directory checkpoint failed");
                    }
                }
            }
        })
        .map_err(|source| StoreError::Io {
            path: PathBuf::from("host-checkpoint thread"),
            source,
        })?;
    Ok(())
}

impl FileDirectory {
    pub fn open(path: &Path) -> StoreResult<FileDirectory> {
        let mut conn = Connection::open(path).at(path)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .at(path)?;
        super::migrate::enable_wal(&conn, path, "NORMAL")?;
        // Lookups are by index; the OS page cache serves the rest. A small
        // cache keeps the host's footprint flat as the space count grows.
        conn.execute_batch("PRAGMA cache_size = -512;").at(path)?;
        conn.execute_batch(&format!(
            "PRAGMA wal_autocheckpoint = {INLINE_CHECKPOINT_PAGES};"
        ))
        .at(path)?;
        migrate(&mut conn, path, HOST_MIGRATIONS, None)?;
        let (nudge, rx) = std::sync::mpsc::sync_channel(1);
        let checkpoints = Arc::new(AtomicU64::new(0));
        spawn_checkpointer(path, rx, checkpoints.clone())?;
        Ok(FileDirectory {
            path: path.to_path_buf(),
            conn: Mutex::new(conn),
            writes: AtomicU64::new(0),
            nudge,
            checkpoints,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn with<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> StoreResult<T> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let before = conn.total_changes();
        let out = f(&conn);
        let wrote = conn.total_changes() != before;
        drop(conn);
        if wrote
            && self.writes.fetch_add(1, Ordering::Relaxed) % CHECKPOINT_EVERY_WRITES
                == CHECKPOINT_EVERY_WRITES - 1
        {
            // A nudge already pending is enough.
            let _ = self.nudge.try_send(());
        }
        out.at(&self.path)
    }

    /// A full checkpoint that truncates the host file's WAL (at shutdown).
    pub fn checkpoint_all(&self) -> StoreResult<()> {
        self.with(|c| c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())))
    }

    /// Checkpoints the checkpointer thread has completed.
    pub fn checkpoints(&self) -> u64 {
        self.checkpoints.load(Ordering::Relaxed)
    }

    /// Reads a host-level setting (host id, jitter secret, ...).
    pub fn meta(&self, key: &str) -> StoreResult<Option<String>> {
        self.with(|c| {
            c.query_row("SELECT value FROM host_meta WHERE key = ?1", [key], |r| {
                r.get(0)
            })
            .optional()
        })
    }

    /// Returns the stored value for `key`, storing `init()` first if absent.
    /// Safe against two processes racing: the first writer wins.
    pub fn meta_or_init(&self, key: &str, init: impl FnOnce() -> String) -> StoreResult<String> {
        let candidate = init();
        self.with(|c| {
            c.execute(
                "INSERT OR IGNORE INTO host_meta (key, value) VALUES (?1, ?2)",
                [key, &candidate],
            )?;
            c.query_row("SELECT value FROM host_meta WHERE key = ?1", [key], |r| {
                r.get(0)
            })
        })
    }

    /// Records an accepted operator action by its decoded signature at
    /// `now_ms`, forgetting those seen before `forget_before_ms`; false
    /// when this signature was recorded already (a replay).
    pub fn first_use_of_signature(
        &self,
        signature: &[u8],
        now_ms: u64,
        forget_before_ms: u64,
    ) -> StoreResult<bool> {
        self.with(|c| {
            c.prepare_cached("DELETE FROM operator_signatures WHERE seen_ms < ?1")?
                .execute([forget_before_ms as i64])?;
            let n = c
                .prepare_cached(
                    "INSERT OR IGNORE INTO operator_signatures (signature, seen_ms) \
                     VALUES (?1, ?2)",
                )?
                .execute(params![signature, now_ms as i64])?;
            Ok(n == 1)
        })
    }

    pub fn insert_space(&self, id: &str, owner: &str, created_ms: u64) -> StoreResult<()> {
        let n = self.with(|c| {
            c.execute(
                "INSERT OR IGNORE INTO spaces (id, owner, created_ms, budget_policy) \
                 VALUES (?1, ?2, ?3, 0)",
                params![id, owner, created_ms as i64],
            )
        })?;
        if n == 0 {
            return Err(StoreError::SpaceExists(id.to_string()));
        }
        Ok(())
    }

    pub fn get(&self, id: &str) -> StoreResult<Option<SpaceEntry>> {
        self.with(|c| {
            c.prepare_cached(
                "SELECT id, owner, created_ms, next_wake_ms, undelivered, quarantined, budget_policy \
                 FROM spaces WHERE id = ?1",
            )?
            .query_row([id], entry_from_row)
            .optional()
        })
    }

    /// How many spaces `owner` owns.
    pub fn owned_by(&self, owner: &str) -> StoreResult<u64> {
        self.with(|c| {
            c.prepare_cached("SELECT COUNT(*) FROM spaces WHERE owner = ?1")?
                .query_row([owner], |r| r.get::<_, i64>(0))
                .map(|n| n as u64)
        })
    }

    /// All spaces, in id order, one bounded page at a time after `after`.
    pub fn list(&self, after: Option<&str>, limit: usize) -> StoreResult<Vec<SpaceEntry>> {
        self.with(|c| {
            c.prepare_cached(
                "SELECT id, owner, created_ms, next_wake_ms, undelivered, quarantined, budget_policy \
                 FROM spaces WHERE id > ?1 ORDER BY id LIMIT ?2",
            )?
            .query_map(params![after.unwrap_or(""), limit as i64], entry_from_row)?
            .collect()
        })
    }

    /// Every space, in id order (the console sorts and filters them; a
    /// row is small, so 10,000 spaces are a few hundred kilobytes).
    pub fn all(&self) -> StoreResult<Vec<SpaceEntry>> {
        self.with(|c| {
            c.prepare_cached(
                "SELECT id, owner, created_ms, next_wake_ms, undelivered, quarantined, budget_policy \
                 FROM spaces ORDER BY id",
            )?
            .query_map([], entry_from_row)?
            .collect()
        })
    }

    pub fn count(&self) -> StoreResult<u64> {
        self.with(|c| c.query_row("SELECT COUNT(*) FROM spaces", [], |r| r.get::<_, i64>(0)))
            .map(|n| n as u64)
    }

    /// Boot discovery: every healthy space with undelivered events or a wake
    /// due at or before `now_ms`. Two index range scans, never a table scan.
    pub fn discover(&self, now_ms: u64) -> StoreResult<Vec<Discovered>> {
        self.with(|c| {
            c.prepare_cached(
                "SELECT id, next_wake_ms, undelivered FROM spaces \
                     WHERE undelivered = 1 AND quarantined IS NULL \
                 UNION \
                 SELECT id, next_wake_ms, undelivered FROM spaces \
                     WHERE next_wake_ms IS NOT NULL AND next_wake_ms <= ?1 AND quarantined IS NULL",
            )?
            .query_map([now_ms as i64], |r| {
                Ok(Discovered {
                    id: r.get(0)?,
                    next_wake_ms: r.get::<_, Option<i64>>(1)?.map(|v| v as u64),
                    undelivered: r.get::<_, i64>(2)? != 0,
                })
            })?
            .collect()
        })
    }

    /// The earliest wake of any healthy space, for the waker's sleep.
    pub fn earliest_wake(&self) -> StoreResult<Option<u64>> {
        self.with(|c| {
            c.prepare_cached(
                "SELECT MIN(next_wake_ms) FROM spaces \
                 WHERE next_wake_ms IS NOT NULL AND quarantined IS NULL",
            )?
            .query_row([], |r| r.get::<_, Option<i64>>(0))
            .map(|v| v.map(|v| v as u64))
        })
    }

    /// The next `limit` wakes in time order (the waker's bounded window).
    pub fn upcoming_wakes(&self, limit: usize) -> StoreResult<Vec<UpcomingWake>> {
        self.with(|c| {
            c.prepare_cached(
                "SELECT id, next_wake_ms, budget_policy FROM spaces \
                 WHERE next_wake_ms IS NOT NULL AND quarantined IS NULL \
                 ORDER BY next_wake_ms LIMIT ?1",
            )?
            .query_map([limit as i64], |r| {
                Ok(UpcomingWake {
                    space: r.get(0)?,
                    at_ms: r.get::<_, i64>(1)? as u64,
                    budget_policy: r.get::<_, Option<i64>>(2)?.map(|v| v != 0),
                })
            })?
            .collect()
        })
    }

    /// Marks a space as possibly carrying a budget policy. Called before the
    /// policy is committed, never undone (see `0003_budget_flag.sql`).
    pub fn mark_budget_policy(&self, id: &str) -> StoreResult<()> {
        self.with(|c| {
            c.prepare_cached("UPDATE spaces SET budget_policy = 1 WHERE id = ?1")?
                .execute([id])
        })?;
        Ok(())
    }

    /// Records that a space was found without a budget policy, unless it has
    /// been marked meanwhile (only an unknown flag is settled).
    pub fn settle_no_budget_policy(&self, id: &str) -> StoreResult<()> {
        self.with(|c| {
            c.prepare_cached(
                "UPDATE spaces SET budget_policy = 0 WHERE id = ?1 AND budget_policy IS NULL",
            )?
            .execute([id])
        })?;
        Ok(())
    }

    pub fn projection(&self, id: &str) -> StoreResult<Option<Projection>> {
        self.with(|c| {
            c.prepare_cached("SELECT next_wake_ms, undelivered FROM spaces WHERE id = ?1")?
                .query_row([id], |r| {
                    Ok(Projection {
                        next_wake_ms: r.get::<_, Option<i64>>(0)?.map(|v| v as u64),
                        undelivered: r.get::<_, i64>(1)? != 0,
                    })
                })
                .optional()
        })
    }

    /// Overwrites a space's projection. Callers uphold the early-never-late
    /// rule; see the module docs.
    pub fn set_projection(&self, id: &str, p: Projection) -> StoreResult<()> {
        self.with(|c| {
            c.prepare_cached("UPDATE spaces SET next_wake_ms = ?2, undelivered = ?3 WHERE id = ?1")?
                .execute(params![
                    id,
                    p.next_wake_ms.map(|v| v as i64),
                    p.undelivered as i64
                ])
        })?;
        Ok(())
    }

    pub fn set_quarantined(&self, id: &str, reason: Option<&str>) -> StoreResult<()> {
        self.with(|c| {
            c.execute(
                "UPDATE spaces SET quarantined = ?2 WHERE id = ?1",
                params![id, reason],
            )
        })?;
        Ok(())
    }

    /// Grants `did` access to a space (`"read"` or `"write"`); `None` revokes.
    /// Bumps the grants version in the same transaction.
    pub fn set_grant(&self, space: &str, did: &str, access: Option<&str>) -> StoreResult<()> {
        if let Some(a) = access {
            if a != "read" && a != "write" {
                return Err(StoreError::InvalidCommit(format!(
                    "access must be \"read\" or \"write\" (got {a:?})"
                )));
            }
        }
        self.with(|c| {
            let tx = c.unchecked_transaction()?;
            match access {
                Some(a) => tx.execute(
                    "INSERT OR REPLACE INTO grants (space, did, access) VALUES (?1, ?2, ?3)",
                    params![space, did, a],
                ),
                None => tx.execute(
                    "DELETE FROM grants WHERE space = ?1 AND did = ?2",
                    params![space, did],
                ),
            }?;
            tx.execute(
                "INSERT INTO host_meta (key, value) VALUES ('grants_version', '1') \
                 ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + 1",
                [],
            )?;
            tx.commit()
        })?;
        Ok(())
    }

    /// How many grant changes the host file has seen, from any process:
    /// open sessions compare it with the value under which they read their
    /// grant (see `session.rs`).
    pub fn grants_version(&self) -> StoreResult<u64> {
        let v: Option<String> = self.with(|c| {
            c.query_row(
                "SELECT value FROM host_meta WHERE key = 'grants_version'",
                [],
                |r| r.get(0),
            )
            .optional()
        })?;
        Ok(v.and_then(|v| v.parse().ok()).unwrap_or(0))
    }

    /// The access `did` has to `space`: `"owner"`, `"write"`, `"read"` or none.
    pub fn access(&self, space: &str, did: &str) -> StoreResult<Option<String>> {
        self.with(|c| {
            c.prepare_cached(
                "SELECT CASE WHEN s.owner = ?2 THEN 'owner' ELSE \
                   (SELECT g.access FROM grants g WHERE g.space = s.id AND g.did = ?2) END \
                 FROM spaces s WHERE s.id = ?1",
            )?
            .query_row(params![space, did], |r| r.get::<_, Option<String>>(0))
            .optional()
            .map(Option::flatten)
        })
    }

    /// Registers many spaces in one transaction (benchmarks, imports).
    pub fn insert_many(
        &self,
        rows: impl IntoIterator<Item = (String, String, u64, Option<u64>)>,
    ) -> StoreResult<()> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let tx = conn.transaction().at(&self.path)?;
        {
            let mut st = tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO spaces (id, owner, created_ms, next_wake_ms, budget_policy) \
                     VALUES (?1, ?2, ?3, ?4, 0)",
                )
                .at(&self.path)?;
            for (id, owner, created, wake) in rows {
                st.execute(params![id, owner, created as i64, wake.map(|v| v as i64)])
                    .at(&self.path)?;
            }
        }
        tx.commit().at(&self.path)
    }
}

/// One row of the waker's window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpcomingWake {
    pub space: String,
    pub at_ms: u64,
    /// `Some(false)`: the space has no budget policy of its own; `None`:
    /// unknown.
    pub budget_policy: Option<bool>,
}

fn entry_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<SpaceEntry> {
    Ok(SpaceEntry {
        id: r.get(0)?,
        owner: r.get(1)?,
        created_ms: r.get::<_, i64>(2)? as u64,
        next_wake_ms: r.get::<_, Option<i64>>(3)?.map(|v| v as u64),
        undelivered: r.get::<_, i64>(4)? != 0,
        quarantined: r.get(5)?,
        budget_policy: r.get::<_, Option<i64>>(6)?.map(|v| v != 0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory in a fresh temporary directory, with space `s` in it.
    fn one_space() -> (tempfile::TempDir, PathBuf, FileDirectory) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("host.sqlite");
        let d = FileDirectory::open(&path).unwrap();
        d.insert_space("s", "did:key:owner", 0).unwrap();
        (dir, path, d)
    }

    /// A grant change made by another process (the CLI) is visible to the
    /// serving host as a new grants version.
    #[test]
    fn every_grant_change_bumps_the_grants_version_seen_by_other_connections() {
        let (_dir, path, host) = one_space();
        assert_eq!(host.grants_version().unwrap(), 0);
        // The operator's CLI: another connection to the same file.
        let cli = FileDirectory::open(&path).unwrap();
        cli.set_grant("s", "did:key:bob", Some("write")).unwrap();
        assert_eq!(host.grants_version().unwrap(), 1);
        assert_eq!(
            host.access("s", "did:key:bob").unwrap().as_deref(),
            Some("write")
        );
        cli.set_grant("s", "did:key:bob", None).unwrap();
        assert_eq!(host.grants_version().unwrap(), 2);
        assert_eq!(host.access("s", "did:key:bob").unwrap(), None);
        // A refused grant changes nothing.
        assert!(cli.set_grant("s", "did:key:bob", Some("admin")).is_err());
        assert_eq!(host.grants_version().unwrap(), 2);
    }

    /// Writes nudge the checkpointer thread, which checkpoints the host
    /// file on its own connection while the directory keeps its data.
    #[test]
    fn directory_writes_are_checkpointed_off_the_write_path() {
        let (_dir, _path, d) = one_space();
        assert_eq!(d.checkpoints(), 0);
        for i in 0..(3 * CHECKPOINT_EVERY_WRITES) {
            d.set_projection(
                "s",
                Projection {
                    next_wake_ms: Some(i),
                    undelivered: i % 2 == 0,
                },
            )
            .unwrap();
        }
        let t = crate::clock::Stopwatch::start();
        while d.checkpoints() < 1 && !t.passed(std::time::Duration::from_secs(10)) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(
            d.checkpoints() >= 1,
            "no checkpoint after {} writes",
            3 * CHECKPOINT_EVERY_WRITES
        );
        assert_eq!(
            d.get("s").unwrap().unwrap().next_wake_ms,
            Some(3 * CHECKPOINT_EVERY_WRITES - 1)
        );
    }

    #[test]
    fn earliest_of_takes_the_earlier_wake_and_either_undelivered() {
        let a = Projection {
            next_wake_ms: Some(10),
            undelivered: false,
        };
        let b = Projection {
            next_wake_ms: Some(5),
            undelivered: true,
        };
        assert_eq!(a.earliest_of(b), b);
        let none = Projection::default();
        assert_eq!(none.earliest_of(a), a);
        assert_eq!(a.earliest_of(none), a);
    }

    #[test]
    fn a_due_wake_covers_undelivered_events() {
        let p = Projection {
            next_wake_ms: Some(10),
            undelivered: true,
        };
        assert!(!p.covered_by_due_wake(10).undelivered);
        assert!(!p.covered_by_due_wake(11).undelivered);
        assert!(p.covered_by_due_wake(9).undelivered);
        let no_wake = Projection {
            next_wake_ms: None,
            undelivered: true,
        };
        assert!(no_wake.covered_by_due_wake(u64::MAX).undelivered);
    }
}
