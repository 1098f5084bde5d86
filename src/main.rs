use clap::Parser;
use spacewake::cli::{BenchCommand, Cli, Command, DebugCommand};
use std::process::ExitCode;

fn main() -> ExitCode {
    // Before any thread starts (telemetry, the async runtime, the host).
    spacewake::host::limit_malloc_arenas();
    let cli = Cli::parse();
    // The host logs at info; one-shot commands keep their output to results.
    let (default_filter, otlp_endpoint) = match &cli.command {
        Command::Serve(args) => ("info", args.otlp_endpoint.as_deref()),
        _ => ("error", None),
    };
    // Spans are exported over OTLP only when serve has an endpoint.
    let telemetry = match spacewake::telemetry::init(default_filter, otlp_endpoint) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Command::Serve(args) => spacewake::serve::run(args),
        Command::Check { files } => Ok(spacewake::check::run(&files)),
        Command::Scenario { files } => Ok(spacewake::scenario::run_files(&files)),
        Command::Bench { which } => match which {
            BenchCommand::Store { dir, scale } => spacewake::bench::store::run(dir, scale),
            BenchCommand::Patterns { scale } => spacewake::bench::patterns::run(scale),
            BenchCommand::Serve { scale, only } => spacewake::bench::serve::run(scale, &only),
            BenchCommand::ServeMemory {
                spaces,
                template,
                piece,
                parked,
            } => spacewake::bench::serve::memory_probe(spaces, &template, &piece, parked),
            BenchCommand::Accounting { scale } => spacewake::bench::accounting::run(scale),
            BenchCommand::Schedule { scale, only } => spacewake::bench::schedule::run(scale, &only),
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
    telemetry.shutdown();
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
