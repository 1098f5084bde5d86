//! `spacewake bench …`: the benchmarks' arguments; the benchmarks
//! themselves are in `crate::bench`.

use clap::Subcommand;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// The console's pages with many spaces, beside the operator API's JSON.
    Console {
        /// Scale factor for quick runs (1.0 = the full benchmark).
        #[arg(long, default_value_t = 1.0)]
        scale: f64,
    },
    /// The PostgreSQL store beside the SQLite files: commits/s, and the
    /// store-level wake path with one, two and three hosts.
    Fleet {
        /// Scale factor for quick runs (1.0 = the full benchmark).
        #[arg(long, default_value_t = 1.0)]
        scale: f64,
        /// An empty PostgreSQL database to use (the run adds its spaces;
        /// the server's CPU and the system-clock phases, lateness and the
        /// relay, need the throwaway cluster used when this is omitted).
        #[arg(long)]
        store: Option<String>,
        /// Run only these figures (default: all).
        #[arg(long, value_enum, value_delimiter = ',')]
        only: Vec<crate::bench::fleet::Figure>,
        /// The hosts' scheduled cap (`max_scheduled`) in the phases that
        /// run the real host.
        #[arg(long, default_value_t = 8)]
        max_scheduled: usize,
    },
    /// The CPU a wake spends fetching a small JSON document from a local
    /// server, beside the same wake without the fetch.
    Effects {
        /// Scale factor for quick runs (1.0 = the full benchmark).
        #[arg(long, default_value_t = 1.0)]
        scale: f64,
    },
    /// Wave time with compute metering on vs off.
    Accounting {
        /// Scale factor for quick runs (1.0 = the full benchmark).
        #[arg(long, default_value_t = 1.0)]
        scale: f64,
    },
    /// Scheduled wakes: index-hook overhead, wakes/s, lateness, memory.
    Schedule {
        /// Scale factor for quick runs (1.0 = the full benchmark).
        #[arg(long, default_value_t = 1.0)]
        scale: f64,
        /// Run only these figures (default: all).
        #[arg(long, value_enum, value_delimiter = ',')]
        only: Vec<crate::bench::schedule::Figure>,
        /// `--only instructions`: rounds of wakes after the warm-up round.
        #[arg(long, default_value_t = 1)]
        wake_rounds: u32,
        /// The caps (`max_scheduled`) to run instead of the default lists:
        /// the herd's rounds (`--only wakes`, engine reuse on), one per
        /// round in this order, and the parked spaces' lateness phases
        /// (`--only lateness`). E.g. `--caps 4,8,4,8` compares two caps
        /// without the rounds' order deciding.
        #[arg(long, value_delimiter = ',')]
        caps: Vec<usize>,
    },
    /// One probe of `bench serve`'s memory figure (run by it in a fresh process).
    #[command(hide = true)]
    ServeMemory {
        #[arg(long)]
        spaces: usize,
        /// A space file every registered space starts as a copy of.
        #[arg(long)]
        template: PathBuf,
        /// The template's piece each parked space is sent an event for.
        #[arg(long)]
        piece: String,
        #[arg(long)]
        parked: bool,
    },
    /// Load generator against the real server on loopback.
    Serve {
        /// Scale factor for quick runs (1.0 = the full benchmark).
        #[arg(long, default_value_t = 1.0)]
        scale: f64,
        /// Run only these figures (default: all).
        #[arg(long, value_enum, value_delimiter = ',')]
        only: Vec<crate::bench::serve::Figure>,
    },
    /// Compiler cache, instantiation, events and derivations.
    Patterns {
        /// Scale factor for quick runs (1.0 = the full benchmark).
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

pub fn run(which: BenchCommand) -> anyhow::Result<ExitCode> {
    match which {
        BenchCommand::Store { dir, scale } => crate::bench::store::run(dir, scale),
        BenchCommand::Patterns { scale } => crate::bench::patterns::run(scale),
        BenchCommand::Serve { scale, only } => crate::bench::serve::run(scale, &only),
        BenchCommand::ServeMemory {
            spaces,
            template,
            piece,
            parked,
        } => crate::bench::serve::memory_probe(spaces, &template, &piece, parked),
        BenchCommand::Accounting { scale } => crate::bench::accounting::run(scale),
        BenchCommand::Effects { scale } => crate::bench::effects::run(scale),
        BenchCommand::Console { scale } => crate::bench::console::run(scale),
        BenchCommand::Fleet {
            scale,
            store,
            only,
            max_scheduled,
        } => crate::bench::fleet::run(crate::bench::fleet::Options {
            scale,
            store,
            only,
            max_scheduled,
        }),
        BenchCommand::Schedule {
            scale,
            only,
            wake_rounds,
            caps,
        } => crate::bench::schedule::run(scale, &only, wake_rounds, &caps),
    }
}
