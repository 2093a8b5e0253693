//! The embedded database: `haggle serve` without DATABASE_URL runs its own PostgreSQL, stops it
//! on SIGTERM, and finds its data again on the next start.

use std::path::Path;

use serde_json::{Value, json};

use crate::support::{ServerProcess, haggle_bin, scratch_dir};

fn postmaster_running(data: &Path) -> bool {
    data.join("postgres").join("postmaster.pid").exists()
}

#[tokio::test]
async fn the_embedded_database_starts_stops_and_keeps_its_data() {
    let dir = scratch_dir();
    let data = dir.path().join("data");
    let data_str = data.to_str().unwrap();
    let client = reqwest::Client::new();

    let mut first = ServerProcess::spawn(&[("HAGGLE_DATA_DIR", data_str)]);
    let ready = client.get(format!("{}/readyz", first.base)).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    let registered: Value = client
        .post(format!("{}/v1/agents", first.base))
        .json(&json!({ "name": "survivor" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let key = registered["api_key"].as_str().unwrap().to_owned();
    assert!(postmaster_running(&data), "PostgreSQL runs while haggle does");
    let status = first.terminate();
    assert!(status.success(), "haggle exits cleanly on SIGTERM: {status:?}\n{}", first.log());
    assert!(!postmaster_running(&data), "PostgreSQL stopped with haggle:\n{}", first.log());

    let mut second = ServerProcess::spawn(&[("HAGGLE_DATA_DIR", data_str)]);
    let me = client.get(format!("{}/v1/agents/me", second.base)).bearer_auth(&key).send().await.unwrap();
    assert_eq!(me.status(), 200, "the first run's agent is still there");
    let me: Value = me.json().await.unwrap();
    assert_eq!(me["name"], "survivor");
    assert!(second.terminate().success());
    assert!(!postmaster_running(&data));
}

#[test]
fn without_server_binaries_haggle_names_the_ways_out() {
    let dir = scratch_dir();
    let empty = dir.path().join("no-binaries");
    std::fs::create_dir_all(&empty).unwrap();
    let output = std::process::Command::new(haggle_bin())
        .arg("migrate")
        .env_remove("DATABASE_URL")
        .env("HAGGLE_DATA_DIR", dir.path().join("data"))
        .env("HAGGLE_POSTGRES_BIN_DIR", &empty)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    for way_out in ["install PostgreSQL", "DATABASE_URL", "docker compose up"] {
        assert!(stderr.contains(way_out), "the message names `{way_out}`:\n{stderr}");
    }
}

#[tokio::test]
async fn a_second_server_on_the_same_data_directory_is_refused_and_the_first_keeps_serving() {
    let dir = scratch_dir();
    let data = dir.path().join("data");
    let data_str = data.to_str().unwrap();
    let client = reqwest::Client::new();
    let mut first = ServerProcess::spawn(&[("HAGGLE_DATA_DIR", data_str)]);

    let second = std::process::Command::new(haggle_bin())
        .arg("serve")
        .env_remove("DATABASE_URL")
        .env("HAGGLE_DATA_DIR", data_str)
        .env("HAGGLE_BIND", "127.0.0.1:0")
        .output()
        .unwrap();
    assert!(!second.status.success());
    assert!(String::from_utf8_lossy(&second.stderr).contains("another haggle server is using the data directory"));

    // An operator command shares the directory and leaves the server's PostgreSQL running.
    let created = std::process::Command::new(haggle_bin())
        .args(["admin", "create-agent", "--name", "ops"])
        .env_remove("DATABASE_URL")
        .env("HAGGLE_DATA_DIR", data_str)
        .output()
        .unwrap();
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    let created: Value = serde_json::from_slice(&created.stdout).unwrap();

    let me = client
        .get(format!("{}/v1/agents/me", first.base))
        .bearer_auth(created["api_key"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(me.status(), 200, "the first server still serves, with the command's agent");
    assert!(first.terminate().success());
    assert!(!postmaster_running(&data));
}
