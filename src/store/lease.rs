//! The execution lease of one space file: who may commit derived writes
//! and plane rows for it, for how long, and how a holder renews or gives
//! it back (`spec/storage.md`, *Leases*): the SQL, as functions over a
//! connection or transaction; `FileSpace` wraps them (`space.rs`).

use super::error::{SqlContext, StoreError, StoreResult};
use super::records::Lease;
use super::shared::StoreShared;
use crate::metrics::Counter;
use crate::metrics::SpaceCounters;
use rusqlite::{params, Connection, OptionalExtension, Transaction, TransactionBehavior};
use std::path::Path;

/// Takes the space's lease for a new tenure in a transaction of its own
/// (see [`take`]); counted when taken.
pub(super) fn acquire(
    conn: &mut Connection,
    path: &Path,
    id: &str,
    shared: &StoreShared,
    counters: &SpaceCounters,
) -> StoreResult<Option<Lease>> {
    let now = shared.clock.now_ms();
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .at(path)?;
    let lease = take(&tx, path, id, shared, counters, now)?;
    if lease.is_some() {
        tx.commit().at(path)?;
        counters.inc(Counter::LeaseAcquired);
    }
    Ok(lease)
}

/// The lease for a new tenure, written inside `tx`; `None` when another
/// holder's lease is live (nothing written).
pub(super) fn take(
    tx: &Transaction<'_>,
    path: &Path,
    id: &str,
    shared: &StoreShared,
    counters: &SpaceCounters,
    now: u64,
) -> StoreResult<Option<Lease>> {
    let holder = shared.holder.clone();
    let ttl = shared.cfg.lease_ttl_ms;
    let current = lease_row(tx, path)?;
    let tenure = match &current {
        Some(l) if l.holder != holder && l.expires_at_ms > now => {
            // A live lease of an earlier instance of this host: that
            // process is dead if we hold the directory's lock.
            if !(shared.cfg.owns_directory && same_host(&l.holder, &holder)) {
                counters.inc(Counter::LeaseRefused);
                return Ok(None);
            }
            counters.inc(Counter::LeaseTakenOverFromOwnDeadInstance);
            l.tenure + 1
        }
        Some(l) => {
            // A released lease (expiry 0) is free, not taken over.
            if l.holder != holder && l.expires_at_ms != 0 {
                counters.inc(Counter::LeaseTakenOver);
            }
            l.tenure + 1
        }
        None => max_tenure_hint(tx, path)? + 1,
    };
    let lease = Lease {
        holder,
        tenure,
        expires_at_ms: now + ttl,
    };
    tx.prepare_cached(
        "INSERT OR REPLACE INTO execution_lease (space, holder, tenure, expires_at_ms) \
         VALUES (?1, ?2, ?3, ?4)",
    )
    .at(path)?
    .execute(params![
        id,
        lease.holder,
        lease.tenure as i64,
        lease.expires_at_ms as i64
    ])
    .at(path)?;
    Ok(Some(lease))
}

/// Extends a live lease; `None` when it expired or was taken (the tenure
/// is over and nothing more from it may commit).
pub(super) fn renew(
    conn: &Connection,
    path: &Path,
    shared: &StoreShared,
    counters: &SpaceCounters,
    lease: &Lease,
) -> StoreResult<Option<Lease>> {
    let now = shared.clock.now_ms();
    let expires = now + shared.cfg.lease_ttl_ms;
    // A lease that expired but that nobody took is still this tenure's
    // row: renewing it is as safe as acquiring it afresh (anyone who took
    // it over changed the holder and tenure, and the update below then
    // matches nothing). So a wave that outlived the TTL — a long handler,
    // a stalled machine — still commits when no other host wanted the
    // space meanwhile.
    let was = lease_row(conn, path)?;
    let n = conn
        .prepare_cached(
            "UPDATE execution_lease SET expires_at_ms = ?1 WHERE holder = ?2 AND tenure = ?3",
        )
        .and_then(|mut s| s.execute(params![expires as i64, lease.holder, lease.tenure as i64]))
        .at(path)?;
    if n == 1 {
        if was.is_some_and(|l| l.expires_at_ms <= now) {
            counters.inc(Counter::LeaseRenewedAfterExpiry);
        }
        counters.inc(Counter::LeaseRenewed);
        Ok(Some(Lease {
            expires_at_ms: expires,
            ..lease.clone()
        }))
    } else {
        counters.inc(Counter::LeaseLost);
        Ok(None)
    }
}

/// Marks `lease` released inside `tx` (expiry 0, so tenures keep
/// increasing); how many rows it matched (0: not ours any more).
pub(super) fn release(tx: &Connection, path: &Path, lease: &Lease) -> StoreResult<usize> {
    tx.prepare_cached(
        "UPDATE execution_lease SET expires_at_ms = 0 WHERE holder = ?1 AND tenure = ?2",
    )
    .and_then(|mut s| s.execute(params![lease.holder, lease.tenure as i64]))
    .at(path)
}

pub(super) fn check_lease(
    tx: &Transaction<'_>,
    path: &Path,
    lease: Option<&Lease>,
    now_ms: u64,
) -> StoreResult<()> {
    let Some(claim) = lease else {
        return Err(StoreError::NotLeaseHolder(
            "a derived commit must carry the writer's lease".into(),
        ));
    };
    match lease_row(tx, path)? {
        Some(l)
            if l.holder == claim.holder && l.tenure == claim.tenure && l.expires_at_ms > now_ms =>
        {
            Ok(())
        }
        Some(l) if l.holder == claim.holder && l.tenure == claim.tenure => {
            Err(StoreError::NotLeaseHolder(format!(
                "the lease of tenure {} expired at {} (now {now_ms})",
                l.tenure, l.expires_at_ms
            )))
        }
        Some(l) => Err(StoreError::NotLeaseHolder(format!(
            "{} (tenure {}) does not hold the lease; {} holds tenure {}",
            claim.holder, claim.tenure, l.holder, l.tenure
        ))),
        None => Err(StoreError::NotLeaseHolder(format!(
            "{} does not hold the lease; nobody does",
            claim.holder
        ))),
    }
}

/// Whether two lease holders (`host-id/instance-id`) are instances of the
/// same host.
fn same_host(a: &str, b: &str) -> bool {
    match (a.split_once('/'), b.split_once('/')) {
        (Some((ha, _)), Some((hb, _))) => ha == hb,
        _ => false,
    }
}

pub(super) fn lease_row(conn: &Connection, path: &Path) -> StoreResult<Option<Lease>> {
    conn.prepare_cached("SELECT holder, tenure, expires_at_ms FROM execution_lease LIMIT 1")
        .at(path)?
        .query_row([], |r| {
            Ok(Lease {
                holder: r.get(0)?,
                tenure: r.get::<_, i64>(1)? as u64,
                expires_at_ms: r.get::<_, i64>(2)? as u64,
            })
        })
        .optional()
        .at(path)
}

/// Without a lease row, tenures restart above anything seen; the row is
/// never deleted by us, so this is 0 on a fresh space.
fn max_tenure_hint(conn: &Connection, path: &Path) -> StoreResult<u64> {
    conn.query_row(
        "SELECT COALESCE(MAX(tenure), 0) FROM execution_lease",
        [],
        |r| r.get::<_, i64>(0),
    )
    .map(|v| v as u64)
    .at(path)
}
