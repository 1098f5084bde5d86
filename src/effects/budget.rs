//! A space's egress budget: how many requests it may have in flight, and a
//! token bucket pacing its requests and the bytes it receives. Pure: every
//! decision takes `now_ms` (the host clock) and returns what to do.
//!
//! A request the budget does not admit is *held*, not dropped: the broker
//! queues it and asks again when one of the space's requests finishes or
//! at the time [`Admit::Hold`] names.

/// The knobs, per space (`--effects-in-flight`, `--effects-per-second`,
/// `--effects-bytes-per-second`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Requests of one space on their way at once.
    pub in_flight: usize,
    /// Requests a second, sustained; a space may spend `request_burst` at once.
    pub requests_per_second: f64,
    pub request_burst: f64,
    /// Bytes received a second, sustained; `byte_burst` at once. A response
    /// spends its bytes when it arrives; a bucket in debt holds what follows.
    pub bytes_per_second: f64,
    pub byte_burst: f64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            in_flight: 8,
            requests_per_second: 2.0,
            request_burst: 20.0,
            bytes_per_second: 1024.0 * 1024.0,
            byte_burst: 8.0 * 1024.0 * 1024.0,
        }
    }
}

/// A space's own settings of its knobs (operator API, CLI, console), each
/// over the host's default when set.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Overrides {
    pub in_flight: Option<usize>,
    pub per_second: Option<f64>,
    pub bytes_per_second: Option<u64>,
}

impl Overrides {
    /// The host's limits with these settings applied; a sustained rate
    /// keeps the host's ratio of burst to rate.
    pub fn apply(&self, host: &Limits) -> Limits {
        let mut l = *host;
        if let Some(n) = self.in_flight {
            l.in_flight = n.max(1);
        }
        if let Some(r) = self.per_second {
            let r = r.max(0.001);
            l.request_burst = (host.request_burst * r / host.requests_per_second).max(1.0);
            l.requests_per_second = r;
        }
        if let Some(b) = self.bytes_per_second {
            let b = b.max(1) as f64;
            l.byte_burst = host.byte_burst * b / host.bytes_per_second;
            l.bytes_per_second = b;
        }
        l
    }

    pub fn is_empty(&self) -> bool {
        *self == Overrides::default()
    }
}

/// Whether a request may go now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    Go,
    /// Wait: until one of the space's requests finishes (`at_ms: None`), or
    /// until the bucket holds a token again.
    Hold {
        at_ms: Option<u64>,
    },
}

/// One space's state.
#[derive(Debug, Clone, PartialEq)]
pub struct SpaceBudget {
    in_flight: usize,
    requests: f64,
    bytes: f64,
    at_ms: u64,
}

impl SpaceBudget {
    /// Full buckets.
    pub fn new(limits: &Limits, now_ms: u64) -> Self {
        SpaceBudget {
            in_flight: 0,
            requests: limits.request_burst,
            bytes: limits.byte_burst,
            at_ms: now_ms,
        }
    }

    fn refill(&mut self, limits: &Limits, now_ms: u64) {
        let secs = now_ms.saturating_sub(self.at_ms) as f64 / 1000.0;
        self.at_ms = self.at_ms.max(now_ms);
        self.requests =
            (self.requests + secs * limits.requests_per_second).min(limits.request_burst);
        self.bytes = (self.bytes + secs * limits.bytes_per_second).min(limits.byte_burst);
    }

    /// Whether one more request may start; starting it takes a token and a
    /// place in flight.
    pub fn admit(&mut self, limits: &Limits, now_ms: u64) -> Admit {
        self.refill(limits, now_ms);
        if self.in_flight >= limits.in_flight.max(1) {
            return Admit::Hold { at_ms: None };
        }
        if self.requests < 1.0 || self.bytes < 0.0 {
            let need_req = if self.requests < 1.0 {
                (1.0 - self.requests) / limits.requests_per_second.max(1e-9)
            } else {
                0.0
            };
            let need_bytes = if self.bytes < 0.0 {
                -self.bytes / limits.bytes_per_second.max(1e-9)
            } else {
                0.0
            };
            // Less a hair, so float noise (1 - 0.999) does not add a millisecond.
            let wait_ms = (need_req.max(need_bytes) * 1000.0 - 1e-6).ceil() as u64;
            return Admit::Hold {
                at_ms: Some(now_ms + wait_ms.max(1)),
            };
        }
        self.requests -= 1.0;
        self.in_flight += 1;
        Admit::Go
    }

    /// A request finished, having received `bytes`.
    pub fn finished(&mut self, limits: &Limits, now_ms: u64, bytes: usize) {
        self.refill(limits, now_ms);
        self.in_flight = self.in_flight.saturating_sub(1);
        self.bytes -= bytes as f64;
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Nothing in flight and both buckets full again at `now_ms`: the
    /// state is what a new budget starts with, so it may be forgotten.
    pub fn at_rest(&mut self, limits: &Limits, now_ms: u64) -> bool {
        self.refill(limits, now_ms);
        self.in_flight == 0
            && self.requests >= limits.request_burst
            && self.bytes >= limits.byte_burst
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            in_flight: 2,
            requests_per_second: 1.0,
            request_burst: 3.0,
            bytes_per_second: 100.0,
            byte_burst: 100.0,
        }
    }

    #[test]
    fn in_flight_is_capped_and_a_finish_frees_a_place() {
        let l = limits();
        let mut b = SpaceBudget::new(&l, 0);
        assert_eq!(b.admit(&l, 0), Admit::Go);
        assert_eq!(b.admit(&l, 0), Admit::Go);
        assert_eq!(b.admit(&l, 0), Admit::Hold { at_ms: None });
        b.finished(&l, 0, 10);
        assert_eq!(b.admit(&l, 0), Admit::Go);
    }

    #[test]
    fn the_bucket_paces_requests_after_its_burst() {
        let l = Limits {
            in_flight: 100,
            ..limits()
        };
        let mut b = SpaceBudget::new(&l, 0);
        for _ in 0..3 {
            assert_eq!(b.admit(&l, 0), Admit::Go);
        }
        assert_eq!(b.admit(&l, 0), Admit::Hold { at_ms: Some(1000) });
        assert_eq!(b.admit(&l, 999), Admit::Hold { at_ms: Some(1000) });
        assert_eq!(b.admit(&l, 1000), Admit::Go);
    }

    #[test]
    fn bytes_received_past_the_bucket_hold_the_next_request() {
        let l = Limits {
            in_flight: 100,
            ..limits()
        };
        let mut b = SpaceBudget::new(&l, 0);
        assert_eq!(b.admit(&l, 0), Admit::Go);
        b.finished(&l, 0, 300); // 200 bytes in debt: two seconds
        assert_eq!(b.admit(&l, 0), Admit::Hold { at_ms: Some(2000) });
        assert_eq!(b.admit(&l, 2000), Admit::Go);
    }

    #[test]
    fn a_spaces_settings_apply_over_the_hosts_keeping_the_burst_ratio() {
        let host = Limits::default();
        assert_eq!(Overrides::default().apply(&host), host);
        let l = Overrides {
            in_flight: Some(2),
            per_second: Some(1.0),
            bytes_per_second: Some(1024),
        }
        .apply(&host);
        assert_eq!(l.in_flight, 2);
        assert_eq!((l.requests_per_second, l.request_burst), (1.0, 10.0));
        assert_eq!((l.bytes_per_second, l.byte_burst), (1024.0, 8192.0));
        let zero = Overrides {
            in_flight: Some(0),
            ..Overrides::default()
        };
        assert_eq!(zero.apply(&host).in_flight, 1, "never none at all");
    }

    #[test]
    fn a_budget_is_at_rest_only_when_idle_and_full_again() {
        let l = Limits::default();
        let mut b = SpaceBudget::new(&l, 0);
        assert!(b.at_rest(&l, 0));
        assert_eq!(b.admit(&l, 0), Admit::Go);
        assert!(!b.at_rest(&l, 0), "in flight");
        b.finished(&l, 0, 10);
        assert!(!b.at_rest(&l, 0), "a token and some bytes spent");
        assert!(b.at_rest(&l, 1_000), "refilled after a second");
    }
}
