//! Threads and bids through HTTP: the main paths and every rule of the state machine.

use serde_json::json;

use crate::support::{Deal, TestApp};

#[tokio::test]
async fn a_negotiation_runs_from_bid_to_order() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "ask_amount": 138000, "quantity": 2 })).await;

    let placed = app
        .post(
            &format!("/v1/listings/{}/bids", deal.listing),
            &deal.buyer.key,
            json!({ "amount": 120000, "message": "Is this still available?", "terms": { "delivery_days": 5 } }),
        )
        .await
        .expect(201);
    let opening = placed.body["bid"]["id"].as_str().unwrap().to_owned();
    let thread = placed.body["thread"]["id"].as_str().unwrap().to_owned();
    assert_eq!(placed.body["bid"]["status"], "PENDING");
    assert_eq!(placed.body["bid"]["round"], 1);
    assert_eq!(placed.body["thread"]["turn"], "seller");

    let countered =
        app.post(format!("/v1/bids/{opening}/counter"), &deal.seller.key, json!({ "amount": 135000 })).await;
    let countered = countered.expect(201);
    let seller_bid = countered.body["bid"]["id"].as_str().unwrap().to_owned();
    assert_eq!(countered.body["bid"]["parent_bid_id"], opening.as_str());
    assert_eq!(countered.body["bid"]["terms"], json!({ "delivery_days": 5 }), "terms carry over");
    assert_eq!(countered.body["thread"]["turn"], "buyer");
    assert_eq!(app.get(format!("/v1/bids/{opening}"), &deal.buyer.key).await.expect(200).body["status"], "COUNTERED");

    let buyer_bid = app.counter(&deal.buyer, &seller_bid, 130000).await;
    let accepted = app.post_empty(format!("/v1/bids/{buyer_bid}/accept"), &deal.seller.key).await.expect(200);
    assert_eq!(accepted.body["bid"]["status"], "ACCEPTED");
    assert_eq!(accepted.body["thread"]["status"], "ACCEPTED");
    assert_eq!(accepted.body["thread"]["turn"], serde_json::Value::Null);
    let order = &accepted.body["order"];
    assert_eq!(order["amount"], 130000);
    assert_eq!(order["terms"], json!({ "delivery_days": 5 }));
    assert_eq!(order["status"], "CONFIRMED");
    let order_id = order["id"].as_str().unwrap();

    for agent in [&deal.buyer, &deal.seller] {
        let read = app.get(format!("/v1/orders/{order_id}"), &agent.key).await.expect(200);
        assert_eq!(read.body["bid_id"], buyer_bid.as_str());
    }
    let full = app.get(format!("/v1/threads/{thread}"), &deal.buyer.key).await.expect(200);
    let statuses: Vec<_> = full.body["bids"].as_array().unwrap().iter().map(|b| b["status"].clone()).collect();
    assert_eq!(statuses, ["COUNTERED", "COUNTERED", "ACCEPTED"]);
    assert_eq!(full.body["rounds"], 3);
    let listing = app.get(format!("/v1/listings/{}", deal.listing), &deal.buyer.key).await.expect(200);
    assert_eq!(
        (listing.body["quantity_available"].as_i64(), listing.body["status"].as_str()),
        (Some(1), Some("ACTIVE"))
    );
}

#[tokio::test]
async fn counters_must_concede_and_stay_between_the_positions() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "ask_amount": 100000 })).await;
    let opening = app.place(&deal.buyer, &deal.listing, 80000).await;

    for (amount, min, max) in [(80000, 80001, 100000), (100001, 80001, 100000)] {
        let refused =
            app.post(format!("/v1/bids/{opening}/counter"), &deal.seller.key, json!({ "amount": amount })).await;
        let refused = refused.expect_problem(422, "not_a_concession");
        assert_eq!((refused.body["min_amount"].as_i64(), refused.body["max_amount"].as_i64()), (Some(min), Some(max)));
    }
    let seller_bid = app.counter(&deal.seller, &opening, 95000).await;
    for amount in [79999, 95000, 96000] {
        app.post(format!("/v1/bids/{seller_bid}/counter"), &deal.buyer.key, json!({ "amount": amount }))
            .await
            .expect_problem(422, "not_a_concession");
    }
    // Standing still is allowed for the buyer; the seller may not go back above its last price.
    let buyer_bid = app.counter(&deal.buyer, &seller_bid, 80000).await;
    app.post(format!("/v1/bids/{buyer_bid}/counter"), &deal.seller.key, json!({ "amount": 95001 }))
        .await
        .expect_problem(422, "not_a_concession");
    app.counter(&deal.seller, &buyer_bid, 95000).await;
}

#[tokio::test]
async fn an_opening_bid_cannot_exceed_the_ask() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "ask_amount": 100000 })).await;
    let refused = app.post(format!("/v1/listings/{}/bids", deal.listing), &deal.buyer.key, json!({ "amount": 100001 }));
    let refused = refused.await.expect_problem(422, "validation_failed");
    assert_eq!(refused.body["errors"][0]["field"], "amount");
    app.place(&deal.buyer, &deal.listing, 100000).await;
}

#[tokio::test]
async fn final_offers_can_only_be_accepted_or_rejected() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let opening = app.place(&deal.buyer, &deal.listing, 80000).await;
    let last =
        app.post(format!("/v1/bids/{opening}/counter"), &deal.seller.key, json!({ "amount": 90000, "final": true }));
    let last = last.await.expect(201);
    assert_eq!(last.body["bid"]["final"], true);
    let last_id = last.body["bid"]["id"].as_str().unwrap();
    let refused = app.post(format!("/v1/bids/{last_id}/counter"), &deal.buyer.key, json!({ "amount": 85000 })).await;
    assert_eq!(refused.expect_problem(409, "final_offer").body["current_status"], "PENDING");
    app.post_empty(format!("/v1/bids/{last_id}/accept"), &deal.buyer.key).await.expect(200);
}

#[tokio::test]
async fn the_bid_reaching_max_rounds_is_final() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "max_rounds": 3 })).await;
    let b1 = app.place(&deal.buyer, &deal.listing, 80000).await;
    let b2 = app.counter(&deal.seller, &b1, 95000).await;
    let third = app.post(format!("/v1/bids/{b2}/counter"), &deal.buyer.key, json!({ "amount": 85000 })).await;
    let third = third.expect(201);
    assert_eq!((third.body["bid"]["round"].as_i64(), third.body["bid"]["final"].as_bool()), (Some(3), Some(true)));
    let b3 = third.body["bid"]["id"].as_str().unwrap();
    app.post(format!("/v1/bids/{b3}/counter"), &deal.seller.key, json!({ "amount": 90000 }))
        .await
        .expect_problem(409, "final_offer");
    app.post_empty(format!("/v1/bids/{b3}/reject"), &deal.seller.key).await.expect(200);
}

#[tokio::test]
async fn only_the_responder_answers_and_only_the_author_withdraws() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let opening = app.place(&deal.buyer, &deal.listing, 80000).await;
    for action in ["accept", "reject"] {
        let refused = app
            .post_empty(format!("/v1/bids/{opening}/{action}"), &deal.buyer.key)
            .await
            .expect_problem(403, "not_your_turn");
        assert_eq!(refused.body["turn"], "seller", "the refusal names whose move it is");
    }
    app.post(format!("/v1/bids/{opening}/counter"), &deal.buyer.key, json!({ "amount": 85000 }))
        .await
        .expect_problem(403, "not_your_turn");
    app.post_empty(format!("/v1/bids/{opening}/withdraw"), &deal.seller.key).await.expect_problem(403, "forbidden");

    let withdrawn = app.post_empty(format!("/v1/bids/{opening}/withdraw"), &deal.buyer.key).await.expect(200);
    assert_eq!(
        (withdrawn.body["bid"]["status"].as_str(), withdrawn.body["bid"]["reason"].as_str()),
        (Some("REJECTED"), Some("withdrawn"))
    );
    assert_eq!(withdrawn.body["thread"]["status"], "REJECTED");
    assert_eq!(withdrawn.body["order"], serde_json::Value::Null);
    let again = app.post_empty(format!("/v1/bids/{opening}/accept"), &deal.seller.key).await;
    assert_eq!(again.expect_problem(409, "invalid_transition").body["current_status"], "REJECTED");
}

#[tokio::test]
async fn one_active_thread_per_buyer_and_a_limit_on_threads() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "max_threads_per_buyer": 2 })).await;
    let first = app.place(&deal.buyer, &deal.listing, 80000).await;
    let busy =
        app.post(format!("/v1/listings/{}/bids", deal.listing), &deal.buyer.key, json!({ "amount": 81000 })).await;
    let busy = busy.expect_problem(409, "thread_active");
    assert!(busy.body["thread_id"].is_string());
    app.post_empty(format!("/v1/bids/{first}/reject"), &deal.seller.key).await.expect(200);
    let second = app.place(&deal.buyer, &deal.listing, 82000).await;
    app.post_empty(format!("/v1/bids/{second}/withdraw"), &deal.buyer.key).await.expect(200);
    let limited = app.post(format!("/v1/listings/{}/bids", deal.listing), &deal.buyer.key, json!({ "amount": 83000 }));
    assert_eq!(limited.await.expect_problem(409, "offer_limit_reached").body["limit"], 2);
}

#[tokio::test]
async fn tiers_below_the_listing_minimum_are_pointed_to_purchase() {
    let app = TestApp::spawn().await;
    let seller = app.register("seller").await;
    let public = app.register("public buyer").await;
    let seat = app.register("seat buyer").await;
    app.set_tier(&seat, "SEAT").await;
    let agency_only = app.listing(&seller, json!({})).await;
    let seat_ok = app.listing(&seller, json!({ "min_negotiation_tier": "SEAT" })).await;

    for buyer in [&public, &seat] {
        let refused =
            app.post(format!("/v1/listings/{agency_only}/bids"), &buyer.key, json!({ "amount": 90000 })).await;
        let refused = refused.expect_problem(403, "negotiation_not_allowed");
        assert_eq!(refused.body["purchase_url"], format!("/v1/listings/{agency_only}/purchase"));
        assert!(refused.body["detail"].as_str().unwrap().contains("purchase"));
    }
    app.post(format!("/v1/listings/{seat_ok}/bids"), &public.key, json!({ "amount": 90000 }))
        .await
        .expect_problem(403, "negotiation_not_allowed");
    app.place(&seat, &seat_ok, 90000).await;
    // Any tier may buy at the ask.
    let order = app.post_empty(format!("/v1/listings/{agency_only}/purchase"), &public.key).await.expect(201);
    assert_eq!(order.body["order"]["amount"], 100000);
    assert_eq!(order.body["order"]["thread_id"], serde_json::Value::Null);
}

#[tokio::test]
async fn a_listing_that_does_not_negotiate_still_sells() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "negotiable": false })).await;
    app.post(format!("/v1/listings/{}/bids", deal.listing), &deal.buyer.key, json!({ "amount": 90000 }))
        .await
        .expect_problem(403, "negotiation_not_allowed");
    app.post_empty(format!("/v1/listings/{}/purchase", deal.listing), &deal.buyer.key).await.expect(201);
}

#[tokio::test]
async fn sellers_cannot_bid_on_or_buy_their_own_listing() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    app.set_tier(&deal.seller, "ADVERTISER").await;
    app.post(format!("/v1/listings/{}/bids", deal.listing), &deal.seller.key, json!({ "amount": 90000 }))
        .await
        .expect_problem(403, "own_listing");
    app.post_empty(format!("/v1/listings/{}/purchase", deal.listing), &deal.seller.key)
        .await
        .expect_problem(403, "own_listing");
}

#[tokio::test]
async fn the_last_unit_sold_closes_the_other_threads() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "quantity": 2 })).await;
    let rival = app.buyer("rival").await;
    let shopper = app.register("shopper").await;
    let rival_bid = app.place(&rival, &deal.listing, 70000).await;
    let rival_counter = app.counter(&deal.seller, &rival_bid, 99000).await;
    let opening = app.place(&deal.buyer, &deal.listing, 90000).await;
    app.post_empty(format!("/v1/bids/{opening}/accept"), &deal.seller.key).await.expect(200);
    // One unit left: a purchase at the ask sells out the listing.
    app.post_empty(format!("/v1/listings/{}/purchase", deal.listing), &shopper.key).await.expect(201);

    let listing = app.get(format!("/v1/listings/{}", deal.listing), &rival.key).await.expect(200);
    assert_eq!((listing.body["status"].as_str(), listing.body["quantity_available"].as_i64()), (Some("SOLD"), Some(0)));
    let pending = app.get(format!("/v1/bids/{rival_counter}"), &rival.key).await.expect(200);
    assert_eq!(
        (pending.body["status"].as_str(), pending.body["reason"].as_str()),
        (Some("REJECTED"), Some("listing_sold"))
    );
    let thread = pending.body["thread_id"].as_str().unwrap();
    let thread = app.get(format!("/v1/threads/{thread}"), &rival.key).await.expect(200);
    assert_eq!(
        (thread.body["status"].as_str(), thread.body["closed_reason"].as_str()),
        (Some("CLOSED"), Some("listing_sold"))
    );

    app.post_empty(format!("/v1/listings/{}/purchase", deal.listing), &shopper.key)
        .await
        .expect_problem(409, "listing_unavailable");
    app.post(format!("/v1/listings/{}/bids", deal.listing), &rival.key, json!({ "amount": 90000 }))
        .await
        .expect_problem(409, "listing_unavailable");
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 2);
    assert_eq!(app.count("SELECT count(*) FROM bids WHERE status = 'PENDING'").await, 0);
}

#[tokio::test]
async fn withdrawing_a_listing_closes_its_threads() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let other = app.buyer("other").await;
    let opening = app.place(&deal.buyer, &deal.listing, 80000).await;
    let other_opening = app.place(&other, &deal.listing, 85000).await;
    let seller_bid = app.counter(&deal.seller, &other_opening, 99000).await;

    app.post_empty(format!("/v1/listings/{}/withdraw", deal.listing), &other.key)
        .await
        .expect_problem(403, "forbidden");
    let withdrawn = app.post_empty(format!("/v1/listings/{}/withdraw", deal.listing), &deal.seller.key).await;
    assert_eq!(withdrawn.expect(200).body["status"], "WITHDRAWN");
    for (agent, bid) in [(&deal.buyer, &opening), (&other, &seller_bid)] {
        let read = app.get(format!("/v1/bids/{bid}"), &agent.key).await.expect(200);
        assert_eq!(
            (read.body["status"].as_str(), read.body["reason"].as_str()),
            (Some("REJECTED"), Some("listing_withdrawn"))
        );
    }
    assert_eq!(
        app.count("SELECT count(*) FROM threads WHERE status = 'CLOSED' AND closed_reason = 'listing_withdrawn'").await,
        2
    );
    app.post_empty(format!("/v1/bids/{seller_bid}/accept"), &other.key).await.expect_problem(409, "invalid_transition");
    app.post_empty(format!("/v1/listings/{}/withdraw", deal.listing), &deal.seller.key)
        .await
        .expect_problem(409, "listing_unavailable");
}

#[tokio::test]
async fn strangers_see_nothing_of_a_negotiation() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let stranger = app.buyer("stranger").await;
    let opening = app.place(&deal.buyer, &deal.listing, 80000).await;
    let seller_bid = app.counter(&deal.seller, &opening, 99000).await;
    let accepted = app.post_empty(format!("/v1/bids/{seller_bid}/accept"), &deal.buyer.key).await.expect(200);
    let thread = accepted.body["thread"]["id"].as_str().unwrap();
    let order = accepted.body["order"]["id"].as_str().unwrap();

    let before = app.snapshot().await;
    for path in [format!("/v1/threads/{thread}"), format!("/v1/bids/{opening}"), format!("/v1/orders/{order}")] {
        app.get(&path, &stranger.key).await.expect_problem(404, "not_found");
    }
    for action in ["accept", "reject", "withdraw"] {
        app.post_empty(format!("/v1/bids/{seller_bid}/{action}"), &stranger.key).await.expect_problem(404, "not_found");
    }
    app.post(format!("/v1/bids/{opening}/counter"), &stranger.key, json!({ "amount": 90000 }))
        .await
        .expect_problem(404, "not_found");
    for path in ["/v1/threads", "/v1/orders"] {
        assert_eq!(app.get(path, &stranger.key).await.expect(200).body["data"], json!([]));
    }
    assert_eq!(app.snapshot().await, before);
}

#[tokio::test]
async fn threads_and_orders_filter_by_role_status_and_listing() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "quantity": 5 })).await;
    let second_listing = app.listing(&deal.seller, json!({ "title": "Lamp" })).await;
    let b1 = app.place(&deal.buyer, &deal.listing, 80000).await;
    app.post_empty(format!("/v1/bids/{b1}/accept"), &deal.seller.key).await.expect(200);
    app.place(&deal.buyer, &second_listing, 80000).await;

    let page = |q: &str, key: &str| {
        let path = format!("/v1/threads{q}");
        let key = key.to_owned();
        let app = &app;
        async move { app.get(&path, &key).await.expect(200).body["data"].as_array().unwrap().len() }
    };
    assert_eq!(page("", &deal.buyer.key).await, 2);
    assert_eq!(page("?role=buyer", &deal.buyer.key).await, 2);
    assert_eq!(page("?role=seller", &deal.buyer.key).await, 0);
    assert_eq!(page("?role=seller", &deal.seller.key).await, 2);
    assert_eq!(page("?status=ACTIVE", &deal.buyer.key).await, 1);
    assert_eq!(page("?status=ACCEPTED", &deal.buyer.key).await, 1);
    assert_eq!(page(&format!("?listing_id={second_listing}"), &deal.buyer.key).await, 1);
    app.get("/v1/threads?status=DONE", &deal.buyer.key).await.expect_problem(422, "validation_failed");

    let orders = app.get("/v1/orders?role=seller", &deal.seller.key).await.expect(200);
    assert_eq!(orders.body["data"].as_array().unwrap().len(), 1);
    let none = app.get(format!("/v1/orders?listing_id={second_listing}"), &deal.seller.key).await.expect(200);
    assert_eq!(none.body["data"], json!([]));
}
