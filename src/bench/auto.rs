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
use chrono::{DateTime, Utc};
use reqwest::Method;
use serde::Deserialize;
use serde_json::{Value, json};

use super::api::{Api, Created, Registered};
use super::stats::percentile;

const ASK: i64 = 100_000;
const OPENING: i64 = 70_000;
const MAX_ROUNDS: i32 = 12;
/// How long a negotiation may take before the bench counts it as stuck.
const PATIENCE: Duration = Duration::from_secs(30);

fn seller_policy() -> Value {
    json!({ "limit": 82_000, "max_auto_rounds": 10, "counter": { "strategy": "tier" } })
}

fn buyer_policy() -> Value {
    json!({ "limit": 92_000, "max_auto_rounds": 10, "counter": { "strategy": "step", "amount": 2_500 } })
}

#[derive(Deserialize)]
struct Placed {
    thread: Created,
}

#[derive(Deserialize)]
struct EventPage {
    data: Vec<Value>,
    next_cursor: String,
}

#[derive(Deserialize)]
struct ThreadRead {
    status: String,
    updated_at: DateTime<Utc>,
    bids: Vec<BidRead>,
}

#[derive(Deserialize)]
struct BidRead {
    created_at: DateTime<Utc>,
}

/// One negotiation's figures.
struct Outcome {
    status: String,
    rounds: usize,
    db_ms: f64,
    observed_ms: f64,
}

const ENDINGS: [&str; 4] = ["bid.accepted", "bid.rejected", "bid.expired", "thread.closed"];

struct Worker {
    buyer: Registered,
    listings: Vec<Created>,
    cursor: String,
}

async fn set_up(api: &Api, admin_token: &str, run_id: &str, index: usize, listings: u64) -> anyhow::Result<Worker> {
    let seller = api.register(&format!("w3-{run_id}-seller-{index}")).await?;
    let buyer = api.register_buyer(admin_token, &format!("w3-{run_id}-buyer-{index}")).await?;
    let _: Value = api
        .setup(Method::PUT, "/v1/agents/me/policies/seller", Some(&seller.api_key), &seller_policy())
        .await
        .context("setting the seller's policy")?;
    let _: Value = api
        .setup(Method::PUT, "/v1/agents/me/policies/buyer", Some(&buyer.api_key), &buyer_policy())
        .await
        .context("setting the buyer's policy")?;
    let mut created = Vec::with_capacity(listings as usize);
    for n in 0..listings {
        let listing = json!({ "title": format!("w3 lot {n}"), "ask_amount": ASK, "max_rounds": MAX_ROUNDS });
        created.push(api.setup(Method::POST, "/v1/listings", Some(&seller.api_key), &listing).await?);
    }
    let page: EventPage = api.setup(Method::GET, "/v1/events?limit=1", Some(&buyer.api_key), &json!(null)).await?;
    Ok(Worker { buyer, listings: created, cursor: page.next_cursor })
}

/// Opens a thread on the worker's next listing and follows it to its end.
async fn negotiate(api: &Api, worker: &mut Worker) -> anyhow::Result<Outcome> {
    let listing = worker.listings.pop().context("the worker ran out of listings")?;
    let key = worker.buyer.api_key.clone();
    let placed: Placed = api
        .setup(Method::POST, &format!("/v1/listings/{}/bids", listing.id), Some(&key), &json!({ "amount": OPENING }))
        .await?;
    let committed = Instant::now();
    let thread_id = placed.thread.id.to_string();
    loop {
        if committed.elapsed() > PATIENCE {
            bail!("thread {thread_id} did not end within {PATIENCE:?}");
        }
        let path = format!("/v1/events?after={}&limit=200&wait=10", worker.cursor);
        let page: EventPage = api.setup(Method::GET, &path, Some(&key), &json!(null)).await?;
        worker.cursor = page.next_cursor;
        let ended = page.data.iter().any(|event| {
            event["thread_id"] == thread_id.as_str() && ENDINGS.contains(&event["type"].as_str().unwrap_or(""))
        });
        if ended {
            break;
        }
    }
    let observed_ms = committed.elapsed().as_secs_f64() * 1e3;
    let thread: ThreadRead =
        api.setup(Method::GET, &format!("/v1/threads/{thread_id}"), Some(&key), &json!(null)).await?;
    let opened = thread.bids.first().context("a thread without bids")?.created_at;
    let db_ms = (thread.updated_at - opened).num_microseconds().unwrap_or(0) as f64 / 1e3;
    Ok(Outcome { status: thread.status, rounds: thread.bids.len(), db_ms, observed_ms })
}

pub async fn run(api: &Api, admin_token: &str, concurrency: usize, negotiations: u64) -> anyhow::Result<()> {
    let run_id = chrono::Utc::now().format("%Y%m%dT%H%M%S").to_string();
    let per_worker = negotiations.div_ceil(concurrency as u64);
    eprintln!(
        "[w3] setup: {concurrency} sellers and {concurrency} AGENCY buyers with policies, {} listings",
        per_worker * concurrency as u64
    );
    let started = Instant::now();
    let workers = futures::future::try_join_all(
        (0..concurrency).map(|index| set_up(api, admin_token, &run_id, index, per_worker)),
    )
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
                outcomes.push(negotiate(api, &mut worker).await?);
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
    report(&outcomes, wall, concurrency);
    Ok(())
}

fn report(outcomes: &[Outcome], wall: Duration, concurrency: usize) {
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
        *statuses.entry(outcome.status.as_str()).or_insert(0u64) += 1;
    }
    let ms = |values: &[f64], p: f64| percentile(values, p).map_or("-".to_owned(), |v| format!("{v:.2} ms"));
    println!("w3: {} auto-negotiations, {concurrency} at a time, in {:.2} s", outcomes.len(), wall.as_secs_f64());
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
