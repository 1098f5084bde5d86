//! Operator actions on schedule entries: pause, resume, trigger now. Plane
//! writes only; the directory follows by the early-never-late rule (a
//! trigger moves the space's wake earlier before its transaction commits).

use crate::store::{ScheduleStatus, Space, StoreError, StoreResult};

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
    space.plane(|p| p.upsert_schedule(&row))?;
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

/// Makes an entry due now; the firing consumes its current period.
pub fn trigger_now(
    space: &mut Space,
    piece: &str,
    entry: u32,
    now_ms: u64,
) -> StoreResult<crate::store::ScheduleRow> {
    with_row(space, piece, entry, |r| {
        r.status = ScheduleStatus::Active;
        r.next_due_ms = r.next_due_ms.min(now_ms);
    })
}
