//! What a PostgreSQL handle knows of its space, for a tenure's
//! transactions to rely on instead of reading (`spec/fleet.md`, *A
//! transaction in one statement*).

use crate::store::plane::ScheduleRow;

/// What a handle knows of its space as of its opening read or its own last
/// transaction: the head seq, the schedule's revision and its rows. A
/// transaction that relies on it instead of reading sends it as checks
/// (`spacewake_check`, migration 18): if the space moved meanwhile, the
/// transaction writes nothing and fails with
/// [`StoreError::Stale`](crate::store::StoreError::Stale), and the
/// handle forgets it. While a host holds a space's lease nothing else
/// writes it, so it holds through a tenure, and a wake's transactions are
/// one statement each (`spec/fleet.md`, *A transaction in one statement*).
#[derive(Debug, Clone)]
pub(super) struct Known {
    pub head: u64,
    pub rev: i64,
    pub schedule: Vec<ScheduleRow>,
}

impl Known {
    /// What the handle knows after a transaction that relied on it
    /// committed (`sent`: what it returned, `head`: the head it left,
    /// `upserts`: the entries it wrote); `None` when it reshaped the
    /// schedule (see [`PgPlane::reshaped`](super::plane::PgPlane)).
    pub(super) fn after(
        mut self: Box<Self>,
        sent: &serde_json::Value,
        head: Option<u64>,
        upserts: &[ScheduleRow],
        reshaped: bool,
    ) -> Option<Box<Known>> {
        if reshaped {
            return None;
        }
        self.head = head.unwrap_or(self.head);
        self.rev = sent["schedule_rev"].as_i64().unwrap_or(self.rev);
        if !upserts.is_empty() {
            self.schedule = known_with(&self.schedule, upserts, None);
        }
        Some(self)
    }
}

/// The rows of `known` (of `piece` only, when given) with `upserts` written
/// over them, the last write of an entry winning (each upsert is of an
/// entry `known` holds: see `PgPlane::reshaped`).
pub(super) fn known_with(
    known: &[ScheduleRow],
    upserts: &[ScheduleRow],
    piece: Option<&str>,
) -> Vec<ScheduleRow> {
    known
        .iter()
        .filter(|r| piece.is_none_or(|p| r.piece == p))
        .map(|r| {
            let written = upserts
                .iter()
                .rev()
                .find(|u| u.piece == r.piece && u.entry == r.entry);
            written.unwrap_or(r).clone()
        })
        .collect()
}
