//! Fleet mode on a real PostgreSQL (a throwaway cluster, `common/pg.rs`):
//! hosts in separate processes contending for one database.

mod common;

use spacewake::clock::{Clock, ManualClock, SystemClock};
use spacewake::metrics::{Counter, Counters};
use spacewake::store::postgres::PgStore;
use spacewake::store::SpaceBackend;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;

struct Racer {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Racer {
    fn spawn(url: &str, holder: &str) -> Racer {
        let mut child = Command::new(env!("CARGO_BIN_EXE_spacewake"))
            .args(["debug", "lease-racer", "--store", url, "--space", "race"])
            .args(["--holder", holder])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Racer {
            child,
            stdin,
            stdout,
        }
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    fn answer(&mut self) -> String {
        let mut s = String::new();
        self.stdout.read_line(&mut s).unwrap();
        assert!(!s.is_empty(), "the racer ended early");
        s.trim_end().to_string()
    }
}

/// Two host processes acquire one space's lease at the same moment, 1,000
/// times: exactly one wins each round, and the loser's derived commit under
/// the winner's epoch is refused (and counted by the loser).
#[test]
fn two_processes_race_for_one_lease_and_exactly_one_wins_each_round() {
    let Some(url) = common::pg::database("lease_race") else {
        return;
    };
    let store = PgStore::open(
        &url,
        "setup",
        10_000,
        Arc::new(SystemClock),
        Counters::new(),
    )
    .unwrap();
    store.create("race", "did:key:owner").unwrap();
    let mut racers = [
        Racer::spawn(&url, "host-a/1"),
        Racer::spawn(&url, "host-b/1"),
    ];
    const ROUNDS: usize = 1_000;
    let mut wins = [0usize; 2];
    let mut last_epoch = 0u64;
    for round in 0..ROUNDS {
        // Both hear "acquire" before either answer is read.
        for r in racers.iter_mut() {
            r.send("acquire");
        }
        let answers: Vec<String> = racers.iter_mut().map(Racer::answer).collect();
        let won: Vec<usize> = (0..2).filter(|&i| answers[i].starts_with("won ")).collect();
        assert_eq!(won.len(), 1, "round {round}: {answers:?}");
        let (w, l) = (won[0], 1 - won[0]);
        wins[w] += 1;
        let epoch: u64 = answers[w][4..].parse().unwrap();
        assert!(
            epoch > last_epoch,
            "round {round}: epoch {epoch} after {last_epoch}"
        );
        last_epoch = epoch;
        assert_eq!(answers[l], "lost");
        // The loser writes as if it held the winner's epoch: refused.
        racers[l].send(&format!("commit {epoch}"));
        assert_eq!(racers[l].answer(), "refused", "round {round}");
        racers[w].send(&format!("commit {epoch}"));
        assert!(racers[w].answer().starts_with("ok "), "round {round}");
        racers[w].send(&format!("release {epoch}"));
        assert_eq!(racers[w].answer(), "released");
    }
    let mut refused = 0;
    for r in racers.iter_mut() {
        // End of input: the racer prints its count and exits.
        r.stdin = None;
    }
    for r in racers.iter_mut() {
        let line = r.answer();
        refused += line
            .strip_prefix("refused ")
            .unwrap()
            .parse::<usize>()
            .unwrap();
        assert!(r.child.wait().unwrap().success());
    }
    assert_eq!(
        refused, ROUNDS,
        "every loser's write was refused and counted"
    );
    assert!(
        wins[0] > 0 && wins[1] > 0,
        "both processes won some rounds: {wins:?}"
    );

    // From the database: one derived commit per round, each under its own epoch.
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let row = c
        .query_one(
            "SELECT count(*), count(DISTINCT epoch), max(seq) FROM commits \
             WHERE space = 'race' AND class = 'derived'",
            &[],
        )
        .unwrap();
    let (n, epochs, max_seq): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(
        (n, epochs, max_seq),
        (ROUNDS as i64, ROUNDS as i64, ROUNDS as i64)
    );
    println!("lease race: {ROUNDS} rounds, wins {wins:?}, {refused} loser writes refused");
}

/// A host whose own monotonic clock says its lease's TTL (less the margin)
/// has passed since its last renewal stops committing by itself, before
/// the database is asked — even while the database would still accept —
/// and starts again after a renewal succeeds.
#[test]
fn a_host_stops_committing_by_itself_when_its_own_clock_says_the_lease_is_stale() {
    use spacewake::store::{Author, CommitClass, CommitRequest, DocOp, SpaceStore, StoreError};
    let Some(url) = common::pg::database("self_fence") else {
        return;
    };
    let clock = Arc::new(ManualClock::default());
    let counters = Counters::new();
    let ttl = 10_000;
    let store = PgStore::open(&url, "host-a/1", ttl, clock.clone(), counters.clone()).unwrap();
    store.create("s", "did:key:owner").unwrap();
    let mut s = store.open("s").unwrap();
    let lease = s.acquire_lease().unwrap().unwrap();
    let write = |s: &mut spacewake::store::postgres::PgSpace, n: i64| {
        let mut r = CommitRequest::new(CommitClass::Derived, Author::server());
        r.lease = Some(lease.clone());
        r.ops.push(DocOp::Set {
            id: "d".into(),
            value: serde_json::json!(n),
        });
        s.commit(r)
    };
    write(&mut s, 1).unwrap();
    // As if this host had been paused: its clock moves past 3/4 of the TTL.
    clock.advance_ms(ttl * 3 / 4);
    let e = write(&mut s, 2).unwrap_err();
    assert!(matches!(e, StoreError::NotLeaseHolder(_)), "{e}");
    assert!(e.to_string().contains("may have expired"), "{e}");
    assert_eq!(counters.space_value("s", Counter::LeaseSelfFenced), 1);
    assert_eq!(counters.space_value("s", Counter::DerivedRefused), 1);
    assert_eq!(s.read("d").unwrap().unwrap().value, serde_json::json!(1));
    // The database still holds the lease live (10 s of real time): a
    // renewal succeeds and the host writes again.
    s.renew_lease(&lease)
        .unwrap()
        .expect("still live in the database");
    write(&mut s, 3).unwrap();
    assert_eq!(s.read("d").unwrap().unwrap().value, serde_json::json!(3));
}

/// Three hosts claim from one shared wake directory at once: every due
/// space (a wake due, or undelivered events) is claimed exactly once, none
/// that is not due, none whose lease another host holds live; an expired
/// lease is claimed with the next epoch.
#[test]
fn hosts_claiming_due_spaces_at_once_claim_each_exactly_once() {
    use spacewake::store::SpaceStore;
    use std::collections::HashMap;
    let Some(url) = common::pg::database("claims") else {
        return;
    };
    let sys = || -> Arc<dyn spacewake::clock::Clock> { Arc::new(SystemClock) };
    let setup = PgStore::open(&url, "setup/1", 300, sys(), Counters::new()).unwrap();
    const N: usize = 300;
    for i in 0..N {
        setup.create(&format!("c{i:03}"), "did:key:owner").unwrap();
    }
    // The directory as the schedule index would leave it: a third due
    // (wake at 1,000 <= now 5,000), a third later, a third with undelivered
    // events and no wake.
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    c.batch_execute(
        "UPDATE spaces SET next_wake_ms = CASE substr(id, 2)::int % 3 \
           WHEN 0 THEN 1000 WHEN 1 THEN 9000 ELSE NULL END, \
         undelivered = substr(id, 2)::int % 3 = 2",
    )
    .unwrap();
    // c000 (due) is held live by a fourth host; c003 (due) has an expired lease.
    let mut held = setup.open("c000").unwrap();
    held.acquire_lease().unwrap().unwrap();
    let other = PgStore::open(&url, "gone/1", 1, sys(), Counters::new()).unwrap();
    let expired = other
        .open("c003")
        .unwrap()
        .acquire_lease()
        .unwrap()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));

    let claimers: Vec<_> = ["a", "b", "c"]
        .into_iter()
        .map(|h| {
            let url = url.clone();
            std::thread::spawn(move || {
                let s = PgStore::open(&url, &format!("host-{h}/1"), 60_000, sys(), Counters::new())
                    .unwrap();
                let mut got = Vec::new();
                loop {
                    let batch = s.claim_due(5_000, 8, &[]).unwrap();
                    if batch.is_empty() {
                        return got;
                    }
                    got.extend(batch);
                }
            })
        })
        .collect();
    let mut by_space: HashMap<String, Vec<(String, u64)>> = HashMap::new();
    let mut per_host = Vec::new();
    for t in claimers {
        let got = t.join().unwrap();
        per_host.push(got.len());
        for cl in got {
            by_space
                .entry(cl.space)
                .or_default()
                .push((cl.lease.holder, cl.lease.tenure));
        }
    }
    let want: Vec<String> = (0..N)
        .filter(|i| i % 3 != 1 && *i != 0)
        .map(|i| format!("c{i:03}"))
        .collect();
    let mut claimed: Vec<&String> = by_space.keys().collect();
    claimed.sort();
    assert_eq!(
        claimed,
        want.iter().collect::<Vec<_>>(),
        "exactly the due spaces"
    );
    for (space, claims) in &by_space {
        assert_eq!(
            claims.len(),
            1,
            "{space} claimed more than once: {claims:?}"
        );
    }
    assert_eq!(
        by_space["c003"][0].1,
        expired.tenure + 1,
        "expired lease: next epoch"
    );
    assert_eq!(per_host.iter().sum::<usize>(), want.len());
    println!("claims per host: {per_host:?}");
}

/// When a host may next have something to do: the first wake nobody holds,
/// its own held spaces' wakes, and another host's due spaces once that
/// host's lease expires — never a space another host holds before then.
#[test]
fn the_next_claimable_time_weighs_who_holds_each_space() {
    use spacewake::store::SpaceStore;
    let Some(url) = common::pg::database("next_claimable") else {
        return;
    };
    let (_, me, other) = two_hosts(&url);
    assert_eq!(
        me.next_claimable_ms(0, &[]).unwrap(),
        None,
        "no space, nothing to do"
    );
    for id in ["free", "mine", "theirs"] {
        me.create(id, "did:key:owner").unwrap();
    }
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    c.batch_execute(
        "UPDATE spaces SET next_wake_ms = CASE id WHEN 'free' THEN 9000 \
           WHEN 'mine' THEN 7000 ELSE 1000 END",
    )
    .unwrap();
    let mut mine = me.open("mine").unwrap();
    let lease = mine.acquire_lease().unwrap().unwrap();
    other
        .open("theirs")
        .unwrap()
        .acquire_lease()
        .unwrap()
        .unwrap();
    // "theirs" is due at 1,000 but held for a minute more: not before then.
    assert_eq!(me.next_claimable_ms(0, &[]).unwrap(), Some(7_000));
    mine.release_lease(&lease).unwrap();
    assert_eq!(
        me.next_claimable_ms(0, &[]).unwrap(),
        Some(7_000),
        "now unheld"
    );
    let t = other.next_claimable_ms(0, &[]).unwrap().unwrap();
    assert_eq!(t, 1_000, "the holder's own due space");
    // Undelivered events make an unheld space due now.
    c.batch_execute("UPDATE spaces SET undelivered = true WHERE id = 'free'")
        .unwrap();
    assert_eq!(me.next_claimable_ms(0, &[]).unwrap(), Some(0));
    // A space this host deferred is left to the others: neither counted
    // nor claimed here, while another host still claims it.
    let free = vec!["free".to_string()];
    assert_eq!(me.next_claimable_ms(0, &free).unwrap(), Some(7_000));
    assert!(me.claim_due(0, 8, &free).unwrap().is_empty());
    let claimed = other.claim_due(0, 8, &[]).unwrap();
    assert_eq!(
        claimed.iter().map(|c| c.space.as_str()).collect::<Vec<_>>(),
        ["free"]
    );
    other.release_claim(&claimed[0]).unwrap();
    // Seen from a host whose clock reads later, the other host's lease ends
    // about a minute after that.
    c.batch_execute(
        "UPDATE spaces SET undelivered = false, next_wake_ms = NULL WHERE id <> 'theirs'",
    )
    .unwrap();
    let t = me.next_claimable_ms(1_000_000, &[]).unwrap().unwrap();
    assert!((1_055_000..=1_060_000).contains(&t), "{t}");
}

/// A waker's pass is one statement: the spaces it claims and the due
/// spaces this host already holds (which no claim may take), each in its
/// order; with no slot free it claims nothing and still finds its own.
#[test]
fn a_waker_pass_claims_and_finds_its_own_due_spaces_in_one_statement() {
    use spacewake::metrics::Counter;
    use spacewake::store::SpaceStore;
    let Some(url) = common::pg::database("claim_pass") else {
        return;
    };
    let (counters, me, other) = two_hosts(&url);
    for id in ["a", "b", "mine2", "mine1", "theirs", "later"] {
        me.create(id, "did:key:owner").unwrap();
    }
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    c.batch_execute(
        "UPDATE spaces SET next_wake_ms = CASE id WHEN 'later' THEN 9000 \
           WHEN 'mine1' THEN 500 WHEN 'mine2' THEN 800 ELSE 1000 END",
    )
    .unwrap();
    let mut held = Vec::new();
    for id in ["mine1", "mine2", "later"] {
        let mut s = me.open(id).unwrap();
        s.acquire_lease().unwrap().unwrap();
        held.push(s);
    }
    other
        .open("theirs")
        .unwrap()
        .acquire_lease()
        .unwrap()
        .unwrap();
    let statements = || counters.host().get(Counter::PgStatements);
    let before = statements();
    let pass = me.claim_pass(2_000, 8, &[]).unwrap();
    assert_eq!(statements() - before, 1, "one round trip");
    let claimed: Vec<&str> = pass.claims.iter().map(|c| c.space.as_str()).collect();
    assert_eq!(claimed, ["a", "b"], "unheld due spaces, in space order");
    assert!(pass.claims.iter().all(|c| c.lease.holder == "me/1"));
    assert_eq!(
        pass.due_held_here,
        ["mine1", "mine2"],
        "its own due spaces in due order; not another host's, not a later one"
    );
    // No slot free: nothing claimed, its own due spaces still found.
    for cl in &pass.claims {
        me.release_claim(cl).unwrap();
    }
    let pass = me.claim_pass(2_000, 0, &[]).unwrap();
    assert!(pass.claims.is_empty());
    assert_eq!(pass.due_held_here, ["mine1", "mine2"]);
    let leases = count(
        &mut c,
        "SELECT count(*) FROM execution_lease WHERE holder = 'me/1' \
         AND expires_at > clock_timestamp()",
    );
    assert_eq!(leases, 3, "the claims given back, the held leases kept");
    // Room on each page of spaces for updates in place (migration 20),
    // which leave no entry behind in the index the claim walks.
    let options: Vec<String> = c
        .query_one(
            "SELECT reloptions FROM pg_class WHERE relname = 'spaces'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(options, ["fillfactor=50"]);
    // An error from the server says what the server said, not "db error".
    c.batch_execute("ALTER TABLE hosts RENAME TO hosts_gone")
        .unwrap();
    let e = me.heartbeat().unwrap_err().to_string();
    assert!(e.contains("\"hosts\" does not exist (42P01)"), "{e}");
}

/// The claim reads what opening each claimed space reads (its schedule,
/// head seq and schedule revision) in its own statement, under the lease it
/// takes: the activation that follows opens the space with no statement.
/// The read is used once, within a second of the claim, and not for a claim
/// given back; a handle opened on it knows what a fresh open knows.
#[test]
fn a_claimed_space_opens_on_what_its_claim_read() {
    use spacewake::metrics::Counter;
    use spacewake::store::SpaceStore;
    let Some(url) = common::pg::database("open_with_claim") else {
        return;
    };
    let clock = Arc::new(ManualClock::default());
    let t0 = clock.now_ms();
    let counters = Counters::new();
    let me = PgStore::open(&url, "me/1", 60_000, clock.clone(), counters.clone()).unwrap();
    for id in ["a", "b", "c"] {
        me.create(id, "did:key:owner").unwrap();
    }
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    c.batch_execute(
        "UPDATE spaces SET next_wake_ms = 1000, head_seq = 4, schedule_rev = 7; \
         INSERT INTO schedule_index (space, piece, entry, interval_minutes, callback_stream, \
           declared_at_ms, nominal_period, next_due_ms, wake_ms) \
         SELECT id, 'p', e, 60, 'p/s', 0, 1, 1000, 1000 \
           FROM spaces, generate_series(0, 1) e",
    )
    .unwrap();
    let statements = || counters.host().get(Counter::PgStatements);
    let opened = || counters.host().get(Counter::PgOpenedWithClaim);
    let claims = me.claim_due(2_000, 8, &[]).unwrap();
    assert_eq!(claims.len(), 3);

    let before = statements();
    let mut a = me.open("a").unwrap();
    assert_eq!(statements() - before, 0, "no statement of its own");
    assert_eq!(opened(), 1);
    let schedule = a.schedule(None).unwrap();
    assert_eq!(statements() - before, 0, "the schedule came with the claim");
    assert_eq!(schedule.len(), 2);
    // The same as an open that reads (the read is used only once).
    let mut again = me.open("a").unwrap();
    assert_eq!(statements() - before, 1);
    assert_eq!(
        format!("{:?}", again.schedule(None).unwrap()),
        format!("{schedule:?}")
    );
    assert_eq!(a.head_seq().unwrap(), 4);

    // A claim given back takes its read with it.
    let b = claims.iter().find(|cl| cl.space == "b").unwrap();
    me.release_claim(b).unwrap();
    let before = statements();
    me.open("b").unwrap();
    assert_eq!(
        statements() - before,
        1,
        "given back: opened by its own read"
    );
    // A read kept past a second is not trusted.
    clock.set_ms(t0 + 1_001);
    me.open("c").unwrap();
    assert_eq!(opened(), 1, "too old: read again");
}

/// A serving host opens its connections before its first wakes and warms
/// each (`spacewake_warm`, migration 21): a whole wake's writes of every
/// kind, its start read and the lock, rolled back, so the functions are
/// compiled and their statements planned on that connection. Nothing the
/// warm-up wrote stays, and no notice goes out.
#[test]
fn a_host_warms_its_connections_before_its_first_wakes_and_leaves_nothing_behind() {
    use spacewake::metrics::Counter;
    let Some(url) = common::pg::database("warm") else {
        return;
    };
    let (counters, me, _other) = two_hosts(&url);
    me.create("s", "did:key:owner").unwrap();
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let tables = [
        "spaces",
        "execution_lease",
        "commits",
        "commit_ops",
        "docs",
        "events",
        "streams",
        "schedule_index",
        "schedule_fires",
        "compute_ledger",
        "action_costs",
        "action_state",
    ];
    let rows = |c: &mut postgres::Client| -> Vec<i64> {
        tables
            .iter()
            .map(|t| count(c, &format!("SELECT count(*) FROM {t}")))
            .collect()
    };
    let before = rows(&mut c);
    c.batch_execute("LISTEN spacewake_wake").unwrap();

    // The store kept its opening connection: three more make four idle.
    let opened = || counters.host().get(Counter::PgConnections);
    let opened0 = opened();
    assert_eq!(me.fill_pool(4).unwrap(), 3);
    assert_eq!(counters.host().get(Counter::PgConnectionsWarmed), 3);
    assert_eq!(opened() - opened0, 3);
    assert_eq!(me.fill_pool(4).unwrap(), 0, "already four idle");
    assert_eq!(me.fill_pool(100).unwrap(), 20, "never above the pool's 24");

    // Each round ran every kind of write; none of it stayed.
    let rounds: i32 = c
        .query_one("SELECT spacewake_warm('me/1', 3)", &[])
        .unwrap()
        .get(0);
    assert_eq!(rounds, 3);
    assert_eq!(rows(&mut c), before, "the warm-up is rolled back");
    assert!(
        c.notifications().is_empty(),
        "no earlier-wake notice escaped the rollback"
    );
    // The warm-up sends every kind `spacewake_write` knows (its latest
    // definition), so a kind added later is warmed too or this fails.
    let write_fn: String = c
        .query_one(
            "SELECT prosrc FROM pg_proc WHERE proname = 'spacewake_write' \
             ORDER BY oid DESC LIMIT 1",
            &[],
        )
        .unwrap()
        .get(0);
    let warm_fn: String = c
        .query_one(
            "SELECT prosrc FROM pg_proc WHERE proname = 'spacewake_warm'",
            &[],
        )
        .unwrap()
        .get(0);
    let kinds: Vec<&str> = write_fn
        .split("WHEN '")
        .skip(1)
        .filter_map(|w| w.split('\'').next())
        .collect();
    assert!(kinds.len() >= 13, "{kinds:?}");
    for k in kinds {
        assert!(
            warm_fn.contains(&format!("'k', '{k}'")),
            "the warm-up does not send a write of kind {k}"
        );
    }
}

/// A space's size on a fleet (the storage quota's measure) keeps its
/// history's part as a running total (`spaces.history_bytes`, migration
/// 22) instead of summing every event and operation the space kept at each
/// tenure start: the total follows appends, document writes and deletes,
/// and compaction, and always equals the full scan. A database an earlier
/// binary filled is measured once by the migration.
#[test]
fn a_space_size_on_a_fleet_follows_its_history_without_scanning_it() {
    use spacewake::store::postgres::PG_MIGRATIONS;
    use spacewake::store::{
        Author, CommitClass, CommitRequest, DocOp, NewEvent, SpaceStore, StoreConfig,
    };
    let Some(url) = common::pg::database("history_bytes") else {
        return;
    };
    // What the measure must be, summed the slow way.
    let scan = |c: &mut postgres::Client, id: &str| -> i64 {
        c.query_one(
            "SELECT ((SELECT COALESCE(SUM(octet_length(value)), 0) FROM docs WHERE space = $1) \
             + (SELECT COALESCE(SUM(octet_length(payload)), 0) FROM events WHERE space = $1) \
             + (SELECT COALESCE(SUM(octet_length(value)), 0) FROM commit_ops WHERE space = $1))::bigint",
            &[&id],
        )
        .unwrap()
        .get(0)
    };
    let total = |c: &mut postgres::Client, id: &str| -> i64 {
        count(
            c,
            &format!("SELECT history_bytes FROM spaces WHERE id = '{id}'"),
        )
    };
    // A database at migration 21 with one space's history in it.
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    for (_, _, sql) in PG_MIGRATIONS.iter().filter(|m| m.0 <= 21) {
        c.batch_execute(sql).unwrap();
    }
    c.batch_execute(
        "INSERT INTO store_meta VALUES ('schema_version', '21'); \
         INSERT INTO spaces (id, owner, created_at_ms) VALUES ('old', 'did:key:o', 0); \
         INSERT INTO events VALUES ('old', 'e1', 't', 1, '{\"a\":1}', 'server', 0); \
         INSERT INTO commit_ops VALUES ('old', 1, 0, 'd', 'set', NULL, '12345'), \
                                       ('old', 2, 0, 'd', 'delete', NULL, NULL);",
    )
    .unwrap();
    let mut cfg = StoreConfig::new("");
    cfg.holder = Some("me/1".into());
    cfg.history_commits = 100;
    let store = PgStore::open_with(&url, cfg, Arc::new(SystemClock), Counters::new()).unwrap();
    assert_eq!(total(&mut c, "old"), 7 + 5, "measured by the migration");
    assert_eq!(store.open("old").unwrap().bytes_used().unwrap(), 12);

    store.create("s", "did:key:owner").unwrap();
    let mut s = store.open("s").unwrap();
    let me = Author::principal("did:key:alice");
    for i in 0..150 {
        let e = NewEvent {
            event_id: format!("c{i}"),
            stream: "clicks".into(),
            payload: serde_json::json!({ "n": i, "pad": "x".repeat(i) }),
            fired_by: "did:key:alice".into(),
        };
        s.append_event(me.clone(), e).unwrap();
    }
    let lease = s.acquire_lease().unwrap().unwrap();
    let mut wave = CommitRequest::new(CommitClass::Derived, Author::server());
    wave.lease = Some(lease);
    wave.watermarks = vec![("clicks".into(), 150)];
    s.commit(wave).unwrap();
    for i in 0..150 {
        let value = serde_json::json!({ "v": "y".repeat(i) });
        let id = format!("doc{}", i % 3);
        let op = if i % 10 == 9 {
            DocOp::Delete { id }
        } else {
            DocOp::Set { id, value }
        };
        s.commit(CommitRequest::new(CommitClass::Authored, me.clone()).op(op))
            .unwrap();
    }
    let before = scan(&mut c, "s");
    assert_eq!(s.bytes_used().unwrap() as i64, before);
    let (ops, payloads) = s.compact_history().unwrap();
    assert!(ops > 0 && payloads == 150, "{ops} {payloads}");
    let after = scan(&mut c, "s");
    assert!(after < before);
    let mut fresh = store.open("s").unwrap();
    assert_eq!(fresh.bytes_used().unwrap() as i64, after);
    let docs: i64 = count(
        &mut c,
        "SELECT COALESCE(SUM(octet_length(value)), 0) FROM docs WHERE space = 's'",
    );
    assert_eq!(total(&mut c, "s"), after - docs);
    // The tenure-start read (`spacewake_start`) reads the same measure.
    let start: String = c
        .query_one("SELECT spacewake_start('s', 10, 10)::text", &[])
        .unwrap()
        .get(0);
    let start: serde_json::Value = serde_json::from_str(&start).unwrap();
    assert_eq!(start[3], serde_json::json!(after));
    // Compacting again finds nothing, and the measure does not move.
    assert_eq!(fresh.compact_history().unwrap(), (0, 0));
    assert_eq!(total(&mut c, "s"), after - docs);
}

/// A brief tenure gives its lease back in its last wave's commit (one
/// statement fewer a wake). Work arriving before it parks takes the lease
/// again only if nobody wrote the space meanwhile: its own commits keep it
/// entitled, another host's refuse it (its runtime is out of date), and
/// the refusal writes nothing.
#[test]
fn a_tenure_that_gave_its_lease_back_takes_it_again_only_if_nobody_wrote_since() {
    use spacewake::store::{Author, CommitClass, CommitRequest, DocOp, Lease, SpaceStore};
    let Some(url) = common::pg::database("retake") else {
        return;
    };
    let (counters, me, other) = two_hosts(&url);
    me.create("s", "did:key:owner").unwrap();
    let wave = |lease: &Lease, n: i64, last: bool| {
        let mut r = CommitRequest::new(CommitClass::Derived, Author::server());
        r.ops.push(DocOp::Set {
            id: "count".into(),
            value: serde_json::json!(n),
        });
        r.lease = Some(lease.clone());
        r.release_lease_if_idle = last;
        r
    };
    let mut s = me.open("s").unwrap();
    let lease = s.acquire_lease().unwrap().unwrap();
    assert!(s.commit(wave(&lease, 1, true)).unwrap().lease_released);
    // Nobody wrote: taken again, at the next epoch.
    let lease = s.acquire_lease().unwrap().expect("nobody wrote since");
    assert!(s.commit(wave(&lease, 2, true)).unwrap().lease_released);
    // Its own client's commit meanwhile does not count against it.
    let mut client = CommitRequest::new(CommitClass::Authored, Author::server());
    client.ops.push(DocOp::Set {
        id: "note".into(),
        value: serde_json::json!("hi"),
    });
    s.commit(client).unwrap();
    let lease = s.acquire_lease().unwrap().expect("only its own commits");
    assert!(s.commit(wave(&lease, 3, true)).unwrap().lease_released);
    // Another host holds the space and writes it: refused, nothing written.
    let mut o = other.open("s").unwrap();
    let theirs = o.acquire_lease().unwrap().unwrap();
    o.commit(wave(&theirs, 10, true)).unwrap();
    let refused = || counters.host().get(Counter::LeaseRetakeRefused);
    assert_eq!(refused(), 0);
    assert!(s.acquire_lease().unwrap().is_none(), "its runtime is stale");
    assert_eq!(refused(), 1);
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let live = count(
        &mut c,
        "SELECT count(*) FROM execution_lease WHERE space = 's' \
         AND expires_at > clock_timestamp()",
    );
    assert_eq!(live, 0, "no lease taken by the refusal");
    // A firing that would take it is refused the same way.
    let mut fire = CommitRequest::new(CommitClass::System, Author::server());
    fire.take_lease = true;
    fire.ops.push(DocOp::Set {
        id: "x".into(),
        value: serde_json::json!(1),
    });
    assert!(matches!(
        s.commit(fire),
        Err(spacewake::store::StoreError::Stale(_))
    ));
    assert_eq!(refused(), 2);
    let count: String = c
        .query_one(
            "SELECT value::text FROM docs WHERE space = 's' AND id = 'count'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(count, "10", "the other host's write stands");
    // A handle opened afresh reads the space anew and may take it.
    assert!(me.open("s").unwrap().acquire_lease().unwrap().is_some());
}

/// The fleet view: each host with the spaces it holds live, its last lease
/// renewal and heartbeat; a host holding nothing is alive while it sends
/// heartbeats, and not once they stop for longer than the TTL.
#[test]
fn the_fleet_view_shows_each_host_with_its_spaces_and_last_renewal() {
    use spacewake::store::SpaceStore;
    let Some(url) = common::pg::database("fleet_view") else {
        return;
    };
    let sys = || -> Arc<dyn spacewake::clock::Clock> { Arc::new(SystemClock) };
    let a = PgStore::open(&url, "host-a/1", 60_000, sys(), Counters::new()).unwrap();
    let b = PgStore::open(&url, "host-b/1", 60_000, sys(), Counters::new()).unwrap();
    // A host with a short TTL that holds nothing: alive only by heartbeat.
    let c = PgStore::open(&url, "host-c/1", 300, sys(), Counters::new()).unwrap();
    for i in 0..5 {
        a.create(&format!("v{i}"), "did:key:owner").unwrap();
    }
    let mut held = Vec::new();
    for i in 0..3 {
        let mut s = a.open(&format!("v{i}")).unwrap();
        held.push((s.acquire_lease().unwrap().unwrap(), s));
    }
    let mut sb = b.open("v3").unwrap();
    let lb = sb.acquire_lease().unwrap().unwrap();
    let view = c.fleet().unwrap();
    let names: Vec<&str> = view.iter().map(|h| h.holder.as_str()).collect();
    assert_eq!(names, ["host-a/1", "host-b/1", "host-c/1"], "{view:?}");
    assert_eq!((view[0].spaces_held, view[0].alive), (3, true));
    assert_eq!(view[1].spaces_held, 1);
    assert!(view[0].last_renewal_ms > 1_600_000_000_000, "{view:?}");
    assert_eq!(
        (view[2].spaces_held, view[2].last_renewal_ms, view[2].alive),
        (0, 0, true)
    );
    assert!(view[2].last_seen_ms > 1_600_000_000_000);
    // A release leaves b holding nothing; it stays alive by its heartbeat
    // (its TTL is a minute). c's heartbeat ages past its 300 ms TTL.
    sb.release_lease(&lb).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(400));
    let view = c.fleet().unwrap();
    assert_eq!(
        (view[1].spaces_held, view[1].alive),
        (0, false),
        "judged by the reader's TTL"
    );
    assert!(
        !view[2].alive,
        "no heartbeat for longer than the TTL: {view:?}"
    );
    c.heartbeat().unwrap();
    assert!(c.fleet().unwrap()[2].alive);
}

/// A commit that makes a space need a host sooner tells every listening
/// host (LISTEN/NOTIFY, delivered at commit); one that changes nothing
/// about when it needs a host says nothing.
#[test]
fn hosts_hear_when_a_space_needs_a_host_sooner() {
    use spacewake::store::{Author, CommitClass, CommitRequest, NewEvent, SpaceStore};
    use std::time::Duration;
    let Some(url) = common::pg::database("notices") else {
        return;
    };
    let sys = || -> Arc<dyn spacewake::clock::Clock> { Arc::new(SystemClock) };
    let counters = Counters::new();
    let a = PgStore::open(&url, "host-a/1", 60_000, sys(), counters.clone()).unwrap();
    let b = PgStore::open(&url, "host-b/1", 60_000, sys(), Counters::new()).unwrap();
    let mut heard = b.wake_notices().unwrap();
    a.create("n", "did:key:owner").unwrap();
    let mut s = a.open("n").unwrap();
    let ev = |id: &str| NewEvent {
        event_id: id.into(),
        stream: "clicks".into(),
        payload: serde_json::json!({}),
        fired_by: "did:key:test".into(),
    };
    let me = Author::principal("did:key:test");
    s.append_event(me.clone(), ev("e1")).unwrap();
    assert_eq!(
        heard.next(Duration::from_secs(5)).unwrap(),
        Some(("n".to_string(), 0)),
        "undelivered events: needed now"
    );
    s.append_event(me.clone(), ev("e2")).unwrap();
    assert_eq!(
        heard.next(Duration::from_millis(200)).unwrap(),
        None,
        "already needed now"
    );
    let mut r = CommitRequest::new(CommitClass::Authored, me.clone());
    r.watermarks = vec![("clicks".into(), 2)];
    s.commit(r).unwrap();
    assert_eq!(
        heard.next(Duration::from_millis(200)).unwrap(),
        None,
        "later is not news"
    );
    s.append_event(me, ev("e3")).unwrap();
    assert_eq!(
        heard.next(Duration::from_secs(5)).unwrap(),
        Some(("n".to_string(), 0))
    );
    assert_eq!(counters.space_value("n", Counter::PgWakeNotices), 2);

    // Events a commit under the space's live lease adds are the holder's
    // to deliver: no other host can claim the space while it holds, so no
    // notice goes out (migration 23), and none is counted.
    a.create("held", "did:key:owner").unwrap();
    let mut h = a.open("held").unwrap();
    let lease = h.acquire_lease().unwrap().unwrap();
    let mut r = CommitRequest::new(CommitClass::Derived, Author::server());
    r.lease = Some(lease);
    r.events = vec![ev("own")];
    h.commit(r).unwrap();
    assert_eq!(
        heard.next(Duration::from_millis(300)).unwrap(),
        None,
        "the holder's own events are not news"
    );
    assert_eq!(counters.space_value("held", Counter::PgWakeNotices), 0);
    assert_eq!(h.undelivered_events(10).unwrap().len(), 1);
}

/// `spacewake postgres` starts a PostgreSQL for development that outlives
/// the command, reuses it (same URL) when run again, and `--stop` stops it.
#[test]
fn the_development_postgres_command_starts_reuses_and_stops_a_cluster() {
    if !common::pg::binaries_or_skip("postgres_command") {
        return;
    }
    // Under /tmp: as root the server runs as the postgres user, who must
    // reach the directory.
    let dir = std::env::temp_dir().join(format!("spacewake-devpg-{}", std::process::id()));
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_spacewake"))
            .arg("postgres")
            .arg("--dir")
            .arg(&dir)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let url = run(&[]);
    assert!(url.starts_with("postgres://postgres@127.0.0.1:"), "{url}");
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    c.batch_execute("CREATE TABLE kept (x int); INSERT INTO kept VALUES (7)")
        .unwrap();
    drop(c);
    assert_eq!(run(&[]), url, "running it again reuses the cluster");
    run(&["--stop"]);
    assert!(
        postgres::Client::connect(&url, postgres::NoTls).is_err(),
        "stopped"
    );
    // Started again, its data is still there.
    assert_eq!(run(&[]), url);
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let x: i32 = c.query_one("SELECT x FROM kept", &[]).unwrap().get(0);
    assert_eq!(x, 7);
    drop(c);
    run(&["--stop"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Three documents, then a schedule entry, an action state and an event
/// failure: what a tenure's start reads, on space `s`.
fn seed_start_reads(
    s: &mut spacewake::store::postgres::PgSpace,
    events: impl FnOnce(&mut spacewake::store::postgres::PgSpace),
) {
    use spacewake::store::{Author, CommitClass, CommitRequest, DocOp, ScheduleRow, SpaceStore};
    let mut req = CommitRequest::new(CommitClass::System, Author::server());
    for i in 0..3 {
        req = req.op(DocOp::Set {
            id: format!("d{i}"),
            value: serde_json::json!({ "n": i, "text": "it's \"quoted\"" }),
        });
    }
    s.commit(req).unwrap();
    events(s);
    s.plane(|p| {
        p.upsert_schedule(&ScheduleRow::new("p", 0, 60, "tick", 0, 9_000))?;
        p.set_action_state("node-1", "hash-1", 1)?;
        p.note_event_failure("e0", "inbox", 2, "it failed", 5)?;
        Ok(())
    })
    .unwrap();
}

/// What a tenure's start reads one by one (documents, action states, event
/// failures, size, undelivered events, schedule) is taken ahead in one
/// statement: each read then answers as a read of the database would, with
/// no round trip, once; a write through the handle forgets what was taken.
#[test]
fn a_tenure_start_reads_what_it_needs_in_one_statement() {
    use spacewake::store::{
        Author, CommitClass, CommitRequest, DocOp, NewEvent, ScheduleRow, SpaceStore,
    };
    let Some(url) = common::pg::database("tenure_reads") else {
        return;
    };
    let clock = Arc::new(ManualClock::default());
    let store = PgStore::open(&url, "host-a/1", 30_000, clock.clone(), Counters::new()).unwrap();
    store.create("s", "did:key:owner").unwrap();
    let mut s = store.open("s").unwrap();
    // Events e0..e3 at seqs 2..5.
    seed_start_reads(&mut s, |s| {
        for i in 0..4 {
            s.append_event(
                Author::server(),
                NewEvent {
                    event_id: format!("e{i}"),
                    stream: "inbox".into(),
                    payload: serde_json::json!({ "i": i }),
                    fired_by: "server".into(),
                },
            )
            .unwrap();
        }
    });

    // What each read gives on a handle that took nothing ahead.
    let mut plain = store.open("s").unwrap();
    let want = (
        plain.action_states().unwrap(),
        plain.event_failures().unwrap(),
        plain.bytes_used().unwrap(),
        plain.undelivered_events(3).unwrap(),
        plain.schedule(None).unwrap(),
        plain.read("d1").unwrap().unwrap(),
    );
    assert_eq!(want.0, vec![("node-1".to_string(), "hash-1".to_string())]);
    assert_eq!(want.1.len(), 1);
    assert_eq!(want.3.len(), 3);
    assert_eq!(want.4.len(), 1);

    let mut t = store.open("s").unwrap();
    t.prefetch_tenure(3).unwrap();
    // Everything changes under the handle after it read ahead (through
    // another handle): what it answers next is what it read ahead, which
    // shows no read went to the database. (The process-wide statement
    // count cannot show it: the other tests of this binary run beside.)
    let mut req = CommitRequest::new(CommitClass::System, Author::server());
    req = req.op(DocOp::Set {
        id: "d1".into(),
        value: serde_json::json!("changed under it"),
    });
    plain.commit(req).unwrap();
    plain
        .append_event(
            Author::server(),
            NewEvent {
                event_id: "e-late".into(),
                stream: "early".into(),
                payload: serde_json::json!({}),
                fired_by: "server".into(),
            },
        )
        .unwrap();
    plain
        .plane(|p| {
            p.upsert_schedule(&ScheduleRow::new("q", 0, 60, "tick", 0, 1_000))?;
            p.set_action_state("node-2", "hash-2", 2)?;
            p.note_event_failure("e1", "inbox", 3, "it failed too", 6)?;
            Ok(())
        })
        .unwrap();
    let got = (
        t.action_states().unwrap(),
        t.event_failures().unwrap(),
        t.bytes_used().unwrap(),
        t.undelivered_events(3).unwrap(),
        t.schedule(None).unwrap(),
        t.read("d1").unwrap().unwrap(),
    );
    assert_eq!(got.0, want.0);
    assert_eq!(got.1.len(), 1);
    assert_eq!(
        (&got.1[0].event_id, got.1[0].attempts, &got.1[0].last_error),
        (
            &want.1[0].event_id,
            want.1[0].attempts,
            &want.1[0].last_error
        )
    );
    assert_eq!(got.2, want.2);
    assert_eq!(got.3, want.3);
    assert_eq!(got.4, want.4);
    assert_eq!(
        (got.5.value, got.5.seq, got.5.rev),
        (want.5.value, want.5.seq, want.5.rev)
    );

    // Each part answers once: the next read goes to the database and sees
    // the changes. The schedule answers every read until the handle writes,
    // a piece's rows too.
    assert_eq!(t.action_states().unwrap().len(), 2);
    assert_eq!(t.event_failures().unwrap().len(), 2);
    assert!(t.bytes_used().unwrap() > want.2);
    assert_eq!(t.schedule(None).unwrap(), want.4);
    assert_eq!(t.schedule(Some("p")).unwrap(), want.4);
    assert!(t.schedule(Some("q")).unwrap().is_empty());
    assert_eq!(t.undelivered_events(10).unwrap().len(), 5);
    // Taken ahead with a smaller limit than asked for later, and more
    // events than it: read again.
    t.prefetch_tenure(2).unwrap();
    assert_eq!(t.undelivered_events(4).unwrap().len(), 4);

    // A write through the handle forgets what was taken ahead.
    t.prefetch_tenure(3).unwrap();
    let mut req = CommitRequest::new(CommitClass::System, Author::server());
    req = req.op(DocOp::Set {
        id: "d1".into(),
        value: serde_json::json!("new"),
    });
    req.watermarks.push(("inbox".into(), 2));
    t.commit(req).unwrap();
    assert_eq!(
        t.schedule(None).unwrap().len(),
        2,
        "the schedule read again"
    );
    assert_eq!(
        t.read("d1").unwrap().unwrap().value,
        serde_json::json!("new")
    );
    assert_eq!(t.undelivered_events(10).unwrap().len(), 4, "e0 delivered");
    // The commit's own update of the space's row answers whether events
    // are left, once; then the database does. Shown by delivering them all
    // through the other handle in between.
    let mut req = CommitRequest::new(CommitClass::System, Author::server());
    req.watermarks.push(("inbox".into(), 5));
    req.watermarks.push(("early".into(), 7));
    plain.commit(req).unwrap();
    assert!(t.has_undelivered().unwrap(), "as its own commit left it");
    assert!(!t.has_undelivered().unwrap(), "as the database has it now");
}

/// The firing that opens a tenure brings back, in its own statement, what
/// the tenure's start reads next (migration 19): the start then reads
/// nothing, and what it answers is what a fresh read gives, the firing's
/// own event among the undelivered. A commit that does not go as one call
/// drops the ask, and the start reads on its own.
#[test]
fn a_firing_that_opens_a_tenure_brings_back_what_the_tenure_starts_with() {
    use spacewake::store::{Author, CommitClass, CommitRequest, NewEvent, SpaceStore};
    let Some(url) = common::pg::database("start_with_commit") else {
        return;
    };
    let (counters, me, other) = two_hosts(&url);
    me.create("s", "did:key:owner").unwrap();
    seed_start_reads(&mut me.open("s").unwrap(), |_| {});
    let event = |id: &str| NewEvent {
        event_id: id.into(),
        stream: "tick".into(),
        payload: serde_json::json!({ "at": 9_000 }),
        fired_by: "server".into(),
    };
    let statements = || counters.host().get(Counter::PgStatements);
    let with_commit = || counters.space_value("s", Counter::PgStartReadWithCommit);

    let mut t = me.open("s").unwrap();
    t.acquire_lease().unwrap().unwrap();
    t.start_with_next_commit(3);
    let before = statements();
    let mut fire = CommitRequest::new(CommitClass::System, Author::server());
    fire.events.push(event("wake-1"));
    t.commit(fire).unwrap();
    assert_eq!(
        statements() - before,
        1,
        "the firing and the reads, one call"
    );
    assert_eq!(with_commit(), 1);
    let before = statements();
    t.prefetch_tenure(3).unwrap();
    let got = (
        t.action_states().unwrap(),
        t.event_failures().unwrap(),
        t.bytes_used().unwrap(),
        t.undelivered_events(3).unwrap(),
        t.schedule(None).unwrap(),
        t.read("d1").unwrap().unwrap(),
    );
    assert_eq!(statements() - before, 0, "the start read nothing more");
    let mut plain = other.open("s").unwrap();
    assert_eq!(got.0, plain.action_states().unwrap());
    assert_eq!(got.1.len(), 1);
    assert_eq!(
        got.1[0].event_id,
        plain.event_failures().unwrap()[0].event_id
    );
    assert_eq!(got.2, plain.bytes_used().unwrap());
    assert_eq!(got.3, plain.undelivered_events(3).unwrap());
    assert_eq!(
        got.3
            .iter()
            .map(|e| e.event_id.as_str())
            .collect::<Vec<_>>(),
        ["wake-1"],
        "the firing's own event"
    );
    assert_eq!(got.4, plain.schedule(None).unwrap());
    let d1 = plain.read("d1").unwrap().unwrap();
    assert_eq!(
        (got.5.value, got.5.seq, got.5.rev),
        (d1.value, d1.seq, d1.rev)
    );

    // A client's commit locks and reads first (not one call): the ask is
    // dropped and the start reads on its own.
    let mut u = me.open("s").unwrap();
    u.start_with_next_commit(3);
    u.append_event(Author::server(), event("e-client")).unwrap();
    assert_eq!(with_commit(), 1);
    let before = statements();
    u.prefetch_tenure(3).unwrap();
    assert_eq!(statements() - before, 1);
    assert_eq!(u.undelivered_events(3).unwrap().len(), 2);
}

/// A firing that takes the lease works under the lease its own process's
/// claim took a moment ago (no second taking, no new epoch, the claim's
/// expiry); a lease this process did not take last is taken anew, and
/// another holder's live lease still refuses it.
#[test]
fn a_firing_works_under_the_lease_its_claim_took() {
    use spacewake::store::{Author, CommitClass, CommitRequest, NewEvent, SpaceStore};
    let Some(url) = common::pg::database("claim_adopted") else {
        return;
    };
    let (_, me, other) = two_hosts(&url);
    for id in ["s", "t"] {
        me.create(id, "did:key:owner").unwrap();
    }
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    c.batch_execute("UPDATE spaces SET next_wake_ms = 1000")
        .unwrap();
    let firing = |n: u32| {
        let mut req = CommitRequest::new(CommitClass::System, Author::server());
        req.events.push(NewEvent {
            event_id: format!("wake-{n}"),
            stream: "tick".into(),
            payload: serde_json::json!({}),
            fired_by: "server".into(),
        });
        req.take_lease = true;
        req
    };
    let epoch = |space: &str, c: &mut postgres::Client| -> i64 {
        c.query_one(
            "SELECT epoch FROM execution_lease WHERE space = $1",
            &[&space],
        )
        .unwrap()
        .get(0)
    };

    let claims = me.claim_due(2_000, 8, &[]).unwrap();
    let claim = claims.iter().find(|cl| cl.space == "s").unwrap();
    let out = me.open("s").unwrap().commit(firing(1)).unwrap();
    let lease = out.lease.expect("the firing holds the lease");
    assert_eq!(lease, claim.lease, "the claim's lease, as it was");
    assert_eq!(
        epoch("s", &mut c),
        claim.lease.tenure as i64,
        "no new epoch"
    );

    // Given back, then taken by a firing with no claim before it: anew.
    let mut s = me.open("s").unwrap();
    s.release_lease(&lease).unwrap();
    let again = s.commit(firing(2)).unwrap().lease.unwrap();
    assert_eq!(again.tenure, lease.tenure + 1);

    // Another holder's live claim refuses this host's firing.
    let t_claim = claims.iter().find(|cl| cl.space == "t").unwrap();
    me.release_claim(t_claim).unwrap();
    let theirs = other.claim_due(2_000, 8, &[]).unwrap();
    assert_eq!(theirs.len(), 1);
    let e = me.open("t").unwrap().commit(firing(3)).unwrap_err();
    assert!(e.to_string().contains("lease"), "{e}");
    assert_eq!(epoch("t", &mut c), theirs[0].lease.tenure as i64);

    // A claim older than a quarter of the TTL on the host's clock is taken
    // anew: a tenure starts with most of its lease ahead of it.
    me.create("u", "did:key:owner").unwrap();
    c.batch_execute("UPDATE spaces SET next_wake_ms = 1000 WHERE id = 'u'")
        .unwrap();
    let clock = Arc::new(ManualClock::default());
    let slow = PgStore::open(&url, "slow/1", 60_000, clock.clone(), Counters::new()).unwrap();
    let claimed = slow.claim_due(2_000, 8, &[]).unwrap();
    assert_eq!(claimed.len(), 1);
    clock.advance_ms(20_000);
    let taken = slow
        .open("u")
        .unwrap()
        .commit(firing(4))
        .unwrap()
        .lease
        .unwrap();
    assert_eq!(taken.tenure, claimed[0].lease.tenure + 1);
}

/// Two hosts' stores on `url` on the system clock, with a 60 s lease TTL:
/// "me", whose counters are returned, and "other".
/// The one number `sql` reads.
fn count(c: &mut postgres::Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).unwrap().get(0)
}

fn two_hosts(url: &str) -> (Arc<Counters>, PgStore, PgStore) {
    let sys = || -> Arc<dyn spacewake::clock::Clock> { Arc::new(SystemClock) };
    let counters = Counters::new();
    let me = PgStore::open(url, "me/1", 60_000, sys(), counters.clone()).unwrap();
    let other = PgStore::open(url, "other/1", 60_000, sys(), Counters::new()).unwrap();
    (counters, me, other)
}

/// [`two_hosts`], and a space "s" with one schedule entry due at `due_ms`.
fn one_entry_two_hosts(url: &str, due_ms: u64) -> (Arc<Counters>, PgStore, PgStore) {
    use spacewake::store::ScheduleRow;
    let (counters, me, other) = two_hosts(url);
    me.create("s", "did:key:owner").unwrap();
    me.open("s")
        .unwrap()
        .plane(|p| p.upsert_schedule(&ScheduleRow::new("p", 0, 60, "tick", 0, due_ms)))
        .unwrap();
    (counters, me, other)
}

/// Under a lease, a handle's transactions rely on what it knows of its
/// space (its head seq, its schedule's revision and rows: read when it was
/// opened, then its own writes) instead of reading under the lock, and are
/// one statement each. When the space moved meanwhile, such a transaction
/// writes nothing and fails as stale (or, its lease gone, refused); the
/// handle forgets what it knew and the next one reads again.
#[test]
fn a_tenure_relies_on_what_its_handle_knows_and_the_database_checks_it() {
    use spacewake::store::{
        Author, CommitClass, CommitRequest, DocOp, NewEvent, SpaceStore, StoreError,
    };
    let Some(url) = common::pg::database("relies_on_known") else {
        return;
    };
    let (counters, me, other) = one_entry_two_hosts(&url, 9_000);
    let host = |c: Counter| counters.host().get(c);
    // The document as the database has it (a fresh handle: one that read
    // before answers from what it read).
    let d = || other.open("s").unwrap().read("d").unwrap().unwrap().value;

    let mut t = me.open("s").unwrap();
    let lease = t.acquire_lease().unwrap().unwrap();
    let derived = |n: i64| {
        let mut r = CommitRequest::new(CommitClass::Derived, Author::server());
        r.lease = Some(lease.clone());
        r.ops.push(DocOp::Set {
            id: "d".into(),
            value: serde_json::json!(n),
        });
        r
    };
    // A wave's commit, and a plane write that reads the schedule and
    // writes it back: one statement each.
    let before = (
        host(Counter::PgStatements),
        host(Counter::PgWholeTransactions),
    );
    t.commit(derived(1)).unwrap();
    let written = t
        .plane(|p| {
            let mut row = p.schedule(Some("p"))?.remove(0);
            row.fired_count += 1;
            p.upsert_schedule(&row)?;
            Ok(row)
        })
        .unwrap();
    t.commit(derived(2)).unwrap();
    assert_eq!(
        (
            host(Counter::PgStatements) - before.0,
            host(Counter::PgWholeTransactions) - before.1
        ),
        (3, 3)
    );
    let mut plain = other.open("s").unwrap();
    // What the handle knows now is what the database holds, to the field.
    assert_eq!(plain.schedule(None).unwrap(), vec![written]);
    assert_eq!(d(), serde_json::json!(2));

    // A derived commit with an event still relies on what it knows, but
    // looks its event id up: BEGIN and the checks before that read, then
    // the read, the writes and COMMIT. The same event again is answered as
    // a duplicate, not refused.
    let with_event = |n: i64| {
        let mut r = derived(n);
        r.events.push(NewEvent {
            event_id: "sent-1".into(),
            stream: "out".into(),
            payload: serde_json::json!({ "n": n }),
            fired_by: "handler".into(),
        });
        r
    };
    let before = host(Counter::PgStatements);
    assert_eq!(t.commit(with_event(2)).unwrap().appended, vec!["sent-1"]);
    assert_eq!(host(Counter::PgStatements) - before, 5);
    let again = t.commit(with_event(2)).unwrap();
    assert_eq!(again.duplicates.len(), 1, "{again:?}");

    // A client's commit reads under the lock first (BEGIN, the lock, the
    // writes, COMMIT), and what the handle knows survives it: the next
    // wave's commit is one statement again.
    let before = host(Counter::PgStatements);
    let mut client = CommitRequest::new(CommitClass::Authored, Author::server());
    client.ops.push(DocOp::Set {
        id: "c".into(),
        value: serde_json::json!("a client's"),
    });
    t.commit(client).unwrap();
    t.commit(derived(2)).unwrap();
    assert_eq!(host(Counter::PgStatements) - before, 4 + 1);

    // The schedule moved under it (written by a host without the lease):
    // the commit relying on it writes nothing.
    plain
        .plane(|p| {
            let mut row = p.schedule(Some("p"))?.remove(0);
            row.skipped_count += 1;
            p.upsert_schedule(&row)
        })
        .unwrap();
    let e = t.commit(derived(3)).unwrap_err();
    assert!(matches!(e, StoreError::Stale(_)), "{e}");
    assert!(e.to_string().contains("schedule"), "{e}");
    assert_eq!(counters.space_value("s", Counter::PgStaleRefused), 1);
    assert_eq!(d(), serde_json::json!(2));
    // Then it reads under the lock again, and commits.
    t.commit(derived(3)).unwrap();
    assert_eq!(d(), serde_json::json!(3));

    // Its head moved under a fresh handle (a client's commit through the
    // other host): stale as well.
    let elsewhere = |plain: &mut spacewake::store::postgres::PgSpace, text: &str| {
        let mut authored = CommitRequest::new(CommitClass::Authored, Author::server());
        authored.ops.push(DocOp::Set {
            id: "e".into(),
            value: serde_json::json!(text),
        });
        plain.commit(authored).unwrap();
    };
    let mut u = me.open("s").unwrap();
    elsewhere(&mut plain, "elsewhere");
    let e = u.commit(derived(4)).unwrap_err();
    assert!(e.to_string().contains("head seq"), "{e}");
    assert_eq!(d(), serde_json::json!(3));
    // The same found by the checks sent before a read (the event's
    // lookup): refused there, nothing written.
    let mut w = me.open("s").unwrap();
    elsewhere(&mut plain, "elsewhere, again");
    let e = w.commit(with_event(4)).unwrap_err();
    assert!(matches!(e, StoreError::Stale(_)), "{e}");
    assert_eq!(d(), serde_json::json!(3));

    // The lease gone: refused as a derived commit without it is, under the
    // checks of the one statement.
    let mut v = me.open("s").unwrap();
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    c.batch_execute("UPDATE execution_lease SET expires_at = now() - interval '1 second'")
        .unwrap();
    let refused = counters.space_value("s", Counter::DerivedRefused);
    let e = v.commit(derived(5)).unwrap_err();
    assert!(matches!(e, StoreError::NotLeaseHolder(_)), "{e}");
    assert_eq!(
        counters.space_value("s", Counter::DerivedRefused),
        refused + 1
    );
    let e = v.plane(|p| p.set_action_state("n", "h", 1)).unwrap_err();
    assert!(matches!(e, StoreError::NotLeaseHolder(_)), "{e}");
    assert_eq!(d(), serde_json::json!(3));
    assert!(other.open("s").unwrap().action_states().unwrap().is_empty());
}

/// A firing whose handle relied on a schedule that another host moved
/// meanwhile is refused by the database's check, decides again on the rows
/// as they are, and fires once.
#[test]
fn a_firing_on_a_schedule_moved_under_it_decides_again() {
    use spacewake::schedule::fire::fire_due_taking_lease;
    use spacewake::schedule::Jitter;
    use spacewake::store::Space;
    let Some(url) = common::pg::database("firing_redecides") else {
        return;
    };
    let (counters, me, other) = one_entry_two_hosts(&url, 1_000);
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    c.batch_execute("UPDATE spaces SET next_wake_ms = 1000")
        .unwrap();
    let claims = me.claim_due(2_000, 8, &[]).unwrap();
    assert_eq!(claims.len(), 1);
    let mut s = Space::Postgres(me.open("s").unwrap());
    // After the handle read it, another host moves the entry's counts.
    other
        .open("s")
        .unwrap()
        .plane(|p| {
            let mut row = p.schedule(Some("p"))?.remove(0);
            row.skipped_count = 5;
            p.upsert_schedule(&row)
        })
        .unwrap();
    let report = fire_due_taking_lease(&mut s, 2_000, &Jitter::keyed([7; 32]), true)
        .unwrap()
        .expect("its claim's lease");
    assert_eq!(report.fired.len(), 1);
    assert_eq!(report.lease.unwrap().tenure, claims[0].lease.tenure);
    assert_eq!(counters.space_value("s", Counter::PgStaleRefused), 1);
    assert_eq!(
        counters.space_value("s", Counter::ScheduleFiringsRedecided),
        1
    );
    let row = other.open("s").unwrap().schedule(None).unwrap().remove(0);
    assert_eq!((row.fired_count, row.skipped_count), (1, 5));
    let events: i64 = c
        .query_one("SELECT count(*) FROM events WHERE space = 's'", &[])
        .unwrap()
        .get(0);
    assert_eq!(events, 1);
}
