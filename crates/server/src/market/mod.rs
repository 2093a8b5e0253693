//! The marketplace's operations: each runs inside the caller's transaction, reads what it needs
//! with the right locks, asks the domain whether the action is allowed, and writes the outcome.
//! The common moves (counter, accept) can also run without a transaction ([`Access::Unlocked`]):
//! an unlocked read, then one statement that is its own transaction.

pub use batch::Batcher;
pub use error::{Error, PolicyMove, Result};
pub use unit::{Market, Unit, Wakeups};

use haggle_domain::money::AmountLimits;

pub mod agents;
pub mod approvals;
pub mod batch;
pub mod deadlock;
mod error;
pub mod listings;
pub mod live;
pub mod mediation;
pub mod negotiation;
pub mod order_negotiations;
pub mod orders;
pub mod policies;
pub mod quotes;
pub mod unit;
pub mod webhooks;

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

/// Settings of the marketplace's rules that the operator chooses.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rules {
    pub amounts: AmountLimits,
    /// When a thread counts as deadlocked.
    pub deadlock: haggle_domain::deadlock::Settings,
}
