//! Database connections lost under the server: a batched move whose answer never came back
//! though it committed.

use std::sync::Arc;

use serde_json::json;
use sqlx::postgres::PgSslMode;

use crate::proxy::PgProxy;
use crate::support::{Deal, TestApp, TestDb};
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
