//! One level of concurrency of a workload made by workers of its own: setting them up (untimed),
//! warming up and measuring, and the conditions the level ran under.

use std::collections::VecDeque;
use std::future::Future;
use std::time::Instant;

use anyhow::Context;
use uuid::Uuid;

use super::api::CallFailed;
use super::args::BenchArgs;
use super::driver::{Deal, Measured, PhaseWorker, Unit};
use super::report::{Conditions, LevelReport};
use super::stats::Recorder;
use super::workload::Workload;
use super::workload::{ASK, Parties};
use super::{api, driver, report};
use haggle_client::{Client, NewListing};
use haggle_domain::listing::{MAX_QUANTITY, MAX_THREADS_PER_BUYER};

pub(super) async fn run_level(
    client: &Client,
    admin: &Client,
    args: &BenchArgs,
    run_id: &str,
    concurrency: usize,
) -> anyhow::Result<LevelReport> {
    let workload = args.workload;
    let label = format!("[{} c={concurrency}]", workload.name());
    let (workers, listings_per_worker) = set_up_workers(client, admin, args, run_id, concurrency).await?;
    let workers = workers.into_iter().map(|worker| Making { worker, moves: workload }).collect();
    let (_, level) = measure_level(client, args, &label, workload, listings_per_worker, workers).await?;
    Ok(level)
}

/// Warms up and measures a level of `workload`'s units made by `workers`, each with
/// `listings_per_worker` listings to begin with, and gives the workers back with the level's
/// report.
pub(super) async fn measure_level<M: Moves>(
    client: &Client,
    args: &BenchArgs,
    label: &str,
    workload: Workload,
    listings_per_worker: u64,
    workers: Vec<Making<M>>,
) -> anyhow::Result<(Vec<Worker>, LevelReport)> {
    let concurrency = workers.len();
    let Measured { workers, record, date, wall } =
        driver::warm_up_and_measure(label, workload.unit(), Deal::Pool, workers, args.warmup(), args.negotiations)
            .await?;
    let workers: Vec<Worker> = workers.into_iter().map(|making| making.worker).collect();
    let created_mid_run: u64 = workers.iter().map(|worker| worker.listings_created_on_demand).sum();
    let listings = listings_per_worker * concurrency as u64 + created_mid_run;
    let conditions = conditions(client, args, concurrency, date, listings, created_mid_run);
    let level = LevelReport {
        conditions,
        figures: record.summarize(workload.calls(), wall),
        pgbench: None,
        auto: None,
        cpu: None,
    };
    Ok((workers, level))
}

/// Sets up a level's workers (untimed): one seller and one AGENCY buyer each, with the listings
/// they will bid on; gives them with the listings each has.
pub(super) async fn set_up_workers(
    client: &Client,
    admin: &Client,
    args: &BenchArgs,
    run_id: &str,
    concurrency: usize,
) -> anyhow::Result<(Vec<Worker>, u64)> {
    let label = format!("[{} c={concurrency}]", args.workload.name());
    // A quarter more than an even share, as workers take units from a common pool; a worker that
    // still runs out creates a listing on the spot, and the report says so.
    let share = (args.warmup() + args.negotiations).div_ceil(concurrency as u64);
    let listings_per_worker = (share + share / 4).div_ceil(THREADS_PER_LISTING) + 1;
    eprintln!(
        "{label} setup: {}, {} (AGENCY), {}",
        report::count(concurrency as u64, "seller"),
        report::count(concurrency as u64, "buyer"),
        report::count(listings_per_worker * concurrency as u64, "listing")
    );
    let started = Instant::now();
    let names = format!("bench-{run_id}-c{concurrency}");
    let workers = futures::future::try_join_all(
        (0..concurrency).map(|index| Worker::set_up(client, admin, &names, index, listings_per_worker)),
    )
    .await
    .context("setting up the bench's agents and listings")?;
    eprintln!("{label} setup done in {:.1} s", started.elapsed().as_secs_f64());
    Ok((workers, listings_per_worker))
}

/// The conditions of a level whose measured phase started at `date`: one seller and one buyer
/// per worker, on `listings` listings.
pub(super) fn conditions(
    client: &Client,
    args: &BenchArgs,
    concurrency: usize,
    date: chrono::DateTime<chrono::Utc>,
    listings: u64,
    created_mid_run: u64,
) -> Conditions {
    Conditions {
        url: client.base_url().to_owned(),
        workload: args.workload.name(),
        concurrency,
        negotiations: args.negotiations,
        warmup: args.warmup(),
        unit: args.workload.unit().0,
        cpus: std::thread::available_parallelism().map_or(1, usize::from),
        date: date.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        bench_build: if cfg!(debug_assertions) { "debug" } else { "release" },
        haggle_version: env!("CARGO_PKG_VERSION"),
        client_timeout_seconds: args.timeout.as_secs_f64(),
        idempotency_keys: args.idempotency_keys,
        sellers: concurrency,
        buyers: concurrency,
        listings,
        listings_created_mid_run: created_mid_run,
    }
}

/// Threads a buyer may open on one bench listing: the most a listing allows.
const THREADS_PER_LISTING: u64 = MAX_THREADS_PER_BUYER as u64;

/// How a worker makes one unit of work on a listing of its own: w1's or w2's calls over REST
/// (the workload's), or w1's through the MCP tools.
pub(super) trait Moves: Send + Sync + 'static {
    /// Makes the unit's moves on `listing`, on which the buyer has no active thread, timing
    /// each call into `recorder`; the first failure ends the unit.
    fn make(
        &self,
        parties: &Parties,
        listing: Uuid,
        recorder: &mut Recorder,
    ) -> impl Future<Output = Result<(), CallFailed>> + Send;
}

impl Moves for Workload {
    fn make(
        &self,
        parties: &Parties,
        listing: Uuid,
        recorder: &mut Recorder,
    ) -> impl Future<Output = Result<(), CallFailed>> + Send {
        self.run_once(parties, listing, recorder)
    }
}

/// A worker with the way it makes its units.
pub(super) struct Making<M> {
    pub(super) worker: Worker,
    pub(super) moves: M,
}

impl<M: Moves> PhaseWorker for Making<M> {
    type Record = Recorder;

    async fn run_unit(&mut self, recorder: &mut Recorder) -> Unit {
        let listing = match self.worker.next_listing().await {
            Ok(listing) => listing,
            Err(error) => return Unit::Stopped(format!("{error:#}")),
        };
        match self.moves.make(&self.worker.parties, listing, recorder).await {
            Ok(()) => Unit::Completed,
            Err(CallFailed) => {
                // The failure may have left an active thread there.
                self.worker.abandon_listing();
                Unit::Failed
            }
        }
    }
}

/// One concurrent worker: its own seller and buyer, and the seller's listings it bids on.
pub(super) struct Worker {
    index: usize,
    pub(super) parties: Parties,
    /// The two agents' API keys, for clients other than the typed one (the MCP workload's).
    pub(super) seller_key: String,
    pub(super) buyer_key: String,
    listings: VecDeque<Listing>,
    listings_created_on_demand: u64,
}

pub(super) struct Listing {
    id: Uuid,
    threads_left: u64,
}

impl Worker {
    async fn set_up(
        client: &Client,
        admin: &Client,
        names: &str,
        index: usize,
        listings: u64,
    ) -> anyhow::Result<Worker> {
        let seller_key = api::register(client, &format!("{names}-w{index}-seller")).await?;
        let buyer_key = api::register_buyer(client, admin, &format!("{names}-w{index}-buyer")).await?;
        let seller = client.with_api_key(seller_key.clone());
        let buyer = client.with_api_key(buyer_key.clone());
        let mut worker = Worker {
            index,
            parties: Parties { seller, buyer },
            seller_key,
            buyer_key,
            listings: VecDeque::new(),
            listings_created_on_demand: 0,
        };
        for _ in 0..listings {
            worker.add_listing().await?;
        }
        Ok(worker)
    }

    /// A listing with room for a thread per unit of work: the most threads a buyer may open, and
    /// a quantity no run will sell out, so accepting never takes the sold-out path.
    async fn add_listing(&mut self) -> anyhow::Result<()> {
        let listing = NewListing {
            quantity: Some(MAX_QUANTITY),
            max_threads_per_buyer: Some(MAX_THREADS_PER_BUYER),
            ..NewListing::new(format!("bench listing, worker {}", self.index), ASK)
        };
        let listing = self.parties.seller.create_listing(&listing).await.context("creating a bench listing")?;
        self.listings.push_back(Listing { id: listing.id, threads_left: THREADS_PER_LISTING });
        Ok(())
    }

    /// A listing on which the buyer may open one more thread (counted as opened), creating one
    /// when none is left.
    async fn next_listing(&mut self) -> anyhow::Result<Uuid> {
        while self.listings.front().is_some_and(|listing| listing.threads_left == 0) {
            self.listings.pop_front();
        }
        if self.listings.is_empty() {
            self.add_listing().await?;
            self.listings_created_on_demand += 1;
        }
        let listing = self.listings.front_mut().expect("a listing was just ensured");
        listing.threads_left -= 1;
        Ok(listing.id)
    }

    /// Leaves the current listing, where a failed unit may have left the buyer an active thread.
    fn abandon_listing(&mut self) {
        self.listings.pop_front();
    }
}
