//! The fleet's side of the PostgreSQL store: claiming due spaces from the
//! shared wake directory, hearing of earlier wakes, host heartbeats and the
//! fleet view (`spec/fleet.md`).

use super::{PgStore, MS};
use crate::metrics::Counter;
use crate::store::error::{PgContext, StoreResult};
use crate::store::records::Lease;
use postgres::{Client, NoTls};
use std::collections::HashMap;

/// A due space a host claimed: the lease it now holds for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub space: String,
    pub lease: Lease,
    /// The space's next scheduled wake when it was claimed (a firing is
    /// due when it is at or before the claim's `now`).
    pub next_wake_ms: Option<u64>,
    /// Whether it had undelivered events.
    pub undelivered: bool,
    /// Whether it has a policy of its own (a scheduled budget may apply).
    pub has_policy: bool,
}

/// What opening a space reads (whether it is set aside is the claim's own
/// condition): its schedule as JSON text, its head seq and its schedule's
/// revision. The claim reads it for each space it claims, in the statement
/// that takes the lease, so the activation that follows opens the space
/// without a statement (`spec/fleet.md`, *The open read with the claim*).
#[derive(Debug)]
pub(super) struct OpenAhead {
    pub schedule: Option<String>,
    pub head: u64,
    pub rev: i64,
}

/// The open reads of the spaces this host claimed and has not opened yet,
/// each taken once, within [`AHEAD_MS`] of the claim (on the host's
/// monotonic clock). Kept small: a claim the host does not act on is given
/// back (its read goes with it), and the map forgets everything past 1,024.
#[derive(Default)]
pub(super) struct Ahead(std::sync::Mutex<HashMap<String, (u64, OpenAhead)>>);

/// How long after its claim a space's open may use the claim's read. An
/// activation follows its claim within milliseconds; a read kept longer is
/// dropped rather than trusted (it would still be checked as the space's
/// transactions lock it, and a stale one costs a refused transaction).
const AHEAD_MS: u64 = 1_000;

impl Ahead {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (u64, OpenAhead)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn put(&self, space: &str, at_ms: u64, read: OpenAhead) {
        let mut m = self.lock();
        if m.len() >= 1_024 {
            m.clear();
        }
        m.insert(space.to_string(), (at_ms, read));
    }

    /// `space`'s read, if one was kept for it no earlier than
    /// [`AHEAD_MS`] before `now_ms`.
    pub(super) fn take(&self, space: &str, now_ms: u64) -> Option<OpenAhead> {
        let (at, read) = self.lock().remove(space)?;
        (now_ms.saturating_sub(at) <= AHEAD_MS).then_some(read)
    }

    /// Drops `space`'s read (its claim was given back).
    fn forget(&self, space: &str) {
        self.lock().remove(space);
    }
}

/// What one waker pass read in one statement ([`PgStore::claim_pass`]).
#[derive(Debug, Default)]
pub struct ClaimPass {
    /// The spaces claimed, in space order.
    pub claims: Vec<Claim>,
    /// Spaces this host holds whose wake is due, in due order.
    pub due_held_here: Vec<String>,
}

impl PgStore {
    /// Claims up to `limit` spaces that need a host — a wake due by
    /// `now_ms`, or undelivered events — and whose lease nobody holds live,
    /// in one statement: the rows are locked with `SKIP LOCKED`, so hosts
    /// claiming at once never wait for each other and never claim the same
    /// space, and each claimed space's lease is taken for this host (the
    /// next epoch) before the statement commits. A claim is a lease: the host
    /// fires write-first under it as it would under any lease, and a host
    /// that loses it is fenced.
    ///
    /// `excluding`: spaces this host will not act on now (it refused or
    /// deferred them: a local back-off, say). They are left for the other
    /// hosts; claiming and giving them back at every pass would keep their
    /// lease busy in a loop and starve the hosts that would run them.
    pub fn claim_due(
        &self,
        now_ms: u64,
        limit: usize,
        excluding: &[String],
    ) -> StoreResult<Vec<Claim>> {
        Ok(self.claim_sql(now_ms, limit, excluding, false)?.claims)
    }

    /// A waker's pass in one statement: [`PgStore::claim_due`], and the
    /// spaces whose lease this host holds live (they are active here) and
    /// whose scheduled wake is due by `now_ms`: the host's own waker fires
    /// them; no other host may (no claim can take them). One round trip a
    /// pass instead of two, about 0.6 a wake in a herd.
    pub fn claim_pass(
        &self,
        now_ms: u64,
        limit: usize,
        excluding: &[String],
    ) -> StoreResult<ClaimPass> {
        self.claim_sql(now_ms, limit, excluding, true)
    }

    fn claim_sql(
        &self,
        now_ms: u64,
        limit: usize,
        excluding: &[String],
        held_too: bool,
    ) -> StoreResult<ClaimPass> {
        static SQL: std::sync::OnceLock<[String; 2]> = std::sync::OnceLock::new();
        let sql = &SQL.get_or_init(|| {
            let claims = format!(
                "WITH due AS ( \
                   SELECT s.id, s.next_wake_ms, s.undelivered, s.head_seq, s.schedule_rev, \
                     EXISTS (SELECT 1 FROM space_policy p WHERE p.space = s.id) AS policy \
                   FROM spaces s \
                   WHERE s.wake_at_ms <= $1 AND s.quarantined IS NULL \
                   AND s.id <> ALL($5) \
                   AND NOT EXISTS (SELECT 1 FROM execution_lease l \
                                   WHERE l.space = s.id AND l.expires_at > clock_timestamp()) \
                   ORDER BY s.wake_at_ms \
                   LIMIT $2 FOR UPDATE OF s SKIP LOCKED), \
                 taken AS ( \
                   INSERT INTO execution_lease AS l (space, holder, epoch, expires_at, renewed_at) \
                   SELECT id, $3, 1, clock_timestamp() + $4 * interval '1 millisecond', \
                     clock_timestamp() FROM due \
                   ON CONFLICT (space) DO UPDATE SET holder = excluded.holder, \
                     epoch = l.epoch + 1, expires_at = excluded.expires_at, \
                     renewed_at = excluded.renewed_at \
                     WHERE l.expires_at <= clock_timestamp() \
                   RETURNING space, epoch, {MS} AS ms) \
                 SELECT t.space, t.epoch, t.ms, d.next_wake_ms, d.undelivered, d.policy, \
                   false AS held, d.head_seq, d.schedule_rev, {} \
                 FROM taken t JOIN due d ON d.id = t.space",
                super::prefetch::schedule_of_sql("t.space")
            );
            // The statement's start, not the volatile clock_timestamp():
            // only a stable bound can be an index condition, and a
            // candidate is checked under its lock anyway. The part above
            // cannot see the leases it takes: a space is in one part.
            let held = format!(
                "{claims} UNION ALL \
                 SELECT s.id, NULL::bigint, NULL::bigint, s.next_wake_ms, false, false, true, \
                   NULL::bigint, NULL::bigint, NULL::text \
                 FROM spaces s JOIN execution_lease l ON l.space = s.id \
                 WHERE l.holder = $3 AND l.expires_at > statement_timestamp() \
                 AND s.next_wake_ms <= $1 AND s.quarantined IS NULL"
            );
            [claims, held]
        })[usize::from(held_too)];
        let mut c = self.inner.take()?;
        let holder = self.inner.holder.clone();
        let sent_ms = self.inner.clock.monotonic_ms();
        let rows = c
            .db()
            .query(
                sql,
                &[
                    &(now_ms as i64),
                    &(limit as i64),
                    &holder,
                    &(self.inner.lease_ttl_ms as f64),
                    &excluding,
                ],
            )
            .doing("claiming due spaces")?;
        let mut pass = ClaimPass::default();
        let mut held_due = Vec::new();
        for r in &rows {
            let space: String = r.get(0);
            let next_wake_ms = r.get::<_, Option<i64>>(3).map(|v| v.max(0) as u64);
            if r.get::<_, bool>(6) {
                held_due.push((next_wake_ms, space));
                continue;
            }
            let read = OpenAhead {
                head: r.get::<_, i64>(7) as u64,
                rev: r.get(8),
                schedule: r.get(9),
            };
            self.inner.ahead.put(&space, sent_ms, read);
            pass.claims.push(Claim {
                space,
                lease: Lease {
                    holder: holder.clone(),
                    tenure: r.get::<_, i64>(1) as u64,
                    expires_at_ms: r.get::<_, i64>(2) as u64,
                },
                next_wake_ms,
                undelivered: r.get(4),
                has_policy: r.get(5),
            });
        }
        // Claims in space order, a host's own due spaces in due order.
        pass.claims.sort_by(|a, b| a.space.cmp(&b.space));
        held_due.sort();
        pass.due_held_here = held_due.into_iter().map(|(_, s)| s).collect();
        for cl in &pass.claims {
            self.inner.held.set(&cl.space, cl.lease.tenure, sent_ms);
            let sc = self.inner.counters.space(&cl.space);
            sc.inc(Counter::LeaseAcquired);
            sc.inc(Counter::FleetClaims);
        }
        Ok(pass)
    }

    /// Gives back a claim this host will not act on (its in-flight cap was
    /// reached, or the activation was refused), so another host may claim
    /// the space at once instead of after the TTL.
    pub fn release_claim(&self, claim: &Claim) -> StoreResult<()> {
        self.inner.ahead.forget(&claim.space);
        let mut c = self.inner.take()?;
        super::lease::release(&mut c.db(), &claim.space, &claim.lease)?;
        self.inner.held.clear(&claim.space, claim.lease.tenure);
        Ok(())
    }

    /// When, on the host's clock, this host may next have something to do:
    /// the earliest wake of a space nobody holds (undelivered events make
    /// it now), the scheduled wake of a space this host holds (it delivers
    /// its own events), and for a space
    /// another host holds, its wake or its lease's expiry (on the
    /// database's clock, as a delay from `now_ms`), whichever is later — a
    /// dead host's due spaces are taken over then, with no notice to wait
    /// for. Two index reads: the first space in wake order that no live
    /// lease holds (`spaces_wake_at`), and the spaces behind the leases
    /// live now (`execution_lease_expiry`) — never every space with a wake.
    /// (The statement's start stands for "now": an index cannot compare
    /// with `clock_timestamp()`, which moves while the statement runs. The
    /// `OFFSET 0` keeps the planner to one primary-key lookup per live lease
    /// instead of hashing every space.) With 100,000 spaces and 1,000 live
    /// leases: 3.9 ms, against 47–71 ms for the one aggregate it replaces.
    /// `excluding`: as for [`PgStore::claim_due`] (the caller looks at them
    /// again on its own time).
    pub fn next_claimable_ms(&self, now_ms: u64, excluding: &[String]) -> StoreResult<Option<u64>> {
        let mut c = self.inner.take()?;
        let row = c
            .db()
            .query_one(
                "SELECT LEAST( \
                   (SELECT s.wake_at_ms FROM spaces s \
                    WHERE s.wake_at_ms IS NOT NULL AND s.quarantined IS NULL \
                      AND s.id <> ALL($3) \
                      AND NOT EXISTS (SELECT 1 FROM execution_lease l WHERE l.space = s.id \
                        AND l.expires_at > statement_timestamp()) \
                    ORDER BY s.wake_at_ms LIMIT 1), \
                   (SELECT min(CASE WHEN l.holder <> $2 \
                      THEN GREATEST(w.wake_at_ms, $1 + ceil(extract(epoch FROM \
                        (l.expires_at - statement_timestamp())) * 1000)::bigint) \
                      ELSE w.next_wake_ms END) \
                    FROM execution_lease l CROSS JOIN LATERAL \
                      (SELECT s.wake_at_ms, s.next_wake_ms FROM spaces s WHERE s.id = l.space \
                       AND s.wake_at_ms IS NOT NULL AND s.quarantined IS NULL OFFSET 0) w \
                    WHERE l.expires_at > statement_timestamp()))",
                &[&(now_ms as i64), &self.inner.holder, &excluding],
            )
            .doing("reading when to claim next")?;
        Ok(row.get::<_, Option<i64>>(0).map(|v| v.max(0) as u64))
    }
}

/// One host of the fleet as the database sees it (`PgStore::fleet`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetHost {
    /// The lease holder name (`host-id/instance`).
    pub holder: String,
    /// Spaces whose lease it holds live now.
    pub spaces_held: u64,
    /// When it last took or renewed any lease (database clock, ms; 0 when
    /// it has no lease row).
    pub last_renewal_ms: u64,
    /// Its last heartbeat ([`PgStore::heartbeat`]; database clock, ms; 0
    /// when it never sent one).
    pub last_seen_ms: u64,
    /// It holds a lease live, or its last heartbeat is younger than its
    /// store's lease TTL.
    pub alive: bool,
}

impl PgStore {
    /// The fleet as the database sees it: every host that sent a
    /// heartbeat or holds a lease row, the spaces it holds live, its newest
    /// lease renewal and heartbeat, and whether it counts as alive (a live
    /// lease, or a heartbeat younger than this store's TTL).
    pub fn fleet(&self) -> StoreResult<Vec<FleetHost>> {
        let mut c = self.inner.take()?;
        let rows = c
            .db()
            .query(
                "WITH l AS (SELECT holder, \
                   count(*) FILTER (WHERE expires_at > clock_timestamp()) AS held, \
                   max(renewed_at) AS renewed FROM execution_lease GROUP BY holder) \
                 SELECT coalesce(h.holder, l.holder), coalesce(l.held, 0), \
                   coalesce((extract(epoch from l.renewed) * 1000)::bigint, 0), \
                   coalesce((extract(epoch from h.last_seen) * 1000)::bigint, 0), \
                   coalesce(h.last_seen > clock_timestamp() - $1 * interval '1 millisecond', false) \
                 FROM hosts h FULL OUTER JOIN l ON l.holder = h.holder ORDER BY 1",
                &[&(self.inner.lease_ttl_ms as f64)],
            )
            .doing("reading the fleet")?;
        Ok(rows
            .iter()
            .map(|r| {
                let held = r.get::<_, i64>(1) as u64;
                FleetHost {
                    holder: r.get(0),
                    spaces_held: held,
                    last_renewal_ms: r.get::<_, i64>(2).max(0) as u64,
                    last_seen_ms: r.get::<_, i64>(3).max(0) as u64,
                    alive: held > 0 || r.get::<_, bool>(4),
                }
            })
            .collect())
    }

    /// Records that this host is alive (`hosts.last_seen`, the database's
    /// clock). Opening the store sends the first; a host sends one at each
    /// lease renewal round.
    pub fn heartbeat(&self) -> StoreResult<()> {
        let mut c = self.inner.take()?;
        c.db()
            .execute(
                "INSERT INTO hosts (holder, started_at, last_seen) \
                 VALUES ($1, clock_timestamp(), clock_timestamp()) \
                 ON CONFLICT (holder) DO UPDATE SET last_seen = excluded.last_seen",
                &[&self.inner.holder],
            )
            .doing("sending a heartbeat")?;
        Ok(())
    }
}

/// A host as the registry shows it: where to reach it and its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredHost {
    pub holder: String,
    /// `host:port` it accepts connections on (`serve --advertise`).
    pub advertise: String,
    /// Its public key, as a `did:key`.
    pub did: String,
    /// Its heartbeat is younger than this store's lease TTL, or it holds a
    /// lease live (as in the fleet view).
    pub alive: bool,
}

impl PgStore {
    /// Publishes where this host can be reached and its key, on its own
    /// heartbeat row (which opening the store wrote); the heartbeats keep
    /// it alive from then on.
    pub fn register(&self, advertise: &str, did: &str) -> StoreResult<()> {
        let mut c = self.inner.take()?;
        c.db()
            .execute(
                "INSERT INTO hosts (holder, started_at, last_seen, advertise, did) \
                 VALUES ($1, clock_timestamp(), clock_timestamp(), $2, $3) \
                 ON CONFLICT (holder) DO UPDATE SET last_seen = excluded.last_seen, \
                   advertise = excluded.advertise, did = excluded.did",
                &[&self.inner.holder, &advertise, &did],
            )
            .doing("registering the host")?;
        Ok(())
    }

    /// Who holds `space`'s lease live now (the database's clock), and for
    /// how much longer (ms).
    pub fn live_holder(&self, space: &str) -> StoreResult<Option<(String, u64)>> {
        let mut c = self.inner.take()?;
        let row = c
            .db()
            .query_opt(
                "SELECT holder, (extract(epoch from expires_at - clock_timestamp()) * 1000)::bigint \
                 FROM execution_lease WHERE space = $1 AND expires_at > clock_timestamp()",
                &[&space],
            )
            .doing("reading a space's lease")?;
        Ok(row.map(|r| (r.get(0), r.get::<_, i64>(1).max(0) as u64)))
    }

    /// Where every live registered host can be reached (`advertise`).
    pub fn fleet_addresses(&self) -> StoreResult<Vec<String>> {
        let mut c = self.inner.take()?;
        let rows = c
            .db()
            .query(
                "SELECT advertise FROM hosts WHERE advertise IS NOT NULL \
                   AND last_seen > clock_timestamp() - $1 * interval '1 millisecond'",
                &[&(self.inner.lease_ttl_ms as f64)],
            )
            .doing("reading the host registry")?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// The registry's row for `holder`, if it registered.
    pub fn registered(&self, holder: &str) -> StoreResult<Option<RegisteredHost>> {
        let mut c = self.inner.take()?;
        let row = c
            .db()
            .query_opt(
                "SELECT advertise, did, \
                   last_seen > clock_timestamp() - $2 * interval '1 millisecond' \
                   OR EXISTS (SELECT 1 FROM execution_lease l \
                     WHERE l.holder = $1 AND l.expires_at > clock_timestamp()) \
                 FROM hosts WHERE holder = $1 AND advertise IS NOT NULL AND did IS NOT NULL",
                &[&holder, &(self.inner.lease_ttl_ms as f64)],
            )
            .doing("reading the host registry")?;
        Ok(row.map(|r| RegisteredHost {
            holder: holder.to_string(),
            advertise: r.get(0),
            did: r.get(1),
            alive: r.get(2),
        }))
    }
}

/// This host's subscription to the fleet's "needs a host sooner" notices
/// ([`PgStore::wake_notices`]), on a connection of its own.
pub struct WakeNotices {
    client: Client,
}

impl WakeNotices {
    /// The next notice, waiting at most `wait` of real time: the space and
    /// when it now needs a host (ms; 0 for undelivered events). `None` when
    /// none came. A notice is a hint to look sooner, never a promise: one
    /// may be lost (a broken connection), and the claim decides.
    pub fn next(&mut self, wait: std::time::Duration) -> StoreResult<Option<(String, u64)>> {
        use postgres::fallible_iterator::FallibleIterator;
        let n = self
            .client
            .notifications()
            .timeout_iter(wait)
            .next()
            .doing("waiting for wake notices")?;
        Ok(n.and_then(|n| {
            let (at, space) = n.payload().split_once(' ')?;
            Some((space.to_string(), at.parse().ok()?))
        }))
    }
}

impl PgStore {
    /// Subscribes to the notices commits send when a space comes to need a
    /// host sooner than before (`spec/fleet.md`, *The claim protocol*).
    pub fn wake_notices(&self) -> StoreResult<WakeNotices> {
        let mut client = Client::connect(&self.inner.url, NoTls).doing("connecting")?;
        client
            .batch_execute("LISTEN spacewake_wake")
            .doing("listening for wake notices")?;
        Ok(WakeNotices { client })
    }
}
