//! Haggle as an Agent2Agent (A2A v1.0) agent, for the server to mount: the Agent Card, the
//! JSON-RPC binding at [`PATH`] and the HTTP+JSON binding under [`REST_PATH`].
//!
//! A negotiation is a task whose id is its thread's id, so that REST, MCP, events and A2A name
//! the same thing; a purchase at the ask is a task (the order's id) that completes at once.
//! Each move is a data part of a message, with the REST API's own field names
//! ([`moves`]), and each call is made through the typed client against the server's own REST
//! API, in process, as the caller: the router the server hands over has every layer a request
//! from the network passes, so validation, rules, tiers, rate and body limits and idempotency
//! (the message id is the `Idempotency-Key`) are the REST API's own, and so are the answers,
//! which A2A carries as its types (`a2a-lf`, the protocol's Rust types).
//!
//! The server authenticates every request here with the agent's API key and puts the
//! [`Caller`] into its extensions; the card alone is public.

mod acting;
mod card;
mod error;
mod jsonrpc;
mod moves;
mod negotiation;
mod paths;
mod recent;
mod rest;
mod routes;
mod sse;
mod task;

use std::time::Duration;

use haggle_client::{Client, ClientError};

pub use acting::Caller;
pub use card::{EXTENSION_URI, agent_card, extended_card};
pub use haggle_client::{ApiService, BodyError, Carried};
pub use paths::{CARD_PATH, METHODS, PATH, REST_PATH};
pub use routes::base_url;

/// How long a blocking `SendMessage` waits for the other side to answer a bid before it
/// answers with the task as it stands (`working`): within the five seconds the official SDKs'
/// HTTP clients wait by default. `SubscribeToTask` and `GetTask` follow the task after.
pub const BLOCKING_WAIT: Duration = Duration::from_secs(4);

/// How the service is set up.
#[derive(Clone)]
pub struct Setup {
    /// The API the calls go to: the server's router, in process.
    pub api: ApiService,
    /// The API's URL, as its requests say (their `Host`) and its errors name it.
    pub api_url: String,
    /// How long a blocking `SendMessage` waits for an answer ([`BLOCKING_WAIT`] by default).
    pub wait: Duration,
}

/// The service to mount at [`PATH`] (its paths relative to it), behind the server's
/// authentication.
pub fn service(setup: Setup) -> Result<axum::Router, ClientError> {
    let client = Client::in_process(&setup.api_url, setup.api)?;
    Ok(routes::router(acting::Agent2Agent::new(client, setup.wait)))
}
