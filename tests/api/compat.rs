//! The IAB-style compatibility routes: an ad-buyer client negotiates with a seller's policy
//! through `/proposals` and `/api/v1/negotiations/messages`, synchronously.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{Agent, Body, TestApp};

/// The seller's policy: the tier engine, never below 25.00.
fn tier_policy() -> Value {
    json!({ "limit": 2500, "counter": { "strategy": "tier" } })
}

/// A seller with a listing asking `ask` whose policy (if any) is the seller's for the listing,
/// and an AGENCY buyer.
async fn market_asking(app: &TestApp, ask: i64, policy: Option<Value>) -> (Agent, Agent, String) {
    let seller = app.register("seller").await;
    let buyer = app.buyer("buyer").await;
    let fields = json!({ "title": "Premium video CPM", "ask_amount": ask, "max_rounds": 10, "quantity": 10 });
    let listing = app.listing(&seller, fields).await;
    if let Some(policy) = policy {
        app.put(format!("/v1/listings/{listing}/policy"), &seller.key, policy).await.expect(200);
    }
    (seller, buyer, listing)
}

/// [`market_asking`] 35.00.
async fn market(app: &TestApp, policy: Option<Value>) -> (Agent, Agent, String) {
    market_asking(app, 3500, policy).await
}

/// A POST as IAB clients send it, with the key in `X-API-Key`.
async fn iab(app: &TestApp, path: impl AsRef<str>, key: &str, body: Value) -> crate::support::Resp {
    app.send(Method::POST, path, None, Body::Json(body), &[("x-api-key", key)]).await
}

fn micros(units: f64) -> Value {
    json!({ "amount_micros": (units * 1_000_000.0).round() as i64, "currency": "USD" })
}

fn field_errors(body: &Value) -> Vec<String> {
    body["errors"]
        .as_array()
        .map(|errors| errors.iter().map(|e| e["field"].as_str().unwrap().to_owned()).collect())
        .unwrap_or_default()
}

/// The thread's latest bid id, as its party reads it.
async fn latest_bid(app: &TestApp, agent: &Agent, thread: &str) -> String {
    let thread = app.get(format!("/v1/threads/{thread}"), &agent.key).await.expect(200);
    thread.body["bids"].as_array().unwrap().last().unwrap()["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn the_ad_buyer_guide_negotiates_to_a_deal_through_proposals() {
    let app = TestApp::spawn().await;
    // Asking 38.00, the tier engine gives an AGENCY buyer three counters (its tier price 34.20,
    // less at most 5 % of it a round, down to 85 % of it): 32.49, 30.78, then 29.07 as a final
    // offer. (Asking 35.00, its first counter is already 29.93.)
    let (seller, buyer, listing) = market_asking(&app, 3800, Some(tier_policy())).await;

    // The guide's SimpleThreshold buyer: open at 20, step 2, accept at or below 30.
    let opened =
        iab(&app, "/proposals", &buyer.key, json!({ "product_id": listing, "price": 20.0, "deal_type": "PG" }))
            .await
            .expect(201);
    let proposal = opened.body["proposal_id"].as_str().unwrap().to_owned();
    assert_eq!(opened.body["negotiation_id"], proposal.as_str());
    assert_eq!(opened.body["status"], "active");
    assert_eq!(opened.body["recommendation"], "counter");
    assert_eq!(opened.body["counter_terms"]["action"], "counter");
    assert_eq!(opened.body["counter_terms"]["round_number"], 2);
    assert_eq!(opened.body["counter_terms"]["proposed_price"], opened.body["seller_price"]);
    assert_eq!(opened.body["buyer_price"], 20.0);
    assert_eq!(opened.body["rounds_remaining"], 8);
    // The same sentence for every counter: a reason would tell of the seller's private limits.
    assert_eq!(opened.body["rationale"], "Counter-offer.");

    let mut answer = opened.body;
    let mut offer = 20.0;
    let mut seller_prices = Vec::new();
    loop {
        // Every answer so far came with the seller's counter.
        let seller_price = answer["seller_price"].as_f64().expect("the seller answered synchronously");
        assert!(matches!(answer["action"].as_str(), Some("counter" | "final_offer")), "{answer}");
        assert_eq!(answer["buyer_price"].as_f64(), Some(offer));
        assert_eq!(answer["rationale"], "Counter-offer.");
        if let Some(previous) = seller_prices.last() {
            assert!(seller_price <= *previous, "the seller never retracts a concession");
        }
        assert!(seller_price >= 25.0, "the seller never goes below its floor");
        seller_prices.push(seller_price);
        if seller_price <= 30.0 {
            break;
        }
        assert!(seller_prices.len() < 8, "no deal in sight: {seller_prices:?}");
        offer += 2.0;
        let countered = iab(&app, format!("/proposals/{proposal}/counter"), &buyer.key, json!({ "price": offer }))
            .await
            .expect(200);
        answer = countered.body;
        assert_eq!(answer["proposal_id"], proposal.as_str());
        assert_eq!(answer["status"], "active");
    }
    assert_eq!(seller_prices, [32.49, 30.78, 29.07]);
    assert_eq!(answer["action"], "final_offer");
    assert_eq!(answer["round_number"], 6);
    let agreed = *seller_prices.last().unwrap();

    // The guide's accept sends a price too; the seller's standing price is what is accepted.
    let accepted =
        iab(&app, format!("/proposals/{proposal}/counter"), &buyer.key, json!({ "price": offer, "action": "accept" }))
            .await
            .expect(200);
    assert_eq!(accepted.body["status"], "accepted");
    assert_eq!(accepted.body["action"], "accept");
    assert_eq!(accepted.body["seller_price"].as_f64(), Some(agreed));
    assert_eq!(accepted.body["buyer_price"].as_f64(), Some(agreed));
    assert!(accepted.body["rationale"].as_str().unwrap().starts_with("Deal confirmed at "), "{}", accepted.body);

    // The order is at the seller's last price, converted exactly.
    let orders = app.get("/v1/orders", &buyer.key).await.expect(200);
    let order = &orders.body["data"][0];
    assert_eq!(order["thread_id"], proposal.as_str());
    let amount = order["amount"].as_i64().unwrap();
    assert_eq!(amount as f64 / 100.0, agreed);
    assert_eq!((agreed * 100.0).round() as i64, amount);
    assert!(amount <= 3000);
    let thread = app.get(format!("/v1/threads/{proposal}"), &seller.key).await.expect(200);
    assert_eq!(thread.body["status"], "ACCEPTED");
    assert_eq!(thread.body["rounds"], accepted.body["round_number"]);
}

#[tokio::test]
async fn messages_counter_replay_final_offer_accept_and_reject_with_money() {
    let app = TestApp::spawn().await;
    let (_seller, buyer, listing) = market(&app, Some(tier_policy())).await;
    let open = |price: f64| {
        let app = &app;
        let buyer = &buyer;
        let listing = listing.clone();
        async move {
            let opened =
                app.post("/proposals", &buyer.key, json!({ "product_id": listing, "price": price })).await.expect(201);
            opened.body["proposal_id"].as_str().unwrap().to_owned()
        }
    };

    // A counter in Money, answered with the seller's counter in Money.
    let proposal = open(20.0).await;
    let message = json!({
        "idempotency_key": "msg-1",
        "action": "counter",
        "proposal_id": proposal,
        "negotiation_id": proposal,
        "buyer_price": micros(22.1),
        "rationale": "Our budget is tight this quarter.",
        "sent_at": "2030-01-01T00:00:00Z",
    });
    let countered = app.post("/api/v1/negotiations/messages", &buyer.key, message.clone()).await.expect(200);
    assert_eq!(countered.body["action"], "counter");
    assert_eq!(countered.body["round_number"], 4);
    assert_eq!(countered.body["buyer_price"], json!({ "amount_micros": 22_100_000, "currency": "USD" }));
    let seller_micros = countered.body["seller_price"]["amount_micros"].as_i64().unwrap();
    assert_eq!(seller_micros % 10_000, 0);
    assert!((2500 * 10_000..3500 * 10_000).contains(&seller_micros));
    assert_eq!(countered.header("idempotent-replayed"), None);
    let thread = app.get(format!("/v1/threads/{proposal}"), &buyer.key).await.expect(200);
    let bids = thread.body["bids"].as_array().unwrap();
    assert_eq!(bids[2]["amount"], 2210);
    assert_eq!(bids[2]["message"], "Our budget is tight this quarter.");
    assert_eq!(bids[3]["amount"].as_i64().unwrap() * 10_000, seller_micros);

    // A retry replays the whole answer, the seller's counter included; the key on another
    // message is refused.
    let replayed = app.post("/api/v1/negotiations/messages", &buyer.key, message.clone()).await.expect(200);
    assert_eq!(replayed.header("idempotent-replayed"), Some("true"));
    assert_eq!(replayed.body, countered.body);
    let mut other = message.clone();
    other["buyer_price"] = micros(22.5);
    app.post("/api/v1/negotiations/messages", &buyer.key, other).await.expect_problem(422, "idempotency_key_reused");
    assert_eq!(app.count(format!("SELECT count(*) FROM bids WHERE thread_id = '{proposal}'")).await, 4);

    // A final offer below the seller's floor is rejected by its policy.
    let final_offer = json!({ "idempotency_key": "msg-2", "action": "final_offer", "negotiation_id": proposal, "buyer_price": micros(24.0) });
    let rejected = app.post("/api/v1/negotiations/messages", &buyer.key, final_offer).await.expect(200);
    assert_eq!(rejected.body["status"], "rejected");
    assert_eq!(rejected.body["action"], "reject");
    assert_eq!(rejected.body["round_number"], 5);
    assert_eq!(rejected.body["rounds_remaining"], 5);
    // Declined, without saying which of the seller's private limits the offer missed.
    assert_eq!(rejected.body["rationale"], "Offer declined.");
    let thread = app.get(format!("/v1/threads/{proposal}"), &buyer.key).await.expect(200);
    assert_eq!(thread.body["bids"][4]["final"], true);
    assert_eq!(thread.body["status"], "REJECTED");

    // Accepting takes the seller's standing counter; a price sent along is not used.
    let proposal = open(21.0).await;
    let counter = app.get(format!("/v1/threads/{proposal}"), &buyer.key).await.expect(200).body["bids"][1]["amount"]
        .as_i64()
        .unwrap();
    let accept =
        json!({ "idempotency_key": "msg-3", "action": "accept", "proposal_id": proposal, "buyer_price": micros(21.0) });
    let accepted = app.post("/api/v1/negotiations/messages", &buyer.key, accept).await.expect(200);
    assert_eq!(accepted.body["status"], "accepted");
    assert_eq!(accepted.body["action"], "accept");
    let agreed = json!({ "amount_micros": counter * 10_000, "currency": "USD" });
    assert_eq!(accepted.body["seller_price"], agreed);
    assert_eq!(accepted.body["buyer_price"], agreed);
    assert_eq!(
        app.count(format!("SELECT count(*) FROM orders WHERE thread_id = '{proposal}' AND amount = {counter}")).await,
        1
    );

    // Rejecting the seller's counter ends the proposal.
    let proposal = open(21.0).await;
    let reject = json!({ "idempotency_key": "msg-4", "action": "reject", "proposal_id": proposal });
    let rejected = app.post("/api/v1/negotiations/messages", &buyer.key, reject).await.expect(200);
    assert_eq!(rejected.body["status"], "rejected");
    assert_eq!(rejected.body["action"], "reject");
    assert_eq!(rejected.body["rationale"], Value::Null);
    let thread = app.get(format!("/v1/threads/{proposal}"), &buyer.key).await.expect(200);
    assert_eq!(thread.body["bids"][1]["reason"], "rejected");
}

#[tokio::test]
async fn bad_messages_are_refused_and_change_nothing() {
    let app = TestApp::spawn().await;
    let (seller, buyer, listing) = market(&app, Some(tier_policy())).await;
    let opened = app.post("/proposals", &buyer.key, json!({ "product_id": listing, "price": 20.0 })).await.expect(201);
    let proposal = opened.body["proposal_id"].as_str().unwrap().to_owned();
    let rival = app.buyer("rival").await;
    let other_listing = app.listing(&seller, json!({ "ask_amount": 3500 })).await;
    let rivals_bid = app.place(&rival, &other_listing, 2000).await;
    let rivals = app.get(format!("/v1/bids/{rivals_bid}"), &rival.key).await.expect(200);
    let rivals = rivals.body["thread_id"].as_str().unwrap().to_owned();

    let counter = |changes: Value| {
        let mut message = json!({ "idempotency_key": "bad-1", "action": "counter", "proposal_id": proposal, "buyer_price": micros(22.0) });
        for (name, value) in changes.as_object().unwrap() {
            if value.is_null() {
                message.as_object_mut().unwrap().remove(name);
            } else {
                message[name] = value.clone();
            }
        }
        message
    };
    let before = app.snapshot().await;
    let unprocessable: Vec<(Value, Vec<&str>)> = vec![
        (counter(json!({ "negotiation_id": rivals })), vec!["negotiation_id"]),
        (counter(json!({ "proposal_id": null })), vec!["proposal_id"]),
        (counter(json!({ "proposal_id": "prop-abc123" })), vec!["proposal_id"]),
        (
            counter(json!({ "buyer_price": { "amount_micros": 22_000_001, "currency": "USD" } })),
            vec!["buyer_price.amount_micros"],
        ),
        (
            counter(json!({ "buyer_price": { "amount_micros": 22_005_000, "currency": "USD" } })),
            vec!["buyer_price.amount_micros"],
        ),
        (
            counter(json!({ "buyer_price": { "amount_micros": 22000000.5, "currency": "USD" } })),
            vec!["buyer_price.amount_micros"],
        ),
        (
            counter(json!({ "buyer_price": { "amount_micros": -22_000_000, "currency": "USD" } })),
            vec!["buyer_price.amount_micros"],
        ),
        (
            counter(json!({ "buyer_price": { "amount_micros": 22_000_000, "currency": "EUR" } })),
            vec!["buyer_price.currency"],
        ),
        (counter(json!({ "buyer_price": { "amount_micros": 22_000_000 } })), vec!["buyer_price.currency"]),
        (counter(json!({ "buyer_price": null })), vec!["buyer_price"]),
        (counter(json!({ "idempotency_key": null })), vec!["idempotency_key"]),
        (counter(json!({ "idempotency_key": "has spaces" })), vec!["idempotency_key"]),
        (counter(json!({ "action": "haggle" })), vec!["action"]),
        (counter(json!({ "rationale": "x".repeat(501) })), vec!["rationale"]),
        (
            counter(json!({ "negotiation_id": "nope", "buyer_price": { "amount_micros": 1, "currency": "USD" } })),
            vec!["negotiation_id", "buyer_price.amount_micros"],
        ),
    ];
    for (message, fields) in unprocessable {
        let refused = app.post("/api/v1/negotiations/messages", &buyer.key, message.clone()).await;
        let refused = refused.expect_problem(422, "validation_failed");
        assert_eq!(field_errors(&refused.body), fields, "{message}");
    }
    // Someone else's proposal does not exist; its seller may not speak for the buyer.
    app.post("/api/v1/negotiations/messages", &buyer.key, counter(json!({ "proposal_id": rivals })))
        .await
        .expect_problem(404, "not_found");
    app.post("/api/v1/negotiations/messages", &seller.key, counter(json!({}))).await.expect_problem(403, "forbidden");
    // Wrong types are unreadable.
    for message in [
        counter(json!({ "buyer_price": { "amount_micros": "22000000", "currency": "USD" } })),
        counter(json!({ "buyer_price": 22.0 })),
        counter(json!({ "proposal_id": 7 })),
    ] {
        app.post("/api/v1/negotiations/messages", &buyer.key, message).await.expect_problem(400, "malformed_request");
    }
    // The header key, if sent, is the body's.
    let refused = app
        .send(
            Method::POST,
            "/api/v1/negotiations/messages",
            Some(&buyer.key),
            Body::Json(counter(json!({}))),
            &[("idempotency-key", "other")],
        )
        .await
        .expect_problem(422, "validation_failed");
    assert_eq!(field_errors(&refused.body), ["idempotency_key"]);
    assert_eq!(app.snapshot().await, before);
}

#[tokio::test]
async fn legacy_moves_decline_and_are_refused_out_of_turn() {
    let app = TestApp::spawn().await;
    let (seller, buyer, listing) = market(&app, Some(tier_policy())).await;

    // Bodies are checked field by field; unknown fields pass.
    let before = app.snapshot().await;
    for (body, field) in [
        (json!({ "product_id": "prop-abc123", "price": 20.0 }), "product_id"),
        (json!({ "product_id": listing }), "price"),
        (json!({ "product_id": listing, "price": 20.001 }), "price"),
        (json!({ "product_id": listing, "price": -20.0 }), "price"),
        (json!({ "product_id": listing, "price": 1e300 }), "price"),
        (json!({ "product_id": listing, "price": 0.30000000000000004 }), "price"),
    ] {
        let refused = iab(&app, "/proposals", &buyer.key, body).await.expect_problem(422, "validation_failed");
        assert_eq!(field_errors(&refused.body), [field]);
    }
    iab(&app, "/proposals", &buyer.key, json!({ "product_id": listing, "price": "20.0" }))
        .await
        .expect_problem(400, "malformed_request");
    // Above the ask: the marketplace's rule, named as the request names the field.
    let refused = iab(&app, "/proposals", &buyer.key, json!({ "product_id": listing, "price": 35.01 }))
        .await
        .expect_problem(422, "validation_failed");
    assert_eq!(field_errors(&refused.body), ["price"]);
    assert_eq!(app.snapshot().await, before);

    // Decline rejects the seller's counter.
    let opened =
        iab(&app, "/proposals", &buyer.key, json!({ "product_id": listing, "price": 20.0, "currency": "USD" }))
            .await
            .expect(201);
    let proposal = opened.body["proposal_id"].as_str().unwrap().to_owned();
    let counter = format!("/proposals/{proposal}/counter");
    let before = app.snapshot().await;
    for (body, fields) in [
        (json!({}), vec!["price"]),
        (json!({ "action": "counter", "price": null }), vec!["price"]),
        (json!({ "price": 22.001 }), vec!["price"]),
        (json!({ "buyer_price": 0.5 }), vec!["buyer_price"]),
        (json!({ "price": 22.0, "buyer_price": 23.0 }), vec!["buyer_price"]),
        (json!({ "price": 22.0, "action": "haggle" }), vec!["action"]),
    ] {
        let refused = iab(&app, &counter, &buyer.key, body.clone()).await.expect_problem(422, "validation_failed");
        assert_eq!(field_errors(&refused.body), fields, "{body}");
    }
    iab(&app, &counter, &buyer.key, json!({ "price": "22" })).await.expect_problem(400, "malformed_request");
    iab(&app, "/proposals/prop-abc123/counter", &buyer.key, json!({ "price": 22.0 }))
        .await
        .expect_problem(400, "malformed_request");
    iab(&app, format!("/proposals/{listing}/counter"), &buyer.key, json!({ "price": 22.0 }))
        .await
        .expect_problem(404, "not_found");
    iab(&app, &counter, &seller.key, json!({ "price": 22.0 })).await.expect_problem(403, "forbidden");
    assert_eq!(app.snapshot().await, before);
    // The same price under both names is one price.
    let countered = iab(&app, &counter, &buyer.key, json!({ "price": 22.5, "buyer_price": 22.50 })).await.expect(200);
    assert_eq!(countered.body["buyer_price"], 22.5);
    let declined = iab(&app, &counter, &buyer.key, json!({ "action": "decline" })).await.expect(200);
    assert_eq!(declined.body["status"], "rejected");
    assert_eq!(declined.body["action"], "reject");
    let seller_bid = latest_bid(&app, &seller, &proposal).await;
    let bid = app.get(format!("/v1/bids/{seller_bid}"), &seller.key).await.expect(200);
    assert_eq!((bid.body["author"].as_str(), bid.body["reason"].as_str()), (Some("seller"), Some("rejected")));
    // The proposal is over.
    iab(&app, &counter, &buyer.key, json!({ "price": 24.0 })).await.expect_problem(409, "invalid_transition");

    // On a listing without a policy: the buyer's own bid waits, so countering or accepting is
    // out of turn, and declining withdraws it.
    let quiet = app.listing(&seller, json!({ "ask_amount": 3500 })).await;
    let bid = app.place(&buyer, &quiet, 2000).await;
    let thread =
        app.get(format!("/v1/bids/{bid}"), &buyer.key).await.expect(200).body["thread_id"].as_str().unwrap().to_owned();
    let counter = format!("/proposals/{thread}/counter");
    iab(&app, &counter, &buyer.key, json!({ "price": 21.0 })).await.expect_problem(403, "not_your_turn");
    iab(&app, &counter, &buyer.key, json!({ "action": "accept" })).await.expect_problem(403, "not_your_turn");
    let withdrawn = iab(&app, &counter, &buyer.key, json!({ "action": "decline" })).await.expect(200);
    assert_eq!(withdrawn.body["status"], "rejected");
    assert_eq!(withdrawn.body["action"], "reject");
    assert_eq!(withdrawn.body["seller_price"], Value::Null);
    let bid = app.get(format!("/v1/bids/{bid}"), &buyer.key).await.expect(200);
    assert_eq!(bid.body["reason"], "withdrawn");
}

#[tokio::test]
async fn a_seller_without_a_policy_leaves_the_buyer_a_202() {
    let app = TestApp::spawn().await;
    let (seller, buyer, listing) = market(&app, None).await;

    let started = Instant::now();
    let open = || {
        app.send(
            Method::POST,
            "/proposals",
            Some(&buyer.key),
            Body::Json(json!({ "product_id": listing, "price": 20.0 })),
            &[("idempotency-key", "open-1")],
        )
    };
    // A retry while the first request waits for the seller is told it is still running.
    let retry = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        open().await
    };
    let (opened, early) = tokio::join!(open(), retry);
    early.expect_problem(409, "idempotency_key_in_use");
    let opened = opened.expect(202);
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(4900) && waited < Duration::from_secs(15), "waited {waited:?}");
    assert_eq!(opened.body["status"], "active");
    assert_eq!(opened.body["action"], Value::Null);
    assert_eq!(opened.body["recommendation"], Value::Null);
    assert_eq!(opened.body["seller_price"], Value::Null);
    assert_eq!(opened.body["counter_terms"]["proposed_price"], Value::Null);
    assert_eq!(opened.body["round_number"], 1);
    let proposal = opened.body["proposal_id"].as_str().unwrap().to_owned();
    let bid = latest_bid(&app, &buyer, &proposal).await;
    let rationale = opened.body["rationale"].as_str().unwrap();
    assert!(rationale.contains(&format!("GET /v1/bids/{bid}?wait=30")), "{rationale}");
    // A retry afterwards gets the same answer at once, and opens nothing.
    let replayed = open().await.expect(202);
    assert_eq!(replayed.header("idempotent-replayed"), Some("true"));
    assert_eq!(replayed.body, opened.body);

    // The seller answers by hand with a final offer: it can only be accepted or declined.
    let response = app
        .post(
            format!("/v1/bids/{bid}/counter"),
            &seller.key,
            json!({ "amount": 3100, "final": true, "message": "Best we can do." }),
        )
        .await;
    response.expect(201);
    let counter = format!("/proposals/{proposal}/counter");
    app.post(&counter, &buyer.key, json!({ "price": 22.0 })).await.expect_problem(409, "final_offer");
    let accepted = app.post(&counter, &buyer.key, json!({ "action": "accept" })).await.expect(200);
    assert_eq!(accepted.body["status"], "accepted");
    assert_eq!(accepted.body["action"], "accept");
    assert_eq!(accepted.body["seller_price"], 31.0);
    assert_eq!(
        app.count(format!("SELECT count(*) FROM orders WHERE thread_id = '{proposal}' AND amount = 3100")).await,
        1
    );
}
