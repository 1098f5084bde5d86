//! Compute accounting: waves metered by the executor thread's CPU clock into
//! a durable per-space ledger, with budgets enforced at activation.
//!
//! # What is measured
//! Each wave's CPU time is read from the thread's own CPU clock
//! (`CLOCK_THREAD_CPUTIME_ID`) at its start and at its commit. A space runs
//! on its own thread, so work done for another space is never billed here —
//! unlike wall time, which includes whatever else the machine was doing.
//! Within a wave, each action's share is its share of the wave's measured
//! action wall time (cheap to take per action; the wave's CPU total is the
//! bill, the split is for diagnosis).
//!
//! # Invariants
//! - The ledger row is written in the same transaction as the wave's commit
//!   (or as plane-only bookkeeping when the wave has nothing to commit): it
//!   is never ahead of or behind the work, and it survives restarts.
//! - Budgets are checked before activation only; a wave in flight is never
//!   cut short by them.
//! - Imports nothing from `schedule` or `runtime`: the waker asks this
//!   module for a budget verdict, and it never calls back up.

use crate::store::{Bucket, Space, StoreResult};

/// Ledger windows: one UTC day by default.
pub const DEFAULT_WINDOW_MS: u64 = 86_400_000;

/// The per-space override of the scheduled CPU budget (µs per window), kept
/// in the space's `space_policy` table.
pub const POLICY_SCHEDULED_BUDGET_US: &str = "scheduledCpuBudgetUs";

/// CPU time consumed by the calling thread so far, in microseconds.
pub fn thread_cpu_us() -> u64 {
    cpu_us(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU µs this process has used, all threads.
pub fn process_cpu_us() -> u64 {
    cpu_us(libc::CLOCK_PROCESS_CPUTIME_ID)
}

fn cpu_us(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

/// The start of the window holding `now_ms` (windows are aligned to the
/// epoch, so a one-day window is a UTC day).
pub fn window_start_ms(now_ms: u64, window_ms: u64) -> u64 {
    let w = window_ms.max(1);
    now_ms - now_ms % w
}

/// Whether a space that has spent `spent_us` of `budget_us` may be woken for
/// scheduled work. No budget: always.
pub fn may_activate_scheduled(spent_us: u64, budget_us: Option<u64>) -> bool {
    budget_us.is_none_or(|b| spent_us < b)
}

/// A space's own setting of its scheduled budget (its policy row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetOverride {
    /// No setting: the host's default applies.
    HostDefault,
    /// No budget, whatever the host's default.
    Unlimited,
    /// CPU µs per ledger window.
    CpuUs(u64),
}

impl BudgetOverride {
    /// What applies, given the host's default (`None`: unlimited).
    pub fn apply(self, host_default: Option<u64>) -> Option<u64> {
        match self {
            BudgetOverride::HostDefault => host_default,
            BudgetOverride::Unlimited => None,
            BudgetOverride::CpuUs(us) => Some(us),
        }
    }
}

/// The space's budget setting. An unreadable value reads as no setting.
pub fn budget_override(space: &mut Space) -> StoreResult<BudgetOverride> {
    let over = space.plane(|p| p.policy(POLICY_SCHEDULED_BUDGET_US))?;
    Ok(match over.as_deref() {
        Some("none") => BudgetOverride::Unlimited,
        Some(v) => v
            .parse()
            .map_or(BudgetOverride::HostDefault, BudgetOverride::CpuUs),
        None => BudgetOverride::HostDefault,
    })
}

/// Policy keys of a space's effect knobs (`crate::effects::budget::Overrides`).
pub const POLICY_EFFECTS_IN_FLIGHT: &str = "effectsInFlight";
pub const POLICY_EFFECTS_PER_SECOND: &str = "effectsPerSecond";
pub const POLICY_EFFECTS_BYTES_PER_SECOND: &str = "effectsBytesPerSecond";

/// The space's own settings of its effect knobs. An unreadable value reads
/// as no setting.
pub fn effect_overrides(space: &mut Space) -> StoreResult<crate::effects::budget::Overrides> {
    let mut get = |k: &str| space.plane(|p| p.policy(k));
    Ok(crate::effects::budget::Overrides {
        in_flight: get(POLICY_EFFECTS_IN_FLIGHT)?.and_then(|v| v.parse().ok()),
        per_second: get(POLICY_EFFECTS_PER_SECOND)?
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|r| r.is_finite() && *r > 0.0),
        bytes_per_second: get(POLICY_EFFECTS_BYTES_PER_SECOND)?.and_then(|v| v.parse().ok()),
    })
}

/// Stores the space's effect knobs (`None`: the host's default).
pub fn set_effect_overrides(
    space: &mut Space,
    o: &crate::effects::budget::Overrides,
) -> StoreResult<()> {
    let values = [
        (POLICY_EFFECTS_IN_FLIGHT, o.in_flight.map(|n| n.to_string())),
        (
            POLICY_EFFECTS_PER_SECOND,
            o.per_second.map(|r| r.to_string()),
        ),
        (
            POLICY_EFFECTS_BYTES_PER_SECOND,
            o.bytes_per_second.map(|b| b.to_string()),
        ),
    ];
    for (k, v) in values {
        space.plane(|p| p.set_policy(k, v.as_deref()))?;
    }
    Ok(())
}

/// Stores the space's budget setting.
pub fn set_budget_override(space: &mut Space, o: BudgetOverride) -> StoreResult<()> {
    let value = match o {
        BudgetOverride::HostDefault => None,
        BudgetOverride::Unlimited => Some("none".to_string()),
        BudgetOverride::CpuUs(us) => Some(us.to_string()),
    };
    space.plane(|p| p.set_policy(POLICY_SCHEDULED_BUDGET_US, value.as_deref()))
}

/// The scheduled budget that applies to `space`: its override if set
/// (`none` lifts the host default), else the host's.
pub fn scheduled_budget_us(
    space: &mut Space,
    host_default: Option<u64>,
) -> StoreResult<Option<u64>> {
    Ok(budget_override(space)?.apply(host_default))
}

/// Whether `budget_us` (the budget that applies; `None`: unlimited) is spent
/// by the space's `scheduled` bucket in the window at `now_ms`.
pub fn scheduled_budget_spent(
    space: &mut Space,
    budget_us: Option<u64>,
    now_ms: u64,
    window_ms: u64,
) -> StoreResult<bool> {
    if budget_us.is_none() {
        return Ok(false);
    }
    let spent = scheduled_spent_us(space, now_ms, window_ms)?;
    Ok(!may_activate_scheduled(spent, budget_us))
}

/// CPU µs the space's `scheduled` bucket has spent in the window at `now_ms`.
pub fn scheduled_spent_us(space: &mut Space, now_ms: u64, window_ms: u64) -> StoreResult<u64> {
    let start = window_start_ms(now_ms, window_ms);
    Ok(space
        .ledger()?
        .iter()
        .filter(|r| r.bucket == Bucket::Scheduled && r.window_start_ms == start)
        .map(|r| r.totals.cpu_us)
        .sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_utc_days_by_default() {
        let day = DEFAULT_WINDOW_MS;
        assert_eq!(window_start_ms(3 * day + 5, day), 3 * day);
        assert_eq!(window_start_ms(3 * day, day), 3 * day);
        assert_eq!(
            window_start_ms(17, 0),
            17,
            "a zero window degenerates to 1 ms"
        );
    }

    #[test]
    fn a_spent_budget_refuses_scheduled_activation() {
        assert!(may_activate_scheduled(10, None));
        assert!(may_activate_scheduled(999, Some(1_000)));
        assert!(!may_activate_scheduled(1_000, Some(1_000)));
    }

    #[test]
    fn the_thread_cpu_clock_moves_with_work_on_this_thread() {
        // Spin for 50 ms of wall time with work the optimiser cannot fold
        // away (a fixed loop of arithmetic was folded into a formula and
        // left the clock where it was); even a busy machine gives this
        // thread at least 1 ms of CPU in that time.
        let a = thread_cpu_us();
        let started = crate::clock::Stopwatch::start();
        let mut x = 0u64;
        while !started.passed(std::time::Duration::from_millis(50)) {
            for i in 0..10_000u64 {
                x = x.wrapping_add(std::hint::black_box(i) * i);
            }
        }
        std::hint::black_box(x);
        let spent = thread_cpu_us() - a;
        assert!(
            spent >= 1_000,
            "{spent} µs of thread CPU in 50 ms of spinning"
        );
    }
}
