//! Every wake's outcome, error and log are kept with its fire: a real
//! host on a manual clock fires a callback that logs and succeeds, and one
//! that logs and throws; the operator API and the CLI show what happened.

mod common;

use common::wait;
use serde_json::json;
use spacewake::clock::ManualClock;
use spacewake::host::Host;
use spacewake::metrics::Counter;
use spacewake::store::{FIRE_LOG_CHARS, FIRE_LOG_LINES};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

const PATTERN: &str = r#"
import { pattern, handler, SCHEDULE, Cell, Default } from "commonfabric";

const tick = handler<{ fireTime?: number }, { count: Cell<number>; fail: Cell<boolean>; chatty: Cell<boolean> }>(
  (_ev, { count, fail, chatty }) => {
    console.log("tick at", count.get());
    console.warn("feed slow");
    if (chatty.get()) {
      for (let i = 0; i < 40; i++) console.log("line " + i + " " + "x".repeat(800));
    }
    if (fail.get()) throw new Error("the feed is down");
    count.set(count.get() + 1);
  },
);

export default pattern<{ count: Default<number, 0>; fail: Default<boolean, false>; chatty: Default<boolean, false> }>(
  ({ count, fail, chatty }) => ({
    [SCHEDULE]: [{ intervalMinutes: 60, callback: tick({ count, fail, chatty }) }],
    count,
    fail,
    chatty,
  }),
);
"#;

fn deploy(h: &Host, clock: &ManualClock, space: &str, argument: serde_json::Value) -> String {
    h.store().create_space(space, "did:key:owner").unwrap();
    let piece = h
        .deploy_file_blocking(space, "p.tsx", PATTERN, argument)
        .expect("deploy");
    common::park(h, clock, space);
    piece
}

fn due(h: &Host, space: &str) -> u64 {
    h.store().open_space(space).unwrap().schedule(None).unwrap()[0].next_due_ms
}

fn c(h: &Host, space: &str, counter: Counter) -> i64 {
    h.counters().space_value(space, counter)
}

fn cli(data: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_spacewake"))
        .args(args)
        .arg("--data")
        .arg(data)
        .env_remove("SPACEWAKE_DATA")
        .env_remove("SPACEWAKE_LOG")
        .output()
        .expect("the spacewake binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{args:?}: exit {:?}\n{stdout}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn a_fire_keeps_its_outcome_run_error_and_log_lines() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::default());
    let h = common::manual_host(dir.path(), clock.clone(), |_| {});
    let good = deploy(&h, &clock, "good", json!({}));
    let bad = deploy(&h, &clock, "bad", json!({"fail": true, "chatty": true}));

    // Both come due; each fires with no session connected.
    let at = due(&h, "good").max(due(&h, "bad"));
    clock.set_ms(at);
    wait("the good wake delivered", || {
        c(&h, "good", Counter::ScheduleDelivered) == 1
    });
    wait("the bad wake failed and is retried", || {
        c(&h, "bad", Counter::ScheduleRetried) == 1
    });
    wait("both parked", || {
        common::settled(&h, "good") && common::settled(&h, "bad")
    });

    // The delivered fire: its run, its log and the commit it made.
    let view = spacewake::operator::fires(h.store(), "good", &good, 0).unwrap();
    assert_eq!(view.fires.len(), 1, "{:?}", view.fires);
    let fire = &view.fires[0];
    assert_eq!(fire.outcome, "delivered");
    assert!(fire.run.error.is_none(), "{fire:?}");
    assert!(fire.run.duration_us.is_some() && fire.run.cpu_us.is_some());
    assert!(fire.run.settled_ms.unwrap() >= fire.fired_ms);
    let seq = fire.run.commit_seq.expect("the commit the wake made");
    assert!(seq > 0);
    let lines: Vec<(&str, &str)> = fire
        .run
        .logs
        .iter()
        .map(|l| (l.level.as_str(), l.text.as_str()))
        .collect();
    assert_eq!(lines, [("info", "tick at 0"), ("warn", "feed slow")]);

    // The failed fire: the error, and the log bounded in lines and length.
    let view = spacewake::operator::fires(h.store(), "bad", &bad, 0).unwrap();
    assert_eq!(view.fires.len(), 1, "{:?}", view.fires);
    let fire = &view.fires[0];
    assert_eq!(fire.outcome, "failed");
    let error = fire.run.error.as_deref().unwrap();
    assert!(error.contains("the feed is down"), "{error}");
    assert!(fire.run.commit_seq.is_none());
    assert_eq!(fire.run.logs.len(), FIRE_LOG_LINES);
    assert_eq!(fire.run.logs[0].text, "tick at 0");
    assert!(fire
        .run
        .logs
        .iter()
        .all(|l| l.text.chars().count() < FIRE_LOG_CHARS + 40));

    // `events dead-letters` lists the occurrence being retried, with its
    // last error and when it is tried next.
    let letters = spacewake::operator::dead_letters(h.store(), "bad").unwrap();
    assert!(letters.dead_letters.is_empty());
    assert_eq!(letters.failing.len(), 1, "{:?}", letters.failing);
    let failing = &letters.failing[0];
    assert!(failing.last_error.contains("the feed is down"));
    assert!(failing.retry_due_ms.is_some_and(|t| t > at));
    assert_eq!(common::read(&h, "good", &good, "count"), json!(1));
    assert_eq!(common::read(&h, "bad", &bad, "count"), json!(0));
    drop(h);

    // The CLI shows the same.
    let data = dir.path();
    let out = cli(
        data,
        &[
            "schedules",
            "fires",
            "--space",
            "good",
            "--piece",
            &good,
            "--entry",
            "0",
        ],
    );
    for want in [
        "OUTCOME",
        "TOOK",
        "CPU",
        "delivered",
        "tick at 0",
        "feed slow",
    ] {
        assert!(out.contains(want), "{want}: {out}");
    }
    let out = cli(
        data,
        &[
            "schedules",
            "fires",
            "--space",
            "bad",
            "--piece",
            &bad,
            "--entry",
            "0",
        ],
    );
    for want in ["failed", "the feed is down"] {
        assert!(out.contains(want), "{want}: {out}");
    }
    let out = cli(data, &["events", "dead-letters", "--space", "bad"]);
    for want in ["NEXT ATTEMPT", "the feed is down"] {
        assert!(out.contains(want), "{want}: {out}");
    }

    // Every listing prints JSON with --json, in the operator API's shape.
    let json = |args: &[&str]| -> serde_json::Value {
        let mut args = args.to_vec();
        args.push("--json");
        let out = cli(data, &args);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
    };
    let v = json(&["spaces"]);
    assert_eq!(v["registered"], json!(2), "{v}");
    assert_eq!(v["spaces"].as_array().unwrap().len(), 2, "{v}");
    let v = json(&["pieces", "--space", "good"]);
    assert_eq!(v["pieces"][0]["id"], json!(good), "{v}");
    let v = json(&["schedules", "list"]);
    assert_eq!(v["entries"].as_array().unwrap().len(), 2, "{v}");
    // Entries by index and by their callback's source name.
    assert_eq!(v["entries"][0]["callbackName"], "tick", "{v}");
    let listed = cli(data, &["schedules", "list"]);
    assert!(listed.contains(" 0 (tick) "), "{listed}");
    let v = json(&[
        "schedules",
        "fires",
        "--space",
        "good",
        "--piece",
        &good,
        "--entry",
        "0",
    ]);
    assert_eq!(v["fires"][0]["outcome"], "delivered", "{v}");
    assert_eq!(v["fires"][0]["logs"][0]["text"], "tick at 0", "{v}");
    let v = json(&["ledger", "--space", "good"]);
    assert!(v["rows"].as_array().is_some_and(|r| !r.is_empty()), "{v}");
    // Patterns by file and export, as the pieces list names them.
    let top = v["top"].as_array().unwrap();
    assert!(!top.is_empty(), "{v}");
    assert!(top.iter().all(|a| a["pattern"] == "p.tsx#default"), "{v}");
    // Handlers by their source name (`const tick = handler(...)`).
    assert!(
        top.iter()
            .any(|a| a["kind"] == "handler" && a["action"] == "tick (s0)"),
        "{v}"
    );
    let v = json(&["events", "dead-letters", "--space", "bad"]);
    assert!(v["failing"][0]["lastError"]
        .as_str()
        .unwrap()
        .contains("the feed is down"));
}

/// A handler the source gave no name goes by where its stream shows in the
/// result; a lift or derivation bound to a `const` goes by that name.
const UNNAMED: &str = r#"
import { pattern, handler, lift, computed, SCHEDULE, Cell, Default } from "commonfabric";

const double = lift((n: number) => n * 2);

export default pattern<{ count: Default<number, 0> }>(({ count }) => {
  const bumper = handler<unknown, { count: Cell<number> }>((_e, { count }) => {
    count.set(count.get() + 1);
  })({ count });
  const doubled = double(count);
  const summary = computed(() => `count ${count}`);
  return {
    [SCHEDULE]: [{ intervalMinutes: 60, callback: bumper }],
    bump: bumper,
    doubled,
    summary,
    count,
  };
});
"#;

#[test]
fn handlers_and_derivations_go_by_the_names_an_author_gave_them() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::default());
    let h = common::manual_host(dir.path(), clock.clone(), |_| {});
    h.store().create_space("s", "did:key:owner").unwrap();
    let piece = h
        .deploy_file_blocking("s", "p.tsx", UNNAMED, json!({}))
        .expect("deploy");
    common::park(&h, &clock, "s");
    clock.set_ms(due(&h, "s"));
    wait("the wake delivered", || {
        c(&h, "s", Counter::ScheduleDelivered) == 1
    });
    // A reader runs the derivations (nothing asks for them on a wake).
    assert_eq!(common::read(&h, "s", &piece, "doubled"), json!(2));
    assert_eq!(common::read(&h, "s", &piece, "summary"), json!("count 1"));
    common::park(&h, &clock, "s");
    drop(h);

    let data = dir.path();
    let list: serde_json::Value =
        serde_json::from_str(&cli(data, &["schedules", "list", "--json"])).unwrap();
    assert_eq!(list["entries"][0]["callbackName"], "bump", "{list}");
    let ledger: serde_json::Value =
        serde_json::from_str(&cli(data, &["ledger", "--space", "s", "--json"])).unwrap();
    let actions: Vec<(String, String)> = ledger["top"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["kind"].as_str().unwrap().to_string(),
                a["action"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let has = |kind: &str, prefix: &str| {
        actions
            .iter()
            .any(|(k, a)| k == kind && a.starts_with(prefix) && a.ends_with(')'))
    };
    assert!(has("handler", "bump (s"), "{actions:?}");
    assert!(has("derivation", "double (n"), "{actions:?}");
    assert!(has("derivation", "summary (n"), "{actions:?}");
    assert!(
        actions.iter().all(|(_, a)| !a.starts_with("pc-")),
        "{actions:?}"
    );
}

/// A piece made before a `[SCHEDULE]` entry that can never fire was
/// refused at deploy: its program (the compiler cannot see that
/// `handlers.sweep` is a handler not bound to its state) and its listing,
/// as an older release stored them.
const LEGACY: &str = r#"
import { pattern, handler, SCHEDULE, Cell, Default } from "commonfabric";

const sweep = handler<unknown, { count: Cell<number> }>((_e, { count }) => count.set(count.get() + 1));
const handlers = { sweep };

export default pattern<{ count: Default<number, 0> }>(({ count }) => ({
  [SCHEDULE]: [{ intervalMinutes: 60, callback: handlers.sweep }],
  count,
}));
"#;

#[test]
fn a_legacy_entry_that_can_never_fire_is_counted_as_it_loads_and_listed() {
    use spacewake::store::{Author, CommitClass, CommitRequest, DocOp};
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::default());
    let h = common::manual_host(dir.path(), clock.clone(), |_| {});
    // A deploy of it today is refused, nothing stored.
    h.store().create_space("old", "did:key:owner").unwrap();
    let refused = h.deploy_file_blocking("old", "p.tsx", LEGACY, json!({}));
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| format!("{e:?}").contains("could never fire")),
        "{refused:?}"
    );
    common::park(&h, &clock, "old");

    let program = spacewake::compiler::compile(
        "p.tsx",
        &spacewake::compiler::MemorySource::new().with("p.tsx", LEGACY),
    )
    .unwrap();
    let hash = program.hash_hex();
    let modules: Vec<serde_json::Value> = program
        .modules
        .iter()
        .map(|m| json!({"name": m.name, "source": m.source}))
        .collect();
    let piece = "pc-0123456789abcdef";
    let mut s = h.store().open_space("old").unwrap();
    s.commit(
        CommitRequest::new(CommitClass::System, Author::server())
            .op(DocOp::Set {
                id: format!("program/{hash}"),
                value: json!({"entry": program.entry().name, "modules": modules}),
            })
            .op(DocOp::Set {
                id: format!("{piece}/argument"),
                value: json!({"count": 0}),
            })
            .op(DocOp::Set {
                id: spacewake::runtime::PIECES_DOC.into(),
                value: json!({piece: {"program": hash, "export": "default", "createdMs": 0}}),
            }),
    )
    .unwrap();
    drop(s);

    // It loads (its other parts serve), the entry is counted, never indexed.
    assert_eq!(common::read(&h, "old", piece, "count"), json!(0));
    assert!(c(&h, "old", Counter::ScheduleInvalidEntries) >= 1);
    common::park(&h, &clock, "old");
    assert!(h
        .store()
        .open_space("old")
        .unwrap()
        .schedule(None)
        .unwrap()
        .is_empty());
    drop(h);
    let list: serde_json::Value = serde_json::from_str(&cli(
        dir.path(),
        &["schedules", "list", "--space", "old", "--json"],
    ))
    .unwrap();
    assert_eq!(list["entries"], json!([]), "{list}");
    assert_eq!(list["invalid"].as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list["invalid"][0]["piece"], piece, "{list}");
    assert_eq!(list["invalid"][0]["entry"], 0, "{list}");
    assert!(list["invalid"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("not a stream"));
}
