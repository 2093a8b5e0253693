//! `haggle bench`: latency and throughput of negotiations against a running server.
//!
//! For each concurrency level the bench first sets up, untimed, one seller and one buyer per
//! worker (the buyer raised to AGENCY through the operator API) and enough listings that no
//! buyer runs out of threads: so workers never contend on one listing, and what is measured is
//! the server, not lock waits the bench made up. It then runs the warm-up units, unmeasured, and
//! the measured ones, each worker a tokio task in a closed loop (the next unit as soon as its
//! last one ends) over one shared, keep-alive connection pool. The figures go to stdout, progress
//! to stderr, and with `--json` to a file as well.
mod a2a;
mod api;
mod args;
mod auto;
mod cpu;
mod deals;
mod driver;
mod flood;
mod held;
mod idle;
mod level;
mod mcp;
mod pgbench;
pub mod preload;
mod report;
mod rss;
mod stats;
mod wake;
mod webhooks;
mod workload;

use anyhow::bail;

pub use self::args::BenchArgs;
use self::level::run_level;
use self::report::BenchReport;
pub use self::workload::Workload;

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
        if matches!(args.workload, Workload::Mcp | Workload::A2a) {
            let levels = match args.workload {
                Workload::A2a => a2a::run(&client, &admin, &args, &run_id, concurrency as usize).await?,
                _ => mcp::run(&client, &admin, &args, &run_id, concurrency as usize).await?,
            };
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
            Workload::Approvals => held::run_level(&client, &admin, &args, &run_id, concurrency as usize).await?,
            Workload::Deals => deals::run_level(&client, &admin, &args, &run_id, concurrency as usize).await?,
            Workload::W1
            | Workload::W2
            | Workload::Wake
            | Workload::Webhooks
            | Workload::Flood
            | Workload::Mcp
            | Workload::A2a => run_level(&client, &admin, &args, &run_id, concurrency as usize).await?,
        };
        if let Some(sampler) = sampler {
            eprintln!("[{} c={concurrency}] server memory: {}", args.workload.name(), sampler.stop().await);
        }
        if let Some(pgbench) = &pgbench {
            let calls = level.figures.row(stats::ALL_CALLS).map_or(0.0, |all| all.calls_per_second);
            level.pgbench = Some(pgbench.measure(concurrency as usize, calls).await?);
        }
        print!("{}", report::level_table(&level, args.workload));
        if args.workload == Workload::Approvals {
            print!("{}", held::comparison(&level));
        }
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
    if report.levels.len() > 1 && !matches!(args.workload, Workload::Mcp | Workload::A2a) {
        print!("{}", report::sweep_table(&report.levels, args.workload));
    }
    if let Some(path) = &args.json {
        eprintln!("figures written to {}", path.display());
    }
    Ok(())
}
