//! A listing's `concession_rule` (SPEC §2, "Amount rules"): `strict`, the default, refuses a
//! counter that retracts its mover's concession; `none` allows it; neither lets a counter cross
//! the other side's pending amount. Through real HTTP, one instance.

use serde_json::{Value, json};

use crate::support::{Agent, Resp, TestApp};

struct Negotiation {
    app: TestApp,
    seller: Agent,
    buyer: Agent,
    listing: String,
}

impl Negotiation {
    /// A seller's listing at an ask of 100,000 with `fields`, and a buyer allowed to negotiate.
    async fn open(fields: Value) -> Negotiation {
        let app = TestApp::spawn().await;
        let seller = app.register("seller").await;
        let buyer = app.buyer("buyer").await;
        let listing = app.listing(&seller, fields).await;
        Negotiation { app, seller, buyer, listing }
    }

    async fn counter(&self, agent: &Agent, bid: &str, amount: i64) -> Resp {
        self.app.post(format!("/v1/bids/{bid}/counter"), &agent.key, json!({ "amount": amount })).await
    }

    /// A refused counter: `not_a_concession` with the range it gives, and nothing written.
    async fn refused(&self, agent: &Agent, bid: &str, amount: i64) -> (i64, i64) {
        let before = self.app.snapshot().await;
        let refused = self.counter(agent, bid, amount).await.expect_problem(422, "not_a_concession");
        assert_eq!(self.app.snapshot().await, before, "a refused counter changed something");
        (refused.body["min_amount"].as_i64().unwrap(), refused.body["max_amount"].as_i64().unwrap())
    }

    async fn rule(&self) -> Value {
        self.app.get(format!("/v1/listings/{}", self.listing), &self.seller.key).await.expect(200).body
            ["concession_rule"]
            .clone()
    }

    async fn set_rule(&self, rule: &str) {
        let path = format!("/v1/listings/{}", self.listing);
        let changed = self.app.patch(path, &self.seller.key, json!({ "concession_rule": rule })).await.expect(200);
        assert_eq!(changed.body["concession_rule"], rule);
    }
}

#[tokio::test]
async fn a_strict_listing_refuses_a_retraction_as_it_always_did() {
    let n = Negotiation::open(json!({})).await;
    assert_eq!(n.rule().await, "strict", "the default rule");
    let opening = n.app.place(&n.buyer, &n.listing, 60000).await;
    let countered = n.app.counter(&n.seller, &opening, 90000).await;
    // The buyer goes back below its own opening: refused, with the strict range.
    assert_eq!(n.refused(&n.buyer, &countered, 55000).await, (60000, 89999));
    // The seller's side: no higher than its own previous price.
    let answered = n.app.counter(&n.buyer, &countered, 70000).await;
    assert_eq!(n.refused(&n.seller, &answered, 90001).await, (70001, 90000));
    n.counter(&n.seller, &answered, 90000).await.expect(201);
}

#[tokio::test]
async fn a_listing_without_the_rule_accepts_retractions_but_never_a_crossing() {
    let n = Negotiation::open(json!({ "concession_rule": "none" })).await;
    assert_eq!(n.rule().await, "none");
    let opening = n.app.place(&n.buyer, &n.listing, 60000).await;
    let countered = n.app.counter(&n.seller, &opening, 90000).await;

    // The buyer retracts below its own opening.
    let retracted = n.counter(&n.buyer, &countered, 55000).await.expect(201);
    assert_eq!(retracted.body["bid"]["amount"], 55000);
    assert_eq!(retracted.body["bid"]["status"], "PENDING");
    let retracted = retracted.body["bid"]["id"].as_str().unwrap().to_owned();

    // The seller retracts above its own previous price, up to the ask and no further.
    assert_eq!(n.refused(&n.seller, &retracted, 100001).await, (55001, 100000));
    // Crossing the buyer's pending amount, or meeting it, is refused.
    assert_eq!(n.refused(&n.seller, &retracted, 55000).await, (55001, 100000));
    assert_eq!(n.refused(&n.seller, &retracted, 40000).await, (55001, 100000));
    let raised = n.app.counter(&n.seller, &retracted, 95000).await;

    // The buyer may not meet or cross the seller's pending amount; it may go down to the
    // smallest amount there is.
    assert_eq!(n.refused(&n.buyer, &raised, 95000).await, (100, 94999));
    assert_eq!(n.refused(&n.buyer, &raised, 99000).await, (100, 94999));
    n.counter(&n.buyer, &raised, 99).await.expect_problem(422, "validation_failed");
    let low = n.app.counter(&n.buyer, &raised, 100).await;

    // The thread goes on as any other: the seller accepts the buyer's last word.
    let accepted = n.app.post(format!("/v1/bids/{low}/accept"), &n.seller.key, json!({})).await.expect(200);
    assert_eq!(accepted.body["order"]["amount"], 100);
    let rounds = n.app.get(format!("/v1/threads/{}", accepted.body["thread"]["id"].as_str().unwrap()), &n.buyer.key);
    let amounts: Vec<i64> = rounds.await.expect(200).body["bids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["amount"].as_i64().unwrap())
        .collect();
    assert_eq!(amounts, [60000, 90000, 55000, 95000, 100]);
}

#[tokio::test]
async fn a_bad_concession_rule_is_refused_naming_the_field() {
    let app = TestApp::spawn().await;
    let seller = app.register("seller").await;
    let before = app.snapshot().await;
    for rule in ["loose", "STRICT", ""] {
        let body = json!({ "title": "Desk", "ask_amount": 1000, "concession_rule": rule });
        let refused = app.post("/v1/listings", &seller.key, body).await.expect_problem(422, "validation_failed");
        assert_eq!(refused.body["errors"][0]["field"], "concession_rule", "{rule}: {}", refused.body);
    }
    assert_eq!(app.snapshot().await, before, "a refused listing was written");

    let listing = app.listing(&seller, json!({})).await;
    let path = format!("/v1/listings/{listing}");
    let before = app.snapshot().await;
    let refused = app
        .patch(&path, &seller.key, json!({ "concession_rule": "loose" }))
        .await
        .expect_problem(422, "validation_failed");
    assert_eq!(refused.body["errors"][0]["field"], "concession_rule", "{}", refused.body);
    assert_eq!(app.snapshot().await, before, "a refused change was written");
    // `null` leaves the rule as it is, as for every field of a change.
    let kept = app.patch(&path, &seller.key, json!({ "concession_rule": null, "title": "Desk" })).await.expect(200);
    assert_eq!(kept.body["concession_rule"], "strict");
}

#[tokio::test]
async fn a_listing_changed_between_two_counters_holds_the_next_counter_to_its_new_rule() {
    let n = Negotiation::open(json!({})).await;
    let opening = n.app.place(&n.buyer, &n.listing, 60000).await;
    let countered = n.app.counter(&n.seller, &opening, 90000).await;
    assert_eq!(n.refused(&n.buyer, &countered, 55000).await, (60000, 89999));

    // The seller opens the listing to retractions: the same counter is now made.
    n.set_rule("none").await;
    let retracted = n.app.counter(&n.buyer, &countered, 55000).await;

    // And closes it again: the seller's own retraction is refused, its concession allowed.
    n.set_rule("strict").await;
    assert_eq!(n.refused(&n.seller, &retracted, 95000).await, (55001, 90000));
    n.counter(&n.seller, &retracted, 85000).await.expect(201);
}
