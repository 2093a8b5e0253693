//! Problem details (RFC 9457): every error of the API, with its stable `code`.

use serde::{Deserialize, Serialize};

pub use haggle_domain::rejection::Code;

/// The media type of every error answer.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// An `application/problem+json` answer, as every error of the API is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// Whose move it is (`not_your_turn`).
    #[serde(default)]
    pub turn: Option<haggle_domain::Party>,
    /// Any other member the code adds (`limit`, `purchase_url`, `ask_amount`, ...).
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// One faulty field of a refused request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProblemField {
    pub field: String,
    pub message: String,
}

impl Problem {
    /// The problem's code as the enum, when this server version knows it.
    pub fn known_code(&self) -> Option<Code> {
        self.code.parse().ok()
    }
}
