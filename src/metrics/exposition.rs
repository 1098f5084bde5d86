//! `GET /metrics`: the counters as Prometheus and OpenMetrics expect them.
//!
//! The health route's JSON shows every [`Counter`] under its block and
//! name, host-wide and per space (a contract of its own). `/metrics` shows
//! the same atomics by the conventions of the exporters people trust:
//! base units in names (`_seconds`, `_bytes`), `_total` on counters,
//! variants of one thing as a label of one family (`activations_total
//! {cause=…}`), real histograms, and host-wide series only, plus a few
//! per-space families for the top spaces by CPU, so the number of series
//! does not grow with the number of spaces.
//!
//! The catalogue ([`families`], [`space_families`], [`Hist`]) is the one
//! source of what `/metrics` emits; `spec/metrics.md` is checked against it
//! by a test, and the shipped dashboard and alert rules against that page.

use super::{Counter, Counters, Hist, Kind};
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;
use std::sync::{Arc, OnceLock};

/// The default of `serve --metrics-top-spaces`: per-space series for this
/// many spaces (those with the most CPU time).
pub const DEFAULT_TOP_SPACES: usize = 10;

/// How a counter's stored value becomes the exposed one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    One,
    /// Stored in µs, exposed in seconds.
    MicrosToSeconds,
}

/// One family of series on `/metrics`.
#[derive(Debug)]
pub struct Family {
    /// Without the unit and `_total` suffixes the encoder adds.
    pub base: String,
    pub kind: Kind,
    pub unit: Option<Unit>,
    pub help: String,
    /// The label that tells the members apart, if there are several.
    pub label: Option<&'static str>,
    /// Each series: its label value and the counters summed into it.
    pub members: Vec<(Option<&'static str>, Vec<Counter>)>,
    pub scale: Scale,
}

impl Family {
    /// The name as scraped: `spacewake_wave_cpu_seconds_total`.
    pub fn exposed_name(&self) -> String {
        let mut name = self.base.clone();
        if let Some(u) = &self.unit {
            name.push('_');
            name.push_str(u.as_str());
        }
        if self.kind == Kind::Counter {
            name.push_str("_total");
        }
        name
    }
}

/// Counters shown as one labelled family: `(family, unit, help, label,
/// [(label value, counter)])`.
type Group = (
    &'static str,
    Option<Unit>,
    &'static str,
    &'static str,
    &'static [(&'static str, Counter)],
);

fn groups() -> Vec<Group> {
    use Counter as C;
    vec![
        (
            "spacewake_store_commits",
            None,
            "Commits accepted, by class (authored by a client, derived by the runtime, system)",
            "class",
            &[
                ("authored", C::CommitsAuthored),
                ("derived", C::CommitsDerived),
                ("system", C::CommitsSystem),
            ],
        ),
        (
            "spacewake_activations",
            None,
            "Activations of a space, by what caused them",
            "cause",
            &[
                ("session", C::ActivationsSession),
                ("events", C::ActivationsEvents),
                ("warm", C::ActivationsWarm),
                ("boot", C::ActivationsBoot),
                ("schedule", C::ActivationsSchedule),
                ("operator", C::ActivationsOperator),
            ],
        ),
        (
            "spacewake_wave_cpu",
            Some(Unit::Seconds),
            "Thread CPU time of metered waves, by the bucket it was billed to",
            "bucket",
            &[
                ("scheduled", C::LedgerCpuUsScheduled),
                ("session", C::LedgerCpuUsSession),
            ],
        ),
        (
            "spacewake_wave_wall",
            Some(Unit::Seconds),
            "Wall time of metered waves, by the bucket it was billed to",
            "bucket",
            &[
                ("scheduled", C::LedgerWallUsScheduled),
                ("session", C::LedgerWallUsSession),
            ],
        ),
        (
            "spacewake_ledger_waves",
            None,
            "Metered waves, by the bucket billed",
            "bucket",
            &[
                ("scheduled", C::LedgerWavesScheduled),
                ("session", C::LedgerWavesSession),
            ],
        ),
        (
            "spacewake_effect_outcomes",
            None,
            "Effect requests answered, by outcome (a response of any status, a failure, a refusal by the egress policy)",
            "outcome",
            &[
                ("response", C::EffectsCompleted),
                ("failed", C::EffectsFailed),
                ("refused", C::EffectsRefused),
            ],
        ),
        (
            "spacewake_actions_failed",
            None,
            "Actions whose writes were discarded, by reason",
            "reason",
            &[
                ("threw", C::ActionsFailed),
                ("preempted", C::ActionsPreempted),
                ("out_of_memory", C::ActionsOutOfMemory),
                ("capability_denied", C::ActionsCapabilityDenied),
                ("refused", C::ActionsRefused),
            ],
        ),
        (
            "spacewake_store_creates_refused",
            None,
            "Space creates refused, by reason (the identity's quota, not among --space-creators, the peer's rate)",
            "reason",
            &[
                ("quota", C::SpacesRefusedByQuota),
                ("not_allowed", C::CreatesRefusedNotAllowed),
                ("rate", C::CreatesRefusedByRate),
            ],
        ),
        (
            "spacewake_sessions_ended",
            None,
            "Sessions the server ended, by reason",
            "reason",
            &[
                ("timeout", C::SessionsTimedOut),
                ("server_stopped", C::SessionsEndedByServer),
                ("revoked", C::SessionsRevoked),
                ("shutdown", C::SessionsClosedAtShutdown),
            ],
        ),
        (
            "spacewake_connections_closed",
            None,
            "TCP connections the server closed, by reason",
            "reason",
            &[
                ("per_peer_cap", C::ConnectionsRefusedPerPeer),
                ("header_timeout", C::ConnectionsHeaderTimeout),
                ("idle", C::ConnectionsIdleTimeout),
                ("no_session", C::ConnectionsNoSessionOpened),
            ],
        ),
    ]
}

/// Counters not on `/metrics`, and why (each is still in the health
/// route's JSON).
pub fn omitted(c: Counter) -> Option<&'static str> {
    use Counter as C;
    Some(match c {
        C::LedgerWaves => "the sum of spacewake_ledger_waves_total over `bucket`",
        C::LatenessLe10Ms
        | C::LatenessLe100Ms
        | C::LatenessLe1000Ms
        | C::LatenessLe60000Ms
        | C::LatenessCount
        | C::LatenessSumMs => "replaced by the histogram spacewake_schedule_wake_lateness_seconds",
        _ => return None,
    })
}

/// A counter shown alone under another name or unit than the default.
fn renamed(c: Counter) -> Option<(&'static str, Unit)> {
    match c {
        Counter::EffectsBytes => Some(("spacewake_effects_received", Unit::Bytes)),
        Counter::RuntimeMemoryBytes => Some(("spacewake_activation_runtime_memory", Unit::Bytes)),
        _ => None,
    }
}

/// Every host-wide family, in the order of [`Counter::ALL`] (a group at
/// its first member).
pub fn families() -> &'static [Family] {
    static ALL: OnceLock<Vec<Family>> = OnceLock::new();
    ALL.get_or_init(|| {
        let groups = groups();
        let mut out = Vec::new();
        for &c in Counter::ALL {
            if omitted(c).is_some() {
                continue;
            }
            if let Some(g) = groups.iter().find(|g| g.4.iter().any(|(_, m)| *m == c)) {
                if g.4[0].1 == c {
                    let (base, unit, help, label, members) = g.clone();
                    out.push(Family {
                        base: base.to_string(),
                        kind: c.kind(),
                        scale: if unit.is_some() {
                            Scale::MicrosToSeconds
                        } else {
                            Scale::One
                        },
                        unit,
                        help: help.to_string(),
                        label: Some(label),
                        members: members.iter().map(|(v, m)| (Some(*v), vec![*m])).collect(),
                    });
                }
                continue;
            }
            let (base, unit) = match renamed(c) {
                Some((base, unit)) => (base.to_string(), Some(unit)),
                None => (format!("spacewake_{}_{}", c.block(), snake(c.name())), None),
            };
            out.push(Family {
                base,
                kind: c.kind(),
                unit,
                help: c.help().to_string(),
                label: None,
                members: vec![(None, vec![c])],
                scale: Scale::One,
            });
        }
        out
    })
}

/// The families shown per space (label `space`) for the top spaces.
pub fn space_families() -> &'static [Family] {
    static ALL: OnceLock<Vec<Family>> = OnceLock::new();
    ALL.get_or_init(|| {
        use Counter as C;
        let fam = |base: &str,
                   unit: Option<Unit>,
                   help: &str,
                   label: Option<&'static str>,
                   members: Vec<(Option<&'static str>, Vec<Counter>)>| {
            let scale = if unit.is_some() {
                Scale::MicrosToSeconds
            } else {
                Scale::One
            };
            Family {
                base: base.to_string(),
                kind: Kind::Counter,
                unit,
                help: help.to_string(),
                label,
                members,
                scale,
            }
        };
        vec![
            fam(
                "spacewake_space_cpu",
                Some(Unit::Seconds),
                "Thread CPU time of one space's metered waves, by bucket (top spaces only)",
                Some("bucket"),
                vec![
                    (Some("scheduled"), vec![C::LedgerCpuUsScheduled]),
                    (Some("session"), vec![C::LedgerCpuUsSession]),
                ],
            ),
            fam(
                "spacewake_space_commits",
                None,
                "Commits accepted in one space, all classes (top spaces only)",
                None,
                vec![(None, vec![C::CommitsAuthored, C::CommitsDerived, C::CommitsSystem])],
            ),
            fam(
                "spacewake_space_wakes_delivered",
                None,
                "Scheduled wakes whose callback ran and committed in one space (top spaces only)",
                None,
                vec![(None, vec![C::ScheduleDelivered])],
            ),
            fam(
                "spacewake_space_dead_lettered",
                None,
                "Events and wake occurrences given up in one space, by kind (top spaces only)",
                Some("kind"),
                vec![
                    (Some("event"), vec![C::EventsDeadLettered]),
                    (Some("wake"), vec![C::ScheduleDeadLettered]),
                ],
            ),
            fam(
                "spacewake_space_budget_skips",
                None,
                "Scheduled wakes of one space not run because its scheduled budget was spent (top spaces only)",
                None,
                vec![(None, vec![C::LedgerBudgetSkips])],
            ),
        ]
    })
}

/// What ranks spaces for the per-space families: CPU of both buckets.
pub const TOP_MEASURE: &[Counter] = &[Counter::LedgerCpuUsScheduled, Counter::LedgerCpuUsSession];

/// The most series `/metrics` shows for the counters and histograms with
/// `top` per-space spaces (the fleet's per-host gauges come on top).
pub fn series_bound(top: usize) -> usize {
    let host: usize =
        families().iter().map(|f| f.members.len()).sum::<usize>() + SpaceGauges::FAMILIES.len();
    let hist: usize = Hist::ALL.iter().map(|h| h.bounds().len() + 3).sum();
    let per_space: usize = space_families().iter().map(|f| f.members.len()).sum();
    host + hist + top * per_space
}

/// Renders one family's series from `value(counter)`.
fn encode_family(
    encoder: &mut DescriptorEncoder<'_>,
    f: &Family,
    series: &[(Option<&str>, &[i64])],
) -> Result<(), std::fmt::Error> {
    let name = f.base.as_str();
    let mtype = match f.kind {
        Kind::Counter => MetricType::Counter,
        Kind::Gauge => MetricType::Gauge,
    };
    let mut fam = encoder.encode_descriptor(name, &f.help, f.unit.as_ref(), mtype)?;
    let mut unlabelled = None;
    for (space, row) in series {
        for (label_value, counters) in &f.members {
            let mut labels: Vec<(&str, &str)> = Vec::with_capacity(2);
            if let Some(space) = space {
                labels.push(("space", space));
            }
            if let (Some(l), Some(v)) = (f.label, label_value) {
                labels.push((l, v));
            }
            let raw: i64 = counters.iter().map(|&c| row[c as usize]).sum();
            if labels.is_empty() {
                // A family's one series: written after the loop without
                // `{}` (the encoder is taken by value).
                unlabelled = Some(raw);
                continue;
            }
            let enc = fam.encode_family(&labels)?;
            encode_value(f, raw, enc)?;
        }
    }
    if let Some(raw) = unlabelled {
        encode_value(f, raw, fam)?;
    }
    Ok(())
}

fn encode_value(
    f: &Family,
    raw: i64,
    enc: prometheus_client::encoding::MetricEncoder<'_>,
) -> Result<(), std::fmt::Error> {
    match (f.kind, f.scale) {
        (Kind::Counter, Scale::One) => ConstCounter::new(raw.max(0) as u64).encode(enc),
        (Kind::Counter, Scale::MicrosToSeconds) => {
            ConstCounter::new(raw.max(0) as f64 / 1e6).encode(enc)
        }
        (Kind::Gauge, Scale::One) => ConstGauge::new(raw).encode(enc),
        (Kind::Gauge, Scale::MicrosToSeconds) => ConstGauge::new(raw as f64 / 1e6).encode(enc),
    }
}

/// The counters' collector: host-wide families, histograms, then the
/// per-space families for the `top` spaces.
#[derive(Debug)]
pub struct Collector {
    pub counters: Arc<Counters>,
    pub top: usize,
}

impl prometheus_client::collector::Collector for Collector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let host = self.counters.host().to_row();
        for f in families() {
            encode_family(&mut encoder, f, &[(None, &host)])?;
        }
        for &h in Hist::ALL {
            let (sum, count, buckets) = self.counters.histograms().snapshot(h);
            let enc = encoder.encode_descriptor(
                h.family(),
                h.help(),
                Some(&Unit::Seconds),
                MetricType::Histogram,
            )?;
            let mut enc = enc;
            enc.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
        }
        let top = self.counters.top_spaces(self.top, TOP_MEASURE);
        let series: Vec<(Option<&str>, &[i64])> = top
            .iter()
            .map(|(id, row)| (Some(id.as_str()), row.as_slice()))
            .collect();
        if !series.is_empty() {
            for f in space_families() {
                encode_family(&mut encoder, f, &series)?;
            }
        }
        Ok(())
    }
}

/// Gauges read at each scrape rather than counted: how many spaces the
/// host's store has, and how many of them are parked.
#[derive(Debug)]
pub struct SpaceGauges {
    pub registered: u64,
    pub active: u64,
}

impl SpaceGauges {
    /// `(name, help)` of each, as `spec/metrics.md` lists them.
    pub const FAMILIES: [(&'static str, &'static str); 2] = [
        (
            "spacewake_spaces_registered",
            "Spaces in the store's directory (every space this host could serve)",
        ),
        (
            "spacewake_spaces_parked",
            "Registered spaces without a running space server (registered less active)",
        ),
    ];
}

impl prometheus_client::collector::Collector for SpaceGauges {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let values = [self.registered, self.registered.saturating_sub(self.active)];
        for ((name, help), v) in Self::FAMILIES.into_iter().zip(values) {
            let g = ConstGauge::new(v as i64);
            g.encode(encoder.encode_descriptor(name, help, None, MetricType::Gauge)?)?;
        }
        Ok(())
    }
}

/// `commitsAuthored` -> `commits_authored`.
pub fn snake(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 4);
    for ch in camel.chars() {
        if ch.is_ascii_uppercase() {
            out.push('_');
            out.push(ch.to_ascii_lowercase());
        } else {
            out.push(ch);
        }
    }
    out
}

/// Where each exposed series comes from in the health route's JSON.
fn json_sources(f: &Family) -> String {
    f.members
        .iter()
        .map(|(v, cs)| {
            let from = cs
                .iter()
                .map(|c| format!("`{}.{}`", c.block(), c.name()))
                .collect::<Vec<_>>()
                .join(" + ");
            match (f.label, v) {
                (Some(l), Some(v)) => format!("{l}=\"{v}\": {from}"),
                _ => from,
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn row(name: &str, kind: &str, unit: &str, labels: &str, meaning: &str, from: &str) -> String {
    let esc = |s: &str| s.replace('|', "\\|");
    format!(
        "| `{name}` | {kind} | {unit} | {labels} | {} | {} |\n",
        esc(meaning),
        esc(from)
    )
}

/// The catalogue as `spec/metrics.md` lists it (between its markers).
pub fn catalogue_markdown() -> String {
    let kind = |k: Kind| match k {
        Kind::Counter => "counter",
        Kind::Gauge => "gauge",
    };
    let unit = |f: &Family| {
        f.unit
            .as_ref()
            .map_or("—".to_string(), |u| u.as_str().to_string())
    };
    let labels = |f: &Family, extra: Option<&str>| {
        let mut ls: Vec<String> = extra.into_iter().map(|s| format!("`{s}`")).collect();
        if let (Some(l), vals) = (f.label, &f.members) {
            let vals: Vec<&str> = vals.iter().filter_map(|(v, _)| *v).collect();
            ls.push(format!("`{l}` ({})", vals.join(", ")));
        }
        if ls.is_empty() {
            "—".to_string()
        } else {
            ls.join(", ")
        }
    };
    let head = "| metric | type | unit | labels | meaning | from the health route's `servingLoop` |\n|---|---|---|---|---|---|\n";
    let mut out = String::from("### Host-wide\n\n");
    out.push_str(head);
    for f in families() {
        out.push_str(&row(
            &f.exposed_name(),
            kind(f.kind),
            &unit(f),
            &labels(f, None),
            &f.help,
            &json_sources(f),
        ));
    }
    for (name, help) in SpaceGauges::FAMILIES {
        out.push_str(&row(
            name,
            "gauge",
            "—",
            "—",
            help,
            "read at each scrape (`spacesRegistered`, `activeSpaces`)",
        ));
    }
    out.push_str("\n### Histograms (host-wide)\n\n");
    out.push_str(
        "| metric | type | unit | buckets (le, seconds) | meaning |\n|---|---|---|---|---|\n",
    );
    for &h in Hist::ALL {
        let bounds: Vec<String> = h.bounds().iter().map(|b| b.to_string()).collect();
        out.push_str(&format!(
            "| `{}_seconds` | histogram | seconds | {}, +Inf | {} |\n",
            h.family(),
            bounds.join(", "),
            h.help()
        ));
    }
    out.push_str("\n### Per space (the top spaces by CPU)\n\n");
    out.push_str(head);
    for f in space_families() {
        out.push_str(&row(
            &f.exposed_name(),
            kind(f.kind),
            &unit(f),
            &labels(f, Some("space")),
            &f.help,
            &json_sources(f),
        ));
    }
    out.push_str(
        "\n### In the health route only\n\n| counter | why not on `/metrics` |\n|---|---|\n",
    );
    for &c in Counter::ALL {
        if let Some(why) = omitted(c) {
            out.push_str(&format!("| `{}.{}` | {why} |\n", c.block(), c.name()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    /// The sample lines of an exposition (no `#` lines).
    fn samples(text: &str) -> Vec<&str> {
        text.lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .collect()
    }

    #[test]
    fn every_counter_is_exposed_once_or_omitted_with_a_reason() {
        let mut seen: BTreeMap<usize, usize> = BTreeMap::new();
        for f in families() {
            for (_, cs) in &f.members {
                for &c in cs {
                    *seen.entry(c as usize).or_default() += 1;
                }
            }
        }
        for &c in Counter::ALL {
            let n = seen.get(&(c as usize)).copied().unwrap_or(0);
            match omitted(c) {
                Some(_) => assert_eq!(n, 0, "{c:?} is omitted yet exposed"),
                None => assert_eq!(n, 1, "{c:?} exposed {n} times"),
            }
        }
    }

    #[test]
    fn names_follow_the_prometheus_conventions() {
        let mut names = BTreeSet::new();
        let all = families().iter().chain(space_families());
        for f in all {
            let name = f.exposed_name();
            assert!(
                name.starts_with("spacewake_")
                    && name
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                "{name}"
            );
            for unit in ["_ms", "_us", "_millis", "_micros", "_mib", "_kib"] {
                assert!(
                    !name.contains(&format!("{unit}_")) && !name.ends_with(unit),
                    "{name}: base units only"
                );
            }
            assert_eq!(name.ends_with("_total"), f.kind == Kind::Counter, "{name}");
            assert!(names.insert(name.clone()), "{name} twice");
            assert!(!f.help.is_empty(), "{name} has no help");
            if f.members.len() > 1 {
                assert!(f.label.is_some(), "{name}: variants need a label");
            }
        }
        for &h in Hist::ALL {
            assert!(names.insert(format!("{}_seconds", h.family())));
        }
    }

    #[test]
    fn ten_thousand_spaces_stay_under_the_documented_bound() {
        let c = Counters::new();
        let handles: Vec<_> = (0..10_000)
            .map(|i| {
                let s = c.space(&format!("space-{i:05}"));
                s.inc(Counter::CommitsAuthored);
                s.add(Counter::LedgerCpuUsScheduled, 1_000 + i);
                s.inc(Counter::ScheduleDelivered);
                s.inc(Counter::ActivationsSchedule);
                s.observe_lateness(i as u64 % 2_000);
                s
            })
            .collect();
        let text = c.prometheus_text(DEFAULT_TOP_SPACES);
        let series = samples(&text);
        let bound = series_bound(DEFAULT_TOP_SPACES);
        assert!(
            series.len() <= bound && bound <= 400,
            "{} series, bound {bound}",
            series.len()
        );
        // Per-space series name the top spaces by CPU, and only them.
        let spaces: BTreeSet<&str> = series
            .iter()
            .filter_map(|l| l.split("space=\"").nth(1))
            .map(|rest| &rest[..rest.find('"').unwrap()])
            .collect();
        let want: BTreeSet<String> = (9_990..10_000).map(|i| format!("space-{i:05}")).collect();
        assert_eq!(
            spaces,
            want.iter().map(String::as_str).collect(),
            "the 10 with the most CPU"
        );
        assert!(text.contains("spacewake_store_commits_total{class=\"authored\"} 10000"));
        assert!(text.contains("spacewake_activations_total{cause=\"schedule\"} 10000"));
        assert!(text.contains("spacewake_schedule_wake_lateness_seconds_count 10000"));
        assert!(!text.contains("space=\"_host\""), "no pseudo-space");
        // With none asked for, the count does not depend on spaces at all.
        let none = samples(&c.prometheus_text(0)).len();
        // The route adds the scrape-time gauges (spaces registered, parked).
        assert_eq!(none + SpaceGauges::FAMILIES.len(), series_bound(0));
        drop(handles);
        assert_eq!(samples(&Counters::new().prometheus_text(0)).len(), none);
    }

    #[test]
    fn histograms_are_cumulative_and_end_in_their_count() {
        let c = Counters::new();
        let s = c.space("a");
        for ms in [1, 7, 40, 40, 900, 120_000] {
            s.observe_lateness(ms);
        }
        s.observe(Hist::WaveDuration, 300);
        let text = c.prometheus_text(0);
        assert!(text.contains("# TYPE spacewake_schedule_wake_lateness_seconds histogram"));
        assert!(text.contains("# UNIT spacewake_schedule_wake_lateness_seconds seconds"));
        let buckets: Vec<(String, u64)> = text
            .lines()
            .filter(|l| l.starts_with("spacewake_schedule_wake_lateness_seconds_bucket"))
            .map(|l| {
                let le = l.split("le=\"").nth(1).unwrap().split('"').next().unwrap();
                (
                    le.to_string(),
                    l.rsplit(' ').next().unwrap().parse().unwrap(),
                )
            })
            .collect();
        assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "{buckets:?}");
        assert_eq!(buckets.last().unwrap(), &("+Inf".to_string(), 6));
        let at = |le: &str| buckets.iter().find(|(b, _)| b == le).unwrap().1;
        assert_eq!(at("0.005"), 1);
        assert_eq!(at("0.05"), 4);
        assert_eq!(at("1.0"), 5);
        assert!(text.contains("spacewake_schedule_wake_lateness_seconds_sum 120.988"));
        assert!(text.contains("spacewake_wave_duration_seconds_count 1"));
    }

    /// `spec/metrics.md` lists exactly the catalogue; with
    /// `SPACEWAKE_WRITE_SPEC=1` this test rewrites the page's table instead.
    #[test]
    fn spec_metrics_md_is_the_catalogue() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/spec/metrics.md");
        let page = std::fs::read_to_string(path).expect("spec/metrics.md");
        let (begin, end) = ("<!-- catalogue:begin -->\n", "<!-- catalogue:end -->");
        let a = page.find(begin).expect("begin marker") + begin.len();
        let b = page.find(end).expect("end marker");
        let want = catalogue_markdown();
        if page[a..b] != want {
            if std::env::var_os("SPACEWAKE_WRITE_SPEC").is_some() {
                std::fs::write(path, format!("{}{want}{}", &page[..a], &page[b..])).unwrap();
            } else {
                panic!(
                    "spec/metrics.md is out of date with src/metrics/exposition.rs; \
                     run SPACEWAKE_WRITE_SPEC=1 cargo test --release --lib spec_metrics_md"
                );
            }
        }
    }
}
