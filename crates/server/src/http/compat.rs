//! IAB-style compatibility routes (SPEC §5), so that an existing ad-buyer client negotiates
//! with Haggle unchanged.
//!
//! A proposal is a thread (`proposal_id` = `negotiation_id` = the thread's id), a product is a
//! listing, and the caller is the buyer. Prices are floats in currency units on the legacy
//! routes and `Money {amount_micros, currency}` on the messages route, converted exactly to and
//! from minor units (`domain::money`).
//!
//! The protocol is synchronous: each buyer message is answered with the seller's move. The
//! buyer's move commits like any other, its answer stored with it under its idempotency key.
//! While the buyer's bid then waits for the seller, the route waits up to [`SELLER_WAIT`] for
//! the seller's policy to answer it, reads the thread again, answers with the seller's move and
//! replaces the stored answer with that one, so that a replay gets what the first request got.
//! A seller that has not answered in time gets the buyer a `202` with the thread as it stands.
//!
//! Requests refused for what they say (a field, an unknown proposal, the wrong currency) are
//! refused before the key is claimed: nothing is stored, and a retry is refused alike.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use serde::{Deserialize, Serialize};
use serde_json::Number;
use sqlx::PgConnection;
use uuid::Uuid;

use super::bids::wait_for_change;
use super::error::{ApiError, Code};
use super::extract::{Id, IdempotencyKey, JsonBody, MAX_IDEMPOTENCY_KEY_LEN};
use super::{AppState, Endpoint, Reply, Write};
use crate::db::agents::Caller;
use crate::db::{self, Bid, Thread};
use crate::market::negotiation::{self, Answer};
use crate::market::{self, Access};
use haggle_api as api;
use haggle_domain::bid::Proposal;
use haggle_domain::money::{self, RawAmount};
use haggle_domain::{BidStatus, Currency, FieldError, Party, Reason, Rejection, ThreadStatus, bid};

/// How long a buyer's move waits for the seller's answer before answering `202`.
pub const SELLER_WAIT: Duration = Duration::from_secs(5);

pub fn endpoints() -> Vec<Endpoint> {
    vec![
        Endpoint::post("/proposals", open_proposal),
        Endpoint::post("/proposals/{id}/counter", counter_proposal),
        Endpoint::post("/api/v1/negotiations/messages", negotiation_message),
    ]
}

// ----- requests -----

/// `POST /proposals`. The other fields IAB clients send are accepted and ignored.
#[derive(Debug, Deserialize)]
struct NewProposal {
    product_id: String,
    price: Number,
}

/// `POST /proposals/{id}/counter`, the ad-buyer guide's counter, accept and decline.
#[derive(Debug, Deserialize)]
struct LegacyMove {
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
struct Message {
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

#[derive(Debug, Deserialize)]
struct MoneyInput {
    amount_micros: Number,
    currency: String,
}

/// A JSON number as the amount checks take it.
fn raw(number: &Number) -> RawAmount {
    match (number.as_i64(), number.as_u64()) {
        (Some(n), _) => RawAmount::Integer(n.into()),
        (None, Some(n)) => RawAmount::Integer(n.into()),
        (None, None) => RawAmount::Float(number.as_f64().unwrap_or(f64::NAN)),
    }
}

/// Keeps a field's value, or collects its error.
fn check<T>(errors: &mut Vec<FieldError>, field: &str, result: Result<T, String>) -> Option<T> {
    result.map_err(|message| errors.push(FieldError::new(field, message))).ok()
}

fn invalid(errors: &[FieldError]) -> Response {
    ApiError::fields(Code::ValidationFailed, "some fields of the request are invalid", errors).into_response()
}

fn proposal_id(raw: &str) -> Result<Uuid, String> {
    Uuid::parse_str(raw).map_err(|_| "must be a proposal id (a UUID)".to_owned())
}

// ----- the buyer's moves -----

/// What the buyer does on its proposal.
#[derive(Debug, Clone)]
enum Play {
    Counter {
        amount: i64,
        is_final: bool,
        message: Option<String>,
    },
    Accept,
    /// Rejects the seller's pending counter, or withdraws the buyer's own pending bid.
    Decline,
}

/// The caller's proposal, before anything is claimed: 404 if the caller cannot see the
/// thread, 403 if it is the seller of it.
async fn find_proposal(state: &AppState, caller: Caller, id: Uuid) -> Result<(Thread, Vec<Bid>), ApiError> {
    let (thread, bids) = db::negotiation::get_thread_with_bids(&state.pool, id, caller.id)
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

const LEGACY: Dialect = Dialect { names: &[("amount", "price")], render: render_legacy };
const LEGACY_BUYER_PRICE: Dialect = Dialect { names: &[("amount", "buyer_price")], render: render_legacy };
const MESSAGES: Dialect =
    Dialect { names: &[("amount", "buyer_price.amount_micros"), ("message", "rationale")], render: render_money };

/// Plays the buyer's move on the thread's pending bid, in one transaction with its
/// idempotency key, then answers as [`conclude`] does.
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
    let (conn, events) = command.parts();
    let outcome = async {
        let (thread, _) = db::negotiation::get_thread_with_bids(&mut *conn, thread_id, caller.id)
            .await?
            .ok_or(Rejection::NotFound { what: "proposal" })?;
        // The thread's latest bid is its pending one while it is live; on an ended thread the
        // state machine refuses the move with the bid's status.
        let pending = thread.last_bid_id;
        match play {
            Play::Counter { amount, is_final, message } => {
                let offer = Proposal { message, ..Proposal::of(amount).finally(is_final) };
                negotiation::counter(conn, events, Access::Locked, caller, pending, &offer, state.settings.rules)
                    .await
                    .map(drop)?;
            }
            Play::Accept => {
                negotiation::answer(conn, events, Access::Locked, caller, pending, Answer::Accept).await.map(drop)?
            }
            Play::Decline => {
                let answer = match Party::author_of_round(thread.rounds) {
                    Party::Seller => Answer::Reject,
                    Party::Buyer => Answer::Withdraw,
                };
                negotiation::answer(conn, events, Access::Locked, caller, pending, answer).await.map(drop)?;
            }
        }
        View::read(conn, caller, thread_id).await
    }
    .await;
    conclude(state, caller, command, outcome.map_err(|error| renamed(error, dialect.names)), dialect.render).await
}

/// Commits the move with its answer. If the buyer's bid now waits for the seller, waits for the
/// seller's answer (up to [`SELLER_WAIT`], within the request's time limit), answers with the
/// thread as it then is, and stores that answer for replays in place of the committed one.
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
    let wait = SELLER_WAIT.min(state.settings.request_timeout / 2);
    if let Err(error) = wait_for_change(state, caller, bid_id, wait).await {
        // Waiting was refused (too many waits open): answer with the thread as it stands.
        tracing::debug!(code = error.code.as_str(), "not waiting for the seller's answer");
    }
    let fresh = async {
        let mut conn = state.pool.acquire().await?;
        View::read(&mut conn, caller, view.thread_id).await
    }
    .await;
    let reply = match fresh {
        Ok(fresh) => render(&fresh),
        Err(error) => {
            tracing::warn!(?error, "could not read the proposal after the seller's answer");
            committed.reply.clone()
        }
    };
    committed.complete(&state.pool, reply).await.into_response()
}

// ----- handlers -----

/// `POST /proposals`: the buyer's opening bid on the product, answered with the seller's move.
async fn open_proposal(
    State(state): State<AppState>,
    caller: Caller,
    key: IdempotencyKey,
    body: JsonBody<NewProposal>,
) -> Response {
    let limits = state.settings.rules.amounts;
    let mut errors = Vec::new();
    let listing_id = check(
        &mut errors,
        "product_id",
        proposal_id(&body.value.product_id).map_err(|_| "must be a product id (a listing's UUID)".to_owned()),
    );
    let amount = check(&mut errors, "price", money::minor_units_from_price(raw(&body.value.price), limits));
    let (Some(listing_id), Some(amount)) = (listing_id, amount) else {
        return invalid(&errors);
    };
    let mut command = match Write::begin(&state, caller.id, key, body.digest).await {
        Ok(command) => command,
        Err(answer) => return answer,
    };
    let (conn, events) = command.parts();
    let placement = Proposal::of(amount);
    let outcome =
        match negotiation::place(conn, events, Access::Locked, caller, listing_id, &placement, state.settings.rules)
            .await
        {
            Ok((_, thread)) => View::read(conn, caller, thread.id).await,
            Err(error) => Err(renamed(error, LEGACY.names)),
        };
    conclude(&state, caller, command, outcome, render_proposal).await
}

/// `POST /proposals/{id}/counter`: counter (the default), accept or decline.
async fn counter_proposal(
    State(state): State<AppState>,
    caller: Caller,
    Id(id): Id,
    key: IdempotencyKey,
    body: JsonBody<LegacyMove>,
) -> Response {
    let limits = state.settings.rules.amounts;
    let request = &body.value;
    let mut errors = Vec::new();
    let mut dialect = &LEGACY;
    let play = match request.action.unwrap_or(LegacyAction::Counter) {
        LegacyAction::Counter => {
            let mut price = |field: &str, number: &Option<Number>| {
                let converted = number.as_ref().map(|number| money::minor_units_from_price(raw(number), limits));
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
        return invalid(&errors);
    };
    if let Err(error) = find_proposal(&state, caller, id).await {
        return error.into_response();
    }
    self::play(&state, caller, (key, body.digest), id, play, dialect).await
}

/// `POST /api/v1/negotiations/messages`: counter, final_offer, accept or reject, keyed by the
/// body's `idempotency_key`.
async fn negotiation_message(
    State(state): State<AppState>,
    caller: Caller,
    header_key: IdempotencyKey,
    body: JsonBody<Message>,
) -> Response {
    let limits = state.settings.rules.amounts;
    let message = &body.value;
    let mut errors = Vec::new();

    let key = message.idempotency_key.as_str();
    if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY_LEN || !key.bytes().all(|b| b.is_ascii_graphic()) {
        errors.push(FieldError::new(
            "idempotency_key",
            format!("must be 1 to {MAX_IDEMPOTENCY_KEY_LEN} printable ASCII characters, without spaces"),
        ));
    } else if header_key.0.as_deref().is_some_and(|header| header != key) {
        errors.push(FieldError::new("idempotency_key", "differs from the Idempotency-Key header; send one of them"));
    }

    let proposal = message.proposal_id.as_deref().map(|raw| check(&mut errors, "proposal_id", proposal_id(raw)));
    let negotiation =
        message.negotiation_id.as_deref().map(|raw| check(&mut errors, "negotiation_id", proposal_id(raw)));
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
    let play = match message.action {
        MessageAction::Counter | MessageAction::FinalOffer => match &message.buyer_price {
            Some(price) => check(
                &mut errors,
                "buyer_price.amount_micros",
                money::minor_units_from_micros(raw(&price.amount_micros), limits),
            )
            .map(|amount| Play::Counter { amount, is_final, message: message.rationale.clone() }),
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
        return invalid(&errors);
    };
    if !errors.is_empty() {
        return invalid(&errors);
    }

    let bids = match find_proposal(&state, caller, thread_id).await {
        Ok((_, bids)) => bids,
        Err(error) => return error.into_response(),
    };
    if let (Play::Counter { .. }, Some(price)) = (&play, &message.buyer_price) {
        let expected = bids.first().map(|bid| bid.currency).unwrap_or(Currency::USD);
        if !price.currency.eq_ignore_ascii_case(expected.as_str()) {
            return invalid(&[FieldError::new(
                "buyer_price.currency",
                format!("must be the proposal's currency, {expected}"),
            )]);
        }
    }
    let key = IdempotencyKey(Some(key.to_owned()));
    self::play(&state, caller, (key, body.digest), thread_id, play, &MESSAGES).await
}

// ----- answers -----

/// A move of the negotiation, as IAB clients name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum IabMove {
    Counter,
    Accept,
    Reject,
    FinalOffer,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Status {
    Active,
    Accepted,
    Rejected,
    Expired,
}

impl From<ThreadStatus> for Status {
    fn from(status: ThreadStatus) -> Status {
        match status {
            ThreadStatus::Active => Status::Active,
            ThreadStatus::Accepted => Status::Accepted,
            ThreadStatus::Rejected | ThreadStatus::Closed => Status::Rejected,
            ThreadStatus::Expired => Status::Expired,
        }
    }
}

/// A proposal as the compatibility routes show it, amounts in minor units.
#[derive(Debug, Clone, PartialEq)]
struct View {
    thread_id: Uuid,
    status: Status,
    round: i32,
    rounds_remaining: i32,
    currency: Currency,
    buyer_price: i64,
    seller_price: Option<i64>,
    /// The latest move: the seller's answer, or the buyer's accept or decline; `None` while the
    /// buyer's bid waits for the seller.
    action: Option<IabMove>,
    rationale: Option<String>,
    /// The buyer's pending bid, while it waits for the seller's answer.
    awaiting: Option<Uuid>,
}

/// What the thread's bids say, before the seller's rationale is looked up.
#[derive(Debug, Clone, PartialEq)]
struct Summary {
    buyer_price: i64,
    seller_price: Option<i64>,
    action: Option<IabMove>,
    /// The buyer's bid that the seller's latest move answered, if that move is the latest.
    answered_by_seller: Option<Uuid>,
    /// The message of the seller's latest counter, if that counter is the latest move.
    seller_message: Option<String>,
    awaiting: Option<Uuid>,
    accepted: bool,
}

/// Reads the latest move off the thread's bids (in round order, as they are at the moment).
fn summarize(bids: &[api::Bid]) -> Summary {
    let latest_of = |party: Party| bids.iter().rev().find(|bid| bid.author == party).map(|bid| bid.amount);
    let mut summary = Summary {
        buyer_price: latest_of(Party::Buyer).unwrap_or_default(),
        seller_price: latest_of(Party::Seller),
        action: None,
        answered_by_seller: None,
        seller_message: None,
        awaiting: None,
        accepted: false,
    };
    let Some(last) = bids.last() else { return summary };
    match (last.author, last.status) {
        (Party::Seller, BidStatus::Pending | BidStatus::Expired) => {
            summary.action = Some(if last.is_final { IabMove::FinalOffer } else { IabMove::Counter });
            summary.answered_by_seller = last.parent_bid_id;
            summary.seller_message = last.message.clone();
        }
        (Party::Buyer, BidStatus::Pending) => summary.awaiting = Some(last.id),
        // The seller never answered.
        (Party::Buyer, BidStatus::Expired) => {}
        (author, BidStatus::Accepted) => {
            summary.action = Some(IabMove::Accept);
            summary.answered_by_seller = (author == Party::Buyer).then_some(last.id);
            // Both sides now stand at the agreed price.
            summary.buyer_price = last.amount;
            summary.seller_price = Some(last.amount);
            summary.accepted = true;
        }
        (author, BidStatus::Rejected) => {
            summary.action = Some(IabMove::Reject);
            summary.answered_by_seller =
                (author == Party::Buyer && last.reason == Some(Reason::Rejected)).then_some(last.id);
        }
        // A countered bid is never a thread's latest.
        (_, BidStatus::Countered) => {}
    }
    summary
}

impl View {
    /// The proposal as it is now, read with the caller's visibility.
    async fn read(conn: &mut PgConnection, caller: Caller, thread_id: Uuid) -> market::Result<View> {
        let not_found = || Rejection::NotFound { what: "proposal" };
        let (thread, bids) =
            db::negotiation::get_thread_with_bids(&mut *conn, thread_id, caller.id).await?.ok_or_else(not_found)?;
        let listing = db::listings::get(&mut *conn, thread.listing_id).await?.ok_or_else(not_found)?;
        let now = Utc::now();
        let thread = thread.at(now);
        let bids: Vec<api::Bid> = bids.iter().map(|bid| bid.at(now)).collect();
        let summary = summarize(&bids);
        let policy_rationale = match summary.answered_by_seller {
            Some(bid_id) => db::policies::rationale(conn, thread.id, thread.seller_id, bid_id).await?,
            None => None,
        };
        let rationale = policy_rationale.or(summary.seller_message).or_else(|| {
            if let Some(bid_id) = summary.awaiting {
                Some(format!(
                    "The seller has not answered yet. Follow the bid with GET /v1/bids/{bid_id}?wait=30 or the \
                     event stream GET /v1/events/stream; the proposal is GET /v1/threads/{}.",
                    thread.id
                ))
            } else if summary.accepted {
                Some(format!("Deal confirmed at {} {}.", money::price_text(summary.buyer_price), listing.currency))
            } else {
                None
            }
        });
        Ok(View {
            thread_id: thread.id,
            status: thread.status.into(),
            round: thread.rounds,
            rounds_remaining: (listing.max_rounds - thread.rounds).max(0),
            currency: listing.currency,
            buyer_price: summary.buyer_price,
            seller_price: summary.seller_price,
            action: summary.action,
            rationale,
            awaiting: summary.awaiting,
        })
    }
}

/// `Money` on the messages route.
#[derive(Debug, Clone, Copy, Serialize)]
struct Money {
    amount_micros: i64,
    currency: Currency,
}

/// The flat answer of the counter and messages routes, with prices as `P`.
#[derive(Debug, Serialize)]
struct Negotiation<P> {
    negotiation_id: Uuid,
    proposal_id: Uuid,
    round_number: i32,
    buyer_price: P,
    seller_price: Option<P>,
    action: Option<IabMove>,
    rationale: Option<String>,
    status: Status,
    rounds_remaining: i32,
}

impl View {
    fn negotiation<P>(&self, price: impl Fn(i64) -> P) -> Negotiation<P> {
        Negotiation {
            negotiation_id: self.thread_id,
            proposal_id: self.thread_id,
            round_number: self.round,
            buyer_price: price(self.buyer_price),
            seller_price: self.seller_price.map(&price),
            action: self.action,
            rationale: self.rationale.clone(),
            status: self.status,
            rounds_remaining: self.rounds_remaining,
        }
    }

    /// `202` while the buyer's bid waits for the seller, `answered` otherwise.
    fn status_code(&self, answered: StatusCode) -> StatusCode {
        if self.awaiting.is_some() { StatusCode::ACCEPTED } else { answered }
    }

    fn money(&self, minor: i64) -> Money {
        Money { amount_micros: money::micros_from_minor_units(minor), currency: self.currency }
    }
}

fn render_legacy(view: &View) -> Reply {
    Reply::json(view.status_code(StatusCode::OK), &view.negotiation(money::price_from_minor_units))
}

fn render_money(view: &View) -> Reply {
    Reply::json(view.status_code(StatusCode::OK), &view.negotiation(|minor| view.money(minor)))
}

/// `POST /proposals`' answer: the flat answer with the proposal's fields.
#[derive(Debug, Serialize)]
struct ProposalReply {
    proposal_id: Uuid,
    negotiation_id: Uuid,
    status: Status,
    /// The seller's move, if it answered.
    recommendation: Option<IabMove>,
    counter_terms: CounterTerms,
    round_number: i32,
    buyer_price: f64,
    seller_price: Option<f64>,
    action: Option<IabMove>,
    rationale: Option<String>,
    rounds_remaining: i32,
}

#[derive(Debug, Serialize)]
struct CounterTerms {
    proposed_price: Option<f64>,
    negotiation_id: Uuid,
    round_number: i32,
    action: Option<IabMove>,
}

fn render_proposal(view: &View) -> Reply {
    let flat = view.negotiation(money::price_from_minor_units);
    let reply = ProposalReply {
        proposal_id: flat.proposal_id,
        negotiation_id: flat.negotiation_id,
        status: flat.status,
        recommendation: flat.action,
        counter_terms: CounterTerms {
            proposed_price: flat.seller_price,
            negotiation_id: flat.negotiation_id,
            round_number: flat.round_number,
            action: flat.action,
        },
        round_number: flat.round_number,
        buyer_price: flat.buyer_price,
        seller_price: flat.seller_price,
        action: flat.action,
        rationale: flat.rationale,
        rounds_remaining: flat.rounds_remaining,
    };
    Reply::json(view.status_code(StatusCode::CREATED), &reply)
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use haggle_api::Bid;

    fn bid(round: i32, amount: i64, status: BidStatus, reason: Option<Reason>, is_final: bool) -> Bid {
        let at = Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap();
        Bid {
            id: Uuid::from_u128(round as u128),
            thread_id: Uuid::nil(),
            author: Party::author_of_round(round),
            author_id: Uuid::nil(),
            amount,
            currency: Currency::USD,
            message: (round % 2 == 0).then(|| format!("seller note {round}")),
            terms: None,
            is_final,
            status,
            reason,
            parent_bid_id: (round > 1).then(|| Uuid::from_u128(round as u128 - 1)),
            round,
            expires_at: at,
            responded_at: None,
            created_at: at,
            updated_at: at,
        }
    }

    fn countered(round: i32, amount: i64) -> Bid {
        bid(round, amount, BidStatus::Countered, Some(Reason::Countered), false)
    }

    #[test]
    fn the_latest_move_is_read_off_the_bids() {
        use BidStatus::*;
        let id = Uuid::from_u128;
        // (bids, action, answered by the seller, awaiting, buyer price, seller price)
        type Case = (Vec<Bid>, Option<IabMove>, Option<Uuid>, Option<Uuid>, i64, Option<i64>);
        let cases: Vec<Case> = vec![
            (vec![bid(1, 2000, Pending, None, false)], None, None, Some(id(1)), 2000, None),
            (vec![bid(1, 2000, Expired, Some(Reason::Expired), false)], None, None, None, 2000, None),
            (
                vec![countered(1, 2000), bid(2, 3200, Pending, None, false)],
                Some(IabMove::Counter),
                Some(id(1)),
                None,
                2000,
                Some(3200),
            ),
            (
                vec![countered(1, 2000), bid(2, 3200, Pending, None, true)],
                Some(IabMove::FinalOffer),
                Some(id(1)),
                None,
                2000,
                Some(3200),
            ),
            (
                vec![countered(1, 2000), countered(2, 3200), bid(3, 2200, Pending, None, false)],
                None,
                None,
                Some(id(3)),
                2200,
                Some(3200),
            ),
            (
                vec![countered(1, 2000), countered(2, 3200), bid(3, 2200, Accepted, Some(Reason::Accepted), false)],
                Some(IabMove::Accept),
                Some(id(3)),
                None,
                2200,
                Some(2200),
            ),
            (
                vec![countered(1, 2000), bid(2, 2800, Accepted, Some(Reason::Accepted), false)],
                Some(IabMove::Accept),
                None,
                None,
                2800,
                Some(2800),
            ),
            (
                vec![bid(1, 2000, Rejected, Some(Reason::Rejected), false)],
                Some(IabMove::Reject),
                Some(id(1)),
                None,
                2000,
                None,
            ),
            (
                vec![bid(1, 2000, Rejected, Some(Reason::Withdrawn), false)],
                Some(IabMove::Reject),
                None,
                None,
                2000,
                None,
            ),
            (
                vec![countered(1, 2000), bid(2, 3200, Rejected, Some(Reason::Rejected), false)],
                Some(IabMove::Reject),
                None,
                None,
                2000,
                Some(3200),
            ),
        ];
        for (i, (bids, action, answered, awaiting, buyer_price, seller_price)) in cases.into_iter().enumerate() {
            let summary = summarize(&bids);
            assert_eq!(summary.action, action, "case {i}");
            assert_eq!(summary.answered_by_seller, answered, "case {i}");
            assert_eq!(summary.awaiting, awaiting, "case {i}");
            assert_eq!((summary.buyer_price, summary.seller_price), (buyer_price, seller_price), "case {i}");
        }
    }

    #[test]
    fn a_seller_counter_carries_its_message() {
        let summary = summarize(&[countered(1, 2000), bid(2, 3200, BidStatus::Pending, None, false)]);
        assert_eq!(summary.seller_message.as_deref(), Some("seller note 2"));
    }

    #[test]
    fn thread_statuses_map_to_iab_statuses() {
        for (status, expected) in [
            (ThreadStatus::Active, Status::Active),
            (ThreadStatus::Accepted, Status::Accepted),
            (ThreadStatus::Rejected, Status::Rejected),
            (ThreadStatus::Closed, Status::Rejected),
            (ThreadStatus::Expired, Status::Expired),
        ] {
            assert_eq!(Status::from(status), expected);
        }
    }

    #[test]
    fn json_numbers_keep_their_kind() {
        let number = |json: &str| raw(&serde_json::from_str::<Number>(json).unwrap());
        assert_eq!(number("20"), RawAmount::Integer(20));
        assert_eq!(number("-20"), RawAmount::Integer(-20));
        assert_eq!(number("18446744073709551615"), RawAmount::Integer(u64::MAX.into()));
        assert_eq!(number("20.1"), RawAmount::Float(20.1));
        assert_eq!(number("1e2"), RawAmount::Float(100.0));
    }
}
