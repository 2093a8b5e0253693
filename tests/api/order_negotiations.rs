//! Negotiations on an order over HTTP: a refund negotiated to agreement, a refund rejected,
//! escalated and decided by the operator, a cancellation that gives the unit back, the races
//! between them and the order's own life, and every refusal with nothing changed.

use std::time::Duration;

use serde_json::{Value, json};

use crate::events::{events_after, types};
use crate::support::{ADMIN_TOKEN, Agent, Deal, TestApp};

/// A deal on a listing asking 100000 (with `fields`), the order of the buyer's purchase at the
/// ask, and `paid` of it paid and confirmed.
async fn paid_order(app: &TestApp, fields: Value, paid: i64) -> (Deal, String) {
    let deal = Deal::new(app, fields).await;
    let resp = app.post_empty(format!("/v1/listings/{}/purchase", deal.listing), &deal.buyer.key).await.expect(201);
    let order = resp.body["order"]["id"].as_str().unwrap().to_owned();
    if paid > 0 {
        let body = json!({ "amount": paid, "reference": "ch_1" });
        let payment = app.post(format!("/v1/orders/{order}/payments"), &deal.buyer.key, body).await.expect(201);
        let payment = payment.body["payment"]["id"].as_str().unwrap().to_owned();
        app.post_empty(format!("/v1/orders/{order}/payments/{payment}/confirm"), &deal.seller.key).await.expect(200);
    }
    (deal, order)
}

fn refund(amount: i64) -> Value {
    json!({
        "kind": "refund",
        "amount": amount,
        "terms": { "reason": "damaged", "evidence": ["https://photos.example.com/crack.jpg"] },
        "message": "the leg arrived cracked",
    })
}

fn cancel() -> Value {
    json!({ "kind": "cancel", "terms": { "reason": "the buyer's plans changed" } })
}

async fn open(app: &TestApp, agent: &Agent, order: &str, body: Value) -> Value {
    app.post(format!("/v1/orders/{order}/negotiations"), &agent.key, body).await.expect(201).body
}

async fn read_order(app: &TestApp, agent: &Agent, order: &str) -> Value {
    app.get(format!("/v1/orders/{order}"), &agent.key).await.expect(200).body
}

fn id(value: &Value) -> String {
    value["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_refund_is_negotiated_to_agreement() {
    let app = TestApp::spawn().await;
    let (deal, order) = paid_order(&app, json!({}), 100000).await;
    app.post_empty(format!("/v1/orders/{order}/fulfil"), &deal.seller.key).await.expect(200);

    let opened = open(&app, &deal.buyer, &order, refund(40000)).await;
    let (thread, first) = (&opened["thread"], &opened["bid"]);
    assert_eq!((thread["kind"].as_str(), thread["order_id"].as_str()), (Some("refund"), Some(order.as_str())));
    assert_eq!((thread["status"].as_str(), thread["turn"].as_str()), (Some("ACTIVE"), Some("seller")));
    assert_eq!((first["kind"].as_str(), first["amount"].as_i64()), (Some("refund"), Some(40000)));
    assert_eq!(first["terms"]["reason"], "damaged");
    let thread_id = id(thread);

    // Thread lists filter by order and kind; the listing's price negotiations are not in them.
    let listed = app.get(format!("/v1/threads?order_id={order}&kind=refund"), &deal.seller.key).await.expect(200);
    let ids: Vec<&str> = listed.body["data"].as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [thread_id.as_str()]);
    let prices = app.get("/v1/threads?kind=price", &deal.seller.key).await.expect(200);
    assert_eq!(prices.body["data"], json!([]));

    // While the refund is open the server does not complete the order.
    sqlx::query("UPDATE orders SET fulfilled_at = now() - interval '30 days' WHERE id = $1::uuid")
        .bind(&order)
        .execute(&app.pool)
        .await
        .unwrap();
    let two_weeks = Duration::from_secs(14 * 24 * 3600);
    assert_eq!(haggle_server::sweeper::complete_orders(&app.market(), two_weeks, 100).await.unwrap(), 0);

    // The concession runs the other way: the seller offers from nothing up to below the ask,
    // the buyer comes down from its ask to above the seller's offer.
    let counter = |bid: &str| format!("/v1/bids/{bid}/counter");
    let refused = app
        .post(counter(&id(first)), &deal.seller.key, json!({ "amount": 40000 }))
        .await
        .expect_problem(422, "not_a_concession");
    assert_eq!((refused.body["min_amount"].as_i64(), refused.body["max_amount"].as_i64()), (Some(0), Some(39999)));
    let offer = app.post(counter(&id(first)), &deal.seller.key, json!({ "amount": 10000 })).await.expect(201);
    assert_eq!(offer.body["bid"]["kind"], "refund");
    assert_eq!(offer.body["bid"]["terms"]["reason"], "damaged", "the terms carry over");
    assert_eq!(offer.body["thread"]["turn"], "buyer");
    let offer = id(&offer.body["bid"]);
    for amount in [40001, 10000] {
        app.post(counter(&offer), &deal.buyer.key, json!({ "amount": amount }))
            .await
            .expect_problem(422, "not_a_concession");
    }
    let ask = app.post(counter(&offer), &deal.buyer.key, json!({ "amount": 30000 })).await.expect(201);
    let ask = id(&ask.body["bid"]);
    app.post_empty(format!("/v1/bids/{ask}/accept"), &deal.buyer.key).await.expect_problem(403, "not_your_turn");

    let accepted = app.post_empty(format!("/v1/bids/{ask}/accept"), &deal.seller.key).await.expect(200);
    assert_eq!(accepted.body["thread"]["status"], "ACCEPTED");
    assert_eq!(accepted.body["order"]["refunded_amount"], 30000);
    assert_eq!(accepted.body["order"]["paid_amount"], 100000);
    let read = read_order(&app, &deal.buyer, &order).await;
    assert_eq!((read["status"].as_str(), read["refunded_amount"].as_i64()), (Some("FULFILLED"), Some(30000)));

    // An agreed refund is not escalated; a second refund may ask at most what is left.
    app.post_empty(format!("/v1/threads/{thread_id}/escalate"), &deal.buyer.key)
        .await
        .expect_problem(409, "invalid_transition");
    let over = app
        .post(format!("/v1/orders/{order}/negotiations"), &deal.buyer.key, refund(70001))
        .await
        .expect_problem(409, "exceeds_refundable");
    assert_eq!(over.body["refundable"], 70000);

    // Once no refund is open, the server completes the order.
    assert_eq!(haggle_server::sweeper::complete_orders(&app.market(), two_weeks, 100).await.unwrap(), 1);

    for agent in [&deal.buyer, &deal.seller] {
        let events = events_after(&app, agent, 0, 0).await;
        let on_thread: Vec<Value> = events.iter().filter(|e| e["thread_id"] == thread_id.as_str()).cloned().collect();
        assert_eq!(types(&on_thread), ["bid.placed", "bid.countered", "bid.countered", "bid.accepted"]);
        assert!(on_thread.iter().all(|e| e["data"]["thread"]["kind"] == "refund"), "bid events carry the kind");
        let on_order: Vec<Value> = events.iter().filter(|e| e["order_id"] == order.as_str()).cloned().collect();
        assert!(types(&on_order).ends_with(&["order.refunded", "order.completed"]), "{:?}", types(&on_order));
    }
}

#[tokio::test]
async fn a_rejected_refund_is_escalated_and_decided_by_the_operator() {
    let app = TestApp::spawn().await;
    let (deal, order) = paid_order(&app, json!({}), 100000).await;
    let opened = open(&app, &deal.buyer, &order, refund(50000)).await;
    let (thread, bid) = (id(&opened["thread"]), id(&opened["bid"]));
    let escalate = format!("/v1/threads/{thread}/escalate");

    app.post_empty(&escalate, &deal.seller.key).await.expect_problem(409, "invalid_transition");
    app.post_empty(format!("/v1/bids/{bid}/reject"), &deal.seller.key).await.expect(200);
    let outsider = app.register("outsider").await;
    app.post_empty(&escalate, &outsider.key).await.expect_problem(404, "not_found");
    let escalated = app.post_empty(&escalate, &deal.buyer.key).await.expect(200);
    assert_eq!(escalated.body["status"], "REJECTED");
    assert_eq!(escalated.body["escalation"]["escalated_by"], deal.buyer.id.as_str());
    assert_eq!(escalated.body["escalation"]["decision"], Value::Null);
    app.post_empty(&escalate, &deal.seller.key).await.expect_problem(409, "invalid_transition");

    // The operator sees it among the refunds to decide, and alone decides it.
    let waiting = app.get("/v1/admin/threads?escalated=true", ADMIN_TOKEN).await.expect(200);
    let ids: Vec<&str> = waiting.body["data"].as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [thread.as_str()]);
    let decide = format!("/v1/admin/threads/{thread}/decide");
    let decision = json!({ "amount": 20000, "note": "the photos show a scratch, not a crack" });
    for agent in [&deal.buyer, &deal.seller] {
        app.post(&decide, &agent.key, decision.clone()).await.expect_problem(403, "forbidden");
    }
    let over = app
        .post(&decide, ADMIN_TOKEN, json!({ "amount": 100001, "note": "all of it" }))
        .await
        .expect_problem(409, "exceeds_refundable");
    assert_eq!(over.body["refundable"], 100000);
    let decided = app.post(&decide, ADMIN_TOKEN, decision.clone()).await.expect(200);
    assert_eq!(decided.body["thread"]["escalation"]["decision"]["amount"], 20000);
    assert_eq!(decided.body["order"]["refunded_amount"], 20000);
    app.post(&decide, ADMIN_TOKEN, decision).await.expect_problem(409, "invalid_transition");
    let waiting = app.get("/v1/admin/threads?escalated=true", ADMIN_TOKEN).await.expect(200);
    assert_eq!(waiting.body["data"], json!([]));
    assert_eq!(read_order(&app, &deal.seller, &order).await["refunded_amount"], 20000);

    // A refund past its deadline is escalated as EXPIRED, its expiry recorded on the way.
    let late = open(&app, &deal.buyer, &order, refund(10000)).await;
    sqlx::query("UPDATE bids SET expires_at = now() - interval '1 second' WHERE thread_id = $1::uuid")
        .bind(late["thread"]["id"].as_str().unwrap())
        .execute(&app.pool)
        .await
        .unwrap();
    sqlx::query("UPDATE threads SET expires_at = now() - interval '1 second' WHERE id = $1::uuid")
        .bind(late["thread"]["id"].as_str().unwrap())
        .execute(&app.pool)
        .await
        .unwrap();
    let expired =
        app.post_empty(format!("/v1/threads/{}/escalate", id(&late["thread"])), &deal.seller.key).await.expect(200);
    assert_eq!(expired.body["status"], "EXPIRED");

    for agent in [&deal.buyer, &deal.seller] {
        let events = events_after(&app, agent, 0, 0).await;
        let on_thread: Vec<Value> = events.iter().filter(|e| e["thread_id"] == thread.as_str()).cloned().collect();
        assert_eq!(types(&on_thread), ["bid.placed", "bid.rejected", "dispute.escalated", "dispute.decided"]);
        let on_order: Vec<Value> = events.iter().filter(|e| e["order_id"] == order.as_str()).cloned().collect();
        assert_eq!(
            types(&on_order),
            [
                "order.created",
                "payment.recorded",
                "payment.confirmed",
                "dispute.escalated",
                "dispute.decided",
                "order.refunded",
                "dispute.escalated",
            ]
        );
        assert_eq!(on_order[5]["data"]["order"]["refunded_amount"], 20000);
    }
}

#[tokio::test]
async fn an_accepted_cancellation_cancels_the_order_and_gives_the_unit_back() {
    let app = TestApp::spawn().await;
    let (deal, order) = paid_order(&app, json!({ "quantity": 1 }), 30000).await;
    let listing = app.get(format!("/v1/listings/{}", deal.listing), &deal.seller.key).await.expect(200);
    assert_eq!((listing.body["status"].as_str(), listing.body["quantity_available"].as_i64()), (Some("SOLD"), Some(0)));

    // The seller asks; a cancellation names no amount and is accepted or rejected, never countered.
    let opened = open(&app, &deal.seller, &order, cancel()).await;
    assert_eq!((opened["bid"]["final"].as_bool(), opened["bid"]["amount"].as_i64()), (Some(true), Some(0)));
    assert_eq!(opened["thread"]["turn"], "buyer");
    let bid = id(&opened["bid"]);
    app.post(format!("/v1/bids/{bid}/counter"), &deal.buyer.key, json!({ "amount": 1000 }))
        .await
        .expect_problem(409, "final_offer");
    app.post_empty(format!("/v1/bids/{bid}/accept"), &deal.seller.key).await.expect_problem(403, "not_your_turn");
    app.post(format!("/v1/orders/{order}/negotiations"), &deal.buyer.key, cancel())
        .await
        .expect_problem(409, "negotiation_open");

    let accepted = app.post_empty(format!("/v1/bids/{bid}/accept"), &deal.buyer.key).await.expect(200);
    let cancelled = &accepted.body["order"];
    assert_eq!(cancelled["status"], "CANCELLED");
    assert!(cancelled["cancelled_at"].is_string());
    assert_eq!((cancelled["refund_due"].as_i64(), cancelled["outstanding"].as_i64()), (Some(30000), Some(0)));
    let listing = app.get(format!("/v1/listings/{}", deal.listing), &deal.seller.key).await.expect(200);
    assert_eq!(
        (listing.body["status"].as_str(), listing.body["quantity_available"].as_i64()),
        (Some("ACTIVE"), Some(1))
    );

    // A cancelled order is neither fulfilled nor paid.
    app.post_empty(format!("/v1/orders/{order}/fulfil"), &deal.seller.key)
        .await
        .expect_problem(409, "invalid_transition");
    app.post(format!("/v1/orders/{order}/payments"), &deal.buyer.key, json!({ "amount": 100, "reference": "x" }))
        .await
        .expect_problem(409, "invalid_transition");

    let events = events_after(&app, &deal.buyer, 0, 0).await;
    let on_order: Vec<Value> = events.into_iter().filter(|e| e["order_id"] == order.as_str()).collect();
    assert_eq!(types(&on_order).last(), Some(&"order.cancelled"));
}

#[tokio::test]
async fn racing_answers_and_order_actions_have_one_winner_and_an_exact_ledger() {
    let app = TestApp::spawn().await;

    // Two accepts of one refund: one records it.
    let (deal, order) = paid_order(&app, json!({}), 100000).await;
    let opened = open(&app, &deal.buyer, &order, refund(25000)).await;
    let accept = format!("/v1/bids/{}/accept", id(&opened["bid"]));
    let (a, b) = tokio::join!(app.post_empty(&accept, &deal.seller.key), app.post_empty(&accept, &deal.seller.key));
    let mut statuses = [a.status, b.status];
    statuses.sort();
    assert_eq!(statuses, [200, 409]);
    assert_eq!(read_order(&app, &deal.buyer, &order).await["refunded_amount"], 25000);

    // `complete` racing a refund's opening, on fulfilled orders: one of the two wins each time.
    for _ in 0..4 {
        let (deal, order) = paid_order(&app, json!({}), 100000).await;
        app.post_empty(format!("/v1/orders/{order}/fulfil"), &deal.seller.key).await.expect(200);
        let (completed, opened) = tokio::join!(
            app.post_empty(format!("/v1/orders/{order}/complete"), &deal.buyer.key),
            app.post(format!("/v1/orders/{order}/negotiations"), &deal.buyer.key, refund(5000)),
        );
        let read = read_order(&app, &deal.buyer, &order).await;
        match (completed.status, opened.status) {
            (200, 409) => {
                assert_eq!(opened.code(), "invalid_transition");
                assert_eq!(read["status"], "COMPLETED");
            }
            (409, 201) => {
                assert_eq!(completed.code(), "negotiation_open");
                assert_eq!(read["status"], "FULFILLED");
            }
            other => panic!("complete and a refund's opening both won or both lost: {other:?}"),
        }
    }

    // `fulfil` racing the acceptance of a cancellation: the order is fulfilled or cancelled.
    for _ in 0..4 {
        let (deal, order) = paid_order(&app, json!({ "quantity": 1 }), 0).await;
        let opened = open(&app, &deal.buyer, &order, cancel()).await;
        let (fulfilled, accepted) = tokio::join!(
            app.post_empty(format!("/v1/orders/{order}/fulfil"), &deal.seller.key),
            app.post_empty(format!("/v1/bids/{}/accept", id(&opened["bid"])), &deal.seller.key),
        );
        let read = read_order(&app, &deal.buyer, &order).await;
        let listing = app.get(format!("/v1/listings/{}", deal.listing), &deal.seller.key).await.expect(200);
        match (fulfilled.status, accepted.status) {
            (200, 409) => {
                assert_eq!(accepted.code(), "invalid_transition");
                assert_eq!(read["status"], "FULFILLED");
                assert_eq!(listing.body["quantity_available"], 0);
            }
            (409, 200) => {
                assert_eq!(fulfilled.code(), "invalid_transition");
                assert_eq!(read["status"], "CANCELLED");
                assert_eq!(listing.body["quantity_available"], 1);
            }
            other => panic!("fulfil and a cancellation both won or both lost: {other:?}"),
        }
    }
    let ledgers_exact =
        app.count("SELECT count(*) FROM orders WHERE refunded_amount > paid_amount OR paid_amount > amount").await;
    assert_eq!(ledgers_exact, 0);
}

#[tokio::test]
async fn bad_input_on_an_order_negotiation_is_refused_and_changes_nothing() {
    let app = TestApp::spawn().await;
    let (deal, order) = paid_order(&app, json!({}), 30000).await;
    let open_refund = open(&app, &deal.buyer, &order, refund(10000)).await;
    let (shipped, fulfilled) = paid_order(&app, json!({}), 0).await;
    app.post_empty(format!("/v1/orders/{fulfilled}/fulfil"), &shipped.seller.key).await.expect(200);
    let outsider = app.register("outsider").await;
    let before = app.snapshot().await;

    let path = format!("/v1/orders/{order}/negotiations");
    // Someone else's order does not exist.
    app.post(&path, &outsider.key, refund(1000)).await.expect_problem(404, "not_found");
    app.post(format!("/v1/orders/{}/negotiations", uuid::Uuid::now_v7()), &deal.buyer.key, refund(1000))
        .await
        .expect_problem(404, "not_found");
    // A refund above what was paid; a second open refund; a refund asked by the seller.
    let over = app.post(&path, &deal.buyer.key, refund(30001)).await.expect_problem(409, "exceeds_refundable");
    assert_eq!(over.body["refundable"], 30000);
    let second = app.post(&path, &deal.buyer.key, refund(1000)).await.expect_problem(409, "negotiation_open");
    assert_eq!(second.body["thread_id"], open_refund["thread"]["id"]);
    app.post(&path, &deal.seller.key, refund(1000)).await.expect_problem(403, "forbidden");
    // Cancelling after fulfilment; completing before it.
    let cancelled = app
        .post(format!("/v1/orders/{fulfilled}/negotiations"), &shipped.buyer.key, cancel())
        .await
        .expect_problem(409, "invalid_transition");
    assert_eq!(cancelled.body["current_status"], "FULFILLED");
    app.post_empty(format!("/v1/orders/{order}/complete"), &deal.buyer.key)
        .await
        .expect_problem(409, "invalid_transition");
    // Fields each refused by name.
    let refused = |body: Value, field: &'static str| {
        let path = path.clone();
        let key = deal.buyer.key.clone();
        let app = &app;
        async move {
            let resp = app.post(&path, &key, body).await.expect_problem(422, "validation_failed");
            let fields: Vec<String> = resp.body["errors"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["field"].as_str().unwrap().to_owned())
                .collect();
            assert!(fields.iter().any(|f| f == field), "{field} not among {fields:?}");
        }
    };
    refused(json!({ "kind": "price", "amount": 1000, "terms": {} }), "kind").await;
    refused(json!({ "kind": "refund", "terms": { "reason": "damaged" } }), "amount").await;
    refused(json!({ "kind": "cancel", "amount": 1000, "terms": { "reason": "no" } }), "amount").await;
    refused(json!({ "kind": "refund", "amount": 1000, "terms": { "reason": "bored" } }), "terms").await;
    refused(
        json!({ "kind": "refund", "amount": 1000, "terms": { "reason": "late", "evidence": ["http://x.example/a"] } }),
        "terms.evidence[0]",
    )
    .await;
    let eleven: Vec<String> = (0..11).map(|i| format!("https://x.example/{i}")).collect();
    refused(
        json!({ "kind": "refund", "amount": 1000, "terms": { "reason": "late", "evidence": eleven } }),
        "terms.evidence",
    )
    .await;
    refused(json!({ "kind": "cancel", "terms": { "reason": "" } }), "terms.reason").await;
    refused(json!({ "kind": "swap", "terms": {} }), "kind").await;
    app.post(
        &path,
        &deal.buyer.key,
        json!({ "kind": "refund", "amount": 1000, "terms": { "reason": "late" }, "extra": 1 }),
    )
    .await
    .expect_problem(400, "malformed_request");

    assert_eq!(app.snapshot().await, before, "a refused request changed something");
}

#[tokio::test]
async fn an_order_negotiation_outlives_its_listing_and_expires_by_the_sweeper() {
    let app = TestApp::spawn().await;
    let (deal, order) = paid_order(&app, json!({ "quantity": 2 }), 100000).await;
    let opened = open(&app, &deal.buyer, &order, refund(20000)).await;
    let thread = id(&opened["thread"]);

    // The listing's last unit sold ends its price negotiations, not the negotiations on its orders.
    let other = app.buyer("second-buyer").await;
    let haggling = app.place(&other, &deal.listing, 90000).await;
    let last = app.buyer("last-buyer").await;
    app.post_empty(format!("/v1/listings/{}/purchase", deal.listing), &last.key).await.expect(201);
    let price: String =
        sqlx::query_scalar("SELECT t.status FROM threads t JOIN bids b ON b.thread_id = t.id WHERE b.id = $1::uuid")
            .bind(&haggling)
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(price, "CLOSED");
    let read = app.get(format!("/v1/threads/{thread}"), &deal.seller.key).await.expect(200);
    assert_eq!(read.body["status"], "ACTIVE");

    // Past its deadline, the sweeper ends it as it ends a price's.
    sqlx::query("UPDATE bids SET expires_at = now() - interval '1 second' WHERE thread_id = $1::uuid")
        .bind(&thread)
        .execute(&app.pool)
        .await
        .unwrap();
    sqlx::query("UPDATE threads SET expires_at = now() - interval '1 second' WHERE id = $1::uuid")
        .bind(&thread)
        .execute(&app.pool)
        .await
        .unwrap();
    haggle_server::sweeper::run_once(&app.market(), 500).await.unwrap();
    let status: String = sqlx::query_scalar("SELECT status FROM threads WHERE id = $1::uuid")
        .bind(&thread)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(status, "EXPIRED");
    let escalated = app.post_empty(format!("/v1/threads/{thread}/escalate"), &deal.buyer.key).await.expect(200);
    assert_eq!(escalated.body["status"], "EXPIRED");
    // A new refund may open now that the first has ended.
    open(&app, &deal.buyer, &order, refund(1000)).await;
}

/// Runs the executor once, as its loop would.
async fn run_executor(app: &TestApp) -> Option<haggle_server::executor::Outcome> {
    haggle_server::executor::run_once(&app.market(), Default::default(), haggle_server::executor::DEFAULT_CHAIN)
        .await
        .unwrap()
        .map(|round| round.outcome)
}

#[tokio::test]
async fn a_sellers_refund_policy_accepts_within_its_share_and_counters_never_past_its_limit() {
    use haggle_server::executor::Outcome;
    let app = TestApp::spawn_with(|config| config.auto_workers = 0).await;
    let (deal, order) = paid_order(&app, json!({}), 100000).await;
    // Accept up to 10% of the order's amount (10000), never more than 30% (30000).
    let policy = json!({
        "limit": 80000,
        "counter": { "strategy": "split" },
        "refund": { "accept_up_to": 0.1, "limit": 0.3 },
    });
    // The listing sold its one unit: the seller's own policy answers for its orders.
    app.put("/v1/agents/me/policies/seller", &deal.seller.key, policy).await.expect(200);
    // A buyer's policy declares no refund: refused with nothing stored.
    let buyer_policy =
        json!({ "limit": 90000, "counter": { "strategy": "split" }, "refund": { "accept_up_to": 0.1, "limit": 0.3 } });
    app.put("/v1/agents/me/policies/buyer", &deal.buyer.key, buyer_policy)
        .await
        .expect_problem(422, "validation_failed");
    let bad =
        json!({ "limit": 80000, "counter": { "strategy": "split" }, "refund": { "accept_up_to": 0.5, "limit": 0.3 } });
    app.put("/v1/agents/me/policies/seller", &deal.seller.key, bad).await.expect_problem(422, "validation_failed");

    // An ask under the share is accepted by the policy, and recorded on the order.
    let small = open(&app, &deal.buyer, &order, refund(8000)).await;
    assert_eq!(app.count("SELECT count(*) FROM auto_tasks WHERE done_at IS NULL").await, 1);
    assert_eq!(run_executor(&app).await, Some(Outcome::Acted("accept")));
    let thread = app.get(format!("/v1/threads/{}", id(&small["thread"])), &deal.buyer.key).await.expect(200);
    assert_eq!(thread.body["status"], "ACCEPTED");
    assert_eq!(read_order(&app, &deal.buyer, &order).await["refunded_amount"], 8000);

    // One above is countered, the offers rising and never past 30000, whatever the buyer asks.
    let large = open(&app, &deal.buyer, &order, refund(60000)).await;
    let thread_id = id(&large["thread"]);
    let mut previous = 0;
    for ask in [45000, 36000, 31000] {
        assert_eq!(run_executor(&app).await, Some(Outcome::Acted("counter")));
        let read = app.get(format!("/v1/threads/{thread_id}"), &deal.buyer.key).await.expect(200);
        let last = read.body["bids"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["author"], "seller");
        let offer = last["amount"].as_i64().unwrap();
        assert!(offer > previous && offer <= 30000, "the seller's offer {offer} after {previous}");
        previous = offer;
        if read.body["status"] != "ACTIVE" || last["final"] == true {
            break;
        }
        app.post(format!("/v1/bids/{}/counter", id(&last)), &deal.buyer.key, json!({ "amount": ask }))
            .await
            .expect(201);
    }
    // Past its rounds or at its limit, the policy leaves the refund to the seller; never above.
    for _ in 0..3 {
        if run_executor(&app).await.is_none() {
            break;
        }
    }
    let read = app.get(format!("/v1/threads/{thread_id}"), &deal.seller.key).await.expect(200);
    for bid in read.body["bids"].as_array().unwrap().iter().filter(|bid| bid["author"] == "seller") {
        assert!(bid["amount"].as_i64().unwrap() <= 30000, "{bid}");
    }
    assert_eq!(read_order(&app, &deal.buyer, &order).await["refunded_amount"], 8000, "nothing above the limit agreed");
}

#[tokio::test]
async fn a_refund_policys_move_waits_for_approval_when_the_sellers_rules_hold_policy_refunds() {
    use haggle_server::executor::Outcome;
    let app = TestApp::spawn_with(|config| config.auto_workers = 0).await;
    let (deal, order) = paid_order(&app, json!({}), 100000).await;
    let rules = json!({ "rules": [{ "move": "refund", "above": 5000 }], "policy_moves": true });
    app.put("/v1/agents/me/approval-rules", &deal.seller.key, rules).await.expect(200);
    let policy = json!({
        "limit": 80000,
        "counter": { "strategy": "split" },
        "refund": { "accept_up_to": 0.1, "limit": 0.3 },
    });
    app.put("/v1/agents/me/policies/seller", &deal.seller.key, policy).await.expect(200);

    // The policy would accept 80.00 back; above the rule's 50.00, its acceptance is held.
    let asked = open(&app, &deal.buyer, &order, refund(8000)).await;
    assert_eq!(run_executor(&app).await, Some(Outcome::Stopped("approval_held")));
    let pending = app.get("/v1/approvals?status=PENDING", &deal.seller.key).await.expect(200);
    let approval = pending.body["data"][0].clone();
    assert_eq!(approval["move"]["move"], "refund", "{approval}");
    assert_eq!((approval["move"]["amount"].clone(), approval["move"]["party"].clone()), (json!(8000), json!("seller")));
    let thread = app.get(format!("/v1/threads/{}", id(&asked["thread"])), &deal.buyer.key).await.expect(200);
    assert_eq!(thread.body["status"], "ACTIVE", "nothing made while it waits");
    assert_eq!(read_order(&app, &deal.buyer, &order).await["refunded_amount"], 0);

    // Approving makes the acceptance, and the refund is recorded.
    let approval_id = approval["id"].as_str().unwrap();
    app.post_empty(format!("/v1/approvals/{approval_id}/approve"), &deal.seller.key).await.expect(200);
    let thread = app.get(format!("/v1/threads/{}", id(&asked["thread"])), &deal.buyer.key).await.expect(200);
    assert_eq!(thread.body["status"], "ACCEPTED");
    assert_eq!(read_order(&app, &deal.buyer, &order).await["refunded_amount"], 8000);

    // A refund the rule does not catch is made by the policy at once.
    open(&app, &deal.buyer, &order, refund(4000)).await;
    assert_eq!(run_executor(&app).await, Some(Outcome::Acted("accept")));
    assert_eq!(read_order(&app, &deal.buyer, &order).await["refunded_amount"], 12000);
}

#[tokio::test]
async fn a_refund_policy_set_after_the_buyer_asked_answers_the_waiting_refund() {
    use haggle_server::executor::Outcome;
    let app = TestApp::spawn_with(|config| config.auto_workers = 0).await;
    let (deal, order) = paid_order(&app, json!({}), 100000).await;
    let asked = open(&app, &deal.buyer, &order, refund(8000)).await;
    assert_eq!(app.count("SELECT count(*) FROM auto_tasks").await, 0, "no policy yet: the seller answers");

    // A policy that declares no refund takes nothing over.
    let price_only = json!({ "limit": 80000, "counter": { "strategy": "split" } });
    app.put("/v1/agents/me/policies/seller", &deal.seller.key, price_only).await.expect(200);
    assert_eq!(app.count("SELECT count(*) FROM auto_tasks").await, 0);

    // One that declares it answers the refund already waiting.
    let policy = json!({
        "limit": 80000,
        "counter": { "strategy": "split" },
        "refund": { "accept_up_to": 0.1, "limit": 0.3 },
    });
    app.put("/v1/agents/me/policies/seller", &deal.seller.key, policy).await.expect(200);
    assert_eq!(app.count("SELECT count(*) FROM auto_tasks WHERE done_at IS NULL").await, 1);
    assert_eq!(run_executor(&app).await, Some(Outcome::Acted("accept")));
    let thread = app.get(format!("/v1/threads/{}", id(&asked["thread"])), &deal.buyer.key).await.expect(200);
    assert_eq!(thread.body["status"], "ACCEPTED");
    assert_eq!(read_order(&app, &deal.buyer, &order).await["refunded_amount"], 8000);
}
