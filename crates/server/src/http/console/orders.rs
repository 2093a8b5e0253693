//! The console's orders: the newest orders market-wide, and an order's page with its timeline
//! (payments, fulfilment, completion or cancellation, every negotiation on it with its kind,
//! status and ladder, escalation and the operator's decision) and, for an escalated refund
//! not yet decided, the operator's decide form.
//!
//! These pages are rendered whole on the server, from the same views the API answers with. The
//! decide form posts to the console (`POST /console/threads/{id}/decide`), which holds it to the
//! session and the same-origin rule the console's other forms are held to, and makes the
//! decision through the market operation `POST /v1/admin/threads/{id}/decide` makes.

use askama::Template;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::pages::{Frame, Section, event_types, operator_signed_in, render, to_sign_in};
use crate::db;
use crate::db::admin::{OrderFilter, ThreadFilter};
use crate::http::error::{ApiError, Code};
use crate::http::extract::Id;
use crate::http::session::same_origin;
use crate::http::{AppState, Write};
use crate::market::{self, order_negotiations};
use crate::views::order_with_payments;
use haggle_api::timeline::{self, Moment};
use haggle_api::{DisputeDecision, ThreadWithBids};
use haggle_domain::ThreadKind;
use haggle_domain::money::{MINOR_PER_UNIT, Price};

/// How many orders the list shows.
const LISTED: i64 = 50;

pub struct OrderRow {
    id: Uuid,
    made: String,
    status: &'static str,
    amount: String,
    paid: String,
    refunded: String,
}

#[derive(Template)]
#[template(path = "console/orders.html")]
struct OrdersPage {
    frame: Frame,
    section: Section,
    title: String,
    event_types: String,
    orders: Vec<OrderRow>,
    escalated: String,
}

pub struct PaymentRow {
    recorded: String,
    amount: String,
    reference: String,
    status: &'static str,
    answered: String,
}

pub struct BidRow {
    round: i32,
    author: &'static str,
    offer: String,
    status: &'static str,
    made: String,
}

/// The decide form of an escalated refund, with what was typed when it was refused.
pub struct DecideForm {
    action: String,
    currency: String,
    refundable: String,
    amount: String,
    note: String,
}

pub struct NegotiationView {
    id: Uuid,
    kind: &'static str,
    status: &'static str,
    escalation: String,
    decision: String,
    bids: Vec<BidRow>,
    decide: Option<DecideForm>,
}

pub struct MomentRow {
    at: String,
    what: String,
    detail: String,
}

#[derive(Template)]
#[template(path = "console/order.html")]
struct OrderPage {
    frame: Frame,
    section: Section,
    title: String,
    event_types: String,
    id: Uuid,
    found: bool,
    problem: Option<String>,
    summary: Vec<(&'static str, String)>,
    timeline: Vec<MomentRow>,
    payments: Vec<PaymentRow>,
    negotiations: Vec<NegotiationView>,
}

fn when(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

fn when_maybe(at: Option<DateTime<Utc>>) -> String {
    at.map(when).unwrap_or_else(|| "—".to_owned())
}

/// `GET /console/orders`: the newest orders.
pub async fn list(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    if !operator_signed_in(&state, &headers).await? {
        return Ok(to_sign_in());
    }
    let filter = OrderFilter { limit: LISTED, ..OrderFilter::default() };
    let orders = db::admin::orders(&state.pool, &filter).await?;
    let escalated =
        db::admin::threads(&state.pool, &ThreadFilter { escalated: true, limit: 100, ..ThreadFilter::default() })
            .await?;
    let escalated = match escalated.data.len() {
        0 => "none".to_owned(),
        n => format!("{n}{}", if escalated.next_cursor.is_some() { " or more" } else { "" }),
    };
    let orders = orders
        .data
        .into_iter()
        .map(|order| {
            let money = |minor| Price::new(minor, order.currency).to_string();
            OrderRow {
                id: order.id,
                made: when(order.created_at),
                status: order.status.as_str(),
                amount: money(order.amount),
                paid: money(order.paid_amount),
                refunded: money(order.refunded_amount),
            }
        })
        .collect();
    Ok(render(&OrdersPage {
        frame: Frame::new(),
        section: Section::Orders,
        title: "Orders".to_owned(),
        event_types: event_types(),
        orders,
        escalated,
    }))
}

/// `GET /console/orders/{id}`: an order's timeline, 404 for an order that does not exist.
pub async fn order(State(state): State<AppState>, headers: HeaderMap, Id(id): Id) -> Result<Response, ApiError> {
    if !operator_signed_in(&state, &headers).await? {
        return Ok(to_sign_in());
    }
    order_page(&state, id, None, None).await
}

/// The order's page; with `refused`, the decide form of that thread shows what was typed and
/// the page why it was refused, under the refusal's status.
async fn order_page(
    state: &AppState,
    id: Uuid,
    refused: Option<(Uuid, &Typed)>,
    problem: Option<(StatusCode, String)>,
) -> Result<Response, ApiError> {
    let mut page = OrderPage {
        frame: Frame::new(),
        section: Section::Order,
        title: "Order".to_owned(),
        event_types: event_types(),
        id,
        found: false,
        problem: problem.as_ref().map(|(_, text)| text.clone()),
        summary: Vec::new(),
        timeline: Vec::new(),
        payments: Vec::new(),
        negotiations: Vec::new(),
    };
    let Some(order) = db::admin::order(&state.pool, id).await? else {
        return Ok((StatusCode::NOT_FOUND, render(&page)).into_response());
    };
    let payments = db::orders::payments(&state.pool, id).await?;
    let negotiations = db::admin::negotiations_of_order(&state.pool, id).await?;
    let now = Utc::now();
    let negotiations: Vec<ThreadWithBids> = negotiations
        .iter()
        .map(|(thread, bids)| ThreadWithBids {
            thread: thread.at(now),
            bids: bids.iter().map(|bid| bid.at(now)).collect(),
        })
        .collect();
    let shown = order_with_payments(order, payments);
    let order = &shown.order;
    let money = |minor: i64| Price::new(minor, order.currency).to_string();
    let refundable = order.paid_amount - order.refunded_amount;

    page.found = true;
    page.title = format!("Order {}", &id.to_string()[..8]);
    page.summary = vec![
        ("Order", id.to_string()),
        ("Status", order.status.as_str().to_owned()),
        ("Amount", money(order.amount)),
        ("Paid", money(order.paid_amount)),
        ("Outstanding", money(order.outstanding)),
        ("Refunded", money(order.refunded_amount)),
        ("Refund due", money(order.refund_due)),
        ("Buyer", order.buyer_id.to_string()),
        ("Seller", order.seller_id.to_string()),
        ("Listing", order.listing_id.to_string()),
        ("Made", when(order.created_at)),
    ];
    if let Some(terms) = order.terms.as_ref().filter(|terms| !terms.is_null()) {
        page.summary.push(("Terms", terms.to_string()));
    }
    page.timeline = timeline::order_timeline(order, &shown.payments, &negotiations)
        .into_iter()
        .map(|Moment { at, what, detail }| MomentRow { at: when(at), what, detail })
        .collect();
    page.payments = shown
        .payments
        .iter()
        .map(|payment| PaymentRow {
            recorded: when(payment.created_at),
            amount: money(payment.amount),
            reference: payment.reference.clone(),
            status: payment.status.as_str(),
            answered: when_maybe(payment.answered_at),
        })
        .collect();
    page.negotiations = negotiations
        .iter()
        .map(|negotiation| {
            let thread = &negotiation.thread;
            let escalation = thread.escalation.as_deref();
            let decision = escalation.and_then(|escalation| escalation.decision.as_ref());
            let undecided = escalation.is_some() && decision.is_none();
            let decide = (undecided && thread.kind == ThreadKind::Refund).then(|| {
                let typed = refused.filter(|(thread_id, _)| *thread_id == thread.id).map(|(_, typed)| typed);
                DecideForm {
                    action: format!("/console/threads/{}/decide", thread.id),
                    currency: order.currency.to_string(),
                    refundable: money(refundable),
                    amount: typed.map(|typed| typed.amount.clone()).unwrap_or_default(),
                    note: typed.map(|typed| typed.note.clone()).unwrap_or_default(),
                }
            });
            NegotiationView {
                id: thread.id,
                kind: thread.kind.as_str(),
                status: thread.status.as_str(),
                escalation: escalation.map_or_else(
                    || "—".to_owned(),
                    |escalation| format!("{} by {}", when(escalation.escalated_at), escalation.escalated_by),
                ),
                decision: decision.map_or_else(
                    || if undecided { "waiting for the operator".to_owned() } else { "—".to_owned() },
                    |decision| {
                        format!(
                            "{} refunded — “{}” ({})",
                            money(decision.amount),
                            decision.note,
                            when(decision.decided_at)
                        )
                    },
                ),
                bids: negotiation
                    .bids
                    .iter()
                    .map(|bid| BidRow {
                        round: bid.round,
                        author: bid.author.as_str(),
                        offer: timeline::offer(bid),
                        status: bid.status.as_str(),
                        made: when(bid.created_at),
                    })
                    .collect(),
                decide,
            }
        })
        .collect();
    let status = problem.map_or(StatusCode::OK, |(status, _)| status);
    Ok((status, render(&page)).into_response())
}

/// What the decide form sent, as typed.
#[derive(Debug, Default)]
pub struct Typed {
    amount: String,
    note: String,
}

/// An amount in currency units as a person types it (`12`, `12.5`, `12.50`, `1,250.00`), in
/// minor units: `None` unless it is a non-negative number with at most two decimals.
fn minor_units(text: &str) -> Option<i64> {
    let text: String = text.trim().chars().filter(|c| *c != ',' && *c != ' ').collect();
    let (whole, fraction) = text.split_once('.').unwrap_or((&text, ""));
    let digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || whole.len() > 15 || fraction.len() > 2 || !digits(whole) || !digits(fraction) {
        return None;
    }
    let whole: i64 = whole.parse().ok()?;
    let fraction: i64 = if fraction.is_empty() { 0 } else { format!("{fraction:0<2}").parse().ok()? };
    whole.checked_mul(MINOR_PER_UNIT)?.checked_add(fraction)
}

/// `POST /console/threads/{id}/decide`: the operator's decision on an escalated refund, from the
/// order page's form (`amount` in currency units, `note`). Made, it sends the operator back to
/// the order's page (303); refused, the page again with why, under the refusal's status, and
/// nothing changed. Only from this server's own pages, with an open session.
pub async fn decide(
    State(state): State<AppState>,
    headers: HeaderMap,
    Id(thread_id): Id,
    body: Bytes,
) -> Result<Response, ApiError> {
    if !operator_signed_in(&state, &headers).await? {
        return Ok(to_sign_in());
    }
    if !same_origin(&headers) {
        return Err(ApiError::new(Code::Forbidden, "decide from the console's own order page"));
    }
    let mut typed = Typed::default();
    for (name, value) in url::form_urlencoded::parse(&body) {
        match name.as_ref() {
            "amount" => typed.amount = value.into_owned(),
            "note" => typed.note = value.into_owned(),
            _ => {}
        }
    }
    let Some(order_id) = db::admin::order_of_thread(&state.pool, thread_id).await? else {
        return Err(ApiError::not_found("thread"));
    };
    let Some(amount) = minor_units(&typed.amount) else {
        let problem = format!(
            "The refund must be an amount in currency units with at most two decimals, such as 12.50; “{}” is not one.",
            typed.amount
        );
        return order_page(
            &state,
            order_id,
            Some((thread_id, &typed)),
            Some((StatusCode::UNPROCESSABLE_ENTITY, problem)),
        )
        .await;
    };
    let decision = DisputeDecision { amount, note: typed.note.clone() };
    let mut command = Write::new(&state);
    let outcome = async {
        let (conn, events) = command.parts().await?;
        order_negotiations::decide(conn, events, thread_id, &decision).await
    }
    .await;
    match outcome {
        Ok((_thread, order)) => {
            command.done().await?;
            tracing::info!(%thread_id, amount, "the operator decided a refund from the console");
            Ok(Redirect::to(&format!("{}/orders/{}", super::PATH, order.id)).into_response())
        }
        // Dropping the write rolls back whatever it began; the decision's checks come before
        // its first change anyway.
        Err(market::Error::Rejected(rejection)) => {
            drop(command);
            let refusal = ApiError::from(rejection);
            let problem = problem_text(&refusal);
            order_page(&state, order_id, Some((thread_id, &typed)), Some((refusal.status(), problem))).await
        }
        Err(error) => Err(error.into()),
    }
}

/// A refusal in words: its detail, and each field's message.
fn problem_text(refusal: &ApiError) -> String {
    let mut text = refusal.detail.clone();
    if let Some(Value::Array(errors)) = refusal.extensions.get("errors") {
        for error in errors {
            if let (Some(field), Some(message)) = (error["field"].as_str(), error["message"].as_str()) {
                text.push_str(&format!(" The {field} {message}."));
            }
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::minor_units;

    #[test]
    fn amounts_are_read_in_currency_units() {
        for (text, minor) in
            [("12", 1200), ("12.5", 1250), ("12.50", 1250), ("0", 0), ("1,250.00", 125000), (" 3.07 ", 307)]
        {
            assert_eq!(minor_units(text), Some(minor), "{text}");
        }
        for text in ["", "-1", "1.234", "abc", "1e3", ".5", "1.-5", "99999999999999999"] {
            assert_eq!(minor_units(text), None, "{text}");
        }
    }
}
