//! `haggle sim` as a user runs it: in-process with no server, or with `--http` against one.

use std::process::Command;

use serde_json::Value;

use crate::support::{ADMIN_TOKEN, TestApp, haggle_bin};

fn sim(args: &[&str]) -> std::process::Output {
    Command::new(haggle_bin()).arg("sim").args(args).env("RUST_LOG", "warn").output().unwrap()
}

#[test]
fn a_seeded_market_writes_the_same_report_twice() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str| {
        let json = dir.path().join(name);
        let charts = dir.path().join(format!("{name}-svg"));
        let output = sim(&[
            "--seed",
            "5",
            "--buyers",
            "balanced:4,adaptive:3,tft:2",
            "--sellers",
            "tier:3,split:2,time-boulware:2",
            "--learn",
            "q",
            "--episodes",
            "2000",
            "--json",
            json.to_str().unwrap(),
            "--svg",
            charts.to_str().unwrap(),
        ]);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(stderr.contains("training: 200/2000 episodes (10%)"), "progress goes to stderr: {stderr}");
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(!stdout.contains("training: "), "no progress on stdout");
        (std::fs::read(&json).unwrap(), std::fs::read(charts.join("training.svg")).unwrap(), stdout)
    };
    let (first, first_chart, stdout) = run("a.json");
    let (second, second_chart, _) = run("b.json");
    assert_eq!(first, second, "same seed, same bytes");
    assert_eq!(first_chart, second_chart);
    assert!(stdout.contains("agreement rate over feasible pairs"), "{stdout}");
    assert!(stdout.contains("tournament"), "{stdout}");

    let summary: Value = serde_json::from_slice(&first).unwrap();
    assert_eq!(summary["overall"]["negotiations"], (9 + 4) * (7 + 3));
    assert_eq!(summary["overall"]["deals_infeasible"], 0);
    assert_eq!(summary["overall"]["limit_violations"], 0);
    assert_eq!(summary["overall"]["rule_breaks"], 0);
    assert!(summary["buyers"].as_array().unwrap().iter().any(|b| b["strategy"] == "q"));
}

#[test]
fn a_bad_mix_is_refused_with_the_strategies_named() {
    let output = sim(&["--buyers", "haggler:3"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unknown buyer strategy `haggler`") && stderr.contains("adaptive"), "{stderr}");
}

/// `haggle sim` as a child process that does not block the runtime serving the test's server.
async fn sim_against(args: &[&str]) -> std::process::Output {
    tokio::process::Command::new(haggle_bin())
        .arg("sim")
        .args(args)
        .env("RUST_LOG", "warn")
        .env_remove("HAGGLE_URL")
        .env_remove("HAGGLE_ADMIN_TOKEN")
        .output()
        .await
        .unwrap()
}

async fn count(app: &TestApp, query: &str) -> i64 {
    sqlx::query_scalar::<_, i64>(query).fetch_one(&app.pool).await.unwrap()
}

/// A small market with deals and failures, a round limit that is reached, and learned agents.
const SMALL_MARKET: [&str; 14] = [
    "--seed",
    "9",
    "--buyers",
    "balanced:2,adaptive:1,tft:1",
    "--sellers",
    "tier:2,split:1",
    "--rounds",
    "2",
    "--max-rounds",
    "6",
    "--learn",
    "q",
    "--episodes",
    "600",
];

#[tokio::test]
async fn a_market_over_http_reports_what_the_in_process_market_does() {
    let app = TestApp::spawn().await;
    let dir = tempfile::tempdir().unwrap();
    let (local_json, remote_json) = (dir.path().join("local.json"), dir.path().join("remote.json"));

    let local = sim_against(&[&SMALL_MARKET[..], &["--json", local_json.to_str().unwrap()]].concat()).await;
    assert!(local.status.success(), "{}", String::from_utf8_lossy(&local.stderr));
    let remote = sim_against(
        &[
            &SMALL_MARKET[..],
            &[
                "--json",
                remote_json.to_str().unwrap(),
                "--http",
                &app.base,
                "--admin-token",
                ADMIN_TOKEN,
                "--concurrency",
                "4",
            ],
        ]
        .concat(),
    )
    .await;
    let stderr = String::from_utf8_lossy(&remote.stderr);
    assert!(remote.status.success(), "{stderr}");

    // The same draws, the same strategies, the same rules: the same report, byte for byte.
    let (local_bytes, remote_bytes) = (std::fs::read(&local_json).unwrap(), std::fs::read(&remote_json).unwrap());
    assert_eq!(String::from_utf8_lossy(&remote_bytes), String::from_utf8_lossy(&local_bytes));
    assert_eq!(String::from_utf8_lossy(&remote.stdout), String::from_utf8_lossy(&local.stdout));
    assert!(stderr.contains("training: "), "training stays in-process: {stderr}");
    assert!(stderr.contains("registered 11 agents"), "{stderr}");
    assert!(stderr.contains("market over HTTP: 60/60 negotiations (100%)"), "{stderr}");

    // It was played on the server: 4 + 2 q buyers and 3 + 2 q sellers, a listing per
    // negotiation, an order per deal, and the buyers raised to the tier the listings ask for.
    let summary: Value = serde_json::from_slice(&remote_bytes).unwrap();
    let overall = &summary["overall"];
    assert_eq!(overall["negotiations"], 6 * 5 * 2);
    let deals = overall["deals"].as_i64().unwrap();
    assert!(deals > 0 && deals < 60, "some deals, not all: {overall}");
    assert_eq!((overall["rule_breaks"].as_i64(), overall["limit_violations"].as_i64()), (Some(0), Some(0)));
    assert_eq!(count(&app, "SELECT count(*) FROM agents").await, 11);
    assert_eq!(count(&app, "SELECT count(*) FROM agents WHERE tier = 'AGENCY'").await, 6);
    assert_eq!(count(&app, "SELECT count(*) FROM listings").await, 60);
    assert_eq!(count(&app, "SELECT count(*) FROM orders").await, deals);
    assert_eq!(count(&app, "SELECT count(*) FROM listings WHERE status = 'SOLD'").await, deals);
    assert_eq!(count(&app, "SELECT count(*) FROM threads WHERE status = 'ACCEPTED'").await, deals);
    // Bids per negotiation, as the server counts them.
    let bids = count(&app, "SELECT count(*) FROM bids").await;
    let mean_rounds = overall["mean_rounds"].as_f64().unwrap();
    assert!((bids as f64 / 60.0 - mean_rounds).abs() < 1e-6, "{bids} bids, mean rounds {mean_rounds}");
}

#[tokio::test]
async fn a_market_over_http_explains_what_it_lacks() {
    let app = TestApp::spawn().await;
    let market = ["--buyers", "balanced:1", "--sellers", "split:1", "--http", &app.base];

    let wrong = sim_against(&[&market[..], &["--admin-token", "not-the-token"]].concat()).await;
    assert!(!wrong.status.success());
    let stderr = String::from_utf8_lossy(&wrong.stderr);
    assert!(
        stderr.contains("the server refused the admin token")
            && stderr.contains("--admin-token")
            && stderr.contains("HAGGLE_ADMIN_TOKEN")
            && stderr.contains("AGENCY tier"),
        "{stderr}"
    );

    let missing = sim_against(&market).await;
    assert!(!missing.status.success());
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(stderr.contains("needs the server's operator token") && stderr.contains("--tier PUBLIC"), "{stderr}");
    // Nothing was registered before the token was found wanting.
    assert_eq!(count(&app, "SELECT count(*) FROM agents").await, 0);

    // Nobody listening (a port just freed).
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let gone = sim_against(&["--http", &format!("http://127.0.0.1:{port}"), "--tier", "PUBLIC"]).await;
    assert!(!gone.status.success());
    let stderr = String::from_utf8_lossy(&gone.stderr);
    assert!(stderr.contains("cannot reach a Haggle server at") && stderr.contains("haggle serve"), "{stderr}");
}

#[tokio::test]
async fn a_server_closed_to_registration_is_named() {
    let app = TestApp::spawn_with(|config| config.settings.open_registration = false).await;
    // PUBLIC buyers need no admin token; the listings are open to them.
    let output =
        sim_against(&["--buyers", "split:1", "--sellers", "split:1", "--tier", "PUBLIC", "--http", &app.base]).await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("does not take registrations") && stderr.contains("HAGGLE_OPEN_REGISTRATION=true"),
        "{stderr}"
    );
}

#[tokio::test]
async fn public_buyers_play_over_http_without_an_admin_token() {
    let app = TestApp::spawn().await;
    let market = ["--seed", "3", "--buyers", "split:2,time-linear:1", "--sellers", "tier:1,step:1", "--tier", "PUBLIC"];
    let local = sim_against(&market).await;
    assert!(local.status.success(), "{}", String::from_utf8_lossy(&local.stderr));
    // `--http` alone reads HAGGLE_URL.
    let remote = tokio::process::Command::new(haggle_bin())
        .arg("sim")
        .args(market)
        .arg("--http")
        .env("RUST_LOG", "warn")
        .env("HAGGLE_URL", &app.base)
        .env_remove("HAGGLE_ADMIN_TOKEN")
        .output()
        .await
        .unwrap();
    assert!(remote.status.success(), "{}", String::from_utf8_lossy(&remote.stderr));
    assert_eq!(String::from_utf8_lossy(&remote.stdout), String::from_utf8_lossy(&local.stdout));
    assert_eq!(count(&app, "SELECT count(*) FROM agents WHERE tier = 'PUBLIC'").await, 5);
}

#[test]
fn the_tournament_is_the_same_bytes_for_the_same_seeds() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, seed: &str| {
        let json = dir.path().join(format!("{name}.json"));
        let charts = dir.path().join(format!("{name}-svg"));
        let output = sim(&[
            "--tournament",
            "--seeds",
            "3",
            "--seed",
            seed,
            "--buyers",
            "balanced:4,bayes:4,competitive:2",
            "--sellers",
            "tier:3,tft:2,bayes:3",
            "--json",
            json.to_str().unwrap(),
            "--svg",
            charts.to_str().unwrap(),
        ]);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        (
            output.stdout,
            std::fs::read(&json).unwrap(),
            std::fs::read(charts.join("tournament_buyers.svg")).unwrap(),
            std::fs::read(charts.join("tournament_sellers.svg")).unwrap(),
        )
    };
    let a = run("a", "4");
    assert_eq!(a, run("b", "4"), "same seeds, same bytes");
    assert_ne!(a.1, run("c", "5").1, "the seeds matter");
    let report: Value = serde_json::from_slice(&a.1).unwrap();
    assert_eq!(report["seeds"], serde_json::json!([4, 5, 6]));
    let text = String::from_utf8(a.0).unwrap();
    assert!(text.contains("relative to balanced") && text.contains("relative to tier"), "{text}");
    // The baseline against itself is exactly 1 in every seed; every other row has an interval.
    let rows = report["buyer_side"]["rows"].as_array().unwrap();
    let balanced = rows.iter().find(|r| r["strategy"] == "balanced" && r["opponent"] == "all").unwrap();
    assert_eq!(balanced["ratio_to_baseline"]["mean"], 1.0);
    let bayes = rows.iter().find(|r| r["strategy"] == "bayes" && r["opponent"] == "tier").unwrap();
    assert!(
        bayes["ratio_to_baseline"]["low"].as_f64().unwrap() <= bayes["ratio_to_baseline"]["high"].as_f64().unwrap()
    );
    assert_eq!(bayes["ratio_to_baseline"]["n"], 3);
}

#[test]
fn a_trained_table_is_exported_as_policy_strategies() {
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("tables.json");
    let output = sim(&["--seed", "2", "--learn", "q", "--episodes", "500", "--export", export.to_str().unwrap()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let tables: Value = serde_json::from_slice(&std::fs::read(&export).unwrap()).unwrap();
    for side in ["buyer", "seller"] {
        let strategy: haggle_domain::strategy::Strategy = serde_json::from_value(tables[side].clone()).unwrap();
        let policy = haggle_domain::strategy::Policy::new(5_000, strategy);
        let party = if side == "buyer" { haggle_domain::Party::Buyer } else { haggle_domain::Party::Seller };
        assert!(policy.validate(party, None, Default::default()).is_ok(), "{side}");
    }
    // --export needs tables to export.
    let output = sim(&["--export", export.to_str().unwrap()]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("--learn"));
}
