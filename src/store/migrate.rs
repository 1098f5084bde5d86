//! Numbered schema migrations, embedded from `schema/` at build time.
//!
//! `PRAGMA user_version` records the last migration applied to a file. Each
//! pending migration runs in its own transaction together with the version
//! bump, so a crash mid-upgrade leaves the file at a whole version. A file
//! whose version is newer than this binary knows is refused, never touched.

use super::error::{SqlContext, StoreError, StoreResult};
use rusqlite::Connection;
use std::path::Path;

/// One migration: its number (1-based, contiguous) and its DDL.
pub struct Migration {
    pub version: i64,
    pub name: &'static str,
    pub sql: &'static str,
}

pub const SPACE_MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "0001_commits_docs_streams",
        sql: include_str!("../../schema/space/0001_commits_docs_streams.sql"),
    },
    Migration {
        version: 2,
        name: "0002_schedule_index_ledger",
        sql: include_str!("../../schema/space/0002_schedule_index_ledger.sql"),
    },
    Migration {
        version: 3,
        name: "0003_action_state",
        sql: include_str!("../../schema/space/0003_action_state.sql"),
    },
    Migration {
        version: 4,
        name: "0004_schedule_delivery",
        sql: include_str!("../../schema/space/0004_schedule_delivery.sql"),
    },
    Migration {
        version: 5,
        name: "0005_action_costs",
        sql: include_str!("../../schema/space/0005_action_costs.sql"),
    },
    Migration {
        version: 6,
        name: "0006_event_failures",
        sql: include_str!("../../schema/space/0006_event_failures.sql"),
    },
    Migration {
        version: 7,
        name: "0007_history",
        sql: include_str!("../../schema/space/0007_history.sql"),
    },
    Migration {
        version: 8,
        name: "0008_schedule_pending",
        sql: include_str!("../../schema/space/0008_schedule_pending.sql"),
    },
    Migration {
        version: 9,
        name: "0009_effect_ledger",
        sql: include_str!("../../schema/space/0009_effect_ledger.sql"),
    },
    Migration {
        version: 10,
        name: "0010_fire_runs",
        sql: include_str!("../../schema/space/0010_fire_runs.sql"),
    },
    Migration {
        version: 11,
        name: "0011_schedule_wake",
        sql: include_str!("../../schema/space/0011_schedule_wake.sql"),
    },
    Migration {
        version: 12,
        name: "0012_schedule_cadence",
        sql: include_str!("../../schema/space/0012_schedule_cadence.sql"),
    },
];

pub const HOST_MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "0001_directory",
        sql: include_str!("../../schema/host/0001_directory.sql"),
    },
    Migration {
        version: 2,
        name: "0002_grants",
        sql: include_str!("../../schema/host/0002_grants.sql"),
    },
    Migration {
        version: 3,
        name: "0003_budget_flag",
        sql: include_str!("../../schema/host/0003_budget_flag.sql"),
    },
    Migration {
        version: 4,
        name: "0004_operator_signatures",
        sql: include_str!("../../schema/host/0004_operator_signatures.sql"),
    },
];

/// Switches a connection to WAL mode. Changing the journal mode needs an
/// exclusive lock and SQLite may report BUSY without consulting the busy
/// handler when two processes open a new file at once, so retry briefly.
pub fn enable_wal(conn: &Connection, path: &Path, synchronous: &str) -> StoreResult<()> {
    let mut delay_ms = 1;
    let started = crate::clock::Stopwatch::start();
    loop {
        match conn.execute_batch(&format!(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = {synchronous};"
        )) {
            Ok(()) => return Ok(()),
            Err(e)
                if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
                    && !started.passed(std::time::Duration::from_secs(10)) =>
            {
                std::thread::sleep(std::time::Duration::from_millis(delay_ms));
                delay_ms = (delay_ms * 2).min(50);
            }
            Err(e) => return Err(super::error::open_error(path, e)),
        }
    }
}

pub fn user_version(conn: &Connection, path: &Path) -> StoreResult<i64> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
        .at(path)
}

/// Brings `conn` up to `target` (the newest known version when `None`).
pub fn migrate(
    conn: &mut Connection,
    path: &Path,
    migrations: &[Migration],
    target: Option<i64>,
) -> StoreResult<()> {
    let supported = migrations.last().map_or(0, |m| m.version);
    let target = target.unwrap_or(supported);
    let found = user_version(conn, path)?;
    if found > supported {
        return Err(StoreError::NewerSchema {
            path: path.to_path_buf(),
            found,
            supported,
        });
    }
    for m in migrations
        .iter()
        .filter(|m| m.version > found && m.version <= target)
    {
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .at(path)?;
        // Another process may have migrated between our read and our lock.
        let now: i64 = tx
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .at(path)?;
        if now >= m.version {
            continue;
        }
        tx.execute_batch(m.sql).map_err(|e| StoreError::Sqlite {
            path: path.join(format!("(migration {})", m.name)),
            source: e,
        })?;
        tx.execute_batch(&format!("PRAGMA user_version = {}", m.version))
            .at(path)?;
        tx.commit().at(path)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_numbered_contiguously_from_one() {
        for set in [SPACE_MIGRATIONS, HOST_MIGRATIONS] {
            for (i, m) in set.iter().enumerate() {
                assert_eq!(m.version, i as i64 + 1, "{}", m.name);
                assert!(m.name.starts_with(&format!("{:04}_", m.version)));
            }
        }
    }
}
