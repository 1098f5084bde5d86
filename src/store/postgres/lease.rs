//! Leases on the shared database (`execution_lease`): taking one inside a
//! transaction that holds the space's row lock, checking it in a write's
//! own transaction, renewing, giving it back, and the process's own record
//! of the leases it holds, by which a host stops writing by itself once its
//! clock says a lease may have expired (`spec/fleet.md`, *Leases and the
//! fencing argument*). Expiry is on the database's clock.

use super::pool::Db;
use super::{MS, SELF_FENCE_NUM_DEN};
use crate::metrics::{Counter, SpaceCounters};
use crate::store::error::{PgContext, StoreResult};
use crate::store::records::Lease;
use postgres::{GenericClient, Row};
use std::collections::HashMap;
use std::sync::Mutex;

/// The leases this process took or renewed last, per space: the epoch and
/// the monotonic time at which that request was sent (a conservative start
/// for its TTL). Shared by every handle of one store — a tenure's, the
/// lease keeper's, the waker's claims — so a renewal through one counts for
/// all. An entry leaves when its lease is given back (or this process takes
/// the space again); one whose lease was lost stays, because it is what
/// fences this process's plane writes to that space.
#[derive(Debug, Default)]
pub(super) struct Holds(Mutex<HashMap<String, (u64, u64)>>);

impl Holds {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, (u64, u64)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The epoch held for `space` and when its last renewal was sent.
    pub(super) fn get(&self, space: &str) -> Option<(u64, u64)> {
        self.map().get(space).copied()
    }

    pub(super) fn set(&self, space: &str, epoch: u64, sent_ms: u64) {
        self.map().insert(space.to_string(), (epoch, sent_ms));
    }

    /// Forgets the hold of `epoch` (a later taking stays).
    pub(super) fn clear(&self, space: &str, epoch: u64) {
        let mut map = self.map();
        if map.get(space).is_some_and(|h| h.0 == epoch) {
            map.remove(space);
        }
    }

    /// How many spaces this process holds a lease of, as far as it knows.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.map().len()
    }

    /// Whether this host's own clock says `lease` may have expired: the TTL
    /// less its margin has passed since the last renewal of it that
    /// succeeded was sent. Only for a lease of `holder` this process took or
    /// renewed; any other is left to the database's check.
    pub(super) fn self_fenced(
        &self,
        space: &str,
        lease: &Lease,
        holder: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> bool {
        let (num, den) = SELF_FENCE_NUM_DEN;
        match self.get(space) {
            Some((epoch, sent_ms)) if epoch == lease.tenure && lease.holder == holder => {
                now_ms.saturating_sub(sent_ms) >= ttl_ms * num / den
            }
            _ => false,
        }
    }
}

/// What [`lock`] saw of the lease, after the space's row lock was granted.
#[derive(Debug, Clone)]
pub(super) enum LeaseSeen {
    /// Not asked for.
    NotRead,
    /// Whether the lease asked about (holder, epoch) is live.
    Live(bool),
    /// The lease row as it is (for a caller about to take the lease);
    /// `None`: the space never had one.
    Row(Option<LeaseRow>),
}

/// A lease row as a taking reads it under the space's lock.
#[derive(Debug, Clone)]
pub(super) struct LeaseRow {
    pub holder: String,
    /// Unexpired on the database's clock.
    pub live: bool,
    /// Given back (it expires at the Unix epoch).
    pub released: bool,
    pub epoch: u64,
    pub expires_ms: u64,
}

/// What a writing transaction asks of the lease as it locks the space.
pub(super) enum LeaseAsk<'a> {
    Nothing,
    /// Is `holder`'s lease at this epoch live?
    IsLive(&'a str, u64),
    /// The row as it is, for `take`.
    ForTaking,
}

/// A writing transaction's first statement: locks the space's row for the
/// rest of `tx` and reads its head seq and `wake_at_ms`, then the lease as
/// `ask` says — read after the lock is granted, in one round trip
/// (`spacewake_lock`, migration 16). `None`: no such space.
pub(super) fn lock(
    tx: &mut Db<'_, postgres::Client>,
    id: &str,
    holder: &str,
    ask: LeaseAsk<'_>,
) -> StoreResult<Option<(u64, Option<i64>, LeaseSeen)>> {
    let (who, epoch): (Option<&str>, Option<i64>) = match ask {
        LeaseAsk::Nothing => (None, None),
        LeaseAsk::IsLive(h, e) => (Some(h), Some(e as i64)),
        LeaseAsk::ForTaking => (Some(holder), None),
    };
    let row = tx
        .query_opt(
            "SELECT head_seq, wake_at_ms, lease_live, lease_holder, lease_released, \
             lease_epoch, lease_expires_ms FROM spacewake_lock($1, $2, $3)",
            &[&id, &who, &epoch],
        )
        .doing("locking the space")?;
    Ok(row.map(|r| {
        let seen = match (who, epoch) {
            (None, _) => LeaseSeen::NotRead,
            (Some(_), Some(_)) => LeaseSeen::Live(r.get::<_, Option<bool>>(2) == Some(true)),
            (Some(_), None) => {
                LeaseSeen::Row(r.get::<_, Option<String>>(3).map(|holder| LeaseRow {
                    holder,
                    live: r.get(2),
                    released: r.get(4),
                    epoch: r.get::<_, i64>(5) as u64,
                    expires_ms: r.get::<_, i64>(6).max(0) as u64,
                }))
            }
        };
        (r.get::<_, i64>(0) as u64, r.get(1), seen)
    }))
}

/// Takes the lease inside `tx`, whose caller holds the space's row lock
/// and read the lease row after taking it (`current`, from [`lock`]);
/// `None` while another holder's lease is live. With `adopt`, a live lease
/// this process itself took last (its waker's claim, a moment ago: `held`
/// records that epoch) is worked under as it is, without a statement or a
/// new epoch.
pub(super) fn take(
    tx: &mut Db<'_, postgres::Client>,
    id: &str,
    holder: &str,
    ttl_ms: f64,
    current: Option<LeaseRow>,
    adopt: Option<&Holds>,
    counters: &SpaceCounters,
) -> StoreResult<Option<Lease>> {
    if let Some(r) = current {
        let ours = r.holder == holder && r.live;
        if ours && adopt.is_some_and(|held| held.get(id).is_some_and(|h| h.0 == r.epoch)) {
            return Ok(Some(Lease {
                holder: r.holder,
                tenure: r.epoch,
                expires_at_ms: r.expires_ms,
            }));
        }
        if r.holder != holder && r.live {
            counters.inc(Counter::LeaseRefused);
            return Ok(None);
        }
        if r.holder != holder && !r.released {
            counters.inc(Counter::LeaseTakenOver);
        }
    }
    let row = tx
        .query_one(
            &format!(
                "INSERT INTO execution_lease AS l (space, holder, epoch, expires_at, renewed_at) \
                 VALUES ($1, $2, 1, clock_timestamp() + $3 * interval '1 millisecond', \
                 clock_timestamp()) \
                 ON CONFLICT (space) DO UPDATE SET holder = excluded.holder, \
                 epoch = l.epoch + 1, expires_at = excluded.expires_at, \
                 renewed_at = excluded.renewed_at \
                 RETURNING epoch, {MS}"
            ),
            &[&id, &holder, &ttl_ms],
        )
        .doing("taking the lease")?;
    Ok(Some(from_row(holder.to_string(), &row)))
}

/// Extends a live lease by the TTL; `None` when it expired or was taken.
pub(super) fn renew<C: GenericClient>(
    db: &mut Db<'_, C>,
    id: &str,
    held: &Lease,
    ttl_ms: f64,
) -> StoreResult<Option<Lease>> {
    let row = db
        .query_opt(
            &format!(
                "UPDATE execution_lease SET expires_at = clock_timestamp() \
                 + $4 * interval '1 millisecond', renewed_at = clock_timestamp() \
                 WHERE space = $1 AND holder = $2 \
                 AND epoch = $3 AND expires_at > clock_timestamp() RETURNING epoch, {MS}"
            ),
            &[&id, &held.holder, &(held.tenure as i64), &ttl_ms],
        )
        .doing("renewing the lease")?;
    Ok(row.map(|r| from_row(held.holder.clone(), &r)))
}

/// Gives the lease back (expiry at the Unix epoch, epoch kept); 1 when it
/// was still held, 0 when it was not.
pub(super) fn release<C: GenericClient>(
    db: &mut Db<'_, C>,
    id: &str,
    held: &Lease,
) -> StoreResult<u64> {
    db.execute(
        "UPDATE execution_lease SET expires_at = to_timestamp(0) \
         WHERE space = $1 AND holder = $2 AND epoch = $3",
        &[&id, &held.holder, &(held.tenure as i64)],
    )
    .doing("releasing the lease")
}

/// The space's lease row, whoever holds it.
pub(super) fn current<C: GenericClient>(
    db: &mut Db<'_, C>,
    id: &str,
) -> StoreResult<Option<Lease>> {
    Ok(db
        .query_opt(
            &format!("SELECT epoch, {MS}, holder FROM execution_lease WHERE space = $1"),
            &[&id],
        )
        .doing("reading the lease")?
        .map(|r| from_row(r.get(2), &r)))
}

/// A lease from a row whose first two columns are epoch and expiry (ms).
fn from_row(holder: String, r: &Row) -> Lease {
    Lease {
        holder,
        tenure: r.get::<_, i64>(0) as u64,
        expires_at_ms: r.get::<_, i64>(1).max(0) as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: &str, tenure: u64) -> Lease {
        Lease {
            holder: holder.into(),
            tenure,
            expires_at_ms: 0,
        }
    }

    #[test]
    fn a_host_fences_itself_once_three_quarters_of_the_ttl_pass_unrenewed() {
        let h = Holds::default();
        h.set("s", 3, 1_000);
        let l = lease("me", 3);
        assert!(!h.self_fenced("s", &l, "me", 1_000 + 1_499, 2_000));
        assert!(h.self_fenced("s", &l, "me", 1_000 + 1_500, 2_000));
        // Another epoch, another holder, another space: the database decides.
        assert!(!h.self_fenced("s", &lease("me", 2), "me", 9_999, 2_000));
        assert!(!h.self_fenced("s", &lease("other", 3), "me", 9_999, 2_000));
        assert!(!h.self_fenced("t", &l, "me", 9_999, 2_000));
    }

    #[test]
    fn clearing_an_old_epoch_keeps_a_later_taking() {
        let h = Holds::default();
        h.set("s", 3, 0);
        h.set("s", 4, 10);
        h.clear("s", 3);
        assert_eq!(h.get("s"), Some((4, 10)));
        h.clear("s", 4);
        assert_eq!(h.len(), 0);
    }
}
