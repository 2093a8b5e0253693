//! The approval page (`/approve`) over HTTP: signing in with an approver token (a session
//! cookie, never the token), the JSON its script polls, the approve and deny forms held to the
//! page's own `Origin`, another agent's request not existing, and a revoked approver's session
//! letting nothing in (the page in a real browser is `scripts/approvals-e2e/run`).

use reqwest::header::{LOCATION, SET_COOKIE};
use reqwest::redirect;
use serde_json::{Value, json};

use crate::support::{Agent, Deal, TestApp};

/// A client that sees redirects instead of following them.
fn browser() -> reqwest::Client {
    reqwest::Client::builder().redirect(redirect::Policy::none()).build().unwrap()
}

async fn sign_in_with(app: &TestApp, token: &str) -> reqwest::Response {
    browser()
        .post(format!("{}/approve/session", app.base))
        .header("origin", &app.base)
        .form(&[("token", token)])
        .send()
        .await
        .unwrap()
}

/// Signs in and gives the `Cookie` header the browser would send.
async fn signed_in(app: &TestApp, token: &str) -> String {
    let response = sign_in_with(app, token).await;
    assert_eq!(response.status(), 303);
    let set = response.headers()[SET_COOKIE].to_str().unwrap().to_owned();
    assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict") && set.contains("Secure"), "{set}");
    assert!(!set.contains(token), "the cookie holds a session id, never the token");
    set.split(';').next().unwrap().to_owned()
}

async fn approver(app: &TestApp, agent: &Agent, name: &str) -> (String, String) {
    let resp = app.post("/v1/agents/me/approvers", &agent.key, json!({ "name": name })).await.expect(201);
    (resp.body["token"].as_str().unwrap().to_owned(), resp.body["approver"]["id"].as_str().unwrap().to_owned())
}

/// A buyer whose acceptances above 500.00 wait for approval, with its acceptance of the
/// seller's 600.00 held: the request's id.
async fn held_acceptance(app: &TestApp, deal: &Deal) -> String {
    let rules = json!({ "rules": [{ "move": "accept", "buyer_above": 50000 }] });
    app.put("/v1/agents/me/approval-rules", &deal.buyer.key, rules).await.expect(200);
    let bid = app.place(&deal.buyer, &deal.listing, 40000).await;
    let counter = app.counter(&deal.seller, &bid, 60000).await;
    let held = app.post_empty(format!("/v1/bids/{counter}/accept"), &deal.buyer.key).await.expect(202);
    held.body["approval"]["id"].as_str().unwrap().to_owned()
}

async fn requests(app: &TestApp, cookie: Option<&str>) -> (u16, Value) {
    let mut request = browser().get(format!("{}/approve/requests", app.base));
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn post_form(
    app: &TestApp,
    path: &str,
    cookie: &str,
    origin: Option<&str>,
    form: &[(&str, &str)],
) -> reqwest::Response {
    let mut request = browser().post(format!("{}{path}", app.base)).header("cookie", cookie).form(form);
    if let Some(origin) = origin {
        request = request.header("origin", origin);
    }
    request.send().await.unwrap()
}

#[tokio::test]
async fn an_approver_signs_in_sees_the_held_move_with_its_ladder_and_approves_it() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let (token, _) = approver(&app, &deal.buyer, "Alice").await;
    let id = held_acceptance(&app, &deal).await;

    // Without a session: the sign-in form, and the JSON refused.
    let form = browser().get(format!("{}/approve", app.base)).send().await.unwrap();
    assert_eq!(form.status(), 200);
    let csp = form.headers()["content-security-policy"].to_str().unwrap().to_owned();
    assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(form.text().await.unwrap().contains("action=\"/approve/session\""));
    assert_eq!(requests(&app, None).await.0, 401);

    let cookie = signed_in(&app, &token).await;
    let page = browser().get(format!("{}/approve", app.base)).header("cookie", &cookie).send().await.unwrap();
    let html = page.text().await.unwrap();
    assert!(html.contains("Alice") && html.contains("/approve/assets/"), "{html}");

    let (status, body) = requests(&app, Some(&cookie)).await;
    assert_eq!(status, 200, "{body}");
    let shown = &body["pending"][0];
    assert_eq!(shown["approval"]["id"], id.as_str());
    assert_eq!(shown["approval"]["move"]["amount"], 60000);
    assert_eq!(shown["listing"]["id"], deal.listing.as_str());
    let ladder: Vec<i64> = shown["ladder"].as_array().unwrap().iter().map(|b| b["amount"].as_i64().unwrap()).collect();
    assert_eq!(ladder, [40000, 60000]);

    // Approving with a budget below the move is refused back to the page; then approved.
    let low = post_form(
        &app,
        &format!("/approve/requests/{id}/approve"),
        &cookie,
        Some(&app.base),
        &[("budget_amount", "50000"), ("budget_hours", "2")],
    )
    .await;
    assert_eq!(low.status(), 303);
    assert!(low.headers()[LOCATION].to_str().unwrap().ends_with("refused=validation_failed"));
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 0);
    let approved =
        post_form(&app, &format!("/approve/requests/{id}/approve"), &cookie, Some(&app.base), &[("note", "ok")]).await;
    assert_eq!(approved.status(), 303);
    assert_eq!(approved.headers()[LOCATION].to_str().unwrap(), format!("/approve?answered={id}"));
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 1);
    let read = app.get(format!("/v1/approvals/{id}"), &deal.buyer.key).await.expect(200);
    assert_eq!((read.body["status"].as_str(), read.body["approver"].as_str()), (Some("APPROVED"), Some("Alice")));

    // The page shows how it ended, and nothing pending.
    let response = browser()
        .get(format!("{}/approve/requests?answered={id}", app.base))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["answered"]["status"], "APPROVED");
    assert_eq!(body["pending"], json!([]));
}

#[tokio::test]
async fn a_bad_token_a_foreign_origin_and_another_agents_request_are_refused() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let (token, _) = approver(&app, &deal.buyer, "Alice").await;
    let id = held_acceptance(&app, &deal).await;

    for bad in ["hap_not-a-token", "hk_something", "", &deal.buyer.key] {
        let response = sign_in_with(&app, bad).await;
        assert!([400, 401].contains(&response.status().as_u16()), "{bad:?}: {}", response.status());
        assert!(response.headers().get(SET_COOKIE).is_none(), "{bad:?} set a cookie");
    }
    let foreign = browser()
        .post(format!("{}/approve/session", app.base))
        .header("origin", "https://elsewhere.example")
        .form(&[("token", token.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), 403);
    assert!(foreign.headers().get(SET_COOKIE).is_none());
    assert_eq!(app.count("SELECT count(*) FROM approver_sessions").await, 0);

    let cookie = signed_in(&app, &token).await;
    // A post from another site's page, or with no Origin at all, changes nothing.
    for origin in [Some("https://elsewhere.example"), None] {
        let response = post_form(&app, &format!("/approve/requests/{id}/approve"), &cookie, origin, &[]).await;
        assert_eq!(response.status(), 403, "{origin:?}");
    }
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 0);

    // Another agent's request does not exist for this approver.
    let other = Deal::new(&app, json!({})).await;
    let theirs = held_acceptance(&app, &other).await;
    let response = post_form(&app, &format!("/approve/requests/{theirs}/approve"), &cookie, Some(&app.base), &[]).await;
    assert_eq!(response.status(), 404);
    let response = post_form(&app, &format!("/approve/requests/{theirs}/deny"), &cookie, Some(&app.base), &[]).await;
    assert_eq!(response.status(), 404);
    let read = app.get(format!("/v1/approvals/{theirs}"), &other.buyer.key).await.expect(200);
    assert_eq!(read.body["status"], "PENDING");
    let (_, body) = requests(&app, Some(&cookie)).await;
    assert!(body["pending"].as_array().unwrap().iter().all(|shown| shown["approval"]["id"] != theirs.as_str()));

    // A session cookie is no API key.
    let response = browser().get(format!("{}/v1/approvals", app.base)).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(response.status(), 401);
}

#[tokio::test]
async fn a_denial_from_the_page_and_a_revoked_approvers_session_ends() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({})).await;
    let (token, approver_id) = approver(&app, &deal.buyer, "Bob").await;
    let id = held_acceptance(&app, &deal).await;
    let cookie = signed_in(&app, &token).await;

    let denied =
        post_form(&app, &format!("/approve/requests/{id}/deny"), &cookie, Some(&app.base), &[("note", "too much")])
            .await;
    assert_eq!(denied.status(), 303);
    let read = app.get(format!("/v1/approvals/{id}"), &deal.buyer.key).await.expect(200);
    assert_eq!((read.body["status"].as_str(), read.body["note"].as_str()), (Some("DENIED"), Some("too much")));
    // Answered twice: back to the page with the conflict's code.
    let again = post_form(&app, &format!("/approve/requests/{id}/approve"), &cookie, Some(&app.base), &[]).await;
    assert!(again.headers()[LOCATION].to_str().unwrap().ends_with("refused=invalid_transition"));

    // Revoked: the session lets nothing in from the next request on.
    app.delete(format!("/v1/agents/me/approvers/{approver_id}"), &deal.buyer.key).await.expect(200);
    assert_eq!(requests(&app, Some(&cookie)).await.0, 401);

    // Signing out ends a session.
    let (token, _) = approver(&app, &deal.buyer, "Carol").await;
    let cookie = signed_in(&app, &token).await;
    assert_eq!(requests(&app, Some(&cookie)).await.0, 200);
    let out = post_form(&app, "/approve/sign-out", &cookie, Some(&app.base), &[]).await;
    assert_eq!(out.status(), 303);
    assert_eq!(requests(&app, Some(&cookie)).await.0, 401);
}

#[test]
fn the_page_lives_under_its_path_and_outside_the_api_document() {
    let spec = crate::spec::spec();
    let documented = spec["paths"].as_object().unwrap();
    for (_, path) in haggle_server::http::approve::pages() {
        assert!(path.starts_with("/approve"), "{path}");
        assert!(!documented.contains_key(path), "{path}: the page is not part of the API");
    }
}
