//! A tenure's lifecycle as one value, with its rules on the transitions
//! (pure: `server.rs` is the shell that acts on it).
//!
//! ```text
//! Activating ──runtime started──> Serving ──idle, nothing held──> Parked
//!     │                              │  └──host shutting down──> Draining ──> Parked
//!     ├──operator's action done──────┼──────────────────────────> Parked
//!     └──failed────────> Failed <────┘ (lost lease, failed commit)
//! ```
//!
//! Beside the phase, a tenure has a *purpose*, decided by its first command
//! (a scheduled wake makes it brief: it parks as soon as its work is done
//! and may keep its file to itself; anything else holds it for the idle
//! time, and a session or warm demand joining a brief tenure holds it too),
//! and the scheduled *wake* it is handling (prepared ahead of its due time,
//! or firing until its wave is done).

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Opening the file, taking the lease, rebuilding the graphs.
    Activating,
    /// Handling commands and running waves.
    Serving,
    /// The host is shutting down: the tenure ends after this turn's commands.
    Draining,
    /// Ended: lease released, file closed.
    Parked,
    /// Ended by an error.
    Failed,
}

impl Phase {
    fn may_become(self, next: Phase) -> bool {
        use Phase::*;
        matches!(
            (self, next),
            (Activating, Serving | Parked | Failed)
                | (Serving, Draining | Parked | Failed)
                | (Draining, Draining | Parked)
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// No command handled yet.
    Undecided,
    /// Began with a scheduled wake, nobody joined.
    Brief,
    /// For sessions, events or warm demand.
    Held,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    None,
    /// Activated ahead of a wake due at `due_ms` (host clock): the server
    /// fires it itself then (`None` once taken: left to the waker) and does
    /// not park before `hold_until_ms`.
    Prepared {
        due_ms: Option<u64>,
        hold_until_ms: u64,
    },
    /// A firing was handled and its wave is not done yet: the waker counts
    /// the space in flight until then.
    Firing,
}

#[derive(Debug, Clone)]
pub(crate) struct Lifecycle {
    phase: Phase,
    purpose: Purpose,
    wake: Wake,
    /// A scheduled wake was served: waves with no session attached bill the
    /// scheduled bucket.
    served_wake: bool,
}

impl Lifecycle {
    pub fn new() -> Lifecycle {
        Lifecycle {
            phase: Phase::Activating,
            purpose: Purpose::Undecided,
            wake: Wake::None,
            served_wake: false,
        }
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Moves to `next`; a transition the diagram above does not have is a bug.
    pub fn become_(&mut self, next: Phase) {
        debug_assert!(
            self.phase.may_become(next),
            "tenure phase {:?} -> {next:?}",
            self.phase
        );
        self.phase = next;
    }

    /// A command is handled; the first one decides the purpose.
    pub fn command(&mut self, scheduled_wake: bool) {
        if self.purpose == Purpose::Undecided {
            self.purpose = if scheduled_wake {
                Purpose::Brief
            } else {
                Purpose::Held
            };
        }
    }

    /// A session attached or warm demand arrived: the tenure is held.
    pub fn joined(&mut self) {
        if self.purpose == Purpose::Brief {
            self.purpose = Purpose::Held;
        }
    }

    /// Parks as soon as its work is done.
    pub fn brief(&self) -> bool {
        self.purpose == Purpose::Brief
    }

    /// Began brief and was joined: a file it opened exclusively is shared now.
    pub fn held(&self) -> bool {
        self.purpose == Purpose::Held
    }

    /// A firing is handled (whatever was prepared is superseded).
    pub fn fire(&mut self) {
        self.served_wake = true;
        self.wake = Wake::Firing;
    }

    /// Activated ahead of a wake due at `due_ms`.
    pub fn prepare(&mut self, due_ms: u64, hold_until_ms: u64) {
        self.served_wake = true;
        self.wake = Wake::Prepared {
            due_ms: Some(due_ms),
            hold_until_ms,
        };
    }

    /// The handled firing's wave is done; true if one was in flight.
    pub fn firing_done(&mut self) -> bool {
        let was = self.wake == Wake::Firing;
        if was {
            self.wake = Wake::None;
        }
        was
    }

    /// Not before this, if prepared.
    pub fn hold_until(&self) -> Option<u64> {
        match self.wake {
            Wake::Prepared { hold_until_ms, .. } => Some(hold_until_ms),
            _ => None,
        }
    }

    /// When a prepared wake fires itself: its due time.
    pub fn fire_at(&self) -> Option<u64> {
        match self.wake {
            Wake::Prepared { due_ms, .. } => due_ms,
            _ => None,
        }
    }

    /// The prepared wake's due time, once: it is no longer scheduled to
    /// fire itself (the hold stays).
    pub fn take_fire_at(&mut self) -> Option<u64> {
        match &mut self.wake {
            Wake::Prepared { due_ms, .. } => due_ms.take(),
            _ => None,
        }
    }

    /// Waves bill the scheduled bucket (a wake was served, nobody attached).
    pub fn bills_scheduled(&self, sessions_attached: bool) -> bool {
        self.served_wake && !sessions_attached
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_command_decides_and_joining_holds_a_brief_tenure() {
        let mut l = Lifecycle::new();
        l.command(true);
        assert!(l.brief());
        l.command(false);
        assert!(l.brief(), "only the first command decides");
        l.joined();
        assert!(!l.brief() && l.held());
        let mut l = Lifecycle::new();
        l.command(false);
        assert!(l.held() && !l.brief());
    }

    #[test]
    fn a_prepared_wake_holds_until_fired_and_a_firing_is_in_flight_until_done() {
        let mut l = Lifecycle::new();
        assert!(!l.firing_done());
        l.prepare(5_000, 5_050);
        assert_eq!(l.fire_at(), Some(5_000));
        assert_eq!(l.take_fire_at(), Some(5_000));
        assert_eq!(l.fire_at(), None);
        assert_eq!(l.hold_until(), Some(5_050), "the hold stays");
        l.fire();
        assert_eq!(l.hold_until(), None, "a firing supersedes the preparation");
        assert!(l.bills_scheduled(false) && !l.bills_scheduled(true));
        assert!(l.firing_done());
        assert!(!l.firing_done(), "once");
    }

    #[test]
    fn phases_follow_the_diagram() {
        use Phase::*;
        for (from, to, ok) in [
            (Activating, Serving, true),
            (Activating, Parked, true),
            (Serving, Draining, true),
            (Draining, Parked, true),
            (Draining, Draining, true),
            (Serving, Failed, true),
            (Parked, Serving, false),
            (Failed, Serving, false),
            (Draining, Serving, false),
            (Activating, Draining, false),
        ] {
            assert_eq!(from.may_become(to), ok, "{from:?} -> {to:?}");
        }
    }
}
