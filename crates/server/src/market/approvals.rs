//! Approvals (SPEC §10): setting an agent's rules, holding a move they catch, and answering a
//! held move: approving it makes the move then, through the same operation as if the agent had
//! sent it, in the transaction that records the answer.

use chrono::{DateTime, Duration, Utc};
use haggle_api::{ApprovalGrant, ApprovalMark, GrantedBudget, HeldMove, OpenNegotiation};
use haggle_domain::approval::{
    self, Answer, Answerer, ApprovalRules, ApprovalStatus, Budget, BudgetScope, Candidate, Move, Standing,
};
use haggle_domain::bid::Proposal;
use haggle_domain::rejection::text;
use haggle_domain::{ListingStatus, Rejection, ThreadKind};
use serde_json::json;
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

use super::negotiation;
use super::{Access, Error, Market, Result, Rules};
use crate::db;
use crate::db::agents::Caller;
use crate::db::approvals::{Approval, StoredRules};
use crate::db::policies::Scope;
use crate::db::{Bid, Order, Thread};
use crate::events::{EventType, NewEvent, Outbox};
use crate::receipts::ReceiptSigner;
use crate::secrets;

/// Stores the agent's rules for `scope`, checked for its standing there, and tells every
/// instance to read the agent's keys afresh (the key cache carries whether it has rules).
pub async fn put_rules(
    market: &Market,
    agent_id: Uuid,
    scope: Scope,
    standing: Standing,
    rules: &ApprovalRules,
    limits: Rules,
) -> Result<StoredRules> {
    rules.validate(standing, limits.amounts)?;
    let mut unit = market.begin().await?;
    let conn = unit.conn();
    let stored = db::approvals::put_rules(&mut *conn, agent_id, scope, rules).await?;
    db::agents::announce_authorization_change(conn, agent_id).await?;
    unit.commit().await?;
    Ok(stored)
}

/// Removes the agent's rules for `scope`; `false` if there were none.
pub async fn delete_rules(market: &Market, agent_id: Uuid, scope: Scope) -> Result<bool> {
    let mut unit = market.begin().await?;
    let conn = unit.conn();
    let deleted = db::approvals::delete_rules(&mut *conn, agent_id, scope).await?;
    db::agents::announce_authorization_change(conn, agent_id).await?;
    unit.commit().await?;
    Ok(deleted)
}

/// A move about to be made, and the bid it answers' own expiry, if any.
pub struct Intent {
    pub held: HeldMove,
    pub bid_expires_at: Option<DateTime<Utc>>,
}

/// The lifetime of a request for `intent`, if the agent's rules most specific to it catch it
/// and no budget an approval left covers it; `None` to make the move now.
pub async fn caught(
    executor: impl PgExecutor<'_>,
    agent_id: Uuid,
    intent: &Intent,
    policy_move: bool,
) -> Result<Option<i64>> {
    let held = &intent.held;
    let applicable = db::approvals::applicable(executor, agent_id, held.listing_id, held.thread_id).await?;
    let Some(rules) = applicable.rules else { return Ok(None) };
    if policy_move && !rules.policy_moves {
        return Ok(None);
    }
    let candidate = Candidate { kind: held.kind, party: held.party, amount: held.amount };
    if !rules.catches(&candidate) {
        return Ok(None);
    }
    let covered = applicable
        .budgets
        .iter()
        .any(|&(party, limit)| party == held.party && Budget::covers(party, limit, held.amount));
    Ok((!covered).then_some(rules.ttl_seconds))
}

/// The hash of a held move: SHA-256 of its canonical JSON, in hex.
pub fn move_hash(held: &HeldMove) -> String {
    let canonical = approval::canonical_json(&serde_json::to_value(held).expect("a move serializes"));
    hex(&secrets::sha256(canonical.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Holds the move instead of making it: a PENDING request, told to the agent alone.
pub async fn hold(
    conn: &mut PgConnection,
    events: &mut Outbox,
    agent_id: Uuid,
    intent: &Intent,
    ttl_seconds: i64,
) -> Result<Approval> {
    // The agent's row lock keeps concurrent holds from passing the cap together.
    db::agents::lock(conn, agent_id).await?;
    if db::approvals::pending_count(conn, agent_id).await? >= approval::MAX_PENDING {
        return Err(Rejection::ApprovalLimitReached { limit: approval::MAX_PENDING }.into());
    }
    let hash = move_hash(&intent.held);
    let expires_at = approval::expires_at(Utc::now(), ttl_seconds, intent.bid_expires_at);
    let new =
        db::approvals::NewApproval { id: Uuid::now_v7(), agent_id, held: &intent.held, move_hash: &hash, expires_at };
    let approval = db::approvals::insert(conn, &new).await?;
    events.push(event(EventType::ApprovalRequested, &approval));
    Ok(approval)
}

/// An event about a request, to its agent alone (the counterparty never hears of it).
pub fn event(kind: EventType, approval: &Approval) -> NewEvent {
    let view = approval.clone().at(&[], Utc::now());
    NewEvent {
        kind,
        audience: vec![approval.agent_id],
        listing_id: Some(approval.listing_id),
        thread_id: approval.thread_id.or(approval.made_thread_id),
        bid_id: approval.made_bid_id.or(approval.bid_id),
        order_id: approval.made_order_id,
        data: json!({ "approval": view }),
    }
}

/// Who answers a request: the agent (with its key) or one of its approvers, and the agent as
/// the move is made for it.
#[derive(Debug, Clone)]
pub struct Approving {
    pub agent: Caller,
    pub approver_id: Option<Uuid>,
    /// The approver's name, or `agent`.
    pub name: String,
}

impl Approving {
    fn answerer(&self) -> Answerer {
        if self.approver_id.is_some() { Answerer::Approver } else { Answerer::Agent }
    }
}

/// What an approval made: the request as it ended, and the move's rows.
pub struct Approved {
    pub approval: Approval,
    pub made: Made,
}

/// The rows a move made: its bid and thread, and its order (an acceptance's, a purchase's).
#[derive(Default)]
pub struct Made {
    pub bid: Option<Bid>,
    pub thread: Option<Thread>,
    pub order: Option<Order>,
}

/// Locks the request and checks that `answer` may be given now. A pending request found past
/// its time is recorded EXPIRED (with its event) and refused with `approval_expired`.
async fn take(
    conn: &mut PgConnection,
    events: &mut Outbox,
    who: &Approving,
    id: Uuid,
    answer: Answer,
) -> Result<(Approval, DateTime<Utc>)> {
    let (approval, now) =
        db::approvals::lock(conn, id, who.agent.id).await?.ok_or(Rejection::NotFound { what: "approval" })?;
    match approval::apply(approval.status, approval.expires_at, answer, who.answerer(), now) {
        Ok(_) => Ok((approval, now)),
        Err(Rejection::ApprovalExpired) if approval.status == ApprovalStatus::Pending => {
            let expired = db::approvals::answer(conn, id, &db::approvals::Answer::of(ApprovalStatus::Expired)).await?;
            events.push(event(EventType::ApprovalExpired, &expired));
            Err(Rejection::ApprovalExpired.into())
        }
        Err(rejection) => Err(rejection.into()),
    }
}

fn check_note(note: Option<&str>) -> Result<()> {
    if let Some(note) = note {
        text(note, false, approval::MAX_NOTE_CHARS).map_err(|message| Rejection::invalid("note", message))?;
    }
    Ok(())
}

/// Approves the request and makes its move now, as the agent would, in the caller's
/// transaction: the move refused (the bid expired, the other side moved, the listing sold) ends
/// the request FAILED with the move's code, and nothing is made.
#[allow(clippy::too_many_arguments)]
pub async fn approve(
    conn: &mut PgConnection,
    events: &mut Outbox,
    who: &Approving,
    id: Uuid,
    grant: &ApprovalGrant,
    signer: &ReceiptSigner,
    rules: Rules,
) -> Result<Approved> {
    check_note(grant.note.as_deref())?;
    let (approval, now) = take(conn, events, who, id, Answer::Approve).await?;
    let held = &approval.held;
    if let Some(budget) = &grant.budget {
        let candidate = Candidate { kind: held.kind, party: held.party, amount: held.amount };
        budget.validate(&candidate, held.kind != Move::Purchase, rules.amounts)?;
    }
    let mut answer = db::approvals::Answer {
        approver_id: who.approver_id,
        approver: Some(&who.name),
        note: grant.note.as_deref(),
        ..db::approvals::Answer::of(ApprovalStatus::Approved)
    };
    let made = match make(conn, events, who.agent, held, rules).await {
        Ok(made) => made,
        Err(Error::Rejected(rejection)) => {
            answer.status = ApprovalStatus::Failed;
            answer.failure = Some((rejection.code().as_str(), rejection.detail()));
            let failed = db::approvals::answer(conn, id, &answer).await?;
            events.push(event(EventType::ApprovalFailed, &failed));
            return Ok(Approved { approval: failed, made: Made::default() });
        }
        Err(error) => return Err(error),
    };
    let made_thread_id = made.thread.as_ref().map(|thread| thread.id).or(held.thread_id);
    answer.made_thread_id = made_thread_id;
    // An acceptance or a purchase is its order's move; a placement or counter, its new bid's.
    answer.made_bid_id = made.bid.as_ref().map(|bid| bid.id);
    answer.made_order_id = made.order.as_ref().map(|order| order.id);
    answer.budget =
        grant.budget.map(|budget| (budget.amount, budget.scope, now + Duration::seconds(budget.expires_in)));
    let mark = ApprovalMark {
        id,
        approver: who.name.clone(),
        approved_at: now,
        budget: answer.budget.map(|(amount, scope, expires_at)| GrantedBudget {
            amount,
            scope,
            scope_id: match scope {
                BudgetScope::Thread => made_thread_id,
                BudgetScope::Listing => Some(held.listing_id),
            },
            expires_at,
        }),
    };
    let claims = json!({
        "iss": "haggle",
        "sub": approval.agent_id,
        "approval_id": id,
        "move": held,
        "move_hash": approval.move_hash,
        "approver": who.name,
        "approved_at": now,
        "iat": now.timestamp(),
        "budget": mark.budget,
        "bid_id": answer.made_bid_id,
        "order_id": answer.made_order_id,
    });
    let receipt = signer.sign(&claims);
    answer.receipt = Some(&receipt);
    let mut made = made;
    let marked = serde_json::to_value(&mark).expect("a mark serializes");
    match (&mut made.order, &mut made.bid) {
        (Some(order), _) => {
            db::approvals::mark_order(conn, order.id, &marked).await?;
            order.approval = Some(marked);
        }
        (None, Some(bid)) => {
            db::approvals::mark_bid(conn, bid.id, &marked).await?;
            bid.approval = Some(marked);
        }
        (None, None) => {}
    }
    let approved = db::approvals::answer(conn, id, &answer).await?;
    events.push(event(EventType::ApprovalApproved, &approved));
    Ok(Approved { approval: approved, made })
}

/// Makes the held move as its agent, under locks in the caller's transaction.
async fn make(
    conn: &mut PgConnection,
    events: &mut Outbox,
    agent: Caller,
    held: &HeldMove,
    rules: Rules,
) -> Result<Made> {
    let proposal = || Proposal {
        amount: Some(held.amount.into()),
        message: held.message.clone(),
        expires_in: held.expires_in,
        is_final: held.is_final,
        terms: held.terms.clone(),
    };
    let bid_id = || held.bid_id.ok_or(Rejection::NotFound { what: "bid" });
    match held.kind {
        Move::Place => {
            let (bid, thread) =
                negotiation::place(conn, events, Access::Locked, agent, held.listing_id, &proposal(), rules).await?;
            Ok(Made { bid: Some(bid), thread: Some(thread), order: None })
        }
        Move::Counter => {
            let (bid, thread) =
                negotiation::counter(conn, events, Access::Locked, agent, bid_id()?, &proposal(), rules).await?;
            Ok(Made { bid: Some(bid), thread: Some(thread), order: None })
        }
        Move::Accept => {
            // The acceptance's own terms (a schedule's chosen window), as it was held.
            let acceptance = held.terms.clone().flatten();
            let accept = negotiation::Answer::Accept;
            let answered = negotiation::answer_with_terms(
                conn,
                events,
                Access::Locked,
                agent,
                bid_id()?,
                accept,
                acceptance.as_ref(),
            )
            .await?;
            Ok(Made { bid: Some(answered.bid), thread: Some(answered.thread), order: answered.order })
        }
        Move::Purchase => {
            // The exact move: a purchase at the ask it was held at.
            let listing =
                db::listings::lock(conn, held.listing_id).await?.ok_or(Rejection::NotFound { what: "listing" })?;
            if listing.status == ListingStatus::Active && listing.ask_amount != held.amount {
                return Err(Rejection::InvalidTransition {
                    current_status: listing.status.as_str(),
                    detail: format!(
                        "the ask changed from {} to {} since the purchase was held",
                        held.amount, listing.ask_amount
                    ),
                }
                .into());
            }
            let order = super::listings::purchase(conn, events, agent, held.listing_id).await?;
            Ok(Made { bid: None, thread: None, order: Some(order) })
        }
        // A refund opened on an order, or countered or accepted on its thread: the route says which.
        Move::Refund => match refund_order(&held.route) {
            Some(order_id) => {
                let input = OpenNegotiation {
                    kind: ThreadKind::Refund,
                    amount: Some(held.amount.into()),
                    terms: held.terms.clone().flatten().unwrap_or_default(),
                    message: held.message.clone(),
                    expires_in: held.expires_in,
                    is_final: Some(held.is_final),
                };
                let (bid, thread) =
                    super::order_negotiations::open(conn, events, agent, order_id, &input, rules).await?;
                Ok(Made { bid: Some(bid), thread: Some(thread), order: None })
            }
            None if held.route.ends_with("/counter") => {
                let (bid, thread) =
                    negotiation::counter(conn, events, Access::Locked, agent, bid_id()?, &proposal(), rules).await?;
                Ok(Made { bid: Some(bid), thread: Some(thread), order: None })
            }
            None => {
                let answered =
                    negotiation::answer(conn, events, Access::Locked, agent, bid_id()?, negotiation::Answer::Accept)
                        .await?;
                Ok(Made { bid: Some(answered.bid), thread: Some(answered.thread), order: answered.order })
            }
        },
    }
}

/// The order a held refund opening is on, from its route (`POST /v1/orders/{id}/negotiations`);
/// `None` for a counter or an acceptance on a refund thread.
fn refund_order(route: &str) -> Option<Uuid> {
    let id = route.strip_prefix("POST /v1/orders/")?.strip_suffix("/negotiations")?;
    Uuid::parse_str(id).ok()
}

/// Denies the request, with the approver's note for the agent.
pub async fn deny(
    conn: &mut PgConnection,
    events: &mut Outbox,
    who: &Approving,
    id: Uuid,
    note: Option<&str>,
) -> Result<Approval> {
    check_note(note)?;
    take(conn, events, who, id, Answer::Deny).await?;
    let answer = db::approvals::Answer {
        approver_id: who.approver_id,
        approver: Some(&who.name),
        note,
        ..db::approvals::Answer::of(ApprovalStatus::Denied)
    };
    let denied = db::approvals::answer(conn, id, &answer).await?;
    events.push(event(EventType::ApprovalDenied, &denied));
    Ok(denied)
}

/// The agent takes its request back.
pub async fn withdraw(conn: &mut PgConnection, events: &mut Outbox, who: &Approving, id: Uuid) -> Result<Approval> {
    take(conn, events, who, id, Answer::Withdraw).await?;
    let withdrawn = db::approvals::answer(conn, id, &db::approvals::Answer::of(ApprovalStatus::Withdrawn)).await?;
    Ok(withdrawn)
}
