//! The operator's commands, run as the real binary against a test database.

use std::process::Command;

use serde_json::Value;

use crate::support::{ADMIN_TOKEN, TestApp, TestDb, haggle_bin};

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
        haggle_server::db::agents::caller_by_key_digest(&pool, &haggle_server::secrets::sha256(key.as_bytes()))
            .await
            .unwrap();
    assert_eq!(caller.map(|c| c.tier), Some(haggle_domain::Tier::Advertiser));
    pool.close().await;
}

/// `haggle bench` against a live server, as an operator runs it.
async fn bench(app: &TestApp, args: &[&str]) -> String {
    // Awaited, not blocking: the server under test runs on this test's runtime.
    let output = tokio::process::Command::new(haggle_bin())
        .args(["bench", "--url", &app.base, "--admin-token", ADMIN_TOKEN])
        .args(args)
        .env("DATABASE_URL", app.database_url())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    stdout
}

#[tokio::test]
async fn the_bench_measures_negotiations_and_sets_them_against_pgbench() {
    let app = TestApp::spawn().await;
    let dir = crate::support::scratch_dir();
    let json = dir.path().join("w1.json");
    let json_arg = json.to_str().unwrap();
    let printed = bench(
        &app,
        &[
            "--concurrency",
            "2",
            "--negotiations",
            "12",
            "--warmup",
            "2",
            "--pgbench",
            "--pgbench-seconds",
            "1",
            "--json",
            json_arg,
        ],
    )
    .await;
    assert!(printed.contains("errors       none"), "{printed}");
    assert!(printed.contains("pgbench      tpcb-like, 2 clients, 1 s"), "{printed}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let level = &report["levels"][0];
    assert_eq!(level["figures"]["completed"], 12);
    // Four state-changing calls a negotiation, all answered.
    let all = level["figures"]["calls"].as_array().unwrap().iter().find(|row| row["call"] == "all").unwrap();
    assert_eq!(all["ok"], 48);
    let pgbench = &level["pgbench"];
    assert!(pgbench["transactions_per_second"].as_f64().unwrap() > 0.0, "{pgbench}");
    let ratio = all["calls_per_second"].as_f64().unwrap() / pgbench["transactions_per_second"].as_f64().unwrap();
    assert!((pgbench["ratio"].as_f64().unwrap() - ratio).abs() < 1e-9);
    // pgbench's tables are gone again.
    assert_eq!(app.count("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'pgbench%'").await, 0);

    // W3: both sides' policies play whole negotiations from one opening bid, at every level of
    // a sweep, with the figures in the JSON file too.
    let json = dir.path().join("w3.json");
    let w3 = ["--workload", "w3", "--concurrency", "1,2", "--negotiations", "6", "--warmup", "2", "--json"];
    let printed = bench(&app, &[&w3[..], &[json.to_str().unwrap()]].concat()).await;
    assert!(printed.contains("outcomes     ACCEPTED 6"), "{printed}");
    assert!(printed.contains("== haggle bench: w3, concurrency 2 =="), "{printed}");
    assert!(printed.contains("== haggle bench: w3 sweep"), "{printed}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let levels = report["levels"].as_array().unwrap();
    assert_eq!(levels.len(), 2);
    for level in levels {
        assert_eq!(level["conditions"]["warmup"], 2);
        assert_eq!(level["figures"]["completed"], 6);
        assert_eq!(level["auto"]["outcomes"]["ACCEPTED"], 6, "{level}");
        let place = level["figures"]["calls"].as_array().unwrap().iter().find(|row| row["call"] == "place").unwrap();
        assert_eq!(place["ok"], 6);
        assert!(level["auto"]["db_ms"]["p50"].as_f64().unwrap() > 0.0, "{level}");
    }
}

#[tokio::test]
async fn the_bench_sends_idempotency_keys_only_when_asked() {
    let app = TestApp::spawn().await;
    let w2 = ["--workload", "w2", "--concurrency", "2", "--negotiations", "6", "--warmup", "0"];

    let printed = bench(&app, &w2).await;
    assert!(printed.contains("errors       none"), "{printed}");
    assert!(printed.contains("idempotency keys: no"), "{printed}");
    assert_eq!(app.count("SELECT count(*) FROM idempotency_keys").await, 0);

    let dir = crate::support::scratch_dir();
    let json = dir.path().join("w2.json");
    let printed = bench(&app, &[&w2[..], &["--idempotency-keys", "--json", json.to_str().unwrap()]].concat()).await;
    assert!(printed.contains("errors       none"), "{printed}");
    assert!(printed.contains("idempotency keys: yes"), "{printed}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["levels"][0]["conditions"]["idempotency_keys"], true);
    assert!(report["command"].as_str().unwrap().contains("--idempotency-keys"), "{report}");
    // Each measured placement and withdrawal, at the least, was made under a key of its own.
    let keys = app.count("SELECT count(*) FROM idempotency_keys").await;
    assert!(keys >= 12, "{keys} idempotency keys");
}

#[tokio::test]
async fn the_bench_says_what_it_lacks_before_it_starts() {
    let app = TestApp::spawn().await;
    let run = |url: String, token: &'static str| async move {
        let output = tokio::process::Command::new(haggle_bin())
            .args(["bench", "--url", &url, "--admin-token", token, "--negotiations", "1"])
            .output()
            .await
            .unwrap();
        assert!(!output.status.success());
        String::from_utf8_lossy(&output.stderr).into_owned()
    };

    let stderr = run(app.base.clone(), "not-the-token").await;
    assert!(
        stderr.contains("the server refused the admin token")
            && stderr.contains("HAGGLE_ADMIN_TOKEN")
            && stderr.contains("AGENCY tier"),
        "{stderr}"
    );
    assert_eq!(app.count("SELECT count(*) FROM agents").await, 0);

    // Nobody listening (a port just freed).
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let stderr = run(format!("http://127.0.0.1:{port}"), ADMIN_TOKEN).await;
    assert!(stderr.contains("cannot reach a Haggle server at") && stderr.contains("--url"), "{stderr}");
}

#[tokio::test]
async fn the_bench_measures_negotiations_through_mcp_beside_rest() {
    let app = TestApp::spawn().await;
    let dir = crate::support::scratch_dir();
    let json = dir.path().join("mcp.json");
    let args = ["--workload", "mcp", "--concurrency", "2", "--negotiations", "6", "--warmup", "2", "--json"];
    let printed = bench(&app, &[&args[..], &[json.to_str().unwrap()]].concat()).await;
    assert!(printed.contains("== haggle bench: w1 over REST and MCP, concurrency 2"), "{printed}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let phases: Vec<&str> = report["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|level| level["conditions"]["workload"].as_str().unwrap())
        .collect();
    assert_eq!(phases, ["mcp/rest", "mcp/rest+keys", "mcp/mcp-session", "mcp/mcp-stateless"]);
    for level in report["levels"].as_array().unwrap() {
        assert_eq!(
            (level["figures"]["completed"].as_u64(), level["figures"]["failed"].as_u64()),
            (Some(6), Some(0)),
            "{level}"
        );
        let all = level["figures"]["calls"].as_array().unwrap().iter().find(|row| row["call"] == "all").unwrap();
        assert_eq!((all["ok"].as_u64(), all["errors"].as_u64()), (Some(24), Some(0)), "{level}");
    }
    // Two REST phases and two MCP ones: 24 negotiations measured and 8 warm-ups, each an order.
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 32);
}
