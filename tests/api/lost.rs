//! Database connections lost under the server: a batched move whose answer never came back
//! though it committed, and a pool whose every connection the server ended.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use serde_json::json;
use sqlx::postgres::PgSslMode;
use sqlx::{Connection, PgConnection};

use crate::proxy::PgProxy;
use crate::support::{Agent, Deal, Resp, TestApp, TestDb};
use haggle_server::app::MOVES_APPLICATION_NAME;

#[tokio::test]
async fn a_batched_move_committed_but_unanswered_is_not_refused_as_already_made() {
    let db = Arc::new(TestDb::create().await);
    db.pool(1).await.close().await;
    let url = url::Url::parse(&db.url).unwrap();
    let upstream = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap_or(5432));
    let proxy = PgProxy::start(upstream, MOVES_APPLICATION_NAME).await;
    let through_proxy = db.options().host("127.0.0.1").port(proxy.port).ssl_mode(PgSslMode::Disable);
    let pool = haggle_server::db::connect(through_proxy, 10).await.unwrap();
    let app = TestApp::spawn_on(db, pool, |_| {}).await;
    let deal = Deal::new(&app, json!({})).await;
    let bid = app.place(&deal.buyer, &deal.listing, 80000).await;

    // The batcher's statement of the counter commits, and its connection is lost before the
    // answer arrives.
    proxy.cut_after_next_statement();
    let answer = app.post(format!("/v1/bids/{bid}/counter"), &deal.seller.key, json!({ "amount": 95000 })).await;
    assert_eq!(proxy.cuts(), 1, "the batcher's statement was cut; answer: {}", answer.body);
    let made = app.count(format!("SELECT count(*) FROM bids WHERE parent_bid_id = '{bid}'")).await;
    assert_eq!(made, 1, "the counter was made");

    // Made, so not refused as a move on a bid already countered: the outcome is unknown.
    let answer = answer.expect_problem(503, "unavailable");
    let detail = answer.body["detail"].as_str().unwrap();
    assert!(detail.contains("unknown") && detail.contains("Idempotency-Key"), "{detail}");
    assert_eq!(answer.header("retry-after"), Some("1"));
    let read = app.get(format!("/v1/bids/{bid}"), &deal.seller.key).await.expect(200);
    assert_eq!(read.body["status"], "COUNTERED");
}

/// Ends every connection to the app's database but the caller's, and waits until they are gone.
async fn end_every_connection(app: &TestApp) -> usize {
    let mut admin = PgConnection::connect(app.database_url()).await.unwrap();
    let ended: Vec<i32> = sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .fetch_all(&mut admin)
    .await
    .unwrap();
    sqlx::query("SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid")
        .bind(&ended)
        .execute(&mut admin)
        .await
        .unwrap();
    for _ in 0..500 {
        let left: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)")
            .bind(&ended)
            .fetch_one(&mut admin)
            .await
            .unwrap();
        if left == 0 {
            return ended.len();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the ended backends did not exit");
}

#[tokio::test]
async fn requests_after_the_database_ended_every_connection_are_served_on_new_ones() {
    // Every request looks its API key up, as it does on an instance whose cache is cold.
    let app = TestApp::spawn_with(|config| config.settings.key_cache_ttl = Duration::ZERO).await;
    let seller = app.register("seller").await;
    let mut buyers: Vec<Agent> = Vec::new();
    let (mut countered, mut fresh, mut bids) = (Vec::new(), Vec::new(), Vec::new());
    for index in 0..10 {
        let buyer = app.buyer(&format!("buyer {index}")).await;
        let listing = app.listing(&seller, json!({})).await;
        bids.push(app.place(&buyer, &listing, 80000).await);
        countered.push(listing);
        fresh.push(app.listing(&seller, json!({})).await);
        buyers.push(buyer);
    }
    // The pool holds several connections, idle.
    join_all((0..20).map(|_| app.get("/v1/listings", &seller.key))).await;

    let ended = end_every_connection(&app).await;
    assert!(ended >= 3, "only {ended} connections were ended");

    let keys: Vec<String> = (0..20).map(|_| uuid::Uuid::new_v4().to_string()).collect();
    let mut requests: Vec<futures::future::BoxFuture<'_, Resp>> = Vec::new();
    for index in 0..10 {
        let (bid, listing, buyer) = (&bids[index], &fresh[index], &buyers[index]);
        let counter = json!({ "amount": 95000 });
        requests.push(Box::pin(app.post_keyed(
            format!("/v1/bids/{bid}/counter"),
            Some(&seller.key),
            counter,
            &keys[2 * index],
        )));
        // Half the placements without a key: made by the batcher, on connections of its own.
        let (placement, path) = (json!({ "amount": 70000 }), format!("/v1/listings/{listing}/bids"));
        requests.push(match index % 2 {
            0 => Box::pin(app.post_keyed(path, Some(&buyer.key), placement, &keys[2 * index + 1])),
            _ => Box::pin(app.post(path, &buyer.key, placement)),
        });
        requests.push(Box::pin(app.get(format!("/v1/bids/{bid}"), &buyer.key)));
        requests.push(Box::pin(app.get(format!("/v1/listings/{}", countered[index]), &buyer.key)));
        requests.push(Box::pin(app.get("/v1/threads", &buyer.key)));
    }
    let answers = join_all(requests).await;
    let failed: Vec<String> = answers
        .iter()
        .filter(|answer| answer.status >= 300)
        .map(|answer| format!("{} {}", answer.status, answer.body))
        .collect();
    assert!(failed.is_empty(), "{} of {} requests failed: {failed:#?}", failed.len(), answers.len());
    assert_eq!(app.count("SELECT count(*) FROM bids WHERE parent_bid_id IS NOT NULL").await, 10);
    assert_eq!(app.count("SELECT count(*) FROM threads").await, 20);
}
