//! An order's timeline as people read it: what happened to it and when, from the views the API
//! answers with (the order, its payments, the negotiations on it with their bids). The console's
//! order page and the terminal's `haggle order ID` both print it, so the two tell the same story.
//!
//! A negotiation of a kind this build does not describe is still shown: its kind's name, and its
//! terms as JSON.

use chrono::{DateTime, Utc};

use crate::views::{Bid, Order, Payment, ThreadWithBids};
use haggle_domain::money::Price;
use haggle_domain::order::PaymentStatus;
use haggle_domain::order_negotiation;
use haggle_domain::{ThreadKind, ThreadStatus};

/// One thing that happened to an order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moment {
    pub at: DateTime<Utc>,
    /// A short name of what happened (`payment recorded`, `refund opened`), for a column.
    pub what: String,
    /// The rest, in words: amounts, references, notes.
    pub detail: String,
}

/// What a bid offers: its amount for a kind that names one, else its terms as compact JSON.
pub fn offer(bid: &Bid) -> String {
    if order_negotiation::has_amount(bid.kind) || bid.kind == ThreadKind::Price {
        Price::new(bid.amount, bid.currency).to_string()
    } else {
        terms_text(bid.terms.as_ref())
    }
}

/// A bid's terms as compact JSON, or a dash without any.
pub fn terms_text(terms: Option<&serde_json::Value>) -> String {
    match terms {
        Some(terms) if !terms.is_null() => terms.to_string(),
        _ => "—".to_owned(),
    }
}

/// The order's timeline, oldest first (moments at the same time keep the order they are listed
/// in: the order's own before its payments', before its negotiations').
pub fn order_timeline(order: &Order, payments: &[Payment], negotiations: &[ThreadWithBids]) -> Vec<Moment> {
    let money = |minor: i64| Price::new(minor, order.currency).to_string();
    let mut moments = Vec::new();
    let mut push = |at: DateTime<Utc>, what: &str, detail: String| {
        moments.push(Moment { at, what: what.to_owned(), detail });
    };
    let made = match order.thread_id {
        Some(thread) => format!("{} agreed in negotiation {thread}", money(order.amount)),
        None => format!("{} bought at the ask", money(order.amount)),
    };
    push(order.created_at, "order made", made);
    for payment in payments {
        push(
            payment.created_at,
            "payment recorded",
            format!("{} (reference {})", money(payment.amount), payment.reference),
        );
        if let Some(answered) = payment.answered_at {
            match payment.status {
                PaymentStatus::Recorded => {}
                PaymentStatus::Confirmed => push(answered, "payment confirmed", money(payment.amount)),
                PaymentStatus::Disputed => push(
                    answered,
                    "payment disputed",
                    format!(
                        "{}: {}",
                        money(payment.amount),
                        payment.dispute_reason.as_deref().unwrap_or("no reason given")
                    ),
                ),
            }
        }
    }
    if let Some(fulfilment) = &order.fulfilment {
        let words: Vec<String> = [("reference", &fulfilment.reference), ("note", &fulfilment.note)]
            .into_iter()
            .filter_map(|(name, value)| value.as_ref().map(|value| format!("{name}: {value}")))
            .collect();
        push(fulfilment.fulfilled_at, "fulfilled", words.join("; "));
    }
    if let Some(completed) = order.completed_at {
        push(completed, "completed", String::new());
    }
    if let Some(cancelled) = order.cancelled_at {
        let due = if order.refund_due > 0 {
            format!("{} owed back to the buyer", money(order.refund_due))
        } else {
            String::new()
        };
        push(cancelled, "cancelled", due);
    }
    for negotiation in negotiations {
        let thread = &negotiation.thread;
        let kind = thread.kind.as_str();
        for bid in &negotiation.bids {
            let (what, verb) = if bid.round == 1 { ("opened", "opened with") } else { ("countered", "countered with") };
            let message = bid.message.as_deref().map(|message| format!(" — “{message}”")).unwrap_or_default();
            push(
                bid.created_at,
                &format!("{kind} {what}"),
                format!(
                    "the {} {verb} {}{}{message}",
                    bid.author.as_str(),
                    offer(bid),
                    if bid.is_final { " (final)" } else { "" }
                ),
            );
        }
        let last = negotiation.bids.last();
        match thread.status {
            ThreadStatus::Active => {}
            ThreadStatus::Accepted => {
                let agreed = last.map(offer).unwrap_or_default();
                let effect = if thread.kind == ThreadKind::Refund {
                    format!("{agreed}, recorded as refunded")
                } else if thread.kind == ThreadKind::Cancel {
                    "the order is cancelled".to_owned()
                } else {
                    agreed
                };
                push(
                    last.and_then(|bid| bid.responded_at).unwrap_or(thread.updated_at),
                    &format!("{kind} agreed"),
                    effect,
                );
            }
            ThreadStatus::Rejected | ThreadStatus::Expired | ThreadStatus::Closed => {
                let reason = thread.closed_reason.map(|reason| format!(" ({})", reason.as_str())).unwrap_or_default();
                let at = last.and_then(|bid| bid.responded_at).unwrap_or(thread.updated_at);
                push(at, &format!("{kind} ended"), format!("{}{reason}", thread.status.as_str()));
            }
        }
        if let Some(escalation) = &thread.escalation {
            push(
                escalation.escalated_at,
                "escalated",
                format!("{kind} sent to the operator by {}", escalation.escalated_by),
            );
            if let Some(decision) = &escalation.decision {
                push(
                    decision.decided_at,
                    "operator decided",
                    format!("{} refunded — “{}”", money(decision.amount), decision.note),
                );
            }
        }
    }
    moments.sort_by_key(|moment| moment.at);
    moments
}
