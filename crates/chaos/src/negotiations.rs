//! The negotiations of the load, all through the balancer: W1 (the buyer bids, the seller
//! counters, the buyer counters, the seller accepts, and the deal is carried through: the seller
//! fulfils, the buyer pays in two parts that the seller confirms, the buyer completes), half of
//! the workers with idempotency keys and half without; and negotiations the two sides' policies
//! play on the server from one opening bid.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::http::Agent;
use super::market::{Answer, Moves, NotMade};
use super::record::Workload;
use haggle_api::{NewListing, ThreadWithBids};
use haggle_domain::ThreadStatus;
use haggle_domain::strategy::{Policy, Strategy};

/// The ask of every listing, and the W1 positions under it.
pub const ASK: i64 = 100_000;
pub const OPENING_BID: i64 = 80_000;
pub const SELLER_COUNTER: i64 = 95_000;
const BUYER_COUNTER: i64 = 90_000;
/// The first of the two payments on a W1 order, the rest paid by the second.
const FIRST_PAYMENT: i64 = 40_000;
/// The policy negotiations' opening bid.
const POLICY_OPENING: i64 = 70_000;
/// Threads a buyer may open on one listing, the most a listing allows.
pub const THREADS_PER_LISTING: u32 = haggle_domain::listing::MAX_THREADS_PER_BUYER as u32;

/// A seller and a buyer (AGENCY) that negotiate with each other.
#[derive(Debug, Clone)]
pub struct Pair {
    pub seller: Agent,
    pub buyer: Agent,
}

/// The listing terms of the load: units enough for every thread a buyer may open.
pub fn new_listing(title: &str, max_rounds: Option<i64>) -> NewListing {
    NewListing {
        quantity: Some(10 * i64::from(THREADS_PER_LISTING)),
        max_threads_per_buyer: Some(i64::from(THREADS_PER_LISTING)),
        max_rounds,
        ..NewListing::new(title, ASK)
    }
}

/// The seller's policy in the policy negotiations: the tier engine over a floor.
pub fn seller_policy() -> Policy {
    Policy { max_auto_rounds: 10, ..Policy::new(82_000, Strategy::Tier {}) }
}

/// The buyer's: steps of 25.00 toward a ceiling above the seller's floor, so that they agree.
pub fn buyer_policy() -> Policy {
    Policy { max_auto_rounds: 10, ..Policy::new(92_000, Strategy::Step { amount: Some(2_500), fraction: None }) }
}

/// A listing of the seller's with threads left for the buyer, made anew when used up or when a
/// failed negotiation may have left the buyer a live thread on it.
pub struct Listings {
    title: String,
    max_rounds: Option<i64>,
    current: Option<(Uuid, u32)>,
}

impl Listings {
    pub fn new(title: String, max_rounds: Option<i64>) -> Listings {
        Listings { title, max_rounds, current: None }
    }

    /// The listing to open the next thread on; `None` if one could not be made.
    pub async fn next(&mut self, moves: &Moves, workload: Workload, seller: &Agent) -> Option<Uuid> {
        if let Some((id, used)) = &mut self.current
            && *used < THREADS_PER_LISTING
        {
            *used += 1;
            return Some(*id);
        }
        let listing = new_listing(&self.title, self.max_rounds);
        let id = moves.list(workload, seller, &listing).await.ok()?;
        self.current = Some((id, 1));
        Some(id)
    }

    /// Leaves the current listing for a new one.
    pub fn abandon(&mut self) {
        self.current = None;
    }
}

/// W1 negotiations until `until`.
pub async fn w1(moves: Moves, pair: Pair, keyed: bool, index: usize, until: CancellationToken) {
    let workload = if keyed { Workload::W1Keyed } else { Workload::W1Plain };
    let mut listings = Listings::new(format!("w1 lot {index}"), None);
    let (seller, buyer) = (&pair.seller, &pair.buyer);
    while !until.is_cancelled() {
        let Some(listing) = listings.next(&moves, workload, seller).await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let negotiated = async {
            let placed = moves.place(workload, buyer, listing, OPENING_BID, keyed).await?;
            let countered = moves.counter(workload, seller, placed.bid.id, SELLER_COUNTER, keyed).await?;
            let answered = moves.counter(workload, buyer, countered.bid.id, BUYER_COUNTER, keyed).await?;
            let accepted = moves.answer(workload, seller, answered.bid.id, Answer::Accept, keyed).await?;
            let Some(order) = accepted.order else { return Err(NotMade) };
            moves.fulfil(workload, seller, order.id, keyed).await?;
            let first = moves.pay(workload, buyer, order.id, FIRST_PAYMENT, keyed).await?;
            moves.confirm(workload, seller, order.id, first, keyed).await?;
            let rest = moves.pay(workload, buyer, order.id, order.amount - FIRST_PAYMENT, keyed).await?;
            moves.confirm(workload, seller, order.id, rest, keyed).await?;
            moves.complete(workload, buyer, order.id, keyed).await?;
            Ok::<_, NotMade>(())
        };
        match negotiated.await {
            Ok(()) => moves.ledger.completed(workload),
            Err(_) => {
                // The thread may still be live: go on on another listing.
                moves.ledger.abandoned(workload);
                listings.abandon();
            }
        }
    }
}

/// Opening bids that the policies play to the end, one negotiation at a time, until `until`.
pub async fn policy(moves: Moves, pair: Pair, index: usize, until: CancellationToken) {
    let mut listings = Listings::new(format!("policy lot {index}"), Some(12));
    while !until.is_cancelled() {
        let Some(listing) = listings.next(&moves, Workload::Policy, &pair.seller).await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let placed = match moves.place(Workload::Policy, &pair.buyer, listing, POLICY_OPENING, true).await {
            Ok(placed) => placed,
            Err(_) => {
                moves.ledger.abandoned(Workload::Policy);
                listings.abandon();
                continue;
            }
        };
        // The next opening waits for this negotiation's end (a buyer has one live thread per
        // listing); whether it ends is checked against the database after the run.
        if wait_for_end(&moves, &pair.buyer, placed.thread.id, Duration::from_secs(20)).await {
            moves.ledger.completed(Workload::Policy);
        } else {
            listings.abandon();
        }
    }
}

async fn wait_for_end(moves: &Moves, buyer: &Agent, thread: Uuid, patience: Duration) -> bool {
    let deadline = Instant::now() + patience;
    let path = format!("/v1/threads/{thread}");
    while Instant::now() < deadline {
        if let Ok(reply) = moves.api.read(&moves.to, &path, buyer, Duration::from_secs(5)).await
            && reply.json::<ThreadWithBids>().is_ok_and(|read| read.thread.status != ThreadStatus::Active)
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}
