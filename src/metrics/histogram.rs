//! Host-wide histograms: durations a person asks quantiles of (how late
//! are wakes, how long do waves and activations take, how long do effects
//! wait). Served on `/metrics` only, as real Prometheus histograms usable
//! with `histogram_quantile`; the health route's JSON keeps its own shape.
//!
//! Invariant: an observation is two relaxed atomic adds (its bucket and the
//! sum); buckets are fixed at compile time, so a histogram is a fixed block
//! of atomics and the series it adds never grow with spaces.

use std::sync::atomic::{AtomicU64, Ordering};

/// The histograms spacewake keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Hist {
    WakeLateness,
    WaveDuration,
    ActivationDuration,
    EffectDuration,
}

impl Hist {
    pub const ALL: &'static [Hist] = &[
        Hist::WakeLateness,
        Hist::WaveDuration,
        Hist::ActivationDuration,
        Hist::EffectDuration,
    ];

    /// The family's name without its unit (`_seconds` is added when encoded).
    pub fn family(self) -> &'static str {
        match self {
            Hist::WakeLateness => "spacewake_schedule_wake_lateness",
            Hist::WaveDuration => "spacewake_wave_duration",
            Hist::ActivationDuration => "spacewake_activation_duration",
            Hist::EffectDuration => "spacewake_effect_duration",
        }
    }

    pub fn help(self) -> &'static str {
        match self {
            Hist::WakeLateness => "How late scheduled wakes fired: fire time minus due time",
            Hist::WaveDuration => "Wall time of metered waves (both buckets)",
            Hist::ActivationDuration => {
                "Time from a space server's start to a running runtime (file opened, lease taken, pieces loaded)"
            }
            Hist::EffectDuration => {
                "Time from an effect request's submission to its outcome (response, failure or refusal)"
            }
        }
    }

    /// Upper bounds of the buckets, in seconds (`+Inf` is implied).
    pub fn bounds(self) -> &'static [f64] {
        match self {
            // Early-never-late: most wakes land within a few ms; a backlog
            // or downtime shows in the upper buckets.
            Hist::WakeLateness => &[
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
            ],
            Hist::WaveDuration => &[
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
            ],
            Hist::ActivationDuration => &[
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ],
            Hist::EffectDuration => &[
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
            ],
        }
    }
}

/// The most buckets any [`Hist`] has, `+Inf` included.
const SLOTS: usize = 15;

/// One histogram: per-bucket counts (not cumulative) and the sum in µs.
#[derive(Debug, Default)]
pub struct Histogram {
    counts: [AtomicU64; SLOTS],
    sum_us: AtomicU64,
}

/// Which bucket `us` falls in: the first bound at or above it, or `+Inf`.
pub fn bucket_of(bounds: &[f64], us: u64) -> usize {
    let secs = us as f64 / 1e6;
    bounds
        .iter()
        .position(|&b| secs <= b)
        .unwrap_or(bounds.len())
}

impl Histogram {
    pub fn observe(&self, bounds: &[f64], us: u64) {
        self.counts[bucket_of(bounds, us)].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    /// `(sum in seconds, count, [(upper bound, count in that bucket)])`,
    /// the last bound `f64::MAX` standing for `+Inf`, as the encoder takes it.
    pub fn snapshot(&self, bounds: &[f64]) -> (f64, u64, Vec<(f64, u64)>) {
        let buckets: Vec<(f64, u64)> = bounds
            .iter()
            .chain(std::iter::once(&f64::MAX))
            .zip(&self.counts)
            .map(|(&b, n)| (b, n.load(Ordering::Relaxed)))
            .collect();
        let count = buckets.iter().map(|(_, n)| n).sum();
        let sum = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        (sum, count, buckets)
    }
}

/// One [`Histogram`] per [`Hist`].
#[derive(Debug, Default)]
pub struct Histograms([Histogram; 4]);

impl Histograms {
    pub fn observe(&self, h: Hist, us: u64) {
        self.0[h as usize].observe(h.bounds(), us);
    }
    pub fn snapshot(&self, h: Hist) -> (f64, u64, Vec<(f64, u64)>) {
        self.0[h as usize].snapshot(h.bounds())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_histogram_fits_its_slots_and_its_bounds_rise() {
        for &h in Hist::ALL {
            assert!(h.bounds().len() < SLOTS, "{h:?}");
            assert!(h.bounds().windows(2).all(|w| w[0] < w[1]), "{h:?}");
        }
    }

    #[test]
    fn an_observation_lands_in_the_first_bucket_at_or_above_it() {
        let b = Hist::WakeLateness.bounds();
        assert_eq!(bucket_of(b, 0), 0);
        assert_eq!(bucket_of(b, 5_000), 0, "a bound is inclusive (le)");
        assert_eq!(bucket_of(b, 5_001), 1);
        assert_eq!(bucket_of(b, 1_000_000), 7);
        assert_eq!(bucket_of(b, 3_600_000_000), b.len(), "+Inf");
        let hs = Histograms::default();
        hs.observe(Hist::WakeLateness, 3_000);
        hs.observe(Hist::WakeLateness, 2_000_000);
        hs.observe(Hist::WakeLateness, 3_600_000_000);
        let (sum, count, buckets) = hs.snapshot(Hist::WakeLateness);
        assert_eq!(count, 3);
        assert!((sum - 3_602.003).abs() < 1e-9, "{sum}");
        assert_eq!(buckets.len(), b.len() + 1);
        assert_eq!(buckets[0], (0.005, 1));
        assert_eq!(buckets[8], (2.5, 1));
        assert_eq!(buckets[b.len()], (f64::MAX, 1));
    }
}
