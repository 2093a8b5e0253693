//! The server's subcommands of the `haggle` binary: serve, migrate and the operator's admin tasks.

use std::time::Duration;

use anyhow::Context;
use sqlx::PgPool;
use sqlx::postgres::PgConnectOptions;
use tokio_util::sync::CancellationToken;

use crate::app::{App, AppConfig, MetricsExport};
use crate::config::{AdminCommand, DatabaseArgs, ServeArgs, redact_url};
use crate::connections::{self, Limits};
use crate::db;
use crate::db::primary::{DatabaseUrl, Primary};
use crate::embedded::{DirectoryUse, EmbeddedPostgres};
use crate::http::Settings;
use crate::market::{self, Market, Rules, Wakeups};
use crate::webhooks::WebhookSettings;
use haggle_domain::Rejection;
use haggle_domain::deadlock;
use haggle_domain::money::AmountLimits;

/// `haggle migrate`: applies the migrations and exits.
pub async fn migrate(args: DatabaseArgs) -> anyhow::Result<()> {
    let database = Database::open(&args, DirectoryUse::Shared).await?;
    let outcome = db::migrate(&database.pool).await.context("applying migrations");
    database.close().await;
    outcome?;
    println!("migrations applied");
    Ok(())
}

/// The pool, and the embedded PostgreSQL behind it when there is no `DATABASE_URL`, or the
/// primary it follows when `DATABASE_URL` names several hosts.
pub struct Database {
    pub pool: PgPool,
    pub primary: Option<Primary>,
    embedded: Option<EmbeddedPostgres>,
}

impl Database {
    /// Opens the database; without `DATABASE_URL`, the embedded PostgreSQL, which a server
    /// (`DirectoryUse::Exclusive`) owns and an operator command (`DirectoryUse::Shared`) borrows.
    pub async fn open(args: &DatabaseArgs, access: DirectoryUse) -> anyhow::Result<Database> {
        let (options, embedded) = match &args.database_url {
            Some(url) => {
                let parsed = DatabaseUrl::parse(url)
                    .map_err(|why| anyhow::anyhow!("DATABASE_URL is not a valid PostgreSQL URL: {why}"))?;
                tracing::info!(database = %redact_url(url), "using the database at DATABASE_URL");
                if let Some(primary) = Primary::new(&parsed) {
                    let hosts: Vec<String> = primary.hosts().iter().map(ToString::to_string).collect();
                    tracing::info!(hosts = %hosts.join(", "), "following the primary among the hosts of DATABASE_URL");
                    let found = primary.wait_for(Duration::from_secs(30)).await.map_err(anyhow::Error::msg)?;
                    let pool = primary
                        .connect(args.pool_size)
                        .await
                        .with_context(|| format!("connecting to the primary, {found}"))?;
                    return Ok(Database { pool, primary: Some(primary), embedded: None });
                }
                (parsed.options, None)
            }
            None => {
                let server = EmbeddedPostgres::start(&args.data_dir, args.postgres_bin_dir.as_deref(), access).await?;
                tracing::info!(data_dir = %server.data_dir().display(), "using the embedded PostgreSQL");
                (server.connect_options(crate::embedded::DATABASE), Some(server))
            }
        };
        match connect_with_retry(options, args.pool_size).await {
            Ok(pool) => Ok(Database { pool, primary: None, embedded }),
            Err(error) => {
                if let Some(server) = embedded.filter(EmbeddedPostgres::owns) {
                    let _ = server.stop().await;
                }
                Err(error)
            }
        }
    }

    /// Closes the pool, and stops the embedded PostgreSQL if this process owns it.
    pub async fn close(self) {
        self.pool.close().await;
        if let Some(server) = self.embedded
            && server.owns()
            && let Err(error) = server.stop().await
        {
            tracing::error!(%error, "stopping the embedded PostgreSQL failed");
        }
    }
}

/// Connects, waiting up to 30 s for a database that is still starting.
async fn connect_with_retry(options: PgConnectOptions, pool_size: u32) -> anyhow::Result<PgPool> {
    let mut attempt = 0;
    loop {
        match db::connect(options.clone(), pool_size).await {
            Ok(pool) => return Ok(pool),
            Err(error)
                if attempt < 30 && !matches!(error, sqlx::Error::Configuration(_) | sqlx::Error::Database(_)) =>
            {
                attempt += 1;
                tracing::warn!(%error, attempt, "the database is not answering yet; retrying in 1 s");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(error) => return Err(error).context("connecting to the database"),
        }
    }
}

/// `haggle serve`: the API and its workers until SIGTERM or Ctrl-C.
pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone()));
    let admin_token = args.admin_token();
    if admin_token.as_ref().is_some_and(|token| token.len() < 16) {
        tracing::warn!("HAGGLE_ADMIN_TOKEN is shorter than 16 characters; use a long random token");
    }
    let max_connections = match args.max_connections {
        Some(max) => max as usize,
        None => match connections::raise_open_file_limit() {
            Ok(open_files) => connections::default_max_connections(open_files),
            Err(error) => {
                tracing::warn!(%error, "the open-file limit cannot be read; capping connections at the default");
                connections::DEFAULT_MAX_CONNECTIONS
            }
        },
    };
    let database = Database::open(&args.database, DirectoryUse::Exclusive).await?;
    if let Some(primary) = &database.primary {
        tokio::spawn(primary.clone().follow(shutdown.clone()));
    }
    let outcome = async {
        db::migrate(&database.pool).await.context("applying migrations")?;
        let config = AppConfig {
            settings: Settings {
                admin_token,
                open_registration: args.open_registration,
                rules: Rules {
                    amounts: AmountLimits { max: args.max_amount },
                    deadlock: deadlock::Settings {
                        rounds: args.deadlock_rounds,
                        min_progress: args.deadlock_min_progress,
                    },
                },
                body_limit: args.body_limit,
                request_timeout: args.request_timeout,
                rate_limit: args.rate_limit,
                heartbeat: args.stream_heartbeat,
                stream_recheck: args.stream_recheck,
                trusted_proxies: args.trusted_proxies.clone(),
                key_cache_ttl: args.key_cache_ttl,
                move_workers: usize::from(args.move_workers),
                live_cache: args.live_cache as usize,
                max_waiters: args.max_streams as usize,
                max_waiters_per_agent: args.max_streams_per_agent as usize,
                webhooks: WebhookSettings {
                    allow_private: args.webhook_allow_private,
                    retry_schedule: args.webhook_retry_schedule.to_vec(),
                    timeout: args.webhook_timeout,
                    concurrency: usize::from(args.webhook_concurrency),
                },
                mcp: crate::http::mcp::Access {
                    hosts: args.mcp_allowed_hosts.clone(),
                    origins: args.mcp_allowed_origins.clone(),
                },
            },
            sweep_interval: args.sweep_interval,
            secret_key: args.secret_key.clone(),
            event_retention: args.event_retention,
            order_complete_after: args.order_complete_after,
            auto_workers: usize::from(args.auto_workers),
            auto_chain: usize::from(args.auto_chain),
            connections: Limits {
                max_connections,
                header_timeout: args.header_timeout,
                idle_timeout: args.idle_timeout,
                shutdown_timeout: args.shutdown_timeout,
            },
            metrics: MetricsExport {
                handle: args.metrics.then(crate::metrics::install),
                bind: args.metrics_bind.clone().filter(|bind| !bind.trim().is_empty()),
            },
            primary: database.primary.clone(),
        };
        let app = App::build(database.pool.clone(), &args.bind, config)
            .await
            .with_context(|| format!("binding {}", args.bind))?;
        tracing::info!(max_connections, "holding at most {max_connections} connections at once");
        if let Some(address) = app.metrics_addr() {
            tracing::info!("serving metrics on http://{address}/metrics");
        }
        tracing::info!("listening on http://{}", app.local_addr());
        app.run_until_stopped(shutdown).await.context("serving")
    }
    .await;
    database.close().await;
    tracing::info!("stopped");
    outcome
}

async fn cancel_on_signal(shutdown: CancellationToken) {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler can be installed");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted; shutting down"),
        _ = terminate.recv() => tracing::info!("SIGTERM received; shutting down"),
    }
    shutdown.cancel();
}

/// `haggle admin …`: operator tasks run directly against the database.
pub async fn admin(command: AdminCommand) -> anyhow::Result<()> {
    let database_args = match &command {
        AdminCommand::CreateAgent { database, .. } | AdminCommand::SetTier { database, .. } => database.clone(),
    };
    let database = Database::open(&database_args, DirectoryUse::Shared).await?;
    let outcome = async {
        db::migrate(&database.pool).await.context("applying migrations")?;
        // An operator's change is a unit of work like any other; this process runs no
        // announcer or executor to wake (these commands write no events).
        let market = Market::new(database.pool.clone(), None, Wakeups::default());
        let mut unit = market.begin().await?;
        let tx = unit.conn();
        let printed = match command {
            AdminCommand::CreateAgent { name, tier, .. } => {
                let registration = haggle_api::Registration { name };
                let (agent, key) = market::agents::register(tx, registration, tier).await.map_err(describe)?;
                serde_json::to_value(haggle_api::Registered {
                    agent: agent.into(),
                    api_key: key.api_key,
                    key: key.key.into(),
                })?
            }
            AdminCommand::SetTier { agent_id, tier, .. } => {
                let patch = haggle_api::ProfilePatch::tier(tier);
                let agent = market::agents::update_profile(tx, agent_id, patch).await.map_err(describe)?;
                serde_json::json!({"agent": haggle_api::Agent::from(agent)})
            }
        };
        unit.commit().await?;
        println!("{}", serde_json::to_string_pretty(&printed)?);
        anyhow::Ok(())
    }
    .await;
    database.close().await;
    outcome
}

fn describe(error: market::Error) -> anyhow::Error {
    match error {
        market::Error::Rejected(rejection) => {
            let mut message = rejection.detail();
            if let Rejection::Validation(errors) = &rejection {
                for error in errors {
                    message.push_str(&format!("; {}: {}", error.field, error.message));
                }
            }
            anyhow::anyhow!(message)
        }
        market::Error::Database(error) => anyhow::Error::new(error),
        market::Error::OutcomeUnknown(error) => {
            anyhow::Error::new(error).context("the database did not confirm the change; check whether it was made")
        }
        market::Error::NeedsLocks => anyhow::anyhow!(market::Error::NeedsLocks.to_string()),
    }
}
