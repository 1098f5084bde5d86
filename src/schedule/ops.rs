//! Operator actions on schedule entries: pause, resume, trigger now. Plane
//! writes only; the directory follows by the early-never-late rule (a
//! trigger moves the space's wake earlier before its transaction commits).

use crate::store::{PendingWake, ScheduleRow, ScheduleStatus, Space, StoreError, StoreResult};

fn with_row(
    space: &mut Space,
    piece: &str,
    entry: u32,
    f: impl FnOnce(&mut crate::store::ScheduleRow),
) -> StoreResult<crate::store::ScheduleRow> {
    let mut row = space
        .schedule(Some(piece))?
        .into_iter()
        .find(|r| r.entry == entry)
        .ok_or_else(|| {
            StoreError::InvalidCommit(format!("piece {piece} has no schedule entry {entry}"))
        })?;
    f(&mut row);
    super::entry::save_in(space, &mut row)?;
    Ok(row)
}

/// Stops an entry from firing; it stays indexed.
pub fn pause(space: &mut Space, piece: &str, entry: u32) -> StoreResult<crate::store::ScheduleRow> {
    with_row(space, piece, entry, |r| {
        // Its pending retries stay: the directory and the firing pass look
        // at active entries only, and a resumed entry retries them.
        r.status = ScheduleStatus::Paused;
    })
}

/// Lets a paused (or dead) entry fire again. If its due time passed while
/// paused, it fires at the next opportunity and the missed periods coalesce.
pub fn resume(
    space: &mut Space,
    piece: &str,
    entry: u32,
) -> StoreResult<crate::store::ScheduleRow> {
    with_row(space, piece, entry, |r| r.status = ScheduleStatus::Active)
}

/// Plans an extra occurrence of an entry, due now, beside its grid: the
/// next period stays due when it was. A paused entry becomes active.
pub fn trigger_now(
    space: &mut Space,
    piece: &str,
    entry: u32,
    now_ms: u64,
) -> StoreResult<crate::store::ScheduleRow> {
    let id = space.id().to_string();
    with_row(space, piece, entry, |r| {
        r.status = ScheduleStatus::Active;
        plan_trigger(&id, r, now_ms);
    })
}

/// The extra occurrence of a trigger at `now_ms` (pure): a pending wake
/// not yet tried (no attempts), due now, in the grid period under way. The
/// firing pass fires it as its own occurrence; if it fails it is retried
/// like any other. A second trigger in the same millisecond is the same
/// occurrence.
pub fn plan_trigger(space: &str, row: &mut ScheduleRow, now_ms: u64) {
    let period = super::cadence::Cadence::of_row(row).period_at(space, row, now_ms);
    let occurrence = super::wake_id::WakeId::triggered(
        &row.piece,
        row.entry,
        row.declared_at_ms,
        period,
        now_ms,
    )
    .to_string();
    if row.pending.iter().any(|p| p.occurrence == occurrence) {
        return;
    }
    row.pending.push(PendingWake {
        occurrence,
        period,
        attempts: 0,
        inflight: None,
        retry_due_ms: Some(now_ms),
    });
}
