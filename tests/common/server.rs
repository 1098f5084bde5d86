//! A real `spacewake serve` process for end-to-end tests: started on a free
//! port, read through its health route, stopped by signal.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Server {
    pub child: Child,
    pub addr: String,
    pub data: PathBuf,
    /// What the server wrote to stderr so far (its log), line by line.
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `spacewake` binary with the environment tests must not inherit.
pub fn spacewake() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_spacewake"));
    for var in [
        "SPACEWAKE_DATA",
        "SPACEWAKE_SERVER",
        "SPACEWAKE_SPACE",
        "SPACEWAKE_KEY",
        "SPACEWAKE_LISTEN",
        "SPACEWAKE_STORE",
    ] {
        c.env_remove(var);
    }
    c
}

impl Server {
    /// `serve` on `data` with a short idle time, on a free port.
    pub fn start(data: &Path, extra: &[&str]) -> Server {
        Self::try_start(data, extra)
            .unwrap_or_else(|(code, log)| panic!("serve did not start (exit {code:?}):\n{log}"))
    }

    /// Like [`Server::start`]; `Err` carries the exit code and what it
    /// logged when it exited instead of listening.
    pub fn try_start(data: &Path, extra: &[&str]) -> Result<Server, (Option<i32>, String)> {
        let mut cmd = spacewake();
        cmd.args(["serve", "--listen", "127.0.0.1:0"]);
        if !extra.contains(&"--idle-park-ms") {
            cmd.args(["--idle-park-ms", "150"]);
        }
        let mut child = cmd
            .args(extra)
            .arg("--data")
            .arg(data)
            .env(
                "SPACEWAKE_LOG",
                std::env::var("SPACEWAKE_TEST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = log.clone();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let Some(Ok(line)) = lines.next() else {
            let code = child.wait().ok().and_then(|s| s.code());
            // Let the log reader finish.
            std::thread::sleep(Duration::from_millis(50));
            return Err((code, log.lock().unwrap().join("\n")));
        };
        // Keep reading stdout (into the log, after stderr's lines) so the
        // server never blocks on a full pipe.
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let addr = line.strip_prefix("listening on ").unwrap().to_string();
        Ok(Server {
            child,
            addr,
            data: data.to_path_buf(),
            log,
        })
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(unsafe { libc::kill(self.pid(), sig) }, 0);
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits up to `limit` for the process to exit.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let t = Instant::now();
        while t.elapsed() < limit {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    pub fn ws_url(&self) -> String {
        format!("ws://{}/ws", self.addr)
    }

    pub fn stats(&self) -> Value {
        serde_json::from_str(&http(&self.addr, "GET", "/api/health/stats", &[], b"").1).unwrap()
    }

    pub fn space_counter(&self, space: &str, block: &str, name: &str) -> i64 {
        self.stats()["servingLoop"]["spaces"][space][block][name]
            .as_i64()
            .unwrap_or(0)
    }

    pub fn host_counter(&self, block: &str, name: &str) -> i64 {
        self.stats()["servingLoop"][block][name]
            .as_i64()
            .unwrap_or(0)
    }

    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }
}

/// One HTTP/1.1 request on a fresh connection; `(status, body)`.
pub fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> (u16, String) {
    let (status, _, body) = http_full(addr, method, path, headers, body);
    (status, body)
}

/// [`http`] that fails instead of panicking when the server is gone
/// (connection refused or reset): `Err` with the reason.
pub fn try_http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\nContent-Type: application/json\r\n", body.len());
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    s.write_all(body)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let status = raw
        .get(9..12)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status line in {raw:?}")))?;
    let body = raw
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    Ok((status, body))
}

/// [`http`] with the response headers (lower-cased names).
pub fn http_full(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> (u16, Vec<(String, String)>, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\nContent-Type: application/json\r\n", body.len());
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    // The server may answer (and close) before reading a large body.
    let _ = s.write_all(body);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let status = raw[9..12].parse().unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let headers = head
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers, body.to_string())
}

/// Polls `f` until it holds, failing the test after 15 s.
pub fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One operator API request signed by `who` at `time_ms`: `(status, body)`
/// (a body that is not JSON comes back as `{"text": …}`).
pub fn operator_call(
    server: &Server,
    who: &spacewake::protocol::Identity,
    time_ms: u64,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
    let headers = vec![
        ("x-spacewake-did", who.did()),
        ("x-spacewake-time", time_ms.to_string()),
        (
            "x-spacewake-signature",
            spacewake::protocol::sign_operator(who, time_ms, method, path, &bytes),
        ),
    ];
    let (status, _, text) = http_full(&server.addr, method, path, &headers, &bytes);
    let v = serde_json::from_str(&text).unwrap_or_else(|_| serde_json::json!({ "text": text }));
    (status, v)
}
