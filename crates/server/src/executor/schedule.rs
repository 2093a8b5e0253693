//! The executor's answer to a `schedule` bid on an order for an agent whose policy declares a
//! weekly availability: it accepts the first proposed window inside it that has not begun, or,
//! when none is, stops and tells the owner (`negotiation.action_required`), as a price policy
//! does when it stops. A schedule policy never counters.

use serde_json::json;
use sqlx::PgConnection;

use crate::db;
use crate::db::agents::Caller;
use crate::db::schedule_tasks::ScheduleTask;
use crate::db::tasks::{Decided, Task};
use crate::events::{EventType, NewEvent, Outbox};
use crate::market::negotiation::{self, Answer};
use crate::market::{Access, PolicyMove};
use haggle_domain::appointment::ScheduleTerms;
use haggle_domain::strategy::Policy;

/// What became of a schedule task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handled {
    Accepted,
    /// The owner was told, for this reason.
    Stopped(&'static str),
    /// Nothing to do: the bid was answered or ended, or no schedule policy covers it.
    Dropped,
}

/// Decides the task if its thread is a schedule negotiation (`None` otherwise, for the price's
/// rules to decide), in the caller's transaction.
pub async fn act(conn: &mut PgConnection, events: &mut Outbox, task: Task) -> Result<Option<Handled>, sqlx::Error> {
    let Some(read) = db::schedule_tasks::read(conn, task.bid_id, task.agent_id).await? else {
        return Ok(None);
    };
    if !read.live || read.agent_suspended {
        return Ok(Some(Handled::Dropped));
    }
    let policy = read.policy.as_ref().and_then(|policy| serde_json::from_value::<Policy>(policy.0.clone()).ok());
    let Some(availability) = policy.and_then(|policy| policy.schedule) else {
        return Ok(Some(Handled::Dropped));
    };
    let terms = read.terms.as_ref().and_then(|terms| serde_json::from_value::<ScheduleTerms>(terms.0.clone()).ok());
    let Some(chosen) = terms.and_then(|terms| availability.first_inside(&terms.windows, read.db_now)) else {
        let detail = "no proposed window lies inside the declared availability; the schedule is yours to answer";
        stop(conn, events, task, &read, "outside_availability", detail).await?;
        return Ok(Some(Handled::Stopped("outside_availability")));
    };
    let caller = Caller { id: task.agent_id, tier: read.agent_tier, approval_rules: read.agent_approval_rules };
    let choice = json!({ "chosen": chosen });
    let accepted = negotiation::answer_with_terms(
        conn,
        events,
        Access::Locked,
        caller,
        task.bid_id,
        Answer::Accept,
        Some(&choice),
    )
    .await;
    match PolicyMove::of(accepted)? {
        PolicyMove::Made(_) => {
            let decided = Decided {
                action: "accept",
                reason: "availability",
                rationale: "Offer accepted.",
                counter_bid_id: None,
            };
            db::tasks::record_decision(conn, task, decided).await?;
            Ok(Some(Handled::Accepted))
        }
        PolicyMove::Overtaken => Ok(Some(Handled::Dropped)),
        PolicyMove::Refused(rejection) => {
            let detail =
                format!("the marketplace refused the policy's accept ({}): {}", rejection.code(), rejection.detail());
            stop(conn, events, task, &read, "refused", &detail).await?;
            Ok(Some(Handled::Stopped("refused")))
        }
    }
}

/// Records the stop and tells the owner, with the bid, as a price policy's stop does.
async fn stop(
    conn: &mut PgConnection,
    events: &mut Outbox,
    task: Task,
    read: &ScheduleTask,
    reason: &str,
    detail: &str,
) -> Result<(), sqlx::Error> {
    let decided = Decided { action: "stop", reason, rationale: detail, counter_bid_id: None };
    db::tasks::record_decision(conn, task, decided).await?;
    let bid = db::threads::get_bid(&mut *conn, task.bid_id, task.agent_id).await?;
    events.push(NewEvent {
        kind: EventType::NegotiationActionRequired,
        audience: vec![task.agent_id],
        listing_id: Some(read.listing_id),
        thread_id: Some(task.thread_id),
        bid_id: Some(task.bid_id),
        order_id: read.order_id,
        data: json!({
            "reason": reason,
            "detail": detail,
            "role": read.role,
            "suggestion": null,
            "bid": bid.map(haggle_api::Bid::from),
        }),
    });
    Ok(())
}
