//! Space creation's limits (`spec/serving-loop.md`, *Creating spaces*): who
//! may create, how fast from one peer address, and the one lock under which
//! a creator's spaces are counted and the new one made, so concurrent
//! creates cannot pass the per-identity quota together.
//!
//! The rate is a token bucket per peer address on the host clock: `per_minute`
//! tokens at most, refilled at `per_minute` a minute; each create takes one.
//! Keys are free, addresses are not, so this is what bounds a stranger with
//! many keys (behind a reverse proxy every peer is the proxy: one bucket).

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Mutex;

/// One minute, in the bucket's units of time.
const MINUTE_MS: u64 = 60_000;
/// Buckets kept before full ones (the same as no bucket) are dropped.
const MAX_BUCKETS: usize = 4_096;

/// Who may create spaces with a session's `open`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Creators {
    /// Any did (local use; the default).
    #[default]
    Open,
    /// Only these dids (and the host's operators).
    Only(HashSet<String>),
}

impl Creators {
    pub fn allows(&self, did: &str) -> bool {
        match self {
            Creators::Open => true,
            Creators::Only(dids) => dids.contains(did),
        }
    }
}

/// A token bucket's state: `level` in token-minutes-per-ms units (a whole
/// token is [`MINUTE_MS`] units, so integer refill is exact), as of `at_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Bucket {
    level: u64,
    at_ms: u64,
}

impl Bucket {
    fn full(per_minute: u64, now_ms: u64) -> Bucket {
        Bucket {
            level: per_minute * MINUTE_MS,
            at_ms: now_ms,
        }
    }

    /// Refills to `now_ms`, then takes a token; `Err(ms)` until the next.
    fn take(&mut self, per_minute: u64, now_ms: u64) -> Result<(), u64> {
        let cap = per_minute * MINUTE_MS;
        let refill = now_ms.saturating_sub(self.at_ms).saturating_mul(per_minute);
        self.level = self.level.saturating_add(refill).min(cap);
        self.at_ms = self.at_ms.max(now_ms);
        if self.level >= MINUTE_MS {
            self.level -= MINUTE_MS;
            Ok(())
        } else {
            Err((MINUTE_MS - self.level).div_ceil(per_minute))
        }
    }
}

/// The host's creation state: the create lock and the buckets.
#[derive(Default)]
pub struct Creations {
    lock: tokio::sync::Mutex<()>,
    buckets: Mutex<HashMap<IpAddr, Bucket>>,
}

impl Creations {
    /// Held from counting a creator's spaces until the new one exists.
    pub async fn lock(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.lock.lock().await
    }

    /// Takes a create from `peer`'s bucket; `Err(ms until the next)`.
    /// `per_minute` 0: no limit.
    pub fn take(&self, peer: IpAddr, per_minute: u64, now_ms: u64) -> Result<(), u64> {
        if per_minute == 0 {
            return Ok(());
        }
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() >= MAX_BUCKETS {
            let cap = per_minute * MINUTE_MS;
            buckets.retain(|_, b| {
                b.level + now_ms.saturating_sub(b.at_ms).saturating_mul(per_minute) < cap
            });
        }
        buckets
            .entry(peer)
            .or_insert_with(|| Bucket::full(per_minute, now_ms))
            .take(per_minute, now_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_allows_its_burst_then_one_per_refill() {
        let mut b = Bucket::full(3, 1_000);
        for _ in 0..3 {
            assert_eq!(b.take(3, 1_000), Ok(()));
        }
        // One token every 20 s.
        assert_eq!(b.take(3, 1_000), Err(20_000));
        assert_eq!(b.take(3, 11_000), Err(10_000));
        assert_eq!(b.take(3, 21_000), Ok(()));
        assert_eq!(b.take(3, 21_000), Err(20_000));
        // A long pause refills to the burst, never past it.
        let mut b = Bucket::full(3, 0);
        assert_eq!(b.take(3, 10 * MINUTE_MS), Ok(()));
        assert_eq!(b.level, 2 * MINUTE_MS);
        // A clock that steps back takes nothing and gives nothing.
        assert_eq!(b.take(3, 0), Ok(()));
    }

    #[test]
    fn buckets_are_per_address_and_zero_is_no_limit() {
        let c = Creations::default();
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        assert_eq!(c.take(a, 1, 0), Ok(()));
        assert_eq!(c.take(a, 1, 0), Err(MINUTE_MS));
        assert_eq!(c.take(b, 1, 0), Ok(()));
        for _ in 0..100 {
            assert_eq!(c.take(a, 0, 0), Ok(()));
        }
    }

    #[test]
    fn an_allowlist_allows_only_its_dids() {
        assert!(Creators::Open.allows("did:key:any"));
        let only = Creators::Only(["did:key:a".to_string()].into_iter().collect());
        assert!(only.allows("did:key:a"));
        assert!(!only.allows("did:key:b"));
    }
}
