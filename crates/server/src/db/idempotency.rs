//! The stored first response to each (agent, Idempotency-Key).

use sqlx::postgres::PgArguments;
use sqlx::query::QueryAs;
use sqlx::{FromRow, PgConnection, PgExecutor, Postgres};
use uuid::Uuid;

/// How long a stored response is replayed.
pub const RETENTION_HOURS: i32 = 24;

#[derive(Debug, Clone, FromRow)]
pub struct Saved {
    pub request_digest: Vec<u8>,
    pub status_code: i16,
    pub content_type: String,
    pub body: Vec<u8>,
    pub sealed: bool,
    /// The request that stored it may still replace it (see [`RUNNING_SECONDS`]).
    pub in_progress: bool,
}

/// How long a stored answer marked in progress keeps a retry waiting with `409`: past it, the
/// request is taken to have died, and its stored answer (true when stored) is replayed.
pub const RUNNING_SECONDS: i32 = 60;

/// Takes a lock on the key for the rest of the transaction; `false` if another request holds it.
pub async fn try_lock(conn: &mut PgConnection, lock_id: i64) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT pg_try_advisory_xact_lock($1) AS "locked!""#, lock_id).fetch_one(conn).await
}

/// The stored response for the key, if it is younger than the retention period.
pub async fn find(conn: &mut PgConnection, agent_id: Uuid, key_digest: &[u8]) -> Result<Option<Saved>, sqlx::Error> {
    sqlx::query_as!(
        Saved,
        r#"SELECT request_digest, status_code, content_type, body, sealed,
                  in_progress AND created_at > now() - make_interval(secs => $4) AS "in_progress!"
           FROM idempotency_keys
           WHERE agent_id = $1 AND key_digest = $2 AND created_at > now() - make_interval(hours => $3)"#,
        agent_id,
        key_digest,
        RETENTION_HOURS,
        f64::from(RUNNING_SECONDS),
    )
    .fetch_optional(conn)
    .await
}

/// What is stored for a key: a live answer, one past the retention period (which a request
/// replaces in a transaction holding the key's lock, [`save`]), or nothing.
#[derive(Debug)]
pub enum Found {
    Live(Saved),
    Expired,
    Nothing,
}

/// What is stored for the key, read without a transaction or a lock: for a move made in one
/// statement with its answer ([`MoveAnswer`]), which may go ahead only if there is nothing.
pub async fn lookup(conn: &mut PgConnection, agent_id: Uuid, key_digest: &[u8]) -> Result<Found, sqlx::Error> {
    let found = sqlx::query!(
        r#"SELECT request_digest, status_code, content_type, body, sealed,
                  in_progress AND created_at > now() - make_interval(secs => $4) AS "in_progress!",
                  created_at > now() - make_interval(hours => $3) AS "live!"
           FROM idempotency_keys
           WHERE agent_id = $1 AND key_digest = $2"#,
        agent_id,
        key_digest,
        RETENTION_HOURS,
        f64::from(RUNNING_SECONDS),
    )
    .fetch_optional(conn)
    .await?;
    Ok(match found {
        None => Found::Nothing,
        Some(found) if !found.live => Found::Expired,
        Some(found) => Found::Live(Saved {
            request_digest: found.request_digest,
            status_code: found.status_code,
            content_type: found.content_type,
            body: found.body,
            sealed: found.sealed,
            in_progress: found.in_progress,
        }),
    })
}

/// A request's answer written by the statement that makes its move, in the same statement: the
/// answer is worked out from the rows the move will write, before it is made. Never sealed (a
/// move's answer carries no secret) and never in progress.
#[derive(Debug, Clone)]
pub struct MoveAnswer {
    pub agent_id: Uuid,
    pub key_digest: Vec<u8>,
    pub request_digest: Vec<u8>,
    pub status_code: i16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

/// The answers of a statement's moves, one array per column (an unkeyed move's entries NULL),
/// bound by [`bind`](Self::bind) and read through [`answer_rows`].
#[derive(Default)]
pub struct AnswerArrays<'a> {
    agent_ids: Vec<Option<Uuid>>,
    key_digests: Vec<Option<&'a [u8]>>,
    request_digests: Vec<Option<&'a [u8]>>,
    status_codes: Vec<Option<i16>>,
    content_types: Vec<Option<&'static str>>,
    bodies: Vec<Option<&'a [u8]>>,
}

impl<'a> FromIterator<Option<&'a MoveAnswer>> for AnswerArrays<'a> {
    /// The answers of a statement's moves, in the moves' order; none at all (empty arrays) when
    /// no move has one.
    fn from_iter<I: IntoIterator<Item = Option<&'a MoveAnswer>>>(answers: I) -> AnswerArrays<'a> {
        let answers: Vec<Option<&MoveAnswer>> = answers.into_iter().collect();
        let mut arrays = AnswerArrays::default();
        if answers.iter().all(Option::is_none) {
            return arrays;
        }
        for answer in answers {
            arrays.agent_ids.push(answer.map(|a| a.agent_id));
            arrays.key_digests.push(answer.map(|a| a.key_digest.as_slice()));
            arrays.request_digests.push(answer.map(|a| a.request_digest.as_slice()));
            arrays.status_codes.push(answer.map(|a| a.status_code));
            arrays.content_types.push(answer.map(|a| a.content_type));
            arrays.bodies.push(answer.map(|a| a.body.as_slice()));
        }
        arrays
    }
}

impl<'a> AnswerArrays<'a> {
    /// Binds the six arrays as the next six parameters, which [`answer_rows`] names.
    pub fn bind<O>(self, query: QueryAs<'a, Postgres, O, PgArguments>) -> QueryAs<'a, Postgres, O, PgArguments> {
        query
            .bind(self.agent_ids)
            .bind(self.key_digests)
            .bind(self.request_digests)
            .bind(self.status_codes)
            .bind(self.content_types)
            .bind(self.bodies)
    }
}

/// The part of a move's statement that stores the answers of its keyed moves that were made
/// (`made`: a condition on `a.move`, the index of an answer's move), bound by [`AnswerArrays`]
/// as `$first` to `$first + 5`: a CTE named `answers`. A plain INSERT: a key already stored
/// (by a request that came first, or long ago) fails the whole statement, so that none of its
/// moves is made and each is made again under locks, where the key's stored answer is found.
pub fn answer_rows(first: usize, made: &str) -> String {
    let p = |offset: usize| first + offset;
    format!(
        "answers AS (
             INSERT INTO idempotency_keys (agent_id, key_digest, request_digest, status_code, content_type, body,
                                           sealed, in_progress)
             SELECT a.agent_id, a.key_digest, a.request_digest, a.status_code, a.content_type, a.body, false, false
             FROM (SELECT a.*, (a.n - 1)::int AS move
                   FROM unnest(${}::uuid[], ${}::bytea[], ${}::bytea[], ${}::smallint[], ${}::text[], ${}::bytea[])
                        WITH ORDINALITY AS a(agent_id, key_digest, request_digest, status_code, content_type, body, n)
                  ) a
             WHERE a.agent_id IS NOT NULL AND {made}
             RETURNING 1
         ), ",
        p(0),
        p(1),
        p(2),
        p(3),
        p(4),
        p(5),
    )
}

/// Stores the response in the caller's transaction, replacing an expired record of the same key.
/// `false` if a live record already exists, which the advisory lock should have made impossible.
pub async fn save(
    conn: &mut PgConnection,
    agent_id: Uuid,
    key_digest: &[u8],
    saved: &Saved,
) -> Result<bool, sqlx::Error> {
    let result = sqlx::query!(
        "INSERT INTO idempotency_keys (agent_id, key_digest, request_digest, status_code, content_type, body, sealed,
                                       in_progress)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $9)
         ON CONFLICT (agent_id, key_digest) DO UPDATE SET
             request_digest = EXCLUDED.request_digest, status_code = EXCLUDED.status_code,
             content_type = EXCLUDED.content_type, body = EXCLUDED.body, sealed = EXCLUDED.sealed,
             in_progress = EXCLUDED.in_progress, created_at = now()
         WHERE idempotency_keys.created_at <= now() - make_interval(hours => $8)",
        agent_id,
        key_digest,
        &saved.request_digest,
        saved.status_code,
        &saved.content_type,
        &saved.body,
        saved.sealed,
        RETENTION_HOURS,
        saved.in_progress,
    )
    .execute(conn)
    .await?;
    Ok(result.rows_affected() == 1)
}

/// Replaces the stored answer of (agent, key) for the same request, after its commit: a handler
/// that learned the rest of its answer later (the compatibility routes, which wait for the other
/// party) stores the complete one for replays.
pub async fn replace(
    executor: impl PgExecutor<'_>,
    agent_id: Uuid,
    key_digest: &[u8],
    saved: &Saved,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE idempotency_keys SET status_code = $4, content_type = $5, body = $6, sealed = $7, in_progress = $8
         WHERE agent_id = $1 AND key_digest = $2 AND request_digest = $3",
        agent_id,
        key_digest,
        &saved.request_digest,
        saved.status_code,
        &saved.content_type,
        &saved.body,
        saved.sealed,
        saved.in_progress,
    )
    .execute(executor)
    .await
    .map(drop)
}

/// Deletes up to `batch` records past the retention period; returns how many.
pub async fn purge_expired(executor: impl PgExecutor<'_>, batch: i64) -> Result<u64, sqlx::Error> {
    let result = sqlx::query!(
        "DELETE FROM idempotency_keys WHERE ctid = ANY(ARRAY(
             SELECT ctid FROM idempotency_keys WHERE created_at <= now() - make_interval(hours => $1)
             LIMIT $2 FOR UPDATE SKIP LOCKED))",
        RETENTION_HOURS,
        batch,
    )
    .execute(executor)
    .await?;
    Ok(result.rows_affected())
}
