//! Scheduled wakes through the real host: the waker, write-first firing,
//! delivery with no session connected, restarts and catch-up, and scoped
//! demand. Time is a manual clock; nothing sleeps for hours.

use serde_json::json;
use spacewake::clock::{Clock, ManualClock};
use spacewake::host::{Host, HostConfig, Request, Trigger};
use spacewake::metrics::{Counter, Counters};
use spacewake::schedule::EntryState;
use spacewake::store::{Store, StoreConfig};
use std::sync::Arc;
use std::time::Duration;

const MIN: u64 = 60_000;

const PATTERN: &str = r#"
import { pattern, handler, lift, computed, SCHEDULE, UI, Cell, Default } from "commonfabric";

const expensiveView = lift((n: number) => {
  let acc = 0;
  for (let i = 0; i < 20000; i++) acc += (i * n) % 7;
  return `count ${n} (${acc})`;
});

const tick = handler<{ missedPeriods?: number; fireTime?: number },
                     { count: Cell<number>; seen: Cell<number[]>; next: number; missed: Cell<number> }>(
  (ev, { count, seen, next, missed }) => {
    count.set(next);
    seen.push(ev?.fireTime ?? 0);
    missed.set(missed.get() + (ev?.missedPeriods ?? 0));
  },
);

export default pattern<{ count: Default<number, 0>; seen: Default<number[], []>; missed: Default<number, 0> }>(
  ({ count, seen, missed }) => {
    const next = computed(() => count + 1);
    return {
      [UI]: <p>{expensiveView(count)}</p>,
      [SCHEDULE]: [{ intervalMinutes: 60, callback: tick({ count, seen, next, missed }) }],
      count, seen, missed,
    };
  },
);
"#;

mod common;
use common::wait;

fn host(dir: &std::path::Path, clock: Arc<ManualClock>) -> Host {
    common::manual_host(dir, clock, |_| {})
}

fn deploy(h: &Host, space: &str) -> String {
    common::deploy_source(h, space, PATTERN)
}

fn c(h: &Host, space: &str, counter: Counter) -> i64 {
    h.counters().space_value(space, counter)
}

fn read(h: &Host, space: &str, piece: &str, path: &str) -> serde_json::Value {
    common::read(h, space, piece, path)
}

/// The space's next wake as the host directory has it.
fn directory_wake(h: &Host, space: &str) -> Option<u64> {
    h.store()
        .directory()
        .get(space)
        .unwrap()
        .unwrap()
        .next_wake_ms
}

/// The space's first schedule row, as stored.
fn first_row(h: &Host, space: &str) -> spacewake::store::ScheduleRow {
    h.store().open_space(space).unwrap().schedule(None).unwrap()[0].clone()
}

/// A host on a manual clock with the pattern deployed in space `s`,
/// parked: the temporary directory (keep it alive), clock, host, piece.
fn parked_space() -> (tempfile::TempDir, Arc<ManualClock>, Host, String) {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::default());
    let h = host(dir.path(), clock.clone());
    let piece = deploy_parked(&h, &clock, "s");
    (dir, clock, h, piece)
}

/// Deploys the pattern into `space` and waits until the space parks (the
/// deploy's tenure parks after the idle time, on the manual clock).
fn deploy_parked(h: &Host, clock: &ManualClock, space: &str) -> String {
    let piece = deploy(h, space);
    common::park(h, clock, space);
    piece
}

/// Moves the clock to 80 ms before space `s`'s first wake (within the
/// waker's lead) and waits until the space is prepared; returns the due time.
fn prepared(h: &Host, clock: &ManualClock) -> u64 {
    let due = first_row(h, "s").next_due_ms;
    clock.set_ms(due - 80);
    wait("prepared", || c(h, "s", Counter::SchedulePrepared) == 1);
    due
}

/// Waits until the space is parked (no tenure in flight), so the next clock
/// jump cannot expire a live lease. For tenures that park by themselves
/// (scheduled ones nobody joined); others need [`common::park`].
fn parked(h: &Host, space: &str) {
    wait("park", || common::settled(h, space));
}

#[test]
fn a_schedule_fires_with_no_session_and_its_writes_are_seen_later() {
    let (_dir, clock, h, piece) = parked_space();
    let row = first_row(&h, "s");
    let start = clock.now_ms();
    assert!(
        row.next_due_ms >= start + 40 * MIN && row.next_due_ms <= start + 80 * MIN,
        "first due one interval ± 20 min"
    );
    assert_eq!(directory_wake(&h, "s"), Some(row.next_due_ms));
    // Well before (beyond the waker's lead): nothing happens, once the
    // waker has looked at the new time.
    common::jump_and_let_the_waker_look(&h, &clock, row.next_due_ms - 60_000);
    assert_eq!(c(&h, "s", Counter::SchedulePrepared), 0);
    assert!(common::settled(&h, "s"));
    // At the due time the waker fires and the callback runs, with nobody connected.
    let opened = c(&h, "s", Counter::SpacesOpened);
    clock.set_ms(row.next_due_ms);
    wait("fire and deliver", || {
        c(&h, "s", Counter::ScheduleDelivered) == 1
    });
    parked(&h, "s");
    assert_eq!(
        c(&h, "s", Counter::SpacesOpened) - opened,
        1,
        "the file is opened once per wake: the waker's budget check reads the directory's flag"
    );
    assert_eq!(c(&h, "s", Counter::ActivationsSchedule), 1);
    assert_eq!(
        c(&h, "s", Counter::ScheduleLeaseWithFiring),
        1,
        "the wake's tenure took its lease in the firing's transaction"
    );
    assert_eq!(
        c(&h, "s", Counter::LeaseAcquired),
        2,
        "the deploy's tenure and the firing's own"
    );
    assert_eq!(
        c(&h, "s", Counter::LeaseReleasedWithWave),
        1,
        "the wake's tenure gave its lease back in its wave's commit"
    );
    assert_eq!(c(&h, "s", Counter::LeaseReleased), 2);
    let lease = h.store().open_space("s").unwrap().current_lease().unwrap();
    assert_eq!(lease.map(|l| l.expires_at_ms), Some(0), "released on disk");
    assert_eq!(
        c(&h, "s", Counter::ActivationsSession),
        1,
        "only the deploy"
    );
    assert_eq!(c(&h, "s", Counter::LatenessCount), 1);
    assert_eq!(
        c(&h, "s", Counter::LatenessLe10Ms),
        1,
        "fired at its due time on a manual clock"
    );
    assert_eq!(read(&h, "s", &piece, "count"), json!(1));
    assert_eq!(read(&h, "s", &piece, "seen"), json!([row.next_due_ms]));
    let after = first_row(&h, "s");
    assert_eq!((after.fired_count, after.nominal_period), (1, 2));
    // Never closer than interval − 20 min to the previous fire.
    assert!(after.next_due_ms >= row.next_due_ms + 40 * MIN);
}

#[test]
fn a_space_activated_within_the_lead_fires_at_the_due_time_without_activating_again() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::default());
    let piece = {
        let h = host(dir.path(), clock.clone());
        let piece = deploy_parked(&h, &clock, "s");
        h.shutdown();
        piece
    };
    // Spaces with sessions idle for a minute before parking; a scheduled
    // tenure nobody attached to parks as soon as its wave is done.
    let h = common::manual_host(dir.path(), clock.clone(), |c| c.idle_park_ms = 60_000);
    let due = first_row(&h, "s").next_due_ms;
    let opened = c(&h, "s", Counter::SpacesOpened);
    clock.set_ms(due - 50);
    wait("prepared", || c(&h, "s", Counter::SchedulePrepared) == 1);
    assert_eq!(h.active_spaces(), vec!["s".to_string()], "held active");
    assert_eq!(
        c(&h, "s", Counter::ScheduleFired),
        0,
        "not before its due time"
    );
    clock.set_ms(due);
    wait("fire and deliver", || {
        c(&h, "s", Counter::ScheduleDelivered) == 1
    });
    let t = std::time::Instant::now();
    parked(&h, "s");
    assert!(t.elapsed() < Duration::from_secs(10), "parked at once");
    assert_eq!(c(&h, "s", Counter::ActivationsSchedule), 1);
    assert_eq!(c(&h, "s", Counter::SpacesOpened) - opened, 1);
    assert_eq!(
        c(&h, "s", Counter::SpacesOpenedExclusive),
        1,
        "a scheduled tenure keeps its file to itself"
    );
    assert_eq!(c(&h, "s", Counter::SpacesReopenedShared), 0);
    assert_eq!(c(&h, "s", Counter::LatenessLe10Ms), 1);
    assert_eq!(c(&h, "s", Counter::ScheduledInFlight), 0);
    assert_eq!(read(&h, "s", &piece, "count"), json!(1));
}

#[test]
fn a_prepared_space_fires_by_itself_at_the_due_time() {
    let (_dir, clock, h, piece) = parked_space();
    let due = prepared(&h, &clock);
    // With the waker stopped, only the prepared space itself can fire.
    h.shutdown();
    clock.set_ms(due);
    wait("fire and deliver", || {
        c(&h, "s", Counter::ScheduleDelivered) == 1
    });
    assert_eq!(c(&h, "s", Counter::ScheduleSelfFired), 1);
    assert_eq!(c(&h, "s", Counter::ActivationsSchedule), 1);
    parked(&h, "s");
    assert_eq!(c(&h, "s", Counter::ScheduledInFlight), 0);
    let row = first_row(&h, "s");
    assert_eq!((row.fired_count, row.nominal_period), (1, 2));
    assert_eq!(
        directory_wake(&h, "s"),
        Some(row.next_due_ms),
        "the directory moved to the next due time once the wave was done"
    );
    assert_eq!(read(&h, "s", &piece, "count"), json!(1));
}

#[test]
fn a_firing_request_that_finds_nothing_due_does_not_hold_off_the_next_wake() {
    let (_dir, clock, h, piece) = parked_space();
    // A second entry due half a second after the first (placed directly,
    // as the lateness bench does).
    let due = {
        let mut space = h.store().open_space("s").unwrap();
        let mut row = space.schedule(None).unwrap()[0].clone();
        let due = row.next_due_ms;
        row.entry = 1;
        row.next_due_ms = due + 500;
        space
            .plane(|p| spacewake::schedule::entry::save(p, &mut row))
            .unwrap();
        due
    };
    clock.set_ms(due);
    wait("first wake", || c(&h, "s", Counter::ScheduleDelivered) == 1);
    parked(&h, "s");
    assert_eq!(
        c(&h, "s", Counter::ScheduleIndexed),
        2,
        "the gauge counts the entries the firing read"
    );
    // A firing request that raced the one that just finished (the waker read
    // the directory before it moved) finds nothing due.
    h.notify("s", Trigger::Schedule, Request::FireDue).unwrap();
    wait("the raced request handled", || {
        c(&h, "s", Counter::ActivationsSchedule) == 2 && common::settled(&h, "s")
    });
    assert_eq!(c(&h, "s", Counter::ScheduleFired), 1);
    // The next entry, due 500 ms later, fires at once: the directory was
    // already right, so the space was not held off.
    clock.set_ms(due + 500);
    wait("second wake", || {
        c(&h, "s", Counter::ScheduleDelivered) == 2
    });
    assert_eq!(c(&h, "s", Counter::LatenessLe10Ms), 2);
    assert_eq!(read(&h, "s", &piece, "count"), json!(2));
}

#[test]
fn the_next_due_time_survives_a_restart_and_downtime_coalesces_into_one_wake() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::default());
    let piece;
    let row;
    {
        let h = host(dir.path(), clock.clone());
        piece = deploy_parked(&h, &clock, "s");
        row = first_row(&h, "s");
        h.shutdown();
    } // the host goes away
      // Down for five periods: the due time is on disk, not in memory.
    clock.set_ms(row.declared_at_ms + 5 * 60 * MIN + 25 * MIN);
    let h = host(dir.path(), clock.clone());
    assert_eq!(h.boot().unwrap(), 1);
    wait("catch-up wake", || {
        c(&h, "s", Counter::ScheduleDelivered) == 1
    });
    parked(&h, "s");
    assert_eq!(c(&h, "s", Counter::ScheduleFired), 1, "one wake, not five");
    assert_eq!(c(&h, "s", Counter::ScheduleMissedCoalesced), 4);
    assert_eq!(read(&h, "s", &piece, "missed"), json!(4));
    let after = first_row(&h, "s");
    // Back on the grid: the next period is the sixth, due near declared + 6 h.
    assert_eq!(after.nominal_period, 6);
    let nominal6 = row.declared_at_ms + 6 * 60 * MIN;
    assert!(after.next_due_ms + 20 * MIN >= nominal6 && after.next_due_ms <= nominal6 + 20 * MIN);
    assert_eq!(c(&h, "s", Counter::BootDiscovered), 1);
}

#[test]
fn a_wake_computes_the_callbacks_inputs_but_never_the_display() {
    let (_dir, clock, h, piece) = parked_space();
    for i in 1..=100 {
        let due = h
            .store()
            .directory()
            .get("s")
            .unwrap()
            .unwrap()
            .next_wake_ms
            .unwrap();
        clock.set_ms(due.max(clock.now_ms()));
        wait("delivery", || c(&h, "s", Counter::ScheduleDelivered) == i);
        parked(&h, "s");
    }
    assert_eq!(c(&h, "s", Counter::ScheduleFired), 100);
    // `next` (the callback's input) ran once per wake; the [UI] lift never ran.
    assert_eq!(c(&h, "s", Counter::DerivationRuns), 100);
    assert_eq!(read(&h, "s", &piece, "count"), json!(100));
    assert_eq!(c(&h, "s", Counter::ActivationsSchedule), 100);
}

#[test]
fn with_scheduled_wakes_off_due_entries_are_counted_as_suppressed() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::default());
    let store = Store::open(StoreConfig::new(dir.path()), clock.clone(), Counters::new()).unwrap();
    let mut cfg = HostConfig {
        idle_park_ms: 10,
        ..HostConfig::default()
    };
    cfg.schedule.enabled = false;
    let h = Host::new(store, cfg);
    h.start_waker();
    let piece = deploy_parked(&h, &clock, "s");
    let due = h
        .store()
        .directory()
        .get("s")
        .unwrap()
        .unwrap()
        .next_wake_ms
        .unwrap();
    clock.set_ms(due);
    wait("suppression", || {
        c(&h, "s", Counter::ScheduleSuppressed) == 1
    });
    parked(&h, "s");
    assert_eq!(c(&h, "s", Counter::ScheduleFired), 0);
    assert_eq!(read(&h, "s", &piece, "count"), json!(0));
    let rows = h.store().open_space("s").unwrap().schedule(None).unwrap();
    assert_eq!(rows.len(), 1, "still indexed");
    assert!(rows[0].next_due_ms > due, "and on its grid");
}

/// A session attaching to a scheduled tenure (here one prepared ahead of
/// its wake) makes the tenure share its file: other connections get in
/// while the space stays active, and the wake still fires on time.
#[test]
fn a_session_attaching_to_a_scheduled_tenure_makes_it_share_its_file() {
    let (dir, clock, h, piece) = parked_space();
    let due = prepared(&h, &clock);
    assert_eq!(c(&h, "s", Counter::SpacesOpenedExclusive), 1);
    let _updates = common::attach(&h, "s", 1);
    wait("shared", || c(&h, "s", Counter::SpacesReopenedShared) == 1);
    // Another host's store opens the file at once, the space still active.
    let other = Store::open(StoreConfig::new(dir.path()), clock.clone(), Counters::new()).unwrap();
    let t = std::time::Instant::now();
    let mut s = other.open_space("s").unwrap();
    assert!(t.elapsed() < Duration::from_secs(2));
    assert_eq!(s.schedule(None).unwrap()[0].fired_count, 0);
    drop(s);
    assert_eq!(h.active_spaces(), vec!["s".to_string()]);
    clock.set_ms(due);
    wait("fire and deliver", || {
        c(&h, "s", Counter::ScheduleDelivered) == 1
    });
    assert_eq!(read(&h, "s", &piece, "count"), json!(1));
}

/// A wake event written first and then left undelivered by a crash, while
/// the directory still shows the wake due and no undelivered flag (the due
/// wake stands for it), is delivered after restart — even by a host with
/// scheduled wakes switched off: the due wake activates the space, and an
/// activation delivers what is undelivered.
#[test]
fn a_written_wake_left_by_a_crash_is_delivered_by_the_due_wake_even_with_wakes_off() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::default());
    let (piece, due) = {
        let h = host(dir.path(), clock.clone());
        let piece = deploy_parked(&h, &clock, "s");
        let due = first_row(&h, "s").next_due_ms;
        h.shutdown();
        (piece, due)
    };
    // The write-first transaction, as a space server runs it (later moves
    // of the directory deferred to the end of its turn), then the "crash":
    // the handle is never dropped, so nothing settles.
    clock.set_ms(due);
    let store = Store::open(StoreConfig::new(dir.path()), clock.clone(), Counters::new()).unwrap();
    let mut space = store.open_space("s").unwrap();
    space.defer_later_moves();
    let jitter = spacewake::schedule::Jitter::keyed([1; 32]);
    let fired = spacewake::schedule::fire::fire_due(&mut space, due, &jitter, true).unwrap();
    assert_eq!(fired.fired.len(), 1);
    assert!(space.has_undelivered().unwrap());
    std::mem::forget(space);
    let entry = store.directory().get("s").unwrap().unwrap();
    assert_eq!(entry.next_wake_ms, Some(due), "still due");
    assert!(!entry.undelivered, "covered by the due wake");

    let h = common::manual_host(dir.path(), clock.clone(), |c| c.schedule.enabled = false);
    h.boot().unwrap();
    assert_eq!(c(&h, "s", Counter::BootDiscovered), 1);
    wait("delivered", || c(&h, "s", Counter::ScheduleDelivered) == 1);
    assert_eq!(read(&h, "s", &piece, "count"), json!(1));
    assert_eq!(c(&h, "s", Counter::ScheduleFired), 0, "nothing fired again");
    // The read's session tenure parks after the idle time.
    common::park(&h, &clock, "s");
    let entry = h.store().directory().get("s").unwrap().unwrap();
    assert!(!entry.undelivered);
    assert!(entry.next_wake_ms.unwrap() > due, "the directory moved on");
}

const CALENDAR: &str = r#"
import { pattern, handler, SCHEDULE, Cell, Default } from "commonfabric";

const note = handler<{ nominalTime: number; missedPeriods: number; timeZone: string },
                     { seen: Cell<number[]>; missed: Cell<number> }>((ev, { seen, missed }) => {
  seen.push(ev.nominalTime);
  missed.set(missed.get() + ev.missedPeriods);
});

export default pattern<{ seen: Default<number[], []>; missed: Default<number, 0> }>(
  ({ seen, missed }) => ({
    [SCHEDULE]: [{ cron: "30 7 * * *", timeZone: "Europe/Berlin", callback: note({ seen, missed }) }],
    seen, missed,
  }),
);
"#;

#[test]
fn a_calendar_entry_fires_at_its_local_time_and_catches_up_once_after_downtime() {
    let dir = tempfile::tempdir().unwrap();
    // 2026-01-01T00:00Z (01:00 in Berlin): the first 07:30 is 06:30Z today.
    let clock = Arc::new(ManualClock::default());
    let first = 1_767_249_000_000;
    let day = 24 * 60 * MIN;
    let piece;
    {
        let h = host(dir.path(), clock.clone());
        piece = common::deploy_source(&h, "s", CALENDAR);
        common::park(&h, &clock, "s");
        let row = first_row(&h, "s");
        assert_eq!(row.interval_minutes, 0);
        assert!(row
            .cadence
            .as_deref()
            .is_some_and(|c| c.contains("Europe/Berlin")));
        // Forward-only jitter: never before 07:30, at most the window after.
        assert!(
            row.next_due_ms >= first && row.next_due_ms <= first + 20 * MIN,
            "{}",
            row.next_due_ms
        );
        assert_eq!(directory_wake(&h, "s"), Some(row.next_due_ms));
        let view = spacewake::operator::EntryView::new("s", row.clone());
        assert_eq!(view.cron.as_deref(), Some("30 7 * * *"));
        assert!(
            view.next_due_local
                .as_deref()
                .is_some_and(|t| t.starts_with("2026-01-01 07:") && t.ends_with("CET")),
            "{:?}",
            view.next_due_local
        );
        clock.set_ms(row.next_due_ms);
        wait("the first calendar wake", || {
            c(&h, "s", Counter::ScheduleDelivered) == 1
        });
        parked(&h, "s");
        assert_eq!(read(&h, "s", &piece, "seen"), json!([first]));
        let after = first_row(&h, "s");
        assert!(after.next_due_ms >= first + day && after.next_due_ms <= first + day + 20 * MIN);
        h.shutdown();
    }
    // Down until 08:30 on the 4th: the 2nd, 3rd and 4th coalesce into one
    // wake, two of them counted as missed; the 5th is next.
    clock.set_ms(first + 3 * day + 60 * MIN);
    let h = host(dir.path(), clock.clone());
    assert_eq!(h.boot().unwrap(), 1);
    wait("the catch-up wake", || {
        c(&h, "s", Counter::ScheduleDelivered) == 1
    });
    parked(&h, "s");
    assert_eq!(c(&h, "s", Counter::ScheduleMissedCoalesced), 2);
    assert_eq!(read(&h, "s", &piece, "missed"), json!(2));
    let after = first_row(&h, "s");
    assert!(
        after.next_due_ms >= first + 4 * day && after.next_due_ms <= first + 4 * day + 20 * MIN
    );
}

const ONE_OFF: &str = r#"
import { pattern, handler, SCHEDULE, Cell, Default } from "commonfabric";

const setNext = handler<{ at: number | string | null }, { next: Cell<number | string | null> }>(
  (ev, { next }) => next.set(ev.at),
);
const note = handler<{ note: string }, { notes: Cell<string[]> }>(
  (ev, { notes }) => notes.push(ev.note),
);
const ring = handler<{ setFor: number; fireTime: number }, { fires: Cell<number[]> }>(
  (ev, { fires }) => fires.push(ev.setFor),
);

export default pattern<{ next: Default<number | string | null, null>; fires: Default<number[], []>; notes: Default<string[], []> }>(
  ({ next, fires, notes }) => ({
    [SCHEDULE]: [{ at: next, callback: ring({ fires }) }],
    next, fires, notes,
    setNext: setNext({ next }),
    note: note({ notes }),
  }),
);
"#;

/// Sends `payload` to the stream at `path` of `piece` in space `s`.
fn send_to(h: &Host, piece: &str, path: &str, payload: serde_json::Value) {
    h.ask_blocking(
        "s",
        Trigger::Session,
        spacewake::host::SendEvent {
            author: spacewake::store::Author::principal("did:key:owner"),
            piece: piece.to_string(),
            path: spacewake::store::path::parse_dotted(path),
            event_id: None,
            payload,
        },
    )
    .unwrap();
}

#[test]
fn a_one_off_time_set_by_a_handler_wakes_the_parked_space_once_and_follows_its_field() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::default());
    let h = host(dir.path(), clock.clone());
    let piece = common::deploy_source(&h, "s", ONE_OFF);
    let t0 = clock.now_ms();
    // Declared with an empty field: indexed, but nothing to wake for.
    let row = first_row(&h, "s");
    assert_eq!(row.interval_minutes, 0);
    assert_eq!(row.next_wake_ms(), None);
    let view = spacewake::operator::EntryView::new("s", row);
    assert_eq!(
        view.at.as_deref(),
        Some(format!("{piece}/argument.next").as_str())
    );
    assert_eq!(view.set_for_ms, None);

    // A handler sets the time; the commit that wrote it moved the wake.
    let first = t0 + 90 * MIN;
    send_to(&h, &piece, "setNext", json!({ "at": first }));
    wait("armed", || c(&h, "s", Counter::ScheduleOneOffArmed) == 1);
    assert_eq!(first_row(&h, "s").next_due_ms, first);
    // Another field of the same document changes: nothing moves.
    send_to(&h, &piece, "note", json!({ "note": "hello" }));
    common::park(&h, &clock, "s");
    assert_eq!(c(&h, "s", Counter::ScheduleOneOffArmed), 1);
    assert_eq!(directory_wake(&h, "s"), Some(first));

    // Moved earlier before it fires (an ISO time with an offset): the wake
    // moves with it, and the old time wakes nothing.
    let moved = (t0 + 30 * MIN) / 1000 * 1000; // whole seconds, as the ISO text says
    send_to(
        &h,
        &piece,
        "setNext",
        json!({ "at": spacewake::scenario::utc_text(moved) }),
    );
    wait("moved", || c(&h, "s", Counter::ScheduleOneOffArmed) == 2);
    common::park(&h, &clock, "s");
    assert_eq!(directory_wake(&h, "s"), Some(moved));
    clock.set_ms(moved);
    wait("the one-off wake", || {
        c(&h, "s", Counter::ScheduleDelivered) == 1
    });
    parked(&h, "s");
    assert_eq!(read(&h, "s", &piece, "fires"), json!([moved]));
    assert_eq!(c(&h, "s", Counter::ActivationsSchedule), 1);
    let row = first_row(&h, "s");
    assert_eq!(
        row.next_wake_ms(),
        None,
        "fired once, it waits for a new time"
    );
    assert_eq!(row.fired_count, 1);
    common::jump_and_let_the_waker_look(&h, &clock, first + MIN);
    assert_eq!(
        c(&h, "s", Counter::ScheduleFired),
        1,
        "nothing at the old time"
    );

    // Set again, then cleared before it falls due: disarmed.
    let again = clock.now_ms() + 60 * MIN;
    send_to(&h, &piece, "setNext", json!({ "at": again }));
    send_to(&h, &piece, "setNext", json!({ "at": null }));
    wait("cleared", || {
        c(&h, "s", Counter::ScheduleOneOffCleared) == 1
    });
    common::park(&h, &clock, "s");
    assert_eq!(first_row(&h, "s").next_wake_ms(), None);
    common::jump_and_let_the_waker_look(&h, &clock, again + MIN);
    assert_eq!(c(&h, "s", Counter::ScheduleFired), 1);

    // Something that is not a time disarms it too, counted.
    // (Two events in one wave commit once: only the last value counts, so
    // the time is seen armed before the next event.)
    let armed = c(&h, "s", Counter::ScheduleOneOffArmed);
    send_to(&h, &piece, "setNext", json!({ "at": again + 60 * MIN }));
    wait("armed again", || {
        c(&h, "s", Counter::ScheduleOneOffArmed) == armed + 1
    });
    send_to(&h, &piece, "setNext", json!({ "at": "next friday" }));
    wait("unreadable", || {
        c(&h, "s", Counter::ScheduleOneOffUnreadable) == 1
    });
    h.shutdown();
}

#[test]
fn a_one_off_time_past_due_after_downtime_fires_once_counted_as_caught_up() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::default());
    let piece;
    let due;
    {
        let h = host(dir.path(), clock.clone());
        piece = common::deploy_source(&h, "s", ONE_OFF);
        due = clock.now_ms() + 120 * MIN;
        send_to(&h, &piece, "setNext", json!({ "at": due }));
        common::park(&h, &clock, "s");
        h.shutdown();
    }
    // Down past its time: boot finds it due and fires it once.
    clock.set_ms(due + 5 * 60 * MIN);
    let h = host(dir.path(), clock.clone());
    assert_eq!(h.boot().unwrap(), 1);
    wait("the caught-up wake", || {
        c(&h, "s", Counter::ScheduleDelivered) == 1
    });
    parked(&h, "s");
    assert_eq!(read(&h, "s", &piece, "fires"), json!([due]));
    assert_eq!(c(&h, "s", Counter::ScheduleOneOffCaughtUp), 1);
    assert_eq!(c(&h, "s", Counter::ScheduleMissedCoalesced), 0);
    common::jump_and_let_the_waker_look(&h, &clock, due + 10 * 60 * MIN);
    assert_eq!(c(&h, "s", Counter::ScheduleFired), 1);
    // A time set two hours in the past fires at once, and is not late.
    let past = clock.now_ms() - 120 * MIN;
    send_to(&h, &piece, "setNext", json!({ "at": past }));
    wait("the past time's wake", || {
        c(&h, "s", Counter::ScheduleDelivered) == 2
    });
    assert_eq!(read(&h, "s", &piece, "fires"), json!([due, past]));
    assert_eq!(
        c(&h, "s", Counter::ScheduleOneOffCaughtUp),
        1,
        "not a catch-up"
    );
}

/// The waker dispatches at most `on_time_scheduled` activations while wakes
/// are on time and up to `max_scheduled` once a due wake has waited past
/// its threshold; passes of the second kind are counted.
#[test]
fn a_wake_on_time_leaves_the_waker_calm_and_late_wakes_make_it_catch_up() {
    let (_dir, clock, h, _piece) = parked_space();
    let catching_up = |h: &Host| h.counters().host().get(Counter::WakerCatchingUp);
    let due = first_row(&h, "s").next_due_ms;
    clock.set_ms(due);
    wait("on-time wake", || {
        c(&h, "s", Counter::ScheduleDelivered) == 1
    });
    parked(&h, "s");
    assert_eq!(catching_up(&h), 0, "a wake fired at its due time");
    // Three spaces due minutes ago (a host back from downtime).
    deploy_parked(&h, &clock, "t");
    deploy_parked(&h, &clock, "u");
    let last = ["s", "t", "u"]
        .iter()
        .map(|s| first_row(&h, s).next_due_ms)
        .max()
        .unwrap();
    clock.set_ms(last + 5 * MIN);
    wait("late wakes", || {
        ["t", "u"]
            .iter()
            .all(|s| c(&h, s, Counter::ScheduleDelivered) == 1)
            && c(&h, "s", Counter::ScheduleDelivered) == 2
    });
    assert!(catching_up(&h) >= 1, "late wakes lift the on-time cap");
}

#[test]
fn a_herd_of_wakes_runs_on_no_more_threads_and_engines_than_its_cap() {
    // A tenure frees its slot once its thread is idle again, so the next
    // wake takes that thread and its engine image rather than a new one.
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::default());
    let cap = 3;
    let h = common::manual_host(dir.path(), clock.clone(), |c| {
        c.schedule.max_scheduled = cap;
        c.schedule.on_time_scheduled = cap;
    });
    let spaces: Vec<String> = (0..24).map(|i| format!("herd{i}")).collect();
    for s in &spaces {
        deploy_parked(&h, &clock, s);
    }
    let host = |k| h.counters().host().get(k);
    let threads0 = host(Counter::ServerThreadsStarted);
    let built0 = host(Counter::EngineSandboxesBuilt);
    let last = spaces
        .iter()
        .map(|s| first_row(&h, s).next_due_ms)
        .max()
        .unwrap();
    clock.set_ms(last + MIN);
    wait("the herd delivered", || {
        spaces
            .iter()
            .all(|s| c(&h, s, Counter::ScheduleDelivered) == 1)
    });
    let threads = host(Counter::ServerThreadsStarted) - threads0;
    let built = host(Counter::EngineSandboxesBuilt) - built0;
    assert!(
        threads <= cap as i64,
        "{threads} threads started at cap {cap}"
    );
    assert!(built <= cap as i64, "{built} engines built at cap {cap}");
    assert_eq!(host(Counter::ScheduleFired), 24);
}
