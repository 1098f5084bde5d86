//! The waker: one host thread that sleeps until the earliest due wake in the
//! host directory and dispatches due spaces to their space servers.
//!
//! # Invariants
//! - No polling: it sleeps until the earliest known wake, and is poked when
//!   a commit moves a space's wake earlier, when a dispatched firing
//!   finishes, or when a manual clock jumps.
//! - Bounded memory: it reads a window of the next [`WINDOW`] wakes from the
//!   directory's index, never every entry.
//! - At most `max_scheduled` scheduled activations are in flight; a space
//!   is dispatched at most once until its firing reports back, so a due
//!   space cannot be dispatched in a tight loop.
//! - A parked space whose wake falls due within `lead_ms` is activated
//!   ahead (a `Prepare`), at most 4 x `max_scheduled` waiting at once; it fires
//!   only at the due time, so activation no longer adds to lateness.
//! - Missed periods while the host was down are found by the first pass
//!   after boot (the directory still names the space as due) and coalesce
//!   into one wake per entry.

use super::{HostError, HostInner, Request, Trigger};
use crate::metrics::Counter;
use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

/// How many upcoming wakes one pass reads from the directory.
pub const WINDOW: usize = 256;

/// The longest the waker sleeps without being told anything: a safety net
/// for wall-clock jumps (an NTP step), not a polling interval.
const MAX_SLEEP: Duration = Duration::from_secs(60);

/// A space whose firing reported nothing due while the directory still says
/// due is left alone this long (the projection may be early, by design).
const EARLY_HOLDOFF_MS: u64 = 1_000;

pub(crate) fn run(inner: Arc<HostInner>, rx: Receiver<()>) {
    let mut deferred: HashMap<String, u64> = HashMap::new();
    // Spaces prepared for a wake, by its due time.
    let mut prepared: HashMap<String, u64> = HashMap::new();
    let lead = inner.cfg.schedule.lead_ms;
    let cap = inner.cfg.schedule.max_scheduled.max(1);
    // Prepared spaces wait without using CPU; a few times the cap gives a
    // steady stream of wakes enough lead without holding many runtimes.
    let prepare_cap = 4 * cap;
    // Preparing skips the budget check, so only where no budget can apply.
    let may_prepare = |policy: Option<bool>| {
        lead > 0 && inner.cfg.schedule.scheduled_budget_us.is_none() && policy == Some(false)
    };
    loop {
        if inner.stopped.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let now = inner.clock.now_ms();
        deferred.retain(|_, until| *until > now);
        // A preparation is over once its due time has come (the space
        // fired itself, or fires as due below); one whose wake moved or
        // vanished is forgotten too, and the space parks after its hold.
        prepared.retain(|_, due| *due > now);
        // In flight before reading the directory: a firing that finishes
        // in between has already moved its space's wake there.
        let in_flight: HashSet<String> = inner.scheduled_in_flight();
        let upcoming = match inner.store.directory().upcoming_wakes(WINDOW) {
            Ok(v) => v,
            Err(e) => {
                tracing::error!(error = %e, "waker cannot read the directory");
                Vec::new()
            }
        };
        // Activations a live lease refused, retried once it can expire.
        inner.retry_after_leases(now);
        let mut next: Option<u64> = deferred
            .values()
            .copied()
            .chain(inner.next_lease_retry())
            .min();
        let mut dispatched = in_flight.len();
        for wake in upcoming {
            let (space, at) = (wake.space, wake.at_ms);
            if at > now + lead {
                // Woken `lead` early even where it cannot prepare: a pass costs little.
                next = Some(next.map_or(at - lead, |n| n.min(at - lead)));
                break;
            }
            if at > now {
                // Due within the lead: activate ahead, fire at `at`.
                next = Some(next.map_or(at, |n| n.min(at)));
                let busy = in_flight.contains(&space) || deferred.contains_key(&space);
                if busy || prepared.contains_key(&space) || !may_prepare(wake.budget_policy) {
                    continue;
                }
                if dispatched >= cap || prepared.len() >= prepare_cap {
                    continue;
                }
                if inner.begin_scheduled(&space) {
                    let host = super::Host {
                        inner: inner.clone(),
                    };
                    let req = Request::Prepare { due_ms: at };
                    if host.notify(&space, Trigger::Schedule, req).is_ok() {
                        dispatched += 1;
                        prepared.insert(space, at);
                    } else {
                        // Left to the ordinary path at the due time.
                        inner.end_scheduled(&space);
                    }
                }
                continue;
            }
            prepared.remove(&space);
            if in_flight.contains(&space) || deferred.contains_key(&space) {
                continue;
            }
            if dispatched >= inner.cfg.schedule.max_scheduled.max(1) {
                break; // a finishing firing pokes us
            }
            if inner.skip_for_budget(&space, wake.budget_policy) {
                continue; // advanced and counted; never activated
            }
            if inner.begin_scheduled(&space) {
                dispatched += 1;
                let host = super::Host {
                    inner: inner.clone(),
                };
                if let Err(e) = host.notify(&space, Trigger::Schedule, Request::FireDue) {
                    tracing::warn!(space = %space, error = %e, "scheduled activation refused");
                    inner.end_scheduled(&space);
                    dispatched -= 1;
                    // Until the refusal says it may work: when another
                    // holder's lease can expire, or the back-off ends.
                    let wait = match &e {
                        HostError::HeldElsewhere { retry_in_ms, .. }
                        | HostError::BackingOff { retry_in_ms, .. } => (*retry_in_ms).max(1),
                        _ => inner.retry_delay_ms(EARLY_HOLDOFF_MS),
                    };
                    deferred.insert(space, now + wait);
                }
            }
        }
        for space in inner.take_nothing_due() {
            deferred.insert(space, now + EARLY_HOLDOFF_MS);
        }
        let sleep = match next {
            Some(t) if t > now => Duration::from_millis(t - now).min(MAX_SLEEP),
            Some(_) => Duration::from_millis(1),
            None => MAX_SLEEP,
        };
        match rx.recv_timeout(sleep) {
            Ok(()) | Err(RecvTimeoutError::Timeout) => while rx.try_recv().is_ok() {},
            Err(RecvTimeoutError::Disconnected) => return,
        }
        inner.counters.add_host(Counter::WakerPasses, 1);
    }
}
