//! Racing actions through real concurrent HTTP requests: exactly one winner, 409 for the rest,
//! never a 500 and never a second order. Each race runs on a single-threaded runtime, on a
//! multi-threaded one, and with two move workers in the instance, whose statements then run
//! side by side.

use std::collections::BTreeMap;

use futures::future::join_all;
use serde_json::json;

use crate::support::{Deal, Resp, TestApp};

/// Where a race runs: the runtime's worker threads (one: the current thread) and the instance's
/// move workers (`HAGGLE_MOVE_WORKERS`).
#[derive(Debug, Clone, Copy)]
struct Setting {
    threads: usize,
    move_workers: usize,
}

const SETTINGS: [Setting; 3] = [
    Setting { threads: 1, move_workers: 1 },
    Setting { threads: 4, move_workers: 1 },
    Setting { threads: 4, move_workers: 2 },
];

/// Runs the race in each setting, each on a fresh app and database.
fn in_every_setting<F: std::future::Future<Output = ()>>(race: impl Fn(TestApp) -> F) {
    for setting in SETTINGS {
        // Shown with a failure's output, to say which setting lost the race.
        println!("the race with {setting:?}");
        let mut runtime = match setting.threads {
            1 => tokio::runtime::Builder::new_current_thread(),
            threads => {
                let mut builder = tokio::runtime::Builder::new_multi_thread();
                builder.worker_threads(threads);
                builder
            }
        };
        runtime.enable_all().build().expect("a runtime").block_on(async {
            let app = TestApp::spawn_with(|config| config.settings.move_workers = setting.move_workers).await;
            race(app).await;
        });
    }
}

fn tally(responses: &[Resp]) -> BTreeMap<(u16, String), usize> {
    let mut counts = BTreeMap::new();
    for resp in responses {
        *counts.entry((resp.status, resp.code().to_owned())).or_default() += 1;
    }
    counts
}

#[test]
fn fifty_accepts_of_one_bid_make_one_order() {
    in_every_setting(fifty_accepts_of_one_bid_make_one_order_race);
}

async fn fifty_accepts_of_one_bid_make_one_order_race(app: TestApp) {
    let deal = Deal::new(&app, json!({ "quantity": 10 })).await;
    let bid = app.place(&deal.buyer, &deal.listing, 90000).await;
    let path = format!("/v1/bids/{bid}/accept");
    let responses = join_all((0..50).map(|_| app.post_empty(&path, &deal.seller.key))).await;
    let counts = tally(&responses);
    assert_eq!(counts.get(&(200, String::new())), Some(&1), "{counts:?}");
    assert_eq!(counts.get(&(409, "invalid_transition".to_owned())), Some(&49), "{counts:?}");
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 1);
    assert_eq!(app.count("SELECT quantity_available::bigint FROM listings").await, 9);
}

#[test]
fn thirty_counters_of_one_bid_leave_one_pending_bid() {
    in_every_setting(thirty_counters_of_one_bid_leave_one_pending_bid_race);
}

async fn thirty_counters_of_one_bid_leave_one_pending_bid_race(app: TestApp) {
    let deal = Deal::new(&app, json!({})).await;
    let bid = app.place(&deal.buyer, &deal.listing, 80000).await;
    let path = format!("/v1/bids/{bid}/counter");
    let responses = join_all((0..30).map(|i| app.post(&path, &deal.seller.key, json!({ "amount": 90000 + i })))).await;
    let counts = tally(&responses);
    assert_eq!(counts.get(&(201, String::new())), Some(&1), "{counts:?}");
    assert_eq!(counts.get(&(409, "invalid_transition".to_owned())), Some(&29), "{counts:?}");
    assert_eq!(app.count("SELECT count(*) FROM bids").await, 2);
    assert_eq!(app.count("SELECT count(*) FROM bids WHERE status = 'PENDING'").await, 1);
    assert_eq!(app.count("SELECT rounds::bigint FROM threads").await, 2);
}

#[test]
fn accept_racing_withdraw_has_one_winner() {
    in_every_setting(accept_racing_withdraw_has_one_winner_race);
}

async fn accept_racing_withdraw_has_one_winner_race(app: TestApp) {
    let seller = app.register("seller").await;
    let buyer = app.buyer("buyer").await;
    let listing = app.listing(&seller, json!({ "quantity": 100, "max_threads_per_buyer": 100 })).await;
    let mut accepted = 0;
    for _ in 0..20 {
        let bid = app.place(&buyer, &listing, 90000).await;
        let (accept, withdraw) = tokio::join!(
            app.post_empty(format!("/v1/bids/{bid}/accept"), &seller.key),
            app.post_empty(format!("/v1/bids/{bid}/withdraw"), &buyer.key),
        );
        let outcome = (accept.status, withdraw.status);
        assert!(outcome == (200, 409) || outcome == (409, 200), "{outcome:?}: {} / {}", accept.body, withdraw.body);
        let orders = app.count(format!("SELECT count(*) FROM orders WHERE bid_id = '{bid}'")).await;
        assert_eq!(orders, i64::from(accept.status == 200));
        accepted += usize::from(accept.status == 200);
    }
    assert_eq!(app.count("SELECT count(*) FROM orders").await, accepted as i64);
}

#[test]
fn two_buyers_racing_for_the_last_unit() {
    in_every_setting(two_buyers_racing_for_the_last_unit_race);
}

async fn two_buyers_racing_for_the_last_unit_race(app: TestApp) {
    for _ in 0..5 {
        let seller = app.register("seller").await;
        let listing = app.listing(&seller, json!({ "quantity": 1 })).await;
        let mut offers = Vec::new();
        for name in ["first", "second"] {
            let buyer = app.buyer(name).await;
            let opening = app.place(&buyer, &listing, 90000).await;
            offers.push((buyer, app.counter(&seller, &opening, 95000).await));
        }
        let responses =
            join_all(offers.iter().map(|(buyer, bid)| app.post_empty(format!("/v1/bids/{bid}/accept"), &buyer.key)))
                .await;
        let counts = tally(&responses);
        assert_eq!(counts.get(&(200, String::new())), Some(&1), "{counts:?}");
        assert_eq!(counts.get(&(409, "invalid_transition".to_owned())), Some(&1), "{counts:?}");
        assert_eq!(app.count(format!("SELECT count(*) FROM orders WHERE listing_id = '{listing}'")).await, 1);
        let status: String = sqlx::query_scalar(&format!("SELECT status FROM listings WHERE id = '{listing}'"))
            .fetch_one(&app.pool)
            .await
            .unwrap();
        assert_eq!(status, "SOLD");
        let loser = responses.iter().find(|r| r.status == 409).unwrap();
        assert_eq!(loser.body["current_status"], "REJECTED");
    }
}

#[test]
fn concurrent_placements_by_one_buyer_open_one_thread() {
    in_every_setting(concurrent_placements_by_one_buyer_open_one_thread_race);
}

async fn concurrent_placements_by_one_buyer_open_one_thread_race(app: TestApp) {
    let deal = Deal::new(&app, json!({ "max_threads_per_buyer": 10 })).await;
    let path = format!("/v1/listings/{}/bids", deal.listing);
    // Each with its own Idempotency-Key: the losers' answers are stored like any refusal.
    let keys: Vec<String> = (0..10).map(|i| format!("placement-{i}")).collect();
    let responses = join_all(
        keys.iter()
            .enumerate()
            .map(|(i, key)| app.post_keyed(&path, Some(&deal.buyer.key), json!({ "amount": 80000 + i }), key)),
    )
    .await;
    let counts = tally(&responses);
    assert_eq!(counts.get(&(201, String::new())), Some(&1), "{counts:?}");
    assert_eq!(counts.get(&(409, "thread_active".to_owned())), Some(&9), "{counts:?}");
    assert_eq!(app.count("SELECT count(*) FROM threads").await, 1);
}

#[test]
fn purchases_never_oversell() {
    in_every_setting(purchases_never_oversell_race);
}

async fn purchases_never_oversell_race(app: TestApp) {
    let seller = app.register("seller").await;
    let listing = app.listing(&seller, json!({ "quantity": 3 })).await;
    let mut shoppers = Vec::new();
    for i in 0..12 {
        shoppers.push(app.register(&format!("shopper {i}")).await);
    }
    let path = format!("/v1/listings/{listing}/purchase");
    let responses = join_all(shoppers.iter().map(|s| app.post_empty(&path, &s.key))).await;
    let counts = tally(&responses);
    assert_eq!(counts.get(&(201, String::new())), Some(&3), "{counts:?}");
    assert_eq!(counts.get(&(409, "listing_unavailable".to_owned())), Some(&9), "{counts:?}");
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 3);
}

/// A listing asking 100000 bought at the ask: its deal and the order's id.
async fn purchased(app: &TestApp) -> (Deal, String) {
    let deal = Deal::new(app, json!({})).await;
    let resp = app.post_empty(format!("/v1/listings/{}/purchase", deal.listing), &deal.buyer.key).await.expect(201);
    (deal, resp.body["order"]["id"].as_str().unwrap().to_owned())
}

/// How many events of a type were published.
async fn published(app: &TestApp, kind: &str) -> i64 {
    app.count(format!("SELECT count(*) FROM events WHERE type = '{kind}'")).await
}

#[test]
fn twenty_fulfilments_of_one_order_fulfil_it_once() {
    in_every_setting(twenty_fulfilments_of_one_order_fulfil_it_once_race);
}

async fn twenty_fulfilments_of_one_order_fulfil_it_once_race(app: TestApp) {
    let (deal, order) = purchased(&app).await;
    let path = format!("/v1/orders/{order}/fulfil");
    let responses =
        join_all((0..20).map(|i| app.post(&path, &deal.seller.key, json!({ "reference": format!("r{i}") })))).await;
    let counts = tally(&responses);
    assert_eq!(counts.get(&(200, String::new())), Some(&1), "{counts:?}");
    assert_eq!(counts.get(&(409, "invalid_transition".to_owned())), Some(&19), "{counts:?}");
    let winner = responses.iter().find(|resp| resp.status == 200).unwrap();
    let stored: Option<String> = sqlx::query_scalar("SELECT fulfilment_reference FROM orders WHERE id = $1::uuid")
        .bind(&order)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(stored.as_deref(), winner.body["fulfilment"]["reference"].as_str(), "the winner's reference is kept");
    assert_eq!(published(&app, "order.fulfilled").await, 1);
}

#[test]
fn two_payments_confirmed_at_once_never_pass_the_order() {
    in_every_setting(two_payments_confirmed_at_once_never_pass_the_order_race);
}

async fn two_payments_confirmed_at_once_never_pass_the_order_race(app: TestApp) {
    let (deal, order) = purchased(&app).await;
    let mut paths = Vec::new();
    for reference in ["ch_a", "ch_b"] {
        let body = json!({ "amount": 60000, "reference": reference });
        let resp = app.post(format!("/v1/orders/{order}/payments"), &deal.buyer.key, body).await.expect(201);
        let payment = resp.body["payment"]["id"].as_str().unwrap().to_owned();
        paths.push(format!("/v1/orders/{order}/payments/{payment}/confirm"));
    }
    // Ten confirmations of each, interleaved: each payment fits alone, not both.
    let responses = join_all((0..20).map(|i| app.post_empty(&paths[i % 2], &deal.seller.key))).await;
    let counts = tally(&responses);
    assert_eq!(counts.get(&(200, String::new())), Some(&1), "{counts:?}");
    let refused: usize = counts
        .iter()
        .filter(|((status, code), _)| *status == 409 && (code == "invalid_transition" || code == "exceeds_outstanding"))
        .map(|(_, count)| count)
        .sum();
    assert_eq!(refused, 19, "{counts:?}");
    assert_eq!(counts.get(&(409, "exceeds_outstanding".to_owned())), Some(&10), "{counts:?}");
    assert_eq!(app.count(format!("SELECT paid_amount FROM orders WHERE id = '{order}'")).await, 60000);
    assert_eq!(app.count("SELECT count(*) FROM payments WHERE status = 'CONFIRMED'").await, 1);
    assert_eq!(published(&app, "payment.confirmed").await, 1);
}

#[test]
fn completion_by_the_buyer_racing_the_sweeper_completes_once() {
    in_every_setting(completion_by_the_buyer_racing_the_sweeper_completes_once_race);
}

async fn completion_by_the_buyer_racing_the_sweeper_completes_once_race(app: TestApp) {
    let (deal, order) = purchased(&app).await;
    app.post_empty(format!("/v1/orders/{order}/fulfil"), &deal.seller.key).await.expect(200);
    sqlx::query("UPDATE orders SET fulfilled_at = now() - interval '15 days' WHERE id = $1::uuid")
        .bind(&order)
        .execute(&app.pool)
        .await
        .unwrap();
    let path = format!("/v1/orders/{order}/complete");
    let two_weeks = std::time::Duration::from_secs(14 * 24 * 3600);
    let market = app.market();
    let buyer = join_all((0..10).map(|_| app.post_empty(&path, &deal.buyer.key)));
    let sweeper = join_all((0..3).map(|_| haggle_server::sweeper::complete_orders(&market, two_weeks, 10)));
    let (responses, swept) = futures::join!(buyer, sweeper);
    let by_sweeper: usize = swept.into_iter().map(|outcome| outcome.unwrap()).sum();
    let counts = tally(&responses);
    let by_buyer = counts.get(&(200, String::new())).copied().unwrap_or(0);
    assert_eq!(by_buyer + by_sweeper, 1, "{counts:?}, {by_sweeper} by the sweeper");
    assert_eq!(counts.get(&(409, "invalid_transition".to_owned())), Some(&(10 - by_buyer)), "{counts:?}");
    assert_eq!(published(&app, "order.completed").await, 1);
}
