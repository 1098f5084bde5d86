//! Connections of a PostgreSQL store: a small pool, each connection with
//! its prepared statements, and the count of statements sent.

use super::{PgShared, POOL_IDLE};
use crate::metrics::Counter;
use crate::store::error::{PgContext, StoreResult};
use postgres::types::ToSql;
use postgres::{Client, GenericClient, NoTls, Row, Statement};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

impl PgShared {
    /// An idle connection that still works, or a new one. Idle connections
    /// that died (a server restart) are dropped on the way, and counted.
    fn checkout(&self) -> StoreResult<(Client, Cache)> {
        loop {
            let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
            match idle {
                Some(c) if !c.0.is_closed() => return Ok(c),
                Some(_) => self.counters.add_host(Counter::PgReconnects, 1),
                None => {
                    let c = Client::connect(&self.url, NoTls).doing("connecting")?;
                    return Ok((c, Cache::new()));
                }
            }
        }
    }

    pub(super) fn take(self: &Arc<Self>) -> StoreResult<Pooled> {
        Ok(Pooled {
            client: Some(self.checkout()?),
            pool: self.clone(),
        })
    }
}

/// A connection borrowed from the pool, returned when dropped or released
/// (unless it broke: a connection that failed is closed, not reused). An
/// open space releases its connection between operations, so a host's
/// connections follow its concurrent operations, not its active spaces.
pub(super) struct Pooled {
    client: Option<(Client, Cache)>,
    pub(super) pool: Arc<PgShared>,
}

/// A connection's prepared statements, by their SQL: each statement is
/// parsed and planned once per connection, not once per use (which cost
/// the server more CPU than running it, and a round trip more).
pub(super) type Cache = HashMap<String, Statement>;

/// A client or transaction with its connection's statement cache.
pub(super) struct Db<'a, C> {
    pub(super) c: &'a mut C,
    pub(super) cache: &'a mut Cache,
}

/// Statements this process sent to PostgreSQL through the store (each is
/// one round trip): for `bench fleet`'s account of what bounds a figure.
pub(super) static STATEMENTS: AtomicU64 = AtomicU64::new(0);

/// How many statements this process has sent through the PostgreSQL store.
pub fn statements_sent() -> u64 {
    STATEMENTS.load(Ordering::Relaxed)
}

/// Whether statements are written to stderr as `PGTRACE <sql>` (a
/// benchmark turns it on around what it measures, under
/// `SPACEWAKE_TRACE_SQL`; `bench/wake-statements-pg.sh` tallies them).
static TRACING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Traces statements from now on (`on`) or stops, when the environment
/// asks for it (`SPACEWAKE_TRACE_SQL`).
pub fn trace_statements(on: bool) {
    let asked = std::env::var_os("SPACEWAKE_TRACE_SQL").is_some();
    TRACING.store(on && asked, Ordering::Relaxed);
}

/// Counts `n` statements sent (`what`, for the trace).
pub(super) fn sent(n: u64, what: &str) {
    STATEMENTS.fetch_add(n, Ordering::Relaxed);
    if TRACING.load(Ordering::Relaxed) {
        eprintln!("PGTRACE {what}");
    }
}

impl<C: GenericClient> Db<'_, C> {
    fn st(&mut self, sql: &str) -> Result<Statement, postgres::Error> {
        sent(1, sql);
        if let Some(s) = self.cache.get(sql) {
            return Ok(s.clone());
        }
        let s = self.c.prepare(sql)?;
        self.cache.insert(sql.to_string(), s.clone());
        Ok(s)
    }
    pub(super) fn execute(
        &mut self,
        sql: &str,
        p: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, postgres::Error> {
        let s = self.st(sql)?;
        self.c.execute(&s, p)
    }
    pub(super) fn query(
        &mut self,
        sql: &str,
        p: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, postgres::Error> {
        let s = self.st(sql)?;
        self.c.query(&s, p)
    }
    pub(super) fn query_opt(
        &mut self,
        sql: &str,
        p: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, postgres::Error> {
        let s = self.st(sql)?;
        self.c.query_opt(&s, p)
    }
    pub(super) fn query_one(
        &mut self,
        sql: &str,
        p: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, postgres::Error> {
        let s = self.st(sql)?;
        self.c.query_one(&s, p)
    }
}

impl Pooled {
    /// Makes sure a working connection is held: one from the pool after a
    /// release, a fresh one in place of one that broke. True when a held
    /// connection had broken.
    pub(super) fn ensure(&mut self) -> StoreResult<bool> {
        let broken = match &self.client {
            Some(c) if !c.0.is_closed() => return Ok(false),
            Some(_) => true,
            None => false,
        };
        self.client = Some(self.pool.checkout()?);
        Ok(broken)
    }

    /// Gives the connection back to the pool until the next operation.
    pub(super) fn release(&mut self) {
        let Some(client) = self.client.take().filter(|c| !c.0.is_closed()) else {
            return;
        };
        let mut idle = self.pool.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < POOL_IDLE {
            idle.push(client);
        }
    }

    pub(super) fn c(&mut self) -> &mut Client {
        &mut self.parts().0
    }

    pub(super) fn parts(&mut self) -> &mut (Client, Cache) {
        self.client
            .as_mut()
            .expect("operations ensure a connection before they use it")
    }

    /// The connection with its statement cache.
    pub(super) fn db(&mut self) -> Db<'_, Client> {
        let (c, cache) = self.parts();
        Db { c, cache }
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        self.release();
    }
}
