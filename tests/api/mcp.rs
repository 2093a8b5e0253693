//! The MCP server, through the official Rust SDK's client as agents use it: over Streamable
//! HTTP at `/mcp` (both the session protocol and the 2026-07-28 stateless one) and over stdio
//! (`haggle mcp`). Tools and their schemas, whole negotiations, every refusal as a structured
//! tool error, bad input as the protocol's error with nothing changed, sessions and policies
//! kept to their owners, races, resources and their change notifications, and the prompt.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::join_all;
use reqwest::Method;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ErrorCode, GetPromptRequestParams, ProtocolVersion,
    ReadResourceRequestParams, ResourceContents, ResourceUpdatedNotificationParam, ServerNotification,
    SubscribeRequestParams, SubscriptionFilter,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{ConfigureCommandExt, StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient, ServiceError, ServiceExt};
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::support::{Agent, Body, Deal, TestApp, TestDb, haggle_bin};

/// A client that records the resources the server says were updated.
#[derive(Clone, Default)]
struct Watcher {
    updated: Arc<Mutex<Vec<String>>>,
    arrived: Arc<Notify>,
}

impl ClientHandler for Watcher {
    async fn on_resource_updated(&self, params: ResourceUpdatedNotificationParam, _: NotificationContext<RoleClient>) {
        self.updated.lock().unwrap().push(params.uri);
        self.arrived.notify_waiters();
    }
}

impl Watcher {
    /// Waits until `uri` was reported updated (failing the test after 20 s).
    async fn updated(&self, uri: &str) {
        tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                let arrived = self.arrived.notified();
                if self.updated.lock().unwrap().iter().any(|updated| updated == uri) {
                    return;
                }
                arrived.await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no notifications/resources/updated for {uri}"));
    }
}

type Session = RunningService<RoleClient, Watcher>;

fn http_transport(app: &TestApp, key: &str) -> StreamableHttpClientTransportConfig {
    StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", app.base)).auth_header(key)
}

/// An agent's session over HTTP with `initialize` and `Mcp-Session-Id`.
async fn over_http(app: &TestApp, agent: &Agent) -> Session {
    let transport = StreamableHttpClientTransport::from_config(http_transport(app, &agent.key));
    Watcher::default().serve(transport).await.expect("an MCP session over HTTP")
}

/// An agent over HTTP on the 2026-07-28 protocol: stateless requests, no session.
async fn over_http_stateless(app: &TestApp, agent: &Agent) -> Session {
    Watcher::default()
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_config(http_transport(app, &agent.key)),
            ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] },
        )
        .await
        .expect("an MCP client on the 2026-07-28 protocol")
}

/// An agent through `haggle mcp`, a child process speaking MCP on stdio.
async fn over_stdio(app: &TestApp, agent: &Agent) -> Session {
    let command = tokio::process::Command::new(haggle_bin()).configure(|command| {
        command.arg("mcp").env("HAGGLE_URL", &app.base).env("HAGGLE_API_KEY", &agent.key).env("RUST_LOG", "warn");
    });
    let transport = TokioChildProcess::new(command).expect("start haggle mcp");
    Watcher::default().serve(transport).await.expect("an MCP session over stdio")
}

async fn call(session: &Session, tool: &str, arguments: Value) -> Result<CallToolResult, ServiceError> {
    let arguments = arguments.as_object().expect("arguments are an object").clone();
    session.call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments)).await
}

/// A tool's successful answer: its structured content (also its last text block).
#[track_caller]
fn answer(tool: &str, result: Result<CallToolResult, ServiceError>) -> Value {
    let result = result.unwrap_or_else(|error| panic!("{tool}: {error}"));
    let content = result.structured_content.clone().unwrap_or(Value::Null);
    assert_ne!(result.is_error, Some(true), "{tool} was refused: {content}");
    let text = result.content.last().and_then(|block| block.as_text()).expect("a text block").text.clone();
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap(),
        content,
        "{tool}: the JSON text is the structured content"
    );
    content
}

async fn ok(session: &Session, tool: &str, arguments: Value) -> Value {
    answer(tool, call(session, tool, arguments).await)
}

/// A refused move: a tool error whose structured content is the problem document.
async fn refused(session: &Session, tool: &str, arguments: Value, code: &str) -> Value {
    let result = call(session, tool, arguments).await.unwrap_or_else(|error| panic!("{tool}: {error}"));
    let document = result.structured_content.clone().expect("structured content");
    assert_eq!((result.is_error, document["code"].as_str()), (Some(true), Some(code)), "{tool}: {document}");
    assert!(!document["detail"].as_str().unwrap_or("").is_empty(), "{document}");
    assert!(!document["hint"].as_str().unwrap_or("").is_empty(), "{document}");
    let summary = result.content[0].as_text().expect("a summary").text.clone();
    assert!(summary.contains(code), "{summary}");
    document
}

/// Every row of the database but the idempotency keys: a move sent with a key keeps its
/// answer under it, a refusal too, as REST does; nothing else may change when a move is refused.
async fn state(app: &TestApp) -> String {
    app.snapshot().await.lines().filter(|table| !table.starts_with("idempotency_keys:")).collect::<Vec<_>>().join("\n")
}

/// The protocol's error for a call: its JSON-RPC code.
#[track_caller]
fn protocol_error(result: Result<CallToolResult, ServiceError>) -> rmcp::ErrorData {
    match result {
        Err(ServiceError::McpError(error)) => error,
        other => panic!("expected the protocol's error, got {other:?}"),
    }
}

fn id(value: &Value) -> String {
    value.as_str().expect("an id").to_owned()
}

/// A whole negotiation between two MCP sessions: the seller lists, the buyer finds it and bids,
/// the seller counters while the buyer waits for its turn, the buyer counters, the seller
/// accepts. Returns the thread's id.
async fn negotiate(app: &TestApp, seller: &Session, buyer: &Session) -> String {
    let listing = ok(seller, "create_listing", json!({ "title": "Walnut standing desk", "ask_amount": 138000 })).await;
    let listing = id(&listing["id"]);
    let found = ok(buyer, "find_listings", json!({ "q": "walnut", "status": "ACTIVE" })).await;
    assert!(found["data"].as_array().unwrap().iter().any(|l| l["id"] == listing.as_str()), "{found}");

    let placed =
        ok(buyer, "place_bid", json!({ "listing_id": listing, "amount": 120000, "message": "Still available?" })).await;
    let thread = id(&placed["thread"]["id"]);
    assert_eq!(placed["thread"]["turn"], "seller");

    let waited = ok(seller, "wait_for_turn", json!({ "thread_id": thread, "timeout_seconds": 10 })).await;
    assert_eq!(waited["outcome"], "your_turn", "{waited}");
    let standing = &waited["standing"];
    assert_eq!((standing["you"].as_str(), standing["your_turn"].as_bool()), (Some("seller"), Some(true)));
    assert_eq!(standing["moves"], json!(["counter_bid", "accept_bid", "reject_bid"]));
    assert_eq!(standing["counter_range"], json!({ "min": 120001, "max": 138000 }));
    let pending = id(&standing["pending_bid"]["id"]);

    // The buyer waits without polling while the seller counters; the wait ends with its turn.
    let idle = app.waiters();
    let (waited, countered) =
        tokio::join!(call(buyer, "wait_for_turn", json!({ "thread_id": thread, "timeout_seconds": 30 })), async {
            // The counter comes once the buyer's wait is waiting on the instance.
            app.until_waiting(idle + 1).await;
            call(seller, "counter_bid", json!({ "bid_id": pending, "amount": 135000, "message": "1,350 is my floor" }))
                .await
        },);
    let countered = answer("counter_bid", countered);
    let waited = answer("wait_for_turn", waited);
    assert_eq!(waited["outcome"], "your_turn", "{waited}");
    assert_eq!(waited["standing"]["counter_range"], json!({ "min": 120000, "max": 134999 }));
    assert_eq!(waited["standing"]["pending_bid"]["id"], countered["bid"]["id"]);

    let answered = ok(buyer, "counter_bid", json!({ "bid_id": countered["bid"]["id"], "amount": 130000 })).await;
    assert_eq!((answered["bid"]["round"].as_i64(), answered["thread"]["turn"].as_str()), (Some(3), Some("seller")));
    let waited = ok(seller, "wait_for_turn", json!({ "thread_id": thread, "timeout_seconds": 10 })).await;
    assert_eq!(waited["outcome"], "your_turn");
    let accepted = ok(seller, "accept_bid", json!({ "bid_id": answered["bid"]["id"] })).await;
    assert_eq!(
        (accepted["order"]["amount"].as_i64(), accepted["order"]["status"].as_str()),
        (Some(130000), Some("CONFIRMED"))
    );

    let read = ok(buyer, "get_thread", json!({ "thread_id": thread })).await;
    assert_eq!((read["thread"]["status"].as_str(), read["thread"]["rounds"].as_i64()), (Some("ACCEPTED"), Some(3)));
    assert_eq!(read["standing"]["moves"], json!([]));
    let amounts: Vec<i64> =
        read["thread"]["bids"].as_array().unwrap().iter().map(|b| b["amount"].as_i64().unwrap()).collect();
    assert_eq!(amounts, [120000, 135000, 130000]);
    let waited = ok(buyer, "wait_for_turn", json!({ "thread_id": thread, "timeout_seconds": 5 })).await;
    assert_eq!(waited["outcome"], "ended");
    let orders = ok(buyer, "list_my_orders", json!({ "role": "buyer" })).await;
    assert_eq!(orders["data"][0]["id"], accepted["order"]["id"]);
    let threads = ok(seller, "list_my_threads", json!({ "role": "seller", "status": "ACCEPTED" })).await;
    assert_eq!(threads["data"][0]["id"], thread.as_str());
    assert_eq!(app.count(format!("SELECT count(*) FROM orders WHERE thread_id = '{thread}'")).await, 1);
    thread
}

#[tokio::test]
async fn the_tools_are_listed_with_valid_schemas_and_the_rules_they_enforce() {
    let app = TestApp::spawn().await;
    let agent = app.register("lister").await;
    let session = over_http(&app, &agent).await;
    let tools = session.list_all_tools().await.unwrap();
    let mut names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "accept_bid",
            "answer_approval",
            "answer_payment",
            "buy_now",
            "complete_order",
            "counter_bid",
            "create_listing",
            "delete_policy",
            "find_listings",
            "fulfil_order",
            "get_listing",
            "get_order",
            "get_policy",
            "get_thread",
            "list_my_approvals",
            "list_my_orders",
            "list_my_threads",
            "open_order_negotiation",
            "place_bid",
            "read_events",
            "record_payment",
            "reject_bid",
            "set_policy",
            "update_listing",
            "wait_for_turn",
            "whoami",
            "withdraw_bid",
            "withdraw_listing",
        ]
    );
    let moves = [
        "accept_bid",
        "answer_approval",
        "answer_payment",
        "buy_now",
        "complete_order",
        "counter_bid",
        "create_listing",
        "fulfil_order",
        "open_order_negotiation",
        "place_bid",
        "record_payment",
        "reject_bid",
        "withdraw_bid",
        "withdraw_listing",
    ];
    let writes = [&moves[..], &["update_listing", "set_policy", "delete_policy"]].concat();
    for tool in &tools {
        let schema = Value::Object((*tool.input_schema).clone());
        jsonschema::meta::validate(&schema).unwrap_or_else(|error| panic!("{}: invalid schema: {error}", tool.name));
        assert_eq!(schema["type"], "object", "{}", tool.name);
        let description = tool.description.as_deref().unwrap_or("");
        assert!(description.len() > 80, "{}: describe the rules it enforces", tool.name);
        let annotations = tool.annotations.as_ref().expect("annotations");
        let writes = writes.contains(&tool.name.as_ref());
        assert_eq!(annotations.read_only_hint, Some(!writes), "{}", tool.name);
        assert_eq!(
            schema["properties"].get("idempotency_key").is_some(),
            moves.contains(&tool.name.as_ref()),
            "{}: moves, and only moves, take an idempotency key",
            tool.name
        );
    }
    // The schemas are the API's request types: what they accept, the tools accept.
    let schema_of = |name: &str| {
        let tool = tools.iter().find(|tool| tool.name == name).unwrap();
        jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .build(&Value::Object((*tool.input_schema).clone()))
            .unwrap()
    };
    let place = schema_of("place_bid");
    let listing = "0190c6f0-0000-7000-8000-000000000000";
    assert!(
        place.is_valid(&json!({ "listing_id": listing, "amount": 120000, "expires_in": 3600, "terms": { "days": 5 } }))
    );
    assert!(!place.is_valid(&json!({ "listing_id": listing, "amount": "120000" })));
    assert!(!place.is_valid(&json!({ "listing_id": listing, "amount": 99 })));
    assert!(!place.is_valid(&json!({ "listing_id": listing })));
    assert!(!place.is_valid(&json!({ "listing_id": listing, "amount": 120000, "price": 1 })));
    let counter = schema_of("counter_bid");
    assert!(counter.is_valid(&json!({ "bid_id": listing, "amount": 120000, "final": true, "idempotency_key": "k-1" })));
    let policy = schema_of("set_policy");
    assert!(policy.is_valid(&json!({ "target": { "scope": "agent", "role": "seller" }, "policy": { "limit": 9000, "counter": { "strategy": "split" } } })));
    assert!(!policy.is_valid(
        &json!({ "target": { "scope": "agent" }, "policy": { "limit": 9000, "counter": { "strategy": "split" } } })
    ));

    let info = session.peer_info().expect("server info");
    assert!(info.capabilities.resources.as_ref().and_then(|r| r.subscribe).unwrap_or(false));
    let prompts = session.list_all_prompts().await.unwrap();
    assert_eq!(prompts.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["negotiate_on_haggle"]);
    let prompt = session.get_prompt(GetPromptRequestParams::new("negotiate_on_haggle")).await.unwrap();
    let text = serde_json::to_string(&prompt.messages).unwrap();
    for rule in ["turn", "concession", "final", "expire", "idempotency_key"] {
        assert!(text.to_lowercase().contains(rule), "the prompt explains {rule}: {text}");
    }
    let templates = session.list_all_resource_templates().await.unwrap();
    assert_eq!(templates[0].uri_template, "haggle://threads/{thread_id}");
    session.cancel().await.unwrap();
}

#[tokio::test]
async fn two_agents_negotiate_over_http_sessions() {
    let app = TestApp::spawn().await;
    let seller = app.register("mcp-seller").await;
    let buyer = app.buyer("mcp-buyer").await;
    let (seller, buyer) = (over_http(&app, &seller).await, over_http(&app, &buyer).await);
    negotiate(&app, &seller, &buyer).await;
}

#[tokio::test]
async fn an_order_is_carried_through_by_tools() {
    let app = TestApp::spawn().await;
    let seller = app.register("tool-seller").await;
    let buyer = app.buyer("tool-buyer").await;
    let (seller, buyer) = (over_http(&app, &seller).await, over_http(&app, &buyer).await);
    let thread = negotiate(&app, &seller, &buyer).await;
    let order: String = sqlx::query_scalar("SELECT id::text FROM orders WHERE thread_id = $1::uuid")
        .bind(&thread)
        .fetch_one(&app.pool)
        .await
        .unwrap();

    let before = state(&app).await;
    let over = json!({ "order_id": order, "amount": 130001, "reference": "wire 1" });
    let document = refused(&buyer, "record_payment", over, "exceeds_outstanding").await;
    assert_eq!(document["outstanding"], 130000);
    refused(&buyer, "fulfil_order", json!({ "order_id": order }), "forbidden").await;
    refused(&seller, "complete_order", json!({ "order_id": order }), "forbidden").await;
    refused(&buyer, "complete_order", json!({ "order_id": order }), "invalid_transition").await;
    assert_eq!(state(&app).await, before, "a refused tool call changed something");

    let paid =
        ok(&buyer, "record_payment", json!({ "order_id": order, "amount": 130000, "reference": "wire 1" })).await;
    let payment = id(&paid["payment"]["id"]);
    refused(&buyer, "answer_payment", json!({ "order_id": order, "payment_id": payment }), "forbidden").await;
    let confirmed = ok(&seller, "answer_payment", json!({ "order_id": order, "payment_id": payment })).await;
    assert_eq!(
        (confirmed["payment"]["status"].as_str(), confirmed["order"]["outstanding"].as_i64()),
        (Some("CONFIRMED"), Some(0))
    );
    let fulfilled = ok(&seller, "fulfil_order", json!({ "order_id": order, "reference": "TRACK-9" })).await;
    assert_eq!(fulfilled["fulfilment"]["reference"], "TRACK-9");
    let refund =
        |amount: i64| json!({ "order_id": order, "kind": "refund", "amount": amount, "terms": { "reason": "late" } });
    let document = refused(&buyer, "open_order_negotiation", refund(130001), "exceeds_refundable").await;
    assert_eq!(document["refundable"], 130000);
    let opened = ok(&buyer, "open_order_negotiation", refund(5000)).await;
    assert_eq!((opened["thread"]["kind"].as_str(), opened["bid"]["amount"].as_i64()), (Some("refund"), Some(5000)));
    refused(&buyer, "complete_order", json!({ "order_id": order }), "negotiation_open").await;
    // The seller's standing on a refund: from nothing back up to below the buyer's ask.
    let read = ok(&seller, "get_thread", json!({ "thread_id": id(&opened["thread"]["id"]) })).await;
    assert_eq!(read["standing"]["counter_range"], json!({ "min": 0, "max": 4999 }));
    ok(&seller, "reject_bid", json!({ "bid_id": id(&opened["bid"]["id"]) })).await;
    let completed = ok(&buyer, "complete_order", json!({ "order_id": order })).await;
    assert_eq!(completed["status"], "COMPLETED");
    let read = ok(&seller, "get_order", json!({ "order_id": order })).await;
    assert_eq!((read["status"].as_str(), read["payments"].as_array().map(Vec::len)), (Some("COMPLETED"), Some(1)));
}

#[tokio::test]
async fn two_agents_negotiate_over_the_stateless_protocol() {
    let app = TestApp::spawn().await;
    let seller = app.register("modern-seller").await;
    let buyer = app.buyer("modern-buyer").await;
    let (seller, buyer) = (over_http_stateless(&app, &seller).await, over_http_stateless(&app, &buyer).await);
    assert_eq!(seller.peer_info().unwrap().protocol_version, ProtocolVersion::V_2026_07_28);
    negotiate(&app, &seller, &buyer).await;
}

#[tokio::test]
async fn two_agents_negotiate_over_stdio() {
    let app = TestApp::spawn().await;
    let seller = app.register("stdio-seller").await;
    let buyer = app.buyer("stdio-buyer").await;
    let (seller, buyer) = (over_stdio(&app, &seller).await, over_stdio(&app, &buyer).await);
    let whoami = ok(&buyer, "whoami", json!({})).await;
    assert_eq!((whoami["name"].as_str(), whoami["tier"].as_str()), (Some("stdio-buyer"), Some("AGENCY")));
    negotiate(&app, &seller, &buyer).await;
    seller.cancel().await.unwrap();
    buyer.cancel().await.unwrap();
}

#[tokio::test]
async fn haggle_mcp_refuses_to_start_without_a_key_or_with_a_wrong_one() {
    let app = TestApp::spawn().await;
    for (key, says) in [("", "HAGGLE_API_KEY"), ("hk_not-a-real-key", "unauthenticated")] {
        let output = tokio::process::Command::new(haggle_bin())
            .arg("mcp")
            .env("HAGGLE_URL", &app.base)
            .env("HAGGLE_API_KEY", key)
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success() && stderr.contains(says), "{stderr}");
        assert!(output.stdout.is_empty(), "nothing but the protocol goes to standard output");
    }
}

#[tokio::test]
async fn every_refusal_of_the_state_machine_is_a_structured_tool_error() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "max_rounds": 3, "max_threads_per_buyer": 2 })).await;
    let seller = over_http(&app, &deal.seller).await;
    let buyer = over_http(&app, &deal.buyer).await;
    let listing = deal.listing.clone();

    let placed = ok(&buyer, "place_bid", json!({ "listing_id": listing, "amount": 80000 })).await;
    let opening = id(&placed["bid"]["id"]);
    let thread = id(&placed["thread"]["id"]);
    let other = app.listing(&deal.seller, json!({ "title": "Lamp", "ask_amount": 5000 })).await;
    let public = app.register("public-buyer").await;
    let public = over_http(&app, &public).await;
    let before = state(&app).await;

    // The buyer's own bid waits for the seller.
    for tool in ["accept_bid", "reject_bid"] {
        let refusal = refused(&buyer, tool, json!({ "bid_id": opening }), "not_your_turn").await;
        assert_eq!(refusal["turn"], "seller", "{refusal}");
    }
    refused(&buyer, "counter_bid", json!({ "bid_id": opening, "amount": 85000 }), "not_your_turn").await;
    // Only the author withdraws.
    refused(&seller, "withdraw_bid", json!({ "bid_id": opening }), "forbidden").await;
    // A counter that does not concede, with the allowed range.
    let refusal =
        refused(&seller, "counter_bid", json!({ "bid_id": opening, "amount": 120000 }), "not_a_concession").await;
    assert_eq!((refusal["min_amount"].as_i64(), refusal["max_amount"].as_i64()), (Some(80001), Some(100000)));
    assert!(refusal["hint"].as_str().unwrap().contains("80001 to 100000"), "{refusal}");
    // One live negotiation per buyer and listing, naming it.
    let refusal =
        refused(&buyer, "place_bid", json!({ "listing_id": listing, "amount": 81000 }), "thread_active").await;
    assert_eq!(refusal["thread_id"], thread.as_str());
    // A seller cannot bid on its own listing; a bid above the ask fails validation, naming the field.
    refused(&seller, "place_bid", json!({ "listing_id": listing, "amount": 81000 }), "own_listing").await;
    let refusal =
        refused(&buyer, "place_bid", json!({ "listing_id": other, "amount": 6000 }), "validation_failed").await;
    assert_eq!(refusal["errors"][0]["field"], "amount");
    // A tier too low to negotiate is pointed to the purchase at the ask.
    let refusal =
        refused(&public, "place_bid", json!({ "listing_id": listing, "amount": 81000 }), "negotiation_not_allowed")
            .await;
    assert_eq!(refusal["ask_amount"], 100000);
    assert!(refusal["hint"].as_str().unwrap().contains("buy_now"));
    assert_eq!(state(&app).await, before, "no refusal changed anything");

    // A final offer can only be accepted or rejected; the bid at max_rounds (3) is final.
    let countered = ok(&seller, "counter_bid", json!({ "bid_id": opening, "amount": 95000 })).await;
    let last = ok(&buyer, "counter_bid", json!({ "bid_id": countered["bid"]["id"], "amount": 90000 })).await;
    assert_eq!(last["bid"]["final"], true, "round 3 of 3 is final");
    let before = state(&app).await;
    let refusal =
        refused(&seller, "counter_bid", json!({ "bid_id": last["bid"]["id"], "amount": 92000 }), "final_offer").await;
    assert_eq!(refusal["current_status"], "PENDING");
    // A bid already answered is stale, with its current status.
    let refusal = refused(
        &buyer,
        "counter_bid",
        json!({ "bid_id": countered["bid"]["id"], "amount": 91000 }),
        "invalid_transition",
    )
    .await;
    assert_eq!(refusal["current_status"], "COUNTERED");
    assert_eq!(state(&app).await, before, "no refusal changed anything");
    ok(&seller, "reject_bid", json!({ "bid_id": last["bid"]["id"] })).await;
    refused(&seller, "accept_bid", json!({ "bid_id": last["bid"]["id"] }), "invalid_transition").await;

    // The listing allows two negotiations per buyer: the third is refused with the limit.
    let second = ok(&buyer, "place_bid", json!({ "listing_id": listing, "amount": 80000 })).await;
    // An expired bid: moving it is refused (and records the expiry).
    sqlx::query("UPDATE bids SET expires_at = now() - interval '1 second' WHERE id = $1::uuid")
        .bind(id(&second["bid"]["id"]))
        .execute(&app.pool)
        .await
        .unwrap();
    sqlx::query("UPDATE threads SET expires_at = now() - interval '1 second' WHERE id = $1::uuid")
        .bind(id(&second["thread"]["id"]))
        .execute(&app.pool)
        .await
        .unwrap();
    let refusal = refused(&seller, "accept_bid", json!({ "bid_id": second["bid"]["id"] }), "bid_expired").await;
    assert_eq!(refusal["current_status"], "EXPIRED");
    let refusal =
        refused(&buyer, "place_bid", json!({ "listing_id": listing, "amount": 80000 }), "offer_limit_reached").await;
    assert_eq!(refusal["limit"], 2);

    // A listing no longer ACTIVE takes no bids or purchases.
    ok(&seller, "withdraw_listing", json!({ "listing_id": other })).await;
    let refusal = refused(&buyer, "buy_now", json!({ "listing_id": other }), "listing_unavailable").await;
    assert_eq!(refusal["current_status"], "WITHDRAWN");
    // A key used for another call.
    ok(
        &buyer,
        "buy_now",
        json!({ "listing_id": app.listing(&deal.seller, json!({})).await, "idempotency_key": "buy-1" }),
    )
    .await;
    let third = app.listing(&deal.seller, json!({})).await;
    refused(&buyer, "buy_now", json!({ "listing_id": third, "idempotency_key": "buy-1" }), "idempotency_key_reused")
        .await;
}

#[tokio::test]
async fn bad_input_is_the_protocols_error_and_changes_nothing() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let buyer = over_http(&app, &deal.buyer).await;
    let seller = over_http(&app, &deal.seller).await;
    let placed = ok(&buyer, "place_bid", json!({ "listing_id": deal.listing, "amount": 80000 })).await;
    let (bid, thread) = (id(&placed["bid"]["id"]), id(&placed["thread"]["id"]));
    let stranger = app.buyer("stranger").await;
    let stranger = over_http(&app, &stranger).await;
    let before = state(&app).await;

    // A call of no tool is the protocol's error.
    let error = protocol_error(call(&buyer, "haggle_harder", json!({})).await);
    assert_eq!(error.code, ErrorCode::INVALID_PARAMS, "{error:?}");
    // Arguments of the wrong type, missing or unknown are input errors the model can correct:
    // tool errors, as the protocol has them reported, with the refusals' structure.
    for (tool, arguments) in [
        ("counter_bid", json!({ "bid_id": bid, "amount": "lots" })),
        ("counter_bid", json!({ "bid_id": 42, "amount": 90000 })),
        ("counter_bid", json!({ "bid_id": bid, "amount": 90000, "price": 90000 })),
        ("accept_bid", json!({ "bid_id": bid, "sure": true })),
        ("wait_for_turn", json!({ "thread_id": thread, "timeout_seconds": 600 })),
        ("set_policy", json!({ "target": { "scope": "galaxy" }, "policy": {} })),
        ("place_bid", json!({ "listing_id": deal.listing, "amount": 80000, "idempotency_key": "" })),
    ] {
        let refusal = refused(&seller, tool, arguments.clone(), "malformed_request").await;
        assert_eq!(refusal["status"], 400, "{tool} {arguments}: {refusal}");
    }
    // A counter's amount is optional to the tool (a schedule's counter names windows instead), so
    // one left out on a price is the API's refusal naming the field.
    let missing = refused(&seller, "counter_bid", json!({ "bid_id": bid }), "validation_failed").await;
    assert_eq!((missing["status"].as_i64(), missing["errors"][0]["field"].as_str()), (Some(422), Some("amount")));
    // Another agent's negotiation does not exist for the stranger.
    refused(&stranger, "get_thread", json!({ "thread_id": thread }), "not_found").await;
    refused(&stranger, "accept_bid", json!({ "bid_id": bid }), "not_found").await;
    refused(&stranger, "withdraw_bid", json!({ "bid_id": bid }), "not_found").await;
    refused(&stranger, "counter_bid", json!({ "bid_id": bid, "amount": 90000 }), "not_found").await;
    refused(&stranger, "wait_for_turn", json!({ "thread_id": thread, "timeout_seconds": 1 }), "not_found").await;
    let read = stranger.read_resource(ReadResourceRequestParams::new(format!("haggle://threads/{thread}"))).await;
    match read {
        Err(ServiceError::McpError(error)) => assert_eq!(error.code, ErrorCode::RESOURCE_NOT_FOUND),
        other => panic!("expected resource not found, got {other:?}"),
    }
    assert_eq!(state(&app).await, before, "bad input changed nothing");

    // Without a valid API key, /mcp answers the API's 401 problem and no MCP at all.
    let initialize = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "curl", "version": "1" } } });
    for authorization in [None, Some("Bearer hk_not-a-real-key"), Some("Basic Zm9vOmJhcg==")] {
        let mut request = app
            .client
            .post(format!("{}/mcp", app.base))
            .header("accept", "application/json, text/event-stream")
            .json(&initialize);
        if let Some(authorization) = authorization {
            request = request.header("authorization", authorization);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 401);
        assert_eq!(response.headers()["www-authenticate"], "Bearer");
        assert_eq!(response.headers()["content-type"], "application/problem+json");
        let problem: Value = response.json().await.unwrap();
        assert_eq!(problem["code"], "unauthenticated");
    }
    assert_eq!(state(&app).await, before, "bad input changed nothing");
}

/// An MCP session over raw HTTP, to see the headers.
async fn initialize_raw(app: &TestApp, key: &str) -> String {
    let response = app
        .client
        .post(format!("{}/mcp", app.base))
        .header("x-api-key", key)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "raw", "version": "1" } } }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "X-API-Key authenticates too");
    response.headers()["mcp-session-id"].to_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_session_belongs_to_the_agent_that_opened_it() {
    let app = TestApp::spawn().await;
    let owner = app.register("owner").await;
    let other = app.register("other").await;
    let session = initialize_raw(&app, &owner.key).await;
    let list = json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/list" });
    let post = |key: &str| {
        app.client
            .post(format!("{}/mcp", app.base))
            .bearer_auth(key)
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", "2025-06-18")
            .header("accept", "application/json, text/event-stream")
            .json(&list)
            .send()
    };
    let response = post(&other.key).await.unwrap();
    assert_eq!(response.status(), 404, "another agent cannot use the session");
    let response = app
        .client
        .delete(format!("{}/mcp", app.base))
        .bearer_auth(&other.key)
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404, "nor close it");
    let response = app
        .client
        .get(format!("{}/mcp", app.base))
        .bearer_auth(&other.key)
        .header("mcp-session-id", &session)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404, "nor follow it");
    let response = post(&owner.key).await.unwrap();
    assert_eq!(response.status(), 200, "its owner can");
}

#[tokio::test]
async fn a_retried_move_with_its_idempotency_key_is_made_once() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let buyer = over_http(&app, &deal.buyer).await;
    let arguments = json!({ "listing_id": deal.listing, "amount": 80000, "idempotency_key": "first-bid-0001" });
    let first = ok(&buyer, "place_bid", arguments.clone()).await;
    let again = ok(&buyer, "place_bid", arguments).await;
    assert_eq!(first, again, "the retry answers as the first call did");
    assert_eq!(app.count("SELECT count(*) FROM bids").await, 1);
    // Without a key each call is a move of its own: the second is refused, as REST refuses it.
    refused(&buyer, "place_bid", json!({ "listing_id": deal.listing, "amount": 80000 }), "thread_active").await;
}

#[tokio::test]
async fn a_policys_limits_are_read_by_its_owner_only() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let seller = over_http(&app, &deal.seller).await;
    let buyer = over_http(&app, &deal.buyer).await;
    let target = json!({ "scope": "listing", "listing_id": deal.listing });
    let set = ok(&seller, "set_policy", json!({ "target": target, "policy": { "limit": 81234, "counter": { "strategy": "split" }, "max_auto_rounds": 1 } })).await;
    assert_eq!((set["scope"].as_str(), set["role"].as_str()), (Some("listing"), Some("seller")));
    assert_eq!(ok(&seller, "get_policy", json!({ "target": target })).await["policy"]["limit"], 81234);

    // The buyer reads only its own (buyer) policy at the listing: there is none.
    refused(&buyer, "get_policy", json!({ "target": target }), "not_found").await;
    // The seller's policy answers the buyer's bid; nothing the buyer reads shows its floor.
    let placed = ok(&buyer, "place_bid", json!({ "listing_id": deal.listing, "amount": 70000 })).await;
    let thread = id(&placed["thread"]["id"]);
    let waited = ok(&buyer, "wait_for_turn", json!({ "thread_id": thread, "timeout_seconds": 20 })).await;
    assert_eq!(waited["outcome"], "your_turn", "the policy countered: {waited}");
    let mut seen = String::new();
    seen.push_str(&waited.to_string());
    seen.push_str(&ok(&buyer, "get_thread", json!({ "thread_id": thread })).await.to_string());
    seen.push_str(&ok(&buyer, "read_events", json!({ "after": 0 })).await.to_string());
    let read = buyer.read_resource(ReadResourceRequestParams::new(format!("haggle://threads/{thread}"))).await.unwrap();
    seen.push_str(&serde_json::to_string(&read.contents).unwrap());
    seen.push_str(&ok(&buyer, "get_listing", json!({ "listing_id": deal.listing })).await.to_string());
    assert_eq!(waited["standing"]["pending_bid"]["amount"], 85000, "the policy split the difference");
    assert!(!seen.contains("81234") && !seen.contains("\"limit\""), "the floor leaked: {seen}");
    ok(&seller, "delete_policy", json!({ "target": target })).await;
    refused(&seller, "get_policy", json!({ "target": target }), "not_found").await;
}

#[tokio::test]
async fn two_mcp_agents_and_one_rest_agent_racing_have_exactly_one_winner() {
    let app = TestApp::spawn().await;
    let seller = app.register("seller").await;
    let buyers = [app.buyer("mcp-one").await, app.buyer("mcp-two").await, app.buyer("rest").await];
    let sessions = [over_http(&app, &buyers[0]).await, over_http_stateless(&app, &buyers[1]).await];
    for round in 0..5 {
        let listing = app.listing(&seller, json!({ "title": format!("Last one {round}") })).await;
        let (mcp, rest) = tokio::join!(
            join_all(sessions.iter().map(|session| call(session, "buy_now", json!({ "listing_id": listing })))),
            app.post_empty(format!("/v1/listings/{listing}/purchase"), &buyers[2].key),
        );
        let mut wins = usize::from(rest.status == 201);
        if rest.status != 201 {
            assert_eq!((rest.status, rest.code()), (409, "listing_unavailable"), "{}", rest.body);
        }
        for result in mcp {
            let result = result.unwrap();
            let document = result.structured_content.unwrap();
            if result.is_error == Some(true) {
                assert_eq!(document["code"], "listing_unavailable", "{document}");
            } else {
                wins += 1;
            }
        }
        assert_eq!(wins, 1, "round {round}");
        assert_eq!(app.count(format!("SELECT count(*) FROM orders WHERE listing_id = '{listing}'")).await, 1);
    }

    // Three moves on one bid at once: the seller accepts over MCP and counters over REST, the
    // buyer withdraws over MCP. One is made.
    let seller_session = over_http(&app, &seller).await;
    let listing = app.listing(&seller, json!({ "quantity": 10, "max_threads_per_buyer": 10 })).await;
    let mut accepted = 0;
    for _ in 0..5 {
        let bid = app.place(&buyers[0], &listing, 90000).await;
        let (accept, withdraw, counter) = tokio::join!(
            call(&seller_session, "accept_bid", json!({ "bid_id": bid })),
            call(&sessions[0], "withdraw_bid", json!({ "bid_id": bid })),
            app.post(format!("/v1/bids/{bid}/counter"), &seller.key, json!({ "amount": 95000 })),
        );
        let made =
            [accept.unwrap().is_error != Some(true), withdraw.unwrap().is_error != Some(true), counter.status == 201];
        assert_eq!(made.iter().filter(|made| **made).count(), 1, "{made:?}");
        accepted += usize::from(made[0]);
        if made[2] {
            // The counter left a pending bid: end it so that the buyer may bid again.
            let pending = counter.body["bid"]["id"].as_str().unwrap().to_owned();
            app.post_empty(format!("/v1/bids/{pending}/reject"), &buyers[0].key).await.expect(200);
        }
    }
    let orders = app.count(format!("SELECT count(*) FROM orders WHERE listing_id = '{listing}'")).await;
    assert_eq!(orders, accepted as i64, "an order for each acceptance, and none for the other moves");
}

#[tokio::test]
async fn threads_are_resources_and_subscribers_hear_of_their_changes() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let seller = over_http(&app, &deal.seller).await;
    let buyer = over_http(&app, &deal.buyer).await;
    let modern = over_http_stateless(&app, &deal.buyer).await;
    let placed = ok(&buyer, "place_bid", json!({ "listing_id": deal.listing, "amount": 80000 })).await;
    let thread = id(&placed["thread"]["id"]);
    let uri = format!("haggle://threads/{thread}");

    let listed = buyer.list_all_resources().await.unwrap();
    assert_eq!(listed.iter().map(|r| r.uri.as_str()).collect::<Vec<_>>(), [uri.as_str()]);
    let read = buyer.read_resource(ReadResourceRequestParams::new(uri.clone())).await.unwrap();
    let ResourceContents::TextResourceContents { text, .. } = &read.contents[0] else { panic!("text contents") };
    let read: Value = serde_json::from_str(text).unwrap();
    assert_eq!(
        (read["thread"]["id"].as_str(), read["standing"]["turn"].as_str()),
        (Some(thread.as_str()), Some("seller"))
    );

    // Before 2026-07-28: resources/subscribe, and notifications on the session.
    #[allow(deprecated)]
    buyer.subscribe(SubscribeRequestParams::new(uri.clone())).await.unwrap();
    // On 2026-07-28: subscriptions/listen.
    let mut listening =
        modern.listen(SubscriptionFilter::builder().resource_subscription(uri.clone()).build()).await.unwrap();
    assert_eq!(listening.acknowledged().resource_subscriptions.as_deref(), Some(&[uri.clone()][..]));
    tokio::time::sleep(Duration::from_millis(300)).await;

    ok(&seller, "counter_bid", json!({ "bid_id": placed["bid"]["id"], "amount": 95000 })).await;
    buyer.service().updated(&uri).await;
    let heard = tokio::time::timeout(Duration::from_secs(20), listening.next()).await.expect("a notification in time");
    match heard.unwrap() {
        Some(ServerNotification::ResourceUpdatedNotification(updated)) => assert_eq!(updated.params.uri, uri),
        other => panic!("expected resources/updated, got {other:?}"),
    }
    listening.cancel().await.unwrap();
    // Subscribing to a thread that is not one's own is the protocol's resource-not-found.
    let stranger = app.buyer("stranger").await;
    let stranger = over_http(&app, &stranger).await;
    #[allow(deprecated)]
    let refused = stranger.subscribe(SubscribeRequestParams::new(uri.clone())).await;
    assert!(
        matches!(refused, Err(ServiceError::McpError(ref error)) if error.code == ErrorCode::RESOURCE_NOT_FOUND),
        "{refused:?}"
    );
}

#[tokio::test]
async fn a_wait_longer_than_the_request_time_limit_is_not_cut_short() {
    let app = TestApp::spawn_with(|config| config.settings.request_timeout = Duration::from_secs(1)).await;
    let deal = Deal::new(&app, json!({})).await;
    let buyer = over_http_stateless(&app, &deal.buyer).await;
    let placed = ok(&buyer, "place_bid", json!({ "listing_id": deal.listing, "amount": 80000 })).await;
    let started = std::time::Instant::now();
    let waited =
        ok(&buyer, "wait_for_turn", json!({ "thread_id": placed["thread"]["id"], "timeout_seconds": 2.5 })).await;
    assert_eq!(waited["outcome"], "timed_out");
    assert!(started.elapsed() >= Duration::from_millis(2400), "it waited the time asked");
}

#[tokio::test]
async fn the_apis_rate_and_body_limits_hold_through_mcp() {
    let app = TestApp::spawn_with(|config| {
        config.settings.rate_limit = 5;
        config.settings.body_limit = 4096;
    })
    .await;
    let agent = app.register("hasty").await;
    let session = over_http(&app, &agent).await;
    // Each tool call is a REST call of the agent's: past its rate, the refusal says so.
    let calls = join_all((0..20).map(|_| call(&session, "whoami", json!({})))).await;
    let limited = calls
        .into_iter()
        .map(|result| result.unwrap())
        .filter(|result| result.is_error == Some(true))
        .map(|result| result.structured_content.unwrap())
        .inspect(|document| assert_eq!(document["code"], "rate_limited", "{document}"))
        .count();
    assert!(limited > 0, "20 calls at once exceed a rate of 5 a second");

    // A message over the body limit is refused before any MCP is read.
    let response = app
        .client
        .post(format!("{}/mcp", app.base))
        .bearer_auth(&agent.key)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(format!(r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#, "x".repeat(8192)))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    let problem: Value = response.json().await.unwrap();
    assert_eq!(problem["code"], "payload_too_large");
}

#[tokio::test]
async fn an_agents_rest_calls_and_tool_calls_draw_on_one_rate_limit() {
    let app = TestApp::spawn_with(|config| config.settings.rate_limit = 1).await;
    let agent = app.register("thrifty").await;
    let session = over_http(&app, &agent).await;
    // One request a second, in bursts of one: a REST call takes it, and the tool call after it
    // is refused as a REST call would be.
    app.get("/v1/agents/me", &agent.key).await.expect(200);
    let document = refused(&session, "whoami", json!({}), "rate_limited").await;
    assert_eq!(document["status"], 429, "{document}");
    // The other way round, once the bucket has filled again: the tool call takes the token.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    ok(&session, "whoami", json!({})).await;
    app.get("/v1/agents/me", &agent.key).await.expect_problem(429, "rate_limited");
}

#[tokio::test]
async fn a_tools_api_request_is_held_to_the_apis_body_limit() {
    let app = TestApp::spawn_with(|config| config.settings.body_limit = 4096).await;
    let agent = app.register("verbose").await;
    let session = over_http(&app, &agent).await;
    // A learned strategy's table, all zeros: each `0` of the message is `0.0` in the body the
    // tool sends, which is over the limit where the message is not.
    let zeros = vec![0; 1200];
    let target = json!({ "scope": "agent", "role": "seller" });
    let policy = json!({ "limit": 9000, "counter": { "strategy": "learned", "levels": 1, "steps": 1, "q": [zeros] } });
    let message = json!({ "jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": { "name": "set_policy", "arguments": { "target": target, "policy": policy } } });
    assert!(message.to_string().len() < 3500, "the message itself is well within the limit");
    let document =
        refused(&session, "set_policy", json!({ "target": target, "policy": policy }), "payload_too_large").await;
    assert_eq!(document["status"], 413, "{document}");
    // The same body over REST is refused the same way.
    let sent =
        json!({ "limit": 9000, "counter": { "strategy": "learned", "levels": 1, "steps": 1, "q": [vec![0.0; 1200]] } });
    assert!(sent.to_string().len() > 4096);
    app.put("/v1/agents/me/policies/seller", &agent.key, sent).await.expect_problem(413, "payload_too_large");
    assert_eq!(app.count("SELECT count(*) FROM policies").await, 0);
}

/// A message of the protocol on `session` (none for `initialize`), as `key`, over the test's
/// client: the whole answer read, so that its connection is kept for the next.
async fn exchange(app: &TestApp, key: &str, session: Option<&str>, message: &Value) -> reqwest::Response {
    let mut request = app
        .client
        .post(format!("{}/mcp", app.base))
        .bearer_auth(key)
        .header("mcp-protocol-version", "2025-06-18")
        .header(ACCEPT_BOTH.0, ACCEPT_BOTH.1)
        .json(message);
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    request.send().await.unwrap()
}

/// The JSON-RPC message of an answer, as JSON or as the data of a Server-Sent Event.
fn message_of(body: &str) -> Value {
    let data = body.lines().filter_map(|line| line.strip_prefix("data:")).map(str::trim).find(|data| !data.is_empty());
    serde_json::from_str(data.unwrap_or(body)).unwrap_or_else(|_| panic!("not a message: {body}"))
}

#[tokio::test]
async fn a_tool_call_opens_no_connection_of_its_own() {
    // One connection at a time: the test's own. A tool that called the API over a socket would
    // be refused one.
    let app = TestApp::spawn_with(|config| config.connections.max_connections = 1).await;
    let agent = app.register("frugal").await;
    let initialize = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "raw", "version": "1" } } });
    let response = exchange(&app, &agent.key, None, &initialize).await;
    assert_eq!(response.status(), 200);
    let session = response.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    response.text().await.unwrap();
    let initialized = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
    let response = exchange(&app, &agent.key, Some(&session), &initialized).await;
    assert!(response.status().is_success(), "{}", response.status());
    response.text().await.unwrap();
    let whoami =
        json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": { "name": "whoami", "arguments": {} } });
    let response = exchange(&app, &agent.key, Some(&session), &whoami).await;
    assert_eq!(response.status(), 200);
    let result = message_of(&response.text().await.unwrap())["result"].clone();
    assert_ne!(result["isError"], true, "{result}");
    assert_eq!(result["structuredContent"]["id"], agent.id.as_str(), "{result}");
}

const ACCEPT_BOTH: (&str, &str) = ("accept", "application/json, text/event-stream");

fn tools_list() -> Value {
    json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/list" })
}

/// A message of the protocol, as a raw request on `session` (if any) as `key`.
fn post_raw(app: &TestApp, key: &str, session: &str, message: &Value) -> reqwest::RequestBuilder {
    app.client
        .post(format!("{}/mcp", app.base))
        .bearer_auth(key)
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", "2025-06-18")
        .header(ACCEPT_BOTH.0, ACCEPT_BOTH.1)
        .json(message)
}

/// The status `key` gets for each way of using `session`: a message, its stream, its end.
async fn uses(app: &TestApp, key: &str, session: &str) -> [u16; 3] {
    let list = tools_list();
    let post = post_raw(app, key, session, &list).send().await.unwrap().status().as_u16();
    let url = format!("{}/mcp", app.base);
    let get =
        app.client.get(&url).bearer_auth(key).header("mcp-session-id", session).header("accept", "text/event-stream");
    let get = get.timeout(Duration::from_secs(2)).send().await.unwrap().status().as_u16();
    let delete = app.client.delete(&url).bearer_auth(key).header("mcp-session-id", session).send().await;
    [post, get, delete.unwrap().status().as_u16()]
}

/// Opens `count` sessions as `key`, a few at a time, oldest first.
async fn initialize_many(app: &TestApp, key: &str, count: usize) -> Vec<String> {
    let mut sessions = Vec::with_capacity(count);
    for chunk in (0..count).collect::<Vec<_>>().chunks(8) {
        sessions.extend(join_all(chunk.iter().map(|_| initialize_raw(app, key))).await);
    }
    sessions
}

#[tokio::test]
async fn a_session_is_its_agents_for_its_whole_life_and_no_longer() {
    let app = TestApp::spawn().await;
    let owner = app.register("owner").await;
    let other = app.register("other").await;
    let session = initialize_raw(&app, &owner.key).await;
    let list = tools_list();
    // Another agent opens more sessions than the instance used to keep owners for, while the
    // owner's is quiet: the owner's is still the owner's alone.
    let others = initialize_many(&app, &other.key, 1030).await;
    assert_eq!(uses(&app, &other.key, &session).await, [404, 404, 404], "nobody else can use, follow or end it");
    assert_eq!(post_raw(&app, &owner.key, &session, &list).send().await.unwrap().status(), 200, "its owner can");

    // The other agent holds its newest sessions only, up to the cap.
    let cap = haggle_mcp::http::MAX_SESSIONS_PER_AGENT;
    let (closed, open) = others.split_at(others.len() - cap);
    for session in &closed[closed.len() - 3..] {
        let status = post_raw(&app, &other.key, session, &list).send().await.unwrap().status();
        assert_eq!(status, 404, "a session past the cap is closed");
    }
    assert_eq!(post_raw(&app, &other.key, &closed[0], &list).send().await.unwrap().status(), 404);
    for session in open {
        assert_eq!(post_raw(&app, &other.key, session, &list).send().await.unwrap().status(), 200);
    }

    // Closed by its owner (204, as clients expect), the session is gone for everyone.
    let response =
        app.client.delete(format!("{}/mcp", app.base)).bearer_auth(&owner.key).header("mcp-session-id", &session);
    let response = response.send().await.unwrap();
    assert_eq!(response.status(), 204);
    assert!(response.headers().get("content-type").is_none());
    for key in [&owner.key, &other.key] {
        assert_eq!(uses(&app, key, &session).await, [404, 404, 404], "a closed session is never revived");
    }
}

#[tokio::test]
async fn past_the_cap_an_agents_oldest_session_is_closed_and_its_stream_ends() {
    let app = TestApp::spawn().await;
    let agent = app.register("many").await;
    let oldest = initialize_raw(&app, &agent.key).await;
    let mut stream = app
        .client
        .get(format!("{}/mcp", app.base))
        .bearer_auth(&agent.key)
        .header("mcp-session-id", &oldest)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let newer = initialize_many(&app, &agent.key, haggle_mcp::http::MAX_SESSIONS_PER_AGENT).await;
    // The oldest session's client is told: its stream ends.
    tokio::time::timeout(Duration::from_secs(10), async { while let Ok(Some(_)) = stream.chunk().await {} })
        .await
        .expect("the closed session's stream ends");
    assert_eq!(uses(&app, &agent.key, &oldest).await, [404, 404, 404]);
    let list = tools_list();
    assert_eq!(post_raw(&app, &agent.key, &newer[0], &list).send().await.unwrap().status(), 200);
}

#[tokio::test]
async fn no_session_id_is_logged() {
    let db = TestDb::create().await;
    let server = crate::served::Server::spawn(&db, &[("RUST_LOG", "debug")]);
    let client = reqwest::Client::new();
    let url = format!("{}/mcp", server.process.base);
    let (_, key) = server.agent("quiet", None).await;
    let key = key.as_str();
    let initialize = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "raw", "version": "1" } } });
    let post = |session: Option<&str>, message: &Value| {
        let mut request = client.post(&url).bearer_auth(key).header(ACCEPT_BOTH.0, ACCEPT_BOTH.1).json(message);
        if let Some(session) = session {
            request = request.header("mcp-session-id", session).header("mcp-protocol-version", "2025-06-18");
        }
        request.send()
    };
    let response = post(None, &initialize).await.unwrap();
    assert_eq!(response.status(), 200);
    let session = response.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let _ = response.text().await;
    let initialized = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
    assert_eq!(post(Some(&session), &initialized).await.unwrap().status(), 202);
    let list = post(Some(&session), &tools_list()).await.unwrap();
    assert_eq!(list.status(), 200);
    let _ = list.text().await;
    let stream =
        client.get(&url).bearer_auth(key).header("mcp-session-id", &session).header("accept", "text/event-stream");
    assert_eq!(stream.send().await.unwrap().status(), 200);
    let closed = client.delete(&url).bearer_auth(key).header("mcp-session-id", &session).send().await.unwrap();
    assert_eq!(closed.status(), 204);
    let stranger = client
        .get(&url)
        .bearer_auth(key)
        .header("mcp-session-id", "not-a-session")
        .header("accept", "text/event-stream");
    assert_eq!(stranger.send().await.unwrap().status(), 404);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let log = server.process.log();
    assert!(log.contains("tools/list") || log.contains("/mcp"), "the requests were logged:\n{log}");
    assert!(!log.contains(&session), "a session id is in the log:\n{log}");
}

/// Every malformed message is refused with its status's problem document, never a 5xx.
#[tokio::test]
async fn malformed_mcp_requests_are_refused_with_their_problem() {
    let app = TestApp::spawn().await;
    let agent = app.register("clumsy").await;
    let key = Some(agent.key.as_str());
    let session = initialize_raw(&app, &agent.key).await;
    let ping = br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#.to_vec();
    let batch = [b"[".to_vec(), ping.clone(), b"]".to_vec()].concat();
    for (what, body) in [
        ("not JSON", b"{not json".to_vec()),
        ("empty", Vec::new()),
        ("a batch", batch),
        ("not a message", b"{}".to_vec()),
        ("a string", br#""ping""#.to_vec()),
        ("not UTF-8", b"\xff\xfe\xfd".to_vec()),
        ("a message of no method", br#"{"jsonrpc":"2.0","id":1}"#.to_vec()),
    ] {
        let refused = app.send(Method::POST, "/mcp", key, Body::Raw(body), &[ACCEPT_BOTH]).await;
        assert_eq!((refused.status, refused.code()), (400, "malformed_request"), "{what}: {}", refused.body);
    }
    for content_type in [None, Some("text/plain"), Some("application/x-www-form-urlencoded")] {
        let mut headers = vec![ACCEPT_BOTH];
        headers.extend(content_type.map(|content_type| ("content-type", content_type)));
        let refused = app.send(Method::POST, "/mcp", key, Body::None, &headers).await;
        refused.expect_problem(415, "unsupported_media_type");
    }
    // Messages the protocol does not take here: a request before initialize, an unknown version.
    let list = br#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#.to_vec();
    let refused = app.send(Method::POST, "/mcp", key, Body::Raw(list.clone()), &[ACCEPT_BOTH]).await;
    refused.expect_problem(400, "malformed_request");
    let version = ("mcp-protocol-version", "1999-01-01");
    let refused = app.send(Method::POST, "/mcp", key, Body::Raw(list.clone()), &[ACCEPT_BOTH, version]).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    // Sessions that are not the caller's, and requests that name none.
    for unknown in ["", "not-a-session", &"9".repeat(4000)] {
        let headers = [ACCEPT_BOTH, ("mcp-session-id", unknown)];
        let refused = app.send(Method::POST, "/mcp", key, Body::Raw(ping.clone()), &headers).await;
        refused.expect_problem(404, "not_found");
    }
    let stream = ("accept", "text/event-stream");
    app.send(Method::GET, "/mcp", key, Body::None, &[stream]).await.expect_problem(400, "malformed_request");
    app.send(Method::DELETE, "/mcp", key, Body::None, &[]).await.expect_problem(400, "malformed_request");
    let refused = app.send(Method::PUT, "/mcp", key, Body::Raw(ping.clone()), &[ACCEPT_BOTH]).await;
    assert_eq!((refused.status, refused.code()), (405, "method_not_allowed"));
    assert!(refused.header("allow").is_some_and(|allow| allow.contains("POST")));
    // The session still works.
    let headers = [ACCEPT_BOTH, ("mcp-session-id", session.as_str()), ("mcp-protocol-version", "2025-06-18")];
    app.send(Method::POST, "/mcp", key, Body::Raw(ping), &headers).await.expect(200);
}

/// An `initialize` as `key` with these headers besides `Accept`.
async fn initialize_with(app: &TestApp, key: &str, headers: &[(&str, &str)]) -> crate::support::Resp {
    let initialize = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "raw", "version": "1" } } });
    let headers = [&[ACCEPT_BOTH], headers].concat();
    app.send(Method::POST, "/mcp", Some(key), Body::Json(initialize), &headers).await
}

#[tokio::test]
async fn mcp_answers_only_its_hosts_and_no_web_page_but_those_allowed() {
    let app = TestApp::spawn().await;
    let key = app.register("local").await.key;
    let port = app.base.rsplit(':').next().unwrap().to_owned();
    // A client that is not a web page sends no Origin, on the names the server is reached by.
    initialize_with(&app, &key, &[]).await.expect(200);
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}"), "localhost".to_owned()] {
        initialize_with(&app, &key, &[("host", &host)]).await.expect(200);
    }
    // A page of another site, or a name the server does not serve (DNS rebinding), is refused.
    for origin in ["https://evil.example", "http://localhost:3000", "null"] {
        let refused = initialize_with(&app, &key, &[("origin", origin)]).await.expect_problem(403, "forbidden");
        assert!(refused.body["detail"].as_str().unwrap().contains("Origin"), "{}", refused.body);
    }
    for host in ["evil.example", "evil.example:8080", "10.1.2.3"] {
        let refused = initialize_with(&app, &key, &[("host", host)]).await.expect_problem(403, "forbidden");
        assert!(refused.body["detail"].as_str().unwrap().contains("Host"), "{}", refused.body);
    }

    let app = TestApp::spawn_with(|config| {
        config.settings.mcp = haggle_server::http::mcp::Access {
            hosts: vec!["mcp.example.com".to_owned()],
            origins: vec!["https://app.example.com".to_owned()],
        };
    })
    .await;
    let key = app.register("hosted").await.key;
    initialize_with(&app, &key, &[("origin", "https://app.example.com")]).await.expect(200);
    initialize_with(&app, &key, &[("host", "mcp.example.com")]).await.expect(200);
    initialize_with(&app, &key, &[("host", "mcp.example.com:443")]).await.expect(200);
    initialize_with(&app, &key, &[("origin", "https://evil.example")]).await.expect_problem(403, "forbidden");
    initialize_with(&app, &key, &[("host", "evil.example")]).await.expect_problem(403, "forbidden");
}

/// An agent's open `GET /mcp` stream, through a session of its own.
async fn open_stream(app: &TestApp, key: &str) -> reqwest::Response {
    let session = initialize_raw(app, key).await;
    let stream = app
        .client
        .get(format!("{}/mcp", app.base))
        .bearer_auth(key)
        .header("mcp-session-id", &session)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    stream
}

/// Whether the stream ends within `within` (its data read and dropped until then).
async fn ends_within(stream: &mut reqwest::Response, within: Duration) -> bool {
    tokio::time::timeout(within, async { while let Ok(Some(_)) = stream.chunk().await {} }).await.is_ok()
}

#[tokio::test]
async fn an_mcp_stream_ends_when_its_key_is_revoked_or_its_agent_suspended() {
    let app = TestApp::spawn_with(|config| config.settings.stream_recheck = Duration::from_millis(200)).await;
    // A key revoked: the stream opened with it ends; one opened with the agent's other key stays.
    let agent = app.register("streaming").await;
    let added = app.post_empty("/v1/agents/me/keys", &agent.key).await.expect(201);
    let second_key = added.body["api_key"].as_str().unwrap().to_owned();
    let second_id = added.body["key"]["id"].as_str().unwrap().to_owned();
    let mut revoked = open_stream(&app, &second_key).await;
    let mut kept = open_stream(&app, &agent.key).await;
    // Both stand past several re-checks before anything changes.
    assert!(!ends_within(&mut revoked, Duration::from_millis(700)).await, "a stream ended with its key valid");
    app.delete(format!("/v1/agents/me/keys/{second_id}"), &agent.key).await.expect(200);
    assert!(ends_within(&mut revoked, Duration::from_secs(5)).await, "the stream outlived its revoked key");
    assert!(!ends_within(&mut kept, Duration::from_millis(700)).await, "a stream ended with its key still valid");
    // The agent suspended: its stream ends too.
    let path = format!("/v1/admin/agents/{}/suspend", agent.id);
    app.post(&path, crate::support::ADMIN_TOKEN, json!({ "reason": "abuse" })).await.expect(200);
    assert!(ends_within(&mut kept, Duration::from_secs(5)).await, "the stream outlived its agent's suspension");
}

// ---- moves held for approval (SPEC §10)

/// A client that declares elicitation and answers every question with `answer` (an action
/// and its content), counting the questions.
#[derive(Clone)]
struct Person {
    answer: rmcp::model::ElicitResult,
    asked: Arc<Mutex<Vec<String>>>,
}

impl ClientHandler for Person {
    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        if let rmcp::model::ElicitRequestParams::FormElicitationParams { message, .. } = request {
            self.asked.lock().unwrap().push(message);
        }
        Ok(self.answer.clone())
    }

    fn get_info(&self) -> rmcp::model::ClientConfig {
        let capabilities = rmcp::model::ClientCapabilities::builder().enable_elicitation().build();
        rmcp::model::ClientConfig::new(capabilities, rmcp::model::Implementation::new("person", "1"))
    }
}

/// A buyer whose acceptances above 500.00 wait for approval, and the seller's counter at 600.00
/// waiting for the buyer: its id.
async fn held_acceptance(app: &TestApp, deal: &Deal) -> String {
    let rules = json!({ "rules": [{ "move": "accept", "buyer_above": 50000 }] });
    app.put("/v1/agents/me/approval-rules", &deal.buyer.key, rules).await.expect(200);
    let bid = app.place(&deal.buyer, &deal.listing, 40000).await;
    app.counter(&deal.seller, &bid, 60000).await
}

#[tokio::test]
async fn a_held_move_is_the_pending_request_and_the_tools_list_and_answer_it() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let counter = held_acceptance(&app, &deal).await;
    let buyer = over_http(&app, &deal.buyer).await;

    // Without elicitation the held acceptance is no error: the answer is the pending request.
    let held = ok(&buyer, "accept_bid", json!({ "bid_id": counter })).await;
    assert_eq!((held["outcome"].as_str(), held["approval"]["status"].as_str()), (Some("held"), Some("PENDING")));
    assert_eq!(held["approval"]["move"]["amount"], 60000);
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 0);
    let listed = ok(&buyer, "list_my_approvals", json!({ "status": "PENDING" })).await;
    assert_eq!(listed["data"][0]["id"], held["approval"]["id"]);

    // Answered through the tool, the move is made then.
    let approval = id(&held["approval"]["id"]);
    let approved = ok(&buyer, "answer_approval", json!({ "approval_id": approval, "decision": "approve" })).await;
    assert_eq!(approved["approval"]["status"], "APPROVED", "{approved}");
    assert_eq!(approved["order"]["amount"], 60000);
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 1);
    refused(&buyer, "answer_approval", json!({ "approval_id": approval, "decision": "deny" }), "invalid_transition")
        .await;
}

#[tokio::test]
async fn a_held_tool_call_asks_the_person_through_the_host_and_completes_with_the_moves_answer() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let counter = held_acceptance(&app, &deal).await;
    let yes =
        rmcp::model::ElicitResult::new(rmcp::model::ElicitationAction::Accept).with_content(json!({ "approve": true }));
    let person = Person { answer: yes, asked: Arc::default() };
    let transport = StreamableHttpClientTransport::from_config(http_transport(&app, &deal.buyer.key));
    let buyer = person.clone().serve(transport).await.expect("an MCP session that elicits");

    let result = buyer
        .call_tool(
            CallToolRequestParams::new("accept_bid")
                .with_arguments(json!({ "bid_id": counter }).as_object().unwrap().clone()),
        )
        .await
        .expect("accept_bid");
    let made = result.structured_content.clone().unwrap();
    assert_ne!(result.is_error, Some(true), "{made}");
    assert_eq!((made["outcome"].as_str(), made["approval"]["status"].as_str()), (Some("approved"), Some("APPROVED")));
    assert_eq!(made["order"]["amount"], 60000);
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 1);
    let asked = person.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert!(asked[0].contains("accept") && asked[0].contains("600.00"), "{asked:?}");
}

#[tokio::test]
async fn a_held_tool_call_the_person_declines_is_denied_and_makes_nothing() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let counter = held_acceptance(&app, &deal).await;
    let person = Person {
        answer: rmcp::model::ElicitResult::new(rmcp::model::ElicitationAction::Decline),
        asked: Arc::default(),
    };
    let transport = StreamableHttpClientTransport::from_config(http_transport(&app, &deal.buyer.key));
    let buyer = person.clone().serve(transport).await.expect("an MCP session that elicits");
    let answered = ok_in(&buyer, "accept_bid", json!({ "bid_id": counter })).await;
    assert_eq!(
        (answered["outcome"].as_str(), answered["approval"]["status"].as_str()),
        (Some("denied"), Some("DENIED"))
    );
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 0);
    let bid = app.get(format!("/v1/bids/{counter}"), &deal.buyer.key).await.expect(200);
    assert_eq!(bid.body["status"], "PENDING");
}

/// A tool's structured answer through any client, refusing an error.
async fn ok_in<H: ClientHandler>(session: &RunningService<RoleClient, H>, tool: &str, arguments: Value) -> Value {
    let arguments = arguments.as_object().expect("arguments are an object").clone();
    let result = session
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments))
        .await
        .unwrap_or_else(|error| panic!("{tool}: {error}"));
    let content = result.structured_content.clone().unwrap_or(Value::Null);
    assert_ne!(result.is_error, Some(true), "{tool} was refused: {content}");
    content
}
