//! How an operator command reaches its host: through the running server's
//! operator API when a server holds the data directory (found through the
//! directory's lock file, or named with `--server`), or on the data
//! directory itself when none does — holding the directory's lock for the
//! command's duration, so no server can start underneath it.
//!
//! Against a server, requests are signed with the host's own key
//! (`DATA/host.key`, readable by whoever may edit the data directory), or
//! with `--key` (a did the server was started with as `--operator`).

use super::DataArgs;
use crate::clock::{Clock, SystemClock};
use crate::http_client::BlockingHttp;
use crate::protocol::Identity;
use crate::store::lock::{self, DirectoryLock, LockInfo};
use crate::store::Store;
use anyhow::{anyhow, bail, Context};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

/// The arguments every operator command takes.
#[derive(Debug, Clone, clap::Args)]
pub struct OperatorArgs {
    #[command(flatten)]
    pub data: DataArgs,
    /// A running server to act through (`host:port`, `http://…`,
    /// `https://…`, `ws://…` or `wss://…`); without it, the server holding `--data` is found through
    /// the directory's lock, and with no server the directory is edited
    /// directly.
    #[arg(long, env = "SPACEWAKE_SERVER")]
    pub server: Option<String>,
    /// The key to sign operator requests with (a did the server was started
    /// with as `--operator`); default: the host's own key in `--data`.
    #[arg(long, env = "SPACEWAKE_OPERATOR_KEY")]
    pub key: Option<PathBuf>,
}

/// Where an operator command acts.
pub enum Target {
    /// Through a running server.
    Server(Box<Remote>),
    /// On the data directory, which this process holds locked.
    Directory(Local),
}

/// A data directory edited directly.
pub struct Local {
    pub store: Store,
    pub data: PathBuf,
    /// A data directory is held locked; a fleet's database is shared by
    /// design, so nothing is locked for it.
    _lock: Option<DirectoryLock>,
}

impl Local {
    /// What reads need. With no server, nothing is active; the ledger
    /// window is the default (a server may run with another) and the
    /// host's default budget is unknown (a `serve` flag).
    pub fn view(&self, now_ms: u64) -> crate::operator::View<'_> {
        crate::operator::View {
            store: &self.store,
            now_ms,
            active: Default::default(),
            window_ms: crate::accounting::DEFAULT_WINDOW_MS,
            host_budget: None,
            host_effects: None,
        }
    }
}

impl Target {
    /// Finds where `command` should act, as the module doc says.
    pub fn find(args: &OperatorArgs, command: &str) -> anyhow::Result<Target> {
        let data = &args.data.data;
        if let Some(server) = &args.server {
            let base = server_base(server)?;
            let key = signing_key(args)?;
            return Ok(Target::Server(Box::new(Remote::new(base, key, None)?)));
        }
        if let Some(url) = &args.data.store {
            let store = super::open_database(
                url,
                crate::store::StoreConfig::new(data),
                std::sync::Arc::new(SystemClock),
            )?;
            return Ok(Target::Directory(Local {
                store,
                data: PathBuf::from(super::redact(url)),
                _lock: None,
            }));
        }
        if let Some(info) = lock::holder(data) {
            let Some(addr) = info.listen.clone() else {
                bail!(
                    "the data directory {} is in use by another spacewake process (pid {}, `{}`); \
                     try again when it is done",
                    data.display(),
                    info.pid,
                    info.command
                );
            };
            let key = signing_key(args)?;
            let base = format!("http://{addr}");
            return Ok(Target::Server(Box::new(Remote::new(
                base,
                key,
                Some(info),
            )?)));
        }
        // Refuse a directory that is not one before creating a lock file in it.
        if !data.join("host.sqlite").is_file() {
            super::open_existing(data)?;
        }
        let lock = DirectoryLock::acquire(
            data,
            LockInfo {
                pid: std::process::id(),
                command: command.to_string(),
                listen: None,
                started_at_ms: SystemClock.now_ms(),
            },
        )?;
        let store = super::open_existing(data)?;
        Ok(Target::Directory(Local {
            store,
            data: data.clone(),
            _lock: Some(lock),
        }))
    }

    /// The last line of a command's output: which way it acted.
    pub fn note(&self) -> String {
        match self {
            Target::Server(r) => match &r.lock {
                Some(info) => format!(
                    "(via the running server at {}, pid {}, which holds the data directory)",
                    r.addr.trim_start_matches("http://"),
                    info.pid
                ),
                None => format!("(via the server at {})", r.addr),
            },
            Target::Directory(l) if l.store.postgres().is_some() => {
                format!("(on the fleet's database {} directly)", l.data.display())
            }
            Target::Directory(l) => format!(
                "(on the data directory {} directly: no server is running)",
                l.data.display()
            ),
        }
    }
}

/// The signing key: `--key`, else the host's key in the data directory.
fn signing_key(args: &OperatorArgs) -> anyhow::Result<Identity> {
    let path = match &args.key {
        Some(k) => k.clone(),
        None => args.data.data.join(crate::operator::HOST_KEY_FILE),
    };
    if !path.exists() {
        bail!(
            "no key to sign operator requests with: {} does not exist \
             (pass --key with an operator's key, or --data for the host's data directory)",
            path.display()
        );
    }
    Identity::load(&path).with_context(|| format!("reading the key {}", path.display()))
}

/// The base URL of a server named as `host:port`, `http://host:port/…`,
/// `https://…`, `ws://…` or `wss://…` (a WebSocket URL names the same
/// host's HTTP side).
pub fn server_base(server: &str) -> anyhow::Result<String> {
    let (scheme, rest) = [
        ("https://", "https"),
        ("wss://", "https"),
        ("http://", "http"),
        ("ws://", "http"),
    ]
    .iter()
    .find_map(|(p, s)| server.strip_prefix(p).map(|r| (*s, r)))
    .unwrap_or(("http", server));
    let addr = rest.split('/').next().unwrap_or_default();
    let valid = addr
        .rsplit_once(':')
        .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
    if !valid {
        bail!("--server {server:?} is not host:port, http(s)://host:port or ws(s)://host:port");
    }
    Ok(format!("{scheme}://{addr}"))
}

/// A running server's operator API.
pub struct Remote {
    /// `http://host:port` or `https://host:port`.
    pub addr: String,
    key: Identity,
    lock: Option<LockInfo>,
    http: BlockingHttp,
}

/// An error the server answered with.
#[derive(Debug, thiserror::Error)]
#[error("{message} ({code}, HTTP {status})")]
pub struct RemoteError {
    pub status: u16,
    pub code: String,
    pub message: String,
}

impl Remote {
    fn new(addr: String, key: Identity, lock: Option<LockInfo>) -> anyhow::Result<Remote> {
        Ok(Remote {
            addr,
            key,
            lock,
            http: BlockingHttp::new(Duration::from_secs(60), 256 << 20)
                .map_err(|e| anyhow!("cannot make an HTTP client: {e}"))?,
        })
    }

    pub fn get<T: DeserializeOwned>(&self, path_and_query: &str) -> anyhow::Result<T> {
        self.call("GET", path_and_query, None)
    }

    pub fn post<T: DeserializeOwned>(&self, path: &str, body: &Value) -> anyhow::Result<T> {
        self.call("POST", path, Some(body))
    }

    pub fn put<T: DeserializeOwned>(&self, path: &str, body: &Value) -> anyhow::Result<T> {
        self.call("PUT", path, Some(body))
    }

    pub fn delete<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        self.call("DELETE", path, None)
    }

    fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        path_and_query: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<T> {
        let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        let time = SystemClock.now_ms();
        let signature =
            crate::protocol::sign_operator(&self.key, time, method, path_and_query, &bytes);
        let request = http::Request::builder()
            .method(method)
            .uri(format!("{}{path_and_query}", self.addr))
            .header("x-spacewake-did", self.key.did())
            .header("x-spacewake-time", time.to_string())
            .header("x-spacewake-signature", signature)
            .header("content-type", "application/json")
            .body(opentelemetry_http::Bytes::from(bytes))?;
        let response = self
            .http
            .send_blocking(&request)
            .map_err(|e| anyhow!("cannot reach the server at {}: {e}", self.addr))?;
        let status = response.status().as_u16();
        let value: Value = serde_json::from_slice(response.body()).with_context(|| {
            format!(
                "the server at {} answered {status} with a body that is not JSON",
                self.addr
            )
        })?;
        if !(200..300).contains(&status) {
            let e = &value["error"];
            return Err(RemoteError {
                status,
                code: e["code"].as_str().unwrap_or("unknown").to_string(),
                message: e["message"].as_str().unwrap_or("").to_string(),
            }
            .into());
        }
        serde_json::from_value(value).with_context(|| {
            format!(
                "the server at {} answered in an unexpected shape",
                self.addr
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::server_base;

    #[test]
    fn a_server_is_host_port_http_https_or_ws_alike() {
        for s in [
            "127.0.0.1:8080",
            "http://127.0.0.1:8080",
            "http://127.0.0.1:8080/",
            "ws://127.0.0.1:8080/ws",
        ] {
            assert_eq!(server_base(s).unwrap(), "http://127.0.0.1:8080", "{s}");
        }
        for s in ["https://example.org:443", "wss://example.org:443/ws"] {
            assert_eq!(server_base(s).unwrap(), "https://example.org:443", "{s}");
        }
        assert_eq!(server_base("localhost:9").unwrap(), "http://localhost:9");
        for bad in ["127.0.0.1", "http://", "https://x", "x:port", ":80"] {
            assert!(server_base(bad).is_err(), "{bad}");
        }
    }
}
