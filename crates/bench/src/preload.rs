//! `haggle bench --preload N`: a history of about N bids, written by bulk SQL before the
//! workload runs, so that the workload measures a database that has been in use.
//!
//! The history is made in proportion to the bids, as a marketplace accumulates it: agents
//! (at least 2,000; three in ten sell, and a few sellers and buyers are far busier than the
//! rest), listings (one for every five threads, most still for sale), threads of one to seven
//! bids (four on average) that ended in every way a thread ends (35 % accepted, with their
//! orders, 25 % rejected or withdrawn, 25 % expired, 10 % closed by their listing, 5 % still
//! live with a deadline days ahead), and the events they published with their recipients. It
//! spans the 25 days before the load, inside the default event retention of 30 days. Every row
//! is written through the schema's checks and foreign keys; ids are UUIDv7 of the rows' times,
//! so new rows sort after the history as they would.
//!
//! Each chunk of threads is one transaction on one connection; its events take their ids from
//! the events' sequence and each agent's numbers from the agent's counter (`event_heads`), as
//! the server's statements take them.

use std::time::Instant;

use anyhow::Context;
use serde::Serialize;
use sqlx::{Connection, PgConnection};

/// Threads per transaction.
const CHUNK_THREADS: i64 = 25_000;
/// Bids per thread on average (threads have 1 to 7).
const BIDS_PER_THREAD: i64 = 4;
/// Threads per listing.
const THREADS_PER_LISTING: i64 = 5;
/// The fewest agents a history has.
const MIN_AGENTS: i64 = 2_000;

/// What a preload wrote.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Preloaded {
    pub agents: i64,
    pub listings: i64,
    pub threads: i64,
    pub bids: i64,
    pub orders: i64,
    pub events: i64,
    pub seconds: f64,
}

/// The session's helpers: a UUIDv7 for a time, a kind of row and its number; a number in [0, 1)
/// from a seed; `n` words from a seed.
const HELPERS: &str = r#"
CREATE FUNCTION pg_temp.preload_id(at timestamptz, kind integer, n bigint) RETURNS uuid LANGUAGE sql IMMUTABLE AS $$
    SELECT (lpad(to_hex((extract(epoch FROM at) * 1000)::bigint), 12, '0') || '7' || lpad(to_hex(kind), 3, '0')
            || '8' || lpad(to_hex(n), 15, '0'))::uuid
$$;
CREATE FUNCTION pg_temp.preload_unit(seed text) RETURNS double precision LANGUAGE sql IMMUTABLE AS $$
    SELECT ('x' || substr(md5(seed), 1, 8))::bit(32)::bigint / 4294967296.0
$$;
CREATE FUNCTION pg_temp.preload_words(seed text, n integer) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT string_agg((ARRAY['premium', 'display', 'video', 'audio', 'native', 'banner', 'homepage',
        'takeover', 'sponsored', 'newsletter', 'podcast', 'prime', 'evening', 'morning', 'weekend',
        'sports', 'finance', 'travel', 'fashion', 'gaming', 'outdoor', 'mobile', 'desktop', 'tablet',
        'audience', 'reach', 'frequency', 'impressions', 'viewable', 'guaranteed', 'deal', 'private',
        'marketplace', 'inventory', 'slot', 'placement', 'rectangle', 'leaderboard', 'skyscraper',
        'interstitial', 'rewarded', 'connected', 'television', 'streaming', 'regional', 'national',
        'metro', 'campaign', 'season', 'holiday', 'launch', 'brand', 'safety', 'contextual', 'first',
        'party', 'segment', 'lookalike', 'retargeting', 'quarterly', 'package', 'bundle', 'exclusive',
        'roadblock', 'sponsorship', 'editorial', 'section', 'article', 'feed', 'story', 'overlay'])
        [1 + (('x' || substr(md5(seed || '.' || i), 1, 8))::bit(32)::bigint % 71)::int], ' ')
    FROM generate_series(1, n) i
$$;
"#;

/// The agents of the history.
const AGENTS: &str = r#"
INSERT INTO agents (id, name, tier, created_at, updated_at)
SELECT pg_temp.preload_id($5 - interval '1 day', 1, n),
       CASE WHEN n < $2 THEN 'preload seller ' ELSE 'preload buyer ' END || n,
       CASE WHEN n < $2 THEN 'PUBLIC' ELSE 'AGENCY' END,
       $5 - interval '1 day', $5 - interval '1 day'
FROM generate_series(0, $1 - 1) n
"#;

/// The listings of the history: a few sellers have many.
const LISTINGS: &str = r#"
INSERT INTO listings (id, seller_id, title, description, ask_amount, currency, quantity, quantity_available,
                      status, negotiable, min_negotiation_tier, max_rounds, bid_ttl_seconds,
                      max_threads_per_buyer, created_at, updated_at)
SELECT pg_temp.preload_id(at, 2, l),
       pg_temp.preload_id($5 - interval '1 day', 1, floor($2 * power(pg_temp.preload_unit('ls' || l), 1.5))::bigint),
       initcap(pg_temp.preload_words('t' || l, 4)) || ' #' || l,
       pg_temp.preload_words('d' || l, 40),
       100000 + (l % 50) * 1000, 'USD', 100,
       CASE WHEN l % 20 IN (17, 18) THEN 0 ELSE 98 END,
       CASE WHEN l % 20 IN (17, 18) THEN 'SOLD' WHEN l % 20 = 19 THEN 'WITHDRAWN' ELSE 'ACTIVE' END,
       true, 'PUBLIC', 10, 86400, 5, at, at
FROM generate_series(0, $3 - 1) l,
     LATERAL (SELECT $5 + $6 * (l * 5)::double precision / greatest($4, 1) - interval '1 hour' AS at) t
"#;

/// One chunk of threads (`$7` to `$8`), with their bids, orders, events and recipients: the
/// statement's beginning, whose events' numbering and writing follow ([`CHUNK_EVENTS`]).
const CHUNK: &str = r#"
CREATE TEMP TABLE preload_threads ON COMMIT DROP AS
SELECT k, l, j, h, rounds, at,
       pg_temp.preload_id(at, 3, k) AS id,
       pg_temp.preload_id(p.base - interval '1 day', 1, p.sellers + (bb + j) % p.buyers) AS buyer_id,
       pg_temp.preload_id(p.base - interval '1 day', 1,
                          floor(p.sellers * power(pg_temp.preload_unit('ls' || l), 1.5))::bigint) AS seller_id,
       pg_temp.preload_id(p.base + p.span * (l * 5)::double precision / greatest(p.threads, 1) - interval '1 hour',
                          2, l) AS listing_id,
       100000 + (l % 50) * 1000 AS ask,
       CASE WHEN h < 7 THEN 'ACCEPTED' WHEN h < 12 THEN 'REJECTED' WHEN h < 17 THEN 'EXPIRED'
            WHEN h < 19 THEN 'CLOSED' ELSE 'ACTIVE' END AS status
FROM (SELECT $2::bigint AS sellers, $1::bigint - $2::bigint AS buyers, $4::bigint AS threads,
             $5 AS base, $6 AS span) p,
     generate_series($7::bigint, $8::bigint) k,
     LATERAL (SELECT k / 5 AS l, k % 5 AS j, ((k * 2654435761) % 1000003) % 20 AS h,
                     1 + (k / 20) % 7 AS rounds,
                     p.base + p.span * k::double precision / greatest(p.threads, 1) AS at) d,
     LATERAL (SELECT floor(p.buyers * power(pg_temp.preload_unit('lb' || d.l), 1.5))::bigint AS bb) b;

CREATE TEMP TABLE preload_bids ON COMMIT DROP AS
SELECT t.k, i AS round, t.rounds,
       pg_temp.preload_id(t.at + (i - 1) * interval '10 minutes', 4, t.k * 8 + i) AS id,
       CASE WHEN i = 1 THEN NULL
            ELSE pg_temp.preload_id(t.at + (i - 2) * interval '10 minutes', 4, t.k * 8 + i - 1) END AS parent_id,
       t.id AS thread_id,
       CASE WHEN i % 2 = 1 THEN 'buyer' ELSE 'seller' END AS author,
       CASE WHEN i % 2 = 1 THEN t.buyer_id ELSE t.seller_id END AS author_id,
       t.ask * (70 + 4 * i) / 100 AS amount,
       t.at + (i - 1) * interval '10 minutes' AS at,
       CASE WHEN i < t.rounds THEN 'COUNTERED'
            WHEN t.status = 'ACCEPTED' THEN 'ACCEPTED'
            WHEN t.status IN ('REJECTED', 'CLOSED') THEN 'REJECTED'
            WHEN t.status = 'EXPIRED' THEN 'EXPIRED'
            ELSE 'PENDING' END AS status,
       CASE WHEN i < t.rounds THEN 'countered'
            WHEN t.status = 'ACCEPTED' THEN 'accepted'
            WHEN t.status = 'REJECTED' AND t.h = 11 THEN 'withdrawn'
            WHEN t.status = 'REJECTED' THEN 'rejected'
            WHEN t.status = 'EXPIRED' THEN 'expired'
            WHEN t.status = 'CLOSED' THEN 'listing_sold'
            END AS reason,
       CASE WHEN i = t.rounds AND t.status = 'ACTIVE'
            THEN now() + (1 + t.k % 5) * interval '1 day'
            ELSE t.at + (i - 1) * interval '10 minutes' + interval '1 day' END AS expires_at
FROM preload_threads t, generate_series(1, t.rounds) i;

INSERT INTO threads (id, listing_id, buyer_id, seller_id, status, rounds, last_bid_id, expires_at,
                     closed_reason, created_at, updated_at)
SELECT t.id, t.listing_id, t.buyer_id, t.seller_id, t.status, t.rounds, b.id,
       CASE WHEN t.status = 'ACTIVE' THEN b.expires_at END, b.reason,
       t.at, b.at + interval '5 minutes'
FROM preload_threads t JOIN preload_bids b ON b.k = t.k AND b.round = t.rounds;

INSERT INTO bids (id, thread_id, author, author_id, amount, currency, message, final, status, reason,
                  parent_bid_id, round, expires_at, responded_at, created_at, updated_at)
SELECT id, thread_id, author, author_id, amount, 'USD',
       'Round ' || round || ': our offer for the placement, flight and terms as listed.',
       false, status, reason, parent_id, round, expires_at,
       CASE WHEN status = 'PENDING' THEN NULL
            WHEN status = 'EXPIRED' THEN expires_at
            WHEN round < rounds THEN at + interval '10 minutes'
            ELSE at + interval '5 minutes' END,
       at,
       CASE WHEN status = 'PENDING' THEN at ELSE at + interval '5 minutes' END
FROM preload_bids;

INSERT INTO orders (id, listing_id, thread_id, bid_id, buyer_id, seller_id, amount, currency, status,
                    created_at, updated_at)
SELECT pg_temp.preload_id(b.at + interval '5 minutes', 5, t.k), t.listing_id, t.id, b.id,
       t.buyer_id, t.seller_id, b.amount, 'USD', 'CONFIRMED', b.at + interval '5 minutes', b.at + interval '5 minutes'
FROM preload_threads t JOIN preload_bids b ON b.k = t.k AND b.round = t.rounds
WHERE t.status = 'ACCEPTED';

WITH happened AS (
    -- Each bid's placement or counter, then each ended thread's end, and each order.
    SELECT b.at, b.k, 0 AS seq,
           CASE WHEN b.round = 1 THEN 'bid.placed' ELSE 'bid.countered' END AS type,
           b.id AS bid_id, NULL::uuid AS order_id, b.thread_id
    FROM preload_bids b
    UNION ALL
    SELECT b.at + interval '5 minutes', b.k, 1,
           CASE b.status WHEN 'ACCEPTED' THEN 'bid.accepted' WHEN 'EXPIRED' THEN 'bid.expired'
                         WHEN 'REJECTED' THEN CASE WHEN b.reason = 'listing_sold' THEN 'thread.closed' ELSE 'bid.rejected' END
                         END,
           b.id, NULL, b.thread_id
    FROM preload_bids b WHERE b.round = b.rounds AND b.status <> 'PENDING'
    UNION ALL
    SELECT o.created_at, 0, 2, 'order.created', o.bid_id, o.id, o.thread_id
    FROM orders o JOIN preload_threads t ON o.thread_id = t.id
), ev AS (
    -- In the order they happened, each with its two parties, as the server writes events.
    SELECT nextval('events_id_seq') AS id, ARRAY[t.buyer_id, t.seller_id] AS audience, h.*,
           row_number() OVER (ORDER BY h.at, h.k, h.seq) AS n
    FROM happened h JOIN threads t ON t.id = h.thread_id
), "#;

/// The end of a chunk's statement: the events, numbered for their parties as the server numbers
/// them (`number_events`).
const CHUNK_EVENTS: &str = r#"
INSERT INTO events (id, type, audience, seqs, listing_id, thread_id, bid_id, order_id, data, created_at)
SELECT ev.id, ev.type, ev.audience, s.seqs, t.listing_id, t.id, ev.bid_id, ev.order_id,
       CASE WHEN ev.order_id IS NULL THEN jsonb_build_object('bid', to_jsonb(b), 'thread', to_jsonb(t))
            ELSE jsonb_build_object('order', to_jsonb(o)) END,
       ev.at
FROM ev JOIN seqs s ON s.event_id = ev.id JOIN threads t ON t.id = ev.thread_id JOIN bids b ON b.id = ev.bid_id
LEFT JOIN orders o ON o.id = ev.order_id;
"#;

/// Puts the preload's figures into a statement, as literals: `$1` agents, `$2` sellers, `$3`
/// listings, `$4` threads, `$5` the history's start, `$6` its span, `$7` and `$8` a chunk's first
/// and last thread. (Utility statements, as `CREATE TABLE AS`, take no parameters.)
fn fill(sql: &str, figures: &[String]) -> String {
    figures.iter().enumerate().rev().fold(sql.to_owned(), |sql, (i, value)| sql.replace(&format!("${}", i + 1), value))
}

/// Writes a history of about `bids` bids into the database at `database_url`, printing progress
/// to stderr, then vacuums and analyses what it wrote.
pub async fn run(database_url: &str, bids: u64) -> anyhow::Result<Preloaded> {
    let mut conn = PgConnection::connect(database_url).await.context("connecting to the database to preload it")?;
    let started = Instant::now();
    let threads = (bids as i64 / BIDS_PER_THREAD).max(1);
    let listings = (threads + THREADS_PER_LISTING - 1) / THREADS_PER_LISTING;
    let agents = (bids as i64 / 2_500).max(MIN_AGENTS);
    let sellers = agents * 3 / 10;
    let base: String =
        sqlx::query_scalar("SELECT (now() - interval '25 days 1 hour')::text").fetch_one(&mut conn).await?;
    let mut figures = vec![
        agents.to_string(),
        sellers.to_string(),
        listings.to_string(),
        threads.to_string(),
        format!("'{base}'::timestamptz"),
        "interval '25 days'".to_owned(),
    ];
    sqlx::raw_sql(HELPERS).execute(&mut conn).await.context("creating the preload's helper functions")?;
    eprintln!("preload: {agents} agents, {listings} listings, {threads} threads (about {bids} bids)");
    for (what, sql) in [("agents", AGENTS), ("listings", LISTINGS)] {
        sqlx::raw_sql(&fill(sql, &figures))
            .execute(&mut conn)
            .await
            .with_context(|| format!("writing the preload's {what}"))?;
    }
    let chunk = [CHUNK, &haggle_server::db::events::number_events("ev"), CHUNK_EVENTS].concat();
    let mut first = 0;
    while first < threads {
        let last = (first + CHUNK_THREADS).min(threads) - 1;
        figures.truncate(6);
        figures.extend([first.to_string(), last.to_string()]);
        // One transaction; its statements run one after another, each planned once the
        // temporary tables before it exist.
        let mut tx = conn.begin().await?;
        sqlx::raw_sql(&fill(&chunk, &figures))
            .execute(&mut *tx)
            .await
            .with_context(|| format!("preload, threads {first} to {last}"))?;
        tx.commit().await?;
        first = last + 1;
        let elapsed = started.elapsed().as_secs_f64();
        eprintln!(
            "preload: {first} of {threads} threads ({:.0} %), {:.0} bids/s, {elapsed:.0} s",
            100.0 * first as f64 / threads as f64,
            (first * BIDS_PER_THREAD) as f64 / elapsed
        );
    }
    eprintln!("preload: vacuum and analyse");
    sqlx::raw_sql("VACUUM (ANALYZE) agents, listings, threads, bids, orders, events, event_recipients, event_heads")
        .execute(&mut conn)
        .await
        .context("vacuuming after the preload")?;
    let counts: (i64, i64, i64, i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM agents), (SELECT count(*) FROM listings), (SELECT count(*) FROM threads),
                (SELECT count(*) FROM bids), (SELECT count(*) FROM orders), (SELECT count(*) FROM events)",
    )
    .fetch_one(&mut conn)
    .await?;
    let preloaded = Preloaded {
        agents: counts.0,
        listings: counts.1,
        threads: counts.2,
        bids: counts.3,
        orders: counts.4,
        events: counts.5,
        seconds: started.elapsed().as_secs_f64(),
    };
    eprintln!(
        "preload: done in {:.0} s ({:.0} bids/s): the database holds {} agents, {} listings, {} threads, {} bids, {} orders, {} events",
        preloaded.seconds,
        preloaded.bids as f64 / preloaded.seconds,
        preloaded.agents,
        preloaded.listings,
        preloaded.threads,
        preloaded.bids,
        preloaded.orders,
        preloaded.events
    );
    Ok(preloaded)
}
