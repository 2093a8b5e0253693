use clap::Parser;

use haggle::config::Cli;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    haggle::telemetry::init(cli.log_format);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    match runtime.block_on(haggle::cli::run(cli.command)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("haggle: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
