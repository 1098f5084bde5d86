//! Waves and events per second over the last hour: counter samples taken
//! every [`SAMPLE_MS`] on the host clock (and at each host page load),
//! turned into rates between consecutive samples. Pure: the shell that
//! samples is in `http/console.rs`.

use std::collections::VecDeque;

/// How often the sampler looks.
pub const SAMPLE_MS: u64 = 10_000;
/// How far back rates are kept.
pub const SPAN_MS: u64 = 3_600_000;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub at_ms: u64,
    pub waves: u64,
    pub events: u64,
}

use crate::operator::Throughput;

#[derive(Debug, Default)]
pub struct Rates {
    samples: VecDeque<Sample>,
}

impl Rates {
    /// Keeps `s` unless the last sample is under a second older; drops
    /// what is past the span.
    pub fn record(&mut self, s: Sample) {
        if self
            .samples
            .back()
            .is_some_and(|l| s.at_ms < l.at_ms + 1_000)
        {
            return;
        }
        self.samples.push_back(s);
        while self
            .samples
            .front()
            .is_some_and(|f| f.at_ms + SPAN_MS + SAMPLE_MS < s.at_ms)
        {
            self.samples.pop_front();
        }
    }

    /// Rates between consecutive samples, oldest first. A counter that went
    /// down (it cannot; a restart would) reads as zero.
    pub fn rates(&self) -> Vec<Throughput> {
        self.samples
            .iter()
            .zip(self.samples.iter().skip(1))
            .map(|(a, b)| {
                let secs = (b.at_ms - a.at_ms) as f64 / 1_000.0;
                Throughput {
                    until_ms: b.at_ms,
                    waves_per_s: b.waves.saturating_sub(a.waves) as f64 / secs,
                    events_per_s: b.events.saturating_sub(a.events) as f64 / secs,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_between_samples_within_the_hour() {
        let mut r = Rates::default();
        r.record(Sample {
            at_ms: 0,
            waves: 0,
            events: 0,
        });
        r.record(Sample {
            at_ms: 500,
            waves: 9,
            events: 9,
        }); // too soon: ignored
        r.record(Sample {
            at_ms: 10_000,
            waves: 20,
            events: 50,
        });
        r.record(Sample {
            at_ms: 20_000,
            waves: 20,
            events: 60,
        });
        let rates = r.rates();
        assert_eq!(rates.len(), 2);
        assert_eq!((rates[0].waves_per_s, rates[0].events_per_s), (2.0, 5.0));
        assert_eq!((rates[1].waves_per_s, rates[1].events_per_s), (0.0, 1.0));
        r.record(Sample {
            at_ms: 20_000 + SPAN_MS + SAMPLE_MS + 1,
            waves: 30,
            events: 60,
        });
        assert!(
            r.rates().iter().all(|x| x.until_ms > 20_000),
            "the old ones went"
        );
    }
}
