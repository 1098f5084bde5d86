//! Calendar cadences: a five-field cron expression evaluated in an IANA
//! time zone. Pure: time comes in as arguments; the zone database is
//! compiled in (`chrono-tz`), the expression is read by `croner`.
//!
//! # Occurrences
//! An occurrence is a local wall-clock minute the expression matches, on a
//! local date it matches, turned into an instant in the zone:
//! - a local time that does not exist (the hour a spring-forward day skips)
//!   fires at the first valid instant after it — the end of the gap;
//! - a local time that occurs twice (the hour a fall-back day repeats)
//!   fires once, at its first occurrence.
//!
//! Two matches that land on one instant (02:00 and 03:00 on a spring-forward
//! day, for an hourly expression) are one occurrence. Occurrences are
//! numbered by their instant in whole minutes since the epoch (the `period`
//! of their wake id), so every occurrence has its own id.
//!
//! # The 60-minute floor
//! Two matches within one hour are less than 60 minutes apart, so an
//! accepted expression matches exactly one minute of the hour; hours are
//! then at least 60 minutes apart on the wall clock. A gap can still bring
//! two fires closer in real time (01:30 then 02:30→03:00 on a spring-forward
//! day): the firing keeps such a fire at least 60 minutes after the last
//! one, where it coalesces with the next occurrence ([`after_fire`]).
//!
//! # Jitter
//! Forward only, so a 07:30 digest never fires before 07:30, and bounded by
//! the smaller of the jitter window and a tenth of the shortest gap the
//! hour field allows ([`CronSpec::jitter_bound_ms`]).

use super::grid::{minute_ms, Advance};
use super::jitter::Jitter;
use chrono::{Datelike, NaiveDate, NaiveDateTime, NaiveTime, TimeZone};
use chrono_tz::Tz;
use croner::Cron;

/// The zone an entry without `timeZone` is evaluated in.
pub const DEFAULT_ZONE: &str = "UTC";

/// The least real time between two fires of one entry, in minutes.
pub const FLOOR_MINUTES: u64 = 60;

/// How far ahead an occurrence is searched for, in days: eight years holds
/// every weekday on every date, leap days included.
const SEARCH_DAYS: i64 = 8 * 366;

/// Missed occurrences counted one by one after downtime; beyond this the
/// count stops (the fire still coalesces them all).
const MAX_COUNTED_MISSES: u64 = 10_000;

/// Why an expression or zone is refused, with a stable code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronProblem {
    pub code: &'static str,
    pub message: String,
}

impl CronProblem {
    fn new(code: &'static str, message: impl Into<String>) -> Self {
        CronProblem {
            code,
            message: message.into(),
        }
    }
}

/// The stable codes of [`CronProblem`] (also the compiler's).
pub mod codes {
    pub const CRON_INVALID: &str = "SCHEDULE_CRON_INVALID";
    pub const CRON_TOO_FREQUENT: &str = "SCHEDULE_CRON_TOO_FREQUENT";
    pub const CRON_NEVER_FIRES: &str = "SCHEDULE_CRON_NEVER_FIRES";
    pub const TIMEZONE_UNKNOWN: &str = "SCHEDULE_TIMEZONE_UNKNOWN";
}

/// A validated cron entry: its expression, zone, and the matching sets.
#[derive(Debug, Clone)]
pub struct CronSpec {
    expr: String,
    zone: Tz,
    cron: Cron,
    /// The one minute of the hour it matches.
    minute: u32,
    /// The hours it matches, ascending.
    hours: Vec<u32>,
}

impl PartialEq for CronSpec {
    fn eq(&self, other: &Self) -> bool {
        self.expr == other.expr && self.zone == other.zone
    }
}

impl CronSpec {
    /// Reads and checks an expression in a zone (`None`: UTC).
    pub fn parse(expr: &str, zone: Option<&str>) -> Result<Self, CronProblem> {
        let zone_name = zone.unwrap_or(DEFAULT_ZONE);
        let zone: Tz = zone_name.parse().map_err(|_| {
            let hint = Tz::from_str_insensitive(zone_name)
                .map(|z| format!("; did you mean \"{}\"?", z.name()))
                .unwrap_or_default();
            CronProblem::new(
                codes::TIMEZONE_UNKNOWN,
                format!(
                    "\"{zone_name}\" is not an IANA time zone (such as \"Europe/Berlin\" or \
                     \"UTC\"){hint}"
                ),
            )
        })?;
        let trimmed = expr.trim();
        if !trimmed.starts_with('@') && trimmed.split_whitespace().count() != 5 {
            return Err(CronProblem::new(
                codes::CRON_INVALID,
                format!(
                    "\"{expr}\" is not a five-field cron expression (minute hour day-of-month \
                     month day-of-week, such as \"30 7 * * 1-5\")"
                ),
            ));
        }
        let cron = Cron::new(trimmed).parse().map_err(|e| {
            CronProblem::new(
                codes::CRON_INVALID,
                format!("\"{expr}\" is not a valid cron expression: {e}"),
            )
        })?;
        let p = &cron.pattern;
        let minutes: Vec<u32> = (0..60)
            .filter(|m| p.minute_match(*m).unwrap_or(false))
            .collect();
        let hours: Vec<u32> = (0..24)
            .filter(|h| p.hour_match(*h).unwrap_or(false))
            .collect();
        if minutes.len() != 1 {
            let gap = shortest_cyclic_gap(&minutes, 60);
            return Err(CronProblem::new(
                codes::CRON_TOO_FREQUENT,
                format!(
                    "\"{expr}\" can fire {gap} minute{} apart; scheduled wakes are at least \
                     {FLOOR_MINUTES} minutes apart, so name exactly one minute of the hour (such \
                     as \"0 * * * *\" for hourly)",
                    if gap == 1 { "" } else { "s" }
                ),
            ));
        }
        let spec = CronSpec {
            expr: expr.to_string(),
            zone,
            cron,
            minute: minutes[0],
            hours,
        };
        let epoch = NaiveDate::from_ymd_opt(2000, 1, 1).expect("a valid date");
        if spec.hours.is_empty() || spec.next_local_from(epoch, None).is_none() {
            return Err(CronProblem::new(
                codes::CRON_NEVER_FIRES,
                format!("\"{expr}\" matches no date (such as the 30th of February)"),
            ));
        }
        Ok(spec)
    }

    pub fn expr(&self) -> &str {
        &self.expr
    }

    pub fn zone(&self) -> &str {
        self.zone.name()
    }

    /// The shortest wall-clock gap the hour field allows between two fires
    /// (a lower bound of the real shortest gap, since days may not match
    /// back to back), in milliseconds.
    pub fn shortest_gap_ms(&self) -> u64 {
        let hours = if self.hours.len() == 1 {
            24
        } else {
            shortest_cyclic_gap(&self.hours, 24)
        };
        u64::from(hours) * 60 * minute_ms()
    }

    /// The most a fire is moved forward by jitter: the smaller of the
    /// window and a tenth of the shortest gap.
    pub fn jitter_bound_ms(&self, window_ms: u64) -> u64 {
        window_ms.min(self.shortest_gap_ms() / 10)
    }

    /// The first occurrence strictly after `after_ms` (epoch ms), as an
    /// instant in epoch ms; `None` only past the end of the calendar.
    pub fn next_after(&self, after_ms: u64) -> Option<u64> {
        let after = chrono::DateTime::from_timestamp_millis(i64::try_from(after_ms).ok()?)?;
        let local = after.with_timezone(&self.zone).naive_local();
        // Start a day early: a gap or fold can put an occurrence of the
        // previous local date after `after`.
        let from = local.date().pred_opt().unwrap_or(local.date());
        self.next_local_from(from, Some(after_ms))
    }

    /// The first occurrence on or after local date `from` whose instant is
    /// after `after_ms` (any, when `None`).
    fn next_local_from(&self, from: NaiveDate, after_ms: Option<u64>) -> Option<u64> {
        let mut day = from;
        for _ in 0..SEARCH_DAYS {
            if self.date_matches(day) {
                for &h in &self.hours {
                    let t = NaiveTime::from_hms_opt(h, self.minute, 0)?;
                    let instant = self.resolve(day.and_time(t))?;
                    if after_ms.is_none_or(|a| instant > a) {
                        return Some(instant);
                    }
                }
            }
            day = day.succ_opt()?;
        }
        None
    }

    fn date_matches(&self, d: NaiveDate) -> bool {
        let p = &self.cron.pattern;
        p.month_match(d.month()).unwrap_or(false)
            && p.day_match(d.year(), d.month(), d.day()).unwrap_or(false)
    }

    /// A local wall-clock time as an instant in the zone: its first
    /// occurrence when it occurs twice, the end of the gap when it does not
    /// occur at all.
    fn resolve(&self, local: NaiveDateTime) -> Option<u64> {
        let mut t = local;
        // Gaps last at most a few hours; step to the first valid minute.
        for _ in 0..=(4 * 60) {
            if let Some(dt) = self.zone.from_local_datetime(&t).earliest() {
                return u64::try_from(dt.timestamp_millis()).ok();
            }
            t = t.checked_add_signed(chrono::Duration::minutes(1))?;
        }
        None
    }

    /// The occurrence's number: its instant in whole minutes since the epoch.
    pub fn period_of(instant_ms: u64) -> u64 {
        instant_ms / minute_ms()
    }

    /// The instant of occurrence number `period`.
    pub fn nominal_ms(period: u64) -> u64 {
        period.saturating_mul(minute_ms())
    }

    /// The local wall-clock text of an instant in this zone, for operators.
    pub fn local_text(&self, instant_ms: u64) -> String {
        i64::try_from(instant_ms)
            .ok()
            .and_then(chrono::DateTime::from_timestamp_millis)
            .map(|t| {
                t.with_timezone(&self.zone)
                    .format("%Y-%m-%d %H:%M %Z")
                    .to_string()
            })
            .unwrap_or_default()
    }
}

/// The smallest distance between consecutive members of a sorted set on a
/// circle of `modulus` (the set's own length when it has one member).
fn shortest_cyclic_gap(sorted: &[u32], modulus: u32) -> u32 {
    match sorted {
        [] => modulus,
        [_] => modulus,
        _ => {
            let inner = sorted
                .windows(2)
                .map(|w| w[1] - w[0])
                .min()
                .unwrap_or(modulus);
            let wrap = sorted[0] + modulus - sorted[sorted.len() - 1];
            inner.min(wrap)
        }
    }
}

/// The forward offset of one occurrence: the entry's ±window offset mapped
/// onto `[0, bound]`, so keyed and random modes keep their spread.
fn forward_offset_ms(
    spec: &CronSpec,
    key: (&str, &str, u32),
    period: u64,
    jitter: &Jitter,
    entropy: &mut impl FnMut() -> u64,
) -> u64 {
    let w = jitter.window_ms();
    let bound = spec.jitter_bound_ms(w);
    if w == 0 || bound == 0 {
        return 0;
    }
    let offset = jitter.offset_ms(key.0, key.1, key.2, period, entropy);
    let shifted = u128::from(offset.saturating_add(w as i64).max(0) as u64);
    (shifted * u128::from(bound) / u128::from(2 * w)) as u64
}

/// The due time of the occurrence at `nominal_ms`.
pub fn due_ms(
    spec: &CronSpec,
    key: (&str, &str, u32),
    nominal_ms: u64,
    jitter: &Jitter,
    entropy: &mut impl FnMut() -> u64,
) -> u64 {
    let period = CronSpec::period_of(nominal_ms);
    nominal_ms.saturating_add(forward_offset_ms(spec, key, period, jitter, entropy))
}

/// The first occurrence of a newly declared entry: the first after its
/// declaration. `(period, due)`.
pub fn first_due(
    spec: &CronSpec,
    key: (&str, &str, u32),
    declared_at_ms: u64,
    jitter: &Jitter,
    entropy: &mut impl FnMut() -> u64,
) -> (u64, u64) {
    match spec.next_after(declared_at_ms) {
        Some(n) => (
            CronSpec::period_of(n),
            due_ms(spec, key, n, jitter, entropy),
        ),
        None => (u64::MAX, u64::MAX),
    }
}

/// Where a cron entry goes after firing at `fired_at_ms`, seen from
/// `now_ms`: the next occurrence whose due time is after now (the ones
/// already due coalesce into this fire and are counted), held at least
/// [`FLOOR_MINUTES`] after this fire.
pub fn after_fire(
    spec: &CronSpec,
    key: (&str, &str, u32),
    fired_period: u64,
    fired_at_ms: u64,
    now_ms: u64,
    jitter: &Jitter,
    entropy: &mut impl FnMut() -> u64,
) -> Advance {
    let now_ms = now_ms.max(fired_at_ms);
    let floor_ms = fired_at_ms.saturating_add(FLOOR_MINUTES * minute_ms());
    let mut missed = 0u64;
    let mut nominal = CronSpec::nominal_ms(fired_period);
    loop {
        let Some(next) = spec.next_after(nominal) else {
            return Advance {
                next_period: u64::MAX,
                next_due_ms: u64::MAX,
                missed_periods: missed,
            };
        };
        let due = due_ms(spec, key, next, jitter, entropy);
        // A long downtime: skip straight to the present, counting no more.
        if due <= now_ms && missed >= MAX_COUNTED_MISSES {
            nominal = now_ms;
            continue;
        }
        if due > now_ms && due >= floor_ms {
            return Advance {
                next_period: CronSpec::period_of(next),
                next_due_ms: due,
                missed_periods: missed,
            };
        }
        if due > now_ms {
            // Closer than the floor (a gap moved it): it waits for the floor.
            if spec
                .next_after(next)
                .is_some_and(|after| due_ms(spec, key, after, jitter, entropy) <= floor_ms)
            {
                missed += 1;
                nominal = next;
                continue;
            }
            return Advance {
                next_period: CronSpec::period_of(next),
                next_due_ms: floor_ms,
                missed_periods: missed,
            };
        }
        missed += 1;
        nominal = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{NaiveDate, TimeZone};

    const KEY: (&str, &str, u32) = ("s", "pc-1", 0);

    fn never() -> u64 {
        panic!("keyed mode must not draw entropy")
    }

    fn at(zone: &str, y: i32, mo: u32, d: u32, h: u32, mi: u32) -> u64 {
        let tz: Tz = zone.parse().unwrap();
        tz.from_local_datetime(
            &NaiveDate::from_ymd_opt(y, mo, d)
                .unwrap()
                .and_hms_opt(h, mi, 0)
                .unwrap(),
        )
        .earliest()
        .unwrap()
        .timestamp_millis() as u64
    }

    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> u64 {
        at("UTC", y, mo, d, h, mi)
    }

    /// The next `n` occurrences after `from`, as UTC instants.
    fn series(spec: &CronSpec, from: u64, n: usize) -> Vec<u64> {
        let mut out = Vec::new();
        let mut t = from;
        for _ in 0..n {
            t = spec.next_after(t).unwrap();
            out.push(t);
        }
        out
    }

    #[test]
    fn a_weekday_digest_fires_at_0730_berlin_time_monday_to_friday() {
        let s = CronSpec::parse("30 7 * * 1-5", Some("Europe/Berlin")).unwrap();
        // Friday 2027-01-08 08:00 Berlin: next is Monday 07:30 (06:30 UTC).
        let got = series(&s, at("Europe/Berlin", 2027, 1, 8, 8, 0), 2);
        assert_eq!(got, [utc(2027, 1, 11, 6, 30), utc(2027, 1, 12, 6, 30)]);
        // In summer Berlin is UTC+2.
        let got = s.next_after(at("Europe/Berlin", 2027, 7, 5, 0, 0)).unwrap();
        assert_eq!(got, utc(2027, 7, 5, 5, 30));
        assert_eq!(s.local_text(got), "2027-07-05 07:30 CEST");
    }

    #[test]
    fn names_lists_ranges_and_steps_are_read() {
        let s = CronSpec::parse("0 */6 1,15 jan-mar mon", None).unwrap();
        // Vixie semantics: day of month OR day of week when both are set.
        let got = series(&s, utc(2027, 1, 1, 1, 0), 3);
        assert_eq!(
            got,
            [
                utc(2027, 1, 1, 6, 0),
                utc(2027, 1, 1, 12, 0),
                utc(2027, 1, 1, 18, 0)
            ]
        );
        assert_eq!(s.shortest_gap_ms(), 6 * 60 * 60_000);
        assert_eq!(
            CronSpec::parse("@daily", None).unwrap().shortest_gap_ms(),
            24 * 60 * 60_000
        );
    }

    #[test]
    fn the_sixty_minute_floor_refuses_two_fires_in_an_hour() {
        for (expr, gap) in [("*/5 * * * *", 5), ("0,30 * * * *", 30), ("* 7 * * *", 1)] {
            let e = CronSpec::parse(expr, None).unwrap_err();
            assert_eq!(e.code, codes::CRON_TOO_FREQUENT, "{expr}");
            assert!(
                e.message.contains(&format!("{gap} minute")),
                "{}",
                e.message
            );
        }
        assert!(CronSpec::parse("0 * * * *", None).is_ok());
        assert!(CronSpec::parse("59 0,1 * * *", None).is_ok());
    }

    #[test]
    fn malformed_expressions_unknown_zones_and_impossible_dates_are_refused() {
        for expr in [
            "",
            "0 7 * *",
            "0 0 7 * * *",
            "61 * * * *",
            "0 25 * * *",
            "x * * * *",
        ] {
            assert_eq!(
                CronSpec::parse(expr, None).unwrap_err().code,
                codes::CRON_INVALID,
                "{expr:?}"
            );
        }
        let e = CronSpec::parse("0 7 * * *", Some("europe/berlin")).unwrap_err();
        assert_eq!(e.code, codes::TIMEZONE_UNKNOWN);
        assert!(
            e.message.contains("did you mean \"Europe/Berlin\""),
            "{}",
            e.message
        );
        assert_eq!(
            CronSpec::parse("0 7 * * *", Some("Mars/Olympus"))
                .unwrap_err()
                .code,
            codes::TIMEZONE_UNKNOWN
        );
        assert_eq!(
            CronSpec::parse("0 0 30 2 *", None).unwrap_err().code,
            codes::CRON_NEVER_FIRES
        );
        // A leap day is rare but real.
        let leap = CronSpec::parse("0 12 29 2 *", None).unwrap();
        assert_eq!(
            leap.next_after(utc(2027, 1, 1, 0, 0)),
            Some(utc(2028, 2, 29, 12, 0))
        );
    }

    #[test]
    fn spring_forward_moves_a_missing_time_to_the_end_of_the_gap() {
        // Berlin, 2027-03-28: 02:00 CET jumps to 03:00 CEST (01:00 UTC).
        let s = CronSpec::parse("30 2 * * *", Some("Europe/Berlin")).unwrap();
        let got = series(&s, at("Europe/Berlin", 2027, 3, 27, 12, 0), 3);
        assert_eq!(
            got,
            [
                utc(2027, 3, 28, 1, 0),
                utc(2027, 3, 29, 0, 30),
                utc(2027, 3, 30, 0, 30)
            ]
        );
        // Sydney, 2027-10-03: 02:00 AEST jumps to 03:00 AEDT (16:00 UTC the day before).
        let s = CronSpec::parse("30 2 * * *", Some("Australia/Sydney")).unwrap();
        let got = series(&s, at("Australia/Sydney", 2027, 10, 2, 12, 0), 2);
        assert_eq!(got, [utc(2027, 10, 2, 16, 0), utc(2027, 10, 3, 15, 30)]);
        // An hourly expression fires once at the end of the gap, not twice.
        let hourly = CronSpec::parse("0 * * * *", Some("Europe/Berlin")).unwrap();
        let got = series(&hourly, at("Europe/Berlin", 2027, 3, 28, 0, 30), 3);
        assert_eq!(
            got,
            [
                utc(2027, 3, 28, 0, 0),
                utc(2027, 3, 28, 1, 0),
                utc(2027, 3, 28, 2, 0)
            ]
        );
    }

    #[test]
    fn fall_back_fires_a_repeated_time_once_at_its_first_occurrence() {
        // Berlin, 2027-10-31: 03:00 CEST falls back to 02:00 CET; 02:30
        // happens at 00:30 UTC and again at 01:30 UTC.
        let s = CronSpec::parse("30 2 * * *", Some("Europe/Berlin")).unwrap();
        let got = series(&s, at("Europe/Berlin", 2027, 10, 30, 12, 0), 2);
        assert_eq!(got, [utc(2027, 10, 31, 0, 30), utc(2027, 11, 1, 1, 30)]);
        // Sydney, 2027-04-04: 03:00 AEDT falls back to 02:00 AEST.
        let s = CronSpec::parse("30 2 * * *", Some("Australia/Sydney")).unwrap();
        let got = series(&s, at("Australia/Sydney", 2027, 4, 3, 12, 0), 2);
        assert_eq!(got, [utc(2027, 4, 3, 15, 30), utc(2027, 4, 4, 16, 30)]);
        // Hourly across the fold: 02:00 CEST, then 03:00 CET — two hours of
        // real time, the repeated 02:00 CET never fires.
        let hourly = CronSpec::parse("0 * * * *", Some("Europe/Berlin")).unwrap();
        let got = series(&hourly, utc(2027, 10, 30, 23, 30), 3);
        assert_eq!(
            got,
            [
                utc(2027, 10, 31, 0, 0),
                utc(2027, 10, 31, 2, 0),
                utc(2027, 10, 31, 3, 0)
            ]
        );
    }

    #[test]
    fn jitter_is_forward_only_and_bounded_by_a_tenth_of_the_gap() {
        let j = Jitter::keyed([7; 32]);
        let daily = CronSpec::parse("30 7 * * *", Some("Europe/Berlin")).unwrap();
        let hourly = CronSpec::parse("0 * * * *", None).unwrap();
        assert_eq!(daily.jitter_bound_ms(j.window_ms()), j.window_ms());
        assert_eq!(hourly.jitter_bound_ms(j.window_ms()), 6 * 60_000);
        let mut spread = std::collections::HashSet::new();
        let mut t = utc(2027, 1, 1, 0, 0);
        for i in 0..500u32 {
            let key = ("s", "pc-1", i % 4);
            let n = daily.next_after(t).unwrap();
            let d = due_ms(&daily, key, n, &j, &mut never);
            assert!(
                d >= n && d - n <= j.window_ms(),
                "never early, never past the window"
            );
            spread.insert(d - n);
            let n2 = hourly.next_after(t).unwrap();
            let d2 = due_ms(&hourly, key, n2, &j, &mut never);
            assert!(d2 >= n2 && d2 - n2 <= 6 * 60_000);
            t = n;
        }
        assert!(spread.len() > 100, "keyed offsets spread: {}", spread.len());
        let none = Jitter::none();
        let n = daily.next_after(t).unwrap();
        assert_eq!(due_ms(&daily, KEY, n, &none, &mut never), n);
    }

    #[test]
    fn downtime_coalesces_into_one_fire_with_the_misses_counted() {
        let s = CronSpec::parse("30 7 * * 1-5", Some("Europe/Berlin")).unwrap();
        let j = Jitter::none();
        let first = s.next_after(at("Europe/Berlin", 2027, 1, 4, 0, 0)).unwrap();
        // Down from before Monday's fire until Thursday noon: one fire,
        // Tuesday..Thursday's three counted, next is Friday 07:30.
        let now = at("Europe/Berlin", 2027, 1, 7, 12, 0);
        let a = after_fire(
            &s,
            KEY,
            CronSpec::period_of(first),
            now,
            now,
            &j,
            &mut never,
        );
        assert_eq!(a.missed_periods, 3);
        assert_eq!(a.next_due_ms, at("Europe/Berlin", 2027, 1, 8, 7, 30));
        assert_eq!(CronSpec::nominal_ms(a.next_period), a.next_due_ms);
        // A year down costs a bounded walk.
        let hourly = CronSpec::parse("0 * * * *", None).unwrap();
        let start = utc(2027, 1, 1, 0, 0);
        let later = start + 500 * 24 * 3_600_000;
        let a = after_fire(
            &hourly,
            KEY,
            CronSpec::period_of(start),
            later,
            later,
            &j,
            &mut never,
        );
        assert_eq!(a.missed_periods, MAX_COUNTED_MISSES);
        assert_eq!(a.next_due_ms, later + 3_600_000);
    }

    #[test]
    fn a_gap_never_brings_two_fires_within_sixty_minutes() {
        // 01:30 CET, then 02:30 (missing) → 03:00 CEST only 30 minutes
        // later: held to 60 minutes, it coalesces with 03:30.
        let s = CronSpec::parse("30 * * * *", Some("Europe/Berlin")).unwrap();
        let j = Jitter::none();
        let fired = utc(2027, 3, 28, 0, 30);
        let a = after_fire(
            &s,
            KEY,
            CronSpec::period_of(fired),
            fired,
            fired,
            &j,
            &mut never,
        );
        assert_eq!(a.next_due_ms, utc(2027, 3, 28, 1, 30));
        assert_eq!(a.missed_periods, 1, "the moved 02:30 coalesced");
        let mut last = fired;
        let mut t = a;
        for _ in 0..48 {
            assert!(t.next_due_ms - last >= 60 * 60_000);
            last = t.next_due_ms;
            t = after_fire(&s, KEY, t.next_period, last, last, &j, &mut never);
        }
    }
}
