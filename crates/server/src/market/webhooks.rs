//! What an agent does to its webhooks: create one (its secret shown once), enable one that its
//! failures disabled, delete one. Creating and enabling run in the caller's unit of work.

use std::collections::HashSet;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use haggle_api::{NewWebhook as WebhookRequest, WebhookCreated};
use sqlx::PgConnection;
use url::Url;
use uuid::Uuid;

use super::{Market, Result};
use crate::db;
use crate::db::webhooks::{NewWebhook, Webhook};
use crate::events::EventType;
use crate::secrets;
use crate::webhooks::{MAX_WEBHOOKS_PER_AGENT, WebhookStatus, target};
use haggle_domain::{FieldError, Rejection};

/// Every secret starts with this.
pub const SECRET_PREFIX: &str = "whsec_";
/// How much of a secret is kept in clear, to tell secrets apart.
const SHOWN_PREFIX_CHARS: usize = 12;
/// The longest `events` list a webhook may give.
pub const MAX_EVENT_FILTERS: usize = 32;
/// The `events` entry that stands for every event type.
pub const ALL_EVENTS: &str = "*";

/// A request whose fields passed every check.
#[derive(Debug)]
pub struct CheckedWebhook {
    url: Url,
    events: Vec<String>,
}

/// Checks a request's fields, all at once; the URL's host is resolved unless private targets
/// are allowed. Runs outside any transaction, since resolving may take a while.
pub async fn check(request: WebhookRequest, allow_private: bool) -> std::result::Result<CheckedWebhook, Rejection> {
    let mut errors = Vec::new();
    let url = match target::parse_url(&request.url) {
        Ok(url) => match target::check_reachable(&url, allow_private).await {
            Ok(()) => Some(url),
            Err(message) => {
                errors.push(FieldError::new("url", message));
                None
            }
        },
        Err(message) => {
            errors.push(FieldError::new("url", message));
            None
        }
    };
    let events = check_events(&request.events).map_err(|found| errors.extend(found)).ok();
    match (url, events) {
        (Some(url), Some(events)) => Ok(CheckedWebhook { url, events }),
        _ => Err(Rejection::Validation(errors)),
    }
}

/// A non-empty list of known event types without repeats, or `["*"]`.
fn check_events(events: &[String]) -> std::result::Result<Vec<String>, Vec<FieldError>> {
    if events.is_empty() {
        return Err(vec![FieldError::new("events", "must name at least one event type, or be [\"*\"] for all")]);
    }
    // Bounded before anything else is done, and linear after: a large body costs no more than
    // reading it.
    if events.len() > MAX_EVENT_FILTERS {
        return Err(vec![FieldError::new(
            "events",
            format!("must list at most {MAX_EVENT_FILTERS} event types (there are {} in all)", EventType::ALL.len()),
        )]);
    }
    let names_a_type = events.iter().any(|name| name != ALL_EVENTS);
    let mut errors = Vec::new();
    let mut seen = HashSet::new();
    let mut kept: Vec<String> = Vec::new();
    for (index, name) in events.iter().enumerate() {
        let field = format!("events[{index}]");
        if name == ALL_EVENTS {
            if names_a_type {
                errors.push(FieldError::new(field, "`*` already means every event type; send [\"*\"] alone"));
            }
        } else if let Err(message) = name.parse::<EventType>() {
            // The message repeats the name: a long one is not echoed back.
            let message = if name.chars().count() > 100 { "is not an event type".to_owned() } else { message };
            errors.push(FieldError::new(field, message));
        }
        if seen.insert(name.as_str()) {
            kept.push(name.clone());
        }
    }
    if errors.is_empty() { Ok(kept) } else { Err(errors) }
}

/// Creates the webhook with a fresh secret, sealed under `sealing_key`. An agent has at most
/// [`MAX_WEBHOOKS_PER_AGENT`]; its row lock keeps concurrent creations from passing the cap.
pub async fn create(
    conn: &mut PgConnection,
    agent_id: Uuid,
    checked: CheckedWebhook,
    sealing_key: &[u8; 32],
) -> Result<WebhookCreated> {
    db::agents::lock(conn, agent_id).await?;
    if db::webhooks::count_for_agent(&mut *conn, agent_id).await? >= MAX_WEBHOOKS_PER_AGENT {
        return Err(Rejection::invalid(
            "webhooks",
            format!(
                "you already have {MAX_WEBHOOKS_PER_AGENT} webhooks, the most an agent may have; delete one to add another"
            ),
        )
        .into());
    }
    let secret = format!("{SECRET_PREFIX}{}", URL_SAFE_NO_PAD.encode(secrets::random_bytes::<32>()));
    let sealed = secrets::seal(sealing_key, secret.as_bytes());
    let webhook = db::webhooks::insert(
        conn,
        &NewWebhook {
            id: Uuid::now_v7(),
            agent_id,
            url: checked.url.as_str(),
            events: &checked.events,
            secret_sealed: &sealed,
            secret_prefix: &secret[..SHOWN_PREFIX_CHARS],
        },
    )
    .await?;
    Ok(WebhookCreated { webhook: webhook.into(), secret })
}

/// Makes a disabled webhook active again; its pending deliveries are due at once. An active
/// webhook is answered unchanged. A revoked approver's webhook stays disabled: the approver may
/// hear of nothing more.
pub async fn enable(conn: &mut PgConnection, agent_id: Uuid, id: Uuid) -> Result<Webhook> {
    let webhook = db::webhooks::lock(conn, id, agent_id).await?.ok_or(Rejection::NotFound { what: "webhook" })?;
    match webhook.status {
        WebhookStatus::Active => Ok(webhook),
        WebhookStatus::Disabled if db::webhooks::approver_revoked(&mut *conn, id).await? => {
            Err(Rejection::InvalidTransition {
                current_status: WebhookStatus::Disabled.as_str(),
                detail: "the webhook belongs to an approver who was revoked, and stays disabled; add a new approver \
                         with a webhook_url instead"
                    .to_owned(),
            }
            .into())
        }
        WebhookStatus::Disabled => Ok(db::webhooks::enable(conn, id).await?),
    }
}

/// Deletes one of the agent's webhooks, with its deliveries; `false` if it has none such.
pub async fn delete(market: &Market, agent_id: Uuid, id: Uuid) -> Result<bool> {
    let mut unit = market.begin().await?;
    let deleted = db::webhooks::delete(unit.conn(), id, agent_id).await?;
    unit.commit().await?;
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(events: &[&str]) -> Vec<String> {
        events.iter().map(|name| (*name).to_owned()).collect()
    }

    #[test]
    fn event_filters_are_known_types_or_everything() {
        assert_eq!(check_events(&names(&["*"])).unwrap(), names(&["*"]));
        assert_eq!(
            check_events(&names(&["bid.placed", "order.created", "bid.placed"])).unwrap(),
            names(&["bid.placed", "order.created"])
        );
        assert_eq!(check_events(&names(&["*", "*"])).unwrap(), names(&["*"]));
        assert_eq!(check_events(&[]).unwrap_err()[0].field, "events");
        let errors = check_events(&names(&["bid.placed", "bid.eaten", "*"])).unwrap_err();
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["events[1]", "events[2]"]);
        let too_many = check_events(&vec![ALL_EVENTS.to_owned(); MAX_EVENT_FILTERS + 1]).unwrap_err();
        assert_eq!((too_many.len(), too_many[0].field.as_str()), (1, "events"));
        assert_eq!(check_events(&vec![ALL_EVENTS.to_owned(); MAX_EVENT_FILTERS]).unwrap(), names(&["*"]));
    }
}
