//! Admission: whether a request for a space reaches an active server, starts
//! one, waits for a slot, or is refused (backing off, unknown, at capacity,
//! shutting down), and how a server retires without losing a command.

use super::{shutting_down, Active, Cmd, Host, HostError, HostInner, Request, Trigger};
use crate::metrics::Counter;
use std::sync::mpsc;
use std::sync::Arc;

/// What becomes of a request that no active server took, once it may
/// activate its space at all (not backing off, a known space).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Start a server for it.
    Activate,
    /// At the limit, but a wake that owes a delivery (boot discovery's) is
    /// not dropped: it waits for a space to park.
    Queue,
    /// At the limit: refused as at capacity.
    Refuse,
}

/// The admission decision (pure): `active` spaces of at most `limit`.
pub(crate) fn admit(active: usize, limit: usize, owes_delivery: bool) -> Admission {
    if active < limit {
        Admission::Activate
    } else if owes_delivery {
        Admission::Queue
    } else {
        Admission::Refuse
    }
}

impl Host {
    pub(super) fn dispatch(
        &self,
        space: &str,
        trigger: Trigger,
        cmd: Cmd,
    ) -> Result<(), HostError> {
        // An active server takes the command under the map's lock, and
        // that is all the lock covers until an activation is decided: the
        // back-off record and the directory are read off it (every request
        // to every space takes this lock).
        let Some(mut cmd) = self.send_to_active(space, cmd)? else {
            return Ok(());
        };
        let after_lease = self.check_backoff(space, trigger)?;
        // A scheduled activation's space was just read from the directory
        // (or claimed from the fleet's): one that vanished since fails to
        // open instead, a statement a wake cheaper.
        if trigger != Trigger::Schedule && self.inner.directory_entry(space).is_none() {
            return Err(HostError::UnknownSpace(space.to_string()));
        }
        let mut active = self.inner.active.lock().unwrap_or_else(|p| p.into_inner());
        if self.inner.is_shutting_down() {
            return Err(shutting_down(space));
        }
        // Another request may have activated the space meanwhile.
        if let Some(a) = active.get(space) {
            match a.tx.send(cmd) {
                Ok(()) => return Ok(()),
                Err(mpsc::SendError(c)) => {
                    cmd = c;
                    active.remove(space);
                }
            }
        }
        let cap = self.inner.active_limit();
        let owes_delivery = matches!(cmd.req, Request::Wake) && cmd.reply.is_none();
        match admit(active.len(), cap, owes_delivery) {
            Admission::Activate => {}
            Admission::Queue => {
                let mut waiting = self.inner.waiting.lock().unwrap_or_else(|p| p.into_inner());
                if !waiting.iter().any(|(s, _)| s == space) {
                    waiting.push_back((space.to_string(), trigger));
                    self.inner
                        .counters
                        .space(space)
                        .inc(Counter::ActivationsQueued);
                }
                return Ok(());
            }
            Admission::Refuse => {
                self.inner
                    .counters
                    .space(space)
                    .inc(Counter::ActivationsRefusedAtCapacity);
                return Err(HostError::AtCapacity {
                    space: space.to_string(),
                    limit: cap,
                });
            }
        }
        let (tx, rx) = mpsc::channel();
        let generation = self
            .inner
            .generation
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tx.send(cmd).expect("receiver is alive");
        active.insert(space.to_string(), Active { tx, generation });
        drop(active);
        let counters = self.inner.counters.space(space);
        counters.inc(trigger.counter());
        counters.inc(Counter::ActiveSpaces);
        if after_lease {
            counters.inc(Counter::ActivationRetriedAfterLease);
        }
        let inner = self.inner.clone();
        let id = space.to_string();
        self.inner
            .pool
            .run(format!("space:{id}"), move || {
                super::server::run(inner, id, generation, rx, trigger)
            })
            .map_err(|e| HostError::Internal(format!("cannot start a space server: {e}")))?;
        Ok(())
    }

    /// Sends `cmd` to the space's server if one is active; gives it back
    /// otherwise (also when the server is exiting: its entry is dropped).
    /// While shutting down only leaving sessions reach a server.
    fn send_to_active(&self, space: &str, cmd: Cmd) -> Result<Option<Cmd>, HostError> {
        let mut active = self.inner.active.lock().unwrap_or_else(|p| p.into_inner());
        if self.inner.is_shutting_down() {
            let leaving = matches!(cmd.req, Request::Detach { .. } | Request::Stop);
            return match active.get(space) {
                Some(a) if leaving => {
                    a.tx.send(cmd)
                        .map(|()| None)
                        .map_err(|_| shutting_down(space))
                }
                _ => Err(shutting_down(space)),
            };
        }
        let Some(a) = active.get(space) else {
            return Ok(Some(cmd));
        };
        match a.tx.send(cmd) {
            Ok(()) => Ok(None),
            Err(mpsc::SendError(c)) => {
                active.remove(space);
                Ok(Some(c))
            }
        }
    }

    /// Refuses an activation while the space backs off after a failure;
    /// true when the last failure was another holder's lease. An operator's
    /// action needs neither lease nor runtime, so a space backing off (a
    /// program that no longer compiles, say) can still be paused or have
    /// its budget set.
    fn check_backoff(&self, space: &str, trigger: Trigger) -> Result<bool, HostError> {
        if trigger == Trigger::Operator {
            return Ok(false);
        }
        let now = self.inner.clock.now_ms();
        let failures = self
            .inner
            .failures
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let Some(f) = failures.get(space) else {
            return Ok(false);
        };
        if now < f.retry_at_ms {
            self.inner
                .counters
                .space(space)
                .inc(Counter::ActivationsDeferred);
            return Err(f.refusal(space, now));
        }
        Ok(f.held_by.is_some())
    }
}

impl HostInner {
    /// How many spaces may be active at once (`--max-active-spaces`).
    fn active_limit(&self) -> usize {
        self.cfg.max_active_spaces.max(1)
    }

    /// Activates waiting wakes while the host is below its limit; called
    /// whenever a tenure ends.
    pub(crate) fn admit_waiting(self: &Arc<Self>) {
        let cap = self.active_limit();
        loop {
            if self.active.lock().unwrap_or_else(|p| p.into_inner()).len() >= cap {
                return;
            }
            let next = self
                .waiting
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop_front();
            let Some((space, trigger)) = next else { return };
            let host = Host {
                inner: self.clone(),
            };
            // At the limit again (a race): it is queued anew and waits for
            // the next tenure to end.
            let _ = host.notify(&space, trigger, Request::Wake);
        }
    }

    /// Removes a space server's entry if it is still the one registered,
    /// unless commands are still queued for it: those are returned, to be
    /// handled first. Checked under the lock dispatch holds, so no command
    /// can slip in between.
    pub(crate) fn try_retire(
        &self,
        id: &str,
        generation: u64,
        rx: &mpsc::Receiver<Cmd>,
    ) -> Option<Vec<Cmd>> {
        let mut active = self.active.lock().unwrap_or_else(|p| p.into_inner());
        let mut leftover = Vec::new();
        // A clock's jump asks for nothing: it never keeps a space active;
        // nor does an effect's late outcome (it is asked for again).
        leftover.extend(
            rx.try_iter()
                .filter(|c| !matches!(c.req, Request::ClockMoved | Request::EffectDone(_))),
        );
        if !leftover.is_empty() {
            return Some(leftover);
        }
        if active.get(id).map(|a| a.generation) == Some(generation) {
            active.remove(id);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_the_limit_activates_and_at_it_only_an_owed_delivery_waits() {
        assert_eq!(admit(3, 4, false), Admission::Activate);
        assert_eq!(admit(4, 4, false), Admission::Refuse);
        assert_eq!(admit(4, 4, true), Admission::Queue);
        assert_eq!(admit(9, 4, true), Admission::Queue);
    }
}
