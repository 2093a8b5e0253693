//! A long history: the bench's preload writes one that the schema accepts and the API reads,
//! and the reads that would grow with history (listing search, an agent's thread lists, the
//! sweeper's due bids) give the same answers as the plain queries, through their indexes.

use serde_json::{Value, json};
use uuid::Uuid;

use haggle_domain::Party;
use haggle_server::db::listings::{self, ListingFilter};
use haggle_server::db::threads::ThreadFilter;

use crate::support::*;

/// Gives a preloaded agent an API key, as if it had been issued to it.
async fn key_for(app: &TestApp, agent_id: Uuid) -> Agent {
    let key = format!("hk_preloaded-{}", agent_id.simple());
    sqlx::query(
        "INSERT INTO api_keys (id, agent_id, digest, prefix)
         VALUES (gen_random_uuid(), $1, sha256(convert_to($2, 'UTF8')), left($2, 11))",
    )
    .bind(agent_id)
    .bind(&key)
    .execute(&app.pool)
    .await
    .unwrap();
    Agent { id: agent_id.to_string(), key }
}

/// Every page of a list route, by its cursor, as the ids in order.
async fn all_pages(app: &TestApp, path: &str, key: &str) -> Vec<String> {
    let mut ids = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let separator = if path.contains('?') { '&' } else { '?' };
        let page_path = match &cursor {
            Some(cursor) => format!("{path}{separator}limit=7&cursor={cursor}"),
            None => format!("{path}{separator}limit=7"),
        };
        let page = app.get(&page_path, key).await.expect(200).body;
        ids.extend(page["data"].as_array().unwrap().iter().map(|item| item["id"].as_str().unwrap().to_owned()));
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return ids,
        }
    }
}

async fn ids(app: &TestApp, sql: &str, agent: Uuid) -> Vec<String> {
    let rows: Vec<Uuid> = sqlx::query_scalar(sql).bind(agent).fetch_all(&app.pool).await.unwrap();
    rows.into_iter().map(|id| id.to_string()).collect()
}

/// The agent with the most threads as seller.
async fn busiest_seller(app: &TestApp) -> Uuid {
    sqlx::query_scalar("SELECT seller_id FROM threads GROUP BY seller_id ORDER BY count(*) DESC, seller_id LIMIT 1")
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_preloaded_history_satisfies_the_schema_and_the_api_reads_it() {
    let app = TestApp::spawn().await;
    let preloaded = haggle_bench::preload::run(app.database_url(), 8_000).await.unwrap();
    assert_eq!(preloaded.threads, 2_000);
    assert_eq!(preloaded.listings, 400);
    assert_eq!(preloaded.agents, 2_000);
    assert!((7_500..=8_500).contains(&preloaded.bids), "{preloaded:?}");
    // The rows passed every check and foreign key on their way in (the thread's last bid is
    // checked at commit); what the schema cannot say is checked here.
    assert_eq!(
        app.count("SELECT count(*) FROM threads t JOIN bids b ON b.id = t.last_bid_id AND b.round = t.rounds").await,
        2_000
    );
    assert_eq!(
        app.count("SELECT count(*) FROM threads WHERE status = 'ACCEPTED'").await,
        app.count("SELECT count(*) FROM orders").await
    );
    assert_eq!(
        app.count("SELECT count(*) FROM bids WHERE status = 'PENDING'").await,
        app.count("SELECT count(*) FROM threads WHERE status = 'ACTIVE'").await
    );
    // Each event has its two recipients, and each agent's events are numbered 1..n with no gap,
    // as the server numbers them, up to the agent's counter.
    let events = app.count("SELECT count(*) FROM events").await;
    assert_eq!(preloaded.events, events);
    assert_eq!(app.count("SELECT count(*) FROM event_recipients").await, 2 * events);
    assert_eq!(
        app.count(
            "SELECT count(*) FROM (SELECT r.agent_id, count(*) AS n, min(r.seq) AS first, max(r.seq) AS last
                                   FROM event_recipients r GROUP BY r.agent_id) i
             JOIN event_heads h USING (agent_id)
             WHERE i.n <> i.last OR i.first <> 1 OR h.last_seq <> i.last"
        )
        .await,
        0
    );
    assert_eq!(
        app.count("SELECT count(*) FROM events WHERE cardinality(seqs) <> 2").await,
        0,
        "every event knows its recipients' numbers"
    );

    // The busiest seller, with a key, also buys: its thread lists then merge both roles.
    let seller_id = busiest_seller(&app).await;
    let seller = key_for(&app, seller_id).await;
    let others: Vec<Uuid> =
        sqlx::query_scalar("SELECT id FROM listings WHERE status = 'ACTIVE' AND seller_id <> $1 ORDER BY id LIMIT 3")
            .bind(seller_id)
            .fetch_all(&app.pool)
            .await
            .unwrap();
    let mut placed = Vec::new();
    for listing in &others {
        placed.push(app.place(&seller, &listing.to_string(), 90_000).await);
    }
    // New rows sort after the history: the newest thread is the one just opened.
    let newest = all_pages(&app, "/v1/threads?role=buyer", &seller.key).await;
    assert_eq!(newest.len(), 3);
    let first_bid = app.get(format!("/v1/bids/{}", placed[2]), &seller.key).await.expect(200).body;
    assert_eq!(json!(newest[0]), first_bid["thread_id"]);

    let either = "(buyer_id = $1 OR seller_id = $1)";
    let cases = [
        ("/v1/threads", format!("SELECT id FROM threads WHERE {either} ORDER BY id DESC")),
        ("/v1/threads?role=seller", "SELECT id FROM threads WHERE seller_id = $1 ORDER BY id DESC".to_owned()),
        ("/v1/threads?role=buyer", "SELECT id FROM threads WHERE buyer_id = $1 ORDER BY id DESC".to_owned()),
        (
            "/v1/threads?status=ACTIVE",
            format!(
                "SELECT id FROM threads WHERE {either} AND status = 'ACTIVE' AND expires_at > now() ORDER BY id DESC"
            ),
        ),
        (
            "/v1/threads?role=seller&status=ACTIVE",
            "SELECT id FROM threads WHERE seller_id = $1 AND status = 'ACTIVE' AND expires_at > now() ORDER BY id DESC"
                .to_owned(),
        ),
        (
            "/v1/threads?status=ACCEPTED",
            format!("SELECT id FROM threads WHERE {either} AND status = 'ACCEPTED' ORDER BY id DESC"),
        ),
        (
            "/v1/threads?status=EXPIRED",
            format!(
                "SELECT id FROM threads WHERE {either} AND (status = 'EXPIRED' OR (status = 'ACTIVE' AND expires_at <= now())) ORDER BY id DESC"
            ),
        ),
    ];
    assert!(ids(&app, &cases[1].1, seller_id).await.len() > 7, "the busiest seller's threads span pages");
    for (path, sql) in &cases {
        let expected = ids(&app, sql, seller_id).await;
        assert_eq!(all_pages(&app, path, &seller.key).await, expected, "{path}");
    }
    let listing = others[0].to_string();
    let on_listing = all_pages(&app, &format!("/v1/threads?listing_id={listing}"), &seller.key).await;
    assert_eq!(on_listing, vec![newest[2].clone()]);

    // Search: the same listings as a scan of every listing would find, page after page.
    let rare = app.listing(&seller, json!({ "title": "Zanzibar rooftop", "description": "100% of_the view" })).await;
    for word in ["premium", "PREMIUM", "Zanzibar", "rooftop view", "#1", "0%", "of_t", "de"] {
        let pattern = haggle_server::db::like_pattern(word);
        let expected: Vec<Uuid> =
            sqlx::query_scalar("SELECT id FROM listings WHERE title ILIKE $1 OR description ILIKE $1 ORDER BY id DESC")
                .bind(&pattern)
                .fetch_all(&app.pool)
                .await
                .unwrap();
        let expected: Vec<String> = expected.into_iter().map(|id| id.to_string()).collect();
        let query = url::form_urlencoded::byte_serialize(word.as_bytes()).collect::<String>();
        assert_eq!(all_pages(&app, &format!("/v1/listings?q={query}"), &seller.key).await, expected, "q={word}");
    }
    let found = app.get("/v1/listings?q=zanzibar", &seller.key).await.expect(200).body;
    assert_eq!(found["data"].as_array().map(Vec::len), Some(1));
    assert_eq!(found["data"][0]["id"], json!(rare));

    // The sweeper finds the bids that fell due among the history's, and only those.
    let due: Vec<Uuid> = sqlx::query_scalar(
        "WITH due AS (
             SELECT id FROM threads WHERE status = 'ACTIVE' AND buyer_id <> $1 ORDER BY id LIMIT 5
         ), threads AS (
             UPDATE threads t SET expires_at = now() - interval '1 minute' FROM due WHERE t.id = due.id
         )
         UPDATE bids b SET expires_at = now() - interval '1 minute' FROM due
         WHERE b.thread_id = due.id AND b.status = 'PENDING' RETURNING b.id",
    )
    .bind(seller_id)
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(due.len(), 5);
    let active = app.count("SELECT count(*) FROM threads WHERE status = 'ACTIVE'").await;
    let outcome = haggle_server::sweeper::run_once(&app.market(), 500).await.unwrap();
    assert_eq!(outcome.expired_bids, 5);
    let expired: i64 = sqlx::query_scalar("SELECT count(*) FROM bids WHERE id = ANY($1) AND status = 'EXPIRED'")
        .bind(&due)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(expired, 5);
    assert_eq!(app.count("SELECT count(*) FROM threads WHERE status = 'ACTIVE'").await, active - 5);
    assert_eq!(haggle_server::sweeper::run_once(&app.market(), 500).await.unwrap().expired_bids, 0);
}

/// The plan of each read that would grow with history, over a history large enough that a
/// scan and an index differ: each reads its index.
#[tokio::test]
async fn the_reads_that_grow_with_history_use_their_indexes() {
    let app = TestApp::spawn().await;
    haggle_bench::preload::run(app.database_url(), 60_000).await.unwrap();
    let plan = |plan: Result<String, sqlx::Error>| plan.unwrap();

    // A rare word is found through the trigram indexes, not by walking every listing.
    let search = ListingFilter { q: Some("zanzibar".into()), limit: 20, ..Default::default() };
    let searched = plan(listings::plan_of_list(&app.pool, &search).await);
    for index in ["listings_title_trgm_idx", "listings_description_trgm_idx"] {
        assert!(searched.contains(index), "search should read {index}:\n{searched}");
    }

    // A busy seller's live threads come from the partial index of live threads.
    let seller = busiest_seller(&app).await;
    let live = ThreadFilter {
        role: Some(Party::Seller),
        status: Some(haggle_domain::ThreadStatus::Active),
        limit: 20,
        ..Default::default()
    };
    let listed = plan(haggle_server::db::threads::plan_of_list_threads(&app.pool, seller, &live).await);
    assert!(listed.contains("threads_seller_active_idx"), "live threads:\n{listed}");
    // Without a role: two index scans merged, never one scan of either role's rows.
    let all = ThreadFilter { limit: 20, ..Default::default() };
    let listed = plan(haggle_server::db::threads::plan_of_list_threads(&app.pool, seller, &all).await);
    for index in ["threads_buyer_id_idx", "threads_seller_id_idx"] {
        assert!(listed.contains(index), "all threads should read {index}:\n{listed}");
    }
    assert!(!listed.contains("BitmapOr"), "all threads:\n{listed}");

    // The sweeper reads pending bids only (by deadline through `bids_due_idx` once the live
    // ones are many), and looks up the threads of the due ones by key, never joining every
    // live thread.
    let swept = plan(haggle_server::db::sweeps::plan_of_lock_due(&app.pool, 500).await);
    assert!(swept.contains("bids_due_idx") || swept.contains("bids_one_pending_per_thread"), "sweeper:\n{swept}");
    assert!(swept.contains("Index Scan using threads_pkey on threads"), "sweeper:\n{swept}");
    for walk in ["Seq Scan", "Hash Join", "Bitmap Heap Scan on threads"] {
        assert!(!swept.contains(walk), "sweeper:\n{swept}");
    }
}

/// The reads a move and the executor decide on look the thread up by its key in the plans made
/// on empty tables, which a connection keeps as the tables grow while no statistics are gathered
/// (autovacuum off): never a scan of every thread for each move.
#[tokio::test]
async fn the_reads_moves_decide_on_find_the_thread_by_its_key_from_an_empty_table_on() {
    let app = TestApp::spawn().await;
    let mut conn = app.pool.acquire().await.unwrap();
    let mut plans = haggle_server::db::moves::plans_of_bid_context_reads(&mut conn).await.unwrap();
    plans.push(haggle_server::db::tasks::plan_of_take_task(&mut *conn).await.unwrap());
    assert_eq!(plans.len(), 4);
    for plan in plans {
        assert!(plan.contains("Index Scan using threads_pkey on threads t"), "{plan}");
        assert!(!plan.contains("Seq Scan on threads t"), "{plan}");
    }
}

/// A placement counts the buyer's threads on the listing through the index on both keys, in
/// the statements that read them and in the placement's own, as their generic plans on a fresh
/// database have it (no statistics): never through the buyer's index, which would read the
/// buyer's whole history for every placement.
#[tokio::test]
async fn a_placement_counts_the_buyers_threads_on_the_listing_by_both_keys_from_an_empty_table_on() {
    let app = TestApp::spawn().await;
    let mut conn = app.pool.acquire().await.unwrap();
    let mut plans = haggle_server::db::listings::plans_of_buyer_threads(&mut conn).await.unwrap();
    plans.push(haggle_server::db::moves::plan_of_place(&mut conn).await.unwrap());
    assert_eq!(plans.len(), 3);
    for plan in plans {
        assert!(plan.contains("using threads_listing_buyer_idx on threads t"), "{plan}");
        assert!(!plan.contains("threads_buyer_id_idx"), "{plan}");
    }
}

/// The preload only adds: a database in use keeps its rows and its event numbering.
#[tokio::test]
async fn a_preload_adds_to_a_database_in_use() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let bid = app.place(&deal.buyer, &deal.listing, 90_000).await;
    let before = app.count("SELECT count(*) FROM events").await;
    assert_eq!(before, 1, "the placement");
    haggle_bench::preload::run(app.database_url(), 2_000).await.unwrap();
    let events = app.count("SELECT count(*) FROM events").await;
    assert_eq!(app.count("SELECT max(id) FROM events").await, events);
    // The negotiation goes on, and its next event is numbered after the buyer's placement (the
    // history concerns other agents).
    app.counter(&deal.seller, &bid, 95_000).await;
    let last: Value = app.get("/v1/events?after=1", &deal.buyer.key).await.expect(200).body;
    assert_eq!(last["data"][0]["id"], json!(2), "{last}");
    assert_eq!(last["data"][0]["type"], json!("bid.countered"), "{last}");
}
