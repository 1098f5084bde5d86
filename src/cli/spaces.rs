//! `spacewake spaces`: every space (active or parked, next wake,
//! undelivered events, this window's CPU), and `spaces create`. Through the
//! running server when there is one, else on the data directory
//! ([`super::remote`]).

use super::remote::{OperatorArgs, Target};
use super::table;
use crate::clock::{Clock, SystemClock};
use crate::human::{count, format_utc_ms, relative, thousands};
use crate::operator::{self as op, SpaceView, SpacesPage};
use anyhow::bail;
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;

/// Spaces listed per request.
const PAGE: usize = 500;

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct SpacesArgs {
    #[command(subcommand)]
    pub which: Option<SpacesCommand>,
    #[command(flatten)]
    pub op: OperatorArgs,
    /// Print the list as JSON (the operator API's shape) instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Subcommand)]
pub enum SpacesCommand {
    /// List every space (the default).
    List {
        #[command(flatten)]
        op: OperatorArgs,
        /// Print the list as JSON (the operator API's shape) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Create a space (spaces are never created by a read of a mistyped name).
    Create {
        #[command(flatten)]
        op: OperatorArgs,
        /// The new space's name.
        #[arg(long)]
        space: String,
        /// Its owner's did:key; default: the did of the client key
        /// (`--client-key`, `./spacewake-identity.key`).
        #[arg(long)]
        owner: Option<String>,
        /// The client key whose did owns the space when `--owner` is absent.
        #[arg(
            long,
            env = "SPACEWAKE_KEY",
            default_value = "./spacewake-identity.key"
        )]
        client_key: PathBuf,
    },
}

pub fn run(args: SpacesArgs) -> anyhow::Result<ExitCode> {
    match args.which {
        None => list(&args.op, args.json),
        Some(SpacesCommand::List { op, json }) => list(&op, json),
        Some(SpacesCommand::Create {
            op,
            space,
            owner,
            client_key,
        }) => create(&op, &space, owner, &client_key),
    }
}

fn list(args: &OperatorArgs, as_json: bool) -> anyhow::Result<ExitCode> {
    let target = Target::find(args, "spaces")?;
    let mut rows: Vec<[String; 7]> = Vec::new();
    let mut all: Vec<SpaceView> = Vec::new();
    let mut after: Option<String> = None;
    let (registered, active, now_ms) = loop {
        let page: SpacesPage = match &target {
            Target::Server(r) => {
                let q = after
                    .as_ref()
                    .map_or(String::new(), |a| format!("&after={a}"));
                r.get(&format!("/api/operator/spaces?limit={PAGE}{q}"))?
            }
            Target::Directory(l) => {
                op::spaces(&l.view(SystemClock.now_ms()), after.as_deref(), PAGE)?
            }
        };
        rows.extend(page.spaces.iter().map(|s| line(s, page.now_ms)));
        all.extend(page.spaces);
        match page.next {
            Some(n) => after = Some(n),
            None => break (page.registered, page.active, page.now_ms),
        }
    };
    if as_json {
        return table::print_json(&json!({
            "spaces": all,
            "registered": registered,
            "active": active,
            "nowMs": now_ms,
        }));
    }
    if rows.is_empty() {
        println!("no spaces");
    } else {
        table::print(
            &[
                "SPACE",
                "OWNER",
                "STATE",
                "NEXT WAKE (UTC)",
                "UNDELIVERED",
                "SCHEDULED CPU",
                "SESSION CPU",
            ],
            &[5, 6],
            &rows,
        );
        println!(
            "{} ({} active); CPU is this ledger window's",
            count(registered, "space", "spaces"),
            thousands(active)
        );
    }
    println!("{}", target.note());
    Ok(ExitCode::SUCCESS)
}

fn line(s: &SpaceView, now_ms: u64) -> [String; 7] {
    let wake = s.next_wake_ms.map_or("-".to_string(), |t| {
        format!("{} ({})", format_utc_ms(t), relative(t, now_ms))
    });
    let state = match &s.quarantined {
        Some(reason) => format!("quarantined: {reason}"),
        None => s.state.clone(),
    };
    let cpu = |us: Option<u64>| us.map_or("-".to_string(), cpu_ms);
    [
        s.id.clone(),
        s.owner.clone(),
        state,
        wake,
        if s.undelivered { "yes" } else { "no" }.to_string(),
        cpu(s.spend.map(|x| x.scheduled_cpu_us)),
        cpu(s.spend.map(|x| x.session_cpu_us)),
    ]
}

/// CPU microseconds as milliseconds for people.
pub fn cpu_ms(us: u64) -> String {
    format!("{:.1} ms", us as f64 / 1_000.0)
}

fn create(
    args: &OperatorArgs,
    space: &str,
    owner: Option<String>,
    client_key: &std::path::Path,
) -> anyhow::Result<ExitCode> {
    let owner = match owner {
        Some(o) => o,
        None if client_key.exists() => super::client::load_identity(client_key)?.did(),
        None => bail!(
            "whose space? pass --owner DID, or create a client key first (`spacewake identity`)"
        ),
    };
    let target = Target::find(args, "spaces create")?;
    let made: SpaceView = match &target {
        Target::Server(r) => r.post(
            "/api/operator/spaces",
            &json!({ "space": space, "owner": owner }),
        )?,
        Target::Directory(l) => {
            op::create_space(&l.store, space, &owner)?;
            op::space(&l.view(SystemClock.now_ms()), space)?
        }
    };
    println!("created space {} owned by {}", made.id, made.owner);
    println!("{}", target.note());
    Ok(ExitCode::SUCCESS)
}
