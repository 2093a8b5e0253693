//! Listings: create, read, list with filters and cursors, update, withdraw.

use serde_json::json;

use crate::support::TestApp;

#[tokio::test]
async fn listings_take_defaults_and_can_be_changed_by_their_seller() {
    let app = TestApp::spawn().await;
    let seller = app.register("seller").await;
    let other = app.register("other").await;
    let created =
        app.post("/v1/listings", &seller.key, json!({ "title": "Desk", "ask_amount": 138000 })).await.expect(201);
    let id = created.id();
    assert_eq!(created.body["currency"], "USD");
    assert_eq!(created.body["min_negotiation_tier"], "AGENCY");
    assert_eq!(created.body["bid_ttl_seconds"], 172800);
    assert_eq!(app.get(format!("/v1/listings/{id}"), &other.key).await.expect(200).body, created.body);

    let patched = app.patch(format!("/v1/listings/{id}"), &seller.key, json!({ "ask_amount": 120000, "quantity": 3 }));
    let patched = patched.await.expect(200);
    assert_eq!(
        (patched.body["ask_amount"].as_i64(), patched.body["quantity_available"].as_i64()),
        (Some(120000), Some(3))
    );
    app.patch(format!("/v1/listings/{id}"), &other.key, json!({ "title": "Mine" }))
        .await
        .expect_problem(403, "forbidden");
    app.patch(format!("/v1/listings/{id}"), &seller.key, json!({ "ask_amount": 50 }))
        .await
        .expect_problem(422, "validation_failed");
    app.post_empty(format!("/v1/listings/{id}/withdraw"), &seller.key).await.expect(200);
    app.patch(format!("/v1/listings/{id}"), &seller.key, json!({ "title": "Back" }))
        .await
        .expect_problem(409, "listing_unavailable");
    app.get(format!("/v1/listings/{}", uuid::Uuid::now_v7()), &other.key).await.expect_problem(404, "not_found");
}

#[tokio::test]
async fn listings_page_with_cursors_and_filter() {
    let app = TestApp::spawn().await;
    let alice = app.register("alice").await;
    let bob = app.register("bob").await;
    let mut mine = Vec::new();
    for i in 0..5 {
        mine.push(app.listing(&alice, json!({ "title": format!("Chair {i}"), "description": "oak 100%" })).await);
    }
    app.listing(&bob, json!({ "title": "Table" })).await;

    let mut seen = Vec::new();
    let mut path = format!("/v1/listings?seller_id={}&limit=2", alice.id);
    loop {
        let page = app.get(&path, &bob.key).await.expect(200);
        seen.extend(page.body["data"].as_array().unwrap().iter().map(|l| l["id"].as_str().unwrap().to_owned()));
        match page.body["next_cursor"].as_str() {
            Some(cursor) => path = format!("/v1/listings?seller_id={}&limit=2&cursor={cursor}", alice.id),
            None => break,
        }
    }
    mine.reverse();
    assert_eq!(seen, mine, "newest first, each once");

    let search = |q: &'static str| {
        let app = &app;
        let key = bob.key.clone();
        async move { app.get(format!("/v1/listings?q={q}"), &key).await.expect(200).body["data"].as_array().unwrap().len() }
    };
    assert_eq!(search("chair").await, 5);
    assert_eq!(search("table").await, 1);
    assert_eq!(search("100%25").await, 5, "a literal percent sign");
    assert_eq!(search("_").await, 0, "underscore is not a wildcard");
    app.post_empty(format!("/v1/listings/{}/withdraw", mine[0]), &alice.key).await.expect(200);
    let withdrawn = app.get("/v1/listings?status=WITHDRAWN", &bob.key).await.expect(200);
    assert_eq!(withdrawn.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(
        app.get("/v1/listings?status=ACTIVE", &bob.key).await.expect(200).body["data"].as_array().unwrap().len(),
        5
    );
}

#[tokio::test]
async fn whole_number_floats_are_integers_as_json_schema_says() {
    let app = TestApp::spawn().await;
    let seller = app.register("seller").await;
    let buyer = app.buyer("buyer").await;
    let body = json!({ "title": "Lamp", "ask_amount": 35000.0, "quantity": 2.0, "max_rounds": 6.0,
                       "bid_ttl_seconds": 3600.0, "max_threads_per_buyer": 1e0 });
    let listing = app.post("/v1/listings", &seller.key, body).await.expect(201);
    assert_eq!(
        (&listing.body["quantity"], &listing.body["max_rounds"], &listing.body["bid_ttl_seconds"]),
        (&json!(2), &json!(6), &json!(3600))
    );
    let id = listing.id();
    app.patch(format!("/v1/listings/{id}"), &seller.key, json!({ "quantity": 3.0 })).await.expect(200);
    let placed = app
        .post(format!("/v1/listings/{id}/bids"), &buyer.key, json!({ "amount": 30000, "expires_in": 600.0 }))
        .await
        .expect(201);
    assert_eq!(placed.body["bid"]["round"], 1);
    // A fraction is still no integer: refused, naming the field.
    let refused = app
        .post("/v1/listings", &seller.key, json!({ "title": "Lamp", "ask_amount": 35000, "quantity": 2.5 }))
        .await
        .expect_problem(422, "validation_failed");
    assert_eq!(refused.body["errors"][0]["field"], "quantity");
}
