//! Building and running the server: the API and its workers under one cancellation token.

use std::net::SocketAddr;
use std::time::Duration;

use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::http::{self, AppState, Settings};
use crate::jobs;

/// Rows handled per sweeper batch.
pub const SWEEP_BATCH: i64 = 500;

#[derive(Debug, Clone)]
pub struct AppConfig {
    pub settings: Settings,
    /// `Duration::ZERO` leaves the sweeper off (tests drive it with `run_once`).
    pub sweep_interval: Duration,
}

pub struct App {
    listener: TcpListener,
    pool: PgPool,
    config: AppConfig,
}

impl App {
    /// Binds the listener (port 0 picks a free one) around an already migrated pool.
    pub async fn build(pool: PgPool, bind: &str, config: AppConfig) -> std::io::Result<App> {
        let listener = TcpListener::bind(bind).await?;
        Ok(App { listener, pool, config })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("a bound listener has an address")
    }

    /// Serves until `shutdown` is cancelled, then stops accepting, lets in-flight requests
    /// finish, and stops the workers.
    pub async fn run_until_stopped(self, shutdown: CancellationToken) -> std::io::Result<()> {
        let state = AppState::new(self.pool.clone(), self.config.settings);
        let mut workers = tokio::task::JoinSet::new();
        if !self.config.sweep_interval.is_zero() {
            workers.spawn(jobs::expiry::run(
                self.pool.clone(),
                self.config.sweep_interval,
                SWEEP_BATCH,
                shutdown.clone(),
            ));
        }
        let service = http::router(state).into_make_service_with_connect_info::<SocketAddr>();
        let served =
            axum::serve(self.listener, service).with_graceful_shutdown(shutdown.clone().cancelled_owned()).await;
        shutdown.cancel();
        while workers.join_next().await.is_some() {}
        served
    }
}
