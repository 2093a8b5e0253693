//! The tools: each a call (or a few) of the REST API through the typed client, with its input
//! schema made from the API's own request types and a description that states the rules it
//! is held to.

use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use haggle_client::{
    Acceptance, Bid, CounterOffer, EventQuery, Fulfil, Listing, ListingPatch, ListingQuery, NewListing, NewPayment,
    OpenNegotiation, OrderQuery, OrderWithPayments, Page, PaymentAndOrder, PaymentDispute, Placement, PolicyScope,
    ThreadQuery, ThreadWithBids,
};
use haggle_domain::strategy::Policy;
use haggle_domain::{BidStatus, Party, ThreadStatus};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::Haggle;
use crate::answer::{bad_arguments, done, money, refused};
use crate::approvals;
use crate::keyed::{Answer, IdempotencyKey, with_key};
use crate::standing::{self, Standing};

/// The longest `wait_for_turn` waits, and how long it waits by default.
pub const MAX_WAIT_SECONDS: f64 = 60.0;
const DEFAULT_WAIT_SECONDS: f64 = 30.0;

/// The arguments left over after a flattened request type took its fields.
pub(crate) type Unknown = serde_json::Map<String, serde_json::Value>;

/// Refuses arguments that no field of the tool takes, naming them.
fn known_only(unknown: &Unknown) -> Result<(), CallToolResult> {
    match unknown.keys().next() {
        None => Ok(()),
        Some(name) => {
            Err(bad_arguments(format!("unknown argument `{name}`; the tool's input schema lists the ones it takes")))
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListingId {
    /// The listing's id.
    pub listing_id: Uuid,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct OrderId {
    /// The order's id.
    pub order_id: Uuid,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ThreadId {
    /// The thread's id (a negotiation; `thread.id` in a bid's answer).
    pub thread_id: Uuid,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(extend("additionalProperties" = false))]
pub(crate) struct CreateListing {
    #[serde(flatten)]
    pub listing: NewListing,
    pub idempotency_key: Option<IdempotencyKey>,
    /// Arguments no field takes: refused, as the API refuses unknown fields.
    #[serde(flatten)]
    #[schemars(skip)]
    pub unknown: Unknown,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(extend("additionalProperties" = false))]
pub(crate) struct UpdateListing {
    /// The listing to change (yours).
    pub listing_id: Uuid,
    #[serde(flatten)]
    pub patch: ListingPatch,
    /// Arguments no field takes: refused, as the API refuses unknown fields.
    #[serde(flatten)]
    #[schemars(skip)]
    pub unknown: Unknown,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListingMove {
    /// The listing.
    pub listing_id: Uuid,
    pub idempotency_key: Option<IdempotencyKey>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(extend("additionalProperties" = false))]
pub(crate) struct PlaceBid {
    /// The listing to bid on.
    pub listing_id: Uuid,
    #[serde(flatten)]
    pub bid: Placement,
    pub idempotency_key: Option<IdempotencyKey>,
    /// Arguments no field takes: refused, as the API refuses unknown fields.
    #[serde(flatten)]
    #[schemars(skip)]
    pub unknown: Unknown,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(extend("additionalProperties" = false))]
pub(crate) struct CounterBid {
    /// The pending bid to answer (`pending_bid.id` in get_thread's answer).
    pub bid_id: Uuid,
    #[serde(flatten)]
    pub counter: CounterOffer,
    pub idempotency_key: Option<IdempotencyKey>,
    /// Arguments no field takes: refused, as the API refuses unknown fields.
    #[serde(flatten)]
    #[schemars(skip)]
    pub unknown: Unknown,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct BidMove {
    /// The pending bid.
    pub bid_id: Uuid,
    pub idempotency_key: Option<IdempotencyKey>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AcceptMove {
    /// The pending bid.
    pub bid_id: Uuid,
    /// Only on a `schedule` negotiation (required there): the index, from 0, of the window taken
    /// among the pending bid's `terms.windows`.
    pub chosen: Option<usize>,
    pub idempotency_key: Option<IdempotencyKey>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct OrderMove {
    /// The order (`order.id` in an accept's or a purchase's answer).
    pub order_id: Uuid,
    pub idempotency_key: Option<IdempotencyKey>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(extend("additionalProperties" = false))]
pub(crate) struct FulfilOrder {
    /// The order you sold.
    pub order_id: Uuid,
    #[serde(flatten)]
    pub fulfilment: Fulfil,
    pub idempotency_key: Option<IdempotencyKey>,
    /// Arguments no field takes: refused, as the API refuses unknown fields.
    #[serde(flatten)]
    #[schemars(skip)]
    pub unknown: Unknown,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(extend("additionalProperties" = false))]
pub(crate) struct OpenOrderNegotiation {
    /// The order you bought or sold.
    pub order_id: Uuid,
    #[serde(flatten)]
    pub opening: OpenNegotiation,
    pub idempotency_key: Option<IdempotencyKey>,
    /// Arguments no field takes: refused, as the API refuses unknown fields.
    #[serde(flatten)]
    #[schemars(skip)]
    pub unknown: Unknown,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(extend("additionalProperties" = false))]
pub(crate) struct RecordPayment {
    /// The order you bought.
    pub order_id: Uuid,
    #[serde(flatten)]
    pub payment: NewPayment,
    pub idempotency_key: Option<IdempotencyKey>,
    /// Arguments no field takes: refused, as the API refuses unknown fields.
    #[serde(flatten)]
    #[schemars(skip)]
    pub unknown: Unknown,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AnswerPayment {
    /// The order you sold.
    pub order_id: Uuid,
    /// The recorded payment (`payment.id` in record_payment's answer, or in the order's `payments`).
    pub payment_id: Uuid,
    /// Leave out to confirm that the money arrived; give a reason (1 to 500 characters) to dispute it.
    #[schemars(length(min = 1, max = 500))]
    pub dispute_reason: Option<String>,
    pub idempotency_key: Option<IdempotencyKey>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct WaitForTurn {
    /// The negotiation to wait on.
    pub thread_id: Uuid,
    /// The longest to wait, in seconds (0 to 60; 30 by default). 0 answers at once.
    #[schemars(range(min = 0, max = 60))]
    pub timeout_seconds: Option<f64>,
}

/// Where a policy applies.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(tag = "scope", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum PolicyTarget {
    /// My default in one role: as seller, for every listing of mine; as buyer, for every
    /// negotiation of mine.
    Agent { role: Party },
    /// One listing: its seller sets the seller policy, anyone else their buyer policy for it.
    Listing { listing_id: Uuid },
    /// One negotiation of mine.
    Thread { thread_id: Uuid },
}

impl From<PolicyTarget> for PolicyScope {
    fn from(target: PolicyTarget) -> PolicyScope {
        match target {
            PolicyTarget::Agent { role } => PolicyScope::Agent(role),
            PolicyTarget::Listing { listing_id } => PolicyScope::Listing(listing_id),
            PolicyTarget::Thread { thread_id } => PolicyScope::Thread(thread_id),
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PolicyAt {
    /// Where the policy applies; the most specific one applies (thread, then listing, then agent).
    pub target: PolicyTarget,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SetPolicy {
    /// Where the policy applies; the most specific one applies (thread, then listing, then agent).
    pub target: PolicyTarget,
    /// The policy: private limits (never shown to the other side) and how to counter.
    pub policy: Policy,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NoArguments {}

/// `wait_for_turn`'s answer.
#[derive(Debug, Serialize)]
struct Waited {
    /// `your_turn`, `ended` (the negotiation is over) or `timed_out` (still the other side's turn).
    outcome: &'static str,
    standing: Standing,
    thread: ThreadWithBids,
}

fn page_summary<T>(page: &Page<T>, what: &str) -> String {
    match &page.next_cursor {
        Some(cursor) => format!("{} {what} on this page; pass cursor {cursor} for more.", page.data.len()),
        None => format!("{} {what}.", page.data.len()),
    }
}

fn bid_summary(verb: &str, bid: &Bid, thread: &haggle_client::Thread) -> String {
    let finality = if bid.is_final { " as a final offer" } else { "" };
    let next = match thread.turn {
        Some(turn) if thread.status == ThreadStatus::Active => format!(
            "It is now the {}'s turn; the bid expires at {} unless answered. Call wait_for_turn to wait for the answer.",
            turn.as_str(),
            bid.expires_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        ),
        _ => format!("The negotiation is {}.", thread.status),
    };
    format!(
        "You {verb} {}{finality} (bid {}, round {} of thread {}). {next}",
        money(bid.amount, bid.currency),
        bid.id,
        bid.round,
        thread.id
    )
}

#[tool_router(router = tool_router, vis = "pub(crate)")]
impl Haggle {
    #[tool(
        description = "Who you are on Haggle: your agent id, name and tier. Your tier decides which listings \
                       you may negotiate on (a listing negotiates with buyers at or above its \
                       min_negotiation_tier, AGENCY by default); anyone may buy at the ask.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn whoami(&self, Parameters(_): Parameters<NoArguments>, context: RequestContext<RoleServer>) -> Answer {
        let acting = self.acting_in(&context)?;
        match acting.client.me().await {
            Ok(agent) => Ok(done(format!("You are {} ({}), tier {}.", agent.name, agent.id, agent.tier), &agent)),
            Err(error) => Ok(refused(error)),
        }
    }

    #[tool(
        description = "Find listings for sale, newest first: filter by seller_id, status (ACTIVE, SOLD, \
                       WITHDRAWN) and words (q); page with limit and cursor (the answer's next_cursor). \
                       Amounts are integers of minor units (120000 is 1,200.00). A listing negotiates if \
                       `negotiable` and your tier is at least its `min_negotiation_tier`; otherwise buy_now.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn find_listings(
        &self,
        Parameters(query): Parameters<ListingQuery>,
        context: RequestContext<RoleServer>,
    ) -> Answer {
        let acting = self.acting_in(&context)?;
        match acting.client.list_listings(&query).await {
            Ok(page) => Ok(done(page_summary(&page, "listings"), &page)),
            Err(error) => Ok(refused(error)),
        }
    }

    #[tool(
        description = "Read one listing: its ask, quantity left, status, and its negotiation terms \
                       (negotiable, min_negotiation_tier, max_rounds: the most bids a thread may hold, the \
                       last of which is final; bid_ttl_seconds: how long a bid stays open by default; \
                       max_threads_per_buyer).",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn get_listing(
        &self,
        Parameters(ListingId { listing_id }): Parameters<ListingId>,
        context: RequestContext<RoleServer>,
    ) -> Answer {
        let acting = self.acting_in(&context)?;
        match acting.client.get_listing(listing_id).await {
            Ok(listing) => Ok(done(listing_summary(&listing), &listing)),
            Err(error) => Ok(refused(error)),
        }
    }

    #[tool(
        description = "List something for sale as its seller. title and ask_amount (minor units, 100 or more) \
                       are required; the rest default: currency USD, quantity 1, negotiable true, \
                       min_negotiation_tier AGENCY, max_rounds 10, bid_ttl_seconds 172800 (48 h), \
                       max_threads_per_buyer 3. Buyers then bid; answer them with counter_bid, accept_bid or \
                       reject_bid, or set_policy to let the server answer within your private floor.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn create_listing(
        &self,
        Parameters(args): Parameters<CreateListing>,
        context: RequestContext<RoleServer>,
    ) -> Answer {
        if let Err(refusal) = known_only(&args.unknown) {
            return Ok(refusal);
        }
        let acting = self.acting_in(&context)?;
        match with_key(&acting.client, args.idempotency_key).create_listing(&args.listing).await {
            Ok(listing) => Ok(done(format!("Listed. {}", listing_summary(&listing)), &listing)),
            Err(error) => Ok(refused(error)),
        }
    }

    #[tool(
        description = "Change your listing's fields (only those given); the currency never changes. Only the \
                       seller may, and only while it is ACTIVE. Idempotent by nature: the same change twice \
                       gives the same listing.",
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn update_listing(
        &self,
        Parameters(args): Parameters<UpdateListing>,
        context: RequestContext<RoleServer>,
    ) -> Answer {
        if let Err(refusal) = known_only(&args.unknown) {
            return Ok(refusal);
        }
        let acting = self.acting_in(&context)?;
        match acting.client.update_listing(args.listing_id, &args.patch).await {
            Ok(listing) => Ok(done(format!("Updated. {}", listing_summary(&listing)), &listing)),
            Err(error) => Ok(refused(error)),
        }
    }

    #[tool(
        description = "Take your listing off the market (seller only, while ACTIVE): it becomes WITHDRAWN, and \
                       every live negotiation on it is closed, its pending bid rejected.",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false)
    )]
    async fn withdraw_listing(
        &self,
        Parameters(args): Parameters<ListingMove>,
        context: RequestContext<RoleServer>,
    ) -> Answer {
        let acting = self.acting_in(&context)?;
        match with_key(&acting.client, args.idempotency_key).withdraw_listing(args.listing_id).await {
            Ok(listing) => Ok(done(format!("Withdrawn. {}", listing_summary(&listing)), &listing)),
            Err(error) => Ok(refused(error)),
        }
    }

    #[tool(
        description = "Open a negotiation on a listing with a first bid, as its buyer. Rules: the listing is \
                       ACTIVE and negotiable; your tier is at least its min_negotiation_tier (else buy_now); \
                       you are not its seller; amount is at most the ask; you have no live negotiation on it \
                       (continue that one instead) and fewer than its max_threads_per_buyer so far. The bid \
                       expires after expires_in seconds (the listing's bid_ttl_seconds by default) unless \
                       the seller answers. Then it is the seller's turn: call wait_for_turn.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn place_bid(&self, Parameters(args): Parameters<PlaceBid>, context: RequestContext<RoleServer>) -> Answer {
        if let Err(refusal) = known_only(&args.unknown) {
            return Ok(refusal);
        }
        let acting = self.acting_in(&context)?;
        match with_key(&acting.client, args.idempotency_key).place_bid(args.listing_id, &args.bid).await {
            Ok(placed) => Ok(done(bid_summary("bid", &placed.bid, &placed.thread), &placed)),
            Err(error) => approvals::settle(&acting, &context, error).await,
        }
    }

    #[tool(
        description = "Answer the other side's pending bid with your own amount. Rules: only the party who did \
                       not make the pending bid may counter (it must be your turn), before it expires, and not \
                       a final offer (accept or reject that). The amount must concede and stay between the two \
                       latest positions: a buyer from its previous amount up to below the seller's pending \
                       amount; a seller from above the buyer's pending amount down to its previous price (the \
                       ask at first); on a listing whose concession_rule is none it may also take back your own \
                       concessions (a buyer down to 100, a seller up to the ask), never crossing the other \
                       side's pending amount. get_thread and wait_for_turn give the allowed counter_range. Mark it \
                       final to make it your last word; the bid reaching the listing's max_rounds is final \
                       anyway. Then it is the other side's turn.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn counter_bid(
        &self,
        Parameters(args): Parameters<CounterBid>,
        context: RequestContext<RoleServer>,
    ) -> Answer {
        if let Err(refusal) = known_only(&args.unknown) {
            return Ok(refusal);
        }
        let acting = self.acting_in(&context)?;
        match with_key(&acting.client, args.idempotency_key).counter(args.bid_id, &args.counter).await {
            Ok(countered) => Ok(done(bid_summary("countered at", &countered.bid, &countered.thread), &countered)),
            Err(error) => approvals::settle(&acting, &context, error).await,
        }
    }

    #[tool(
        description = "Accept the other side's pending bid: the deal is made at its amount and terms, and the \
                       order is created at once. Rules: it must be your turn (you did not make the pending \
                       bid) and the bid not expired. Final offers may be accepted. When the listing's last \
                       unit sells, its other negotiations close. On an order's negotiation it agrees that \
                       negotiation instead (a refund, a cancellation, a plan of installments; on a schedule, \
                       name the window taken with `chosen`).",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false)
    )]
    async fn accept_bid(
        &self,
        Parameters(args): Parameters<AcceptMove>,
        context: RequestContext<RoleServer>,
    ) -> Answer {
        let acting = self.acting_in(&context)?;
        let client = with_key(&acting.client, args.idempotency_key);
        let accepted = match args.chosen {
            Some(window) => client.accept_with(args.bid_id, &Acceptance::choosing(window)).await,
            None => client.accept(args.bid_id).await,
        };
        match accepted {
            Ok(answered) => {
                let order = answered.order.as_ref().map(|order| format!(" Order {} is {}.", order.id, order.status));
                let summary = format!(
                    "You accepted {}: the deal is made.{}",
                    money(answered.bid.amount, answered.bid.currency),
                    order.unwrap_or_default()
                );
                Ok(done(summary, &answered))
            }
            Err(error) => approvals::settle(&acting, &context, error).await,
        }
    }

    #[tool(
        description = "Reject the other side's pending bid, which ends the negotiation (REJECTED). Rules: it must \
                       be your turn and the bid not expired. To go on negotiating, counter_bid instead.",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false)
    )]
    async fn reject_bid(&self, Parameters(args): Parameters<BidMove>, context: RequestContext<RoleServer>) -> Answer {
        let acting = self.acting_in(&context)?;
        match with_key(&acting.client, args.idempotency_key).reject(args.bid_id).await {
            Ok(answered) => Ok(done(
                format!("You rejected bid {}; negotiation {} has ended.", answered.bid.id, answered.thread.id),
                &answered,
            )),
            Err(error) => Ok(refused(error)),
        }
    }

    #[tool(
        description = "Take back your own pending bid before the other side answers, which ends the \
                       negotiation (REJECTED, reason withdrawn). Rules: only the bid's author may, while it \
                       is pending and not expired.",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false)
    )]
    async fn withdraw_bid(&self, Parameters(args): Parameters<BidMove>, context: RequestContext<RoleServer>) -> Answer {
        let acting = self.acting_in(&context)?;
        match with_key(&acting.client, args.idempotency_key).withdraw(args.bid_id).await {
            Ok(answered) => Ok(done(
                format!("You withdrew bid {}; negotiation {} has ended.", answered.bid.id, answered.thread.id),
                &answered,
            )),
            Err(error) => Ok(refused(error)),
        }
    }

    #[tool(
        description = "Buy one unit of a listing at its ask, without negotiating: any tier may, but not its \
                       seller, while it is ACTIVE with units left. The order is created at once; the last unit \
                       sold closes the listing's negotiations.",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false)
    )]
    async fn buy_now(&self, Parameters(args): Parameters<ListingMove>, context: RequestContext<RoleServer>) -> Answer {
        let acting = self.acting_in(&context)?;
        match with_key(&acting.client, args.idempotency_key).purchase(args.listing_id).await {
            Ok(bought) => Ok(done(
                format!(
                    "You bought it at {}: order {} is {}.",
                    money(bought.order.amount, bought.order.currency),
                    bought.order.id,
                    bought.order.status
                ),
                &bought,
            )),
            Err(error) => approvals::settle(&acting, &context, error).await,
        }
    }

    #[tool(
        description = "Read one of your negotiations with all its bids in order, and where you stand: your \
                       side, whose turn it is, the pending bid, the moves the rules allow you now \
                       (counter_bid, accept_bid, reject_bid, withdraw_bid) and the counter_range a counter \
                       must lie in. Only its buyer and seller can see a thread.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn get_thread(
        &self,
        Parameters(ThreadId { thread_id }): Parameters<ThreadId>,
        context: RequestContext<RoleServer>,
    ) -> Answer {
        let acting = self.acting_in(&context)?;
        match standing::read(&acting, thread_id).await {
            Ok((thread, standing)) => {
                #[derive(Serialize)]
                struct Read<'a> {
                    standing: &'a Standing,
                    thread: &'a ThreadWithBids,
                }
                Ok(done(standing::describe(&standing), &Read { standing: &standing, thread: &thread }))
            }
            Err(error) => Ok(refused(error)),
        }
    }

    #[tool(
        description = "List your negotiations, newest first: filter by role (buyer or seller), status (ACTIVE \
                       for live ones; ACCEPTED, REJECTED, EXPIRED, CLOSED for ended ones) and listing_id; \
                       page with limit and cursor. Each shows whose `turn` it is.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn list_my_threads(
        &self,
        Parameters(query): Parameters<ThreadQuery>,
        context: RequestContext<RoleServer>,
    ) -> Answer {
        let acting = self.acting_in(&context)?;
        match acting.client.list_threads(&query).await {
            Ok(page) => Ok(done(page_summary(&page, "negotiations"), &page)),
            Err(error) => Ok(refused(error)),
        }
    }

    #[tool(
        description = "Wait until a negotiation needs you or ends, without polling: answers as soon as it is \
                       your turn (outcome your_turn), the negotiation ends (ended: accepted, rejected, expired \
                       or closed), or timeout_seconds pass (timed_out: still the other side's turn). The answer \
                       holds the thread and your standing, as get_thread's does.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn wait_for_turn(
        &self,
        Parameters(args): Parameters<WaitForTurn>,
        context: RequestContext<RoleServer>,
    ) -> Answer {
        let acting = self.acting_in(&context)?;
        let timeout = args.timeout_seconds.unwrap_or(DEFAULT_WAIT_SECONDS);
        if !(timeout.is_finite() && (0.0..=MAX_WAIT_SECONDS).contains(&timeout)) {
            return Ok(bad_arguments("timeout_seconds must be from 0 to 60"));
        }
        let deadline = Instant::now() + Duration::from_secs_f64(timeout);
        loop {
            let (thread, standing) = match standing::read(&acting, args.thread_id).await {
                Ok(read) => read,
                Err(error) => return Ok(refused(error)),
            };
            let outcome = if standing.status != ThreadStatus::Active {
                Some("ended")
            } else if standing.your_turn {
                Some("your_turn")
            } else {
                None
            };
            let remaining = deadline.saturating_duration_since(Instant::now());
            let outcome = match outcome {
                Some(outcome) => outcome,
                None if remaining.is_zero() => "timed_out",
                None => {
                    // The thread's last bid is its pending one: the wait ends when it changes.
                    let pending = thread.thread.last_bid_id;
                    match acting.client.get_bid(pending, Some(remaining.as_secs_f64())).await {
                        Ok(bid) if bid.status == BidStatus::Pending && Instant::now() >= deadline => "timed_out",
                        Ok(_) => continue,
                        Err(error) => return Ok(refused(error)),
                    }
                }
            };
            let summary = match outcome {
                "timed_out" => format!("Timed out; still waiting. {}", standing::describe(&standing)),
                _ => standing::describe(&standing),
            };
            return Ok(done(summary, &Waited { outcome, standing, thread }));
        }
    }

    #[tool(
        description = "Read your events after a cursor, oldest first: bid.placed, bid.countered, bid.accepted, \
                       bid.rejected, bid.expired, thread.closed, order.created, listing.sold, \
                       listing.withdrawn, negotiation.action_required (a policy of yours needs you). Start \
                       with after 0 and pass the answer's next_cursor as `after` next time; with wait, \
                       waits up to that many seconds (60 at most) for the first one.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn read_events(
        &self,
        Parameters(query): Parameters<EventQuery>,
        context: RequestContext<RoleServer>,
    ) -> Answer {
        let acting = self.acting_in(&context)?;
        match acting.client.events(&query).await {
            Ok(page) => {
                #[derive(Serialize)]
                struct Events<'a> {
                    data: &'a [haggle_client::Event],
                    /// A number here, as `after` takes it.
                    next_cursor: i64,
                    has_more: bool,
                }
                let summary = format!(
                    "{} events; next time pass after={}{}.",
                    page.data.len(),
                    page.next_cursor,
                    if page.has_more { " (more are waiting)" } else { "" }
                );
                Ok(done(summary, &Events { data: &page.data, next_cursor: page.next_cursor, has_more: page.has_more }))
            }
            Err(error) => Ok(refused(error)),
        }
    }

    #[tool(
        description = "Read your own policy at a target (yours only: a policy's limits are never shown to \
                       anyone else, and the other side meets it only as bids).",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn get_policy(&self, Parameters(args): Parameters<PolicyAt>, context: RequestContext<RoleServer>) -> Answer {
        let acting = self.acting_in(&context)?;
        match acting.client.get_policy(args.target.into()).await {
            Ok(policy) => Ok(done("Your policy, as stored.", &policy)),
            Err(error) => Ok(refused(error)),
        }
    }

    #[tool(
        description = "Let the server negotiate for you at a target: whenever a bid waits for your answer there, \
                       it accepts, counters or rejects within milliseconds, never crossing your private limit \
                       (a seller's floor, a buyer's ceiling). policy = {limit, counter, accept_at?, \
                       reject_beyond?, max_auto_rounds? (5), require_approval?}; counter is one of \
                       {\"strategy\":\"split\"}, {\"strategy\":\"step\",\"amount\":N} or \
                       {\"strategy\":\"step\",\"fraction\":F}, {\"strategy\":\"time\",\"k\":K,\"e\":E}, \
                       {\"strategy\":\"tit_for_tat\",\"kindness\":X}, {\"strategy\":\"tier\"} (sellers). After \
                       max_auto_rounds counters, or with require_approval, it stops and leaves the bid to you \
                       (a negotiation.action_required event). Replaces any policy at the same target; setting \
                       it twice is the same as once.",
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn set_policy(&self, Parameters(args): Parameters<SetPolicy>, context: RequestContext<RoleServer>) -> Answer {
        let acting = self.acting_in(&context)?;
        match acting.client.set_policy(args.target.into(), &args.policy).await {
            Ok(policy) => {
                Ok(done(format!("Policy set ({} scope, as {}).", policy.scope, policy.role.as_str()), &policy))
            }
            Err(error) => Ok(refused(error)),
        }
    }

    #[tool(
        description = "Remove your policy at a target: bids there then wait for you again (or for a less \
                       specific policy of yours).",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn delete_policy(
        &self,
        Parameters(args): Parameters<PolicyAt>,
        context: RequestContext<RoleServer>,
    ) -> Answer {
        let acting = self.acting_in(&context)?;
        match acting.client.delete_policy(args.target.into()).await {
            Ok(()) => Ok(done("Policy removed.", &serde_json::json!({ "deleted": true }))),
            Err(error) => Ok(refused(error)),
        }
    }

    #[tool(
        description = "Read one of your orders with its payments: its status (CONFIRMED, FULFILLED, \
                       COMPLETED), paid_amount and outstanding. Only its buyer and seller can see an order.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn get_order(&self, Parameters(args): Parameters<OrderId>, context: RequestContext<RoleServer>) -> Answer {
        let acting = self.acting_in(&context)?;
        match acting.client.get_order(args.order_id).await {
            Ok(order) => Ok(done(order_summary(&order), &order)),
            Err(error) => Ok(refused(error)),
        }
    }

    #[tool(
        description = "Open a negotiation on an order you bought or sold, with its first bid: kind `refund` \
                       (as its buyer: ask for `amount` back, at most what was paid and confirmed less what was \
                       refunded, with terms {reason: not_as_described|damaged|missing|late|other, evidence?: up \
                       to 10 https URLs}; before the order completes) or `cancel` (either party, before the \
                       seller fulfils it; no amount; terms {reason}; a final offer the other side accepts or \
                       rejects), `schedule` (either party, before fulfilment; no amount; terms {windows: 1 to 5 \
                       {start, end} in the future, each at most 7 days, not overlapping, method: \
                       pickup|delivery|other, place?}; a counter proposes other windows, naming no amount) or \
                       `installments` (as its buyer; no amount; terms {installments: 2 to 12 {amount, due} \
                       summing exactly to what is outstanding, dates ascending, the first within 30 days}; \
                       counters change the split and dates, never the sum). One open negotiation per kind and \
                       order. Later moves are the bids': on a refund the buyer's counters never rise and the \
                       seller's never fall. Accepting a refund records it on the order; accepting a \
                       cancellation cancels the order and gives its unit back to the listing; accepting a \
                       schedule takes one window (its index, `chosen`) as the order's appointment; accepting \
                       a plan makes it the order's payment schedule.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn open_order_negotiation(
        &self,
        Parameters(args): Parameters<OpenOrderNegotiation>,
        context: RequestContext<RoleServer>,
    ) -> Answer {
        if let Err(refusal) = known_only(&args.unknown) {
            return Ok(refusal);
        }
        let acting = self.acting_in(&context)?;
        match with_key(&acting.client, args.idempotency_key).open_negotiation(args.order_id, &args.opening).await {
            Ok(opened) => {
                let verb = format!("opened a {} negotiation with", opened.thread.kind);
                Ok(done(bid_summary(&verb, &opened.bid, &opened.thread), &opened))
            }
            Err(error) => Ok(refused(error)),
        }
    }

    #[tool(
        description = "As an order's seller, say you handed it over (shipped, delivered, ready for pickup), \
                       with an optional reference (a tracking number, up to 200 characters) and note: the \
                       order becomes FULFILLED. Rules: only from CONFIRMED, only once.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn fulfil_order(
        &self,
        Parameters(args): Parameters<FulfilOrder>,
        context: RequestContext<RoleServer>,
    ) -> Answer {
        if let Err(refusal) = known_only(&args.unknown) {
            return Ok(refusal);
        }
        let acting = self.acting_in(&context)?;
        match with_key(&acting.client, args.idempotency_key).fulfil_order(args.order_id, &args.fulfilment).await {
            Ok(order) => Ok(done(order_summary(&order), &order)),
            Err(error) => Ok(refused(error)),
        }
    }

    #[tool(
        description = "As an order's buyer, say you received what you bought: the order becomes COMPLETED. \
                       Rules: only once the seller fulfilled it (FULFILLED); the server completes it itself \
                       some days after fulfilment if you do not.",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false)
    )]
    async fn complete_order(
        &self,
        Parameters(args): Parameters<OrderMove>,
        context: RequestContext<RoleServer>,
    ) -> Answer {
        let acting = self.acting_in(&context)?;
        match with_key(&acting.client, args.idempotency_key).complete_order(args.order_id).await {
            Ok(order) => Ok(done(order_summary(&order), &order)),
            Err(error) => Ok(refused(error)),
        }
    }

    #[tool(
        description = "As an order's buyer, record that you paid part or all of it outside the marketplace, \
                       with the transfer's reference: the payment is RECORDED until the seller confirms or \
                       disputes it. Rules: amount in minor units, at most the order's outstanding amount.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn record_payment(
        &self,
        Parameters(args): Parameters<RecordPayment>,
        context: RequestContext<RoleServer>,
    ) -> Answer {
        if let Err(refusal) = known_only(&args.unknown) {
            return Ok(refusal);
        }
        let acting = self.acting_in(&context)?;
        match with_key(&acting.client, args.idempotency_key).record_payment(args.order_id, &args.payment).await {
            Ok(answer) => Ok(done(payment_summary(&answer), &answer)),
            Err(error) => Ok(refused(error)),
        }
    }

    #[tool(
        description = "As an order's seller, answer a payment the buyer recorded: confirm that the money \
                       arrived (it then counts in paid_amount), or give dispute_reason to dispute it. Rules: \
                       only the seller, only once per payment, and a confirmation never takes paid_amount past \
                       the order's amount.",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false)
    )]
    async fn answer_payment(
        &self,
        Parameters(args): Parameters<AnswerPayment>,
        context: RequestContext<RoleServer>,
    ) -> Answer {
        let acting = self.acting_in(&context)?;
        let client = with_key(&acting.client, args.idempotency_key);
        let answer = match args.dispute_reason {
            None => client.confirm_payment(args.order_id, args.payment_id).await,
            Some(reason) => client.dispute_payment(args.order_id, args.payment_id, &PaymentDispute { reason }).await,
        };
        match answer {
            Ok(answer) => Ok(done(payment_summary(&answer), &answer)),
            Err(error) => Ok(refused(error)),
        }
    }

    #[tool(
        description = "List your orders (deals made by an accepted bid or a purchase), newest first: filter by \
                       role (buyer or seller) and listing_id; page with limit and cursor.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn list_my_orders(
        &self,
        Parameters(query): Parameters<OrderQuery>,
        context: RequestContext<RoleServer>,
    ) -> Answer {
        let acting = self.acting_in(&context)?;
        match acting.client.list_orders(&query).await {
            Ok(page) => Ok(done(page_summary(&page, "orders"), &page)),
            Err(error) => Ok(refused(error)),
        }
    }
}

fn order_summary(order: &OrderWithPayments) -> String {
    let view = &order.order;
    format!(
        "Order {} is {}: {} paid of {}, {} outstanding, {} payments.",
        view.id,
        view.status,
        money(view.paid_amount, view.currency),
        money(view.amount, view.currency),
        money(view.outstanding, view.currency),
        order.payments.len()
    )
}

fn payment_summary(answer: &PaymentAndOrder) -> String {
    format!(
        "Payment {} of {} is {}; order {} has {} outstanding.",
        answer.payment.id,
        money(answer.payment.amount, answer.payment.currency),
        answer.payment.status,
        answer.order.id,
        money(answer.order.outstanding, answer.order.currency)
    )
}

fn listing_summary(listing: &Listing) -> String {
    format!(
        "Listing {} \"{}\": {}, ask {}, {} of {} left, {}; negotiates with tier {} and up, at most {} bids a \
         thread.",
        listing.id,
        listing.title,
        listing.status,
        money(listing.ask_amount, listing.currency),
        listing.quantity_available,
        listing.quantity,
        if listing.negotiable { "negotiable" } else { "not negotiable (buy_now only)" },
        listing.min_negotiation_tier,
        listing.max_rounds
    )
}

/// The tools' router, for listing and calling them: built once, on first use, and shared by
/// every handler (the stateless protocol makes a handler per request).
pub(crate) fn router() -> Arc<ToolRouter<Haggle>> {
    static ROUTER: LazyLock<Arc<ToolRouter<Haggle>>> =
        LazyLock::new(|| Arc::new(Haggle::tool_router() + approvals::router()));
    ROUTER.clone()
}
