//! Hostile input: each malformed request gets its documented status and code, and the database
//! is left exactly as it was.

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{Body, Deal, TestApp};

struct Case {
    name: &'static str,
    method: Method,
    path: String,
    key: Option<String>,
    body: Body,
    status: u16,
    code: &'static str,
    field: Option<&'static str>,
}

fn case(
    name: &'static str,
    method: Method,
    path: String,
    key: &str,
    body: Body,
    status: u16,
    code: &'static str,
) -> Case {
    Case { name, method, path, key: Some(key.to_owned()), body, status, code, field: None }
}

impl Case {
    fn field(mut self, field: &'static str) -> Case {
        self.field = Some(field);
        self
    }

    fn anonymous(mut self) -> Case {
        self.key = None;
        self
    }
}

fn raw(text: &str) -> Body {
    Body::Raw(text.as_bytes().to_vec())
}

fn json(value: Value) -> Body {
    Body::Json(value)
}

#[tokio::test]
async fn malformed_requests_change_nothing() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let bid = app.place(&deal.buyer, &deal.listing, 80000).await;
    // A revoked key: the buyer gets a second key and revokes its first.
    let second = app.post_empty("/v1/agents/me/keys", &deal.buyer.key).await.expect(201);
    let second_key = second.body["api_key"].as_str().unwrap().to_owned();
    let keys = app.get("/v1/agents/me/keys", &second_key).await.expect(200);
    let first_id = keys.body["data"][0]["id"].as_str().unwrap().to_owned();
    app.send(Method::DELETE, &format!("/v1/agents/me/keys/{first_id}"), Some(&second_key), Body::None, &[])
        .await
        .expect(200);
    let revoked = deal.buyer.key.clone();
    let buyer = second_key;
    let seller = deal.seller.key.clone();
    let place = format!("/v1/listings/{}/bids", deal.listing);
    let counter = format!("/v1/bids/{bid}/counter");
    let listing = format!("/v1/listings/{}", deal.listing);
    let five_mb = format!("{{\"title\":\"{}\",\"ask_amount\":1000}}", "x".repeat(5 * 1024 * 1024));

    use Method as M;
    let cases = vec![
        case("not JSON", M::POST, place.clone(), &buyer, raw("amount=90000"), 400, "malformed_request"),
        case("truncated JSON", M::POST, place.clone(), &buyer, raw("{\"amount\": 9"), 400, "malformed_request"),
        case("trailing data", M::POST, place.clone(), &buyer, raw("{\"amount\": 90000} x"), 400, "malformed_request"),
        case("an array", M::POST, place.clone(), &buyer, raw("[90000]"), 400, "malformed_request"),
        case("empty body", M::POST, place.clone(), &buyer, raw(""), 400, "malformed_request"),
        case(
            "amount as a string",
            M::POST,
            place.clone(),
            &buyer,
            json(json!({"amount": "90000"})),
            400,
            "malformed_request",
        )
        .field("amount"),
        case(
            "message as a number",
            M::POST,
            place.clone(),
            &buyer,
            json(json!({"amount": 90000, "message": 5})),
            400,
            "malformed_request",
        )
        .field("message"),
        case(
            "unknown field",
            M::POST,
            place.clone(),
            &buyer,
            json(json!({"amount": 90000, "price": 1})),
            400,
            "malformed_request",
        ),
        case("missing amount", M::POST, place.clone(), &buyer, json(json!({})), 422, "validation_failed")
            .field("amount"),
        case("zero amount", M::POST, place.clone(), &buyer, json(json!({"amount": 0})), 422, "validation_failed")
            .field("amount"),
        case(
            "negative amount",
            M::POST,
            place.clone(),
            &buyer,
            json(json!({"amount": -100})),
            422,
            "validation_failed",
        )
        .field("amount"),
        case(
            "amount past 64 bits",
            M::POST,
            place.clone(),
            &buyer,
            raw("{\"amount\": 99999999999999999999}"),
            422,
            "validation_failed",
        )
        .field("amount"),
        case("amount 1e30", M::POST, place.clone(), &buyer, raw("{\"amount\": 1e30}"), 422, "validation_failed")
            .field("amount"),
        case("fractional amount", M::POST, place.clone(), &buyer, raw("{\"amount\": 900.5}"), 422, "validation_failed")
            .field("amount"),
        case(
            "amount over the ceiling",
            M::POST,
            place.clone(),
            &buyer,
            json(json!({"amount": 100_000_000_001_i64})),
            422,
            "validation_failed",
        )
        .field("amount"),
        case(
            "message too long",
            M::POST,
            place.clone(),
            &buyer,
            json(json!({"amount": 90000, "message": "m".repeat(501)})),
            422,
            "validation_failed",
        )
        .field("message"),
        case(
            "terms not an object",
            M::POST,
            place.clone(),
            &buyer,
            json(json!({"amount": 90000, "terms": [1]})),
            422,
            "validation_failed",
        )
        .field("terms"),
        case(
            "terms too large",
            M::POST,
            place.clone(),
            &buyer,
            json(json!({"amount": 90000, "terms": {"t": "x".repeat(5000)}})),
            422,
            "validation_failed",
        )
        .field("terms"),
        case(
            "terms nested too deep",
            M::POST,
            place.clone(),
            &buyer,
            json(json!({"amount": 90000, "terms": nested(haggle_domain::bid::MAX_TERMS_DEPTH + 1)})),
            422,
            "validation_failed",
        )
        .field("terms"),
        case(
            "terms nested 126 levels",
            M::POST,
            place.clone(),
            &buyer,
            json(json!({"amount": 90000, "terms": nested(126)})),
            422,
            "validation_failed",
        )
        .field("terms"),
        case(
            "a NUL inside terms",
            M::POST,
            place.clone(),
            &buyer,
            raw("{\"amount\": 90000, \"terms\": {\"note\": \"a\\u0000b\"}}"),
            422,
            "validation_failed",
        )
        .field("terms"),
        case(
            "a NUL in a message",
            M::POST,
            place.clone(),
            &buyer,
            raw("{\"amount\": 90000, \"message\": \"\\u0000\"}"),
            422,
            "validation_failed",
        )
        .field("message"),
        case(
            "counter of zero",
            M::POST,
            counter.clone(),
            &seller,
            json(json!({"amount": 0})),
            422,
            "validation_failed",
        )
        .field("amount"),
        case(
            "final as a string",
            M::POST,
            counter.clone(),
            &seller,
            json(json!({"amount": 90000, "final": "yes"})),
            400,
            "malformed_request",
        )
        .field("final"),
        case(
            "a body on accept",
            M::POST,
            format!("/v1/bids/{bid}/accept"),
            &seller,
            json(json!({"amount": 1})),
            400,
            "malformed_request",
        ),
        // No body is an action's body; blanks are not JSON, so not a body it takes.
        case(
            "blanks on accept",
            M::POST,
            format!("/v1/bids/{bid}/accept"),
            &seller,
            raw("  "),
            400,
            "malformed_request",
        ),
        case("5 MB body", M::POST, "/v1/listings".into(), &seller, raw(&five_mb), 413, "payload_too_large"),
        case(
            "bad UUID in path",
            M::POST,
            "/v1/bids/not-a-uuid/accept".into(),
            &seller,
            Body::None,
            400,
            "malformed_request",
        )
        .field("id"),
        case("bad UUID on read", M::GET, "/v1/listings/123".into(), &seller, Body::None, 400, "malformed_request"),
        case(
            "unknown bid",
            M::POST,
            format!("/v1/bids/{}/accept", uuid::Uuid::now_v7()),
            &seller,
            Body::None,
            404,
            "not_found",
        ),
        case(
            "unknown listing",
            M::POST,
            format!("/v1/listings/{}/bids", uuid::Uuid::now_v7()),
            &buyer,
            json(json!({"amount": 90000})),
            404,
            "not_found",
        ),
        case("no key", M::POST, place.clone(), &buyer, json(json!({"amount": 90000})), 401, "unauthenticated")
            .anonymous(),
        case(
            "wrong key",
            M::POST,
            place.clone(),
            "hk_not-a-real-key",
            json(json!({"amount": 90000})),
            401,
            "unauthenticated",
        ),
        case("not a key at all", M::GET, "/v1/agents/me".into(), "definitely-not", Body::None, 401, "unauthenticated"),
        case("revoked key", M::POST, place.clone(), &revoked, json(json!({"amount": 90000})), 401, "unauthenticated"),
        case(
            "empty title",
            M::POST,
            "/v1/listings".into(),
            &seller,
            json(json!({"title": " ", "ask_amount": 1000})),
            422,
            "validation_failed",
        )
        .field("title"),
        case(
            "unknown currency",
            M::POST,
            "/v1/listings".into(),
            &seller,
            json(json!({"title": "t", "ask_amount": 1000, "currency": "XYZ"})),
            422,
            "validation_failed",
        )
        .field("currency"),
        case(
            "unknown tier",
            M::POST,
            "/v1/listings".into(),
            &seller,
            json(json!({"title": "t", "ask_amount": 1000, "min_negotiation_tier": "GOLD"})),
            422,
            "validation_failed",
        )
        .field("min_negotiation_tier"),
        case(
            "quantity far too large",
            M::POST,
            "/v1/listings".into(),
            &seller,
            json(json!({"title": "t", "ask_amount": 1000, "quantity": 10_000_000_000_i64})),
            422,
            "validation_failed",
        )
        .field("quantity"),
        case(
            "patching the currency",
            M::PATCH,
            listing.clone(),
            &seller,
            json(json!({"currency": "EUR"})),
            400,
            "malformed_request",
        ),
        case(
            "patching someone else's listing",
            M::PATCH,
            listing.clone(),
            &buyer,
            json(json!({"title": "mine"})),
            403,
            "forbidden",
        ),
        case(
            "self-promotion at registration",
            M::POST,
            "/v1/agents".into(),
            "",
            json(json!({"name": "x", "tier": "ADVERTISER"})),
            400,
            "malformed_request",
        )
        .anonymous(),
        case(
            "nameless registration",
            M::POST,
            "/v1/agents".into(),
            "",
            json(json!({"name": ""})),
            422,
            "validation_failed",
        )
        .anonymous()
        .field("name"),
        case(
            "an agent on the operator route",
            M::PATCH,
            format!("/v1/admin/agents/{}", deal.buyer.id),
            &buyer,
            json(json!({"tier": "ADVERTISER"})),
            403,
            "forbidden",
        ),
        case(
            "a wrong operator token",
            M::PATCH,
            format!("/v1/admin/agents/{}", deal.buyer.id),
            "guess",
            json(json!({"tier": "ADVERTISER"})),
            401,
            "unauthenticated",
        ),
        case(
            "an unknown tier from the operator",
            M::PATCH,
            format!("/v1/admin/agents/{}", deal.buyer.id),
            crate::support::ADMIN_TOKEN,
            json(json!({"tier": "GOLD"})),
            422,
            "validation_failed",
        )
        .field("tier"),
        case("limit of zero", M::GET, "/v1/listings?limit=0".into(), &buyer, Body::None, 422, "validation_failed")
            .field("limit"),
        case("limit of 201", M::GET, "/v1/listings?limit=201".into(), &buyer, Body::None, 422, "validation_failed")
            .field("limit"),
        case(
            "limit not a number",
            M::GET,
            "/v1/listings?limit=ten".into(),
            &buyer,
            Body::None,
            400,
            "malformed_request",
        ),
        case("a forged cursor", M::GET, "/v1/threads?cursor=abc".into(), &buyer, Body::None, 422, "validation_failed")
            .field("cursor"),
        case(
            "an unknown query parameter",
            M::GET,
            "/v1/orders?sort=price".into(),
            &buyer,
            Body::None,
            400,
            "malformed_request",
        ),
        case("a NUL in a search", M::GET, "/v1/listings?q=a%00b".into(), &buyer, Body::None, 422, "validation_failed")
            .field("q"),
        case(
            "a blank search of a control",
            M::GET,
            "/v1/listings?q=%0B".into(),
            &buyer,
            Body::None,
            422,
            "validation_failed",
        )
        .field("q"),
        case(
            "a blank search too long",
            M::GET,
            format!("/v1/listings?q={}", "+".repeat(201)),
            &buyer,
            Body::None,
            422,
            "validation_failed",
        )
        .field("q"),
        case(
            "an unknown status",
            M::GET,
            "/v1/listings?status=GONE".into(),
            &buyer,
            Body::None,
            422,
            "validation_failed",
        )
        .field("status"),
        case("a negative limit", M::GET, "/v1/orders?limit=-1".into(), &buyer, Body::None, 422, "validation_failed")
            .field("limit"),
        case(
            "a seller that is no id",
            M::GET,
            "/v1/listings?seller_id=42".into(),
            &buyer,
            Body::None,
            400,
            "malformed_request",
        ),
        // A value of the wrong type anywhere wins over one the parameter does not take.
        case(
            "an unknown status before a limit not a number",
            M::GET,
            "/v1/listings?status=GONE&limit=ten".into(),
            &buyer,
            Body::None,
            400,
            "malformed_request",
        ),
        case(
            "a forged cursor before an unknown parameter",
            M::GET,
            "/v1/webhooks?cursor=abc&sort=price".into(),
            &buyer,
            Body::None,
            400,
            "malformed_request",
        ),
        case(
            "an unknown role given twice",
            M::GET,
            "/v1/threads?role=judge&role=buyer".into(),
            &buyer,
            Body::None,
            400,
            "malformed_request",
        ),
        case(
            "a forged cursor as the operator's after",
            M::GET,
            "/v1/admin/agents?after=abc".into(),
            crate::support::ADMIN_TOKEN,
            Body::None,
            422,
            "validation_failed",
        )
        .field("after"),
        case(
            "a failing filter neither true nor false",
            M::GET,
            "/v1/admin/webhooks?failing=yes".into(),
            crate::support::ADMIN_TOKEN,
            Body::None,
            422,
            "validation_failed",
        )
        .field("failing"),
        case(
            "an unknown tier in the operator's search",
            M::GET,
            "/v1/admin/agents?tier=GOLD".into(),
            crate::support::ADMIN_TOKEN,
            Body::None,
            422,
            "validation_failed",
        )
        .field("tier"),
        case("an unknown route", M::GET, "/v1/nothing".into(), &buyer, Body::None, 404, "not_found"),
        case("a wrong method", M::DELETE, "/v1/listings".into(), &buyer, Body::None, 405, "method_not_allowed"),
    ];

    for case in cases {
        let before = app.snapshot().await;
        let resp = app.send(case.method.clone(), &case.path, case.key.as_deref(), case.body, &[]).await;
        assert_eq!((resp.status, resp.code()), (case.status, case.code), "{}: {}", case.name, resp.body);
        assert_eq!(
            resp.header("content-type"),
            Some("application/problem+json"),
            "{}: errors are problem documents",
            case.name
        );
        if let Some(field) = case.field {
            assert_eq!(resp.body["errors"][0]["field"], field, "{}: {}", case.name, resp.body);
        }
        assert_eq!(app.snapshot().await, before, "{} changed the database", case.name);
    }
}

#[tokio::test]
async fn an_unreachable_database_is_a_503() {
    // A pool that points at a port nobody listens on.
    let options = sqlx::postgres::PgConnectOptions::new().host("127.0.0.1").port(1).username("nobody");
    let pool = haggle_server::db::pool_options(2)
        .acquire_timeout(std::time::Duration::from_millis(500))
        .connect_lazy_with(options);
    let app = haggle_server::app::App::build(pool, "127.0.0.1:0", crate::support::test_config()).await.unwrap();
    let base = format!("http://{}", app.local_addr());
    let shutdown = tokio_util::sync::CancellationToken::new();
    tokio::spawn(app.run_until_stopped(shutdown.clone()));
    let client = reqwest::Client::new();

    assert_eq!(client.get(format!("{base}/healthz")).send().await.unwrap().status(), 200);
    for request in [
        client.get(format!("{base}/readyz")),
        client.post(format!("{base}/v1/agents")).json(&json!({"name": "x"})),
        client.get(format!("{base}/v1/agents/me")).bearer_auth("hk_some-key"),
    ] {
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 503);
        assert_eq!(response.headers()["retry-after"], "1");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["code"], "unavailable");
    }
    shutdown.cancel();
}

/// An object nested `levels` deep: `{"n": {"n": ... 1}}`.
fn nested(levels: usize) -> Value {
    let mut value = json!(1);
    for _ in 0..levels {
        value = json!({ "n": value });
    }
    value
}

#[tokio::test]
async fn the_deepest_terms_allowed_read_back_everywhere() {
    let app = TestApp::spawn().await;
    let seller = app.register("seller").await;
    let buyer = app.buyer("buyer").await;
    let listing = app.listing(&seller, json!({})).await;
    let terms = nested(haggle_domain::bid::MAX_TERMS_DEPTH);
    let placed = app
        .post(&format!("/v1/listings/{listing}/bids"), &buyer.key, json!({"amount": 90000, "terms": terms}))
        .await
        .expect(201);
    assert_eq!(placed.body["bid"]["terms"], terms);
    let thread = placed.body["thread"]["id"].as_str().unwrap().to_owned();
    // The counterparty reads the thread and its events, envelopes and all.
    let read = app.get(format!("/v1/threads/{thread}"), &seller.key).await.expect(200);
    assert_eq!(read.body["bids"][0]["terms"], terms);
    let events = crate::support::eventually("the bid's event", || async {
        let page = app.get("/v1/events?after=0", &seller.key).await.expect(200);
        page.body["data"].as_array().filter(|data| !data.is_empty()).cloned()
    })
    .await;
    assert_eq!(events[0]["data"]["bid"]["terms"], terms);
}

#[tokio::test]
async fn a_commit_the_database_never_confirmed_is_reported_as_unknown() {
    let app = TestApp::spawn().await;
    let mut unit = app.market().begin().await.unwrap();
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(unit.conn()).await.unwrap();
    // The connection goes while the unit is open: its COMMIT gets no answer.
    sqlx::query("SELECT pg_terminate_backend($1)").bind(pid).execute(&app.pool).await.unwrap();
    let error = unit.commit_reporting().await.unwrap_err();
    assert!(matches!(error, haggle_server::market::Error::OutcomeUnknown(_)), "{error:?}");
    let answer = haggle_server::http::error::ApiError::from(error);
    assert_eq!((answer.status().as_u16(), answer.code.as_str()), (503, "unavailable"));
    assert!(answer.detail.contains("unknown") && answer.detail.contains("same Idempotency-Key"), "{}", answer.detail);
    assert_eq!(answer.retry_after, Some(1));
}

/// A request whose `Accept` allows none of a route's types is told so (406), not answered 500.
#[tokio::test]
async fn an_unacceptable_accept_header_is_a_406() {
    let app = TestApp::spawn().await;
    let agent = app.register("picky").await;
    for method in [Method::GET, Method::POST] {
        let body = if method == Method::POST { Body::Json(json!({})) } else { Body::None };
        let refused = app.send(method, "/mcp", Some(&agent.key), body, &[("accept", "text/plain")]).await;
        let refused = refused.expect_problem(406, "not_acceptable");
        assert_eq!(refused.header("content-type"), Some("application/problem+json"));
    }
}
