//! `spacewake pieces --space S`: a space's pieces (id, pattern, name,
//! when deployed, schedule entries). Through the running server when there
//! is one, else on the data directory ([`super::remote`]).

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

pub fn run(args: &OperatorArgs, space: &str) -> anyhow::Result<ExitCode> {
    let target = Target::find(args, "pieces")?;
    let pieces = match &target {
        Target::Server(r) => {
            r.get::<Listed>(&format!("/api/operator/spaces/{space}/pieces"))?
                .pieces
        }
        Target::Directory(l) => op::pieces(&l.store, space)?,
    };
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
