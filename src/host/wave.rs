//! One wave with scheduled-wake delivery around it: the orchestration that
//! drives the runtime for the schedule's bookkeeping, run by the space
//! server and by the scenario runner (so a scenario's `advanceMinutes` is
//! the host running).
//!
//! In order: wake events about to run are marked in flight (durably, each
//! attempt counted; an attempt found still in flight died with its process
//! and is consumed unrun), the wave runs, and inside its own transaction
//! `schedule::delivery` settles each wake it consumed.

use crate::runtime::{RuntimeResult, SpaceRuntime, WaveReport};
use crate::schedule::backoff::BackoffPolicy;
use crate::schedule::delivery::{
    before_wave, crash_point, settle_delivery, CrashPoint, DeliveryReport,
};
use crate::schedule::WakeId;

/// One wave with wake accounting around it, under the default back-off.
pub fn run_wave(
    rt: &mut SpaceRuntime,
    now_ms: u64,
    limit: usize,
) -> RuntimeResult<(WaveReport, DeliveryReport)> {
    run_wave_with(rt, now_ms, limit, &BackoffPolicy::default())
}

/// [`run_wave`] under an explicit back-off policy.
pub fn run_wave_with(
    rt: &mut SpaceRuntime,
    now_ms: u64,
    limit: usize,
    backoff: &BackoffPolicy,
) -> RuntimeResult<(WaveReport, DeliveryReport)> {
    // Read once: the wake accounting looks at them, then the wave runs them.
    let events = rt.space().undelivered_events(limit)?;
    let pending = before_wave(rt.space(), &events)?;
    if pending.marked > 0 {
        crash_point(CrashPoint::MidWave);
    }
    let mut delivery = DeliveryReport::default();
    let wave = rt.run_wave_on(events, &pending.crashed, &mut |wave, plane| {
        delivery = settle_delivery(plane, &wave.outcome(), now_ms, backoff)?;
        Ok(())
    })?;
    if wave.delivered.iter().any(|id| WakeId::is_wake(id)) {
        crash_point(CrashPoint::AfterWave);
    }
    Ok((wave, delivery))
}
