//! The A2A surface over real HTTP: the card, negotiations as tasks through both bindings,
//! blocking and immediate sends, streams, idempotency by message id, A2A's error codes with the
//! API's problem in them, another agent's task as not found, and an A2A buyer racing a REST
//! buyer for the last unit.

use futures::StreamExt;
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{Agent, Body, Deal, TestApp};

async fn rpc(app: &TestApp, key: &str, method: &str, params: Value) -> Value {
    let body = json!({ "jsonrpc": "2.0", "id": 7, "method": method, "params": params });
    let resp = app.send(Method::POST, "/a2a", Some(key), Body::Json(body), &[]).await.expect(200);
    assert_eq!(resp.body["id"], 7, "{}", resp.body);
    resp.body
}

fn message(id: &str, task: Option<&str>, data: Value) -> Value {
    let mut message = json!({
        "messageId": id, "role": "ROLE_USER", "parts": [{ "data": data, "mediaType": "application/json" }]
    });
    if let Some(task) = task {
        message["taskId"] = json!(task);
    }
    message
}

fn send_params(id: &str, task: Option<&str>, data: Value, immediately: bool) -> Value {
    json!({ "message": message(id, task, data), "configuration": { "returnImmediately": immediately } })
}

/// The A2A error's code and the REST problem code its ErrorInfo carries.
fn error_of(answer: &Value) -> (i64, String) {
    let error = &answer["error"];
    let info = error["data"]
        .as_array()
        .and_then(|details| details.iter().find(|d| d["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"))
        .unwrap_or_else(|| panic!("no ErrorInfo: {answer}"));
    (
        error["code"].as_i64().unwrap_or_else(|| panic!("not an error: {answer}")),
        info["metadata"]["code"].as_str().unwrap_or("").to_owned(),
    )
}

/// The reason of an HTTP+JSON error's ErrorInfo.
fn rest_reason(body: &Value) -> &str {
    body["error"]["details"]
        .as_array()
        .and_then(|details| details.iter().find(|d| d["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"))
        .and_then(|info| info["reason"].as_str())
        .unwrap_or_else(|| panic!("no ErrorInfo: {body}"))
}

fn state(task: &Value) -> &str {
    task["status"]["state"].as_str().unwrap_or_else(|| panic!("no state: {task}"))
}

/// The data part of a task's status message.
fn status_data(task: &Value) -> &Value {
    task["status"]["message"]["parts"]
        .as_array()
        .and_then(|parts| parts.iter().find_map(|part| part.get("data")))
        .unwrap_or_else(|| panic!("no data part: {task}"))
}

async fn place(app: &TestApp, buyer: &Agent, listing: &str, amount: Value, immediately: bool) -> Value {
    let params = send_params(
        &Uuid::now_v7().to_string(),
        None,
        json!({ "action": "place", "listing_id": listing, "amount": amount }),
        immediately,
    );
    let answer = rpc(app, &buyer.key, "SendMessage", params).await;
    answer["result"]["task"].clone()
}

#[tokio::test]
async fn the_card_names_both_bindings_the_key_and_the_negotiation_extension() {
    let app = TestApp::spawn().await;
    let card = app.send(Method::GET, "/.well-known/agent-card.json", None, Body::None, &[]).await.expect(200).body;
    let interfaces = card["supportedInterfaces"].as_array().unwrap();
    let host = app.base.trim_start_matches("http://");
    assert_eq!(interfaces[0]["url"], format!("http://{host}/a2a"));
    assert_eq!(interfaces[0]["protocolBinding"], "JSONRPC");
    assert_eq!(interfaces[1]["url"], format!("http://{host}/a2a/rest"));
    assert_eq!(interfaces[1]["protocolBinding"], "HTTP+JSON");
    assert_eq!(interfaces[0]["protocolVersion"], "1.0");
    assert_eq!(card["capabilities"]["streaming"], true);
    assert_eq!(card["securitySchemes"]["apiKey"]["httpAuthSecurityScheme"]["scheme"], "Bearer");
    assert_eq!(card["capabilities"]["extensions"][0]["uri"], haggle_a2a_extension());
    let skills: Vec<&str> = card["skills"].as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(skills, ["find-listings", "negotiate-as-buyer", "buy-at-ask", "follow-negotiations"]);

    // The extended card names the caller and its tier; without a key there is none.
    let buyer = app.buyer("buyer").await;
    let extended = rpc(&app, &buyer.key, "GetExtendedAgentCard", json!({})).await;
    let agent = &extended["result"]["capabilities"]["extensions"][0]["params"]["agent"];
    assert_eq!((agent["id"].as_str(), agent["tier"].as_str()), (Some(buyer.id.as_str()), Some("AGENCY")));
    let rest = app.get("/a2a/rest/extendedAgentCard", &buyer.key).await.expect(200);
    assert_eq!(rest.body["capabilities"]["extensions"][0]["params"]["agent"]["tier"], "AGENCY");
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard", "params": {} });
    app.send(Method::POST, "/a2a", None, Body::Json(body), &[]).await.expect_problem(401, "unauthenticated");
}

fn haggle_a2a_extension() -> &'static str {
    "https://haggle.dev/a2a/negotiation/v1"
}

#[tokio::test]
async fn a_negotiation_is_a_task_from_the_opening_bid_to_the_order() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    // A whole number as a float, as the protocol's SDKs send every number.
    let task = place(&app, &deal.buyer, &deal.listing, json!(80000.0), true).await;
    assert_eq!(state(&task), "TASK_STATE_WORKING", "{task}");
    let task_id = task["id"].as_str().unwrap().to_owned();
    assert_eq!(status_data(&task)["thread"]["id"], task_id.as_str(), "the task is the thread");
    assert_eq!(task["contextId"], deal.listing.as_str());
    assert_eq!(status_data(&task)["bid"]["amount"], 80000);
    let bid = status_data(&task)["bid"]["id"].as_str().unwrap().to_owned();

    // The seller counters over REST: the task waits for the buyer, saying what it may do.
    app.counter(&deal.seller, &bid, 95000).await;
    let read = rpc(&app, &deal.buyer.key, "GetTask", json!({ "id": task_id })).await["result"].clone();
    assert_eq!(state(&read), "TASK_STATE_INPUT_REQUIRED", "{read}");
    assert_eq!(status_data(&read)["moves"], json!(["counter", "accept", "reject"]));
    assert_eq!(status_data(&read)["counter_range"], json!({ "min": 80000, "max": 94999 }));

    // A counter out of the range is the REST API's refusal, as invalid params.
    let params = send_params("m-low", Some(&task_id), json!({ "action": "counter", "amount": 70000 }), true);
    let (code, problem) = error_of(&rpc(&app, &deal.buyer.key, "SendMessage", params).await);
    assert_eq!((code, problem.as_str()), (-32602, "not_a_concession"));

    // The buyer accepts: completed, the order as the task's artifact.
    let params = send_params("m-accept", Some(&task_id), json!({ "action": "accept" }), false);
    let done = rpc(&app, &deal.buyer.key, "SendMessage", params).await["result"]["task"].clone();
    assert_eq!(state(&done), "TASK_STATE_COMPLETED", "{done}");
    let order = &done["artifacts"][0]["parts"][0]["data"]["order"];
    assert_eq!((order["amount"].as_i64(), order["thread_id"].as_str()), (Some(95000), Some(task_id.as_str())));
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 1);
    let read = rpc(&app, &deal.buyer.key, "GetTask", json!({ "id": task_id })).await["result"].clone();
    assert_eq!(read["artifacts"][0]["artifactId"], order["id"]);

    // A move on an ended task is refused; so is a fraction of a minor unit.
    let params = send_params("m-late", Some(&task_id), json!({ "action": "withdraw" }), false);
    assert_eq!(error_of(&rpc(&app, &deal.buyer.key, "SendMessage", params).await).0, -32004);
    let other = app.listing(&deal.seller, json!({})).await;
    let params =
        send_params("m-frac", None, json!({ "action": "place", "listing_id": other, "amount": 80000.5 }), false);
    let (code, problem) = error_of(&rpc(&app, &deal.buyer.key, "SendMessage", params).await);
    assert_eq!((code, problem.as_str()), (-32602, "validation_failed"));
}

#[tokio::test]
async fn a_blocking_send_returns_once_the_sellers_policy_has_answered() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let policy = json!({ "limit": 90000, "counter": { "strategy": "split" } });
    app.put(format!("/v1/listings/{}/policy", deal.listing), &deal.seller.key, policy).await.expect(200);
    let task = place(&app, &deal.buyer, &deal.listing, json!(60000), false).await;
    assert_eq!(state(&task), "TASK_STATE_INPUT_REQUIRED", "{task}");
    assert_eq!(status_data(&task)["bid"]["author"], "seller");
    assert!(status_data(&task)["moves"].as_array().unwrap().contains(&json!("accept")));
}

#[tokio::test]
async fn a_resent_message_is_answered_once_and_a_reused_id_is_refused() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let params =
        send_params("m-1", None, json!({ "action": "place", "listing_id": deal.listing, "amount": 70000 }), true);
    let first = rpc(&app, &deal.buyer.key, "SendMessage", params.clone()).await["result"]["task"].clone();
    let again = rpc(&app, &deal.buyer.key, "SendMessage", params).await["result"]["task"].clone();
    assert_eq!(first["id"], again["id"]);
    assert_eq!(app.count("SELECT count(*) FROM bids").await, 1);
    let changed =
        send_params("m-1", None, json!({ "action": "place", "listing_id": deal.listing, "amount": 71000 }), true);
    let (code, problem) = error_of(&rpc(&app, &deal.buyer.key, "SendMessage", changed).await);
    assert_eq!((code, problem.as_str()), (-32602, "idempotency_key_reused"));
    assert_eq!(app.count("SELECT count(*) FROM bids").await, 1);
}

#[tokio::test]
async fn refusals_carry_a2as_codes_and_another_agents_task_is_not_found() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let task = place(&app, &deal.buyer, &deal.listing, json!(70000), true).await;
    let task_id = task["id"].as_str().unwrap();
    let rival = app.buyer("rival").await;
    for (method, params) in [
        ("GetTask", json!({ "id": task_id })),
        ("CancelTask", json!({ "id": task_id })),
        ("GetTask", json!({ "id": "not-a-task" })),
        ("SendMessage", send_params("r-1", Some(task_id), json!({ "action": "withdraw" }), true)),
    ] {
        let answer = rpc(&app, &rival.key, method, params).await;
        assert_eq!(answer["error"]["code"], -32001, "{method}: {answer}");
    }
    let text = json!({ "message": { "messageId": "t-1", "role": "ROLE_USER", "parts": [{ "text": "I offer 700" }] } });
    let (code, problem) = error_of(&rpc(&app, &deal.buyer.key, "SendMessage", text).await);
    assert_eq!((code, problem.as_str()), (-32005, "data_part_required"));
    let answer =
        rpc(&app, &deal.buyer.key, "SendMessage", send_params("t-2", None, json!({ "amount": 5 }), true)).await;
    assert_eq!(answer["error"]["code"], -32602);
    assert_eq!(rpc(&app, &deal.buyer.key, "tasks/get", json!({})).await["error"]["code"], -32601);
    let answer = rpc(&app, &deal.buyer.key, "CreateTaskPushNotificationConfig", json!({ "taskId": task_id })).await;
    assert_eq!(answer["error"]["code"], -32003);
    let resp =
        app.send(Method::POST, "/a2a", Some(&deal.buyer.key), Body::Raw(b"{nope".to_vec()), &[]).await.expect(200);
    assert_eq!(resp.body["error"]["code"], -32700);
    // Another version of the protocol, and a body not sent as JSON, are refused as such.
    let call = json!({ "jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": { "id": task_id } });
    let resp = app
        .send(Method::POST, "/a2a", Some(&deal.buyer.key), Body::Json(call.clone()), &[("a2a-version", "0.3")])
        .await;
    assert_eq!(resp.expect(200).body["error"]["code"], -32009);
    let resp = app
        .client
        .post(format!("{}/a2a", app.base))
        .bearer_auth(&deal.buyer.key)
        .header("content-type", "text/plain")
        .body(call.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.json::<Value>().await.unwrap()["error"]["code"], -32005);

    // The pending bid is the buyer's own: cancel withdraws it. Then it cannot be canceled again.
    let canceled = rpc(&app, &deal.buyer.key, "CancelTask", json!({ "id": task_id })).await["result"].clone();
    assert_eq!(state(&canceled), "TASK_STATE_CANCELED", "{canceled}");
    let (code, problem) = error_of(&rpc(&app, &deal.buyer.key, "CancelTask", json!({ "id": task_id })).await);
    assert_eq!((code, problem.as_str()), (-32002, "not_cancelable"));

    // The HTTP+JSON binding: the same, in its own error shape.
    let resp = app.get(format!("/a2a/rest/tasks/{task_id}"), &rival.key).await.expect(404);
    assert_eq!(resp.body["error"]["status"], "NOT_FOUND");
    assert_eq!(rest_reason(&resp.body), "TASK_NOT_FOUND");
    let resp = app.get(format!("/a2a/rest/tasks/{task_id}"), &deal.buyer.key).await.expect(200);
    assert_eq!(state(&resp.body), "TASK_STATE_CANCELED");
}

#[tokio::test]
async fn the_rest_binding_negotiates_lists_and_cancels() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let body =
        send_params("rest-1", None, json!({ "action": "place", "listing_id": deal.listing, "amount": 70000 }), true);
    let task = app.post("/a2a/rest/message:send", &deal.buyer.key, body).await.expect(200).body["task"].clone();
    let task_id = task["id"].as_str().unwrap();
    assert_eq!(state(&task), "TASK_STATE_WORKING");
    let listed = app.get("/a2a/rest/tasks?status=TASK_STATE_WORKING&pageSize=10", &deal.buyer.key).await.expect(200);
    assert_eq!(listed.body["tasks"][0]["id"], task_id);
    let listed = app.get("/a2a/rest/tasks?status=TASK_STATE_COMPLETED", &deal.buyer.key).await.expect(200);
    assert_eq!(listed.body["tasks"], json!([]));
    let listed = rpc(&app, &deal.buyer.key, "ListTasks", json!({ "contextId": deal.listing })).await;
    assert_eq!(listed["result"]["tasks"][0]["id"], task_id);
    let canceled = app.post_empty(format!("/a2a/rest/tasks/{task_id}:cancel"), &deal.buyer.key).await.expect(200);
    assert_eq!(state(&canceled.body), "TASK_STATE_CANCELED");
    let text = json!({ "message": { "messageId": "t", "role": "ROLE_USER", "parts": [{ "text": "hi" }] } });
    let resp = app.post("/a2a/rest/message:send", &deal.buyer.key, text).await.expect(415);
    assert_eq!(rest_reason(&resp.body), "CONTENT_TYPE_NOT_SUPPORTED");

    // Search answers with a message holding the REST API's page of listings.
    let body = send_params("s-1", None, json!({ "action": "search", "query": "desk" }), true);
    let found = app.post("/a2a/rest/message:send", &deal.buyer.key, body).await.expect(200);
    assert_eq!(found.body["message"]["parts"][0]["data"]["listings"]["data"][0]["id"], deal.listing.as_str());
}

/// The `data:` payloads of a Server-Sent Events body until it ends.
async fn sse_events(response: reqwest::Response) -> Vec<Value> {
    let mut body = response.bytes_stream();
    let mut buffer = String::new();
    let mut events = Vec::new();
    while let Some(chunk) =
        tokio::time::timeout(std::time::Duration::from_secs(30), body.next()).await.expect("the stream stalled")
    {
        buffer.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        while let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            for line in event.lines() {
                if let Some(data) = line.strip_prefix("data: ") {
                    events.push(serde_json::from_str(data).unwrap());
                }
            }
        }
    }
    events
}

#[tokio::test]
async fn a_streamed_send_follows_the_task_until_it_waits_for_the_buyer() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let params =
        send_params("st-1", None, json!({ "action": "place", "listing_id": deal.listing, "amount": 70000 }), false);
    let body = json!({ "jsonrpc": "2.0", "id": "s", "method": "SendStreamingMessage", "params": params });
    let response =
        app.client.post(format!("{}/a2a", app.base)).bearer_auth(&deal.buyer.key).json(&body).send().await.unwrap();
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let seller = deal.seller.clone();
    let counter = {
        let app_base = app.base.clone();
        let client = app.client.clone();
        let listing = deal.listing.clone();
        let buyer = deal.buyer.clone();
        tokio::spawn(async move {
            // The seller answers once the bid is there.
            loop {
                let threads: Value = client
                    .get(format!("{app_base}/v1/threads?listing_id={listing}"))
                    .bearer_auth(&buyer.key)
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                if let Some(bid) = threads["data"][0]["last_bid_id"].as_str() {
                    let url = format!("{app_base}/v1/bids/{bid}/counter");
                    let resp = client
                        .post(url)
                        .bearer_auth(&seller.key)
                        .json(&json!({ "amount": 90000 }))
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(resp.status(), 201);
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        })
    };
    let events = sse_events(response).await;
    counter.await.unwrap();
    assert_eq!(state(&events[0]["result"]["task"]), "TASK_STATE_WORKING", "{events:?}");
    let last = &events.last().unwrap()["result"]["statusUpdate"];
    assert_eq!(last["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{events:?}");
    assert_eq!(last["taskId"], events[0]["result"]["task"]["id"]);
    assert_eq!(status_data(last)["bid"]["amount"], 90000);

    // Subscribing to the waiting task over the REST binding: the task first, then the order.
    let task_id = last["taskId"].as_str().unwrap().to_owned();
    let url = format!("{}/a2a/rest/tasks/{task_id}:subscribe", app.base);
    let response = app.client.post(url).bearer_auth(&deal.buyer.key).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let accept = send_params("st-2", Some(&task_id), json!({ "action": "accept" }), true);
    let followed = tokio::spawn(sse_events(response));
    app.until_waiting(1).await;
    rpc(&app, &deal.buyer.key, "SendMessage", accept).await;
    let followed = followed.await.unwrap();
    assert_eq!(state(&followed[0]["task"]), "TASK_STATE_INPUT_REQUIRED", "{followed:?}");
    assert!(followed.iter().any(|event| event["artifactUpdate"]["artifact"]["name"] == "order"), "{followed:?}");
    assert_eq!(followed.last().unwrap()["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED");
}

#[tokio::test]
async fn an_a2a_buyer_and_a_rest_buyer_racing_for_the_last_unit_make_one_order() {
    let app = TestApp::spawn().await;
    for round in 0..5 {
        let deal = Deal::new(&app, json!({ "quantity": 1 })).await;
        let rest_buyer = app.buyer("rest buyer").await;
        let a2a = {
            let params = send_params(
                &format!("race-{round}"),
                None,
                json!({ "action": "purchase", "listing_id": deal.listing }),
                true,
            );
            rpc(&app, &deal.buyer.key, "SendMessage", params)
        };
        let rest = app.post_empty(format!("/v1/listings/{}/purchase", deal.listing), &rest_buyer.key);
        let (a2a, rest) = tokio::join!(a2a, rest);
        let a2a_won = a2a.get("result").is_some();
        assert_ne!(a2a_won, rest.status == 201, "exactly one wins: {a2a} / {}", rest.body);
        if a2a_won {
            assert_eq!(state(&a2a["result"]["task"]), "TASK_STATE_COMPLETED");
        } else {
            assert_eq!(a2a["error"]["code"], -32602, "{a2a}");
        }
        let orders = app.count(format!("SELECT count(*) FROM orders WHERE listing_id = '{}'", deal.listing)).await;
        assert_eq!(orders, 1);
    }
}

/// The actions and roles of a task's history, oldest first.
fn history_of(task: &Value) -> Vec<(String, String)> {
    task["history"]
        .as_array()
        .map(|messages| {
            messages
                .iter()
                .map(|message| {
                    let data = message["parts"].as_array().unwrap().iter().find_map(|part| part.get("data")).unwrap();
                    (data["action"].as_str().unwrap().to_owned(), message["role"].as_str().unwrap().to_owned())
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn a_task_carries_its_moves_as_messages_and_list_tasks_counts_every_match() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let task = place(&app, &deal.buyer, &deal.listing, json!(80000), true).await;
    let task_id = task["id"].as_str().unwrap().to_owned();
    let bid = status_data(&task)["bid"]["id"].as_str().unwrap().to_owned();
    let countered = app.counter(&deal.seller, &bid, 95000).await;
    let params = send_params("h-counter", Some(&task_id), json!({ "action": "counter", "amount": 90000 }), true);
    rpc(&app, &deal.buyer.key, "SendMessage", params).await;
    let answer = rpc(
        &app,
        &deal.seller.key,
        "SendMessage",
        send_params("h-accept", Some(&task_id), json!({ "action": "accept" }), true),
    )
    .await;
    assert_eq!(state(&answer["result"]["task"]), "TASK_STATE_COMPLETED", "{answer}");

    // Unset, the whole history: each bid as the message that made it, then the acceptance; the
    // caller's moves are the user's, the other side's the agent's.
    let read = rpc(&app, &deal.buyer.key, "GetTask", json!({ "id": task_id })).await["result"].clone();
    let moves =
        |list: &[(&str, &str)]| list.iter().map(|(a, r)| ((*a).to_owned(), (*r).to_owned())).collect::<Vec<_>>();
    assert_eq!(
        history_of(&read),
        moves(&[("place", "ROLE_USER"), ("counter", "ROLE_AGENT"), ("counter", "ROLE_USER"), ("accept", "ROLE_AGENT")])
    );
    let history = read["history"].as_array().unwrap();
    assert_eq!(history[1]["messageId"], countered.as_str());
    assert_eq!(history[1]["taskId"], task_id.as_str());
    assert_eq!(history[1]["parts"][0]["data"]["amount"], 95000);
    assert_eq!(history[1]["parts"][0]["data"]["bid"]["author"], "seller");
    // The seller sees the same moves from its side.
    let seen =
        rpc(&app, &deal.seller.key, "GetTask", json!({ "id": task_id, "historyLength": 2 })).await["result"].clone();
    assert_eq!(history_of(&seen), moves(&[("counter", "ROLE_AGENT"), ("accept", "ROLE_USER")]));
    // None at 0; the most recent ones over HTTP+JSON too.
    let none =
        rpc(&app, &deal.buyer.key, "GetTask", json!({ "id": task_id, "historyLength": 0 })).await["result"].clone();
    assert!(none.get("history").is_none(), "{none}");
    let rest = app.get(format!("/a2a/rest/tasks/{task_id}?historyLength=1"), &deal.buyer.key).await.expect(200);
    assert_eq!(history_of(&rest.body), moves(&[("accept", "ROLE_AGENT")]));
    let withdrawn = place(&app, &deal.buyer, &app.listing(&deal.seller, json!({})).await, json!(70000), true).await;
    let withdrawn_id = withdrawn["id"].as_str().unwrap();
    rpc(&app, &deal.buyer.key, "CancelTask", json!({ "id": withdrawn_id })).await;
    let read = rpc(&app, &deal.buyer.key, "GetTask", json!({ "id": withdrawn_id })).await["result"].clone();
    assert_eq!(history_of(&read), moves(&[("place", "ROLE_USER"), ("withdraw", "ROLE_USER")]));

    // Three more negotiations, waiting for the seller: a page of one counts them all.
    for _ in 0..3 {
        let listing = app.listing(&deal.seller, json!({})).await;
        place(&app, &deal.buyer, &listing, json!(70000), true).await;
    }
    let list = |params: Value| {
        let app = &app;
        let key = deal.buyer.key.clone();
        async move { rpc(app, &key, "ListTasks", params).await["result"].clone() }
    };
    let page = list(json!({ "pageSize": 1 })).await;
    assert_eq!((page["tasks"].as_array().unwrap().len(), page["totalSize"].as_i64()), (1, Some(5)), "{page}");
    assert!(page["tasks"][0].get("history").is_none(), "no history unless asked: {page}");
    let page = list(json!({ "pageSize": 2, "status": "TASK_STATE_WORKING", "historyLength": 1 })).await;
    assert_eq!((page["tasks"].as_array().unwrap().len(), page["totalSize"].as_i64()), (2, Some(3)), "{page}");
    assert_eq!(history_of(&page["tasks"][0]), moves(&[("place", "ROLE_USER")]));
    let page = list(json!({ "status": "TASK_STATE_COMPLETED" })).await;
    assert_eq!(page["totalSize"], 1, "{page}");
    let page = list(json!({ "status": "TASK_STATE_CANCELED", "contextId": deal.listing })).await;
    assert_eq!(page["totalSize"], 0, "{page}");
    let rest = app.get("/a2a/rest/tasks?pageSize=1&status=TASK_STATE_CANCELED", &deal.buyer.key).await.expect(200);
    assert_eq!(rest.body["totalSize"], 1, "{}", rest.body);
}

#[tokio::test]
async fn a_move_on_the_pending_bid_is_made_once_when_resent_or_when_the_other_side_moved_elsewhere() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let task = place(&app, &deal.buyer, &deal.listing, json!(80000), true).await;
    let task_id = task["id"].as_str().unwrap().to_owned();
    // The seller counters over A2A; sent twice, it is answered once.
    let counter = send_params("s-1", Some(&task_id), json!({ "action": "counter", "amount": 95000 }), true);
    let first = rpc(&app, &deal.seller.key, "SendMessage", counter.clone()).await["result"]["task"].clone();
    let again = rpc(&app, &deal.seller.key, "SendMessage", counter).await["result"]["task"].clone();
    assert_eq!(status_data(&first)["bid"]["id"], status_data(&again)["bid"]["id"], "{again}");
    assert_eq!(app.count("SELECT count(*) FROM bids").await, 2);

    // The buyer counters over REST, so the bid this instance last showed pending is answered.
    // The seller's acceptance over A2A is made on the pending bid all the same, and once.
    let countered = status_data(&first)["bid"]["id"].as_str().unwrap().to_owned();
    let pending = app.counter(&deal.buyer, &countered, 90000).await;
    let accept = send_params("s-2", Some(&task_id), json!({ "action": "accept" }), true);
    let done = rpc(&app, &deal.seller.key, "SendMessage", accept.clone()).await["result"]["task"].clone();
    assert_eq!(state(&done), "TASK_STATE_COMPLETED", "{done}");
    assert_eq!(status_data(&done)["bid"]["id"], pending.as_str());
    let again = rpc(&app, &deal.seller.key, "SendMessage", accept).await["result"]["task"].clone();
    assert_eq!((state(&again), &again["id"]), ("TASK_STATE_COMPLETED", &done["id"]), "{again}");
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 1);
}
