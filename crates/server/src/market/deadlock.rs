//! Deadlocks: marking a thread that stopped converging, with the mediator's suggestion, and
//! renewing the suggestion while the thread stays marked.
//!
//! Both run in the counter that changes the thread, where the move is made, and the counter's
//! own statement writes the mark (or the renewed suggestion) and its `negotiation.deadlock`
//! event. Detection reads the thread's latest bids only for a thread with enough bids and no
//! mark yet, so a thread is marked once. Once marked, a thread stays so: each later counter
//! renews the suggestion for the pending bid it makes (`bid_id`, `mover`, the suggestion found
//! again from the new positions by the same method), and each agreement already given carries
//! over to it if the renewed suggestion does not move against the party who gave it
//! (`deadlock::carries_over`); the others are dropped. Settling at the suggestion is
//! [`super::mediation`]'s, which makes its moves through the negotiation's operations; the mark
//! sits below them.

use serde_json::Value;
use sqlx::PgConnection;
use sqlx::types::Json;

use super::{Result, Rules};
use crate::db::rows::BidContext;
use crate::db::{self, Bid};
use haggle_api as api;
use haggle_domain::Party;
use haggle_domain::deadlock;
use haggle_domain::issues::{Issues, Offer, Valuation};
use haggle_domain::strategy::Policy;

/// What a counter writes of a thread's mark: the suggestion for the counter's pending bid, the
/// parties whose agreement stands for it, and those whose agreement to the previous suggestion
/// did not carry over.
#[derive(Debug, Clone)]
pub(super) struct Mark {
    pub suggestion: api::Suggestion,
    pub agreed: Vec<Party>,
    pub dropped: Vec<Party>,
}

/// The mark `counter` (about to be made on the thread of `context`) writes: a new one if it
/// deadlocks an unmarked thread, a renewed suggestion on a marked thread; `None` otherwise, or
/// when no legal counter is left between the new positions (the previous suggestion then stays,
/// stale: settling at it is refused). The counter rules keep that from happening: a counter never
/// reaches the other side's pending amount, and the side answering it may always repeat its own
/// previous one, so the branch guards the domain's answer rather than a case a counter can make.
/// With detection off (`rules.deadlock`), neither: the mediator is off.
pub(super) async fn mark(
    conn: &mut PgConnection,
    context: &BidContext,
    issues: &Issues,
    counter: &Bid,
    rules: Rules,
) -> Result<Option<Mark>> {
    let Some(window) = rules.deadlock.window() else {
        return Ok(None);
    };
    match &context.thread.mediation {
        Some(previous) if context.thread.deadlock_at.is_some() => renew(conn, context, issues, counter, previous).await,
        Some(_) | None => detect(conn, context, issues, counter, rules, window).await,
    }
}

/// Whether `counter` (about to be made on the thread of `context`) certainly leaves the thread
/// unmarked, as [`mark`] would find, decided from the thread's bids before it (`amounts` and
/// `terms`, round 1 first) without the database. `false` also where only the database can
/// tell: a marked thread's suggestion to renew, or a deadlock whose suggestion weighs the
/// parties' valuations.
pub(super) fn unmarked(
    context: &BidContext,
    issues: &Issues,
    counter: &Bid,
    rules: Rules,
    amounts: &[i64],
    terms: &[Option<Value>],
) -> bool {
    let Some(window) = rules.deadlock.window() else {
        return true;
    };
    if context.thread.mediation.is_some() && context.thread.deadlock_at.is_some() {
        return false;
    }
    let round = counter.round as usize;
    if round < window {
        return true;
    }
    // The bids of rounds `round - window + 1` to `round - 1`: `detect`'s read.
    let before = round - window..round - 1;
    let (Some(amounts), Some(terms)) = (amounts.get(before.clone()), terms.get(before)) else {
        return false;
    };
    let before = amounts.iter().zip(terms).map(|(amount, terms)| (*amount, terms.as_ref()));
    deadlocking_offers(context, issues, counter, rules, window, before).is_none()
}

/// The last `window` offers, the bids `before` the counter then `counter`, if each reads as an
/// offer and they deadlock the thread of `context`.
fn deadlocking_offers<'a>(
    context: &BidContext,
    issues: &Issues,
    counter: &'a Bid,
    rules: Rules,
    window: usize,
    before: impl Iterator<Item = (i64, Option<&'a Value>)>,
) -> Option<Vec<Offer>> {
    let offers: Vec<Offer> = before
        .chain([(counter.amount, counter.terms.as_ref())])
        .map(|(amount, terms)| issues.offer(amount, terms))
        .collect::<Option<_>>()?;
    (offers.len() == window && deadlock::is_deadlocked(&offers, context.listing.ask_amount, issues, rules.deadlock))
        .then_some(offers)
}

/// The suggestion for the thread of `context` if `counter` deadlocks it, over the last `window`
/// offers; `None` otherwise.
async fn detect(
    conn: &mut PgConnection,
    context: &BidContext,
    issues: &Issues,
    counter: &Bid,
    rules: Rules,
    window: usize,
) -> Result<Option<Mark>> {
    if (counter.round as usize) < window {
        return Ok(None);
    }
    let first = counter.round - window as i32;
    let rows = db::mediation::offers_after(conn, context.thread.id, first, counter.round).await?;
    let before = rows.iter().map(|(amount, terms)| (*amount, terms.as_ref()));
    let Some(offers) = deadlocking_offers(context, issues, counter, rules, window, before) else {
        return Ok(None);
    };
    let valuations = valuations(conn, context, issues).await?;
    let (pending, own_previous) = (&offers[window - 1], &offers[window - 2]);
    let Some((suggestion, _)) = suggest(counter, pending, own_previous, issues, &valuations, 0) else {
        return Ok(None);
    };
    Ok(Some(Mark { suggestion, agreed: Vec::new(), dropped: Vec::new() }))
}

/// The renewed suggestion of a marked thread for `counter`, the agreements to `previous` that
/// carry over to it, and those that do not.
async fn renew(
    conn: &mut PgConnection,
    context: &BidContext,
    issues: &Issues,
    counter: &Bid,
    previous: &api::Suggestion,
) -> Result<Option<Mark>> {
    // The counter's mover answers the bid the counter answers: that bid is now the other side's
    // own previous position.
    let (Some(pending), Some(own_previous)) = (
        issues.offer(counter.amount, counter.terms.as_ref()),
        issues.offer(context.bid.amount, context.bid.terms.as_ref()),
    ) else {
        return Ok(None);
    };
    let valuations = valuations(conn, context, issues).await?;
    let Some((suggestion, renewed)) =
        suggest(counter, &pending, &own_previous, issues, &valuations, previous.renewal.saturating_add(1))
    else {
        return Ok(None);
    };
    let agreed_to = issues.offer(previous.amount, previous.terms.as_ref());
    let (agreed, dropped) = context.thread.mediation_agreed.iter().partition(|&&party| {
        let valuation = match party {
            Party::Buyer => valuations.buyer.as_ref(),
            Party::Seller => valuations.seller.as_ref(),
        };
        agreed_to
            .as_ref()
            .is_some_and(|agreed_to| deadlock::carries_over(party, agreed_to, &renewed, issues, valuation))
    });
    Ok(Some(Mark { suggestion, agreed, dropped }))
}

/// Both sides' utilities on the thread's listing, as their policies on the thread declare them;
/// read only on a listing with issues, where utilities count.
#[derive(Debug, Default)]
struct Valuations {
    buyer: Option<Valuation>,
    seller: Option<Valuation>,
}

async fn valuations(conn: &mut PgConnection, context: &BidContext, issues: &Issues) -> Result<Valuations> {
    if issues.is_empty() {
        return Ok(Valuations::default());
    }
    let policies = db::policies::thread_policies(&mut *conn, context.thread.id).await?;
    let ask = context.listing.ask_amount;
    let valuation = |stored: Option<&Json<Value>>, role: Party| {
        let policy: Policy = serde_json::from_value(stored?.0.clone()).ok()?;
        policy.valuation(role, issues, ask)
    };
    Ok(Valuations {
        buyer: valuation(policies.buyer.as_ref(), Party::Buyer),
        seller: valuation(policies.seller.as_ref(), Party::Seller),
    })
}

/// The suggestion (the `renewal`-th) for the side answering `counter`, between the counter
/// (`pending`) and that side's own previous position, with the offer it makes.
fn suggest(
    counter: &Bid,
    pending: &Offer,
    own_previous: &Offer,
    issues: &Issues,
    valuations: &Valuations,
    renewal: u32,
) -> Option<(api::Suggestion, Offer)> {
    let mover = counter.author.other();
    let both = valuations.buyer.as_ref().zip(valuations.seller.as_ref());
    let found = deadlock::suggest(mover, pending, own_previous, issues, both)?;
    let terms = if issues.is_empty() { counter.terms.clone() } else { Some(issues.terms(&found.values)) };
    let offer = Offer { amount: found.amount, values: found.values };
    let suggestion =
        api::Suggestion { bid_id: counter.id, mover, amount: offer.amount, terms, method: found.method, renewal };
    Some((suggestion, offer))
}
