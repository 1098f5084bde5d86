//! Numbers and times for people: UTC timestamps, durations, relative
//! times and counts with thousands separators. Every command, log line and
//! page that shows a time or a count to a person formats it here, so they
//! all read the same way.
//!
//! Pure functions: nothing here reads a clock (callers pass `now`).

/// The proleptic Gregorian date `(year, month, day)` of a day counted from
/// 1970-01-01 (day 0). Howard Hinnant's `civil_from_days`: shift the epoch
/// to 0000-03-01 so leap days fall at the end of a year, split into
/// 400-year eras of 146,097 days, then read the year, the day of the year
/// and the month (March = 0) arithmetically. Exact for every `i64` day
/// whose year fits in `i64`.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468; // days from 0000-03-01 to 1970-01-01
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // day of era, [0, 146096]
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365], from March 1
    let mp = (5 * doy + 2) / 153; // month from March, [0, 11]
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `ms` since the Unix epoch as ISO-8601 UTC, to the second
/// (`2026-01-01T02:00:00Z`). Times past year 9999 (a saturated due time)
/// read `never`.
pub fn format_utc_ms(ms: u64) -> String {
    const DAY_MS: u64 = 86_400_000;
    let days = (ms / DAY_MS) as i64;
    let (y, m, d) = civil_from_days(days);
    if y > 9_999 {
        return "never".into();
    }
    let secs = (ms % DAY_MS) / 1_000;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3_600,
        secs / 60 % 60,
        secs % 60
    )
}

/// A duration for people: `850 ms`, `4.2 s`, `12 min 5 s`, `3 h 20 min`,
/// `2 d 4 h`.
pub fn human_duration_ms(ms: u64) -> String {
    const S: u64 = 1_000;
    const MIN: u64 = 60 * S;
    const H: u64 = 60 * MIN;
    const D: u64 = 24 * H;
    match ms {
        0..S => format!("{ms} ms"),
        S..MIN => format!("{}.{} s", ms / S, ms % S / 100),
        MIN..H => format!("{} min {} s", ms / MIN, ms % MIN / S),
        H..D => format!("{} h {} min", ms / H, ms % H / MIN),
        _ => format!("{} d {} h", thousands(ms / D), ms % D / H),
    }
}

/// `t` relative to `now`: `in 1 h 57 min`, `3 min 2 s ago`, `now`.
pub fn relative(t: u64, now: u64) -> String {
    if t.abs_diff(now) < 1_000 {
        "now".into()
    } else if t > now {
        format!("in {}", human_duration_ms(t - now))
    } else {
        format!("{} ago", human_duration_ms(now - t))
    }
}

/// A size for people: `812 B`, `14.2 KiB`, `4.0 MiB`, `1.5 GiB`.
pub fn bytes(n: u64) -> String {
    const K: u64 = 1 << 10;
    match n {
        0..K => format!("{n} B"),
        K..0x10_0000 => format!("{:.1} KiB", n as f64 / K as f64),
        0x10_0000..0x4000_0000 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        _ => format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64),
    }
}

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

pub fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 {
        one
    } else {
        many
    }
}

/// `n` and the noun for it: `1 space`, `1,200 spaces`.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", thousands(n), if n == 1 { one } else { many })
}

/// `s` cut to at most `max_chars` characters, saying how much was cut: for
/// error messages that pattern code controls, before they reach a log or a
/// client.
pub fn truncate_message(s: &str, max_chars: usize) -> String {
    match s.char_indices().nth(max_chars) {
        None => s.to_string(),
        Some((at, _)) => {
            let rest = s[at..].chars().count();
            format!(
                "{}… ({} cut)",
                &s[..at],
                count(rest as u64, "more character", "more characters")
            )
        }
    }
}
