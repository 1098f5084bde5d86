//! `spacewake spaces`: the directory's view of every space.

use std::path::Path;
use std::process::ExitCode;

/// Lists every space the directory knows.
pub fn list(data: &Path) -> anyhow::Result<ExitCode> {
    let store = super::open_existing(data)?;
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
