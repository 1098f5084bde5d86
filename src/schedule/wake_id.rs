//! A scheduled wake's identity: built and parsed here and nowhere else.
//!
//! ```text
//! wake/{piece}/{entry}/{anchor}/{period}            one occurrence on the grid
//! wake/{piece}/{entry}/{anchor}/{period}/at{ms}     an operator's extra occurrence
//! …/retry{n}                                        attempt n + 1 of an occurrence
//! ```
//!
//! The id is deterministic, so a re-delivered fire is deduplicated by the
//! store's idempotent append. The anchor (the declaration's indexing time)
//! is part of it because a changed declaration restarts at period 1, and its
//! first occurrence must not be mistaken for the old declaration's.
//! Pieces are document ids and never hold `/`.

use std::fmt;

/// The prefix every scheduled wake's event id starts with.
const PREFIX: &str = "wake/";

/// One wake event's identity.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WakeId {
    pub piece: String,
    pub entry: u32,
    /// The grid's anchor (`ScheduleRow::declared_at_ms`).
    pub anchor_ms: u64,
    /// The grid period the occurrence stands for.
    pub period: u64,
    /// An operator's extra occurrence, triggered at this time.
    pub triggered_at_ms: Option<u64>,
    /// A retry: the attempts already made before this one.
    pub retry: Option<u32>,
}

impl WakeId {
    /// Period `period` of an entry's grid.
    pub fn occurrence(piece: &str, entry: u32, anchor_ms: u64, period: u64) -> Self {
        WakeId {
            piece: piece.to_string(),
            entry,
            anchor_ms,
            period,
            triggered_at_ms: None,
            retry: None,
        }
    }

    /// An operator's extra occurrence at `at_ms`, during grid period
    /// `period`: beside the grid's own, never one of them.
    pub fn triggered(piece: &str, entry: u32, anchor_ms: u64, period: u64, at_ms: u64) -> Self {
        WakeId {
            triggered_at_ms: Some(at_ms),
            ..Self::occurrence(piece, entry, anchor_ms, period)
        }
    }

    /// The retry of this occurrence after `attempts` attempts.
    pub fn retry(&self, attempts: u32) -> Self {
        WakeId {
            retry: Some(attempts),
            ..self.clone()
        }
    }

    /// The occurrence this wake delivers (itself, without its retry).
    pub fn occurrence_id(&self) -> Self {
        WakeId {
            retry: None,
            ..self.clone()
        }
    }

    /// Reads a wake event id; `None` for any other event (or a malformed id).
    pub fn parse(id: &str) -> Option<Self> {
        let rest = id.strip_prefix(PREFIX)?;
        let (rest, retry) = match rest.rsplit_once("/retry") {
            Some((head, n)) => (head, Some(n.parse().ok()?)),
            None => (rest, None),
        };
        let mut parts = rest.split('/');
        let piece = parts.next().filter(|p| !p.is_empty())?.to_string();
        let entry = parts.next()?.parse().ok()?;
        let anchor_ms = parts.next()?.parse().ok()?;
        let period = parts.next()?.parse().ok()?;
        let triggered_at_ms = match parts.next() {
            Some(at) => Some(at.strip_prefix("at")?.parse().ok()?),
            None => None,
        };
        if parts.next().is_some() {
            return None;
        }
        Some(WakeId {
            piece,
            entry,
            anchor_ms,
            period,
            triggered_at_ms,
            retry,
        })
    }

    /// Whether `id` names a scheduled wake (cheap: no allocation).
    pub fn is_wake(id: &str) -> bool {
        id.starts_with(PREFIX)
    }
}

impl fmt::Display for WakeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX}{}/{}/{}/{}",
            self.piece, self.entry, self.anchor_ms, self.period
        )?;
        if let Some(at) = self.triggered_at_ms {
            write!(f, "/at{at}")?;
        }
        if let Some(n) = self.retry {
            write!(f, "/retry{n}")?;
        }
        Ok(())
    }
}

/// The occurrence a wake event id delivers, as text (the id itself when it
/// is not a wake's).
pub fn occurrence_of(event_id: &str) -> String {
    WakeId::parse(event_id).map_or_else(|| event_id.to_string(), |w| w.occurrence_id().to_string())
}

/// The event id of the retry of `occurrence` after `attempts` attempts
/// (an id that is not a wake's gets the same suffix, so it stays unique).
pub fn retry_of(occurrence: &str, attempts: u32) -> String {
    WakeId::parse(occurrence).map_or_else(
        || format!("{occurrence}/retry{attempts}"),
        |w| w.retry(attempts).to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shape_round_trips() {
        let o = WakeId::occurrence("pc-1", 2, 1_700_000_000_000, 7);
        assert_eq!(o.to_string(), "wake/pc-1/2/1700000000000/7");
        let t = WakeId::triggered("pc-1", 2, 5, 7, 99);
        assert_eq!(t.to_string(), "wake/pc-1/2/5/7/at99");
        let r = t.retry(3);
        assert_eq!(r.to_string(), "wake/pc-1/2/5/7/at99/retry3");
        for w in [o, t, r.clone()] {
            assert_eq!(WakeId::parse(&w.to_string()), Some(w));
        }
        assert_eq!(r.occurrence_id().to_string(), "wake/pc-1/2/5/7/at99");
        assert_eq!(occurrence_of("wake/pc-1/2/5/7/retry1"), "wake/pc-1/2/5/7");
    }

    #[test]
    fn ids_differ_by_declaration_and_period() {
        let a = WakeId::occurrence("pc-1", 0, 10, 1).to_string();
        assert_ne!(a, WakeId::occurrence("pc-1", 0, 11, 1).to_string());
        assert_ne!(a, WakeId::occurrence("pc-1", 0, 10, 2).to_string());
        assert_ne!(a, WakeId::occurrence("pc-1", 1, 10, 1).to_string());
    }

    #[test]
    fn other_events_and_malformed_ids_are_not_wakes() {
        for id in [
            "evt-1",
            "wake/",
            "wake/pc/x/1/1",
            "wake/pc/0/1",
            "wake/pc/0/1/1/b5",
            "wake/pc/0/1/1/at5/extra",
            "wake/pc/0/1/1/retryx",
            "wake//0/1/1",
        ] {
            assert_eq!(WakeId::parse(id), None, "{id}");
        }
        assert_eq!(occurrence_of("evt-1"), "evt-1");
    }
}
