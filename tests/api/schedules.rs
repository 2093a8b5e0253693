//! The handover's schedule and the payment plan, negotiated on an order over HTTP: a handover
//! scheduled and rescheduled, a plan of three installments paid with one overdue (raised once by
//! the sweeper), and every bad input refused with a stable code and nothing changed.

use chrono::{DateTime, Duration, SecondsFormat, Utc};
use serde_json::{Value, json};

use crate::events::{events_after, types};
use crate::support::{Agent, Deal, TestApp};

/// A deal on a listing asking 100000 and the order of the buyer's purchase at the ask.
async fn order(app: &TestApp) -> (Deal, String) {
    let deal = Deal::new(app, json!({})).await;
    let resp = app.post_empty(format!("/v1/listings/{}/purchase", deal.listing), &deal.buyer.key).await.expect(201);
    let order = resp.body["order"]["id"].as_str().unwrap().to_owned();
    (deal, order)
}

/// The instant `hours` from now, as the wire writes it.
fn in_hours(hours: i64) -> String {
    stamp(Utc::now() + Duration::hours(hours))
}

fn stamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn window(from_hours: i64, to_hours: i64) -> Value {
    json!({ "start": in_hours(from_hours), "end": in_hours(to_hours) })
}

fn schedule(windows: Vec<Value>) -> Value {
    json!({ "kind": "schedule", "terms": { "windows": windows, "method": "pickup", "place": "Dock 4" } })
}

fn installments(parts: &[(i64, i64)]) -> Value {
    let parts: Vec<Value> =
        parts.iter().map(|&(amount, days)| json!({ "amount": amount, "due": in_hours(days * 24) })).collect();
    json!({ "kind": "installments", "terms": { "installments": parts } })
}

async fn open(app: &TestApp, agent: &Agent, order: &str, body: Value) -> Value {
    app.post(format!("/v1/orders/{order}/negotiations"), &agent.key, body).await.expect(201).body
}

async fn read_order(app: &TestApp, agent: &Agent, order: &str) -> Value {
    app.get(format!("/v1/orders/{order}"), &agent.key).await.expect(200).body
}

fn id(value: &Value) -> String {
    value["id"].as_str().unwrap().to_owned()
}

fn instant(value: &Value) -> DateTime<Utc> {
    value.as_str().unwrap().parse().unwrap()
}

/// Pays `amount` on the order: recorded by the buyer, confirmed by the seller.
async fn pay(app: &TestApp, deal: &Deal, order: &str, amount: i64) -> Value {
    let body = json!({ "amount": amount, "reference": format!("tr_{amount}") });
    let payment = app.post(format!("/v1/orders/{order}/payments"), &deal.buyer.key, body).await.expect(201);
    let payment = payment.body["payment"]["id"].as_str().unwrap().to_owned();
    let confirmed =
        app.post_empty(format!("/v1/orders/{order}/payments/{payment}/confirm"), &deal.seller.key).await.expect(200);
    confirmed.body["order"].clone()
}

fn statuses(order: &Value) -> Vec<&str> {
    order["plan"].as_array().unwrap().iter().map(|installment| installment["status"].as_str().unwrap()).collect()
}

#[tokio::test]
async fn a_handover_is_scheduled_and_rescheduled() {
    let app = TestApp::spawn().await;
    let (deal, order) = order(&app).await;

    // The seller proposes two windows; the buyer counters with others, naming no amount.
    let opened = open(&app, &deal.seller, &order, schedule(vec![window(24, 26), window(48, 50)])).await;
    let (thread, first) = (&opened["thread"], &opened["bid"]);
    assert_eq!((thread["kind"].as_str(), thread["turn"].as_str()), (Some("schedule"), Some("buyer")));
    assert_eq!(first["kind"], "schedule");
    assert_eq!(first["terms"]["windows"].as_array().unwrap().len(), 2);
    let counter = json!({ "terms": { "windows": [window(30, 32), window(72, 75)], "method": "delivery" } });
    let countered =
        app.post(format!("/v1/bids/{}/counter", id(first)), &deal.buyer.key, counter).await.expect(201).body;
    assert_eq!((countered["bid"]["round"].as_i64(), countered["thread"]["turn"].as_str()), (Some(2), Some("seller")));
    let pending = id(&countered["bid"]);
    let taken = countered["bid"]["terms"]["windows"][1].clone();

    // The seller takes the second window: it is the order's appointment.
    let accepted = app
        .post(format!("/v1/bids/{pending}/accept"), &deal.seller.key, json!({ "terms": { "chosen": 1 } }))
        .await
        .expect(200);
    assert_eq!(accepted.body["thread"]["status"], "ACCEPTED");
    let appointment = &accepted.body["order"]["appointment"];
    assert_eq!(instant(&appointment["start"]), instant(&taken["start"]));
    assert_eq!(instant(&appointment["end"]), instant(&taken["end"]));
    assert_eq!((appointment["method"].as_str(), appointment["place"].as_str()), (Some("delivery"), None));
    assert_eq!(appointment["thread_id"], thread["id"]);
    let read = read_order(&app, &deal.buyer, &order).await;
    assert_eq!(read["appointment"], *appointment);

    // A new schedule reschedules: accepted, its window replaces the appointment.
    let again = open(&app, &deal.buyer, &order, schedule(vec![window(96, 98)])).await;
    let replaced = app
        .post(format!("/v1/bids/{}/accept", id(&again["bid"])), &deal.seller.key, json!({ "terms": { "chosen": 0 } }))
        .await
        .expect(200);
    let moved = &replaced.body["order"]["appointment"];
    assert_eq!(instant(&moved["start"]), instant(&again["bid"]["terms"]["windows"][0]["start"]));
    assert_eq!((moved["method"].as_str(), moved["place"].as_str()), (Some("pickup"), Some("Dock 4")));
    assert_eq!(moved["thread_id"], again["thread"]["id"]);

    crate::support::eventually("two order.scheduled events", || {
        let (app, deal) = (&app, &deal);
        async move {
            let events = events_after(app, &deal.buyer, 0, 1).await;
            (types(&events).iter().filter(|kind| **kind == "order.scheduled").count() == 2).then_some(())
        }
    })
    .await;

    // Once fulfilled, the handover is no longer scheduled.
    app.post_empty(format!("/v1/orders/{order}/fulfil"), &deal.seller.key).await.expect(200);
    app.post(format!("/v1/orders/{order}/negotiations"), &deal.buyer.key, schedule(vec![window(24, 26)]))
        .await
        .expect_problem(409, "invalid_transition");
}

#[tokio::test]
async fn bad_schedules_are_refused_and_change_nothing() {
    let app = TestApp::spawn().await;
    let (deal, order) = order(&app).await;
    let negotiations = format!("/v1/orders/{order}/negotiations");
    for (what, body) in [
        ("overlapping", schedule(vec![window(24, 30), window(28, 34)])),
        ("past", schedule(vec![window(-5, 2)])),
        ("over 7 days", schedule(vec![window(24, 24 + 7 * 24 + 1)])),
        ("ends before it starts", schedule(vec![window(30, 24)])),
        ("no windows", schedule(vec![])),
        ("six windows", schedule((0..6).map(|i| window(24 + 10 * i, 25 + 10 * i)).collect())),
        (
            "an amount",
            json!({ "kind": "schedule", "amount": 1000, "terms": { "windows": [window(24, 26)], "method": "pickup" } }),
        ),
        (
            "an unknown method",
            json!({ "kind": "schedule", "terms": { "windows": [window(24, 26)], "method": "drone" } }),
        ),
    ] {
        let refused = app.post(&negotiations, &deal.buyer.key, body).await;
        assert_eq!(refused.status, 422, "{what}: {}", refused.body);
        assert_eq!(refused.body["code"], "validation_failed", "{what}");
    }
    let threads = app.get(format!("/v1/threads?order_id={order}"), &deal.buyer.key).await.expect(200);
    assert_eq!(threads.body["data"], json!([]), "nothing was opened");

    let opened = open(&app, &deal.buyer, &order, schedule(vec![window(24, 26), window(48, 50)])).await;
    let bid = id(&opened["bid"]);
    app.post(&negotiations, &deal.seller.key, schedule(vec![window(24, 26)]))
        .await
        .expect_problem(409, "negotiation_open");
    // Counters name no amount and propose windows of their own, as valid as an opening's.
    let counter = format!("/v1/bids/{bid}/counter");
    let with_amount = json!({ "amount": 5000, "terms": { "windows": [window(30, 32)], "method": "pickup" } });
    app.post(&counter, &deal.seller.key, with_amount).await.expect_problem(422, "validation_failed");
    app.post(&counter, &deal.seller.key, json!({})).await.expect_problem(422, "validation_failed");
    let overlapping = json!({ "terms": { "windows": [window(30, 34), window(33, 36)], "method": "pickup" } });
    app.post(&counter, &deal.seller.key, overlapping).await.expect_problem(422, "validation_failed");
    // An acceptance must choose one of the bid's windows still ahead.
    let accept = format!("/v1/bids/{bid}/accept");
    for body in [json!({}), json!({ "terms": { "chosen": 2 } }), json!({ "terms": { "chosen": "first" } })] {
        app.post(&accept, &deal.seller.key, body).await.expect_problem(422, "validation_failed");
    }
    app.post_empty(&accept, &deal.seller.key).await.expect_problem(422, "validation_failed");

    let thread = app.get(format!("/v1/threads/{}", id(&opened["thread"])), &deal.buyer.key).await.expect(200);
    assert_eq!((thread.body["status"].as_str(), thread.body["rounds"].as_i64()), (Some("ACTIVE"), Some(1)));
    assert_eq!(thread.body["last_bid_id"].as_str(), Some(bid.as_str()));
    let read = read_order(&app, &deal.buyer, &order).await;
    assert!(read.get("appointment").is_none_or(Value::is_null), "{read}");

    // Terms on the acceptance of any other kind are refused too.
    let price = Deal::new(&app, json!({})).await;
    let placed = app
        .post(format!("/v1/listings/{}/bids", price.listing), &price.buyer.key, json!({ "amount": 90000 }))
        .await
        .expect(201);
    app.post(
        format!("/v1/bids/{}/accept", id(&placed.body["bid"])),
        &price.seller.key,
        json!({ "terms": { "chosen": 0 } }),
    )
    .await
    .expect_problem(422, "validation_failed");
}

#[tokio::test]
async fn a_plan_of_three_installments_is_paid_with_one_overdue_raised_once() {
    let app = TestApp::spawn().await;
    let (deal, order) = order(&app).await;

    let opened = open(&app, &deal.buyer, &order, installments(&[(30000, 1), (30000, 10), (40000, 20)])).await;
    assert_eq!((opened["thread"]["kind"].as_str(), opened["bid"]["amount"].as_i64()), (Some("installments"), Some(0)));
    // The seller changes the split and the dates, never the sum.
    let counter = format!("/v1/bids/{}/counter", id(&opened["bid"]));
    let changed_sum = installments(&[(40000, 2), (30000, 9), (40000, 19)]);
    app.post(&counter, &deal.seller.key, json!({ "terms": changed_sum["terms"] }))
        .await
        .expect_problem(422, "validation_failed");
    let split = installments(&[(40000, 2), (30000, 9), (30000, 19)]);
    let countered = app.post(&counter, &deal.seller.key, json!({ "terms": split["terms"] })).await.expect(201).body;
    let accepted =
        app.post_empty(format!("/v1/bids/{}/accept", id(&countered["bid"])), &deal.buyer.key).await.expect(200);
    let plan = &accepted.body["order"]["plan"];
    let amounts: Vec<i64> = plan.as_array().unwrap().iter().map(|i| i["amount"].as_i64().unwrap()).collect();
    assert_eq!(amounts, [40000, 30000, 30000]);
    assert_eq!(statuses(&accepted.body["order"]), ["due", "due", "due"]);
    // A plan, once agreed, is the order's: no second one.
    app.post(format!("/v1/orders/{order}/negotiations"), &deal.buyer.key, installments(&[(50000, 1), (50000, 2)]))
        .await
        .expect_problem(409, "invalid_transition");

    // The first installment is paid; the second comes due unpaid.
    let paid = pay(&app, &deal, &order, 40000).await;
    assert_eq!(statuses(&paid), ["paid", "due", "due"]);
    sqlx::query(
        "UPDATE orders SET plan = jsonb_set(plan, '{1,due}', to_jsonb(now() - interval '1 hour')) WHERE id = $1::uuid",
    )
    .bind(&order)
    .execute(&app.pool)
    .await
    .unwrap();
    let market = app.market();
    assert_eq!(haggle_server::sweeper::raise_overdue(&market, 100).await.unwrap(), 1);
    assert_eq!(haggle_server::sweeper::raise_overdue(&market, 100).await.unwrap(), 0, "raised once");
    assert_eq!(statuses(&read_order(&app, &deal.seller, &order).await), ["paid", "overdue", "due"]);

    // Late payments fill it, then the last.
    assert_eq!(statuses(&pay(&app, &deal, &order, 30000).await), ["paid", "paid", "due"]);
    let settled = pay(&app, &deal, &order, 30000).await;
    assert_eq!(statuses(&settled), ["paid", "paid", "paid"]);
    assert_eq!(settled["outstanding"], 0);
    assert_eq!(haggle_server::sweeper::raise_overdue(&market, 100).await.unwrap(), 0);

    for agent in [&deal.buyer, &deal.seller] {
        // Every event of the order written, the last confirmation's included.
        let app = &app;
        let events = crate::support::eventually("the last payment.confirmed", || async move {
            let events = events_after(app, agent, 0, 1).await;
            let settled = events
                .iter()
                .any(|event| event["type"] == "payment.confirmed" && event["data"]["order"]["outstanding"] == 0);
            settled.then_some(events)
        })
        .await;
        let overdue: Vec<&Value> = events.iter().filter(|event| event["type"] == "payment.overdue").collect();
        assert_eq!(overdue.len(), 1, "{:?}", types(&events));
        assert_eq!(overdue[0]["data"]["installment"], 1);
        assert_eq!(overdue[0]["data"]["order"]["id"].as_str(), Some(order.as_str()));
    }
}

#[tokio::test]
async fn bad_plans_are_refused_and_change_nothing() {
    let app = TestApp::spawn().await;
    let (deal, order) = order(&app).await;
    let negotiations = format!("/v1/orders/{order}/negotiations");
    for (what, body) in [
        ("do not sum", installments(&[(30000, 1), (30000, 10)])),
        ("sum past the outstanding", installments(&[(60000, 1), (60000, 10)])),
        ("unordered dates", installments(&[(50000, 10), (50000, 1)])),
        ("the same date", installments(&[(50000, 1), (50000, 1)])),
        ("a past date", installments(&[(50000, -1), (50000, 10)])),
        ("the first after 30 days", installments(&[(50000, 31), (50000, 40)])),
        ("one installment", installments(&[(100000, 1)])),
        ("thirteen installments", installments(&[(7000, 1); 13])),
    ] {
        let refused = app.post(&negotiations, &deal.buyer.key, body).await;
        assert_eq!(refused.status, 422, "{what}: {}", refused.body);
        assert_eq!(refused.body["code"], "validation_failed", "{what}");
    }
    app.post(&negotiations, &deal.seller.key, installments(&[(50000, 1), (50000, 10)]))
        .await
        .expect_problem(403, "forbidden");
    let threads = app.get(format!("/v1/threads?order_id={order}"), &deal.buyer.key).await.expect(200);
    assert_eq!(threads.body["data"], json!([]), "nothing was opened");
    let read = read_order(&app, &deal.buyer, &order).await;
    assert!(read.get("plan").is_none_or(Value::is_null), "{read}");

    // A plan agreed after a payment changed what is owed no longer sums: refused at acceptance.
    let opened = open(&app, &deal.buyer, &order, installments(&[(50000, 1), (50000, 10)])).await;
    pay(&app, &deal, &order, 10000).await;
    app.post_empty(format!("/v1/bids/{}/accept", id(&opened["bid"])), &deal.seller.key)
        .await
        .expect_problem(422, "validation_failed");
    let read = read_order(&app, &deal.buyer, &order).await;
    assert!(read.get("plan").is_none_or(Value::is_null), "{read}");
    let thread = app.get(format!("/v1/threads/{}", id(&opened["thread"])), &deal.buyer.key).await.expect(200);
    assert_eq!(thread.body["status"], "ACTIVE");
}

/// The thread once it has ended, read by the buyer, waiting for `what`.
async fn ended(app: &TestApp, deal: &Deal, thread_id: &str, what: &str) -> Value {
    crate::support::eventually(what, || async move {
        let read = app.get(format!("/v1/threads/{thread_id}"), &deal.buyer.key).await.expect(200).body;
        (read["status"] != "ACTIVE").then_some(read)
    })
    .await
}

/// The coming `weekday` (0 = Monday) at `hour`:00 UTC, at least two days ahead.
fn next(weekday: u32, hour: u32) -> DateTime<Utc> {
    use chrono::{Datelike, TimeZone};
    let mut day = (Utc::now() + Duration::days(2)).date_naive();
    while day.weekday().num_days_from_monday() != weekday {
        day = day.succ_opt().unwrap();
    }
    Utc.from_utc_datetime(&day.and_hms_opt(hour, 0, 0).unwrap())
}

fn window_at(start: DateTime<Utc>, hours: i64) -> Value {
    json!({ "start": stamp(start), "end": stamp(start + Duration::hours(hours)) })
}

#[tokio::test]
async fn a_schedule_policy_takes_a_window_inside_its_availability_and_leaves_others_to_its_owner() {
    let app = TestApp::spawn().await;
    let (deal, order) = order(&app).await;
    let availability = json!({
        "availability": [{ "day": "tue", "from": "09:00", "to": "17:00" }, { "day": "thu", "from": "09:00", "to": "12:00" }],
        "timezone_offset_minutes": 0,
    });
    let policy = json!({ "limit": 90000, "counter": { "strategy": "split" }, "schedule": availability });
    // The availability is strictly checked.
    let mut bad = policy.clone();
    bad["schedule"]["availability"][0]["to"] = json!("08:00");
    // Per agent: the listing sold its one unit with the order.
    app.put("/v1/agents/me/policies/seller", &deal.seller.key, bad).await.expect_problem(422, "validation_failed");
    app.put("/v1/agents/me/policies/seller", &deal.seller.key, policy).await.expect(200);

    // Monday is outside; Thursday 10:00 to 11:00 is inside, and taken.
    let inside = next(3, 10);
    let opened = open(&app, &deal.buyer, &order, schedule(vec![window_at(next(0, 10), 2), window_at(inside, 1)])).await;
    let thread_id = id(&opened["thread"]);
    let done = ended(&app, &deal, &thread_id, "the policy to accept").await;
    assert_eq!(done["status"], "ACCEPTED", "{done}");
    let read = read_order(&app, &deal.buyer, &order).await;
    assert_eq!(instant(&read["appointment"]["start"]), inside);

    // Thursday 11:00 to 13:00 runs past the slot: the owner is told and answers.
    let outside = open(&app, &deal.buyer, &order, schedule(vec![window_at(next(3, 11), 2)])).await;
    let stopped = crate::support::eventually("the owner to be told", || {
        let (app, deal) = (&app, &deal);
        async move {
            let events = events_after(app, &deal.seller, 0, 1).await;
            events.into_iter().find(|event| event["type"] == "negotiation.action_required")
        }
    })
    .await;
    assert_eq!(stopped["data"]["reason"], "outside_availability");
    assert_eq!(stopped["bid_id"].as_str(), Some(id(&outside["bid"]).as_str()));
    let thread = app.get(format!("/v1/threads/{}", id(&outside["thread"])), &deal.seller.key).await.expect(200);
    assert_eq!((thread.body["status"].as_str(), thread.body["turn"].as_str()), (Some("ACTIVE"), Some("seller")));
    app.post(format!("/v1/bids/{}/accept", id(&outside["bid"])), &deal.seller.key, json!({ "terms": { "chosen": 0 } }))
        .await
        .expect(200);
}

#[tokio::test]
async fn a_schedule_acceptance_held_for_approval_takes_its_chosen_window_when_approved() {
    let app = TestApp::spawn().await;
    let (deal, order) = order(&app).await;
    let every_accept = json!({ "rules": [{ "move": "accept" }] });
    app.put("/v1/agents/me/approval-rules", &deal.seller.key, every_accept).await.expect(200);
    let opened = open(&app, &deal.buyer, &order, schedule(vec![window(24, 26), window(48, 50)])).await;
    let taken = opened["bid"]["terms"]["windows"][1].clone();

    // Terms no acceptance could carry are refused as the move's own refusal, and nothing waits.
    let accept = format!("/v1/bids/{}/accept", id(&opened["bid"]));
    let beyond = json!({ "terms": { "chosen": 7 } });
    app.post(&accept, &deal.seller.key, beyond).await.expect_problem(422, "validation_failed");
    assert_eq!(app.count("SELECT count(*) FROM approvals").await, 0);

    // Held: the window the acceptance takes is part of the move that waits.
    let chosen = json!({ "terms": { "chosen": 1 } });
    let held = app.post(format!("/v1/bids/{}/accept", id(&opened["bid"])), &deal.seller.key, chosen).await.expect(202);
    let approval = &held.body["approval"];
    assert_eq!(approval["move"]["terms"], json!({ "chosen": 1 }));
    assert!(read_order(&app, &deal.buyer, &order).await["appointment"].is_null(), "nothing made while held");

    // Approved, it is made as it was held: the second window is the appointment.
    let made = app.post_empty(format!("/v1/approvals/{}/approve", id(approval)), &deal.seller.key).await.expect(200);
    assert_eq!(made.body["approval"]["status"], "APPROVED", "{}", made.body);
    let appointment = &read_order(&app, &deal.buyer, &order).await["appointment"];
    assert_eq!(instant(&appointment["start"]), instant(&taken["start"]));
}

#[tokio::test]
async fn a_schedule_policy_set_while_a_window_waits_takes_it_over() {
    let app = TestApp::spawn().await;
    let (deal, order) = order(&app).await;
    let inside = next(1, 10);
    let opened = open(&app, &deal.buyer, &order, schedule(vec![window_at(inside, 1)])).await;
    assert_eq!(app.count("SELECT count(*) FROM auto_tasks").await, 0, "no policy yet: the seller answers");

    let availability =
        json!({ "availability": [{ "day": "tue", "from": "09:00", "to": "17:00" }], "timezone_offset_minutes": 0 });
    let policy = json!({ "limit": 90000, "counter": { "strategy": "split" }, "schedule": availability });
    app.put("/v1/agents/me/policies/seller", &deal.seller.key, policy).await.expect(200);
    let thread_id = id(&opened["thread"]);
    let done = ended(&app, &deal, &thread_id, "the policy to take the waiting window").await;
    assert_eq!(done["status"], "ACCEPTED", "{done}");
    assert_eq!(instant(&read_order(&app, &deal.buyer, &order).await["appointment"]["start"]), inside);
}
