//! The command layer: argument parsing (clap) and one file per command
//! family. Everything here sits on top of the domain modules (host, store,
//! schedule, accounting, protocol); no domain module imports from here.
//!
//! - `serve.rs` — `spacewake serve`: wires a host together and runs it;
//! - `client.rs` — `identity`, `deploy`, `send`, `read` (WebSocket clients);
//! - `remote.rs` — where an operator command acts: the running server's
//!   operator API, or the data directory when no server holds it;
//! - `grant.rs` — `grant`;
//! - `spaces.rs` — `spaces` (list, create);
//! - `pieces.rs` — `pieces`;
//! - `schedules.rs` — `schedules list|trigger|pause|resume|fires`;
//! - `ledger.rs` — `ledger`;
//! - `bench.rs` — `bench …`;
//! - `table.rs` — the plain-text tables they print.

pub mod bench;
pub mod client;
pub mod events;
pub mod grant;
pub mod ledger;
pub mod pieces;
pub mod remote;
pub mod schedules;
pub mod serve;
pub mod spaces;
pub mod table;

use crate::clock::SystemClock;
use crate::metrics::Counters;
use crate::store::{Store, StoreConfig};
use anyhow::Context;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

pub use serve::ServeArgs;

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
    Serve(Box<ServeArgs>),
    /// Validate patterns: one diagnostic per problem, exit 0 when all are valid.
    Check {
        /// Pattern entry files (.ts / .tsx).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Write `commonfabric.d.ts` (the authoring API's type declarations,
    /// exactly what this runtime exports) into a directory of patterns, and
    /// a `tsconfig.json` if it has none, so `tsc --noEmit` and editors can
    /// check them.
    Types {
        /// The directory of patterns (created if missing).
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
    /// Run pattern scenario files; ends with `N passed, N failed`.
    Scenario {
        /// Scenario files (`*.scenario.json`).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Run pattern tests in the reference's format (`*.test.tsx` files whose
    /// result holds `[TESTS]`); ends with `N passed, N failed`.
    Test {
        /// Pattern test files (`*.test.tsx`).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Run a benchmark and print side-by-side figures.
    Bench {
        #[command(subcommand)]
        which: bench::BenchCommand,
    },
    /// List spaces (active or parked, next wake, undelivered, CPU), or create one.
    Spaces(spaces::SpacesArgs),
    /// A space's events: `dead-letters` lists those consumed without
    /// delivery after their retries, and those still being retried.
    Events {
        #[command(subcommand)]
        which: events::EventsCommand,
    },
    /// List a space's pieces (id, pattern, name, when deployed), or delete one.
    Pieces(pieces::PiecesArgs),
    /// Schedule entries: list, trigger, pause, resume, fires.
    Schedules {
        #[command(subcommand)]
        which: schedules::SchedulesCommand,
    },
    /// Show a space's compute ledger and top actions, or set its scheduled
    /// budget or its effect knobs.
    Ledger {
        #[command(flatten)]
        op: remote::OperatorArgs,
        /// The space whose ledger to show (or whose budget to set).
        #[arg(long)]
        space: String,
        /// How many of the most expensive actions to list.
        #[arg(long, default_value_t = 10)]
        top: usize,
        /// Set the space's scheduled CPU budget per window: milliseconds,
        /// `none` (unlimited) or `default` (the host's).
        #[arg(long)]
        set_budget_ms: Option<String>,
        /// Set the space's cap on effect requests in flight (`default`: the
        /// host's `--effects-in-flight`).
        #[arg(long, value_name = "N|default")]
        set_effects_in_flight: Option<String>,
        /// Set the space's sustained effect requests per second (`default`:
        /// the host's `--effects-per-second`).
        #[arg(long, value_name = "R|default")]
        set_effects_per_second: Option<String>,
        /// Set the space's sustained response bytes per second (`default`:
        /// the host's `--effects-bytes-per-second`).
        #[arg(long, value_name = "N|default")]
        set_effects_bytes_per_second: Option<String>,
        /// Print the ledger as JSON (the operator API's shape) instead of tables.
        #[arg(long, conflicts_with_all = ["set_budget_ms", "set_effects_in_flight", "set_effects_per_second", "set_effects_bytes_per_second"])]
        json: bool,
    },
    /// Grant a principal read or write access to a space (`none` revokes).
    Grant {
        #[command(flatten)]
        op: remote::OperatorArgs,
        /// The space to grant access to.
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
        /// The piece's id (`pc-…`, as `deploy` printed it).
        #[arg(long)]
        piece: String,
        /// Dot-separated result path of the stream (e.g. `increment`).
        #[arg(long)]
        stream: String,
        /// The event's payload, as JSON text.
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
        /// The piece's id (`pc-…`, as `deploy` printed it).
        #[arg(long)]
        piece: String,
        /// Dot-separated path inside the result; the whole result when omitted.
        #[arg(long, default_value = "")]
        path: String,
    },
    /// Start a PostgreSQL for development in DIR (created the first
    /// time, kept running after this command) and print its URL; `--stop`
    /// stops it. Uses the machine's server binaries (the distribution's
    /// postgresql package).
    Postgres {
        /// The cluster's directory.
        #[arg(long, default_value = "./spacewake-postgres")]
        dir: PathBuf,
        /// Stop the cluster running in `--dir` instead of starting it.
        #[arg(long)]
        stop: bool,
    },
    /// Internal helpers used by the crash and multi-host tests.
    #[command(hide = true)]
    Debug {
        #[command(subcommand)]
        which: DebugCommand,
    },
}

/// How a CLI client reaches a running server.
#[derive(Debug, clap::Args)]
pub struct ClientArgs {
    /// Server address (`host:port`, `http://…` or `ws://…`). Default: the
    /// server holding `--data` (found through its lock), else
    /// 127.0.0.1:8080.
    #[arg(long, env = "SPACEWAKE_SERVER")]
    pub server: Option<String>,
    /// The data directory of a server on this machine, to find its address.
    #[arg(long, env = "SPACEWAKE_DATA", default_value = "./spacewake-data")]
    pub data: PathBuf,
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
    /// One side of the lease race on a PostgreSQL store: reads `acquire`,
    /// `commit EPOCH` and `release EPOCH` lines, answers each on stdout.
    LeaseRacer {
        #[arg(long)]
        store: String,
        #[arg(long)]
        space: String,
        #[arg(long)]
        holder: String,
    },
    /// Print the JavaScript the compiler emits for a pattern, module by
    /// module (what the engine runs; its line numbers are the ones a
    /// pattern's JS stack names).
    Emit { file: PathBuf },
}

/// Where a command finds the host's data directory.
#[derive(Debug, Clone, clap::Args)]
pub struct DataArgs {
    /// The host's data directory (the one `serve --data` uses).
    #[arg(long, env = "SPACEWAKE_DATA", default_value = "./spacewake-data")]
    pub data: PathBuf,
    /// A fleet's PostgreSQL database (`postgres://…`, the one `serve
    /// --store` uses): the command then acts on every space of the fleet,
    /// in the database directly.
    #[arg(long, env = "SPACEWAKE_STORE")]
    pub store: Option<String>,
}

/// Opens the fleet's database at `url` (applying its migrations) with a
/// host's settings.
pub(crate) fn open_database(
    url: &str,
    cfg: StoreConfig,
    clock: Arc<dyn crate::clock::Clock>,
) -> anyhow::Result<Store> {
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        anyhow::bail!(
            "--store must be a postgres:// URL (got {url:?}); \
             leave it out to keep the spaces in SQLite files under --data"
        );
    }
    Store::open_postgres(url, cfg, clock, Counters::new())
        .with_context(|| format!("opening the fleet's database {}", redact(url)))
}

/// `url` without its password, for messages.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let user = &url[s + 3..at];
            match user.split_once(':') {
                Some((name, _)) => format!("{}{name}:***{}", &url[..s + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// Opens an existing data directory on the system clock. Never creates
/// one: a mistyped `--data` is one sentence, the same for every command,
/// and leaves nothing behind.
pub(crate) fn open_existing(data: &std::path::Path) -> anyhow::Result<Store> {
    if !data.join("host.sqlite").is_file() {
        anyhow::bail!(
            "{} is not a spacewake data directory (it has no host.sqlite); \
             pass --data DIR or set SPACEWAKE_DATA (or, for an operator command, name a \
             running server with --server ADDR)",
            data.display()
        );
    }
    Store::open(
        StoreConfig::new(data),
        Arc::new(SystemClock),
        Counters::new(),
    )
    .with_context(|| format!("opening the data directory {}", data.display()))
}

/// Runs the parsed command; the process exits with the code it returns.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Serve(args) => serve::run(*args),
        Command::Check { files } => Ok(crate::check::run(&files)),
        Command::Types { dir } => types(&dir),
        Command::Scenario { files } => Ok(crate::scenario::run_files(&files)),
        Command::Test { files } => Ok(crate::pattern_test::run_files(&files)),
        Command::Bench { which } => bench::run(which),
        Command::Spaces(args) => spaces::run(args),
        Command::Pieces(args) => pieces::run(&args),
        Command::Events { which } => events::run(&which),
        Command::Grant {
            op,
            space,
            did,
            access,
        } => grant::run(&op, &space, &did, &access),
        Command::Identity(c) => client::identity(&c),
        Command::Ledger {
            op,
            space,
            top,
            set_budget_ms,
            set_effects_in_flight,
            set_effects_per_second,
            set_effects_bytes_per_second,
            json,
        } => ledger::run(
            &op,
            &space,
            top,
            json,
            set_budget_ms,
            [
                set_effects_in_flight,
                set_effects_per_second,
                set_effects_bytes_per_second,
            ],
        ),
        Command::Schedules { which } => schedules::run(which),
        Command::Deploy {
            client,
            file,
            export,
            argument,
        } => client::deploy(&client, &file, export, &argument),
        Command::Send {
            client,
            piece,
            stream,
            payload,
            event_id,
        } => client::send(&client, &piece, &stream, &payload, event_id),
        Command::Read {
            client,
            piece,
            path,
        } => client::read(&client, &piece, &path),
        Command::Postgres { dir, stop } => {
            if stop {
                crate::pg_cluster::PgCluster::stop_kept(&dir)?;
                println!("stopped the PostgreSQL in {}", dir.display());
            } else {
                let url = crate::pg_cluster::PgCluster::start_kept(&dir)?;
                println!("{url}");
                eprintln!(
                    "PostgreSQL for development in {} (stop it with: spacewake postgres --stop --dir {})",
                    dir.display(),
                    dir.display()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Debug { which } => match which {
            DebugCommand::CrashWriter { data, space } => crate::debug::crash_writer(&data, &space),
            DebugCommand::LeaseContender {
                data,
                space,
                millis,
                ttl_ms,
            } => crate::debug::lease_contender(&data, &space, millis, ttl_ms),
            DebugCommand::LeaseRacer {
                store,
                space,
                holder,
            } => crate::debug::lease_racer(&store, &space, &holder),
            DebugCommand::Emit { file } => crate::debug::emit(&file),
        },
    }
}

impl ClientArgs {
    /// `host:port` of the server to talk to: `--server`, else the one
    /// holding `--data`, else the default listen address.
    pub fn server_addr(&self) -> anyhow::Result<String> {
        match &self.server {
            Some(s) => {
                let base = remote::server_base(s)?;
                match base.strip_prefix("http://") {
                    Some(addr) => Ok(addr.to_string()),
                    None => anyhow::bail!(
                        "--server {s:?}: a session over TLS (wss://) is not supported by this \
                         command yet; operator commands accept https://"
                    ),
                }
            }
            None => Ok(crate::store::lock::holder(&self.data)
                .and_then(|info| info.listen)
                .unwrap_or_else(|| "127.0.0.1:8080".to_string())),
        }
    }
}

/// `spacewake types DIR`: one line per file, saying what was done.
fn types(dir: &std::path::Path) -> anyhow::Result<ExitCode> {
    use crate::types::Written;
    let written = crate::types::write(dir).map_err(|e| {
        anyhow::anyhow!("cannot write the declarations into {}: {e}", dir.display())
    })?;
    for w in written {
        let line = match w {
            Written::Created(p) => format!("wrote {}", p.display()),
            Written::Updated(p) => format!("updated {}", p.display()),
            Written::Unchanged(p) => format!("{} is up to date", p.display()),
            Written::KeptExisting(p) => format!(
                "kept {} (make sure it includes commonfabric.d.ts and sets \"jsx\": \"preserve\", \"jsxFactory\": \"h\")",
                p.display()
            ),
        };
        println!("{line}");
    }
    println!(
        "check with: tsc -p {} --noEmit (TypeScript 5.4 or later)",
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    /// Every argument of every command says what it is in `--help`.
    #[test]
    fn every_argument_is_described_in_help() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for a in cmd.get_arguments() {
                let id = a.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                if a.get_help().is_none() && a.get_long_help().is_none() {
                    missing.push(format!("{path} --{id}"));
                }
            }
            for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "spacewake", &mut missing);
        assert!(missing.is_empty(), "no help text: {missing:#?}");
    }
}
