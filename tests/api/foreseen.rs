//! A move works out the rows it will write, writes its events from them, and has its statement
//! write exactly those rows. That is a property of every move, checked here over random
//! negotiations (amounts, messages, terms of every JSON shape, final offers, moves made in a
//! batch without locks and in a transaction under an `Idempotency-Key`): after each move, the
//! events it wrote describe the rows as stored. Numbers are compared by value, since the
//! database keeps `1e17` as `100000000000000000`.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Map, Value, json};

use crate::support::{Agent, Resp, TestApp};

/// A negotiation to play: the opening bid, then counters (alternating from the seller), then
/// the pending bid accepted or rejected.
#[derive(Debug, Clone)]
struct Script {
    ask: i64,
    opening: Offer,
    counters: Vec<Offer>,
    accept: bool,
    quantity: i64,
}

#[derive(Debug, Clone)]
struct Offer {
    /// How far the mover goes, as a fraction of the room it has.
    step: f64,
    message: Option<String>,
    terms: Option<Value>,
    is_final: bool,
    /// Sent with an `Idempotency-Key` (so in a transaction) rather than through the batch.
    keyed: bool,
}

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1e18f64..1e18).prop_map(|x| json!(x)),
        Just(json!(1e17)),
        Just(json!(123456789012345680.0)),
        Just(json!(-0.0)),
        Just(json!(0.1)),
    ]
}

fn terms() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        number(),
        any::<bool>().prop_map(Value::from),
        "[a-zA-Z0-9 éü€😀\\\\\"\n]{0,12}".prop_map(Value::from),
        Just(Value::Null),
    ];
    let value = leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    });
    prop::collection::btree_map("[a-z_]{1,10}", value, 0..5).prop_map(|map| Value::Object(map.into_iter().collect()))
}

fn offer() -> impl Strategy<Value = Offer> {
    (
        0.05f64..0.95,
        prop::option::of("[a-zA-Z ,.!é]{0,40}"),
        prop::option::weighted(0.6, terms()),
        prop::bool::weighted(0.15),
        any::<bool>(),
    )
        .prop_map(|(step, message, terms, is_final, keyed)| Offer { step, message, terms, is_final, keyed })
}

fn script() -> impl Strategy<Value = Script> {
    (10_000i64..10_000_000, offer(), prop::collection::vec(offer(), 0..5), any::<bool>(), 1i64..3)
        .prop_map(|(ask, opening, counters, accept, quantity)| Script { ask, opening, counters, accept, quantity })
}

/// Whether two JSON values are the same, numbers compared by value.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64(), x.as_u64(), y.as_u64()) {
            (Some(x), Some(y), _, _) => x == y,
            (_, _, Some(x), Some(y)) => x == y,
            _ => x.as_f64() == y.as_f64(),
        },
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(key, value)| y.get(key).is_some_and(|other| same(value, other)))
        }
        _ => a == b,
    }
}

/// Every event written about `bid` of `kind`: each must describe the stored rows.
async fn events_about(app: &TestApp, kind: &str, bid: &str) -> Vec<Value> {
    sqlx::query_scalar("SELECT data FROM events WHERE type = $1 AND bid_id = $2::uuid")
        .bind(kind)
        .bind(bid)
        .fetch_all(&app.pool)
        .await
        .unwrap()
}

/// The stored rows of a bid, its thread (as agents are shown it) and an order, through the API
/// that reads them back.
async fn stored(app: &TestApp, agent: &Agent, bid: &Value) -> (Value, Value) {
    let thread = app.get(format!("/v1/threads/{}", bid["thread_id"].as_str().unwrap()), &agent.key).await.expect(200);
    let mut thread = thread.body;
    let bids = thread.as_object_mut().unwrap().remove("bids").unwrap();
    let stored_bid = bids.as_array().unwrap().iter().find(|b| b["id"] == bid["id"]).cloned().unwrap();
    (stored_bid, thread)
}

fn check(what: &str, event: &Value, stored: &Value) -> Result<(), TestCaseError> {
    prop_assert!(same(event, stored), "{}: the event describes\n{:#}\nbut the row is\n{:#}", what, event, stored);
    Ok(())
}

/// After a placement or a counter: its event describes the new pending bid and its thread.
async fn check_new_bid(app: &TestApp, agent: &Agent, answer: &Resp, kind: &str) -> Result<(), TestCaseError> {
    let bid = &answer.body["bid"];
    let events = events_about(app, kind, bid["id"].as_str().unwrap()).await;
    prop_assert_eq!(events.len(), 1, "one {} event", kind);
    let (stored_bid, stored_thread) = stored(app, agent, bid).await;
    check(kind, &events[0]["bid"], &stored_bid)?;
    check(kind, &events[0]["thread"], &stored_thread)?;
    check("the answer", bid, &stored_bid)
}

/// The amount a mover offers: `step` of the way from its own position towards the other's.
fn toward(own: i64, other: i64, step: f64) -> i64 {
    own + ((other - own) as f64 * step).round() as i64
}

fn body(offer: &Offer, amount: i64) -> Value {
    let mut body = Map::new();
    body.insert("amount".into(), amount.into());
    if let Some(message) = &offer.message {
        body.insert("message".into(), message.clone().into());
    }
    if let Some(terms) = &offer.terms {
        body.insert("terms".into(), terms.clone());
    }
    Value::Object(body)
}

async fn post(app: &TestApp, agent: &Agent, path: String, body: Value, keyed: bool) -> Resp {
    if keyed {
        app.post_keyed(path, Some(&agent.key), body, &uuid::Uuid::new_v4().to_string()).await
    } else {
        app.post(path, &agent.key, body).await
    }
}

async fn play(app: &TestApp, seller: &Agent, buyer: &Agent, script: Script) -> Result<(), TestCaseError> {
    let listing =
        app.listing(seller, json!({ "ask_amount": script.ask, "quantity": script.quantity, "max_rounds": 100 })).await;
    let opening = toward(100, script.ask, script.opening.step).max(100);
    let placed =
        post(app, buyer, format!("/v1/listings/{listing}/bids"), body(&script.opening, opening), script.opening.keyed)
            .await
            .expect(201);
    check_new_bid(app, buyer, &placed, "bid.placed").await?;
    let (mut pending, mut pending_amount) = (placed.body["bid"]["id"].as_str().unwrap().to_owned(), opening);
    let (mut buyer_at, mut seller_at) = (opening, script.ask);
    let mut pending_final = false;
    let mut pending_author = buyer;
    for (round, offer) in script.counters.iter().enumerate() {
        let (mover, own) = if round % 2 == 0 { (seller, seller_at) } else { (buyer, buyer_at) };
        let amount = toward(own, pending_amount, offer.step);
        let room = (own - pending_amount).abs();
        if pending_final || room < 2 || amount == pending_amount {
            break;
        }
        let mut body = body(offer, amount);
        body["final"] = offer.is_final.into();
        let countered = post(app, mover, format!("/v1/bids/{pending}/counter"), body, offer.keyed).await.expect(201);
        check_new_bid(app, mover, &countered, "bid.countered").await?;
        pending = countered.body["bid"]["id"].as_str().unwrap().to_owned();
        pending_amount = amount;
        pending_final = offer.is_final;
        pending_author = mover;
        if round % 2 == 0 { seller_at = amount } else { buyer_at = amount }
    }
    let responder = if pending_author.id == buyer.id { seller } else { buyer };
    let (action, kind) = if script.accept { ("accept", "bid.accepted") } else { ("reject", "bid.rejected") };
    let answered =
        post(app, responder, format!("/v1/bids/{pending}/{action}"), json!({}), script.opening.keyed).await.expect(200);
    let events = events_about(app, kind, &pending).await;
    prop_assert_eq!(events.len(), 1, "one {} event", kind);
    let (stored_bid, stored_thread) = stored(app, responder, &answered.body["bid"]).await;
    check(kind, &events[0]["bid"], &stored_bid)?;
    check(kind, &events[0]["thread"], &stored_thread)?;
    if script.accept {
        let order = &answered.body["order"];
        let mut stored_order =
            app.get(format!("/v1/orders/{}", order["id"].as_str().unwrap()), &responder.key).await.expect(200).body;
        // The order read alone comes with its payments; the event and the answer carry the order.
        let payments = stored_order.as_object_mut().unwrap().remove("payments");
        prop_assert_eq!(payments, Some(json!([])));
        let order_events = events_about(app, "order.created", &pending).await;
        prop_assert_eq!(order_events.len(), 1);
        check("order.created", &order_events[0]["order"], &stored_order)?;
        check("the answer's order", order, &stored_order)?;
    }
    Ok(())
}

#[test]
fn the_events_of_every_move_describe_the_rows_it_stored() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (app, seller) = runtime.block_on(async {
        let app = TestApp::spawn().await;
        let seller = app.register("seller").await;
        (app, seller)
    });
    let mut runner = TestRunner::new(Config { cases: 24, failure_persistence: None, ..Config::default() });
    let played = std::sync::atomic::AtomicUsize::new(0);
    runner
        .run(&script(), |script| {
            let n = played.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            runtime.block_on(async {
                // A buyer of its own each time: one live thread per buyer and listing.
                let buyer = app.buyer(&format!("buyer {n}")).await;
                play(&app, &seller, &buyer, script).await
            })
        })
        .unwrap();
    runtime.block_on(async move { drop(app) });
}

#[test]
fn numbers_are_the_same_by_value() {
    assert!(same(&json!({"n": 1e17}), &json!({"n": 100000000000000000u64})));
    assert!(same(&json!([1.5, {"a": -0.0}]), &json!([1.50, {"a": 0}])));
    assert!(!same(&json!({"n": 1}), &json!({"n": 2})));
    assert!(!same(&json!({"n": 1}), &json!({"n": 1, "m": 1})));
    assert!(!same(&json!("1"), &json!(1)));
}
