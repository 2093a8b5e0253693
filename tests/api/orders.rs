//! An order's life after the handshake over HTTP: fulfilment, completion by the buyer and by
//! the sweeper, the payments ledger, and every refusal with nothing changed.

use std::time::Duration;

use serde_json::{Value, json};

use crate::events::{events_after, types};
use crate::support::{Agent, Body, Deal, TestApp};

/// A deal on a listing asking 100000, and the order of the buyer's purchase at the ask.
async fn purchased(app: &TestApp) -> (Deal, String) {
    let deal = Deal::new(app, json!({})).await;
    let resp = app.post_empty(format!("/v1/listings/{}/purchase", deal.listing), &deal.buyer.key).await.expect(201);
    let order = resp.body["order"]["id"].as_str().unwrap().to_owned();
    assert_eq!(resp.body["order"]["status"], "CONFIRMED");
    assert_eq!(resp.body["order"]["paid_amount"], 0);
    assert_eq!(resp.body["order"]["outstanding"], 100000);
    assert_eq!(resp.body["order"]["fulfilment"], Value::Null);
    (deal, order)
}

async fn pay(app: &TestApp, buyer: &Agent, order: &str, amount: i64, reference: &str) -> String {
    let body = json!({ "amount": amount, "reference": reference });
    app.post(format!("/v1/orders/{order}/payments"), &buyer.key, body).await.expect(201).body["payment"]["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn an_order_is_fulfilled_paid_in_parts_and_completed() {
    let app = TestApp::spawn().await;
    let (deal, order) = purchased(&app).await;
    let path = |action: &str| format!("/v1/orders/{order}/{action}");

    // Only the seller fulfils, and the buyer completes only what was fulfilled.
    app.post_empty(path("fulfil"), &deal.buyer.key).await.expect_problem(403, "forbidden");
    let early = app.post_empty(path("complete"), &deal.buyer.key).await.expect_problem(409, "invalid_transition");
    assert_eq!(early.body["current_status"], "CONFIRMED");
    let fulfilled = app
        .post(path("fulfil"), &deal.seller.key, json!({ "reference": "TRACK-1234", "note": "left with the porter" }))
        .await
        .expect(200);
    assert_eq!(fulfilled.body["status"], "FULFILLED");
    assert_eq!(fulfilled.body["fulfilment"]["reference"], "TRACK-1234");
    assert_eq!(fulfilled.body["fulfilment"]["note"], "left with the porter");
    assert_eq!(fulfilled.body["payments"], json!([]));
    let again = app.post_empty(path("fulfil"), &deal.seller.key).await.expect_problem(409, "invalid_transition");
    assert_eq!(again.body["current_status"], "FULFILLED");

    // Payments: recorded by the buyer, answered by the seller, never past the order's amount.
    let body = json!({ "amount": 60000, "reference": "ch_1" });
    app.post(path("payments"), &deal.seller.key, body).await.expect_problem(403, "forbidden");
    let first = pay(&app, &deal.buyer, &order, 60000, "ch_1").await;
    let confirm = |payment: &str| format!("/v1/orders/{order}/payments/{payment}/confirm");
    let dispute = |payment: &str| format!("/v1/orders/{order}/payments/{payment}/dispute");
    app.post_empty(confirm(&first), &deal.buyer.key).await.expect_problem(403, "forbidden");
    let confirmed = app.post_empty(confirm(&first), &deal.seller.key).await.expect(200);
    assert_eq!(confirmed.body["payment"]["status"], "CONFIRMED");
    assert_eq!(confirmed.body["order"]["paid_amount"], 60000);
    assert_eq!(confirmed.body["order"]["outstanding"], 40000);
    app.post_empty(confirm(&first), &deal.seller.key).await.expect_problem(409, "invalid_transition");
    let over = app
        .post(path("payments"), &deal.buyer.key, json!({ "amount": 40001, "reference": "ch_2" }))
        .await
        .expect_problem(409, "exceeds_outstanding");
    assert_eq!(over.body["outstanding"], 40000);

    let bounced = pay(&app, &deal.buyer, &order, 40000, "ch_2").await;
    app.post(dispute(&bounced), &deal.buyer.key, json!({ "reason": "x" })).await.expect_problem(403, "forbidden");
    let disputed =
        app.post(dispute(&bounced), &deal.seller.key, json!({ "reason": "the charge was reversed" })).await.expect(200);
    assert_eq!(disputed.body["payment"]["status"], "DISPUTED");
    assert_eq!(disputed.body["payment"]["dispute_reason"], "the charge was reversed");
    assert_eq!(disputed.body["order"]["paid_amount"], 60000);
    app.post_empty(confirm(&bounced), &deal.seller.key).await.expect_problem(409, "invalid_transition");
    let last = pay(&app, &deal.buyer, &order, 40000, "ch_3").await;
    app.post_empty(confirm(&last), &deal.seller.key).await.expect(200);

    app.post_empty(path("complete"), &deal.seller.key).await.expect_problem(403, "forbidden");
    let completed = app.post_empty(path("complete"), &deal.buyer.key).await.expect(200);
    assert_eq!(completed.body["status"], "COMPLETED");
    assert!(completed.body["completed_at"].is_string());
    app.post_empty(path("complete"), &deal.buyer.key).await.expect_problem(409, "invalid_transition");

    let read = app.get(format!("/v1/orders/{order}"), &deal.seller.key).await.expect(200);
    assert_eq!((read.body["paid_amount"].as_i64(), read.body["outstanding"].as_i64()), (Some(100000), Some(0)));
    let statuses: Vec<&str> =
        read.body["payments"].as_array().unwrap().iter().map(|p| p["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["CONFIRMED", "DISPUTED", "CONFIRMED"]);
    let listed = app.get("/v1/orders?role=buyer", &deal.buyer.key).await.expect(200);
    assert_eq!(listed.body["data"][0]["status"], "COMPLETED");

    // Both parties heard every step, in order.
    let expected = [
        "order.created",
        "order.fulfilled",
        "payment.recorded",
        "payment.confirmed",
        "payment.recorded",
        "payment.disputed",
        "payment.recorded",
        "payment.confirmed",
        "order.completed",
    ];
    for agent in [&deal.buyer, &deal.seller] {
        let events = events_after(&app, agent, 0, 0).await;
        let about_order: Vec<&Value> = events.iter().filter(|e| e["order_id"] == order.as_str()).collect();
        let kinds: Vec<&str> = about_order.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(kinds, expected);
        assert_eq!(about_order[3]["data"]["payment"]["id"], first.as_str());
        assert_eq!(about_order[3]["data"]["order"]["paid_amount"], 60000);
    }
}

#[tokio::test]
async fn an_order_made_by_an_accepted_bid_has_the_same_life() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let bid = app.place(&deal.buyer, &deal.listing, 90000).await;
    let accepted = app.post_empty(format!("/v1/bids/{bid}/accept"), &deal.seller.key).await.expect(200);
    let order = accepted.body["order"]["id"].as_str().unwrap().to_owned();
    assert_eq!(accepted.body["order"]["outstanding"], 90000);
    let over = app
        .post(format!("/v1/orders/{order}/payments"), &deal.buyer.key, json!({ "amount": 90001, "reference": "x" }))
        .await
        .expect_problem(409, "exceeds_outstanding");
    assert_eq!(over.body["outstanding"], 90000);
    pay(&app, &deal.buyer, &order, 90000, "whole").await;
    app.post_empty(format!("/v1/orders/{order}/fulfil"), &deal.seller.key).await.expect(200);
    app.post_empty(format!("/v1/orders/{order}/complete"), &deal.buyer.key).await.expect(200);
}

#[tokio::test]
async fn nobody_else_touches_an_order_and_bad_input_changes_nothing() {
    let app = TestApp::spawn().await;
    let (deal, order) = purchased(&app).await;
    let payment = pay(&app, &deal.buyer, &order, 10000, "ch_1").await;
    let (_, other_order) = purchased(&app).await;
    let outsider = app.register("outsider").await;
    let before = app.snapshot().await;

    // Another agent's order does not exist for the outsider, by any route.
    app.get(format!("/v1/orders/{order}"), &outsider.key).await.expect_problem(404, "not_found");
    for action in ["fulfil", "complete"] {
        app.post_empty(format!("/v1/orders/{order}/{action}"), &outsider.key).await.expect_problem(404, "not_found");
    }
    let body = json!({ "amount": 1000, "reference": "mine" });
    app.post(format!("/v1/orders/{order}/payments"), &outsider.key, body).await.expect_problem(404, "not_found");
    app.post_empty(format!("/v1/orders/{order}/payments/{payment}/confirm"), &outsider.key)
        .await
        .expect_problem(404, "not_found");
    // A payment of another order is no payment of this one.
    app.post_empty(format!("/v1/orders/{other_order}/payments/{payment}/confirm"), &deal.seller.key)
        .await
        .expect_problem(404, "not_found");
    app.post_empty(format!("/v1/orders/{order}/payments/{}/confirm", uuid::Uuid::now_v7()), &deal.seller.key)
        .await
        .expect_problem(404, "not_found");

    // Hostile bodies and paths.
    let payments = format!("/v1/orders/{order}/payments");
    let malformed = [
        Body::Raw(b"{not json".to_vec()),
        Body::Json(json!({ "amount": "1000", "reference": "r" })),
        Body::Json(json!({ "amount": 1000, "reference": "r", "extra": true })),
        Body::Json(json!([1000, "r"])),
        Body::None,
    ];
    for body in malformed {
        let resp = app.send(reqwest::Method::POST, &payments, Some(&deal.buyer.key), body, &[]).await;
        resp.expect_problem(400, "malformed_request");
    }
    let invalid = app
        .post(&payments, &deal.buyer.key, json!({ "amount": 99.5, "reference": " " }))
        .await
        .expect_problem(422, "validation_failed");
    let fields: Vec<&str> =
        invalid.body["errors"].as_array().unwrap().iter().map(|e| e["field"].as_str().unwrap()).collect();
    assert_eq!(fields, ["amount", "reference"]);
    app.post(&payments, &deal.buyer.key, json!({ "amount": 0, "reference": "r" }))
        .await
        .expect_problem(422, "validation_failed");
    app.post(&payments, &deal.buyer.key, json!({ "reference": "r" })).await.expect_problem(422, "validation_failed");
    let long = "x".repeat(201);
    let fulfil = format!("/v1/orders/{order}/fulfil");
    let resp = app.post(&fulfil, &deal.seller.key, json!({ "reference": long })).await;
    assert_eq!(resp.expect_problem(422, "validation_failed").body["errors"][0]["field"], "reference");
    app.post(&fulfil, &deal.seller.key, json!({ "tracking": "x" })).await.expect_problem(400, "malformed_request");
    app.post(format!("/v1/orders/{order}/payments/{payment}/dispute"), &deal.seller.key, json!({ "reason": "" }))
        .await
        .expect_problem(422, "validation_failed");
    app.post_empty(format!("/v1/orders/{order}/payments/not-a-uuid/confirm"), &deal.seller.key)
        .await
        .expect_problem(400, "malformed_request");
    app.post_empty("/v1/orders/nope/complete", &deal.buyer.key).await.expect_problem(400, "malformed_request");

    assert_eq!(app.snapshot().await, before, "a refused request changed something");
}

#[tokio::test]
async fn a_fulfilment_or_payment_is_made_once_under_one_idempotency_key() {
    let app = TestApp::spawn().await;
    let (deal, order) = purchased(&app).await;
    let payments = format!("/v1/orders/{order}/payments");
    let body = json!({ "amount": 30000, "reference": "ch_1" });
    let first = app.post_keyed(&payments, Some(&deal.buyer.key), body.clone(), "pay-1").await.expect(201);
    let replay = app.post_keyed(&payments, Some(&deal.buyer.key), body, "pay-1").await.expect(201);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.body, first.body);
    assert_eq!(app.count("SELECT count(*) FROM payments").await, 1);
    let fulfil = format!("/v1/orders/{order}/fulfil");
    app.post_keyed(&fulfil, Some(&deal.seller.key), json!({}), "ship-1").await.expect(200);
    let again = app.post_keyed(&fulfil, Some(&deal.seller.key), json!({}), "ship-1").await.expect(200);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
}

#[tokio::test]
async fn the_sweeper_completes_what_the_buyer_left_alone() {
    let app = TestApp::spawn().await;
    let (deal, order) = purchased(&app).await;
    let (_, unfulfilled) = purchased(&app).await;
    app.post_empty(format!("/v1/orders/{order}/fulfil"), &deal.seller.key).await.expect(200);
    let two_weeks = Duration::from_secs(14 * 24 * 3600);
    let market = app.market();
    let complete = || haggle_server::sweeper::complete_orders(&market, two_weeks, 100);
    assert_eq!(complete().await.unwrap(), 0, "fulfilled just now");

    sqlx::query("UPDATE orders SET fulfilled_at = now() - interval '15 days' WHERE id = $1::uuid")
        .bind(&order)
        .execute(&app.pool)
        .await
        .unwrap();
    assert_eq!(complete().await.unwrap(), 1);
    assert_eq!(complete().await.unwrap(), 0, "completed once");
    let read = app.get(format!("/v1/orders/{order}"), &deal.buyer.key).await.expect(200);
    assert_eq!(read.body["status"], "COMPLETED");
    let status: String = sqlx::query_scalar("SELECT status FROM orders WHERE id = $1::uuid")
        .bind(&unfulfilled)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(status, "CONFIRMED", "an order never fulfilled is never completed by the server");
    app.post_empty(format!("/v1/orders/{order}/complete"), &deal.buyer.key)
        .await
        .expect_problem(409, "invalid_transition");

    let events = events_after(&app, &deal.buyer, 0, 0).await;
    let about_order: Vec<Value> = events.into_iter().filter(|e| e["order_id"] == order.as_str()).collect();
    assert_eq!(types(&about_order), ["order.created", "order.fulfilled", "order.completed"]);
}
