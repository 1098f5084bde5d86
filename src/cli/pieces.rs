//! `spacewake pieces --space S`: a space's pieces (id, pattern, name,
//! when deployed, schedule entries); `spacewake pieces delete --space S
//! --piece P` deletes one. Through the running server when there is one,
//! else on the data directory ([`super::remote`]), where a delete runs the
//! space in this process.

use super::remote::{OperatorArgs, Target};
use super::table;
use crate::clock::{Clock, SystemClock};
use crate::human::{format_utc_ms, relative};
use crate::operator::{self as op, PieceView};
use std::process::ExitCode;

#[derive(serde::Deserialize)]
struct Listed {
    pieces: Vec<PieceView>,
}

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct PiecesArgs {
    #[command(subcommand)]
    which: Option<PiecesCommand>,
    #[command(flatten)]
    op: OperatorArgs,
    /// The space whose pieces to list.
    #[arg(long)]
    space: Option<String>,
    /// Print the list as JSON (the operator API's shape) instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Subcommand)]
enum PiecesCommand {
    /// Delete a piece: its result, argument and listing go, its schedule
    /// entries leave the index in the same commit, and its pending wakes
    /// end (counted). Its cells and the space's history stay.
    Delete {
        #[command(flatten)]
        op: OperatorArgs,
        /// The space the piece is in.
        #[arg(long)]
        space: String,
        /// The piece's id (`pc-…`, as `spacewake pieces --space S` lists).
        #[arg(long)]
        piece: String,
    },
}

pub fn run(args: &PiecesArgs) -> anyhow::Result<ExitCode> {
    match &args.which {
        Some(PiecesCommand::Delete { op, space, piece }) => delete(op, space, piece),
        None => {
            let Some(space) = &args.space else {
                anyhow::bail!(
                    "name the space: `spacewake pieces --space S` (`spacewake spaces` lists them)"
                );
            };
            list(&args.op, space, args.json)
        }
    }
}

fn delete(args: &OperatorArgs, space: &str, piece: &str) -> anyhow::Result<ExitCode> {
    let target = Target::find(args, "pieces delete")?;
    let done: op::PieceDeleted = match &target {
        Target::Server(r) => r.delete(&format!("/api/operator/spaces/{space}/pieces/{piece}"))?,
        Target::Directory(l) => {
            op::healthy(&l.store, space)?;
            // The runtime deletes it: run the space here, for this one request.
            let host = crate::host::Host::new(l.store.clone(), Default::default());
            let done = host.ask_blocking(
                space,
                crate::host::Trigger::Operator,
                crate::host::DeletePiece {
                    piece: piece.to_string(),
                },
            );
            // Park it as `serve` does at exit: lease given back, file
            // checkpointed.
            host.begin_shutdown();
            host.stop_spaces(
                crate::clock::Stopwatch::start(),
                std::time::Duration::from_secs(30),
            );
            op::PieceDeleted {
                space: space.to_string(),
                piece: piece.to_string(),
                ended_wakes: done.map_err(|e| anyhow::anyhow!("{e}"))?,
            }
        }
    };
    println!("deleted piece {piece} of space {space}");
    if done.ended_wakes > 0 {
        println!(
            "{} ended with it.",
            crate::human::count(done.ended_wakes, "pending wake", "pending wakes")
        );
    }
    println!("{}", target.note());
    Ok(ExitCode::SUCCESS)
}

fn list(args: &OperatorArgs, space: &str, as_json: bool) -> anyhow::Result<ExitCode> {
    let target = Target::find(args, "pieces")?;
    let pieces = match &target {
        Target::Server(r) => {
            r.get::<Listed>(&format!("/api/operator/spaces/{space}/pieces"))?
                .pieces
        }
        Target::Directory(l) => op::pieces(&l.store, space)?,
    };
    if as_json {
        return table::print_json(&serde_json::json!({ "space": space, "pieces": pieces }));
    }
    let now = SystemClock.now_ms();
    if pieces.is_empty() {
        println!("space {space} has no pieces");
    } else {
        let rows: Vec<[String; 5]> = pieces
            .iter()
            .map(|p| {
                [
                    p.id.clone(),
                    p.pattern.clone(),
                    p.name.clone().unwrap_or_else(|| "-".into()),
                    p.created_ms.map_or("-".into(), |t| {
                        format!("{} ({})", format_utc_ms(t), relative(t, now))
                    }),
                    p.schedule_entries.to_string(),
                ]
            })
            .collect();
        table::print(
            &[
                "PIECE",
                "PATTERN",
                "NAME",
                "CREATED (UTC)",
                "SCHEDULE ENTRIES",
            ],
            &[4],
            &rows,
        );
    }
    println!("{}", target.note());
    Ok(ExitCode::SUCCESS)
}
