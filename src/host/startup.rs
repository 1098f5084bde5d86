//! The start-up check `serve` runs before it listens.
//!
//! Two parts, each of which would otherwise fail at the first client:
//! 1. the engine builds a sandbox with this host's limits and loads the
//!    authoring API (a broken engine or impossible limits stop the host at
//!    boot instead of failing every activation);
//! 2. one whole tenure runs in a scratch store beside the data directory:
//!    a space is created, a small counter pattern is deployed and sent an
//!    event, its result is read back and the space parks. That proves the
//!    data directory's filesystem takes SQLite's WAL and locks, and that a
//!    space activates, commits and parks here.
//!
//! The scratch store has its own directory database and counters and is
//! deleted afterwards, so the real data directory and the operator's
//! figures never see it. As a side effect a host that has activated
//! nothing yet has touched the code every host soon touches, which keeps
//! "parked vs never opened" memory comparisons about spaces rather than
//! about code pages (`spec/performance.md`).

use super::{Host, HostConfig, Trigger};
use crate::clock::Stopwatch;
use crate::metrics::{Counter, Counters};
use crate::store::path::parse_dotted;
use crate::store::{Author, Store};
use anyhow::{bail, Context};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The pattern the check deploys: one input and one handler.
const CHECK_PATTERN: &str = r#"import { pattern, handler, Cell, Default } from "commonfabric";

const bump = handler<{ by?: number }, { value: Cell<number> }>((ev, { value }) => {
  value.set(value.get() + (ev?.by ?? 1));
});

export default pattern<{ value: Default<number, 0> }>(({ value }) => ({
  value,
  bump: bump({ value }),
}));
"#;

const OWNER: &str = "did:key:startup-check";
const SPACE: &str = "startup-check";
/// Generous: the tenure takes a few milliseconds on an idle machine.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Removes the scratch directory however the check ends.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Host {
    /// Runs the start-up check (see the module docs). The engine's error is
    /// returned as the engine reports it; a failed tenure names the scratch
    /// directory it ran in.
    pub fn check_start(&self) -> anyhow::Result<()> {
        crate::runtime::check_engine(&self.inner.cfg.runtime)?;
        let data = &self.inner.store.config().data_dir;
        let scratch = Scratch(data.join(format!(
            ".startup-check-{}",
            crate::store::hex_id(&rand::random::<[u8; 6]>())
        )));
        scratch_tenure(self, &scratch.0)
            .with_context(|| format!("a scratch space in {}", scratch.0.display()))?;
        drop(scratch);
        crate::allocator::release_freed_memory();
        Ok(())
    }
}

/// A scratch host on `dir` with this host's settings runs one tenure:
/// deploy, event, read back, park.
fn scratch_tenure(host: &Host, dir: &Path) -> anyhow::Result<()> {
    let mut store_cfg = host.inner.store.config().clone();
    store_cfg.data_dir = dir.to_path_buf();
    store_cfg.holder = None;
    // Crash tests inject faults into the real commit path, not this one.
    store_cfg.fault = None;
    let store = Store::open(store_cfg, host.inner.clock.clone(), Counters::new())?;
    store.create_space(SPACE, OWNER)?;
    let scratch = Host::new(
        store,
        HostConfig {
            // Park as soon as the work is done: nothing waits for it.
            idle_park_ms: 0,
            ..host.inner.cfg.clone()
        },
    );
    let result = (|| {
        let piece = scratch.deploy_file_blocking(SPACE, "check.tsx", CHECK_PATTERN, json!({}))?;
        let send = super::SendEvent {
            author: Author::principal(OWNER),
            piece: piece.clone(),
            path: parse_dotted("bump"),
            event_id: Some("startup-check".into()),
            payload: json!({"by": 2}),
        };
        scratch.ask_blocking(SPACE, Trigger::Events, send)?;
        let counters = scratch.counters().clone();
        wait(|| counters.space_value(SPACE, Counter::EventsProcessed) >= 1)
            .context("the check event was not processed")?;
        let read = super::Read {
            piece: Some(piece),
            doc: None,
            path: parse_dotted("value"),
        };
        let read = scratch.ask_blocking(SPACE, Trigger::Session, read)?;
        if read.value != json!(2) {
            bail!("reading the check piece answered {}, not 2", read.value);
        }
        // Its last tenure parked (nothing else would activate it again).
        wait(|| {
            scratch.active_spaces().is_empty() && counters.space_value(SPACE, Counter::Parks) >= 1
        })
        .context("the scratch space did not park")
    })();
    scratch.shutdown();
    result
}

fn wait(mut done: impl FnMut() -> bool) -> anyhow::Result<()> {
    let start = Stopwatch::start();
    while !done() {
        if start.passed(TIMEOUT) {
            bail!("timed out after {TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}
