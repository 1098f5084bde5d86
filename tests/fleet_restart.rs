//! The PostgreSQL server restarts (stopped as a crash would stop it, then
//! started again) under open spaces: the operation that meets the break
//! fails with nothing of it committed, the next runs on a fresh connection,
//! and the log stays gap-free. Its own test binary, so its restart does not
//! pull the server from under other tests.

mod common;

use spacewake::clock::SystemClock;
use spacewake::metrics::{Counter, Counters};
use spacewake::store::postgres::PgStore;
use spacewake::store::{Author, CommitClass, CommitRequest, DocOp, SpaceBackend, SpaceStore};
use std::sync::Arc;

fn write(n: i64) -> CommitRequest {
    CommitRequest::new(CommitClass::Authored, Author::principal("did:key:test")).op(DocOp::Set {
        id: "d".into(),
        value: serde_json::json!(n),
    })
}

#[test]
fn open_spaces_survive_a_postgres_restart_with_a_gap_free_log() {
    let Some(url) = common::pg::database("restart") else {
        return;
    };
    let mut cluster = common::pg::cluster().expect("the cluster that made the database");
    let counters = Counters::new();
    let store = PgStore::open(
        &url,
        "host-a/1",
        10_000,
        Arc::new(SystemClock),
        counters.clone(),
    )
    .unwrap();
    store.create("r", "did:key:owner").unwrap();
    let mut s = store.open("r").unwrap();
    for n in 1..=3 {
        assert_eq!(s.commit(write(n)).unwrap().seq, Some(n as u64));
    }
    let lease = s.acquire_lease().unwrap().unwrap();

    cluster.stop().unwrap();
    // While it is down, operations fail: they do not hang or half-write.
    assert!(s.commit(write(99)).is_err());
    cluster.start_server().unwrap();
    drop(cluster);

    // Once it is back, the same open space writes again on a new connection.
    let mut ok = None;
    for _ in 0..50 {
        match s.commit(write(4)) {
            Ok(o) => {
                ok = o.seq;
                break;
            }
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(100)),
        }
    }
    assert_eq!(ok, Some(4), "the next commit takes the next seq");
    assert!(counters.space_value("r", Counter::PgReconnects) >= 1);
    let seqs: Vec<u64> = s
        .commits_since(0, 100)
        .unwrap()
        .iter()
        .map(|c| c.seq)
        .collect();
    assert_eq!(
        seqs,
        vec![1, 2, 3, 4],
        "nothing of the failed commit, no gap"
    );
    assert_eq!(s.read("d").unwrap().unwrap().value, serde_json::json!(4));
    // The lease survived too (it is a row, and its expiry is the server's
    // clock): renewing it works, and another host still cannot take it.
    assert!(s.renew_lease(&lease).unwrap().is_some());
    let other = PgStore::open(
        &url,
        "host-b/1",
        10_000,
        Arc::new(SystemClock),
        Counters::new(),
    )
    .unwrap();
    assert!(other.open("r").unwrap().acquire_lease().unwrap().is_none());
}
