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

/// A client or transaction with its connection's statement cache, and the
/// writes it has gathered to send at once.
pub(super) struct Db<'a, C> {
    pub(super) c: &'a mut C,
    pub(super) cache: &'a mut Cache,
    writes: Writes,
}

/// Writes gathered in a transaction (see [`Db::defer`]): sent in one call
/// of `spacewake_write` (migration 17) before any statement that names a
/// table they touch, and with the transaction's last statement
/// ([`Db::send_writes`]). Nothing the transaction reads back goes
/// unwritten: a statement that mentions a gathered table waits for them.
#[derive(Default)]
struct Writes {
    space: String,
    list: Vec<serde_json::Value>,
    tables: Vec<&'static str>,
}

impl Writes {
    /// Whether `sql` names a table with gathered writes (as a whole word:
    /// `docs` is not `output_docs`).
    fn blocks(&self, sql: &str) -> bool {
        self.tables.iter().any(|t| mentions(sql, t))
    }
}

/// Whether `sql` holds `word` not as a part of a longer name.
fn mentions(sql: &str, word: &str) -> bool {
    let name = |c: char| c.is_ascii_alphanumeric() || c == '_';
    sql.match_indices(word).any(|(i, _)| {
        let before = sql[..i].chars().next_back();
        let after = sql[i + word.len()..].chars().next();
        !before.is_some_and(name) && !after.is_some_and(name)
    })
}

/// The statement that sends gathered writes.
const SEND_WRITES: &str = "SELECT spacewake_write($1, $2::text::jsonb)::text";

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

impl<'a, C: GenericClient> Db<'a, C> {
    pub(super) fn new(c: &'a mut C, cache: &'a mut Cache) -> Self {
        Db {
            c,
            cache,
            writes: Writes::default(),
        }
    }

    /// Gathers a write of `space` (`kind` and its arguments, as
    /// `spacewake_write` takes them), touching `tables`, to be sent later.
    pub(super) fn defer(
        &mut self,
        space: &str,
        kind: &str,
        tables: &[&'static str],
        args: serde_json::Value,
    ) {
        debug_assert!(self.writes.list.is_empty() || self.writes.space == space);
        if self.writes.space != space {
            self.writes.space = space.to_string();
        }
        self.writes
            .list
            .push(serde_json::json!({ "k": kind, "a": args }));
        for t in tables {
            if !self.writes.tables.contains(t) {
                self.writes.tables.push(t);
            }
        }
    }

    /// Sends the gathered writes, if any, in one statement: what the last
    /// of them returned (see migration 17), or an empty object.
    pub(super) fn send_writes(&mut self) -> Result<serde_json::Value, postgres::Error> {
        if self.writes.list.is_empty() {
            return Ok(serde_json::Value::Object(Default::default()));
        }
        let w = std::mem::take(&mut self.writes);
        let list = serde_json::Value::Array(w.list).to_string();
        let s = self.st(SEND_WRITES)?;
        let text: String = self.c.query_one(&s, &[&w.space, &list])?.get(0);
        Ok(serde_json::from_str(&text).unwrap_or_default())
    }

    /// Sends gathered writes first when `sql` names a table they touch.
    fn before(&mut self, sql: &str) -> Result<(), postgres::Error> {
        if self.writes.blocks(sql) {
            self.send_writes()?;
        }
        Ok(())
    }

    fn st(&mut self, sql: &str) -> Result<Statement, postgres::Error> {
        self.before(sql)?;
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
        Db::new(c, cache)
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        self.release();
    }
}
