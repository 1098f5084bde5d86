//! The schedule index hook on a real store: `[SCHEDULE]` declarations on
//! piece results become `schedule_index` rows inside the commit that writes
//! them, and the host directory's next wake follows.

mod common;

use common::{store, TestStore};
use serde_json::{json, Value};
use spacewake::clock::Clock;
use spacewake::schedule::grid::{self, MINUTE_MS};
use spacewake::schedule::{Jitter, JitterMode, ScheduleIndexHook, DEFAULT_WINDOW_MS};
use spacewake::store::path::parse_path;
use spacewake::store::*;
use std::sync::Arc;

const KEY: [u8; 32] = [0x5a; 32];
const SPACE: &str = "s1";
const PIECE: &str = "pc-0123456789abcdef";

fn never() -> u64 {
    panic!("keyed jitter draws no entropy")
}

/// A store with the hook registered and one space, opened.
fn indexed() -> (TestStore, Space) {
    indexed_with(ScheduleIndexHook::new(Jitter::keyed(KEY)))
}

fn indexed_with(hook: ScheduleIndexHook) -> (TestStore, Space) {
    let t = store();
    t.store.add_hook(Arc::new(hook));
    t.store.create_space(SPACE, "did:key:owner").unwrap();
    let s = t.store.open_space(SPACE).unwrap();
    (t, s)
}

fn entry(minutes: u64, stream: &str) -> Value {
    json!({"intervalMinutes": minutes, "callback": {"$stream": stream}})
}

/// A piece result as the runtime stores it.
fn result(entries: Vec<Value>) -> Value {
    json!({
        "$NAME": "feed",
        "$SCHEDULE": entries,
        "value": {"$link": {"doc": format!("{PIECE}/c0"), "path": []}},
    })
}

fn set(id: &str, value: Value) -> DocOp {
    DocOp::Set {
        id: id.into(),
        value,
    }
}

fn system() -> CommitRequest {
    CommitRequest::new(CommitClass::System, Author::server())
}

fn commit(s: &mut Space, op: DocOp) {
    s.commit(system().op(op)).unwrap();
}

fn next_wake(t: &TestStore) -> Option<u64> {
    t.store
        .directory()
        .get(SPACE)
        .unwrap()
        .unwrap()
        .next_wake_ms
}

fn expected_first_due(piece: &str, entry: u32, minutes: u32, at_ms: u64) -> u64 {
    grid::first_due(
        SPACE,
        piece,
        entry,
        minutes,
        at_ms,
        &Jitter::keyed(KEY),
        &mut never,
    )
}

#[test]
fn a_declared_entry_is_first_due_one_interval_plus_jitter_after_its_commit() {
    let (t, mut s) = indexed();
    let at = t.clock.now_ms();
    commit(
        &mut s,
        set(PIECE, result(vec![entry(120, "pc-0123456789abcdef/s3")])),
    );

    let rows = s.schedule(None).unwrap();
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!(
        (
            r.piece.as_str(),
            r.entry,
            r.interval_minutes,
            r.callback_stream.as_str()
        ),
        (PIECE, 0, 120, "pc-0123456789abcdef/s3")
    );
    assert_eq!((r.declared_at_ms, r.nominal_period), (at, 1));
    assert_eq!(r.status, ScheduleStatus::Active);
    assert!(
        r.next_due_ms.abs_diff(at + 120 * MINUTE_MS) <= DEFAULT_WINDOW_MS,
        "due {} ms from nominal",
        r.next_due_ms as i64 - (at + 120 * MINUTE_MS) as i64
    );
    assert_eq!(r.next_due_ms, expected_first_due(PIECE, 0, 120, at));
    assert_eq!(next_wake(&t), Some(r.next_due_ms));
}

#[test]
fn a_piece_with_two_entries_gets_two_rows_and_the_directory_the_earliest() {
    let (t, mut s) = indexed();
    let at = t.clock.now_ms();
    commit(
        &mut s,
        set(
            PIECE,
            result(vec![
                entry(60, "pc-0123456789abcdef/s1"),
                entry(1440, "pc-0123456789abcdef/s2"),
            ]),
        ),
    );
    let rows = s.schedule(Some(PIECE)).unwrap();
    assert_eq!(rows.iter().map(|r| r.entry).collect::<Vec<_>>(), vec![0, 1]);
    assert_eq!(rows[0].next_due_ms, expected_first_due(PIECE, 0, 60, at));
    assert_eq!(rows[1].next_due_ms, expected_first_due(PIECE, 1, 1440, at));
    assert_eq!(next_wake(&t), Some(rows[0].next_due_ms));
}

#[test]
fn the_directory_wakes_at_the_earliest_entry_across_pieces() {
    let (t, mut s) = indexed();
    s.commit(
        system()
            .op(set("pc-a", result(vec![entry(600, "pc-a/s0")])))
            .op(set("pc-b", result(vec![entry(60, "pc-b/s0")]))),
    )
    .unwrap();
    let earliest = s
        .schedule(None)
        .unwrap()
        .iter()
        .map(|r| r.next_due_ms)
        .min();
    assert_eq!(next_wake(&t), earliest);
    let b_due = s.schedule(Some("pc-b")).unwrap()[0].next_due_ms;
    assert_eq!(earliest, Some(b_due));
}

#[test]
fn recommitting_an_unchanged_declaration_does_not_move_it() {
    let (t, mut s) = indexed();
    commit(
        &mut s,
        set(PIECE, result(vec![entry(120, "pc-0123456789abcdef/s3")])),
    );
    // An operator paused it; that too must survive the re-commit.
    s.plane(|p| {
        let mut r = p.schedule(Some(PIECE))?.remove(0);
        r.status = ScheduleStatus::Paused;
        spacewake::schedule::entry::save(p, &mut r)
    })
    .unwrap();
    let before = s.schedule(None).unwrap();

    t.clock.advance_ms(30 * MINUTE_MS);
    let mut doc = result(vec![entry(120, "pc-0123456789abcdef/s3")]);
    doc["$NAME"] = json!("renamed");
    commit(&mut s, set(PIECE, doc));
    assert_eq!(s.schedule(None).unwrap(), before);
}

#[test]
fn changing_an_interval_replans_only_that_entry() {
    let (t, mut s) = indexed();
    let first_at = t.clock.now_ms();
    let cb0 = "pc-0123456789abcdef/s1";
    let cb1 = "pc-0123456789abcdef/s2";
    commit(
        &mut s,
        set(PIECE, result(vec![entry(60, cb0), entry(120, cb1)])),
    );
    let before = s.schedule(None).unwrap();

    t.clock.advance_ms(45 * MINUTE_MS);
    let second_at = t.clock.now_ms();
    commit(
        &mut s,
        set(PIECE, result(vec![entry(60, cb0), entry(240, cb1)])),
    );
    let after = s.schedule(None).unwrap();
    assert_eq!(after[0], before[0], "the unchanged entry is untouched");
    assert_eq!(after[1].interval_minutes, 240);
    assert_eq!(after[1].declared_at_ms, second_at);
    assert_eq!(
        after[1].next_due_ms,
        expected_first_due(PIECE, 1, 240, second_at)
    );
    assert_eq!(before[1].declared_at_ms, first_at);
}

#[test]
fn changing_a_callback_replans_the_entry() {
    let (t, mut s) = indexed();
    commit(
        &mut s,
        set(PIECE, result(vec![entry(60, "pc-0123456789abcdef/s1")])),
    );
    t.clock.advance_ms(10 * MINUTE_MS);
    commit(
        &mut s,
        set(PIECE, result(vec![entry(60, "pc-0123456789abcdef/s9")])),
    );
    let rows = s.schedule(None).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].callback_stream, "pc-0123456789abcdef/s9");
    assert_eq!(rows[0].declared_at_ms, t.clock.now_ms());
}

#[test]
fn dropping_the_declaration_removes_the_rows_and_the_directory_moves_later() {
    let (t, mut s) = indexed();
    commit(
        &mut s,
        set(PIECE, result(vec![entry(60, "pc-0123456789abcdef/s1")])),
    );
    assert!(next_wake(&t).is_some());

    commit(&mut s, set(PIECE, json!({"$NAME": "feed", "value": 1})));
    assert_eq!(s.schedule(None).unwrap(), vec![]);
    assert_eq!(next_wake(&t), None);
}

#[test]
fn deleting_the_result_removes_its_rows_and_no_others() {
    let (t, mut s) = indexed();
    s.commit(
        system()
            .op(set(
                "pc-a",
                result(vec![entry(60, "pc-a/s0"), entry(90, "pc-a/s1")]),
            ))
            .op(set("pc-b", result(vec![entry(600, "pc-b/s0")]))),
    )
    .unwrap();
    commit(&mut s, DocOp::Delete { id: "pc-a".into() });
    let rows = s.schedule(None).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].piece, "pc-b");
    assert_eq!(
        next_wake(&t),
        Some(rows[0].next_due_ms),
        "moved later, to pc-b"
    );
}

#[test]
fn shortening_the_list_deletes_the_trailing_entries() {
    let (_t, mut s) = indexed();
    let (a, b, c) = (
        "pc-0123456789abcdef/s1",
        "pc-0123456789abcdef/s2",
        "pc-0123456789abcdef/s3",
    );
    commit(
        &mut s,
        set(
            PIECE,
            result(vec![entry(60, a), entry(60, b), entry(60, c)]),
        ),
    );
    let before = s.schedule(None).unwrap();
    commit(&mut s, set(PIECE, result(vec![entry(60, a)])));
    assert_eq!(s.schedule(None).unwrap(), vec![before[0].clone()]);
}

#[test]
fn malformed_entries_are_ignored_and_the_well_formed_ones_indexed() {
    let (_t, mut s) = indexed();
    commit(
        &mut s,
        set(
            PIECE,
            result(vec![
                json!({"intervalMinutes": 30, "callback": {"$stream": "pc-0123456789abcdef/s0"}}),
                json!({"intervalMinutes": 60, "callback": {"$link": {"doc": "x", "path": []}}}),
                json!({"intervalMinutes": "60", "callback": {"$stream": "pc-0123456789abcdef/s2"}}),
                entry(90, "pc-0123456789abcdef/s3"),
            ]),
        ),
    );
    let rows = s.schedule(None).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].entry, rows[0].interval_minutes), (3, 90));

    // A non-array declaration, or a non-object result, declares nothing.
    commit(
        &mut s,
        set(PIECE, json!({"$SCHEDULE": {"intervalMinutes": 60}})),
    );
    assert_eq!(s.schedule(None).unwrap(), vec![]);
    commit(&mut s, set(PIECE, json!([1, 2, 3])));
    assert_eq!(s.schedule(None).unwrap(), vec![]);
}

#[test]
fn an_entry_turned_malformed_loses_its_row() {
    let (_t, mut s) = indexed();
    let cb = "pc-0123456789abcdef/s1";
    commit(
        &mut s,
        set(PIECE, result(vec![entry(60, cb), entry(120, cb)])),
    );
    commit(
        &mut s,
        set(
            PIECE,
            result(vec![
                json!({"intervalMinutes": 5, "callback": {"$stream": cb}}),
                entry(120, cb),
            ]),
        ),
    );
    let rows = s.schedule(None).unwrap();
    assert_eq!(rows.iter().map(|r| r.entry).collect::<Vec<_>>(), vec![1]);
}

#[test]
fn a_commit_rejected_for_another_reason_leaves_no_rows() {
    let (t, mut s) = indexed();
    commit(&mut s, set("pc-other/c0", json!(5)));
    let err = s
        .commit(
            system()
                .op(set(
                    PIECE,
                    result(vec![entry(60, "pc-0123456789abcdef/s1")]),
                ))
                .op(DocOp::Patch {
                    id: "pc-other/c0".into(),
                    path: parse_path(&json!(["into", "a", "number"])).unwrap(),
                    value: json!(1),
                }),
        )
        .unwrap_err();
    assert!(matches!(err, StoreError::BadPath { .. }), "{err}");
    assert_eq!(s.schedule(None).unwrap(), vec![]);
    assert_eq!(s.read(PIECE).unwrap(), None);
    assert_eq!(next_wake(&t), None);
}

#[test]
fn only_piece_results_declare_schedules() {
    let (t, mut s) = indexed();
    let doc = result(vec![entry(60, "pc-0123456789abcdef/s1")]);
    s.commit(
        system()
            .op(set("pc-0123456789abcdef/c0", doc.clone()))
            .op(set("pc-0123456789abcdef/p0/n1", doc.clone()))
            .op(set("space/pieces", doc)),
    )
    .unwrap();
    assert_eq!(s.schedule(None).unwrap(), vec![]);
    assert_eq!(next_wake(&t), None);
}

#[test]
fn a_patch_at_the_schedule_key_is_indexed_and_a_patch_elsewhere_keeps_rows() {
    let (t, mut s) = indexed();
    commit(&mut s, set(PIECE, json!({"$NAME": "feed", "value": 0})));
    assert_eq!(s.schedule(None).unwrap(), vec![]);

    commit(
        &mut s,
        DocOp::Patch {
            id: PIECE.into(),
            path: parse_path(&json!(["$SCHEDULE"])).unwrap(),
            value: json!([entry(60, "pc-0123456789abcdef/s1")]),
        },
    );
    let rows = s.schedule(None).unwrap();
    assert_eq!(rows.len(), 1);

    t.clock.advance_ms(MINUTE_MS);
    commit(
        &mut s,
        DocOp::Patch {
            id: PIECE.into(),
            path: parse_path(&json!(["value"])).unwrap(),
            value: json!(1),
        },
    );
    assert_eq!(s.schedule(None).unwrap(), rows);

    commit(
        &mut s,
        DocOp::Patch {
            id: PIECE.into(),
            path: parse_path(&json!(["$SCHEDULE", 0, "intervalMinutes"])).unwrap(),
            value: json!(180),
        },
    );
    let rows = s.schedule(None).unwrap();
    assert_eq!(rows[0].interval_minutes, 180);
    assert_eq!(rows[0].declared_at_ms, t.clock.now_ms());
}

#[test]
fn within_one_commit_the_last_value_of_a_result_wins() {
    let (_t, mut s) = indexed();
    s.commit(
        system()
            .op(set(
                PIECE,
                result(vec![entry(60, "pc-0123456789abcdef/s1")]),
            ))
            .op(DocOp::Patch {
                id: PIECE.into(),
                path: parse_path(&json!(["value"])).unwrap(),
                value: json!(2),
            }),
    )
    .unwrap();
    assert_eq!(
        s.schedule(None).unwrap().len(),
        1,
        "a later patch elsewhere keeps the set's declaration"
    );

    s.commit(system().op(set(PIECE, json!({"value": 3}))).op(set(
        PIECE,
        result(vec![entry(90, "pc-0123456789abcdef/s1")]),
    )))
    .unwrap();
    let rows = s.schedule(None).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].interval_minutes, 90);
}

#[test]
fn an_authored_write_into_a_parked_space_is_indexed_at_once() {
    // No runtime, no lease, no session: the space is parked. Provisioning
    // writes the piece result directly, and the row is there immediately.
    let (t, mut s) = indexed();
    s.commit(
        CommitRequest::new(CommitClass::Authored, Author::principal("did:key:owner")).op(set(
            PIECE,
            result(vec![entry(60, "pc-0123456789abcdef/s1")]),
        )),
    )
    .unwrap();
    assert_eq!(s.current_lease().unwrap(), None);
    drop(s);
    let mut reopened = t.store.open_space(SPACE).unwrap();
    let rows = reopened.schedule(None).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(next_wake(&t), Some(rows[0].next_due_ms));
}

#[test]
fn random_mode_draws_its_offset_from_the_supplied_entropy() {
    let jitter = Jitter::new(JitterMode::Random, DEFAULT_WINDOW_MS, [0; 32]);
    // Every draw is 0, so the offset is the window's lower end.
    let (t, mut s) = indexed_with(ScheduleIndexHook::with_entropy(jitter, || 0));
    let at = t.clock.now_ms();
    commit(
        &mut s,
        set(PIECE, result(vec![entry(60, "pc-0123456789abcdef/s1")])),
    );
    let rows = s.schedule(None).unwrap();
    assert_eq!(rows[0].next_due_ms, at + 60 * MINUTE_MS - DEFAULT_WINDOW_MS);
}

/// Per-commit cost of the hook on commits that carry no schedule: a wave
/// writing three cells and a node output, and a whole-result `set` of a
/// piece without `[SCHEDULE]`. Prints figures; asserts nothing about time
/// (benchmarks, not tests, judge performance). Run with
/// `cargo test --release --test schedule_index -- --ignored --nocapture`.
#[test]
#[ignore]
fn measure_hook_cost_on_commits_without_a_schedule() {
    fn run(hooked: bool, result_set: bool, n: u64) -> std::time::Duration {
        let t = store();
        if hooked {
            t.store
                .add_hook(Arc::new(ScheduleIndexHook::new(Jitter::keyed(KEY))));
        }
        t.store.create_space(SPACE, "o").unwrap();
        let mut s = t.store.open_space(SPACE).unwrap();
        // Some rows elsewhere in the space, as a real space would have.
        s.commit(system().op(set("pc-x", result(vec![entry(60, "pc-x/s0")]))))
            .unwrap();
        let start = std::time::Instant::now();
        for i in 0..n {
            let mut req = system()
                .op(set(&format!("{PIECE}/c0"), json!(i)))
                .op(set(&format!("{PIECE}/c1"), json!({"n": i})))
                .op(set(&format!("{PIECE}/c2"), json!([i])))
                .op(set(&format!("{PIECE}/n0"), json!(i * 2)));
            if result_set {
                req = req.op(set(PIECE, json!({"$NAME": "x", "value": i})));
            }
            s.commit(req).unwrap();
        }
        start.elapsed()
    }
    let n = 3_000;
    for result_set in [false, true] {
        // Interleave and repeat to damp noise; keep the best of each.
        let mut best = [std::time::Duration::MAX; 2];
        for _ in 0..3 {
            for (i, hooked) in [false, true].into_iter().enumerate() {
                best[i] = best[i].min(run(hooked, result_set, n));
            }
        }
        let per = |d: std::time::Duration| d.as_secs_f64() * 1e6 / n as f64;
        println!(
            "result set in commit: {result_set}: without hook {:.2} µs/commit, with hook {:.2} µs/commit, ratio {:.3}",
            per(best[0]),
            per(best[1]),
            best[1].as_secs_f64() / best[0].as_secs_f64()
        );
    }
}

/// The directory may leave a space's undelivered flag unset while its wake
/// is already due (a due wake activates the space as surely, and every
/// activation delivers): a scheduled wake's firing then writes no directory
/// row. Moving the wake later must bring the flag back.
#[test]
fn a_due_wake_stands_for_undelivered_events_until_it_moves_later() {
    let (t, mut s) = indexed();
    commit(
        &mut s,
        set(PIECE, result(vec![entry(60, "pc-0123456789abcdef/s1")])),
    );
    let due = next_wake(&t).unwrap();
    t.clock.set_ms(due);
    let dir = |t: &TestStore| t.store.directory().get(SPACE).unwrap().unwrap();
    let moved_earlier = t
        .counters
        .host()
        .get(spacewake::metrics::Counter::DirectoryMovedEarlier);

    s.append_event(
        Author::server(),
        NewEvent {
            event_id: "e1".into(),
            stream: "pc-0123456789abcdef/s1".into(),
            payload: json!({}),
            fired_by: "server".into(),
        },
    )
    .unwrap();
    assert!(s.has_undelivered().unwrap());
    let e = dir(&t);
    assert!(!e.undelivered, "the due wake covers the event");
    assert_eq!(e.next_wake_ms, Some(due));
    assert_eq!(
        t.counters
            .host()
            .get(spacewake::metrics::Counter::DirectoryMovedEarlier),
        moved_earlier,
        "no directory write for the append"
    );
    // Boot discovery still finds the space (its due arm).
    let found = t.store.directory().discover(due).unwrap();
    assert!(found.iter().any(|d| d.id == SPACE));
    // Reopening does not "correct" the covered flag.
    drop(s);
    let mut s = t.store.open_space(SPACE).unwrap();
    assert!(!dir(&t).undelivered);

    // Dropping the declaration moves the wake away: the flag comes back.
    commit(&mut s, set(PIECE, json!({"$NAME": "feed", "value": 1})));
    let e = dir(&t);
    assert_eq!(e.next_wake_ms, None);
    assert!(e.undelivered, "undelivered events are flagged again");
}

// ----- one-off (`at`) entries ---------------------------------------------

fn at_entry(doc: &str, field: &str, stream: &str) -> Value {
    json!({"at": {"$link": {"doc": doc, "path": [field]}}, "callback": {"$stream": stream}})
}

fn space_counter(t: &TestStore, c: spacewake::metrics::Counter) -> i64 {
    t.counters.space_value(SPACE, c)
}

#[test]
fn a_one_off_entry_follows_its_field_in_the_commit_that_writes_it() {
    use spacewake::metrics::Counter;
    let (t, mut s) = indexed();
    let arg = format!("{PIECE}/argument");
    let t1 = t.clock.now_ms() + 90 * MINUTE_MS;
    // Declared with its field in one commit (as a piece is created).
    s.commit(
        system()
            .op(set(&arg, json!({"next": t1, "other": 0})))
            .op(set(
                PIECE,
                result(vec![at_entry(&arg, "next", "pc-0123456789abcdef/s1")]),
            )),
    )
    .unwrap();
    let row = s.schedule(None).unwrap()[0].clone();
    assert_eq!((row.next_due_ms, row.nominal_period), (t1, t1));
    assert_eq!(next_wake(&t), Some(t1));
    assert_eq!(space_counter(&t, Counter::ScheduleOneOffArmed), 1);

    // A handler's write of the field moves the wake, in that commit.
    let t2 = t1 - 30 * MINUTE_MS;
    commit(&mut s, set(&arg, json!({"next": t2, "other": 0})));
    assert_eq!(s.schedule(None).unwrap()[0].next_due_ms, t2);
    assert_eq!(next_wake(&t), Some(t2));
    // Another field of the document: nothing is written.
    let before = s.schedule(None).unwrap();
    commit(&mut s, set(&arg, json!({"next": t2, "other": 1})));
    assert_eq!(s.schedule(None).unwrap(), before);
    assert_eq!(space_counter(&t, Counter::ScheduleOneOffArmed), 2);
    // A patch of the field alone, as an ISO time with an offset.
    s.commit(system().op(DocOp::Patch {
        id: arg.clone(),
        path: vec![PathSeg::Key("next".into())],
        value: json!("2026-01-01T05:00:00+01:00"),
    }))
    .unwrap();
    assert_eq!(s.schedule(None).unwrap()[0].next_due_ms, 1_767_240_000_000);
    // Cleared: disarmed, and the directory has nothing to wake for.
    commit(&mut s, set(&arg, json!({"next": null, "other": 1})));
    assert_eq!(
        spacewake::schedule::EntryState::next_wake_ms(&s.schedule(None).unwrap()[0]),
        None
    );
    assert_eq!(space_counter(&t, Counter::ScheduleOneOffCleared), 1);

    // Re-committing the unchanged declaration keeps the row as it is.
    let before = s.schedule(None).unwrap();
    let mut doc = result(vec![at_entry(&arg, "next", "pc-0123456789abcdef/s1")]);
    doc["$NAME"] = json!("renamed");
    commit(&mut s, set(PIECE, doc));
    assert_eq!(s.schedule(None).unwrap(), before);

    // A fresh handle (a new tenure) follows the field too.
    drop(s);
    let mut s = t.store.open_space(SPACE).unwrap();
    let t3 = t.clock.now_ms() + 5 * MINUTE_MS;
    commit(&mut s, set(&arg, json!({"next": t3, "other": 1})));
    assert_eq!(s.schedule(None).unwrap()[0].next_due_ms, t3);
    assert_eq!(next_wake(&t), Some(t3));
}

#[test]
fn a_one_off_field_is_followed_through_a_link_to_another_document() {
    let (t, mut s) = indexed();
    let arg = format!("{PIECE}/argument");
    let cell = "pc-feedfacefeedface/c4";
    let t1 = t.clock.now_ms() + 60 * MINUTE_MS;
    s.commit(
        system()
            .op(set(cell, json!(t1)))
            .op(set(
                &arg,
                json!({"next": {"$link": {"doc": cell, "path": []}}}),
            ))
            .op(set(
                PIECE,
                result(vec![at_entry(&arg, "next", "pc-0123456789abcdef/s1")]),
            )),
    )
    .unwrap();
    assert_eq!(s.schedule(None).unwrap()[0].next_due_ms, t1);
    // The linked cell alone changes: the entry follows it.
    let t2 = t1 + 60 * MINUTE_MS;
    commit(&mut s, set(cell, json!(t2)));
    assert_eq!(s.schedule(None).unwrap()[0].next_due_ms, t2);
    assert_eq!(next_wake(&t), Some(t2));
}

#[test]
fn a_space_holds_at_most_256_one_off_times() {
    use spacewake::metrics::Counter;
    let (t, mut s) = indexed();
    let due = t.clock.now_ms() + 60 * MINUTE_MS;
    let mut req = system();
    for i in 0..257 {
        let piece = format!("pc-{i:016x}");
        let arg = format!("{piece}/argument");
        req = req.op(set(&arg, json!({"next": due + i}))).op(set(
            &piece,
            json!({"$SCHEDULE": [at_entry(&arg, "next", &format!("{piece}/s1"))]}),
        ));
    }
    s.commit(req).unwrap();
    let rows = s.schedule(None).unwrap();
    assert_eq!(rows.len(), 257);
    let armed = rows.iter().filter(|r| r.next_due_ms < u64::MAX / 2).count();
    assert_eq!(armed, 256);
    assert_eq!(space_counter(&t, Counter::ScheduleOneOffArmed), 256);
    assert_eq!(space_counter(&t, Counter::ScheduleOneOffRefused), 1);
    // One cleared makes room: the refused one is armed at its next write.
    let last = format!("pc-{:016x}", 256);
    commit(
        &mut s,
        set("pc-0000000000000000/argument", json!({"next": null})),
    );
    commit(
        &mut s,
        set(&format!("{last}/argument"), json!({"next": due + 1_000})),
    );
    let row = s.schedule(Some(&last)).unwrap().remove(0);
    assert_eq!(row.next_due_ms, due + 1_000);
}

#[test]
fn an_at_outside_the_pieces_own_state_is_never_indexed() {
    let (_t, mut s) = indexed();
    let foreign = "pc-feedfacefeedface/argument";
    commit(
        &mut s,
        set(
            PIECE,
            result(vec![at_entry(foreign, "next", "pc-0123456789abcdef/s1")]),
        ),
    );
    assert!(s.schedule(None).unwrap().is_empty());
    let why = spacewake::schedule::index::declaration_problems(
        PIECE,
        &result(vec![at_entry(foreign, "next", "s")]),
    );
    assert!(why[0].1.contains("own state"), "{why:?}");
}
