//! Events: what changed, for whom.
//!
//! Every state change records its events in an [`Outbox`], written in the change's own
//! transaction (a move's by the statement that makes it), numbered there for each agent they
//! concern (`db::events::write_events`), and readable once it commits. The [`announcer`] then
//! wakes this instance's waiters through its [`Hub`] and tells the other instances through
//! PostgreSQL NOTIFY, whose [`listener`]s wake theirs; [`catch_up`] wakes, every period, the
//! waiters a wake-up did not reach.

use sqlx::PgConnection;

pub mod announcer;
pub mod catch_up;
mod hub;
pub mod listener;
mod new;

pub use crate::db::events::{CHANNEL, DELIVERIES_CHANNEL, NewEvent, Written};
pub use crate::db::tasks::AUTO_CHANNEL;
pub use haggle_api::{Event, EventType};
pub use hub::{Crowded, DEFAULT_MAX_WAITERS, Hub, MARKET, MAX_WAITERS_PER_AGENT, Subscription};

/// The events of one transaction: written just before it commits, or by the statement that
/// makes a move without a transaction, together with the move ([`pending`](Outbox::pending),
/// then [`wrote`](Outbox::wrote)). A move made under locks leaves its events pending, so that
/// the commit writes every event of the transaction last and holds the agents' event counters
/// only from then until the transaction ends.
#[derive(Debug, Default)]
pub struct Outbox {
    events: Vec<NewEvent>,
    written: Written,
    /// The transaction runs its statements on their generic plans already
    /// ([`needs_generic_plans`](Outbox::needs_generic_plans)).
    generic_plans: bool,
}

impl Outbox {
    pub fn new() -> Outbox {
        Outbox::default()
    }

    pub fn push(&mut self, event: NewEvent) {
        self.events.push(event);
    }

    /// The events not written yet.
    pub fn pending(&self) -> &[NewEvent] {
        &self.events
    }

    /// Records that a statement wrote every pending event (and queued `written.tasks`).
    pub fn wrote(&mut self, written: Written) {
        self.events.clear();
        self.written.add(written);
    }

    /// Records what a statement did besides writing events (tasks it queued).
    pub fn add(&mut self, written: Written) {
        self.written.add(written);
    }

    /// Whether the transaction needs switching to generic plans before a move's statement
    /// (`crate::db::moves::plan_generically`): `true` the first time it is asked, when the
    /// caller switches it, and `false` after, since the setting lasts until the transaction
    /// ends. An outbox lives exactly as long as its transaction.
    pub fn needs_generic_plans(&mut self) -> bool {
        !std::mem::replace(&mut self.generic_plans, true)
    }

    /// Records that a statement of the transaction switched it to generic plans itself (the
    /// executor's, taking a task with its thread's lock).
    pub fn planned_generically(&mut self) {
        self.generic_plans = true;
    }

    /// Everything written so far, by [`flush`](Outbox::flush) and by moves.
    pub fn written(&self) -> &Written {
        &self.written
    }

    /// Writes the pending events in one statement, inside the caller's transaction.
    ///
    /// New pending bids whose responder has a policy are queued for the executor in the same
    /// statement ([`Written::tasks`]).
    pub async fn flush(&mut self, conn: &mut PgConnection) -> Result<Written, sqlx::Error> {
        if !self.events.is_empty() {
            let written = crate::db::events::write(conn, &self.events).await?;
            self.wrote(written);
        }
        Ok(self.written.clone())
    }
}
