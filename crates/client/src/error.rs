//! What can go wrong talking to the API: the server's refusal (a problem+json document), or
//! never getting a readable answer.

pub use haggle_api::{Approval, Problem, ProblemField};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server refused the request. (Boxed: a problem is large, and errors travel far.)
    #[error("{} {}: {}{}", .0.status, .0.code, .0.detail, fields(&.0.errors))]
    Api(Box<Problem>),
    /// No answer: the server could not be reached, the connection broke, or it took too long.
    #[error("{method} {url}: no answer from the server: {}", causes(.error))]
    Transport { method: String, url: String, error: reqwest::Error },
    /// No answer from the API in this process ([`crate::Client::in_process`]): it took too
    /// long, or its answer broke off. The in-process counterpart of `Transport`.
    #[error("{method} {url}: no answer from the API in process: {detail}")]
    InProcess { method: String, url: String, detail: String },
    /// An answer the API does not give: an error that is not problem+json, or a body of the
    /// wrong shape (a server of another version, or not Haggle at all).
    #[error("unexpected answer ({status}): {detail}")]
    UnexpectedResponse { status: u16, detail: String },
    #[error("invalid server URL `{url}`: {reason}")]
    InvalidUrl { url: String, reason: String },
    /// Not a refusal: the agent's approval rules held the move (`202 {approval}`), and nothing
    /// is made until the request is approved (SPEC §10). [`crate::OrHeld::or_held`] reads it as
    /// an outcome of its own.
    #[error("held for approval: request {} waits until {}", .0.id, .0.expires_at)]
    Held(Box<Approval>),
}

impl ClientError {
    /// The problem's stable code, for a refusal by the server.
    pub fn code(&self) -> Option<&str> {
        match self {
            ClientError::Api(problem) => Some(&problem.code),
            ClientError::Transport { .. }
            | ClientError::InProcess { .. }
            | ClientError::UnexpectedResponse { .. }
            | ClientError::InvalidUrl { .. }
            | ClientError::Held(_) => None,
        }
    }

    /// The HTTP status, when the server answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Api(problem) => Some(problem.status),
            ClientError::UnexpectedResponse { status, .. } => Some(*status),
            ClientError::Held(_) => Some(202),
            ClientError::Transport { .. } | ClientError::InProcess { .. } | ClientError::InvalidUrl { .. } => None,
        }
    }

    pub fn problem(&self) -> Option<&Problem> {
        match self {
            ClientError::Api(problem) => Some(problem),
            ClientError::Transport { .. }
            | ClientError::InProcess { .. }
            | ClientError::UnexpectedResponse { .. }
            | ClientError::InvalidUrl { .. }
            | ClientError::Held(_) => None,
        }
    }

    /// The request for approval, when the move was held rather than made.
    pub fn held(&self) -> Option<&Approval> {
        match self {
            ClientError::Held(approval) => Some(approval),
            ClientError::Api(_)
            | ClientError::Transport { .. }
            | ClientError::InProcess { .. }
            | ClientError::UnexpectedResponse { .. }
            | ClientError::InvalidUrl { .. } => None,
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
            ClientError::Api(_)
            | ClientError::InProcess { .. }
            | ClientError::InvalidUrl { .. }
            | ClientError::Held(_) => anyhow::Error::new(self),
        }
    }

    /// Whether sending the same request again (with the same idempotency key) may succeed.
    pub(crate) fn is_retryable(&self) -> bool {
        match self {
            ClientError::Transport { error, .. } => !error.is_builder() && !error.is_decode(),
            // As a broken connection or a timeout.
            ClientError::InProcess { .. } => true,
            ClientError::Api(problem) => problem.code == "idempotency_key_in_use",
            ClientError::UnexpectedResponse { .. } | ClientError::InvalidUrl { .. } | ClientError::Held(_) => false,
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

/// What a move comes to: made, with its answer, or held for approval.
#[derive(Debug, Clone, PartialEq)]
pub enum MoveOutcome<T> {
    /// The move was made: the route's own answer.
    Moved(T),
    /// The agent's approval rules held it: the request, PENDING, that an approver answers.
    Held(Box<Approval>),
}

impl<T> MoveOutcome<T> {
    /// The move's answer, when it was made.
    pub fn moved(self) -> Option<T> {
        match self {
            MoveOutcome::Moved(answer) => Some(answer),
            MoveOutcome::Held(_) => None,
        }
    }
}

/// Reads a move's answer with a held move as an outcome rather than an error:
/// `client.accept(bid).await.or_held()?` is [`MoveOutcome::Moved`] or [`MoveOutcome::Held`].
pub trait OrHeld<T> {
    fn or_held(self) -> Result<MoveOutcome<T>, ClientError>;
}

impl<T> OrHeld<T> for Result<T, ClientError> {
    fn or_held(self) -> Result<MoveOutcome<T>, ClientError> {
        match self {
            Ok(answer) => Ok(MoveOutcome::Moved(answer)),
            Err(ClientError::Held(approval)) => Ok(MoveOutcome::Held(approval)),
            Err(error) => Err(error),
        }
    }
}

/// A refused request's answer: its problem document, or what came instead of one.
pub(crate) fn refusal(method: &reqwest::Method, url: &str, status: reqwest::StatusCode, bytes: &[u8]) -> ClientError {
    match serde_json::from_slice::<Problem>(bytes) {
        Ok(problem) => ClientError::Api(Box::new(problem)),
        Err(_) => ClientError::UnexpectedResponse {
            status: status.as_u16(),
            detail: format!("{method} {url}: {}", String::from_utf8_lossy(bytes).chars().take(200).collect::<String>()),
        },
    }
}
