//! SQLite file mechanics of a space file: how a connection is opened and
//! shared, which files stay beside it, the structural checks before SQLite
//! reads it, and moving a bad one aside.

use super::config::Synchronous;
use super::error::{self, SqlContext, StoreError, StoreResult};
use super::migrate;
use super::shared::StoreShared;
use crate::metrics::Counter;
use rusqlite::Connection;
use std::path::{Path, PathBuf};

/// How long a connection waits on another's lock before reporting busy.
pub(crate) const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long an exclusive open waits for other connections to close the
/// file before it opens it shared instead.
const EXCLUSIVE_OPEN_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

/// How a space file's connection shares the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileAccess {
    /// Other connections, in this process or others, may read and write
    /// while it is open (SQLite's shared-memory WAL index, `-shm`).
    Shared,
    /// This connection alone until it closes or reopens shared
    /// ([`FileSpace::share`]): SQLite keeps the WAL index in its own memory, so
    /// opening sets up no `-shm` mapping and no transaction takes its file
    /// locks — about a fifth of a scheduled wake's CPU. Anyone else opening
    /// the file meanwhile waits (the busy timeout), so it is for short
    /// tenures: a scheduled wake with nobody attached.
    Exclusive,
}

impl StoreShared {
    /// Opens a space file's connection. `in_wal_mode`: the file's header
    /// already says WAL (journal mode is persistent), so no `journal_mode`
    /// pragma is needed — and only then may the access be exclusive, which
    /// must be chosen before the first read.
    pub(crate) fn connect(
        &self,
        path: &Path,
        in_wal_mode: bool,
        access: FileAccess,
    ) -> StoreResult<Connection> {
        let conn = Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE
                | rusqlite::OpenFlags::SQLITE_OPEN_CREATE
                | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| error::open_error(path, e))?;
        conn.busy_timeout(match access {
            FileAccess::Shared => BUSY_TIMEOUT,
            FileAccess::Exclusive => EXCLUSIVE_OPEN_WAIT,
        })
        .at(path)?;
        let sync = match self.cfg.synchronous {
            Synchronous::Normal => "NORMAL",
            Synchronous::Full => "FULL",
        };
        if in_wal_mode {
            if access == FileAccess::Exclusive {
                conn.execute_batch("PRAGMA locking_mode = EXCLUSIVE;")
                    .at(path)?;
            }
            conn.pragma_update(None, "synchronous", sync).at(path)?;
        } else {
            migrate::enable_wal(&conn, path, sync)?;
        }
        keep_wal_files(&conn, path)?;
        conn.set_prepared_statement_cache_capacity(64);
        if std::env::var_os("SPACEWAKE_TRACE_SQL").is_some() {
            trace_statements(&conn);
        }
        Ok(conn)
    }

    /// Moves a space's files into `quarantine/`, marks the directory and
    /// counts it. Returns where the main file went. Best effort on the file
    /// moves: the directory mark alone keeps the space from being served.
    pub(crate) fn quarantine_files(&self, id: &str, path: &Path, reason: &str) -> PathBuf {
        let stamp = self.clock.now_ms();
        let dest = self
            .cfg
            .data_dir
            .join("quarantine")
            .join(format!("{id}.{stamp}.sqlite"));
        let _ = std::fs::rename(path, &dest);
        for suffix in ["-wal", "-shm"] {
            let from = PathBuf::from(format!("{}{suffix}", path.display()));
            let to = PathBuf::from(format!("{}{suffix}", dest.display()));
            let _ = std::fs::rename(from, to);
        }
        let _ = self.directory.set_quarantined(id, Some(reason));
        self.counters.space(id).inc(Counter::SpacesQuarantined);
        tracing::error!(space = id, path = %dest.display(), reason, "space file quarantined");
        dest
    }
}

/// Prints every statement a connection runs to stderr (`SQLTRACE …`), for
/// counting what a wake costs in statements (`bench/wake-statements.sh`);
/// only with `SPACEWAKE_TRACE_SQL` set.
fn trace_statements(conn: &Connection) {
    unsafe extern "C" fn print(
        _kind: std::os::raw::c_uint,
        _ctx: *mut std::os::raw::c_void,
        stmt: *mut std::os::raw::c_void,
        _sql: *mut std::os::raw::c_void,
    ) -> std::os::raw::c_int {
        // SAFETY: for SQLITE_TRACE_STMT, SQLite passes the statement being
        // run; its text lives as long as the statement.
        let sql = unsafe { rusqlite::ffi::sqlite3_sql(stmt.cast()) };
        if !sql.is_null() {
            let text = unsafe { std::ffi::CStr::from_ptr(sql) }.to_string_lossy();
            eprintln!("SQLTRACE {}", text.replace('\n', " "));
        }
        0
    }
    // SAFETY: the handle is open for the connection's life, and the
    // callback keeps no state.
    unsafe {
        rusqlite::ffi::sqlite3_trace_v2(
            conn.handle(),
            rusqlite::ffi::SQLITE_TRACE_STMT as std::os::raw::c_uint,
            Some(print),
            std::ptr::null_mut(),
        );
    }
}

/// Process-wide SQLite settings, applied once before the first connection.
/// Memory statistics are off: with them on, every SQLite allocation takes
/// one global mutex, which space threads contended for in a herd of
/// scheduled wakes. Nothing here reads SQLite's memory statistics.
pub(crate) fn configure_sqlite() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: sqlite3_config is called before this process opens any
        // connection through the store; if SQLite was initialised already
        // (another user in the process), it returns SQLITE_MISUSE and
        // changes nothing, which is harmless.
        unsafe {
            rusqlite::ffi::sqlite3_config(
                rusqlite::ffi::SQLITE_CONFIG_MEMSTATUS,
                0 as std::ffi::c_int,
            );
        }
    });
}

/// Keeps a space's `-wal` and `-shm` files across closes instead of
/// deleting them at the last close and creating them at the next open.
/// Creating and unlinking two files per activation was about a third of a
/// scheduled wake's CPU (inode allocation on ext4). A parked space keeps a
/// WAL of at most `space::KEEP_WAL_BYTES` and a 32 KiB index.
fn keep_wal_files(conn: &Connection, path: &Path) -> StoreResult<()> {
    let mut on: std::ffi::c_int = 1;
    // SAFETY: the handle is live for the call; PERSIST_WAL reads and writes
    // one int through the pointer, which outlives the call.
    let rc = unsafe {
        rusqlite::ffi::sqlite3_file_control(
            conn.handle(),
            c"main".as_ptr(),
            rusqlite::ffi::SQLITE_FCNTL_PERSIST_WAL,
            (&mut on as *mut std::ffi::c_int).cast(),
        )
    };
    if rc != rusqlite::ffi::SQLITE_OK {
        return Err(StoreError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::other(format!("cannot keep the WAL file (SQLite code {rc})")),
        });
    }
    // During a tenure the WAL may grow to 4 MiB between resets before it is
    // cut back.
    conn.pragma_update(None, "journal_size_limit", 4 * 1024 * 1024)
        .at(path)?;
    // Closing does not checkpoint by itself: `FileSpace`'s drop decides, by the
    // WAL's frames (see `space::CLOSE_CHECKPOINT_FRAMES`).
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
        true,
    )
    .at(path)?;
    Ok(())
}

/// SQLite's WAL hook for one connection: counts the WAL's frames after each
/// commit (what the close decides its checkpoint by) and stands in for
/// SQLite's automatic checkpoint, which is itself a WAL hook and would be
/// replaced by this one.
pub(crate) struct WalWatch {
    frames: std::cell::Cell<u32>,
    /// A passive checkpoint runs after a commit leaves at least this many
    /// frames (SQLite's default: 1,000).
    autocheckpoint: std::cell::Cell<u32>,
}

impl Default for WalWatch {
    fn default() -> Self {
        WalWatch {
            frames: 0.into(),
            autocheckpoint: 1000.into(),
        }
    }
}

impl WalWatch {
    /// Installs the hook on `conn`, which must close before `self` moves or
    /// drops (a `FileSpace` declares its connection first).
    pub(crate) fn watch(&self, conn: &Connection) {
        unsafe extern "C" fn after_commit(
            watch: *mut std::ffi::c_void,
            db: *mut rusqlite::ffi::sqlite3,
            name: *const std::ffi::c_char,
            frames: std::ffi::c_int,
        ) -> std::ffi::c_int {
            // SAFETY: `watch` is the `WalWatch` the hook was installed with,
            // alive while its connection is; SQLite calls this on the
            // connection's own thread, after the commit, outside any lock.
            let watch = unsafe { &*(watch as *const WalWatch) };
            let frames = u32::try_from(frames).unwrap_or(0);
            watch.frames.set(frames);
            let limit = watch.autocheckpoint.get();
            if limit > 0 && frames >= limit {
                // SAFETY: as SQLite's own automatic checkpoint does, from
                // its WAL hook, with the database name it passed.
                unsafe {
                    rusqlite::ffi::sqlite3_wal_checkpoint_v2(
                        db,
                        name,
                        rusqlite::ffi::SQLITE_CHECKPOINT_PASSIVE,
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                    );
                }
            }
            rusqlite::ffi::SQLITE_OK
        }
        // SAFETY: the handle is live; the pointer stays valid for the
        // connection's life (see above).
        unsafe {
            rusqlite::ffi::sqlite3_wal_hook(
                conn.handle(),
                Some(after_commit),
                self as *const WalWatch as *mut std::ffi::c_void,
            );
        }
    }

    /// The WAL's frames after this connection's last commit.
    pub(crate) fn frames(&self) -> u32 {
        self.frames.get()
    }

    /// The WAL was checkpointed and emptied: no frames left.
    pub(crate) fn forget_frames(&self) {
        self.frames.set(0);
    }

    /// A passive checkpoint runs after a commit leaves this many frames (0:
    /// never).
    pub(crate) fn set_autocheckpoint(&self, frames: u32) {
        self.autocheckpoint.set(frames);
    }
}

/// What a space file's header says, read by [`check_file`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct FileHeader {
    /// WAL mode (bytes 18 and 19 both 2): journal mode is persistent.
    pub in_wal_mode: bool,
    /// Fixed for the file's life in WAL mode: the storage quota's measure
    /// needs no `PRAGMA page_size` (one statement fewer a wake).
    pub page_size: u64,
}

/// Cheap structural checks of a space file before SQLite sees it: SQLite
/// treats an empty file as a new database and reads past a truncated end as
/// zeros, both of which would hide data loss.
pub(crate) fn check_file(path: &Path) -> StoreResult<FileHeader> {
    use std::io::Read;
    let corrupt = |reason: String| StoreError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let len = meta.len();
    if len == 0 {
        return Err(corrupt("the file is empty (truncated)".into()));
    }
    let mut header = [0u8; 100];
    let mut f = std::fs::File::open(path).map_err(|source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    if len < 100 || f.read_exact(&mut header).is_err() {
        return Err(corrupt(format!(
            "the file is {len} bytes, shorter than a SQLite header"
        )));
    }
    if &header[..16] != b"SQLite format 3\0" {
        return Err(corrupt(
            "the file does not start with a SQLite header".into(),
        ));
    }
    let page_size = match u16::from_be_bytes([header[16], header[17]]) {
        1 => 65_536u64,
        n => n as u64,
    };
    if !(512..=65_536).contains(&page_size) || !page_size.is_power_of_two() {
        return Err(corrupt(format!(
            "the header names an invalid page size {page_size}"
        )));
    }
    let change_counter = u32::from_be_bytes([header[24], header[25], header[26], header[27]]);
    let valid_for = u32::from_be_bytes([header[92], header[93], header[94], header[95]]);
    let pages = u32::from_be_bytes([header[28], header[29], header[30], header[31]]) as u64;
    if change_counter == valid_for && pages > 0 && len < pages * page_size {
        // Shorter than its header says. Legitimate only while the WAL
        // beside it holds every missing page: a checkpoint that died after
        // writing the first page (the new size) and before the pages past
        // the old end. Closed spaces keep their WAL, so this is not rare.
        let wal = wal_path(path);
        let committed = committed_wal_pages(&wal, page_size).map_err(|source| StoreError::Io {
            path: wal.clone(),
            source,
        })?;
        // Pages past the last commit's size are not needed (nor bounded by
        // a corrupt header's count).
        let supplied = committed.is_some_and(|(held, size)| {
            (len / page_size + 1..=pages.min(size)).all(|p| held.contains(&p))
        });
        if !supplied {
            return Err(corrupt(format!(
                "the file is truncated: {len} bytes, the header says {} ({pages} pages of \
                 {page_size}), and its WAL does not hold the pages missing",
                pages * page_size
            )));
        }
    }
    Ok(FileHeader {
        in_wal_mode: header[18] == 2 && header[19] == 2,
        page_size,
    })
}

/// The WAL file beside space file `db`.
pub(crate) fn wal_path(db: &Path) -> PathBuf {
    PathBuf::from(format!("{}-wal", db.display()))
}

/// The pages the WAL at `wal` holds committed frames for, and the
/// database's size in pages after its last commit; `None` if it holds no
/// commit (missing, empty, another page size, or a bad header). Read as
/// SQLite recovers a WAL, one frame at a time: frames carry the header's
/// salts and a checksum chained from it, and only frames up to the last
/// commit frame count.
fn committed_wal_pages(
    wal: &Path,
    page_size: u64,
) -> std::io::Result<Option<(std::collections::HashSet<u64>, u64)>> {
    use std::io::Read;
    let file = match std::fs::File::open(wal) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut r = std::io::BufReader::with_capacity(1 << 16, file);
    let word = |b: &[u8], at: usize| u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let mut head = [0u8; 32];
    if r.read_exact(&mut head).is_err() || word(&head, 8) as u64 != page_size {
        return Ok(None);
    }
    let big_endian = match word(&head, 0) {
        0x377f_0682 => false,
        0x377f_0683 => true,
        _ => return Ok(None),
    };
    let (mut s1, mut s2) = wal_checksum(&head[..24], big_endian, (0, 0));
    if (s1, s2) != (word(&head, 24), word(&head, 28)) {
        return Ok(None);
    }
    let mut frame = vec![0u8; 24 + page_size as usize];
    let (mut held, mut uncommitted, mut size) =
        (std::collections::HashSet::new(), Vec::new(), None);
    // A short read is the WAL's end (a frame cut short was never committed).
    while r.read_exact(&mut frame).is_ok() {
        if frame[8..16] != head[16..24] {
            break;
        }
        (s1, s2) = wal_checksum(&frame[..8], big_endian, (s1, s2));
        (s1, s2) = wal_checksum(&frame[24..], big_endian, (s1, s2));
        if (s1, s2) != (word(&frame, 16), word(&frame, 20)) {
            break;
        }
        uncommitted.push(word(&frame, 0) as u64);
        if word(&frame, 4) != 0 {
            held.extend(uncommitted.drain(..));
            size = Some(word(&frame, 4) as u64);
        }
    }
    Ok(size.map(|size| (held, size)))
}

/// SQLite's WAL checksum of `data` (a multiple of 8 bytes), continuing `s`.
fn wal_checksum(data: &[u8], big_endian: bool, s: (u32, u32)) -> (u32, u32) {
    let (mut s1, mut s2) = s;
    for pair in data.chunks_exact(8) {
        let w = |b: &[u8]| {
            let b = [b[0], b[1], b[2], b[3]];
            if big_endian {
                u32::from_be_bytes(b)
            } else {
                u32::from_le_bytes(b)
            }
        };
        s1 = s1.wrapping_add(w(&pair[..4])).wrapping_add(s2);
        s2 = s2.wrapping_add(w(&pair[4..])).wrapping_add(s1);
    }
    (s1, s2)
}
