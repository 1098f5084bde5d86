//! Shared test fixtures: a real store in a temporary directory on a manual clock.
#![allow(dead_code)]

use spacewake::clock::ManualClock;
use spacewake::metrics::Counters;
use spacewake::store::{Store, StoreConfig};
use std::sync::Arc;

pub struct TestStore {
    pub dir: tempfile::TempDir,
    pub clock: Arc<ManualClock>,
    pub counters: Arc<Counters>,
    pub store: Store,
}

pub fn store() -> TestStore {
    store_with(|_| {})
}

pub fn store_with(f: impl FnOnce(&mut StoreConfig)) -> TestStore {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::default());
    let counters = Counters::new();
    let mut cfg = StoreConfig::new(dir.path());
    f(&mut cfg);
    let store = Store::open(cfg, clock.clone(), counters.clone()).unwrap();
    TestStore {
        dir,
        clock,
        counters,
        store,
    }
}

impl TestStore {
    /// A second store (another "host") on the same data directory and clock.
    pub fn reopen_with(&self, f: impl FnOnce(&mut StoreConfig)) -> Store {
        let mut cfg = StoreConfig::new(self.dir.path());
        f(&mut cfg);
        Store::open(cfg, self.clock.clone(), Counters::new()).unwrap()
    }
}
