//! What can be checked of the deployment files without a container engine.

use serde_json::Value;

fn yaml(path: &str) -> Value {
    let text = std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn compose_runs_postgres_and_haggle_with_health_checks_and_a_named_volume() {
    let compose = yaml("docker-compose.yml");
    let services = &compose["services"];
    let postgres = &services["postgres"];
    let haggle = &services["haggle"];
    assert!(postgres["healthcheck"]["test"].to_string().contains("pg_isready"));
    assert!(haggle["healthcheck"]["test"].to_string().contains("healthcheck"));
    assert_eq!(haggle["depends_on"]["postgres"]["condition"], "service_healthy");
    assert!(haggle["ports"].to_string().contains("8080:8080"));
    let volume = postgres["volumes"][0].as_str().unwrap().split(':').next().unwrap().to_owned();
    assert!(compose["volumes"].get(&volume).is_some(), "postgres keeps its data in the named volume {volume}");

    // Every variable compose sets is one the server reads.
    let help = std::process::Command::new(crate::support::haggle_bin()).args(["serve", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for name in haggle["environment"].as_object().unwrap().keys() {
        assert!(help.contains(&format!("env: {name}")) || name == "RUST_LOG", "haggle serve does not read {name}");
    }
}

#[test]
fn the_dockerfile_builds_in_stages_and_runs_unprivileged() {
    let dockerfile = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Dockerfile")).unwrap();
    assert!(dockerfile.matches("\nFROM ").count() + usize::from(dockerfile.starts_with("FROM ")) >= 2, "multi-stage");
    assert!(dockerfile.contains("cargo build --release --locked"));
    assert!(dockerfile.contains("\nUSER "), "runs as an unprivileged user");
    assert!(
        dockerfile.contains("HEALTHCHECK")
            || yaml("docker-compose.yml")["services"]["haggle"]["healthcheck"].is_object()
    );
}
