//! Webhooks: creation and its checks, visibility, signed deliveries to a real HTTP endpoint,
//! retries and their log, disabling when retries run out, and delivery after a crash.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::Connection;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use haggle_client::{Client, NewListing, NewWebhook, PageQuery};
use haggle_server::webhooks::DeliveryStatus;
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};

use crate::events::{SseClient, events_after, spawn_get, types};
use crate::support::{Agent, Deal, ServerProcess, TestApp, TestDb, eventually};

/// How long a test waits for something that should happen within a second or two.
const PATIENCE: Duration = Duration::from_secs(30);

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Arrival {
    /// The last segment of the path, which names the webhook it was made for.
    name: String,
    event_id: String,
    delivery_id: String,
    event_type: String,
    content_type: String,
    user_agent: String,
    body: Value,
    /// Whether `Haggle-Signature` verified with the secret the webhook was created with.
    signed: bool,
    /// How many requests for this delivery came before this one.
    nth: usize,
}

/// What the receiver answers.
#[derive(Clone)]
enum Answer {
    Status(u16),
    /// Accepts the request and never answers.
    Hang,
    /// Answers with the status once the gate is opened.
    After(Arc<Notify>, u16),
}

type Script = Arc<dyn Fn(&Arrival) -> Answer + Send + Sync>;

struct ReceiverState {
    secrets: Mutex<HashMap<String, String>>,
    script: Mutex<Script>,
    arrivals: watch::Sender<Vec<Arrival>>,
}

/// A real HTTP endpoint on 127.0.0.1 that verifies every signature, records what it got, and
/// answers as its script says (200 unless told otherwise).
struct Receiver {
    base: String,
    state: Arc<ReceiverState>,
}

impl Receiver {
    async fn start() -> Receiver {
        let state = Arc::new(ReceiverState {
            secrets: Mutex::default(),
            script: Mutex::new(Arc::new(|_: &Arrival| Answer::Status(200))),
            arrivals: watch::channel(Vec::new()).0,
        });
        let app = axum::Router::new().route("/hooks/{name}", axum::routing::post(receive)).with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address: SocketAddr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver { base: format!("http://{address}/hooks"), state }
    }

    fn url(&self, name: &str) -> String {
        format!("{}/{name}", self.base)
    }

    /// Verifies the signatures of deliveries for `name` with this secret.
    fn trust(&self, name: &str, secret: &str) {
        self.state.secrets.lock().unwrap().insert(name.to_owned(), secret.to_owned());
    }

    fn answer_with(&self, script: impl Fn(&Arrival) -> Answer + Send + Sync + 'static) {
        *self.state.script.lock().unwrap() = Arc::new(script);
    }

    fn arrivals(&self) -> Vec<Arrival> {
        self.state.arrivals.borrow().clone()
    }

    /// Waits until what arrived satisfies `done`.
    async fn wait_until(&self, what: &str, done: impl Fn(&[Arrival]) -> bool) -> Vec<Arrival> {
        let mut arrivals = self.state.arrivals.subscribe();
        let waited = tokio::time::timeout(PATIENCE, arrivals.wait_for(|all| done(all))).await;
        match waited {
            Ok(Ok(all)) => all.clone(),
            _ => panic!("the receiver never got {what}; it got {:#?}", self.arrivals()),
        }
    }
}

async fn receive(
    State(state): State<Arc<ReceiverState>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let secret = state.secrets.lock().unwrap().get(&name).cloned();
    let now = chrono::Utc::now().timestamp();
    let signed = secret.is_some_and(|secret| {
        haggle_server::webhooks::signature::verify(
            &secret,
            &header("haggle-signature"),
            &body,
            now,
            Duration::from_secs(300),
        )
    });
    let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let delivery_id = header("haggle-delivery-id");
    let nth = state.arrivals.borrow().iter().filter(|a| a.delivery_id == delivery_id).count();
    let arrival = Arrival {
        name,
        event_id: header("haggle-event-id"),
        delivery_id,
        event_type: parsed["type"].as_str().unwrap_or("").to_owned(),
        content_type: header("content-type"),
        user_agent: header("user-agent"),
        body: parsed,
        signed,
        nth,
    };
    let script = state.script.lock().unwrap().clone();
    let answer = script(&arrival);
    state.arrivals.send_modify(|all| all.push(arrival));
    let status = match answer {
        Answer::Status(status) => status,
        Answer::Hang => std::future::pending().await,
        Answer::After(gate, status) => {
            gate.notified().await;
            status
        }
    };
    StatusCode::from_u16(status).unwrap()
}

/// Creates a webhook for `agent` pointing at the receiver's `name`, and trusts its secret.
/// Returns the webhook's id.
async fn hook(app: &TestApp, agent: &Agent, receiver: &Receiver, name: &str, events: Value) -> String {
    let resp = app.post("/v1/webhooks", &agent.key, json!({ "url": receiver.url(name), "events": events })).await;
    let resp = resp.expect(201);
    receiver.trust(name, resp.body["secret"].as_str().unwrap());
    resp.body["webhook"]["id"].as_str().unwrap().to_owned()
}

/// Polls `check` until it gives a value.
async fn deliveries(app: &TestApp, agent: &Agent, webhook: &str) -> Vec<Value> {
    let resp = app.get(format!("/v1/webhooks/{webhook}/deliveries"), &agent.key).await.expect(200);
    resp.body["data"].as_array().unwrap().clone()
}

/// The delivery of `event_type` to the webhook, once it has the status.
async fn delivery_once(app: &TestApp, agent: &Agent, webhook: &str, event_type: &str, status: &str) -> Value {
    eventually(&format!("the {event_type} delivery to be {status}"), || async {
        deliveries(app, agent, webhook)
            .await
            .into_iter()
            .find(|delivery| delivery["event_type"] == event_type && delivery["status"] == status)
    })
    .await
}

fn logged_statuses(delivery: &Value) -> Vec<Value> {
    delivery["attempt_log"].as_array().unwrap().iter().map(|attempt| attempt["response_status"].clone()).collect()
}

#[tokio::test]
async fn an_endpoint_that_fails_three_times_gets_the_event_on_the_fourth_attempt() {
    let app = TestApp::spawn().await;
    let receiver = Receiver::start().await;
    receiver.answer_with(|arrival| Answer::Status(if arrival.nth < 3 { 500 } else { 200 }));
    let deal = Deal::new(&app, json!({})).await;
    let webhook = hook(&app, &deal.seller, &receiver, "seller", json!(["bid.placed"])).await;

    let bid = app.place(&deal.buyer, &deal.listing, 90000).await;
    let got = receiver.wait_until("four attempts", |all| all.len() >= 4).await;

    let first = &got[0];
    assert_eq!(first.event_type, "bid.placed");
    assert_eq!(first.body["bid_id"], bid.as_str());
    for arrival in &got {
        assert!(arrival.signed, "every delivery is signed with the webhook's secret: {arrival:?}");
        assert_eq!((&arrival.event_id, &arrival.delivery_id), (&first.event_id, &first.delivery_id));
        assert_eq!(arrival.body, first.body);
        assert_eq!(arrival.content_type, "application/json");
        assert!(arrival.user_agent.starts_with("Haggle-Webhooks/"), "{}", arrival.user_agent);
    }
    // The body is the event exactly as its owner reads it.
    let events = app.get("/v1/events?after=0", &deal.seller.key).await.expect(200);
    let event =
        events.body["data"].as_array().unwrap().iter().find(|e| e["id"].as_i64() == first.event_id.parse().ok());
    assert_eq!(Some(&first.body), event, "the delivered body is the event of GET /v1/events");

    let delivery = delivery_once(&app, &deal.seller, &webhook, "bid.placed", "SUCCEEDED").await;
    assert_eq!(delivery["id"], first.delivery_id.as_str());
    assert_eq!(delivery["event_id"].to_string(), first.event_id);
    assert_eq!(delivery["attempts"], 4);
    assert_eq!(delivery["next_attempt_at"], Value::Null);
    assert_eq!(logged_statuses(&delivery), [json!(500), json!(500), json!(500), json!(200)]);
    for (index, attempt) in delivery["attempt_log"].as_array().unwrap().iter().enumerate() {
        assert_eq!(attempt["attempt"], index + 1);
        assert_eq!(attempt["error"], Value::Null);
    }
    assert_eq!(receiver.arrivals().len(), 4, "a success ends the retries");
}

#[tokio::test]
async fn a_schedule_that_runs_out_disables_the_webhook_and_tells_its_owner() {
    let app = TestApp::spawn_with(|config| {
        config.settings.webhooks.retry_schedule = vec![Duration::from_millis(50); 2];
        // Room for the test to hold attempts open while it looks around.
        config.settings.webhooks.timeout = Duration::from_secs(20);
    })
    .await;
    let receiver = Receiver::start().await;
    let first_placed = Arc::new(Notify::new());
    let first_countered = Arc::new(Notify::new());
    {
        let (first_placed, first_countered) = (first_placed.clone(), first_countered.clone());
        receiver.answer_with(move |arrival| match (arrival.event_type.as_str(), arrival.nth) {
            ("bid.placed", 0) => Answer::After(first_placed.clone(), 500),
            ("bid.placed", _) => Answer::Status(500),
            (_, 0) => Answer::After(first_countered.clone(), 503),
            _ => Answer::Status(200),
        });
    }
    let deal = Deal::new(&app, json!({})).await;
    let webhook = hook(&app, &deal.seller, &receiver, "seller", json!(["bid.placed", "bid.countered"])).await;

    // Both events are on their way before the first one's retries run out.
    let bid = app.place(&deal.buyer, &deal.listing, 80000).await;
    app.counter(&deal.seller, &bid, 95000).await;
    receiver.wait_until("both first attempts", |all| all.len() >= 2).await;
    first_placed.notify_one();

    let disabled = eventually("the webhook to be disabled", || async {
        let resp = app.get(format!("/v1/webhooks/{webhook}"), &deal.seller.key).await.expect(200);
        (resp.body["status"] == "DISABLED").then_some(resp.body)
    })
    .await;
    let reason = disabled["disabled_reason"].as_str().unwrap();
    assert!(reason.contains("3 times") && reason.contains("HTTP 500"), "{reason}");
    let failed = delivery_once(&app, &deal.seller, &webhook, "bid.placed", "FAILED").await;
    assert_eq!(failed["attempts"], 3, "one attempt and the two retries of the schedule");
    assert_eq!(logged_statuses(&failed), [json!(500), json!(500), json!(500)]);
    assert_eq!(failed["next_attempt_at"], Value::Null);

    // The owner hears of it among its events.
    let mut after = 0;
    let event = loop {
        let resp = app.get(format!("/v1/events?after={after}&wait=5"), &deal.seller.key).await.expect(200);
        let page = resp.body["data"].as_array().unwrap().clone();
        assert!(!page.is_empty(), "no webhook.disabled event reached the owner");
        after = page.last().unwrap()["id"].as_i64().unwrap();
        if let Some(event) = page.into_iter().find(|e| e["type"] == "webhook.disabled") {
            break event;
        }
    };
    assert_eq!(event["data"]["webhook"], disabled);
    let buyer_events = app.get("/v1/events?after=0", &deal.buyer.key).await.expect(200);
    assert!(buyer_events.body["data"].as_array().unwrap().iter().all(|e| e["type"] != "webhook.disabled"));

    // The other delivery's attempt ends after the webhook was disabled: it waits, PENDING.
    first_countered.notify_one();
    let waiting = eventually("the counter's first attempt to be logged", || async {
        deliveries(&app, &deal.seller, &webhook)
            .await
            .into_iter()
            .find(|d| d["event_type"] == "bid.countered" && d["attempts"] == 1)
    })
    .await;
    assert_eq!(waiting["status"], "PENDING");
    assert_eq!(logged_statuses(&waiting), [json!(503)]);
    // Unscheduled (its webhook disabled) and with no attempt in flight: nothing can deliver it.
    eventually("the waiting delivery to be unscheduled", || async {
        let scheduled = app
            .count(format!(
                "SELECT count(*) FROM webhook_deliveries WHERE webhook_id = '{webhook}' \
                 AND (next_attempt_at IS NOT NULL OR claimed_at IS NOT NULL)"
            ))
            .await;
        (scheduled == 0).then_some(())
    })
    .await;
    assert_eq!(receiver.arrivals().len(), 4, "nothing is delivered to a disabled webhook");

    // Enabled again, it resumes the waiting delivery.
    let enabled = app.post_empty(format!("/v1/webhooks/{webhook}/enable"), &deal.seller.key).await.expect(200);
    assert_eq!((&enabled.body["status"], &enabled.body["disabled_reason"]), (&json!("ACTIVE"), &Value::Null));
    let resumed = delivery_once(&app, &deal.seller, &webhook, "bid.countered", "SUCCEEDED").await;
    assert_eq!(logged_statuses(&resumed), [json!(503), json!(200)]);
    assert!(receiver.arrivals().iter().all(|arrival| arrival.signed));
    let failed_again = deliveries(&app, &deal.seller, &webhook).await;
    assert!(failed_again.iter().any(|d| d["event_type"] == "bid.placed" && d["status"] == "FAILED"));
    // Enabling an active webhook changes nothing.
    let again = app.post_empty(format!("/v1/webhooks/{webhook}/enable"), &deal.seller.key).await.expect(200);
    assert_eq!(again.body, enabled.body);
}

#[tokio::test]
async fn urls_and_event_types_are_checked_and_private_targets_refused() {
    let app = TestApp::spawn_with(|config| config.settings.webhooks.allow_private = false).await;
    let agent = app.register("hooked").await;
    let create = |body: Value| app.post("/v1/webhooks", &agent.key, body);

    for url in [
        "http://127.0.0.1:8080/hook",
        "http://localhost/hook",
        "http://[::1]/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://10.0.0.8/hook",
        "http://172.20.1.1/hook",
        "http://192.168.0.10/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://100.64.0.1/hook",
        "http://0.0.0.0/hook",
        "http://[fe80::1]/hook",
        "http://[fd00::1]/hook",
        "http://2130706433/hook",
        "https://nowhere.invalid/hook",
        "ftp://example.com/hook",
        "mailto:ops@example.com",
        "not a url",
        "/relative/hook",
        "https://user:pass@example.com/hook",
        "https://example.com/hook#part",
    ] {
        let resp = create(json!({ "url": url, "events": ["*"] })).await.expect_problem(422, "validation_failed");
        assert_eq!(resp.body["errors"][0]["field"], "url", "{url}: {}", resp.body);
    }
    let long = format!("https://93.184.215.14/{}", "a".repeat(2048));
    let resp = create(json!({ "url": long, "events": ["*"] })).await.expect_problem(422, "validation_failed");
    assert_eq!(resp.body["errors"][0]["field"], "url");

    let public = "https://93.184.215.14/hook";
    let resp = create(json!({ "url": public, "events": ["bid.eaten"] })).await.expect_problem(422, "validation_failed");
    assert_eq!(resp.body["errors"][0]["field"], "events[0]");
    assert!(resp.body["errors"][0]["message"].as_str().unwrap().contains("bid.placed"));
    let resp = create(json!({ "url": public, "events": [] })).await.expect_problem(422, "validation_failed");
    assert_eq!(resp.body["errors"][0]["field"], "events");
    let resp = create(json!({ "url": public, "events": ["*", "bid.placed"] })).await;
    resp.expect_problem(422, "validation_failed");
    let resp =
        create(json!({ "url": "gopher://x", "events": ["nope"] })).await.expect_problem(422, "validation_failed");
    let fields: Vec<&str> =
        resp.body["errors"].as_array().unwrap().iter().map(|e| e["field"].as_str().unwrap()).collect();
    assert_eq!(fields, ["url", "events[0]"], "every fault at once");
    create(json!({ "url": public })).await.expect_problem(422, "validation_failed");
    create(json!({ "url": public, "events": "bid.placed" })).await.expect_problem(400, "malformed_request");
    create(json!({ "url": public, "events": [1] })).await.expect_problem(400, "malformed_request");
    create(json!({ "url": 7, "events": ["*"] })).await.expect_problem(400, "malformed_request");
    create(json!({ "url": public, "events": ["*"], "secret": "mine" })).await.expect_problem(400, "malformed_request");
    assert_eq!(app.count("SELECT count(*) FROM webhooks").await, 0, "nothing refused was stored");

    // A public address is accepted, its event types kept once each.
    let created =
        create(json!({ "url": public, "events": ["bid.placed", "order.created", "bid.placed"] })).await.expect(201);
    let webhook = &created.body["webhook"];
    assert_eq!(webhook["url"], public);
    assert_eq!(webhook["events"], json!(["bid.placed", "order.created"]));
    assert_eq!((&webhook["status"], &webhook["disabled_reason"]), (&json!("ACTIVE"), &Value::Null));

    // Twenty at most.
    for _ in 1..20 {
        create(json!({ "url": public, "events": ["*"] })).await.expect(201);
    }
    let resp = create(json!({ "url": public, "events": ["*"] })).await.expect_problem(422, "validation_failed");
    assert_eq!(resp.body["errors"][0]["field"], "webhooks");
    assert!(resp.body["errors"][0]["message"].as_str().unwrap().contains("20"));
    let page = app.get("/v1/webhooks?limit=15", &agent.key).await.expect(200);
    assert_eq!(page.body["data"].as_array().unwrap().len(), 15);
    let cursor = page.body["next_cursor"].as_str().unwrap();
    let rest = app.get(format!("/v1/webhooks?limit=15&cursor={cursor}"), &agent.key).await.expect(200);
    assert_eq!(rest.body["data"].as_array().unwrap().len(), 5);
    assert_eq!(rest.body["next_cursor"], Value::Null);
    assert_eq!(rest.body["data"][4]["id"], webhook["id"], "newest first");
    app.get("/v1/webhooks?limit=0", &agent.key).await.expect_problem(422, "validation_failed");
    app.get("/v1/webhooks?colour=red", &agent.key).await.expect_problem(400, "malformed_request");
    app.get("/v1/webhooks/not-a-uuid", &agent.key).await.expect_problem(400, "malformed_request");
}

#[tokio::test]
async fn deliveries_never_reach_an_internal_address_even_if_the_url_now_leads_there() {
    let app = TestApp::spawn_with(|config| {
        config.settings.webhooks.allow_private = false;
        config.settings.webhooks.retry_schedule = vec![Duration::from_millis(50)];
    })
    .await;
    let receiver = Receiver::start().await;
    let deal = Deal::new(&app, json!({})).await;
    let port = receiver.base.split(':').nth(2).unwrap().split('/').next().unwrap().to_owned();
    // Each webhook was created for a public address; its URL now leads to this machine, as
    // if the server had allowed private targets before, or its name had been re-pointed.
    let mut webhooks = Vec::new();
    for (name, url) in [
        ("literal", format!("http://127.0.0.1:{port}/hooks/literal")),
        ("named", format!("http://localhost:{port}/hooks/named")),
    ] {
        let created = app
            .post("/v1/webhooks", &deal.seller.key, json!({ "url": "https://93.184.215.14/hook", "events": ["*"] }))
            .await
            .expect(201);
        let id = created.body["webhook"]["id"].as_str().unwrap().to_owned();
        receiver.trust(name, created.body["secret"].as_str().unwrap());
        sqlx::query("UPDATE webhooks SET url = $1 WHERE id = $2::uuid")
            .bind(url)
            .bind(&id)
            .execute(&app.pool)
            .await
            .unwrap();
        webhooks.push(id);
    }

    app.place(&deal.buyer, &deal.listing, 90000).await;
    for webhook in &webhooks {
        let failed = delivery_once(&app, &deal.seller, webhook, "bid.placed", "FAILED").await;
        for attempt in failed["attempt_log"].as_array().unwrap() {
            assert_eq!(attempt["response_status"], Value::Null);
            let error = attempt["error"].as_str().unwrap();
            assert!(error.contains("internal address") || error.contains("no public address"), "{error}");
        }
    }
    assert!(receiver.arrivals().is_empty(), "nothing reached the machine: {:?}", receiver.arrivals());
}

#[tokio::test]
async fn an_orders_life_reaches_the_webhooks_that_name_its_events() {
    let app = TestApp::spawn().await;
    let receiver = Receiver::start().await;
    let deal = Deal::new(&app, json!({})).await;
    hook(&app, &deal.seller, &receiver, "seller", json!(["payment.recorded", "order.completed"])).await;
    hook(&app, &deal.buyer, &receiver, "buyer", json!(["order.fulfilled", "payment.confirmed", "payment.disputed"]))
        .await;
    let bought = app.post_empty(format!("/v1/listings/{}/purchase", deal.listing), &deal.buyer.key).await.expect(201);
    let order = bought.body["order"]["id"].as_str().unwrap().to_owned();
    let pay = |reference: &'static str| {
        app.post(
            format!("/v1/orders/{order}/payments"),
            &deal.buyer.key,
            json!({ "amount": 50000, "reference": reference }),
        )
    };
    let first = pay("ch_1").await.expect(201).body["payment"]["id"].as_str().unwrap().to_owned();
    let second = pay("ch_2").await.expect(201).body["payment"]["id"].as_str().unwrap().to_owned();
    app.post_empty(format!("/v1/orders/{order}/payments/{first}/confirm"), &deal.seller.key).await.expect(200);
    let reason = json!({ "reason": "reversed" });
    app.post(format!("/v1/orders/{order}/payments/{second}/dispute"), &deal.seller.key, reason).await.expect(200);
    app.post_empty(format!("/v1/orders/{order}/fulfil"), &deal.seller.key).await.expect(200);
    app.post_empty(format!("/v1/orders/{order}/complete"), &deal.buyer.key).await.expect(200);

    let got = receiver
        .wait_until("the order's events each party named", |all| {
            all.iter().filter(|a| a.name == "seller").count() >= 3
                && all.iter().filter(|a| a.name == "buyer").count() >= 3
        })
        .await;
    assert!(got.iter().all(|a| a.signed));
    let types = |name: &str| {
        let mut types: Vec<&str> = got.iter().filter(|a| a.name == name).map(|a| a.event_type.as_str()).collect();
        types.sort_unstable();
        types
    };
    assert_eq!(types("seller"), ["order.completed", "payment.recorded", "payment.recorded"]);
    assert_eq!(types("buyer"), ["order.fulfilled", "payment.confirmed", "payment.disputed"]);
    let confirmed = got.iter().find(|a| a.event_type == "payment.confirmed").unwrap();
    assert_eq!(confirmed.body["order_id"], order.as_str());
    assert_eq!(confirmed.body["data"]["order"]["paid_amount"], 50000);
}

#[tokio::test]
async fn webhooks_are_their_owners_alone_and_hear_only_their_owners_events() {
    let app = TestApp::spawn().await;
    let receiver = Receiver::start().await;
    let deal = Deal::new(&app, json!({})).await;
    let stranger = app.buyer("stranger").await;
    let seller_hook = hook(&app, &deal.seller, &receiver, "seller", json!(["*"])).await;
    let buyer_hook = hook(&app, &deal.buyer, &receiver, "buyer", json!(["bid.countered"])).await;
    let stranger_hook = hook(&app, &stranger, &receiver, "stranger", json!(["*"])).await;

    let bid = app.place(&deal.buyer, &deal.listing, 90000).await;
    app.counter(&deal.seller, &bid, 97000).await;
    let got = receiver
        .wait_until("the seller's two events and the buyer's counter", |all| {
            all.iter().filter(|a| a.name == "seller").count() >= 2 && all.iter().any(|a| a.name == "buyer")
        })
        .await;
    assert!(got.iter().all(|a| a.signed));
    let mut seller_types: Vec<&str> =
        got.iter().filter(|a| a.name == "seller").map(|a| a.event_type.as_str()).collect();
    seller_types.sort();
    assert_eq!(seller_types, ["bid.countered", "bid.placed"], "deliveries may arrive in any order");
    let buyer_types: Vec<&str> = got.iter().filter(|a| a.name == "buyer").map(|a| a.event_type.as_str()).collect();
    assert_eq!(buyer_types, ["bid.countered"], "the buyer's webhook takes only the types it named");
    // Deliveries are queued when an event is published: none was queued for the stranger.
    assert!(deliveries(&app, &stranger, &stranger_hook).await.is_empty());
    assert!(receiver.arrivals().iter().all(|a| a.name != "stranger"));

    // Pages of deliveries, newest event first.
    delivery_once(&app, &deal.seller, &seller_hook, "bid.countered", "SUCCEEDED").await;
    let page = app.get(format!("/v1/webhooks/{seller_hook}/deliveries?limit=1"), &deal.seller.key).await.expect(200);
    assert_eq!(page.body["data"][0]["event_type"], "bid.countered");
    let cursor = page.body["next_cursor"].as_str().unwrap();
    let rest = app
        .get(format!("/v1/webhooks/{seller_hook}/deliveries?limit=1&cursor={cursor}"), &deal.seller.key)
        .await
        .expect(200);
    assert_eq!(rest.body["data"][0]["event_type"], "bid.placed");
    assert_eq!(rest.body["next_cursor"], Value::Null);

    // To anyone else, a webhook does not exist.
    for (agent, theirs) in [(&stranger, &seller_hook), (&deal.seller, &buyer_hook), (&deal.buyer, &stranger_hook)] {
        app.get(format!("/v1/webhooks/{theirs}"), &agent.key).await.expect_problem(404, "not_found");
        app.get(format!("/v1/webhooks/{theirs}/deliveries"), &agent.key).await.expect_problem(404, "not_found");
        app.post_empty(format!("/v1/webhooks/{theirs}/enable"), &agent.key).await.expect_problem(404, "not_found");
        app.send(
            reqwest::Method::DELETE,
            format!("/v1/webhooks/{theirs}"),
            Some(&agent.key),
            crate::support::Body::None,
            &[],
        )
        .await
        .expect_problem(404, "not_found");
    }
    let listed = app.get("/v1/webhooks", &stranger.key).await.expect(200);
    let ids: Vec<&str> = listed.body["data"].as_array().unwrap().iter().map(|w| w["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [stranger_hook.as_str()]);

    // Its owner deletes it, with its deliveries.
    let delete = |id: &str| {
        app.send(
            reqwest::Method::DELETE,
            format!("/v1/webhooks/{id}"),
            Some(&deal.seller.key),
            crate::support::Body::None,
            &[],
        )
    };
    delete(&seller_hook).await.expect(204);
    delete(&seller_hook).await.expect_problem(404, "not_found");
    app.get(format!("/v1/webhooks/{seller_hook}"), &deal.seller.key).await.expect_problem(404, "not_found");
    let left = app.count(format!("SELECT count(*) FROM webhook_deliveries WHERE webhook_id = '{seller_hook}'")).await;
    assert_eq!(left, 0);
    assert_eq!(app.count("SELECT count(*) FROM webhooks").await, 2);
}

#[tokio::test]
async fn the_secret_is_shown_once_and_stored_sealed() {
    let app = TestApp::spawn().await;
    let agent = app.register("secretive").await;
    let body = json!({ "url": "https://93.184.215.14/hook", "events": ["*"] });
    let created = app.post_keyed("/v1/webhooks", Some(&agent.key), body.clone(), "create-hook-1").await.expect(201);
    let secret = created.body["secret"].as_str().unwrap().to_owned();
    let webhook = created.body["webhook"].clone();
    let id = webhook["id"].as_str().unwrap();
    assert!(secret.starts_with("whsec_") && secret.len() == 6 + 43, "{secret}");
    assert!(secret.starts_with(webhook["secret_prefix"].as_str().unwrap()));
    assert_eq!(webhook["secret_prefix"].as_str().unwrap().len(), 12);

    // A retry with the same key gets the same answer, secret included, and creates nothing.
    let replayed = app.post_keyed("/v1/webhooks", Some(&agent.key), body, "create-hook-1").await.expect(201);
    assert_eq!(replayed.header("idempotent-replayed"), Some("true"));
    assert_eq!(replayed.body, created.body);
    assert_eq!(app.count("SELECT count(*) FROM webhooks").await, 1);

    for path in [format!("/v1/webhooks/{id}"), "/v1/webhooks".to_owned(), format!("/v1/webhooks/{id}/deliveries")] {
        let resp = app.get(&path, &agent.key).await.expect(200);
        assert!(!resp.body.to_string().contains(&secret), "{path} shows the secret");
    }
    let read = app.get(format!("/v1/webhooks/{id}"), &agent.key).await.expect(200);
    assert_eq!(read.body, webhook);

    // Nowhere in the database in clear: not in the webhook's row, nor in the stored answer.
    let sealed: Vec<u8> = sqlx::query_scalar("SELECT secret_sealed FROM webhooks").fetch_one(&app.pool).await.unwrap();
    assert!(!sealed.windows(secret.len()).any(|w| w == secret.as_bytes()));
    for table in ["webhooks", "idempotency_keys", "events"] {
        let rows: Vec<String> =
            sqlx::query_scalar(&format!("SELECT to_jsonb(t)::text FROM {table} t")).fetch_all(&app.pool).await.unwrap();
        assert!(rows.iter().all(|row| !row.contains(&secret)), "{table} holds the secret in clear");
    }
    let stored: Vec<u8> = sqlx::query_scalar("SELECT body FROM idempotency_keys").fetch_one(&app.pool).await.unwrap();
    assert!(!stored.windows(secret.len()).any(|w| w == secret.as_bytes()));
}

#[tokio::test]
async fn a_delivery_cut_short_by_a_crash_is_made_by_the_next_server() {
    let db = TestDb::create().await;
    let receiver = Receiver::start().await;
    let answering = Arc::new(AtomicBool::new(false));
    {
        let answering = answering.clone();
        receiver
            .answer_with(move |_| if answering.load(Ordering::SeqCst) { Answer::Status(200) } else { Answer::Hang });
    }
    // A claimed delivery is leased for the timeout and a few seconds; a short timeout keeps
    // the wait for the next server short.
    let env = [
        ("DATABASE_URL", db.url.as_str()),
        ("HAGGLE_WEBHOOK_ALLOW_PRIVATE", "true"),
        ("HAGGLE_WEBHOOK_TIMEOUT", "2s"),
        ("HAGGLE_WEBHOOK_RETRY_SCHEDULE", "200ms,200ms"),
    ];
    let mut first = ServerProcess::spawn(&env);
    // Clients of the server processes send each request once, as a plain HTTP request would be:
    // a failure to get an answer fails the test rather than being retried.
    let server = Client::new(&first.base, None).unwrap().attempts(1);
    let seller_key = server.register("seller").await.unwrap().api_key;
    let seller = server.with_api_key(&seller_key);
    let buyer = server.with_api_key(server.register("buyer").await.unwrap().api_key);
    let hook = NewWebhook { url: receiver.url("seller"), events: vec!["order.created".to_owned()] };
    let created = seller.create_webhook(&hook).await.unwrap();
    receiver.trust("seller", &created.secret);
    let webhook = created.webhook.id;
    let listing = seller.create_listing(&NewListing::new("Lamp", 5000)).await.unwrap();
    let order = buyer.purchase(listing.id).await.unwrap().order;

    // The server has committed the order and its event and is in the middle of delivering it
    // when it dies.
    let got = receiver.wait_until("the first attempt", |all| !all.is_empty()).await;
    first.kill();
    assert_eq!(got[0].body["order_id"], json!(order.id));
    answering.store(true, Ordering::SeqCst);

    let second = ServerProcess::spawn(&env);
    let got = receiver.wait_until("the delivery from the next server", |all| all.len() >= 2).await;
    assert_eq!((&got[1].event_id, &got[1].delivery_id), (&got[0].event_id, &got[0].delivery_id));
    assert_eq!(got[1].body, got[0].body);
    assert!(got.iter().all(|arrival| arrival.signed));

    let seller = &Client::new(&second.base, Some(seller_key)).unwrap().attempts(1);
    let delivery = eventually("the delivery to succeed", || async move {
        let page = seller.webhook_deliveries(webhook, &PageQuery::default()).await.unwrap();
        page.data.into_iter().find(|d| d.status == DeliveryStatus::Succeeded)
    })
    .await;
    // The attempt cut short by the crash is in the log too, its outcome unknown.
    assert_eq!(delivery.attempts, 2);
    let log: Vec<(i32, Option<i32>, Option<&str>)> = delivery
        .attempt_log
        .iter()
        .map(|attempt| (attempt.attempt, attempt.response_status, attempt.error.as_deref()))
        .collect();
    assert_eq!(log, [(1, None, Some(haggle_server::db::webhooks::UNRECORDED_ATTEMPT)), (2, Some(200), None)]);
    assert_eq!(receiver.arrivals().len(), 2);
}

/// The advisory lock a hold waits on.
const HOLD: i64 = 34;

/// Holds the transaction that writes to `table` open at its commit, after all it wrote, on a
/// deferred trigger of the test's own (in the test's database alone) that waits for the
/// advisory lock `holder` holds.
async fn hold_writes_to(holder: &mut sqlx::PgConnection, table: &str) {
    sqlx::query("SELECT pg_advisory_lock($1)").bind(HOLD).execute(&mut *holder).await.unwrap();
    sqlx::raw_sql(&format!(
        "CREATE OR REPLACE FUNCTION test_hold() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN PERFORM pg_advisory_xact_lock_shared({HOLD}); RETURN NULL; END $$;
         CREATE CONSTRAINT TRIGGER test_hold AFTER INSERT OR UPDATE ON {table}
         DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION test_hold();"
    ))
    .execute(&mut *holder)
    .await
    .unwrap();
}

/// Lets the held transaction go on, and takes the trigger away.
async fn release(holder: &mut sqlx::PgConnection, table: &str) {
    sqlx::query("SELECT pg_advisory_unlock($1)").bind(HOLD).execute(&mut *holder).await.unwrap();
    sqlx::raw_sql(&format!("DROP TRIGGER test_hold ON {table}")).execute(&mut *holder).await.unwrap();
}

/// Makes `change` while its transaction is held on `table`: a long poll, a stream, a read of
/// the events and the webhook hear nothing of it until it
/// commits; then each hears of it, as one event of `kind`. Returns the stream, still open.
async fn heard_only_after_commit(
    app: &TestApp,
    owner: &Agent,
    receiver: &Receiver,
    table: &str,
    kind: &str,
    change: reqwest::RequestBuilder,
) -> SseClient {
    let cursor = events_after(app, owner, 0, 0).await.last().map_or(0, |event| event["id"].as_i64().unwrap());
    let idle = app.waiters();
    let long_poll = spawn_get(app, &owner.key, format!("/v1/events?after={cursor}&wait=60"));
    let mut stream = SseClient::connect(app, owner, &format!("?after={cursor}"), None).await;
    app.until_waiting(idle + 2).await;
    let arrived = receiver.arrivals().len();

    let mut holder = sqlx::PgConnection::connect(app.database_url()).await.unwrap();
    hold_writes_to(&mut holder, table).await;
    let change = tokio::spawn(change.send());
    eventually("the change to wait inside its transaction", || async {
        let waiting = app
            .count(
                "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database \
                 WHERE d.datname = current_database() AND l.locktype = 'advisory' AND NOT l.granted",
            )
            .await;
        (waiting == 1).then_some(())
    })
    .await;
    // Its events are written, uncommitted: no reader finds them.
    assert_eq!(events_after(app, owner, cursor, 0).await, Vec::<Value>::new(), "an event read before its commit");
    assert!(!long_poll.is_finished(), "a long poll answered before the commit");
    assert!(stream.event(Duration::ZERO).await.is_none(), "a stream sent an event before the commit");
    assert_eq!(receiver.arrivals().len(), arrived, "a webhook delivery before the commit");

    release(&mut holder, table).await;
    let status = change.await.unwrap().expect("the change's answer").status();
    assert!(status.is_success(), "{status}");
    let (_, polled) = tokio::time::timeout(PATIENCE, long_poll).await.expect("the long poll hears of it").unwrap();
    assert_eq!(types(polled["data"].as_array().unwrap()), [kind]);
    assert_eq!(stream.event(PATIENCE).await.expect("the stream hears of it")["type"], kind);
    assert_eq!(types(&events_after(app, owner, cursor, 0).await), [kind]);
    receiver.wait_until(&format!("the {kind} delivery"), |all| all.iter().any(|a| a.event_type == kind)).await;
    stream
}

/// No event is delivered before its change committed: neither a move's, whose statement writes
/// its events, nor a unit of work's, which writes them just before its commit.
#[tokio::test]
async fn no_event_is_delivered_before_its_change_commits() {
    let app = TestApp::spawn().await;
    let receiver = Receiver::start().await;
    let deal = Deal::new(&app, json!({})).await;
    let spare = app.listing(&deal.seller, json!({})).await;
    hook(&app, &deal.seller, &receiver, "seller", json!(["bid.countered", "listing.withdrawn"])).await;
    let bid = app.place(&deal.buyer, &deal.listing, 60000).await;

    // A counter, held as its statement (which wrote the new bid and the events) commits.
    let counter = app
        .client
        .post(format!("{}/v1/bids/{bid}/counter", app.base))
        .bearer_auth(&deal.seller.key)
        .json(&json!({ "amount": 90000 }));
    let mut first = heard_only_after_commit(&app, &deal.seller, &receiver, "bids", "bid.countered", counter).await;
    // A listing withdrawn, held as its unit of work commits.
    let withdraw = app.client.post(format!("{}/v1/listings/{spare}/withdraw", app.base)).bearer_auth(&deal.seller.key);
    heard_only_after_commit(&app, &deal.seller, &receiver, "listings", "listing.withdrawn", withdraw).await;

    // Each once: the first stream's next event is the second change's, and the webhook got each
    // one delivery.
    assert_eq!(first.event(PATIENCE).await.expect("the second change")["type"], "listing.withdrawn");
    for kind in ["bid.countered", "listing.withdrawn"] {
        let deliveries = receiver.arrivals().iter().filter(|arrival| arrival.event_type == kind).count();
        assert_eq!(deliveries, 1, "{kind}");
    }
}
