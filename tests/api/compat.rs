//! The IAB-style compatibility routes, as the IAB buyer agent uses them: contract tests that
//! send exactly the bodies it sends and read the answers as it reads them (the field lists and
//! types of its models), through whole negotiations against the tier engine, the
//! orchestrator's negotiate-quote-book path, and the ways a negotiation can end.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{Agent, Body, Resp, TestApp, eventually};

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

/// A POST as IAB clients send it, with the key in `X-API-Key`.
async fn iab(app: &TestApp, path: impl AsRef<str>, key: &str, body: Value) -> Resp {
    app.send(Method::POST, path, None, Body::Json(body), &[("x-api-key", key)]).await
}

/// Asserts an error in the IAB envelope: `{"detail": {"error", "message", "code"}}`.
#[track_caller]
fn expect_iab(resp: Resp, status: u16, error: &str, code: &str) -> Resp {
    assert_eq!(resp.status, status, "unexpected status; body: {}", resp.body);
    assert_eq!(resp.header("content-type"), Some("application/json"), "{}", resp.body);
    let detail = &resp.body["detail"];
    assert_eq!((detail["error"].as_str(), detail["code"].as_str()), (Some(error), Some(code)), "{}", resp.body);
    assert!(detail["message"].as_str().is_some_and(|message| !message.is_empty()), "{}", resp.body);
    resp
}

fn field_errors(body: &Value) -> Vec<String> {
    body["detail"]["errors"]
        .as_array()
        .map(|errors| errors.iter().map(|e| e["field"].as_str().unwrap().to_owned()).collect())
        .unwrap_or_default()
}

/// `Money` as the buyer sends it: `round(price × 10^6)` and always USD.
fn money(units: f64) -> Value {
    json!({ "amount_micros": (units * 1_000_000.0).round() as i64, "currency": "USD" })
}

/// A fresh uuid4 hex, as the buyer makes one per call.
fn fresh_key() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

// ----- the buyer's models, as it validates what it reads -----

fn is_money(value: &Value) -> bool {
    value["amount_micros"].is_i64()
        && value["currency"].as_str().is_some_and(|c| c.len() == 3 && c.bytes().all(|b| b.is_ascii_uppercase()))
        && value.as_object().is_some_and(|fields| fields.len() == 2)
}

fn units(value: &Value) -> f64 {
    value["amount_micros"].as_i64().unwrap() as f64 / 1_000_000.0
}

/// The messages route's answer as the buyer reads it: the nested round, both prices `Money`.
#[track_caller]
fn read_round(resp: &Resp) -> &Value {
    let body = &resp.body;
    assert!((200..300).contains(&resp.status), "{}: {body}", resp.status);
    assert!(body["negotiation_id"].is_string(), "{body}");
    assert!(matches!(body["status"].as_str(), Some("active" | "accepted" | "rejected" | "expired")), "{body}");
    let round = &body["round"];
    assert!(round.is_object(), "the round must be an object: {body}");
    assert!(round["round_number"].as_i64().is_some_and(|n| n >= 1), "{body}");
    assert!(is_money(&round["buyer_price"]) && is_money(&round["seller_price"]), "{body}");
    assert!(matches!(round["action"].as_str(), Some("accept" | "counter" | "reject" | "final_offer")), "{body}");
    assert!(round["concession_pct"].is_number() && round["cumulative_concession_pct"].is_number(), "{body}");
    assert!(round["rationale"].is_string(), "{body}");
    assert!(round["timestamp"].as_str().is_some_and(|t| chrono::DateTime::parse_from_rfc3339(t).is_ok()), "{body}");
    let remaining = &body["rounds_remaining"];
    assert!(remaining.is_null() || remaining.as_i64().is_some_and(|n| n >= 0), "{body}");
    round
}

/// `POST /proposals`' answer as the buyer reads it.
#[track_caller]
fn read_proposal(resp: &Resp) -> (String, &str, Option<f64>) {
    let body = &resp.body;
    assert!((200..300).contains(&resp.status), "{}: {body}", resp.status);
    let id = body["proposal_id"].as_str().expect("proposal_id").to_owned();
    let recommendation = body["recommendation"].as_str().expect("recommendation");
    assert!(matches!(recommendation, "accept" | "counter" | "reject"), "{body}");
    assert!(body["status"].is_string());
    let terms = &body["counter_terms"];
    let proposed = if terms.is_null() {
        None
    } else {
        assert!(terms["negotiation_id"].is_string() && terms["round_number"].is_i64(), "{body}");
        assert!(matches!(terms["action"].as_str(), Some("counter" | "final_offer")), "{body}");
        Some(terms["proposed_price"].as_f64().expect("proposed_price is a number"))
    };
    (id, recommendation, proposed)
}

/// The pricing and terms of a quote or a deal, as the buyer's models read them.
#[track_caller]
fn read_priced(value: &Value) {
    assert!(value["product"]["product_id"].is_string() && value["product"]["name"].is_string(), "{value}");
    assert!(matches!(value["deal_type"].as_str(), Some("PG" | "PD" | "PA")), "{value}");
    let pricing = &value["pricing"];
    assert!(is_money(&pricing["base_cpm"]) && is_money(&pricing["final_cpm"]), "{value}");
    assert!(pricing["tier_discount_pct"].is_number(), "{value}");
    assert!(matches!(pricing["pricing_type"].as_str(), Some("fixed" | "floor" | "on_request")), "{value}");
    assert_eq!(pricing["pricing_model"], "cpm");
    assert!(pricing["rationale"].is_string());
    assert!(value["terms"]["guaranteed"].is_boolean(), "{value}");
}

#[track_caller]
fn read_quote(resp: &Resp) -> &Value {
    assert!((200..300).contains(&resp.status), "{}: {}", resp.status, resp.body);
    let quote = &resp.body["quote"];
    assert!(quote["quote_id"].is_string(), "{quote}");
    read_priced(quote);
    assert!(matches!(quote["status"].as_str(), Some("available" | "booked" | "expired" | "declined")), "{quote}");
    assert!(matches!(quote["buyer_tier"].as_str(), Some("public" | "seat" | "agency" | "advertiser")), "{quote}");
    quote
}

#[track_caller]
fn read_deal(resp: &Resp) -> &Value {
    assert!((200..300).contains(&resp.status), "{}: {}", resp.status, resp.body);
    assert!(resp.body["audience_plan_snapshot"].is_null() && resp.body["audience_match_summary"].is_null());
    let deal = &resp.body["deal"];
    assert!(deal["deal_id"].is_string(), "{deal}");
    read_priced(deal);
    assert!(is_money(&deal["openrtb_params"]["bidfloor"]), "{deal}");
    deal
}

// ----- the buyer's flows -----

/// The buyer's proposal: `submit_proposal`'s body.
async fn propose(app: &TestApp, buyer: &Agent, listing: &str, price: f64) -> Resp {
    let body = json!({
        "product_id": listing, "deal_type": "PD", "price": price, "impressions": 1_000_000,
        "start_date": "2030-01-01", "end_date": "2030-01-31",
    });
    iab(app, "/proposals", &buyer.key, body).await
}

/// One of the buyer's messages, with the body its client sends for the call.
async fn message(app: &TestApp, buyer: &Agent, body: Value) -> Resp {
    let mut body = body;
    body["idempotency_key"] = fresh_key().into();
    body["rationale"] = "".into();
    iab(app, "/api/v1/negotiations/messages", &buyer.key, body).await
}

/// A SimpleThreshold profile, in currency units.
#[derive(Debug, Clone, Copy)]
struct Threshold {
    target: f64,
    max: f64,
    step: f64,
    max_rounds: i64,
}

const CONSERVATIVE: Threshold = Threshold { target: 15.0, max: 20.0, step: 1.0, max_rounds: 3 };
const BALANCED: Threshold = Threshold { target: 20.0, max: 30.0, step: 2.0, max_rounds: 5 };
const AGGRESSIVE: Threshold = Threshold { target: 15.0, max: 35.0, step: 5.0, max_rounds: 10 };

#[derive(Debug, Clone, PartialEq)]
enum Ending {
    Accepted(f64),
    WalkedAway,
}

/// `auto_negotiate`: start at the target, then accept within the maximum, walk away after
/// `max_rounds` or when the seller does not move, else counter a step up. Returns how it ended
/// and the round numbers it read.
async fn auto_negotiate(app: &TestApp, buyer: &Agent, proposal: &str, profile: Threshold) -> (Ending, Vec<i64>) {
    let start = json!({ "action": "counter", "proposal_id": proposal, "buyer_price": money(profile.target) });
    let mut answer = message(app, buyer, start).await;
    let mut negotiation = None;
    let mut offer = profile.target;
    let mut previous_seller: Option<f64> = None;
    let mut rounds = Vec::new();
    loop {
        let round = read_round(&answer).clone();
        let id = negotiation.get_or_insert_with(|| answer.body["negotiation_id"].as_str().unwrap().to_owned()).clone();
        rounds.push(round["round_number"].as_i64().unwrap());
        let seller_price = units(&round["seller_price"]);
        match round["action"].as_str().unwrap() {
            "accept" => return (Ending::Accepted(seller_price), rounds),
            "reject" => return (Ending::WalkedAway, rounds),
            _ => {}
        }
        if seller_price <= profile.max {
            let accept = json!({ "action": "accept", "proposal_id": proposal, "negotiation_id": id, "buyer_price": money(seller_price) });
            let accepted = message(app, buyer, accept).await;
            assert!(accepted.status == 200 && accepted.body.is_object(), "{}", accepted.body);
            return (Ending::Accepted(seller_price), rounds);
        }
        let stalled = previous_seller.is_some_and(|previous| seller_price >= previous);
        if *rounds.last().unwrap() >= profile.max_rounds || stalled {
            let decline = json!({ "action": "reject", "proposal_id": proposal, "negotiation_id": id });
            let declined = message(app, buyer, decline).await;
            assert_eq!(declined.status, 200, "{}", declined.body);
            return (Ending::WalkedAway, rounds);
        }
        previous_seller = Some(seller_price);
        offer = (offer + profile.step).min(profile.max);
        let counter =
            json!({ "action": "counter", "proposal_id": proposal, "negotiation_id": id, "buyer_price": money(offer) });
        answer = message(app, buyer, counter).await;
    }
}

/// Nothing is left ACTIVE, and an agreement is one order at its price.
async fn assert_settled(app: &TestApp, proposal: &str, ending: &Ending) {
    let thread = app.count(format!("SELECT count(*) FROM threads WHERE id = '{proposal}' AND status = 'ACTIVE'")).await;
    assert_eq!(thread, 0, "the negotiation was left ACTIVE");
    let pending =
        app.count(format!("SELECT count(*) FROM bids WHERE thread_id = '{proposal}' AND status = 'PENDING'")).await;
    assert_eq!(pending, 0);
    let orders = app.count(format!("SELECT count(*) FROM orders WHERE thread_id = '{proposal}'")).await;
    match ending {
        Ending::Accepted(price) => {
            let amount = (price * 100.0).round() as i64;
            let at_price = app
                .count(format!("SELECT count(*) FROM orders WHERE thread_id = '{proposal}' AND amount = {amount}"))
                .await;
            assert_eq!((orders, at_price), (1, 1));
        }
        Ending::WalkedAway => assert_eq!(orders, 0),
    }
}

#[tokio::test]
async fn auto_negotiate_ends_accepted_or_walked_away_for_every_profile() {
    let app = TestApp::spawn().await;
    // Asking 38.00, the tier engine gives an AGENCY buyer 10 % off (34.20), concedes at most 5 %
    // of that a round, and stops at 85 % of it (29.07) with a final offer.
    let cases = [
        // Its counters never reach 20.00: the buyer walks away after its three rounds.
        (CONSERVATIVE, Ending::WalkedAway, vec![2, 3]),
        // 32.49 to the proposal, 30.78, then 29.07 (final), which is within 30.00.
        (BALANCED, Ending::Accepted(29.07), vec![2, 3]),
        // 30.78 is within 35.00.
        (AGGRESSIVE, Ending::Accepted(30.78), vec![2]),
    ];
    for (profile, expected, rounds) in cases {
        let (_seller, buyer, listing) = market_asking(&app, 3800, Some(tier_policy())).await;
        let opened = propose(&app, &buyer, &listing, profile.target.min(profile.max)).await.expect(201);
        let (proposal, recommendation, proposed) = read_proposal(&opened);
        assert_eq!((recommendation, proposed), ("counter", Some(32.49)), "{profile:?}");
        assert_eq!(opened.body["round_number"], 1);
        let (ending, read) = auto_negotiate(&app, &buyer, &proposal, profile).await;
        assert_eq!(ending, expected, "{profile:?}");
        // Rounds are exchanges: the proposal was 1, and each message the next.
        assert_eq!(read, rounds, "{profile:?}");
        assert_settled(&app, &proposal, &ending).await;
    }
}

#[tokio::test]
async fn the_orchestrator_negotiates_requotes_and_books_one_deal() {
    let app = TestApp::spawn().await;
    let (seller, buyer, listing) = market_asking(&app, 3800, Some(tier_policy())).await;
    let (max, target) = (32.0, 28.0);

    // Discovery: the product, priced at the ask.
    let products =
        app.send(Method::GET, "/products?limit=500&offset=0", None, Body::None, &[("x-api-key", &buyer.key)]).await;
    let products = products.expect(200);
    assert_eq!((products.body["total_count"].as_i64(), products.body["limit"].as_i64()), (Some(1), Some(500)));
    let product = &products.body["products"][0];
    assert_eq!(product["product_id"], listing.as_str());
    assert_eq!(product["seller_organization_id"], seller.id.as_str());
    assert_eq!(product["base_price"], money(38.0));
    assert!(matches!(product["delivery_type"].as_str(), Some("Exclusive" | "Guaranteed" | "PMP")));
    assert!(product["ad_formats"].is_array() && product["name"].is_string());

    // The first quote is the ask: above the buyer's maximum but within 1.25 × of it, so the
    // orchestrator negotiates.
    let quote = json!({ "idempotency_key": fresh_key(), "product_id": listing, "deal_type": "PD", "impressions": 500_000,
                        "flight_start": "2030-02-01", "flight_end": "2030-02-28", "media_type": "digital" });
    let asked = iab(&app, "/api/v1/quotes", &buyer.key, quote).await.expect(201);
    let asked = read_quote(&asked).clone();
    let ask = units(&asked["pricing"]["final_cpm"]);
    assert_eq!(ask, 38.0);
    assert!(ask > max && ask <= 1.25 * max);

    // Proposal at min(target, max), then counters at that price until the seller comes within
    // the maximum; then accept.
    let opened = propose(&app, &buyer, &listing, target).await.expect(201);
    let (proposal, _, mut proposed) = read_proposal(&opened);
    let negotiation = opened.body["counter_terms"]["negotiation_id"].as_str().unwrap().to_owned();
    let mut counters = 0;
    let agreed = loop {
        let price = proposed.expect("the seller countered");
        if price <= max {
            let accept = json!({ "action": "accept", "proposal_id": proposal, "negotiation_id": negotiation, "buyer_price": money(price) });
            message(&app, &buyer, accept).await.expect(200);
            break price;
        }
        counters += 1;
        assert!(counters < 3, "at most three seller answers");
        let counter = json!({ "action": "counter", "proposal_id": proposal, "negotiation_id": negotiation, "buyer_price": money(target) });
        let answer = message(&app, &buyer, counter).await;
        let round = read_round(&answer);
        assert_eq!(round["action"], "counter");
        proposed = Some(units(&round["seller_price"]));
    };
    assert_eq!(agreed, 30.78);

    // Re-quote at the agreed price: the agreed order, at its price.
    let requote = json!({ "idempotency_key": fresh_key(), "product_id": listing, "deal_type": "PD",
                          "target_cpm": money(agreed), "media_type": "digital" });
    let requoted = iab(&app, "/api/v1/quotes", &buyer.key, requote).await.expect(201);
    let quote = read_quote(&requoted).clone();
    assert_eq!(units(&quote["pricing"]["final_cpm"]), agreed);
    assert_eq!(quote["status"], "available");
    let order_id =
        app.get("/v1/orders", &buyer.key).await.expect(200).body["data"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(quote["order_id"], order_id.as_str());

    // Booking gives that order as the deal; booking again under another key gives it again.
    let quote_id = quote["quote_id"].as_str().unwrap();
    let booked =
        iab(&app, "/api/v1/deals", &buyer.key, json!({ "idempotency_key": fresh_key(), "quote_id": quote_id }))
            .await
            .expect(201);
    let deal = read_deal(&booked).clone();
    assert_eq!(deal["deal_id"], order_id.as_str());
    assert_eq!(deal["status"], "booked");
    assert_eq!(units(&deal["pricing"]["final_cpm"]), agreed);
    let again = iab(&app, "/api/v1/deals", &buyer.key, json!({ "idempotency_key": fresh_key(), "quote_id": quote_id }))
        .await
        .expect(200);
    assert_eq!(read_deal(&again)["deal_id"], order_id.as_str());
    assert_eq!(app.count(format!("SELECT count(*) FROM orders WHERE listing_id = '{listing}'")).await, 1);
    assert_eq!(
        app.count(format!("SELECT count(*) FROM threads WHERE listing_id = '{listing}' AND status = 'ACTIVE'")).await,
        0
    );
    // The product is still for sale: nine of ten left.
    let listing_now = app.get(format!("/v1/listings/{listing}"), &buyer.key).await.expect(200);
    assert_eq!(listing_now.body["quantity_available"], 9);
}

#[tokio::test]
async fn a_quote_of_the_ask_books_as_a_purchase_once() {
    let app = TestApp::spawn().await;
    let (seller, buyer, listing) = market_asking(&app, 3800, None).await;
    let other_listing = app.listing(&seller, json!({ "ask_amount": 1500, "quantity": 1 })).await;
    let quote = |listing: &str| json!({ "idempotency_key": fresh_key(), "product_id": listing, "deal_type": "PG", "media_type": "ctv" });

    // A target that is no order's price quotes the ask.
    let mut body = quote(&listing);
    body["target_cpm"] = money(30.0);
    let quoted = iab(&app, "/api/v1/quotes", &buyer.key, body).await.expect(201);
    let quoted = read_quote(&quoted).clone();
    assert_eq!((units(&quoted["pricing"]["final_cpm"]), units(&quoted["pricing"]["base_cpm"])), (38.0, 38.0));
    assert_eq!((quoted["order_id"].clone(), quoted["terms"]["guaranteed"].clone()), (Value::Null, json!(true)));
    let quote_id = quoted["quote_id"].as_str().unwrap().to_owned();

    // Two bookings at once, under two keys: one purchase, the same deal for both.
    let book =
        || iab(&app, "/api/v1/deals", &buyer.key, json!({ "idempotency_key": fresh_key(), "quote_id": quote_id }));
    let (first, second) = tokio::join!(book(), book());
    let mut statuses = [first.status, second.status];
    statuses.sort();
    assert_eq!(statuses, [200, 201]);
    assert_eq!(read_deal(&first)["deal_id"], read_deal(&second)["deal_id"]);
    assert_eq!(
        app.count(format!("SELECT count(*) FROM orders WHERE listing_id = '{listing}' AND amount = 3800")).await,
        1
    );
    // A replay of the same request is the stored answer.
    let body = json!({ "idempotency_key": "book-1", "quote_id": quote_id });
    let once = iab(&app, "/api/v1/deals", &buyer.key, body.clone()).await.expect(200);
    let replayed = iab(&app, "/api/v1/deals", &buyer.key, body).await.expect(200);
    assert_eq!(replayed.header("idempotent-replayed"), Some("true"));
    assert_eq!(replayed.body, once.body);
    expect_iab(
        iab(&app, "/api/v1/deals", &buyer.key, json!({ "idempotency_key": "book-1", "quote_id": fresh_key() })).await,
        409,
        "idempotency_conflict",
        "idempotency_key_reused",
    );

    // The last unit sells; a quote of it cannot be booked once another buyer took it.
    let quoted = iab(&app, "/api/v1/quotes", &buyer.key, quote(&other_listing)).await.expect(201);
    let quote_id = read_quote(&quoted)["quote_id"].as_str().unwrap().to_owned();
    let rival = app.buyer("rival").await;
    app.post_empty(format!("/v1/listings/{other_listing}/purchase"), &rival.key).await.expect(201);
    let before = app.snapshot().await;
    let refused = iab(&app, "/api/v1/deals", &buyer.key, json!({ "quote_id": quote_id })).await;
    expect_iab(refused, 409, "contention", "listing_unavailable");
    expect_iab(
        iab(&app, "/api/v1/quotes", &buyer.key, quote(&other_listing)).await,
        409,
        "contention",
        "listing_unavailable",
    );
    // A changed ask outdates a quote of it.
    let quoted = iab(&app, "/api/v1/quotes", &buyer.key, quote(&listing)).await.expect(201);
    let quote_id = read_quote(&quoted)["quote_id"].as_str().unwrap().to_owned();
    app.patch(format!("/v1/listings/{listing}"), &seller.key, json!({ "ask_amount": 3900 })).await.expect(200);
    let before_changed = app.snapshot().await;
    expect_iab(
        iab(&app, "/api/v1/deals", &buyer.key, json!({ "quote_id": quote_id })).await,
        410,
        "quote_expired",
        "quote_expired",
    );
    assert_eq!(app.snapshot().await, before_changed);
    // As does time.
    sqlx::query("UPDATE quotes SET expires_at = now() - interval '1 second'").execute(&app.pool).await.unwrap();
    expect_iab(
        iab(&app, "/api/v1/deals", &buyer.key, json!({ "quote_id": quote_id })).await,
        410,
        "quote_expired",
        "quote_expired",
    );
    assert_ne!(app.snapshot().await, before);

    // The sweeper forgets quotes a week after they ran out unbooked, and keeps booked ones.
    sqlx::query("UPDATE quotes SET expires_at = now() - interval '8 days' WHERE booked_at IS NULL AND id <> $1")
        .bind(uuid::Uuid::parse_str(&quote_id).unwrap())
        .execute(&app.pool)
        .await
        .unwrap();
    let swept = haggle_server::sweeper::run_once(&app.market(), 100).await.unwrap();
    assert_eq!(swept.purged_quotes, 1);
    assert_eq!(app.count("SELECT count(*) FROM quotes WHERE booked_at IS NULL").await, 1);
    assert_eq!(app.count("SELECT count(*) FROM quotes WHERE booked_at IS NOT NULL").await, 1);

    // Other buyers' quotes do not exist; sellers do not quote their own products.
    expect_iab(
        iab(&app, "/api/v1/deals", &rival.key, json!({ "quote_id": quote_id })).await,
        404,
        "not_found",
        "not_found",
    );
    expect_iab(iab(&app, "/api/v1/quotes", &seller.key, quote(&listing)).await, 403, "forbidden", "own_listing");
}

#[tokio::test]
async fn bad_quotes_and_bookings_are_refused_in_the_envelope_and_change_nothing() {
    let app = TestApp::spawn().await;
    let (_seller, buyer, listing) = market_asking(&app, 3800, None).await;
    let before = app.snapshot().await;
    let quote = |changes: Value| {
        let mut body = json!({ "idempotency_key": fresh_key(), "product_id": listing, "deal_type": "PD", "media_type": "digital" });
        for (name, value) in changes.as_object().unwrap() {
            body[name] = value.clone();
        }
        body
    };
    for (body, fields) in [
        (quote(json!({ "product_id": "prod-1" })), vec!["product_id"]),
        (quote(json!({ "deal_type": "XX" })), vec!["deal_type"]),
        (quote(json!({ "media_type": "radio" })), vec!["media_type"]),
        (quote(json!({ "impressions": 0 })), vec!["impressions"]),
        (quote(json!({ "impressions": 1.5 })), vec!["impressions"]),
        (quote(json!({ "flight_start": "2030-13-01" })), vec!["flight_start"]),
        (quote(json!({ "flight_start": "2030-02-10", "flight_end": "2030-02-01" })), vec!["flight_end"]),
        (
            quote(json!({ "target_cpm": { "amount_micros": 30_000_001, "currency": "USD" } })),
            vec!["target_cpm.amount_micros"],
        ),
        (
            quote(json!({ "target_cpm": { "amount_micros": 30_000_000, "currency": "usd" } })),
            vec!["target_cpm.currency"],
        ),
        (quote(json!({ "idempotency_key": "has space" })), vec!["idempotency_key"]),
    ] {
        let refused = iab(&app, "/api/v1/quotes", &buyer.key, body.clone()).await;
        let refused = expect_iab(refused, 422, "validation", "validation_failed");
        assert_eq!(field_errors(&refused.body), fields, "{body}");
    }
    // Another currency than the product's.
    let refused = iab(
        &app,
        "/api/v1/quotes",
        &buyer.key,
        quote(json!({ "target_cpm": { "amount_micros": 30_000_000, "currency": "EUR" } })),
    )
    .await;
    assert_eq!(
        field_errors(&expect_iab(refused, 422, "validation", "validation_failed").body),
        ["target_cpm.currency"]
    );
    expect_iab(
        iab(&app, "/api/v1/quotes", &buyer.key, quote(json!({ "impressions": "many" }))).await,
        400,
        "validation",
        "malformed_request",
    );
    expect_iab(
        iab(&app, "/api/v1/quotes", &buyer.key, quote(json!({ "product_id": uuid::Uuid::new_v4() }))).await,
        404,
        "not_found",
        "not_found",
    );
    for body in [json!({ "quote_id": "q-1" }), json!({})] {
        let refused = iab(&app, "/api/v1/deals", &buyer.key, body).await;
        assert!(matches!(refused.status, 400 | 422), "{}", refused.body);
        assert_eq!(refused.body["detail"]["error"], "validation");
    }
    // Without a key, or with a wrong one; an unknown route under the prefix.
    let anonymous = app.send(Method::POST, "/api/v1/quotes", None, Body::Json(quote(json!({}))), &[]).await;
    expect_iab(anonymous, 401, "unauthorized", "unauthenticated");
    let wrong = iab(&app, "/api/v1/quotes", "hk_wrong", quote(json!({}))).await;
    expect_iab(wrong, 401, "unauthorized", "unauthenticated");
    expect_iab(iab(&app, "/api/v1/nothing", &buyer.key, json!({})).await, 404, "not_found", "not_found");
    for query in ["limit=0", "limit=501", "offset=-1", "offset=10001"] {
        let refused = app.send(Method::GET, format!("/products?{query}"), Some(&buyer.key), Body::None, &[]).await;
        expect_iab(refused, 422, "validation", "validation_failed");
    }
    assert_eq!(app.snapshot().await, before);
}

#[tokio::test]
async fn a_counter_after_the_sellers_final_offer_restates_it_and_records_nothing() {
    let app = TestApp::spawn().await;
    // The seller's policy may make one counter: its first is its last word.
    let policy = json!({ "limit": 2500, "counter": { "strategy": "tier" }, "max_auto_rounds": 1 });
    let (_seller, buyer, listing) = market_asking(&app, 3800, Some(policy)).await;
    let opened = propose(&app, &buyer, &listing, 20.0).await.expect(201);
    let (proposal, recommendation, proposed) = read_proposal(&opened);
    assert_eq!((recommendation, proposed), ("counter", Some(32.49)));
    assert_eq!(opened.body["counter_terms"]["action"], "final_offer");
    assert_eq!(opened.body["rounds_remaining"], 0);

    // A counter below it: the final offer again, the refused price as the buyer's, nothing recorded.
    let before = app.snapshot().await;
    let counter = json!({ "action": "counter", "proposal_id": proposal, "buyer_price": money(22.0) });
    let answer = message(&app, &buyer, counter).await.expect(200);
    let round = read_round(&answer);
    assert_eq!((answer.body["status"].as_str(), round["action"].as_str()), (Some("active"), Some("final_offer")));
    assert_eq!((units(&round["buyer_price"]), units(&round["seller_price"])), (22.0, 32.49));
    assert_eq!(answer.body["rounds_remaining"], 0);
    assert!(round["rationale"].as_str().unwrap().contains("final offer"), "{round}");
    assert_eq!(app.snapshot().await, before);

    // SimpleThreshold sees a seller that did not move, and declines: the thread ends.
    let decline = json!({ "action": "reject", "proposal_id": proposal, "negotiation_id": proposal });
    let declined = message(&app, &buyer, decline.clone()).await.expect(200);
    assert_eq!(
        (declined.body["status"].as_str(), declined.body["round"]["action"].as_str()),
        (Some("rejected"), Some("reject"))
    );
    assert_eq!(declined.body["round"]["round_number"], 2);
    assert_settled(&app, &proposal, &Ending::WalkedAway).await;
    // Declining again answers how it ended; a priced message on it is refused.
    message(&app, &buyer, decline).await.expect(200);
    let late = json!({ "action": "counter", "proposal_id": proposal, "buyer_price": money(23.0) });
    expect_iab(message(&app, &buyer, late).await, 409, "negotiation_closed", "invalid_transition");

    // A counter that meets the seller's price accepts it at the seller's price.
    let (_seller, buyer, listing) = market_asking(&app, 3800, Some(tier_policy())).await;
    let opened = propose(&app, &buyer, &listing, 20.0).await.expect(201);
    let (proposal, _, _) = read_proposal(&opened);
    let counter = json!({ "action": "counter", "proposal_id": proposal, "buyer_price": money(33.0) });
    let answer = message(&app, &buyer, counter).await.expect(200);
    assert_eq!(
        (answer.body["status"].as_str(), answer.body["round"]["action"].as_str()),
        (Some("accepted"), Some("accept"))
    );
    assert_eq!(units(&answer.body["round"]["seller_price"]), 32.49);
    assert_settled(&app, &proposal, &Ending::Accepted(32.49)).await;
}

#[tokio::test]
async fn a_seller_that_rejects_ends_the_proposal() {
    let app = TestApp::spawn().await;
    let policy = json!({ "limit": 3000, "reject_beyond": 2000, "counter": { "strategy": "tier" } });
    let (_seller, buyer, listing) = market_asking(&app, 3800, Some(policy)).await;
    let opened = propose(&app, &buyer, &listing, 15.0).await.expect(201);
    let (proposal, recommendation, proposed) = read_proposal(&opened);
    assert_eq!((recommendation, proposed), ("reject", None));
    assert_eq!(opened.body["status"], "rejected");
    assert_eq!(opened.body["counter_terms"], Value::Null);
    assert_settled(&app, &proposal, &Ending::WalkedAway).await;

    // In a message: the seller's reject, both prices given.
    let opened = propose(&app, &buyer, &listing, 21.0).await.expect(201);
    let (proposal, recommendation, _) = read_proposal(&opened);
    assert_eq!(recommendation, "counter");
    let low = json!({ "action": "final_offer", "proposal_id": proposal, "buyer_price": money(21.0) });
    let answer = message(&app, &buyer, low).await.expect(200);
    let round = read_round(&answer);
    assert_eq!((answer.body["status"].as_str(), round["action"].as_str()), (Some("rejected"), Some("reject")));
    assert_eq!(answer.body["rounds_remaining"], 0);
    assert_settled(&app, &proposal, &Ending::WalkedAway).await;
}

/// How long the compatibility route waits for the seller's answer to a bid.
const SELLER_WAIT: Duration = Duration::from_secs(5);

#[tokio::test]
async fn a_seller_without_a_policy_is_refused_at_once_with_no_thread() {
    let app = TestApp::spawn().await;
    let (seller, buyer, listing) = market_asking(&app, 3800, None).await;
    let before = app.snapshot().await;
    let started = Instant::now();
    let refused = propose(&app, &buyer, &listing, 20.0).await;
    expect_iab(refused, 409, "negotiation_unavailable", "negotiation_unavailable");
    // At once: before the wait for a seller's answer could have run out.
    assert!(started.elapsed() < SELLER_WAIT, "refused only after waiting for a seller");
    // One that approves every move itself cannot answer either.
    app.put(
        format!("/v1/listings/{listing}/policy"),
        &seller.key,
        json!({ "limit": 2500, "counter": { "strategy": "tier" }, "require_approval": true }),
    )
    .await
    .expect(200);
    let before_approval = app.snapshot().await;
    expect_iab(propose(&app, &buyer, &listing, 20.0).await, 409, "negotiation_unavailable", "negotiation_unavailable");
    assert_eq!(app.snapshot().await, before_approval);
    assert_ne!(before, before_approval);
    // The rules' own refusals come first: the seller cannot propose on its own product.
    expect_iab(propose(&app, &seller, &listing, 20.0).await, 403, "forbidden", "own_listing");
    assert_eq!(app.count(format!("SELECT count(*) FROM threads WHERE listing_id = '{listing}'")).await, 0);
}

#[tokio::test]
async fn a_seller_that_does_not_answer_in_time_leaves_nothing_active() {
    // A policy, but no worker to act on it.
    let app = TestApp::spawn_with(|config| config.auto_workers = 0).await;
    let (_seller, buyer, listing) = market_asking(&app, 3800, Some(tier_policy())).await;
    let headers = [("idempotency-key", "open-1"), ("x-api-key", buyer.key.as_str())];
    let open = || {
        app.send(
            Method::POST,
            "/proposals",
            None,
            Body::Json(json!({ "product_id": listing, "price": 20.0 })),
            &headers,
        )
    };
    // A retry while the first request waits for the seller (its move committed, its answer
    // marked as still coming) is told it is still running.
    let retry = async {
        eventually("the first request to wait for the seller", || async {
            (app.count("SELECT count(*) FROM idempotency_keys WHERE in_progress").await == 1).then_some(())
        })
        .await;
        open().await
    };
    let started = Instant::now();
    let (opened, early) = tokio::join!(open(), retry);
    expect_iab(early, 409, "contention", "idempotency_key_in_use");
    let opened = opened.expect(201);
    // It waited the whole wait for the seller's answer (and was answered, not cut off).
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(4900), "waited {waited:?}");
    let (proposal, recommendation, proposed) = read_proposal(&opened);
    assert_eq!((recommendation, proposed), ("reject", None));
    assert_eq!(opened.body["status"], "rejected");
    assert!(opened.body["rationale"].as_str().unwrap().contains("did not answer within 5 s"), "{}", opened.body);
    assert_settled(&app, &proposal, &Ending::WalkedAway).await;
    // A retry afterwards gets the same answer at once, and opens nothing.
    let replayed = open().await.expect(201);
    assert_eq!(replayed.header("idempotent-replayed"), Some("true"));
    assert_eq!(replayed.body, opened.body);
    assert_eq!(app.count(format!("SELECT count(*) FROM threads WHERE listing_id = '{listing}'")).await, 1);
}

#[tokio::test]
async fn the_legacy_routes_negotiate_to_a_deal_counting_exchanges() {
    let app = TestApp::spawn().await;
    let (seller, buyer, listing) = market_asking(&app, 3800, Some(tier_policy())).await;

    // The ad-buyer guide's SimpleThreshold buyer: open at 20, step 2, accept at or below 30.
    let opened = propose(&app, &buyer, &listing, 20.0).await.expect(201);
    let (proposal, _, _) = read_proposal(&opened);
    assert_eq!(opened.body["negotiation_id"], proposal.as_str());
    assert_eq!(opened.body["counter_terms"]["round_number"], 1);
    assert_eq!(opened.body["counter_terms"]["proposed_price"], opened.body["seller_price"]);
    assert_eq!(opened.body["buyer_price"], 20.0);
    assert_eq!(opened.body["rounds_remaining"], 4);
    // The same sentence for every counter: a reason would tell of the seller's private limits.
    assert_eq!(opened.body["rationale"], "Counter-offer.");

    let mut answer = opened.body;
    let mut offer = 20.0;
    let mut seller_prices = Vec::new();
    loop {
        let seller_price = answer["seller_price"].as_f64().expect("the seller answered synchronously");
        assert!(matches!(answer["action"].as_str(), Some("counter" | "final_offer")), "{answer}");
        assert_eq!(answer["buyer_price"].as_f64(), Some(offer));
        seller_prices.push(seller_price);
        if seller_price <= 30.0 {
            break;
        }
        offer += 2.0;
        let countered = iab(&app, format!("/proposals/{proposal}/counter"), &buyer.key, json!({ "price": offer }))
            .await
            .expect(200);
        answer = countered.body;
        assert_eq!(answer["status"], "active");
    }
    assert_eq!(seller_prices, [32.49, 30.78, 29.07]);
    assert_eq!((answer["action"].as_str(), answer["round_number"].as_i64()), (Some("final_offer"), Some(3)));
    assert_eq!(answer["rounds_remaining"], 0);

    // The guide's accept sends a price too; the seller's standing price is what is accepted.
    let accepted =
        iab(&app, format!("/proposals/{proposal}/counter"), &buyer.key, json!({ "price": offer, "action": "accept" }))
            .await
            .expect(200);
    assert_eq!(
        (accepted.body["status"].as_str(), accepted.body["action"].as_str()),
        (Some("accepted"), Some("accept"))
    );
    assert_eq!(
        (accepted.body["seller_price"].as_f64(), accepted.body["buyer_price"].as_f64()),
        (Some(29.07), Some(29.07))
    );
    assert_eq!(accepted.body["round_number"], 4);
    assert!(accepted.body["rationale"].as_str().unwrap().starts_with("Deal confirmed at "), "{}", accepted.body);
    let thread = app.get(format!("/v1/threads/{proposal}"), &seller.key).await.expect(200);
    assert_eq!(thread.body["status"], "ACCEPTED");
    assert_settled(&app, &proposal, &Ending::Accepted(29.07)).await;
    // Accepting again answers the same and records nothing.
    let before = app.snapshot().await;
    let again = iab(&app, format!("/proposals/{proposal}/counter"), &buyer.key, json!({ "action": "accept" })).await;
    assert_eq!(again.expect(200).body["status"], "accepted");
    assert_eq!(app.snapshot().await, before);
}

#[tokio::test]
async fn messages_replay_and_bad_messages_are_refused_and_change_nothing() {
    let app = TestApp::spawn().await;
    let (seller, buyer, listing) = market_asking(&app, 3500, Some(tier_policy())).await;
    let opened = propose(&app, &buyer, &listing, 20.0).await.expect(201);
    let (proposal, _, _) = read_proposal(&opened);

    // A counter in Money, with a note; a retry replays the whole answer.
    let counter = json!({
        "idempotency_key": "msg-1", "action": "counter", "proposal_id": proposal, "negotiation_id": proposal,
        "buyer_price": money(22.1), "rationale": "Our budget is tight this quarter.", "sent_at": "2030-01-01T00:00:00Z",
    });
    let countered = iab(&app, "/api/v1/negotiations/messages", &buyer.key, counter.clone()).await.expect(200);
    let round = read_round(&countered);
    assert_eq!((round["round_number"].as_i64(), round["action"].as_str()), (Some(2), Some("counter")));
    assert_eq!(round["buyer_price"], json!({ "amount_micros": 22_100_000, "currency": "USD" }));
    assert!(round["concession_pct"].as_f64().unwrap() > 0.0);
    let thread = app.get(format!("/v1/threads/{proposal}"), &buyer.key).await.expect(200);
    assert_eq!(thread.body["bids"][2]["message"], "Our budget is tight this quarter.");
    let replayed = iab(&app, "/api/v1/negotiations/messages", &buyer.key, counter.clone()).await.expect(200);
    assert_eq!(replayed.header("idempotent-replayed"), Some("true"));
    assert_eq!(replayed.body, countered.body);
    let mut other = counter.clone();
    other["buyer_price"] = money(22.5);
    expect_iab(
        iab(&app, "/api/v1/negotiations/messages", &buyer.key, other).await,
        409,
        "idempotency_conflict",
        "idempotency_key_reused",
    );

    let rival = app.buyer("rival").await;
    let other_listing = app.listing(&seller, json!({ "ask_amount": 3500 })).await;
    let rivals_bid = app.place(&rival, &other_listing, 2000).await;
    let rivals = app.get(format!("/v1/bids/{rivals_bid}"), &rival.key).await.expect(200);
    let rivals = rivals.body["thread_id"].as_str().unwrap().to_owned();
    let counter = |changes: Value| {
        let mut message = json!({ "idempotency_key": "bad-1", "action": "counter", "proposal_id": proposal, "buyer_price": money(23.0) });
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
            counter(json!({ "buyer_price": { "amount_micros": 23_000_001, "currency": "USD" } })),
            vec!["buyer_price.amount_micros"],
        ),
        (
            counter(json!({ "buyer_price": { "amount_micros": 23_005_000, "currency": "USD" } })),
            vec!["buyer_price.amount_micros"],
        ),
        (
            counter(json!({ "buyer_price": { "amount_micros": 23000000.5, "currency": "USD" } })),
            vec!["buyer_price.amount_micros"],
        ),
        (
            counter(json!({ "buyer_price": { "amount_micros": -23_000_000, "currency": "USD" } })),
            vec!["buyer_price.amount_micros"],
        ),
        (
            counter(json!({ "buyer_price": { "amount_micros": 23_000_000, "currency": "EUR" } })),
            vec!["buyer_price.currency"],
        ),
        (
            counter(json!({ "buyer_price": { "amount_micros": 23_000_000, "currency": "usd" } })),
            vec!["buyer_price.currency"],
        ),
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
        let refused = iab(&app, "/api/v1/negotiations/messages", &buyer.key, message.clone()).await;
        let refused = expect_iab(refused, 422, "validation", "validation_failed");
        assert_eq!(field_errors(&refused.body), fields, "{message}");
    }
    // Someone else's proposal does not exist; its seller may not speak for the buyer.
    let unknown =
        iab(&app, "/api/v1/negotiations/messages", &buyer.key, counter(json!({ "proposal_id": rivals }))).await;
    expect_iab(unknown, 404, "not_found", "not_found");
    let as_seller = iab(&app, "/api/v1/negotiations/messages", &seller.key, counter(json!({}))).await;
    expect_iab(as_seller, 403, "forbidden", "forbidden");
    // Wrong types are unreadable.
    for message in [
        counter(json!({ "buyer_price": { "amount_micros": "23000000", "currency": "USD" } })),
        counter(json!({ "buyer_price": 23.0 })),
        counter(json!({ "proposal_id": 7 })),
    ] {
        let refused = iab(&app, "/api/v1/negotiations/messages", &buyer.key, message).await;
        expect_iab(refused, 400, "validation", "malformed_request");
    }
    // The header key, if sent, is the body's.
    let refused = app
        .send(
            Method::POST,
            "/api/v1/negotiations/messages",
            None,
            Body::Json(counter(json!({}))),
            &[("idempotency-key", "other"), ("x-api-key", &buyer.key)],
        )
        .await;
    assert_eq!(field_errors(&expect_iab(refused, 422, "validation", "validation_failed").body), ["idempotency_key"]);
    assert_eq!(app.snapshot().await, before);
    // A price below the buyer's previous one is no concession (a refusal stored under its key).
    let lower =
        iab(&app, "/api/v1/negotiations/messages", &buyer.key, counter(json!({ "buyer_price": money(21.0) }))).await;
    let lower = expect_iab(lower, 422, "validation", "not_a_concession");
    assert_eq!(lower.body["detail"]["min_amount"], 2210);
}

#[tokio::test]
async fn legacy_bodies_are_checked_field_by_field() {
    let app = TestApp::spawn().await;
    let (seller, buyer, listing) = market_asking(&app, 3500, Some(tier_policy())).await;
    let before = app.snapshot().await;
    for (body, field) in [
        (json!({ "product_id": "prop-abc123", "price": 20.0 }), "product_id"),
        (json!({ "product_id": listing }), "price"),
        (json!({ "product_id": listing, "price": 20.001 }), "price"),
        (json!({ "product_id": listing, "price": -20.0 }), "price"),
        (json!({ "product_id": listing, "price": 1e300 }), "price"),
        (json!({ "product_id": listing, "price": 0.30000000000000004 }), "price"),
        // Above the ask: the marketplace's rule, named as the request names the field.
        (json!({ "product_id": listing, "price": 35.01 }), "price"),
    ] {
        let refused =
            expect_iab(iab(&app, "/proposals", &buyer.key, body).await, 422, "validation", "validation_failed");
        assert_eq!(field_errors(&refused.body), [field]);
    }
    let unreadable = iab(&app, "/proposals", &buyer.key, json!({ "product_id": listing, "price": "20.0" })).await;
    expect_iab(unreadable, 400, "validation", "malformed_request");
    assert_eq!(app.snapshot().await, before);

    let opened = propose(&app, &buyer, &listing, 20.0).await.expect(201);
    let (proposal, _, _) = read_proposal(&opened);
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
        let refused =
            expect_iab(iab(&app, &counter, &buyer.key, body.clone()).await, 422, "validation", "validation_failed");
        assert_eq!(field_errors(&refused.body), fields, "{body}");
    }
    expect_iab(
        iab(&app, "/proposals/prop-abc123/counter", &buyer.key, json!({ "price": 22.0 })).await,
        400,
        "validation",
        "malformed_request",
    );
    expect_iab(
        iab(&app, format!("/proposals/{listing}/counter"), &buyer.key, json!({ "price": 22.0 })).await,
        404,
        "not_found",
        "not_found",
    );
    expect_iab(iab(&app, &counter, &seller.key, json!({ "price": 22.0 })).await, 403, "forbidden", "forbidden");
    assert_eq!(app.snapshot().await, before);
    // The same price under both names is one price; declining ends the proposal.
    let countered = iab(&app, &counter, &buyer.key, json!({ "price": 22.5, "buyer_price": 22.50 })).await.expect(200);
    assert_eq!(countered.body["buyer_price"], 22.5);
    let declined = iab(&app, &counter, &buyer.key, json!({ "action": "decline" })).await.expect(200);
    assert_eq!(
        (declined.body["status"].as_str(), declined.body["action"].as_str()),
        (Some("rejected"), Some("reject"))
    );
    assert_settled(&app, &proposal, &Ending::WalkedAway).await;
    expect_iab(
        iab(&app, &counter, &buyer.key, json!({ "price": 24.0 })).await,
        409,
        "negotiation_closed",
        "invalid_transition",
    );
}
