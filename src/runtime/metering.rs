//! Metering: the compute of each wave, booked to the ledger in the wave's
//! commit, and the per-action attribution written every few waves.

use super::*;

/// The compute of the wave in progress, until it commits.
pub(super) struct Meter {
    pub(super) cpu_start_us: u64,
    pub(super) wall_start: crate::clock::Stopwatch,
    /// action id -> (piece, kind, wall ns, runs)
    /// By (piece, action): two instances of one pattern name their
    /// actions alike (`tick (s0)`), and each is billed apart.
    pub(super) actions: BTreeMap<(String, String), (&'static str, u64, u64)>,
}

/// Waves between writes of the per-action attribution.
pub(super) const COST_FLUSH_WAVES: u32 = 32;

/// (piece, action, kind, pattern, cpu µs, wall µs, runs) of one action.
pub(super) type CostRow = (String, String, &'static str, String, u64, u64, u64);
/// (window start, piece, action)
pub(super) type CostKey = (u64, String, String);
/// (kind, pattern, cpu µs, wall µs, runs)
pub(super) type CostTally = (&'static str, String, u64, u64, u64);

impl SpaceRuntime {
    pub(super) fn meter_begin(&mut self) {
        if self.cfg.metering && self.meter.is_none() {
            self.meter = Some(Meter {
                cpu_start_us: crate::accounting::thread_cpu_us(),
                wall_start: crate::clock::Stopwatch::start(),
                actions: BTreeMap::new(),
            });
        }
    }

    /// Books one run of the action `id` (a stream or node of `piece`),
    /// named as the source names it with its id in the piece beside
    /// (`sweep (s0)`, `total (n2)`); by its id when it has no name. The
    /// name is made only while a meter is open.
    pub(super) fn meter_action(
        &mut self,
        id: &str,
        label: Option<&str>,
        piece: &str,
        kind: &'static str,
        took: std::time::Duration,
    ) {
        if let Some(m) = self.meter.as_mut() {
            let action = match label.filter(|l| !l.is_empty()) {
                Some(name) => {
                    let short = id
                        .strip_prefix(piece)
                        .and_then(|r| r.strip_prefix('/'))
                        .unwrap_or(id);
                    format!("{name} ({short})")
                }
                None => id.to_string(),
            };
            let e = m
                .actions
                .entry((piece.to_string(), action))
                .or_insert((kind, 0, 0));
            e.1 += took.as_nanos() as u64;
            e.2 += 1;
        }
    }

    /// Closes the meter: the ledger delta and each action's attributed cost.
    pub(super) fn meter_close(
        &mut self,
        committed: bool,
    ) -> Option<(crate::store::LedgerDelta, Vec<CostRow>)> {
        let m = self.meter.take()?;
        let cpu_us = crate::accounting::thread_cpu_us().saturating_sub(m.cpu_start_us);
        let wall_us = m.wall_start.elapsed().as_micros() as u64;
        let total_action_ns: u64 = m.actions.values().map(|a| a.1).sum::<u64>().max(1);
        let runs: u64 = m.actions.values().map(|a| a.2).sum();
        if runs == 0 && !committed && self.effect_tally == Default::default() {
            return None; // an idle wave costs nothing worth booking
        }
        let costs = m
            .actions
            .into_iter()
            .map(|((piece, action), (kind, ns, n))| {
                let pattern = self
                    .pieces
                    .get(&piece)
                    .map(|(hash, export)| match self.program_entries.get(hash) {
                        // As operators see it in the pieces list.
                        Some(entry) => format!("{entry}#{export}"),
                        None => format!("{export}@{}", &hash[..hash.len().min(12)]),
                    })
                    .unwrap_or_default();
                // The wave's CPU split by each action's share of action time.
                let share = (cpu_us as u128 * ns as u128 / total_action_ns as u128) as u64;
                (piece, action, kind, pattern, share, ns / 1_000, n)
            })
            .collect();
        let mut delta = crate::store::LedgerDelta {
            cpu_us,
            wall_us,
            waves: 1,
            actions: runs,
            commits: committed as u64,
            ..Default::default()
        };
        delta.add(&std::mem::take(&mut self.effect_tally));
        let c = &self.counters;
        c.add(
            match self.bucket {
                crate::store::Bucket::Scheduled => Counter::LedgerCpuUsScheduled,
                crate::store::Bucket::Session => Counter::LedgerCpuUsSession,
            },
            cpu_us as i64,
        );
        let (wall, waves) = match self.bucket {
            crate::store::Bucket::Scheduled => (
                Counter::LedgerWallUsScheduled,
                Counter::LedgerWavesScheduled,
            ),
            crate::store::Bucket::Session => {
                (Counter::LedgerWallUsSession, Counter::LedgerWavesSession)
            }
        };
        c.add(wall, wall_us as i64);
        c.observe(crate::metrics::Hist::WaveDuration, wall_us);
        c.inc(waves);
        c.inc(Counter::LedgerWaves);
        c.add(Counter::LedgerActions, runs as i64);
        Some((delta, costs))
    }

    /// Adds a wave's attribution to the buffer.
    pub(super) fn buffer_costs(&mut self, window: u64, costs: Vec<CostRow>) {
        for (piece, action, kind, pattern, cpu, wall, runs) in costs {
            let e = self
                .pending_costs
                .entry((window, piece, action))
                .or_insert((kind, pattern, 0, 0, 0));
            e.2 += cpu;
            e.3 += wall;
            e.4 += runs;
        }
        self.waves_since_costs += 1;
    }

    /// The buffered attribution, if it is due to be written (every
    /// [`COST_FLUSH_WAVES`] waves, or everything when `all`).
    pub(super) fn take_costs(&mut self, all: bool) -> Vec<(u64, CostRow)> {
        // A scheduled tenure usually runs one wave: its costs ride in that
        // wave's transaction rather than in one of their own at park.
        let every_wave = self.bucket == crate::store::Bucket::Scheduled;
        if !all && !every_wave && self.waves_since_costs < COST_FLUSH_WAVES {
            return Vec::new();
        }
        self.waves_since_costs = 0;
        std::mem::take(&mut self.pending_costs)
            .into_iter()
            .map(|((w, piece, action), (kind, pattern, cpu, wall, runs))| {
                (w, (piece, action, kind, pattern, cpu, wall, runs))
            })
            .collect()
    }
}

pub(super) fn write_costs(
    p: &mut crate::store::PlaneTx<'_>,
    costs: &[(u64, CostRow)],
) -> crate::store::StoreResult<()> {
    for (w, (piece, action, kind, pattern, cpu, wall, runs)) in costs {
        p.add_action_cost(*w, piece, action, kind, pattern, *cpu, *wall, *runs)?;
    }
    Ok(())
}
