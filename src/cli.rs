//! The `haggle` command line: each crate's subcommands, and the terminal client's, composed.

use std::time::Duration;

use clap::{Parser, Subcommand};
use haggle_client::Client;
use haggle_server::config::{AdminCommand, DatabaseArgs, LogFormat, ServeArgs};

#[derive(Debug, Parser)]
#[command(name = "haggle", version, about = "A negotiation marketplace server for software agents")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log format: `text` for people, `json` for log collectors. Levels come from RUST_LOG.
    #[arg(long, env = "HAGGLE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the API and its background workers (applies migrations first).
    Serve(ServeArgs),
    /// Apply database migrations and exit.
    Migrate(DatabaseArgs),
    /// Operator tasks run directly against the database.
    #[command(subcommand)]
    Admin(AdminCommand),
    /// Exit 0 if a running server answers its readiness check (for container health checks).
    Healthcheck {
        #[arg(long, env = "HAGGLE_HEALTHCHECK_URL", default_value = "http://127.0.0.1:8080/readyz")]
        url: String,
    },
    /// Measure latency and throughput of negotiations against a running server.
    Bench(haggle_bench::BenchArgs),
    /// Prove that acknowledged answers survive failures: three instances behind HAProxy on a
    /// throwaway PostgreSQL, under load, while instances are killed and PostgreSQL restarted.
    Chaos(haggle_chaos::ChaosArgs),
    /// Negotiate on a listing against a running server, showing each round as it comes.
    Negotiate(crate::terminal::NegotiateArgs),
    /// Negotiate as a buyer with an A2A agent that speaks Haggle's negotiation extension (another
    /// Haggle, say), found by its Agent Card at URL.
    A2a(crate::terminal::A2aArgs),
    /// List listings on a running server.
    Listings(crate::terminal::ListingsArgs),
    /// List my negotiations on a running server.
    Threads(crate::terminal::ThreadsArgs),
    /// List my orders on a running server.
    Orders(crate::terminal::OrdersArgs),
    /// Show one of my orders with its payments.
    Order(crate::terminal::OrderArgs),
    /// Run a market of buyer and seller agents with private reservation prices and report how
    /// their strategies fare.
    Sim(haggle_sim::SimArgs),
    /// Serve Haggle's MCP tools on stdio for a language-model agent, acting as the agent whose
    /// API key it is given, against a running server.
    Mcp(haggle_mcp::stdio::McpArgs),
}

pub async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Serve(args) => haggle_server::commands::serve(args).await,
        Command::Migrate(args) => haggle_server::commands::migrate(args).await,
        Command::Admin(command) => haggle_server::commands::admin(command).await,
        Command::Healthcheck { url } => healthcheck(&url).await,
        Command::Bench(args) => haggle_bench::run(args).await,
        Command::Chaos(args) => haggle_chaos::run(args).await,
        Command::Negotiate(args) => crate::terminal::negotiate(args).await,
        Command::A2a(args) => crate::terminal::a2a(args).await,
        Command::Listings(args) => crate::terminal::listings(args).await,
        Command::Threads(args) => crate::terminal::threads(args).await,
        Command::Orders(args) => crate::terminal::orders(args).await,
        Command::Order(args) => crate::terminal::order(args).await,
        Command::Sim(args) => haggle_sim::run(args).await,
        Command::Mcp(args) => haggle_mcp::stdio::run(args).await,
    }
}

/// Checks readiness through the typed client, once, within 5 s. `url` is the readiness URL
/// (`…/readyz`, as container health checks give it) or the server's base URL.
async fn healthcheck(url: &str) -> anyhow::Result<()> {
    let trimmed = url.trim_end_matches('/');
    let base = trimmed.strip_suffix("/readyz").unwrap_or(trimmed);
    let client = Client::new(base, None)?.attempts(1).timeout(Duration::from_secs(5));
    client.ready().await.map_err(|error| error.first_contact(base, "--url / HAGGLE_HEALTHCHECK_URL"))
}
