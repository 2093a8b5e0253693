//! The operator's API: who may use it, suspension and what it does to a market, and the
//! statistics.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{ADMIN_TOKEN, Agent, Body, Deal, NOTIFIED_WITHIN, TestApp, remember_keys_for_an_hour};

/// Every operator route, with its path's ids filled in by unknown ids.
fn admin_routes() -> Vec<(Method, String)> {
    haggle_server::http::endpoints()
        .iter()
        .filter(|endpoint| endpoint.path.starts_with("/v1/admin/"))
        .map(|endpoint| {
            let path = endpoint
                .path
                .replace("{id}", &uuid::Uuid::now_v7().to_string())
                .replace("{key_id}", &uuid::Uuid::now_v7().to_string());
            (endpoint.method.clone(), path)
        })
        .collect()
}

fn body_for(method: &Method) -> Body {
    if method == Method::POST || method == Method::PATCH { Body::Json(json!({})) } else { Body::None }
}

#[tokio::test]
async fn agents_cannot_use_the_operator_routes_and_nothing_changes() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    app.place(&deal.buyer, &deal.listing, 90000).await;
    let routes = admin_routes();
    assert!(routes.len() >= 14, "every operator route is covered: {routes:?}");
    let before = app.snapshot().await;
    for (method, path) in &routes {
        // A real agent API key is refused: the routes are the operator's.
        for agent in [&deal.seller, &deal.buyer] {
            let resp = app.send(method.clone(), path, Some(&agent.key), body_for(method), &[]).await;
            assert_eq!((resp.status, resp.code()), (403, "forbidden"), "{method} {path} with an agent key");
        }
        let resp = app.send(method.clone(), path, None, body_for(method), &[]).await;
        assert_eq!((resp.status, resp.code()), (401, "unauthenticated"), "{method} {path} without a token");
        let resp = app.send(method.clone(), path, Some("not-the-operator-token"), body_for(method), &[]).await;
        assert_eq!((resp.status, resp.code()), (401, "unauthenticated"), "{method} {path} with a wrong token");
    }
    assert_eq!(app.snapshot().await, before, "a refused request changed something");

    // With the operator token, the same routes answer (unknown ids: 404 where there is an id).
    let resp = app.get(format!("/v1/admin/agents/{}", deal.buyer.id), ADMIN_TOKEN).await.expect(200);
    assert_eq!(resp.body["open_threads"], 1);
}

#[tokio::test]
async fn the_operator_api_is_off_without_a_token() {
    let app = TestApp::spawn_with(|config| config.settings.admin_token = None).await;
    for (method, path) in admin_routes() {
        let resp = app.send(method.clone(), &path, Some(ADMIN_TOKEN), body_for(&method), &[]).await;
        assert_eq!((resp.status, resp.code()), (403, "forbidden"), "{method} {path}");
    }
}

async fn events_of(app: &TestApp, agent: &Agent) -> Vec<Value> {
    let page = app.get("/v1/events?limit=200", &agent.key).await.expect(200).body;
    page["data"].as_array().unwrap().clone()
}

fn closed_event<'a>(events: &'a [Value], thread: &str) -> &'a Value {
    events
        .iter()
        .find(|event| event["type"] == "thread.closed" && event["thread_id"] == thread)
        .unwrap_or_else(|| panic!("no thread.closed event for {thread} in {events:?}"))
}

#[tokio::test]
async fn suspension_refuses_keys_ends_negotiations_with_events_and_reinstatement_restores_access_only() {
    let app = TestApp::spawn().await;
    let seller = app.register("suspect seller").await;
    let listing = app.listing(&seller, json!({ "quantity": 5 })).await;
    let other_seller = app.register("other seller").await;
    let other_listing = app.listing(&other_seller, json!({})).await;
    let waiting_buyer = app.buyer("waits for the seller").await;
    let answered_buyer = app.buyer("the seller countered").await;
    // The suspect also buys: its own bid waits for another seller.
    app.set_tier(&seller, "AGENCY").await;
    let own_bid = app.place(&seller, &other_listing, 80000).await;
    let awaiting = app.place(&waiting_buyer, &listing, 90000).await;
    let opening = app.place(&answered_buyer, &listing, 85000).await;
    let authored = app.counter(&seller, &opening, 97000).await;
    let spare_key = app.post_empty("/v1/agents/me/keys", &seller.key).await.expect(201).body["api_key"]
        .as_str()
        .unwrap()
        .to_owned();
    // Both keys are in this instance's cache.
    app.get("/v1/agents/me", &seller.key).await.expect(200);
    app.get("/v1/agents/me", &spare_key).await.expect(200);

    let path = format!("/v1/admin/agents/{}/suspend", seller.id);
    let resp = app.post(&path, ADMIN_TOKEN, json!({ "reason": "payment fraud" })).await.expect(200);
    assert!(resp.body["suspended_at"].is_string());
    assert_eq!(
        (resp.body["suspended_reason"].as_str(), resp.body["open_threads"].as_i64()),
        (Some("payment fraud"), Some(0))
    );
    // Suspending again changes nothing (the activity may have moved: the closings were published).
    let again = app.post_empty(&path, ADMIN_TOKEN).await.expect(200);
    for field in ["suspended_at", "suspended_reason", "updated_at", "tier"] {
        assert_eq!(again.body[field], resp.body[field], "{field}");
    }

    // Every key is refused with 403 (the key is valid), the MCP-less REST routes alike.
    for key in [&seller.key, &spare_key] {
        app.get("/v1/agents/me", key).await.expect_problem(403, "agent_suspended");
        app.post(format!("/v1/listings/{other_listing}/bids"), key, json!({ "amount": 80000 }))
            .await
            .expect_problem(403, "agent_suspended");
    }

    // Every pending bid ended: the ones it authored withdrawn by the server, the one waiting for
    // its answer rejected by the server; threads CLOSED, reason agent_suspended.
    for bid in [&own_bid, &awaiting, &authored] {
        let (status, reason): (String, Option<String>) =
            sqlx::query_as("SELECT status, reason FROM bids WHERE id = $1::uuid")
                .bind(bid)
                .fetch_one(&app.pool)
                .await
                .unwrap();
        assert_eq!((status.as_str(), reason.as_deref()), ("REJECTED", Some("agent_suspended")), "bid {bid}");
    }
    assert_eq!(app.count("SELECT count(*) FROM threads WHERE status = 'ACTIVE'").await, 0);
    assert_eq!(
        app.count("SELECT count(*) FROM threads WHERE status = 'CLOSED' AND closed_reason = 'agent_suspended'").await,
        3
    );
    // The counterparties were told.
    for (counterparty, bid) in [(&other_seller, &own_bid), (&waiting_buyer, &awaiting), (&answered_buyer, &authored)] {
        let thread: String = sqlx::query_scalar("SELECT thread_id::text FROM bids WHERE id = $1::uuid")
            .bind(bid)
            .fetch_one(&app.pool)
            .await
            .unwrap();
        let events = events_of(&app, counterparty).await;
        let event = closed_event(&events, &thread);
        assert_eq!(event["data"]["bid"]["reason"], "agent_suspended");
        assert_eq!(event["data"]["thread"]["closed_reason"], "agent_suspended");
    }
    let listed = app.get("/v1/admin/agents?status=suspended", ADMIN_TOKEN).await.expect(200);
    let ids: Vec<&str> = listed.body["data"].as_array().unwrap().iter().map(|a| a["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [seller.id.as_str()]);

    // Reinstatement restores access, not the bids.
    let back = app.post_empty(format!("/v1/admin/agents/{}/reinstate", seller.id), ADMIN_TOKEN).await.expect(200);
    assert!(back.body["suspended_at"].is_null() && back.body["suspended_reason"].is_null());
    app.post_empty(format!("/v1/admin/agents/{}/reinstate", seller.id), ADMIN_TOKEN).await.expect(200);
    app.get("/v1/agents/me", &seller.key).await.expect(200);
    app.get("/v1/agents/me", &spare_key).await.expect(200);
    app.post(format!("/v1/bids/{awaiting}/accept"), &seller.key, json!({}))
        .await
        .expect_problem(409, "invalid_transition");
    assert_eq!(app.count("SELECT count(*) FROM threads WHERE status = 'ACTIVE'").await, 0);
    // The buyer may negotiate again from scratch.
    app.place(&waiting_buyer, &listing, 90000).await;
}

#[tokio::test]
async fn a_suspended_agents_policies_stop_acting() {
    let app = TestApp::spawn_with(|config| config.auto_workers = 0).await;
    let deal = Deal::new(&app, json!({})).await;
    let policy = json!({ "limit": 80000, "accept_at": 90000, "counter": { "strategy": "split" } });
    app.put(format!("/v1/listings/{}/policy", deal.listing), &deal.seller.key, policy).await.expect(200);
    app.post_empty(format!("/v1/admin/agents/{}/suspend", deal.seller.id), ADMIN_TOKEN).await.expect(200);

    // A bid for the suspended seller queues no task for its policy.
    let bid = app.place(&deal.buyer, &deal.listing, 95000).await;
    assert_eq!(app.count("SELECT count(*) FROM auto_tasks").await, 0);
    // A task queued before the suspension is dropped by the executor, which makes no move.
    sqlx::query("INSERT INTO auto_tasks (bid_id, thread_id, agent_id) SELECT id, thread_id, $2::uuid FROM bids WHERE id = $1::uuid")
        .bind(&bid)
        .bind(&deal.seller.id)
        .execute(&app.pool)
        .await
        .unwrap();
    let outcome =
        haggle_server::executor::run_once(&app.market(), Default::default(), haggle_server::executor::DEFAULT_CHAIN)
            .await
            .unwrap()
            .map(|round| round.outcome);
    assert_eq!(outcome, Some(haggle_server::executor::Outcome::Dropped));
    let status: String = sqlx::query_scalar("SELECT status FROM bids WHERE id = $1::uuid")
        .bind(&bid)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(status, "PENDING");
    assert_eq!(app.count("SELECT count(*) FROM auto_decisions").await, 0);

    // Reinstated, the policy acts on the bids that come.
    app.post_empty(format!("/v1/admin/agents/{}/reinstate", deal.seller.id), ADMIN_TOKEN).await.expect(200);
    app.post(format!("/v1/bids/{bid}/withdraw"), &deal.buyer.key, json!({})).await.expect(200);
    let next = app.place(&deal.buyer, &deal.listing, 95000).await;
    assert_eq!(app.count("SELECT count(*) FROM auto_tasks WHERE done_at IS NULL").await, 1);
    let outcome =
        haggle_server::executor::run_once(&app.market(), Default::default(), haggle_server::executor::DEFAULT_CHAIN)
            .await
            .unwrap()
            .map(|round| round.outcome);
    assert_eq!(outcome, Some(haggle_server::executor::Outcome::Acted("accept")));
    let status: String = sqlx::query_scalar("SELECT status FROM bids WHERE id = $1::uuid")
        .bind(&next)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(status, "ACCEPTED");
}

#[tokio::test]
async fn another_instance_refuses_a_suspended_agents_cached_key_within_moments() {
    let first = TestApp::spawn_with(remember_keys_for_an_hour).await;
    let second = first.another_instance_with(remember_keys_for_an_hour).await;
    let agent = first.register("cached").await;
    second.get("/v1/agents/me", &agent.key).await.expect(200);
    first.post_empty(format!("/v1/admin/agents/{}/suspend", agent.id), ADMIN_TOKEN).await.expect(200);
    let started = Instant::now();
    while second.get("/v1/agents/me", &agent.key).await.status != 403 {
        assert!(started.elapsed() < NOTIFIED_WITHIN, "the second instance still takes the suspended key");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    second.get("/v1/agents/me", &agent.key).await.expect_problem(403, "agent_suspended");
}

#[tokio::test]
async fn the_operator_revokes_any_key_even_the_last() {
    let app = TestApp::spawn().await;
    let agent = app.register("locked out").await;
    let keys = app.get(format!("/v1/admin/agents/{}/keys", agent.id), ADMIN_TOKEN).await.expect(200);
    let key_id = keys.body["data"][0]["id"].as_str().unwrap().to_owned();
    app.get("/v1/agents/me", &agent.key).await.expect(200);
    app.delete(format!("/v1/admin/keys/{key_id}"), ADMIN_TOKEN).await.expect(204);
    app.get("/v1/agents/me", &agent.key).await.expect_problem(401, "unauthenticated");
    // Idempotent; an unknown key is 404.
    app.delete(format!("/v1/admin/keys/{key_id}"), ADMIN_TOKEN).await.expect(204);
    app.delete(format!("/v1/admin/keys/{}", uuid::Uuid::now_v7()), ADMIN_TOKEN).await.expect_problem(404, "not_found");
    let keys = app.get(format!("/v1/admin/agents/{}/keys", agent.id), ADMIN_TOKEN).await.expect(200);
    assert!(keys.body["data"][0]["revoked_at"].is_string());
    app.get(format!("/v1/admin/agents/{}/keys", uuid::Uuid::now_v7()), ADMIN_TOKEN)
        .await
        .expect_problem(404, "not_found");
}

#[tokio::test]
async fn the_operator_searches_agents_and_reads_threads_orders_and_webhooks_market_wide() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "quantity": 3 })).await;
    let other = app.buyer("Another Buyer").await;
    let bid = app.place(&deal.buyer, &deal.listing, 90000).await;
    let counter = app.counter(&deal.seller, &bid, 96000).await;
    app.post(format!("/v1/bids/{counter}/accept"), &deal.buyer.key, json!({})).await.expect(200);
    app.place(&other, &deal.listing, 70000).await;

    // Search by name (case-insensitive substring) or exact id; filter by tier.
    let found = app.get("/v1/admin/agents?q=another%20b", ADMIN_TOKEN).await.expect(200);
    assert_eq!(found.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(found.body["data"][0]["id"], other.id);
    assert!(found.body["data"][0]["last_active_at"].is_string());
    let found = app.get(format!("/v1/admin/agents?q={}", deal.seller.id), ADMIN_TOKEN).await.expect(200);
    assert_eq!(found.body["data"][0]["id"], deal.seller.id);
    let agency = app.get("/v1/admin/agents?tier=AGENCY&limit=1", ADMIN_TOKEN).await.expect(200);
    assert_eq!(agency.body["data"][0]["id"], other.id);
    let rest = app
        .get(
            format!("/v1/admin/agents?tier=AGENCY&after={}", agency.body["next_cursor"].as_str().unwrap()),
            ADMIN_TOKEN,
        )
        .await
        .expect(200);
    assert_eq!(rest.body["data"][0]["id"], deal.buyer.id);
    assert!(rest.body["next_cursor"].is_null());
    app.get("/v1/admin/agents?status=gone", ADMIN_TOKEN).await.expect_problem(422, "validation_failed");
    let seller = app.get(format!("/v1/admin/agents/{}", deal.seller.id), ADMIN_TOKEN).await.expect(200);
    assert_eq!(seller.body["open_threads"], 1);

    // Threads, market-wide, and one with its whole price ladder.
    let threads = app.get(format!("/v1/admin/threads?listing_id={}", deal.listing), ADMIN_TOKEN).await.expect(200);
    assert_eq!(threads.body["data"].as_array().unwrap().len(), 2);
    let accepted = app.get("/v1/admin/threads?status=ACCEPTED", ADMIN_TOKEN).await.expect(200);
    let thread_id = accepted.body["data"][0]["id"].as_str().unwrap().to_owned();
    let ladder = app.get(format!("/v1/admin/threads/{thread_id}"), ADMIN_TOKEN).await.expect(200);
    let amounts: Vec<(i64, &str)> = ladder.body["bids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["amount"].as_i64().unwrap(), b["author"].as_str().unwrap()))
        .collect();
    assert_eq!(amounts, [(90000, "buyer"), (96000, "seller")]);
    let mine = app.get(format!("/v1/admin/threads?agent_id={}", other.id), ADMIN_TOKEN).await.expect(200);
    assert_eq!(mine.body["data"].as_array().unwrap().len(), 1);
    let future = app.get("/v1/admin/threads?since=2999-01-01T00:00:00Z", ADMIN_TOKEN).await.expect(200);
    assert!(future.body["data"].as_array().unwrap().is_empty());
    app.get("/v1/admin/threads?since=yesterday", ADMIN_TOKEN).await.expect_problem(422, "validation_failed");
    app.get(format!("/v1/admin/threads/{}", uuid::Uuid::now_v7()), ADMIN_TOKEN).await.expect_problem(404, "not_found");

    // Orders, market-wide.
    let orders = app.get(format!("/v1/admin/orders?agent_id={}", deal.buyer.id), ADMIN_TOKEN).await.expect(200);
    assert_eq!(orders.body["data"][0]["amount"], 96000);
    let none = app.get(format!("/v1/admin/orders?agent_id={}", other.id), ADMIN_TOKEN).await.expect(200);
    assert!(none.body["data"].as_array().unwrap().is_empty());
    let since = app.get("/v1/admin/orders?since=2000-01-01T00:00:00Z", ADMIN_TOKEN).await.expect(200);
    assert_eq!(since.body["data"].as_array().unwrap().len(), 1);

    // Webhooks: a failing one, with its deliveries.
    let hook = app
        .post("/v1/webhooks", &deal.seller.key, json!({ "url": "http://127.0.0.1:9/hook", "events": ["*"] }))
        .await
        .expect(201);
    let hook_id = hook.body["webhook"]["id"].as_str().unwrap().to_owned();
    let all = app.get("/v1/admin/webhooks", ADMIN_TOKEN).await.expect(200);
    assert_eq!(all.body["data"][0]["agent_id"], deal.seller.id);
    assert_eq!(all.body["data"][0]["deliveries"], json!({ "pending": 0, "succeeded": 0, "failed": 0 }));
    let failing = app.get("/v1/admin/webhooks?failing=true", ADMIN_TOKEN).await.expect(200);
    assert!(failing.body["data"].as_array().unwrap().is_empty());
    sqlx::query("UPDATE webhooks SET status = 'DISABLED', disabled_reason = 'deliveries failed' WHERE id = $1::uuid")
        .bind(&hook_id)
        .execute(&app.pool)
        .await
        .unwrap();
    let failing = app.get("/v1/admin/webhooks?failing=true", ADMIN_TOKEN).await.expect(200);
    assert_eq!(failing.body["data"][0]["id"], hook_id.as_str());
    app.get(format!("/v1/admin/webhooks/{hook_id}/deliveries"), ADMIN_TOKEN).await.expect(200);
    app.get(format!("/v1/admin/webhooks/{}/deliveries", uuid::Uuid::now_v7()), ADMIN_TOKEN)
        .await
        .expect_problem(404, "not_found");
}

/// Moves a thread (and its order, if any) into the hour `hours_ago` hours before `base` (the
/// start of an hour), a minute past its start. Returns that hour's start.
async fn backdate_thread(app: &TestApp, thread: &str, base: DateTime<Utc>, hours_ago: i64) -> DateTime<Utc> {
    let hour = base - chrono::Duration::hours(hours_ago);
    for (table, column) in [("threads", "id"), ("orders", "thread_id")] {
        sqlx::query(&format!("UPDATE {table} SET created_at = $2 WHERE {column} = $1::uuid"))
            .bind(thread)
            .bind(hour + chrono::Duration::minutes(1))
            .execute(&app.pool)
            .await
            .unwrap();
    }
    hour
}

async fn thread_of(app: &TestApp, bid: &str) -> String {
    sqlx::query_scalar("SELECT thread_id::text FROM bids WHERE id = $1::uuid")
        .bind(bid)
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn statistics_of_a_hand_built_market() {
    let app = TestApp::spawn().await;
    let seller = app.register("seller").await;
    let desks = app.listing(&seller, json!({ "quantity": 5, "currency": "USD" })).await;
    let chair = app.listing(&seller, json!({ "ask_amount": 50000, "currency": "EUR", "negotiable": false })).await;
    let buyers = [
        app.buyer("one").await,
        app.buyer("two").await,
        app.buyer("three").await,
        app.buyer("four").await,
        app.buyer("five").await,
    ];
    let base: DateTime<Utc> =
        sqlx::query_scalar("SELECT date_trunc('hour', now(), 'UTC')").fetch_one(&app.pool).await.unwrap();
    // One: accepted at the opening (1 round), two hours ago.
    let one = app.place(&buyers[0], &desks, 90000).await;
    app.post(format!("/v1/bids/{one}/accept"), &seller.key, json!({})).await.expect(200);
    let two_hours_ago = backdate_thread(&app, &thread_of(&app, &one).await, base, 2).await;
    // Two: accepted after a counter (2 rounds), this hour.
    let two = app.place(&buyers[1], &desks, 80000).await;
    let countered = app.counter(&seller, &two, 95000).await;
    app.post(format!("/v1/bids/{countered}/accept"), &buyers[1].key, json!({})).await.expect(200);
    let this_hour = backdate_thread(&app, &thread_of(&app, &two).await, base, 0).await;
    // Three: rejected, this hour. Four: still live, this hour.
    let three = app.place(&buyers[2], &desks, 70000).await;
    app.post(format!("/v1/bids/{three}/reject"), &seller.key, json!({})).await.expect(200);
    backdate_thread(&app, &thread_of(&app, &three).await, base, 0).await;
    let four = app.place(&buyers[3], &desks, 60000).await;
    backdate_thread(&app, &thread_of(&app, &four).await, base, 0).await;
    // Five: rejected, 30 hours ago: outside a 24-hour window.
    let five = app.place(&buyers[4], &desks, 65000).await;
    app.post(format!("/v1/bids/{five}/reject"), &seller.key, json!({})).await.expect(200);
    backdate_thread(&app, &thread_of(&app, &five).await, base, 30).await;
    // A purchase at the ask, in euros, this hour; it sells the chair out.
    app.post_empty(format!("/v1/listings/{chair}/purchase"), &buyers[0].key).await.expect(201);
    sqlx::query("UPDATE orders SET created_at = $1 WHERE thread_id IS NULL")
        .bind(this_hour + chrono::Duration::minutes(2))
        .execute(&app.pool)
        .await
        .unwrap();
    app.post_empty(format!("/v1/admin/agents/{}/suspend", buyers[4].id), ADMIN_TOKEN).await.expect(200);

    let stats = app.get("/v1/admin/stats", ADMIN_TOKEN).await.expect(200).body;
    assert_eq!(stats["hours"], 24);
    assert_eq!(stats["listings"], json!({ "active": 1, "total": 2 }));
    assert_eq!(stats["agents"], json!({ "total": 6, "suspended": 1 }));
    assert_eq!(stats["active_negotiations"], 1);
    // Of the threads opened in the window (one, two, three, four), three ended, two accepted.
    assert_eq!(stats["agreement_rate"].as_f64(), Some(2.0 / 3.0));
    assert_eq!(stats["median_rounds_to_deal"].as_f64(), Some(1.5));
    let hours = stats["per_hour"].as_array().unwrap();
    assert_eq!(hours.len(), 24, "every hour is present");
    let hour = |at: &DateTime<Utc>| {
        hours
            .iter()
            .find(|h| h["hour"].as_str().unwrap().parse::<DateTime<Utc>>().unwrap() == *at)
            .unwrap_or_else(|| panic!("no hour {at} in {hours:?}"))
            .clone()
    };
    assert_eq!(
        hour(&this_hour),
        json!({
            "hour": hour(&this_hour)["hour"],
            "deals": 2,
            "volume": [{ "currency": "EUR", "amount": 50000 }, { "currency": "USD", "amount": 95000 }],
            "negotiations_opened": 3,
        })
    );
    assert_eq!(
        hour(&two_hours_ago),
        json!({
            "hour": hour(&two_hours_ago)["hour"],
            "deals": 1,
            "volume": [{ "currency": "USD", "amount": 90000 }],
            "negotiations_opened": 1,
        })
    );
    let others: Vec<&Value> =
        hours.iter().filter(|h| h["deals"] != 0 || h["negotiations_opened"] != 0 || h["volume"] != json!([])).collect();
    assert_eq!(others.len(), 2, "every other hour is zero: {others:?}");

    // Over 48 hours, thread five is in: four ended, two accepted.
    let wide = app.get("/v1/admin/stats?hours=48", ADMIN_TOKEN).await.expect(200).body;
    assert_eq!(wide["per_hour"].as_array().unwrap().len(), 48);
    assert_eq!(wide["agreement_rate"].as_f64(), Some(0.5));
    for bad in ["0", "721", "-1"] {
        app.get(format!("/v1/admin/stats?hours={bad}"), ADMIN_TOKEN).await.expect_problem(422, "validation_failed");
    }
}

/// The operator's stream of the market from its first event, answered 200.
async fn market_stream(app: &TestApp) -> reqwest::Response {
    let response = app
        .client
        .get(format!("{}/v1/admin/events/stream?after=0", app.base))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response
}

#[tokio::test]
async fn the_market_stream_carries_every_event() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let mut stream = market_stream(&app).await;
    app.place(&deal.buyer, &deal.listing, 90000).await;
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !seen.contains("event: bid.placed") {
        assert!(Instant::now() < deadline, "no bid.placed on the market stream: {seen}");
        let chunk = tokio::time::timeout(Duration::from_secs(30), stream.chunk()).await.unwrap().unwrap().unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    let data = seen.lines().find_map(|line| line.strip_prefix("data: ")).unwrap();
    let event: Value = serde_json::from_str(data).unwrap();
    assert_eq!(event["type"], "bid.placed");
    assert_eq!(event["listing_id"], deal.listing.as_str());
}

#[tokio::test]
async fn the_operator_examples_work_verbatim() {
    let stdout = crate::walkthrough::run_block("docs/OPERATIONS.md", "operator").await;
    crate::walkthrough::prints(
        "docs/OPERATIONS.md",
        &stdout,
        &[
            r#"[{"name":"lamp-buyer","open_threads":1},{"name":"lamp-seller","open_threads":1}]"#,
            r#"{"name":"lamp-buyer","tier":"AGENCY","suspended_at":null}"#,
            r#"{"suspended_reason":"chargebacks","open_threads":0}"#,
            r#"{"status":403,"code":"agent_suspended"}"#,
            r#"{"suspended_at":null}"#,
            "204",
            r#"{"closed_reason":"agent_suspended","bids":[{"round":1,"amount":4000,"status":"REJECTED"}]}"#,
            r#"[{"amount":5000,"currency":"USD"}]"#,
            "[]",
            r#"{"listings":{"active":1,"total":1},"active_negotiations":0,"hours":3,"deals":1}"#,
            "event: order.created",
            "event: bid.placed",
            "event: thread.closed",
        ],
    );
}

/// The market stream sends events in the order of the transactions that wrote them, each once
/// every transaction begun before it has ended: an event committed while an earlier transaction
/// that writes one is still open waits for it, so that nothing ever arrives behind what was sent.
#[tokio::test]
async fn the_market_stream_waits_for_a_transaction_still_open_before_it() {
    use sqlx::Connection as _;
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let mut held = sqlx::PgConnection::connect(app.database_url()).await.unwrap();
    sqlx::query("BEGIN").execute(&mut held).await.unwrap();
    let earlier = crate::support::bare_event(vec![uuid::Uuid::now_v7()]);
    haggle_server::db::events::write(&mut held, &[earlier]).await.unwrap();

    let mut stream = market_stream(&app).await;
    app.place(&deal.buyer, &deal.listing, 90000).await;
    let mut seen = String::new();
    let types = |seen: &str| -> Vec<String> {
        seen.lines().filter_map(|line| line.strip_prefix("event: ")).map(str::to_owned).collect()
    };
    let quiet_until = Instant::now() + Duration::from_millis(800);
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(quiet_until.into(), stream.chunk()).await {
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert_eq!(types(&seen), Vec::<String>::new(), "the placement came ahead of a transaction still open: {seen}");

    sqlx::query("COMMIT").execute(&mut held).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while types(&seen).len() < 2 {
        assert!(Instant::now() < deadline, "the market stream sent {seen}");
        let chunk = tokio::time::timeout(Duration::from_secs(30), stream.chunk()).await.unwrap().unwrap().unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert_eq!(types(&seen), ["bid.rejected", "bid.placed"], "in the order of their transactions");
}
