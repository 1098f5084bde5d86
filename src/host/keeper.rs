//! The lease keeper: renews the lease of a space whose wave runs long, from
//! a thread of its own, so a long wave cannot starve the renewal its space
//! server would make between waves (`spec/serving-loop.md`, *Tenures and
//! leases*).
//!
//! A space server registers its lease for the duration of each turn
//! ([`Keeper::watch`], released when the guard drops). The keeper wakes a
//! few times per renewal interval; a turn running for longer than one
//! interval gets its lease renewed through a connection of the keeper's
//! own (renewal is one row update, checked by holder and tenure, so it
//! never conflicts with the wave). A file a scheduled tenure holds
//! exclusively cannot be opened by another connection: such a turn is
//! left to the renewal of an expired lease nobody took.

use crate::clock::Clock;
use crate::metrics::Counter;
use crate::store::{FileAccess, Lease, Store};
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

struct Watched {
    lease: Lease,
    /// When the lease was last renewed (by the server or the keeper), on
    /// the store's clock: the one its expiry is judged by.
    renewed_ms: u64,
}

#[derive(Default)]
struct Table {
    watched: HashMap<String, Watched>,
    stopped: bool,
}

/// See the module documentation.
pub(crate) struct Keeper {
    table: Mutex<Table>,
    wake: Condvar,
    every: Duration,
    clock: Arc<dyn Clock>,
}

/// Unregisters a turn when dropped.
pub(crate) struct Watch<'a> {
    keeper: &'a Keeper,
    space: String,
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        self.keeper
            .table
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .watched
            .remove(&self.space);
    }
}

impl Keeper {
    /// A keeper renewing every `every` (the store's renewal interval).
    pub(crate) fn start(store: Store, every: Duration) -> Arc<Keeper> {
        let keeper = Arc::new(Keeper {
            table: Mutex::new(Table::default()),
            wake: Condvar::new(),
            every,
            clock: store.clock().clone(),
        });
        let k = keeper.clone();
        let spawned = std::thread::Builder::new()
            .name("lease-keeper".into())
            .spawn(move || k.run(&store));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the lease keeper");
        }
        keeper
    }

    /// Watches `space`'s lease for one turn (only shared files: another
    /// connection can renew those).
    pub(crate) fn watch(
        &self,
        space: &str,
        lease: &Lease,
        access: FileAccess,
    ) -> Option<Watch<'_>> {
        if access != FileAccess::Shared {
            return None;
        }
        self.table
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .watched
            .insert(
                space.to_string(),
                Watched {
                    lease: lease.clone(),
                    renewed_ms: self.clock.now_ms(),
                },
            );
        Some(Watch {
            keeper: self,
            space: space.to_string(),
        })
    }

    pub(crate) fn stop(&self) {
        self.table.lock().unwrap_or_else(|p| p.into_inner()).stopped = true;
        self.wake.notify_all();
    }

    fn run(&self, store: &Store) {
        let tick = (self.every / 4).max(Duration::from_millis(10));
        let every_ms = self.every.as_millis() as u64;
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if table.stopped {
                return;
            }
            let due: Vec<(String, Lease)> = table
                .watched
                .iter()
                .filter(|(_, w)| self.clock.now_ms() >= w.renewed_ms + every_ms)
                .map(|(s, w)| (s.clone(), w.lease.clone()))
                .collect();
            drop(table);
            for (space, lease) in due {
                let renewed = store
                    .open_space_with(&space, FileAccess::Shared)
                    .and_then(|mut sp| sp.renew_lease(&lease));
                let mut t = self.table.lock().unwrap_or_else(|p| p.into_inner());
                match renewed {
                    Ok(Some(l)) => {
                        store
                            .counters()
                            .space(&space)
                            .inc(Counter::LeaseRenewedByKeeper);
                        if let Some(w) = t.watched.get_mut(&space) {
                            w.lease = l;
                            w.renewed_ms = self.clock.now_ms();
                        }
                    }
                    // Lost, or the file is busy: the wave's own commit says so.
                    Ok(None) => {
                        t.watched.remove(&space);
                    }
                    Err(e) => {
                        tracing::warn!(space = %space, error = %e, "the lease keeper cannot renew");
                        if let Some(w) = t.watched.get_mut(&space) {
                            w.renewed_ms = self.clock.now_ms();
                        }
                    }
                }
            }
            table = self.table.lock().unwrap_or_else(|p| p.into_inner());
            table = self
                .wake
                .wait_timeout(table, tick)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}
