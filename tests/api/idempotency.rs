//! Idempotency-Key: replays, reuse with another body, and a duplicate while the first is running.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{Agent, Body, Deal, Resp, TestApp};

async fn post_with_key(app: &TestApp, path: &str, agent: Option<&Agent>, body: Value, key: &str) -> Resp {
    app.post_keyed(path, agent.map(|a| a.key.as_str()), body, key).await
}

#[tokio::test]
async fn a_retry_replays_the_first_response() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let path = format!("/v1/listings/{}/bids", deal.listing);
    let first = post_with_key(&app, &path, Some(&deal.buyer), json!({ "amount": 80000 }), "place-1").await.expect(201);
    assert_eq!(first.header("idempotent-replayed"), None);
    let again = post_with_key(&app, &path, Some(&deal.buyer), json!({ "amount": 80000 }), "place-1").await.expect(201);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.body, first.body);
    assert_eq!(app.count("SELECT count(*) FROM threads").await, 1);

    // Refusals are remembered too.
    let bid = first.body["bid"]["id"].as_str().unwrap();
    let counter_path = format!("/v1/bids/{bid}/counter");
    let refused = post_with_key(&app, &counter_path, Some(&deal.seller), json!({ "amount": 1 }), "c").await;
    let refused = refused.expect_problem(422, "validation_failed");
    let replayed = post_with_key(&app, &counter_path, Some(&deal.seller), json!({ "amount": 1 }), "c").await;
    assert_eq!((replayed.status, replayed.header("idempotent-replayed")), (422, Some("true")));
    // The same document, but for its request_id, which names the retry (as its header does).
    let without_id = |mut body: Value| {
        body.as_object_mut().unwrap().remove("request_id");
        body
    };
    assert_ne!(replayed.body["request_id"], refused.body["request_id"]);
    assert_eq!(without_id(replayed.body), without_id(refused.body));
}

#[tokio::test]
async fn the_same_key_with_another_request_is_refused() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let path = format!("/v1/listings/{}/bids", deal.listing);
    post_with_key(&app, &path, Some(&deal.buyer), json!({ "amount": 80000 }), "k").await.expect(201);
    let before = app.snapshot().await;
    post_with_key(&app, &path, Some(&deal.buyer), json!({ "amount": 81000 }), "k")
        .await
        .expect_problem(422, "idempotency_key_reused");
    let other_route = format!("/v1/listings/{}/purchase", deal.listing);
    app.send(Method::POST, &other_route, Some(&deal.buyer.key), Body::None, &[("idempotency-key", "k")])
        .await
        .expect_problem(422, "idempotency_key_reused");
    assert_eq!(app.snapshot().await, before);
}

/// A replay is answered only once its transaction has let go of the key: the caller's very next
/// request with that key, a replay or another body, finds it free, never "still being processed".
#[tokio::test]
async fn a_replay_lets_go_of_the_key_before_it_answers() {
    let app = TestApp::spawn().await;
    let seller = app.register("seller").await;
    for round in 0..40 {
        let key = format!("listing-{round}");
        let body = json!({ "title": "Desk", "ask_amount": 1000 });
        let first = post_with_key(&app, "/v1/listings", Some(&seller), body.clone(), &key).await.expect(201);
        let replayed = post_with_key(&app, "/v1/listings", Some(&seller), body.clone(), &key).await.expect(201);
        assert_eq!((replayed.header("idempotent-replayed"), replayed.id()), (Some("true"), first.id()));
        let again = post_with_key(&app, "/v1/listings", Some(&seller), body, &key).await.expect(201);
        assert_eq!(again.id(), first.id());
        post_with_key(&app, "/v1/listings", Some(&seller), json!({ "title": "Lamp", "ask_amount": 1000 }), &key)
            .await
            .expect_problem(422, "idempotency_key_reused");
        post_with_key(&app, "/v1/listings", Some(&seller), json!({ "title": "Lamp", "ask_amount": 1000 }), &key)
            .await
            .expect_problem(422, "idempotency_key_reused");
    }
    assert_eq!(app.count("SELECT count(*) FROM listings").await, 40);
}

#[tokio::test]
async fn keys_belong_to_one_agent() {
    let app = TestApp::spawn().await;
    let seller = app.register("seller").await;
    let other = app.register("other").await;
    let body = json!({ "title": "Desk", "ask_amount": 1000 });
    let mine = post_with_key(&app, "/v1/listings", Some(&seller), body.clone(), "shared").await.expect(201);
    let theirs = post_with_key(&app, "/v1/listings", Some(&other), body, "shared").await.expect(201);
    assert_ne!(mine.id(), theirs.id());
    assert_eq!(theirs.header("idempotent-replayed"), None);
}

/// Waits until a statement of the app waits for a lock: the first request has reached the held row.
async fn until_a_lock_is_awaited(app: &TestApp) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let waiting =
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'";
    while app.count(waiting).await == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the first request never reached the held row");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_duplicate_while_the_first_is_running_is_told_to_wait() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let placed = app.post(format!("/v1/listings/{}/bids", deal.listing), &deal.buyer.key, json!({ "amount": 80000 }));
    let bid = placed.await.expect(201).body["bid"]["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/bids/{bid}/accept");

    // An acceptance is made in a transaction that claims its key first; hold the listing so the
    // first request stops inside it, key lock taken.
    let blocker = app.hold_listing(&deal.listing).await;
    let first = {
        let app = &app;
        let path = path.clone();
        let seller = deal.seller.clone();
        async move { post_with_key(app, &path, Some(&seller), json!({}), "slow").await }
    };
    let duplicate = async {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while app
            .count("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")
            .await
            == 0
        {
            assert!(tokio::time::Instant::now() < deadline, "the first request never took the key");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let duplicate = post_with_key(&app, &path, Some(&deal.seller), json!({}), "slow").await;
        blocker.commit().await.unwrap();
        duplicate
    };
    let (first, duplicate) = tokio::join!(first, duplicate);
    duplicate.expect_problem(409, "idempotency_key_in_use");
    let first = first.expect(200);
    let replay = post_with_key(&app, &path, Some(&deal.seller), json!({}), "slow").await.expect(200);
    assert_eq!(replay.body, first.body);
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 1);
}

#[tokio::test]
async fn a_keyed_move_made_in_one_statement_stores_its_answer_with_it() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let path = format!("/v1/listings/{}/bids", deal.listing);

    // A placement and its duplicate, sent while the listing is held: the first waits in its
    // statement, and the duplicate, which cannot be made beside it, is answered with its answer.
    let blocker = app.hold_listing(&deal.listing).await;
    let first = post_with_key(&app, &path, Some(&deal.buyer), json!({ "amount": 80000 }), "held");
    let duplicate = async {
        until_a_lock_is_awaited(&app).await;
        let duplicate = post_with_key(&app, &path, Some(&deal.buyer), json!({ "amount": 80000 }), "held");
        let release = async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            blocker.commit().await.unwrap();
        };
        tokio::join!(duplicate, release).0
    };
    let (first, duplicate) = tokio::join!(first, duplicate);
    let first = first.expect(201);
    let duplicate = duplicate.expect(201);
    assert_eq!(duplicate.body, first.body);
    assert_eq!(duplicate.header("idempotent-replayed"), Some("true"));
    assert_eq!(app.count("SELECT count(*) FROM threads").await, 1);
    assert_eq!(app.count("SELECT count(*) FROM idempotency_keys").await, 1);

    // A counter the same way: the stored answer is the one sent, byte for byte.
    let bid = first.body["bid"]["id"].as_str().unwrap();
    let counter_path = format!("/v1/bids/{bid}/counter");
    let countered = post_with_key(&app, &counter_path, Some(&deal.seller), json!({ "amount": 95000 }), "c-1").await;
    let countered = countered.expect(201);
    let stored: Vec<Vec<u8>> =
        sqlx::query_scalar("SELECT body FROM idempotency_keys").fetch_all(&app.pool).await.unwrap();
    let stored: Vec<Value> = stored.iter().map(|body| serde_json::from_slice(body).unwrap()).collect();
    assert!(stored.contains(&countered.body), "the counter's answer is stored as it was sent");
    let again = post_with_key(&app, &counter_path, Some(&deal.seller), json!({ "amount": 95000 }), "c-1").await;
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.expect(201).body, countered.body);
    assert_eq!(app.count("SELECT count(*) FROM bids").await, 2);

    // An acceptance the same way, on a listing with units to spare: its answer, the order
    // included, is stored with it.
    let stock = app.listing(&deal.seller, json!({ "quantity": 5 })).await;
    let opening = app.place(&deal.buyer, &stock, 80000).await;
    let accept_path = format!("/v1/bids/{opening}/accept");
    let accepted = post_with_key(&app, &accept_path, Some(&deal.seller), json!({}), "a-1").await.expect(200);
    assert_eq!(accepted.body["order"]["amount"], 80000);
    let stored: Vec<u8> = sqlx::query_scalar("SELECT body FROM idempotency_keys WHERE status_code = 200")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&stored).unwrap(), accepted.body);
    let again = post_with_key(&app, &accept_path, Some(&deal.seller), json!({}), "a-1").await;
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.expect(200).body, accepted.body);
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 1);

    // The same key, resent once the bid it answered was countered, is still its first answer; and
    // once past the retention period, the key is free for a new request.
    sqlx::query("UPDATE idempotency_keys SET created_at = now() - interval '25 hours'")
        .execute(&app.pool)
        .await
        .unwrap();
    let counter = countered.body["bid"]["id"].as_str().unwrap();
    let later = format!("/v1/bids/{counter}/counter");
    post_with_key(&app, &later, Some(&deal.buyer), json!({ "amount": 85000 }), "held").await.expect(201);
    assert_eq!(app.count("SELECT count(*) FROM bids").await, 4);
}

#[tokio::test]
async fn registration_replays_its_key_without_storing_it_in_clear() {
    let app = TestApp::spawn().await;
    let register = || {
        let key = "register-0b9c6d2e-8f41-4a57-9e3b-7f3a51c2d680";
        post_with_key(&app, "/v1/agents", None, json!({ "name": "bot" }), key)
    };
    let first = register().await.expect(201);
    let again = register().await.expect(201);
    assert_eq!(again.body, first.body);
    assert_eq!(app.count("SELECT count(*) FROM agents").await, 1);
    let key = first.body["api_key"].as_str().unwrap();
    let stored: Vec<u8> = sqlx::query_scalar("SELECT body FROM idempotency_keys").fetch_one(&app.pool).await.unwrap();
    assert!(!stored.windows(key.len()).any(|window| window == key.as_bytes()), "the key is stored sealed");
    // The replayed key works.
    app.get("/v1/agents/me", key).await.expect(200);
    // Without an agent, only a key too long to guess is accepted.
    post_with_key(&app, "/v1/agents", None, json!({ "name": "bot" }), "short-key")
        .await
        .expect_problem(400, "malformed_request");
    assert_eq!(app.count("SELECT count(*) FROM agents").await, 1);
}

#[tokio::test]
async fn an_invalid_key_header_is_refused() {
    let app = TestApp::spawn().await;
    let seller = app.register("seller").await;
    let long = "k".repeat(256);
    for key in [long.as_str(), "has space"] {
        app.send(
            Method::POST,
            "/v1/listings",
            Some(&seller.key),
            Body::Json(json!({ "title": "x", "ask_amount": 100 })),
            &[("idempotency-key", key)],
        )
        .await
        .expect_problem(400, "malformed_request");
    }
    assert_eq!(app.count("SELECT count(*) FROM listings").await, 0);
}
