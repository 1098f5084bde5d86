//! The storage quota's measure of one active space (`spec/storage.md`,
//! *Storage quota*). A space file is measured from its header (O(1)), so
//! every check measures. A fleet's database is measured by a scan of the
//! space's rows, so the space server keeps an estimate instead: the last
//! measure plus everything let in since (events, deploys, handler writes).
//! The estimate only over-counts what it let in (a write that replaces a
//! value is counted whole), except derivations' writes, which it does not
//! see; so it is measured again when it would refuse (a refusal is always
//! on a fresh measure) and after [`REMEASURE_EVERY`] checks.

/// Checks answered from the estimate before the next scan.
pub const REMEASURE_EVERY: u32 = 64;

/// What a tenure knows of its space's size.
#[derive(Debug, Default)]
pub struct Gauge {
    estimate: Option<u64>,
    since_measure: u32,
}

/// Whether `incoming` bytes fit: `Err(used)` with the measure that refused.
pub type Admitted = Result<(), u64>;

impl Gauge {
    /// Whether `incoming` more bytes fit under `limit`. `scan`: measuring
    /// is a scan (else every check measures, as it is cheap).
    pub fn admit<E>(
        &mut self,
        incoming: u64,
        limit: u64,
        scan: bool,
        measure: impl FnOnce() -> Result<u64, E>,
    ) -> Result<Admitted, E> {
        if let Some(est) = self.trusted(scan) {
            if est.saturating_add(incoming) <= limit {
                self.estimate = Some(est + incoming);
                self.since_measure += 1;
                return Ok(Ok(()));
            }
        }
        let used = measure()?;
        self.since_measure = 0;
        if used.saturating_add(incoming) <= limit {
            self.estimate = Some(used + incoming);
            Ok(Ok(()))
        } else {
            self.estimate = Some(used);
            Ok(Err(used))
        }
    }

    /// What is left under `limit` for a wave's writes.
    pub fn left<E>(
        &mut self,
        limit: u64,
        scan: bool,
        measure: impl FnOnce() -> Result<u64, E>,
    ) -> Result<u64, E> {
        let used = match self.trusted(scan) {
            Some(est) if est < limit => {
                self.since_measure += 1;
                est
            }
            _ => {
                let used = measure()?;
                self.since_measure = 0;
                self.estimate = Some(used);
                used
            }
        };
        Ok(limit.saturating_sub(used))
    }

    /// Bytes a committed wave's handlers wrote.
    pub fn add(&mut self, bytes: u64) {
        if let Some(e) = &mut self.estimate {
            *e = e.saturating_add(bytes);
        }
    }

    fn trusted(&self, scan: bool) -> Option<u64> {
        self.estimate
            .filter(|_| scan && self.since_measure < REMEASURE_EVERY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn measuring(v: u64, count: &Cell<u32>) -> impl FnOnce() -> Result<u64, ()> + '_ {
        move || {
            count.set(count.get() + 1);
            Ok(v)
        }
    }

    #[test]
    fn a_header_read_is_taken_at_every_check() {
        let (mut g, n) = (Gauge::default(), Cell::new(0));
        for _ in 0..3 {
            assert_eq!(g.admit(10, 100, false, measuring(50, &n)), Ok(Ok(())));
        }
        assert_eq!(n.get(), 3);
        assert_eq!(g.admit(60, 100, false, measuring(50, &n)), Ok(Err(50)));
    }

    #[test]
    fn a_scan_is_taken_first_on_a_refusal_and_every_so_many_checks() {
        let (mut g, n) = (Gauge::default(), Cell::new(0));
        assert_eq!(g.admit(10, 100, true, measuring(50, &n)), Ok(Ok(())));
        assert_eq!(n.get(), 1, "the first check measures");
        // 50 + 10 + 10 + 10 + 10 = 90: answered from the estimate.
        for _ in 0..3 {
            assert_eq!(g.admit(10, 100, true, measuring(999, &n)), Ok(Ok(())));
        }
        assert_eq!(n.get(), 1);
        g.add(5);
        // 95 + 10 would pass the limit: a fresh measure decides (the space
        // shrank meanwhile, say by retention), and lets it in.
        assert_eq!(g.admit(10, 100, true, measuring(40, &n)), Ok(Ok(())));
        assert_eq!(n.get(), 2);
        // A refusal is always on a fresh measure.
        assert_eq!(g.admit(80, 100, true, measuring(70, &n)), Ok(Err(70)));
        assert_eq!(n.get(), 3);
        // What derivations wrote unseen is found within REMEASURE_EVERY.
        for _ in 0..REMEASURE_EVERY {
            assert_eq!(g.admit(0, 100, true, measuring(999, &n)), Ok(Ok(())));
        }
        assert_eq!(n.get(), 3);
        assert_eq!(g.admit(0, 100, true, measuring(99, &n)), Ok(Ok(())));
        assert_eq!(n.get(), 4);
    }

    #[test]
    fn what_is_left_comes_from_the_estimate_until_it_reaches_the_limit() {
        let (mut g, n) = (Gauge::default(), Cell::new(0));
        assert_eq!(g.left(100, true, measuring(30, &n)), Ok(70));
        g.add(20);
        assert_eq!(g.left(100, true, measuring(999, &n)), Ok(50));
        assert_eq!(n.get(), 1);
        g.add(60);
        assert_eq!(
            g.left(100, true, measuring(85, &n)),
            Ok(15),
            "measured again at the limit"
        );
        assert_eq!(n.get(), 2);
    }
}
