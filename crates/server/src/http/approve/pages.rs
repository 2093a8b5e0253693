//! The approval page's handlers: signing in and out, the page, the JSON document its script
//! polls, and the approve and deny forms.

use askama::Template;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{Extensions, HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::Utc;
use haggle_api::{self as api, ApprovalStatus, Budget, BudgetScope};
use haggle_domain::Rejection;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{COOKIE, LASTS, PATH, assets, session_id, signed_in};
use crate::db;
use crate::db::agents::Caller;
use crate::db::approvals::ApproverHolder;
use crate::http::error::{ApiError, Code};
use crate::http::extract::{Id, address_of};
use crate::http::session::same_origin;
use crate::http::{AppState, Write, ratelimit};
use crate::market;
use crate::market::approvals::Approving;
use crate::secrets;

/// The most pending requests the page shows at once (an agent holds at most 20).
const SHOWN: i64 = 50;

#[derive(Template)]
#[template(path = "approve/sign_in.html")]
struct SignIn<'a> {
    css: String,
    error: Option<&'a str>,
}

#[derive(Template)]
#[template(path = "approve/page.html")]
struct Page {
    css: String,
    js: String,
    name: String,
    agent: Uuid,
}

fn render(template: &impl Template) -> Response {
    match template.render() {
        Ok(html) => Html(html).into_response(),
        Err(error) => {
            tracing::error!(%error, "the approval page could not be rendered");
            (StatusCode::INTERNAL_SERVER_ERROR, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], "error\n")
                .into_response()
        }
    }
}

fn sign_in_page(status: StatusCode, error: Option<&str>) -> Response {
    (status, render(&SignIn { css: assets::url("approve.css"), error })).into_response()
}

/// `GET /approve`: the page, or the sign-in form without a session.
pub async fn page(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    match signed_in(&state, &headers).await? {
        Some(holder) => Ok(render(&Page {
            css: assets::url("approve.css"),
            js: assets::url("approve.js"),
            name: holder.name,
            agent: holder.agent_id,
        })),
        None => Ok(sign_in_page(StatusCode::OK, None)),
    }
}

/// `POST /approve/session`: signs in with the approver token sent as the form's `token`. A
/// wrong token is answered 401 with the form again and no cookie, and counts against the
/// address and the token's prefix as a wrong credential on the API does (429 beyond).
pub async fn sign_in(
    State(state): State<AppState>,
    extensions: Extensions,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    if !same_origin(&headers) {
        return Ok(sign_in_page(StatusCode::FORBIDDEN, Some("Sign in from this server's own sign-in page.")));
    }
    let token = url::form_urlencoded::parse(&body).find(|(name, _)| name == "token").map(|(_, token)| token);
    let Some(token) = token.map(|token| token.trim().to_owned()).filter(|token| !token.is_empty()) else {
        return Ok(sign_in_page(StatusCode::BAD_REQUEST, Some("Enter your approver token.")));
    };
    let holder = if token.starts_with(secrets::APPROVER_TOKEN_PREFIX) && token.len() <= 128 {
        let digest = secrets::sha256(token.as_bytes());
        db::again_if_lost(|| db::approvals::approver_by_digest(&state.pool, &digest)).await?
    } else {
        None
    };
    let Some(holder) = holder else {
        let refusal = ApiError::unauthenticated("the approver token is not valid or has been revoked");
        let answer = state.refuse_credential(address_of(&extensions), &token, refusal);
        if answer.code == Code::RateLimited {
            return Ok(answer.into_response());
        }
        return Ok(sign_in_page(StatusCode::UNAUTHORIZED, Some("That is not a valid approver token.")));
    };
    state.check_rate(ratelimit::Requester::Agent(holder.agent_id))?;
    let id = URL_SAFE_NO_PAD.encode(secrets::random_bytes::<32>());
    let digest = secrets::sha256(id.as_bytes());
    let mut command = Write::new(&state);
    db::approver_sessions::open(command.conn().await?, &digest, holder.id, LASTS).await?;
    command.done().await?;
    tracing::info!(approver = %holder.id, agent = %holder.agent_id, "an approver signed in to the approval page");
    let cookie = format!("{COOKIE}={id}; Max-Age={}; Path=/; Secure; HttpOnly; SameSite=Strict", LASTS.as_secs());
    Ok(with_cookie(Redirect::to(PATH).into_response(), &cookie))
}

/// `POST /approve/sign-out`: ends the session, on every instance.
pub async fn sign_out(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    if !same_origin(&headers) {
        return Err(foreign_origin());
    }
    if let Some(id) = session_id(&headers) {
        let digest = secrets::sha256(id.as_bytes());
        let mut command = Write::new(&state);
        db::approver_sessions::close(command.conn().await?, &digest).await?;
        command.done().await?;
    }
    let cookie = format!("{COOKIE}=; Max-Age=0; Path=/; Secure; HttpOnly; SameSite=Strict");
    Ok(with_cookie(Redirect::to(PATH).into_response(), &cookie))
}

fn with_cookie(mut response: Response, cookie: &str) -> Response {
    let value = HeaderValue::from_str(cookie).expect("a cookie of base64url characters is a header value");
    response.headers_mut().insert(header::SET_COOKIE, value);
    response
}

fn foreign_origin() -> ApiError {
    ApiError::new(Code::Forbidden, "a change on the approval page is made from the page itself (its Origin)")
}

fn no_session() -> ApiError {
    ApiError::unauthenticated("no approval page session, or it has ended; sign in again at /approve")
}

async fn holder(state: &AppState, headers: &HeaderMap) -> Result<ApproverHolder, ApiError> {
    let holder = signed_in(state, headers).await?.ok_or_else(no_session)?;
    state.check_rate(ratelimit::Requester::Agent(holder.agent_id))?;
    Ok(holder)
}

#[derive(Debug, Deserialize)]
pub struct RequestsQuery {
    /// A request the approver just answered, to show how it ended.
    answered: Option<Uuid>,
}

/// A pending request as the page shows it: the request, its listing, and its thread's bids.
#[derive(Debug, Serialize)]
struct Shown {
    approval: api::Approval,
    listing: Option<api::Listing>,
    /// The thread's bids in round order (none yet for a placement or a purchase).
    ladder: Vec<api::Bid>,
}

#[derive(Debug, Serialize)]
struct Requests {
    approver: String,
    agent_id: Uuid,
    pending: Vec<Shown>,
    answered: Option<api::Approval>,
}

/// `GET /approve/requests`: the agent's pending requests, newest first, each with its listing
/// and its thread's price ladder; read by the page's script every few seconds, each read
/// authorised afresh by the session.
pub async fn requests(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<RequestsQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let holder = holder(&state, &headers).await?;
    let agent = holder.agent_id;
    let now = Utc::now();
    let names = db::approvals::approver_names(&state.pool, agent).await?;
    let page = db::approvals::page(&state.pool, agent, Some(ApprovalStatus::Pending), None, SHOWN).await?;
    let mut pending = Vec::with_capacity(page.data.len());
    for approval in page.data {
        let approval = approval.at(&names, now);
        let listing = db::listings::get(&state.pool, approval.held.listing_id).await?.map(Into::into);
        let ladder = match approval.held.thread_id {
            Some(thread) => db::threads::get_thread_with_bids(&state.pool, thread, Some(agent))
                .await?
                .map(|(_, bids)| bids.iter().map(|bid| bid.at(now)).collect())
                .unwrap_or_default(),
            None => Vec::new(),
        };
        pending.push(Shown { approval, listing, ladder });
    }
    let answered = match query.answered {
        Some(id) => db::approvals::get(&state.pool, id, agent).await?.map(|approval| approval.at(&names, now)),
        None => None,
    };
    let body = Requests { approver: holder.name, agent_id: agent, pending, answered };
    Ok(Json(serde_json::to_value(&body).map_err(|_| ApiError::internal())?))
}

fn approving(holder: ApproverHolder) -> Approving {
    Approving {
        agent: Caller { id: holder.agent_id, tier: holder.tier, approval_rules: true },
        approver_id: Some(holder.id),
        name: holder.name,
    }
}

/// The form's fields, by name.
fn field(body: &[u8], name: &str) -> Option<String> {
    url::form_urlencoded::parse(body)
        .find(|(field, _)| field == name)
        .map(|(_, value)| value.trim().to_owned())
        .filter(|value| !value.is_empty())
}

/// The approve form's budget: none unless its amount is given; hours to seconds.
fn budget(body: &[u8]) -> Result<Option<Budget>, ApiError> {
    let Some(amount) = field(body, "budget_amount") else { return Ok(None) };
    let invalid = |field: &str, message: &str| {
        ApiError::fields(
            Code::ValidationFailed,
            "the budget is not valid",
            &[haggle_domain::FieldError::new(field, message.to_owned())],
        )
    };
    let amount: i64 = amount.parse().map_err(|_| invalid("budget.amount", "a whole number of minor units"))?;
    let hours: i64 = field(body, "budget_hours")
        .unwrap_or_else(|| "24".to_owned())
        .parse()
        .map_err(|_| invalid("budget.expires_in", "a whole number of hours"))?;
    let scope = match field(body, "budget_scope").as_deref() {
        None | Some("thread") => BudgetScope::Thread,
        Some("listing") => BudgetScope::Listing,
        Some(_) => return Err(invalid("budget.scope", "thread or listing")),
    };
    Ok(Some(Budget { amount, expires_in: hours.saturating_mul(3600), scope }))
}

/// Where the page goes after an answer: back to itself, showing how the request ended, or the
/// refusal's code.
fn answered(id: Uuid, refusal: Option<&ApiError>) -> Response {
    match refusal {
        None => Redirect::to(&format!("{PATH}?answered={id}")).into_response(),
        Some(refusal) => {
            Redirect::to(&format!("{PATH}?answered={id}&refused={}", refusal.code.as_str())).into_response()
        }
    }
}

/// Commits an answer, its refusal too (which may have recorded the request's expiry), and
/// sends the page back to itself. A request that is not the agent's is `404`, as on the API.
async fn finish(command: Write, id: Uuid, outcome: market::Result<()>) -> Result<Response, ApiError> {
    let refusal = match outcome {
        Ok(()) => None,
        Err(market::Error::Rejected(Rejection::NotFound { what })) => return Err(ApiError::not_found(what)),
        Err(market::Error::Rejected(rejection)) => Some(ApiError::from(rejection)),
        Err(error) => return Err(error.into()),
    };
    command.done().await?;
    Ok(answered(id, refusal.as_ref()))
}

/// `POST /approve/requests/{id}/approve`: approves the request as the signed-in approver, with
/// the form's budget and note; the page then shows how it ended (APPROVED, or FAILED).
pub async fn approve(
    State(state): State<AppState>,
    headers: HeaderMap,
    Id(id): Id,
    body: Bytes,
) -> Result<Response, ApiError> {
    if !same_origin(&headers) {
        return Err(foreign_origin());
    }
    let who = approving(holder(&state, &headers).await?);
    let grant = match budget(&body) {
        Ok(budget) => api::ApprovalGrant { budget, note: field(&body, "note") },
        Err(refusal) => return Ok(answered(id, Some(&refusal))),
    };
    let signer = state.receipts.signer(&state.pool).await?;
    let rules = state.settings.rules;
    let mut command = Write::new(&state);
    let outcome = async {
        let (conn, events) = command.parts().await?;
        market::approvals::approve(conn, events, &who, id, &grant, &signer, rules).await.map(drop)
    }
    .await;
    finish(command, id, outcome).await
}

/// `POST /approve/requests/{id}/deny`: denies the request, with the form's note.
pub async fn deny(
    State(state): State<AppState>,
    headers: HeaderMap,
    Id(id): Id,
    body: Bytes,
) -> Result<Response, ApiError> {
    if !same_origin(&headers) {
        return Err(foreign_origin());
    }
    let who = approving(holder(&state, &headers).await?);
    let note = field(&body, "note");
    let mut command = Write::new(&state);
    let outcome = async {
        let (conn, events) = command.parts().await?;
        market::approvals::deny(conn, events, &who, id, note.as_deref()).await.map(drop)
    }
    .await;
    finish(command, id, outcome).await
}
