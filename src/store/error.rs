//! The store's one error type. Conversion to wire or HTTP errors happens at
//! the edge, never here.

use std::path::PathBuf;

pub type StoreResult<T> = Result<T, StoreError>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("space id {id:?} is invalid: {reason}")]
    InvalidSpaceId { id: String, reason: &'static str },

    #[error("space {0:?} does not exist")]
    UnknownSpace(String),

    #[error("space {0:?} already exists")]
    SpaceExists(String),

    #[error("space {space:?} is quarantined ({reason}); it was set aside in {path}")]
    Quarantined {
        space: String,
        reason: String,
        path: PathBuf,
    },

    #[error("{path}: the file is corrupt ({reason}); it has been quarantined")]
    Corrupt { path: PathBuf, reason: String },

    #[error(
        "{path}: schema version {found} is newer than this binary supports ({supported}); \
         upgrade spacewake before opening it"
    )]
    NewerSchema {
        path: PathBuf,
        found: i64,
        supported: i64,
    },

    #[error("operation {index} on document {doc:?}: {reason}")]
    BadPath {
        index: usize,
        doc: String,
        reason: String,
    },

    #[error("invalid commit: {0}")]
    InvalidCommit(String),

    #[error("derived commit refused: {0}")]
    NotLeaseHolder(String),

    /// A transaction relied on what the handle had read of its space, and
    /// the database found it had moved (see `spacewake_check`, PostgreSQL
    /// migration 18): nothing was written; the caller may read again.
    #[error("{0}; nothing was written")]
    Stale(String),

    #[error("index hook {hook:?} failed: {reason}")]
    Hook { hook: String, reason: String },

    #[error("{path}: {source}")]
    Sqlite {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },

    #[error("PostgreSQL store, {context}: {}", pg_message(source))]
    Postgres {
        context: String,
        #[source]
        source: postgres::Error,
    },

    #[error(
        "PostgreSQL store: schema version {found} is newer than this binary supports \
         ({supported}); upgrade spacewake before using this database"
    )]
    NewerDatabaseSchema { found: i64, supported: i64 },

    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl StoreError {
    /// True when the error says the file itself is damaged (as opposed to a
    /// refused operation); the caller should quarantine the space.
    pub fn is_corruption(&self) -> bool {
        match self {
            StoreError::Corrupt { .. } => true,
            StoreError::Sqlite { source, .. } => is_corruption_code(source),
            _ => false,
        }
    }

    /// True when another connection held a lock past the busy timeout.
    pub fn is_busy(&self) -> bool {
        matches!(
            self,
            StoreError::Sqlite { source, .. }
                if matches!(
                    source.sqlite_error_code(),
                    Some(rusqlite::ErrorCode::DatabaseBusy) | Some(rusqlite::ErrorCode::DatabaseLocked)
                )
        )
    }
}

pub(crate) fn is_corruption_code(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseCorrupt) | Some(rusqlite::ErrorCode::NotADatabase)
    )
}

/// Attaches a file path to rusqlite errors, so every error names its file.
pub(crate) trait SqlContext<T> {
    fn at(self, path: &std::path::Path) -> StoreResult<T>;
}

impl<T> SqlContext<T> for Result<T, rusqlite::Error> {
    fn at(self, path: &std::path::Path) -> StoreResult<T> {
        self.map_err(|source| StoreError::Sqlite {
            path: path.to_path_buf(),
            source,
        })
    }
}

/// Classifies an error from opening a file: corruption vs anything else.
pub(crate) fn open_error(path: &std::path::Path, e: rusqlite::Error) -> StoreError {
    if is_corruption_code(&e) {
        StoreError::Corrupt {
            path: path.to_path_buf(),
            reason: e.to_string(),
        }
    } else {
        StoreError::Sqlite {
            path: path.to_path_buf(),
            source: e,
        }
    }
}

/// A PostgreSQL error as a person reads it: the server's own message and
/// code (the driver's `Display` says only "db error" for those).
fn pg_message(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => e.to_string(),
    }
}

/// Attaches what was being done to PostgreSQL errors.
pub(crate) trait PgContext<T> {
    fn doing(self, context: &str) -> StoreResult<T>;
}

impl<T> PgContext<T> for Result<T, postgres::Error> {
    fn doing(self, context: &str) -> StoreResult<T> {
        self.map_err(|source| {
            refused_watermark(&source)
                .or_else(|| refused_check(&source))
                .unwrap_or_else(|| StoreError::Postgres {
                    context: context.to_string(),
                    source,
                })
        })
    }
}

/// A transaction's checks that `spacewake_check` refused (migration 18):
/// SW002 the space moved since the handle read it, SW003 the lease is not
/// live, SW004 no such space (the message is the space); and a new event
/// that was not.
fn refused_check(e: &postgres::Error) -> Option<StoreError> {
    let db = e.as_db_error()?;
    let message = db.message().to_string();
    match db.code().code() {
        "SW002" => Some(StoreError::Stale(message)),
        // A commit that took an event id to be new (a firing's, see
        // `PgCommit::event_seq`) met it on record.
        "23505" if db.constraint() == Some("events_pkey") => Some(StoreError::Stale(format!(
            "an event id of the commit is on record already ({message})"
        ))),
        "SW003" => Some(StoreError::NotLeaseHolder(message)),
        "SW004" => Some(StoreError::UnknownSpace(message)),
        _ => None,
    }
}

/// A watermark move that `spacewake_write` refused (SQLSTATE `SW001`,
/// migration 17), as the same error the check gives on SQLite: the
/// message carries the stream, the target and the stream's head and
/// watermark.
fn refused_watermark(e: &postgres::Error) -> Option<StoreError> {
    let db = e.as_db_error().filter(|d| d.code().code() == "SW001")?;
    let (stream, to, head, wm): (String, u64, Option<u64>, Option<u64>) =
        serde_json::from_str(db.message()).ok()?;
    let seen = head.zip(wm);
    Some(
        super::log::check_watermark(&stream, seen, to)
            .err()
            .unwrap_or_else(|| {
                StoreError::InvalidCommit(format!("watermark of stream {stream:?}: refused"))
            }),
    )
}
