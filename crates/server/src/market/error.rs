//! Why a market operation did not happen, below every operation that reports it.

use haggle_domain::Rejection;

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
    /// A move tried in one statement without locks
    /// ([`Access::Unlocked`](super::Access::Unlocked)) cannot be made that way (it lost a race,
    /// found the bid past its deadline, or would end other threads too). Nothing was written: run
    /// it again in a transaction with [`Access::Locked`](super::Access::Locked), which decides on
    /// current rows and reports or records what happened.
    #[error("the move needs its locks")]
    NeedsLocks,
    /// The connection failed while the transaction was committing: the change may or may not
    /// have been made. Only a retry that the database can recognise (the same
    /// `Idempotency-Key`) is safe.
    #[error("the outcome is unknown: {0}")]
    OutcomeUnknown(sqlx::Error),
}

impl From<Rejection> for Error {
    fn from(rejection: Rejection) -> Error {
        Error::Rejected(rejection)
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// What became of a move a policy made for its owner under locks, as the executor acts on it.
#[derive(Debug)]
pub enum PolicyMove<T> {
    Made(T),
    /// Another answer came first, or the bid ran out of time: the state machine decided, and
    /// there is nothing left to do.
    Overtaken,
    /// The marketplace refused what the policy chose (a listing sold meanwhile, say): the owner
    /// decides.
    Refused(Rejection),
}

impl<T> PolicyMove<T> {
    /// Sorts the outcome of a locked move; a database failure (or an unknown commit) stays an
    /// error for the executor's transaction.
    pub fn of(made: Result<T>) -> std::result::Result<PolicyMove<T>, sqlx::Error> {
        match made {
            Ok(made) => Ok(PolicyMove::Made(made)),
            Err(Error::Rejected(
                Rejection::InvalidTransition { .. } | Rejection::BidExpired | Rejection::NotFound { .. },
            )) => Ok(PolicyMove::Overtaken),
            Err(Error::Rejected(rejection)) => Ok(PolicyMove::Refused(rejection)),
            Err(Error::Database(error) | Error::OutcomeUnknown(error)) => Err(error),
            Err(Error::NeedsLocks) => unreachable!("a locked move never asks for locks"),
        }
    }
}
