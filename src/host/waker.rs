//! The waker: one host thread that sleeps until the earliest due wake in the
//! host directory and dispatches due spaces to their space servers. On a
//! fleet's database its pass is `fleet_waker::pass` (claims) instead of
//! [`directory_pass`]; the loop, the clock and the pokes are the same.
//!
//! The decisions of a pass are [`plan`], a pure function of what the pass
//! read; `run` and `carry_out` are the shell around it.
//!
//! # Invariants
//! - No polling: it sleeps until the earliest known wake, and is poked when
//!   a commit moves a space's wake earlier, when a dispatched firing
//!   finishes, or when a manual clock jumps.
//! - Bounded memory: it reads a window of the next wakes from the
//!   directory's index (at most [`WINDOW`], and no more than it can act
//!   on: [`pass_window`]), never every entry.
//! - At most `on_time_scheduled` scheduled activations are dispatched at
//!   once while every due wake is dispatched within [`CATCH_UP_AFTER_MS`]
//!   of its due time, and at most `max_scheduled` once one has waited
//!   longer (see [`plan`]); a space
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
use crate::store::UpcomingWake;
use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

/// How many upcoming wakes one pass reads from the directory at most.
pub const WINDOW: usize = 256;

/// How many upcoming wakes a pass reads (pure): enough to see past every
/// space it already knows about (in flight, deferred, prepared: each may
/// hold a row near the front) and still find a candidate for every free
/// slot and preparation, plus a margin for the first later wake. Reading
/// the whole window in every pass cost about 0.7 million instructions per
/// wake, a tenth of one, when each finishing firing starts a pass.
pub(crate) fn pass_window(known: usize, cap: usize, prepare_cap: usize) -> usize {
    (known + cap + prepare_cap + 16).min(WINDOW)
}

/// The longest the waker sleeps without being told anything: a safety net
/// for wall-clock jumps (an NTP step), not a polling interval.
const MAX_SLEEP: Duration = Duration::from_secs(60);

/// A space whose firing reported nothing due while the directory still says
/// due is left alone this long (the projection may be early, by design).
const EARLY_HOLDOFF_MS: u64 = 1_000;

/// How long a due wake may wait for a slot before the waker allows more
/// activations in flight than the on-time cap (up to `max_scheduled`).
/// Why two caps: on time, fewer activations at once fire sooner (each one
/// that ran recently waits behind the others for a core, the kernel's
/// fairness); behind, more at once drain a backlog faster.
pub(crate) const CATCH_UP_AFTER_MS: u64 = 5;

/// What one pass of the waker knows: the time, the directory's window of
/// upcoming wakes, and its own bookkeeping.
pub(crate) struct PassInput<'a> {
    pub now_ms: u64,
    pub upcoming: &'a [UpcomingWake],
    /// Scheduled activations dispatched and not yet finished.
    pub in_flight: &'a HashSet<String>,
    /// Spaces left alone until the given time (refused, or nothing was due).
    pub deferred: &'a HashMap<String, u64>,
    /// Spaces activated ahead, by the due time they wait for.
    pub prepared: &'a HashMap<String, u64>,
    /// When an activation refused by another holder's lease is next retried.
    pub lease_retry_ms: Option<u64>,
    pub lead_ms: u64,
    /// Scheduled activations in flight at most (catching up).
    pub cap: usize,
    /// In flight at most while no due wake has waited past
    /// [`CATCH_UP_AFTER_MS`] (at most `cap`).
    pub on_time_cap: usize,
    /// Prepared spaces waiting at most.
    pub prepare_cap: usize,
    /// Preparing skips the budget check, so it is allowed only without a
    /// host budget, for spaces known to have no policy of their own.
    pub host_budget: bool,
}

/// What one pass decides (see [`plan`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Parked spaces to activate ahead, with the due time of their wake.
    pub prepare: Vec<(String, u64)>,
    /// Due spaces to dispatch a firing to, in due order, each with its
    /// budget policy as the directory knows it (the budget check comes
    /// before the dispatch).
    pub fire: Vec<(String, Option<bool>)>,
    /// Spaces whose wake is due now although they were prepared for a later
    /// one (their wake moved): no longer waiting for that.
    pub unprepare: Vec<String>,
    /// More due spaces than the cap allowed: if a planned firing does not
    /// happen (skipped for budget, refused), plan again at once.
    pub capped: bool,
    /// A due wake had waited past [`CATCH_UP_AFTER_MS`]: the pass allowed
    /// up to the full cap in flight.
    pub catching_up: bool,
    /// When to look again unless poked: the earliest deferral's end, lease
    /// retry, wake within the lead, or a later wake minus the lead.
    pub wake_at_ms: Option<u64>,
}

/// The waker's decisions for one pass, from what it read; no I/O, no clock.
pub(crate) fn plan(i: &PassInput<'_>) -> Plan {
    let now = i.now_ms;
    let mut p = Plan {
        // A prepared space's due time too: should it not fire itself, the
        // waker must look then even if its row is past the window.
        wake_at_ms: (i.deferred.values().copied())
            .chain(i.prepared.values().copied())
            .chain(i.lease_retry_ms)
            .min(),
        ..Plan::default()
    };
    let soon = |at: u64, p: &mut Plan| {
        p.wake_at_ms = Some(p.wake_at_ms.map_or(at, |n| n.min(at)));
    };
    let mut dispatched = i.in_flight.len();
    let busy = |space: &str| i.in_flight.contains(space) || i.deferred.contains_key(space);
    // The window is in due order: the first due wake not yet dispatched
    // has waited longest.
    let oldest_due = (i.upcoming.iter())
        .take_while(|w| w.at_ms <= now)
        .find(|w| !busy(&w.space))
        .map(|w| w.at_ms);
    p.catching_up = oldest_due.is_some_and(|at| now - at > CATCH_UP_AFTER_MS);
    let cap = if p.catching_up {
        i.cap
    } else {
        i.on_time_cap.clamp(1, i.cap.max(1))
    };
    for wake in i.upcoming {
        let (space, at) = (&wake.space, wake.at_ms);
        if at > now + i.lead_ms {
            // Woken `lead` early even where it cannot prepare: a pass costs little.
            soon(at - i.lead_ms, &mut p);
            break;
        }
        if at > now {
            // Due within the lead: activate ahead, fire at `at`.
            soon(at, &mut p);
            let may_prepare = i.lead_ms > 0 && !i.host_budget && wake.budget_policy == Some(false);
            if busy(space) || i.prepared.contains_key(space) || !may_prepare {
                continue;
            }
            if dispatched >= cap || i.prepared.len() + p.prepare.len() >= i.prepare_cap {
                continue;
            }
            dispatched += 1;
            p.prepare.push((space.clone(), at));
            continue;
        }
        if i.prepared.contains_key(space) {
            p.unprepare.push(space.clone());
        }
        if busy(space) {
            continue;
        }
        if dispatched >= cap {
            p.capped = true;
            if cap < i.cap {
                // Look again when the wait passes the threshold, should no
                // firing finish before.
                soon(at + CATCH_UP_AFTER_MS + 1, &mut p);
            }
            break; // a finishing firing pokes the waker
        }
        dispatched += 1;
        p.fire.push((space.clone(), wake.budget_policy));
    }
    p
}

pub(crate) fn run(inner: Arc<HostInner>, rx: Receiver<()>) {
    let mut deferred: HashMap<String, u64> = HashMap::new();
    // Spaces prepared for a wake, by its due time.
    let mut prepared: HashMap<String, u64> = HashMap::new();
    let cap = inner.cfg.schedule.max_scheduled.max(1);
    // Prepared spaces wait without using CPU; a few times the cap gives a
    // steady stream of wakes enough lead without holding many runtimes.
    let prepare_cap = 4 * cap;
    let mut last_heartbeat = None;
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
        // Activations a live lease refused, retried once it can expire.
        inner.retry_after_leases(now);
        let wake_at = match inner.store.postgres() {
            // A fleet's database: claims instead of the directory's window.
            Some(pg) => {
                super::fleet_waker::pass(&inner, pg, now, &mut deferred, &mut last_heartbeat)
            }
            None => directory_pass(&inner, now, cap, prepare_cap, &mut deferred, &mut prepared),
        };
        for space in inner.take_nothing_due() {
            deferred.insert(space, now + EARLY_HOLDOFF_MS);
        }
        // Counted when a pass is done (before its sleep): a test that sees
        // the count rise after a clock jump knows a whole pass saw it.
        inner.counters.add_host(Counter::WakerPasses, 1);
        // On the host clock like every timer: a manual clock's time never
        // comes by waiting (its jumps poke this thread); at least 1 ms, so
        // a time already here cannot spin the thread.
        let sleep = wake_at
            .and_then(|t| inner.clock.real_wait_until(t))
            .map_or(MAX_SLEEP, |d| d.clamp(Duration::from_millis(1), MAX_SLEEP));
        match rx.recv_timeout(sleep) {
            Ok(()) | Err(RecvTimeoutError::Timeout) => while rx.try_recv().is_ok() {},
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// One pass over the SQLite directory's window of upcoming wakes: plans
/// (the pure [`plan`]) and carries the plan out, again at once while the
/// cap left due spaces waiting and a planned firing did not happen.
/// Returns when to look again.
fn directory_pass(
    inner: &Arc<HostInner>,
    now: u64,
    cap: usize,
    prepare_cap: usize,
    deferred: &mut HashMap<String, u64>,
    prepared: &mut HashMap<String, u64>,
) -> Option<u64> {
    loop {
        // In flight before reading the directory: a firing that finishes
        // in between has already moved its space's wake there.
        let in_flight: HashSet<String> = inner.scheduled_in_flight();
        let known = in_flight.len() + deferred.len() + prepared.len();
        let window = pass_window(known, cap, prepare_cap);
        let upcoming = match inner.store.directory().upcoming_wakes(window) {
            Ok(v) => v,
            Err(e) => {
                tracing::error!(error = %e, "waker cannot read the directory");
                Vec::new()
            }
        };
        let p = plan(&PassInput {
            now_ms: now,
            upcoming: &upcoming,
            in_flight: &in_flight,
            deferred,
            prepared,
            lease_retry_ms: inner.next_lease_retry(),
            lead_ms: inner.cfg.schedule.lead_ms,
            cap,
            on_time_cap: inner.cfg.schedule.on_time_scheduled,
            prepare_cap,
            host_budget: inner.cfg.schedule.scheduled_budget_us.is_some(),
        });
        if p.catching_up {
            inner.counters.add_host(Counter::WakerCatchingUp, 1);
        }
        let short = carry_out(inner, &p, now, deferred, prepared);
        if !(p.capped && short) {
            return p.wake_at_ms;
        }
    }
}

/// How long a refused scheduled activation is left alone: until the
/// refusal says it may work (another holder's lease can expire, the
/// back-off ends), else the host's failure delay, at least `at_least`.
pub(super) fn refused_wait(inner: &HostInner, e: &HostError, at_least: u64) -> u64 {
    match e {
        HostError::HeldElsewhere { retry_in_ms, .. }
        | HostError::BackingOff { retry_in_ms, .. } => (*retry_in_ms).max(1),
        _ => inner.retry_delay_ms(at_least),
    }
}

/// The effects of a plan, in its order. True when a planned firing did not
/// happen (skipped for budget, already in flight, refused), so its slot is
/// free for another due space.
fn carry_out(
    inner: &Arc<HostInner>,
    p: &Plan,
    now: u64,
    deferred: &mut HashMap<String, u64>,
    prepared: &mut HashMap<String, u64>,
) -> bool {
    let host = super::Host {
        inner: inner.clone(),
    };
    for space in &p.unprepare {
        prepared.remove(space);
    }
    for (space, due_ms) in &p.prepare {
        if inner.begin_scheduled(space) {
            let req = Request::Prepare { due_ms: *due_ms };
            if host.notify(space, Trigger::Schedule, req).is_ok() {
                prepared.insert(space.clone(), *due_ms);
            } else {
                // Left to the ordinary path at the due time.
                inner.end_scheduled(space);
            }
        }
    }
    let mut short = false;
    for (space, policy) in &p.fire {
        if inner.skip_for_budget(space, *policy) || !inner.begin_scheduled(space) {
            // Skipped: advanced and counted, never activated.
            short = true;
            continue;
        }
        if let Err(e) = host.notify(space, Trigger::Schedule, Request::FireDue) {
            tracing::warn!(space = %space, error = %e, "scheduled activation refused");
            inner.end_scheduled(space);
            short = true;
            deferred.insert(
                space.clone(),
                now + refused_wait(inner, &e, EARLY_HOLDOFF_MS),
            );
        }
    }
    short
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_reads_past_what_it_knows_and_a_candidate_per_slot_at_most_the_window() {
        assert_eq!(pass_window(0, 1, 4), 21);
        assert_eq!(pass_window(40, 8, 32), 96);
        assert_eq!(pass_window(10_000, 8, 32), WINDOW);
    }

    #[test]
    fn a_prepared_space_beyond_the_window_still_wakes_the_waker_at_its_due_time() {
        let none = HashSet::new();
        let deferred = HashMap::new();
        let prepared = HashMap::from([("p".to_string(), 1_050)]);
        let p = plan(&input(&[], &none, &deferred, &prepared));
        assert_eq!(p.wake_at_ms, Some(1_050));
    }

    fn wake(space: &str, at_ms: u64, policy: Option<bool>) -> UpcomingWake {
        UpcomingWake {
            space: space.into(),
            at_ms,
            budget_policy: policy,
        }
    }

    fn input<'a>(
        upcoming: &'a [UpcomingWake],
        in_flight: &'a HashSet<String>,
        deferred: &'a HashMap<String, u64>,
        prepared: &'a HashMap<String, u64>,
    ) -> PassInput<'a> {
        PassInput {
            now_ms: 1_000,
            upcoming,
            in_flight,
            deferred,
            prepared,
            lease_retry_ms: None,
            lead_ms: 100,
            cap: 2,
            on_time_cap: 2,
            prepare_cap: 8,
            host_budget: false,
        }
    }

    fn names(v: &[(String, Option<bool>)]) -> Vec<&str> {
        v.iter().map(|(s, _)| s.as_str()).collect()
    }

    #[test]
    fn due_spaces_fire_in_due_order_up_to_the_cap_skipping_busy_ones() {
        let up = [
            wake("a", 900, None),
            wake("b", 950, None),
            wake("c", 960, None),
            wake("d", 990, None),
            wake("e", 1_000, None),
        ];
        let in_flight = HashSet::from(["a".to_string()]);
        let deferred = HashMap::from([("b".to_string(), 2_000)]);
        let p = plan(&input(&up, &in_flight, &deferred, &HashMap::new()));
        assert_eq!(
            names(&p.fire),
            ["c"],
            "one slot left beside the one in flight"
        );
        assert!(p.capped, "d and e wait for a slot");
        assert_eq!(p.wake_at_ms, Some(2_000), "the deferral's end");
        let none = HashSet::new();
        let p = plan(&input(&up, &none, &HashMap::new(), &HashMap::new()));
        assert_eq!(names(&p.fire), ["a", "b"]);
    }

    #[test]
    fn on_time_the_on_time_cap_holds_and_a_wake_waiting_past_the_threshold_lifts_it() {
        let none = HashSet::new();
        let empty = HashMap::new();
        // Due 5 and 2 ms ago: on time, one activation at once.
        let up = [wake("a", 995, None), wake("b", 998, None)];
        let mut i = input(&up, &none, &empty, &empty);
        (i.cap, i.on_time_cap) = (3, 1);
        let p = plan(&i);
        assert_eq!(names(&p.fire), ["a"]);
        assert!(p.capped && !p.catching_up);
        assert_eq!(
            p.wake_at_ms,
            Some(998 + CATCH_UP_AFTER_MS + 1),
            "looks again when b's wait would pass the threshold"
        );
        // a is in flight and b has waited 6 ms: up to the full cap.
        let up = [
            wake("a", 994, None),
            wake("b", 994, None),
            wake("c", 999, None),
            wake("d", 1_000, None),
        ];
        let flying = HashSet::from(["a".to_string()]);
        let mut i = input(&up, &flying, &empty, &empty);
        (i.cap, i.on_time_cap) = (3, 1);
        let p = plan(&i);
        assert!(p.catching_up);
        assert_eq!(names(&p.fire), ["b", "c"], "three in flight with a");
        assert!(p.capped);
        // Preparing ahead takes an on-time slot too.
        let up = [wake("e", 1_050, Some(false)), wake("f", 1_060, Some(false))];
        let mut i = input(&up, &none, &empty, &empty);
        (i.cap, i.on_time_cap) = (3, 1);
        assert_eq!(plan(&i).prepare, [("e".to_string(), 1_050)]);
        // An on-time cap above the cap is the cap.
        let up = [
            wake("a", 1_000, None),
            wake("b", 1_000, None),
            wake("c", 1_000, None),
        ];
        let mut i = input(&up, &none, &empty, &empty);
        (i.cap, i.on_time_cap) = (2, 16);
        assert_eq!(names(&plan(&i).fire), ["a", "b"]);
    }

    #[test]
    fn a_wake_within_the_lead_prepares_only_a_space_without_a_budget() {
        let up = [
            wake("a", 1_050, Some(false)),
            wake("b", 1_060, None),
            wake("c", 1_500, None),
        ];
        let none = HashSet::new();
        let empty = HashMap::new();
        let p = plan(&input(&up, &none, &empty, &empty));
        assert_eq!(p.prepare, [("a".to_string(), 1_050)]);
        assert!(p.fire.is_empty(), "nothing fires before its due time");
        assert_eq!(p.wake_at_ms, Some(1_050), "at the first due time");
        let mut i = input(&up, &none, &empty, &empty);
        i.host_budget = true;
        assert!(plan(&i).prepare.is_empty(), "a host budget needs the check");
        i.host_budget = false;
        i.lead_ms = 0;
        let p = plan(&i);
        assert!(p.prepare.is_empty());
        assert_eq!(p.wake_at_ms, Some(1_050), "without a lead, at the due time");
    }

    #[test]
    fn a_later_wake_is_looked_at_one_lead_early_and_ends_the_pass() {
        let up = [wake("a", 5_000, Some(false)), wake("b", 900, None)];
        let none = HashSet::new();
        let empty = HashMap::new();
        let mut i = input(&up, &none, &empty, &empty);
        i.lease_retry_ms = Some(9_000);
        let p = plan(&i);
        assert_eq!(p.wake_at_ms, Some(4_900));
        assert!(
            p.fire.is_empty(),
            "the window is in due order: nothing after a later wake"
        );
        assert!(!p.capped);
    }

    #[test]
    fn a_prepared_space_whose_wake_came_due_earlier_is_unprepared_and_fired() {
        let up = [wake("a", 990, Some(false))];
        let none = HashSet::new();
        let empty = HashMap::new();
        let prepared = HashMap::from([("a".to_string(), 1_080)]);
        let p = plan(&input(&up, &none, &empty, &prepared));
        assert_eq!(p.unprepare, ["a"]);
        assert_eq!(names(&p.fire), ["a"]);
        // A prepared space is not prepared twice, and the cap on waiting
        // preparations holds.
        let up = [wake("a", 1_080, Some(false)), wake("b", 1_090, Some(false))];
        let mut i = input(&up, &none, &empty, &prepared);
        i.prepare_cap = 1;
        assert!(plan(&i).prepare.is_empty());
    }
}
