//! `spacewake serve`: wires the host together — the store, the host with
//! its space servers and waker, boot discovery, and the HTTP/WebSocket edge.

use crate::cli::ServeArgs;
use crate::clock::{Clock, SystemClock};
use crate::metrics::Counters;
use crate::store::{Store, StoreConfig};
use anyhow::Context;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

pub fn open_store(cfg: StoreConfig) -> anyhow::Result<Store> {
    open_store_with(cfg, Arc::new(SystemClock))
}

pub fn open_store_with(cfg: StoreConfig, clock: Arc<dyn Clock>) -> anyhow::Result<Store> {
    Store::open(cfg, clock, Counters::new()).context("opening the data directory")
}

pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let mut cfg = StoreConfig::new(&args.data);
    cfg.synchronous = args.sync;
    cfg.lease_ttl_ms = args.lease_ttl_ms;
    cfg.lease_renew_ms = args.lease_renew_ms;
    anyhow::ensure!(
        cfg.lease_renew_ms < cfg.lease_ttl_ms,
        "--lease-renew-ms ({}) must be shorter than --lease-ttl-ms ({})",
        cfg.lease_renew_ms,
        cfg.lease_ttl_ms
    );
    let clock: Arc<dyn Clock> = if args.clock_offset_ms > 0 {
        Arc::new(crate::clock::OffsetClock {
            offset_ms: args.clock_offset_ms,
        })
    } else {
        Arc::new(SystemClock)
    };
    let store = open_store_with(cfg, clock)?;
    let host_cfg = crate::host::HostConfig {
        idle_park_ms: args.idle_park_ms,
        flush_deadline_ms: args.flush_deadline_ms,
        session_timeout_ms: args.session_timeout_ms,
        max_active_spaces: args.max_active_spaces as usize,
        schedule: crate::host::ScheduleConfig {
            enabled: args.schedule == crate::cli::OnOff::On,
            jitter_mode: match args.jitter {
                crate::cli::JitterArg::Keyed => crate::schedule::JitterMode::Keyed,
                crate::cli::JitterArg::Random => crate::schedule::JitterMode::Random,
            },
            jitter_window_ms: args.jitter_window_minutes * 60_000,
            max_scheduled: args.max_scheduled,
            lead_ms: args.schedule_lead_ms,
            scheduled_budget_us: args.scheduled_cpu_budget_ms.map(|ms| ms * 1_000),
            backoff: crate::accounting::backoff::BackoffPolicy {
                enabled: args.backoff == crate::cli::OnOff::On,
                unread_threshold: args.backoff_unread_fires.max(1),
                cap: args.backoff_cap.max(1),
            },
        },
        runtime: crate::runtime::RuntimeConfig {
            ledger_window_ms: args.ledger_window_hours.max(1) * 3_600_000,
            ..Default::default()
        },
        ..Default::default()
    };
    let host = crate::host::Host::new(store.clone(), host_cfg);
    let checked = std::time::Instant::now();
    host.check_start().context("the start-up check failed")?;
    tracing::info!(
        ms = checked.elapsed().as_millis() as u64,
        "start-up check passed (engine, and one tenure in a scratch space)"
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        let state = crate::http::HttpState { host: host.clone() };
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("listening on {}", args.listen))?;
        let booted = host.boot().context("boot discovery")?;
        // The waker's first pass is boot discovery's "a schedule is due" arm.
        host.start_waker();
        tokio::spawn(crate::session::watch_grants(host.clone()));
        tracing::info!(
            listen = %listener.local_addr()?,
            data = %args.data.display(),
            holder = store.holder(),
            booted,
            "spacewake serving"
        );
        // Tests read this line to learn the port when listening on :0.
        println!("listening on {}", listener.local_addr()?);
        axum::serve(crate::http::nodelay(listener), crate::http::router(state))
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
            .context("serving HTTP")?;
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// `spacewake spaces`: the directory's view of every space.
pub fn list_spaces(data: &Path) -> anyhow::Result<ExitCode> {
    let store = open_store(StoreConfig::new(data))?;
    let mut after: Option<String> = None;
    println!(
        "{:<40} {:<24} {:>14} {:>11}  status",
        "space", "owner", "next wake", "undelivered"
    );
    loop {
        let page = store.directory().list(after.as_deref(), 500)?;
        let Some(last) = page.last() else { break };
        after = Some(last.id.clone());
        for s in &page {
            println!(
                "{:<40} {:<24} {:>14} {:>11}  {}",
                s.id,
                s.owner,
                s.next_wake_ms.map_or("-".to_string(), |v| v.to_string()),
                s.undelivered,
                s.quarantined
                    .as_deref()
                    .map_or("ok".to_string(), |r| format!("quarantined: {r}"))
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
