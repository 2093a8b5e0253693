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

#[tokio::test]
async fn a_duplicate_while_the_first_is_running_is_told_to_wait() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let path = format!("/v1/listings/{}/bids", deal.listing);

    // Hold the listing so the first request stops inside its transaction, key lock taken.
    let blocker = app.hold_listing(&deal.listing).await;
    let first = {
        let app = &app;
        let path = path.clone();
        let buyer = deal.buyer.clone();
        async move { post_with_key(app, &path, Some(&buyer), json!({ "amount": 80000 }), "slow").await }
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
        let duplicate = post_with_key(&app, &path, Some(&deal.buyer), json!({ "amount": 80000 }), "slow").await;
        blocker.commit().await.unwrap();
        duplicate
    };
    let (first, duplicate) = tokio::join!(first, duplicate);
    duplicate.expect_problem(409, "idempotency_key_in_use");
    let first = first.expect(201);
    let replay = post_with_key(&app, &path, Some(&deal.buyer), json!({ "amount": 80000 }), "slow").await.expect(201);
    assert_eq!(replay.body, first.body);
    assert_eq!(app.count("SELECT count(*) FROM threads").await, 1);
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
