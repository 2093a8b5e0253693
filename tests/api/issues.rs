//! Several issues at once (listings' issues, bids' terms checked against them, the order's
//! agreed terms) and deadlocks (the mark, `negotiation.deadlock`, and settling at the
//! mediator's suggestion).

use serde_json::{Value, json};

use crate::support::{Agent, Deal, TestApp, eventually};

fn issues() -> Value {
    json!([
        {"name": "quantity", "type": "integer", "min": 1, "max": 100, "buyer_prefers": "higher"},
        {"name": "delivery_days", "type": "integer", "min": 1, "max": 30, "buyer_prefers": "lower"},
        {"name": "warranty", "type": "enum", "values": ["none", "1y", "2y"], "buyer_prefers": "higher"}
    ])
}

fn field_errors(body: &Value) -> Vec<String> {
    body["errors"].as_array().unwrap().iter().map(|e| e["field"].as_str().unwrap().to_owned()).collect()
}

async fn thread(app: &TestApp, agent: &Agent, id: &str) -> Value {
    app.get(format!("/v1/threads/{id}"), &agent.key).await.expect(200).body
}

/// The agent's events of one type, once there is at least one (events are published just
/// after their commit).
async fn events_of(app: &TestApp, agent: &Agent, kind: &str) -> Vec<Value> {
    eventually(&format!("a {kind} event"), || async move {
        let page = app.get("/v1/events?limit=200", &agent.key).await.expect(200).body;
        let found: Vec<Value> =
            page["data"].as_array().unwrap().iter().filter(|e| e["type"] == kind).cloned().collect();
        (!found.is_empty()).then_some(found)
    })
    .await
}

/// The agent's events of one type published so far.
async fn published(app: &TestApp, agent: &Agent, kind: &str) -> usize {
    let page = app.get("/v1/events?limit=200", &agent.key).await.expect(200).body;
    page["data"].as_array().unwrap().iter().filter(|e| e["type"] == kind).count()
}

#[tokio::test]
async fn listings_declare_issues_and_bids_state_each_one() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "issues": issues() })).await;
    let listing = app.get(format!("/v1/listings/{}", deal.listing), &deal.seller.key).await.expect(200).body;
    assert_eq!(listing["issues"], issues());

    // Badly declared issues are refused, each mistake named.
    let bad = json!([
        {"name": "price", "type": "integer", "min": 1, "max": 2, "buyer_prefers": "higher"},
        {"name": "days", "type": "integer", "min": 5, "max": 5, "buyer_prefers": "lower"},
        {"name": "colour", "type": "enum", "buyer_prefers": "lower"}
    ]);
    let resp = app
        .post("/v1/listings", &deal.seller.key, json!({ "title": "x", "ask_amount": 1000, "issues": bad }))
        .await
        .expect_problem(422, "validation_failed");
    assert_eq!(field_errors(&resp.body), ["issues[0].name", "issues[1].max", "issues[2].values"]);
    let unknown = json!([{"name": "q", "type": "integer", "min": 1, "max": 2, "buyer_prefers": "higher", "x": 1}]);
    app.post("/v1/listings", &deal.seller.key, json!({ "title": "x", "ask_amount": 1000, "issues": unknown }))
        .await
        .expect_problem(400, "malformed_request");

    // The validation matrix: each issue type, out of range and of the wrong type; an unknown
    // issue; a missing issue. Each is a 422 naming the issue, and nothing changes.
    let valid = json!({"quantity": 10, "delivery_days": 7, "warranty": "1y"});
    let with = |name: &str, value: Value| {
        let mut terms = valid.clone();
        terms[name] = value;
        terms
    };
    let without = |name: &str| {
        let mut terms = valid.clone();
        terms.as_object_mut().unwrap().remove(name);
        terms
    };
    let cases = [
        (with("quantity", json!(0)), "terms.quantity"),
        (with("quantity", json!(101)), "terms.quantity"),
        (with("quantity", json!("ten")), "terms.quantity"),
        (with("quantity", json!(2.5)), "terms.quantity"),
        (with("delivery_days", json!(31)), "terms.delivery_days"),
        (with("delivery_days", json!(true)), "terms.delivery_days"),
        (with("warranty", json!("3y")), "terms.warranty"),
        (with("warranty", json!(1)), "terms.warranty"),
        (with("colour", json!("red")), "terms.colour"),
        (without("warranty"), "terms.warranty"),
        (without("quantity"), "terms.quantity"),
    ];
    let before = app.snapshot().await;
    let place = format!("/v1/listings/{}/bids", deal.listing);
    for (terms, field) in &cases {
        let resp = app
            .post(&place, &deal.buyer.key, json!({ "amount": 80000, "terms": terms }))
            .await
            .expect_problem(422, "validation_failed");
        assert_eq!(field_errors(&resp.body), [*field], "{terms}");
    }
    // No terms at all names every issue.
    let resp =
        app.post(&place, &deal.buyer.key, json!({ "amount": 80000 })).await.expect_problem(422, "validation_failed");
    assert_eq!(field_errors(&resp.body), ["terms.quantity", "terms.delivery_days", "terms.warranty"]);
    assert_eq!(app.snapshot().await, before, "a refused bid changes nothing");

    // Valid terms are stored and echoed.
    let placed = app.post(&place, &deal.buyer.key, json!({ "amount": 80000, "terms": valid })).await.expect(201).body;
    assert_eq!(placed["bid"]["terms"], valid);
    let opening = placed["bid"]["id"].as_str().unwrap().to_owned();

    // A counter is held to the same rules; left out, the terms carry over; `null` drops them,
    // which the listing's issues refuse.
    let counter = format!("/v1/bids/{opening}/counter");
    for (terms, field) in &cases {
        let resp = app
            .post(&counter, &deal.seller.key, json!({ "amount": 95000, "terms": terms }))
            .await
            .expect_problem(422, "validation_failed");
        assert_eq!(field_errors(&resp.body), [*field], "{terms}");
    }
    app.post(&counter, &deal.seller.key, json!({ "amount": 95000, "terms": null }))
        .await
        .expect_problem(422, "validation_failed");
    let seller_terms = json!({"quantity": 10, "delivery_days": 14, "warranty": "none"});
    let countered =
        app.post(&counter, &deal.seller.key, json!({ "amount": 95000, "terms": seller_terms })).await.expect(201).body;
    assert_eq!(countered["bid"]["terms"], seller_terms);
    let second = countered["bid"]["id"].as_str().unwrap().to_owned();
    let carried = app
        .post(format!("/v1/bids/{second}/counter"), &deal.buyer.key, json!({ "amount": 85000 }))
        .await
        .expect(201)
        .body;
    assert_eq!(carried["bid"]["terms"], seller_terms);

    // The order records the agreed terms.
    let third = carried["bid"]["id"].as_str().unwrap();
    let accepted = app.post_empty(format!("/v1/bids/{third}/accept"), &deal.seller.key).await.expect(200).body;
    assert_eq!(accepted["order"]["terms"], seller_terms);
    assert_eq!(accepted["order"]["amount"], 85000);
}

/// Buyer and seller each move one unit a round from 50000 and 99000: the gap hardly narrows.
/// Returns the thread id and the id of the latest bid, after `bids` bids in all.
async fn crawl(app: &TestApp, deal: &Deal, bids: usize, terms: Option<Value>) -> (String, String) {
    let mut body = json!({ "amount": 50000 });
    if let Some(terms) = &terms {
        body["terms"] = terms.clone();
    }
    let placed = app.post(format!("/v1/listings/{}/bids", deal.listing), &deal.buyer.key, body).await.expect(201).body;
    let thread_id = placed["thread"]["id"].as_str().unwrap().to_owned();
    let mut bid = placed["bid"]["id"].as_str().unwrap().to_owned();
    let (mut buyer, mut seller) = (50000, 99001);
    for round in 2..=bids {
        let (agent, amount) = if round % 2 == 0 {
            seller -= 1;
            (&deal.seller, seller)
        } else {
            buyer += 1;
            (&deal.buyer, buyer)
        };
        bid = app.counter(agent, &bid, amount).await;
    }
    (thread_id, bid)
}

#[tokio::test]
async fn a_stuck_thread_is_marked_once_and_its_suggestion_renewed_by_each_counter() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "max_rounds": 20 })).await;
    // Five bids: too few to tell.
    let (id, _) = crawl(&app, &deal, 5, None).await;
    assert!(thread(&app, &deal.buyer, &id).await["deadlock"].is_null());

    let deal = Deal::new(&app, json!({ "max_rounds": 20 })).await;
    let (id, last) = crawl(&app, &deal, 6, None).await;
    let read = thread(&app, &deal.buyer, &id).await;
    let deadlock = &read["deadlock"];
    // Seller at 98999 (pending) and buyer at 50002: the buyer is to counter at the midpoint.
    assert_eq!(deadlock["suggestion"]["bid_id"], last.as_str());
    assert_eq!(deadlock["suggestion"]["mover"], "buyer");
    assert_eq!(deadlock["suggestion"]["amount"], 74500);
    assert_eq!(deadlock["suggestion"]["method"], "midpoint");
    assert_eq!(deadlock["agreed"], json!([]));
    assert_eq!(read["status"], "ACTIVE");
    for agent in [&deal.buyer, &deal.seller] {
        let events = events_of(&app, agent, "negotiation.deadlock").await;
        assert_eq!(events.len(), 1);
        assert_eq!(events[0]["data"]["suggestion"], deadlock["suggestion"]);
        assert_eq!(events[0]["thread_id"], id.as_str());
    }
    // The state machine stays the authority: the thread goes on as before. It stays marked
    // (since the first detection), and each counter renews the suggestion for its pending bid.
    let mut bid = last.clone();
    for amount in [50003, 98997, 50004] {
        let agent = if amount < 60000 { &deal.buyer } else { &deal.seller };
        bid = app.counter(agent, &bid, amount).await;
    }
    let read = thread(&app, &deal.seller, &id).await;
    assert_eq!(read["deadlock"]["detected_at"], deadlock["detected_at"]);
    assert_eq!(read["deadlock"]["suggestion"]["bid_id"], bid.as_str());
    assert_eq!(read["deadlock"]["suggestion"]["mover"], "seller");
    assert_eq!(read["deadlock"]["suggestion"]["renewal"], 3);
    assert_eq!(read["rounds"], 9);
    let events = events_of(&app, &deal.seller, "negotiation.deadlock").await;
    assert_eq!(events.len(), 4, "one for the mark, one for each renewal");
    assert_eq!(events[3]["data"]["suggestion"], read["deadlock"]["suggestion"]);
    // A suggestion a counter renewed can no longer be settled at.
    let stale = json!({ "bid_id": last });
    app.post(format!("/v1/threads/{id}/settle"), &deal.buyer.key, stale)
        .await
        .expect_problem(409, "invalid_transition");
    // A converging thread is never marked.
    let deal = Deal::new(&app, json!({ "max_rounds": 20 })).await;
    let mut bid = app.place(&deal.buyer, &deal.listing, 50000).await;
    for (n, amount) in [90000, 60000, 80000, 65000, 75000, 68000].into_iter().enumerate() {
        bid = app.counter(if n % 2 == 0 { &deal.seller } else { &deal.buyer }, &bid, amount).await;
    }
    let threads = app.get("/v1/threads?role=buyer", &deal.buyer.key).await.expect(200).body;
    assert!(threads["data"][0]["deadlock"].is_null());
}

#[tokio::test]
async fn both_sides_settle_explicitly_in_one_transaction() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "max_rounds": 20 })).await;
    let (id, last) = crawl(&app, &deal, 6, None).await;
    let settle = format!("/v1/threads/{id}/settle");
    // Strangers do not see the thread; a thread that is not deadlocked has nothing to settle.
    let stranger = app.buyer("stranger").await;
    app.post_empty(&settle, &stranger.key).await.expect_problem(404, "not_found");

    // The buyer agrees: recorded, and again (idempotent); nothing else moves.
    for _ in 0..2 {
        let waiting = app.post_empty(&settle, &deal.buyer.key).await.expect(202).body;
        assert_eq!(waiting["thread"]["deadlock"]["agreed"], json!(["buyer"]));
        assert!(waiting["order"].is_null() && waiting["bid"].is_null());
        assert_eq!(waiting["thread"]["last_bid_id"], last.as_str());
    }
    // The seller agrees: the buyer's counter at the suggestion and the seller's acceptance.
    let settled = app.post_empty(&settle, &deal.seller.key).await.expect(200).body;
    assert_eq!(settled["order"]["amount"], 74500);
    assert_eq!(settled["bid"]["amount"], 74500);
    assert_eq!(settled["bid"]["author"], "buyer");
    assert_eq!(settled["bid"]["status"], "ACCEPTED");
    assert_eq!(settled["bid"]["parent_bid_id"], last.as_str());
    assert_eq!(settled["thread"]["status"], "ACCEPTED");
    let read = thread(&app, &deal.seller, &id).await;
    assert_eq!(read["rounds"], 7);
    assert_eq!(app.count(format!("SELECT count(*) FROM orders WHERE thread_id = '{id}'")).await, 1);
    app.post_empty(&settle, &deal.buyer.key).await.expect_problem(409, "invalid_transition");
}

#[tokio::test]
async fn a_settlement_racing_a_counter_has_one_winner() {
    let app = TestApp::spawn().await;
    for _ in 0..3 {
        let deal = Deal::new(&app, json!({ "max_rounds": 20 })).await;
        let (id, last) = crawl(&app, &deal, 6, None).await;
        app.post_empty(format!("/v1/threads/{id}/settle"), &deal.seller.key).await.expect(202);
        // The buyer, whose turn it is, both settles (at the suggestion it saw) and counters at
        // once.
        let seen = json!({ "bid_id": last });
        let settle = app.post(format!("/v1/threads/{id}/settle"), &deal.buyer.key, seen);
        let counter = app.post(format!("/v1/bids/{last}/counter"), &deal.buyer.key, json!({ "amount": 50003 }));
        let (settle, counter) = tokio::join!(settle, counter);
        let outcomes = [(settle.status, settle.code().to_owned()), (counter.status, counter.code().to_owned())];
        let won = outcomes.iter().filter(|(status, _)| *status == 200 || *status == 201).count();
        assert_eq!(won, 1, "{outcomes:?}");
        assert!(outcomes.iter().any(|(status, code)| *status == 409 && code == "invalid_transition"), "{outcomes:?}");
        let orders = app.count(format!("SELECT count(*) FROM orders WHERE thread_id = '{id}'")).await;
        assert_eq!(orders, i64::from(settle.status == 200));
    }
}

fn crawling_policy(limit: i64, accept_mediation: bool) -> Value {
    json!({
        "limit": limit,
        "max_auto_rounds": 8,
        "accept_mediation": accept_mediation,
        "counter": { "strategy": "step", "amount": 1 }
    })
}

#[tokio::test]
async fn opted_in_policies_settle_within_their_limits() {
    let app = TestApp::spawn().await;
    // Both opted in, and the midpoint lies within both limits: the policies settle there.
    let deal = Deal::new(&app, json!({ "max_rounds": 30 })).await;
    let policy = format!("/v1/listings/{}/policy", deal.listing);
    app.put(&policy, &deal.seller.key, crawling_policy(60000, true)).await.expect(200);
    app.put(&policy, &deal.buyer.key, crawling_policy(90000, true)).await.expect(200);
    let placed =
        app.post(format!("/v1/listings/{}/bids", deal.listing), &deal.buyer.key, json!({ "amount": 50000 })).await;
    let id = placed.expect(201).body["thread"]["id"].as_str().unwrap().to_owned();
    let read = eventually("the thread to settle", || {
        let (app, buyer, id) = (&app, &deal.buyer, &id);
        async move {
            let read = thread(app, buyer, id).await;
            (read["status"] != "ACTIVE").then_some(read)
        }
    })
    .await;
    assert_eq!(read["status"], "ACCEPTED");
    let suggestion = &read["deadlock"]["suggestion"];
    let bids = read["bids"].as_array().unwrap();
    let last = bids.last().unwrap();
    assert_eq!(last["amount"], suggestion["amount"]);
    assert_eq!(last["status"], "ACCEPTED");
    assert_eq!(last["author"], suggestion["mover"]);
    let amount = suggestion["amount"].as_i64().unwrap();
    assert!((60000..=90000).contains(&amount), "{amount}");

    // Without opt-in on one side, or past a limit, nothing settles: the policies play on until
    // their round budget, as they would without the mark.
    for (seller, buyer) in [
        (crawling_policy(60000, false), crawling_policy(90000, true)),
        (crawling_policy(80000, true), crawling_policy(90000, true)),
    ] {
        let deal = Deal::new(&app, json!({ "max_rounds": 30 })).await;
        let policy = format!("/v1/listings/{}/policy", deal.listing);
        app.put(&policy, &deal.seller.key, seller).await.expect(200);
        app.put(&policy, &deal.buyer.key, buyer).await.expect(200);
        let placed =
            app.post(format!("/v1/listings/{}/bids", deal.listing), &deal.buyer.key, json!({ "amount": 50000 })).await;
        let id = placed.expect(201).body["thread"]["id"].as_str().unwrap().to_owned();
        eventually("a policy to stop", || {
            let (app, deal) = (&app, &deal);
            async move {
                let stops = published(app, &deal.buyer, "negotiation.action_required").await
                    + published(app, &deal.seller, "negotiation.action_required").await;
                (stops > 0).then_some(())
            }
        })
        .await;
        let read = thread(&app, &deal.seller, &id).await;
        assert_eq!(read["status"], "ACTIVE");
        assert!(!read["deadlock"].is_null());
        let suggestion = read["deadlock"]["suggestion"]["amount"].clone();
        assert!(read["bids"].as_array().unwrap().iter().all(|b| b["amount"] != suggestion));
        assert_eq!(app.count(format!("SELECT count(*) FROM orders WHERE thread_id = '{id}'")).await, 0);
    }
}

#[tokio::test]
async fn with_both_utilities_the_mediator_trades_issues() {
    let app = TestApp::spawn().await;
    let issues = json!([
        {"name": "delivery_days", "type": "integer", "min": 1, "max": 30, "buyer_prefers": "lower"},
        {"name": "warranty", "type": "enum", "values": ["none", "1y", "2y"], "buyer_prefers": "higher"}
    ]);
    let deal = Deal::new(&app, json!({ "max_rounds": 20, "issues": issues })).await;
    let policy = format!("/v1/listings/{}/policy", deal.listing);
    // Utilities that name an issue the listing lacks, or a reservation out of range, are refused.
    let bad = json!({"limit": 60000, "counter": {"strategy": "split"},
                     "utility": {"weights": {"price": 1, "colour": 1}, "reservation": 1.5}});
    let resp = app.put(&policy, &deal.seller.key, bad).await.expect_problem(422, "validation_failed");
    assert_eq!(field_errors(&resp.body), ["utility.reservation"]);
    let bad = json!({"limit": 60000, "counter": {"strategy": "split"},
                     "utility": {"weights": {"price": 1, "colour": 1}, "reservation": 0.5}});
    let resp = app.put(&policy, &deal.seller.key, bad).await.expect_problem(422, "validation_failed");
    assert_eq!(field_errors(&resp.body), ["utility.weights.colour"]);
    // The buyer cares for delivery, the seller for the warranty it gives. Both policies wait for
    // their owners, who play by hand.
    let seller = json!({"limit": 60000, "require_approval": true, "counter": {"strategy": "split"},
                        "utility": {"weights": {"price": 1, "warranty": 3}, "reservation": 0.2}});
    let buyer = json!({"limit": 100000, "require_approval": true, "counter": {"strategy": "split"},
                       "utility": {"weights": {"price": 1, "delivery_days": 3}, "reservation": 0.2}});
    app.put(&policy, &deal.seller.key, seller).await.expect(200);
    app.put(&policy, &deal.buyer.key, buyer).await.expect(200);
    let (id, _) = crawl(&app, &deal, 6, Some(json!({"delivery_days": 15, "warranty": "1y"}))).await;
    let read = thread(&app, &deal.buyer, &id).await;
    let suggestion = read["deadlock"]["suggestion"].clone();
    assert_eq!(suggestion["method"], "nash");
    assert_eq!(suggestion["terms"], json!({"delivery_days": 1, "warranty": "none"}));
    app.post_empty(format!("/v1/threads/{id}/settle"), &deal.seller.key).await.expect(202);
    let settled = app.post_empty(format!("/v1/threads/{id}/settle"), &deal.buyer.key).await.expect(200).body;
    assert_eq!(settled["order"]["terms"], suggestion["terms"]);
    assert_eq!(settled["order"]["amount"], suggestion["amount"]);
}

#[tokio::test]
async fn multi_issue_policies_logroll_to_a_deal() {
    let app = TestApp::spawn().await;
    let issues = json!([
        {"name": "delivery_days", "type": "integer", "min": 1, "max": 30, "buyer_prefers": "lower"},
        {"name": "warranty", "type": "integer", "min": 0, "max": 24, "buyer_prefers": "higher"}
    ]);
    let deal = Deal::new(&app, json!({ "max_rounds": 12, "issues": issues })).await;
    let policy = format!("/v1/listings/{}/policy", deal.listing);
    let seller = json!({"limit": 70000, "max_auto_rounds": 12, "counter": {"strategy": "time", "k": 0, "e": 1},
                        "utility": {"weights": {"price": 1, "warranty": 2}, "reservation": 0.3}});
    let buyer = json!({"limit": 95000, "max_auto_rounds": 12, "counter": {"strategy": "time", "k": 0, "e": 1},
                       "utility": {"weights": {"price": 1, "delivery_days": 2}, "reservation": 0.3}});
    app.put(&policy, &deal.seller.key, seller).await.expect(200);
    // Both policies are in place before the opening bid: the buyer's own opening is not its
    // policy's to make, and the seller's policy answers it at once.
    app.put(&policy, &deal.buyer.key, buyer).await.expect(200);
    let terms = json!({"delivery_days": 1, "warranty": 24});
    let placed = app
        .post(
            format!("/v1/listings/{}/bids", deal.listing),
            &deal.buyer.key,
            json!({ "amount": 50000, "terms": terms }),
        )
        .await
        .expect(201)
        .body;
    let id = placed["thread"]["id"].as_str().unwrap().to_owned();
    let mut read = thread(&app, &deal.buyer, &id).await;
    for _ in 0..3000 {
        if read["status"] != "ACTIVE" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        read = thread(&app, &deal.buyer, &id).await;
    }
    let stops = app.get("/v1/events?limit=200", &deal.seller.key).await.body;
    assert_eq!(read["status"], "ACCEPTED", "{read}\n{stops}");
    let order = app.get("/v1/orders", &deal.buyer.key).await.expect(200).body["data"][0].clone();
    // Each side got most of what it cares about: fast delivery for the buyer (who opened asking
    // a 1-day delivery and a 24-month warranty), at most half the warranty from the seller.
    let agreed = &order["terms"];
    assert!(agreed["delivery_days"].as_i64().unwrap() <= 4, "{agreed}");
    assert!(agreed["warranty"].as_i64().unwrap() <= 12, "{agreed}");
    assert!((70000..=95000).contains(&order["amount"].as_i64().unwrap()), "{order}");
}
