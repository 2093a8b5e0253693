//! Placing, countering and answering bids.

use chrono::{DateTime, Utc};
use haggle_api::OrderStatus;
use sqlx::PgConnection;
use uuid::Uuid;

use super::batch::Move;
use super::deadlock;
use super::live;
use super::order_negotiations;
use super::{Access, Error, Result, Rules};
use crate::db::agents::Caller;
use crate::db::listings::BuyerThreads;
use crate::db::moves::{AcceptMove, CounterMove, DecidedOn, Made, Mediation, PlaceMove};
use crate::db::rows::{BidContext, NewBid};
use crate::db::tasks::{Decided, NextRead};
use crate::db::{self, Bid, Listing, Order, Thread};
use crate::events::{EventType, NewEvent, Outbox, Written};
use crate::metrics::{self, MoveOutcome};
use haggle_domain::bid::{self, Action, Actor, Offered, Positions, Proposal, Transition};
use haggle_domain::issues::Issues;
use haggle_domain::money::Amount;
use haggle_domain::rejection::Validator;
use haggle_domain::{BidStatus, ListingStatus, Party, Reason, Rejection, ThreadKind};

/// The answers to a pending bid that end the thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Accept,
    Reject,
    Withdraw,
}

impl Answer {
    fn action(self) -> Action {
        match self {
            Answer::Accept => Action::Accept,
            Answer::Reject => Action::Reject,
            Answer::Withdraw => Action::Withdraw,
        }
    }

    /// Its kind of move, as the metrics name it (beside the batched kinds, `Move::KIND`).
    fn kind(self) -> &'static str {
        match self {
            Answer::Accept => AcceptMove::KIND,
            Answer::Reject => "rejections",
            Answer::Withdraw => "withdrawals",
        }
    }
}

#[derive(Debug)]
pub struct Answered {
    pub bid: Bid,
    pub thread: Thread,
    pub order: Option<Order>,
}

/// Checks the parts of a new bid that do not depend on the negotiation's state.
fn check_bid_fields(
    v: &mut Validator,
    amount: Option<Offered>,
    message: Option<&str>,
    terms: Option<&serde_json::Value>,
    expires_in: Option<i64>,
    rules: Rules,
) -> Option<Amount> {
    let amount = amount.and_then(|amount| v.check("amount", amount.validate(rules.amounts)));
    v.check("message", bid::check_message(message));
    v.check("terms", bid::check_terms(terms));
    if expires_in.is_some() {
        v.check("expires_in", bid::expires_in(expires_in, 0));
    }
    amount
}

fn not_found() -> Rejection {
    Rejection::NotFound { what: "bid" }
}

/// Opens a thread on a listing with the buyer's first bid. Unlocked, a placement that finds the
/// buyer's last thread there past its deadline (which must be ended first) is made under locks;
/// unlocked on a listing this instance remembers ([`live`]), it is decided on that listing
/// without reading, and made under locks if the listing changed since, if the buyer already has
/// a thread there, or if the decision refuses it.
pub async fn place(
    conn: &mut PgConnection,
    events: &mut Outbox,
    access: Access,
    caller: Caller,
    listing_id: Uuid,
    input: &Proposal,
    rules: Rules,
) -> Result<(Bid, Thread)> {
    let mut v = Validator::new();
    if input.amount.is_none() {
        v.fail("amount", "is required");
    }
    let amount =
        check_bid_fields(&mut v, input.amount, input.message.as_deref(), input.own_terms(), input.expires_in, rules);
    v.finish()?;
    let amount = amount.expect("validated");

    let not_found = || Rejection::NotFound { what: "listing" };
    let (listing, now, mine, remembered) = match &access {
        Access::Locked => {
            let locked = db::listings::lock_for_placement(conn, listing_id, caller.id).await?.ok_or_else(not_found)?;
            // Read in a statement of its own, after the locks: it sees every thread committed
            // while they were awaited.
            let mine = db::listings::buyer_threads(conn, listing_id, caller.id).await?;
            (locked.listing, locked.db_now, mine, false)
        }
        Access::Unlocked(batcher) => match batcher.live().listing(listing_id) {
            // The buyer is taken to have no thread there: the statement refuses the move if it has.
            Some(listing) => (listing, live::clock(&[]), BuyerThreads::default(), true),
            None => {
                let read =
                    db::listings::read_for_placement(conn, listing_id, caller.id).await?.ok_or_else(not_found)?;
                batcher.live().listing_seen(&read.listing);
                (read.listing, read.db_now, read.mine, false)
            }
        },
    };
    let batcher = access.batcher();
    if batcher.is_some() {
        metrics::move_read(PlaceMove::KIND, remembered);
    }
    match open(conn, events, &access, caller, &listing, now, mine, input, amount).await {
        Ok((bid, thread)) => {
            if let Some(batcher) = batcher {
                batcher.live().made_pending(&bid, &thread, &listing, None);
            }
            Ok((bid, thread))
        }
        Err(Error::Rejected(_) | Error::NeedsLocks) if remembered => {
            if let Some(batcher) = batcher {
                batcher.live().forget_listing(listing.id);
            }
            Err(Error::NeedsLocks)
        }
        Err(error) => Err(error),
    }
}

/// Opens the thread on `listing`, as read or remembered at `now`, for a buyer with `mine`.
#[allow(clippy::too_many_arguments)]
async fn open(
    conn: &mut PgConnection,
    events: &mut Outbox,
    access: &Access,
    caller: Caller,
    listing: &Listing,
    now: DateTime<Utc>,
    mine: BuyerThreads,
    input: &Proposal,
    amount: Amount,
) -> Result<(Bid, Thread)> {
    check_negotiable(listing, caller)?;
    if let (Some(thread_id), Some(deadline), Some(pending)) =
        (mine.active_thread_id, mine.active_expires_at, mine.active_last_bid_id)
    {
        if deadline > now {
            return Err(Rejection::ThreadActive { thread_id: Some(thread_id) }.into());
        }
        if !access.is_locked() {
            return Err(Error::NeedsLocks);
        }
        // The buyer's live thread ran out of time before the sweeper saw it: it ends now.
        db::moves::lock_thread(conn, thread_id).await?;
        record_expiry(conn, events, pending, BidStatus::Pending, deadline, now).await?;
    }
    if mine.thread_count >= i64::from(listing.max_threads_per_buyer) {
        return Err(Rejection::OfferLimitReached { limit: listing.max_threads_per_buyer }.into());
    }
    bid::check_opening(amount.minor_units(), bid::Ask(listing.ask_amount))?;
    listing.issues().read_terms(input.own_terms())?;
    let expires_in =
        bid::expires_in(input.expires_in, listing.bid_ttl_seconds).map_err(|m| Rejection::invalid("expires_in", m))?;
    let opening = NewBid {
        id: Uuid::now_v7(),
        author_id: caller.id,
        amount,
        currency: listing.currency,
        message: input.message.as_deref(),
        terms: input.own_terms(),
        is_final: bid::is_final(1, listing.max_rounds, false),
        expires_in,
    };
    // The rows the move writes, decided at `now`, and so its event.
    let bid = opening.row(Uuid::now_v7(), None, 1, now);
    let thread = Thread::opened_with(&bid, listing.id, caller.id, listing.seller_id, None);
    let event = NewEvent::bid(&bid, &thread);
    let place = PlaceMove {
        listing_id: listing.id,
        listing_updated_at: listing.updated_at,
        seller_id: listing.seller_id,
        max_threads_per_buyer: listing.max_threads_per_buyer,
        now,
        thread_status: thread.status,
        opening: bid.clone(),
        answer: keyed_answer(access, &bid, &thread, None),
    };
    // Under the locks, only a concurrent placement by the same buyer can have come first.
    let made =
        make(conn, events, access, place, vec![event]).await?.ok_or(Rejection::ThreadActive { thread_id: None })?;
    // The statement wrote the rows worked out above (a property the tests hold it to).
    Ok(made.rows)
}

/// Whether the caller may negotiate on the listing: someone else's, ACTIVE, negotiable, and open
/// to the caller's tier.
fn check_negotiable(listing: &Listing, caller: Caller) -> Result<()> {
    if listing.seller_id == caller.id {
        return Err(Rejection::OwnListing.into());
    }
    match listing.status {
        ListingStatus::Active => {}
        ListingStatus::Sold | ListingStatus::Withdrawn => {
            return Err(Rejection::ListingUnavailable { current_status: listing.status.as_str() }.into());
        }
    }
    if !listing.negotiable {
        return Err(Rejection::NegotiationNotAllowed {
            detail: format!(
                "this listing is not negotiable; buy it at the ask of {} {} with POST /v1/listings/{}/purchase",
                listing.ask_amount, listing.currency, listing.id
            ),
            listing_id: listing.id,
            ask_amount: listing.ask_amount,
        }
        .into());
    }
    if !caller.tier.may_negotiate(listing.min_negotiation_tier) {
        return Err(Rejection::NegotiationNotAllowed {
            detail: format!(
                "negotiating on this listing takes tier {} or above and yours is {}; any tier may buy it at the ask of {} {} with POST /v1/listings/{}/purchase",
                listing.min_negotiation_tier, caller.tier, listing.ask_amount, listing.currency, listing.id
            ),
            listing_id: listing.id,
            ask_amount: listing.ask_amount,
        }
        .into());
    }
    Ok(())
}

/// Decides `action` on the bid in `context`, recording the expiry if the bid ran out of time
/// (under locks; an unlocked move leaves that to its locked retry).
async fn decide(
    conn: &mut PgConnection,
    events: &mut Outbox,
    access: &Access,
    context: &BidContext,
    action: Action,
    party: Party,
) -> Result<Transition> {
    match bid::apply(&context.state(), action, Actor::Party(party), context.db_now) {
        Ok(transition) => Ok(transition),
        Err(Rejection::BidExpired) if !access.is_locked() => Err(Error::NeedsLocks),
        Err(Rejection::BidExpired) => {
            let bid = &context.bid;
            record_expiry(conn, events, bid.id, bid.status, bid.expires_at, context.db_now).await?;
            Err(Rejection::BidExpired.into())
        }
        Err(rejection) => Err(rejection.into()),
    }
}

/// Records that the pending bid ran out of time, with its event, as the state machine's expiry
/// decides it. The caller holds the thread's lock.
async fn record_expiry(
    conn: &mut PgConnection,
    events: &mut Outbox,
    bid_id: Uuid,
    status: BidStatus,
    expires_at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<()> {
    let expiry = bid::expire(status, expires_at, now)?;
    if let Some((bid, thread)) = db::sweeps::end_with_bid(conn, bid_id, expiry).await? {
        events.push(NewEvent::bid(&bid, &thread));
    }
    Ok(())
}

/// Records the end of threads that a sold-out or withdrawn listing closed.
pub(super) fn record_closed(events: &mut Outbox, ended: Vec<(Bid, Thread)>) {
    for (bid, thread) in ended {
        events.push(NewEvent::thread_closed(&thread, &bid));
    }
}

/// The compare-and-set changed nothing: a concurrent action won, or the bid's deadline passed
/// while this request waited for its locks (then the expiry is recorded).
async fn lost_race(conn: &mut PgConnection, events: &mut Outbox, bid_id: Uuid) -> Error {
    let stored = match db::moves::stored_status(conn, bid_id).await {
        Ok(stored) => stored,
        Err(error) => return error.into(),
    };
    match stored.status {
        BidStatus::Pending => {
            match record_expiry(conn, events, bid_id, stored.status, stored.expires_at, stored.db_now).await {
                Ok(()) => Rejection::BidExpired.into(),
                Err(error) => error,
            }
        }
        current @ (BidStatus::Countered | BidStatus::Accepted | BidStatus::Rejected | BidStatus::Expired) => {
            Rejection::InvalidTransition {
                current_status: current.as_str(),
                detail: format!("the bid is {current}: another action on it came first"),
            }
            .into()
        }
    }
}

/// Reads what a move on the bid decides on: under locks, or without; or, without locks, takes it
/// from what this instance remembers of the bid (`true` then: [`live`]).
async fn read_context(
    conn: &mut PgConnection,
    access: &Access,
    caller: Caller,
    bid_id: Uuid,
    kind: &'static str,
) -> Result<(BidContext, Party, bool)> {
    let (context, remembered) = match access {
        Access::Locked => (db::moves::lock_bid_context(conn, bid_id, caller.id).await?, false),
        Access::Unlocked(batcher) => {
            let remembered = batcher.live().take(bid_id, caller.id);
            metrics::move_read(kind, remembered.is_some());
            match remembered {
                Some(context) => (Some(context), true),
                None => (db::moves::read_bid_context(conn, bid_id, caller.id).await?, false),
            }
        }
    };
    let context = context.ok_or_else(not_found)?;
    let party = context.party_of(caller.id).ok_or_else(not_found)?;
    Ok((context, party, remembered))
}

/// A move decided on what this instance remembered and refused is decided again on the
/// database's rows, under locks: the refusal may come from what changed since.
fn again_if_remembered<T>(remembered: bool, outcome: Result<T>) -> Result<T> {
    match outcome {
        Err(Error::Rejected(_)) if remembered => Err(Error::NeedsLocks),
        outcome => outcome,
    }
}

/// Answers the pending bid with a counter: it becomes COUNTERED and the counter is the new
/// pending bid, one round later. The move, its events and the counter's task for a policy are
/// one statement.
pub async fn counter(
    conn: &mut PgConnection,
    events: &mut Outbox,
    access: Access,
    caller: Caller,
    bid_id: Uuid,
    input: &Proposal,
    rules: Rules,
) -> Result<(Bid, Thread)> {
    let checked = Checked::counter(input, rules)?;
    let (context, _, remembered) = read_context(conn, &access, caller, bid_id, CounterMove::KIND).await?;
    let countered = counter_on(conn, events, access, caller, &context, checked, rules, None).await;
    again_if_remembered(remembered, countered.map(|(bid, thread, _)| (bid, thread)))
}

/// Counters the bid of `context`, read with its thread locked in the caller's transaction (by
/// the executor, with the task that asked for the move), as [`counter`] would under locks.
pub async fn counter_locked(
    conn: &mut PgConnection,
    events: &mut Outbox,
    caller: Caller,
    context: &BidContext,
    input: &Proposal,
    rules: Rules,
) -> Result<(Bid, Thread)> {
    let checked = Checked::counter(input, rules)?;
    let (bid, thread, _) = counter_on(conn, events, Access::Locked, caller, context, checked, rules, None).await?;
    Ok((bid, thread))
}

/// A policy's counter, under locks, whose statement also records the policy's decision
/// (`decided`) and takes the task it queues for the other side's policy, if any, with what the
/// decision on it reads: the executor's move when it chains. On `held`, the bid read with its
/// thread locked in the caller's transaction, or else on `bid_id`, read and locked here.
#[allow(clippy::too_many_arguments)]
pub async fn counter_chaining(
    conn: &mut PgConnection,
    events: &mut Outbox,
    caller: Caller,
    held: Option<&BidContext>,
    bid_id: Uuid,
    input: &Proposal,
    rules: Rules,
    decided: Decided<'_>,
) -> Result<(Bid, Thread, Option<NextRead>)> {
    let checked = Checked::counter(input, rules)?;
    let read;
    let context = match held {
        Some(context) => context,
        None => {
            read = read_context(conn, &Access::Locked, caller, bid_id, CounterMove::KIND).await?.0;
            &read
        }
    };
    counter_on(conn, events, Access::Locked, caller, context, checked, rules, Some(decided)).await
}

/// A counter whose fields have been checked, with its amount validated if it names one.
struct Checked<'a> {
    amount: Option<Amount>,
    input: &'a Proposal,
}

impl<'a> Checked<'a> {
    fn counter(input: &'a Proposal, rules: Rules) -> Result<Checked<'a>> {
        let mut v = Validator::new();
        let amount = check_bid_fields(
            &mut v,
            input.amount,
            input.message.as_deref(),
            input.own_terms(),
            input.expires_in,
            rules,
        );
        v.finish()?;
        Ok(Checked { amount, input })
    }
}

/// Counters the bid of `context` for the caller, a party to it; under locks, with the policy's
/// decision `chain` recorded by the counter's statement, which then reads the other side's
/// next decision ([`counter_chaining`]).
#[allow(clippy::too_many_arguments)]
async fn counter_on(
    conn: &mut PgConnection,
    events: &mut Outbox,
    access: Access,
    caller: Caller,
    context: &BidContext,
    Checked { amount, input }: Checked<'_>,
    rules: Rules,
    chain: Option<Decided<'_>>,
) -> Result<(Bid, Thread, Option<NextRead>)> {
    let bid_id = context.bid.id;
    let party = context.party_of(caller.id).ok_or_else(not_found)?;
    if context.thread.kind != ThreadKind::Price {
        // A negotiation on an order moves under locks only, never through the batcher.
        if !access.is_locked() {
            return Err(Error::NeedsLocks);
        }
        let transition = decide(conn, events, &access, context, Action::Counter, party).await?;
        return match order_negotiations::counter(conn, events, caller, context, party, transition, input, amount)
            .await?
        {
            Some((bid, thread)) => Ok((bid, thread, None)),
            None => Err(lost_race(conn, events, bid_id).await),
        };
    }
    let amount = amount.ok_or_else(|| Rejection::invalid("amount", "is required"))?;
    let transition = decide(conn, events, &access, context, Action::Counter, party).await?;
    let issues = context.listing.issues();
    let (bid, mut thread) = counter_rows(context, caller, party, amount, input, &issues)?;
    let now = context.db_now;
    let mark = deadlock::mark(conn, context, &issues, &bid, rules).await?;
    if let Some(mark) = &mark {
        thread.deadlock_at = Some(thread.deadlock_at.unwrap_or(now));
        thread.mediation = Some(mark.suggestion.clone());
        thread.mediation_agreed = mark.agreed.clone();
    }
    let mut made_events = vec![NewEvent::bid(&bid, &thread)];
    made_events.extend(mark.iter().map(|mark| NewEvent::deadlock(&thread, &mark.suggestion, &mark.dropped)));
    let mediation = mark.map(|mark| Mediation { suggestion: mark.suggestion, agreed: mark.agreed });
    let counter = CounterMove {
        thread_id: context.thread.id,
        bid_id,
        now,
        effect: transition.into(),
        counter: bid.clone(),
        mediation,
        decided_on: (!access.is_locked()).then(|| DecidedOn::of(context)),
        answer: keyed_answer(&access, &bid, &thread, None),
    };
    let made = match chain {
        Some(decided) => make_chained(conn, events, counter, made_events, decided).await?,
        None => make(conn, events, &access, counter, made_events).await?.map(|made| (made, None)),
    };
    let Some((made, next)) = made else {
        return Err(lost_race(conn, events, bid_id).await);
    };
    if let Some(batcher) = access.batcher() {
        let (bid, thread) = &made.rows;
        batcher.live().made_pending(bid, thread, &context.listing, Some(context.bid.amount));
    }
    let (bid, thread) = made.rows;
    Ok((bid, thread, next))
}

/// The rows a counter of `amount` by `caller` (the thread's `party`) on the bid of `context`
/// writes, decided at the context's clock, before any mark of the mediator: the new pending bid
/// and its thread moved on. Refused if the counter breaks the bid rules or the listing's terms
/// (its `issues`).
fn counter_rows(
    context: &BidContext,
    caller: Caller,
    party: Party,
    amount: Amount,
    input: &Proposal,
    issues: &Issues,
) -> Result<(Bid, Thread)> {
    // The responder's own previous position: the bid this one answered, or the ask for the
    // seller's first counter.
    let own_previous = context.parent_amount.unwrap_or(context.listing.ask_amount);
    let positions = Positions { pending: context.bid.amount, own_previous };
    bid::check_counter_on(party, amount.minor_units(), positions, context.listing.counter_terms())?;
    let round = context.bid.round + 1;
    let expires_in = bid::expires_in(input.expires_in, context.listing.bid_ttl_seconds)
        .map_err(|m| Rejection::invalid("expires_in", m))?;
    let terms = if input.carries_terms_over() { context.bid.terms.as_ref() } else { input.own_terms() };
    issues.read_terms(terms)?;
    let counter = NewBid {
        id: Uuid::now_v7(),
        author_id: caller.id,
        amount,
        currency: context.bid.currency,
        message: input.message.as_deref(),
        terms,
        is_final: bid::is_final(round, context.listing.max_rounds, input.is_final),
        expires_in,
    };
    // The rows the move writes, decided at `now`, and so its event.
    let now = context.db_now;
    let bid = counter.row(context.thread.id, Some(context.bid.id), round, now);
    let thread = Thread {
        rounds: round,
        last_bid_id: bid.id,
        expires_at: Some(bid.expires_at),
        updated_at: now,
        ..context.thread.0.clone()
    };
    Ok((bid, thread))
}

/// A policy's counter on a price bid held under locks, worked out without the database: the
/// move to write, its rows and its event, for the executor to write together with the moves
/// chained after it ([`db::moves::counter_chain`]), the thread's bids before it having `amounts`
/// and `terms` (round 1 first). `None` where the move must be made as any other: its amount or the bid's
/// state refused, a bid about to run out, or the mediator to consult (a thread marked
/// deadlocked, or one the counter deadlocks), which reads the database.
pub fn plan_counter(
    context: &BidContext,
    caller: Caller,
    input: &Proposal,
    rules: Rules,
    amounts: &[i64],
    terms: &[Option<serde_json::Value>],
) -> Option<PlannedCounter> {
    let party = context.party_of(caller.id)?;
    if context.thread.kind != ThreadKind::Price {
        return None;
    }
    let checked = Checked::counter(input, rules).ok()?;
    let amount = checked.amount?;
    let transition = bid::apply(&context.state(), Action::Counter, Actor::Party(party), context.db_now).ok()?;
    // The move is written a little later: a bid about to run out is left to a statement of its own.
    if context.bid.expires_at - context.db_now < chrono::Duration::seconds(1) {
        return None;
    }
    let issues = context.listing.issues();
    let (bid, thread) = counter_rows(context, caller, party, amount, input, &issues).ok()?;
    if !deadlock::unmarked(context, &issues, &bid, rules, amounts, terms) {
        return None;
    }
    let event = NewEvent::bid(&bid, &thread);
    let counter = CounterMove {
        thread_id: context.thread.id,
        bid_id: context.bid.id,
        now: context.db_now,
        effect: transition.into(),
        counter: bid,
        mediation: None,
        decided_on: None,
        answer: None,
    };
    Some(PlannedCounter { counter, thread, event })
}

/// Writes counters worked out by [`plan_counter`] (`moves`, each on the rows of the one before,
/// with their events `made_events`), their decisions and the tasks of the sides that answer them
/// (`answerers`), in one statement ([`db::moves::counter_chain`]), which also locks and reads
/// `listing` if named; then their events go to the outbox. `None`, with nothing written, if the
/// first one's compare-and-set failed.
pub async fn write_chain(
    conn: &mut PgConnection,
    events: &mut Outbox,
    moves: &[CounterMove],
    made_events: Vec<NewEvent>,
    answerers: &[Uuid],
    decided: Decided<'_>,
    listing: Option<Uuid>,
) -> Result<Option<Option<(Listing, DateTime<Utc>)>>> {
    plan_generically(conn, events).await?;
    let made = db::moves::counter_chain(conn, moves, answerers, decided, listing).await?;
    let outcome = if made.is_some() { MoveOutcome::Made } else { MoveOutcome::Lost };
    for _ in moves {
        metrics::move_made(CounterMove::KIND, outcome);
    }
    if made.is_some() {
        for event in made_events {
            events.push(event);
        }
    }
    Ok(made)
}

/// Accepts the pending bid of `context`, read under locks, its listing's included, in the
/// caller's transaction: as [`accept_on_locked_thread`] does after its own read.
pub async fn accept_read(
    conn: &mut PgConnection,
    events: &mut Outbox,
    caller: Caller,
    context: &BidContext,
) -> Result<Answered> {
    let party = context.party_of(caller.id).ok_or_else(not_found)?;
    answer_on(conn, events, Access::Locked, Answer::Accept, None, context, party, false).await
}

/// A counter worked out by [`plan_counter`], not written yet: the move (its new bid
/// `counter.counter`), the thread as it leaves it, and its event.
#[derive(Debug)]
pub struct PlannedCounter {
    pub counter: CounterMove,
    pub thread: Thread,
    pub event: NewEvent,
}

/// Makes a policy's counter under locks as [`make`] does, its statement recording the decision
/// and taking the other side's task ([`db::moves::counter_chained`]).
async fn make_chained(
    conn: &mut PgConnection,
    events: &mut Outbox,
    counter: CounterMove,
    made_events: Vec<NewEvent>,
    decided: Decided<'_>,
) -> Result<Option<(Made<(Bid, Thread)>, Option<NextRead>)>> {
    plan_generically(conn, events).await?;
    let made = db::moves::counter_chained(conn, &counter, decided).await?;
    metrics::move_made(CounterMove::KIND, if made.is_some() { MoveOutcome::Made } else { MoveOutcome::Lost });
    if made.is_some() {
        for event in made_events {
            events.push(event);
        }
    }
    Ok(made)
}

/// A keyed request's answer to the move that writes `bid` and `thread`, for its statement to
/// store with it (unlocked only: under locks, the request stores its answer in its transaction).
fn keyed_answer(
    access: &Access,
    bid: &Bid,
    thread: &Thread,
    order: Option<&Order>,
) -> Option<crate::db::idempotency::MoveAnswer> {
    access.batcher().and_then(|batcher| batcher.keyed()).map(|keyed| keyed.answer(bid, thread, order))
}

/// Makes a move with its events: unlocked, through the batcher (which asks for locks if it
/// could not make it), the events written by the move's statement; under locks, in the caller's
/// transaction, its events left in the outbox for the commit to write. `None` if, under locks,
/// the move's compare-and-set failed: its events are dropped.
async fn make<M: Move>(
    conn: &mut PgConnection,
    events: &mut Outbox,
    access: &Access,
    what: M,
    made_events: Vec<NewEvent>,
) -> Result<Option<Made<M::Made>>> {
    match access {
        Access::Unlocked(batcher) => {
            if batcher.keyed().is_some() && !what.answered() {
                // A keyed request's answer is stored with its effect: made under locks, in the
                // request's transaction, since this move's statement cannot store it.
                return Err(Error::NeedsLocks);
            }
            let count = made_events.len() as i64;
            let recipients = db::events::audiences(&made_events);
            let made = batcher.make(what, made_events).await;
            metrics::move_made(
                M::KIND,
                match &made {
                    Ok(Some(_)) => MoveOutcome::Made,
                    Ok(None) => MoveOutcome::Retried,
                    Err(_) => MoveOutcome::Unknown,
                },
            );
            let made = made?.ok_or(Error::NeedsLocks)?;
            events.wrote(Written {
                events: count,
                tasks: made.queued.into(),
                deliveries: made.delivering.into(),
                recipients,
            });
            Ok(Some(made))
        }
        Access::Locked => {
            plan_generically(conn, events).await?;
            let made = M::make(conn, std::slice::from_ref(&what), &[]).await?.pop().flatten();
            metrics::move_made(M::KIND, if made.is_some() { MoveOutcome::Made } else { MoveOutcome::Lost });
            if let Some(made) = &made {
                for event in made_events {
                    events.push(event);
                }
                events.add(Written { tasks: made.queued.into(), ..Written::default() });
            }
            Ok(made)
        }
    }
}

/// Has the rest of the transaction of `events` run a move's statements on their generic plans
/// ([`db::moves::plan_generically`]), switching it the first time only.
async fn plan_generically(conn: &mut PgConnection, events: &mut Outbox) -> Result<()> {
    if events.needs_generic_plans() {
        db::moves::plan_generically(conn).await?;
    }
    Ok(())
}

/// Accepts, rejects or withdraws the pending bid, which ends its thread. Accepting creates the
/// order, and the listing's last unit ends the listing's other live threads. Unlocked, only an
/// acceptance that leaves units on the listing is made (in one statement).
pub async fn answer(
    conn: &mut PgConnection,
    events: &mut Outbox,
    access: Access,
    caller: Caller,
    bid_id: Uuid,
    answer: Answer,
) -> Result<Answered> {
    answer_with_terms(conn, events, access, caller, bid_id, answer, None).await
}

/// [`answer`], with the terms an acceptance carries: on a schedule, the window it takes
/// (`{"chosen": i}`, required there); on any other kind, none may be given.
pub async fn answer_with_terms(
    conn: &mut PgConnection,
    events: &mut Outbox,
    access: Access,
    caller: Caller,
    bid_id: Uuid,
    answer: Answer,
    acceptance: Option<&serde_json::Value>,
) -> Result<Answered> {
    match (&access, answer) {
        // Accepting changes the listing, which is locked before the thread.
        (Access::Locked, Answer::Accept) => {
            if !db::moves::lock_listing_of_bid(conn, bid_id, caller.id).await? {
                return Err(not_found().into());
            }
        }
        (Access::Locked, Answer::Reject | Answer::Withdraw) | (Access::Unlocked(_), Answer::Accept) => {}
        // Rejecting and withdrawing are rarer, and end the thread in the transaction that records
        // any expiry found on the way: asked for before anything is read. What this instance
        // remembers of the bid stays; a move decided on it is checked by its compare-and-set.
        (Access::Unlocked(_), Answer::Reject | Answer::Withdraw) => return Err(Error::NeedsLocks),
    }
    let (context, party, remembered) = read_context(conn, &access, caller, bid_id, answer.kind()).await?;
    answer_on(conn, events, access, answer, acceptance, &context, party, remembered).await
}

/// Accepts the pending bid on a thread the caller's transaction has locked already (the
/// executor's, which took the task with the thread's lock or made the counter before on it), as
/// [`answer`] would under locks: the
/// listing is locked and the bid read again in one statement. The listing is locked after the
/// thread here, the one exception to the order of locks: a deadlock it meets with a move that
/// holds the listing is PostgreSQL's to detect, and the executor's task is tried again.
pub async fn accept_on_locked_thread(
    conn: &mut PgConnection,
    events: &mut Outbox,
    caller: Caller,
    bid_id: Uuid,
) -> Result<Answered> {
    let context = db::moves::lock_listing_reading_bid(conn, bid_id, caller.id).await?.ok_or_else(not_found)?;
    accept_read(conn, events, caller, &context).await
}

/// Answers the bid of `context`, read for `answer` (with what this instance remembered if
/// `remembered`), for the party `party`.
#[allow(clippy::too_many_arguments)]
async fn answer_on(
    conn: &mut PgConnection,
    events: &mut Outbox,
    access: Access,
    answer: Answer,
    acceptance: Option<&serde_json::Value>,
    context: &BidContext,
    party: Party,
    remembered: bool,
) -> Result<Answered> {
    let bid_id = context.bid.id;
    let on_order = context.thread.kind != ThreadKind::Price;
    if acceptance.is_some() && (answer != Answer::Accept || context.thread.kind != ThreadKind::Schedule) {
        return Err(Rejection::invalid("terms", "only the acceptance of a schedule carries terms (`chosen`)").into());
    }
    if on_order && !access.is_locked() {
        // A negotiation on an order moves under locks only, never through the batcher.
        return Err(Error::NeedsLocks);
    }
    let transition =
        again_if_remembered(remembered, decide(conn, events, &access, context, answer.action(), party).await)?;
    match transition {
        Transition::Accept if on_order => {
            match order_negotiations::accept(conn, events, context, party, transition, acceptance).await? {
                Some((bid, thread, order)) => Ok(Answered { bid, thread, order: Some(order) }),
                None => Err(lost_race(conn, events, bid_id).await),
            }
        }
        Transition::Accept => again_if_remembered(remembered, accept(conn, events, access, context, transition).await),
        Transition::Reject(_) | Transition::Expire => {
            let ended = db::sweeps::end_with_bid(conn, bid_id, transition).await?;
            metrics::move_made(answer.kind(), if ended.is_some() { MoveOutcome::Made } else { MoveOutcome::Lost });
            match ended {
                Some((bid, thread)) => {
                    events.push(NewEvent::bid(&bid, &thread));
                    Ok(Answered { bid, thread, order: None })
                }
                None => Err(lost_race(conn, events, bid_id).await),
            }
        }
        Transition::Counter | Transition::Close(_) => {
            unreachable!("a party's accept, reject or withdrawal neither counters nor closes")
        }
    }
}

/// Accepts the bid in `context`, which the state machine allowed: one statement makes the
/// order, ends the thread, takes the unit off the listing and writes their events; a sale of
/// the last unit then ends the listing's other threads.
async fn accept(
    conn: &mut PgConnection,
    events: &mut Outbox,
    access: Access,
    context: &BidContext,
    transition: Transition,
) -> Result<Answered> {
    let listing = &context.listing.0;
    if let status @ (ListingStatus::Sold | ListingStatus::Withdrawn) = listing.status {
        return Err(Rejection::ListingUnavailable { current_status: status.as_str() }.into());
    }
    // Unlocked, the last unit is not sold: that ends the other threads, more than one statement.
    let min_available = if access.is_locked() { 1 } else { 2 };
    if listing.quantity_available < min_available {
        return Err(Error::NeedsLocks);
    }
    // The rows the move writes, decided at `now`, and so its events.
    let now = context.db_now;
    let bid = Bid {
        status: transition.bid_status(),
        reason: Some(transition.reason()),
        responded_at: Some(now),
        updated_at: now,
        ..context.bid.0.clone()
    };
    let thread = Thread {
        status: transition.thread_status(),
        closed_reason: Some(transition.reason()),
        expires_at: None,
        updated_at: now,
        ..context.thread.0.clone()
    };
    let order = Order {
        id: Uuid::now_v7(),
        listing_id: listing.id,
        thread_id: Some(thread.id),
        bid_id: Some(bid.id),
        buyer_id: thread.buyer_id,
        seller_id: thread.seller_id,
        amount: bid.amount,
        currency: bid.currency,
        terms: bid.terms.clone(),
        status: OrderStatus::Confirmed,
        paid_amount: 0,
        fulfilled_at: None,
        fulfilment_reference: None,
        fulfilment_note: None,
        completed_at: None,
        refunded_amount: 0,
        cancelled_at: None,
        appointment_start: None,
        appointment_end: None,
        appointment_method: None,
        appointment_place: None,
        appointment_thread_id: None,
        plan: None,
        plan_base: None,
        plan_thread_id: None,
        approval: None,
        created_at: now,
        updated_at: now,
    };
    let quantity_available = listing.quantity_available - 1;
    let listing = Listing {
        quantity_available,
        status: if quantity_available == 0 { ListingStatus::Sold } else { listing.status },
        updated_at: now,
        ..listing.clone()
    };
    let mut made_events = vec![NewEvent::bid(&bid, &thread), NewEvent::order_created(&order)];
    if listing.status == ListingStatus::Sold {
        made_events.push(NewEvent::listing(EventType::ListingSold, &listing));
    }
    let accept = AcceptMove {
        effect: transition.into(),
        order_status: order.status,
        listing_id: listing.id,
        thread_id: thread.id,
        bid_id: bid.id,
        order_id: order.id,
        min_available,
        now,
        thread_updated_at: (!access.is_locked()).then_some(context.thread.updated_at),
        answer: keyed_answer(&access, &bid, &thread, Some(&order)),
    };
    let Some(made) = make(conn, events, &access, accept, made_events).await? else {
        return Err(lost_race(conn, events, context.bid.id).await);
    };
    let accepted = made.rows;
    if let Some(batcher) = access.batcher() {
        batcher.live().listing_seen(&accepted.listing);
    }
    if accepted.listing.status == ListingStatus::Sold {
        let ended = db::sweeps::end_listing_threads(conn, context.listing.id, Reason::ListingSold).await?;
        record_closed(events, ended);
    }
    Ok(Answered { bid: accepted.bid, thread: accepted.thread, order: Some(accepted.order) })
}
