//! The console's pages: data in, markup out (no I/O). Each page names the
//! operator API route that serves the same data as JSON.

use super::chart::{bars, series, Bar};
use super::{state_of, Selection, SortBy, SpacesQuery, StateFilter, PAGE_ROWS, REFRESH_SECONDS};
use crate::human::{format_utc_ms, human_duration_ms, relative, thousands};
use crate::operator::{EntryView, FiresView, HostView, LedgerView, Limit, PieceView, SpaceView};
use crate::schedule::EntryState;
use crate::store::{Bucket, WindowSpend};
use maud::{html, Markup, DOCTYPE};
use serde_json::{Map, Value};
use std::collections::HashSet;

/// Readable at 200 % zoom: relative sizes, tables that scroll sideways in
/// their own box rather than the page, and nothing fixed-width but charts
/// (which scale).
const STYLE: &str = "
body{font-family:system-ui,sans-serif;margin:0 auto;max-width:72rem;padding:0 1rem 2rem;line-height:1.4;color:#1a1a1a}
header{display:flex;flex-wrap:wrap;gap:1rem;align-items:baseline;border-bottom:1px solid #ccc}
nav a{margin-right:1rem}
h1{font-size:1.4rem}
h2{font-size:1.15rem;margin-top:1.6rem}
.scroll{overflow-x:auto}
table{border-collapse:collapse;margin:.5rem 0}
th,td{border-bottom:1px solid #ddd;padding:.25rem .6rem;text-align:left;vertical-align:top}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
caption{text-align:left;font-weight:600;padding:.25rem 0}
.chart{max-width:40rem;height:auto}
.chart .bar.scheduled{fill:#2b6cb0}.chart .bar.session{fill:#c05621}.chart .bar.lateness{fill:#2f855a}.chart .bar.waves{fill:#6b46c1}.chart .bar.events{fill:#2c7a7b}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(20rem,1fr));gap:0 1.5rem}
form.inline{display:inline}
form.signin{display:flex;gap:.5rem;align-items:center;margin-left:auto}
.note{font-size:.9rem}
.chart .axis{stroke:#555}.chart text{font-size:11px;fill:#222}
.muted{color:#555}
form.filters{display:flex;flex-wrap:wrap;gap:.75rem;align-items:end}
form.filters label{display:flex;flex-direction:column;font-size:.9rem}
";

/// What every page knows besides its data.
pub struct Frame {
    pub now_ms: u64,
    /// An operator is signed in on this browser: actions are offered.
    pub signed_in: bool,
    /// This page's path and query, where sign-in and actions return to.
    pub path: String,
}

/// Reloads the page every few seconds while its "refresh" box is ticked
/// (remembered in the browser), except while the operator is in a form
/// field (a reload would lose what they type). Without JavaScript the box
/// stays hidden and the `noscript` refresh does the reloading.
const REFRESH_SCRIPT: &str = "(function(){var c=document.getElementById('refresh');\
document.getElementById('refresh-control').hidden=false;\
c.checked=localStorage.getItem('spacewake.refresh')!=='off';\
c.addEventListener('change',function(){localStorage.setItem('spacewake.refresh',c.checked?'on':'off');});\
setInterval(function(){if(!c.checked)return;var a=document.activeElement;\
if(a&&a!==c&&/^(INPUT|SELECT|TEXTAREA|BUTTON)$/.test(a.tagName))return;location.reload();},";

/// Where the pages load their style sheet and script from.
pub const STYLE_PATH: &str = "/console/style.css";
pub const SCRIPT_PATH: &str = "/console/refresh.js";

/// The style sheet served at [`STYLE_PATH`].
pub fn style_sheet() -> &'static str {
    STYLE
}

/// The script served at [`SCRIPT_PATH`].
pub fn refresh_script() -> String {
    format!("{REFRESH_SCRIPT}{});}})();", REFRESH_SECONDS * 1000)
}

fn layout(f: &Frame, title: &str, here: &str, twin: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                noscript { meta http-equiv="refresh" content=(REFRESH_SECONDS); }
                title { (title) " · spacewake console" }
                // From the console itself, not inline: its content
                // security policy allows no inline code.
                link rel="stylesheet" href=(STYLE_PATH);
            }
            body {
                header {
                    h1 { "spacewake" }
                    nav aria-label="console" {
                        @for (href, name) in [("/console", "Host"), ("/console/spaces", "Spaces")] {
                            @if name == here {
                                a href=(href) aria-current="page" { (name) }
                            } @else {
                                a href=(href) { (name) }
                            }
                        }
                    }
                    span class="muted" {
                        "as of " time datetime=(format_utc_ms(f.now_ms)) { (format_utc_ms(f.now_ms)) }
                    }
                    span id="refresh-control" hidden {
                        label { input type="checkbox" id="refresh" checked; " refresh every " (REFRESH_SECONDS) " s" }
                    }
                    @if f.signed_in {
                        form class="signin" method="post" action="/console/sign-out" {
                            span { "Signed in as operator" }
                            input type="hidden" name="next" value=(f.path);
                            button type="submit" id="sign-out" { "Sign out" }
                        }
                    } @else {
                        form class="signin" method="post" action="/console/sign-in" {
                            label for="token" { "Operator token" }
                            input type="password" id="token" name="token" autocomplete="off" required;
                            input type="hidden" name="next" value=(f.path);
                            button type="submit" id="sign-in" { "Sign in" }
                        }
                    }
                }
                main { (body) }
                script src=(SCRIPT_PATH) {}
                footer class="muted" {
                    p { "The same data as JSON: " code { (twin) } }
                    @if !f.signed_in {
                        p class="note" { "Read-only: sign in with the token " code { "serve" } " printed at start (also in "
                            code { "DATA/console.token" } ") to act." }
                    }
                }
            }
        }
    }
}

fn num(counters: &Map<String, Value>, block: &str, key: &str) -> u64 {
    counters
        .get(block)
        .and_then(|b| b[key].as_u64())
        .unwrap_or(0)
}

/// CPU time for people: `420 µs`, `12 ms`, `3.4 s`.
fn cpu(us: u64) -> String {
    if us < 1_000 {
        format!("{us} µs")
    } else {
        human_duration_ms(us / 1_000)
    }
}

fn limit_text(l: Option<Limit>) -> String {
    match l {
        None => "unknown".into(),
        Some(Limit::Unlimited) => "unlimited".into(),
        Some(Limit::CpuUs(us)) => cpu(us),
    }
}

/// `GET /console`: the host at a glance.
pub fn host(f: &Frame, v: &HostView) -> Markup {
    let c = &v.counters;
    let triggers = [
        ("session", num(c, "activation", "bySession")),
        ("events", num(c, "activation", "byEvents")),
        ("warm", num(c, "activation", "byWarm")),
        ("schedule", num(c, "activation", "bySchedule")),
        ("boot", num(c, "activation", "byBoot")),
        ("operator", num(c, "activation", "byOperator")),
    ];
    // The cumulative buckets as counts per range.
    let le = [
        num(c, "schedule", "wakeLatenessLe10Ms"),
        num(c, "schedule", "wakeLatenessLe100Ms"),
        num(c, "schedule", "wakeLatenessLe1000Ms"),
        num(c, "schedule", "wakeLatenessLe60000Ms"),
        num(c, "schedule", "wakeLatenessCount"),
    ];
    let ranges = ["≤ 10 ms", "10–100 ms", "0.1–1 s", "1 s–1 min", "> 1 min"];
    let lateness: Vec<Bar<'_>> = ranges
        .iter()
        .enumerate()
        .map(|(i, r)| Bar {
            label: r.to_string(),
            value: if i == 0 {
                le[0]
            } else {
                le[i].saturating_sub(le[i - 1])
            },
            series: "lateness",
        })
        .collect();
    let work = [
        ("waves committed", num(c, "waves", "committed")),
        ("events processed", num(c, "events", "processed")),
        ("events dead-lettered", num(c, "events", "deadLettered")),
        ("handler runs", num(c, "actions", "handlerRuns")),
        ("derivation runs", num(c, "actions", "derivationRuns")),
        ("actions failed", num(c, "actions", "failed")),
        ("actions preempted", num(c, "actions", "preempted")),
    ];
    let schedule = [
        (
            "scheduled activations in flight",
            num(c, "schedule", "activationsInFlight"),
        ),
        ("wakes fired", num(c, "schedule", "fired")),
        ("wake callbacks delivered", num(c, "schedule", "delivered")),
        ("wakes retried", num(c, "schedule", "retried")),
        ("wakes dead-lettered", num(c, "schedule", "deadLettered")),
        (
            "wakes suppressed (switch off)",
            num(c, "schedule", "suppressed"),
        ),
        (
            "missed periods coalesced",
            num(c, "schedule", "missedPeriodsCoalesced"),
        ),
        ("budget skips", num(c, "ledger", "budgetSkips")),
        (
            "entries backed off (unread output)",
            num(c, "ledger", "backedOffEntries"),
        ),
    ];
    let parked = v.registered.saturating_sub(v.active);
    let waves: Vec<(u64, f64)> = v
        .throughput
        .iter()
        .map(|r| (r.until_ms, r.waves_per_s))
        .collect();
    let events: Vec<(u64, f64)> = v
        .throughput
        .iter()
        .map(|r| (r.until_ms, r.events_per_s))
        .collect();
    let hour = (f.now_ms.saturating_sub(super::rates::SPAN_MS), f.now_ms);
    let ends = ("1 h ago", "now");
    let body = html! {
        h2 { "Throughput over the last hour" }
        @if v.throughput.is_empty() {
            p class="muted" { "Not enough samples yet (one every " (super::rates::SAMPLE_MS / 1_000) " s)." }
        } @else {
            div class="cards" {
                div { (series("Waves per second over the last hour", &waves, hour, "waves", ends)) }
                div { (series("Events per second over the last hour", &events, hour, "events", ends)) }
            }
        }
        div class="cards" {
            div {
                h2 { "Spaces" }
                div class="scroll" { table {
                    caption { "Spaces on this host" }
                    tbody {
                        tr { th scope="row" { "registered" } td class="num" { (thousands(v.registered)) } }
                        tr { th scope="row" { "active" } td class="num" { (thousands(v.active)) } }
                        tr { th scope="row" { "parked" } td class="num" { (thousands(parked)) } }
                        tr { th scope="row" { "scheduled budget per window (host default)" } td class="num" { (limit_text(Some(v.scheduled_budget))) } }
                    }
                } }
            }
            div { h2 { "Activations by trigger" } (counts("Activations since the host started", Some(("trigger", "activations")), &triggers)) }
            div { h2 { "Scheduled wakes" } (counts("Scheduled wakes since the host started", None, &schedule)) }
            div { h2 { "Work" } (counts("Work since the host started", None, &work)) }
        }
        h2 { "Wake lateness" }
        (bars("Wake lateness: wakes per range of (fire time − due time)", &lateness))
        @let ranges: Vec<(&str, u64)> = lateness.iter().map(|b| (b.label.as_str(), b.value)).collect();
        (counts("Wake lateness (fire time − due time)", Some(("range", "wakes")), &ranges))
    };
    layout(f, "Host", "Host", "GET /api/operator/host", body)
}

/// A captioned table of named counts (a header row when `columns` names
/// them).
fn counts(caption: &str, columns: Option<(&str, &str)>, rows: &[(&str, u64)]) -> Markup {
    html! {
        div class="scroll" { table {
            caption { (caption) }
            @if let Some((name, value)) = columns {
                thead { tr { th scope="col" { (name) } th scope="col" class="num" { (value) } } }
            }
            tbody {
                @for (name, n) in rows {
                    tr { th scope="row" { (name) } td class="num" { (thousands(*n)) } }
                }
            }
        } }
    }
}

/// What the spaces page shows.
pub struct SpacesView<'a> {
    pub query: &'a SpacesQuery,
    pub selection: &'a Selection,
    pub active: &'a HashSet<String>,
    /// This window's spend of each row (`None`: not readable now).
    pub spend: &'a [Option<WindowSpend>],
    /// The scheduled budget that applies to each row (`None`: unknown).
    pub budgets: &'a [Option<Limit>],
    pub registered: u64,
}

/// `GET /console/spaces`: every space, filtered, sorted, a page at a time.
pub fn spaces(f: &Frame, v: &SpacesView<'_>) -> Markup {
    let q = v.query;
    let s = v.selection;
    let header = |col: SortBy, name: &str| {
        let current = q.sort == col;
        let sort = if current {
            if q.desc {
                "descending"
            } else {
                "ascending"
            }
        } else {
            "none"
        };
        let href = q.url(|n| {
            n.desc = current && !q.desc;
            n.sort = col;
            n.page = 0;
        });
        html! { th scope="col" aria-sort=(sort) { a href=(href) { (name) @if current { @if q.desc { " ▼" } @else { " ▲" } } } } }
    };
    let body = html! {
        h2 { "Spaces" }
        form class="filters" method="get" action="/console/spaces" {
            label { "Id or owner contains" input type="search" id="q" name="q" value=(q.q); }
            label { "State"
                select name="state" {
                    @for f in StateFilter::ALL {
                        option value=(f.as_str()) selected[f == q.state] { (f.as_str()) }
                    }
                }
            }
            input type="hidden" name="sort" value=(q.sort.as_str());
            @if q.desc { input type="hidden" name="desc" value="true"; }
            button type="submit" { "Filter" }
        }
        p {
            (thousands(s.matched as u64)) " of " (thousands(v.registered)) " spaces match; page "
            (s.page + 1) " of " (s.pages) " (" (PAGE_ROWS) " a page)."
        }
        div class="scroll" { table id="spaces" {
            caption { "Spaces, this ledger window's scheduled CPU against the budget" }
            thead { tr {
                (header(SortBy::Id, "id"))
                (header(SortBy::Owner, "owner"))
                (header(SortBy::State, "state"))
                (header(SortBy::NextWake, "next wake (UTC)"))
                (header(SortBy::Undelivered, "undelivered"))
                th scope="col" class="num" { "scheduled CPU this window" }
                th scope="col" class="num" { "session CPU this window" }
            } }
            tbody {
                @for (i, e) in s.rows.iter().enumerate() {
                    tr data-space=(e.id) {
                        td { a href={"/console/spaces/" (e.id)} { (e.id) } }
                        td { code { (e.owner) } }
                        td { (state_of(e, v.active)) }
                        td {
                            @match e.next_wake_ms {
                                Some(t) => { time datetime=(format_utc_ms(t)) { (format_utc_ms(t)) } " (" (relative(t, f.now_ms)) ")" }
                                None => { span class="muted" { "none" } }
                            }
                        }
                        td { @if e.undelivered { "yes" } @else { "no" } }
                        @match v.spend.get(i).copied().flatten() {
                            Some(sp) => {
                                td class="num" { (cpu(sp.scheduled_cpu_us)) " / " (limit_text(v.budgets.get(i).copied().flatten())) }
                                td class="num" { (cpu(sp.session_cpu_us)) }
                            }
                            None => { td class="num muted" { "unreadable" } td class="num muted" { "unreadable" } }
                        }
                    }
                }
            }
        } }
        nav aria-label="pages" {
            @if s.page > 0 { a href=(q.url(|n| n.page = s.page - 1)) rel="prev" { "← previous" } " " }
            @if s.page + 1 < s.pages { a href=(q.url(|n| n.page = s.page + 1)) rel="next" { "next →" } }
        }
    };
    layout(f, "Spaces", "Spaces", "GET /api/operator/spaces", body)
}

/// What a space's page shows.
pub struct SpaceDetail {
    pub space: SpaceView,
    pub pieces: Vec<PieceView>,
    pub entries: Vec<EntryView>,
    /// Entries that can never fire, with why (never indexed).
    pub invalid: Vec<crate::operator::InvalidEntry>,
    pub fires: Vec<FiresView>,
    pub ledger: LedgerView,
    pub dead_letters: usize,
    /// What the recent fires are filtered by.
    pub filter: crate::console::FiresFilter,
}

/// The link to one fire's run view.
fn run_link(space: &str, event: &str) -> String {
    format!("/console/spaces/{space}/run?event={event}")
}

/// `GET /console/spaces/{space}/run?event=…`: one fire of a wake, its
/// payload and what its run did.
pub fn run(f: &Frame, r: &crate::operator::RunView) -> Markup {
    let fire = &r.fire;
    let space_page = format!("/console/spaces/{}", r.space);
    let callback = r.entry.as_ref().map(|e| {
        e.callback_name
            .clone()
            .unwrap_or_else(|| e.row.callback_stream.clone())
    });
    // A failed occurrence still being retried: when it is tried next.
    let occurrence = crate::schedule::wake_id::occurrence_of(&fire.event_id);
    let next_attempt = r.entry.as_ref().and_then(|e| {
        e.row
            .pending
            .iter()
            .find(|p| p.occurrence == occurrence && p.attempts > 0)
            .and_then(|p| p.retry_due_ms)
    });
    let body = html! {
        h2 { "Run of " code { (fire.event_id) } }
        p {
            a href=(space_page) { "space " (r.space) } " · piece "
            a href={(space_page) "#pieces"} { code { (fire.piece) } }
            " · entry " a href={(space_page) "#entries"} { (fire.entry) }
            @if let Some(c) = &callback { " (callback " code { (c) } ")" }
            @if r.entry.is_none() { " (the entry is gone: its piece was deleted)" }
        }
        table id="run" {
            caption { "The fire and its run" }
            tbody {
                tr { th scope="row" { "outcome" } td id="outcome" { (fire.outcome) } }
                tr { th scope="row" { "period" } td { (fire.period) } }
                tr { th scope="row" { "due (UTC)" } td { (format_utc_ms(fire.due_ms)) } }
                tr { th scope="row" { "fired (UTC)" } td { (format_utc_ms(fire.fired_ms)) " (" (human_duration_ms(fire.fired_ms.saturating_sub(fire.due_ms))) " late)" } }
                tr { th scope="row" { "missed periods" } td { (fire.missed_periods) } }
                tr { th scope="row" { "settled (UTC)" } td { @if let Some(t) = fire.run.settled_ms { (format_utc_ms(t)) } @else { "not yet" } } }
                @if let Some(t) = next_attempt {
                    tr { th scope="row" { "next attempt (UTC)" } td id="next-attempt" { (format_utc_ms(t)) " (" (crate::human::relative(t, f.now_ms)) ")" } }
                }
                tr { th scope="row" { "took" } td { (fire.run.duration_us.map(cpu).unwrap_or_else(|| "-".into())) } }
                tr { th scope="row" { "CPU" } td { (fire.run.cpu_us.map(cpu).unwrap_or_else(|| "-".into())) } }
                tr { th scope="row" { "commit" } td id="commit" { @if let Some(seq) = fire.run.commit_seq { "seq " (seq) } @else { "none" } } }
                tr { th scope="row" { "appended by" } td { @if let Some(seq) = r.appended_seq { "seq " (seq) } @else { "not in the log any more" } } }
            }
        }
        @if let Some(e) = &fire.run.error {
            h3 { "Error" }
            pre id="error" class="error" { (e) }
        }
        h3 { "Logged lines" }
        @if fire.run.logs.is_empty() {
            p id="logs" { "The callback logged nothing." }
        } @else {
            pre id="logs" { @for l in &fire.run.logs { (l.level) "  " (l.text) "\n" } }
        }
        h3 { "Payload" }
        @match &r.payload {
            Some(p) => pre id="payload" { (serde_json::to_string_pretty(p).unwrap_or_default()) },
            None => p id="payload" { "The wake event is no longer in the log." },
        }
    };
    layout(
        f,
        &format!("Run {}", fire.event_id),
        "",
        &format!(
            "GET /api/operator/spaces/{}/runs?event={}",
            r.space, fire.event_id
        ),
        body,
    )
}

const DAY_MS: u64 = 86_400_000;

/// An entry's wakes in `[now, now + 24 h)`, nominally: its next due time,
/// then every effective interval (each later wake moves by its own jitter).
pub fn next_day_wakes(e: &EntryView, now_ms: u64) -> Vec<u64> {
    if e.row.status != crate::store::ScheduleStatus::Active {
        return Vec::new();
    }
    let Some(next) = e.row.next_wake_ms() else {
        return Vec::new(); // a one-off entry with no time, say
    };
    let mut t = next.max(now_ms);
    let mut out = Vec::new();
    let cadence = crate::schedule::cadence::Cadence::of_row(&e.row);
    if cadence.is_one_off() {
        return [t].into_iter().filter(|t| *t < now_ms + DAY_MS).collect();
    }
    if let crate::schedule::cadence::Cadence::Cron(spec) = cadence {
        while t < now_ms + DAY_MS && out.len() < 48 {
            out.push(t);
            match spec.next_after(t) {
                Some(n) => t = n,
                None => break,
            }
        }
        return out;
    }
    let step = e.effective_interval_minutes.max(1) * 60_000;
    while t < now_ms + DAY_MS && out.len() < 48 {
        out.push(t);
        t += step;
    }
    out
}

fn timeline(now_ms: u64, d: &SpaceDetail) -> Markup {
    const W: u64 = 560;
    let rows = d.entries.len().max(1) as u64;
    let h = 24 + rows * 22;
    let x = |t: u64| 100 + (t.saturating_sub(now_ms)) * (W - 130) / DAY_MS;
    html! {
        svg role="img" aria-label="Wakes in the next 24 hours, one row per entry" viewBox={"0 0 " (W) " " (h)}
            width="100%" class="chart" xmlns="http://www.w3.org/2000/svg" {
            title { "Wakes in the next 24 hours" }
            @for hour in [0u64, 6, 12, 18, 24] {
                @let hx = x(now_ms + hour * 3_600_000);
                line x1=(hx) y1="4" x2=(hx) y2=(h - 16) class="axis" stroke-dasharray="2 3" {}
                text x=(hx) y=(h - 4) text-anchor="middle" { "+" (hour) " h" }
            }
            @for (i, e) in d.entries.iter().enumerate() {
                @let y = 16 + i as u64 * 22;
                text x="4" y=(y + 4) { (e.row.piece.chars().take(10).collect::<String>()) "#" (e.row.entry) }
                @for t in next_day_wakes(e, now_ms) {
                    circle cx=(x(t)) cy=(y) r="5" class="bar scheduled" { title { (format_utc_ms(t)) } }
                }
            }
        }
    }
}

/// `GET /console/spaces/{space}`: its pieces, entries, fires and ledger.
pub fn space(f: &Frame, d: &SpaceDetail) -> Markup {
    let s = &d.space;
    let windows: Vec<u64> = {
        let mut w: Vec<u64> = d.ledger.rows.iter().map(|r| r.window_start_ms).collect();
        w.sort_unstable();
        w.dedup();
        w.into_iter().rev().take(6).rev().collect()
    };
    let mut ledger_bars = Vec::new();
    for w in &windows {
        for (bucket, series) in [
            (Bucket::Scheduled, "scheduled"),
            (Bucket::Session, "session"),
        ] {
            let cpu_us: u64 = d
                .ledger
                .rows
                .iter()
                .filter(|r| r.window_start_ms == *w && r.bucket == bucket)
                .map(|r| r.totals.cpu_us)
                .sum();
            ledger_bars.push(Bar {
                label: format!("{} {series}", &format_utc_ms(*w)[5..16].replace('T', " ")),
                value: cpu_us,
                series,
            });
        }
    }
    let body = html! {
        h2 { "Space " code { (s.id) } }
        div class="scroll" { table {
            caption { "The space" }
            tbody {
                tr { th scope="row" { "owner" } td { code { (s.owner) } } }
                tr { th scope="row" { "state" } td { (s.state) } }
                tr { th scope="row" { "next wake" } td {
                    @match s.next_wake_ms {
                        Some(t) => { (format_utc_ms(t)) " (" (relative(t, f.now_ms)) ")" }
                        None => { "none" }
                    }
                } }
                tr { th scope="row" { "undelivered events" } td { @if s.undelivered { "yes" } @else { "no" } } }
                tr { th scope="row" { "dead letters" } td class="num" { (d.dead_letters) } }
                tr { th scope="row" { "scheduled budget per window" } td id="budget" { (d.ledger.budget.setting) ": " (limit_text(d.ledger.budget.effective)) } }
                tr { th scope="row" { "effect knobs" } td id="effects" { (d.ledger.effects.describe()) } }
            }
        } }
        form method="post" action={"/console/spaces/" (s.id) "/budget"} {
            label for="budget-ms" { "Scheduled budget (ms of CPU per window, " code { "none" } " or " code { "default" } ") " }
            input type="text" id="budget-ms" name="budget" required disabled[!f.signed_in] size="10";
            " "
            button type="submit" id="set-budget" disabled[!f.signed_in] { "Set budget" }
        }
        form method="post" action={"/console/spaces/" (s.id) "/effects"} {
            "Effect knobs (a number, " code { "default" } " for the host's, blank to keep): "
            label for="effects-in-flight" { "in flight " }
            input type="text" id="effects-in-flight" name="in_flight" disabled[!f.signed_in] size="5";
            " "
            label for="effects-per-second" { "requests/s " }
            input type="text" id="effects-per-second" name="per_second" disabled[!f.signed_in] size="5";
            " "
            label for="effects-bytes-per-second" { "bytes/s " }
            input type="text" id="effects-bytes-per-second" name="bytes_per_second" disabled[!f.signed_in] size="9";
            " "
            button type="submit" id="set-effects" disabled[!f.signed_in] { "Set effect knobs" }
        }
        h2 { "Pieces" }
        div class="scroll" { table id="pieces" {
            caption { "Pieces (" (d.pieces.len()) ")" }
            thead { tr { th scope="col" { "id" } th scope="col" { "pattern" } th scope="col" { "name" } th scope="col" class="num" { "schedule entries" } th scope="col" { "deployed" } th scope="col" { "set aside" } th scope="col" { "actions" } } }
            tbody {
                @for p in &d.pieces {
                    tr {
                        td { code { (p.id) } }
                        td { (p.pattern) }
                        td { (p.name.clone().unwrap_or_default()) }
                        td class="num" { (p.schedule_entries) }
                        td { @if let Some(t) = p.created_ms { (format_utc_ms(t)) } }
                        td { (p.set_aside.clone().unwrap_or_default()) }
                        td { (piece_actions(f, &s.id, &p.id)) }
                    }
                }
            }
        } }
        h2 { "Schedule entries" }
        div class="scroll" { table id="entries" {
            caption { "Schedule entries (" (d.entries.len()) ")" }
            thead { tr {
                th scope="col" { "piece" } th scope="col" class="num" { "entry" }
                th scope="col" class="num" { "interval" } th scope="col" class="num" { "effective interval" }
                th scope="col" { "next due (UTC)" } th scope="col" { "last fired" }
                th scope="col" class="num" { "attempts" } th scope="col" { "status" }
                th scope="col" { "actions" }
            } }
            tbody {
                @for e in &d.entries {
                    tr data-entry={(e.row.piece) "/" (e.row.entry)} {
                        td { code { (e.row.piece) } }
                        td class="num" { (e.row.entry) @if let Some(n) = &e.callback_name { " " code { (n) } } }
                        @if let Some(field) = &e.at {
                            td { "at " code { (field) } }
                            td class="num" { span class="muted" { "one-off" } }
                        } @else if let Some(expr) = &e.cron {
                            td { "cron " code { (expr) } " " (e.time_zone.clone().unwrap_or_default()) }
                            td class="num" { span class="muted" { "calendar" } }
                        } @else {
                            td class="num" { (e.row.interval_minutes) " min" }
                            td class="num" { (e.effective_interval_minutes) " min" }
                        }
                        @if e.row.next_due_ms >= crate::schedule::entry::NEVER_MS {
                            td { span class="muted" { @match e.set_for_ms { Some(t) => { "fired for " (format_utc_ms(t)) "; waits for a new time" }, None => { "no time set" } } } }
                        } @else {
                            td { (format_utc_ms(e.row.next_due_ms)) @if let Some(l) = &e.next_due_local { " · " (l) } " (" (relative(e.row.next_due_ms, f.now_ms)) ")" }
                        }
                        td { @match e.row.last_fired_ms { Some(t) => { (format_utc_ms(t)) }, None => { span class="muted" { "never" } } } }
                        td class="num" { (e.row.attempts()) }
                        td class="status" { (e.row.status.as_str()) }
                        td { (entry_actions(f, &s.id, e)) }
                    }
                }
                @for e in &d.invalid {
                    tr class="invalid" data-entry={(e.piece) "/" (e.entry)} {
                        td { code { (e.piece) } }
                        td class="num" { (e.entry) }
                        td colspan="5" { (e.reason) }
                        td class="status" { "invalid" }
                        td { span class="muted" { "never fires" } }
                    }
                }
            }
        } }
        h3 { "The next 24 hours" }
        (timeline(f.now_ms, d))
        h2 { "Recent fires" }
        form class="filters" id="fires-filter" method="get" action={"/console/spaces/" (s.id)} {
            label { "Outcome"
                select name="outcome" {
                    option value="" selected[d.filter.outcome.is_empty()] { "any" }
                    @for o in crate::console::FiresFilter::OUTCOMES {
                        option value=(o) selected[d.filter.outcome == o] { (o) }
                    }
                }
            }
            label { "Fired in the last"
                select name="range" {
                    option value="" selected[d.filter.range.is_empty()] { "any time" }
                    @for (r, _) in crate::console::FiresFilter::RANGES {
                        option value=(r) selected[d.filter.range == r] { (r) }
                    }
                }
            }
            button type="submit" { "Filter" }
        }
        div class="scroll" { table id="fires" {
            caption { "The newest fires of each entry: nominal time, actual time, lateness, and how the callback's run went" }
            thead { tr {
                th scope="col" { "entry" } th scope="col" { "due (UTC)" } th scope="col" { "fired (UTC)" }
                th scope="col" class="num" { "lateness" } th scope="col" class="num" { "missed periods" } th scope="col" { "outcome" }
                th scope="col" class="num" { "took" } th scope="col" class="num" { "CPU" } th scope="col" { "error and log" }
            } }
            tbody {
                @for f in &d.fires {
                    @for r in f.fires.iter().rev() {
                        tr {
                            td { code { (r.piece) "#" (r.entry) } }
                            td { (format_utc_ms(r.due_ms)) }
                            td { a href=(run_link(&s.id, &r.event_id)) { (format_utc_ms(r.fired_ms)) } }
                            td class="num" { (human_duration_ms(r.fired_ms.saturating_sub(r.due_ms))) }
                            td class="num" { (r.missed_periods) }
                            td { (r.outcome) }
                            td class="num" { (r.run.duration_us.map(cpu).unwrap_or_default()) }
                            td class="num" { (r.run.cpu_us.map(cpu).unwrap_or_default()) }
                            td { (fire_run(&r.run)) }
                        }
                    }
                }
            }
        } }
        h2 { "Ledger" }
        (bars("CPU per ledger window and bucket, in µs", &ledger_bars))
        div class="scroll" { table id="ledger" {
            caption { "The ledger by window and bucket" }
            thead { tr {
                th scope="col" { "window (UTC)" } th scope="col" { "bucket" } th scope="col" class="num" { "CPU" }
                th scope="col" class="num" { "waves" } th scope="col" class="num" { "actions" } th scope="col" class="num" { "budget skips" }
                th scope="col" class="num" { "effects" } th scope="col" class="num" { "refused" } th scope="col" class="num" { "received" }
                th scope="col" class="num" { "tokens in / out" } th scope="col" class="num" { "model time" }
            } }
            tbody {
                @for r in d.ledger.rows.iter().rev() {
                    tr {
                        td { (format_utc_ms(r.window_start_ms)) }
                        td { (r.bucket.as_str()) }
                        td class="num" { (cpu(r.totals.cpu_us)) }
                        td class="num" { (r.totals.waves) }
                        td class="num" { (r.totals.actions) }
                        td class="num" { (r.totals.budget_skips) }
                        td class="num" { (r.totals.effects_requested) }
                        td class="num" { (r.totals.effects_refused) }
                        td class="num" { (crate::human::bytes(r.totals.effect_bytes)) }
                        td class="num" { (r.totals.prompt_tokens) " / " (r.totals.completion_tokens) }
                        td class="num" { (cpu(r.totals.model_wall_us)) }
                    }
                }
            }
        } }
        h3 { "Top actions by CPU" }
        div class="scroll" { table id="top" {
            caption { "Actions that spent the most CPU" }
            thead { tr { th scope="col" { "piece" } th scope="col" { "action" } th scope="col" { "kind" } th scope="col" class="num" { "CPU" } th scope="col" class="num" { "runs" } } }
            tbody {
                @for a in &d.ledger.top {
                    tr {
                        td { code { (a.piece) } }
                        td { (a.action) }
                        td { (a.kind) }
                        td class="num" { (cpu(a.cpu_us)) }
                        td class="num" { (a.runs) }
                    }
                }
            }
        } }
    };
    let twin = format!(
        "GET /api/operator/spaces/{id}, …/pieces, …/ledger, …/schedules/PIECE/ENTRY/fires, /api/operator/schedules?space={id}",
        id = s.id
    );
    layout(f, &format!("Space {}", s.id), "", &twin, body)
}

/// A page for a refusal (unknown space, unreadable file): its message.
pub fn problem(f: &Frame, title: &str, message: &str) -> Markup {
    layout(
        f,
        title,
        "",
        "the operator API",
        html! { h2 { (title) } p { (message) } },
    )
}

/// A fire's error, then the lines its callback logged (folded when any).
fn fire_run(run: &crate::store::FireRun) -> Markup {
    html! {
        @if let Some(e) = &run.error { span class="error" { (e) } }
        @if !run.logs.is_empty() {
            details {
                summary { (crate::human::count(run.logs.len() as u64, "logged line", "logged lines")) }
                pre { @for l in &run.logs { (l.level) "  " (l.text) "\n" } }
            }
        }
    }
}

/// Deleting a piece: a form whose box must be ticked first (the browser
/// and the server both insist), since nothing undoes it.
fn piece_actions(f: &Frame, space: &str, piece: &str) -> Markup {
    html! {
        form class="inline" method="post" action={"/console/spaces/" (space) "/pieces/" (piece) "/delete"} {
            label { input type="checkbox" name="confirm" value="yes" required disabled[!f.signed_in]; " sure" }
            " "
            button type="submit" disabled[!f.signed_in] aria-label={"delete piece " (piece)} { "delete" }
        }
    }
}

/// Trigger, pause and resume buttons for one entry (disabled until an
/// operator signs in).
fn entry_actions(f: &Frame, space: &str, e: &EntryView) -> Markup {
    let base = format!(
        "/console/spaces/{space}/entries/{}/{}",
        e.row.piece, e.row.entry
    );
    let paused = e.row.status == crate::store::ScheduleStatus::Paused;
    html! {
        @for (action, shown) in [("trigger", true), ("pause", !paused), ("resume", paused)] {
            @if shown {
                form class="inline" method="post" action={(base) "/" (action)} {
                    button type="submit" name="action" value=(action) disabled[!f.signed_in]
                        aria-label={(action) " entry " (e.row.entry) " of " (e.row.piece)} { (action) }
                }
                " "
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_day_shows_a_one_off_time_once_and_a_calendar_entry_at_each_fire() {
        let now = 1_767_225_600_000; // 2026-01-01T00:00Z, 01:00 in Berlin
        let hour = 3_600_000;
        let mut row = crate::store::ScheduleRow::new("pc", 0, 0, "pc/s0", now, now + 2 * hour);
        row.cadence = Some(
            r#"{"at":{"doc":"pc/argument","path":["next"]},"via":[],"setFor":1767232800000}"#
                .into(),
        );
        row.nominal_period = now + 2 * hour;
        assert_eq!(
            next_day_wakes(&EntryView::new("s", row.clone()), now),
            [now + 2 * hour]
        );
        // Fired: it waits for a new time, and the day shows nothing.
        row.next_due_ms = crate::schedule::entry::NEVER_MS;
        assert!(next_day_wakes(&EntryView::new("s", row), now).is_empty());
        // 07:30 and 19:30 in Berlin: 06:30Z and 18:30Z.
        let mut cal =
            crate::store::ScheduleRow::new("pc", 1, 0, "pc/s1", now, now + 6 * hour + hour / 2);
        cal.cadence = Some(r#"{"cron":"30 7,19 * * *","timeZone":"Europe/Berlin"}"#.into());
        assert_eq!(
            next_day_wakes(&EntryView::new("s", cal), now),
            [now + 6 * hour + hour / 2, now + 18 * hour + hour / 2]
        );
    }

    #[test]
    fn a_fires_error_and_log_lines_are_shown_escaped() {
        let run = crate::store::FireRun {
            error: Some("Error: <b>down</b>".into()),
            logs: vec![
                crate::store::FireLog {
                    level: "info".into(),
                    text: "tick <script>".into(),
                },
                crate::store::FireLog {
                    level: "warn".into(),
                    text: "slow".into(),
                },
            ],
            ..Default::default()
        };
        let html = fire_run(&run).into_string();
        assert!(html.contains("Error: &lt;b&gt;down&lt;/b&gt;"), "{html}");
        assert!(html.contains("<summary>2 logged lines</summary>"), "{html}");
        assert!(
            html.contains("info  tick &lt;script&gt;\nwarn  slow\n"),
            "{html}"
        );
        assert_eq!(
            fire_run(&crate::store::FireRun::default()).into_string(),
            ""
        );
    }
}
