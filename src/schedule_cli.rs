//! `spacewake schedules ...` (being built).

use std::process::ExitCode;

#[derive(Debug, clap::Subcommand)]
pub enum SchedulesCommand {
    /// List every schedule entry.
    List {
        #[arg(long, env = "SPACEWAKE_DATA", default_value = "./spacewake-data")]
        data: std::path::PathBuf,
    },
}

pub fn run(_which: SchedulesCommand) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not built yet")
}
