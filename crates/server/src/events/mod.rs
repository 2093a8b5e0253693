//! Events: what changed, for whom.
//!
//! Every state change records its events in an [`Outbox`] that is written in the change's own
//! transaction. The [`publisher`] numbers committed events and tells every server instance
//! through PostgreSQL NOTIFY; each instance's [`listener`] wakes the waiters of the agents
//! concerned through its [`Hub`].

use sqlx::PgConnection;

mod hub;
pub mod listener;
mod new;
pub mod publisher;

pub use crate::db::events::{CHANNEL, DELIVERIES_CHANNEL, NewEvent, Written};
pub use crate::db::tasks::AUTO_CHANNEL;
pub use haggle_api::{Event, EventType};
pub use hub::{Crowded, DEFAULT_MAX_WAITERS, Hub, MARKET, MAX_WAITERS_PER_AGENT, Subscription};

/// The events of one transaction: written just before it commits, or by the statement that
/// makes a move, together with the move ([`pending`](Outbox::pending), then
/// [`wrote`](Outbox::wrote)).
#[derive(Debug, Default)]
pub struct Outbox {
    events: Vec<NewEvent>,
    written: Written,
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

    /// Forgets the events pushed after the first `len`: the move they described did not happen.
    pub fn truncate(&mut self, len: usize) {
        self.events.truncate(len);
    }

    /// Records that a statement wrote every pending event (and queued `written.tasks`).
    pub fn wrote(&mut self, written: Written) {
        self.events.clear();
        self.written.events += written.events;
        self.written.tasks += written.tasks;
    }

    /// Everything written so far, by [`flush`](Outbox::flush) and by moves.
    pub fn written(&self) -> Written {
        self.written
    }

    /// Writes the pending events in one statement, inside the caller's transaction.
    ///
    /// New pending bids whose responder has a policy are queued for the executor in the same
    /// statement ([`Written::tasks`]).
    pub async fn flush(&mut self, conn: &mut PgConnection) -> Result<Written, sqlx::Error> {
        if !self.events.is_empty() {
            let written = crate::db::events::insert_outbox(conn, &self.events).await?;
            self.wrote(written);
        }
        Ok(self.written)
    }
}
