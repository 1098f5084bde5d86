//! How fast apalis with its SQLite storage (apalis 1.0.0, apalis-sqlite 1.0.0)
//! drains a backlog of N jobs with one worker of concurrency C: the figure to
//! set beside spacewake's herd of 10,000 wakes (`bench/apalis.sh`).
//!
//! Steps: a fresh file-backed database in a new temporary directory,
//! `SqliteStorage::setup` (apalis's own PRAGMAs and migrations), N jobs pushed
//! in one `push_bulk`, then one worker (`.concurrency(C)`) whose handler only
//! increments an atomic counter. The clock and the process CPU time
//! (getrusage, every thread) run from just before the worker starts until the
//! counter reaches N; then the worker is stopped, which flushes the last
//! batch of acknowledgements, and the database must hold N jobs in `Done`.
//!
//! Everything is apalis's default, nothing turned off or on for speed:
//! - `Config::default()`: batch_size 10 (jobs claimed per fetch transaction),
//!   lock_tasks true and persist_results true (each job is marked Running and
//!   then Done in the database; those updates are batched into one
//!   transaction per round of the worker's loop), heartbeat 30 s.
//! - No poll interval applies while there is a backlog: the plain
//!   `SqliteStorage` in 1.0.0 fetches the next batch as soon as the previous
//!   one is handed out, and only when a fetch comes back empty does it park
//!   until the worker is woken (by the 30 s heartbeat at the latest); no
//!   `poll_with_interval` is set here, so the drain is not artificially slow.
//! - Durability is what `SqliteStorage::setup` leaves: WAL, and
//!   `PRAGMA synchronous = OFF`, but that PRAGMA is per connection and setup
//!   runs it on just one connection of the pool; the pool's other connections
//!   keep SQLite's default (FULL). The pool is sqlx's default (up to 10
//!   connections) on the default tokio runtime (a thread per core).
//!   (strace, 1,000 jobs: 108 fsyncs in all, though the 100 transactions
//!   claiming batches alone are 100 commits: not every commit is synced.)
//!
//! The cost per job grows with the backlog: measured 0.28 ms CPU per job at
//! 1,000 jobs, 0.60 at 3,000, 1.8 at 10,000. SQLite's plans for apalis's
//! queries (on its schema, without statistics) suggest why: marking a batch
//! Running (queries/task/lock.sql) reads every Pending row through an index
//! on status, and marking a batch Done (queries/task/ack.sql) reads every row
//! this worker has locked, finished ones included (lock_by is never cleared),
//! through the index on lock_by. So the rate at 10,000 jobs is far below the
//! rate at 1,000.
//!
//! Prints one line on stdout:
//! `apalis-sqlite: N jobs drained in S s = R jobs/s (concurrency C, CPU X ms per job)`
//! and details (the time until the worker stopped, the job statuses) on stderr.
//!
//! Usage: apalis-drain-bench [--jobs N | N] [--concurrency C | C]

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use apalis::prelude::*;
use apalis_sqlite::{SqliteConnectOptions, SqlitePool, SqliteStorage};

/// Jobs handled (the handler's whole work).
static HANDLED: AtomicUsize = AtomicUsize::new(0);

async fn job(_n: u32) -> Result<(), BoxDynError> {
    HANDLED.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// This process's CPU time so far (user + system, every thread).
fn cpu_time() -> Duration {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    assert_eq!(rc, 0, "getrusage failed");
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn usage() -> ! {
    eprintln!("usage: apalis-drain-bench [--jobs N | N] [--concurrency C | C]");
    std::process::exit(2);
}

fn parse_args() -> (usize, usize) {
    let (mut jobs, mut concurrency) = (10_000usize, 8usize);
    let mut positional = 0;
    let mut args = std::env::args().skip(1);
    let num = |s: Option<String>| -> usize {
        match s.as_deref().map(str::parse::<usize>) {
            Some(Ok(n)) if n > 0 => n,
            _ => usage(),
        }
    };
    while let Some(a) = args.next() {
        match a.as_str() {
            "--jobs" | "-n" => jobs = num(args.next()),
            "--concurrency" | "-c" => concurrency = num(args.next()),
            "-h" | "--help" => usage(),
            _ if a.starts_with("--jobs=") => jobs = num(Some(a["--jobs=".len()..].into())),
            _ if a.starts_with("--concurrency=") => {
                concurrency = num(Some(a["--concurrency=".len()..].into()))
            }
            _ => {
                match positional {
                    0 => jobs = num(Some(a)),
                    1 => concurrency = num(Some(a)),
                    _ => usage(),
                }
                positional += 1;
            }
        }
    }
    (jobs, concurrency)
}

struct TempDir(PathBuf);

impl TempDir {
    fn new() -> std::io::Result<Self> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let dir =
            std::env::temp_dir().join(format!("apalis-drain-{}-{nanos:x}", std::process::id()));
        std::fs::create_dir(&dir)?;
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::main]
async fn main() -> Result<ExitCode, BoxDynError> {
    let (jobs, concurrency) = parse_args();
    let dir = TempDir::new()?;
    let db = dir.0.join("apalis.sqlite3");

    // A file on disk, created here; every other connection option is sqlx's default.
    let options = SqliteConnectOptions::new()
        .filename(&db)
        .create_if_missing(true);
    let pool = SqlitePool::connect_with(options).await?;
    SqliteStorage::setup(&pool).await?;
    let mut storage: SqliteStorage<u32> = SqliteStorage::new(&pool);

    // The backlog: N jobs due now, in one transaction.
    let pushed = Instant::now();
    storage.push_bulk((0..jobs as u32).collect()).await?;
    eprintln!(
        "pushed {jobs} jobs in {:.3} s ({})",
        pushed.elapsed().as_secs_f64(),
        db.display()
    );

    // (wall, cpu) at the moment the counter reached N.
    let drained: Arc<Mutex<Option<(Duration, Duration)>>> = Arc::default();
    let worker = WorkerBuilder::new("drain-bench")
        .backend(storage)
        .concurrency(concurrency)
        .build(job);

    let cpu0 = cpu_time();
    let t0 = Instant::now();
    let marks = drained.clone();
    worker
        .run_with_ctx(move |ctx| {
            let marks = marks.clone();
            async move {
                while HANDLED.load(Ordering::Relaxed) < jobs {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                *marks.lock().unwrap() = Some((t0.elapsed(), cpu_time() - cpu0));
                ctx.stop()
            }
        })
        .await?;
    let stopped = t0.elapsed();

    let (wall, cpu) = drained
        .lock()
        .unwrap()
        .expect("the worker stopped before draining");
    let handled = HANDLED.load(Ordering::Relaxed);

    // Every job must be recorded as done in the database (the acks durable).
    let statuses: Vec<(String, i64)> =
        sqlx::query_as("SELECT status, count(*) FROM Jobs GROUP BY status ORDER BY status")
            .fetch_all(&pool)
            .await?;
    pool.close().await;
    let done = statuses
        .iter()
        .find(|(s, _)| s == "Done")
        .map_or(0, |(_, n)| *n as usize);
    eprintln!(
        "worker stopped (last acks flushed) at {:.3} s; handled {handled}; statuses {statuses:?}",
        stopped.as_secs_f64()
    );

    let secs = wall.as_secs_f64();
    println!(
        "apalis-sqlite: {jobs} jobs drained in {secs:.3} s = {:.0} jobs/s (concurrency {concurrency}, CPU {:.3} ms per job)",
        jobs as f64 / secs,
        cpu.as_secs_f64() * 1e3 / jobs as f64
    );
    if done != jobs || handled != jobs {
        eprintln!("error: {done} of {jobs} jobs are Done in the database ({handled} handled)");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
