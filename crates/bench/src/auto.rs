//! `haggle bench --workload w3`: agent against agent, both sides negotiating through policies.
//!
//! Setup per concurrency level (untimed): one seller and one AGENCY buyer per worker, each with
//! a default policy (the seller: the tier engine over a floor; the buyer: steps toward a
//! ceiling, the two overlapping), and one listing per negotiation, warm-up included. Each worker
//! then runs its share of the warm-up negotiations (left out of the figures) and of the measured
//! ones: it places an opening bid, the only call it makes (timed, like every call of the other
//! workloads, with failures counted by status), and follows its buyer's events (long polls)
//! until the thread ends, then opens the next one. A failed opening or a negotiation that
//! cannot be followed to its end is counted and the worker goes on. Per negotiation the bench
//! reads the thread and reports:
//! - by the database's clock, the time from the opening bid's transaction to the transaction
//!   that ended the thread (`created_at` of the opening, `updated_at` of the ended thread);
//! - by the bench's clock, from the opening bid's answer (its commit is done) to the end event
//!   reaching the bench, which adds the event's publication and one long-poll wake-up.
//!
//! It also reports negotiations completed per second over the measured phase, rounds and
//! outcomes.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use uuid::Uuid;

use super::BenchArgs;
use super::api::{self, CallFailed};
use super::driver::{self, Deal, Measured, PhaseWorker, Record, Unit, share};
use super::report::LevelReport;
use super::stats::Call;
use super::stats::{AutoFigures, Latency};
use super::stats::{Recorder, percentile};
use super::workload::Workload;
use haggle_api::EventType;
use haggle_client::{Client, ClientError, EventQuery, NewListing, Placement, PolicyScope};
use haggle_domain::Party;
use haggle_domain::strategy::{Policy, Strategy};

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

/// Why a negotiation has no figures.
enum Unfinished {
    /// The opening bid failed; the recorder has counted it by status.
    Refused,
    /// The thread could not be followed to its end.
    Lost(String),
}

const ENDINGS: [EventType; 4] =
    [EventType::BidAccepted, EventType::BidRejected, EventType::BidExpired, EventType::ThreadClosed];

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

/// Opens a thread on the worker's next listing and follows it to its end; the opening bid's
/// latency, or its failure, goes to `recorder`.
async fn negotiate(worker: &mut Worker, recorder: &mut Recorder) -> Result<Outcome, Unfinished> {
    let listing = worker.listings.pop().ok_or_else(|| Unfinished::Lost("the worker ran out of listings".into()))?;
    let buyer = &worker.buyer;
    let placed = api::timed(recorder, Call::Place, buyer.place_bid(listing, &Placement::new(OPENING)))
        .await
        .map_err(|CallFailed| Unfinished::Refused)?;
    let committed = Instant::now();
    let thread_id = placed.thread.id;
    let lost = |error: ClientError| Unfinished::Lost(format!("thread {thread_id}: {error}"));
    loop {
        if committed.elapsed() > PATIENCE {
            return Err(Unfinished::Lost(format!("thread {thread_id} did not end within {PATIENCE:?}")));
        }
        let query = EventQuery { after: worker.cursor, limit: Some(200), wait: Some(10.0) };
        let page = buyer.events(&query).await.map_err(lost)?;
        worker.cursor = page.next_cursor;
        let ended = page.data.iter().any(|event| event.thread_id == Some(thread_id) && ENDINGS.contains(&event.kind));
        if ended {
            break;
        }
    }
    let observed_ms = committed.elapsed().as_secs_f64() * 1e3;
    let read = buyer.get_thread(thread_id).await.map_err(lost)?;
    let opened =
        read.bids.first().ok_or_else(|| Unfinished::Lost(format!("thread {thread_id} has no bids")))?.created_at;
    let db_ms = (read.thread.updated_at - opened).num_microseconds().unwrap_or(0) as f64 / 1e3;
    Ok(Outcome { status: read.thread.status.as_str(), rounds: read.bids.len(), db_ms, observed_ms })
}

/// What one worker recorded in one phase: its opening bids' calls, and each negotiation's
/// outcome or why it was lost.
#[derive(Default)]
struct Phase {
    recorder: Recorder,
    outcomes: Vec<Outcome>,
    lost: Vec<String>,
}

impl Record for Phase {
    fn calls(&mut self) -> &mut Recorder {
        &mut self.recorder
    }

    fn merge(&mut self, other: Phase) {
        self.recorder.merge(other.recorder);
        self.outcomes.extend(other.outcomes);
        self.lost.extend(other.lost);
    }
}

impl PhaseWorker for Worker {
    type Record = Phase;

    async fn run_unit(&mut self, phase: &mut Phase) -> Unit {
        match negotiate(self, &mut phase.recorder).await {
            Ok(outcome) => {
                phase.outcomes.push(outcome);
                Unit::Completed
            }
            Err(Unfinished::Refused) => Unit::Failed,
            Err(Unfinished::Lost(why)) => {
                phase.lost.push(why);
                Unit::Failed
            }
        }
    }
}

/// Runs one concurrency level: setup, warm-up, and the measured negotiations.
pub async fn run_level(
    client: &Client,
    admin: &Client,
    args: &BenchArgs,
    run_id: &str,
    concurrency: usize,
) -> anyhow::Result<LevelReport> {
    let label = format!("[w3 c={concurrency}]");
    let (warmup, negotiations) = (args.warmup(), args.negotiations);
    let listings = |index| share(warmup, concurrency, index) + share(negotiations, concurrency, index);
    eprintln!(
        "{label} setup: {concurrency} sellers and {concurrency} AGENCY buyers with policies, {} listings",
        warmup + negotiations
    );
    let started = Instant::now();
    let names = format!("{run_id}-c{concurrency}");
    let workers = futures::future::try_join_all(
        (0..concurrency).map(|index| set_up(client, admin, &names, index, listings(index))),
    )
    .await
    .context("setting up the bench's agents, policies and listings")?;
    eprintln!("{label} setup done in {:.1} s", started.elapsed().as_secs_f64());

    // Each worker has exactly the listings of its shares: the units are dealt in shares.
    let Measured { record: phase, date, wall, .. } =
        driver::warm_up_and_measure(&label, Workload::W3.unit(), Deal::Shares, workers, warmup, negotiations).await?;
    let conditions = super::level::conditions(client, args, concurrency, date, warmup + negotiations, 0);
    let auto = AutoFigures::of(&phase.outcomes, phase.lost);
    let figures = phase.recorder.summarize(Workload::W3.calls(), wall);
    Ok(LevelReport { conditions, figures, pgbench: None, auto: Some(auto), cpu: None })
}

/// How many reasons for lost negotiations a level keeps to show.
const MAX_LOST: usize = 5;

impl AutoFigures {
    fn of(outcomes: &[Outcome], mut lost: Vec<String>) -> AutoFigures {
        let mut rounds: Vec<usize> = outcomes.iter().map(|o| o.rounds).collect();
        rounds.sort_unstable();
        let mut statuses = BTreeMap::new();
        for outcome in outcomes {
            *statuses.entry(outcome.status).or_insert(0u64) += 1;
        }
        let count = lost.len() as u64;
        lost.truncate(MAX_LOST);
        AutoFigures {
            db_ms: Latency::of(outcomes.iter().map(|o| o.db_ms).collect()),
            observed_ms: Latency::of(outcomes.iter().map(|o| o.observed_ms).collect()),
            bids_per_thread_p50: percentile(&rounds, 50.0),
            bids_per_thread_max: percentile(&rounds, 100.0),
            outcomes: statuses,
            lost: count,
            lost_reasons: lost,
        }
    }
}
