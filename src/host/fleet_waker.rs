//! The waker's pass when the spaces live in a fleet's PostgreSQL database
//! (`spec/fleet.md`, *The waker on claims*). Every host runs it:
//!
//! 1. **Claim** due spaces nobody holds — a wake due, or undelivered
//!    events (a dead host's spaces among them) — up to this host's free
//!    scheduled slots, in one statement that takes their leases
//!    (`PgStore::claim_pass`: `SKIP LOCKED`, so hosts claiming at once never
//!    claim the same space). Each claimed space is activated here: a
//!    firing when its wake is due, else a delivery of its events. A claim
//!    this host cannot act on is given back at once.
//! 2. **Fire its own**: spaces this host already holds (active here, for a
//!    session) whose wake is due get their firing from this host, as on
//!    SQLite; no other host can claim them. The same statement as the
//!    claim reads them.
//! 3. **Sleep** until the next thing it may do: a wake of a space nobody
//!    holds, or a due space's lease expiring (taking over a dead host's
//!    work needs no notice); woken sooner by commits of this process that
//!    move a wake earlier, by other hosts' `NOTIFY`s (`fleet_waker::listen`),
//!    by a firing finishing, or by a manual clock's jump.
//!
//! A pass also sends this host's heartbeat for the fleet view, at most once
//! per lease renewal interval.

use super::{HostInner, Request, Trigger};
use crate::metrics::Counter;
use crate::store::postgres::{Claim, PgStore};
use std::collections::HashMap;
use std::sync::Arc;

/// A due space this host may not act on yet (all its slots busy, a firing
/// that found nothing due) is looked at again after this long at most.
pub(crate) const RECHECK_MS: u64 = 250;

/// What to do with one claimed space (pure).
pub(crate) fn claimed_request(c: &Claim, now_ms: u64) -> (Trigger, Request) {
    if c.next_wake_ms.is_some_and(|t| t <= now_ms) {
        (Trigger::Schedule, Request::FireDue)
    } else {
        (Trigger::Boot, Request::Wake)
    }
}

/// When to look again (pure): the store's next claimable time or a
/// deferral's end, whichever is sooner, but never a time already past —
/// that would spin; a due space this host cannot act on now is looked at
/// again within [`RECHECK_MS`].
pub(crate) fn next_look(now_ms: u64, claimable: Option<u64>, deferred: Option<u64>) -> Option<u64> {
    let at = [claimable, deferred].into_iter().flatten().min()?;
    Some(if at <= now_ms {
        now_ms + RECHECK_MS
    } else {
        at
    })
}

/// One pass on the fleet's database; returns when to look again (host
/// clock), `None` for nothing known.
pub(crate) fn pass(
    inner: &Arc<HostInner>,
    pg: &PgStore,
    now: u64,
    deferred: &mut HashMap<String, u64>,
    last_heartbeat: &mut Option<u64>,
) -> Option<u64> {
    let host = super::Host {
        inner: inner.clone(),
    };
    if last_heartbeat.is_none_or(|t| now.saturating_sub(t) >= inner.store.config().lease_renew_ms) {
        match pg.heartbeat() {
            Ok(()) => *last_heartbeat = Some(now),
            Err(e) => tracing::warn!(error = %e, "fleet heartbeat failed"),
        }
    }
    let cap = inner.cfg.schedule.max_scheduled.max(1);
    let free = cap.saturating_sub(inner.scheduled_in_flight().len());
    let excluding = not_to_claim(inner, deferred);
    // No slot free, or every free slot taken: more may be due, and a
    // firing that ends pokes the waker, so when the next one is due is not
    // asked (one statement a pass, about a pass a wake in a herd).
    let mut slots_filled = free == 0;
    // Claims (none when no slot is free) and this host's own due spaces,
    // in one statement.
    let read = pg.claim_pass(now, free, &excluding);
    let (claims, held_due) = match read {
        Ok(p) => (p.claims, p.due_held_here),
        Err(e) => {
            tracing::error!(error = %e, "the waker cannot claim from the fleet");
            (Vec::new(), Vec::new())
        }
    };
    if free > 0 {
        slots_filled = claims.len() >= free;
    }
    for c in claims {
        act_on_claim(inner, &host, pg, &c, now, deferred);
    }
    for space in held_due {
        if deferred.contains_key(&space) || !inner.begin_scheduled(&space) {
            continue;
        }
        if let Err(e) = host.notify(&space, Trigger::Schedule, Request::FireDue) {
            tracing::warn!(space = %space, error = %e, "scheduled activation refused");
            inner.end_scheduled(&space);
            deferred.insert(space, now + inner.retry_delay_ms(RECHECK_MS));
        }
    }
    if slots_filled {
        // Due now, as far as this pass knows: looked at again within the
        // re-check delay at the latest.
        return next_look(now, Some(now), deferred.values().copied().min());
    }
    // Again: the claims above may have deferred more.
    let excluding = not_to_claim(inner, deferred);
    let claimable = pg.next_claimable_ms(now, &excluding).unwrap_or_else(|e| {
        tracing::error!(error = %e, "the waker cannot read the fleet's next wake");
        Some(now + RECHECK_MS)
    });
    let look = next_look(now, claimable, deferred.values().copied().min());
    // The heartbeat is this host's liveness in the registry, by which other
    // hosts relay to it and accept its relays: due again after a renewal
    // interval, however idle the fleet.
    let heartbeat_due = last_heartbeat.map(|t| t + inner.store.config().lease_renew_ms);
    [look, heartbeat_due].into_iter().flatten().min()
}

/// The spaces this host's claims skip: what it deferred (refused, backing
/// off), left to the other hosts until the deferral ends (the waker's own
/// `deferred` look returns to it), and what is active or dispatched here.
/// An active space's tenure holds its lease and renews it; if that lease
/// has lapsed (a database restart), the tenure fences itself and ends, and
/// only then may this host claim the space again. Claiming it meanwhile
/// would take a new epoch under a live tenure of the same host.
fn not_to_claim(inner: &HostInner, deferred: &HashMap<String, u64>) -> Vec<String> {
    let mut out: Vec<String> = deferred.keys().cloned().collect();
    out.extend(inner.active_ids());
    out.extend(inner.scheduled_in_flight());
    out.sort();
    out.dedup();
    out
}

fn act_on_claim(
    inner: &Arc<HostInner>,
    host: &super::Host,
    pg: &PgStore,
    c: &Claim,
    now: u64,
    deferred: &mut HashMap<String, u64>,
) {
    let (trigger, req) = claimed_request(c, now);
    let give_back = |why: &str| {
        tracing::debug!(space = %c.space, why, "claim given back");
        if let Err(e) = pg.release_claim(c) {
            tracing::warn!(space = %c.space, error = %e, "giving a claim back failed");
        }
    };
    let fire = matches!(req, Request::FireDue);
    // The claim read whether the space has a policy of its own: without
    // one and without a host budget, the check opens nothing.
    if fire && inner.skip_for_budget(&c.space, Some(c.has_policy)) {
        // Skipped: advanced and counted, never activated.
        give_back("skipped for budget");
        return;
    }
    if !inner.begin_scheduled(&c.space) {
        // Dispatched here between the read of what not to claim and the
        // claim: left to the other hosts for a recheck's time.
        give_back("already in flight here");
        deferred.insert(c.space.clone(), now + RECHECK_MS);
        return;
    }
    if !fire {
        inner.counters.space(&c.space).inc(Counter::BootDiscovered);
    }
    if let Err(e) = host.notify(&c.space, trigger, req) {
        tracing::warn!(space = %c.space, error = %e, "claimed activation refused");
        inner.end_scheduled(&c.space);
        give_back("activation refused");
        let wait = super::waker::refused_wait(inner, &e, RECHECK_MS);
        deferred.insert(c.space.clone(), now + wait);
    }
}

/// Pokes the waker whenever another host's commit tells the fleet a space
/// needs a host sooner (`NOTIFY`): a latency hint only, so a lost
/// connection is retried quietly and costs nothing but that latency.
pub(crate) fn listen(pg: PgStore, inner: std::sync::Weak<HostInner>) {
    // The host, while it runs; `None` once it stopped or is gone.
    let running = || {
        inner
            .upgrade()
            .filter(|h| !h.stopped.load(std::sync::atomic::Ordering::SeqCst))
    };
    while running().is_some() {
        match pg.wake_notices() {
            Ok(mut notices) => {
                // A broken connection ends the inner loop; the outer one
                // listens again.
                while let Ok(notice) = notices.next(std::time::Duration::from_millis(500)) {
                    match (running(), notice) {
                        // Events of a space active here (this host's own
                        // firing, mostly) are its server's to run.
                        (Some(h), Some((space, 0))) if h.is_active(&space) => {}
                        (Some(h), Some(_)) => h.poke_waker(),
                        (Some(_), None) => {}
                        (None, _) => return,
                    }
                }
            }
            Err(_) => std::thread::sleep(std::time::Duration::from_secs(1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Lease;

    fn claim(next_wake_ms: Option<u64>, undelivered: bool) -> Claim {
        Claim {
            space: "s".into(),
            lease: Lease {
                holder: "h/1".into(),
                tenure: 1,
                expires_at_ms: 0,
            },
            next_wake_ms,
            undelivered,
            has_policy: false,
        }
    }

    #[test]
    fn a_claim_due_to_fire_fires_and_one_with_only_events_delivers_them() {
        let (t, r) = claimed_request(&claim(Some(1_000), false), 1_000);
        assert_eq!(
            (t, matches!(r, Request::FireDue)),
            (Trigger::Schedule, true)
        );
        let (t, r) = claimed_request(&claim(Some(5_000), true), 1_000);
        assert_eq!((t, matches!(r, Request::Wake)), (Trigger::Boot, true));
        let (_, r) = claimed_request(&claim(None, true), 1_000);
        assert!(matches!(r, Request::Wake));
    }

    #[test]
    fn the_next_look_is_the_sooner_time_and_never_a_past_one() {
        assert_eq!(next_look(1_000, Some(5_000), Some(3_000)), Some(3_000));
        assert_eq!(next_look(1_000, Some(5_000), None), Some(5_000));
        assert_eq!(next_look(1_000, None, None), None);
        assert_eq!(
            next_look(1_000, Some(900), None),
            Some(1_000 + RECHECK_MS),
            "a due space it cannot act on yet does not spin the waker"
        );
    }
}
