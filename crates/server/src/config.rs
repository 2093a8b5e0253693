//! The server's command line and environment configuration.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, Subcommand, ValueEnum};

use crate::http::address::TrustedProxies;
use haggle_domain::Tier;
use haggle_domain::money::DEFAULT_MAX_AMOUNT;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Create an agent and print it with its API key (shown this once).
    CreateAgent {
        #[arg(long)]
        name: String,
        #[arg(long, default_value = "PUBLIC", value_parser = parse_tier)]
        tier: Tier,
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// Set an agent's tier.
    SetTier {
        agent_id: uuid::Uuid,
        #[arg(value_parser = parse_tier)]
        tier: Tier,
        #[command(flatten)]
        database: DatabaseArgs,
    },
}

/// Where the database is: `DATABASE_URL`, or else an embedded PostgreSQL under the data directory.
#[derive(Clone, Args)]
pub struct DatabaseArgs {
    /// PostgreSQL URL. Without it, Haggle runs its own PostgreSQL under --data-dir.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Where the embedded PostgreSQL keeps its data between runs.
    #[arg(long, env = "HAGGLE_DATA_DIR", default_value = "./haggle-data")]
    pub data_dir: PathBuf,
    /// A directory holding initdb, pg_ctl and postgres, instead of searching for them.
    #[arg(long, env = "HAGGLE_POSTGRES_BIN_DIR")]
    pub postgres_bin_dir: Option<PathBuf>,
    /// Database connections in the pool.
    #[arg(long, env = "HAGGLE_DB_POOL_SIZE", default_value_t = 16)]
    pub pool_size: u32,
}

impl fmt::Debug for DatabaseArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DatabaseArgs")
            .field("database_url", &self.database_url.as_deref().map(redact_url))
            .field("data_dir", &self.data_dir)
            .field("postgres_bin_dir", &self.postgres_bin_dir)
            .field("pool_size", &self.pool_size)
            .finish()
    }
}

#[derive(Clone, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// Address to listen on.
    #[arg(long, env = "HAGGLE_BIND", default_value = "127.0.0.1:8080")]
    pub bind: String,
    /// Token for the operator routes (`Authorization: Bearer <token>`); unset disables them.
    #[arg(long, env = "HAGGLE_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Whether anyone may register an agent with POST /v1/agents.
    #[arg(long, env = "HAGGLE_OPEN_REGISTRATION", default_value_t = true, action = ArgAction::Set)]
    pub open_registration: bool,
    /// The largest amount, in minor units, of any ask or bid.
    #[arg(long, env = "HAGGLE_MAX_AMOUNT", default_value_t = DEFAULT_MAX_AMOUNT, value_parser = clap::value_parser!(i64).range(100..))]
    pub max_amount: i64,
    /// How often expired bids are swept (e.g. `5s`, `500ms`); `0` turns the sweeper off.
    #[arg(long, env = "HAGGLE_SWEEP_INTERVAL", default_value = "5s", value_parser = parse_duration)]
    pub sweep_interval: Duration,
    /// Longest time a request may take before the server answers 503.
    #[arg(long, env = "HAGGLE_REQUEST_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub request_timeout: Duration,
    /// Largest request body accepted, in bytes.
    #[arg(long, env = "HAGGLE_BODY_LIMIT", default_value_t = 65_536)]
    pub body_limit: usize,
    /// Requests a second each agent may make (bursts of as many); registration is limited per
    /// client address to a tenth of it. 0 turns the limit off.
    #[arg(long, env = "HAGGLE_RATE_LIMIT", default_value_t = 1000)]
    pub rate_limit: u32,
    /// How often an idle event stream (`/v1/events/stream`) sends a heartbeat.
    #[arg(long, env = "HAGGLE_STREAM_HEARTBEAT", default_value = "15s", value_parser = parse_positive_duration)]
    pub stream_heartbeat: Duration,
    /// How often a long-lived request (an event stream, a long poll, a bid wait) checks that its
    /// credential still stands: a revoked key, a suspended agent or a console session signed
    /// out ends it within this time.
    #[arg(long, env = "HAGGLE_STREAM_RECHECK", default_value = "10s", value_parser = parse_positive_duration)]
    pub stream_recheck: Duration,
    /// Proxies (addresses or CIDR networks, comma-separated) whose `X-Forwarded-For` names the
    /// client, for the limits counted per client address; from any other peer the header is
    /// ignored. None by default: behind a load balancer, list its addresses.
    #[arg(long, env = "HAGGLE_TRUSTED_PROXIES", default_value = "", value_parser = parse_trusted_proxies)]
    pub trusted_proxies: TrustedProxies,
    /// How long an API key's agent is remembered between requests. A revoked key or a changed
    /// tier takes effect at once on every instance that hears of it (they announce it to each
    /// other); this bounds how long one that missed the announcement keeps the old answer.
    /// `0` looks the key up on every request.
    #[arg(long, env = "HAGGLE_KEY_CACHE_TTL", default_value = "5s", value_parser = parse_duration)]
    pub key_cache_ttl: Duration,
    /// How many workers make placements, counters and acceptances, each on a database connection
    /// of its own (besides the pool). A worker makes every such move waiting when it is free,
    /// one statement per kind; one worker makes the largest statements, which cost the least
    /// per move.
    #[arg(long, env = "HAGGLE_MOVE_WORKERS", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub move_workers: u16,
    /// How many pending bids (and as many listings) this instance remembers as its own moves
    /// wrote them, so that the move answering one is decided without reading it again; the
    /// move's compare-and-set still refuses anything that changed since. `0` reads before every
    /// move.
    #[arg(long, env = "HAGGLE_LIVE_CACHE", default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(0..=10_000_000))]
    pub live_cache: u32,
    /// Long polls, bid waits and event streams this instance holds at once, over every agent;
    /// beyond it they are refused with 503 and `Retry-After`, before file descriptors run out.
    #[arg(long, env = "HAGGLE_MAX_STREAMS", default_value_t = crate::events::DEFAULT_MAX_WAITERS as u32, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_streams: u32,
    /// Long polls, bid waits and event streams one agent may hold at once, over the whole
    /// deployment (each instance takes its share); beyond it they are refused with 429.
    #[arg(long, env = "HAGGLE_MAX_STREAMS_PER_AGENT", default_value_t = crate::events::MAX_WAITERS_PER_AGENT as u32, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_streams_per_agent: u32,
    /// HTTP connections this instance holds at once; beyond it a new connection is answered
    /// `503 overloaded` with `Retry-After` and closed. Unset: 10,000, or half the process's
    /// open-file limit if that is lower (the server raises its soft limit to the hard one).
    #[arg(long, env = "HAGGLE_MAX_CONNECTIONS", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: Option<u32>,
    /// How long a request's head (its request line and headers) may take to arrive, from its
    /// first byte; a connection that is slower is closed.
    #[arg(long, env = "HAGGLE_HEADER_TIMEOUT", default_value = "10s", value_parser = parse_positive_duration)]
    pub header_timeout: Duration,
    /// How long a connection may stay open with no request in flight before it is closed.
    #[arg(long, env = "HAGGLE_IDLE_TIMEOUT", default_value = "60s", value_parser = parse_positive_duration)]
    pub idle_timeout: Duration,
    /// On SIGTERM or Ctrl-C, how long requests in flight may run on before their connections
    /// are closed (keep it below the orchestrator's grace period, 30 s in docker-compose.yml).
    #[arg(long, env = "HAGGLE_SHUTDOWN_TIMEOUT", default_value = "20s", value_parser = parse_duration)]
    pub shutdown_timeout: Duration,
    /// Let webhooks point at loopback, private and link-local addresses (for development).
    #[arg(long, env = "HAGGLE_WEBHOOK_ALLOW_PRIVATE", default_value_t = false, action = ArgAction::Set)]
    pub webhook_allow_private: bool,
    /// Pauses before each retry of a failed webhook delivery, comma-separated; when they run
    /// out the delivery fails and its webhook is disabled.
    #[arg(long, env = "HAGGLE_WEBHOOK_RETRY_SCHEDULE", default_value = DEFAULT_RETRY_SCHEDULE, value_parser = parse_schedule)]
    pub webhook_retry_schedule: Schedule,
    /// How long one webhook delivery attempt may take.
    #[arg(long, env = "HAGGLE_WEBHOOK_TIMEOUT", default_value = "10s", value_parser = parse_positive_duration)]
    pub webhook_timeout: Duration,
    /// Webhook deliveries in flight at once on this instance.
    #[arg(long, env = "HAGGLE_WEBHOOK_CONCURRENCY", default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..))]
    pub webhook_concurrency: u16,
    /// How long events are kept (for `GET /v1/events`, streams and webhook delivery logs);
    /// `0` keeps them for ever.
    #[arg(long, env = "HAGGLE_EVENT_RETENTION", default_value = "30d", value_parser = parse_duration)]
    pub event_retention: Duration,
    /// How long after its fulfilment an order the buyer has not completed is completed by the
    /// server (e.g. `14d`).
    #[arg(long, env = "HAGGLE_ORDER_COMPLETE_AFTER", default_value = "14d", value_parser = parse_positive_duration)]
    pub order_complete_after: Duration,
    /// Auto-negotiation workers on this instance (each decides one bid at a time); `0` leaves
    /// policies to other instances.
    #[arg(long, env = "HAGGLE_AUTO_WORKERS", default_value_t = 4, value_parser = clap::value_parser!(u16).range(0..=64))]
    pub auto_workers: u16,
    /// The most moves one auto-negotiation transaction makes when both sides of a thread have
    /// policies (each move still through the state machine); `1` commits every move alone.
    #[arg(long, env = "HAGGLE_AUTO_CHAIN", default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=100))]
    pub auto_chain: u16,
    /// Whether this process records Prometheus metrics (`on` or `off`).
    #[arg(long, env = "HAGGLE_METRICS", default_value = "on", value_parser = parse_switch)]
    pub metrics: bool,
    /// Serve `/metrics` on this address of its own, without authentication, instead of on the
    /// main port behind the operator token. Use a private address only (a loopback or an
    /// internal network the scraper is on).
    #[arg(long, env = "HAGGLE_METRICS_BIND")]
    pub metrics_bind: Option<String>,
    /// How many bids back a thread's gap is compared with to tell a deadlock
    /// (`negotiation.deadlock`); `0` turns detection off.
    #[arg(long, env = "HAGGLE_DEADLOCK_ROUNDS", default_value_t = haggle_domain::deadlock::DEFAULT_ROUNDS, value_parser = clap::value_parser!(u32).range(0..=100))]
    pub deadlock_rounds: u32,
    /// The least share of the gap between the two sides that must close over those bids for
    /// a thread not to count as deadlocked (0 to 1).
    #[arg(long, env = "HAGGLE_DEADLOCK_MIN_PROGRESS", default_value_t = haggle_domain::deadlock::DEFAULT_MIN_PROGRESS, value_parser = parse_fraction)]
    pub deadlock_min_progress: f64,
    /// `Host` values `/mcp` answers on besides the loopback names and the bound address,
    /// comma-separated (`name` or `name:port`: the names clients and the load balancer reach
    /// the server by); `*` answers any.
    #[arg(long, env = "HAGGLE_MCP_ALLOWED_HOSTS", value_delimiter = ',')]
    pub mcp_allowed_hosts: Vec<String>,
    /// Browser origins `/mcp` answers, comma-separated (`https://app.example.com:443`); none by
    /// default. Requests without an `Origin` header (not from a web page) are answered anyway.
    #[arg(long, env = "HAGGLE_MCP_ALLOWED_ORIGINS", value_delimiter = ',')]
    pub mcp_allowed_origins: Vec<String>,
    /// The key webhook secrets are encrypted with (any long random string). Without it the
    /// server generates one and keeps it in the database.
    #[arg(long, env = "HAGGLE_SECRET_KEY", hide_env_values = true)]
    pub secret_key: Option<String>,
}

/// Roughly 24 hours of exponential back-off: 10 s, 30 s, 2 min, 10 min, 30 min, 1 h, 2 h,
/// 4 h, 8 h, 8 h (each with ±20 % jitter).
pub const DEFAULT_RETRY_SCHEDULE: &str = "10s,30s,2m,10m,30m,1h,2h,4h,8h,8h";

/// Parses a comma-separated list of durations such as `10s,30s,2m`.
pub fn parse_schedule(value: &str) -> Result<Schedule, String> {
    let schedule: Vec<Duration> = value.split(',').map(parse_duration).collect::<Result<_, _>>()?;
    if schedule.len() > 100 {
        return Err("the retry schedule may have at most 100 pauses".to_owned());
    }
    Ok(std::sync::Arc::new(schedule))
}

/// A retry schedule (a distinct type, so that clap does not read it as a repeated argument).
pub type Schedule = std::sync::Arc<Vec<Duration>>;

impl fmt::Debug for ServeArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServeArgs")
            .field("database", &self.database)
            .field("bind", &self.bind)
            .field("admin_token", &self.admin_token.as_ref().map(|_| "<redacted>"))
            .field("open_registration", &self.open_registration)
            .field("max_amount", &self.max_amount)
            .field("sweep_interval", &self.sweep_interval)
            .field("request_timeout", &self.request_timeout)
            .field("body_limit", &self.body_limit)
            .field("rate_limit", &self.rate_limit)
            .field("stream_heartbeat", &self.stream_heartbeat)
            .field("stream_recheck", &self.stream_recheck)
            .field("trusted_proxies", &self.trusted_proxies)
            .field("key_cache_ttl", &self.key_cache_ttl)
            .field("move_workers", &self.move_workers)
            .field("live_cache", &self.live_cache)
            .field("max_streams", &self.max_streams)
            .field("max_streams_per_agent", &self.max_streams_per_agent)
            .field("max_connections", &self.max_connections)
            .field("header_timeout", &self.header_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("shutdown_timeout", &self.shutdown_timeout)
            .field("webhook_allow_private", &self.webhook_allow_private)
            .field("webhook_retry_schedule", &self.webhook_retry_schedule)
            .field("webhook_timeout", &self.webhook_timeout)
            .field("webhook_concurrency", &self.webhook_concurrency)
            .field("event_retention", &self.event_retention)
            .field("order_complete_after", &self.order_complete_after)
            .field("auto_workers", &self.auto_workers)
            .field("auto_chain", &self.auto_chain)
            .field("metrics", &self.metrics)
            .field("metrics_bind", &self.metrics_bind)
            .field("deadlock_rounds", &self.deadlock_rounds)
            .field("deadlock_min_progress", &self.deadlock_min_progress)
            .field("mcp_allowed_hosts", &self.mcp_allowed_hosts)
            .field("mcp_allowed_origins", &self.mcp_allowed_origins)
            .field("secret_key", &self.secret_key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl ServeArgs {
    /// The admin token, where one is really set (an empty variable counts as unset).
    pub fn admin_token(&self) -> Option<String> {
        self.admin_token.clone().filter(|token| !token.trim().is_empty())
    }
}

/// Parses a comma-separated list of addresses and networks (a distinct function, so that clap
/// takes the list as one value).
fn parse_trusted_proxies(value: &str) -> Result<TrustedProxies, String> {
    value.parse()
}

/// Parses `on` or `off` (also `true`/`false`, `1`/`0`).
pub fn parse_switch(value: &str) -> Result<bool, String> {
    match value.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "1" | "yes" => Ok(true),
        "off" | "false" | "0" | "no" => Ok(false),
        _ => Err(format!("`{value}` is neither on nor off")),
    }
}

fn parse_tier(value: &str) -> Result<Tier, String> {
    value.parse()
}

/// Parses `250ms`, `5s`, `2m`, `1h`, `30d`, or a bare number of seconds.
pub fn parse_duration(value: &str) -> Result<Duration, String> {
    let value = value.trim();
    let split = value.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(value.len());
    let (number, unit) = value.split_at(split);
    let number: f64 = number.parse().map_err(|_| format!("`{value}` is not a duration like 500ms, 5s or 2m"))?;
    let seconds = match unit.trim() {
        "ms" => number / 1000.0,
        "" | "s" => number,
        "m" => number * 60.0,
        "h" => number * 3600.0,
        "d" => number * 86400.0,
        other => return Err(format!("unknown unit `{other}` in `{value}`; use ms, s, m, h or d")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("`{value}` is out of range"))
}

/// A duration greater than zero.
/// A number from 0 to 1.
pub fn parse_fraction(value: &str) -> Result<f64, String> {
    match value.trim().parse::<f64>() {
        Ok(fraction) if (0.0..=1.0).contains(&fraction) => Ok(fraction),
        _ => Err(format!("`{value}` is not a number from 0 to 1")),
    }
}

pub fn parse_positive_duration(value: &str) -> Result<Duration, String> {
    match parse_duration(value)? {
        Duration::ZERO => Err(format!("`{value}` must be longer than zero")),
        duration => Ok(duration),
    }
}

/// Hides the password of a database URL.
pub fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("redacted"));
            parsed.to_string()
        }
        Ok(parsed) => parsed.to_string(),
        // Several hosts (`h1:5432,h2:5432`) are no URL to the url crate: the password by hand.
        Err(_) => match url.split_once("://").and_then(|(scheme, rest)| Some((scheme, rest.split_once('@')?))) {
            Some((scheme, (userinfo, rest))) if !rest.contains('@') => match userinfo.split_once(':') {
                Some((user, _)) => format!("{scheme}://{user}:redacted@{rest}"),
                None => url.to_owned(),
            },
            Some(_) => "<unparseable URL>".to_owned(),
            None => url.to_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_in_several_units() {
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration("30d").unwrap(), Duration::from_secs(30 * 86400));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn switches_read_on_and_off() {
        assert_eq!(parse_switch("on"), Ok(true));
        assert_eq!(parse_switch("OFF"), Ok(false));
        assert_eq!(parse_switch("false"), Ok(false));
        assert!(parse_switch("maybe").is_err());
    }

    #[test]
    fn urls_lose_their_password() {
        assert_eq!(redact_url("postgres://u:secret@db:5432/haggle"), "postgres://u:redacted@db:5432/haggle");
        assert!(!redact_url("postgres://u:secret@db/haggle").contains("secret"));
        assert_eq!(redact_url("postgres://db/haggle"), "postgres://db/haggle");
        assert_eq!(
            redact_url("postgres://u:secret@h1:5432,h2:5432/haggle"),
            "postgres://u:redacted@h1:5432,h2:5432/haggle"
        );
    }

    #[test]
    fn debug_output_hides_secrets() {
        #[derive(Debug, clap::Parser)]
        struct Serve {
            #[command(flatten)]
            args: ServeArgs,
        }
        let cli = <Serve as clap::Parser>::parse_from([
            "haggle",
            "--database-url",
            "postgres://u:hunter2@db/haggle",
            "--admin-token",
            "sesame-open",
        ]);
        let shown = format!("{cli:?}");
        assert!(!shown.contains("hunter2") && !shown.contains("sesame-open"), "{shown}");
    }
}
