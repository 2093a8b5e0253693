//! Moves made together. Unlocked placements, counters and acceptances ([`Access::Unlocked`]) are
//! handed to workers with connections of their own, one lane of workers per kind of move, and a
//! worker makes all the moves of its kind that are waiting when it is free in one statement:
//! one round trip, one commit and one plan for many moves. Each move keeps its own
//! compare-and-set, so a move that lost a race or found its bid past its deadline comes back
//! unmade, with nothing of it written, and its request makes it again under locks. Two moves on
//! one thread (one listing, for acceptances; one buyer's threads on a listing, for placements)
//! never share a statement; the later one waits for the next.
//!
//! A worker never waits to gather moves: under light load each statement carries one move, and
//! under heavy load the moves that arrive while a statement runs go together in the next. The
//! three lanes run side by side, so a counter never waits behind a statement of placements.
//!
//! [`Access::Unlocked`]: super::Access::Unlocked

use std::collections::HashSet;
use std::sync::Arc;

use futures::future::BoxFuture;
use sqlx::{PgConnection, PgPool};
use tokio::sync::{Mutex, mpsc, oneshot};
use uuid::Uuid;

use crate::db::negotiation::{self, AcceptMove, Accepted, CounterMove, Made, MoveEvent, PlaceMove};
use crate::db::{Bid, Thread};
use crate::events::NewEvent;

/// The most moves one statement makes.
const MAX_BATCH: usize = 64;

/// A move's outcome: `None` if it was not made (its compare-and-set failed, or its statement
/// did), and nothing of it was written.
type Reply<T> = oneshot::Sender<Option<Made<T>>>;

/// What a statement of moves gives back: each move's outcome, in order.
type Outcomes<'a, T> = BoxFuture<'a, Result<Vec<Option<Made<T>>>, sqlx::Error>>;

/// The queue a lane's workers take moves from.
type Queue<K> = Arc<Mutex<mpsc::UnboundedReceiver<Job<K, <K as Kind>::Made>>>>;

struct Job<M, T> {
    what: M,
    events: Vec<NewEvent>,
    reply: Reply<T>,
}

/// One kind of move: how its statement is made, and what two moves in one statement must not
/// share.
trait Kind: Clone + Send + Sync + 'static {
    type Made: Send + 'static;
    const NAME: &'static str;

    fn key(&self) -> (Uuid, Uuid);

    fn make<'a>(conn: &'a mut PgConnection, moves: &'a [Self], events: &'a [MoveEvent<'a>])
    -> Outcomes<'a, Self::Made>;
}

impl Kind for PlaceMove {
    type Made = (Bid, Thread);
    const NAME: &'static str = "placements";

    fn key(&self) -> (Uuid, Uuid) {
        (self.listing_id, self.opening.author_id)
    }

    fn make<'a>(
        conn: &'a mut PgConnection,
        moves: &'a [Self],
        events: &'a [MoveEvent<'a>],
    ) -> Outcomes<'a, Self::Made> {
        Box::pin(negotiation::place(conn, moves, events))
    }
}

impl Kind for CounterMove {
    type Made = (Bid, Thread);
    const NAME: &'static str = "counters";

    fn key(&self) -> (Uuid, Uuid) {
        (self.thread_id, Uuid::nil())
    }

    fn make<'a>(
        conn: &'a mut PgConnection,
        moves: &'a [Self],
        events: &'a [MoveEvent<'a>],
    ) -> Outcomes<'a, Self::Made> {
        Box::pin(negotiation::counter(conn, moves, events))
    }
}

impl Kind for AcceptMove {
    type Made = Accepted;
    const NAME: &'static str = "acceptances";

    fn key(&self) -> (Uuid, Uuid) {
        (self.listing_id, Uuid::nil())
    }

    fn make<'a>(
        conn: &'a mut PgConnection,
        moves: &'a [Self],
        events: &'a [MoveEvent<'a>],
    ) -> Outcomes<'a, Self::Made> {
        Box::pin(negotiation::accept(conn, moves, events))
    }
}

/// The queue of one kind of move, and its workers.
struct Lane<K: Kind> {
    jobs: mpsc::UnboundedSender<Job<K, K::Made>>,
}

impl<K: Kind> Clone for Lane<K> {
    fn clone(&self) -> Self {
        Lane { jobs: self.jobs.clone() }
    }
}

impl<K: Kind> Lane<K> {
    fn start(pool: &PgPool, workers: usize) -> Lane<K> {
        let (jobs, queue) = mpsc::unbounded_channel();
        let queue = Arc::new(Mutex::new(queue));
        for _ in 0..workers.max(1) {
            tokio::spawn(work::<K>(pool.clone(), queue.clone()));
        }
        Lane { jobs }
    }

    async fn make(&self, what: K, events: Vec<NewEvent>) -> Option<Made<K::Made>> {
        let (reply, answer) = oneshot::channel();
        self.jobs.send(Job { what, events, reply }).ok()?;
        answer.await.ok().flatten()
    }
}

/// Where unlocked moves are sent to be made; cheap to clone.
#[derive(Clone)]
pub struct Batcher {
    places: Lane<PlaceMove>,
    counters: Lane<CounterMove>,
    accepts: Lane<AcceptMove>,
}

impl Batcher {
    /// Starts `workers` workers for each kind of move, which make moves over `pool`'s
    /// connections (so the pool wants three times `workers`). The pool must be the workers'
    /// own: a request waiting for its move holds a connection of the server's. The workers stop
    /// when the last handle is dropped.
    pub fn start(pool: PgPool, workers: usize) -> Batcher {
        Batcher {
            places: Lane::start(&pool, workers),
            counters: Lane::start(&pool, workers),
            accepts: Lane::start(&pool, workers),
        }
    }

    /// Opens the thread with its first bid, with its event; `None` if it was not made.
    pub async fn place(&self, place: PlaceMove, events: Vec<NewEvent>) -> Option<Made<(Bid, Thread)>> {
        self.places.make(place, events).await
    }

    /// Makes the counter, with its events; `None` if it was not made.
    pub async fn counter(&self, counter: CounterMove, events: Vec<NewEvent>) -> Option<Made<(Bid, Thread)>> {
        self.counters.make(counter, events).await
    }

    /// Makes the acceptance, with its events; `None` if it was not made.
    pub async fn accept(&self, accept: AcceptMove, events: Vec<NewEvent>) -> Option<Made<Accepted>> {
        self.accepts.make(accept, events).await
    }
}

async fn work<K: Kind>(pool: PgPool, queue: Queue<K>) {
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
            let (round, later): (Vec<_>, Vec<_>) = jobs.into_iter().partition(|job| keys.insert(job.what.key()));
            jobs = later;
            make(&pool, round).await;
        }
    }
}

/// Makes one round of moves in one statement and hands each its outcome. If the statement fails
/// (or no connection can be had), none of its moves was made: each request makes its move again
/// under locks, which will say why if the database is out of reach.
async fn make<K: Kind>(pool: &PgPool, round: Vec<Job<K, K::Made>>) {
    let Ok(mut conn) = pool.acquire().await else { return };
    let moves: Vec<K> = round.iter().map(|job| job.what.clone()).collect();
    let made = {
        let events: Vec<MoveEvent> = round
            .iter()
            .enumerate()
            .flat_map(|(index, job)| job.events.iter().map(move |event| MoveEvent { index, event }))
            .collect();
        K::make(&mut conn, &moves, &events).await
    };
    match made {
        Ok(made) => {
            for (job, made) in round.into_iter().zip(made) {
                let _ = job.reply.send(made);
            }
        }
        Err(error) => {
            tracing::warn!(%error, moves = round.len(), "a statement of {} failed; each is made again under locks", K::NAME);
        }
    }
}
