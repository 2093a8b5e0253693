//! What every tool shares: the answer a tool call gives, and the idempotency key a move takes
//! with the client that sends it.

use rmcp::ErrorData;
use rmcp::model::CallToolResult;
use schemars::JsonSchema;
use serde::Deserialize;

/// What a tool call answers: the tool's result, or the protocol's error.
pub(crate) type Answer = Result<CallToolResult, ErrorData>;

/// An `Idempotency-Key` for a move: any unique string, such as a UUID.
///
/// Sent again with the same call, it returns the first call's answer instead of making the move
/// a second time: retry a move whose answer was lost with the same key. Left out, the call gets
/// a key of its own (so its own transport retries are safe, but a retry of the tool call is a
/// new move).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub(crate) struct IdempotencyKey(#[schemars(length(min = 1, max = 255), regex(pattern = r"^[!-~]+$"))] String);

/// The client that sends a move under `key`, or under a key of its own.
pub(crate) fn with_key(client: &haggle_client::Client, key: Option<IdempotencyKey>) -> haggle_client::Client {
    match key {
        Some(IdempotencyKey(key)) => client.with_idempotency_key(key),
        None => client.clone(),
    }
}
