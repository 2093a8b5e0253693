//! `haggle bench --workload w3`: agent against agent, both sides negotiating through policies.
//!
//! Setup (untimed): one seller and one AGENCY buyer per worker, each with a default policy
//! (the seller: the tier engine over a floor; the buyer: steps toward a ceiling, the two
//! overlapping), and one listing per negotiation. Each worker then places an opening bid, the
//! only call it makes, and follows its buyer's events (long polls) until the thread ends, then
//! opens the next one. Per negotiation the bench reads the thread and reports:
//! - by the database's clock, the time from the opening bid's transaction to the transaction
//!   that ended the thread (`created_at` of the opening, `updated_at` of the ended thread);
//! - by the bench's clock, from the opening bid's answer (its commit is done) to the end event
//!   reaching the bench, which adds the event's publication and one long-poll wake-up.
//!
//! It also reports negotiations completed per second over the run, rounds and outcomes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use uuid::Uuid;

use super::api;
use super::report::yes_no;
use super::stats::percentile;
use crate::client::{Client, EventQuery, NewListing, Placement, PolicyScope};
use crate::domain::Party;
use crate::domain::strategy::{Policy, Strategy};

const ASK: i64 = 100_000;
const OPENING: i64 = 70_000;
const MAX_ROUNDS: i64 = 12;
/// How long a negotiation may take before the bench counts it as stuck.
const PATIENCE: Duration = Duration::from_secs(30);

fn seller_policy() -> Policy {
    Policy { max_auto_rounds: 10, ..Policy::new(82_000, Strategy::Tier {}) }
}

fn buyer_policy() -> Policy {
    Policy { max_auto_rounds: 10, ..Policy::new(92_000, Strategy::Step { amount: Some(2_500), fraction: None }) }
}

/// One negotiation's figures.
struct Outcome {
    status: &'static str,
    rounds: usize,
    db_ms: f64,
    observed_ms: f64,
}

const ENDINGS: [&str; 4] = ["bid.accepted", "bid.rejected", "bid.expired", "thread.closed"];

struct Worker {
    buyer: Client,
    listings: Vec<Uuid>,
    cursor: i64,
}

async fn set_up(client: &Client, admin: &Client, run_id: &str, index: usize, listings: u64) -> anyhow::Result<Worker> {
    let seller = client.with_api_key(api::register(client, &format!("w3-{run_id}-seller-{index}")).await?);
    let buyer = client.with_api_key(api::register_buyer(client, admin, &format!("w3-{run_id}-buyer-{index}")).await?);
    seller
        .set_policy(PolicyScope::Agent(Party::Seller), &seller_policy())
        .await
        .context("setting the seller's policy")?;
    buyer.set_policy(PolicyScope::Agent(Party::Buyer), &buyer_policy()).await.context("setting the buyer's policy")?;
    let mut created = Vec::with_capacity(listings as usize);
    for n in 0..listings {
        let listing = NewListing { max_rounds: Some(MAX_ROUNDS), ..NewListing::new(format!("w3 lot {n}"), ASK) };
        created.push(seller.create_listing(&listing).await?.id);
    }
    let page = buyer.events(&EventQuery { after: 0, limit: Some(1), wait: None }).await?;
    Ok(Worker { buyer, listings: created, cursor: page.next_cursor })
}

/// Opens a thread on the worker's next listing and follows it to its end.
async fn negotiate(worker: &mut Worker) -> anyhow::Result<Outcome> {
    let listing = worker.listings.pop().context("the worker ran out of listings")?;
    let buyer = &worker.buyer;
    let placed = buyer.place_bid(listing, &Placement::new(OPENING)).await?;
    let committed = Instant::now();
    let thread_id = placed.thread.id;
    loop {
        if committed.elapsed() > PATIENCE {
            bail!("thread {thread_id} did not end within {PATIENCE:?}");
        }
        let page = buyer.events(&EventQuery { after: worker.cursor, limit: Some(200), wait: Some(10.0) }).await?;
        worker.cursor = page.next_cursor;
        let ended =
            page.data.iter().any(|event| event.thread_id == Some(thread_id) && ENDINGS.contains(&event.kind.as_str()));
        if ended {
            break;
        }
    }
    let observed_ms = committed.elapsed().as_secs_f64() * 1e3;
    let read = buyer.get_thread(thread_id).await?;
    let opened = read.bids.first().context("a thread without bids")?.created_at;
    let db_ms = (read.thread.updated_at - opened).num_microseconds().unwrap_or(0) as f64 / 1e3;
    Ok(Outcome { status: read.thread.status.as_str(), rounds: read.bids.len(), db_ms, observed_ms })
}

pub async fn run(
    client: &Client,
    admin: &Client,
    concurrency: usize,
    negotiations: u64,
    idempotency_keys: bool,
) -> anyhow::Result<()> {
    let run_id = chrono::Utc::now().format("%Y%m%dT%H%M%S").to_string();
    let per_worker = negotiations.div_ceil(concurrency as u64);
    eprintln!(
        "[w3] setup: {concurrency} sellers and {concurrency} AGENCY buyers with policies, {} listings",
        per_worker * concurrency as u64
    );
    let started = Instant::now();
    let workers =
        futures::future::try_join_all((0..concurrency).map(|index| set_up(client, admin, &run_id, index, per_worker)))
            .await
            .context("setting up the bench's agents, policies and listings")?;
    eprintln!("[w3] setup done in {:.1} s; running {negotiations} negotiations", started.elapsed().as_secs_f64());

    // Each worker runs its own share, on listings of its own.
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let runs = workers.into_iter().enumerate().map(|(index, mut worker)| {
        let done = done.clone();
        let share = negotiations / concurrency as u64 + u64::from((index as u64) < negotiations % concurrency as u64);
        async move {
            let mut outcomes = Vec::new();
            for _ in 0..share {
                outcomes.push(negotiate(&mut worker).await?);
                let finished = done.fetch_add(1, Ordering::Relaxed) + 1;
                if finished % 200 == 0 {
                    eprintln!("[w3] {finished} of {negotiations} done");
                }
            }
            Ok::<_, anyhow::Error>(outcomes)
        }
    });
    let outcomes: Vec<Outcome> = futures::future::try_join_all(runs).await?.into_iter().flatten().collect();
    let wall = started.elapsed();
    report(&outcomes, wall, concurrency, idempotency_keys);
    Ok(())
}

fn report(outcomes: &[Outcome], wall: Duration, concurrency: usize, idempotency_keys: bool) {
    let sorted = |pick: fn(&Outcome) -> f64| {
        let mut values: Vec<f64> = outcomes.iter().map(pick).collect();
        values.sort_by(f64::total_cmp);
        values
    };
    let db = sorted(|o| o.db_ms);
    let observed = sorted(|o| o.observed_ms);
    let rounds = sorted(|o| o.rounds as f64);
    let mut statuses = BTreeMap::new();
    for outcome in outcomes {
        *statuses.entry(outcome.status).or_insert(0u64) += 1;
    }
    let ms = |values: &[f64], p: f64| percentile(values, p).map_or("-".to_owned(), |v| format!("{v:.2} ms"));
    println!("w3: {} auto-negotiations, {concurrency} at a time, in {:.2} s", outcomes.len(), wall.as_secs_f64());
    println!("  idempotency keys: {}", yes_no(idempotency_keys));
    println!("  negotiations/s: {:.1}", outcomes.len() as f64 / wall.as_secs_f64());
    println!(
        "  opening commit -> end, database clock:  p50 {}  p95 {}  p99 {}  max {}",
        ms(&db, 50.0),
        ms(&db, 95.0),
        ms(&db, 99.0),
        ms(&db, 100.0)
    );
    println!(
        "  opening answer -> end event at bench:   p50 {}  p95 {}  p99 {}  max {}",
        ms(&observed, 50.0),
        ms(&observed, 95.0),
        ms(&observed, 99.0),
        ms(&observed, 100.0)
    );
    println!(
        "  bids per thread: p50 {}  max {}",
        percentile(&rounds, 50.0).unwrap_or(0.0),
        percentile(&rounds, 100.0).unwrap_or(0.0)
    );
    let endings: Vec<String> = statuses.iter().map(|(status, n)| format!("{status} {n}")).collect();
    println!("  outcomes: {}", endings.join(", "));
}
