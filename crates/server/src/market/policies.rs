//! Setting and removing an agent's policies: each in a unit of work of its own.

use haggle_domain::rejection::Validator;
use haggle_domain::strategy::Policy;
use haggle_domain::{ListingStatus, Party, Rejection, ThreadStatus};
use uuid::Uuid;

use super::{Market, Result, Rules};
use crate::db;
use crate::db::policies::{Scope, StoredPolicy};
use crate::events::Written;

/// Stores the agent's policy for `scope` in `role` (its limits checked against `ask`, the
/// listing's, when there is one), then hands it the negotiations already waiting on the agent
/// there.
pub async fn put(
    market: &Market,
    agent_id: Uuid,
    role: Party,
    scope: Scope,
    ask: Option<i64>,
    policy: &Policy,
    rules: Rules,
) -> Result<StoredPolicy> {
    policy.validate(role, ask, rules.amounts)?;
    let mut unit = market.begin().await?;
    let conn = unit.conn();
    match scope {
        Scope::Agent => {}
        Scope::Listing(id) => {
            // Checked under a lock, so that no thread opens on a listing as it closes.
            let listing = db::listings::lock(&mut *conn, id).await?.ok_or(Rejection::NotFound { what: "listing" })?;
            if listing.status != ListingStatus::Active {
                return Err(Rejection::ListingUnavailable { current_status: listing.status.as_str() }.into());
            }
            if let Some(utility) = &policy.utility {
                // The weights name the listing's issues.
                let mut v = Validator::new();
                utility.check(&mut v, Some(&listing.issues()));
                v.finish()?;
            }
        }
        Scope::Thread(id) => {
            db::moves::lock_thread(&mut *conn, id).await?;
            let status = db::policies::thread_status(&mut *conn, id).await?;
            if status != ThreadStatus::Active {
                return Err(Rejection::InvalidTransition {
                    current_status: status.as_str(),
                    detail: format!("the thread is {status}: a policy can only take over a live negotiation"),
                }
                .into());
            }
        }
    }
    let stored = db::policies::put(conn, agent_id, role, scope, policy).await?;
    unit.commit().await?;
    // After the commit and its locks, in a unit of its own: an executor locks a task before
    // the thread and listing. Until this runs, a waiting bid is the agent's to answer, as
    // before the policy.
    let mut unit = market.begin().await?;
    let (conn, events) = unit.parts();
    let queued = db::tasks::queue_waiting(conn, agent_id, role, scope).await?;
    events.add(Written { tasks: queued as i64, ..Written::default() });
    unit.commit().await?;
    Ok(stored)
}

/// Removes the agent's policy for `scope` in `role`; `false` if there was none.
pub async fn delete(market: &Market, agent_id: Uuid, role: Party, scope: Scope) -> Result<bool> {
    let mut unit = market.begin().await?;
    let deleted = db::policies::delete(unit.conn(), agent_id, role, scope).await?;
    unit.commit().await?;
    Ok(deleted)
}
