//! The marketplace's operations: each runs inside the caller's transaction, reads what it needs
//! with the right locks, asks the domain whether the action is allowed, and writes the outcome.

use serde::{Deserialize, Deserializer};

use crate::domain::Rejection;
use crate::domain::money::AmountLimits;

pub mod agents;
pub mod listings;
pub mod negotiation;

/// Why an operation did not happen.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The rules refused it. The transaction is intact and may still commit what the refusal
    /// recorded (an expiry discovered on the way).
    #[error("refused: {0:?}")]
    Rejected(Rejection),
    /// The database failed; the transaction must be rolled back.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

impl From<Rejection> for Error {
    fn from(rejection: Rejection) -> Error {
        Error::Rejected(rejection)
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// Settings of the marketplace's rules that the operator chooses.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rules {
    pub amounts: AmountLimits,
}

/// For fields where absent and `null` differ: absent leaves a value alone, `null` clears it.
pub fn double_option<'de, D, T>(deserializer: D) -> std::result::Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}
