//! The console's guard on a real `spacewake serve` process
//! (`spec/console.md`, *Headers, Host and sign-in limit*): a `Host` that
//! names neither the listen address nor a public origin is refused before
//! any page or action, every answer forbids framing, sniffing and inline
//! code (and the pages need none), and sign-in attempts are limited per
//! peer address.

mod common;

use common::server::Server;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One request with `host` as its `Host`; status, headers (lower-cased
/// names), body.
fn request(
    addr: &str,
    method: &str,
    path: &str,
    host: &str,
    extra: &[(&str, &str)],
    body: &str,
) -> (u16, Vec<(String, String)>, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in extra {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut raw = String::new();
    let _ = s.read_to_string(&mut raw);
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

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn sign_in(server: &Server, token: &str) -> (u16, Vec<(String, String)>, String) {
    let origin = format!("http://{}", server.addr);
    request(
        &server.addr,
        "POST",
        "/console/sign-in",
        &server.addr,
        &[
            ("Content-Type", "application/x-www-form-urlencoded"),
            ("Origin", &origin),
        ],
        &format!("token={token}&next=%2Fconsole"),
    )
}

#[test]
fn the_console_answers_only_its_own_host_and_says_it_may_not_be_framed() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &["--public-origin", "https://console.example.com"],
    );
    let addr = server.addr.clone();
    let port = addr.rsplit_once(':').unwrap().1;
    let token = std::fs::read_to_string(dir.path().join("console.token")).unwrap();
    let token = token.trim();

    // The rebinding shape: another name, reads and actions alike, even a
    // sign-in with the right token and an Origin matching that Host.
    let (status, headers, body) = request(&addr, "GET", "/console", "evil.example", &[], "");
    assert_eq!(status, 421, "{body}");
    assert!(body.contains("Wrong host"), "{body}");
    assert_eq!(header(&headers, "x-frame-options"), Some("DENY"));
    let evil_port = format!("evil.example:{port}");
    let (status, headers, _) = request(
        &addr,
        "POST",
        "/console/sign-in",
        &evil_port,
        &[
            ("Content-Type", "application/x-www-form-urlencoded"),
            ("Origin", &format!("http://{evil_port}")),
        ],
        &format!("token={token}"),
    );
    assert_eq!(status, 421);
    assert!(header(&headers, "set-cookie").is_none(), "no session given");
    assert_eq!(server.host_counter("operator", "consoleWrongHost"), 2);
    assert_eq!(server.host_counter("operator", "consoleSignIns"), 0);
    // Not the console's business: the health route answers any Host.
    let (status, _, _) = request(&addr, "GET", "/api/health/stats", "evil.example", &[], "");
    assert_eq!(status, 200);

    // Its own names: the listen address, localhost on that port, the
    // public origin (default port or explicit).
    let mut page = String::new();
    for host in [
        addr.clone(),
        format!("localhost:{port}"),
        "console.example.com".into(),
        "console.example.com:443".into(),
    ] {
        let (status, headers, body) = request(&addr, "GET", "/console", &host, &[], "");
        assert_eq!(status, 200, "{host}: {body}");
        assert_eq!(header(&headers, "x-frame-options"), Some("DENY"));
        assert_eq!(header(&headers, "x-content-type-options"), Some("nosniff"));
        let csp = header(&headers, "content-security-policy").unwrap();
        for directive in [
            "frame-ancestors 'none'",
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "form-action 'self'",
        ] {
            assert!(csp.contains(directive), "{csp}");
        }
        page = body;
    }
    assert_eq!(server.host_counter("operator", "consoleWrongHost"), 2);

    // The policy holds the pages: no inline style or script (not even an
    // attribute), the sheet and script served from the console itself.
    assert!(!page.contains("<style"), "no inline style sheet");
    assert!(!page.contains(" style="), "no inline style attribute");
    let handler = page.split(" on").skip(1).find(|rest| {
        let name = rest.trim_start_matches(|c: char| c.is_ascii_lowercase());
        name.len() < rest.len() && name.starts_with('=')
    });
    assert!(handler.is_none(), "an inline event handler: {handler:?}");
    let external = r#"<script src="/console/refresh.js"></script>"#;
    assert_eq!(page.matches("<script").count(), 1, "{page}");
    assert!(page.contains(external), "{page}");
    assert!(page.contains(r#"<link rel="stylesheet" href="/console/style.css">"#));
    for (path, kind, inside) in [
        ("/console/style.css", "text/css", "font-family"),
        (
            "/console/refresh.js",
            "text/javascript",
            "location.reload()",
        ),
    ] {
        let (status, headers, body) = request(&addr, "GET", path, &addr, &[], "");
        assert_eq!(status, 200, "{path}");
        assert!(header(&headers, "content-type").unwrap().starts_with(kind));
        assert_eq!(header(&headers, "x-content-type-options"), Some("nosniff"));
        assert!(body.contains(inside), "{path}: {body}");
    }

    // And a sign-in at the right name works.
    let (status, headers, _) = sign_in(&server, token);
    assert_eq!(status, 303);
    assert!(header(&headers, "set-cookie").is_some());
    assert_eq!(server.host_counter("operator", "consoleSignIns"), 1);
}

#[test]
fn sign_in_attempts_are_limited_per_address() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--console-sign-ins-per-minute", "3"]);
    let token = std::fs::read_to_string(dir.path().join("console.token")).unwrap();
    for _ in 0..3 {
        let (status, _, _) = sign_in(&server, "not-the-token");
        assert_eq!(status, 401);
    }
    // Past the limit even the right token is refused: at 3 a minute, one
    // attempt comes back every 20 s.
    let (status, headers, body) = sign_in(&server, token.trim());
    assert_eq!(status, 429, "{body}");
    let retry: u64 = header(&headers, "retry-after").unwrap().parse().unwrap();
    assert!((1..=20).contains(&retry), "{retry}");
    assert!(body.contains("Too many sign-in attempts"), "{body}");
    assert!(header(&headers, "set-cookie").is_none());
    assert_eq!(
        server.host_counter("operator", "consoleSignInsRateLimited"),
        1
    );
    assert_eq!(server.host_counter("operator", "consoleSignInsRefused"), 3);
    assert_eq!(server.host_counter("operator", "consoleSignIns"), 0);
    // Pages are not limited.
    let (status, _, _) = request(&server.addr, "GET", "/console", &server.addr, &[], "");
    assert_eq!(status, 200);
}

#[test]
fn a_public_origin_that_is_not_an_origin_stops_serve_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let Err((code, log)) =
        Server::try_start(dir.path(), &["--public-origin", "console.example.com"])
    else {
        panic!("serve started with a public origin that has no scheme");
    };
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains("--public-origin"), "{log}");
    assert!(log.contains("is not an origin"), "{log}");
}

#[test]
fn with_console_read_token_only_a_signed_in_browser_reads_the_pages() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--console-read", "token"]);
    let get = |path: &str, cookie: Option<&str>| {
        let extra: Vec<(&str, &str)> = cookie.map(|c| ("Cookie", c)).into_iter().collect();
        request(&server.addr, "GET", path, &server.addr, &extra, "")
    };
    for path in ["/console", "/console/spaces", "/console/spaces/x", "/"] {
        let (status, _, body) = get(path, None);
        assert_eq!(status, 401, "{path}");
        assert!(body.contains("Sign in to read"), "{path}: {body}");
        assert!(body.contains("id=\"token\""), "the sign-in form is there");
        assert!(!body.contains("spacesRegistered"), "{body}");
    }
    assert_eq!(server.host_counter("operator", "consoleReadsRefused"), 4);
    // What the sign-in page is made of, and the machine routes, stay open.
    for path in ["/console/style.css", "/metrics", "/api/health/stats"] {
        let (status, _, _) = get(path, None);
        assert_eq!(status, 200, "{path}");
    }
    let token = std::fs::read_to_string(dir.path().join("console.token")).unwrap();
    let (status, headers, _) = sign_in(&server, token.trim());
    assert_eq!(status, 303);
    let cookie = header(&headers, "set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let (status, _, body) = get("/console", Some(&cookie));
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with("<!DOCTYPE html>"), "{body}");
}
