//! Registering agents, their keys, and the operator's settings: tiers, suspension, and
//! revoking any key.

use haggle_api::{ProfilePatch, Registration, Suspension};
use haggle_domain::bid::{self, Transition};
use sqlx::PgConnection;
use uuid::Uuid;

use super::Result;
use crate::db::agents::{self, ProfileUpdate};
use crate::db::{Agent, ApiKey};
use crate::events::Outbox;
use crate::secrets;
use crate::{db, market};
use haggle_domain::rejection::{Validator, text};
use haggle_domain::{Reason, Rejection, Tier};

pub const MAX_NAME_CHARS: usize = 100;
/// The most keys an agent may hold unrevoked.
pub const MAX_LIVE_KEYS: i64 = 20;
const MAX_IDENTITY_CHARS: usize = 200;

/// A new key: its record, and the key itself, which is shown this once.
pub struct NewKey {
    pub key: ApiKey,
    pub api_key: String,
}

pub async fn register(conn: &mut PgConnection, registration: Registration, tier: Tier) -> Result<(Agent, NewKey)> {
    let name = text(&registration.name, true, MAX_NAME_CHARS).map_err(|message| Rejection::invalid("name", message))?;
    let agent = agents::insert(conn, Uuid::now_v7(), name.trim(), tier).await?;
    let key = issue_key(conn, agent.id).await?;
    Ok((agent, key))
}

pub async fn issue_key(conn: &mut PgConnection, agent_id: Uuid) -> Result<NewKey> {
    // The agent's row lock keeps concurrent requests from passing the cap together.
    agents::lock(conn, agent_id).await?;
    if agents::live_keys(&mut *conn, agent_id).await? >= MAX_LIVE_KEYS {
        return Err(Rejection::invalid(
            "keys",
            format!(
                "you already have {MAX_LIVE_KEYS} live keys, the most an agent may have; revoke one to add another"
            ),
        )
        .into());
    }
    let issued = secrets::issue_api_key();
    let key = agents::insert_key(conn, Uuid::now_v7(), agent_id, &issued.digest, &issued.prefix).await?;
    Ok(NewKey { key, api_key: issued.plaintext })
}

/// Revokes one of the agent's keys. The last live key cannot be revoked: the agent would be
/// locked out for good.
pub async fn revoke_key(conn: &mut PgConnection, agent_id: Uuid, key_id: Uuid) -> Result<ApiKey> {
    agents::lock(conn, agent_id).await?;
    let Some(key) = agents::key(&mut *conn, agent_id, key_id).await? else {
        return Err(Rejection::NotFound { what: "key" }.into());
    };
    if key.revoked_at.is_some() {
        return Ok(key);
    }
    if agents::live_keys(&mut *conn, agent_id).await? == 1 {
        return Err(Rejection::InvalidTransition {
            current_status: "ACTIVE",
            detail: "this is the agent's only live key; create another before revoking it".into(),
        }
        .into());
    }
    let revoked = agents::revoke_key(&mut *conn, agent_id, key_id).await?;
    let revoked = revoked.ok_or(Rejection::NotFound { what: "key" })?;
    agents::announce_authorization_change(conn, agent_id).await?;
    Ok(revoked)
}

pub async fn update_profile(conn: &mut PgConnection, agent_id: Uuid, patch: ProfilePatch) -> Result<Agent> {
    let mut v = Validator::new();
    for (field, value) in
        [("agency_id", &patch.agency_id), ("advertiser_id", &patch.advertiser_id), ("seat_id", &patch.seat_id)]
    {
        if let Some(Some(value)) = value {
            v.check(field, text(value, true, MAX_IDENTITY_CHARS));
        }
    }
    v.finish()?;
    let update = ProfileUpdate {
        tier: patch.tier,
        agency_id: patch.agency_id.as_ref().map(Option::as_deref),
        advertiser_id: patch.advertiser_id.as_ref().map(Option::as_deref),
        seat_id: patch.seat_id.as_ref().map(Option::as_deref),
    };
    let agent = agents::update_profile(&mut *conn, agent_id, &update).await?;
    let agent = agent.ok_or(Rejection::NotFound { what: "agent" })?;
    if patch.tier.is_some() {
        agents::announce_authorization_change(conn, agent_id).await?;
    }
    Ok(agent)
}

/// The longest note the operator may give with a suspension.
pub const MAX_SUSPENSION_REASON_CHARS: usize = 500;

/// Suspends the agent, in one transaction: marks it (its keys are refused from the commit on,
/// and its policies cover nothing), and ends every live negotiation it is party to through the
/// thread's pending bid, whoever authored it: the bid becomes REJECTED and the thread CLOSED,
/// both with reason `agent_suspended` (a pending bid already past its deadline expires
/// instead), with the usual events to both parties. Suspending a suspended agent changes
/// nothing. Returns whether the agent was suspended by this call.
///
/// Listings are locked before threads, as every writer does: first the listings of the
/// agent's live threads, then the threads.
pub async fn suspend(conn: &mut PgConnection, events: &mut Outbox, agent_id: Uuid, note: Suspension) -> Result<bool> {
    let reason = note
        .reason
        .as_deref()
        .map(|reason| text(reason, true, MAX_SUSPENSION_REASON_CHARS).map_err(|m| Rejection::invalid("reason", m)))
        .transpose()?;
    let reason = reason.as_deref().map(str::trim);
    let Some(suspended) = db::admin::lock_agent(conn, agent_id).await? else {
        return Err(Rejection::NotFound { what: "agent" }.into());
    };
    if suspended {
        return Ok(false);
    }
    db::admin::mark_suspended(conn, agent_id, reason).await?;
    db::admin::lock_listings_of_live_threads(conn, agent_id).await?;
    let pending = db::admin::lock_live_threads(conn, agent_id).await?;
    for transition in [Transition::Expire, Transition::Close(Reason::AgentSuspended)] {
        let bids: Vec<Uuid> = pending
            .iter()
            .filter(|due| bid::close(due.expires_at, due.db_now, Reason::AgentSuspended) == transition)
            .map(|due| due.bid_id)
            .collect();
        let ended = db::sweeps::end_threads(conn, &bids, transition).await?;
        market::negotiation::record_closed(events, ended);
    }
    agents::announce_authorization_change(conn, agent_id).await?;
    Ok(true)
}

/// Lifts the agent's suspension: its keys work again. What the suspension ended stays ended.
/// Reinstating an agent that is not suspended changes nothing.
pub async fn reinstate(conn: &mut PgConnection, agent_id: Uuid) -> Result<()> {
    let Some(suspended) = db::admin::lock_agent(conn, agent_id).await? else {
        return Err(Rejection::NotFound { what: "agent" }.into());
    };
    if suspended {
        db::admin::clear_suspension(conn, agent_id).await?;
        agents::announce_authorization_change(conn, agent_id).await?;
    }
    Ok(())
}

/// Revokes any agent's key, the agent's last one included (the operator may lock an agent
/// out). Revoking a revoked key changes nothing. Returns the key's agent.
pub async fn revoke_any_key(conn: &mut PgConnection, key_id: Uuid) -> Result<Uuid> {
    let agent_id = db::admin::revoke_key(conn, key_id).await?.ok_or(Rejection::NotFound { what: "key" })?;
    agents::announce_authorization_change(conn, agent_id).await?;
    Ok(agent_id)
}
