//! `wish("#now")` and `wish("#now/N")`: host nodes (kind `"clock"`) whose
//! result the runtime computes from the host clock, never the sandbox.
//!
//! The one-shot `#now` is the time (to the second) at which the node first
//! ran; its inputs hash never changes, so that first value is kept across
//! tenures and restarts. `#now/N` is the clock on an N-second grid: its
//! inputs hash names the grid tick, so it runs again when the tick moves.
//! A node whose tick has moved is made stale before a wave or a read
//! ([`SpaceRuntime::advance_clocks`]); the space server asks for a wave at
//! the next boundary of each clock that something pulled in this tenure
//! ([`SpaceRuntime::next_clock_tick`]), so a session tracking a value that
//! reads it sees it move. Nothing else acts on a tick: it is not activity
//! (a space with no session parks on time), and a parked space is never
//! woken for one (a `[SCHEDULE]` does that).

use super::*;

/// The grid of the one-shot `#now`: the reference keeps it to the second.
const ONE_SHOT_GRID_MS: u64 = 1000;

/// The tick of `now_ms` on a clock's grid (`interval_ms` 0: the one-shot).
pub(super) fn tick_of(now_ms: u64, interval_ms: u64) -> u64 {
    let grid = if interval_ms == 0 {
        ONE_SHOT_GRID_MS
    } else {
        interval_ms
    };
    now_ms / grid * grid
}

/// What a clock node's run depends on: nothing for the one-shot (its first
/// value stands), the tick for a grid.
fn inputs_hash(interval_ms: u64, tick: u64) -> String {
    if interval_ms == 0 {
        "clock once".to_string()
    } else {
        format!("clock {interval_ms} {tick}")
    }
}

/// The reference's result shape: the time, and it as the one candidate.
fn state(tick: u64) -> Value {
    json!({ "result": tick, "candidates": [tick] })
}

impl SpaceRuntime {
    /// Runs a clock node (already marked fresh by the caller), unless its
    /// stored value is for the current tick.
    pub(super) fn refresh_clock(&mut self, id: &str) -> RuntimeResult<()> {
        let interval = self.nodes[id]
            .def
            .args
            .get(0)
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let tick = tick_of(self.clock.now_ms(), interval);
        if interval > 0 {
            self.ticking.insert(id.to_string(), (interval, tick));
        }
        let hash = inputs_hash(interval, tick);
        if self.doc(id)?.is_some() && self.action_hash.get(id) == Some(&hash) {
            self.counters.inc(Counter::DerivationsSkippedFresh);
            return Ok(());
        }
        self.write(id, &[], state(tick))?;
        self.counters.inc(Counter::ClockTicks);
        self.action_hash.insert(id.to_string(), hash.clone());
        self.hashes_to_store.insert(id.to_string(), hash);
        Ok(())
    }

    /// Makes stale every clock whose tick has moved since it ran, and their
    /// readers; such a clock is forgotten until something pulls it again.
    pub(super) fn advance_clocks(&mut self) {
        if self.ticking.is_empty() {
            return;
        }
        let now = self.clock.now_ms();
        let moved: Vec<String> = self
            .ticking
            .iter()
            .filter(|(_, (interval, tick))| tick_of(now, *interval) != *tick)
            .map(|(id, _)| id.clone())
            .collect();
        for id in moved {
            self.ticking.remove(&id);
            self.fresh.remove(&id);
            self.invalidate(&id);
        }
    }

    /// The next grid boundary of a clock pulled this tenure, on the host
    /// clock: when a wave would move it.
    pub fn next_clock_tick(&self) -> Option<u64> {
        self.ticking
            .values()
            .map(|(interval, tick)| tick + interval)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_fall_on_the_grid_and_the_one_shot_keeps_the_second() {
        assert_eq!(tick_of(61_999, 60_000), 60_000);
        assert_eq!(tick_of(120_000, 60_000), 120_000);
        assert_eq!(tick_of(1_234, 0), 1_000);
        assert_eq!(
            inputs_hash(0, 5_000),
            inputs_hash(0, 9_000),
            "one-shot: one value"
        );
        assert_ne!(inputs_hash(60_000, 0), inputs_hash(60_000, 60_000));
        assert_eq!(state(7)["candidates"], json!([7]));
    }
}
