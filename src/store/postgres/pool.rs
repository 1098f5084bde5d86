//! Connections of a PostgreSQL store: a small pool, each connection with
//! its prepared statements, and the count of statements sent.

use super::{PgShared, POOL_IDLE};
use crate::metrics::{Counter, Counters};
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
                None => return Ok((self.connect()?, Cache::new())),
            }
        }
    }

    /// A new connection, counted.
    fn connect(&self) -> StoreResult<Client> {
        let c = Client::connect(&self.url, NoTls).doing("connecting")?;
        self.counters.add_host(Counter::PgConnections, 1);
        Ok(c)
    }

    /// Keeps `client` for reuse, unless the pool holds its most already.
    fn keep_idle(&self, client: (Client, Cache)) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < POOL_IDLE {
            idle.push(client);
        }
    }

    /// Opens up to `n` connections while fewer than `n` are idle, each
    /// warmed before it joins the pool (`spacewake_warm`, migration 21: a
    /// wake's functions compiled and their statements planned), so the
    /// first wakes a host serves do not pay for that. Returns how many it
    /// added.
    pub(super) fn fill(&self, n: usize) -> StoreResult<usize> {
        let n = n.min(POOL_IDLE);
        let idle = || self.idle.lock().unwrap_or_else(|p| p.into_inner()).len();
        let mut added = 0;
        while added < n && idle() < n {
            let mut c = self.connect()?;
            c.query_one(WARM, &[&self.holder, &WARM_ROUNDS])
                .doing("warming a connection")?;
            self.counters.add_host(Counter::PgConnectionsWarmed, 1);
            self.keep_idle((c, Cache::new()));
            added += 1;
        }
        Ok(added)
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

/// A connection with its statement cache, the transaction it is in (if
/// any) and the writes that transaction has gathered to send at once.
pub(super) struct Db<'a, C: GenericClient> {
    pub(super) c: &'a mut C,
    pub(super) cache: &'a mut Cache,
    /// The host's counters: statements sent, whole transactions.
    counters: &'a Counters,
    writes: Writes,
    tx: Tx,
    /// What `spacewake_check` returned when a deferred transaction began.
    checked: Option<serde_json::Value>,
    /// What a deferred transaction sent as one call reads after its writes
    /// (see [`Db::read_start`]).
    start: Option<serde_json::Value>,
}

/// Where a connection stands in a transaction.
#[derive(Default)]
enum Tx {
    /// In none: each statement is its own.
    #[default]
    None,
    /// Deferred (see [`Db::defer_begin`]): nothing sent yet. The first
    /// statement sends `BEGIN` and the checks (`spacewake_check`); if none
    /// comes, [`Db::commit`] sends the checks and the writes as one call
    /// (`spacewake_tx`).
    Deferred {
        space: String,
        check: serde_json::Value,
    },
    /// `BEGIN` was sent: rolled back when dropped uncommitted.
    Open,
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

/// The statement that sends gathered writes (`$3`: the space's wake as a
/// deferred transaction's checks found it, for writes not carrying it).
const SEND_WRITES: &str = "SELECT spacewake_write($1, $2::text::jsonb, $3)::text";

/// A deferred transaction's checks, sent with its `BEGIN`.
const CHECK: &str = "SELECT spacewake_check($1, $2::text::jsonb)::text";

/// A deferred transaction that read nothing: its checks and its writes, in
/// one statement (migration 18), and, when `$4` is not null, what a tenure
/// starts with read after the writes (migration 19), returned as `start`.
const WHOLE_TX: &str =
    "SELECT spacewake_tx($1, $2::text::jsonb, $3::text::jsonb, $4::text::jsonb)::text";

/// Warms a new connection (migration 21), rolling back what it wrote.
const WARM: &str = "SELECT spacewake_warm($1, $2)";

/// Rounds of a wake's writes a warm-up runs: from a statement's sixth run
/// on, PostgreSQL may keep a generic plan instead of planning it again.
const WARM_ROUNDS: i32 = 6;

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
    pub(super) fn new(c: &'a mut C, cache: &'a mut Cache, counters: &'a Counters) -> Self {
        Db {
            c,
            cache,
            counters,
            writes: Writes::default(),
            tx: Tx::None,
            checked: None,
            start: None,
        }
    }

    /// Asks a deferred transaction that goes as one call to read, after
    /// its writes, what a tenure starts with (`spacewake_start`, at most
    /// `docs` documents and `events` undelivered events), returned as
    /// `start`. A transaction that goes otherwise returns no `start`.
    pub(super) fn read_start(&mut self, docs: i64, events: i64) {
        self.start = Some(serde_json::json!({ "docs": docs, "events": events }));
    }

    /// Begins a transaction now.
    pub(super) fn begin(&mut self) -> Result<(), postgres::Error> {
        debug_assert!(matches!(self.tx, Tx::None));
        // BEGIN and COMMIT are round trips of their own.
        sent(2, "BEGIN + COMMIT");
        self.counters.add_host(Counter::PgStatements, 2);
        self.c.batch_execute("BEGIN")?;
        self.tx = Tx::Open;
        Ok(())
    }

    /// Begins a transaction of `space` whose statements wait: `check` (see
    /// `spacewake_check`, migration 18) says what its body relies on
    /// without reading it. A body that reads sends `BEGIN` and the checks
    /// first; one that only writes sends everything in one call at
    /// [`Db::commit`]. Either way a failed check writes nothing.
    pub(super) fn defer_begin(&mut self, space: &str, check: serde_json::Value) {
        debug_assert!(matches!(self.tx, Tx::None));
        self.tx = Tx::Deferred {
            space: space.to_string(),
            check,
        };
    }

    /// Sends a deferred transaction's `BEGIN` and checks, before its first
    /// statement.
    fn start_deferred(&mut self) -> Result<(), postgres::Error> {
        let Tx::Deferred { space, check } = std::mem::take(&mut self.tx) else {
            return Ok(());
        };
        self.begin()?;
        let s = self.st(CHECK)?;
        let text: String = self.c.query_one(&s, &[&space, &check.to_string()])?.get(0);
        self.checked = Some(serde_json::from_str(&text).unwrap_or_default());
        Ok(())
    }

    /// Ends the transaction: its gathered writes sent and, if it began,
    /// `COMMIT`. Returns what the writes returned, with what the checks
    /// returned for a deferred transaction (see migration 18).
    pub(super) fn commit(&mut self) -> Result<serde_json::Value, postgres::Error> {
        let tx = match self.tx {
            // Left open until COMMIT succeeds: dropped earlier, it rolls back.
            Tx::Open => Tx::Open,
            _ => std::mem::take(&mut self.tx),
        };
        let mut out = match tx {
            Tx::Deferred { space, check } => {
                if self.writes.list.is_empty() {
                    // Nothing read, nothing to write: nothing to send.
                    return Ok(serde_json::Value::Object(Default::default()));
                }
                let w = std::mem::take(&mut self.writes);
                let list = serde_json::Value::Array(w.list).to_string();
                let start = self.start.take().map(|s| s.to_string());
                let s = self.st(WHOLE_TX)?;
                let text: String = self
                    .c
                    .query_one(&s, &[&space, &check.to_string(), &list, &start])?
                    .get(0);
                self.counters.add_host(Counter::PgWholeTransactions, 1);
                return Ok(serde_json::from_str(&text).unwrap_or_default());
            }
            Tx::Open => {
                let out = self.send_writes()?;
                self.c.batch_execute("COMMIT")?;
                self.tx = Tx::None;
                out
            }
            Tx::None => self.send_writes()?,
        };
        if let (Some(c), Some(o)) = (self.checked.take(), out.as_object_mut()) {
            for (k, v) in c.as_object().into_iter().flatten() {
                o.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        Ok(out)
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
        let before = (self.checked.as_ref()).and_then(|c| c["before"].as_i64());
        let s = self.st(SEND_WRITES)?;
        let text: String = self.c.query_one(&s, &[&w.space, &list, &before])?.get(0);
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
        if matches!(self.tx, Tx::Deferred { .. }) && sql != WHOLE_TX {
            self.start_deferred()?;
        }
        self.before(sql)?;
        sent(1, sql);
        self.counters.add_host(Counter::PgStatements, 1);
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

impl<C: GenericClient> Drop for Db<'_, C> {
    /// A transaction that began and did not commit is rolled back before
    /// its connection is used again (a failed one must be, to be usable).
    fn drop(&mut self) {
        if matches!(self.tx, Tx::Open) {
            let _ = self.c.batch_execute("ROLLBACK");
        }
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
        if let Some(client) = self.client.take().filter(|c| !c.0.is_closed()) {
            self.pool.keep_idle(client);
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
        let (c, cache) = self
            .client
            .as_mut()
            .map(|c| (&mut c.0, &mut c.1))
            .expect("operations ensure a connection before they use it");
        Db::new(c, cache, &self.pool.counters)
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        self.release();
    }
}
