//! The fleet under faults (`spec/fleet.md`, *The fault test*): three host
//! processes on one PostgreSQL database, 300 spaces whose hourly schedules
//! fire every 3 s of real time (`--test-minute-ms 50`), events ingested
//! through all three hosts, and during the run: one host SIGKILLed, another
//! SIGSTOPped for twice the lease TTL (in the middle of a wave) and then
//! SIGCONTed, and the PostgreSQL server restarted once. Afterwards, from the
//! database: every due occurrence delivered exactly once, every
//! acknowledged event processed exactly once, no commit from a stale epoch,
//! the paused host's late writes refused, and the killed host's spaces taken
//! over within the TTL plus one second (the tail: two). Its own binary: it
//! restarts the cluster, and its hosts need the machine's cores.

mod common;

use common::server::{try_http, Server};
use serde_json::{json, Value};
use spacewake::protocol::client::Client;
use spacewake::protocol::messages::Deploy;
use spacewake::protocol::{sign_ingest, ClientMessage, Identity, ServerMessage};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SPACES: usize = 300;
const TTL_MS: u64 = 2_000;
/// How long the faults and the ingestion run.
const RUN: Duration = Duration::from_secs(22);
/// An hourly schedule at 50 ms a minute.
const PERIOD_MS: i64 = 3_000;
/// Loop iterations of the slow event: about 0.2 s of CPU alone on the dev
/// machine, far longer than the 10 ms before the SIGSTOP. (When the
/// sandbox's 2 s safety net counted real time, three hosts and PostgreSQL
/// sharing 2 cores could starve it past the net on every attempt, and the
/// event was dead-lettered; the net now counts the thread's CPU.)
const SLOW_SPIN: u64 = 1_500_000;
/// How long a space may stay undelivered while the fleet settles: longer
/// than a failed tenure's back-off after three attempts (1 + 2 + 4 s).
const STUCK: Duration = Duration::from_secs(10);

const PATTERN: &str = r#"
import { pattern, handler, SCHEDULE, Cell, Default } from "commonfabric";

// A run records its occurrence (the period; a retry carries its own), not
// its fire time: a retry and the next period can fire in the same pass.
const tick = handler<{ period?: number; missedPeriods?: number }, { fires: Cell<string[]> }>(
  (ev, { fires }) => { fires.push(`${ev?.period ?? -1}:${ev?.missedPeriods ?? 0}`); },
);
const ingest = handler<{ id: string; spin?: number }, { got: Cell<string[]> }>(
  (ev, { got }) => {
    let acc = 0;
    for (let i = 0; i < (ev.spin ?? 0); i++) acc += i % 7;
    got.push(acc >= 0 ? ev.id : "never");
  },
);

export default pattern<{ fires: Default<string[], []>; got: Default<string[], []> }>(
  ({ fires, got }) => ({
    [SCHEDULE]: [{ intervalMinutes: 60, callback: tick({ fires }) }],
    ingest: ingest({ got }),
    fires,
    got,
  }),
);
"#;

/// The test's own account: every check is counted, and the test ends with
/// one `N passed, N failed` line.
#[derive(Default)]
struct Checks {
    passed: usize,
    failed: Vec<String>,
}

impl Checks {
    fn check(&mut self, what: &str, ok: bool, detail: impl std::fmt::Display) {
        if ok {
            self.passed += 1;
            println!("ok   {what}: {detail}");
        } else {
            println!("FAIL {what}: {detail}");
            self.failed.push(format!("{what}: {detail}"));
        }
    }
}

fn space(i: usize) -> String {
    format!("fleet-{i:03}")
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

async fn deploy(addr: &str, me: &Identity, space: &str) -> String {
    let url = format!("ws://{addr}/ws");
    let (mut c, _) = Client::connect_creating(&url, me, space).await.unwrap();
    let id = c.fresh_id();
    let reply = c
        .request(ClientMessage::Deploy(Deploy {
            id,
            entry: "fleet.tsx".into(),
            files: BTreeMap::from([("fleet.tsx".to_string(), PATTERN.to_string())]),
            export: None,
            argument: Some(json!({})),
        }))
        .await
        .unwrap();
    let ServerMessage::Deployed(d) = reply else {
        panic!("deploy into {space}: {reply:?}");
    };
    c.close().await.unwrap();
    d.piece
}

/// One signed webhook ingest; true when the host acknowledged it.
fn ingest(addr: &str, me: &Identity, space: &str, piece: &str, id: &str, spin: u64) -> bool {
    let body = json!({"piece": piece, "stream": ["ingest"],
                      "payload": {"id": id, "spin": spin}, "eventId": id})
    .to_string();
    let headers = [
        ("x-spacewake-did", me.did()),
        (
            "x-spacewake-signature",
            sign_ingest(me, space, body.as_bytes()),
        ),
    ];
    let path = format!("/api/spaces/{space}/events");
    matches!(
        try_http(addr, "POST", &path, &headers, body.as_bytes()),
        Ok((200, _))
    )
}

fn db(url: &str) -> postgres::Client {
    postgres::Client::connect(url, postgres::NoTls).unwrap()
}

/// The lease holder name a host reports on its health route.
fn holder_of(s: &Server) -> String {
    s.stats()["fleet"]["self"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hosts_one_database_faults_lose_and_duplicate_nothing() {
    let url = tokio::task::spawn_blocking(|| common::pg::database("fleet_faults"));
    let Some(url) = url.await.unwrap() else {
        return;
    };
    let me = Identity::generate();
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let ttl = TTL_MS.to_string();
    let args = [
        "--store",
        url.as_str(),
        "--lease-ttl-ms",
        ttl.as_str(),
        "--lease-renew-ms",
        "500",
        "--test-minute-ms",
        "50",
        "--max-scheduled",
        "16",
        // Unread output would stretch intervals; this test counts periods.
        "--backoff",
        "off",
        // 300 spaces are created from one address, faster than the
        // default creation rate allows.
        "--space-creates-per-minute",
        "0",
    ];
    let hosts: Vec<Server> = dirs
        .iter()
        .map(|d| Server::start(d.path(), &args))
        .collect();
    let addrs: Vec<String> = hosts.iter().map(|h| h.addr.clone()).collect();
    let holders: Vec<String> = hosts.iter().map(holder_of).collect();

    // 300 spaces, deployed through the three hosts at once.
    let provisioned = Instant::now();
    let mut deploys = Vec::new();
    for (h, addr) in addrs.iter().enumerate() {
        let (addr, me) = (addr.clone(), me.clone());
        deploys.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for i in (h..SPACES).step_by(3) {
                out.push((i, deploy(&addr, &me, &space(i)).await));
            }
            out
        }));
    }
    let mut pieces = vec![String::new(); SPACES];
    for d in deploys {
        for (i, p) in d.await.unwrap() {
            pieces[i] = p;
        }
    }
    println!("provisioned {SPACES} spaces in {:?}", provisioned.elapsed());
    let pieces = Arc::new(pieces);

    // Ingestion through every host, each event to a pseudo-random space;
    // refusals (held elsewhere, the host gone) are simply not acknowledged.
    let stop = Arc::new(AtomicBool::new(false));
    let acked: Arc<Mutex<HashMap<String, HashSet<String>>>> = Arc::default();
    let mut ingesters = Vec::new();
    for (h, addr) in addrs.iter().enumerate() {
        let (addr, me, stop, acked, pieces) = (
            addr.clone(),
            me.clone(),
            stop.clone(),
            acked.clone(),
            pieces.clone(),
        );
        ingesters.push(std::thread::spawn(move || {
            let mut n: u64 = 0;
            let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ h as u64;
            while !stop.load(Ordering::Relaxed) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // The last space is kept for the paused host's slow wave.
                let i = (x % (SPACES as u64 - 1)) as usize;
                let id = format!("h{h}-{n}");
                n += 1;
                if ingest(&addr, &me, &space(i), &pieces[i], &id, 0) {
                    acked
                        .lock()
                        .unwrap()
                        .entry(space(i))
                        .or_default()
                        .insert(id);
                }
                std::thread::sleep(Duration::from_millis(15));
            }
        }));
    }

    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let mut hosts: Vec<Option<Server>> = hosts.into_iter().map(Some).collect();

    // t = 4 s: SIGKILL host 2; measure how soon each space it held is held
    // by another host once it needs one. A space whose next wake is more
    // than a TTL away cannot be needed before then: its takeover is counted
    // from a TTL before that wake, so every space is held to the same
    // "within the TTL plus one second".
    tokio::time::sleep_until(at(4).into()).await;
    let killed_holder = holders[2].clone();
    let held_at_kill: HashMap<String, u64> = {
        let (url, h) = (url.clone(), killed_holder.clone());
        tokio::task::spawn_blocking(move || {
            db(&url)
                .query(
                    "SELECT l.space, CASE WHEN s.undelivered THEN 0 ELSE GREATEST(0, \
                       s.next_wake_ms - (extract(epoch FROM clock_timestamp()) * 1000)::bigint) \
                     END FROM execution_lease l JOIN spaces s ON s.id = l.space \
                     WHERE l.holder = $1 AND l.expires_at > clock_timestamp() \
                       AND (s.undelivered OR s.next_wake_ms IS NOT NULL)",
                    &[&h],
                )
                .unwrap()
                .iter()
                .map(|r| (r.get(0), r.get::<_, i64>(1) as u64))
                .collect()
        })
        .await
        .unwrap()
    };
    let killed_at = Instant::now();
    hosts[2].take().unwrap().kill();
    let takeover = {
        let (url, h, spaces) = (url.clone(), killed_holder.clone(), held_at_kill.clone());
        std::thread::spawn(move || {
            let mut c = db(&url);
            let mut waiting = spaces;
            let mut times = Vec::new();
            while !waiting.is_empty() && killed_at.elapsed() < Duration::from_secs(10) {
                for r in c
                    .query(
                        "SELECT space FROM execution_lease WHERE space = ANY($1) AND holder <> $2",
                        &[&waiting.keys().cloned().collect::<Vec<_>>(), &h],
                    )
                    .unwrap()
                {
                    let s: String = r.get(0);
                    let due_in = waiting.remove(&s).unwrap_or(0);
                    let since = due_in.saturating_sub(TTL_MS);
                    times.push((killed_at.elapsed().as_millis() as u64).saturating_sub(since));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            (times, waiting.len())
        })
    };

    // t = 8 s: a slow wave on host 1, then SIGSTOP it mid-wave for twice
    // the TTL; another host delivers that event meanwhile.
    tokio::time::sleep_until(at(8).into()).await;
    let slow = space(SPACES - 1);
    let slow_acked = {
        let (addr, me, slow, piece) = (
            addrs[1].clone(),
            me.clone(),
            slow.clone(),
            pieces[SPACES - 1].clone(),
        );
        tokio::task::spawn_blocking(move || ingest(&addr, &me, &slow, &piece, "slow-1", SLOW_SPIN))
            .await
            .unwrap()
    };
    if slow_acked {
        acked
            .lock()
            .unwrap()
            .entry(slow.clone())
            .or_default()
            .insert("slow-1".into());
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    let paused = hosts[1].as_ref().unwrap();
    paused.signal(libc::SIGSTOP);
    tokio::time::sleep(Duration::from_millis(2 * TTL_MS)).await;
    paused.signal(libc::SIGCONT);

    // t = 15 s: PostgreSQL restarts (stopped as a crash would stop it).
    tokio::time::sleep_until(at(15).into()).await;
    tokio::task::spawn_blocking(|| {
        let mut cluster = common::pg::cluster().expect("the cluster that made the database");
        cluster.stop().unwrap();
        std::thread::sleep(Duration::from_millis(500));
        cluster.start_server().unwrap();
    })
    .await
    .unwrap();

    tokio::time::sleep_until((t0 + RUN).into()).await;
    stop.store(true, Ordering::Relaxed);
    for t in ingesters {
        t.join().unwrap();
    }
    let (mut takeovers, never_taken) = takeover.join().unwrap();

    // Settle: every event delivered, nothing overdue past a period. The
    // fleet keeps firing meanwhile (some 100 wakes/s near this machine's
    // capacity), so a space between its firing and its delivery is
    // undelivered for a moment; what counts is a space that stays so.
    let settled = {
        let url = url.clone();
        tokio::task::spawn_blocking(move || {
            let mut c = db(&url);
            let start = Instant::now();
            let mut since: HashMap<String, Instant> = HashMap::new();
            while start.elapsed() < Duration::from_secs(20) {
                let now: Vec<String> = c
                    .query("SELECT id FROM spaces WHERE undelivered", &[])
                    .unwrap()
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
                if now.is_empty() {
                    return true;
                }
                since.retain(|s, _| now.contains(s));
                for s in now {
                    since.entry(s).or_insert_with(Instant::now);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let stuck: Vec<&String> = since
                .iter()
                .filter(|(_, t)| t.elapsed() >= STUCK)
                .map(|(s, _)| s)
                .collect();
            if stuck.is_empty() {
                return true;
            }
            println!("undelivered for {STUCK:?} or longer: {stuck:?}");
            for r in c
                .query(
                    "SELECT s.id, s.wake_at_ms, l.holder, l.epoch, \
                       (extract(epoch FROM (l.expires_at - clock_timestamp())) * 1000)::bigint \
                     FROM spaces s LEFT JOIN execution_lease l ON l.space = s.id \
                     WHERE s.undelivered",
                    &[],
                )
                .unwrap()
            {
                let (space, wake, holder, epoch, left): (String, Option<i64>, Option<String>, Option<i64>, Option<i64>) =
                    (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4));
                println!(
                    "undelivered: {space}; wake_at {wake:?}; lease {holder:?} epoch {epoch:?} ends in {left:?} ms"
                );
            }
            false
        })
        .await
        .unwrap()
    };
    let (overdue, overdue_spaces): (i64, Vec<String>) = {
        let url = url.clone();
        tokio::task::spawn_blocking(move || {
            let now = spacewake::clock::Clock::now_ms(&spacewake::clock::SystemClock) as i64;
            let rows = db(&url)
                .query(
                    "SELECT i.space, $1 - i.wake_ms, i.status, l.holder, l.epoch, \
                       (extract(epoch FROM (l.expires_at - clock_timestamp())) * 1000)::bigint, \
                       s.wake_at_ms \
                     FROM schedule_index i JOIN spaces s ON s.id = i.space \
                     LEFT JOIN execution_lease l ON l.space = i.space \
                     WHERE i.wake_ms < $1 - $2",
                    // Late by more than two periods: the fleet runs near this
                    // machine's capacity (about 100 wakes/s of some 300),
                    // and the restart's backlog can make a wake a period late.
                    &[&now, &(2 * PERIOD_MS)],
                )
                .unwrap();
            for r in &rows {
                let (space, late, status): (String, i64, String) = (r.get(0), r.get(1), r.get(2));
                let (holder, epoch, left, wake): (
                    Option<String>,
                    Option<i64>,
                    Option<i64>,
                    Option<i64>,
                ) = (r.get(3), r.get(4), r.get(5), r.get(6));
                println!(
                    "overdue: {space} by {late} ms ({status}); lease {holder:?} epoch {epoch:?} \
                     ends in {left:?} ms; wake_at {wake:?}"
                );
            }
            if !rows.is_empty() {
                // What each connection is doing, for a hung tenure.
                for r in db(&url)
                    .query(
                        "SELECT pid, state, coalesce(wait_event_type, ''), coalesce(wait_event, ''), \
                           (extract(epoch FROM (clock_timestamp() - xact_start)) * 1000)::bigint, \
                           left(query, 160) FROM pg_stat_activity \
                         WHERE backend_type = 'client backend' AND state <> 'idle'",
                        &[],
                    )
                    .unwrap()
                {
                    let (pid, state, wt, we, age, q): (i32, String, String, String, Option<i64>, String) =
                        (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5));
                    println!("pg {pid} {state} wait {wt}/{we} xact {age:?} ms: {q}");
                }
            }
            (rows.len() as i64, rows.iter().map(|r| r.get(0)).collect())
        })
        .await
        .unwrap()
    };
    let refused_on_paused = {
        let s = hosts[1].as_ref().unwrap();
        s.host_counter("lease", "derivedCommitsRefused")
            + s.host_counter("lease", "selfFenced")
            + s.host_counter("lease", "planeWritesRefused")
    };
    // A graceful stop of the survivors: their waves finish, leases go back.
    for h in hosts.iter_mut().flatten() {
        h.signal(libc::SIGTERM);
        let status = h
            .wait_exit(Duration::from_secs(30))
            .expect("a graceful stop");
        assert!(status.success(), "a clean exit: {status}");
    }
    // What the survivors logged about the slow space and any overdue one,
    // for a failed run.
    let watched = |l: &str| {
        l.contains(&format!("{slow}}}"))
            || l.contains(&format!("{slow} "))
            || overdue_spaces
                .iter()
                .any(|s| l.contains(&format!("{s} ")) || l.contains(&format!("{s}}}")))
    };
    for (i, h) in hosts.iter().enumerate() {
        if let Some(h) = h {
            if let Ok(dir) = std::env::var("SPACEWAKE_TEST_LOG_DIR") {
                std::fs::write(format!("{dir}/host{i}.log"), h.log_text()).unwrap();
            }
            for line in h.log_text().lines().filter(|l| watched(l)) {
                println!("host {i}: {line}");
            }
        }
    }

    // What the database says.
    let mut checks = Checks::default();
    checks.check(
        "every event delivered before the stop",
        settled,
        "no space left undelivered for 10 s while the fleet settled",
    );
    let url2 = url.clone();
    let (rows, stale, periods, history) = tokio::task::spawn_blocking(move || {
        let mut c = db(&url2);
        let rows: Vec<(String, i64, i64, i64)> = c
            .query(
                "SELECT space, nominal_period, fired_count, missed_count FROM schedule_index",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect();
        let mut history: HashMap<String, Vec<String>> = HashMap::new();
        for r in c
            .query(
                "SELECT space, period, outcome, event_id, fired_ms FROM schedule_fires \
                 ORDER BY space, fired_ms",
                &[],
            )
            .unwrap()
        {
            let (s, p, o, e, t): (String, i64, String, String, i64) =
                (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4));
            history
                .entry(s)
                .or_default()
                .push(format!("{t} {o} p{p} {e}"));
        }
        // What the hosts recorded as failing: printed so a failed run
        // shows why an event went missing.
        for r in c
            .query(
                "SELECT 'failure', space, event_id, attempts, last_error FROM event_failures \
                 UNION ALL SELECT 'dead', space, event_id, attempts, error FROM dead_letters",
                &[],
            )
            .unwrap()
        {
            let (k, s, e, a, err): (String, String, String, i32, String) =
                (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4));
            println!("{k}: {s} {e} after {a} attempts: {err}");
        }
        let mut periods: HashMap<String, Vec<(i64, i64)>> = HashMap::new();
        for r in c
            .query(
                // Each occurrence's first attempt, however it settled
                // (a retry's row has `/retry` in its event id).
                "SELECT space, period, missed_periods FROM schedule_fires \
                 WHERE outcome NOT IN ('suppressed', 'skippedBudget') \
                 AND event_id NOT LIKE '%/retry%' ORDER BY space, period",
                &[],
            )
            .unwrap()
        {
            periods
                .entry(r.get(0))
                .or_default()
                .push((r.get(1), r.get(2)));
        }
        let stale: i64 = c
            .query_one(
                "SELECT count(*) FROM (SELECT epoch, lag(epoch) OVER \
                 (PARTITION BY space ORDER BY seq) AS prev FROM commits \
                 WHERE epoch IS NOT NULL) x WHERE epoch < prev",
                &[],
            )
            .unwrap()
            .get(0);
        (rows, stale, periods, history)
    })
    .await
    .unwrap();
    checks.check(
        "no commit from a stale epoch",
        stale == 0,
        format!("{stale} derived commits under an epoch older than an earlier commit's"),
    );
    checks.check(
        "the paused host's late writes were refused",
        refused_on_paused > 0,
        format!("{refused_on_paused} refused"),
    );

    // Each space's piece, read through a host of our own on the database
    // (no waker: nothing fires while we read).
    let reads = {
        let (url, pieces) = (url.clone(), pieces.clone());
        tokio::task::spawn_blocking(move || {
            // A space a stopped host abandoned keeps its lease until the
            // TTL ends: wait for every lease to end before reading.
            let mut c = db(&url);
            let start = Instant::now();
            while c
                .query_one(
                    "SELECT count(*) FROM execution_lease WHERE expires_at > clock_timestamp()",
                    &[],
                )
                .unwrap()
                .get::<_, i64>(0)
                > 0
            {
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "leases still live"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
            // A clock long before every due time: this host delivers what
            // is undelivered and fires nothing while the test reads.
            let clock: Arc<dyn spacewake::clock::Clock> =
                Arc::new(spacewake::clock::ManualClock::new(1_000));
            let store = spacewake::store::Store::open_postgres(
                &url,
                spacewake::store::StoreConfig::new(std::env::temp_dir()),
                clock,
                spacewake::metrics::Counters::new(),
            )
            .unwrap();
            let cfg = spacewake::host::HostConfig {
                idle_park_ms: 10,
                ..Default::default()
            };
            let host = spacewake::host::Host::new(store, cfg);
            // What the stop left undelivered (a fire written just before
            // it) is delivered first: this host's waker claims it, as any
            // host of the fleet would.
            host.start_waker();
            let start = Instant::now();
            while host
                .store()
                .directory()
                .all()
                .unwrap()
                .iter()
                .any(|e| e.undelivered)
                && start.elapsed() < Duration::from_secs(20)
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            let read = |s: &str, piece: &str, path: &str| common::read(&host, s, piece, path);
            let out: Vec<(Vec<String>, Vec<String>)> = (0..SPACES)
                .map(|i| {
                    let strings = |v: Value| -> Vec<String> {
                        v.as_array()
                            .map(|a| {
                                a.iter()
                                    .filter_map(|x| x.as_str().map(String::from))
                                    .collect()
                            })
                            .unwrap_or_default()
                    };
                    (
                        strings(read(&space(i), &pieces[i], "fires")),
                        strings(read(&space(i), &pieces[i], "got")),
                    )
                })
                .collect();
            host.shutdown();
            out
        })
        .await
        .unwrap()
    };

    let by_space: HashMap<String, (i64, i64, i64)> = rows
        .into_iter()
        .map(|(s, p, f, m)| (s, (p, f, m)))
        .collect();
    let (mut fires_total, mut lost, mut duplicated, mut runs_vs_count) =
        (0usize, 0i64, 0usize, 0usize);
    let (mut events_missing, mut events_twice) = (0usize, 0usize);
    let acked = acked.lock().unwrap();
    for (i, (fires, got)) in reads.iter().enumerate() {
        let s = space(i);
        let (_period, fired, missed) = by_space.get(&s).copied().unwrap_or((1, 0, 0));
        let distinct: HashSet<&String> = fires.iter().collect();
        duplicated += fires.len() - distinct.len();
        if fires.len() != distinct.len() {
            println!(
                "{s}: duplicate runs {fires:?}; fired rows {:?}; history {:#?}",
                periods.get(&s),
                history.get(&s)
            );
        }
        // The grid periods fired, in order: each one the previous plus one
        // plus the periods the previous coalesced. A jump is an occurrence
        // that never fired and was never counted as missed.
        let fired_periods = periods.get(&s).cloned().unwrap_or_default();
        for w in fired_periods.windows(2) {
            if w[1].0 != w[0].0 + 1 + w[0].1 {
                lost += 1;
                println!("{s}: period {} fired after period {}", w[1].0, w[0].0);
            }
        }
        // One run per fired occurrence (a retry of an occurrence whose wave
        // failed runs instead of it, not beside it).
        if fired_periods.len() != fires.len() {
            lost += 1;
            println!(
                "{s}: {} occurrences fired, {} runs; history {:#?}",
                fired_periods.len(),
                fires.len(),
                history.get(&s)
            );
        }
        let missed_fired: i64 = fired_periods.iter().map(|p| p.1).sum();
        if fired != fires.len() as i64 || missed != missed_fired {
            runs_vs_count += 1;
            println!(
                "{s}: fired {fired}, missed {missed}; fired rows {fired_periods:?}; runs {fires:?}"
            );
        }
        fires_total += fires.len();
        let got_set: HashSet<&String> = got.iter().collect();
        events_twice += got.len() - got_set.len();
        if let Some(ids) = acked.get(&s) {
            events_missing += ids.iter().filter(|id| !got_set.contains(id)).count();
        }
    }
    let acked_total: usize = acked.values().map(HashSet::len).sum();
    let expected_min = SPACES * (RUN.as_secs() as usize / 3) / 2;
    checks.check(
        "the fleet kept firing through the faults",
        fires_total >= expected_min,
        format!("{fires_total} occurrences delivered (at least {expected_min} expected)"),
    );
    checks.check(
        "no due occurrence lost",
        lost == 0 && overdue == 0,
        format!(
            "{lost} periods skipped or fired without a run, {overdue} entries overdue at the stop"
        ),
    );
    checks.check(
        "no occurrence delivered twice",
        duplicated == 0,
        format!("{duplicated} duplicate runs"),
    );
    checks.check(
        "the schedule's counts agree with the runs",
        runs_vs_count == 0,
        format!("{runs_vs_count} spaces disagree"),
    );
    checks.check(
        "every acknowledged event processed",
        events_missing == 0 && acked_total > 0,
        format!("{acked_total} acknowledged, {events_missing} never processed"),
    );
    checks.check(
        "no event processed twice",
        events_twice == 0,
        format!("{events_twice} processed twice"),
    );
    checks.check(
        "the slow event of the paused host processed once",
        !slow_acked
            || reads[SPACES - 1]
                .1
                .iter()
                .filter(|g| *g == "slow-1")
                .count()
                == 1,
        format!("acknowledged: {slow_acked}"),
    );
    takeovers.sort_unstable();
    let (p50, p99) = (percentile(&takeovers, 0.5), percentile(&takeovers, 0.99));
    println!(
        "takeover after SIGKILL: {} of {} spaces held by the killed host taken over; p50 {p50} ms, p99 {p99} ms ({never_taken} had nothing left to do)",
        takeovers.len(),
        held_at_kill.len()
    );
    // The median is the design's figure (a waker sleeps until the expiry);
    // the tail also waits for the survivor's scheduled slots, which its
    // own firings and a loaded CI machine keep busy (one space at 3.2 s
    // out of 16 has been seen): it gets a second more.
    checks.check(
        "the killed host's spaces taken over within the TTL + 1 s (median) and + 2 s (p99)",
        !takeovers.is_empty() && p50 <= TTL_MS + 1_000 && p99 <= TTL_MS + 2_000,
        format!("p50 {p50} ms, p99 {p99} ms over {} spaces", takeovers.len()),
    );
    println!("{} passed, {} failed", checks.passed, checks.failed.len());
    assert!(checks.failed.is_empty(), "{:#?}", checks.failed);
}
