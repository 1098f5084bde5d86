//! Scheduled activations: the set of spaces the waker has dispatched and
//! not yet seen finish, the spaces that reported nothing due, and the
//! budget check a due space passes before it is activated.

use super::{Host, HostInner};
use crate::metrics::Counter;
use std::collections::HashSet;

impl Host {
    /// What the waker does for one due space before dispatching it (the
    /// budget check), for the schedule bench's step-by-step breakdown.
    #[doc(hidden)]
    pub fn bench_waker_check(&self, space: &str) -> bool {
        let policy = self
            .inner
            .directory_entry(space)
            .and_then(|e| e.budget_policy);
        self.inner.skip_for_budget(space, policy)
    }
}

impl HostInner {
    pub(crate) fn scheduled_in_flight(&self) -> HashSet<String> {
        self.scheduled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Marks a scheduled activation as dispatched; false if it already is.
    pub(crate) fn begin_scheduled(&self, space: &str) -> bool {
        let fresh = self
            .scheduled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(space.to_string());
        if fresh {
            self.counters.space(space).inc(Counter::ScheduledInFlight);
        }
        fresh
    }

    /// A dispatched scheduled activation is done (its wave finished, or it
    /// ended without one): the waker may dispatch another.
    pub(crate) fn end_scheduled(&self, space: &str) {
        if self
            .scheduled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(space)
        {
            self.counters
                .space(space)
                .add(Counter::ScheduledInFlight, -1);
        }
        self.poke_waker();
    }

    pub(crate) fn report_nothing_due(&self, space: &str) {
        self.nothing_due
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(space.to_string());
    }

    pub(crate) fn take_nothing_due(&self) -> Vec<String> {
        std::mem::take(&mut *self.nothing_due.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Enforcement at activation: if the space's scheduled budget is spent,
    /// its due wakes advance and are recorded as skipped, and it is not
    /// activated. Returns true when the wake was skipped. Without a host
    /// default, a space the directory knows has no policy of its own has no
    /// budget, and its file is not opened here (`policy`, from the waker's
    /// window: `None` when unknown).
    pub(crate) fn skip_for_budget(&self, space_id: &str, policy: Option<bool>) -> bool {
        let host_default = self.cfg.schedule.scheduled_budget_us;
        if host_default.is_none() && policy == Some(false) {
            return false;
        }
        let now = self.clock.now_ms();
        let window = self.cfg.runtime.ledger_window_ms;
        let result = (|| -> crate::store::StoreResult<bool> {
            let mut space = self.store.open_space(space_id)?;
            let budget = crate::accounting::scheduled_budget_us(&mut space, host_default)?;
            if policy.is_none() && !space.plane(|p| p.has_policies())? {
                self.store.directory().settle_no_budget_policy(space_id)?;
            }
            if !crate::accounting::scheduled_budget_spent(&mut space, budget, now, window)? {
                return Ok(false);
            }
            let report =
                crate::schedule::fire::skip_due_for_budget(&mut space, now, &self.jitter, window)?;
            let c = self.counters.space(space_id);
            c.add(Counter::LedgerBudgetSkips, report.suppressed as i64);
            c.add(Counter::ScheduleDue, report.due as i64);
            Ok(true)
        })();
        result.unwrap_or_else(|e| {
            tracing::warn!(space = space_id, error = %e, "budget check failed; activating");
            false
        })
    }
}
