//! Signing in to the console: a token `serve` makes at start (printed, and
//! written to `DATA/console.token` with mode 0600) is exchanged for a
//! session cookie. Reading needs no sign-in; every action does.
//!
//! Only hashes are kept: the token's, and each session id's, so a memory
//! dump shows neither. Sessions expire on the host clock after
//! [`SESSION_MS`]; at most [`MAX_SESSIONS`] are kept (the oldest go first).

use base64::Engine as _;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// How long a sign-in lasts.
pub const SESSION_MS: u64 = 12 * 3_600_000;
/// Sessions kept at once.
pub const MAX_SESSIONS: usize = 64;
/// The cookie that carries a session id.
pub const COOKIE: &str = "spacewake_console";
/// The token's file under the data directory.
pub const TOKEN_FILE: &str = "console.token";

type Hash = [u8; 32];

fn hash(s: &str) -> Hash {
    blake3::derive_key("spacewake console 2026-12 secret", s.as_bytes())
}

fn random_text() -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(rand::random::<[u8; 32]>())
}

/// Who may act through the console.
pub struct ConsoleAuth {
    token: Option<Hash>,
    /// Session id hash -> expiry (host clock, ms).
    sessions: Mutex<HashMap<Hash, u64>>,
}

impl ConsoleAuth {
    /// A console nobody can sign in to (no token).
    pub fn disabled() -> ConsoleAuth {
        ConsoleAuth {
            token: None,
            sessions: Mutex::default(),
        }
    }

    /// Signs in with exactly `token`.
    pub fn with_token(token: &str) -> ConsoleAuth {
        ConsoleAuth {
            token: Some(hash(token)),
            sessions: Mutex::default(),
        }
    }

    /// A fresh token for this run of the host, written to
    /// `DATA/console.token` (mode 0600, replacing the last run's).
    pub fn create(data_dir: &Path) -> anyhow::Result<(ConsoleAuth, String, PathBuf)> {
        use anyhow::Context as _;
        let token = random_text();
        let path = data_dir.join(TOKEN_FILE);
        write_private(&path, &token).with_context(|| format!("writing {}", path.display()))?;
        Ok((ConsoleAuth::with_token(&token), token, path))
    }

    /// A new session id for the right token at `now_ms`.
    pub fn sign_in(&self, token: &str, now_ms: u64) -> Option<String> {
        // Compares hashes: no early exit on the token's own bytes.
        if self.token? != hash(token.trim()) {
            return None;
        }
        let id = random_text();
        let mut s = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        s.retain(|_, expires| *expires > now_ms);
        while s.len() >= MAX_SESSIONS {
            let Some(oldest) = s.iter().min_by_key(|(_, e)| **e).map(|(k, _)| *k) else {
                break;
            };
            s.remove(&oldest);
        }
        s.insert(hash(&id), now_ms + SESSION_MS);
        Some(id)
    }

    /// Whether `session` is a live session at `now_ms`.
    pub fn signed_in(&self, session: &str, now_ms: u64) -> bool {
        let s = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        s.get(&hash(session)).is_some_and(|e| *e > now_ms)
    }

    pub fn sign_out(&self, session: &str) {
        let mut s = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        s.remove(&hash(session));
    }
}

/// The session id in a `Cookie` header, if any.
pub fn session_in(cookie_header: &str) -> Option<&str> {
    cookie_header
        .split(';')
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v)
}

fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    #[cfg(unix)]
    o.mode(0o600);
    let mut f = o.open(path)?;
    // An existing file keeps its mode through open: set it again.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    f.write_all(text.as_bytes())?;
    f.write_all(b"\n")?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_token_signs_in_and_sessions_expire() {
        let auth = ConsoleAuth::with_token("s3cret");
        assert!(auth.sign_in("wrong", 0).is_none());
        let id = auth.sign_in(" s3cret\n", 1_000).expect("signed in");
        assert!(auth.signed_in(&id, 2_000));
        assert!(!auth.signed_in("forged", 2_000));
        assert!(!auth.signed_in(&id, 1_000 + SESSION_MS), "expired");
        auth.sign_out(&id);
        assert!(!auth.signed_in(&id, 2_000));
        assert!(ConsoleAuth::disabled().sign_in("", 0).is_none());
    }

    #[test]
    fn sessions_are_bounded_oldest_first() {
        let auth = ConsoleAuth::with_token("t");
        let first = auth.sign_in("t", 0).unwrap();
        for i in 1..=MAX_SESSIONS as u64 {
            auth.sign_in("t", i).unwrap();
        }
        assert!(!auth.signed_in(&first, 100), "the oldest went");
        assert_eq!(auth.sessions.lock().unwrap().len(), MAX_SESSIONS);
    }

    #[test]
    fn the_cookie_is_found_among_others() {
        assert_eq!(session_in("a=1; spacewake_console=xyz; b=2"), Some("xyz"));
        assert_eq!(session_in("a=1"), None);
    }

    #[test]
    fn the_token_file_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let (auth, token, path) = ConsoleAuth::create(dir.path()).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap().trim(), token);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(auth.sign_in(&token, 0).is_some());
    }
}
