//! One host per data directory: an OS file lock on `DATA/host.lock`, held
//! for the life of the process that serves (or edits) the directory.
//!
//! # Why
//! Two `serve` processes on one directory would silently share its spaces
//! through leases, each waiting out the other's TTL. With the lock, a
//! second one exits with a sentence naming the process that has it.
//! Holding the lock also proves that no earlier process of this host is
//! alive (the kernel drops the lock when a process dies, however it dies),
//! so a restarted host may take over at once every lease its dead
//! instances left behind (see `FileSpace::acquire_lease`).
//!
//! # The file
//! The lock is `flock(2)` on `host.lock` (taken with `File::try_lock`).
//! While held, the file holds one JSON object saying who holds it —
//! [`LockInfo`]: the pid, the command, the address a server listens on,
//! since when — so an operator (or the CLI, looking for the running
//! server) can read it. The contents mean nothing unless the lock is held:
//! a dead process leaves its last contents behind.

use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The lock file's name inside a data directory.
pub const LOCK_FILE: &str = "host.lock";

/// What the holder of a data directory's lock says about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LockInfo {
    pub pid: u32,
    /// The command holding it: `serve`, or an operator command editing the
    /// directory directly.
    pub command: String,
    /// Where a server listens (`127.0.0.1:8080`), once it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    pub started_at_ms: u64,
}

/// Why the lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("{}", held_message(.path, .info.as_ref()))]
    Held {
        path: PathBuf,
        info: Option<LockInfo>,
    },
    #[error("{path}: cannot lock the data directory: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn held_message(path: &Path, info: Option<&LockInfo>) -> String {
    let dir = path.parent().unwrap_or(path).display();
    match info {
        Some(i) => {
            let what = match &i.listen {
                Some(addr) => format!("`{}` listening on {addr}", i.command),
                None => format!("`{}`", i.command),
            };
            format!(
                "the data directory {dir} is in use by another spacewake process \
                 (pid {}, {what}, since {}); stop it first, or use another --data",
                i.pid,
                crate::human::format_utc_ms(i.started_at_ms)
            )
        }
        None => format!(
            "the data directory {dir} is in use by another spacewake process \
             (it holds {}); stop it first, or use another --data",
            path.display()
        ),
    }
}

/// The held lock; released when dropped (or when the process dies).
#[derive(Debug)]
pub struct DirectoryLock {
    file: File,
    path: PathBuf,
    info: LockInfo,
}

impl DirectoryLock {
    /// Takes the lock of `data_dir` (which must exist) without waiting.
    pub fn acquire(data_dir: &Path, info: LockInfo) -> Result<DirectoryLock, LockError> {
        let path = data_dir.join(LOCK_FILE);
        let io = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        // A few tries: `holder` (another command looking for the server)
        // may hold the lock for an instant.
        let mut tries = 0;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) if tries < 3 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(LockError::Held {
                        info: read_info(&path),
                        path,
                    })
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
            }
        }
        let mut lock = DirectoryLock {
            file,
            path: path.clone(),
            info,
        };
        lock.write_info()
            .map_err(|source| LockError::Io { path, source })?;
        Ok(lock)
    }

    /// Records the address the server now listens on.
    pub fn set_listen(&mut self, listen: String) -> std::io::Result<()> {
        self.info.listen = Some(listen);
        self.write_info()
    }

    pub fn info(&self) -> &LockInfo {
        &self.info
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn write_info(&mut self) -> std::io::Result<()> {
        let text = serde_json::to_string(&self.info).expect("lock info serializes") + "\n";
        // One write of a short line: a reader sees the old or the new text
        // (it retries a torn read).
        self.file.set_len(0)?;
        self.file.seek(SeekFrom::Start(0))?;
        self.file.write_all(text.as_bytes())?;
        self.file.sync_data()
    }
}

/// Who holds the lock of `data_dir`, or `None` when nobody does (no
/// process serves or edits it). Never takes the lock for longer than the
/// check.
pub fn holder(data_dir: &Path) -> Option<LockInfo> {
    let path = data_dir.join(LOCK_FILE);
    let file = OpenOptions::new().read(true).write(true).open(&path).ok()?;
    match file.try_lock() {
        // Free: nobody holds it (our probe lock drops with the file).
        Ok(()) => None,
        Err(std::fs::TryLockError::WouldBlock) => read_info(&path).or(Some(LockInfo {
            pid: 0,
            command: "unknown".into(),
            listen: None,
            started_at_ms: 0,
        })),
        Err(std::fs::TryLockError::Error(_)) => None,
    }
}

fn read_info(path: &Path) -> Option<LockInfo> {
    // The holder may be rewriting it at this instant: try a few times.
    for _ in 0..5 {
        let mut text = String::new();
        if File::open(path)
            .and_then(|mut f| f.read_to_string(&mut text))
            .is_ok()
        {
            if let Ok(info) = serde_json::from_str(text.trim()) {
                return Some(info);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(command: &str) -> LockInfo {
        LockInfo {
            pid: std::process::id(),
            command: command.into(),
            listen: None,
            started_at_ms: 1_767_225_600_000,
        }
    }

    #[test]
    fn a_second_holder_is_refused_with_the_first_ones_pid_and_address() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = DirectoryLock::acquire(dir.path(), info("serve")).unwrap();
        first.set_listen("127.0.0.1:8080".into()).unwrap();
        let err = DirectoryLock::acquire(dir.path(), info("serve")).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(&format!("pid {}", std::process::id())),
            "{text}"
        );
        assert!(text.contains("listening on 127.0.0.1:8080"), "{text}");
        assert!(text.contains(&dir.path().display().to_string()), "{text}");
        assert!(text.contains("2026-01-01T00:00:00Z"), "{text}");
        let seen = holder(dir.path()).expect("held");
        assert_eq!(seen.listen.as_deref(), Some("127.0.0.1:8080"));
        drop(first);
        assert_eq!(holder(dir.path()), None, "released on drop");
        DirectoryLock::acquire(dir.path(), info("schedules")).expect("free again");
    }

    #[test]
    fn no_lock_file_means_nobody_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(holder(dir.path()), None);
    }
}
