//! State shared by a [`super::FileStore`] and every space it opens.

use super::config::{FaultAction, FaultPoint, StoreConfig};
use super::directory::FileDirectory;
use super::error::{StoreError, StoreResult};
use super::plane::IndexHook;
use crate::clock::Clock;
use crate::metrics::Counters;
use std::sync::{Arc, RwLock};

/// State shared by the store and every open space.
pub(crate) struct StoreShared {
    pub(crate) cfg: StoreConfig,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) directory: FileDirectory,
    pub(crate) hooks: RwLock<Arc<Vec<Arc<dyn IndexHook>>>>,
    pub(crate) counters: Arc<Counters>,
    /// `host-id/instance-id`: who we are when we hold a lease.
    pub(crate) holder: String,
    /// Called after a commit moved a space's next wake earlier (the waker
    /// listens, so it never polls).
    pub(crate) on_earlier: RwLock<Option<WakeListener>>,
}

/// A callback told `(space, new next wake)` when a space's wake moves earlier.
pub type WakeListener = Arc<dyn Fn(&str, u64) + Send + Sync>;

impl StoreShared {
    pub(crate) fn wake_moved_earlier(&self, space: &str, before: Option<u64>, after: Option<u64>) {
        if let Some(t) = after {
            if before.is_none_or(|b| t < b) {
                let f = self
                    .on_earlier
                    .read()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                if let Some(f) = f {
                    f(space, t);
                }
            }
        }
    }

    /// Fires the configured fault if `at` is its point.
    pub(crate) fn fault(&self, at: FaultPoint) -> StoreResult<()> {
        match self.cfg.fault {
            Some((p, FaultAction::Abort)) if p == at => std::process::abort(),
            Some((p, FaultAction::Error)) if p == at => Err(StoreError::InvalidCommit(format!(
                "injected fault at {at:?}"
            ))),
            _ => Ok(()),
        }
    }
}
