//! A negotiation as an A2A task: its id is the thread's, its context the listing's, its state
//! the thread's as the caller sees it, its status message the REST views (the latest bid, the
//! thread) with the moves the bid state machine allows the caller now and a counter's range,
//! and, once accepted, the order as its artifact. A purchase at the ask is a task of its own
//! (the order's id) that completed at once.

use a2a::{Artifact, Message, Part, PartContent, Role, Task, TaskState, TaskStatus};
use chrono::Utc;
use haggle_api::{Approval, Bid, Order, Thread};
use haggle_domain::bid::{self, Action, Actor, BidState};
use haggle_domain::{BidStatus, Party, Reason, ThreadStatus};
use serde_json::{Map, Value, json};
use uuid::Uuid;

const DATA: &str = "application/json";

/// The moves of a data part that answer a pending bid, and the bid state machine's action for
/// each.
const ANSWERS: [(Action, &str); 4] = [
    (Action::Counter, "counter"),
    (Action::Accept, "accept"),
    (Action::Reject, "reject"),
    (Action::Withdraw, "withdraw"),
];

/// Which side `agent` is on.
pub(crate) fn side(thread: &Thread, agent: Uuid) -> Party {
    if thread.seller_id == agent { Party::Seller } else { Party::Buyer }
}

/// The task's state for `you`: the other side to move is `working`, yours `input-required`.
pub(crate) fn state(thread: &Thread, you: Party) -> TaskState {
    match thread.status {
        ThreadStatus::Active if thread.turn == Some(you) => TaskState::InputRequired,
        ThreadStatus::Active => TaskState::Working,
        ThreadStatus::Accepted => TaskState::Completed,
        // A withdrawal ends the thread as REJECTED, with the reason that says who ended it.
        ThreadStatus::Rejected => match thread.closed_reason {
            Some(Reason::Withdrawn) => TaskState::Canceled,
            _ => TaskState::Rejected,
        },
        ThreadStatus::Expired => TaskState::Failed,
        ThreadStatus::Closed => match thread.closed_reason {
            Some(Reason::Withdrawn) => TaskState::Canceled,
            Some(
                Reason::Countered
                | Reason::Accepted
                | Reason::Rejected
                | Reason::Expired
                | Reason::ListingSold
                | Reason::ListingWithdrawn
                | Reason::AgentSuspended,
            )
            | None => TaskState::Failed,
        },
    }
}

/// Whether a task in `state` will change no more.
pub(crate) fn is_terminal(state: &TaskState) -> bool {
    matches!(state, TaskState::Completed | TaskState::Failed | TaskState::Canceled | TaskState::Rejected)
}

/// What is known of a negotiation to show it.
pub(crate) struct Negotiation<'a> {
    pub thread: &'a Thread,
    /// Every bid in round order, when the thread was read whole; empty when only a move's
    /// answer is known.
    pub bids: &'a [Bid],
    /// The latest bid: the last of `bids`, or the bid a move's answer holds.
    pub latest: Option<&'a Bid>,
    pub order: Option<&'a Order>,
    /// What the listing holds a counter to: its concession rule and its ask (the seller's first
    /// position). Read for a live thread; without it, the counter range shown is the strict one
    /// (within every rule's), and a seller who has not bid yet is shown none.
    pub listing: Option<bid::CounterTerms>,
}

/// The task `you` see.
pub(crate) fn negotiation_task(negotiation: &Negotiation<'_>, you: Uuid) -> Task {
    let thread = negotiation.thread;
    let party = side(thread, you);
    let state = state(thread, party);
    let mut data = Map::new();
    data.insert("thread".to_owned(), json!(thread));
    if let Some(bid) = negotiation.latest {
        data.insert("bid".to_owned(), json!(bid));
    }
    let standing = standing(negotiation, party);
    data.insert("moves".to_owned(), json!(standing.moves));
    if let Some((min, max)) = standing.counter_range {
        data.insert("counter_range".to_owned(), json!({ "min": min, "max": max }));
    }
    if let Some(order) = negotiation.order {
        data.insert("order".to_owned(), json!(order));
    }
    let words = describe(thread, negotiation.latest, party, &state, &standing);
    let message_id = format!("{}-{}", negotiation.latest.map_or(thread.id, |bid| bid.id), state_name(&state));
    Task {
        id: thread.id.to_string(),
        context_id: thread.listing_id.to_string(),
        status: TaskStatus {
            state,
            message: Some(agent_message(message_id, thread.id, thread.listing_id, Value::Object(data), words)),
            timestamp: Some(thread.updated_at),
        },
        artifacts: negotiation.order.map(|order| vec![order_artifact(order)]),
        history: None,
        metadata: None,
    }
}

/// The moves of a negotiation as messages, oldest first: each bid as the message that made it
/// (`place` or `counter`, from the caller when the bid is theirs, else from the agent), then the
/// move that ended the thread on its last bid (`accept`, `reject`, `withdraw`), if one did.
/// `length` keeps the most recent messages: all of them when unset, none at `0` (the task then
/// carries no `history`).
pub(crate) fn history(thread: &Thread, bids: &[Bid], you: Uuid, length: Option<i32>) -> Option<Vec<Message>> {
    let keep = match length {
        Some(length) if length <= 0 => return None,
        Some(length) => usize::try_from(length).unwrap_or(usize::MAX),
        None => usize::MAX,
    };
    let party = side(thread, you);
    let role = |author: Party| if author == party { Role::User } else { Role::Agent };
    let mut messages = Vec::with_capacity(bids.len() + 1);
    for bid in bids {
        let action = if bid.parent_bid_id.is_none() { "place" } else { "counter" };
        let data = json!({
            "action": action,
            "amount": bid.amount,
            "currency": bid.currency,
            "final": bid.is_final,
            "bid": bid,
        });
        let words = format!("The {} bid {} {} (round {}).", bid.author.as_str(), bid.amount, bid.currency, bid.round);
        messages.push(history_message(bid.id.to_string(), role(bid.author), thread, data, words));
    }
    let ending = bids.last().and_then(|bid| match (bid.status, bid.reason) {
        (BidStatus::Accepted, _) => Some(("accept", bid.author.other(), bid)),
        (BidStatus::Rejected, Some(Reason::Withdrawn)) => Some(("withdraw", bid.author, bid)),
        (BidStatus::Rejected, Some(Reason::Rejected)) => Some(("reject", bid.author.other(), bid)),
        // Ended by no move of either side's: the listing sold out or was withdrawn, an agent
        // suspended, the bid expired.
        (BidStatus::Rejected, _) | (BidStatus::Pending | BidStatus::Countered | BidStatus::Expired, _) => None,
    });
    if let Some((action, by, bid)) = ending {
        let data = json!({ "action": action, "bid_id": bid.id });
        let words = format!("The {} made the move {action} on bid {}.", by.as_str(), bid.id);
        messages.push(history_message(format!("{}-{action}", bid.id), role(by), thread, data, words));
    }
    let skip = messages.len().saturating_sub(keep);
    Some(messages.split_off(skip))
}

fn history_message(message_id: String, role: Role, thread: &Thread, data: Value, words: String) -> Message {
    let mut message = Message::new(role, vec![Part::data(data).with_media_type(DATA), Part::text(words)]);
    message.message_id = message_id;
    message.task_id = Some(thread.id.to_string());
    message.context_id = Some(thread.listing_id.to_string());
    message
}

/// The task of a purchase at the ask: completed, with its order.
pub(crate) fn purchase_task(order: &Order) -> Task {
    let words = format!("Bought at the ask: order {} for {} {}.", order.id, order.amount, order.currency);
    Task {
        id: order.id.to_string(),
        context_id: order.listing_id.to_string(),
        status: TaskStatus {
            state: TaskState::Completed,
            message: Some(agent_message(
                format!("{}-completed", order.id),
                order.id,
                order.listing_id,
                json!({ "order": order, "moves": [] }),
                words,
            )),
            timestamp: Some(order.created_at),
        },
        artifacts: Some(vec![order_artifact(order)]),
        history: None,
        metadata: None,
    }
}

/// What a request for approval says of its move, in words.
fn held_words(approval: &Approval) -> String {
    format!(
        "Held for approval: your approval rules hold this {} of {} {}, and nothing is made until it is approved. \
         Request {} waits until {} for {}.",
        approval.held.kind.as_str(),
        approval.held.amount,
        approval.held.currency,
        approval.id,
        approval.expires_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        approval.approvers.join(", ")
    )
}

/// A task whose counter or acceptance was held for approval: `input-required`, as the caller's
/// turn still is, its status message carrying the request (`approval`) beside the negotiation.
pub(crate) fn held_task(mut task: Task, approval: &Approval) -> Task {
    task.status.state = TaskState::InputRequired;
    if let Some(message) = &mut task.status.message {
        message.message_id = format!("{}-held", approval.id);
        for part in &mut message.parts {
            match &mut part.content {
                PartContent::Data(Value::Object(data)) => {
                    data.insert("approval".to_owned(), json!(approval));
                }
                PartContent::Text(words) => *words = held_words(approval),
                PartContent::Data(_) | PartContent::Raw(_) | PartContent::Url(_) => {}
            }
        }
    }
    task
}

/// A message of the agent's own answering a placement or purchase held for approval: the
/// request (`approval`), as there is no task until the move is made.
pub(crate) fn held_message(approval: &Approval) -> Message {
    let mut message = Message::new(
        Role::Agent,
        vec![Part::data(json!({ "approval": approval })).with_media_type(DATA), Part::text(held_words(approval))],
    );
    message.message_id = format!("{}-held", approval.id);
    message.context_id = Some(approval.held.listing_id.to_string());
    message
}

/// A message of the agent's own in answer to `search`.
pub(crate) fn listings_message(listings: Value, count: usize) -> Message {
    let mut message = Message::new(
        Role::Agent,
        vec![
            Part::data(json!({ "listings": listings })).with_media_type(DATA),
            Part::text(format!("{count} listings.")),
        ],
    );
    message.message_id = format!("listings-{}", Uuid::now_v7());
    message
}

pub(crate) fn order_artifact(order: &Order) -> Artifact {
    Artifact {
        artifact_id: order.id.to_string(),
        name: Some("order".to_owned()),
        description: Some("the order the negotiation made, as GET /v1/orders/{id} shows it".to_owned()),
        parts: vec![Part::data(json!({ "order": order })).with_media_type(DATA)],
        metadata: None,
        extensions: None,
    }
}

fn agent_message(message_id: String, task: Uuid, context: Uuid, data: Value, words: String) -> Message {
    let mut message = Message::new(Role::Agent, vec![Part::data(data).with_media_type(DATA), Part::text(words)]);
    message.message_id = message_id;
    message.task_id = Some(task.to_string());
    message.context_id = Some(context.to_string());
    message
}

/// The v1.0 name of a state.
pub(crate) fn state_name(state: &TaskState) -> &'static str {
    match state {
        TaskState::Unspecified => "TASK_STATE_UNSPECIFIED",
        TaskState::Submitted => "TASK_STATE_SUBMITTED",
        TaskState::Working => "TASK_STATE_WORKING",
        TaskState::Completed => "TASK_STATE_COMPLETED",
        TaskState::Failed => "TASK_STATE_FAILED",
        TaskState::Canceled => "TASK_STATE_CANCELED",
        TaskState::InputRequired => "TASK_STATE_INPUT_REQUIRED",
        TaskState::Rejected => "TASK_STATE_REJECTED",
        TaskState::AuthRequired => "TASK_STATE_AUTH_REQUIRED",
    }
}

pub(crate) struct Standing {
    /// The moves of a data part `you` may make on the pending bid now.
    pub moves: Vec<&'static str>,
    /// The amounts a counter may have, both included.
    pub counter_range: Option<(i64, i64)>,
    /// The pending bid.
    pub pending: Option<Uuid>,
}

/// What `you` may do now, as the domain's rules say (`bid::apply`, `Positions::range_on`).
pub(crate) fn standing(negotiation: &Negotiation<'_>, you: Party) -> Standing {
    let pending = negotiation
        .latest
        .filter(|bid| bid.status == BidStatus::Pending && negotiation.thread.status == ThreadStatus::Active);
    let mut standing = Standing { moves: Vec::new(), counter_range: None, pending: pending.map(|bid| bid.id) };
    let Some(pending) = pending else { return standing };
    let state = BidState {
        status: pending.status,
        author: pending.author,
        is_final: pending.is_final,
        expires_at: pending.expires_at,
    };
    let now = Utc::now();
    for (action, name) in ANSWERS {
        if bid::apply(&state, action, Actor::Party(you), now).is_err() {
            continue;
        }
        if action == Action::Counter {
            let previous = match negotiation.bids.iter().rev().find(|bid| bid.author == you) {
                Some(bid) => Some(bid.amount),
                None if you == Party::Seller => negotiation.listing.map(|terms| terms.ask),
                None => None,
            };
            if let Some(previous) = previous {
                let positions = bid::Positions { pending: pending.amount, own_previous: previous };
                let (min, max) = match negotiation.listing {
                    Some(terms) => positions.range_on(you, terms),
                    None => positions.counter_range(you),
                };
                if min > max {
                    continue;
                }
                standing.counter_range = Some((min, max));
            }
        }
        standing.moves.push(name);
    }
    standing
}

fn describe(thread: &Thread, latest: Option<&Bid>, you: Party, state: &TaskState, standing: &Standing) -> String {
    let bid = latest
        .map(|bid| {
            format!(
                " The latest bid is the {}'s {} {} (round {}).",
                bid.author.as_str(),
                bid.amount,
                bid.currency,
                bid.round
            )
        })
        .unwrap_or_default();
    match state {
        TaskState::InputRequired => {
            let range = standing
                .counter_range
                .map(|(min, max)| format!(" A counter may be from {min} to {max}."))
                .unwrap_or_default();
            format!("Your move as the {}.{bid} You may: {}.{range}", you.as_str(), standing.moves.join(", "))
        }
        TaskState::Working => format!("Waiting for the {} to answer.{bid}", you.other().as_str()),
        TaskState::Completed => format!("Agreed: the order is this task's artifact.{bid}"),
        _ => format!("The negotiation has ended ({}).{bid}", thread.status),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_has_its_version_one_name() {
        for state in [TaskState::Working, TaskState::InputRequired, TaskState::Completed, TaskState::Canceled] {
            assert_eq!(json!(state), json!(state_name(&state)));
        }
    }
}
