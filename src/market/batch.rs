//! Moves made together. Unlocked placements, counters and acceptances ([`Access::Unlocked`]) are handed to a
//! few workers, each with a connection of its own, and every worker makes all the moves that
//! are waiting when it is free in one statement per kind of move: one round trip, one commit
//! and one plan for many moves. Each move keeps its own compare-and-set, so a move that lost a
//! race or found its bid past its deadline comes back unmade, with nothing of it written, and
//! its request makes it again under locks. Two moves on one thread (one listing, for
//! acceptances) never share a statement; the later one waits for the next.
//!
//! A worker never waits to gather moves: under light load each statement carries one move, and
//! under heavy load the moves that arrive while a statement runs go together in the next.
//!
//! [`Access::Unlocked`]: super::Access::Unlocked

use std::collections::HashSet;
use std::sync::Arc;

use sqlx::pool::PoolConnection;
use sqlx::{PgPool, Postgres};
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

enum Job {
    Place { place: PlaceMove, events: Vec<NewEvent>, reply: Reply<(Bid, Thread)> },
    Counter { counter: CounterMove, events: Vec<NewEvent>, reply: Reply<(Bid, Thread)> },
    Accept { accept: AcceptMove, events: Vec<NewEvent>, reply: Reply<Accepted> },
}

impl Job {
    /// What two moves in one round must not share: a thread, a listing that sells a unit, or a
    /// buyer's threads on a listing.
    fn key(&self) -> (Uuid, Uuid) {
        match self {
            Job::Place { place, .. } => (place.listing_id, place.opening.author_id),
            Job::Counter { counter, .. } => (counter.thread_id, Uuid::nil()),
            Job::Accept { accept, .. } => (accept.listing_id, Uuid::nil()),
        }
    }
}

/// Where unlocked moves are sent to be made; cheap to clone.
#[derive(Clone)]
pub struct Batcher {
    jobs: mpsc::UnboundedSender<Job>,
}

impl Batcher {
    /// Starts `workers` workers, which make moves over `pool`'s connections. The pool must be
    /// the workers' own: a request waiting for its move holds a connection of the server's.
    /// The workers stop when the last handle is dropped.
    pub fn start(pool: PgPool, workers: usize) -> Batcher {
        let (jobs, queue) = mpsc::unbounded_channel();
        let queue = Arc::new(Mutex::new(queue));
        for _ in 0..workers.max(1) {
            tokio::spawn(work(pool.clone(), queue.clone()));
        }
        Batcher { jobs }
    }

    /// Opens the thread with its first bid, with its event; `None` if it was not made.
    pub async fn place(&self, place: PlaceMove, events: Vec<NewEvent>) -> Option<Made<(Bid, Thread)>> {
        let (reply, answer) = oneshot::channel();
        self.send(Job::Place { place, events, reply }, answer).await
    }

    /// Makes the counter, with its events; `None` if it was not made.
    pub async fn counter(&self, counter: CounterMove, events: Vec<NewEvent>) -> Option<Made<(Bid, Thread)>> {
        let (reply, answer) = oneshot::channel();
        self.send(Job::Counter { counter, events, reply }, answer).await
    }

    /// Makes the acceptance, with its events; `None` if it was not made.
    pub async fn accept(&self, accept: AcceptMove, events: Vec<NewEvent>) -> Option<Made<Accepted>> {
        let (reply, answer) = oneshot::channel();
        self.send(Job::Accept { accept, events, reply }, answer).await
    }

    async fn send<T>(&self, job: Job, answer: oneshot::Receiver<Option<Made<T>>>) -> Option<Made<T>> {
        self.jobs.send(job).ok()?;
        answer.await.ok().flatten()
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
            // Moves that share a thread or listing with an earlier one wait for the next round.
            let mut keys = HashSet::new();
            let (round, later): (Vec<Job>, Vec<Job>) = jobs.into_iter().partition(|job| keys.insert(job.key()));
            jobs = later;
            make(&pool, round).await;
        }
    }
}

/// Makes one round of moves: the placements in one statement, the counters in another, the
/// acceptances in a third, the three side by side on connections of their own.
async fn make(pool: &PgPool, round: Vec<Job>) {
    let mut places = Vec::new();
    let mut counters = Vec::new();
    let mut accepts = Vec::new();
    for job in round {
        match job {
            Job::Place { place, events, reply } => places.push((place, events, reply)),
            Job::Counter { counter, events, reply } => counters.push((counter, events, reply)),
            Job::Accept { accept, events, reply } => accepts.push((accept, events, reply)),
        }
    }
    // Unanswered moves (their replies dropped, for want of a connection) are made again under
    // locks, which will say why the database cannot be reached.
    let places = async {
        let Some(mut conn) = connection(pool, &places).await else { return };
        let moves: Vec<PlaceMove> = places.iter().map(|(place, ..)| place.clone()).collect();
        let events = move_events(places.iter().map(|(_, events, _)| events));
        let made = negotiation::place(&mut conn, &moves, &events).await;
        answer(places, made, "placements");
    };
    let counters = async {
        let Some(mut conn) = connection(pool, &counters).await else { return };
        let moves: Vec<CounterMove> = counters.iter().map(|(counter, ..)| counter.clone()).collect();
        let events = move_events(counters.iter().map(|(_, events, _)| events));
        let made = negotiation::counter(&mut conn, &moves, &events).await;
        answer(counters, made, "counters");
    };
    let accepts = async {
        let Some(mut conn) = connection(pool, &accepts).await else { return };
        let moves: Vec<AcceptMove> = accepts.iter().map(|(accept, ..)| accept.clone()).collect();
        let events = move_events(accepts.iter().map(|(_, events, _)| events));
        let made = negotiation::accept(&mut conn, &moves, &events).await;
        answer(accepts, made, "acceptances");
    };
    futures::join!(places, counters, accepts);
}

/// A connection for a statement of `jobs`, if there are any.
async fn connection<T>(pool: &PgPool, jobs: &[T]) -> Option<PoolConnection<Postgres>> {
    if jobs.is_empty() {
        return None;
    }
    pool.acquire().await.ok()
}

fn move_events<'a>(moves: impl Iterator<Item = &'a Vec<NewEvent>>) -> Vec<MoveEvent<'a>> {
    moves.enumerate().flat_map(|(index, events)| events.iter().map(move |event| MoveEvent { index, event })).collect()
}

/// Hands each move its outcome. If the statement failed, none of its moves was made: each
/// request makes its move again under locks.
fn answer<M, T>(jobs: Vec<(M, Vec<NewEvent>, Reply<T>)>, made: Result<Vec<Option<Made<T>>>, sqlx::Error>, what: &str) {
    match made {
        Ok(made) => {
            for ((.., reply), made) in jobs.into_iter().zip(made) {
                let _ = reply.send(made);
            }
        }
        Err(error) => {
            tracing::warn!(%error, moves = jobs.len(), "a statement of {what} failed; each is made again under locks");
        }
    }
}
