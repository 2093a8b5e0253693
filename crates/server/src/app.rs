//! Building and running the server: the API and its workers under one cancellation token.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::connections::{self, Limits};
use crate::deployment::Deployment;
use crate::events;
use crate::events::Hub;
use crate::http::{self, AppState, Settings};
use crate::market::{Batcher, Market, Wakeups};
use crate::webhooks::SealingKey;
use crate::{deliveries, executor, metrics, sweeper};
use metrics_exporter_prometheus::PrometheusHandle;

/// Rows handled per sweeper batch.
pub const SWEEP_BATCH: i64 = 500;
/// The `application_name` of the batcher's connections.
pub const MOVES_APPLICATION_NAME: &str = "haggle-moves";
/// How long a batcher's connection may have been idle and still be used without a ping.
pub const MOVES_PING_AFTER: Duration = Duration::from_millis(10);

/// This instance's API as the instance itself reaches it: the bound address, with a wildcard
/// (`0.0.0.0`, `::`) replaced by the loopback address of its family.
pub fn loopback_url(bound: SocketAddr) -> String {
    let ip = match bound.ip() {
        ip if !ip.is_unspecified() => ip,
        std::net::IpAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
        std::net::IpAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
    };
    format!("http://{}", SocketAddr::new(ip, bound.port()))
}

#[derive(Debug, Clone)]
pub struct AppConfig {
    pub settings: Settings,
    /// `Duration::ZERO` leaves the sweeper off (tests drive it with `run_once`).
    pub sweep_interval: Duration,
    /// `HAGGLE_SECRET_KEY`, if the operator set one.
    pub secret_key: Option<String>,
    /// How long events are kept; `Duration::ZERO` keeps them for ever.
    pub event_retention: Duration,
    /// How long after its fulfilment the sweeper completes an order its buyer left alone.
    pub order_complete_after: Duration,
    /// Auto-negotiation workers; `0` runs none on this instance.
    pub auto_workers: usize,
    /// The most moves one auto-negotiation transaction makes on a thread whose sides both have
    /// policies.
    pub auto_chain: usize,
    /// What a connection is allowed: how many at once, their deadlines, and the shutdown's.
    pub connections: Limits,
    /// The metrics and where `/metrics` is served.
    pub metrics: MetricsExport,
    /// The primary the pool follows, when `DATABASE_URL` names several hosts: the batcher's
    /// pool follows it too.
    pub primary: Option<crate::db::primary::Primary>,
}

/// This instance's metrics: off (no handle), on the main port behind the operator token, or
/// on an address of their own.
#[derive(Clone, Default)]
pub struct MetricsExport {
    pub handle: Option<PrometheusHandle>,
    /// Where `/metrics` is served without authentication instead of on the main port.
    pub bind: Option<String>,
}

impl std::fmt::Debug for MetricsExport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsExport").field("on", &self.handle.is_some()).field("bind", &self.bind).finish()
    }
}

pub struct App {
    listener: TcpListener,
    /// The separate metrics address's listener, when there is one.
    metrics_listener: Option<TcpListener>,
    pool: PgPool,
    config: AppConfig,
    hub: Arc<OnceLock<Hub>>,
}

impl App {
    /// Binds the listener (port 0 picks a free one) around an already migrated pool.
    pub async fn build(pool: PgPool, bind: &str, config: AppConfig) -> std::io::Result<App> {
        let listener = TcpListener::bind(bind).await?;
        let metrics_listener = match (&config.metrics.handle, &config.metrics.bind) {
            (Some(_), Some(address)) => Some(TcpListener::bind(address).await?),
            _ => None,
        };
        Ok(App { listener, metrics_listener, pool, config, hub: Arc::default() })
    }

    /// This instance's waiters (long polls, bid waits, streams), set once it serves: how a
    /// test knows that a waiter is waiting before it acts.
    pub fn hub(&self) -> Arc<OnceLock<Hub>> {
        self.hub.clone()
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("a bound listener has an address")
    }

    /// The separate metrics address, when there is one.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_listener.as_ref().map(|listener| listener.local_addr().expect("a bound listener has an address"))
    }

    /// Serves until `shutdown` is cancelled, then stops accepting, lets in-flight requests
    /// finish (streams and long polls end early) until the shutdown deadline closes what is
    /// left, and stops the workers.
    pub async fn run_until_stopped(self, shutdown: CancellationToken) -> std::io::Result<()> {
        let sealing_key = SealingKey::new(self.config.secret_key.as_deref());
        if !sealing_key.is_configured() {
            tracing::info!(
                "webhook secrets are sealed with a key kept in the database; set HAGGLE_SECRET_KEY to keep it apart"
            );
        }
        let wakeups = Wakeups::default();
        let webhook_settings = self.config.settings.webhooks.clone();
        let mut workers = tokio::task::JoinSet::new();
        // The batcher's connections are its own (a request waiting for its move holds one of the
        // pool's), three a worker, which makes its three kinds of move side by side. Their
        // statements' plans do not depend on their parameters (each field of the moves comes as
        // one array), so they run on their generic plans, never planned again. One idle for a
        // while is pinged before a statement: a statement sent on a connection that died while
        // idle would have an unknown outcome, where the ping's failure only costs another
        // connection. (Pinging every one cost W1 some 8 % of its calls a second.) They go by a
        // name of their own in pg_stat_activity.
        let move_workers = self.config.settings.move_workers.max(1);
        let mut batcher_options =
            crate::db::checked_pool_options(3 * move_workers as u32, MOVES_PING_AFTER).min_connections(0);
        if let Some(primary) = &self.config.primary {
            batcher_options = primary.checked(batcher_options);
        }
        let batcher_pool = batcher_options.connect_lazy_with(
            self.pool
                .connect_options()
                .as_ref()
                .clone()
                .options([("plan_cache_mode", "force_generic_plan")])
                .application_name(MOVES_APPLICATION_NAME),
        );
        if let Some(primary) = &self.config.primary {
            primary.attach(&batcher_pool);
        }
        let moves = Batcher::start(batcher_pool, move_workers, self.config.settings.live_cache, &mut workers);
        let market = Market::new(self.pool.clone(), Some(moves), wakeups.clone());
        // Workers make their moves under locks, one at a time: they need no batcher.
        let worker_market = Market::new(self.pool.clone(), None, wakeups.clone());
        let deployment = Deployment::new();
        workers.spawn(crate::deployment::run(self.pool.clone(), deployment.clone(), shutdown.clone()));
        let loopback = loopback_url(self.local_addr());
        let mut state =
            AppState::new(market, self.config.settings, sealing_key, shutdown.clone(), deployment, loopback);
        let _ = self.hub.set(state.hub.clone());
        if let Some(handle) = self.config.metrics.handle {
            workers.spawn(metrics::upkeep(handle.clone(), shutdown.clone()));
            match self.metrics_listener {
                Some(listener) => {
                    let router = http::observe::separate_router(handle, self.pool.clone());
                    let stop = shutdown.clone();
                    workers.spawn(async move {
                        let served = axum::serve(listener, router).with_graceful_shutdown(stop.cancelled_owned()).await;
                        if let Err(error) = served {
                            tracing::error!(%error, "serving metrics failed");
                        }
                    });
                }
                None => state.metrics = Some(handle),
            }
        }
        let deliveries_queued = Arc::new(Notify::new());
        workers.spawn(events::listener::run(
            self.pool.clone(),
            state.hub.clone(),
            deliveries_queued.clone(),
            wakeups.executor.clone(),
            state.keys.clone(),
            shutdown.clone(),
        ));
        workers.spawn(events::catch_up::run(
            self.pool.clone(),
            state.hub.clone(),
            state.settings.stream_recheck,
            shutdown.clone(),
        ));
        workers.spawn(events::announcer::run(
            self.pool.clone(),
            wakeups.announcer.clone(),
            state.hub.clone(),
            deliveries_queued.clone(),
            shutdown.clone(),
        ));
        if self.config.auto_workers > 0 {
            workers.spawn(executor::run(
                worker_market.clone(),
                state.settings.rules,
                self.config.auto_workers,
                self.config.auto_chain,
                shutdown.clone(),
            ));
        }
        workers.spawn(deliveries::run(
            worker_market.clone(),
            webhook_settings,
            state.sealing_key.clone(),
            deliveries_queued,
            shutdown.clone(),
        ));
        if !self.config.sweep_interval.is_zero() {
            workers.spawn(sweeper::run(
                worker_market,
                self.config.sweep_interval,
                SWEEP_BATCH,
                Some(self.config.event_retention).filter(|retention| !retention.is_zero()),
                self.config.order_complete_after,
                shutdown.clone(),
            ));
        }
        connections::serve(self.listener, http::router(state), self.config.connections, shutdown.clone()).await;
        shutdown.cancel();
        while workers.join_next().await.is_some() {}
        Ok(())
    }
}
