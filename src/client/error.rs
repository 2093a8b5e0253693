//! What can go wrong talking to the API: the server's refusal (a problem+json document), or
//! never getting a readable answer.

use serde::Deserialize;

/// An `application/problem+json` answer, as every error of the API is.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Problem {
    /// The HTTP status.
    pub status: u16,
    /// The stable code, e.g. `not_found`, `not_your_turn`, `validation_failed`.
    pub code: String,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub detail: String,
    /// Every faulty field (`validation_failed`, and some `malformed_request`).
    #[serde(default)]
    pub errors: Vec<ProblemField>,
    /// The status of the object in the way (`invalid_transition`, `bid_expired`, ...).
    #[serde(default)]
    pub current_status: Option<String>,
    /// The allowed range of a counter (`not_a_concession`).
    #[serde(default)]
    pub min_amount: Option<i64>,
    #[serde(default)]
    pub max_amount: Option<i64>,
    /// The caller's live thread on the listing (`thread_active`).
    #[serde(default)]
    pub thread_id: Option<uuid::Uuid>,
    /// Any other member the code adds (`limit`, `purchase_url`, `ask_amount`, ...).
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// One faulty field of a refused request.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ProblemField {
    pub field: String,
    pub message: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server refused the request. (Boxed: a problem is large, and errors travel far.)
    #[error("{} {}: {}{}", .0.status, .0.code, .0.detail, fields(&.0.errors))]
    Api(Box<Problem>),
    /// No answer: the server could not be reached, the connection broke, or it took too long.
    #[error("{method} {url}: no answer from the server: {}", causes(.error))]
    Transport { method: String, url: String, error: reqwest::Error },
    /// An answer the API does not give: an error that is not problem+json, or a body of the
    /// wrong shape (a server of another version, or not Haggle at all).
    #[error("unexpected answer ({status}): {detail}")]
    UnexpectedResponse { status: u16, detail: String },
    #[error("invalid server URL `{url}`: {reason}")]
    InvalidUrl { url: String, reason: String },
}

impl ClientError {
    /// The problem's stable code, for a refusal by the server.
    pub fn code(&self) -> Option<&str> {
        match self {
            ClientError::Api(problem) => Some(&problem.code),
            ClientError::Transport { .. } | ClientError::UnexpectedResponse { .. } | ClientError::InvalidUrl { .. } => {
                None
            }
        }
    }

    /// The HTTP status, when the server answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Api(problem) => Some(problem.status),
            ClientError::UnexpectedResponse { status, .. } => Some(*status),
            ClientError::Transport { .. } | ClientError::InvalidUrl { .. } => None,
        }
    }

    pub fn problem(&self) -> Option<&Problem> {
        match self {
            ClientError::Api(problem) => Some(problem),
            ClientError::Transport { .. } | ClientError::UnexpectedResponse { .. } | ClientError::InvalidUrl { .. } => {
                None
            }
        }
    }

    /// What this error, from one of the first calls to the server at `url`, says about the
    /// server, in words for the user of a command whose option `flag` names the server (say
    /// `--url`). An error that says nothing about the server comes back as it is.
    pub fn first_contact(self, url: &str, flag: &str) -> anyhow::Error {
        match &self {
            ClientError::Transport { .. } => anyhow::anyhow!(
                "cannot reach a Haggle server at {url} ({self}). Start one with `haggle serve` (it listens on \
                 HAGGLE_BIND), or point {flag} at the one you have"
            ),
            ClientError::Api(problem) if problem.code == "unavailable" => {
                anyhow::anyhow!(
                    "the server at {url} is up but not ready (its database does not answer); fix that first"
                )
            }
            ClientError::UnexpectedResponse { .. } => {
                anyhow::anyhow!("{url} does not answer as a Haggle server ({self}); is {flag} pointing at one?")
            }
            ClientError::Api(_) | ClientError::InvalidUrl { .. } => anyhow::Error::new(self),
        }
    }

    /// Whether sending the same request again (with the same idempotency key) may succeed.
    pub(crate) fn is_retryable(&self) -> bool {
        match self {
            ClientError::Transport { error, .. } => !error.is_builder() && !error.is_decode(),
            ClientError::Api(problem) => problem.code == "idempotency_key_in_use",
            ClientError::UnexpectedResponse { .. } | ClientError::InvalidUrl { .. } => false,
        }
    }
}

fn fields(errors: &[ProblemField]) -> String {
    errors.iter().map(|e| format!("; {}: {}", e.field, e.message)).collect()
}

/// What happened, from reqwest's causes: its own message only repeats the URL
/// ("error sending request for url (...)"). The causes are written out here rather than
/// exposed as the error's source, so that the message reads the same however it is printed.
fn causes(error: &reqwest::Error) -> String {
    let mut parts = Vec::new();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        parts.push(cause.to_string());
        source = cause.source();
    }
    if parts.is_empty() { error.to_string() } else { parts.join(": ") }
}
