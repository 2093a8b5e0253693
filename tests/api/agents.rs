//! Agents, keys, and the operator's routes.

use reqwest::Method;
use serde_json::json;

use std::time::{Duration, Instant};

use crate::support::{ADMIN_TOKEN, Body, NOTIFIED_WITHIN, TestApp, remember_keys_for_an_hour};

#[tokio::test]
async fn registration_shows_the_key_once_and_stores_a_digest() {
    let app = TestApp::spawn().await;
    let resp =
        app.send(Method::POST, "/v1/agents", None, Body::Json(json!({ "name": "  Ada  " })), &[]).await.expect(201);
    assert_eq!(resp.body["agent"]["name"], "Ada");
    assert_eq!(resp.body["agent"]["tier"], "PUBLIC");
    let key = resp.body["api_key"].as_str().unwrap();
    assert!(key.starts_with("hk_") && key.len() >= 3 + 22, "at least 128 bits");
    let stored: Vec<u8> = sqlx::query_scalar("SELECT digest FROM api_keys").fetch_one(&app.pool).await.unwrap();
    assert_eq!(stored, haggle_server::secrets::sha256(key.as_bytes()));
    let me = app.get("/v1/agents/me", key).await.expect(200);
    assert_eq!(me.body["id"], resp.body["agent"]["id"]);
    let keys = app.get("/v1/agents/me/keys", key).await.expect(200);
    assert!(!keys.body.to_string().contains(key), "the key is never shown again");
}

#[tokio::test]
async fn keys_can_be_added_and_revoked_but_not_the_last_one() {
    let app = TestApp::spawn().await;
    let agent = app.register("agent").await;
    let other = app.register("other").await;
    let added = app.post_empty("/v1/agents/me/keys", &agent.key).await.expect(201);
    let second = added.body["api_key"].as_str().unwrap().to_owned();
    let second_id = added.body["key"]["id"].as_str().unwrap().to_owned();
    app.get("/v1/agents/me", &second).await.expect(200);

    let keys = app.get("/v1/agents/me/keys", &agent.key).await.expect(200);
    let first_id = keys.body["data"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(keys.body["data"].as_array().unwrap().len(), 2);

    // Someone else's key id does not exist for this agent.
    app.send(Method::DELETE, &format!("/v1/agents/me/keys/{second_id}"), Some(&other.key), Body::None, &[])
        .await
        .expect_problem(404, "not_found");
    let revoked = app.send(Method::DELETE, format!("/v1/agents/me/keys/{first_id}"), Some(&second), Body::None, &[]);
    assert!(revoked.await.expect(200).body["revoked_at"].is_string());
    app.get("/v1/agents/me", &agent.key).await.expect_problem(401, "unauthenticated");
    app.send(Method::DELETE, &format!("/v1/agents/me/keys/{second_id}"), Some(&second), Body::None, &[])
        .await
        .expect_problem(409, "invalid_transition");
    app.get("/v1/agents/me", &second).await.expect(200);
}

#[tokio::test]
async fn the_operator_sets_tiers_and_identity() {
    let app = TestApp::spawn().await;
    let agent = app.register("agent").await;
    let path = format!("/v1/admin/agents/{}", agent.id);
    let updated =
        app.patch(&path, ADMIN_TOKEN, json!({ "tier": "ADVERTISER", "agency_id": "agency-7" })).await.expect(200);
    assert_eq!(
        (updated.body["tier"].as_str(), updated.body["agency_id"].as_str()),
        (Some("ADVERTISER"), Some("agency-7"))
    );
    let cleared = app.patch(&path, ADMIN_TOKEN, json!({ "agency_id": null, "seat_id": "seat-1" })).await.expect(200);
    assert_eq!(cleared.body["agency_id"], serde_json::Value::Null);
    assert_eq!(cleared.body["tier"], "ADVERTISER", "absent fields are left alone");
    assert_eq!(cleared.body["seat_id"], "seat-1");
    app.patch(format!("/v1/admin/agents/{}", uuid::Uuid::now_v7()), ADMIN_TOKEN, json!({ "tier": "SEAT" }))
        .await
        .expect_problem(404, "not_found");
    app.patch(&path, ADMIN_TOKEN, json!({ "agency_id": "" })).await.expect_problem(422, "validation_failed");
}

#[tokio::test]
async fn the_operator_api_is_off_without_a_token_and_registration_can_close() {
    let app = TestApp::spawn_with(|config| {
        config.settings.admin_token = None;
        config.settings.open_registration = false;
    })
    .await;
    app.send(Method::POST, "/v1/agents", None, Body::Json(json!({ "name": "x" })), &[])
        .await
        .expect_problem(403, "forbidden");
    app.patch(format!("/v1/admin/agents/{}", uuid::Uuid::now_v7()), ADMIN_TOKEN, json!({ "tier": "SEAT" }))
        .await
        .expect_problem(403, "forbidden");
    assert_eq!(app.count("SELECT count(*) FROM agents").await, 0);
}

#[tokio::test]
async fn health_and_the_spec_are_served() {
    let app = TestApp::spawn().await;
    assert_eq!(app.send(Method::GET, "/healthz", None, Body::None, &[]).await.expect(200).body["status"], "ok");
    assert_eq!(app.send(Method::GET, "/readyz", None, Body::None, &[]).await.expect(200).body["status"], "ready");
    let spec = app.send(Method::GET, "/openapi.yaml", None, Body::None, &[]).await.expect(200);
    assert_eq!(spec.header("content-type"), Some("application/yaml"));
    assert_eq!(
        spec.body.as_str().unwrap(),
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.yaml")).unwrap()
    );
    let resp = app.send(Method::GET, "/healthz", None, Body::None, &[]).await;
    assert!(resp.header("x-request-id").is_some(), "every answer carries a request id");
}

#[tokio::test]
async fn agents_over_their_rate_are_told_when_to_retry() {
    // One request a second, in bursts of one: the second of two quick requests is refused.
    let app = TestApp::spawn_with(|config| config.settings.rate_limit = 1).await;
    let agent = app.register("eager").await;
    // Registration is limited per client address (to a tenth of the rate, at least one a second).
    app.send(Method::POST, "/v1/agents", None, Body::Json(json!({ "name": "second" })), &[])
        .await
        .expect_problem(429, "rate_limited");
    assert_eq!(app.count("SELECT count(*) FROM agents").await, 1);
    app.get("/v1/agents/me", &agent.key).await.expect(200);
    let limited = app.get("/v1/agents/me", &agent.key).await.expect_problem(429, "rate_limited");
    assert_eq!(limited.header("retry-after"), Some("1"));
}

/// Instances remember which agent a key belongs to (HAGGLE_KEY_CACHE_TTL), and tell each other
/// when a key is revoked or a tier changes: here the memory lasts an hour, and still the other
/// instance refuses the revoked key, and answers to the new tier, long before it would lapse.
#[tokio::test]
async fn a_revoked_key_and_a_new_tier_reach_every_instance_at_once() {
    let first = TestApp::spawn_with(remember_keys_for_an_hour).await;
    let second = first.another_instance_with(remember_keys_for_an_hour).await;
    let seller = first.register("seller").await;
    let buyer = first.register("buyer").await;
    let listing = first
        .post(
            "/v1/listings",
            &seller.key,
            json!({ "title": "Lamp", "ask_amount": 10000, "min_negotiation_tier": "AGENCY" }),
        )
        .await
        .expect(201);
    let bids = format!("/v1/listings/{}/bids", listing.body["id"].as_str().unwrap());

    // The second instance has both keys in memory, and the buyer's PUBLIC tier.
    let added = second.post_empty("/v1/agents/me/keys", &buyer.key).await.expect(201);
    let spare = added.body["api_key"].as_str().unwrap().to_owned();
    let spare_id = added.body["key"]["id"].as_str().unwrap().to_owned();
    second.get("/v1/agents/me", &spare).await.expect(200);
    second.post(&bids, &buyer.key, json!({ "amount": 9000 })).await.expect_problem(403, "negotiation_not_allowed");

    // Both changes are made through the first instance.
    first
        .send(Method::DELETE, format!("/v1/agents/me/keys/{spare_id}"), Some(&buyer.key), Body::None, &[])
        .await
        .expect(200);
    first.patch(format!("/v1/admin/agents/{}", buyer.id), ADMIN_TOKEN, json!({ "tier": "AGENCY" })).await.expect(200);

    let started = Instant::now();
    loop {
        let refused = second.get("/v1/agents/me", &spare).await.status == 401;
        if refused {
            break;
        }
        assert!(started.elapsed() < NOTIFIED_WITHIN, "the second instance still takes the revoked key");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    loop {
        let placed = second.post(&bids, &buyer.key, json!({ "amount": 9000 })).await;
        if placed.status == 201 {
            break;
        }
        assert_eq!(placed.body["code"], "negotiation_not_allowed");
        assert!(started.elapsed() < NOTIFIED_WITHIN, "the second instance still holds the old tier");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn an_agent_holds_at_most_twenty_live_keys_listed_a_page_at_a_time() {
    let app = TestApp::spawn().await;
    let agent = app.register("key collector").await;
    let mut ids = Vec::new();
    for _ in 1..20 {
        ids.push(app.post_empty("/v1/agents/me/keys", &agent.key).await.expect(201).body["key"]["id"].clone());
    }
    let before = app.snapshot().await;
    let refused = app.post_empty("/v1/agents/me/keys", &agent.key).await.expect_problem(422, "validation_failed");
    assert_eq!(refused.body["errors"][0]["field"], "keys");
    assert_eq!(app.snapshot().await, before, "the refused key changed nothing");

    // Revoking one makes room for another.
    let revoked = ids[0].as_str().unwrap();
    app.delete(format!("/v1/agents/me/keys/{revoked}"), &agent.key).await.expect(200);
    app.post_empty("/v1/agents/me/keys", &agent.key).await.expect(201);

    // 21 keys in all, oldest first, in pages of 8.
    let mut listed = Vec::new();
    let mut path = "/v1/agents/me/keys?limit=8".to_owned();
    loop {
        let page = app.get(&path, &agent.key).await.expect(200).body;
        listed.extend(page["data"].as_array().unwrap().iter().map(|key| key["id"].as_str().unwrap().to_owned()));
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/v1/agents/me/keys?limit=8&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(listed.len(), 21);
    assert!(listed.windows(2).all(|pair| pair[0] < pair[1]), "oldest first: {listed:?}");
    app.get("/v1/agents/me/keys?limit=0", &agent.key).await.expect_problem(422, "validation_failed");
}

/// `n` wrong API keys from the client `forwarded_for` names (none: the peer), beginning with
/// `prefix`; the statuses they were answered with.
async fn guess(app: &TestApp, prefix: &str, n: usize, forwarded_for: Option<&str>) -> Vec<u16> {
    let mut statuses = Vec::new();
    for i in 0..n {
        let headers: Vec<(&str, &str)> = forwarded_for.map(|ip| ("x-forwarded-for", ip)).into_iter().collect();
        let key = format!("{prefix}{i:040}");
        let resp = app.send(Method::GET, "/v1/agents/me", Some(&key), Body::None, &headers).await;
        if resp.status == 429 {
            assert_eq!(resp.code(), "rate_limited");
            assert!(resp.header("retry-after").is_some());
        }
        statuses.push(resp.status);
    }
    statuses
}

fn count(statuses: &[u16], status: u16) -> usize {
    statuses.iter().filter(|s| **s == status).count()
}

#[tokio::test]
async fn wrong_credentials_are_throttled_but_never_a_valid_one() {
    let app = TestApp::spawn().await;
    let agent = app.register("honest").await;
    let other = app.register("bystander").await;
    // Wrong API keys: answered 401 until the address has used up its allowance, then 429 with
    // Retry-After.
    let statuses = guess(&app, "hk_wrong_", 25, None).await;
    assert_eq!((count(&statuses, 401), count(&statuses, 429)), (20, 5), "{statuses:?}");
    // The right keys, from the same address, are let in: the agent's own (in the key cache)
    // and another agent's never used here before.
    app.get("/v1/agents/me", &agent.key).await.expect(200);
    app.get("/v1/agents/me", &other.key).await.expect(200);
    // So is the operator token, on the API and in the console's sign-in; wrong ones count
    // alike and are refused.
    app.patch(format!("/v1/admin/agents/{}", agent.id), "not-the-operator-token", json!({ "tier": "SEAT" }))
        .await
        .expect_problem(429, "rate_limited");
    app.get("/v1/admin/agents", ADMIN_TOKEN).await.expect(200);
    app.get("/v1/agents/me", &agent.key).await.expect(200);
}

#[tokio::test]
async fn wrong_guesses_at_one_key_are_counted_together_from_every_address() {
    let app = TestApp::spawn_with(|config| config.settings.trusted_proxies = "127.0.0.1".parse().unwrap()).await;
    // One guess at the same key (the same prefix) from each of 25 addresses: the prefix's
    // allowance runs out as one address's would.
    let mut statuses = Vec::new();
    for n in 1..=25 {
        statuses.extend(guess(&app, "hk_samepre", 1, Some(&format!("203.0.113.{n}"))).await);
    }
    assert_eq!((count(&statuses, 401), count(&statuses, 429)), (20, 5), "{statuses:?}");
    // A guess beginning otherwise, from a fresh address, is only wrong.
    assert_eq!(guess(&app, "hk_another", 1, Some("203.0.113.99")).await, [401]);
}

#[tokio::test]
async fn a_forwarded_address_counts_only_from_a_trusted_proxy() {
    // No proxy trusted: a forged X-Forwarded-For changes nothing, every guess counts against
    // the peer's address (each with a prefix of its own).
    let app = TestApp::spawn().await;
    let mut statuses = Vec::new();
    for n in 0..25 {
        statuses.extend(guess(&app, &format!("hk_{n:08}"), 1, Some(&format!("198.51.100.{n}"))).await);
    }
    assert_eq!((count(&statuses, 401), count(&statuses, 429)), (20, 5), "{statuses:?}");

    // A trusted peer: its X-Forwarded-For is the client, so one client's guesses leave
    // another's allowance whole. A proxy trusted elsewhere (10.0.0.0/8) makes the peer's
    // header count for nothing again.
    for (trusted, separate) in [("127.0.0.1, 10.0.0.0/8", true), ("10.0.0.0/8", false)] {
        let app = TestApp::spawn_with(|config| config.settings.trusted_proxies = trusted.parse().unwrap()).await;
        for n in 0..25 {
            guess(&app, &format!("hk_{n:08}"), 1, Some("203.0.113.7")).await;
        }
        let other = guess(&app, "hk_elsewhere", 1, Some("203.0.113.8")).await;
        assert_eq!(other, [if separate { 401 } else { 429 }], "trusting {trusted}");
    }
}
