//! The operator console: HTML pages the host serves at `/console`
//! (`spec/console.md`), rendered on the server so that reading needs no
//! JavaScript, and refreshed by the browser every few seconds.
//!
//! # Layout
//! - `mod.rs` (this file): the pure cores — the spaces table's query
//!   (filter, sort, page) parsed from a URL and applied to directory rows.
//! - `chart.rs`: small SVG charts (bars), drawn from numbers.
//! - `pages.rs`: one function per page, data in, markup out.
//!
//! The routes that read the data and answer live in `http/console.rs`.
//!
//! # Invariants
//! - Nothing here does I/O: pages are functions of the views the operator
//!   API serves as JSON (`crate::operator`), so a page and its JSON twin
//!   show the same data.
//! - Every value shown comes from the host or its store at request time;
//!   nothing is cached between requests.

pub mod auth;
pub mod chart;
pub mod guard;
pub mod pages;
pub mod rates;

use crate::store::SpaceEntry;
use serde::Deserialize;
use std::collections::HashSet;

/// Rows per page of the spaces table.
pub const PAGE_ROWS: usize = 50;

/// How often an open page reloads itself, in seconds.
pub const REFRESH_SECONDS: u32 = 5;

/// A column the spaces table sorts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub enum SortBy {
    #[default]
    Id,
    Owner,
    State,
    NextWake,
    Undelivered,
}

impl SortBy {
    pub const ALL: [SortBy; 5] = [
        SortBy::Id,
        SortBy::Owner,
        SortBy::State,
        SortBy::NextWake,
        SortBy::Undelivered,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SortBy::Id => "id",
            SortBy::Owner => "owner",
            SortBy::State => "state",
            SortBy::NextWake => "nextWake",
            SortBy::Undelivered => "undelivered",
        }
    }
}

/// Which spaces the table shows, by state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub enum StateFilter {
    #[default]
    All,
    Active,
    Parked,
    Quarantined,
}

impl StateFilter {
    pub const ALL: [StateFilter; 4] = [
        StateFilter::All,
        StateFilter::Active,
        StateFilter::Parked,
        StateFilter::Quarantined,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StateFilter::All => "all",
            StateFilter::Active => "active",
            StateFilter::Parked => "parked",
            StateFilter::Quarantined => "quarantined",
        }
    }
}

/// The spaces table's query string: `?q=&state=&sort=&desc=&page=`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(default)]
pub struct SpacesQuery {
    /// Text the id or the owner contains.
    pub q: String,
    pub state: StateFilter,
    pub sort: SortBy,
    pub desc: bool,
    /// From 0.
    pub page: usize,
}

impl SpacesQuery {
    /// This query with other settings, as a URL for a link.
    pub fn url(&self, change: impl FnOnce(&mut SpacesQuery)) -> String {
        let mut q = self.clone();
        change(&mut q);
        let mut url = format!(
            "/console/spaces?sort={}&state={}&page={}",
            q.sort.as_str(),
            q.state.as_str(),
            q.page
        );
        if q.desc {
            url.push_str("&desc=true");
        }
        if !q.q.is_empty() {
            url.push_str("&q=");
            url.push_str(&percent_encode(&q.q));
        }
        url
    }
}

/// A space's state as the console names it.
pub fn state_of(e: &SpaceEntry, active: &HashSet<String>) -> &'static str {
    if e.quarantined.is_some() {
        "quarantined"
    } else if active.contains(&e.id) {
        "active"
    } else {
        "parked"
    }
}

/// One page of the spaces table, and how many rows matched.
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    pub rows: Vec<SpaceEntry>,
    pub matched: usize,
    pub pages: usize,
    /// The page shown (the query's, clamped to the last).
    pub page: usize,
}

/// Filters, sorts and pages directory rows. Ties break by id, so a page
/// is stable while nothing changes.
pub fn select(
    mut all: Vec<SpaceEntry>,
    active: &HashSet<String>,
    query: &SpacesQuery,
) -> Selection {
    let needle = query.q.to_lowercase();
    all.retain(|e| {
        let text = needle.is_empty()
            || e.id.to_lowercase().contains(&needle)
            || e.owner.to_lowercase().contains(&needle);
        let state = match query.state {
            StateFilter::All => true,
            s => state_of(e, active) == s.as_str(),
        };
        text && state
    });
    let flip = |o: std::cmp::Ordering| if query.desc { o.reverse() } else { o };
    all.sort_by(|a, b| {
        let primary = match query.sort {
            SortBy::Id => flip(a.id.cmp(&b.id)),
            SortBy::Owner => flip(a.owner.cmp(&b.owner)),
            SortBy::State => flip(state_of(a, active).cmp(state_of(b, active))),
            // Spaces with no wake come last either way round.
            SortBy::NextWake => match (a.next_wake_ms, b.next_wake_ms) {
                (Some(x), Some(y)) => flip(x.cmp(&y)),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => std::cmp::Ordering::Equal,
            },
            SortBy::Undelivered => flip(b.undelivered.cmp(&a.undelivered)),
        };
        primary.then_with(|| a.id.cmp(&b.id))
    });
    let matched = all.len();
    let pages = matched.div_ceil(PAGE_ROWS).max(1);
    let page = query.page.min(pages - 1);
    let rows = all
        .into_iter()
        .skip(page * PAGE_ROWS)
        .take(PAGE_ROWS)
        .collect();
    Selection {
        rows,
        matched,
        pages,
        page,
    }
}

/// Percent-encodes a query value (everything but unreserved characters).
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The space page's filter of recent fires: `?outcome=&range=`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(default)]
pub struct FiresFilter {
    /// An outcome (`delivered`, `failed`, …); empty: every outcome.
    pub outcome: String,
    /// `hour`, `day` or `week` back from now; empty: as far as kept.
    pub range: String,
}

impl FiresFilter {
    /// The outcomes a fire can have, for the filter's choices.
    pub const OUTCOMES: [&'static str; 7] = [
        "delivered",
        "failed",
        "deadLettered",
        "fired",
        "retried",
        "suppressed",
        "skippedBudget",
    ];
    /// The ranges, with their length.
    pub const RANGES: [(&'static str, u64); 3] = [
        ("hour", 3_600_000),
        ("day", 86_400_000),
        ("week", 7 * 86_400_000),
    ];

    /// Why the filter cannot be applied, if it names what does not exist.
    pub fn check(&self) -> Result<(), String> {
        if !self.outcome.is_empty() && !Self::OUTCOMES.contains(&self.outcome.as_str()) {
            return Err(format!(
                "no fire has outcome {:?}; the outcomes are {}",
                self.outcome,
                Self::OUTCOMES.join(", ")
            ));
        }
        if !self.range.is_empty() && !Self::RANGES.iter().any(|(r, _)| *r == self.range) {
            return Err(format!(
                "the range is hour, day or week (not {:?})",
                self.range
            ));
        }
        Ok(())
    }

    /// Whether `fire` passes, seen at `now_ms`.
    pub fn keeps(&self, fire: &crate::store::FireRecord, now_ms: u64) -> bool {
        let outcome = self.outcome.is_empty() || fire.outcome == self.outcome;
        let since = Self::RANGES
            .iter()
            .find(|(r, _)| *r == self.range)
            .map_or(0, |(_, ms)| now_ms.saturating_sub(*ms));
        outcome && fire.fired_ms >= since
    }

    pub fn is_set(&self) -> bool {
        !self.outcome.is_empty() || !self.range.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::FiresFilter;

    #[test]
    fn the_fires_filter_keeps_an_outcome_within_a_range() {
        let fire = |outcome: &str, fired_ms: u64| crate::store::FireRecord {
            piece: "p".into(),
            entry: 0,
            fired_ms,
            event_id: "wake/p/0/0/1".into(),
            period: 1,
            due_ms: fired_ms,
            missed_periods: 0,
            outcome: outcome.into(),
            run: Default::default(),
        };
        let now = 10 * 86_400_000;
        let all = FiresFilter::default();
        assert!(all.keeps(&fire("delivered", 0), now) && !all.is_set());
        let failed_today = FiresFilter {
            outcome: "failed".into(),
            range: "day".into(),
        };
        failed_today.check().unwrap();
        assert!(failed_today.keeps(&fire("failed", now - 3_600_000), now));
        assert!(!failed_today.keeps(&fire("failed", now - 2 * 86_400_000), now));
        assert!(!failed_today.keeps(&fire("delivered", now), now));
        let bad = FiresFilter {
            outcome: "exploded".into(),
            range: String::new(),
        };
        assert!(bad.check().unwrap_err().contains("delivered, failed"));
        let bad = FiresFilter {
            outcome: String::new(),
            range: "year".into(),
        };
        assert!(bad.check().unwrap_err().contains("hour, day or week"));
    }

    use super::*;

    fn entry(id: &str, owner: &str, wake: Option<u64>, undelivered: bool) -> SpaceEntry {
        SpaceEntry {
            id: id.into(),
            owner: owner.into(),
            created_ms: 0,
            next_wake_ms: wake,
            undelivered,
            quarantined: None,
            budget_policy: None,
        }
    }

    fn ids(s: &Selection) -> Vec<&str> {
        s.rows.iter().map(|e| e.id.as_str()).collect()
    }

    #[test]
    fn filters_by_text_and_state_then_sorts_with_ties_by_id() {
        let rows = vec![
            entry("b", "did:key:zAlice", Some(30), false),
            entry("a", "did:key:zBob", None, true),
            entry("c", "did:key:zAlice", Some(10), false),
            entry("d", "did:key:zCarol", Some(10), false),
        ];
        let active: HashSet<String> = ["c".to_string()].into();
        let q = |f: fn(&mut SpacesQuery)| {
            let mut q = SpacesQuery::default();
            f(&mut q);
            select(rows.clone(), &active, &q)
        };
        assert_eq!(ids(&q(|_| {})), ["a", "b", "c", "d"]);
        assert_eq!(ids(&q(|q| q.desc = true)), ["d", "c", "b", "a"]);
        assert_eq!(ids(&q(|q| q.sort = SortBy::NextWake)), ["c", "d", "b", "a"]);
        let next_wake_desc = q(|q| {
            q.sort = SortBy::NextWake;
            q.desc = true
        });
        assert_eq!(
            ids(&next_wake_desc),
            ["b", "c", "d", "a"],
            "no wake stays last"
        );
        assert_eq!(ids(&q(|q| q.q = "alice".into())), ["b", "c"]);
        assert_eq!(ids(&q(|q| q.state = StateFilter::Active)), ["c"]);
        assert_eq!(ids(&q(|q| q.state = StateFilter::Parked)), ["a", "b", "d"]);
        assert_eq!(
            ids(&q(|q| q.sort = SortBy::Undelivered)),
            ["a", "b", "c", "d"]
        );
    }

    #[test]
    fn pages_are_clamped_to_the_last() {
        let rows: Vec<SpaceEntry> = (0..(PAGE_ROWS * 2 + 3))
            .map(|i| entry(&format!("s{i:04}"), "o", None, false))
            .collect();
        let mut q = SpacesQuery {
            page: 2,
            ..Default::default()
        };
        let s = select(rows.clone(), &HashSet::new(), &q);
        assert_eq!(
            (s.matched, s.pages, s.page, s.rows.len()),
            (PAGE_ROWS * 2 + 3, 3, 2, 3)
        );
        q.page = 99;
        assert_eq!(select(rows, &HashSet::new(), &q).page, 2);
    }

    #[test]
    fn links_keep_the_query_and_encode_the_text() {
        let q = SpacesQuery {
            q: "a b&c".into(),
            sort: SortBy::Owner,
            ..Default::default()
        };
        assert_eq!(
            q.url(|q| q.page = 1),
            "/console/spaces?sort=owner&state=all&page=1&q=a%20b%26c"
        );
    }
}
