//! Prometheus metrics: every name, label and unit in one place, recorded through the `metrics`
//! facade into this process's recorder and rendered as the Prometheus text format.
//!
//! `haggle serve` installs the recorder ([`install`]) unless `HAGGLE_METRICS=off`; without one,
//! nothing is recorded and the call sites cost a branch. To add a metric: its name as a
//! constant below, its description in [`describe`], and a function here that records it, which
//! the site calls in one line. Gauges that describe a state rather than count happenings (the
//! pool, the webhook backlog) are read when scraped ([`sample`]).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ::metrics::{Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};
use axum::http::{Method, StatusCode};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use sqlx::PgPool;

pub const HTTP_REQUESTS: &str = "haggle_http_requests_total";
pub const HTTP_REQUEST_DURATION: &str = "haggle_http_request_duration_seconds";
pub const MOVES: &str = "haggle_moves_total";
pub const MOVE_BATCH_SIZE: &str = "haggle_move_batch_size";
pub const MOVE_READS: &str = "haggle_move_reads_total";
pub const MOVE_ROUND_DURATION: &str = "haggle_move_round_duration_seconds";
pub const EVENTS_PUBLISHED: &str = "haggle_events_published_total";
pub const EXECUTOR_LAG: &str = "haggle_executor_lag_seconds";
pub const EXECUTOR_DECISIONS: &str = "haggle_executor_decisions_total";
pub const WEBHOOK_DELIVERIES: &str = "haggle_webhook_deliveries_total";
pub const WEBHOOK_BACKLOG: &str = "haggle_webhook_backlog";
pub const WEBHOOK_OLDEST_PENDING_AGE: &str = "haggle_webhook_oldest_pending_age_seconds";
pub const EXPIRY_SWEEPS: &str = "haggle_expiry_sweeps_total";
pub const EXPIRED_BIDS: &str = "haggle_expired_bids_total";
pub const DB_POOL_CONNECTIONS: &str = "haggle_db_pool_connections";
pub const DB_POOL_WAITING: &str = "haggle_db_pool_waiting";
pub const OPEN_LONG_POLLS: &str = "haggle_open_long_polls";
pub const OPEN_STREAMS: &str = "haggle_open_streams";
pub const RATE_LIMITED: &str = "haggle_rate_limited_total";

/// Buckets of the durations and lags, in seconds: half a millisecond to a minute.
const SECONDS: &[f64] =
    &[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];
/// Buckets of the moves a statement makes (at most the batcher's largest round).
const BATCH_SIZES: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0];
/// How often histograms' samples are folded into their buckets between scrapes.
pub const UPKEEP: Duration = Duration::from_secs(5);

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
/// Whether this process records: checked first at the busiest sites, so that turning metrics
/// off costs them nothing more.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Installs this process's recorder (once; later calls return the same handle).
pub fn install() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets(SECONDS)
                .and_then(|builder| builder.set_buckets_for_metric(Matcher::Full(MOVE_BATCH_SIZE.into()), BATCH_SIZES))
                .expect("the buckets are valid")
                .build_recorder();
            let handle = recorder.handle();
            if ::metrics::set_global_recorder(recorder).is_ok() {
                ENABLED.store(true, Ordering::Relaxed);
                describe();
            } else {
                tracing::warn!("another metrics recorder is installed in this process; /metrics shows nothing");
            }
            handle
        })
        .clone()
}

pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

fn describe() {
    describe_counter!(HTTP_REQUESTS, "HTTP requests answered, by route template, method and status");
    describe_histogram!(HTTP_REQUEST_DURATION, Unit::Seconds, "Time to answer a request (to its head, for a stream)");
    describe_counter!(MOVES, "Moves written by the market, by kind and outcome");
    describe_histogram!(MOVE_BATCH_SIZE, "Unlocked moves made in one statement");
    describe_counter!(
        MOVE_READS,
        "What unlocked moves were decided on, by kind and source: this instance's memory or a read"
    );
    describe_histogram!(MOVE_ROUND_DURATION, Unit::Seconds, "Time the move worker took for one round of statements");
    describe_counter!(EVENTS_PUBLISHED, "Events committed by this instance");
    describe_histogram!(EXECUTOR_LAG, Unit::Seconds, "From a bid's commit (its task due) to its policy's decision");
    describe_counter!(EXECUTOR_DECISIONS, "Policy tasks decided, by outcome");
    describe_counter!(WEBHOOK_DELIVERIES, "Webhook delivery attempts, by outcome");
    describe_gauge!(WEBHOOK_BACKLOG, "Webhook deliveries pending over the deployment");
    describe_gauge!(WEBHOOK_OLDEST_PENDING_AGE, Unit::Seconds, "Age of the oldest pending webhook delivery");
    describe_counter!(EXPIRY_SWEEPS, "Passes of the expiry sweeper");
    describe_counter!(EXPIRED_BIDS, "Bids the sweeper expired");
    describe_gauge!(DB_POOL_CONNECTIONS, "The pool's database connections, by state");
    describe_gauge!(DB_POOL_WAITING, "Units of work waiting for a connection from the pool");
    describe_gauge!(OPEN_LONG_POLLS, "Long polls (events and bid waits) open on this instance");
    describe_gauge!(OPEN_STREAMS, "Event streams open on this instance");
    describe_counter!(RATE_LIMITED, "Requests refused by a rate limit, by scope");
}

/// Folds histograms' samples into their buckets, every [`UPKEEP`] until cancelled.
pub async fn upkeep(handle: PrometheusHandle, shutdown: tokio_util::sync::CancellationToken) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(UPKEEP) => handle.run_upkeep(),
        }
    }
}

/// Reads the gauges that describe a state, then renders every metric.
pub async fn sample(handle: &PrometheusHandle, pool: &PgPool) -> String {
    let idle = pool.num_idle() as f64;
    gauge!(DB_POOL_CONNECTIONS, "state" => "idle").set(idle);
    gauge!(DB_POOL_CONNECTIONS, "state" => "in_use").set((f64::from(pool.size()) - idle).max(0.0));
    match crate::db::webhooks::backlog(pool).await {
        Ok((pending, oldest)) => {
            gauge!(WEBHOOK_BACKLOG).set(pending as f64);
            gauge!(WEBHOOK_OLDEST_PENDING_AGE).set(oldest);
        }
        Err(error) => tracing::warn!(%error, "reading the webhook backlog for /metrics failed"),
    }
    handle.render()
}

/// The content type of the text format.
pub const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Counts an answered request and its time. Every label is from a closed set, whatever the
/// request: `route` is a route's template or `unmatched` (the caller's), `method` one of the
/// standard methods or `other`, `status` a standard status or its class (`5xx`).
pub fn http_request(route: &str, method: &Method, status: StatusCode, started: Instant) {
    let route = route.to_owned();
    let method = method_label(method);
    histogram!(HTTP_REQUEST_DURATION, "route" => route.clone(), "method" => method)
        .record(started.elapsed().as_secs_f64());
    counter!(HTTP_REQUESTS, "route" => route, "method" => method, "status" => status_label(status)).increment(1);
}

/// A request's method as a label: the standard methods by name, any other as `other`.
fn method_label(method: &Method) -> &'static str {
    const STANDARD: [Method; 9] = [
        Method::GET,
        Method::HEAD,
        Method::POST,
        Method::PUT,
        Method::PATCH,
        Method::DELETE,
        Method::OPTIONS,
        Method::CONNECT,
        Method::TRACE,
    ];
    STANDARD.iter().find(|standard| *standard == method).map_or("other", Method::as_str)
}

/// A status as a label: a standard status by its number, any other by its class.
fn status_label(status: StatusCode) -> String {
    match status.canonical_reason() {
        Some(_) => status.as_str().to_owned(),
        None => format!("{}xx", status.as_u16() / 100),
    }
}

/// Counts a move written (or not) by the market: `kind` is `place`, `counter`, `accept`,
/// `reject` or `withdraw`; `outcome` one of [`MoveOutcome`].
pub fn move_made(kind: &'static str, outcome: MoveOutcome) {
    counter!(MOVES, "kind" => kind, "outcome" => outcome.as_str()).increment(1);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveOutcome {
    Made,
    /// Its compare-and-set failed: another move came first.
    Lost,
    /// Unlocked, it could not be made without locks and is made again under them (counted again).
    Retried,
    /// Its statement's connection was lost after sending: whether it was made is unknown.
    Unknown,
}

impl MoveOutcome {
    fn as_str(self) -> &'static str {
        match self {
            MoveOutcome::Made => "made",
            MoveOutcome::Lost => "lost",
            MoveOutcome::Retried => "retried",
            MoveOutcome::Unknown => "unknown",
        }
    }
}

/// Records what an unlocked move of `kind` was decided on: what this instance remembered of
/// it (`remembered`), or a read of the database.
pub fn move_read(kind: &'static str, remembered: bool) {
    counter!(MOVE_READS, "kind" => kind, "source" => if remembered { "memory" } else { "database" }).increment(1);
}

/// Records one statement of unlocked moves.
pub fn move_batch(moves: usize) {
    histogram!(MOVE_BATCH_SIZE).record(moves as f64);
}

/// Records one round of the move worker.
pub fn move_round(started: Instant) {
    histogram!(MOVE_ROUND_DURATION).record(started.elapsed().as_secs_f64());
}

/// Counts events this instance committed.
pub fn events_written(count: u64) {
    if enabled() {
        counter!(EVENTS_PUBLISHED).increment(count);
    }
}

/// Records a policy's decision: `waited` is how long its task had been due when taken,
/// `taken` when it was.
pub fn executor_decided(outcome: &'static str, waited: f64, taken: Instant) {
    histogram!(EXECUTOR_LAG).record(waited.max(0.0) + taken.elapsed().as_secs_f64());
    counter!(EXECUTOR_DECISIONS, "outcome" => outcome).increment(1);
}

/// Counts a webhook delivery attempt: `succeeded`, `retrying`, `gave_up` or `settled`.
pub fn webhook_delivery(outcome: &'static str) {
    counter!(WEBHOOK_DELIVERIES, "outcome" => outcome).increment(1);
}

/// Counts a pass of the expiry sweeper and the bids it expired.
pub fn expiry_sweep(expired: usize) {
    counter!(EXPIRY_SWEEPS).increment(1);
    counter!(EXPIRED_BIDS).increment(expired as u64);
}

/// Counts a request refused by a limit: `agent` (requests an agent makes), `registration`
/// (per address), `failed_auth` (wrong credentials per address) or `waiters` (an agent's long
/// polls and streams).
pub fn rate_limited(scope: &'static str) {
    counter!(RATE_LIMITED, "scope" => scope).increment(1);
}

/// A gauge raised while the value lives: an open long poll, stream, or wait for a connection.
#[must_use]
pub struct Open(Option<&'static str>);

impl Open {
    fn new(name: &'static str) -> Open {
        if !enabled() {
            return Open(None);
        }
        gauge!(name).increment(1.0);
        Open(Some(name))
    }

    pub fn long_poll() -> Open {
        Open::new(OPEN_LONG_POLLS)
    }

    pub fn stream() -> Open {
        Open::new(OPEN_STREAMS)
    }

    /// A unit of work waiting for one of the pool's connections.
    pub fn pool_wait() -> Open {
        Open::new(DB_POOL_WAITING)
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        if let Some(name) = self.0 {
            gauge!(name).decrement(1.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_and_statuses_are_labelled_from_closed_sets() {
        assert_eq!(method_label(&Method::PATCH), "PATCH");
        for invented in ["FOO", "get", "X-INVENTED-0001", &"M".repeat(2000)] {
            assert_eq!(method_label(&Method::from_bytes(invented.as_bytes()).unwrap()), "other", "{invented}");
        }
        assert_eq!(status_label(StatusCode::NOT_FOUND), "404");
        assert_eq!(status_label(StatusCode::from_u16(599).unwrap()), "5xx");
        assert_eq!(status_label(StatusCode::from_u16(999).unwrap()), "9xx");
    }
}
