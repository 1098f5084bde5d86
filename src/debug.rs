//! Hidden helper processes for tests that need a real second process: the
//! SIGKILL crash test and the two-hosts lease test. They use the public
//! store API exactly as the host does.

use crate::clock::{Clock, SystemClock};
use crate::metrics::Counters;
use crate::store::{
    Author, CommitClass, CommitRequest, DocOp, NewEvent, PathSeg, Store, StoreConfig, StoreError,
};
use serde_json::json;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

/// Commits forever: each commit sets a fresh document, patches a counter
/// document and appends an event. Prints `ack SEQ` once a commit returned.
/// Closes and reopens the space every 8 commits, so a kill may also land
/// in a close's checkpoint and WAL restart (`FileSpace::checkpoint_if_large`).
pub fn crash_writer(data: &Path, space: &str) -> anyhow::Result<ExitCode> {
    let store = Store::open(
        StoreConfig::new(data),
        Arc::new(SystemClock),
        Counters::new(),
    )?;
    match store.create_space(space, "did:key:crash-test") {
        Ok(()) | Err(StoreError::SpaceExists(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let mut sp = store.open_space(space)?;
    let mut out = std::io::stdout().lock();
    loop {
        let next = sp.head_seq()? + 1;
        let req = CommitRequest::new(
            CommitClass::Authored,
            Author::principal("did:key:crash-test"),
        )
        .op(DocOp::Set {
            id: format!("doc-{next}"),
            value: json!({"n": next, "pad": "x".repeat(200)}),
        })
        .op(DocOp::Patch {
            id: "counter".into(),
            path: vec![PathSeg::Key("n".into())],
            value: json!(next),
        })
        .event(NewEvent {
            event_id: format!("ev-{next}"),
            stream: "ticks".into(),
            payload: json!({"n": next}),
            fired_by: "did:key:crash-test".into(),
        });
        let seq = sp.commit(req)?.seq.expect("a commit with ops has a seq");
        writeln!(out, "ack {seq}")?;
        out.flush()?;
        if seq % 8 == 0 {
            drop(sp);
            sp = store.open_space(space)?;
        }
    }
}

/// Repeatedly tries to take a space's lease for `millis`; while holding it,
/// renews a few times, then either releases it or abandons it (as a crashed
/// host would). Prints `held START END` for every interval in which this
/// process held the lease (END is conservative: before the release, or the
/// expiry it last wrote).
pub fn lease_contender(
    data: &Path,
    space: &str,
    millis: u64,
    ttl_ms: u64,
) -> anyhow::Result<ExitCode> {
    let clock = SystemClock;
    let mut cfg = StoreConfig::new(data);
    cfg.lease_ttl_ms = ttl_ms;
    let store = Store::open(cfg, Arc::new(SystemClock), Counters::new())?;
    match store.create_space(space, "did:key:lease-test") {
        Ok(()) | Err(StoreError::SpaceExists(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let mut sp = store.open_space(space)?;
    let deadline = clock.now_ms() + millis;
    let mut out = std::io::stdout().lock();
    let mut round = 0u64;
    while clock.now_ms() < deadline {
        round += 1;
        let Some(mut lease) = sp.acquire_lease()? else {
            std::thread::sleep(std::time::Duration::from_millis(ttl_ms / 10));
            continue;
        };
        let start = clock.now_ms();
        let mut end = lease.expires_at_ms;
        for _ in 0..(round % 3 + 1) {
            std::thread::sleep(std::time::Duration::from_millis(ttl_ms / 4));
            match sp.renew_lease(&lease)? {
                Some(l) => {
                    end = l.expires_at_ms;
                    lease = l;
                }
                None => break,
            }
        }
        if round.is_multiple_of(2) {
            end = end.min(clock.now_ms());
            sp.release_lease(&lease)?;
        }
        writeln!(out, "held {start} {end} {}", lease.tenure)?;
        out.flush()?;
        std::thread::sleep(std::time::Duration::from_millis(ttl_ms / 10));
    }
    Ok(ExitCode::SUCCESS)
}

/// One side of the two-process lease race (`tests/fleet_lease_race.rs`) on
/// a PostgreSQL store. Line commands on stdin, one answer line each:
/// `acquire` → `won EPOCH` | `lost`; `commit EPOCH` (a derived commit
/// under this holder's lease at that epoch) → `ok SEQ` | `refused`;
/// `release EPOCH` → `released`. At the end it prints `refused N`, the
/// derived commits the store refused, as counted.
pub fn lease_racer(url: &str, space: &str, holder: &str) -> anyhow::Result<ExitCode> {
    use crate::metrics::Counter;
    use crate::store::postgres::PgStore;
    use crate::store::{Lease, SpaceBackend, SpaceStore};
    use std::io::BufRead;
    let counters = Counters::new();
    let store = PgStore::open(url, holder, 10_000, Arc::new(SystemClock), counters.clone())?;
    let mut sp = store.open(space)?;
    let mut out = std::io::stdout().lock();
    let lease = |epoch: &str| -> anyhow::Result<Lease> {
        Ok(Lease {
            holder: holder.to_string(),
            tenure: epoch.parse()?,
            expires_at_ms: 0,
        })
    };
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let (cmd, arg) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        let answer = match cmd {
            "acquire" => match sp.acquire_lease()? {
                Some(l) => format!("won {}", l.tenure),
                None => "lost".into(),
            },
            "commit" => {
                let mut req = CommitRequest::new(CommitClass::Derived, Author::server());
                req.lease = Some(lease(arg)?);
                req.ops.push(DocOp::Set {
                    id: "race".into(),
                    value: json!({ "holder": holder, "epoch": arg }),
                });
                match sp.commit(req) {
                    Ok(o) => format!("ok {}", o.seq.unwrap_or(0)),
                    Err(StoreError::NotLeaseHolder(_)) => "refused".into(),
                    Err(e) => return Err(e.into()),
                }
            }
            "release" => {
                sp.release_lease(&lease(arg)?)?;
                "released".into()
            }
            other => anyhow::bail!("unknown command {other:?}"),
        };
        writeln!(out, "{answer}")?;
        out.flush()?;
    }
    writeln!(
        out,
        "refused {}",
        counters.space_value(space, Counter::DerivedRefused)
    )?;
    Ok(ExitCode::SUCCESS)
}

/// Prints each module of the compiled program: a `// module NAME` line,
/// then its JavaScript.
pub fn emit(file: &Path) -> anyhow::Result<ExitCode> {
    match crate::check::compile_file(file) {
        Ok(program) => {
            let mut out = std::io::stdout().lock();
            for m in &program.modules {
                writeln!(out, "// module {}\n{}", m.name, m.js)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(diags) => {
            print!("{}", crate::compiler::render(&diags));
            Ok(ExitCode::FAILURE)
        }
    }
}
