//! Failed activations: the back-off after a failure, and the retry at
//! another holder's lease expiry (`spec/serving-loop.md`, *Failure
//! back-off*). The waker keeps the retry table's earliest time among its
//! deadlines.

use super::{Host, HostError, HostInner, Request, Trigger};
use crate::metrics::Counter;
use crate::runtime::RuntimeError;
use std::sync::Arc;

/// A space's last activation failures.
pub(crate) struct Failures {
    pub(crate) count: u32,
    pub(crate) retry_at_ms: u64,
    /// Why the last activation failed; `Some` for a live lease of another
    /// holder (its holder), so a refusal names who has the space. Such a
    /// failure is retried when that lease can expire, not with back-off.
    pub(crate) held_by: Option<String>,
    pub(crate) cause: String,
}

impl Failures {
    /// The error for a request refused while the space backs off.
    pub(crate) fn refusal(&self, space: &str, now_ms: u64) -> HostError {
        let retry_in_ms = self.retry_at_ms.saturating_sub(now_ms);
        match &self.held_by {
            Some(holder) => HostError::HeldElsewhere {
                space: space.to_string(),
                holder: holder.clone(),
                retry_in_ms,
            },
            None => HostError::BackingOff {
                space: space.to_string(),
                failures: self.count,
                retry_in_ms,
                cause: self.cause.clone(),
            },
        }
    }
}

impl HostInner {
    /// Records a failed activation (by `trigger`) and returns the error to
    /// answer the requests that were waiting for it. A failure for another
    /// holder's live lease is tried again when that lease can expire, on
    /// the host clock; any other failure backs off exponentially.
    pub(crate) fn record_failure(
        &self,
        id: &str,
        trigger: Trigger,
        error: &RuntimeError,
    ) -> HostError {
        let now = self.clock.now_ms();
        let mut f = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let e = f.entry(id.to_string()).or_insert(Failures {
            count: 0,
            retry_at_ms: 0,
            held_by: None,
            cause: String::new(),
        });
        e.count += 1;
        let backoff =
            (self.cfg.failure_backoff_ms << (e.count - 1).min(16)).min(self.cfg.max_backoff_ms);
        e.retry_at_ms = now + backoff;
        e.cause = error.to_string();
        e.held_by = None;
        if let RuntimeError::LeaseHeld {
            holder,
            expires_at_ms,
            ..
        } = error
        {
            e.held_by = Some(holder.clone());
            e.retry_at_ms = (*expires_at_ms).max(now + 1);
            // The waker's own pass retries scheduled wakes (they stay due
            // in the directory); every other trigger is retried from here.
            if trigger != Trigger::Schedule {
                self.lease_retries
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(id.to_string(), (e.retry_at_ms, trigger));
                self.poke_waker();
            }
        }
        self.counters.space(id).inc(Counter::ActivationFailures);
        e.refusal(id, now)
    }

    /// A tenure that ended in failure with undelivered events left (its
    /// wave's commit refused, its lease lost): the space backs off — by the
    /// attempts its failing events have had, as a failed activation does —
    /// and is activated again at the end of the back-off, when its poison
    /// event (if that is what it was) runs alone or is dead-lettered.
    pub(crate) fn retry_failed_tenure(&self, id: &str, attempts: u32, error: &RuntimeError) {
        let now = self.clock.now_ms();
        let count = attempts.max(1);
        let backoff =
            (self.cfg.failure_backoff_ms << (count - 1).min(16)).min(self.cfg.max_backoff_ms);
        let retry_at_ms = now + backoff;
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                id.to_string(),
                Failures {
                    count,
                    retry_at_ms,
                    held_by: None,
                    cause: error.to_string(),
                },
            );
        self.lease_retries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_string(), (retry_at_ms, Trigger::Events));
        self.counters.space(id).inc(Counter::TenureRetries);
        self.poke_waker();
    }

    /// When the next activation refused by a lease may be retried.
    pub(crate) fn next_lease_retry(&self) -> Option<u64> {
        self.lease_retries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|(at, _)| *at)
            .min()
    }

    /// Retries the activations whose refusing lease can have expired by
    /// `now_ms`, for the spaces that still have something to do (undelivered
    /// events, or a due wake the waker fires anyway): a refused session
    /// open or ingest left nothing behind, and its client retries itself.
    pub(crate) fn retry_after_leases(self: &Arc<Self>, now_ms: u64) {
        let mut due: Vec<(String, Trigger)> = Vec::new();
        self.lease_retries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|space, (at, trigger)| {
                let now_due = *at <= now_ms;
                if now_due {
                    due.push((space.clone(), *trigger));
                }
                !now_due
            });
        for (space, trigger) in due {
            let pending = self
                .directory_entry(&space)
                .is_some_and(|e| e.undelivered || e.next_wake_ms.is_some_and(|t| t <= now_ms));
            if !pending {
                continue;
            }
            let host = Host {
                inner: self.clone(),
            };
            if let Err(e) = host.notify(&space, trigger, Request::Wake) {
                tracing::warn!(space = %space, error = %e, "retry after a lease refused");
            }
        }
    }

    pub(crate) fn clear_failures(&self, id: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
    }
}
