//! `spacewake serve`: wires the host together — the store, the host with
//! its space servers and waker, boot discovery, and the HTTP/WebSocket edge.

use crate::clock::{Clock, SystemClock};
use crate::metrics::{Counter, Counters};
use crate::store::lock::{DirectoryLock, LockInfo};
use crate::store::{Store, StoreConfig};
use anyhow::Context;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Data directory (created if missing).
    #[arg(long, env = "SPACEWAKE_DATA", default_value = "./spacewake-data")]
    pub data: PathBuf,
    /// Where the spaces live. Omitted: SQLite files under --data. A
    /// `postgres://…` URL: a PostgreSQL database shared by a fleet of hosts,
    /// each still with its own --data (its key, lock and console token).
    #[arg(long, env = "SPACEWAKE_STORE")]
    pub store: Option<String>,
    /// Test-only: a declared minute of a schedule lasts this many
    /// milliseconds in this process (multi-process fleet tests).
    #[arg(long, hide = true)]
    pub test_minute_ms: Option<u64>,
    /// Address to listen on.
    #[arg(long, env = "SPACEWAKE_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// On a fleet (`--store postgres://…`): the `host:port` other hosts
    /// reach this one at, to relay sessions and requests for the spaces it
    /// holds. Defaults to the address it listens on; set it when that is a
    /// wildcard (`0.0.0.0`) or not what other machines see.
    #[arg(long, env = "SPACEWAKE_ADVERTISE")]
    pub advertise: Option<String>,
    /// SQLite synchronous mode: `normal` survives process crashes, `full` also power loss.
    #[arg(long, env = "SPACEWAKE_SYNC", value_enum, default_value_t = crate::store::Synchronous::Normal)]
    pub sync: crate::store::Synchronous,
    /// Lease time-to-live in milliseconds.
    #[arg(long, env = "SPACEWAKE_LEASE_TTL_MS", default_value_t = 15_000)]
    pub lease_ttl_ms: u64,
    /// Lease renewal interval in milliseconds.
    #[arg(long, env = "SPACEWAKE_LEASE_RENEW_MS", default_value_t = 5_000)]
    pub lease_renew_ms: u64,
    /// Commits whose operations each space's log keeps (the newest); older
    /// commits keep only who made them, when and how many operations, and
    /// delivered events older than them lose their payload. 0: keep all.
    #[arg(long, env = "SPACEWAKE_COMMIT_HISTORY", default_value_t = crate::store::DEFAULT_HISTORY_COMMITS)]
    pub commit_history: u64,
    /// A space with no sessions and no work parks after this many idle milliseconds.
    #[arg(long, env = "SPACEWAKE_IDLE_PARK_MS", default_value_t = 30_000)]
    pub idle_park_ms: u64,
    /// A wave stops taking new events after this many milliseconds.
    #[arg(long, env = "SPACEWAKE_FLUSH_DEADLINE_MS", default_value_t = 100)]
    pub flush_deadline_ms: u64,
    /// A WebSocket connection that sends nothing for this long (not even a
    /// pong: the server pings after half of it) is closed, so a client that
    /// vanished without closing does not hold its space active. 0: never.
    #[arg(long, env = "SPACEWAKE_SESSION_TIMEOUT_MS", default_value_t = 60_000)]
    pub session_timeout_ms: u64,
    /// A connection that has sent the first byte of a request must finish
    /// the request's head within this many milliseconds, or it is closed
    /// (also each next request on a kept-alive connection, counted from
    /// the previous answer). 0: no limit.
    #[arg(
        long,
        env = "SPACEWAKE_HEADER_READ_TIMEOUT_MS",
        default_value_t = 10_000
    )]
    pub header_read_timeout_ms: u64,
    /// A connection that sends nothing at all for this many milliseconds
    /// after it is accepted is closed. 0: no limit.
    #[arg(long, env = "SPACEWAKE_IDLE_TIMEOUT_MS", default_value_t = 60_000)]
    pub idle_timeout_ms: u64,
    /// A WebSocket that has not opened its session this many milliseconds
    /// after the upgrade is closed (1008), whatever else it sends. 0: no
    /// deadline.
    #[arg(long, env = "SPACEWAKE_WS_OPEN_TIMEOUT_MS", default_value_t = 10_000)]
    pub ws_open_timeout_ms: u64,
    /// At most this many connections open at once from one peer address
    /// (WebSockets included); past it, new ones are closed at accept. 0: no
    /// cap.
    #[arg(long, env = "SPACEWAKE_MAX_CONNECTIONS_PER_PEER", default_value_t = 64)]
    pub max_connections_per_peer: usize,
    /// An origin the console is reached at besides the listen address
    /// (`https://console.example.com`, behind a proxy): its `Host` is
    /// accepted (repeatable; env: comma-separated).
    #[arg(
        long,
        env = "SPACEWAKE_PUBLIC_ORIGINS",
        value_delimiter = ',',
        value_name = "URL"
    )]
    pub public_origin: Vec<String>,
    /// Console sign-in attempts allowed per peer address per minute (a
    /// bucket refilled at that rate); past it, 429. 0: no limit.
    #[arg(long, env = "SPACEWAKE_CONSOLE_SIGN_INS_PER_MINUTE",
          default_value_t = crate::console::guard::DEFAULT_SIGN_INS_PER_MINUTE)]
    pub console_sign_ins_per_minute: u32,
    /// Who may read the console's pages: `open` (anyone who reaches the
    /// address; acting needs the token) or `token` (only a browser signed
    /// in with the operator token; for a host listening beyond loopback).
    /// `/metrics` and the health route are not affected.
    #[arg(long, env = "SPACEWAKE_CONSOLE_READ", value_enum,
          default_value_t = crate::http::console::ConsoleRead::Open)]
    pub console_read: crate::http::console::ConsoleRead,
    /// `/metrics` shows per-space series (CPU by bucket, commits, wakes
    /// delivered, dead letters, budget skips) for this many spaces, those
    /// with the most CPU time; everything else is host-wide. 0: none.
    #[arg(long, env = "SPACEWAKE_METRICS_TOP_SPACES",
          default_value_t = crate::metrics::exposition::DEFAULT_TOP_SPACES as u64,
          value_parser = clap::value_parser!(u64).range(0..=1000))]
    pub metrics_top_spaces: u64,
    /// At most this many spaces active at once (each a thread, a JavaScript
    /// runtime and an open file); past it, opens and ingests for another
    /// space are refused (`overloaded`, HTTP 503) and boot discovery waits.
    #[arg(long, env = "SPACEWAKE_MAX_ACTIVE_SPACES", default_value_t = 4_096,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_active_spaces: u64,
    /// At most this many spaces may be owned by one identity: past it, an
    /// `open` with `create: true` by that identity is refused
    /// (`quotaExceeded`), so an unknown key cannot fill the disk. Operators
    /// creating spaces through the operator API are not limited. 0: no limit.
    #[arg(
        long,
        env = "SPACEWAKE_MAX_SPACES_PER_IDENTITY",
        default_value_t = 1_000
    )]
    pub max_spaces_per_identity: u64,
    /// Who may create a space by opening it (`create: true`): `open` (any
    /// did: local use), or the dids allowed (repeatable; env and flag take
    /// comma-separated lists). Operators always may; others are refused
    /// (`forbidden`).
    #[arg(
        long,
        env = "SPACEWAKE_SPACE_CREATORS",
        value_delimiter = ',',
        value_name = "open|DID",
        default_value = "open"
    )]
    pub space_creators: Vec<String>,
    /// Spaces one peer address may create a minute (a token bucket: this
    /// many at once, then one every 60/N s); past it creates are refused
    /// (`quotaExceeded`). 0: no limit.
    #[arg(long, env = "SPACEWAKE_SPACE_CREATES_PER_MINUTE", default_value_t = crate::host::DEFAULT_SPACE_CREATES_PER_MINUTE)]
    pub space_creates_per_minute: u64,
    /// A space's storage quota in MiB: once its file holds this much
    /// (documents, retained events, indexes), events and deploys into it
    /// are refused (`quotaExceeded`), and so is a handler run that would
    /// write past what is left. 0: no limit. Not enforced on a fleet's
    /// PostgreSQL database.
    #[arg(long, env = "SPACEWAKE_SPACE_QUOTA_MIB", default_value_t = crate::host::DEFAULT_SPACE_QUOTA_BYTES / (1024 * 1024))]
    pub space_quota_mib: u64,
    /// Scheduled wakes: `on` fires due [SCHEDULE] entries; `off` keeps them
    /// indexed and counts due wakes as suppressed.
    #[arg(long, env = "SPACEWAKE_SCHEDULE", value_enum, default_value_t = OnOff::On)]
    pub schedule: OnOff,
    /// Jitter mode: `keyed` (reproducible, a keyed hash per period) or `random`.
    #[arg(long, env = "SPACEWAKE_JITTER", value_enum, default_value_t = JitterArg::Keyed)]
    pub jitter: JitterArg,
    /// Jitter window in minutes (offsets are uniform in ±window; at most 20).
    #[arg(long, env = "SPACEWAKE_JITTER_WINDOW_MINUTES", default_value_t = 20,
          value_parser = clap::value_parser!(u64).range(0..=20))]
    pub jitter_window_minutes: u64,
    /// Scheduled activations in flight at once (caps a herd of due spaces).
    #[arg(long, env = "SPACEWAKE_MAX_SCHEDULED", default_value_t = 8)]
    pub max_scheduled: usize,
    /// Scheduled activations dispatched at once while every due wake is
    /// dispatched on time (within 5 ms); up to --max-scheduled while the
    /// host catches up. Default: the machine's cores.
    #[arg(long, env = "SPACEWAKE_ON_TIME_SCHEDULED")]
    pub on_time_scheduled: Option<usize>,
    /// Engine images kept for reuse across tenures, at most (one per
    /// space-server thread, about 1 MiB each; 0: a new engine per tenure).
    /// Default: one per idle thread the host keeps, the larger of 16 and
    /// twice --max-scheduled.
    #[arg(long, env = "SPACEWAKE_ENGINE_IMAGES")]
    pub engine_images: Option<usize>,
    /// Milliseconds before a parked space's wake is due that the host
    /// activates it, so the wake fires on time (0: activate at the due time).
    #[arg(long, env = "SPACEWAKE_SCHEDULE_LEAD_MS", default_value_t = 100,
          value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub schedule_lead_ms: u64,
    /// CPU milliseconds per ledger window that a space's scheduled work may
    /// spend before its scheduled wakes are skipped (unlimited when omitted).
    #[arg(long, env = "SPACEWAKE_SCHEDULED_CPU_BUDGET_MS")]
    pub scheduled_cpu_budget_ms: Option<u64>,
    /// Back off schedules whose output no session reads (`off` to disable).
    #[arg(long, env = "SPACEWAKE_BACKOFF", value_enum, default_value_t = OnOff::On)]
    pub backoff: OnOff,
    /// Consecutive unread fires per doubling of the effective interval.
    #[arg(long, env = "SPACEWAKE_BACKOFF_UNREAD_FIRES", default_value_t = 3)]
    pub backoff_unread_fires: u32,
    /// Largest back-off factor.
    #[arg(long, env = "SPACEWAKE_BACKOFF_CAP", default_value_t = 16)]
    pub backoff_cap: u32,
    /// Ledger window in hours (24: one UTC day).
    #[arg(long, env = "SPACEWAKE_LEDGER_WINDOW_HOURS", default_value_t = 24)]
    pub ledger_window_hours: u64,
    /// Export tracing spans (one per wave) as OTLP/HTTP protobuf to this
    /// collector base URL (`/v1/traces` is appended), `http://` or
    /// `https://`. No export when omitted.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// A did:key allowed to use the operator API (repeatable; env:
    /// comma-separated). The host's own key (`DATA/host.key`) always is.
    #[arg(
        long,
        env = "SPACEWAKE_OPERATORS",
        value_delimiter = ',',
        value_name = "DID"
    )]
    pub operator: Vec<String>,
    /// A host (name or address, with or without a port) that pattern code's
    /// requests may reach although the egress policy refuses it (loopback,
    /// private networks, ...). Repeatable; env: comma-separated
    /// (`spec/effects.md`).
    #[arg(
        long,
        env = "SPACEWAKE_EGRESS_ALLOW",
        value_delimiter = ',',
        value_name = "HOST[:PORT]"
    )]
    pub egress_allow: Vec<crate::effects::policy::AllowEntry>,
    /// How long one effect request may take in all (redirects and body
    /// included) before it is an error.
    #[arg(long, env = "SPACEWAKE_EFFECTS_TIMEOUT_MS", default_value_t = 30_000)]
    pub effects_timeout_ms: u64,
    /// How long connecting for an effect request may take.
    #[arg(
        long,
        env = "SPACEWAKE_EFFECTS_CONNECT_TIMEOUT_MS",
        default_value_t = 5_000
    )]
    pub effects_connect_timeout_ms: u64,
    /// The largest response body an effect accepts; a larger one is an
    /// error, never a truncated result.
    #[arg(long, env = "SPACEWAKE_EFFECTS_MAX_RESPONSE_BYTES", default_value_t = 5 << 20)]
    pub effects_max_response_bytes: usize,
    /// Effect requests of one space on their way at once (more are held).
    #[arg(long, env = "SPACEWAKE_EFFECTS_IN_FLIGHT", default_value_t = 8)]
    pub effects_in_flight: usize,
    /// Effect requests a second one space may send, sustained (its token
    /// bucket; more are held).
    #[arg(long, env = "SPACEWAKE_EFFECTS_PER_SECOND", default_value_t = 2.0)]
    pub effects_per_second: f64,
    /// Effect requests one space may send at once before the pace applies.
    #[arg(long, env = "SPACEWAKE_EFFECTS_BURST", default_value_t = 20.0)]
    pub effects_burst: f64,
    /// The model endpoint `generateText`, `generateObject` and `llm` call:
    /// the base URL of a server speaking the OpenAI-compatible
    /// chat-completions protocol (`URL/chat/completions`), e.g.
    /// `https://api.openai.com/v1` or `http://127.0.0.1:11434/v1`. Without
    /// one, model calls answer their error state (`noModel`).
    #[arg(long, env = "SPACEWAKE_MODEL_ENDPOINT", value_name = "URL")]
    pub model_endpoint: Option<url::Url>,
    /// A file holding the endpoint's API key (sent as a bearer token).
    #[arg(long, env = "SPACEWAKE_MODEL_KEY_FILE", value_name = "FILE")]
    pub model_key_file: Option<PathBuf>,
    /// The model asked for when a call names none.
    #[arg(long, env = "SPACEWAKE_MODEL", default_value = "gpt-4o-mini")]
    pub model: String,
    /// How long one model call may take in all before it is an error.
    #[arg(long, env = "SPACEWAKE_MODEL_TIMEOUT_MS", default_value_t = 120_000)]
    pub model_timeout_ms: u64,
    /// Response bytes a second one space may receive, sustained (8 times as
    /// many at once).
    #[arg(long, env = "SPACEWAKE_EFFECTS_BYTES_PER_SECOND", default_value_t = 1 << 20)]
    pub effects_bytes_per_second: u64,
    /// On SIGTERM or SIGINT, how long the graceful shutdown may take
    /// (finishing waves, closing sessions, releasing leases) before what is
    /// left is abandoned; a second signal exits at once.
    #[arg(long, env = "SPACEWAKE_SHUTDOWN_GRACE_MS", default_value_t = 10_000)]
    pub shutdown_grace_ms: u64,
    /// Testing only: run the host's clock this far ahead of the system clock.
    #[arg(long, hide = true, default_value_t = 0)]
    pub clock_offset_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum JitterArg {
    Keyed,
    Random,
}

pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    if let Some(ms) = args.test_minute_ms {
        crate::schedule::grid::set_test_minute_ms(ms);
    }
    // A mistyped origin fails at once, not after the start-up check.
    crate::console::guard::HostRule::new(args.listen, &args.public_origin)
        .map_err(|e| anyhow::anyhow!("--public-origin: {e}"))?;
    let mut cfg = StoreConfig::new(&args.data);
    // Held until the process exits: one host per data directory.
    cfg.owns_directory = true;
    cfg.synchronous = args.sync;
    cfg.lease_ttl_ms = args.lease_ttl_ms;
    cfg.lease_renew_ms = args.lease_renew_ms;
    cfg.history_commits = args.commit_history;
    anyhow::ensure!(
        cfg.lease_renew_ms < cfg.lease_ttl_ms,
        "--lease-renew-ms ({}) must be shorter than --lease-ttl-ms ({})",
        cfg.lease_renew_ms,
        cfg.lease_ttl_ms
    );
    if let Some(on_time) = args.on_time_scheduled {
        anyhow::ensure!(
            on_time <= args.max_scheduled,
            "--on-time-scheduled {on_time} is above --max-scheduled {}: no more scheduled \
             activations than that are ever in flight; lower it, or raise --max-scheduled",
            args.max_scheduled
        );
    }
    let clock: Arc<dyn Clock> = if args.clock_offset_ms > 0 {
        Arc::new(crate::clock::OffsetClock {
            offset_ms: args.clock_offset_ms,
        })
    } else {
        Arc::new(SystemClock)
    };
    std::fs::create_dir_all(&args.data)
        .with_context(|| format!("creating the data directory {}", args.data.display()))?;
    let mut lock = DirectoryLock::acquire(
        &args.data,
        LockInfo {
            pid: std::process::id(),
            command: "serve".into(),
            listen: None,
            started_at_ms: clock.now_ms(),
        },
    )?;
    let store = match &args.store {
        None => Store::open(cfg, clock, Counters::new()).context("opening the data directory")?,
        Some(url) => super::open_database(url, cfg, clock)?,
    };
    // Operators: the host's own key (whoever can read the data directory)
    // and every --operator.
    let host_key = crate::operator::host_key(&args.data)?;
    for did in &args.operator {
        crate::protocol::decode_did_key(did)
            .with_context(|| format!("--operator {did:?} is not an ed25519 did:key"))?;
    }
    let operators = crate::http::OperatorAuth::new(
        std::iter::once(host_key.did()).chain(args.operator.iter().cloned()),
    );
    let space_creators = space_creators(&args.space_creators, &host_key.did(), &args.operator)?;
    // Bound before the host is made: with port 0, the origin patterns are
    // given (`getPatternEnvironment().apiUrl`, by default this address) is
    // the port actually bound, not port 0.
    let std_listener = std::net::TcpListener::bind(args.listen)
        .with_context(|| format!("listening on {}", args.listen))?;
    std_listener.set_nonblocking(true)?;
    let local = std_listener.local_addr()?;
    let host_cfg = crate::host::HostConfig {
        idle_park_ms: args.idle_park_ms,
        flush_deadline_ms: args.flush_deadline_ms,
        session_timeout_ms: args.session_timeout_ms,
        max_active_spaces: args.max_active_spaces as usize,
        max_spaces_per_identity: args.max_spaces_per_identity,
        space_creators,
        space_creates_per_minute: args.space_creates_per_minute,
        space_quota_bytes: args.space_quota_mib.saturating_mul(1024 * 1024),
        schedule: crate::host::ScheduleConfig {
            enabled: args.schedule == OnOff::On,
            jitter_mode: match args.jitter {
                JitterArg::Keyed => crate::schedule::JitterMode::Keyed,
                JitterArg::Random => crate::schedule::JitterMode::Random,
            },
            jitter_window_ms: args.jitter_window_minutes * crate::schedule::grid::minute_ms(),
            max_scheduled: args.max_scheduled,
            on_time_scheduled: args
                .on_time_scheduled
                .unwrap_or_else(crate::host::default_on_time_scheduled),
            lead_ms: args.schedule_lead_ms,
            scheduled_budget_us: args.scheduled_cpu_budget_ms.map(|ms| ms * 1_000),
            backoff: crate::schedule::backoff::BackoffPolicy {
                enabled: args.backoff == OnOff::On,
                unread_threshold: args.backoff_unread_fires.max(1),
                cap: args.backoff_cap.max(1),
            },
        },
        runtime: crate::runtime::RuntimeConfig {
            ledger_window_ms: args.ledger_window_hours.max(1) * 3_600_000,
            engine_images: args
                .engine_images
                .unwrap_or_else(|| crate::host::threads_kept(args.max_scheduled)),
            public_origin: args
                .public_origin
                .first()
                .map(|o| o.trim_end_matches('/').to_string())
                .unwrap_or_else(|| format!("http://{local}"))
                .into(),
            ..Default::default()
        },
        ..Default::default()
    };
    let mut host_cfg = host_cfg;
    host_cfg.runtime.effects = Some(broker(&args, &host_cfg.runtime.public_origin, &store)?);
    let host = crate::host::Host::new(store.clone(), host_cfg);
    let checked = crate::clock::Stopwatch::start();
    host.check_start().context("the start-up check failed")?;
    tracing::info!(
        ms = checked.elapsed().as_millis() as u64,
        "start-up check passed (engine, and one tenure in a scratch space)"
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    // The host's last reference must go on this thread, after the runtime:
    // dropping a PostgreSQL client inside the runtime's shutdown (a task
    // still holding the host) panics, and the process would abort.
    let last = (host.clone(), store.clone());
    let lock_held = &mut lock;
    let served = rt.block_on(async move {
        let lock = lock_held;
        // The console's sign-in token: new each start, in the data
        // directory for whoever may read it, and printed below.
        let (console_auth, console_token, token_path) =
            crate::console::auth::ConsoleAuth::create(&args.data)?;
        let listener = tokio::net::TcpListener::from_std(std_listener)
            .with_context(|| format!("listening on {local}"))?;
        let hosts = crate::console::guard::HostRule::new(local, &args.public_origin)
            .map_err(|e| anyhow::anyhow!("--public-origin: {e}"))?;
        let console = crate::http::console::ConsoleState::new(console_auth)
            .guarded(hosts, args.console_sign_ins_per_minute)
            .reading(args.console_read);
        let mut state = crate::http::HttpState::new(host.clone(), operators)
            .with_console(console)
            .with_ws_open_timeout(millis(args.ws_open_timeout_ms))
            .with_metrics_top_spaces(args.metrics_top_spaces as usize);
        if let Some(pg) = store.postgres() {
            // The registry: where other hosts relay to this one, and the
            // key they check its relays by.
            let advertise = args.advertise.clone().unwrap_or_else(|| local.to_string());
            if local.ip().is_unspecified() && args.advertise.is_none() {
                tracing::warn!(
                    %advertise,
                    "listening on a wildcard address: other machines cannot reach this host at \
                     it; set --advertise to the address they can"
                );
            }
            let (pg, did) = (pg.clone(), host_key.did());
            let registering = advertise.clone();
            tokio::task::spawn_blocking(move || pg.register(&registering, &did))
                .await?
                .context("publishing this host in the fleet's registry")?;
            let pg = store.postgres().expect("checked above").clone();
            let relay = crate::relay::Relay::new(host_key.clone(), pg, host.counters().clone())?;
            state = state.with_relay(relay);
            tracing::info!(%advertise, "relaying for the fleet");
        }
        let limits = crate::http::conn::ConnLimits {
            header_read: millis(args.header_read_timeout_ms),
            idle: millis(args.idle_timeout_ms),
            per_peer: args.max_connections_per_peer,
        };
        let uncapped = crate::http::conn::Uncapped::default();
        if let Some(relay) = state.relay.clone() {
            tokio::spawn(crate::relay::keep_fleet_addresses(relay, uncapped.clone()));
        }
        // Before anyone can learn the address: a SIGTERM from then on is a
        // graceful shutdown, never the default (immediate) death.
        let mut signals = Signals::new()?;
        // The CLI finds the running server through the lock file.
        lock.set_listen(local.to_string())
            .with_context(|| format!("writing {}", lock.path().display()))?;
        let booted = host.boot().context("boot discovery")?;
        // The waker's first pass is boot discovery's "a schedule is due" arm.
        host.start_waker();
        tokio::spawn(crate::session::watch_grants(host.clone()));
        tracing::info!(
            listen = %local,
            data = %args.data.display(),
            holder = store.holder(),
            operator = %host_key.did(),
            booted,
            "spacewake serving"
        );
        // Tests read the first line to learn the port when listening on :0.
        // Whoever reads it may close the pipe after it (`serve | head -1`):
        // a stdout that is gone must not stop the host, so write errors are
        // ignored rather than panicking as `println!` would.
        {
            use std::io::Write as _;
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "listening on {local}");
            let _ = writeln!(
                out,
                "console: http://{local}/console (sign-in token {console_token}, also in {})",
                token_path.display()
            );
            let _ = out.flush();
        }
        tokio::spawn(crate::http::console::sample_throughput(state.clone()));
        let (stop_accepting, accepting_stopped) = tokio::sync::oneshot::channel::<()>();
        let http = tokio::spawn(crate::http::conn::serve(
            listener,
            crate::http::router(state),
            limits,
            uncapped,
            host.counters().clone(),
            async {
                let _ = accepting_stopped.await;
            },
        ));
        let signal = signals.next().await;
        // A second signal during the grace period ends the process at once.
        tokio::spawn(async move {
            let again = signals.next().await;
            eprintln!("{again} again: exiting without waiting for the shutdown");
            std::process::exit(1);
        });
        let grace = Duration::from_millis(args.shutdown_grace_ms);
        shut_down(&host, signal, grace, stop_accepting, http).await;
        anyhow::Ok(())
    });
    drop(rt);
    drop(last);
    // The lock goes last, once nothing of this process uses the files.
    drop(lock);
    served?;
    Ok(ExitCode::SUCCESS)
}

/// A knob in milliseconds, 0 meaning off.
fn millis(ms: u64) -> Option<Duration> {
    (ms > 0).then(|| Duration::from_millis(ms))
}

/// `--space-creators`: `open`, or dids (each checked), to which the host's
/// operators are added (they create through the operator API anyway).
fn space_creators(
    given: &[String],
    host_did: &str,
    operators: &[String],
) -> anyhow::Result<crate::host::Creators> {
    let given: Vec<&str> = given
        .iter()
        .map(|d| d.trim())
        .filter(|d| !d.is_empty())
        .collect();
    if given.is_empty() || given == ["open"] {
        return Ok(crate::host::Creators::Open);
    }
    let mut dids = std::collections::HashSet::new();
    for did in given {
        crate::protocol::decode_did_key(did).with_context(|| {
            format!("--space-creators {did:?} is neither `open` nor an ed25519 did:key")
        })?;
        dids.insert(did.to_string());
    }
    dids.insert(host_did.to_string());
    dids.extend(operators.iter().cloned());
    Ok(crate::host::Creators::Only(dids))
}

/// SIGTERM and SIGINT, whichever comes first.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> anyhow::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate()).context("listening for SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("listening for SIGINT")?,
        })
    }

    async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

/// The graceful shutdown, bounded by `grace`: stop accepting, refuse new
/// activations and tell every session, let each active space finish the
/// wave in flight, release its lease and checkpoint its file, checkpoint
/// the host directory, then log one line saying what was done. Whatever
/// is not done by the deadline is abandoned: nothing is half-committed
/// (every commit is one SQLite transaction), and this host's next process
/// takes the abandoned leases over at once.
async fn shut_down(
    host: &crate::host::Host,
    signal: &str,
    grace: Duration,
    stop_accepting: tokio::sync::oneshot::Sender<()>,
    http: tokio::task::JoinHandle<()>,
) {
    let started = crate::clock::Stopwatch::start();
    tracing::info!(signal, grace_ms = grace.as_millis() as u64, "shutting down");
    let counters = host.counters().clone();
    host.begin_shutdown();
    let _ = stop_accepting.send(());
    let spaces = {
        let host = host.clone();
        tokio::task::spawn_blocking(move || host.stop_spaces(started, grace))
    };
    // Plain HTTP requests in flight finish; WebSocket sessions close on
    // the shutdown signal.
    let _ = tokio::time::timeout(started.left_of(grace), http).await;
    while counters.host().get(Counter::SessionsOpen) > 0 && !started.passed(grace) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let report = spaces.await.unwrap_or(crate::host::StopReport {
        stopped: 0,
        abandoned: host.active_spaces(),
    });
    let directory = host.store().directory().checkpoint_all();
    // Counted only here: every one is this shutdown's.
    let sessions = counters.host().get(Counter::SessionsClosedAtShutdown);
    let left_open = counters.host().get(Counter::SessionsOpen);
    let mut line = format!(
        "shut down after {signal} in {} ms: {} told and closed, {} stopped \
         (waves finished, leases released, files checkpointed)",
        started.elapsed().as_millis(),
        crate::human::count(sessions.max(0) as u64, "session", "sessions"),
        crate::human::count(report.stopped as u64, "space", "spaces"),
    );
    if !report.abandoned.is_empty() {
        line.push_str(&format!(
            ", {} abandoned at the {} ms grace deadline ({}; the next start takes their leases over at once)",
            crate::human::count(report.abandoned.len() as u64, "space", "spaces"),
            grace.as_millis(),
            report.abandoned.join(", ")
        ));
    }
    if left_open > 0 {
        line.push_str(&format!(
            ", {left_open} sessions still open at the deadline"
        ));
    }
    if let Err(e) = directory {
        line.push_str(&format!("; the host directory was not checkpointed: {e}"));
    }
    tracing::info!("{line}");
}

/// The host's effect broker, from the flags: relative URLs resolve against
/// the serving origin.
fn broker(
    args: &ServeArgs,
    origin: &str,
    store: &Store,
) -> anyhow::Result<Arc<crate::effects::Broker>> {
    let origin =
        url::Url::parse(origin).with_context(|| format!("the serving origin {origin:?}"))?;
    let mut cfg = crate::effects::BrokerConfig::new(origin);
    cfg.allow = crate::effects::policy::Allowlist::new(args.egress_allow.clone());
    cfg.fetch = crate::effects::http::FetchLimits {
        connect_timeout: Duration::from_millis(args.effects_connect_timeout_ms.max(1)),
        total_timeout: Duration::from_millis(args.effects_timeout_ms.max(1)),
        max_response_bytes: args.effects_max_response_bytes,
    };
    cfg.budget = crate::effects::budget::Limits {
        in_flight: args.effects_in_flight.max(1),
        requests_per_second: args.effects_per_second.max(0.001),
        request_burst: args.effects_burst.max(1.0),
        bytes_per_second: args.effects_bytes_per_second.max(1) as f64,
        byte_burst: args.effects_bytes_per_second.max(1) as f64 * 8.0,
    };
    if let Some(endpoint) = &args.model_endpoint {
        let key = match &args.model_key_file {
            Some(f) => Some(
                std::fs::read_to_string(f)
                    .with_context(|| format!("reading the model key file {}", f.display()))?
                    .trim()
                    .to_string(),
            )
            .filter(|k| !k.is_empty()),
            None => None,
        };
        cfg.model = Some(crate::effects::model::ModelConfig {
            endpoint: endpoint.clone(),
            key,
            default_model: args.model.clone(),
            timeout: Duration::from_millis(args.model_timeout_ms.max(1)),
            max_response_bytes: args.effects_max_response_bytes,
        });
    } else if args.model_key_file.is_some() {
        anyhow::bail!("--model-key-file needs --model-endpoint");
    }
    crate::effects::Broker::new(cfg, store.clock().clone(), store.counters().clone())
        .map_err(|e| anyhow::anyhow!(e))
}
