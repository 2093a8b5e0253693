//! The workloads: what one unit of work is, and which calls it makes.
//!
//! A new workload is a new `Workload` variant; the exhaustive matches below then say what else it
//! must decide (its calls, its unit, the call it is about, and how one unit runs).

use uuid::Uuid;

use super::api::{CallFailed, timed};
use super::stats::{Call, Recorder};
use haggle_client::{Client, CounterOffer, Placement};

/// The ask of every bench listing, and the positions the two sides take under it.
pub const ASK: i64 = 100_000;
pub const OPENING_BID: i64 = 80_000;
pub const SELLER_COUNTER: i64 = 95_000;
pub const BUYER_COUNTER: i64 = 90_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// A full negotiation: the buyer bids, the seller counters, the buyer counters, the seller accepts.
    W1,
    /// Placing a bid (the measured call), then withdrawing it so the buyer may bid again.
    W2,
    /// Wake-up latency: a waiter on `--url` hears of a counter made through `--counter-url`.
    Wake,
    /// Webhook deliveries per second, to a receiver the bench runs on 127.0.0.1.
    Webhooks,
    /// Agent against agent: both sides have policies, the opening bid is the only call, and
    /// the server negotiates the rest.
    W3,
    /// Connections that send half a request head and nothing more (`--connections` of them),
    /// and `/healthz` asked meanwhile.
    Flood,
    /// W1 through the MCP server (sessions, then the stateless protocol), beside W1 over REST
    /// (without, then with idempotency keys), in one run.
    Mcp,
    /// W1 as A2A messages over the JSON-RPC binding, beside W1 over REST with idempotency
    /// keys, in one run.
    A2a,
    /// A deal carried through: negotiated (a bid, a counter, accepted), paid in two payments
    /// the seller confirms, fulfilled, disputed by a refund negotiated to agreement, completed.
    Deals,
    /// An acceptance made directly beside the same acceptance held for approval and approved
    /// by an approver, in one run: the cost of a held and approved move.
    Approvals,
}

/// The two sides of one worker's negotiations, each a client acting as it.
#[derive(Debug, Clone)]
pub struct Parties {
    pub seller: Client,
    pub buyer: Client,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::W1 => "w1",
            Workload::W2 => "w2",
            Workload::Wake => "wake",
            Workload::Webhooks => "webhooks",
            Workload::W3 => "w3",
            Workload::Flood => "flood",
            Workload::Mcp => "mcp",
            Workload::A2a => "a2a",
            Workload::Deals => "deals",
            Workload::Approvals => "approvals",
        }
    }

    pub fn summary(self) -> &'static str {
        match self {
            Workload::W1 => "full negotiation: place, seller counters, buyer counters, seller accepts",
            Workload::W2 => "bid placement: place (measured), then withdraw so the buyer may bid again",
            Workload::Wake => "wake-up latency: a waiter on one instance, a counter through another",
            Workload::Webhooks => "webhook deliveries: events made by placements and withdrawals, delivered signed",
            Workload::W3 => "auto-negotiation: an opening bid, then both sides' policies to the end",
            Workload::Flood => "a flood of connections that never finish their request head, /healthz meanwhile",
            Workload::Mcp => {
                "w1's negotiation over REST and through the MCP tools at /mcp, one transport after another"
            }
            Workload::A2a => {
                "w1's negotiation over REST with idempotency keys, then as A2A messages to /a2a (JSON-RPC)"
            }
            Workload::Deals => {
                "a deal: place, counter, accept; two payments recorded and confirmed; fulfil; a refund opened, \
                 countered and accepted; complete"
            }
            Workload::Approvals => {
                "an acceptance made directly beside one held for approval (202) and approved by an approver"
            }
        }
    }

    /// The calls one unit makes, in the order of their rows in the report.
    pub fn calls(self) -> &'static [Call] {
        match self {
            Workload::W1 => &[Call::Place, Call::Counter, Call::Accept],
            Workload::W2 => &[Call::Place, Call::Withdraw],
            Workload::Wake => &[Call::Counter],
            Workload::Webhooks => &[Call::Place, Call::Withdraw],
            Workload::W3 => &[Call::Place],
            Workload::Flood => &[],
            Workload::Mcp | Workload::A2a => &[Call::Place, Call::Counter, Call::Accept],
            Workload::Deals => &[
                Call::Place,
                Call::Counter,
                Call::Accept,
                Call::Pay,
                Call::Confirm,
                Call::Fulfil,
                Call::Open,
                Call::Complete,
            ],
            Workload::Approvals => {
                &[Call::Place, Call::Counter, Call::Accept, Call::Hold, Call::Approve, Call::HeldMove]
            }
        }
    }

    /// One unit of work, singular and plural.
    pub fn unit(self) -> (&'static str, &'static str) {
        match self {
            Workload::W1 => ("negotiation", "negotiations"),
            Workload::W2 => ("placement", "placements"),
            Workload::Wake => ("wake-up", "wake-ups"),
            Workload::Webhooks => ("delivery", "deliveries"),
            Workload::W3 => ("negotiation", "negotiations"),
            Workload::Flood => ("connection", "connections"),
            Workload::Mcp | Workload::A2a => ("negotiation", "negotiations"),
            Workload::Deals => ("deal", "deals"),
            Workload::Approvals => ("comparison", "comparisons"),
        }
    }

    /// The call the workload is about, whose latency heads a sweep's summary; `None` when it is
    /// about all of its calls together.
    pub fn measured_call(self) -> Option<Call> {
        match self {
            Workload::W1 => None,
            Workload::W2 => Some(Call::Place),
            Workload::Wake => Some(Call::Counter),
            Workload::Webhooks => None,
            Workload::W3 | Workload::Flood => None,
            Workload::Mcp | Workload::A2a => None,
            Workload::Deals => None,
            Workload::Approvals => Some(Call::HeldMove),
        }
    }

    /// Runs one unit on `listing`, on which the buyer has no active thread. Every call is timed
    /// into `recorder`; the first failure ends the unit (it is already recorded), and may leave
    /// an active thread behind, so the caller should move to another listing.
    pub async fn run_once(self, parties: &Parties, listing: Uuid, recorder: &mut Recorder) -> Result<(), CallFailed> {
        let (buyer, seller) = (&parties.buyer, &parties.seller);
        match self {
            Workload::W1 => {
                let opening = Placement::new(OPENING_BID);
                let placed = timed(recorder, Call::Place, buyer.place_bid(listing, &opening)).await?;
                let offer = CounterOffer::new(SELLER_COUNTER, false);
                let countered = timed(recorder, Call::Counter, seller.counter(placed.bid.id, &offer)).await?;
                let offer = CounterOffer::new(BUYER_COUNTER, false);
                let answered = timed(recorder, Call::Counter, buyer.counter(countered.bid.id, &offer)).await?;
                timed(recorder, Call::Accept, seller.accept(answered.bid.id)).await?;
            }
            Workload::W2 => {
                let opening = Placement::new(OPENING_BID);
                let placed = timed(recorder, Call::Place, buyer.place_bid(listing, &opening)).await?;
                timed(recorder, Call::Withdraw, buyer.withdraw(placed.bid.id)).await?;
            }
            Workload::Wake
            | Workload::Webhooks
            | Workload::W3
            | Workload::Flood
            | Workload::Mcp
            | Workload::A2a
            | Workload::Deals
            | Workload::Approvals => unreachable!(
                "the wake, webhooks, w3, flood, mcp, a2a, deals and approvals workloads make their units themselves"
            ),
        }
        Ok(())
    }
}
