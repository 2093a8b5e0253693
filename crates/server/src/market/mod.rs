//! The marketplace's operations: each runs inside the caller's transaction, reads what it needs
//! with the right locks, asks the domain whether the action is allowed, and writes the outcome.
//! The common moves (counter, accept) can also run without a transaction ([`Access::Unlocked`]):
//! an unlocked read, then one statement that is its own transaction.

pub use batch::Batcher;
pub use unit::{Market, Unit, Wakeups};

use haggle_domain::Rejection;
use haggle_domain::deadlock;
use haggle_domain::money::AmountLimits;

pub mod agents;
pub mod batch;
pub mod listings;
pub mod live;
pub mod mediation;
pub mod negotiation;
pub mod policies;
pub mod quotes;
pub mod unit;
pub mod webhooks;

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
    /// A move tried in one statement without locks ([`Access::Unlocked`]) cannot be made that
    /// way (it lost a race, found the bid past its deadline, or would end other threads too).
    /// Nothing was written: run it again in a transaction with [`Access::Locked`], which decides
    /// on current rows and reports or records what happened.
    #[error("the move needs its locks")]
    NeedsLocks,
    /// The connection failed while the transaction was committing: the change may or may not
    /// have been made. Only a retry that the database can recognise (the same
    /// `Idempotency-Key`) is safe.
    #[error("the outcome is unknown: {0}")]
    OutcomeUnknown(sqlx::Error),
}

/// How an operation reads what it decides on, and where it makes its move.
#[derive(Clone)]
pub enum Access {
    /// Inside the caller's transaction, taking row locks before reading.
    Locked,
    /// Outside any transaction: read without locks, then the move is made by the batcher, in a
    /// statement of its own that makes it only if nothing it was decided on has changed (else
    /// [`Error::NeedsLocks`]).
    Unlocked(Batcher),
}

impl Access {
    pub fn is_locked(&self) -> bool {
        matches!(self, Access::Locked)
    }

    /// The batcher an unlocked move is made by.
    pub fn batcher(&self) -> Option<&Batcher> {
        match self {
            Access::Locked => None,
            Access::Unlocked(batcher) => Some(batcher),
        }
    }
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
    /// When a thread counts as deadlocked.
    pub deadlock: deadlock::Settings,
}
