//! The binary's commands, run as the real binary: the operator's against a test database, the
//! bench and the terminal client against a live server.

use std::process::Command;
use std::time::Duration;

use haggle_client::{Client, NewListing, PolicyScope, ThreadQuery};
use haggle_domain::strategy::{Policy, Strategy};
use haggle_domain::{Party, ThreadStatus};
use serde_json::Value;
use uuid::Uuid;

use crate::client::parties;
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

#[tokio::test]
async fn the_bench_measures_negotiations_over_a2a_beside_keyed_rest() {
    let app = TestApp::spawn().await;
    let dir = crate::support::scratch_dir();
    let json = dir.path().join("a2a.json");
    // The server runs in this process: its CPU per call is this process's.
    let pid = std::process::id().to_string();
    let args = ["--workload", "a2a", "--concurrency", "2", "--negotiations", "6", "--warmup", "2", "--server-pid"];
    let printed = bench(&app, &[&args[..], &[&pid, "--json", json.to_str().unwrap()]].concat()).await;
    assert!(printed.contains("== haggle bench: w1 over REST with keys and A2A, concurrency 2"), "{printed}");
    assert!(printed.contains("A2A's cost per move against keyed REST's: "), "{printed}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let levels = report["levels"].as_array().unwrap();
    let phases: Vec<&str> = levels.iter().map(|level| level["conditions"]["workload"].as_str().unwrap()).collect();
    assert_eq!(phases, ["a2a/rest+keys", "a2a/jsonrpc"]);
    for level in levels {
        assert_eq!(
            (level["figures"]["completed"].as_u64(), level["figures"]["failed"].as_u64()),
            (Some(6), Some(0)),
            "{level}"
        );
        let all = level["figures"]["calls"].as_array().unwrap().iter().find(|row| row["call"] == "all").unwrap();
        assert_eq!((all["ok"].as_u64(), all["errors"].as_u64()), (Some(24), Some(0)), "{level}");
        assert_eq!(level["conditions"]["idempotency_keys"], true);
    }
    // Two phases: 12 negotiations measured and 4 warm-ups, each an order; every A2A move keyed.
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 16);
    assert!(app.count("SELECT count(*) FROM idempotency_keys").await >= 64);
}

#[tokio::test]
async fn haggle_a2a_negotiates_as_a_buyer_with_an_agent_found_by_its_card() {
    let app = TestApp::spawn().await;
    let deal = crate::support::Deal::new(&app, serde_json::json!({ "title": "Walnut desk" })).await;
    let policy = serde_json::json!({ "limit": 90000, "counter": { "strategy": "split" } });
    app.put(format!("/v1/listings/{}/policy", deal.listing), &deal.seller.key, policy.clone()).await.expect(200);
    let base = app.base.clone();
    let (ok, stdout, stderr) =
        haggle_as_output(&app, &deal.buyer.key, &["a2a", &base, "--listing", &deal.listing, "--ascii"]).await;
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stderr.contains("Haggle at ") && stderr.contains("as buyer (AGENCY)"), "{stderr}");
    assert!(stdout.starts_with("round 1  buyer"), "{stdout}");
    assert!(stdout.contains("  seller  ") && stdout.contains("ACCEPTED at "), "{stdout}");
    let order = stdout.lines().last().unwrap();
    assert!(order.contains("(order ") && order.contains(" USD"), "{stdout}");
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 1);

    // Found by words, at the card's own URL, with a budget below the seller's floor: no order.
    let lamp = app.listing(&deal.seller, serde_json::json!({ "title": "Brass lamp" })).await;
    app.put(format!("/v1/listings/{lamp}/policy"), &deal.seller.key, policy).await.expect(200);
    let card = format!("{base}/.well-known/agent-card.json");
    let args = ["a2a", &card, "--search", "lamp", "--budget", "50000", "--strategy", "balanced", "--ascii"];
    let (ok, stdout, stderr) = haggle_as_output(&app, &deal.buyer.key, &args).await;
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stderr.contains("\"Brass lamp\""), "{stderr}");
    assert!(!stdout.contains("ACCEPTED"), "{stdout}");
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 1);
}

#[tokio::test]
async fn haggle_a2a_says_what_is_wrong_with_the_agent_or_the_key() {
    let app = TestApp::spawn().await;
    let deal = crate::support::Deal::new(&app, serde_json::json!({})).await;
    let listing = deal.listing.as_str();

    let (ok, _, stderr) = haggle_as_output(&app, "hk_not_a_key", &["a2a", &app.base, "--listing", listing]).await;
    assert!(!ok && stderr.contains("the agent refused the API key (401"), "{stderr}");

    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let nobody = format!("http://127.0.0.1:{port}");
    let (ok, _, stderr) = haggle_as_output(&app, &deal.buyer.key, &["a2a", &nobody, "--listing", listing]).await;
    assert!(!ok && stderr.contains(&format!("could not reach an A2A agent at {nobody}")), "{stderr}");

    // An A2A agent whose card declares no negotiation extension.
    let other = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", other.local_addr().unwrap());
    let card = serde_json::json!({
        "name": "Echo", "description": "repeats what it is told", "version": "1.0",
        "supportedInterfaces": [{ "url": format!("{url}/a2a"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0" }],
        "capabilities": { "streaming": false },
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"], "skills": [],
    });
    let router = axum::Router::new()
        .route("/.well-known/agent-card.json", axum::routing::get(move || async move { axum::Json(card) }));
    tokio::spawn(async move { axum::serve(other, router).await });
    let (ok, _, stderr) = haggle_as_output(&app, &deal.buyer.key, &["a2a", &url, "--listing", listing]).await;
    assert!(!ok && stderr.contains("\"Echo\"") && stderr.contains("does not declare Haggle's negotiation extension"));
    assert!(stderr.contains("https://haggle.dev/a2a/negotiation/v1"), "{stderr}");
    let (ok, _, stderr) =
        haggle_as_output(&app, &deal.buyer.key, &["a2a", &format!("{url}/nothing.json"), "--listing", listing]).await;
    assert!(!ok && stderr.contains("404") && stderr.contains("no A2A Agent Card there"), "{stderr}");
    assert_eq!(app.count("SELECT count(*) FROM bids").await, 0);
}

/// Runs `haggle <args>` against the app as the agent with `key`, and returns its stdout.
async fn haggle_as(app: &TestApp, key: &str, args: &[&str]) -> String {
    let (succeeded, stdout, stderr) = haggle_as_output(app, key, args).await;
    assert!(succeeded, "haggle {args:?} failed:\n{stdout}\n{stderr}");
    stdout
}

/// Runs `haggle <args>` against the app as the agent with `key` (none when empty), and returns
/// whether it succeeded, its stdout and its stderr.
async fn haggle_as_output(app: &TestApp, key: &str, args: &[&str]) -> (bool, String, String) {
    let output = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(haggle_bin())
            .args(args)
            .env("HAGGLE_URL", &app.base)
            .env("HAGGLE_API_KEY", key)
            .env("RUST_LOG", "warn")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("haggle finishes")
    .expect("haggle runs");
    let text = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).into_owned();
    (output.status.success(), text(output.stdout), text(output.stderr))
}

#[tokio::test]
async fn the_commands_say_what_is_wrong_in_their_own_terms() {
    let app = TestApp::spawn().await;
    let (seller, _, _, buyer_key) = parties(&app).await;

    // Every agent command names the CLI's way to give a key, not the server's header.
    for command in [&["listings"][..], &["threads"], &["negotiate", "--listing", &Uuid::nil().to_string()]] {
        let (ok, _, stderr) = haggle_as_output(&app, "", command).await;
        assert!(!ok && stderr.contains("--api-key or HAGGLE_API_KEY"), "{command:?}: {stderr}");
        assert!(!stderr.contains("Authorization"), "{command:?}: {stderr}");
    }

    // A budget is refused by the flags that set it.
    let listing = seller.create_listing(&NewListing::new("Desk lamp", 3_800)).await.unwrap();
    let id = listing.id.to_string();
    let (ok, _, stderr) = haggle_as_output(&app, &buyer_key, &["negotiate", "--listing", &id, "--rounds", "0"]).await;
    assert!(!ok && stderr.contains("--rounds: must be between 1 and"), "{stderr}");

    // A seller that never answers (no policy, nobody watching) is a failure, not a result.
    let line = ["negotiate", "--listing", &id, "--wait", "1", "--timeout", "1"];
    let (ok, stdout, stderr) = haggle_as_output(&app, &buyer_key, &line).await;
    assert!(!ok, "{stdout}\n{stderr}");
    assert!(stdout.starts_with("round 1  buyer"), "{stdout}");
    assert!(stderr.contains("the seller did not answer within --timeout (1 s)"), "{stderr}");

    // The health check goes through the client's readiness call, given the readiness URL or the base.
    for url in [format!("{}/readyz", app.base), app.base.clone()] {
        let (ok, _, stderr) = haggle_as_output(&app, "", &["healthcheck", "--url", &url]).await;
        assert!(ok, "{url}: {stderr}");
    }
    let (ok, _, stderr) = haggle_as_output(&app, "", &["healthcheck", "--url", "http://127.0.0.1:1/readyz"]).await;
    assert!(!ok && stderr.contains("cannot reach a Haggle server at http://127.0.0.1:1"), "{stderr}");
}

#[tokio::test]
async fn the_negotiate_command_plays_a_profile_against_a_seller_policy() {
    let app = TestApp::spawn().await;
    let (seller, buyer, _, buyer_key) = parties(&app).await;
    // The balanced profile opens at 20.00 and pays up to 30.00; the listing asks 38.00.
    let listing = seller.create_listing(&NewListing::new("Desk lamp", 3_800)).await.unwrap();
    seller.set_policy(PolicyScope::Listing(listing.id), &Policy::new(2_500, Strategy::Tier {})).await.unwrap();

    let id = listing.id.to_string();
    let out = haggle_as(&app, &buyer_key, &["negotiate", "--listing", &id, "--strategy", "balanced", "--cpm"]).await;
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("round 1  buyer") && lines[0].contains("20.00"), "{out}");
    assert!(lines[1].starts_with("round 2  seller"), "{out}");
    assert!(lines.iter().all(|line| line.is_ascii()), "not a terminal, so ASCII:\n{out}");

    // The result is what the server recorded.
    let threads = buyer.list_threads(&ThreadQuery::default()).await.unwrap();
    let thread = buyer.get_thread(threads.data[0].id).await.unwrap();
    assert_eq!(lines.len(), thread.bids.len() + 1, "{out}");
    let outcome = lines.last().unwrap();
    let last = thread.bids.last().unwrap();
    match thread.thread.status {
        ThreadStatus::Accepted => assert!(outcome.starts_with(&format!("ACCEPTED at {}", price(last.amount))), "{out}"),
        ThreadStatus::Rejected => assert!(outcome.starts_with("REJECTED"), "{out}"),
        other => panic!("the negotiation ended {other:?}:\n{out}"),
    }
    // No buyer offer ever went past the profile's 30.00.
    assert!(thread.bids.iter().filter(|bid| bid.author == Party::Buyer).all(|bid| bid.amount <= 3_000), "{out}");
}

#[tokio::test]
async fn a_newcomers_profile_fits_the_listing_and_bayes_bargains_with_bayes() {
    let app = TestApp::spawn().await;
    let (seller, buyer, _, buyer_key) = parties(&app).await;
    // A 350.00 lamp: balanced, scaled to the ask, opens at 233.33 and never pays more than 350.00.
    let lamp = seller.create_listing(&NewListing::new("Brass lamp", 35_000)).await.unwrap();
    let bayes = Policy { max_auto_rounds: 20, ..Policy::new(25_000, Strategy::Bayes { e: 0.5 }) };
    seller.set_policy(PolicyScope::Listing(lamp.id), &bayes).await.unwrap();
    let id = lamp.id.to_string();
    let line = ["negotiate", "--listing", &id, "--strategy", "balanced"];
    let out = haggle_as(&app, &buyer_key, &line).await;
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("round 1  buyer") && lines[0].contains("233.33"), "{out}");
    let thread = buyer.get_thread(buyer.list_threads(&ThreadQuery::default()).await.unwrap().data[0].id).await.unwrap();
    assert_eq!(thread.thread.status, ThreadStatus::Accepted, "{out}");
    assert!(thread.bids.iter().filter(|b| b.author == Party::Buyer).all(|b| b.amount <= 35_000), "{out}");
    assert!(thread.bids.iter().filter(|b| b.author == Party::Seller).all(|b| b.amount >= 25_000), "{out}");

    // The bayes buyer on a second lamp: opens at 35% of the ask, pays at most its budget.
    let second = seller.create_listing(&NewListing::new("Brass lamp, pair", 35_000)).await.unwrap();
    seller.set_policy(PolicyScope::Listing(second.id), &bayes).await.unwrap();
    let id = second.id.to_string();
    let out =
        haggle_as(&app, &buyer_key, &["negotiate", "--listing", &id, "--strategy", "bayes", "--budget", "32000"]).await;
    assert!(out.lines().next().unwrap().contains("122.50"), "{out}");
    let threads =
        buyer.list_threads(&ThreadQuery { listing_id: Some(second.id), ..ThreadQuery::default() }).await.unwrap();
    let thread = buyer.get_thread(threads.data[0].id).await.unwrap();
    assert!(thread.bids.iter().filter(|b| b.author == Party::Buyer).all(|b| b.amount <= 32_000), "{out}");
    assert!(thread.bids.iter().filter(|b| b.author == Party::Seller).all(|b| b.amount >= 25_000), "{out}");
    assert!(matches!(thread.thread.status, ThreadStatus::Accepted | ThreadStatus::Rejected), "{out}");
}

fn price(minor: i64) -> String {
    format!("{}.{:02}", minor / 100, minor % 100)
}

#[tokio::test]
async fn a_buyer_command_and_a_seller_command_negotiate_with_each_other() {
    let app = TestApp::spawn().await;
    let (seller, _, seller_key, buyer_key) = parties(&app).await;
    let listing = seller.create_listing(&NewListing::new("Desk lamp", 3_800)).await.unwrap();
    let id = listing.id.to_string();

    // The seller answers with the midpoint, never below 26.00: 20.00 → 29.00, which the
    // balanced buyer (up to 30.00) takes.
    let seller_side = {
        let app_base = app.base.clone();
        let id = id.clone();
        let seller_key = seller_key.clone();
        tokio::spawn(async move {
            tokio::process::Command::new(haggle_bin())
                .args(["negotiate", "--as", "seller", "--listing", &id, "--floor", "2600", "--wait", "5"])
                .env("HAGGLE_URL", app_base)
                .env("HAGGLE_API_KEY", seller_key)
                .kill_on_drop(true)
                .output()
                .await
                .unwrap()
        })
    };
    let bought = haggle_as(&app, &buyer_key, &["negotiate", "--listing", &id, "--strategy", "balanced", "--cpm"]).await;
    let sold = tokio::time::timeout(Duration::from_secs(60), seller_side).await.expect("the seller finishes").unwrap();
    let sold_out = String::from_utf8(sold.stdout).unwrap();
    assert!(sold.status.success(), "{sold_out}\n{}", String::from_utf8_lossy(&sold.stderr));

    for out in [&bought, &sold_out] {
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        assert!(lines[0].starts_with("round 1  buyer") && lines[0].contains("20.00"), "{out}");
        assert!(lines[1].starts_with("round 2  seller") && lines[1].contains("29.00"), "{out}");
        assert!(lines[2].starts_with("ACCEPTED at 29.00 USD (order "), "{out}");
    }

    // The listings and threads commands show what happened.
    let me = seller.me().await.unwrap();
    let listings = haggle_as(&app, &seller_key, &["listings", "--seller", &me.id.to_string()]).await;
    assert!(listings.starts_with("ID"), "{listings}");
    assert!(listings.contains(&id) && listings.contains("38.00 USD") && listings.contains("SOLD"), "{listings}");
    let json = haggle_as(&app, &buyer_key, &["listings", "--status", "SOLD", "--json"]).await;
    let page: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(page["data"][0]["id"], id.as_str());

    let threads = haggle_as(&app, &buyer_key, &["threads", "--role", "buyer"]).await;
    let thread = seller.list_threads(&ThreadQuery::default()).await.unwrap().data[0].id.to_string();
    assert!(threads.contains(&thread) && threads.contains("ACCEPTED") && threads.contains("29.00"), "{threads}");
    let json = haggle_as(&app, &buyer_key, &["threads", "--status", "accepted", "--json"]).await;
    let page: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(page["data"][0]["id"], thread.as_str());
    assert!(haggle_as(&app, &buyer_key, &["threads", "--role", "seller"]).await.lines().count() == 1);
}

#[tokio::test]
async fn the_default_buyer_bargains_and_says_which_strategy_it_plays() {
    let app = TestApp::spawn().await;
    let (seller, buyer, _, buyer_key) = parties(&app).await;
    // A 350.00 lamp whose seller would go down to 280.00, and counters a first bid at 299.25
    // (which the balanced profile up to the ask, the former default, took).
    let seller_policy = Policy { max_auto_rounds: 20, ..Policy::new(28_000, Strategy::Tier {}) };
    let lamp = seller.create_listing(&NewListing::new("Brass lamp", 35_000)).await.unwrap();
    seller.set_policy(PolicyScope::Listing(lamp.id), &seller_policy).await.unwrap();

    // The help says what the defaults are and why.
    let help = haggle_as(&app, "", &["negotiate", "--help"]).await;
    assert!(help.contains("[default: bayes]"), "{help}");
    assert!(help.contains("As buyer, by default: --strategy bayes, paying at most --budget"), "{help}");
    assert!(help.contains("Defaults to the listing's ask, which bayes bargains down from"), "{help}");
    assert!(help.contains("give them a budget below the ask"), "{help}");

    // No strategy and no budget: bayes, up to the ask, and it says so by name.
    let id = lamp.id.to_string();
    let (ok, out, stderr) = haggle_as_output(&app, &buyer_key, &["negotiate", "--listing", &id]).await;
    assert!(ok, "{out}\n{stderr}");
    assert!(
        stderr.contains(
            "(ask 350.00 USD), bayes: open at 35% of the ask, model the seller's floor, pay up to 350.00 USD"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("threshold"), "{stderr}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("round 1  buyer") && lines[0].contains(" 122.50 USD "), "{out}");
    assert!(lines.iter().filter(|line| line.starts_with("round")).all(|line| line.contains(" USD ")), "{out}");

    // It bargained: more than one offer, and a price below the seller's first counter.
    let thread = buyer.get_thread(buyer.list_threads(&ThreadQuery::default()).await.unwrap().data[0].id).await.unwrap();
    assert_eq!(thread.thread.status, ThreadStatus::Accepted, "{out}");
    let first_counter = thread.bids.iter().find(|bid| bid.author == Party::Seller).unwrap().amount;
    assert_eq!(first_counter, 29_925, "{out}");
    let paid = thread.bids.last().unwrap().amount;
    assert!(thread.bids.iter().filter(|bid| bid.author == Party::Buyer).count() > 1, "{out}");
    assert!(paid < first_counter && (28_000..35_000).contains(&paid), "paid {paid}:\n{out}");
    assert!(out.lines().last().unwrap().starts_with(&format!("ACCEPTED at {} USD", price(paid))), "{out}");

    // A guide profile is named as the user named it.
    let second = seller.create_listing(&NewListing::new("Brass lamp, pair", 35_000)).await.unwrap();
    seller.set_policy(PolicyScope::Listing(second.id), &seller_policy).await.unwrap();
    let id = second.id.to_string();
    let line = ["negotiate", "--listing", &id, "--strategy", "balanced", "--budget", "30000"];
    let (ok, out, stderr) = haggle_as_output(&app, &buyer_key, &line).await;
    assert!(ok, "{out}\n{stderr}");
    assert!(
        stderr.contains("balanced: open at 200.00 USD, pay up to 300.00 USD, step 20.00 USD, 5 offers"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_refusal_gives_its_amounts_in_major_units_with_the_currency() {
    let app = TestApp::spawn().await;
    let (seller, _, seller_key, _) = parties(&app).await;
    // A PUBLIC agent, below the AGENCY tier listings negotiate with by default.
    let public = Client::new(&app.base, None).unwrap().register("newcomer").await.unwrap().api_key;
    let lamp = seller.create_listing(&NewListing::new("Brass lamp", 35_000)).await.unwrap();
    let id = lamp.id.to_string();
    let (ok, _, stderr) = haggle_as_output(&app, &public, &["negotiate", "--listing", &id]).await;
    assert!(!ok, "{stderr}");
    assert!(stderr.contains("(ask 350.00 USD)"), "{stderr}");
    assert!(
        stderr.contains(
            "403 negotiation_not_allowed: negotiating on this listing takes tier AGENCY or above and yours is \
             PUBLIC; any tier may buy it at the ask of 350.00 USD with POST /v1/listings/"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("35000"), "{stderr}");

    let fixed = NewListing { negotiable: Some(false), ..NewListing::new("Fixed-price lamp", 123_456) };
    let fixed = seller.create_listing(&fixed).await.unwrap();
    let id = fixed.id.to_string();
    let (ok, _, stderr) = haggle_as_output(&app, &public, &["negotiate", "--listing", &id]).await;
    assert!(!ok, "{stderr}");
    assert!(
        stderr.contains("this listing is not negotiable; buy it at the ask of 1,234.56 USD with POST /v1/listings/"),
        "{stderr}"
    );
    assert!(!stderr.contains("123456"), "{stderr}");

    // The seller's side names its floor and the ask the same way.
    let mine = seller.create_listing(&NewListing::new("Desk lamp", 3_800)).await.unwrap();
    let id = mine.id.to_string();
    let line = ["negotiate", "--as", "seller", "--listing", &id, "--floor", "4000"];
    let (ok, _, stderr) = haggle_as_output(&app, &seller_key, &line).await;
    assert!(!ok && stderr.contains("--floor (40.00 USD) is above the ask (38.00 USD)"), "{stderr}");
}

#[tokio::test]
async fn an_id_that_is_not_one_is_refused_with_what_was_expected() {
    let app = TestApp::spawn().await;
    let (_, _, _, buyer_key) = parties(&app).await;
    for (line, flag, expected) in [
        (&["negotiate", "--listing", "not-a-uuid"][..], "--listing", "expected a listing id"),
        (&["threads", "--listing", "not-a-uuid"], "--listing", "expected a listing id"),
        (&["listings", "--seller", "not-a-uuid"], "--seller", "expected an agent id"),
        (&["listings", "--cursor", "not-a-uuid"], "--cursor", "expected a cursor"),
        (&["threads", "--cursor", "not-a-uuid"], "--cursor", "expected a cursor"),
    ] {
        let (ok, _, stderr) = haggle_as_output(&app, &buyer_key, line).await;
        assert!(!ok, "{line:?}");
        assert!(
            stderr.contains(flag) && stderr.contains("not-a-uuid") && stderr.contains(expected),
            "{line:?}: {stderr}"
        );
        assert!(stderr.contains("a UUID such as 0192f5a8-1b2c-7d3e-8f40-5a6b7c8d9e0f"), "{line:?}: {stderr}");
        assert!(!stderr.contains("invalid character"), "{line:?}: {stderr}");
    }
}

#[tokio::test]
async fn the_bench_carries_deals_through_and_times_held_moves_beside_direct_ones() {
    let app = TestApp::spawn().await;
    let deals = ["--workload", "deals", "--concurrency", "2", "--negotiations", "4", "--warmup", "1"];
    let printed = bench(&app, &deals).await;
    assert!(printed.contains("== haggle bench: deals, concurrency 2 =="), "{printed}");
    assert!(printed.contains("errors       none"), "{printed}");
    for call in ["pay", "confirm", "fulfil", "open", "complete"] {
        assert!(printed.lines().any(|line| line.starts_with(call)), "{call}: {printed}");
    }
    // Every deal (the warm-up's too) scheduled, paid in full by its plan of two installments,
    // refunded what was agreed, and completed.
    let settled = "SELECT count(*) FROM orders
                   WHERE status = 'COMPLETED' AND paid_amount = amount AND refunded_amount = 8000
                     AND appointment_start IS NOT NULL AND jsonb_array_length(plan) = 2";
    assert_eq!(app.count(settled).await, 5);
    assert_eq!(app.count("SELECT count(*) FROM payments WHERE status = 'CONFIRMED'").await, 10);

    let approvals = ["--workload", "approvals", "--concurrency", "2", "--negotiations", "4", "--warmup", "0"];
    let printed = bench(&app, &approvals).await;
    assert!(printed.contains("errors       none"), "{printed}");
    assert!(printed.contains("held move    median") && printed.contains("made directly:"), "{printed}");
    // Each held acceptance made by its approval, and only those carry one.
    let approved = "SELECT count(*) FROM approvals WHERE status = 'APPROVED' AND made_order_id IS NOT NULL";
    assert_eq!(app.count(approved).await, 4);
    assert_eq!(app.count("SELECT count(*) FROM orders WHERE approval IS NOT NULL").await, 4);
}

#[tokio::test]
async fn haggle_order_prints_the_orders_payments_negotiations_and_timeline() {
    use serde_json::json;
    let app = TestApp::spawn().await;
    let deal = crate::support::Deal::new(&app, json!({})).await;
    let bought = app.post_empty(format!("/v1/listings/{}/purchase", deal.listing), &deal.buyer.key).await.expect(201);
    let order = bought.body["order"]["id"].as_str().unwrap().to_owned();
    let paid = json!({ "amount": 100000, "reference": "ch_cli" });
    let payment = app.post(format!("/v1/orders/{order}/payments"), &deal.buyer.key, paid).await.expect(201);
    let payment = payment.body["payment"]["id"].as_str().unwrap().to_owned();
    app.post_empty(format!("/v1/orders/{order}/payments/{payment}/confirm"), &deal.seller.key).await.expect(200);
    let refund = json!({ "kind": "refund", "amount": 25000, "terms": { "reason": "late" } });
    let opened = app.post(format!("/v1/orders/{order}/negotiations"), &deal.buyer.key, refund).await.expect(201);
    let bid = opened.body["bid"]["id"].as_str().unwrap().to_owned();
    let thread = opened.body["thread"]["id"].as_str().unwrap().to_owned();
    app.post_empty(format!("/v1/bids/{bid}/accept"), &deal.seller.key).await.expect(200);

    let out = haggle_as(&app, &deal.buyer.key, &["order", &order]).await;
    for shown in [
        "refunded 250.00 USD",
        "ch_cli",
        "CONFIRMED",
        thread.as_str(),
        "refund",
        "ACCEPTED",
        "order made",
        "payment confirmed",
        "refund opened",
        "the buyer opened with 250.00 USD",
        "refund agreed",
        "recorded as refunded",
    ] {
        assert!(out.contains(shown), "{shown:?} missing from:\n{out}");
    }
    // The timeline is in order: the order before its payment, the payment before the refund.
    let at = |text: &str| out.find(text).unwrap();
    assert!(at("order made") < at("payment recorded") && at("payment confirmed") < at("refund agreed"), "{out}");
}
