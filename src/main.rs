//! `haggle`: the server, its operator tasks, and the tools built on its client, in one binary.

use clap::Parser;

mod cli;

fn main() -> std::process::ExitCode {
    let cli = cli::Cli::parse();
    let _telemetry = haggle_server::telemetry::init(cli.log_format);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    match runtime.block_on(cli::run(cli.command)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("haggle: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
