//! Crash safety, tested with a real second process killed by SIGKILL.
//!
//! A child commits in a loop and prints `ack SEQ` after each commit returns.
//! We kill it at a random point, 50 times, and after each kill check on disk:
//! every acknowledged commit is present, no partial commit is visible, and
//! seqs are gap-free.

mod common;

use rand::Rng;
use spacewake::clock::ManualClock;
use spacewake::metrics::Counters;
use spacewake::store::{Store, StoreConfig};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const KILLS: usize = 50;

#[test]
fn sigkill_at_random_points_never_loses_an_acknowledged_commit_or_shows_a_partial_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = rand::rng();
    let mut max_acked = 0u64;
    for round in 0..KILLS {
        let mut child = Command::new(env!("CARGO_BIN_EXE_spacewake"))
            .args(["debug", "crash-writer", "--space", "crashy", "--data"])
            .arg(dir.path())
            .env("SPACEWAKE_LOG", "error")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        // Read acks on a thread so the kill lands while the child is busy.
        let reader = std::thread::spawn(move || {
            let mut last = 0u64;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(n) = line.strip_prefix("ack ") {
                    last = n.parse().unwrap();
                }
            }
            last
        });
        // Let it start and commit for a random while, then SIGKILL.
        let wait = Duration::from_millis(rng.random_range(20..120));
        let t = Instant::now();
        while t.elapsed() < wait {
            std::thread::sleep(Duration::from_millis(5));
        }
        child.kill().unwrap(); // SIGKILL on Unix
        child.wait().unwrap();
        let acked = reader.join().unwrap();
        max_acked = max_acked.max(acked);
        verify(dir.path(), acked, round);
    }
    assert!(
        max_acked > 50,
        "the writer made progress ({max_acked} commits)"
    );
}

fn verify(data: &std::path::Path, acked: u64, round: usize) {
    let store = Store::open(
        StoreConfig::new(data),
        Arc::new(ManualClock::default()),
        Counters::new(),
    )
    .unwrap();
    if store.directory().get("crashy").unwrap().is_none() {
        assert_eq!(acked, 0, "round {round}: acks without a space");
        return;
    }
    let mut space = store.open_space("crashy").unwrap();
    let head = space.head_seq().unwrap();
    assert!(
        head >= acked,
        "round {round}: acknowledged seq {acked} lost (head {head})"
    );

    let path = store.space_path("crashy");
    drop(space);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let (count, min, max): (i64, i64, i64) = conn
        .query_row(
            "SELECT COUNT(*), COALESCE(MIN(seq),0), COALESCE(MAX(seq),0) FROM commits",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(max as u64, head);
    if count > 0 {
        assert_eq!((min, count), (1, max), "round {round}: seqs are gap-free");
    }
    // Every commit is whole: its ops and its event are all there.
    let partial: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM commits c WHERE \
               c.op_count != (SELECT COUNT(*) FROM commit_ops o WHERE o.seq = c.seq) \
               OR NOT EXISTS (SELECT 1 FROM events e WHERE e.event_id = 'ev-' || c.seq AND e.seq = c.seq) \
               OR NOT EXISTS (SELECT 1 FROM docs d WHERE d.id = 'doc-' || c.seq AND d.seq = c.seq)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(partial, 0, "round {round}: a partial commit is visible");
    if head > 0 {
        let counter: String = conn
            .query_row("SELECT value FROM docs WHERE id = 'counter'", [], |r| {
                r.get(0)
            })
            .unwrap();
        let counter: serde_json::Value = serde_json::from_str(&counter).unwrap();
        assert_eq!(
            counter["n"], head,
            "round {round}: the counter matches the head"
        );
        let head_of_stream: i64 = conn
            .query_row(
                "SELECT head_seq FROM streams WHERE stream = 'ticks'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(head_of_stream as u64, head);
    }
}
