//! `haggle bench`: latency and throughput of negotiations against a running server.
//!
//! For each concurrency level the bench first sets up, untimed, one seller and one buyer per
//! worker (the buyer raised to AGENCY through the operator API) and enough listings that no
//! buyer runs out of threads: so workers never contend on one listing, and what is measured is
//! the server, not lock waits the bench made up. It then runs the warm-up units, unmeasured, and
//! the measured ones, each worker a tokio task in a closed loop (the next unit as soon as its
//! last one ends) over one shared, keep-alive connection pool. The figures go to stdout, progress
//! to stderr, and with `--json` to a file as well.

mod api;
mod auto;
mod driver;
mod flood;
mod idle;
mod mcp;
mod pgbench;
pub mod preload;
mod report;
mod rss;
mod stats;
mod wake;
mod webhooks;
mod workload;

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use uuid::Uuid;

use self::api::CallFailed;
use self::driver::{Deal, Measured, PhaseWorker, Unit};
use self::report::{BenchReport, Conditions, LevelReport};
use self::stats::Recorder;
pub use self::workload::Workload;
use self::workload::{ASK, Parties};
use haggle_client::{Client, NewListing};
use haggle_domain::listing::{MAX_QUANTITY, MAX_THREADS_PER_BUYER};

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
    /// over REST and through the MCP server's tools, side by side.
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
    /// runs, and print its start, peak and end (Linux).
    #[arg(long)]
    pub server_pid: Option<u32>,
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
    fn levels(&self) -> Vec<u32> {
        if self.concurrency.is_empty() { vec![DEFAULT_CONCURRENCY] } else { self.concurrency.clone() }
    }

    fn warmup(&self) -> u64 {
        self.warmup.unwrap_or(DEFAULT_WARMUP)
    }

    /// Refuses the flags the chosen workload would otherwise ignore.
    fn check_flags(&self) -> anyhow::Result<()> {
        let workload = self.workload.name();
        let pgbench = "--pgbench compares w1's and w2's state-changing calls with pgbench's transactions";
        let ignored: &[(bool, &str, &str)] = match self.workload {
            Workload::W1 | Workload::W2 => &[],
            Workload::W3 => &[(self.pgbench, "--pgbench", pgbench)],
            Workload::Mcp => &[
                (self.pgbench, "--pgbench", pgbench),
                (self.idempotency_keys, "--idempotency-keys", "mcp runs REST both without and with keys"),
            ],
            Workload::Webhooks => &[
                (self.concurrency.len() > 1, "--concurrency", "webhooks runs one level: give one number"),
                (self.warmup.is_some(), "--warmup", "webhooks has no warm-up phase"),
                (self.json.is_some(), "--json", "webhooks prints its figures only"),
                (self.pgbench, "--pgbench", pgbench),
            ],
            Workload::Wake => &[
                (!self.concurrency.is_empty(), "--concurrency", "wake times one waiter at a time: use --trials"),
                (self.warmup.is_some(), "--warmup", "wake has no warm-up phase"),
                (self.json.is_some(), "--json", "wake prints its figures only"),
                (self.pgbench, "--pgbench", pgbench),
            ],
            Workload::Flood => &[
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
    fn command_line(&self) -> String {
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

pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    args.check_flags()?;
    if args.workload == Workload::Flood {
        // Needs no agent, so no operator token either.
        return flood::run(&args.url, args.connections).await;
    }
    let Some(admin_token) = args.admin_token.clone().filter(|token| !token.trim().is_empty()) else {
        bail!(
            "the bench needs the server's operator token to raise its buyers to the AGENCY tier: \
             pass --admin-token or set HAGGLE_ADMIN_TOKEN to the token the server was started with"
        );
    };
    let client = api::connect(&args.url, args.timeout, args.idempotency_keys)?;
    api::check_server(&client, api::SERVER_FLAG).await?;
    let admin = client.with_api_key(admin_token);
    api::check_admin_token(&admin).await?;
    let keys = args.idempotency_keys;
    if args.workload == Workload::Wake {
        let movers = match &args.counter_url {
            Some(url) => {
                let movers = api::connect(url, args.timeout, keys)?;
                api::check_server(&movers, "--counter-url").await?;
                movers
            }
            None => client.clone(),
        };
        return wake::run(&client, &movers, &admin, args.trials, keys).await;
    }
    if args.workload == Workload::Webhooks {
        let concurrency = args.levels()[0] as usize;
        return webhooks::run(&client, &admin, concurrency, args.negotiations, keys).await;
    }
    if cfg!(debug_assertions) {
        eprintln!(
            "warning: this is a debug build of haggle; the bench itself may be the bottleneck (cargo build --release)"
        );
    }

    if args.preload > 0 {
        let Some(url) = &args.database_url else {
            bail!("--preload writes into the server's database: give it with --database-url or DATABASE_URL");
        };
        preload::run(url, args.preload).await?;
    }
    let idle = if args.idle_streams > 0 {
        let before = args.server_pid.and_then(rss::resident_kib);
        let idle =
            idle::open(&args.url, &client, &chrono::Utc::now().format("%H%M%S").to_string(), args.idle_streams).await?;
        if let (Some(pid), Some(before)) = (args.server_pid, before) {
            let after = rss::resident_kib(pid).unwrap_or_default();
            eprintln!(
                "[idle] server resident memory {:.1} MiB before the idle waiters, {:.1} MiB with them ({:.1} KiB each)",
                before as f64 / 1024.0,
                after as f64 / 1024.0,
                (after as f64 - before as f64) / idle.opened.load(std::sync::atomic::Ordering::Relaxed).max(1) as f64
            );
        }
        Some(idle)
    } else {
        None
    };
    let pgbench = match (&args.pgbench, &args.database_url) {
        (false, _) => None,
        (true, Some(url)) => Some(pgbench::Pgbench::new(url, args.pgbench_seconds).await?),
        (true, None) => {
            bail!("--pgbench runs pgbench on the server's database: give it with --database-url or DATABASE_URL")
        }
    };
    // Agent names carry the run, so that several runs against one database stay apart.
    let run_id = chrono::Utc::now().format("%Y%m%dT%H%M%S").to_string();
    let mut report = BenchReport::new(args.command_line(), args.workload);
    for concurrency in args.levels() {
        if args.workload == Workload::Mcp {
            let levels = mcp::run(&client, &admin, &args, &run_id, concurrency as usize).await?;
            let stopped: usize = levels.iter().map(|level| level.figures.stopped_workers.len()).sum();
            report.levels.extend(levels);
            if let Some(path) = &args.json {
                report.write(path)?;
            }
            if stopped > 0 {
                bail!("{stopped} workers stopped before the end of a phase (see the warnings above)");
            }
            continue;
        }
        let sampler = args.server_pid.map(rss::Sampler::start);
        let mut level = match args.workload {
            Workload::W3 => auto::run_level(&client, &admin, &args, &run_id, concurrency as usize).await?,
            Workload::W1 | Workload::W2 | Workload::Wake | Workload::Webhooks | Workload::Flood | Workload::Mcp => {
                run_level(&client, &admin, &args, &run_id, concurrency as usize).await?
            }
        };
        if let Some(sampler) = sampler {
            eprintln!("[{} c={concurrency}] server memory: {}", args.workload.name(), sampler.stop().await);
        }
        if let Some(pgbench) = &pgbench {
            let calls = level.figures.row(stats::ALL_CALLS).map_or(0.0, |all| all.calls_per_second);
            level.pgbench = Some(pgbench.measure(concurrency as usize, calls).await?);
        }
        print!("{}", report::level_table(&level, args.workload));
        let stopped = level.figures.stopped_workers.len();
        report.levels.push(level);
        if let Some(path) = &args.json {
            report.write(path)?;
        }
        if stopped > 0 {
            bail!(
                "{stopped} of {concurrency} workers stopped before the end of the run (see the warnings above), \
                 so these figures are incomplete; is the server still up?"
            );
        }
    }
    if let Some(idle) = idle {
        eprintln!("[idle] {} refused or ended during the run", idle.refused.load(std::sync::atomic::Ordering::Relaxed));
        idle.close();
    }
    if report.levels.len() > 1 && args.workload != Workload::Mcp {
        print!("{}", report::sweep_table(&report.levels, args.workload));
    }
    if let Some(path) = &args.json {
        eprintln!("figures written to {}", path.display());
    }
    Ok(())
}

async fn run_level(
    client: &Client,
    admin: &Client,
    args: &BenchArgs,
    run_id: &str,
    concurrency: usize,
) -> anyhow::Result<LevelReport> {
    let workload = args.workload;
    let label = format!("[{} c={concurrency}]", workload.name());
    let (workers, listings_per_worker) = set_up_workers(client, admin, args, run_id, concurrency).await?;
    let workers = workers.into_iter().map(|worker| Making { worker, moves: workload }).collect();
    let (_, level) = measure_level(client, args, &label, workload, listings_per_worker, workers).await?;
    Ok(level)
}

/// Warms up and measures a level of `workload`'s units made by `workers`, each with
/// `listings_per_worker` listings to begin with, and gives the workers back with the level's
/// report.
async fn measure_level<M: Moves>(
    client: &Client,
    args: &BenchArgs,
    label: &str,
    workload: Workload,
    listings_per_worker: u64,
    workers: Vec<Making<M>>,
) -> anyhow::Result<(Vec<Worker>, LevelReport)> {
    let concurrency = workers.len();
    let Measured { workers, record, date, wall } =
        driver::warm_up_and_measure(label, workload.unit(), Deal::Pool, workers, args.warmup(), args.negotiations)
            .await?;
    let workers: Vec<Worker> = workers.into_iter().map(|making| making.worker).collect();
    let created_mid_run: u64 = workers.iter().map(|worker| worker.listings_created_on_demand).sum();
    let listings = listings_per_worker * concurrency as u64 + created_mid_run;
    let conditions = conditions(client, args, concurrency, date, listings, created_mid_run);
    let level =
        LevelReport { conditions, figures: record.summarize(workload.calls(), wall), pgbench: None, auto: None };
    Ok((workers, level))
}

/// Sets up a level's workers (untimed): one seller and one AGENCY buyer each, with the listings
/// they will bid on; gives them with the listings each has.
async fn set_up_workers(
    client: &Client,
    admin: &Client,
    args: &BenchArgs,
    run_id: &str,
    concurrency: usize,
) -> anyhow::Result<(Vec<Worker>, u64)> {
    let label = format!("[{} c={concurrency}]", args.workload.name());
    // A quarter more than an even share, as workers take units from a common pool; a worker that
    // still runs out creates a listing on the spot, and the report says so.
    let share = (args.warmup() + args.negotiations).div_ceil(concurrency as u64);
    let listings_per_worker = (share + share / 4).div_ceil(THREADS_PER_LISTING) + 1;
    eprintln!(
        "{label} setup: {}, {} (AGENCY), {}",
        report::count(concurrency as u64, "seller"),
        report::count(concurrency as u64, "buyer"),
        report::count(listings_per_worker * concurrency as u64, "listing")
    );
    let started = Instant::now();
    let names = format!("bench-{run_id}-c{concurrency}");
    let workers = futures::future::try_join_all(
        (0..concurrency).map(|index| Worker::set_up(client, admin, &names, index, listings_per_worker)),
    )
    .await
    .context("setting up the bench's agents and listings")?;
    eprintln!("{label} setup done in {:.1} s", started.elapsed().as_secs_f64());
    Ok((workers, listings_per_worker))
}

/// The conditions of a level whose measured phase started at `date`: one seller and one buyer
/// per worker, on `listings` listings.
fn conditions(
    client: &Client,
    args: &BenchArgs,
    concurrency: usize,
    date: chrono::DateTime<chrono::Utc>,
    listings: u64,
    created_mid_run: u64,
) -> Conditions {
    Conditions {
        url: client.base_url().to_owned(),
        workload: args.workload.name(),
        concurrency,
        negotiations: args.negotiations,
        warmup: args.warmup(),
        unit: args.workload.unit().0,
        cpus: std::thread::available_parallelism().map_or(1, usize::from),
        date: date.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        bench_build: if cfg!(debug_assertions) { "debug" } else { "release" },
        haggle_version: env!("CARGO_PKG_VERSION"),
        client_timeout_seconds: args.timeout.as_secs_f64(),
        idempotency_keys: args.idempotency_keys,
        sellers: concurrency,
        buyers: concurrency,
        listings,
        listings_created_mid_run: created_mid_run,
    }
}

/// Threads a buyer may open on one bench listing: the most a listing allows.
const THREADS_PER_LISTING: u64 = MAX_THREADS_PER_BUYER as u64;

/// How a worker makes one unit of work on a listing of its own: w1's or w2's calls over REST
/// (the workload's), or w1's through the MCP tools.
trait Moves: Send + Sync + 'static {
    /// Makes the unit's moves on `listing`, on which the buyer has no active thread, timing
    /// each call into `recorder`; the first failure ends the unit.
    fn make(
        &self,
        parties: &Parties,
        listing: Uuid,
        recorder: &mut Recorder,
    ) -> impl Future<Output = Result<(), CallFailed>> + Send;
}

impl Moves for Workload {
    fn make(
        &self,
        parties: &Parties,
        listing: Uuid,
        recorder: &mut Recorder,
    ) -> impl Future<Output = Result<(), CallFailed>> + Send {
        self.run_once(parties, listing, recorder)
    }
}

/// A worker with the way it makes its units.
struct Making<M> {
    worker: Worker,
    moves: M,
}

impl<M: Moves> PhaseWorker for Making<M> {
    type Record = Recorder;

    async fn run_unit(&mut self, recorder: &mut Recorder) -> Unit {
        let listing = match self.worker.next_listing().await {
            Ok(listing) => listing,
            Err(error) => return Unit::Stopped(format!("{error:#}")),
        };
        match self.moves.make(&self.worker.parties, listing, recorder).await {
            Ok(()) => Unit::Completed,
            Err(CallFailed) => {
                // The failure may have left an active thread there.
                self.worker.abandon_listing();
                Unit::Failed
            }
        }
    }
}

/// One concurrent worker: its own seller and buyer, and the seller's listings it bids on.
struct Worker {
    index: usize,
    parties: Parties,
    /// The two agents' API keys, for clients other than the typed one (the MCP workload's).
    seller_key: String,
    buyer_key: String,
    listings: VecDeque<Listing>,
    listings_created_on_demand: u64,
}

struct Listing {
    id: Uuid,
    threads_left: u64,
}

impl Worker {
    async fn set_up(
        client: &Client,
        admin: &Client,
        names: &str,
        index: usize,
        listings: u64,
    ) -> anyhow::Result<Worker> {
        let seller_key = api::register(client, &format!("{names}-w{index}-seller")).await?;
        let buyer_key = api::register_buyer(client, admin, &format!("{names}-w{index}-buyer")).await?;
        let seller = client.with_api_key(seller_key.clone());
        let buyer = client.with_api_key(buyer_key.clone());
        let mut worker = Worker {
            index,
            parties: Parties { seller, buyer },
            seller_key,
            buyer_key,
            listings: VecDeque::new(),
            listings_created_on_demand: 0,
        };
        for _ in 0..listings {
            worker.add_listing().await?;
        }
        Ok(worker)
    }

    /// A listing with room for a thread per unit of work: the most threads a buyer may open, and
    /// a quantity no run will sell out, so accepting never takes the sold-out path.
    async fn add_listing(&mut self) -> anyhow::Result<()> {
        let listing = NewListing {
            quantity: Some(MAX_QUANTITY),
            max_threads_per_buyer: Some(MAX_THREADS_PER_BUYER),
            ..NewListing::new(format!("bench listing, worker {}", self.index), ASK)
        };
        let listing = self.parties.seller.create_listing(&listing).await.context("creating a bench listing")?;
        self.listings.push_back(Listing { id: listing.id, threads_left: THREADS_PER_LISTING });
        Ok(())
    }

    /// A listing on which the buyer may open one more thread (counted as opened), creating one
    /// when none is left.
    async fn next_listing(&mut self) -> anyhow::Result<Uuid> {
        while self.listings.front().is_some_and(|listing| listing.threads_left == 0) {
            self.listings.pop_front();
        }
        if self.listings.is_empty() {
            self.add_listing().await?;
            self.listings_created_on_demand += 1;
        }
        let listing = self.listings.front_mut().expect("a listing was just ensured");
        listing.threads_left -= 1;
        Ok(listing.id)
    }

    /// Leaves the current listing, where a failed unit may have left the buyer an active thread.
    fn abandon_listing(&mut self) {
        self.listings.pop_front();
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

        for line in [
            &["--workload", "w3", "--concurrency", "1,4", "--warmup", "5", "--json", "w3.json"][..],
            &["--workload", "w1", "--concurrency", "1,4", "--pgbench"],
            &["--workload", "webhooks", "--concurrency", "8"],
            &["--workload", "wake", "--trials", "10"],
            &["--workload", "mcp", "--concurrency", "1,16", "--json", "mcp.json"],
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
