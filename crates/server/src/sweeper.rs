//! The expiry sweeper: PENDING bids past their deadline become EXPIRED with their threads, in
//! batches that skip rows another transaction holds. It also forgets idempotency records,
//! finished auto-negotiation tasks, quotes that ran out unbooked a week ago, and events and auto-negotiation decisions older than their
//! retention.

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use haggle_domain::bid::{self, Transition};

use crate::db;
use crate::events::{EventType, NewEvent};
use crate::market::Market;
use crate::metrics;

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcome {
    pub expired_bids: usize,
    pub purged_idempotency_keys: u64,
    pub purged_tasks: u64,
    pub purged_quotes: u64,
    /// Approval requests whose time ran out unanswered.
    pub expired_approvals: usize,
}

impl Outcome {
    fn is_full(&self, batch: i64) -> bool {
        self.expired_bids as i64 >= batch
            || self.purged_idempotency_keys as i64 >= batch
            || self.purged_tasks as i64 >= batch
            || self.purged_quotes as i64 >= batch
            || self.expired_approvals as i64 >= batch
    }
}

/// How long a finished auto-negotiation task is kept, as a record of when its bid was decided.
pub const DONE_TASK_KEEP: Duration = Duration::from_secs(3600);

/// How long a quote that ran out unbooked is kept, for a buyer that comes back to it.
pub const EXPIRED_QUOTE_KEEP: Duration = Duration::from_secs(7 * 24 * 3600);

/// One batch of each kind of clean-up. The expiries' events are written with them, and
/// announced when each unit commits.
pub async fn run_once(market: &Market, batch: i64) -> Result<Outcome, sqlx::Error> {
    let pool = market.pool();
    let mut unit = market.begin().await?;
    let (conn, events) = unit.parts();
    let due = db::sweeps::lock_due(&mut *conn, batch).await?;
    // Expiry is the state machine's decision, here as wherever else a bid expires.
    let expiring: Vec<_> = due
        .iter()
        .filter(|due| bid::expire(due.status, due.expires_at, due.db_now) == Ok(Transition::Expire))
        .map(|due| due.bid_id)
        .collect();
    let expired = db::sweeps::end_threads(conn, &expiring, Transition::Expire).await?;
    for (bid, thread) in &expired {
        events.push(NewEvent::bid(bid, thread));
    }
    let expired_approvals = db::approvals::expire_due(conn, batch).await?;
    for approval in &expired_approvals {
        events.push(crate::market::approvals::event(EventType::ApprovalExpired, approval));
    }
    unit.commit().await?;
    metrics::expiry_sweep(expired.len());
    let purged = db::idempotency::purge_expired(pool, batch).await?;
    let purged_tasks = db::tasks::purge_done_tasks(pool, before(DONE_TASK_KEEP), batch).await?;
    let purged_quotes = db::quotes::purge_unbooked(pool, before(EXPIRED_QUOTE_KEEP), batch).await?;
    Ok(Outcome {
        expired_bids: expired.len(),
        purged_idempotency_keys: purged,
        purged_tasks,
        purged_quotes,
        expired_approvals: expired_approvals.len(),
    })
}

/// The instant `age` ago (nothing is older than 1970, should `age` reach back further).
fn before(age: Duration) -> chrono::DateTime<chrono::Utc> {
    chrono::Duration::from_std(age)
        .ok()
        .and_then(|age| chrono::Utc::now().checked_sub_signed(age))
        .map_or(chrono::DateTime::UNIX_EPOCH, |at| at.max(chrono::DateTime::UNIX_EPOCH))
}

/// Completes up to `batch` orders fulfilled at least `complete_after` ago that their buyers
/// left alone, in one unit of work with their `order.completed` events. Returns how many.
pub async fn complete_orders(market: &Market, complete_after: Duration, batch: i64) -> Result<usize, sqlx::Error> {
    let mut unit = market.begin().await?;
    let (conn, events) = unit.parts();
    let completed = crate::market::orders::complete_due(conn, events, before(complete_after), batch).await?;
    unit.commit().await?;
    Ok(completed)
}

/// Raises `payment.overdue` for up to `batch` installments of agreed plans past their due date
/// and not covered by confirmed payments: each once, recorded with its event in one unit of
/// work. Returns how many.
pub async fn raise_overdue(market: &Market, batch: i64) -> Result<usize, sqlx::Error> {
    let mut unit = market.begin().await?;
    let (conn, events) = unit.parts();
    let overdue = db::orders::record_overdue(conn, batch).await?;
    for installment in &overdue {
        events.push(NewEvent::installment_overdue(&installment.order, installment.seq));
    }
    unit.commit().await?;
    Ok(overdue.len())
}

/// Deletes up to `batch` events older than `retention`, with their inboxes and webhook
/// deliveries, and up to `batch` auto-negotiation decisions as old in ended threads. Returns
/// how many of each went.
pub async fn purge_events(pool: &PgPool, retention: Duration, batch: i64) -> Result<(u64, u64), sqlx::Error> {
    let events = db::events::purge_before(pool, before(retention), batch).await?;
    let decisions = db::tasks::purge_decisions(pool, before(retention), batch).await?;
    Ok((events, decisions))
}

/// Sweeps every `interval` until cancelled, and again at once after a full batch. Orders
/// fulfilled `order_complete_after` ago are completed on the same rhythm, and with an
/// `event_retention`, older events are purged.
pub async fn run(
    market: Market,
    interval: Duration,
    batch: i64,
    event_retention: Option<Duration>,
    order_complete_after: Duration,
    shutdown: CancellationToken,
) {
    tracing::info!(?interval, batch, ?event_retention, "expiry sweeper started");
    loop {
        let mut pause = match run_once(&market, batch).await {
            Ok(outcome) => {
                if outcome.expired_bids > 0 {
                    tracing::info!(expired_bids = outcome.expired_bids, "expired bids swept");
                }
                if outcome.is_full(batch) { Duration::ZERO } else { interval }
            }
            Err(error) => {
                tracing::warn!(%error, "expiry sweep failed; retrying after the interval");
                interval
            }
        };
        match complete_orders(&market, order_complete_after, batch).await {
            Ok(completed) if completed as i64 >= batch => pause = Duration::ZERO,
            Ok(completed) if completed > 0 => tracing::info!(completed, "fulfilled orders completed"),
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "completing fulfilled orders failed; retrying after the interval"),
        }
        match raise_overdue(&market, batch).await {
            Ok(raised) if raised as i64 >= batch => pause = Duration::ZERO,
            Ok(raised) if raised > 0 => tracing::info!(raised, "overdue installments raised"),
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "raising overdue installments failed; retrying after the interval"),
        }
        if let Some(retention) = event_retention {
            match purge_events(market.pool(), retention, batch).await {
                Ok((events, decisions)) if events.max(decisions) as i64 >= batch => pause = Duration::ZERO,
                Ok((events, decisions)) if events + decisions > 0 => {
                    tracing::info!(events, decisions, "events and decisions past their retention purged");
                }
                Ok(_) => {}
                Err(error) => tracing::warn!(%error, "purging old events failed; retrying after the interval"),
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(pause) => {}
        }
    }
    tracing::info!("expiry sweeper stopped");
}
