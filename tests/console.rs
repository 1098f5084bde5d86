//! The operator console on a real `spacewake serve` process: its pages are
//! served without sign-in, render what the operator API's JSON twins say,
//! and follow the host as it changes (a trigger's fire, a pause). HTML is
//! checked by the rows and cells the pages mark (`data-space`,
//! `data-entry`, `class="status"`).

mod common;

use common::server::{http_full, wait_for, Server};
use common::wire::{connect, deploy};
use serde_json::{json, Value};
use spacewake::clock::{Clock, SystemClock};
use spacewake::protocol::{sign_operator, Identity};

fn get(server: &Server, path: &str) -> (u16, String) {
    let (status, _, body) = http_full(&server.addr, "GET", path, &[], b"");
    (status, body)
}

/// A signed operator request (the JSON twin of a page).
fn call(server: &Server, method: &str, path: &str) -> Value {
    let who = Identity::load(&server.data.join("host.key")).unwrap();
    let t = SystemClock.now_ms();
    let headers = vec![
        ("x-spacewake-did", who.did()),
        ("x-spacewake-time", t.to_string()),
        (
            "x-spacewake-signature",
            sign_operator(&who, t, method, path, b""),
        ),
    ];
    let (status, _, text) = http_full(&server.addr, method, path, &headers, b"");
    assert!(status < 300, "{method} {path}: {status} {text}");
    serde_json::from_str(&text).unwrap()
}

/// The text of the `<td class="status">` in the row marked `data-entry`.
fn entry_status(page: &str, piece: &str, entry: u32) -> String {
    let row = page
        .split(&format!(r#"data-entry="{piece}/{entry}""#))
        .nth(1)
        .unwrap_or_else(|| panic!("no row for entry {entry}"));
    let cell = row.split(r#"class="status">"#).nth(1).unwrap();
    cell.split('<').next().unwrap().to_string()
}

fn table<'a>(page: &'a str, id: &str) -> &'a str {
    let start = page
        .find(&format!(r#"id="{id}""#))
        .unwrap_or_else(|| panic!("no table {id}"));
    let rest = &page[start..];
    &rest[..rest.find("</table>").unwrap()]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_what_the_operator_api_says_and_follows_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let me = Identity::generate();
    let mut pieces = Vec::new();
    for space in ["demo", "other"] {
        let (mut c, _) = connect(&server, &me, space).await;
        pieces.push(deploy(&mut c, json!({"value": 1})).await);
        c.close().await.unwrap();
    }
    wait_for("both parked", || {
        server.host_counter("activation", "parks") >= 2
    });
    let piece = &pieces[0];

    // `/` leads to the console; the host page renders the counters.
    let (status, headers, _) = http_full(&server.addr, "GET", "/", &[], b"");
    assert!((300..400).contains(&status), "{status}");
    assert!(headers.contains(&("location".into(), "/console".into())));
    let (status, page) = get(&server, "/console");
    assert_eq!(status, 200, "{page}");
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert!(page.contains(r#"http-equiv="refresh""#), "refreshes itself");
    let registered = server.stats()["spacesRegistered"].as_u64().unwrap();
    assert_eq!(registered, 2);
    let twin = call(&server, "GET", "/api/operator/host");
    assert_eq!(twin["registered"], json!(2));
    assert_eq!(
        twin["counters"]["activation"]["bySession"]
            .as_i64()
            .unwrap(),
        server.host_counter("activation", "bySession")
    );
    assert!(
        twin["counters"].get("spaces").is_none(),
        "host-wide blocks only"
    );
    assert!(
        page.contains(r#"<th scope="row">registered</th><td class="num">2</td>"#),
        "{page}"
    );
    let by_session = server.host_counter("activation", "bySession");
    assert!(page.contains(&format!(
        r#"<th scope="row">session</th><td class="num">{by_session}</td>"#
    )));
    assert!(page.contains("<svg"), "the lateness chart");

    // The spaces table lists what the JSON twin lists, and filters.
    let twin = call(&server, "GET", "/api/operator/spaces");
    let (status, page) = get(&server, "/console/spaces");
    assert_eq!(status, 200);
    let rows = table(&page, "spaces");
    for s in twin["spaces"].as_array().unwrap() {
        let id = s["id"].as_str().unwrap();
        assert!(
            rows.contains(&format!(r#"data-space="{id}""#)),
            "{id} in {rows}"
        );
        assert!(rows.contains(s["owner"].as_str().unwrap()));
    }
    let (_, page) = get(&server, "/console/spaces?q=dem&sort=nextWake&desc=true");
    let rows = table(&page, "spaces");
    assert!(rows.contains(r#"data-space="demo""#));
    assert!(!rows.contains(r#"data-space="other""#), "filtered out");
    let (_, page) = get(&server, "/console/spaces?state=active");
    assert!(
        !table(&page, "spaces").contains("data-space"),
        "none active"
    );
    let (status, _) = get(&server, "/console/spaces?page=notanumber");
    assert_eq!(status, 200, "a bad query shows the default table");

    // A space's page: its pieces and entries as the twins have them.
    let (status, page) = get(&server, "/console/spaces/demo");
    assert_eq!(status, 200);
    assert!(table(&page, "pieces").contains(piece.as_str()));
    let entries = call(&server, "GET", "/api/operator/schedules?space=demo");
    assert_eq!(entries["entries"].as_array().unwrap().len(), 2);
    for e in entries["entries"].as_array().unwrap() {
        let n = e["entry"].as_u64().unwrap() as u32;
        assert_eq!(entry_status(&page, piece, n), e["status"].as_str().unwrap());
    }
    assert!(!table(&page, "fires").contains("<td>"), "no fires yet");

    // Trigger a wake and pause an entry through the operator API: the page
    // follows (it re-reads on every load).
    let base = format!("/api/operator/spaces/demo/schedules/{piece}");
    call(&server, "POST", &format!("{base}/0/trigger"));
    wait_for("the triggered wake delivered", || {
        server.space_counter("demo", "schedule", "delivered") == 1
    });
    call(&server, "POST", &format!("{base}/1/pause"));
    let (_, page) = get(&server, "/console/spaces/demo");
    let fires = table(&page, "fires");
    assert_eq!(fires.matches("<td>delivered</td>").count(), 1, "{fires}");
    assert_eq!(entry_status(&page, piece, 1), "paused");
    assert_eq!(entry_status(&page, piece, 0), "active");
    let ledger = call(&server, "GET", "/api/operator/spaces/demo/ledger");
    assert_eq!(
        table(&page, "ledger").matches("<tr>").count(),
        ledger["rows"].as_array().unwrap().len() + 1,
        "one row per window and bucket, and the header"
    );

    // An unknown space is a 404 page; every page was counted.
    let (status, page) = get(&server, "/console/spaces/nope");
    assert_eq!(status, 404);
    assert!(page.contains("nope"));
    assert_eq!(server.host_counter("operator", "consolePages"), 8);
}

/// Where the browser test leaves its screenshots.
fn shots() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots")
}

/// Polls `f` until it holds (pages are re-read on every load).
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !f() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(15),
            "{what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_real_browser_an_operator_signs_in_triggers_pauses_and_sets_a_budget() {
    use common::webdriver::Browser;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let me = Identity::generate();
    let mut pieces = Vec::new();
    for space in ["demo", "other", "reports"] {
        let (mut c, _) = connect(&server, &me, space).await;
        pieces.push(deploy(&mut c, json!({"value": 1})).await);
        c.close().await.unwrap();
    }
    wait_for("all parked", || {
        server.host_counter("activation", "parks") >= 3
    });
    let piece = pieces[0].clone();
    let Some(b) = Browser::start() else { return };
    let base = format!("http://{}", server.addr);

    // The host page, as the health route has it. Its refresh box is
    // unticked first (remembered by the browser): a reload in the middle
    // of typing into a form would lose the text.
    b.goto(&format!("{base}/"));
    // Under the console's content security policy (no inline code), its
    // own style sheet applies and its own script runs (it shows the box).
    assert_eq!(
        b.run(
            "return [getComputedStyle(document.querySelector('header')).display, \
             document.getElementById('refresh-control').hidden]"
        ),
        json!(["flex", false])
    );
    assert_eq!(
        b.run("return document.getElementById('refresh').checked"),
        json!(true)
    );
    b.click("#refresh");
    b.goto(&format!("{base}/"));
    assert_eq!(
        b.run("return document.getElementById('refresh').checked"),
        json!(false)
    );
    assert!(b.title().starts_with("Host"), "{}", b.title());
    let stats = server.stats();
    let registered = b.text("main table tbody tr:nth-child(1) td");
    assert_eq!(registered, stats["spacesRegistered"].to_string());

    // The spaces table: every space the JSON twin lists, then a filter.
    b.goto(&format!("{base}/console/spaces"));
    let rows = b.run("return document.querySelectorAll('#spaces tbody tr').length");
    let twin = call(&server, "GET", "/api/operator/spaces");
    assert_eq!(rows, json!(twin["spaces"].as_array().unwrap().len()));
    b.screenshot(&shots().join("spaces.png"));
    b.type_into("#q", "dem");
    b.submit("form.filters button[type=submit]");
    eventually("the filter applied", || {
        b.run("return [...document.querySelectorAll('#spaces tbody tr')].map(r => r.dataset.space)")
            == json!(["demo"])
    });

    // A space's page, read-only: the actions are there but disabled, and
    // a post without sign-in is refused (and counted).
    let page = format!("{base}/console/spaces/demo");
    b.goto(&page);
    let trigger = format!(r#"tr[data-entry="{piece}/0"] button[value=trigger]"#);
    assert_eq!(
        b.run(&format!(
            "return document.querySelector('{}').disabled",
            trigger.replace('\'', "\\'")
        )),
        json!(true)
    );
    let (status, _, _) = http_full(
        &server.addr,
        "POST",
        &format!("/console/spaces/demo/entries/{piece}/0/trigger"),
        &[],
        b"",
    );
    assert_eq!(status, 401);
    assert_eq!(server.host_counter("operator", "consoleActionsRefused"), 1);
    assert_eq!(server.space_counter("demo", "schedule", "fired"), 0);

    // A wrong token does not sign in; the printed one (also in the file) does.
    b.type_into("#token", "not-the-token");
    b.submit("#sign-in");
    eventually("the refusal", || b.title().starts_with("Not signed in"));
    assert_eq!(server.host_counter("operator", "consoleSignInsRefused"), 1);
    let token = std::fs::read_to_string(server.data.join("console.token")).unwrap();
    assert!(
        server.log_text().contains(token.trim()),
        "serve printed the token"
    );
    b.goto(&page);
    b.type_into("#token", token.trim());
    b.submit("#sign-in");
    eventually("signed in, back on the space page", || {
        b.title().starts_with("Space demo")
            && b.run("return !!document.getElementById('sign-out')") == json!(true)
    });
    assert_eq!(server.host_counter("operator", "consoleSignIns"), 1);

    // Trigger entry 0: the fire appears in the fires list.
    b.submit(&trigger);
    wait_for("the triggered wake", || {
        server.space_counter("demo", "schedule", "fired") == 1
    });
    eventually("the fire listed", || {
        b.goto(&page);
        b.text("#fires").contains("delivered")
    });
    // Pause entry 1: its status changes.
    b.submit(&format!(
        r#"tr[data-entry="{piece}/1"] button[value=pause]"#
    ));
    eventually("paused", || {
        b.goto(&page);
        b.text(&format!(r#"tr[data-entry="{piece}/1"] td.status"#)) == "paused"
    });
    // Set the space's scheduled budget.
    b.type_into("#budget-ms", "250");
    b.submit("#set-budget");
    eventually("the budget form answered", || {
        let title = b.title();
        assert!(
            !title.starts_with("Not done"),
            "refused: {}",
            b.text("main")
        );
        title.starts_with("Space demo")
    });
    eventually("the budget set", || {
        b.goto(&page);
        b.text("#budget").starts_with("override")
    });
    let ledger = call(&server, "GET", "/api/operator/spaces/demo/ledger");
    assert_eq!(ledger["budget"]["overrideUs"], json!(250_000));
    assert_eq!(server.host_counter("operator", "consoleActions"), 3);
    // Set one of its effect knobs; the others stay the host's.
    b.type_into("#effects-in-flight", "3");
    b.submit("#set-effects");
    eventually("the effect knobs set", || {
        b.goto(&page);
        b.text("#effects")
            .starts_with("in flight 3 (this space's); requests/s 2 (the host's)")
    });
    let ledger = call(&server, "GET", "/api/operator/spaces/demo/ledger");
    assert_eq!(ledger["effects"]["own"]["inFlight"], json!(3));
    assert_eq!(ledger["effects"]["own"]["perSecond"], json!(null));
    assert_eq!(server.host_counter("operator", "consoleActions"), 4);
    b.screenshot(&shots().join("space.png"));
    // The spaces table shows each space's own budget.
    b.goto(&format!("{base}/console/spaces"));
    let budget_of = |space: &str| b.text(&format!(r#"tr[data-space="{space}"] td:nth-child(6)"#));
    assert!(
        budget_of("demo").ends_with("/ 250 ms"),
        "{}",
        budget_of("demo")
    );
    assert!(
        budget_of("other").ends_with("/ unlimited"),
        "{}",
        budget_of("other")
    );
    // The host page again, with the wake, its lateness and a throughput
    // sample or two.
    b.goto(&format!("{base}/console"));
    assert!(b.text("main").contains("wakes fired"));
    // The lateness chart draws what the counters say.
    let twin = call(&server, "GET", "/api/operator/host");
    let within_10ms = twin["counters"]["schedule"]["wakeLatenessLe10Ms"]
        .as_u64()
        .unwrap();
    let fired = twin["counters"]["schedule"]["fired"].as_u64().unwrap();
    assert_eq!(fired, 1);
    let bars = b.run(
        "return [...document.querySelectorAll('svg[aria-label^=\"Wake lateness\"] rect title')]\
         .map(t => t.textContent)",
    );
    assert_eq!(bars[0], json!(format!("≤ 10 ms: {within_10ms}")));
    let drawn: u64 = bars
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            t.as_str()
                .unwrap()
                .rsplit(": ")
                .next()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    assert_eq!(drawn, fired, "every observed wake is in one bar");
    b.screenshot(&shots().join("host.png"));

    // The run view of the delivered fire: linked from the fires list.
    b.goto(&page);
    b.click("#fires tbody tr td:nth-child(3) a");
    eventually("the run view", || b.title().starts_with("Run wake/"));
    assert_eq!(b.text("#outcome"), "delivered");
    assert!(
        b.text("#commit").starts_with("seq "),
        "{}",
        b.text("#commit")
    );
    assert!(
        b.text("#payload").contains("\"fireTime\""),
        "{}",
        b.text("#payload")
    );
    assert!(b.text("main").contains(&piece));
    b.screenshot(&shots().join("run.png"));

    // A failed wake in another space: its run shows the error and the
    // lines it logged, and the fires filter finds it.
    {
        let (mut c, _) = connect(&server, &me, "reports").await;
        let failing = match common::wire::deploy_runtime_fixture(
            &mut c,
            "failing-wake.tsx",
            json!({"fail": true}),
        )
        .await
        {
            spacewake::protocol::ServerMessage::Deployed(d) => d.piece,
            other => panic!("deploy: {other:?}"),
        };
        c.close().await.unwrap();
        call(
            &server,
            "POST",
            &format!("/api/operator/spaces/reports/schedules/{failing}/0/trigger"),
        );
        wait_for("the failed wake", || {
            server.space_counter("reports", "schedule", "retried") == 1
        });
    }
    let reports = format!("{base}/console/spaces/reports");
    b.goto(&format!("{reports}?outcome=delivered"));
    assert_eq!(
        b.run("return document.querySelectorAll('#fires tbody tr').length"),
        json!(0)
    );
    b.goto(&format!("{reports}?outcome=failed&range=hour"));
    assert_eq!(
        b.run("return document.querySelectorAll('#fires tbody tr').length"),
        json!(1)
    );
    assert!(b.text("#fires").contains("the feed is down"));
    b.screenshot(&shots().join("failed-wake.png"));
    b.click("#fires tbody tr td:nth-child(3) a");
    eventually("the failed run", || b.title().starts_with("Run wake/"));
    assert_eq!(b.text("#outcome"), "failed");
    assert!(b.text("#error").contains("the feed is down"));
    assert_eq!(b.text("#logs"), "info  tick 0");
    assert_eq!(b.text("#commit"), "none");
    assert!(
        b.text("#next-attempt").contains("(in "),
        "{}",
        b.text("#next-attempt")
    );
    assert!(
        b.text("main").contains("(callback tick)"),
        "{}",
        b.text("main")
    );
    b.screenshot(&shots().join("run-failed.png"));
    let (status, _) = get(&server, "/console/spaces/reports?outcome=exploded");
    assert_eq!(status, 400);
    let (status, _) = get(
        &server,
        "/console/spaces/reports/run?event=wake/pc-nothing/0/1/1",
    );
    assert_eq!(status, 404);

    // Delete the piece: the box must be ticked first; then it is gone,
    // with its schedule entries.
    b.goto(&page);
    let delete = format!(r#"button[aria-label="delete piece {piece}"]"#);
    assert_eq!(
        b.run(&format!(
            "return document.querySelector('{}').form.checkValidity()",
            delete.replace('\'', "\\'")
        )),
        json!(false),
        "the browser holds back a form whose box is not ticked"
    );
    // And the server refuses one sent without it.
    b.run(&format!(
        "document.querySelector('{}').form.querySelector('input[name=confirm]').required = false",
        delete.replace('\'', "\\'")
    ));
    b.submit(&delete);
    eventually("the refusal page", || {
        b.text("main").contains("tick the box")
    });
    assert_eq!(server.space_counter("demo", "actions", "piecesDeleted"), 0);
    b.goto(&page);
    b.click(&format!(
        r#"form[action="/console/spaces/demo/pieces/{piece}/delete"] input[name=confirm]"#
    ));
    b.submit(&delete);
    wait_for("the piece deleted", || {
        server.space_counter("demo", "actions", "piecesDeleted") == 1
    });
    eventually("the pieces and entries gone", || {
        b.goto(&page);
        b.text("#pieces").contains("Pieces (0)") && b.text("#entries").contains("(0)")
    });
    let listed = call(&server, "GET", "/api/operator/schedules?space=demo");
    assert_eq!(listed["entries"], json!([]), "{listed}");
}

/// Three entries, one of each shape: an interval, a weekday digest at 07:30
/// in Berlin, and a one-off time held in the piece's own state.
const SHAPES: &str = r#"
import { pattern, handler, SCHEDULE, Cell, Default } from "commonfabric";
const tick = handler<{}, { n: Cell<number> }>((_e, { n }) => { n.set(n.get() + 1); });
export default pattern<{ n: Default<number, 0>; next: Default<number | null, null> }>(({ n, next }) => ({
  n,
  next,
  [SCHEDULE]: [
    { intervalMinutes: 120, callback: tick({ n }) },
    { cron: "30 7 * * 1-5", timeZone: "Europe/Berlin", callback: tick({ n }) },
    { at: next, callback: tick({ n }) },
  ],
}));
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_space_page_shows_each_entry_shape_as_its_json_twin_does() {
    use spacewake::protocol::messages::Deploy;
    use spacewake::protocol::{ClientMessage, ServerMessage};
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let me = Identity::generate();
    let (mut c, _) = connect(&server, &me, "shapes").await;
    // Whole seconds, as the page prints them.
    let at = (SystemClock.now_ms() / 1000 + 3 * 3600) * 1000;
    let id = c.fresh_id();
    let piece = match c
        .request(ClientMessage::Deploy(Deploy {
            id,
            entry: "shapes.tsx".into(),
            files: std::collections::BTreeMap::from([("shapes.tsx".into(), SHAPES.into())]),
            export: None,
            argument: Some(json!({ "next": at })),
        }))
        .await
        .unwrap()
    {
        ServerMessage::Deployed(d) => d.piece,
        other => panic!("deploy: {other:?}"),
    };
    c.close().await.unwrap();

    let twin = call(&server, "GET", "/api/operator/schedules?space=shapes");
    let entries = twin["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 3, "{twin}");
    assert_eq!(entries[0]["intervalMinutes"], json!(120));
    assert_eq!(entries[1]["cron"], json!("30 7 * * 1-5"));
    assert_eq!(entries[1]["timeZone"], json!("Europe/Berlin"));
    let local = entries[1]["nextDueLocal"].as_str().unwrap();
    assert!(local.contains(" 07:"), "{local}");
    let field = format!("{piece}/argument.next");
    assert_eq!(entries[2]["at"], json!(field));
    assert_eq!(entries[2]["setForMs"], json!(at));
    assert_eq!(entries[2]["nextDueMs"], json!(at));

    let (status, page) = get(&server, "/console/spaces/shapes");
    assert_eq!(status, 200);
    let rows = table(&page, "entries");
    assert!(rows.contains("120 min"), "{rows}");
    assert!(
        rows.contains("cron <code>30 7 * * 1-5</code> Europe/Berlin"),
        "{rows}"
    );
    assert!(rows.contains(&format!(" · {local}")), "{rows}");
    assert!(rows.contains(&format!("at <code>{field}</code>")), "{rows}");
    assert!(rows.contains("one-off"), "{rows}");
}
