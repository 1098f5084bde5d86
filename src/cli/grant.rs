//! `spacewake grant`: a principal's access to a space, on a data directory.

use anyhow::{bail, Context};
use std::path::Path;
use std::process::ExitCode;

pub fn run(data: &Path, space: &str, did: &str, access: &str) -> anyhow::Result<ExitCode> {
    let store = super::open_existing(data)?;
    if store.directory().get(space)?.is_none() {
        bail!("no space {space:?} in {}", data.display());
    }
    crate::protocol::decode_did_key(did).context("--did must be an ed25519 did:key")?;
    let access = match access {
        "none" => None,
        a => Some(a),
    };
    store.directory().set_grant(space, did, access)?;
    println!("{did}: {} on {space}", access.unwrap_or("no access"));
    Ok(ExitCode::SUCCESS)
}
