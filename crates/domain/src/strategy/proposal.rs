//! What a strategy proposes, below the strategies that propose it and the policy that checks
//! it against its limits.

use super::Rationale;

/// What a strategy would do, before the policy's limits have their say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proposal {
    Accept(Rationale),
    Reject(Rationale),
    Stop(Rationale),
    /// The counter the strategy wishes for; it may be past the limit or outside the legal range.
    Counter {
        amount: i64,
        is_final: bool,
    },
}
