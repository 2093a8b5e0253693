//! Events: each agent's numbers, who sees what, long polls, streams, waiting on a bid, and
//! wake-ups that cross server instances.

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use sqlx::Connection;

use crate::support::{Agent, Deal, TestApp};

/// The agent's events after `after`, long-polling up to `wait` seconds.
pub(crate) async fn events_after(app: &TestApp, agent: &Agent, after: i64, wait: u64) -> Vec<Value> {
    let resp = app.get(format!("/v1/events?after={after}&wait={wait}&limit=200"), &agent.key).await.expect(200);
    resp.body["data"].as_array().unwrap().clone()
}

/// Reads the agent's events from the start until there are at least `count` (or 10 s pass).
async fn at_least(app: &TestApp, agent: &Agent, count: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen: Vec<Value> = Vec::new();
    while seen.len() < count && Instant::now() < deadline {
        let after = seen.last().map_or(0, |event| event["id"].as_i64().unwrap());
        seen.extend(events_after(app, agent, after, 2).await);
    }
    seen
}

/// Sends a GET in the background (a waiter), answering how long it took and its JSON body.
pub(crate) fn spawn_get(app: &TestApp, key: &str, path: String) -> tokio::task::JoinHandle<(Duration, Value)> {
    let (base, key, client) = (app.base.clone(), key.to_owned(), app.client.clone());
    tokio::spawn(async move {
        let started = Instant::now();
        let response = client.get(format!("{base}{path}")).bearer_auth(key).send().await.unwrap();
        (started.elapsed(), response.json().await.unwrap())
    })
}

pub(crate) fn types(events: &[Value]) -> Vec<&str> {
    events.iter().map(|event| event["type"].as_str().unwrap()).collect()
}

fn ids(events: &[Value]) -> Vec<i64> {
    events.iter().map(|event| event["id"].as_i64().unwrap()).collect()
}

/// A Server-Sent Events client that parses frames off a real streaming response.
pub(crate) struct SseClient {
    body: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buffer: String,
}

#[derive(Debug, Clone)]
struct Frame {
    id: Option<String>,
    event: Option<String>,
    data: String,
    comment: bool,
}

impl SseClient {
    pub(crate) async fn connect(app: &TestApp, agent: &Agent, query: &str, last_event_id: Option<&str>) -> SseClient {
        let mut request = app.client.get(format!("{}/v1/events/stream{query}", app.base)).bearer_auth(&agent.key);
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        let response = request.send().await.expect("connect the stream");
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        SseClient { body: response.bytes_stream().boxed(), buffer: String::new() }
    }

    /// The next frame (event or heartbeat comment), or `None` if none comes within `timeout`.
    async fn frame(&mut self, timeout: Duration) -> Option<Frame> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let raw: String = self.buffer.drain(..end + 2).collect();
                let mut frame = Frame { id: None, event: None, data: String::new(), comment: false };
                for line in raw.lines() {
                    if let Some(value) = line.strip_prefix("id:") {
                        frame.id = Some(value.trim().to_owned());
                    } else if let Some(value) = line.strip_prefix("event:") {
                        frame.event = Some(value.trim().to_owned());
                    } else if let Some(value) = line.strip_prefix("data:") {
                        frame.data.push_str(value.trim_start());
                    } else if line.starts_with(':') {
                        frame.comment = true;
                    }
                }
                return Some(frame);
            }
            let chunk = tokio::time::timeout_at(deadline, self.body.next()).await.ok()??.expect("stream chunk");
            self.buffer.push_str(std::str::from_utf8(&chunk).expect("utf-8"));
        }
    }

    /// The next event, skipping heartbeats; `None` if none comes within `timeout`.
    pub(crate) async fn event(&mut self, timeout: Duration) -> Option<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let frame = self.frame(left).await?;
            if frame.comment {
                continue;
            }
            let event: Value = serde_json::from_str(&frame.data).expect("event JSON");
            assert_eq!(frame.id.as_deref(), Some(event["id"].to_string().as_str()));
            assert_eq!(frame.event.as_deref(), event["type"].as_str());
            return Some(event);
        }
    }
}

#[tokio::test]
async fn every_change_publishes_its_events_to_the_parties_concerned() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let rival = app.buyer("rival").await;
    let rival_bid = app.place(&rival, &deal.listing, 50000).await;
    let opening = app.place(&deal.buyer, &deal.listing, 60000).await;
    let counter = app.counter(&deal.seller, &opening, 90000).await;
    let second = app.counter(&deal.buyer, &counter, 70000).await;
    let accepted = app.post_empty(format!("/v1/bids/{second}/accept"), &deal.seller.key).await.expect(200);
    let order_id = accepted.body["order"]["id"].as_str().unwrap();

    let buyer = at_least(&app, &deal.buyer, 5).await;
    assert_eq!(types(&buyer), ["bid.placed", "bid.countered", "bid.countered", "bid.accepted", "order.created"]);
    assert_eq!(buyer[0]["bid_id"], opening.as_str());
    assert_eq!(buyer[0]["data"]["bid"]["status"], "PENDING");
    assert_eq!(buyer[1]["bid_id"], counter.as_str());
    assert_eq!(buyer[1]["data"]["bid"]["parent_bid_id"], opening.as_str());
    assert_eq!(buyer[1]["data"]["thread"]["turn"], "buyer");
    assert_eq!(buyer[3]["data"]["bid"]["status"], "ACCEPTED");
    assert_eq!(buyer[3]["data"]["thread"]["status"], "ACCEPTED");
    assert_eq!(buyer[4]["order_id"], order_id);
    assert_eq!(buyer[4]["data"]["order"]["amount"], 70000);
    for event in &buyer {
        assert_eq!(event["listing_id"], deal.listing.as_str());
    }

    let seller = at_least(&app, &deal.seller, 8).await;
    assert_eq!(
        types(&seller),
        [
            "bid.placed",
            "bid.placed",
            "bid.countered",
            "bid.countered",
            "bid.accepted",
            "order.created",
            "listing.sold",
            "thread.closed"
        ]
    );
    assert_eq!(seller[6]["data"]["listing"]["status"], "SOLD");
    assert_eq!(seller[7]["bid_id"], rival_bid.as_str());
    assert_eq!(seller[7]["data"]["thread"]["closed_reason"], "listing_sold");
    assert_eq!(seller[7]["data"]["bid"]["status"], "REJECTED");

    let rival_events = at_least(&app, &rival, 2).await;
    assert_eq!(types(&rival_events), ["bid.placed", "thread.closed"]);

    // Each party numbers its own events 1, 2, 3... in commit order: the buyer's placement is
    // its 1 and the seller's 2 (after the rival's), and so on.
    assert_eq!(ids(&seller), (1..=8).collect::<Vec<i64>>());
    assert_eq!(ids(&buyer), (1..=5).collect::<Vec<i64>>());
    assert_eq!(ids(&rival_events), [1, 2]);
    let event_of = |events: &[Value], at: usize| events[at]["bid_id"].clone();
    assert_eq!(event_of(&buyer, 0), event_of(&seller, 1), "the same event, under each party's number");
    let numbers: Vec<(i64, Vec<i64>)> = sqlx::query_as(
        "SELECT count(*), array_agg(seq ORDER BY seq) FROM event_recipients GROUP BY agent_id ORDER BY 1",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(numbers, [(2, vec![1, 2]), (5, vec![1, 2, 3, 4, 5]), (8, (1..=8).collect())]);
    assert_eq!(app.count("SELECT count(*) FROM events").await, 8, "the seller was party to every event, written once");
}

#[tokio::test]
async fn withdrawals_rejections_and_purchases_have_events_too() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "quantity": 2 })).await;
    let bid = app.place(&deal.buyer, &deal.listing, 60000).await;
    app.post_empty(format!("/v1/bids/{bid}/withdraw"), &deal.buyer.key).await.expect(200);
    let shopper = app.register("shopper").await;
    app.post_empty(format!("/v1/listings/{}/purchase", deal.listing), &shopper.key).await.expect(201);
    let again = app.place(&deal.buyer, &deal.listing, 61000).await;
    app.post_empty(format!("/v1/bids/{again}/reject"), &deal.seller.key).await.expect(200);
    let third = app.place(&deal.buyer, &deal.listing, 62000).await;
    app.post_empty(format!("/v1/listings/{}/withdraw", deal.listing), &deal.seller.key).await.expect(200);

    let buyer = at_least(&app, &deal.buyer, 6).await;
    assert_eq!(
        types(&buyer),
        ["bid.placed", "bid.rejected", "bid.placed", "bid.rejected", "bid.placed", "thread.closed"]
    );
    assert_eq!(buyer[1]["data"]["bid"]["reason"], "withdrawn");
    assert_eq!(buyer[3]["data"]["bid"]["reason"], "rejected");
    assert_eq!(buyer[5]["bid_id"], third.as_str());
    assert_eq!(buyer[5]["data"]["thread"]["closed_reason"], "listing_withdrawn");
    let shopper_events = at_least(&app, &shopper, 1).await;
    assert_eq!(types(&shopper_events), ["order.created"]);
    assert_eq!(shopper_events[0]["thread_id"], Value::Null);
    let seller = at_least(&app, &deal.seller, 8).await;
    assert_eq!(types(&seller)[5..], ["bid.placed", "listing.withdrawn", "thread.closed"]);
}

#[tokio::test]
async fn expiry_by_the_sweeper_and_by_an_action_both_publish() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "max_threads_per_buyer": 5 })).await;
    let swept = app.place(&deal.buyer, &deal.listing, 60000).await;
    let expire = |bid: String| {
        let pool = app.pool.clone();
        async move {
            sqlx::query("UPDATE bids SET expires_at = now() - interval '1 second' WHERE id = $1::uuid")
                .bind(&bid)
                .execute(&pool)
                .await
                .unwrap();
            sqlx::query("UPDATE threads SET expires_at = now() - interval '1 second' WHERE last_bid_id = $1::uuid")
                .bind(&bid)
                .execute(&pool)
                .await
                .unwrap();
        }
    };
    expire(swept.clone()).await;
    haggle_server::sweeper::run_once(&app.market(), 100).await.unwrap();
    let acted = app.place(&deal.buyer, &deal.listing, 60000).await;
    expire(acted.clone()).await;
    app.post_empty(format!("/v1/bids/{acted}/accept"), &deal.seller.key).await.expect_problem(409, "bid_expired");

    let buyer = at_least(&app, &deal.buyer, 4).await;
    assert_eq!(types(&buyer), ["bid.placed", "bid.expired", "bid.placed", "bid.expired"]);
    assert_eq!(buyer[1]["bid_id"], swept.as_str());
    assert_eq!(buyer[3]["bid_id"], acted.as_str());
    assert_eq!(buyer[3]["data"]["bid"]["status"], "EXPIRED");
}

#[tokio::test]
async fn nobody_else_sees_a_thread_by_any_route() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let outsider = app.buyer("outsider").await;
    let mut stream = SseClient::connect(&app, &outsider, "?after=0", None).await;
    let bid = app.place(&deal.buyer, &deal.listing, 60000).await;
    let counter = app.counter(&deal.seller, &bid, 90000).await;
    assert_eq!(at_least(&app, &deal.buyer, 2).await.len(), 2);

    assert!(events_after(&app, &outsider, 0, 1).await.is_empty());
    let heartbeat_only = stream.event(Duration::from_millis(1500)).await;
    assert!(heartbeat_only.is_none(), "the outsider was sent {heartbeat_only:?}");
    for id in [&bid, &counter] {
        app.get(format!("/v1/bids/{id}?wait=1"), &outsider.key).await.expect_problem(404, "not_found");
    }
    // The outsider's own event arrives, and only that.
    let own_listing = app.listing(&outsider, json!({})).await;
    app.post_empty(format!("/v1/listings/{own_listing}/withdraw"), &outsider.key).await.expect(200);
    let event = stream.event(Duration::from_secs(5)).await.expect("the outsider's own event");
    assert_eq!(event["type"], "listing.withdrawn");
    assert_eq!(types(&events_after(&app, &outsider, 0, 0).await), ["listing.withdrawn"]);
}

#[tokio::test]
async fn waiters_on_one_instance_wake_when_another_instance_counters() {
    let a = TestApp::spawn().await;
    let b = a.another_instance().await;
    let deal = Deal::new(&a, json!({})).await;
    let bid = a.place(&deal.buyer, &deal.listing, 60000).await;
    let cursor = at_least(&a, &deal.buyer, 1).await[0]["id"].as_i64().unwrap();

    let mut stream = SseClient::connect(&a, &deal.buyer, &format!("?after={cursor}"), None).await;
    // Each waits up to a minute, twice what the test allows it below: an answer in time was woken.
    let long_poll = spawn_get(&a, &deal.buyer.key, format!("/v1/events?after={cursor}&wait=60"));
    let bid_wait = spawn_get(&a, &deal.buyer.key, format!("/v1/bids/{bid}?wait=60"));
    // The stream, the long poll and the bid wait have subscribed: none can miss the counter.
    a.until_waiting(3).await;
    assert!(!long_poll.is_finished() && !bid_wait.is_finished(), "nothing happened yet");

    let counter = b.counter(&deal.seller, &bid, 90000).await;
    let (waited, body) = tokio::time::timeout(Duration::from_secs(30), long_poll)
        .await
        .expect("the long poll ran to its timeout")
        .unwrap();
    assert!(waited < Duration::from_secs(60), "the long poll ran to its timeout");
    assert_eq!(body["data"][0]["type"], "bid.countered");
    assert_eq!(body["data"][0]["bid_id"], counter.as_str());
    assert_eq!(body["next_cursor"], body["data"][0]["id"].to_string());
    let (_, bid_now) = tokio::time::timeout(Duration::from_secs(5), bid_wait).await.unwrap().unwrap();
    assert_eq!(bid_now["status"], "COUNTERED");
    let streamed = stream.event(Duration::from_secs(5)).await.expect("the stream hears the counter");
    assert_eq!(streamed["bid_id"], counter.as_str());
}

#[tokio::test]
async fn a_stream_resumes_after_last_event_id_without_gap_or_duplicate() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "max_rounds": 20 })).await;
    let mut stream = SseClient::connect(&app, &deal.buyer, "?after=0", None).await;
    let mut bid = app.place(&deal.buyer, &deal.listing, 10000).await;
    bid = app.counter(&deal.seller, &bid, 99000).await;
    let mut received =
        vec![stream.event(Duration::from_secs(5)).await.unwrap(), stream.event(Duration::from_secs(5)).await.unwrap()];
    drop(stream);

    // While disconnected, the negotiation goes on (converging fast enough not to be marked as
    // deadlocked, which would add an event).
    let mut amounts = (15000..).step_by(5000).zip((70000..=94000).rev().step_by(5000));
    for _ in 0..3 {
        let (buyer_amount, seller_amount) = amounts.next().unwrap();
        bid = app.counter(&deal.buyer, &bid, buyer_amount).await;
        bid = app.counter(&deal.seller, &bid, seller_amount).await;
    }
    let last_seen = received.last().unwrap()["id"].to_string();
    // As an EventSource reconnects: the first URL again, with the header; the header wins.
    let mut resumed = SseClient::connect(&app, &deal.buyer, "?after=0", Some(&last_seen)).await;
    for _ in 0..6 {
        received.push(resumed.event(Duration::from_secs(5)).await.expect("a missed event"));
    }
    // And it keeps following live changes.
    let (buyer_amount, _) = amounts.next().unwrap();
    app.counter(&deal.buyer, &bid, buyer_amount).await;
    received.push(resumed.event(Duration::from_secs(5)).await.expect("a live event"));
    assert!(resumed.event(Duration::from_millis(500)).await.is_none(), "nothing twice");

    let everything = events_after(&app, &deal.buyer, 0, 0).await;
    assert_eq!(ids(&received), ids(&everything));
    assert_eq!(everything.len(), 9);
}

#[tokio::test]
async fn a_stream_without_a_cursor_starts_now_and_sends_heartbeats() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let bid = app.place(&deal.buyer, &deal.listing, 60000).await;
    at_least(&app, &deal.buyer, 1).await;
    let mut stream = SseClient::connect(&app, &deal.buyer, "", None).await;
    let frame = stream.frame(Duration::from_secs(3)).await.expect("a heartbeat within the interval");
    assert!(frame.comment, "{frame:?}");
    app.counter(&deal.seller, &bid, 90000).await;
    let event = stream.event(Duration::from_secs(5)).await.unwrap();
    assert_eq!(event["type"], "bid.countered", "the earlier placement is not replayed");
}

#[tokio::test]
async fn readers_never_miss_an_event_while_many_changes_commit_at_once() {
    let app = TestApp::spawn().await;
    let seller = app.register("seller").await;
    let mut buyers = Vec::new();
    for i in 0..12 {
        let buyer = app.buyer(&format!("buyer {i}")).await;
        let listing = app.listing(&seller, json!({})).await;
        buyers.push((buyer, listing));
    }
    // A reader follows the seller's events with its cursor while the changes commit.
    let reader = {
        let (base, key, client) = (app.base.clone(), seller.key.clone(), app.client.clone());
        tokio::spawn(async move {
            let mut seen: Vec<i64> = Vec::new();
            while seen.len() < 36 {
                let after = seen.last().copied().unwrap_or(0);
                let body: Value = client
                    .get(format!("{base}/v1/events?after={after}&wait=10&limit=7"))
                    .bearer_auth(&key)
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                let page = body["data"].as_array().unwrap();
                assert!(!page.is_empty(), "the reader waited in vain after {after}");
                seen.extend(page.iter().map(|event| event["id"].as_i64().unwrap()));
            }
            seen
        })
    };
    let moves = buyers.iter().map(|(buyer, listing)| {
        let app = &app;
        let seller = &seller;
        async move {
            let bid = app.place(buyer, listing, 60000).await;
            let counter = app.counter(seller, &bid, 90000).await;
            app.post_empty(format!("/v1/bids/{counter}/reject"), &buyer.key).await.expect(200);
        }
    });
    futures::future::join_all(moves).await;
    let seen = tokio::time::timeout(Duration::from_secs(20), reader).await.unwrap().unwrap();
    let stored: Vec<i64> =
        sqlx::query_scalar("SELECT seq FROM event_recipients WHERE agent_id = $1::uuid ORDER BY seq")
            .bind(&seller.id)
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert_eq!(seen, stored, "the reader saw every event once, in order");
    assert_eq!(seen, (1..=36).collect::<Vec<i64>>(), "the seller's numbers have no gaps");
}

/// A wake-up that never came (the instance that committed stopped before its NOTIFY): idle
/// waiters do not read on a timer of their own, and the catch-up wakes the agent's long polls
/// and streams within a check period.
#[tokio::test]
async fn a_wake_up_that_never_came_is_made_up_for_within_a_period() {
    let app = TestApp::spawn_with(|config| config.settings.stream_recheck = Duration::from_millis(500)).await;
    let deal = Deal::new(&app, json!({})).await;
    app.place(&deal.buyer, &deal.listing, 60000).await;
    let cursor = at_least(&app, &deal.buyer, 1).await[0]["id"].as_i64().unwrap();
    let mut stream = SseClient::connect(&app, &deal.buyer, &format!("?after={cursor}"), None).await;
    let waiter = spawn_get(&app, &deal.buyer.key, format!("/v1/events?after={cursor}&wait=30"));
    app.until_waiting(2).await;

    // Another instance commits an event for the buyer, and stops before it announces it.
    let mut elsewhere = sqlx::PgConnection::connect(app.database_url()).await.unwrap();
    let event = crate::support::bare_event(vec![deal.buyer.id.parse().unwrap()]);
    haggle_server::db::events::write(&mut elsewhere, &[event]).await.unwrap();
    let (_, body) = tokio::time::timeout(Duration::from_secs(5), waiter).await.expect("woken by the catch-up").unwrap();
    assert_eq!(body["data"][0]["type"], "bid.rejected");
    let heard = stream.event(Duration::from_secs(5)).await.expect("the stream hears of it too");
    assert_eq!(heard["type"], "bid.rejected");
}

#[tokio::test]
async fn a_waiter_hears_of_events_committed_while_the_listener_reconnects() {
    // The catch-up (a pass every check period) would wake the waiter too: not within the test.
    let app = TestApp::spawn_with(|config| config.settings.stream_recheck = Duration::from_secs(120)).await;
    let deal = Deal::new(&app, json!({})).await;
    let bid = app.place(&deal.buyer, &deal.listing, 60000).await;
    let cursor = at_least(&app, &deal.buyer, 1).await[0]["id"].as_i64().unwrap();
    // Warm the pool so that requests do not need new connections below, and open the
    // connection another instance commits on.
    futures::future::join_all((0..6).map(|_| app.get(format!("/v1/bids/{bid}"), &deal.buyer.key))).await;
    let mut elsewhere = sqlx::PgConnection::connect(app.database_url()).await.unwrap();

    let waiter = spawn_get(&app, &deal.buyer.key, format!("/v1/events?after={cursor}&wait=30"));
    app.until_waiting(1).await;

    // The listener loses its connection and cannot get a new one for a while.
    let mut admin = sqlx::PgConnection::connect(&crate::support::admin_url()).await.unwrap();
    let database: String = sqlx::query_scalar("SELECT current_database()").fetch_one(&app.pool).await.unwrap();
    sqlx::query(&format!("ALTER DATABASE \"{database}\" ALLOW_CONNECTIONS false")).execute(&mut admin).await.unwrap();
    let terminated: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND application_name = $2",
    )
    .bind(&database)
    .bind(haggle_server::events::listener::APPLICATION_NAME)
    .fetch_all(&mut admin)
    .await
    .unwrap();
    assert_eq!(terminated, [true], "one listener connection");

    // Another instance commits an event for the buyer; its NOTIFY reaches no listener here.
    let event = crate::support::bare_event(vec![deal.buyer.id.parse().unwrap()]);
    haggle_server::db::events::write(&mut elsewhere, &[event]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "no listener, so no wake-up yet");

    sqlx::query(&format!("ALTER DATABASE \"{database}\" ALLOW_CONNECTIONS true")).execute(&mut admin).await.unwrap();
    let (_, body) =
        tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("woken after reconnecting").unwrap();
    assert_eq!(body["data"][0]["type"], "bid.rejected");

    // A change made through this instance wakes its own waiters at once, listener or not.
    sqlx::query(&format!("ALTER DATABASE \"{database}\" ALLOW_CONNECTIONS false")).execute(&mut admin).await.unwrap();
    sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND application_name = $2")
        .bind(&database)
        .bind(haggle_server::events::listener::APPLICATION_NAME)
        .execute(&mut admin)
        .await
        .unwrap();
    let after = body["next_cursor"].as_str().unwrap().parse::<i64>().unwrap();
    let waiter = spawn_get(&app, &deal.buyer.key, format!("/v1/events?after={after}&wait=30"));
    app.until_waiting(1).await;
    let counter = app.counter(&deal.seller, &bid, 90000).await;
    let (_, body) = tokio::time::timeout(Duration::from_secs(5), waiter).await.expect("woken at once").unwrap();
    assert_eq!(body["data"][0]["bid_id"], counter.as_str());
    sqlx::query(&format!("ALTER DATABASE \"{database}\" ALLOW_CONNECTIONS true")).execute(&mut admin).await.unwrap();
}

/// Half the longest wait: a wait of a minute answered within it ended before its timeout.
const WITHIN: Duration = Duration::from_secs(30);

#[tokio::test]
async fn waiting_on_a_bid_returns_on_change_at_the_timeout_or_at_its_deadline() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "max_threads_per_buyer": 5 })).await;
    let bid = app.place(&deal.buyer, &deal.listing, 60000).await;

    let started = Instant::now();
    let unchanged = app.get(format!("/v1/bids/{bid}?wait=1"), &deal.buyer.key).await.expect(200);
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(unchanged.body["status"], "PENDING");

    // Already decided: no wait at all.
    let counter = app.counter(&deal.seller, &bid, 90000).await;
    // Asked to wait a minute, twice what the test allows: an answer in time did not wait.
    let decided = tokio::time::timeout(WITHIN, app.get(format!("/v1/bids/{bid}?wait=60"), &deal.seller.key))
        .await
        .expect("a decided bid is answered without waiting")
        .expect(200);
    assert_eq!(decided.body["status"], "COUNTERED");

    // A pending bid's deadline ends the wait, with the bid reading EXPIRED.
    sqlx::query("UPDATE bids SET expires_at = now() + interval '1 second' WHERE id = $1::uuid")
        .bind(&counter)
        .execute(&app.pool)
        .await
        .unwrap();
    sqlx::query("UPDATE threads SET expires_at = now() + interval '1 second' WHERE last_bid_id = $1::uuid")
        .bind(&counter)
        .execute(&app.pool)
        .await
        .unwrap();
    let expired = tokio::time::timeout(WITHIN, app.get(format!("/v1/bids/{counter}?wait=60"), &deal.buyer.key))
        .await
        .expect("the bid's deadline ended the wait")
        .expect(200);
    assert_eq!(expired.body["status"], "EXPIRED");
}

#[tokio::test]
async fn whole_number_query_parameters_may_be_written_as_floats() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    app.place(&deal.buyer, &deal.listing, 60000).await;
    let events = at_least(&app, &deal.buyer, 1).await;
    let page = app.get("/v1/events?after=0.0&limit=1.0", &deal.buyer.key).await.expect(200).body;
    assert_eq!(page["data"].as_array().unwrap().len(), 1);
    assert_eq!(page["data"][0]["id"], events[0]["id"]);
    let page = app.get("/v1/listings?limit=1e0", &deal.buyer.key).await.expect(200).body;
    assert_eq!(page["data"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn wait_and_cursor_parameters_are_validated() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let bid = app.place(&deal.buyer, &deal.listing, 60000).await;
    let key = &deal.buyer.key;
    for (path, status, code, field) in [
        ("/v1/events?wait=61".to_owned(), 422, "validation_failed", Some("wait")),
        ("/v1/events?wait=-1".to_owned(), 422, "validation_failed", Some("wait")),
        ("/v1/events?wait=soon".to_owned(), 400, "malformed_request", None),
        ("/v1/events?after=-3".to_owned(), 422, "validation_failed", Some("after")),
        ("/v1/events?limit=0".to_owned(), 422, "validation_failed", Some("limit")),
        ("/v1/events?limit=201".to_owned(), 422, "validation_failed", Some("limit")),
        ("/v1/events?since=4".to_owned(), 400, "malformed_request", None),
        ("/v1/events?limit=2.5".to_owned(), 400, "malformed_request", None),
        ("/v1/events?after=9223372036854775808".to_owned(), 400, "malformed_request", None),
        (format!("/v1/bids/{bid}?wait=100"), 422, "validation_failed", Some("wait")),
        (format!("/v1/bids/{bid}?wait=NaN"), 422, "validation_failed", Some("wait")),
        ("/v1/events/stream?after=-1".to_owned(), 422, "validation_failed", Some("after")),
    ] {
        let resp = app.get(&path, key).await.expect_problem(status, code);
        if let Some(field) = field {
            assert_eq!(resp.body["errors"][0]["field"], field, "{path}");
        }
    }
    let resp = app
        .send(
            reqwest::Method::GET,
            "/v1/events/stream",
            Some(key),
            crate::support::Body::None,
            &[("last-event-id", "yesterday")],
        )
        .await
        .expect_problem(400, "malformed_request");
    assert_eq!(resp.body["errors"][0]["field"], "Last-Event-ID");
    // `after` is checked even when the header decides where the stream starts.
    let resp = app
        .send(
            reqwest::Method::GET,
            "/v1/events/stream?after=-1",
            Some(key),
            crate::support::Body::None,
            &[("last-event-id", "0")],
        )
        .await
        .expect_problem(422, "validation_failed");
    assert_eq!(resp.body["errors"][0]["field"], "after");
    for path in ["/v1/events", "/v1/events/stream", "/v1/events?wait=5"] {
        app.send(reqwest::Method::GET, path, None, crate::support::Body::None, &[])
            .await
            .expect_problem(401, "unauthenticated");
    }
}

#[tokio::test]
async fn paging_through_events_with_the_cursor() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "max_rounds": 20 })).await;
    let mut bid = app.place(&deal.buyer, &deal.listing, 10000).await;
    for step in 0..2 {
        bid = app.counter(&deal.seller, &bid, 99000 - step * 1000).await;
        bid = app.counter(&deal.buyer, &bid, 11000 + step * 1000).await;
    }
    let all = at_least(&app, &deal.buyer, 5).await;
    let first = app.get("/v1/events?limit=2", &deal.buyer.key).await.expect(200);
    assert_eq!(ids(first.body["data"].as_array().unwrap()), ids(&all[..2]));
    assert_eq!(first.body["has_more"], true);
    let cursor = first.body["next_cursor"].as_str().unwrap();
    let rest = app.get(format!("/v1/events?after={cursor}&limit=50"), &deal.buyer.key).await.expect(200);
    assert_eq!(ids(rest.body["data"].as_array().unwrap()), ids(&all[2..]));
    assert_eq!(rest.body["has_more"], false);
    let end = rest.body["next_cursor"].as_str().unwrap();
    let empty = app.get(format!("/v1/events?after={end}"), &deal.buyer.key).await.expect(200);
    assert_eq!(empty.body["data"], json!([]));
    assert_eq!(empty.body["next_cursor"], end, "an empty page keeps the cursor");
}

#[tokio::test]
async fn stopping_the_server_ends_long_polls_and_streams() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let mut stream = SseClient::connect(&app, &deal.buyer, "", None).await;
    let long_poll = {
        let (base, key, client) = (app.base.clone(), deal.buyer.key.clone(), app.client.clone());
        tokio::spawn(async move {
            client.get(format!("{base}/v1/events?wait=60")).bearer_auth(key).send().await.map(|r| r.status())
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    app.stop();
    let status = tokio::time::timeout(Duration::from_secs(5), long_poll).await.expect("the long poll ended").unwrap();
    assert_eq!(status.unwrap(), 200);
    let deadline = Instant::now() + Duration::from_secs(5);
    while stream.frame(Duration::from_secs(5)).await.is_some() {
        assert!(Instant::now() < deadline, "the stream kept going");
    }
}

#[tokio::test]
async fn revoking_a_key_ends_the_streams_opened_with_it() {
    let app = TestApp::spawn().await;
    let agent = app.register("streamer").await;
    let added = app.post_empty("/v1/agents/me/keys", &agent.key).await.expect(201);
    let second = Agent { id: agent.id.clone(), key: added.body["api_key"].as_str().unwrap().to_owned() };
    let second_id = added.body["key"]["id"].as_str().unwrap().to_owned();
    let mut stream = SseClient::connect(&app, &second, "", None).await;
    app.send(
        reqwest::Method::DELETE,
        format!("/v1/agents/me/keys/{second_id}"),
        Some(&agent.key),
        crate::support::Body::None,
        &[],
    )
    .await
    .expect(200);
    let deadline = Instant::now() + Duration::from_secs(20);
    while stream.frame(Duration::from_secs(20)).await.is_some() {
        assert!(Instant::now() < deadline, "the stream outlived its key");
    }
    // The agent's other key still streams.
    let mut kept = SseClient::connect(&app, &agent, "", None).await;
    assert!(kept.frame(Duration::from_secs(3)).await.is_some(), "a heartbeat on the live key's stream");
}

/// An app whose long-lived requests check their credentials every 200 ms.
async fn rechecking_often() -> TestApp {
    TestApp::spawn_with(|config| config.settings.stream_recheck = Duration::from_millis(200)).await
}

/// A second key for the agent, and its id.
async fn second_key(app: &TestApp, agent: &Agent) -> (Agent, String) {
    let added = app.post_empty("/v1/agents/me/keys", &agent.key).await.expect(201);
    let key = Agent { id: agent.id.clone(), key: added.body["api_key"].as_str().unwrap().to_owned() };
    (key, added.body["key"]["id"].as_str().unwrap().to_owned())
}

/// Starts a waiting GET as the agent; it gives its status and problem code when it ends.
fn wait_in_background(app: &TestApp, agent: &Agent, path: String) -> tokio::task::JoinHandle<(u16, Value)> {
    let (client, url, key) = (app.client.clone(), format!("{}{path}", app.base), agent.key.clone());
    tokio::spawn(async move {
        let response = client.get(url).bearer_auth(key).send().await.unwrap();
        (response.status().as_u16(), response.json::<Value>().await.unwrap()["code"].clone())
    })
}

/// The waiting request's answer, which must come well before its own wait (60 s) is up.
async fn ended(waiting: tokio::task::JoinHandle<(u16, Value)>) -> (u16, String) {
    let (status, code) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the wait outlived its credential")
        .unwrap();
    (status, code.as_str().unwrap_or_default().to_owned())
}

#[tokio::test]
async fn revoking_a_key_ends_the_long_polls_and_bid_waits_opened_with_it() {
    let app = rechecking_often().await;
    let deal = Deal::new(&app, json!({})).await;
    let bid = app.place(&deal.buyer, &deal.listing, 90000).await;
    let (second, second_id) = second_key(&app, &deal.buyer).await;
    // The cursor after the bid's own event, once it is published (a few milliseconds after its
    // commit): a long poll from an earlier cursor would be answered with it at once.
    let seen = crate::support::eventually("the bid's event published", || async {
        let page = app.get("/v1/events?limit=200", &deal.buyer.key).await.expect(200).body;
        let placed = page["data"].as_array().is_some_and(|events| types(events).contains(&"bid.placed"));
        placed.then(|| page["next_cursor"].clone())
    })
    .await;
    let poll = wait_in_background(&app, &second, format!("/v1/events?wait=60&after={}", seen.as_str().unwrap()));
    let bid_wait = wait_in_background(&app, &second, format!("/v1/bids/{bid}?wait=60"));
    let kept = wait_in_background(&app, &deal.buyer, format!("/v1/events?wait=60&after={}", seen.as_str().unwrap()));
    app.until_waiting(3).await;
    app.delete(format!("/v1/agents/me/keys/{second_id}"), &deal.buyer.key).await.expect(200);
    assert_eq!(ended(poll).await, (401, "unauthenticated".to_owned()));
    assert_eq!(ended(bid_wait).await, (401, "unauthenticated".to_owned()));
    // The agent's other key waited on, and hears of the seller's counter.
    app.counter(&deal.seller, &bid, 95000).await;
    assert_eq!(ended(kept).await, (200, String::new()));
}

#[tokio::test]
async fn suspending_an_agent_ends_its_long_polls_and_streams() {
    let app = rechecking_often().await;
    let agent = app.register("suspended-waiter").await;
    let mut stream = SseClient::connect(&app, &agent, "", None).await;
    let poll = wait_in_background(&app, &agent, "/v1/events?wait=60".to_owned());
    app.until_waiting(2).await;
    let path = format!("/v1/admin/agents/{}/suspend", agent.id);
    app.post(&path, crate::support::ADMIN_TOKEN, json!({ "reason": "abuse" })).await.expect(200);
    assert_eq!(ended(poll).await, (403, "agent_suspended".to_owned()));
    let suspended = Instant::now();
    while stream.frame(Duration::from_secs(10)).await.is_some() {
        assert!(suspended.elapsed() < Duration::from_secs(5), "the stream outlived its agent's suspension");
    }
}

#[tokio::test]
async fn events_past_their_retention_are_purged_with_their_inboxes() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let bid = app.place(&deal.buyer, &deal.listing, 60000).await;
    app.counter(&deal.seller, &bid, 90000).await;
    assert_eq!(at_least(&app, &deal.buyer, 2).await.len(), 2);
    sqlx::query("UPDATE events SET created_at = now() - interval '2 days' WHERE id = 1")
        .execute(&app.pool)
        .await
        .unwrap();
    let purged = haggle_server::sweeper::purge_events(&app.pool, Duration::from_secs(86400), 100).await.unwrap();
    assert_eq!(purged, (1, 0));
    let left = events_after(&app, &deal.buyer, 0, 0).await;
    assert_eq!(types(&left), ["bid.countered"]);
    assert_eq!(app.count("SELECT count(*) FROM event_recipients WHERE event_id = 1").await, 0);
    assert_eq!(app.count("SELECT count(*) FROM event_recipients").await, 2, "the counter's, for each party");
    assert_eq!(haggle_server::sweeper::purge_events(&app.pool, Duration::from_secs(86400), 100).await.unwrap(), (0, 0));
}

#[tokio::test]
async fn an_instance_holds_a_bounded_number_of_waiters_over_every_agent() {
    let app = TestApp::spawn_with(|config| config.settings.max_waiters = 3).await;
    let agents = [app.register("one").await, app.register("two").await, app.register("three").await];
    let fourth = app.register("four").await;
    let hold = |agent: &crate::support::Agent| spawn_get(&app, &agent.key, "/v1/events?after=0&wait=30".to_owned());
    // Three long polls, one per agent, all held: one that was refused (because a probe held a
    // place when it came) is sent again.
    let mut held: Vec<_> = agents.iter().map(hold).collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    let refused = loop {
        assert!(Instant::now() < deadline, "the instance never filled");
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut all_held = true;
        for (waiter, agent) in held.iter_mut().zip(&agents) {
            if waiter.is_finished() {
                *waiter = hold(agent);
                all_held = false;
            }
        }
        if !all_held {
            continue;
        }
        // Refused once the three are waiting: 503 with Retry-After, however few the agent has open.
        let resp = app.get("/v1/events?after=0&wait=1", &fourth.key).await;
        if resp.status == 503 {
            break resp;
        }
    };
    assert_eq!(refused.code(), "unavailable");
    assert!(refused.header("retry-after").is_some());
    for waiter in &held {
        waiter.abort();
    }
    // Their connections closed, the places are free again.
    crate::support::eventually("a free place", || async {
        let resp = app.get("/v1/events?after=0&wait=1", &fourth.key).await;
        (resp.status == 200).then_some(())
    })
    .await;
}

/// Upgrading to events written once keeps every agent's cursor: the events published before
/// keep their ids as the agents' numbers, one an instance of the earlier version left in its
/// outbox is published by the migration, the next event an agent gets is numbered after its
/// last, and the old events are purged with their inboxes as the new ones are.
#[tokio::test]
async fn an_upgraded_database_keeps_every_agents_cursor() {
    use haggle_server::db::events as log;

    let db = crate::support::TestDb::create().await;
    let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/migrations");
    let mut migrations: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "sql"))
        .collect();
    migrations.sort();
    let (before, after): (Vec<_>, Vec<_>) =
        migrations.into_iter().partition(|path| path.file_name().unwrap().to_string_lossy().as_ref() < "0016");
    for path in &before {
        sqlx::raw_sql(&std::fs::read_to_string(path).unwrap()).execute(&mut conn).await.unwrap();
    }
    // As the earlier version left it: events 1 to 3 published, one more in the outbox.
    let (a, b, c) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
    for statement in [
        "INSERT INTO events (id, type, audience, data, created_at)
         VALUES (1, 'bid.placed', ARRAY[$1, $2]::uuid[], '{}', now() - interval '2 days'),
                (2, 'bid.countered', ARRAY[$1]::uuid[], '{}', now() - interval '2 days'),
                (3, 'bid.placed', ARRAY[$2, $3]::uuid[], '{}', now())",
        "INSERT INTO event_recipients (agent_id, event_id) VALUES ($1, 1), ($2, 1), ($1, 2), ($2, 3), ($3, 3)",
        "UPDATE event_sequence SET last_id = 3 WHERE $1::uuid IS NOT NULL AND $2::uuid IS NOT NULL AND $3::uuid IS NOT NULL",
        "INSERT INTO outbox (type, audience, data)
         SELECT 'bid.accepted', ARRAY[$1, $3]::uuid[], '{}' WHERE $2::uuid IS NOT NULL",
    ] {
        sqlx::query(statement).bind(a).bind(b).bind(c).execute(&mut conn).await.unwrap();
    }
    for path in &after {
        sqlx::raw_sql(&std::fs::read_to_string(path).unwrap()).execute(&mut conn).await.unwrap();
    }

    let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
    let numbers = |events: Vec<haggle_server::events::Event>| events.iter().map(|event| event.id).collect::<Vec<_>>();
    assert_eq!(numbers(log::for_agent(&pool, a, 0, 100).await.unwrap()), [1, 2, 4], "the outbox's event is 4");
    assert_eq!(numbers(log::for_agent(&pool, c, 0, 100).await.unwrap()), [3, 4]);
    for (agent, last) in [(a, 4), (b, 3), (c, 4)] {
        assert_eq!(log::last_id(&pool, agent).await.unwrap(), last);
    }

    // The next event, to all three, takes each one's next number.
    let event = crate::support::bare_event(vec![a, b, c, a]);
    let written = log::write(&mut conn, std::slice::from_ref(&event)).await.unwrap();
    assert_eq!((written.events, written.recipients.len()), (1, 3));
    assert_eq!(numbers(log::for_agent(&pool, a, 2, 100).await.unwrap()), [4, 5]);
    assert_eq!(numbers(log::for_agent(&pool, b, 3, 100).await.unwrap()), [4]);
    assert_eq!(numbers(log::for_agent(&pool, c, 4, 100).await.unwrap()), [5]);
    let (id, seqs): (i64, Vec<i64>) =
        sqlx::query_as("SELECT id, seqs FROM events WHERE type = 'bid.rejected'").fetch_one(&pool).await.unwrap();
    assert_eq!((id, seqs), (5, vec![5, 4, 5]), "its own id after the last published, and each one's number once");
    assert_eq!(log::get(&pool, id, b).await.unwrap().unwrap().id, 4, "a webhook of b's is sent b's number");

    // The two old events past a day's retention go, with their inboxes' rows.
    let purged = log::purge_before(&pool, chrono::Utc::now() - chrono::Duration::days(1), 100).await.unwrap();
    assert_eq!(purged, 2);
    assert_eq!(numbers(log::for_agent(&pool, a, 0, 100).await.unwrap()), [4, 5]);
    let inboxes: i64 = sqlx::query_scalar("SELECT count(*) FROM event_recipients").fetch_one(&pool).await.unwrap();
    assert_eq!(inboxes, 2 + 2 + 3, "event 3's, the outbox's and the new one's");
    pool.close().await;
}
