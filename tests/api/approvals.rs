//! Approvals (SPEC §10) over HTTP: rules that hold an agent's moves, approvers and their
//! tokens, approving (the move made then, or FAILED), denying, budgets, expiry, and every
//! refusal with its code.

use serde_json::{Value, json};

use crate::events::{events_after, types};
use crate::support::{Agent, Deal, TestApp, eventually};

/// The types of the agent's events.
async fn event_types(app: &TestApp, agent: &Agent) -> Vec<String> {
    types(&events_after(app, agent, 0, 0).await).into_iter().map(str::to_owned).collect()
}

const ACCEPT_ABOVE_500: &str = r#"{"rules": [{"move": "accept", "buyer_above": 50000}]}"#;

fn rules(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

async fn approver(app: &TestApp, agent: &Agent, name: &str) -> String {
    let resp = app.post("/v1/agents/me/approvers", &agent.key, json!({ "name": name })).await.expect(201);
    let token = resp.body["token"].as_str().unwrap().to_owned();
    assert!(token.starts_with("hap_"), "{token}");
    assert!(token.starts_with(resp.body["approver"]["prefix"].as_str().unwrap()));
    token
}

/// A thread where the seller countered the buyer's opening at `seller_amount`: the seller's
/// pending counter's id.
async fn countered(app: &TestApp, deal: &Deal, opening: i64, seller_amount: i64) -> String {
    let bid = app.place(&deal.buyer, &deal.listing, opening).await;
    app.counter(&deal.seller, &bid, seller_amount).await
}

#[tokio::test]
async fn an_acceptance_above_the_bound_waits_for_its_approver_and_then_makes_the_order() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    app.put("/v1/agents/me/approval-rules", &deal.buyer.key, rules(ACCEPT_ABOVE_500)).await.expect(200);
    let token = approver(&app, &deal.buyer, "Alice").await;
    let counter = countered(&app, &deal, 40000, 60000).await;

    // Held: nothing is made, and the request describes the exact move.
    let held = app.post_empty(format!("/v1/bids/{counter}/accept"), &deal.buyer.key).await.expect(202);
    let approval = held.body["approval"].clone();
    let id = approval["id"].as_str().unwrap().to_owned();
    assert_eq!(approval["status"], "PENDING");
    assert_eq!(approval["move"]["move"], "accept");
    assert_eq!(approval["move"]["amount"], 60000);
    assert_eq!(approval["move"]["bid_id"], counter.as_str());
    assert_eq!(approval["approvers"], json!(["agent", "Alice"]));
    assert_eq!(approval["move_hash"].as_str().unwrap().len(), 64);
    let bid = app.get(format!("/v1/bids/{counter}"), &deal.buyer.key).await.expect(200);
    assert_eq!(bid.body["status"], "PENDING");
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 0);

    // The approver reads it, approves it, and the order is made.
    let pending = app.get("/v1/approvals?status=PENDING", &token).await.expect(200);
    assert_eq!(pending.body["data"][0]["id"], id.as_str());
    let approved = app.post_empty(format!("/v1/approvals/{id}/approve"), &token).await.expect(200);
    assert_eq!(approved.body["approval"]["status"], "APPROVED");
    assert_eq!(approved.body["approval"]["approver"], "Alice");
    assert_eq!(approved.body["bid"]["status"], "ACCEPTED");
    assert_eq!(approved.body["order"]["amount"], 60000);
    assert_eq!(approved.body["approval"]["order_id"], approved.body["order"]["id"]);
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 1);

    // Approving twice is a conflict; the agent heard of its request, the seller only of the order.
    let again =
        app.post_empty(format!("/v1/approvals/{id}/approve"), &token).await.expect_problem(409, "invalid_transition");
    assert_eq!(again.body["current_status"], "APPROVED");
    let buyer_types = event_types(&app, &deal.buyer).await;
    assert!(buyer_types.contains(&"approval.requested".to_owned()), "{buyer_types:?}");
    assert!(buyer_types.contains(&"approval.approved".to_owned()), "{buyer_types:?}");
    let seller_types = event_types(&app, &deal.seller).await;
    assert!(seller_types.iter().all(|kind| !kind.starts_with("approval.")), "{seller_types:?}");
    assert!(seller_types.contains(&"order.created".to_owned()), "{seller_types:?}");
}

#[tokio::test]
async fn an_acceptance_within_the_bound_is_made_at_once() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    app.put("/v1/agents/me/approval-rules", &deal.buyer.key, rules(ACCEPT_ABOVE_500)).await.expect(200);
    let counter = countered(&app, &deal, 40000, 50000).await;
    let accepted = app.post_empty(format!("/v1/bids/{counter}/accept"), &deal.buyer.key).await.expect(200);
    assert_eq!(accepted.body["order"]["amount"], 50000);
}

#[tokio::test]
async fn an_approval_after_the_seller_withdrew_fails_and_makes_nothing() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    app.put("/v1/agents/me/approval-rules", &deal.buyer.key, rules(ACCEPT_ABOVE_500)).await.expect(200);
    let counter = countered(&app, &deal, 40000, 60000).await;
    let held = app.post_empty(format!("/v1/bids/{counter}/accept"), &deal.buyer.key).await.expect(202);
    let id = held.body["approval"]["id"].as_str().unwrap().to_owned();
    app.post_empty(format!("/v1/bids/{counter}/withdraw"), &deal.seller.key).await.expect(200);

    let failed = app.post_empty(format!("/v1/approvals/{id}/approve"), &deal.buyer.key).await.expect(200);
    assert_eq!(failed.body["approval"]["status"], "FAILED");
    assert_eq!(failed.body["approval"]["failure"]["code"], "invalid_transition");
    assert_eq!(failed.body["order"], Value::Null);
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 0);
    let types = event_types(&app, &deal.buyer).await;
    assert!(types.contains(&"approval.failed".to_owned()), "{types:?}");
}

#[tokio::test]
async fn a_budget_lets_three_counters_through_and_asks_at_the_fourth() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "max_rounds": 12 })).await;
    let body = json!({ "rules": [{ "move": "counter", "buyer_above": 40000 }] });
    app.put("/v1/agents/me/approval-rules", &deal.buyer.key, body).await.expect(200);
    let mut seller_bid = countered(&app, &deal, 30000, 90000).await;

    // The first counter above 400.00 is held; approved with a budget up to 500.00 on the thread.
    let held = app.post(format!("/v1/bids/{seller_bid}/counter"), &deal.buyer.key, json!({ "amount": 41000 })).await;
    let id = held.expect(202).body["approval"]["id"].as_str().unwrap().to_owned();
    let grant = json!({ "budget": { "amount": 40000, "expires_in": 3600, "scope": "thread" } });
    let low = app.post(format!("/v1/approvals/{id}/approve"), &deal.buyer.key, grant).await;
    assert_eq!(low.expect_problem(422, "validation_failed").body["errors"][0]["field"], "budget.amount");
    let grant = json!({ "budget": { "amount": 50000, "expires_in": 3600, "scope": "thread" }, "note": "up to 500" });
    let approved = app.post(format!("/v1/approvals/{id}/approve"), &deal.buyer.key, grant).await.expect(200);
    assert_eq!(approved.body["approval"]["budget"]["amount"], 50000);
    // The counter carries the approval it was made under, with its budget.
    assert_eq!(approved.body["bid"]["approval"]["id"], id.as_str());
    assert_eq!(approved.body["bid"]["approval"]["budget"]["amount"], 50000);
    assert_eq!(approved.body["bid"]["approval"]["budget"]["scope"], "thread");
    let mut buyer_bid = approved.body["bid"]["id"].as_str().unwrap().to_owned();

    // Three more counters within the budget go through; the fourth, beyond it, asks again.
    for (seller, buyer) in [(85000, 44000), (80000, 47000), (75000, 50000)] {
        seller_bid = app.counter(&deal.seller, &buyer_bid, seller).await;
        buyer_bid = app.counter(&deal.buyer, &seller_bid, buyer).await;
    }
    seller_bid = app.counter(&deal.seller, &buyer_bid, 70000).await;
    let fourth = app.post(format!("/v1/bids/{seller_bid}/counter"), &deal.buyer.key, json!({ "amount": 52000 })).await;
    assert_eq!(fourth.expect(202).body["approval"]["move"]["amount"], 52000);
}

#[tokio::test]
async fn two_approvers_racing_have_one_winner() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    app.put("/v1/agents/me/approval-rules", &deal.buyer.key, rules(ACCEPT_ABOVE_500)).await.expect(200);
    let (alice, bob) = (approver(&app, &deal.buyer, "Alice").await, approver(&app, &deal.buyer, "Bob").await);
    let counter = countered(&app, &deal, 40000, 60000).await;
    let held = app.post_empty(format!("/v1/bids/{counter}/accept"), &deal.buyer.key).await.expect(202);
    let id = held.body["approval"]["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/approvals/{id}/approve");
    let (first, second) = tokio::join!(app.post_empty(&path, &alice), app.post_empty(&path, &bob));
    let mut statuses = [first.status, second.status];
    statuses.sort();
    assert_eq!(statuses, [200, 409], "{} {}", first.body, second.body);
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 1);
}

#[tokio::test]
async fn a_request_expires_by_the_sweeper_and_then_cannot_be_approved() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let body = json!({ "rules": [{ "move": "place" }], "ttl_seconds": 60 });
    app.put("/v1/agents/me/approval-rules", &deal.buyer.key, body).await.expect(200);
    let held =
        app.post(format!("/v1/listings/{}/bids", deal.listing), &deal.buyer.key, json!({ "amount": 30000 })).await;
    let id = held.expect(202).body["approval"]["id"].as_str().unwrap().to_owned();
    assert_eq!(app.count("SELECT count(*) FROM threads").await, 0);
    sqlx::query("UPDATE approvals SET expires_at = now() - interval '1 second' WHERE id = $1::uuid")
        .bind(&id)
        .execute(&app.pool)
        .await
        .unwrap();
    // Read before the sweeper: already EXPIRED.
    let read = app.get(format!("/v1/approvals/{id}"), &deal.buyer.key).await.expect(200);
    assert_eq!(read.body["status"], "EXPIRED");
    let swept = haggle_server::sweeper::run_once(&app.market(), 100).await.unwrap();
    assert_eq!(swept.expired_approvals, 1);
    let expired = app.get("/v1/approvals?status=EXPIRED", &deal.buyer.key).await.expect(200);
    assert_eq!(expired.body["data"][0]["id"], id.as_str());
    app.post_empty(format!("/v1/approvals/{id}/approve"), &deal.buyer.key)
        .await
        .expect_problem(409, "approval_expired");
    let types = event_types(&app, &deal.buyer).await;
    assert!(types.contains(&"approval.expired".to_owned()), "{types:?}");
    assert_eq!(app.count("SELECT count(*) FROM threads").await, 0);
}

#[tokio::test]
async fn a_held_placement_and_purchase_are_made_when_approved_and_a_denial_carries_its_note() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "quantity": 2 })).await;
    let body = json!({ "rules": [{ "move": "place" }, { "move": "purchase" }] });
    app.put(format!("/v1/listings/{}/approval-rules", deal.listing), &deal.buyer.key, body).await.expect(200);
    let read = app.get(format!("/v1/listings/{}/approval-rules", deal.listing), &deal.buyer.key).await.expect(200);
    assert_eq!(read.body["scope"], "listing");
    assert_eq!(read.body["ttl_seconds"], 3600);

    let held =
        app.post(format!("/v1/listings/{}/bids", deal.listing), &deal.buyer.key, json!({ "amount": 30000 })).await;
    let id = held.expect(202).body["approval"]["id"].as_str().unwrap().to_owned();
    let placed = app.post_empty(format!("/v1/approvals/{id}/approve"), &deal.buyer.key).await.expect(200);
    assert_eq!(placed.body["bid"]["amount"], 30000);
    assert_eq!(placed.body["thread"]["status"], "ACTIVE");

    let held = app.post_empty(format!("/v1/listings/{}/purchase", deal.listing), &deal.buyer.key).await.expect(202);
    let id = held.body["approval"]["id"].as_str().unwrap().to_owned();
    let denied =
        app.post(format!("/v1/approvals/{id}/deny"), &deal.buyer.key, json!({ "note": "not this month" })).await;
    assert_eq!(denied.expect(200).body["status"], "DENIED");
    let read = app.get(format!("/v1/approvals/{id}"), &deal.buyer.key).await.expect(200);
    assert_eq!(read.body["note"], "not this month");
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 0);

    // Withdrawn by the agent: gone from the pending list.
    let held = app.post_empty(format!("/v1/listings/{}/purchase", deal.listing), &deal.buyer.key).await.expect(202);
    let id = held.body["approval"]["id"].as_str().unwrap().to_owned();
    let withdrawn = app.post_empty(format!("/v1/approvals/{id}/withdraw"), &deal.buyer.key).await.expect(200);
    assert_eq!(withdrawn.body["status"], "WITHDRAWN");
    let pending = app.get("/v1/approvals?status=PENDING", &deal.buyer.key).await.expect(200);
    assert_eq!(pending.body["data"], json!([]));

    // Without the rules, the purchase is made at once.
    app.delete(format!("/v1/listings/{}/approval-rules", deal.listing), &deal.buyer.key).await.expect(204);
    app.post_empty(format!("/v1/listings/{}/purchase", deal.listing), &deal.buyer.key).await.expect(201);
}

#[tokio::test]
async fn an_approver_token_is_refused_everywhere_but_the_approvals() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let token = approver(&app, &deal.buyer, "Alice").await;
    let bid = app.place(&deal.buyer, &deal.listing, 30000).await;
    app.post(format!("/v1/bids/{bid}/counter"), &token, json!({ "amount": 31000 }))
        .await
        .expect_problem(403, "forbidden");
    app.get("/v1/agents/me", &token).await.expect_problem(403, "forbidden");
    app.get("/v1/agents/me/keys", &token).await.expect_problem(403, "forbidden");
    app.put("/v1/agents/me/approval-rules", &token, rules(ACCEPT_ABOVE_500)).await.expect_problem(403, "forbidden");
    app.get("/v1/approvals", &token).await.expect(200);

    // Another agent's request does not exist for this approver; a revoked token is refused.
    let other = Deal::new(&app, json!({})).await;
    app.put("/v1/agents/me/approval-rules", &other.buyer.key, json!({ "rules": [{ "move": "place" }] }))
        .await
        .expect(200);
    let held =
        app.post(format!("/v1/listings/{}/bids", other.listing), &other.buyer.key, json!({ "amount": 30000 })).await;
    let id = held.expect(202).body["approval"]["id"].as_str().unwrap().to_owned();
    app.post_empty(format!("/v1/approvals/{id}/approve"), &token).await.expect_problem(404, "not_found");
    app.post_empty(format!("/v1/approvals/{id}/withdraw"), &token).await.expect_problem(404, "not_found");
    let approvers = app.get("/v1/agents/me/approvers", &deal.buyer.key).await.expect(200);
    let approver_id = approvers.body["data"][0]["id"].as_str().unwrap().to_owned();
    app.delete(format!("/v1/agents/me/approvers/{approver_id}"), &deal.buyer.key).await.expect(200);
    app.get("/v1/approvals", &token).await.expect_problem(401, "unauthenticated");
}

#[tokio::test]
async fn bad_rules_and_answers_are_refused_with_their_codes() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let put = |body: Value| app.put("/v1/agents/me/approval-rules", &deal.buyer.key, body);
    put(json!({ "rules": [{ "move": "accept" }], "extra": 1 })).await.expect_problem(400, "malformed_request");
    put(json!({ "rules": [{ "move": "accept", "below": 5 }] })).await.expect_problem(400, "malformed_request");
    let contradictory = put(json!({ "rules": [{ "move": "place", "seller_below": 5000 }] })).await;
    assert_eq!(
        contradictory.expect_problem(422, "validation_failed").body["errors"][0]["field"],
        "rules[0].seller_below"
    );
    let twice = put(json!({ "rules": [{ "move": "accept" }, { "move": "accept" }] })).await;
    assert_eq!(twice.expect_problem(422, "validation_failed").body["errors"][0]["field"], "rules[1].move");
    let ttl = put(json!({ "rules": [{ "move": "accept" }], "ttl_seconds": 5 })).await;
    assert_eq!(ttl.expect_problem(422, "validation_failed").body["errors"][0]["field"], "ttl_seconds");
    app.get("/v1/agents/me/approval-rules", &deal.buyer.key).await.expect_problem(404, "not_found");
    app.delete("/v1/agents/me/approval-rules", &deal.buyer.key).await.expect_problem(404, "not_found");

    // A move the agent cannot make there: a seller placing on its own listing.
    let own = json!({ "rules": [{ "move": "place" }] });
    let refused = app.put(format!("/v1/listings/{}/approval-rules", deal.listing), &deal.seller.key, own).await;
    assert_eq!(refused.expect_problem(422, "validation_failed").body["errors"][0]["field"], "rules[0].move");

    // A buyer whose tier cannot negotiate the listing only buys it at the ask.
    let public = app.register("public buyer").await;
    let counter = json!({ "rules": [{ "move": "counter" }] });
    let refused = app.put(format!("/v1/listings/{}/approval-rules", deal.listing), &public.key, counter).await;
    assert_eq!(refused.expect_problem(422, "validation_failed").body["errors"][0]["field"], "rules[0].move");

    // Twenty pending requests at most.
    put(json!({ "rules": [{ "move": "purchase" }] })).await.expect(200);
    for _ in 0..20 {
        app.post_empty(format!("/v1/listings/{}/purchase", deal.listing), &deal.buyer.key).await.expect(202);
    }
    let over = app.post_empty(format!("/v1/listings/{}/purchase", deal.listing), &deal.buyer.key).await;
    assert_eq!(over.expect_problem(409, "approval_limit_reached").body["limit"], 20);

    // Ten approvers at most; an unknown request is not found.
    for i in 0..10 {
        approver(&app, &deal.buyer, &format!("approver {i}")).await;
    }
    let eleventh = app.post("/v1/agents/me/approvers", &deal.buyer.key, json!({ "name": "one more" })).await;
    eleventh.expect_problem(409, "approver_limit_reached");
    let unknown = uuid::Uuid::now_v7();
    app.post_empty(format!("/v1/approvals/{unknown}/approve"), &deal.buyer.key).await.expect_problem(404, "not_found");
}

#[tokio::test]
async fn a_policys_counter_is_held_when_the_rules_hold_policy_moves() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let rules = json!({ "rules": [{ "move": "counter", "seller_below": 90000 }], "policy_moves": true });
    app.put("/v1/agents/me/approval-rules", &deal.seller.key, rules).await.expect(200);
    let policy = json!({ "limit": 70000, "counter": { "strategy": "split" } });
    app.put(format!("/v1/listings/{}/policy", deal.listing), &deal.seller.key, policy).await.expect(200);
    let bid = app.place(&deal.buyer, &deal.listing, 60000).await;

    // The policy's counter (the split, 80000) waits for approval; the buyer's bid stays pending.
    let approval = eventually("the policy's counter held", || async {
        let pending = app.get("/v1/approvals?status=PENDING", &deal.seller.key).await.expect(200);
        pending.body["data"].as_array().unwrap().first().cloned()
    })
    .await;
    assert_eq!(approval["move"]["move"], "counter");
    assert_eq!(approval["move"]["amount"], 80000);
    assert_eq!(approval["move"]["party"], "seller");
    assert_eq!(app.get(format!("/v1/bids/{bid}"), &deal.buyer.key).await.expect(200).body["status"], "PENDING");

    let id = approval["id"].as_str().unwrap();
    let approved = app.post_empty(format!("/v1/approvals/{id}/approve"), &deal.seller.key).await.expect(200);
    assert_eq!(approved.body["bid"]["amount"], 80000);
    assert_eq!(app.get(format!("/v1/bids/{bid}"), &deal.buyer.key).await.expect(200).body["status"], "COUNTERED");
}

/// Verifies a compact JWS receipt with the server's published keys, as an outsider would: the
/// payload if the signature holds, `None` if it does not.
async fn verify_receipt(app: &TestApp, receipt: &str) -> Option<Value> {
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use ed25519_dalek::{Signature, Verifier, VerifyingKey};

    let jwks = app.send(reqwest::Method::GET, "/.well-known/jwks.json", None, crate::support::Body::None, &[]).await;
    let jwks = jwks.expect(200).body;
    let mut parts = receipt.split('.');
    let (header, payload, signature) = (parts.next()?, parts.next()?, parts.next()?);
    let header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(header).ok()?).ok()?;
    assert_eq!(header["alg"], "EdDSA");
    let key = jwks["keys"].as_array()?.iter().find(|key| key["kid"] == header["kid"])?;
    assert_eq!((key["kty"].as_str(), key["crv"].as_str()), (Some("OKP"), Some("Ed25519")));
    let public: [u8; 32] = URL_SAFE_NO_PAD.decode(key["x"].as_str()?).ok()?.try_into().ok()?;
    let signature: [u8; 64] = URL_SAFE_NO_PAD.decode(signature).ok()?.try_into().ok()?;
    let signing_input = format!("{}.{payload}", receipt.split('.').next()?);
    VerifyingKey::from_bytes(&public)
        .ok()?
        .verify(signing_input.as_bytes(), &Signature::from_bytes(&signature))
        .ok()?;
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()
}

#[tokio::test]
async fn the_order_of_an_approved_acceptance_carries_its_approval_and_a_receipt_that_verifies() {
    use sha2::{Digest, Sha256};

    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    app.put("/v1/agents/me/approval-rules", &deal.buyer.key, rules(ACCEPT_ABOVE_500)).await.expect(200);
    let token = approver(&app, &deal.buyer, "Alice").await;
    let counter = countered(&app, &deal, 40000, 60000).await;
    let held = app.post_empty(format!("/v1/bids/{counter}/accept"), &deal.buyer.key).await.expect(202);
    let id = held.body["approval"]["id"].as_str().unwrap().to_owned();
    let approved = app.post_empty(format!("/v1/approvals/{id}/approve"), &token).await.expect(200);

    // The order carries the approval, as read back too.
    let order = approved.body["order"].clone();
    assert_eq!(order["approval"]["id"], id.as_str());
    assert_eq!(order["approval"]["approver"], "Alice");
    let read = app.get(format!("/v1/orders/{}", order["id"].as_str().unwrap()), &deal.buyer.key).await.expect(200);
    assert_eq!(read.body["approval"], order["approval"]);

    // The receipt verifies with the published keys, over the exact move and its hash.
    let receipt = approved.body["approval"]["receipt"].as_str().unwrap().to_owned();
    let claims = verify_receipt(&app, &receipt).await.expect("the receipt verifies");
    assert_eq!(claims["approval_id"], id.as_str());
    assert_eq!(claims["approver"], "Alice");
    assert_eq!(claims["order_id"], order["id"]);
    assert_eq!(claims["move"], approved.body["approval"]["move"]);
    let canonical = haggle_domain::approval::canonical_json(&claims["move"]);
    assert_eq!(claims["move_hash"].as_str().unwrap(), hex::encode(Sha256::digest(canonical.as_bytes())));
    assert_eq!(claims["move_hash"], approved.body["approval"]["move_hash"]);

    // Altered (a larger amount) or forged (another signature), it fails.
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let mut altered = claims.clone();
    altered["move"]["amount"] = json!(6000);
    let parts: Vec<&str> = receipt.split('.').collect();
    let forged_payload = URL_SAFE_NO_PAD.encode(haggle_domain::approval::canonical_json(&altered));
    let altered_receipt = format!("{}.{forged_payload}.{}", parts[0], parts[2]);
    assert!(verify_receipt(&app, &altered_receipt).await.is_none(), "an altered receipt must not verify");
    let forged = format!("{}.{}.{}", parts[0], parts[1], URL_SAFE_NO_PAD.encode([7u8; 64]));
    assert!(verify_receipt(&app, &forged).await.is_none(), "a forged signature must not verify");
}

#[tokio::test]
async fn the_most_specific_rules_apply() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    // By default every counter waits; on this listing only those above 700.00.
    app.put("/v1/agents/me/approval-rules", &deal.buyer.key, json!({ "rules": [{ "move": "counter" }] }))
        .await
        .expect(200);
    let listing_rules = json!({ "rules": [{ "move": "counter", "buyer_above": 70000 }] });
    app.put(format!("/v1/listings/{}/approval-rules", deal.listing), &deal.buyer.key, listing_rules).await.expect(200);
    let seller_bid = countered(&app, &deal, 30000, 90000).await;

    // The listing's rules apply: 50000 passes, 75000 is held.
    let buyer_bid = app.counter(&deal.buyer, &seller_bid, 50000).await;
    let seller_bid = app.counter(&deal.seller, &buyer_bid, 85000).await;
    let held = app.post(format!("/v1/bids/{seller_bid}/counter"), &deal.buyer.key, json!({ "amount": 75000 })).await;
    held.expect(202);

    // The thread's own rules replace them: counters pass, an acceptance waits.
    let thread = app.get(format!("/v1/bids/{seller_bid}"), &deal.buyer.key).await.expect(200).body["thread_id"].clone();
    let thread = thread.as_str().unwrap();
    let thread_rules = json!({ "rules": [{ "move": "accept" }], "ttl_seconds": 600 });
    app.put(format!("/v1/threads/{thread}/approval-rules"), &deal.buyer.key, thread_rules).await.expect(200);
    let read = app.get(format!("/v1/threads/{thread}/approval-rules"), &deal.buyer.key).await.expect(200);
    assert_eq!((read.body["scope"].as_str(), read.body["ttl_seconds"].as_i64()), (Some("thread"), Some(600)));
    let buyer_bid = app.counter(&deal.buyer, &seller_bid, 75000).await;
    let seller_bid = app.counter(&deal.seller, &buyer_bid, 80000).await;
    let held = app.post_empty(format!("/v1/bids/{seller_bid}/accept"), &deal.buyer.key).await.expect(202);
    assert_eq!(held.body["approval"]["move"]["move"], "accept");
    // A thread's rules name no placement, and the seller's side of it has no buyer's bound.
    let place = json!({ "rules": [{ "move": "place" }] });
    app.put(format!("/v1/threads/{thread}/approval-rules"), &deal.buyer.key, place)
        .await
        .expect_problem(422, "validation_failed");
    let bound = json!({ "rules": [{ "move": "counter", "buyer_above": 100 }] });
    app.put(format!("/v1/threads/{thread}/approval-rules"), &deal.seller.key, bound)
        .await
        .expect_problem(422, "validation_failed");
}

#[tokio::test]
async fn a_keyed_move_held_for_approval_is_held_once_and_replayed() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let bid = app.place(&deal.buyer, &deal.listing, 40000).await;
    app.put("/v1/agents/me/approval-rules", &deal.seller.key, rules(r#"{"rules": [{"move": "counter"}]}"#))
        .await
        .expect(200);
    // A keyed counter, which would be made in one statement with its answer, is caught first:
    // its key is claimed under locks and the hold stored as its answer.
    let path = format!("/v1/bids/{bid}/counter");
    let body = json!({ "amount": 90000 });
    let held = app.post_keyed(&path, Some(&deal.seller.key), body.clone(), "held-counter").await.expect(202);
    let again = app.post_keyed(&path, Some(&deal.seller.key), body, "held-counter").await;
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.expect(202).body, held.body);
    assert_eq!(app.count("SELECT count(*) FROM approvals").await, 1);
    assert_eq!(app.count("SELECT count(*) FROM bids").await, 1);
}

#[tokio::test]
async fn an_approvers_webhook_takes_the_agents_approval_events_until_the_approver_is_revoked() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    app.put("/v1/agents/me/approval-rules", &deal.buyer.key, rules(ACCEPT_ABOVE_500)).await.expect(200);
    let body = json!({ "name": "Alice", "webhook_url": "http://127.0.0.1:9/alice" });
    let added = app.post("/v1/agents/me/approvers", &deal.buyer.key, body).await.expect(201);
    let webhook = &added.body["webhook"];
    assert!(webhook["secret"].as_str().unwrap().len() > 20, "{}", added.body);
    let webhook_id = webhook["webhook"]["id"].as_str().unwrap().to_owned();
    let approver_id = added.body["approver"]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        webhook["webhook"]["events"],
        json!(["approval.requested", "approval.approved", "approval.denied", "approval.expired", "approval.failed"])
    );

    let counter = countered(&app, &deal, 40000, 60000).await;
    app.post_empty(format!("/v1/bids/{counter}/accept"), &deal.buyer.key).await.expect(202);
    let delivered = |kind: &str| {
        format!(
            "SELECT count(*) FROM webhook_deliveries d JOIN events e ON e.id = d.event_id \
             WHERE d.webhook_id = '{webhook_id}' AND e.type = '{kind}'"
        )
    };
    assert_eq!(app.count(delivered("approval.requested")).await, 1);
    // Only approval events: the bids the agent's moves made are not its approver's.
    assert_eq!(
        app.count(format!("SELECT count(*) FROM webhook_deliveries WHERE webhook_id = '{webhook_id}'")).await,
        1
    );

    // A bad URL is refused naming the field, and adds no approver.
    let bad = json!({ "name": "Bob", "webhook_url": "not a url" });
    let refused =
        app.post("/v1/agents/me/approvers", &deal.buyer.key, bad).await.expect_problem(422, "validation_failed");
    assert_eq!(refused.body["errors"][0]["field"], "webhook_url");
    assert_eq!(app.count("SELECT count(*) FROM approvers").await, 1);

    // Revoked, its webhook is disabled and takes nothing more.
    app.delete(format!("/v1/agents/me/approvers/{approver_id}"), &deal.buyer.key).await.expect(200);
    let read = app.get(format!("/v1/webhooks/{webhook_id}"), &deal.buyer.key).await.expect(200);
    assert_eq!(read.body["status"], "DISABLED");
    // And stays so: its agent cannot enable it again for the revoked approver.
    let enabled = app.post_empty(format!("/v1/webhooks/{webhook_id}/enable"), &deal.buyer.key).await;
    let refused = enabled.expect_problem(409, "invalid_transition");
    assert!(refused.body["detail"].as_str().unwrap().contains("approver"), "{}", refused.body);
    let read = app.get(format!("/v1/webhooks/{webhook_id}"), &deal.buyer.key).await.expect(200);
    assert_eq!(read.body["status"], "DISABLED");
}

#[tokio::test]
async fn refunds_above_the_bound_are_held_and_approving_makes_them() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let bought = app.post_empty(format!("/v1/listings/{}/purchase", deal.listing), &deal.buyer.key).await.expect(201);
    let order = bought.body["order"]["id"].as_str().unwrap().to_owned();
    let paid = json!({ "amount": 100000, "reference": "ch_refund" });
    let payment = app.post(format!("/v1/orders/{order}/payments"), &deal.buyer.key, paid).await.expect(201);
    let payment = payment.body["payment"]["id"].as_str().unwrap().to_owned();
    app.post_empty(format!("/v1/orders/{order}/payments/{payment}/confirm"), &deal.seller.key).await.expect(200);
    let above_100 = json!({ "rules": [{ "move": "refund", "above": 10000 }] });
    for agent in [&deal.buyer, &deal.seller] {
        app.put("/v1/agents/me/approval-rules", &agent.key, above_100.clone()).await.expect(200);
    }
    let refund = |amount: i64| json!({ "kind": "refund", "amount": amount, "terms": { "reason": "damaged" } });
    let open = format!("/v1/orders/{order}/negotiations");

    // The buyer's ask above 100.00 is held: no thread is opened until it is approved.
    let held = app.post(&open, &deal.buyer.key, refund(40000)).await.expect(202);
    let approval = held.body["approval"].clone();
    assert_eq!((approval["move"]["move"].as_str(), approval["move"]["amount"].as_i64()), (Some("refund"), Some(40000)));
    assert_eq!(approval["move"]["route"], format!("POST /v1/orders/{order}/negotiations"));
    assert_eq!(app.count("SELECT count(*) FROM threads WHERE kind = 'refund'").await, 0);
    let id = approval["id"].as_str().unwrap();
    let approved = app.post_empty(format!("/v1/approvals/{id}/approve"), &deal.buyer.key).await.expect(200);
    assert_eq!(approved.body["approval"]["status"], "APPROVED");
    assert_eq!(approved.body["bid"]["kind"], "refund");
    assert_eq!(approved.body["bid"]["amount"], 40000);
    assert_eq!(approved.body["bid"]["terms"]["reason"], "damaged");
    let bid = approved.body["bid"]["id"].as_str().unwrap().to_owned();
    assert_eq!(app.count("SELECT count(*) FROM threads WHERE kind = 'refund' AND status = 'ACTIVE'").await, 1);

    // The seller's counter of 50.00 is below the bound: made at once. Its acceptance of the
    // buyer's 200.00 is held, and approving it records the refund on the order.
    let offer =
        app.post(format!("/v1/bids/{bid}/counter"), &deal.seller.key, json!({ "amount": 5000 })).await.expect(201);
    let offer = offer.body["bid"]["id"].as_str().unwrap().to_owned();
    let ask = app.post(format!("/v1/bids/{offer}/counter"), &deal.buyer.key, json!({ "amount": 20000 })).await;
    let ask_held = ask.expect(202).body["approval"].clone();
    assert_eq!(ask_held["move"]["move"], "refund");
    let ask_id = ask_held["id"].as_str().unwrap();
    let ask = app.post_empty(format!("/v1/approvals/{ask_id}/approve"), &deal.buyer.key).await.expect(200);
    let ask = ask.body["bid"]["id"].as_str().unwrap().to_owned();
    let accept = app.post_empty(format!("/v1/bids/{ask}/accept"), &deal.seller.key).await.expect(202);
    assert_eq!(accept.body["approval"]["move"]["move"], "refund");
    assert_eq!(accept.body["approval"]["move"]["amount"], 20000);
    let refunded = || async {
        app.get(format!("/v1/orders/{order}"), &deal.buyer.key).await.expect(200).body["refunded_amount"].clone()
    };
    assert_eq!(refunded().await, 0, "nothing refunded while the acceptance waits");
    let accept_id = accept.body["approval"]["id"].as_str().unwrap();
    let made = app.post_empty(format!("/v1/approvals/{accept_id}/approve"), &deal.seller.key).await.expect(200);
    assert_eq!(made.body["approval"]["status"], "APPROVED");
    assert_eq!(made.body["order"]["refunded_amount"], 20000);
    assert_eq!(refunded().await, 20000);

    // A refund asked at or under the bound is opened at once.
    app.post(&open, &deal.buyer.key, refund(10000)).await.expect(201);
}
