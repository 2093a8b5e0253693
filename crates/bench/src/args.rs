//! The bench's command line, and which flags each workload takes.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;

use super::workload::Workload;

#[derive(clap::Args)]
pub struct BenchArgs {
    /// The running server to measure.
    #[arg(long, env = "HAGGLE_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// The server's operator token, needed to raise the bench's buyers to the AGENCY tier.
    #[arg(long, env = "HAGGLE_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// What to measure: w1 full negotiations (place, counter, counter, accept); w2 bid placement
    /// (place, then withdraw so the buyer may bid again; place is the measured call); w3
    /// auto-negotiations (both sides have policies; the opening bid is the only call); mcp, w1
    /// over REST and through the MCP server's tools, side by side; a2a, w1 over REST with
    /// idempotency keys and as A2A messages, side by side; deals, a deal carried through (a
    /// negotiation, payments confirmed, fulfilment, a refund settled, completion); approvals, an
    /// acceptance made directly beside one held and approved.
    #[arg(long, value_enum, default_value_t = Workload::W1)]
    pub workload: Workload,
    /// Concurrent workers (default 16); a comma list (`1,4,16,32`) runs a sweep, one result block
    /// per level (w1, w2, w3). Webhooks takes one level; wake takes none.
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub concurrency: Vec<u32>,
    /// Units of work measured per level: negotiations for w1, placements for w2, events to
    /// deliver for webhooks.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..))]
    pub negotiations: u64,
    /// Units of work run before each level's measurement and left out of its figures (default
    /// 100; w1, w2, w3).
    #[arg(long)]
    pub warmup: Option<u64>,
    /// Also write the figures, with the conditions they were measured under, to this JSON file
    /// (w1, w2, w3).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// How long one request may take before it counts as an error.
    #[arg(long, default_value = "30s", value_parser = haggle_server::config::parse_duration)]
    pub timeout: Duration,
    /// Send an `Idempotency-Key` with every POST, as a careful agent does. Off by default, as
    /// the published figures were measured without.
    #[arg(long)]
    pub idempotency_keys: bool,
    /// For `--workload wake`: the instance the counters go through (default: `--url`, where the
    /// waiters are); give a second instance on the same database to measure cross-instance
    /// wake-ups.
    #[arg(long)]
    pub counter_url: Option<String>,
    /// For `--workload wake`: how many wake-ups to time.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    pub trials: u64,
    /// For w1 and w2 only: after each level, run pgbench's TPC-B-like script on the server's
    /// database (`--database-url`) with as many clients, and print the ratio of Haggle's
    /// state-changing calls per second to pgbench's transactions per second.
    #[arg(long)]
    pub pgbench: bool,
    /// The server's database, for `--pgbench`.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// How long each pgbench run lasts, in seconds.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..))]
    pub pgbench_seconds: u64,
    /// For `--workload flood`: how many connections to open, each sending half a request head.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub connections: u64,
    /// Before the workload, fill the server's database (`--database-url`) with a history of
    /// about this many bids (agents, listings, threads, orders and events in proportion), by
    /// bulk SQL; `0` writes nothing.
    #[arg(long, default_value_t = 0)]
    pub preload: u64,
    /// Sample the resident memory of this process (the server's) every 100 ms while each level
    /// runs, and print its start, peak and end (Linux); with `--workload a2a`, read its CPU
    /// per call instead.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// For `--workload a2a`: the PostgreSQL server's postmaster, whose CPU and its backends'
    /// per call each phase reports (Linux; a cluster serving nothing else).
    #[arg(long)]
    pub postgres_pid: Option<u32>,
    /// Hold this many idle event waiters open for the whole run, half long polls and half
    /// event streams, one agent per 100 (the server must allow them: `HAGGLE_MAX_STREAMS`).
    #[arg(long, default_value_t = 0)]
    pub idle_streams: u64,
}

impl fmt::Debug for BenchArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BenchArgs")
            .field("url", &self.url)
            .field("admin_token", &self.admin_token.as_ref().map(|_| "<redacted>"))
            .field("workload", &self.workload)
            .field("concurrency", &self.concurrency)
            .field("negotiations", &self.negotiations)
            .field("warmup", &self.warmup)
            .field("json", &self.json)
            .field("timeout", &self.timeout)
            .field("idempotency_keys", &self.idempotency_keys)
            .field("counter_url", &self.counter_url)
            .field("trials", &self.trials)
            .field("pgbench", &self.pgbench)
            .field("database_url", &self.database_url.as_deref().map(haggle_server::config::redact_url))
            .field("pgbench_seconds", &self.pgbench_seconds)
            .field("connections", &self.connections)
            .field("preload", &self.preload)
            .field("server_pid", &self.server_pid)
            .field("postgres_pid", &self.postgres_pid)
            .field("idle_streams", &self.idle_streams)
            .finish()
    }
}

/// Concurrent workers when `--concurrency` is not given.
const DEFAULT_CONCURRENCY: u32 = 16;

/// Warm-up units when `--warmup` is not given.
const DEFAULT_WARMUP: u64 = 100;

impl BenchArgs {
    /// The concurrency levels to run, in order.
    pub(super) fn levels(&self) -> Vec<u32> {
        if self.concurrency.is_empty() { vec![DEFAULT_CONCURRENCY] } else { self.concurrency.clone() }
    }

    pub(super) fn warmup(&self) -> u64 {
        self.warmup.unwrap_or(DEFAULT_WARMUP)
    }

    /// Refuses the flags the chosen workload would otherwise ignore.
    pub(super) fn check_flags(&self) -> anyhow::Result<()> {
        let workload = self.workload.name();
        let pgbench = "--pgbench compares w1's and w2's state-changing calls with pgbench's transactions";
        let postgres_pid = (self.postgres_pid.is_some(), "--postgres-pid", "only the a2a workload reads CPU per call");
        let ignored: &[(bool, &str, &str)] = match self.workload {
            Workload::W1 | Workload::W2 => &[postgres_pid],
            Workload::W3 | Workload::Deals | Workload::Approvals => {
                &[(self.pgbench, "--pgbench", pgbench), postgres_pid]
            }
            Workload::A2a => &[
                (self.pgbench, "--pgbench", pgbench),
                (self.idempotency_keys, "--idempotency-keys", "a2a runs REST with keys, as A2A moves carry them"),
            ],
            Workload::Mcp => &[
                postgres_pid,
                (self.pgbench, "--pgbench", pgbench),
                (self.idempotency_keys, "--idempotency-keys", "mcp runs REST both without and with keys"),
            ],
            Workload::Webhooks => &[
                postgres_pid,
                (self.concurrency.len() > 1, "--concurrency", "webhooks runs one level: give one number"),
                (self.warmup.is_some(), "--warmup", "webhooks has no warm-up phase"),
                (self.json.is_some(), "--json", "webhooks prints its figures only"),
                (self.pgbench, "--pgbench", pgbench),
            ],
            Workload::Wake => &[
                postgres_pid,
                (!self.concurrency.is_empty(), "--concurrency", "wake times one waiter at a time: use --trials"),
                (self.warmup.is_some(), "--warmup", "wake has no warm-up phase"),
                (self.json.is_some(), "--json", "wake prints its figures only"),
                (self.pgbench, "--pgbench", pgbench),
            ],
            Workload::Flood => &[
                postgres_pid,
                (!self.concurrency.is_empty(), "--concurrency", "flood opens --connections connections"),
                (self.warmup.is_some(), "--warmup", "flood has no warm-up phase"),
                (self.json.is_some(), "--json", "flood prints its figures only"),
                (self.pgbench, "--pgbench", pgbench),
                (self.idempotency_keys, "--idempotency-keys", "flood sends no request whole"),
            ],
        };
        match ignored.iter().find(|(given, _, _)| *given) {
            Some((_, flag, why)) => bail!("{flag} does not apply to --workload {workload} ({why})"),
            None => Ok(()),
        }
    }

    /// The command line that reproduces this run, without the admin token.
    pub(super) fn command_line(&self) -> String {
        let levels: Vec<String> = self.levels().iter().map(u32::to_string).collect();
        let mut line = format!(
            "haggle bench --url {} --workload {} --concurrency {} --negotiations {} --warmup {}",
            self.url,
            self.workload.name(),
            levels.join(","),
            self.negotiations,
            self.warmup()
        );
        if self.timeout != Duration::from_secs(30) {
            line.push_str(&format!(" --timeout {}ms", self.timeout.as_millis()));
        }
        if self.idempotency_keys {
            line.push_str(" --idempotency-keys");
        }
        if self.pgbench {
            line.push_str(&format!(" --pgbench --pgbench-seconds {}", self.pgbench_seconds));
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Command {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn check(line: &[&str]) -> Result<(), String> {
        let args = Command::try_parse_from(std::iter::once("bench").chain(line.iter().copied()))
            .map_err(|error| error.to_string())?
            .bench;
        args.check_flags().map_err(|error| error.to_string())
    }

    #[test]
    fn flags_a_workload_would_ignore_are_refused_by_name() {
        let refused = |line: &[&str], flag: &str| {
            let error = check(line).unwrap_err();
            assert!(error.starts_with(flag) && error.contains("does not apply"), "{line:?}: {error}");
        };
        refused(&["--workload", "w3", "--pgbench"], "--pgbench");
        refused(&["--workload", "webhooks", "--concurrency", "1,4"], "--concurrency");
        refused(&["--workload", "webhooks", "--warmup", "5"], "--warmup");
        refused(&["--workload", "webhooks", "--json", "out.json"], "--json");
        refused(&["--workload", "wake", "--concurrency", "4"], "--concurrency");
        refused(&["--workload", "wake", "--warmup", "0"], "--warmup");
        refused(&["--workload", "wake", "--json", "out.json"], "--json");
        refused(&["--workload", "wake", "--pgbench"], "--pgbench");
        refused(&["--workload", "mcp", "--idempotency-keys"], "--idempotency-keys");
        refused(&["--workload", "mcp", "--pgbench"], "--pgbench");
        refused(&["--workload", "a2a", "--idempotency-keys"], "--idempotency-keys");
        refused(&["--workload", "w1", "--postgres-pid", "7"], "--postgres-pid");

        for line in [
            &["--workload", "w3", "--concurrency", "1,4", "--warmup", "5", "--json", "w3.json"][..],
            &["--workload", "w1", "--concurrency", "1,4", "--pgbench"],
            &["--workload", "webhooks", "--concurrency", "8"],
            &["--workload", "wake", "--trials", "10"],
            &["--workload", "mcp", "--concurrency", "1,16", "--json", "mcp.json"],
            &["--workload", "a2a", "--server-pid", "7", "--postgres-pid", "8", "--json", "a2a.json"],
        ] {
            assert_eq!(check(line), Ok(()), "{line:?}");
        }
    }

    #[test]
    fn unspecified_levels_and_warmup_take_their_defaults() {
        let args = Command::parse_from(["bench"]).bench;
        assert_eq!((args.levels(), args.warmup()), (vec![DEFAULT_CONCURRENCY], DEFAULT_WARMUP));
        assert!(args.command_line().contains("--concurrency 16 --negotiations 2000 --warmup 100"));
        let args = Command::parse_from(["bench", "--concurrency", "1,4", "--warmup", "0"]).bench;
        assert_eq!((args.levels(), args.warmup()), (vec![1, 4], 0));
    }
}
