//! Request ids: one id, the client's or a new one, in the answer's header, its problem document,
//! every log line of the request (a `haggle serve` process logging JSON), and its exported span.

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use serde_json::{Value, json};

use crate::support::{Body, ServerProcess, TestApp, TestDb, eventually};

/// The JSON log lines of `server` that name `id` as their request's.
fn lines_of_request(server: &ServerProcess, id: &str) -> Vec<Value> {
    server
        .log()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap_or_else(|_| panic!("not a JSON log line: {line}")))
        .filter(|line| line["span"]["request_id"] == id)
        .collect()
}

/// Sends `POST /v1/listings` without credentials (a 401 problem), with `sent` as its id.
async fn refused(server: &ServerProcess, sent: Option<&str>) -> (String, Value) {
    let mut request = reqwest::Client::new().post(format!("{}/v1/listings", server.base)).json(&json!({}));
    if let Some(id) = sent {
        request = request.header("x-request-id", id);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 401);
    let header = response.headers()["x-request-id"].to_str().unwrap().to_owned();
    (header, response.json().await.unwrap())
}

#[tokio::test]
async fn one_id_is_in_the_header_the_problem_and_every_log_line() {
    let db = TestDb::create().await;
    let server =
        ServerProcess::spawn(&[("DATABASE_URL", db.url.as_str()), ("HAGGLE_LOG_FORMAT", "json"), ("RUST_LOG", "info")]);

    // The client's own id is kept.
    let sent = "checkout-7f3a:retry.2";
    let (header, problem) = refused(&server, Some(sent)).await;
    assert_eq!(header, sent);
    assert_eq!((problem["code"].as_str(), problem["request_id"].as_str()), (Some("unauthenticated"), Some(sent)));
    let lines = eventually("the request's log lines", || async {
        let lines = lines_of_request(&server, sent);
        (!lines.is_empty()).then_some(lines)
    })
    .await;
    assert!(lines.iter().any(|line| line["status"] == 401), "{lines:?}");
    assert!(lines.iter().all(|line| line["span"]["path"] == "/v1/listings"), "{lines:?}");

    // An id that is not a sane token (a space, too long) is replaced by a new UUID, used alike.
    for unusable in ["two words", &"x".repeat(129)] {
        let (header, problem) = refused(&server, Some(unusable)).await;
        assert!(uuid::Uuid::parse_str(&header).is_ok(), "{header}");
        assert_eq!(problem["request_id"].as_str(), Some(header.as_str()));
        eventually("the replaced id's log lines", || async {
            (!lines_of_request(&server, &header).is_empty()).then_some(())
        })
        .await;
    }

    // No id: one is made.
    let (header, problem) = refused(&server, None).await;
    assert!(uuid::Uuid::parse_str(&header).is_ok(), "{header}");
    assert_eq!(problem["request_id"].as_str(), Some(header.as_str()));
    // Two requests never share a made id.
    assert_ne!(refused(&server, None).await.0, header);
}

#[tokio::test]
async fn every_kind_of_error_answer_carries_the_request_id() {
    let app = TestApp::spawn().await;
    let agent = app.register("erring").await;
    let id = [("x-request-id", "tagged-request-1")];
    // A handler's refusal, an extractor's, the router's fallbacks: the harness checks that the
    // problem's request_id is the header's on every answer; here the client's id is kept too.
    let answers = [
        app.send(reqwest::Method::GET, "/v1/bids/not-a-uuid", Some(&agent.key), Body::None, &id).await,
        app.send(reqwest::Method::POST, "/v1/listings", Some(&agent.key), Body::Raw(b"{".to_vec()), &id).await,
        app.send(reqwest::Method::GET, "/nowhere", None, Body::None, &id).await,
        app.send(reqwest::Method::DELETE, "/v1/listings", Some(&agent.key), Body::None, &id).await,
    ];
    for answer in answers {
        assert!(answer.status >= 400, "{answer:?}");
        assert_eq!(answer.body["request_id"], "tagged-request-1", "{answer:?}");
    }
    // The IAB envelope of the compatibility routes keeps it beside the code.
    let envelope = app.send(reqwest::Method::POST, "/proposals", None, Body::Json(json!({})), &id).await;
    assert_eq!(envelope.status, 401);
    assert_eq!(envelope.body["detail"]["request_id"], "tagged-request-1");
    assert_eq!(envelope.header("x-request-id"), Some("tagged-request-1"));
}

/// What the server logs at start when it exports spans.
const EXPORTING: &str = "exporting spans over OTLP/HTTP";

/// A collector of OTLP/HTTP traces: the bodies posted to `/v1/traces`.
async fn collector() -> (String, Arc<Mutex<Vec<Bytes>>>) {
    let received = Arc::new(Mutex::new(Vec::new()));
    let router = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post({
            let received = received.clone();
            move |body: Bytes| async move {
                received.lock().unwrap().push(body);
                axum::http::StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    (format!("http://{address}"), received)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_are_exported_over_otlp_with_the_request_id() {
    let (endpoint, received) = collector().await;
    let db = TestDb::create().await;
    let server = ServerProcess::spawn(&[
        ("DATABASE_URL", db.url.as_str()),
        ("HAGGLE_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ]);
    // Logged before the server listens, so already in the log.
    assert!(server.log().contains(EXPORTING), "{}", server.log());
    let sent = "otlp-traced-request-42";
    let (header, _) = refused(&server, Some(sent)).await;
    assert_eq!(header, sent);
    // The protobuf carries attribute values as they are: the id, and the span's name.
    let contains = |body: &Bytes, text: &str| body.windows(text.len()).any(|window| window == text.as_bytes());
    eventually("a span with the request id at the collector", || async {
        let received = received.lock().unwrap();
        received.iter().any(|body| contains(body, sent) && contains(body, "request")).then_some(())
    })
    .await;
}

#[tokio::test]
async fn without_an_endpoint_nothing_is_exported() {
    let db = TestDb::create().await;
    let server = ServerProcess::spawn(&[("DATABASE_URL", db.url.as_str())]);
    // The start's lines are there (the exporter's would come before the listener's), and the
    // exporter's is not among them.
    assert!(server.log().contains("listening on"), "{}", server.log());
    assert!(!server.log().contains("exporting spans"), "{}", server.log());
}
