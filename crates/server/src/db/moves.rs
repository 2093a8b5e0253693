//! The moves on bids, as statements: the reads a move decides on, and the statements that make
//! placements, counters and acceptances.
//!
//! Locks are always taken in one order: listing, then thread, then bid, and among rows of one
//! table in id order when a statement makes several moves. Bid actions that do not touch the
//! listing lock the thread first; every change of a bid is a compare-and-set on
//! `status = 'PENDING'`, so of two racing actions exactly one changes a row.
//!
//! Placements, counters and acceptances are each one statement ([`place`], [`counter`],
//! [`accept`]) that makes any number of independent moves of its kind, with their events: the
//! caller works out the rows each move will write (and so its events) from what it read, and
//! the statement writes exactly those, or nothing of a move whose compare-and-set fails.

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use sqlx::postgres::PgArguments;
use sqlx::query::QueryAs;
use sqlx::types::Json;
use sqlx::{FromRow, PgConnection, Postgres};
use uuid::Uuid;

use super::events::{self, EVENT_ROWS, EventArrays, NewEvent};
use super::idempotency::{AnswerArrays, MoveAnswer, answer_rows};
use super::listings::buyer_price_threads;
use super::plans::generic_plan;
use super::policies::policy_in_thread;
use super::rows::{BidContext, BidDeadline, bid_context_columns, bid_context_tables, party_of_thread};
use super::tasks::{self, Decided, NextRead, Requeue};
use super::text::Text;
use super::{Bid, Listing, Order, Thread};
use haggle_api::{self as api, OrderStatus};
use haggle_domain::bid::{ConcessionRule, Transition};
use haggle_domain::{BidStatus, Party, Reason, ThreadStatus, Tier};

/// The read a move decides on, of a bid the agent `$2` is party to.
macro_rules! bid_context_query {
    ($lock:literal) => {
        concat!(
            "SELECT ",
            bid_context_columns!(),
            " ",
            bid_context_tables!(),
            " WHERE b.id = $1 AND ",
            party_of_thread!("$2"),
            $lock
        )
    };
}

/// Locks the thread of a bid the agent is party to, and reads what an action on the bid needs.
pub async fn lock_bid_context(
    conn: &mut PgConnection,
    bid_id: Uuid,
    agent_id: Uuid,
) -> Result<Option<BidContext>, sqlx::Error> {
    // Built at run time: it splices a bid context's columns (`rows::bid_context_columns`), which
    // `read_bid_context` reads too.
    sqlx::query_as(bid_context_query!(" FOR UPDATE OF t")).bind(bid_id).bind(agent_id).fetch_optional(conn).await
}

/// Reads what an action on a bid the agent is party to needs, taking no lock: for a move made in
/// one statement, whose compare-and-set refuses it if anything it decided on has changed.
pub async fn read_bid_context(
    conn: &mut PgConnection,
    bid_id: Uuid,
    agent_id: Uuid,
) -> Result<Option<BidContext>, sqlx::Error> {
    // Built at run time, as `lock_bid_context` is.
    sqlx::query_as(bid_context_query!("")).bind(bid_id).bind(agent_id).fetch_optional(conn).await
}

/// The generic plans PostgreSQL makes for the reads a move decides on (unlocked, locking the
/// thread, locking the listing), as the move worker's connections run them (`EXPLAIN`'s text,
/// one plan each), for a test that checks they find the thread by its key.
pub async fn plans_of_bid_context_reads(conn: &mut PgConnection) -> Result<Vec<String>, sqlx::Error> {
    let mut plans = Vec::new();
    for statement in
        [bid_context_query!(""), bid_context_query!(" FOR UPDATE OF t"), bid_context_query!(" FOR UPDATE OF l")]
    {
        plans.push(generic_plan(&mut *conn, statement).await?);
    }
    Ok(plans)
}

/// Locks the listing of a bid the agent is party to and reads what an action on the bid needs,
/// in one statement, for a caller whose transaction holds the bid's thread already (the
/// executor, accepting after a counter it made): the listing is the one lock it takes.
pub async fn lock_listing_reading_bid(
    conn: &mut PgConnection,
    bid_id: Uuid,
    agent_id: Uuid,
) -> Result<Option<BidContext>, sqlx::Error> {
    // Built at run time, as `lock_bid_context` is.
    sqlx::query_as(bid_context_query!(" FOR UPDATE OF l")).bind(bid_id).bind(agent_id).fetch_optional(conn).await
}

/// Locks the listing of a bid the agent is party to; taken before the thread when an action
/// may change the listing (the action then reads the listing with the bid). `false` if the agent
/// cannot see the bid.
pub async fn lock_listing_of_bid(conn: &mut PgConnection, bid_id: Uuid, agent_id: Uuid) -> Result<bool, sqlx::Error> {
    let locked = sqlx::query!(
        "SELECT 1 AS locked FROM listings l
         WHERE l.id = (SELECT t.listing_id FROM bids b JOIN threads t ON t.id = b.thread_id
                       WHERE b.id = $1 AND $2 IN (t.buyer_id, t.seller_id))
         FOR UPDATE",
        bid_id,
        agent_id,
    )
    .fetch_optional(conn)
    .await?;
    Ok(locked.is_some())
}

/// Locks a thread row, for a caller that is about to change one of its bids without having
/// read it through [`lock_bid_context`].
pub async fn lock_thread(conn: &mut PgConnection, thread_id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query!("SELECT 1 AS locked FROM threads WHERE id = $1 FOR UPDATE", thread_id)
        .fetch_optional(conn)
        .await
        .map(drop)
}

/// Has the rest of the transaction run its statements on their generic plans. The statements
/// of moves are planned the same whatever their arrays hold, and planning them costs more than
/// running them for one move; without this, PostgreSQL plans them again at every call (their
/// generic plan's estimates, made for arrays of unknown length, never win against one made
/// for the move at hand). The batcher's connections run on generic plans always.
pub async fn plan_generically(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query!("SET LOCAL plan_cache_mode = force_generic_plan").execute(conn).await.map(drop)
}

/// The current status of a bid, to report why a compare-and-set found nothing to change.
pub async fn stored_status(conn: &mut PgConnection, bid_id: Uuid) -> Result<BidDeadline, sqlx::Error> {
    sqlx::query_as!(
        BidDeadline,
        r#"SELECT id AS bid_id, status AS "status: Text<BidStatus>", expires_at, clock_timestamp() AS "db_now!"
           FROM bids WHERE id = $1"#,
        bid_id,
    )
    .fetch_one(conn)
    .await
}

/// The last part of a statement that makes moves: it writes the events (bound by
/// [`bind_events`], `$1` to `$10`) of the moves that were made (`made`: a condition on
/// `e.move`, the index of an event's move) as [`events::write_events`] does, and queues the new
/// pending bids (the CTE `new_pending`) for their responders' policies ([`tasks::queue_tasks`]).
/// The statement's SELECT must read `announced`, and reads `deliveries`.
fn move_events(made: &str) -> String {
    move_events_with(made, &tasks::queue_tasks("new_pending", Requeue::Never))
}

/// [`move_events`], with the tasks queued by `queue` (the CTEs `queued` and `announced`).
fn move_events_with(made: &str, queue: &str) -> String {
    let rows =
        format!("(SELECT e.* FROM (SELECT e.*, ($10::int[])[e.n::int] AS move FROM {EVENT_ROWS}) e WHERE {made}) e");
    format!("{}, {}", events::write_events(&rows), queue)
}

/// An event of the move at `index` in a statement's batch.
pub struct MoveEvent<'a> {
    pub index: usize,
    pub event: &'a NewEvent,
}

/// A statement's moves' events as it binds them, `$1` to `$10`: the events' fields
/// ([`EventArrays`]) and the index of each one's move.
fn bind_events<'a, O>(
    query: QueryAs<'a, Postgres, O, PgArguments>,
    events: &'a [MoveEvent<'a>],
) -> QueryAs<'a, Postgres, O, PgArguments> {
    let moves: Vec<i32> = events.iter().map(|event| index(event.index)).collect();
    events.iter().map(|event| event.event).collect::<EventArrays>().bind(query).bind(moves)
}

/// A move's index in its batch, as a statement binds it (a batch is far shorter than
/// `i32::MAX`).
fn index(index: usize) -> i32 {
    i32::try_from(index).expect("a batch of moves fits an array")
}

/// One array of a batch's moves: the field `field` of each.
fn column<'m, M, T>(moves: &'m [M], field: impl Fn(&'m M) -> T) -> Vec<T> {
    moves.iter().map(field).collect()
}

/// A bid's terms as a statement binds them: none stored as SQL NULL, as JSON `null` is.
fn terms(bid: &Bid) -> Option<&serde_json::Value> {
    bid.terms.as_ref().filter(|terms| !terms.is_null())
}

/// What a transition of the state machine writes to the bid it ends and to its thread, as a
/// statement binds it: the statements take these from the domain's [`Transition`] rather than
/// spelling them out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Effect {
    pub bid_status: BidStatus,
    pub reason: Reason,
    pub thread_status: ThreadStatus,
}

impl From<Transition> for Effect {
    fn from(transition: Transition) -> Effect {
        Effect {
            bid_status: transition.bid_status(),
            reason: transition.reason(),
            thread_status: transition.thread_status(),
        }
    }
}

/// A counter to make: the pending bid it answers, what the counter does to it (the domain's
/// [`Transition::Counter`]), and the counter's row as worked out at `now`, the time it was
/// decided at (written as its timestamps).
#[derive(Debug, Clone)]
pub struct CounterMove {
    pub thread_id: Uuid,
    pub bid_id: Uuid,
    pub now: DateTime<Utc>,
    pub effect: Effect,
    pub counter: Bid,
    /// The mediator's suggestion, when this counter deadlocked the thread or renewed the
    /// suggestion of a thread marked before: the statement marks the thread with it (the time
    /// of the mark kept from the first), and with the parties whose agreement stands for it.
    pub mediation: Option<Mediation>,
    /// For a counter decided without locks, what else it was decided on, which must not have
    /// changed: the statement makes it only if so.
    pub decided_on: Option<DecidedOn>,
    /// A keyed request's answer, stored by the statement with the move.
    pub answer: Option<MoveAnswer>,
}

/// A suggestion a counter writes on its thread, and the parties agreed to it.
#[derive(Debug, Clone)]
pub struct Mediation {
    pub suggestion: api::Suggestion,
    pub agreed: Vec<Party>,
}

/// What a counter decided without locks read of its thread and listing besides the bid: the
/// thread as last changed, and the listing's terms a counter depends on (its round limit, its
/// bids' lifetime, the ask, the seller's first position, and its concession rule, which bounds
/// the amount). The rest of a listing a counter does not use, and its issues never change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecidedOn {
    pub thread_updated_at: DateTime<Utc>,
    pub max_rounds: i32,
    pub bid_ttl_seconds: i32,
    pub ask_amount: i64,
    pub concession_rule: ConcessionRule,
}

impl DecidedOn {
    pub fn of(context: &BidContext) -> DecidedOn {
        DecidedOn {
            thread_updated_at: context.thread.updated_at,
            max_rounds: context.listing.max_rounds,
            bid_ttl_seconds: context.listing.bid_ttl_seconds,
            ask_amount: context.listing.ask_amount,
            concession_rule: context.listing.concession_rule,
        }
    }
}

/// Each move's outcome, in the order of the moves, from those that were made (by index).
fn by_move<T>(moves: usize, made: impl IntoIterator<Item = (i32, Made<T>)>) -> Vec<Option<Made<T>>> {
    let mut outcomes: Vec<Option<Made<T>>> = (0..moves).map(|_| None).collect();
    for (index, made) in made {
        if let Some(slot) = usize::try_from(index).ok().and_then(|index| outcomes.get_mut(index)) {
            *slot = Some(made);
        }
    }
    outcomes
}

/// A move made: its rows as stored, whether a task was queued for a policy, and whether its
/// statement queued webhook deliveries.
#[derive(Debug)]
pub struct Made<T> {
    pub rows: T,
    pub queued: bool,
    pub delivering: bool,
}

/// A thread to open with the buyer's first bid, worked out at `now` (the time it was decided
/// at, written as its timestamps) from the listing as it was when last updated at
/// `listing_updated_at`.
#[derive(Debug, Clone)]
pub struct PlaceMove {
    pub listing_id: Uuid,
    pub listing_updated_at: DateTime<Utc>,
    pub seller_id: Uuid,
    pub max_threads_per_buyer: i32,
    pub now: DateTime<Utc>,
    /// The new thread's status.
    pub thread_status: ThreadStatus,
    pub opening: Bid,
    /// A keyed request's answer, stored by the statement with the move.
    pub answer: Option<MoveAnswer>,
}

/// What a statement that made moves of a bid and its thread gives back of each ([`MadeRow`]),
/// from its CTEs `bid`, `thread`, `queued`, `announced` and `deliveries`.
const MADE_COLUMNS: &str = "row_to_json(bid) AS bid, row_to_json(thread) AS thread,
            EXISTS (SELECT 1 FROM queued q WHERE q.bid_id = bid.id) AS queued,
            (SELECT count(*) FROM announced) AS announced,
            (SELECT count(*) FROM deliveries) > 0 AS delivering";

/// The statement of [`place`]. Built at run time: it splices the rule that queues tasks
/// (`move_events`) and the buyer's threads on a listing (`listings::buyer_price_threads`).
static PLACE: LazyLock<String> = LazyLock::new(|| {
    [
        "WITH input AS (
         SELECT (i.n - 1)::int AS index, i.*
         FROM unnest($11::uuid[], $12::timestamptz[], $13::uuid[], $14::int[], $15::timestamptz[], $16::text[],
                     $17::uuid[], $18::uuid[], $19::text[], $20::uuid[], $21::bigint[], $22::text[], $23::text[],
                     $24::jsonb[], $25::boolean[], $26::text[], $27::int[], $28::timestamptz[])
              WITH ORDINALITY AS i(listing_id, listing_updated_at, seller_id, max_threads_per_buyer, now,
                                   thread_status, id, thread_id, author, author_id, amount, currency, message,
                                   terms, final, status, round, expires_at, n)
     ), locked_listing AS (
         SELECT i.index FROM (SELECT index, listing_id, listing_updated_at FROM input ORDER BY listing_id) i
         CROSS JOIN LATERAL (
             SELECT id FROM listings
             WHERE id = i.listing_id AND status = 'ACTIVE' AND updated_at = i.listing_updated_at
             FOR SHARE) l
     ), allowed AS (
         SELECT i.* FROM input i
         WHERE i.index IN (SELECT index FROM locked_listing)
           AND (SELECT count(*) FROM threads t WHERE ",
        buyer_price_threads!("i.listing_id", "i.author_id"),
        ") < i.max_threads_per_buyer
     ), thread AS (
         INSERT INTO threads (id, listing_id, buyer_id, seller_id, status, rounds, last_bid_id, expires_at,
                              created_at, updated_at)
         SELECT thread_id, listing_id, author_id, seller_id, thread_status, round, id, expires_at, now, now
         FROM allowed
         ON CONFLICT (listing_id, buyer_id) WHERE status = 'ACTIVE' AND kind = 'price' DO NOTHING
         RETURNING *
     ), bid AS (
         INSERT INTO bids (id, thread_id, author, author_id, amount, currency, message, terms, final, status, round,
                           expires_at, created_at, updated_at)
         SELECT i.id, thread.id, i.author, i.author_id, i.amount, i.currency, i.message, i.terms, i.final, i.status,
                i.round, i.expires_at, i.now, i.now
         FROM thread JOIN input i ON i.thread_id = thread.id
         RETURNING *
     ), new_pending AS (
         SELECT bid.id AS bid_id, bid.thread_id, thread.listing_id, thread.seller_id AS agent_id, 'seller' AS role
         FROM bid JOIN thread ON thread.id = bid.thread_id
     ), ",
        &answer_rows(29, "a.move IN (SELECT i.index FROM thread JOIN input i ON i.thread_id = thread.id)"),
        &move_events("e.move IN (SELECT i.index FROM thread JOIN input i ON i.thread_id = thread.id)"),
        "
     SELECT i.index, ",
        MADE_COLUMNS,
        " FROM bid JOIN thread ON thread.id = bid.thread_id JOIN input i ON i.thread_id = thread.id",
    ]
    .concat()
});

/// The generic plan PostgreSQL makes for [`place`] (`EXPLAIN`'s text), for a test that checks
/// it counts a buyer's threads on a listing through `threads_listing_buyer_idx`.
pub async fn plan_of_place(conn: &mut PgConnection) -> Result<String, sqlx::Error> {
    generic_plan(conn, &PLACE).await
}

/// Opens threads with their buyers' first bids in one statement, each for its own buyer and
/// listing: locks the listings in share mode (each still ACTIVE and unchanged since the move
/// was decided), checks each buyer's count of threads on the listing against its limit, inserts
/// each thread unless its buyer already has an ACTIVE one there, and its opening bid, and writes
/// the events of the threads opened with their tasks for policies. Each move comes back `None`
/// if it was not made (a concurrent placement by the same buyer came first, the listing changed,
/// or the limit was reached); then nothing of it is written.
pub async fn place(
    conn: &mut PgConnection,
    moves: &[PlaceMove],
    events: &[MoveEvent<'_>],
) -> Result<Vec<Option<Made<(Bid, Thread)>>>, sqlx::Error> {
    let query = bind_events(sqlx::query_as(PLACE.as_str()), events)
        .bind(column(moves, |m| m.listing_id))
        .bind(column(moves, |m| m.listing_updated_at))
        .bind(column(moves, |m| m.seller_id))
        .bind(column(moves, |m| m.max_threads_per_buyer))
        .bind(column(moves, |m| m.now))
        .bind(column(moves, |m| m.thread_status.as_str()))
        .bind(column(moves, |m| m.opening.id))
        .bind(column(moves, |m| m.opening.thread_id))
        .bind(column(moves, |m| m.opening.author.as_str()))
        .bind(column(moves, |m| m.opening.author_id))
        .bind(column(moves, |m| m.opening.amount))
        .bind(column(moves, |m| m.opening.currency.as_str()))
        .bind(column(moves, |m| m.opening.message.as_deref()))
        .bind(column(moves, |m| terms(&m.opening)))
        .bind(column(moves, |m| m.opening.is_final))
        .bind(column(moves, |m| m.opening.status.as_str()))
        .bind(column(moves, |m| m.opening.round))
        .bind(column(moves, |m| m.opening.expires_at));
    let query = moves.iter().map(|m| m.answer.as_ref()).collect::<AnswerArrays>().bind(query);
    let rows: Vec<MadeRow> = query.fetch_all(conn).await?;
    Ok(by_move(moves.len(), rows.into_iter().map(MadeRow::made)))
}

/// A row of a statement that made moves of a bid and its thread.
#[derive(Debug, FromRow)]
struct MadeRow {
    index: i32,
    bid: Json<Bid>,
    thread: Json<Thread>,
    queued: bool,
    delivering: bool,
}

impl MadeRow {
    fn made(self) -> (i32, Made<(Bid, Thread)>) {
        (self.index, Made { rows: (self.bid.0, self.thread.0), queued: self.queued, delivering: self.delivering })
    }
}

/// Makes counters in one statement, each on its own thread: locks the threads (in id order),
/// marks each answered bid COUNTERED (a compare-and-set on its status and deadline), adds its
/// counter as the thread's new pending bid, moves the thread on (marking it deadlocked, or
/// renewing its suggestion, when the move says so), and writes the events of the
/// counters made with their tasks for policies. Each move comes back `None` if its
/// compare-and-set failed (the bid no longer PENDING, past its deadline, or its thread no longer
/// ACTIVE, or, for a move decided without locks, its thread or its listing's terms changed
/// since: [`DecidedOn`]); then nothing of it is written.
pub async fn counter(
    conn: &mut PgConnection,
    moves: &[CounterMove],
    events: &[MoveEvent<'_>],
) -> Result<Vec<Option<Made<(Bid, Thread)>>>, sqlx::Error> {
    // Built at run time: it splices the rule that queues tasks (`move_events`).
    static STATEMENT: LazyLock<String> = LazyLock::new(|| {
        [
            COUNTER_MOVES,
            &answer_rows(34, "a.move IN (SELECT index FROM answered)"),
            &move_events("e.move IN (SELECT index FROM answered)"),
            "
         SELECT a.index, ",
            MADE_COLUMNS,
            " FROM answered a JOIN bid ON bid.parent_bid_id = a.id JOIN thread ON thread.id = bid.thread_id",
        ]
        .concat()
    });
    let rows: Vec<MadeRow> = bind_counters(sqlx::query_as(STATEMENT.as_str()), moves, events).fetch_all(conn).await?;
    Ok(by_move(moves.len(), rows.into_iter().map(MadeRow::made)))
}

/// The CTEs of a counters' statement up to the rows of the new pending bids (`new_pending`),
/// each move's fields bound as an array, `$11` to `$33` ([`bind_counters`]).
const COUNTER_MOVES: &str = "WITH input AS (
             SELECT (i.n - 1)::int AS index, i.*
             FROM unnest($11::uuid[], $12::uuid[], $13::timestamptz[], $14::text[], $15::text[], $16::jsonb[],
                         $17::timestamptz[], $18::int[], $19::int[], $20::bigint[], $21::uuid[], $22::text[],
                         $23::uuid[], $24::bigint[], $25::text[], $26::text[], $27::jsonb[], $28::boolean[],
                         $29::text[], $30::int[], $31::timestamptz[], $32::text[], $33::jsonb[])
                  WITH ORDINALITY AS i(thread_id, bid_id, now, answered_status, answered_reason, new_mediation,
                                       thread_updated_at, max_rounds, bid_ttl_seconds, ask_amount, id, author,
                                       author_id, amount, currency, message, terms, final, status, round,
                                       expires_at, concession_rule, new_agreed, n)
         ), locked AS (
             SELECT t.id
             FROM (SELECT thread_id, thread_updated_at, max_rounds, bid_ttl_seconds, ask_amount, concession_rule
                   FROM input ORDER BY thread_id) i
             CROSS JOIN LATERAL (
                 SELECT id, listing_id FROM threads
                 WHERE id = i.thread_id AND status = 'ACTIVE'
                   AND (i.thread_updated_at IS NULL OR updated_at = i.thread_updated_at)
                 FOR UPDATE) t
             WHERE i.max_rounds IS NULL
                OR EXISTS (SELECT 1 FROM listings l
                           WHERE l.id = t.listing_id AND l.max_rounds = i.max_rounds
                             AND l.bid_ttl_seconds = i.bid_ttl_seconds AND l.ask_amount = i.ask_amount
                             AND l.concession_rule = i.concession_rule)
         ), answered AS (
             UPDATE bids b SET status = i.answered_status, reason = i.answered_reason, responded_at = i.now,
                    updated_at = i.now
             FROM input i
             WHERE b.id = i.bid_id AND b.thread_id = i.thread_id AND i.thread_id IN (SELECT id FROM locked)
               AND b.status = 'PENDING' AND b.expires_at > clock_timestamp()
             RETURNING b.id, b.thread_id, i.index
         ), bid AS (
             INSERT INTO bids (id, thread_id, author, author_id, amount, currency, message, terms, final, status,
                               parent_bid_id, round, expires_at, created_at, updated_at)
             SELECT i.id, a.thread_id, i.author, i.author_id, i.amount, i.currency, i.message, i.terms, i.final,
                    i.status, a.id, i.round, i.expires_at, i.now, i.now
             FROM answered a JOIN input i ON i.index = a.index
             RETURNING *
         ), thread AS (
             UPDATE threads SET rounds = bid.round, last_bid_id = bid.id, expires_at = bid.expires_at,
                    updated_at = bid.updated_at,
                    deadlock_at = CASE WHEN i.new_mediation IS NULL THEN threads.deadlock_at
                                       ELSE COALESCE(threads.deadlock_at, bid.updated_at) END,
                    mediation = COALESCE(i.new_mediation, threads.mediation),
                    mediation_agreed = CASE WHEN i.new_mediation IS NULL THEN threads.mediation_agreed
                                            ELSE ARRAY(SELECT jsonb_array_elements_text(i.new_agreed)) END
             FROM bid JOIN input i ON i.id = bid.id WHERE threads.id = bid.thread_id
             RETURNING threads.*
         ), new_pending AS (
             SELECT bid.id AS bid_id, bid.thread_id, thread.listing_id,
                    CASE bid.author WHEN 'buyer' THEN thread.seller_id ELSE thread.buyer_id END AS agent_id,
                    CASE bid.author WHEN 'buyer' THEN 'seller' ELSE 'buyer' END AS role
             FROM bid JOIN thread ON thread.id = bid.thread_id
         ), ";

/// Binds the columns of each move's new bid that the counters' statements take as arrays, eight
/// parameters in this order: its id, author, author's id, amount, currency, message, terms and
/// whether it is final.
fn bind_new_bids<'a, O>(
    query: QueryAs<'a, Postgres, O, PgArguments>,
    moves: &'a [CounterMove],
) -> QueryAs<'a, Postgres, O, PgArguments> {
    query
        .bind(column(moves, |m| m.counter.id))
        .bind(column(moves, |m| m.counter.author.as_str()))
        .bind(column(moves, |m| m.counter.author_id))
        .bind(column(moves, |m| m.counter.amount))
        .bind(column(moves, |m| m.counter.currency.as_str()))
        .bind(column(moves, |m| m.counter.message.as_deref()))
        .bind(column(moves, |m| terms(&m.counter)))
        .bind(column(moves, |m| m.counter.is_final))
}

/// Binds a counters' statement's parameters: its events (`$1` to `$10`), its moves (`$11` to
/// `$33`) and their keyed answers (`$34` to `$39`).
fn bind_counters<'a, O>(
    query: QueryAs<'a, Postgres, O, PgArguments>,
    moves: &'a [CounterMove],
    events: &'a [MoveEvent<'a>],
) -> QueryAs<'a, Postgres, O, PgArguments> {
    let query = bind_events(query, events)
        .bind(column(moves, |m| m.thread_id))
        .bind(column(moves, |m| m.bid_id))
        .bind(column(moves, |m| m.now))
        .bind(column(moves, |m| m.effect.bid_status.as_str()))
        .bind(column(moves, |m| m.effect.reason.as_str()))
        .bind(column(moves, |m| m.mediation.as_ref().map(|mediation| Json(&mediation.suggestion))))
        .bind(column(moves, |m| m.decided_on.map(|on| on.thread_updated_at)))
        .bind(column(moves, |m| m.decided_on.map(|on| on.max_rounds)))
        .bind(column(moves, |m| m.decided_on.map(|on| on.bid_ttl_seconds)))
        .bind(column(moves, |m| m.decided_on.map(|on| on.ask_amount)));
    let query = bind_new_bids(query, moves)
        .bind(column(moves, |m| m.counter.status.as_str()))
        .bind(column(moves, |m| m.counter.round))
        .bind(column(moves, |m| m.counter.expires_at))
        .bind(column(moves, |m| m.decided_on.map(|on| on.concession_rule.as_str())))
        .bind(column(moves, |m| m.mediation.as_ref().map(|mediation| Json(&mediation.agreed))));
    moves.iter().map(|m| m.answer.as_ref()).collect::<AnswerArrays>().bind(query)
}

/// What [`counter_chained`] gives back: the counter made, and if the other side's policy
/// covers it, what the decision on it reads.
#[derive(Debug, FromRow)]
struct ChainedRow {
    bid: Json<Bid>,
    thread: Json<Thread>,
    delivering: bool,
    next_agent_id: Option<Uuid>,
    agent_tier: Option<Text<Tier>>,
    agent_suspended: bool,
    agent_approval_rules: Option<bool>,
    buyer_tier: Text<Tier>,
    auto_counters: i64,
    policy: Option<Json<serde_json::Value>>,
    listing: Json<Listing>,
    db_now: DateTime<Utc>,
}

/// Makes one counter decided by a policy under locks, as [`counter`] does, and in the same
/// statement records the decision that made it (`decided`, by the policy of the counter's
/// author) and, if the other side has a policy too, queues its task taken (by the caller's
/// transaction, which decides it next) and reads what that decision reads ([`NextRead`]): a
/// chained move of the executor in one statement. `None` if the counter's compare-and-set
/// failed; then nothing is written, the decision neither. The read is what a statement after
/// this one would read (the caller holds the thread's lock, and the rows the counter writes
/// come back from it), except the count of the other side's decisions, which this statement's
/// decision, its author's, does not change.
pub async fn counter_chained(
    conn: &mut PgConnection,
    counter: &CounterMove,
    decided: Decided<'_>,
) -> Result<Option<(Made<(Bid, Thread)>, Option<NextRead>)>, sqlx::Error> {
    // Built at run time: it splices a counters' statement (`COUNTER_MOVES`, `answer_rows`,
    // `move_events_with`), which `counter` makes too, and the columns of a policy
    // (`policies::policy_in_thread`).
    static STATEMENT: LazyLock<String> = LazyLock::new(|| {
        [
            COUNTER_MOVES,
            &answer_rows(34, "a.move IN (SELECT index FROM answered)"),
            &move_events_with("e.move IN (SELECT index FROM answered)", &tasks::take_queued_tasks("new_pending")),
            ", decided AS (
             INSERT INTO auto_decisions (bid_id, thread_id, agent_id, action, reason, rationale, counter_bid_id)
             SELECT bid.parent_bid_id, bid.thread_id, bid.author_id, $40, $41, $42, bid.id FROM bid
         )
         SELECT row_to_json(bid) AS bid, row_to_json(t) AS thread,
                (SELECT count(*) FROM announced) AS announced,
                (SELECT count(*) FROM deliveries) > 0 AS delivering,
                q.agent_id AS next_agent_id, me.tier AS agent_tier, me.suspended_at IS NOT NULL AS agent_suspended,
                me.approval_rules AS agent_approval_rules, buyer.tier AS buyer_tier, row_to_json(l) AS listing,
                clock_timestamp() AS db_now, ",
            policy_in_thread!("q.agent_id", "CASE WHEN t.seller_id = q.agent_id THEN 'seller' ELSE 'buyer' END"),
            "
         FROM answered a JOIN bid ON bid.parent_bid_id = a.id JOIN thread t ON t.id = bid.thread_id
         JOIN listings l ON l.id = t.listing_id
         JOIN agents buyer ON buyer.id = t.buyer_id
         LEFT JOIN queued q ON q.bid_id = bid.id
         LEFT JOIN agents me ON me.id = q.agent_id",
        ]
        .concat()
    });
    let moves = std::slice::from_ref(counter);
    let row: Option<ChainedRow> = bind_counters(sqlx::query_as(STATEMENT.as_str()), moves, &[])
        .bind(decided.action)
        .bind(decided.reason)
        .bind(decided.rationale)
        .fetch_optional(conn)
        .await?;
    let Some(row) = row else { return Ok(None) };
    let next = match (row.next_agent_id, row.agent_tier) {
        (Some(agent_id), Some(Text(agent_tier))) => Some(NextRead {
            agent_id,
            agent_tier,
            agent_suspended: row.agent_suspended,
            agent_approval_rules: row.agent_approval_rules.unwrap_or(false),
            buyer_tier: row.buyer_tier.0,
            auto_counters: row.auto_counters,
            policy: row.policy,
            listing: row.listing.0,
            db_now: row.db_now,
        }),
        _ => None,
    };
    // The task taken is the transaction's own: nobody needs waking for it.
    let made = Made { rows: (row.bid.0, row.thread.0), queued: false, delivering: row.delivering };
    Ok(Some((made, next)))
}

/// An acceptance to make: the pending bid, its thread and listing, what accepting does to them
/// (the domain's [`Transition::Accept`]), the new order's id and status, how many units the
/// listing must still have, and `now`, the time it was decided at.
#[derive(Debug, Clone)]
pub struct AcceptMove {
    pub listing_id: Uuid,
    pub thread_id: Uuid,
    pub bid_id: Uuid,
    pub effect: Effect,
    pub order_id: Uuid,
    pub order_status: OrderStatus,
    pub min_available: i32,
    pub now: DateTime<Utc>,
    /// For an acceptance decided without locks, the thread as last changed when it was decided:
    /// the statement makes it only if the thread is unchanged.
    pub thread_updated_at: Option<DateTime<Utc>>,
    /// A keyed request's answer, stored by the statement with the move.
    pub answer: Option<MoveAnswer>,
}

#[derive(Debug, FromRow)]
struct AcceptedRow {
    index: i32,
    bid: Json<Bid>,
    thread: Json<Thread>,
    order: Json<Order>,
    listing: Json<Listing>,
    delivering: bool,
}

pub struct Accepted {
    pub bid: Bid,
    pub thread: Thread,
    pub order: Order,
    /// The listing with one unit fewer.
    pub listing: Listing,
}

/// Makes acceptances in one statement, each on its own listing: locks the listings (each ACTIVE
/// with at least its move's `min_available` units) and then the threads, in id order, marks
/// each bid and thread ACCEPTED (a compare-and-set on the bid's status and deadline), creates
/// the order at the bid's amount and terms, takes one unit off the listing (SOLD at zero), and
/// writes the events of the acceptances made. Each move comes back `None` if its
/// compare-and-set (for one decided without locks, its thread also unchanged since) or its
/// listing's condition failed; then nothing of it is written.
pub async fn accept(
    conn: &mut PgConnection,
    moves: &[AcceptMove],
    events: &[MoveEvent<'_>],
) -> Result<Vec<Option<Made<Accepted>>>, sqlx::Error> {
    // Built at run time: it writes its events as the other moves do (`move_events`).
    static STATEMENT: LazyLock<String> = LazyLock::new(|| {
        [r#"WITH input AS (
             SELECT (i.n - 1)::int AS index, i.*
             FROM unnest($11::uuid[], $12::uuid[], $13::uuid[], $14::text[], $15::text[], $16::text[], $17::uuid[],
                         $18::text[], $19::int[], $20::timestamptz[], $21::timestamptz[])
                  WITH ORDINALITY AS i(listing_id, thread_id, bid_id, bid_status, reason, thread_status, order_id,
                                       order_status, min_available, now, thread_updated_at, n)
         ), locked_listing AS (
             SELECT l.id FROM (SELECT listing_id, min_available FROM input ORDER BY listing_id) i
             CROSS JOIN LATERAL (
                 SELECT id FROM listings
                 WHERE id = i.listing_id AND status = 'ACTIVE' AND quantity_available >= i.min_available
                 FOR UPDATE) l
         ), locked AS (
             SELECT t.id
             FROM (SELECT thread_id, thread_updated_at FROM input WHERE listing_id IN (SELECT id FROM locked_listing)
                   ORDER BY thread_id) i
             CROSS JOIN LATERAL (
                 SELECT id FROM threads
                 WHERE id = i.thread_id AND status = 'ACTIVE'
                   AND (i.thread_updated_at IS NULL OR updated_at = i.thread_updated_at)
                 FOR UPDATE) t
         ), bid AS (
             UPDATE bids b SET status = i.bid_status, reason = i.reason, responded_at = i.now, updated_at = i.now
             FROM input i
             WHERE b.id = i.bid_id AND b.thread_id = i.thread_id AND i.thread_id IN (SELECT id FROM locked)
               AND b.status = 'PENDING' AND b.expires_at > clock_timestamp()
             RETURNING b.*
         ), thread AS (
             UPDATE threads SET status = i.thread_status, closed_reason = i.reason, expires_at = NULL,
                    updated_at = bid.updated_at
             FROM bid JOIN input i ON i.bid_id = bid.id WHERE threads.id = bid.thread_id
             RETURNING threads.*
         ), ordered AS (
             INSERT INTO orders (id, listing_id, thread_id, bid_id, buyer_id, seller_id, amount, currency, terms, status,
                                 created_at, updated_at)
             SELECT i.order_id, thread.listing_id, thread.id, bid.id, thread.buyer_id, thread.seller_id, bid.amount,
                    bid.currency, bid.terms, i.order_status, i.now, i.now
             FROM bid JOIN thread ON thread.id = bid.thread_id JOIN input i ON i.bid_id = bid.id
             RETURNING *
         ), listing AS (
             UPDATE listings SET quantity_available = listings.quantity_available - 1,
                    status = CASE WHEN listings.quantity_available = 1 THEN 'SOLD' ELSE listings.status END,
                    updated_at = ordered.created_at
             FROM ordered WHERE listings.id = ordered.listing_id
             RETURNING listings.*
         ), new_pending AS (
             SELECT NULL::uuid AS bid_id, NULL::uuid AS thread_id, NULL::uuid AS listing_id, NULL::uuid AS agent_id,
                    NULL::text AS role
             WHERE false
         ), "#,
         &answer_rows(22, "a.move IN (SELECT i.index FROM bid JOIN input i ON i.bid_id = bid.id)"),
         &move_events("e.move IN (SELECT i.index FROM bid JOIN input i ON i.bid_id = bid.id)"), r#"
         SELECT i.index, row_to_json(bid) AS bid, row_to_json(thread) AS thread, row_to_json(ordered) AS "order",
                row_to_json(listing) AS listing, (SELECT count(*) FROM announced) AS announced,
                (SELECT count(*) FROM deliveries) > 0 AS delivering
         FROM bid JOIN input i ON i.bid_id = bid.id JOIN thread ON thread.id = bid.thread_id
         JOIN ordered ON ordered.bid_id = bid.id JOIN listing ON listing.id = ordered.listing_id"#].concat()
    });
    let query = bind_events(sqlx::query_as(STATEMENT.as_str()), events)
        .bind(column(moves, |m| m.listing_id))
        .bind(column(moves, |m| m.thread_id))
        .bind(column(moves, |m| m.bid_id))
        .bind(column(moves, |m| m.effect.bid_status.as_str()))
        .bind(column(moves, |m| m.effect.reason.as_str()))
        .bind(column(moves, |m| m.effect.thread_status.as_str()))
        .bind(column(moves, |m| m.order_id))
        .bind(column(moves, |m| m.order_status.as_str()))
        .bind(column(moves, |m| m.min_available))
        .bind(column(moves, |m| m.now))
        .bind(column(moves, |m| m.thread_updated_at));
    let query = moves.iter().map(|m| m.answer.as_ref()).collect::<AnswerArrays>().bind(query);
    let rows: Vec<AcceptedRow> = query.fetch_all(conn).await?;
    Ok(by_move(
        moves.len(),
        rows.into_iter().map(|row| {
            let rows = Accepted { bid: row.bid.0, thread: row.thread.0, order: row.order.0, listing: row.listing.0 };
            (row.index, Made { rows, queued: false, delivering: row.delivering })
        }),
    ))
}

/// The writes of [`counter_chain`]'s statement, as its CTEs: the moves' arrays `$1` to `$16`,
/// the answer to the stored bid `$17` to `$21`, the thread as the last move leaves it `$22` to
/// `$25`, the decision `$26` to `$28`. Every write depends on the compare-and-set (`answered`).
macro_rules! counter_chain_writes {
    () => {
        "WITH input AS (
         SELECT i.*
         FROM unnest($1::uuid[], $2::text[], $3::uuid[], $4::bigint[], $5::text[], $6::text[], $7::jsonb[],
                     $8::boolean[], $9::int[], $10::timestamptz[], $11::timestamptz[], $12::uuid[], $13::text[],
                     $14::text[], $15::timestamptz[], $16::uuid[])
              AS i(id, author, author_id, amount, currency, message, terms, final, round, expires_at, now,
                   parent_bid_id, status, reason, responded_at, answerer)
     ), answered AS (
         UPDATE bids b SET status = $17, reason = $18, responded_at = $19, updated_at = $19
         WHERE b.id = $20 AND b.thread_id = $21 AND b.status = 'PENDING' AND b.expires_at > clock_timestamp()
           AND EXISTS (SELECT 1 FROM threads t WHERE t.id = $21 AND t.status = 'ACTIVE')
         RETURNING b.id
     ), bid AS (
         INSERT INTO bids (id, thread_id, author, author_id, amount, currency, message, terms, final, status,
                           reason, parent_bid_id, round, expires_at, responded_at, created_at, updated_at)
         SELECT i.id, $21, i.author, i.author_id, i.amount, i.currency, i.message, i.terms, i.final, i.status,
                i.reason, i.parent_bid_id, i.round, i.expires_at, i.responded_at, i.now,
                COALESCE(i.responded_at, i.now)
         FROM input i WHERE EXISTS (SELECT 1 FROM answered)
         RETURNING id
     ), thread AS (
         UPDATE threads SET rounds = $22, last_bid_id = $23, expires_at = $24, updated_at = $25
         WHERE id = $21 AND EXISTS (SELECT 1 FROM answered)
         RETURNING id
     ), taken AS (
         INSERT INTO auto_tasks (bid_id, thread_id, agent_id, done_at)
         SELECT i.id, $21, i.answerer, now() FROM input i WHERE EXISTS (SELECT 1 FROM answered)
         ON CONFLICT (bid_id) DO NOTHING
         RETURNING bid_id
     ), decided AS (
         INSERT INTO auto_decisions (bid_id, thread_id, agent_id, action, reason, rationale, counter_bid_id)
         SELECT i.parent_bid_id, $21, i.author_id, $26, $27, $28, i.id FROM input i
         WHERE EXISTS (SELECT 1 FROM answered)
         RETURNING id
     ), written AS (
         -- Read after every write above: the clock of a read that follows them.
         SELECT (SELECT count(*) FROM answered) AS made, clock_timestamp() AS db_now
         FROM (SELECT (SELECT count(*) FROM bid) + (SELECT count(*) FROM thread) + (SELECT count(*) FROM taken)
                      + (SELECT count(*) FROM decided) AS rows) w
     )"
    };
}

/// [`counter_chain`]'s statement: how many bids it answered, 1 or 0.
const COUNTER_CHAIN: &str =
    concat!(counter_chain_writes!(), " SELECT made, NULL::json AS listing, NULL::timestamptz AS db_now FROM written");

/// [`counter_chain`]'s statement when it also locks and reads the listing `$29`.
const COUNTER_CHAIN_LOCKING: &str = concat!(
    counter_chain_writes!(),
    " SELECT w.made, row_to_json(l) AS listing, w.db_now FROM written w, listings l WHERE l.id = $29 FOR UPDATE OF l"
);

/// Writes, in one statement, counters a policy and the other side's policy made on one thread
/// in turn, each decided in memory on the rows of the one before, in the caller's transaction,
/// which holds the thread's lock (the executor's exchange: `market::negotiation::plan_counter`).
/// The first answers the thread's pending bid (a compare-and-set on its status and deadline),
/// each other the counter before it, which is stored already answered; the thread moves on to
/// the last, and each counter's decision is recorded (`decided`, the same for all, by its
/// author's policy) with the task of the side that answers it, taken (`answerers`, in order:
/// the transaction decides it next). With `listing`, the same statement locks that listing and
/// reads it, with the clock, for an acceptance of the last counter (after the thread's lock, as
/// the executor's acceptance on a held thread does). Nothing is written if the compare-and-set
/// fails; `None` then. The moves' events are the caller's to write.
pub async fn counter_chain(
    conn: &mut PgConnection,
    moves: &[CounterMove],
    answerers: &[Uuid],
    decided: Decided<'_>,
    listing: Option<Uuid>,
) -> Result<Option<Option<(Listing, DateTime<Utc>)>>, sqlx::Error> {
    let (Some(first), Some(last)) = (moves.first(), moves.last()) else {
        return Ok(Some(None));
    };
    // Each counter but the last is stored as the move after it left it.
    let answered = |i: usize| moves.get(i + 1);
    let statuses: Vec<&str> = (0..moves.len())
        .map(|i| answered(i).map_or(BidStatus::Pending.as_str(), |next| next.effect.bid_status.as_str()))
        .collect();
    let reasons: Vec<Option<&str>> =
        (0..moves.len()).map(|i| answered(i).map(|next| next.effect.reason.as_str())).collect();
    let responded: Vec<Option<DateTime<Utc>>> = (0..moves.len()).map(|i| answered(i).map(|next| next.now)).collect();
    let statement = if listing.is_some() { COUNTER_CHAIN_LOCKING } else { COUNTER_CHAIN };
    let query = bind_new_bids(sqlx::query_as(statement), moves)
        .bind(column(moves, |m| m.counter.round))
        .bind(column(moves, |m| m.counter.expires_at))
        .bind(column(moves, |m| m.now))
        .bind(column(moves, |m| m.bid_id))
        .bind(statuses)
        .bind(reasons)
        .bind(responded)
        .bind(answerers)
        .bind(first.effect.bid_status.as_str())
        .bind(first.effect.reason.as_str())
        .bind(first.now)
        .bind(first.bid_id)
        .bind(first.thread_id)
        .bind(last.counter.round)
        .bind(last.counter.id)
        .bind(last.counter.expires_at)
        .bind(last.now)
        .bind(decided.action)
        .bind(decided.reason)
        .bind(decided.rationale);
    let row: Option<ChainRow> = match listing {
        Some(listing) => query.bind(listing).fetch_optional(conn).await?,
        None => query.fetch_optional(conn).await?,
    };
    // No row: the listing was not found (never, for a thread's), so it was neither read.
    let Some(row) = row else { return Ok(Some(None)) };
    let read = row.listing.zip(row.db_now).map(|(Json(listing), db_now)| (listing, db_now));
    Ok((row.made > 0).then_some(read))
}

/// What [`counter_chain`] gives back: how many bids it answered, and the listing it read.
#[derive(Debug, FromRow)]
struct ChainRow {
    made: i64,
    listing: Option<Json<Listing>>,
    db_now: Option<DateTime<Utc>>,
}
