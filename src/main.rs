use clap::Parser;
use spacewake::cli::{Cli, Command};
use std::process::ExitCode;

fn main() -> ExitCode {
    // Before any thread starts (telemetry, the async runtime, the host).
    spacewake::allocator::limit_malloc_arenas();
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Serve(_)) {
        // A one-shot command whose reader goes away (`| head -1`) ends
        // quietly, as Unix tools do, rather than panicking on the write.
        // Not the server: a closed socket must not end it.
        // SAFETY: before any thread starts; restores the default action.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
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
    let result = spacewake::cli::run(cli);
    telemetry.shutdown();
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
