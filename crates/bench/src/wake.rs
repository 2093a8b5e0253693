//! `haggle bench --workload wake`: how soon a waiter on one server instance hears of a change
//! made through another.
//!
//! One buyer and one seller negotiate on a listing. Each trial: the buyer starts two waiters on
//! instance A (`GET /v1/bids/{id}?wait=` on its pending bid, and `GET /v1/events?after=&wait=`),
//! lets them settle, then the seller counters through instance B. A trial records, for each
//! waiter, the time from sending the counter to the waiter's answer, and from the counter's
//! answer (its transaction has committed by then) to the waiter's answer; the true
//! commit-to-wake latency lies between the two. Then the buyer counters back (untimed), and
//! the next trial waits on that bid.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use uuid::Uuid;

use super::api;
use super::report::yes_no;
use super::stats::percentile;
use haggle_client::{Client, CounterOffer, EventQuery, NewListing, Placement};
use haggle_domain::BidStatus;

/// The listing's round limit: a thread carries this many bids before a new one is needed.
const MAX_ROUNDS: u64 = 100;
/// How long, in seconds, a waiter asks the server to wait.
const WAIT: f64 = 10.0;
/// How long a waiter is given to reach the server and subscribe before the counter is sent.
const SETTLE: Duration = Duration::from_millis(20);

/// Picks one measurement out of a trial.
type Measure = fn(&Trial) -> f64;

/// One trial's measurements, in milliseconds.
struct Trial {
    bid_from_send: f64,
    bid_from_commit: f64,
    events_from_send: f64,
    events_from_commit: f64,
}

/// Moves the buyer's cursor past the event of its own bid, so that the next waiter waits for
/// the seller's move only.
async fn catch_up(buyer: &Client, mut cursor: i64, bid_id: Uuid) -> anyhow::Result<i64> {
    loop {
        let page = buyer.events(&EventQuery { after: cursor, limit: None, wait: Some(5.0) }).await?;
        if page.data.is_empty() {
            bail!("the event of the buyer's own bid {bid_id} did not arrive within 5 s");
        }
        cursor = page.next_cursor;
        if page.data.iter().any(|event| event.bid_id == Some(bid_id)) {
            return Ok(cursor);
        }
    }
}

/// Runs the trials: `waiters` and `movers` are clients of the two instances (or of one), and
/// `admin` the operator's.
pub async fn run(
    waiters: &Client,
    movers: &Client,
    admin: &Client,
    trials: u64,
    idempotency_keys: bool,
) -> anyhow::Result<()> {
    let run_id = chrono::Utc::now().format("%Y%m%dT%H%M%S").to_string();
    let seller = movers.with_api_key(api::register(movers, &format!("wake-{run_id}-seller")).await?);
    let buyer_key = api::register_buyer(movers, admin, &format!("wake-{run_id}-buyer")).await?;
    // The buyer moves through the movers' instance and waits on the waiters'.
    let (buyer, waiter) = (movers.with_api_key(buyer_key.clone()), waiters.with_api_key(buyer_key));
    let mut cursor = waiter.events(&EventQuery { after: 0, limit: Some(1), wait: None }).await?.next_cursor;
    eprintln!("[wake] {trials} trials: waiters on {}, counters through {}", waiters.base_url(), movers.base_url());

    let mut results = Vec::with_capacity(trials as usize);
    let mut pending: Option<(Uuid, u64)> = None;
    let started = Instant::now();
    for trial in 0..trials {
        // A fresh thread when the current one nears its round limit.
        let (bid_id, round) = match pending.take() {
            Some((bid, round)) if round + 2 < MAX_ROUNDS => (bid, round),
            _ => {
                let listing =
                    NewListing { max_rounds: Some(MAX_ROUNDS as i64), ..NewListing::new("wake-up trial", 10_000_000) };
                let listing = seller.create_listing(&listing).await?;
                let placed = buyer.place_bid(listing.id, &Placement::new(1_000_000)).await?;
                cursor = catch_up(&waiter, cursor, placed.bid.id).await?;
                (placed.bid.id, 1)
            }
        };
        // Waiters first.
        let bid_waiter = {
            let waiter = waiter.clone();
            tokio::spawn(async move {
                let bid = waiter.get_bid(bid_id, Some(WAIT)).await;
                (Instant::now(), bid)
            })
        };
        let events_waiter = {
            let waiter = waiter.clone();
            tokio::spawn(async move {
                let page = waiter.events(&EventQuery { after: cursor, limit: None, wait: Some(WAIT) }).await;
                (Instant::now(), page)
            })
        };
        tokio::time::sleep(SETTLE).await;
        let sent = Instant::now();
        let seller_amount = 10_000_000 - 10_000 * round as i64;
        let countered = seller.counter(bid_id, &CounterOffer::new(seller_amount, false)).await?;
        let committed = Instant::now();
        let (bid_at, bid) = bid_waiter.await.context("the bid waiter")?;
        let (events_at, page) = events_waiter.await.context("the events waiter")?;
        let bid = bid?;
        let page = page?;
        if bid.status != BidStatus::Countered {
            bail!("trial {trial}: the bid waiter answered with the bid {}", bid.status.as_str());
        }
        if page.data.is_empty() {
            bail!("trial {trial}: the events waiter ran to its timeout without the counter");
        }
        cursor = page.next_cursor;
        let ms = |from: Instant, to: Instant| to.saturating_duration_since(from).as_secs_f64() * 1000.0;
        let signed = |from: Instant, to: Instant| {
            if to >= from { ms(from, to) } else { -(from.duration_since(to).as_secs_f64() * 1000.0) }
        };
        results.push(Trial {
            bid_from_send: ms(sent, bid_at),
            bid_from_commit: signed(committed, bid_at),
            events_from_send: ms(sent, events_at),
            events_from_commit: signed(committed, events_at),
        });
        // The buyer answers, untimed, so that the next trial has a pending bid to wait on.
        let buyer_amount = 1_000_000 + 10_000 * round as i64;
        let answered = buyer.counter(countered.bid.id, &CounterOffer::new(buyer_amount, false)).await?;
        cursor = catch_up(&waiter, cursor, answered.bid.id).await?;
        pending = Some((answered.bid.id, round + 2));
        if (trial + 1) % 50 == 0 {
            eprintln!("[wake] {} of {trials} trials, {:.1} s", trial + 1, started.elapsed().as_secs_f64());
        }
    }

    println!(
        "wake-up latency over {} trials (waiters on {}, counters through {}; idempotency keys: {})",
        results.len(),
        waiters.base_url(),
        movers.base_url(),
        yes_no(idempotency_keys)
    );
    println!("{:<34} {:>9} {:>9} {:>9} {:>9}", "waiter, measured from", "p50 ms", "p90 ms", "p99 ms", "max ms");
    let rows: [(&str, Measure); 4] = [
        ("bid wait, from sending the counter", |t| t.bid_from_send),
        ("bid wait, from the counter's answer", |t| t.bid_from_commit),
        ("events long poll, from sending", |t| t.events_from_send),
        ("events long poll, from the answer", |t| t.events_from_commit),
    ];
    for (name, value) in rows {
        let mut samples: Vec<f64> = results.iter().map(value).collect();
        samples.sort_by(f64::total_cmp);
        let at = |p: f64| percentile(&samples, p).unwrap_or(f64::NAN);
        println!("{name:<34} {:>9.2} {:>9.2} {:>9.2} {:>9.2}", at(50.0), at(90.0), at(99.0), at(100.0));
    }
    Ok(())
}
