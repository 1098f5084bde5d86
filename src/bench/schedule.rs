//! `spacewake bench schedule` (being built).

use std::process::ExitCode;

pub fn run(_scale: f64) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not built yet")
}
