//! Command-line interface (clap). Only argument parsing and dispatch live
//! here; each command's work is in its own module.

use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "spacewake",
    version,
    about = "A space-serving runtime with scheduled wakes"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the host: WebSocket sessions, the waker, the operator routes.
    Serve(ServeArgs),
    /// Validate patterns: one diagnostic per problem, exit 0 when all are valid.
    Check {
        /// Pattern entry files (.ts / .tsx).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Run pattern scenario files; ends with `N passed, N failed`.
    Scenario {
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Run a benchmark and print side-by-side figures.
    Bench {
        #[command(subcommand)]
        which: BenchCommand,
    },
    /// Inspect a data directory without a running server.
    Spaces(SpacesArgs),
    /// Operate schedule entries in a data directory: list, trigger, pause, resume, fires.
    Schedules {
        #[command(subcommand)]
        which: crate::schedule_cli::SchedulesCommand,
    },
    /// Show a space's compute ledger and top actions, or set its scheduled budget.
    Ledger {
        #[arg(long, env = "SPACEWAKE_DATA", default_value = "./spacewake-data")]
        data: PathBuf,
        #[arg(long)]
        space: String,
        /// How many of the most expensive actions to list.
        #[arg(long, default_value_t = 10)]
        top: usize,
        /// Set the space's scheduled CPU budget per window: milliseconds,
        /// `none` (unlimited) or `default` (the host's).
        #[arg(long)]
        set_budget_ms: Option<String>,
    },
    /// Grant a principal read or write access to a space (data directory).
    Grant {
        #[arg(long, env = "SPACEWAKE_DATA", default_value = "./spacewake-data")]
        data: PathBuf,
        #[arg(long)]
        space: String,
        /// The principal's did:key.
        #[arg(long)]
        did: String,
        /// `read`, `write`, or `none` to revoke.
        #[arg(long)]
        access: String,
    },
    /// Print this client's did:key (creating the key file if missing).
    Identity(ClientArgs),
    /// Deploy a pattern as a new piece in a space on a running server.
    Deploy {
        #[command(flatten)]
        client: ClientArgs,
        /// The pattern's entry file; its relative imports are sent too.
        file: PathBuf,
        /// Which export to instantiate (default: the default export).
        #[arg(long)]
        export: Option<String>,
        /// The piece's argument, as JSON.
        #[arg(long, default_value = "{}")]
        argument: String,
    },
    /// Send an event to the stream at a piece's result path.
    Send {
        #[command(flatten)]
        client: ClientArgs,
        #[arg(long)]
        piece: String,
        /// Dot-separated result path of the stream (e.g. `increment`).
        #[arg(long)]
        stream: String,
        #[arg(long, default_value = "{}")]
        payload: String,
        /// Idempotency key; a random one when omitted.
        #[arg(long)]
        event_id: Option<String>,
    },
    /// Read a piece's result (or a path inside it).
    Read {
        #[command(flatten)]
        client: ClientArgs,
        #[arg(long)]
        piece: String,
        /// Dot-separated path inside the result; the whole result when omitted.
        #[arg(long, default_value = "")]
        path: String,
    },
    /// Internal helpers used by the crash and multi-host tests.
    #[command(hide = true)]
    Debug {
        #[command(subcommand)]
        which: DebugCommand,
    },
}

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Data directory (created if missing).
    #[arg(long, env = "SPACEWAKE_DATA", default_value = "./spacewake-data")]
    pub data: PathBuf,
    /// Address to listen on.
    #[arg(long, env = "SPACEWAKE_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// SQLite synchronous mode: `normal` survives process crashes, `full` also power loss.
    #[arg(long, env = "SPACEWAKE_SYNC", value_enum, default_value_t = crate::store::Synchronous::Normal)]
    pub sync: crate::store::Synchronous,
    /// Lease time-to-live in milliseconds.
    #[arg(long, env = "SPACEWAKE_LEASE_TTL_MS", default_value_t = 15_000)]
    pub lease_ttl_ms: u64,
    /// Lease renewal interval in milliseconds.
    #[arg(long, env = "SPACEWAKE_LEASE_RENEW_MS", default_value_t = 5_000)]
    pub lease_renew_ms: u64,
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
    /// At most this many spaces active at once (each a thread, a JavaScript
    /// runtime and an open file); past it, opens and ingests for another
    /// space are refused (`overloaded`, HTTP 503) and boot discovery waits.
    #[arg(long, env = "SPACEWAKE_MAX_ACTIVE_SPACES", default_value_t = 4_096,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_active_spaces: u64,
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
    /// collector base URL (`/v1/traces` is appended). Plain `http://` only;
    /// terminate TLS in a collector sidecar. No export when omitted.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", value_name = "URL")]
    pub otlp_endpoint: Option<String>,
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

/// How a CLI client reaches a running server.
#[derive(Debug, clap::Args)]
pub struct ClientArgs {
    /// Server address.
    #[arg(long, env = "SPACEWAKE_SERVER", default_value = "127.0.0.1:8080")]
    pub server: String,
    /// The space to open.
    #[arg(long, env = "SPACEWAKE_SPACE", default_value = "home")]
    pub space: String,
    /// The client's ed25519 secret key file (created on first use, mode 0600).
    #[arg(
        long,
        env = "SPACEWAKE_KEY",
        default_value = "./spacewake-identity.key"
    )]
    pub key: PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct SpacesArgs {
    #[arg(long, env = "SPACEWAKE_DATA", default_value = "./spacewake-data")]
    pub data: PathBuf,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Wave time with compute metering on vs off.
    Accounting {
        #[arg(long, default_value_t = 1.0)]
        scale: f64,
    },
    /// Scheduled wakes: index-hook overhead, wakes/s, lateness, memory.
    Schedule {
        #[arg(long, default_value_t = 1.0)]
        scale: f64,
        /// Run only these figures (default: all).
        #[arg(long, value_enum, value_delimiter = ',')]
        only: Vec<crate::bench::schedule::Figure>,
    },
    /// One probe of `bench serve`'s memory figure (run by it in a fresh process).
    #[command(hide = true)]
    ServeMemory {
        #[arg(long)]
        spaces: usize,
        /// A space file every registered space starts as a copy of.
        #[arg(long)]
        template: std::path::PathBuf,
        /// The template's piece each parked space is sent an event for.
        #[arg(long)]
        piece: String,
        #[arg(long)]
        parked: bool,
    },
    /// Load generator against the real server on loopback.
    Serve {
        #[arg(long, default_value_t = 1.0)]
        scale: f64,
        /// Run only these figures (default: all).
        #[arg(long, value_enum, value_delimiter = ',')]
        only: Vec<crate::bench::serve::Figure>,
    },
    /// Compiler cache, instantiation, events and derivations.
    Patterns {
        #[arg(long, default_value_t = 1.0)]
        scale: f64,
    },
    /// Store throughput and directory discovery.
    Store {
        /// Work directory (a temporary one when omitted).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Scale factor for quick runs (1.0 = the full benchmark).
        #[arg(long, default_value_t = 1.0)]
        scale: f64,
    },
}

#[derive(Debug, Subcommand)]
pub enum DebugCommand {
    /// Commit in a loop, printing `ack SEQ` after each acknowledged commit.
    CrashWriter {
        #[arg(long)]
        data: PathBuf,
        #[arg(long)]
        space: String,
    },
    /// Contend for one space's lease, printing held intervals.
    LeaseContender {
        #[arg(long)]
        data: PathBuf,
        #[arg(long)]
        space: String,
        #[arg(long)]
        millis: u64,
        #[arg(long, default_value_t = 300)]
        ttl_ms: u64,
    },
}
