//! `spacewake schedules …` against a real data directory with no server
//! (the CLI edits it directly, holding its lock): the binary runs as a
//! separate process on files a store built in-process, and every check
//! reads the stored rows and the host directory back. The same commands
//! through a running server are in `tests/operators.rs`.
//!
//! Space handles are reopened after each command, and the directory is read
//! before any reopen (opening a space reconciles its directory row, which
//! would hide a command that left the row wrong).

use serde_json::{json, Value};
use spacewake::clock::{Clock, ManualClock, SystemClock};
use spacewake::human::{civil_from_days, format_utc_ms, human_duration_ms, thousands};
use spacewake::metrics::Counters;
use spacewake::schedule::fire::{fire_due, FIRE_HISTORY};
use spacewake::schedule::grid::MINUTE_MS;
use spacewake::schedule::EntryState;
use spacewake::schedule::{Jitter, ScheduleIndexHook, WakeId};
use spacewake::store::{
    Author, CommitClass, CommitRequest, DocOp, PendingWake, ScheduleRow, ScheduleStatus, Store,
    StoreConfig,
};
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

const KEY: [u8; 32] = [7; 32];
const HOUR: u64 = 60 * MINUTE_MS;
const PIECE: &str = "pc-0123456789abcdef";

/// A data directory with the schedule index hook installed, on a manual
/// clock starting at `start_ms`.
struct Data {
    dir: tempfile::TempDir,
    clock: Arc<ManualClock>,
    store: Store,
}

impl Data {
    fn new(start_ms: u64) -> Data {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(start_ms));
        let store =
            Store::open(StoreConfig::new(dir.path()), clock.clone(), Counters::new()).unwrap();
        store.add_hook(Arc::new(ScheduleIndexHook::new(Jitter::keyed(KEY))));
        Data { dir, clock, store }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Creates `space` if needed and commits a piece result declaring one
    /// entry per interval (the document shape the runtime stores).
    fn declare(&self, space: &str, piece: &str, intervals: &[u64]) {
        if self.store.directory().get(space).unwrap().is_none() {
            self.store.create_space(space, "did:key:owner").unwrap();
        }
        let entries: Vec<Value> = intervals
            .iter()
            .enumerate()
            .map(|(i, m)| json!({"intervalMinutes": m, "callback": {"$stream": format!("{piece}/s{i}")}}))
            .collect();
        self.put(
            space,
            piece,
            json!({"$NAME": "feed", "$SCHEDULE": entries, "value": 1}),
        );
    }

    fn put(&self, space: &str, doc: &str, value: Value) {
        let mut s = self.store.open_space(space).unwrap();
        s.commit(
            CommitRequest::new(CommitClass::System, Author::server()).op(DocOp::Set {
                id: doc.into(),
                value,
            }),
        )
        .unwrap();
    }

    fn rows(&self, space: &str) -> Vec<ScheduleRow> {
        self.store
            .open_space(space)
            .unwrap()
            .schedule(None)
            .unwrap()
    }

    fn row(&self, space: &str, piece: &str, entry: u32) -> ScheduleRow {
        self.rows(space)
            .into_iter()
            .find(|r| r.piece == piece && r.entry == entry)
            .unwrap()
    }

    /// The directory's wake for `space`, read without opening the space.
    fn wake(&self, space: &str) -> Option<u64> {
        self.store
            .directory()
            .get(space)
            .unwrap()
            .unwrap()
            .next_wake_ms
    }

    /// Moves the manual clock to `at_ms` and fires what is due in-process.
    fn fire_at(&self, space: &str, at_ms: u64) -> spacewake::schedule::fire::FireReport {
        self.clock.set_ms(at_ms);
        let mut s = self.store.open_space(space).unwrap();
        fire_due(&mut s, at_ms, &Jitter::keyed(KEY), true).unwrap()
    }
}

/// Runs `spacewake schedules ARGS…` (with `--data` already given by the caller
/// where wanted) and returns its output.
fn schedules(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spacewake"))
        .arg("schedules")
        .args(args)
        .env_remove("SPACEWAKE_DATA")
        .env_remove("SPACEWAKE_LOG")
        .output()
        .expect("the spacewake binary runs")
}

fn with_data<'a>(data: &'a Path, cmd: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![cmd, "--data", data.to_str().unwrap()];
    v.extend_from_slice(rest);
    v
}

fn ok(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Asserts exit status 1 with one `error:` sentence and no panic or debug
/// dump; returns the message.
fn fails(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "stderr:\n{stderr}");
    let msg = stderr.trim();
    assert!(msg.starts_with("error: "), "{msg}");
    assert_eq!(msg.lines().count(), 1, "one sentence: {msg}");
    for bad in ["panicked", "RUST_BACKTRACE", "StoreError", " { "] {
        assert!(!msg.contains(bad), "{bad:?} in {msg}");
    }
    msg.to_string()
}

/// The data lines of a `list` table for one piece.
fn lines_of<'a>(stdout: &'a str, piece: &str) -> Vec<&'a str> {
    stdout.lines().filter(|l| l.contains(piece)).collect()
}

fn system_now() -> u64 {
    SystemClock.now_ms()
}

#[test]
fn list_shows_each_entry_with_interval_next_due_in_utc_status_and_counts() {
    let d = Data::new(system_now());
    d.declare("home", PIECE, &[60, 1440]);
    d.declare("work", "pc-other", &[120]);
    let out = schedules(&with_data(d.path(), "list", &[]));
    let stdout = ok(&out);
    let header = stdout.lines().next().unwrap();
    for col in [
        "SPACE",
        "PIECE",
        "ENTRY",
        "INTERVAL",
        "NEXT DUE (UTC)",
        "LAST FIRED (UTC)",
        "ATTEMPTS",
        "STATUS",
        "FIRED",
        "MISSED",
    ] {
        assert!(header.contains(col), "{col} missing from {header}");
    }
    let mine = lines_of(&stdout, PIECE);
    assert_eq!(mine.len(), 2, "{stdout}");
    for (line, r) in mine.iter().zip(d.rows("home")) {
        assert!(line.starts_with("home "), "{line}");
        assert!(line.contains(&format_utc_ms(r.next_due_ms)), "{line}");
        assert!(line.contains(&format!("{} min", thousands(r.interval_minutes.into()))));
        assert!(line.contains("active") && line.contains(" - "), "{line}");
        assert!(line.contains("(in "), "next due is relative to now: {line}");
    }
    assert!(mine[1].contains("1,440 min"), "{}", mine[1]);
    assert_eq!(lines_of(&stdout, "pc-other").len(), 1);
    assert!(stdout.contains("3 entries in 2 spaces"), "{stdout}");

    // --space narrows the listing; the environment names the data directory.
    let out = Command::new(env!("CARGO_BIN_EXE_spacewake"))
        .args(["schedules", "list", "--space", "work"])
        .env("SPACEWAKE_DATA", d.path())
        .output()
        .unwrap();
    let stdout = ok(&out);
    assert_eq!(lines_of(&stdout, "pc-other").len(), 1);
    assert!(lines_of(&stdout, PIECE).is_empty(), "{stdout}");
}

#[test]
fn list_says_so_when_there_are_no_entries() {
    let d = Data::new(system_now());
    d.store.create_space("empty", "did:key:owner").unwrap();
    d.put("empty", "pc-plain", json!({"value": 1}));
    let stdout = ok(&schedules(&with_data(d.path(), "list", &[])));
    assert!(stdout.starts_with("no schedule entries\n"), "{stdout}");
    let stdout = ok(&schedules(&with_data(d.path(), "list", &["--all"])));
    assert!(stdout.starts_with("no schedule entries\n"), "{stdout}");
}

/// A piece made before entries that can never fire were refused at deploy
/// (its `[SCHEDULE]` callback `null`): the index leaves the entry out, and
/// the listing shows it as invalid, with why, beside the valid one.
#[test]
fn an_entry_that_can_never_fire_is_listed_as_invalid_with_why() {
    let d = Data::new(system_now());
    d.store.create_space("old", "did:key:owner").unwrap();
    d.put(
        "old",
        spacewake::runtime::PIECES_DOC,
        json!({PIECE: {"program": "0".repeat(64), "export": "default"}}),
    );
    d.put(
        "old",
        PIECE,
        json!({"$SCHEDULE": [
            {"intervalMinutes": 60, "callback": null},
            {"intervalMinutes": 120, "callback": {"$stream": format!("{PIECE}/s0")}},
        ]}),
    );
    let rows = d.rows("old");
    assert_eq!(rows.iter().map(|r| r.entry).collect::<Vec<_>>(), [1]);

    let stdout = ok(&schedules(&with_data(d.path(), "list", &["--all"])));
    assert!(
        stdout.contains(&format!(
            "old {PIECE} entry 0: invalid: its callback is not a stream"
        )),
        "{stdout}"
    );
    assert!(stdout.contains("1 entry can never fire"), "{stdout}");
    let out = ok(&schedules(&with_data(
        d.path(),
        "list",
        &["--all", "--json"],
    )));
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["entries"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["invalid"][0]["piece"], PIECE, "{v}");
    assert_eq!(v["invalid"][0]["entry"], 0, "{v}");
    assert!(v["invalid"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("not a stream"));
}

#[test]
fn list_shows_backoff_retries_and_history_columns() {
    let d = Data::new(system_now());
    d.declare("home", PIECE, &[60]);
    let mut r = d.row("home", PIECE, 0);
    r.backoff_factor = 4;
    r.pending = vec![pending(&r, 2, r.next_due_ms - 5 * MINUTE_MS)];
    r.fired_count = 12_345;
    r.missed_count = 3;
    r.last_fired_ms = Some(r.declared_at_ms);
    let mut s = d.store.open_space("home").unwrap();
    s.plane(|p| spacewake::schedule::entry::save(p, &mut r))
        .unwrap();
    drop(s);
    let stdout = ok(&schedules(&with_data(d.path(), "list", &[])));
    let line = lines_of(&stdout, PIECE)[0];
    assert!(line.contains("60 min (backed off ×4 = 240 min)"), "{line}");
    assert!(
        line.contains(&format!(
            "active, retry at {}",
            format_utc_ms(r.retry_due_ms().unwrap())
        )),
        "{line}"
    );
    assert!(line.contains(&format_utc_ms(r.declared_at_ms)), "{line}");
    assert!(line.contains("12,345"), "{line}");
}

#[test]
fn pause_stops_the_entry_and_resume_restores_its_wake() {
    let d = Data::new(system_now());
    d.declare("home", PIECE, &[120]);
    let before = d.row("home", PIECE, 0);
    assert_eq!(d.wake("home"), Some(before.next_due_ms));

    let entry = ["--space", "home", "--piece", PIECE, "--entry", "0"];
    let stdout = ok(&schedules(&with_data(d.path(), "pause", &entry)));
    assert!(stdout.starts_with("paused space home piece"), "{stdout}");
    assert_eq!(
        d.wake("home"),
        None,
        "nothing active: the directory has no wake"
    );
    let paused = d.row("home", PIECE, 0);
    assert_eq!(paused.status, ScheduleStatus::Paused);
    assert_eq!(paused.next_due_ms, before.next_due_ms, "still on its grid");
    let stdout = ok(&schedules(&with_data(d.path(), "pause", &entry)));
    assert!(stdout.contains("already paused"), "{stdout}");

    // A paused-only space has no wake: found with --all or by name.
    let stdout = ok(&schedules(&with_data(d.path(), "list", &[])));
    assert!(stdout.starts_with("no schedule entries"), "{stdout}");
    assert!(stdout.contains("--all"), "{stdout}");
    for extra in [&["--all"][..], &["--space", "home"][..]] {
        let stdout = ok(&schedules(&with_data(d.path(), "list", extra)));
        let line = lines_of(&stdout, PIECE)[0];
        assert!(line.contains("paused"), "{line}");
    }

    let stdout = ok(&schedules(&with_data(d.path(), "resume", &entry)));
    assert!(stdout.starts_with("resumed space home piece"), "{stdout}");
    assert!(
        stdout.contains(&format_utc_ms(before.next_due_ms)),
        "{stdout}"
    );
    assert_eq!(d.wake("home"), Some(before.next_due_ms));
    let resumed = d.row("home", PIECE, 0);
    assert_eq!(resumed.status, ScheduleStatus::Active);
    assert_eq!(resumed.next_due_ms, before.next_due_ms);
    let stdout = ok(&schedules(&with_data(d.path(), "resume", &entry)));
    assert!(stdout.contains("already active"), "{stdout}");
}

#[test]
fn pausing_one_of_two_entries_keeps_the_other_entrys_wake() {
    let d = Data::new(system_now());
    d.declare("home", PIECE, &[60, 1440]);
    let rows = d.rows("home");
    assert_eq!(d.wake("home"), Some(rows[0].next_due_ms));
    let entry = ["--space", "home", "--piece", PIECE, "--entry", "0"];
    ok(&schedules(&with_data(d.path(), "pause", &entry)));
    assert_eq!(
        d.wake("home"),
        Some(rows[1].next_due_ms),
        "moved later, to entry 1"
    );
}

#[test]
fn trigger_fires_an_extra_occurrence_now_and_the_cadence_stays() {
    let d = Data::new(system_now());
    d.declare("home", PIECE, &[120]);
    let before = d.row("home", PIECE, 0);
    let t0 = system_now();
    assert!(before.next_due_ms > t0 + HOUR, "due in about two hours");

    let entry = ["--space", "home", "--piece", PIECE, "--entry", "0"];
    let stdout = ok(&schedules(&with_data(d.path(), "trigger", &entry)));
    let t1 = system_now();
    assert!(stdout.starts_with("triggered space home piece"), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "the next period stays due at {}",
            format_utc_ms(before.next_due_ms)
        )),
        "{stdout}"
    );
    // No server holds the directory: the CLI edited it, and says so.
    assert!(stdout.contains("fires it when it next starts"), "{stdout}");
    assert!(
        stdout.contains("on the data directory") && stdout.contains("no server is running"),
        "{stdout}"
    );
    let wake = d.wake("home").expect("a wake");
    assert!(
        wake >= t0 && wake <= t1,
        "the directory moved earlier, to now"
    );
    let after = d.row("home", PIECE, 0);
    assert_eq!(
        (after.nominal_period, after.next_due_ms, after.status),
        (1, before.next_due_ms, ScheduleStatus::Active),
        "the grid is untouched"
    );
    let listed = ok(&schedules(&with_data(
        d.path(),
        "list",
        &["--space", "home"],
    )));
    assert!(listed.contains("triggered for "), "{listed}");

    // Triggered twice: the firing pass fires both extra occurrences, and
    // the entry's next period is still due when it was.
    // (The CLI reads the system clock; one trigger per millisecond counts.)
    while system_now() <= t1 {
        std::hint::spin_loop();
    }
    ok(&schedules(&with_data(d.path(), "trigger", &entry)));
    let now = system_now();
    let report = d.fire_at("home", now);
    assert_eq!(report.fired.len(), 2, "{report:?}");
    for f in &report.fired {
        assert!(
            f.event_id
                .starts_with(&format!("wake/{PIECE}/0/{}/0/at", before.declared_at_ms)),
            "{}",
            f.event_id
        );
    }
    let fired = d.row("home", PIECE, 0);
    assert_eq!(
        (fired.nominal_period, fired.next_due_ms, fired.fired_count),
        (1, before.next_due_ms, 2)
    );
    // And period 1 fires at its own time.
    let report = d.fire_at("home", before.next_due_ms);
    assert_eq!(
        report.fired[0].event_id,
        WakeId::occurrence(PIECE, 0, before.declared_at_ms, 1).to_string()
    );
}

#[test]
fn trigger_reactivates_a_paused_entry() {
    let d = Data::new(system_now());
    d.declare("home", PIECE, &[60]);
    let entry = ["--space", "home", "--piece", PIECE, "--entry", "0"];
    ok(&schedules(&with_data(d.path(), "pause", &entry)));
    let stdout = ok(&schedules(&with_data(d.path(), "trigger", &entry)));
    assert!(stdout.contains("It was paused"), "{stdout}");
    assert!(d.wake("home").is_some_and(|w| w <= system_now()));
    assert_eq!(d.row("home", PIECE, 0).status, ScheduleStatus::Active);
}

#[test]
fn fires_shows_the_history_with_periods_lateness_and_coalesced_misses() {
    // Thirty days ago, so every fire lies in the past of the system clock.
    let start = system_now() - 30 * 24 * HOUR;
    let d = Data::new(start);
    d.declare("home", PIECE, &[60]);
    let first = d.row("home", PIECE, 0);
    let entry = ["--space", "home", "--piece", PIECE, "--entry", "0"];

    let stdout = ok(&schedules(&with_data(d.path(), "fires", &entry)));
    assert!(stdout.contains("has not fired yet"), "{stdout}");

    d.fire_at("home", first.next_due_ms);
    // Down until 30 minutes past period 6: periods 2..=6 coalesce into one.
    let report = d.fire_at("home", first.declared_at_ms + 6 * HOUR + 30 * MINUTE_MS);
    assert_eq!(report.fired[0].missed_periods, 4);

    let stdout = ok(&schedules(&with_data(d.path(), "fires", &entry)));
    for col in [
        "TIME (UTC)",
        "EVENT",
        "PERIOD",
        "DUE (UTC)",
        "LATENESS",
        "MISSED",
        "OUTCOME",
    ] {
        assert!(stdout.contains(col), "{col}: {stdout}");
    }
    let lines: Vec<&str> = stdout.lines().filter(|l| l.contains("wake/")).collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    let id1 = WakeId::occurrence(PIECE, 0, first.declared_at_ms, 1).to_string();
    let id2 = WakeId::occurrence(PIECE, 0, first.declared_at_ms, 2).to_string();
    assert!(lines[0].starts_with(&format_utc_ms(first.next_due_ms)));
    assert!(lines[0].contains(&id1) && lines[0].contains(" 0 ms "));
    assert!(lines[0].contains(" fired "), "{}", lines[0]);
    assert!(lines[1].contains(&id2), "{}", lines[1]);
    let cells: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(cells[2], "2", "period: {}", lines[1]);
    // … MISSED OUTCOME TOOK CPU ERROR (the last three "-" until it runs).
    assert_eq!(cells[cells.len() - 5], "4", "missed periods: {}", lines[1]);
    assert!(lines[1].contains(" h "), "hours late: {}", lines[1]);
}

#[test]
fn fires_keeps_only_the_newest_entries_of_the_history() {
    let start = system_now() - 30 * 24 * HOUR;
    let d = Data::new(start);
    d.declare("home", PIECE, &[60]);
    for _ in 0..FIRE_HISTORY + 5 {
        let due = d.row("home", PIECE, 0).next_due_ms;
        assert_eq!(d.fire_at("home", due).fired.len(), 1);
    }
    let entry = ["--space", "home", "--piece", PIECE, "--entry", "0"];
    let stdout = ok(&schedules(&with_data(d.path(), "fires", &entry)));
    let periods: Vec<u64> = stdout
        .lines()
        .filter(|l| l.contains("wake/"))
        .map(|l| l.split_whitespace().nth(2).unwrap().parse().unwrap())
        .collect();
    let expected: Vec<u64> = (6..=(FIRE_HISTORY as u64 + 5)).collect();
    assert_eq!(periods, expected, "{stdout}");
    assert!(stdout.contains("25 fired in all"), "{stdout}");

    // On disk the history stays bounded: pruned every few periods.
    for _ in 0..40 {
        let due = d.row("home", PIECE, 0).next_due_ms;
        assert_eq!(d.fire_at("home", due).fired.len(), 1);
    }
    let conn = rusqlite::Connection::open(d.path().join("spaces/home.sqlite")).unwrap();
    let rows: usize = conn
        .query_row("SELECT COUNT(*) FROM schedule_fires", [], |r| r.get(0))
        .unwrap();
    let bound = FIRE_HISTORY + spacewake::store::PRUNE_EVERY_PERIODS as usize;
    assert!((FIRE_HISTORY..=bound).contains(&rows), "{rows} rows kept");
}

#[test]
fn unknown_spaces_pieces_and_entries_are_one_sentence_and_exit_1() {
    let d = Data::new(system_now());
    d.declare("home", PIECE, &[60, 120]);
    d.put("home", "pc-plain", json!({"value": 1}));
    let data = d.path();
    let cases: [(&str, [&str; 6], &str); 5] = [
        (
            "trigger",
            ["--space", "nope", "--piece", PIECE, "--entry", "0"],
            "there is no space \"nope\"",
        ),
        (
            "pause",
            ["--space", "home", "--piece", "pc-missing", "--entry", "0"],
            "space \"home\" has no piece \"pc-missing\"",
        ),
        (
            "resume",
            ["--space", "home", "--piece", "pc-plain", "--entry", "0"],
            "declares no [SCHEDULE] entries",
        ),
        (
            "fires",
            ["--space", "home", "--piece", PIECE, "--entry", "7"],
            "has no schedule entry 7; its entries are 0, 1",
        ),
        (
            "trigger",
            ["--space", "home", "--piece", "pc-1/c0", "--entry", "0"],
            "is not a piece id",
        ),
    ];
    for (cmd, args, want) in cases {
        let msg = fails(&schedules(&with_data(data, cmd, &args)));
        assert!(msg.contains(want), "{cmd}: {msg}");
    }
    let msg = fails(&schedules(&with_data(data, "list", &["--space", "nope"])));
    assert!(msg.contains("there is no space \"nope\""), "{msg}");
    // Nothing was changed by the failed commands.
    let rows = d.rows("home");
    assert!(rows.iter().all(|r| r.status == ScheduleStatus::Active));
}

#[test]
fn a_directory_that_is_not_a_data_directory_is_refused_and_not_created() {
    let empty = tempfile::tempdir().unwrap();
    let missing = empty.path().join("nowhere");
    for dir in [empty.path(), missing.as_path()] {
        let msg = fails(&schedules(&with_data(dir, "list", &[])));
        assert!(msg.contains("is not a spacewake data directory"), "{msg}");
        let args = ["--space", "home", "--piece", PIECE, "--entry", "0"];
        fails(&schedules(&with_data(dir, "trigger", &args)));
    }
    assert!(!missing.exists(), "the CLI created no data directory");
    assert!(!empty.path().join("host.sqlite").exists());
}

/// A paused entry with a retry still pending leaves the directory (the
/// firing pass skips paused entries, so a wake kept for it would bring the
/// waker back forever) and keeps the retry for when it is resumed.
#[test]
fn pausing_an_entry_with_a_pending_retry_clears_the_space_wake() {
    let d = Data::new(system_now());
    d.declare("home", PIECE, &[60]);
    let mut r = d.row("home", PIECE, 0);
    r.pending = vec![pending(&r, 1, r.next_due_ms - 10 * MINUTE_MS)];
    let mut s = d.store.open_space("home").unwrap();
    s.plane(|p| spacewake::schedule::entry::save(p, &mut r))
        .unwrap();
    drop(s);
    let entry = ["--space", "home", "--piece", PIECE, "--entry", "0"];
    ok(&schedules(&with_data(d.path(), "pause", &entry)));
    assert_eq!(d.wake("home"), None);
    assert_eq!(
        d.row("home", PIECE, 0).pending,
        r.pending,
        "the retry is kept"
    );
    ok(&schedules(&with_data(d.path(), "resume", &entry)));
    assert_eq!(
        d.wake("home"),
        r.retry_due_ms(),
        "and due again once resumed"
    );
}

/// A failed occurrence of `r`'s previous period, `attempts` tried, whose
/// retry is planned at `at_ms`.
fn pending(r: &ScheduleRow, attempts: u32, at_ms: u64) -> PendingWake {
    let period = r.nominal_period - 1;
    PendingWake {
        occurrence: format!("wake/{}/{}/{}/{period}", r.piece, r.entry, r.declared_at_ms),
        period,
        attempts,
        inflight: None,
        retry_due_ms: Some(at_ms),
    }
}

#[test]
fn utc_dates_match_a_day_by_day_calendar() {
    fn leap(y: i64) -> bool {
        (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
    }
    let (mut y, mut m, mut day) = (1970i64, 1u32, 1u32);
    // 1970-01-01 through 2600: every day, across 1900-style and 2000-style
    // century years.
    for n in 0..230_000i64 {
        assert_eq!(civil_from_days(n), (y, m, day), "day {n}");
        let len = match m {
            2 if leap(y) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        day += 1;
        if day > len {
            day = 1;
            m += 1;
            if m > 12 {
                m = 1;
                y += 1;
            }
        }
    }
    // Before the epoch too (the function is total).
    assert_eq!(civil_from_days(-1), (1969, 12, 31));
    assert_eq!(civil_from_days(-719_468), (0, 3, 1));
}

#[test]
fn utc_timestamps_are_iso_8601_to_the_second() {
    assert_eq!(format_utc_ms(0), "1970-01-01T00:00:00Z");
    assert_eq!(format_utc_ms(94_608_000_000), "1972-12-31T00:00:00Z");
    assert_eq!(format_utc_ms(951_782_400_000), "2000-02-29T00:00:00Z");
    assert_eq!(format_utc_ms(1_709_164_800_000), "2024-02-29T00:00:00Z");
    assert_eq!(
        format_utc_ms(ManualClock::DEFAULT_START_MS + 2 * HOUR + 61_999),
        "2026-01-01T02:01:01Z"
    );
    assert_eq!(format_utc_ms(4_107_456_000_000), "2100-02-28T00:00:00Z");
    assert_eq!(format_utc_ms(4_107_542_400_000), "2100-03-01T00:00:00Z");
    assert_eq!(format_utc_ms(253_402_300_799_999), "9999-12-31T23:59:59Z");
    assert_eq!(format_utc_ms(253_402_300_800_000), "never");
    assert_eq!(format_utc_ms(u64::MAX), "never");
}

#[test]
fn durations_and_counts_read_like_people_write_them() {
    assert_eq!(human_duration_ms(0), "0 ms");
    assert_eq!(human_duration_ms(999), "999 ms");
    assert_eq!(human_duration_ms(4_250), "4.2 s");
    assert_eq!(human_duration_ms(12 * MINUTE_MS + 5_000), "12 min 5 s");
    assert_eq!(human_duration_ms(3 * HOUR + 20 * MINUTE_MS), "3 h 20 min");
    assert_eq!(human_duration_ms(52 * HOUR), "2 d 4 h");
    assert_eq!(thousands(0), "0");
    assert_eq!(thousands(999), "999");
    assert_eq!(thousands(1_000), "1,000");
    assert_eq!(thousands(1_234_567), "1,234,567");
}
