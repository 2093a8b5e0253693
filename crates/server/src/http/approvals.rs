//! Approvals (SPEC §10): an agent's rules (its own, per listing, per thread), its approvers, the
//! moves its rules hold, and the answers to them. A held move's request is its agent's and its
//! approvers' alone: to anyone else it does not exist.
//!
//! An approver's token (`hap_…`) is let in here only, by [`Approving`]; every other route reads
//! the caller as [`Caller`], which refuses it.

use axum::Json;
use axum::extract::{FromRequestParts, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use haggle_api::{self as api, ApprovalDenial, ApprovalGrant, ApprovalQuery, ApprovalRules, HeldMove, NewApprover};
use haggle_domain::appointment;
use haggle_domain::approval::{self, Move, Standing};
use haggle_domain::rejection::text;
use haggle_domain::{Party, Rejection, ThreadKind};
use uuid::Uuid;

use super::error::ApiError;
use super::extract::{self, ActionBody, Id, IdempotencyKey, JsonBody, OptionalJsonBody, Params, address_of};
use super::{AppState, Endpoint, Page, Reply, Write, page_size, ratelimit};
use crate::db;
use crate::db::agents::Caller;
use crate::db::policies::Scope;
use crate::market;
use crate::market::approvals::{Approved, Approving, Intent};
use crate::secrets;

pub fn endpoints() -> Vec<Endpoint> {
    vec![
        Endpoint::get("/v1/agents/me/approval-rules", read_default),
        Endpoint::put("/v1/agents/me/approval-rules", put_default),
        Endpoint::delete("/v1/agents/me/approval-rules", delete_default),
        Endpoint::get("/v1/listings/{id}/approval-rules", read_listing),
        Endpoint::put("/v1/listings/{id}/approval-rules", put_listing),
        Endpoint::delete("/v1/listings/{id}/approval-rules", delete_listing),
        Endpoint::get("/v1/threads/{id}/approval-rules", read_thread),
        Endpoint::put("/v1/threads/{id}/approval-rules", put_thread),
        Endpoint::delete("/v1/threads/{id}/approval-rules", delete_thread),
        Endpoint::get("/v1/agents/me/approvers", approvers),
        Endpoint::post("/v1/agents/me/approvers", add_approver),
        Endpoint::delete("/v1/agents/me/approvers/{id}", revoke_approver),
        Endpoint::get("/v1/approvals", list),
        Endpoint::get("/v1/approvals/{id}", read),
        Endpoint::post("/v1/approvals/{id}/approve", approve),
        Endpoint::post("/v1/approvals/{id}/deny", deny),
        Endpoint::post("/v1/approvals/{id}/withdraw", withdraw),
        Endpoint::get("/.well-known/jwks.json", jwks),
    ]
}

/// The public keys approval receipts are signed with, retired ones included: public, for anyone
/// to verify a receipt.
async fn jwks(State(state): State<AppState>) -> Result<Json<serde_json::Value>, ApiError> {
    // The first call of a new deployment makes its key.
    state.receipts.signer(&state.pool).await?;
    let keys = db::receipts::published(&state.pool).await?;
    Ok(Json(crate::receipts::jwks(&keys)))
}

// ---- rules

/// Where rules go, and the caller's standing there.
struct Target {
    scope: Scope,
    standing: Standing,
}

async fn listing_target(state: &AppState, caller: Caller, id: Uuid) -> Result<Target, ApiError> {
    let listing = db::listings::get(&state.pool, id).await?.ok_or_else(|| ApiError::not_found("listing"))?;
    let party = if listing.seller_id == caller.id { Party::Seller } else { Party::Buyer };
    let negotiates =
        listing.negotiable && (party == Party::Seller || caller.tier.may_negotiate(listing.min_negotiation_tier));
    Ok(Target { scope: Scope::Listing(id), standing: Standing::Listing { party, negotiates } })
}

async fn thread_target(state: &AppState, caller: Caller, id: Uuid) -> Result<Target, ApiError> {
    let thread = db::policies::thread_for_party(&state.pool, id, caller.id)
        .await?
        .ok_or_else(|| ApiError::not_found("thread"))?;
    Ok(Target { scope: Scope::Thread(id), standing: Standing::Thread(thread.role) })
}

fn default_target() -> Target {
    Target { scope: Scope::Agent, standing: Standing::Anywhere }
}

async fn put(
    state: &AppState,
    caller: Caller,
    target: Target,
    rules: ApprovalRules,
) -> Result<Json<api::StoredApprovalRules>, ApiError> {
    let stored = market::approvals::put_rules(
        &state.market,
        caller.id,
        target.scope,
        target.standing,
        &rules,
        state.settings.rules,
    )
    .await?;
    // This instance reads the agent's keys afresh at once; the others at the NOTIFY.
    state.keys.forget_agent(caller.id);
    Ok(Json(stored.into()))
}

async fn get(state: &AppState, caller: Caller, target: Target) -> Result<Json<api::StoredApprovalRules>, ApiError> {
    db::approvals::get_rules(&state.pool, caller.id, target.scope)
        .await?
        .map(|stored| Json(stored.into()))
        .ok_or_else(|| ApiError::not_found("approval rules"))
}

async fn delete(state: &AppState, caller: Caller, target: Target) -> Result<StatusCode, ApiError> {
    let deleted = market::approvals::delete_rules(&state.market, caller.id, target.scope).await?;
    state.keys.forget_agent(caller.id);
    if deleted { Ok(StatusCode::NO_CONTENT) } else { Err(ApiError::not_found("approval rules")) }
}

async fn read_default(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<api::StoredApprovalRules>, ApiError> {
    get(&state, caller, default_target()).await
}

async fn put_default(
    State(state): State<AppState>,
    caller: Caller,
    body: JsonBody<ApprovalRules>,
) -> Result<Json<api::StoredApprovalRules>, ApiError> {
    put(&state, caller, default_target(), body.value).await
}

async fn delete_default(State(state): State<AppState>, caller: Caller) -> Result<StatusCode, ApiError> {
    delete(&state, caller, default_target()).await
}

async fn read_listing(
    State(state): State<AppState>,
    caller: Caller,
    Id(id): Id,
) -> Result<Json<api::StoredApprovalRules>, ApiError> {
    let target = listing_target(&state, caller, id).await?;
    get(&state, caller, target).await
}

async fn put_listing(
    State(state): State<AppState>,
    caller: Caller,
    Id(id): Id,
    body: JsonBody<ApprovalRules>,
) -> Result<Json<api::StoredApprovalRules>, ApiError> {
    let target = listing_target(&state, caller, id).await?;
    put(&state, caller, target, body.value).await
}

async fn delete_listing(State(state): State<AppState>, caller: Caller, Id(id): Id) -> Result<StatusCode, ApiError> {
    let target = listing_target(&state, caller, id).await?;
    delete(&state, caller, target).await
}

async fn read_thread(
    State(state): State<AppState>,
    caller: Caller,
    Id(id): Id,
) -> Result<Json<api::StoredApprovalRules>, ApiError> {
    let target = thread_target(&state, caller, id).await?;
    get(&state, caller, target).await
}

async fn put_thread(
    State(state): State<AppState>,
    caller: Caller,
    Id(id): Id,
    body: JsonBody<ApprovalRules>,
) -> Result<Json<api::StoredApprovalRules>, ApiError> {
    let target = thread_target(&state, caller, id).await?;
    put(&state, caller, target, body.value).await
}

async fn delete_thread(State(state): State<AppState>, caller: Caller, Id(id): Id) -> Result<StatusCode, ApiError> {
    let target = thread_target(&state, caller, id).await?;
    delete(&state, caller, target).await
}

// ---- held moves

/// A move as its route received it, before it is made.
pub enum Proposed<'a> {
    Place {
        listing_id: Uuid,
        placement: &'a api::Placement,
    },
    Counter {
        bid_id: Uuid,
        offer: &'a api::CounterOffer,
    },
    Accept {
        bid_id: Uuid,
        /// The acceptance's terms: on a schedule, the window it takes.
        terms: Option<&'a serde_json::Value>,
    },
    Purchase {
        listing_id: Uuid,
    },
    /// A negotiation opened on an order: held only if it is a refund (its rules are `refund`).
    OpenRefund {
        order_id: Uuid,
        input: &'a api::OpenNegotiation,
    },
}

/// A counter or an acceptance on a refund thread is a `refund` move to the rules.
async fn move_in(state: &AppState, thread_id: Uuid, price_move: Move) -> market::Result<Move> {
    Ok(match db::threads::kind_of(&state.pool, thread_id).await? {
        Some(ThreadKind::Refund) => Move::Refund,
        _ => price_move,
    })
}

/// Holds the move for approval if the caller's rules catch it: its `202` answer, the request
/// written in the request's unit of work; `None` to make the move. An agent without rules
/// (the flag its key carries) reads nothing here. A move the rules would refuse anyway (an
/// unknown bid, an invalid amount) is not held: making it answers the refusal.
pub async fn hold_if_caught(
    state: &AppState,
    command: &mut Write,
    caller: Caller,
    proposed: Proposed<'_>,
) -> market::Result<Option<Reply>> {
    if !caller.approval_rules {
        return Ok(None);
    }
    let Some(intent) = intent(state, caller, proposed).await? else { return Ok(None) };
    let Some(ttl) = market::approvals::caught(&state.pool, caller.id, &intent, false).await? else {
        return Ok(None);
    };
    let (conn, events) = command.parts().await?;
    let approval = market::approvals::hold(conn, events, caller.id, &intent, ttl).await?;
    let names = db::approvals::approver_names(&state.pool, caller.id).await?;
    Ok(Some(Reply::json(StatusCode::ACCEPTED, &api::Held { approval: approval.at(&names, Utc::now()) })))
}

/// The exact move, as it would be held.
async fn intent(state: &AppState, caller: Caller, proposed: Proposed<'_>) -> market::Result<Option<Intent>> {
    let limits = state.settings.rules.amounts;
    let intent = match proposed {
        Proposed::Place { listing_id, placement } => {
            let Some(listing) = db::listings::get(&state.pool, listing_id).await? else { return Ok(None) };
            let Ok(amount) = placement.amount.validate(limits) else { return Ok(None) };
            Intent {
                held: HeldMove {
                    kind: Move::Place,
                    route: format!("POST /v1/listings/{listing_id}/bids"),
                    party: Party::Buyer,
                    listing_id,
                    thread_id: None,
                    bid_id: None,
                    amount: amount.minor_units(),
                    currency: listing.currency,
                    message: placement.message.clone(),
                    expires_in: placement.expires_in,
                    is_final: false,
                    terms: placement.terms.clone().map(Some),
                },
                bid_expires_at: None,
            }
        }
        Proposed::Counter { bid_id, offer } => {
            let Some(bid) = db::approvals::bid_target(&state.pool, bid_id, caller.id).await? else { return Ok(None) };
            // A counter naming no amount (a schedule's, a plan's) moves no money: nothing to hold.
            let Some(Ok(amount)) = offer.amount.map(|amount| amount.validate(limits)) else { return Ok(None) };
            Intent {
                held: HeldMove {
                    kind: move_in(state, bid.thread_id, Move::Counter).await?,
                    route: format!("POST /v1/bids/{bid_id}/counter"),
                    party: bid.party,
                    listing_id: bid.listing_id,
                    thread_id: Some(bid.thread_id),
                    bid_id: Some(bid_id),
                    amount: amount.minor_units(),
                    currency: bid.currency,
                    message: offer.message.clone(),
                    expires_in: offer.expires_in,
                    is_final: offer.is_final.unwrap_or(false),
                    terms: offer.terms.clone(),
                },
                bid_expires_at: Some(bid.expires_at),
            }
        }
        Proposed::Accept { bid_id, terms } => {
            let Some(bid) = db::approvals::bid_target(&state.pool, bid_id, caller.id).await? else { return Ok(None) };
            // Terms that no acceptance could carry here (on a price, or no window's index) are
            // refused by making the move, not held.
            if let Some(terms) = terms {
                let schedule = db::threads::kind_of(&state.pool, bid.thread_id).await? == Some(ThreadKind::Schedule);
                if !schedule || !appointment::is_choice(terms) {
                    return Ok(None);
                }
            }
            Intent {
                held: HeldMove {
                    kind: move_in(state, bid.thread_id, Move::Accept).await?,
                    route: format!("POST /v1/bids/{bid_id}/accept"),
                    party: bid.party,
                    listing_id: bid.listing_id,
                    thread_id: Some(bid.thread_id),
                    bid_id: Some(bid_id),
                    amount: bid.amount,
                    currency: bid.currency,
                    message: None,
                    expires_in: None,
                    is_final: false,
                    terms: terms.cloned().map(Some),
                },
                bid_expires_at: Some(bid.expires_at),
            }
        }
        Proposed::Purchase { listing_id } => {
            let Some(listing) = db::listings::get(&state.pool, listing_id).await? else { return Ok(None) };
            Intent {
                held: HeldMove {
                    kind: Move::Purchase,
                    route: format!("POST /v1/listings/{listing_id}/purchase"),
                    party: Party::Buyer,
                    listing_id,
                    thread_id: None,
                    bid_id: None,
                    amount: listing.ask_amount,
                    currency: listing.currency,
                    message: None,
                    expires_in: None,
                    is_final: false,
                    terms: None,
                },
                bid_expires_at: None,
            }
        }
        Proposed::OpenRefund { order_id, input } => {
            if input.kind != ThreadKind::Refund {
                return Ok(None);
            }
            let Some(order) = db::orders::get(&state.pool, order_id, caller.id).await? else { return Ok(None) };
            let Some(Ok(amount)) = input.amount.map(|amount| amount.validate(limits)) else { return Ok(None) };
            if order.buyer_id != caller.id {
                return Ok(None);
            }
            Intent {
                held: HeldMove {
                    kind: Move::Refund,
                    route: format!("POST /v1/orders/{order_id}/negotiations"),
                    party: Party::Buyer,
                    listing_id: order.listing_id,
                    thread_id: None,
                    bid_id: None,
                    amount: amount.minor_units(),
                    currency: order.currency,
                    message: input.message.clone(),
                    expires_in: input.expires_in,
                    is_final: input.is_final.unwrap_or(false),
                    terms: Some(Some(input.terms.clone())),
                },
                bid_expires_at: None,
            }
        }
    };
    Ok(Some(intent))
}

// ---- approvers

fn approver_view(approver: db::approvals::Approver) -> api::Approver {
    approver.into()
}

async fn approvers(State(state): State<AppState>, caller: Caller) -> Result<Json<Page<api::Approver>>, ApiError> {
    let approvers = db::approvals::approvers(&state.pool, caller.id).await?;
    Ok(Json(Page { data: approvers.into_iter().map(approver_view).collect(), next_cursor: None }))
}

/// The events an approver's webhook takes: its agent's approval.* events.
const APPROVER_EVENTS: [&str; 5] =
    ["approval.requested", "approval.approved", "approval.denied", "approval.expired", "approval.failed"];

async fn add_approver(
    State(state): State<AppState>,
    caller: Caller,
    key: IdempotencyKey,
    body: JsonBody<NewApprover>,
) -> Result<Response, Response> {
    // The webhook's host is resolved before the transaction opens, as for `POST /v1/webhooks`.
    let webhook = match body.value.webhook_url.clone() {
        None => None,
        Some(url) => {
            let request =
                api::NewWebhook { url, events: APPROVER_EVENTS.iter().map(|event| (*event).to_owned()).collect() };
            let checked =
                market::webhooks::check(request, state.settings.webhooks.allow_private).await.map_err(|rejection| {
                    match rejection {
                        Rejection::Validation(errors) => Rejection::Validation(
                            errors
                                .into_iter()
                                .map(|error| haggle_domain::FieldError::new("webhook_url", error.message))
                                .collect(),
                        ),
                        other => other,
                    }
                });
            let sealing_key =
                state.sealing_key.get(&state.pool).await.map_err(|e| ApiError::from(e).into_response())?;
            Some((checked, sealing_key))
        }
    };
    let mut command = Write::begin(&state, caller.id, key, body.digest).await?;
    let name = body.value.name;
    let outcome = async {
        let name = text(&name, true, 100).map_err(|message| Rejection::invalid("name", message))?;
        let webhook = match webhook {
            None => None,
            Some((checked, sealing_key)) => Some((checked?, sealing_key)),
        };
        let conn = command.conn().await?;
        db::agents::lock(conn, caller.id).await?;
        if db::approvals::live_approvers(conn, caller.id).await? >= approval::MAX_APPROVERS {
            return Err(Rejection::ApproverLimitReached { limit: approval::MAX_APPROVERS }.into());
        }
        let issued = secrets::issue_approver_token();
        let approver =
            db::approvals::insert_approver(conn, caller.id, name.trim(), &issued.digest, &issued.prefix).await?;
        let webhook = match webhook {
            None => None,
            Some((checked, sealing_key)) => {
                let created = market::webhooks::create(conn, caller.id, checked, &sealing_key).await?;
                db::approvals::bind_webhook(conn, created.webhook.id, approver.id).await?;
                Some(created)
            }
        };
        Ok::<_, market::Error>(
            Reply::json(
                StatusCode::CREATED,
                &api::ApproverIssued { approver: approver.into(), token: issued.plaintext, webhook },
            )
            .with_secret(),
        )
    }
    .await;
    Ok(command.finish(outcome).await)
}

async fn revoke_approver(State(state): State<AppState>, caller: Caller, Id(id): Id) -> Result<Response, Response> {
    let mut command = Write::begin(&state, caller.id, IdempotencyKey(None), [0; 32]).await?;
    let outcome = async {
        let conn = command.conn().await?;
        let revoked = db::approvals::revoke_approver(&mut *conn, caller.id, id).await?;
        let revoked = revoked.ok_or(Rejection::NotFound { what: "approver" })?;
        db::approvals::disable_webhooks_of(conn, caller.id, id).await?;
        Ok::<_, market::Error>(Reply::json(StatusCode::OK, &approver_view(revoked)))
    }
    .await;
    Ok(command.finish(outcome).await)
}

// ---- answering

/// Who calls an approvals route: the agent with its API key, or one of its approvers with its
/// token. The longest token looked up.
impl FromRequestParts<AppState> for Approving {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let token = extract::api_key_of(&parts.headers);
        let Some(token) = token.filter(|token| token.starts_with(secrets::APPROVER_TOKEN_PREFIX)) else {
            let agent = Caller::from_request_parts(parts, state).await?;
            return Ok(Approving { agent, approver_id: None, name: "agent".to_owned() });
        };
        let address = address_of(&parts.extensions);
        let invalid = || {
            state.refuse_credential(
                address,
                token,
                ApiError::unauthenticated("the approver token is not valid or has been revoked"),
            )
        };
        if token.len() > 128 {
            return Err(invalid());
        }
        let digest = secrets::sha256(token.as_bytes());
        let holder =
            db::again_if_lost(|| db::approvals::approver_by_digest(&state.pool, &digest)).await?.ok_or_else(invalid)?;
        state.check_rate(ratelimit::Requester::Agent(holder.agent_id))?;
        let agent = Caller { id: holder.agent_id, tier: holder.tier, approval_rules: true };
        Ok(Approving { agent, approver_id: Some(holder.id), name: holder.name })
    }
}

async fn list(
    State(state): State<AppState>,
    who: Approving,
    Params(query): Params<ApprovalQuery>,
) -> Result<Json<Page<api::Approval>>, ApiError> {
    let limit = page_size(query.limit)?;
    let page = db::approvals::page(&state.pool, who.agent.id, query.status, query.cursor, limit).await?;
    let names = db::approvals::approver_names(&state.pool, who.agent.id).await?;
    let now = Utc::now();
    Ok(Json(page.map(|approval| approval.at(&names, now))))
}

async fn read(State(state): State<AppState>, who: Approving, Id(id): Id) -> Result<Json<api::Approval>, ApiError> {
    let approval =
        db::approvals::get(&state.pool, id, who.agent.id).await?.ok_or_else(|| ApiError::not_found("approval"))?;
    let names = db::approvals::approver_names(&state.pool, who.agent.id).await?;
    Ok(Json(approval.at(&names, Utc::now())))
}

async fn approve(
    State(state): State<AppState>,
    who: Approving,
    Id(id): Id,
    key: IdempotencyKey,
    body: OptionalJsonBody<ApprovalGrant>,
) -> Result<Response, Response> {
    let signer = state.receipts.signer(&state.pool).await.map_err(|error| ApiError::from(error).into_response())?;
    let mut command = Write::begin(&state, who.agent.id, key, body.digest).await?;
    let rules = state.settings.rules;
    let outcome = async {
        let (conn, events) = command.parts().await?;
        market::approvals::approve(conn, events, &who, id, &body.value, &signer, rules).await
    }
    .await;
    let names = db::approvals::approver_names(&state.pool, who.agent.id).await.unwrap_or_default();
    let now = Utc::now();
    Ok(command
        .finish(outcome.map(|Approved { approval, made }| {
            Reply::json(
                StatusCode::OK,
                &api::ApprovalOutcome {
                    approval: approval.at(&names, now),
                    bid: made.bid.map(Into::into),
                    thread: made.thread.map(|thread| thread.at(now)),
                    order: made.order.map(Into::into),
                },
            )
        }))
        .await)
}

async fn deny(
    State(state): State<AppState>,
    who: Approving,
    Id(id): Id,
    key: IdempotencyKey,
    body: OptionalJsonBody<ApprovalDenial>,
) -> Result<Response, Response> {
    let mut command = Write::begin(&state, who.agent.id, key, body.digest).await?;
    let outcome = async {
        let (conn, events) = command.parts().await?;
        market::approvals::deny(conn, events, &who, id, body.value.note.as_deref()).await
    }
    .await;
    answered(&state, &who, command, outcome).await
}

async fn withdraw(
    State(state): State<AppState>,
    who: Approving,
    Id(id): Id,
    key: IdempotencyKey,
    body: ActionBody,
) -> Result<Response, Response> {
    let mut command = Write::begin(&state, who.agent.id, key, body.digest).await?;
    let outcome = async {
        let (conn, events) = command.parts().await?;
        market::approvals::withdraw(conn, events, &who, id).await
    }
    .await;
    answered(&state, &who, command, outcome).await
}

/// The answer to a denial or a withdrawal: the request as it ended.
async fn answered(
    state: &AppState,
    who: &Approving,
    command: Write,
    outcome: market::Result<db::approvals::Approval>,
) -> Result<Response, Response> {
    let names = db::approvals::approver_names(&state.pool, who.agent.id).await.unwrap_or_default();
    let now = Utc::now();
    Ok(command.finish(outcome.map(|approval| Reply::json(StatusCode::OK, &approval.at(&names, now)))).await)
}
