//! Prometheus metrics: a `haggle serve` process (its recorder is the process's) is scraped
//! before and after a scripted negotiation, and the text is read with a Prometheus parser.

use futures::StreamExt;
use serde_json::json;

use crate::served::{ADMIN, Metrics, Server};
use crate::support::{TestApp, TestDb, eventually};

#[tokio::test]
async fn a_negotiation_moves_the_counters_by_what_it_did() {
    let db = TestDb::create().await;
    let server = Server::spawn(&db, &[("HAGGLE_RATE_LIMIT", "0"), ("HAGGLE_SWEEP_INTERVAL", "0")]);
    let (_, seller) = server.agent("seller", None).await;
    let (_, buyer) = server.agent("buyer", Some("AGENCY")).await;
    let (status, listing) = server
        .call(
            reqwest::Method::POST,
            "/v1/listings",
            Some(&seller),
            Some(json!({ "title": "Desk", "ask_amount": 100000, "quantity": 3 })),
        )
        .await;
    assert_eq!(status, 201, "{listing}");
    let listing = listing["id"].as_str().unwrap().to_owned();
    let before = server.scrape().await;

    let post = reqwest::Method::POST;
    let (placed, body) = server
        .call(post.clone(), &format!("/v1/listings/{listing}/bids"), Some(&buyer), Some(json!({ "amount": 60000 })))
        .await;
    assert_eq!(placed, 201, "{body}");
    let bid = body["bid"]["id"].as_str().unwrap().to_owned();
    let (countered, body) = server
        .call(post.clone(), &format!("/v1/bids/{bid}/counter"), Some(&seller), Some(json!({ "amount": 90000 })))
        .await;
    assert_eq!(countered, 201, "{body}");
    let counter = body["bid"]["id"].as_str().unwrap().to_owned();
    // A counter on a bid that is no longer pending is refused: an answer, not a move.
    let (refused, _) = server
        .call(post.clone(), &format!("/v1/bids/{bid}/counter"), Some(&seller), Some(json!({ "amount": 95000 })))
        .await;
    assert_eq!(refused, 409);
    let (accepted, body) = server.call(post.clone(), &format!("/v1/bids/{counter}/accept"), Some(&buyer), None).await;
    assert_eq!(accepted, 200, "{body}");
    let (unknown, _) = server.call(reqwest::Method::GET, "/no/such/route", Some(&buyer), None).await;
    assert_eq!(unknown, 404);
    // Wrong operator tokens from one address: the first ones are 401, then 429 (failed_auth).
    let mut refusals = 0;
    for _ in 0..25 {
        let (status, _) = server.call(reqwest::Method::GET, "/metrics", Some("not-the-token"), None).await;
        assert!(matches!(status, 401 | 429), "{status}");
        refusals += u64::from(status == 429);
    }
    assert!(refusals > 0);

    let after = server.scrape().await;
    let moved = |name: &str, labels: &[(&str, &str)]| after.value(name, labels) - before.value(name, labels);
    let requests = "haggle_http_requests_total";
    let counter_route = [("route", "/v1/bids/{id}/counter"), ("method", "POST")];
    assert_eq!(moved(requests, &[counter_route[0], counter_route[1], ("status", "201")]), 1.0);
    assert_eq!(moved(requests, &[counter_route[0], counter_route[1], ("status", "409")]), 1.0);
    assert_eq!(moved(requests, &[("route", "/v1/listings/{id}/bids"), ("method", "POST"), ("status", "201")]), 1.0);
    assert_eq!(moved(requests, &[("route", "/v1/bids/{id}/accept"), ("method", "POST"), ("status", "200")]), 1.0);
    assert_eq!(moved(requests, &[("route", "unmatched"), ("method", "GET"), ("status", "404")]), 1.0);
    // Refused before the handler ran, and counted twice: as answers and as refusals (the
    // scrape that follows may have been refused a few times more).
    let throttled = moved(requests, &[("route", "/metrics"), ("method", "GET"), ("status", "429")]);
    assert!(throttled >= refusals as f64, "{throttled} < {refusals}");
    assert_eq!(moved("haggle_rate_limited_total", &[("scope", "failed_auth")]), throttled);
    let duration = "haggle_http_request_duration_seconds";
    assert_eq!(after.observations(duration, &counter_route) - before.observations(duration, &counter_route), 2);
    // Nothing raw: every route label is a template.
    assert!(!after.label_values("route").iter().any(|route| route.contains(&bid)));

    let made = |kind: &str| moved("haggle_moves_total", &[("kind", kind), ("outcome", "made")]);
    assert_eq!((made("placements"), made("counters"), made("acceptances")), (1.0, 1.0, 1.0));
    assert_eq!(made("rejections") + made("withdrawals"), 0.0);
    // The placement read its listing; the counter and the acceptance answered bids this
    // instance had just made, and were decided on what it remembered of them; the refused
    // counter's bid was no longer remembered, and was read.
    let read = |kind: &str, source: &str| moved("haggle_move_reads_total", &[("kind", kind), ("source", source)]);
    assert_eq!((read("placements", "database"), read("placements", "memory")), (1.0, 0.0));
    assert_eq!((read("counters", "memory"), read("counters", "database")), (1.0, 1.0));
    assert_eq!((read("acceptances", "memory"), read("acceptances", "database")), (1.0, 0.0));
    let batches =
        after.observations("haggle_move_batch_size", &[]) - before.observations("haggle_move_batch_size", &[]);
    assert!(batches >= 3, "three unlocked moves make at least three statements: {batches}");
    assert!(after.observations("haggle_move_round_duration_seconds", &[]) >= 3);

    // The move's events (bid.placed, bid.countered, bid.accepted, order.created) are counted
    // once committed.
    let later = eventually("the negotiation's events to be counted", || async {
        let later = server.scrape().await;
        (later.value("haggle_events_published_total", &[]) - before.value("haggle_events_published_total", &[]) >= 4.0)
            .then_some(later)
    })
    .await;
    for state in ["in_use", "idle"] {
        assert!(later.find("haggle_db_pool_connections", &[("state", state)]).is_some(), "{state}");
    }
    for name in ["haggle_db_pool_waiting", "haggle_webhook_backlog", "haggle_webhook_oldest_pending_age_seconds"] {
        assert!(later.has(name), "{name} is missing");
    }
    assert_eq!(later.value("haggle_webhook_backlog", &[]), 0.0);
}

/// Requests that differ only in what a caller chooses: invented methods (one 2,000 characters
/// long), unknown paths, ids in known routes, MCP session ids and header values. `round` makes
/// each one's values its own.
fn hostile_requests(base: &str, key: &str, round: usize, each: usize) -> Vec<reqwest::RequestBuilder> {
    let client = reqwest::Client::new();
    let mut requests = Vec::new();
    for n in 0..each {
        let tag = format!("{round}x{n}");
        let invented = if n == 0 { "M".repeat(2000) } else { format!("INVENTED-{tag}") };
        let method = reqwest::Method::from_bytes(invented.as_bytes()).unwrap();
        requests.push(client.request(method.clone(), format!("{base}/no/such/{tag}")));
        requests.push(client.request(method, format!("{base}/v1/listings")).bearer_auth(key));
        requests.push(client.get(format!("{base}/v1/{tag}/{}", uuid::Uuid::now_v7())).bearer_auth(key));
        requests.push(client.get(format!("{base}/v1/bids/{}", uuid::Uuid::now_v7())).bearer_auth(key));
        requests.push(client.get(format!("{base}/v1/listings/not-an-id-{tag}")).bearer_auth(key));
        requests.push(
            client
                .get(format!("{base}/v1/agents/me"))
                .bearer_auth(key)
                .header("x-request-id", format!("req-{tag}"))
                .header("user-agent", format!("agent/{tag}"))
                .header(format!("x-invented-{tag}"), tag.clone()),
        );
        requests.push(
            client
                .post(format!("{base}/mcp"))
                .bearer_auth(key)
                .header("mcp-session-id", format!("session-{tag}"))
                .header("accept", "application/json, text/event-stream")
                .json(&json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" })),
        );
    }
    requests
}

/// Sends requests, several at once, and returns their statuses.
async fn send_all(requests: Vec<reqwest::RequestBuilder>) -> Vec<u16> {
    futures::stream::iter(requests)
        .map(|request| async move { request.send().await.unwrap().status().as_u16() })
        .buffer_unordered(16)
        .collect()
        .await
}

#[tokio::test]
async fn no_request_adds_a_series_of_its_own() {
    let db = TestDb::create().await;
    let server = Server::spawn(&db, &[("HAGGLE_RATE_LIMIT", "0")]);
    let (_, key) = server.agent("prober", None).await;
    let base = server.process.base.clone();
    // Once each, so that every series these requests make exists.
    let mut statuses = send_all(hostile_requests(&base, &key, 0, 2)).await;
    statuses.sort_unstable();
    statuses.dedup();
    assert_eq!(statuses, [200, 400, 404, 405], "each kind of request is answered as it will be below");
    // The first scrape is counted in the second's.
    let _ = server.scrape().await;
    let before = server.scrape().await;

    let statuses = send_all(hostile_requests(&base, &key, 1, 600)).await;
    assert_eq!(statuses.len(), 4200);
    let after = server.scrape().await;
    assert_eq!(after.series(), before.series(), "4,200 requests of callers' own methods, paths and values");
    let methods: std::collections::HashSet<&str> = after.label_values("method").into_iter().collect();
    assert!(methods.iter().all(|method| method.len() <= 7), "{methods:?}");
    assert!(methods.contains("other"), "{methods:?}");
    assert!(after.label_values("route").iter().all(|route| route.starts_with('/') || *route == "unmatched"));
}

#[tokio::test]
async fn open_long_polls_and_streams_are_gauged_while_open() {
    let db = TestDb::create().await;
    let server = Server::spawn(&db, &[]);
    let (_, agent) = server.agent("waiter", None).await;
    let base = server.process.base.clone();
    let poll = tokio::spawn({
        let agent = agent.clone();
        let base = base.clone();
        async move {
            reqwest::Client::new().get(format!("{base}/v1/events?wait=30")).bearer_auth(agent).send().await.unwrap()
        }
    });
    let stream =
        reqwest::Client::new().get(format!("{base}/v1/events/stream")).bearer_auth(&agent).send().await.unwrap();
    assert_eq!(stream.status(), 200);
    eventually("the long poll and the stream to be counted", || async {
        let metrics = server.scrape().await;
        (metrics.value("haggle_open_long_polls", &[]) == 1.0 && metrics.value("haggle_open_streams", &[]) == 1.0)
            .then_some(())
    })
    .await;
    drop(stream);
    // An event ends the long poll: the agent's own listing.
    let (status, _) = server
        .call(reqwest::Method::POST, "/v1/listings", Some(&agent), Some(json!({ "title": "Lamp", "ask_amount": 5000 })))
        .await;
    assert_eq!(status, 201);
    let _ = poll.await.unwrap();
    eventually("both to be counted out", || async {
        let metrics = server.scrape().await;
        (metrics.value("haggle_open_long_polls", &[]) == 0.0 && metrics.value("haggle_open_streams", &[]) == 0.0)
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_separate_metrics_address_serves_them_without_the_token() {
    let db = TestDb::create().await;
    let server = Server::spawn(&db, &[("HAGGLE_METRICS_BIND", "127.0.0.1:0")]);
    let log = server.process.log();
    let address = log
        .lines()
        .find_map(|line| line.split("serving metrics on ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no metrics address in the log:\n{log}"))
        .to_owned();
    let response = reqwest::get(&address).await.unwrap();
    assert_eq!(response.status(), 200);
    let metrics = Metrics::parse(&response.text().await.unwrap());
    assert!(metrics.has("haggle_db_pool_connections"));
    // The main port does not serve them, even to the operator.
    let (status, body) = server.call(reqwest::Method::GET, "/metrics", Some(ADMIN), None).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")));
}

#[tokio::test]
async fn metrics_can_be_turned_off() {
    let db = TestDb::create().await;
    let server = Server::spawn(&db, &[("HAGGLE_METRICS", "off")]);
    let (status, body) = server.call(reqwest::Method::GET, "/metrics", Some(ADMIN), None).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")));
}

#[tokio::test]
async fn metrics_are_for_the_operator() {
    // In process, metrics are off (the recorder is a process's); the route still checks first.
    let app = TestApp::spawn().await;
    let agent = app.register("curious").await;
    app.send(reqwest::Method::GET, "/metrics", None, crate::support::Body::None, &[])
        .await
        .expect_problem(401, "unauthenticated");
    app.get("/metrics", &agent.key).await.expect_problem(403, "forbidden");
    app.get("/metrics", crate::support::ADMIN_TOKEN).await.expect_problem(404, "not_found");
}
