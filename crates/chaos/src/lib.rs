//! `haggle chaos`: the proof that acknowledged answers survive failures, on one machine.
//!
//! The run starts a throwaway PostgreSQL cluster, three `haggle serve` instances of this very
//! binary, and HAProxy in front of them, configured from the example in `deploy/haproxy/`.
//! Through the balancer it drives W1 negotiations (with and without idempotency keys),
//! negotiations played by policies, webhook deliveries to a receiver of its own, event streams
//! and long polls that resume after every cut, races of concurrent moves on one bid sent
//! to different instances, deals carried through (payments confirmed at once past the
//! outstanding amount, refunds negotiated, cancellations racing fulfilment), and held moves
//! approved by two approvers while the counterparty withdraws, each through another instance.
//! Meanwhile it kills instances with SIGKILL and starts them again, and restarts PostgreSQL
//! (fast, immediate) and stops it for a while. Every acknowledged (2xx)
//! answer is logged; once the run has settled each is checked against the database, with the
//! races, the orders, every agent's events and every webhook delivery. The report gives the
//! figures and every violation, and the command fails if there is one.

mod approvals;
pub mod balancer;
mod cluster;
mod deals;
mod failover;
mod faults;
mod http;
mod instances;
mod market;
mod negotiations;
mod races;
mod readers;
mod receiver;
mod record;
mod report;
mod verify;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use sqlx::Connection;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use self::balancer::Balancer;
use self::cluster::{Cluster, Shutdown};
use self::failover::FailoverCluster;
use self::http::{Agent, Api, Endpoint};
use self::instances::Instances;
use self::market::{Moves, Setup};
use self::negotiations::Pair;
use self::readers::Style;
use self::receiver::Receiver;
use self::record::{Ledger, Violations, thousands};
use haggle_domain::Tier;
use haggle_server::config::parse_duration;

#[derive(Debug, clap::Args)]
pub struct ChaosArgs {
    /// How long the load and the faults last (`60s`, `5m`).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub duration: Duration,
    /// Races to run, spread evenly over the duration: a buyer's bid, then the seller's accept,
    /// reject and counter at once through the three instances, and the buyer's withdrawal.
    #[arg(long, default_value_t = 1000)]
    pub races: u64,
    /// Time between faults (by default a thirteenth of the duration, at least 8 s); `0` runs
    /// the load without faults.
    #[arg(long, value_parser = parse_duration)]
    pub fault_every: Option<Duration>,
    /// How long a killed instance stays down before it is started again.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub down_for: Duration,
    /// How long PostgreSQL stays stopped in the outage fault; `0` leaves the outage out.
    #[arg(long, default_value = "8s", value_parser = parse_duration)]
    pub outage: Duration,
    /// Workers running W1 negotiations (half with idempotency keys, half without).
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub w1_workers: u32,
    /// Workers opening negotiations that the policies play.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(0..=64))]
    pub policy_workers: u32,
    /// Workers running races (each with its own seller and buyer).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub race_workers: u32,
    /// Workers carrying deals through on orders of their own: payments confirmed at once past
    /// the outstanding amount, refunds negotiated, cancellations racing fulfilment.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(0..=64))]
    pub deal_workers: u32,
    /// Workers whose buyer has approval rules: its held moves approved by two approvers at once
    /// while the seller withdraws, each through another instance.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=64))]
    pub approval_workers: u32,
    /// How long to wait after the load for events, webhook deliveries, policies and readers to
    /// settle before checking.
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    pub settle_timeout: Duration,
    /// A directory holding initdb, pg_ctl and postgres, instead of searching for them.
    #[arg(long, env = "HAGGLE_POSTGRES_BIN_DIR")]
    pub postgres_bin_dir: Option<PathBuf>,
    /// The HAProxy binary (default: `haproxy` on PATH, or /usr/sbin/haproxy).
    #[arg(long)]
    pub haproxy: Option<PathBuf>,
    /// Run PostgreSQL with fsync on (off by default: faster, and still safe against what this
    /// run does, which is to crash PostgreSQL, not the machine).
    #[arg(long)]
    pub fsync: bool,
    /// Where to put the cluster, the configuration, the logs and `acks.jsonl` (default: a new
    /// directory under the temporary directory, removed after a clean run).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// Keep the work directory after a clean run too.
    #[arg(long)]
    pub keep: bool,
    /// Run on a pg_auto_failover cluster (a monitor, a primary and a synchronous secondary)
    /// started with this script (`scripts/pg-failover`) instead of one PostgreSQL, the
    /// instances given both nodes in `DATABASE_URL`: the faults are then the primary killed
    /// (its keeper and postmaster, SIGKILL; the node rejoins after the failover) and a
    /// switchover, in place of instance kills and restarts.
    #[arg(long)]
    pub failover: Option<PathBuf>,
    /// Count an event delivered twice to a webhook as a violation. Delivery is documented as at
    /// least once, so by default duplicates are only reported.
    #[arg(long)]
    pub exactly_once_webhooks: bool,
}

impl ChaosArgs {
    fn fault_every(&self) -> Duration {
        let default = if self.failover.is_some() {
            // A failover and the old primary's rejoining take some 20 s on two cores.
            (self.duration / 7).max(Duration::from_secs(20))
        } else {
            (self.duration / 13).max(Duration::from_secs(8))
        };
        self.fault_every.unwrap_or(default)
    }

    fn command_line(&self) -> String {
        let mut line = format!(
            "haggle chaos --duration {}s --races {} --fault-every {}ms --down-for {}ms --outage {}ms \
             --w1-workers {} --policy-workers {} --race-workers {} --deal-workers {} --approval-workers {}",
            self.duration.as_secs(),
            self.races,
            self.fault_every().as_millis(),
            self.down_for.as_millis(),
            self.outage.as_millis(),
            self.w1_workers,
            self.policy_workers,
            self.race_workers,
            self.deal_workers,
            self.approval_workers
        );
        if self.fsync {
            line.push_str(" --fsync");
        }
        if self.exactly_once_webhooks {
            line.push_str(" --exactly-once-webhooks");
        }
        if let Some(script) = &self.failover {
            line.push_str(&format!(" --failover {}", script.display()));
        }
        line
    }
}

/// The run's moving parts, stopped in order however the run ends.
struct Parts {
    dir: PathBuf,
    cluster: Option<Arc<Cluster>>,
    failover: Option<Arc<FailoverCluster>>,
    instances: Option<Arc<Mutex<Instances>>>,
    balancer: Option<Balancer>,
    background: CancellationToken,
}

impl Parts {
    async fn stop(&mut self) {
        self.background.cancel();
        if let Some(balancer) = self.balancer.take() {
            balancer.stop().await;
        }
        if let Some(instances) = self.instances.take() {
            instances.lock().await.stop_all().await;
        }
        if let Some(cluster) = self.cluster.take() {
            let stopped = tokio::task::spawn_blocking(move || cluster.stop(Shutdown::Fast)).await;
            if let Ok(Err(error)) = stopped {
                eprintln!("chaos: stopping PostgreSQL: {error:#}");
            }
        }
        if let Some(cluster) = self.failover.take() {
            let stopped = tokio::task::spawn_blocking(move || cluster.stop()).await;
            if let Ok(Err(error)) = stopped {
                eprintln!("chaos: stopping the failover cluster: {error:#}");
            }
        }
    }
}

pub async fn run(args: ChaosArgs) -> anyhow::Result<()> {
    let haproxy = balancer::find(args.haproxy.as_deref())?;
    let bin_dir = match &args.postgres_bin_dir {
        Some(dir) => dir.clone(),
        None => haggle_server::embedded::find_postgres_programs(&["initdb", "pg_ctl", "postgres"]).context(
            "no PostgreSQL server binaries (initdb, pg_ctl, postgres) found: install PostgreSQL or pass --postgres-bin-dir",
        )?,
    };
    let exe = std::env::current_exe().context("finding this program, to start the instances")?;
    let dir = match &args.work_dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("haggle-chaos-{}", Uuid::now_v7().simple())),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    // PostgreSQL runs as another user when this runs as root: it must reach its directory.
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    eprintln!("chaos: working in {}", dir.display());

    let mut parts = Parts {
        dir: dir.clone(),
        cluster: None,
        failover: None,
        instances: None,
        balancer: None,
        background: CancellationToken::new(),
    };
    // An interrupted run (Ctrl-C, or a CI time limit's SIGTERM) still stops what it started.
    let outcome = tokio::select! {
        outcome = run_in(&args, &haproxy, &bin_dir, &exe, &mut parts) => outcome,
        signal = interrupted() => Err(anyhow::anyhow!("interrupted by {signal}")),
    };
    parts.stop().await;
    match outcome {
        Ok(0) => {
            if args.keep || args.work_dir.is_some() {
                eprintln!("chaos: the logs and acks.jsonl are in {}", parts.dir.display());
            } else {
                let _ = std::fs::remove_dir_all(&parts.dir);
            }
            Ok(())
        }
        Ok(violations) => {
            bail!("{violations} violations (listed above); the logs and acks.jsonl are in {}", parts.dir.display())
        }
        Err(error) => Err(error.context(format!("the chaos run failed; its logs are in {}", parts.dir.display()))),
    }
}

/// Waits for SIGINT or SIGTERM; gives its name.
async fn interrupted() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut interrupt), Ok(mut terminate)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate()))
    else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = interrupt.recv() => "SIGINT",
        _ = terminate.recv() => "SIGTERM",
    }
}

/// Runs everything; gives the number of violations.
async fn run_in(
    args: &ChaosArgs,
    haproxy: &Path,
    bin_dir: &Path,
    exe: &Path,
    parts: &mut Parts,
) -> anyhow::Result<usize> {
    let dir = parts.dir.clone();
    let ports = free_ports(6)?;
    let (pg_port, lb_port, stats_port, instance_ports) = (ports[0], ports[1], ports[2], &ports[3..]);

    // PostgreSQL: one server, or a primary and a synchronous secondary under pg_auto_failover.
    let started = Instant::now();
    let fsync = args.fsync || args.failover.is_some();
    let pg_dir = dir.join("postgres");
    let (database, database_url, postgres) = match &args.failover {
        Some(script) => {
            let script = script.clone();
            let cluster =
                Arc::new(tokio::task::spawn_blocking(move || FailoverCluster::start(&script, &pg_dir)).await??);
            parts.failover = Some(cluster.clone());
            let pool = cluster.pool(1).await?;
            let postgres: String = sqlx::query_scalar("SHOW server_version").fetch_one(&pool).await?;
            pool.close().await;
            eprintln!("chaos: PostgreSQL {postgres} under pg_auto_failover, {}\n{}", cluster.url, cluster.state());
            let url = cluster.url.clone();
            (faults::Database::Failover(cluster), url, postgres)
        }
        None => {
            let cluster_bin = bin_dir.to_owned();
            let cluster = Arc::new(
                tokio::task::spawn_blocking(move || Cluster::start(&cluster_bin, &pg_dir, pg_port, fsync)).await??,
            );
            parts.cluster = Some(cluster.clone());
            let mut admin = sqlx::PgConnection::connect(&cluster.url("postgres")).await?;
            sqlx::query("CREATE DATABASE haggle").execute(&mut admin).await?;
            let postgres: String = sqlx::query_scalar("SHOW server_version").fetch_one(&mut admin).await?;
            admin.close().await?;
            eprintln!(
                "chaos: PostgreSQL {postgres} on 127.0.0.1:{pg_port} (fsync {})",
                if fsync { "on" } else { "off" }
            );
            let url = cluster.url("haggle");
            (faults::Database::Single(cluster), url, postgres)
        }
    };

    // The instances, one at a time at first (the first applies the migrations).
    let admin_token = format!("chaos-{}", Uuid::new_v4().simple());
    let env = vec![
        ("DATABASE_URL".to_owned(), database_url),
        ("HAGGLE_ADMIN_TOKEN".to_owned(), admin_token.clone()),
        ("HAGGLE_WEBHOOK_ALLOW_PRIVATE".to_owned(), "true".to_owned()),
        // HAProxy, whose X-Forwarded-For names each client, as an operator would configure it.
        ("HAGGLE_TRUSTED_PROXIES".to_owned(), "127.0.0.1".to_owned()),
        ("HAGGLE_RATE_LIMIT".to_owned(), "0".to_owned()),
        ("HAGGLE_WEBHOOK_TIMEOUT".to_owned(), "5s".to_owned()),
        ("HAGGLE_STREAM_HEARTBEAT".to_owned(), "5s".to_owned()),
        ("HAGGLE_DB_POOL_SIZE".to_owned(), "10".to_owned()),
        ("RUST_LOG".to_owned(), "warn".to_owned()),
    ];
    let mut instances = Instances::new(exe, instance_ports, env, &dir)?;
    for index in 0..instance_ports.len() {
        instances.start(index).await?;
    }
    let instance_endpoints: Vec<Endpoint> = instances
        .all
        .iter()
        .map(|instance| Endpoint { name: instance.name.clone(), base: instance.base_url() })
        .collect();
    let instances = Arc::new(Mutex::new(instances));
    parts.instances = Some(instances.clone());

    // HAProxy.
    let balancer = Balancer::start(haproxy, &dir, lb_port, stats_port, instance_ports).await?;
    let to = Endpoint { name: "balancer".to_owned(), base: balancer.base_url() };
    let haproxy_version = balancer::version(haproxy);
    eprintln!("chaos: {haproxy_version} on 127.0.0.1:{lb_port} ({})", balancer.config.display());
    parts.balancer = Some(balancer);
    eprintln!("chaos: PostgreSQL, 3 instances and HAProxy up in {:.1} s", started.elapsed().as_secs_f64());

    // The agents, their policies and webhooks, before any fault.
    let violations = Arc::new(Violations::default());
    let (receiver, receiver_address) = Receiver::start(parts.background.clone()).await?;
    let ledger = Arc::new(Ledger::new(&dir.join("acks.jsonl"))?);
    let api = Api::new(violations.clone(), ledger.started)?;
    let setup = Setup { api: &api, to: &to, admin_token: &admin_token };
    let mut hooks = Vec::new();
    let mut agents: Vec<Agent> = Vec::new();
    let pair = |name: String| {
        let setup = &setup;
        async move {
            let seller = setup.agent(&format!("{name}-seller"), Tier::Public).await?;
            let buyer = setup.agent(&format!("{name}-buyer"), Tier::Agency).await?;
            anyhow::Ok(Pair { seller, buyer })
        }
    };
    let mut w1_pairs = Vec::new();
    let mut policy_pairs = Vec::new();
    let mut race_pairs = Vec::new();
    for index in 0..args.w1_workers {
        w1_pairs.push(pair(format!("w1-{index}")).await?);
    }
    for index in 0..args.policy_workers {
        let pair = pair(format!("policy-{index}")).await?;
        setup.policy(&pair.seller, "seller", &negotiations::seller_policy()).await?;
        setup.policy(&pair.buyer, "buyer", &negotiations::buyer_policy()).await?;
        policy_pairs.push(pair);
    }
    for index in 0..args.race_workers {
        race_pairs.push(pair(format!("race-{index}")).await?);
    }
    let mut deal_pairs = Vec::new();
    for index in 0..args.deal_workers {
        deal_pairs.push(pair(format!("deal-{index}")).await?);
    }
    let mut ruled = Vec::new();
    for index in 0..args.approval_workers {
        let name = format!("approval-{index}");
        ruled.push(approvals::set_up(&setup, pair(name.clone()).await?, &name).await?);
    }
    // Every seller of a negotiation gets a webhook for all of its events, made before its first.
    for pair in w1_pairs.iter().chain(&policy_pairs) {
        let index = hooks.len();
        let (id, secret) = setup.webhook(&pair.seller, &format!("http://{receiver_address}/hooks/{index}")).await?;
        receiver.expect(index, secret);
        hooks.push(verify::Hook { index, id, owner: pair.seller.id });
    }
    // Buyers are followed by event streams, sellers by long polls.
    let mut followed = Vec::new();
    let ruled_pairs: Vec<Pair> = ruled.iter().map(|ruled| ruled.pair.clone()).collect();
    for pair in w1_pairs.iter().chain(&policy_pairs).chain(&race_pairs).chain(&deal_pairs).chain(&ruled_pairs) {
        agents.push(pair.seller.clone());
        agents.push(pair.buyer.clone());
        let stop = parts.background.clone();
        followed.push(readers::spawn(api.clone(), to.clone(), pair.buyer.clone(), Style::Stream, stop.clone()));
        followed.push(readers::spawn(api.clone(), to.clone(), pair.seller.clone(), Style::LongPoll, stop));
    }
    eprintln!(
        "chaos: {} agents, {} webhooks to {receiver_address}, {} event streams and {} long polls",
        agents.len(),
        hooks.len(),
        followed.len() / 2,
        followed.len() / 2
    );

    // The load and the faults.
    let load_stop = CancellationToken::new();
    let abort = CancellationToken::new();
    let moves = Moves {
        api: api.clone(),
        to: to.clone(),
        ledger: ledger.clone(),
        violations: violations.clone(),
        stop: abort.clone(),
    };
    let load_started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for (index, pair) in w1_pairs.iter().enumerate() {
        let keyed = index % 2 == 0;
        workers.spawn(negotiations::w1(moves.clone(), pair.clone(), keyed, index, load_stop.clone()));
    }
    for (index, pair) in policy_pairs.iter().enumerate() {
        workers.spawn(negotiations::policy(moves.clone(), pair.clone(), index, load_stop.clone()));
    }
    for (index, pair) in deal_pairs.iter().enumerate() {
        let through = instance_endpoints.clone();
        workers.spawn(deals::run(moves.clone(), pair.clone(), through, index, load_stop.clone()));
    }
    for (index, ruled) in ruled.iter().enumerate() {
        let through = instance_endpoints.clone();
        workers.spawn(approvals::run(moves.clone(), ruled.clone(), through, index, load_stop.clone()));
    }
    let plan = Arc::new(races::Plan {
        next: AtomicU64::new(0),
        total: args.races,
        start: load_started,
        spacing: args.duration.checked_div(args.races.max(1) as u32).unwrap_or_default(),
    });
    let mut racers = tokio::task::JoinSet::new();
    for (index, pair) in race_pairs.iter().enumerate() {
        racers.spawn(races::run(
            moves.clone(),
            pair.clone(),
            instance_endpoints.clone(),
            plan.clone(),
            index,
            abort.clone(),
        ));
    }
    let schedule = if args.failover.is_some() {
        faults::failover_schedule(args.duration, args.fault_every())
    } else {
        faults::schedule(args.duration, args.fault_every(), Some(args.outage).filter(|outage| !outage.is_zero()))
    };
    eprintln!(
        "chaos: load for {} s with {} faults, one every {:.1} s; {} races",
        args.duration.as_secs(),
        schedule.len(),
        args.fault_every().as_secs_f64(),
        args.races
    );
    let checks_on = match &database {
        faults::Database::Single(cluster) => Checks::Url(cluster.url("haggle")),
        faults::Database::Failover(cluster) => Checks::Failover(cluster.clone()),
    };
    let fault_task =
        tokio::spawn(faults::run(schedule, database, instances.clone(), ledger.clone(), args.down_for, abort.clone()));
    let progress = tokio::spawn(report_progress(
        ledger.clone(),
        api.clone(),
        receiver.clone(),
        args.races,
        parts.background.clone(),
    ));

    tokio::time::sleep(args.duration).await;
    load_stop.cancel();
    eprintln!(
        "[{:6.1} s] load: stopping the negotiations; the races go on until all have run",
        ledger.since_start(Instant::now())
    );
    let faulted = fault_task.await.context("the fault task")?;
    if let Err(error) = faulted {
        abort.cancel();
        return Err(error.context("causing a fault"));
    }
    // Races may lag behind their schedule; they have half as long again as the run to finish.
    let lag = args.duration / 2 + Duration::from_secs(30);
    if tokio::time::timeout(lag, async { while racers.join_next().await.is_some() {} }).await.is_err() {
        violations
            .add("run did not finish", format!("only {} of {} races ran in time", ledger.race_count(), args.races));
        abort.cancel();
    }
    while workers.join_next().await.is_some() {}
    let load = load_started.elapsed();
    ledger.flush();
    progress.abort();
    eprintln!(
        "[{:6.1} s] load done: {} acknowledged moves, {} races",
        ledger.since_start(Instant::now()),
        thousands(ledger.ack_count() as u64),
        ledger.race_count()
    );

    // Settle: everything decided and delivered, and every reader caught up.
    let pool = match checks_on {
        Checks::Url(url) => sqlx::postgres::PgPoolOptions::new().max_connections(2).connect(&url).await?,
        // On the primary of now: every acknowledged move is looked for where it must have survived.
        Checks::Failover(cluster) => cluster.pool(2).await?,
    };
    settle(&pool, &instances, &followed, args.settle_timeout, &violations).await?;

    eprintln!("chaos: checking against the database");
    let evidence = verify::Evidence {
        ledger: &ledger,
        agents: &agents,
        readers: followed.iter().map(|seen| seen.lock().expect("seen").clone()).collect(),
        hooks: &hooks,
        arrivals: receiver.arrivals(),
        api: &api,
        balancer: &to,
        exactly_once_webhooks: args.exactly_once_webhooks,
        ruled: approvals::ruled_agents(&ruled),
    };
    let findings = verify::check(&pool, evidence, &violations).await?;
    pool.close().await;
    let stats = match &parts.balancer {
        Some(balancer) => balancer.stats().await.unwrap_or_default(),
        None => Vec::new(),
    };
    let conditions = report::Conditions {
        command: args.command_line(),
        haproxy: haproxy_version,
        postgres: format!("PostgreSQL {postgres}"),
        fsync,
        failover: args.failover.is_some(),
        load,
        workers: format!(
            "{} W1 workers (half with idempotency keys), {} policy workers, {} race workers, {} deal workers, {} approval workers; {} webhooks, {} SSE streams, {} long polls",
            args.w1_workers,
            args.policy_workers,
            args.race_workers,
            args.deal_workers,
            args.approval_workers,
            hooks.len(),
            followed.len() / 2,
            followed.len() / 2
        ),
    };
    let recoveries = report::recoveries(&ledger, &ledger.faults());
    report::print(&conditions, &ledger, &api.tally(), &findings, &recoveries, &stats, &violations);
    Ok(violations.count())
}

/// Where the checks read the database.
enum Checks {
    Url(String),
    Failover(Arc<FailoverCluster>),
}

/// Waits until no policy task or webhook delivery is pending, every
/// instance is up, and every reader has read its agent's last event.
async fn settle(
    pool: &sqlx::PgPool,
    instances: &Arc<Mutex<Instances>>,
    followed: &[readers::Shared],
    patience: Duration,
    violations: &Violations,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let deadline = started + patience;
    let mut waiting_for = String::new();
    while Instant::now() < deadline {
        let (tasks, deliveries): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM auto_tasks WHERE done_at IS NULL),
                    (SELECT count(*) FROM webhook_deliveries WHERE status = 'PENDING')",
        )
        .fetch_one(pool)
        .await?;
        let lasts: std::collections::HashMap<Uuid, i64> =
            sqlx::query_as::<_, (Uuid, i64)>("SELECT agent_id, max(seq) FROM event_recipients GROUP BY 1")
                .fetch_all(pool)
                .await?
                .into_iter()
                .collect();
        let behind = followed
            .iter()
            .filter(|seen| {
                let seen = seen.lock().expect("seen");
                seen.last() < lasts.get(&seen.agent).copied().unwrap_or(0)
            })
            .count();
        let running = instances.lock().await.all_running();
        waiting_for = format!(
            "{tasks} policy tasks, {deliveries} webhook deliveries pending, \
             {behind} readers behind{}",
            if running { "" } else { ", an instance down" }
        );
        if tasks == 0 && deliveries == 0 && behind == 0 && running {
            eprintln!("chaos: settled in {:.1} s", started.elapsed().as_secs_f64());
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    violations.add("run did not settle", format!("after {}: {waiting_for}", record::span(patience)));
    Ok(())
}

/// A line on stderr every 5 s while the load runs.
async fn report_progress(ledger: Arc<Ledger>, api: Api, receiver: Receiver, races: u64, stop: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    tick.tick().await;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let tally = api.tally();
        eprintln!(
            "[{:6.1} s] {} moves acknowledged, {}/{} races, {} answers ({} 503), {} webhook deliveries",
            ledger.since_start(Instant::now()),
            thousands(ledger.ack_count() as u64),
            ledger.race_count(),
            races,
            thousands(tally.answers()),
            thousands(tally.with_status(503)),
            thousands(receiver.deliveries())
        );
    }
}

/// `count` distinct free ports on 127.0.0.1.
pub fn free_ports(count: usize) -> anyhow::Result<Vec<u16>> {
    let listeners: Vec<TcpListener> =
        (0..count).map(|_| TcpListener::bind("127.0.0.1:0")).collect::<Result<_, _>>().context("finding free ports")?;
    listeners.iter().map(|listener| Ok(listener.local_addr()?.port())).collect()
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Command {
        #[command(flatten)]
        chaos: ChaosArgs,
    }

    #[test]
    fn faults_come_every_thirteenth_of_the_run_but_no_closer_than_8_s() {
        let args = Command::parse_from(["chaos"]).chaos;
        assert_eq!((args.duration, args.races), (Duration::from_secs(300), 1000));
        assert_eq!(args.fault_every(), Duration::from_secs(300) / 13);
        let short = Command::parse_from(["chaos", "--duration", "60s", "--races", "100"]).chaos;
        assert_eq!(short.fault_every(), Duration::from_secs(8));
        assert!(short.command_line().starts_with("haggle chaos --duration 60s --races 100 --fault-every 8000ms"));
    }
}
