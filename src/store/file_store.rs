//! The SQLite backend's store: one host's data directory of space files
//! and its directory file (`host.sqlite`).

use super::config::StoreConfig;
use super::directory::{self, FileDirectory};
use super::error::{self, SqlContext, StoreError, StoreResult};
use super::files::{check_file, configure_sqlite, FileAccess, FileHeader, BUSY_TIMEOUT};
use super::migrate::{self, SPACE_MIGRATIONS};
use super::plane::IndexHook;
use super::shared::{StoreShared, WakeListener};
use super::space::FileSpace;
use super::{hex_id, validate_space_id};
use crate::clock::Clock;
use crate::metrics::{Counter, Counters};
use rusqlite::Connection;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// What a space spent in one ledger window ([`FileStore::window_spend`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WindowSpend {
    pub scheduled_cpu_us: u64,
    pub session_cpu_us: u64,
}

/// The store of one host: a data directory of spaces.
#[derive(Clone)]
pub struct FileStore {
    shared: Arc<StoreShared>,
}

impl FileStore {
    pub fn open(
        cfg: StoreConfig,
        clock: Arc<dyn Clock>,
        counters: Arc<Counters>,
    ) -> StoreResult<FileStore> {
        configure_sqlite();
        for dir in [
            cfg.data_dir.clone(),
            cfg.data_dir.join("spaces"),
            cfg.data_dir.join("quarantine"),
        ] {
            std::fs::create_dir_all(&dir).map_err(|source| StoreError::Io {
                path: dir.clone(),
                source,
            })?;
        }
        let directory = FileDirectory::open(&cfg.data_dir.join("host.sqlite"))?;
        let host_id = directory.meta_or_init("host_id", || {
            format!("host-{}", hex_id(&rand::random::<[u8; 6]>()))
        })?;
        let holder = cfg
            .holder
            .clone()
            .unwrap_or_else(|| format!("{host_id}/{}", hex_id(&rand::random::<[u8; 6]>())));
        Ok(FileStore {
            shared: Arc::new(StoreShared {
                cfg,
                clock,
                directory,
                hooks: RwLock::new(Arc::new(Vec::new())),
                counters,
                holder,
                on_earlier: RwLock::new(None),
            }),
        })
    }

    pub fn config(&self) -> &StoreConfig {
        &self.shared.cfg
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.shared.clock
    }

    pub fn counters(&self) -> &Arc<Counters> {
        &self.shared.counters
    }

    pub fn directory(&self) -> &FileDirectory {
        &self.shared.directory
    }

    /// This process's lease-holder identity.
    pub fn holder(&self) -> &str {
        &self.shared.holder
    }

    /// Registers the listener told when a space's next wake moves earlier.
    pub fn set_wake_listener(&self, f: WakeListener) {
        *self
            .shared
            .on_earlier
            .write()
            .unwrap_or_else(|p| p.into_inner()) = Some(f);
    }

    /// Registers an index hook; it runs inside every later commit.
    pub fn add_hook(&self, hook: Arc<dyn IndexHook>) {
        let mut hooks = self.shared.hooks.write().unwrap_or_else(|p| p.into_inner());
        let mut next = (**hooks).clone();
        next.push(hook);
        *hooks = Arc::new(next);
    }

    pub fn space_path(&self, id: &str) -> PathBuf {
        self.shared
            .cfg
            .data_dir
            .join("spaces")
            .join(format!("{id}.sqlite"))
    }

    /// Creates a space: its file (fully migrated) and its directory row.
    pub fn create_space(&self, id: &str, owner: &str) -> StoreResult<()> {
        validate_space_id(id)?;
        if self.shared.directory.get(id)?.is_some() {
            return Err(StoreError::SpaceExists(id.to_string()));
        }
        let path = self.space_path(id);
        if !path.exists() {
            // Build the file under a private temporary name, then link it into
            // place: a crash never leaves a half-initialised space file, and
            // two processes creating the same space never replace a file the
            // other is already using (linking fails if the name exists).
            let tmp =
                path.with_extension(format!("creating-{}", hex_id(&rand::random::<[u8; 6]>())));
            {
                let mut conn = self.connect(&tmp)?;
                migrate::migrate(&mut conn, &tmp, SPACE_MIGRATIONS, None)?;
                conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
                    .at(&tmp)?;
            }
            for suffix in ["-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", tmp.display()));
            }
            let linked = std::fs::hard_link(&tmp, &path);
            let _ = std::fs::remove_file(&tmp);
            match linked {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(source) => {
                    return Err(StoreError::Io {
                        path: path.clone(),
                        source,
                    })
                }
            }
        }
        // A file without a directory row (a crash between the two steps) is
        // adopted here.
        self.shared
            .directory
            .insert_space(id, owner, self.shared.clock.now_ms())?;
        // Counted, then its counter set may go at once (a created space
        // is parked): creating spaces keeps no memory per space.
        self.shared.counters.space(id).inc(Counter::SpacesCreated);
        self.shared.counters.retire_space(id);
        Ok(())
    }

    /// The CPU (µs) a space's `scheduled` and `session` buckets spent in
    /// the ledger window starting at `window_start_ms`, read with one query
    /// on a connection of its own, without opening the space (no
    /// migration, no projection, no hooks): for listings of many spaces.
    /// A space held exclusively by a scheduled tenure for more than 50 ms
    /// reads as busy (an error).
    pub fn window_spend(&self, id: &str, window_start_ms: u64) -> StoreResult<WindowSpend> {
        validate_space_id(id)?;
        let path = self.space_path(id);
        let conn = Connection::open_with_flags(
            &path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| error::open_error(&path, e))?;
        conn.busy_timeout(std::time::Duration::from_millis(50))
            .at(&path)?;
        let mut spend = WindowSpend::default();
        let mut stmt = conn
            .prepare("SELECT bucket, cpu_us FROM compute_ledger WHERE window_start_ms = ?1")
            .at(&path)?;
        let rows = stmt
            .query_map([window_start_ms as i64], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
            })
            .at(&path)?;
        for row in rows {
            let (bucket, cpu) = row.at(&path)?;
            match bucket.as_str() {
                "scheduled" => spend.scheduled_cpu_us += cpu as u64,
                _ => spend.session_cpu_us += cpu as u64,
            }
        }
        Ok(spend)
    }

    /// Opens a registered space's file, upgrading its schema if needed. A
    /// corrupt or truncated file is quarantined and reported with its path.
    pub fn open_space(&self, id: &str) -> StoreResult<FileSpace> {
        self.open_space_with(id, FileAccess::Shared)
    }

    /// [`FileStore::open_space`], choosing how the file is shared.
    pub fn open_space_with(&self, id: &str, access: FileAccess) -> StoreResult<FileSpace> {
        validate_space_id(id)?;
        let entry = self
            .shared
            .directory
            .get(id)?
            .ok_or_else(|| StoreError::UnknownSpace(id.to_string()))?;
        let path = self.space_path(id);
        if let Some(reason) = entry.quarantined {
            return Err(StoreError::Quarantined {
                space: id.to_string(),
                reason,
                path: self.shared.cfg.data_dir.join("quarantine"),
            });
        }
        match self.open_file(&path, access) {
            Ok((conn, got, header)) => {
                if got != access {
                    self.shared
                        .counters
                        .space(id)
                        .inc(Counter::SpacesExclusiveFallbacks);
                }
                let view = directory::Projection {
                    next_wake_ms: entry.next_wake_ms,
                    undelivered: entry.undelivered,
                };
                FileSpace::new(id.to_string(), path, conn, got, self.shared.clone(), view)
                    .map(|s| s.with_page_size(header.page_size))
            }
            Err(e) if e.is_corruption() => {
                let reason = e.to_string();
                let moved = self.shared.quarantine_files(id, &path, &reason);
                Err(StoreError::Corrupt {
                    path,
                    reason: format!("{reason}; moved to {}", moved.display()),
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Returns the connection and the access it got: exclusive access falls
    /// back to shared when the file is not yet in WAL mode, or when another
    /// connection has it open (it would wait for that one to close).
    fn open_file(
        &self,
        path: &Path,
        access: FileAccess,
    ) -> StoreResult<(Connection, FileAccess, FileHeader)> {
        let header = check_file(path)?;
        if header.in_wal_mode && access == FileAccess::Exclusive {
            match self.open_migrated(path, true, FileAccess::Exclusive) {
                Ok(conn) => return Ok((conn, FileAccess::Exclusive, header)),
                Err(e) if e.is_busy() => {}
                Err(e) => return Err(e),
            }
        }
        let conn = self.open_migrated(path, header.in_wal_mode, FileAccess::Shared)?;
        Ok((conn, FileAccess::Shared, header))
    }

    fn open_migrated(
        &self,
        path: &Path,
        in_wal_mode: bool,
        access: FileAccess,
    ) -> StoreResult<Connection> {
        let mut conn = self.shared.connect(path, in_wal_mode, access)?;
        migrate::migrate(&mut conn, path, SPACE_MIGRATIONS, None).map_err(|e| match e {
            StoreError::Sqlite { path, source } => error::open_error(&path, source),
            other => other,
        })?;
        if access == FileAccess::Exclusive {
            // The exclusive lock is taken by the first read (above); from
            // here on, waits are the ordinary ones.
            conn.busy_timeout(BUSY_TIMEOUT).at(path)?;
        }
        Ok(conn)
    }

    fn connect(&self, path: &Path) -> StoreResult<Connection> {
        self.shared.connect(path, false, FileAccess::Shared)
    }
}
