//! The effect broker against a real HTTP server of the test's own on
//! 127.0.0.1: what the egress policy refuses (each attack once), what the
//! allowlist opens, redirects, size and time bounds, and a space's budget
//! (in-flight cap and token bucket) holding requests without touching
//! another space's.

mod common;

use common::origin;
use spacewake::clock::SystemClock;
use spacewake::effects::budget::Limits;
use spacewake::effects::http::FetchLimits;
use spacewake::effects::policy::Allowlist;
use spacewake::effects::{Broker, BrokerConfig, FetchSpec, Outcome, Request};
use spacewake::metrics::{Counter, Counters};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

fn broker_with(
    allow: &[String],
    f: impl FnOnce(&mut BrokerConfig),
) -> (Arc<Broker>, Arc<Counters>) {
    let mut cfg = BrokerConfig::new(url::Url::parse("http://127.0.0.1:1").unwrap());
    cfg.allow = Allowlist::new(allow.iter().map(|a| a.parse().unwrap()).collect());
    cfg.fetch = FetchLimits {
        connect_timeout: Duration::from_secs(2),
        total_timeout: Duration::from_secs(2),
        max_response_bytes: 1 << 20,
    };
    f(&mut cfg);
    let counters = Counters::new();
    (
        Broker::new(cfg, Arc::new(SystemClock), counters.clone()).unwrap(),
        counters,
    )
}

fn get(url: &str) -> Request {
    Request::Fetch(FetchSpec {
        url: url.to_string(),
        method: "GET".into(),
        headers: vec![],
        body: None,
    })
}

fn fetch(b: &Arc<Broker>, spec: Request) -> Outcome {
    let (tx, rx) = mpsc::channel();
    b.submit("s", spec, Box::new(move |o, _| tx.send(o).unwrap()));
    rx.recv_timeout(Duration::from_secs(20))
        .expect("an outcome")
}

fn body(o: &Outcome) -> String {
    match o {
        Outcome::Response {
            status: 200, body, ..
        } => String::from_utf8_lossy(body).into_owned(),
        other => panic!("not a 200 response: {other:?}"),
    }
}

fn refused(o: Outcome) -> String {
    match o {
        Outcome::Refused(why) => why,
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn every_spelling_of_this_machine_is_refused_and_the_server_never_hears_of_it() {
    let o = origin::start();
    let (b, counters) = broker_with(&[], |_| {});
    let port = o.addr.port();
    for (url, why) in [
        (format!("http://127.0.0.1:{port}/json"), "loopback"),
        (format!("http://2130706433:{port}/json"), "loopback"),
        (format!("http://[::ffff:127.0.0.1]:{port}/json"), "loopback"),
        (format!("http://user@127.0.0.1:{port}/json"), "loopback"),
        (format!("http://localhost:{port}/json"), "this machine"),
        ("file:///etc/passwd".to_string(), "file:"),
        ("ftp://example.com/x".to_string(), "ftp:"),
    ] {
        let r = refused(fetch(&b, get(&url)));
        assert!(r.contains(why), "{url}: {r}");
    }
    // A name (not `localhost`) that resolves to an address of this
    // machine or its network is refused after DNS, on the address.
    let host = hostname();
    let resolves = std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), port))
        .map(|a| a.collect::<Vec<_>>())
        .unwrap_or_default();
    if resolves
        .iter()
        .any(|a| spacewake::effects::policy::forbidden_address(a.ip()).is_some())
    {
        let r = refused(fetch(&b, get(&format!("http://{host}:{port}/json"))));
        assert!(r.contains("resolves to"), "{host}: {r}");
    } else {
        eprintln!("skipped the DNS case: {host:?} resolves to {resolves:?}");
    }
    assert_eq!(o.seen.total_hits(), 0);
    assert!(counters.host().get(Counter::EffectsInFlight) == 0);
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable and its length is given.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    assert_eq!(r, 0);
    let end = buf.iter().position(|&c| c == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

#[test]
fn the_allowlist_opens_the_test_server_and_nothing_on_the_way_escapes_the_policy() {
    let o = origin::start();
    let other = origin::start();
    *o.seen.far.lock().unwrap() = other.url("/auth");
    let (b, _) = broker_with(&[o.allow(), other.allow()], |_| {});
    assert_eq!(
        body(&fetch(&b, get(&o.url("/json")))),
        r#"{"answer":42,"label":"real"}"#
    );
    // Five redirects are followed; the sixth is an error.
    assert_eq!(body(&fetch(&b, get(&o.url("/redirect/5")))), "arrived");
    match fetch(&b, get(&o.url("/redirect/6"))) {
        Outcome::Failed {
            code: "tooManyRedirects",
            ..
        } => {}
        other => panic!("{other:?}"),
    }
    // Every hop is checked again.
    let r = refused(fetch(&b, get(&o.url("/to-metadata"))));
    assert!(
        r.contains("169.254.169.254") && r.contains("metadata"),
        "{r}"
    );
    // `Authorization` goes along within the origin, never to another one.
    let authorized = |url: String| {
        Request::Fetch(FetchSpec {
            url,
            method: "GET".into(),
            headers: vec![("Authorization".into(), "Bearer secret".into())],
            body: None,
        })
    };
    assert_eq!(
        body(&fetch(&b, authorized(o.url("/near")))),
        "Bearer secret"
    );
    assert_eq!(body(&fetch(&b, authorized(o.url("/far")))), "none");
}

#[test]
fn a_body_over_the_cap_and_a_dripping_server_are_errors_not_results() {
    let o = origin::start();
    let (b, _) = broker_with(&[o.allow()], |_| {});
    match fetch(&b, get(&o.url("/big"))) {
        Outcome::Failed {
            code: "tooLarge",
            message,
        } => assert!(message.contains("1048576"), "{message}"),
        other => panic!("{other:?}"),
    }
    let started = std::time::Instant::now();
    match fetch(&b, get(&o.url("/drip"))) {
        Outcome::Failed {
            code: "timeout", ..
        } => {}
        other => panic!("{other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_thousand_requests_of_one_space_are_held_by_its_budget_and_another_space_goes_through() {
    let o = origin::start();
    let (b, counters) = broker_with(&[o.allow()], |c| {
        c.budget = Limits {
            in_flight: 4,
            requests_per_second: 400.0,
            request_burst: 10.0,
            ..Limits::default()
        };
    });
    let (tx, rx) = mpsc::channel();
    for _ in 0..1000 {
        let tx = tx.clone();
        b.submit(
            "busy",
            get(&o.url("/slow")),
            Box::new(move |o, _| tx.send(("busy", o)).unwrap()),
        );
    }
    // Another space's request is not queued behind them.
    let tx2 = tx.clone();
    b.submit(
        "quiet",
        get(&o.url("/text")),
        Box::new(move |o, _| tx2.send(("quiet", o)).unwrap()),
    );
    let mut busy_before_quiet = 0;
    let mut busy = 0;
    let mut quiet_seen = false;
    for _ in 0..1001 {
        let (who, out) = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("every request is answered");
        assert!(
            matches!(out, Outcome::Response { status: 200, .. }),
            "{out:?}"
        );
        if who == "quiet" {
            quiet_seen = true;
            busy_before_quiet = busy;
        } else {
            busy += 1;
        }
    }
    assert!(quiet_seen && busy == 1000);
    assert!(
        busy_before_quiet < 100,
        "the quiet space waited for {busy_before_quiet}"
    );
    assert!(
        o.seen
            .most_at_once
            .load(std::sync::atomic::Ordering::SeqCst)
            <= 5
    );
    assert!(counters.space_value("busy", Counter::EffectsHeld) >= 900);
    assert_eq!(counters.space_value("quiet", Counter::EffectsHeld), 0);
    assert_eq!(counters.host().get(Counter::EffectsInFlight), 0);
    assert_eq!(
        counters.space_value("busy", Counter::EffectsBytes),
        4 * 1000
    );
}
