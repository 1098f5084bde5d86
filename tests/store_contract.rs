//! One behavioural suite for the store's contract (`store/mod.rs`,
//! `# Contract`), run against both backends from one source: the SQLite
//! files and a real PostgreSQL database (a throwaway cluster; see
//! `common/pg.rs`). Each check is written once over `SpaceBackend`.

mod common;

use serde_json::json;
use spacewake::clock::ManualClock;
use spacewake::metrics::{Counter, Counters};
use spacewake::store::postgres::{PgStore, PG_MIGRATIONS};
use spacewake::store::{
    Author, Bucket, CommitClass, CommitRequest, CommitView, DocOp, EventRecord, FireRun, IndexHook,
    Lease, LedgerDelta, NewEvent, PathSeg, PendingWake, PlaneTx, ScheduleRow, ScheduleStatus,
    SpaceBackend, SpaceStore, Store, StoreConfig, StoreError,
};
use std::sync::Arc;
use std::time::Duration;

/// Two "hosts" on one store, and how to let a lease expire.
struct Fleet<B> {
    a: B,
    b: B,
    counters_a: Arc<Counters>,
    /// The hosts' clock: commit and event times are read from it.
    clock: Arc<ManualClock>,
    expire: Box<dyn Fn()>,
    /// Makes a document of a space invalid behind the store's back (bytes
    /// that are not JSON), as a disk or an operator's stray write might.
    corrupt: Corrupter,
    /// Whether a wave's commit can give the lease back on a space opened
    /// shared: SQLite folds the release only on a file held exclusively;
    /// PostgreSQL always can.
    release_folds_when_shared: bool,
    _keep: Option<tempfile::TempDir>,
}

/// The PostgreSQL lease TTL: real time on the database's clock, so long
/// enough that a test's own steps never outlast it on a loaded machine
/// (400 ms did once, in a full CI run on two cores); `expire` sleeps past it.
const PG_TTL_MS: u64 = 2_000;

/// Commits of history both backends keep (`StoreConfig::history_commits`).
const HISTORY: u64 = 100;

/// Writes bytes that are not JSON into (space, document).
type Corrupter = Box<dyn Fn(&str, &str)>;

fn sys() -> Arc<dyn spacewake::clock::Clock> {
    Arc::new(spacewake::clock::SystemClock)
}

fn sqlite() -> Fleet<Store> {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::default());
    let open = |holder: &str, counters: Arc<Counters>| {
        let mut cfg = StoreConfig::new(dir.path());
        cfg.holder = Some(holder.into());
        cfg.history_commits = HISTORY;
        Store::open(cfg, clock.clone(), counters).unwrap()
    };
    let counters_a = Counters::new();
    let a = open("host-a/1", counters_a.clone());
    let b = open("host-b/1", Counters::new());
    let ttl = a.config().lease_ttl_ms;
    let c = clock.clone();
    Fleet {
        a,
        b,
        counters_a,
        clock: clock.clone(),
        expire: Box::new(move || {
            c.advance_ms(ttl + 1);
        }),
        release_folds_when_shared: false,
        corrupt: {
            let spaces = dir.path().join("spaces");
            Box::new(move |space, doc| {
                let c = rusqlite::Connection::open(spaces.join(format!("{space}.sqlite"))).unwrap();
                c.execute("UPDATE docs SET value = '{not json' WHERE id = ?1", [doc])
                    .unwrap();
            })
        },
        _keep: Some(dir),
    }
}

fn postgres(test: &str) -> Option<Fleet<PgStore>> {
    let url = common::pg::database(test)?;
    let counters_a = Counters::new();
    let clock = Arc::new(ManualClock::default());
    let open = |holder: &str, counters: Arc<Counters>| {
        let mut cfg = StoreConfig::new("");
        cfg.holder = Some(holder.into());
        cfg.lease_ttl_ms = PG_TTL_MS;
        cfg.history_commits = HISTORY;
        PgStore::open_with(&url, cfg, clock.clone(), counters).unwrap()
    };
    let a = open("host-a/1", counters_a.clone());
    let b = open("host-b/1", Counters::new());
    Some(Fleet {
        a,
        b,
        counters_a,
        clock,
        // Expiry is on the database's clock: wait it out.
        expire: Box::new(|| std::thread::sleep(Duration::from_millis(PG_TTL_MS + 100))),
        release_folds_when_shared: true,
        corrupt: {
            let url = url.clone();
            Box::new(move |space, doc| {
                let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
                c.execute(
                    "UPDATE docs SET value = '{not json' WHERE space = $1 AND id = $2",
                    &[&space, &doc],
                )
                .unwrap();
            })
        },
        _keep: None,
    })
}

/// Runs `check` against SQLite, then PostgreSQL.
macro_rules! both {
    ($name:ident, $check:ident) => {
        mod $name {
            #[test]
            fn sqlite() {
                super::$check(super::sqlite());
            }
            #[test]
            fn postgres() {
                if let Some(f) = super::postgres(stringify!($name)) {
                    super::$check(f);
                }
            }
        }
    };
}

fn set(id: &str, v: serde_json::Value) -> DocOp {
    DocOp::Set {
        id: id.into(),
        value: v,
    }
}

fn event(id: &str, stream: &str) -> NewEvent {
    NewEvent {
        event_id: id.into(),
        stream: stream.into(),
        payload: json!({ "id": id }),
        fired_by: "did:key:test".into(),
    }
}

fn authored() -> CommitRequest {
    CommitRequest::new(CommitClass::Authored, Author::principal("did:key:test"))
}

fn derived(lease: &Lease) -> CommitRequest {
    let mut r = CommitRequest::new(CommitClass::Derived, Author::server());
    r.lease = Some(lease.clone());
    r
}

both!(
    commits_are_gap_free_and_atomic,
    commits_are_gap_free_and_atomic
);
fn commits_are_gap_free_and_atomic<B: SpaceBackend>(f: Fleet<B>) {
    f.a.create("s1", "did:key:owner").unwrap();
    assert!(matches!(
        f.b.create("s1", "did:key:owner"),
        Err(StoreError::SpaceExists(_))
    ));
    let mut s = f.a.open("s1").unwrap();
    assert_eq!(s.head_seq().unwrap(), 0);
    f.clock.set_ms(1_800_000_000_000);
    let o = s.commit(authored().op(set("d", json!({"n": 1})))).unwrap();
    assert_eq!(o.seq, Some(1));
    let o = s
        .commit(authored().op(set("e", json!("text"))).op(DocOp::Patch {
            id: "d".into(),
            path: vec![PathSeg::Key("n".into())],
            value: json!(2),
        }))
        .unwrap();
    assert_eq!(o.seq, Some(2));
    // A commit whose second operation fails writes nothing, not even its first.
    let bad = s.commit(authored().op(set("d", json!({"n": 99}))).op(DocOp::Patch {
        id: "e".into(),
        path: vec![PathSeg::Key("x".into()), PathSeg::Key("y".into())],
        value: json!(1),
    }));
    assert!(
        matches!(bad, Err(StoreError::BadPath { index: 1, .. })),
        "{bad:?}"
    );
    assert_eq!(s.head_seq().unwrap(), 2);
    let d = s.read("d").unwrap().unwrap();
    assert_eq!((d.value, d.seq, d.rev), (json!({"n": 2}), 2, 2));
    // The next commit takes the next seq: no gap where the failed one was.
    assert_eq!(
        s.commit(authored().op(set("f", json!(1)))).unwrap().seq,
        Some(3)
    );
    // Another host sees the same log.
    let mut other = f.b.open("s1").unwrap();
    let log = other.commits_since(0, 10).unwrap();
    assert_eq!(log.iter().map(|c| c.seq).collect::<Vec<_>>(), vec![1, 2, 3]);
    assert_eq!(log[1].ops.len(), 2);
    assert_eq!(
        log[0].at_ms, 1_800_000_000_000,
        "commit times are the hosts' clock"
    );
    assert_eq!(log[1].ops[1].op, "patch");
    assert_eq!(other.commits_since(2, 10).unwrap().len(), 1);
    assert!(matches!(f.a.open("nope"), Err(StoreError::UnknownSpace(_))));
}

both!(
    events_are_idempotent_and_watermarks_move_forward,
    events_and_watermarks
);
fn events_and_watermarks<B: SpaceBackend>(f: Fleet<B>) {
    f.a.create("s2", "did:key:owner").unwrap();
    let mut s = f.a.open("s2").unwrap();
    let me = Author::principal("did:key:test");
    assert_eq!(
        s.append_event(me.clone(), event("e1", "clicks"))
            .unwrap()
            .seq,
        Some(1)
    );
    let again = s.append_event(me.clone(), event("e1", "clicks")).unwrap();
    assert_eq!(again.seq, None, "a duplicate commits nothing");
    assert_eq!(again.duplicates, vec![("e1".to_string(), 1)]);
    assert_eq!(s.head_seq().unwrap(), 1);
    assert_eq!(
        s.append_event(me.clone(), event("e2", "clicks"))
            .unwrap()
            .seq,
        Some(2)
    );
    assert_eq!(
        s.append_event(me, event("k1", "keys")).unwrap().seq,
        Some(3)
    );
    let ids = |s: &mut B::Space| {
        s.undelivered_events(10)
            .unwrap()
            .into_iter()
            .map(|e| e.event_id)
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&mut s), vec!["e1", "e2", "k1"]);
    let mut r = authored();
    r.watermarks = vec![("clicks".into(), 1)];
    assert!(s.commit(r).unwrap().seq.is_some());
    assert_eq!(ids(&mut s), vec!["e2", "k1"]);
    let mut back = authored();
    back.watermarks = vec![("clicks".into(), 0)];
    assert!(matches!(s.commit(back), Err(StoreError::InvalidCommit(_))));
    let mut past = authored();
    past.watermarks = vec![("keys".into(), 4)];
    assert!(matches!(s.commit(past), Err(StoreError::InvalidCommit(_))));
    let streams = s.streams().unwrap();
    assert_eq!(streams.len(), 2);
    assert_eq!(
        (
            streams[0].stream.as_str(),
            streams[0].head_seq,
            streams[0].watermark_seq
        ),
        ("clicks", 2, 1)
    );
    let e2 = s.event("e2").unwrap().unwrap();
    assert_eq!((e2.seq, e2.payload), (2, json!({"id": "e2"})));
    assert!(s.event("nope").unwrap().is_none());
}

both!(leases_fence_derived_commits, leases_fence_derived_commits);
fn leases_fence_derived_commits<B: SpaceBackend>(f: Fleet<B>) {
    f.a.create("s3", "did:key:owner").unwrap();
    let mut sa = f.a.open("s3").unwrap();
    let mut sb = f.b.open("s3").unwrap();
    let la = sa.acquire_lease().unwrap().expect("a free lease is taken");
    assert_eq!(la.holder, "host-a/1");
    assert!(
        sb.acquire_lease().unwrap().is_none(),
        "a live lease is not taken"
    );
    assert_eq!(
        sa.commit(derived(&la).op(set("x", json!(1)))).unwrap().seq,
        Some(1)
    );
    // Without a lease, or with another holder's name, a derived commit is refused.
    let mut bare = CommitRequest::new(CommitClass::Derived, Author::server());
    bare.ops.push(set("x", json!(2)));
    assert!(matches!(
        sb.commit(bare),
        Err(StoreError::NotLeaseHolder(_))
    ));
    let forged = Lease {
        holder: "host-b/1".into(),
        ..la.clone()
    };
    assert!(matches!(
        sb.commit(derived(&forged).op(set("x", json!(3)))),
        Err(StoreError::NotLeaseHolder(_))
    ));

    (f.expire)();
    let lb = sb
        .acquire_lease()
        .unwrap()
        .expect("an expired lease is taken over");
    assert_eq!(lb.tenure, la.tenure + 1, "every taking raises the epoch");
    let refused0 = f.counters_a.space_value("s3", Counter::DerivedRefused);
    let stale = sa.commit(derived(&la).op(set("x", json!(4))));
    assert!(
        matches!(stale, Err(StoreError::NotLeaseHolder(_))),
        "{stale:?}"
    );
    assert_eq!(
        f.counters_a.space_value("s3", Counter::DerivedRefused),
        refused0 + 1,
        "the stale host's refused write is counted"
    );
    assert!(
        sa.renew_lease(&la).unwrap().is_none(),
        "a lost lease does not renew"
    );
    assert_eq!(
        sb.commit(derived(&lb).op(set("x", json!(5)))).unwrap().seq,
        Some(2)
    );
    assert_eq!(sa.read("x").unwrap().unwrap().value, json!(5));
    let renewed = sb.renew_lease(&lb).unwrap().expect("a live lease renews");
    assert_eq!(renewed.tenure, lb.tenure);
    sb.release_lease(&lb).unwrap();
    let cur = sa.current_lease().unwrap().unwrap();
    assert_eq!(
        (cur.tenure, cur.expires_at_ms),
        (lb.tenure, 0),
        "released: epoch kept"
    );
    let la2 = sa
        .acquire_lease()
        .unwrap()
        .expect("a released lease is free");
    assert_eq!(la2.tenure, lb.tenure + 1);
}

both!(
    a_commit_can_take_and_give_back_the_lease,
    take_and_release_in_commit
);
fn take_and_release_in_commit<B: SpaceBackend>(f: Fleet<B>) {
    f.a.create("s4", "did:key:owner").unwrap();
    let mut sa = f.a.open("s4").unwrap();
    let mut sb = f.b.open("s4").unwrap();
    let mut take = authored().event(event("w1", "wake"));
    take.take_lease = true;
    let o = sa.commit(take).unwrap();
    let lease = o.lease.expect("the commit took the lease");
    let mut other = authored().op(set("y", json!(1)));
    other.take_lease = true;
    assert!(
        matches!(sb.commit(other), Err(StoreError::NotLeaseHolder(_))),
        "a live lease refuses a commit that would take it"
    );
    assert_eq!(
        sb.head_seq().unwrap(),
        1,
        "and nothing of that commit is written"
    );
    // The wave's commit delivers the last event and gives the lease back.
    let mut wave = derived(&lease).op(set("out", json!("done")));
    wave.watermarks = vec![("wake".into(), 1)];
    wave.release_lease_if_idle = true;
    let o = sa.commit(wave).unwrap();
    assert_eq!(o.lease_released, f.release_folds_when_shared);
    if o.lease_released {
        assert_eq!(sa.current_lease().unwrap().unwrap().expires_at_ms, 0);
        assert!(
            sb.acquire_lease().unwrap().is_some(),
            "a given-back lease is free"
        );
    } else {
        assert!(
            sa.current_lease().unwrap().unwrap().expires_at_ms > 0,
            "kept"
        );
        assert!(sb.acquire_lease().unwrap().is_none());
    }
}

#[test]
fn sqlite_refuses_a_newer_schema() {
    let f = sqlite();
    f.a.create("s5", "did:key:owner").unwrap();
    let path = f.a.space_path("s5");
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch("PRAGMA user_version = 999").unwrap();
    drop(conn);
    let Err(e) = f.a.open("s5") else {
        panic!("a newer schema is refused")
    };
    assert!(
        matches!(e, StoreError::NewerSchema { found: 999, .. }),
        "{e}"
    );
}

#[test]
fn postgres_refuses_a_newer_schema_and_migrates_once() {
    let Some(url) = common::pg::database("newer_schema") else {
        return;
    };
    // Several hosts starting together apply the migrations once.
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let url = url.clone();
            std::thread::spawn(move || {
                PgStore::open(&url, &format!("h{i}"), 1000, sys(), Counters::new())
                    .map(|s| s.schema_version().unwrap())
            })
        })
        .collect();
    let latest = PG_MIGRATIONS.last().unwrap().0;
    for h in handles {
        assert_eq!(h.join().unwrap().unwrap(), latest);
    }
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    c.execute(
        "UPDATE store_meta SET value = '999' WHERE key = 'schema_version'",
        &[],
    )
    .unwrap();
    let Err(e) = PgStore::open(&url, "h", 1000, sys(), Counters::new()) else {
        panic!("a newer schema is refused")
    };
    assert!(
        matches!(
            e,
            StoreError::NewerDatabaseSchema {
                found: 999,
                supported
            } if supported == latest
        ),
        "{e}"
    );
    assert!(e.to_string().contains("upgrade spacewake"), "{e}");
}

#[test]
fn postgres_upgrades_a_database_migration_by_migration() {
    let Some(url) = common::pg::database("upgrade") else {
        return;
    };
    // A database an earlier binary left at migration 1, with a lease in it.
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    c.batch_execute(PG_MIGRATIONS[0].2).unwrap();
    c.batch_execute(
        "INSERT INTO store_meta VALUES ('schema_version', '1'); \
         INSERT INTO spaces (id, owner, created_at_ms) VALUES ('old', 'did:key:o', 0); \
         INSERT INTO execution_lease VALUES ('old', 'host-x/1', 7, now() + interval '1 hour');",
    )
    .unwrap();
    let s = PgStore::open(&url, "h", 1000, sys(), Counters::new()).unwrap();
    assert_eq!(s.schema_version().unwrap(), PG_MIGRATIONS.last().unwrap().0);
    let fleet = s.fleet().unwrap();
    // The old lease's holder, and this host by its heartbeat.
    assert_eq!(fleet.len(), 2, "{fleet:?}");
    assert_eq!(fleet[0].holder, "h");
    let fleet = &fleet[1..];
    assert_eq!(
        (fleet[0].holder.as_str(), fleet[0].spaces_held),
        ("host-x/1", 1)
    );
    assert!(
        fleet[0].last_renewal_ms > 0,
        "renewed_at filled in by the migration"
    );
    let lease = s.open("old").unwrap().current_lease().unwrap().unwrap();
    assert_eq!(lease.tenure, 7, "the data survives the upgrade");
}

both!(
    a_space_with_bad_rows_is_set_aside_and_the_others_serve,
    bad_rows_set_aside
);
fn bad_rows_set_aside<B: SpaceBackend>(f: Fleet<B>) {
    for id in ["bad", "good"] {
        f.a.create(id, "did:key:owner").unwrap();
        let mut s = f.a.open(id).unwrap();
        s.commit(authored().op(set("d", json!({"ok": true}))))
            .unwrap();
    }
    let mut bad = f.a.open("bad").unwrap();
    (f.corrupt)("bad", "d");
    let e = bad.read("d").unwrap_err();
    assert!(e.is_corruption(), "{e}");
    assert!(
        e.to_string().contains("not valid JSON") || e.to_string().contains("invalid JSON"),
        "{e}"
    );
    // Set aside: refused from then on, by this handle and by every host.
    assert!(matches!(
        bad.read("d"),
        Err(StoreError::Quarantined { .. }) | Err(StoreError::Corrupt { .. })
    ));
    assert!(matches!(
        f.b.open("bad"),
        Err(StoreError::Quarantined { .. })
    ));
    assert_eq!(
        f.counters_a.space_value("bad", Counter::SpacesQuarantined),
        1
    );
    // The other space keeps serving.
    let mut good = f.b.open("good").unwrap();
    assert_eq!(good.read("d").unwrap().unwrap().value, json!({"ok": true}));
    assert_eq!(
        good.commit(authored().op(set("e", json!(1)))).unwrap().seq,
        Some(2)
    );
}

/// An index hook for the plane checks: a document `sched:P` holding
/// `{"due": N}` declares one schedule entry of piece P due at N (any other
/// value removes it), and a document holding `{"fail": true}` makes the
/// hook refuse the commit.
struct DueHook;

impl IndexHook for DueHook {
    fn name(&self) -> &'static str {
        "due-hook"
    }

    fn on_commit(&self, c: &CommitView<'_>, plane: &mut PlaneTx<'_>) -> Result<(), String> {
        for op in c.ops {
            let after = op.doc_after.as_ref();
            if after.and_then(|v| v.get("fail")).is_some() {
                return Err(format!("document {} asks the hook to fail", op.doc_id));
            }
            let Some(piece) = op.doc_id.strip_prefix("sched:") else {
                continue;
            };
            let r = match after.and_then(|v| v.get("due")).and_then(|v| v.as_u64()) {
                Some(due) => spacewake::schedule::entry::save(
                    plane,
                    &mut ScheduleRow::new(piece, 0, 60, "tick", c.at_ms, due),
                ),
                None => plane.delete_schedule(piece, None).map(|_| ()),
            };
            r.map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

both!(index_hooks_are_atomic_with_their_commit, hooks_atomic);
fn hooks_atomic<B: SpaceBackend>(f: Fleet<B>) {
    f.a.add_hook(Arc::new(DueHook));
    f.a.create("s", "did:key:owner").unwrap();
    let mut s = f.a.open("s").unwrap();
    let dir = |f: &Fleet<B>| f.a.directory_next_wake("s").unwrap();

    // The hook's row is written with the commit, and the directory knows.
    s.commit(authored().op(set("sched:p", json!({"due": 5_000}))))
        .unwrap();
    let rows = s.schedule(None).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].piece.as_str(), rows[0].next_due_ms), ("p", 5_000));
    assert_eq!(dir(&f), Some(5_000));

    // A hook that refuses aborts the whole commit: no seq, no document, no row.
    let e = s
        .commit(
            authored()
                .op(set("x", json!(1)))
                .op(set("sched:q", json!({"due": 10})))
                .op(set("bad", json!({"fail": true}))),
        )
        .unwrap_err();
    assert!(matches!(e, StoreError::Hook { .. }), "{e}");
    assert_eq!(s.head_seq().unwrap(), 1);
    assert!(s.read("x").unwrap().is_none());
    assert_eq!(s.schedule(None).unwrap().len(), 1);
    assert_eq!(dir(&f), Some(5_000));
    assert_eq!(f.counters_a.space_value("s", Counter::HookFailures), 1);

    // So does the caller's extension; and what it writes lands with the commit.
    let e = s
        .commit_with(authored().op(set("sched:q", json!({"due": 10}))), |_, p| {
            p.set_action_state("node", "h1", 2)
                .map_err(|e| e.to_string())?;
            Err("the extension refuses".into())
        })
        .unwrap_err();
    assert!(e.to_string().contains("the extension refuses"), "{e}");
    assert!(s.action_states().unwrap().is_empty());
    assert_eq!(dir(&f), Some(5_000));
    let out = s
        .commit_with(
            authored().op(set("sched:p", json!({"due": 3_000}))),
            |v, p| {
                let delta = LedgerDelta {
                    commits: 1,
                    ..Default::default()
                };
                p.add_ledger(Bucket::Session, 0, &delta)
                    .and_then(|_| p.set_action_state("node", "h1", v.seq))
                    .map_err(|e| e.to_string())
            },
        )
        .unwrap();
    assert_eq!(out.seq, Some(2));
    assert_eq!(
        s.action_states().unwrap(),
        vec![("node".to_string(), "h1".to_string())]
    );
    assert_eq!(s.ledger().unwrap()[0].totals.commits, 1);
    // Earlier: the directory follows at once.
    assert_eq!(dir(&f), Some(3_000));

    // The entry removed: nothing is due, and the directory says so.
    s.commit(authored().op(set("sched:p", json!({})))).unwrap();
    assert!(s.schedule(None).unwrap().is_empty());
    assert_eq!(dir(&f), None);
}

both!(plane_rows_and_a_directory_never_late, plane_rows);
fn plane_rows<B: SpaceBackend>(f: Fleet<B>) {
    f.a.create("s", "did:key:owner").unwrap();
    let mut s = f.a.open("s").unwrap();
    let dir = |f: &Fleet<B>| f.a.directory_next_wake("s").unwrap();
    let mut row = ScheduleRow::new("p", 0, 60, "tick", 0, 9_000);

    // The schedule moves the directory: earlier at once, later when it is
    // the truth, never later than the earliest due entry.
    s.plane(|p| spacewake::schedule::entry::save(p, &mut row))
        .unwrap();
    assert_eq!(dir(&f), Some(9_000));
    let retry = |at_ms: u64, period: u64| PendingWake {
        occurrence: format!("wake/p/0/0/{period}"),
        period,
        attempts: 1,
        inflight: None,
        retry_due_ms: Some(at_ms),
    };
    row.pending = vec![retry(6_000, 1), retry(4_000, 2)];
    s.plane(|p| spacewake::schedule::entry::save(p, &mut row))
        .unwrap();
    assert_eq!(dir(&f), Some(4_000), "a retry is a wake: the earliest");
    let stored = s.schedule(Some("p")).unwrap();
    assert_eq!(stored[0].pending, row.pending, "each occurrence stored");
    assert_eq!(stored[0].cadence, None, "an interval has no cadence text");
    // A calendar entry's shape is kept as written, opaque to the store.
    let mut cal = ScheduleRow::new("p", 1, 0, "tick", 0, 20_000);
    cal.cadence = Some(r#"{"cron":"30 7 * * 1-5","timeZone":"Europe/Berlin"}"#.into());
    s.plane(|p| spacewake::schedule::entry::save(p, &mut cal))
        .unwrap();
    assert_eq!(s.schedule(Some("p")).unwrap()[1].cadence, cal.cadence);
    let declared = s.plane(|p| p.declared(Some("p"))).unwrap();
    assert_eq!(declared[1].cadence, cal.cadence);
    s.plane(|p| p.delete_schedule("p", Some(1))).unwrap();
    row.pending.clear();
    row.next_due_ms = 12_000;
    s.plane(|p| spacewake::schedule::entry::save(p, &mut row))
        .unwrap();
    let d = dir(&f).unwrap();
    assert!(d <= 12_000, "never late: {d}");
    row.status = ScheduleStatus::Paused;
    s.plane(|p| spacewake::schedule::entry::save(p, &mut row))
        .unwrap();
    assert_eq!(
        s.schedule(Some("p")).unwrap()[0].status,
        ScheduleStatus::Paused
    );

    // A plane transaction that fails writes nothing.
    let e = s
        .plane(|p| {
            p.delete_schedule("p", None)?;
            Err::<(), _>(StoreError::InvalidCommit("changed my mind".into()))
        })
        .unwrap_err();
    assert!(e.to_string().contains("changed my mind"), "{e}");
    assert_eq!(s.schedule(None).unwrap().len(), 1);

    // Ledger rows add up per (bucket, window).
    let d = LedgerDelta {
        cpu_us: 10,
        waves: 1,
        ..Default::default()
    };
    for _ in 0..3 {
        s.plane(|p| p.add_ledger(Bucket::Scheduled, 60_000, &d))
            .unwrap();
    }
    s.plane(|p| p.add_ledger(Bucket::Session, 60_000, &d))
        .unwrap();
    let ledger = s.ledger().unwrap();
    assert_eq!(ledger.len(), 2);
    let sched = ledger
        .iter()
        .find(|r| r.bucket == Bucket::Scheduled)
        .unwrap();
    assert_eq!((sched.totals.cpu_us, sched.totals.waves), (30, 3));

    // Fires: readers see the newest `keep`, oldest first.
    for (i, outcome) in ["failed", "retried", "failed", "fired"].iter().enumerate() {
        s.plane(|p| {
            p.record_fire(
                "p",
                0,
                1_000 * i as u64,
                &format!("w{i}"),
                i as u64,
                0,
                0,
                outcome,
                2,
            )
        })
        .unwrap();
    }
    let fires = s.fires("p", 0, 2).unwrap();
    let ids: Vec<&str> = fires.iter().map(|f| f.event_id.as_str()).collect();
    assert_eq!(ids, ["w2", "w3"]);

    // Settling: the fire on record takes its outcome and run; one no longer
    // on record (pruned) gets a row of its own at its settling time.
    let run = |at: u64| FireRun {
        settled_ms: Some(at),
        cpu_us: Some(7),
        error: Some("late".into()),
        ..FireRun::default()
    };
    s.plane(|p| p.settle_fire("p", 0, "w3", 3, "ok", &run(3_500), 2))
        .unwrap();
    let w3 = s.fires("p", 0, 2).unwrap().pop().unwrap();
    assert_eq!((w3.event_id.as_str(), w3.outcome.as_str()), ("w3", "ok"));
    assert_eq!((w3.fired_ms, w3.run), (3_000, run(3_500)));
    s.plane(|p| p.settle_fire("p", 0, "w0", 0, "failed", &run(9_000), 2))
        .unwrap();
    let fires = s.fires("p", 0, 2).unwrap();
    let got: Vec<(&str, u64, &str)> = fires
        .iter()
        .map(|f| (f.event_id.as_str(), f.fired_ms, f.outcome.as_str()))
        .collect();
    assert_eq!(got, [("w3", 3_000, "ok"), ("w0", 9_000, "failed")]);

    // Policies.
    assert!(!s.plane(|p| p.has_policies()).unwrap());
    s.plane(|p| p.set_policy("budget", Some("100"))).unwrap();
    assert_eq!(
        s.plane(|p| p.policy("budget")).unwrap().as_deref(),
        Some("100")
    );
    s.plane(|p| p.set_policy("budget", None)).unwrap();
    assert!(!s.plane(|p| p.has_policies()).unwrap());

    // Event failures count up, and a dead letter replaces them.
    for _ in 0..2 {
        s.plane(|p| p.note_event_failure("e1", "in", 1, "boom", 5))
            .unwrap();
    }
    assert_eq!(s.event_failures().unwrap()[0].attempts, 2);
    let ev = EventRecord {
        event_id: "e1".into(),
        stream: "in".into(),
        seq: 1,
        payload: json!({"n": 1}),
        fired_by: "did:key:test".into(),
        fired_at_ms: 0,
    };
    s.plane(|p| p.dead_letter(&ev, 3, "boom", 7)).unwrap();
    assert!(s.event_failures().unwrap().is_empty());
    let dl = s.dead_letters().unwrap();
    assert_eq!(dl.len(), 1);
    assert_eq!(
        (dl[0].attempts, dl[0].payload.clone()),
        (3, json!({"n": 1}))
    );

    // Another space's rows are its own.
    f.a.create("t", "did:key:owner").unwrap();
    let mut t = f.a.open("t").unwrap();
    assert!(t.schedule(None).unwrap().is_empty());
    assert!(t.ledger().unwrap().is_empty());
    assert!(t.dead_letters().unwrap().is_empty());
    assert_eq!(f.a.directory_next_wake("t").unwrap(), None);
}

/// PostgreSQL only: a host that lost its lease writes no plane row (on
/// SQLite one host owns a space's file, and its file lock is the fence).
#[test]
fn postgres_refuses_plane_writes_from_a_host_that_lost_its_lease() {
    let Some(f) = postgres("plane_fenced") else {
        return;
    };
    f.a.create("s", "did:key:owner").unwrap();
    let mut a = f.a.open("s").unwrap();
    let mut b = f.b.open("s").unwrap();
    a.acquire_lease().unwrap().unwrap();
    let d = LedgerDelta {
        waves: 1,
        ..Default::default()
    };
    a.plane(|p| p.add_ledger(Bucket::Scheduled, 0, &d)).unwrap();
    (f.expire)();
    b.acquire_lease().unwrap().unwrap();
    let e = a
        .plane(|p| p.add_ledger(Bucket::Scheduled, 0, &d))
        .unwrap_err();
    assert!(matches!(e, StoreError::NotLeaseHolder(_)), "{e}");
    assert_eq!(
        f.counters_a.space_value("s", Counter::PlaneWritesRefused),
        1
    );
    assert_eq!(
        b.ledger().unwrap()[0].totals.waves,
        1,
        "only the first write landed"
    );
    // The new holder writes.
    b.plane(|p| p.add_ledger(Bucket::Scheduled, 0, &d)).unwrap();
    assert_eq!(b.ledger().unwrap()[0].totals.waves, 2);
}

/// The directory's questions, asked of both backends through the facade:
/// entries, counts, pages, discovery, upcoming wakes, grants and their
/// version, settings.
#[test]
fn the_directory_answers_the_same_on_both_backends() {
    let files = tempfile::tempdir().unwrap();
    // On this clock, nothing scheduled below is due yet.
    let clock: Arc<dyn spacewake::clock::Clock> = Arc::new(ManualClock::default());
    let t0 = spacewake::clock::Clock::now_ms(&*clock);
    let mut stores = vec![(
        "sqlite",
        Store::open(
            StoreConfig::new(files.path()),
            clock.clone(),
            Counters::new(),
        )
        .unwrap(),
    )];
    if let Some(url) = common::pg::database("directory") {
        let cfg = StoreConfig::new(files.path());
        let store = Store::open_postgres(&url, cfg, clock.clone(), Counters::new()).unwrap();
        stores.push(("postgres", store));
    }
    for (name, store) in stores {
        for id in ["a", "b", "c"] {
            store.create_space(id, "did:key:owner").unwrap();
        }
        let dir = store.directory();
        assert_eq!(dir.count().unwrap(), 3, "{name}");
        assert_eq!(dir.owned_by("did:key:owner").unwrap(), 3, "{name}");
        let page = dir.list(Some("a"), 1).unwrap();
        assert_eq!(page.len(), 1, "{name}");
        assert_eq!(page[0].id, "b", "{name}");
        assert_eq!(dir.all().unwrap().len(), 3, "{name}");
        assert!(dir.get("zz").unwrap().is_none(), "{name}");

        // Grants: the owner, a grant, a revocation; each bumps the version.
        assert_eq!(
            dir.access("a", "did:key:owner").unwrap().as_deref(),
            Some("owner"),
            "{name}"
        );
        assert_eq!(dir.access("a", "did:key:other").unwrap(), None, "{name}");
        let v0 = dir.grants_version().unwrap();
        dir.set_grant("a", "did:key:other", Some("read")).unwrap();
        assert_eq!(
            dir.access("a", "did:key:other").unwrap().as_deref(),
            Some("read"),
            "{name}"
        );
        dir.set_grant("a", "did:key:other", None).unwrap();
        assert_eq!(dir.access("a", "did:key:other").unwrap(), None, "{name}");
        assert_eq!(dir.grants_version().unwrap(), v0 + 2, "{name}");
        assert!(dir.set_grant("a", "did:key:x", Some("admin")).is_err());

        // Settings: the first value written stays.
        assert_eq!(dir.meta("k").unwrap(), None, "{name}");
        assert_eq!(dir.meta_or_init("k", || "one".into()).unwrap(), "one");
        assert_eq!(dir.meta_or_init("k", || "two".into()).unwrap(), "one");

        // Operator actions: a signature is accepted once, until forgotten.
        let sig = [7u8; 64];
        assert!(
            dir.first_use_of_signature(&sig, 1_000, 0).unwrap(),
            "{name}"
        );
        assert!(
            !dir.first_use_of_signature(&sig, 2_000, 0).unwrap(),
            "{name}"
        );
        assert!(dir.first_use_of_signature(&[8u8; 64], 2_000, 0).unwrap());
        // Forgetting what was seen before 1,500 ms lets the first one again.
        assert!(
            dir.first_use_of_signature(&sig, 3_000, 1_500).unwrap(),
            "{name}"
        );
        assert!(!dir
            .first_use_of_signature(&[8u8; 64], 3_000, 1_500)
            .unwrap());

        // Discovery and the waker's window follow the plane.
        let mut s = store.open_space("b").unwrap();
        s.plane(|p| {
            spacewake::schedule::entry::save(
                p,
                &mut ScheduleRow::new("p", 0, 60, "tick", 0, t0 + 5_000),
            )
        })
        .unwrap();
        s.commit(authored().event(event("e1", "in"))).unwrap();
        let mut c = store.open_space("c").unwrap();
        c.plane(|p| {
            spacewake::schedule::entry::save(
                p,
                &mut ScheduleRow::new("p", 0, 60, "tick", 0, t0 + 9_000),
            )
        })
        .unwrap();
        let wakes: Vec<(String, u64)> = dir
            .upcoming_wakes(10)
            .unwrap()
            .into_iter()
            .map(|w| (w.space, w.at_ms))
            .collect();
        assert_eq!(
            wakes,
            vec![("b".to_string(), t0 + 5_000), ("c".to_string(), t0 + 9_000)],
            "{name}"
        );
        assert_eq!(dir.earliest_wake().unwrap(), Some(t0 + 5_000), "{name}");
        let mut found: Vec<String> = dir
            .discover(t0 + 6_000)
            .unwrap()
            .into_iter()
            .map(|d| d.id)
            .collect();
        found.sort();
        assert_eq!(found, ["b"], "{name}: due or undelivered, 6 s on");
        let mut found: Vec<String> = dir
            .discover(t0 + 1_000)
            .unwrap()
            .into_iter()
            .map(|d| d.id)
            .collect();
        found.sort();
        assert_eq!(found, ["b"], "{name}: undelivered events are due at once");
        assert!(dir.get("b").unwrap().unwrap().undelivered, "{name}");
    }
}

both!(retention_compacts_old_history_keeps_the_needed, retention);
fn retention<B: SpaceBackend>(f: Fleet<B>) {
    f.a.create("s1", "did:key:owner").unwrap();
    let mut s = f.a.open("s1").unwrap();
    let alice = Author::principal("did:key:alice");
    // 150 delivered events on "clicks", one undelivered event on "keys",
    // then 150 document commits.
    for i in 0..150 {
        s.append_event(alice.clone(), event(&format!("c{i}"), "clicks"))
            .unwrap();
    }
    s.append_event(alice.clone(), event("k1", "keys")).unwrap();
    let lease = s.acquire_lease().unwrap().unwrap();
    let mut wave = derived(&lease);
    wave.watermarks = vec![("clicks".into(), 150)];
    s.commit(wave).unwrap();
    for i in 0..150 {
        s.commit(authored().op(set("doc", json!(i)))).unwrap();
    }
    let head = s.head_seq().unwrap();
    assert_eq!(head, 302);
    let (ops, payloads) = s.compact_history().unwrap();
    // Commits 1..=202 lose their operations (150 events carry none; the
    // first 50 document commits do), delivered events their payloads.
    assert_eq!((ops, payloads), (50, 150));
    assert_eq!(f.counters_a.host().get(Counter::HistoryOpsCompacted), 50);
    assert_eq!(
        f.counters_a.host().get(Counter::HistoryPayloadsCompacted),
        150
    );
    // Every commit row is still there, for audit; the kept ones have ops.
    let log = s.commits_since(0, 1_000).unwrap();
    assert_eq!(log.len(), 302);
    assert!(log[..202].iter().all(|c| c.ops.is_empty()));
    assert!(log[202..].iter().all(|c| c.ops.len() == 1));
    assert_eq!(s.event("c0").unwrap().unwrap().payload, json!(null));
    // The undelivered event keeps its payload; an old id is still a duplicate.
    let pending = s.undelivered_events(10).unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].payload, json!({"id": "k1"}));
    let again = s.append_event(alice, event("c3", "clicks")).unwrap();
    assert_eq!(again.seq, None, "a duplicate makes no commit");
    assert_eq!(s.head_seq().unwrap(), head);
    assert_eq!(s.read("doc").unwrap().unwrap().value, json!(149));
    // Nothing more to do until half the kept history is new.
    assert_eq!(s.compact_history().unwrap(), (0, 0));
    for i in 0..49 {
        s.commit(authored().op(set("doc", json!(i)))).unwrap();
    }
    assert_eq!(s.compact_history().unwrap(), (0, 0));
    s.commit(authored().op(set("doc", json!(0)))).unwrap();
    assert_eq!(s.compact_history().unwrap(), (50, 0));
}

/// PostgreSQL only: a tenure whose lease lapsed stays fenced even when its
/// own process takes the space again at a new epoch and gives it back (the
/// waker's claim): its plane writes are checked against its own epoch, not
/// against whatever the process-wide lease table holds now.
#[test]
fn postgres_fences_a_stale_tenure_after_its_own_host_claims_and_releases() {
    let Some(f) = postgres("plane_fenced_same_host") else {
        return;
    };
    f.a.create("s", "did:key:owner").unwrap();
    let mut stale = f.a.open("s").unwrap();
    stale.acquire_lease().unwrap().unwrap();
    let d = LedgerDelta {
        waves: 1,
        ..Default::default()
    };
    stale
        .plane(|p| p.add_ledger(Bucket::Scheduled, 0, &d))
        .unwrap();
    (f.expire)();
    let mut claim = f.a.open("s").unwrap();
    let newer = claim.acquire_lease().unwrap().unwrap();
    claim.release_lease(&newer).unwrap();
    let e = stale
        .plane(|p| p.add_ledger(Bucket::Scheduled, 0, &d))
        .unwrap_err();
    assert!(matches!(e, StoreError::NotLeaseHolder(_)), "{e}");
    assert_eq!(claim.ledger().unwrap()[0].totals.waves, 1);
}
