//! `DATABASE_URL` naming several hosts: Haggle connects to the one that accepts writes, passing
//! over one that does not answer, and while none accepts writes it is not ready and answers
//! moves 503 with `Retry-After`, until a primary is back. (Following a primary from one server to
//! another under load is the failover chaos run's: docs/CHAOS.md.)

use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use serde_json::json;
use sqlx::{Connection, PgConnection};
use tokio_util::sync::CancellationToken;

use crate::support::{Body, Deal, TestApp, TestDb, admin_url, eventually};
use haggle_server::commands::Database;
use haggle_server::config::DatabaseArgs;
use haggle_server::embedded::DirectoryUse;

/// `DATABASE_URL` for the test database with a host that refuses connections before the real one.
fn with_a_dead_host_first(db: &TestDb) -> String {
    let url = url::Url::parse(&db.url).unwrap();
    let real = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap_or(5432));
    let user = url.username();
    format!("postgres://{user}@127.0.0.1:1,{real}/{}?target_session_attrs=read-write&sslmode=disable", db.name)
}

async fn open(url: String) -> Database {
    let args =
        DatabaseArgs { database_url: Some(url), data_dir: "unused".into(), postgres_bin_dir: None, pool_size: 10 };
    Database::open(&args, DirectoryUse::Shared).await.expect("the database opens on the reachable primary")
}

/// Makes the test database refuse writes in every new session, as a standby does, and ends the
/// sessions open now; `false` undoes it.
async fn read_only(db: &TestDb, on: bool) {
    let mut admin = PgConnection::connect(&admin_url()).await.unwrap();
    let setting = if on { "on" } else { "off" };
    sqlx::query(&format!("ALTER DATABASE \"{}\" SET default_transaction_read_only = {setting}", db.name))
        .execute(&mut admin)
        .await
        .unwrap();
    sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
    )
    .bind(&db.name)
    .execute(&mut admin)
    .await
    .unwrap();
}

async fn ready(app: &TestApp) -> u16 {
    app.send(Method::GET, "/readyz", None, Body::None, &[]).await.status
}

#[tokio::test]
async fn an_unreachable_host_is_passed_over_for_the_primary() {
    let db = Arc::new(TestDb::create().await);
    db.pool(1).await.close().await;
    let database = open(with_a_dead_host_first(&db)).await;
    let primary = database.primary.clone().expect("several hosts: the primary is followed");
    assert_eq!(primary.hosts().len(), 2);
    assert_eq!(primary.current().as_ref(), primary.hosts().get(1), "the second host, which answers");

    let app = TestApp::spawn_on(db, database.pool.clone(), |config| config.primary = Some(primary)).await;
    let deal = Deal::new(&app, json!({})).await;
    let bid = app.place(&deal.buyer, &deal.listing, 80000).await;
    app.post(format!("/v1/bids/{bid}/accept"), &deal.seller.key, json!({})).await.expect(200);
    assert_eq!(ready(&app).await, 200);
}

#[tokio::test]
async fn with_no_host_accepting_writes_moves_are_refused_503_until_a_primary_is_back() {
    let db = Arc::new(TestDb::create().await);
    db.pool(1).await.close().await;
    let database = open(with_a_dead_host_first(&db)).await;
    let primary = database.primary.clone().unwrap();
    let following = CancellationToken::new();
    tokio::spawn(primary.clone().follow(following.clone()));
    let app =
        TestApp::spawn_on(db.clone(), database.pool.clone(), |config| config.primary = Some(primary.clone())).await;
    let deal = Deal::new(&app, json!({})).await;
    let bid = app.place(&deal.buyer, &deal.listing, 80000).await;

    // Every host now refuses writes (the one a standby would, the other unreachable).
    read_only(&db, true).await;
    eventually("the primary found gone", || async { primary.current().is_none().then_some(()) }).await;
    assert_eq!(ready(&app).await, 503, "not ready without a primary");
    let refused = app.post(format!("/v1/bids/{bid}/counter"), &deal.seller.key, json!({ "amount": 95000 })).await;
    let refused = refused.expect_problem(503, "unavailable");
    assert!(refused.header("retry-after").is_some(), "503 with Retry-After");
    let read = app.get(format!("/v1/bids/{bid}"), &deal.buyer.key).await;
    assert_eq!(read.status, 503, "reads need the primary too; body: {}", read.body);

    // A primary again: found without a restart, and moves are made.
    read_only(&db, false).await;
    eventually("the primary found again", || async { primary.current().is_some().then_some(()) }).await;
    eventually("ready again", || async { (ready(&app).await == 200).then_some(()) }).await;
    let made = app.post(format!("/v1/bids/{bid}/counter"), &deal.seller.key, json!({ "amount": 95000 })).await;
    made.expect(201);
    let counters = app.count(format!("SELECT count(*) FROM bids WHERE parent_bid_id = '{bid}'")).await;
    assert_eq!(counters, 1, "the refused counter was not made; the later one was, once");
    following.cancel();
    tokio::time::sleep(Duration::from_millis(10)).await;
}
