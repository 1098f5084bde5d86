use clap::Parser;
use spacewake::cli::{BenchCommand, Cli, Command, DebugCommand};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The host logs at info; one-shot commands keep their output to results.
    let default_filter = match cli.command {
        Command::Serve(_) => "info",
        _ => "error",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SPACEWAKE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter)),
        )
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.command {
        Command::Serve(args) => spacewake::serve::run(args),
        Command::Check { files } => Ok(spacewake::check::run(&files)),
        Command::Scenario { files } => Ok(spacewake::scenario::run_files(&files)),
        Command::Bench { which } => match which {
            BenchCommand::Store { dir, scale } => spacewake::bench::store::run(dir, scale),
            BenchCommand::Patterns { scale } => spacewake::bench::patterns::run(scale),
            BenchCommand::Serve { scale } => spacewake::bench::serve::run(scale),
            BenchCommand::Accounting { scale } => spacewake::bench::accounting::run(scale),
            BenchCommand::Schedule { scale } => spacewake::bench::schedule::run(scale),
        },
        Command::Spaces(args) => spacewake::serve::list_spaces(&args.data),
        Command::Grant {
            data,
            space,
            did,
            access,
        } => spacewake::client_cli::grant(&data, &space, &did, &access),
        Command::Identity(c) => spacewake::client_cli::identity(&c),
        Command::Ledger {
            data,
            space,
            top,
            set_budget_ms,
        } => spacewake::accounting::cli::run(&data, &space, top, set_budget_ms),
        Command::Schedules { which } => spacewake::schedule_cli::run(which),
        Command::Deploy {
            client,
            file,
            export,
            argument,
        } => spacewake::client_cli::deploy(&client, &file, export, &argument),
        Command::Send {
            client,
            piece,
            stream,
            payload,
            event_id,
        } => spacewake::client_cli::send(&client, &piece, &stream, &payload, event_id),
        Command::Read {
            client,
            piece,
            path,
        } => spacewake::client_cli::read(&client, &piece, &path),
        Command::Debug { which } => match which {
            DebugCommand::CrashWriter { data, space } => {
                spacewake::debug::crash_writer(&data, &space)
            }
            DebugCommand::LeaseContender {
                data,
                space,
                millis,
                ttl_ms,
            } => spacewake::debug::lease_contender(&data, &space, millis, ttl_ms),
        },
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
