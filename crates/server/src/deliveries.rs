//! The delivery worker: claims due deliveries, posts each event signed to its webhook, and
//! records every attempt.
//!
//! Claiming is one statement that picks due deliveries of active webhooks with
//! `FOR UPDATE SKIP LOCKED` and pushes their `next_attempt_at` a lease ahead (the attempt
//! timeout plus a margin), committing at once: no transaction stays open while a receiver is
//! called, workers on several instances never take the same delivery while its lease lasts, and a
//! delivery whose worker died before recording its attempt is due again when the lease ends.
//! Delivery is therefore at least once: a receiver may see an event again, under the same
//! `Haggle-Event-Id` and `Haggle-Delivery-Id`.
//!
//! An attempt's outcome is recorded in one transaction: the attempt's log row, then success,
//! the next retry (the schedule's pause with ±20 % jitter), or, once the schedule has run out,
//! the delivery FAILED, its webhook DISABLED and a `webhook.disabled` event for the owner.
//!
//! The worker looks for due deliveries every [`POLL_INTERVAL`], and also as soon as deliveries
//! are queued on any instance (this instance's announcer, or its event listener for another
//! instance's), or an attempt frees a slot.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use serde_json::json;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use url::Url;

use crate::db;
use crate::db::webhooks::Claimed;
use crate::events::{EventType, NewEvent};
use crate::market::Market;
use crate::metrics;
use crate::secrets;
use crate::webhooks::target::{self, GuardedResolver};
use crate::webhooks::{DeliveryStatus, SealingKey, WebhookSettings, signature};

/// Added to the attempt timeout to make a claim's lease: time to record the outcome.
pub const LEASE_MARGIN: Duration = Duration::from_secs(5);
/// How often an idle worker looks for due deliveries.
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// The pause after the database failed the worker.
const ERROR_PAUSE: Duration = Duration::from_secs(1);
/// The most of an error message kept with an attempt.
const MAX_ERROR_CHARS: usize = 500;

pub const USER_AGENT: &str = concat!("Haggle-Webhooks/", env!("CARGO_PKG_VERSION"));

/// What became of one claimed delivery.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Outcome {
    Succeeded,
    /// Failed; tried again after this pause.
    Retrying(Duration),
    /// Failed for the last time; the webhook was disabled (unless it already was).
    GaveUp,
    /// Another worker settled it first, or its webhook was deleted meanwhile.
    Settled,
}

impl Outcome {
    /// The outcome as the metrics name it.
    fn label(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Retrying(_) => "retrying",
            Outcome::GaveUp => "gave_up",
            Outcome::Settled => "settled",
        }
    }
}

/// The pause before the next attempt after `attempts` failed ones, or `None` when the
/// schedule has run out. `jitter` scales the pause (the worker draws it from [0.8, 1.2]).
pub fn pause_after(attempts: i32, schedule: &[Duration], jitter: f64) -> Option<Duration> {
    let index = usize::try_from(attempts).ok()?.checked_sub(1)?;
    schedule.get(index).map(|pause| pause.mul_f64(jitter))
}

/// A factor drawn uniformly from [0.8, 1.2].
fn jitter() -> f64 {
    let draw = u64::from_le_bytes(secrets::random_bytes::<8>());
    0.8 + 0.4 * (draw as f64 / u64::MAX as f64)
}

/// What one attempt got: the receiver's status, or why there was none.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Answer {
    status: Option<u16>,
    error: Option<String>,
}

impl Answer {
    fn failed(error: impl Into<String>) -> Answer {
        Answer { status: None, error: Some(truncate(error.into())) }
    }

    fn succeeded(&self) -> bool {
        self.status.is_some_and(|status| (200..300).contains(&status))
    }

    fn describe(&self) -> String {
        match (&self.status, &self.error) {
            (_, Some(error)) => error.clone(),
            (Some(status), None) => format!("HTTP {status}"),
            (None, None) => "no answer".to_owned(),
        }
    }
}

fn truncate(mut text: String) -> String {
    if let Some((cut, _)) = text.char_indices().nth(MAX_ERROR_CHARS) {
        text.truncate(cut);
        text.push('…');
    }
    text
}

/// Describes a failed request without its URL (whose query may hold a token of the receiver's).
fn describe_error(error: &reqwest::Error, timeout: Duration) -> String {
    if error.is_timeout() {
        return format!("no answer within {} ms", timeout.as_millis());
    }
    let mut text = if error.is_connect() { "could not connect" } else { "the request failed" }.to_owned();
    let mut source = std::error::Error::source(error);
    let mut last = String::new();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if cause_text != last {
            text.push_str(": ");
            text.push_str(&cause_text);
            last = cause_text;
        }
        source = cause.source();
    }
    text
}

/// The host a URL points at, for logs (never the path or query).
fn host_of(url: &str) -> String {
    Url::parse(url).ok().and_then(|url| url.host_str().map(str::to_owned)).unwrap_or_else(|| "?".to_owned())
}

/// Delivers webhooks: everything but the scheduling loop, so that tests can drive it.
pub struct Deliverer {
    market: Market,
    settings: WebhookSettings,
    sealing_key: SealingKey,
    client: reqwest::Client,
}

impl Deliverer {
    pub fn new(
        market: Market,
        settings: WebhookSettings,
        sealing_key: SealingKey,
    ) -> Result<Deliverer, reqwest::Error> {
        let client = reqwest::Client::builder()
            .timeout(settings.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .user_agent(USER_AGENT)
            .dns_resolver(Arc::new(GuardedResolver { allow_private: settings.allow_private }))
            .build()?;
        Ok(Deliverer { market, settings, sealing_key, client })
    }

    /// How far ahead a claim pushes a delivery.
    pub fn lease(&self) -> Duration {
        self.settings.timeout + LEASE_MARGIN
    }

    /// Claims up to `limit` due deliveries.
    pub async fn claim(&self, limit: usize) -> Result<Vec<Claimed>, sqlx::Error> {
        let mut unit = self.market.begin().await?;
        let claimed = db::webhooks::claim_due(unit.conn(), limit as i64, self.lease()).await?;
        unit.commit().await?;
        Ok(claimed)
    }

    /// Claims one batch and delivers it, all at once; returns the outcomes.
    pub async fn run_once(self: &Arc<Self>) -> Result<Vec<Outcome>, sqlx::Error> {
        let mut attempts = JoinSet::new();
        for claimed in self.claim(self.settings.concurrency).await? {
            let deliverer = self.clone();
            attempts.spawn(async move { deliverer.deliver(claimed).await });
        }
        let mut outcomes = Vec::new();
        while let Some(done) = attempts.join_next().await {
            outcomes.push(done.expect("a delivery attempt panicked")?);
        }
        Ok(outcomes)
    }

    /// Makes one attempt at a claimed delivery and records it.
    pub async fn deliver(&self, claimed: Claimed) -> Result<Outcome, sqlx::Error> {
        let started_at = Utc::now();
        let clock = Instant::now();
        let answer = self.attempt(&claimed).await?;
        let duration_ms = i32::try_from(clock.elapsed().as_millis()).unwrap_or(i32::MAX);
        let attempt = claimed.attempts + 1;
        let host = host_of(&claimed.url);
        if answer.succeeded() {
            tracing::info!(delivery_id = %claimed.id, webhook_id = %claimed.webhook_id, event_id = claimed.event_id,
                attempt, %host, status = answer.status, duration_ms, "webhook delivered");
        } else {
            tracing::info!(delivery_id = %claimed.id, webhook_id = %claimed.webhook_id, event_id = claimed.event_id,
                attempt, %host, outcome = %answer.describe(), duration_ms, "webhook attempt failed");
        }
        let outcome = self.record(&claimed, started_at, duration_ms, &answer).await?;
        metrics::webhook_delivery(outcome.label());
        Ok(outcome)
    }

    /// Posts the event. Only the database failing is an error; everything else is an answer.
    async fn attempt(&self, claimed: &Claimed) -> Result<Answer, sqlx::Error> {
        let Some(event) = db::events::get(self.market.pool(), claimed.event_id, claimed.agent_id).await? else {
            return Ok(Answer::failed("the event no longer exists"));
        };
        let sealing_key = self.sealing_key.get(self.market.pool()).await?;
        let Some(secret) = secrets::open(&sealing_key, &claimed.secret_sealed) else {
            return Ok(Answer::failed(
                "the webhook's secret cannot be unsealed (was the server's secret key changed?); create a new webhook",
            ));
        };
        let Ok(secret) = String::from_utf8(secret) else {
            return Ok(Answer::failed("the webhook's secret is damaged; create a new webhook"));
        };
        let url = match Url::parse(&claimed.url) {
            Ok(url) => url,
            Err(_) => return Ok(Answer::failed("the webhook's URL cannot be read")),
        };
        if !self.settings.allow_private && target::internal_literal(&url).is_some() {
            return Ok(Answer::failed("refused: the URL points at an internal address"));
        }
        let body = serde_json::to_vec(&event).expect("events serialize to JSON");
        let signed = signature::sign(&secret, Utc::now().timestamp(), &body);
        let request = self
            .client
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("Haggle-Event-Id", event.id.to_string())
            .header("Haggle-Delivery-Id", claimed.id.to_string())
            .header(signature::HEADER, signed)
            .body(body)
            .send();
        // The client's own timeout covers the whole exchange; this only guards against a stall
        // outside it.
        let answer = match tokio::time::timeout(self.settings.timeout + Duration::from_secs(1), request).await {
            Ok(Ok(response)) => Answer { status: Some(response.status().as_u16()), error: None },
            Ok(Err(error)) => Answer::failed(describe_error(&error, self.settings.timeout)),
            Err(_) => Answer::failed(format!("no answer within {} ms", self.settings.timeout.as_millis())),
        };
        Ok(answer)
    }

    /// Records the attempt and what follows from it, in one transaction.
    async fn record(
        &self,
        claimed: &Claimed,
        started_at: chrono::DateTime<Utc>,
        duration_ms: i32,
        answer: &Answer,
    ) -> Result<Outcome, sqlx::Error> {
        let mut unit = self.market.begin().await?;
        let (tx, events) = unit.parts();
        if !answer.succeeded() {
            // A failure may disable the webhook: its row is locked before the delivery's, the
            // order a concurrent DELETE of the webhook takes them in.
            db::webhooks::lock_for_outcome(&mut *tx, claimed.webhook_id).await?;
        }
        let status = answer.status.map(i32::from);
        let recorded = db::webhooks::record_attempt(
            &mut *tx,
            claimed.id,
            started_at,
            duration_ms,
            status,
            answer.error.as_deref(),
        )
        .await?;
        let Some(recorded) = recorded else {
            return Ok(Outcome::Settled);
        };
        let outcome = match recorded.status {
            // A worker whose lease ran out may find the delivery settled by the next one.
            DeliveryStatus::Succeeded | DeliveryStatus::Failed => Outcome::Settled,
            DeliveryStatus::Pending if answer.succeeded() => {
                db::webhooks::finish(&mut *tx, claimed.id, DeliveryStatus::Succeeded, claimed.lease_until).await?;
                Outcome::Succeeded
            }
            DeliveryStatus::Pending => match pause_after(recorded.attempts, &self.settings.retry_schedule, jitter()) {
                Some(pause) => {
                    if db::webhooks::retry_after(&mut *tx, claimed.id, pause, claimed.lease_until).await? {
                        Outcome::Retrying(pause)
                    } else {
                        // The lease ran out and another worker holds the delivery now.
                        Outcome::Settled
                    }
                }
                None if !db::webhooks::finish(&mut *tx, claimed.id, DeliveryStatus::Failed, claimed.lease_until)
                    .await? =>
                {
                    Outcome::Settled
                }
                None => {
                    let reason = truncate(format!(
                        "delivery {} (event {}) failed {} times; the last attempt: {}",
                        claimed.id,
                        claimed.event_id,
                        recorded.attempts,
                        answer.describe()
                    ));
                    if let Some(webhook) = db::webhooks::disable(&mut *tx, claimed.webhook_id, &reason).await? {
                        tracing::warn!(webhook_id = %webhook.id, delivery_id = %claimed.id,
                            attempts = recorded.attempts, "webhook disabled: its retries ran out");
                        events.push(NewEvent::private(
                            EventType::WebhookDisabled,
                            claimed.agent_id,
                            json!({ "webhook": haggle_api::Webhook::from(webhook) }),
                        ));
                    }
                    Outcome::GaveUp
                }
            },
        };
        unit.commit().await?;
        Ok(outcome)
    }
}

/// Delivers due webhook deliveries until cancelled. `wake` is notified (by the instance's
/// event listener) when deliveries are queued on any instance.
pub async fn run(
    market: Market,
    settings: WebhookSettings,
    sealing_key: SealingKey,
    wake: Arc<Notify>,
    shutdown: CancellationToken,
) {
    let concurrency = settings.concurrency.max(1);
    let timeout = settings.timeout;
    let deliverer = match Deliverer::new(market, settings, sealing_key) {
        Ok(deliverer) => Arc::new(deliverer),
        Err(error) => {
            tracing::error!(%error, "cannot build the webhook client; webhooks will not be delivered");
            shutdown.cancelled().await;
            return;
        }
    };
    tracing::info!(concurrency, ?timeout, lease = ?deliverer.lease(), "webhook worker started");
    let mut in_flight: JoinSet<()> = JoinSet::new();
    loop {
        let free = concurrency - in_flight.len();
        let mut pause = POLL_INTERVAL;
        if free > 0 {
            match deliverer.claim(free).await {
                Ok(claimed) => {
                    for claimed in claimed {
                        let deliverer = deliverer.clone();
                        in_flight.spawn(async move {
                            let delivery_id = claimed.id;
                            if let Err(error) = deliverer.deliver(claimed).await {
                                // The lease runs out and the delivery is tried again.
                                tracing::warn!(%error, %delivery_id, "recording a webhook attempt failed");
                            }
                        });
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "claiming webhook deliveries failed; retrying");
                    pause = ERROR_PAUSE;
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = wake.notified() => {}
            Some(_) = in_flight.join_next(), if !in_flight.is_empty() => {}
            _ = tokio::time::sleep(pause) => {}
        }
    }
    // Attempts under way are given their timeout to finish and be recorded; any cut short is
    // retried by another worker when its lease ends.
    let drain = async { while in_flight.join_next().await.is_some() {} };
    if tokio::time::timeout(timeout + Duration::from_secs(1), drain).await.is_err() {
        in_flight.abort_all();
    }
    tracing::info!("webhook worker stopped");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_follow_the_schedule_then_run_out() {
        let schedule = [Duration::from_secs(10), Duration::from_secs(30), Duration::from_secs(120)];
        assert_eq!(pause_after(1, &schedule, 1.0), Some(Duration::from_secs(10)));
        assert_eq!(pause_after(3, &schedule, 1.0), Some(Duration::from_secs(120)));
        assert_eq!(pause_after(4, &schedule, 1.0), None);
        assert_eq!(pause_after(0, &schedule, 1.0), None);
        assert_eq!(pause_after(-1, &schedule, 1.0), None);
        assert_eq!(pause_after(1, &[], 1.0), None);
        assert_eq!(pause_after(2, &schedule, 0.8), Some(Duration::from_secs(24)));
        assert_eq!(pause_after(2, &schedule, 1.2), Some(Duration::from_secs(36)));
    }

    #[test]
    fn jitter_stays_within_a_fifth() {
        for _ in 0..1000 {
            let factor = jitter();
            assert!((0.8..=1.2).contains(&factor), "{factor}");
        }
    }

    #[test]
    fn long_errors_are_cut() {
        let cut = truncate("é".repeat(2000));
        assert_eq!(cut.chars().count(), MAX_ERROR_CHARS + 1);
        assert_eq!(truncate("short".into()), "short");
    }

    #[test]
    fn answers_describe_themselves() {
        assert!(Answer { status: Some(204), error: None }.succeeded());
        assert!(!Answer { status: Some(301), error: None }.succeeded());
        assert_eq!(Answer { status: Some(500), error: None }.describe(), "HTTP 500");
        assert_eq!(Answer::failed("could not connect").describe(), "could not connect");
        assert_eq!(host_of("https://hooks.example.com/x?token=secret"), "hooks.example.com");
    }
}
