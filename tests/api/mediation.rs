//! Mediation that stays live (SPEC §7, "Deadlocks" and "Settling"): after the mark, each
//! counter renews the suggestion for the new pending bid, agreements carry over to a renewed
//! suggestion that does not move against their givers and are dropped otherwise, and the
//! parties (or an opted-in policy) still settle. Through real HTTP.

use serde_json::{Value, json};

use crate::support::{Agent, Deal, TestApp, eventually};

async fn thread(app: &TestApp, agent: &Agent, id: &str) -> Value {
    app.get(format!("/v1/threads/{id}"), &agent.key).await.expect(200).body
}

/// The agent's `negotiation.deadlock` events on the thread, oldest first, once there are
/// `count` of them.
async fn deadlock_events(app: &TestApp, agent: &Agent, thread_id: &str, count: usize) -> Vec<Value> {
    eventually(&format!("{count} negotiation.deadlock events"), || async move {
        let page = app.get("/v1/events?limit=200", &agent.key).await.expect(200).body;
        let found: Vec<Value> = page["data"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["type"] == "negotiation.deadlock" && e["thread_id"] == thread_id)
            .cloned()
            .collect();
        (found.len() >= count).then_some(found)
    })
    .await
}

/// The buyer opens at 50000 and each side moves one unit a round against the seller's 99000:
/// after the sixth bid (the seller's 98998, the buyer's last being 50002) the thread is marked,
/// the buyer to move, the suggestion 74500. Gives the thread's id and the seller's pending bid.
async fn marked(app: &TestApp, deal: &Deal) -> (String, String) {
    let placed = app.post(format!("/v1/listings/{}/bids", deal.listing), &deal.buyer.key, json!({ "amount": 50000 }));
    let placed = placed.await.expect(201).body;
    let id = placed["thread"]["id"].as_str().unwrap().to_owned();
    let mut bid = placed["bid"]["id"].as_str().unwrap().to_owned();
    for amount in [99000, 50001, 98999, 50002, 98998] {
        let agent = if amount < 60000 { &deal.buyer } else { &deal.seller };
        bid = app.counter(agent, &bid, amount).await;
    }
    let suggestion = &thread(app, &deal.buyer, &id).await["deadlock"]["suggestion"];
    assert_eq!((suggestion["mover"].as_str(), suggestion["amount"].as_i64()), (Some("buyer"), Some(74500)));
    (id, bid)
}

#[tokio::test]
async fn parties_who_keep_countering_after_the_mark_still_settle() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "max_rounds": 30 })).await;
    let (id, first) = marked(&app, &deal).await;
    let settle = format!("/v1/threads/{id}/settle");
    let detected_at = thread(&app, &deal.buyer, &id).await["deadlock"]["detected_at"].clone();

    // The seller agrees to 74500; the buyer counters instead. The renewed suggestion answers
    // the buyer's counter, the seller to move, halfway between 52000 and 98998: 75499, no
    // lower for the seller, whose agreement carries over.
    app.post(&settle, &deal.seller.key, json!({ "bid_id": first })).await.expect(202);
    let second = app.counter(&deal.buyer, &first, 52000).await;
    let read = thread(&app, &deal.buyer, &id).await;
    let deadlock = &read["deadlock"];
    assert_eq!(deadlock["detected_at"], detected_at, "the thread stays marked since the first detection");
    assert_eq!(deadlock["suggestion"]["bid_id"], second.as_str());
    assert_eq!(deadlock["suggestion"]["mover"], "seller");
    assert_eq!(deadlock["suggestion"]["amount"], 75499);
    assert_eq!(deadlock["suggestion"]["method"], "midpoint");
    assert_eq!(deadlock["suggestion"]["renewal"], 1);
    assert_eq!(deadlock["agreed"], json!(["seller"]));
    let events = deadlock_events(&app, &deal.buyer, &id, 2).await;
    assert_eq!(events[0]["data"]["suggestion"]["renewal"], 0);
    assert_eq!(events[1]["data"]["suggestion"], deadlock["suggestion"]);
    assert_eq!(events[1]["bid_id"], second.as_str());
    assert_eq!((&events[1]["data"]["carried_over"], &events[1]["data"]["dropped"]), (&json!(["seller"]), &json!([])));

    // The seller counters too: renewed at 71000, lower than the seller agreed to, so its
    // agreement is dropped, and the buyer's agreement alone settles nothing.
    let third = app.counter(&deal.seller, &second, 90000).await;
    let read = thread(&app, &deal.seller, &id).await;
    assert_eq!(read["deadlock"]["suggestion"]["amount"], 71000);
    assert_eq!(read["deadlock"]["suggestion"]["mover"], "buyer");
    assert_eq!(read["deadlock"]["agreed"], json!([]));
    let events = deadlock_events(&app, &deal.seller, &id, 3).await;
    assert_eq!((&events[2]["data"]["carried_over"], &events[2]["data"]["dropped"]), (&json!([]), &json!(["seller"])));
    let waiting = app.post(&settle, &deal.buyer.key, json!({ "bid_id": third })).await.expect(202).body;
    assert_eq!(waiting["thread"]["deadlock"]["agreed"], json!(["buyer"]));
    assert_eq!(app.count(format!("SELECT count(*) FROM orders WHERE thread_id = '{id}'")).await, 0);

    // The buyer counters on: renewed at 71000 again (halfway between 52001 and 90000), not
    // higher, so the buyer's agreement carries over, and the seller's agreement settles the
    // thread at it.
    let fourth = app.counter(&deal.buyer, &third, 52001).await;
    let read = thread(&app, &deal.buyer, &id).await;
    assert_eq!(read["deadlock"]["suggestion"]["renewal"], 3);
    assert_eq!(read["deadlock"]["agreed"], json!(["buyer"]));
    let settled = app.post_empty(&settle, &deal.seller.key).await.expect(200).body;
    assert_eq!(settled["order"]["amount"], 71000);
    assert_eq!(settled["bid"]["author"], "seller");
    assert_eq!(settled["bid"]["parent_bid_id"], fourth.as_str());
    assert_eq!(settled["bid"]["status"], "ACCEPTED");
    assert_eq!(settled["thread"]["status"], "ACCEPTED");
    // The settlement's own counter renews nothing: four events, for the mark and three renewals.
    assert_eq!(deadlock_events(&app, &deal.buyer, &id, 4).await.len(), 4);
    assert_eq!(app.count(format!("SELECT count(*) FROM orders WHERE thread_id = '{id}'")).await, 1);
}

#[tokio::test]
async fn an_agreement_is_dropped_when_its_giver_counters_the_suggestion_up() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "max_rounds": 30 })).await;
    let (id, first) = marked(&app, &deal).await;
    let settle = format!("/v1/threads/{id}/settle");
    // The buyer agrees to pay 74500, then counters: the renewed suggestion, 75499, asks more of
    // it, so its agreement is not carried over and the seller's agreement settles nothing.
    app.post_empty(&settle, &deal.buyer.key).await.expect(202);
    app.counter(&deal.buyer, &first, 52000).await;
    let read = thread(&app, &deal.seller, &id).await;
    assert_eq!(read["deadlock"]["suggestion"]["amount"], 75499);
    assert_eq!(read["deadlock"]["agreed"], json!([]));
    let events = deadlock_events(&app, &deal.seller, &id, 2).await;
    assert_eq!(events[1]["data"]["dropped"], json!(["buyer"]));
    let waiting = app.post_empty(&settle, &deal.seller.key).await.expect(202).body;
    assert_eq!(waiting["thread"]["deadlock"]["agreed"], json!(["seller"]));
    assert_eq!(app.count(format!("SELECT count(*) FROM orders WHERE thread_id = '{id}'")).await, 0);
}

#[tokio::test]
async fn an_opted_in_policy_settles_at_a_renewed_suggestion() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "max_rounds": 30 })).await;
    // The seller's policy concedes a unit a counter and settles at a suggestion of at least
    // 60000; the buyer negotiates by hand.
    let policy = json!({
        "limit": 60000, "max_auto_rounds": 20, "accept_mediation": true,
        "counter": { "strategy": "step", "amount": 1 }
    });
    app.put(format!("/v1/listings/{}/policy", deal.listing), &deal.seller.key, policy).await.expect(200);
    let placed = app.post(format!("/v1/listings/{}/bids", deal.listing), &deal.buyer.key, json!({ "amount": 50000 }));
    let placed = placed.await.expect(201).body;
    let id = placed["thread"]["id"].as_str().unwrap().to_owned();

    // The buyer answers each of the policy's counters by one unit more, until the thread is
    // marked (the buyer to move, the policy having made the deadlocking counter), and once more
    // after the mark: the policy's turn comes at a renewed suggestion.
    let mut buyer = 50000;
    let pending = loop {
        let read = eventually("the policy's counter", || {
            let (app, buyer, id) = (&app, &deal.buyer, &id);
            async move {
                let read = thread(app, buyer, id).await;
                (read["turn"] == "buyer").then_some(read)
            }
        })
        .await;
        let pending = read["bids"].as_array().unwrap().last().unwrap()["id"].as_str().unwrap().to_owned();
        buyer += 1;
        let countered = app.counter(&deal.buyer, &pending, buyer).await;
        if !read["deadlock"].is_null() {
            break countered;
        }
    };
    let read = thread(&app, &deal.buyer, &id).await;
    assert_eq!(read["deadlock"]["suggestion"]["bid_id"], pending.as_str());
    assert_eq!(read["deadlock"]["suggestion"]["mover"], "seller");
    assert!(read["deadlock"]["suggestion"]["renewal"].as_u64().unwrap() >= 1);

    // The policy agrees to the renewed suggestion and waits for the buyer, who settles.
    let agreed = eventually("the policy to agree", || {
        let (app, seller, id) = (&app, &deal.seller, &id);
        async move {
            let read = thread(app, seller, id).await;
            (read["deadlock"]["agreed"] == json!(["seller"])).then_some(read)
        }
    })
    .await;
    assert_eq!(agreed["last_bid_id"], pending.as_str(), "the policy agreed instead of countering");
    let suggestion = agreed["deadlock"]["suggestion"].clone();
    let settled = app
        .post(format!("/v1/threads/{id}/settle"), &deal.buyer.key, json!({ "bid_id": pending }))
        .await
        .expect(200)
        .body;
    assert_eq!(settled["order"]["amount"], suggestion["amount"]);
    assert_eq!(settled["bid"]["author"], "seller");
    assert_eq!(settled["bid"]["parent_bid_id"], pending.as_str());
}

#[tokio::test]
async fn a_settlement_racing_a_counter_after_renewals_has_one_winner() {
    let app = TestApp::spawn().await;
    for _ in 0..4 {
        let deal = Deal::new(&app, json!({ "max_rounds": 30 })).await;
        let (id, first) = marked(&app, &deal).await;
        // A renewal first: the seller to move at 75499; the buyer agrees to it.
        let second = app.counter(&deal.buyer, &first, 52000).await;
        let settle = format!("/v1/threads/{id}/settle");
        app.post(&settle, &deal.buyer.key, json!({ "bid_id": second })).await.expect(202);
        // The seller, whose turn it is, settles at the suggestion it saw and counters at once.
        let settling = app.post(&settle, &deal.seller.key, json!({ "bid_id": second }));
        let countering = app.post(format!("/v1/bids/{second}/counter"), &deal.seller.key, json!({ "amount": 90000 }));
        let (settled, countered) = tokio::join!(settling, countering);
        let outcomes = [(settled.status, settled.code().to_owned()), (countered.status, countered.code().to_owned())];
        let won = outcomes.iter().filter(|(status, _)| *status == 200 || *status == 201).count();
        assert_eq!(won, 1, "{outcomes:?}");
        assert!(outcomes.iter().any(|(status, code)| *status == 409 && code == "invalid_transition"), "{outcomes:?}");
        let orders = app.count(format!("SELECT count(*) FROM orders WHERE thread_id = '{id}'")).await;
        assert_eq!(orders, i64::from(settled.status == 200));
        let read = thread(&app, &deal.buyer, &id).await;
        if countered.status == 201 {
            // The counter renewed the suggestion the settlement named: nothing was settled.
            assert_eq!(read["status"], "ACTIVE");
            assert_eq!(read["deadlock"]["suggestion"]["renewal"], 2);
        } else {
            assert_eq!(read["status"], "ACCEPTED");
        }
    }
}

#[tokio::test]
async fn positions_one_unit_apart_renew_the_suggestion_at_the_one_counter_left() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "max_rounds": 30 })).await;
    let (id, first) = marked(&app, &deal).await;
    let settle = format!("/v1/threads/{id}/settle");
    // The seller agrees to 74500; the buyer counters one unit below the seller's 98998. The one
    // counter left to the seller is its own 98998 again: the suggestion is renewed there (the
    // midpoint, 98997, is no counter the seller may make), and the seller's agreement carries
    // over, as the renewed suggestion is higher for it.
    app.post(&settle, &deal.seller.key, json!({ "bid_id": first })).await.expect(202);
    let close = app.counter(&deal.buyer, &first, 98997).await;
    let read = thread(&app, &deal.buyer, &id).await;
    let suggestion = &read["deadlock"]["suggestion"];
    assert_eq!(suggestion["bid_id"], close.as_str());
    assert_eq!((suggestion["mover"].as_str(), suggestion["amount"].as_i64()), (Some("seller"), Some(98998)));
    assert_eq!(suggestion["renewal"], 1);
    assert_eq!(read["deadlock"]["agreed"], json!(["seller"]));
    // Settling at the suggestion it was renewed from is refused and changes nothing.
    let refused = app.post(&settle, &deal.buyer.key, json!({ "bid_id": first })).await;
    refused.expect_problem(409, "invalid_transition");
    assert_eq!(app.count(format!("SELECT count(*) FROM orders WHERE thread_id = '{id}'")).await, 0);
    // The buyer agrees to the renewed one: the seller's 98998 is made and accepted.
    let settled = app.post(&settle, &deal.buyer.key, json!({ "bid_id": close })).await.expect(200).body;
    assert_eq!(settled["order"]["amount"], 98998);
    assert_eq!(settled["bid"]["author"], "seller");
    assert_eq!(app.count(format!("SELECT count(*) FROM orders WHERE thread_id = '{id}'")).await, 1);
}
