//! Recurrence math for one schedule entry: the nominal grid, due times, and
//! what happens after a fire. Pure: time comes in as arguments, nothing here
//! reads a clock, the store or the OS.
//!
//! # The grid
//! An entry is anchored at the time its declaration was indexed
//! (`ScheduleRow::declared_at_ms`). Period `k >= 1` has
//!
//! ```text
//! interval_ms  = interval_minutes × 60,000 × backoff_factor
//! nominal_k    = anchor_ms + k × interval_ms
//! raw_due_k    = nominal_k + jitter(space, piece, entry, k)      (|jitter| <= w)
//! due_k        = max(raw_due_k, last_fire_ms + interval_ms − w)  (the min-gap rule)
//! ```
//!
//! The grid is anchored, never re-based on fire times: however late a fire
//! is, the next period's nominal time is still `anchor + k × interval`, so
//! there is no drift over any number of periods.
//!
//! # The min-gap rule
//! Two offsets can differ by up to `2w` (40 minutes by default), so the raw
//! grid alone could put two fires `interval − 2w` apart. The brief promises
//! consecutive fires of one entry are never closer than `interval − w`; the
//! floor `last_fire + interval − w` enforces it. When fires happen on time
//! the floor never pushes a due time past `nominal + w` (by induction:
//! `due_k <= nominal_k + w` gives `floor_{k+1} <= nominal_{k+1}`), so the
//! window guarantee holds too.
//!
//! # Catch-up after downtime
//! When a fire happens at `now` and further periods' raw due times are
//! already `<= now` (the host was down), they coalesce into this one fire:
//! `missed_periods` counts them, and the next period is the first on the
//! original grid whose raw due time is `> now`. Coalescing is judged on the
//! raw grid, not on the floored due times: the floor always lies after
//! `now` and would otherwise hide every missed period. The cost is O(1) in
//! the length of the downtime: periods whose nominal time is at least `w`
//! before `now` are skipped arithmetically, and only the few within `w` of
//! `now` have their jitter computed.
//!
//! # Back-off
//! `backoff_factor` scales the interval (issue 6). Nominal times are
//! `anchor + k × interval × factor`, so whoever changes the factor must
//! re-anchor the row (choose `declared_at_ms` so the current period's
//! nominal time does not jump) or accept a one-time jump of the grid.

use super::jitter::Jitter;
use crate::store::ScheduleRow;
use std::sync::atomic::{AtomicU64, Ordering};

/// One minute, in milliseconds (intervals are declared in minutes).
pub const MINUTE_MS: u64 = 60_000;

/// How long a declared minute lasts in this process: [`MINUTE_MS`], unless
/// a fleet test shortened it (see [`set_test_minute_ms`]).
static DECLARED_MINUTE_MS: AtomicU64 = AtomicU64::new(MINUTE_MS);

/// The length of a declared minute in this process, in milliseconds.
pub fn minute_ms() -> u64 {
    DECLARED_MINUTE_MS.load(Ordering::Relaxed)
}

/// Test-only (`serve --test-minute-ms`, hidden): makes a declared minute
/// last `ms`, so a test of several host processes sees hourly schedules
/// fire every few seconds of real time, where a manual clock cannot reach
/// across processes. Process-wide and set once at start; never in
/// production.
pub fn set_test_minute_ms(ms: u64) {
    DECLARED_MINUTE_MS.store(ms.max(1), Ordering::Relaxed);
}

/// The effective interval of an entry: declared minutes × back-off factor,
/// in milliseconds. At least 1 ms, so a corrupt row (interval 0) cannot
/// divide by zero or loop; saturating, so no input overflows.
pub fn interval_ms(interval_minutes: u32, backoff_factor: u32) -> u64 {
    u64::from(interval_minutes)
        .saturating_mul(minute_ms())
        .saturating_mul(u64::from(backoff_factor.max(1)))
        .max(1)
}

/// The least distance between two consecutive fires of one entry:
/// `interval − max(window, 20 min)`. The brief's guarantee is "never closer
/// than interval − 20 min"; with a narrower window (or none, as scenarios
/// run) the same 20 minutes of slack still let a late fire fall back onto
/// its grid instead of pushing every later fire back.
pub fn min_gap_ms(interval_ms: u64, window_ms: u64) -> u64 {
    interval_ms.saturating_sub(window_ms.max(super::jitter::DEFAULT_WINDOW_MS))
}

/// The fixed coordinates of one entry's grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grid<'a> {
    pub space: &'a str,
    pub piece: &'a str,
    pub entry: u32,
    pub anchor_ms: u64,
    /// The effective interval ([`interval_ms`]).
    pub interval_ms: u64,
}

impl<'a> Grid<'a> {
    /// The grid a stored row fires on.
    pub fn of_row(space: &'a str, row: &'a ScheduleRow) -> Self {
        Grid {
            space,
            piece: &row.piece,
            entry: row.entry,
            anchor_ms: row.declared_at_ms,
            interval_ms: interval_ms(row.interval_minutes, row.backoff_factor),
        }
    }

    /// `anchor + period × interval` (saturating).
    pub fn nominal_ms(&self, period: u64) -> u64 {
        self.anchor_ms
            .saturating_add(period.saturating_mul(self.interval_ms.max(1)))
    }

    /// The nominal time plus this period's jitter, before the min-gap floor.
    pub fn raw_due_ms(
        &self,
        period: u64,
        jitter: &Jitter,
        entropy: &mut impl FnMut() -> u64,
    ) -> u64 {
        let offset = jitter.offset_ms(self.space, self.piece, self.entry, period, entropy);
        self.nominal_ms(period).saturating_add_signed(offset)
    }
}

/// The first due time of a newly declared entry: period 1, one interval
/// (plus jitter) after the declaration. It is never earlier than
/// `declared_at_ms + interval − w`, as if the declaration were a fire (with
/// the default window and the 60-minute minimum interval this never binds).
pub fn first_due(
    space: &str,
    piece: &str,
    entry: u32,
    interval_minutes: u32,
    declared_at_ms: u64,
    jitter: &Jitter,
    entropy: &mut impl FnMut() -> u64,
) -> u64 {
    let grid = Grid {
        space,
        piece,
        entry,
        anchor_ms: declared_at_ms,
        interval_ms: interval_ms(interval_minutes, 1),
    };
    let floor = declared_at_ms.saturating_add(min_gap_ms(grid.interval_ms, jitter.window_ms()));
    grid.raw_due_ms(1, jitter, entropy).max(floor)
}

/// Where an entry goes after a fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advance {
    /// The next period to fire (always after the fired one).
    pub next_period: u64,
    /// Its due time: always `> now` and `>= fired_at + interval − w`.
    pub next_due_ms: u64,
    /// Periods after the fired one that were already due and coalesced
    /// into this fire (0 when the host kept up).
    pub missed_periods: u64,
}

impl Advance {
    /// The newest period this fire stood for (the fired period plus the
    /// ones it coalesced).
    pub fn last_covered_period(&self) -> u64 {
        self.next_period - 1
    }
}

/// Plans the entry after firing its current period (`row.nominal_period`)
/// at `fired_at_ms`, seen from `now_ms` (normally equal; `now_ms` is the
/// present that decides which periods already fell due, and is taken as at
/// least `fired_at_ms`). See the module docs for the catch-up policy.
///
/// A fire ahead of its due time consumes the current period: the next one
/// is `row.nominal_period + 1`, floored by the min-gap rule from the early
/// fire. (An operator's trigger does not come here: it fires an extra
/// occurrence beside the grid, `ops::trigger_now`.)
pub fn after_fire(
    space: &str,
    row: &ScheduleRow,
    fired_at_ms: u64,
    now_ms: u64,
    jitter: &Jitter,
    entropy: &mut impl FnMut() -> u64,
) -> Advance {
    let grid = Grid::of_row(space, row);
    let window_ms = jitter.window_ms();
    let now_ms = now_ms.max(fired_at_ms);
    let fired_period = row.nominal_period;

    // Every period whose nominal time is at least `w` before now is surely
    // due (`raw_due <= nominal + w <= now`): skip them without hashing.
    let mut next = fired_period.saturating_add(1);
    if let Some(since_anchor_ms) = now_ms
        .checked_sub(window_ms)
        .and_then(|t| t.checked_sub(grid.anchor_ms))
    {
        let surely_due = since_anchor_ms / grid.interval_ms;
        if surely_due >= next {
            next = surely_due.saturating_add(1);
        }
    }
    // The rest are within `w` of now: look at their actual due times. This
    // ends within `2w / interval + 1` steps, because once
    // `nominal - w > now` no offset can bring the due time back to `now`.
    let mut raw_due_ms = grid.raw_due_ms(next, jitter, entropy);
    while raw_due_ms <= now_ms && grid.nominal_ms(next) < u64::MAX {
        next += 1;
        raw_due_ms = grid.raw_due_ms(next, jitter, entropy);
    }

    let floor_ms = fired_at_ms.saturating_add(min_gap_ms(grid.interval_ms, window_ms));
    Advance {
        next_period: next,
        next_due_ms: raw_due_ms.max(floor_ms),
        missed_periods: next - fired_period - 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::jitter::{JitterMode, DEFAULT_WINDOW_MS};

    const T0: u64 = 1_767_225_600_000;
    const HOUR: u64 = 60 * MINUTE_MS;
    const W: u64 = DEFAULT_WINDOW_MS;

    fn never() -> u64 {
        panic!("keyed mode must not draw entropy")
    }

    fn row(interval_minutes: u32, declared_at_ms: u64, period: u64, due_ms: u64) -> ScheduleRow {
        let mut r = ScheduleRow::new(
            "pc-1",
            0,
            interval_minutes,
            "pc-1/s0",
            declared_at_ms,
            due_ms,
        );
        r.nominal_period = period;
        r
    }

    /// Fires `r` at `fired_at_ms` and moves it to the planned period.
    fn fire(
        r: &mut ScheduleRow,
        fired_at_ms: u64,
        j: &Jitter,
        e: &mut impl FnMut() -> u64,
    ) -> Advance {
        let a = after_fire("s", r, fired_at_ms, fired_at_ms, j, e);
        r.nominal_period = a.next_period;
        r.next_due_ms = a.next_due_ms;
        r.last_fired_ms = Some(fired_at_ms);
        a
    }

    /// Random-mode entropy that yields the offset sequence `+w, −w, +w, …`:
    /// the worst case for the min-gap rule.
    fn extremes(window_ms: u64) -> impl FnMut() -> u64 {
        let mut i = 0u64;
        move || {
            i += 1;
            // Two draws per offset: (hi, lo). hi = 0; lo = 2w (→ +w) or 0 (→ −w).
            match i % 4 {
                2 => 2 * window_ms,
                _ => 0,
            }
        }
    }

    #[test]
    fn without_jitter_the_grid_is_exact_on_a_manual_timeline() {
        let j = Jitter::none();
        let first = first_due("s", "pc-1", 0, 120, T0, &j, &mut never);
        assert_eq!(first, T0 + 2 * HOUR);
        let mut r = row(120, T0, 1, first);
        let a = fire(&mut r, first, &j, &mut never);
        assert_eq!(
            a,
            Advance {
                next_period: 2,
                next_due_ms: T0 + 4 * HOUR,
                missed_periods: 0
            }
        );
        // A fire 7 minutes late keeps the grid: period 3 is still due at
        // T0 + 6 h, since the min gap (interval − 20 min) allows it.
        let a = fire(&mut r, T0 + 4 * HOUR + 7 * MINUTE_MS, &j, &mut never);
        assert_eq!((a.next_period, a.next_due_ms), (3, T0 + 6 * HOUR));
        assert_eq!(Grid::of_row("s", &r).nominal_ms(3), T0 + 6 * HOUR);
    }

    #[test]
    fn the_first_due_time_is_one_interval_plus_the_period_one_offset() {
        let j = Jitter::keyed([3; 32]);
        let due = first_due("s", "pc-1", 2, 60, T0, &j, &mut never);
        let offset = j.offset_ms("s", "pc-1", 2, 1, &mut never);
        assert_eq!(due, (T0 + HOUR).saturating_add_signed(offset));
        assert!(due.abs_diff(T0 + HOUR) <= W);
    }

    #[test]
    fn keyed_due_times_follow_the_formula_exactly() {
        let j = Jitter::keyed([5; 32]);
        let mut r = row(90, T0, 1, first_due("s", "pc-1", 0, 90, T0, &j, &mut never));
        for k in 1..50u64 {
            let fired = r.next_due_ms;
            let a = fire(&mut r, fired, &j, &mut never);
            let raw = (T0 + (k + 1) * 90 * MINUTE_MS).saturating_add_signed(j.offset_ms(
                "s",
                "pc-1",
                0,
                k + 1,
                &mut never,
            ));
            assert_eq!(a.next_period, k + 1);
            assert_eq!(a.next_due_ms, raw.max(fired + 90 * MINUTE_MS - W));
        }
    }

    #[test]
    fn five_periods_down_fire_once_with_four_missed_and_resume_on_the_grid() {
        let j = Jitter::keyed([9; 32]);
        let first = first_due("s", "pc-1", 0, 60, T0, &j, &mut never);
        let mut r = row(60, T0, 1, first);
        // The host was down from before period 1 until 30 minutes after
        // period 5's nominal time: periods 1..=5 are all due (offsets are
        // within ±20 min), period 6 cannot be (its due is >= nominal − 20).
        let boot = T0 + 5 * HOUR + 30 * MINUTE_MS;
        let a = fire(&mut r, boot, &j, &mut never);
        assert_eq!(a.missed_periods, 4);
        assert_eq!(a.next_period, 6);
        assert_eq!(a.last_covered_period(), 5);
        assert!(a.next_due_ms > boot);
        assert!(
            a.next_due_ms >= boot + HOUR - W,
            "min gap after the catch-up fire"
        );
        // The following fires are back on the original grid, not re-based.
        for k in 7..20u64 {
            let due = r.next_due_ms;
            let a = fire(&mut r, due, &j, &mut never);
            assert_eq!(a.next_period, k);
            assert_eq!(a.missed_periods, 0);
            assert!(
                a.next_due_ms.abs_diff(T0 + k * HOUR) <= W,
                "period {k} off its grid"
            );
        }
    }

    #[test]
    fn a_year_of_downtime_coalesces_in_constant_time() {
        let j = Jitter::keyed([1; 32]);
        let r = row(60, T0, 1, T0 + HOUR);
        let now = T0 + 365 * 24 * HOUR + 30 * MINUTE_MS;
        let mut draws = 0;
        let mut counting = || {
            draws += 1;
            0
        };
        let rj = Jitter::new(JitterMode::Random, W, [0; 32]);
        let a = after_fire("s", &r, now, now, &rj, &mut counting);
        assert_eq!(a.next_period, 365 * 24 + 1);
        assert_eq!(a.missed_periods, 365 * 24 - 1);
        assert!(
            draws <= 6,
            "only periods near now are jittered, drew {draws}"
        );
        let a = after_fire("s", &r, now, now, &j, &mut never);
        assert_eq!(a.next_period, 365 * 24 + 1);
    }

    #[test]
    fn the_min_gap_rule_holds_against_the_worst_offsets() {
        // +w then −w: the raw grid would put fires interval − 2w apart.
        let j = Jitter::new(JitterMode::Random, W, [0; 32]);
        let mut e = extremes(W);
        let first = first_due("s", "pc-1", 0, 60, T0, &j, &mut e);
        assert_eq!(first, T0 + HOUR + W);
        let mut r = row(60, T0, 1, first);
        let mut last = first;
        for _ in 0..1_000 {
            let a = fire(&mut r, last, &j, &mut e);
            assert!(
                a.next_due_ms - last >= HOUR - W,
                "gap {}",
                a.next_due_ms - last
            );
            assert_eq!(a.missed_periods, 0);
            last = a.next_due_ms;
        }
    }

    #[test]
    fn the_min_gap_rule_holds_for_many_keys_periods_and_windows() {
        // Property-style: pseudo-random keys, pieces, windows up to half the
        // interval and more, intervals from 60 minutes; fires on time or a
        // little late. Every gap is at least interval − w, every period
        // advances by one, and nominal times stay on the grid.
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut rng = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for case in 0..200u32 {
            let key = [(case % 251) as u8; 32];
            let interval_minutes = 60 + (rng() % 600) as u32;
            let window_ms = rng() % (u64::from(interval_minutes) * MINUTE_MS);
            let mode = if case % 2 == 0 {
                JitterMode::Keyed
            } else {
                JitterMode::Random
            };
            let j = Jitter::new(mode, window_ms, key);
            let piece = format!("pc-{case}");
            let mut e = &mut rng;
            let first = first_due("s", &piece, case % 4, interval_minutes, T0, &j, &mut e);
            let mut r = ScheduleRow::new(&piece, case % 4, interval_minutes, "x", T0, first);
            let i_ms = u64::from(interval_minutes) * MINUTE_MS;
            let mut last_fire = None::<u64>;
            for _ in 0..200 {
                let lateness = if e() % 8 == 0 {
                    e() % (5 * MINUTE_MS)
                } else {
                    0
                };
                let fired = r.next_due_ms + lateness;
                if let Some(prev) = last_fire {
                    assert!(
                        fired - prev >= i_ms.saturating_sub(window_ms.max(W)),
                        "case {case}: gap too small"
                    );
                }
                let p = r.nominal_period;
                let a = after_fire("s", &r, fired, fired, &j, &mut e);
                assert!(a.next_due_ms > fired);
                assert!(a.next_period > p);
                r.nominal_period = a.next_period;
                r.next_due_ms = a.next_due_ms;
                last_fire = Some(fired);
            }
        }
    }

    #[test]
    fn a_thousand_on_time_periods_do_not_drift() {
        let j = Jitter::keyed([42; 32]);
        let first = first_due("s", "pc-1", 1, 60, T0, &j, &mut never);
        let mut r = row(60, T0, 1, first);
        r.entry = 1;
        for _ in 0..1_000 {
            let due = r.next_due_ms;
            fire(&mut r, due, &j, &mut never);
        }
        assert_eq!(r.nominal_period, 1_001);
        let grid = Grid::of_row("s", &r);
        assert_eq!(grid.nominal_ms(1_001), T0 + 1_001 * HOUR);
        assert!(r.next_due_ms.abs_diff(T0 + 1_001 * HOUR) <= W);
    }

    #[test]
    fn consistently_late_fires_do_not_drift_either() {
        let j = Jitter::keyed([42; 32]);
        let mut r = row(60, T0, 1, first_due("s", "pc-1", 0, 60, T0, &j, &mut never));
        for _ in 0..1_000 {
            let due = r.next_due_ms;
            let a = fire(&mut r, due + 3 * MINUTE_MS, &j, &mut never);
            assert_eq!(a.missed_periods, 0);
        }
        assert_eq!(r.nominal_period, 1_001);
        // The min-gap floor may hold a due time back, but never past the
        // lateness added to the window.
        assert!(r.next_due_ms.abs_diff(T0 + 1_001 * HOUR) <= W + 3 * MINUTE_MS);
    }

    #[test]
    fn an_early_fire_consumes_the_current_period() {
        let j = Jitter::none();
        let r = row(60, T0, 3, T0 + 3 * HOUR);
        let early = T0 + 2 * HOUR + 10 * MINUTE_MS;
        let a = after_fire("s", &r, early, early, &j, &mut never);
        assert_eq!(
            (a.next_period, a.next_due_ms, a.missed_periods),
            (4, T0 + 4 * HOUR, 0)
        );
    }

    #[test]
    fn the_backoff_factor_stretches_the_interval() {
        assert_eq!(interval_ms(60, 1), HOUR);
        assert_eq!(interval_ms(60, 4), 4 * HOUR);
        assert_eq!(interval_ms(60, 0), HOUR, "a factor of 0 is read as 1");
        assert_eq!(
            interval_ms(0, 1),
            1,
            "a corrupt interval cannot divide by zero"
        );
        let mut r = row(60, T0, 1, T0 + 2 * HOUR);
        r.backoff_factor = 2;
        let a = after_fire(
            "s",
            &r,
            T0 + 2 * HOUR,
            T0 + 2 * HOUR,
            &Jitter::none(),
            &mut never,
        );
        assert_eq!((a.next_period, a.next_due_ms), (2, T0 + 4 * HOUR));
    }

    #[test]
    fn extreme_inputs_saturate_instead_of_overflowing() {
        let j = Jitter::keyed([0; 32]);
        let r = row(44_640, u64::MAX - 10, 1, u64::MAX);
        let a = after_fire("s", &r, u64::MAX, u64::MAX, &j, &mut never);
        assert_eq!(a.next_due_ms, u64::MAX);
        let r = row(0, 0, 0, 0);
        let a = after_fire("s", &r, 5, 5, &j, &mut never);
        assert!(a.next_period > 0);
    }
}
