//! The operator's commands, run as the real binary against a test database.

use std::process::Command;

use serde_json::Value;

use crate::support::{TestDb, haggle_bin};

fn haggle(db: &TestDb, args: &[&str]) -> std::process::Output {
    Command::new(haggle_bin()).args(args).env("DATABASE_URL", &db.url).env("RUST_LOG", "warn").output().unwrap()
}

#[tokio::test]
async fn operators_create_agents_and_set_tiers_from_the_command_line() {
    let db = TestDb::create().await;
    let migrated = haggle(&db, &["migrate"]);
    assert!(migrated.status.success(), "{}", String::from_utf8_lossy(&migrated.stderr));

    let created = haggle(&db, &["admin", "create-agent", "--name", "market-maker", "--tier", "SEAT"]);
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    let created: Value = serde_json::from_slice(&created.stdout).unwrap();
    assert_eq!(created["agent"]["tier"], "SEAT");
    let key = created["api_key"].as_str().unwrap().to_owned();
    let id = created["agent"]["id"].as_str().unwrap().to_owned();

    let raised = haggle(&db, &["admin", "set-tier", &id, "advertiser"]);
    assert!(raised.status.success(), "{}", String::from_utf8_lossy(&raised.stderr));
    let raised: Value = serde_json::from_slice(&raised.stdout).unwrap();
    assert_eq!(raised["agent"]["tier"], "ADVERTISER");

    let unknown = haggle(&db, &["admin", "set-tier", &uuid::Uuid::now_v7().to_string(), "SEAT"]);
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no agent"));
    let bad_tier = haggle(&db, &["admin", "set-tier", &id, "GOLD"]);
    assert!(!bad_tier.status.success());
    assert!(String::from_utf8_lossy(&bad_tier.stderr).contains("unknown tier"));
    let nameless = haggle(&db, &["admin", "create-agent", "--name", ""]);
    assert!(!nameless.status.success());
    assert!(String::from_utf8_lossy(&nameless.stderr).contains("name"));

    // The key works against a server on the same database.
    let pool = db.pool(2).await;
    let caller =
        haggle::db::agents::caller_by_key_digest(&pool, &haggle::secrets::sha256(key.as_bytes())).await.unwrap();
    assert_eq!(caller.map(|c| c.tier), Some(haggle::domain::Tier::Advertiser));
    pool.close().await;
}
