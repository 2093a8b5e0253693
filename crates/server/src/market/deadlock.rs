//! Deadlocks: marking a thread that stopped converging, with the mediator's suggestion.
//!
//! Detection runs in the counter that would deadlock the thread, where the move is made: only a
//! thread with enough bids and no mark yet reads its latest bids, and the mark and its
//! `negotiation.deadlock` event are written by the counter's own statement, so a thread is
//! marked once. The suggestion answers the pending bid of that moment (`bid_id`): any later move
//! makes it stale. Settling at the suggestion is [`super::mediation`]'s, which makes its moves
//! through the negotiation's operations; detection sits below them.

use serde_json::Value;
use sqlx::PgConnection;
use sqlx::types::Json;

use super::{Result, Rules};
use crate::db::rows::BidContext;
use crate::db::{self, Bid};
use haggle_api as api;
use haggle_domain::Party;
use haggle_domain::deadlock;
use haggle_domain::issues::{Issues, Offer};
use haggle_domain::strategy::Policy;

/// The suggestion for the thread of `context` if `counter` (about to be made there) deadlocks
/// it; `None` otherwise, or when the thread is marked already.
pub(super) async fn detect(
    conn: &mut PgConnection,
    context: &BidContext,
    issues: &Issues,
    counter: &Bid,
    rules: Rules,
) -> Result<Option<api::Suggestion>> {
    let Some(window) = rules.deadlock.window() else {
        return Ok(None);
    };
    if context.thread.deadlock_at.is_some() || (counter.round as usize) < window {
        return Ok(None);
    }
    let first = counter.round - window as i32;
    let mut rows = db::mediation::offers_after(conn, context.thread.id, first, counter.round).await?;
    rows.push((counter.amount, counter.terms.clone()));
    let offers: Option<Vec<Offer>> = rows.iter().map(|(amount, terms)| issues.offer(*amount, terms.as_ref())).collect();
    let Some(offers) = offers.filter(|offers| offers.len() == window) else {
        return Ok(None);
    };
    let ask = context.listing.ask_amount;
    if !deadlock::is_deadlocked(&offers, ask, issues, rules.deadlock) {
        return Ok(None);
    }
    let mover = counter.author.other();
    let (pending, own_previous) = (&offers[window - 1], &offers[window - 2]);
    let policies = if issues.is_empty() {
        None
    } else {
        Some(db::policies::thread_policies(&mut *conn, context.thread.id).await?)
    };
    let valuation = |stored: Option<&Json<Value>>, role: Party| {
        let policy: Policy = serde_json::from_value(stored?.0.clone()).ok()?;
        policy.valuation(role, issues, ask)
    };
    let valuations = policies.as_ref().and_then(|policies| {
        Some((valuation(policies.buyer.as_ref(), Party::Buyer)?, valuation(policies.seller.as_ref(), Party::Seller)?))
    });
    let Some(found) = deadlock::suggest(mover, pending, own_previous, issues, valuations.as_ref().map(|(b, s)| (b, s)))
    else {
        return Ok(None);
    };
    let terms = if issues.is_empty() { counter.terms.clone() } else { Some(issues.terms(&found.values)) };
    Ok(Some(api::Suggestion { bid_id: counter.id, mover, amount: found.amount, terms, method: found.method }))
}
