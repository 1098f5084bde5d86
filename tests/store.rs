//! The store on real SQLite files: commits, events, watermarks, the lease,
//! index hooks, the directory's early-never-late rule, migrations and
//! corrupt files.

mod common;

use common::{store, store_with};
use serde_json::json;
use spacewake::clock::Clock;
use spacewake::metrics::Counter;
use spacewake::schedule::EntryState;
use spacewake::store::path::parse_path;
use spacewake::store::*;
use std::sync::Arc;

fn authored() -> CommitRequest {
    CommitRequest::new(CommitClass::Authored, Author::principal("did:key:alice"))
}

fn event(id: &str, stream: &str) -> NewEvent {
    NewEvent {
        event_id: id.into(),
        stream: stream.into(),
        payload: json!({"id": id}),
        fired_by: "did:key:alice".into(),
    }
}

fn set(id: &str, v: serde_json::Value) -> DocOp {
    DocOp::Set {
        id: id.into(),
        value: v,
    }
}

#[test]
fn commits_assign_gap_free_seqs_and_reads_return_the_writing_seq() {
    let t = store();
    t.store.create_space("s1", "did:key:alice").unwrap();
    let mut s = t.store.open_space("s1").unwrap();
    let a = s.commit(authored().op(set("a", json!({"n": 1})))).unwrap();
    let b = s
        .commit(
            authored()
                .op(set("b", json!(2)))
                .op(set("a", json!({"n": 3}))),
        )
        .unwrap();
    assert_eq!((a.seq, b.seq), (Some(1), Some(2)));
    let read = s.read("a").unwrap().unwrap();
    assert_eq!(read.value, json!({"n": 3}));
    assert_eq!((read.seq, read.rev), (2, 2));
    assert_eq!(s.read("b").unwrap().unwrap().seq, 2);
    assert_eq!(s.head_seq().unwrap(), 2);

    s.commit(authored().op(DocOp::Delete { id: "b".into() }))
        .unwrap();
    assert_eq!(s.read("b").unwrap(), None);
    let log = s.commits_since(1, 10).unwrap();
    assert_eq!(log.len(), 2);
    assert_eq!(log[1].ops[0].op, "delete");
    assert_eq!(log[0].principal, "did:key:alice");
    assert_eq!(t.counters.host().get(Counter::CommitsAuthored), 3);
}

#[test]
fn patch_by_path_writes_inside_the_document() {
    let t = store();
    t.store.create_space("s1", "o").unwrap();
    let mut s = t.store.open_space("s1").unwrap();
    s.commit(authored().op(set("doc", json!({"items": [{"t": "a"}]}))))
        .unwrap();
    s.commit(authored().op(DocOp::Patch {
        id: "doc".into(),
        path: parse_path(&json!(["items", 1])).unwrap(),
        value: json!({"t": "b"}),
    }))
    .unwrap();
    s.commit(authored().op(DocOp::Patch {
        id: "doc".into(),
        path: parse_path(&json!(["items", 0, "t"])).unwrap(),
        value: json!("A"),
    }))
    .unwrap();
    assert_eq!(
        s.read("doc").unwrap().unwrap().value,
        json!({"items": [{"t": "A"}, {"t": "b"}]})
    );
    assert_eq!(
        s.read_path("doc", &path::parse_dotted("items.1.t"))
            .unwrap(),
        Some(json!("b"))
    );
}

#[test]
fn an_operation_on_a_malformed_path_rejects_the_whole_commit() {
    let t = store();
    t.store.create_space("s1", "o").unwrap();
    let mut s = t.store.open_space("s1").unwrap();
    s.commit(authored().op(set("doc", json!({"n": 5}))))
        .unwrap();
    let err = s
        .commit(
            authored()
                .op(set("other", json!(1)))
                .op(DocOp::Patch {
                    id: "doc".into(),
                    path: parse_path(&json!(["n", "deeper"])).unwrap(),
                    value: json!(1),
                })
                .event(event("e1", "clicks")),
        )
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("operation 1 on document \"doc\""), "{msg}");
    assert!(msg.contains("descends into a number at /n"), "{msg}");
    assert_eq!(s.head_seq().unwrap(), 1, "no seq was consumed");
    assert_eq!(
        s.read("other").unwrap(),
        None,
        "no earlier op of the commit survived"
    );
    assert_eq!(
        s.event("e1").unwrap(),
        None,
        "no event of the commit survived"
    );
    assert_eq!(s.read("doc").unwrap().unwrap().value, json!({"n": 5}));
    assert_eq!(t.counters.host().get(Counter::CommitsRejected), 1);
}

#[test]
fn appending_the_same_event_id_twice_is_idempotent() {
    let t = store();
    t.store.create_space("s1", "o").unwrap();
    let mut s = t.store.open_space("s1").unwrap();
    let first = s
        .append_event(Author::principal("did:key:alice"), event("e1", "clicks"))
        .unwrap();
    assert_eq!(first.seq, Some(1));
    let again = s
        .append_event(Author::principal("did:key:alice"), event("e1", "clicks"))
        .unwrap();
    assert_eq!(again.seq, None, "nothing committed");
    assert_eq!(again.duplicates, vec![("e1".to_string(), 1)]);
    assert_eq!(s.head_seq().unwrap(), 1);
    let rec = s.event("e1").unwrap().unwrap();
    assert_eq!((rec.seq, rec.stream.as_str()), (1, "clicks"));
    assert_eq!(rec.fired_at_ms, t.clock.now_ms());
    assert_eq!(t.counters.host().get(Counter::EventsAppended), 1);
    assert_eq!(t.counters.host().get(Counter::EventsDuplicate), 1);
}

#[test]
fn watermarks_mark_events_delivered_and_cannot_pass_the_head() {
    let t = store();
    t.store.create_space("s1", "o").unwrap();
    let mut s = t.store.open_space("s1").unwrap();
    let alice = Author::principal("did:key:alice");
    s.append_event(alice.clone(), event("e1", "clicks"))
        .unwrap();
    s.append_event(alice.clone(), event("e2", "clicks"))
        .unwrap();
    s.append_event(alice.clone(), event("k1", "keys")).unwrap();
    assert!(s.has_undelivered().unwrap());
    let pending: Vec<_> = s
        .undelivered_events(10)
        .unwrap()
        .into_iter()
        .map(|e| e.event_id)
        .collect();
    assert_eq!(pending, ["e1", "e2", "k1"]);

    let lease = s.acquire_lease().unwrap().unwrap();
    let mut wave =
        CommitRequest::new(CommitClass::Derived, Author::server()).op(set("count", json!(2)));
    wave.watermarks = vec![("clicks".into(), 2)];
    wave.lease = Some(lease.clone());
    s.commit(wave).unwrap();
    let pending: Vec<_> = s
        .undelivered_events(10)
        .unwrap()
        .into_iter()
        .map(|e| e.event_id)
        .collect();
    assert_eq!(pending, ["k1"]);
    assert!(t.store.directory().get("s1").unwrap().unwrap().undelivered);

    let mut past = CommitRequest::new(CommitClass::Derived, Author::server());
    past.watermarks = vec![("keys".into(), 99)];
    past.lease = Some(lease.clone());
    assert!(s
        .commit(past)
        .unwrap_err()
        .to_string()
        .contains("cannot pass its head"));

    let mut back = CommitRequest::new(CommitClass::Derived, Author::server());
    back.watermarks = vec![("clicks".into(), 1)];
    back.lease = Some(lease.clone());
    assert!(s
        .commit(back)
        .unwrap_err()
        .to_string()
        .contains("backwards"));

    let mut rest = CommitRequest::new(CommitClass::Derived, Author::server());
    rest.watermarks = vec![("keys".into(), 3)];
    rest.lease = Some(lease);
    s.commit(rest).unwrap();
    assert!(!s.has_undelivered().unwrap());
    assert!(!t.store.directory().get("s1").unwrap().unwrap().undelivered);
    let streams = s.streams().unwrap();
    assert_eq!(
        streams
            .iter()
            .map(|st| (st.stream.as_str(), st.head_seq, st.watermark_seq))
            .collect::<Vec<_>>(),
        [("clicks", 2, 2), ("keys", 3, 3)]
    );
}

#[test]
fn the_lease_is_acquired_renewed_expires_and_is_taken_over() {
    let t = store_with(|c| c.holder = Some("host-a/1".into()));
    let other = t.reopen_with(|c| c.holder = Some("host-b/1".into()));
    t.store.create_space("s1", "o").unwrap();
    let mut a = t.store.open_space("s1").unwrap();
    let mut b = other.open_space("s1").unwrap();

    let la = a.acquire_lease().unwrap().expect("free lease is acquired");
    assert_eq!(la.tenure, 1);
    assert_eq!(la.expires_at_ms, t.clock.now_ms() + 15_000);
    assert_eq!(
        b.acquire_lease().unwrap(),
        None,
        "a live lease is not taken"
    );

    t.clock.advance_ms(5_000);
    let la = a.renew_lease(&la).unwrap().expect("renewed while held");
    assert_eq!(la.expires_at_ms, t.clock.now_ms() + 15_000);

    t.clock.advance_ms(15_000);
    let lb = b
        .acquire_lease()
        .unwrap()
        .expect("expired lease is taken over");
    assert_eq!((lb.holder.as_str(), lb.tenure), ("host-b/1", 2));
    assert_eq!(a.renew_lease(&la).unwrap(), None, "the old holder lost it");

    // A derived commit from the old holder is refused; from the new one, accepted.
    let mut stale =
        CommitRequest::new(CommitClass::Derived, Author::server()).op(set("x", json!(1)));
    stale.lease = Some(la.clone());
    let err = a.commit(stale).unwrap_err();
    assert!(matches!(err, StoreError::NotLeaseHolder(_)), "{err}");
    assert!(err.to_string().contains("host-b/1 holds tenure 2"), "{err}");
    let mut fresh =
        CommitRequest::new(CommitClass::Derived, Author::server()).op(set("x", json!(2)));
    fresh.lease = Some(lb.clone());
    assert_eq!(b.commit(fresh).unwrap().seq, Some(1));

    // Without any lease, a derived commit is refused.
    let err = a
        .commit(CommitRequest::new(CommitClass::Derived, Author::server()).op(set("x", json!(3))))
        .unwrap_err();
    assert!(matches!(err, StoreError::NotLeaseHolder(_)));

    // An expired lease of the right holder and tenure is refused too.
    t.clock.advance_ms(15_001);
    let mut late =
        CommitRequest::new(CommitClass::Derived, Author::server()).op(set("x", json!(4)));
    late.lease = Some(lb.clone());
    assert!(b.commit(late).unwrap_err().to_string().contains("expired"));

    // Release makes it free at once.
    let lb = b.acquire_lease().unwrap().unwrap();
    b.release_lease(&lb).unwrap();
    let la2 = a.acquire_lease().unwrap().expect("released lease is free");
    assert!(la2.tenure > lb.tenure);
    assert_eq!(a.read("x").unwrap().unwrap().value, json!(2));
    // Two refusals happened through host A; the third through host B.
    assert_eq!(t.counters.host().get(Counter::DerivedRefused), 2);
    assert_eq!(t.counters.host().get(Counter::LeaseLost), 1);
}

/// A hook that indexes `{"schedule": dueMs}` documents and fails on demand.
struct TestHook {
    fail: bool,
}

impl IndexHook for TestHook {
    fn name(&self) -> &'static str {
        "test-schedule"
    }
    fn on_commit(&self, c: &CommitView<'_>, plane: &mut PlaneTx<'_>) -> Result<(), String> {
        for op in c.ops {
            if let Some(due) = op
                .doc_after
                .as_ref()
                .and_then(|v| v.get("schedule"))
                .and_then(|v| v.as_u64())
            {
                let mut row = ScheduleRow::new(&op.doc_id, 0, 60, "tick", c.at_ms, due);
                row.wake_ms = Some(due);
                plane.upsert_schedule(&row).map_err(|e| e.to_string())?;
            } else if op.op == "delete" {
                plane
                    .delete_schedule(&op.doc_id, None)
                    .map_err(|e| e.to_string())?;
            }
        }
        if self.fail {
            return Err("refusing on purpose".into());
        }
        Ok(())
    }
}

#[test]
fn a_failing_index_hook_leaves_neither_commit_nor_plane_rows() {
    let t = store();
    t.store.add_hook(Arc::new(TestHook { fail: true }));
    t.store.create_space("s1", "o").unwrap();
    let mut s = t.store.open_space("s1").unwrap();
    let err = s
        .commit(authored().op(set("piece", json!({"schedule": 5_000}))))
        .unwrap_err();
    assert!(err.to_string().contains("refusing on purpose"), "{err}");
    assert_eq!(s.head_seq().unwrap(), 0);
    assert_eq!(s.read("piece").unwrap(), None);
    assert!(s.schedule(None).unwrap().is_empty());
    assert_eq!(
        t.store.directory().get("s1").unwrap().unwrap().next_wake_ms,
        None
    );
    assert_eq!(t.counters.host().get(Counter::HookFailures), 1);
}

#[test]
fn hooks_write_plane_rows_with_the_commit_and_the_directory_follows() {
    let t = store();
    t.store.add_hook(Arc::new(TestHook { fail: false }));
    t.store.create_space("s1", "o").unwrap();
    let mut s = t.store.open_space("s1").unwrap();
    let now = t.clock.now_ms();
    s.commit(authored().op(set("p1", json!({"schedule": now + 9_000}))))
        .unwrap();
    s.commit(authored().op(set("p2", json!({"schedule": now + 4_000}))))
        .unwrap();
    let rows = s.schedule(None).unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(
        t.store.directory().get("s1").unwrap().unwrap().next_wake_ms,
        Some(now + 4_000)
    );
    // Dropping the earlier entry moves the directory later, to the truth.
    s.commit(authored().op(DocOp::Delete { id: "p2".into() }))
        .unwrap();
    assert_eq!(
        t.store.directory().get("s1").unwrap().unwrap().next_wake_ms,
        Some(now + 9_000)
    );
    assert_eq!(t.store.directory().discover(now + 8_999).unwrap(), vec![]);
    let found = t.store.directory().discover(now + 9_000).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].id, "s1");
}

#[test]
fn a_crash_before_the_space_commit_leaves_the_directory_early_never_late() {
    let t = store_with(|c| c.fault = Some((FaultPoint::BeforeSpaceCommit, FaultAction::Error)));
    t.store.add_hook(Arc::new(TestHook { fail: false }));
    t.store.create_space("s1", "o").unwrap();
    let now = t.clock.now_ms();
    {
        let mut s = t.store.open_space("s1").unwrap();
        let err = s
            .commit(
                authored()
                    .op(set("p", json!({"schedule": now + 1_000})))
                    .event(event("e1", "clicks")),
            )
            .unwrap_err();
        assert!(err.to_string().contains("injected fault"));
        assert_eq!(s.head_seq().unwrap(), 0, "the space commit never happened");
    }
    // The directory was moved earlier first: it is early (claims a wake and
    // undelivered events the space does not have), which is allowed.
    let entry = t.store.directory().get("s1").unwrap().unwrap();
    assert_eq!(entry.next_wake_ms, Some(now + 1_000));
    assert!(entry.undelivered);
    // Reopening the space (as discovery would) corrects it to the truth.
    let healthy = t.reopen_with(|_| {});
    healthy.open_space("s1").unwrap();
    let entry = healthy.directory().get("s1").unwrap().unwrap();
    assert_eq!((entry.next_wake_ms, entry.undelivered), (None, false));
}

#[test]
fn a_crash_after_the_space_commit_leaves_the_directory_early_never_late() {
    let t = store();
    t.store.create_space("s1", "o").unwrap();
    {
        let mut s = t.store.open_space("s1").unwrap();
        s.append_event(Author::principal("did:key:alice"), event("e1", "clicks"))
            .unwrap();
    }
    assert!(t.store.directory().get("s1").unwrap().unwrap().undelivered);
    let crashing =
        t.reopen_with(|c| c.fault = Some((FaultPoint::AfterSpaceCommit, FaultAction::Error)));
    {
        let mut s = crashing.open_space("s1").unwrap();
        let lease = s.acquire_lease().unwrap().unwrap();
        let mut wave = CommitRequest::new(CommitClass::Derived, Author::server());
        wave.watermarks = vec![("clicks".into(), 1)];
        wave.lease = Some(lease);
        assert!(s.commit(wave).is_err(), "the process 'died' after COMMIT");
        assert!(!s.has_undelivered().unwrap(), "the wave itself committed");
    }
    // The directory still says undelivered: early, so discovery re-checks.
    assert!(t.store.directory().get("s1").unwrap().unwrap().undelivered);
    assert_eq!(t.store.directory().discover(0).unwrap().len(), 1);
    t.store.open_space("s1").unwrap();
    assert!(!t.store.directory().get("s1").unwrap().unwrap().undelivered);
}

#[test]
fn discovery_finds_spaces_with_undelivered_events_or_due_wakes_only() {
    let t = store();
    t.store.add_hook(Arc::new(TestHook { fail: false }));
    let now = t.clock.now_ms();
    for id in ["idle", "evented", "due", "later"] {
        t.store.create_space(id, "o").unwrap();
    }
    let mut s = t.store.open_space("evented").unwrap();
    s.append_event(Author::principal("p"), event("e", "st"))
        .unwrap();
    let mut s = t.store.open_space("due").unwrap();
    s.commit(authored().op(set("p", json!({"schedule": now - 1}))))
        .unwrap();
    let mut s = t.store.open_space("later").unwrap();
    s.commit(authored().op(set("p", json!({"schedule": now + 60_000}))))
        .unwrap();
    let mut found: Vec<_> = t
        .store
        .directory()
        .discover(now)
        .unwrap()
        .into_iter()
        .map(|d| d.id)
        .collect();
    found.sort();
    assert_eq!(found, ["due", "evented"]);
    assert_eq!(t.store.directory().earliest_wake().unwrap(), Some(now - 1));
    assert_eq!(t.store.directory().upcoming_wakes(10).unwrap().len(), 2);
}

/// Builds space "old" by hand at schema `version`, as an older binary would
/// have left it, with `rows` inserted, and registers it in the directory.
fn old_space_file(t: &common::TestStore, version: usize, rows: &str) -> std::path::PathBuf {
    let path = t.store.space_path("old");
    let conn = rusqlite::Connection::open(&path).unwrap();
    for m in &SPACE_MIGRATIONS[..version] {
        conn.execute_batch(m.sql).unwrap();
    }
    conn.execute_batch(&format!("PRAGMA user_version = {version}; {rows}"))
        .unwrap();
    drop(conn);
    t.store
        .directory()
        .files()
        .unwrap()
        .insert_space("old", "o", 0)
        .unwrap();
    path
}

#[test]
fn an_old_space_file_is_upgraded_and_a_newer_one_is_refused() {
    let t = store();
    let path = old_space_file(
        &t,
        1,
        "INSERT INTO commits VALUES (1, 'authored', 'did:key:old', NULL, 0, 1, 0); \
         INSERT INTO docs VALUES ('kept', '{\"v\":1}', 1, 1);",
    );
    let mut s = t.store.open_space("old").unwrap();
    assert_eq!(s.read("kept").unwrap().unwrap().value, json!({"v": 1}));
    assert!(s.schedule(None).unwrap().is_empty(), "migration 2 ran");
    s.commit(authored().op(set("new", json!(2)))).unwrap();
    drop(s);
    let version: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, SPACE_MIGRATIONS.len() as i64);

    // A file from the future is refused with a clear error and left alone.
    t.store.create_space("future", "o").unwrap();
    let fpath = t.store.space_path("future");
    rusqlite::Connection::open(&fpath)
        .unwrap()
        .execute_batch("PRAGMA user_version = 99")
        .unwrap();
    let err = t.store.open_space("future").unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("future.sqlite"), "{msg}");
    let supported = format!(
        "schema version 99 is newer than this binary supports ({})",
        SPACE_MIGRATIONS.len()
    );
    assert!(msg.contains(&supported), "{msg}");
    assert!(fpath.exists(), "a newer file is not quarantined");
}

/// A file from before each occurrence kept its own delivery state (schema
/// 7) held one occurrence's retry in the row's columns: after the upgrade
/// it is that one pending occurrence, retried as before.
#[test]
fn a_retry_planned_before_the_pending_column_survives_the_upgrade() {
    let t = store();
    old_space_file(
        &t,
        7,
        "INSERT INTO schedule_index (space, piece, entry, interval_minutes, \
           callback_stream, declared_at_ms, nominal_period, next_due_ms, attempts, \
           retry_due_ms, inflight_event) \
         VALUES ('old', 'pc-a', 0, 60, 'pc-a/s0', 0, 4, 14400000, 2, 11000000, \
           'wake/pc-a/0/0/3/retry1');",
    );
    let mut s = t.store.open_space("old").unwrap();
    let row = s.schedule(None).unwrap().remove(0);
    assert_eq!(
        row.pending,
        vec![spacewake::store::PendingWake {
            occurrence: "wake/pc-a/0/0/3".into(),
            period: 3,
            attempts: 2,
            inflight: Some("wake/pc-a/0/0/3/retry1".into()),
            retry_due_ms: Some(11_000_000),
        }]
    );
    assert_eq!(
        row.wake_ms,
        Some(11_000_000),
        "the retry still wakes the space"
    );
    assert_eq!(row.attempts(), 2);
    // Written back, it is stored in the new column and reads the same.
    s.plane(|p| p.upsert_schedule(&row)).unwrap();
    assert_eq!(s.schedule(None).unwrap()[0].pending, row.pending);
}

#[test]
fn a_corrupt_space_file_is_quarantined_and_other_spaces_keep_working() {
    let t = store();
    for id in ["good", "garbage", "truncated"] {
        t.store.create_space(id, "o").unwrap();
        let mut s = t.store.open_space(id).unwrap();
        for i in 0..50 {
            s.commit(authored().op(set(&format!("d{i}"), json!({"pad": "y".repeat(500)}))))
                .unwrap();
        }
    }
    std::fs::write(
        t.store.space_path("garbage"),
        b"this is not a database at all, sorry",
    )
    .unwrap();
    let tpath = t.store.space_path("truncated");
    let len = std::fs::metadata(&tpath).unwrap().len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&tpath)
        .unwrap();
    f.set_len(len / 2).unwrap();
    drop(f);

    for id in ["garbage", "truncated"] {
        let err = t.store.open_space(id).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{msg}");
        assert!(
            msg.contains(&format!("{id}.sqlite")),
            "error names the file: {msg}"
        );
        assert!(msg.contains("quarantine"), "{msg}");
        assert!(!t.store.space_path(id).exists(), "file moved aside");
        let entry = t.store.directory().get(id).unwrap().unwrap();
        assert!(entry.quarantined.is_some());
        assert!(matches!(
            t.store.open_space(id).unwrap_err(),
            StoreError::Quarantined { .. }
        ));
    }
    let quarantined = std::fs::read_dir(t.dir.path().join("quarantine"))
        .unwrap()
        .count();
    assert!(quarantined >= 2);
    assert_eq!(t.counters.host().get(Counter::SpacesQuarantined), 2);

    let mut good = t.store.open_space("good").unwrap();
    assert_eq!(good.head_seq().unwrap(), 50);
    good.commit(authored().op(set("after", json!(true))))
        .unwrap();
    assert_eq!(
        t.store.directory().discover(t.clock.now_ms()).unwrap(),
        vec![]
    );
}

#[test]
fn bad_space_ids_are_refused_before_touching_the_filesystem() {
    let t = store();
    for bad in ["", "../etc", "a/b", ".hidden", "sp ace"] {
        assert!(
            matches!(
                t.store.create_space(bad, "o"),
                Err(StoreError::InvalidSpaceId { .. })
            ),
            "{bad:?}"
        );
    }
    t.store.create_space("did:key:z6Mk-ok_1.x", "o").unwrap();
    assert!(matches!(
        t.store.create_space("did:key:z6Mk-ok_1.x", "o"),
        Err(StoreError::SpaceExists(_))
    ));
    assert!(matches!(
        t.store.open_space("nope"),
        Err(StoreError::UnknownSpace(_))
    ));
}

#[test]
fn plane_only_bookkeeping_never_creates_a_commit() {
    let t = store();
    t.store.create_space("s1", "o").unwrap();
    let mut s = t.store.open_space("s1").unwrap();
    let delta = LedgerDelta {
        cpu_us: 120,
        wall_us: 300,
        waves: 1,
        actions: 4,
        ..Default::default()
    };
    s.plane(|p| p.add_ledger(Bucket::Scheduled, 0, &delta))
        .unwrap();
    s.plane(|p| p.add_ledger(Bucket::Scheduled, 0, &delta))
        .unwrap();
    s.plane(|p| p.set_policy("scheduledBudgetUs", Some("5000")))
        .unwrap();
    assert_eq!(s.head_seq().unwrap(), 0);
    let ledger = s.ledger().unwrap();
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].totals.cpu_us, 240);
    assert_eq!(ledger[0].totals.waves, 2);
    assert_eq!(
        s.plane(|p| p.policy("scheduledBudgetUs"))
            .unwrap()
            .as_deref(),
        Some("5000")
    );
}

#[test]
fn a_closed_space_keeps_a_small_wal_checkpoints_a_larger_one_in_place_and_truncates_a_huge_one() {
    let t = store();
    t.store.create_space("s1", "did:key:alice").unwrap();
    let path = t.store.space_path("s1");
    let wal = std::path::PathBuf::from(format!("{}-wal", path.display()));
    let shm = std::path::PathBuf::from(format!("{}-shm", path.display()));
    // What the main file holds by itself, read from a copy without the WAL.
    let main_file_alone = |key: &str| -> Option<String> {
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join("alone.sqlite");
        std::fs::copy(&path, &copy).unwrap();
        let conn = rusqlite::Connection::open(&copy).unwrap();
        conn.query_row("SELECT value FROM docs WHERE id = ?1", [key], |r| {
            r.get::<_, String>(0)
        })
        .ok()
    };
    {
        let mut s = t.store.open_space("s1").unwrap();
        s.commit(authored().op(set("a", json!(1)))).unwrap();
    }
    // Small: the WAL and its index stay for the next open (no file churn).
    let small = std::fs::metadata(&wal).unwrap().len();
    assert!(
        small > 0 && small <= CLOSE_CHECKPOINT_FRAMES as u64 * 4120,
        "WAL {small} bytes"
    );
    assert!(shm.exists());
    assert_eq!(main_file_alone("a"), None, "still only in the WAL");
    // A second process reads the commit through the kept WAL.
    let other = t.reopen_with(|_| {});
    assert_eq!(
        other
            .open_space("s1")
            .unwrap()
            .read("a")
            .unwrap()
            .unwrap()
            .value,
        json!(1)
    );
    let blob = "x".repeat(64 * 1024);
    // Larger: checkpointed into the main file at close; the WAL file keeps
    // its length for the next writes.
    {
        let mut s = t.store.open_space("s1").unwrap();
        for i in 0..4 {
            s.commit(authored().op(set(&format!("big{i}"), json!(blob))))
                .unwrap();
        }
    }
    let kept = std::fs::metadata(&wal).unwrap().len();
    assert!(
        kept > 256 * 1024 && kept <= KEEP_WAL_BYTES,
        "WAL {kept} bytes"
    );
    assert!(main_file_alone("a").is_some() && main_file_alone("big3").is_some());
    let mut s = t.store.open_space("s1").unwrap();
    assert_eq!(s.read("a").unwrap().unwrap().value, json!(1));
    assert_eq!(
        s.read("big3")
            .unwrap()
            .unwrap()
            .value
            .as_str()
            .unwrap()
            .len(),
        64 * 1024
    );
    // The stale frames past the restarted WAL's start are never read back:
    // a write after the reopen is what the next open sees.
    s.commit(authored().op(set("a", json!(2)))).unwrap();
    drop(s);
    let mut s = t.store.open_space("s1").unwrap();
    assert_eq!(s.read("a").unwrap().unwrap().value, json!(2));
    assert_eq!(s.read("big0").unwrap().unwrap().value, json!(blob));
    // Huge (a busy tenure's): checkpointed and truncated.
    for i in 0..20 {
        s.commit(authored().op(set(&format!("huge{i}"), json!(blob))))
            .unwrap();
    }
    drop(s);
    assert_eq!(std::fs::metadata(&wal).unwrap().len(), 0);
    assert!(main_file_alone("huge19").is_some());
}

#[test]
fn the_directory_knows_which_spaces_may_carry_a_budget_policy() {
    let t = store();
    t.store.create_space("s1", "did:key:alice").unwrap();
    let flag = || {
        t.store
            .directory()
            .get("s1")
            .unwrap()
            .unwrap()
            .budget_policy
    };
    assert_eq!(flag(), Some(false), "a new space has no policy");
    let mut s = t.store.open_space("s1").unwrap();
    s.plane(|p| p.set_policy("scheduled_budget_us", Some("5")))
        .unwrap();
    assert_eq!(flag(), Some(true));
    // Removing it never clears the mark: over-inclusive is safe.
    s.plane(|p| p.set_policy("scheduled_budget_us", None))
        .unwrap();
    assert_eq!(flag(), Some(true));
    // A failed plane transaction that wrote a policy still leaves the mark.
    t.store.create_space("s2", "did:key:alice").unwrap();
    let mut s2 = t.store.open_space("s2").unwrap();
    let r: StoreResult<()> = s2.plane(|p| {
        p.set_policy("scheduled_budget_us", Some("5"))?;
        Err(StoreError::InvalidCommit("abort".into()))
    });
    assert!(r.is_err());
    assert_eq!(
        t.store
            .directory()
            .get("s2")
            .unwrap()
            .unwrap()
            .budget_policy,
        Some(false),
        "the mark is written after the closure succeeds, before the commit"
    );
}

/// A space opened exclusively (a scheduled tenure's file) keeps others out
/// until it reopens shared, and what it wrote is there for everyone after.
/// A store with space `s1`, opened exclusively.
fn exclusive_s1() -> (common::TestStore, Space) {
    let t = store();
    t.store.create_space("s1", "did:key:alice").unwrap();
    let ex = t
        .store
        .open_space_with("s1", FileAccess::Exclusive)
        .unwrap();
    assert_eq!(ex.access(), FileAccess::Exclusive);
    (t, ex)
}

#[test]
fn an_exclusive_open_keeps_others_waiting_until_it_shares_the_file() {
    let (t, mut ex) = exclusive_s1();
    ex.commit(authored().op(set("a", json!(1)))).unwrap();
    let host = t.counters.host();
    assert_eq!(host.get(Counter::SpacesOpenedExclusive), 1);

    // Another "host" on the same files waits for the file...
    let other = t.reopen_with(|_| {});
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut s = other.open_space("s1").unwrap();
        tx.send(s.read("a").unwrap().map(|d| d.value)).unwrap();
        s
    });
    assert!(
        rx.recv_timeout(std::time::Duration::from_millis(300))
            .is_err(),
        "a second connection got in while the file was exclusive"
    );
    // ...until the exclusive handle shares it, staying open and writable.
    ex.share().unwrap();
    assert_eq!(ex.access(), FileAccess::Shared);
    assert_eq!(host.get(Counter::SpacesReopenedShared), 1);
    let seen = rx
        .recv_timeout(std::time::Duration::from_secs(5))
        .expect("the reader got in once the file was shared");
    assert_eq!(seen, Some(json!(1)));
    ex.commit(authored().op(set("a", json!(2)))).unwrap();
    let mut theirs = reader.join().unwrap();
    assert_eq!(theirs.read("a").unwrap().unwrap().value, json!(2));
}

/// An exclusive open of a file someone else has open does not wait for
/// them: it opens shared (counted), and both see each other's commits.
#[test]
fn an_exclusive_open_of_a_file_open_elsewhere_opens_it_shared() {
    let t = store();
    t.store.create_space("s1", "did:key:alice").unwrap();
    let mut held = t.store.open_space("s1").unwrap();
    held.commit(authored().op(set("a", json!(1)))).unwrap();
    let started = std::time::Instant::now();
    let mut ex = t
        .store
        .open_space_with("s1", FileAccess::Exclusive)
        .unwrap();
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
    assert_eq!(ex.access(), FileAccess::Shared);
    let host = t.counters.host();
    assert_eq!(host.get(Counter::SpacesExclusiveFallbacks), 1);
    assert_eq!(host.get(Counter::SpacesOpenedExclusive), 0);
    assert_eq!(ex.read("a").unwrap().unwrap().value, json!(1));
    ex.commit(authored().op(set("a", json!(2)))).unwrap();
    assert_eq!(held.read("a").unwrap().unwrap().value, json!(2));
}

/// Commits made exclusively (the WAL index in the connection's memory, no
/// `-shm`) survive a crash: a later shared open rebuilds the index from
/// the WAL.
#[test]
fn commits_made_exclusively_survive_an_unclean_close() {
    let (t, mut ex) = exclusive_s1();
    for i in 0..20 {
        ex.commit(authored().op(set("a", json!(i)))).unwrap();
    }
    // No close, no checkpoint: as if the process died here. The forgotten
    // connection still holds its lock in this process (a crash would have
    // released it), so the files are copied as the crash left them; the
    // SIGKILL tests (`tests/schedule_crash.rs`) kill real scheduled
    // tenures, which open their files this way.
    std::mem::forget(ex);
    let copy = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(t.dir.path()).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(copy.path().join(entry.file_name())).unwrap();
            for f in std::fs::read_dir(entry.path()).unwrap() {
                let f = f.unwrap();
                std::fs::copy(
                    f.path(),
                    copy.path().join(entry.file_name()).join(f.file_name()),
                )
                .unwrap();
            }
        } else {
            std::fs::copy(entry.path(), copy.path().join(entry.file_name())).unwrap();
        }
    }
    let after = Store::open(
        StoreConfig::new(copy.path()),
        t.clock.clone(),
        spacewake::metrics::Counters::new(),
    )
    .unwrap();
    let mut s = after.open_space("s1").unwrap();
    assert_eq!(s.read("a").unwrap().unwrap().value, json!(19));
    assert_eq!(s.head_seq().unwrap(), 20);
}

/// The page size of the test's space files.
const PAGE: u64 = 4096;

/// The frames of a WAL of `PAGE`-byte pages that carry its header's salts
/// (what is left past them is an earlier generation's): page number, page.
fn wal_frames(wal: &[u8]) -> Vec<(u32, &[u8])> {
    let frame = 24 + PAGE as usize;
    (32..wal.len().saturating_sub(frame - 1))
        .step_by(frame)
        .map(|at| &wal[at..at + frame])
        .take_while(|f| f[8..16] == wal[16..24])
        .map(|f| (u32::from_be_bytes(f[..4].try_into().unwrap()), &f[24..]))
        .collect()
}

#[test]
fn a_main_file_cut_short_is_caught_at_open_beside_a_kept_wal_and_a_checkpoint_cut_short_is_not() {
    let t = store();
    let blob = "x".repeat(8 * 1024);
    // Enough frames to be checkpointed at close, too few for the WAL to be
    // truncated: the WAL stays, with the restart's one frame in it.
    for id in ["cut", "lagging"] {
        t.store.create_space(id, "o").unwrap();
        let mut s = t.store.open_space(id).unwrap();
        for i in 0..15 {
            s.commit(authored().op(set(&format!("d{i}"), json!(blob))))
                .unwrap();
        }
    }
    let wal_of = |p: &std::path::Path| std::path::PathBuf::from(format!("{}-wal", p.display()));

    // Cut: the main file loses its last page; the kept WAL cannot supply it.
    let cut = t.store.space_path("cut");
    assert!(
        std::fs::metadata(wal_of(&cut)).unwrap().len() > 0,
        "the WAL is kept"
    );
    let len = std::fs::metadata(&cut).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&cut).unwrap();
    f.set_len(len - PAGE).unwrap();
    drop(f);
    let err = t.store.open_space("cut").unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("truncated"), "{err}");

    // Lagging: new pages written to the WAL, and a checkpoint that wrote
    // the first page (the new size) before the process died: the main file
    // is shorter than its header says, and the WAL holds what it lacks.
    let lagging = t.store.space_path("lagging");
    let before = std::fs::metadata(&lagging).unwrap().len();
    {
        let conn = rusqlite::Connection::open(&lagging).unwrap();
        conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
            true,
        )
        .unwrap();
        conn.execute_batch("PRAGMA wal_autocheckpoint = 0;")
            .unwrap();
        for i in 0..16 {
            conn.execute(
                "INSERT INTO space_policy (key, value) VALUES (?1, ?2)",
                rusqlite::params![format!("grow{i}"), "y".repeat(3 * 1024)],
            )
            .unwrap();
        }
    }
    let wal = std::fs::read(wal_of(&lagging)).unwrap();
    let first = wal_frames(&wal)
        .into_iter()
        .rev()
        .find(|(pgno, _)| *pgno == 1)
        .expect("the first page is in the WAL")
        .1
        .to_vec();
    let pages = u32::from_be_bytes(first[28..32].try_into().unwrap()) as u64;
    assert!(pages * PAGE > before, "the space grew in the WAL only");
    let mut bytes = std::fs::read(&lagging).unwrap();
    bytes[..PAGE as usize].copy_from_slice(&first);
    std::fs::write(&lagging, &bytes).unwrap();
    let mut s = t.store.open_space("lagging").unwrap();
    assert_eq!(s.read("d14").unwrap().unwrap().value, json!(blob));
    assert_eq!(s.head_seq().unwrap(), 15);
    drop(s);
    // The rows on the pages only the WAL held read back whole.
    let conn = rusqlite::Connection::open(&lagging).unwrap();
    let grown: i64 = conn
        .query_row(
            "SELECT count(*) FROM space_policy WHERE key LIKE 'grow%' AND length(value) = 3072",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(grown, 16);
}
