//! `spacewake events dead-letters --space S`: the events a space consumed
//! without delivery after their retries (when, why, how many attempts), and
//! the ones still being retried. Through the running server when there is
//! one, else on the data directory ([`super::remote`]).

use super::remote::{OperatorArgs, Target};
use super::table;
use crate::clock::{Clock, SystemClock};
use crate::human::{format_utc_ms, relative, truncate_message};
use crate::operator::{self as op, DeadLettersView};
use std::process::ExitCode;

#[derive(clap::Subcommand, Debug)]
pub enum EventsCommand {
    /// Events dead-lettered after their retries, and events being retried.
    DeadLetters {
        #[command(flatten)]
        op: OperatorArgs,
        /// The space whose dead letters to list.
        #[arg(long)]
        space: String,
        /// Print them as JSON (the operator API's shape) instead of tables.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(which: &EventsCommand) -> anyhow::Result<ExitCode> {
    let EventsCommand::DeadLetters {
        op: args,
        space,
        json,
    } = which;
    let target = Target::find(args, "events dead-letters")?;
    let view: DeadLettersView = match &target {
        Target::Server(r) => r.get(&format!("/api/operator/spaces/{space}/dead-letters"))?,
        Target::Directory(l) => op::dead_letters(&l.store, space)?,
    };
    if *json {
        return super::table::print_json(&view);
    }
    let now = SystemClock.now_ms();
    if view.dead_letters.is_empty() {
        println!("space {space} has no dead letters");
    } else {
        let rows: Vec<[String; 5]> = view
            .dead_letters
            .iter()
            .map(|d| {
                [
                    d.event_id.clone(),
                    d.stream.clone(),
                    d.attempts.to_string(),
                    format!(
                        "{} ({})",
                        format_utc_ms(d.dead_lettered_ms),
                        relative(d.dead_lettered_ms, now)
                    ),
                    truncate_message(&d.error, 120),
                ]
            })
            .collect();
        table::print(
            &[
                "EVENT",
                "STREAM",
                "ATTEMPTS",
                "DEAD-LETTERED (UTC)",
                "LAST ERROR",
            ],
            &[2],
            &rows,
        );
    }
    if !view.failing.is_empty() {
        println!();
        let rows: Vec<[String; 4]> = view
            .failing
            .iter()
            .map(|f| {
                [
                    f.event_id.clone(),
                    f.attempts.to_string(),
                    f.retry_due_ms.map_or("next wave".to_string(), |at| {
                        format!("{} ({})", format_utc_ms(at), relative(at, now))
                    }),
                    truncate_message(&f.last_error, 120),
                ]
            })
            .collect();
        table::print(
            &[
                "BEING RETRIED",
                "ATTEMPTS",
                "NEXT ATTEMPT (UTC)",
                "LAST ERROR",
            ],
            &[1],
            &rows,
        );
    }
    println!("{}", target.note());
    Ok(ExitCode::SUCCESS)
}
