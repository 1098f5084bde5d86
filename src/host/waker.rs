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
//! - Missed periods while the host was down are found by the first pass
//!   after boot (the directory still names the space as due) and coalesce
//!   into one wake per entry.

use super::{HostInner, Request, Trigger};
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
    loop {
        if inner.stopped.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let now = inner.clock.now_ms();
        deferred.retain(|_, until| *until > now);
        let upcoming = match inner.store.directory().upcoming_wakes(WINDOW) {
            Ok(v) => v,
            Err(e) => {
                tracing::error!(error = %e, "waker cannot read the directory");
                Vec::new()
            }
        };
        let mut next: Option<u64> = deferred.values().copied().min();
        let in_flight: HashSet<String> = inner.scheduled_in_flight();
        let mut dispatched = in_flight.len();
        for wake in upcoming {
            let (space, at) = (wake.space, wake.at_ms);
            if at > now {
                next = Some(next.map_or(at, |n| n.min(at)));
                break;
            }
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
                    deferred.insert(space, now + inner.retry_delay_ms(EARLY_HOLDOFF_MS));
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
