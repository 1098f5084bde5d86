//! A throwaway PostgreSQL for the tests that need one: one cluster per test
//! binary (`spacewake::pg_cluster`), a fresh database per test. Without the
//! server binaries a test is skipped with one line saying why — unless
//! `CI=true`, where it fails.

use spacewake::pg_cluster::PgCluster;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

static CLUSTER: OnceLock<Result<Mutex<PgCluster>, String>> = OnceLock::new();
static NEXT_DB: AtomicU32 = AtomicU32::new(0);

/// A URL to a new, empty database, or `None` (with the reason printed) when
/// this machine has no PostgreSQL and this is not CI.
pub fn database(test: &str) -> Option<String> {
    let cluster = CLUSTER.get_or_init(|| {
        PgCluster::start(None)
            .map(Mutex::new)
            .map_err(|e| format!("{e:#}"))
    });
    match cluster {
        Ok(c) => {
            let name = format!("t{}_{}", NEXT_DB.fetch_add(1, Ordering::Relaxed), test);
            let c = c.lock().unwrap_or_else(|p| p.into_inner());
            Some(c.create_database(&name).expect("creating a test database"))
        }
        Err(why) => {
            skip(test, why);
            None
        }
    }
}

/// Whether this machine has PostgreSQL's server binaries; without them a
/// test prints one line saying it was skipped — or, under `CI=true`, fails.
pub fn binaries_or_skip(test: &str) -> bool {
    match spacewake::pg_cluster::find_binaries() {
        Ok(_) => true,
        Err(why) => skip(test, &why),
    }
}

fn skip(test: &str, why: &str) -> bool {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: PostgreSQL is needed and could not be started: {why}");
    }
    eprintln!("{test}: skipped, no PostgreSQL: {why}");
    false
}

/// The binary's cluster, for tests that stop and restart the server.
pub fn cluster() -> Option<MutexGuard<'static, PgCluster>> {
    CLUSTER
        .get()
        .and_then(|c| c.as_ref().ok())
        .map(|m| m.lock().unwrap_or_else(|p| p.into_inner()))
}
