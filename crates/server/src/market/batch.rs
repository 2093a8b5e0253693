//! Moves made together. Unlocked placements, counters and acceptances ([`Access::Unlocked`]) are
//! handed to a worker with connections of its own, which makes all the moves waiting when it is
//! free in one statement per kind of move, the statements side by side: one round trip, one
//! commit and one plan for many moves. The batcher knows the kinds only as [`Move`]
//! implementations: its queue carries each move with the function that makes a statement of
//! its kind. Each move keeps its own compare-and-set, so a move
//! that lost a race or found its bid past its deadline comes back unmade, with nothing of it
//! written, and its request makes it again under locks. Two moves on one thread (one listing,
//! for acceptances; one buyer's threads on a listing, for placements) never share a statement;
//! the later one waits for the next round.
//!
//! A statement whose connection is lost after it was sent may have committed: its moves are
//! neither made again nor reported as refused, but answered [`Error::OutcomeUnknown`].
//!
//! A worker never waits to gather moves: under light load each statement carries one move, and
//! under heavy load the moves that arrive while a round runs go together in the next. One
//! worker makes the largest statements, which cost the least per move; more workers
//! (`HAGGLE_MOVE_WORKERS`) split the waiting moves between them.
//!
//! [`Access::Unlocked`]: super::Access::Unlocked

use std::any::Any;
use std::collections::HashSet;
use std::sync::Arc;

use futures::future::BoxFuture;
use sqlx::{PgConnection, PgPool};
use tokio::sync::{Mutex, mpsc, oneshot};
use tokio::task::JoinSet;
use uuid::Uuid;

use super::Error;
use super::live::Live;
use crate::db::idempotency::MoveAnswer;
use crate::db::moves::{AcceptMove, Accepted, CounterMove, Made, MoveEvent, PlaceMove};
use crate::db::{self, Bid, Order, Thread};
use crate::events::NewEvent;
use crate::metrics;

/// The most moves one round makes.
const MAX_BATCH: usize = 64;

/// What a statement of moves gives back: each move's outcome, in order (`None` for a move that
/// was not made, of which nothing was written).
pub type Outcomes<'a, T> = BoxFuture<'a, Result<Vec<Option<Made<T>>>, sqlx::Error>>;

/// Where a move's outcome goes: its request.
type Respond<T> = oneshot::Sender<Outcome<T>>;

/// A move's outcome, as its request hears it.
enum Outcome<T> {
    Made(Made<T>),
    /// Nothing of it was written: its compare-and-set failed, or its statement certainly did
    /// not run or was rolled back.
    NotMade,
    /// The statement's connection was lost after it was sent, without an answer: it may have
    /// committed.
    Unknown(sqlx::Error),
}

/// A kind of move made in one statement: the statement, and what two moves in one statement
/// must not share.
pub(crate) trait Move: Clone + Send + Sync + Sized + 'static {
    /// The rows a move of this kind writes, as stored.
    type Made: Send + 'static;
    /// What a statement of them is called, in logs.
    const KIND: &'static str;

    /// Two moves with the same key never share a statement.
    fn key(&self) -> (Uuid, Uuid);

    /// Whether the move carries its request's answer for an `Idempotency-Key`, which its
    /// statement stores with it. A keyed request's move of a kind that stores none is made under
    /// locks instead.
    fn answered(&self) -> bool {
        false
    }

    /// Makes the moves in one statement, with their events (each tagged with its move's index).
    fn make<'a>(conn: &'a mut PgConnection, moves: &'a [Self], events: &'a [MoveEvent<'a>])
    -> Outcomes<'a, Self::Made>;
}

impl Move for PlaceMove {
    type Made = (Bid, Thread);
    const KIND: &'static str = "placements";

    /// A buyer's threads on a listing.
    fn key(&self) -> (Uuid, Uuid) {
        (self.listing_id, self.opening.author_id)
    }

    fn answered(&self) -> bool {
        self.answer.is_some()
    }

    fn make<'a>(
        conn: &'a mut PgConnection,
        moves: &'a [Self],
        events: &'a [MoveEvent<'a>],
    ) -> Outcomes<'a, Self::Made> {
        Box::pin(db::moves::place(conn, moves, events))
    }
}

impl Move for CounterMove {
    type Made = (Bid, Thread);
    const KIND: &'static str = "counters";

    /// The thread.
    fn key(&self) -> (Uuid, Uuid) {
        (self.thread_id, Uuid::nil())
    }

    fn answered(&self) -> bool {
        self.answer.is_some()
    }

    fn make<'a>(
        conn: &'a mut PgConnection,
        moves: &'a [Self],
        events: &'a [MoveEvent<'a>],
    ) -> Outcomes<'a, Self::Made> {
        Box::pin(db::moves::counter(conn, moves, events))
    }
}

impl Move for AcceptMove {
    type Made = Accepted;
    const KIND: &'static str = "acceptances";

    /// The listing, which sells a unit.
    fn key(&self) -> (Uuid, Uuid) {
        (self.listing_id, Uuid::nil())
    }

    fn answered(&self) -> bool {
        self.answer.is_some()
    }

    fn make<'a>(
        conn: &'a mut PgConnection,
        moves: &'a [Self],
        events: &'a [MoveEvent<'a>],
    ) -> Outcomes<'a, Self::Made> {
        Box::pin(db::moves::accept(conn, moves, events))
    }
}

/// A move waiting to be made, with its events and where its outcome goes.
struct Pending<M: Move> {
    what: M,
    events: Vec<NewEvent>,
    reply: Respond<M::Made>,
}

/// A move of any kind in the queue: what two moves in one statement must not share, the move
/// itself (a [`Pending`] of its kind), and how a statement of moves of its kind is made. The
/// batcher knows no kind by name: a new kind of move is one more [`Move`] implementation.
pub(crate) struct Job {
    kind: &'static str,
    key: (Uuid, Uuid),
    pending: Queued,
    make_all: MakeAll,
}

/// Makes a statement of moves of one kind, each a boxed [`Pending`] of that kind.
type MakeAll = for<'a> fn(&'a PgPool, Vec<Queued>) -> BoxFuture<'a, ()>;

/// A boxed [`Pending`] of some kind of move.
type Queued = Box<dyn Any + Send>;

impl Job {
    fn new<M: Move>(what: M, events: Vec<NewEvent>, reply: Respond<M::Made>) -> Job {
        Job {
            kind: M::KIND,
            key: what.key(),
            pending: Box::new(Pending { what, events, reply }),
            make_all: make_all::<M>,
        }
    }
}

fn make_all<M: Move>(pool: &PgPool, pending: Vec<Queued>) -> BoxFuture<'_, ()> {
    let moves: Vec<Pending<M>> =
        pending.into_iter().map(|job| *job.downcast::<Pending<M>>().expect("jobs are grouped by kind")).collect();
    Box::pin(statement(pool, moves))
}

/// Where unlocked moves are sent to be made; cheap to clone.
#[derive(Clone)]
pub struct Batcher {
    jobs: mpsc::UnboundedSender<Job>,
    /// What this instance's moves wrote, for the next move to decide on.
    live: Arc<Live>,
    /// For the move of a request with an `Idempotency-Key`: its answer, stored with the move.
    keyed: Option<Arc<KeyedAnswer>>,
}

/// A keyed request's answer to a placement, a counter or an acceptance, worked out from the rows its move will
/// write before the move is made, so that the move's statement stores it with the move: made
/// together or not at all, as a keyed request's answer and effect are in a transaction.
pub struct KeyedAnswer {
    agent_id: Uuid,
    key_digest: [u8; 32],
    request_digest: [u8; 32],
    render: Render,
    /// The answer last worked out, which the request sends if its move was made.
    last: std::sync::Mutex<Option<MoveAnswer>>,
}

/// How a request's answer is made of the rows its move writes: the bid it made or answered, its
/// thread, and the order an acceptance made.
type Render = Box<dyn Fn(&Bid, &Thread, Option<&Order>) -> Rendered + Send + Sync>;

/// A response as it is stored for replays: its status, content type and body.
pub struct Rendered {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

impl KeyedAnswer {
    pub fn new(
        agent_id: Uuid,
        key_digest: [u8; 32],
        request_digest: [u8; 32],
        render: impl Fn(&Bid, &Thread, Option<&Order>) -> Rendered + Send + Sync + 'static,
    ) -> KeyedAnswer {
        KeyedAnswer { agent_id, key_digest, request_digest, render: Box::new(render), last: Default::default() }
    }

    /// The answer for a move that writes `bid`, `thread` and `order`, for its statement to store.
    pub fn answer(&self, bid: &Bid, thread: &Thread, order: Option<&Order>) -> MoveAnswer {
        let Rendered { status, content_type, body } = (self.render)(bid, thread, order);
        let answer = MoveAnswer {
            agent_id: self.agent_id,
            key_digest: self.key_digest.to_vec(),
            request_digest: self.request_digest.to_vec(),
            status_code: i16::try_from(status).expect("an HTTP status fits"),
            content_type,
            body,
        };
        *self.last.lock().expect("never poisoned") = Some(answer.clone());
        answer
    }

    /// The answer last worked out: what the statement stored, once the move is made.
    pub fn stored(&self) -> Option<MoveAnswer> {
        self.last.lock().expect("never poisoned").clone()
    }
}

impl Batcher {
    /// Starts `workers` workers in `tasks`, which make moves over `pool`'s connections (three
    /// at a time each), and remembers up to `live` pending bids for the moves that answer them
    /// ([`Live`]). The pool must be the workers' own: a request waiting for its move holds a
    /// connection of the server's. The workers stop when the last handle is dropped.
    pub fn start(pool: PgPool, workers: usize, live: usize, tasks: &mut JoinSet<()>) -> Batcher {
        let (jobs, queue) = mpsc::unbounded_channel();
        let queue = Arc::new(Mutex::new(queue));
        for _ in 0..workers.max(1) {
            tasks.spawn(work(pool.clone(), queue.clone()));
        }
        Batcher { jobs, live: Arc::new(Live::new(live)), keyed: None }
    }

    /// This batcher for the moves of a request with an `Idempotency-Key`, whose answer they
    /// store ([`KeyedAnswer`]).
    pub fn answering(&self, keyed: Arc<KeyedAnswer>) -> Batcher {
        Batcher { keyed: Some(keyed), ..self.clone() }
    }

    /// The keyed request's answer, if the move is one's.
    pub fn keyed(&self) -> Option<&KeyedAnswer> {
        self.keyed.as_deref()
    }

    /// What this instance's moves wrote of the live negotiations.
    pub fn live(&self) -> &Live {
        &self.live
    }

    /// Makes the move with its events; `None` if it was not made, and nothing of it was
    /// written. [`Error::OutcomeUnknown`] if its statement may or may not have committed.
    pub(crate) async fn make<M: Move>(&self, what: M, events: Vec<NewEvent>) -> super::Result<Option<Made<M::Made>>> {
        let (reply, answer) = oneshot::channel();
        if self.jobs.send(Job::new(what, events, reply)).is_err() {
            return Ok(None);
        }
        match answer.await {
            Ok(Outcome::Made(made)) => Ok(Some(made)),
            Ok(Outcome::NotMade) | Err(_) => Ok(None),
            Ok(Outcome::Unknown(error)) => Err(Error::OutcomeUnknown(error)),
        }
    }
}

async fn work(pool: PgPool, queue: Arc<Mutex<mpsc::UnboundedReceiver<Job>>>) {
    loop {
        let mut jobs = Vec::new();
        {
            let mut queue = queue.lock().await;
            let Some(first) = queue.recv().await else { return };
            jobs.push(first);
            while jobs.len() < MAX_BATCH {
                match queue.try_recv() {
                    Ok(job) => jobs.push(job),
                    Err(_) => break,
                }
            }
        }
        while !jobs.is_empty() {
            // Moves that share what they must not with an earlier one wait for the next round.
            let mut keys = HashSet::new();
            let (round, later): (Vec<Job>, Vec<Job>) = jobs.into_iter().partition(|job| keys.insert(job.key));
            jobs = later;
            let started = std::time::Instant::now();
            make_round(&pool, round).await;
            metrics::move_round(started);
        }
    }
}

/// Makes one round of moves: one statement per kind of move, side by side, each on a
/// connection of its own.
async fn make_round(pool: &PgPool, round: Vec<Job>) {
    let mut kinds: Vec<(&'static str, MakeAll, Vec<Queued>)> = Vec::new();
    for job in round {
        match kinds.iter_mut().find(|(kind, _, _)| *kind == job.kind) {
            Some((_, _, pending)) => pending.push(job.pending),
            None => kinds.push((job.kind, job.make_all, vec![job.pending])),
        }
    }
    futures::future::join_all(kinds.into_iter().map(|(_, make_all, pending)| make_all(pool, pending))).await;
}

/// Makes the moves in one statement and hands each its outcome. If no connection can be had, or
/// the database refuses the statement, none of them was made: each request makes its move again
/// under locks, which will say why if the database is out of reach.
///
/// If the connection is lost once the statement was sent, it may have committed: a move made
/// again under locks would then find itself already made and be refused, though it was made.
/// Such moves are answered [`Error::OutcomeUnknown`] (503, the outcome unknown), as a lost
/// commit is. Finding out which were made, to answer them as made, would take a read on another
/// connection, which the database may not give either, of rows that may have moved on since;
/// the request's caller can read the current state as well, or retry with an
/// `Idempotency-Key`. The pool pings a connection idle for a while before handing it out, so
/// one that died while idle is replaced rather than lost with the statement sent on it.
async fn statement<M: Move>(pool: &PgPool, moves: Vec<Pending<M>>) {
    if moves.is_empty() {
        return;
    }
    let mut conn = match pool.acquire().await {
        Ok(conn) => conn,
        Err(error) => {
            tracing::warn!(%error, moves = moves.len(), "no connection for a statement of {}; each is made again under locks", M::KIND);
            return;
        }
    };
    metrics::move_batch(moves.len());
    let what: Vec<M> = moves.iter().map(|pending| pending.what.clone()).collect();
    let made = {
        let events: Vec<MoveEvent> = moves
            .iter()
            .enumerate()
            .flat_map(|(index, pending)| pending.events.iter().map(move |event| MoveEvent { index, event }))
            .collect();
        M::make(&mut conn, &what, &events).await
    };
    match made {
        Ok(made) => {
            for (pending, made) in moves.into_iter().zip(made) {
                let _ = pending.reply.send(made.map_or(Outcome::NotMade, Outcome::Made));
            }
        }
        Err(error) if rolled_back(&error) => {
            tracing::warn!(%error, moves = moves.len(), "a statement of {} failed; each is made again under locks", M::KIND);
        }
        Err(error) => {
            tracing::warn!(%error, moves = moves.len(), "a statement of {} lost its connection; its outcome is unknown", M::KIND);
            db::suspect_idle_connections();
            for pending in moves {
                let _ = pending.reply.send(Outcome::Unknown(lost(&error)));
            }
        }
    }
}

/// Whether a failed statement certainly made nothing: the database answered it with an error
/// (the statement, its own transaction, was rolled back), or it failed before it was sent. A
/// connection that ended, or broke, after it was sent says nothing of the commit.
fn rolled_back(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Database(refusal) => !db::connection_lost(refusal.code().as_deref()),
        sqlx::Error::Encode(_)
        | sqlx::Error::Configuration(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed => true,
        _ => false,
    }
}

/// The error each of a lost statement's requests reports (sqlx's errors cannot be cloned).
fn lost(error: &sqlx::Error) -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(std::io::ErrorKind::ConnectionAborted, error.to_string()))
}
