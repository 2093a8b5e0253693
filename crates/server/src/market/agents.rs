//! Registering agents, their keys, and the operator's settings.

use haggle_api::{ProfilePatch, Registration};
use sqlx::PgConnection;
use uuid::Uuid;

use super::Result;
use crate::db::agents::{self, ProfileUpdate};
use crate::db::{Agent, ApiKey};
use crate::secrets;
use haggle_domain::rejection::{Validator, text};
use haggle_domain::{Rejection, Tier};

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
