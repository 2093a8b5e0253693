//! The unit of work: every write of the market, whoever makes it (a request, the executor, the
//! sweeper, the webhook worker, an operator command), is one of these.
//!
//! A unit begins in a transaction ([`Market::begin`]: the workers' and the operator commands'
//! way) or, for a request, as `http::Write` opens it: its moves without a transaction
//! ([`Market::begin_unlocked`]), an unlocked read, then one statement that is its own
//! transaction and makes the move only if nothing it was decided on has changed. An operation
//! run through [`Unit::run`] that cannot be made that way ([`Error::NeedsLocks`]) has written
//! nothing, and is run again at once in a transaction, which decides on current rows. The unit
//! collects the events of what it did in its outbox; [`Unit::commit`] writes them with the
//! change, commits, and hands the announcer whom they concern (to wake their readers) and wakes
//! this instance's executor (bids now wait for a policy). Dropping a unit rolls it back.

use futures::future::BoxFuture;
use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, PgPool, Postgres, Transaction};

use std::sync::Arc;

use super::batch::KeyedAnswer;
use super::{Access, Batcher, Error, Result};
use crate::db;
use crate::events::announcer::Announcer;
use crate::events::{Outbox, Written};
use crate::metrics;
use crate::signal::Signal;

/// Whom a commit wakes on this instance.
#[derive(Debug, Clone, Default)]
pub struct Wakeups {
    /// The announcer, when events were written.
    pub announcer: Announcer,
    /// The executor, when bids were queued for a policy.
    pub executor: Signal,
}

/// Where the market's writes go: the database, the batcher that makes unlocked moves (when this
/// process runs one), and whom a commit wakes. Cheap to clone.
#[derive(Clone)]
pub struct Market {
    pool: PgPool,
    moves: Option<Batcher>,
    wakeups: Wakeups,
}

impl Market {
    pub fn new(pool: PgPool, moves: Option<Batcher>, wakeups: Wakeups) -> Market {
        Market { pool, moves, wakeups }
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub fn wakeups(&self) -> &Wakeups {
        &self.wakeups
    }

    /// A unit in a transaction: its operations lock what they read. A BEGIN on a connection
    /// that turns out to be lost is made again on another: nothing was done yet.
    pub async fn begin(&self) -> std::result::Result<Unit, sqlx::Error> {
        let _waiting = metrics::Open::pool_wait();
        let tx = db::again_if_lost(|| self.pool.begin()).await?;
        Ok(self.unit(Connection::Transaction(tx)))
    }

    /// A unit whose moves are first tried without a transaction, through the batcher; without
    /// a batcher, as [`begin`](Self::begin).
    pub async fn begin_unlocked(&self) -> std::result::Result<Unit, sqlx::Error> {
        if self.moves.is_none() {
            return self.begin().await;
        }
        let _waiting = metrics::Open::pool_wait();
        let conn = self.pool.acquire().await?;
        Ok(self.unit(Connection::Unlocked(conn)))
    }

    fn unit(&self, conn: Connection) -> Unit {
        Unit {
            conn,
            pool: self.pool.clone(),
            moves: self.moves.clone(),
            events: Outbox::new(),
            wakeups: self.wakeups.clone(),
            keyed: None,
        }
    }
}

/// Where a unit's statements go.
enum Connection {
    /// Each statement is its own transaction.
    Unlocked(PoolConnection<Postgres>),
    Transaction(Transaction<'static, Postgres>),
    /// Between the two, while a transaction is being opened.
    Opening,
}

/// A unit of work in progress.
pub struct Unit {
    conn: Connection,
    /// Where another connection comes from, if the unit's is lost before it did anything.
    pool: PgPool,
    moves: Option<Batcher>,
    events: Outbox,
    wakeups: Wakeups,
    /// A keyed request's answer, for its move to store while the unit is unlocked.
    keyed: Option<Arc<KeyedAnswer>>,
}

impl Unit {
    /// Has the unit's unlocked moves store `keyed`, their request's answer, with themselves; a
    /// move that cannot is then not made unlocked, and [`run`](Self::run) hands back
    /// [`Error::NeedsLocks`] rather than taking locks itself: the request claims its key first.
    pub fn answer_with(&mut self, keyed: Option<Arc<KeyedAnswer>>) {
        self.keyed = keyed;
    }

    /// Whether the unit is outside a transaction, its moves made by the batcher.
    pub fn is_unlocked(&self) -> bool {
        !self.access().is_locked()
    }

    /// How the unit's operations read: unlocked until an operation asks for locks.
    pub fn access(&self) -> Access {
        match (&self.conn, &self.moves) {
            (Connection::Unlocked(_), Some(moves)) => Access::Unlocked(match &self.keyed {
                Some(keyed) => moves.answering(keyed.clone()),
                None => moves.clone(),
            }),
            (Connection::Unlocked(_), None) | (Connection::Transaction(_) | Connection::Opening, _) => Access::Locked,
        }
    }

    pub fn conn(&mut self) -> &mut PgConnection {
        self.parts().0
    }

    /// The connection, and the outbox its events go to.
    pub fn parts(&mut self) -> (&mut PgConnection, &mut Outbox) {
        let conn = match &mut self.conn {
            Connection::Unlocked(conn) => &mut **conn,
            Connection::Transaction(tx) => &mut **tx,
            Connection::Opening => unreachable!("a transaction is opened before the unit goes on"),
        };
        (conn, &mut self.events)
    }

    /// Runs a market operation: as the unit began, and again under locks if it cannot be made
    /// without them (unless the unit answers a keyed request: [`answer_with`](Self::answer_with)).
    ///
    /// Unlocked, the operation writes nothing on the unit's connection (its move is the
    /// batcher's, which reports a lost statement as [`Error::OutcomeUnknown`]): if that
    /// connection turns out to be lost, nothing was done, and the operation runs again, once,
    /// on another.
    pub async fn run<T, F>(&mut self, mut operation: F) -> Result<T>
    where
        F: for<'u> FnMut(&'u mut PgConnection, &'u mut Outbox, Access) -> BoxFuture<'u, Result<T>>,
    {
        let mut reconnected = false;
        loop {
            let access = self.access();
            let locked = access.is_locked();
            let (conn, events) = self.parts();
            match operation(conn, events, access).await {
                Err(Error::NeedsLocks) if !locked && self.keyed.is_none() => self.lock().await?,
                Err(Error::Database(error)) if !locked && !reconnected && db::lost(&error) => {
                    tracing::info!(%error, "a database connection was lost before the move; making it on another");
                    db::suspect_idle_connections();
                    self.events = Outbox::new();
                    self.conn = Connection::Unlocked(self.pool.acquire().await?);
                    reconnected = true;
                }
                outcome => return outcome,
            }
        }
    }

    /// Opens a transaction on the unit's connection unless it is in one: for an operation that
    /// could not be made unlocked, or for statements that must run together. What an unlocked
    /// attempt collected in the outbox is dropped: it wrote nothing.
    pub async fn lock(&mut self) -> std::result::Result<(), sqlx::Error> {
        if !matches!(self.conn, Connection::Unlocked(_)) {
            return Ok(());
        }
        if let Connection::Unlocked(conn) = std::mem::replace(&mut self.conn, Connection::Opening) {
            self.events = Outbox::new();
            self.conn = Connection::Transaction(Transaction::begin(conn, None).await?);
        }
        Ok(())
    }

    /// Ends the unit without its writes, and waits for it: a transaction's locks (a key's claim
    /// among them) are released before the request answers, so the caller's next request does not
    /// find them held. Dropping a unit rolls it back too, but only after the answer may have gone.
    pub async fn rollback(self) {
        if let Connection::Transaction(tx) = self.conn
            && let Err(error) = tx.rollback().await
        {
            tracing::warn!(%error, "could not roll back a unit of work; it is rolled back as a dropped one is, on its connection's next use");
        }
    }

    /// Writes the outbox's events with the change and commits, then wakes whoever must hear of
    /// it. An unlocked unit's moves committed with their events already.
    pub async fn commit(self) -> std::result::Result<Written, sqlx::Error> {
        self.commit_reporting().await.map_err(|error| match error {
            Error::Database(error) | Error::OutcomeUnknown(error) => error,
            Error::Rejected(_) | Error::NeedsLocks => unreachable!("a commit neither refuses nor asks for locks"),
        })
    }

    /// Commits as [`commit`](Self::commit) does, telling a failure of the COMMIT itself, whose
    /// outcome is unknown ([`Error::OutcomeUnknown`]), from one before it, after which nothing
    /// was made ([`Error::Database`]).
    pub async fn commit_reporting(mut self) -> Result<Written> {
        let written = match std::mem::replace(&mut self.conn, Connection::Opening) {
            Connection::Transaction(mut tx) => {
                let written = self.events.flush(&mut tx).await?;
                match tx.commit().await {
                    Ok(()) => {}
                    // The database answered the commit and refused it: it rolled back.
                    Err(sqlx::Error::Database(refusal)) if !db::connection_lost(refusal.code().as_deref()) => {
                        return Err(Error::Database(sqlx::Error::Database(refusal)));
                    }
                    // No answer, or the connection ended as it went: it may have been made.
                    Err(error) => return Err(Error::OutcomeUnknown(error)),
                }
                written
            }
            Connection::Unlocked(mut conn) => {
                debug_assert!(self.events.pending().is_empty(), "an unlocked move left events unwritten");
                self.events.flush(&mut conn).await?
            }
            Connection::Opening => unreachable!("a transaction is opened before the unit goes on"),
        };
        self.wakeups.announcer.committed(&written);
        if written.tasks > 0 {
            self.wakeups.executor.notify();
        }
        Ok(written)
    }
}
