//! The operator console's session, its hold on the operator API, and its pages and assets (the
//! console in a real browser is `scripts/console-e2e/run`).

use reqwest::header::{HeaderMap, LOCATION, SET_COOKIE};
use reqwest::{Method, redirect};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::support::{ADMIN_TOKEN, Body, TestApp};

const COOKIE: &str = "__Host-haggle-console";

/// A client that, like a browser's test, sees redirects instead of following them.
fn browser() -> reqwest::Client {
    reqwest::Client::builder().redirect(redirect::Policy::none()).build().unwrap()
}

async fn sign_in_with(app: &TestApp, token: &str) -> reqwest::Response {
    browser()
        .post(format!("{}/console/session", app.base))
        .header("origin", &app.base)
        .form(&[("token", token)])
        .send()
        .await
        .unwrap()
}

/// Signs in and gives the `Cookie` header the browser would send.
async fn signed_in(app: &TestApp) -> String {
    let response = sign_in_with(app, ADMIN_TOKEN).await;
    assert_eq!(response.status(), 303);
    let set = response.headers()[SET_COOKIE].to_str().unwrap().to_owned();
    set.split(';').next().unwrap().to_owned()
}

async fn page(app: &TestApp, path: &str, cookie: Option<&str>) -> (u16, HeaderMap, String) {
    let mut request = browser().get(format!("{}{path}", app.base));
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    let response = request.send().await.unwrap();
    let (status, headers) = (response.status().as_u16(), response.headers().clone());
    (status, headers, response.text().await.unwrap())
}

async fn tier_of(app: &TestApp, agent: &crate::support::Agent) -> String {
    app.get("/v1/agents/me", &agent.key).await.expect(200).body["tier"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_wrong_token_is_refused_and_nothing_is_set() {
    let app = TestApp::spawn().await;
    for (token, status) in [("not-the-operator-token", 401), ("", 400), (&ADMIN_TOKEN[..ADMIN_TOKEN.len() - 1], 401)] {
        let response = sign_in_with(&app, token).await;
        assert_eq!(response.status(), status, "{token:?}");
        assert!(response.headers().get(SET_COOKIE).is_none(), "{token:?} set a cookie");
        let html = response.text().await.unwrap();
        assert!(html.contains("<form") && html.contains("role=\"alert\""), "the form again, with why: {html}");
        assert!(token.is_empty() || !html.contains(token), "the token was echoed");
    }
    // The right token from another site's form (no same Origin) is refused too.
    let response = browser()
        .post(format!("{}/console/session", app.base))
        .header("origin", "https://elsewhere.example")
        .form(&[("token", ADMIN_TOKEN)])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    assert!(response.headers().get(SET_COOKIE).is_none());
    assert_eq!(app.count("SELECT count(*) FROM console_sessions").await, 0);

    // Without an operator token configured, nobody signs in.
    let off = TestApp::spawn_with(|config| config.settings.admin_token = None).await;
    let response = sign_in_with(&off, ADMIN_TOKEN).await;
    assert_eq!(response.status(), 403);
    assert!(response.headers().get(SET_COOKIE).is_none());
}

#[tokio::test]
async fn signing_in_sets_a_secure_http_only_strict_cookie_whose_id_is_stored_hashed() {
    let app = TestApp::spawn().await;
    let response = sign_in_with(&app, ADMIN_TOKEN).await;
    assert_eq!(response.status(), 303);
    assert_eq!(response.headers()[LOCATION], "/console");
    let set = response.headers()[SET_COOKIE].to_str().unwrap().to_owned();
    let attributes: Vec<&str> = set.split(';').map(str::trim).collect();
    let id = attributes[0].strip_prefix(&format!("{COOKIE}=")).expect("the console's cookie");
    assert_eq!(id.len(), 43, "256 bits in base64url");
    for attribute in ["Secure", "HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=43200"] {
        assert!(attributes.contains(&attribute), "{attribute} missing from {set}");
    }
    assert!(!attributes.iter().any(|a| a.starts_with("Domain")), "a __Host- cookie has no Domain");
    assert!(!set.contains(ADMIN_TOKEN));
    assert!(response.text().await.unwrap().is_empty());

    let digest = Sha256::digest(id.as_bytes()).to_vec();
    let stored: Vec<Vec<u8>> =
        sqlx::query_scalar("SELECT id_digest FROM console_sessions").fetch_all(&app.pool).await.unwrap();
    assert_eq!(stored, vec![digest], "only the id's SHA-256 is stored");
    let lasts: f64 =
        sqlx::query_scalar("SELECT extract(epoch FROM expires_at - created_at)::float8 FROM console_sessions")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert!((43_190.0..=43_200.0).contains(&lasts), "{lasts}");

    // Signed in, the sign-in form sends the operator on to the console.
    let (status, headers, _) = page(&app, "/console/sign-in", Some(attributes[0])).await;
    assert_eq!((status, headers[LOCATION].to_str().unwrap()), (303, "/console"));
}

#[tokio::test]
async fn the_session_is_the_operator_for_reads_and_for_changes_from_its_own_origin_only() {
    let app = TestApp::spawn().await;
    let agent = app.register("console-agent").await;
    let cookie = signed_in(&app).await;
    let path = format!("/v1/admin/agents/{}", agent.id);
    let change = |headers: Vec<(&'static str, String)>| {
        let (app, path) = (&app, &path);
        async move {
            let headers: Vec<(&str, &str)> = headers.iter().map(|(name, value)| (*name, value.as_str())).collect();
            app.send(Method::PATCH, path, None, Body::Json(json!({ "tier": "AGENCY" })), &headers).await
        }
    };

    // A read needs the cookie only (a page's fetch, or its event stream).
    let read = app.send(Method::GET, &path, None, Body::None, &[("cookie", &cookie)]).await.expect(200);
    assert_eq!(read.body["tier"], "PUBLIC");
    app.send(Method::GET, "/v1/admin/stats?hours=1", None, Body::None, &[("cookie", &cookie)]).await.expect(200);

    // The cookie alone, another site's Origin, or an opaque one: forbidden, nothing changed.
    change(vec![("cookie", cookie.clone())]).await.expect_problem(403, "forbidden");
    change(vec![("cookie", cookie.clone()), ("origin", "https://elsewhere.example".into())])
        .await
        .expect_problem(403, "forbidden");
    change(vec![("cookie", cookie.clone()), ("origin", "null".into())]).await.expect_problem(403, "forbidden");
    change(vec![("cookie", cookie.clone()), ("sec-fetch-site", "cross-site".into())])
        .await
        .expect_problem(403, "forbidden");
    assert_eq!(tier_of(&app, &agent).await, "PUBLIC");

    // From the console's own page: the change is made.
    let changed = change(vec![("cookie", cookie.clone()), ("origin", app.base.clone())]).await.expect(200);
    assert_eq!(changed.body["tier"], "AGENCY");
    assert_eq!(tier_of(&app, &agent).await, "AGENCY");
    // A browser that sends no Origin but says the request is same-origin is believed.
    app.send(
        Method::PATCH,
        &path,
        None,
        Body::Json(json!({ "tier": "SEAT", "seat_id": "seat-1" })),
        &[("cookie", &cookie), ("sec-fetch-site", "same-origin")],
    )
    .await
    .expect(200);
    assert_eq!(tier_of(&app, &agent).await, "SEAT");

    // A made-up session, and no session at all, are not the operator.
    let forged = format!("{COOKIE}={}", "A".repeat(43));
    app.send(
        Method::PATCH,
        &path,
        None,
        Body::Json(json!({ "tier": "PUBLIC" })),
        &[("cookie", &forged), ("origin", &app.base)],
    )
    .await
    .expect_problem(401, "unauthenticated");
    app.send(Method::PATCH, &path, None, Body::Json(json!({ "tier": "PUBLIC" })), &[("origin", &app.base)])
        .await
        .expect_problem(401, "unauthenticated");
    // An agent's cookie-less key still cannot use the route, whatever else it sends.
    app.send(Method::PATCH, &path, Some(&agent.key), Body::Json(json!({ "tier": "PUBLIC" })), &[("cookie", &cookie)])
        .await
        .expect_problem(403, "forbidden");
    assert_eq!(tier_of(&app, &agent).await, "SEAT");
    // Suspending is a change like any other.
    app.send(Method::POST, format!("{path}/suspend"), None, Body::None, &[("cookie", &cookie)])
        .await
        .expect_problem(403, "forbidden");
    app.send(Method::POST, format!("{path}/suspend"), None, Body::None, &[("cookie", &cookie), ("origin", &app.base)])
        .await
        .expect(200);
    app.send(
        Method::POST,
        format!("{path}/reinstate"),
        None,
        Body::None,
        &[("cookie", &cookie), ("origin", &app.base)],
    )
    .await
    .expect(200);

    // Another instance of the deployment knows the session.
    let other = app.another_instance().await;
    let changed = other
        .send(
            Method::PATCH,
            &path,
            None,
            Body::Json(json!({ "tier": "ADVERTISER", "advertiser_id": "adv-1" })),
            &[("cookie", &cookie), ("origin", &other.base)],
        )
        .await
        .expect(200);
    assert_eq!(changed.body["tier"], "ADVERTISER");
}

#[tokio::test]
async fn signing_out_or_expiry_ends_the_session_everywhere() {
    let app = TestApp::spawn().await;
    let agent = app.register("console-agent").await;
    let path = format!("/v1/admin/agents/{}", agent.id);
    let cookie = signed_in(&app).await;
    assert_eq!(page(&app, "/console", Some(&cookie)).await.0, 200);

    // Signing out needs the console's own origin too.
    let out = |origin: &str| {
        browser()
            .post(format!("{}/console/sign-out", app.base))
            .header("cookie", &cookie)
            .header("origin", origin)
            .send()
    };
    assert_eq!(out("https://elsewhere.example").await.unwrap().status(), 403);
    assert_eq!(page(&app, "/console", Some(&cookie)).await.0, 200);
    let response = out(&app.base).await.unwrap();
    assert_eq!(response.status(), 303);
    assert_eq!(response.headers()[LOCATION], "/console/sign-in");
    let cleared = response.headers()[SET_COOKIE].to_str().unwrap();
    assert!(cleared.starts_with(&format!("{COOKIE}=;")) && cleared.contains("Max-Age=0"), "{cleared}");
    assert_eq!(app.count("SELECT count(*) FROM console_sessions").await, 0);

    let (status, headers, _) = page(&app, "/console", Some(&cookie)).await;
    assert_eq!((status, headers[LOCATION].to_str().unwrap()), (303, "/console/sign-in"));
    app.send(
        Method::PATCH,
        &path,
        None,
        Body::Json(json!({ "tier": "AGENCY" })),
        &[("cookie", &cookie), ("origin", &app.base)],
    )
    .await
    .expect_problem(401, "unauthenticated");

    // A session past its expiry is over, though its row is still there.
    let cookie = signed_in(&app).await;
    sqlx::query(
        "UPDATE console_sessions SET created_at = now() - interval '13 hours', expires_at = now() - interval '1 hour'",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    assert_eq!(page(&app, "/console/agents", Some(&cookie)).await.0, 303);
    app.send(
        Method::PATCH,
        &path,
        None,
        Body::Json(json!({ "tier": "AGENCY" })),
        &[("cookie", &cookie), ("origin", &app.base)],
    )
    .await
    .expect_problem(401, "unauthenticated");
    assert_eq!(tier_of(&app, &agent).await, "PUBLIC");
    // The next sign-in clears it away.
    signed_in(&app).await;
    assert_eq!(app.count("SELECT count(*) FROM console_sessions WHERE expires_at <= now()").await, 0);
}

#[tokio::test]
async fn wrong_sign_ins_never_keep_the_operator_out() {
    let app = TestApp::spawn().await;
    let agent = app.register("bystander").await;
    let mut statuses = Vec::new();
    for n in 0..25 {
        statuses.push(sign_in_with(&app, &format!("guess-{n:04}")).await.status().as_u16());
    }
    assert_eq!(statuses.iter().filter(|s| **s == 401).count(), 20, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|s| **s == 429).count(), 5, "{statuses:?}");
    // The right token signs in, from the same address; the API takes it, and agents' keys.
    assert_eq!(sign_in_with(&app, ADMIN_TOKEN).await.status(), 303);
    app.get("/v1/admin/stats?hours=1", ADMIN_TOKEN).await.expect(200);
    app.get("/v1/agents/me", &agent.key).await.expect(200);
}

/// The operator's event stream opened with a session's cookie.
async fn market_stream(app: &TestApp, cookie: &str) -> reqwest::Response {
    let response =
        browser().get(format!("{}/v1/admin/events/stream", app.base)).header("cookie", cookie).send().await.unwrap();
    assert_eq!(response.status(), 200);
    response
}

/// The stream's next chunk (an event or a heartbeat), or `None` once it has ended.
async fn next_chunk(stream: &mut reqwest::Response) -> Option<bytes::Bytes> {
    tokio::time::timeout(std::time::Duration::from_secs(10), stream.chunk())
        .await
        .expect("a heartbeat comes every second while the stream is open")
        .unwrap()
}

#[tokio::test]
async fn signing_out_ends_the_operator_event_stream_opened_with_the_session() {
    let app =
        TestApp::spawn_with(|config| config.settings.stream_recheck = std::time::Duration::from_millis(200)).await;
    let (ended, kept) = (signed_in(&app).await, signed_in(&app).await);
    let mut ending = market_stream(&app, &ended).await;
    let mut staying = market_stream(&app, &kept).await;
    assert!(next_chunk(&mut ending).await.is_some(), "the stream is open");
    let out = browser()
        .post(format!("{}/console/sign-out", app.base))
        .header("cookie", &ended)
        .header("origin", &app.base)
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 303);
    let signed_out = std::time::Instant::now();
    while next_chunk(&mut ending).await.is_some() {
        assert!(signed_out.elapsed() < std::time::Duration::from_secs(5), "the stream outlived its session");
    }
    // The other session's stream goes on.
    assert!(next_chunk(&mut staying).await.is_some(), "a heartbeat on the open session's stream");
}

#[tokio::test]
async fn the_pages_and_assets_are_served_with_their_types_caching_and_policy() {
    let app = TestApp::spawn().await;
    // Without a session, every page sends the visitor to the sign-in form.
    let id = uuid::Uuid::now_v7();
    for path in
        ["/console", "/console/agents", "/console/webhooks", "/console/health", &format!("/console/threads/{id}")]
    {
        let (status, headers, _) = page(&app, path, None).await;
        assert_eq!((status, headers[LOCATION].to_str().unwrap()), (303, "/console/sign-in"), "{path}");
    }
    let (status, headers, html) = page(&app, "/console/sign-in", None).await;
    assert_eq!(status, 200);
    assert!(headers["content-type"].to_str().unwrap().starts_with("text/html"));
    assert!(html.contains("action=\"/console/session\"") && html.contains("method=\"post\""));

    let cookie = signed_in(&app).await;
    let mut assets = std::collections::BTreeSet::new();
    for path in
        ["/console", "/console/agents", "/console/webhooks", "/console/health", &format!("/console/threads/{id}")]
    {
        let (status, headers, html) = page(&app, path, Some(&cookie)).await;
        assert_eq!(status, 200, "{path}");
        assert!(headers["content-type"].to_str().unwrap().starts_with("text/html"));
        let policy = headers["content-security-policy"].to_str().unwrap();
        for directive in ["default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"] {
            assert!(policy.contains(directive), "{path}: {policy}");
        }
        assert_eq!(headers["cache-control"], "no-store");
        assert_eq!(headers["x-content-type-options"], "nosniff");
        assert!(!html.contains("<script>") && !html.contains(" style=\""), "{path}: no inline script or style");
        assert!(!html.contains(ADMIN_TOKEN), "{path} shows the operator token");
        assert!(!html.contains("//cdn") && !html.contains("https://"), "{path} loads nothing from elsewhere");
        for piece in html.split("\"/console/assets/").skip(1) {
            assets.insert(format!("/console/assets/{}", piece.split('"').next().unwrap()));
        }
    }
    let types: Vec<(&str, &str)> = vec![
        ("console.js", "text/javascript"),
        ("console.css", "text/css"),
        ("uplot-1.6.32.min.js", "text/javascript"),
        ("uplot-1.6.32.min.css", "text/css"),
        ("uplot-LICENSE.txt", "text/plain"),
    ];
    assert_eq!(assets.len(), types.len(), "{assets:?}");
    for (name, content_type) in types {
        let url = assets.iter().find(|url| url.ends_with(&format!("/{name}"))).unwrap_or_else(|| panic!("{name}"));
        // The assets need no session: they hold nothing of the market.
        let (status, headers, text) = page(&app, url, None).await;
        assert_eq!(status, 200, "{url}");
        assert!(headers["content-type"].to_str().unwrap().starts_with(content_type), "{url}");
        assert_eq!(headers["cache-control"], "public, max-age=31536000, immutable", "{url}");
        assert!(!text.is_empty());
        // Under another version, served but not kept.
        let other = url.replace(url.split('/').nth(3).unwrap(), "0000");
        let (status, headers, _) = page(&app, &other, None).await;
        assert_eq!((status, headers["cache-control"].to_str().unwrap()), (200, "no-cache"), "{other}");
    }
    let license = page(&app, assets.iter().find(|url| url.ends_with("LICENSE.txt")).unwrap(), None).await.2;
    assert!(license.contains("MIT License"));
    assert_eq!(page(&app, "/console/assets/0/nothing.js", None).await.0, 404);
}

#[test]
fn the_console_lives_under_its_path_and_outside_the_api_document() {
    let spec = crate::spec::spec();
    let documented = spec["paths"].as_object().unwrap();
    for (_, path) in haggle_server::http::console::pages() {
        assert!(path.starts_with("/console"), "{path}");
        assert!(!documented.contains_key(path), "{path}: the console's pages are not part of the API");
    }
    assert!(!documented.keys().any(|path| path.starts_with("/console")));
}

/// A client that posts the order page's decide form as a browser would, from `origin`.
async fn decide_form(
    app: &TestApp,
    thread: &str,
    cookie: Option<&str>,
    origin: Option<&str>,
    fields: &[(&str, &str)],
) -> (u16, HeaderMap, String) {
    let mut request = browser().post(format!("{}/console/threads/{thread}/decide", app.base)).form(fields);
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    if let Some(origin) = origin {
        request = request.header("origin", origin);
    }
    let response = request.send().await.unwrap();
    let (status, headers) = (response.status().as_u16(), response.headers().clone());
    (status, headers, response.text().await.unwrap())
}

#[tokio::test]
async fn an_orders_page_shows_its_timeline_and_decides_an_escalated_refund_through_its_form() {
    let app = TestApp::spawn().await;
    let deal = crate::support::Deal::new(&app, json!({})).await;
    let bought = app.post_empty(format!("/v1/listings/{}/purchase", deal.listing), &deal.buyer.key).await.expect(201);
    let order = bought.body["order"]["id"].as_str().unwrap().to_owned();
    let payment = app
        .post(format!("/v1/orders/{order}/payments"), &deal.buyer.key, json!({ "amount": 100000, "reference": "ch_9" }))
        .await
        .expect(201);
    let payment = payment.body["payment"]["id"].as_str().unwrap().to_owned();
    app.post_empty(format!("/v1/orders/{order}/payments/{payment}/confirm"), &deal.seller.key).await.expect(200);
    let refund = json!({ "kind": "refund", "amount": 30000, "terms": { "reason": "damaged" } });
    let opened = app.post(format!("/v1/orders/{order}/negotiations"), &deal.buyer.key, refund).await.expect(201);
    let thread = opened.body["thread"]["id"].as_str().unwrap().to_owned();
    let bid = opened.body["bid"]["id"].as_str().unwrap().to_owned();
    app.post_empty(format!("/v1/bids/{bid}/reject"), &deal.seller.key).await.expect(200);
    app.post_empty(format!("/v1/threads/{thread}/escalate"), &deal.buyer.key).await.expect(200);
    let path = format!("/console/orders/{order}");

    // Without a session: the sign-in form, for the pages and the form alike.
    for page_path in ["/console/orders", path.as_str()] {
        let (status, headers, _) = page(&app, page_path, None).await;
        assert_eq!((status, headers[LOCATION].to_str().unwrap()), (303, "/console/sign-in"), "{page_path}");
    }
    let (status, headers, _) =
        decide_form(&app, &thread, None, Some(&app.base), &[("amount", "100"), ("note", "n")]).await;
    assert_eq!((status, headers[LOCATION].to_str().unwrap()), (303, "/console/sign-in"));

    let cookie = signed_in(&app).await;
    let (status, _, list) = page(&app, "/console/orders", Some(&cookie)).await;
    assert_eq!(status, 200);
    assert!(list.contains(&format!("href=\"/console/orders/{order}\"")), "the list links the order");
    let (status, _, missing) = page(&app, &format!("/console/orders/{}", uuid::Uuid::now_v7()), Some(&cookie)).await;
    assert_eq!(status, 404);
    assert!(missing.contains("No order with this id exists"));
    let (status, _, _) = page(&app, "/console/orders/not-a-uuid", Some(&cookie)).await;
    assert_eq!(status, 400);

    let (status, _, html) = page(&app, &path, Some(&cookie)).await;
    assert_eq!(status, 200);
    for shown in [
        "order made",
        "payment recorded",
        "payment confirmed",
        "refund opened",
        "refund ended",
        "escalated",
        "300.00 USD",
        "waiting for the operator",
        "id=\"decide\"",
        &format!("action=\"/console/threads/{thread}/decide\""),
    ] {
        assert!(html.contains(shown), "the order page shows {shown:?}");
    }
    let refunded = |app: &TestApp| {
        let order = order.clone();
        let pool = app.pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT refunded_amount FROM orders WHERE id = $1::uuid")
                .bind(&order)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };

    // Another site's form, or none named: refused, nothing decided.
    let fields = [("amount", "120.50"), ("note", "a scratch, not a crack")];
    for origin in [Some("https://elsewhere.example"), Some("null"), None] {
        let (status, _, _) = decide_form(&app, &thread, Some(&cookie), origin, &fields).await;
        assert_eq!(status, 403, "{origin:?}");
    }
    // Amounts that are not amounts, or more than was paid: refused with why, the typed values
    // kept, nothing decided.
    for (amount, status, why) in
        [("twelve", 422, "is not one"), ("-5", 422, "is not one"), ("1.234", 422, "is not one"), ("1000.01", 409, "")]
    {
        let (got, _, html) =
            decide_form(&app, &thread, Some(&cookie), Some(&app.base), &[("amount", amount), ("note", "n")]).await;
        assert_eq!(got, status, "{amount}");
        assert!(html.contains("role=\"alert\">") && html.contains(why), "{amount}: {html}");
        assert!(html.contains(&format!("value=\"{amount}\"")), "the form keeps what was typed");
    }
    let (got, _, html) = decide_form(&app, &thread, Some(&cookie), Some(&app.base), &[("amount", "10")]).await;
    assert_eq!(got, 422, "a decision needs its note: {html}");
    assert_eq!(refunded(&app).await, 0);
    assert_eq!(app.count("SELECT count(*) FROM threads WHERE decided_at IS NOT NULL").await, 0);

    // Decided through the form: back to the order's page, which shows the refund.
    let (status, headers, _) = decide_form(&app, &thread, Some(&cookie), Some(&app.base), &fields).await;
    assert_eq!((status, headers[LOCATION].to_str().unwrap()), (303, path.as_str()));
    assert_eq!(refunded(&app).await, 12050);
    let (_, _, html) = page(&app, &path, Some(&cookie)).await;
    assert!(html.contains("operator decided") && html.contains("120.50 USD refunded"), "{html}");
    assert!(!html.contains("id=\"decide\""), "a decided refund has no form");
    // The same form again: the decision stands alone.
    let (status, _, _) = decide_form(&app, &thread, Some(&cookie), Some(&app.base), &fields).await;
    assert_eq!(status, 409);
    assert_eq!(refunded(&app).await, 12050);
    let decided = app.get(format!("/v1/threads/{thread}"), &deal.seller.key).await.expect(200);
    assert_eq!(decided.body["escalation"]["decision"]["amount"], 12050);
}
