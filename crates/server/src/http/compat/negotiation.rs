//! `POST /proposals`, `POST /proposals/{id}/counter` and `POST /api/v1/negotiations/messages`:
//! the buyer's moves, each answered with the seller's.
//!
//! The buyer's move commits like any other, its answer stored with it under its idempotency
//! key. While the buyer's bid then waits for the seller, the route waits up to [`SELLER_WAIT`]
//! for the seller's policy to answer it, reads the thread again, answers with the seller's move
//! and replaces the stored answer with that one, so that a replay gets what the first request
//! got. A seller that does not answer in time has the buyer's bid withdrawn by the server: the
//! negotiation ends `rejected`, so that no thread is left waiting for a caller that has gone.
//! That is also why a proposal is refused at once (`negotiation_unavailable`) when no policy of
//! the seller's would answer it.
//!
//! The seller's last word (a counter marked final, or its policy's last counter) is answered as
//! the IAB reference seller answers it: a counter that meets it accepts it, and any other
//! counter gets it restated, recording nothing, so that the buyer can accept or walk away.

use std::time::Duration;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::Number;
use sqlx::PgConnection;
use tokio::time::Instant;
use uuid::Uuid;

use super::view::{self, Status, View};
use super::{MoneyInput, body_key, check, invalid, raw, uuid};
use crate::db;
use crate::db::agents::Caller;
use crate::http::bids::wait_for_change;
use crate::http::error::{ApiError, Code};
use crate::http::extract::{Id, IdempotencyKey, JsonBody};
use crate::http::{AppState, Reply, Write};
use crate::market::negotiation::{self, Answer};
use crate::market::{self, Access};
use haggle_domain::bid::Proposal;
use haggle_domain::money::{self, Amount};
use haggle_domain::strategy::Policy;
use haggle_domain::{FieldError, Party, Rejection, bid};

/// How long a buyer's move waits for the seller's answer before the server withdraws it.
pub const SELLER_WAIT: Duration = Duration::from_secs(5);

// ----- requests -----

/// `POST /proposals`. The other fields IAB clients send are accepted and ignored.
#[derive(Debug, Deserialize)]
pub struct NewProposal {
    product_id: String,
    price: Number,
}

/// `POST /proposals/{id}/counter`, the ad-buyer guide's counter, accept and decline.
#[derive(Debug, Deserialize)]
pub struct LegacyMove {
    price: Option<Number>,
    buyer_price: Option<Number>,
    action: Option<LegacyAction>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum LegacyAction {
    Counter,
    Accept,
    #[serde(alias = "reject")]
    Decline,
}

/// `POST /api/v1/negotiations/messages`.
#[derive(Debug, Deserialize)]
pub struct Message {
    idempotency_key: String,
    action: MessageAction,
    proposal_id: Option<String>,
    negotiation_id: Option<String>,
    buyer_price: Option<MoneyInput>,
    rationale: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum MessageAction {
    Counter,
    Accept,
    Reject,
    FinalOffer,
}

// ----- the buyer's moves -----

/// What the buyer does on its proposal.
#[derive(Debug, Clone)]
enum Play {
    Counter {
        amount: Amount,
        is_final: bool,
        message: Option<String>,
    },
    Accept,
    /// Rejects the seller's pending counter, or withdraws the buyer's own pending bid.
    Decline,
}

/// The caller's proposal, before anything is claimed: 404 if the caller cannot see the
/// thread, 403 if it is the seller of it.
async fn find_proposal(state: &AppState, caller: Caller, id: Uuid) -> Result<(db::Thread, Vec<db::Bid>), ApiError> {
    let (thread, bids) = db::threads::get_thread_with_bids(&state.pool, id, Some(caller.id))
        .await?
        .ok_or_else(|| ApiError::not_found("proposal"))?;
    if thread.buyer_id != caller.id {
        return Err(ApiError::new(
            Code::Forbidden,
            "these routes act for the buyer of a proposal; as its seller, answer the pending bid with \
             POST /v1/bids/{id}/counter, /accept or /reject",
        ));
    }
    Ok((thread, bids))
}

/// Names the market's field errors as the request named the fields.
fn renamed(error: market::Error, names: &[(&str, &str)]) -> market::Error {
    match error {
        market::Error::Rejected(Rejection::Validation(errors)) => Rejection::Validation(
            errors
                .into_iter()
                .map(|mut error| {
                    if let Some((_, to)) = names.iter().find(|(from, _)| *from == error.field) {
                        error.field = (*to).to_owned();
                    }
                    error
                })
                .collect(),
        )
        .into(),
        other => other,
    }
}

/// How a route words its requests and answers.
struct Dialect {
    /// The market's field names, as this route's request names them.
    names: &'static [(&'static str, &'static str)],
    render: fn(&View) -> Reply,
}

const PROPOSALS: Dialect = Dialect { names: &[("amount", "price")], render: view::render_proposal };
const LEGACY: Dialect = Dialect { names: &[("amount", "price")], render: view::render_legacy };
const LEGACY_BUYER_PRICE: Dialect = Dialect { names: &[("amount", "buyer_price")], render: view::render_legacy };
const MESSAGES: Dialect = Dialect {
    names: &[("amount", "buyer_price.amount_micros"), ("message", "rationale")],
    render: view::render_message,
};

/// Plays the buyer's move on the thread, in one transaction with its idempotency key, then
/// answers as [`conclude`] does.
async fn play(
    state: &AppState,
    caller: Caller,
    (key, digest): (IdempotencyKey, [u8; 32]),
    thread_id: Uuid,
    play: Play,
    dialect: &Dialect,
) -> Response {
    let mut command = match Write::begin(state, caller.id, key, digest).await {
        Ok(command) => command,
        Err(answer) => return answer,
    };
    let outcome = async {
        let (conn, events) = command.parts().await?;
        let before = View::read(conn, caller, thread_id).await?;
        // The thread's latest bid is its pending one while it is live; on an ended thread the
        // state machine refuses a move with the bid's status.
        let pending = before.last_bid;
        let last_word = before.action == Some(view::IabMove::FinalOffer);
        match (play, before.standing) {
            // A price that meets the seller's is an acceptance of it.
            (Play::Counter { amount, .. }, Some(standing)) if amount.minor_units() >= standing => {
                negotiation::answer(conn, events, Access::Locked, caller, pending, Answer::Accept).await.map(drop)?;
            }
            (Play::Counter { amount, .. }, Some(_)) if last_word => {
                return Ok(Played::Unchanged(before.restating(amount.minor_units())));
            }
            (Play::Counter { amount, is_final, message }, _) => {
                let offer = Proposal { message, ..Proposal::of(amount).finally(is_final) };
                negotiation::counter(conn, events, Access::Locked, caller, pending, &offer, state.settings.rules)
                    .await
                    .map(drop)?;
            }
            // Already done: the answer says how it ended, and nothing is recorded.
            (Play::Accept, _) if before.status == Status::Accepted => return Ok(Played::Unchanged(before)),
            (Play::Decline, _) if before.status != Status::Active => return Ok(Played::Unchanged(before)),
            (Play::Accept, _) => {
                negotiation::answer(conn, events, Access::Locked, caller, pending, Answer::Accept).await.map(drop)?
            }
            (Play::Decline, _) => {
                let answer = match before.last_author {
                    Party::Seller => Answer::Reject,
                    Party::Buyer => Answer::Withdraw,
                };
                negotiation::answer(conn, events, Access::Locked, caller, pending, answer).await.map(drop)?;
            }
        }
        View::read(conn, caller, thread_id).await.map(Played::Moved)
    }
    .await;
    match outcome {
        // Nothing to commit, and nothing to store: a retry gets the same answer from the same
        // state.
        Ok(Played::Unchanged(view)) => (dialect.render)(&view).into_response(),
        Ok(Played::Moved(view)) => conclude(state, caller, command, Ok(view), dialect.render).await,
        Err(error) => conclude(state, caller, command, Err(renamed(error, dialect.names)), dialect.render).await,
    }
}

/// What the buyer's move came to.
enum Played {
    /// The move was made; the proposal after it.
    Moved(View),
    /// Nothing was recorded: the answer restates the seller's last word, or how the proposal
    /// already ended.
    Unchanged(View),
}

/// Commits the move with its answer. If the buyer's bid now waits for the seller, waits for the
/// seller's answer (up to [`SELLER_WAIT`], within the request's time limit), withdraws the bid
/// if none came, answers with the thread as it then is, and stores that answer for replays in
/// place of the committed one.
async fn conclude(
    state: &AppState,
    caller: Caller,
    command: Write,
    outcome: market::Result<View>,
    render: fn(&View) -> Reply,
) -> Response {
    let view = match outcome {
        Ok(view) => view,
        Err(error) => return command.finish(Err(error)).await,
    };
    let Some(bid_id) = view.awaiting else {
        return command.finish(Ok(render(&view))).await;
    };
    let committed = match command.commit(Ok(render(&view))).await {
        Ok(committed) => committed,
        Err(response) => return response,
    };
    // The time limit answers 503 when it runs out, which must not happen to a committed move.
    let wait = SELLER_WAIT.min(state.settings.request_timeout / 3);
    let reply = match answered(state, caller, view.thread_id, bid_id, wait).await {
        Ok(fresh) => render(&fresh),
        Err(error) => {
            tracing::warn!(?error, "could not read the proposal after the seller's answer");
            committed.reply.clone()
        }
    };
    committed.complete(&state.pool, reply).await.into_response()
}

/// The proposal once the seller has answered the buyer's bid, or, if it has not within
/// `wait`, after the server withdrew the bid.
async fn answered(
    state: &AppState,
    caller: Caller,
    thread_id: Uuid,
    bid_id: Uuid,
    wait: Duration,
) -> market::Result<View> {
    let deadline = Instant::now() + wait;
    if let Err(error) = wait_for_change(state, caller, bid_id, wait).await {
        // Too many waits open on this instance: look again now and then instead.
        tracing::debug!(code = error.code.as_str(), "polling for the seller's answer");
        while Instant::now() < deadline && read(state, caller, thread_id).await?.awaiting.is_some() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let fresh = read(state, caller, thread_id).await?;
    if fresh.awaiting.is_none() {
        return Ok(fresh);
    }
    let mut command = Write::new(state);
    match command
        .run(|conn, events, access| {
            Box::pin(negotiation::answer(conn, events, access, caller, bid_id, Answer::Withdraw))
        })
        .await
    {
        Ok(_) => {
            command.done().await?;
            tracing::info!(%thread_id, "the seller did not answer a compatibility route in time; the bid was withdrawn");
            Ok(read(state, caller, thread_id).await?.unanswered(wait))
        }
        // The seller answered meanwhile (or the bid expired): the thread says how.
        Err(market::Error::Rejected(_)) => {
            drop(command);
            read(state, caller, thread_id).await
        }
        Err(error) => Err(error),
    }
}

async fn read(state: &AppState, caller: Caller, thread_id: Uuid) -> market::Result<View> {
    let mut conn = state.pool.acquire().await?;
    View::read(&mut conn, caller, thread_id).await
}

/// Whether a policy of the seller's would answer a proposal on the listing: a refusal at once
/// is better than a thread nobody answers.
async fn require_negotiator(conn: &mut PgConnection, listing_id: Uuid) -> Result<(), ApiError> {
    let policy = db::policies::seller_policy(conn, listing_id).await?;
    let policy = policy.and_then(|policy| serde_json::from_value::<Policy>(policy.0).ok());
    match policy {
        Some(policy) if !policy.require_approval => Ok(()),
        Some(_) => Err(ApiError::new(
            Code::NegotiationUnavailable,
            "the seller approves every move itself, and this protocol cannot wait for it; negotiate with \
             POST /v1/listings/{id}/bids, or buy at the ask",
        )),
        None => Err(ApiError::new(
            Code::NegotiationUnavailable,
            "no policy negotiates for this product's seller, and this protocol cannot wait for the seller; \
             negotiate with POST /v1/listings/{id}/bids, or buy at the ask",
        )),
    }
}

// ----- handlers -----

/// `POST /proposals`: the buyer's opening bid on the product, answered with the seller's move.
pub async fn open_proposal(
    State(state): State<AppState>,
    caller: Caller,
    key: IdempotencyKey,
    body: JsonBody<NewProposal>,
) -> Result<Response, Response> {
    let limits = state.settings.rules.amounts;
    let mut errors = Vec::new();
    let listing_id = check(&mut errors, "product_id", uuid(&body.value.product_id, "a product id"));
    let amount = check(&mut errors, "price", money::amount_from_price(raw(&body.value.price), limits));
    let (Some(listing_id), Some(amount)) = (listing_id, amount) else {
        return Err(invalid(&errors).into_response());
    };
    let mut command = Write::begin(&state, caller.id, key, body.digest).await?;
    let (conn, events) = command.parts().await.map_err(|error| ApiError::from(error).into_response())?;
    let placement = Proposal::of(amount);
    let outcome =
        match negotiation::place(conn, events, Access::Locked, caller, listing_id, &placement, state.settings.rules)
            .await
        {
            Ok((_, thread)) => {
                // Refused after the rules allowed the bid, so that their refusals come first;
                // dropping the request rolls the bid back and stores nothing.
                require_negotiator(conn, listing_id).await.map_err(IntoResponse::into_response)?;
                View::read(conn, caller, thread.id).await
            }
            Err(error) => Err(renamed(error, PROPOSALS.names)),
        };
    Ok(conclude(&state, caller, command, outcome, PROPOSALS.render).await)
}

/// `POST /proposals/{id}/counter`: counter (the default), accept or decline.
pub async fn counter_proposal(
    State(state): State<AppState>,
    caller: Caller,
    Id(id): Id,
    key: IdempotencyKey,
    body: JsonBody<LegacyMove>,
) -> Result<Response, Response> {
    let limits = state.settings.rules.amounts;
    let request = &body.value;
    let mut errors = Vec::new();
    let mut dialect = &LEGACY;
    let play = match request.action.unwrap_or(LegacyAction::Counter) {
        LegacyAction::Counter => {
            let mut price = |field: &str, number: &Option<Number>| {
                let converted = number.as_ref().map(|number| money::amount_from_price(raw(number), limits));
                check(&mut errors, field, converted.transpose())
            };
            let amount = match (price("price", &request.price), price("buyer_price", &request.buyer_price)) {
                (Some(Some(price)), Some(Some(buyer_price))) if price != buyer_price => {
                    errors.push(FieldError::new("buyer_price", "differs from price; send one of them"));
                    None
                }
                (Some(Some(amount)), Some(_)) => Some(amount),
                (Some(None), Some(Some(amount))) => {
                    dialect = &LEGACY_BUYER_PRICE;
                    Some(amount)
                }
                (Some(None), Some(None)) => {
                    errors.push(FieldError::new("price", "is required to counter (or buyer_price)"));
                    None
                }
                // Already reported.
                (None, _) | (_, None) => None,
            };
            amount.map(|amount| Play::Counter { amount, is_final: false, message: None })
        }
        LegacyAction::Accept => Some(Play::Accept),
        LegacyAction::Decline => Some(Play::Decline),
    };
    let Some(play) = play.filter(|_| errors.is_empty()) else {
        return Err(invalid(&errors).into_response());
    };
    find_proposal(&state, caller, id).await.map_err(IntoResponse::into_response)?;
    Ok(self::play(&state, caller, (key, body.digest), id, play, dialect).await)
}

/// `POST /api/v1/negotiations/messages`: counter, final_offer, accept or reject, keyed by the
/// body's `idempotency_key`.
pub async fn negotiation_message(
    State(state): State<AppState>,
    caller: Caller,
    header_key: IdempotencyKey,
    body: JsonBody<Message>,
) -> Result<Response, Response> {
    let limits = state.settings.rules.amounts;
    let message = &body.value;
    let mut errors = Vec::new();
    let key = body_key(&mut errors, header_key, Some(&message.idempotency_key));

    let proposal =
        message.proposal_id.as_deref().map(|raw| check(&mut errors, "proposal_id", uuid(raw, "a proposal id")));
    let negotiation = message
        .negotiation_id
        .as_deref()
        .map(|raw| check(&mut errors, "negotiation_id", uuid(raw, "a negotiation id")));
    let thread_id = match (proposal, negotiation) {
        (None, None) => {
            errors.push(FieldError::new("proposal_id", "is required (or negotiation_id: both name the negotiation)"));
            None
        }
        (Some(Some(a)), Some(Some(b))) if a != b => {
            errors.push(FieldError::new("negotiation_id", "must equal proposal_id: both name the negotiation"));
            None
        }
        (Some(id), _) | (None, Some(id)) => id,
    };

    let is_final = message.action == MessageAction::FinalOffer;
    let buyer_price =
        message.buyer_price.as_ref().map(|price| check(&mut errors, "buyer_price.amount_micros", price.amount(limits)));
    let play = match message.action {
        MessageAction::Counter | MessageAction::FinalOffer => match buyer_price {
            Some(amount) => amount.map(|amount| Play::Counter {
                amount,
                is_final,
                message: message.rationale.clone().filter(|rationale| !rationale.is_empty()),
            }),
            None => {
                errors.push(FieldError::new("buyer_price", "is required to counter"));
                None
            }
        },
        // Accepting takes the seller's standing price; a price sent along is not used.
        MessageAction::Accept => Some(Play::Accept),
        MessageAction::Reject => Some(Play::Decline),
    };
    check(&mut errors, "rationale", bid::check_message(message.rationale.as_deref()));
    let (Some(thread_id), Some(play)) = (thread_id, play) else {
        return Err(invalid(&errors).into_response());
    };
    if !errors.is_empty() {
        return Err(invalid(&errors).into_response());
    }

    let (_, bids) = find_proposal(&state, caller, thread_id).await.map_err(IntoResponse::into_response)?;
    if let (Some(price), Some(first)) = (&message.buyer_price, bids.first())
        && price.currency != first.currency.as_str()
    {
        return Err(invalid(&[FieldError::new(
            "buyer_price.currency",
            format!("must be the proposal's currency, {}", first.currency),
        )])
        .into_response());
    }
    Ok(self::play(&state, caller, (key, body.digest), thread_id, play, &MESSAGES).await)
}
