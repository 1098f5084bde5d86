//! A real headless Chromium driven over the W3C WebDriver protocol by
//! `chromedriver` (both from the distribution's packages; `.ci/run`
//! installs them). The protocol is JSON over HTTP on loopback; this client
//! speaks the few commands the console tests use. (The WebDriver crates
//! bring some forty dependencies, with second major versions of `http`,
//! `thiserror` and `cookie`, for what is a dozen requests here.)

use base64::Engine as _;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The W3C name of an element reference in JSON.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
}

fn find_binary(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| names.iter().map(move |n| dir.join(n)))
        .find(|p| p.is_file())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One request to the driver: the `value` of its JSON answer, or the
/// WebDriver error it reported.
fn request(port: u16, method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
    // chromedriver keeps the connection open whatever the request says:
    // read the head, then exactly the announced body.
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err(format!("no answer to {method} {path}"));
        }
        raw.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).to_ascii_lowercase();
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok());
    let chunked = head.contains("transfer-encoding: chunked");
    loop {
        let have = raw.len() - head_end;
        let done = match length {
            Some(n) => have >= n,
            None => chunked && raw.ends_with(b"0\r\n\r\n"),
        };
        if done {
            break;
        }
        let n = s.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
    }
    let mut text = String::from_utf8_lossy(&raw[head_end..]).into_owned();
    if chunked {
        text = dechunk(&text);
    }
    let v: Value =
        serde_json::from_str(&text).map_err(|e| format!("{method} {path}: {e}: {text}"))?;
    let value = v["value"].clone();
    if let Some(err) = value.get("error") {
        return Err(format!("{method} {path}: {err}: {}", value["message"]));
    }
    Ok(value)
}

fn dechunk(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&tail[..n]);
        rest = &tail[n + 2..];
    }
    out
}

impl Browser {
    /// A headless Chromium, or `None` (with the reason printed) when the
    /// machine has none. With `CI=true` a missing browser fails the test.
    pub fn start() -> Option<Browser> {
        let chromium = find_binary(&["chromium", "chromium-browser", "google-chrome"]);
        let driver = find_binary(&["chromedriver"]);
        let (Some(chromium), Some(driver)) = (chromium, driver) else {
            let why =
                "no chromium and chromedriver on PATH (apt-get install chromium chromium-driver)";
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("CI=true and {why}");
            }
            println!("skipped: the browser test needs a browser: {why}");
            return None;
        };
        let port = free_port();
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting chromedriver");
        let started = Instant::now();
        while request(port, "GET", "/status", None)
            .ok()
            .and_then(|v| v["ready"].as_bool())
            != Some(true)
        {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "chromedriver did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--disable-background-networking",
                         "--window-size=1200,1600"]
            }
        }}});
        let mut browser = Browser {
            driver: child,
            port,
            session: String::new(),
        };
        let v = request(port, "POST", "/session", Some(&caps)).expect("a browser session");
        browser.session = v["sessionId"].as_str().unwrap().to_string();
        Some(browser)
    }

    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let path = format!("/session/{}{path}", self.session);
        request(self.port, method, &path, body).unwrap_or_else(|e| panic!("{e}"))
    }

    pub fn goto(&self, url: &str) {
        self.call("POST", "/url", Some(&json!({ "url": url })));
    }

    /// Runs `script` in the page (`return …` to get a value back).
    pub fn run(&self, script: &str) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            Some(&json!({"script": script, "args": []})),
        )
    }

    fn element(&self, css: &str) -> String {
        let v = self.call(
            "POST",
            "/element",
            Some(&json!({"using": "css selector", "value": css})),
        );
        v[ELEMENT].as_str().unwrap().to_string()
    }

    /// The rendered text of the first element `css` selects.
    pub fn text(&self, css: &str) -> String {
        let id = self.element(css);
        self.call("GET", &format!("/element/{id}/text"), None)
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    pub fn click(&self, css: &str) {
        let id = self.element(css);
        self.call("POST", &format!("/element/{id}/click"), Some(&json!({})));
    }

    /// Clicks what submits a form, and waits until the answer's page has
    /// loaded (a navigation started right after the click would cancel the
    /// submission).
    pub fn submit(&self, css: &str) {
        self.run("window.__beforeSubmit = true;");
        self.click(css);
        let started = Instant::now();
        while self
            .run("return window.__beforeSubmit === undefined && document.readyState === 'complete'")
            != json!(true)
        {
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "no page after {css}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn type_into(&self, css: &str, text: &str) {
        let id = self.element(css);
        self.call("POST", &format!("/element/{id}/clear"), Some(&json!({})));
        self.call(
            "POST",
            &format!("/element/{id}/value"),
            Some(&json!({ "text": text })),
        );
    }

    pub fn title(&self) -> String {
        self.call("GET", "/title", None)
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Saves a PNG of the window to `path`.
    pub fn screenshot(&self, path: &Path) {
        let b64 = self.call("GET", "/screenshot", None);
        let png = base64::engine::general_purpose::STANDARD
            .decode(b64.as_str().unwrap())
            .unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = request(
                self.port,
                "DELETE",
                &format!("/session/{}", self.session),
                None,
            );
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
