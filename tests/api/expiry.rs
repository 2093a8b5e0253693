//! Expiry: reads tell the truth before the sweep, the sweep ends bid and thread, and an action
//! on an expired bid records its expiry. Time is moved through the database, never slept on.

use serde_json::json;

use crate::support::{Deal, TestApp};

/// Moves a bid's deadline (and its thread's) into the past.
async fn age(app: &TestApp, bid: &str) {
    sqlx::query("UPDATE bids SET expires_at = now() - interval '1 second' WHERE id = $1::uuid")
        .bind(bid)
        .execute(&app.pool)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE threads SET expires_at = now() - interval '1 second' WHERE last_bid_id = $1::uuid AND status = 'ACTIVE'",
    )
    .bind(bid)
    .execute(&app.pool)
    .await
    .unwrap();
}

async fn stored(app: &TestApp, bid: &str) -> (String, String) {
    sqlx::query_as("SELECT b.status, t.status FROM bids b JOIN threads t ON t.id = b.thread_id WHERE b.id = $1::uuid")
        .bind(bid)
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_bid_past_its_time_reads_expired_before_the_sweep() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let bid = app.place(&deal.buyer, &deal.listing, 80000).await;
    age(&app, &bid).await;

    let read = app.get(format!("/v1/bids/{bid}"), &deal.buyer.key).await.expect(200);
    assert_eq!((read.body["status"].as_str(), read.body["reason"].as_str()), (Some("EXPIRED"), Some("expired")));
    let thread = read.body["thread_id"].as_str().unwrap();
    let thread = app.get(format!("/v1/threads/{thread}"), &deal.seller.key).await.expect(200);
    assert_eq!(thread.body["status"], "EXPIRED");
    assert_eq!(thread.body["turn"], serde_json::Value::Null);
    assert_eq!(thread.body["bids"][0]["status"], "EXPIRED");
    let expired = app.get("/v1/threads?status=EXPIRED", &deal.buyer.key).await.expect(200);
    assert_eq!(expired.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(app.get("/v1/threads?status=ACTIVE", &deal.buyer.key).await.expect(200).body["data"], json!([]));
    assert_eq!(stored(&app, &bid).await, ("PENDING".into(), "ACTIVE".into()), "nothing is written by a read");

    // After the sweep, the bid and thread read exactly as they did before it.
    let before_bid = read.body.clone();
    let before_thread = thread.body.clone();
    haggle_server::sweeper::run_once(&app.market(), 500).await.unwrap();
    let after_bid = app.get(format!("/v1/bids/{bid}"), &deal.buyer.key).await.expect(200).body;
    let after_thread =
        app.get(format!("/v1/threads/{}", before_thread["id"].as_str().unwrap()), &deal.seller.key).await;
    let without_updated_at = |mut value: serde_json::Value| {
        value.as_object_mut().unwrap().remove("updated_at");
        if let Some(bids) = value.get_mut("bids") {
            for bid in bids.as_array_mut().unwrap() {
                bid.as_object_mut().unwrap().remove("updated_at");
            }
        }
        value
    };
    assert_eq!(without_updated_at(after_bid), without_updated_at(before_bid));
    assert_eq!(without_updated_at(after_thread.expect(200).body), without_updated_at(before_thread));
}

#[tokio::test]
async fn the_sweep_expires_bids_and_their_threads() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "quantity": 3 })).await;
    let others: Vec<_> = [app.buyer("a").await, app.buyer("b").await].into_iter().collect();
    let due = app.place(&deal.buyer, &deal.listing, 80000).await;
    let countered = app.place(&others[0], &deal.listing, 80000).await;
    let due_counter = app.counter(&deal.seller, &countered, 99000).await;
    let live = app.place(&others[1], &deal.listing, 80000).await;
    age(&app, &due).await;
    age(&app, &due_counter).await;

    let outcome = haggle_server::sweeper::run_once(&app.market(), 500).await.unwrap();
    assert_eq!(outcome.expired_bids, 2);
    assert_eq!(stored(&app, &due).await, ("EXPIRED".into(), "EXPIRED".into()));
    assert_eq!(stored(&app, &due_counter).await, ("EXPIRED".into(), "EXPIRED".into()));
    assert_eq!(stored(&app, &live).await, ("PENDING".into(), "ACTIVE".into()));
    let reason: String = sqlx::query_scalar("SELECT closed_reason FROM threads WHERE last_bid_id = $1::uuid")
        .bind(&due)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(reason, "expired");
    assert_eq!(haggle_server::sweeper::run_once(&app.market(), 500).await.unwrap().expired_bids, 0);
}

#[tokio::test]
async fn the_sweep_works_in_batches() {
    let app = TestApp::spawn().await;
    let seller = app.register("seller").await;
    let buyer = app.buyer("buyer").await;
    let mut bids = Vec::new();
    for _ in 0..5 {
        let listing = app.listing(&seller, json!({})).await;
        bids.push(app.place(&buyer, &listing, 80000).await);
    }
    for bid in &bids {
        age(&app, bid).await;
    }
    assert_eq!(haggle_server::sweeper::run_once(&app.market(), 2).await.unwrap().expired_bids, 2);
    assert_eq!(haggle_server::sweeper::run_once(&app.market(), 2).await.unwrap().expired_bids, 2);
    assert_eq!(haggle_server::sweeper::run_once(&app.market(), 2).await.unwrap().expired_bids, 1);
    assert_eq!(app.count("SELECT count(*) FROM bids WHERE status = 'EXPIRED'").await, 5);
}

#[tokio::test]
async fn an_action_on_an_expired_bid_fails_and_records_the_expiry() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    for action in ["accept", "counter", "reject"] {
        let listing = app.listing(&deal.seller, json!({})).await;
        let bid = app.place(&deal.buyer, &listing, 80000).await;
        age(&app, &bid).await;
        let refused = match action {
            "counter" => {
                app.post(format!("/v1/bids/{bid}/counter"), &deal.seller.key, json!({ "amount": 90000 })).await
            }
            _ => app.post_empty(format!("/v1/bids/{bid}/{action}"), &deal.seller.key).await,
        };
        assert_eq!(refused.expect_problem(409, "bid_expired").body["current_status"], "EXPIRED");
        assert_eq!(stored(&app, &bid).await, ("EXPIRED".into(), "EXPIRED".into()), "{action}");
    }
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 0);
}

#[tokio::test]
async fn a_buyer_may_bid_again_once_its_thread_ran_out_of_time() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let first = app.place(&deal.buyer, &deal.listing, 80000).await;
    age(&app, &first).await;
    app.place(&deal.buyer, &deal.listing, 81000).await;
    assert_eq!(stored(&app, &first).await, ("EXPIRED".into(), "EXPIRED".into()));
}

#[tokio::test]
async fn expiry_requests_are_bounded_and_honoured() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "bid_ttl_seconds": 600 })).await;
    for bad in [59, 2_592_001, -5] {
        let refused = app
            .post(
                &format!("/v1/listings/{}/bids", deal.listing),
                &deal.buyer.key,
                json!({ "amount": 80000, "expires_in": bad }),
            )
            .await;
        assert_eq!(refused.expect_problem(422, "validation_failed").body["errors"][0]["field"], "expires_in");
    }
    let placed = app
        .post(
            &format!("/v1/listings/{}/bids", deal.listing),
            &deal.buyer.key,
            json!({ "amount": 80000, "expires_in": 60 }),
        )
        .await
        .expect(201);
    let lifetime: f64 =
        sqlx::query_scalar("SELECT extract(epoch FROM expires_at - created_at)::float8 FROM bids WHERE id = $1::uuid")
            .bind(placed.body["bid"]["id"].as_str().unwrap())
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(lifetime, 60.0);
    let counter = app.counter(&deal.seller, placed.body["bid"]["id"].as_str().unwrap(), 99000).await;
    let lifetime: f64 =
        sqlx::query_scalar("SELECT extract(epoch FROM expires_at - created_at)::float8 FROM bids WHERE id = $1::uuid")
            .bind(&counter)
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(lifetime, 600.0, "the listing's default");
}

#[tokio::test]
async fn the_sweeper_forgets_old_idempotency_records() {
    let app = TestApp::spawn().await;
    let seller = app.register("seller").await;
    let body = json!({ "title": "Desk", "ask_amount": 1000 });
    let created = app.post_keyed("/v1/listings", Some(&seller.key), body.clone(), "old-key").await.expect(201);
    sqlx::query("UPDATE idempotency_keys SET created_at = now() - interval '25 hours'")
        .execute(&app.pool)
        .await
        .unwrap();
    let outcome = haggle_server::sweeper::run_once(&app.market(), 500).await.unwrap();
    assert_eq!(outcome.purged_idempotency_keys, 1);
    // The key is free again: the same request creates a second listing.
    let again = app.post_keyed("/v1/listings", Some(&seller.key), body, "old-key").await.expect(201);
    assert_ne!(created.id(), again.id());
}

#[tokio::test]
async fn an_answer_that_waited_past_the_deadline_fails_as_expired() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let bid = app.place(&deal.buyer, &deal.listing, 80000).await;

    // Hold the listing, so the seller's accept begins its transaction and then waits.
    let blocker = app.hold_listing(&deal.listing).await;
    let accept = app.post_empty(format!("/v1/bids/{bid}/accept"), &deal.seller.key);
    let deadline_passes_while_waiting = async {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let started: chrono::DateTime<chrono::Utc> = loop {
            let waiting = sqlx::query_scalar(
                "SELECT xact_start FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
            )
            .fetch_optional(&app.pool)
            .await
            .unwrap();
            if let Some(started) = waiting {
                break started;
            }
            assert!(std::time::Instant::now() < deadline, "the accept never waited for the listing");
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        };
        // The bid was live when the accept's transaction began, and is past its time now.
        for table in ["bids", "threads"] {
            let column = if table == "bids" { "id" } else { "last_bid_id" };
            sqlx::query(&format!(
                "UPDATE {table} SET expires_at = $2 + interval '1 microsecond' WHERE {column} = $1::uuid"
            ))
            .bind(&bid)
            .bind(started)
            .execute(&app.pool)
            .await
            .unwrap();
        }
        blocker.commit().await.unwrap();
    };
    let (answer, ()) = tokio::join!(accept, deadline_passes_while_waiting);
    answer.expect_problem(409, "bid_expired");
    assert_eq!(stored(&app, &bid).await, ("EXPIRED".into(), "EXPIRED".into()));
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 0);
}
