//! `haggle`: the server, its operator tasks, and the tools built on its client, in one binary.

use clap::Parser;

mod cli;
mod terminal;

/// jemalloc rather than the system's allocator. With glibc's, a server holding thousands of
/// idle connections grew its resident memory for as long as it ran: the heap it had once
/// needed was not given back, and the pages of its free space were dirtied one after another
/// as requests came and went. jemalloc returns the pages it has not used for a few seconds,
/// and holds each idle connection in less.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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
